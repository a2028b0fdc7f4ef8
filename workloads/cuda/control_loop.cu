// control_loop: short kernels launched back to back while the program itself turns the recording off and on and
// dumps it through `cupti-record ctl` (the operator's commands, at points the program knows), so that the kernels
// launched while recording was on are known exactly.
//
//   control_loop CUPTI_RECORD ROUNDS PER_PHASE
//
// Each round: PER_PHASE kernels (recording on), `ctl PID stop`, PER_PHASE kernels (off), `ctl PID start`,
// PER_PHASE kernels (on), `ctl PID dump`. Kernels are ~50 us and never synchronized before a control command, so
// hundreds are queued or running when each command arrives. Prints {"on": N, "off": M, "ctl_failures": F}: a
// recording that loses nothing holds exactly N `tick` kernels.
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

__global__ void tick(float* out, int iters) {
  float x = threadIdx.x;
  for (int i = 0; i < iters; ++i) x = x * 1.0000001f + 1.0f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CUPTI_RECORD ROUNDS PER_PHASE\n", argv[0]);
    return 2;
  }
  int rounds = std::atoi(argv[2]), per = std::atoi(argv[3]);
  float* buf = nullptr;
  if (cudaMalloc(&buf, sizeof(float) * 132 * 128) != cudaSuccess) return 1;
  long on = 0, off = 0;
  int failures = 0;
  std::string ctl = std::string(argv[1]) + " ctl " + std::to_string(getpid()) + " ";
  auto command = [&](const char* what) {
    if (std::system((ctl + what + " >/dev/null").c_str()) != 0) ++failures;
  };
  auto phase = [&](long& count) {
    for (int i = 0; i < per; ++i, ++count) tick<<<132, 128>>>(buf, 12000);
  };
  for (int r = 0; r < rounds; ++r) {
    phase(on);
    command("stop");
    phase(off);
    command("start");
    phase(on);
    command("dump");
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return 1;
  std::printf("{\"on\": %ld, \"off\": %ld, \"ctl_failures\": %d}\n", on, off, failures);
  return 0;
}
