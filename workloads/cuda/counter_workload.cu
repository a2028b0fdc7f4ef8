// counter_workload: alternating phases of known length, one memory-bound and one compute-bound, for counter
// samples over time (`cupti-record --counters`): in a memory phase DRAM is busy and the SMs mostly wait; in a
// compute phase the SMs are busy and DRAM idle.
//
//   stream_copy  copies 1 GiB (float4, grid-stride): DRAM-bound.
//   fma_burn     a long FMA chain in registers over every SM: compute-bound, no memory traffic.
//
// Each phase launches its kernel in batches until the phase's wall time is reached (a sync between batches).
// Prints one JSON line: per phase its kind, kernels, and start/end on CLOCK_MONOTONIC.
// With --devices N every phase runs on devices 0..N-1 at once (one process, several GPUs: each device gets its own
// PM sampling session); --peer-ms MS then adds a last phase of that length copying 1 GiB back and forth between
// devices 0 and 1 (peer to peer: NVLink where the GPUs have it), both directions at once.
// Build: build.sh. Run: counter_workload [--phases N] [--phase-ms MS] [--idle-ms MS] [--devices N] [--peer-ms MS]
//   [--reset]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#define CK(call)                                                                                                   \
  do {                                                                                                             \
    cudaError_t e_ = (call);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                       \
      std::fprintf(stderr, "counter_workload: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                                \
    }                                                                                                              \
  } while (0)

__global__ void stream_copy(const float4* __restrict__ in, float4* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    out[i] = in[i];
  }
}

__global__ void fma_burn(float* out, int iters) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 1e-7f, d = 0.5f;
  for (int i = 0; i < iters; ++i) {
    a = fmaf(a, b, c);
    d = fmaf(d, b, c);
  }
  if (a + d == -1.0f) out[threadIdx.x] = a;  // never true: keeps the chain live
}

static double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define USAGE \
  "usage: counter_workload [--phases N] [--phase-ms MS] [--idle-ms MS] [--devices N] [--peer-ms MS] [--reset]\n"

struct Device {
  float4 *in = nullptr, *out = nullptr;
  float* sink = nullptr;
  int sms = 0;
};

int main(int argc, char** argv) {
  int phases = 6;
  double phase_ms = 300;
  double idle_ms = 0;  // --idle-ms: the GPU idles this long after the warm-up, before the first phase
  bool reset = false;  // --reset: cudaDeviceReset() before exit (the context ends before the recorder's exit hook)
  int devices = 1;
  double peer_ms = 0;
  for (int i = 1; i < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reset")) {
      reset = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) { std::fprintf(stderr, USAGE); return 2; }
    if (!std::strcmp(argv[i], "--phases")) phases = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--idle-ms")) idle_ms = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--phase-ms")) phase_ms = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--devices")) devices = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--peer-ms")) peer_ms = std::atof(argv[i + 1]);
    else { std::fprintf(stderr, USAGE); return 2; }
  }
  int available = 0;
  CK(cudaGetDeviceCount(&available));
  if (devices < 1 || devices > available || (peer_ms > 0 && devices < 2)) {
    std::fprintf(stderr, "counter_workload: --devices %d (%d present; --peer-ms needs 2)\n", devices, available);
    return 2;
  }
  const size_t n = (size_t(1) << 30) / sizeof(float4);
  std::vector<Device> dev(devices);
  for (int d = 0; d < devices; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaMalloc(&dev[d].in, n * sizeof(float4)));
    CK(cudaMalloc(&dev[d].out, n * sizeof(float4)));
    CK(cudaMalloc(&dev[d].sink, 1024 * sizeof(float)));
    CK(cudaMemset(dev[d].in, 0, n * sizeof(float4)));
    CK(cudaDeviceGetAttribute(&dev[d].sms, cudaDevAttrMultiProcessorCount, d));
    // Warm-up: module load, clocks up.
    stream_copy<<<dev[d].sms * 8, 256>>>(dev[d].in, dev[d].out, n);
    fma_burn<<<dev[d].sms * 8, 256>>>(dev[d].sink, 1 << 14);
  }
  auto sync_all = [&] {
    for (int d = 0; d < devices; ++d) {
      CK(cudaSetDevice(d));
      CK(cudaDeviceSynchronize());
    }
  };
  sync_all();
  if (peer_ms > 0) {
    CK(cudaSetDevice(0));
    CK(cudaDeviceEnablePeerAccess(1, 0));
    CK(cudaSetDevice(1));
    CK(cudaDeviceEnablePeerAccess(0, 0));
  }
  if (idle_ms > 0) {
    timespec ts{(time_t)(idle_ms / 1e3), (long)(std::fmod(idle_ms, 1e3) * 1e6)};
    nanosleep(&ts, nullptr);
  }
  std::string json = "{\"phases\":[";
  for (int p = 0; p < phases; ++p) {
    bool memory = p % 2 == 0;
    double start = now_s(), end = start;
    int kernels = 0;
    while ((end - start) * 1e3 < phase_ms) {
      for (int k = 0; k < 4; ++k, ++kernels) {
        for (int d = 0; d < devices; ++d) {
          CK(cudaSetDevice(d));
          if (memory) stream_copy<<<dev[d].sms * 8, 256>>>(dev[d].in, dev[d].out, n);
          else fma_burn<<<dev[d].sms * 8, 256>>>(dev[d].sink, 1 << 16);
        }
      }
      sync_all();
      end = now_s();
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s{\"kind\":\"%s\",\"kernels\":%d,\"start_s\":%.6f,\"end_s\":%.6f}", p ? "," : "",
                  memory ? "memory" : "compute", kernels, start, end);
    json += buf;
  }
  if (peer_ms > 0) {
    // Device 0's `in` to device 1's `out` on device 0, device 1's `in` to device 0's `out` on device 1.
    double start = now_s(), end = start;
    int copies = 0;
    while ((end - start) * 1e3 < peer_ms) {
      CK(cudaSetDevice(0));
      CK(cudaMemcpyPeerAsync(dev[1].out, 1, dev[0].in, 0, n * sizeof(float4)));
      CK(cudaSetDevice(1));
      CK(cudaMemcpyPeerAsync(dev[0].out, 0, dev[1].in, 1, n * sizeof(float4)));
      copies += 2;
      sync_all();
      end = now_s();
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, ",{\"kind\":\"peer\",\"copies\":%d,\"start_s\":%.6f,\"end_s\":%.6f}", copies, start,
                  end);
    json += buf;
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  for (int d = 0; d < devices; ++d) {
    CK(cudaSetDevice(d));
    CK(cudaFree(dev[d].in));
    CK(cudaFree(dev[d].out));
    CK(cudaFree(dev[d].sink));
    if (reset) CK(cudaDeviceReset());
  }
  return 0;
}
