/*
** metrics.c -- the process-wide counters of the key-version protocol and
** of root transactions, read by the kv_metrics table (ext/kv_vfunc.c).
** Every update is one relaxed atomic add; reading takes a relaxed load of
** each counter and never touches a version map; no lock.  The per-table
** gauges (records, estimated bytes) are atomics of the version maps
** themselves (version.c), read through kv_engine_list().
*/
#include "config.h"
#include "ext/kv/engine_int.h"

static int64_t metCount[KV_METRIC_N];
static int64_t metRootCreated;
static int64_t metRootClosed;

void kv_metric_add(int i){
  __atomic_fetch_add(&metCount[i], 1, __ATOMIC_RELAXED);
}

void kvMetricRootCreated(void){
  __atomic_fetch_add(&metRootCreated, 1, __ATOMIC_RELAXED);
}

void kvMetricRootClosed(void){
  __atomic_fetch_add(&metRootClosed, 1, __ATOMIC_RELAXED);
}

void kv_metrics_read(int64_t *aOut){
  int i;
  for(i=0; i<KV_METRIC_N; i++){
    aOut[i] = __atomic_load_n(&metCount[i], __ATOMIC_RELAXED);
  }
  aOut[KV_METRIC_N] = __atomic_load_n(&metRootCreated, __ATOMIC_RELAXED);
  aOut[KV_METRIC_N+1] = __atomic_load_n(&metRootClosed, __ATOMIC_RELAXED);
}
