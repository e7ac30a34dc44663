/*
** pool.c -- the connection pool of ext/depot_pool.h: one writer and N
** reader connections of one database, leased with timeouts.
**
** Slots.  Slot 0 is the writer, slots 1..nReader the readers.  Each slot
** has one atomic word, generation<<2 | state (FREE, USED, RELEASING).  A
** kind (writer, readers) has a counting semaphore (mutex + condition
** variable on CLOCK_MONOTONIC) whose count is the number of FREE slots of
** the kind.  Acquire takes a permit (waiting at most its timeout), then
** claims a FREE slot with one compare-and-swap pass, which cannot fail:
** release makes the slot FREE before it posts the permit (the ordering of
** the seed's fix), so every permit holder has a FREE slot.  The claim
** bumps the generation, which the lease remembers: a stale copy of a
** lease (double release) or a lease of another pool (foreign release)
** fails its compare-and-swap and is refused, counted and logged.
**
** Release resets the slot: statements reset, and a connection that is
** marked broken, last failed with IOERR/CORRUPT/NOTADB, or is inside a
** transaction is closed; a slot without a connection is (re)opened by the
** next acquire, on the acquirer's thread, whose error then names the
** stage ("open", "init_sql").
**
** Owner threads.  An owned lease records the acquiring thread's record (a
** pthread key value); the key's destructor, run when the thread exits,
** releases every slot of every registered pool that the record still
** owns.  The pool registry (ext/pool_sql.c) is the list of pools it walks.
**
** Leak detector: a lease held longer than iLeakMs is counted once (per
** generation) and logged with its tag, by depot_pool_status, by a timed
** out acquire and by the release.
*/
#include "config.h"
#include "ext/depot.h"
#include "ext/pool_int.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLOT_FREE      0
#define SLOT_USED      1
#define SLOT_RELEASING 2
#define SLOT_STATE(w)  ((int)((w)&3))
#define SLOT_GEN(w)    ((w)>>2)
#define SLOT_WORD(g,s) (((g)<<2)|(sqlite3_uint64)(s))

#define POOL_TAG_MAX 64

#define LOAD(x)      __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define STORE(x,v)   __atomic_store_n(&(x), (v), __ATOMIC_RELEASE)
#define ADD(x,v)     __atomic_add_fetch(&(x), (v), __ATOMIC_ACQ_REL)

typedef struct PoolSem PoolSem;
struct PoolSem {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int nFree;                  /* permits */
  int nWait;                  /* waiters */
};

/* A statement of a recipe kept prepared on a slot's connection. */
#define POOL_STMT_CACHE 16
typedef struct PoolStmt PoolStmt;
struct PoolStmt {
  sqlite3_uint64 iKey;        /* the recipe's key */
  sqlite3_uint64 iUse;        /* the slot's iStmtClock at its last use */
  sqlite3_stmt *pStmt;        /* NULL: the entry is empty */
};

typedef struct PoolSlot PoolSlot;
struct PoolSlot {
  sqlite3_uint64 word;        /* atomic: generation<<2 | state */
  sqlite3 *db;                /* the lease holder's while USED */
  PoolStmt aStmt[POOL_STMT_CACHE];  /* the lease holder's, like db */
  sqlite3_uint64 iStmtClock;  /* bumped by every depot_poolint_stmt */
  void *pOwner;               /* atomic: owning thread record, or NULL */
  int bBroken;                /* atomic: close at release */
  int bWriter;
  sqlite3_int64 iAcquiredUs;  /* atomic: when leased */
  sqlite3_uint64 iLeakGen;    /* atomic: generation counted as leaked */
  char zTag[POOL_TAG_MAX];    /* under depot_pool.muInfo */
};

struct depot_pool {
  char *zPath;
  char *zVfs;
  char *zInitSql;
  const char *zName;          /* the registry's copy */
  depot_pool_options opt;     /* strings point at the copies above */
  int nReader;
  int nSlot;
  PoolSlot *aSlot;
  PoolSem aSem[2];            /* [DEPOT_LEASE_READ], [DEPOT_LEASE_WRITE] */
  int bClosing;               /* atomic */
  pthread_mutex_t muInfo;     /* slot tags; the idle condition */
  pthread_cond_t condIdle;    /* signalled when nInUse drops to 0 */
  /* Counters (atomic). */
  int nInUse, nWaiting, nHolding, nPendingAsync;
  sqlite3_int64 nAcquired, nTimeout, nBroken, nLeaked, nBadRelease;
  sqlite3_int64 iLongestWaitUs;
};

/* -------------------------------------------------------------- time --- */

static sqlite3_int64 poolNowUs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (sqlite3_int64)ts.tv_sec*1000000 + ts.tv_nsec/1000;
}

/* ------------------------------------------------------------------ log */

void depot_poolint_log(depot_pool *p, int iLevel, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  if( z==0 ) return;
  if( p->opt.xLog ){
    p->opt.xLog(p->opt.pLogArg, iLevel, z);
  }else{
    sqlite3_log(iLevel, "depot pool %s: %s", p->zName ? p->zName : "?", z);
  }
  sqlite3_free(z);
}

/* --------------------------------------------------------- semaphore --- */

static int poolSemInit(PoolSem *s, int n){
  pthread_condattr_t a;
  int rc;
  s->nFree = n;
  s->nWait = 0;
  if( pthread_mutex_init(&s->mu, 0) ) return SQLITE_NOMEM;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  rc = pthread_cond_init(&s->cond, &a);
  pthread_condattr_destroy(&a);
  if( rc ){
    pthread_mutex_destroy(&s->mu);
    return SQLITE_NOMEM;
  }
  return SQLITE_OK;
}

static void poolSemFree(PoolSem *s){
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->mu);
}

/* Take a permit of s before iDeadlineUs (<0: none).  SQLITE_OK,
** SQLITE_BUSY at the deadline, SQLITE_MISUSE when the pool closes. */
static int poolSemTake(depot_pool *p, PoolSem *s, sqlite3_int64 iDeadlineUs){
  int rc = SQLITE_OK;
  pthread_mutex_lock(&s->mu);
  if( s->nFree==0 ){
    s->nWait++;
    ADD(p->nWaiting, 1);
    while( s->nFree==0 && !LOAD(p->bClosing) ){
      if( iDeadlineUs<0 ){
        pthread_cond_wait(&s->cond, &s->mu);
      }else{
        struct timespec ts;
        if( poolNowUs()>=iDeadlineUs ) break;
        ts.tv_sec = iDeadlineUs/1000000;
        ts.tv_nsec = (long)(iDeadlineUs%1000000)*1000;
        pthread_cond_timedwait(&s->cond, &s->mu, &ts);
      }
    }
    s->nWait--;
    ADD(p->nWaiting, -1);
  }
  if( s->nFree>0 && !LOAD(p->bClosing) ){
    s->nFree--;
  }else{
    rc = LOAD(p->bClosing) ? SQLITE_MISUSE : SQLITE_BUSY;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

static void poolSemPost(PoolSem *s){
  pthread_mutex_lock(&s->mu);
  s->nFree++;
  if( s->nWait ) pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mu);
}

/* --------------------------------------------------- thread records --- */

static pthread_once_t poolKeyOnce = PTHREAD_ONCE_INIT;
static pthread_key_t poolKey;
static int poolKeyOk = 0;
static __thread depot_tx poolTxScope = 0;

void depot_poolint_set_tx_scope(depot_tx tx){ poolTxScope = tx; }
depot_tx depot_poolint_tx_scope(void){ return poolTxScope; }

static int releaseSlot(depot_pool *p, int iSlot, sqlite3_uint64 iGen);

/* depot_poolreg_each callback of the thread-exit destructor. */
static void poolThreadExitPool(void *pRec, depot_pool *p){
  int i;
  for(i=0; i<p->nSlot; i++){
    PoolSlot *s = &p->aSlot[i];
    sqlite3_uint64 w = LOAD(s->word);
    if( SLOT_STATE(w)==SLOT_USED && LOAD(s->pOwner)==pRec ){
      if( releaseSlot(p, i, SLOT_GEN(w))==SQLITE_OK ){
        depot_poolint_log(p, SQLITE_NOTICE, "%s lease of slot %d released at"
                       " the exit of its thread", s->bWriter ? "write":"read",
                       i);
      }
    }
  }
}

static void poolThreadExit(void *pRec){
  depot_poolreg_each(poolThreadExitPool, pRec);
  free(pRec);
}

static void poolKeyInit(void){
  poolKeyOk = pthread_key_create(&poolKey, poolThreadExit)==0;
}

/* The calling thread's record, made on first use (NULL: out of memory or
** no key, the lease is then unowned). */
static void *poolThreadRecord(void){
  void *pRec;
  pthread_once(&poolKeyOnce, poolKeyInit);
  if( !poolKeyOk ) return 0;
  pRec = pthread_getspecific(poolKey);
  if( pRec==0 && (pRec = malloc(1))!=0 ){
    if( pthread_setspecific(poolKey, pRec) ){
      free(pRec);
      pRec = 0;
    }
  }
  return pRec;
}

/* ------------------------------------------------------- connections --- */

static int poolIsMemory(const char *zPath){
  return zPath[0]==0 || strcmp(zPath, ":memory:")==0
      || strstr(zPath, "mode=memory")!=0;
}

/* Run zSql on db, expecting no error. */
static int poolExec(sqlite3 *db, const char *zSql, char **pzErr){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc!=SQLITE_OK && pzErr ){
    *pzErr = sqlite3_mprintf("%s", zErr ? zErr : sqlite3_errstr(rc));
  }
  sqlite3_free(zErr);
  return rc;
}

/* Open the connection of slot s (its db is NULL).  On failure *pzErr is
** "open: ..." or "init_sql: ...". */
static int poolOpenSlot(depot_pool *p, PoolSlot *s, char **pzErr){
  int bRo = !s->bWriter && !p->opt.bReadWriteReaders;
  int fBase = SQLITE_OPEN_NOMUTEX|SQLITE_OPEN_URI;
  sqlite3 *db = 0;
  char *zErr = 0;
  int rc;
  for(;;){
    int f = fBase | (bRo ? SQLITE_OPEN_READONLY
                         : SQLITE_OPEN_READWRITE
                           | (s->bWriter ? SQLITE_OPEN_CREATE : 0));
    rc = sqlite3_open_v2(p->zPath, &db, f, p->zVfs);
    if( rc==SQLITE_OK ){
      rc = sqlite3_depot_init(db, &zErr,
#ifdef SQLITE_CORE
                              0
#else
                              sqlite3_api
#endif
                              );
      if( rc==SQLITE_OK_LOAD_PERMANENTLY ) rc = SQLITE_OK;
      if( rc!=SQLITE_OK ){
        if( pzErr ){
          *pzErr = sqlite3_mprintf("open: %s: %s", p->zPath,
                                   zErr ? zErr : sqlite3_errstr(rc));
        }
        sqlite3_free(zErr);
        sqlite3_close_v2(db);
        return rc;
      }
      /* A read-only reader must be able to read the schema; a database
      ** that refuses it (no -shm to map yet) gets a read-write reader. */
      if( bRo && poolExec(db, "SELECT count(*) FROM sqlite_schema", 0) ){
        sqlite3_close_v2(db);
        db = 0;
        bRo = 0;
        continue;
      }
      break;
    }
    if( bRo ){
      sqlite3_close_v2(db);
      db = 0;
      bRo = 0;
      continue;
    }
    if( pzErr ){
      *pzErr = sqlite3_mprintf("open: %s: %s", p->zPath,
                               db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    }
    sqlite3_close_v2(db);
    return rc;
  }
  if( p->zInitSql && (rc = poolExec(db, p->zInitSql, &zErr))!=SQLITE_OK ){
    if( pzErr ) *pzErr = sqlite3_mprintf("init_sql: %s", zErr);
    sqlite3_free(zErr);
    sqlite3_close_v2(db);
    return rc;
  }
  if( p->opt.xInit
   && (rc = p->opt.xInit(p->opt.pInitArg, db, s->bWriter))!=SQLITE_OK ){
    if( pzErr ){
      *pzErr = sqlite3_mprintf("init_sql: xInit: %s", sqlite3_errmsg(db));
    }
    sqlite3_close_v2(db);
    return rc;
  }
  s->db = db;
  return SQLITE_OK;
}

/* Close the connection of slot s, its cached statements first. */
static void poolCloseSlot(PoolSlot *s){
  int i;
  for(i=0; i<POOL_STMT_CACHE; i++){
    sqlite3_finalize(s->aStmt[i].pStmt);
    memset(&s->aStmt[i], 0, sizeof(PoolStmt));
  }
  sqlite3_close_v2(s->db);
  s->db = 0;
}

/* True when zSql is zStmtSql (what a statement was prepared from)
** followed by nothing but white space. */
static int poolSqlSame(const char *zStmtSql, const char *zSql){
  size_t n = strlen(zStmtSql);
  if( strncmp(zStmtSql, zSql, n)!=0 ) return 0;
  for(zSql+=n; *zSql; zSql++){
    if( !strchr(" \t\r\n\f", *zSql) ) return 0;
  }
  return 1;
}

int depot_poolint_stmt(depot_lease *pLease, sqlite3_uint64 iKey,
                       const char *zSql, sqlite3_stmt **ppStmt,
                       int *pbKept){
  PoolSlot *s = &pLease->pPool->aSlot[pLease->iSlot];
  PoolStmt *pLru = &s->aStmt[0];
  const char *zTail = 0;
  int i, rc;
  *ppStmt = 0;
  *pbKept = 0;
  s->iStmtClock++;
  for(i=0; i<POOL_STMT_CACHE; i++){
    PoolStmt *c = &s->aStmt[i];
    if( c->pStmt && c->iKey==iKey ){
      if( (iKey & DEPOT_POOL_KEY_SQL)==0
       || poolSqlSame(sqlite3_sql(c->pStmt), zSql) ){
        c->iUse = s->iStmtClock;
        *ppStmt = c->pStmt;
        *pbKept = 1;
        return SQLITE_OK;
      }
      pLru = c;                  /* two texts of one hash: replace */
      break;
    }
    if( c->iUse < pLru->iUse ) pLru = c;     /* an empty entry has 0 */
  }
  sqlite3_finalize(pLru->pStmt);
  memset(pLru, 0, sizeof(*pLru));
  rc = sqlite3_prepare_v3(s->db, zSql, -1, SQLITE_PREPARE_PERSISTENT, ppStmt,
                          &zTail);
  if( rc==SQLITE_OK && *ppStmt && zTail && poolSqlSame("", zTail) ){
    pLru->iKey = iKey;
    pLru->iUse = s->iStmtClock;
    pLru->pStmt = *ppStmt;
    *pbKept = 1;
  }
  return rc;
}

/* --------------------------------------------------------- open/close --- */

static void poolFree(depot_pool *p){
  int i;
  if( p==0 ) return;
  for(i=0; i<p->nSlot; i++) poolCloseSlot(&p->aSlot[i]);
  poolSemFree(&p->aSem[0]);
  poolSemFree(&p->aSem[1]);
  pthread_cond_destroy(&p->condIdle);
  pthread_mutex_destroy(&p->muInfo);
  sqlite3_free(p->aSlot);
  sqlite3_free(p->zPath);
  sqlite3_free(p->zVfs);
  sqlite3_free(p->zInitSql);
  sqlite3_free(p);
}

int depot_pool_open(const char *zPath, const depot_pool_options *pOpt,
                    depot_pool **ppPool, char **pzErr){
  depot_pool *p;
  int i, rc = SQLITE_OK;
  *ppPool = 0;
  if( pzErr ) *pzErr = 0;
  if( zPath==0 ) zPath = "";
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  if( pOpt ) p->opt = *pOpt;
  if( p->opt.iLeakMs<=0 ) p->opt.iLeakMs = 30000;
  if( p->opt.iCloseMs<=0 ) p->opt.iCloseMs = 5000;
  p->nReader = p->opt.nReader==0 ? 4 : p->opt.nReader<0 ? 0 : p->opt.nReader;
  if( poolIsMemory(zPath) ) p->nReader = 0;
  p->nSlot = 1 + p->nReader;
  p->zPath = sqlite3_mprintf("%s", zPath);
  p->zVfs = p->opt.zVfs ? sqlite3_mprintf("%s", p->opt.zVfs) : 0;
  p->zInitSql = p->opt.zInitSql ? sqlite3_mprintf("%s", p->opt.zInitSql) : 0;
  p->aSlot = sqlite3_malloc64(sizeof(PoolSlot)*p->nSlot);
  if( p->zPath==0 || p->aSlot==0 || (p->opt.zVfs && p->zVfs==0)
   || (p->opt.zInitSql && p->zInitSql==0) ){
    poolFree(p);
    return SQLITE_NOMEM;
  }
  p->opt.zVfs = p->zVfs;
  p->opt.zInitSql = p->zInitSql;
  p->opt.zName = 0;
  memset(p->aSlot, 0, sizeof(PoolSlot)*p->nSlot);
  p->aSlot[0].bWriter = 1;
  pthread_mutex_init(&p->muInfo, 0);
  pthread_cond_init(&p->condIdle, 0);
  if( poolSemInit(&p->aSem[DEPOT_LEASE_WRITE], 1)
   || poolSemInit(&p->aSem[DEPOT_LEASE_READ], p->nReader)
   || depot_vfs_register()!=SQLITE_OK ){     /* for vfs=depot URIs */
    poolFree(p);
    return SQLITE_NOMEM;
  }
  for(i=0; i<p->nSlot && rc==SQLITE_OK; i++){
    char *zErr = 0;
    rc = poolOpenSlot(p, &p->aSlot[i], &zErr);
    if( (rc&0xff)==SQLITE_CANTOPEN && i>0 ){
      /* A reader of a database the writer opened but has not created
      ** yet (a new depot database exists from its first commit): its
      ** first acquire opens it. */
      rc = SQLITE_OK;
    }
    if( rc!=SQLITE_OK && pzErr ) *pzErr = zErr;
    else sqlite3_free(zErr);
  }
  if( rc==SQLITE_OK ){
    rc = depot_poolreg_add(pOpt ? pOpt->zName : 0, p, depot_pool_status,
                           &p->zName, pzErr);
  }
  if( rc!=SQLITE_OK ){
    poolFree(p);
    return rc;
  }
  *ppPool = p;
  return SQLITE_OK;
}

const char *depot_pool_name(depot_pool *p){
  return p->zName;
}

int depot_pool_close(depot_pool *p, char **pzErr){
  sqlite3_int64 iEnd;
  int k;
  if( pzErr ) *pzErr = 0;
  if( p==0 ) return SQLITE_OK;
  STORE(p->bClosing, 1);
  for(k=0; k<2; k++){             /* waiters see bClosing and leave */
    pthread_mutex_lock(&p->aSem[k].mu);
    pthread_cond_broadcast(&p->aSem[k].cond);
    pthread_mutex_unlock(&p->aSem[k].mu);
  }
  iEnd = poolNowUs() + (sqlite3_int64)p->opt.iCloseMs*1000;
  pthread_mutex_lock(&p->muInfo);
  while( LOAD(p->nInUse)>0 ){
    struct timespec ts;
    sqlite3_int64 iLeft = iEnd - poolNowUs();
    if( iLeft<=0 ) break;
    if( iLeft>50000 ) iLeft = 50000;   /* condIdle is on CLOCK_REALTIME */
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(iLeft%1000000)*1000;
    ts.tv_sec += iLeft/1000000 + ts.tv_nsec/1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&p->condIdle, &p->muInfo, &ts);
  }
  if( LOAD(p->nInUse)>0 ){
    sqlite3_str *pStr = sqlite3_str_new(0);
    sqlite3_int64 iNow = poolNowUs();
    int i;
    sqlite3_str_appendf(pStr, "close: %d lease(s) still held:",
                        LOAD(p->nInUse));
    for(i=0; i<p->nSlot; i++){
      PoolSlot *s = &p->aSlot[i];
      if( SLOT_STATE(LOAD(s->word))==SLOT_FREE ) continue;
      sqlite3_str_appendf(pStr, " [%s \"%s\" held %lld ms]",
                          s->bWriter ? "write" : "read", s->zTag,
                          (iNow - LOAD(s->iAcquiredUs))/1000);
    }
    pthread_mutex_unlock(&p->muInfo);
    if( pzErr ) *pzErr = sqlite3_str_finish(pStr);
    else sqlite3_free(sqlite3_str_finish(pStr));
    return SQLITE_BUSY;
  }
  pthread_mutex_unlock(&p->muInfo);
  depot_poolreg_remove(p);
  poolFree(p);
  return SQLITE_OK;
}

/* ------------------------------------------------------------ leases --- */

/* Count and log slot s as leaked if it is held past the threshold (once
** per generation).  iNow: poolNowUs(). */
static void poolLeakCheck(depot_pool *p, PoolSlot *s, sqlite3_int64 iNow){
  sqlite3_uint64 w = LOAD(s->word);
  sqlite3_uint64 g = SLOT_GEN(w), old;
  sqlite3_int64 iHeld;
  if( SLOT_STATE(w)==SLOT_FREE ) return;
  iHeld = iNow - LOAD(s->iAcquiredUs);
  if( iHeld < (sqlite3_int64)p->opt.iLeakMs*1000 ) return;
  old = LOAD(s->iLeakGen);
  if( old==g ) return;
  if( !__atomic_compare_exchange_n(&s->iLeakGen, &old, g, 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ){
    return;
  }
  ADD(p->nLeaked, 1);
  pthread_mutex_lock(&p->muInfo);
  depot_poolint_log(p, SQLITE_WARNING, "leak: %s lease \"%s\" held %lld ms"
                 " (threshold %d ms)", s->bWriter ? "write" : "read",
                 s->zTag, iHeld/1000, p->opt.iLeakMs);
  pthread_mutex_unlock(&p->muInfo);
}

static void poolLeakScan(depot_pool *p){
  sqlite3_int64 iNow = poolNowUs();
  int i;
  for(i=0; i<p->nSlot; i++) poolLeakCheck(p, &p->aSlot[i], iNow);
}

static int poolAcquire(depot_pool *p, int eKind, int iTimeoutMs,
                       const char *zTag, int bOwned, depot_lease *pLease,
                       char **pzErr){
  sqlite3_int64 iStart = poolNowUs(), iWait, old;
  int k, i, i0, i1, rc;
  PoolSlot *s = 0;
  sqlite3_uint64 w = 0;
  if( pzErr ) *pzErr = 0;
  memset(pLease, 0, sizeof(*pLease));
  eKind = eKind==DEPOT_LEASE_WRITE ? DEPOT_LEASE_WRITE : DEPOT_LEASE_READ;
  k = (eKind==DEPOT_LEASE_WRITE || p->nReader==0) ? DEPOT_LEASE_WRITE
                                                   : DEPOT_LEASE_READ;
  rc = poolSemTake(p, &p->aSem[k],
                   iTimeoutMs<0 ? -1 : iStart+(sqlite3_int64)iTimeoutMs*1000);
  iWait = poolNowUs() - iStart;
  old = LOAD(p->iLongestWaitUs);
  while( iWait>old && !__atomic_compare_exchange_n(&p->iLongestWaitUs, &old,
                          iWait, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ){}
  if( rc!=SQLITE_OK ){
    if( rc==SQLITE_BUSY ){
      int nW = 0, nR = 0;
      ADD(p->nTimeout, 1);
      for(i=0; i<p->nSlot; i++){
        if( SLOT_STATE(LOAD(p->aSlot[i].word))!=SLOT_FREE ){
          if( i==0 ) nW++; else nR++;
        }
      }
      if( pzErr ){
        *pzErr = sqlite3_mprintf("pool_acquire: timeout: %s lease after"
            " %lld ms (in use %d/1 writers, %d/%d readers, %d waiting)",
            eKind==DEPOT_LEASE_WRITE ? "write" : "read", iWait/1000,
            nW, nR, p->nReader, LOAD(p->nWaiting));
      }
      poolLeakScan(p);
    }else if( pzErr ){
      *pzErr = sqlite3_mprintf("pool_acquire: the pool is closing");
    }
    return rc;
  }
  /* Claim a FREE slot of the kind: one pass, it cannot miss. */
  i0 = k==DEPOT_LEASE_WRITE ? 0 : 1;
  i1 = k==DEPOT_LEASE_WRITE ? 1 : p->nSlot;
  for(i=i0; i<i1; i++){
    s = &p->aSlot[i];
    w = LOAD(s->word);
    if( SLOT_STATE(w)==SLOT_FREE
     && __atomic_compare_exchange_n(&s->word, &w,
            SLOT_WORD(SLOT_GEN(w)+1, SLOT_USED), 0,
            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ){
      break;
    }
  }
  if( i>=i1 ){                    /* a permit without a slot: a bug */
    poolSemPost(&p->aSem[k]);
    if( pzErr ) *pzErr = sqlite3_mprintf("pool_acquire: no free slot");
    return SQLITE_INTERNAL;
  }
  ADD(p->nInUse, 1);
  STORE(s->iAcquiredUs, poolNowUs());
  STORE(s->bBroken, 0);
  STORE(s->pOwner, bOwned ? poolThreadRecord() : (void*)0);
  pthread_mutex_lock(&p->muInfo);
  sqlite3_snprintf(POOL_TAG_MAX, s->zTag, "%s", zTag ? zTag : "?");
  pthread_mutex_unlock(&p->muInfo);
  pLease->pPool = p;
  pLease->iSlot = i;
  pLease->eKind = eKind;
  pLease->iGen = SLOT_GEN(w)+1;
  if( s->db==0 && (rc = poolOpenSlot(p, s, pzErr))!=SQLITE_OK ){
    releaseSlot(p, i, pLease->iGen);
    memset(pLease, 0, sizeof(*pLease));
    return rc;
  }
  pLease->db = s->db;
  ADD(p->nAcquired, 1);
  return SQLITE_OK;
}

int depot_pool_acquire(depot_pool *p, int eKind, int iTimeoutMs,
                       const char *zTag, depot_lease *pLease,
                       char **pzErr){
  if( poolTxScope ){
    memset(pLease, 0, sizeof(*pLease));
    if( pzErr ){
      *pzErr = sqlite3_mprintf("pool_acquire: pool-level call inside the"
                               " callback of transaction %llu",
                               (unsigned long long)poolTxScope);
    }
    return SQLITE_MISUSE;
  }
  return depot_poolint_acquire(p, eKind, iTimeoutMs, zTag, 1, pLease, pzErr);
}

/* poolAcquire is not a cancellation point: a thread cancelled
** while it waits would leave the semaphore's mutex locked, and one
** cancelled between the claim and the return would hold a slot no lease
** names.  Cancellation is deferred to the caller's next point, where the
** thread-exit destructor releases the lease. */
int depot_poolint_acquire(depot_pool *p, int eKind, int iTimeoutMs,
                          const char *zTag, int bOwned, depot_lease *pLease,
                          char **pzErr){
  int rc, iOld;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &iOld);
  rc = poolAcquire(p, eKind, iTimeoutMs, zTag, bOwned, pLease, pzErr);
  pthread_setcancelstate(iOld, &iOld);
  return rc;
}

/* Release slot iSlot of generation iGen: reset it, make it FREE, post its
** permit.  SQLITE_MISUSE if it is not USED in that generation. */
static int releaseSlot(depot_pool *p, int iSlot, sqlite3_uint64 iGen){
  PoolSlot *s = &p->aSlot[iSlot];
  sqlite3_uint64 w = SLOT_WORD(iGen, SLOT_USED);
  int k;
  if( !__atomic_compare_exchange_n(&s->word, &w,
          SLOT_WORD(iGen, SLOT_RELEASING), 0,
          __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ){
    return SQLITE_MISUSE;
  }
  poolLeakCheck(p, s, poolNowUs());
  if( s->db ){
    sqlite3_stmt *pStmt = 0;
    int e = sqlite3_errcode(s->db) & 0xff;
    const char *zWhy = 0;
    while( (pStmt = sqlite3_next_stmt(s->db, pStmt))!=0 ){
      sqlite3_reset(pStmt);
    }
    if( LOAD(s->bBroken) ) zWhy = "marked broken";
    else if( e==SQLITE_IOERR ) zWhy = "SQLITE_IOERR";
    else if( e==SQLITE_CORRUPT ) zWhy = "SQLITE_CORRUPT";
    else if( e==SQLITE_NOTADB ) zWhy = "SQLITE_NOTADB";
    else if( !sqlite3_get_autocommit(s->db) ) zWhy = "inside a transaction";
    if( zWhy ){
      ADD(p->nBroken, 1);
      pthread_mutex_lock(&p->muInfo);
      depot_poolint_log(p, SQLITE_WARNING, "%s connection of slot %d (\"%s\")"
                     " closed at release: %s", s->bWriter ? "writer":"reader",
                     iSlot, s->zTag, zWhy);
      pthread_mutex_unlock(&p->muInfo);
      poolCloseSlot(s);
    }
  }
  STORE(s->pOwner, (void*)0);
  STORE(s->word, SLOT_WORD(iGen, SLOT_FREE));
  k = (s->bWriter) ? DEPOT_LEASE_WRITE : DEPOT_LEASE_READ;
  if( ADD(p->nInUse, -1)==0 && LOAD(p->bClosing) ){
    pthread_mutex_lock(&p->muInfo);
    pthread_cond_broadcast(&p->condIdle);
    pthread_mutex_unlock(&p->muInfo);
  }
  poolSemPost(&p->aSem[k]);
  return SQLITE_OK;
}

int depot_pool_release(depot_pool *p, depot_lease *pLease){
  int rc;
  if( pLease==0 || pLease->pPool==0 ) return SQLITE_OK;
  if( p==0 ) return SQLITE_MISUSE;
  if( pLease->pPool!=p || pLease->iSlot<0 || pLease->iSlot>=p->nSlot ){
    ADD(p->nBadRelease, 1);
    depot_poolint_log(p, SQLITE_WARNING, "foreign release refused: the lease"
                   " is not of this pool");
    return SQLITE_MISUSE;
  }
  rc = releaseSlot(p, pLease->iSlot, pLease->iGen);
  if( rc!=SQLITE_OK ){
    ADD(p->nBadRelease, 1);
    depot_poolint_log(p, SQLITE_WARNING, "double release refused: slot %d"
                   " generation %llu was already released", pLease->iSlot,
                   (unsigned long long)pLease->iGen);
    return rc;
  }
  memset(pLease, 0, sizeof(*pLease));
  return SQLITE_OK;
}

int depot_lease_release(depot_lease *pLease){
  if( pLease==0 || pLease->pPool==0 ) return SQLITE_OK;
  return depot_pool_release(pLease->pPool, pLease);
}

void depot_lease_scope_end(depot_lease *pLease){
  depot_lease_release(pLease);
}

int depot_lease_mark_broken(depot_lease *pLease){
  PoolSlot *s;
  if( pLease==0 || pLease->pPool==0 ) return SQLITE_MISUSE;
  s = &pLease->pPool->aSlot[pLease->iSlot];
  if( LOAD(s->word)!=SLOT_WORD(pLease->iGen, SLOT_USED) ){
    return SQLITE_MISUSE;
  }
  STORE(s->bBroken, 1);
  return SQLITE_OK;
}

/* ----------------------------------------------------------- status --- */

int depot_pool_ready(depot_pool *p, int iTimeoutMs, char **pzReason){
  depot_lease l;
  char *zErr = 0;
  int rc;
  if( pzReason ) *pzReason = 0;
  rc = depot_poolint_acquire(p, DEPOT_LEASE_READ, iTimeoutMs, "readyz", 1, &l,
                            pzReason);
  if( rc!=SQLITE_OK ) return rc;
  rc = poolExec(l.db, "SELECT 1", &zErr);
  if( rc!=SQLITE_OK ){
    if( pzReason ) *pzReason = sqlite3_mprintf("open: %s", zErr);
    depot_lease_mark_broken(&l);
  }
  sqlite3_free(zErr);
  depot_pool_release(p, &l);
  return rc;
}

void depot_pool_status(depot_pool *p, depot_pool_stats *pStats){
  poolLeakScan(p);
  memset(pStats, 0, sizeof(*pStats));
  pStats->nSize = p->nSlot;
  pStats->nReader = p->nReader;
  pStats->nInUse = LOAD(p->nInUse);
  pStats->nWaiting = LOAD(p->nWaiting);
  pStats->nHolding = LOAD(p->nHolding);
  pStats->nPendingAsync = LOAD(p->nPendingAsync);
  pStats->nAcquired = LOAD(p->nAcquired);
  pStats->nTimeout = LOAD(p->nTimeout);
  pStats->nBroken = LOAD(p->nBroken);
  pStats->nLeaked = LOAD(p->nLeaked);
  pStats->nBadRelease = LOAD(p->nBadRelease);
  pStats->iLongestWaitUs = LOAD(p->iLongestWaitUs);
}

void depot_poolint_add_pending(depot_pool *p, int d){ ADD(p->nPendingAsync, d); }
void depot_poolint_add_holding(depot_pool *p, int d){ ADD(p->nHolding, d); }
