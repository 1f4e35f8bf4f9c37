// attnserve demo: a serving trace through the whole stack, the way a serving engine drives it.
// Requests arrive with random prompt and output lengths; the scheduler (tools/demo/scheduler.h)
// admits them while the KV pool has room and runs chunked prefill, decode and EAGLE rounds; the
// models (tools/demo/dense_model.h, deepseek_model.h) run every pass through attnserve's backends
// and ops; a sample of the passes is recomputed by the fp64 oracle (tools/demo/oracle.h). Ends with
// a summary table. Exit status: 0 when every request finished and every check passed, 1 otherwise,
// 2 on a usage or runtime error.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <vector>

#include "attnserve/runtime.h"
#include "demo/engine.h"
#include "demo/options.h"
#include "demo/summary.h"

int main(int argc, char** argv) {
  using namespace demo;
  Options opts;
  try {
    opts = parse_options(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "attnserve_demo: %s\n", e.what());
    return 2;
  }
  if (opts.help) {
    std::printf("%s", kUsage);
    return 0;
  }
  try {
    attnserve::Device device = attnserve::Device::cpu();
    if (opts.device == attnserve::DeviceType::cuda || (!opts.device && attnserve::cuda_available())) {
      if (!attnserve::cuda_available())
        throw std::invalid_argument("--device cuda: no CUDA device (or a build without CUDA)");
      device = attnserve::Device::cuda(0);
    }
    std::printf("attnserve demo: serving trace on %s (%d host threads), seed %llu\n",
                device.is_cuda() ? "cuda:0" : "the cpu", omp_get_max_threads(), (unsigned long long)opts.seed);
    std::vector<TraceResult> runs;
    for (ModelKind m : opts.models) runs.push_back(run_trace(resolve(opts, m, device)));
    print_summary(runs);
    bool ok = true;
    for (const TraceResult& r : runs) ok &= r.ok();
    std::printf("\n%s\n", ok ? "OK: every request finished, every checked pass matched the oracle"
                             : "FAILED: see the oracle mismatches above");
    return ok ? 0 : 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "attnserve_demo: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnserve_demo: error: %s\n", e.what());
    return 2;
  }
}
