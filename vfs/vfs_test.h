/*
** vfs_test.h -- the test hooks of vfs/.  They exist only in a build with
** -DDEPOT_TEST (libdepot_core.la, which the tests link); the loadable
** module has none, and a test that sets one links only against a
** DEPOT_TEST build.
*/
#ifndef DEPOT_VFS_TEST_H
#define DEPOT_VFS_TEST_H

/* When not NULL, compaction (vfs/compact.c) calls it with the store path
** after it has encoded a shard version and before it writes the version's
** rows (tests check that no store write lock is held at that point).  Set
** it only while no compaction runs. */
extern void (*depot_compact_test_encoded)(const char *zStore);

/* When not NULL, store_put() (vfs/store/store.c) calls it with each row
** it is asked to write (key and value length) and store_commit() with
** (NULL, 0, 0) after each store transaction it commits, from whatever
** thread writes.  Set it only while no other thread writes a store. */
extern void (*depot_store_test_write)(const void *pKey, int nKey, int nVal);

/* Rows one batch of depot_gc() (vfs/gc.c), of a compaction's sweep
** (vfs/compact.c) or of the removal of a write transaction's staged rows
** (vfs/vfs.c) visits (0: their defaults), and, when not NULL, a call
** with the store path after each batch of a branch that more batches
** follow (no store transaction is open then).  Set them only while no
** reclaim or compaction runs. */
extern int depot_gc_test_batch;
extern void (*depot_gc_test_between)(const char *zStore);

/* Page index rows one read transaction of a compaction plan visits
** (vfs/compact.c; 0: its default), and, when not NULL, a call with the
** store path between two such batches (no store transaction is open
** then).  Set them only while no compaction runs. */
extern int depot_compact_test_plan_batch;
extern void (*depot_compact_test_plan_between)(const char *zStore);

/* The next N write-transaction COMMITs of PostgreSQL stores
** (vfs/store/pg.c) are rolled back by the server and their answer lost
** with the connection: to the caller, STORE_LOST_UNKNOWN. */
extern int depot_pg_test_lost_commits;

/* Page bytes of one staged LTX part of a write transaction past its
** budget (vfs/vfs.c); 0: 4 MiB.  A test sets it small to have one batch
** go in several parts. */
extern int depot_stage_test_part_bytes;

/* The next N spill-file writes and reads of the decoded-page cache
** (vfs/pcache.c) fail (N < 0: every one); each failure drops its page, as
** a real one does. */
extern int depot_cache_test_spill_fail;

/* When nonzero, a read of a page that a read-ahead thread has queued and
** not decoded yet waits for the thread (vfs/readahead.c), instead of
** taking the page back and decoding it itself: so a test knows which
** pages come from the read-ahead ring. */
extern int depot_ra_test_patient;

/* When nonzero, a read-ahead thread's store handle fails to open, as it
** does when the store file it names is gone (vfs/readahead.c). */
extern int depot_ra_test_no_store;

#endif /* DEPOT_VFS_TEST_H */
