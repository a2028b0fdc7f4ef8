// diff_workload: the program `cupti-convert diff` is judged on. Run unchanged several times it must never be
// called a regression; run with --fixed-factor 1.03 or 1.10 the one kernel that changed must be found.
//
// Its shape is what makes naive comparisons cry wolf:
//   - --threads host threads (default 8), each launching --batches NVTX ranges "thread:batch" of --tiny tiny
//     kernels (`tiny`, about 1-2 us each) on its own stream: many short kernels whose durations drift run to run;
//   - the main thread: --fixed launches (default 20) of `fixed`, a compute-bound kernel of about 200 us whose work
//     is multiplied by --fixed-factor (the change under test), inside NVTX "main:fixed";
//   - a CUDA graph of 3 small kernels (`graph_a`, `graph_b`, `graph_c`) launched --graphs times (default 10);
//   - CUDA start-up and teardown, whose wall time varies by tens of milliseconds from run to run.
//
// Build: build.sh. Run: diff_workload [--threads T] [--batches B] [--tiny K] [--fixed N] [--fixed-factor F]
//        [--graphs G]
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define CK(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t ck_err_ = (call);                                                                                  \
    if (ck_err_ != cudaSuccess) {                                                                                  \
      std::fprintf(stderr, "diff_workload: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,                     \
                   cudaGetErrorString(ck_err_));                                                                   \
      std::_Exit(1);                                                                                               \
    }                                                                                                              \
  } while (0)

// A few hundred elements: launch-bound, about a microsecond of GPU time.
__global__ void tiny(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 1.0f;
}

// Compute-bound: `iters` dependent FMAs per thread, so its duration is proportional to `iters` at a fixed clock.
__global__ void fixed(float* out, int iters) {
  float a = threadIdx.x * 1e-3f, b = 1.0000001f, c = 1e-7f;
  for (int k = 0; k < iters; ++k) {
    a = fmaf(a, b, c);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

__global__ void graph_a(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
__global__ void graph_b(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 0.5f;
}
__global__ void graph_c(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] -= 0.25f;
}

struct Options {
  int threads = 8, batches = 10, tiny = 64, fixed = 20, graphs = 10;
  double fixed_factor = 1.0;
};

static bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    if (i + 1 >= argc) return false;
    const char* a = argv[i];
    const char* v = argv[++i];
    if (!std::strcmp(a, "--threads")) o->threads = std::atoi(v);
    else if (!std::strcmp(a, "--batches")) o->batches = std::atoi(v);
    else if (!std::strcmp(a, "--tiny")) o->tiny = std::atoi(v);
    else if (!std::strcmp(a, "--fixed")) o->fixed = std::atoi(v);
    else if (!std::strcmp(a, "--fixed-factor")) o->fixed_factor = std::atof(v);
    else if (!std::strcmp(a, "--graphs")) o->graphs = std::atoi(v);
    else return false;
  }
  return o->threads > 0 && o->batches >= 0 && o->tiny >= 0 && o->fixed >= 0 && o->fixed_factor > 0 && o->graphs >= 0;
}

// Iterations of `fixed` for about 200 us on an H100 at its boost clock (132 SMs, 264 blocks of 256 threads).
static const int kFixedIters = 100000;
static const int kTinyN = 256;

static void tiny_thread(const Options& o) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* x;
  CK(cudaMalloc(&x, kTinyN * sizeof(float)));
  CK(cudaMemsetAsync(x, 0, kTinyN * sizeof(float), s));
  for (int b = 0; b < o.batches; ++b) {
    nvtxRangePushA("thread:batch");
    for (int k = 0; k < o.tiny; ++k) tiny<<<1, kTinyN, 0, s>>>(x, kTinyN);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    nvtxRangePop();
  }
  CK(cudaFree(x));
  CK(cudaStreamDestroy(s));
}

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: %s [--threads T] [--batches B] [--tiny K] [--fixed N] [--fixed-factor F] [--graphs G]\n",
                 argv[0]);
    return 2;
  }
  CK(cudaSetDevice(0));
  nvtxRangePushA("main:setup");
  cudaStream_t main_stream, graph_stream;
  CK(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&graph_stream, cudaStreamNonBlocking));
  const int blocks = 264, threads = 256;
  float* out;
  CK(cudaMalloc(&out, blocks * threads * sizeof(float)));
  float* g;
  CK(cudaMalloc(&g, 4096 * sizeof(float)));
  CK(cudaMemsetAsync(g, 0, 4096 * sizeof(float), graph_stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(graph_stream, cudaStreamCaptureModeThreadLocal));
  graph_a<<<16, 256, 0, graph_stream>>>(g, 4096);
  graph_b<<<16, 256, 0, graph_stream>>>(g, 4096);
  graph_c<<<16, 256, 0, graph_stream>>>(g, 4096);
  CK(cudaStreamEndCapture(graph_stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaDeviceSynchronize());
  nvtxRangePop();

  std::vector<std::thread> workers;
  for (int t = 0; t < o.threads; ++t) workers.emplace_back(tiny_thread, std::cref(o));

  const int iters = static_cast<int>(kFixedIters * o.fixed_factor + 0.5);
  nvtxRangePushA("main:fixed");
  for (int i = 0; i < o.fixed; ++i) fixed<<<blocks, threads, 0, main_stream>>>(out, iters);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(main_stream));
  nvtxRangePop();

  nvtxRangePushA("main:graphs");
  for (int i = 0; i < o.graphs; ++i) CK(cudaGraphLaunch(exec, graph_stream));
  CK(cudaStreamSynchronize(graph_stream));
  nvtxRangePop();

  for (auto& w : workers) w.join();
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaFree(g));
  CK(cudaFree(out));
  CK(cudaStreamDestroy(graph_stream));
  CK(cudaStreamDestroy(main_stream));
  std::fprintf(stderr, "{\"threads\":%d,\"batches\":%d,\"tiny\":%d,\"fixed\":%d,\"fixed_iters\":%d,\"graphs\":%d}\n",
               o.threads, o.batches, o.tiny, o.fixed, iters, o.graphs);
  return 0;
}
