// pm_probe: a standalone diagnostic for CUPTI's PM Sampling API (cupti_pmsampling.h). It runs a busy GPU workload
// on one device while PM sampling is active, decodes on its own thread (or only at the end), and prints everything
// needed to tell why there are no samples and which configuration gives some: every CUPTI call and its result, each
// decode (stop reason, overflow, counts of total / populated / completed samples in the counter-data image), the
// samples (first and last few, per-metric min / max / mean, observed interval) and where their timestamps lie against
// cuptiGetTimestamp, CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW and the GPU's %globaltimer.
//
// What it showed on an H100 (CUDA 13.0, CUPTI 130001, driver 580.159.04; workloads/cuda/pm_probe.sh):
// - PM sampling works: 100 us samples, timestamps in cuptiGetTimestamp's domain (= CLOCK_REALTIME ns here; the GPU's
//   %globaltimer is ~1.5 ms off), metrics follow the workload's phases; cuptiProfilerInitialize was not needed.
// - NVIDIA's pm_sampling sample prints "No samples to print" because its decode thread re-initializes a 10000-sample
//   counter-data image (151 MB, 30-50 ms) after every decode, longer than its whole ~15 ms workload, and nothing decodes
//   after cuptiPmSamplingStop; with -s 500 it prints samples. Its first decode races cuptiPmSamplingStart (the thread
//   starts first) and then fails with CUPTI_ERROR_INVALID_PARAMETER, which its CUPTI_API_CALL turns into exit(1).
// - The first sample of a session is an outlier (it starts hundreds of ms before Start; gpu__time_duration.sum is an
//   absolute time): the report leaves it out. Decodes during collection stop with reason OTHER, after Stop with
//   END_OF_RECORDS. A KEEP_OLDEST overflow is reported as CUPTI_ERROR_OUT_OF_MEMORY from every later decode (the
//   overflow flag stayed 0); a decode costs ~25 us and an evaluation ~17 us per sample (6-7 metrics), so 10 us
//   intervals overflow a 64 MiB buffer, and 100 us ones keep a decode thread ~25% busy.
//
// Build (workloads/cuda/pm_probe.sh does it and prints the exact line):
//   nvcc -O2 -std=c++17 -arch=sm_90 pm_probe.cu -I<cupti include> -L<cupti lib> -lcupti -lcuda -lpthread -o pm_probe
// Host-only syntax check without nvcc (the kernels sit behind __CUDACC__):
//   g++ -std=c++17 -fsyntax-only -x c++ pm_probe.cu -I<cupti include> -I<cuda include> -I<crt include>
//
// Usage: pm_probe [options]
//   --list                      list chip, supported chips and every PM sampling base metric with its type, then exit
//   --filter STR                with --list: only metrics whose name contains STR
//   --list-sub                  with --list: also list each metric's submetrics
//   --device N                  CUDA device index (default 0)
//   --trigger sysclk|time       trigger mode (default time)
//   --interval N                sampling interval: ns for time, SYS-clock cycles for sysclk (default 100000)
//   --hwbuf-mib N               hardware buffer size in MiB (default 64)
//   --append oldest|latest      hardware buffer append mode (default oldest)
//   --max-samples N             samples the counter-data image holds (default 10000)
//   --no-profiler-init          do not call cuptiProfilerInitialize (PM sampling is said to need it)
//   --decode thread|end         decode on a thread during collection and after stop (default), or only after stop
//   --decode-period-ms N        pause between decodes of the thread; 0 = busy loop as NVIDIA's sample (default 10)
//   --reset full|always         reset the counter-data image only when full (default), or after every decode as
//                               NVIDIA's sample and Kineto do (that would lose samples populated but not yet
//                               completed; on H100 populated == completed after every decode)
//   --decode-before-start       decode once before cuptiPmSamplingStart
//   --thread-around-start-stop  start the decode thread before cuptiPmSamplingStart and join it only after
//                               cuptiPmSamplingStop, so decodes run concurrently with both (NVIDIA's sample does)
//   --no-drain                  no decode after stop (NVIDIA's sample: its thread ends when told to stop)
//   --ctx-after-enable          create the CUDA context only after Enable/SetConfig/image (NVIDIA's sample's order);
//                               default: the context exists before any CUPTI call (as in an application)
//   --cdi-before-setconfig      create the counter-data image before cuptiPmSamplingSetConfig (XLA's order)
//   --metrics a,b,c             metrics (default below); missing ones and ones that do not fit one pass are reported
//                               and dropped (the first ones listed are kept)
//   --strict-metrics            fail instead of dropping metrics
//   --workload mix|mem|fma|tiny|nvsample|none   (default mix: memory-bound and FMA-bound phases alternating;
//                               tiny: back-to-back launches of a 50000-int vector add; nvsample: exactly the
//                               workload of CUDA 13.0's pm_sampling sample, 100 launches of a vector add over
//                               3 x 128 MiB, then a synchronize: about 15 ms of GPU work whatever --duration-ms says)
//   --duration-ms N             workload wall time (default 2000)
//   --phase-ms N                length of one phase of the mix (default 250)
//   --idle-ms N                 idle time before and after the workload while sampling (default 100)
//   --mem-mib N                 size of the streamed buffer (default 1024)
//   --range-check               instead of PM sampling: one user range with the Range Profiler API around the
//                               workload, as a control that the performance counters work at all
//   --range-metrics a,b,c       metrics for --range-check
//   --print-samples N           first and last N samples printed (default 3)
//   --csv PATH                  write every sample to PATH
//   --label NAME                name of this run in the RESULT line
//   --watchdog-s N              abort (exit 4) after N seconds (default 60)
//   --selftest                  no GPU: feed synthetic samples through the report (checks the report code)
//
// Output: human-readable sections, plus machine-readable lines: "DECODE ...", "SYSCLK_HZ <hz>",
// "TIMESTAMP_DOMAIN ...", and one last "RESULT label=... status=... samples=N ..." line.
// Exit status: 0 samples were collected (or --list / --range-check succeeded); 1 a CUDA or CUPTI call failed;
// 2 bad usage; 3 everything succeeded but there were no samples; 4 watchdog; 128+N killed by signal N.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// ------------------------------------------------------------------------------------------------ kernels

#ifdef __CUDACC__
// Memory-bound: read-modify-write of the whole buffer, grid-stride.
__global__ void stream_kernel(float4* p, size_t n, float a, float b) {
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float4 v = p[i];
    v.x = fmaf(v.x, a, b);
    v.y = fmaf(v.y, a, b);
    v.z = fmaf(v.z, a, b);
    v.w = fmaf(v.w, a, b);
    p[i] = v;
  }
}

// Compute-bound: 8 independent FMA chains per thread, no memory traffic but one never-taken store.
__global__ void fma_kernel(float* sink, int iters) {
  float a0 = threadIdx.x * 1e-6f, a1 = a0 + 0.1f, a2 = a0 + 0.2f, a3 = a0 + 0.3f;
  float a4 = a0 + 0.4f, a5 = a0 + 0.5f, a6 = a0 + 0.6f, a7 = a0 + 0.7f;
  const float m = 0.99999f, c = 1e-6f;
  for (int i = 0; i < iters; ++i) {
    a0 = fmaf(a0, m, c);
    a1 = fmaf(a1, m, c);
    a2 = fmaf(a2, m, c);
    a3 = fmaf(a3, m, c);
    a4 = fmaf(a4, m, c);
    a5 = fmaf(a5, m, c);
    a6 = fmaf(a6, m, c);
    a7 = fmaf(a7, m, c);
  }
  float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
  if (s == -1.0f) sink[blockIdx.x] = s;
}

// NVIDIA's pm_sampling sample's workload: many launches of a tiny vector add.
__global__ void tiny_add(const int* a, const int* b, int* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void globaltimer_kernel(unsigned long long* out) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *out = t;
}

static cudaError_t launch_stream(cudaStream_t s, float4* p, size_t n, int grid) {
  stream_kernel<<<grid, 256, 0, s>>>(p, n, 0.999f, 0.001f);
  return cudaGetLastError();
}
static cudaError_t launch_fma(cudaStream_t s, float* sink, int iters, int grid) {
  fma_kernel<<<grid, 256, 0, s>>>(sink, iters);
  return cudaGetLastError();
}
static cudaError_t launch_tiny(cudaStream_t s, const int* a, const int* b, int* c, int n) {
  tiny_add<<<(n + 255) / 256, 256, 0, s>>>(a, b, c, n);
  return cudaGetLastError();
}
static cudaError_t launch_globaltimer(cudaStream_t s, unsigned long long* out) {
  globaltimer_kernel<<<1, 1, 0, s>>>(out);
  return cudaGetLastError();
}
#else
// Host-only build (syntax check with g++): no kernels.
static cudaError_t launch_stream(cudaStream_t, float4*, size_t, int) { return cudaErrorNotSupported; }
static cudaError_t launch_fma(cudaStream_t, float*, int, int) { return cudaErrorNotSupported; }
static cudaError_t launch_tiny(cudaStream_t, const int*, const int*, int*, int) { return cudaErrorNotSupported; }
static cudaError_t launch_globaltimer(cudaStream_t, unsigned long long*) { return cudaErrorNotSupported; }
#endif

// ------------------------------------------------------------------------------------------------ output, clocks

static std::mutex g_out_mu;

__attribute__((format(printf, 1, 2))) static void out(const char* fmt, ...) {
  std::lock_guard<std::mutex> lock(g_out_mu);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

static uint64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static double mono_ms() { return clock_ns(CLOCK_MONOTONIC) / 1e6; }
static double g_t0_ms = 0;  // program start on CLOCK_MONOTONIC
static double rel_ms() { return mono_ms() - g_t0_ms; }
static uint64_t cupti_now() {
  uint64_t t = 0;
  if (cuptiGetTimestamp(&t) != CUPTI_SUCCESS) return 0;
  return t;
}
// Signed difference a - b of two unsigned timestamps, in ms.
static double dms(uint64_t a, uint64_t b) { return (double)(int64_t)(a - b) / 1e6; }
static void sleep_ms(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::microseconds((int64_t)(ms * 1000)));
}

// ------------------------------------------------------------------------------------------------ watchdog

static std::atomic<const char*> g_phase{"startup"};
static void set_phase(const char* p) { g_phase.store(p); }

static void write_str(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = write(1, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static const char* g_label = "";
static void on_signal(int sig) {
  const char* what = sig == SIGALRM ? "WATCHDOG: timed out (SIGALRM, signal" : "KILLED: (signal";
  char num[16];
  int v = sig, k = 0;
  char tmp[16];
  do {
    tmp[k++] = (char)('0' + v % 10);
    v /= 10;
  } while (v > 0 && k < 15);
  for (int i = 0; i < k; ++i) num[i] = tmp[k - 1 - i];
  num[k] = 0;
  write_str("\nFAIL: ");
  write_str(what);
  write_str(" ");
  write_str(num);
  write_str(") during phase '");
  write_str(g_phase.load());
  write_str("'\nRESULT label=");
  write_str(g_label);
  write_str(sig == SIGALRM ? " status=watchdog" : " status=signal");
  write_str(" samples=? phase=");
  write_str(g_phase.load());
  write_str("\n");
  _exit(sig == SIGALRM ? 4 : 128 + sig);
}

// ------------------------------------------------------------------------------------------------ CUPTI / CUDA calls

static std::mutex g_err_mu;
static std::string g_first_error;
static std::atomic<size_t> g_cupti_failures{0};
static std::atomic<int> g_fail_prints{0};

static const char* cupti_name(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) return "CUPTI_ERROR_?";
  return s;
}
static const char* cupti_msg(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetErrorMessage(r, &s) != CUPTI_SUCCESS || s == nullptr) return "";
  return s;
}
static void note_error(const std::string& e) {
  std::lock_guard<std::mutex> lock(g_err_mu);
  if (g_first_error.empty()) g_first_error = e;
}
static std::string first_error() {
  std::lock_guard<std::mutex> lock(g_err_mu);
  return g_first_error.empty() ? std::string("-") : g_first_error;
}
// Failure lines are printed for the first 200 failures only (a decode loop can fail thousands of times).
static bool may_print_failure() {
  int k = g_fail_prints.fetch_add(1);
  if (k == 200) out("  (further failures are counted, not printed)\n");
  return k < 200;
}

// Runs one CUPTI call, times it and prints it (successes only when print_ok).
template <class F>
static CUptiResult cupti_call(const char* name, F&& f, bool print_ok) {
  double t0 = mono_ms();
  CUptiResult r = f();
  double dt = mono_ms() - t0;
  if (r == CUPTI_SUCCESS) {
    if (print_ok) out("  [cupti] %-46s -> OK (%.2f ms)\n", name, dt);
  } else {
    ++g_cupti_failures;
    if (may_print_failure())
      out("  [cupti] %-46s -> FAILED %s (%d): %s (%.2f ms)\n", name, cupti_name(r), (int)r, cupti_msg(r), dt);
    note_error(std::string(name) + ":" + cupti_name(r));
  }
  return r;
}
#define CUPTI_V(fn, arg) cupti_call(#fn, [&]() { return fn(arg); }, true)
#define CUPTI_Q(fn, arg) cupti_call(#fn, [&]() { return fn(arg); }, false)

template <class T>
static T make_params(size_t size) {
  T p;
  std::memset(&p, 0, sizeof p);
  p.structSize = size;
  return p;
}
#define PARAMS(T) make_params<T>(T##_STRUCT_SIZE)

static bool cuda_ok(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return true;
  if (may_print_failure()) out("  [cuda] %s -> FAILED %s: %s\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  note_error(std::string(what) + ":" + cudaGetErrorName(e));
  return false;
}
static bool cu_ok(const char* what, CUresult e) {
  if (e == CUDA_SUCCESS) return true;
  const char* name = nullptr;
  const char* msg = nullptr;
  cuGetErrorName(e, &name);
  cuGetErrorString(e, &msg);
  out("  [cu] %s -> FAILED %s (%d): %s\n", what, name ? name : "?", (int)e, msg ? msg : "");
  note_error(std::string(what) + ":" + (name ? name : "?"));
  return false;
}

// ------------------------------------------------------------------------------------------------ options

struct Options {
  bool list = false, list_sub = false;
  std::string filter;
  int device = 0;
  bool trigger_time = true;
  uint64_t interval = 100000;
  uint64_t hwbuf_mib = 64;
  bool keep_latest = false;
  uint32_t max_samples = 10000;
  bool profiler_init = true;
  bool decode_thread = true;
  double decode_period_ms = 10;
  bool reset_always = false;
  bool decode_before_start = false;
  bool thread_around = false;
  bool drain = true;
  bool ctx_after_enable = false;
  bool cdi_before_setconfig = false;
  std::vector<std::string> metrics = {
      "gr__cycles_active.avg",                                      // GR engine active cycles (NVIDIA's sample)
      "sm__cycles_active.avg",                                      // SM active cycles (NVIDIA's sample)
      "gpu__time_duration.sum",                                     // sample duration (NVIDIA's sample)
      "sys__cycles_elapsed.avg.per_second",                         // SYS clock, Hz (PM sampling metric table)
      "dramc__read_throughput.avg.pct_of_peak_sustained_elapsed",   // DRAM read bandwidth % (metric table)
      "sm__inst_executed_realtime.avg.pct_of_peak_sustained_elapsed",  // SM issue % (metric table)
      "dram__bytes_read.sum.per_second",                            // DRAM read bytes/s (dropped if it needs a pass)
  };
  bool strict_metrics = false;
  std::string workload = "mix";
  double duration_ms = 2000, phase_ms = 250, idle_ms = 100;
  size_t mem_mib = 1024;
  bool range_check = false;
  std::vector<std::string> range_metrics = {"gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
                                            "sm__cycles_active.avg", "smsp__inst_executed.sum"};
  int print_samples = 3;
  std::string csv;
  std::string label = "run";
  unsigned watchdog_s = 60;
  bool selftest = false;
};
static Options g_opt;

static void usage(FILE* f) {
  std::fprintf(f,
               "usage: pm_probe [--list [--filter STR] [--list-sub]] [--device N] [--trigger sysclk|time]\n"
               "                [--interval N] [--hwbuf-mib N] [--append oldest|latest] [--max-samples N]\n"
               "                [--no-profiler-init] [--decode thread|end] [--decode-period-ms N]\n"
               "                [--reset full|always] [--decode-before-start] [--thread-around-start-stop]\n"
               "                [--no-drain] [--ctx-after-enable]\n"
               "                [--cdi-before-setconfig] [--metrics a,b,c] [--strict-metrics]\n"
               "                [--workload mix|mem|fma|tiny|nvsample|none] [--duration-ms N] [--phase-ms N]\n"
               "                [--idle-ms N]\n"
               "                [--mem-mib N] [--range-check [--range-metrics a,b,c]] [--print-samples N]\n"
               "                [--csv PATH] [--label NAME] [--watchdog-s N] [--selftest]\n"
               "(see the comment at the top of pm_probe.cu)\n");
}

static std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> v;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    std::string t = s.substr(b, e - b);
    if (!t.empty()) v.push_back(t);
    b = e + 1;
  }
  return v;
}

static bool parse_u64(const char* s, uint64_t* v) {
  if (s == nullptr || *s == 0) return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != 0) return false;
  *v = x;
  return true;
}
static bool parse_double(const char* s, double* v) {
  if (s == nullptr || *s == 0) return false;
  char* end = nullptr;
  errno = 0;
  double x = std::strtod(s, &end);
  if (errno != 0 || end == s || *end != 0 || !(x >= 0)) return false;
  *v = x;
  return true;
}

static bool is_value_option(const std::string& a) {
  static const char* v[] = {"--filter",   "--device",     "--trigger",      "--interval",         "--hwbuf-mib",
                            "--append",   "--max-samples", "--decode",      "--decode-period-ms", "--reset",
                            "--metrics",  "--range-metrics", "--workload",  "--duration-ms",      "--phase-ms",
                            "--idle-ms",  "--mem-mib",    "--print-samples", "--csv",             "--label",
                            "--watchdog-s"};
  for (const char* x : v)
    if (a == x) return true;
  return false;
}

static int parse_args(int argc, char** argv, Options& o) {
  auto bad = [&](const char* msg, const char* a) {
    std::fprintf(stderr, "pm_probe: %s: %s\n", msg, a);
    usage(stderr);
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = (i + 1 < argc) ? argv[i + 1] : nullptr;
    uint64_t u = 0;
    double d = 0;
    auto need = [&]() { return v != nullptr; };
    if (a == "-h" || a == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--list") o.list = true;
    else if (a == "--list-sub") o.list_sub = true;
    else if (a == "--no-profiler-init") o.profiler_init = false;
    else if (a == "--decode-before-start") o.decode_before_start = true;
    else if (a == "--thread-around-start-stop") o.thread_around = true;
    else if (a == "--no-drain") o.drain = false;
    else if (a == "--ctx-after-enable") o.ctx_after_enable = true;
    else if (a == "--cdi-before-setconfig") o.cdi_before_setconfig = true;
    else if (a == "--strict-metrics") o.strict_metrics = true;
    else if (a == "--range-check") o.range_check = true;
    else if (a == "--selftest") o.selftest = true;
    else if (!is_value_option(a)) return bad("unknown option", argv[i]);
    else if (!need()) return bad("missing value for", argv[i]);
    else if (a == "--filter") { o.filter = v; ++i; }
    else if (a == "--device") { if (!parse_u64(v, &u) || u > 64) return bad("bad --device", v); o.device = (int)u; ++i; }
    else if (a == "--trigger") {
      if (std::strcmp(v, "time") == 0) o.trigger_time = true;
      else if (std::strcmp(v, "sysclk") == 0) o.trigger_time = false;
      else return bad("bad --trigger (sysclk|time)", v);
      ++i;
    } else if (a == "--interval") { if (!parse_u64(v, &u) || u == 0) return bad("bad --interval", v); o.interval = u; ++i; }
    else if (a == "--hwbuf-mib") { if (!parse_u64(v, &u) || u == 0 || u > 65536) return bad("bad --hwbuf-mib", v); o.hwbuf_mib = u; ++i; }
    else if (a == "--append") {
      if (std::strcmp(v, "oldest") == 0) o.keep_latest = false;
      else if (std::strcmp(v, "latest") == 0) o.keep_latest = true;
      else return bad("bad --append (oldest|latest)", v);
      ++i;
    } else if (a == "--max-samples") {
      if (!parse_u64(v, &u) || u == 0 || u > 100000000) return bad("bad --max-samples", v);
      o.max_samples = (uint32_t)u;
      ++i;
    } else if (a == "--decode") {
      if (std::strcmp(v, "thread") == 0) o.decode_thread = true;
      else if (std::strcmp(v, "end") == 0) o.decode_thread = false;
      else return bad("bad --decode (thread|end)", v);
      ++i;
    } else if (a == "--decode-period-ms") { if (!parse_double(v, &d) || d > 10000) return bad("bad --decode-period-ms", v); o.decode_period_ms = d; ++i; }
    else if (a == "--reset") {
      if (std::strcmp(v, "full") == 0) o.reset_always = false;
      else if (std::strcmp(v, "always") == 0) o.reset_always = true;
      else return bad("bad --reset (full|always)", v);
      ++i;
    } else if (a == "--metrics") { o.metrics = split_csv(v); if (o.metrics.empty()) return bad("empty --metrics", v); ++i; }
    else if (a == "--range-metrics") { o.range_metrics = split_csv(v); if (o.range_metrics.empty()) return bad("empty --range-metrics", v); ++i; }
    else if (a == "--workload") {
      std::string w = v;
      if (w != "mix" && w != "mem" && w != "fma" && w != "tiny" && w != "nvsample" && w != "none")
        return bad("bad --workload", v);
      o.workload = w;
      ++i;
    } else if (a == "--duration-ms") { if (!parse_double(v, &d) || d > 30000) return bad("bad --duration-ms (<= 30000)", v); o.duration_ms = d; ++i; }
    else if (a == "--phase-ms") { if (!parse_double(v, &d) || d < 1) return bad("bad --phase-ms", v); o.phase_ms = d; ++i; }
    else if (a == "--idle-ms") { if (!parse_double(v, &d) || d > 10000) return bad("bad --idle-ms", v); o.idle_ms = d; ++i; }
    else if (a == "--mem-mib") { if (!parse_u64(v, &u) || u < 1 || u > 65536) return bad("bad --mem-mib", v); o.mem_mib = u; ++i; }
    else if (a == "--print-samples") { if (!parse_u64(v, &u) || u > 1000) return bad("bad --print-samples", v); o.print_samples = (int)u; ++i; }
    else if (a == "--csv") { o.csv = v; ++i; }
    else if (a == "--label") { o.label = v; ++i; }
    else if (a == "--watchdog-s") { if (!parse_u64(v, &u) || u > 3600) return bad("bad --watchdog-s", v); o.watchdog_s = (unsigned)u; ++i; }
    else return bad("unknown option", argv[i]);
  }
  return 0;
}

// ------------------------------------------------------------------------------------------------ state

struct Mark {
  std::string name;
  uint64_t rt = 0, mono = 0, raw = 0, cupti = 0, gpu = 0;  // gpu = 0: not taken
};
enum Domain { D_CUPTI, D_REALTIME, D_MONOTONIC, D_MONO_RAW, D_GPU, D_COUNT };
static const char* domain_name(int d) {
  static const char* n[] = {"cuptiGetTimestamp", "CLOCK_REALTIME", "CLOCK_MONOTONIC", "CLOCK_MONOTONIC_RAW",
                            "GPU_globaltimer"};
  return n[d];
}
static uint64_t mark_get(const Mark& m, int d) {
  switch (d) {
    case D_CUPTI: return m.cupti;
    case D_REALTIME: return m.rt;
    case D_MONOTONIC: return m.mono;
    case D_MONO_RAW: return m.raw;
    default: return m.gpu;
  }
}

struct Phase {
  std::string kind;
  Mark begin, end;
  long launches = 0;
};

struct Sample {
  uint64_t start = 0, end = 0;
  std::vector<double> v;
  int gen = 0;         // which reset generation of the counter-data image
  size_t idx = 0;      // index within that image
  size_t decode_no = 0;
  bool in_loop = false;  // obtained by a decode during collection (else: after stop, or pre-start)
  uint64_t got_cupti = 0;
};

struct DecodeStats {
  size_t decodes = 0, ok = 0, errors = 0, oom = 0, overflow = 0, reasons[4] = {0, 0, 0, 0};
  size_t with_partial = 0;  // decodes that left populated > completed
  size_t max_populated = 0;
  size_t resets = 0, eval_errors = 0;
  double total_ms = 0, max_ms = 0;
  size_t consecutive_errors = 0;
};

struct State {
  CUdevice cu_dev = 0;
  std::string chip;
  bool profiler_initialized = false;
  CUpti_Profiler_Host_Object* list_host = nullptr;  // for enumeration and properties
  CUpti_Profiler_Host_Object* host = nullptr;       // configured with the metrics; evaluates samples
  CUpti_PmSampling_Object* obj = nullptr;
  bool started = false;
  std::vector<uint8_t> avail, config, image;  // config kept alive until Disable: CUPTI keeps the pointer
  std::vector<std::string> metrics;
  std::vector<const char*> metric_ptrs;
  // workload
  bool ctx_ready = false;
  cudaStream_t stream = nullptr;
  float4* buf = nullptr;
  size_t n4 = 0;
  float* sink = nullptr;
  int *ta = nullptr, *tb = nullptr, *tc = nullptr;
  int tiny_n = 50000;
  unsigned long long* gt = nullptr;
  int sms = 0, grid = 0, fma_iters = 1 << 14;
  double stream_ms = 0, fma_ms = 0, tiny_ms = 0;
  // marks and samples
  std::vector<Mark> marks;
  std::vector<Phase> phases;
  std::mutex samples_mu;
  std::vector<Sample> samples;
  DecodeStats ds;
  int gen = 0;
  size_t evaluated = 0;  // samples of the current image already evaluated
  size_t decode_no = 0;
  // decode print throttling
  int last_reason = -1, last_overflow = -1;
  bool seen_populated = false, seen_completed = false;
  CUptiResult last_result = CUPTI_SUCCESS;
  double last_print_ms = 0;
  std::atomic<bool> stop_decode{false};
  std::thread decode_th;
  std::mutex wait_mu;
  std::condition_variable wait_cv;
};
static State g;

static void fail(const std::string& reason);

// ------------------------------------------------------------------------------------------------ marks

static bool read_globaltimer(uint64_t* v) {
  if (!g.ctx_ready || g.gt == nullptr) return false;
  if (launch_globaltimer(g.stream, g.gt) != cudaSuccess) return false;
  if (cudaStreamSynchronize(g.stream) != cudaSuccess) return false;
  unsigned long long h = 0;
  if (cudaMemcpy(&h, g.gt, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  *v = h;
  return true;
}

static Mark take_mark(const char* name, bool with_gpu) {
  Mark m;
  m.name = name;
  if (with_gpu) {
    uint64_t t = 0;
    if (read_globaltimer(&t)) m.gpu = t;
  }
  m.cupti = cupti_now();
  m.rt = clock_ns(CLOCK_REALTIME);
  m.mono = clock_ns(CLOCK_MONOTONIC);
  m.raw = clock_ns(CLOCK_MONOTONIC_RAW);
  return m;
}
static void add_mark(const char* name, bool with_gpu) {
  Mark m = take_mark(name, with_gpu);
  out("MARK %-16s t=%.1fms cupti=%" PRIu64 " realtime=%" PRIu64 " monotonic=%" PRIu64 " monotonic_raw=%" PRIu64
      " gpu_globaltimer=%" PRIu64 "%s\n",
      name, m.mono / 1e6 - g_t0_ms, m.cupti, m.rt, m.mono, m.raw, m.gpu, m.gpu ? "" : " (not taken)");
  g.marks.push_back(m);
}
static const Mark* find_mark(const char* name) {
  for (const Mark& m : g.marks)
    if (m.name == name) return &m;
  return nullptr;
}

// ------------------------------------------------------------------------------------------------ environment

static void print_loaded_libraries() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return;
  std::vector<std::string> seen;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    const char* p = std::strchr(line, '/');
    if (!p) continue;
    std::string path(p);
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    if (path.find("cupti") == std::string::npos && path.find("nvperf") == std::string::npos &&
        path.find("libcuda") == std::string::npos && path.find("nvidia") == std::string::npos)
      continue;
    if (std::find(seen.begin(), seen.end(), path) == seen.end()) seen.push_back(path);
  }
  std::fclose(f);
  out("loaded libraries (cupti / nvperf / cuda / nvidia):\n");
  for (const std::string& s : seen) out("  %s\n", s.c_str());
}

static bool print_environment() {
  set_phase("environment");
  out("== environment\n");
  out("pm_probe label=%s pid=%d uid=%d euid=%d\n", g_opt.label.c_str(), (int)getpid(), (int)getuid(), (int)geteuid());
  uint32_t cv = 0;
  CUptiResult r = cuptiGetVersion(&cv);
  out("CUPTI: cuptiGetVersion=%u (%s), compiled with CUPTI_API_VERSION=%d\n", cv, cupti_name(r), (int)CUPTI_API_VERSION);
  Dl_info info;
  if (dladdr((void*)&cuptiGetVersion, &info) && info.dli_fname) out("libcupti loaded from: %s\n", info.dli_fname);
  const char* ld = std::getenv("LD_LIBRARY_PATH");
  out("LD_LIBRARY_PATH=%s\n", ld ? ld : "(unset)");
  if (!cu_ok("cuInit(0)", cuInit(0))) return false;
  int drv = 0, rt = 0;
  cuDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  out("CUDA driver API version %d, runtime version %d\n", drv, rt);
  int count = 0;
  if (!cu_ok("cuDeviceGetCount", cuDeviceGetCount(&count))) return false;
  out("devices: %d\n", count);
  if (g_opt.device >= count) {
    out("device %d does not exist\n", g_opt.device);
    return false;
  }
  if (!cu_ok("cuDeviceGet", cuDeviceGet(&g.cu_dev, g_opt.device))) return false;
  char name[256] = {0};
  cuDeviceGetName(name, sizeof name - 1, g.cu_dev);
  auto attr = [&](CUdevice_attribute a) {
    int v = -1;
    cuDeviceGetAttribute(&v, a, g.cu_dev);
    return v;
  };
  g.sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  out("device %d: %s, compute capability %d.%d, %d SMs, clock %d kHz, memory clock %d kHz, bus width %d bits\n",
      g_opt.device, name, attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
      attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), g.sms, attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
      attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE), attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH));
  out("device %d: PCI %04x:%02x:%02x, compute mode %d, ECC %d, multi-GPU board %d, integrated %d\n", g_opt.device,
      attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID), attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
      attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID), attr(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE),
      attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED), attr(CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD),
      attr(CU_DEVICE_ATTRIBUTE_INTEGRATED));
  return true;
}

static bool create_context() {
  set_phase("create context");
  double t0 = mono_ms();
  if (!cuda_ok("cudaSetDevice", cudaSetDevice(g_opt.device))) return false;
  if (!cuda_ok("cudaFree(0)", cudaFree(0))) return false;
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  out("CUDA context created (primary context %p) in %.1f ms\n", (void*)ctx, mono_ms() - t0);
  g.ctx_ready = true;
  if (!cuda_ok("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking))) return false;
  if (!cuda_ok("cudaMalloc(globaltimer)", cudaMalloc((void**)&g.gt, sizeof(unsigned long long)))) return false;
  return true;
}

static void print_device_supported(CUpti_Profiler_API api, const char* api_name) {
  auto p = PARAMS(CUpti_Profiler_DeviceSupported_Params);
  p.cuDevice = g.cu_dev;
  p.api = api;
  if (CUPTI_V(cuptiProfilerDeviceSupported, &p) != CUPTI_SUCCESS) return;
  auto s = [](CUpti_Profiler_Support_Level l) {
    switch (l) {
      case CUPTI_PROFILER_CONFIGURATION_UNKNOWN: return "UNKNOWN";
      case CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED: return "UNSUPPORTED";
      case CUPTI_PROFILER_CONFIGURATION_DISABLED: return "DISABLED";
      case CUPTI_PROFILER_CONFIGURATION_SUPPORTED: return "SUPPORTED";
      default: return "?";
    }
  };
  out("device supported for %s: overall=%s architecture=%s sli=%s vGpu=%s confidentialCompute=%s cmp=%s wsl=%s\n",
      api_name, s(p.isSupported), s(p.architecture), s(p.sli), s(p.vGpu), s(p.confidentialCompute), s(p.cmp),
      s(p.wsl));
}

// ------------------------------------------------------------------------------------------------ host objects

static CUpti_Profiler_Host_Object* host_create(CUpti_ProfilerType type, const std::vector<uint8_t>& avail, bool verbose) {
  auto p = PARAMS(CUpti_Profiler_Host_Initialize_Params);
  p.profilerType = type;
  p.pChipName = g.chip.c_str();
  p.pCounterAvailabilityImage = avail.empty() ? nullptr : avail.data();
  CUptiResult r = cupti_call("cuptiProfilerHostInitialize", [&]() { return cuptiProfilerHostInitialize(&p); }, verbose);
  return r == CUPTI_SUCCESS ? p.pHostObject : nullptr;
}
static void host_destroy(CUpti_Profiler_Host_Object*& h, bool verbose) {
  if (h == nullptr) return;
  auto p = PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
  p.pHostObject = h;
  cupti_call("cuptiProfilerHostDeinitialize", [&]() { return cuptiProfilerHostDeinitialize(&p); }, verbose);
  h = nullptr;
}

static const char* type_name(CUpti_MetricType t) {
  switch (t) {
    case CUPTI_METRIC_TYPE_COUNTER: return "counter";
    case CUPTI_METRIC_TYPE_RATIO: return "ratio";
    case CUPTI_METRIC_TYPE_THROUGHPUT: return "throughput";
    default: return "?";
  }
}

struct MetricProps {
  bool ok = false;
  CUpti_MetricType type = CUPTI_METRIC_TYPE__COUNT;
  std::string desc, hw, dim;
  CUptiResult r = CUPTI_SUCCESS;
};
static MetricProps metric_props(CUpti_Profiler_Host_Object* h, const char* name, bool verbose) {
  MetricProps m;
  auto p = PARAMS(CUpti_Profiler_Host_GetMetricProperties_Params);
  p.pHostObject = h;
  p.pMetricName = name;
  m.r = cupti_call("cuptiProfilerHostGetMetricProperties",
                   [&]() { return cuptiProfilerHostGetMetricProperties(&p); }, verbose);
  if (m.r != CUPTI_SUCCESS) return m;
  m.ok = true;
  m.type = p.metricType;
  m.desc = p.pDescription ? p.pDescription : "";
  m.hw = p.pHwUnit ? p.pHwUnit : "";
  m.dim = p.pDimUnit ? p.pDimUnit : "";
  return m;
}

struct ConfigTry {
  CUptiResult r = CUPTI_SUCCESS;
  const char* failed_call = "";
  size_t passes = 0;
  std::vector<uint8_t> image;
  CUpti_Profiler_Host_Object* host = nullptr;
};
// A fresh host object with these metrics added; its config image and number of passes. The host object is kept
// (returned) only when keep is set and everything succeeded.
static ConfigTry try_config(CUpti_ProfilerType type, const std::vector<uint8_t>& avail,
                            const std::vector<const char*>& metrics, bool verbose, bool keep) {
  ConfigTry t;
  t.host = host_create(type, avail, verbose);
  if (t.host == nullptr) {
    t.r = CUPTI_ERROR_UNKNOWN;
    t.failed_call = "cuptiProfilerHostInitialize";
    return t;
  }
  auto a = PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
  a.pHostObject = t.host;
  a.ppMetricNames = const_cast<const char**>(metrics.data());
  a.numMetrics = metrics.size();
  t.r = cupti_call("cuptiProfilerHostConfigAddMetrics", [&]() { return cuptiProfilerHostConfigAddMetrics(&a); }, verbose);
  if (t.r != CUPTI_SUCCESS) {
    t.failed_call = "cuptiProfilerHostConfigAddMetrics";
  } else {
    auto s = PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
    s.pHostObject = t.host;
    t.r = cupti_call("cuptiProfilerHostGetConfigImageSize",
                     [&]() { return cuptiProfilerHostGetConfigImageSize(&s); }, verbose);
    if (t.r != CUPTI_SUCCESS) {
      t.failed_call = "cuptiProfilerHostGetConfigImageSize";
    } else {
      t.image.assign(s.configImageSize, 0);
      auto c = PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
      c.pHostObject = t.host;
      c.configImageSize = t.image.size();
      c.pConfigImage = t.image.data();
      t.r = cupti_call("cuptiProfilerHostGetConfigImage", [&]() { return cuptiProfilerHostGetConfigImage(&c); }, verbose);
      if (t.r != CUPTI_SUCCESS) {
        t.failed_call = "cuptiProfilerHostGetConfigImage";
      } else {
        auto n = PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
        n.configImageSize = t.image.size();
        n.pConfigImage = t.image.data();
        t.r = cupti_call("cuptiProfilerHostGetNumOfPasses", [&]() { return cuptiProfilerHostGetNumOfPasses(&n); },
                         verbose);
        if (t.r != CUPTI_SUCCESS) t.failed_call = "cuptiProfilerHostGetNumOfPasses";
        else t.passes = n.numOfPasses;
      }
    }
  }
  if (!keep || t.r != CUPTI_SUCCESS) host_destroy(t.host, verbose);
  return t;
}

static std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + v[i];
  return s;
}

// Chooses the metrics to collect: existing ones, in the order given, as many as fit max_passes. Leaves g.host
// configured with them and g.config holding the config image. Returns false when none is left (or, with
// --strict-metrics, when any was dropped).
static bool select_metrics(CUpti_ProfilerType type, const std::vector<uint8_t>& avail,
                           const std::vector<std::string>& wanted, size_t max_passes,
                           std::vector<std::string>* chosen_out, CUpti_Profiler_Host_Object** host_out,
                           std::vector<uint8_t>* config_out) {
  out("== metrics (%s)\n", type == CUPTI_PROFILER_TYPE_PM_SAMPLING ? "PM sampling" : "range profiler");
  std::vector<std::string> existing;
  bool dropped = false;
  for (const std::string& m : wanted) {
    MetricProps p = metric_props(g.list_host, m.c_str(), false);
    if (!p.ok) {
      out("METRIC-MISSING %s: cuptiProfilerHostGetMetricProperties -> %s (%s); not a metric of chip %s for this "
          "profiler type; dropped\n",
          m.c_str(), cupti_name(p.r), cupti_msg(p.r), g.chip.c_str());
      dropped = true;
      continue;
    }
    out("METRIC %s: type=%s hw_unit=%s dim_unit=%s desc=\"%s\"\n", m.c_str(), type_name(p.type), p.hw.c_str(),
        p.dim.c_str(), p.desc.c_str());
    existing.push_back(m);
  }
  auto ptrs = [](const std::vector<std::string>& v) {
    std::vector<const char*> p;
    for (const std::string& s : v) p.push_back(s.c_str());
    return p;
  };
  double t0 = mono_ms();
  ConfigTry all = try_config(type, avail, ptrs(existing), true, true);
  out("config for all %zu metrics: %s, passes=%zu, config image %zu bytes (%.1f ms)\n", existing.size(),
      all.r == CUPTI_SUCCESS ? "OK" : cupti_name(all.r), all.passes, all.image.size(), mono_ms() - t0);
  std::vector<std::string> chosen;
  if (!existing.empty() && all.r == CUPTI_SUCCESS && all.passes >= 1 && all.passes <= max_passes) {
    chosen = existing;
    *host_out = all.host;
    *config_out = all.image;
  } else {
    host_destroy(all.host, false);
    out("the whole set does not fit %zu pass(es) (failed call: %s); trying each metric alone, then greedily:\n",
        max_passes, all.r == CUPTI_SUCCESS ? "none, too many passes" : all.failed_call);
    std::vector<std::string> singles;
    for (const std::string& m : existing) {
      ConfigTry one = try_config(type, avail, ptrs({m}), false, false);
      out("METRIC-ALONE %s: %s%s%s passes=%zu\n", m.c_str(), one.r == CUPTI_SUCCESS ? "OK" : cupti_name(one.r),
          one.r == CUPTI_SUCCESS ? "" : " in ", one.r == CUPTI_SUCCESS ? "" : one.failed_call, one.passes);
      if (one.r == CUPTI_SUCCESS && one.passes >= 1 && one.passes <= max_passes) singles.push_back(m);
      else {
        out("METRIC-DROPPED %s: %s\n", m.c_str(),
            one.r == CUPTI_SUCCESS ? "needs more passes than allowed even alone" : "cannot be configured");
        dropped = true;
      }
    }
    for (const std::string& m : singles) {
      std::vector<std::string> trial = chosen;
      trial.push_back(m);
      ConfigTry t = try_config(type, avail, ptrs(trial), false, false);
      if (t.r == CUPTI_SUCCESS && t.passes >= 1 && t.passes <= max_passes) {
        chosen = trial;
      } else {
        out("METRIC-DROPPED %s: together with [%s] it needs %zu passes (%s)\n", m.c_str(), join(chosen).c_str(),
            t.passes, t.r == CUPTI_SUCCESS ? "OK" : cupti_name(t.r));
        dropped = true;
      }
    }
    if (!chosen.empty()) {
      ConfigTry fin = try_config(type, avail, ptrs(chosen), true, true);
      if (fin.r != CUPTI_SUCCESS) {
        out("final configuration failed\n");
        return false;
      }
      *host_out = fin.host;
      *config_out = fin.image;
      out("config for the chosen %zu metrics: passes=%zu, config image %zu bytes\n", chosen.size(), fin.passes,
          fin.image.size());
    }
  }
  out("METRICS-USED %s\n", join(chosen).c_str());
  if (chosen.empty()) {
    out("no usable metric left\n");
    return false;
  }
  if (dropped && g_opt.strict_metrics) {
    out("--strict-metrics: some metric was dropped\n");
    return false;
  }
  *chosen_out = chosen;
  return true;
}

// ------------------------------------------------------------------------------------------------ --list

static int do_list() {
  set_phase("list");
  out("== list: chip %s\n", g.chip.c_str());
  {
    auto p = PARAMS(CUpti_Profiler_Host_GetSupportedChips_Params);
    if (CUPTI_V(cuptiProfilerHostGetSupportedChips, &p) == CUPTI_SUCCESS) {
      std::string s;
      for (size_t i = 0; i < p.numChips; ++i) s += std::string(i ? " " : "") + (p.ppChipNames[i] ? p.ppChipNames[i] : "?");
      out("supported chips (%zu): %s\n", p.numChips, s.c_str());
    }
  }
  {
    auto p = PARAMS(CUpti_Profiler_Host_GetMaxNumHardwareMetricsPerPass_Params);
    p.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
    p.pChipName = g.chip.c_str();
    p.pCounterAvailabilityImage = g.avail.empty() ? nullptr : g.avail.data();
    if (CUPTI_V(cuptiProfilerHostGetMaxNumHardwareMetricsPerPass, &p) == CUPTI_SUCCESS)
      out("max hardware metrics per pass (PM sampling): %zu\n", p.maxMetricsPerPass);
  }
  size_t total = 0, shown = 0;
  for (int t = 0; t < (int)CUPTI_METRIC_TYPE__COUNT; ++t) {
    auto p = PARAMS(CUpti_Profiler_Host_GetBaseMetrics_Params);
    p.pHostObject = g.list_host;
    p.metricType = (CUpti_MetricType)t;
    if (CUPTI_V(cuptiProfilerHostGetBaseMetrics, &p) != CUPTI_SUCCESS) continue;
    out("-- base metrics of type %s: %zu\n", type_name((CUpti_MetricType)t), p.numMetrics);
    total += p.numMetrics;
    for (size_t i = 0; i < p.numMetrics; ++i) {
      const char* n = p.ppMetricNames[i];
      if (n == nullptr) continue;
      if (!g_opt.filter.empty() && std::strstr(n, g_opt.filter.c_str()) == nullptr) continue;
      ++shown;
      MetricProps m = metric_props(g.list_host, n, false);
      out("BASE %-10s %-70s hw=%s dim=%s desc=\"%s\"\n", type_name((CUpti_MetricType)t), n, m.hw.c_str(),
          m.dim.c_str(), m.desc.c_str());
      if (g_opt.list_sub) {
        auto s = PARAMS(CUpti_Profiler_Host_GetSubMetrics_Params);
        s.pHostObject = g.list_host;
        s.metricType = (CUpti_MetricType)t;
        s.pMetricName = n;
        if (CUPTI_Q(cuptiProfilerHostGetSubMetrics, &s) == CUPTI_SUCCESS) {
          std::string subs;
          for (size_t k = 0; k < s.numOfSubmetrics; ++k)
            subs += std::string(k ? " " : "") + (s.ppSubMetrics[k] ? s.ppSubMetrics[k] : "?");
          out("    sub: %s\n", subs.c_str());
        }
      }
    }
  }
  out("LIST total base metrics %zu, shown %zu (filter '%s')\n", total, shown, g_opt.filter.c_str());
  return 0;
}

// ------------------------------------------------------------------------------------------------ workload

static double time_kernel(const std::function<cudaError_t()>& launch, int reps) {
  cudaEvent_t a, b;
  if (cudaEventCreate(&a) != cudaSuccess) return -1;
  if (cudaEventCreate(&b) != cudaSuccess) return -1;
  float ms = -1;
  bool ok = cuda_ok("warm-up launch", launch()) && cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(g.stream));
  if (ok) {
    cudaEventRecord(a, g.stream);
    for (int i = 0; i < reps && ok; ++i) ok = cuda_ok("timed launch", launch());
    cudaEventRecord(b, g.stream);
    ok = ok && cuda_ok("cudaEventSynchronize", cudaEventSynchronize(b));
    if (ok) cudaEventElapsedTime(&ms, a, b);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ok ? (double)ms / reps : -1;
}

static bool workload_setup() {
  set_phase("workload setup");
  out("== workload setup (%s)\n", g_opt.workload.c_str());
  g.grid = std::max(1, g.sms) * 8;
  size_t bytes = g_opt.mem_mib << 20;
  while (bytes >= (64u << 20)) {
    if (cudaMalloc((void**)&g.buf, bytes) == cudaSuccess) break;
    cudaGetLastError();
    g.buf = nullptr;
    out("cudaMalloc(%zu MiB) failed, trying half\n", bytes >> 20);
    bytes /= 2;
  }
  if (g.buf == nullptr) return cuda_ok("cudaMalloc(stream buffer)", cudaErrorMemoryAllocation);
  g.n4 = bytes / sizeof(float4);
  if (!cuda_ok("cudaMemset(stream buffer)", cudaMemset(g.buf, 0, bytes))) return false;
  if (!cuda_ok("cudaMalloc(sink)", cudaMalloc((void**)&g.sink, sizeof(float) * (size_t)g.grid))) return false;
  size_t tb = sizeof(int) * (size_t)g.tiny_n;
  if (!cuda_ok("cudaMalloc(tiny a)", cudaMalloc((void**)&g.ta, tb))) return false;
  if (!cuda_ok("cudaMalloc(tiny b)", cudaMalloc((void**)&g.tb, tb))) return false;
  if (!cuda_ok("cudaMalloc(tiny c)", cudaMalloc((void**)&g.tc, tb))) return false;
  cudaMemset(g.ta, 0, tb);
  cudaMemset(g.tb, 0, tb);
  if (!cuda_ok("cudaDeviceSynchronize", cudaDeviceSynchronize())) return false;

  g.stream_ms = time_kernel([]() { return launch_stream(g.stream, g.buf, g.n4, g.grid); }, 5);
  if (g.stream_ms <= 0) return false;
  out("stream kernel: %zu MiB in place (read + write), grid %d x 256: %.3f ms per launch, %.0f GB/s\n", bytes >> 20,
      g.grid, g.stream_ms, 2.0 * bytes / (g.stream_ms * 1e-3) / 1e9);
  double f0 = time_kernel([]() { return launch_fma(g.stream, g.sink, g.fma_iters, g.grid); }, 3);
  if (f0 <= 0) return false;
  double target = 2.0;  // ms per FMA launch
  double scaled = g.fma_iters * target / f0;
  g.fma_iters = (int)std::min(std::max(scaled, 1024.0), (double)(1 << 26));
  g.fma_ms = time_kernel([]() { return launch_fma(g.stream, g.sink, g.fma_iters, g.grid); }, 3);
  if (g.fma_ms <= 0) return false;
  double flops = 2.0 * 8.0 * g.fma_iters * (double)g.grid * 256.0;
  out("fma kernel: %d iterations x 8 chains, grid %d x 256: %.3f ms per launch, %.1f TFLOP/s fp32\n", g.fma_iters,
      g.grid, g.fma_ms, flops / (g.fma_ms * 1e-3) / 1e12);
  g.tiny_ms = time_kernel([]() { return launch_tiny(g.stream, g.ta, g.tb, g.tc, g.tiny_n); }, 100);
  if (g.tiny_ms <= 0) return false;
  out("tiny kernel (NVIDIA sample's vectorAdd of %d ints): %.4f ms per launch\n", g.tiny_n, g.tiny_ms);
  return true;
}

static bool run_phase(const std::string& kind, double ms, double deadline_ms) {
  Phase ph;
  ph.kind = kind;
  ph.begin = take_mark(kind.c_str(), true);
  double t0 = mono_ms();
  double end = std::min(t0 + ms, deadline_ms);
  bool ok = true;
  if (kind == "none") {
    sleep_ms(end - mono_ms());
  } else if (kind == "nvsample") {
    // CUDA 13.0's pm_sampling sample: 100 launches of vectorAdd over 4096*4096*2 ints, then one synchronize.
    int* base = reinterpret_cast<int*>(g.buf);
    size_t n = std::min<size_t>(4096u * 4096u * 2u, g.n4 * 4 / 3);
    for (int i = 0; i < 100 && ok; ++i) {
      ok = cuda_ok("workload launch", launch_tiny(g.stream, base, base + n, base + 2 * n, (int)n));
      ++ph.launches;
    }
    ok = ok && cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(g.stream));
  } else {
    double per = kind == "mem" ? g.stream_ms : kind == "fma" ? g.fma_ms : g.tiny_ms;
    int batch = std::max(1, (int)(10.0 / std::max(per, 1e-4)));  // about 10 ms of work between synchronizations
    while (ok && mono_ms() < end) {
      for (int i = 0; i < batch && ok; ++i) {
        cudaError_t e = kind == "mem"   ? launch_stream(g.stream, g.buf, g.n4, g.grid)
                        : kind == "fma" ? launch_fma(g.stream, g.sink, g.fma_iters, g.grid)
                                        : launch_tiny(g.stream, g.ta, g.tb, g.tc, g.tiny_n);
        ok = cuda_ok("workload launch", e);
        ++ph.launches;
      }
      ok = ok && cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(g.stream));
    }
  }
  ph.end = take_mark(kind.c_str(), true);
  g.phases.push_back(ph);
  return ok;
}

static bool workload_run() {
  set_phase("workload");
  double t0 = mono_ms();
  double deadline = t0 + g_opt.duration_ms;
  bool ok = true;
  int i = 0;
  while (ok && mono_ms() < deadline) {
    std::string kind = g_opt.workload;
    if (kind == "mix") kind = (i % 2 == 0) ? "mem" : "fma";
    double len = g_opt.workload == "mix" ? g_opt.phase_ms : g_opt.duration_ms;
    ok = run_phase(kind, len, deadline);
    ++i;
    if (kind == "nvsample") break;
    if (i > 100000) break;
  }
  long launches = 0;
  for (const Phase& p : g.phases) launches += p.launches;
  out("workload: %zu phases, %ld launches, %.1f ms\n", g.phases.size(), launches, mono_ms() - t0);
  return ok;
}

// ------------------------------------------------------------------------------------------------ PM sampling

static const char* reason_name(int r) {
  switch (r) {
    case CUPTI_PM_SAMPLING_DECODE_STOP_REASON_OTHER: return "OTHER";
    case CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL: return "COUNTER_DATA_FULL";
    case CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS: return "END_OF_RECORDS";
    default: return "?";
  }
}

static bool cdi_reset(bool verbose) {
  auto p = PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params);
  p.pPmSamplingObject = g.obj;
  p.counterDataSize = g.image.size();
  p.pCounterData = g.image.data();
  return cupti_call("cuptiPmSamplingCounterDataImageInitialize",
                    [&]() { return cuptiPmSamplingCounterDataImageInitialize(&p); }, verbose) == CUPTI_SUCCESS;
}

static bool cdi_create() {
  auto p = PARAMS(CUpti_PmSampling_GetCounterDataSize_Params);
  p.pPmSamplingObject = g.obj;
  p.pMetricNames = g.metric_ptrs.data();
  p.numMetrics = g.metric_ptrs.size();
  p.maxSamples = g_opt.max_samples;
  if (CUPTI_V(cuptiPmSamplingGetCounterDataSize, &p) != CUPTI_SUCCESS) return false;
  out("counter-data image: %zu bytes for %u samples of %zu metrics (%.1f bytes per sample)\n", p.counterDataSize,
      g_opt.max_samples, g.metric_ptrs.size(), (double)p.counterDataSize / g_opt.max_samples);
  g.image.assign(p.counterDataSize, 0);
  if (!cdi_reset(true)) return false;
  auto i = PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params);
  i.pCounterDataImage = g.image.data();
  i.counterDataImageSize = g.image.size();
  if (CUPTI_V(cuptiPmSamplingGetCounterDataInfo, &i) == CUPTI_SUCCESS)
    out("fresh image: numTotalSamples=%zu numPopulatedSamples=%zu numCompletedSamples=%zu\n", i.numTotalSamples,
        i.numPopulatedSamples, i.numCompletedSamples);
  return true;
}

enum class DecodeCtx { PreStart, Loop, Drain };
struct DecodeOutcome {
  CUptiResult r = CUPTI_SUCCESS;
  int reason = -1;
  int overflow = 0;
  size_t total = 0, populated = 0, completed = 0, fresh = 0;
  bool reset = false;
  double eval_ms = 0, reset_ms = 0;
};

// One cuptiPmSamplingDecodeData, then the image's counts; evaluates samples completed since the last look; resets
// the image per --reset. Prints a DECODE line (in the loop only for the first 30 decodes, changes, errors and every
// 250 ms).
static DecodeOutcome decode_once(DecodeCtx ctx) {
  DecodeOutcome o;
  size_t no = ++g.decode_no;
  auto d = PARAMS(CUpti_PmSampling_DecodeData_Params);
  d.pPmSamplingObject = g.obj;
  d.pCounterDataImage = g.image.data();
  d.counterDataImageSize = g.image.size();
  double t0 = mono_ms();
  o.r = cuptiPmSamplingDecodeData(&d);
  double dt = mono_ms() - t0;
  g.ds.decodes++;
  g.ds.total_ms += dt;
  g.ds.max_ms = std::max(g.ds.max_ms, dt);
  if (o.r == CUPTI_SUCCESS) {
    g.ds.ok++;
    g.ds.consecutive_errors = 0;
    o.reason = (int)d.decodeStopReason;
    o.overflow = d.overflow;
    if (o.reason >= 0 && o.reason < 3) g.ds.reasons[o.reason]++;
    else g.ds.reasons[3]++;
    if (d.overflow) g.ds.overflow++;
  } else {
    g.ds.errors++;
    g.ds.consecutive_errors++;
    if (o.r == CUPTI_ERROR_OUT_OF_MEMORY) g.ds.oom++;
    ++g_cupti_failures;
    note_error(std::string("cuptiPmSamplingDecodeData:") + cupti_name(o.r));
  }
  // The image may hold samples even after an error (OUT_OF_MEMORY is how KEEP_OLDEST reports overflow): look.
  auto i = PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params);
  i.pCounterDataImage = g.image.data();
  i.counterDataImageSize = g.image.size();
  CUptiResult ri = CUPTI_Q(cuptiPmSamplingGetCounterDataInfo, &i);
  if (ri == CUPTI_SUCCESS) {
    o.total = i.numTotalSamples;
    o.populated = i.numPopulatedSamples;
    o.completed = i.numCompletedSamples;
    g.ds.max_populated = std::max(g.ds.max_populated, o.populated);
    if (o.populated > o.completed) g.ds.with_partial++;
    uint64_t got = cupti_now();
    double te = mono_ms();
    for (size_t k = g.evaluated; k < o.completed; ++k) {
      Sample s;
      s.gen = g.gen;
      s.idx = k;
      s.decode_no = no;
      s.in_loop = ctx == DecodeCtx::Loop;
      s.got_cupti = got;
      auto si = PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params);
      si.pPmSamplingObject = g.obj;
      si.pCounterDataImage = g.image.data();
      si.counterDataImageSize = g.image.size();
      si.sampleIndex = k;
      CUptiResult rs = cuptiPmSamplingCounterDataGetSampleInfo(&si);
      if (rs != CUPTI_SUCCESS) {
        ++g_cupti_failures;
        note_error(std::string("cuptiPmSamplingCounterDataGetSampleInfo:") + cupti_name(rs));
        if (g.ds.eval_errors++ < 5)
          out("  [cupti] cuptiPmSamplingCounterDataGetSampleInfo(sample %zu) -> FAILED %s: %s (sample skipped)\n", k,
              cupti_name(rs), cupti_msg(rs));
        continue;
      }
      s.start = si.startTimestamp;
      s.end = si.endTimestamp;
      s.v.assign(g.metric_ptrs.size(), NAN);
      auto e = PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
      e.pHostObject = g.host;
      e.pCounterDataImage = g.image.data();
      e.counterDataImageSize = g.image.size();
      e.rangeIndex = k;
      e.ppMetricNames = g.metric_ptrs.data();
      e.numMetrics = g.metric_ptrs.size();
      e.pMetricValues = s.v.data();
      CUptiResult re = cuptiProfilerHostEvaluateToGpuValues(&e);
      if (re != CUPTI_SUCCESS) {
        ++g_cupti_failures;
        note_error(std::string("cuptiProfilerHostEvaluateToGpuValues:") + cupti_name(re));
        if (g.ds.eval_errors++ < 5)
          out("  [cupti] cuptiProfilerHostEvaluateToGpuValues(sample %zu) -> FAILED %s: %s (kept with NaN values)\n",
              k, cupti_name(re), cupti_msg(re));
      }
      std::lock_guard<std::mutex> lock(g.samples_mu);
      g.samples.push_back(std::move(s));
      ++o.fresh;
    }
    g.evaluated = std::max(g.evaluated, o.completed);
    o.eval_ms = mono_ms() - te;
  }
  bool full = o.reason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL ||
              (o.total > 0 && o.completed >= o.total);
  if (g_opt.reset_always || full) {
    double tr = mono_ms();
    o.reset = cdi_reset(false);
    o.reset_ms = mono_ms() - tr;
    g.ds.resets++;
    g.gen++;
    g.evaluated = 0;
  }
  double now = rel_ms();
  bool first_populated = !g.seen_populated && o.populated > 0;
  bool first_completed = !g.seen_completed && o.completed > 0;
  g.seen_populated = g.seen_populated || o.populated > 0;
  g.seen_completed = g.seen_completed || o.completed > 0;
  bool print = ctx != DecodeCtx::Loop || no <= 30 || o.r != g.last_result || o.reason != g.last_reason ||
               o.overflow != g.last_overflow || first_populated || first_completed || now - g.last_print_ms >= 250;
  if (print) {
    const char* where = ctx == DecodeCtx::Loop ? "loop" : ctx == DecodeCtx::Drain ? "drain" : "pre-start";
    size_t cum;
    {
      std::lock_guard<std::mutex> lock(g.samples_mu);
      cum = g.samples.size();
    }
    out("DECODE #%zu %s t=%.1fms rc=%s reason=%s overflow=%d total=%zu populated=%zu completed=%zu new=%zu "
        "cum=%zu reset=%s (decode %.3f ms, evaluate %.3f ms, reset %.3f ms; t is taken after all three)%s%s\n",
        no, where, now, o.r == CUPTI_SUCCESS ? "OK" : cupti_name(o.r), o.reason < 0 ? "-" : reason_name(o.reason),
        o.overflow, o.total, o.populated, o.completed, o.fresh, cum, o.reset ? "yes" : "no", dt, o.eval_ms, o.reset_ms,
        o.r == CUPTI_SUCCESS ? "" : " msg=", o.r == CUPTI_SUCCESS ? "" : cupti_msg(o.r));
    g.last_print_ms = now;
  }
  g.last_result = o.r;
  g.last_reason = o.reason;
  g.last_overflow = o.overflow;
  return o;
}

static void decode_thread_fn() {
  size_t n = 0;
  while (!g.stop_decode.load()) {
    decode_once(DecodeCtx::Loop);
    if (g.ds.consecutive_errors >= 50) {
      out("decode loop: 50 consecutive errors, the thread stops decoding\n");
      break;
    }
    if (++n >= 5000000) {
      out("decode loop: 5000000 decodes, the thread stops decoding\n");
      break;
    }
    if (g_opt.decode_period_ms > 0) {
      std::unique_lock<std::mutex> lock(g.wait_mu);
      g.wait_cv.wait_for(lock, std::chrono::microseconds((int64_t)(g_opt.decode_period_ms * 1000)),
                         []() { return g.stop_decode.load(); });
    } else {
      sched_yield();
    }
  }
}

// After stop: decode until the hardware buffer reports END_OF_RECORDS three times without anything new (20 ms
// apart), at most 400 decodes or 10 s.
static void drain() {
  set_phase("drain after stop");
  out("== drain after stop\n");
  double t0 = mono_ms();
  int eor = 0, errs = 0;
  for (int k = 0; k < 400 && mono_ms() - t0 < 10000; ++k) {
    DecodeOutcome o = decode_once(DecodeCtx::Drain);
    if (o.r != CUPTI_SUCCESS) {
      if (++errs >= 5) {
        out("drain: 5 decode errors, giving up\n");
        break;
      }
      sleep_ms(20);
      continue;
    }
    if (o.reason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS && o.fresh == 0) {
      if (++eor >= 3) break;
      sleep_ms(20);
    } else if (o.reason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_OTHER && o.fresh == 0) {
      ++eor;  // treat as "nothing more" too, but keep trying a little longer
      if (eor >= 6) break;
      sleep_ms(20);
    } else {
      eor = 0;
    }
  }
}

// ------------------------------------------------------------------------------------------------ report

static double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  double hi = v[m];
  if (v.size() % 2) return hi;
  double lo = *std::max_element(v.begin(), v.begin() + m);
  return (lo + hi) / 2;
}

static void print_sample(size_t i, const Sample& s) {
  std::string vals;
  char b[128];
  for (size_t k = 0; k < s.v.size() && k < g.metrics.size(); ++k) {
    std::snprintf(b, sizeof b, "%s%s=%.6g", k ? " " : "", g.metrics[k].c_str(), s.v[k]);
    vals += b;
  }
  out("  sample[%zu] gen=%d idx=%zu start=%" PRIu64 " end=%" PRIu64 " dur=%.0fns via=%s#%zu  %s\n", i, s.gen, s.idx,
      s.start, s.end, (double)(int64_t)(s.end - s.start), s.in_loop ? "loop" : "drain", s.decode_no, vals.c_str());
}

struct Report {
  std::string domain = "-";
  double interval_med = NAN, dur_med = NAN;
  size_t loop_samples = 0, drain_samples = 0;
};

static Report report() {
  set_phase("report");
  Report rep;
  const std::vector<Sample>& ALL = g.samples;
  out("== report: %zu samples\n", ALL.size());
  out("decodes: %zu (ok %zu, errors %zu of which OUT_OF_MEMORY %zu), stop reasons OTHER=%zu COUNTER_DATA_FULL=%zu "
      "END_OF_RECORDS=%zu unknown=%zu, decodes with overflow=1: %zu, decodes leaving populated>completed: %zu, max "
      "populated %zu, image resets %zu, evaluation errors %zu, decode time total %.1f ms max %.3f ms\n",
      g.ds.decodes, g.ds.ok, g.ds.errors, g.ds.oom, g.ds.reasons[0], g.ds.reasons[1], g.ds.reasons[2], g.ds.reasons[3],
      g.ds.overflow, g.ds.with_partial, g.ds.max_populated, g.ds.resets, g.ds.eval_errors, g.ds.total_ms, g.ds.max_ms);
  for (const Sample& s : ALL) (s.in_loop ? rep.loop_samples : rep.drain_samples)++;
  out("samples obtained by decodes during collection: %zu, after stop: %zu\n", rep.loop_samples, rep.drain_samples);
  if (ALL.empty()) return rep;

  // Samples are appended in decode order; keep that order (it is also time order unless something odd happens).
  size_t np = (size_t)g_opt.print_samples;
  {
    size_t n = ALL.size();
    out("first and last samples (timestamps as returned by cuptiPmSamplingCounterDataGetSampleInfo):\n");
    for (size_t i = 0; i < n && i < np; ++i) print_sample(i, ALL[i]);
    if (n > 2 * np) out("  ...\n");
    for (size_t i = std::max(np, n > np ? n - np : 0); i < n; ++i) print_sample(i, ALL[i]);
  }
  // Outliers: samples far longer than the median (the first sample of a session starts long before
  // cuptiPmSamplingStart; Kineto drops it). They are listed and left out of the statistics below.
  std::vector<Sample> S;
  {
    std::vector<double> d;
    for (const Sample& s : ALL) d.push_back((double)(int64_t)(s.end - s.start));
    double med = median(d);
    size_t n_out = 0;
    for (size_t i = 0; i < ALL.size(); ++i) {
      double di = d[i];
      if (med > 0 && di > 10 * med && di > 1e6) {
        if (n_out++ < 5) {
          out("OUTLIER sample[%zu]: duration %.3f ms (median %.3f ms); excluded from the statistics below\n", i,
              di / 1e6, med / 1e6);
        }
        continue;
      }
      S.push_back(ALL[i]);
    }
    out("%zu outlier sample(s) (duration > 10x the median and > 1 ms) excluded; %zu samples in the statistics\n", n_out,
        S.size());
    if (S.empty()) S = ALL;
  }
  size_t n = S.size();

  size_t unordered = 0, gaps = 0, overlaps = 0, zero_ts = 0;
  std::vector<double> durs, steps;
  for (size_t i = 0; i < n; ++i) {
    if (S[i].start == 0 || S[i].end == 0) ++zero_ts;
    durs.push_back((double)(int64_t)(S[i].end - S[i].start));
    if (i > 0) {
      steps.push_back((double)(int64_t)(S[i].start - S[i - 1].start));
      if (S[i].start < S[i - 1].start) ++unordered;
      if (S[i].start > S[i - 1].end) ++gaps;
      if (S[i].start < S[i - 1].end) ++overlaps;
    }
  }
  rep.dur_med = median(durs);
  rep.interval_med = median(steps);
  auto mm = [](const std::vector<double>& v, double* lo, double* hi) {
    *lo = v.empty() ? NAN : *std::min_element(v.begin(), v.end());
    *hi = v.empty() ? NAN : *std::max_element(v.begin(), v.end());
  };
  double dlo, dhi, slo, shi;
  mm(durs, &dlo, &dhi);
  mm(steps, &slo, &shi);
  out("interval: median end-start %.0f ns (min %.0f, max %.0f); median start-to-start %.0f ns (min %.0f, max %.0f); "
      "requested %" PRIu64 " %s\n",
      rep.dur_med, dlo, dhi, rep.interval_med, slo, shi, g_opt.interval, g_opt.trigger_time ? "ns" : "SYS cycles");
  out("ordering: %zu samples start before their predecessor, %zu gaps (start > previous end), %zu overlaps, %zu with a "
      "zero timestamp\n",
      unordered, gaps, overlaps, zero_ts);
  if (!g_opt.trigger_time && rep.interval_med > 0)
    out("sysclk trigger: %.4f ns per requested cycle => SYS clock about %.1f MHz\n", rep.interval_med / g_opt.interval,
        g_opt.interval / rep.interval_med * 1e3);

  out("per metric over all samples (min / max / mean, NaN count):\n");
  for (size_t k = 0; k < g.metrics.size(); ++k) {
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    size_t cnt = 0, nan = 0;
    std::vector<double> vals;
    for (const Sample& s : S) {
      double x = k < s.v.size() ? s.v[k] : NAN;
      if (std::isnan(x)) {
        ++nan;
        continue;
      }
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      sum += x;
      ++cnt;
      vals.push_back(x);
    }
    out("  %-62s min %.6g max %.6g mean %.6g median %.6g (n=%zu, NaN %zu)\n", g.metrics[k].c_str(), cnt ? lo : NAN,
        cnt ? hi : NAN, cnt ? sum / cnt : NAN, median(vals), cnt, nan);
    const std::string& m = g.metrics[k];
    if (cnt && m.rfind("sys__cycles_elapsed", 0) == 0 && m.find("per_second") != std::string::npos)
      out("SYSCLK_HZ %.0f\n", median(vals));
    if (cnt && m.rfind("gpc__cycles_elapsed", 0) == 0 && m.find("per_second") != std::string::npos)
      out("GPCCLK_HZ %.0f\n", median(vals));
  }

  // Busy samples: by the first gr__/sm__cycles_active metric, above half its maximum.
  int busy_k = -1;
  for (size_t k = 0; k < g.metrics.size() && busy_k < 0; ++k)
    if (g.metrics[k].find("cycles_active") != std::string::npos) busy_k = (int)k;
  uint64_t busy0 = 0, busy1 = 0;
  size_t busy_n = 0;
  if (busy_k >= 0) {
    double hi = -INFINITY;
    for (const Sample& s : S)
      if (!std::isnan(s.v[busy_k])) hi = std::max(hi, s.v[busy_k]);
    for (const Sample& s : S) {
      if (std::isnan(s.v[busy_k]) || !(s.v[busy_k] > 0.5 * hi) || hi <= 0) continue;
      if (busy_n == 0 || s.start < busy0) busy0 = s.start;
      if (busy_n == 0 || s.end > busy1) busy1 = s.end;
      ++busy_n;
    }
    out("busy samples (%s > half its max): %zu\n", g.metrics[busy_k].c_str(), busy_n);
  }

  // Timestamp domain: where do the samples lie against each clock's marks?
  uint64_t s0 = S[0].start, s1 = S[0].end;
  for (const Sample& s : S) {
    if (s.start && s.start < s0) s0 = s.start;
    if (s.end > s1) s1 = s.end;
  }
  const Mark* bs = find_mark("before_start");
  const Mark* as = find_mark("after_start");
  const Mark* wb = find_mark("workload_begin");
  const Mark* we = find_mark("workload_end");
  const Mark* bst = find_mark("before_stop");
  const Mark* ast = find_mark("after_stop");
  out("timestamps: first sample start %" PRIu64 ", last sample end %" PRIu64 " (span %.3f ms)\n", s0, s1,
      dms(s1, s0));
  double best_score = INFINITY;
  int best = -1;
  double tol_ms = std::max(5.0, 3.0 * (std::isnan(rep.interval_med) ? 0 : rep.interval_med / 1e6));
  if (bs && as && bst && ast) {
    out("per clock: first.start - after_start | last.end - before_stop | all samples inside [before_start - tol, "
        "after_stop + tol] (tol %.1f ms) | busy span vs workload span (begin, end) in ms\n",
        tol_ms);
    for (int dm = 0; dm < D_COUNT; ++dm) {
      uint64_t b = mark_get(*bs, dm), a = mark_get(*as, dm), c = mark_get(*bst, dm), e = mark_get(*ast, dm);
      if (b == 0 || a == 0 || c == 0 || e == 0) {
        out("  %-20s (marks missing)\n", domain_name(dm));
        continue;
      }
      double d0 = dms(s0, a), d1 = dms(s1, c);
      bool inside = dms(s0, b) >= -tol_ms && dms(s1, e) <= tol_ms;
      std::string busy = "n/a";
      if (busy_n && wb && we && mark_get(*wb, dm) && mark_get(*we, dm)) {
        char t[96];
        std::snprintf(t, sizeof t, "%+.3f, %+.3f", dms(busy0, mark_get(*wb, dm)), dms(busy1, mark_get(*we, dm)));
        busy = t;
      }
      out("  %-20s %+14.3f ms | %+14.3f ms | %-3s | %s\n", domain_name(dm), d0, d1, inside ? "yes" : "no",
          busy.c_str());
      double score = std::fabs(d0) + std::fabs(d1);
      if (inside && score < best_score) {
        best_score = score;
        best = dm;
      }
    }
  }
  if (best >= 0) {
    rep.domain = domain_name(best);
    std::string all;
    for (int dm = 0; dm < D_COUNT; ++dm) {
      if (!(bs && as && bst && ast) || mark_get(*bs, dm) == 0 || mark_get(*ast, dm) == 0) continue;
      if (dms(s0, mark_get(*bs, dm)) >= -tol_ms && dms(s1, mark_get(*ast, dm)) <= tol_ms)
        all += std::string(all.empty() ? "" : ",") + domain_name(dm);
    }
    out("TIMESTAMP_DOMAIN best=%s (|start offset| + |stop offset| = %.3f ms) consistent_with=%s\n", rep.domain.c_str(),
        best_score, all.empty() ? "-" : all.c_str());
  } else {
    out("TIMESTAMP_DOMAIN best=none (no clock has all samples inside the sampling window)\n");
  }

  // Latency from a sample's end to the decode that returned it (cuptiGetTimestamp domain).
  {
    std::vector<double> lat;
    for (const Sample& s : S)
      if (s.got_cupti && s.end) lat.push_back(dms(s.got_cupti, s.end));
    double lo, hi;
    mm(lat, &lo, &hi);
    out("latency sample end -> decode that returned it (cuptiGetTimestamp minus sample end): median %.3f ms, min %.3f, "
        "max %.3f\n",
        median(lat), lo, hi);
  }

  // Per workload phase: mean of each metric over the samples inside the phase (in the best domain).
  if (best >= 0 && !g.phases.empty()) {
    out("per workload phase (%s): samples fully inside, mean of each metric:\n", domain_name(best));
    size_t shown = 0;
    for (const Phase& p : g.phases) {
      if (++shown > 12) {
        out("  ... (%zu phases)\n", g.phases.size());
        break;
      }
      uint64_t pb = mark_get(p.begin, best), pe = mark_get(p.end, best);
      if (!pb || !pe) continue;
      std::vector<double> sum(g.metrics.size(), 0);
      size_t cnt = 0;
      for (const Sample& s : S) {
        if (s.start < pb || s.end > pe) continue;
        ++cnt;
        for (size_t k = 0; k < sum.size() && k < s.v.size(); ++k) sum[k] += s.v[k];
      }
      std::string vals;
      char b[128];
      for (size_t k = 0; k < sum.size(); ++k) {
        std::snprintf(b, sizeof b, " %s=%.4g", g.metrics[k].c_str(), cnt ? sum[k] / cnt : NAN);
        vals += b;
      }
      out("  phase %-4s %8.1f..%8.1f ms launches=%-6ld samples=%-5zu%s\n", p.kind.c_str(),
          as ? dms(pb, mark_get(*as, best)) : 0.0, as ? dms(pe, mark_get(*as, best)) : 0.0, p.launches, cnt,
          vals.c_str());
    }
  }

  if (!g_opt.csv.empty()) {
    FILE* f = std::fopen(g_opt.csv.c_str(), "w");
    if (!f) {
      out("cannot write %s\n", g_opt.csv.c_str());
    } else {
      std::fprintf(f, "i,gen,idx,decode_no,in_loop,start,end");
      for (const std::string& m : g.metrics) std::fprintf(f, ",%s", m.c_str());
      std::fprintf(f, "\n");
      for (size_t i = 0; i < ALL.size(); ++i) {
        const Sample& s = ALL[i];
        std::fprintf(f, "%zu,%d,%zu,%zu,%d,%" PRIu64 ",%" PRIu64, i, s.gen, s.idx, s.decode_no, s.in_loop ? 1 : 0,
                     s.start, s.end);
        for (double x : s.v) std::fprintf(f, ",%.9g", x);
        std::fprintf(f, "\n");
      }
      std::fclose(f);
      out("wrote %zu samples to %s\n", ALL.size(), g_opt.csv.c_str());
    }
  }
  return rep;
}

// ------------------------------------------------------------------------------------------------ cleanup, result

static void pm_cleanup() {
  set_phase("cleanup");
  if (g.obj && g.started) {
    auto p = PARAMS(CUpti_PmSampling_Stop_Params);
    p.pPmSamplingObject = g.obj;
    CUPTI_V(cuptiPmSamplingStop, &p);
    g.started = false;
  }
  if (g.obj) {
    auto p = PARAMS(CUpti_PmSampling_Disable_Params);
    p.pPmSamplingObject = g.obj;
    CUPTI_V(cuptiPmSamplingDisable, &p);
    g.obj = nullptr;
  }
  host_destroy(g.host, true);
  host_destroy(g.list_host, true);
  if (g.profiler_initialized) {
    auto p = PARAMS(CUpti_Profiler_DeInitialize_Params);
    CUPTI_V(cuptiProfilerDeInitialize, &p);
    g.profiler_initialized = false;
  }
}

static void fail(const std::string& reason) {
  static bool failing = false;
  if (!failing) {
    failing = true;
    if (g.decode_th.joinable()) {
      {
        std::lock_guard<std::mutex> lock(g.wait_mu);
        g.stop_decode.store(true);
      }
      g.wait_cv.notify_all();
      g.decode_th.join();
    }
    pm_cleanup();
  }
  out("FAIL: %s\n", reason.c_str());
  out("RESULT label=%s status=fail samples=%zu reason=\"%s\" first_error=%s\n", g_opt.label.c_str(), g.samples.size(),
      reason.c_str(), first_error().c_str());
  std::fflush(stdout);
  _exit(1);
}

static void print_result(const char* status, const Report& rep) {
  std::string reasons = "O:" + std::to_string(g.ds.reasons[0]) + "/F:" + std::to_string(g.ds.reasons[1]) +
                        "/E:" + std::to_string(g.ds.reasons[2]);
  out("RESULT label=%s status=%s samples=%zu loop_samples=%zu drain_samples=%zu decodes=%zu overflow_decodes=%zu "
      "oom=%zu decode_errors=%zu partial_decodes=%zu max_populated=%zu reasons=%s interval_med_ns=%.0f dur_med_ns=%.0f "
      "domain=%s metrics=%zu cupti_failures=%zu first_error=%s\n",
      g_opt.label.c_str(), status, g.samples.size(), rep.loop_samples, rep.drain_samples, g.ds.decodes, g.ds.overflow,
      g.ds.oom, g.ds.errors, g.ds.with_partial, g.ds.max_populated, reasons.c_str(), rep.interval_med, rep.dur_med,
      rep.domain.c_str(), g.metrics.size(), g_cupti_failures.load(), first_error().c_str());
}

// ------------------------------------------------------------------------------------------------ range check

static int range_check() {
  set_phase("range check");
  out("== range-profiler control: one user range around the workload, user replay\n");
  CUcontext ctx = nullptr;
  if (!cu_ok("cuCtxGetCurrent", cuCtxGetCurrent(&ctx)) || ctx == nullptr) fail("no current CUDA context");
  std::vector<uint8_t> avail;
  {
    auto p = PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
    p.ctx = ctx;
    if (CUPTI_V(cuptiProfilerGetCounterAvailability, &p) != CUPTI_SUCCESS) fail("cuptiProfilerGetCounterAvailability");
    avail.assign(p.counterAvailabilityImageSize, 0);
    p.pCounterAvailabilityImage = avail.data();
    if (CUPTI_V(cuptiProfilerGetCounterAvailability, &p) != CUPTI_SUCCESS) fail("cuptiProfilerGetCounterAvailability");
    out("range profiler counter availability image: %zu bytes\n", avail.size());
  }
  host_destroy(g.list_host, false);
  g.list_host = host_create(CUPTI_PROFILER_TYPE_RANGE_PROFILER, avail, true);
  if (!g.list_host) fail("cuptiProfilerHostInitialize (range profiler)");
  std::vector<uint8_t> config;
  if (!select_metrics(CUPTI_PROFILER_TYPE_RANGE_PROFILER, avail, g_opt.range_metrics, 8, &g.metrics, &g.host, &config))
    fail("no usable range-profiler metric");
  for (const std::string& m : g.metrics) g.metric_ptrs.push_back(m.c_str());

  auto en = PARAMS(CUpti_RangeProfiler_Enable_Params);
  en.ctx = ctx;
  if (CUPTI_V(cuptiRangeProfilerEnable, &en) != CUPTI_SUCCESS) fail("cuptiRangeProfilerEnable");
  CUpti_RangeProfiler_Object* rp = en.pRangeProfilerObject;
  auto sz = PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
  sz.pRangeProfilerObject = rp;
  sz.pMetricNames = g.metric_ptrs.data();
  sz.numMetrics = g.metric_ptrs.size();
  sz.maxNumOfRanges = 1;
  sz.maxNumRangeTreeNodes = 1;
  if (CUPTI_V(cuptiRangeProfilerGetCounterDataSize, &sz) != CUPTI_SUCCESS) fail("cuptiRangeProfilerGetCounterDataSize");
  std::vector<uint8_t> image(sz.counterDataSize, 0);
  auto ci = PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
  ci.pRangeProfilerObject = rp;
  ci.counterDataSize = image.size();
  ci.pCounterData = image.data();
  if (CUPTI_V(cuptiRangeProfilerCounterDataImageInitialize, &ci) != CUPTI_SUCCESS)
    fail("cuptiRangeProfilerCounterDataImageInitialize");
  auto sc = PARAMS(CUpti_RangeProfiler_SetConfig_Params);
  sc.pRangeProfilerObject = rp;
  sc.configSize = config.size();
  sc.pConfig = config.data();
  sc.counterDataImageSize = image.size();
  sc.pCounterDataImage = image.data();
  sc.range = CUPTI_UserRange;
  sc.replayMode = CUPTI_UserReplay;
  sc.maxRangesPerPass = 1;
  sc.numNestingLevels = 1;
  sc.minNestingLevel = 1;
  sc.passIndex = 0;
  sc.targetNestingLevel = 1;
  if (CUPTI_V(cuptiRangeProfilerSetConfig, &sc) != CUPTI_SUCCESS) fail("cuptiRangeProfilerSetConfig");

  const int reps = 5;
  double last_ms = 0;
  bool submitted = false;
  for (int pass = 0; pass < 16 && !submitted; ++pass) {
    auto st = PARAMS(CUpti_RangeProfiler_Start_Params);
    st.pRangeProfilerObject = rp;
    if (CUPTI_V(cuptiRangeProfilerStart, &st) != CUPTI_SUCCESS) fail("cuptiRangeProfilerStart");
    auto pu = PARAMS(CUpti_RangeProfiler_PushRange_Params);
    pu.pRangeProfilerObject = rp;
    pu.pRangeName = "pm_probe";
    if (CUPTI_V(cuptiRangeProfilerPushRange, &pu) != CUPTI_SUCCESS) fail("cuptiRangeProfilerPushRange");
    double t0 = mono_ms();
    for (int i = 0; i < reps; ++i) {
      if (!cuda_ok("launch_stream", launch_stream(g.stream, g.buf, g.n4, g.grid))) fail("launch");
      if (!cuda_ok("launch_fma", launch_fma(g.stream, g.sink, g.fma_iters, g.grid))) fail("launch");
    }
    if (!cuda_ok("cudaStreamSynchronize", cudaStreamSynchronize(g.stream))) fail("synchronize");
    last_ms = mono_ms() - t0;
    auto po = PARAMS(CUpti_RangeProfiler_PopRange_Params);
    po.pRangeProfilerObject = rp;
    if (CUPTI_V(cuptiRangeProfilerPopRange, &po) != CUPTI_SUCCESS) fail("cuptiRangeProfilerPopRange");
    auto sp = PARAMS(CUpti_RangeProfiler_Stop_Params);
    sp.pRangeProfilerObject = rp;
    if (CUPTI_V(cuptiRangeProfilerStop, &sp) != CUPTI_SUCCESS) fail("cuptiRangeProfilerStop");
    out("pass %d: host time %.3f ms, passIndex=%zu targetNestingLevel=%zu isAllPassSubmitted=%u\n", pass, last_ms,
        sp.passIndex, sp.targetNestingLevel, (unsigned)sp.isAllPassSubmitted);
    submitted = sp.isAllPassSubmitted != 0;
  }
  if (!submitted) fail("range profiler: passes not all submitted after 16 tries");
  auto dd = PARAMS(CUpti_RangeProfiler_DecodeData_Params);
  dd.pRangeProfilerObject = rp;
  if (CUPTI_V(cuptiRangeProfilerDecodeData, &dd) != CUPTI_SUCCESS) fail("cuptiRangeProfilerDecodeData");
  out("ranges dropped: %zu\n", dd.numOfRangeDropped);
  auto di = PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
  di.pCounterDataImage = image.data();
  di.counterDataImageSize = image.size();
  if (CUPTI_V(cuptiRangeProfilerGetCounterDataInfo, &di) != CUPTI_SUCCESS) fail("cuptiRangeProfilerGetCounterDataInfo");
  out("ranges in the image: %zu\n", di.numTotalRanges);
  double expect_bytes = (double)reps * 2.0 * (double)g.n4 * sizeof(float4);
  out("expected for the range: about %.3f ms of kernels (stream %.3f + fma %.3f, x%d), DRAM read ~%.3g B and write "
      "~%.3g B\n",
      reps * (g.stream_ms + g.fma_ms), g.stream_ms, g.fma_ms, reps, expect_bytes / 2, expect_bytes / 2);
  size_t nonzero = 0;
  for (size_t r = 0; r < di.numTotalRanges; ++r) {
    auto ri = PARAMS(CUpti_RangeProfiler_CounterData_GetRangeInfo_Params);
    ri.pCounterDataImage = image.data();
    ri.counterDataImageSize = image.size();
    ri.rangeIndex = r;
    ri.rangeDelimiter = "/";
    CUPTI_V(cuptiRangeProfilerCounterDataGetRangeInfo, &ri);
    std::vector<double> vals(g.metric_ptrs.size(), NAN);
    auto ev = PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    ev.pHostObject = g.host;
    ev.pCounterDataImage = image.data();
    ev.counterDataImageSize = image.size();
    ev.rangeIndex = r;
    ev.ppMetricNames = g.metric_ptrs.data();
    ev.numMetrics = g.metric_ptrs.size();
    ev.pMetricValues = vals.data();
    CUPTI_V(cuptiProfilerHostEvaluateToGpuValues, &ev);
    out("range %zu '%s':\n", r, ri.rangeName ? ri.rangeName : "?");
    for (size_t k = 0; k < vals.size(); ++k) {
      out("  %-40s %.6g\n", g.metrics[k].c_str(), vals[k]);
      if (vals[k] != 0 && !std::isnan(vals[k])) ++nonzero;
    }
  }
  auto ds = PARAMS(CUpti_RangeProfiler_Disable_Params);
  ds.pRangeProfilerObject = rp;
  CUPTI_V(cuptiRangeProfilerDisable, &ds);
  pm_cleanup();
  bool ok = di.numTotalRanges > 0 && nonzero > 0;
  out("RANGE_CHECK %s: %zu ranges, %zu nonzero values\n", ok ? "counters work" : "NO DATA", di.numTotalRanges, nonzero);
  out("RESULT label=%s status=%s samples=%zu ranges=%zu nonzero_values=%zu first_error=%s\n", g_opt.label.c_str(),
      ok ? "ok" : "nodata", (size_t)0, di.numTotalRanges, nonzero, first_error().c_str());
  return ok ? 0 : 3;
}

// ------------------------------------------------------------------------------------------------ selftest

// No GPU: synthetic samples 100 us apart in the cuptiGetTimestamp domain, marks around them; checks the report.
static int selftest() {
  out("== selftest (synthetic samples, no GPU)\n");
  g.metrics = {"gr__cycles_active.avg", "sys__cycles_elapsed.avg.per_second", "dramc__read_throughput.avg.pct"};
  uint64_t base = 1700000000000000000ull;
  auto mk = [&](const char* n, uint64_t t) {
    Mark m;
    m.name = n;
    m.cupti = t;
    m.rt = t + 37000000000ull;  // CLOCK_REALTIME 37 s away: must not match
    m.mono = t - 1000000000000ull;
    m.raw = t - 1000000500000ull;
    m.gpu = 0;
    g.marks.push_back(m);
  };
  mk("before_start", base);
  mk("after_start", base + 200000);
  mk("workload_begin", base + 100000000);
  mk("workload_end", base + 2100000000ull);
  mk("before_stop", base + 2200000000ull);
  mk("after_stop", base + 2200300000ull);
  for (int i = 0; i < 22000; ++i) {
    Sample s;
    s.start = base + 300000 + (uint64_t)i * 100000;
    s.end = s.start + 100000;
    if (i == 0) s.start = base - 400000000ull;  // the first sample starts long before Start: an outlier
    bool busy = s.start >= base + 100000000 && s.end <= base + 2100000000ull;
    s.v = {busy ? 95000.0 : 10.0, 1.6e9, busy ? 80.0 : 0.0};
    s.idx = (size_t)i % 10000;
    s.gen = i / 10000;
    s.in_loop = i < 21000;
    s.decode_no = (size_t)i / 100;
    s.got_cupti = s.end + 3000000;
    g.samples.push_back(s);
  }
  Phase p;
  p.kind = "mem";
  p.begin = g.marks[2];
  p.end = g.marks[3];
  p.launches = 7;
  g.phases.push_back(p);
  g_opt.interval = 100000;
  Report rep = report();
  bool ok = g.samples.size() == 22000 && std::fabs(rep.interval_med - 100000) < 1 && rep.domain == "cuptiGetTimestamp" &&
            std::fabs(rep.dur_med - 100000) < 1;
  print_result(ok ? "selftest_ok" : "selftest_bad", rep);
  return ok ? 0 : 1;
}

// ------------------------------------------------------------------------------------------------ main

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_t0_ms = mono_ms();
  int rc = parse_args(argc, argv, g_opt);
  if (rc) return rc;
  g_label = g_opt.label.c_str();
  signal(SIGALRM, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
  signal(SIGFPE, on_signal);
  signal(SIGILL, on_signal);
  signal(SIGABRT, on_signal);
  if (g_opt.watchdog_s) alarm(g_opt.watchdog_s);
  if (g_opt.selftest) return selftest();

  {
    std::string cmd;
    for (int i = 0; i < argc; ++i) cmd += std::string(i ? " " : "") + argv[i];
    out("pm_probe command: %s\n", cmd.c_str());
  }
  if (!print_environment()) fail("CUDA driver / device setup failed");
  if (!g_opt.ctx_after_enable || g_opt.range_check || g_opt.list) {
    if (!create_context()) fail("creating the CUDA context failed");
  } else {
    out("context: not created yet (--ctx-after-enable)\n");
  }

  set_phase("profiler init");
  out("== CUPTI profiler setup\n");
  if (g_opt.profiler_init || g_opt.range_check) {
    auto p = PARAMS(CUpti_Profiler_Initialize_Params);
    if (CUPTI_V(cuptiProfilerInitialize, &p) != CUPTI_SUCCESS) fail("cuptiProfilerInitialize");
    g.profiler_initialized = true;
  } else {
    out("cuptiProfilerInitialize: NOT called (--no-profiler-init)\n");
  }
  print_device_supported(CUPTI_PROFILER_PM_SAMPLING, "PM_SAMPLING");
  print_device_supported(CUPTI_PROFILER_RANGE_PROFILING, "RANGE_PROFILING");
  {
    auto p = PARAMS(CUpti_Device_GetChipName_Params);
    p.deviceIndex = (size_t)g_opt.device;
    if (CUPTI_V(cuptiDeviceGetChipName, &p) != CUPTI_SUCCESS || p.pChipName == nullptr) fail("cuptiDeviceGetChipName");
    g.chip = p.pChipName;
    out("chip name: %s\n", g.chip.c_str());
  }

  if (g_opt.range_check) {
    if (!workload_setup()) fail("workload setup failed");
    return range_check();
  }

  {
    set_phase("counter availability");
    auto p = PARAMS(CUpti_PmSampling_GetCounterAvailability_Params);
    p.deviceIndex = (size_t)g_opt.device;
    if (CUPTI_V(cuptiPmSamplingGetCounterAvailability, &p) != CUPTI_SUCCESS)
      fail("cuptiPmSamplingGetCounterAvailability (size)");
    g.avail.assign(p.counterAvailabilityImageSize, 0);
    p.pCounterAvailabilityImage = g.avail.data();
    if (CUPTI_V(cuptiPmSamplingGetCounterAvailability, &p) != CUPTI_SUCCESS)
      fail("cuptiPmSamplingGetCounterAvailability (image)");
    out("PM sampling counter availability image: %zu bytes\n", g.avail.size());
  }
  set_phase("host init");
  g.list_host = host_create(CUPTI_PROFILER_TYPE_PM_SAMPLING, g.avail, true);
  if (!g.list_host) fail("cuptiProfilerHostInitialize (PM sampling)");
  if (g_opt.list) {
    int r = do_list();
    pm_cleanup();
    print_loaded_libraries();
    out("RESULT label=%s status=list samples=0 first_error=%s\n", g_opt.label.c_str(),
        first_error().c_str());
    return r;
  }

  set_phase("metrics");
  if (!select_metrics(CUPTI_PROFILER_TYPE_PM_SAMPLING, g.avail, g_opt.metrics, 1, &g.metrics, &g.host, &g.config))
    fail("no usable metric set for one pass");
  for (const std::string& m : g.metrics) g.metric_ptrs.push_back(m.c_str());

  set_phase("enable");
  out("== PM sampling setup\n");
  {
    auto p = PARAMS(CUpti_PmSampling_Enable_Params);
    p.deviceIndex = (size_t)g_opt.device;
    if (CUPTI_V(cuptiPmSamplingEnable, &p) != CUPTI_SUCCESS) fail("cuptiPmSamplingEnable");
    g.obj = p.pPmSamplingObject;
  }
  if (g_opt.cdi_before_setconfig) {
    set_phase("counter-data image");
    if (!cdi_create()) fail("counter-data image");
  }
  {
    set_phase("set config");
    auto p = PARAMS(CUpti_PmSampling_SetConfig_Params);
    p.pPmSamplingObject = g.obj;
    p.configSize = g.config.size();
    p.pConfig = g.config.data();
    p.hardwareBufferSize = (size_t)(g_opt.hwbuf_mib << 20);
    p.samplingInterval = g_opt.interval;
    p.triggerMode = g_opt.trigger_time ? CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL
                                       : CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL;
    p.hwBufferAppendMode = g_opt.keep_latest ? CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_LATEST
                                             : CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
    out("SetConfig: configSize=%zu hardwareBufferSize=%zu samplingInterval=%" PRIu64
        " triggerMode=%s hwBufferAppendMode=%s\n",
        p.configSize, p.hardwareBufferSize, p.samplingInterval,
        g_opt.trigger_time ? "GPU_TIME_INTERVAL(ns)" : "GPU_SYSCLK_INTERVAL(cycles)",
        g_opt.keep_latest ? "KEEP_LATEST" : "KEEP_OLDEST");
    if (CUPTI_V(cuptiPmSamplingSetConfig, &p) != CUPTI_SUCCESS) fail("cuptiPmSamplingSetConfig");
  }
  if (!g_opt.cdi_before_setconfig) {
    set_phase("counter-data image");
    if (!cdi_create()) fail("counter-data image");
  }
  if (g_opt.ctx_after_enable && !create_context()) fail("creating the CUDA context failed");
  if (!workload_setup()) fail("workload setup failed");
  out("decode: %s%s, %s, period %.1f ms%s, reset %s, max samples per image %u\n",
      g_opt.decode_thread ? "thread during collection" : "no thread",
      g_opt.decode_thread && g_opt.thread_around ? " (started before Start, joined after Stop)" : "",
      g_opt.drain ? "drain after stop" : "NO drain after stop", g_opt.decode_period_ms,
      g_opt.decode_period_ms == 0 ? " (busy loop)" : "", g_opt.reset_always ? "after every decode" : "when full",
      g_opt.max_samples);
  if (!g_opt.decode_thread && !g_opt.drain) out("warning: --decode end with --no-drain never decodes\n");

  if (g_opt.decode_before_start) {
    set_phase("decode before start");
    decode_once(DecodeCtx::PreStart);
  }
  out("== collection\n");
  auto join_decode_thread = [&]() {
    if (!g.decode_th.joinable()) return;
    set_phase("join decode thread");
    {
      std::lock_guard<std::mutex> lock(g.wait_mu);
      g.stop_decode.store(true);
    }
    g.wait_cv.notify_all();
    g.decode_th.join();
    out("decode thread joined after %zu decodes (t=%.1fms)\n", g.decode_no, rel_ms());
  };
  if (g_opt.decode_thread && g_opt.thread_around) {
    out("decode thread started before cuptiPmSamplingStart (t=%.1fms)\n", rel_ms());
    g.decode_th = std::thread(decode_thread_fn);
  }
  set_phase("start");
  add_mark("before_start", true);
  {
    auto p = PARAMS(CUpti_PmSampling_Start_Params);
    p.pPmSamplingObject = g.obj;
    if (CUPTI_V(cuptiPmSamplingStart, &p) != CUPTI_SUCCESS) fail("cuptiPmSamplingStart");
    g.started = true;
  }
  add_mark("after_start", true);
  if (g_opt.decode_thread && !g_opt.thread_around) g.decode_th = std::thread(decode_thread_fn);
  set_phase("idle before workload");
  sleep_ms(g_opt.idle_ms);
  add_mark("workload_begin", true);
  bool wl_ok = workload_run();
  add_mark("workload_end", true);
  set_phase("idle after workload");
  sleep_ms(g_opt.idle_ms);
  if (!g_opt.thread_around) join_decode_thread();
  set_phase("stop");
  add_mark("before_stop", true);
  {
    auto p = PARAMS(CUpti_PmSampling_Stop_Params);
    p.pPmSamplingObject = g.obj;
    CUptiResult r = CUPTI_V(cuptiPmSamplingStop, &p);
    g.started = false;
    if (r != CUPTI_SUCCESS) out("(continuing to the drain anyway)\n");
  }
  add_mark("after_stop", true);
  if (g_opt.thread_around) join_decode_thread();
  if (g_opt.drain) drain();
  else out("== no drain after stop (--no-drain)\n");
  Report rep = report();
  pm_cleanup();
  print_loaded_libraries();
  if (!wl_ok) {
    print_result("workload_failed", rep);
    return 1;
  }
  if (g.samples.empty()) {
    out("FAIL: no samples (%zu decodes, %zu errors, max populated %zu; see the DECODE lines)\n", g.ds.decodes,
        g.ds.errors, g.ds.max_populated);
    print_result("nosamples", rep);
    return 3;
  }
  print_result("ok", rep);
  return 0;
}
