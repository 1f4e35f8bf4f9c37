// CPU: per 1 x group FP8 e4m3 quantization of activations (DeepSeek-V3.2 indexer q/k).
// scale = fp8_pow2_scale(amax) = max(amax, 1e-4)/448 rounded up to a power of two, so x / scale is
// exact in float (a power-of-two division) and never exceeds 448 before the fp8 rounding.
#include <cmath>

#include "attnserve/numeric.h"
#include "cpu/cpu_ops.h"
#include "cpu/load.h"
#include "cpu/parallel.h"

namespace attnserve::cpu {

void quantize_fp8_groups(const QuantizeFp8Args& a) {
  const int64_t rows = a.x.size(0), dim = a.x.size(1), group = a.group, groups = dim / group;
  auto* out = a.out.ptr<fp8_e4m3_t>();
  auto* scales = a.scales.ptr<float>();
  parallel_for(rows, [&](int64_t r) {
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.f;  // fmax ignores NaN: a NaN element stays NaN in the output, the scale stays finite
      for (int64_t c = g * group; c < (g + 1) * group; ++c)
        amax = std::fmax(amax, std::fabs(load_as_float(a.x.data, a.x.dtype, offset_of(a.x, r, c))));
      const float scale = fp8_pow2_scale(amax);
      for (int64_t c = g * group; c < (g + 1) * group; ++c) {
        const float x = load_as_float(a.x.data, a.x.dtype, offset_of(a.x, r, c));
        out[offset_of(a.out, r, c)] = to_fp8_e4m3(x / scale);
      }
      scales[offset_of(a.scales, r, g)] = scale;
    }
  });
}

}  // namespace attnserve::cpu
