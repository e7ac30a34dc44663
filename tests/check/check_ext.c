/*
** check_ext.c -- the "ext" suite: the extension entry point, on both of its
** paths (built in with -DSQLITE_CORE, and the real module loaded through
** sqlite3_load_extension), and depot_version().
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"

#define SQLITE_CORE 1          /* sqlite3ext.h: the struct only, no macros */
#include "sqlite3ext.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

START_TEST(test_version_matches_configure_version){
  sqlite3 *db = th_open(":memory:");
  char *z = th_text(db, "SELECT depot_version()");
  ck_assert_str_eq(z, PACKAGE_VERSION);
  sqlite3_free(z);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_version_is_deterministic_text){
  sqlite3 *db = th_open(":memory:");
  ck_assert_int_eq(th_int(db, "SELECT typeof(depot_version())='text'"), 1);
  /* Deterministic functions are allowed in index expressions. */
  th_exec(db, "CREATE TABLE t(a); CREATE INDEX i ON t(a, depot_version())");
  sqlite3_close(db);
}
END_TEST

START_TEST(test_version_rejects_arguments){
  sqlite3 *db = th_open(":memory:");
  char *zErr = 0;
  int rc = th_try(db, "SELECT depot_version(1)", &zErr);
  ck_assert_int_eq(rc, SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(zErr, "wrong number of arguments"));
  sqlite3_free(zErr);
  sqlite3_close(db);
}
END_TEST

/* kv_clock: fixed and offset settings move the clock of deadlines, wall
** restores it, and a bad mode or value is refused and changes nothing. */
START_TEST(test_kv_clock_modes){
  sqlite3 *db = th_open(":memory:");
  char *zErr = 0;
  th_text_is(db, "SELECT kv_clock('fixed', 5000)", "5000");
  th_text_is(db, "SELECT kv_clock()", "5000");
  ck_assert_int_eq(th_try(db, "SELECT kv_clock('slow', 5)", &zErr),
                   SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(zErr, "unknown mode 'slow'"));
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(th_try(db, "SELECT kv_clock('offset', 'x')", &zErr),
                   SQLITE_ERROR);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(th_try(db, "SELECT kv_clock(NULL)", &zErr),
                   SQLITE_ERROR);
  sqlite3_free(zErr);
  th_text_is(db, "SELECT kv_clock()", "5000");
  th_text_is(db, "SELECT abs(kv_clock('offset', 3600000) - 3600000"
                 " - CAST((julianday('now') - 2440587.5)*86400000 AS INT))"
                 " < 5000", "1");
  th_text_is(db, "SELECT abs(kv_clock('wall')"
                 " - CAST((julianday('now') - 2440587.5)*86400000 AS INT))"
                 " < 5000", "1");
  sqlite3_close(db);
}
END_TEST

START_TEST(test_init_registers_on_every_connection){
  sqlite3 *db1 = th_open(":memory:");
  sqlite3 *db2 = th_open(":memory:");
  char *z1 = th_text(db1, "SELECT depot_version()");
  char *z2 = th_text(db2, "SELECT depot_version()");
  ck_assert_str_eq(z1, z2);
  sqlite3_free(z1); sqlite3_free(z2);
  sqlite3_close(db1); sqlite3_close(db2);
}
END_TEST

/* The real module, as users load it, into a connection that has not had
** the built-in copy registered. */
static sqlite3 *open_plain(void){
  sqlite3 *db = 0;
  sqlite3_reset_auto_extension();
  ck_assert_int_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
  return db;
}

START_TEST(test_module_loads_through_load_extension){
  const char *zModule = th_module_path();
  sqlite3 *db;
  char *zErr = 0;
  char *z;
  int rc;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  db = open_plain();
  ck_assert_int_eq(sqlite3_enable_load_extension(db, 1), SQLITE_OK);
  rc = sqlite3_load_extension(db, zModule, 0, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "load %s: %s", zModule, zErr ? zErr : "");
  z = th_text(db, "SELECT depot_version()");
  ck_assert_str_eq(z, PACKAGE_VERSION);
  sqlite3_free(z);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_module_outlives_loading_connection){
  /* SQLITE_OK_LOAD_PERMANENTLY: after the loading connection closes, the
  ** module stays mapped, so a second load finds the same code and works. */
  const char *zModule = th_module_path();
  sqlite3 *db;
  char *z;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  db = open_plain();
  sqlite3_enable_load_extension(db, 1);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  sqlite3_close(db);
  db = open_plain();
  sqlite3_enable_load_extension(db, 1);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  z = th_text(db, "SELECT depot_version()");
  ck_assert_str_eq(z, PACKAGE_VERSION);
  sqlite3_free(z);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_module_loads_twice_in_one_connection){
  /* Loading again (a shell script that runs .load twice) re-registers the same
  ** functions and must not fail or break them. */
  const char *zModule = th_module_path();
  sqlite3 *db;
  char *z;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  db = open_plain();
  sqlite3_enable_load_extension(db, 1);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  z = th_text(db, "SELECT depot_version()");
  ck_assert_str_eq(z, PACKAGE_VERSION);
  sqlite3_free(z);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_module_registers_itself_for_later_connections){
  /* After one .load, connections opened later in the process (the shell's
  ** .open, a second Python connection) have the extension too. */
  const char *zModule = th_module_path();
  sqlite3 *db, *db2 = 0;
  char *z;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  db = open_plain();
  sqlite3_enable_load_extension(db, 1);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  sqlite3_close(db);
  ck_assert_int_eq(sqlite3_open(":memory:", &db2), SQLITE_OK);
  z = th_text(db2, "SELECT depot_version()");
  ck_assert_str_eq(z, PACKAGE_VERSION);
  sqlite3_free(z);
  sqlite3_close(db2);
}
END_TEST

/* Runs SELECT load_extension(<module>) [, load_extension(<module>)] on db
** and asserts that it succeeds. */
static void load_through_sql(sqlite3 *db, const char *zModule, int nLoad){
  char *zSql = sqlite3_mprintf(nLoad==2 ?
      "SELECT load_extension(%Q), load_extension(%Q)" :
      "SELECT load_extension(%Q)", zModule, zModule);
  char *zErr = 0;
  int rc;
  ck_assert_ptr_nonnull(zSql);
  sqlite3_enable_load_extension(db, 1);
  rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "%s: %s", zSql, zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_free(zSql);
}

START_TEST(test_module_loads_through_sql_where_already_registered){
  /* A host that loads extensions with SQL on every connection it opens
  ** (SELECT load_extension(...)): the second connection already has the
  ** extension from the automatic registration, and loading it again while
  ** that SELECT runs must still succeed. */
  const char *zModule = th_module_path();
  sqlite3 *db, *db2;
  char *z;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  db = open_plain();
  load_through_sql(db, zModule, 1);
  ck_assert_int_eq(sqlite3_open(":memory:", &db2), SQLITE_OK);
  load_through_sql(db2, zModule, 1);
  z = th_text(db2, "SELECT depot_version()");
  ck_assert_str_eq(z, PACKAGE_VERSION);
  sqlite3_free(z);
  sqlite3_close(db2);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_module_loads_twice_in_one_sql_statement){
  const char *zModule = th_module_path();
  sqlite3 *db;
  char *z;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  db = open_plain();
  load_through_sql(db, zModule, 2);
  z = th_text(db, "SELECT count(DISTINCT name) FROM pragma_function_list"
                  " WHERE name IN ('depot_version', 'kv_begin', 'depot_fork')");
  ck_assert_str_eq(z, "3");
  sqlite3_free(z);
  sqlite3_close(db);
}
END_TEST

static void otherVersionFunc(sqlite3_context *ctx, int n, sqlite3_value **a){
  (void)n; (void)a;
  sqlite3_result_text(ctx, "other", -1, SQLITE_STATIC);
}

START_TEST(test_module_registers_over_a_foreign_depot_version){
  /* A depot_version() that is not this module's does not make the load
  ** skip the connection: every component is registered. */
  const char *zModule = th_module_path();
  sqlite3 *db;
  char *z;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  db = open_plain();
  ck_assert_int_eq(sqlite3_create_function(db, "depot_version", 0, SQLITE_UTF8,
                   0, otherVersionFunc, 0, 0), SQLITE_OK);
  sqlite3_enable_load_extension(db, 1);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  z = th_text(db, "SELECT depot_version() || count(DISTINCT name) FROM"
                  " pragma_function_list WHERE name IN ('kv_begin', 'depot_fork')");
  ck_assert_str_eq(z, PACKAGE_VERSION "2");
  sqlite3_free(z);
  sqlite3_close(db);
}
END_TEST

/* Every message logged through SQLITE_CONFIG_LOG, one per line. */
static char zExtLog[4096];
static void ext_log(void *pArg, int rc, const char *zMsg){
  size_t n = strlen(zExtLog);
  (void)pArg;
  snprintf(zExtLog+n, sizeof(zExtLog)-n, "(%d) %s\n", rc, zMsg);
}

START_TEST(test_module_loading_logs_no_error){
  /* Loading the module, loading it again, and every later connection
  ** getting it automatically succeed without an error in SQLite's error
  ** log (an application that watches the log must not see one per
  ** connection). */
  const char *zModule = th_module_path();
  sqlite3 *db, *db2 = 0;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  sqlite3_shutdown();
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_LOG, ext_log, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
  zExtLog[0] = 0;
  db = open_plain();
  sqlite3_enable_load_extension(db, 1);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_load_extension(db, zModule, 0, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_open(":memory:", &db2), SQLITE_OK);
  load_through_sql(db2, zModule, 1);
  ck_assert_int_eq(th_int(db2, "SELECT depot_version() IS NOT NULL"), 1);
  ck_assert_msg(zExtLog[0]==0, "logged: %s", zExtLog);
  sqlite3_close(db2);
  sqlite3_close(db);
}
END_TEST

/* An api-routines table that claims to be SQLite 3.39.0: the module must
** refuse it with a clear message before registering anything. */
static int oldLibversionNumber(void){ return 3039000; }
static const char *oldLibversion(void){ return "3.39.0"; }

START_TEST(test_module_refuses_sqlite_older_than_3_40){
  const char *zModule = th_module_path();
  sqlite3_api_routines api;
  void *h;
  int (*xInit)(sqlite3*, char**, const sqlite3_api_routines*);
  char *zErr = 0;
  int rc;
  ck_assert_msg(zModule!=0, "DEPOT_MODULE is not set");
  h = dlopen(zModule, RTLD_NOW|RTLD_LOCAL);
  ck_assert_msg(h!=0, "dlopen: %s", dlerror());
  *(void**)&xInit = dlsym(h, "sqlite3_depot_init");
  ck_assert_ptr_nonnull(xInit);
  memset(&api, 0, sizeof(api));   /* any other call would crash the test */
  api.libversion_number = oldLibversionNumber;
  api.libversion = oldLibversion;
  api.mprintf = sqlite3_mprintf;
  rc = xInit((sqlite3*)&api, &zErr, &api);
  ck_assert_int_eq(rc, SQLITE_ERROR);
  ck_assert_str_eq(zErr, "depot: requires SQLite 3.40.0 or later, found 3.39.0");
  sqlite3_free(zErr);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("ext");
  TCase *tc = tcase_create("entry");
  tcase_add_test(tc, test_version_matches_configure_version);
  tcase_add_test(tc, test_version_is_deterministic_text);
  tcase_add_test(tc, test_version_rejects_arguments);
  tcase_add_test(tc, test_init_registers_on_every_connection);
  tcase_add_test(tc, test_kv_clock_modes);
  suite_add_tcase(s, tc);
  tc = tcase_create("module");
  tcase_add_test(tc, test_module_loads_through_load_extension);
  tcase_add_test(tc, test_module_outlives_loading_connection);
  tcase_add_test(tc, test_module_loads_twice_in_one_connection);
  tcase_add_test(tc, test_module_refuses_sqlite_older_than_3_40);
  tcase_add_test(tc, test_module_registers_itself_for_later_connections);
  tcase_add_test(tc, test_module_loads_through_sql_where_already_registered);
  tcase_add_test(tc, test_module_loads_twice_in_one_sql_statement);
  tcase_add_test(tc, test_module_registers_over_a_foreign_depot_version);
  tcase_add_test(tc, test_module_loading_logs_no_error);
  suite_add_tcase(s, tc);
  return s;
}
