/*
** kv_watch.c -- watch subscriptions of ext/depot_kv.h: the changes
** committed to a KV table (or a key range of it), delivered after each
** commit, in commit order, into a bounded ring per subscriber, read with a
** blocking call or through an eventfd.
**
** A watch is an engine write hook (ext/kv/kv.h "hooks") whose xWrite
** copies each change of its range into its ring: the hook runs after the
** commit is durable and published, one call at a time per store, in
** commit order, so the ring's order is the commit order.  xWrite never
** waits for the reader: when the ring is full it drops the oldest event
** and counts it, so a slow subscriber costs a writer one copy per change
** and never blocks it.  Each event gets the next sequence number of the
** watch when it is queued, dropped ones included; the reader learns the
** exact number it lost before an event as the gap in those numbers.
**
** Locking: depot_kv_watch.mu guards the ring, the counters and the
** eventfd's count; cond wakes a blocked reader.  The eventfd holds 1
** while the ring is not empty and 0 when it is (written and read under
** mu).  The reader's current event (cur, its decoded datums) belongs to
** the single reading thread.  The struct is freed by the hook's xDestroy,
** once no callback runs or will run.
*/
#include "config.h"
#include "ext/depot_kv.h"
#include "ext/kv_sql.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define WATCH_MAX_CAPACITY (1<<20)

/* One queued change: key, old and new value bytes in one allocation. */
typedef struct WatchEv WatchEv;
struct WatchEv {
  sqlite3_uint64 iSeq;
  uint8_t *a;                   /* key || old || new */
  int nKey;
  int nOld;                     /* -1: no old value */
  int nNew;                     /* -1: a delete */
};

struct depot_kv_watch {
  KvHook *pHook;
  int bOld;                     /* DEPOT_KV_WATCH_OLD_VALUE */
  KvBuf lo, hi;                 /* inclusive bounds (encoded), bLo/bHi */
  int bLo, bHi;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int fd;                       /* eventfd */
  int bSignalled;               /* mu: the eventfd holds 1 */
  int nCap;
  int iHead, nEv;               /* mu: the ring */
  WatchEv *aRing;
  sqlite3_uint64 iNextSeq;      /* mu: the sequence of the next event */
  sqlite3_uint64 nLost;         /* mu: events dropped so far */
  int bRemoved;                 /* mu: the table was removed */
  /* the reader's */
  sqlite3_uint64 iLastSeq;      /* the last event returned */
  WatchEv cur;
  KvDatum dKey, dOld, dNew;
  depot_kv_event ev;
  depot_kv_value vOld, vNew;
};

static int watchCmp(const uint8_t *a, int na, const uint8_t *b, int nb){
  int c = memcmp(a, b, (size_t)(na<nb ? na : nb));
  return c ? c : na - nb;
}

static void watchSignal(depot_kv_watch *w, int bOn){
  uint64_t u = 1;
  ssize_t n;
  if( bOn==w->bSignalled ) return;
  n = bOn ? write(w->fd, &u, sizeof(u)) : read(w->fd, &u, sizeof(u));
  (void)n;
  w->bSignalled = bOn;
}

/* ------------------------------------------------------- the hook --- */

static void watchWrite(void *pArg, const uint8_t *aKey, int nKey,
                       const uint8_t *aOld, int nOld,
                       const uint8_t *aNew, int nNew){
  depot_kv_watch *w = (depot_kv_watch*)pArg;
  WatchEv e;
  size_t nAll;
  if( w->bLo && watchCmp(aKey, nKey, w->lo.a, w->lo.n)<0 ) return;
  if( w->bHi && watchCmp(aKey, nKey, w->hi.a, w->hi.n)>0 ) return;
  memset(&e, 0, sizeof(e));
  e.nKey = nKey;
  e.nOld = aOld ? nOld : -1;
  e.nNew = aNew ? nNew : -1;
  nAll = (size_t)nKey + (aOld ? nOld : 0) + (aNew ? nNew : 0);
  e.a = sqlite3_malloc64(nAll ? nAll : 1);
  pthread_mutex_lock(&w->mu);
  e.iSeq = ++w->iNextSeq;
  if( e.a==0 ){
    /* no memory for it: it counts as lost, exactly like a dropped one */
    w->nLost++;
    pthread_mutex_unlock(&w->mu);
    sqlite3_log(SQLITE_NOMEM, "depot_kv_watch: an event was lost (no memory)");
    return;
  }
  memcpy(e.a, aKey, (size_t)nKey);
  if( aOld ) memcpy(e.a+nKey, aOld, (size_t)nOld);
  if( aNew ) memcpy(e.a+nKey+(aOld ? nOld : 0), aNew, (size_t)nNew);
  if( w->nEv==w->nCap ){                 /* full: drop the oldest */
    sqlite3_free(w->aRing[w->iHead].a);
    w->iHead = (w->iHead+1) % w->nCap;
    w->nEv--;
    w->nLost++;
  }
  w->aRing[(w->iHead + w->nEv) % w->nCap] = e;
  w->nEv++;
  watchSignal(w, 1);
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->mu);
}

static void watchRemoved(void *pArg){
  depot_kv_watch *w = (depot_kv_watch*)pArg;
  pthread_mutex_lock(&w->mu);
  w->bRemoved = 1;
  watchSignal(w, 1);
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->mu);
}

static void watchReaderClear(depot_kv_watch *w){
  kv_datum_clear(&w->dKey);
  kv_datum_clear(&w->dOld);
  kv_datum_clear(&w->dNew);
  sqlite3_free(w->cur.a);
  memset(&w->cur, 0, sizeof(w->cur));
}

static void watchDestroy(void *pArg){
  depot_kv_watch *w = (depot_kv_watch*)pArg;
  while( w->nEv>0 ){
    sqlite3_free(w->aRing[w->iHead].a);
    w->iHead = (w->iHead+1) % w->nCap;
    w->nEv--;
  }
  watchReaderClear(w);
  sqlite3_free(w->aRing);
  kv_buf_free(&w->lo);
  kv_buf_free(&w->hi);
  if( w->fd>=0 ) close(w->fd);
  pthread_cond_destroy(&w->cond);
  pthread_mutex_destroy(&w->mu);
  sqlite3_free(w);
}

/* ---------------------------------------------------------- opening --- */

static int watchBound(const depot_kv_value *v, KvBuf *pOut, int *pb,
                      char **pzErr){
  int rc;
  if( v==0 ) return SQLITE_OK;
  if( v->eType==SQLITE_NULL ){
    *pzErr = sqlite3_mprintf("depot_kv_watch_open: a bound must not be "
                             "NULL (pass a NULL pointer for no bound)");
    return SQLITE_MISUSE;
  }
  rc = kv_key_encode_c(v->eType, v->i, v->r, v->p, v->n, pOut, pzErr);
  if( rc==SQLITE_OK ) *pb = 1;
  return rc;
}

static int watchOpen(sqlite3 *db, const char *zSchema, const char *zTable,
                     const depot_kv_value *pLo, const depot_kv_value *pHi,
                     unsigned flags, int nCap, depot_kv_watch **ppWatch,
                     char **pzErr){
  static const KvHookMethods m = { watchWrite, 0, watchRemoved, watchDestroy };
  KvEngine *pEng = 0;
  char *zKvTab = 0;
  depot_kv_watch *w = 0;
  int rc;
  if( ppWatch==0 || db==0 || zTable==0 ){
    *pzErr = sqlite3_mprintf("depot_kv_watch_open: db, zTable and ppWatch "
                             "must not be NULL");
    return SQLITE_MISUSE;
  }
  *ppWatch = 0;
  if( flags & ~(unsigned)DEPOT_KV_WATCH_OLD_VALUE ){
    *pzErr = sqlite3_mprintf("depot_kv_watch_open: unknown flag bits "
                             "(allowed: DEPOT_KV_WATCH_OLD_VALUE)");
    return SQLITE_MISUSE;
  }
  if( nCap<1 || nCap>WATCH_MAX_CAPACITY ){
    *pzErr = sqlite3_mprintf("depot_kv_watch_open: capacity must be 1..%d "
                             "events, got %d", WATCH_MAX_CAPACITY, nCap);
    return SQLITE_MISUSE;
  }
  if( kv_hook_active() ){
    *pzErr = sqlite3_mprintf("depot_kv_watch_open: called from inside a "
                             "hook callback");
    return SQLITE_MISUSE;
  }
  if( (w = sqlite3_malloc64(sizeof(*w)))==0 ) return SQLITE_NOMEM;
  memset(w, 0, sizeof(*w));
  w->fd = -1;
  w->nCap = nCap;
  w->bOld = (flags & DEPOT_KV_WATCH_OLD_VALUE)!=0;
  pthread_mutex_init(&w->mu, 0);
  pthread_cond_init(&w->cond, 0);
  rc = watchBound(pLo, &w->lo, &w->bLo, pzErr);
  if( rc==SQLITE_OK ) rc = watchBound(pHi, &w->hi, &w->bHi, pzErr);
  if( rc==SQLITE_OK
   && (w->aRing = sqlite3_malloc64((size_t)nCap*sizeof(WatchEv)))==0 ){
    rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK
   && (w->fd = eventfd(0, EFD_NONBLOCK|EFD_CLOEXEC))<0 ){
    *pzErr = sqlite3_mprintf("depot_kv_watch_open: eventfd: %s",
                             strerror(errno));
    rc = SQLITE_CANTOPEN;
  }
  if( rc==SQLITE_OK ){
    sqlite3_mutex_enter(sqlite3_db_mutex(db));
    rc = kv_hook_resolve(db, "depot_kv_watch_open", zSchema, zTable, &pEng,
                         &zKvTab, pzErr);
    sqlite3_mutex_leave(sqlite3_db_mutex(db));
  }
  if( rc==SQLITE_OK ){
    rc = kv_hook_register(pEng, zKvTab, -1, KV_HOOK_NEEDS_WRITE
                          | (w->bOld ? KV_HOOK_NEEDS_OLD_VALUE : 0),
                          &m, w, &w->pHook, pzErr);
  }
  if( rc==SQLITE_OK ){
    *ppWatch = w;
  }else{
    watchDestroy(w);                     /* not registered: no xDestroy */
  }
  sqlite3_free(zKvTab);
  kv_engine_unref(pEng);                 /* the hook holds its own */
  return rc;
}

int depot_kv_watch_open(sqlite3 *db, const char *zSchema, const char *zTable,
                        const depot_kv_value *pLo, const depot_kv_value *pHi,
                        unsigned flags, int nCapacity,
                        depot_kv_watch **ppWatch, char **pzErr){
  char *zErr = 0;
  int rc = watchOpen(db, zSchema, zTable, pLo, pHi, flags, nCapacity,
                     ppWatch, &zErr);
  if( pzErr ) *pzErr = zErr; else sqlite3_free(zErr);
  return rc;
}

/* ---------------------------------------------------------- reading --- */

/* Wait (w->mu held) for an event, the removal of the table, or the end
** of msTimeout (negative: no end). */
static void watchWait(depot_kv_watch *w, int msTimeout){
  struct timespec ts;
  if( msTimeout<0 ){
    while( w->nEv==0 && !w->bRemoved ) pthread_cond_wait(&w->cond, &w->mu);
    return;
  }
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += msTimeout/1000;
  ts.tv_nsec += (long)(msTimeout%1000)*1000000L;
  if( ts.tv_nsec>=1000000000L ){ ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  while( w->nEv==0 && !w->bRemoved ){
    if( pthread_cond_timedwait(&w->cond, &w->mu, &ts)==ETIMEDOUT ) break;
  }
}

static void watchValue(const KvDatum *d, depot_kv_value *v){
  memset(v, 0, sizeof(*v));
  v->eType = d->eType;
  v->i = d->i;
  v->r = d->r;
  v->p = d->z;
  v->n = d->n;
}

/* Decode w->cur into w->ev. */
static int watchDecode(depot_kv_watch *w){
  const WatchEv *e = &w->cur;
  const uint8_t *aOld = e->a + e->nKey;
  const uint8_t *aNew = aOld + (e->nOld>0 ? e->nOld : 0);
  int rc;
  memset(&w->ev, 0, sizeof(w->ev));
  rc = e->nNew>=0 ? kv_key_decode(e->a, e->nKey, aNew, e->nNew, &w->dKey)
     : kv_key_decode(e->a, e->nKey, aOld, e->nOld>0 ? e->nOld : 0, &w->dKey);
  if( rc==SQLITE_OK && e->nOld>=0 ) rc = kv_value_decode(aOld, e->nOld,
                                                         &w->dOld);
  if( rc==SQLITE_OK && e->nNew>=0 ) rc = kv_value_decode(aNew, e->nNew,
                                                         &w->dNew);
  if( rc!=SQLITE_OK ) return rc;
  w->ev.iSeq = e->iSeq;
  w->ev.nLost = e->iSeq - w->iLastSeq - 1;
  watchValue(&w->dKey, &w->ev.key);
  if( e->nOld>=0 ){ watchValue(&w->dOld, &w->vOld); w->ev.pOld = &w->vOld; }
  if( e->nNew>=0 ){ watchValue(&w->dNew, &w->vNew); w->ev.pNew = &w->vNew; }
  return SQLITE_OK;
}

int depot_kv_watch_next(depot_kv_watch *w, int msTimeout,
                        const depot_kv_event **ppEvent){
  int rc;
  if( w==0 || ppEvent==0 ) return SQLITE_MISUSE;
  *ppEvent = 0;
  watchReaderClear(w);
  pthread_mutex_lock(&w->mu);
  if( msTimeout!=0 ) watchWait(w, msTimeout);
  if( w->nEv==0 ){
    rc = w->bRemoved ? SQLITE_ABORT : SQLITE_DONE;
    pthread_mutex_unlock(&w->mu);
    return rc;
  }
  w->cur = w->aRing[w->iHead];
  w->iHead = (w->iHead+1) % w->nCap;
  w->nEv--;
  if( w->nEv==0 && !w->bRemoved ) watchSignal(w, 0);
  pthread_mutex_unlock(&w->mu);
  rc = watchDecode(w);
  w->iLastSeq = w->cur.iSeq;
  if( rc!=SQLITE_OK ) return rc;
  *ppEvent = &w->ev;
  return SQLITE_ROW;
}

int depot_kv_watch_fd(depot_kv_watch *w){
  return w ? w->fd : -1;
}

sqlite3_uint64 depot_kv_watch_lost(depot_kv_watch *w){
  sqlite3_uint64 n;
  if( w==0 ) return 0;
  pthread_mutex_lock(&w->mu);
  n = w->nLost;
  pthread_mutex_unlock(&w->mu);
  return n;
}

void depot_kv_watch_close(depot_kv_watch *w){
  /* w is freed by watchDestroy, when the engine's hook is */
  if( w ) kv_hook_unregister(w->pHook);
}
