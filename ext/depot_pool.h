/*
** depot_pool.h -- public C interface of the connection pool and the async
** query runner of sqlite-depot (installed beside depot.h; link libdepot,
** `pkg-config --cflags --libs depot`).
**
** A pool (depot_pool) holds one writer connection and N reader
** connections on one database: a plain file, a depot database (a URI with
** vfs=depot) or a file with KV tables.  Every connection is opened in the
** process with the extension registered on it (sqlite3_depot_init), then
** runs the pool's init SQL.  Callers lease a connection for a while:
**
**     depot_lease l = DEPOT_LEASE_INIT;
**     char *zErr = 0;
**     if( depot_pool_acquire(pPool, DEPOT_LEASE_READ, 200, "GET /users",
**                            &l, &zErr)==SQLITE_OK ){
**       ... use l.db on this thread (or hand it to one other thread) ...
**       depot_lease_release(&l);
**     }
**
** or, scoped (GCC and Clang: the lease is released when the block is left
** by any path, return and goto included):
**
**     {
**       DEPOT_LEASE_SCOPE(l);
**       if( depot_pool_acquire(pPool, DEPOT_LEASE_WRITE, 200, "job", &l,
**                              0)!=SQLITE_OK ) return;
**       sqlite3_exec(l.db, "INSERT ...", 0, 0, 0);
**     }
**
** Every way out returns the slot: an explicit release (from any thread),
** the scope helper, and the exit of the thread that acquired the lease
** (a thread-exit destructor releases what it still holds).  A slot is
** reset (statements reset, a broken connection closed) before its permit
** is handed to the next waiter, so a caller that got a permit always finds
** a free slot in one pass: slots are claimed by compare-and-swap under a
** counting semaphore, and nobody spins.
**
** The async runner (depot_async) runs statements of a pool on worker
** threads and delivers their results, exactly once each, on a completion
** queue whose readiness is a file descriptor (an eventfd on Linux), so an
** event loop (epoll, libuv, io_uring) waits on it with everything else.
**
** Errors: every call returns an SQLite result code.  Calls that take a
** `char **pzErr` set it, on failure and when pzErr is not NULL, to a
** message from sqlite3_malloc() that the caller frees with sqlite3_free();
** messages of the pool's stages start with the stage: "pool_acquire: ",
** "open: ", "init_sql: ".
**
** Thread-safety: every function may be called from any thread at the same
** time as the others on the same pool or runner, except that
** depot_pool_close() and depot_async_free() must be the last call on their
** object.  A leased connection is used by one thread at a time (the pool
** opens connections with SQLITE_OPEN_NOMUTEX).  It may hold statements
** that an async runner keeps prepared on it (sqlite3_next_stmt lists
** them): the lease holder finalizes only statements it prepared.
*/
#ifndef DEPOT_POOL_H
#define DEPOT_POOL_H

#include <sqlite3.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct depot_pool depot_pool;
typedef struct depot_async depot_async;

/* ------------------------------------------------------------- pool --- */

/*
** Options of depot_pool_open().  Zero everywhere (or a NULL pointer) means
** the defaults given with each field.  The strings are copied by
** depot_pool_open().
*/
typedef struct depot_pool_options depot_pool_options;
struct depot_pool_options {
  int nReader;            /* reader connections; 0: 4; -1: none, reads use
                          ** the writer.  A ":memory:" or "" database has
                          ** none (its connections would not share data) */
  int bReadWriteReaders;  /* 0: readers open SQLITE_OPEN_READONLY where the
                          ** database allows (else read-write); 1: always
                          ** read-write */
  const char *zInitSql;   /* run on every connection after it opens (e.g.
                          ** "PRAGMA busy_timeout=5000"); NULL: none */
  /* Called on every connection after zInitSql (register the application's
  ** functions there).  Returns an SQLite code; not SQLITE_OK fails the
  ** open with stage "init_sql".  NULL: none. */
  int (*xInit)(void *pInitArg, sqlite3 *db, int bWriter);
  void *pInitArg;
  const char *zVfs;       /* VFS name for sqlite3_open_v2; NULL: default
                          ** (a URI's vfs= parameter works too) */
  const char *zName;      /* name in the process's pool registry, as SQL
                          ** sees it (depot_pool_status); NULL: "poolN" */
  int iLeakMs;            /* a lease held longer is counted and logged as
                          ** leaked; 0: 30000 */
  int iCloseMs;           /* depot_pool_close waits this long for leases;
                          ** 0: 5000 */
  /* Log sink (leaks, double releases, poisoned and replaced
  ** connections); iLevel is SQLITE_WARNING or SQLITE_NOTICE.  NULL:
  ** sqlite3_log(). */
  void (*xLog)(void *pLogArg, int iLevel, const char *zMsg);
  void *pLogArg;
};

/*
** Open a pool on zPath (a filename or a "file:" URI; SQLITE_OPEN_URI is
** set, and the depot VFS is registered first, so a depot database is
** "file:store.depot?vfs=depot&db=app") with options pOpt (NULL:
** defaults).  The writer opens with
** READWRITE|CREATE, then the readers; every connection gets the
** extension, then zInitSql, then xInit.  A reader that cannot open yet
** (SQLITE_CANTOPEN: a new depot database exists from its first commit)
** is opened by its first acquire instead.  On success *ppPool is the pool
** (the caller closes it with depot_pool_close) and SQLITE_OK is returned;
** on failure *ppPool is NULL, nothing is left open, and *pzErr names the
** stage ("open: ...", "init_sql: ...").  SQLITE_ERROR "registry: ..." when
** zName is already taken by an open pool.
*/
int depot_pool_open(const char *zPath, const depot_pool_options *pOpt,
                    depot_pool **ppPool, char **pzErr);

/*
** Close pool p: new acquires fail from now on, then it waits up to
** iCloseMs for every lease to come back.  SQLITE_OK: everything is closed
** and p is freed.  SQLITE_BUSY: leases are still held; *pzErr lists them
** (kind, tag, held ms) and p stays valid (still refusing acquires), so
** the caller may release them and call depot_pool_close() again.
*/
int depot_pool_close(depot_pool *p, char **pzErr);

/* Lease kinds. */
#define DEPOT_LEASE_READ  0   /* a reader connection (the writer if none) */
#define DEPOT_LEASE_WRITE 1   /* the writer connection */

/*
** A lease: a value the caller owns (usually on its stack).  db is the
** leased connection, valid until the lease is released.  The other fields
** belong to the pool.  DEPOT_LEASE_INIT is an empty lease, which release
** accepts and ignores.
*/
typedef struct depot_lease depot_lease;
struct depot_lease {
  sqlite3 *db;            /* the connection; NULL when empty */
  depot_pool *pPool;      /* the pool it came from; NULL when empty */
  int iSlot;              /* slot index */
  int eKind;              /* DEPOT_LEASE_READ or DEPOT_LEASE_WRITE */
  sqlite3_uint64 iGen;    /* the slot's generation when leased */
};
#define DEPOT_LEASE_INIT { 0, 0, 0, 0, 0 }

/*
** Lease a connection of kind eKind, waiting at most iTimeoutMs
** milliseconds (0: do not wait; <0: wait without limit).  zTag (copied;
** NULL: "?") says who holds it, for the leak detector and for close.  The
** lease belongs to the calling thread: if the thread exits still holding
** it, the lease is released for it.
**
** SQLITE_OK: *pLease is filled in.  SQLITE_BUSY: the timeout passed; the
** message is "pool_acquire: timeout: write lease after 201 ms (in use
** 1/1 writers, 4/4 readers, 3 waiting)".  The wait never exceeds the
** timeout and uses no CPU.  SQLITE_CANTOPEN or another code with "open:
** ..." or "init_sql: ...": the slot's connection (re)opened and failed; the
** slot is free again.  SQLITE_MISUSE: the pool is closing, or the calling
** thread is inside the callback of an async transaction (see
** depot_async_dispatch), where pool-level calls are refused.
*/
int depot_pool_acquire(depot_pool *p, int eKind, int iTimeoutMs,
                       const char *zTag, depot_lease *pLease,
                       char **pzErr);

/*
** Return lease pLease to pool p, from any thread.  The slot is reset
** first (its statements reset; a connection marked broken, or that last
** failed with SQLITE_IOERR, SQLITE_CORRUPT or SQLITE_NOTADB, or that is
** inside a transaction, is closed and reopened by the next acquire), then
** the permit goes back.  *pLease is emptied.
**
** SQLITE_OK: released, or pLease was empty (releasing twice through the
** same lease is harmless).  SQLITE_MISUSE, reported through the log and
** counted, the slot untouched: a stale copy of a lease already released
** (double release), or a lease of another pool (foreign release).
*/
int depot_pool_release(depot_pool *p, depot_lease *pLease);

/* depot_pool_release(pLease->pPool, pLease); SQLITE_OK for an empty
** lease. */
int depot_lease_release(depot_lease *pLease);

/* Mark the lease's connection broken: its release closes it.  Returns
** SQLITE_OK, or SQLITE_MISUSE for an empty or stale lease. */
int depot_lease_mark_broken(depot_lease *pLease);

/* Cleanup function of DEPOT_LEASE_SCOPE: depot_lease_release(pLease). */
void depot_lease_scope_end(depot_lease *pLease);

/* A lease variable released when its block is left (GCC, Clang). */
#define DEPOT_LEASE_SCOPE(name) \
  __attribute__((cleanup(depot_lease_scope_end))) \
  depot_lease name = DEPOT_LEASE_INIT

/*
** Readiness probe for a service's /readyz: lease a reader within
** iTimeoutMs, open it if it is closed, run "SELECT 1", release.  SQLITE_OK
** when all of it worked; else an error code and *pzReason (sqlite3_malloc;
** may be NULL) starting with the stage that failed: "pool_acquire: ",
** "open: " or "init_sql: ".  Never waits past iTimeoutMs for a slot.
*/
int depot_pool_ready(depot_pool *p, int iTimeoutMs, char **pzReason);

/*
** Counters and gauges of a pool, as depot_pool_status() fills them in (a
** snapshot: each field is read atomically, not all of them at once).
*/
typedef struct depot_pool_stats depot_pool_stats;
struct depot_pool_stats {
  int nSize;                  /* connections: 1 + nReader */
  int nReader;                /* reader connections */
  int nInUse;                 /* leases held now */
  int nWaiting;               /* callers waiting in acquire now */
  int nHolding;               /* async transactions holding the writer */
  int nPendingAsync;          /* async statements submitted, not complete */
  sqlite3_int64 nAcquired;    /* leases handed out */
  sqlite3_int64 nTimeout;     /* acquires that timed out */
  sqlite3_int64 nBroken;      /* connections closed as broken/poisoned */
  sqlite3_int64 nLeaked;      /* leases held longer than iLeakMs */
  sqlite3_int64 nBadRelease;  /* double and foreign releases refused */
  sqlite3_int64 iLongestWaitUs; /* longest wait of an acquire */
};

/* Fill *pStats for pool p.  Also runs the leak detector. */
void depot_pool_status(depot_pool *p, depot_pool_stats *pStats);

/* The pool's registry name (owned by the pool). */
const char *depot_pool_name(depot_pool *p);

/* ------------------------------------------------------------ async --- */

/* Options of depot_async_open(); zero (or NULL) means the defaults. */
typedef struct depot_async_options depot_async_options;
struct depot_async_options {
  int bInline;       /* 1: "async=0": every call runs on the caller's
                     ** thread before it returns, completions are queued
                     ** the same way (debugging) */
  int iGraceMs;      /* depot_async_shutdown lets running work finish
                     ** this long before it interrupts; 0: 2000 */
  int bClosePool;    /* 1: depot_async_free closes the pool too */
};

/* A bound parameter of a submitted statement (copied at submit). */
typedef struct depot_value depot_value;
struct depot_value {
  int eType;              /* SQLITE_INTEGER, _FLOAT, _TEXT, _BLOB, _NULL */
  sqlite3_int64 i;        /* SQLITE_INTEGER */
  double r;               /* SQLITE_FLOAT */
  const void *p;          /* SQLITE_TEXT (UTF-8), SQLITE_BLOB */
  int n;                  /* bytes at p; <0 for TEXT: up to the NUL */
};

/* A transaction token of depot_async_tx_begin (0: none). */
typedef sqlite3_uint64 depot_tx;

/*
** Statements stay prepared.  A runner keeps, on each pool connection, the
** 16 statements it ran last (SQLITE_PREPARE_PERSISTENT; SQL of more than
** one statement excepted), and a submit whose statement is kept there
** only rebinds and steps it, skipping the parse and plan.  SQL submits
** are found by their text (hashed, then compared); a recipe by its key.
**
** A prepared-statement recipe: the SQL of one statement, named once and
** then submitted by reference, with no copy or hash of its text per
** submit.  Rows, errors, timeouts and completions are those of submitting
** the same SQL.  A recipe belongs to no runner or pool: any runner may
** run it, from any thread.
**
**     depot_recipe *pGet = 0;
**     depot_async_recipe_new("SELECT v FROM t WHERE k=?1", &pGet);
**     s.pRecipe = pGet; s.nParam = 1; s.aParam = &key;   (s.zSql = NULL)
**     depot_async_submit(pAsync, &s, &zErr);
**     ...
**     depot_async_recipe_free(pGet);     (submits still queued keep it)
*/
typedef struct depot_recipe depot_recipe;

/* Make a recipe of zSql (copied; the first statement counts).
** SQLITE_OK with *ppRecipe set; SQLITE_NOMEM; SQLITE_MISUSE for NULL
** zSql.  Errors of the SQL itself (syntax, no such table) come back in
** the completions of its submits. */
int depot_async_recipe_new(const char *zSql, depot_recipe **ppRecipe);

/* Let go of the caller's reference to recipe r (NULL: no-op).  Submits
** already queued keep their own; a connection keeps the prepared
** statement until it is evicted or the connection closes. */
void depot_async_recipe_free(depot_recipe *r);

/*
** A submitted statement: either zSql (SQL text and bound parameters) or
** pRecipe (a recipe, with these bound parameters), not both.
*/
typedef struct depot_async_stmt depot_async_stmt;
struct depot_async_stmt {
  const char *zSql;       /* one statement (copied), or NULL */
  int nParam;             /* entries of aParam, bound as ?1..?n */
  const depot_value *aParam;
  int bWrite;             /* run on the writer (else a reader) */
  int iTimeoutMs;         /* <=0: 30000 */
  sqlite3_uint64 iTag;    /* handed back in the completion */
  depot_tx tx;            /* run inside this transaction (its lane) */
  depot_recipe *pRecipe;  /* the recipe to run (a reference is taken),
                          ** or NULL */
};

/* Completion kinds beyond SQLite codes: rc is SQLITE_OK or an SQLite
** error code; bTimeout marks a timeout (rc SQLITE_INTERRUPT). */
typedef struct depot_async_completion depot_async_completion;
struct depot_async_completion {
  sqlite3_uint64 iTag;    /* the submit's tag */
  int rc;                 /* SQLITE_OK or the error code */
  int bTimeout;           /* the timeout passed before the result */
  int bRetryable;         /* rerunning may succeed (timeouts, BUSY) */
  char *zErr;             /* message when rc!=SQLITE_OK */
  depot_tx tx;            /* the transaction (its token, after tx_begin) */
  int nCol;               /* result columns */
  int nRow;               /* result rows */
  char **azCol;           /* nCol column names */
  sqlite3_value **aValue; /* nRow*nCol values, row-major (sqlite3_value_*
                          ** reads them from any thread) */
  sqlite3_int64 nChange;  /* sqlite3_changes() after a write */
  sqlite3_int64 iLastRowid;
};

/*
** Start a runner of nWorker threads (<=0: 2) on pool p, plus a watchdog
** thread (timeouts) and a transaction lane thread.  With bInline none are
** started.  The pool must outlive the runner (unless bClosePool).
** SQLITE_OK with *ppAsync set, or an error with *pzErr.
*/
int depot_async_open(depot_pool *p, int nWorker,
                     const depot_async_options *pOpt, depot_async **ppAsync,
                     char **pzErr);

/*
** The descriptor that is readable while completions wait in the queue
** (an eventfd; a pipe's read end elsewhere).  Owned by the runner; wait on
** it with epoll/poll, then call depot_async_poll(), which drains it.
*/
int depot_async_fd(depot_async *a);

/*
** Take up to nMax completions, in completion order, into apOut; returns
** how many (0: none waiting).  Never blocks.  Each completion belongs to
** the caller, who frees it with depot_async_completion_free().
*/
int depot_async_poll(depot_async *a, depot_async_completion **apOut,
                     int nMax);

/* Free a completion (NULL: no-op). */
void depot_async_completion_free(depot_async_completion *pDone);

/*
** Take up to nMax completions and call xDone on each (then free it); the
** return is how many.  While xDone runs for a completion of an open
** transaction, pool-level calls on this thread (depot_async_submit
** without the token, depot_async_tx_begin, depot_pool_acquire) fail with
** SQLITE_MISUSE "... inside the callback of transaction N": inside a
** transaction only its own statements may run.
*/
int depot_async_dispatch(depot_async *a,
                         void (*xDone)(void*, depot_async_completion*),
                         void *pArg, int nMax);

/*
** Submit statement pStmt.  Returns SQLITE_OK when it is queued: exactly
** one completion with pStmt->iTag follows, with the rows, or an error, or
** bTimeout (rc SQLITE_INTERRUPT, bRetryable) when iTimeoutMs passes first
** (waiting for a connection included).  A timed-out statement is
** cancelled (sqlite3_interrupt, and a progress handler for a statement
** that had not started yet): one that stops leaves its connection in the
** pool; one that still completes afterwards has its result dropped and
** its connection poisoned: closed, never handed out again, and logged.
** Inside a transaction (pStmt->tx), statements run in submit order on the
** transaction lane; a timeout there queues the transaction's ROLLBACK,
** and later statements of it fail.  Errors at submit (nothing queued):
** SQLITE_MISUSE (runner shutting down, unknown or finished token, a
** pool-level call inside a transaction callback, neither or both of zSql
** and pRecipe), SQLITE_NOMEM.  The runner sets a progress handler on the
** connection while the statement runs.
*/
int depot_async_submit(depot_async *a, const depot_async_stmt *pStmt,
                       char **pzErr);

/*
** Begin a write transaction: off the caller's thread, lease the writer
** (waiting at most iTimeoutMs) and run BEGIN IMMEDIATE.  Returns the token
** in *pTx at once; the completion (tag iTag, tx the token) says whether
** the transaction began.  Statements bound to the token queue behind it.
*/
int depot_async_tx_begin(depot_async *a, int iTimeoutMs, sqlite3_uint64 iTag,
                         depot_tx *pTx, char **pzErr);

/* Queue COMMIT (bCommit) or ROLLBACK of transaction tx on its lane; the
** lease goes back to the pool after it (a failed COMMIT is rolled back).
** One completion with iTag. */
int depot_async_tx_end(depot_async *a, depot_tx tx, int bCommit,
                       int iTimeoutMs, sqlite3_uint64 iTag, char **pzErr);

/*
** Shut the runner down: intake closes (submits fail with SQLITE_MISUSE),
** queued and running work gets iGraceMs to finish, then what runs is
** interrupted and what waits completes with SQLITE_ABORT, open
** transactions are rolled back and their leases released, and the threads
** are joined.  Every submitted statement has its completion in the queue
** afterwards (poll them before depot_async_free).  Idempotent.
*/
void depot_async_shutdown(depot_async *a);

/* depot_async_shutdown(), then free the runner, its unpolled completions
** and its descriptor; with bClosePool close the pool as well (its result
** is returned; else SQLITE_OK). */
int depot_async_free(depot_async *a);

#ifdef __cplusplus
}
#endif
#endif /* DEPOT_POOL_H */
