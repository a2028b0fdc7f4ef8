// um_probe: which unified memory counter configurations CUPTI accepts and enables on this machine, when called
// before CUDA is initialized (as NVIDIA's unified_memory sample) and after (as an injected recorder would).
//   um_probe KINDS SCOPE WHEN     KINDS: comma list of counter kinds; SCOPE 1 single device 0, 2 all devices;
//                                 WHEN: before | after (cuInit) | ctx (after a context exists)
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
static const char* rs(CUptiResult r) { const char* s = ""; cuptiGetResultString(r, &s); return s; }
static size_t recs = 0, kinds[9] = {0};
static void CUPTIAPI req(uint8_t** b, size_t* s, size_t* m) { *s = 1 << 20; *b = (uint8_t*)aligned_alloc(8, *s); *m = 0; }
static void CUPTIAPI done(CUcontext, uint32_t, uint8_t* b, size_t, size_t v) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(b, v, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) {
      recs++;
      auto* u = (CUpti_ActivityUnifiedMemoryCounter3*)r;
      if (u->counterKind < 9) kinds[u->counterKind]++;
    }
  }
  free(b);
}
int main(int argc, char** argv) {
  std::string arg = argv[1];
  std::vector<unsigned> ks;
  for (char* t = strtok(argv[1], ","); t; t = strtok(nullptr, ",")) ks.push_back(atoi(t));
  unsigned scope = atoi(argv[2]);
  const char* when = argv[3];
  cuptiActivityRegisterCallbacks(req, done);
  if (!strcmp(when, "after") || !strcmp(when, "ctx")) cuInit(0);
  if (!strcmp(when, "ctx")) cudaFree(0);
  std::vector<CUpti_ActivityUnifiedMemoryCounterConfig> c(ks.size());
  for (size_t i = 0; i < ks.size(); ++i) {
    c[i].scope = (CUpti_ActivityUnifiedMemoryCounterScope)scope;
    c[i].kind = (CUpti_ActivityUnifiedMemoryCounterKind)ks[i];
    c[i].deviceId = 0;
    c[i].enable = 1;
  }
  CUptiResult cr = cuptiActivityConfigureUnifiedMemoryCounter(c.data(), c.size());
  CUptiResult er = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  int* p = nullptr;
  cudaMallocManaged(&p, 8 << 20);
  for (int i = 0; i < (2 << 20); ++i) p[i] = i;
  cudaMemPrefetchAsync(p, 8 << 20, cudaMemLocation{cudaMemLocationTypeDevice, 0}, 0, 0);
  cudaDeviceSynchronize();
  long s = 0;
  for (int i = 0; i < (2 << 20); ++i) s += p[i];
  cuptiActivityFlushAll(1);
  printf("kinds=%s scope=%u when=%s configure=%s enable=%s records=%zu per_kind=", arg.c_str(), scope, when, rs(cr), rs(er), recs);
  for (int k = 1; k < 9; ++k) printf("%zu%s", kinds[k], k < 8 ? "," : "\n");
  return s == 0;
}
