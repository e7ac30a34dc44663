/*
** async.c -- the async query runner of ext/depot_pool.h: statements of a
** pool run on worker threads, results come back exactly once each on a
** completion queue whose readiness is an eventfd.
**
** Threads.  nWorker workers take jobs (statements, BEGIN of transactions)
** from one FIFO; each leases a connection for the job's remaining time,
** runs it and releases.  One lane thread runs the jobs bound to a
** transaction token (statements, COMMIT, ROLLBACK) in order, on the
** transaction's writer lease; BEGIN stays on the workers, so a BEGIN that
** waits for the writer never stalls the lane.  A watchdog thread sleeps
** until the earliest deadline of the jobs not yet completed.
**
** Exactly once.  A job is completed under the runner's mutex, once: by
** the thread that ran it, or by the watchdog with a timeout (then the
** running statement is interrupted with sqlite3_interrupt, which is safe
** from another thread while the connection stays open: the runner's mutex
** keeps it open until the runner clears AsyncJob.dbRunning; and the job's
** bCancel flag stops it through a progress handler, for an interrupt
** that came before sqlite3_step started).  A statement that stops with
** SQLITE_INTERRUPT afterwards is dropped, its connection kept; any other
** late result is a second completion, refused and logged, and its
** connection is poisoned (marked broken, so the pool closes it at
** release).  A timeout inside a transaction sets the transaction's
** rollback, which the lane runs next; its remaining statements complete
** with SQLITE_ABORT.
**
** Statements stay prepared: the worker takes the statement from its
** lease's connection, where the pool keeps the 16 most recently used
** (depot_poolint_stmt), keyed by a recipe's process-unique key or by the
** hash of the SQL text, and resets it after use.
**
** Inline mode runs the same functions on the caller's thread, the
** deadline enforced by a progress handler instead of the watchdog (a
** timeout inside a transaction then rolls it back at once).
*/
#include "config.h"
#include "ext/pool_int.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
# include <sys/eventfd.h>
#endif

#define JOB_STMT  0
#define JOB_BEGIN 1
#define JOB_END   2           /* COMMIT (bCommit) or ROLLBACK */

typedef struct AsyncTx AsyncTx;
typedef struct AsyncJob AsyncJob;

/* A prepared-statement recipe (depot_async_recipe_new).  Shared by the
** caller and the jobs that name it: freed when the last one lets go. */
struct depot_recipe {
  sqlite3_uint64 iKey;        /* unique in the process: the cache key */
  int nRef;                   /* atomic */
  char *zSql;                 /* the same allocation */
};

struct AsyncJob {
  int eOp;
  char *zSql;                 /* the SQL, or the recipe's */
  depot_recipe *pRecipe;      /* a reference, or NULL */
  int bCancel;                /* atomic: timed out, or shut down past the
                              ** grace (the cancel progress handler reads
                              ** it) */
  int nParam;
  depot_value *aParam;        /* deep copies, one allocation with the job */
  int bWrite;
  int bCommit;
  sqlite3_uint64 iTag;
  sqlite3_int64 iDeadlineUs;
  AsyncTx *pTx;
  int bCompleted;             /* under mu: its completion is queued */
  int bRunning;               /* under mu */
  sqlite3 *dbRunning;         /* under mu: what the watchdog interrupts */
  AsyncJob *pNext;            /* FIFO link */
  AsyncJob *pAllNext, *pAllPrev;  /* jobs not yet finished */
};

struct AsyncTx {
  depot_tx id;
  depot_lease lease;          /* the writer, once BEGIN worked */
  int bBegun;                 /* BEGIN finished (worked or not) */
  int bOpen;                  /* BEGIN worked, not yet ended */
  int bAbort;                 /* rolled back after a timeout/shutdown */
  int bNeedRollback;          /* the lane runs ROLLBACK next */
  int bEndQueued;             /* the caller queued COMMIT/ROLLBACK */
  AsyncJob *pFirst, *pLast;   /* its lane queue */
  AsyncTx *pNext;
};

typedef struct AsyncDone AsyncDone;
struct AsyncDone {
  depot_async_completion c;
  AsyncDone *pNext;
};

struct depot_async {
  depot_pool *pPool;
  depot_async_options opt;
  int nWorker;
  pthread_t *aWorker;
  pthread_t lane, dog;
  int bLane, bDog;
  pthread_mutex_t mu;
  pthread_cond_t condWork;    /* workers */
  pthread_cond_t condLane;    /* lane */
  pthread_cond_t condDog;     /* watchdog (CLOCK_MONOTONIC) */
  pthread_cond_t condIdle;    /* a job finished (shutdown waits) */
  AsyncJob *pFirst, *pLast;   /* worker FIFO */
  AsyncJob *pAll;             /* unfinished jobs */
  int nRunning;
  AsyncTx *pTxList;
  depot_tx iTxSeq;
  AsyncDone *pDoneFirst, *pDoneLast;
  int fdRead, fdWrite;
  int bClosing;               /* intake closed */
  int bStop;                  /* threads leave when idle */
  int bShutdown;              /* shutdown finished */
  sqlite3_int64 iDogTargetUs; /* what the watchdog sleeps until */
};

static sqlite3_int64 asyncNowUs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (sqlite3_int64)ts.tv_sec*1000000 + ts.tv_nsec/1000;
}

/* ------------------------------------------------------- completions --- */

/* Queue completion pD of job pJob (under mu).  SQLITE_MISUSE, pD freed,
** when the job already has its completion. */
static int asyncComplete(depot_async *a, AsyncJob *pJob, AsyncDone *pD){
  if( pJob->bCompleted ){
    depot_poolint_log(a->pPool, SQLITE_WARNING, "async: second completion of"
                   " tag %llu refused", (unsigned long long)pJob->iTag);
    depot_async_completion_free(&pD->c);
    return SQLITE_MISUSE;
  }
  pJob->bCompleted = 1;
  pD->c.iTag = pJob->iTag;
  pD->pNext = 0;
  if( a->pDoneLast ){
    a->pDoneLast->pNext = pD;
  }else{
    uint64_t one = 1;
    ssize_t n;
    a->pDoneFirst = pD;
#ifdef __linux__
    n = write(a->fdWrite, &one, sizeof(one));
#else
    n = write(a->fdWrite, &one, 1);
#endif
    (void)n;
  }
  a->pDoneLast = pD;
  depot_poolint_add_pending(a->pPool, -1);
  return SQLITE_OK;
}

static AsyncDone *asyncDoneNew(int rc, const char *zErr, depot_tx tx){
  AsyncDone *pD = sqlite3_malloc64(sizeof(*pD));
  if( pD==0 ) return 0;
  memset(pD, 0, sizeof(*pD));
  pD->c.rc = rc;
  pD->c.tx = tx;
  pD->c.bRetryable = (rc&0xff)==SQLITE_BUSY || (rc&0xff)==SQLITE_LOCKED;
  if( rc!=SQLITE_OK ) pD->c.zErr = sqlite3_mprintf("%s", zErr);
  return pD;
}

/* Complete pJob with an error (under mu).  Out of memory: the completion
** cannot be made; the job then counts as completed with nothing queued. */
static void asyncFail(depot_async *a, AsyncJob *pJob, int rc,
                      const char *zErr, int bTimeout){
  AsyncDone *pD = asyncDoneNew(rc, zErr, pJob->pTx ? pJob->pTx->id : 0);
  if( pD==0 ){
    pJob->bCompleted = 1;
    depot_poolint_add_pending(a->pPool, -1);
    return;
  }
  pD->c.bTimeout = bTimeout;
  if( bTimeout ) pD->c.bRetryable = 1;
  asyncComplete(a, pJob, pD);
}

void depot_async_completion_free(depot_async_completion *p){
  int i;
  if( p==0 ) return;
  for(i=0; i<p->nCol; i++) sqlite3_free(p->azCol[i]);
  for(i=0; i<p->nCol*p->nRow; i++) sqlite3_value_free(p->aValue[i]);
  sqlite3_free(p->azCol);
  sqlite3_free(p->aValue);
  sqlite3_free(p->zErr);
  sqlite3_free(p);          /* p is the first member of its AsyncDone */
}

int depot_async_fd(depot_async *a){
  return a->fdRead;
}

int depot_async_poll(depot_async *a, depot_async_completion **apOut,
                     int nMax){
  int n = 0;
  pthread_mutex_lock(&a->mu);
  while( n<nMax && a->pDoneFirst ){
    AsyncDone *pD = a->pDoneFirst;
    a->pDoneFirst = pD->pNext;
    if( a->pDoneFirst==0 ){
      uint64_t v;
      ssize_t r;
      a->pDoneLast = 0;
#ifdef __linux__
      r = read(a->fdRead, &v, sizeof(v));
#else
      r = read(a->fdRead, &v, 1);
#endif
      (void)r;
    }
    apOut[n++] = &pD->c;
  }
  pthread_mutex_unlock(&a->mu);
  return n;
}

static AsyncTx *asyncTxFind(depot_async *a, depot_tx id){
  AsyncTx *t;
  for(t=a->pTxList; t; t=t->pNext) if( t->id==id ) return t;
  return 0;
}

int depot_async_dispatch(depot_async *a,
                         void (*xDone)(void*, depot_async_completion*),
                         void *pArg, int nMax){
  depot_async_completion *ap[32];
  int nDone = 0;
  while( nDone<nMax ){
    int i, n = depot_async_poll(a, ap, nMax-nDone<32 ? nMax-nDone : 32);
    if( n==0 ) break;
    for(i=0; i<n; i++){
      depot_tx tx = 0;
      if( ap[i]->tx ){
        AsyncTx *t;
        pthread_mutex_lock(&a->mu);
        t = asyncTxFind(a, ap[i]->tx);
        if( t && !t->bEndQueued && (t->bOpen || !t->bBegun) ) tx = t->id;
        pthread_mutex_unlock(&a->mu);
      }
      depot_poolint_set_tx_scope(tx);
      xDone(pArg, ap[i]);
      depot_poolint_set_tx_scope(0);
      depot_async_completion_free(ap[i]);
    }
    nDone += n;
  }
  return nDone;
}

/* ------------------------------------------------------------- jobs --- */

/* A new job with copies of zSql and the parameters. */
static AsyncJob *asyncJobNew(int eOp, const char *zSql, int nParam,
                             const depot_value *aParam){
  sqlite3_int64 nByte = sizeof(AsyncJob) + (sqlite3_int64)nParam*sizeof(depot_value);
  AsyncJob *pJob;
  char *z;
  int i, nSql = zSql ? (int)strlen(zSql)+1 : 0;
  for(i=0; i<nParam; i++){
    const depot_value *v = &aParam[i];
    if( v->eType==SQLITE_TEXT || v->eType==SQLITE_BLOB ){
      int n = v->n<0 && v->eType==SQLITE_TEXT ? (int)strlen((const char*)v->p)
                                              : v->n;
      nByte += n+1;
    }
  }
  pJob = sqlite3_malloc64(nByte + nSql);
  if( pJob==0 ) return 0;
  memset(pJob, 0, sizeof(*pJob));
  pJob->eOp = eOp;
  pJob->nParam = nParam;
  pJob->aParam = (depot_value*)&pJob[1];
  z = (char*)&pJob->aParam[nParam];
  for(i=0; i<nParam; i++){
    depot_value *v = &pJob->aParam[i];
    *v = aParam[i];
    if( v->eType==SQLITE_TEXT || v->eType==SQLITE_BLOB ){
      if( v->n<0 ) v->n = (int)strlen((const char*)aParam[i].p);
      if( v->n ) memcpy(z, aParam[i].p, v->n);
      z[v->n] = 0;
      v->p = z;
      z += v->n+1;
    }
  }
  if( zSql ){
    memcpy(z, zSql, nSql);
    pJob->zSql = z;
  }
  return pJob;
}

static void asyncAllAdd(depot_async *a, AsyncJob *pJob){
  pJob->pAllPrev = 0;
  pJob->pAllNext = a->pAll;
  if( a->pAll ) a->pAll->pAllPrev = pJob;
  a->pAll = pJob;
  if( pJob->iDeadlineUs < a->iDogTargetUs ){
    a->iDogTargetUs = pJob->iDeadlineUs;
    pthread_cond_signal(&a->condDog);
  }
}

/* Forget a finished job (under mu) and free it. */
static void asyncJobDone(depot_async *a, AsyncJob *pJob){
  if( pJob->pAllPrev ) pJob->pAllPrev->pAllNext = pJob->pAllNext;
  else a->pAll = pJob->pAllNext;
  if( pJob->pAllNext ) pJob->pAllNext->pAllPrev = pJob->pAllPrev;
  depot_async_recipe_free(pJob->pRecipe);
  sqlite3_free(pJob);
  pthread_cond_broadcast(&a->condIdle);
}

/* Progress handler of inline mode: stop past the deadline. */
static int asyncDeadlineHandler(void *pArg){
  return asyncNowUs() > ((AsyncJob*)pArg)->iDeadlineUs;
}

/* Progress handler of the workers and the lane: stop once the job is
** cancelled (the watchdog completed it with its timeout, or shutdown's
** grace is over).  It closes the window that sqlite3_interrupt leaves: an
** interrupt that lands before the statement starts is cleared by
** sqlite3_step. */
static int asyncCancelHandler(void *pArg){
  return __atomic_load_n(&((AsyncJob*)pArg)->bCancel, __ATOMIC_ACQUIRE);
}

/* The statement-cache key of SQL text zSql: its FNV-1a hash, marked as
** SQL. */
static sqlite3_uint64 asyncSqlKey(const char *zSql){
  sqlite3_uint64 h = 0xcbf29ce484222325ULL;
  for(; *zSql; zSql++){
    h = (h ^ (unsigned char)*zSql) * 0x100000001b3ULL;
  }
  return h | DEPOT_POOL_KEY_SQL;
}

/* Run the job's statement (kept prepared on the connection, by its SQL
** text or its recipe's key) with its parameters on the connection of
** lease pLease, into a new completion.  *ppD: the completion (NULL when
** out of memory). */
static void asyncRunSql(depot_async *a, AsyncJob *pJob, depot_lease *pLease,
                        AsyncDone **ppD){
  sqlite3 *db = pLease->db;
  sqlite3_stmt *pStmt = 0;
  AsyncDone *pD = asyncDoneNew(SQLITE_OK, 0, pJob->pTx ? pJob->pTx->id : 0);
  int rc, i, nAlloc = 0, bKept = 0;
  *ppD = pD;
  if( pD==0 ) return;
  if( a->opt.bInline ){
    sqlite3_progress_handler(db, 1000, asyncDeadlineHandler, pJob);
  }else{
    sqlite3_progress_handler(db, 100, asyncCancelHandler, pJob);
  }
  rc = depot_poolint_stmt(pLease, pJob->pRecipe ? pJob->pRecipe->iKey
                                                : asyncSqlKey(pJob->zSql),
                          pJob->zSql, &pStmt, &bKept);
  for(i=0; rc==SQLITE_OK && i<pJob->nParam; i++){
    const depot_value *v = &pJob->aParam[i];
    switch( v->eType ){
      case SQLITE_INTEGER: rc = sqlite3_bind_int64(pStmt, i+1, v->i); break;
      case SQLITE_FLOAT:   rc = sqlite3_bind_double(pStmt, i+1, v->r); break;
      case SQLITE_TEXT:
        rc = sqlite3_bind_text(pStmt, i+1, v->p, v->n, SQLITE_STATIC);
        break;
      case SQLITE_BLOB:
        rc = sqlite3_bind_blob(pStmt, i+1, v->p, v->n, SQLITE_STATIC);
        break;
      default:             rc = sqlite3_bind_null(pStmt, i+1); break;
    }
  }
  if( rc==SQLITE_OK && pStmt ){
    int nCol = 0;
    rc = sqlite3_step(pStmt);
    /* The columns after the first step: a kept statement that the step
    ** re-prepared for a changed schema has its new columns only now. */
    if( rc==SQLITE_ROW || rc==SQLITE_DONE ){
      nCol = sqlite3_column_count(pStmt);
      if( nCol ){
        pD->c.azCol = sqlite3_malloc64(sizeof(char*)*nCol);
        if( pD->c.azCol==0 ) rc = SQLITE_NOMEM;
      }
      for(i=0; pD->c.azCol && i<nCol; i++){
        pD->c.azCol[i] = sqlite3_mprintf("%s", sqlite3_column_name(pStmt, i));
      }
      if( pD->c.azCol ) pD->c.nCol = nCol;
    }
    while( rc==SQLITE_ROW ){
      int n = pD->c.nRow*nCol;
      if( n+nCol > nAlloc ){
        int nNew = nAlloc ? nAlloc*2 : nCol*8;
        sqlite3_value **aNew;
        while( nNew < n+nCol ) nNew *= 2;
        aNew = sqlite3_realloc64(pD->c.aValue, sizeof(sqlite3_value*)*nNew);
        if( aNew==0 ){ rc = SQLITE_NOMEM; break; }
        pD->c.aValue = aNew;
        nAlloc = nNew;
      }
      for(i=0; i<nCol; i++){
        pD->c.aValue[n+i] = sqlite3_value_dup(sqlite3_column_value(pStmt, i));
      }
      pD->c.nRow++;
      rc = sqlite3_step(pStmt);
    }
    if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  }
  if( rc!=SQLITE_OK ){
    pD->c.rc = sqlite3_extended_errcode(db);
    if( pD->c.rc==SQLITE_OK ) pD->c.rc = rc;
    pD->c.zErr = sqlite3_mprintf("%s", sqlite3_errmsg(db));
    pD->c.bRetryable = (rc&0xff)==SQLITE_BUSY || (rc&0xff)==SQLITE_LOCKED;
    if( a->opt.bInline && (rc&0xff)==SQLITE_INTERRUPT
     && asyncNowUs()>pJob->iDeadlineUs ){
      pD->c.bTimeout = 1;
      pD->c.bRetryable = 1;
      sqlite3_free(pD->c.zErr);
      pD->c.zErr = sqlite3_mprintf("timeout");
    }
  }else{
    pD->c.nChange = sqlite3_changes64(db);
    pD->c.iLastRowid = sqlite3_last_insert_rowid(db);
  }
  if( bKept ){                   /* kept on the connection for the next */
    sqlite3_reset(pStmt);
    sqlite3_clear_bindings(pStmt);
  }else{
    sqlite3_finalize(pStmt);
  }
  sqlite3_progress_handler(db, 0, 0, 0);
}

/* Mark job pJob as running on db (under mu).  0: it already completed (a
** timeout while it waited), do not run it. */
static int asyncStart(depot_async *a, AsyncJob *pJob, sqlite3 *db){
  int bRun;
  pthread_mutex_lock(&a->mu);
  bRun = !pJob->bCompleted;
  if( bRun ) pJob->dbRunning = db;
  pthread_mutex_unlock(&a->mu);
  return bRun;
}

/* The statement of pJob returned with completion pD (may be NULL): queue
** it, or, when the job completed meanwhile (timeout), drop it: a
** statement that the cancel stopped (SQLITE_INTERRUPT) leaves its
** connection as it was; one that completed anyway is refused and poisons
** the lease.  Under no lock; takes mu. */
static void asyncFinish(depot_async *a, AsyncJob *pJob, AsyncDone *pD,
                        depot_lease *pLease){
  pthread_mutex_lock(&a->mu);
  pJob->dbRunning = 0;
  if( pJob->bCompleted && pD && (pD->c.rc&0xff)==SQLITE_INTERRUPT ){
    depot_poolint_log(a->pPool, SQLITE_NOTICE, "async: statement of tag"
                   " %llu stopped after its timeout",
                   (unsigned long long)pJob->iTag);
    depot_async_completion_free(&pD->c);
  }else if( pJob->bCompleted ){
    if( pLease && pLease->pPool ){
      depot_lease_mark_broken(pLease);
      depot_poolint_log(a->pPool, SQLITE_WARNING, "async: statement of tag %llu"
                     " completed after its timeout; its connection is"
                     " poisoned", (unsigned long long)pJob->iTag);
    }
    if( pD ) asyncComplete(a, pJob, pD);     /* refused and freed */
  }else if( pD ){
    asyncComplete(a, pJob, pD);
  }else{
    asyncFail(a, pJob, SQLITE_NOMEM, "out of memory", 0);
  }
  pthread_mutex_unlock(&a->mu);
}

/* Milliseconds left until the job's deadline (at least 0). */
static int asyncLeftMs(AsyncJob *pJob){
  sqlite3_int64 d = pJob->iDeadlineUs - asyncNowUs();
  return d<=0 ? 0 : (int)((d+999)/1000);
}

/* A statement job outside transactions: lease, run, release. */
static void asyncRunStmt(depot_async *a, AsyncJob *pJob){
  depot_lease l;
  char *zErr = 0;
  AsyncDone *pD = 0;
  int rc = depot_poolint_acquire(a->pPool, pJob->bWrite ? DEPOT_LEASE_WRITE
                                : DEPOT_LEASE_READ, asyncLeftMs(pJob),
                                "async", 0, &l, &zErr);
  if( rc!=SQLITE_OK ){
    pthread_mutex_lock(&a->mu);
    if( !pJob->bCompleted ) asyncFail(a, pJob, rc, zErr, 0);
    pthread_mutex_unlock(&a->mu);
    sqlite3_free(zErr);
    return;
  }
  if( asyncStart(a, pJob, l.db) ){
    asyncRunSql(a, pJob, &l, &pD);
    asyncFinish(a, pJob, pD, &l);
  }
  depot_pool_release(a->pPool, &l);
}

/* BEGIN of a transaction: lease the writer, BEGIN IMMEDIATE. */
static void asyncRunBegin(depot_async *a, AsyncJob *pJob){
  AsyncTx *t = pJob->pTx;
  depot_lease l;
  char *zErr = 0;
  AsyncDone *pD = 0;
  int rc = depot_poolint_acquire(a->pPool, DEPOT_LEASE_WRITE,
                                asyncLeftMs(pJob), "async tx", 0, &l, &zErr);
  if( rc==SQLITE_OK && asyncStart(a, pJob, l.db) ){
    rc = sqlite3_exec(l.db, "BEGIN IMMEDIATE", 0, 0, 0);
    pD = asyncDoneNew(rc, sqlite3_errmsg(l.db), t->id);
    pthread_mutex_lock(&a->mu);
    pJob->dbRunning = 0;
    if( rc==SQLITE_OK && !pJob->bCompleted && !a->bStop && !t->bAbort ){
      t->lease = l;
      t->bOpen = 1;
      depot_poolint_add_holding(a->pPool, 1);
      memset(&l, 0, sizeof(l));
    }else if( rc==SQLITE_OK && pJob->bCompleted ){
      depot_lease_mark_broken(&l);
      depot_poolint_log(a->pPool, SQLITE_WARNING, "async: BEGIN of transaction"
                     " %llu completed after its timeout; its connection is"
                     " poisoned", (unsigned long long)t->id);
    }
    if( !t->bOpen ) t->bAbort = 1;
    t->bBegun = 1;
    if( pD ) asyncComplete(a, pJob, pD);
    else if( !pJob->bCompleted ) asyncFail(a, pJob, SQLITE_NOMEM, "oom", 0);
    pthread_cond_signal(&a->condLane);
    pthread_mutex_unlock(&a->mu);
    if( l.pPool ){
      sqlite3_exec(l.db, "ROLLBACK", 0, 0, 0);
      depot_pool_release(a->pPool, &l);
    }
    return;
  }
  if( l.pPool ) depot_pool_release(a->pPool, &l);
  pthread_mutex_lock(&a->mu);
  t->bBegun = 1;
  t->bAbort = 1;
  if( !pJob->bCompleted ) asyncFail(a, pJob, rc, zErr, 0);
  pthread_cond_signal(&a->condLane);
  pthread_mutex_unlock(&a->mu);
  sqlite3_free(zErr);
}

/* ROLLBACK of an open transaction and release of its lease (the lane, or
** the caller in inline mode).  Not under mu. */
static void asyncTxClose(depot_async *a, AsyncTx *t){
  if( t->lease.pPool ){
    sqlite3_exec(t->lease.db, "ROLLBACK", 0, 0, 0);
    depot_pool_release(a->pPool, &t->lease);
    depot_poolint_add_holding(a->pPool, -1);
  }
}

static void asyncTxUnlink(depot_async *a, AsyncTx *t){
  AsyncTx **pp;
  for(pp=&a->pTxList; *pp; pp=&(*pp)->pNext){
    if( *pp==t ){ *pp = t->pNext; break; }
  }
  sqlite3_free(t);
}

/* Run one job of transaction t (the lane; inline: the caller). */
static void asyncRunTxJob(depot_async *a, AsyncTx *t, AsyncJob *pJob){
  AsyncDone *pD = 0;
  int bAbort, bOpen;
  pthread_mutex_lock(&a->mu);
  bAbort = t->bAbort;
  bOpen = t->bOpen;
  pthread_mutex_unlock(&a->mu);
  if( pJob->eOp==JOB_STMT ){
    if( bAbort || !bOpen ){
      pthread_mutex_lock(&a->mu);
      if( !pJob->bCompleted ){
        asyncFail(a, pJob, SQLITE_ABORT, "transaction was rolled back"
                  " (timeout, failed BEGIN or shutdown)", 0);
      }
      pthread_mutex_unlock(&a->mu);
      return;
    }
    if( asyncStart(a, pJob, t->lease.db) ){
      int bTimeout;
      asyncRunSql(a, pJob, &t->lease, &pD);
      bTimeout = pD && pD->c.bTimeout;      /* inline mode's own timeout */
      asyncFinish(a, pJob, pD, &t->lease);
      if( bTimeout ){                       /* as the watchdog would */
        pthread_mutex_lock(&a->mu);
        t->bAbort = 1;
        pthread_mutex_unlock(&a->mu);
        asyncTxClose(a, t);
        pthread_mutex_lock(&a->mu);
        t->bOpen = 0;
        pthread_mutex_unlock(&a->mu);
      }
    }
    return;
  }
  /* JOB_END */
  if( bOpen && !bAbort ){
    int rc = SQLITE_OK;
    if( asyncStart(a, pJob, t->lease.db) ){
      rc = sqlite3_exec(t->lease.db, pJob->bCommit ? "COMMIT" : "ROLLBACK",
                        0, 0, 0);
      pD = asyncDoneNew(rc, sqlite3_errmsg(t->lease.db), t->id);
      asyncFinish(a, pJob, pD, &t->lease);
    }
    asyncTxClose(a, t);
  }else{
    pthread_mutex_lock(&a->mu);
    if( !pJob->bCompleted ){
      if( pJob->bCommit ){
        asyncFail(a, pJob, SQLITE_ABORT, "transaction was rolled back"
                  " (timeout, failed BEGIN or shutdown)", 0);
      }else{
        AsyncDone *pOk = asyncDoneNew(SQLITE_OK, 0, t->id);
        if( pOk ) asyncComplete(a, pJob, pOk);
        else asyncFail(a, pJob, SQLITE_NOMEM, "out of memory", 0);
      }
    }
    pthread_mutex_unlock(&a->mu);
    asyncTxClose(a, t);
  }
  pthread_mutex_lock(&a->mu);
  t->bOpen = 0;
  pthread_mutex_unlock(&a->mu);
}

/* --------------------------------------------------------- threads --- */

static void *asyncWorkerMain(void *pArg){
  depot_async *a = (depot_async*)pArg;
  pthread_mutex_lock(&a->mu);
  for(;;){
    AsyncJob *pJob = a->pFirst;
    if( pJob==0 ){
      if( a->bStop ) break;
      pthread_cond_wait(&a->condWork, &a->mu);
      continue;
    }
    a->pFirst = pJob->pNext;
    if( a->pFirst==0 ) a->pLast = 0;
    a->nRunning++;
    pthread_mutex_unlock(&a->mu);
    if( pJob->eOp==JOB_BEGIN ) asyncRunBegin(a, pJob);
    else asyncRunStmt(a, pJob);
    pthread_mutex_lock(&a->mu);
    a->nRunning--;
    asyncJobDone(a, pJob);
  }
  pthread_mutex_unlock(&a->mu);
  return 0;
}

/* The next runnable transaction job (under mu): a rollback to run (*pbRb
** set, NULL returned with *ppTx), or a queued job of a begun
** transaction.  A transaction that is over and fully ended is freed. */
static AsyncJob *asyncLaneNext(depot_async *a, AsyncTx **ppTx, int *pbRb){
  AsyncTx *t, *pNext;
  *pbRb = 0;
  for(t=a->pTxList; t; t=pNext){
    pNext = t->pNext;
    if( !t->bBegun ) continue;
    if( t->bNeedRollback ){
      t->bNeedRollback = 0;
      *ppTx = t;
      *pbRb = 1;
      return 0;
    }
    if( t->pFirst ){
      AsyncJob *pJob = t->pFirst;
      t->pFirst = pJob->pNext;
      if( t->pFirst==0 ) t->pLast = 0;
      *ppTx = t;
      return pJob;
    }
  }
  return 0;
}

static void *asyncLaneMain(void *pArg){
  depot_async *a = (depot_async*)pArg;
  pthread_mutex_lock(&a->mu);
  for(;;){
    AsyncTx *t = 0;
    int bRb;
    AsyncJob *pJob = asyncLaneNext(a, &t, &bRb);
    if( pJob==0 && !bRb ){
      if( a->bStop ){
        AsyncTx *x;
        int bBusy = 0;
        for(x=a->pTxList; x; x=x->pNext){
          if( !x->bBegun || x->pFirst || x->bNeedRollback ) bBusy = 1;
        }
        if( !bBusy ) break;
      }
      pthread_cond_wait(&a->condLane, &a->mu);
      continue;
    }
    a->nRunning++;
    pthread_mutex_unlock(&a->mu);
    if( bRb ){
      asyncTxClose(a, t);
      pthread_mutex_lock(&a->mu);
      t->bOpen = 0;
    }else{
      asyncRunTxJob(a, t, pJob);
      pthread_mutex_lock(&a->mu);
      if( pJob->eOp==JOB_END ){
        t->bEndQueued = 2;         /* ended: nothing more may come */
      }
    }
    a->nRunning--;
    if( pJob ) asyncJobDone(a, pJob);
    else pthread_cond_broadcast(&a->condIdle);
    if( t->bEndQueued==2 && t->pFirst==0 && !t->bOpen ) asyncTxUnlink(a, t);
  }
  pthread_mutex_unlock(&a->mu);
  return 0;
}

/* Time out every job past its deadline (under mu); returns the earliest
** deadline left (INT64_MAX: none). */
static sqlite3_int64 asyncExpire(depot_async *a){
  sqlite3_int64 iNow = asyncNowUs(), iMin = INT64_MAX;
  AsyncJob *pJob;
  for(pJob=a->pAll; pJob; pJob=pJob->pAllNext){
    if( pJob->bCompleted ) continue;
    if( pJob->iDeadlineUs<=iNow ){
      __atomic_store_n(&pJob->bCancel, 1, __ATOMIC_RELEASE);
      asyncFail(a, pJob, SQLITE_INTERRUPT, "timeout", 1);
      if( pJob->dbRunning ) sqlite3_interrupt(pJob->dbRunning);
      if( pJob->pTx && pJob->eOp!=JOB_BEGIN && !pJob->pTx->bAbort ){
        pJob->pTx->bAbort = 1;
        if( pJob->pTx->bOpen ) pJob->pTx->bNeedRollback = 1;
        pthread_cond_signal(&a->condLane);
      }
    }else if( pJob->iDeadlineUs<iMin ){
      iMin = pJob->iDeadlineUs;
    }
  }
  return iMin;
}

static void *asyncDogMain(void *pArg){
  depot_async *a = (depot_async*)pArg;
  pthread_mutex_lock(&a->mu);
  while( !a->bStop ){
    sqlite3_int64 iNext = asyncExpire(a);
    a->iDogTargetUs = iNext;
    if( iNext==INT64_MAX ){
      pthread_cond_wait(&a->condDog, &a->mu);
    }else{
      struct timespec ts;
      ts.tv_sec = iNext/1000000;
      ts.tv_nsec = (long)(iNext%1000000)*1000;
      pthread_cond_timedwait(&a->condDog, &a->mu, &ts);
    }
  }
  pthread_mutex_unlock(&a->mu);
  return 0;
}

/* ------------------------------------------------------- open/submit --- */

int depot_async_open(depot_pool *p, int nWorker,
                     const depot_async_options *pOpt, depot_async **ppAsync,
                     char **pzErr){
  depot_async *a;
  pthread_condattr_t ca;
  int i, fds[2];
  *ppAsync = 0;
  if( pzErr ) *pzErr = 0;
  a = sqlite3_malloc64(sizeof(*a));
  if( a==0 ) return SQLITE_NOMEM;
  memset(a, 0, sizeof(*a));
  a->pPool = p;
  if( pOpt ) a->opt = *pOpt;
  if( a->opt.iGraceMs<=0 ) a->opt.iGraceMs = 2000;
  a->nWorker = nWorker<=0 ? 2 : nWorker;
  a->iDogTargetUs = INT64_MAX;
#ifdef __linux__
  fds[0] = fds[1] = eventfd(0, EFD_NONBLOCK|EFD_CLOEXEC);
  if( fds[0]<0 ){
#else
  if( pipe(fds)==0 ){
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
  }else{
#endif
    if( pzErr ) *pzErr = sqlite3_mprintf("async: eventfd: %s",
                                         strerror(errno));
    sqlite3_free(a);
    return SQLITE_CANTOPEN;
  }
  a->fdRead = fds[0];
  a->fdWrite = fds[1];
  pthread_mutex_init(&a->mu, 0);
  pthread_cond_init(&a->condWork, 0);
  pthread_cond_init(&a->condLane, 0);
  pthread_cond_init(&a->condIdle, 0);
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&a->condDog, &ca);
  pthread_condattr_destroy(&ca);
  if( a->opt.bInline ){
    a->nWorker = 0;
  }else{
    a->aWorker = sqlite3_malloc64(sizeof(pthread_t)*a->nWorker);
    if( a->aWorker==0 ){
      a->nWorker = 0;
      depot_async_free(a);
      return SQLITE_NOMEM;
    }
    for(i=0; i<a->nWorker; i++){
      if( pthread_create(&a->aWorker[i], 0, asyncWorkerMain, a) ) break;
    }
    a->nWorker = i;
    a->bLane = pthread_create(&a->lane, 0, asyncLaneMain, a)==0;
    a->bDog = pthread_create(&a->dog, 0, asyncDogMain, a)==0;
    if( a->nWorker==0 || !a->bLane || !a->bDog ){
      if( pzErr ) *pzErr = sqlite3_mprintf("async: cannot start threads");
      depot_async_free(a);
      return SQLITE_ERROR;
    }
  }
  *ppAsync = a;
  return SQLITE_OK;
}

/* SQLITE_MISUSE with *pzErr when the runner refuses a submit (under mu). */
static int asyncRefuse(depot_async *a, int bPoolLevel, char **pzErr){
  if( a->bClosing ){
    if( pzErr ) *pzErr = sqlite3_mprintf("async: the runner is shutting"
                                         " down");
    return SQLITE_MISUSE;
  }
  if( bPoolLevel && depot_poolint_tx_scope() ){
    if( pzErr ){
      *pzErr = sqlite3_mprintf("async: pool-level call inside the callback"
                               " of transaction %llu; use its token",
                               (unsigned long long)depot_poolint_tx_scope());
    }
    return SQLITE_MISUSE;
  }
  return SQLITE_OK;
}

static sqlite3_int64 asyncDeadline(int iTimeoutMs){
  if( iTimeoutMs<=0 ) iTimeoutMs = 30000;
  return asyncNowUs() + (sqlite3_int64)iTimeoutMs*1000;
}

/* Queue job pJob of transaction t (NULL: the workers' FIFO), or run it at
** once in inline mode.  Takes ownership of pJob. */
static void asyncEnqueue(depot_async *a, AsyncTx *t, AsyncJob *pJob){
  pJob->pTx = t;
  depot_poolint_add_pending(a->pPool, 1);
  asyncAllAdd(a, pJob);
  if( t && pJob->eOp!=JOB_BEGIN ){
    if( t->pLast ) t->pLast->pNext = pJob; else t->pFirst = pJob;
    t->pLast = pJob;
    pthread_cond_signal(&a->condLane);
  }else{
    if( a->pLast ) a->pLast->pNext = pJob; else a->pFirst = pJob;
    a->pLast = pJob;
    pthread_cond_signal(&a->condWork);
  }
}

/* Inline mode: run pJob (already in pAll, not in a queue) now. */
static void asyncRunInline(depot_async *a, AsyncTx *t, AsyncJob *pJob){
  if( pJob->eOp==JOB_BEGIN ) asyncRunBegin(a, pJob);
  else if( t ) asyncRunTxJob(a, t, pJob);
  else asyncRunStmt(a, pJob);
  pthread_mutex_lock(&a->mu);
  if( t && pJob->eOp==JOB_END ){
    t->bEndQueued = 2;
    asyncJobDone(a, pJob);
    if( !t->bOpen ) asyncTxUnlink(a, t);
  }else{
    asyncJobDone(a, pJob);
  }
  pthread_mutex_unlock(&a->mu);
}

/* Common tail of the submits: queue (or run inline) a new job. */
static int asyncSubmitJob(depot_async *a, AsyncTx *t, AsyncJob *pJob){
  if( a->opt.bInline ){
    pJob->pTx = t;
    depot_poolint_add_pending(a->pPool, 1);
    asyncAllAdd(a, pJob);
    pthread_mutex_unlock(&a->mu);
    asyncRunInline(a, t, pJob);
    return SQLITE_OK;
  }
  asyncEnqueue(a, t, pJob);
  pthread_mutex_unlock(&a->mu);
  return SQLITE_OK;
}

int depot_async_submit(depot_async *a, const depot_async_stmt *pStmt,
                       char **pzErr){
  AsyncJob *pJob;
  AsyncTx *t = 0;
  int rc;
  if( pzErr ) *pzErr = 0;
  if( pStmt==0 || (pStmt->zSql==0)==(pStmt->pRecipe==0) || pStmt->nParam<0
   || (pStmt->nParam>0 && pStmt->aParam==0) ){
    if( pzErr ){
      *pzErr = sqlite3_mprintf("async: a statement needs zSql or pRecipe"
                               " (not both) and nParam>=0 with aParam");
    }
    return SQLITE_MISUSE;
  }
  pJob = asyncJobNew(JOB_STMT, pStmt->zSql, pStmt->nParam, pStmt->aParam);
  if( pJob==0 ) return SQLITE_NOMEM;
  if( pStmt->pRecipe ){
    pJob->pRecipe = pStmt->pRecipe;
    __atomic_add_fetch(&pJob->pRecipe->nRef, 1, __ATOMIC_ACQ_REL);
    pJob->zSql = pJob->pRecipe->zSql;
  }
  pJob->bWrite = pStmt->bWrite;
  pJob->iTag = pStmt->iTag;
  pJob->iDeadlineUs = asyncDeadline(pStmt->iTimeoutMs);
  pthread_mutex_lock(&a->mu);
  rc = asyncRefuse(a, pStmt->tx==0, pzErr);
  if( rc==SQLITE_OK && pStmt->tx ){
    t = asyncTxFind(a, pStmt->tx);
    if( t==0 || t->bEndQueued ){
      if( pzErr ){
        *pzErr = sqlite3_mprintf("async: transaction %llu is %s",
            (unsigned long long)pStmt->tx, t ? "ended" : "unknown");
      }
      rc = SQLITE_MISUSE;
    }
  }
  if( rc!=SQLITE_OK ){
    pthread_mutex_unlock(&a->mu);
    depot_async_recipe_free(pJob->pRecipe);
    sqlite3_free(pJob);
    return rc;
  }
  return asyncSubmitJob(a, t, pJob);
}

int depot_async_tx_begin(depot_async *a, int iTimeoutMs, sqlite3_uint64 iTag,
                         depot_tx *pTx, char **pzErr){
  AsyncJob *pJob;
  AsyncTx *t;
  int rc;
  if( pzErr ) *pzErr = 0;
  *pTx = 0;
  pJob = asyncJobNew(JOB_BEGIN, 0, 0, 0);
  t = sqlite3_malloc64(sizeof(*t));
  if( pJob==0 || t==0 ){
    sqlite3_free(pJob);
    sqlite3_free(t);
    return SQLITE_NOMEM;
  }
  memset(t, 0, sizeof(*t));
  pJob->iTag = iTag;
  pJob->iDeadlineUs = asyncDeadline(iTimeoutMs);
  pthread_mutex_lock(&a->mu);
  rc = asyncRefuse(a, 1, pzErr);
  if( rc!=SQLITE_OK ){
    pthread_mutex_unlock(&a->mu);
    sqlite3_free(pJob);
    sqlite3_free(t);
    return rc;
  }
  t->id = ++a->iTxSeq;
  t->pNext = a->pTxList;
  a->pTxList = t;
  *pTx = t->id;
  return asyncSubmitJob(a, t, pJob);
}

int depot_async_tx_end(depot_async *a, depot_tx tx, int bCommit,
                       int iTimeoutMs, sqlite3_uint64 iTag, char **pzErr){
  AsyncJob *pJob;
  AsyncTx *t;
  int rc;
  if( pzErr ) *pzErr = 0;
  pJob = asyncJobNew(JOB_END, 0, 0, 0);
  if( pJob==0 ) return SQLITE_NOMEM;
  pJob->bCommit = bCommit;
  pJob->iTag = iTag;
  pJob->iDeadlineUs = asyncDeadline(iTimeoutMs);
  pthread_mutex_lock(&a->mu);
  rc = asyncRefuse(a, 0, pzErr);
  t = asyncTxFind(a, tx);
  if( rc==SQLITE_OK && (t==0 || t->bEndQueued) ){
    if( pzErr ){
      *pzErr = sqlite3_mprintf("async: transaction %llu is %s",
                               (unsigned long long)tx, t ? "ended":"unknown");
    }
    rc = SQLITE_MISUSE;
  }
  if( rc!=SQLITE_OK ){
    pthread_mutex_unlock(&a->mu);
    sqlite3_free(pJob);
    return rc;
  }
  t->bEndQueued = 1;
  return asyncSubmitJob(a, t, pJob);
}

/* ----------------------------------------------------------- recipes --- */

int depot_async_recipe_new(const char *zSql, depot_recipe **ppRecipe){
  static sqlite3_uint64 iKeySeq = 0;
  depot_recipe *r;
  size_t n;
  *ppRecipe = 0;
  if( zSql==0 ) return SQLITE_MISUSE;
  n = strlen(zSql);
  r = sqlite3_malloc64(sizeof(*r) + n + 1);
  if( r==0 ) return SQLITE_NOMEM;
  r->iKey = __atomic_add_fetch(&iKeySeq, 1, __ATOMIC_RELAXED);
  r->nRef = 1;
  r->zSql = (char*)&r[1];
  memcpy(r->zSql, zSql, n+1);
  *ppRecipe = r;
  return SQLITE_OK;
}

void depot_async_recipe_free(depot_recipe *r){
  if( r && __atomic_sub_fetch(&r->nRef, 1, __ATOMIC_ACQ_REL)==0 ){
    sqlite3_free(r);
  }
}

/* ---------------------------------------------------------- shutdown --- */

void depot_async_shutdown(depot_async *a){
  sqlite3_int64 iEnd;
  AsyncJob *pJob;
  AsyncTx *t;
  int i;
  pthread_mutex_lock(&a->mu);
  if( a->bShutdown ){
    pthread_mutex_unlock(&a->mu);
    return;
  }
  a->bClosing = 1;
  /* Grace: queued and running work finishes. */
  iEnd = asyncNowUs() + (sqlite3_int64)a->opt.iGraceMs*1000;
  while( a->pAll ){
    struct timespec ts;
    sqlite3_int64 iLeft = iEnd - asyncNowUs();
    int bWork = a->pFirst!=0 || a->nRunning>0;
    for(t=a->pTxList; t && !bWork; t=t->pNext){
      if( t->pFirst && t->bBegun ) bWork = 1;
    }
    if( !bWork || iLeft<=0 || a->opt.bInline ) break;
    if( iLeft>20000 ) iLeft = 20000;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(iLeft%1000000)*1000;
    ts.tv_sec += iLeft/1000000 + ts.tv_nsec/1000000000;
    ts.tv_nsec %= 1000000000;
    pthread_cond_timedwait(&a->condIdle, &a->mu, &ts);
  }
  /* Past the grace: interrupt what runs, abort what waits, roll back
  ** open transactions. */
  for(pJob=a->pAll; pJob; pJob=pJob->pAllNext){
    __atomic_store_n(&pJob->bCancel, 1, __ATOMIC_RELEASE);  /* not started */
    if( pJob->dbRunning ) sqlite3_interrupt(pJob->dbRunning);
  }
  while( (pJob = a->pFirst)!=0 ){
    a->pFirst = pJob->pNext;
    if( !pJob->bCompleted ){
      asyncFail(a, pJob, SQLITE_ABORT, "async: shut down", 0);
    }
    if( pJob->eOp==JOB_BEGIN ){
      pJob->pTx->bBegun = 1;
      pJob->pTx->bAbort = 1;
    }
    asyncJobDone(a, pJob);
  }
  a->pLast = 0;
  for(t=a->pTxList; t; t=t->pNext){
    while( (pJob = t->pFirst)!=0 ){
      t->pFirst = pJob->pNext;
      if( !pJob->bCompleted ){
        asyncFail(a, pJob, SQLITE_ABORT, "async: shut down", 0);
      }
      asyncJobDone(a, pJob);
    }
    t->pLast = 0;
    t->bAbort = 1;
    t->bEndQueued = 2;
    if( t->bOpen ) t->bNeedRollback = 1;
  }
  a->bStop = 1;
  pthread_cond_broadcast(&a->condWork);
  pthread_cond_broadcast(&a->condLane);
  pthread_cond_broadcast(&a->condDog);
  pthread_mutex_unlock(&a->mu);
  for(i=0; i<a->nWorker; i++) pthread_join(a->aWorker[i], 0);
  pthread_mutex_lock(&a->mu);
  pthread_cond_broadcast(&a->condLane);
  pthread_mutex_unlock(&a->mu);
  if( a->bLane ) pthread_join(a->lane, 0);
  if( a->bDog ) pthread_join(a->dog, 0);
  a->nWorker = 0;
  a->bLane = a->bDog = 0;
  /* Inline mode, or transactions the lane did not reach: roll back. */
  pthread_mutex_lock(&a->mu);
  while( (t = a->pTxList)!=0 ){
    a->pTxList = t->pNext;
    pthread_mutex_unlock(&a->mu);
    if( t->bOpen ) asyncTxClose(a, t);
    sqlite3_free(t);
    pthread_mutex_lock(&a->mu);
  }
  a->bShutdown = 1;
  pthread_mutex_unlock(&a->mu);
}

int depot_async_free(depot_async *a){
  AsyncDone *pD;
  int rc = SQLITE_OK;
  if( a==0 ) return SQLITE_OK;
  depot_async_shutdown(a);
  while( (pD = a->pDoneFirst)!=0 ){
    a->pDoneFirst = pD->pNext;
    depot_async_completion_free(&pD->c);
  }
  close(a->fdRead);
  if( a->fdWrite!=a->fdRead ) close(a->fdWrite);
  pthread_cond_destroy(&a->condWork);
  pthread_cond_destroy(&a->condLane);
  pthread_cond_destroy(&a->condDog);
  pthread_cond_destroy(&a->condIdle);
  pthread_mutex_destroy(&a->mu);
  if( a->opt.bClosePool ) rc = depot_pool_close(a->pPool, 0);
  sqlite3_free(a->aWorker);
  sqlite3_free(a);
  return rc;
}
