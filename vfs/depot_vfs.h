/*
** depot_vfs.h -- public interface of vfs/: the "depot" VFS and the calls
** the SQL surface (ext/) uses to inspect a store.
**
** A depot database is opened with a URI filename naming the store file:
**
**     file:/path/store.depot?vfs=depot&db=NAME&branch=NAME
**
** URI parameters (all optional):
**   db=NAME          database in the store (default "main"), 1..255 bytes
**   branch=NAME      branch of that database (default "main"), 1..255 bytes
**   cache_kb=N       decoded-page cache of this database branch, shared by
**                    the process's connections to it, in KiB (default
**                    16384; 0 turns it off); also PRAGMA depot_cache_kb
**   store_vfs=NAME   VFS for the outer store file (default: the default VFS)
**   store_sync=off|normal|full|extra  synchronous level of the outer store
**                    (default full)
**   zstd_level=N     compression level of new pages, 1..19 (default 1)
**
** Semantics: one SQLite transaction is one depot commit, published
** atomically at the transaction's sync point as one store transaction whose
** head update is a compare-and-set; a writer whose snapshot is stale gets
** SQLITE_BUSY_SNAPSHOT and writes nothing.  Readers pin the head when they
** take the SHARED lock and read that snapshot until they release it.
** journal_mode=WAL and journal_mode=MEMORY are refused with an error (the
** rollback journal already lives in memory and the store keeps history).
*/
#ifndef DEPOT_VFS_H
#define DEPOT_VFS_H

#include <stdint.h>

#define DEPOT_VFS_NAME "depot"

/* Register the "depot" VFS (never as the default).  Idempotent and
** thread-safe; SQLITE_OK or SQLITE_NOMEM. */
int depot_vfs_register(void);

/* One commit of a branch, as depot_commits lists it. */
typedef struct DepotCommitInfo DepotCommitInfo;
struct DepotCommitInfo {
  uint64_t iTxid;
  uint64_t iTimeMs;          /* wall clock at commit, informational */
  uint32_t szPage;
  uint32_t nPage;            /* database size after the commit, pages */
  uint32_t nWritten;         /* pages written by the commit */
  uint64_t nStored;          /* bytes of its page blob */
  uint64_t iChecksum;        /* post-apply database checksum */
};

/* Called once per commit in txid order; nonzero stops the listing. */
typedef int (*DepotCommitFn)(void *pArg, const DepotCommitInfo*);

/* List the commits of (zDb, zBranch) in the store file zStore (which must
** exist; opened with the default VFS).  A database or branch that does not
** exist lists nothing.  Errors: SQLITE_CANTOPEN, SQLITE_CORRUPT, store
** errors, with *pzErr (sqlite3_malloc'd) set. */
int depot_list_commits(const char *zStore, const char *zDb,
                       const char *zBranch, DepotCommitFn xCommit,
                       void *pArg, char **pzErr);

/* Whole-store figures for depot_stats. */
typedef struct DepotStats DepotStats;
struct DepotStats {
  int64_t nDatabase;         /* distinct database names */
  int64_t nBranch;           /* branches of all databases */
  int64_t nStored;           /* bytes of page blobs */
  int64_t nLogical;          /* sum over branch heads of pages*page size */
  int64_t nCacheHit;         /* decoded-page cache, whole process */
  int64_t nCacheMiss;
};

int depot_store_stats(const char *zStore, DepotStats *pStats, char **pzErr);

#endif /* DEPOT_VFS_H */
