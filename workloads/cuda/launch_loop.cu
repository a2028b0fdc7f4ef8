// launch_loop: a compiled launch-bound loop, the benchmark where per-launch tracing overhead shows.
//
//   launch_loop [N [IDLE_MS]]      (default N = 100000, IDLE_MS = 0)
//   launch_loop --seconds S [PAUSE_MS]   (a long run: rounds of 10000 launches, each synchronized and followed by
//                                         PAUSE_MS idle (default 0), until S seconds pass)
//
// Launches 1000 warm-up kernels and synchronizes, idles IDLE_MS (so that what a recorder sets up after the first
// context, e.g. PM sampling's ~0.5 s, is done before timing starts), then times (std::chrono::steady_clock) N launches of
// `tiny<<<1, 32, 0, s>>>(counter)` back to back on one non-blocking stream followed by one cudaStreamSynchronize.
// Prints one JSON line on stdout:
//   {"kernels": N, "seconds": <launch loop + final synchronize>, "launch_seconds": <launch loop alone>,
//    "us_per_kernel": <seconds / N * 1e6>, "warmup": 1000, "check": "ok"}
// With --seconds, N is the number of kernels it launched after the warm-up (a multiple of 10000, known only at the
// end), "seconds" the whole timed run, and the rest as above: a recording of it holds 1000 + N kernels.
// tiny increments a counter (thread 0 only; kernels of one stream run one after another), so the final value must
// be 1000 + N; it is read back after the timed region.
//
// CUPTI records per run (seen with CUDA 13.0, driver 580.159.04): N + 1000 CONCURRENT_KERNEL records named
// _Z4tinyPi ("tiny(int*)"), N + 1000 RUNTIME records cudaLaunchKernel_v7000 (what <<<>>> is reported as), and
// with DRIVER enabled also N + 1000 cuKernelGetName records; 1 memset (counter), 1 memcpy DtoH (pageable),
// 2 STREAM_SYNCHRONIZE records.
#include <cuda_runtime.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <string>

#define CK(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t ck_err_ = (call);                                                                                  \
    if (ck_err_ != cudaSuccess) {                                                                                  \
      std::fprintf(stderr, "launch_loop: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call,                  \
                   cudaGetErrorName(ck_err_), cudaGetErrorString(ck_err_));                                        \
      return 1;                                                                                                    \
    }                                                                                                              \
  } while (0)

__global__ void tiny(int* counter) {
  if (threadIdx.x == 0) counter[0] += 1;
}

static const long WARMUP = 1000;
static const long ROUND = 10000;

int main(int argc, char** argv) {
  long n = 100000;
  long idle_ms = 0;
  double run_seconds = 0;  // > 0: the --seconds mode
  long pause_ms = 0;
  if ((argc == 3 || argc == 4) && std::string(argv[1]) == "--seconds") {
    char* end = nullptr;
    run_seconds = std::strtod(argv[2], &end);
    bool bad = end == argv[2] || *end != '\0' || !(run_seconds > 0 && run_seconds <= 86400 * 7);
    if (argc == 4) {
      errno = 0;
      pause_ms = std::strtol(argv[3], &end, 10);
      bad = bad || errno != 0 || end == argv[3] || *end != '\0' || pause_ms < 0 || pause_ms > 60000;
    }
    if (bad) {
      std::fprintf(stderr, "usage: %s --seconds S [PAUSE_MS]   (0 < S <= 604800, 0 <= PAUSE_MS <= 60000)\n", argv[0]);
      return 2;
    }
    argc = 1;
  }
  if (argc > 3) {
    std::fprintf(stderr, "usage: %s [N [IDLE_MS]]\n", argv[0]);
    return 2;
  }
  for (int a = 1; a < argc; ++a) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(argv[a], &end, 10);
    bool count = a == 1;
    if (errno != 0 || end == argv[a] || *end != '\0' || v < (count ? 1 : 0) || v > 1000000000L) {
      std::fprintf(stderr, "usage: %s [N [IDLE_MS]]   (1 <= N <= 1e9, 0 <= IDLE_MS)\n", argv[0]);
      return 2;
    }
    (count ? n : idle_ms) = v;
  }

  CK(cudaSetDevice(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* counter = nullptr;
  CK(cudaMalloc((void**)&counter, sizeof(int)));
  CK(cudaMemsetAsync(counter, 0, sizeof(int), s));

  for (long i = 0; i < WARMUP; ++i) tiny<<<1, 32, 0, s>>>(counter);
  CK(cudaStreamSynchronize(s));
  CK(cudaGetLastError());
  if (idle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));

  auto t0 = std::chrono::steady_clock::now();
  if (run_seconds > 0) {
    // Rounds until the time is up; each synchronized so that the GPU never runs far behind the clock.
    n = 0;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < run_seconds) {
      for (long i = 0; i < ROUND; ++i) tiny<<<1, 32, 0, s>>>(counter);
      n += ROUND;
      CK(cudaStreamSynchronize(s));
      if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
  } else {
    for (long i = 0; i < n; ++i) tiny<<<1, 32, 0, s>>>(counter);
  }
  auto t1 = std::chrono::steady_clock::now();
  CK(cudaStreamSynchronize(s));
  auto t2 = std::chrono::steady_clock::now();
  CK(cudaGetLastError());  // a launch failure in the loop is reported here

  int value = 0;
  CK(cudaMemcpy(&value, counter, sizeof(int), cudaMemcpyDeviceToHost));
  CK(cudaFree(counter));
  CK(cudaStreamDestroy(s));

  double launch_s = std::chrono::duration<double>(t1 - t0).count();
  double total_s = std::chrono::duration<double>(t2 - t0).count();
  bool ok = (long)value == WARMUP + n;
  std::printf("{\"kernels\": %ld, \"seconds\": %.6f, \"launch_seconds\": %.6f, \"us_per_kernel\": %.4f, "
              "\"warmup\": %ld, \"check\": \"%s\"}\n",
              n, total_s, launch_s, total_s / (double)n * 1e6, WARMUP, ok ? "ok" : "FAIL");
  std::fflush(stdout);
  if (!ok) {
    std::fprintf(stderr, "launch_loop: counter is %d, expected %ld\n", value, WARMUP + n);
    return 3;
  }
  return 0;
}
