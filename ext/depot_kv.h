/*
** depot_kv.h -- public C interface of the write hooks of sqlite-depot's
** KV tables (installed beside depot.h; link libdepot, `pkg-config --cflags
** --libs depot`).
**
** Also here: watch subscriptions (depot_kv_watch_*, at the end), the
** changes of a table queued for a subscriber thread.
**
** A write hook is a set of C callbacks on one KV table (kv_memory,
** kv_btree or kv_log): xWrite hears every key a committed transaction
** wrote to the table, with the new value and, on request, the old one;
** xInit hears every live row once when the hook is registered.  They are
** the tool for derived state kept outside the store -- an in-memory index
** or cache, a metric, a notification -- fed exactly once per change:
**
**     static void onWrite(void *pArg, const depot_kv_value *pKey,
**                         const depot_kv_value *pOld,
**                         const depot_kv_value *pNew){ ... }
**     static const depot_kv_hook_methods m = { 1, onWrite, 0, 0, 0 };
**     depot_kv_hook *pHook = 0;
**     char *zErr = 0;
**     if( depot_kv_hook_register(db, 0, "users", DEPOT_KV_HOOK_NEEDS_WRITE,
**                                &m, pState, &pHook, &zErr)!=SQLITE_OK ){
**       ... zErr says why; sqlite3_free(zErr) ...
**     }
**     ...
**     depot_kv_hook_unregister(pHook);
**
** The table is named as a connection sees it, and the hook is bound to
** the KV table behind that name in its store, not to the connection: it
** hears the commits of every connection of the process that write that
** table, through any declaration of it (main, temp) or the kv_* SQL
** functions (kv_put, kv_delete, kv_commit).  The connection must have
** the extension registered by this library (sqlite3_depot_init of
** libdepot, or sqlite3_auto_extension of it); a table declared through a
** depot module loaded separately with sqlite3_load_extension is another
** copy of the engine and is "not a KV table" here.
**
** Errors: every call returns an SQLite result code.  Calls that take a
** `char **pzErr` set it when it is not NULL: NULL on success, else a
** message from sqlite3_malloc() that the caller frees with sqlite3_free().
*/
#ifndef DEPOT_KV_API_H
#define DEPOT_KV_API_H

#include <sqlite3.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct depot_kv_hook depot_kv_hook;

/*
** A key or value as a callback gets it, decoded from the store's encoding
** (every SQLite type round-trips: type and bytes as written).  eType is
** SQLITE_INTEGER (i), SQLITE_FLOAT (r), SQLITE_TEXT or SQLITE_BLOB (p, n:
** n bytes at p, never NULL, UTF-8 for text and not NUL-terminated), or
** SQLITE_NULL (values only: keys are never NULL).  The struct and the
** bytes at p belong to the library and are valid only during the
** callback that receives them: copy what you keep.  A numeric key comes
** back as it was written, except in one case: the key of a delete that
** comes without its old value (no DEPOT_KV_HOOK_NEEDS_OLD_VALUE) carries
** no record of its type, so an integral REAL key (2.0) comes as the
** INTEGER 2 there; a REAL key that no int64 holds stays REAL.
*/
typedef struct depot_kv_value depot_kv_value;
struct depot_kv_value {
  int eType;              /* SQLITE_INTEGER ... SQLITE_NULL */
  sqlite3_int64 i;        /* SQLITE_INTEGER */
  double r;               /* SQLITE_FLOAT */
  const void *p;          /* SQLITE_TEXT, SQLITE_BLOB: the bytes */
  int n;                  /* SQLITE_TEXT, SQLITE_BLOB: their number */
};

/* Flags of depot_kv_hook_register (NEEDS_WRITE or NEEDS_INIT or both). */
#define DEPOT_KV_HOOK_NEEDS_OLD_VALUE 0x01  /* xWrite gets the old value */
#define DEPOT_KV_HOOK_NEEDS_INIT      0x02  /* xInit pass at registration */
#define DEPOT_KV_HOOK_NEEDS_WRITE     0x04  /* xWrite for every commit */

/*
** The callbacks of a hook; depot_kv_hook_register copies the struct.
** pArg is the pointer given at registration.
**
** xWrite(pArg, pKey, pOld, pNew), with DEPOT_KV_HOOK_NEEDS_WRITE: once
** per key that a committed transaction wrote in the table, in key order
** within the commit.  pNew is the value written, NULL for a delete.  With
** DEPOT_KV_HOOK_NEEDS_OLD_VALUE, pOld is the committed value the commit
** replaced (NULL: the key was absent) and the delete of an absent key is
** not reported; without it pOld is always NULL and such a delete comes
** with pOld and pNew NULL.  Rewriting a key with the value it had is
** reported.  Rolled-back transactions, transactions that lose a conflict
** and failed commits call nothing.
**
** xInit(pArg, pKey, pValue), with DEPOT_KV_HOOK_NEEDS_INIT: once per live
** key, with its value, over the committed state of the table at
** registration, on the registering thread before depot_kv_hook_register
** returns.  xWrite then reports exactly the commits published after that
** state, so xInit plus xWrite see every change once: an additive consumer
** (a counter, a sum) is never counted twice.  A store's write-ahead log
** is replayed when it is opened, before a hook can be registered: replay
** calls no hook, and a key that several replayed transactions rewrote
** gets one xInit call with its final value.  Hooks do not outlive the
** process; register them again after a restart and let xInit rebuild.
**
** xRemoved(pArg), optional: the table was removed (DROP TABLE main.t,
** kv_remove_table).  Called once, in commit order; the rows that went
** with the table get no xWrite, the hook gets no call after it, and a
** table created later under the same name is another table, which the
** hook does not follow.  The hook stays registered until unregistered.
**
** xDestroy(pArg), optional: the hook is freed, after
** depot_kv_hook_unregister, once no callback of it runs or will run: free
** pArg here when it belongs to the hook.  Called once, with no lock held,
** on the thread that drops the hook's last reference: the unregistering
** thread, or a delivering thread that still held the hook (a call in
** progress, see depot_kv_hook_unregister, or a delivery about to skip
** it), possibly just after depot_kv_hook_unregister returned.  A hook
** with xDestroy frees pArg there, not after unregistering.  Not called
** when the registration fails.
**
** A hook cannot refuse a write: callbacks return nothing and run after
** the commit is published, when its rows are already visible to every new
** read, and after it is durable: the commit appended and flushed the
** store's root WAL record first, so a failed WAL append or flush fails
** the COMMIT (an SQLITE_IOERR code, the transaction rolled back) and no
** hook hears of it.  If the publication itself fails the store stops
** (every later use fails until it is reopened) and no hook hears of that
** commit; its WAL record is replayed at the next open, where hooks
** registered then see its rows in their xInit pass.  kv_btree and kv_log
** tables write their data files later, in the background; a failure
** there does not undo the commit (the WAL record stays and is replayed),
** so what a hook saw stays true.  A rule that must refuse a write belongs
** in the transaction, before COMMIT.
**
** Threads and order.  The callbacks of one store are made one at a time,
** never concurrently, in commit order (a commit's tables in the order it
** first wrote them), with no engine lock held, on a committing thread:
** normally the thread whose COMMIT (or autocommit statement) it is, inside
** its sqlite3_step() or sqlite3_exec(), after the commit is durable and
** visible; while one thread delivers, other committers of the store leave
** their commits to it and wait.  So when a COMMIT returns, the hooks of
** the store have seen it.  A key or value that cannot be decoded (out of
** memory for a key that needs a copy) is skipped with an sqlite3_log()
** line.
**
** Reentrancy.  A callback may read the store through a connection of its
** own (it sees the commit applied, or a later state) and write to it: a
** commit made inside a callback does not wait for its own delivery, which
** follows the current callback (a hook that reacts to its own writes must
** stop itself).  A callback must not use the connection whose commit it
** reports (it is in the middle of that COMMIT, possibly on another
** thread), must not wait for anything a committer of the store may hold
** while it waits for delivery -- another connection that writes the
** store, a lock the application takes around its COMMITs -- or it
** deadlocks, and must not call depot_kv_hook_register (SQLITE_MISUSE).
** It may call depot_kv_hook_unregister, for its own hook too.
*/
typedef struct depot_kv_hook_methods depot_kv_hook_methods;
struct depot_kv_hook_methods {
  int iVersion;           /* 1 */
  void (*xWrite)(void *pArg, const depot_kv_value *pKey,
                 const depot_kv_value *pOld, const depot_kv_value *pNew);
  void (*xInit)(void *pArg, const depot_kv_value *pKey,
                const depot_kv_value *pValue);
  void (*xRemoved)(void *pArg);
  void (*xDestroy)(void *pArg);
};

/*
** Register a hook with pMethods (copied) and pArg on KV table zTable of
** schema zSchema ("main", "temp", an attached database; NULL: the table
** the unqualified name zTable reaches, temp first, then main, then the
** attached databases) of connection db.  With DEPOT_KV_HOOK_NEEDS_INIT,
** the xInit pass runs on this thread before this returns, while commits
** of the table wait for it.  On success *ppHook is the hook, which the
** caller ends with depot_kv_hook_unregister.  The calling thread uses db
** during the call (it prepares statements that name the table); db is not
** used afterwards.
**
** The hook holds the table's store open until it is unregistered, not
** the connection: db may be closed right after registering, and the hook
** goes on hearing the commits of every other connection of the process
** that writes the table (including connections opened later), until
** depot_kv_hook_unregister.  For a table of an in-memory database (its
** connection's private anonymous store) nobody else can write it, so once
** db is closed the hook only waits to be unregistered.
**
** Errors (*ppHook NULL, nothing registered): SQLITE_MISUSE for a NULL db,
** zTable, pMethods or ppHook, an iVersion other than 1, unknown flag bits,
** neither NEEDS_WRITE nor NEEDS_INIT, NEEDS_WRITE without xWrite,
** NEEDS_INIT without xInit, a call from inside a hook callback;
** SQLITE_ERROR "... no such table: S.T" when the connection has no such
** table, and "... S.T is not a KV table ..." for a table, view or virtual
** table of another kind; SQLITE_CANTOPEN when the table's store directory
** is missing; the store's error when it has failed; a read error of the
** xInit pass (xInit may have run for some keys: the hook is not
** registered); SQLITE_NOMEM.
*/
int depot_kv_hook_register(sqlite3 *db, const char *zSchema,
                           const char *zTable, unsigned flags,
                           const depot_kv_hook_methods *pMethods, void *pArg,
                           depot_kv_hook **ppHook, char **pzErr);

/*
** Unregister pHook (NULL: no-op), from any thread; pHook must not be used
** afterwards.  Outside hook callbacks, it waits for a call of the hook in
** progress on another thread: on return no callback of the hook runs or
** will run, and pArg may be freed (by xDestroy, when given, which may run
** on the delivering thread right after this returns).  From inside a
** hook callback (of any store) it does not wait, since that call may be
** waiting for this thread: the hook gets no call after the one in
** progress, which may still be running on another thread when this
** returns -- free pArg in xDestroy then.  Unregistering the hook whose
** callback is running on this thread is safe (no further call).  Drops
** the hook's reference on the store: the last reference closes it.
*/
void depot_kv_hook_unregister(depot_kv_hook *pHook);

/*
** Bind *pValue (NULL: SQL NULL) to parameter iParam of pStmt, copying its
** bytes (SQLITE_TRANSIENT), so a callback can store what it gets with a
** statement of a connection of its own.  Returns sqlite3_bind_*'s code.
*/
int depot_kv_value_bind(sqlite3_stmt *pStmt, int iParam,
                        const depot_kv_value *pValue);

/*
** Watch subscriptions.  A watch queues the changes committed to one KV
** table, or to the keys of a range of it, for a subscriber that reads
** them when it likes, on a thread of its own:
**
**     depot_kv_watch *pW = 0;
**     const depot_kv_event *pEv;
**     depot_kv_watch_open(db, 0, "users", 0, 0, DEPOT_KV_WATCH_OLD_VALUE,
**                         1024, &pW, &zErr);
**     while( depot_kv_watch_next(pW, 1000, &pEv)==SQLITE_ROW ){
**       if( pEv->nLost ) ... resynchronise: scan the table ...
**       ... pEv->key, pEv->pOld, pEv->pNew ...
**     }
**     depot_kv_watch_close(pW);
**
** Events.  One per key a committed transaction wrote in the range, queued
** after the commit is durable and visible (the write hook of the table,
** above, in commit order, a commit's keys in key order), so a subscriber
** sees commits in the order they happened and never one that rolled
** back.  pNew is the value written, NULL for a delete (also the removal
** of an expired row by the TTL sweeper); with DEPOT_KV_WATCH_OLD_VALUE
** pOld is the value the commit replaced (NULL: the key was absent), else
** pOld is always NULL.  Each event has the next sequence number of the
** watch, iSeq = 1, 2, ...
**
** Bounded, never blocking writers.  The watch keeps at most nCapacity
** events.  When a commit brings one more, the oldest is dropped: a slow
** subscriber loses events instead of slowing the writers, which only copy
** each change into the ring.  The next event it reads says exactly how
** many were lost just before it (nLost, the gap in iSeq), and
** depot_kv_watch_lost() counts all lost so far; after a loss the
** subscriber resynchronises by reading the table (a scan sees at least
** every change it lost; later events may repeat what the scan showed).
**
** Threads.  Writers (any connection of the process that commits to the
** table) and the subscriber may run at the same time; depot_kv_watch_next
** is called by one thread at a time per watch.  depot_kv_watch_close may
** be called from any thread that is not inside depot_kv_watch_next of the
** same watch.
*/
typedef struct depot_kv_watch depot_kv_watch;
typedef struct depot_kv_event depot_kv_event;
struct depot_kv_event {
  sqlite3_uint64 iSeq;          /* 1, 2, ...: every queued change counts */
  sqlite3_uint64 nLost;         /* events dropped just before this one */
  depot_kv_value key;
  const depot_kv_value *pOld;   /* the old value, or NULL */
  const depot_kv_value *pNew;   /* the new value, NULL for a delete */
};

#define DEPOT_KV_WATCH_OLD_VALUE 0x01   /* events carry the old value */

/*
** Subscribe to KV table zTable of schema zSchema of connection db (named
** as depot_kv_hook_register names it; db is used during the call only),
** keys from *pLo to *pHi, both included (a NULL pointer: no bound; keys
** compare as SQLite compares them: numbers, then text, then blobs), with
** flags (DEPOT_KV_WATCH_OLD_VALUE or 0) and a ring of nCapacity events
** (1..1048576).  The watch sees the commits published after this returns.
** It holds the table's store open until depot_kv_watch_close.  Errors
** (*ppWatch NULL): SQLITE_MISUSE for a NULL db, zTable or ppWatch,
** unknown flags, a capacity out of range, a NULL-typed bound, a call from
** inside a hook callback; the errors of depot_kv_hook_register for the
** table ("no such table", "not a KV table", a missing store); an eventfd
** that cannot be made (SQLITE_CANTOPEN); SQLITE_NOMEM.
*/
int depot_kv_watch_open(sqlite3 *db, const char *zSchema, const char *zTable,
                        const depot_kv_value *pLo, const depot_kv_value *pHi,
                        unsigned flags, int nCapacity,
                        depot_kv_watch **ppWatch, char **pzErr);

/*
** The oldest queued event of pWatch, waiting up to msTimeout ms for one
** (0: do not wait; negative: wait until one comes).  SQLITE_ROW with
** *ppEvent set: the event and the values it points to belong to the watch
** and stay valid until the next call or depot_kv_watch_close.
** SQLITE_DONE: none came in time.  SQLITE_ABORT: none is queued and the
** table was removed (no event will come).  SQLITE_MISUSE: a NULL argument.
** An event that cannot be decoded returns SQLITE_NOMEM (it is consumed).
*/
int depot_kv_watch_next(depot_kv_watch *pWatch, int msTimeout,
                        const depot_kv_event **ppEvent);

/*
** An eventfd (non-blocking, close-on-exec, owned by the watch) that is
** readable while the watch holds events, or the table was removed, for
** poll()/epoll loops: when it polls readable, call depot_kv_watch_next
** with timeout 0 until it returns SQLITE_DONE.  Do not read or close it.
*/
int depot_kv_watch_fd(depot_kv_watch *pWatch);

/* The number of events pWatch dropped so far because its ring was full. */
sqlite3_uint64 depot_kv_watch_lost(depot_kv_watch *pWatch);

/*
** End the subscription (NULL: no-op): no event is queued after this
** returns and the watch, its events and its eventfd are freed (at the end
** of a delivery in progress on another thread, if one is).  pWatch must
** not be used afterwards.
*/
void depot_kv_watch_close(depot_kv_watch *pWatch);

#ifdef __cplusplus
}
#endif
#endif /* DEPOT_KV_API_H */
