// calls_workload: kernels whose hot code is outside the kernel's own body, and a kernel with a one-line variant,
// for PC sampling (`cupti-record --pc-sampling`) and `cupti-convert source` (functions, call sites, --diff).
//
//   calls   spends its time in a `__noinline__` device function, `gather`, called from two call sites (CALL-A,
//           CALL-B), and in the IEEE division's slow path: `ratio` (inlined) divides by denormals, which the fast
//           path's FCHK sends to the compiler's subroutine `__cuda_sm3x_div_rn_noftz_f32_slowpath` (a CALL).
//   lines   a pointer chase (LINE-CHASE) and an FMA fed from L1 (LINE-FMA). Built with -DEXTRA_LOAD
//           (calls_workload_extra) it adds a second dependent load (LINE-EXTRA); every other line keeps its number,
//           so `source --diff` of the two builds must name LINE-EXTRA and nothing else.
//
// Build: build.sh (nvcc -O2 -arch=sm_90 -lineinfo; calls_workload and calls_workload_extra).
// Run: calls_workload [--iters N] [--kernel calls|lines|both]
// The CALL-*, HOT-* and LINE-* markers name the lines tests expect; keep each on its line.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t e_ = (call);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                       \
      std::fprintf(stderr, "calls_workload: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      std::exit(1);                                                                                                \
    }                                                                                                              \
  } while (0)

__device__ __noinline__ float gather(const unsigned* __restrict__ next, unsigned p, int steps) {
  float sum = 0.f;
  for (int i = 0; i < steps; ++i) {
    p = next[p];  // HOT-GATHER
    sum += static_cast<float>(p & 7u);
  }
  return sum;
}

__device__ __forceinline__ float ratio(float a, float b) {
  return a / b;  // HOT-DIV
}

__global__ void calls(const unsigned* __restrict__ next, const float* __restrict__ num,
                      const float* __restrict__ den, int steps, int divs, float* out) {
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  float a = gather(next, tid, steps);           // CALL-A
  float b = gather(next, tid * 7u, steps / 2);  // CALL-B
  float q = 0.f;
  for (int i = 0; i < divs; ++i) {
    unsigned j = (tid + i) & 1023u;
    q += ratio(num[j], den[j]) * 1e-30f;  // CALL-DIV
  }
  out[tid] = a + b + q;
}

__global__ void lines(const unsigned* __restrict__ next, const float* __restrict__ x, int steps, float* out) {
  unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned p = tid;
  float acc = 0.f;
  for (int i = 0; i < steps; ++i) {
    p = next[p];                                  // LINE-CHASE
    acc = fmaf(acc, 1.0001f, x[(p + i) & 1023u]);  // LINE-FMA
#ifdef EXTRA_LOAD
    p ^= next[(p * 2654435761u) & 0xffffffu] & 1u;  // LINE-EXTRA
#endif
  }
  out[tid] = acc + static_cast<float>(p);
}

int main(int argc, char** argv) {
  int iters = 5;
  const char* which = "both";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--kernel")) which = argv[i + 1];
  }
  bool run_calls = !std::strcmp(which, "calls") || !std::strcmp(which, "both");
  bool run_lines = !std::strcmp(which, "lines") || !std::strcmp(which, "both");
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
  // Numerators in [0.5, 1), denominators denormal (5e-39 .. 7.5e-39): every quotient takes the slow path.
  std::vector<float> num(1024), den(1024);
  for (int i = 0; i < 1024; ++i) {
    num[i] = 0.5f + 0.5f * static_cast<float>(i) / 1024.f;
    den[i] = 5e-39f * (1.f + 0.5f * static_cast<float>(i) / 1024.f);
  }
  unsigned* d_next;
  float *d_num, *d_den, *d_out;
  CK(cudaMalloc(&d_next, n * sizeof(unsigned)));
  CK(cudaMalloc(&d_num, 1024 * sizeof(float)));
  CK(cudaMalloc(&d_den, 1024 * sizeof(float)));
  CK(cudaMalloc(&d_out, 1 << 22));
  CK(cudaMemcpy(d_next, next.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_num, num.data(), 1024 * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_den, den.data(), 1024 * sizeof(float), cudaMemcpyHostToDevice));

  for (int it = 0; it < iters; ++it) {
    if (run_calls) {
      calls<<<132, 128>>>(d_next, d_num, d_den, 1000, 4000, d_out);
      CK(cudaGetLastError());
    }
    if (run_lines) {
      lines<<<132, 128>>>(d_next, d_num, 1500, d_out);
      CK(cudaGetLastError());
    }
  }
  CK(cudaDeviceSynchronize());
  CK(cudaFree(d_next));
  CK(cudaFree(d_num));
  CK(cudaFree(d_den));
  CK(cudaFree(d_out));
  std::fprintf(stderr, "{\"iters\":%d,\"kernel\":\"%s\"}\n", iters, which);
  return 0;
}
