/*
** check_hooks_api.c -- the "hooks_api" suite: the public write-hook API
** of ext/depot_kv.h (depot_kv_hook_register, depot_kv_hook_unregister,
** depot_kv_value_bind), used through SQL connections as an application
** uses it.
**
** A hook registered through one connection on a kv_btree table declared
** in main, and one on a table declared in temp, hear the writes of a
** second connection of the same file, with old values, every SQLite type
** of key and value, and keys with NUL bytes; an unqualified name resolves
** as SQLite does (temp first); NEEDS_INIT reports the existing rows once,
** so an additive sum kept by xInit+xWrite matches the table; the hook
** outlives the connection that registered it; unregister stops the calls
** (also from inside a callback) and xDestroy runs once after it; DROP
** TABLE reaches xRemoved; a callback
** mirrors the table into a plain SQLite table with depot_kv_value_bind;
** concurrent writer threads; an in-memory database's anonymous store; bad
** input.  Run under ThreadSanitizer too.
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "ext/depot_kv.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- log --- */

/* What the callbacks of one hook heard, one line per call. */
typedef struct HookLog HookLog;
struct HookLog {
  pthread_mutex_t mu;
  char z[16384];
  int nWrite, nInit, nRemoved, nDestroyed;
  sqlite3_int64 iSum;               /* xInit + xWrite deltas of values */
  depot_kv_hook *pSelf;             /* unregister itself at nStopAt */
  int nStopAt;
  int rcNested;                     /* register from inside a callback */
};

static void logInit(HookLog *p){
  memset(p, 0, sizeof(*p));
  pthread_mutex_init(&p->mu, 0);
}

static void logFree(HookLog *p){
  pthread_mutex_destroy(&p->mu);
}

/* Append v to z as i:1, r:2.5, t:'ab', b:x'00ff' or null ("-" for a
** NULL pointer). */
static void fmtValue(char *z, size_t n, const depot_kv_value *v){
  size_t k = strlen(z);
  int i;
  if( v==0 ){
    snprintf(z+k, n-k, "-");
    return;
  }
  switch( v->eType ){
    case SQLITE_INTEGER: snprintf(z+k, n-k, "i:%lld", (long long)v->i); break;
    case SQLITE_FLOAT:   snprintf(z+k, n-k, "r:%g", v->r); break;
    case SQLITE_TEXT:
      snprintf(z+k, n-k, "t:'");
      for(i=0; i<v->n; i++){
        char c = ((const char*)v->p)[i];
        k = strlen(z);
        snprintf(z+k, n-k, c ? "%c" : "\\0", c);
      }
      k = strlen(z);
      snprintf(z+k, n-k, "'");
      break;
    case SQLITE_BLOB:
      snprintf(z+k, n-k, "b:x'");
      for(i=0; i<v->n; i++){
        k = strlen(z);
        snprintf(z+k, n-k, "%02x", ((const unsigned char*)v->p)[i]);
      }
      k = strlen(z);
      snprintf(z+k, n-k, "'");
      break;
    default: snprintf(z+k, n-k, "null"); break;
  }
}

static sqlite3_int64 intOf(const depot_kv_value *v){
  return (v && v->eType==SQLITE_INTEGER) ? v->i : 0;
}

static void onWrite(void *pArg, const depot_kv_value *pKey,
                    const depot_kv_value *pOld, const depot_kv_value *pNew){
  HookLog *p = (HookLog*)pArg;
  char z[512] = "W ";
  fmtValue(z, sizeof(z), pKey);
  strcat(z, " ");
  fmtValue(z, sizeof(z), pOld);
  strcat(z, " ");
  fmtValue(z, sizeof(z), pNew);
  strcat(z, "\n");
  pthread_mutex_lock(&p->mu);
  if( strlen(p->z)+strlen(z) < sizeof(p->z) ) strcat(p->z, z);
  p->nWrite++;
  p->iSum += intOf(pNew) - intOf(pOld);
  pthread_mutex_unlock(&p->mu);
  if( p->pSelf && p->nWrite==p->nStopAt ){
    depot_kv_hook_unregister(p->pSelf);
    p->pSelf = 0;
  }
}

static void onInit(void *pArg, const depot_kv_value *pKey,
                   const depot_kv_value *pVal){
  HookLog *p = (HookLog*)pArg;
  char z[512] = "I ";
  fmtValue(z, sizeof(z), pKey);
  strcat(z, " ");
  fmtValue(z, sizeof(z), pVal);
  strcat(z, "\n");
  pthread_mutex_lock(&p->mu);
  if( strlen(p->z)+strlen(z) < sizeof(p->z) ) strcat(p->z, z);
  p->nInit++;
  p->iSum += intOf(pVal);
  pthread_mutex_unlock(&p->mu);
}

static void onRemoved(void *pArg){
  HookLog *p = (HookLog*)pArg;
  pthread_mutex_lock(&p->mu);
  strcat(p->z, "R\n");
  p->nRemoved++;
  pthread_mutex_unlock(&p->mu);
}

/* xWrite that tries to register a hook from inside the callback. */
static void onWriteNested(void *pArg, const depot_kv_value *pKey,
                          const depot_kv_value *pOld,
                          const depot_kv_value *pNew){
  static const depot_kv_hook_methods m = { 1, onWrite, 0, 0, 0 };
  HookLog *p = (HookLog*)pArg;
  sqlite3 *db = 0;
  depot_kv_hook *h = 0;
  char *zErr = 0;
  (void)pKey; (void)pOld; (void)pNew;
  sqlite3_open(":memory:", &db);
  p->rcNested = depot_kv_hook_register(db, 0, "t", DEPOT_KV_HOOK_NEEDS_WRITE,
                                       &m, p, &h, &zErr);
  if( h ) depot_kv_hook_unregister(h);
  sqlite3_free(zErr);
  sqlite3_close(db);
}

static void onDestroy(void *pArg){
  HookLog *p = (HookLog*)pArg;
  pthread_mutex_lock(&p->mu);
  p->nDestroyed++;
  pthread_mutex_unlock(&p->mu);
}

static const depot_kv_hook_methods gMethods = {
  1, onWrite, onInit, onRemoved, onDestroy
};

/* Register on zSchema.zTable of db; fails the test on error. */
static depot_kv_hook *hookOn(sqlite3 *db, const char *zSchema,
                             const char *zTable, unsigned flags,
                             HookLog *pLog){
  depot_kv_hook *h = 0;
  char *zErr = 0;
  int rc = depot_kv_hook_register(db, zSchema, zTable, flags, &gMethods,
                                  pLog, &h, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "register %s.%s: %d %s",
                zSchema ? zSchema : "(null)", zTable, rc, zErr ? zErr : "");
  ck_assert_ptr_null(zErr);
  ck_assert_ptr_nonnull(h);
  return h;
}

static void logIs(HookLog *p, const char *zWant){
  pthread_mutex_lock(&p->mu);
  ck_assert_msg(strcmp(p->z, zWant)==0, "hook heard:\n%s\nexpected:\n%s",
                p->z, zWant);
  p->z[0] = 0;
  pthread_mutex_unlock(&p->mu);
}

static char *dbPath(const char *zTag){
  char *zDir = th_tmpdir(zTag);
  char *z = sqlite3_mprintf("%s/a.db", zDir);
  sqlite3_free(zDir);
  return z;
}

/* ------------------------------------------------------------ tests --- */

/* Hooks registered through db1 on main.t and temp.u hear what a second
** connection of the same file writes, with old values where asked. */
START_TEST(test_main_and_temp_tables_hear_other_connection){
  char *zPath = dbPath("hapi_main_temp");
  sqlite3 *db1 = th_open(zPath), *db2;
  HookLog a, b;
  depot_kv_hook *hA, *hB;
  char *zSql;
  logInit(&a);
  logInit(&b);
  th_exec(db1, "CREATE VIRTUAL TABLE main.t USING kv_btree;"
               "INSERT INTO main.t VALUES('a', 1);");
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE temp.u USING kv_btree("
                         "dir='%q-u')", zPath);
  th_exec(db1, zSql);
  hA = hookOn(db1, "main", "t", DEPOT_KV_HOOK_NEEDS_WRITE
              |DEPOT_KV_HOOK_NEEDS_OLD_VALUE, &a);
  hB = hookOn(db1, "temp", "u", DEPOT_KV_HOOK_NEEDS_WRITE, &b);

  db2 = th_open(zPath);             /* declares t in temp as it loads */
  th_exec(db2, "INSERT INTO t VALUES('b', 2.5), (3, x'00ff');"
               "INSERT INTO t VALUES(4.5, NULL), (x'0102', 'txt');");
  logIs(&a, "W i:3 - b:x'00ff'\n"          /* key order in a commit */
            "W t:'b' - r:2.5\n"
            "W r:4.5 - null\n"
            "W b:x'0102' - t:'txt'\n");
  th_exec(db2, "BEGIN; UPDATE t SET value=10 WHERE key='a';"
               "DELETE FROM t WHERE key=3; DELETE FROM t WHERE key=99;"
               "COMMIT;");
  logIs(&a, "W i:3 b:x'00ff' -\n"
            "W t:'a' i:1 i:10\n");
  th_exec(db2, "BEGIN; INSERT INTO t VALUES('z', 1); ROLLBACK;");
  th_exec(db2, "INSERT INTO main.t VALUES('m', 7)");   /* through main */
  logIs(&a, "W t:'m' - i:7\n");

  th_exec(db2, zSql);                                  /* temp.u in db2 */
  th_exec(db2, "INSERT INTO u VALUES('k', 1); DELETE FROM u WHERE key='k';"
               "DELETE FROM u WHERE key='none';");
  logIs(&b, "W t:'k' - i:1\nW t:'k' - -\n");
  logIs(&a, "");

  depot_kv_hook_unregister(hA);
  depot_kv_hook_unregister(hB);
  th_exec(db2, "INSERT INTO t VALUES('after', 1); INSERT INTO u VALUES(1,1)");
  logIs(&a, "");
  logIs(&b, "");
  sqlite3_close(db2);
  sqlite3_close(db1);
  logFree(&a);
  logFree(&b);
  sqlite3_free(zSql);
  sqlite3_free(zPath);
}
END_TEST

/* Keys: text and blob keys with NUL bytes; a REAL key keeps its type,
** except in a delete reported without its old value. */
START_TEST(test_key_types_round_trip){
  char *zPath = dbPath("hapi_keys");
  sqlite3 *db = th_open(zPath);
  HookLog a, b;
  depot_kv_hook *hA, *hB;
  logInit(&a);
  logInit(&b);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree");
  hA = hookOn(db, 0, "t", DEPOT_KV_HOOK_NEEDS_WRITE, &a);
  hB = hookOn(db, 0, "t", DEPOT_KV_HOOK_NEEDS_WRITE
              |DEPOT_KV_HOOK_NEEDS_OLD_VALUE, &b);
  th_exec(db, "INSERT INTO t VALUES('a'||char(0)||'b', 1);"
              "INSERT INTO t VALUES(x'00ff00', 2);"
              "INSERT INTO t VALUES(2.0, 3);");
  logIs(&a, "W t:'a\\0b' - i:1\nW b:x'00ff00' - i:2\nW r:2 - i:3\n");
  logIs(&b, "W t:'a\\0b' - i:1\nW b:x'00ff00' - i:2\nW r:2 - i:3\n");
  th_exec(db, "DELETE FROM t WHERE key=2.0");
  logIs(&a, "W i:2 - -\n");                 /* no record of the type */
  logIs(&b, "W r:2 i:3 -\n");
  depot_kv_hook_unregister(hA);
  depot_kv_hook_unregister(hB);
  sqlite3_close(db);
  logFree(&a);
  logFree(&b);
  sqlite3_free(zPath);
}
END_TEST

/* An unqualified name resolves as SQLite resolves it: temp, then main. */
START_TEST(test_unqualified_name_resolves_temp_first){
  char *zPath = dbPath("hapi_resolve");
  sqlite3 *db = th_open(zPath);
  HookLog a;
  depot_kv_hook *h = 0;
  char *zErr = 0;
  int rc;
  logInit(&a);
  th_exec(db, "CREATE VIRTUAL TABLE main.v USING kv_memory;"
              "CREATE TEMP TABLE v(x);");
  rc = depot_kv_hook_register(db, 0, "v", DEPOT_KV_HOOK_NEEDS_WRITE,
                              &gMethods, &a, &h, &zErr);
  ck_assert_int_eq(rc, SQLITE_ERROR);
  ck_assert_ptr_null(h);
  ck_assert_msg(zErr && strstr(zErr, "temp.v is not a KV table"), "%s",
                zErr ? zErr : "(null)");
  sqlite3_free(zErr);
  h = hookOn(db, "main", "V", DEPOT_KV_HOOK_NEEDS_WRITE, &a);
  th_exec(db, "INSERT INTO main.v VALUES(1, 2)");
  logIs(&a, "W i:1 - i:2\n");
  depot_kv_hook_unregister(h);
  sqlite3_close(db);
  logFree(&a);
  sqlite3_free(zPath);
}
END_TEST

/* NEEDS_INIT: one xInit per live key with its final value; xInit plus
** xWrite keep an additive sum equal to the table's. */
START_TEST(test_needs_init_over_existing_rows){
  char *zPath = dbPath("hapi_init");
  sqlite3 *db1 = th_open(zPath), *db2;
  HookLog a;
  depot_kv_hook *h;
  int i;
  logInit(&a);
  th_exec(db1, "CREATE VIRTUAL TABLE t USING kv_btree;"
               "INSERT INTO t VALUES(1, 10), (2, 20), (3, 30);"
               "UPDATE t SET value=21 WHERE key=2; DELETE FROM t WHERE key=3;"
               "INSERT INTO t VALUES(4, 40);");
  sqlite3_close(db1);
  db1 = th_open(zPath);              /* a reopened store, WAL replayed */
  h = hookOn(db1, "main", "t", DEPOT_KV_HOOK_NEEDS_INIT, &a);
  logIs(&a, "I i:1 i:10\nI i:2 i:21\nI i:4 i:40\n");
  th_exec(db1, "INSERT INTO t VALUES(5, 50)");
  logIs(&a, "");                     /* NEEDS_INIT alone: no xWrite */
  depot_kv_hook_unregister(h);

  a.iSum = 0;
  h = hookOn(db1, "main", "t", DEPOT_KV_HOOK_NEEDS_INIT
             |DEPOT_KV_HOOK_NEEDS_WRITE|DEPOT_KV_HOOK_NEEDS_OLD_VALUE, &a);
  ck_assert_int_eq(a.nInit, 3+4);
  db2 = th_open(zPath);
  for(i=0; i<50; i++){
    char *z = sqlite3_mprintf("INSERT OR REPLACE INTO t VALUES(%d, %d);"
                              "DELETE FROM t WHERE key=%d;", i%7, i, (i*3)%7);
    th_exec((i&1) ? db1 : db2, z);
    sqlite3_free(z);
  }
  ck_assert_int_eq(a.iSum, th_int(db2, "SELECT coalesce(sum(value),0) "
                                       "FROM t"));
  depot_kv_hook_unregister(h);
  sqlite3_close(db2);
  sqlite3_close(db1);
  logFree(&a);
  sqlite3_free(zPath);
}
END_TEST

/* The hook holds the store, not the connection: it goes on hearing the
** other connections after the registering one closed. */
START_TEST(test_hook_outlives_registering_connection){
  char *zPath = dbPath("hapi_close");
  sqlite3 *db1 = th_open(zPath), *db2;
  HookLog a;
  depot_kv_hook *h;
  logInit(&a);
  th_exec(db1, "CREATE VIRTUAL TABLE t USING kv_log");
  h = hookOn(db1, "main", "t", DEPOT_KV_HOOK_NEEDS_WRITE, &a);
  ck_assert_int_eq(sqlite3_close(db1), SQLITE_OK);
  db2 = th_open(zPath);
  th_exec(db2, "INSERT INTO t VALUES('x', 1)");
  logIs(&a, "W t:'x' - i:1\n");
  sqlite3_close(db2);                /* no connection left */
  db2 = th_open(zPath);
  th_exec(db2, "INSERT INTO t VALUES('y', 2)");
  logIs(&a, "W t:'y' - i:2\n");
  ck_assert_int_eq(a.nDestroyed, 0);
  depot_kv_hook_unregister(h);
  ck_assert_int_eq(a.nDestroyed, 1);   /* xDestroy ran, once */
  th_exec(db2, "INSERT INTO t VALUES('z', 3)");
  logIs(&a, "");
  sqlite3_close(db2);
  logFree(&a);
  sqlite3_free(zPath);
}
END_TEST

/* Unregistering inside a callback: no call after it; DROP TABLE reaches
** xRemoved; NULL is a no-op; registering inside a callback is misuse. */
START_TEST(test_unregister_and_removed){
  static const depot_kv_hook_methods mNested = { 1, onWriteNested, 0, 0, 0 };
  char *zPath = dbPath("hapi_unreg");
  sqlite3 *db = th_open(zPath);
  HookLog a, b, c;
  depot_kv_hook *hB, *hC = 0;
  logInit(&a);
  logInit(&b);
  logInit(&c);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory");
  a.pSelf = hookOn(db, 0, "t", DEPOT_KV_HOOK_NEEDS_WRITE, &a);
  a.nStopAt = 2;
  hB = hookOn(db, "main", "t", DEPOT_KV_HOOK_NEEDS_WRITE, &b);
  ck_assert_int_eq(depot_kv_hook_register(db, "main", "t",
      DEPOT_KV_HOOK_NEEDS_WRITE, &mNested, &c, &hC, 0), SQLITE_OK);
  th_exec(db, "INSERT INTO t VALUES(1,1), (2,2), (3,3)");
  ck_assert_int_eq(a.nWrite, 2);       /* stopped itself at the second */
  ck_assert_ptr_null(a.pSelf);
  ck_assert_int_eq(a.nDestroyed, 1);   /* once the delivery let it go */
  ck_assert_int_eq(b.nWrite, 3);
  ck_assert_int_eq(c.rcNested, SQLITE_MISUSE);
  depot_kv_hook_unregister(hC);
  depot_kv_hook_unregister(0);
  th_exec(db, "DROP TABLE main.t");
  ck_assert_int_eq(b.nRemoved, 1);
  ck_assert_int_eq(a.nRemoved, 0);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory;"
              "INSERT INTO t VALUES(9, 9)");
  ck_assert_int_eq(b.nWrite, 3);       /* a new table: not followed */
  depot_kv_hook_unregister(hB);
  sqlite3_close(db);
  logFree(&a);
  logFree(&b);
  logFree(&c);
  sqlite3_free(zPath);
}
END_TEST

/* A callback mirrors the table into a plain table of its own connection
** with depot_kv_value_bind. */
typedef struct Mirror Mirror;
struct Mirror {
  sqlite3 *db;
  sqlite3_stmt *pPut, *pDel;
};

static void mirrorWrite(void *pArg, const depot_kv_value *pKey,
                        const depot_kv_value *pOld,
                        const depot_kv_value *pNew){
  Mirror *m = (Mirror*)pArg;
  sqlite3_stmt *s = pNew ? m->pPut : m->pDel;
  (void)pOld;
  ck_assert_int_eq(depot_kv_value_bind(s, 1, pKey), SQLITE_OK);
  if( pNew ) ck_assert_int_eq(depot_kv_value_bind(s, 2, pNew), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(s), SQLITE_DONE);
  sqlite3_reset(s);
}

START_TEST(test_value_bind_mirrors_table){
  static const depot_kv_hook_methods mMirror = { 1, mirrorWrite, 0, 0, 0 };
  char *zPath = dbPath("hapi_mirror");
  sqlite3 *db = th_open(zPath);
  depot_kv_hook *h = 0;
  Mirror m;
  memset(&m, 0, sizeof(m));
  ck_assert_int_eq(sqlite3_open(":memory:", &m.db), SQLITE_OK);
  th_exec(m.db, "CREATE TABLE mirror(key PRIMARY KEY, value)");
  ck_assert_int_eq(sqlite3_prepare_v2(m.db, "INSERT OR REPLACE INTO "
                   "mirror VALUES(?1, ?2)", -1, &m.pPut, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(m.db, "DELETE FROM mirror WHERE "
                   "key=?1", -1, &m.pDel, 0), SQLITE_OK);
  ck_assert_int_eq(depot_kv_value_bind(m.pPut, 2, 0), SQLITE_OK);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree");
  ck_assert_int_eq(depot_kv_hook_register(db, 0, "t",
      DEPOT_KV_HOOK_NEEDS_WRITE, &mMirror, &m, &h, 0), SQLITE_OK);
  th_exec(db, "INSERT INTO t VALUES(1, 'one'), ('two', 2.5), (x'03', x'ff'),"
              "(4.5, NULL), ('five', 5); DELETE FROM t WHERE key='five';"
              "UPDATE t SET value='uno' WHERE key=1");
  {
    char *zKv = th_text(db, "SELECT group_concat(quote(key)||'='||"
                            "quote(value)||typeof(key), ',') FROM "
                            "(SELECT * FROM t ORDER BY quote(key))");
    char *zMirror = th_text(m.db, "SELECT group_concat(quote(key)||'='||"
                            "quote(value)||typeof(key), ',') FROM "
                            "(SELECT * FROM mirror ORDER BY quote(key))");
    ck_assert_str_eq(zKv, zMirror);
    sqlite3_free(zKv);
    sqlite3_free(zMirror);
  }
  depot_kv_hook_unregister(h);
  sqlite3_finalize(m.pPut);
  sqlite3_finalize(m.pDel);
  sqlite3_close(m.db);
  sqlite3_close(db);
  sqlite3_free(zPath);
}
END_TEST

/* Writer threads, each with its own connection of the file, commit
** concurrently through the temp declarations; the hook's running sum
** (xInit + xWrite with old values) equals the table's at the end. */
typedef struct Writer Writer;
struct Writer {
  const char *zPath;
  int iThread;
};

static void *writerMain(void *pArg){
  Writer *w = (Writer*)pArg;
  sqlite3 *db = 0;
  int i;
  if( sqlite3_open_v2(w->zPath, &db, SQLITE_OPEN_READWRITE, 0)!=SQLITE_OK ){
    return (void*)1;
  }
  sqlite3_busy_timeout(db, th_busy_ms(5000));
  for(i=0; i<100; i++){
    char *z = sqlite3_mprintf("INSERT OR REPLACE INTO t VALUES(%d, %d);"
                              "DELETE FROM t WHERE key=%d",
                              w->iThread*1000 + i%13, i, w->iThread*1000
                              + (i*5)%13);
    int rc = sqlite3_exec(db, z, 0, 0, 0);
    sqlite3_free(z);
    if( rc!=SQLITE_OK ){
      sqlite3_close(db);
      return (void*)2;
    }
  }
  sqlite3_close(db);
  return 0;
}

START_TEST(test_concurrent_writers_sum){
  char *zPath = dbPath("hapi_threads");
  sqlite3 *db = th_open(zPath);
  pthread_t aT[3];
  Writer aW[3];
  HookLog a;
  depot_kv_hook *h;
  int i;
  logInit(&a);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree;"
              "INSERT INTO t VALUES(-1, 1000), (-2, 2000)");
  h = hookOn(db, 0, "t", DEPOT_KV_HOOK_NEEDS_INIT|DEPOT_KV_HOOK_NEEDS_WRITE
             |DEPOT_KV_HOOK_NEEDS_OLD_VALUE, &a);
  ck_assert_int_eq(a.iSum, 3000);
  for(i=0; i<3; i++){
    aW[i].zPath = zPath;
    aW[i].iThread = i;
    ck_assert_int_eq(pthread_create(&aT[i], 0, writerMain, &aW[i]), 0);
  }
  for(i=0; i<3; i++){
    void *pRet = 0;
    pthread_join(aT[i], &pRet);
    ck_assert_ptr_null(pRet);
  }
  ck_assert_int_eq(a.iSum, th_int(db, "SELECT sum(value) FROM t"));
  ck_assert_int_ge(a.nWrite, 3*100);
  depot_kv_hook_unregister(h);
  sqlite3_close(db);
  logFree(&a);
  sqlite3_free(zPath);
}
END_TEST

/* An in-memory database's tables are in its anonymous store. */
START_TEST(test_in_memory_database){
  sqlite3 *db = th_open(":memory:");
  HookLog a;
  depot_kv_hook *h;
  logInit(&a);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory;"
              "INSERT INTO t VALUES('old', 1)");
  h = hookOn(db, 0, "t", DEPOT_KV_HOOK_NEEDS_WRITE|DEPOT_KV_HOOK_NEEDS_INIT,
             &a);
  th_exec(db, "INSERT INTO t VALUES('new', 2)");
  logIs(&a, "I t:'old' i:1\nW t:'new' - i:2\n");
  sqlite3_close(db);                   /* the hook keeps the store */
  depot_kv_hook_unregister(h);
  logFree(&a);
}
END_TEST

/* Bad input: a message, a code, no hook. */
static void expectFail(sqlite3 *db, const char *zSchema, const char *zTable,
                       unsigned flags, const depot_kv_hook_methods *pM,
                       int bPpHook, int rcWant, const char *zWant){
  HookLog a;
  depot_kv_hook *h = (depot_kv_hook*)&a;   /* overwritten with NULL */
  char *zErr = 0;
  int rc;
  logInit(&a);
  rc = depot_kv_hook_register(db, zSchema, zTable, flags, pM, &a,
                              bPpHook ? &h : 0, &zErr);
  ck_assert_msg(rc==rcWant, "%s: rc %d, want %d (%s)", zWant, rc, rcWant,
                zErr ? zErr : "");
  ck_assert_msg(zErr && strstr(zErr, zWant), "want '%s', got '%s'", zWant,
                zErr ? zErr : "(null)");
  if( bPpHook ) ck_assert_ptr_null(h);
  ck_assert_int_eq(a.nDestroyed, 0);   /* a failed registration: none */
  sqlite3_free(zErr);
  logFree(&a);
}

START_TEST(test_bad_input){
  static const depot_kv_hook_methods mNone = { 1, 0, 0, 0, 0 };
  static const depot_kv_hook_methods mV2 = { 2, onWrite, onInit, 0, 0 };
  char *zPath = dbPath("hapi_bad");
  sqlite3 *db = th_open(zPath);
  const unsigned W = DEPOT_KV_HOOK_NEEDS_WRITE;
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree;"
              "CREATE TABLE plain(x); CREATE VIEW vw AS SELECT 1;");
  expectFail(0, 0, "t", W, &gMethods, 1, SQLITE_MISUSE, "db is NULL");
  expectFail(db, 0, 0, W, &gMethods, 1, SQLITE_MISUSE, "table name is NULL");
  expectFail(db, 0, "t", W, 0, 1, SQLITE_MISUSE, "methods are NULL");
  expectFail(db, 0, "t", W, &gMethods, 0, SQLITE_MISUSE, "ppHook is NULL");
  expectFail(db, 0, "t", W, &mV2, 1, SQLITE_MISUSE, "iVersion must be 1");
  expectFail(db, 0, "t", 0, &gMethods, 1, SQLITE_MISUSE,
             "flags need DEPOT_KV_HOOK_NEEDS_WRITE");
  expectFail(db, 0, "t", DEPOT_KV_HOOK_NEEDS_OLD_VALUE, &gMethods, 1,
             SQLITE_MISUSE, "flags need");
  expectFail(db, 0, "t", W|0x10, &gMethods, 1, SQLITE_MISUSE,
             "unknown flag bits");
  expectFail(db, 0, "t", W, &mNone, 1, SQLITE_MISUSE,
             "DEPOT_KV_HOOK_NEEDS_WRITE without xWrite");
  expectFail(db, 0, "t", DEPOT_KV_HOOK_NEEDS_INIT, &mNone, 1, SQLITE_MISUSE,
             "DEPOT_KV_HOOK_NEEDS_INIT without xInit");
  expectFail(db, 0, "nosuch", W, &gMethods, 1, SQLITE_ERROR,
             "no such table: nosuch");
  expectFail(db, "main", "nosuch", W, &gMethods, 1, SQLITE_ERROR,
             "no such table: main.nosuch");
  expectFail(db, "nodb", "t", W, &gMethods, 1, SQLITE_ERROR,
             "no such table: nodb.t");
  expectFail(db, 0, "plain", W, &gMethods, 1, SQLITE_ERROR,
             "main.plain is not a KV table");
  expectFail(db, "main", "vw", W, &gMethods, 1, SQLITE_ERROR,
             "main.vw is not a KV table");
  expectFail(db, "main", "kv_tables", W, &gMethods, 1, SQLITE_ERROR,
             "not a KV table");
  /* No message wanted: still the code. */
  {
    depot_kv_hook *h = 0;
    ck_assert_int_eq(depot_kv_hook_register(db, 0, "plain", W, &gMethods, 0,
                                            &h, 0), SQLITE_ERROR);
    ck_assert_ptr_null(h);
  }
  sqlite3_close(db);
  sqlite3_free(zPath);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("hooks_api");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_main_and_temp_tables_hear_other_connection);
  tcase_add_test(tc, test_key_types_round_trip);
  tcase_add_test(tc, test_unqualified_name_resolves_temp_first);
  tcase_add_test(tc, test_needs_init_over_existing_rows);
  tcase_add_test(tc, test_hook_outlives_registering_connection);
  tcase_add_test(tc, test_unregister_and_removed);
  tcase_add_test(tc, test_value_bind_mirrors_table);
  tcase_add_test(tc, test_concurrent_writers_sum);
  tcase_add_test(tc, test_in_memory_database);
  tcase_add_test(tc, test_bad_input);
  suite_add_tcase(s, tc);
  return s;
}
