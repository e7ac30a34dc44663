/*
** check_derived.c -- derived data on KV tables (ext/kv_derived.c): the
** kv_index and kv_counter carriers, their declaration and builds, kv_validate
** and kv_repair.
**
** The oracle test runs a random workload of inserts, updates and deletes
** on a KV source with a multi-entry index, a unique index and a counter,
** and the same on a plain SQLite table with a unique expression index and
** a trigger-maintained counter table, and compares both after every step.
** The kill tests start a child (th_spawn) that writes, or declares a
** carrier on a populated source, kill it with SIGKILL at a random moment,
** and check that the reopened store validates clean (after kv_repair
** completes a build that stopped).
*/
#include "config.h"
#define SQLITE_CORE 1          /* sqlite3ext.h: the struct only, no macros */
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "ext/kv/kv.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const azType[] = { "kv_memory", "kv_btree", "kv_log" };

/* A file database in a new directory (its KV store: the -kv sidecar). */
static sqlite3 *dv_open(const char *zTag, char **pzDir){
  char *zDir = th_tmpdir(zTag);
  char *zPath = sqlite3_mprintf("%s/db", zDir);
  sqlite3 *db = th_open(zPath);
  sqlite3_busy_timeout(db, th_busy_ms(5000));
  sqlite3_free(zPath);
  if( pzDir ) *pzDir = zDir; else sqlite3_free(zDir);
  return db;
}

static void dv_source(sqlite3 *db, const char *zType){
  char *z = sqlite3_mprintf("CREATE VIRTUAL TABLE users USING %s%s", zType,
      strcmp(zType, "kv_memory")==0 ? "(persistence=1)" : "");
  th_exec(db, z);
  sqlite3_free(z);
}

static void dv_carriers(sqlite3 *db){
  th_exec(db,
    "CREATE VIRTUAL TABLE by_tag USING kv_index(source=users, "
    "  expr='json_extract(value, ''$.tags'')');"
    "CREATE VIRTUAL TABLE by_email USING kv_index(source=users, "
    "  expr='json_extract(value, ''$.email'')', unique=1);"
    "CREATE VIRTUAL TABLE by_grp USING kv_counter(source=users, "
    "  group='json_extract(value, ''$.grp'')', "
    "  sum='json_extract(value, ''$.n'')');");
}

/* One row of the random workload. */
static char *dv_row(unsigned *pSeed){
  static const char *azTag[] = { "a", "b", "c", "d" };
  static const char *azGrp[] = { "\"x\"", "\"y\"", "\"z\"", "null" };
  int nTag = rand_r(pSeed)%3, i;
  char *zTags = sqlite3_mprintf("[");
  for(i=0; i<nTag; i++){
    zTags = sqlite3_mprintf("%z%s\"%s\"", zTags, i ? "," : "",
                            azTag[rand_r(pSeed)%4]);
  }
  zTags = sqlite3_mprintf("%z]", zTags);
  return sqlite3_mprintf("{\"email\":\"e%d\",\"tags\":%z,\"grp\":%s,"
      "\"n\":%d}", rand_r(pSeed)%40, zTags, azGrp[rand_r(pSeed)%4],
      rand_r(pSeed)%100);
}

/* The rows of query zSql as one text (rows ';', columns ','). */
static char *dv_dump(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  char *zAll = sqlite3_mprintf("");
  int i, rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  ck_assert_msg(rc==SQLITE_OK, "%s: %s", zSql, sqlite3_errmsg(db));
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    for(i=0; i<sqlite3_column_count(pStmt); i++){
      const char *z = (const char*)sqlite3_column_text(pStmt, i);
      zAll = sqlite3_mprintf("%z%s%s", zAll, i ? "," : "", z ? z : "NULL");
    }
    zAll = sqlite3_mprintf("%z;", zAll);
  }
  ck_assert_msg(rc==SQLITE_DONE, "%s: %s", zSql, sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  return zAll;
}

static void dv_compare(sqlite3 *db, sqlite3 *dbO, int iStep){
  static const char *azPair[][2] = {
    { "SELECT key, source_key FROM by_tag ORDER BY 1, 2",
      "SELECT DISTINCT j.value, o.key FROM ou o, "
      "json_each(o.value, '$.tags') j ORDER BY 1, 2" },
    { "SELECT key, source_key FROM by_email ORDER BY 1",
      "SELECT json_extract(value, '$.email'), key FROM ou ORDER BY 1" },
    { "SELECT key, count, sum FROM by_grp ORDER BY 1",
      "SELECT grp, cnt, total FROM oc WHERE cnt>0 ORDER BY 1" },
    { "SELECT key, value FROM users ORDER BY 1",
      "SELECT key, value FROM ou ORDER BY 1" },
  };
  int i;
  for(i=0; i<4; i++){
    char *zA = dv_dump(db, azPair[i][0]);
    char *zB = dv_dump(dbO, azPair[i][1]);
    ck_assert_msg(strcmp(zA, zB)==0, "step %d, %s:\n kv:     %s\n oracle: %s",
                  iStep, azPair[i][0], zA, zB);
    sqlite3_free(zA);
    sqlite3_free(zB);
  }
}

static sqlite3 *dv_oracle(void){
  sqlite3 *dbO = th_open(":memory:");
  th_exec(dbO,
    "CREATE TABLE ou(key INTEGER PRIMARY KEY, value);"
    "CREATE UNIQUE INDEX ou_email ON ou(json_extract(value, '$.email'));"
    "CREATE TABLE oc(grp PRIMARY KEY, cnt, total);"
    "CREATE TRIGGER ou_i AFTER INSERT ON ou "
    " WHEN json_extract(new.value, '$.grp') IS NOT NULL BEGIN"
    "  INSERT INTO oc VALUES(json_extract(new.value, '$.grp'), 1,"
    "    json_extract(new.value, '$.n'))"
    "  ON CONFLICT(grp) DO UPDATE SET cnt=cnt+1,"
    "    total=total+excluded.total; END;"
    "CREATE TRIGGER ou_d AFTER DELETE ON ou BEGIN"
    "  UPDATE oc SET cnt=cnt-1, total=total-json_extract(old.value, '$.n')"
    "  WHERE grp=json_extract(old.value, '$.grp'); END;"
    "CREATE TRIGGER ou_u AFTER UPDATE ON ou BEGIN"
    "  UPDATE oc SET cnt=cnt-1, total=total-json_extract(old.value, '$.n')"
    "  WHERE grp=json_extract(old.value, '$.grp');"
    "  INSERT INTO oc SELECT json_extract(new.value, '$.grp'), 1,"
    "    json_extract(new.value, '$.n')"
    "    WHERE json_extract(new.value, '$.grp') IS NOT NULL"
    "  ON CONFLICT(grp) DO UPDATE SET cnt=cnt+1,"
    "    total=total+excluded.total; END;");
  return dbO;
}

/* Run zSql with key k and value zV on both; the outcomes must agree. */
static void dv_both(sqlite3 *db, sqlite3 *dbO, const char *zKv,
                    const char *zO, int k, const char *zV, int iStep){
  int rcA, rcB;
  char *zA = sqlite3_mprintf(zKv, k, zV);
  char *zB = sqlite3_mprintf(zO, k, zV);
  char *zErrA = 0, *zErrB = 0;
  rcA = th_try(db, zA, &zErrA);
  rcB = th_try(dbO, zB, &zErrB);
  ck_assert_msg((rcA==SQLITE_OK)==(rcB==SQLITE_OK), "step %d: %s -> %d %s; "
      "oracle %d %s", iStep, zA, rcA, zErrA ? zErrA : "", rcB,
      zErrB ? zErrB : "");
  if( rcA!=SQLITE_OK ){
    ck_assert_msg(sqlite3_extended_errcode(db)==SQLITE_CONSTRAINT_UNIQUE,
                  "step %d: %s", iStep, zErrA);
    ck_assert_ptr_nonnull(strstr(zErrA, "by_email"));
  }
  sqlite3_free(zA); sqlite3_free(zB);
  sqlite3_free(zErrA); sqlite3_free(zErrB);
}

START_TEST(test_derived_random_workload_matches_sqlite_oracle){
  sqlite3 *db = dv_open("derived-oracle", 0), *dbO = dv_oracle();
  unsigned seed = 1000 + (unsigned)_i;
  int i, nStep = th_scaled(_i==0 ? 400 : 200, 10);
  dv_source(db, azType[_i]);
  /* a few rows before the carriers: they are built from them */
  for(i=0; i<5; i++){
    char *zV = sqlite3_mprintf("{\"email\":\"pre%d\",\"tags\":[\"a\"],"
                               "\"grp\":\"x\",\"n\":%d}", i, i);
    dv_both(db, dbO, "INSERT INTO users VALUES(%d, %Q)",
            "INSERT INTO ou VALUES(%d, %Q)", 100+i, zV, -1);
    sqlite3_free(zV);
  }
  dv_carriers(db);
  dv_compare(db, dbO, 0);
  for(i=1; i<=nStep; i++){
    int k = rand_r(&seed)%30, op = rand_r(&seed)%10;
    char *zV = dv_row(&seed);
    int bHas = (int)th_intf(dbO, "SELECT count(*) FROM ou WHERE key=%d", k);
    if( op<2 && bHas ){
      dv_both(db, dbO, "DELETE FROM users WHERE key=%d -- %s",
              "DELETE FROM ou WHERE key=%d -- %s", k, zV, i);
    }else if( bHas ){
      {
        char *zA = sqlite3_mprintf("UPDATE users SET value=%Q WHERE key=%d",
                                   zV, k);
        char *zB = sqlite3_mprintf("UPDATE ou SET value=%Q WHERE key=%d",
                                   zV, k);
        char *zEA = 0, *zEB = 0;
        int rcA = th_try(db, zA, &zEA), rcB = th_try(dbO, zB, &zEB);
        ck_assert_msg((rcA==SQLITE_OK)==(rcB==SQLITE_OK),
                      "step %d: %s -> %s; oracle %s", i, zA,
                      zEA ? zEA : "ok", zEB ? zEB : "ok");
        sqlite3_free(zA); sqlite3_free(zB);
        sqlite3_free(zEA); sqlite3_free(zEB);
      }
    }else{
      dv_both(db, dbO, "INSERT INTO users VALUES(%d, %Q)",
              "INSERT INTO ou VALUES(%d, %Q)", k, zV, i);
    }
    sqlite3_free(zV);
    dv_compare(db, dbO, i);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  sqlite3_close(db);
  sqlite3_close(dbO);
}
END_TEST

START_TEST(test_derived_concurrent_unique_claims_one_commits){
  char *zDir = 0;
  sqlite3 *db = dv_open("derived-unique-conc", &zDir), *db2;
  char *zPath = sqlite3_mprintf("%s/db", zDir), *zErr = 0;
  int rc;
  dv_source(db, "kv_memory");
  dv_carriers(db);
  db2 = th_open(zPath);
  sqlite3_busy_timeout(db2, th_busy_ms(5000));
  th_exec(db, "BEGIN; INSERT INTO users VALUES(1, '{\"email\":\"same\"}');");
  th_exec(db2, "BEGIN; INSERT INTO users VALUES(2, '{\"email\":\"same\"}');");
  th_exec(db, "COMMIT");
  rc = th_try(db2, "COMMIT", &zErr);
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_msg(sqlite3_extended_errcode(db2)==SQLITE_CONSTRAINT_UNIQUE,
                "code %d: %s", sqlite3_extended_errcode(db2), zErr);
  ck_assert_msg(zErr && strstr(zErr, "by_email") && strstr(zErr, "'same'"),
                "%s", zErr);
  sqlite3_free(zErr);
  ck_assert(sqlite3_get_autocommit(db2));    /* rolled back by the COMMIT */
  ck_assert_int_eq(th_int(db, "SELECT source_key FROM by_email "
                              "WHERE key='same'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM users"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* Two transactions that change only one counter row both commit. */
START_TEST(test_derived_concurrent_counter_deltas_do_not_conflict){
  char *zDir = 0;
  sqlite3 *db = dv_open("derived-counter-conc", &zDir), *db2;
  char *zPath = sqlite3_mprintf("%s/db", zDir);
  dv_source(db, azType[_i]);
  dv_carriers(db);
  db2 = th_open(zPath);
  sqlite3_busy_timeout(db2, th_busy_ms(5000));
  th_exec(db, "INSERT INTO users VALUES(9, '{\"grp\":\"g\",\"n\":1}')");
  th_exec(db, "BEGIN; INSERT INTO users VALUES(1, '{\"grp\":\"g\",\"n\":10}');"
              "UPDATE users SET value='{\"grp\":\"g\",\"n\":2}' WHERE key=9;");
  th_exec(db2, "BEGIN; INSERT INTO users VALUES(2, '{\"grp\":\"g\","
               "\"n\":100}');");
  th_exec(db2, "COMMIT");
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count FROM by_grp WHERE key='g'"), 3);
  ck_assert_int_eq(th_int(db, "SELECT sum FROM by_grp WHERE key='g'"), 112);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_derived_unique_claim_held_fails_before_anything_applies){
  sqlite3 *db = dv_open("derived-unique", 0);
  char *zErr = 0;
  dv_source(db, azType[_i]);
  dv_carriers(db);
  th_exec(db, "INSERT INTO users VALUES(1, '{\"email\":\"a\",\"grp\":\"x\","
              "\"n\":1,\"tags\":[\"t\"]}')");
  ck_assert_int_eq(th_try(db, "INSERT INTO users VALUES(2, '{\"email\":\"a\","
      "\"grp\":\"x\",\"n\":5,\"tags\":[\"u\"]}')", &zErr), SQLITE_CONSTRAINT);
  ck_assert_int_eq(sqlite3_extended_errcode(db), SQLITE_CONSTRAINT_UNIQUE);
  ck_assert_msg(strstr(zErr, "unique index by_email") && strstr(zErr, "'a'"),
                "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM users"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count FROM by_grp WHERE key='x'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM by_tag"), 1);
  /* the holder may change its own row and keep the value */
  th_exec(db, "UPDATE users SET value='{\"email\":\"a\",\"n\":2}' WHERE key=1");
  ck_assert_int_eq(th_int(db, "SELECT source_key FROM by_email WHERE key='a'"),
                   1);
  sqlite3_close(db);
}
END_TEST

/* Inside BEGIN ... COMMIT a one-row statement has no statement savepoint:
** a write refused by a unique index still leaves nothing of it. */
START_TEST(test_derived_refused_write_in_transaction_leaves_nothing){
  sqlite3 *db = dv_open("derived-txnfail", 0);
  dv_source(db, azType[_i]);
  dv_carriers(db);
  th_exec(db, "INSERT INTO users VALUES(1, '{\"email\":\"a\",\"grp\":\"g\","
              "\"n\":1,\"tags\":[\"t\"]}')");
  th_exec(db, "BEGIN; INSERT INTO users VALUES(2, '{\"email\":\"b\","
              "\"grp\":\"g\",\"n\":2}')");
  ck_assert_int_ne(th_try(db, "INSERT INTO users VALUES(3, '{\"email\":\"a\","
      "\"grp\":\"g\",\"n\":4,\"tags\":[\"v\"]}')", 0), SQLITE_OK);
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count FROM by_grp WHERE key='g'"), 2);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM by_tag WHERE key='v'"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_derived_bad_projection_fails_write_naming_carrier_and_key){
  sqlite3 *db = dv_open("derived-badproj", 0);
  char *zErr = 0;
  dv_source(db, azType[_i]);
  dv_carriers(db);
  th_exec(db, "INSERT INTO users VALUES(7, '{\"email\":\"q\",\"grp\":\"g\","
              "\"n\":3}')");
  ck_assert_int_ne(th_try(db, "UPDATE users SET value='not json' WHERE key=7",
                          &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "by_tag") && strstr(zErr, "key 7")
                && strstr(zErr, "users"), "%s", zErr);
  sqlite3_free(zErr);
  th_text_is(db, "SELECT value FROM users WHERE key=7", "{\"email\":\"q\",\"grp\":\"g\",\"n\":3}");
  ck_assert_int_eq(th_int(db, "SELECT sum FROM by_grp WHERE key='g'"), 3);
  zErr = 0;
  ck_assert_int_ne(th_try(db, "INSERT INTO users VALUES(8, "
      "'{\"grp\":\"g\",\"n\":\"many\"}')", &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "counter by_grp") && strstr(zErr, "key 8"),
                "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM users"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_derived_bad_declarations_are_refused){
  static const struct { const char *zSql; const char *zMsg; } a[] = {
    { "CREATE VIRTUAL TABLE i1 USING kv_index(source=users, expr='random()')",
      "non-deterministic" },
    { "CREATE VIRTUAL TABLE i1 USING kv_index(source=users, "
      "expr='(SELECT 1)')", "subqueries" },
    { "CREATE VIRTUAL TABLE i1 USING kv_index(source=users, expr='nosuch(')",
      "bad projection" },
    { "CREATE VIRTUAL TABLE i1 USING kv_index(source=nosuch, expr='value')",
      "no such source table: nosuch" },
    { "CREATE VIRTUAL TABLE i1 USING kv_index(source=users)",
      "needs source=TABLE and expr=EXPR" },
    { "CREATE VIRTUAL TABLE i1 USING kv_index(source=users, expr='value', "
      "colour=red)", "bad argument" },
    { "CREATE VIRTUAL TABLE i1 USING kv_counter(source=users, group='key', "
      "sum='random()')", "non-deterministic" },
    { "CREATE VIRTUAL TABLE i1 USING kv_index(source=by_email, expr='key')",
      "itself an index or counter" },
    { "CREATE VIRTUAL TABLE taken USING kv_index(source=users, expr='key')",
      "exists in the store" },
    { "BEGIN; CREATE VIRTUAL TABLE i1 USING kv_index(source=users, "
      "expr='key')", "own transactions" },
  };
  sqlite3 *db = dv_open("derived-baddecl", 0);
  int i;
  dv_source(db, "kv_memory");
  th_exec(db, "CREATE VIRTUAL TABLE by_email USING kv_index(source=users, "
              "expr='json_extract(value, ''$.email'')', unique=1);"
              "SELECT kv_begin(), kv_create_table(1, 'taken', 'kv_memory',"
              " '{\"persistence\":1}'),"
              " kv_commit(1);");
  for(i=0; i<(int)(sizeof(a)/sizeof(a[0])); i++){
    char *zErr = 0;
    int rc = th_try(db, a[i].zSql, &zErr);
    ck_assert_msg(rc!=SQLITE_OK && zErr && strstr(zErr, a[i].zMsg),
                  "%s -> %d %s", a[i].zSql, rc, zErr ? zErr : "");
    sqlite3_free(zErr);
    if( !sqlite3_get_autocommit(db) ) th_exec(db, "ROLLBACK");
  }
  /* nothing of a refused declaration stays in the store */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
                              "WHERE name='i1'"), 0);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_derived_carrier_refuses_writes){
  sqlite3 *db = dv_open("derived-ro", 0);
  char *zErr = 0;
  sqlite3_int64 h;
  dv_source(db, azType[_i]);
  dv_carriers(db);
  ck_assert_int_ne(th_try(db, "INSERT INTO by_email VALUES('x', 1)", &zErr),
                   SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "write users instead"), "%s", zErr);
  sqlite3_free(zErr);
  zErr = 0;
  h = th_int(db, "SELECT kv_begin()");
  ck_assert_int_ne(th_tryf(db, &zErr, "SELECT kv_put(%lld, 'by_grp', "
                          "'x', 1)", (long long)h), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "counter of users"), "%s", zErr);
  sqlite3_free(zErr);
  th_execf(db, "SELECT kv_rollback(%lld)", (long long)h);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_derived_handle_writes_maintain_carriers){
  sqlite3 *db = dv_open("derived-handle", 0);
  sqlite3_int64 h;
  dv_source(db, azType[_i]);
  dv_carriers(db);
  h = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_put(%lld, 'users', 1, "
      "'{\"email\":\"m\",\"grp\":\"g\",\"n\":4,\"tags\":[\"p\",\"q\"]}'),"
      "kv_put(%lld, 'users', 2, '{\"grp\":\"g\",\"n\":6}'),"
      "kv_delete(%lld, 'users', 2), kv_commit(%lld)", (long long)h,
      (long long)h, (long long)h, (long long)h);
  ck_assert_int_eq(th_int(db, "SELECT source_key FROM by_email WHERE key='m'"),
                   1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM by_tag"), 2);
  ck_assert_int_eq(th_int(db, "SELECT sum FROM by_grp WHERE key='g'"), 4);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  sqlite3_close(db);
}
END_TEST

/* Drift written behind the carriers' back (the engine API, which does not
** go through the SQL surface's maintenance) is found and repaired. */
START_TEST(test_derived_validate_finds_and_repair_fixes_drift){
  char *zDir = 0, *zStore, *zErr = 0, *zSum;
  sqlite3 *db = dv_open("derived-drift", &zDir);
  KvEngine *pEng = 0;
  KvRoot *r = 0;
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  int i;
  dv_source(db, azType[_i]);
  dv_carriers(db);
  for(i=1; i<=6; i++){
    th_execf(db, "INSERT INTO users VALUES(%d, '{\"email\":"
        "\"e%d\",\"grp\":\"g%d\",\"n\":%d,\"tags\":[\"t\"]}')", i, i, i%2, i);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  zStore = sqlite3_mprintf("%s/db-kv", zDir);
  ck_assert_int_eq(kv_engine_open(zStore, &pEng, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  /* an extra unique entry, a missing one, a wrong counter */
  ck_assert_int_eq(kv_key_encode_c(SQLITE_TEXT, 0, 0, "ghost", 5, &k, 0), 0);
  ck_assert_int_eq(kv_value_encode(0, 0, &v, 0), 0);
  ck_assert_int_eq(kv_put(r, "by_email", 8, k.a, k.n, v.a, v.n, &zErr), 0);
  kv_buf_reset(&k);
  ck_assert_int_eq(kv_key_encode_c(SQLITE_TEXT, 0, 0, "e3", 2, &k, 0), 0);
  ck_assert_int_eq(kv_del(r, "by_email", 8, k.a, k.n, &zErr), 0);
  kv_buf_reset(&k);
  kv_buf_reset(&v);
  ck_assert_int_eq(kv_key_encode_c(SQLITE_TEXT, 0, 0, "g1", 2, &k, 0), 0);
  ck_assert_int_eq(kv_value_encode_text(0, "{\"count\":9,\"sum\":1}", 20, &v),
                   0);
  ck_assert_int_eq(kv_put(r, "by_grp", 6, k.a, k.n, v.a, v.n, &zErr), 0);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  kv_buf_free(&k);
  kv_buf_free(&v);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 3);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users') "
      "WHERE carrier='by_grp' AND key='g1' AND detail LIKE "
      "'counter mismatch%'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users') "
      "WHERE carrier='by_email' AND key='e3' AND detail LIKE 'missing%'"), 1);
  zSum = th_text(db, "SELECT kv_repair('users')");
  ck_assert_str_eq(zSum, "{\"source\":\"users\",\"findings\":3,\"fixed\":3,"
                         "\"built\":0,\"unfixable\":0}");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  ck_assert_int_eq(th_int(db, "SELECT source_key FROM by_email "
                              "WHERE key='e3'"), 3);
  sqlite3_free(zSum);
  kv_engine_unref(pEng);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_derived_drop_carrier_and_source){
  sqlite3 *db = dv_open("derived-drop", 0);
  dv_source(db, azType[_i]);
  dv_carriers(db);
  th_exec(db, "INSERT INTO users VALUES(1, '{\"email\":\"a\",\"grp\":\"g\","
              "\"n\":1}')");
  th_exec(db, "DROP TABLE by_email");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
      "WHERE name='by_email' AND dir LIKE '%derived-drop%'"), 0);
  /* the value is free: no unique index any more */
  th_exec(db, "INSERT INTO users VALUES(2, '{\"email\":\"a\",\"grp\":\"g\","
              "\"n\":1}')");
  ck_assert_int_eq(th_int(db, "SELECT count FROM by_grp WHERE key='g'"), 2);
  th_exec(db, "DROP TABLE main.users");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE name "
      "IN ('users', 'by_tag', 'by_grp') AND dir LIKE '%derived-drop%'"), 0);
  sqlite3_close(db);
}
END_TEST

/* kv_carriers lists the carriers in the order a commit applies them. */
START_TEST(test_derived_carriers_listed_in_application_order){
  sqlite3 *db = dv_open("derived-list", 0);
  char *z;
  dv_source(db, azType[_i]);
  dv_carriers(db);
  z = th_text(db, "SELECT group_concat(name||':'||kind||':'||built, ' ') "
                  "FROM kv_carriers('users')");
  ck_assert_str_eq(z, "by_tag:index:1 by_grp:counter:1 by_email:unique:1");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_carriers('by_tag')"),
                   0);
  sqlite3_close(db);
}
END_TEST

/* One source write and its carriers' changes are one WAL record. */
START_TEST(test_derived_write_and_carriers_are_one_wal_record){
  char *zDir = 0, *zStore, *zErr = 0;
  sqlite3 *db = dv_open("derived-wal", &zDir);
  KvEngine *pEng = 0;
  WalStats a, b;
  dv_source(db, azType[_i]);
  dv_carriers(db);
  zStore = sqlite3_mprintf("%s/db-kv", zDir);
  ck_assert_int_eq(kv_engine_open(zStore, &pEng, &zErr), SQLITE_OK);
  ck_assert(kv_engine_wal_stats(pEng, &a));
  th_exec(db, "INSERT INTO users VALUES(1, '{\"email\":\"a\",\"grp\":\"g\","
              "\"n\":1,\"tags\":[\"x\",\"y\"]}')");
  ck_assert(kv_engine_wal_stats(pEng, &b));
  ck_assert_int_eq(b.nAppend - a.nAppend, 1);
  kv_engine_unref(pEng);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
  sqlite3_close(db);
}
END_TEST

/* A carrier whose build has not completed is not readable; kv_validate
** says so and kv_repair completes the build. */
START_TEST(test_derived_unbuilt_carrier_is_unreadable_until_repaired){
  char *zDir = 0, *zStore, *zErr = 0, *zOpt;
  sqlite3 *db = dv_open("derived-unbuilt", &zDir);
  KvEngine *pEng = 0;
  KvRoot *r = 0;
  int i;
  dv_source(db, azType[_i]);
  for(i=0; i<1200; i++){
    th_execf(db, "INSERT INTO users VALUES(%d, "
        "'{\"tags\":[\"t%d\"]}')", i, i%7);
  }
  th_exec(db, "CREATE VIRTUAL TABLE by_tag USING kv_index(source=users, "
              "expr='json_extract(value, ''$.tags'')')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM by_tag"), 1200);
  /* put the build back to its start, as a crash before its first batch */
  zStore = sqlite3_mprintf("%s/db-kv", zDir);
  ck_assert_int_eq(kv_engine_open(zStore, &pEng, &zErr), SQLITE_OK);
  zOpt = th_text(db, "SELECT '{\"carrier\":\"index\",\"source\":\"users\","
                     "\"expr\":\"json_extract(value, ''$.tags'')\","
                     "\"built\":0}'");
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(kv_table_set_options(r, "by_tag", 6, zOpt, &zErr), 0);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  ck_assert_int_ne(th_try(db, "SELECT count(*) FROM by_tag", &zErr),
                   SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "not built yet"), "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users') "
                              "WHERE detail LIKE 'carrier not built%'"), 1);
  th_exec(db, "SELECT kv_repair('users')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM by_tag"), 1200);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"), 0);
  kv_engine_unref(pEng);
  sqlite3_free(zOpt);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
  sqlite3_close(db);
}
END_TEST

/* A unique index declared on rows that already share a value is refused
** and leaves nothing. */
START_TEST(test_derived_unique_build_on_duplicates_is_refused){
  sqlite3 *db = dv_open("derived-uniqdup", 0);
  char *zErr = 0;
  int i;
  dv_source(db, azType[_i]);
  for(i=0; i<700; i++){
    th_execf(db, "INSERT INTO users VALUES(%d, "
        "'{\"email\":\"e%d\"}')", i, i==650 ? 3 : i);
  }
  ck_assert_int_ne(th_try(db, "CREATE VIRTUAL TABLE by_email USING kv_index("
      "source=users, expr='json_extract(value, ''$.email'')', unique=1)",
      &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "'e3'"), "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE "
      "name='by_email' AND dir LIKE '%derived-uniqdup%'"), 0);
  th_exec(db, "INSERT INTO users VALUES(1000, '{\"email\":\"e3\"}')");
  sqlite3_close(db);
}
END_TEST

/* Writers keep writing while a carrier is built on the populated source:
** the result validates clean. */
typedef struct DvWriter DvWriter;
struct DvWriter {
  const char *zDir;
  volatile int bStop;
  int nOk;
};

static void *dv_writer(void *pArg){
  DvWriter *w = (DvWriter*)pArg;
  char *zPath = sqlite3_mprintf("%s/db", w->zDir);
  sqlite3 *db = 0;
  unsigned seed = 99;
  sqlite3_open(zPath, &db);
  sqlite3_busy_timeout(db, 5000);
  while( !__atomic_load_n(&w->bStop, __ATOMIC_ACQUIRE) ){
    char *zV = dv_row(&seed);
    char *zSql = sqlite3_mprintf(rand_r(&seed)%4==0
        ? "DELETE FROM users WHERE key=%d"
        : "INSERT OR REPLACE INTO users VALUES(%d, %Q)",
        rand_r(&seed)%3000, zV);
    if( sqlite3_exec(db, zSql, 0, 0, 0)==SQLITE_OK ) w->nOk++;
    sqlite3_free(zSql);
    sqlite3_free(zV);
  }
  sqlite3_close(db);
  sqlite3_free(zPath);
  return 0;
}

START_TEST(test_derived_build_with_concurrent_writers_validates_clean){
  char *zDir = 0;
  sqlite3 *db = dv_open("derived-buildconc", &zDir);
  unsigned seed = 7;
  pthread_t t;
  DvWriter w;
  int i;
  dv_source(db, azType[_i]);
  th_exec(db, "BEGIN");
  for(i=0; i<3000; i++){
    char *zV = dv_row(&seed);
    th_execf(db, "INSERT INTO users VALUES(%d, %Q)", i, zV);
    sqlite3_free(zV);
  }
  th_exec(db, "COMMIT");
  memset(&w, 0, sizeof(w));
  w.zDir = zDir;
  ck_assert_int_eq(pthread_create(&t, 0, dv_writer, &w), 0);
  usleep(20000);
  th_exec(db,
    "CREATE VIRTUAL TABLE by_tag USING kv_index(source=users, "
    "  expr='json_extract(value, ''$.tags'')');"
    "CREATE VIRTUAL TABLE by_grp USING kv_counter(source=users, "
    "  group='json_extract(value, ''$.grp'')', "
    "  sum='json_extract(value, ''$.n'')');");
  usleep(20000);
  __atomic_store_n(&w.bStop, 1, __ATOMIC_RELEASE);
  pthread_join(t, 0);
  ck_assert_int_gt(w.nOk, 0);
  ck_assert_msg(th_int(db, "SELECT count(*) FROM kv_validate('users')")==0,
      "%s", th_text(db, "SELECT group_concat(carrier||' '||quote(key)||' '"
                        "||detail, '; ') FROM (SELECT * FROM "
                        "kv_validate('users') LIMIT 5)"));
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------- SIGKILL -- */

/* Child "write DIR TYPE SEED": random writes until killed.  Child "build
** DIR SEED": declares the carriers on the populated source. */
int depot_test_child(int argc, char **argv){
  sqlite3 *db;
  char *zPath;
  unsigned seed;
  if( argc!=3 ) return 2;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  zPath = sqlite3_mprintf("%s/db", argv[1]);
  if( sqlite3_open(zPath, &db)!=SQLITE_OK ) return 3;
  sqlite3_busy_timeout(db, 5000);
  seed = (unsigned)strtoul(argv[2], 0, 10);
  if( strcmp(argv[0], "build")==0 ){
    sqlite3_exec(db, "CREATE VIRTUAL TABLE by_tag USING kv_index("
        "source=users, expr='json_extract(value, ''$.tags'')');"
        "CREATE VIRTUAL TABLE by_grp USING kv_counter(source=users, "
        "group='json_extract(value, ''$.grp'')', "
        "sum='json_extract(value, ''$.n'')')", 0, 0, 0);
    return 0;
  }
  for(;;){
    char *zV = dv_row(&seed);
    char *zSql = sqlite3_mprintf(rand_r(&seed)%4==0
        ? "DELETE FROM users WHERE key=%d"
        : "INSERT OR REPLACE INTO users VALUES(%d, %Q)",
        rand_r(&seed)%50, zV);
    sqlite3_exec(db, zSql, 0, 0, 0);
    sqlite3_free(zSql);
    sqlite3_free(zV);
  }
}

static void dv_kill_after(const char *const azArg[], int ms){
  pid_t pid = th_spawn(azArg);
  int st;
  usleep((useconds_t)ms*1000);
  kill(pid, SIGKILL);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
}

START_TEST(test_derived_sigkill_during_writes_validates_clean){
  char *zDir = 0, zSeed[16];
  sqlite3 *db;
  const char *azArg[4];
  int r;
  if( th_under_tsan() ) return;
  db = dv_open("derived-kill", &zDir);
  dv_source(db, azType[1 + _i]);
  dv_carriers(db);
  sqlite3_close(db);
  for(r=0; r<3; r++){
    sqlite3_snprintf(sizeof(zSeed), zSeed, "%d", 77*r + _i);
    azArg[0] = "write"; azArg[1] = zDir; azArg[2] = zSeed; azArg[3] = 0;
    dv_kill_after(azArg, 150 + (rand()%300));
    db = th_openf("%s/db", zDir);
    ck_assert_msg(th_int(db, "SELECT count(*) FROM kv_validate('users')")==0,
        "%s", th_text(db, "SELECT group_concat(carrier||' '||quote(key)||' '"
                          "||detail, '; ') FROM kv_validate('users')"));
    sqlite3_close(db);
  }
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_derived_sigkill_during_build_repairs_clean){
  char *zDir = 0, zSeed[16];
  sqlite3 *db;
  const char *azArg[4];
  unsigned seed = 5;
  int i;
  if( th_under_tsan() ) return;
  db = dv_open("derived-killbuild", &zDir);
  dv_source(db, azType[1 + _i]);
  th_exec(db, "BEGIN");
  for(i=0; i<th_scaled(6000, 20); i++){
    char *zV = dv_row(&seed);
    th_execf(db, "INSERT INTO users VALUES(%d, %Q)", i, zV);
    sqlite3_free(zV);
  }
  th_exec(db, "COMMIT");
  sqlite3_close(db);
  sqlite3_snprintf(sizeof(zSeed), zSeed, "%d", 1);
  azArg[0] = "build"; azArg[1] = zDir; azArg[2] = zSeed; azArg[3] = 0;
  dv_kill_after(azArg, 40 + (rand()%200));
  db = th_openf("%s/db", zDir);
  th_exec(db, "SELECT kv_repair('users')");
  ck_assert_msg(th_int(db, "SELECT count(*) FROM kv_validate('users')")==0,
      "%s", th_text(db, "SELECT group_concat(carrier||' '||quote(key)||' '"
                        "||detail, '; ') FROM (SELECT * FROM "
                        "kv_validate('users') LIMIT 5)"));
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Projections of the form json_extract(value, '$.name') are answered by
** a scan of the JSON where it is sure of SQLite's answer: two sources get
** the same documents, one with such carriers, one with the same
** expressions in parentheses (SQLite's JSON functions); every write has the
** same outcome on both and the carriers hold the same entries. */
START_TEST(test_derived_member_projection_matches_json_extract){
  static const char *azDoc[] = {
    "{\"a\":\"x\",\"g\":\"p\",\"n\":1}",
    "{\"a\":\"x\\u0041\\n\",\"g\":\"p\",\"n\":2}",
    "{\"a\":1.5,\"g\":\"p\",\"n\":2}",
    "{\"a\":-0,\"g\":\"p\",\"n\":3}",
    "{\"a\":-42,\"g\":\"p\",\"n\":-3}",
    "{\"a\":123456789012345678,\"g\":\"q\",\"n\":4}",
    "{\"a\":1234567890123456789012,\"g\":\"q\",\"n\":4}",
    "{\"a\":true,\"g\":false,\"n\":5}",
    "{\"a\":false,\"g\":null,\"n\":5}",
    "{\"a\":null,\"g\":\"q\",\"n\":null}",
    "{\"a\":\"[1,\\\"b\\\"]\",\"g\":\"q\",\"n\":1}",
    "{\"a\":\" [2]\",\"g\":\"q\",\"n\":1}",
    "{\"a\":[3,\"c\"],\"g\":\"q\",\"n\":1}",
    "{\"a\":{\"c\":1},\"g\":\"q\",\"n\":1}",
    "{\"b\":{\"c\":[1,{\"d\":null}],\"e\":\"\\\"\"},\"a\":\"y\",\"g\":\"r\","
      "\"n\":-7}",
    "{\"a\":\"dup\",\"a\":\"dup2\",\"g\":\"r\",\"n\":1}",
    " \n{ \"a\" : \"sp\" ,\t\"g\":\"r\", \"n\": 9 } \r",
    "{\"\\u0061\":\"esc\",\"g\":\"r\",\"n\":1}",
    "{\"a\":\"\",\"g\":\"\",\"n\":0}",
    "{\"a\":\"x\",\"g\":\"p\",\"n\":1.25}",
    "{\"a\":\"x\",\"g\":\"p\",\"n\":1e2}",
    "{\"a\":\"x\",\"g\":\"p\",\"n\":\"many\"}",
    "{\"A\":\"upper\",\"g\":\"s\"}",
    "{}",
    "[1,2]",
    "\"str\"",
    "17",
    "{\"a\":\"x\",}",
    "{\"a\":01}",
    "{\"a\":\"x\"} x",
    "{\"a\":\"x\"",
    "{\"a\":\"x\",\"b\":[1,]}",
    "{\"a\":\"tab\tin\"}",
    "{\"a\":'q'}",
    "not json",
  };
  static const char *azSide[2][2] = {
    { "json_extract(value, ''$.a'')", "json_extract(value, ''$.g'')" },
    { "(json_extract(value, ''$.a''))", "(json_extract(value, ''$.g''))" },
  };
  sqlite3 *db = dv_open("derived-member", 0);
  int i, k;
  for(k=0; k<2; k++){
    char *z = sqlite3_mprintf(
        "CREATE VIRTUAL TABLE s%d USING kv_memory(persistence=1);"
        "CREATE VIRTUAL TABLE s%d_a USING kv_index(source=s%d, expr='%s');"
        "CREATE VIRTUAL TABLE s%d_g USING kv_counter(source=s%d, "
        "  group='%s', sum='%s')", k, k, k, azSide[k][0], k, k,
        azSide[k][1], k ? "(json_extract(value, ''$.n''))"
                        : "json_extract(value, ''$.n'')");
    th_exec(db, z);
    sqlite3_free(z);
  }
  for(i=0; i<(int)(sizeof(azDoc)/sizeof(azDoc[0])); i++){
    int rc[2];
    for(k=0; k<2; k++){
      char *z = sqlite3_mprintf("INSERT INTO s%d VALUES(%d, %Q)", k, i,
                                azDoc[i]);
      char *zErr = 0;
      rc[k] = th_try(db, z, &zErr);
      sqlite3_free(z);
      sqlite3_free(zErr);
    }
    ck_assert_msg(rc[0]==rc[1], "doc %d (%s): %d vs %d", i, azDoc[i], rc[0],
                  rc[1]);
    for(k=0; k<2; k++){
      /* the same document again as an update of the row (old and new) */
      char *z = sqlite3_mprintf("UPDATE s%d SET value=%Q WHERE key=%d", k,
                                azDoc[(i+1)%(int)(sizeof(azDoc)
                                              /sizeof(azDoc[0]))], i);
      char *zErr = 0;
      rc[k] = th_try(db, z, &zErr);
      sqlite3_free(z);
      sqlite3_free(zErr);
    }
    ck_assert_msg(rc[0]==rc[1], "update of doc %d: %d vs %d", i, rc[0],
                  rc[1]);
  }
  {
    char *zA = dv_dump(db, "SELECT key, typeof(key), source_key FROM s0_a "
                           "ORDER BY 1, 3");
    char *zB = dv_dump(db, "SELECT key, typeof(key), source_key FROM s1_a "
                           "ORDER BY 1, 3");
    ck_assert_str_eq(zA, zB);
    ck_assert_int_gt((int)strlen(zA), 20);
    sqlite3_free(zA); sqlite3_free(zB);
    zA = dv_dump(db, "SELECT key, typeof(key), count, sum FROM s0_g "
                     "ORDER BY 1");
    zB = dv_dump(db, "SELECT key, typeof(key), count, sum FROM s1_g "
                     "ORDER BY 1");
    ck_assert_str_eq(zA, zB);
    sqlite3_free(zA); sqlite3_free(zB);
    zA = dv_dump(db, "SELECT key, value FROM s0 ORDER BY 1");
    zB = dv_dump(db, "SELECT key, value FROM s1 ORDER BY 1");
    ck_assert_str_eq(zA, zB);
    sqlite3_free(zA); sqlite3_free(zB);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('s0')"), 0);
  sqlite3_close(db);
}
END_TEST

/* A connection caches its sources' carriers (and whether their
** projections take the member fast path): a carrier another connection
** declares is maintained by this connection's next write. */
START_TEST(test_derived_carrier_declared_elsewhere_is_maintained){
  char *zDir = 0;
  sqlite3 *db = dv_open("derived-cache", &zDir), *db2;
  char *zPath = sqlite3_mprintf("%s/db", zDir);
  dv_source(db, "kv_memory");
  th_exec(db, "CREATE VIRTUAL TABLE by_a USING kv_index(source=users, "
              "  expr='json_extract(value, ''$.a'')')");
  th_exec(db, "INSERT INTO users VALUES(1, '{\"a\":\"x\",\"g\":\"p\"}')");
  db2 = th_open(zPath);
  sqlite3_busy_timeout(db2, th_busy_ms(5000));
  th_exec(db2, "CREATE VIRTUAL TABLE by_g USING kv_counter(source=users, "
               "  group='(json_extract(value, ''$.g''))')");
  th_exec(db, "INSERT INTO users VALUES(2, '{\"a\":\"y\",\"g\":\"p\"}')");
  th_exec(db, "UPDATE users SET value='{\"a\":\"z\",\"g\":\"q\"}' "
              "WHERE key=1");
  ck_assert_int_eq(th_int(db, "SELECT count FROM by_g WHERE key='p'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count FROM by_g WHERE key='q'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT source_key FROM by_a WHERE key='z'"),
                   1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM by_a"), 2);
  th_exec(db2, "DROP TABLE by_g");
  th_exec(db, "UPDATE users SET value='{\"a\":\"w\",\"g\":\"q\"}' "
              "WHERE key=2");
  ck_assert_int_eq(th_int(db, "SELECT source_key FROM by_a WHERE key='w'"),
                   2);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_validate('users')"),
                   0);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("derived");
  TCase *tc = tcase_create("carriers");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_derived_random_workload_matches_sqlite_oracle,
                      0, 3);
  tcase_add_test(tc, test_derived_concurrent_unique_claims_one_commits);
  tcase_add_loop_test(tc,
      test_derived_concurrent_counter_deltas_do_not_conflict, 0, 3);
  tcase_add_loop_test(tc,
      test_derived_unique_claim_held_fails_before_anything_applies, 0, 3);
  tcase_add_loop_test(tc,
      test_derived_bad_projection_fails_write_naming_carrier_and_key, 0, 3);
  tcase_add_test(tc, test_derived_bad_declarations_are_refused);
  tcase_add_test(tc, test_derived_member_projection_matches_json_extract);
  tcase_add_test(tc, test_derived_carrier_declared_elsewhere_is_maintained);
  tcase_add_loop_test(tc,
      test_derived_refused_write_in_transaction_leaves_nothing, 0, 3);
  tcase_add_loop_test(tc, test_derived_carrier_refuses_writes, 0, 3);
  tcase_add_loop_test(tc, test_derived_handle_writes_maintain_carriers, 0, 3);
  tcase_add_loop_test(tc, test_derived_validate_finds_and_repair_fixes_drift,
                      0, 3);
  tcase_add_loop_test(tc, test_derived_drop_carrier_and_source, 0, 3);
  tcase_add_loop_test(tc, test_derived_carriers_listed_in_application_order,
                      0, 3);
  tcase_add_loop_test(tc, test_derived_write_and_carriers_are_one_wal_record,
                      0, 3);
  tcase_add_loop_test(tc,
      test_derived_unbuilt_carrier_is_unreadable_until_repaired, 0, 3);
  tcase_add_loop_test(tc, test_derived_unique_build_on_duplicates_is_refused,
                      0, 3);
  tcase_add_loop_test(tc,
      test_derived_build_with_concurrent_writers_validates_clean, 0, 3);
  suite_add_tcase(s, tc);
  tc = tcase_create("kill");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_derived_sigkill_during_writes_validates_clean,
                      0, 2);
  tcase_add_loop_test(tc, test_derived_sigkill_during_build_repairs_clean,
                      0, 2);
  suite_add_tcase(s, tc);
  return s;
}
