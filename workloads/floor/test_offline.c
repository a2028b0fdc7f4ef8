// Offline test of floor_inject.c (no GPU, no driver): builds a buffer of synthetic CUPTI 13.0 activity records,
// hands it to the client's buffer callbacks, walks it with the real libcupti's cuptiActivityGetNextRecord, checks
// the counters, and prints the JSON report on stdout (the caller validates it as JSON).
//   gcc -I<cupti include> -I<cuda include> ... test_offline.c -l:libcupti.so.13
#include "floor_inject.c"

#include <assert.h>

static uint8_t* g_buf;
static size_t g_off;
#define ADD(rec)                                  \
  do {                                            \
    memcpy(g_buf + g_off, &(rec), sizeof(rec));   \
    g_off += sizeof(rec);                         \
  } while (0)

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "test_offline: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(void) {
  g_count = 1;
  size_t size = 0, max_records = 1;
  buffer_requested(&g_buf, &size, &max_records);
  CHECK(g_buf && size == FLOOR_BUF_SIZE && max_records == 0);
  memset(g_buf, 0, size);

  for (int i = 0; i < 3; ++i) {  // kernels: correlation ids 1, 2, 3; the second one from a graph
    CUpti_ActivityKernel10 k;
    memset(&k, 0, sizeof k);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.name = i < 2 ? "_Z4fillPffi" : "we\"ird\\name";
    k.start = 100;
    k.end = 350;
    k.graphId = i == 1 ? 7 : 0;
    k.correlationId = (uint32_t)i + 1;
    k.streamId = 13;
    ADD(k);
  }
  CUpti_ActivityAPI a;
  memset(&a, 0, sizeof a);
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  a.correlationId = 1;
  ADD(a);
  a.kind = CUPTI_ACTIVITY_KIND_DRIVER;  // same correlation id as the runtime record: runtime wins
  a.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  ADD(a);
  a.correlationId = 2;  // driver only
  ADD(a);
  CUpti_ActivityMemcpy6 m;
  memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.correlationId = 9;  // no API record: unmatched
  m.streamId = 7;
  ADD(m);
  CUpti_ActivityMemset4 ms;
  memset(&ms, 0, sizeof ms);
  ms.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  ms.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  ms.correlationId = 10;
  ms.streamId = 7;
  ADD(ms);
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020;
  a.correlationId = 10;
  ADD(a);
  CUpti_ActivitySynchronization2 s;
  memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
  ADD(s);
  CUpti_ActivityMarker2 mk;
  memset(&mk, 0, sizeof mk);
  mk.kind = CUPTI_ACTIVITY_KIND_MARKER;
  mk.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
  mk.name = "A:iter";
  ADD(mk);
  mk.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
  mk.name = NULL;
  ADD(mk);

  buffer_completed(NULL, 0, g_buf, size, g_off);
  CHECK(g_walk_errors == 0);
  CHECK(g_records[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL] == 3);
  CHECK(g_records[CUPTI_ACTIVITY_KIND_RUNTIME] == 2);
  CHECK(g_records[CUPTI_ACTIVITY_KIND_DRIVER] == 2);
  CHECK(g_records[CUPTI_ACTIVITY_KIND_MEMCPY] == 1);
  CHECK(g_records[CUPTI_ACTIVITY_KIND_MEMSET] == 1);
  CHECK(g_records[CUPTI_ACTIVITY_KIND_SYNCHRONIZATION] == 1);
  CHECK(g_records[CUPTI_ACTIVITY_KIND_MARKER] == 2);
  CHECK(g_rt[CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000] == 1);
  CHECK(g_memcpy[1][1][3] == 1);
  CHECK(g_memset[3] == 1);
  CHECK(g_sync[2] == 1);
  Entry* e = table_get(&g_kernels, "_Z4fillPffi");
  CHECK(e && e->count == 2 && e->total_ns == 500 && e->graph_count == 1);
  e = table_get(&g_markers, "A:iter");
  CHECK(e && e->count == 1);
  CHECK(g_nfree == 1 && g_completed == 1);  // the buffer went back to the pool

  parse_kinds();
  write_report(stdout, 0, CUPTI_SUCCESS);
  return 0;
}
