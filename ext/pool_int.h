/*
** pool_int.h -- private interface between the files of the connection
** pool (ext/pool.c), the async runner (ext/async.c) and the pool registry
** with its SQL listing (ext/pool_sql.c).  Private to ext/.
**
** The files call each other one way: async.c -> pool.c -> pool_sql.c
** (the registry) and depot.c (sqlite3_depot_init); depot.c -> pool_sql.c
** (its component).  pool_sql.c reaches a pool's counters only through the
** function pointer the pool registered, so it calls nothing of pool.c.
*/
#ifndef DEPOT_POOL_INT_H
#define DEPOT_POOL_INT_H

#include "sqlite3ext.h"
#include "ext/depot_pool.h"

/* ------------------------------------------ ext/pool_sql.c: registry --- */

/* Fills in the counters of a pool (depot_pool_status of ext/pool.c). */
typedef void (*DepotPoolStatusFn)(depot_pool*, depot_pool_stats*);

/* Add pool p under zName (NULL: "poolN", the next free number).  On
** success *pzName is the registry's copy of the name (valid until
** removal).  SQLITE_ERROR with *pzErr "registry: ..." when the name is
** taken; SQLITE_NOMEM. */
int depot_poolreg_add(const char *zName, depot_pool *p, DepotPoolStatusFn x,
                      const char **pzName, char **pzErr);

/* Remove pool p (a no-op if absent).  After it returns no callback of
** depot_poolreg_each runs on p. */
void depot_poolreg_remove(depot_pool *p);

/* Call x(pArg, p) for every registered pool, under the registry's lock
** (x must not add or remove pools). */
void depot_poolreg_each(void (*x)(void*, depot_pool*), void *pArg);

/* ------------------------------------------ ext/pool.c: for async.c --- */

/* depot_pool_acquire, with bOwned 0: the lease belongs to no thread (a
** runner's worker or lane holds it; thread exit does not release it),
** and with the transaction-callback refusal skipped when bInternal. */
int depot_poolint_acquire(depot_pool *p, int eKind, int iTimeoutMs,
                         const char *zTag, int bOwned, depot_lease *pLease,
                         char **pzErr);

/* Keys of depot_poolint_stmt with this bit set name SQL text (a hash of
** it, checked against the statement's SQL on a hit); others name
** recipes. */
#define DEPOT_POOL_KEY_SQL (((sqlite3_uint64)1)<<63)

/* The statement of key iKey (zSql) on the connection of lease pLease
** (held by the caller): kept prepared on that connection, or prepared now
** (SQLITE_PREPARE_PERSISTENT) and kept, in place of the least recently
** used one when the connection keeps 16 already.  *pbKept is set when it
** is kept: the caller then resets it after use and never finalizes it
** (closing the connection does); else (SQL with more than one statement)
** the caller finalizes it.  An error of sqlite3_prepare_v3 is returned
** (*ppStmt NULL, nothing kept); SQL without a statement gives SQLITE_OK
** and NULL. */
int depot_poolint_stmt(depot_lease *pLease, sqlite3_uint64 iKey,
                       const char *zSql, sqlite3_stmt **ppStmt,
                       int *pbKept);

/* Adjust the async gauges of p by d. */
void depot_poolint_add_pending(depot_pool *p, int d);
void depot_poolint_add_holding(depot_pool *p, int d);

/* Set (tx!=0) or clear (0) the calling thread's "inside the callback of
** transaction tx" mark, and read it. */
void depot_poolint_set_tx_scope(depot_tx tx);
depot_tx depot_poolint_tx_scope(void);

/* Log through the pool's sink (printf-style). */
void depot_poolint_log(depot_pool *p, int iLevel, const char *zFmt, ...);

#endif /* DEPOT_POOL_INT_H */
