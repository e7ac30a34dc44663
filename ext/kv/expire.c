/*
** expire.c -- the engine's side of per-entry TTL: the thread that runs a
** store's sweeper passes, and the per-table sweep counters of kv_stats.
**
** The engine stores deadlines in value encodings (codec.c) and hides
** expired entries from reads (txn.c, iter.c); it does not know how to
** remove them, which takes the derived data of ext/ (indexes, counters,
** change streams).  So the pass itself is a callback that ext/ supplies
** (kv_engine_sweeper_start); this file gives it a thread with a start, a
** stop that joins, and no work after the stop.
**
** Lifetime.  The thread holds no reference on the store between passes:
** before a pass it takes one if the store is still open (kvEngineTryRef:
** refused once the last reference is gone), and drops it after.  So a
** store never closes while a pass runs, and the close (engFree, through
** KvEngine.xSweepStop) stops the sweeper first, before the tables flush
** and the WAL closes.  When the
** pass's own reference is the last one, the close runs on the sweeper
** thread itself: it then detaches the thread instead of joining it, and
** the thread frees its state as it leaves.
**
** Several processes: while a store is shared, a pass runs only in the
** process that holds the store's sweep lock (kvEngineWorkTurn), taken by
** the first sweeper to try and passed on when its process exits or dies.
**
** Locking: KvSweeper.mu guards bStop, bWake and bDetached; the engine
** mutex guards KvEngine.pSweep.  The counters are relaxed atomics.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <string.h>
#include <time.h>

struct KvSweeper {
  KvEngine *pEng;               /* no reference (see above) */
  KvSweepFn xPass;
  void *pArg;
  void (*xFree)(void*);
  int64_t iIntervalMs;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int bStop;                    /* mu */
  int bWake;                    /* mu: run a pass now */
  int bDetached;                /* mu: the thread frees itself */
};

static void sweepFree(KvSweeper *s){
  if( s->xFree ) s->xFree(s->pArg);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->mu);
  sqlite3_free(s);
}

/* Wait on s->cond (s->mu held) until iMs ms have passed, or a signal. */
static void sweepWait(KvSweeper *s, int64_t iMs){
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += (time_t)(iMs/1000);
  ts.tv_nsec += (long)(iMs%1000)*1000000L;
  if( ts.tv_nsec>=1000000000L ){ ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  pthread_cond_timedwait(&s->cond, &s->mu, &ts);
}

static void *sweepMain(void *pArg){
  KvSweeper *s = (KvSweeper*)pArg;
  pthread_mutex_lock(&s->mu);
  for(;;){
    if( !s->bStop && !s->bWake ) sweepWait(s, s->iIntervalMs);
    if( s->bStop ) break;
    s->bWake = 0;
    pthread_mutex_unlock(&s->mu);
    if( !kvEngineTryRef(s->pEng) ){      /* closing: stop() will join */
      pthread_mutex_lock(&s->mu);
      break;
    }
    /* A shared store: one process's sweeper at a time runs passes */
    if( kvEngineWorkTurn(s->pEng, KV_WORK_SWEEP) ) s->xPass(s->pEng, s->pArg);
    kv_engine_unref(s->pEng);            /* may close it, on this thread */
    pthread_mutex_lock(&s->mu);
    if( s->bDetached ){
      pthread_mutex_unlock(&s->mu);
      sweepFree(s);
      return 0;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static void sweepStop(KvEngine *pEng);

int kv_engine_sweeper_start(KvEngine *pEng, KvSweepFn xPass, void *pArg,
                            void (*xFree)(void*), int64_t iIntervalMs,
                            char **pzErr){
  KvSweeper *s;
  pthread_mutex_lock(&pEng->mutex);
  s = pEng->pSweep;
  pthread_mutex_unlock(&pEng->mutex);
  if( s ){
    if( xFree ) xFree(pArg);
    return SQLITE_OK;
  }
  if( iIntervalMs<1 ) iIntervalMs = 1;
  s = sqlite3_malloc64(sizeof(*s));
  if( s==0 ){
    if( xFree ) xFree(pArg);
    return SQLITE_NOMEM;
  }
  memset(s, 0, sizeof(*s));
  s->pEng = pEng;
  s->xPass = xPass;
  s->pArg = pArg;
  s->xFree = xFree;
  s->iIntervalMs = iIntervalMs;
  pthread_mutex_init(&s->mu, 0);
  pthread_cond_init(&s->cond, 0);
  pthread_mutex_lock(&pEng->mutex);
  if( pEng->pSweep ){                    /* another thread started one */
    pthread_mutex_unlock(&pEng->mutex);
    sweepFree(s);
    return SQLITE_OK;
  }
  if( pthread_create(&s->thread, 0, sweepMain, s)!=0 ){
    pthread_mutex_unlock(&pEng->mutex);
    sweepFree(s);
    *pzErr = sqlite3_mprintf("kv: cannot start the TTL sweeper thread");
    return SQLITE_ERROR;
  }
  pEng->pSweep = s;
  pEng->xSweepStop = sweepStop;
  pthread_mutex_unlock(&pEng->mutex);
  return SQLITE_OK;
}

int kv_engine_sweeper_running(KvEngine *pEng){
  int b;
  pthread_mutex_lock(&pEng->mutex);
  b = pEng->pSweep!=0;
  pthread_mutex_unlock(&pEng->mutex);
  return b;
}

void kv_engine_sweeper_wake(KvEngine *pEng){
  KvSweeper *s;
  pthread_mutex_lock(&pEng->mutex);
  s = pEng->pSweep;
  if( s ){
    pthread_mutex_lock(&s->mu);
    s->bWake = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&pEng->mutex);
}

/* KvEngine.xSweepStop: the store is closing. */
static void sweepStop(KvEngine *pEng){
  KvSweeper *s = pEng->pSweep;
  if( s==0 ) return;
  pEng->pSweep = 0;                      /* the store is closing: no lock */
  pthread_mutex_lock(&s->mu);
  if( pthread_equal(pthread_self(), s->thread) ){
    /* the pass's reference was the last: this is the sweeper thread */
    s->bDetached = 1;
    s->bStop = 1;
    pthread_detach(s->thread);
    pthread_mutex_unlock(&s->mu);
    return;
  }
  s->bStop = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, 0);
  sweepFree(s);
}

/* ------------------------------------------------------------ counters --- */

void kv_table_sweep_note(KvEngine *pEng, const char *zTab, int nTab,
                         int64_t nPass, int64_t nRows){
  KvTable *t;
  pthread_mutex_lock(&pEng->mutex);
  t = kvTableFind(pEng, zTab, nTab);
  if( t ){
    __atomic_add_fetch(&t->nSweepPass, nPass, __ATOMIC_RELAXED);
    __atomic_add_fetch(&t->nSwept, nRows, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&pEng->mutex);
}

int64_t kv_table_expired_count(KvEngine *pEng, const char *zTab, int nTab){
  KvIter *pIter = 0;
  KvMeta meta;
  char *zErr = 0;
  int64_t n = 0, iNow = kv_clock_ms();
  int bFound = 0, bTtl;
  if( kv_table_meta(pEng, 0, zTab, nTab, &meta, &bFound)!=SQLITE_OK ){
    bFound = 0;
  }
  bTtl = bFound && meta.zOptions && (strstr(meta.zOptions, "\"ttl_ms\"")
                                  || strstr(meta.zOptions, "\"deadline\""));
  kv_meta_clear(&meta);
  if( bTtl && kv_iter_open(pEng, 0, zTab, nTab, 0, 0, KV_ITER_WITH_EXPIRED,
                           &pIter, &zErr)==SQLITE_OK ){
    for(; !kv_iter_eof(pIter); kv_iter_next(pIter)){
      const KvMapEntry *e = kv_iter_current(pIter);
      n += kv_value_expired(e->aVal, e->nVal, iNow);
    }
  }
  kv_iter_close(pIter);
  sqlite3_free(zErr);
  return n;
}
