/*
** check_hooks.c -- the "hooks" suite: write hooks of the KV engine
** (kv_hook_register, ext/kv/hook.c) on each table type (kv_memory,
** kv_btree, kv_log).
**
** xWrite gets every mutation of committed roots with the right old and
** new values and nothing of rolled-back or failed ones; concurrent
** committers are delivered in commit order; a callback reads and writes
** the store without deadlocking; xInit runs once per live key after a
** crash (SIGKILL) and WAL replay, so an additive counter kept by
** xInit+xWrite equals the true sum, also while writers run during the
** registration; the flags; the table's removal; unregistering; an
** anonymous store; bad input.
** Run under ThreadSanitizer too.
*/
#include "config.h"
#include "tests/check/harness.h"
#define SQLITE_CORE 1            /* the ext/ headers, linked directly */
#include "ext/kv/kv.h"
#include "ext/kv/kv_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The table types (loop index). */
static const char *const azType[] = { "kv_memory", "kv_btree", "kv_log" };
#define N_TYPE 3

/* Check's ck_assert records every passing assertion; these call into
** Check only when they fail (callbacks run many times). */
#define T_ASSERT(c) do{ if( !(c) ){ \
  ck_abort_msg("%s:%d: assertion '%s' failed", __FILE__, __LINE__, #c); } \
}while(0)
#define T_EQ(a, b) do{ long long x_ = (long long)(a), y_ = (long long)(b); \
  if( x_!=y_ ){ ck_abort_msg("%s:%d: %s == %s failed: %lld != %lld", \
                 __FILE__, __LINE__, #a, #b, x_, y_); } \
}while(0)

/* -------------------------------------------------------- encodings --- */

/* The key encoding of integer k (kv_key_append_int). */
static void hk_key(int64_t k, KvBuf *p){
  kv_buf_reset(p);
  T_EQ(kv_key_append_int(p, k), SQLITE_OK);
}

/* The integer of a key made by hk_key (|k| < 2^53: a number key whose
** double image is exact). */
static int64_t hk_key_int(const uint8_t *a, int n){
  uint64_t u = 0;
  double r;
  int i;
  T_ASSERT(n==10 && a[0]==0x10 && a[9]==0x00);
  for(i=1; i<=8; i++) u = (u<<8) | a[i];
  u = (u>>63) ? (u & ~((uint64_t)1<<63)) : ~u;
  memcpy(&r, &u, 8);
  return (int64_t)r;
}

/* The value encoding of integer v under an integer key: kind 1, tag
** 0x09, 8 bytes big-endian. */
static void hk_val(int64_t v, uint8_t *a){
  int i;
  a[0] = 1;
  a[1] = 0x09;
  for(i=0; i<8; i++) a[2+i] = (uint8_t)((uint64_t)v >> (8*(7-i)));
}
static int64_t hk_val_int(const uint8_t *a, int n){
  uint64_t u = 0;
  int i;
  T_ASSERT(n==10 && a[0]==1 && a[1]==0x09);
  for(i=0; i<8; i++) u = (u<<8) | a[2+i];
  return (int64_t)u;
}

/* ---------------------------------------------------------- helpers --- */

static KvEngine *hk_open(const char *zDir){
  KvEngine *pEng = 0;
  char *zErr = 0;
  int rc = kv_engine_open(zDir, &pEng, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "open %s: %s", zDir, zErr ? zErr : "");
  return pEng;
}

/* Create persistent table zTab of type azType[iType] (if missing). */
static void hk_create(KvEngine *pEng, const char *zTab, int iType){
  KvRoot *r = 0;
  char *zErr = 0;
  int bNew = 0, rc;
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  rc = kv_create_table(r, zTab, (int)strlen(zTab), azType[iType], 1, 0,
                       &bNew, &zErr);
  if( rc==SQLITE_OK ) rc = kv_root_commit(r, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "create %s: %s", zTab, zErr ? zErr : "");
  kv_root_free(r);
}

static void hk_remove(KvEngine *pEng, const char *zTab){
  KvRoot *r = 0;
  char *zErr = 0;
  int rc;
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  rc = kv_remove_table(r, zTab, (int)strlen(zTab), &zErr);
  if( rc==SQLITE_OK ) rc = kv_root_commit(r, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "remove %s: %s", zTab, zErr ? zErr : "");
  kv_root_free(r);
}

/* Stage k=v (bDel: delete k) in root r. */
static int hk_stage(KvRoot *r, const char *zTab, int64_t k, int64_t v,
                    int bDel){
  KvBuf key = {0, 0, 0};
  uint8_t aVal[10];
  char *zErr = 0;
  int rc;
  hk_key(k, &key);
  hk_val(v, aVal);
  rc = bDel ? kv_del(r, zTab, (int)strlen(zTab), key.a, key.n, &zErr)
            : kv_put(r, zTab, (int)strlen(zTab), key.a, key.n, aVal, 10,
                     &zErr);
  sqlite3_free(zErr);
  kv_buf_free(&key);
  return rc;
}

/* One committed root writing k=v (or deleting k). */
static void hk_write(KvEngine *pEng, const char *zTab, int64_t k, int64_t v,
                     int bDel){
  KvRoot *r = 0;
  char *zErr = 0;
  int rc;
  T_EQ(kv_root_begin(pEng, &r), SQLITE_OK);
  rc = hk_stage(r, zTab, k, v, bDel);
  if( rc==SQLITE_OK ) rc = kv_root_commit(r, &zErr);
  if( rc!=SQLITE_OK ) ck_abort_msg("write %lld: %s", (long long)k, zErr);
  kv_root_free(r);
}

/* The committed value of k (*pbFound). */
static int64_t hk_get(KvEngine *pEng, const char *zTab, int64_t k,
                      int *pbFound){
  KvBuf key = {0, 0, 0}, val = {0, 0, 0};
  char *zErr = 0;
  int64_t v = 0;
  hk_key(k, &key);
  if( kv_get(pEng, 0, zTab, (int)strlen(zTab), key.a, key.n, &val, pbFound,
             &zErr)!=SQLITE_OK ){
    ck_abort_msg("get: %s", zErr);
  }
  if( *pbFound ) v = hk_val_int(val.a, val.n);
  kv_buf_free(&key);
  kv_buf_free(&val);
  return v;
}

/* Sum and count of the committed rows of zTab (a scan). */
static void hk_scan(KvEngine *pEng, const char *zTab, int64_t *pSum,
                    int64_t *pnRow){
  KvIter *it = 0;
  char *zErr = 0;
  *pSum = 0; *pnRow = 0;
  if( kv_iter_open(pEng, 0, zTab, (int)strlen(zTab), 0, 0, 0, &it, &zErr) ){
    ck_abort_msg("scan: %s", zErr);
  }
  for(; !kv_iter_eof(it); kv_iter_next(it)){
    KvMapEntry e;
    kv_iter_entry(it, &e);
    *pSum += hk_val_int(e.aVal, e.nVal);
    (*pnRow)++;
  }
  T_EQ(kv_iter_error(it, &zErr), SQLITE_OK);
  kv_iter_close(it);
}

/* ------------------------------------------------------- recorder --- */

/* A hook that records what it is told.  Callbacks of one store are made
** one at a time, but on different threads: the mutex orders them for the
** test's own reads. */
#define HK_MAX 4096
typedef struct HkEvent HkEvent;
struct HkEvent { int eKind; int64_t k; int bOld; int64_t old; int bNew;
                 int64_t nw; };
#define HK_WRITE 1
#define HK_INIT  2
#define HK_REMOVED 3
typedef struct HkRec HkRec;
struct HkRec {
  pthread_mutex_t mutex;
  int n;
  HkEvent a[HK_MAX];
  KvEngine *pEng;               /* for reads from the callback */
  const char *zTab;
};

static HkRec *hk_rec_new(KvEngine *pEng, const char *zTab){
  HkRec *p = calloc(1, sizeof(*p));
  pthread_mutex_init(&p->mutex, 0);
  p->pEng = pEng;
  p->zTab = zTab;
  return p;
}
static void hk_rec_free(HkRec *p){
  pthread_mutex_destroy(&p->mutex);
  free(p);
}
static void hk_rec_add(HkRec *p, int eKind, const uint8_t *aKey, int nKey,
                       const uint8_t *aOld, int nOld, const uint8_t *aNew,
                       int nNew){
  HkEvent *e;
  pthread_mutex_lock(&p->mutex);
  T_ASSERT(p->n<HK_MAX);
  e = &p->a[p->n++];
  memset(e, 0, sizeof(*e));
  e->eKind = eKind;
  if( aKey ) e->k = hk_key_int(aKey, nKey);
  if( aOld ){ e->bOld = 1; e->old = hk_val_int(aOld, nOld); }
  if( aNew ){ e->bNew = 1; e->nw = hk_val_int(aNew, nNew); }
  pthread_mutex_unlock(&p->mutex);
}
static void hk_rec_write(void *pArg, const uint8_t *aKey, int nKey,
                         const uint8_t *aOld, int nOld, const uint8_t *aNew,
                         int nNew){
  hk_rec_add((HkRec*)pArg, HK_WRITE, aKey, nKey, aOld, nOld, aNew, nNew);
}
static void hk_rec_init(void *pArg, const uint8_t *aKey, int nKey,
                        const uint8_t *aVal, int nVal){
  hk_rec_add((HkRec*)pArg, HK_INIT, aKey, nKey, 0, 0, aVal, nVal);
}
static void hk_rec_removed(void *pArg){
  hk_rec_add((HkRec*)pArg, HK_REMOVED, 0, 0, 0, 0, 0, 0);
}
static const KvHookMethods hkRecMethods = {
  hk_rec_write, hk_rec_init, hk_rec_removed, 0
};

static int hk_rec_count(HkRec *p){
  int n;
  pthread_mutex_lock(&p->mutex);
  n = p->n;
  pthread_mutex_unlock(&p->mutex);
  return n;
}

/* Event i is eKind on k with old (bOld) and new (bNew) as given. */
static void hk_expect(HkRec *p, int i, int eKind, int64_t k, int bOld,
                      int64_t old, int bNew, int64_t nw){
  HkEvent *e;
  pthread_mutex_lock(&p->mutex);
  ck_assert_msg(i<p->n, "event %d missing (%d events)", i, p->n);
  e = &p->a[i];
  ck_assert_msg(e->eKind==eKind && e->k==k && e->bOld==bOld
                && (!bOld || e->old==old) && e->bNew==bNew
                && (!bNew || e->nw==nw),
                "event %d: kind %d key %lld old %d/%lld new %d/%lld; want "
                "kind %d key %lld old %d/%lld new %d/%lld", i, e->eKind,
                (long long)e->k, e->bOld, (long long)e->old, e->bNew,
                (long long)e->nw, eKind, (long long)k, bOld, (long long)old,
                bNew, (long long)nw);
  pthread_mutex_unlock(&p->mutex);
}

static KvHook *hk_register(KvEngine *pEng, const char *zTab, int flags,
                           const KvHookMethods *pM, void *pArg){
  KvHook *h = 0;
  char *zErr = 0;
  int rc = kv_hook_register(pEng, zTab, -1, flags, pM, pArg, &h, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "register: %s", zErr ? zErr : "");
  return h;
}

#define HK_ALL (KV_HOOK_NEEDS_OLD_VALUE|KV_HOOK_NEEDS_INIT|KV_HOOK_NEEDS_WRITE)
#define HK_WO  (KV_HOOK_NEEDS_OLD_VALUE|KV_HOOK_NEEDS_WRITE)

/* ----------------------------------------------------------- writes --- */

/* Inserts, an update and a delete of committed roots reach xWrite with
** their old and new values; rolled-back roots (before and after their
** prepare made the WAL record durable) and a root that lost a conflict
** reach nothing. */
START_TEST(test_hooks_write_sees_each_committed_mutation_and_no_rollback){
  char *zDir = th_tmpdir("hooks-write");
  KvEngine *pEng = hk_open(zDir);
  KvRoot *r = 0, *r2 = 0;
  char *zErr = 0;
  HkRec *p;
  KvHook *h;
  int bFound;
  hk_create(pEng, "t", _i);
  p = hk_rec_new(pEng, "t");
  h = hk_register(pEng, "t", HK_WO, &hkRecMethods, p);
  /* insert two keys in one root */
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 2, 20, 0), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 1, 10, 0), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  ck_assert_int_eq(hk_rec_count(p), 2);       /* delivered on return */
  /* update one, delete the other */
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 1, 11, 0), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 2, 0, 1), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  /* rolled back while active */
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 3, 30, 0), SQLITE_OK);
  kv_root_rollback(r);
  kv_root_free(r);
  /* rolled back after its prepare (record durable, then withdrawn) */
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 4, 40, 0), SQLITE_OK);
  ck_assert_int_eq(kv_root_prepare(r, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_rollback_err(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  /* a conflict: r read key 1, r2 wrote it first */
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(kv_root_begin(pEng, &r2), SQLITE_OK);
  {
    KvBuf key = {0, 0, 0}, val = {0, 0, 0};
    hk_key(1, &key);
    ck_assert_int_eq(kv_get(pEng, r, "t", 1, key.a, key.n, &val, &bFound,
                            &zErr), SQLITE_OK);
    kv_buf_free(&key);
    kv_buf_free(&val);
  }
  ck_assert_int_eq(hk_stage(r, "t", 5, 50, 0), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r2, "t", 1, 12, 0), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r2, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_BUSY_SNAPSHOT);
  sqlite3_free(zErr);
  kv_root_free(r);
  kv_root_free(r2);
  /* in key order within a commit, commits in order */
  ck_assert_int_eq(hk_rec_count(p), 5);
  hk_expect(p, 0, HK_WRITE, 1, 0, 0, 1, 10);
  hk_expect(p, 1, HK_WRITE, 2, 0, 0, 1, 20);
  hk_expect(p, 2, HK_WRITE, 1, 1, 10, 1, 11);
  hk_expect(p, 3, HK_WRITE, 2, 1, 20, 0, 0);
  hk_expect(p, 4, HK_WRITE, 1, 1, 11, 1, 12);
  ck_assert_int_eq(hk_get(pEng, "t", 3, &bFound), 0);
  ck_assert_int_eq(bFound, 0);
  kv_hook_unregister(h);
  kv_engine_unref(pEng);
  hk_rec_free(p);
  sqlite3_free(zDir);
}
END_TEST

/* A publication that fails after the WAL flush (the store stops) and a
** WAL flush that fails (the prepare fails) call no hook. */
/* Wait (up to 10 s) until table zTab's collector has nothing left to do:
** no record unconfirmed, no entry outside its data file.  A fault armed
** afterwards then meets the next commit, not a collector pass. */
static int hk_idle_one(void *pCtx, const char *zName, const char *zType,
                       const KvBackendStats *pSt){
  (void)zType;
  if( strcmp(zName, (const char*)pCtx)==0
   && (pSt->nPending>0 || pSt->nOverlay>0) ) return SQLITE_BUSY;
  return SQLITE_OK;
}
static void hk_wait_idle(KvEngine *pEng, const char *zTab){
  int i;
  for(i=0; i<1000; i++){
    if( kv_engine_table_stats(pEng, 0, hk_idle_one, (void*)zTab)==SQLITE_OK ){
      return;
    }
    usleep(10000);
  }
  ck_abort_msg("the collector of %s stays busy", zTab);
}

START_TEST(test_hooks_failed_flush_or_publication_calls_no_hook){
  char *zDir = th_tmpdir("hooks-fail");
  WalFault *f = wal_fault_new(wal_io_posix());
  KvEngine *pEng;
  KvRoot *r = 0;
  char *zErr = 0;
  HkRec *p;
  KvHook *h;
  int rc;
  kv_engine_test_io(wal_fault_io(f));
  pEng = hk_open(zDir);
  hk_create(pEng, "t", _i);
  p = hk_rec_new(pEng, "t");
  h = hk_register(pEng, "t", HK_WO, &hkRecMethods, p);
  hk_write(pEng, "t", 1, 10, 0);
  ck_assert_int_eq(hk_rec_count(p), 1);
  hk_wait_idle(pEng, "t");
  /* the WAL's fsync fails: the prepare fails, nothing is published */
  wal_fault_arm(f, WAL_FAULT_FSYNC, 1, 5 /* EIO */, 0);
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 2, 20, 0), SQLITE_OK);
  rc = kv_root_commit(r, &zErr);
  sqlite3_free(zErr); zErr = 0;
  kv_root_free(r);
  wal_fault_arm(f, WAL_FAULT_FSYNC, 0, 0, 0);
  /* (the collector was idle, but a background flush may still take the
  ** fault: then the commit stands and is delivered) */
  if( _i==0 ) ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_int_eq(hk_rec_count(p), rc==SQLITE_OK ? 2 : 1);
  if( rc==SQLITE_OK ) hk_expect(p, 1, HK_WRITE, 2, 0, 0, 1, 20);
  /* the publication fails: the store stops, no hook runs */
  kv_engine_test_fail_apply(1);
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 3, 30, 0), SQLITE_OK);
  ck_assert_int_ne(kv_root_commit(r, &zErr), SQLITE_OK);
  sqlite3_free(zErr); zErr = 0;
  kv_root_free(r);
  ck_assert_int_eq(hk_rec_count(p), rc==SQLITE_OK ? 2 : 1);
  hk_expect(p, 0, HK_WRITE, 1, 0, 0, 1, 10);
  kv_hook_unregister(h);
  kv_engine_unref(pEng);
  kv_engine_test_io(0);
  wal_fault_free(f);
  hk_rec_free(p);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ order --- */

#define ORD_THREADS 4
#define ORD_ROUNDS  60

typedef struct OrdState OrdState;
struct OrdState {
  KvEngine *pEng;
  pthread_mutex_t mutex;
  int64_t iLast;                /* counter value last delivered */
  int nBad;                     /* deliveries out of order */
  int nLate;                    /* commits returned before delivery */
};

/* Key 0 is a counter every commit increments: commit order is the order
** of its values, so xWrite must see 1, 2, 3, ... each with old = new-1. */
static void ord_write(void *pArg, const uint8_t *aKey, int nKey,
                      const uint8_t *aOld, int nOld, const uint8_t *aNew,
                      int nNew){
  OrdState *s = (OrdState*)pArg;
  int64_t nw;
  if( hk_key_int(aKey, nKey)!=0 ) return;
  nw = hk_val_int(aNew, nNew);
  pthread_mutex_lock(&s->mutex);
  if( nw!=s->iLast+1 ) s->nBad++;
  if( nw>1 && (aOld==0 || hk_val_int(aOld, nOld)!=nw-1) ) s->nBad++;
  s->iLast = nw;
  pthread_mutex_unlock(&s->mutex);
}

static void *ord_thread(void *pArg){
  OrdState *s = (OrdState*)pArg;
  int i;
  for(i=0; i<ORD_ROUNDS; i++){
    for(;;){
      KvRoot *r = 0;
      KvBuf key = {0, 0, 0}, val = {0, 0, 0};
      char *zErr = 0;
      int bFound = 0, rc;
      int64_t v = 0;
      T_EQ(kv_root_begin(s->pEng, &r), SQLITE_OK);
      hk_key(0, &key);
      rc = kv_get(s->pEng, r, "t", 1, key.a, key.n, &val, &bFound, &zErr);
      if( rc==SQLITE_OK && bFound ) v = hk_val_int(val.a, val.n);
      if( rc==SQLITE_OK ) rc = hk_stage(r, "t", 0, v+1, 0);
      if( rc==SQLITE_OK ) rc = hk_stage(r, "t", 1000+i, v+1, 0);
      if( rc==SQLITE_OK ) rc = kv_root_commit(r, &zErr);
      kv_root_free(r);
      kv_buf_free(&key);
      kv_buf_free(&val);
      sqlite3_free(zErr);
      if( rc==SQLITE_BUSY_SNAPSHOT ) continue;
      T_EQ(rc, SQLITE_OK);
      pthread_mutex_lock(&s->mutex);
      if( s->iLast<v+1 ) s->nLate++;
      pthread_mutex_unlock(&s->mutex);
      break;
    }
  }
  return 0;
}

/* Threads committing at the same time: xWrite sees the commits in commit
** order, and each kv_root_commit returns after its own delivery. */
START_TEST(test_hooks_concurrent_committers_are_delivered_in_commit_order){
  char *zDir = th_tmpdir("hooks-order");
  pthread_t aThr[ORD_THREADS];
  OrdState s;
  KvHook *h;
  static const KvHookMethods m = { ord_write, 0, 0, 0 };
  int i;
  memset(&s, 0, sizeof(s));
  pthread_mutex_init(&s.mutex, 0);
  s.pEng = hk_open(zDir);
  hk_create(s.pEng, "t", _i);
  h = hk_register(s.pEng, "t", HK_WO, &m, &s);
  for(i=0; i<ORD_THREADS; i++){
    ck_assert_int_eq(pthread_create(&aThr[i], 0, ord_thread, &s), 0);
  }
  for(i=0; i<ORD_THREADS; i++) pthread_join(aThr[i], 0);
  ck_assert_int_eq(s.nBad, 0);
  ck_assert_int_eq(s.nLate, 0);
  ck_assert_int_eq(s.iLast, ORD_THREADS*ORD_ROUNDS);
  kv_hook_unregister(h);
  kv_engine_unref(s.pEng);
  pthread_mutex_destroy(&s.mutex);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------- reentrancy --- */

typedef struct ReState ReState;
struct ReState {
  KvEngine *pEng;
  int nCall, nBad;
  int64_t nRowSeen;
};

/* Reads the key and scans the table from inside the callback: it sees the
** commit being delivered (one writer: exactly it). */
static void re_write(void *pArg, const uint8_t *aKey, int nKey,
                     const uint8_t *aOld, int nOld, const uint8_t *aNew,
                     int nNew){
  ReState *s = (ReState*)pArg;
  int64_t k = hk_key_int(aKey, nKey), v, nRow, sum;
  int bFound;
  (void)aOld; (void)nOld;
  s->nCall++;
  v = hk_get(s->pEng, "t", k, &bFound);
  if( bFound!=(aNew!=0) || (aNew && v!=hk_val_int(aNew, nNew)) ) s->nBad++;
  hk_scan(s->pEng, "t", &sum, &nRow);
  s->nRowSeen = nRow;
}

START_TEST(test_hooks_callback_reads_see_the_committed_state){
  char *zDir = th_tmpdir("hooks-reread");
  ReState s;
  KvHook *h;
  static const KvHookMethods m = { re_write, 0, 0, 0 };
  memset(&s, 0, sizeof(s));
  s.pEng = hk_open(zDir);
  hk_create(s.pEng, "t", _i);
  h = hk_register(s.pEng, "t", KV_HOOK_NEEDS_WRITE, &m, &s);
  hk_write(s.pEng, "t", 1, 10, 0);
  ck_assert_int_eq(s.nRowSeen, 1);
  hk_write(s.pEng, "t", 2, 20, 0);
  ck_assert_int_eq(s.nRowSeen, 2);
  hk_write(s.pEng, "t", 1, 11, 0);
  hk_write(s.pEng, "t", 2, 0, 1);
  ck_assert_int_eq(s.nRowSeen, 1);
  ck_assert_int_eq(s.nCall, 4);
  ck_assert_int_eq(s.nBad, 0);
  kv_hook_unregister(h);
  kv_engine_unref(s.pEng);
  sqlite3_free(zDir);
}
END_TEST

/* A hook on t that copies every write of t into table audit with a root of
** its own, from inside the callback; a second hook on audit records. */
typedef struct AuState AuState;
struct AuState { KvEngine *pEng; int nCall; int rcLast; };
static void au_write(void *pArg, const uint8_t *aKey, int nKey,
                     const uint8_t *aOld, int nOld, const uint8_t *aNew,
                     int nNew){
  AuState *s = (AuState*)pArg;
  KvRoot *r = 0;
  char *zErr = 0;
  int rc;
  (void)aOld; (void)nOld;
  s->nCall++;
  rc = kv_root_begin(s->pEng, &r);
  if( rc==SQLITE_OK ){
    rc = aNew ? kv_put(r, "audit", 5, aKey, nKey, aNew, nNew, &zErr)
              : kv_del(r, "audit", 5, aKey, nKey, &zErr);
  }
  if( rc==SQLITE_OK ) rc = kv_root_commit(r, &zErr);
  kv_root_free(r);
  sqlite3_free(zErr);
  s->rcLast = rc;
}

START_TEST(test_hooks_callback_may_commit_to_the_store){
  char *zDir = th_tmpdir("hooks-rewrite");
  AuState s;
  KvHook *h, *h2;
  HkRec *p;
  static const KvHookMethods m = { au_write, 0, 0, 0 };
  int bFound;
  memset(&s, 0, sizeof(s));
  s.pEng = hk_open(zDir);
  hk_create(s.pEng, "t", _i);
  hk_create(s.pEng, "audit", _i);
  p = hk_rec_new(s.pEng, "audit");
  h = hk_register(s.pEng, "t", KV_HOOK_NEEDS_WRITE, &m, &s);
  h2 = hk_register(s.pEng, "audit", HK_WO, &hkRecMethods, p);
  hk_write(s.pEng, "t", 1, 10, 0);
  hk_write(s.pEng, "t", 1, 11, 0);
  hk_write(s.pEng, "t", 1, 0, 1);
  ck_assert_int_eq(s.nCall, 3);
  ck_assert_int_eq(s.rcLast, SQLITE_OK);
  hk_get(s.pEng, "audit", 1, &bFound);
  ck_assert_int_eq(bFound, 0);
  /* the nested commits reached audit's hook, in their order */
  ck_assert_int_eq(hk_rec_count(p), 3);
  hk_expect(p, 0, HK_WRITE, 1, 0, 0, 1, 10);
  hk_expect(p, 1, HK_WRITE, 1, 1, 10, 1, 11);
  hk_expect(p, 2, HK_WRITE, 1, 1, 11, 0, 0);
  kv_hook_unregister(h);
  kv_hook_unregister(h2);
  kv_engine_unref(s.pEng);
  hk_rec_free(p);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------- init --- */

/* An additive consumer: sum and count of the rows, kept by xInit and
** xWrite (with old values), and how many xInit calls each key got. */
#define SUM_KEYS 64
typedef struct SumState SumState;
struct SumState {
  pthread_mutex_t mutex;
  int64_t sum, nRow;
  int anInit[SUM_KEYS];
  int nInitBad;                 /* xInit after an xWrite */
  int nWrite;
  int usInit;                   /* each xInit sleeps that long (us) */
};
static void sum_init(void *pArg, const uint8_t *aKey, int nKey,
                     const uint8_t *aVal, int nVal){
  SumState *s = (SumState*)pArg;
  int64_t k = hk_key_int(aKey, nKey);
  pthread_mutex_lock(&s->mutex);
  T_ASSERT(k>=0 && k<SUM_KEYS);
  s->anInit[k]++;
  if( s->nWrite>0 ) s->nInitBad++;
  s->sum += hk_val_int(aVal, nVal);
  s->nRow++;
  pthread_mutex_unlock(&s->mutex);
  if( s->usInit ) usleep(s->usInit);    /* commits land during the pass */
}
static void sum_write(void *pArg, const uint8_t *aKey, int nKey,
                      const uint8_t *aOld, int nOld, const uint8_t *aNew,
                      int nNew){
  SumState *s = (SumState*)pArg;
  (void)aKey; (void)nKey;
  pthread_mutex_lock(&s->mutex);
  s->nWrite++;
  if( aOld ){ s->sum -= hk_val_int(aOld, nOld); s->nRow--; }
  if( aNew ){ s->sum += hk_val_int(aNew, nNew); s->nRow++; }
  pthread_mutex_unlock(&s->mutex);
}
static const KvHookMethods sumMethods = { sum_write, sum_init, 0, 0 };

static void sum_check(SumState *s, KvEngine *pEng, const char *zWhen){
  int64_t sum, nRow;
  hk_scan(pEng, "t", &sum, &nRow);
  pthread_mutex_lock(&s->mutex);
  ck_assert_msg(s->sum==sum && s->nRow==nRow, "%s: hook sum %lld rows %lld,"
                " table sum %lld rows %lld", zWhen, (long long)s->sum,
                (long long)s->nRow, (long long)sum, (long long)nRow);
  pthread_mutex_unlock(&s->mutex);
}

/* A random write of the workload: mostly updates of few keys, so the WAL
** holds several versions of each. */
static void sum_random_write(KvEngine *pEng, unsigned *pSeed){
  int64_t k = rand_r(pSeed) % SUM_KEYS;
  int bDel = rand_r(pSeed) % 5==0;
  hk_write(pEng, "t", k, 1 + rand_r(pSeed) % 1000, bDel);
}

/* Child mode "writer DIR TYPE FD": create t, then commit random writes
** for ever, writing the number of commits done to FD after each (the
** parent kills it with SIGKILL).  No Check calls here, passing ones
** included: they report to a test runner the child does not have. */
int depot_test_child(int argc, char **argv){
  KvEngine *pEng;
  KvRoot *r = 0;
  unsigned seed = (unsigned)getpid();
  char *zErr = 0;
  int fd, i, bNew, rc;
  if( argc!=4 || strcmp(argv[0], "writer")!=0 ) return 2;
  fd = atoi(argv[3]);
  if( kv_engine_open(argv[1], &pEng, &zErr)!=SQLITE_OK ) return 3;
  rc = kv_root_begin(pEng, &r);
  if( rc==SQLITE_OK ){
    rc = kv_create_table(r, "t", 1, azType[atoi(argv[2])], 1, 0, &bNew,
                         &zErr);
  }
  if( rc==SQLITE_OK ) rc = kv_root_commit(r, &zErr);
  kv_root_free(r);
  if( rc!=SQLITE_OK ) return 4;
  for(i=1; ; i++){
    sum_random_write(pEng, &seed);        /* T_* only call Check to fail */
    if( write(fd, &i, sizeof(i))!=sizeof(i) ) return 5;
  }
  return 0;
}

/* After a SIGKILL and the WAL replay of the next open, xInit runs exactly
** once per live key with its final value: the sum kept by xInit+xWrite
** equals the table's, then and after more writes. */
START_TEST(test_hooks_init_once_per_live_key_after_crash_and_replay){
  char *zDir = th_tmpdir("hooks-crash");
  char zFd[16], zType[8];
  const char *azArg[5];
  int aPipe[2], n = 0, v, k;
  unsigned seed = 7;
  SumState s;
  KvEngine *pEng;
  KvHook *h;
  pid_t pid;
  ck_assert_int_eq(pipe(aPipe), 0);
  snprintf(zFd, sizeof(zFd), "%d", aPipe[1]);
  snprintf(zType, sizeof(zType), "%d", _i);
  azArg[0] = "writer"; azArg[1] = zDir; azArg[2] = zType; azArg[3] = zFd;
  azArg[4] = 0;
  pid = th_spawn(azArg);
  close(aPipe[1]);
  while( n<300 && read(aPipe[0], &v, sizeof(v))==sizeof(v) ) n = v;
  kill(pid, SIGKILL);
  waitpid(pid, 0, 0);
  close(aPipe[0]);
  ck_assert_int_ge(n, 300);
  memset(&s, 0, sizeof(s));
  pthread_mutex_init(&s.mutex, 0);
  pEng = hk_open(zDir);                      /* replays the WAL */
  h = hk_register(pEng, "t", HK_ALL, &sumMethods, &s);
  for(k=0; k<SUM_KEYS; k++){
    int bFound;
    hk_get(pEng, "t", k, &bFound);
    ck_assert_msg(s.anInit[k]==bFound, "key %d: %d xInit calls, live %d", k,
                  s.anInit[k], bFound);
  }
  ck_assert_int_gt(s.nRow, 0);
  sum_check(&s, pEng, "after reopen");
  for(k=0; k<200; k++) sum_random_write(pEng, &seed);
  sum_check(&s, pEng, "after more writes");
  kv_hook_unregister(h);
  kv_engine_unref(pEng);
  pthread_mutex_destroy(&s.mutex);
  sqlite3_free(zDir);
}
END_TEST

/* Writers keep committing while the hook registers with NEEDS_INIT: every
** commit lands either in the xInit pass or in xWrite, never both, never
** neither, and no xWrite comes before the pass ends. */
typedef struct RegRace RegRace;
struct RegRace { KvEngine *pEng; int bStop; unsigned seed; };
static void *reg_writer(void *pArg){
  RegRace *r = (RegRace*)pArg;
  while( !__atomic_load_n(&r->bStop, __ATOMIC_ACQUIRE) ){
    int64_t k = rand_r(&r->seed) % SUM_KEYS;
    int bDel = rand_r(&r->seed) % 5==0;
    int64_t v = 1 + rand_r(&r->seed) % 1000;
    KvRoot *q = 0;
    char *zErr = 0;
    int rc;
    T_EQ(kv_root_begin(r->pEng, &q), SQLITE_OK);
    rc = hk_stage(q, "t", k, v, bDel);
    if( rc==SQLITE_OK ) rc = kv_root_commit(q, &zErr);
    T_ASSERT(rc==SQLITE_OK || rc==SQLITE_BUSY_SNAPSHOT);
    sqlite3_free(zErr);
    kv_root_free(q);
  }
  return 0;
}

START_TEST(test_hooks_init_while_writers_run_counts_each_write_once){
  char *zDir = th_tmpdir("hooks-regrace");
  RegRace aR[2];
  pthread_t aThr[2];
  SumState s;
  KvEngine *pEng = hk_open(zDir);
  KvHook *h;
  int i, k;
  hk_create(pEng, "t", _i);
  for(k=0; k<SUM_KEYS; k++) hk_write(pEng, "t", k, k+1, 0);
  memset(&s, 0, sizeof(s));
  pthread_mutex_init(&s.mutex, 0);
  s.usInit = 300;
  for(i=0; i<2; i++){
    aR[i].pEng = pEng; aR[i].bStop = 0; aR[i].seed = 11+i;
    ck_assert_int_eq(pthread_create(&aThr[i], 0, reg_writer, &aR[i]), 0);
  }
  usleep(20000);
  h = hk_register(pEng, "t", HK_ALL, &sumMethods, &s);
  usleep(50000);
  for(i=0; i<2; i++) __atomic_store_n(&aR[i].bStop, 1, __ATOMIC_RELEASE);
  for(i=0; i<2; i++) pthread_join(aThr[i], 0);
  ck_assert_int_eq(s.nInitBad, 0);
  sum_check(&s, pEng, "after the race");
  kv_hook_unregister(h);
  kv_engine_unref(pEng);
  pthread_mutex_destroy(&s.mutex);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ flags --- */

/* NEEDS_INIT alone: xInit, no xWrite.  NEEDS_WRITE alone: no xInit, old
** always NULL, and the delete of an absent key reported with both NULL.
** With NEEDS_OLD_VALUE that delete is not reported. */
START_TEST(test_hooks_flags_select_init_write_and_old_values){
  char *zDir = th_tmpdir("hooks-flags");
  KvEngine *pEng = hk_open(zDir);
  HkRec *pInit, *pWrite, *pOld;
  KvHook *h1, *h2, *h3;
  hk_create(pEng, "t", _i);
  hk_write(pEng, "t", 1, 10, 0);
  pInit = hk_rec_new(pEng, "t");
  pWrite = hk_rec_new(pEng, "t");
  pOld = hk_rec_new(pEng, "t");
  h1 = hk_register(pEng, "t", KV_HOOK_NEEDS_INIT, &hkRecMethods, pInit);
  h2 = hk_register(pEng, "t", KV_HOOK_NEEDS_WRITE, &hkRecMethods, pWrite);
  h3 = hk_register(pEng, "t", HK_WO, &hkRecMethods, pOld);
  hk_write(pEng, "t", 1, 11, 0);
  hk_write(pEng, "t", 9, 0, 1);              /* delete of an absent key */
  hk_write(pEng, "t", 1, 0, 1);
  ck_assert_int_eq(hk_rec_count(pInit), 1);
  hk_expect(pInit, 0, HK_INIT, 1, 0, 0, 1, 10);
  ck_assert_int_eq(hk_rec_count(pWrite), 3);
  hk_expect(pWrite, 0, HK_WRITE, 1, 0, 0, 1, 11);
  hk_expect(pWrite, 1, HK_WRITE, 9, 0, 0, 0, 0);
  hk_expect(pWrite, 2, HK_WRITE, 1, 0, 0, 0, 0);
  ck_assert_int_eq(hk_rec_count(pOld), 2);
  hk_expect(pOld, 0, HK_WRITE, 1, 1, 10, 1, 11);
  hk_expect(pOld, 1, HK_WRITE, 1, 1, 11, 0, 0);
  kv_hook_unregister(h1);
  kv_hook_unregister(h2);
  kv_hook_unregister(h3);
  kv_engine_unref(pEng);
  hk_rec_free(pInit); hk_rec_free(pWrite); hk_rec_free(pOld);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------- removal, unregister --- */

/* Removing the table calls xRemoved once, after its last write; a table
** created again under the name is not followed. */
START_TEST(test_hooks_table_removal_calls_xremoved_once){
  char *zDir = th_tmpdir("hooks-remove");
  KvEngine *pEng = hk_open(zDir);
  HkRec *p;
  KvHook *h;
  hk_create(pEng, "t", _i);
  p = hk_rec_new(pEng, "t");
  h = hk_register(pEng, "t", HK_WO, &hkRecMethods, p);
  hk_write(pEng, "t", 1, 10, 0);
  hk_remove(pEng, "t");
  hk_create(pEng, "t", _i);
  hk_write(pEng, "t", 2, 20, 0);
  ck_assert_int_eq(hk_rec_count(p), 2);
  hk_expect(p, 0, HK_WRITE, 1, 0, 0, 1, 10);
  hk_expect(p, 1, HK_REMOVED, 0, 0, 0, 0, 0);
  kv_hook_unregister(h);
  kv_engine_unref(pEng);
  hk_rec_free(p);
  sqlite3_free(zDir);
}
END_TEST

/* A hook that unregisters itself from its callback gets no later call;
** an unregistered hook gets none either. */
typedef struct SelfState SelfState;
struct SelfState { KvHook *h; int nCall; };
static void self_write(void *pArg, const uint8_t *aKey, int nKey,
                       const uint8_t *aOld, int nOld, const uint8_t *aNew,
                       int nNew){
  SelfState *s = (SelfState*)pArg;
  (void)aKey; (void)nKey; (void)aOld; (void)nOld; (void)aNew; (void)nNew;
  s->nCall++;
  kv_hook_unregister(s->h);
}

START_TEST(test_hooks_unregister_stops_calls){
  char *zDir = th_tmpdir("hooks-unreg");
  KvEngine *pEng = hk_open(zDir);
  static const KvHookMethods m = { self_write, 0, 0, 0 };
  SelfState s;
  KvRoot *r = 0;
  char *zErr = 0;
  HkRec *p;
  KvHook *h;
  hk_create(pEng, "t", _i);
  memset(&s, 0, sizeof(s));
  s.h = hk_register(pEng, "t", KV_HOOK_NEEDS_WRITE, &m, &s);
  p = hk_rec_new(pEng, "t");
  h = hk_register(pEng, "t", HK_WO, &hkRecMethods, p);
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);    /* two keys */
  ck_assert_int_eq(hk_stage(r, "t", 1, 10, 0), SQLITE_OK);
  ck_assert_int_eq(hk_stage(r, "t", 2, 20, 0), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  ck_assert_int_eq(s.nCall, 1);             /* stopped after the first key */
  hk_write(pEng, "t", 3, 30, 0);
  ck_assert_int_eq(s.nCall, 1);
  ck_assert_int_eq(hk_rec_count(p), 3);
  kv_hook_unregister(h);
  hk_write(pEng, "t", 4, 40, 0);
  ck_assert_int_eq(hk_rec_count(p), 3);
  kv_engine_unref(pEng);
  hk_rec_free(p);
  sqlite3_free(zDir);
}
END_TEST

/* An anonymous store (no directory, no WAL) and a table without
** persistence deliver the same way. */
START_TEST(test_hooks_work_on_an_anonymous_store){
  KvEngine *pEng = hk_open(0);
  KvRoot *r = 0;
  char *zErr = 0;
  int bNew = 0;
  HkRec *p;
  KvHook *h;
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(kv_create_table(r, "t", 1, "kv_memory", 0, 0, &bNew,
                                   &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  hk_write(pEng, "t", 1, 10, 0);
  p = hk_rec_new(pEng, "t");
  h = hk_register(pEng, "t", HK_ALL, &hkRecMethods, p);
  hk_write(pEng, "t", 1, 11, 0);
  ck_assert_int_eq(hk_rec_count(p), 2);
  hk_expect(p, 0, HK_INIT, 1, 0, 0, 1, 10);
  hk_expect(p, 1, HK_WRITE, 1, 1, 10, 1, 11);
  kv_hook_unregister(h);
  kv_engine_unref(pEng);
  hk_rec_free(p);
}
END_TEST

/* ------------------------------------------------------- bad input --- */

/* Register from inside a callback: refused. */
typedef struct NestState NestState;
struct NestState { KvEngine *pEng; int rc; char *zErr; };
static void nest_write(void *pArg, const uint8_t *aKey, int nKey,
                       const uint8_t *aOld, int nOld, const uint8_t *aNew,
                       int nNew){
  NestState *s = (NestState*)pArg;
  KvHook *h = 0;
  (void)aKey; (void)nKey; (void)aOld; (void)nOld; (void)aNew; (void)nNew;
  s->rc = kv_hook_register(s->pEng, "t", 1, KV_HOOK_NEEDS_WRITE,
                           &hkRecMethods, 0, &h, &s->zErr);
}

static void hk_refused(int rc, char *zErr, int rcWant, const char *zLike){
  ck_assert_msg(rc==rcWant, "rc %d, want %d (%s)", rc, rcWant,
                zErr ? zErr : "");
  ck_assert_msg(zErr && strstr(zErr, zLike), "'%s' lacks '%s'",
                zErr ? zErr : "(null)", zLike);
  sqlite3_free(zErr);
}

START_TEST(test_hooks_bad_input_gives_clear_errors){
  char *zDir = th_tmpdir("hooks-bad");
  KvEngine *pEng = hk_open(zDir);
  static const KvHookMethods mNone = { 0, 0, 0, 0 };
  static const KvHookMethods mNest = { nest_write, 0, 0, 0 };
  NestState n;
  KvHook *h = (KvHook*)1;
  char *zErr = 0;
  int rc;
  hk_create(pEng, "t", 0);
#define TRY(...) \
  do{ zErr = 0; rc = kv_hook_register(__VA_ARGS__, &zErr); }while(0)
  TRY(0, "t", -1, KV_HOOK_NEEDS_WRITE, &hkRecMethods, 0, &h);
  hk_refused(rc, zErr, SQLITE_MISUSE, "store is NULL");
  TRY(pEng, 0, -1, KV_HOOK_NEEDS_WRITE, &hkRecMethods, 0, &h);
  hk_refused(rc, zErr, SQLITE_MISUSE, "table name is NULL");
  TRY(pEng, "nosuch", -1, KV_HOOK_NEEDS_WRITE, &hkRecMethods, 0, &h);
  hk_refused(rc, zErr, SQLITE_ERROR, "no such table: nosuch");
  ck_assert_ptr_null(h);
  TRY(pEng, ".tables_meta", -1, KV_HOOK_NEEDS_WRITE, &hkRecMethods, 0, &h);
  hk_refused(rc, zErr, SQLITE_ERROR, "no such table");
  TRY(pEng, "t", -1, KV_HOOK_NEEDS_WRITE, 0, 0, &h);
  hk_refused(rc, zErr, SQLITE_MISUSE, "methods are NULL");
  TRY(pEng, "t", -1, KV_HOOK_NEEDS_WRITE, &hkRecMethods, 0, 0);
  hk_refused(rc, zErr, SQLITE_MISUSE, "ppHook is NULL");
  TRY(pEng, "t", -1, 0x40|KV_HOOK_NEEDS_WRITE, &hkRecMethods, 0, &h);
  hk_refused(rc, zErr, SQLITE_MISUSE, "unknown flag bits");
  TRY(pEng, "t", -1, KV_HOOK_NEEDS_OLD_VALUE, &hkRecMethods, 0, &h);
  hk_refused(rc, zErr, SQLITE_MISUSE, "KV_HOOK_NEEDS_WRITE or");
  TRY(pEng, "t", -1, KV_HOOK_NEEDS_WRITE, &mNone, 0, &h);
  hk_refused(rc, zErr, SQLITE_MISUSE, "KV_HOOK_NEEDS_WRITE without xWrite");
  TRY(pEng, "t", -1, KV_HOOK_NEEDS_INIT, &mNone, 0, &h);
  hk_refused(rc, zErr, SQLITE_MISUSE, "KV_HOOK_NEEDS_INIT without xInit");
#undef TRY
  /* a NULL pzErr is allowed */
  ck_assert_int_eq(kv_hook_register(pEng, "nosuch", 6, KV_HOOK_NEEDS_WRITE,
                                    &hkRecMethods, 0, &h, 0), SQLITE_ERROR);
  /* from inside a callback */
  memset(&n, 0, sizeof(n));
  n.pEng = pEng;
  h = hk_register(pEng, "t", KV_HOOK_NEEDS_WRITE, &mNest, &n);
  hk_write(pEng, "t", 1, 10, 0);
  hk_refused(n.rc, n.zErr, SQLITE_MISUSE, "inside a hook callback");
  kv_hook_unregister(h);
  kv_hook_unregister(0);
  kv_engine_unref(pEng);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("hooks");
  TCase *tc = tcase_create("hooks");
  tcase_add_loop_test(tc,
      test_hooks_write_sees_each_committed_mutation_and_no_rollback,
      0, N_TYPE);
  tcase_add_loop_test(tc, test_hooks_failed_flush_or_publication_calls_no_hook,
                      0, N_TYPE);
  tcase_add_loop_test(tc,
      test_hooks_concurrent_committers_are_delivered_in_commit_order,
      0, N_TYPE);
  tcase_add_loop_test(tc, test_hooks_callback_reads_see_the_committed_state,
                      0, N_TYPE);
  tcase_add_loop_test(tc, test_hooks_callback_may_commit_to_the_store,
                      0, N_TYPE);
  tcase_add_loop_test(tc,
      test_hooks_init_once_per_live_key_after_crash_and_replay, 0, N_TYPE);
  tcase_add_loop_test(tc,
      test_hooks_init_while_writers_run_counts_each_write_once, 0, N_TYPE);
  tcase_add_loop_test(tc, test_hooks_flags_select_init_write_and_old_values,
                      0, N_TYPE);
  tcase_add_loop_test(tc, test_hooks_table_removal_calls_xremoved_once,
                      0, N_TYPE);
  tcase_add_loop_test(tc, test_hooks_unregister_stops_calls, 0, N_TYPE);
  tcase_add_test(tc, test_hooks_work_on_an_anonymous_store);
  tcase_add_test(tc, test_hooks_bad_input_gives_clear_errors);
  suite_add_tcase(s, tc);
  return s;
}
