// phases_workload: 10 phases of N kernels each; phases 3, 5 and 8 are wrapped in cudaProfilerStart/Stop, and
// every phase is an NVTX range "phase" (phases 2 and 7 also "hot"), so that capture ranges can be checked
// exactly: `--capture-range cuda-profiler-api` must keep 3 x N kernels, `nvtx:hot --capture-range-end repeat`
// 2 x N. Each phase's kernels carry the phase number as an argument (grid.x = phase + 1, visible in records).
// Build: build.sh. Run: phases_workload [N]
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>

__global__ void work(float* out) {
  if (threadIdx.x == 0) out[blockIdx.x] += 1.0f;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 200;
  float* out = nullptr;
  if (cudaMalloc(&out, 16 * sizeof(float)) != cudaSuccess) return 1;
  for (int phase = 0; phase < 10; ++phase) {
    bool profiled = phase == 3 || phase == 5 || phase == 8;
    bool hot = phase == 2 || phase == 7;
    if (profiled) cudaProfilerStart();
    nvtxRangePushA("phase");
    if (hot) nvtxRangePushA("hot");
    for (int i = 0; i < n; ++i) work<<<phase + 1, 32>>>(out);
    cudaDeviceSynchronize();
    if (hot) nvtxRangePop();
    nvtxRangePop();
    if (profiled) cudaProfilerStop();
  }
  std::printf("{\"phases\":10,\"kernels_per_phase\":%d,\"profiled\":[3,5,8],\"hot\":[2,7]}\n", n);
  cudaFree(out);
  return 0;
}
