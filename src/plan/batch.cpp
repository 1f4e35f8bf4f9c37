#include "attnserve/batch.h"

namespace attnserve {

const char* to_string(ForwardMode m) {
  switch (m) {
    case ForwardMode::idle: return "idle";
    case ForwardMode::decode: return "decode";
    case ForwardMode::extend: return "extend";
    case ForwardMode::draft_decode: return "draft_decode";
    case ForwardMode::target_verify: return "target_verify";
    case ForwardMode::draft_extend: return "draft_extend";
  }
  return "?";
}

bool is_graph_capturable(ForwardMode m) {
  return m == ForwardMode::decode || m == ForwardMode::draft_decode || m == ForwardMode::target_verify ||
         m == ForwardMode::draft_extend;
}

}  // namespace attnserve
