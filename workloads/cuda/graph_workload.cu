// graph_workload: CUDA graphs built, captured, cloned and updated inside known NVTX ranges, so that a recording
// can be checked for what issue 33 asks: every replayed graph kernel tied to the ranges that were open on the
// capturing thread when its node was created, not to the ranges open when the graph is launched.
// CUDA runtime API only (no CUPTI); NVTX3 header-only (nvtxRangePushA / nvtxRangePop, default domain).
//
//   graph_workload [all]            the five steps below in order, in one process (the functional fixture)
//   graph_workload replay [N [K]]   the benchmark: one capture of K kernels, then N launches (default 20000, 8)
//
// Ranges are written as paths: `capture/L0/L1` is `L1` pushed inside `L0` inside `capture`. Every graph is built
// inside the step's own top range; every launch happens later, inside a separate top-level range `launch:STEP`,
// so a kernel's launch-time ranges (`launch:STEP`) and its capture-time ranges never coincide.
//
// Steps of `all` (each prints "step NAME graphs=G kernel_nodes=KN memset_nodes=MN execs=E launches=L kernels=K
// memsets=M" after it has synchronized: G graphs made by the program, E cudaGraphInstantiate calls, L
// cudaGraphLaunch calls, K kernel and M memset executions on the GPU):
//   explicit  graph of explicit_a -> explicit_b -> memset (0x11) built with cudaGraphAddKernelNode /
//             cudaGraphAddMemsetNode inside `explicit/build`; instantiated inside `explicit`; launched 2x in
//             `launch:explicit`.                                                          kernels 4, memsets 2
//   capture   stream capture (non-blocking stream, global mode) inside `capture`: capture_a, capture_b in
//             `capture/L0`, capture_c and a cudaMemsetAsync (0x22) in `capture/L0/L1`; instantiated inside
//             `capture`, the template destroyed; launched 2x in `launch:capture`.          kernels 6, memsets 2
//   clone     cudaGraphClone of the explicit graph and its instantiation inside `clone` (the nodes were created
//             in `explicit/build`); launched 1x in `launch:clone`.                        kernels 2, memsets 1
//   update    a second capture of the same topology (capture_a, capture_b, capture_c, memset 0x33; other
//             kernel arguments) entirely inside `update/U0`, then cudaGraphExecUpdate of the capture step's exec
//             inside `update` (result must be cudaGraphExecUpdateSuccess), the new template destroyed; launched
//             2x in `launch:update`. These 6 kernels carry the exec's node ids from the capture step, but their
//             parameters come from `update/U0`.                                             kernels 6, memsets 2
//   stacks    inside `stacks`, capture from a chain of non-inlined host functions with external linkage
//             build_outer -> build_middle -> build_inner (which launches stacks_kernel); launched 1x in
//             `launch:stacks`. A recorded node-creation stack must name all three.     kernels 1, memsets 0
// Totals for `all`: 5 graphs, 4 execs, 8 cudaGraphLaunch, 19 kernel records (every one from a graph), 7 graph
// memset records plus 1 plain cudaMemset (buffer zeroing, before any range), 1 DtoH cudaMemcpy (the check).
// Kernel names (mangled, as CUPTI reports them): _Z10explicit_aPff, _Z10explicit_bPff, _Z9capture_aPff,
// _Z9capture_bPff, _Z9capture_cPff, _Z13stacks_kernelPff (replay: _Z11replay_tinyPf). The last line is
// "total graphs=5 execs=4 launches=8 kernels=19 memsets=7 check=ok|FAIL"; the data check compares each
// region's floats and memset bytes with what the steps must leave (explicit+clone 14.0 and 0x11, capture+update
// 78.0 and 0x33, stacks 5.0), which also proves that the update took effect.
//
// replay N K: one eager replay_tiny launch (module loading, outside any range), then inside `replay/build` a
// capture of K replay_tiny kernels in a chain (timed: capture_ns, BeginCapture to EndCapture), instantiation
// (instantiate_ns) and cudaGraphUpload, then inside `replay/launch` N cudaGraphLaunch back to back and one
// cudaStreamSynchronize (timed: replay_ns). Kernel records: 1 + N K. Prints one line:
//   capture_ns=... instantiate_ns=... replay_ns=... per_launch_ns=... launches=N nodes=K kernels=... check=ok
// (CLOCK_MONOTONIC; per_launch_ns = replay_ns / N; check: the counter the kernels increment is 1 + N K).
//
// Exit status: 0 when the data check passes, 3 when it fails, 2 on bad arguments, 1 on any CUDA error (the
// failing call is printed). Build: build.sh, with host frame pointers, no sibling calls and exported symbols
// (-Xlinker --export-dynamic) so that a native stack names build_outer / build_middle / build_inner.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#define CK(x)                                                                                       \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "graph_workload: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #x,   \
                   cudaGetErrorName(e_), cudaGetErrorString(e_));                                   \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

// Each step works on its own region of one allocation: FLOATS floats the kernels change, then MEMSET_BYTES
// bytes the memset nodes write.
static const int FLOATS = 32;
static const int MEMSET_BYTES = 128;
static const int REGION_FLOATS = FLOATS + MEMSET_BYTES / 4;
enum Region { R_EXPLICIT = 0, R_CAPTURE = 1, R_STACKS = 2, R_REPLAY = 3, REGIONS = 4 };

__global__ void explicit_a(float* p, float v) { p[threadIdx.x] += v; }
__global__ void explicit_b(float* p, float v) { p[threadIdx.x] *= v; }
__global__ void capture_a(float* p, float v) { p[threadIdx.x] += v; }
__global__ void capture_b(float* p, float v) { p[threadIdx.x] *= v; }
__global__ void capture_c(float* p, float v) { p[threadIdx.x] -= v; }
__global__ void stacks_kernel(float* p, float v) { p[threadIdx.x] += v; }
__global__ void replay_tiny(float* p) {
  if (threadIdx.x == 0) p[0] += 1.0f;
}

static long long now_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct Totals {
  int graphs = 0, execs = 0, launches = 0, kernels = 0, memsets = 0;
};
static Totals g_total;

static void report(const char* step, int graphs, int kernel_nodes, int memset_nodes, int execs, int launches,
                   int kernels, int memsets) {
  std::printf("step %s graphs=%d kernel_nodes=%d memset_nodes=%d execs=%d launches=%d kernels=%d memsets=%d\n",
              step, graphs, kernel_nodes, memset_nodes, execs, launches, kernels, memsets);
  std::fflush(stdout);
  g_total.graphs += graphs;
  g_total.execs += execs;
  g_total.launches += launches;
  g_total.kernels += kernels;
  g_total.memsets += memsets;
}

static void launch(const char* range, cudaGraphExec_t exec, cudaStream_t s, int times) {
  nvtxRangePushA(range);
  for (int i = 0; i < times; ++i) CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  nvtxRangePop();
}

// explicit: explicit_a(+1) -> explicit_b(*2) -> memset 0x11, built node by node.
static cudaGraph_t step_explicit(cudaStream_t s, float* region, cudaGraphExec_t* exec) {
  nvtxRangePushA("explicit");
  nvtxRangePushA("build");
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  float va = 1.0f, vb = 2.0f;
  void* args_a[] = {&region, &va};
  void* args_b[] = {&region, &vb};
  cudaKernelNodeParams kp = {};
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(FLOATS);
  kp.sharedMemBytes = 0;
  kp.func = (void*)explicit_a;
  kp.kernelParams = args_a;
  cudaGraphNode_t na, nb, nm;
  CK(cudaGraphAddKernelNode(&na, g, nullptr, 0, &kp));
  kp.func = (void*)explicit_b;
  kp.kernelParams = args_b;
  CK(cudaGraphAddKernelNode(&nb, g, &na, 1, &kp));
  cudaMemsetParams mp = {};
  mp.dst = (void*)(region + FLOATS);
  mp.pitch = MEMSET_BYTES;
  mp.value = 0x11;
  mp.elementSize = 1;
  mp.width = MEMSET_BYTES;
  mp.height = 1;
  CK(cudaGraphAddMemsetNode(&nm, g, &nb, 1, &mp));
  nvtxRangePop();  // build
  CK(cudaGraphInstantiate(exec, g, 0));
  nvtxRangePop();  // explicit
  launch("launch:explicit", *exec, s, 2);
  report("explicit", 1, 2, 1, 1, 2, 4, 2);
  return g;  // kept for the clone step
}

// capture / update: the same topology, a chain capture_a(+v) -> capture_b(*v) -> capture_c(-v) -> memset.
// split: `L0` around the first two kernels, `L0/L1` around the third and the memset; else all inside `U0`.
static cudaGraph_t capture_chain(cudaStream_t s, float* region, float v, int memset_value, bool split) {
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  nvtxRangePushA(split ? "L0" : "U0");
  capture_a<<<1, FLOATS, 0, s>>>(region, v);
  capture_b<<<1, FLOATS, 0, s>>>(region, v);
  if (split) nvtxRangePushA("L1");
  capture_c<<<1, FLOATS, 0, s>>>(region, v);
  CK(cudaMemsetAsync(region + FLOATS, memset_value, MEMSET_BYTES, s));
  if (split) nvtxRangePop();  // L1
  nvtxRangePop();             // L0 or U0
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  return g;
}

static cudaGraphExec_t step_capture(cudaStream_t s, float* region) {
  nvtxRangePushA("capture");
  cudaGraph_t g = capture_chain(s, region, 2.0f, 0x22, true);
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  nvtxRangePop();
  launch("launch:capture", exec, s, 2);
  report("capture", 1, 3, 1, 1, 2, 6, 2);
  return exec;  // updated by the update step
}

static void step_clone(cudaStream_t s, cudaGraph_t original) {
  nvtxRangePushA("clone");
  cudaGraph_t g;
  CK(cudaGraphClone(&g, original));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  nvtxRangePop();
  launch("launch:clone", exec, s, 1);
  report("clone", 1, 2, 1, 1, 1, 2, 1);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
}

static void step_update(cudaStream_t s, float* region, cudaGraphExec_t exec) {
  nvtxRangePushA("update");
  cudaGraph_t g = capture_chain(s, region, 3.0f, 0x33, false);
  cudaGraphExecUpdateResultInfo info;
  std::memset(&info, 0, sizeof info);
  CK(cudaGraphExecUpdate(exec, g, &info));
  if (info.result != cudaGraphExecUpdateSuccess) {
    std::fprintf(stderr, "graph_workload: cudaGraphExecUpdate result %d, not cudaGraphExecUpdateSuccess\n",
                 (int)info.result);
    std::exit(1);
  }
  CK(cudaGraphDestroy(g));
  nvtxRangePop();
  launch("launch:update", exec, s, 2);
  report("update", 1, 3, 1, 0, 2, 6, 2);
}

// stacks: each function does something after its call so that no call becomes a jump (build.sh also passes
// -fno-optimize-sibling-calls), and external linkage + --export-dynamic keep the names in .dynsym.
static volatile int g_depth;
extern "C" __attribute__((noinline)) void build_inner(cudaStream_t s, float* region) {
  stacks_kernel<<<1, FLOATS, 0, s>>>(region, 5.0f);
  g_depth = g_depth + 1;
}
extern "C" __attribute__((noinline)) void build_middle(cudaStream_t s, float* region) {
  build_inner(s, region);
  g_depth = g_depth + 1;
}
extern "C" __attribute__((noinline)) cudaGraph_t build_outer(cudaStream_t s, float* region) {
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  build_middle(s, region);
  g_depth = g_depth + 1;
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  return g;
}

static void step_stacks(cudaStream_t s, float* region) {
  nvtxRangePushA("stacks");
  cudaGraph_t g = build_outer(s, region);
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  nvtxRangePop();
  launch("launch:stacks", exec, s, 1);
  report("stacks", 1, 1, 0, 1, 1, 1, 0);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
}

static bool check_region(const float* host, int region, float want_float, unsigned char want_byte) {
  const float* f = host + region * REGION_FLOATS;
  bool ok = true;
  for (int i = 0; i < FLOATS; ++i) ok = ok && f[i] == want_float;
  const unsigned char* b = (const unsigned char*)(f + FLOATS);
  for (int i = 0; i < MEMSET_BYTES; ++i) ok = ok && b[i] == want_byte;
  if (!ok)
    std::fprintf(stderr, "graph_workload: region %d: got %g / 0x%02x, want %g / 0x%02x\n", region, f[0], b[0],
                 want_float, want_byte);
  return ok;
}

static int run_all(cudaStream_t s, float* buf) {
  cudaGraphExec_t explicit_exec, capture_exec;
  cudaGraph_t explicit_graph = step_explicit(s, buf + R_EXPLICIT * REGION_FLOATS, &explicit_exec);
  capture_exec = step_capture(s, buf + R_CAPTURE * REGION_FLOATS);
  step_clone(s, explicit_graph);
  step_update(s, buf + R_CAPTURE * REGION_FLOATS, capture_exec);
  step_stacks(s, buf + R_STACKS * REGION_FLOATS);
  CK(cudaGraphExecDestroy(capture_exec));
  CK(cudaGraphExecDestroy(explicit_exec));
  CK(cudaGraphDestroy(explicit_graph));

  static float host[REGIONS * REGION_FLOATS];
  CK(cudaMemcpy(host, buf, sizeof host, cudaMemcpyDeviceToHost));
  // explicit: (0+1)*2 = 2, (2+1)*2 = 6; clone: (6+1)*2 = 14. capture: (0+2)*2-2 = 2, (2+2)*2-2 = 6;
  // update: (6+3)*3-3 = 24, (24+3)*3-3 = 78. stacks: 0+5.
  bool ok = check_region(host, R_EXPLICIT, 14.0f, 0x11);
  ok = check_region(host, R_CAPTURE, 78.0f, 0x33) && ok;
  ok = check_region(host, R_STACKS, 5.0f, 0x00) && ok;
  std::printf("total graphs=%d execs=%d launches=%d kernels=%d memsets=%d check=%s\n", g_total.graphs,
              g_total.execs, g_total.launches, g_total.kernels, g_total.memsets, ok ? "ok" : "FAIL");
  return ok ? 0 : 3;
}

static int run_replay(cudaStream_t s, float* buf, long n, int k) {
  float* p = buf + R_REPLAY * REGION_FLOATS;
  replay_tiny<<<1, 32, 0, s>>>(p);  // loads the module outside the timed capture
  CK(cudaStreamSynchronize(s));

  nvtxRangePushA("replay");
  nvtxRangePushA("build");
  long long t0 = now_ns();
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < k; ++i) replay_tiny<<<1, 32, 0, s>>>(p);
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  long long t1 = now_ns();
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  long long t2 = now_ns();
  CK(cudaGraphUpload(exec, s));
  CK(cudaStreamSynchronize(s));
  nvtxRangePop();  // build
  nvtxRangePushA("launch");
  long long t3 = now_ns();
  for (long i = 0; i < n; ++i) CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  long long t4 = now_ns();
  nvtxRangePop();  // launch
  nvtxRangePop();  // replay

  float got = 0;
  CK(cudaMemcpy(&got, p, sizeof got, cudaMemcpyDeviceToHost));
  // Float counts are exact up to 2^24.
  double want = 1.0 + (double)n * k;
  bool ok = want > 16777216.0 || (double)got == want;
  std::printf("capture_ns=%lld instantiate_ns=%lld replay_ns=%lld per_launch_ns=%.1f launches=%ld nodes=%d "
              "kernels=%ld check=%s\n",
              t1 - t0, t2 - t1, t4 - t3, (double)(t4 - t3) / (double)n, n, k, 1 + n * k, ok ? "ok" : "FAIL");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(g));
  return ok ? 0 : 3;
}

static int usage() {
  std::fprintf(stderr, "usage: graph_workload [all] | graph_workload replay [N [K]]   (N >= 1, 1 <= K <= 1024)\n");
  return 2;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "all";
  bool replay = std::strcmp(mode, "replay") == 0;
  if (!replay && (std::strcmp(mode, "all") != 0 || argc > 2)) return usage();
  long n = 20000;
  int k = 8;
  if (replay) {
    if (argc > 4) return usage();
    char* end = nullptr;
    if (argc > 2) {
      n = std::strtol(argv[2], &end, 10);
      if (*end || n < 1) return usage();
    }
    if (argc > 3) {
      k = (int)std::strtol(argv[3], &end, 10);
      if (*end || k < 1 || k > 1024) return usage();
    }
  }
  // The first CUDA call comes before the first NVTX push: a range pushed before it can be lost (README).
  CK(cudaSetDevice(0));
  CK(cudaFree(nullptr));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* buf = nullptr;
  CK(cudaMalloc(&buf, REGIONS * REGION_FLOATS * sizeof(float)));
  CK(cudaMemset(buf, 0, REGIONS * REGION_FLOATS * sizeof(float)));
  CK(cudaDeviceSynchronize());
  int rc = replay ? run_replay(s, buf, n, k) : run_all(s, buf);
  CK(cudaFree(buf));
  CK(cudaStreamDestroy(s));
  return rc;
}
