// crash_workload: launches a known number of kernels, then dies in the way asked, so that the recorder's crash
// tail can be checked against the program's own count (`cupti-record` on a GPU;
// bench/gpu/crash_tail_capture_ring_checks.sh).
//
//   crash_workload MODE [KERNELS]
//     abort     std::abort() after the last launch (SIGABRT)
//     segv      a write through a null host pointer (SIGSEGV)
//     illegal   a kernel that writes through a null device pointer: cudaErrorIllegalAddress, then abort()
//     exit      a normal exit (the control)
// Prints one JSON line before dying: {"mode", "kernels"} (kernels launched and completed, synchronized).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

__global__ void tick(float* out, int i) {
  if (threadIdx.x == 0 && blockIdx.x == 0) out[0] += float(i);
}

__global__ void bad_write(float* p) { p[threadIdx.x] = 1.0f; }

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: crash_workload abort|segv|illegal|exit [KERNELS]\n");
    return 2;
  }
  const char* mode = argv[1];
  int kernels = argc > 2 ? std::atoi(argv[2]) : 5000;
  float* out = nullptr;
  if (cudaMalloc(&out, sizeof(float)) != cudaSuccess) return 1;
  for (int i = 0; i < kernels; ++i) tick<<<1, 32>>>(out, i);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("{\"mode\":\"%s\",\"kernels\":%d,\"sync\":\"%s\"}\n", mode, kernels, cudaGetErrorString(e));
  std::fflush(stdout);
  if (!std::strcmp(mode, "abort")) std::abort();
  if (!std::strcmp(mode, "segv")) *(volatile int*)nullptr = 1;
  if (!std::strcmp(mode, "illegal")) {
    bad_write<<<1, 32>>>(nullptr);
    cudaError_t err = cudaDeviceSynchronize();
    std::fprintf(stderr, "crash_workload: %s\n", cudaGetErrorString(err));
    std::abort();
  }
  cudaFree(out);
  return 0;
}
