/*
** check_verify.c -- the "verify" suite: net-byte quotas of depot databases
** (exactness against a scan of the store, SQLITE_FULL past the cap with
** nothing written, a commit that just fits, raising and removing the cap,
** forks and bucket forks counting where their bytes are stored) and
** depot_verify (healthy stores with forks, restore points, restore and
** rollback give no rows; each kind of damage, made through the store
** interface or with plain SQLite on the store file, gives its finding;
** random garbage rows never crash it), and bad input to every new
** function.
**
** With $DEPOT_TEST_STORE_URI (tests/check/pg_suite.sh) the tests that
** reach the store through its path and the store interface run on that
** PostgreSQL server, in a schema named after each test's directory.
**
** DEPOT_VERIFY_FUZZ_ROUNDS=N runs N garbage rounds (default 6).
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/layout.h"
#include "vfs/ltx.h"
#include "vfs/store/store.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Fx Fx;
struct Fx {
  char *zDir;
  char *zStore;
  sqlite3 *db;              /* :memory: connection with the extension */
};

/* The store of directory zDir: <zDir>/store.depot, or with
** $DEPOT_TEST_STORE_URI that PostgreSQL server in a schema named after
** zDir. */
static char *fx_store_path(const char *zDir){
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  const char *zBase = strrchr(zDir, '/');
  if( zPg && zPg[0] ){
    return sqlite3_mprintf("%s&schema=%s", zPg, zBase ? zBase+1 : zDir);
  }
  return sqlite3_mprintf("%s/store.depot", zDir);
}

static void fx_open(Fx *f, const char *zTag){
  f->zDir = th_tmpdir(zTag);
  f->zStore = fx_store_path(f->zDir);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
  f->db = th_open(":memory:");
  sqlite3_extended_result_codes(f->db, 1);
}

static void fx_close(Fx *f){
  sqlite3_close(f->db);
  depot_fork_idle_close();
  sqlite3_free(f->zStore);
  sqlite3_free(f->zDir);
}

/* A connection to (db, branch[, bucket]) of the fixture's store. */
static sqlite3 *fx_db(Fx *f, const char *zDb, const char *zBranch,
                      const char *zBucket){
  char *z;
  sqlite3 *db;
  if( store_is_pg_uri(f->zStore) ){
    sqlite3_str *s = sqlite3_str_new(0);
    const char *c;
    sqlite3_str_appendf(s, "file:%s/app?vfs=depot&db=%s&branch=%s%s%s&store=",
        f->zDir, zDb, zBranch, zBucket ? "&bucket=" : "",
        zBucket ? zBucket : "");
    for(c=f->zStore; *c; c++){
      if( *c=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *c);
    }
    z = sqlite3_str_finish(s);
  }else{
    z = sqlite3_mprintf("file:%s?vfs=depot&db=%s&branch=%s%s%s",
        f->zStore, zDb, zBranch, zBucket ? "&bucket=" : "",
        zBucket ? zBucket : "");
  }
  db = th_open(z);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_free(z);
  return db;
}

static char *fx_fmt(const char *zFmt, va_list ap){
  char *z = sqlite3_vmprintf(zFmt, ap);
  ck_assert_ptr_nonnull(z);
  return z;
}

static void fx_exec(Fx *f, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = fx_fmt(zFmt, ap);
  va_end(ap);
  th_exec(f->db, z);
  sqlite3_free(z);
}

static sqlite3_int64 fx_int(Fx *f, const char *zFmt, ...){
  va_list ap;
  sqlite3_int64 n;
  char *z;
  va_start(ap, zFmt);
  z = fx_fmt(zFmt, ap);
  va_end(ap);
  n = th_int(f->db, z);
  sqlite3_free(z);
  return n;
}

static char *fx_text(Fx *f, const char *zFmt, ...){
  va_list ap;
  char *z, *zGot;
  va_start(ap, zFmt);
  z = fx_fmt(zFmt, ap);
  va_end(ap);
  zGot = th_text(f->db, z);
  sqlite3_free(z);
  return zGot;
}

/* Run zFmt on the admin connection expecting an error containing zSub. */
static void fx_fails(Fx *f, const char *zSub, const char *zFmt, ...){
  va_list ap;
  char *z, *zErr = 0;
  int rc;
  va_start(ap, zFmt);
  z = fx_fmt(zFmt, ap);
  va_end(ap);
  rc = th_try(f->db, z, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "%s: succeeded", z);
  ck_assert_msg(zErr && strstr(zErr, zSub), "%s: error '%s' lacks '%s'", z,
                zErr ? zErr : "", zSub);
  sqlite3_free(zErr);
  sqlite3_free(z);
}

static void assert_integrity(sqlite3 *db){
  char *z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
}

/* Deterministic rows a..b of table t, each about 1500 bytes. */
static void put_rows(sqlite3 *db, int a, int b){
  char *z = sqlite3_mprintf("WITH RECURSIVE c(i) AS (SELECT %d UNION ALL"
      " SELECT i+1 FROM c WHERE i<%d) INSERT INTO t SELECT i,"
      " printf('%%.1500c', char(65+i%%26)) || i FROM c", a, b);
  th_exec(db, z);
  sqlite3_free(z);
}

/* ---- the store seen with plain SQLite ---- */

static sqlite3 *raw_open(Fx *f){
  sqlite3 *db = 0;
  ck_assert_int_eq(sqlite3_open_v2(f->zStore, &db, SQLITE_OPEN_READWRITE, 0),
                   SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  return db;
}

/* The store through the store interface (either backend). */
static Store *st_open(Fx *f){
  StoreSqliteConfig cfg;
  Store *p = 0;
  char *zErr = 0;
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSynchronous = 2;
  ck_assert_msg(store_open(f->zStore, &cfg, &p, &zErr)==SQLITE_OK,
                "store_open: %s", zErr ? zErr : "");
  return p;
}

static int st_crc_row(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  uint64_t *pCrc = (uint64_t*)pArg;
  *pCrc = ltx_crc64(*pCrc, pKey, nKey);
  *pCrc = ltx_crc64(*pCrc, pVal, nVal);
  return 0;
}

/* A CRC over every row of the store (keys and values in key order). */
static uint64_t raw_digest(Fx *f){
  Store *p = st_open(f);
  uint64_t crc = 0;
  ck_assert_int_eq(store_scan(p, "", 0, 0, 0, 0, -1, st_crc_row, &crc),
                   SQLITE_OK);
  store_close(p);
  return crc;
}

/* The branch records of one database, and the bytes of rows. */
typedef struct StBranches StBranches;
struct StBranches {
  uint64_t iBucket;
  const char *zDb;
  int n;
  uint64_t aId[64];
};
static int st_branch_row(void *pArg, const unsigned char *pKey, int nKey,
                         const unsigned char *pVal, int nVal){
  StBranches *b = (StBranches*)pArg;
  BranchRecord rec;
  if( nKey!=10 ) return 0;
  ck_assert_int_eq(layout_branch_decode(pVal, nVal, &rec), SQLITE_OK);
  if( rec.iBucket==b->iBucket && strcmp(rec.zDb, b->zDb)==0 && b->n<64 ){
    b->aId[b->n++] = bytes_get64(pKey+2);
  }
  return 0;
}
static int st_bytes_row(void *pArg, const unsigned char *pKey, int nKey,
                        const unsigned char *pVal, int nVal){
  (void)pKey; (void)nKey; (void)pVal;
  *(sqlite3_int64*)pArg += nVal;
  return 0;
}

/* Bytes of the DELTA rows of every branch whose record carries
** (iBucket, zDb) -- the stored bytes of that database, by scanning. */
static sqlite3_int64 raw_db_bytes(Fx *f, uint64_t iBucket, const char *zDb){
  Store *p = st_open(f);
  StBranches b;
  sqlite3_int64 n = 0;
  int i;
  memset(&b, 0, sizeof(b));
  b.iBucket = iBucket;
  b.zDb = zDb;
  ck_assert_int_eq(store_scan(p, "\x02\x20", 2, "\x02\x21", 2, 0, -1,
                              st_branch_row, &b), SQLITE_OK);
  for(i=0; i<b.n; i++){
    unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
    int nLo = layout_key_br(lo, b.aId[i], LAYOUT_BR_DELTA);
    int nHi = layout_key_br(hi, b.aId[i], LAYOUT_BR_DELTA+1);
    ck_assert_int_eq(store_scan(p, lo, nLo, hi, nHi, 0, -1, st_bytes_row, &n),
                     SQLITE_OK);
  }
  store_close(p);
  return n;
}

/* Put (or with nVal<0 delete) one row of the store (which must exist to
** be deleted). */
static void raw_put(Fx *f, const unsigned char *k, int nKey, const void *v,
                    int nVal){
  Store *p = st_open(f);
  if( nVal<0 ){
    void *pOld = 0;
    int nOld = 0;
    ck_assert_int_eq(store_get(p, k, nKey, &pOld, &nOld), SQLITE_OK);
    ck_assert_ptr_nonnull(pOld);
    sqlite3_free(pOld);
    ck_assert_int_eq(store_clear(p, k, nKey), SQLITE_OK);
  }else{
    ck_assert_int_eq(store_put(p, k, nKey, v ? v : "", nVal), SQLITE_OK);
  }
  store_close(p);
}

/* The value of one row (sqlite3_malloc'd, *pn its length); must exist. */
static unsigned char *raw_get(Fx *f, const unsigned char *k, int nKey,
                              int *pn){
  Store *p = st_open(f);
  void *a = 0;
  ck_assert_int_eq(store_get(p, k, nKey, &a, pn), SQLITE_OK);
  ck_assert_ptr_nonnull(a);
  store_close(p);
  return (unsigned char*)a;
}

static uint64_t branch_id(Fx *f, const char *zDb, const char *zBranch){
  return (uint64_t)fx_int(f, "SELECT branch_id FROM depot_branches(%Q, %Q)"
      " WHERE branch=%Q AND state='live'", f->zStore, zDb, zBranch);
}

/* Number of findings of depot_verify, optionally of one kind and txid. */
static sqlite3_int64 findings(Fx *f, const char *zKind, sqlite3_int64 iTxid){
  return fx_int(f, "SELECT count(*) FROM depot_verify(%Q) WHERE (%Q IS NULL"
      " OR kind=%Q) AND (%lld<0 OR txid=%lld)", f->zStore, zKind, zKind,
      iTxid, iTxid);
}

/* All findings as text, for failure messages (sqlite3_malloc'd). */
static char *findings_text(Fx *f){
  char *z = fx_text(f, "SELECT group_concat(kind||' '||coalesce(txid,'-')||"
      "' '||message, char(10)) FROM depot_verify(%Q)", f->zStore);
  return z ? z : sqlite3_mprintf("(none)");
}

static void assert_clean(Fx *f){
  sqlite3_int64 n = findings(f, 0, -1);
  if( n ){
    char *z = findings_text(f);
    ck_abort_msg("depot_verify found %lld problems:\n%s", n, z);
  }
}

static void assert_finding(Fx *f, const char *zKind, sqlite3_int64 iTxid){
  if( findings(f, zKind, iTxid)==0 ){
    char *z = findings_text(f);
    ck_abort_msg("no '%s' finding for txid %lld; findings:\n%s", zKind,
                 iTxid, z);
  }
}

/* app/main: 4 commits (one blob of several chunks), a fork dev at txid 2
** with 2 commits of its own, restore point rp1 at main's head, a second
** database other.  Returns the id of app/main. */
static uint64_t build_store(Fx *f){
  sqlite3 *db = fx_db(f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)");
  put_rows(db, 1, 10);
  th_exec(db, "CREATE TABLE big(x BLOB)");
  th_exec(db, "INSERT INTO big VALUES(randomblob(200000))");
  put_rows(db, 11, 20);
  fx_exec(f, "SELECT depot_fork(%Q,'app','main','dev',2)", f->zStore);
  fx_exec(f, "SELECT depot_restore_point(%Q,'app','main','rp1')", f->zStore);
  sqlite3_close(db);
  db = fx_db(f, "app", "dev", 0);
  put_rows(db, 100, 110);
  th_exec(db, "UPDATE t SET b='changed' WHERE a=3");
  sqlite3_close(db);
  db = fx_db(f, "other", "main", 0);
  th_exec(db, "CREATE TABLE u(x); INSERT INTO u VALUES(1)");
  sqlite3_close(db);
  return branch_id(f, "app", "main");
}

/* ---- quotas ---- */

START_TEST(test_quota_use_equals_stored_bytes_of_the_database){
  Fx f;
  sqlite3 *db;
  fx_open(&f, "quota_exact");
  build_store(&f);
  fx_exec(&f, "SELECT depot_fork_bucket(%Q,'main','stage')", f.zStore);
  db = fx_db(&f, "app", "main", "stage");
  put_rows(db, 200, 205);
  sqlite3_close(db);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)"
      " WHERE db='app'", f.zStore), raw_db_bytes(&f, 0, "app"));
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)"
      " WHERE db='other'", f.zStore), raw_db_bytes(&f, 0, "other"));
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)"
      " WHERE db='stage/app'", f.zStore), raw_db_bytes(&f, 1, "app"));
  ck_assert_int_gt(raw_db_bytes(&f, 1, "app"), 0);
  ck_assert_int_eq(fx_int(&f, "SELECT quota_used_bytes FROM depot_stats(%Q)",
      f.zStore), fx_int(&f, "SELECT stored_bytes FROM depot_stats(%Q)",
      f.zStore));
  ck_assert_int_eq(fx_int(&f, "SELECT quota_databases FROM depot_stats(%Q)",
      f.zStore), 0);
  assert_clean(&f);
  fx_close(&f);
}
END_TEST

/* depot_quotas (and depot_stats' quota columns) list each database once
** however many branch records it has: 70 forks of "app" between the
** records of three other databases give four rows, each database's use
** its stored bytes, the sum the store's. */
START_TEST(test_quota_list_has_one_row_per_database_of_many_branches){
  Fx f;
  sqlite3 *db;
  int i;
  fx_open(&f, "quota_many");
  build_store(&f);
  for(i=0; i<70; i++){
    fx_exec(&f, "SELECT depot_fork(%Q,'app','main','f%d')", f.zStore, i);
    if( i==20 || i==45 ){
      char zDb[8];
      snprintf(zDb, sizeof(zDb), "d%d", i);
      db = fx_db(&f, zDb, "main", 0);
      th_exec(db, "CREATE TABLE u(x); INSERT INTO u VALUES(1)");
      sqlite3_close(db);
    }
  }
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_quotas(%Q)",
                          f.zStore), 4);
  ck_assert_int_eq(fx_int(&f, "SELECT count(DISTINCT db) FROM"
                          " depot_quotas(%Q)", f.zStore), 4);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)"
      " WHERE db='app'", f.zStore), raw_db_bytes(&f, 0, "app"));
  ck_assert_int_eq(fx_int(&f, "SELECT quota_used_bytes FROM depot_stats(%Q)",
      f.zStore), fx_int(&f, "SELECT stored_bytes FROM depot_stats(%Q)",
      f.zStore));
  fx_close(&f);
}
END_TEST

START_TEST(test_quota_fork_counts_only_its_own_bytes){
  Fx f;
  sqlite3 *db;
  sqlite3_int64 nBefore, nDev;
  fx_open(&f, "quota_fork");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)");
  put_rows(db, 1, 30);
  sqlite3_close(db);
  nBefore = fx_int(&f, "SELECT depot_quota(%Q,'app') IS NULL", f.zStore);
  ck_assert_int_eq(nBefore, 1);
  nBefore = fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)", f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','dev')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)",
                   f.zStore), nBefore);
  db = fx_db(&f, "app", "dev", 0);
  put_rows(db, 31, 35);
  sqlite3_close(db);
  nDev = fx_int(&f, "SELECT sum(bytes_stored) FROM depot_commits(%Q,'app',"
                "'dev')", f.zStore);
  ck_assert_int_gt(nDev, 0);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)",
                   f.zStore), nBefore+nDev);
  ck_assert_int_eq(raw_db_bytes(&f, 0, "app"), nBefore+nDev);
  fx_close(&f);
}
END_TEST

/* A store written before quotas has no QUOTA 'u' row: the use is the sum
** of the branch counters, and the next commit writes the row exactly. */
START_TEST(test_quota_use_row_absent_is_computed_from_branch_counters){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY];
  sqlite3 *db;
  sqlite3_int64 nUsed;
  fx_open(&f, "quota_absent");
  build_store(&f);
  nUsed = raw_db_bytes(&f, 0, "app");
  raw_put(&f, k, layout_key_quota(k, 0, "app", LAYOUT_QUOTA_USED), 0, -1);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)"
                   " WHERE db='app'", f.zStore), nUsed);
  fx_exec(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore, nUsed);
  db = fx_db(&f, "app", "dev", 0);
  ck_assert_int_eq(th_try(db, "INSERT INTO t VALUES(500,'x')", 0) & 0xff,
                   SQLITE_FULL);
  fx_exec(&f, "SELECT depot_quota(%Q,'app',NULL)", f.zStore);
  th_exec(db, "INSERT INTO t VALUES(500,'x')");
  sqlite3_close(db);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)"
                   " WHERE db='app'", f.zStore), raw_db_bytes(&f, 0, "app"));
  ck_assert_int_gt(raw_db_bytes(&f, 0, "app"), nUsed);
  assert_clean(&f);
  fx_close(&f);
}
END_TEST

/* Log messages of SQLITE_FULL, captured through SQLITE_CONFIG_LOG. */
static char zFullLog[1024];
static void full_log(void *pArg, int rc, const char *zMsg){
  (void)pArg;
  if( (rc&0xff)==SQLITE_FULL ) snprintf(zFullLog, sizeof(zFullLog), "%s", zMsg);
}

/* The bytes a refused commit needed, from its logged message; -1 if none. */
static sqlite3_int64 logged_need(void){
  const char *z = strstr(zFullLog, "commit needs ");
  return z ? strtoll(z+13, 0, 10) : -1;
}

static void log_install(void){
  sqlite3_shutdown();
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_LOG, full_log, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
}

START_TEST(test_quota_commit_past_cap_fails_full_and_writes_nothing){
  Fx f;
  sqlite3 *db;
  sqlite3_int64 nUsed, nCommits, nCount;
  uint64_t iDigest;
  char *zErr = 0;
  int rc;
  log_install();
  fx_open(&f, "quota_full");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)");
  put_rows(db, 1, 10);
  nUsed = fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore,
                   nUsed+100), nUsed+100);
  nCommits = fx_int(&f, "SELECT count(*) FROM depot_commits(%Q,'app')",
                    f.zStore);
  iDigest = raw_digest(&f);
  /* An explicit transaction: COMMIT fails and the transaction is gone. */
  th_exec(db, "BEGIN");
  put_rows(db, 11, 40);
  rc = th_try(db, "COMMIT", &zErr);
  ck_assert_int_eq(rc & 0xff, SQLITE_FULL);
  sqlite3_free(zErr);
  ck_assert_int_eq(sqlite3_get_autocommit(db), 1);
  ck_assert_ptr_nonnull(strstr(zFullLog, "depot: quota of database 'app'"
                               " exceeded: commit needs "));
  ck_assert_ptr_nonnull(strstr(zFullLog, " of "));
  /* An autocommit statement fails the same way. */
  zErr = 0;
  rc = th_try(db, "INSERT INTO t VALUES(1000, printf('%.3000c','z'))", &zErr);
  ck_assert_int_eq(rc & 0xff, SQLITE_FULL);
  sqlite3_free(zErr);
  /* Nothing was written anywhere. */
  ck_assert_uint_eq(raw_digest(&f), iDigest);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_commits(%Q,'app')",
                   f.zStore), nCommits);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)",
                   f.zStore), nUsed);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 10);
  assert_integrity(db);
  ck_assert_int_eq(fx_int(&f, "SELECT quota_full_databases FROM"
                   " depot_stats(%Q)", f.zStore), 0);
  /* Raising the cap lets the same transaction commit on this connection. */
  fx_exec(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore, nUsed*10);
  th_exec(db, "BEGIN");
  put_rows(db, 11, 40);
  th_exec(db, "COMMIT");
  nCount = th_int(db, "SELECT count(*) FROM t");
  ck_assert_int_eq(nCount, 40);
  assert_integrity(db);
  /* Removing it lifts the limit; a cap of 0 stops every growing commit. */
  ck_assert_int_eq(fx_int(&f, "SELECT depot_quota(%Q,'app',NULL) IS NULL",
                   f.zStore), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_quota(%Q,'app') IS NULL",
                   f.zStore), 1);
  put_rows(db, 41, 45);
  fx_exec(&f, "SELECT depot_quota(%Q,'app',0)", f.zStore);
  ck_assert_int_eq(th_try(db, "INSERT INTO t VALUES(2000,'x')", 0) & 0xff,
                   SQLITE_FULL);
  ck_assert_int_eq(fx_int(&f, "SELECT quota_full_databases FROM"
                   " depot_stats(%Q)", f.zStore), 1);
  sqlite3_close(db);
  assert_clean(&f);
  fx_close(&f);
}
END_TEST

/* A refused commit says how many bytes it needs (N); with one byte less
** than N free it is refused again, with exactly N free it commits and
** stores N bytes, leaving the database exactly at its cap. */
START_TEST(test_quota_commit_that_just_fits_succeeds){
  Fx f;
  sqlite3 *db;
  sqlite3_int64 nUsed, nNeed;
  log_install();
  fx_open(&f, "quota_fit");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)");
  put_rows(db, 1, 10);
  nUsed = fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)", f.zStore);
  fx_exec(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore, nUsed);
  zFullLog[0] = 0;
  ck_assert_int_eq(th_try(db, "UPDATE t SET b=b||'x' WHERE a<=5", 0) & 0xff,
                   SQLITE_FULL);
  nNeed = logged_need();
  ck_assert_int_gt(nNeed, 0);
  fx_exec(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore, nUsed+nNeed-1);
  zFullLog[0] = 0;
  ck_assert_int_eq(th_try(db, "UPDATE t SET b=b||'x' WHERE a<=5", 0) & 0xff,
                   SQLITE_FULL);
  ck_assert_int_eq(logged_need(), nNeed);
  fx_exec(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore, nUsed+nNeed);
  th_exec(db, "UPDATE t SET b=b||'x' WHERE a<=5");
  ck_assert_int_eq(fx_int(&f, "SELECT bytes_stored FROM depot_commits(%Q,"
                   "'app') ORDER BY txid DESC LIMIT 1", f.zStore), nNeed);
  ck_assert_int_eq(fx_int(&f, "SELECT used_bytes FROM depot_quotas(%Q)",
                   f.zStore), nUsed+nNeed);
  ck_assert_int_eq(fx_int(&f, "SELECT free_bytes FROM depot_quotas(%Q)",
                   f.zStore), 0);
  ck_assert_int_eq(fx_int(&f, "SELECT quota_full_databases FROM"
                   " depot_stats(%Q)", f.zStore), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE b LIKE '%x'"), 5);
  sqlite3_close(db);
  assert_clean(&f);
  fx_close(&f);
}
END_TEST

START_TEST(test_quota_bad_input_is_refused_and_changes_nothing){
  Fx f;
  fx_open(&f, "quota_bad");
  build_store(&f);
  fx_exec(&f, "SELECT depot_quota(%Q,'app',50000000)", f.zStore);
  fx_fails(&f, "store must be non-empty text", "SELECT depot_quota(NULL,"
           "'app')");
  fx_fails(&f, "db must be non-empty text", "SELECT depot_quota(%Q,'')",
           f.zStore);
  fx_fails(&f, "db must be non-empty text", "SELECT depot_quota(%Q,7,1)",
           f.zStore);
  fx_fails(&f, "bytes must be NULL", "SELECT depot_quota(%Q,'app',-1)",
           f.zStore);
  fx_fails(&f, "bytes must be NULL", "SELECT depot_quota(%Q,'app',1.5)",
           f.zStore);
  fx_fails(&f, "bytes must be NULL", "SELECT depot_quota(%Q,'app','10')",
           f.zStore);
  fx_fails(&f, "bytes must be NULL", "SELECT depot_quota(%Q,'app',x'00')",
           f.zStore);
  fx_fails(&f, "NAME or BUCKET/NAME", "SELECT depot_quota(%Q,'/app',1)",
           f.zStore);
  fx_fails(&f, "NAME or BUCKET/NAME", "SELECT depot_quota(%Q,printf("
           "'%%.300c','a'),1)", f.zStore);
  fx_fails(&f, "bucket nob does not exist", "SELECT depot_quota(%Q,"
           "'nob/app',1)", f.zStore);
  fx_fails(&f, "unable to open", "SELECT depot_quota('%q/none.depot',"
           "'app',1)", f.zDir);
  fx_fails(&f, "wrong number of arguments", "SELECT depot_quota(%Q)",
           f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_quota(%Q,'app')", f.zStore),
                   50000000);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_quotas(%Q)"
                   " WHERE cap_bytes IS NOT NULL", f.zStore), 1);
  fx_fails(&f, "must be non-empty text", "SELECT * FROM depot_quotas(NULL)");
  fx_close(&f);
}
END_TEST

/* ---- depot_verify on healthy stores ---- */

START_TEST(test_verify_healthy_store_gives_no_rows){
  Fx f;
  sqlite3 *db;
  char *zUndo;
  fx_open(&f, "verify_healthy");
  build_store(&f);
  assert_clean(&f);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q,'app')",
                   f.zStore), 0);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q,'app',"
                   "'dev')", f.zStore), 0);
  /* Restore, undo, rollback, a fork of a fork, a bucket fork, a drop. */
  zUndo = fx_text(&f, "SELECT depot_restore(%Q,'app','main',1)", f.zStore);
  ck_assert_ptr_nonnull(zUndo);
  assert_clean(&f);
  db = fx_db(&f, "app", "main", 0);
  put_rows(db, 50, 52);
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_restore(%Q,'app','main',%Q)", f.zStore, zUndo);
  sqlite3_free(zUndo);
  fx_exec(&f, "SELECT depot_rollback(%Q,'app','main',2)", f.zStore);
  fx_exec(&f, "SELECT depot_rollback(%Q,'app','main')", f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','dev','dev2')", f.zStore);
  fx_exec(&f, "SELECT depot_fork_bucket(%Q,'main','stage')", f.zStore);
  db = fx_db(&f, "app", "dev2", "stage");
  put_rows(db, 300, 301);
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_drop_restore_point(%Q,'app','rp1')", f.zStore);
  fx_exec(&f, "SELECT depot_drop_branch(%Q,'app','dev2')", f.zStore);
  assert_clean(&f);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q,"
                   "'stage/app')", f.zStore), 0);
  db = fx_db(&f, "app", "main", 0);
  assert_integrity(db);
  sqlite3_close(db);
  fx_close(&f);
}
END_TEST

/* ---- depot_verify on damaged stores ---- */

START_TEST(test_verify_finds_a_flipped_byte_in_a_blob_chunk){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY], *a;
  int n, nKey;
  uint64_t iMain;
  fx_open(&f, "verify_flip");
  iMain = build_store(&f);
  nKey = layout_key_delta(k, iMain, 4, 1);     /* the big blob, chunk 1 */
  a = raw_get(&f, k, nKey, &n);
  a[n/2] ^= 0x10;
  raw_put(&f, k, nKey, a, n);
  sqlite3_free(a);
  assert_finding(&f, "blob", 4);
  ck_assert_int_eq(findings(&f, "blob", -1), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q,'app',"
      "'main') WHERE kind='blob' AND db='app' AND branch='main' AND"
      " txid=4 AND key IS NOT NULL", f.zStore), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q,"
                   "'other')", f.zStore), 0);
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_finds_a_missing_chunk){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY];
  uint64_t iMain;
  fx_open(&f, "verify_chunk");
  iMain = build_store(&f);
  raw_put(&f, k, layout_key_delta(k, iMain, 4, 1), 0, -1);
  assert_finding(&f, "chunk", 4);
  assert_finding(&f, "counter", -1);
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_finds_a_page_index_row_without_its_blob){
  Fx f;
  uint64_t iMain;
  uint32_t i;
  fx_open(&f, "verify_pidx");
  iMain = build_store(&f);
  for(i=0; i<64; i++){
    unsigned char lo[LAYOUT_MAX_KEY];
    int nKey = layout_key_delta(lo, iMain, 2, i);
    sqlite3 *db = raw_open(&f);
    sqlite3_stmt *st = 0;
    ck_assert_int_eq(sqlite3_prepare_v2(db, "DELETE FROM depot_kv WHERE"
                     " key=?1", -1, &st, 0), SQLITE_OK);
    sqlite3_bind_blob(st, 1, lo, nKey, SQLITE_TRANSIENT);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
  }
  assert_finding(&f, "page_index", 2);
  assert_finding(&f, "chunk", 2);
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_finds_a_wrong_head_checksum){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW], *a;
  DbHead h;
  int n, nKey;
  uint64_t iMain;
  fx_open(&f, "verify_head");
  iMain = build_store(&f);
  nKey = layout_key_br(k, iMain, LAYOUT_BR_HEAD);
  a = raw_get(&f, k, nKey, &n);
  ck_assert_int_eq(layout_head_decode(a, n, &h), SQLITE_OK);
  sqlite3_free(a);
  h.iChecksum ^= 1;
  raw_put(&f, k, nKey, v, layout_head_encode(v, &h));
  assert_finding(&f, "head", (sqlite3_int64)h.iTxid);
  ck_assert_int_eq(findings(&f, 0, -1), 1);
  fx_close(&f);
}
END_TEST

/* The recomputation itself: a commit row and head that agree with each
** other but not with the pages (the commit's trailer is left alone, so the
** commit check also reports the mismatch). */
START_TEST(test_verify_recomputes_the_head_checksum_from_the_pages){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW], *a;
  DbHead h;
  CommitRow row;
  int n, nKey;
  uint64_t iMain;
  fx_open(&f, "verify_recompute");
  iMain = build_store(&f);
  nKey = layout_key_br(k, iMain, LAYOUT_BR_HEAD);
  a = raw_get(&f, k, nKey, &n);
  ck_assert_int_eq(layout_head_decode(a, n, &h), SQLITE_OK);
  sqlite3_free(a);
  h.iChecksum ^= 0x100;
  raw_put(&f, k, nKey, v, layout_head_encode(v, &h));
  nKey = layout_key_commit(k, iMain, h.iTxid);
  a = raw_get(&f, k, nKey, &n);
  ck_assert_int_eq(layout_commit_decode(a, n, &row), SQLITE_OK);
  sqlite3_free(a);
  row.iChecksum = h.iChecksum;
  raw_put(&f, k, nKey, v, layout_commit_encode(v, &row));
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q) WHERE"
      " kind='head' AND message LIKE '%%pages give%%'", f.zStore), 1);
  assert_finding(&f, "commit", (sqlite3_int64)h.iTxid);
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_finds_an_orphan_pin_and_a_broken_refcount){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY], o[8], v[8];
  uint64_t iMain;
  fx_open(&f, "verify_pin");
  iMain = build_store(&f);
  bytes_put64(o, 77);
  raw_put(&f, k, layout_key_pin(k, iMain, 999, LAYOUT_PIN_HISTORY, o, 8),
          "", 0);
  assert_finding(&f, "pin", 999);
  assert_finding(&f, "refcount", -1);
  fx_close(&f);
  fx_open(&f, "verify_refcount");
  iMain = build_store(&f);
  memset(v, 0, 8);
  v[0] = 7;
  raw_put(&f, k, layout_key_branch_sub(k, iMain, LAYOUT_BRANCH_REFCOUNT), v, 8);
  assert_finding(&f, "refcount", -1);
  ck_assert_int_eq(findings(&f, 0, -1), 1);
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_finds_fork_pin_rp_vtx_and_counter_damage){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW], *a;
  RestorePoint rp;
  int n, nKey;
  uint64_t iMain, iDev;
  fx_open(&f, "verify_rp");
  iMain = build_store(&f);
  iDev = branch_id(&f, "app", "dev");
  /* The fork pin of dev on main goes: the fork and the summary notice. */
  bytes_put64(v, iDev);
  raw_put(&f, k, layout_key_pin(k, iMain, 2, LAYOUT_PIN_FORK, v, 8), 0, -1);
  assert_finding(&f, "fork", 2);
  assert_finding(&f, "refcount", -1);
  assert_finding(&f, "pin", -1);
  fx_close(&f);
  fx_open(&f, "verify_rp2");
  iMain = build_store(&f);
  nKey = layout_key_rp(k, 0, "app", "rp1");
  a = raw_get(&f, k, nKey, &n);
  ck_assert_int_eq(layout_rp_decode(a, n, &rp), SQLITE_OK);
  sqlite3_free(a);
  rp.iTxid = 55;
  raw_put(&f, k, nKey, v, layout_rp_encode(v, &rp));
  assert_finding(&f, "restore_point", 55);
  assert_finding(&f, "pin", -1);
  fx_close(&f);
  fx_open(&f, "verify_vtx");
  iMain = build_store(&f);
  {
    sqlite3 *db = raw_open(&f);
    char *zSql = sqlite3_mprintf("DELETE FROM depot_keys WHERE key IN"
        " (SELECT key FROM depot_keys WHERE key>x'0230%016llx11' AND"
        " key<x'0230%016llx12' LIMIT 1)", (unsigned long long)iMain,
        (unsigned long long)iMain);
    th_exec(db, zSql);
    ck_assert_int_eq(sqlite3_changes(db), 1);
    sqlite3_free(zSql);
    sqlite3_close(db);
  }
  assert_finding(&f, "vtx", 1);
  ck_assert_int_eq(findings(&f, 0, -1), 1);
  fx_close(&f);
  fx_open(&f, "verify_counter");
  iMain = build_store(&f);
  memset(v, 0, 8);
  raw_put(&f, k, layout_key_br(k, iMain, LAYOUT_BR_QUOTA), v, 8);
  assert_finding(&f, "counter", -1);
  fx_close(&f);
}
END_TEST

/* Random rows in every partition verify reads, and garbage in existing
** rows: verify returns (findings or not), never crashes, and stays within
** its finding limit. */
/* 60 random rows in the partitions verify reads (many under existing
** branch ids), and random bytes over about one in seven existing rows. */
static void put_garbage(Fx *f, uint64_t iMain){
  static const unsigned aPart[] = { 0x20, 0x30, 0x50, 0x70, 0x42, 0x40 };
  sqlite3 *db = raw_open(f);
  sqlite3_stmt *st = 0;
  int i, j;
  ck_assert_int_eq(sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO depot_kv"
                   " VALUES(?1, ?2)", -1, &st, 0), SQLITE_OK);
  for(i=0; i<60; i++){
    unsigned char k[64], v[700];
    int nKey = 2 + rand()%40, nVal = rand()%700;
    k[0] = 0x02;
    k[1] = (unsigned char)aPart[rand()%6];
    if( nKey>=10 ) bytes_put64(k+2, rand()%3 ? iMain+rand()%3 : (uint64_t)rand());
    else for(j=2; j<nKey; j++) k[j] = (unsigned char)rand();
    for(j=10; j<nKey; j++) k[j] = (unsigned char)(rand()%4 ? rand()%4 : rand());
    if( nKey>10 && rand()%2 ) k[10] = "\x01\x02\x10\x11\x20\x30"[rand()%6];
    for(j=0; j<nVal; j++) v[j] = (unsigned char)rand();
    if( nVal>0 && rand()%2 ) v[0] = 1;
    sqlite3_bind_blob(st, 1, k, nKey, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 2, v, nVal, SQLITE_TRANSIENT);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  th_exec(db, "UPDATE depot_kv SET value=randomblob(length(value))"
              " WHERE abs(random())%7=0 AND key>=x'0220' AND key<x'0280'");
  sqlite3_close(db);
}

/* Random rows in every partition verify reads, and garbage in existing
** rows: verify returns (findings or not), never crashes, and stays within
** its finding limit. */
/* LOG rows (the store-wide order bucket forks at a time resolve against)
** are checked too: one that does not decode, and one past the store's
** sequence counter, are findings of kind "log". */
START_TEST(test_verify_finds_damaged_log_rows){
  Fx f;
  unsigned char k[LAYOUT_MAX_KEY], *a;
  int n, nKey;
  fx_open(&f, "verify_log");
  build_store(&f);
  assert_clean(&f);
  nKey = layout_key_log(k, 1);
  a = raw_get(&f, k, nKey, &n);
  ck_assert_int_eq(n, 24);
  raw_put(&f, k, nKey, a, 23);
  ck_assert_int_eq(findings(&f, "log", -1), 1);
  raw_put(&f, k, nKey, a, 24);
  assert_clean(&f);
  raw_put(&f, k, layout_key_log(k, 1000000), a, 24);
  ck_assert_int_eq(findings(&f, "log", -1), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q,'app')",
                          f.zStore), 0);
  sqlite3_free(a);
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_survives_random_garbage_rows){
  Fx f;
  const char *zRounds = getenv("DEPOT_VERIFY_FUZZ_ROUNDS");
  int nRound = zRounds ? atoi(zRounds) : 6, r;
  uint64_t iMain;
  fx_open(&f, "verify_fuzz");
  iMain = build_store(&f);
  srand(1234);
  for(r=0; r<nRound; r++){
    char *zErr = 0;
    char *zSql = sqlite3_mprintf("SELECT count(*) FROM depot_verify(%Q)",
                                 f.zStore);
    int rc;
    put_garbage(&f, iMain);
    rc = th_try(f.db, zSql, &zErr);
    sqlite3_free(zSql);
    ck_assert_msg(rc==SQLITE_OK || (rc&0xff)==SQLITE_CORRUPT,
                  "round %d: rc %d: %s", r, rc, zErr ? zErr : "");
    sqlite3_free(zErr);
    if( rc==SQLITE_OK ){
      ck_assert_int_gt(findings(&f, 0, -1), 0);
      ck_assert_int_le(findings(&f, 0, -1), DEPOT_VERIFY_MAX_FINDINGS);
    }
  }
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_bad_input_gives_clear_errors){
  Fx f;
  fx_open(&f, "verify_bad");
  build_store(&f);
  fx_fails(&f, "argument 1 must be non-empty text",
           "SELECT * FROM depot_verify(NULL)");
  fx_fails(&f, "argument 1 must be non-empty text",
           "SELECT * FROM depot_verify(7)");
  fx_fails(&f, "argument 2 must be non-empty text",
           "SELECT * FROM depot_verify(%Q, x'00')", f.zStore);
  fx_fails(&f, "unable to open", "SELECT * FROM depot_verify('%q/none')",
           f.zDir);
  fx_fails(&f, "no database 'nope'", "SELECT * FROM depot_verify(%Q,'nope')",
           f.zStore);
  fx_fails(&f, "with a branch 'zz'", "SELECT * FROM depot_verify(%Q,'app',"
           "'zz')", f.zStore);
  fx_fails(&f, "bucket nob does not exist", "SELECT * FROM depot_verify(%Q,"
           "'nob/app')", f.zStore);
  fx_fails(&f, "db is NAME or BUCKET/NAME", "SELECT * FROM depot_verify(%Q,"
           "NULL,'main')", f.zStore);
  fx_fails(&f, "db is NAME or BUCKET/NAME", "SELECT * FROM depot_verify(%Q,"
           "printf('%%.300c','a'))", f.zStore);
  fx_fails(&f, "no query solution", "SELECT * FROM depot_verify");
  assert_clean(&f);
  fx_close(&f);
}
END_TEST

START_TEST(test_new_functions_are_direct_only){
  Fx f;
  char *zErr = 0;
  fx_open(&f, "verify_direct");
  build_store(&f);
  fx_exec(&f, "CREATE TABLE x(s); INSERT INTO x VALUES(%Q)", f.zStore);
  fx_exec(&f, "CREATE VIEW v AS SELECT depot_quota(s,'app',1) FROM x");
  ck_assert_int_ne(th_try(f.db, "SELECT * FROM v", &zErr), SQLITE_OK);
  ck_assert_ptr_nonnull(strstr(zErr, "unsafe use of depot_quota"));
  sqlite3_free(zErr);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_quota(%Q,'app') IS NULL",
                   f.zStore), 1);
  fx_exec(&f, "CREATE VIEW w AS SELECT * FROM depot_verify('%q')", f.zStore);
  zErr = 0;
  ck_assert_int_ne(th_try(f.db, "SELECT * FROM w", &zErr), SQLITE_OK);
  ck_assert_ptr_nonnull(strstr(zErr, "unsafe use of"));
  sqlite3_free(zErr);
  fx_close(&f);
}
END_TEST

/* With $DEPOT_TEST_STORE_URI: the tests that damage the store only
** through the store interface, on that PostgreSQL server. */
static Suite *verifyStoreUriSuite(void){
  Suite *s = suite_create("verify");
  TCase *tc = tcase_create("store_uri");
  tcase_add_test(tc, test_quota_use_equals_stored_bytes_of_the_database);
  tcase_add_test(tc, test_quota_fork_counts_only_its_own_bytes);
  tcase_add_test(tc, test_quota_use_row_absent_is_computed_from_branch_counters);
  tcase_add_test(tc, test_quota_commit_past_cap_fails_full_and_writes_nothing);
  tcase_add_test(tc, test_quota_commit_that_just_fits_succeeds);
  tcase_add_test(tc, test_quota_bad_input_is_refused_and_changes_nothing);
  tcase_add_test(tc, test_verify_healthy_store_gives_no_rows);
  tcase_add_test(tc, test_verify_finds_a_flipped_byte_in_a_blob_chunk);
  tcase_add_test(tc, test_verify_finds_a_missing_chunk);
  tcase_add_test(tc, test_verify_finds_a_wrong_head_checksum);
  tcase_add_test(tc, test_verify_recomputes_the_head_checksum_from_the_pages);
  tcase_add_test(tc, test_verify_finds_an_orphan_pin_and_a_broken_refcount);
  tcase_add_test(tc, test_verify_finds_damaged_log_rows);
  tcase_add_test(tc, test_verify_bad_input_gives_clear_errors);
  suite_add_tcase(s, tc);
  return s;
}

Suite *depot_test_suite(void){
  Suite *s;
  TCase *tc;
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  if( zPg && zPg[0] ) return verifyStoreUriSuite();
  s = suite_create("verify");
  tc = tcase_create("quota");
  tcase_add_test(tc, test_quota_use_equals_stored_bytes_of_the_database);
  tcase_add_test(tc, test_quota_list_has_one_row_per_database_of_many_branches);
  tcase_add_test(tc, test_quota_fork_counts_only_its_own_bytes);
  tcase_add_test(tc, test_quota_use_row_absent_is_computed_from_branch_counters);
  tcase_add_test(tc, test_quota_commit_past_cap_fails_full_and_writes_nothing);
  tcase_add_test(tc, test_quota_commit_that_just_fits_succeeds);
  tcase_add_test(tc, test_quota_bad_input_is_refused_and_changes_nothing);
  suite_add_tcase(s, tc);
  tc = tcase_create("verify");
  tcase_add_test(tc, test_verify_healthy_store_gives_no_rows);
  tcase_add_test(tc, test_verify_finds_a_flipped_byte_in_a_blob_chunk);
  tcase_add_test(tc, test_verify_finds_a_missing_chunk);
  tcase_add_test(tc, test_verify_finds_a_page_index_row_without_its_blob);
  tcase_add_test(tc, test_verify_finds_a_wrong_head_checksum);
  tcase_add_test(tc, test_verify_recomputes_the_head_checksum_from_the_pages);
  tcase_add_test(tc, test_verify_finds_an_orphan_pin_and_a_broken_refcount);
  tcase_add_test(tc, test_verify_finds_fork_pin_rp_vtx_and_counter_damage);
  tcase_add_test(tc, test_verify_finds_damaged_log_rows);
  tcase_add_test(tc, test_verify_survives_random_garbage_rows);
  tcase_add_test(tc, test_verify_bad_input_gives_clear_errors);
  tcase_add_test(tc, test_new_functions_are_direct_only);
  suite_add_tcase(s, tc);
  return s;
}
