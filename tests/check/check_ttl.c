/*
** check_ttl.c -- per-entry TTL of KV tables (ext/kv_ttl.c, the deadline
** encoding of ext/kv/codec.c, the read filters of ext/kv/txn.c and
** iter.c, the sweeper thread of ext/kv/expire.c).
**
** Every test runs on the injected deadline clock (kv_clock('fixed', T)),
** for each backend where it matters.  The boundary: a row whose deadline
** is D is visible at D-1 and gone at D.  The sweeper tests check batch
** sizes through the engine's root counter, remove-if-still-expired
** through a writer interleaved before a batch commits (the test hook
** kv_ttl_test_before_commit), carriers through kv_validate, and crash
** safety by SIGKILL of a child that sweeps.
*/
#include "config.h"
#define SQLITE_CORE 1          /* sqlite3ext.h: the struct only, no macros */
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "ext/kv/kv.h"
#include "ext/kv_sql.h"

/* libdepot_core's test hooks (ext/kv_sql.h declares them for its
** DEPOT_TEST build only) */
void kv_ttl_test_interval(int64_t iMs);
void kv_ttl_test_before_commit(void (*x)(void*), void *pArg);
int64_t kv_ttl_test_examined(void);

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const azType[] = { "kv_memory", "kv_btree", "kv_log" };

#define T0 1000000   /* the fixed clock the tests start at */

/* A file database in a new directory; its KV store is the sidecar. */
static sqlite3 *tt_open(const char *zTag, char **pzDir){
  char *zDir = th_tmpdir(zTag);
  sqlite3 *db = th_openf("%s/db", zDir);
  sqlite3_busy_timeout(db, th_busy_ms(5000));
  if( pzDir ) *pzDir = zDir; else sqlite3_free(zDir);
  return db;
}

/* CREATE VIRTUAL TABLE zName USING <type>(zArgs) (persistent kv_memory). */
static void tt_table(sqlite3 *db, const char *zName, int iType,
                     const char *zArgs){
  th_execf(db, "CREATE VIRTUAL TABLE %s USING %s(%s%s)", zName,
           azType[iType], iType==0 ? "persistence=1, " : "", zArgs);
}

static void tt_clock(sqlite3 *db, sqlite3_int64 iMs){
  th_execf(db, "SELECT kv_clock('fixed', %lld)", iMs);
}

static void tt_setup(void){
  kv_ttl_test_interval(3600*1000);     /* no background pass in the way */
  kv_clock_set(KV_CLOCK_FIXED, T0);
}
static void tt_teardown(void){
  kv_ttl_test_before_commit(0, 0);
  kv_clock_set(KV_CLOCK_WALL, 0);
}

/* ------------------------------------------------------------ boundary -- */

/* Visible at deadline-1, gone at the deadline: point read, scan, count,
** kv_get and kv_delete of a handle; an INSERT of the expired key is an
** insert; the deadline survives a reopen. */
START_TEST(test_ttl_row_is_gone_exactly_at_its_deadline){
  char *zDir = 0;
  sqlite3 *db = tt_open("ttl-boundary", &zDir);
  tt_table(db, "t", _i, "ttl_ms=100");
  th_exec(db, "INSERT INTO t VALUES(1, 'a'), (2, 'b')");
  tt_clock(db, T0+50);
  th_exec(db, "INSERT INTO t VALUES(3, 'c')");          /* deadline T0+150 */
  tt_clock(db, T0+99);
  th_text_is(db, "SELECT value FROM t WHERE key=1", "a");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  tt_clock(db, T0+100);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=1"), 0);
  th_text_is(db, "SELECT group_concat(key) FROM t", "3");
  th_text_is(db, "SELECT group_concat(key) FROM (SELECT key FROM t "
                 "ORDER BY key DESC)", "3");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key>=1"), 1);
  th_exec(db, "CREATE TEMP TABLE h AS SELECT kv_begin() AS h");
  ck_assert_ptr_null(th_text(db, "SELECT kv_get((SELECT h FROM h), 't', 2)"));
  ck_assert_ptr_null(th_text(db,
      "SELECT kv_delete((SELECT h FROM h), 't', 2)"));
  th_text_is(db, "SELECT kv_get((SELECT h FROM h), 't', 3)", "c");
  th_exec(db, "SELECT kv_rollback((SELECT h FROM h))");
  /* an expired key is absent: a plain INSERT of it is no PK conflict */
  th_exec(db, "INSERT INTO t VALUES(1, 'a2')");
  th_text_is(db, "SELECT value FROM t WHERE key=1", "a2");
  sqlite3_close(db);
  /* kv_memory reopens empty after a clean close (its data is volatile) */
  if( _i==0 ){ sqlite3_free(zDir); return; }
  /* the stored deadlines survive the reopen (WAL replay, data files) */
  db = th_openf("%s/db", zDir);
  th_text_is(db, "SELECT group_concat(key) FROM t", "1,3");
  tt_clock(db, T0+149);
  th_text_is(db, "SELECT group_concat(key) FROM t", "1,3");
  tt_clock(db, T0+150);
  th_text_is(db, "SELECT group_concat(key) FROM t", "1");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A scan steps past an expired row that lies between live ones, in both
** directions, outside a transaction (the committed side's own step) and
** inside one with a write set. */
START_TEST(test_ttl_scan_skips_expired_rows_between_live_ones){
  char *zDir = 0;
  sqlite3 *db = tt_open("ttl-between", &zDir);
  tt_table(db, "t", _i, "ttl_ms=100");
  th_exec(db, "INSERT INTO t VALUES(2, 'b'), (4, 'd')");
  tt_clock(db, T0+50);
  th_exec(db, "INSERT INTO t VALUES(1, 'a'), (3, 'c'), (5, 'e')");
  tt_clock(db, T0+100);
  th_text_is(db, "SELECT group_concat(key) FROM t", "1,3,5");
  th_text_is(db, "SELECT group_concat(key) FROM (SELECT key FROM t "
                 "ORDER BY key DESC)", "5,3,1");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key>=1"), 3);
  th_exec(db, "BEGIN");
  th_exec(db, "INSERT INTO t VALUES(6, 'f')");
  th_text_is(db, "SELECT group_concat(key) FROM t", "1,3,5,6");
  th_exec(db, "COMMIT");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A sweep's removals reach a change stream on the table as 'expire'
** events, after the events of the writes, in commit order. */
START_TEST(test_ttl_sweep_emits_expire_events_into_a_stream){
  sqlite3 *db = tt_open("ttl-stream", 0);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree(ttl_ms=100)");
  th_exec(db, "CREATE VIRTUAL TABLE q USING kv_queue(source=t)");
  th_exec(db, "INSERT INTO t VALUES(1, 'a')");
  tt_clock(db, T0+50);
  th_exec(db, "INSERT INTO t VALUES(2, 'b')");
  tt_clock(db, T0+100);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 1);
  th_text_is(db, "SELECT group_concat(op||':'||k, ' ') FROM (SELECT "
                 "json_extract(payload, '$.op') AS op, "
                 "json_extract(payload, '$.key') AS k "
                 "FROM kv_queue_lease('q', 10, 1000) ORDER BY id)",
             "insert:1 insert:2 expire:1");
  th_text_is(db, "SELECT group_concat(key) FROM t", "2");
  sqlite3_close(db);
}
END_TEST

/* A deadline expression: its value is the deadline; NULL never expires;
** a value read back is the value written (the deadline is not in it). */
START_TEST(test_ttl_deadline_expression_decides_per_row){
  sqlite3 *db = tt_open("ttl-expr", 0);
  tt_table(db, "t", _i, "deadline='json_extract(value, ''$.exp'')'");
  th_execf(db, "INSERT INTO t VALUES('a', '{\"exp\":%d}'), "
           "('b', '{\"x\":1}'), ('c', '{\"exp\":%d.5}')", T0+10, T0+20);
  th_text_is(db, "SELECT value FROM t WHERE key='b'", "{\"x\":1}");
  th_text_is(db, "SELECT typeof(value) || length(value) FROM t "
                 "WHERE key='a'", "text15");
  tt_clock(db, T0+10);
  th_text_is(db, "SELECT group_concat(key) FROM t", "b,c");
  tt_clock(db, T0+20);                  /* 20.5 rounds down to 20 */
  th_text_is(db, "SELECT group_concat(key) FROM t", "b");
  tt_clock(db, (sqlite3_int64)1<<50);
  th_text_is(db, "SELECT group_concat(key) FROM t", "b");
  /* the column now is the clock at the write */
  tt_table(db, "n", _i, "deadline='now + length(value)'");
  tt_clock(db, T0);
  th_exec(db, "INSERT INTO n VALUES(1, 'xxxx'), (2, 'xxxxxxxx')");
  tt_clock(db, T0+4);
  th_text_is(db, "SELECT group_concat(key) FROM n", "2");
  sqlite3_close(db);
}
END_TEST

/* ------------------------------------------------------------- sweeper -- */

static sqlite3_int64 tt_roots(void){
  int64_t a[KV_METRIC_N+2];
  kv_metrics_read(a);
  return a[KV_METRIC_N];
}

/* kv_sweep removes every expired row, in root transactions of at most
** KV_TTL_BATCH rows, and nothing else; kv_stats counts them. */
START_TEST(test_ttl_sweep_removes_expired_rows_in_bounded_batches){
  sqlite3 *db = tt_open("ttl-batches", 0);
  sqlite3_int64 nRoot;
  tt_table(db, "t", _i, "ttl_ms=100");
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<600) INSERT INTO t SELECT i, 'v'||i FROM c");
  tt_clock(db, T0+50);
  th_exec(db, "INSERT INTO t VALUES(1000, 'late')");
  tt_clock(db, T0+100);
  ck_assert_int_eq(th_int(db, "SELECT expired_rows FROM kv_stats "
                              "WHERE tbl='t'"), 600);
  nRoot = tt_roots();
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 600);
  /* 256 + 256 + 88: three batches, one root each */
  ck_assert_int_eq(tt_roots() - nRoot, 3);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 0);
  th_text_is(db, "SELECT expired_rows || ',' || sweep_passes || ',' || "
                 "swept_rows FROM kv_stats WHERE tbl='t'", "0,2,600");
  th_text_is(db, "SELECT group_concat(key) FROM t", "1000");
  tt_clock(db, T0+150);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  sqlite3_close(db);
}
END_TEST

/* The background sweeper removes expired rows by itself. */
START_TEST(test_ttl_background_sweeper_removes_expired_rows){
  sqlite3 *db;
  int i;
  kv_ttl_test_interval(20);
  db = tt_open("ttl-background", 0);
  tt_table(db, "t", _i, "ttl_ms=100");
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<300) INSERT INTO t SELECT i, i FROM c");
  tt_clock(db, T0+100);
  for(i=0; i<500; i++){
    if( th_int(db, "SELECT swept_rows FROM kv_stats WHERE tbl='t'")==300 ){
      break;
    }
    usleep(10000);
  }
  ck_assert_int_eq(th_int(db, "SELECT swept_rows FROM kv_stats "
                              "WHERE tbl='t'"), 300);
  ck_assert_int_eq(th_int(db, "SELECT expired_rows FROM kv_stats "
                              "WHERE tbl='t'"), 0);
  sqlite3_close(db);                     /* stops the sweeper, then flushes */
}
END_TEST

/* Closing the store while the background sweeper works: the close waits
** for the pass it is in (or runs at its end, on the sweeper thread), no
** pass starts after it, and what the passes committed validates clean. */
START_TEST(test_ttl_close_during_background_sweep_stops_it_cleanly){
  char *zDir = 0;
  sqlite3 *db;
  int r;
  kv_ttl_test_interval(1);
  db = tt_open("ttl-close", &zDir);
  tt_table(db, "u", 1 + _i, "ttl_ms=100");
  th_exec(db, "CREATE VIRTUAL TABLE u_tag USING kv_index(source=u, "
              "expr='json_extract(value, ''$.tag'')')");
  sqlite3_close(db);
  for(r=0; r<4; r++){
    db = th_openf("%s/db", zDir);
    tt_clock(db, T0 + 1000*r);
    /* new keys: a write of a key whose expired row a sweep batch is
    ** removing conflicts with that batch (the carriers would count the
    ** removal twice otherwise), and this test is about the close */
    th_execf(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 "
                 "FROM c WHERE i<3000) INSERT INTO u SELECT %d+i, "
                 "json_object('tag', i%%5) FROM c", r*10000);
    tt_clock(db, T0 + 1000*r + 100);     /* the sweeper starts removing */
    usleep((useconds_t)(rand()%20)*1000);
    sqlite3_close(db);
    db = th_openf("%s/db", zDir);
    {
      char *zF = th_text(db, "SELECT count(*)||' findings, first: '||"
          "(SELECT carrier||' '||quote(key)||' '||detail FROM kv_validate('u')"
          " LIMIT 1) FROM kv_validate('u')");
      ck_assert_msg(zF==0 || strncmp(zF, "0 ", 2)==0, "round %d: %s", r, zF);
      sqlite3_free(zF);
    }
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u"), 0);
    sqlite3_close(db);
  }
  sqlite3_free(zDir);
}
END_TEST

/* Remove-if-still-expired: a row rewritten after a batch read it expired
** is not removed (the batch conflicts and is built again). */
typedef struct TtRewrite TtRewrite;
struct TtRewrite { sqlite3 *db; int nCall; };
static void tt_rewrite(void *pArg){
  TtRewrite *p = (TtRewrite*)pArg;
  if( p->nCall++ ) return;
  th_exec(p->db, "INSERT OR REPLACE INTO t VALUES(5, 'fresh')");
}

START_TEST(test_ttl_row_rewritten_after_its_deadline_was_read_is_kept){
  char *zDir = 0;
  sqlite3 *db = tt_open("ttl-still", &zDir);
  TtRewrite rw;
  tt_table(db, "t", _i, "ttl_ms=100");
  th_exec(db, "CREATE VIRTUAL TABLE t_cnt USING kv_counter(source=t, "
              "group='length(value)')");
  th_exec(db, "INSERT INTO t VALUES(4, 'old'), (5, 'old'), (6, 'old')");
  tt_clock(db, T0+100);
  rw.db = th_openf("%s/db", zDir);
  rw.nCall = 0;
  kv_ttl_test_before_commit(tt_rewrite, &rw);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 2);
  kv_ttl_test_before_commit(0, 0);
  ck_assert_int_eq(rw.nCall, 2);        /* the batch was built twice */
  th_text_is(db, "SELECT group_concat(key||'='||value) FROM t", "5=fresh");
  th_text_is(db, "SELECT group_concat(key||':'||count) FROM t_cnt", "5:1");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('t')"), 0);
  sqlite3_close(rw.db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Indexes and counters hide an expired row at once; after the sweep every
** carrier validates. */
START_TEST(test_ttl_sweep_updates_carriers){
  sqlite3 *db = tt_open("ttl-carriers", 0);
  tt_table(db, "u", _i, "ttl_ms=100");
  th_exec(db,
    "CREATE VIRTUAL TABLE u_tag USING kv_index(source=u, "
    "  expr='json_extract(value, ''$.tag'')');"
    "CREATE VIRTUAL TABLE u_mail USING kv_index(source=u, "
    "  expr='json_extract(value, ''$.mail'')', unique=1);"
    "CREATE VIRTUAL TABLE u_grp USING kv_counter(source=u, "
    "  group='json_extract(value, ''$.tag'')', sum='json_extract(value, "
    "  ''$.n'')');"
    "INSERT INTO u VALUES(1, '{\"tag\":\"x\",\"mail\":\"a\",\"n\":2}'),"
    "  (2, '{\"tag\":\"y\",\"mail\":\"b\",\"n\":3}');");
  tt_clock(db, T0+60);
  th_exec(db, "INSERT INTO u VALUES(3, '{\"tag\":\"x\",\"mail\":\"c\","
              "\"n\":5}')");
  tt_clock(db, T0+100);
  th_text_is(db, "SELECT group_concat(source_key) FROM u_tag", "3");
  th_text_is(db, "SELECT group_concat(source_key) FROM u_mail", "3");
  th_text_is(db, "SELECT group_concat(key||':'||count||':'||sum) FROM u_grp",
             "x:1:5");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  /* a rewrite of an expired key replaces its entries */
  th_exec(db, "INSERT INTO u VALUES(1, '{\"tag\":\"z\",\"mail\":\"a\","
              "\"n\":1}')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('u')"), 1);
  th_text_is(db, "SELECT group_concat(key||':'||count||':'||sum) FROM u_grp",
             "x:1:5,z:1:1");
  th_text_is(db, "SELECT group_concat(source_key) FROM u_mail", "1,3");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  sqlite3_close(db);
}
END_TEST

/* A counter read subtracts the rows of its groups that have expired and
** are not swept yet: by group, by key, inside a transaction, and the same
** after the sweep; a group of expired rows only is not listed. */
START_TEST(test_ttl_counter_excludes_expired_rows_before_the_sweep){
  sqlite3 *db = tt_open("ttl-counter", 0);
  tt_table(db, "u", _i, "ttl_ms=100");
  th_exec(db,
    "CREATE VIRTUAL TABLE u_grp USING kv_counter(source=u, "
    "  group='json_extract(value, ''$.tag'')', sum='json_extract(value, "
    "  ''$.n'')');"
    "INSERT INTO u VALUES(1, '{\"tag\":\"x\",\"n\":2}'),"
    "  (2, '{\"tag\":\"y\",\"n\":3}');");
  tt_clock(db, T0+60);
  th_exec(db, "INSERT INTO u VALUES(3, '{\"tag\":\"x\",\"n\":5}')");
  tt_clock(db, T0+99);
  th_text_is(db, "SELECT group_concat(key||':'||count||':'||sum) FROM u_grp",
             "x:2:7,y:1:3");
  tt_clock(db, T0+100);
  th_text_is(db, "SELECT group_concat(key||':'||count||':'||sum) FROM u_grp",
             "x:1:5");
  ck_assert_int_eq(th_int(db, "SELECT count FROM u_grp WHERE key='x'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u_grp WHERE key='y'"), 0);
  th_exec(db, "BEGIN");
  th_text_is(db, "SELECT group_concat(key||':'||count||':'||sum) FROM u_grp",
             "x:1:5");
  th_exec(db, "COMMIT");
  /* the stored rows still count them: the validator agrees */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('u')"), 2);
  th_text_is(db, "SELECT group_concat(key||':'||count||':'||sum) FROM u_grp",
             "x:1:5");
  tt_clock(db, T0+160);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u_grp"), 0);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('u')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u_grp"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  sqlite3_close(db);
}
END_TEST

/* A unique value held by an expired row that is not swept yet is free: the
** write that claims it removes that row first, as the sweeper would (its
** index entries, counter and an "expire" stream event); the later sweep
** leaves the new holder alone.  A value of a live row stays taken. */
START_TEST(test_ttl_unique_value_of_an_expired_row_is_free){
  sqlite3 *db = tt_open("ttl-unique", 0);
  char *zErr = 0;
  tt_table(db, "u", _i, "ttl_ms=100");
  th_exec(db,
    "CREATE VIRTUAL TABLE u_mail USING kv_index(source=u, "
    "  expr='json_extract(value, ''$.mail'')', unique=1);"
    "CREATE VIRTUAL TABLE u_grp USING kv_counter(source=u, "
    "  group='json_extract(value, ''$.tag'')');"
    "CREATE VIRTUAL TABLE q USING kv_queue(source=u);"
    "INSERT INTO u VALUES(1, '{\"mail\":\"a\",\"tag\":\"x\"}');");
  tt_clock(db, T0+50);
  ck_assert_int_eq(th_tryf(db, &zErr, "INSERT INTO u VALUES(3, "
                           "'{\"mail\":\"a\",\"tag\":\"z\"}')"),
                   SQLITE_CONSTRAINT);
  ck_assert_ptr_nonnull(strstr(zErr, "already held"));
  sqlite3_free(zErr);
  tt_clock(db, T0+100);
  th_exec(db, "INSERT INTO u VALUES(2, '{\"mail\":\"a\",\"tag\":\"y\"}')");
  th_text_is(db, "SELECT group_concat(source_key) FROM u_mail", "2");
  th_text_is(db, "SELECT group_concat(key||':'||count) FROM u_grp", "y:1");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  th_text_is(db, "SELECT group_concat(op||':'||k, ' ') FROM (SELECT "
                 "json_extract(payload, '$.op') AS op, "
                 "json_extract(payload, '$.key') AS k "
                 "FROM kv_queue_lease('q', 10, 1000) ORDER BY id)",
             "insert:1 expire:1 insert:2");
  /* the expired row is gone already: the sweep keeps the new holder */
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('u')"), 0);
  th_text_is(db, "SELECT group_concat(source_key) FROM u_mail", "2");
  th_text_is(db, "SELECT group_concat(key) FROM u", "2");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  sqlite3_close(db);
}
END_TEST

/* kv_validate checks a table's deadline index: a row whose deadline has no
** entry (the sweep would never find it) is a finding, which kv_repair
** writes. */
START_TEST(test_ttl_validate_and_repair_cover_the_deadline_index){
  char *zDir = 0, *zStore, *zErr = 0, *zSum;
  sqlite3 *db = tt_open("ttl-validate", &zDir);
  KvEngine *pEng = 0;
  KvRoot *r = 0;
  KvBuf k = {0, 0, 0};
  tt_table(db, "o", _i, "ttl_ms=100");
  th_exec(db, "INSERT INTO o VALUES(1, 'a'), (2, 'b'), (3, 'c')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('o')"), 0);
  /* drop the entry of row 2: (deadline T0+100, key 2) */
  zStore = sqlite3_mprintf("%s/db-kv", zDir);
  ck_assert_int_eq(kv_engine_open(zStore, &pEng, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(kv_key_append_int(&k, T0+100), SQLITE_OK);
  ck_assert_int_eq(kv_key_append_int(&k, 2), SQLITE_OK);
  ck_assert_int_eq(kv_del(r, ".ttl:o", 6, k.a, k.n, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  kv_buf_free(&k);
  th_text_is(db, "SELECT carrier||' '||key||' '||detail FROM "
                 "kv_validate('o')",
             ".ttl:o 2 missing deadline index entry (deadline 1000100)");
  zSum = th_text(db, "SELECT kv_repair('o')");
  ck_assert_str_eq(zSum, "{\"source\":\"o\",\"findings\":1,\"fixed\":1,"
                         "\"built\":0,\"unfixable\":0}");
  sqlite3_free(zSum);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('o')"), 0);
  tt_clock(db, T0+100);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('o')"), 3);
  /* a table without its index (declared before indexes) is no finding:
  ** its first sweep builds the index */
  tt_clock(db, T0+200);
  th_exec(db, "INSERT INTO o VALUES(4, 'd')");
  th_exec(db, "SELECT kv_begin(), kv_remove_table(1, '.ttl:o'), "
              "kv_commit(1)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('o')"), 0);
  kv_engine_unref(pEng);
  sqlite3_free(zStore);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* -------------------------------------------------------------- SIGKILL -- */

/* Child "sweep DIR": sweeps the expired rows of u (clock at T0+100) until
** killed. */
int depot_test_child(int argc, char **argv){
  sqlite3 *db;
  char *zPath;
  if( argc!=2 || strcmp(argv[0], "sweep")!=0 ) return 2;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  kv_ttl_test_interval(3600*1000);
  kv_clock_set(KV_CLOCK_FIXED, T0+100);
  zPath = sqlite3_mprintf("%s/db", argv[1]);
  if( sqlite3_open(zPath, &db)!=SQLITE_OK ) return 3;
  sqlite3_busy_timeout(db, 5000);
  for(;;) sqlite3_exec(db, "SELECT kv_sweep('u')", 0, 0, 0);
}

START_TEST(test_ttl_sigkill_during_sweep_leaves_carriers_consistent){
  char *zDir = 0;
  sqlite3 *db;
  const char *azArg[3];
  int r;
  if( th_under_tsan() ) return;
  db = tt_open("ttl-kill", &zDir);
  tt_table(db, "u", 1 + _i, "ttl_ms=100");
  th_exec(db,
    "CREATE VIRTUAL TABLE u_tag USING kv_index(source=u, "
    "  expr='json_extract(value, ''$.tag'')');"
    "CREATE VIRTUAL TABLE u_grp USING kv_counter(source=u, "
    "  group='json_extract(value, ''$.tag'')');"
    "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
    "  WHERE i<6000) INSERT INTO u SELECT i, json_object('tag', i%7) FROM c;");
  sqlite3_close(db);
  kv_clock_set(KV_CLOCK_FIXED, T0+100);  /* every row has expired */
  for(r=0; r<3; r++){
    pid_t pid;
    int st;
    azArg[0] = "sweep"; azArg[1] = zDir; azArg[2] = 0;
    pid = th_spawn(azArg);
    usleep((useconds_t)(20 + rand()%150)*1000);
    kill(pid, SIGKILL);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    db = th_openf("%s/db", zDir);
    ck_assert_msg(th_int(db, "SELECT count(*) FROM kv_validate('u')")==0,
        "%s", th_text(db, "SELECT group_concat(carrier||' '||quote(key)||' '"
                          "||detail, '; ') FROM kv_validate('u')"));
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u"), 0);
    sqlite3_close(db);
  }
  db = th_openf("%s/db", zDir);
  tt_clock(db, T0+100);
  th_exec(db, "SELECT kv_sweep('u')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u_tag"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u_grp"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('u')"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ bad input -- */

static void tt_fails(sqlite3 *db, const char *zSql, const char *zLike){
  char *zErr = 0;
  int rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "expected failure: %s", zSql);
  ck_assert_msg(zErr && strstr(zErr, zLike), "%s\n  message '%s' lacks '%s'",
                zSql, zErr ? zErr : "(none)", zLike);
  sqlite3_free(zErr);
}

START_TEST(test_ttl_bad_input_is_refused_and_changes_nothing){
  char *zDir = 0, *z;
  sqlite3 *db = tt_open("ttl-bad", &zDir);
  tt_fails(db, "CREATE VIRTUAL TABLE a USING kv_memory(ttl_ms=-5)",
           "ttl_ms must be a whole number of milliseconds");
  tt_fails(db, "CREATE VIRTUAL TABLE a USING kv_memory(ttl_ms=0)",
           "ttl_ms must be");
  tt_fails(db, "CREATE VIRTUAL TABLE a USING kv_memory(ttl_ms=1.5)",
           "ttl_ms must be");
  tt_fails(db, "CREATE VIRTUAL TABLE a USING kv_memory(ttl_ms=10, "
           "deadline='1')", "give ttl_ms or deadline, not both");
  tt_fails(db, "CREATE VIRTUAL TABLE a USING kv_memory(deadline='random()')",
           "bad deadline expression 'random()': non-deterministic");
  tt_fails(db, "CREATE VIRTUAL TABLE a USING kv_memory(deadline='nope + 1')",
           "no such column: nope");
  tt_fails(db, "CREATE VIRTUAL TABLE a USING kv_memory(deadline="
           "'(SELECT 1)')", "bad deadline expression");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_schema"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables"), 0);
  th_exec(db, "CREATE VIRTUAL TABLE p USING kv_memory");
  tt_fails(db, "SELECT kv_sweep('nosuch')", "no such table: nosuch");
  tt_fails(db, "SELECT kv_sweep('p')", "declares no deadline");
  tt_fails(db, "SELECT kv_sweep(1)", "table must be non-empty text");
  /* a deadline that is not a number fails the write, which writes nothing */
  th_exec(db, "CREATE VIRTUAL TABLE d USING kv_memory(deadline="
              "'json_extract(value, ''$.exp'')')");
  tt_fails(db, "INSERT INTO d VALUES(1, '{\"exp\":\"soon\"}')",
           "the deadline of table d must be a number of unix ms or NULL, "
           "got text");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM d"), 0);
  /* attaching with another deadline than the stored one */
  th_exec(db, "CREATE VIRTUAL TABLE s USING kv_memory(ttl_ms=10)");
  z = sqlite3_mprintf("CREATE VIRTUAL TABLE temp.s USING kv_memory("
                      "dir='%q/db-kv', ttl_ms=20)", zDir);
  tt_fails(db, z, "exists with another deadline");
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A pass reads the deadline index: over a large table with few expired
** rows it examines only those; an entry left by a rewrite with a later
** deadline is dropped and its row kept; the index survives a reopen and
** goes with its table. */
START_TEST(test_ttl_sweep_reads_only_the_due_entries_of_its_index){
  char *zDir = 0;
  sqlite3 *db = tt_open("ttl-index", &zDir);
  sqlite3_int64 n0;
  tt_table(db, "t", _i, "ttl_ms=100");
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<10) INSERT INTO t SELECT i, 'early' FROM c");
  tt_clock(db, T0+50);
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<3000) INSERT INTO t SELECT 100+i, 'late' FROM c");
  th_exec(db, "UPDATE t SET value='again' WHERE key=7");   /* T0+150 */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats "
                              "WHERE tbl='.ttl:t'"), 1);
  tt_clock(db, T0+100);
  n0 = kv_ttl_test_examined();
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 9);
  ck_assert_int_eq(kv_ttl_test_examined() - n0, 10);
  th_text_is(db, "SELECT value FROM t WHERE key=7", "again");
  n0 = kv_ttl_test_examined();
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 0);
  ck_assert_int_eq(kv_ttl_test_examined() - n0, 0);
  if( _i>0 ){
    sqlite3_close(db);
    db = th_openf("%s/db", zDir);
  }
  tt_clock(db, T0+150);
  n0 = kv_ttl_test_examined();
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 3001);
  ck_assert_int_eq(kv_ttl_test_examined() - n0, 3001);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  th_exec(db, "DROP TABLE main.t");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats "
                              "WHERE tbl='.ttl:t'"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A table whose deadline was declared without an index gets one at its
** first sweep, and keeps it; the index goes with the table. */
START_TEST(test_ttl_first_sweep_builds_a_missing_index){
  sqlite3 *db = tt_open("ttl-build", 0);
  sqlite3_int64 n0, h;
  char *zErr = 0;
  tt_table(db, "o", _i, "ttl_ms=100");
  /* what a table declared before deadline indexes existed looks like */
  th_exec(db, "SELECT kv_begin(), kv_remove_table(1, '.ttl:o'), "
              "kv_commit(1)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats "
                              "WHERE tbl='.ttl:o'"), 0);
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<500) INSERT INTO o SELECT i, 'v' FROM c");
  /* a writer bound before the build fails its commit: the build
  ** redefined the table, so no row commits that the index misses */
  h = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_put(%lld, 'o', 2000, 'x')", h);
  tt_clock(db, T0+50);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('o')"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats "
                              "WHERE tbl='.ttl:o'"), 1);
  ck_assert_int_ne(th_tryf(db, &zErr, "SELECT kv_commit(%lld)", h),
                   SQLITE_OK);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM o WHERE key=2000"), 0);
  th_exec(db, "INSERT INTO o VALUES(1000, 'w')");
  tt_clock(db, T0+100);
  n0 = kv_ttl_test_examined();
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('o')"), 500);
  ck_assert_int_eq(kv_ttl_test_examined() - n0, 500);
  th_text_is(db, "SELECT group_concat(key) FROM o", "1000");
  tt_clock(db, T0+150);
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('o')"), 1);
  h = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_remove_table(%lld, 'o'), kv_commit(%lld)", h, h);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats "
                              "WHERE tbl='.ttl:o'"), 0);
  sqlite3_close(db);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("ttl");
  TCase *tc = tcase_create("ttl");
  tcase_add_checked_fixture(tc, tt_setup, tt_teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_ttl_sweep_emits_expire_events_into_a_stream);
  tcase_add_loop_test(tc, test_ttl_scan_skips_expired_rows_between_live_ones,
                      0, 3);
  tcase_add_loop_test(tc, test_ttl_row_is_gone_exactly_at_its_deadline, 0, 3);
  tcase_add_loop_test(tc, test_ttl_deadline_expression_decides_per_row, 0, 3);
  tcase_add_loop_test(tc,
      test_ttl_sweep_removes_expired_rows_in_bounded_batches, 0, 3);
  tcase_add_loop_test(tc, test_ttl_background_sweeper_removes_expired_rows,
                      0, 3);
  tcase_add_loop_test(tc,
      test_ttl_close_during_background_sweep_stops_it_cleanly, 0, 2);
  tcase_add_loop_test(tc,
      test_ttl_row_rewritten_after_its_deadline_was_read_is_kept, 0, 3);
  tcase_add_loop_test(tc, test_ttl_sweep_updates_carriers, 0, 3);
  tcase_add_loop_test(tc,
      test_ttl_counter_excludes_expired_rows_before_the_sweep, 0, 3);
  tcase_add_loop_test(tc, test_ttl_unique_value_of_an_expired_row_is_free,
                      0, 3);
  tcase_add_loop_test(tc,
      test_ttl_validate_and_repair_cover_the_deadline_index, 0, 3);
  tcase_add_test(tc, test_ttl_bad_input_is_refused_and_changes_nothing);
  tcase_add_loop_test(tc,
      test_ttl_sweep_reads_only_the_due_entries_of_its_index, 0, 3);
  tcase_add_loop_test(tc, test_ttl_first_sweep_builds_a_missing_index, 0, 3);
  suite_add_tcase(s, tc);
  tc = tcase_create("kill");
  tcase_add_checked_fixture(tc, tt_setup, tt_teardown);
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc,
      test_ttl_sigkill_during_sweep_leaves_carriers_consistent, 0, 2);
  suite_add_tcase(s, tc);
  return s;
}
