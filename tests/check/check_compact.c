/*
** check_compact.c -- the "compact" suite: compaction into shards and
** reclaim (GC) of the depot VFS.  Oracle tests compare a depot database
** against a plain SQLite file given the same statements, with compaction
** and aggressive GC between them, while a reader holds an older snapshot
** and while threads write and read concurrently; forks, restore points and
** retained points in time are compared with plain-SQLite snapshots after
** GC; a forked child keeps reading every page after its parent's deltas
** are reclaimed; SIGKILL during compaction/GC and injected store write and
** sync failures at each step leave a readable store whose byte counters
** are exact; bad input gets clear errors.
**
** DEPOT_TORTURE_ITERS=N runs N kill rounds (default 3).
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"
#include "vfs/vfs_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A scratch directory with store.depot, a plain oracle file, and an
** admin connection. */
typedef struct Fx Fx;
struct Fx {
  char *zDir;
  char *zStore;
  char *zPlain;
  sqlite3 *db;              /* :memory: connection with the extension */
};

/* The store of directory zDir: <zDir>/store.depot, or with
** $DEPOT_TEST_STORE_URI (tests/check/pg_suite.sh) that PostgreSQL server
** in a schema named after zDir. */
static char *fx_store_path(const char *zDir){
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  const char *zBase = strrchr(zDir, '/');
  if( zPg && zPg[0] ){
    return sqlite3_mprintf("%s&schema=%s", zPg, zBase ? zBase+1 : zDir);
  }
  return sqlite3_mprintf("%s/store.depot", zDir);
}

/* "file:<zStore>?vfs=depot&<zParams>", or for a PostgreSQL store
** "file:<dir of the test>/app?vfs=depot&<zParams>&store=<zStore>". */
static char *fx_uri(const char *zStore, const char *zParams){
  if( strncmp(zStore, "postgresql://", 13)==0 ){
    sqlite3_str *s = sqlite3_str_new(0);
    const char *z;
    sqlite3_str_appendf(s, "file:%s/app-%s?vfs=depot&%s&store=",
        getenv("DEPOT_TEST_TMPDIR") ? getenv("DEPOT_TEST_TMPDIR") : "/tmp",
        strstr(zStore, "schema=")+7, zParams);
    for(z=zStore; *z; z++){
      if( *z=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *z);
    }
    return sqlite3_str_finish(s);
  }
  return sqlite3_mprintf("file:%s?vfs=depot&%s", zStore, zParams);
}

static int fxCopyRow(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  sqlite3_stmt *pS = (sqlite3_stmt*)pArg;
  sqlite3_bind_blob(pS, 1, pKey, nKey, SQLITE_STATIC);
  sqlite3_bind_blob(pS, 2, pVal, nVal, SQLITE_STATIC);
  ck_assert_int_eq(sqlite3_step(pS), SQLITE_DONE);
  sqlite3_reset(pS);
  return 0;
}

/* An SQLite file whose depot_kv table holds the rows of store zStore, for
** the checks below that read the rows with SQL: the store file itself, or
** for a PostgreSQL store a copy of its rows made through store_scan(). */
static char *fx_sqlite_rows(const char *zStore){
  static int iCopy = 0;
  StoreSqliteConfig cfg;
  Store *pStore = 0;
  sqlite3 *db = 0;
  sqlite3_stmt *pS = 0;
  char *zCopy;
  if( strncmp(zStore, "postgresql://", 13)!=0 ){
    return sqlite3_mprintf("%s", zStore);
  }
  zCopy = sqlite3_mprintf("%s/pgrows-%d-%d.db", getenv("DEPOT_TEST_TMPDIR")
      ? getenv("DEPOT_TEST_TMPDIR") : "/tmp", (int)getpid(), ++iCopy);
  unlink(zCopy);
  memset(&cfg, 0, sizeof(cfg));
  ck_assert_int_eq(store_open(zStore, &cfg, &pStore, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_open(zCopy, &db), SQLITE_OK);
  th_exec(db, "CREATE TABLE depot_kv(key BLOB PRIMARY KEY, value BLOB);"
              "BEGIN");
  ck_assert_int_eq(sqlite3_prepare_v2(db, "INSERT INTO depot_kv VALUES(?,?)",
                                      -1, &pS, 0), SQLITE_OK);
  ck_assert_int_eq(store_scan(pStore, "", 0, 0, 0, 0, -1, fxCopyRow, pS),
                   SQLITE_OK);
  sqlite3_finalize(pS);
  th_exec(db, "COMMIT");
  sqlite3_close(db);
  store_close(pStore);
  return zCopy;
}

static void fx_open(Fx *f, const char *zTag){
  f->zDir = th_tmpdir(zTag);
  f->zStore = fx_store_path(f->zDir);
  f->zPlain = sqlite3_mprintf("%s/plain.db", f->zDir);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
  f->db = th_open(":memory:");
  sqlite3_extended_result_codes(f->db, 1);
}

static void fx_close(Fx *f){
  sqlite3_close(f->db);
  depot_fork_idle_close();
  sqlite3_free(f->zStore);
  sqlite3_free(f->zPlain);
  sqlite3_free(f->zDir);
}

static sqlite3 *fx_db_args(Fx *f, const char *zDb, const char *zBranch,
                           const char *zArgs){
  char *zP = sqlite3_mprintf("db=%s&branch=%s%s", zDb, zBranch, zArgs);
  char *z = fx_uri(f->zStore, zP);
  sqlite3_free(zP);
  sqlite3 *db = th_open(z);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 10000);
  sqlite3_free(z);
  return db;
}

static sqlite3 *fx_db(Fx *f, const char *zDb, const char *zBranch){
  return fx_db_args(f, zDb, zBranch, "");
}

static void fx_exec(Fx *f, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  th_exec(f->db, z);
  sqlite3_free(z);
}

static sqlite3_int64 fx_int(Fx *f, const char *zFmt, ...){
  va_list ap;
  sqlite3_int64 n;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  n = th_int(f->db, z);
  sqlite3_free(z);
  return n;
}

static void fx_fails(Fx *f, const char *zSub, const char *zFmt, ...){
  va_list ap;
  char *z, *zErr = 0;
  int rc;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  rc = th_try(f->db, z, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "%s: succeeded", z);
  ck_assert_msg(zErr && strstr(zErr, zSub), "%s: error '%s' lacks '%s'", z,
                zErr ? zErr : "", zSub);
  sqlite3_free(zErr);
  sqlite3_free(z);
}

/* Compact every branch of the store, then reclaim. */
static void fx_compact_gc(Fx *f){
  fx_exec(f, "SELECT depot_compact(%Q), depot_gc(%Q)", f->zStore, f->zStore);
}

/* The whole content of tables t and u as text. */
static char *content(sqlite3 *db){
  return th_text(db, "SELECT coalesce(group_concat(a||':'||b, ','),'')"
      " FROM (SELECT a, b FROM t ORDER BY a)");
}

static void assert_same(sqlite3 *pA, sqlite3 *pB){
  char *zA = content(pA), *zB = content(pB);
  ck_assert_msg(strcmp(zA, zB)==0, "content differs: %.60s... / %.60s...",
                zA, zB);
  sqlite3_free(zA);
  sqlite3_free(zB);
}

static void assert_content(sqlite3 *db, const char *zWant){
  char *z = content(db);
  ck_assert_msg(strcmp(z, zWant)==0, "content differs: %.80s / %.80s", z,
                zWant);
  sqlite3_free(z);
}

static void assert_integrity(sqlite3 *db){
  char *z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
}

/* ---- a deterministic workload ---- */

static unsigned rnd(unsigned *pSeed){
  *pSeed = *pSeed*1103515245u + 12345u;
  return (*pSeed>>8) & 0xffffff;
}

/* One random transaction's SQL (sqlite3_malloc'd). */
static char *work_sql(unsigned *pSeed){
  sqlite3_str *s = sqlite3_str_new(0);
  int i, n = 1 + rnd(pSeed)%4;
  sqlite3_str_appendall(s, "BEGIN;");
  for(i=0; i<n; i++){
    unsigned k = rnd(pSeed)%400, r = rnd(pSeed)%10;
    if( r<5 ){
      sqlite3_str_appendf(s, "INSERT OR REPLACE INTO t VALUES(%u,"
          " printf('%%.*c', %u, 'a'+%u));", k, 1+rnd(pSeed)%(r==0?6000:300),
          rnd(pSeed)%26);
    }else if( r<8 ){
      sqlite3_str_appendf(s, "UPDATE t SET b=b||'%u' WHERE a%%37=%u;",
                          r, k%37);
    }else{
      sqlite3_str_appendf(s, "DELETE FROM t WHERE a BETWEEN %u AND %u;",
                          k, k+3);
    }
  }
  sqlite3_str_appendall(s, "COMMIT;");
  return sqlite3_str_finish(s);
}

static void work(sqlite3 *pDepot, sqlite3 *pPlain, unsigned *pSeed, int n){
  int i;
  for(i=0; i<n; i++){
    char *z = work_sql(pSeed);
    th_exec(pDepot, z);
    if( pPlain ) th_exec(pPlain, z);
    sqlite3_free(z);
  }
}

static const char zSchema[] =
  "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT); CREATE INDEX tb ON t(b);";

/* ---- the store seen directly ---- */

static int64_t le64(const unsigned char *a, int n){
  uint64_t v = 0;
  int i;
  if( n!=8 ) return -1;
  for(i=7; i>=0; i--) v = (v<<8) | a[i];
  return (int64_t)v;
}

/* The quota use of every database, summed, is nAll (the blob bytes of all
** branches), and depot_verify() finds no counter out of step: each
** database's use equals its branches' counters, each counter its blob and
** shard chunk rows. */
static void assert_quota_exact(const char *zStore, int64_t nAll){
  sqlite3 *db = th_open(":memory:");
  char *z = sqlite3_mprintf("SELECT coalesce(sum(used_bytes),0) FROM"
                            " depot_quotas(%Q)", zStore);
  sqlite3_int64 nUsed = th_int(db, z);
  sqlite3_free(z);
  ck_assert_msg(nUsed==nAll, "quota use %lld, blob bytes %lld",
                (long long)nUsed, (long long)nAll);
  z = sqlite3_mprintf("SELECT count(*) FROM depot_verify(%Q) WHERE"
                      " kind='counter'", zStore);
  ck_assert_int_eq(th_int(db, z), 0);
  sqlite3_free(z);
  sqlite3_close(db);
}

/* The store's "stored" counter and each branch's quota row equal the
** bytes of the DELTA and shard blob chunk rows actually present, and so
** does the quota use of the databases. */
static void assert_counters_exact(const char *zStore){
  sqlite3 *db = 0;
  sqlite3_stmt *pS = 0;
  int64_t nAll = 0, nCtr;
  char *zRows = fx_sqlite_rows(zStore);
  ck_assert_int_eq(sqlite3_open_v2(zRows, &db, SQLITE_OPEN_READONLY, 0),
                   SQLITE_OK);
  sqlite3_free(zRows);
  ck_assert_int_eq(sqlite3_prepare_v2(db,
      "SELECT b, sum(n), (SELECT value FROM depot_kv AS q WHERE"
      " q.key>=x'0230' AND q.key<x'0231' AND length(q.key)=11 AND"
      " substr(q.key,11,1)=x'02' AND substr(q.key,3,8)=b) FROM (SELECT substr(key,3,8) AS b,"
      " CASE WHEN length(key)>11 AND substr(key,11,1) IN (x'30',x'41')"
      " THEN length(value) ELSE 0 END AS n FROM depot_kv WHERE"
      " key>=x'0230' AND key<x'0231') GROUP BY b", -1, &pS, 0), SQLITE_OK);
  while( sqlite3_step(pS)==SQLITE_ROW ){
    int64_t nHave = sqlite3_column_int64(pS, 1);
    int64_t nQuota = sqlite3_column_type(pS, 2)==SQLITE_NULL ? 0
        : le64(sqlite3_column_blob(pS, 2), sqlite3_column_bytes(pS, 2));
    ck_assert_msg(nHave==nQuota, "branch quota %lld, blob bytes %lld",
                  (long long)nQuota, (long long)nHave);
    nAll += nHave;
  }
  sqlite3_finalize(pS);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT value FROM depot_kv WHERE"
      " key=CAST(x'0240'||'stored' AS BLOB)", -1, &pS, 0), SQLITE_OK);
  nCtr = sqlite3_step(pS)==SQLITE_ROW
       ? le64(sqlite3_column_blob(pS, 0), sqlite3_column_bytes(pS, 0)) : 0;
  sqlite3_finalize(pS);
  sqlite3_close(db);
  ck_assert_msg(nCtr==nAll, "stored counter %lld, blob bytes %lld",
                (long long)nCtr, (long long)nAll);
  assert_quota_exact(zStore, nAll);
}

/* depot_verify() on the whole store gives no row. */
static void assert_verify_clean(const char *zStore){
  sqlite3 *db = th_open(":memory:");
  char *z = sqlite3_mprintf("SELECT count(*) FROM depot_verify(%Q)", zStore);
  char *zFirst = sqlite3_mprintf("SELECT kind||' '||coalesce(txid,'')||' '||"
      "message FROM depot_verify(%Q) LIMIT 1", zStore);
  sqlite3_int64 n = th_int(db, z);
  char *zMsg = n ? th_text(db, zFirst) : 0;
  ck_assert_msg(n==0, "depot_verify: %lld findings, first: %s", (long long)n,
                zMsg ? zMsg : "");
  sqlite3_free(zMsg);
  sqlite3_free(zFirst);
  sqlite3_free(z);
  sqlite3_close(db);
}

/* Rows of the store matching a SQL condition on key. */
static sqlite3_int64 store_rows(const char *zStore, const char *zWhere){
  sqlite3 *db = 0;
  char *z = sqlite3_mprintf("SELECT count(*) FROM depot_kv WHERE %s", zWhere);
  sqlite3_int64 n;
  char *zRows = fx_sqlite_rows(zStore);
  ck_assert_int_eq(sqlite3_open_v2(zRows, &db, SQLITE_OPEN_READONLY, 0),
                   SQLITE_OK);
  sqlite3_free(zRows);
  n = th_int(db, z);
  sqlite3_close(db);
  sqlite3_free(z);
  return n;
}

/* depot_shard_verify() on every shard version of the store: *pn gets the
** count; returns the first failure's code. */
static int verify_shards(const char *zStore, int *pn, char **pzErr){
  sqlite3 *db = 0;
  sqlite3_stmt *pS = 0;
  Store *pStore = 0;
  StoreSqliteConfig cfg;
  ZSTD_DCtx *pD = ZSTD_createDCtx();
  int rc = SQLITE_OK;
  *pn = 0;
  memset(&cfg, 0, sizeof(cfg));
  ck_assert_int_eq(store_open(zStore, &cfg, &pStore, 0), SQLITE_OK);
  char *zRows = fx_sqlite_rows(zStore);
  ck_assert_int_eq(sqlite3_open_v2(zRows, &db, SQLITE_OPEN_READONLY, 0),
                   SQLITE_OK);
  sqlite3_free(zRows);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key FROM depot_kv WHERE"
      " key>=x'0230' AND key<x'0231' AND length(key)=23 AND"
      " substr(key,11,1)=x'40'", -1, &pS, 0), SQLITE_OK);
  while( rc==SQLITE_OK && sqlite3_step(pS)==SQLITE_ROW ){
    const unsigned char *k = sqlite3_column_blob(pS, 0);
    rc = depot_shard_verify(pStore, bytes_get64(k+2), bytes_get32(k+11),
                            bytes_get64(k+15), pD, pzErr);
    (*pn)++;
  }
  sqlite3_finalize(pS);
  sqlite3_close(db);
  store_close(pStore);
  ZSTD_freeDCtx(pD);
  return rc;
}

static void assert_shards_sound(const char *zStore){
  char *zErr = 0;
  int n = 0, rc = verify_shards(zStore, &n, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "shard %d: %s", n, zErr ? zErr : "");
  sqlite3_free(zErr);
}

/* ---- oracle ---- */

START_TEST(test_compact_and_gc_match_plain_file_with_old_reader){
  Fx f;
  sqlite3 *pD, *pP, *pR = 0;
  char *zSnap = 0;
  unsigned seed = 7;
  int i;
  fx_open(&f, "cmp-oracle");
  pD = fx_db(&f, "app", "main");
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q, 300, 0)", f.zStore);
  for(i=0; i<12; i++){
    work(pD, pP, &seed, 6);
    if( i%3==1 ){
      pR = fx_db_args(&f, "app", "main", "&cache_kb=0");
      th_exec(pR, "BEGIN");
      zSnap = content(pR);
      work(pD, pP, &seed, 2);
    }
    fx_compact_gc(&f);
    assert_same(pD, pP);
    if( pR ){
      /* the reader still reads its snapshot, page by page */
      th_exec(pR, "PRAGMA cache_size=0");
      assert_content(pR, zSnap);
      th_exec(pR, "COMMIT");
      sqlite3_close(pR);
      pR = 0;
      sqlite3_free(zSnap);
    }
    assert_counters_exact(f.zStore);
  }
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), 0);
  /* everything folded: no page index or DELTA rows left */
  ck_assert_int_eq(store_rows(f.zStore, "key>=x'0230' AND key<x'0231' AND"
      " length(key)>11 AND substr(key,11,1) IN (x'20',x'30')"), 0);
  assert_integrity(pD);
  assert_shards_sound(f.zStore);
  sqlite3_close(pD);
  pD = fx_db(&f, "app", "main");
  assert_same(pD, pP);
  sqlite3_close(pD);
  sqlite3_close(pP);
  fx_close(&f);
}
END_TEST

/* A transaction reads the pages of its snapshot while another process
** commits and the store is compacted and reclaimed: the snapshot's commits
** stop being coverage points and their pages go, but the reads are pinned
** and still return its snapshot (its first write then fails with
** SQLITE_BUSY_SNAPSHOT, as for any transaction another process overtook,
** and nothing of it is stored). */
START_TEST(test_writer_keeps_reading_its_snapshot_while_store_is_compacted){
  Fx f;
  sqlite3 *w, *db;
  char *zBefore, *zDuring;
  pid_t pid;
  int st, toChild[2];
  char ch = 0;
  fx_open(&f, "compact-writer-snap");
  db = fx_db_args(&f, "app", "main", "&cache_kb=0");
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM g"
              " WHERE i<300) INSERT INTO t SELECT i, printf('%.*c', 300,"
              " char(65+i%26)) FROM g;"
              "UPDATE t SET b=upper(b)||'1' WHERE a%2=0");
  zBefore = content(db);
  sqlite3_close(db);
  ck_assert_int_eq(pipe(toChild), 0);
  pid = fork();
  if( pid==0 ){
    char *zUri = fx_uri(f.zStore, "db=app&cache_kb=0");
    sqlite3 *c;
    if( read(toChild[0], &ch, 1)!=1 ) _exit(3);
    if( sqlite3_open_v2(zUri, &c, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0) ){
      _exit(4);
    }
    if( sqlite3_exec(c, "UPDATE t SET b=lower(b)||'2';"
                        "UPDATE t SET b=b||'3'", 0, 0, 0) ) _exit(5);
    sqlite3_close(c);
    _exit(0);
  }
  w = fx_db_args(&f, "app", "main", "&cache_kb=0");
  th_exec(w, "BEGIN");
  ck_assert_int_eq(th_int(w, "SELECT count(*) FROM t"), 300);
  ck_assert_int_eq(write(toChild[1], "g", 1), 1);
  close(toChild[0]);
  close(toChild[1]);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  fx_compact_gc(&f);
  zDuring = content(w);
  ck_assert_str_eq(zDuring, zBefore);
  ck_assert_int_eq(th_try(w, "INSERT INTO t VALUES(1000, 'w')", 0),
                   SQLITE_BUSY_SNAPSHOT);
  th_exec(w, "ROLLBACK");
  ck_assert_int_eq(th_int(w, "SELECT count(*) FROM t WHERE a=1000"), 0);
  sqlite3_close(w);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q)",
                          f.zStore), 0);
  sqlite3_free(zBefore);
  sqlite3_free(zDuring);
  fx_close(&f);
}
END_TEST

/* ---- concurrent writer and reader threads ---- */

typedef struct Conc Conc;
struct Conc {
  Fx *f;
  int bDone;                /* set by the writer (atomic) */
  int nBadWrite, nBadRead;  /* each thread its own */
  char *zErrWrite, *zErrRead;
};

static int conc_done(Conc *c){
  return __atomic_load_n(&c->bDone, __ATOMIC_ACQUIRE);
}

static void *conc_writer(void *pArg){
  Conc *c = (Conc*)pArg;
  sqlite3 *pD = fx_db(c->f, "app", "main"), *pP = 0;
  unsigned seed = 99;
  int i;
  sqlite3_open(c->f->zPlain, &pP);
  for(i=0; i<120; i++){
    unsigned x = rnd(&seed)%50, y = rnd(&seed)%50, v = rnd(&seed)%100;
    char *z = sqlite3_mprintf("BEGIN; UPDATE acct SET bal=bal-%u WHERE id=%u;"
        " UPDATE acct SET bal=bal+%u WHERE id=%u;"
        " INSERT INTO t VALUES(%d, printf('%%.*c', %u, 'q')); COMMIT;",
        v, x, v, y, 1000+i, 50+rnd(&seed)%2000);
    if( sqlite3_exec(pD, z, 0, 0, 0)!=SQLITE_OK ){
      if( c->zErrWrite==0 ) c->zErrWrite = sqlite3_mprintf("writer: %s",
                                                 sqlite3_errmsg(pD));
      sqlite3_exec(pD, "ROLLBACK", 0, 0, 0);
      c->nBadWrite++;
    }else{
      sqlite3_exec(pP, z, 0, 0, 0);
    }
    sqlite3_free(z);
  }
  sqlite3_close(pD);
  sqlite3_close(pP);
  __atomic_store_n(&c->bDone, 1, __ATOMIC_RELEASE);
  return 0;
}

static void *conc_reader(void *pArg){
  Conc *c = (Conc*)pArg;
  sqlite3 *pD = fx_db(c->f, "app", "main");
  while( !conc_done(c) ){
    sqlite3_stmt *pS = 0;
    int rc = sqlite3_prepare_v2(pD, "SELECT sum(bal), count(*) FROM acct",
                                -1, &pS, 0);
    if( rc==SQLITE_OK && sqlite3_step(pS)==SQLITE_ROW ){
      if( sqlite3_column_int64(pS, 0)!=50000 || sqlite3_column_int(pS, 1)!=50 ){
        c->nBadRead++;
      }
    }else{
      if( c->zErrRead==0 ) c->zErrRead = sqlite3_mprintf("reader: %s",
                                                 sqlite3_errmsg(pD));
      c->nBadRead++;
    }
    sqlite3_finalize(pS);
  }
  sqlite3_close(pD);
  return 0;
}

START_TEST(test_compact_and_gc_under_concurrent_writer_and_reader){
  Fx f;
  Conc c;
  pthread_t w, r;
  sqlite3 *pD, *pP;
  int nRound = 0;
  fx_open(&f, "cmp-conc");
  pD = fx_db(&f, "app", "main");
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  th_exec(pD, "CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER);"
      " WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM g"
      " WHERE i<49) INSERT INTO acct SELECT i, 1000 FROM g");
  th_exec(pP, "CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER);"
      " WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM g"
      " WHERE i<49) INSERT INTO acct SELECT i, 1000 FROM g");
  sqlite3_close(pP);
  memset(&c, 0, sizeof(c));
  c.f = &f;
  fx_exec(&f, "SELECT depot_pitr_policy(%Q, 300, 0)", f.zStore);
  ck_assert_int_eq(pthread_create(&w, 0, conc_writer, &c), 0);
  ck_assert_int_eq(pthread_create(&r, 0, conc_reader, &c), 0);
  while( !conc_done(&c) ){
    fx_compact_gc(&f);
    nRound++;
  }
  pthread_join(w, 0);
  pthread_join(r, 0);
  ck_assert_msg(c.nBadWrite==0 && c.nBadRead==0, "%d bad writes, %d bad"
                " reads: %s %s", c.nBadWrite, c.nBadRead,
                c.zErrWrite ? c.zErrWrite : "", c.zErrRead ? c.zErrRead : "");
  ck_assert_int_gt(nRound, 1);
  fx_compact_gc(&f);
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  assert_same(pD, pP);
  ck_assert_int_eq(th_int(pD, "SELECT sum(bal) FROM acct"), 50000);
  ck_assert_int_eq(th_int(pD, "SELECT count(*) FROM t"), 120);
  assert_integrity(pD);
  assert_counters_exact(f.zStore);
  assert_shards_sound(f.zStore);
  sqlite3_free(c.zErrWrite);
  sqlite3_free(c.zErrRead);
  sqlite3_close(pD);
  sqlite3_close(pP);
  fx_close(&f);
}
END_TEST

/* ---- forks, restore points, points in time after aggressive GC ---- */

static char *iso_now(void){
  struct timespec ts;
  struct tm tm;
  char z[64];
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  strftime(z, sizeof(z), "%Y-%m-%dT%H:%M:%S", &tm);
  return sqlite3_mprintf("%s.%03dZ", z, (int)(ts.tv_nsec/1000000));
}

static sqlite3_int64 head_txid(Fx *f){
  return fx_int(f, "SELECT max(txid) FROM depot_commits(%Q,'app','main')",
                f->zStore);
}

/* Fork (app, main) at `at` into zNew; its content must be zWant. */
static void assert_fork_reads(Fx *f, const char *zAt, int bInt,
                              const char *zNew, const char *zWant){
  sqlite3 *db;
  if( bInt ){
    fx_exec(f, "SELECT depot_fork(%Q,'app','main',%Q,%s)", f->zStore, zNew,
            zAt);
  }else{
    fx_exec(f, "SELECT depot_fork(%Q,'app','main',%Q,%Q)", f->zStore, zNew,
            zAt);
  }
  db = fx_db(f, "app", zNew);
  {
    char *z = content(db);
    ck_assert_msg(strcmp(z, zWant)==0, "fork at %s differs", zAt);
    sqlite3_free(z);
  }
  assert_integrity(db);
  sqlite3_close(db);
}

START_TEST(test_forks_restore_points_and_retained_times_survive_gc){
  Fx f;
  sqlite3 *pD, *pP;
  unsigned seed = 3;
  char *azSnap[3], *azTime[3], *zForkSnap = 0, *zRpSnap = 0, *zHead;
  sqlite3_int64 iForkTxid = 0, iDropped;
  int i;
  fx_open(&f, "cmp-pins");
  pD = fx_db(&f, "app", "main");
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q, 1, 86400)", f.zStore);
  for(i=0; i<3; i++){
    work(pD, pP, &seed, 8);
    if( i==0 ){
      fx_exec(&f, "SELECT depot_fork(%Q,'app','main','early')", f.zStore);
      zForkSnap = content(pP);
      iForkTxid = head_txid(&f);
    }
    if( i==1 ){
      fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','rp')",
              f.zStore);
      zRpSnap = content(pP);
    }
    azSnap[i] = content(pP);
    usleep(1100000);
    azTime[i] = iso_now();
    usleep(3000);               /* no commit in the target's millisecond */
    work(pD, pP, &seed, 4);     /* same interval as the next burst */
    if( i<2 ) usleep(20000);
  }
  zHead = content(pP);
  for(i=0; i<3; i++){
    fx_compact_gc(&f);
    work(pD, pP, &seed, 3);
    sqlite3_free(zHead);
    zHead = content(pP);
  }
  fx_compact_gc(&f);
  assert_counters_exact(f.zStore);
  assert_same(pD, pP);
  {
    sqlite3 *db = fx_db(&f, "app", "early");
    assert_content(db, zForkSnap);
    sqlite3_close(db);
  }
  assert_fork_reads(&f, "rp", 0, "from-rp", zRpSnap);
  {
    char z[32];
    sqlite3_snprintf(sizeof(z), z, "%lld", (long long)iForkTxid);
    assert_fork_reads(&f, z, 1, "at-fork-txid", zForkSnap);
  }
  /* each burst ended in its own interval: its last commit is retained */
  assert_fork_reads(&f, azTime[0], 0, "t0", azSnap[0]);
  assert_fork_reads(&f, azTime[1], 0, "t1", azSnap[1]);
  assert_fork_reads(&f, azTime[2], 0, "t2", azSnap[2]);
  /* a commit folded without being retained is no fork target any more */
  iDropped = fx_int(&f, "WITH RECURSIVE g(i) AS (SELECT 2 UNION ALL SELECT"
      " i+1 FROM g WHERE i<(SELECT max(txid) FROM depot_commits(%Q,'app',"
      "'main'))) SELECT coalesce(min(i),0) FROM g WHERE i NOT IN (SELECT txid"
      " FROM depot_commits(%Q,'app','main'))", f.zStore, f.zStore);
  ck_assert_int_gt(iDropped, 0);
  fx_fails(&f, "no longer retained", "SELECT depot_fork(%Q,'app','main',"
           "'gone',%lld)", f.zStore, (long long)iDropped);
  assert_shards_sound(f.zStore);
  assert_verify_clean(f.zStore);
  for(i=0; i<3; i++){ sqlite3_free(azSnap[i]); sqlite3_free(azTime[i]); }
  sqlite3_free(zForkSnap);
  sqlite3_free(zRpSnap);
  sqlite3_free(zHead);
  sqlite3_close(pD);
  sqlite3_close(pP);
  fx_close(&f);
}
END_TEST

START_TEST(test_fork_child_reads_every_page_after_parent_reclaim){
  Fx f;
  sqlite3 *pD, *pC, *pP;
  char *zChild;
  fx_open(&f, "cmp-child");
  pD = fx_db(&f, "app", "main");
  th_exec(pD, zSchema);
  th_exec(pD, "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM g"
      " WHERE i<600) INSERT INTO t SELECT i, printf('%.*c', 200+i%300, 'p')"
      " FROM g");
  th_exec(pD, "UPDATE t SET b='x'||b WHERE a%3=0");
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','child')", f.zStore);
  pC = fx_db(&f, "app", "child");
  th_exec(pC, "UPDATE t SET b='child' WHERE a%50=0; INSERT INTO t"
              " VALUES(9999,'only in child')");
  /* the oracle of the child: the parent at the cap plus the child's own */
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pP, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
      "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM g"
      " WHERE i<600) INSERT INTO t SELECT i, printf('%.*c', 200+i%300, 'p')"
      " FROM g; UPDATE t SET b='x'||b WHERE a%3=0;"
      "UPDATE t SET b='child' WHERE a%50=0; INSERT INTO t"
      " VALUES(9999,'only in child')");
  zChild = content(pP);
  /* the parent overwrites every page, then is compacted and reclaimed */
  th_exec(pD, "UPDATE t SET b='new'||a; DELETE FROM t WHERE a>500");
  th_exec(pD, "UPDATE t SET b=b||'2'");
  fx_compact_gc(&f);
  /* every DELTA row is gone, the parent's below the cap included */
  ck_assert_int_eq(store_rows(f.zStore, "key>=x'0230' AND key<x'0231' AND"
      " length(key)>11 AND substr(key,11,1)=x'30'"), 0);
  sqlite3_close(pC);
  pC = fx_db(&f, "app", "child");
  assert_content(pC, zChild);
  assert_integrity(pC);
  /* and again once the child has been compacted on top of it */
  th_exec(pC, "UPDATE t SET b='c2' WHERE a=7");
  th_exec(pP, "UPDATE t SET b='c2' WHERE a=7");
  sqlite3_free(zChild);
  zChild = content(pP);
  fx_compact_gc(&f);
  sqlite3_close(pC);
  pC = fx_db(&f, "app", "child");
  assert_content(pC, zChild);
  assert_integrity(pC);
  ck_assert_int_eq(th_int(pD, "SELECT count(*) FROM t WHERE b LIKE 'new%2'"),
                   500);
  assert_counters_exact(f.zStore);
  assert_shards_sound(f.zStore);
  sqlite3_free(zChild);
  sqlite3_close(pC);
  sqlite3_close(pD);
  sqlite3_close(pP);
  fx_close(&f);
}
END_TEST

START_TEST(test_gc_removes_dropped_branch_and_credits_bytes){
  Fx f;
  sqlite3 *pD, *pC;
  sqlite3_int64 nBefore, nAfter, nRows;
  fx_open(&f, "cmp-drop");
  pD = fx_db(&f, "app", "main");
  th_exec(pD, zSchema);
  th_exec(pD, "INSERT INTO t VALUES(1,'one')");
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','tmp')", f.zStore);
  pC = fx_db(&f, "app", "tmp");
  th_exec(pC, "WITH RECURSIVE g(i) AS (SELECT 2 UNION ALL SELECT i+1 FROM g"
      " WHERE i<300) INSERT INTO t SELECT i, printf('%.*c', 500, 'd') FROM g");
  sqlite3_close(pC);
  fx_compact_gc(&f);
  nBefore = fx_int(&f, "SELECT stored_bytes FROM depot_stats(%Q)", f.zStore);
  fx_exec(&f, "SELECT depot_drop_branch(%Q,'app','tmp')", f.zStore);
  ck_assert_int_gt(fx_int(&f, "SELECT reclaimable_bytes FROM depot_stats(%Q)",
                          f.zStore), 0);
  nRows = fx_int(&f, "SELECT json_extract(depot_gc(%Q), '$.dropped_branches')",
                 f.zStore);
  ck_assert_int_eq(nRows, 1);
  nAfter = fx_int(&f, "SELECT stored_bytes FROM depot_stats(%Q)", f.zStore);
  ck_assert_int_lt(nAfter, nBefore);
  ck_assert_int_eq(fx_int(&f, "SELECT reclaimable_bytes FROM depot_stats(%Q)",
                          f.zStore), 0);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_branches(%Q,'app')",
                          f.zStore), 1);
  assert_counters_exact(f.zStore);
  assert_content(pD, "1:one");
  /* a second pass finds nothing */
  ck_assert_int_eq(fx_int(&f, "SELECT json_extract(depot_gc(%Q), '$.bytes')",
                          f.zStore), 0);
  sqlite3_close(pD);
  fx_close(&f);
}
END_TEST

START_TEST(test_stats_report_lag_and_reclaimable_bytes){
  Fx f;
  sqlite3 *pD;
  fx_open(&f, "cmp-stats");
  pD = fx_db(&f, "app", "main");
  th_exec(pD, zSchema);
  th_exec(pD, "INSERT INTO t VALUES(1,'a'); INSERT INTO t VALUES(2,'b');"
              "INSERT INTO t VALUES(3,'c')");
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), 5);
  fx_exec(&f, "SELECT depot_compact(%Q,'app','main')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), 0);
  th_exec(pD, "INSERT INTO t VALUES(4,'d')");
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), 1);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q, 300, 0)", f.zStore);
  fx_exec(&f, "SELECT depot_compact(%Q,'main/app')", f.zStore);
  /* the shard version of the old head is now superseded */
  ck_assert_int_gt(fx_int(&f, "SELECT reclaimable_bytes FROM depot_stats(%Q)",
                          f.zStore), 0);
  ck_assert_int_eq(fx_int(&f, "SELECT json_extract(depot_gc(%Q),'$.bytes')"
      " > 0", f.zStore), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT reclaimable_bytes FROM depot_stats(%Q)",
                          f.zStore), 0);
  assert_content(pD, "1:a,2:b,3:c,4:d");
  assert_counters_exact(f.zStore);
  sqlite3_close(pD);
  fx_close(&f);
}
END_TEST

/* ---- the background compactor ---- */

/* Wait (up to 20 s) until the background compactor has run nRuns jobs
** and the lag is at most nLag. */
static void wait_background(Fx *f, int64_t nRuns, sqlite3_int64 nLag){
  int i;
  for(i=0; i<400; i++){
    if( depot_compact_background_runs()>=nRuns
     && fx_int(f, "SELECT compaction_lag FROM depot_stats(%Q)", f->zStore)
        <=nLag ){
      return;
    }
    usleep(50000);
  }
  ck_abort_msg("background compaction did not run (%lld runs)",
               (long long)depot_compact_background_runs());
}

/* Few commits that hold as many bytes as the database wake the compactor
** although the commit threshold is far away. */
START_TEST(test_background_compaction_runs_past_a_byte_threshold){
  Fx f;
  sqlite3 *pD;
  int64_t n0 = depot_compact_background_runs();
  fx_open(&f, "cmp-bgbytes");
  pD = fx_db_args(&f, "app", "main", "&compact_after=100000");
  th_exec(pD, "CREATE TABLE t(k INTEGER PRIMARY KEY, pad)");
  th_exec(pD, "INSERT INTO t VALUES(1, randomblob(1000))");
  ck_assert_int_eq(depot_compact_background_runs(), n0);
  th_exec(pD, "WITH RECURSIVE c(i) AS (SELECT 2 UNION ALL SELECT i+1 FROM c"
              " WHERE i<6000) INSERT INTO t SELECT i, randomblob(1000) FROM c");
  th_exec(pD, "UPDATE t SET pad=randomblob(1000)");
  wait_background(&f, n0+1, 1000000);
  assert_integrity(pD);
  ck_assert_int_eq(th_int(pD, "SELECT count(*) FROM t"), 6000);
  sqlite3_close(pD);
  th_compact_idle();
  fx_close(&f);
}
END_TEST

START_TEST(test_background_compaction_runs_past_the_threshold){
  Fx f;
  sqlite3 *pD, *pP;
  unsigned seed = 21;
  int64_t n0 = depot_compact_background_runs();
  fx_open(&f, "cmp-bg");
  pD = fx_db_args(&f, "app", "main", "&compact_after=8");
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q, 300, 0)", f.zStore);
  work(pD, pP, &seed, 6);
  /* below the threshold: nothing was queued */
  ck_assert_int_eq(depot_compact_background_runs(), n0);
  work(pD, pP, &seed, 30);
  wait_background(&f, n0+1, 9);
  assert_same(pD, pP);
  assert_integrity(pD);
  sqlite3_close(pD);
  th_compact_idle();
  /* the store's setting applies to connections without compact_after */
  fx_exec(&f, "SELECT depot_compact(%Q), depot_compact_threshold(%Q, 4)",
          f.zStore, f.zStore);
  n0 = depot_compact_background_runs();
  pD = fx_db(&f, "app", "main");
  work(pD, pP, &seed, 12);
  wait_background(&f, n0+1, 5);
  assert_same(pD, pP);
  /* 0 turns it off */
  sqlite3_close(pD);
  th_compact_idle();
  pD = fx_db_args(&f, "app", "main", "&compact_after=0");
  n0 = depot_compact_background_runs();
  work(pD, pP, &seed, 12);
  usleep(200000);
  ck_assert_int_eq(depot_compact_background_runs(), n0);
  assert_counters_exact(f.zStore);
  sqlite3_close(pD);
  sqlite3_close(pP);
  fx_close(&f);
}
END_TEST

/* ---- fork() while the background compactor works ---- */

static pthread_mutex_t holdMutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t holdCond = PTHREAD_COND_INITIALIZER;
static int nHeld = 0, bHoldRelease = 0;

/* The compaction hook: the first shard build waits here, its store
** connection open, until the test lets it go (or 2 s pass). */
static void hold_compactor(const char *zStore){
  struct timespec ts;
  (void)zStore;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 2;
  pthread_mutex_lock(&holdMutex);
  nHeld++;
  pthread_cond_broadcast(&holdCond);
  while( !bHoldRelease
      && pthread_cond_timedwait(&holdCond, &holdMutex, &ts)==0 ){}
  bHoldRelease = 1;
  pthread_mutex_unlock(&holdMutex);
}

/* A process forks while its background compactor runs a job, and its
** child commits to the store: every commit the child made survives the
** job's end in the parent.  The fork handlers of the compactor stop the
** job and wait for it before fork() proceeds; a child that inherited the
** job's open store connection would share its lock and -shm bookkeeping
** in SQLite's unix VFS (taking no real lock), and the parent closing that
** connection, its last on the store, would checkpoint and delete the -wal
** that the child still appends to. */
START_TEST(test_background_compaction_at_fork_keeps_the_childs_commits){
  Fx f;
  sqlite3 *pD;
  unsigned seed = 41;
  int toChild[2], toParent[2], st = 0, i;
  char ch = 0;
  pid_t pid;
  sqlite3_int64 n0;
  fx_open(&f, "cmp-atfork");
  pD = fx_db_args(&f, "app", "main", "&compact_after=0");
  th_exec(pD, zSchema);
  work(pD, 0, &seed, 30);
  n0 = th_int(pD, "SELECT count(*) FROM t");
  sqlite3_close(pD);
  th_compact_idle();
  pthread_mutex_lock(&holdMutex);
  nHeld = bHoldRelease = 0;
  pthread_mutex_unlock(&holdMutex);
  depot_compact_test_encoded = hold_compactor;
  pD = fx_db_args(&f, "app", "main", "&compact_after=5");
  work(pD, 0, &seed, 1);               /* past the threshold: a job starts */
  sqlite3_close(pD);
  pthread_mutex_lock(&holdMutex);
  while( nHeld==0 ) pthread_cond_wait(&holdCond, &holdMutex);
  pthread_mutex_unlock(&holdMutex);
  /* the job holds its store connection, the only one of this process */
  ck_assert_int_eq(pipe(toChild), 0);
  ck_assert_int_eq(pipe(toParent), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *db;
    char *zUri = fx_uri(f.zStore, "db=app&compact_after=0");
    int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI,
                             0);
    if( rc==SQLITE_OK ) sqlite3_busy_timeout(db, th_busy_ms(10000));
    if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "INSERT INTO t(b)"
                                          " VALUES('child')", 0, 0, 0);
    if( rc!=SQLITE_OK ) _exit(3);
    if( write(toParent[1], "x", 1)!=1 || read(toChild[0], &ch, 1)!=1 ){
      _exit(4);
    }
    for(i=0; i<10; i++){
      if( sqlite3_exec(db, "INSERT INTO t(b) VALUES('child')", 0, 0, 0) ){
        _exit(5);
      }
    }
    _exit(0);        /* as if killed: the connection is not closed */
  }
  ck_assert_int_eq(read(toParent[0], &ch, 1), 1);
  pthread_mutex_lock(&holdMutex);
  bHoldRelease = 1;
  pthread_cond_broadcast(&holdCond);
  pthread_mutex_unlock(&holdMutex);
  th_compact_idle();              /* the job ran to its end */
  depot_compact_test_encoded = 0;
  ck_assert_int_eq(write(toChild[1], "x", 1), 1);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  close(toChild[0]); close(toChild[1]);
  close(toParent[0]); close(toParent[1]);
  pD = fx_db(&f, "app", "main");
  ck_assert_int_eq(th_int(pD, "SELECT count(*) FROM t WHERE b='child'"), 11);
  ck_assert_int_eq(th_int(pD, "SELECT count(*) FROM t"), n0+1+11);
  assert_integrity(pD);
  sqlite3_close(pD);
  fx_close(&f);
}
END_TEST

/* ---- commits are not held up by a shard build ---- */

static int nEncoded, nEncodedBusy;

/* The compaction hook: may another handle take the store's write lock
** now, between the encoding of a shard version and its rows? */
static void try_write_lock(const char *zStore){
  StoreSqliteConfig cfg;
  Store *pStore = 0;
  int rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.nBusyMs = 1;
  rc = store_open(zStore, &cfg, &pStore, 0);
  if( rc==SQLITE_OK ) rc = store_begin(pStore, 1);
  if( rc==SQLITE_OK ) store_rollback(pStore);
  store_close(pStore);
  nEncoded++;
  if( rc!=SQLITE_OK ) nEncodedBusy++;
}

START_TEST(test_compaction_encodes_shards_without_the_store_write_lock){
  Fx f;
  sqlite3 *pD, *pP;
  unsigned seed = 31;
  fx_open(&f, "cmp-lock");
  pD = fx_db_args(&f, "app", "main", "&compact_after=0");
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  work(pD, pP, &seed, 20);
  nEncoded = nEncodedBusy = 0;
  depot_compact_test_encoded = try_write_lock;
  fx_exec(&f, "SELECT depot_compact(%Q)", f.zStore);
  depot_compact_test_encoded = 0;
  ck_assert_int_gt(nEncoded, 0);
  ck_assert_msg(nEncodedBusy==0, "%d of %d shard builds held the write lock"
                " while encoding", nEncodedBusy, nEncoded);
  work(pD, pP, &seed, 5);
  fx_compact_gc(&f);
  assert_same(pD, pP);
  assert_integrity(pD);
  assert_counters_exact(f.zStore);
  assert_verify_clean(f.zStore);
  sqlite3_close(pD);
  sqlite3_close(pP);
  fx_close(&f);
}
END_TEST

/* ---- a writer that keeps committing does not keep compaction going ---- */

static sqlite3 *pHookDepot, *pHookPlain;
static unsigned hookSeed;
static int nHookCommits, nHookBatches;

/* The compaction hook: another commit on the branch being compacted. */
static void commit_during_compaction(const char *zStore){
  (void)zStore;
  if( nHookCommits>=30 ) return;
  work(pHookDepot, pHookPlain, &hookSeed, 1);
  nHookCommits++;
}

START_TEST(test_compact_stops_at_the_head_it_started_with){
  Fx f;
  sqlite3 *pD, *pP;
  unsigned seed = 41;
  sqlite3_int64 nHead;
  char *zSql, *zRes, *zWant;
  fx_open(&f, "cmp-stop");
  pD = fx_db_args(&f, "app", "main", "&compact_after=0");
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  work(pD, pP, &seed, 20);
  nHead = fx_int(&f, "SELECT max(txid) FROM depot_commits(%Q,'app')",
                 f.zStore);
  pHookDepot = pD;
  pHookPlain = pP;
  hookSeed = 43;
  nHookCommits = 0;
  depot_compact_test_encoded = commit_during_compaction;
  zSql = sqlite3_mprintf("SELECT depot_compact(%Q)", f.zStore);
  zRes = th_text(f.db, zSql);
  sqlite3_free(zSql);
  depot_compact_test_encoded = 0;
  ck_assert_int_gt(nHookCommits, 0);
  zWant = sqlite3_mprintf("\"commits\":%lld,", nHead);
  ck_assert_msg(strstr(zRes, zWant)!=0, "%s lacks %s", zRes, zWant);
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), nHookCommits);
  fx_compact_gc(&f);
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), 0);
  assert_same(pD, pP);
  assert_integrity(pD);
  assert_counters_exact(f.zStore);
  assert_verify_clean(f.zStore);
  sqlite3_free(zRes);
  sqlite3_free(zWant);
  sqlite3_close(pD);
  sqlite3_close(pP);
  fx_close(&f);
}
END_TEST

/* ---- reclaim in batches ---- */

/* Store f's history: four rounds of commits, each compacted, and a fork
** with commits of its own that is dropped. */
static void gc_history(Fx *f, sqlite3 *pD, sqlite3 *pP){
  unsigned seed = 77;
  sqlite3 *pC;
  int i;
  th_exec(pD, zSchema);
  if( pP ) th_exec(pP, zSchema);
  for(i=0; i<4; i++){
    work(pD, pP, &seed, 12);
    fx_exec(f, "SELECT depot_compact(%Q)", f->zStore);
  }
  fx_exec(f, "SELECT depot_fork(%Q,'app','main','tmp')", f->zStore);
  pC = fx_db_args(f, "app", "tmp", "&compact_after=0");
  work(pC, 0, &seed, 6);
  sqlite3_close(pC);
  fx_exec(f, "SELECT depot_drop_branch(%Q,'app','tmp')", f->zStore);
}

/* Every key of store zStore with the length of its value, in key order. */
static char *store_keys(const char *zStore){
  sqlite3 *db = 0;
  char *z, *zRows = fx_sqlite_rows(zStore);
  ck_assert_int_eq(sqlite3_open_v2(zRows, &db, SQLITE_OPEN_READONLY, 0),
                   SQLITE_OK);
  sqlite3_free(zRows);
  z = th_text(db, "SELECT group_concat(hex(key)||':'||length(value), ',')"
                  " FROM (SELECT key, value FROM depot_kv ORDER BY key)");
  sqlite3_close(db);
  return z;
}

static void gc_between_batches(const char *zStore){
  (void)zStore;
  nHookBatches++;
  if( pHookDepot==0 || nHookCommits>=40 ) return;
  work(pHookDepot, pHookPlain, &hookSeed, 1);
  nHookCommits++;
}

/* depot_gc() in batches of two rows reclaims exactly what it reclaims in
** one batch per branch (the same rows remain, the same result); with a
** writer committing between its batches, the reclaim still leaves the
** writer's data whole, the counters exact and the store verified. */
START_TEST(test_gc_in_batches_with_commits_between){
  Fx fa, fb;
  sqlite3 *pA, *pB, *pB2, *pP;
  int i;
  char *zGa, *zGb, *zKa, *zKb, *zSql;
  fx_open(&fa, "cmp-gcbatch-a");
  fx_open(&fb, "cmp-gcbatch-b");
  pA = fx_db_args(&fa, "app", "main", "&compact_after=0");
  pB = fx_db_args(&fb, "app", "main", "&compact_after=0");
  ck_assert_int_eq(sqlite3_open(fa.zPlain, &pP), SQLITE_OK);
  /* no time targets: the two stores, built seconds apart, must not keep
  ** different commits because a PITR interval ended between them */
  fx_exec(&fa, "SELECT depot_pitr_policy(%Q, 300, 0)", fa.zStore);
  fx_exec(&fb, "SELECT depot_pitr_policy(%Q, 300, 0)", fb.zStore);
  gc_history(&fa, pA, pP);
  gc_history(&fb, pB, 0);
  pHookDepot = 0;
  nHookBatches = 0;
  nHookCommits = 0;
  depot_gc_test_batch = 2;
  depot_gc_test_between = gc_between_batches;
  zSql = sqlite3_mprintf("SELECT depot_gc(%Q)", fa.zStore);
  zGa = th_text(fa.db, zSql);
  sqlite3_free(zSql);
  depot_gc_test_batch = 0;
  depot_gc_test_between = 0;
  ck_assert_int_gt(nHookBatches, 20);
  zSql = sqlite3_mprintf("SELECT depot_gc(%Q)", fb.zStore);
  zGb = th_text(fb.db, zSql);
  sqlite3_free(zSql);
  ck_assert_str_eq(zGa, zGb);
  ck_assert_int_eq(fx_int(&fa, "SELECT json_extract(%Q,'$.dropped_branches')",
                          zGa), 1);
  zKa = store_keys(fa.zStore);
  zKb = store_keys(fb.zStore);
  ck_assert_msg(zKa && zKb && strcmp(zKa, zKb)==0,
                "the stores' rows differ (%d and %d bytes of keys)",
                zKa ? (int)strlen(zKa) : -1, zKb ? (int)strlen(zKb) : -1);
  sqlite3_free(zGa); sqlite3_free(zGb); sqlite3_free(zKa); sqlite3_free(zKb);
  assert_counters_exact(fa.zStore);
  assert_verify_clean(fa.zStore);

  /* more history, then a batched reclaim with commits between batches */
  hookSeed = 91;
  for(i=0; i<6; i++){
    work(pA, pP, &hookSeed, 4);
    fx_exec(&fa, "SELECT depot_compact(%Q)", fa.zStore);
  }
  fx_exec(&fa, "SELECT depot_fork(%Q,'app','main','tmp2')", fa.zStore);
  pB2 = fx_db_args(&fa, "app", "tmp2", "&compact_after=0");
  work(pB2, 0, &hookSeed, 6);
  sqlite3_close(pB2);
  fx_exec(&fa, "SELECT depot_drop_branch(%Q,'app','tmp2')", fa.zStore);
  pHookDepot = pA;
  pHookPlain = pP;
  nHookBatches = 0;
  nHookCommits = 0;
  depot_gc_test_batch = 2;
  depot_gc_test_between = gc_between_batches;
  fx_exec(&fa, "SELECT depot_gc(%Q)", fa.zStore);
  depot_gc_test_batch = 0;
  depot_gc_test_between = 0;
  pHookDepot = pHookPlain = 0;
  ck_assert_int_gt(nHookCommits, 10);
  assert_same(pA, pP);
  assert_integrity(pA);
  assert_counters_exact(fa.zStore);
  assert_verify_clean(fa.zStore);
  assert_shards_sound(fa.zStore);
  fx_compact_gc(&fa);
  ck_assert_int_eq(fx_int(&fa, "SELECT reclaimable_bytes FROM"
                          " depot_stats(%Q)", fa.zStore), 0);
  assert_same(pA, pP);
  assert_counters_exact(fa.zStore);
  sqlite3_close(pA);
  sqlite3_close(pB);
  sqlite3_close(pP);
  fx_close(&fa);
  fx_close(&fb);
}
END_TEST

/* Between two sweep batches of a compaction: the store verifies clean
** with its counters exact, a reader of the writer's connection sees the
** plain file's content, and the writer commits once more. */
static void sweep_between_batches(const char *zStore){
  nHookBatches++;
  if( nHookBatches%4==1 ){
    assert_verify_clean(zStore);
    assert_counters_exact(zStore);
    assert_same(pHookDepot, pHookPlain);
  }
  if( nHookCommits>=20 ) return;
  work(pHookDepot, pHookPlain, &hookSeed, 1);
  nHookCommits++;
}

/* A compaction sweeps the rows it folded in batches: in batches of two
** rows it leaves exactly the rows of a sweep in one batch; with a writer
** committing between its batches the store stays verified and readable
** throughout, and the next compaction folds the writer's commits too. */
START_TEST(test_compaction_sweeps_in_batches_with_commits_between){
  Fx fa, fb;
  sqlite3 *pA, *pB, *pP;
  unsigned sa = 5, sb = 5;
  char *zKa, *zKb;
  fx_open(&fa, "cmp-sweep-a");
  fx_open(&fb, "cmp-sweep-b");
  pA = fx_db_args(&fa, "app", "main", "&compact_after=0");
  pB = fx_db_args(&fb, "app", "main", "&compact_after=0");
  ck_assert_int_eq(sqlite3_open(fa.zPlain, &pP), SQLITE_OK);
  /* no time targets: the two stores, built seconds apart, must not keep
  ** different shard versions because a PITR interval ended between them */
  fx_exec(&fa, "SELECT depot_pitr_policy(%Q, 300, 0)", fa.zStore);
  fx_exec(&fb, "SELECT depot_pitr_policy(%Q, 300, 0)", fb.zStore);
  th_exec(pA, zSchema);
  th_exec(pP, zSchema);
  th_exec(pB, zSchema);
  work(pA, pP, &sa, 30);
  work(pB, 0, &sb, 30);
  pHookDepot = pHookPlain = 0;
  nHookBatches = nHookCommits = 0;
  depot_gc_test_batch = 2;
  fx_exec(&fa, "SELECT depot_compact(%Q)", fa.zStore);
  depot_gc_test_batch = 0;
  fx_exec(&fb, "SELECT depot_compact(%Q)", fb.zStore);
  zKa = store_keys(fa.zStore);
  zKb = store_keys(fb.zStore);
  ck_assert_str_eq(zKa, zKb);
  sqlite3_free(zKa);
  sqlite3_free(zKb);

  hookSeed = 17;
  work(pA, pP, &hookSeed, 30);
  pHookDepot = pA;
  pHookPlain = pP;
  depot_gc_test_batch = 2;
  depot_gc_test_between = sweep_between_batches;
  fx_exec(&fa, "SELECT depot_compact(%Q)", fa.zStore);
  depot_gc_test_batch = 0;
  depot_gc_test_between = 0;
  pHookDepot = pHookPlain = 0;
  ck_assert_int_gt(nHookBatches, 20);
  ck_assert_int_eq(nHookCommits, 20);
  assert_same(pA, pP);
  assert_counters_exact(fa.zStore);
  assert_verify_clean(fa.zStore);
  assert_shards_sound(fa.zStore);
  fx_exec(&fa, "SELECT depot_compact(%Q)", fa.zStore);
  ck_assert_int_eq(fx_int(&fa, "SELECT compaction_lag FROM depot_stats(%Q)",
                          fa.zStore), 0);
  ck_assert_int_eq(store_rows(fa.zStore, "key>=x'0230' AND key<x'0231' AND"
      " length(key)>11 AND substr(key,11,1) IN (x'20',x'30')"), 0);
  assert_same(pA, pP);
  assert_integrity(pA);
  assert_counters_exact(fa.zStore);
  assert_verify_clean(fa.zStore);
  sqlite3_close(pA);
  sqlite3_close(pB);
  sqlite3_close(pP);
  fx_close(&fa);
  fx_close(&fb);
}
END_TEST

/* ---- compaction plans in batches ---- */

/* Between two plan batches of a compaction: the writer commits once more
** (up to 20 times). */
static void plan_between_batches(const char *zStore){
  (void)zStore;
  nHookBatches++;
  if( pHookDepot==0 || nHookCommits>=20 ) return;
  work(pHookDepot, pHookPlain, &hookSeed, 1);
  nHookCommits++;
}

/* A compaction plans over the commit rows (its points in time) and the
** page index in read transactions of two rows each: the shard versions and every row it leaves equal those of a
** plan in one transaction; with a writer committing between the batches,
** the store equals that of the same compaction followed by the same
** commits, verifies clean with its counters exact, and the next
** compaction folds the writer's commits too. */
START_TEST(test_compaction_plans_in_batches_with_commits_between){
  Fx fa, fb;
  sqlite3 *pA, *pB, *pP;
  unsigned sa = 9, sb = 9, sc = 23;
  char *zKa, *zKb;
  fx_open(&fa, "cmp-plan-a");
  fx_open(&fb, "cmp-plan-b");
  pA = fx_db_args(&fa, "app", "main", "&compact_after=0");
  pB = fx_db_args(&fb, "app", "main", "&compact_after=0");
  ck_assert_int_eq(sqlite3_open(fa.zPlain, &pP), SQLITE_OK);
  /* every commit of the last day a point in time: the plan walks the
  ** commit rows in batches too, and no interval ends between the stores */
  fx_exec(&fa, "SELECT depot_pitr_policy(%Q, 0, 86400)", fa.zStore);
  fx_exec(&fb, "SELECT depot_pitr_policy(%Q, 0, 86400)", fb.zStore);
  th_exec(pA, zSchema);
  th_exec(pP, zSchema);
  th_exec(pB, zSchema);
  work(pA, pP, &sa, 30);
  work(pB, 0, &sb, 30);
  pHookDepot = pHookPlain = 0;
  nHookBatches = nHookCommits = 0;
  depot_compact_test_plan_batch = 2;
  depot_compact_test_plan_between = plan_between_batches;
  fx_exec(&fa, "SELECT depot_compact(%Q)", fa.zStore);
  depot_compact_test_plan_batch = 0;
  depot_compact_test_plan_between = 0;
  ck_assert_int_gt(nHookBatches, 20);
  fx_exec(&fb, "SELECT depot_compact(%Q)", fb.zStore);
  zKa = store_keys(fa.zStore);
  zKb = store_keys(fb.zStore);
  ck_assert_msg(zKa && zKb && strcmp(zKa, zKb)==0, "the stores' rows differ");
  sqlite3_free(zKa);
  sqlite3_free(zKb);

  work(pA, pP, &sa, 30);
  work(pB, 0, &sb, 30);
  hookSeed = sc;
  pHookDepot = pA;
  pHookPlain = pP;
  nHookBatches = nHookCommits = 0;
  depot_compact_test_plan_batch = 2;
  depot_compact_test_plan_between = plan_between_batches;
  fx_exec(&fa, "SELECT depot_compact(%Q)", fa.zStore);
  depot_compact_test_plan_batch = 0;
  depot_compact_test_plan_between = 0;
  pHookDepot = pHookPlain = 0;
  ck_assert_int_eq(nHookCommits, 20);
  fx_exec(&fb, "SELECT depot_compact(%Q)", fb.zStore);
  work(pB, 0, &sc, 20);
  zKa = store_keys(fa.zStore);
  zKb = store_keys(fb.zStore);
  ck_assert_msg(zKa && zKb && strcmp(zKa, zKb)==0, "the stores' rows differ"
                " after commits between plan batches");
  sqlite3_free(zKa);
  sqlite3_free(zKb);
  assert_same(pA, pP);
  assert_counters_exact(fa.zStore);
  assert_verify_clean(fa.zStore);
  assert_shards_sound(fa.zStore);
  fx_exec(&fa, "SELECT depot_compact(%Q)", fa.zStore);
  ck_assert_int_eq(fx_int(&fa, "SELECT compaction_lag FROM depot_stats(%Q)",
                          fa.zStore), 0);
  assert_same(pA, pP);
  assert_integrity(pA);
  assert_verify_clean(fa.zStore);
  sqlite3_close(pA);
  sqlite3_close(pB);
  sqlite3_close(pP);
  fx_close(&fa);
  fx_close(&fb);
}
END_TEST

/* ---- bad input ---- */

START_TEST(test_bad_input_to_compact_and_gc_gives_clear_errors){
  Fx f;
  sqlite3 *pD;
  char *zMissing;
  fx_open(&f, "cmp-bad");
  pD = fx_db(&f, "app", "main");
  th_exec(pD, zSchema);
  th_exec(pD, "INSERT INTO t VALUES(1,'a')");
  zMissing = sqlite3_mprintf("%s/none.depot", f.zDir);
  fx_fails(&f, "store must be non-empty text", "SELECT depot_compact(NULL)");
  fx_fails(&f, "store must be non-empty text", "SELECT depot_gc(NULL)");
  fx_fails(&f, "store must be non-empty text", "SELECT depot_gc(42)");
  fx_fails(&f, "db must be non-empty text", "SELECT depot_compact(%Q,NULL)",
           f.zStore);
  fx_fails(&f, "branch must be non-empty text",
           "SELECT depot_compact(%Q,'app',x'00')", f.zStore);
  fx_fails(&f, "database nope does not exist",
           "SELECT depot_compact(%Q,'nope')", f.zStore);
  fx_fails(&f, "database app has no branch dev",
           "SELECT depot_compact(%Q,'app','dev')", f.zStore);
  fx_fails(&f, "bucket zz does not exist",
           "SELECT depot_compact(%Q,'zz/app','main')", f.zStore);
  fx_fails(&f, "bucket zz does not exist",
           "SELECT depot_compact(%Q,'zz/app')", f.zStore);
  fx_fails(&f, "database main/nope does not exist",
           "SELECT depot_compact(%Q,'main/nope')", f.zStore);
  fx_fails(&f, "branch name must be 1..255 bytes",
           "SELECT depot_compact(%Q,'app',printf('%%.300c','b'))", f.zStore);
  fx_fails(&f, "none.depot", "SELECT depot_gc(%Q)", zMissing);
  fx_fails(&f, "none.depot", "SELECT depot_compact(%Q)", zMissing);
  fx_fails(&f, "n must be an integer >= 0",
           "SELECT depot_compact_threshold(%Q,-1)", f.zStore);
  fx_fails(&f, "n must be an integer >= 0",
           "SELECT depot_compact_threshold(%Q,'x')", f.zStore);
  fx_fails(&f, "wrong number of arguments", "SELECT depot_gc(%Q,1)",
           f.zStore);
  {
    char *z = fx_uri(f.zStore, "db=app&compact_after=-2");
    sqlite3 *db = 0;
    ck_assert_int_ne(sqlite3_open_v2(z, &db, SQLITE_OPEN_READWRITE|
                                     SQLITE_OPEN_URI, 0), SQLITE_OK);
    sqlite3_close(db);
    sqlite3_free(z);
  }
  /* nothing changed */
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), 3);
  ck_assert_int_eq(access(zMissing, F_OK), -1);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_compact_threshold(%Q)",
                          f.zStore), DEPOT_COMPACT_DEFAULT_THRESHOLD);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_compact_threshold(%Q, 5)",
                          f.zStore), 5);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_compact_threshold(%Q)",
                          f.zStore), 5);
  assert_content(pD, "1:a");
  sqlite3_free(zMissing);
  sqlite3_close(pD);
  fx_close(&f);
}
END_TEST

START_TEST(test_compaction_functions_are_direct_only){
  Fx f;
  sqlite3 *pD;
  fx_open(&f, "cmp-direct");
  pD = fx_db(&f, "app", "main");
  th_exec(pD, zSchema);
  fx_exec(&f, "CREATE TABLE s(p TEXT); INSERT INTO s VALUES(%Q);"
          "CREATE VIEW v AS SELECT depot_gc(p) FROM s", f.zStore);
  fx_fails(&f, "unsafe use of depot_gc", "SELECT * FROM v");
  sqlite3_close(pD);
  fx_close(&f);
}
END_TEST

/* ---- corruption ---- */

START_TEST(test_corrupt_shard_is_reported_by_reads_and_verify){
  Fx f;
  sqlite3 *pD, *pS;
  char *zErr = 0;
  int n = 0, rc;
  fx_open(&f, "cmp-corrupt");
  pD = fx_db(&f, "app", "main");
  th_exec(pD, zSchema);
  th_exec(pD, "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM g"
      " WHERE i<200) INSERT INTO t SELECT i, printf('%.*c', 300, 'z') FROM g");
  sqlite3_close(pD);
  fx_compact_gc(&f);
  assert_shards_sound(f.zStore);
  assert_verify_clean(f.zStore);
  ck_assert_int_eq(sqlite3_open(f.zStore, &pS), SQLITE_OK);
  th_exec(pS, "UPDATE depot_kv SET value=substr(value,1,100)||"
      "CASE WHEN substr(value,101,1)=x'41' THEN x'42' ELSE x'41' END||"
      "substr(value,102) WHERE key>=x'0230' AND key<x'0231' AND"
      " substr(key,11,1)=x'41'");
  sqlite3_close(pS);
  rc = verify_shards(f.zStore, &n, &zErr);
  ck_assert_int_eq(rc, SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "corrupt"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  ck_assert_int_gt(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q) WHERE"
      " kind='shard' AND db='app' AND branch='main' AND message LIKE"
      " 'depot: shard %% as of txid %%'", f.zStore), 0);
  {
    /* a cold read: the pages decoded before outlive their connection */
    char *z = fx_uri(f.zStore, "db=app&cache_kb=0&map_kb=0");
    pD = 0;
    rc = sqlite3_open_v2(z, &pD, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
    if( rc==SQLITE_OK ){
      rc = th_try(pD, "SELECT count(*), sum(length(b)) FROM t", 0);
    }
    ck_assert_int_eq(rc & 0xff, SQLITE_CORRUPT);
    sqlite3_close(pD);
    sqlite3_free(z);
  }
  fx_close(&f);
}
END_TEST

/* ---- quotas and the verifier over compacted stores ---- */

static sqlite3_int64 quota_used(Fx *f){
  return fx_int(f, "SELECT used_bytes FROM depot_quotas(%Q) WHERE db='app'",
                f->zStore);
}

/* Main with history, a fork written to, and a dropped fork. */
static void quota_setup(Fx *f, sqlite3 *pD){
  sqlite3 *pC;
  int i;
  th_exec(pD, zSchema);
  for(i=0; i<20; i++){
    char *z = sqlite3_mprintf("WITH RECURSIVE g(i) AS (SELECT %d UNION ALL"
        " SELECT i+1 FROM g WHERE i<%d) INSERT OR REPLACE INTO t SELECT i,"
        " printf('%%.*c', 300, 'a'+i%%26) FROM g", i*10, i*10+9);
    th_exec(pD, z);
    sqlite3_free(z);
  }
  fx_exec(f, "SELECT depot_fork(%Q,'app','main','dev')", f->zStore);
  pC = fx_db(f, "app", "dev");
  th_exec(pC, "UPDATE t SET b=upper(b) WHERE a<50");
  sqlite3_close(pC);
  fx_exec(f, "SELECT depot_fork(%Q,'app','main','tmp')", f->zStore);
  pC = fx_db(f, "app", "tmp");
  th_exec(pC, "DELETE FROM t WHERE a%2=0");
  sqlite3_close(pC);
  fx_exec(f, "SELECT depot_drop_branch(%Q,'app','tmp')", f->zStore);
  th_exec(pD, "UPDATE t SET b=b||'x' WHERE a%3=0");
}

START_TEST(test_quota_use_exact_and_cap_holds_through_compaction_and_gc){
  Fx f;
  sqlite3 *pD;
  sqlite3_int64 nUsed, nRows;
  int rc;
  fx_open(&f, "cmp-quota");
  pD = fx_db_args(&f, "app", "main", "&compact_after=0");
  quota_setup(&f, pD);
  assert_counters_exact(f.zStore);
  nUsed = quota_used(&f);
  /* the database is full: compaction and GC still run, charging shard
  ** bytes past the cap and crediting what they free */
  fx_exec(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore, nUsed);
  ck_assert_int_eq(fx_int(&f, "SELECT quota_full_databases FROM"
                          " depot_stats(%Q)", f.zStore), 1);
  fx_compact_gc(&f);
  ck_assert_int_eq(fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)",
                          f.zStore), 0);
  ck_assert_int_gt(store_rows(f.zStore, "key>=x'0230' AND key<x'0231' AND"
                              " length(key)=23 AND substr(key,11,1)=x'40'"), 0);
  ck_assert_int_eq(fx_int(&f, "SELECT json_extract(depot_gc(%Q),"
                          " '$.dropped_branches')", f.zStore), 0);
  assert_counters_exact(f.zStore);
  assert_verify_clean(f.zStore);
  nUsed = quota_used(&f);
  ck_assert_int_eq(fx_int(&f, "SELECT stored_bytes FROM depot_stats(%Q)",
                          f.zStore), nUsed);
  /* a commit past the cap fails and writes nothing */
  fx_exec(&f, "SELECT depot_quota(%Q,'app',%lld)", f.zStore, nUsed+1000);
  nRows = th_int(pD, "SELECT count(*) FROM t");
  rc = th_try(pD, "INSERT INTO t VALUES(100000, hex(randomblob(40000)))", 0);
  ck_assert_int_eq(rc & 0xff, SQLITE_FULL);
  ck_assert_int_eq(th_int(pD, "SELECT count(*) FROM t"), nRows);
  ck_assert_int_eq(quota_used(&f), nUsed);
  assert_counters_exact(f.zStore);
  /* without the cap the same commit goes through */
  fx_exec(&f, "SELECT depot_quota(%Q,'app',NULL)", f.zStore);
  th_exec(pD, "INSERT INTO t VALUES(100000, hex(randomblob(40000)))");
  ck_assert_int_gt(quota_used(&f), nUsed);
  fx_compact_gc(&f);
  assert_counters_exact(f.zStore);
  sqlite3_close(pD);
  fx_close(&f);
}
END_TEST

START_TEST(test_verify_is_silent_on_compacted_store_with_pins_after_gc){
  Fx f;
  sqlite3 *pD, *pC;
  char *zRp, *zEarly;
  int i;
  fx_open(&f, "cmp-vfy");
  pD = fx_db_args(&f, "app", "main", "&compact_after=0");
  quota_setup(&f, pD);
  zEarly = content(pD);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','early')", f.zStore);
  th_exec(pD, "DELETE FROM t WHERE a BETWEEN 20 AND 60");
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','rp')", f.zStore);
  zRp = content(pD);
  th_exec(pD, "UPDATE t SET b='after' WHERE a>100");
  sqlite3_close(pD);
  fx_compact_gc(&f);
  assert_verify_clean(f.zStore);
  fx_exec(&f, "SELECT depot_restore(%Q,'app','main','rp')", f.zStore);
  pD = fx_db_args(&f, "app", "main", "&compact_after=0");
  assert_content(pD, zRp);
  for(i=0; i<3; i++){
    char *z = sqlite3_mprintf("UPDATE t SET b=b||'%d' WHERE a%%7=%d", i, i);
    th_exec(pD, z);
    sqlite3_free(z);
    fx_compact_gc(&f);
    assert_verify_clean(f.zStore);
  }
  ck_assert_int_gt(store_rows(f.zStore, "key>=x'0230' AND key<x'0231' AND"
                              " length(key)=23 AND substr(key,11,1)=x'40'"), 0);
  ck_assert_int_eq(store_rows(f.zStore, "key>=x'0230' AND key<x'0231' AND"
                              " substr(key,11,1)=x'20'"), 0);
  pC = fx_db(&f, "app", "early");
  assert_content(pC, zEarly);
  sqlite3_close(pC);
  assert_fork_reads(&f, "rp", 0, "from-rp", zRp);
  assert_counters_exact(f.zStore);
  assert_shards_sound(f.zStore);
  assert_verify_clean(f.zStore);
  sqlite3_free(zRp);
  sqlite3_free(zEarly);
  sqlite3_close(pD);
  fx_close(&f);
}
END_TEST

/* ---- SIGKILL ---- */

/* A store with history, forks and a restore point; *pzMain, *pzFork get
** the contents the branches must keep. */
static void kill_setup(Fx *f, unsigned seed, char **pzMain, char **pzFork){
  sqlite3 *pD = fx_db(f, "app", "main"), *pP;
  ck_assert_int_eq(sqlite3_open(f->zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  fx_exec(f, "SELECT depot_pitr_policy(%Q, 0, 0)", f->zStore);
  work(pD, pP, &seed, 40);
  fx_exec(f, "SELECT depot_fork(%Q,'app','main','side')", f->zStore);
  *pzFork = content(pP);
  work(pD, pP, &seed, 40);
  fx_exec(f, "SELECT depot_restore_point(%Q,'app','main','r1')", f->zStore);
  work(pD, pP, &seed, 40);
  *pzMain = content(pP);
  sqlite3_close(pD);
  sqlite3_close(pP);
}

static void kill_check(Fx *f, const char *zMain, const char *zFork){
  sqlite3 *db = fx_db(f, "app", "main");
  assert_content(db, zMain);
  assert_integrity(db);
  sqlite3_close(db);
  db = fx_db(f, "app", "side");
  assert_content(db, zFork);
  sqlite3_close(db);
  assert_counters_exact(f->zStore);
  assert_shards_sound(f->zStore);
  assert_verify_clean(f->zStore);
}

START_TEST(test_sigkill_during_compaction_and_gc_leaves_readable_store){
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int nIter = zIters ? atoi(zIters) : 3, i, nMid = 0;
  if( th_under_tsan() ) return;
  for(i=0; i<nIter; i++){
    Fx f;
    char zTag[32], *zMain = 0, *zFork = 0;
    pid_t pid;
    int st;
    sqlite3_int64 nLag;
    fx_open(&f, sqlite3_snprintf(sizeof(zTag), zTag, "cmp-kill-%d", i));
    kill_setup(&f, 11+i, &zMain, &zFork);
    pid = fork();
    if( pid==0 ){
      DepotCompactResult r;
      DepotGcResult g;
      char *zErr = 0;
      for(;;){
        depot_compact(f.zStore, 0, 0, &r, &zErr);
        depot_gc(f.zStore, &g, &zErr);
      }
    }
    usleep(2000 + ((unsigned)i*7919u)%60000);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    nLag = fx_int(&f, "SELECT compaction_lag FROM depot_stats(%Q)", f.zStore);
    if( nLag>0 && nLag<121 ) nMid++;
    kill_check(&f, zMain, zFork);
    fx_compact_gc(&f);
    kill_check(&f, zMain, zFork);
    sqlite3_free(zMain);
    sqlite3_free(zFork);
    fx_close(&f);
  }
  (void)nMid;
}
END_TEST

/* ---- injected store failures ---- */

/* Copy file zFrom to zTo byte for byte. */
static void copy_file(const char *zFrom, const char *zTo){
  FILE *in = fopen(zFrom, "rb"), *out = fopen(zTo, "wb");
  char a[65536];
  size_t n;
  ck_assert(in && out);
  while( (n = fread(a, 1, sizeof(a), in))>0 ){
    ck_assert_int_eq(fwrite(a, 1, n, out), n);
  }
  fclose(in);
  fclose(out);
}

/* Run the compaction (bGc 0) or reclaim (bGc 1) of a copy of zTemplate
** with the Nth write or sync failing, for N = 1, 2, ... until a run
** completes without hitting the fault; after each, the copy must read
** zWant with exact counters.  Returns the number of failed runs. */
/* A self-contained copy of the store zFrom (its WAL included) at zTo. */
static void snapshot_store(const char *zFrom, const char *zTo){
  sqlite3 *db = 0;
  char *z = sqlite3_mprintf("VACUUM INTO %Q", zTo);
  unlink(zTo);
  ck_assert_int_eq(sqlite3_open_v2(zFrom, &db, SQLITE_OPEN_READONLY, 0),
                   SQLITE_OK);
  th_exec(db, z);
  sqlite3_close(db);
  sqlite3_free(z);
}

/* Replace the store zStore (and its WAL) by a copy of zTemplate. */
static void restore_store(const char *zTemplate, const char *zStore){
  char *zWal = sqlite3_mprintf("%s-wal", zStore);
  char *zShm = sqlite3_mprintf("%s-shm", zStore);
  unlink(zStore);
  unlink(zWal);
  unlink(zShm);
  copy_file(zTemplate, zStore);
  sqlite3_free(zWal);
  sqlite3_free(zShm);
}

static int fault_rounds(Fx *f, const char *zTemplate, int bGc, int bSync,
                        const char *zWant){
  int n, nFailed = 0;
  for(n=1; n<400; n++){
    char *zErr = 0;
    int rc;
    sqlite3 *db;
    restore_store(zTemplate, f->zStore);
    th_fault_hits = 0;
    if( bSync ) th_fault_syncs = n; else th_fault_writes = n;
    if( bGc ){
      DepotGcResult g;
      rc = depot_gc(f->zStore, &g, &zErr);
    }else{
      DepotCompactResult r;
      rc = depot_compact(f->zStore, 0, 0, &r, &zErr);
    }
    th_fault_writes = th_fault_syncs = 0;
    sqlite3_free(zErr);
    if( rc!=SQLITE_OK ) nFailed++;
    db = fx_db(f, "app", "main");
    assert_content(db, zWant);
    sqlite3_close(db);
    assert_counters_exact(f->zStore);
    if( th_fault_hits==0 ){
      ck_assert_int_eq(rc, SQLITE_OK);
      break;
    }
  }
  /* whatever stopped half way, a later run finishes it */
  fx_compact_gc(f);
  {
    sqlite3 *db = fx_db(f, "app", "main");
    assert_content(db, zWant);
    assert_integrity(db);
    sqlite3_close(db);
  }
  assert_counters_exact(f->zStore);
  assert_shards_sound(f->zStore);
  return nFailed;
}

START_TEST(test_injected_store_failures_at_each_step_leave_data_intact){
  Fx f;
  sqlite3 *pD, *pP;
  unsigned seed = 5;
  char *zWant, *zTemplate, *zTemplate2;
  int nFailed = 0;
  fx_open(&f, "cmp-fault");
  th_fault_vfs();
  zTemplate = sqlite3_mprintf("%s/template.depot", f.zDir);
  zTemplate2 = sqlite3_mprintf("%s/template2.depot", f.zDir);
  pD = fx_db(&f, "app", "main");
  ck_assert_int_eq(sqlite3_open(f.zPlain, &pP), SQLITE_OK);
  th_exec(pD, zSchema);
  th_exec(pP, zSchema);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q, 0, 0)", f.zStore);
  work(pD, pP, &seed, 12);
  fx_exec(&f, "SELECT depot_compact(%Q)", f.zStore);
  work(pD, pP, &seed, 12);
  zWant = content(pP);
  sqlite3_close(pD);
  sqlite3_close(pP);
  snapshot_store(f.zStore, zTemplate);
  nFailed += fault_rounds(&f, zTemplate, 0, 0, zWant);
  nFailed += fault_rounds(&f, zTemplate, 0, 1, zWant);
  /* a template with garbage: compacted, not reclaimed */
  restore_store(zTemplate, f.zStore);
  fx_exec(&f, "SELECT depot_compact(%Q)", f.zStore);
  snapshot_store(f.zStore, zTemplate2);
  nFailed += fault_rounds(&f, zTemplate2, 1, 0, zWant);
  nFailed += fault_rounds(&f, zTemplate2, 1, 1, zWant);
  ck_assert_int_gt(nFailed, 6);
  sqlite3_free(zWant);
  sqlite3_free(zTemplate);
  sqlite3_free(zTemplate2);
  fx_close(&f);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("compact");
  TCase *tc = tcase_create("compact");
  /* on a PostgreSQL store (pg_suite.sh) all but the two tests that write
  ** or copy the store file itself */
  int bFile = getenv("DEPOT_TEST_STORE_URI")==0
           || getenv("DEPOT_TEST_STORE_URI")[0]==0;
  tcase_add_test(tc, test_compact_and_gc_match_plain_file_with_old_reader);
  tcase_add_test(tc, test_compact_and_gc_under_concurrent_writer_and_reader);
  tcase_add_test(tc, test_writer_keeps_reading_its_snapshot_while_store_is_compacted);
  tcase_add_test(tc, test_forks_restore_points_and_retained_times_survive_gc);
  tcase_add_test(tc, test_fork_child_reads_every_page_after_parent_reclaim);
  tcase_add_test(tc, test_gc_removes_dropped_branch_and_credits_bytes);
  tcase_add_test(tc, test_stats_report_lag_and_reclaimable_bytes);
  tcase_add_test(tc, test_background_compaction_runs_past_the_threshold);
  tcase_add_test(tc, test_background_compaction_runs_past_a_byte_threshold);
  tcase_add_test(tc, test_background_compaction_at_fork_keeps_the_childs_commits);
  tcase_add_test(tc, test_compaction_encodes_shards_without_the_store_write_lock);
  tcase_add_test(tc, test_compact_stops_at_the_head_it_started_with);
  tcase_add_test(tc, test_gc_in_batches_with_commits_between);
  tcase_add_test(tc, test_compaction_sweeps_in_batches_with_commits_between);
  tcase_add_test(tc, test_compaction_plans_in_batches_with_commits_between);
  tcase_add_test(tc, test_bad_input_to_compact_and_gc_gives_clear_errors);
  tcase_add_test(tc, test_compaction_functions_are_direct_only);
  if( bFile ){
    tcase_add_test(tc, test_corrupt_shard_is_reported_by_reads_and_verify);
  }
  tcase_add_test(tc,
      test_quota_use_exact_and_cap_holds_through_compaction_and_gc);
  tcase_add_test(tc,
      test_verify_is_silent_on_compacted_store_with_pins_after_gc);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_add_test(tc, test_sigkill_during_compaction_and_gc_leaves_readable_store);
  if( bFile ){
    tcase_add_test(tc,
        test_injected_store_failures_at_each_step_leave_data_intact);
  }
  suite_add_tcase(s, tc);
  return s;
}
