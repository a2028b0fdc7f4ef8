// source_workload: kernels whose hot source line and stall reason are known from their source, for PC sampling
// (`cupti-record --pc-sampling`) and the offline SASS -> file:line mapping (`cupti-convert source`).
//
//   chase   pointer chasing through a random cycle in global memory: each load's address is the previous load's
//           value, so the hot line is the dependent load (HOT-CHASE) and warps stall on long scoreboard (memory).
//   fma_chain  a long chain of dependent FMAs in registers: the hot line is the FMA (HOT-FMA) and warps stall on the
//           math pipe / wait (execution dependency), never on memory.
//   jit_scale  compiled at run time from the PTX text below (cuModuleLoadData), so its cubin exists only in the
//           process: the recorder must capture it at module load.
//
// Build: build.sh (nvcc -O2 -arch=sm_90 -lineinfo). Run: source_workload [--iters N]
// The HOT-* markers name the lines tests expect; keep each on its line.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t e_ = (call);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                       \
      std::fprintf(stderr, "source_workload: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                                \
    }                                                                                                              \
  } while (0)
#define CKD(call)                                                                                                  \
  do {                                                                                                             \
    CUresult r_ = (call);                                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                                      \
      const char* s_ = nullptr;                                                                                    \
      cuGetErrorString(r_, &s_);                                                                                   \
      std::fprintf(stderr, "source_workload: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_ ? s_ : "?");          \
      std::exit(1);                                                                                                \
    }                                                                                                              \
  } while (0)

__global__ void chase(const unsigned* __restrict__ next, unsigned start, int steps, unsigned* out) {
  unsigned p = start + blockIdx.x * blockDim.x + threadIdx.x;
  for (int i = 0; i < steps; ++i) {
    p = next[p];  // HOT-CHASE
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = p;
}

__global__ void fma_chain(float* out, int iters) {
  float a = threadIdx.x * 1e-3f, b = 1.0000001f, c = 1e-7f;
  for (int i = 0; i < iters; ++i) {
    a = fmaf(a, b, c);  // HOT-FMA
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

// y[i] = x[i] * s, written in PTX and compiled by the driver at run time, with line info (`.loc`, kept by
// CU_JIT_GENERATE_LINE_INFO) naming lines 1-5 of a "jit_scale.cu" that exists nowhere: line 3 is the load.
static const char kJitPtx[] = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry jit_scale(.param .u64 x, .param .u64 y, .param .f32 s, .param .u32 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<6>;
  .reg .f32 %f<4>;
  .reg .b64 %rd<8>;
  .loc 1 1 0
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  ld.param.f32 %f1, [s];
  ld.param.u32 %r1, [n];
  .loc 1 2 0
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %ntid.x;
  mov.u32 %r4, %tid.x;
  mad.lo.s32 %r5, %r2, %r3, %r4;
  setp.ge.u32 %p1, %r5, %r1;
  @%p1 bra DONE;
  .loc 1 3 0
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  mul.wide.u32 %rd5, %r5, 4;
  add.s64 %rd6, %rd3, %rd5;
  ld.global.f32 %f2, [%rd6];
  .loc 1 4 0
  mul.f32 %f3, %f2, %f1;
  add.s64 %rd7, %rd4, %rd5;
  st.global.f32 [%rd7], %f3;
DONE:
  .loc 1 5 0
  ret;
}
.file 1 "jit_scale.cu"
)";

int main(int argc, char** argv) {
  int iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
  }
  CK(cudaSetDevice(0));
  // A random single cycle over 16M entries (64 MB): every load misses the caches.
  const unsigned n = 1u << 24;
  std::vector<unsigned> perm(n), next(n);
  for (unsigned i = 0; i < n; ++i) perm[i] = i;
  unsigned long long rng = 88172645463325252ull;
  for (unsigned i = n - 1; i > 0; --i) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    std::swap(perm[i], perm[rng % (i + 1)]);
  }
  for (unsigned i = 0; i < n; ++i) next[perm[i]] = perm[(i + 1) % n];
  unsigned *d_next, *d_out;
  float* d_f;
  CK(cudaMalloc(&d_next, n * sizeof(unsigned)));
  CK(cudaMalloc(&d_out, 1 << 20));
  CK(cudaMalloc(&d_f, 1 << 20));
  CK(cudaMemcpy(d_next, next.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));

  CUmodule mod;
  CUfunction jit;
  CUjit_option opts[] = {CU_JIT_GENERATE_LINE_INFO};
  void* vals[] = {reinterpret_cast<void*>(static_cast<uintptr_t>(1))};
  CKD(cuModuleLoadDataEx(&mod, kJitPtx, 1, opts, vals));
  CKD(cuModuleGetFunction(&jit, mod, "jit_scale"));

  for (int it = 0; it < iters; ++it) {
    chase<<<132, 128>>>(d_next, 0, 2000, d_out);
    CK(cudaGetLastError());
    fma_chain<<<132 * 4, 256>>>(d_f, 200000);
    CK(cudaGetLastError());
    unsigned count = 1 << 16;
    float s = 2.0f;
    CUdeviceptr x = reinterpret_cast<CUdeviceptr>(d_f), y = reinterpret_cast<CUdeviceptr>(d_out);
    void* args[] = {&x, &y, &s, &count};
    CKD(cuLaunchKernel(jit, count / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  }
  CK(cudaDeviceSynchronize());
  CKD(cuModuleUnload(mod));
  CK(cudaFree(d_next));
  CK(cudaFree(d_out));
  CK(cudaFree(d_f));
  std::fprintf(stderr, "{\"iters\":%d}\n", iters);
  return 0;
}
