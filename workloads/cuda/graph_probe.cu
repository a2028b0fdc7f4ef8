// graph_probe: what CUPTI's graph resource callbacks report, on which thread, in which API step, and how replayed
// kernels' graphId/graphNodeId relate to the ids seen at node creation (the groundwork of issue 33).
//
//   graph_probe            prints one line per callback and per kernel record
//
// Steps (each printed as "step NAME" before it runs; callbacks print the step they came in):
//   explicit    a graph of two kernel nodes built with cudaGraphAddKernelNode, instantiated twice, each launched
//   capture     stream capture of three kernels and a memset inside the program's ranges L0 and L1 (a thread-local
//               label stands for an NVTX range), instantiated, the template destroyed, launched twice
//   clone       cudaGraphClone of the explicit graph, instantiated, launched
//   update      a second capture with the same topology and other arguments, cudaGraphExecUpdate of the first exec
//   setparams   cudaGraphExecKernelNodeSetParams on one node of the explicit exec, launched
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                                      \
  do {                                                                                             \
    auto e_ = (x);                                                                                 \
    if (e_ != 0) {                                                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #x, (int)e_);             \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

static const char* g_step = "start";
static thread_local const char* t_range = "";  // what an NVTX shadow stack would hold on this thread

static long tid() { return syscall(SYS_gettid); }

static const char* cbid_name(CUpti_CallbackId c) {
  switch (c) {
    case CUPTI_CBID_RESOURCE_GRAPH_CREATED: return "GRAPH_CREATED";
    case CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING: return "GRAPH_DESTROY_STARTING";
    case CUPTI_CBID_RESOURCE_GRAPH_CLONED: return "GRAPH_CLONED";
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATE_STARTING: return "GRAPHNODE_CREATE_STARTING";
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED: return "GRAPHNODE_CREATED";
    case CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING: return "GRAPHNODE_DESTROY_STARTING";
    case CUPTI_CBID_RESOURCE_GRAPHNODE_DEPENDENCY_CREATED: return "GRAPHNODE_DEPENDENCY_CREATED";
    case CUPTI_CBID_RESOURCE_GRAPHNODE_DEPENDENCY_DESTROY_STARTING: return "GRAPHNODE_DEPENDENCY_DESTROY_STARTING";
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING: return "GRAPHEXEC_CREATE_STARTING";
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED: return "GRAPHEXEC_CREATED";
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING: return "GRAPHEXEC_DESTROY_STARTING";
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED: return "GRAPHNODE_CLONED";
    case 22: return "GRAPH_NODE_UPDATED";     // new in CUDA 13.0, undocumented fields
    case 23: return "GRAPH_NODE_SET_PARAMS";  // new in CUDA 13.0, undocumented fields
    default: return nullptr;
  }
}

static unsigned long long node_id(CUgraphNode n) {
  uint64_t id = 0;
  if (n && cuptiGetGraphNodeId(n, &id) != CUPTI_SUCCESS) return ~0ull;
  return id;
}
static unsigned graph_id(CUgraph g) {
  uint32_t id = 0;
  if (g && cuptiGetGraphId(g, &id) != CUPTI_SUCCESS) return ~0u;
  return id;
}
static unsigned exec_id(CUgraphExec g) {
  uint32_t id = 0;
  if (g && cuptiGetGraphExecId(g, &id) != CUPTI_SUCCESS) return ~0u;
  return id;
}

static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
  const char* name = cbid_name(cbid);
  if (!name) {
    std::printf("cb step=%s tid=%ld resource cbid=%u (not a graph callback)\n", g_step, tid(), cbid);
    return;
  }
  auto* r = (const CUpti_ResourceData*)data;
  auto* g = (const CUpti_GraphData*)r->resourceDescriptor;
  if (!g) {
    std::printf("cb step=%s tid=%ld %s (no graph data)\n", g_step, tid(), name);
    return;
  }
  std::printf(
      "cb step=%s tid=%ld range=%s %s graph=%u original_graph=%u node=%llu original_node=%llu type=%d "
      "dependency=%llu exec=%u\n",
      g_step, tid(), t_range, name, graph_id(g->graph), graph_id(g->originalGraph), node_id(g->node),
      node_id(g->originalNode), (int)g->nodeType, node_id(g->dependency), exec_id(g->graphExec));
}

static void CUPTIAPI buffer_requested(uint8_t** b, size_t* size, size_t* max) {
  *size = 1 << 20;
  *b = (uint8_t*)aligned_alloc(8, *size);
  *max = 0;
}

static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* b, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(b, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      auto* k = (CUpti_ActivityKernel10*)rec;
      std::printf("kernel name=%s graph=%u graph_node=%llu (graph<<32 %llu, local %llu) correlation=%u\n", k->name,
                  k->graphId, (unsigned long long)k->graphNodeId, (unsigned long long)(k->graphNodeId >> 32),
                  (unsigned long long)(k->graphNodeId & 0xffffffffull), k->correlationId);
    }
  }
  free(b);
}

__global__ void add(float* p, float v) { p[threadIdx.x] += v; }
__global__ void scale(float* p, float v) { p[threadIdx.x] *= v; }
__global__ void shift(float* p, float v) { p[threadIdx.x] -= v; }

static cudaGraph_t capture(cudaStream_t s, float* buf, float v) {
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  t_range = "L0";
  add<<<1, 32, 0, s>>>(buf, v);
  scale<<<1, 32, 0, s>>>(buf, v);
  t_range = "L0/L1";
  shift<<<1, 32, 0, s>>>(buf, v);
  CK(cudaMemsetAsync(buf + 64, 0, 64, s));
  t_range = "";
  cudaGraph_t g;
  CK(cudaStreamEndCapture(s, &g));
  return g;
}

int main() {
  CUpti_SubscriberHandle sub;
  CK(cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, nullptr));
  CK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE));
  CK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  std::printf("main tid=%ld\n", tid());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  float* buf;
  CK(cudaMalloc(&buf, 4096));

  g_step = "explicit";
  std::printf("step %s\n", g_step);
  cudaGraph_t eg;
  CK(cudaGraphCreate(&eg, 0));
  cudaGraphNode_t n1, n2;
  float v = 1.0f;
  void* args[] = {&buf, &v};
  cudaKernelNodeParams kp = {};
  kp.func = (void*)add;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(32);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&n1, eg, nullptr, 0, &kp));
  kp.func = (void*)scale;
  CK(cudaGraphAddKernelNode(&n2, eg, &n1, 1, &kp));
  cudaGraphExec_t ex1, ex2;
  g_step = "explicit-instantiate-1";
  CK(cudaGraphInstantiate(&ex1, eg, 0));
  g_step = "explicit-instantiate-2";
  CK(cudaGraphInstantiate(&ex2, eg, 0));
  g_step = "explicit-launch";
  CK(cudaGraphLaunch(ex1, s));
  CK(cudaGraphLaunch(ex2, s));
  CK(cudaStreamSynchronize(s));

  g_step = "capture";
  std::printf("step %s\n", g_step);
  cudaGraph_t cg = capture(s, buf, 2.0f);
  cudaGraphExec_t cex;
  g_step = "capture-instantiate";
  CK(cudaGraphInstantiate(&cex, cg, 0));
  g_step = "capture-destroy-template";
  CK(cudaGraphDestroy(cg));
  g_step = "capture-launch";
  CK(cudaGraphLaunch(cex, s));
  CK(cudaGraphLaunch(cex, s));
  CK(cudaStreamSynchronize(s));

  g_step = "clone";
  std::printf("step %s\n", g_step);
  cudaGraph_t clone;
  CK(cudaGraphClone(&clone, eg));
  cudaGraphExec_t clex;
  g_step = "clone-instantiate";
  CK(cudaGraphInstantiate(&clex, clone, 0));
  g_step = "clone-launch";
  CK(cudaGraphLaunch(clex, s));
  CK(cudaStreamSynchronize(s));

  g_step = "update";
  std::printf("step %s\n", g_step);
  cudaGraph_t cg2 = capture(s, buf, 3.0f);
  cudaGraphExecUpdateResultInfo info;
  g_step = "update-exec";
  CK(cudaGraphExecUpdate(cex, cg2, &info));
  std::printf("update result=%d\n", (int)info.result);
  g_step = "update-launch";
  CK(cudaGraphLaunch(cex, s));
  CK(cudaStreamSynchronize(s));

  g_step = "setparams";
  std::printf("step %s\n", g_step);
  v = 5.0f;
  kp.func = (void*)scale;
  CK(cudaGraphExecKernelNodeSetParams(ex1, n2, &kp));
  g_step = "setparams-launch";
  CK(cudaGraphLaunch(ex1, s));
  CK(cudaStreamSynchronize(s));

  g_step = "end";
  CK(cuptiActivityFlushAll(1));
  std::printf("done\n");
  return 0;
}
