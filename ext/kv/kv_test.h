/*
** kv_test.h -- test hooks of the KV engine: fault injection and limits
** that the test programs, the bench and the torture runner set, never the
** product.  Like SQLite's SQLITE_TEST code, they are compiled only when
** DEPOT_TEST is defined, which the build does for libdepot_core.la alone
** (the library the test programs link); the loadable module depot.la has
** none of these symbols, nor the state behind them
** (tests/check/no_test_hooks.sh checks).  A program that calls one must
** link libdepot_core.la.  The WAL's own test hook, the fault-injecting
** WalIo (wal_fault_*), is declared in wal/wal.h under the same rule.
**
** Every hook affects the whole process (every store opened from then on,
** or every store already open, as said) and may be called from any
** thread; each setter replaces the previous setting.
*/
#ifndef DEPOT_KV_TEST_H
#define DEPOT_KV_TEST_H

#include "ext/kv/kv.h"

/* Every store opened from now on uses pIo for its WAL and catalog file
** (NULL: the real POSIX I/O).  The caller keeps pIo alive while those
** stores are open.  Takes the registry mutex. */
void kv_engine_test_io(const WalIo *pIo);

/* Every store opened from now on rotates its WAL past szSegment bytes (0:
** the default, 64 MiB) and, with bKeepBak, retires segments by renaming
** them to *.log.bak instead of deleting them.  Takes the registry
** mutex. */
void kv_engine_test_wal_config(int64_t szSegment, int bKeepBak);

/* A process asking to join a store that another process holds alone
** gives up after ms milliseconds (0: the default, 10 s). */
void kv_engine_test_join_wait(int ms);

/* The n-th backend publication (xApply of one table of a committing root)
** from now fails with SQLITE_NOMEM, as running out of memory after the
** WAL flush would (1: the next one; 0: none). */
void kv_engine_test_fail_apply(int n);

/* The resolution log (resolve.c): iSkewMs is added to its clock, nTrimMin
** (>0) replaces KV_RESOLVED_TRIM_MIN, and iKillAt (>=0) raises SIGKILL in
** the next rewrite of prepared.log: 0 with half of the new file written,
** 1 after its fsync, before the rename, 2 after the rename, before the
** directory fsync; -1: none. */
void kv_engine_test_resolved(int64_t iSkewMs, int nTrimMin, int iKillAt);

/* The n-th receipt recorded by a versioned commit from now is lost (bDup
** 0) or recorded twice (bDup 1), as a defect in publication would do; the
** commit's receipts check must report it (n 0: none). */
void kv_engine_test_fault_receipt(int n, int bDup);

/* kv_btree: the next n collector batches (of every store) fail as a
** data-file write error would: rolled back, nothing confirmed, retried
** later.  kv_btree_test_fail_writes_left: how many are still to come. */
void kv_btree_test_fail_writes(int n);
int kv_btree_test_fail_writes_left(void);

/* kv_btree: the next n data-file reads (point reads and scan steps, of
** every store) fail with SQLITE_IOERR_READ, as a failing disk would. */
void kv_btree_test_fail_reads(int n);

/* kv_btree: set the overlay limit (entries) of the open store in
** zStoreDir (its real path); <=0 restores the default.  SQLITE_NOTFOUND
** if that store has no kv_btree data file open, SQLITE_NOMEM. */
int kv_btree_test_overlay_limit(const char *zStoreDir, int64_t nLimit);

/* kv_log: tables opened from now on roll their log files past szFile
** bytes (and compact once that many bytes are dead), so tests see rolls
** and background compactions with little data.  0 restores the
** default. */
void kv_log_test_file_size(int64_t szFile);

/* A commit that creates or removes tables of a shared store raises
** SIGKILL: iAt 0 after its WAL record is appended, before anything of it
** is published; 1 after its catalog file is saved, before the log's new
** tail is published; -1: never (the default). */
void kv_engine_test_kill_ddl(int iAt);

#endif /* DEPOT_KV_TEST_H */
