/*
** check_staging.c -- write transactions larger than their budget
** (txn_budget_kb, PRAGMA depot_txn_budget_kb): their pages are staged in
** the store before the commit.  A tiny budget (8 KiB, two 4 KiB pages)
** makes every test transaction stage.  One behaviour per test: results
** equal a plain file's, integrity_check and depot_verify stay clean,
** ROLLBACK and ROLLBACK TO over staged pages, readers (another connection,
** another process) never see staged pages, SIGKILL while staging or
** publishing leaves the last or the new commit and no staged row survives
** the next writer or depot_gc, forks and restore points taken meanwhile
** leave the transaction out, and stored_bytes comes back to what it was.
** A VFS under the store fails or kills the process at each store sync and
** at every few store writes of a staging transaction and its commit; the
** first transaction of a new database stages too.
** With $DEPOT_TEST_STORE_URI (tests/check/pg_suite.sh) the tests up to the
** SIGKILL one run on that PostgreSQL server, in a schema named after their
** directory; the others are about the store file and run without it.
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"
#include "vfs/txbuf.h"
#include "vfs/layout.h"
#include "vfs/vfs_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The integers 1..N as a subquery (column value). */
#define SERIES(N) "(WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL" \
  " SELECT value+1 FROM g WHERE value<" #N ") SELECT value FROM g)"

static void setup_vfs(void){
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
}

/* The store of directory zDir: <zDir>/store.depot, or with
** $DEPOT_TEST_STORE_URI (tests/check/pg_suite.sh) that PostgreSQL server
** in a schema named after zDir. */
static char *store_path(const char *zDir){
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  const char *zBase = strrchr(zDir, '/');
  if( zPg && zPg[0] ){
    return sqlite3_mprintf("%s&schema=%s", zPg, zBase ? zBase+1 : zDir);
  }
  return sqlite3_mprintf("%s/store.depot", zDir);
}

/* The depot URI of the store of zDir with the parameters zParams. */
static char *depot_uri(const char *zDir, const char *zParams){
  char *zStore = store_path(zDir);
  char *zUri;
  if( strncmp(zStore, "postgresql://", 13)==0 ){
    sqlite3_str *s = sqlite3_str_new(0);
    const char *z;
    sqlite3_str_appendf(s, "file:%s/app?vfs=depot&%s&store=", zDir, zParams);
    for(z=zStore; *z; z++){
      if( *z=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *z);
    }
    zUri = sqlite3_str_finish(s);
  }else{
    zUri = sqlite3_mprintf("file:%s?vfs=depot&%s", zStore, zParams);
  }
  sqlite3_free(zStore);
  return zUri;
}

/* Remove the store file of zDir and the directory (a test of many pages
** leaves no store behind). */
static void remove_store(const char *zDir){
  char *zStore = store_path(zDir);
  char *z;
  if( strncmp(zStore, "postgresql://", 13)!=0 ){
    unlink(zStore);
    z = sqlite3_mprintf("%s-wal", zStore);
    unlink(z);
    sqlite3_free(z);
    z = sqlite3_mprintf("%s-shm", zStore);
    unlink(z);
    sqlite3_free(z);
    z = sqlite3_mprintf("%s-lock", zStore);
    unlink(z);
    sqlite3_free(z);
    rmdir(zDir);
  }
  sqlite3_free(zStore);
}

/* Database "app" of the store in zDir, budget of nKb (-1: default). */
/* Background compaction stays off (compact_after=0): a compaction that a
** killed writer left half swept would change stored_bytes at the next GC,
** and these tests measure staging alone. */
static sqlite3 *open_app(const char *zDir, int nKb){
  char *zP = nKb<0 ? sqlite3_mprintf("db=app&compact_after=0")
                   : sqlite3_mprintf("db=app&compact_after=0&txn_budget_kb=%d",
                                     nKb);
  char *zUri = depot_uri(zDir, zP);
  sqlite3 *db;
  setup_vfs();
  db = th_open(zUri);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_free(zUri);
  sqlite3_free(zP);
  return db;
}

static void assert_integrity(sqlite3 *db){
  char *z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
}

/* depot_verify of the whole store finds nothing. */
static void assert_verify(sqlite3 *db, const char *zDir){
  char *zStore = store_path(zDir);
  char *zSql = sqlite3_mprintf("SELECT group_concat(kind||' '||message,"
      " char(10)) FROM depot_verify(%Q)", zStore);
  char *z = th_text(db, zSql);
  ck_assert_msg(z==0, "depot_verify: %s", z ? z : "");
  sqlite3_free(zSql);
  sqlite3_free(zStore);
}

static sqlite3_int64 stored_bytes(sqlite3 *db, const char *zDir){
  char *zStore = store_path(zDir);
  char *zSql = sqlite3_mprintf("SELECT stored_bytes FROM depot_stats(%Q)",
                               zStore);
  sqlite3_int64 n = th_int(db, zSql);
  sqlite3_free(zSql);
  sqlite3_free(zStore);
  return n;
}

/* A page index row of a txid past the head sets bPast. */
typedef struct PastHead PastHead;
struct PastHead { uint64_t iHead; int bPast; };
static int pidx_past_head(void *pArg, const unsigned char *pKey, int nKey,
                          const unsigned char *pVal, int nVal){
  PastHead *x = (PastHead*)pArg;
  (void)pVal; (void)nVal;
  if( nKey==23 && bytes_get64(pKey+15)>x->iHead ){
    x->bPast = 1;
    return 1;
  }
  return 0;
}

/* 1 if branch main of zDb has blob rows, page index rows or STAGE rows
** past its head (staged rows), or STAGE rows at all; with bMayLack, 0 when
** zDb has no branch. */
static int staged_rows_db(const char *zDir, const char *zDb, int bMayLack){
  char *zStore = store_path(zDir);
  StoreSqliteConfig cfg;
  Store *pStore = 0;
  uint64_t iBranch = 0;
  DbHead head;
  int bExists = 0;
  memset(&cfg, 0, sizeof(cfg));
  ck_assert_int_eq(store_open(zStore, &cfg, &pStore, 0), SQLITE_OK);
  ck_assert_int_eq(store_begin(pStore, 0), SQLITE_OK);
  ck_assert_int_eq(depot_db_resolve(pStore, zDb, "main", &iBranch, 0),
                   SQLITE_OK);
  ck_assert(iBranch!=0 || bMayLack);
  if( iBranch ){
    unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
    PastHead x;
    ck_assert_int_eq(depot_db_head(pStore, iBranch, &head, 0), SQLITE_OK);
    ck_assert_int_eq(depot_stage_exists(pStore, iBranch, head.iTxid+1,
                                        &bExists, 0), SQLITE_OK);
    x.iHead = head.iTxid;
    x.bPast = 0;
    ck_assert_int_eq(store_scan(pStore, lo,
        layout_key_br(lo, iBranch, LAYOUT_BR_PIDX), hi,
        layout_key_br(hi, iBranch, LAYOUT_BR_PIDX+1), 0, -1, pidx_past_head,
        &x), SQLITE_OK);
    if( x.bPast ) bExists = 1;
  }
  store_rollback(pStore);
  store_close(pStore);
  sqlite3_free(zStore);
  return bExists;
}

static int staged_rows_of(const char *zDir, int bMayLack){
  return staged_rows_db(zDir, "app", bMayLack);
}

static int staged_rows(const char *zDir){
  return staged_rows_of(zDir, 0);
}

static const char zSchema[] =
  "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, w INT);"
  "CREATE INDEX tw ON t(w);"
  "INSERT INTO t SELECT value, zeroblob(300), value%7 FROM " SERIES(200) "";

/* A transaction of about 1 MiB of pages, bigger than any budget here. */
static const char zBig[] =
  "INSERT INTO t SELECT 1000+value, randomblob(900), value%13"
  " FROM " SERIES(1000) "";

static sqlite3_int64 count_t(sqlite3 *db){
  return th_int(db, "SELECT count(*) FROM t");
}

/* The same large transactions (inserts, updates, deletes, a page rewritten
** after it was staged, a shrink) on a plain file and on a database with a
** tiny budget (8 KiB; 64 KiB, where pages rewritten after they were staged
** stay in memory; 64 KiB staged in parts of two pages, so that one batch
** goes in several store transactions) give the same rows; integrity_check
** and depot_verify are clean. */
START_TEST(test_staging_large_txn_matches_plain_file){
  char *zDir = th_tmpdir("staging-oracle");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *a = th_open(zPlain);
  sqlite3 *b;
  if( _i==2 ) depot_stage_test_part_bytes = 8192;  /* batches of parts */
  b = open_app(zDir, _i ? 64 : 8);   /* 64: rewritten pages stay */
  const char *azStep[] = {
    zSchema,
    "PRAGMA cache_size=5",
    "BEGIN; INSERT INTO t SELECT 1000+value, zeroblob(900)||x'01', value%13"
    " FROM " SERIES(1000) "; UPDATE t SET w=w+1 WHERE k%3=0;"
    " UPDATE t SET v=x'02' WHERE k%5=0; DELETE FROM t WHERE k%11=0; COMMIT",
    "BEGIN; UPDATE t SET v=zeroblob(50) WHERE k>500; DELETE FROM t WHERE"
    " k%2=0; INSERT INTO t VALUES(5000,x'05',1); COMMIT",
    "BEGIN; DELETE FROM t WHERE k>300; COMMIT",
    "VACUUM",
    "BEGIN; INSERT INTO t SELECT 9000+value, zeroblob(2000), 3 FROM"
    " " SERIES(400) "; DELETE FROM t WHERE k>9200; COMMIT",
  };
  int i;
  for(i=0; i<(int)(sizeof(azStep)/sizeof(azStep[0])); i++){
    char *zA = 0, *zB = 0;
    th_exec(a, azStep[i]);
    th_exec(b, azStep[i]);
    zA = th_text(a, "SELECT count(*)||':'||total(w)||':'||"
                    "group_concat(k||hex(v),',') FROM t");
    zB = th_text(b, "SELECT count(*)||':'||total(w)||':'||"
                    "group_concat(k||hex(v),',') FROM t");
    ck_assert_msg(strcmp(zA, zB)==0, "step %d: %s vs %s", i, zA, zB);
    sqlite3_free(zA);
    sqlite3_free(zB);
  }
  ck_assert_int_eq(th_int(a, "PRAGMA page_count"),
                   th_int(b, "PRAGMA page_count"));
  assert_integrity(b);
  assert_verify(b, zDir);
  ck_assert(!staged_rows(zDir));
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* A transaction that stages thousands of pages and then gives most of
** them back (auto_vacuum=FULL: its commit moves pages down and cuts the
** database) unstages more pages than the writer lists at once (the list
** of rows to remove empties as it fills): the same rows and page count as
** a plain file, and integrity_check and depot_verify (the commit's
** checksum) are clean. */
START_TEST(test_staging_cut_of_many_staged_pages_matches_plain_file){
  char *zDir = th_tmpdir("staging-cut");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *a = th_open(zPlain);
  sqlite3 *b = open_app(zDir, 64);
  const char *azStep[] = {
    "PRAGMA auto_vacuum=FULL; PRAGMA cache_size=5",
    zSchema,
    "CREATE TABLE u(k INTEGER PRIMARY KEY, v BLOB);"
    "INSERT INTO u SELECT value, zeroblob(900)||x'03' FROM " SERIES(4000),
    "BEGIN; UPDATE u SET v=zeroblob(800)||x'04' WHERE k%3=0;"
    " INSERT INTO t SELECT 1000+value, zeroblob(900)||x'01', value%13"
    " FROM " SERIES(12000) "; DELETE FROM t WHERE k>1300;"
    " DELETE FROM u WHERE k>500; COMMIT",
  };
  int i;
  for(i=0; i<(int)(sizeof(azStep)/sizeof(azStep[0])); i++){
    char *zA = 0, *zB = 0;
    th_exec(a, azStep[i]);
    th_exec(b, azStep[i]);
    if( i<2 ) continue;
    zA = th_text(a, "SELECT count(*)||':'||total(w)||':'||"
                    "group_concat(k||hex(v),',')||(SELECT group_concat(k||"
                    "hex(v),',') FROM u) FROM t");
    zB = th_text(b, "SELECT count(*)||':'||total(w)||':'||"
                    "group_concat(k||hex(v),',')||(SELECT group_concat(k||"
                    "hex(v),',') FROM u) FROM t");
    ck_assert_msg(zA && zB && strcmp(zA, zB)==0, "step %d", i);
    sqlite3_free(zA);
    sqlite3_free(zB);
  }
  ck_assert_int_eq(th_int(a, "PRAGMA page_count"),
                   th_int(b, "PRAGMA page_count"));
  ck_assert_int_lt(th_int(b, "PRAGMA page_count"), 1000);
  assert_integrity(b);
  assert_verify(b, zDir);
  ck_assert(!staged_rows(zDir));
  sqlite3_close(a);
  sqlite3_close(b);
  unlink(zPlain);
  remove_store(zDir);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* PRAGMA depot_txn_budget_kb reads and sets the connection's budget; the
** URI parameter sets it at open and a bad value is refused. */
START_TEST(test_staging_budget_pragma_and_uri){
  char *zDir = th_tmpdir("staging-pragma");
  sqlite3 *db = open_app(zDir, -1);
  char *zUri;
  sqlite3 *db2 = 0;
  ck_assert_int_eq(th_int(db, "PRAGMA depot_txn_budget_kb"), 32768);
  ck_assert_int_eq(th_int(db, "PRAGMA depot_txn_budget_kb=16"), 16);
  ck_assert_int_eq(th_int(db, "PRAGMA depot_txn_budget_kb"), 16);
  ck_assert_int_ne(th_try(db, "PRAGMA depot_txn_budget_kb=-1", 0), SQLITE_OK);
  sqlite3_close(db);
  db = open_app(zDir, 0);
  ck_assert_int_eq(th_int(db, "PRAGMA depot_txn_budget_kb"), 0);
  sqlite3_close(db);
  zUri = depot_uri(zDir, "db=app&txn_budget_kb=x");
  ck_assert_int_ne(sqlite3_open_v2(zUri, &db2, SQLITE_OPEN_READWRITE
                   |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0)==SQLITE_OK
                   && sqlite3_exec(db2, "PRAGMA user_version", 0, 0, 0)
                      ==SQLITE_OK, 1);
  sqlite3_close(db2);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

/* ROLLBACK of a transaction that staged pages: the rows are as before,
** the staged rows are gone (removed two per store transaction) and
** stored_bytes is what it was. */
START_TEST(test_staging_rollback_leaves_nothing){
  char *zDir = th_tmpdir("staging-rollback");
  sqlite3 *db = open_app(zDir, 8);
  sqlite3_int64 nBytes;
  char *zBefore, *zAfter;
  th_exec(db, zSchema);
  nBytes = stored_bytes(db, zDir);
  zBefore = th_text(db, "SELECT group_concat(k||hex(v),',') FROM t");
  th_exec(db, "PRAGMA cache_size=5; BEGIN");
  th_exec(db, zBig);
  th_exec(db, "UPDATE t SET v=x'01' WHERE k<100");
  ck_assert(staged_rows(zDir));
  ck_assert_int_eq(count_t(db), 1200);
  depot_gc_test_batch = 2;        /* the staged rows go two at a time */
  th_exec(db, "ROLLBACK");
  depot_gc_test_batch = 0;
  ck_assert(!staged_rows(zDir));
  ck_assert_int_eq(count_t(db), 200);
  zAfter = th_text(db, "SELECT group_concat(k||hex(v),',') FROM t");
  ck_assert_str_eq(zBefore, zAfter);
  ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  assert_integrity(db);
  assert_verify(db, zDir);
  sqlite3_close(db);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_free(zDir);
}
END_TEST

/* The pages a transaction stages enter the decoded-page cache as it
** stages them: the writer reads them back from there (the pager's cache
** is 5 pages), and its commit publishes those entries, so a reader of the
** same process decodes none of the transaction's pages. */
START_TEST(test_staging_staged_pages_are_cached){
  char *zDir = th_tmpdir("staging-cached");
  sqlite3 *db = open_app(zDir, 8);
  sqlite3 *r = open_app(zDir, 8);
  int64_t nHit0, nMiss0, nHit1, nMiss1;
  th_exec(db, zSchema);
  th_exec(db, "PRAGMA cache_size=5; BEGIN");
  th_exec(db, zBig);
  ck_assert(staged_rows(zDir));
  depot_cache_counters(&nHit0, &nMiss0);
  ck_assert_int_eq(th_int(db, "SELECT sum(length(v)) FROM t"),
                   200*300 + 1000*900);
  depot_cache_counters(&nHit1, &nMiss1);
  ck_assert_int_eq(nMiss1, nMiss0);
  ck_assert_int_gt(nHit1, nHit0);
  th_exec(db, "COMMIT");
  depot_cache_counters(&nHit0, &nMiss0);
  ck_assert_int_eq(th_int(r, "SELECT sum(length(v)) FROM t"),
                   200*300 + 1000*900);
  depot_cache_counters(&nHit1, &nMiss1);
  ck_assert_int_eq(nMiss1, nMiss0);
  ck_assert_int_gt(nHit1, nHit0);
  assert_integrity(r);
  sqlite3_close(db);
  sqlite3_close(r);
  sqlite3_free(zDir);
}
END_TEST

/* The cache entries of a rolled-back transaction's staged pages go with
** it: the next transaction stages other content as the same txid, reads
** its own back and publishes it. */
START_TEST(test_staging_rolled_back_pages_leave_the_cache){
  char *zDir = th_tmpdir("staging-cache-rollback");
  sqlite3 *db = open_app(zDir, 8);
  sqlite3 *r = open_app(zDir, 8);
  const char *zCount = "SELECT count(*) FROM t WHERE k>1000"
                       " AND v=zeroblob(899)||x'02'";
  th_exec(db, zSchema);
  th_exec(db, "PRAGMA cache_size=5; BEGIN");
  th_exec(db, "INSERT INTO t SELECT 1000+value, zeroblob(899)||x'01',"
              " value%13 FROM " SERIES(1000));
  ck_assert(staged_rows(zDir));
  th_exec(db, "ROLLBACK; BEGIN");
  th_exec(db, "INSERT INTO t SELECT 1000+value, zeroblob(899)||x'02',"
              " value%13 FROM " SERIES(1000));
  ck_assert(staged_rows(zDir));
  ck_assert_int_eq(th_int(db, zCount), 1000);
  th_exec(db, "UPDATE t SET v=zeroblob(899)||x'03' WHERE k%2=0");
  ck_assert_int_eq(th_int(db, zCount), 500);
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(r, zCount), 500);
  ck_assert_int_eq(th_int(r, "SELECT count(*) FROM t"), 1200);
  assert_integrity(r);
  assert_verify(r, zDir);
  sqlite3_close(db);
  sqlite3_close(r);
  sqlite3_free(zDir);
}
END_TEST

/* The page index rows of txid iPidxTxid written per page (pages below
** 4096), through depot_store_test_write. */
static unsigned char aPidxPer[4096];
static uint64_t iPidxTxid;
static void tally_pidx(const void *pKey, int nKey, int nVal){
  const unsigned char *k = (const unsigned char*)pKey;
  uint32_t pgno = 0;
  uint64_t iTxid = 0;
  int i;
  (void)nVal;
  if( pKey==0 || nKey!=23 || k[0]!=0x02 || k[1]!=LAYOUT_P_BR
   || k[10]!=LAYOUT_BR_PIDX ){
    return;
  }
  for(i=11; i<15; i++) pgno = (pgno<<8) | k[i];
  for(i=15; i<23; i++) iTxid = (iTxid<<8) | k[i];
  if( iTxid==iPidxTxid && pgno<4096 && aPidxPer[pgno]<255 ) aPidxPer[pgno]++;
}

/* A page written again while the write buffer holds it (an index page a
** large DELETE keeps rewriting: the pager's cache is 5 pages) stays in
** memory when the buffer is staged, as a page staged before and written
** again does, so the transaction writes almost every page's frame once
** (one page index row of its txid a page). */
START_TEST(test_staging_rewritten_pages_stay_in_memory){
  char *zDir = th_tmpdir("staging-rewritten");
  sqlite3 *db = open_app(zDir, 64);
  char *zStore = store_path(zDir);
  char *zSql = sqlite3_mprintf("SELECT max(txid) FROM depot_commits(%Q,"
                               "'app')", zStore);
  int i, nPage = 0, nTwice = 0;
  th_exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, w INT);"
      " CREATE INDEX tw ON t(w);"
      " INSERT INTO t SELECT value, zeroblob(300), value*7919%2003 FROM "
      SERIES(2000));
  iPidxTxid = (uint64_t)th_int(db, zSql) + 1;
  memset(aPidxPer, 0, sizeof(aPidxPer));
  depot_store_test_write = tally_pidx;
  th_exec(db, "PRAGMA cache_size=5; DELETE FROM t WHERE k%5=0");
  depot_store_test_write = 0;
  for(i=0; i<4096; i++){
    if( aPidxPer[i] ) nPage++;
    if( aPidxPer[i]>1 ) nTwice++;
  }
  ck_assert_int_gt(nPage, 32);            /* more than twice the budget */
  ck_assert_msg(nTwice<=2, "%d of %d pages written twice", nTwice, nPage);
  ck_assert_int_eq(count_t(db), 1600);
  assert_integrity(db);
  assert_verify(db, zDir);
  ck_assert(!staged_rows(zDir));
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* ROLLBACK TO a savepoint taken before pages were staged (and rewritten
** and staged again) gives back the savepoint's pages: the journal's writes
** override the staged versions. */
START_TEST(test_staging_rollback_to_savepoint_over_staged_pages){
  char *zDir = th_tmpdir("staging-savepoint");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *a = th_open(zPlain);
  sqlite3 *b = open_app(zDir, 8);
  static const char zTxn[] =
    "PRAGMA cache_size=5; BEGIN;"
    "INSERT INTO t SELECT 1000+value, zeroblob(800)||x'07', 1 FROM"
    " " SERIES(300) ";"
    "SAVEPOINT s1;"
    "UPDATE t SET v=zeroblob(700)||x'08', w=w+5;"
    "DELETE FROM t WHERE k%3=0;"
    "SAVEPOINT s2;"
    "INSERT INTO t SELECT 5000+value, zeroblob(900), 2 FROM"
    " " SERIES(300) ";"
    "ROLLBACK TO s2;"
    "UPDATE t SET w=-w WHERE k%4=0;"
    "ROLLBACK TO s1;"
    "UPDATE t SET w=w*2 WHERE k%5=0;"
    "RELEASE s1;"
    "COMMIT";
  char *zA, *zB;
  th_exec(a, zSchema);
  th_exec(b, zSchema);
  th_exec(a, zTxn);
  th_exec(b, zTxn);
  zA = th_text(a, "SELECT count(*)||':'||total(w)||':'||"
                  "group_concat(k||hex(v),',') FROM t");
  zB = th_text(b, "SELECT count(*)||':'||total(w)||':'||"
                  "group_concat(k||hex(v),',') FROM t");
  ck_assert_str_eq(zA, zB);
  assert_integrity(b);
  assert_verify(b, zDir);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_free(zA);
  sqlite3_free(zB);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* While a transaction has staged pages, another connection and another
** process read the last commit; after the COMMIT they read the new one. */
START_TEST(test_staging_readers_never_see_staged_pages){
  char *zDir = th_tmpdir("staging-readers");
  sqlite3 *w = open_app(zDir, 8);
  sqlite3 *r;
  const char *azArg[] = { "count", zDir, "200", 0 };
  pid_t pid;
  int st = 0;
  th_exec(w, zSchema);
  r = open_app(zDir, 8);
  th_exec(w, "PRAGMA cache_size=5; BEGIN");
  th_exec(w, zBig);
  ck_assert(staged_rows(zDir));
  ck_assert_int_eq(count_t(r), 200);
  assert_integrity(r);
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  assert_verify(r, zDir);              /* staged rows are no finding */
  th_exec(w, "COMMIT");
  ck_assert_int_eq(count_t(r), 1200);
  azArg[2] = "1200";
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  assert_verify(r, zDir);
  sqlite3_close(r);
  sqlite3_close(w);
  sqlite3_free(zDir);
}
END_TEST

/* A fork and a restore point taken while a transaction has staged pages
** hold the last commit; the transaction's COMMIT lands on main only. */
START_TEST(test_staging_fork_and_restore_point_leave_the_txn_out){
  char *zDir = th_tmpdir("staging-fork");
  char *zStore = store_path(zDir);
  sqlite3 *w = open_app(zDir, 8);
  sqlite3 *o = open_app(zDir, -1);
  sqlite3 *f;
  char *zUri, *zSql;
  th_exec(w, zSchema);
  th_exec(w, "PRAGMA cache_size=5; BEGIN");
  th_exec(w, zBig);
  ck_assert(staged_rows(zDir));
  zSql = sqlite3_mprintf("SELECT depot_fork(%Q,'app','main','dev');"
      "SELECT depot_restore_point(%Q,'app','main','rp1')", zStore, zStore);
  th_exec(o, zSql);
  sqlite3_free(zSql);
  th_exec(w, "COMMIT");
  ck_assert_int_eq(count_t(w), 1200);
  zUri = depot_uri(zDir, "db=app&branch=dev");
  f = th_open(zUri);
  ck_assert_int_eq(count_t(f), 200);
  assert_integrity(f);
  sqlite3_close(f);
  sqlite3_free(zUri);
  zSql = sqlite3_mprintf("SELECT depot_restore(%Q,'app','main','rp1')",
                         zStore);
  sqlite3_close(w);
  th_exec(o, zSql);
  sqlite3_free(zSql);
  sqlite3_close(o);
  o = open_app(zDir, -1);
  ck_assert_int_eq(count_t(o), 200);
  assert_verify(o, zDir);
  sqlite3_close(o);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* A child runs large transactions (each inserting 200 rows of 700 bytes
** with the next keys) in a loop and is killed with SIGKILL at a random moment, while
** staging or while publishing; the database is whole at a commit
** boundary, and the next writer (or depot_gc) leaves no staged row, with
** stored_bytes what the commits account for. */
static void kill_round(const char *zDir, unsigned iSeed, int bGc){
  const char *azArg[] = { "load", zDir, 0 };
  pid_t pid = th_spawn(azArg);
  sqlite3 *db;
  sqlite3_int64 n, nBytes;
  int st = 0;
  struct timespec ts;
  ts.tv_sec = 0;
  ts.tv_sec = (iSeed%5)/3;
  ts.tv_nsec = 50000000L + (long)(iSeed%3)*300000000L;
  nanosleep(&ts, 0);
  kill(pid, SIGKILL);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  db = open_app(zDir, 8);
  assert_integrity(db);
  n = count_t(db);
  ck_assert_msg((n-200)%200==0, "count %lld is no commit boundary", n);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE k>=1000000"),
                   n-200);
  ck_assert_int_eq(th_int(db, "SELECT coalesce(max(k),1000000-1)-999999"
                              " FROM t WHERE k>=1000000"), n-200);
  assert_verify(db, zDir);
  if( getenv("STAGING_DEBUG") ){
    fprintf(stderr, "kill round: %lld commits, staged rows left: %d\n",
            (n-200)/200, staged_rows(zDir));
  }
  nBytes = stored_bytes(db, zDir);
  if( bGc ){
    char *zStore = store_path(zDir);
    char *zSql = sqlite3_mprintf("SELECT depot_gc(%Q)", zStore);
    sqlite3_close(db);
    db = open_app(zDir, 8);
    th_exec(db, zSql);
    sqlite3_free(zSql);
    sqlite3_free(zStore);
  }else{
    th_exec(db, "BEGIN IMMEDIATE; ROLLBACK");   /* a writer open */
  }
  ck_assert(!staged_rows(zDir));
  ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  assert_verify(db, zDir);
  sqlite3_close(db);
}

START_TEST(test_staging_sigkill_leaves_a_commit_and_no_staged_rows){
  char *zDir = th_tmpdir("staging-kill");
  sqlite3 *db = open_app(zDir, 8);
  int i;
  th_exec(db, zSchema);
  sqlite3_close(db);
  for(i=0; i<6; i++) kill_round(zDir, (unsigned)(i*7+_i), (i+_i)%2);
  sqlite3_free(zDir);
}
END_TEST

/* ---- injected store failures and kills at each store write ---- */

/* A VFS over the default one whose Nth write (faultWrites) or Nth sync
** (faultSyncs) fails (bFaultKill 0) or kills the process with SIGKILL
** (bFaultKill 1); 0 = off.  Registered as the default VFS after the depot
** VFS, so the store handles of depot connections go through it. */
static int faultWrites = 0, faultSyncs = 0, faultHits = 0, bFaultKill = 0;
static sqlite3_vfs *pFaultRoot = 0;
typedef struct FaultFile FaultFile;
struct FaultFile { sqlite3_file base; sqlite3_file *pReal; };

static int faultHit(int *pCount){
  if( *pCount>0 && --(*pCount)==0 ){
    if( bFaultKill ) raise(SIGKILL);
    faultHits++;
    return 1;
  }
  return 0;
}
#define REAL(f) (((FaultFile*)(f))->pReal)
static int faultClose(sqlite3_file *f){
  return REAL(f)->pMethods->xClose(REAL(f));
}
static int faultRead(sqlite3_file *f, void *p, int n, sqlite3_int64 o){
  return REAL(f)->pMethods->xRead(REAL(f), p, n, o);
}
static int faultWrite(sqlite3_file *f, const void *p, int n,
                      sqlite3_int64 o){
  if( faultHit(&faultWrites) ) return SQLITE_IOERR_WRITE;
  return REAL(f)->pMethods->xWrite(REAL(f), p, n, o);
}
static int faultTruncate(sqlite3_file *f, sqlite3_int64 n){
  return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int faultSync(sqlite3_file *f, int fl){
  if( faultHit(&faultSyncs) ) return SQLITE_IOERR_FSYNC;
  return REAL(f)->pMethods->xSync(REAL(f), fl);
}
static int faultSize(sqlite3_file *f, sqlite3_int64 *p){
  return REAL(f)->pMethods->xFileSize(REAL(f), p);
}
static int faultLock(sqlite3_file *f, int e){
  return REAL(f)->pMethods->xLock(REAL(f), e);
}
static int faultUnlock(sqlite3_file *f, int e){
  return REAL(f)->pMethods->xUnlock(REAL(f), e);
}
static int faultReserved(sqlite3_file *f, int *p){
  return REAL(f)->pMethods->xCheckReservedLock(REAL(f), p);
}
static int faultFcntl(sqlite3_file *f, int op, void *p){
  return REAL(f)->pMethods->xFileControl(REAL(f), op, p);
}
static int faultSector(sqlite3_file *f){
  return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int faultDevchar(sqlite3_file *f){
  return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int faultShmMap(sqlite3_file *f, int i, int n, int b,
                       void volatile **pp){
  return REAL(f)->pMethods->xShmMap(REAL(f), i, n, b, pp);
}
static int faultShmLock(sqlite3_file *f, int o, int n, int fl){
  return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void faultShmBarrier(sqlite3_file *f){
  REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int faultShmUnmap(sqlite3_file *f, int d){
  return REAL(f)->pMethods->xShmUnmap(REAL(f), d);
}
static const sqlite3_io_methods faultIo = {
  2, faultClose, faultRead, faultWrite, faultTruncate, faultSync, faultSize,
  faultLock, faultUnlock, faultReserved, faultFcntl, faultSector,
  faultDevchar, faultShmMap, faultShmLock, faultShmBarrier, faultShmUnmap,
  0, 0
};
static int faultOpen(sqlite3_vfs *v, const char *z, sqlite3_file *f, int fl,
                     int *pOut){
  FaultFile *p = (FaultFile*)f;
  int rc;
  (void)v;
  p->pReal = (sqlite3_file*)&p[1];
  rc = pFaultRoot->xOpen(pFaultRoot, z, p->pReal, fl, pOut);
  p->base.pMethods = p->pReal->pMethods ? &faultIo : 0;
  return rc;
}
static sqlite3_vfs faultVfs;

static void setup_fault_vfs(void){
  if( pFaultRoot ) return;
  setup_vfs();
  pFaultRoot = sqlite3_vfs_find(0);
  faultVfs = *pFaultRoot;
  faultVfs.zName = "faulty-default";
  faultVfs.szOsFile = (int)sizeof(FaultFile) + pFaultRoot->szOsFile;
  faultVfs.xOpen = faultOpen;
  sqlite3_vfs_register(&faultVfs, 1);
}

/* setup_fault_vfs() in a child (which must not use Check), after the
** depot VFS is registered: store handles opened later go through it. */
static void setup_fault_vfs_child(void){
  pFaultRoot = sqlite3_vfs_find(0);
  faultVfs = *pFaultRoot;
  faultVfs.zName = "faulty-default";
  faultVfs.szOsFile = (int)sizeof(FaultFile) + pFaultRoot->szOsFile;
  faultVfs.xOpen = faultOpen;
  sqlite3_vfs_register(&faultVfs, 1);
}

/* The rows of t in "app", 0 when the table does not exist (yet). */
static sqlite3_int64 rows_or_zero(sqlite3 *db){
  if( th_int(db, "SELECT count(*) FROM sqlite_schema WHERE name='t'")==0 ){
    return 0;
  }
  return count_t(db);
}

/* A copy of the store file zDir/store.depot (WAL included) at zTo, and
** back. */
static void store_save(const char *zDir, const char *zTo){
  char *zStore = store_path(zDir);
  char *z = sqlite3_mprintf("VACUUM INTO %Q", zTo);
  sqlite3 *db = 0;
  unlink(zTo);
  ck_assert_int_eq(sqlite3_open_v2(zStore, &db, SQLITE_OPEN_READONLY,
                                   "unix"), SQLITE_OK);
  th_exec(db, z);
  sqlite3_close(db);
  sqlite3_free(z);
  sqlite3_free(zStore);
}

static void store_load(const char *zFrom, const char *zDir){
  char *zStore = store_path(zDir);
  char *zCmd = sqlite3_mprintf("rm -f '%s' '%s-wal' '%s-shm' && cp '%s' '%s'",
                               zStore, zStore, zStore, zFrom, zStore);
  ck_assert_int_eq(system(zCmd), 0);
  sqlite3_free(zCmd);
  sqlite3_free(zStore);
}

/* The transaction of the fault rounds: 60 rows of 900 bytes (15 pages
** or so, several staged parts at a budget of 8 KiB), on a new database
** (bNew: its schema too) or on the 200 rows of zSchema. */
static const char zFaultTxn[] =
  "BEGIN;"
  "CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v BLOB, w INT);"
  "INSERT INTO t SELECT 100000+value, randomblob(900), value FROM"
  " " SERIES(60) ";"
  "UPDATE t SET w=w+1 WHERE k>100030;"
  "COMMIT";

/* After a round: the database is whole at the commit before (nBefore
** rows) or after (nBefore+60); depot_gc leaves no staged row and
** stored_bytes is what the commits account for (nBytes0 before, nBytes1
** after; -1: not known yet, set from this round). */
static void fault_check(const char *zDir, int rc, sqlite3_int64 nBefore,
                        sqlite3_int64 nBytes0, sqlite3_int64 *pnBytes1){
  sqlite3 *db = open_app(zDir, 8);
  char *zStore = store_path(zDir);
  char *zSql = sqlite3_mprintf("SELECT depot_gc(%Q)", zStore);
  sqlite3_int64 n = rows_or_zero(db);
  ck_assert_msg(n==nBefore || n==nBefore+60, "rows %lld", n);
  if( rc==SQLITE_OK ) ck_assert_int_eq(n, nBefore+60);
  assert_integrity(db);
  assert_verify(db, zDir);
  th_exec(db, "BEGIN IMMEDIATE; ROLLBACK");   /* the next writer ... */
  ck_assert(!staged_rows_of(zDir, 1));
  assert_verify(db, zDir);
  th_exec(db, zSql);                          /* ... and depot_gc */
  ck_assert(!staged_rows_of(zDir, 1));
  if( n==nBefore ){
    ck_assert_int_eq(stored_bytes(db, zDir), nBytes0);
  }else if( *pnBytes1<0 ){
    *pnBytes1 = stored_bytes(db, zDir);
  }else{
    ck_assert_int_eq(stored_bytes(db, zDir), *pnBytes1);
  }
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zStore);
}

/* A store of "app" with zSchema (bNew 0) or with no database "app" yet
** (bNew 1: a database "other" only), saved at zTemplate; its row count. */
static sqlite3_int64 fault_template(const char *zDir, const char *zTemplate,
                                    int bNew){
  sqlite3 *db;
  setup_vfs();
  if( bNew ){
    char *zUri = sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=other",
                                 zDir);
    db = th_open(zUri);
    th_exec(db, "CREATE TABLE o(x); INSERT INTO o VALUES(1)");
    sqlite3_free(zUri);
  }else{
    db = open_app(zDir, 8);
    th_exec(db, zSchema);
  }
  sqlite3_close(db);
  store_save(zDir, zTemplate);
  return bNew ? 0 : 200;
}

/* The Nth store sync (N = 1, 2, ...: each store transaction of the
** staging and of the commit) or write (N = 1, 8, 15, ...), until a round
** passes without the fault, fails while a transaction stages its pages and publishes
** them: SQLite's COMMIT fails or succeeds, the database is at one commit
** or the other, and no staged row survives the next writer or depot_gc.
** _i: 0 an existing database, 1 a new one (its first transaction
** stages). */
START_TEST(test_staging_injected_failures_at_each_store_write){
  char *zDir = th_tmpdir("staging-fault");
  char *zTemplate = sqlite3_mprintf("%s/template.depot", zDir);
  sqlite3_int64 nBefore = fault_template(zDir, zTemplate, _i);
  sqlite3_int64 nBytes0, nBytes1 = -1;
  int bSync, nFailed = 0;
  sqlite3 *db;
  store_load(zTemplate, zDir);
  db = open_app(zDir, 8);
  nBytes0 = stored_bytes(db, zDir);
  sqlite3_close(db);
  setup_fault_vfs();
  for(bSync=0; bSync<2; bSync++){
    int n;
    for(n=1; n<1000; n+=(bSync ? 1 : 7)){
      int rc;
      store_load(zTemplate, zDir);
      db = open_app(zDir, 8);
      th_exec(db, "PRAGMA cache_size=5");
      faultHits = 0;
      if( bSync ) faultSyncs = n; else faultWrites = n;
      rc = sqlite3_exec(db, zFaultTxn, 0, 0, 0);
      faultWrites = faultSyncs = 0;
      if( rc!=SQLITE_OK ){
        nFailed++;
        sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
      }
      sqlite3_close(db);
      fault_check(zDir, rc, nBefore, nBytes0, &nBytes1);
      if( faultHits==0 ){
        ck_assert_int_eq(rc, SQLITE_OK);
        break;
      }
    }
    ck_assert_int_lt(n, 1000);
  }
  if( getenv("STAGING_DEBUG") ) fprintf(stderr, "fault rounds failed: %d\n", nFailed);
  ck_assert_int_gt(nFailed, 10);
  sqlite3_free(zTemplate);
  sqlite3_free(zDir);
}
END_TEST

/* A child runs the transaction of the fault rounds and is killed with
** SIGKILL at its Nth store sync (N = 1, 2, ..., until a child finishes)
** and, between those rounds, at its 10th, 20th, ... store write:
** after each kill the database is at one commit or the other, and the
** next writer leaves no staged row (nor does depot_gc after it). */
START_TEST(test_staging_sigkill_at_each_store_write){
  char *zDir = th_tmpdir("staging-killpoint");
  char *zTemplate = sqlite3_mprintf("%s/template.depot", zDir);
  sqlite3_int64 nBefore = fault_template(zDir, zTemplate, _i);
  sqlite3_int64 nBytes0, nBytes1 = -1;
  sqlite3 *db;
  int n, nKilled = 0;
  store_load(zTemplate, zDir);
  db = open_app(zDir, 8);
  nBytes0 = stored_bytes(db, zDir);
  sqlite3_close(db);
  for(n=1; n<2000; n++){
    char zN[16];
    const char *azArg[] = { "killat", zDir, zN, 0 };
    int st = 0;
    pid_t pid;
    store_load(zTemplate, zDir);
    /* odd N: the (N+1)/2th sync; even N: the (5N)th write */
    snprintf(zN, sizeof(zN), "%d", n%2 ? (n+1)/2 : -5*n);
    pid = th_spawn(azArg);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    if( WIFSIGNALED(st) ){
      ck_assert_int_eq(WTERMSIG(st), SIGKILL);
      nKilled++;
      fault_check(zDir, SQLITE_ERROR, nBefore, nBytes0, &nBytes1);
    }else{
      ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child %d", st);
      fault_check(zDir, SQLITE_OK, nBefore, nBytes0, &nBytes1);
      if( n%2 ) break;             /* past the last sync */
    }
  }
  ck_assert_int_lt(n, 2000);
  if( getenv("STAGING_DEBUG") ) fprintf(stderr, "kill rounds: %d\n", nKilled);
  ck_assert_int_gt(nKilled, 5);
  sqlite3_free(zTemplate);
  sqlite3_free(zDir);
}
END_TEST

/* The first transaction of a new database stages its pages too (its
** branch is created first, empty): a ROLLBACK leaves the database empty,
** stored_bytes never counts the staged rows, and the COMMIT gives the
** rows of a plain file. */
START_TEST(test_staging_first_transaction_of_a_new_database){
  char *zDir = th_tmpdir("staging-new");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *a = th_open(zPlain);
  sqlite3 *o = open_app(zDir, -1);
  sqlite3 *b;
  sqlite3_int64 nBytes;
  char *zA, *zB;
  char *zUri = sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=fresh"
                               "&txn_budget_kb=8", zDir);
  th_exec(o, "CREATE TABLE x(y)");
  nBytes = stored_bytes(o, zDir);
  b = th_open(zUri);
  th_exec(b, "PRAGMA cache_size=5");
  th_exec(b, "BEGIN; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, w INT)");
  th_exec(b, zBig);
  ck_assert_int_eq(stored_bytes(o, zDir), nBytes);
  th_exec(b, "ROLLBACK");
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM sqlite_schema"), 0);
  ck_assert_int_eq(stored_bytes(o, zDir), nBytes);
  th_exec(b, "BEGIN; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, w INT)");
  th_exec(a, "BEGIN; CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB, w INT)");
  th_exec(b, "INSERT INTO t SELECT value, zeroblob(900)||value, value%7 FROM"
             " " SERIES(1500) "; UPDATE t SET w=-w WHERE k%3=0; COMMIT");
  th_exec(a, "INSERT INTO t SELECT value, zeroblob(900)||value, value%7 FROM"
             " " SERIES(1500) "; UPDATE t SET w=-w WHERE k%3=0; COMMIT");
  zA = th_text(a, "SELECT count(*)||':'||total(w)||':'||"
                  "group_concat(k||hex(v),',') FROM t");
  zB = th_text(b, "SELECT count(*)||':'||total(w)||':'||"
                  "group_concat(k||hex(v),',') FROM t");
  ck_assert_str_eq(zA, zB);
  assert_integrity(b);
  assert_verify(b, zDir);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_close(o);
  sqlite3_free(zA);
  sqlite3_free(zB);
  sqlite3_free(zUri);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* The child modes, without Check (no test runs in a child): "count DIR N"
** exits 0 when "app" has N rows in t; "load DIR" commits large
** transactions until it is killed. */
static sqlite3 *child_open(const char *zDir){
  char *zUri = depot_uri(zDir, "db=app&txn_budget_kb=8&compact_after=0");
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( depot_vfs_register()!=SQLITE_OK
   || sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0)
      !=SQLITE_OK ){
    fprintf(stderr, "child: cannot open %s\n", zUri);
    exit(3);
  }
  sqlite3_free(zUri);
  sqlite3_busy_timeout(db, 10000);
  return db;
}

int depot_test_child(int argc, char **argv){
  sqlite3 *db;
  if( argc==3 && strcmp(argv[0], "count")==0 ){
    sqlite3_stmt *pS = 0;
    sqlite3_int64 n = -1;
    db = child_open(argv[1]);
    if( sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &pS, 0)
        ==SQLITE_OK && sqlite3_step(pS)==SQLITE_ROW ){
      n = sqlite3_column_int64(pS, 0);
    }
    sqlite3_finalize(pS);
    sqlite3_close(db);
    if( n!=atoll(argv[2]) ) fprintf(stderr, "child: %lld rows\n", n);
    return n==atoll(argv[2]) ? 0 : 1;
  }
  if( argc==3 && strcmp(argv[0], "killat")==0 ){
    sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
    if( depot_vfs_register()!=SQLITE_OK ) return 3;
    bFaultKill = 1;
    setup_fault_vfs_child();
    db = child_open(argv[1]);
    sqlite3_exec(db, "PRAGMA cache_size=5", 0, 0, 0);
    if( atoi(argv[2])>0 ) faultSyncs = atoi(argv[2]);
    else faultWrites = -atoi(argv[2]);
    if( sqlite3_exec(db, zFaultTxn, 0, 0, 0)!=SQLITE_OK ) return 5;
    sqlite3_close(db);
    return 0;
  }
  if( argc==2 && strcmp(argv[0], "load")==0 ){
    int i;
    db = child_open(argv[1]);
    sqlite3_exec(db, "PRAGMA cache_size=5", 0, 0, 0);
    for(i=0; ; i++){
      char *zErr = 0;
      char *z = sqlite3_mprintf("BEGIN; INSERT INTO t SELECT"
          " (SELECT max(max(k),999999) FROM t)+value,"
          " randomblob(700), 1 FROM " SERIES(200) "; COMMIT");
      if( sqlite3_exec(db, z, 0, 0, &zErr)!=SQLITE_OK ){
        fprintf(stderr, "child: %s\n", zErr);
        return 4;
      }
      sqlite3_free(z);
    }
  }
  return 2;
}

/* Staged rows are never charged: with a quota below what a large
** transaction needs, its pages still stage, its COMMIT fails with
** SQLITE_FULL, and afterwards no staged row is left and stored_bytes and
** the quota's use are what they were. */
START_TEST(test_staging_quota_counts_no_staged_rows){
  char *zDir = th_tmpdir("staging-quota");
  char *zStore = store_path(zDir);
  sqlite3 *db = open_app(zDir, 8);
  sqlite3_int64 nBytes, nUsed;
  char *zSql;
  int rc;
  th_exec(db, zSchema);
  nBytes = stored_bytes(db, zDir);
  zSql = sqlite3_mprintf("SELECT depot_quota(%Q, 'app', %lld)", zStore,
                         nBytes + 50000);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT used_bytes FROM depot_quotas(%Q)", zStore);
  nUsed = th_int(db, zSql);
  th_exec(db, "PRAGMA cache_size=5; BEGIN");
  th_exec(db, zBig);                         /* ~1 MB of random pages */
  ck_assert(staged_rows(zDir));
  ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
  ck_assert_int_eq(rc&0xff, SQLITE_FULL);
  sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
  ck_assert(!staged_rows(zDir));
  ck_assert_int_eq(count_t(db), 200);
  ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  ck_assert_int_eq(th_int(db, zSql), nUsed);
  assert_verify(db, zDir);
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* Progress hook: stop an import once it has copied 97% of its pages. */
static int stop_late(void *pArg, const char *zWhat, int64_t nDone,
                     int64_t nTotal, int64_t nBytes){
  (void)zWhat; (void)nBytes;
  if( nTotal>0 && nDone*100>=nTotal*97 ){
    (*(int*)pArg)++;
    return 1;
  }
  return 0;
}

static int find_imp(void *pArg, const DepotNameInfo *pInfo){
  if( strcmp(pInfo->zDb, "imp")==0 ) (*(int*)pArg)++;
  return 0;
}

/* depot_import of a source larger than the default budget (36 MB, past
** 32 MiB: the import stages, which creates the database first) stopped at
** 97% by the progress hook: the call fails, no database "imp" is left,
** stored_bytes is what it was and no staged row survives depot_gc; the
** import run again stores every row. */
START_TEST(test_staging_interrupted_import_leaves_no_database){
  char *zDir = th_tmpdir("staging-import");
  char *zStore = store_path(zDir);
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'imp')", zSrc,
                               zStore);
  char *zGc = sqlite3_mprintf("SELECT depot_gc(%Q)", zStore);
  sqlite3 *src = th_open(zSrc);
  sqlite3 *db = open_app(zDir, -1);
  sqlite3_int64 nBytes;
  int nStop = 0, nFound = 0, rc;
  th_exec(src, "PRAGMA page_size=4096; CREATE TABLE t(x);"
               "INSERT INTO t SELECT randomblob(16)||zeroblob(3900) FROM"
               " " SERIES(9000) "");
  sqlite3_close(src);
  th_exec(db, "CREATE TABLE x(y)");
  nBytes = stored_bytes(db, zDir);
  depot_progress_set(stop_late, &nStop);
  rc = sqlite3_exec(db, zSql, 0, 0, 0);
  depot_progress_set(0, 0);
  ck_assert_int_eq(nStop, 1);
  ck_assert_int_eq(rc&0xff, SQLITE_INTERRUPT);
  ck_assert_int_eq(depot_list_databases(zStore, "main", find_imp, &nFound,
                                        0), SQLITE_OK);
  ck_assert_int_eq(nFound, 0);
  ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  th_exec(db, zGc);
  ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  assert_verify(db, zDir);
  ck_assert_int_gt(th_int(db, zSql), 9000);
  sqlite3_close(db);
  {
    char *zUri = sqlite3_mprintf("file:%s?vfs=depot&db=imp", zStore);
    db = th_open(zUri);
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 9000);
    sqlite3_close(db);
    sqlite3_free(zUri);
  }
  sqlite3_free(zGc);
  sqlite3_free(zSql);
  sqlite3_free(zSrc);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* Progress hook of a child, at point *pArg: 0 SIGKILL itself at 50% of
** the pages (before the first staged batch), 1 at 95% (after it staged),
** 2 at the report before the last step (the first store write after it,
** in the publishing COMMIT, kills); 3 at 95% makes the next store write
** fail instead (an I/O error, no kill). */
static int kill_at(void *pArg, const char *zWhat, int64_t nDone,
                   int64_t nTotal, int64_t nBytes){
  int ePoint = *(int*)pArg;
  (void)zWhat; (void)nBytes;
  if( nTotal<=0 ) return 0;
  if( ePoint==0 && nDone*100>=nTotal*50 ) raise(SIGKILL);
  if( ePoint==1 && nDone*100>=nTotal*95 ) raise(SIGKILL);
  if( ePoint==2 && nDone+256>=nTotal && nDone<nTotal ){
    bFaultKill = 1;
    faultWrites = 1;
  }
  if( ePoint==3 && nDone*100>=nTotal*95 && faultHits==0 ) faultWrites = 1;
  return 0;
}

/* What is left of database "imp" in the store of zDir: names in
** depot_databases (*pnName), branches in depot_branches (*pnListed) and
** branch records of it in the store, whatever their state (the return). */
static int find_imp_branch(void *pArg, const DepotBranchInfo *pInfo){
  if( strcmp(pInfo->zDb, "imp")==0 ) (*(int*)pArg)++;
  return 0;
}
static int imp_record_row(void *pArg, const unsigned char *pKey, int nKey,
                          const unsigned char *pVal, int nVal){
  BranchRecord rec;
  if( nKey==10 && layout_branch_decode(pVal, nVal, &rec)==SQLITE_OK
   && strcmp(rec.zDb, "imp")==0 ){
    (*(int*)pArg)++;
  }
  return 0;
}
static int imp_trace(const char *zDir, int *pnName, int *pnListed){
  char *zStore = store_path(zDir);
  unsigned char lo[2] = { 0x02, LAYOUT_P_BRANCHES };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BRANCHES+1 };
  StoreSqliteConfig cfg;
  Store *pStore = 0;
  int nRec = 0;
  *pnName = *pnListed = 0;
  ck_assert_int_eq(depot_list_databases(zStore, 0, find_imp, pnName, 0),
                   SQLITE_OK);
  ck_assert_int_eq(depot_list_branches(zStore, 0, find_imp_branch, pnListed,
                                       0), SQLITE_OK);
  memset(&cfg, 0, sizeof(cfg));
  ck_assert_int_eq(store_open(zStore, &cfg, &pStore, 0), SQLITE_OK);
  ck_assert_int_eq(store_begin(pStore, 0), SQLITE_OK);
  ck_assert_int_eq(store_scan(pStore, lo, 2, hi, 2, 0, -1, imp_record_row,
                              &nRec), SQLITE_OK);
  store_rollback(pStore);
  store_close(pStore);
  sqlite3_free(zStore);
  return nRec;
}

/* depot_import of a source past the default budget (36 MB) killed with
** SIGKILL before its first staged batch, after it, and in its publishing
** COMMIT, or failed by an I/O error after it staged (_i 0..3): no
** database "imp" is listed (depot_databases, depot_branches, the
** databases of depot_stats) -- or, killed in the COMMIT after its store
** transaction was written, "imp" is whole -- stored_bytes is what it
** was, depot_gc (in batches of two rows) leaves no row of a half import
** (no branch record of "imp"), the store verifies clean, and the import
** run again stores every row. */
START_TEST(test_staging_killed_import_leaves_no_trace){
  char *zDir = th_tmpdir("staging-import-kill");
  char *zStore = store_path(zDir);
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'imp')", zSrc,
                               zStore);
  char *zGc = sqlite3_mprintf("SELECT depot_gc(%Q)", zStore);
  char *zDbs = sqlite3_mprintf("SELECT databases FROM depot_stats(%Q)",
                               zStore);
  sqlite3 *src = th_open(zSrc);
  sqlite3 *db = open_app(zDir, -1);
  sqlite3_int64 nBytes, nDbs;
  int st = 0, ePoint = _i, nName = 0, nListed = 0, bWhole = 0;
  pid_t pid;
  th_exec(src, "PRAGMA page_size=4096; CREATE TABLE t(x);"
               "INSERT INTO t SELECT randomblob(16)||zeroblob(3900) FROM"
               " " SERIES(9000) "");
  sqlite3_close(src);
  th_exec(db, "CREATE TABLE x(y)");
  nBytes = stored_bytes(db, zDir);
  nDbs = th_int(db, zDbs);
  sqlite3_close(db);
  if( ePoint==3 ){
    int rc;
    db = open_app(zDir, -1);
    setup_fault_vfs();
    faultHits = 0;
    depot_progress_set(kill_at, &ePoint);
    rc = sqlite3_exec(db, zSql, 0, 0, 0);
    depot_progress_set(0, 0);
    faultWrites = 0;
    ck_assert_int_eq(faultHits, 1);
    ck_assert_int_eq(rc&0xff, SQLITE_IOERR);
    sqlite3_close(db);
  }else{
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if( pid==0 ){
      sqlite3 *c = 0;
      if( sqlite3_open(":memory:", &c)!=SQLITE_OK ) _exit(3);
      setup_fault_vfs_child();
      depot_progress_set(kill_at, &ePoint);
      sqlite3_exec(c, zSql, 0, 0, 0);
      _exit(2);                        /* not killed: the test fails */
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL, "status %d", st);
  }
  db = open_app(zDir, -1);
  imp_trace(zDir, &nName, &nListed);
  if( ePoint==2 && nName==1 ){
    bWhole = 1;                        /* the COMMIT was written: whole */
    ck_assert_int_eq(nListed, 1);
    ck_assert_int_eq(th_int(db, zDbs), nDbs+1);
  }else{
    ck_assert_int_eq(nName, 0);
    ck_assert_int_eq(nListed, 0);
    ck_assert_int_eq(th_int(db, zDbs), nDbs);
    ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  }
  depot_gc_test_batch = 2;              /* the rows go in batches */
  th_exec(db, zGc);
  depot_gc_test_batch = 0;
  if( !bWhole ){
    ck_assert_int_eq(imp_trace(zDir, &nName, &nListed), 0);
    ck_assert_int_eq(stored_bytes(db, zDir), nBytes);
  }
  assert_verify(db, zDir);
  if( !bWhole ) ck_assert_int_gt(th_int(db, zSql), 9000);
  sqlite3_close(db);
  {
    char *zUri = sqlite3_mprintf("file:%s?vfs=depot&db=imp", zStore);
    db = th_open(zUri);
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 9000);
    sqlite3_close(db);
    sqlite3_free(zUri);
  }
  ck_assert_int_eq(imp_trace(zDir, &nName, &nListed), 1);
  ck_assert_int_eq(nName, 1);
  sqlite3_free(zDbs);
  sqlite3_free(zGc);
  sqlite3_free(zSql);
  sqlite3_free(zSrc);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* A large transaction that creates a new database and is rolled back
** leaves its unborn branch to the next writer of the name or to depot_gc;
** a connection that kept the name open writes on after depot_gc took the
** name away (the name is read anew, as on a first open). */
START_TEST(test_staging_rolled_back_new_database_is_not_listed){
  char *zDir = th_tmpdir("staging-unborn");
  char *zStore = store_path(zDir);
  char *zUri = sqlite3_mprintf("file:%s?vfs=depot&db=imp&txn_budget_kb=8"
                               "&compact_after=0", zStore);
  char *zGc = sqlite3_mprintf("SELECT depot_gc(%Q)", zStore);
  sqlite3 *db, *o;
  int nName = 0, nListed = 0;
  setup_vfs();
  o = open_app(zDir, -1);
  th_exec(o, "CREATE TABLE x(y)");
  db = th_open(zUri);
  sqlite3_extended_result_codes(db, 1);
  th_exec(db, "PRAGMA cache_size=5; BEGIN; CREATE TABLE t(x);"
              "INSERT INTO t SELECT randomblob(900) FROM " SERIES(300) "");
  ck_assert_int_eq(imp_trace(zDir, &nName, &nListed), 1);   /* staged */
  ck_assert_int_eq(nName+nListed, 0);
  th_exec(db, "ROLLBACK");
  th_exec(o, zGc);
  ck_assert_int_eq(imp_trace(zDir, &nName, &nListed), 0);
  th_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  ck_assert_int_eq(imp_trace(zDir, &nName, &nListed), 1);
  ck_assert_int_eq(nName, 1);
  ck_assert_int_eq(nListed, 1);
  assert_verify(o, zDir);
  sqlite3_close(db);
  sqlite3_close(o);
  sqlite3_free(zGc);
  sqlite3_free(zUri);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* The bytes of structure zName in depot_memory (-1: not listed) and its
** limit (-1: NULL). */
static sqlite3_int64 memory_of(sqlite3 *db, const char *zName,
                               sqlite3_int64 *pnLimit){
  char *zSql = sqlite3_mprintf("SELECT bytes, coalesce(limit_bytes,-1) FROM"
                               " depot_memory WHERE name=%Q", zName);
  sqlite3_stmt *pS = 0;
  sqlite3_int64 n = -1;
  ck_assert_int_eq(sqlite3_prepare_v2(db, zSql, -1, &pS, 0), SQLITE_OK);
  if( sqlite3_step(pS)==SQLITE_ROW ){
    n = sqlite3_column_int64(pS, 0);
    if( pnLimit ) *pnLimit = sqlite3_column_int64(pS, 1);
  }
  sqlite3_finalize(pS);
  sqlite3_free(zSql);
  return n;
}

/* A transaction puts at most a quarter of the decoded-page cache's limit
** of its staged pages there: a bulk transaction larger than the cache
** does not fill it (the rest is read back from the store). */
START_TEST(test_staging_caches_a_quarter_of_the_cache_at_most){
  char *zDir = th_tmpdir("staging-cache-quarter");
  sqlite3 *db = open_app(zDir, 8);
  sqlite3_int64 nLimit = -1, nUsed;
  th_exec(db, zSchema);
  th_exec(db, "PRAGMA depot_cache_kb=256; PRAGMA cache_size=5; BEGIN");
  th_exec(db, zBig);
  ck_assert(staged_rows(zDir));
  nUsed = memory_of(db, "decoded_page_cache", &nLimit);
  ck_assert_int_eq(nLimit, 256*1024);
  ck_assert_int_le(nUsed, nLimit/4*3);    /* the rest: pages read back */
  ck_assert_int_eq(th_int(db, "SELECT sum(length(v)) FROM t"),
                   200*300 + 1000*900);
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT sum(length(v)) FROM t"),
                   200*300 + 1000*900);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* depot_memory lists every structure of the connection: inside a large
** transaction its write buffer stays within the budget (plus one page and
** the slot arrays) while its staged-page map holds one bit a page (in
** steps of 4 KiB), a list of rows to remove and the stream's tail; after
** the COMMIT both are empty; the caches and the read-ahead stay within
** their limits (plus entry overhead); a plain database lists nothing. */
START_TEST(test_staging_memory_listing_bounds_each_structure){
  char *zDir = th_tmpdir("staging-memory");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *db = open_app(zDir, 64);
  sqlite3 *a = th_open(zPlain);
  sqlite3_int64 nLimit = 0, n;
  th_exec(db, zSchema);
  th_exec(db, "PRAGMA cache_size=5; BEGIN");
  th_exec(db, zBig);
  n = memory_of(db, "write_buffer", &nLimit);
  ck_assert_int_eq(nLimit, 64*1024);
  ck_assert_int_le(n, nLimit + 4096 + 64*1024);
  n = memory_of(db, "staged_page_map", &nLimit);
  ck_assert_int_gt(n, 0);
  ck_assert_int_le(n, 65536 + 1024*48);  /* bits, the list, the tail */
  ck_assert_int_eq(nLimit, -1);
  th_exec(db, "COMMIT");
  ck_assert_int_eq(memory_of(db, "write_buffer", 0), 0);
  ck_assert_int_eq(memory_of(db, "staged_page_map", 0), 0);
  th_exec(db, "SELECT count(*) FROM t");
  n = memory_of(db, "decoded_page_cache", &nLimit);
  ck_assert_int_gt(nLimit, 0);
  ck_assert_int_le(n, nLimit + nLimit/4 + 65536);
  n = memory_of(db, "page_map", &nLimit);
  ck_assert_int_le(n, nLimit + 1024);
  n = memory_of(db, "store_connection", &nLimit);
  ck_assert_int_gt(n, 0);
  ck_assert_int_eq(nLimit, 8192*1024);
  ck_assert_int_gt(memory_of(db, "zstd_contexts", 0), 0);
  n = memory_of(db, "readahead", &nLimit);     /* the default, 256 pages */
  ck_assert_int_gt(nLimit, 256*1024);
  ck_assert_int_ge(n, 0);
  ck_assert_int_le(n, nLimit);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM depot_memory"), 8);
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM depot_memory"), 0);
  sqlite3_close(db);
  sqlite3_close(a);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* The staged_page_map bytes inside one transaction of database "app" (of
** 1 KiB pages) in a new store in zDir that inserts nRow rows of 900 bytes
** (about nRow pages, all staged past a 64 KiB budget); the transaction
** commits and the rows are all there. */
static sqlite3_int64 staged_map_bytes(const char *zDir, int nRow){
  sqlite3 *db = open_app(zDir, 64);
  sqlite3_int64 n;
  char *zSql;
  th_exec(db, "PRAGMA page_size=1024");
  th_exec(db, zSchema);
  zSql = sqlite3_mprintf("BEGIN; INSERT INTO t SELECT 1000+value,"
      " randomblob(900), value%%13 FROM (WITH RECURSIVE g(value) AS (SELECT"
      " 1 UNION ALL SELECT value+1 FROM g WHERE value<%d) SELECT value FROM"
      " g); UPDATE t SET w=w+1 WHERE k%%50=0", nRow);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  n = memory_of(db, "staged_page_map", 0);
  th_exec(db, "COMMIT");
  ck_assert_int_eq(count_t(db), 200+nRow);
  ck_assert_int_eq(memory_of(db, "staged_page_map", 0), 0);
  assert_integrity(db);
  ck_assert(!staged_rows(zDir));
  ck_assert_int_gt(th_int(db, "PRAGMA page_count"), nRow);
  sqlite3_close(db);
  remove_store(zDir);
  return n;
}

/* The writer's memory for its staged pages does not grow with the
** transaction: one bit a page (in steps of 4 KiB), the list of rows to
** remove and the stream's tail.  About 2,000 and about 20,000 staged
** pages take the same bytes (a map with an entry a page took about 40
** bytes a page: 800 KB for 20,000). */
START_TEST(test_staging_map_memory_does_not_grow_with_the_txn){
  char *zDir1 = th_tmpdir("staging-mapsize1");
  char *zDir2 = th_tmpdir("staging-mapsize2");
  sqlite3_int64 nSmall = staged_map_bytes(zDir1, 2000);
  sqlite3_int64 nBig = staged_map_bytes(zDir2, 20000);
  ck_assert_int_gt(nSmall, 0);
  ck_assert_int_eq(nBig, nSmall);
  ck_assert_int_le(nBig, 65536 + 4096 + 4*TXSTAGE_GONE);
  sqlite3_free(zDir1);
  sqlite3_free(zDir2);
}
END_TEST

/* ltx_encode_threads() gives the blob ltx_encode() gives, byte for byte,
** at any thread count: 1000 pages, some random, some compressible, some
** zero. */
START_TEST(test_staging_threaded_compression_is_byte_identical){
  enum { N = 1000, SZ = 4096 };
  unsigned char *aData = sqlite3_malloc64((sqlite3_uint64)N*SZ);
  const unsigned char **ap = sqlite3_malloc64(sizeof(void*)*N);
  uint32_t *aPg = sqlite3_malloc64(sizeof(uint32_t)*N);
  LtxFrameRef *aRef0 = sqlite3_malloc64(sizeof(LtxFrameRef)*N);
  LtxFrameRef *aRef = sqlite3_malloc64(sizeof(LtxFrameRef)*N);
  ZSTD_CCtx *pCctx = ZSTD_createCCtx();
  unsigned char *a0 = 0;
  int64_t n0 = 0;
  LtxHeader h;
  static const int aThread[] = { 1, 2, 3, 8, 64 };
  int i, k;
  ck_assert(aData && ap && aPg && aRef0 && aRef && pCctx);
  for(i=0; i<N; i++){
    unsigned char *p = aData + (size_t)i*SZ;
    if( i%3==0 ) sqlite3_randomness(SZ, p);
    else if( i%3==1 ) memset(p, 0, SZ);
    else{ memset(p, i&0xff, SZ); sqlite3_randomness(64, p+i%1000); }
    ap[i] = p;
    aPg[i] = (uint32_t)(i*2+1);
  }
  memset(&h, 0, sizeof(h));
  h.szPage = SZ;
  h.nPage = N*2;
  h.iMinTxid = h.iMaxTxid = 7;
  h.nFrame = N;
  ck_assert_int_eq(ltx_encode(&h, aPg, ap, 42, pCctx, 1, &a0, &n0, aRef0),
                   SQLITE_OK);
  for(k=0; k<(int)(sizeof(aThread)/sizeof(aThread[0])); k++){
    unsigned char *a = 0;
    int64_t n = 0;
    ck_assert_int_eq(ltx_encode_threads(&h, aPg, ap, 42, pCctx, 1,
                     aThread[k], &a, &n, aRef), SQLITE_OK);
    ck_assert_int_eq(n, n0);
    ck_assert_msg(memcmp(a, a0, (size_t)n)==0, "%d threads", aThread[k]);
    for(i=0; i<N; i++){
      ck_assert(aRef[i].pgno==aRef0[i].pgno && aRef[i].nByte==aRef0[i].nByte
                && aRef[i].iOffset==aRef0[i].iOffset
                && aRef[i].iCrc==aRef0[i].iCrc);
    }
    sqlite3_free(a);
  }
  ZSTD_freeCCtx(pCctx);
  sqlite3_free(a0);
  sqlite3_free(aData);
  sqlite3_free(ap);
  sqlite3_free(aPg);
  sqlite3_free(aRef0);
  sqlite3_free(aRef);
}
END_TEST

/* threads=N: the same large transaction in two new stores, at 0 and 4
** compression threads, stores blobs of the same sizes and checksums; a
** bad value is refused.  PRAGMA depot_threads reads and sets it. */
START_TEST(test_staging_threads_parameter){
  char *zDir = th_tmpdir("staging-threads");
  const char *azDb[] = { "t0", "t4" };
  char *azList[2];
  sqlite3 *db = 0;
  char *zUri;
  int i;
  setup_vfs();
  for(i=0; i<2; i++){
    char *zSql;
    zUri = sqlite3_mprintf("file:%s/%s.depot?vfs=depot&db=app"
                           "&txn_budget_kb=64&threads=%d", zDir, azDb[i],
                           i*4);
    db = th_open(zUri);
    sqlite3_free(zUri);
    ck_assert_int_eq(th_int(db, "PRAGMA depot_threads"), i*4);
    if( i==0 ){                         /* the pragma sets it too */
      ck_assert_int_eq(th_int(db, "PRAGMA depot_threads=3"), 3);
      ck_assert_int_eq(th_int(db, "PRAGMA depot_threads"), 3);
      ck_assert_int_ne(sqlite3_exec(db, "PRAGMA depot_threads=65", 0, 0, 0),
                       SQLITE_OK);
      ck_assert_int_ne(sqlite3_exec(db, "PRAGMA depot_threads='x'", 0, 0, 0),
                       SQLITE_OK);
      ck_assert_int_eq(th_int(db, "PRAGMA depot_threads=0"), 0);
    }
    th_exec(db, "PRAGMA cache_size=5; CREATE TABLE t(k INTEGER PRIMARY KEY,"
                " v BLOB); BEGIN; INSERT INTO t SELECT value,"
                " printf('%.*c', 900, char(65+value%26)) FROM " SERIES(3000) ";"
                " COMMIT");
    zSql = sqlite3_mprintf("SELECT group_concat(bytes_stored||':'||checksum)"
        " FROM depot_commits('%q/%q.depot', 'app')", zDir, azDb[i]);
    azList[i] = th_text(db, zSql);
    sqlite3_free(zSql);
    sqlite3_close(db);
  }
  ck_assert_str_eq(azList[0], azList[1]);
  sqlite3_free(azList[0]);
  sqlite3_free(azList[1]);
  zUri = sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=x&threads=65",
                         zDir);
  db = 0;
  ck_assert_int_ne(sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE
                   |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0)==SQLITE_OK
                   && sqlite3_exec(db, "PRAGMA user_version", 0, 0, 0)
                      ==SQLITE_OK, 1);
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

/* txbuf_drop() keeps every other page findable (deletion from the probe
** runs), and the staged-page map (a bitmap) marks, unmarks and walks
** pages, lists unstaged pages whose rows are still in the store, and
** spends one bit a page up to the highest page staged. */
START_TEST(test_staging_buffer_and_map_drop_pages){
  TxBuf b;
  TxStage m;
  unsigned char a[16];
  uint32_t i, n;
  memset(&b, 0, sizeof(b));
  memset(&m, 0, sizeof(m));
  for(i=1; i<=3000; i++){
    memset(a, (int)(i&0xff), sizeof(a));
    ck_assert_int_eq(txbuf_put(&b, i, a, sizeof(a)), SQLITE_OK);
    ck_assert_int_eq(txstage_set(&m, i), SQLITE_OK);
  }
  for(i=1; i<=3000; i+=3){
    txbuf_drop(&b, i);
    ck_assert_int_eq(txstage_unset(&m, i, i<2000), SQLITE_OK);
  }
  ck_assert_int_eq(m.nGone, 667);
  for(i=1; i<=3000; i++){
    unsigned char *p = txbuf_get(&b, i);
    if( i%3==1 ){
      ck_assert_ptr_null(p);
      ck_assert(!txstage_has(&m, i));
    }else{
      ck_assert_ptr_nonnull(p);
      ck_assert_int_eq(p[0], (int)(i&0xff));
      ck_assert(txstage_has(&m, i));
    }
  }
  ck_assert_int_eq(b.nUsed, 2000);
  /* the walk a truncation makes: every staged page above 1500, in order */
  for(i=1500, n=0; (i = txstage_next(&m, i))!=0; n++){
    ck_assert_int_ne(i%3, 1);
    ck_assert_int_gt(i, 1500);
  }
  ck_assert_int_eq(n, 1000);
  ck_assert_int_eq(txstage_next(&m, 3000), 0);
  ck_assert(!txstage_has(&m, 0));
  ck_assert(!txstage_has(&m, 4000000));
  /* 4 KiB of bits (32 Ki pages), then one more step, and the gone list */
  ck_assert_int_eq(txstage_bytes(&m), 4096 + 4*TXSTAGE_GONE);
  ck_assert_int_eq(txstage_set(&m, 40000), SQLITE_OK);
  ck_assert_int_eq(txstage_bytes(&m), 8192 + 4*TXSTAGE_GONE);
  ck_assert_int_eq(txstage_next(&m, 3000), 40000);
  ck_assert_int_eq(txstage_set(&m, 1000000), SQLITE_OK);   /* 4 GiB */
  ck_assert(txstage_has(&m, 1000000));
  ck_assert_int_eq(txstage_next(&m, 40000), 1000000);
  ck_assert_int_le(txstage_bytes(&m), 128*1024 + 4*TXSTAGE_GONE);
  txbuf_clear(&b);
  txstage_clear(&m);
  ck_assert_int_eq(txstage_bytes(&m), 0);
}
END_TEST

/* What store_put() is asked to write (vfs/vfs_test.h), per store
** transaction: the current one's rows, the publishing commit's (the store
** transaction that writes a COMMITS row) once it commits, and every
** DELTA chunk row of the staged txid, to find one written twice. */
typedef struct PutTally PutTally;
struct PutTally {
  int64_t nRow, nByte, nDelta, nDeltaByte, nPidx;
  int bCommitRow;
};
static PutTally tallyCur, tallyPub;
static int64_t nTallyPidxAll;         /* page index rows of every txn */
static uint64_t iTallyTxid;           /* the staged txid */
static unsigned char aTallyChunk[4096];
static int nTallyTwice;

static void tally_write(const void *pKey, int nKey, int nVal){
  const unsigned char *k = (const unsigned char*)pKey;
  if( pKey==0 ){                       /* a store transaction committed */
    if( tallyCur.bCommitRow ) tallyPub = tallyCur;
    memset(&tallyCur, 0, sizeof(tallyCur));
    return;
  }
  tallyCur.nRow++;
  tallyCur.nByte += nKey + nVal;
  if( nKey==23 && k[0]==0x02 && k[1]==LAYOUT_P_BR ){
    uint64_t iTxid = 0;
    uint32_t iChunk = 0;
    int i;
    if( k[10]==LAYOUT_BR_DELTA ){
      for(i=11; i<19; i++) iTxid = (iTxid<<8) | k[i];
      for(i=19; i<23; i++) iChunk = (iChunk<<8) | k[i];
      tallyCur.nDelta++;
      tallyCur.nDeltaByte += nVal;
      if( iTxid==iTallyTxid && iChunk<sizeof(aTallyChunk) ){
        if( aTallyChunk[iChunk] ) nTallyTwice++;
        aTallyChunk[iChunk] = 1;
      }
    }else if( k[10]==LAYOUT_BR_PIDX ){
      tallyCur.nPidx++;
      nTallyPidxAll++;
    }
  }
  if( nKey>=11 && k[0]==0x02 && k[1]==LAYOUT_P_BR
   && k[10]==LAYOUT_BR_COMMITS ){
    tallyCur.bCommitRow = 1;
  }
}

/* The publishing COMMIT (the store transaction that writes the COMMITS
** row) of one transaction of database "app" in a new store in zDir that
** inserts nRow rows of 900 bytes (about nRow/4 pages) with a budget of
** 64 KiB, tallied in tallyPub; nTallyPidxAll counts the page index rows
** of every store transaction, staging included. */
static void tally_big_txn(const char *zDir, int nRow){
  char *zUri = depot_uri(zDir, "db=app&txn_budget_kb=64&compact_after=0");
  char *zStore, *zSql;
  sqlite3 *db;
  setup_vfs();
  db = th_open(zUri);
  th_exec(db, zSchema);
  zStore = store_path(zDir);
  zSql = sqlite3_mprintf("SELECT max(txid) FROM depot_commits(%Q,'app')",
                         zStore);
  iTallyTxid = (uint64_t)th_int(db, zSql) + 1;
  sqlite3_free(zSql);
  sqlite3_free(zStore);
  memset(&tallyCur, 0, sizeof(tallyCur));
  memset(&tallyPub, 0, sizeof(tallyPub));
  memset(aTallyChunk, 0, sizeof(aTallyChunk));
  nTallyTwice = 0;
  nTallyPidxAll = 0;
  depot_store_test_write = tally_write;
  zSql = sqlite3_mprintf("BEGIN; INSERT INTO t SELECT 1000+value,"
      " randomblob(900), value%%13 FROM (WITH RECURSIVE g(value) AS (SELECT"
      " 1 UNION ALL SELECT value+1 FROM g WHERE value<%d) SELECT value FROM"
      " g); UPDATE t SET w=w+1 WHERE k%%50=0; COMMIT", nRow);
  th_exec(db, zSql);
  depot_store_test_write = 0;
  sqlite3_free(zSql);
  ck_assert_int_eq(nTallyTwice, 0);
  ck_assert_int_eq(count_t(db), 200+nRow);
  assert_integrity(db);
  assert_verify(db, zDir);
  ck_assert(!staged_rows(zDir));
  sqlite3_close(db);
  sqlite3_free(zUri);
}

/* The publishing COMMIT of a transaction that staged N pages is one store
** transaction of bounded size: the pages still in memory (at most the
** budget: their blob bytes and page index rows), the stream's unwritten
** tail (less than one chunk row) and a few fixed rows.  The staged pages'
** page index rows were written as they were staged, so the commit's rows
** do not grow with N: about 200 pages and about 2,000 pages give commits
** under the same bound.  No chunk row of the staged blob is written twice,
** during staging or by the commit. */
START_TEST(test_staging_publishing_commit_is_bounded){
  char *zDir1 = th_tmpdir("staging-pubsize1");
  char *zDir2 = th_tmpdir("staging-pubsize2");
  int64_t nBudget = 64*1024, nSz = 65536, nFixed = 4096;
  int64_t nPidxMax = 2*nBudget/4096 + 8;           /* 4 KiB pages */
  int64_t nRowMax = nPidxMax + (nBudget+nSz)/nSz + 1 + 16;
  PutTally small, big;
  int64_t nSmallPages, nBigPages;
  tally_big_txn(zDir1, 800);
  small = tallyPub;
  nSmallPages = nTallyPidxAll;
  tally_big_txn(zDir2, 8000);
  big = tallyPub;
  nBigPages = nTallyPidxAll;
  if( getenv("STAGING_DEBUG") ){
    fprintf(stderr, "publishing commits: %lld rows (%lld page index) after"
            " %lld pages, %lld rows (%lld) after %lld pages\n",
            (long long)small.nRow, (long long)small.nPidx,
            (long long)nSmallPages, (long long)big.nRow,
            (long long)big.nPidx, (long long)nBigPages);
  }
  ck_assert_msg(nSmallPages>=150 && nBigPages>=1500, "indexed %lld and %lld"
                " pages", (long long)nSmallPages, (long long)nBigPages);
  ck_assert_msg(small.nRow<=nRowMax && big.nRow<=nRowMax, "the commits"
                " wrote %lld and %lld rows (bound %lld)",
                (long long)small.nRow, (long long)big.nRow,
                (long long)nRowMax);
  ck_assert_msg(small.nPidx<=nPidxMax && big.nPidx<=nPidxMax, "the commits"
                " wrote %lld and %lld page index rows",
                (long long)small.nPidx, (long long)big.nPidx);
  ck_assert_msg(big.nDeltaByte <= nBudget + nBudget/8 + nSz,
                "the commit wrote %lld blob bytes",
                (long long)big.nDeltaByte);
  ck_assert_msg(big.nByte - big.nDeltaByte <= 48*big.nPidx + nFixed,
                "%lld bytes of rows for %lld pages",
                (long long)(big.nByte - big.nDeltaByte),
                (long long)big.nPidx);
  sqlite3_free(zDir1);
  sqlite3_free(zDir2);
}
END_TEST

/* Stage, as a writer that then crashed would leave it, one page of
** garbage as page pgno of txid head+1 of branch main of "app" (chunk,
** page index and STAGE rows, no commit). */
static void stage_garbage(const char *zDir, uint32_t pgno, uint32_t szPage){
  char *zStore = store_path(zDir);
  StoreSqliteConfig cfg;
  Store *pStore = 0;
  DepotStageStream st;
  uint64_t iBranch = 0;
  DbHead head;
  LtxHeader h;
  LtxFrameRef aRef[1];
  unsigned char *aPage = sqlite3_malloc(szPage);
  const unsigned char *ap[1];
  unsigned char *aBlob = 0;
  int64_t nBlob = 0;
  ZSTD_CCtx *pCctx = ZSTD_createCCtx();
  memset(&cfg, 0, sizeof(cfg));
  memset(&st, 0, sizeof(st));
  memset(aPage, 0x5a, szPage);
  ap[0] = aPage;
  ck_assert_int_eq(store_open(zStore, &cfg, &pStore, 0), SQLITE_OK);
  ck_assert_int_eq(store_begin(pStore, 0), SQLITE_OK);
  ck_assert_int_eq(depot_db_resolve(pStore, "app", "main", &iBranch, 0),
                   SQLITE_OK);
  ck_assert_int_eq(depot_db_head(pStore, iBranch, &head, 0), SQLITE_OK);
  store_rollback(pStore);
  memset(&h, 0, sizeof(h));
  h.szPage = szPage;
  h.nPage = head.nPage;
  h.iMinTxid = h.iMaxTxid = head.iTxid+1;
  h.nFrame = 1;
  ck_assert_int_eq(ltx_encode(&h, &pgno, ap, 0, pCctx, 3, &aBlob, &nBlob,
                              aRef), SQLITE_OK);
  ck_assert_int_eq(depot_stage_begin(&st, iBranch, head.iTxid+1,
                   (uint32_t)store_max_value(pStore)), SQLITE_OK);
  ck_assert_int_eq(depot_stage_append(pStore, &st, aBlob, nBlob, 1, aRef, 0),
                   SQLITE_OK);
  depot_stage_reset(&st);
  store_close(pStore);
  ZSTD_freeCCtx(pCctx);
  sqlite3_free(aBlob);
  sqlite3_free(aPage);
  sqlite3_free(zStore);
}

/* A writer that already removed its branch's leftovers, whose next
** transaction stages nothing, finds the staged rows another writer left
** in the meantime (here made by hand: a page of garbage staged as the
** next txid) at its COMMIT: it removes them and commits without them. */
START_TEST(test_staging_commit_removes_leftovers_of_its_txid){
  char *zDir = th_tmpdir("staging-leftover");
  sqlite3 *db = open_app(zDir, -1);
  sqlite3_int64 nBytes, nPage;
  char *zBefore, *zAfter;
  th_exec(db, zSchema);
  th_exec(db, "UPDATE t SET v=zeroblob(300)||x'02' WHERE k=200");
  nPage = th_int(db, "PRAGMA page_count");
  zBefore = th_text(db, "SELECT group_concat(k||hex(v)||w,',') FROM t"
                        " WHERE k>1");
  nBytes = stored_bytes(db, zDir);
  stage_garbage(zDir, (uint32_t)nPage, 4096);
  ck_assert(staged_rows(zDir));
  th_exec(db, "UPDATE t SET v=zeroblob(300)||x'01' WHERE k=1");
  ck_assert(!staged_rows(zDir));
  zAfter = th_text(db, "SELECT group_concat(k||hex(v)||w,',') FROM t"
                       " WHERE k>1");
  ck_assert_str_eq(zBefore, zAfter);
  ck_assert_int_gt(stored_bytes(db, zDir), nBytes);
  assert_integrity(db);
  assert_verify(db, zDir);
  sqlite3_close(db);
  db = open_app(zDir, -1);
  assert_integrity(db);
  ck_assert_int_eq(count_t(db), 200);
  sqlite3_close(db);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_free(zDir);
}
END_TEST

/* Rows of t and u (if it exists) as one string. */
static char *rows_tu(sqlite3 *db){
  return th_text(db, "SELECT (SELECT count(*)||':'||total(w)||':'||"
      "group_concat(k||hex(v),',') FROM t)||'/'||ifnull((SELECT"
      " group_concat(k||hex(v),',') FROM u),'')");
}

/* ROLLBACK TO a savepoint that opened the transaction, after it rewrote
** every row of a table and staged its pages (more pages than the writer
** lists for removal at once), gives each of those pages back as the
** snapshot has it, so the transaction unstages them all: the commit after
** it adds one row, and the rows, page count, integrity_check, depot_verify
** (the commit's checksum) are as on a plain file; no staged row stays. */
START_TEST(test_staging_rollback_to_the_start_unstages_every_page){
  char *zDir = th_tmpdir("staging-sp-start");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *a = th_open(zPlain);
  sqlite3 *b = open_app(zDir, _i ? 64 : 8);
  const char *azStep[] = {
    "PRAGMA cache_size=5",
    zSchema,
    "CREATE TABLE u(k INTEGER PRIMARY KEY, v BLOB);"
    "INSERT INTO u SELECT value, zeroblob(900)||x'03' FROM " SERIES(6000),
    "BEGIN; SAVEPOINT s; UPDATE u SET v=zeroblob(900)||x'04';"
    " INSERT INTO u SELECT 9000+value, zeroblob(900) FROM " SERIES(500) ";"
    " ROLLBACK TO s; INSERT INTO u VALUES(20000, x'05'); RELEASE s; COMMIT",
  };
  char *zA, *zB;
  int i;
  for(i=0; i<(int)(sizeof(azStep)/sizeof(azStep[0])); i++){
    th_exec(a, azStep[i]);
    th_exec(b, azStep[i]);
  }
  zA = rows_tu(a);
  zB = rows_tu(b);
  ck_assert_msg(zA && zB && strcmp(zA, zB)==0, "rows differ");
  ck_assert_int_eq(th_int(a, "PRAGMA page_count"),
                   th_int(b, "PRAGMA page_count"));
  assert_integrity(b);
  assert_verify(b, zDir);
  ck_assert(!staged_rows(zDir));
  sqlite3_close(a);
  sqlite3_close(b);
  unlink(zPlain);
  remove_store(zDir);
  sqlite3_free(zA);
  sqlite3_free(zB);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* A COMMIT of a transaction with staged pages (some of them written back
** as the snapshot has them) that finds the store's write lock held by
** another connection fails with SQLITE_BUSY and keeps the transaction
** open; COMMIT again once the lock is free publishes it: the rows as on a
** plain file, integrity_check and depot_verify (the commit's checksum)
** clean, no staged row left. */
START_TEST(test_staging_busy_commit_is_retried){
  char *zDir = th_tmpdir("staging-busy");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  char *zStore = store_path(zDir);
  sqlite3 *a = th_open(zPlain);
  sqlite3 *b = open_app(zDir, 8);
  sqlite3 *s;
  static const char zTxn[] =
    "PRAGMA cache_size=5; BEGIN; UPDATE t SET w=w+1;"
    "INSERT INTO t SELECT 1000+value, zeroblob(900)||x'01', value%13"
    " FROM " SERIES(300) "; UPDATE t SET w=w-1 WHERE k<=200";
  char *zA, *zB;
  int rc;
  th_exec(a, zSchema);
  th_exec(b, zSchema);
  th_exec(a, zTxn);
  th_exec(b, zTxn);
  th_exec(a, "COMMIT");
  s = th_open(zStore);
  th_exec(s, "BEGIN IMMEDIATE");
  rc = th_try(b, "COMMIT", 0);
  ck_assert_int_eq(rc & 0xff, SQLITE_BUSY);
  ck_assert_int_eq(sqlite3_get_autocommit(b), 0);
  th_exec(s, "ROLLBACK");
  sqlite3_close(s);
  th_exec(b, "COMMIT");
  zA = th_text(a, "SELECT count(*)||':'||total(w)||':'||"
                  "group_concat(k||hex(v),',') FROM t");
  zB = th_text(b, "SELECT count(*)||':'||total(w)||':'||"
                  "group_concat(k||hex(v),',') FROM t");
  ck_assert_str_eq(zA, zB);
  assert_integrity(b);
  assert_verify(b, zDir);
  ck_assert(!staged_rows(zDir));
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_free(zA);
  sqlite3_free(zB);
  sqlite3_free(zStore);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* Store transactions committed while tally_commits is the store's write
** hook. */
static int nTallyCommits = 0;
static void tally_commits(const void *pKey, int nKey, int nVal){
  (void)nKey; (void)nVal;
  if( pKey==0 ) nTallyCommits++;
}

/* A STAGE row adds one to *pArg. */
static int stage_row_count(void *pArg, const unsigned char *pKey, int nKey,
                           const unsigned char *pVal, int nVal){
  (void)pKey; (void)nKey; (void)pVal; (void)nVal;
  (*(int*)pArg)++;
  return 0;
}

/* The STAGE rows (one a staged part) of branch main of "app". */
static int stage_rows(const char *zDir){
  char *zStore = store_path(zDir);
  StoreSqliteConfig cfg;
  Store *pStore = 0;
  uint64_t iBranch = 0;
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = 0;
  memset(&cfg, 0, sizeof(cfg));
  ck_assert_int_eq(store_open(zStore, &cfg, &pStore, 0), SQLITE_OK);
  ck_assert_int_eq(store_begin(pStore, 0), SQLITE_OK);
  ck_assert_int_eq(depot_db_resolve(pStore, "app", "main", &iBranch, 0),
                   SQLITE_OK);
  ck_assert_int_eq(store_scan(pStore, lo,
      layout_key_br(lo, iBranch, LAYOUT_BR_STAGE), hi,
      layout_key_br(hi, iBranch, LAYOUT_BR_STAGE+1), 0, -1, stage_row_count,
      &n), SQLITE_OK);
  store_rollback(pStore);
  store_close(pStore);
  sqlite3_free(zStore);
  return n;
}

/* ROLLBACK of a transaction that staged thousands of pages of existing
** rows (the journal gives each back as the snapshot has it) writes the
** store only to remove the staged rows: with removal batches unlimited,
** one store transaction per staged part (its STAGE row and page index
** rows) and one for the blob's chunk rows; the rows read as before and no
** staged row stays. */
START_TEST(test_staging_rollback_writes_the_store_only_to_remove_rows){
  char *zDir = th_tmpdir("staging-rb-once");
  sqlite3 *db = open_app(zDir, 8);
  char *zBefore, *zAfter;
  int nPart;
  th_exec(db, "CREATE TABLE u(k INTEGER PRIMARY KEY, v BLOB);"
              "INSERT INTO u SELECT value, zeroblob(900)||x'03' FROM "
              SERIES(6000));
  zBefore = th_text(db, "SELECT count(*)||':'||sum(length(v))||':'||"
                        "group_concat(hex(substr(v,-1)),'') FROM u");
  th_exec(db, "PRAGMA cache_size=5; BEGIN;"
              "UPDATE u SET v=zeroblob(900)||x'04'");
  nPart = stage_rows(zDir);
  ck_assert_int_gt(nPart, 100);
  nTallyCommits = 0;
  depot_gc_test_batch = 1<<30;
  depot_store_test_write = tally_commits;
  th_exec(db, "ROLLBACK");
  depot_store_test_write = 0;
  depot_gc_test_batch = 0;
  ck_assert_int_eq(nTallyCommits, nPart+1);
  ck_assert(!staged_rows(zDir));
  zAfter = th_text(db, "SELECT count(*)||':'||sum(length(v))||':'||"
                       "group_concat(hex(substr(v,-1)),'') FROM u");
  ck_assert_str_eq(zBefore, zAfter);
  assert_integrity(db);
  assert_verify(db, zDir);
  sqlite3_close(db);
  remove_store(zDir);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_free(zDir);
}
END_TEST

/* The workload of the peak RSS test in database zUri: a ~20 MB table
** loaded in one transaction, an index, an update of a quarter of the rows,
** a delete of a fifth, VACUUM and a full scan; 0 when every step worked
** and the scan counts what it should. */
static int rss_workload(const char *zUri){
  sqlite3 *db = 0;
  sqlite3_stmt *pS = 0;
  int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE
                           |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db,
      "CREATE TABLE t(a INTEGER PRIMARY KEY, b INT, c TEXT);"
      "BEGIN;"
      "INSERT INTO t SELECT value, value*7919%100003,"
      " printf('%d %s', value, hex(randomblob(120))) FROM " SERIES(80000) ";"
      "COMMIT;"
      "CREATE INDEX tb ON t(b);"
      "UPDATE t SET c=lower(c) WHERE a%4=0;"
      "DELETE FROM t WHERE a%5=0;"
      "VACUUM;", 0, 0, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "SELECT count(*), sum(b>=0) FROM t"
                            " WHERE length(c)>240", -1, &pS, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(pS)==SQLITE_ROW && sqlite3_column_int(pS, 0)==64000
      && sqlite3_column_int(pS, 1)==64000 ? SQLITE_OK : SQLITE_ERROR;
  }
  if( rc!=SQLITE_OK ) fprintf(stderr, "rss workload: %s\n", sqlite3_errmsg(db));
  sqlite3_finalize(pS);
  sqlite3_close(db);
  return rc;
}

/* Run rss_workload(zUri) in a child process: its peak RSS in KiB (its own
** ru_maxrss), and whether it worked in *pbOk. */
static long rss_child(const char *zUri, int *pbOk){
  struct rusage ru;
  int st = 0;
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ) _exit(rss_workload(zUri)==SQLITE_OK ? 0 : 1);
  ck_assert_int_eq(wait4(pid, &st, 0, &ru), pid);
  *pbOk = WIFEXITED(st) && WEXITSTATUS(st)==0;
  return ru.ru_maxrss;
}

/* The memory bound of vfs/depot_vfs.h at small limits: a child process
** running a ~20 MB workload on a depot database with a 1 MiB decoded-page
** cache, page map and store cache and a 2 MiB transaction budget peaks at
** most DEPOT_MEMORY_SLACK_KB above a child doing the same through the
** unix VFS plus those limits (the budget twice, and the 64 KiB page
** scratch); both give the same result. */
START_TEST(test_staging_peak_rss_within_the_bound){
  char *zDir, *zPlain, *zDepot;
  long nLimitKb = 1024 + 1024 + 1024 + 2*2048 + 64;  /* the budget twice */
  long nUnix, nDepot;
  int bOk = 0;
  if( th_under_valgrind() || th_under_tsan() || th_under_asan() ){
    return;                                             /* RSS is theirs */
  }
  zDir = th_tmpdir("staging-rss");
  zPlain = sqlite3_mprintf("file:%s/plain.db", zDir);
  zDepot = sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=app"
      "&cache_kb=1024&map_kb=1024&store_cache_kb=1024&txn_budget_kb=2048",
      zDir);
  setup_vfs();
  nUnix = rss_child(zPlain, &bOk);
  ck_assert_int_eq(bOk, 1);
  nDepot = rss_child(zDepot, &bOk);
  ck_assert_int_eq(bOk, 1);
  fprintf(stderr, "peak RSS: unix %ld KiB, depot %ld KiB, bound %ld KiB\n",
          nUnix, nDepot, nUnix + nLimitKb + DEPOT_MEMORY_SLACK_KB);
  ck_assert_int_le(nDepot, nUnix + nLimitKb + DEPOT_MEMORY_SLACK_KB);
  sqlite3_free(zPlain);
  zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  unlink(zPlain);
  remove_store(zDir);
  sqlite3_free(zPlain);
  sqlite3_free(zDepot);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("staging");
  TCase *tc = tcase_create("staging");
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  int nKillLoop = (zPg && zPg[0]) ? 1 : 2;  /* on PostgreSQL: pg_suite.sh */
  tcase_add_loop_test(tc, test_staging_large_txn_matches_plain_file, 0, 3);
  tcase_add_test(tc, test_staging_budget_pragma_and_uri);
  tcase_add_test(tc, test_staging_buffer_and_map_drop_pages);
  tcase_add_test(tc, test_staging_rollback_leaves_nothing);
  tcase_add_test(tc, test_staging_rollback_to_savepoint_over_staged_pages);
  tcase_add_test(tc, test_staging_readers_never_see_staged_pages);
  tcase_add_test(tc, test_staging_fork_and_restore_point_leave_the_txn_out);
  tcase_add_loop_test(tc, test_staging_sigkill_leaves_a_commit_and_no_staged_rows,
                      0, nKillLoop);
  if( nKillLoop==1 ){                 /* on PostgreSQL: the above only */
    suite_add_tcase(s, tc);
    return s;
  }
  tcase_add_loop_test(tc, test_staging_injected_failures_at_each_store_write,
                      0, 2);
  tcase_add_loop_test(tc, test_staging_sigkill_at_each_store_write, 0, 2);
  tcase_add_test(tc, test_staging_first_transaction_of_a_new_database);
  tcase_add_test(tc, test_staging_memory_listing_bounds_each_structure);
  tcase_add_test(tc, test_staging_peak_rss_within_the_bound);
  tcase_add_test(tc, test_staging_map_memory_does_not_grow_with_the_txn);
  tcase_add_test(tc, test_staging_cut_of_many_staged_pages_matches_plain_file);
  tcase_add_test(tc, test_staging_quota_counts_no_staged_rows);
  tcase_add_test(tc, test_staging_interrupted_import_leaves_no_database);
  tcase_add_loop_test(tc, test_staging_killed_import_leaves_no_trace, 0, 4);
  tcase_add_test(tc, test_staging_rolled_back_new_database_is_not_listed);
  tcase_add_test(tc, test_staging_threaded_compression_is_byte_identical);
  tcase_add_test(tc, test_staging_threads_parameter);
  tcase_add_test(tc, test_staging_staged_pages_are_cached);
  tcase_add_test(tc, test_staging_caches_a_quarter_of_the_cache_at_most);
  tcase_add_test(tc, test_staging_rolled_back_pages_leave_the_cache);
  tcase_add_test(tc, test_staging_rewritten_pages_stay_in_memory);
  tcase_add_test(tc, test_staging_publishing_commit_is_bounded);
  tcase_add_test(tc, test_staging_commit_removes_leftovers_of_its_txid);
  tcase_add_loop_test(tc, test_staging_rollback_to_the_start_unstages_every_page,
                      0, 2);
  tcase_add_test(tc, test_staging_busy_commit_is_retried);
  tcase_add_test(tc, test_staging_rollback_writes_the_store_only_to_remove_rows);
  suite_add_tcase(s, tc);
  return s;
}
