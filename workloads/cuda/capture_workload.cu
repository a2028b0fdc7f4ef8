// capture_workload: kernels inside and outside capture ranges, with exact counts, for `--capture-range` checks
// together with `--pc-sampling` (NVTX ranges) and `--counters` (the CUDA profiler API).
//
//   capture_workload nvtx     [STEPS [PER_STEP]]   (default 5 steps of 20 kernels)
//   capture_workload profiler [MS [BEFORE_MS]]     (default 300 ms inside the range, 1500 ms before it)
//
// nvtx: for each step, `outside` kernels run and finish, then an NVTX range "step" holds PER_STEP `inside` kernels
// and a synchronize, then more `outside` kernels finish; a range "other" holds `outside` kernels too. So every
// `inside` kernel runs inside a "step" range and no `outside` kernel does: recorded with --capture-range nvtx:step,
// the file holds STEPS * PER_STEP `inside` kernels and no `outside` one, and PC samples only of `inside`.
//
// profiler: `outside` kernels for BEFORE_MS ms (PM sampling is set up within ~0.5 s of the first context), then
// cudaProfilerStart, `inside` kernels for MS ms, cudaProfilerStop, then
// `outside` kernels for MS ms (each phase synchronized). Counter samples belong inside the middle phase only.
//
// Prints one JSON line on stdout: {"mode": ..., "inside": N, "outside": M}.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t e_ = (call);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                       \
      std::fprintf(stderr, "capture_workload: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                                \
    }                                                                                                              \
  } while (0)

// About 50 us of arithmetic per block on an H100/H200 (the PC sampler needs kernels long enough to be sampled).
__global__ void inside(float* out, int iters) {
  float x = threadIdx.x * 0.001f;
  for (int i = 0; i < iters; ++i) x = x * 1.000001f + 0.5f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void outside(float* out, int iters) {
  float x = threadIdx.x * 0.002f;
  for (int i = 0; i < iters; ++i) x = x * 0.999999f + 0.25f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

static const int BLOCKS = 264, THREADS = 256, ITERS = 20000;

static long run_for(void (*k)(float*, int), float* buf, double ms) {
  long n = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() < ms) {
    for (int i = 0; i < 10; ++i, ++n) k<<<BLOCKS, THREADS>>>(buf, ITERS);
    CK(cudaDeviceSynchronize());
  }
  return n;
}

int main(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "nvtx") != 0 && std::strcmp(argv[1], "profiler") != 0)) {
    std::fprintf(stderr, "usage: %s nvtx [STEPS [PER_STEP]] | profiler [MS [BEFORE_MS]]\n", argv[0]);
    return 2;
  }
  float* buf = nullptr;
  CK(cudaMalloc(&buf, sizeof(float) * BLOCKS * THREADS));
  long in = 0, out = 0;
  if (std::strcmp(argv[1], "nvtx") == 0) {
    int steps = argc > 2 ? std::atoi(argv[2]) : 5, per_step = argc > 3 ? std::atoi(argv[3]) : 20;
    for (int s = 0; s < steps; ++s) {
      for (int i = 0; i < 5; ++i, ++out) outside<<<BLOCKS, THREADS>>>(buf, ITERS);
      CK(cudaDeviceSynchronize());
      nvtxRangePushA("step");
      for (int i = 0; i < per_step; ++i, ++in) inside<<<BLOCKS, THREADS>>>(buf, ITERS);
      CK(cudaDeviceSynchronize());
      nvtxRangePop();
      nvtxRangePushA("other");
      for (int i = 0; i < 5; ++i, ++out) outside<<<BLOCKS, THREADS>>>(buf, ITERS);
      CK(cudaDeviceSynchronize());
      nvtxRangePop();
    }
  } else {
    double ms = argc > 2 ? std::atof(argv[2]) : 300.0, before = argc > 3 ? std::atof(argv[3]) : 1500.0;
    out += run_for(outside, buf, before);
    CK(cudaProfilerStart());
    in += run_for(inside, buf, ms);
    CK(cudaProfilerStop());
    out += run_for(outside, buf, ms);
  }
  CK(cudaFree(buf));
  std::printf("{\"mode\": \"%s\", \"inside\": %ld, \"outside\": %ld}\n", argv[1], in, out);
  return 0;
}
