// um_workload: unified memory moved in ways the program knows exactly, for `cupti-record --um` (issue 29).
//
//   um_workload [MIB]        (default 64: each buffer is MIB MiB, `partial` is 4x that)
//
// Four managed buffers, each in an NVTX range of its name:
//   touch     written on the host, read and written by a kernel, read back on the host: GPU page faults and
//             MIB MiB host to device, then CPU page faults and MIB MiB device to host.
//   prefetch  written on the host, prefetched to the GPU before the kernel, prefetched back before the host reads
//             it: MIB MiB each way with cause "prefetch", and no GPU page fault while the kernel runs.
//   readonly  written on the host, advised read-mostly, only read by a kernel, then read on the host: MIB MiB to
//             the device (read duplicates) and nothing back.
//   partial   4 x MIB MiB written on the host; the kernel touches only its first MIB MiB: MIB MiB to the device.
// Host reads and writes run in `host_write` and `host_sum` (never inlined), so a CPU page fault's instruction is
// in one of them. Prints JSON: each buffer's address, size and bytes the GPU touched, and the checksums.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

__global__ void increment(int* data, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    data[i] += 1;
}

__global__ void sum_read(const int* data, size_t n, unsigned long long* out) {
  unsigned long long s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += data[i];
  atomicAdd(out, s);
}

__attribute__((noinline)) void host_write(int* data, size_t n, int value) {
  for (size_t i = 0; i < n; ++i) data[i] = value;
}

__attribute__((noinline)) long long host_sum(const int* data, size_t n) {
  long long s = 0;
  for (size_t i = 0; i < n; ++i) s += data[i];
  return s;
}

static cudaMemLocation on_device(int id) {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = id;
  return l;
}

static cudaMemLocation on_host() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeHost;
  return l;
}

struct Buffer {
  const char* name;
  int* data;
  size_t bytes;
  size_t gpu_bytes;  // what the GPU touches (from the start)
  long long host_sum;
};

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  size_t bytes = mib << 20, ints = bytes / sizeof(int);
  int device = 0;
  CHECK(cudaSetDevice(device));
  auto t0 = std::chrono::steady_clock::now();
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  unsigned long long* sum = nullptr;
  CHECK(cudaMalloc(&sum, sizeof(*sum)));
  Buffer b[4] = {{"touch", nullptr, bytes, bytes, 0},
                 {"prefetch", nullptr, bytes, bytes, 0},
                 {"readonly", nullptr, bytes, bytes, 0},
                 {"partial", nullptr, 4 * bytes, bytes, 0}};
  for (auto& x : b) CHECK(cudaMallocManaged(&x.data, x.bytes));
  const int grid = 264, block = 256;

  nvtxRangePushA("touch");
  host_write(b[0].data, ints, 1);
  increment<<<grid, block, 0, stream>>>(b[0].data, ints);
  CHECK(cudaStreamSynchronize(stream));
  b[0].host_sum = host_sum(b[0].data, ints);
  nvtxRangePop();

  nvtxRangePushA("prefetch");
  host_write(b[1].data, ints, 1);
  CHECK(cudaMemPrefetchAsync(b[1].data, bytes, on_device(device), 0, stream));
  increment<<<grid, block, 0, stream>>>(b[1].data, ints);
  CHECK(cudaMemPrefetchAsync(b[1].data, bytes, on_host(), 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  b[1].host_sum = host_sum(b[1].data, ints);
  nvtxRangePop();

  nvtxRangePushA("readonly");
  host_write(b[2].data, ints, 1);
  CHECK(cudaMemAdvise(b[2].data, bytes, cudaMemAdviseSetReadMostly, on_device(device)));
  CHECK(cudaMemsetAsync(sum, 0, sizeof(*sum), stream));
  sum_read<<<grid, block, 0, stream>>>(b[2].data, ints, sum);
  CHECK(cudaStreamSynchronize(stream));
  b[2].host_sum = host_sum(b[2].data, ints);
  nvtxRangePop();

  nvtxRangePushA("partial");
  host_write(b[3].data, 4 * ints, 1);
  increment<<<grid, block, 0, stream>>>(b[3].data, ints);
  CHECK(cudaStreamSynchronize(stream));
  nvtxRangePop();

  unsigned long long gpu_sum = 0;
  CHECK(cudaMemcpy(&gpu_sum, sum, sizeof(gpu_sum), cudaMemcpyDeviceToHost));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"mib\": %zu, \"seconds\": %.6f, \"gpu_read_sum\": %llu, \"buffers\": [", mib, seconds,
              gpu_sum);
  for (int i = 0; i < 4; ++i) {
    std::printf("%s{\"name\": \"%s\", \"address\": %llu, \"bytes\": %zu, \"gpu_bytes\": %zu, \"host_sum\": %lld}",
                i ? ", " : "", b[i].name, (unsigned long long)(uintptr_t)b[i].data, b[i].bytes, b[i].gpu_bytes,
                b[i].host_sum);
  }
  std::printf("]}\n");
  for (auto& x : b) CHECK(cudaFree(x.data));
  CHECK(cudaFree(sum));
  CHECK(cudaStreamDestroy(stream));
  return 0;
}
