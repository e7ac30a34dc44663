/*
** check_pg.c -- the PostgreSQL store backend (vfs/store/pg.c) against a
** real server: the store contract, the depot oracle (identical results to
** a plain SQLite file, integrity_check and depot_verify clean; export and
** import), fork,
** restore points, PITR, compaction, GC and quota, the round trips of a
** commit, writer fencing and sharing between two processes, connections
** terminated at random points of commits and compactions, a server
** restart during a write loop, a server that is down, and credentials in
** no message or figure.
**
** Runs only under tests/check/pg_suite.sh, which starts a private cluster
** and sets DEPOT_TEST_STORE_URI (its postgresql:// URI, trust auth),
** DEPOT_TEST_PG_DIR (the cluster's directory) and DEPOT_TEST_PG_CLUSTER
** (tests/check/pg_cluster.sh).  Each test works in a schema of its own.
*/
#include "harness.h"
#include "vfs/store/store.h"
#include "vfs/depot_vfs.h"
#include "ext/depot.h"
#include "vfs/vfs_test.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The server's URI with the schema "t_<zTag>_<pid>" (and a password, which
** trust auth ignores, so that tests can look for it in messages). */
static char *pgUri(const char *zTag){
  const char *zBase = getenv("DEPOT_TEST_STORE_URI");
  const char *zQ;
  ck_assert_ptr_nonnull(zBase);
  zQ = strchr(zBase, '?');
  ck_assert_ptr_nonnull(zQ);
  /* postgresql:///db?host=..  ->  postgresql://u:sekrit42@/db?host=..&schema= */
  return sqlite3_mprintf("postgresql://nobody:sekrit42@%.*s%s&schema=t_%s_%d",
      (int)(zQ - (zBase+13)), zBase+13, zQ, zTag, (int)getpid());
}

/* Assert that a formatted statement answers a non-NULL text. */
static void pgTextOk(sqlite3 *db, const char *zFmt, const char *zArg){
  char *z = th_textf(db, zFmt, zArg);
  ck_assert_ptr_nonnull(z);
  sqlite3_free(z);
}

/* zUri escaped for a value of an SQLite URI parameter. */
static char *pgEsc(const char *zUri){
  sqlite3_str *s = sqlite3_str_new(0);
  const char *z;
  for(z=zUri; *z; z++){
    if( *z=='&' || *z=='%' || *z=='#' ){
      sqlite3_str_appendf(s, "%%%02X", (unsigned char)*z);
    }else{
      sqlite3_str_appendchar(s, 1, *z);
    }
  }
  return sqlite3_str_finish(s);
}

/* A depot database of the store zUri (db zDb, branch main). */
static sqlite3 *pgOpenDb(const char *zDir, const char *zUri, const char *zDb,
                         const char *zBranch){
  char *zE = pgEsc(zUri);
  char *zName = sqlite3_mprintf("file:%s/app?vfs=depot&db=%s&branch=%s"
                                "&store=%s", zDir, zDb, zBranch, zE);
  sqlite3 *db;
  sqlite3_close(th_open(":memory:"));      /* registers the depot VFS */
  db = th_open(zName);
  sqlite3_free(zE);
  sqlite3_free(zName);
  sqlite3_busy_timeout(db, 0);
  return db;
}

static int64_t pgNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* ---------------------------------------------------------------- */

typedef struct Rows Rows;
struct Rows { int n; char aKey[64][8]; };
static int pgRowCb(void *pArg, const unsigned char *pKey, int nKey,
                   const unsigned char *pVal, int nVal){
  Rows *r = (Rows*)pArg;
  (void)pVal; (void)nVal;
  if( r->n<64 && nKey<8 ){ memcpy(r->aKey[r->n], pKey, nKey); r->aKey[r->n][nKey] = 0; }
  r->n++;
  return 0;
}
static int pgCountCb(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  (void)pKey; (void)nKey; (void)pVal; (void)nVal;
  (*(int*)pArg)++;
  return 0;
}

/* The store contract of store.h on the PostgreSQL backend. */
START_TEST(t_store_contract){
  char *zUri = pgUri("contract");
  StoreSqliteConfig cfg;
  Store *p = 0, *q = 0;
  char *zErr = 0;
  void *pVal = 0;
  int nVal = 0, n, i, bHeld;
  int64_t iNew = 0, nByte = 0;
  Rows r;
  char aBuf[16];
  memset(&cfg, 0, sizeof(cfg));
  cfg.bCreate = 0;
  /* no store in the schema and no bCreate: refused, no password shown */
  ck_assert_int_eq(store_open(zUri, &cfg, &p, &zErr), SQLITE_CANTOPEN);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_ptr_null(strstr(zErr, "sekrit42"));
  ck_assert_ptr_nonnull(strstr(zErr, "postgresql://nobody@/"));
  sqlite3_free(zErr); zErr = 0;
  cfg.bCreate = 1;
  ck_assert_int_eq(store_open(zUri, &cfg, &p, &zErr), SQLITE_OK);
  ck_assert_int_eq(store_open(zUri, &cfg, &q, &zErr), SQLITE_OK);
  ck_assert_int_eq(store_max_value(p), 65536);
  /* ordered byte keys: a prefix sorts first, bytes unsigned */
  ck_assert_int_eq(store_put(p, "b", 1, "1", 1), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "ab", 2, "2", 1), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "a", 1, "3", 1), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "a\xff", 2, "", 0), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "c", 1, "5", 1), SQLITE_OK);
  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(store_scan(q, "", 0, 0, 0, 0, -1, pgRowCb, &r), SQLITE_OK);
  ck_assert_int_eq(r.n, 5);
  ck_assert_str_eq(r.aKey[0], "a");
  ck_assert_str_eq(r.aKey[1], "ab");
  ck_assert_str_eq(r.aKey[2], "a\xff");
  ck_assert_str_eq(r.aKey[3], "b");
  memset(&r, 0, sizeof(r));
  ck_assert_int_eq(store_scan(q, "a", 1, "c", 1, STORE_SCAN_REVERSE, 2,
                              pgRowCb, &r), SQLITE_OK);
  ck_assert_int_eq(r.n, 2);
  ck_assert_str_eq(r.aKey[0], "b");
  ck_assert_str_eq(r.aKey[1], "a\xff");
  /* empty value found, missing key -1 */
  ck_assert_int_eq(store_get(q, "a\xff", 2, &pVal, &nVal), SQLITE_OK);
  ck_assert_ptr_nonnull(pVal); ck_assert_int_eq(nVal, 0);
  sqlite3_free(pVal);
  ck_assert_int_eq(store_get(q, "zz", 2, &pVal, &nVal), SQLITE_OK);
  ck_assert_ptr_null(pVal); ck_assert_int_eq(nVal, -1);
  /* a write transaction is invisible until commit; a rollback leaves
  ** nothing; a read transaction keeps its snapshot */
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "d", 1, "x", 1), SQLITE_OK);
  ck_assert_int_eq(store_get(p, "d", 1, &pVal, &nVal), SQLITE_OK);
  ck_assert_int_eq(nVal, 1); sqlite3_free(pVal);
  ck_assert_int_eq(store_get(q, "d", 1, &pVal, &nVal), SQLITE_OK);
  ck_assert_int_eq(nVal, -1);
  ck_assert_int_eq(store_begin(q, 0), SQLITE_OK);
  ck_assert_int_eq(store_get(q, "c", 1, &pVal, &nVal), SQLITE_OK);
  sqlite3_free(pVal);
  ck_assert_int_eq(store_commit(p), SQLITE_OK);
  ck_assert_int_eq(store_get(q, "d", 1, &pVal, &nVal), SQLITE_OK);
  ck_assert_int_eq(nVal, -1);                     /* q's snapshot */
  ck_assert_int_eq(store_commit(q), SQLITE_OK);
  ck_assert_int_eq(store_get(q, "d", 1, &pVal, &nVal), SQLITE_OK);
  ck_assert_int_eq(nVal, 1); sqlite3_free(pVal);
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "e", 1, "xyz", 3), SQLITE_OK);
  ck_assert_int_eq(store_clear_range(p, "a", 1, "b", 1), SQLITE_OK);
  /* the transaction reads its own buffered writes */
  ck_assert_int_eq(store_get(p, "ab", 2, &pVal, &nVal), SQLITE_OK);
  ck_assert_int_eq(nVal, -1);
  ck_assert_int_eq(store_get(p, "b", 1, &pVal, &nVal), SQLITE_OK);
  ck_assert_int_eq(nVal, 1); sqlite3_free(pVal);
  ck_assert_int_eq(store_get_range(p, "e", 1, 1, 5, aBuf, &n), SQLITE_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_int_eq(memcmp(aBuf, "yz", 2), 0);
  n = 0;
  ck_assert_int_eq(store_scan(p, "", 0, 0, 0, 0, -1, pgCountCb, &n), SQLITE_OK);
  ck_assert_int_eq(n, 4);                       /* b c d e */
  ck_assert_int_eq(store_rollback(p), SQLITE_OK);
  n = 0;
  ck_assert_int_eq(store_scan(q, "", 0, 0, 0, 0, -1, pgCountCb, &n), SQLITE_OK);
  ck_assert_int_eq(n, 6);
  /* the second writer waits for the first, then SQLITE_BUSY */
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  {
    Store *w = 0;
    char *zU2 = sqlite3_mprintf("%s&busy_ms=200", zUri);
    ck_assert_int_eq(store_open(zU2, &cfg, &w, &zErr), SQLITE_OK);
    ck_assert_int_eq(store_begin(w, 1), SQLITE_BUSY);
    ck_assert_ptr_null(strstr(store_errmsg(w), "sekrit42"));
    store_close(w);
    sqlite3_free(zU2);
  }
  ck_assert_int_eq(store_rollback(p), SQLITE_OK);
  /* clear_range, add, get_range, paging of long scans */
  ck_assert_int_eq(store_clear_range(p, "a", 1, "b", 1), SQLITE_OK);
  n = 0;
  ck_assert_int_eq(store_scan(q, "", 0, 0, 0, 0, -1, pgCountCb, &n), SQLITE_OK);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(store_add(p, "n", 1, 5, &iNew), SQLITE_OK);
  ck_assert_int_eq(store_add(q, "n", 1, -2, &iNew), SQLITE_OK);
  ck_assert_int_eq((int)iNew, 3);
  ck_assert_int_eq(store_put(p, "r", 1, "0123456789", 10), SQLITE_OK);
  ck_assert_int_eq(store_get_range(q, "r", 1, 7, 8, aBuf, &n), SQLITE_OK);
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(memcmp(aBuf, "789", 3), 0);
  ck_assert_int_eq(store_get_range(q, "s", 1, 0, 8, aBuf, &n), SQLITE_OK);
  ck_assert_int_eq(n, -1);
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  for(i=0; i<1000; i++){
    char k[8];
    sqlite3_snprintf(sizeof(k), k, "p%04d", i);
    ck_assert_int_eq(store_put(p, k, 5, k, 5), SQLITE_OK);
  }
  ck_assert_int_eq(store_commit(p), SQLITE_OK);
  n = 0;
  ck_assert_int_eq(store_scan(q, "p", 1, "q", 1, 0, -1, pgCountCb, &n), SQLITE_OK);
  ck_assert_int_eq(n, 1000);
  n = 0;
  ck_assert_int_eq(store_scan(q, "p", 1, 0, 0, STORE_SCAN_REVERSE, 700,
                              pgCountCb, &n), SQLITE_OK);
  ck_assert_int_eq(n, 700);
  /* too big */
  {
    char *zBig = sqlite3_malloc(70000);
    memset(zBig, 1, 70000);
    ck_assert_int_eq(store_put(p, "big", 3, zBig, 70000), SQLITE_TOOBIG);
    sqlite3_free(zBig);
  }
  /* writer locks: one holder across handles, idempotent, released */
  ck_assert_int_eq(store_writer_lock(p, "br", 2), SQLITE_OK);
  ck_assert_int_eq(store_writer_lock(p, "br", 2), SQLITE_OK);
  ck_assert_int_eq(store_writer_lock(q, "br", 2), SQLITE_BUSY);
  ck_assert_int_eq(store_writer_held(q, "br", 2, &bHeld), SQLITE_OK);
  ck_assert_int_eq(bHeld, 1);
  ck_assert_int_eq(store_writer_held(p, "br", 2, &bHeld), SQLITE_OK);
  ck_assert_int_eq(bHeld, 0);
  ck_assert_int_eq(store_writer_unlock(p, "br", 2), SQLITE_OK);
  ck_assert_int_eq(store_writer_held(q, "br", 2, &bHeld), SQLITE_OK);
  ck_assert_int_eq(bHeld, 0);
  ck_assert_int_eq(store_writer_lock(q, "br", 2), SQLITE_OK);
  store_close(q);                               /* releases */
  ck_assert_int_eq(store_writer_lock(p, "br", 2), SQLITE_OK);
  ck_assert_int_eq(store_physical_bytes(p, &nByte), SQLITE_OK);
  ck_assert_int_gt((int)nByte, 8192);
  ck_assert_int_eq(store_maintain(p, STORE_MAINT_RECLAIM), SQLITE_OK);
  store_close(p);
  sqlite3_free(zUri);
}
END_TEST

/* ---------------------------------------------------------------- */

/* The same random statements on a depot database of a PostgreSQL store
** and on a plain SQLite file give the same results. */
static void pgWorkload(sqlite3 *aDb[2], int nStep, unsigned int seed){
  int i, k;
  for(k=0; k<2; k++){
    th_exec(aDb[k], "CREATE TABLE IF NOT EXISTS t(a INTEGER PRIMARY KEY,"
                    " b TEXT, c BLOB); CREATE INDEX IF NOT EXISTS tb ON t(b)");
  }
  for(i=0; i<nStep; i++){
    unsigned int r = rand_r(&seed);
    char *zSql;
    int nBatch = 1 + (int)(r % 40);
    switch( r % 5 ){
      case 0: case 1:
        zSql = sqlite3_mprintf("BEGIN; WITH RECURSIVE c(x) AS (SELECT %u"
            " UNION ALL SELECT x+1 FROM c WHERE x<%u+%d) INSERT OR REPLACE"
            " INTO t SELECT x%%5000, hex(x*%u), zeroblob(x%%3000) FROM c;"
            " COMMIT", r%100000, r%100000, nBatch, r%977);
        break;
      case 2:
        zSql = sqlite3_mprintf("UPDATE t SET b=b||'x', c=zeroblob(%d)"
            " WHERE a%%%d=0", (int)(r%5000), 2+(int)(r%31));
        break;
      case 3:
        zSql = sqlite3_mprintf("DELETE FROM t WHERE a%%%d=%d", 7+(int)(r%50),
                               (int)(r%7));
        break;
      default:
        zSql = sqlite3_mprintf("INSERT OR REPLACE INTO t VALUES(%u,"
            " printf('%%.*c', %d, 'q'), randomblob(0))", r%5000,
            (int)(r%20000));
        break;
    }
    for(k=0; k<2; k++) th_exec(aDb[k], zSql);
    sqlite3_free(zSql);
  }
}

static char *pgDigest(sqlite3 *db){
  return th_text(db, "SELECT count(*)||':'||total(a)||':'||"
      "total(length(b))||':'||total(length(c))||':'||"
      "(SELECT group_concat(a||b, ',') FROM (SELECT a, b FROM t ORDER BY"
      " a LIMIT 50)) FROM t");
}

START_TEST(t_oracle){
  char *zDir = th_tmpdir("pg_oracle");
  char *zUri = pgUri("oracle");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *aDb[2];
  char *z0, *z1, *zStats;
  aDb[0] = pgOpenDb(zDir, zUri, "main", "main");
  aDb[1] = th_open(zPlain);
  pgWorkload(aDb, 150, 7);
  z0 = pgDigest(aDb[0]);
  z1 = pgDigest(aDb[1]);
  ck_assert_str_eq(z0, z1);
  sqlite3_free(z0); sqlite3_free(z1);
  z0 = th_text(aDb[0], "PRAGMA integrity_check");
  ck_assert_str_eq(z0, "ok");
  sqlite3_free(z0);
  sqlite3_close(aDb[0]);
  /* reopened from the server alone */
  aDb[0] = pgOpenDb(zDir, zUri, "main", "main");
  z0 = pgDigest(aDb[0]);
  z1 = pgDigest(aDb[1]);
  ck_assert_str_eq(z0, z1);
  sqlite3_free(z0); sqlite3_free(z1);
  ck_assert_int_eq(th_intf(aDb[1], "SELECT count(*) FROM depot_verify(%Q)",
                           zUri), 0);
  zStats = th_textf(aDb[1], "SELECT json_array(databases,"
      " branches, stored_bytes, logical_bytes, physical_bytes)"
      " FROM depot_stats(%Q)", zUri);
  ck_assert_ptr_nonnull(zStats);
  ck_assert_ptr_null(strstr(zStats, "sekrit42"));
  ck_assert_int_gt(th_intf(aDb[1], "SELECT physical_bytes FROM"
                           " depot_stats(%Q)", zUri), 100000);
  ck_assert_int_eq(th_intf(aDb[1], "SELECT databases FROM depot_stats(%Q)",
                           zUri), 1);
  sqlite3_free(zStats);
  /* export to a plain file and import it as another database */
  {
    char *zOut = sqlite3_mprintf("%s/out.db", zDir);
    sqlite3 *pOut;
    ck_assert_int_gt(th_intf(aDb[1], "SELECT depot_export(%Q, 'main', 'main',"
                             " %Q)", zUri, zOut), 0);
    ck_assert_int_gt(th_intf(aDb[1], "SELECT depot_import(%Q, %Q, 'copy')",
                             zOut, zUri), 0);
    pOut = pgOpenDb(zDir, zUri, "copy", "main");
    z0 = pgDigest(pOut);
    z1 = pgDigest(aDb[1]);
    ck_assert_str_eq(z0, z1);
    sqlite3_free(z0); sqlite3_free(z1);
    sqlite3_close(pOut);
    sqlite3_free(zOut);
  }
  sqlite3_close(aDb[0]);
  sqlite3_close(aDb[1]);
  sqlite3_free(zPlain); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* Forks, restore points, restore, PITR and rollback on the server. */
START_TEST(t_fork_restore){
  char *zDir = th_tmpdir("pg_fork");
  char *zUri = pgUri("fork");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  sqlite3 *dev, *fx;
  sqlite3_int64 iTx;
  th_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
  iTx = th_intf(db, "SELECT max(txid) FROM depot_commits(%Q, 'main', 'main')",
                zUri);
  th_exec(db, "INSERT INTO t VALUES(2)");
  ck_assert_int_gt(th_intf(db, "SELECT depot_fork(%Q, 'main', 'main', 'dev')",
                           zUri), 0);
  ck_assert_int_gt(th_intf(db, "SELECT depot_fork(%Q, 'main', 'main', 'first',"
                           " %lld)", zUri, iTx), 0);
  pgTextOk(db, "SELECT depot_restore_point(%Q, 'main', 'main', 'v2')", zUri);
  th_exec(db, "INSERT INTO t VALUES(3)");
  dev = pgOpenDb(zDir, zUri, "main", "dev");
  th_exec(dev, "INSERT INTO t VALUES(20)");
  ck_assert_int_eq(th_int(dev, "SELECT sum(x) FROM t"), 23);
  fx = pgOpenDb(zDir, zUri, "main", "first");
  ck_assert_int_eq(th_int(fx, "SELECT sum(x) FROM t"), 1);
  sqlite3_close(fx);
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM t"), 6);
  sqlite3_close(db);
  pgTextOk(dev, "SELECT depot_restore(%Q, 'main', 'main', 'v2')", zUri);
  db = pgOpenDb(zDir, zUri, "main", "main");
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM t"), 3);
  th_exec(db, "INSERT INTO t VALUES(100)");
  sqlite3_close(db);
  ck_assert_int_gt(th_intf(dev, "SELECT depot_rollback(%Q, 'main', 'main')",
                           zUri), 0);
  db = pgOpenDb(zDir, zUri, "main", "main");
  /* the restore is undone: the branch is as before it */
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM t"), 6);
  ck_assert_int_ge(th_intf(db, "SELECT count(*) FROM depot_branches(%Q)",
                           zUri), 3);
  ck_assert_int_eq(th_intf(db, "SELECT depot_drop_branch(%Q, 'main', 'first')",
                           zUri), 1);
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM depot_verify(%Q)", zUri),
                   0);
  sqlite3_close(db);
  sqlite3_close(dev);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* Compaction, GC, vacuum and quota on the server. */
START_TEST(t_compact_gc_quota){
  char *zDir = th_tmpdir("pg_compact");
  char *zUri = pgUri("compact");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  char *zSum, *zJ;
  int i;
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
  for(i=0; i<40; i++){
    char *z = sqlite3_mprintf("INSERT OR REPLACE INTO t VALUES(%d,"
                              " randomblob(900))", i%25);
    th_exec(db, z);
    sqlite3_free(z);
  }
  zSum = th_text(db, "SELECT count(*)||':'||total(length(b)) FROM t");
  ck_assert_int_gt(th_intf(db, "SELECT depot_fork(%Q, 'main', 'main', 'tmp')",
                           zUri), 0);
  ck_assert_int_eq(th_intf(db, "SELECT depot_drop_branch(%Q, 'main', 'tmp')",
                           zUri), 1);
  zJ = th_textf(db, "SELECT depot_compact(%Q)", zUri);
  ck_assert_ptr_nonnull(zJ);
  sqlite3_free(zJ);
  zJ = th_textf(db, "SELECT depot_gc(%Q)", zUri);
  ck_assert_ptr_nonnull(zJ);
  sqlite3_free(zJ);
  zJ = th_textf(db, "SELECT depot_vacuum(%Q)", zUri);
  ck_assert_ptr_nonnull(zJ);
  ck_assert_ptr_null(strstr(zJ, "sekrit42"));
  sqlite3_free(zJ);
  zJ = th_text(db, "SELECT count(*)||':'||total(length(b)) FROM t");
  ck_assert_str_eq(zJ, zSum);
  sqlite3_free(zJ);
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM depot_verify(%Q)", zUri),
                   0);
  /* a quota below the database's size refuses growth */
  ck_assert_int_eq(th_intf(db, "SELECT depot_quota(%Q, 'main', 10000)", zUri),
                   10000);
  sqlite3_close(db);
  db = pgOpenDb(zDir, zUri, "main", "main");
  ck_assert_int_ne(th_try(db, "INSERT INTO t SELECT 1000+a, randomblob(5000)"
                          " FROM t", 0), SQLITE_OK);
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM depot_quotas(%Q)", zUri),
                   1);
  sqlite3_close(db);
  sqlite3_free(zSum); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* A commit costs the same round trips for 10 pages as for 400. */
START_TEST(t_round_trips){
  char *zDir = th_tmpdir("pg_trips");
  char *zUri = pgUri("trips");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  int64_t n0, nSmall, nBig;
  th_exec(db, "PRAGMA cache_size=-100000; CREATE TABLE t(a INTEGER PRIMARY"
              " KEY, b)");
  th_exec(db, "INSERT INTO t VALUES(1, 1)");
  n0 = store_pg_round_trips();
  th_exec(db, "WITH RECURSIVE c(x) AS (SELECT 2 UNION ALL SELECT x+1 FROM c"
              " WHERE x<40) INSERT INTO t SELECT x, randomblob(800) FROM c");
  nSmall = store_pg_round_trips() - n0;
  n0 = store_pg_round_trips();
  th_exec(db, "WITH RECURSIVE c(x) AS (SELECT 100 UNION ALL SELECT x+1 FROM c"
              " WHERE x<1700) INSERT INTO t SELECT x, randomblob(800) FROM c");
  nBig = store_pg_round_trips() - n0;
  fprintf(stderr, "check_pg: round trips of a commit: %lld (~10 pages),"
          " %lld (~400 pages)\n", (long long)nSmall, (long long)nBig);
  ck_assert_int_le(nBig, nSmall + 4);
  ck_assert_int_le(nSmall, 30);
  sqlite3_close(db);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* A scan of a cold database reads the page index of a run of pages, and
** the chunks of a blob, with one statement each: far fewer round trips
** than pages.  A chunk row changed in a transaction is read back as
** written. */
START_TEST(t_cold_scan_round_trips){
  char *zDir = th_tmpdir("pg_cold");
  char *zUri = pgUri("cold");
  /* no background compaction: the round trip count is the process's */
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main&compact_after=0");
  int64_t n0, nScan, nPage;
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b)");
  th_exec(db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c"
              " WHERE x<3000) INSERT INTO t SELECT x, randomblob(800) FROM c");
  th_exec(db, "UPDATE t SET b=randomblob(700) WHERE a%7=0");
  nPage = th_int(db, "PRAGMA page_count");
  sqlite3_close(db);
  /* the decoded pages and page map outlive the connection: empty both */
  db = pgOpenDb(zDir, zUri, "main",
                "main&compact_after=0&cache_kb=0&map_kb=0");
  /* no read-ahead on a PostgreSQL store unless asked for */
  ck_assert_int_eq(th_int(db, "PRAGMA depot_readahead"), 0);
  n0 = store_pg_round_trips();
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE length(b)>0"),
                   3000);
  nScan = store_pg_round_trips() - n0;
  fprintf(stderr, "check_pg: round trips of a cold scan of %lld pages: %lld\n",
          (long long)nPage, (long long)nScan);
  ck_assert_int_gt(nPage, 500);
  ck_assert_int_le(nScan, nPage/8);
  {
    char *z = th_text(db, "PRAGMA integrity_check");
    ck_assert_str_eq(z, "ok");
    sqlite3_free(z);
  }
  sqlite3_close(db);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* The depot_* operations on one PostgreSQL store reuse an idle handle:
** the second one opens no new connection. */
START_TEST(t_operations_reuse_the_connection){
  char *zDir = th_tmpdir("pg_reuse");
  char *zUri = pgUri("reuse");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  int64_t n0, nFirst, nSecond;
  char *zCmd = sqlite3_mprintf("sh %s restart %s",
      getenv("DEPOT_TEST_PG_CLUSTER"), getenv("DEPOT_TEST_PG_DIR"));
  th_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
  depot_fork_idle_close();
  n0 = store_pg_round_trips();
  pgTextOk(db, "SELECT depot_restore_point(%Q, 'main', 'main', 'a')", zUri);
  nFirst = store_pg_round_trips() - n0;
  n0 = store_pg_round_trips();
  pgTextOk(db, "SELECT depot_restore_point(%Q, 'main', 'main', 'b')", zUri);
  nSecond = store_pg_round_trips() - n0;
  fprintf(stderr, "check_pg: round trips of an operation: %lld (new"
          " connection), %lld (idle handle)\n", (long long)nFirst,
          (long long)nSecond);
  ck_assert_int_le(nSecond + 4, nFirst);
  /* a restarted server: the idle handle reconnects */
  ck_assert_int_eq(system(zCmd), 0);
  pgTextOk(db, "SELECT depot_restore_point(%Q, 'main', 'main', 'c')", zUri);
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM depot_restore_points(%Q,"
                           " 'main')", zUri), 3);
  depot_fork_idle_close();
  sqlite3_close(db);
  sqlite3_free(zCmd); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* ---- two processes ---- */

/* Child: "hold STORE-URI DIR FLAG": write a row in a transaction, create
** FLAG, keep the transaction open for a second, commit. */
int depot_test_child(int argc, char **argv){
  sqlite3 *db;
  char *zName, *zE;
  FILE *f;
  if( argc<4 || strcmp(argv[0], "hold")!=0 ) return 2;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ) return 3;
  sqlite3_close(db);                        /* registers the depot VFS */
  zE = pgEsc(argv[1]);
  zName = sqlite3_mprintf("file:%s/app?vfs=depot&store=%s", argv[2], zE);
  if( sqlite3_open_v2(zName, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, 0)!=SQLITE_OK ) return 3;
  sqlite3_busy_timeout(db, 10000);
  if( sqlite3_exec(db, "BEGIN IMMEDIATE; INSERT INTO t VALUES('child')", 0, 0,
                   0)!=SQLITE_OK ) return 4;
  f = fopen(argv[3], "w");
  if( f ) fclose(f);
  usleep(1500000);
  if( sqlite3_exec(db, "COMMIT", 0, 0, 0)!=SQLITE_OK ) return 5;
  sqlite3_free(zName);
  sqlite3_free(zE);
  sqlite3_close(db);
  return 0;
}

/* Two processes writing one branch are fenced; each sees the other's
** commits. */
START_TEST(t_two_processes){
  char *zDir = th_tmpdir("pg_two");
  char *zUri = pgUri("two");
  char *zFlag = sqlite3_mprintf("%s/flag", zDir);
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  const char *azArg[5];
  pid_t pid;
  int st, i, rc = SQLITE_OK;
  th_exec(db, "CREATE TABLE t(x)");
  th_exec(db, "INSERT INTO t VALUES('parent')");
  azArg[0] = "hold"; azArg[1] = zUri; azArg[2] = zDir; azArg[3] = zFlag;
  azArg[4] = 0;
  pid = th_spawn(azArg);
  for(i=0; i<200 && access(zFlag, F_OK)!=0; i++) usleep(50000);
  ck_assert_int_eq(access(zFlag, F_OK), 0);
  /* the child holds the branch's writer lock: fenced */
  rc = th_try(db, "INSERT INTO t VALUES('parent2')", 0);
  ck_assert_int_eq(rc, SQLITE_BUSY);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  /* the child's commit is seen; now the parent writes */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE x='child'"), 1);
  th_exec(db, "INSERT INTO t VALUES('parent2')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  sqlite3_close(db);
  sqlite3_free(zFlag); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* ---- faults ---- */

/* A commit whose COMMIT is lost on every try (the server rolled it back,
** the answer never came): the COMMIT fails, saying so, nothing of it is
** stored, and the connection commits again afterwards. */
START_TEST(t_commit_lost_every_try_fails){
  char *zDir = th_tmpdir("pg_lost3");
  char *zUri = pgUri("lost3");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  sqlite3 *chk;
  char *zErr = 0;
  int rc;
  th_exec(db, "CREATE TABLE t(x)");
  depot_pg_test_lost_commits = 3;
  rc = th_try(db, "INSERT INTO t VALUES('lost')", &zErr);
  depot_pg_test_lost_commits = 0;
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  sqlite3_free(zErr);
  zErr = th_text(db, "SELECT depot_last_error()");
  ck_assert_msg(zErr && strstr(zErr, "lost during a commit, which did not"
                " happen (3 tries)"), "%s", zErr ? zErr : "(null)");
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  th_exec(db, "INSERT INTO t VALUES('kept')");
  sqlite3_close(db);
  chk = pgOpenDb(zDir, zUri, "main", "main");
  ck_assert_int_eq(th_int(chk, "SELECT count(*) FROM t WHERE x='lost'"), 0);
  ck_assert_int_eq(th_int(chk, "SELECT count(*) FROM t WHERE x='kept'"), 1);
  ck_assert_int_eq(th_intf(chk, "SELECT count(*) FROM depot_verify(%Q)", zUri),
                   0);
  sqlite3_close(chk);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* A COMMIT lost twice and answered the third time is acknowledged and
** stored once. */
START_TEST(t_commit_lost_then_retried_is_stored){
  char *zDir = th_tmpdir("pg_lost2");
  char *zUri = pgUri("lost2");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  sqlite3 *chk;
  th_exec(db, "CREATE TABLE t(x)");
  depot_pg_test_lost_commits = 2;
  th_exec(db, "INSERT INTO t VALUES('third try')");
  ck_assert_int_eq(depot_pg_test_lost_commits, 0);
  sqlite3_close(db);
  chk = pgOpenDb(zDir, zUri, "main", "main");
  ck_assert_int_eq(th_int(chk, "SELECT count(*) FROM t WHERE x='third try'"),
                   1);
  sqlite3_close(chk);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* Terminates every other client backend of the server every 2..25 ms
** until told to stop. */
typedef struct Killer Killer;
struct Killer { volatile int bStop; int nKill; };
static void pgQuiet(void *pArg, const char *zMsg){
  (void)pArg; (void)zMsg;
}
static void *pgKillerMain(void *pArg){
  Killer *k = (Killer*)pArg;
  PGconn *c = PQconnectdb(getenv("DEPOT_TEST_STORE_URI"));
  unsigned int seed = (unsigned int)getpid();
  /* "PID n is not a PostgreSQL backend process": one that ended between
  ** the listing and the signal */
  PQsetNoticeProcessor(c, pgQuiet, 0);
  while( !__atomic_load_n(&k->bStop, __ATOMIC_ACQUIRE) ){
    PGresult *r;
    usleep(2000 + rand_r(&seed)%23000);
    r = PQexec(c, "SELECT count(pg_terminate_backend(pid)) FROM"
        " pg_stat_activity WHERE pid<>pg_backend_pid() AND"
        " backend_type='client backend' AND datname=current_database()");
    if( PQresultStatus(r)==PGRES_TUPLES_OK ) k->nKill += atoi(PQgetvalue(r,0,0));
    PQclear(r);
  }
  PQfinish(c);
  return 0;
}

/* Commits and compactions while the store's connections are terminated at
** random points: each commit is whole or absent, acknowledged ones are all
** there, the store verifies clean, the handle reconnects. */
START_TEST(t_terminate){
  char *zDir = th_tmpdir("pg_term");
  char *zUri = pgUri("term");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  sqlite3 *chk;
  pthread_t th;
  Killer k;
  int i, nOk = 0, nFail = 0;
  char aOk[200];
  th_exec(db, "CREATE TABLE t(i, j, b)");
  memset(&k, 0, sizeof(k));
  memset(aOk, 0, sizeof(aOk));
  pthread_create(&th, 0, pgKillerMain, &k);
  for(i=0; i<120; i++){
    char *z = sqlite3_mprintf("BEGIN; WITH RECURSIVE c(j) AS (SELECT 1 UNION"
        " ALL SELECT j+1 FROM c WHERE j<20) INSERT INTO t SELECT %d, j,"
        " randomblob(700) FROM c; COMMIT", i);
    int rc = th_try(db, z, 0);
    sqlite3_free(z);
    if( rc==SQLITE_OK ){ aOk[i] = 1; nOk++; }
    else{ nFail++; sqlite3_exec(db, "ROLLBACK", 0, 0, 0); }
    if( i%30==29 ){
      sqlite3 *c2 = th_open(":memory:");
      char *zSql = sqlite3_mprintf("SELECT depot_compact(%Q)", zUri);
      th_try(c2, zSql, 0);
      sqlite3_free(zSql);
      sqlite3_close(c2);
    }
  }
  __atomic_store_n(&k.bStop, 1, __ATOMIC_RELEASE);
  pthread_join(th, 0);
  fprintf(stderr, "check_pg: terminate: %d commits acknowledged, %d failed,"
          " %d backends terminated\n", nOk, nFail, k.nKill);
  ck_assert_int_gt(k.nKill, 0);
  ck_assert_int_gt(nOk, 0);
  sqlite3_close(db);
  chk = pgOpenDb(zDir, zUri, "main", "main");
  for(i=0; i<120; i++){
    int n = (int)th_intf(chk, "SELECT count(*) FROM t WHERE i=%d", i);
    if( aOk[i] ) ck_assert_int_eq(n, 20);
    else ck_assert(n==0 || n==20);
  }
  {
    char *z = th_text(chk, "PRAGMA integrity_check");
    ck_assert_str_eq(z, "ok");
    sqlite3_free(z);
  }
  ck_assert_int_eq(th_intf(chk, "SELECT count(*) FROM depot_verify(%Q)", zUri),
                   0);
  th_exec(chk, "INSERT INTO t VALUES(-1, 0, 0)");
  sqlite3_close(chk);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* pg_ctl restart -m immediate during a write loop loses no acknowledged
** commit. */
START_TEST(t_restart){
  char *zDir = th_tmpdir("pg_restart");
  char *zUri = pgUri("restart");
  const char *zCluster = getenv("DEPOT_TEST_PG_CLUSTER");
  const char *zPgDir = getenv("DEPOT_TEST_PG_DIR");
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  pid_t pid;
  int i, nOk = 0, nFail = 0, st = 0, bDone = 0, nAfter = 0;
  char aOk[5000];
  int64_t tEnd, tDone = 0;
  ck_assert_ptr_nonnull(zCluster);
  ck_assert_ptr_nonnull(zPgDir);
  th_exec(db, "CREATE TABLE t(i, b)");
  memset(aOk, 0, sizeof(aOk));
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    usleep(300000);
    execlp("sh", "sh", zCluster, "restart", zPgDir, (char*)0);
    _exit(127);
  }
  /* writes until a second after the restart is done */
  tEnd = pgNowMs() + 60000;
  for(i=0; i<5000 && pgNowMs()<tEnd; i++){
    char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d, randomblob(3000))", i);
    int rc = th_try(db, z, 0);
    sqlite3_free(z);
    if( rc==SQLITE_OK ){ aOk[i] = 1; nOk++; nAfter += bDone; }
    else{ nFail++; usleep(20000); }
    if( !bDone && waitpid(pid, &st, WNOHANG)==pid ){
      bDone = 1;
      tDone = pgNowMs();
    }
    if( bDone && pgNowMs()>tDone+1000 ) break;
  }
  if( !bDone ) ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  fprintf(stderr, "check_pg: restart: %d commits acknowledged (%d after the"
          " restart), %d failed\n", nOk, nAfter, nFail);
  /* the restart came during the loop, and the writer went on after it
  ** (a commit the restart cut is run again on the new connection) */
  ck_assert(bDone);
  ck_assert_int_gt(nAfter, 0);
  sqlite3_close(db);
  db = pgOpenDb(zDir, zUri, "main", "main");
  for(i=0; i<5000; i++){
    if( aOk[i] ){
      ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM t WHERE i=%d", i), 1);
    }
  }
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM depot_verify(%Q)", zUri),
                   0);
  sqlite3_close(db);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* A store the role may not read the format row of: the open fails saying
** why (the server's answer), not that the format is unknown. */
START_TEST(t_format_unreadable_says_why){
  char *zDir = th_tmpdir("pg_nometa");
  char *zUri = pgUri("nometa");
  char *zRole, *zSql, *zErr = 0;
  const char *zSchema = strstr(zUri, "schema=") + 7;
  sqlite3 *db = pgOpenDb(zDir, zUri, "main", "main");
  PGconn *c = PQconnectdb(getenv("DEPOT_TEST_STORE_URI"));
  PGresult *r;
  int rc;
  th_exec(db, "CREATE TABLE t(x)");
  sqlite3_close(db);
  ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
  zSql = sqlite3_mprintf("DROP ROLE IF EXISTS depot_nometa_%d;"
      " CREATE ROLE depot_nometa_%d LOGIN;"
      " GRANT USAGE ON SCHEMA \"%w\" TO depot_nometa_%d;"
      " GRANT SELECT ON \"%w\".depot_kv TO depot_nometa_%d",
      (int)getpid(), (int)getpid(), zSchema, (int)getpid(), zSchema,
      (int)getpid());
  r = PQexec(c, zSql);
  ck_assert_msg(PQresultStatus(r)==PGRES_COMMAND_OK, "%s",
                PQresultErrorMessage(r));
  PQclear(r);
  sqlite3_free(zSql);
  {
    const char *zUser = strstr(zUri, "user=postgres");
    ck_assert_ptr_nonnull(zUser);
    zRole = sqlite3_mprintf("%.*suser=depot_nometa_%d%s",
        (int)(zUser - zUri), zUri, (int)getpid(), zUser + 13);
  }
  db = th_open(":memory:");
  rc = th_tryf(db, &zErr, "SELECT count(*) FROM depot_commits(%Q)", zRole);
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "format check")
                && strstr(zErr, "permission denied")
                && strstr(zErr, "format -1")==0, "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_close(db);
  zSql = sqlite3_mprintf("REVOKE ALL ON \"%w\".depot_kv FROM"
      " depot_nometa_%d; REVOKE ALL ON SCHEMA \"%w\" FROM depot_nometa_%d;"
      " DROP ROLE depot_nometa_%d", zSchema, (int)getpid(), zSchema,
      (int)getpid(), (int)getpid());
  PQclear(PQexec(c, zSql));
  sqlite3_free(zSql);
  PQfinish(c);
  sqlite3_free(zRole); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* A server that is down: a clear error naming the URI without its
** password, within the connect timeout. */
START_TEST(t_down){
  char *zDir = th_tmpdir("pg_down");
  char *zUri = sqlite3_mprintf("postgresql://u:sekrit42@/postgres?host=%s"
                               "&connect_timeout=2", zDir);
  char *zE = pgEsc(zUri);
  char *zName = sqlite3_mprintf("file:%s/app?vfs=depot&store=%s", zDir, zE);
  sqlite3 *db = 0, *mem = th_open(":memory:");
  char *zErr = 0;
  int64_t t0 = pgNowMs();
  int rc = sqlite3_open_v2(zName, &db, SQLITE_OPEN_READWRITE|
                           SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "CREATE TABLE t(x)", 0, 0, 0);
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_int_lt((int)(pgNowMs()-t0), 5000);
  sqlite3_close(db);
  zErr = th_text(mem, "SELECT depot_last_error()");
  ck_assert_ptr_nonnull(zErr);
  ck_assert_ptr_nonnull(strstr(zErr, "cannot connect to postgresql://u@/"));
  ck_assert_ptr_null(strstr(zErr, "sekrit42"));
  sqlite3_free(zErr);
  {
    char *zSql = sqlite3_mprintf("SELECT depot_fork(%Q,'main','main','x')",
                                 zUri);
    rc = th_try(mem, zSql, &zErr);
    sqlite3_free(zSql);
  }
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_ptr_null(strstr(zErr, "sekrit42"));
  ck_assert_ptr_nonnull(strstr(zErr, "postgresql://u@/"));
  sqlite3_free(zErr);
  sqlite3_close(mem);
  sqlite3_free(zName); sqlite3_free(zE); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("pg");
  TCase *tc = tcase_create("store");
  tcase_add_test(tc, t_store_contract);
  tcase_add_test(tc, t_down);
  tcase_add_test(tc, t_format_unreadable_says_why);
  suite_add_tcase(s, tc);
  tc = tcase_create("depot");
  tcase_add_test(tc, t_oracle);
  tcase_add_test(tc, t_fork_restore);
  tcase_add_test(tc, t_compact_gc_quota);
  tcase_add_test(tc, t_round_trips);
  tcase_add_test(tc, t_cold_scan_round_trips);
  tcase_add_test(tc, t_operations_reuse_the_connection);
  tcase_add_test(tc, t_two_processes);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_add_test(tc, t_commit_lost_every_try_fails);
  tcase_add_test(tc, t_commit_lost_then_retried_is_stored);
  tcase_add_test(tc, t_terminate);
  tcase_add_test(tc, t_restart);
  suite_add_tcase(s, tc);
  return s;
}
