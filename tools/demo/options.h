// Demo options: the command line, and the settings each model runs with once the device's defaults
// fill in what the command line left out (small on the CPU, larger on a GPU).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnserve/runtime.h"

namespace demo {

enum class ModelKind { dense, deepseek };
inline const char* to_string(ModelKind m) { return m == ModelKind::dense ? "dense" : "deepseek"; }

// What the command line says; unset values take the device's defaults (resolve()).
struct Options {
  std::vector<ModelKind> models{ModelKind::dense, ModelKind::deepseek};
  std::optional<attnserve::DeviceType> device;  // unset: CUDA if a GPU is present, else the CPU
  std::optional<int> requests, min_prompt, max_prompt, max_output, layers, heads, index_heads, topk;
  std::optional<int> max_bs, prefill_budget, kv_tokens, local_chunk, check_every, progress_every;
  std::optional<int> spec_steps, draft_tokens, spec_max_bs, graph_max_bs, eagle_topk;
  bool spec = true;
  uint64_t seed = 1;
  bool quiet = false;
  bool help = false;
};

// Everything one model's run needs, resolved.
struct Settings {
  ModelKind model = ModelKind::dense;
  attnserve::Device device{};
  // Workload.
  int requests = 0, min_prompt = 0, max_prompt = 0, max_output = 0, arrival_gap = 0;
  // Model shape.
  int layers = 0;       // target layers (the draft model has one)
  int heads = 0;        // query heads (dense: 32 Llama-3-8B; DeepSeek-V3.2: 128)
  int kv_heads = 0;     // dense only
  int head_dim = 0;     // dense only
  int index_heads = 0;  // DeepSeek only: lightning-indexer heads (64), head dim 128
  int topk = 0;         // DeepSeek only: nsa_index_topk (2048)
  int local_chunk = 0;  // dense only: attention_chunk_size of the local layers (0: none)
  int page_size = 0;
  // Server.
  int max_bs = 0, prefill_budget = 0, kv_tokens = 0;
  bool spec = true;
  int spec_steps = 0, draft_tokens = 0, spec_max_bs = 0;
  int spec_topk = 1;     // EAGLE branches per draft step; > 1: draft trees of draft_tokens tokens
  int graph_max_bs = 0;  // decode-like batches up to this size replay captured metadata (0: none)
  // Demo.
  uint64_t seed = 1;
  int check_every = 0, progress_every = 0;
  int check_rows = 0;  // rows the oracle recomputes per checked pass and layer
  bool quiet = false;

  int max_context() const { return max_prompt + max_output + draft_tokens; }
};

inline const char* kUsage =
    "usage: attnserve_demo [options]\n"
    "\n"
    "A serving trace through the whole stack: requests arrive with random prompt and output lengths; a\n"
    "scheduler admits them while the KV pool has room, runs chunked prefill (extend with prefix), decode and\n"
    "EAGLE rounds (draft decode, target verify, draft extend), frees finished requests, and checks a sample\n"
    "of the attention passes against an fp64 brute-force oracle. There are no weights: every token's\n"
    "activations are random, deterministic in (seed, layer, token, position), so any pass can be recomputed.\n"
    "\n"
    "  --model dense|deepseek|both   model shape (default both)\n"
    "        dense:    Llama-3-8B-like GQA, h_q 32, h_kv 8, d 128, bf16 KV, page 16, odd layers local\n"
    "        deepseek: DeepSeek-V3.2 sparse MLA 576/512, indexer 64 x 128, top-k, FP8-656 KV, page 64\n"
    "  --device cpu|cuda             default: cuda when a GPU is present, else cpu\n"
    "  --requests N                  requests in the trace\n"
    "  --min-prompt N --max-prompt N prompt lengths, uniform in [min, max]\n"
    "  --max-output N                output lengths, uniform in [1, max]\n"
    "  --layers N                    target layers (the draft model has one)\n"
    "  --heads N                     query heads (default dense 32; deepseek 128 on cuda, fewer on cpu)\n"
    "  --index-heads N --topk N      DeepSeek indexer heads (64) and top-k (2048 on cuda, smaller on cpu)\n"
    "  --local-chunk N               dense: chunk of the local (chunked) layers, 0 = none\n"
    "  --max-bs N                    requests running at once (batch size cap)\n"
    "  --prefill-budget N            prefill tokens per step (chunked prefill)\n"
    "  --kv-tokens N                 KV pool size in tokens\n"
    "  --spec on|off                 EAGLE speculative decoding (default on)\n"
    "  --steps N --draft-tokens N    EAGLE num_steps and draft tokens (default 3 and steps + 1)\n"
    "  --eagle-topk N                EAGLE draft trees: N branches per draft step and a tree of draft-tokens\n"
    "                                (<= 64; default 1 + N x (steps - 1)) verified at once; default 1 (chains).\n"
    "                                The dense model then has no local layers\n"
    "  --spec-max-bs N               decode batches larger than this decode plainly (default 3/4 of max-bs)\n"
    "  --graph-max-bs N              decode-like batches up to N run on captured CUDA-graph metadata,\n"
    "                                replayed each step (padded batch sizes); larger ones plan eagerly.\n"
    "                                Default max-bs / 2; 0 = always eager\n"
    "  --seed N                      workload and activations (default 1)\n"
    "  --check-every N               check every Nth forward pass (and the first of each mode)\n"
    "  --progress-every N            a progress line every N scheduler steps\n"
    "  --quiet                       no progress lines\n"
    "  --help\n"
    "\n"
    "Defaults depend on the device: a trace of seconds on the CPU (fewer DeepSeek heads, top-k 256 so that\n"
    "contexts both fit and exceed it), real shapes and sizes on a GPU. Each model's header line prints them.\n"
    "Exit status: 0 when every request finished and every check passed, 1 on a mismatch, 2 on an error.\n";

inline int parse_int(const std::string& flag, const char* text) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used != std::string(text).size() || v < 0 || v > (1LL << 30)) throw std::invalid_argument("");
    return int(v);
  } catch (const std::exception&) {
    throw std::invalid_argument(flag + ": expected a non-negative integer, got '" + text + "'");
  }
}

inline Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) throw std::invalid_argument(a + ": missing value");
      return argv[++i];
    };
    auto integer = [&](std::optional<int>& dst) { dst = parse_int(a, value()); };
    if (a == "--help" || a == "-h") o.help = true;
    else if (a == "--quiet" || a == "-q") o.quiet = true;
    else if (a == "--model") {
      const std::string m = value();
      if (m == "dense") o.models = {ModelKind::dense};
      else if (m == "deepseek") o.models = {ModelKind::deepseek};
      else if (m == "both") o.models = {ModelKind::dense, ModelKind::deepseek};
      else throw std::invalid_argument("--model: expected dense, deepseek or both, got '" + m + "'");
    } else if (a == "--device") {
      const std::string d = value();
      if (d == "cpu") o.device = attnserve::DeviceType::cpu;
      else if (d == "cuda") o.device = attnserve::DeviceType::cuda;
      else throw std::invalid_argument("--device: expected cpu or cuda, got '" + d + "'");
    } else if (a == "--spec") {
      const std::string s = value();
      if (s != "on" && s != "off") throw std::invalid_argument("--spec: expected on or off, got '" + s + "'");
      o.spec = s == "on";
    } else if (a == "--seed") {
      const std::string s = value();
      try {
        o.seed = std::stoull(s);
      } catch (const std::exception&) {
        throw std::invalid_argument("--seed: expected an integer, got '" + s + "'");
      }
    } else if (a == "--requests") integer(o.requests);
    else if (a == "--min-prompt") integer(o.min_prompt);
    else if (a == "--max-prompt") integer(o.max_prompt);
    else if (a == "--max-output") integer(o.max_output);
    else if (a == "--layers") integer(o.layers);
    else if (a == "--heads") integer(o.heads);
    else if (a == "--index-heads") integer(o.index_heads);
    else if (a == "--topk") integer(o.topk);
    else if (a == "--local-chunk") integer(o.local_chunk);
    else if (a == "--max-bs") integer(o.max_bs);
    else if (a == "--prefill-budget") integer(o.prefill_budget);
    else if (a == "--kv-tokens") integer(o.kv_tokens);
    else if (a == "--steps") integer(o.spec_steps);
    else if (a == "--draft-tokens") integer(o.draft_tokens);
    else if (a == "--eagle-topk") integer(o.eagle_topk);
    else if (a == "--spec-max-bs") integer(o.spec_max_bs);
    else if (a == "--graph-max-bs") integer(o.graph_max_bs);
    else if (a == "--check-every") integer(o.check_every);
    else if (a == "--progress-every") integer(o.progress_every);
    else throw std::invalid_argument("unknown option '" + a + "' (see --help)");
  }
  return o;
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

// The device's defaults for what the command line left out, then the checks that make the run valid.
inline Settings resolve(const Options& o, ModelKind model, attnserve::Device device) {
  const bool gpu = device.is_cuda(), dense = model == ModelKind::dense;
  Settings s;
  s.model = model;
  s.device = device;
  s.seed = o.seed;
  s.quiet = o.quiet;
  s.spec = o.spec;
  // Workload: on the CPU a trace that finishes in seconds; on a GPU a few hundred steps of real sizes.
  if (dense) {
    s.requests = o.requests.value_or(gpu ? 96 : 16);
    s.min_prompt = o.min_prompt.value_or(gpu ? 64 : 8);
    s.max_prompt = o.max_prompt.value_or(gpu ? 4096 : 224);
    s.max_output = o.max_output.value_or(gpu ? 256 : 32);
    s.layers = o.layers.value_or(gpu ? 4 : 2);
    s.heads = o.heads.value_or(32);
    s.kv_heads = 8;
    s.head_dim = 128;
    s.page_size = 16;
    // Draft trees need full-attention layers (the dense backend has no trees on local layers yet).
    s.local_chunk = o.local_chunk.value_or(o.spec && o.eagle_topk.value_or(1) > 1 ? 0 : gpu ? 1024 : 64);
    s.max_bs = o.max_bs.value_or(gpu ? 48 : 8);
    s.prefill_budget = o.prefill_budget.value_or(gpu ? 8192 : 128);
  } else {
    s.requests = o.requests.value_or(gpu ? 32 : 10);
    s.min_prompt = o.min_prompt.value_or(gpu ? 256 : 8);
    s.max_prompt = o.max_prompt.value_or(gpu ? 4096 : 512);
    s.max_output = o.max_output.value_or(gpu ? 128 : 24);
    s.layers = o.layers.value_or(gpu ? 2 : 2);
    s.heads = o.heads.value_or(gpu ? 128 : 16);
    s.index_heads = o.index_heads.value_or(64);
    s.topk = o.topk.value_or(gpu ? 2048 : 256);
    s.page_size = 64;
    s.max_bs = o.max_bs.value_or(gpu ? 32 : 6);
    s.prefill_budget = o.prefill_budget.value_or(gpu ? 4096 : 256);
  }
  s.arrival_gap = gpu ? 2 : 1;
  s.spec_steps = o.spec_steps.value_or(3);
  s.spec_topk = s.spec ? o.eagle_topk.value_or(1) : 1;
  const int default_draft = s.spec_topk > 1 ? std::min(64, 1 + s.spec_topk * (s.spec_steps - 1)) : s.spec_steps + 1;
  s.draft_tokens = s.spec ? o.draft_tokens.value_or(default_draft) : 0;
  s.spec_max_bs = o.spec_max_bs.value_or(std::max(1, s.max_bs * 3 / 4));
  s.graph_max_bs = o.graph_max_bs.value_or(std::max(1, s.max_bs / 2));
  s.check_every = o.check_every.value_or(gpu ? 32 : 3);
  s.progress_every = o.progress_every.value_or(gpu ? 25 : 5);
  s.check_rows = gpu ? 3 : 6;
  // The pool holds about half of what the admitted requests could need at most: requests queue.
  int per_request = s.max_prompt + s.max_output + std::max(s.draft_tokens, s.spec_steps) + s.page_size;
  if (s.spec_topk > 1) per_request += (s.spec_topk - 1) * (2 * s.page_size + s.spec_steps);  // other branches
  s.kv_tokens = o.kv_tokens.value_or(std::max(per_request * std::max(1, s.max_bs / 2), 2 * per_request));

  require(s.requests >= 1, "--requests must be >= 1");
  require(s.min_prompt >= 1 && s.min_prompt <= s.max_prompt, "--min-prompt must be in [1, max-prompt]");
  require(s.max_output >= 1, "--max-output must be >= 1");
  require(s.layers >= 1, "--layers must be >= 1");
  require(s.max_bs >= 1, "--max-bs must be >= 1");
  require(s.prefill_budget >= 1, "--prefill-budget must be >= 1");
  require(s.graph_max_bs <= s.max_bs, "--graph-max-bs must be <= max-bs");
  require(s.kv_tokens >= per_request, "--kv-tokens " + std::to_string(s.kv_tokens) +
                                          " cannot hold one request of max-prompt + max-output + draft tokens (" +
                                          std::to_string(per_request) + " with a page of slack)");
  if (s.spec) {
    require(s.spec_steps >= 2, "--steps must be >= 2 (the last draft step only samples)");
    require(s.spec_topk >= 1, "--eagle-topk must be >= 1");
    if (s.spec_topk == 1)
      require(s.draft_tokens >= 2 && s.draft_tokens <= s.spec_steps + 1,
              "--draft-tokens must be in [2, steps + 1] (the pending token and the drafted ones)");
    else
      require(s.draft_tokens >= 2 && s.draft_tokens <= 64 && s.spec_topk * (s.spec_steps - 1) <= 64,
              "draft trees: --draft-tokens must be in [2, 64] and eagle-topk x (steps - 1) <= 64");
  }
  if (dense) {
    require(s.heads >= 1 && s.heads % s.kv_heads == 0, "--heads must be a multiple of 8 (h_kv) for the dense model");
    require(s.local_chunk % s.page_size == 0, "--local-chunk must be a multiple of the page size 16");
    require(s.spec_topk == 1 || s.local_chunk == 0,
            "--eagle-topk > 1 needs --local-chunk 0 (no trees on local layers)");
  } else {
    require(s.heads >= 1, "--heads must be >= 1");
    require(s.index_heads >= 1, "--index-heads must be >= 1");
    require(s.topk >= 1, "--topk must be >= 1");
  }
  return s;
}

}  // namespace demo
