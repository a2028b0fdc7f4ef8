// floor_inject: the project's own "floor" CUPTI client, the cheapest possible recorder.
//
// Loaded by the CUDA driver through CUDA_INJECTION64_PATH=/path/floor_inject.so, which calls InitializeInjection()
// at cuInit. It enables exactly the activity kinds listed in FLOOR_KINDS, hands CUPTI 8 MiB buffers from a
// preallocated pool and gives them straight back to the pool when CUPTI returns them. The cost of a run under it
// over an untraced run is the floor for any CUPTI-based recorder that enables the same kinds.
//
// Environment:
//   FLOOR_KINDS       comma-separated CUpti_ActivityKind numbers to enable (default 10,5,4,1,22,2,38,39,17:
//                     CONCURRENT_KERNEL, RUNTIME, DRIVER, MEMCPY, MEMCPY2, MEMSET, SYNCHRONIZATION,
//                     EXTERNAL_CORRELATION, OVERHEAD). NVTX ranges need MARKER (12) here and
//                     NVTX_INJECTION64_PATH=<libcupti.so> in the environment.
//   FLOOR_COUNT=1     walk every completed buffer with cuptiActivityGetNextRecord and count records per kind;
//                     per kernel name (raw, mangled) count and total duration; per runtime / driver cbid; memcpys
//                     per copy kind and memory kinds; memsets per memory kind; synchronizations per type; NVTX
//                     range starts per message; and, through correlation ids, which runtime / driver API launched
//                     each kernel, memcpy and memset record, and how many of those ran on each stream. Without it
//                     buffers are only recycled (the true floor).
//   FLOOR_OUT=path    at exit write a JSON report there ("%p" in the path is replaced by the process id).
//   FLOOR_POOL=n      buffers preallocated (and pre-faulted) at start (default 16; more are allocated on demand
//                     and recycled too; the report says how many).
//   FLOOR_DEVBUF=1    set CUPTI's device buffer size to 3,200,000 B and its pool limit to 20 (Kineto's values).
//   FLOOR_PER_THREAD=0|1  set CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER (CUPTI 13 default: 1).
//   FLOOR_VERBOSE=1   print a one-line summary on stderr at exit.
//
// At exit (atexit) it calls cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), reads the dropped-record count
// and writes the report.
#define _GNU_SOURCE
#include <cupti.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FLOOR_BUF_SIZE ((size_t)8 << 20)
#define FLOOR_FREE_MAX 1024 /* recycled buffers kept at most; beyond that they are freed */
#define MAX_KIND 128
#define MAX_ENABLE 64
#define RT_MAX 1024
#define DRV_MAX 2048

#if CUPTI_RUNTIME_TRACE_CBID_SIZE > RT_MAX || CUPTI_DRIVER_TRACE_CBID_SIZE > DRV_MAX || CUPTI_ACTIVITY_KIND_COUNT > MAX_KIND
#error "raise RT_MAX / DRV_MAX / MAX_KIND"
#endif

#define EXPORT __attribute__((visibility("default")))

// ---------------------------------------------------------------------------------------------- buffer pool
static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t* g_free[FLOOR_FREE_MAX];
static int g_nfree;
static uint64_t g_requested, g_completed, g_extra_allocs, g_null_buffers, g_bytes_valid, g_pool_size;

static uint8_t* alloc_buffer(void) {
  void* p = NULL;
  if (posix_memalign(&p, 4096, FLOOR_BUF_SIZE) != 0) return NULL;
  return (uint8_t*)p;
}

static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  uint8_t* b = NULL;
  pthread_mutex_lock(&g_pool_mu);
  g_requested++;
  if (g_nfree > 0) b = g_free[--g_nfree];
  pthread_mutex_unlock(&g_pool_mu);
  if (!b) {
    b = alloc_buffer();
    pthread_mutex_lock(&g_pool_mu);
    if (b) g_extra_allocs++; else g_null_buffers++;
    pthread_mutex_unlock(&g_pool_mu);
  }
  *buffer = b;
  *size = b ? FLOOR_BUF_SIZE : 0;
  *max_records = 0;
}

// ---------------------------------------------------------------------------------------------- counting (FLOOR_COUNT=1)
static int g_count;
static pthread_mutex_t g_count_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_records[MAX_KIND], g_records_other;
static uint64_t g_rt[RT_MAX], g_drv[DRV_MAX];
static uint64_t g_memcpy[16][8][8];  // copyKind, srcKind, dstKind (each masked to the array)
static uint64_t g_memset[8];         // memoryKind
static uint64_t g_sync[8];           // CUpti_ActivitySynchronizationType
static uint64_t g_walk_errors;

// Open-addressing string table: name -> {count, total_ns, graph_count}. Keys are copied.
typedef struct {
  char* key;
  uint64_t count, total_ns, graph_count;
} Entry;
typedef struct {
  Entry* e;
  size_t cap, len;
} Table;
static Table g_kernels, g_markers;

static uint64_t fnv1a(const char* s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static Entry* table_get(Table* t, const char* key) {
  if (t->len * 2 >= t->cap) {
    size_t ncap = t->cap ? t->cap * 2 : 1024;
    Entry* ne = calloc(ncap, sizeof(Entry));
    if (!ne) return NULL;
    for (size_t i = 0; i < t->cap; ++i) {
      if (!t->e[i].key) continue;
      size_t j = fnv1a(t->e[i].key) & (ncap - 1);
      while (ne[j].key) j = (j + 1) & (ncap - 1);
      ne[j] = t->e[i];
    }
    free(t->e);
    t->e = ne;
    t->cap = ncap;
  }
  size_t j = fnv1a(key) & (t->cap - 1);
  while (t->e[j].key) {
    if (!strcmp(t->e[j].key, key)) return &t->e[j];
    j = (j + 1) & (t->cap - 1);
  }
  t->e[j].key = strdup(key);
  if (!t->e[j].key) return NULL;
  t->len++;
  return &t->e[j];
}

// Correlation: (correlationId, domain, cbid) of every API record and (correlationId, slot) of every kernel, memcpy
// and memset record, resolved at exit (records of one correlation id may arrive in different buffers).
enum { SLOT_KERNEL, SLOT_MEMCPY, SLOT_MEMSET, NSLOT };
static const char* const kSlotName[NSLOT] = {"CONCURRENT_KERNEL", "MEMCPY", "MEMSET"};
typedef struct {
  uint32_t corr;
  uint16_t domain;  // 0 runtime, 1 driver: runtime sorts first and wins when both carry one correlation id
  uint16_t cbid;
} ApiCorr;
typedef struct {
  uint32_t corr;
  uint32_t slot;
} GpuCorr;
static ApiCorr* g_api_corr;
static size_t g_napi_corr, g_capi_corr;
static GpuCorr* g_gpu_corr;
static size_t g_ngpu_corr, g_cgpu_corr;
static uint64_t g_corr_alloc_fail;

static void note_api(uint32_t corr, uint16_t domain, uint32_t cbid) {
  if (g_napi_corr == g_capi_corr) {
    size_t n = g_capi_corr ? g_capi_corr * 2 : 65536;
    ApiCorr* p = realloc(g_api_corr, n * sizeof *p);
    if (!p) { g_corr_alloc_fail++; return; }
    g_api_corr = p;
    g_capi_corr = n;
  }
  g_api_corr[g_napi_corr++] = (ApiCorr){corr, domain, (uint16_t)cbid};
}

static Table g_streams;  // "<slot>/<streamId>" -> records

static void note_gpu(uint32_t corr, uint32_t slot, uint32_t stream) {
  char key[64];
  snprintf(key, sizeof key, "%s/%u", kSlotName[slot], stream);
  Entry* e = table_get(&g_streams, key);
  if (e) e->count++;
  if (g_ngpu_corr == g_cgpu_corr) {
    size_t n = g_cgpu_corr ? g_cgpu_corr * 2 : 65536;
    GpuCorr* p = realloc(g_gpu_corr, n * sizeof *p);
    if (!p) { g_corr_alloc_fail++; return; }
    g_gpu_corr = p;
    g_cgpu_corr = n;
  }
  g_gpu_corr[g_ngpu_corr++] = (GpuCorr){corr, slot};
}

static void count_buffer(uint8_t* buffer, size_t valid) {
  CUpti_Activity* rec = NULL;
  pthread_mutex_lock(&g_count_mu);
  for (;;) {
    CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &rec);
    if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
    if (r != CUPTI_SUCCESS) {
      g_walk_errors++;
      break;
    }
    unsigned k = (unsigned)rec->kind;
    if (k < MAX_KIND) g_records[k]++; else g_records_other++;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10* kr = (const CUpti_ActivityKernel10*)rec;
        Entry* e = table_get(&g_kernels, kr->name ? kr->name : "(null)");
        if (e) {
          e->count++;
          if (kr->end > kr->start) e->total_ns += kr->end - kr->start;
          if (kr->graphId != 0) e->graph_count++;
        }
        note_gpu(kr->correlationId, SLOT_KERNEL, kr->streamId);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const CUpti_ActivityAPI* ar = (const CUpti_ActivityAPI*)rec;
        if (ar->cbid < RT_MAX) {
          g_rt[ar->cbid]++;
          note_api(ar->correlationId, 0, ar->cbid);
        }
        break;
      }
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const CUpti_ActivityAPI* ar = (const CUpti_ActivityAPI*)rec;
        if (ar->cbid < DRV_MAX) {
          g_drv[ar->cbid]++;
          note_api(ar->correlationId, 1, ar->cbid);
        }
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6* m = (const CUpti_ActivityMemcpy6*)rec;
        g_memcpy[m->copyKind & 15][m->srcKind & 7][m->dstKind & 7]++;
        note_gpu(m->correlationId, SLOT_MEMCPY, m->streamId);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4* ms = (const CUpti_ActivityMemset4*)rec;
        g_memset[ms->memoryKind & 7]++;
        note_gpu(ms->correlationId, SLOT_MEMSET, ms->streamId);
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
        g_sync[((unsigned)((const CUpti_ActivitySynchronization2*)rec)->type) & 7]++;
        break;
      case CUPTI_ACTIVITY_KIND_MARKER: {
        const CUpti_ActivityMarker2* mk = (const CUpti_ActivityMarker2*)rec;
        if (mk->flags & (CUPTI_ACTIVITY_FLAG_MARKER_START | CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS)) {
          Entry* e = table_get(&g_markers, mk->name ? mk->name : "(null)");
          if (e) e->count++;
        }
        break;
      }
      default:
        break;
    }
  }
  pthread_mutex_unlock(&g_count_mu);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  (void)ctx;
  (void)stream;
  (void)size;
  if (!buffer) return;
  if (g_count && valid > 0) count_buffer(buffer, valid);
  int keep;
  pthread_mutex_lock(&g_pool_mu);
  g_completed++;
  g_bytes_valid += valid;
  keep = g_nfree < FLOOR_FREE_MAX;
  if (keep) g_free[g_nfree++] = buffer;
  pthread_mutex_unlock(&g_pool_mu);
  if (!keep) free(buffer);
}

// ---------------------------------------------------------------------------------------------- report
static int g_kinds[MAX_ENABLE], g_nkinds;
static int g_enable_err_kind[MAX_ENABLE], g_enable_err_code[MAX_ENABLE], g_nenable_err;

static const char* kind_name(unsigned k) {
  static const char* const names[] = {
    "INVALID", "MEMCPY", "MEMSET", "KERNEL", "DRIVER", "RUNTIME", "EVENT", "METRIC", "DEVICE", "CONTEXT",
    "CONCURRENT_KERNEL", "NAME", "MARKER", "MARKER_DATA", "SOURCE_LOCATOR", "GLOBAL_ACCESS", "BRANCH", "OVERHEAD",
    "CDP_KERNEL", "PREEMPTION", "ENVIRONMENT", "EVENT_INSTANCE", "MEMCPY2", "METRIC_INSTANCE",
    "INSTRUCTION_EXECUTION", "UNIFIED_MEMORY_COUNTER", "FUNCTION", "MODULE", "DEVICE_ATTRIBUTE", "SHARED_ACCESS",
    "PC_SAMPLING", "PC_SAMPLING_RECORD_INFO", "INSTRUCTION_CORRELATION", "OPENACC_DATA", "OPENACC_LAUNCH",
    "OPENACC_OTHER", "CUDA_EVENT", "STREAM", "SYNCHRONIZATION", "EXTERNAL_CORRELATION", "NVLINK",
    "INSTANTANEOUS_EVENT", "INSTANTANEOUS_EVENT_INSTANCE", "INSTANTANEOUS_METRIC", "INSTANTANEOUS_METRIC_INSTANCE",
    "MEMORY", "PCIE", "OPENMP", "INTERNAL_LAUNCH_API", "MEMORY2", "MEMORY_POOL", "GRAPH_TRACE", "JIT",
    "DEVICE_GRAPH_TRACE", "MEM_DECOMPRESS"};
  return k < sizeof names / sizeof *names ? names[k] : "OTHER";
}
static const char* const kCopyKind[16] = {"UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA",
                                          "DTOD", "HTOH", "PTOP", "11", "12", "13", "14", "15"};
static const char* const kMemKind[8] = {"UNKNOWN", "PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED",
                                        "DEVICE_STATIC", "MANAGED_STATIC"};
static const char* const kSyncType[8] = {"UNKNOWN", "EVENT_SYNCHRONIZE", "STREAM_WAIT_EVENT", "STREAM_SYNCHRONIZE",
                                         "CONTEXT_SYNCHRONIZE", "5", "6", "7"};

static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; ++s) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

static void write_api(FILE* f, const char* key, CUpti_CallbackDomain dom, const uint64_t* counts, unsigned n) {
  fprintf(f, ",\"%s\":{", key);
  int first = 1;
  for (unsigned cb = 0; cb < n; ++cb) {
    if (!counts[cb]) continue;
    const char* name = NULL;
    char tmp[32];
    if (cuptiGetCallbackName(dom, cb, &name) != CUPTI_SUCCESS || !name) {
      snprintf(tmp, sizeof tmp, "cbid_%u", cb);
      name = tmp;
    }
    fprintf(f, "%s", first ? "" : ",");
    json_str(f, name);
    fprintf(f, ":%" PRIu64, counts[cb]);
    first = 0;
  }
  fputc('}', f);
}

static void write_table(FILE* f, const char* key, const Table* t, int with_times) {
  fprintf(f, ",\"%s\":{", key);
  int first = 1;
  for (size_t i = 0; i < t->cap; ++i) {
    const Entry* e = &t->e[i];
    if (!e->key) continue;
    fprintf(f, "%s", first ? "" : ",");
    json_str(f, e->key);
    if (with_times)
      fprintf(f, ":{\"count\":%" PRIu64 ",\"total_ns\":%" PRIu64 ",\"graph_count\":%" PRIu64 "}", e->count,
              e->total_ns, e->graph_count);
    else
      fprintf(f, ":%" PRIu64, e->count);
    first = 0;
  }
  fputc('}', f);
}

static int cmp_api_corr(const void* a, const void* b) {
  const ApiCorr *x = a, *y = b;
  if (x->corr != y->corr) return x->corr < y->corr ? -1 : 1;
  return (int)x->domain - (int)y->domain;
}

// "gpu_by_api": for each kernel / memcpy / memset record, the API record with the same correlation id (runtime
// preferred over driver), counted per API name; "gpu_unmatched": records with no such API record.
static void write_gpu_by_api(FILE* f) {
  static uint64_t by[NSLOT][2][DRV_MAX];
  uint64_t unmatched[NSLOT] = {0};
  memset(by, 0, sizeof by);
  if (g_napi_corr) qsort(g_api_corr, g_napi_corr, sizeof *g_api_corr, cmp_api_corr);
  for (size_t i = 0; i < g_ngpu_corr; ++i) {
    uint32_t c = g_gpu_corr[i].corr;
    size_t lo = 0, hi = g_napi_corr;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (g_api_corr[mid].corr < c) lo = mid + 1; else hi = mid;
    }
    if (lo < g_napi_corr && g_api_corr[lo].corr == c)
      by[g_gpu_corr[i].slot][g_api_corr[lo].domain][g_api_corr[lo].cbid]++;
    else
      unmatched[g_gpu_corr[i].slot]++;
  }
  fprintf(f, ",\"gpu_by_api\":{");
  for (int sl = 0; sl < NSLOT; ++sl) {
    fprintf(f, "%s\"%s\":{", sl ? "," : "", kSlotName[sl]);
    int first = 1;
    for (int dom = 0; dom < 2; ++dom)
      for (unsigned cb = 0; cb < DRV_MAX; ++cb) {
        if (!by[sl][dom][cb]) continue;
        const char* name = NULL;
        char tmp[40];
        CUpti_CallbackDomain d = dom ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
        if (cuptiGetCallbackName(d, cb, &name) != CUPTI_SUCCESS || !name) {
          snprintf(tmp, sizeof tmp, "%s_cbid_%u", dom ? "driver" : "runtime", cb);
          name = tmp;
        }
        fprintf(f, "%s", first ? "" : ",");
        json_str(f, name);
        fprintf(f, ":%" PRIu64, by[sl][dom][cb]);
        first = 0;
      }
    fputc('}', f);
  }
  fprintf(f, "},\"gpu_unmatched\":{");
  for (int sl = 0; sl < NSLOT; ++sl)
    fprintf(f, "%s\"%s\":%" PRIu64, sl ? "," : "", kSlotName[sl], unmatched[sl]);
  fprintf(f, "},\"correlation_alloc_failures\":%" PRIu64, g_corr_alloc_fail);
}

static void write_report(FILE* f, size_t dropped, CUptiResult dropped_rc) {
  uint32_t version = 0;
  cuptiGetVersion(&version);
  fprintf(f, "{\"client\":\"cutr-floor\",\"format\":1,\"pid\":%d,\"cupti_api_version\":%u,\"count_mode\":%s,\"kinds\":[",
          (int)getpid(), version, g_count ? "true" : "false");
  for (int i = 0; i < g_nkinds; ++i) fprintf(f, "%s%d", i ? "," : "", g_kinds[i]);
  fprintf(f, "],\"enable_errors\":{");
  for (int i = 0; i < g_nenable_err; ++i) {
    const char* s = NULL;
    cuptiGetResultString((CUptiResult)g_enable_err_code[i], &s);
    fprintf(f, "%s\"%d\":", i ? "," : "", g_enable_err_kind[i]);
    json_str(f, s ? s : "?");
  }
  pthread_mutex_lock(&g_pool_mu);
  fprintf(f, "},\"buffer_size\":%zu,\"pool_buffers\":%" PRIu64 ",\"buffers_requested\":%" PRIu64
             ",\"buffers_completed\":%" PRIu64 ",\"extra_allocs\":%" PRIu64 ",\"null_buffers\":%" PRIu64
             ",\"bytes_valid\":%" PRIu64,
          FLOOR_BUF_SIZE, g_pool_size, g_requested, g_completed, g_extra_allocs, g_null_buffers, g_bytes_valid);
  pthread_mutex_unlock(&g_pool_mu);
  if (dropped_rc == CUPTI_SUCCESS) fprintf(f, ",\"dropped\":%zu", dropped);
  else fprintf(f, ",\"dropped\":null");

  pthread_mutex_lock(&g_count_mu);
  fprintf(f, ",\"records\":{");
  int first = 1;
  uint64_t total = 0;
  for (unsigned k = 0; k < MAX_KIND; ++k) {
    if (!g_records[k]) continue;
    fprintf(f, "%s\"%u\":%" PRIu64, first ? "" : ",", k, g_records[k]);
    total += g_records[k];
    first = 0;
  }
  fprintf(f, "},\"records_by_name\":{");
  first = 1;
  for (unsigned k = 0; k < MAX_KIND; ++k) {
    if (!g_records[k]) continue;
    fprintf(f, "%s\"%s\":%" PRIu64, first ? "" : ",", kind_name(k), g_records[k]);
    first = 0;
  }
  fprintf(f, "},\"records_total\":%" PRIu64 ",\"records_other_kind\":%" PRIu64 ",\"walk_errors\":%" PRIu64,
          total + g_records_other, g_records_other, g_walk_errors);
  write_table(f, "kernels", &g_kernels, 1);
  write_api(f, "runtime_api", CUPTI_CB_DOMAIN_RUNTIME_API, g_rt, RT_MAX);
  write_api(f, "driver_api", CUPTI_CB_DOMAIN_DRIVER_API, g_drv, DRV_MAX);
  fprintf(f, ",\"memcpy\":{");
  first = 1;
  for (int c = 0; c < 16; ++c)
    for (int s = 0; s < 8; ++s)
      for (int d = 0; d < 8; ++d) {
        if (!g_memcpy[c][s][d]) continue;
        fprintf(f, "%s\"%s:%s->%s\":%" PRIu64, first ? "" : ",", kCopyKind[c], kMemKind[s], kMemKind[d],
                g_memcpy[c][s][d]);
        first = 0;
      }
  fprintf(f, "},\"memset\":{");
  first = 1;
  for (int m = 0; m < 8; ++m) {
    if (!g_memset[m]) continue;
    fprintf(f, "%s\"%s\":%" PRIu64, first ? "" : ",", kMemKind[m], g_memset[m]);
    first = 0;
  }
  fprintf(f, "},\"sync\":{");
  first = 1;
  for (int t = 0; t < 8; ++t) {
    if (!g_sync[t]) continue;
    fprintf(f, "%s\"%s\":%" PRIu64, first ? "" : ",", kSyncType[t], g_sync[t]);
    first = 0;
  }
  fputc('}', f);
  write_table(f, "markers", &g_markers, 0);
  write_gpu_by_api(f);
  write_table(f, "gpu_by_stream", &g_streams, 0);
  pthread_mutex_unlock(&g_count_mu);
  fprintf(f, "}\n");
}

static void at_exit(void) {
  CUptiResult fr = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  size_t dropped = 0;
  CUptiResult dr = cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped);
  const char* out = getenv("FLOOR_OUT");
  if (out && *out) {
    char path[4096];
    size_t o = 0;
    for (const char* p = out; *p && o + 24 < sizeof path; ++p) {
      if (p[0] == '%' && p[1] == 'p') {
        o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
        ++p;
      } else {
        path[o++] = *p;
      }
    }
    path[o] = '\0';
    FILE* f = fopen(path, "w");
    if (f) {
      write_report(f, dropped, dr);
      fclose(f);
    } else {
      fprintf(stderr, "floor_inject: cannot write %s\n", path);
    }
  }
  if (getenv("FLOOR_VERBOSE") && atoi(getenv("FLOOR_VERBOSE")) == 1) {
    pthread_mutex_lock(&g_pool_mu);
    fprintf(stderr,
            "floor_inject: flush %d buffers %" PRIu64 " completed %" PRIu64 " extra_allocs %" PRIu64
            " bytes %" PRIu64 " dropped %zu\n",
            (int)fr, g_requested, g_completed, g_extra_allocs, g_bytes_valid, dropped);
    pthread_mutex_unlock(&g_pool_mu);
  }
}

// ---------------------------------------------------------------------------------------------- entry point
static void warn(const char* what, CUptiResult r) {
  const char* s = NULL;
  cuptiGetResultString(r, &s);
  fprintf(stderr, "floor_inject: %s: %s\n", what, s ? s : "?");
}

static void parse_kinds(void) {
  const char* env = getenv("FLOOR_KINDS");
  const char* spec = (env && *env) ? env : "10,5,4,1,22,2,38,39,17";
  const char* p = spec;
  while (*p && g_nkinds < MAX_ENABLE) {
    char* end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p || v <= 0 || v >= CUPTI_ACTIVITY_KIND_COUNT) {
      fprintf(stderr, "floor_inject: ignoring bad FLOOR_KINDS entry in '%s'\n", spec);
      while (*p && *p != ',') ++p;
    } else {
      g_kinds[g_nkinds++] = (int)v;
      p = end;
    }
    while (*p == ',' || *p == ' ') ++p;
  }
}

EXPORT int InitializeInjection(void) {
  static int done;
  if (done) return 1;
  done = 1;
  const char* c = getenv("FLOOR_COUNT");
  g_count = c && atoi(c) == 1;
  parse_kinds();

  long pool = 16;
  const char* ps = getenv("FLOOR_POOL");
  if (ps && *ps) pool = strtol(ps, NULL, 10);
  if (pool < 0) pool = 0;
  if (pool > FLOOR_FREE_MAX) pool = FLOOR_FREE_MAX;
  for (long i = 0; i < pool; ++i) {
    uint8_t* b = alloc_buffer();
    if (!b) break;
    memset(b, 0, FLOOR_BUF_SIZE);  // pre-fault: no page faults inside CUPTI later
    g_free[g_nfree++] = b;
  }
  g_pool_size = (uint64_t)g_nfree;

  CUptiResult r;
  const char* pt = getenv("FLOOR_PER_THREAD");
  if (pt && *pt) {
    uint8_t v = (uint8_t)(atoi(pt) != 0);
    size_t sz = sizeof v;
    r = cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, &sz, &v);
    if (r != CUPTI_SUCCESS) warn("PER_THREAD_ACTIVITY_BUFFER", r);
  }
  const char* db = getenv("FLOOR_DEVBUF");
  if (db && atoi(db) == 1) {
    size_t v = 3200000, sz = sizeof v;
    r = cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &sz, &v);
    if (r != CUPTI_SUCCESS) warn("DEVICE_BUFFER_SIZE", r);
    v = 20;
    r = cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT, &sz, &v);
    if (r != CUPTI_SUCCESS) warn("DEVICE_BUFFER_POOL_LIMIT", r);
  }
  r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) {
    warn("cuptiActivityRegisterCallbacks", r);
    return 0;
  }
  for (int i = 0; i < g_nkinds; ++i) {
    r = cuptiActivityEnable((CUpti_ActivityKind)g_kinds[i]);
    if (r != CUPTI_SUCCESS) {
      char what[64];
      snprintf(what, sizeof what, "cuptiActivityEnable(%d)", g_kinds[i]);
      warn(what, r);
      if (g_nenable_err < MAX_ENABLE) {
        g_enable_err_kind[g_nenable_err] = g_kinds[i];
        g_enable_err_code[g_nenable_err] = (int)r;
        g_nenable_err++;
      }
    }
  }
  atexit(at_exit);
  return 1;
}
