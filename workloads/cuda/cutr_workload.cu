// cutr_workload: a CUDA program whose CUPTI activity is known exactly from its source.
//
// It is the recorder's functional fixture. Every count it produces (kernel launches per name, graph launches,
// memcpys per direction and host-memory kind, memsets, runtime API calls, NVTX ranges) is a formula of --iters,
// derived in EXPECTED.md next to this file, and the program also prints what it actually did as one JSON line on
// stderr at the end.
//
// Shape (I = --iters):
//   main thread   setup: 10 cudaMalloc, 2 cudaMallocHost, 4 non-blocking streams, 2 events, 3 initial copies/memsets,
//                 stream capture of 3 kernels into a graph; then starts threads A and B and joins them; teardown.
//   thread A      I iterations on streams sA1, sA2: pinned HtoD async, scale<float>, cross-stream event wait,
//                 saxpy, heavy (the --heavy-kernel-factor kernel), memset async, DtoD async, pinned DtoH async,
//                 stream synchronize.
//   thread B      I iterations: sync cudaMemcpy/cudaMemset on the legacy default stream (pageable HtoD, memset,
//                 DtoD, pinned DtoH), on stream sB: fill, scale<int> (explicit cudaLaunchKernel), spin (the slow
//                 kernel, --slow-ms), event record + event synchronize, pageable DtoH async, stream synchronize;
//                 then 5 launches of the graph on stream sG and one stream synchronize.
//
// Build: build.sh (nvcc -O2 -arch=sm_90 -lineinfo). Run: cutr_workload [--iters N] [--slow-ms M]
//        [--heavy-kernel-factor F]
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

// ---------------------------------------------------------------------------------------------------------------
// Error checking: every CUDA call goes through CK; a failure prints the call and the error and ends the process
// (_Exit: no destructors or atexit handlers while other threads may still be inside CUDA).
#define CK(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t ck_err_ = (call);                                                                                  \
    if (ck_err_ != cudaSuccess) {                                                                                  \
      std::fprintf(stderr, "cutr_workload: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,                \
                   cudaGetErrorName(ck_err_), cudaGetErrorString(ck_err_));                                        \
      std::fflush(stderr);                                                                                         \
      std::_Exit(1);                                                                                               \
    }                                                                                                              \
  } while (0)

static void die(const char* msg) {
  std::fprintf(stderr, "cutr_workload: %s\n", msg);
  std::fflush(stderr);
  std::_Exit(1);
}

// ---------------------------------------------------------------------------------------------------------------
// Tallies of what the program did, printed in the summary. They count call sites executed, not CUPTI records;
// EXPECTED.md maps one onto the other.
enum Api {
  A_SetDevice, A_Malloc, A_MallocHost, A_Free, A_FreeHost, A_StreamCreateWithFlags, A_StreamDestroy,
  A_EventCreate, A_EventCreateWithFlags, A_EventDestroy, A_Memcpy, A_MemcpyAsync, A_Memset, A_MemsetAsync,
  A_EventRecord, A_StreamWaitEvent, A_EventSynchronize, A_StreamSynchronize, A_DeviceSynchronize,
  A_StreamBeginCapture, A_StreamEndCapture, A_GraphInstantiate, A_GraphLaunch, A_GraphExecDestroy,
  A_GraphDestroy, A_GetLastError, A_LaunchKernel /* explicit cudaLaunchKernel */,
  A_TripleChevron /* <<<>>> launch sites; CUDA 13 lowers these to __cudaLaunchKernel */, A_COUNT
};
static const char* const kApiNames[A_COUNT] = {
  "cudaSetDevice", "cudaMalloc", "cudaMallocHost", "cudaFree", "cudaFreeHost", "cudaStreamCreateWithFlags",
  "cudaStreamDestroy", "cudaEventCreate", "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaMemcpy",
  "cudaMemcpyAsync", "cudaMemset", "cudaMemsetAsync", "cudaEventRecord", "cudaStreamWaitEvent",
  "cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaStreamBeginCapture",
  "cudaStreamEndCapture", "cudaGraphInstantiate", "cudaGraphLaunch", "cudaGraphExecDestroy", "cudaGraphDestroy",
  "cudaGetLastError", "cudaLaunchKernel", "<<<>>>"};
static std::atomic<unsigned long long> g_api[A_COUNT];

// API(id, call): count the call, then check it.
#define API(id, call)                                                                                              \
  do {                                                                                                             \
    g_api[id].fetch_add(1, std::memory_order_relaxed);                                                             \
    CK(call);                                                                                                      \
  } while (0)

enum Kern { K_FILL, K_SCALE_F32, K_SCALE_I32, K_SAXPY, K_HEAVY, K_SPIN, K_COUNT };
struct KernInfo {
  const char* mangled;
  const char* demangled;
};
// The mangled names are what CUPTI reports in CUpti_ActivityKernel10::name (Itanium C++ ABI, as nvcc emits).
static const KernInfo kKern[K_COUNT] = {
  {"_Z4fillPffi", "fill(float*, float, int)"},
  {"_Z5scaleIfEvPT_S0_i", "void scale<float>(float*, float, int)"},
  {"_Z5scaleIiEvPT_S0_i", "void scale<int>(int*, int, int)"},
  {"_Z5saxpyfPKfPfi", "saxpy(float, float const*, float*, int)"},
  {"_Z5heavyPfii", "heavy(float*, int, int)"},
  {"_Z4spinyPy", "spin(unsigned long long, unsigned long long*)"},
};
static std::atomic<unsigned long long> g_launch_direct[K_COUNT];    // launched into a stream (not capturing)
static std::atomic<unsigned long long> g_launch_captured[K_COUNT];  // launched into a capturing stream
static unsigned long long g_graph_nodes[K_COUNT];                   // kernel nodes of the graph, per kernel

enum Range {
  R_MAIN_SETUP, R_MAIN_CAPTURE, R_MAIN_TEARDOWN,
  R_A_THREAD, R_A_ITER, R_A_H2D, R_A_COMPUTE, R_A_CROSS, R_A_D2H,
  R_B_THREAD, R_B_ITER, R_B_SYNC, R_B_COMPUTE, R_B_EVENT, R_B_D2H, R_B_GRAPH, R_COUNT
};
static const char* const kRangeNames[R_COUNT] = {
  "main:setup", "main:graph-capture", "main:teardown",
  "A:thread", "A:iter", "A:h2d", "A:compute", "A:cross-stream", "A:d2h",
  "B:thread", "B:iter", "B:sync-copies", "B:compute", "B:event-sync", "B:d2h", "B:graph"};
static std::atomic<unsigned long long> g_ranges[R_COUNT];

static void push(Range r) {
  g_ranges[r].fetch_add(1, std::memory_order_relaxed);
  nvtxRangePushA(kRangeNames[r]);
}
static void pop() { nvtxRangePop(); }

enum Copy { C_HTOD_PINNED, C_HTOD_PAGEABLE, C_DTOH_PINNED, C_DTOH_PAGEABLE, C_DTOD, C_COUNT };
static const char* const kCopyNames[C_COUNT] = {"HtoD_pinned", "HtoD_pageable", "DtoH_pinned", "DtoH_pageable",
                                                "DtoD"};
static std::atomic<unsigned long long> g_copies[C_COUNT];
static std::atomic<unsigned long long> g_memsets;
static void copied(Copy c) { g_copies[c].fetch_add(1, std::memory_order_relaxed); }
static void memset_done() { g_memsets.fetch_add(1, std::memory_order_relaxed); }

// ---------------------------------------------------------------------------------------------------------------
// Sizes and launch shapes (fixed; EXPECTED.md quotes them).
static const int N = 1 << 18;                         // elements per buffer
static const size_t BYTES = sizeof(float) * N;        // 1 MiB per buffer (int and float are both 4 bytes)
static const int BLOCK = 256;                         // fill, scale<*>, saxpy: grid 1024 x block 256
static const int GRID = N / BLOCK;
static const int HEAVY_BLOCKS = 8;                    // heavy: grid 8 x block 128, on the first 1024 elements
static const int HEAVY_THREADS = 128;
static const int HEAVY_N = HEAVY_BLOCKS * HEAVY_THREADS;
static const int HEAVY_BASE_REPS = 1 << 17;           // dependent FMAs per thread at factor 1 (~0.2-0.3 ms)
static const int GRAPH_LAUNCHES = 5;                  // cudaGraphLaunch calls (thread B, after its loop)
static const int GRAPH_KERNEL_NODES = 3;              // fill, scale<float>, saxpy

// ---------------------------------------------------------------------------------------------------------------
// Kernels.
__global__ void fill(float* p, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

template <typename T>
__global__ void scale(T* p, T s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * s;
}

__global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// The regression-fixture kernel: a dependent chain of `reps` FMAs per thread (latency bound, on 8 SMs at most, so
// it leaves the rest of the GPU to the concurrent kernels). reps = HEAVY_BASE_REPS * --heavy-kernel-factor.
__global__ void heavy(float* x, int n, int reps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    for (int r = 0; r < reps; ++r) v = fmaf(v, 0.999f, 0.001f);
    x[i] = v;
  }
}

__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The slow kernel: one thread busy-waits on the GPU's nanosecond clock (%globaltimer) for `ns`, counting loop
// iterations (written out so that the loop is not optimized away).
__global__ void spin(unsigned long long ns, unsigned long long* iterations) {
  unsigned long long start = globaltimer_ns();
  unsigned long long it = 0;
  while (globaltimer_ns() - start < ns) ++it;
  *iterations = it;
}

// ---------------------------------------------------------------------------------------------------------------
// Launch helpers: each counts its launch, then launches with <<<>>> (launch errors are picked up by the
// cudaGetLastError check at the end of every iteration and after the capture).
static void note_launch(Kern k, bool captured) {
  (captured ? g_launch_captured : g_launch_direct)[k].fetch_add(1, std::memory_order_relaxed);
  g_api[A_TripleChevron].fetch_add(1, std::memory_order_relaxed);
}
static void launch_fill(cudaStream_t s, float* p, float v, bool captured = false) {
  note_launch(K_FILL, captured);
  fill<<<GRID, BLOCK, 0, s>>>(p, v, N);
}
static void launch_scale_f32(cudaStream_t s, float* p, float f, bool captured = false) {
  note_launch(K_SCALE_F32, captured);
  scale<float><<<GRID, BLOCK, 0, s>>>(p, f, N);
}
static void launch_saxpy(cudaStream_t s, float a, const float* x, float* y, bool captured = false) {
  note_launch(K_SAXPY, captured);
  saxpy<<<GRID, BLOCK, 0, s>>>(a, x, y, N);
}
static void launch_heavy(cudaStream_t s, float* x, int reps) {
  note_launch(K_HEAVY, false);
  heavy<<<HEAVY_BLOCKS, HEAVY_THREADS, 0, s>>>(x, HEAVY_N, reps);
}
static void launch_spin(cudaStream_t s, unsigned long long ns, unsigned long long* out) {
  note_launch(K_SPIN, false);
  spin<<<1, 1, 0, s>>>(ns, out);
}
// scale<int> goes through the explicit runtime entry point cudaLaunchKernel (not <<<>>>), so that both launch
// paths appear in every recording.
static void launch_scale_i32_explicit(cudaStream_t s, int* p, int f) {
  g_launch_direct[K_SCALE_I32].fetch_add(1, std::memory_order_relaxed);
  int n = N;
  void* args[] = {&p, &f, &n};
  API(A_LaunchKernel, cudaLaunchKernel((const void*)&scale<int>, dim3(GRID), dim3(BLOCK), args, 0, s));
}

// ---------------------------------------------------------------------------------------------------------------
struct Options {
  int iters = 10;
  double slow_ms = 2.0;
  int heavy_factor = 1;
};

struct Shared {
  Options opt;
  // device
  float *dA, *dA2, *dA3;       // thread A
  float *dBs, *dBs2, *dBk;     // thread B (dBs, dBs2: legacy-stream sync copies; dBk: fill target on sB)
  int* dBi;                    // thread B, scale<int>
  float *dG, *dG2;             // graph
  unsigned long long* dSpin;   // spin's iteration count
  // host
  float* hA_pin;               // pinned, thread A (HtoD source and DtoH destination)
  float* hB_pin;               // pinned, setup HtoD source (as int), thread B DtoH destination
  float* hB_page;              // pageable, setup HtoD source, thread B HtoD source and DtoH destination
  float* hRes;                 // pageable, teardown DtoH destination
  // streams, events, graph
  cudaStream_t sA1, sA2, sB, sG;
  cudaEvent_t evA, evB;
  cudaGraph_t graph;
  cudaGraphExec_t graph_exec;
  double a_seconds = 0, b_seconds = 0;
};

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static void thread_a(Shared* S) {
  double t0 = now_s();
  API(A_SetDevice, cudaSetDevice(0));
  const int reps = HEAVY_BASE_REPS * S->opt.heavy_factor;
  push(R_A_THREAD);
  for (int i = 0; i < S->opt.iters; ++i) {
    push(R_A_ITER);
    push(R_A_H2D);
    API(A_MemcpyAsync, cudaMemcpyAsync(S->dA, S->hA_pin, BYTES, cudaMemcpyHostToDevice, S->sA1));
    copied(C_HTOD_PINNED);
    pop();
    push(R_A_COMPUTE);
    launch_scale_f32(S->sA1, S->dA, 0.5f);
    push(R_A_CROSS);
    API(A_EventRecord, cudaEventRecord(S->evA, S->sA1));
    API(A_StreamWaitEvent, cudaStreamWaitEvent(S->sA2, S->evA, 0));
    pop();
    launch_saxpy(S->sA2, 0.5f, S->dA, S->dA2);
    launch_heavy(S->sA2, S->dA2, reps);
    API(A_MemsetAsync, cudaMemsetAsync(S->dA3, 0, BYTES, S->sA2));
    memset_done();
    API(A_MemcpyAsync, cudaMemcpyAsync(S->dA3, S->dA2, BYTES, cudaMemcpyDeviceToDevice, S->sA2));
    copied(C_DTOD);
    pop();
    push(R_A_D2H);
    API(A_MemcpyAsync, cudaMemcpyAsync(S->hA_pin, S->dA3, BYTES, cudaMemcpyDeviceToHost, S->sA2));
    copied(C_DTOH_PINNED);
    API(A_StreamSynchronize, cudaStreamSynchronize(S->sA2));
    pop();
    API(A_GetLastError, cudaGetLastError());
    pop();  // A:iter
  }
  pop();  // A:thread
  S->a_seconds = now_s() - t0;
}

static void thread_b(Shared* S) {
  double t0 = now_s();
  API(A_SetDevice, cudaSetDevice(0));
  const unsigned long long slow_ns = (unsigned long long)std::llround(S->opt.slow_ms * 1e6);
  push(R_B_THREAD);
  for (int i = 0; i < S->opt.iters; ++i) {
    push(R_B_ITER);
    push(R_B_SYNC);  // all on the legacy default stream, which does not synchronize with the non-blocking streams
    API(A_Memcpy, cudaMemcpy(S->dBs, S->hB_page, BYTES, cudaMemcpyHostToDevice));
    copied(C_HTOD_PAGEABLE);
    API(A_Memset, cudaMemset(S->dBs2, 0, BYTES));
    memset_done();
    API(A_Memcpy, cudaMemcpy(S->dBs2, S->dBs, BYTES, cudaMemcpyDeviceToDevice));
    copied(C_DTOD);
    API(A_Memcpy, cudaMemcpy(S->hB_pin, S->dBs2, BYTES, cudaMemcpyDeviceToHost));
    copied(C_DTOH_PINNED);
    pop();
    push(R_B_COMPUTE);
    launch_fill(S->sB, S->dBk, (float)i);
    launch_scale_i32_explicit(S->sB, S->dBi, -1);
    launch_spin(S->sB, slow_ns, S->dSpin);
    push(R_B_EVENT);
    API(A_EventRecord, cudaEventRecord(S->evB, S->sB));
    API(A_EventSynchronize, cudaEventSynchronize(S->evB));
    pop();
    pop();
    push(R_B_D2H);
    API(A_MemcpyAsync, cudaMemcpyAsync(S->hB_page, S->dBk, BYTES, cudaMemcpyDeviceToHost, S->sB));
    copied(C_DTOH_PAGEABLE);
    API(A_StreamSynchronize, cudaStreamSynchronize(S->sB));
    pop();
    API(A_GetLastError, cudaGetLastError());
    pop();  // B:iter
  }
  push(R_B_GRAPH);
  for (int g = 0; g < GRAPH_LAUNCHES; ++g) API(A_GraphLaunch, cudaGraphLaunch(S->graph_exec, S->sG));
  API(A_StreamSynchronize, cudaStreamSynchronize(S->sG));
  pop();
  pop();  // B:thread
  S->b_seconds = now_s() - t0;
}

// ---------------------------------------------------------------------------------------------------------------
static void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--iters N] [--slow-ms M] [--heavy-kernel-factor F]\n"
               "  --iters N                repetitions of each worker thread's loop (default 10, >= 1)\n"
               "  --slow-ms M              duration of each spin kernel in ms (default 2, 0 < M <= 10000)\n"
               "  --heavy-kernel-factor F  multiplies the work of kernel heavy only (default 1, 1..64)\n",
               argv0);
}

static bool parse_int(const char* s, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!std::strcmp(a, "--help") || !std::strcmp(a, "-h")) {
      usage(argv[0]);
      std::exit(0);
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (!std::strcmp(a, "--iters")) {
      if (!parse_int(v, 1, 100000000L, &o->iters)) return false;
    } else if (!std::strcmp(a, "--heavy-kernel-factor")) {
      if (!parse_int(v, 1, 64, &o->heavy_factor)) return false;
    } else if (!std::strcmp(a, "--slow-ms")) {
      char* end = nullptr;
      double d = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(d > 0.0) || d > 10000.0) return false;
      o->slow_ms = d;
    } else {
      return false;
    }
  }
  return true;
}

int main(int argc, char** argv) {
  Shared S;
  if (!parse_options(argc, argv, &S.opt)) {
    usage(argv[0]);
    return 2;
  }
  const int I = S.opt.iters;
  double t_start = now_s();

  // ----------------------------------------------------------------------------------------------- setup
  // CUDA first: a CUPTI client loaded through CUDA_INJECTION64_PATH starts at cuInit, so an NVTX range pushed
  // before the first CUDA call would be invisible to it.
  API(A_SetDevice, cudaSetDevice(0));
  push(R_MAIN_SETUP);
  API(A_Malloc, cudaMalloc((void**)&S.dA, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dA2, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dA3, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dBs, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dBs2, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dBk, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dBi, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dG, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dG2, BYTES));
  API(A_Malloc, cudaMalloc((void**)&S.dSpin, sizeof(unsigned long long)));
  API(A_MallocHost, cudaMallocHost((void**)&S.hA_pin, BYTES));
  API(A_MallocHost, cudaMallocHost((void**)&S.hB_pin, BYTES));
  S.hB_page = (float*)std::malloc(BYTES);
  S.hRes = (float*)std::malloc(BYTES);
  if (!S.hB_page || !S.hRes) die("malloc failed");
  API(A_StreamCreateWithFlags, cudaStreamCreateWithFlags(&S.sA1, cudaStreamNonBlocking));
  API(A_StreamCreateWithFlags, cudaStreamCreateWithFlags(&S.sA2, cudaStreamNonBlocking));
  API(A_StreamCreateWithFlags, cudaStreamCreateWithFlags(&S.sB, cudaStreamNonBlocking));
  API(A_StreamCreateWithFlags, cudaStreamCreateWithFlags(&S.sG, cudaStreamNonBlocking));
  API(A_EventCreateWithFlags, cudaEventCreateWithFlags(&S.evA, cudaEventDisableTiming));
  API(A_EventCreate, cudaEventCreate(&S.evB));

  int* hB_pin_int = (int*)S.hB_pin;
  for (int i = 0; i < N; ++i) {
    S.hA_pin[i] = 1.0f;
    S.hB_page[i] = 2.0f;
    hB_pin_int[i] = i % 7;
  }
  API(A_Memcpy, cudaMemcpy(S.dBi, S.hB_pin, BYTES, cudaMemcpyHostToDevice));  // pinned HtoD, sync
  copied(C_HTOD_PINNED);
  API(A_MemcpyAsync, cudaMemcpyAsync(S.dA2, S.hB_page, BYTES, cudaMemcpyHostToDevice, S.sA2));  // pageable, async
  copied(C_HTOD_PAGEABLE);
  API(A_MemsetAsync, cudaMemsetAsync(S.dG2, 0, BYTES, S.sG));
  memset_done();

  push(R_MAIN_CAPTURE);
  API(A_StreamBeginCapture, cudaStreamBeginCapture(S.sG, cudaStreamCaptureModeThreadLocal));
  launch_fill(S.sG, S.dG, 1.0f, true);
  launch_scale_f32(S.sG, S.dG, 0.5f, true);
  launch_saxpy(S.sG, 2.0f, S.dG, S.dG2, true);
  API(A_StreamEndCapture, cudaStreamEndCapture(S.sG, &S.graph));
  API(A_GraphInstantiate, cudaGraphInstantiate(&S.graph_exec, S.graph, 0));
  API(A_GetLastError, cudaGetLastError());
  g_graph_nodes[K_FILL] = 1;
  g_graph_nodes[K_SCALE_F32] = 1;
  g_graph_nodes[K_SAXPY] = 1;
  pop();  // main:graph-capture
  API(A_DeviceSynchronize, cudaDeviceSynchronize());
  pop();  // main:setup

  // ----------------------------------------------------------------------------------------------- threads
  double t_threads = now_s();
  std::thread ta(thread_a, &S);
  std::thread tb(thread_b, &S);
  ta.join();
  tb.join();
  double threads_seconds = now_s() - t_threads;

  // ----------------------------------------------------------------------------------------------- teardown
  push(R_MAIN_TEARDOWN);
  API(A_DeviceSynchronize, cudaDeviceSynchronize());
  API(A_Memcpy, cudaMemcpy(S.hRes, S.dG2, BYTES, cudaMemcpyDeviceToHost));  // pageable DtoH, sync
  copied(C_DTOH_PAGEABLE);
  // Graph: dG = 1 * 0.5, dG2 += 2 * dG per launch, from 0: every element must be GRAPH_LAUNCHES exactly.
  long graph_bad = 0;
  for (int i = 0; i < N; ++i)
    if (S.hRes[i] != (float)GRAPH_LAUNCHES) ++graph_bad;
  // Thread B: its last pageable DtoH brought back fill(dBk, iters - 1).
  long b_bad = 0;
  for (int i = 0; i < N; ++i)
    if (S.hB_page[i] != (float)(I - 1)) ++b_bad;

  API(A_GraphExecDestroy, cudaGraphExecDestroy(S.graph_exec));
  API(A_GraphDestroy, cudaGraphDestroy(S.graph));
  API(A_EventDestroy, cudaEventDestroy(S.evA));
  API(A_EventDestroy, cudaEventDestroy(S.evB));
  API(A_StreamDestroy, cudaStreamDestroy(S.sA1));
  API(A_StreamDestroy, cudaStreamDestroy(S.sA2));
  API(A_StreamDestroy, cudaStreamDestroy(S.sB));
  API(A_StreamDestroy, cudaStreamDestroy(S.sG));
  API(A_Free, cudaFree(S.dA));
  API(A_Free, cudaFree(S.dA2));
  API(A_Free, cudaFree(S.dA3));
  API(A_Free, cudaFree(S.dBs));
  API(A_Free, cudaFree(S.dBs2));
  API(A_Free, cudaFree(S.dBk));
  API(A_Free, cudaFree(S.dBi));
  API(A_Free, cudaFree(S.dG));
  API(A_Free, cudaFree(S.dG2));
  API(A_Free, cudaFree(S.dSpin));
  API(A_FreeHost, cudaFreeHost(S.hA_pin));
  API(A_FreeHost, cudaFreeHost(S.hB_pin));
  std::free(S.hB_page);
  std::free(S.hRes);
  pop();  // main:teardown
  double total_seconds = now_s() - t_start;

  // ----------------------------------------------------------------------------------------------- summary
  // One line of JSON on stderr. Kernel records = direct launches + graph launches x nodes per kernel.
  static char buf[16384];
  size_t len = 0;
  auto put = [&](const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    int w = std::vsnprintf(buf + len, sizeof buf - len, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof buf - len) die("summary buffer too small");
    len += (size_t)w;
  };
  unsigned long long kernel_records = 0, direct = 0, captured = 0;
  put("{\"workload\":\"cutr_workload\",\"format\":1,\"iters\":%d,\"slow_ms\":%g,\"heavy_kernel_factor\":%d,"
      "\"heavy_reps\":%d,\"elements\":%d,\"bytes_per_copy\":%zu,\"worker_threads\":2,\"streams\":4,"
      "\"graph\":{\"kernel_nodes\":%d,\"launches\":%d},\"kernels\":{",
      I, S.opt.slow_ms, S.opt.heavy_factor, HEAVY_BASE_REPS * S.opt.heavy_factor, N, BYTES, GRAPH_KERNEL_NODES,
      GRAPH_LAUNCHES);
  for (int k = 0; k < K_COUNT; ++k) {
    unsigned long long d = g_launch_direct[k].load(), c = g_launch_captured[k].load();
    unsigned long long rec = d + g_graph_nodes[k] * (unsigned long long)GRAPH_LAUNCHES;
    kernel_records += rec;
    direct += d;
    captured += c;
    put("%s\"%s\":{\"demangled\":\"%s\",\"direct_launches\":%llu,\"captured_launches\":%llu,\"graph_nodes\":%llu,"
        "\"records\":%llu}",
        k ? "," : "", kKern[k].mangled, kKern[k].demangled, d, c, g_graph_nodes[k], rec);
  }
  put("},\"kernel_records\":%llu,\"direct_launches\":%llu,\"captured_launches\":%llu,\"api\":{", kernel_records,
      direct, captured);
  for (int a = 0; a < A_COUNT; ++a) put("%s\"%s\":%llu", a ? "," : "", kApiNames[a], g_api[a].load());
  unsigned long long copies = 0;
  put("},\"memcpy\":{");
  for (int c = 0; c < C_COUNT; ++c) {
    copies += g_copies[c].load();
    put("%s\"%s\":%llu", c ? "," : "", kCopyNames[c], g_copies[c].load());
  }
  put("},\"memcpy_records\":%llu,\"memset_records\":%llu,\"nvtx_ranges\":{", copies, g_memsets.load());
  unsigned long long ranges = 0;
  for (int r = 0; r < R_COUNT; ++r) {
    ranges += g_ranges[r].load();
    put("%s\"%s\":%llu", r ? "," : "", kRangeNames[r], g_ranges[r].load());
  }
  put("},\"nvtx_ranges_total\":%llu,\"graph_check\":\"%s\",\"b_check\":\"%s\",\"thread_a_seconds\":%.6f,"
      "\"thread_b_seconds\":%.6f,\"threads_seconds\":%.6f,\"total_seconds\":%.6f}\n",
      ranges, graph_bad ? "FAIL" : "ok", b_bad ? "FAIL" : "ok", S.a_seconds, S.b_seconds, threads_seconds,
      total_seconds);
  std::fputs(buf, stderr);
  std::fflush(stderr);
  return (graph_bad || b_bad) ? 3 : 0;
}
