/*
** check_kvversion.c -- the "kvversion" suite: the key-version protocol
** through SQL (kv_query_with_version, kv_prepare_with_version,
** kv_conflicts, kv_commit_with_version), protocol separation, version TTL
** (kv_store_options and the sweeper) and kv_metrics.
*/
#include "config.h"
#define SQLITE_CORE 1  /* engine headers pull in sqlite3ext.h */
#include "tests/check/harness.h"
#include "ext/kv/kv.h"
#include "ext/kv/kv_test.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers --- */

/* A connection on zDir/main.db: its default KV store (what kv_begin(),
** kv_query_with_version and kv_store_options use without a dir) is the
** sidecar directory zDir/main.db-kv. */
static sqlite3 *kvv_open(const char *zDir){
  char *zPath = sqlite3_mprintf("%s/main.db", zDir);
  sqlite3 *db = th_open(zPath);
  sqlite3_free(zPath);
  return db;
}
#define kvv_db() kvv_open(zDir)

/* The sidecar store of kvv_open(zDir) (sqlite3_malloc'd). */
static char *kvv_store(const char *zDir){
  return sqlite3_mprintf("%s/main.db-kv", zDir);
}

static void kvv_mk(sqlite3 *db, const char *zTab, const char *zDir,
                   int bPersist){
  char *z = sqlite3_mprintf("CREATE VIRTUAL TABLE \"%w\" USING "
      "kv_memory(persistence=%d)", zTab, bPersist);
  (void)zDir;
  th_exec(db, z);
  sqlite3_free(z);
}

/* Run zSql expecting an error whose message contains zLike; returns the
** extended code. */
static int kvv_fail(sqlite3 *db, const char *zSql, const char *zLike){
  char *zErr = 0;
  int rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "expected failure: %s", zSql);
  ck_assert_msg(zErr && strstr(zErr, zLike), "%s\n  message '%s' lacks '%s'",
                zSql, zErr ? zErr : "", zLike);
  sqlite3_free(zErr);
  return sqlite3_extended_errcode(db);
}

static void kvv_text_eq(sqlite3 *db, const char *zSql, const char *zWant){
  char *z = th_text(db, zSql);
  ck_assert_msg(zWant ? (z && strcmp(z, zWant)==0) : z==0,
                "%s\n  got '%s', want '%s'", zSql, z ? z : "NULL",
                zWant ? zWant : "NULL");
  sqlite3_free(z);
}

static void kvv_rows_eq(sqlite3 *db, const char *zSql, const char *zWant){
  char *zQ = sqlite3_mprintf("SELECT group_concat(x, ' ') FROM (%s)", zSql);
  kvv_text_eq(db, zQ, zWant);
  sqlite3_free(zQ);
}

/* The version of zTab/key (key as an SQL literal). */
static char *kvv_version(sqlite3 *db, const char *zTab, const char *zKey){
  char *zSql = sqlite3_mprintf("SELECT version FROM "
      "kv_query_with_version(%Q, %s)", zTab, zKey);
  char *z = th_text(db, zSql);
  sqlite3_free(zSql);
  ck_assert_ptr_nonnull(z);
  return z;
}

/* One read-set element as JSON, key given as a JSON literal. */
static char *kvv_elem(const char *zTab, const char *zKeyJson,
                      const char *zVer){
  return sqlite3_mprintf("{\"table\":\"%s\",\"key\":%s,\"version\":\"%s\"}",
                         zTab, zKeyJson, zVer);
}

static sqlite3_int64 kvv_metric(sqlite3 *db, const char *zName,
                                const char *zLabels){
  char *zSql = sqlite3_mprintf("SELECT coalesce(sum(value),0) FROM kv_metrics "
      "WHERE name=%Q AND labels=%Q", zName, zLabels);
  sqlite3_int64 v = th_int(db, zSql);
  sqlite3_free(zSql);
  return v;
}

static int64_t kvv_now_ms(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

/* -------------------------------------------------------------- query --- */

START_TEST(test_kvv_query_returns_value_and_a_stable_version){
  char *zDir = th_tmpdir("kvv-query");
  sqlite3 *db = kvv_db();
  char *zV1, *zV2, *zMissing;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 42), (x'00ff', 'blob key')");
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('t', 'a')", "42");
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('t', x'00ff')",
              "blob key");
  zV1 = kvv_version(db, "t", "'a'");
  zV2 = kvv_version(db, "t", "'a'");
  ck_assert_str_eq(zV1, zV2);
  ck_assert_int_eq((int)strlen(zV1), 34);
  ck_assert_msg(strncmp(zV1, "u:", 2)==0, "%s", zV1);
  zMissing = kvv_version(db, "t", "'nope'");
  ck_assert_msg(strncmp(zMissing, "d:", 2)==0, "%s", zMissing);
  ck_assert_str_ne(zMissing, zV1);
  kvv_text_eq(db, "SELECT quote(value) FROM kv_query_with_version('t','nope')",
              "NULL");
  kvv_fail(db, "SELECT * FROM kv_query_with_version('nosuch', 1)",
           "no such table: nosuch");
  kvv_fail(db, "SELECT * FROM kv_query_with_version('t', NULL)",
           "key must not be NULL");
  kvv_fail(db, "SELECT * FROM kv_query_with_version(3, 1)",
           "table name must be text");
  kvv_fail(db, "SELECT * FROM kv_query_with_version('.tables_meta', 't')",
           "internal");
  sqlite3_free(zV1); sqlite3_free(zV2); sqlite3_free(zMissing);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---------------------------------------------------------- protocol --- */

/* The protocol's handle functions take a handle bound as a real with an
** integral value (JavaScript hosts bind every number as a real). */
START_TEST(test_kvv_handle_bound_as_an_integral_real_works){
  char *zDir = th_tmpdir("kvv-hreal");
  sqlite3 *db = kvv_db();
  char *zVa, *zSql;
  sqlite3_int64 h;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  zVa = kvv_version(db, "t", "'a'");
  h = th_int(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(%lld.0, 't', 'a', 2), "
      "kv_prepare_with_version(%lld.0, '[{\"table\":\"t\",\"key\":\"a\","
      "\"version\":\"%s\"}]'), json_array_length("
      "kv_commit_with_version(%lld.0))", h, h, zVa, h);
  ck_assert_int_eq(th_int(db, zSql), 1);
  sqlite3_free(zSql);
  /* a stale read set fails; kv_conflicts takes the real handle too */
  h = th_int(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(%lld.0, 't', 'b', 1), "
      "kv_prepare_with_version(%lld.0, '[{\"table\":\"t\",\"key\":\"a\","
      "\"version\":\"%s\"}]')", h, h, zVa);
  kvv_fail(db, zSql, "conflicts");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kind FROM kv_conflicts(%lld.0)", h);
  kvv_text_eq(db, zSql, "version_mismatch");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_rollback(%lld.0)", h);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  kvv_text_eq(db, "SELECT group_concat(key||'='||value, ' ') FROM t",
              "a=2");
  sqlite3_free(zVa);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_query_list_matches_single_queries){
  char *zDir = th_tmpdir("kvv-qlist");
  sqlite3 *db = kvv_db();
  char *zA, *zZ, *zSql;
  sqlite3_int64 nRec;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1), (7, 'seven'), (x'00ff', 2.5)");
  zA = kvv_version(db, "t", "'a'");
  /* one row per element, in order, value and version as the single form
  ** gives them; 'z' is a first observation shared with a later query */
  kvv_rows_eq(db, "SELECT typeof(key)||':'||quote(key)||'='||quote(value) "
      "AS x FROM kv_query_with_versions('t', "
      "'[\"a\", 7.0, {\"hex\":\"00FF\"}, \"z\", \"a\"]')",
      "text:'a'=1 integer:7='seven' blob:X'00FF'=2.5 text:'z'=NULL "
      "text:'a'=1");
  /* integer keys come back as the integers the list gave, whatever their
  ** JSON spelling: -0 is 0, 7.0 is 7; 19 digits take the general path */
  kvv_rows_eq(db, "SELECT typeof(key)||':'||key||'='||quote(value) AS x "
      "FROM kv_query_with_versions('t', '[7, -0, -12, 123456789012345678, "
      "7.0, 1234567890123456789, -1234567890123456789]')",
      "integer:7='seven' integer:0=NULL integer:-12=NULL "
      "integer:123456789012345678=NULL integer:7='seven' "
      "integer:1234567890123456789=NULL integer:-1234567890123456789=NULL");
  zZ = kvv_version(db, "t", "'z'");
  kvv_text_eq(db, "SELECT version FROM kv_query_with_versions('t', "
              "'[\"z\"]')", zZ);
  zSql = sqlite3_mprintf("SELECT count(*) FROM kv_query_with_versions('t', "
      "'[\"a\",\"a\"]') WHERE version='%s'", zA);
  ck_assert_int_eq(th_int(db, zSql), 2);
  sqlite3_free(zSql);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                   "kv_query_with_versions('t', ' [ ] ')"), 0);
  /* bad input: clear errors, and no version is created */
  nRec = kvv_metric(db, "key_version_cache_record_count", "{\"table\":\"t\"}");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', NULL)",
           "key list must be a JSON array text");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', 7)",
           "key list must be a JSON array text");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', '{\"a\":1}')",
           "key list must be a JSON array text");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', '[\"n1\", true]')",
           "key list element 1: a key must be");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', '[\"n1\",')",
           "key list element 1");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', '[\"n1\"] x')",
           "text after the array");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', '[{\"hex\":\"0\"}]')",
           "even number of hex digits");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('nope', '[\"n1\"]')",
           "no such table: nope");
  kvv_fail(db, "SELECT * FROM kv_query_with_versions(1, '[\"n1\"]')",
           "table name must be text");
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), nRec);
  sqlite3_free(zA); sqlite3_free(zZ);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A version query of a store that does not exist fails and creates
** nothing: not the dir= directory, not the main database's sidecar. */
START_TEST(test_kvv_query_of_a_missing_store_creates_nothing){
  char *zDir = th_tmpdir("kvv-nostore");
  char *zMissing = sqlite3_mprintf("%s/nosuch", zDir);
  char *zSide = kvv_store(zDir);
  char *zSql = sqlite3_mprintf("SELECT * FROM kv_query_with_version('t', "
                               "'a', '%q')", zMissing);
  struct stat st;
  sqlite3 *db = kvv_db();
  kvv_fail(db, zSql, "no KV store at");
  ck_assert_int_ne(stat(zMissing, &st), 0);
  kvv_fail(db, "SELECT * FROM kv_query_with_versions('t', '[1]')",
           "no KV store at");
  ck_assert_int_ne(stat(zSide, &st), 0);
  kvv_mk(db, "t", zDir, 0);                   /* makes the sidecar store */
  kvv_text_eq(db, "SELECT count(*) FROM kv_query_with_version('t', 'a')",
              "1");
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zSide);
  sqlite3_free(zMissing);
  sqlite3_free(zDir);
}
END_TEST

/* kv_store_options on a store that does not exist (a mistyped dir, or a
** database whose sidecar store was never made) fails and creates nothing,
** instead of making an empty store and setting options nobody uses. */
START_TEST(test_kvv_store_options_of_a_missing_store_creates_nothing){
  char *zDir = th_tmpdir("kvv-optnostore");
  char *zMissing = sqlite3_mprintf("%s/nosuch", zDir);
  char *zSide = kvv_store(zDir);
  char *zSql = sqlite3_mprintf("SELECT kv_store_options('%q', "
                               "'{\"key_version_ttl_ms\":60000}')", zMissing);
  struct stat st;
  sqlite3 *db = kvv_db();
  kvv_fail(db, zSql, "no KV store at");
  ck_assert_int_ne(stat(zMissing, &st), 0);
  kvv_fail(db, "SELECT kv_store_options()", "no KV store at");
  ck_assert_int_ne(stat(zSide, &st), 0);
  kvv_mk(db, "t", zDir, 0);                   /* makes the sidecar store */
  kvv_text_eq(db, "SELECT json_extract(kv_store_options(NULL,"
              " '{\"key_version_ttl_ms\":60000}'), '$.key_version_ttl_ms')",
              "60000");
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zSide);
  sqlite3_free(zMissing);
  sqlite3_free(zDir);
}
END_TEST

/* A JSON number of any length names the key SQLite would read from it:
** 70 digits are the real 1e69, a long fraction rounds as SQLite rounds
** it, in key lists and read sets alike. */
START_TEST(test_kvv_long_json_numbers_are_keys){
  char *zDir = th_tmpdir("kvv-longnum");
  sqlite3 *db = kvv_db();
  char *zBig = sqlite3_mprintf("1%.69d", 0);
  char *zOne = sqlite3_mprintf("1.%.70d1", 0);
  char *zSql, *zV;
  kvv_mk(db, "t", zDir, 0);
  zSql = sqlite3_mprintf("SELECT quote(key) FROM kv_query_with_versions('t', "
                         "'[%s]')", zBig);
  kvv_text_eq(db, zSql, "1.0e+69");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT typeof(key)||quote(key) FROM "
                         "kv_query_with_versions('t', '[%s]')", zOne);
  kvv_text_eq(db, zSql, "integer1");
  sqlite3_free(zSql);
  /* the read set names key 1 by the long form, and it matches */
  zV = kvv_version(db, "t", "1");
  th_exec(db, "SELECT kv_begin(), kv_put(1, 't', 'w', 1)");
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, "
      "'[{\"table\":\"t\",\"key\":%s,\"version\":\"%s\"}]')", zOne, zV);
  ck_assert_int_eq(th_int(db, zSql), 1);
  sqlite3_free(zSql);
  th_exec(db, "SELECT kv_commit_with_version(1)");
  sqlite3_free(zV); sqlite3_free(zBig); sqlite3_free(zOne);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* The read-set parser's shortcuts (short integers, a table name repeated
** in the same raw form, the compact element form, hex digits of either
** case) name the same keys and tables as the general forms, and receipts
** render every integer key exactly, INT64_MIN and INT64_MAX included.
** _i = 0: elements with white space and an escaped table name (the
** general parser); 1: compact elements, as clients write them (the
** shortcut where the key is a short integer, the general parser for the
** others). */
START_TEST(test_kvv_read_set_number_and_table_forms_match){
  static const char *azKey[] = { "123456789012345678", "-42", "0",
    "9223372036854775807", "-9223372036854775808", "-17" };
  static const char *azJson[] = { "123456789012345678", "-4.2e1", "-0",
    "9223372036854775807", "-9223372036854775808", "-17" };
  static const char *azTab[] = { "t", "\\u0074", "t", "t", "t", "t" };
  char *zDir = th_tmpdir("kvv-forms");
  sqlite3 *db = kvv_db();
  sqlite3_str *pSet = sqlite3_str_new(0);
  char *zSet, *zSql, *zR;
  int i;
  kvv_mk(db, "t", zDir, 0);
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 1);
  sqlite3_str_appendchar(pSet, 1, '[');
  for(i=0; i<6; i++){
    char *zV = kvv_version(db, "t", azKey[i]);
    int j;
    if( i==3 ) for(j=2; zV[j]; j++) zV[j] = (char)toupper(zV[j]);
    if( _i ){
      sqlite3_str_appendf(pSet, "%s{\"table\":\"t\",\"key\":%s,"
          "\"version\":\"%s\"}", i ? "," : "", azJson[i], zV);
    }else{
      sqlite3_str_appendf(pSet, "%s {\"table\" : \"%s\",\"key\": %s , "
          "\"version\":\"%s\"}", i ? "," : "", azTab[i], azJson[i], zV);
    }
    zSql = sqlite3_mprintf("SELECT kv_put(1, 't', %s, 'w')", azKey[i]);
    th_exec(db, zSql);
    sqlite3_free(zSql);
    sqlite3_free(zV);
  }
  sqlite3_str_appendchar(pSet, 1, ']');
  zSet = sqlite3_str_finish(pSet);
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, %Q)", zSet);
  ck_assert_int_eq(th_int(db, zSql), 1);
  sqlite3_free(zSql);
  zR = th_text(db, "SELECT kv_commit_with_version(1)");
  ck_assert_ptr_nonnull(zR);
  for(i=0; i<6; i++){
    char *zWant = sqlite3_mprintf("\"key\":%s,", azKey[i]);
    ck_assert_msg(strstr(zR, zWant)!=0, "%s lacks %s", zR, zWant);
    sqlite3_free(zWant);
  }
  /* the same key named twice, through an escaped and a plain table name
  ** and through the repeated raw form, is rejected */
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 2);
  th_exec(db, "SELECT kv_put(2, 't', 5, 'w')");
  kvv_fail(db, "SELECT kv_prepare_with_version(2, '[{\"table\":\"t\",\"key\":5,"
      "\"version\":\"u:00000000000000000000000000000001\"},{\"table\":"
      "\"\\u0074\",\"key\":5.0,\"version\":\"u:00000000000000000000000000000001"
      "\"}]')", "names table t key 5 twice");
  kvv_fail(db, "SELECT kv_prepare_with_version(2, '[{\"table\":\"t\",\"key\":5,"
      "\"version\":\"u:00000000000000000000000000000001\"},{\"table\":\"t\","
      "\"key\":5,\"version\":\"u:00000000000000000000000000000002\"}]')",
      "names table t key 5 twice");
  kvv_fail(db, "SELECT kv_prepare_with_version(2, '[{\"table\":\"t\",\"key\":5,"
      "\"version\":\"u:0000000000000000000000000000000g\"}]')",
      "\"version\" must be");
  sqlite3_free(zR);
  sqlite3_free(zSet);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Like the kv_* functions, the tables that create versions or read a
** handle are direct-only: a view or trigger cannot run them (so a schema
** cannot create version records behind the application's back), while
** kv_metrics stays usable from a view. */
START_TEST(test_kvv_version_tables_are_direct_only){
  char *zDir = th_tmpdir("kvv-directonly");
  sqlite3 *db = kvv_db();
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "CREATE VIEW v1 AS SELECT * FROM kv_query_with_version('t','v');"
      "CREATE VIEW v2 AS SELECT * FROM kv_query_with_versions('t','[\"v\"]');"
      "CREATE VIEW v3 AS SELECT * FROM kv_conflicts(1);"
      "CREATE VIEW v4 AS SELECT * FROM kv_metrics;"
      "CREATE TABLE src(x);"
      "CREATE TRIGGER trg AFTER INSERT ON src BEGIN "
      "  SELECT * FROM kv_query_with_version('t', new.x); END;"
      "SELECT kv_begin();");
  kvv_fail(db, "SELECT * FROM v1", "unsafe use of virtual table");
  kvv_fail(db, "SELECT * FROM v2", "unsafe use of virtual table");
  kvv_fail(db, "SELECT * FROM v3", "unsafe use of virtual table");
  kvv_fail(db, "INSERT INTO src VALUES('w')", "unsafe use of virtual table");
  ck_assert_int_gt(th_int(db, "SELECT count(*) FROM v4"), 0);
  /* no record was created for 'v' or 'w' */
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* The argument columns read back as the arguments (as in json_each), so
** a query over several keys (key IN (...), a join) says which row is
** which key. */
START_TEST(test_kvv_query_argument_columns_return_the_arguments){
  char *zDir = th_tmpdir("kvv-argcols");
  sqlite3 *db = kvv_db();
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1), ('b', 2)");
  kvv_rows_eq(db, "SELECT \"table\"||'/'||key||'='||quote(value) AS x "
      "FROM kv_query_with_version WHERE \"table\"='t' AND key IN ('b','c') "
      "ORDER BY key", "t/b=2 t/c=NULL");
  kvv_text_eq(db, "SELECT quote(dir) FROM kv_query_with_version('t', 'a')",
              "NULL");
  kvv_text_eq(db, "SELECT typeof(key)||':'||key FROM "
              "kv_query_with_version('t', 7)", "integer:7");
  kvv_text_eq(db, "SELECT \"table\"||' '||keys FROM "
              "kv_query_with_versions('t', '[\"a\"]')", "t [\"a\"]");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_versioned_commit_returns_exact_receipts){
  char *zDir = th_tmpdir("kvv-receipts");
  sqlite3 *db = kvv_db();
  char *zVa, *zSql, *zE, *zR;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1), ('b', 2)");
  zVa = kvv_version(db, "t", "'a'");
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_create_table(1, 'n', 'kv_memory')"), 1);
  th_exec(db, "SELECT kv_put(1, 't', 'a', 10), kv_put(1, 't', 'a', 11), "
              "kv_delete(1, 't', 'b'), kv_put(1, 'n', 1.5, 'x'), "
              "kv_put(1, 'n', x'01', 'y')");
  zE = kvv_elem("t", "\"a\"", zVa);
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, '[%s]')", zE);
  ck_assert_int_eq(th_int(db, zSql), 1);
  zR = th_text(db, "SELECT kv_commit_with_version(1)");
  ck_assert_ptr_nonnull(zR);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT group_concat(json_extract(value,'$.table')"
      "||':'||coalesce(json_extract(value,'$.key.hex'),"
      "json_extract(value,'$.key'))||':'||json_extract(value,'$.op'), ' ') "
      "FROM json_each(%Q)", zR);
  kvv_text_eq(db, zSql, "t:a:upsert t:b:delete n:1.5:upsert n:01:upsert");
  sqlite3_free(zSql);
  /* every receipt carries the version a query now returns */
  zSql = sqlite3_mprintf("SELECT count(*) FROM json_each(%Q) AS r WHERE "
      "json_extract(r.value,'$.version') = (SELECT version FROM "
      "kv_query_with_version(json_extract(r.value,'$.table'), "
      "CASE WHEN json_type(r.value,'$.key')='object' THEN x'01' ELSE "
      "json_extract(r.value,'$.key') END))", zR);
  ck_assert_int_eq(th_int(db, zSql), 4);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT count(DISTINCT substr(json_extract(value,"
      "'$.version'),3)) FROM json_each(%Q)", zR);
  ck_assert_int_eq(th_int(db, zSql), 1);           /* one TID */
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "11");
  kvv_fail(db, "SELECT kv_commit_with_version(1)", "is finished");
  sqlite3_free(zSql); sqlite3_free(zE); sqlite3_free(zR); sqlite3_free(zVa);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_stale_version_fails_and_retry_succeeds){
  char *zDir = th_tmpdir("kvv-stale");
  sqlite3 *db = kvv_db();
  char *zV, *zE, *zSql;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  zV = kvv_version(db, "t", "'a'");
  th_exec(db, "UPDATE t SET value=2 WHERE key='a'");   /* ordinary commit */
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 1);
  th_exec(db, "SELECT kv_put(1, 't', 'a', 3)");
  zE = kvv_elem("t", "\"a\"", zV);
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, '[%s]')", zE);
  ck_assert_int_eq(kvv_fail(db, zSql, "t key 'a'"), SQLITE_BUSY_SNAPSHOT);
  kvv_rows_eq(db, "SELECT \"table\"||'|'||key||'|'||kind AS x FROM "
              "kv_conflicts(1)", "t|a|version_mismatch");
  th_exec(db, "SELECT kv_rollback(1)");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "2");
  /* retry with a fresh version in a new handle */
  sqlite3_free(zV); sqlite3_free(zE); sqlite3_free(zSql);
  zV = kvv_version(db, "t", "'a'");
  zE = kvv_elem("t", "\"a\"", zV);
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 2);
  th_exec(db, "SELECT kv_put(2, 't', 'a', 3)");
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(2, '[%s]')", zE);
  ck_assert_int_eq(th_int(db, zSql), 1);
  th_exec(db, "SELECT kv_commit_with_version(2)");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "3");
  sqlite3_free(zV); sqlite3_free(zE); sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* While a versioned root that read and wrote key a (and only read key b)
** is prepared, another root that reads or writes a, or writes b, fails its
** prepare with transaction_conflict; one that only reads b, or touches
** neither, prepares.  (A read of a key the root also writes is reserved by
** the write alone.) */
/* With transaction h prepared: a second transaction runs zOps (SQL with
** one %d, its handle) and prepares, which must conflict exactly when
** bConflict; then both roll back. */
static void kvv_second_prepare(sqlite3 *db, int h, const char *zOps,
                               int bConflict){
  int h2 = (int)th_int(db, "SELECT kv_begin()");
  char *zSql = sqlite3_mprintf(zOps, h2);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_prepare(%d)", h2);
  if( bConflict ){
    ck_assert_int_eq(kvv_fail(db, zSql, "conflicts"), SQLITE_BUSY_SNAPSHOT);
  }else{
    ck_assert_int_eq(th_int(db, zSql), 1);
  }
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_rollback(%d), kv_rollback(%d)", h2, h);
  th_exec(db, zSql);
  sqlite3_free(zSql);
}

START_TEST(test_kvv_prepared_read_and_written_key_stays_reserved){
  static const struct { const char *zOps; int bConflict; } aCase[] = {
    { "SELECT kv_get(%d, 't', 'a')", 1 },
    { "SELECT kv_put(%d, 't', 'a', 9)", 1 },
    { "SELECT kv_put(%d, 't', 'b', 9)", 1 },
    { "SELECT kv_get(%d, 't', 'b')", 0 },
    { "SELECT kv_put(%d, 't', 'c', 9)", 0 },
  };
  char *zDir = th_tmpdir("kvv-rwres");
  sqlite3 *db = kvv_db();
  char *zVa, *zVb, *zEa, *zEb, *zSql;
  int i, h;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1), ('b', 2), ('c', 3)");
  zVa = kvv_version(db, "t", "'a'");
  zVb = kvv_version(db, "t", "'b'");
  zEa = kvv_elem("t", "\"a\"", zVa);
  zEb = kvv_elem("t", "\"b\"", zVb);
  for(i=0; i<(int)(sizeof(aCase)/sizeof(aCase[0])); i++){
    h = (int)th_int(db, "SELECT kv_begin()");
    zSql = sqlite3_mprintf("SELECT kv_put(%d, 't', 'a', 5)", h);
    th_exec(db, zSql);
    sqlite3_free(zSql);
    zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(%d, '[%s,%s]')", h,
                           zEa, zEb);
    ck_assert_int_eq(th_int(db, zSql), 1);
    sqlite3_free(zSql);
    kvv_second_prepare(db, h, aCase[i].zOps, aCase[i].bConflict);
  }
  kvv_text_eq(db, "SELECT group_concat(value) FROM t", "1,2,3");
  sqlite3_free(zVa); sqlite3_free(zVb); sqlite3_free(zEa); sqlite3_free(zEb);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A versioned prepare reserves every key of its read set that it does not
** write, in every table, wherever those keys fall among its writes: before
** the first write, between writes, after the last one.  A concurrent
** writer of any of them conflicts; one of a key outside the read set does
** not. */
START_TEST(test_kvv_prepared_reads_among_writes_are_all_reserved){
  static const char *azTab[] = { "t", "u" };
  static const char *azKey[] = { "a", "b", "c", "d", "e" };
  static const struct { const char *zTab, *zKey; int bConflict; } aCase[] = {
    { "t", "a", 1 }, { "t", "c", 1 }, { "t", "e", 1 }, { "t", "f", 0 },
    { "u", "a", 1 }, { "u", "c", 1 }, { "u", "e", 1 }, { "u", "0", 0 },
  };
  char *zDir = th_tmpdir("kvv-rwmix");
  sqlite3 *db = kvv_db();
  sqlite3_str *pSet = sqlite3_str_new(0);
  char *zSet, *zSql;
  int i, k, h;
  kvv_mk(db, "t", zDir, 0);
  kvv_mk(db, "u", zDir, 0);
  sqlite3_str_appendchar(pSet, 1, '[');
  for(i=0; i<2; i++){
    for(k=0; k<5; k++){
      char *zVer, *zKeyJson, *zElem;
      zKeyJson = sqlite3_mprintf("'%s'", azKey[k]);
      zVer = kvv_version(db, azTab[i], zKeyJson);
      sqlite3_free(zKeyJson);
      zKeyJson = sqlite3_mprintf("\"%s\"", azKey[k]);
      zElem = kvv_elem(azTab[i], zKeyJson, zVer);
      sqlite3_str_appendf(pSet, "%s%s", i+k ? "," : "", zElem);
      sqlite3_free(zElem); sqlite3_free(zKeyJson); sqlite3_free(zVer);
    }
  }
  sqlite3_str_appendchar(pSet, 1, ']');
  zSet = sqlite3_str_finish(pSet);
  for(i=0; i<(int)(sizeof(aCase)/sizeof(aCase[0])); i++){
    h = (int)th_int(db, "SELECT kv_begin()");
    zSql = sqlite3_mprintf("SELECT kv_put(%d, 't', 'b', 1), "
        "kv_put(%d, 't', 'd', 1), kv_put(%d, 'u', 'b', 1), "
        "kv_put(%d, 'u', 'd', 1)", h, h, h, h);
    th_exec(db, zSql);
    sqlite3_free(zSql);
    zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(%d, %Q)", h, zSet);
    ck_assert_int_eq(th_int(db, zSql), 1);
    sqlite3_free(zSql);
    zSql = sqlite3_mprintf("SELECT kv_put(%%d, %Q, %Q, 9)", aCase[i].zTab,
                           aCase[i].zKey);
    kvv_second_prepare(db, h, zSql, aCase[i].bConflict);
    sqlite3_free(zSql);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  sqlite3_free(zSet);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Many records: versions stay what they were through every growth of the
** version table, a versioned commit replaces exactly the versions of the
** keys it wrote, and the record count follows the keys. */
START_TEST(test_kvv_many_versions_survive_growth_and_commits){
  char *zDir = th_tmpdir("kvv-many");
  sqlite3 *db = kvv_db();
  char *zSql;
  int h;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "CREATE TEMP TABLE v1 AS SELECT key, version FROM "
      "kv_query_with_versions('t', (WITH RECURSIVE c(i) AS (SELECT 0 UNION "
      "ALL SELECT i+1 FROM c WHERE i<4999) SELECT json_group_array(i) FROM c))");
  ck_assert_int_eq(th_int(db, "SELECT count(DISTINCT version) FROM v1"), 5000);
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), 5000);
  /* the even keys are written by one versioned transaction */
  h = (int)th_int(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT count(kv_put(%d, 't', key, 1)) FROM v1 "
                         "WHERE key%%2=0", h);
  ck_assert_int_eq(th_int(db, zSql), 2500);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(%d, '[]'), "
                         "json_array_length(kv_commit_with_version(%d))", h, h);
  kvv_text_eq(db, zSql, "1");
  sqlite3_free(zSql);
  th_exec(db, "CREATE TEMP TABLE v2 AS SELECT key, version FROM "
      "kv_query_with_versions('t', (SELECT json_group_array(key) FROM v1))");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM v1 JOIN v2 USING(key) "
                   "WHERE v1.version=v2.version"), 2500);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM v1 JOIN v2 USING(key) "
                   "WHERE v1.version=v2.version AND key%2=1"), 2500);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM v2 WHERE key%2=0 AND "
                   "version LIKE 'u:%'"), 2500);
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), 5000);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_conflict_set_is_complete_sorted_and_deduplicated){
  char *zDir = th_tmpdir("kvv-conflicts");
  sqlite3 *db = kvv_db();
  char *zVx, *zVy, *zVa, *zSql;
  kvv_mk(db, "b", zDir, 0);
  kvv_mk(db, "a", zDir, 0);
  th_exec(db, "INSERT INTO b VALUES('x', 1), ('y', 1), ('z', 1);"
              "INSERT INTO a VALUES(1, 1), (2, 1)");
  zVx = kvv_version(db, "b", "'x'");
  zVy = kvv_version(db, "b", "'y'");
  zVa = kvv_version(db, "a", "2");
  /* x and a.2 change after they were read */
  th_exec(db, "UPDATE b SET value=2 WHERE key='x'; "
              "UPDATE a SET value=2 WHERE key=2");
  /* handle 1 holds a prepared write on b.z and b.x and a.1 */
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1, 'b', 'z', 5), "
              "kv_put(1, 'b', 'x', 5), kv_put(1, 'a', 1, 5), kv_prepare(1)");
  th_exec(db, "SELECT kv_begin()");
  th_exec(db, "SELECT kv_put(2, 'b', 'z', 9), kv_put(2, 'b', 'x', 9), "
              "kv_put(2, 'a', 1, 9), kv_put(2, 'b', 'w', 9)");
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(2, json_array("
      "json_object('table','b','key','y','version','%s'),"
      "json_object('table','b','key','x','version','%s'),"
      "json_object('table','a','key',2,'version','%s')))", zVy, zVx, zVa);
  ck_assert_int_eq(kvv_fail(db, zSql, "conflict"), SQLITE_BUSY_SNAPSHOT);
  kvv_rows_eq(db, "SELECT \"table\"||'|'||quote(key)||'|'||kind AS x "
      "FROM kv_conflicts(2)",
      "a|1|transaction_conflict a|2|version_mismatch "
      "b|'x'|version_mismatch b|'z'|transaction_conflict");
  /* the same again: deterministic */
  kvv_rows_eq(db, "SELECT \"table\"||'|'||quote(key)||'|'||kind AS x "
      "FROM kv_conflicts(2)",
      "a|1|transaction_conflict a|2|version_mismatch "
      "b|'x'|version_mismatch b|'z'|transaction_conflict");
  th_exec(db, "SELECT kv_rollback(2), kv_commit(1)");
  kvv_text_eq(db, "SELECT value FROM b WHERE key='x'", "5");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b WHERE key='w'"), 0);
  sqlite3_free(zSql); sqlite3_free(zVx); sqlite3_free(zVy); sqlite3_free(zVa);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A table created or removed under a versioned transaction is one
** kv_conflicts row: the table's name, key NULL (and kv_try_commit names it
** the same way). */
START_TEST(test_kvv_table_conflict_is_one_row_with_null_key){
  char *zDir = th_tmpdir("kvv-tabconflict");
  sqlite3 *db = kvv_db(), *db2 = kvv_db();
  char *zV;
  kvv_mk(db, "n", zDir, 0);
  kvv_mk(db, "m", zDir, 0);
  zV = kvv_version(db, "m", "'r'");
  th_exec(db, "SELECT kv_begin(), kv_put(1, 'n', 'k', 1), kv_begin(), "
          "kv_put(2, 'n', 'k', 2)");
  th_exec(db2, "SELECT kv_begin(), kv_remove_table(1, 'n'), kv_commit(1)");
  {
    char *zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, "
        "'[{\"table\":\"m\",\"key\":\"r\",\"version\":\"%s\"}]')", zV);
    kvv_fail(db, zSql, "table n (created or removed concurrently)");
    ck_assert_int_eq(sqlite3_extended_errcode(db), SQLITE_BUSY_SNAPSHOT);
    sqlite3_free(zSql);
  }
  kvv_rows_eq(db, "SELECT \"table\"||'|'||quote(key)||'|'||kind AS x "
              "FROM kv_conflicts(1)", "n|NULL|transaction_conflict");
  kvv_text_eq(db, "SELECT kv_try_commit(2)", "[{\"table\":\"n\",\"key\":null}]");
  sqlite3_free(zV);
  /* among key conflicts the table's row sorts by the table's name (and
  ** before that table's keys): m, p, then z, whatever the creation order */
  kvv_mk(db, "z", zDir, 0);
  kvv_mk(db, "p", zDir, 0);
  zV = kvv_version(db, "m", "'r'");
  th_exec(db, "SELECT kv_begin(), kv_put(3, 'z', 1, 1), kv_put(3, 'p', 'k', 1),"
          " kv_put(3, 'm', 1, 1)");
  th_exec(db2, "SELECT kv_begin(), kv_put(2, 'm', 1, 2), kv_put(2, 'z', 1, 2),"
          " kv_commit(2); SELECT kv_begin(), kv_remove_table(3, 'p'), "
          "kv_commit(3)");
  {
    char *zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(3, "
        "'[{\"table\":\"m\",\"key\":\"r\",\"version\":\"%s\"}]')", zV);
    kvv_fail(db, zSql, "on 3 keys: m key 1, table p (created or removed "
             "concurrently), z key 1;");
    sqlite3_free(zSql);
  }
  kvv_rows_eq(db, "SELECT \"table\"||'|'||quote(key) AS x FROM "
              "kv_conflicts(3)", "m|1 p|NULL z|1");
  sqlite3_free(zV);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A versioned commit whose publication fails after the WAL flush stops
** the store: kv_commit_with_version reports it, and no query may then
** return the half-published state (table a has the commit, b does not)
** with its versions.  Reopening applies the commit whole, with new
** versions. */
START_TEST(test_kvv_stopped_store_refuses_version_queries){
  char *zDir = th_tmpdir("kvv-stopped");
  sqlite3 *db = kvv_db();
  char *zV, *zV2;
  kvv_mk(db, "a", zDir, 1);
  kvv_mk(db, "b", zDir, 1);
  zV = kvv_version(db, "a", "2");
  th_exec(db, "SELECT kv_begin(), kv_put(1, 'a', 2, 'a2'), "
          "kv_put(1, 'b', 2, 'b2'), kv_prepare_with_version(1, '[]')");
  kv_engine_test_fail_apply(2);          /* b's part of the publication */
  kvv_fail(db, "SELECT kv_commit_with_version(1)", "is stopped: publishing");
  kvv_fail(db, "SELECT value FROM kv_query_with_version('a', 2)",
           "is stopped");
  kvv_fail(db, "SELECT value FROM kv_query_with_version('b', 2)",
           "is stopped");
  kvv_fail(db, "SELECT value FROM kv_query_with_versions('a', '[2]')",
           "is stopped");
  kvv_fail(db, "SELECT kv_put(kv_begin(), 'a', 3, 'a3')", "is stopped");
  sqlite3_close(db);
  db = kvv_db();
  th_exec(db, "SELECT count(*) FROM b");       /* opens the store: replay */
  kvv_rows_eq(db, "SELECT json_extract(labels, '$.table')||'='||value AS x "
      "FROM kv_metrics WHERE name='key_version_cache_record_count' "
      "ORDER BY 1", "a=0 b=0");
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('b', 2)", "b2");
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('a', 2)", "a2");
  zV2 = kvv_version(db, "a", "2");
  ck_assert_str_ne(zV2, zV);
  sqlite3_free(zV); sqlite3_free(zV2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_protocols_cannot_be_mixed){
  char *zDir = th_tmpdir("kvv-mix");
  sqlite3 *db = kvv_db();
  char *zV, *zSql;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  zV = kvv_version(db, "t", "'a'");
  /* ordinary read first: the versioned prepare is refused */
  th_exec(db, "SELECT kv_begin(); SELECT kv_get(1, 't', 'a'), "
              "kv_put(1, 't', 'a', 2)");
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_prepare_with_version(1, '[]')",
                            "cannot be mixed"), SQLITE_MISUSE);
  th_exec(db, "SELECT kv_commit(1)");             /* still usable */
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "2");
  /* versioned prepare: ordinary calls are refused */
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(2, 't', 'a', 3), "
              "kv_delete(2, 't', 'zz')");
  ck_assert_int_eq(th_int(db, "SELECT kv_prepare_with_version(2, '[]')"), 1);
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_commit(2)", "kv_commit_with_version"),
                   SQLITE_MISUSE);
  th_exec(db, "SELECT kv_commit_with_version(2)");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "3");
  /* an ordinary prepare cannot be finished by kv_commit_with_version */
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(3, 't', 'b', 1), kv_prepare(3)");
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_commit_with_version(3)",
                            "not prepared with kv_prepare_with_version"),
                   SQLITE_MISUSE);
  th_exec(db, "SELECT kv_commit(3)");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='b'", "1");
  /* a create_table may precede the versioned protocol */
  th_exec(db, "SELECT kv_begin(); SELECT kv_table_meta(4, 'u'), "
              "kv_create_table(4, 'u', 'kv_memory'), kv_put(4, 'u', 1, 1)");
  ck_assert_int_eq(th_int(db, "SELECT kv_prepare_with_version(4, '[]')"), 1);
  kvv_text_eq(db, "SELECT json_array_length(kv_commit_with_version(4))", "1");
  /* ordinary commit of an unprepared handle after nothing versioned works */
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(5, 'u', 2, 2), kv_commit(5)");
  sqlite3_free(zV);
  zSql = 0;
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Bad input: each statement fails with the message and changes nothing. */
static const struct { const char *zSql; const char *zLike; } aBadV[] = {
  { "SELECT kv_prepare_with_version('x', '[]')", "must be an integer" },
  { "SELECT kv_prepare_with_version(99, '[]')", "unknown transaction handle" },
  { "SELECT kv_prepare_with_version(1, 'not json')", "must be a JSON array" },
  { "SELECT kv_prepare_with_version(1, '{}')", "must be a JSON array" },
  { "SELECT kv_prepare_with_version(1, NULL)", "must be a JSON array" },
  { "SELECT kv_prepare_with_version(1, '[1]')", "exactly" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":\"a\"}]')",
    "exactly" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":\"a\","
    "\"version\":\"u:12\"}]')", "u:<32 hex>" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":\"a\","
    "\"version\":\"x:00000000000000000000000000000001\"}]')", "u:<32 hex>" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":null,"
    "\"version\":\"u:00000000000000000000000000000001\"}]')", "\"key\" must" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":{\"hex\":"
    "\"0g\"},\"version\":\"u:00000000000000000000000000000001\"}]')", "hex" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":7,\"key\":1,"
    "\"version\":\"u:00000000000000000000000000000001\"}]')",
    "\"table\" must be a string" },
  { "SELECT kv_prepare_with_version(1, json_array(json_object('table',"
    "printf('%.5000c','x'),'key',1,'version',"
    "'u:00000000000000000000000000000001')))", "1..4096 bytes" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":[1],"
    "\"version\":\"u:00000000000000000000000000000001\"}]')", "\"key\" must" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":1,"
    "\"version\":\"u:00000000000000000000000000000001\"},{\"table\":\"t\","
    "\"key\":1.0,\"version\":\"u:00000000000000000000000000000002\"}]')",
    "twice" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"nosuch\",\"key\":1,"
    "\"version\":\"u:00000000000000000000000000000001\"}]')",
    "no such table: nosuch" },
  { "SELECT kv_prepare_with_version(1, json_array(json_object('table','t',"
    "'key',printf('%.40000c','k'),"
    "'version','u:00000000000000000000000000000001')))", "key" },
  { "SELECT kv_commit_with_version(1)", "not prepared" },
  { "SELECT kv_commit_with_version(NULL)", "must be an integer" },
  { "SELECT * FROM kv_conflicts('h')", "must be an integer" },
  { "SELECT kv_prepare_with_version(2, '[]')", "writes nothing" },
  { "SELECT * FROM kv_query_with_version('t', 'a', '/tmp' || char(0) || 'x')",
    "store directory must not contain NUL" },
  { "SELECT kv_store_options('/tmp' || char(0) || 'x')",
    "store directory must not contain NUL" },
  { "SELECT * FROM kv_query_with_version('t', CAST(x'ff' AS TEXT))",
    "text key is not valid UTF-8" },
  { "SELECT kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":\"' "
    "|| CAST(x'ff' AS TEXT) || '\",\"version\":"
    "\"u:00000000000000000000000000000001\"}]')",
    "text key is not valid UTF-8" },
};

START_TEST(test_kvv_bad_input_is_rejected_and_changes_nothing){
  char *zDir = th_tmpdir("kvv-bad");
  sqlite3 *db = kvv_db();
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  th_exec(db, "SELECT kv_begin(), kv_begin()");        /* handles 1 and 2 */
  th_exec(db, "SELECT kv_put(1, 't', 'a', 2)");
  kvv_fail(db, aBadV[_i].zSql, aBadV[_i].zLike);
  /* nothing changed: handle 1 is still active and can commit normally */
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "1");
  ck_assert_int_eq(th_int(db, "SELECT kv_prepare_with_version(1, '[]')"), 1);
  th_exec(db, "SELECT kv_commit_with_version(1)");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "2");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ----------------------------------------------------------- threads --- */

#define KVV_THREADS 8

typedef struct KvvObs KvvObs;
struct KvvObs {
  const char *zDir;
  pthread_barrier_t *pBarrier;
  char zVer[64];
  int rc;
};

static void *kvvObsThread(void *pArg){
  KvvObs *p = (KvvObs*)pArg;
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  char *zSql = sqlite3_mprintf("SELECT version FROM kv_query_with_version("
      "'t', 'missing', %Q)", p->zDir);
  p->rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, 0);
  if( p->rc==SQLITE_OK ) p->rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  pthread_barrier_wait(p->pBarrier);
  if( p->rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    snprintf(p->zVer, sizeof(p->zVer), "%s", sqlite3_column_text(pStmt, 0));
  }
  if( p->rc==SQLITE_OK ) p->rc = sqlite3_finalize(pStmt);
  sqlite3_close(db);
  sqlite3_free(zSql);
  return 0;
}

START_TEST(test_kvv_concurrent_first_observations_publish_one_version){
  char *zDir = th_tmpdir("kvv-firstobs");
  sqlite3 *db = kvv_db();
  pthread_barrier_t barrier;
  pthread_t a[KVV_THREADS];
  KvvObs o[KVV_THREADS];
  char *zStore = kvv_store(zDir);
  int i;
  kvv_mk(db, "t", zDir, 0);
  pthread_barrier_init(&barrier, 0, KVV_THREADS);
  for(i=0; i<KVV_THREADS; i++){
    memset(&o[i], 0, sizeof(o[i]));
    o[i].zDir = zStore; o[i].pBarrier = &barrier;
    pthread_create(&a[i], 0, kvvObsThread, &o[i]);
  }
  for(i=0; i<KVV_THREADS; i++) pthread_join(a[i], 0);
  for(i=0; i<KVV_THREADS; i++){
    ck_assert_int_eq(o[i].rc, SQLITE_OK);
    ck_assert_int_eq((int)strlen(o[i].zVer), 34);
    ck_assert_str_eq(o[i].zVer, o[0].zVer);
  }
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), 1);
  pthread_barrier_destroy(&barrier);
  sqlite3_close(db);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

#define KVV_WRITERS 4
#define KVV_TXNS    40

typedef struct KvvWriter KvvWriter;
struct KvvWriter {
  const char *zDir;
  int iThread;
  int nCommit, nConflict, nBadReceipt, nOther;
};

/* Run zSql (printf-formatted); the first column of the first row as an
** integer in *piOut when piOut.  Returns the extended code. */
static int kvvRun(sqlite3 *db, sqlite3_int64 *piOut, const char *zFmt, ...){
  va_list ap;
  sqlite3_stmt *pStmt = 0;
  char *zSql;
  int rc;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  sqlite3_free(zSql);
  if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW && piOut ){
    *piOut = sqlite3_column_int64(pStmt, 0);
  }
  rc = sqlite3_finalize(pStmt);
  return rc==SQLITE_OK ? rc : sqlite3_extended_errcode(db);
}

/* One versioned transaction: read the shared key's version, write it and
** three own keys (one a delete); check the receipts.  Returns the code. */
static int kvvWriterTxn(sqlite3 *db, KvvWriter *p, int iTxn){
  sqlite3_int64 h = 0, bOk = 0;
  int rc = kvvRun(db, &h, "SELECT kv_begin(%Q)", p->zDir);
  if( rc==SQLITE_OK ) rc = kvvRun(db, 0, "SELECT kv_put(%lld,'t','shared',%d),"
      " kv_put(%lld,'t','k%d-%d-a',1), kv_put(%lld,'t','k%d-%d-b',1), "
      "kv_delete(%lld,'t','k%d-%d-c')", h, iTxn, h, p->iThread, iTxn, h,
      p->iThread, iTxn, h, p->iThread, iTxn);
  if( rc==SQLITE_OK ) rc = kvvRun(db, 0, "SELECT kv_prepare_with_version(%lld,"
      " json_array(json_object('table','t','key','shared','version',(SELECT "
      "version FROM kv_query_with_version('t','shared',%Q)))))", h, p->zDir);
  if( rc!=SQLITE_OK ){
    kvvRun(db, 0, "SELECT kv_rollback(%lld)", h);
    return rc;
  }
  rc = kvvRun(db, &bOk, "SELECT json_array_length(r) = 4 AND (SELECT "
      "count(DISTINCT substr(json_extract(value,'$.version'),3)) FROM "
      "json_each(r))=1 AND (SELECT count(*) FROM json_each(r) WHERE "
      "json_extract(value,'$.op')='delete')=1 FROM (SELECT "
      "kv_commit_with_version(%lld) AS r)", h);
  if( rc==SQLITE_OK && !bOk ) p->nBadReceipt++;
  return rc;
}

static void *kvvWriterThread(void *pArg){
  KvvWriter *p = (KvvWriter*)pArg;
  sqlite3 *db = 0;
  int i;
  if( sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, 0)!=SQLITE_OK ){
    p->nOther++;
    return 0;
  }
  for(i=0; i<KVV_TXNS; i++){
    int rc = kvvWriterTxn(db, p, i);
    if( rc==SQLITE_OK ) p->nCommit++;
    else if( rc==SQLITE_BUSY_SNAPSHOT ) p->nConflict++;
    else p->nOther++;
  }
  sqlite3_close(db);      /* rolls back the failed handles */
  return 0;
}

START_TEST(test_kvv_receipts_exact_under_concurrent_commits){
  char *zDir = th_tmpdir("kvv-concurrent");
  sqlite3 *db = kvv_db();
  pthread_t a[KVV_WRITERS];
  KvvWriter w[KVV_WRITERS];
  char *zStore = kvv_store(zDir);
  int i, nCommit = 0;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('shared', -1)");
  for(i=0; i<KVV_WRITERS; i++){
    memset(&w[i], 0, sizeof(w[i]));
    w[i].zDir = zStore; w[i].iThread = i;
    pthread_create(&a[i], 0, kvvWriterThread, &w[i]);
  }
  for(i=0; i<KVV_WRITERS; i++) pthread_join(a[i], 0);
  for(i=0; i<KVV_WRITERS; i++){
    ck_assert_int_eq(w[i].nOther, 0);
    ck_assert_int_eq(w[i].nBadReceipt, 0);
    nCommit += w[i].nCommit;
  }
  ck_assert_int_gt(nCommit, 0);
  /* every committed transaction left exactly its two upserts */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key LIKE 'k%'"),
                   2*nCommit);
  sqlite3_close(db);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* ----------------------------------------------------------- restart --- */

START_TEST(test_kvv_restart_clears_versions){
  char *zDir = th_tmpdir("kvv-restart");
  sqlite3 *db = kvv_db();
  char *zV1, *zV2, *zE, *zSql;
  kvv_mk(db, "t", zDir, 1);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  zV1 = kvv_version(db, "t", "'a'");
  sqlite3_close(db);                       /* the store closes */
  db = kvv_db();                           /* t is in main.db's schema */
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), 0);
  zV2 = kvv_version(db, "t", "'a'");
  ck_assert_str_ne(zV1, zV2);
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1, 't', 'a', 2)");
  zE = kvv_elem("t", "\"a\"", zV1);
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, '[%s]')", zE);
  kvv_fail(db, zSql, "conflict");
  kvv_rows_eq(db, "SELECT kind AS x FROM kv_conflicts(1)", "version_mismatch");
  sqlite3_free(zV1); sqlite3_free(zV2); sqlite3_free(zE); sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---------------------------------------------------------- iterators --- */

START_TEST(test_kvv_scan_is_isolated_from_a_versioned_commit){
  char *zDir = th_tmpdir("kvv-scan");
  sqlite3 *db = kvv_db();
  sqlite3_stmt *pScan = 0;
  int n = 0;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'a'), (2, 'b'), (3, 'c')");
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key FROM t", -1, &pScan, 0),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(pScan), SQLITE_ROW);
  n++;
  /* while the scan is open: a versioned transaction commits */
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1, 't', 4, 'd'), "
              "kv_delete(1, 't', 3), kv_prepare_with_version(1, '[]'), "
              "kv_commit_with_version(1)");
  while( sqlite3_step(pScan)==SQLITE_ROW ) n++;
  ck_assert_int_eq(sqlite3_finalize(pScan), SQLITE_OK);
  ck_assert_int_eq(n, 3);                      /* the snapshot: 1, 2, 3 */
  kvv_rows_eq(db, "SELECT key AS x FROM t", "1 2 4");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* --------------------------------------------------------------- TTL --- */

START_TEST(test_kvv_store_options_are_quantised_and_checked){
  char *zDir = th_tmpdir("kvv-options");
  sqlite3 *db = kvv_db();
  char *zSql;
  kvv_mk(db, "t", zDir, 0);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, "
      "'{\"key_version_ttl_ms\":20.999,\"key_version_ttl_poll_ms\":0.2}')");
  kvv_text_eq(db, zSql, "{\"key_version_ttl_ms\":20,"
              "\"key_version_ttl_poll_ms\":1,\"wal_segment_bytes\":67108864,\"wal_keep_bak\":false}");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, "
      "'{\"key_version_ttl_ms\":0}')");
  kvv_text_eq(db, zSql, "{\"key_version_ttl_ms\":0,"
              "\"key_version_ttl_poll_ms\":1,\"wal_segment_bytes\":67108864,\"wal_keep_bak\":false}");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, "
      "'{\"key_version_ttl_ms\":-1}')");
  kvv_fail(db, zSql, "key_version_ttl_ms must be");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, "
      "'{\"key_version_ttl_poll_ms\":0}')");
  kvv_fail(db, zSql, "key_version_ttl_poll_ms 1..");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, '{\"ttl\":1}')");
  kvv_fail(db, zSql, "unknown store option 'ttl'");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, '[1]')");
  kvv_fail(db, zSql, "must be a JSON object");
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL)");
  kvv_text_eq(db, zSql, "{\"key_version_ttl_ms\":0,"
              "\"key_version_ttl_poll_ms\":1,\"wal_segment_bytes\":67108864,\"wal_keep_bak\":false}");
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Files in zDir/main.db-kv/wal/ whose names end in zSuffix. */
static int kvv_wal_files(const char *zDir, const char *zSuffix){
  char *zWal = sqlite3_mprintf("%s/main.db-kv/wal", zDir);
  int n = th_count_suffix(zWal, zSuffix);
  sqlite3_free(zWal);
  return n;
}

/* wal_segment_bytes and wal_keep_bak reach the root WAL of a store: small
** segments rotate, and retired ones are kept as .bak only when asked. */
START_TEST(test_kvv_store_options_set_wal_rotation_and_bak){
  char *zDir = th_tmpdir("kvv-options-wal");
  sqlite3 *db = kvv_db();
  int i, nBak;
  kvv_mk(db, "t", zDir, 1);
  kvv_text_eq(db, "SELECT json_extract(kv_store_options(NULL, "
      "'{\"wal_segment_bytes\":4096,\"wal_keep_bak\":true}'), "
      "'$.wal_segment_bytes', '$.wal_keep_bak')", "[4096,true]");
  for(i=0; i<200; i++){
    char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d, zeroblob(200))", i);
    th_exec(db, z);
    sqlite3_free(z);
  }
  ck_assert_int_gt(kvv_wal_files(zDir, ".bak"), 5);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 200);
  th_exec(db, "SELECT kv_store_options(NULL, '{\"wal_keep_bak\":0}')");
  kvv_text_eq(db, "SELECT json_extract(kv_store_options(), "
      "'$.wal_segment_bytes', '$.wal_keep_bak')", "[4096,false]");
  nBak = kvv_wal_files(zDir, ".bak");
  for(i=1000; i<1200; i++){
    char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d, zeroblob(200))", i);
    th_exec(db, z);
    sqlite3_free(z);
  }
  ck_assert_int_eq(th_int(db, "SELECT wal_segments<=2 FROM kv_stats "
                   "WHERE type='store' AND store LIKE '%main.db-kv'"), 1);
  ck_assert_int_eq(kvv_wal_files(zDir, ".bak"), nBak);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Bad WAL options are refused with a clear error and change nothing; an
** in-memory store has no WAL to configure. */
START_TEST(test_kvv_store_options_wal_bad_values_change_nothing){
  static const char *azBad[][2] = {
    { "{\"wal_segment_bytes\":100}", "wal_segment_bytes must be 4096.." },
    { "{\"wal_segment_bytes\":2e12}", "wal_segment_bytes must be 4096.." },
    { "{\"wal_segment_bytes\":\"big\"}", "unknown store option" },
    { "{\"wal_keep_bak\":2}", "unknown store option 'wal_keep_bak'" },
    { "{\"wal_keep_bak\":\"yes\"}", "unknown store option" },
    { "{\"key_version_ttl_ms\":5,\"wal_segment_bytes\":1}",
      "wal_segment_bytes must be" },
  };
  char *zDir = th_tmpdir("kvv-options-walbad");
  sqlite3 *db = kvv_db(), *dbMem;
  size_t i;
  kvv_mk(db, "t", zDir, 1);
  for(i=0; i<sizeof(azBad)/sizeof(azBad[0]); i++){
    char *z = sqlite3_mprintf("SELECT kv_store_options(NULL, %Q)", azBad[i][0]);
    kvv_fail(db, z, azBad[i][1]);
    sqlite3_free(z);
  }
  kvv_text_eq(db, "SELECT kv_store_options()", "{\"key_version_ttl_ms\":0,"
      "\"key_version_ttl_poll_ms\":1000,\"wal_segment_bytes\":67108864,\"wal_keep_bak\":false}");
  dbMem = th_open(":memory:");
  th_exec(dbMem, "CREATE VIRTUAL TABLE m USING kv_memory");
  kvv_fail(dbMem, "SELECT kv_store_options(NULL, '{\"wal_keep_bak\":true}')",
           "need a store with a root WAL; this store is in memory");
  kvv_text_eq(dbMem, "SELECT kv_store_options()",
      "{\"key_version_ttl_ms\":0,\"key_version_ttl_poll_ms\":1000}");
  sqlite3_close(dbMem);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Options text that is not valid JSON is refused, not read as "no
** change": the options stay as they were. */
START_TEST(test_kvv_store_options_reject_malformed_json){
  static const char *azBad[] = {
    "nope", "{\"key_version_ttl_ms\":", "{\"key_version_ttl_ms\":5",
    "{key_version_ttl_ms:5}", "{\"key_version_ttl_ms\":5,}", ""
  };
  char *zDir = th_tmpdir("kvv-options-json");
  sqlite3 *db = kvv_db();
  size_t i;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "SELECT kv_store_options(NULL, '{\"key_version_ttl_ms\":7}')");
  for(i=0; i<sizeof(azBad)/sizeof(azBad[0]); i++){
    char *zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, %Q)", azBad[i]);
    kvv_fail(db, zSql, "kv: store options must be a JSON object");
    sqlite3_free(zSql);
  }
  kvv_text_eq(db, "SELECT kv_store_options()", "{\"key_version_ttl_ms\":7,"
              "\"key_version_ttl_poll_ms\":1000,\"wal_segment_bytes\":67108864,\"wal_keep_bak\":false}");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_ttl_never_expires_early){
  char *zDir = th_tmpdir("kvv-ttl");
  sqlite3 *db = kvv_db();
  char *zSql, *zV, *zNow = 0;
  int64_t t0, tEnd;
  int bChanged = 0;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, "
      "'{\"key_version_ttl_ms\":300,\"key_version_ttl_poll_ms\":2}')");
  th_exec(db, zSql);
  sqlite3_free(zSql);
  t0 = kvv_now_ms();
  zV = kvv_version(db, "t", "'a'");             /* first observation */
  /* until 300 ms after the observation, the record stays (reads do not
  ** refresh it, and these cache hits must all return it); what a read
  ** saw is checked only when it finished before then, as a stall between
  ** the loop test and the read can carry it past the deadline */
  while( kvv_now_ms() < t0 + 290 ){
    sqlite3_int64 n = kvv_metric(db, "key_version_cache_record_count",
                                 "{\"table\":\"t\"}");
    char *z = kvv_version(db, "t", "'a'");
    int64_t tRead = kvv_now_ms();
    ck_assert_msg(tRead >= t0+300 || (n==1 && strcmp(z, zV)==0),
                  "evicted early at %lld ms", (long long)(tRead-t0));
    sqlite3_free(z);
    usleep(10000);
  }
  /* then it goes, at the latest a few polls later */
  tEnd = kvv_now_ms() + 5000;
  while( !bChanged && kvv_now_ms() < tEnd ){
    bChanged = kvv_metric(db, "key_version_cache_record_count",
                          "{\"table\":\"t\"}")==0;
    if( !bChanged ) usleep(5000);
  }
  ck_assert_msg(bChanged, "never evicted");
  ck_assert_int_ge(kvv_now_ms(), t0+300);
  zNow = kvv_version(db, "t", "'a'");
  ck_assert_str_ne(zNow, zV);                    /* a new first observation */
  sqlite3_free(zV); sqlite3_free(zNow);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_ttl_index_stays_bounded_under_churn){
  char *zDir = th_tmpdir("kvv-churn");
  sqlite3 *db = kvv_db();
  sqlite3_int64 nOne, nMany;
  char *zSql;
  int i, round;
  kvv_mk(db, "t", zDir, 0);
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, "
      "'{\"key_version_ttl_ms\":600000,\"key_version_ttl_poll_ms\":1}')");
  th_exec(db, zSql);
  sqlite3_free(zSql);
  /* a hot key committed many times keeps one record and one token */
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1,'t','hot',0), "
              "kv_prepare_with_version(1,'[]'), kv_commit_with_version(1)");
  nOne = kvv_metric(db, "key_version_cache_estimated_memory_bytes",
                    "{\"table\":\"t\"}");
  ck_assert_int_gt(nOne, 0);
  for(i=2; i<200; i++){
    zSql = sqlite3_mprintf("SELECT kv_begin(); SELECT kv_put(%d,'t','hot',%d),"
        " kv_prepare_with_version(%d,'[]'), kv_commit_with_version(%d)",
        i, i, i, i);
    th_exec(db, zSql);
    sqlite3_free(zSql);
  }
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_estimated_memory_bytes",
                              "{\"table\":\"t\"}"), nOne);
  /* churn of new keys with a 1 ms TTL: every new record drains each
  ** round; the hot key stays, leased for the 600000 ms it was given */
  zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, "
      "'{\"key_version_ttl_ms\":1}')");
  th_exec(db, zSql);
  sqlite3_free(zSql);
  for(round=0; round<5; round++){
    int64_t tEnd = kvv_now_ms() + 5000;
    zSql = sqlite3_mprintf("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
        "SELECT i+1 FROM c WHERE i<300) SELECT count(*) FROM c, "
        "kv_query_with_version('t', 'r%d-'||c.i)", round);
    ck_assert_int_eq(th_int(db, zSql), 300);
    sqlite3_free(zSql);
    do{
      nMany = kvv_metric(db, "key_version_cache_record_count",
                         "{\"table\":\"t\"}");
      if( nMany>1 ) usleep(2000);
    }while( nMany>1 && kvv_now_ms() < tEnd );
    ck_assert_int_eq(nMany, 1);
    ck_assert_int_eq(kvv_metric(db, "key_version_cache_estimated_memory_bytes",
                                "{\"table\":\"t\"}"), nOne);
  }
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Set the TTL options of the default store. */
static void kvv_ttl(sqlite3 *db, const char *zJson){
  char *zSql = sqlite3_mprintf("SELECT kv_store_options(NULL, %Q)", zJson);
  th_exec(db, zSql);
  sqlite3_free(zSql);
}

/* Wait (up to 5 s) until table t has nWant version records; the count. */
static sqlite3_int64 kvv_wait_records(sqlite3 *db, sqlite3_int64 nWant){
  int64_t tEnd = kvv_now_ms() + 5000;
  sqlite3_int64 n;
  while( (n = kvv_metric(db, "key_version_cache_record_count",
                         "{\"table\":\"t\"}"))!=nWant
      && kvv_now_ms()<tEnd ){
    usleep(2000);
  }
  return n;
}

/* Wait (up to 5 s) until table u has no version records; the count. */
static sqlite3_int64 kvv_wait_u(sqlite3 *db){
  int64_t tEnd = kvv_now_ms() + 5000;
  sqlite3_int64 n;
  while( (n = kvv_metric(db, "key_version_cache_record_count",
                         "{\"table\":\"u\"}"))!=0 && kvv_now_ms()<tEnd ){
    usleep(2000);
  }
  return n;
}

START_TEST(test_kvv_ttl_first_observation_lease_survives_lower_ttl){
  char *zDir = th_tmpdir("kvv-lease");
  sqlite3 *db = kvv_db();
  char *zV, *zV2, *zSql, *zErr = 0;
  sqlite3_int64 n;
  int64_t t0;
  int rc;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  kvv_ttl(db, "{\"key_version_ttl_ms\":1500,\"key_version_ttl_poll_ms\":1}");
  t0 = kvv_now_ms();
  zV = kvv_version(db, "t", "'a'");          /* first observation, 1500 ms */
  sqlite3_free(kvv_version(db, "t", "'b'"));
  /* a TTL of 1 ms would evict them at once; 'a' and 'b' keep their
  ** leases, while c, d, e, observed under the 1 ms TTL, go */
  kvv_ttl(db, "{\"key_version_ttl_ms\":1}");
  th_exec(db, "SELECT count(*) FROM kv_query_with_versions('t', "
              "'[\"c\",\"d\",\"e\"]')");           /* leased for 1 ms */
  usleep(50000);
  /* each of these reads is judged only if it finished before the leases
  ** end (a slow or loaded machine can take longer than that to get here) */
  n = kvv_wait_records(db, 2);
  if( kvv_now_ms() < t0+1500 ) ck_assert_int_eq(n, 2);
  /* still the same record: a read set naming it is accepted */
  zV2 = kvv_version(db, "t", "'a'");
  if( kvv_now_ms() < t0+1500 ) ck_assert_str_eq(zV2, zV);
  zSql = sqlite3_mprintf("SELECT kv_begin(); SELECT kv_put(1,'t','a',2), "
      "kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":\"a\","
      "\"version\":\"%s\"}]'), kv_rollback(1)", zV);
  rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc==SQLITE_OK || kvv_now_ms()>=t0+1500, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zSql);
  sqlite3_free(zV2);
  /* after the lease (and the TTL) it goes */
  ck_assert_int_eq(kvv_wait_records(db, 0), 0);
  ck_assert_int_ge(kvv_now_ms(), t0+1500);
  zV2 = kvv_version(db, "t", "'a'");
  ck_assert_str_ne(zV2, zV);
  sqlite3_free(zV); sqlite3_free(zV2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A lease survives the TTL being turned off and on again with a lower
** value: turning TTL on leases records for the new TTL from then, but
** never shortens the lease they already had. */
START_TEST(test_kvv_ttl_lease_survives_ttl_off_and_on){
  char *zDir = th_tmpdir("kvv-lease-offon");
  sqlite3 *db = kvv_db();
  char *zV, *zV2;
  int64_t t0;
  kvv_mk(db, "t", zDir, 0);
  kvv_ttl(db, "{\"key_version_ttl_ms\":60000,\"key_version_ttl_poll_ms\":1}");
  t0 = kvv_now_ms();
  zV = kvv_version(db, "t", "'a'");          /* leased for 60 s */
  kvv_ttl(db, "{\"key_version_ttl_ms\":0}");
  kvv_ttl(db, "{\"key_version_ttl_ms\":1}");
  sqlite3_free(kvv_version(db, "t", "'b'"));  /* leased for 1 ms */
  while( kvv_metric(db, "key_version_cache_record_count",
                    "{\"table\":\"t\"}")>1 && kvv_now_ms()<t0+5000 ){
    usleep(2000);                            /* 'b' goes ... */
  }
  usleep(50000);                             /* ... and 'a' stays */
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), 1);
  ck_assert_int_lt(kvv_now_ms(), t0+60000);
  zV2 = kvv_version(db, "t", "'a'");
  ck_assert_str_eq(zV2, zV);
  sqlite3_free(zV); sqlite3_free(zV2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvv_ttl_raised_ttl_keeps_records_longer){
  char *zDir = th_tmpdir("kvv-raise");
  sqlite3 *db = kvv_db();
  char *zV, *zV2;
  int64_t t0, tRaised;
  kvv_mk(db, "t", zDir, 0);
  kvv_ttl(db, "{\"key_version_ttl_ms\":100,\"key_version_ttl_poll_ms\":1}");
  t0 = kvv_now_ms();
  zV = kvv_version(db, "t", "'a'");          /* leased for 100 ms */
  kvv_ttl(db, "{\"key_version_ttl_ms\":400}");
  tRaised = kvv_now_ms();
  usleep(200000);                            /* past the lease */
  zV2 = kvv_version(db, "t", "'a'");
  /* raised while the record was there (a stall before the raise can
  ** let the lease run out first): it stays 400 ms from its stamp */
  if( tRaised < t0+100 && kvv_now_ms() < t0+400 ){
    ck_assert_str_eq(zV2, zV);
  }
  sqlite3_free(zV2);
  ck_assert_int_eq(kvv_wait_records(db, 0), 0);
  ck_assert_int_ge(kvv_now_ms(), t0+400);
  sqlite3_free(zV);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Under a busy workload some transaction is bound to the table at every
** moment, each one short.  Records that expired before all of them bound
** must still go: only a transaction that bound before a record expired
** keeps it.  h0 bound before the churn and stays open, so the records it
** may have seen stay until it ends. */
START_TEST(test_kvv_ttl_evicts_under_a_busy_workload){
  char *zDir = th_tmpdir("kvv-busy");
  sqlite3 *db = kvv_db();
  sqlite3_int64 n = -1, hOld, hNew, h0;
  int64_t tEnd;
  char *zSql;
  kvv_mk(db, "t", zDir, 0);
  kvv_mk(db, "u", zDir, 0);
  kvv_ttl(db, "{\"key_version_ttl_ms\":20,\"key_version_ttl_poll_ms\":1}");
  h0 = th_int(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(%lld, 'u', 'x', 1)", h0);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  ck_assert_int_eq(th_int(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
      "SELECT i+1 FROM c WHERE i<300) SELECT count(*) FROM c, "
      "kv_query_with_version('u', 'u'||c.i)"), 300);
  ck_assert_int_eq(th_int(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
      "SELECT i+1 FROM c WHERE i<300) SELECT count(*) FROM c, "
      "kv_query_with_version('t', 'k'||c.i)"), 300);
  hOld = th_int(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(%lld, 't', 'busy', 0)", hOld);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  tEnd = kvv_now_ms() + 5000;
  while( n!=0 && kvv_now_ms()<tEnd ){
    /* the next transaction binds before the previous one ends */
    hNew = th_int(db, "SELECT kv_begin()");
    zSql = sqlite3_mprintf("SELECT kv_put(%lld, 't', 'busy', 0); "
                           "SELECT kv_rollback(%lld)", hNew, hOld);
    th_exec(db, zSql);
    sqlite3_free(zSql);
    hOld = hNew;
    usleep(2000);
    n = kvv_metric(db, "key_version_cache_record_count", "{\"table\":\"t\"}");
  }
  ck_assert_msg(n==0, "%lld records of t left under load", (long long)n);
  /* u's records expired while h0, bound before them, was open: kept */
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"u\"}"), 300);
  zSql = sqlite3_mprintf("SELECT kv_rollback(%lld), kv_rollback(%lld)",
                         hOld, h0);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  kvv_ttl(db, "{\"key_version_ttl_ms\":1}");
  ck_assert_int_eq(kvv_wait_u(db), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ----------------------------------------------------------- metrics --- */

START_TEST(test_kvv_metrics_count_calls_and_transactions){
  char *zDir = th_tmpdir("kvv-metrics");
  sqlite3 *db = kvv_db();
  sqlite3_int64 q0, qf0, p0, pf0, c0, cf0, cr0, cl0;
  kvv_mk(db, "t", zDir, 0);
  q0 = kvv_metric(db, "key_version_query_calls", "{\"result\":\"success\"}");
  qf0 = kvv_metric(db, "key_version_query_calls", "{\"result\":\"failure\"}");
  p0 = kvv_metric(db, "key_version_2pc_calls",
                  "{\"phase\":\"prepare\",\"result\":\"success\"}");
  pf0 = kvv_metric(db, "key_version_2pc_calls",
                   "{\"phase\":\"prepare\",\"result\":\"failure\"}");
  c0 = kvv_metric(db, "key_version_2pc_calls",
                  "{\"phase\":\"commit\",\"result\":\"success\"}");
  cf0 = kvv_metric(db, "key_version_2pc_calls",
                   "{\"phase\":\"commit\",\"result\":\"failure\"}");
  cr0 = kvv_metric(db, "transaction_lifecycle", "{\"event\":\"created\"}");
  cl0 = kvv_metric(db, "transaction_lifecycle", "{\"event\":\"closed\"}");
  th_exec(db, "SELECT * FROM kv_query_with_version('t', 1)");
  th_try(db, "SELECT * FROM kv_query_with_version('nosuch', 1)", 0);
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1,'t',1,1)");
  th_try(db, "SELECT kv_prepare_with_version(1, 'bad')", 0);
  th_try(db, "SELECT kv_commit_with_version(1)", 0);    /* not prepared */
  th_exec(db, "SELECT kv_prepare_with_version(1, '[]'), "
              "kv_commit_with_version(1)");
  ck_assert_int_eq(kvv_metric(db, "key_version_query_calls",
                              "{\"result\":\"success\"}"), q0+1);
  ck_assert_int_eq(kvv_metric(db, "key_version_query_calls",
                              "{\"result\":\"failure\"}"), qf0+1);
  ck_assert_int_eq(kvv_metric(db, "key_version_2pc_calls",
      "{\"phase\":\"prepare\",\"result\":\"success\"}"), p0+1);
  ck_assert_int_eq(kvv_metric(db, "key_version_2pc_calls",
      "{\"phase\":\"prepare\",\"result\":\"failure\"}"), pf0+1);
  ck_assert_int_eq(kvv_metric(db, "key_version_2pc_calls",
      "{\"phase\":\"commit\",\"result\":\"success\"}"), c0+1);
  ck_assert_int_eq(kvv_metric(db, "key_version_2pc_calls",
      "{\"phase\":\"commit\",\"result\":\"failure\"}"), cf0+1);
  ck_assert_int_ge(kvv_metric(db, "transaction_lifecycle",
                              "{\"event\":\"created\"}"), cr0+1);
  ck_assert_int_ge(kvv_metric(db, "transaction_lifecycle",
                              "{\"event\":\"closed\"}"), cl0+1);
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"t\"}"), 1);
  kvv_fail(db, "INSERT INTO kv_metrics VALUES('x','{}',1,NULL)", "");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------ persistent backends --- */

/* zType = kv_btree or kv_log (loop index 0 or 1). */
static const char *const azAllType[] = { "kv_memory", "kv_btree", "kv_log" };

/* Prepare a versioned write of zTab/'w' with read set zTab/zKey at zVer;
** 1 if it committed, 0 if it failed with exactly one version_mismatch on
** that key (anything else fails the test). */
static int kvv_try_read_set(sqlite3 *db, const char *zTab, const char *zKey,
                            const char *zVer){
  sqlite3_int64 h = th_int(db, "SELECT kv_begin()");
  char *zSql = sqlite3_mprintf("SELECT kv_put(%lld, %Q, 'w', 1), "
      "kv_prepare_with_version(%lld, json_array(json_object('table', %Q, "
      "'key', %Q, 'version', %Q)))", h, zTab, h, zTab, zKey, zVer);
  int rc = th_try(db, zSql, 0);
  sqlite3_free(zSql);
  if( rc==SQLITE_OK ){
    zSql = sqlite3_mprintf("SELECT kv_commit_with_version(%lld)", h);
  }else{
    char *zWant = sqlite3_mprintf("%s|%s|version_mismatch", zTab, zKey);
    ck_assert_int_eq(sqlite3_extended_errcode(db), SQLITE_BUSY_SNAPSHOT);
    zSql = sqlite3_mprintf("SELECT \"table\"||'|'||key||'|'||kind AS x "
                           "FROM kv_conflicts(%lld)", h);
    kvv_rows_eq(db, zSql, zWant);
    sqlite3_free(zSql);
    sqlite3_free(zWant);
    zSql = sqlite3_mprintf("SELECT kv_rollback(%lld)", h);
  }
  th_exec(db, zSql);
  sqlite3_free(zSql);
  return rc==SQLITE_OK;
}

/* Ordinary SQL writes through the virtual table give every key they write
** that has a version record a new version, of the right kind, one id per
** commit, on every backend; a cache holding the version from before fails
** with version_mismatch, the current one commits. */
START_TEST(test_kvv_ordinary_sql_writes_advance_versions){
  char *zDir = th_tmpdir("kvv-sqlmix");
  sqlite3 *db = kvv_db();
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING %s",
                               azAllType[_i]);
  char *zA0, *zA1, *zA2, *zA3, *zB0, *zB1, *zC0, *zC1;
  th_exec(db, zSql);
  sqlite3_free(zSql);
  th_exec(db, "INSERT INTO t VALUES('a', 1), ('b', 2)");
  zA0 = kvv_version(db, "t", "'a'");
  th_exec(db, "UPDATE t SET value=value+1 WHERE key='a'");
  zA1 = kvv_version(db, "t", "'a'");
  ck_assert_str_ne(zA0, zA1);
  ck_assert_msg(zA1[0]=='u', "%s", zA1);
  ck_assert_int_eq(kvv_try_read_set(db, "t", "a", zA0), 0);
  th_exec(db, "DELETE FROM t WHERE key='a'");
  zA2 = kvv_version(db, "t", "'a'");
  ck_assert_msg(zA2[0]=='d' && strcmp(zA2+2, zA1+2)!=0, "%s", zA2);
  ck_assert_int_eq(kvv_try_read_set(db, "t", "a", zA1), 0);
  th_exec(db, "INSERT INTO t VALUES('a', 5)");
  zA3 = kvv_version(db, "t", "'a'");
  ck_assert_msg(zA3[0]=='u' && strcmp(zA3+2, zA2+2)!=0, "%s", zA3);
  /* a key change is a delete of the old key and an upsert of the new one,
  ** and one SQL transaction gives all its keys one id */
  zB0 = kvv_version(db, "t", "'b'");
  zC0 = kvv_version(db, "t", "'c'");
  th_exec(db, "BEGIN; UPDATE t SET key='c' WHERE key='b'; "
              "UPDATE t SET value=6 WHERE key='a'; COMMIT");
  zB1 = kvv_version(db, "t", "'b'");
  zC1 = sqlite3_mprintf("u:%s", zB1+2);
  ck_assert_msg(zB1[0]=='d' && strcmp(zB1, zB0)!=0, "%s", zB1);
  kvv_text_eq(db, "SELECT version FROM kv_query_with_version('t', 'c')", zC1);
  kvv_text_eq(db, "SELECT version FROM kv_query_with_version('t', 'a')", zC1);
  ck_assert_int_eq(kvv_try_read_set(db, "t", "c", zC0), 0);
  ck_assert_int_eq(kvv_try_read_set(db, "t", "c", zC1), 1);
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('t', 'c')", "2");
  sqlite3_free(zA0); sqlite3_free(zA1); sqlite3_free(zA2); sqlite3_free(zA3);
  sqlite3_free(zB0); sqlite3_free(zB1); sqlite3_free(zC0); sqlite3_free(zC1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

static const char *const azPersistType[] = { "kv_btree", "kv_log" };

START_TEST(test_kvv_empty_persistent_table_query_and_restart){
  char *zDir = th_tmpdir("kvv-persist");
  sqlite3 *db = kvv_db();
  char *zSql, *zV0, *zV1, *zR, *zV2;
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE b USING %s",
                         azPersistType[_i]);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  /* a new table (no physical table yet) is logically empty */
  kvv_text_eq(db, "SELECT quote(value) FROM kv_query_with_version('b', 1)",
              "NULL");
  zV0 = kvv_version(db, "b", "1");
  ck_assert_msg(strncmp(zV0, "d:", 2)==0, "%s", zV0);
  th_exec(db, "SELECT kv_begin()");
  th_exec(db, "SELECT kv_put(1, 'b', 1, 'one'), kv_put(1, 'b', 2, 'two')");
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, "
      "'[{\"table\":\"b\",\"key\":1,\"version\":\"%s\"}]')", zV0);
  ck_assert_int_eq(th_int(db, zSql), 1);
  sqlite3_free(zSql);
  zR = th_text(db, "SELECT kv_commit_with_version(1)");
  zSql = sqlite3_mprintf("SELECT group_concat(json_extract(value,'$.key')||"
      "json_extract(value,'$.op'), ' ') FROM json_each(%Q)", zR);
  kvv_text_eq(db, zSql, "1upsert 2upsert");
  sqlite3_free(zSql);
  zV1 = kvv_version(db, "b", "1");
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('b', 1)", "one");
  ck_assert_msg(strstr(zR, zV1)!=0, "%s lacks %s", zR, zV1);
  sqlite3_close(db);
  /* the data survives a restart, the versions do not */
  db = kvv_db();
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('b', 1)", "one");
  zV2 = kvv_version(db, "b", "1");
  ck_assert_str_ne(zV1, zV2);
  ck_assert_msg(strncmp(zV2, "u:", 2)==0, "%s", zV2);
  sqlite3_free(zV0); sqlite3_free(zV1); sqlite3_free(zV2); sqlite3_free(zR);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A checksum (FNV-1a) of the names and bytes of the root WAL segments of
** kvv_open(zDir)'s store: segments are preallocated, so their sizes do not
** show an append, their contents do. */
static sqlite3_uint64 kvv_wal_sum(const char *zDir){
  char *zWal = sqlite3_mprintf("%s/main.db-kv/wal", zDir);
  DIR *d = opendir(zWal);
  struct dirent *e;
  sqlite3_uint64 h = 14695981039346656037ULL;
  ck_assert_ptr_nonnull(d);
  while( (e = readdir(d))!=0 ){
    char *zPath = sqlite3_mprintf("%s/%s", zWal, e->d_name);
    FILE *f = e->d_name[0]!='.' ? fopen(zPath, "rb") : 0;
    const char *z;
    int c;
    for(z=e->d_name; *z; z++) h = (h ^ (unsigned char)*z)*1099511628211ULL;
    while( f && (c = getc(f))!=EOF ) h = (h ^ (unsigned)c)*1099511628211ULL;
    if( f ) fclose(f);
    sqlite3_free(zPath);
  }
  closedir(d);
  sqlite3_free(zWal);
  return h;
}

/* The transaction-id half of a version text (its last 16 hex digits). */
static sqlite3_uint64 kvv_version_id(const char *zVer){
  ck_assert_int_eq((int)strlen(zVer), 34);
  return (sqlite3_uint64)strtoull(zVer+18, 0, 16);
}

/* The protocol errors of a handle name the handle the caller holds (as
** kv_begin() returned it, here bound as a double the way JavaScript binds
** numbers), not the store-wide transaction id behind it, which the caller
** never sees: after ten other transactions, handle 1 is transaction 11. */
START_TEST(test_kvv_protocol_errors_name_the_callers_handle){
  char *zDir = th_tmpdir("kvv-errhandle");
  sqlite3 *db = kvv_db();
  sqlite3_stmt *pStmt;
  char *zRec;
  int i;
  static const struct { const char *zSql; const char *zLike; } aCase[] = {
    { "SELECT kv_prepare_with_version(?, '[]')",
      "kv_prepare_with_version needs a transaction that writes "
      "(transaction handle 1 writes nothing" },
    { "SELECT kv_get(?, 't', 'a'), kv_put(?, 't', 'a', 2)", 0 },
    { "SELECT kv_prepare_with_version(?, '[]')",
      "kv: transaction handle 1 uses the ordinary protocol" },
    { "SELECT kv_commit_with_version(?)",
      "kv: transaction handle 1 is not prepared with" },
  };
  kvv_mk(db, "t", zDir, 1);
  for(i=0; i<10; i++) th_exec(db, "INSERT OR REPLACE INTO t VALUES('a', 1)");
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 1);
  for(i=0; i<(int)(sizeof(aCase)/sizeof(aCase[0])); i++){
    int rc;
    ck_assert_int_eq(sqlite3_prepare_v2(db, aCase[i].zSql, -1, &pStmt, 0),
                     SQLITE_OK);
    sqlite3_bind_double(pStmt, 1, 1.0);
    sqlite3_bind_double(pStmt, 2, 1.0);
    rc = sqlite3_step(pStmt);
    if( aCase[i].zLike==0 ){
      ck_assert_int_eq(rc, SQLITE_ROW);
    }else{
      ck_assert_int_eq(rc, SQLITE_MISUSE);
      ck_assert_msg(strstr(sqlite3_errmsg(db), aCase[i].zLike)!=0,
                    "%s: '%s' lacks '%s'", aCase[i].zSql, sqlite3_errmsg(db),
                    aCase[i].zLike);
    }
    sqlite3_finalize(pStmt);
  }
  th_exec(db, "SELECT kv_rollback(1)");
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 2);
  th_exec(db, "SELECT kv_put(2, 't', 'b', 1)");
  th_exec(db, "SELECT kv_prepare_with_version(2, '[]')");
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_commit(2)", "kv: transaction "
                            "handle 2 was prepared with kv_prepare_with_version;"
                            " finish it with kv_commit_with_version"),
                   SQLITE_MISUSE);
  zRec = th_text(db, "SELECT kv_commit_with_version(2)");
  ck_assert_msg(zRec && strstr(zRec, "\"key\":\"b\"")!=0, "receipts %s",
                zRec ? zRec : "NULL");
  sqlite3_free(zRec);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A handle that is not an integer is SQLITE_MISMATCH in the versioned
** functions and kv_conflicts too, as in kv_commit and the other kv_*
** functions; an unknown one stays SQLITE_ERROR. */
START_TEST(test_kvv_non_integer_handle_is_a_mismatch_everywhere){
  char *zDir = th_tmpdir("kvv-mismatch");
  sqlite3 *db = kvv_db();
  int i;
  static const struct { const char *zSql; int rc; } aCase[] = {
    { "SELECT kv_commit('1')", SQLITE_MISMATCH },
    { "SELECT kv_prepare_with_version('1', '[]')", SQLITE_MISMATCH },
    { "SELECT kv_prepare_with_version(1.5, '[]')", SQLITE_MISMATCH },
    { "SELECT kv_commit_with_version(x'01')", SQLITE_MISMATCH },
    { "SELECT * FROM kv_conflicts('1')", SQLITE_MISMATCH },
    { "SELECT * FROM kv_conflicts(1.5)", SQLITE_MISMATCH },
    { "SELECT kv_prepare_with_version(7, '[]')", SQLITE_ERROR },
    { "SELECT * FROM kv_conflicts(7)", SQLITE_ERROR },
  };
  kvv_mk(db, "t", zDir, 0);
  sqlite3_extended_result_codes(db, 1);
  for(i=0; i<(int)(sizeof(aCase)/sizeof(aCase[0])); i++){
    int rc = kvv_fail(db, aCase[i].zSql, "transaction handle");
    ck_assert_msg(rc==aCase[i].rc, "%s: code %d, want %d", aCase[i].zSql, rc,
                  aCase[i].rc);
  }
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A versioned prepare refused because the handle already used the
** ordinary protocol allocates no id and writes nothing to the WAL: the
** next first observation takes the very next id, and the WAL's bytes are
** unchanged. */
START_TEST(test_kvv_refused_mix_allocates_no_id_and_writes_no_wal){
  char *zDir = th_tmpdir("kvv-mixwal");
  sqlite3 *db = kvv_db();
  char *zV1, *zV2;
  sqlite3_uint64 nWal;
  kvv_mk(db, "t", zDir, 1);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  th_exec(db, "SELECT kv_begin(); SELECT kv_get(1, 't', 'a'), "
              "kv_put(1, 't', 'a', 2), kv_put(1, 't', 'b', 2)");
  zV1 = kvv_version(db, "t", "'m1'");              /* takes id N */
  nWal = kvv_wal_sum(zDir);
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_prepare_with_version(1, '[]')",
                            "cannot be mixed"), SQLITE_MISUSE);
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_prepare_with_version(1, "
      "'[{\"table\":\"t\",\"key\":\"a\",\"version\":"
      "\"u:00000000000000000000000000000001\"}]')", "cannot be mixed"),
      SQLITE_MISUSE);
  zV2 = kvv_version(db, "t", "'m2'");              /* must take id N+1 */
  ck_assert_msg(kvv_version_id(zV2)==kvv_version_id(zV1)+1, "%s then %s",
                zV1, zV2);
  ck_assert_msg(kvv_wal_sum(zDir)==nWal, "the refused prepare wrote the WAL");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "1");
  th_exec(db, "SELECT kv_commit(1)");               /* still ordinary */
  ck_assert_msg(kvv_wal_sum(zDir)!=nWal, "the commit did not write the WAL");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='b'", "2");
  sqlite3_free(zV1); sqlite3_free(zV2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A blob key in a read set is {"hex":".."} (either case of hex digits):
** the current version commits, a stale one is a version_mismatch row
** whose key is the blob, on every backend. */
START_TEST(test_kvv_blob_key_read_set_matches_by_bytes){
  char *zDir = th_tmpdir("kvv-blobread");
  sqlite3 *db = kvv_db();
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING %s",
                               azAllType[_i]);
  char *zV, *zR;
  th_exec(db, zSql);
  sqlite3_free(zSql);
  th_exec(db, "INSERT INTO t VALUES(x'00ff', 1)");
  zV = kvv_version(db, "t", "x'00ff'");
  th_exec(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(1, 't', x'00ff', 2), "
      "kv_prepare_with_version(1, '[{\"table\":\"t\",\"key\":{\"hex\":"
      "\"00FF\"},\"version\":\"%s\"}]')", zV);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  zR = th_text(db, "SELECT kv_commit_with_version(1)");
  zSql = sqlite3_mprintf("SELECT json_extract(%Q, '$[0].key.hex')||' '||"
                         "json_extract(%Q, '$[0].op')", zR, zR);
  kvv_text_eq(db, zSql, "00ff upsert");
  sqlite3_free(zSql);
  /* zV is stale now */
  th_exec(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(2, 't', 'w', 1), "
      "kv_prepare_with_version(2, '[{\"table\":\"t\",\"key\":{\"hex\":"
      "\"00ff\"},\"version\":\"%s\"}]')", zV);
  ck_assert_int_eq(kvv_fail(db, zSql, "conflict"), SQLITE_BUSY_SNAPSHOT);
  sqlite3_free(zSql);
  kvv_rows_eq(db, "SELECT quote(key)||'|'||kind AS x FROM kv_conflicts(2)",
              "X'00FF'|version_mismatch");
  th_exec(db, "SELECT kv_rollback(2)");
  kvv_text_eq(db, "SELECT value FROM t WHERE key=x'00ff'", "2");
  sqlite3_free(zV); sqlite3_free(zR);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A record's TTL counts from its first observation or its last commit
** publication only: a cache hit, a prepare naming it and a rollback
** shortly before it expires do not extend it (t.a goes at its first
** deadline), while a commit writing u.b gives it a full TTL from then.
** t.c, observed just after t.a and never touched, is the yardstick: the
** sweeper takes a table's records in observation order, so without a
** refresh t.a is gone once t.c is, however late the sweeper runs. */
START_TEST(test_kvv_ttl_refreshes_only_on_observation_and_commit){
  char *zDir = th_tmpdir("kvv-refresh");
  sqlite3 *db = kvv_db();
  char *zVa, *zVb, *zR, *zSql, *zNow, *zErr = 0;
  sqlite3_int64 h, n;
  int64_t t0, tEnd, tCommit;
  int rc;
  kvv_mk(db, "t", zDir, 0);
  kvv_mk(db, "u", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1); INSERT INTO u VALUES('b', 1)");
  kvv_ttl(db, "{\"key_version_ttl_ms\":300,\"key_version_ttl_poll_ms\":1}");
  t0 = kvv_now_ms();
  zVa = kvv_version(db, "t", "'a'");
  sqlite3_free(kvv_version(db, "t", "'c'"));
  zVb = kvv_version(db, "u", "'b'");
  usleep(200000);
  /* t.a: a cache hit, a prepare naming it, a rollback; each must succeed
  ** when it finished before the first deadline (a stall can carry it
  ** past, and a prepare naming an expired version is refused) */
  zNow = kvv_version(db, "t", "'a'");
  if( kvv_now_ms() < t0+300 ) ck_assert_str_eq(zNow, zVa);
  sqlite3_free(zNow);
  h = th_int(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(%lld, 't', 'w', 1), "
      "kv_prepare_with_version(%lld, '[{\"table\":\"t\",\"key\":\"a\","
      "\"version\":\"%s\"}]'), kv_rollback(%lld)", h, h, zVa, h);
  rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc==SQLITE_OK || kvv_now_ms()>=t0+300, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zSql);
  /* u.b: a versioned commit publishes a new version (tCommit is taken
  ** before the publication stamps it) */
  h = th_int(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(%lld, 'u', 'b', 2), "
      "kv_prepare_with_version(%lld, '[]')", h, h);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  tCommit = kvv_now_ms();
  zSql = sqlite3_mprintf("SELECT json_extract(kv_commit_with_version(%lld), "
                         "'$[0].version')", h);
  zR = th_text(db, zSql);
  sqlite3_free(zSql);
  ck_assert_str_ne(zR, zVb);
  /* once t.c has gone, t.a has gone too: reading it observes a new record
  ** (a refresh would have kept the old one until 300 ms after it) */
  tEnd = kvv_now_ms() + 5000;
  while( (n = kvv_metric(db, "key_version_cache_record_count",
                         "{\"table\":\"t\"}"))>1 && kvv_now_ms()<tEnd ){
    usleep(2000);
  }
  ck_assert_int_le(n, 1);
  zNow = kvv_version(db, "t", "'a'");
  ck_assert_msg(strcmp(zNow, zVa)!=0, "t.a outlived t.c: refreshed");
  sqlite3_free(zNow);
  /* u.b keeps the committed version for 300 ms from the commit */
  zNow = kvv_version(db, "u", "'b'");
  if( kvv_now_ms() < tCommit+300 ) ck_assert_str_eq(zNow, zR);
  sqlite3_free(zNow);
  ck_assert_int_eq(kvv_wait_u(db), 0);
  ck_assert_int_ge(kvv_now_ms(), tCommit+300);
  sqlite3_free(zVa); sqlite3_free(zVb); sqlite3_free(zR);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A receipt lost or recorded twice by publication is reported as an
** internal error naming the transaction, never returned as a short or
** padded answer; the commit itself stands. */
START_TEST(test_kvv_receipt_mismatch_is_a_reported_internal_error){
  char *zDir = th_tmpdir("kvv-badreceipt");
  sqlite3 *db = kvv_db();
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1, 't', 'a', 1), "
              "kv_put(1, 't', 'b', 2), kv_delete(1, 't', 'c'), "
              "kv_prepare_with_version(1, '[]')");
  kv_engine_test_fault_receipt(2, _i);
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_commit_with_version(1)",
      "kv: internal error: the receipts of committed transaction"),
      SQLITE_INTERNAL);
  kv_engine_test_fault_receipt(0, 0);
  kvv_fail(db, "SELECT kv_commit_with_version(1)", "is finished");
  kvv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=1 b=2");
  /* the next commit is checked and answered normally */
  th_exec(db, "SELECT kv_begin()");
  kvv_text_eq(db, "SELECT json_array_length(r) FROM (SELECT "
      "kv_put(2, 't', 'a', 3), kv_prepare_with_version(2, '[]'), "
      "kv_commit_with_version(2) AS r)", "1");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A handle prepared with kv_prepare_with_version takes no more operations,
** and the error names the call that finishes it (kv_commit_with_version),
** not kv_commit, which it would refuse. */
static const char *const azAfterVPrepare[] = {
  "SELECT kv_get(1, 't', 'a')", "SELECT kv_put(1, 't', 'b', 1)",
  "SELECT kv_delete(1, 't', 'a')", "SELECT kv_prepare(1)",
  "SELECT kv_prepare_with_version(1, '[]')",
};

START_TEST(test_kvv_prepared_handle_names_kv_commit_with_version){
  char *zDir = th_tmpdir("kvv-afterprep");
  sqlite3 *db = kvv_db();
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1, 't', 'a', 1), "
              "kv_prepare_with_version(1, '[]')");
  ck_assert_int_eq(kvv_fail(db, azAfterVPrepare[_i], "is prepared and takes "
      "no more operations: end it with kv_commit_with_version or "
      "kv_rollback"), SQLITE_MISUSE);
  kvv_text_eq(db, "SELECT json_array_length(kv_commit_with_version(1))", "1");
  kvv_text_eq(db, "SELECT value FROM t WHERE key='a'", "1");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* kv_query_with_version(s) create no transaction, and neither does a pure
** scan: transaction_lifecycle counts only kv_begin handles and SQL
** writes, each created once and closed once. */
START_TEST(test_kvv_queries_and_scans_create_no_transaction){
  char *zDir = th_tmpdir("kvv-notxn");
  sqlite3 *db = kvv_db();
  sqlite3_int64 cr0, cl0;
  int i;
  kvv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 1)");
  cr0 = kvv_metric(db, "transaction_lifecycle", "{\"event\":\"created\"}");
  cl0 = kvv_metric(db, "transaction_lifecycle", "{\"event\":\"closed\"}");
  for(i=0; i<5; i++){
    th_exec(db, "SELECT * FROM kv_query_with_version('t', 1); "
                "SELECT * FROM kv_query_with_versions('t', '[1, 2]'); "
                "SELECT count(*) FROM t");
  }
  ck_assert_int_eq(kvv_metric(db, "transaction_lifecycle",
                              "{\"event\":\"created\"}"), cr0);
  th_exec(db, "SELECT kv_begin()");
  ck_assert_int_eq(kvv_metric(db, "transaction_lifecycle",
                              "{\"event\":\"created\"}"), cr0+1);
  ck_assert_int_eq(kvv_metric(db, "transaction_lifecycle",
                              "{\"event\":\"closed\"}"), cl0);
  th_exec(db, "SELECT kv_rollback(1); INSERT INTO t VALUES(2, 2)");
  ck_assert_int_eq(kvv_metric(db, "transaction_lifecycle",
                              "{\"event\":\"created\"}"), cr0+2);
  ck_assert_int_eq(kvv_metric(db, "transaction_lifecycle",
                              "{\"event\":\"closed\"}"), cl0+2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* kv_conflicts orders tables by the bytes of their names ('B' < 'a' <
** 'ab', whatever the backend) and keys by their encoding (numbers by
** value, then text by bytes, then blobs). */
START_TEST(test_kvv_conflicts_sort_tables_by_bytes_and_keys_by_type){
  static const char *azKey[][2] = {          /* SQL literal, JSON */
    { "'k'", "\"k\"" }, { "x'01'", "{\"hex\":\"01\"}" }, { "2", "2" },
    { "'K'", "\"K\"" }, { "1.5", "1.5" },
  };
  static const char *azTab[][2] = {
    { "ab", "kv_memory" }, { "a", "kv_btree" }, { "B", "kv_log" },
  };
  char *zDir = th_tmpdir("kvv-conflictorder");
  sqlite3 *db = kvv_db();
  char *zRs = 0;
  char *zSql;
  size_t i, j;
  for(i=0; i<3; i++){
    zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE \"%w\" USING %s",
                           azTab[i][0], azTab[i][1]);
    th_exec(db, zSql);
    sqlite3_free(zSql);
  }
  for(i=0; i<3; i++){
    for(j=0; j<5; j++){
      char *zV = kvv_version(db, azTab[i][0], azKey[j][0]);
      char *zE = kvv_elem(azTab[i][0], azKey[j][1], zV);
      zRs = sqlite3_mprintf("%z%s%s", zRs, zRs ? "," : "[", zE);
      ck_assert_ptr_nonnull(zRs);
      sqlite3_free(zE); sqlite3_free(zV);
      zSql = sqlite3_mprintf("INSERT INTO \"%w\" VALUES(%s, 1)", azTab[i][0],
                             azKey[j][0]);
      th_exec(db, zSql);
      sqlite3_free(zSql);
    }
  }
  zRs = sqlite3_mprintf("%z]", zRs);
  th_exec(db, "SELECT kv_begin(), kv_put(1, 'ab', 'w', 1)");
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, %Q)", zRs);
  ck_assert_int_eq(kvv_fail(db, zSql, "on 15 keys: B key 1.5, B key 2, "
                            "B key 'K', B key 'k', B key x'01', a key 1.5"),
                   SQLITE_BUSY_SNAPSHOT);
  sqlite3_free(zSql);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_conflicts(1) "
                   "WHERE kind='version_mismatch'"), 15);
  kvv_rows_eq(db, "SELECT \"table\"||'|'||quote(key) AS x FROM kv_conflicts(1)",
      "B|1.5 B|2 B|'K' B|'k' B|X'01' a|1.5 a|2 a|'K' a|'k' a|X'01' "
      "ab|1.5 ab|2 ab|'K' ab|'k' ab|X'01'");
  sqlite3_free(zRs);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Removing a table drops its version records (its kv_metrics rows go);
** a table re-created under the same name starts with none, so a version
** read from the old table never matches the new one. */
START_TEST(test_kvv_recreated_table_starts_without_versions){
  char *zDir = th_tmpdir("kvv-recreate");
  sqlite3 *db = kvv_db();
  char *zSql, *zOld, *zNew;
  zSql = sqlite3_mprintf("SELECT kv_begin(); SELECT kv_create_table(1, 'x', "
      "'%s'), kv_put(1, 'x', 'k', 1), kv_commit(1)", azAllType[_i]);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  zOld = kvv_version(db, "x", "'m'");
  sqlite3_free(kvv_version(db, "x", "'k'"));
  ck_assert_int_eq(kvv_metric(db, "key_version_cache_record_count",
                              "{\"table\":\"x\"}"), 2);
  th_exec(db, "SELECT kv_begin(); SELECT kv_remove_table(2, 'x'), "
              "kv_commit(2)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_metrics WHERE "
                   "labels='{\"table\":\"x\"}'"), 0);
  zSql = sqlite3_mprintf("SELECT kv_begin(); SELECT kv_create_table(3, 'x', "
      "'%s'), kv_commit(3)", azAllType[_i]);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  kvv_rows_eq(db, "SELECT value AS x FROM kv_metrics WHERE "
              "labels='{\"table\":\"x\"}'", "0 0");
  zNew = kvv_version(db, "x", "'m'");
  ck_assert_str_ne(zNew, zOld);
  th_exec(db, "SELECT kv_begin()");
  zSql = sqlite3_mprintf("SELECT kv_put(4, 'x', 'm', 1), "
      "kv_prepare_with_version(4, '[{\"table\":\"x\",\"key\":\"m\","
      "\"version\":\"%s\"}]')", zOld);
  ck_assert_int_eq(kvv_fail(db, zSql, "x key 'm'"), SQLITE_BUSY_SNAPSHOT);
  sqlite3_free(zSql);
  kvv_rows_eq(db, "SELECT kind AS x FROM kv_conflicts(4)", "version_mismatch");
  sqlite3_free(zOld); sqlite3_free(zNew);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

#define KVV_VIS_COMMITS 150

typedef struct KvvVis KvvVis;
struct KvvVis {
  const char *zStore;
  char azVer[KVV_VIS_COMMITS+1][40];   /* version of commit i's writes */
  int bGo;                             /* the reader has read (atomic) */
  int bDone;
  int rc;
};

/* Commit a=i, b=i (a written first) for i = 1..KVV_VIS_COMMITS, keeping
** each commit's version from its receipts. */
static void *kvvVisWriter(void *pArg){
  KvvVis *p = (KvvVis*)pArg;
  sqlite3 *db = 0;
  int i;
  p->rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, 0);
  /* start once the reader reads (it could otherwise start late enough to
  ** find every commit done) */
  while( !__atomic_load_n(&p->bGo, __ATOMIC_SEQ_CST) ) usleep(100);
  for(i=1; p->rc==SQLITE_OK && i<=KVV_VIS_COMMITS; i++){
    char *zSql = sqlite3_mprintf("SELECT json_extract(kv_commit_with_version("
        "h), '$[0].version') FROM (SELECT h FROM (SELECT kv_begin(%Q) AS h) "
        "WHERE kv_put(h, 'a', 'k', %d) AND kv_put(h, 'b', 'k', %d) AND "
        "kv_prepare_with_version(h, '[]'))", p->zStore, i, i);
    sqlite3_stmt *pStmt = 0;
    p->rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
    if( p->rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
      snprintf(p->azVer[i], sizeof(p->azVer[i]), "%s",
               (const char*)sqlite3_column_text(pStmt, 0));
    }
    if( p->rc==SQLITE_OK ) p->rc = sqlite3_finalize(pStmt);
    sqlite3_free(zSql);
  }
  sqlite3_close(db);
  __atomic_store_n(&p->bDone, 1, __ATOMIC_SEQ_CST);
  return 0;
}

/* One kv_query_with_version of zTab/'k': its value and version. */
static void kvv_read_k(sqlite3_stmt *pStmt, int *piVal, char *zVer){
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  *piVal = sqlite3_column_int(pStmt, 0);
  snprintf(zVer, 40, "%s", (const char*)sqlite3_column_text(pStmt, 1));
  ck_assert_int_eq(sqlite3_reset(pStmt), SQLITE_OK);
}

/* While transactions writing a then b commit, a reader that reads b and
** then a never sees b ahead of a (tables become visible in commit order),
** and every value comes with the version its commit published (value and
** version are one step per table). */
START_TEST(test_kvv_values_and_versions_become_visible_together_in_order){
  char *zDir = th_tmpdir("kvv-visible");
  sqlite3 *db = kvv_db();
  sqlite3_stmt *pA = 0, *pB = 0;
  KvvVis *p = sqlite3_malloc64(sizeof(KvvVis));
  static int aSeenA[KVV_VIS_COMMITS+1];
  static char azSeenA[KVV_VIS_COMMITS+1][40];
  static int aSeenB[KVV_VIS_COMMITS+1];
  static char azSeenB[KVV_VIS_COMMITS+1][40];
  pthread_t thr;
  int i, nRead = 0;
  ck_assert_ptr_nonnull(p);
  memset(p, 0, sizeof(*p));
  kvv_mk(db, "a", zDir, 0);
  kvv_mk(db, "b", zDir, 0);
  th_exec(db, "INSERT INTO a VALUES('k', 0); INSERT INTO b VALUES('k', 0)");
  sqlite3_free(kvv_version(db, "a", "'k'"));
  sqlite3_free(kvv_version(db, "b", "'k'"));
  p->zStore = kvv_store(zDir);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT value, version FROM "
      "kv_query_with_version('a', 'k')", -1, &pA, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT value, version FROM "
      "kv_query_with_version('b', 'k')", -1, &pB, 0), SQLITE_OK);
  pthread_create(&thr, 0, kvvVisWriter, p);
  while( !__atomic_load_n(&p->bDone, __ATOMIC_SEQ_CST) ){
    int va, vb;
    char zVa[40], zVb[40];
    kvv_read_k(pB, &vb, zVb);
    kvv_read_k(pA, &va, zVa);
    ck_assert_msg(va>=vb, "b showed commit %d before a (a at %d)", vb, va);
    if( va>0 && !aSeenA[va] ){
      aSeenA[va] = 1;
      memcpy(azSeenA[va], zVa, 40);
    }
    if( vb>0 && !aSeenB[vb] ){
      aSeenB[vb] = 1;
      memcpy(azSeenB[vb], zVb, 40);
    }
    nRead++;
    __atomic_store_n(&p->bGo, 1, __ATOMIC_SEQ_CST);
  }
  pthread_join(thr, 0);
  ck_assert_int_eq(p->rc, SQLITE_OK);
  ck_assert_int_gt(nRead, 0);
  for(i=1; i<=KVV_VIS_COMMITS; i++){
    ck_assert_int_eq((int)strlen(p->azVer[i]), 34);
    if( aSeenA[i] ) ck_assert_str_eq(azSeenA[i], p->azVer[i]);
    if( aSeenB[i] ) ck_assert_str_eq(azSeenB[i], p->azVer[i]);
  }
  sqlite3_finalize(pA); sqlite3_finalize(pB);
  sqlite3_free((char*)p->zStore);
  sqlite3_free(p);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* On a connection opened read-only versions are read, a handle (which
** can write nothing)
** gets the usual answer of kv_prepare_with_version for a transaction that
** writes nothing, and nothing reaches the WAL. */
START_TEST(test_kvv_readonly_connection_checks_read_sets){
  char *zDir = th_tmpdir("kvv-ro-read");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zUri = sqlite3_mprintf("file:%s?mode=ro", zDb);
  sqlite3 *db = kvv_db();
  char *zV, *zE, *zSql;
  sqlite3_uint64 nSum;
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree;"
              "INSERT INTO t VALUES(1,'a')");
  sqlite3_close(db);
  nSum = kvv_wal_sum(zDir);
  db = th_open(zUri);
  kvv_text_eq(db, "SELECT value FROM kv_query_with_version('t', 1)", "a");
  zV = kvv_version(db, "t", "1");
  zE = kvv_elem("t", "1", zV);
  ck_assert_int_eq(th_int(db, "SELECT kv_begin()"), 1);
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, '[%s]')", zE);
  ck_assert_int_eq(kvv_fail(db, zSql, "kv: kv_prepare_with_version needs a "
                            "transaction that writes"), SQLITE_MISUSE);
  ck_assert_int_eq(kvv_fail(db, "SELECT kv_put(1, 't', 2, 'b')",
                            "on a read-only connection"), SQLITE_READONLY);
  kvv_rows_eq(db, "SELECT key||'='||coalesce(value,'-') AS x FROM "
                  "kv_query_with_versions('t', '[1,2]')", "1=a 2=-");
  ck_assert_int_eq(th_int(db, "SELECT kv_rollback(1)"), 1);
  sqlite3_close(db);
  ck_assert(kvv_wal_sum(zDir)==nSum);
  sqlite3_free(zSql);
  sqlite3_free(zE);
  sqlite3_free(zV);
  sqlite3_free(zUri);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A read-only connection reads the store options and sets none: they
** govern how every connection of the process writes the store (its WAL
** segments, .bak files, version TTL), so setting them is a write. */
START_TEST(test_kvv_readonly_connection_cannot_set_store_options){
  char *zDir = th_tmpdir("kvv-ro-opts");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zUri = sqlite3_mprintf("file:%s?mode=ro", zDb);
  sqlite3 *db = kvv_db(), *ro;
  char *zBefore, *zAfter;
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree;"
              "INSERT INTO t VALUES(1,'a')");
  zBefore = th_text(db, "SELECT kv_store_options()");
  ro = th_open(zUri);
  kvv_text_eq(ro, "SELECT kv_store_options()", zBefore);
  ck_assert_int_eq(kvv_fail(ro, "SELECT kv_store_options(NULL, "
                            "'{\"wal_segment_bytes\":65536}')",
                            "kv: kv_store_options on a read-only connection"),
                   SQLITE_READONLY);
  ck_assert_int_eq(kvv_fail(ro, "SELECT kv_store_options(NULL, "
                            "'{\"key_version_ttl_ms\":5}')",
                            "on a read-only connection"), SQLITE_READONLY);
  /* NULL options only read, as on any connection */
  kvv_text_eq(ro, "SELECT kv_store_options(NULL, NULL)", zBefore);
  zAfter = th_text(db, "SELECT kv_store_options()");
  ck_assert_str_eq(zAfter, zBefore);
  sqlite3_close(ro);
  sqlite3_close(db);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_free(zUri);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvversion");
  TCase *tc = tcase_create("protocol");
  tcase_add_test(tc, test_kvv_query_returns_value_and_a_stable_version);
  tcase_add_test(tc, test_kvv_query_list_matches_single_queries);
  tcase_add_test(tc, test_kvv_handle_bound_as_an_integral_real_works);
  tcase_add_test(tc, test_kvv_long_json_numbers_are_keys);
  tcase_add_loop_test(tc, test_kvv_read_set_number_and_table_forms_match,
                      0, 2);
  tcase_add_test(tc, test_kvv_query_of_a_missing_store_creates_nothing);
  tcase_add_test(tc, test_kvv_store_options_of_a_missing_store_creates_nothing);
  tcase_add_test(tc, test_kvv_version_tables_are_direct_only);
  tcase_add_test(tc, test_kvv_query_argument_columns_return_the_arguments);
  tcase_add_test(tc, test_kvv_versioned_commit_returns_exact_receipts);
  tcase_add_test(tc, test_kvv_stale_version_fails_and_retry_succeeds);
  tcase_add_test(tc, test_kvv_conflict_set_is_complete_sorted_and_deduplicated);
  tcase_add_test(tc, test_kvv_prepared_read_and_written_key_stays_reserved);
  tcase_add_test(tc, test_kvv_prepared_reads_among_writes_are_all_reserved);
  tcase_add_test(tc, test_kvv_many_versions_survive_growth_and_commits);
  tcase_add_test(tc, test_kvv_conflicts_sort_tables_by_bytes_and_keys_by_type);
  tcase_add_test(tc, test_kvv_protocols_cannot_be_mixed);
  tcase_add_test(tc, test_kvv_table_conflict_is_one_row_with_null_key);
  tcase_add_test(tc, test_kvv_stopped_store_refuses_version_queries);
  tcase_add_test(tc, test_kvv_restart_clears_versions);
  tcase_add_test(tc, test_kvv_scan_is_isolated_from_a_versioned_commit);
  tcase_add_test(tc, test_kvv_metrics_count_calls_and_transactions);
  tcase_add_loop_test(tc, test_kvv_empty_persistent_table_query_and_restart,
                      0, 2);
  tcase_add_loop_test(tc, test_kvv_ordinary_sql_writes_advance_versions, 0, 3);
  tcase_add_test(tc, test_kvv_refused_mix_allocates_no_id_and_writes_no_wal);
  tcase_add_test(tc, test_kvv_protocol_errors_name_the_callers_handle);
  tcase_add_test(tc, test_kvv_non_integer_handle_is_a_mismatch_everywhere);
  tcase_add_test(tc, test_kvv_queries_and_scans_create_no_transaction);
  tcase_add_loop_test(tc, test_kvv_recreated_table_starts_without_versions,
                      0, 3);
  tcase_add_loop_test(tc, test_kvv_prepared_handle_names_kv_commit_with_version,
      0, (int)(sizeof(azAfterVPrepare)/sizeof(azAfterVPrepare[0])));
  tcase_add_loop_test(tc, test_kvv_blob_key_read_set_matches_by_bytes, 0, 3);
  tcase_add_loop_test(tc, test_kvv_receipt_mismatch_is_a_reported_internal_error,
                      0, 2);
  tcase_add_test(tc, test_kvv_readonly_connection_checks_read_sets);
  tcase_add_test(tc, test_kvv_readonly_connection_cannot_set_store_options);
  suite_add_tcase(s, tc);
  tc = tcase_create("bad_input");
  tcase_add_loop_test(tc, test_kvv_bad_input_is_rejected_and_changes_nothing,
                      0, (int)(sizeof(aBadV)/sizeof(aBadV[0])));
  suite_add_tcase(s, tc);
  tc = tcase_create("threads");
  tcase_add_test(tc, test_kvv_concurrent_first_observations_publish_one_version);
  tcase_add_test(tc, test_kvv_receipts_exact_under_concurrent_commits);
  tcase_add_test(tc, test_kvv_values_and_versions_become_visible_together_in_order);
  suite_add_tcase(s, tc);
  tc = tcase_create("ttl");
  tcase_add_test(tc, test_kvv_store_options_are_quantised_and_checked);
  tcase_add_test(tc, test_kvv_store_options_reject_malformed_json);
  tcase_add_test(tc, test_kvv_store_options_set_wal_rotation_and_bak);
  tcase_add_test(tc, test_kvv_store_options_wal_bad_values_change_nothing);
  tcase_add_test(tc, test_kvv_ttl_never_expires_early);
  tcase_add_test(tc, test_kvv_ttl_index_stays_bounded_under_churn);
  tcase_add_test(tc, test_kvv_ttl_first_observation_lease_survives_lower_ttl);
  tcase_add_test(tc, test_kvv_ttl_raised_ttl_keeps_records_longer);
  tcase_add_test(tc, test_kvv_ttl_lease_survives_ttl_off_and_on);
  tcase_add_test(tc, test_kvv_ttl_evicts_under_a_busy_workload);
  tcase_add_test(tc, test_kvv_ttl_refreshes_only_on_observation_and_commit);
  suite_add_tcase(s, tc);
  return s;
}
