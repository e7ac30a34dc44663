/*
** check_pagemap.c -- the page map of the depot VFS (vfs/pagemap.h) never
** serves a stale location: a connection whose map was filled at one head
** reads what the store holds after another connection's commit, another
** process's commit, a fork, a restore, a rolled-back transaction, and a
** compaction whose blobs GC then reclaims.  Each case runs three times:
** with cache_kb=0, so that every page a pager misses goes through the map;
** with map_kb=0 and a large decoded-page cache, which every connection of
** the process to the store shares, so that every miss goes through that
** cache; and with map_kb=0 and a cache of two pages, which evicts all the
** time.  Neither ever serves a stale page.  The concurrent readers read
** ahead, decoding the pages of their scans on a thread of each connection
** into that shared cache meanwhile; a last case checks read-ahead queues
** pages, and that its pragma turns it off.  The store's caches outlive its
** last connection: a reopen decodes nothing again, and neither a commit
** of another process, compaction + GC or a rollback while nothing was
** open, nor a store deleted and made anew at its path, makes a reopen
** read a stale page.
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/readahead.h"
#include "vfs/vfs_test.h"
#include "vfs/pcache.h"
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct Fx Fx;
struct Fx {
  char *zDir, *zStore;
  sqlite3 *admin;
};

static void fx_open(Fx *f, const char *zTag){
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
  f->zDir = th_tmpdir(zTag);
  f->zStore = sqlite3_mprintf("%s/s.depot", f->zDir);
  f->admin = th_open(":memory:");
}

static void fx_close(Fx *f){
  sqlite3_close(f->admin);
  sqlite3_free(f->zStore);
  sqlite3_free(f->zDir);
}

/* The cache parameters of the four runs of each case (_i): no cache, a
** large one, a tiny one (its evicted pages go to the spill file, the
** default 256 MiB), and a small one whose spill file of 16 slots reuses
** them. */
static const char *const azFxCache[] = {
  "cache_kb=0", "cache_kb=65536&map_kb=0", "cache_kb=8&map_kb=0",
  "cache_kb=64&map_kb=0&spill_kb=64"
};
static int iFxCache = 0;

/* A connection to zBranch of database app, with the caches of this run. */
static sqlite3 *fx_db(Fx *f, const char *zBranch){
  char *z = sqlite3_mprintf("file:%s?vfs=depot&db=app&branch=%s&%s",
                            f->zStore, zBranch, azFxCache[iFxCache]);
  sqlite3 *db = th_open(z);
  sqlite3_free(z);
  sqlite3_busy_timeout(db, 5000);
  th_exec(db, "PRAGMA cache_size=10");
  return db;
}

/* 3000 rows over a few hundred pages, every n equal to n0. */
static void fx_fill(sqlite3 *db, int n0){
  char *z = sqlite3_mprintf(
      "CREATE TABLE t(k INTEGER PRIMARY KEY, n, pad);"
      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c"
      " WHERE i<3000) INSERT INTO t SELECT i, %d, randomblob(300) FROM c;",
      n0);
  th_exec(db, z);
  sqlite3_free(z);
}

/* Every row's n is n0 and the database is sound. */
static void assert_all(sqlite3 *db, int n0){
  char *z;
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3000);
  ck_assert_int_eq(th_int(db, "SELECT min(n) FROM t"), n0);
  ck_assert_int_eq(th_int(db, "SELECT max(n) FROM t"), n0);
  z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
}

START_TEST(test_pagemap_other_connection_commit){
  Fx f;
  iFxCache = _i;
  sqlite3 *a, *b;
  int i;
  fx_open(&f, "pm-conn");
  b = fx_db(&f, "main");
  fx_fill(b, 0);
  a = fx_db(&f, "main");
  assert_all(a, 0);
  for(i=1; i<=5; i++){
    th_exec(b, "UPDATE t SET n=n+1");
    assert_all(a, i);
  }
  /* a reader holding an older snapshot keeps reading it */
  th_exec(a, "BEGIN");
  assert_all(a, 5);
  th_exec(b, "UPDATE t SET n=n+1");
  assert_all(a, 5);
  th_exec(a, "COMMIT");
  assert_all(a, 6);
  sqlite3_close(a);
  sqlite3_close(b);
  fx_close(&f);
}
END_TEST

START_TEST(test_pagemap_other_process_commit){
  Fx f;
  iFxCache = _i;
  sqlite3 *a;
  pid_t pid;
  int st = 0;
  fx_open(&f, "pm-proc");
  a = fx_db(&f, "main");
  fx_fill(a, 0);
  assert_all(a, 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *b = fx_db(&f, "main");
    int rc = sqlite3_exec(b, "UPDATE t SET n=7", 0, 0, 0);
    sqlite3_close(b);
    _exit(rc==SQLITE_OK ? 0 : 1);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  assert_all(a, 7);
  th_exec(a, "UPDATE t SET n=8");
  assert_all(a, 8);
  sqlite3_close(a);
  fx_close(&f);
}
END_TEST

START_TEST(test_pagemap_fork){
  Fx f;
  iFxCache = _i;
  sqlite3 *m, *t;
  fx_open(&f, "pm-fork");
  m = fx_db(&f, "main");
  fx_fill(m, 1);
  assert_all(m, 1);
  ck_assert_int_gt(th_intf(f.admin, "SELECT depot_fork(%Q,'app','main','try')",
                           f.zStore), 0);
  t = fx_db(&f, "try");
  assert_all(t, 1);
  th_exec(t, "UPDATE t SET n=2");
  assert_all(t, 2);
  assert_all(m, 1);
  th_exec(m, "UPDATE t SET n=3");
  assert_all(m, 3);
  assert_all(t, 2);
  sqlite3_close(t);
  sqlite3_close(m);
  fx_close(&f);
}
END_TEST

START_TEST(test_pagemap_restore){
  Fx f;
  iFxCache = _i;
  sqlite3 *old, *now;
  char *z;
  fx_open(&f, "pm-restore");
  old = fx_db(&f, "main");
  fx_fill(old, 1);
  z = sqlite3_mprintf("SELECT depot_restore_point(%Q,'app','main','one')",
                      f.zStore);
  sqlite3_free(th_text(f.admin, z));
  sqlite3_free(z);
  th_exec(old, "UPDATE t SET n=2");
  assert_all(old, 2);
  z = sqlite3_mprintf("SELECT depot_restore(%Q,'app','main','one')",
                      f.zStore);
  sqlite3_free(th_text(f.admin, z));
  sqlite3_free(z);
  now = fx_db(&f, "main");   /* shares the map the old connection filled */
  assert_all(now, 1);
  th_exec(now, "UPDATE t SET n=3");
  assert_all(now, 3);
  sqlite3_close(now);
  sqlite3_close(old);
  fx_close(&f);
}
END_TEST

START_TEST(test_pagemap_rollback){
  Fx f;
  iFxCache = _i;
  sqlite3 *a, *b;
  char *z;
  fx_open(&f, "pm-rollback");
  a = fx_db(&f, "main");
  fx_fill(a, 1);
  z = sqlite3_mprintf("SELECT depot_restore_point(%Q,'app','main','r1')",
                      f.zStore);
  sqlite3_free(th_text(f.admin, z));
  sqlite3_free(z);
  b = fx_db(&f, "main");
  assert_all(b, 1);
  /* a transaction that spills pages, then rolls back */
  th_exec(a, "BEGIN; UPDATE t SET n=9, pad=randomblob(300);");
  assert_all(a, 9);
  th_exec(a, "ROLLBACK");
  assert_all(a, 1);
  assert_all(b, 1);
  /* depot_rollback moves the name back */
  th_exec(a, "UPDATE t SET n=4");
  assert_all(b, 4);
  z = sqlite3_mprintf("SELECT depot_rollback(%Q,'app','main','r1')",
                      f.zStore);
  th_int(f.admin, z);
  sqlite3_free(z);
  sqlite3_close(a);
  a = fx_db(&f, "main");     /* shares the map b filled */
  assert_all(a, 1);
  sqlite3_close(a);
  sqlite3_close(b);
  fx_close(&f);
}
END_TEST

START_TEST(test_pagemap_compaction_and_gc){
  Fx f;
  iFxCache = _i;
  sqlite3 *a, *b;
  char *z;
  int i;
  fx_open(&f, "pm-compact");
  b = fx_db(&f, "main");
  fx_fill(b, 0);
  for(i=1; i<=20; i++){
    z = sqlite3_mprintf("UPDATE t SET n=%d WHERE k%%20=%d", i, i%20);
    th_exec(b, z);
    sqlite3_free(z);
  }
  th_exec(b, "UPDATE t SET n=50");
  a = fx_db(&f, "main");
  assert_all(a, 50);         /* a's map points at commit blobs */
  z = sqlite3_mprintf("SELECT depot_compact(%Q), depot_gc(%Q)", f.zStore,
                      f.zStore);
  sqlite3_free(th_text(f.admin, z));
  sqlite3_free(z);
  assert_all(a, 50);         /* blobs reclaimed: found again in shards */
  th_exec(b, "UPDATE t SET n=51 WHERE k%2=0");
  ck_assert_int_eq(th_int(a, "SELECT sum(n) FROM t"), 1500*50+1500*51);
  z = sqlite3_mprintf("SELECT depot_compact(%Q), depot_gc(%Q)", f.zStore,
                      f.zStore);
  sqlite3_free(th_text(f.admin, z));
  sqlite3_free(z);
  ck_assert_int_eq(th_int(a, "SELECT sum(n) FROM t"), 1500*50+1500*51);
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 1500*50+1500*51);
  sqlite3_close(a);
  sqlite3_close(b);
  fx_close(&f);
}
END_TEST

/* The last connection of the store closes, so its decoded pages and page
** map stay idle in the process; then another process commits, and
** compaction + GC and a depot_rollback run while nothing is open: each
** reopen reads what the store holds. */
START_TEST(test_pagemap_reopen_after_other_process_commit){
  Fx f;
  iFxCache = _i;
  sqlite3 *a;
  pid_t pid;
  int st = 0;
  char *z;
  fx_open(&f, "pm-reopen");
  a = fx_db(&f, "main");
  fx_fill(a, 0);
  assert_all(a, 0);
  z = sqlite3_mprintf("SELECT depot_restore_point(%Q,'app','main','r0')",
                      f.zStore);
  sqlite3_free(th_text(f.admin, z));
  sqlite3_free(z);
  sqlite3_close(a);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *b = fx_db(&f, "main");
    int rc = sqlite3_exec(b, "UPDATE t SET n=7", 0, 0, 0);
    sqlite3_close(b);
    _exit(rc==SQLITE_OK ? 0 : 1);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  a = fx_db(&f, "main");
  assert_all(a, 7);
  th_exec(a, "UPDATE t SET n=8");
  assert_all(a, 8);
  sqlite3_close(a);
  z = sqlite3_mprintf("SELECT depot_compact(%Q), depot_gc(%Q)", f.zStore,
                      f.zStore);
  sqlite3_free(th_text(f.admin, z));
  sqlite3_free(z);
  a = fx_db(&f, "main");
  assert_all(a, 8);
  sqlite3_close(a);
  z = sqlite3_mprintf("SELECT depot_rollback(%Q,'app','main','r0')",
                      f.zStore);
  th_int(f.admin, z);
  sqlite3_free(z);
  a = fx_db(&f, "main");
  assert_all(a, 0);
  sqlite3_close(a);
  fx_close(&f);
}
END_TEST

/* A store deleted while nothing has it open, and made anew at the same
** path (often on the same inode) by the same steps, starts its branch ids
** and txids over: the idle pages of the old one are never served. */
START_TEST(test_pagemap_store_made_anew){
  Fx f;
  iFxCache = _i;
  sqlite3 *a;
  char *z;
  int i;
  fx_open(&f, "pm-anew");
  for(i=0; i<3; i++){
    a = fx_db(&f, "main");
    fx_fill(a, i);
    assert_all(a, i);
    sqlite3_close(a);
    z = sqlite3_mprintf("rm -f '%q' '%q-wal' '%q-shm' '%q-journal'",
                        f.zStore, f.zStore, f.zStore, f.zStore);
    ck_assert_int_eq(system(z), 0);
    sqlite3_free(z);
  }
  fx_close(&f);
}
END_TEST

/* A reopen in the same process decodes no page again: the store's
** decoded pages outlive its last connection. */
START_TEST(test_reopen_hits_the_idle_cache){
  Fx f;
  sqlite3 *a;
  char *z;
  int64_t nHit0, nMiss0, nHit1, nMiss1;
  fx_open(&f, "pm-idle");
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&branch=main&cache_kb=65536",
                      f.zStore);
  a = th_open(z);
  fx_fill(a, 3);
  assert_all(a, 3);
  sqlite3_close(a);
  depot_cache_counters(&nHit0, &nMiss0);
  a = th_open(z);
  th_exec(a, "PRAGMA cache_size=10");
  assert_all(a, 3);
  depot_cache_counters(&nHit1, &nMiss1);
  ck_assert_int_eq(nMiss1, nMiss0);
  ck_assert_int_gt(nHit1, nHit0+100);
  sqlite3_close(a);
  sqlite3_free(z);
  fx_close(&f);
}
END_TEST

/* map_kb as a URI parameter and a pragma; a map of 0 KiB or 1 KiB still
** reads right. */
START_TEST(test_pagemap_limit_uri_and_pragma){
  Fx f;
  sqlite3 *a;
  char *z, *zErr = 0;
  fx_open(&f, "pm-limit");
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&map_kb=1", f.zStore);
  a = th_open(z);
  sqlite3_free(z);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_map_kb"), 1);
  fx_fill(a, 3);
  assert_all(a, 3);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_map_kb=0"), 0);
  th_exec(a, "UPDATE t SET n=4");
  assert_all(a, 4);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_map_kb=4096"), 4096);
  assert_all(a, 4);
  ck_assert_int_eq(th_try(a, "PRAGMA depot_map_kb=-1", &zErr), SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(zErr, "depot_map_kb must be"));
  sqlite3_free(zErr);
  sqlite3_close(a);
  /* store_cache_kb sizes the store connection's page cache */
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&store_cache_kb=16",
                      f.zStore);
  a = th_open(z);
  sqlite3_free(z);
  assert_all(a, 4);
  sqlite3_close(a);
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&store_cache_kb=0", f.zStore);
  ck_assert_int_ne(sqlite3_open_v2(z, &a, SQLITE_OPEN_READWRITE
                                   |SQLITE_OPEN_URI, 0), SQLITE_OK);
  sqlite3_close(a);
  sqlite3_free(z);
  fx_close(&f);
}
END_TEST

/* spill_kb as a URI parameter and a pragma: pages the decoded-page cache
** evicts are read back from its spill file, right; 0 turns it off, a bad
** value is refused; the default is 262144. */
START_TEST(test_spill_uri_and_pragma){
  Fx f;
  sqlite3 *a;
  char *z, *zErr = 0;
  int64_t nW0, nR0, nW1, nR1;
  fx_open(&f, "pm-spill");
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app", f.zStore);
  a = th_open(z);
  sqlite3_free(z);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_spill_kb"), 262144);
  sqlite3_close(a);
  z = sqlite3_mprintf("file:%s?vfs=depot&db=spill&cache_kb=128&spill_kb=512",
                      f.zStore);
  a = th_open(z);
  sqlite3_free(z);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_spill_kb"), 512);
  th_exec(a, "PRAGMA cache_size=10");
  depot_cache_spill_counters(&nW0, &nR0);
  fx_fill(a, 3);
  assert_all(a, 3);
  th_exec(a, "UPDATE t SET n=5 WHERE k%2=0");
  ck_assert_int_eq(th_int(a, "SELECT sum(n) FROM t"), 1500*3 + 1500*5);
  depot_cache_spill_counters(&nW1, &nR1);
  ck_assert_int_gt(nW1-nW0, 0);
  ck_assert_int_gt(nR1-nR0, 0);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_spill_kb=0"), 0);
  th_exec(a, "UPDATE t SET n=5");
  assert_all(a, 5);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_spill_kb=1024"), 1024);
  assert_all(a, 5);
  ck_assert_int_eq(th_try(a, "PRAGMA depot_spill_kb=-1", &zErr),
                   SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(zErr, "depot_spill_kb must be"));
  sqlite3_free(zErr);
  sqlite3_close(a);
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&spill_kb=x", f.zStore);
  ck_assert_int_ne(sqlite3_open_v2(z, &a, SQLITE_OPEN_READWRITE
                                   |SQLITE_OPEN_URI, 0), SQLITE_OK);
  sqlite3_close(a);
  sqlite3_free(z);
  a = th_open(":memory:");               /* the reason of the failed open */
  z = th_text(a, "SELECT depot_last_error()");
  ck_assert_str_eq(z, "depot: spill_kb must be an integer 0..1073741824,"
                      " got 'x'");
  sqlite3_free(z);
  sqlite3_close(a);
  fx_close(&f);
}
END_TEST

/* A commit drops from the decoded-page cache the versions of its branch's
** pages it replaces: rewriting the table again and again leaves the cache
** about one version of it, not one per commit, and a reader pinned on
** the first snapshot still reads that snapshot (decoding it again). */
START_TEST(test_writer_drops_replaced_versions_from_cache){
  Fx f;
  sqlite3 *a, *r;
  char *z;
  sqlite3_int64 nOne, nAfter;
  int k;
  fx_open(&f, "pm-drop");
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&cache_kb=65536", f.zStore);
  a = th_open(z);
  r = th_open(z);
  sqlite3_free(z);
  th_exec(a, "PRAGMA cache_size=10");
  th_exec(r, "PRAGMA cache_size=10");
  fx_fill(a, 1);
  th_exec(a, "UPDATE t SET n=1");
  assert_all(a, 1);
  nOne = th_int(a, "SELECT bytes FROM depot_memory"
                   " WHERE name='decoded_page_cache'");
  th_exec(r, "BEGIN");
  assert_all(r, 1);
  for(k=2; k<=6; k++){
    z = sqlite3_mprintf("UPDATE t SET n=%d", k);
    th_exec(a, z);
    sqlite3_free(z);
  }
  assert_all(a, 6);
  nAfter = th_int(a, "SELECT bytes FROM depot_memory"
                     " WHERE name='decoded_page_cache'");
  ck_assert_int_lt(nAfter, nOne*2);
  assert_all(r, 1);
  th_exec(r, "COMMIT");
  assert_all(r, 6);
  sqlite3_close(r);
  sqlite3_close(a);
  fx_close(&f);
}
END_TEST

/* The decoded-page cache is one per store in the process: cache_kb or
** PRAGMA depot_cache_kb through one database of the store sets the limit
** every database and branch of it sees, while map_kb stays per branch; a
** fork reads its parent's pages from the entries the parent left. */
START_TEST(test_cache_limit_is_shared_by_the_store){
  Fx f;
  sqlite3 *a, *b, *c;
  char *z;
  sqlite3_int64 nHit0, nHit1;
  fx_open(&f, "pm-shared");
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&cache_kb=4096&map_kb=0",
                      f.zStore);
  a = th_open(z);
  sqlite3_free(z);
  fx_fill(a, 5);
  ck_assert_int_gt(th_intf(f.admin, "SELECT depot_fork(%Q,'app','main','try')",
                           f.zStore), 0);
  z = sqlite3_mprintf("file:%s?vfs=depot&db=other&map_kb=64", f.zStore);
  b = th_open(z);
  sqlite3_free(z);
  ck_assert_int_eq(th_int(b, "PRAGMA depot_cache_kb"), 4096);
  ck_assert_int_eq(th_int(b, "PRAGMA depot_cache_kb=2048"), 2048);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_cache_kb"), 2048);
  ck_assert_int_eq(th_int(b, "PRAGMA depot_map_kb"), 64);
  ck_assert_int_eq(th_int(a, "PRAGMA depot_map_kb"), 0);
  assert_all(a, 5);
  nHit0 = th_intf(f.admin, "SELECT cache_hits FROM depot_stats(%Q)",
                  f.zStore);
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&branch=try&map_kb=0",
                      f.zStore);
  c = th_open(z);
  sqlite3_free(z);
  th_exec(c, "PRAGMA cache_size=10");
  assert_all(c, 5);
  nHit1 = th_intf(f.admin, "SELECT cache_hits FROM depot_stats(%Q)",
                  f.zStore);
  ck_assert_int_gt(nHit1 - nHit0, 100);
  th_exec(c, "UPDATE t SET n=6");
  assert_all(c, 6);
  assert_all(a, 5);
  sqlite3_close(c);
  sqlite3_close(b);
  sqlite3_close(a);
  fx_close(&f);
}
END_TEST

/* ---- read-ahead decodes the pages of a scan on a thread ---- */

START_TEST(test_readahead_scan){
  Fx f;
  sqlite3 *a, *b;
  char *z;
  int64_t n0;
  fx_open(&f, "pm-readahead");
  iFxCache = 1;
  a = fx_db(&f, "main");
  ck_assert_int_eq(th_int(a, "PRAGMA depot_readahead"), 256);  /* default */
  fx_fill(a, 3);
  sqlite3_close(a);
  /* the pages a's commit cached outlive a: empty the cache, then scan */
  z = sqlite3_mprintf("file:%s?vfs=depot&db=app&readahead=64&cache_kb=0",
                      f.zStore);
  b = th_open(z);
  sqlite3_free(z);
  th_exec(b, "PRAGMA depot_cache_kb=65536");
  th_exec(b, "PRAGMA cache_size=10");
  ck_assert_int_eq(th_int(b, "PRAGMA depot_readahead"), 64);
  n0 = depot_ra_queued();
  assert_all(b, 3);
  ck_assert_int_gt(depot_ra_queued() - n0, 50);
  th_exec(b, "UPDATE t SET n=4 WHERE k%2=0");
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 1500*3 + 1500*4);
  ck_assert_int_eq(th_int(b, "PRAGMA depot_readahead=0"), 0);
  n0 = depot_ra_queued();
  th_exec(b, "PRAGMA depot_cache_kb=0");
  th_exec(b, "PRAGMA depot_cache_kb=65536");
  th_exec(b, "UPDATE t SET n=3");
  assert_all(b, 3);
  ck_assert_int_eq(depot_ra_queued(), n0);
  ck_assert_int_ne(th_try(b, "PRAGMA depot_readahead=-1", 0), SQLITE_OK);
  sqlite3_close(b);
  fx_close(&f);
}
END_TEST

/* The store of f filled by fx_fill(.., 3) (its writer kept in *pa, else
** closed) and the URI of a reader that reads 64 pages ahead and spills
** nothing (sqlite3_free() it). */
static char *ra_store(Fx *f, const char *zName, sqlite3 **pa){
  sqlite3 *a;
  fx_open(f, zName);
  iFxCache = 1;
  a = fx_db(f, "main");
  fx_fill(a, 3);
  if( pa ) *pa = a;
  else sqlite3_close(a);
  return sqlite3_mprintf("file:%s?vfs=depot&db=app&readahead=64"
                         "&cache_kb=64&spill_kb=0", f->zStore);
}

/* Open z with a 10-page SQLite cache and the decoded-page cache emptied
** (64 KiB: 16 of the ~300 pages of the table). */
static sqlite3 *ra_reader(const char *z){
  sqlite3 *b = th_open(z);
  sqlite3_busy_timeout(b, 5000);
  th_exec(b, "PRAGMA cache_size=10");
  th_exec(b, "PRAGMA depot_cache_kb=0");
  th_exec(b, "PRAGMA depot_cache_kb=64");
  return b;
}

/* A scan far longer than the decoded-page cache is read ahead to its end:
** its pages come from the read-ahead ring, not from the cache. */
START_TEST(test_readahead_ring_serves_scan_longer_than_cache){
  Fx f;
  sqlite3 *b;
  char *z = ra_store(&f, "pm-ra-ring", 0);
  int64_t h0, q0;
  b = ra_reader(z);
  sqlite3_free(z);
  depot_ra_test_patient = 1;
  h0 = depot_ra_hits();
  q0 = depot_ra_queued();
  ck_assert_int_eq(th_int(b, "SELECT sum(length(pad)) FROM t"), 3000*300);
  depot_ra_test_patient = 0;
  ck_assert_int_gt(depot_ra_queued() - q0, 100);
  ck_assert_int_eq(depot_ra_hits() - h0, depot_ra_queued() - q0);
  assert_all(b, 3);
  sqlite3_close(b);
  fx_close(&f);
}
END_TEST

/* The ring holds pages by their cache keys: after another connection's
** commit rewrites every page, a scan reads the new versions, never the
** ones the ring decoded before. */
START_TEST(test_readahead_ring_never_serves_replaced_page){
  Fx f;
  sqlite3 *a, *b;
  char *z;
  int64_t h0;
  z = ra_store(&f, "pm-ra-stale", &a);
  b = ra_reader(z);
  sqlite3_free(z);
  depot_ra_test_patient = 1;
  h0 = depot_ra_hits();
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 3000*3);
  ck_assert_int_gt(depot_ra_hits() - h0, 100);
  th_exec(a, "UPDATE t SET n=4, pad=randomblob(300)");
  h0 = depot_ra_hits();
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 3000*4);
  ck_assert_int_gt(depot_ra_hits() - h0, 100);
  depot_ra_test_patient = 0;
  assert_all(b, 4);
  th_exec(b, "UPDATE t SET n=5 WHERE k%3=0");
  ck_assert_int_eq(th_int(a, "SELECT sum(n) FROM t"), 2000*4 + 1000*5);
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 2000*4 + 1000*5);
  sqlite3_close(b);
  sqlite3_close(a);
  fx_close(&f);
}
END_TEST

/* A read-ahead thread reads through a store handle of its own; when that
** handle cannot be opened (the store file it names is gone), the job it
** was given is read in the foreground, the connection queues nothing more,
** and every read gives what the store holds. */
START_TEST(test_readahead_without_store_handle_reads_in_foreground){
  Fx f;
  sqlite3 *b;
  char *z = ra_store(&f, "pm-ra-nostore", 0);
  int64_t h0, q0, q1;
  b = ra_reader(z);
  sqlite3_free(z);
  depot_ra_test_no_store = 1;
  h0 = depot_ra_hits();
  q0 = depot_ra_queued();
  ck_assert_int_eq(th_int(b, "SELECT sum(length(pad)) FROM t"), 3000*300);
  assert_all(b, 3);
  q1 = depot_ra_queued();
  ck_assert_int_gt(q1 - q0, 0);      /* queued until the thread failed */
  th_exec(b, "PRAGMA depot_cache_kb=0");
  th_exec(b, "PRAGMA depot_cache_kb=64");
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 3000*3);
  depot_ra_test_no_store = 0;
  ck_assert_int_eq(depot_ra_hits() - h0, 0);
  ck_assert_int_eq(depot_ra_queued(), q1);       /* then nothing more */
  sqlite3_close(b);
  fx_close(&f);
}
END_TEST

/* The threads of this process (entries of /proc/self/task but . and ..). */
static int thread_count(void){
  return th_count_suffix("/proc/self/task", "") - 2;
}

/* fork() stops the read-ahead threads first (the process forks with no
** read-ahead thread running); the child reads ahead with threads of its
** own; the parent's connection reads ahead again after the fork. */
START_TEST(test_readahead_fork_stops_threads_and_parent_resumes){
  Fx f;
  sqlite3 *b;
  char *z;
  int64_t h0;
  pid_t pid;
  int st = 0, nThread;
  z = ra_store(&f, "pm-ra-fork", 0);
  b = ra_reader(z);
  depot_ra_test_patient = 1;
  h0 = depot_ra_hits();
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 3000*3);
  ck_assert_int_gt(depot_ra_hits() - h0, 100);
  nThread = thread_count();
  ck_assert_int_gt(nThread, 1);                 /* b's read-ahead thread */
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if( pid==0 ){
    sqlite3 *c = 0;
    int rc = 0;
    if( sqlite3_open_v2(z, &c, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0) ){
      _exit(2);
    }
    sqlite3_exec(c, "PRAGMA cache_size=10", 0, 0, 0);
    h0 = depot_ra_hits();
    if( th_int(c, "SELECT sum(n) FROM t")!=3000*3 ) rc = 3;
    else if( depot_ra_hits() - h0 <= 100 ) rc = 4;
    sqlite3_close(c);
    _exit(rc);
  }
  ck_assert_int_gt(pid, 0);
  ck_assert_int_eq(thread_count(), nThread-1);  /* joined before the fork */
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  th_exec(b, "PRAGMA depot_cache_kb=0");
  th_exec(b, "PRAGMA depot_cache_kb=64");
  h0 = depot_ra_hits();
  ck_assert_int_eq(th_int(b, "SELECT sum(n) FROM t"), 3000*3);
  ck_assert_int_gt(depot_ra_hits() - h0, 100);
  depot_ra_test_patient = 0;
  sqlite3_close(b);
  sqlite3_free(z);
  fx_close(&f);
}
END_TEST

/* ---- concurrent readers and a writer share the map and the cache ---- */

typedef struct Racer Racer;
struct Racer {
  Fx *f;
  int bWriter;
  const char *zBranch;        /* main, or the fork try (never written) */
  int nDone;                  /* rounds finished */
  int bBad;                   /* a reader saw a torn or stale table */
  volatile int *pbStop;
};

static void *racerMain(void *pArg){
  Racer *r = (Racer*)pArg;
  char *z = sqlite3_mprintf("file:%s?vfs=depot&db=app&branch=%s&%s"
                            "&readahead=32", r->f->zStore, r->zBranch,
                            azFxCache[iFxCache]);
  sqlite3 *db = 0;
  int last = -1;
  if( sqlite3_open_v2(z, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0) ){
    r->bBad = 1;
  }
  sqlite3_free(z);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_exec(db, "PRAGMA cache_size=5", 0, 0, 0);
  while( !r->bBad && !__atomic_load_n(r->pbStop, __ATOMIC_ACQUIRE) ){
    if( r->bWriter ){
      if( sqlite3_exec(db, "UPDATE t SET n=n+1", 0, 0, 0)!=SQLITE_OK ){
        r->bBad = 1;
      }
    }else{
      sqlite3_stmt *p = 0;
      if( sqlite3_prepare_v2(db, "SELECT count(*), min(n), max(n) FROM t",
                             -1, &p, 0)!=SQLITE_OK
       || sqlite3_step(p)!=SQLITE_ROW
       || sqlite3_column_int(p, 0)!=3000
       || sqlite3_column_int(p, 1)!=sqlite3_column_int(p, 2)
       || sqlite3_column_int(p, 1)<last ){
        r->bBad = 1;
      }else{
        last = sqlite3_column_int(p, 1);
      }
      sqlite3_finalize(p);
    }
    __atomic_add_fetch(&r->nDone, 1, __ATOMIC_RELAXED);
  }
  sqlite3_close(db);
  return 0;
}

START_TEST(test_pagemap_concurrent_readers_and_writer){
  Fx f;
  iFxCache = _i;
  sqlite3 *a;
  Racer aR[4];
  pthread_t aT[4];
  volatile int bStop = 0;
  int i;
  fx_open(&f, "pm-threads");
  a = fx_db(&f, "main");
  fx_fill(a, 0);
  ck_assert_int_gt(th_intf(f.admin, "SELECT depot_fork(%Q,'app','main','try')",
                           f.zStore), 0);
  for(i=0; i<4; i++){
    memset(&aR[i], 0, sizeof(aR[i]));
    aR[i].f = &f;
    aR[i].bWriter = i==0;
    aR[i].zBranch = i==3 ? "try" : "main";
    aR[i].pbStop = &bStop;
    ck_assert_int_eq(pthread_create(&aT[i], 0, racerMain, &aR[i]), 0);
  }
  for(i=0; i<200 && __atomic_load_n(&aR[0].nDone, __ATOMIC_RELAXED)<8; i++){
    usleep(50000);
  }
  __atomic_store_n(&bStop, 1, __ATOMIC_RELEASE);
  for(i=0; i<4; i++){
    pthread_join(aT[i], 0);
    ck_assert_msg(!aR[i].bBad, "racer %d saw a stale or torn table", i);
    ck_assert_int_gt(aR[i].nDone, 0);
  }
  assert_all(a, aR[0].nDone);
  sqlite3_close(a);
  fx_close(&f);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("pagemap");
  TCase *tc = tcase_create("stale");
  tcase_add_loop_test(tc, test_pagemap_other_connection_commit, 0, 4);
  tcase_add_loop_test(tc, test_pagemap_other_process_commit, 0, 4);
  tcase_add_loop_test(tc, test_pagemap_fork, 0, 4);
  tcase_add_loop_test(tc, test_pagemap_restore, 0, 4);
  tcase_add_loop_test(tc, test_pagemap_rollback, 0, 4);
  tcase_add_loop_test(tc, test_pagemap_compaction_and_gc, 0, 4);
  tcase_add_loop_test(tc, test_pagemap_reopen_after_other_process_commit, 0,
                      3);
  tcase_add_loop_test(tc, test_pagemap_store_made_anew, 0, 4);
  tcase_add_test(tc, test_reopen_hits_the_idle_cache);
  tcase_add_test(tc, test_pagemap_limit_uri_and_pragma);
  tcase_add_test(tc, test_spill_uri_and_pragma);
  tcase_add_test(tc, test_cache_limit_is_shared_by_the_store);
  tcase_add_test(tc, test_writer_drops_replaced_versions_from_cache);
  tcase_add_loop_test(tc, test_pagemap_concurrent_readers_and_writer, 0, 4);
  tcase_add_test(tc, test_readahead_scan);
  tcase_add_test(tc, test_readahead_ring_serves_scan_longer_than_cache);
  tcase_add_test(tc, test_readahead_ring_never_serves_replaced_page);
  tcase_add_test(tc, test_readahead_without_store_handle_reads_in_foreground);
  tcase_add_test(tc, test_readahead_fork_stops_threads_and_parent_resumes);
  suite_add_tcase(s, tc);
  return s;
}
