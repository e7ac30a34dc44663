/*
** kv_btree.h -- test hooks of the kv_btree backend (ext/kv_btree.c; private
** to ext/ and the test suites), and how it reads its table options.  The
** backend itself is reached through kvBtreeBackend (kv_backend.h) and the
** SQL module "kv_btree".
*/
#ifndef DEPOT_KV_BTREE_H
#define DEPOT_KV_BTREE_H

#include <stdint.h>

/* 1 if a kv_btree table's options JSON zOptions (as stored in the
** catalog; NULL: none) asks for accelerated_repair, else 0. */
int kv_btree_accel_option(const char *zOptions);

/* Make the next n collector batches (of every store) fail as a data-file
** write error would: rolled back, nothing confirmed, retried later. */
void kv_btree_test_fail_writes(int n);
/* How many of those failures are still to come. */
int kv_btree_test_fail_writes_left(void);

/* Make the next n data-file reads (point reads and scan steps, of every
** store) fail with SQLITE_IOERR_READ, as a failing disk would. */
void kv_btree_test_fail_reads(int n);

/* Set the overlay limit (entries) of the open store in zStoreDir (its real
** path); <=0 restores the default.  SQLITE_NOTFOUND if not open. */
int kv_btree_test_overlay_limit(const char *zStoreDir, int64_t nLimit);

#endif /* DEPOT_KV_BTREE_H */
