/*
** check_depot.c -- the "depot" suite, SQL level: databases in the depot VFS
** against plain files (the oracle), snapshot isolation, fencing of stale
** writers in and across processes, SIGKILL during commits, injected store
** write/sync failures, corrupted store rows, page sizes, the pragma and URI
** surface, and depot_commits / depot_stats / depot_import / depot_export.
**
** DEPOT_TORTURE_ITERS=N runs N kill rounds (default 3) in the kill test.
*/
#define _GNU_SOURCE 1          /* unshare, CLONE_NEWNS */
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/memfile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void setup_vfs(void){
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
}

/* URI of database zDb in store <zDir>/store.depot, with extra parameters.
** With $DEPOT_TEST_STORE_URI (a postgresql:// URI, tests/check/pg_suite.sh)
** the store is that server's, in a schema named after zDir. */
static char *depot_uri(const char *zDir, const char *zDb, const char *zExtra){
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  if( zPg && zPg[0] ){
    const char *zBase = strrchr(zDir, '/');
    sqlite3_str *s = sqlite3_str_new(0);
    const char *z;
    sqlite3_str_appendf(s, "file:%s/store.depot?vfs=depot&db=%s%s%s&store=",
                        zDir, zDb, zExtra ? "&" : "", zExtra ? zExtra : "");
    for(z=zPg; *z; z++){
      if( *z=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *z);
    }
    sqlite3_str_appendf(s, "%%26schema=%s", zBase ? zBase+1 : zDir);
    return sqlite3_str_finish(s);
  }
  return sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=%s%s%s", zDir, zDb,
                         zExtra ? "&" : "", zExtra ? zExtra : "");
}

static sqlite3 *open_depot(const char *zDir, const char *zDb,
                           const char *zExtra){
  char *zUri = depot_uri(zDir, zDb, zExtra);
  sqlite3 *db;
  setup_vfs();
  db = th_open(zUri);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_free(zUri);
  return db;
}

static void assert_integrity(sqlite3 *db){
  char *z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
}

/* ---- depot_last_error(): the reason behind "unable to open" ---- */

/* Open zUri without SQLITE_OPEN_CREATE problems hidden: the result code of
** sqlite3_open_v2 (the handle is closed). */
static int try_open_uri(const char *zUri){
  sqlite3 *db = 0;
  int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                           |SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "PRAGMA user_version", 0, 0, 0);
  sqlite3_close(db);
  return rc;
}

/* A failed open says only "unable to open database file"; depot_last_error()
** on the same thread gives the reason, and the next open that succeeds
** clears it. */
START_TEST(test_depot_last_error_gives_the_reason_of_a_failed_open){
  char *zDir = th_tmpdir("depot-lasterr");
  char *zBad = depot_uri(zDir, "app", "cache_kb=abc");
  char *zGood = depot_uri(zDir, "app", 0);
  char *z;
  sqlite3 *boot;
  setup_vfs();
  boot = th_open(":memory:");
  ck_assert_ptr_null(th_text(boot, "SELECT depot_last_error()"));
  ck_assert_int_eq(try_open_uri(zBad), SQLITE_CANTOPEN);
  z = th_text(boot, "SELECT depot_last_error()");
  ck_assert_ptr_nonnull(z);
  ck_assert_str_eq(z, "depot: cache_kb must be an integer 0..1073741824, "
                      "got 'abc'");
  sqlite3_free(z);
  /* reading it does not clear it; a successful open does */
  z = th_text(boot, "SELECT depot_last_error()");
  ck_assert_ptr_nonnull(z);
  sqlite3_free(z);
  ck_assert_int_eq(try_open_uri(zGood), SQLITE_OK);
  ck_assert_ptr_null(th_text(boot, "SELECT depot_last_error()"));
  sqlite3_close(boot);
  sqlite3_free(zBad);
  sqlite3_free(zGood);
  sqlite3_free(zDir);
}
END_TEST

static void *last_error_of_thread(void *pArg){
  const char *z = depot_vfs_last_error();
  *(int*)pArg = z!=0;
  return 0;
}

/* The reason is the calling thread's: another thread sees none. */
START_TEST(test_depot_last_error_is_per_thread){
  char *zDir = th_tmpdir("depot-lasterrt");
  char *zBad = depot_uri(zDir, "", 0);
  pthread_t t;
  int bSeen = -1;
  setup_vfs();
  ck_assert_int_eq(try_open_uri(zBad), SQLITE_CANTOPEN);
  ck_assert_ptr_nonnull(depot_vfs_last_error());
  ck_assert_ptr_nonnull(strstr(depot_vfs_last_error(), "must be 1..255"));
  ck_assert_int_eq(pthread_create(&t, 0, last_error_of_thread, &bSeen), 0);
  pthread_join(t, 0);
  ck_assert_int_eq(bSeen, 0);
  sqlite3_free(zBad);
  sqlite3_free(zDir);
}
END_TEST

/* A reason longer than the 1023 bytes kept is cut before a whole UTF-8
** character, never inside one: the plain database given as a store sits
** under directories of two-byte characters and the message names its path
** twice, so the cut falls inside the second one; of two file names one
** byte apart, one puts byte 1023 inside a character. */
START_TEST(test_depot_last_error_cuts_a_long_reason_at_a_character){
  char *zDir = th_tmpdir("depot-lasterrl");
  char *zAbs = realpath(zDir, 0);
  char *zPath;
  int i, j, iPad, nLeft, nCut = 0;
  setup_vfs();
  /* an absolute path of about 488 bytes (the message names it twice, so it
  ** passes 1023 bytes inside the second one; SQLite's unix VFS takes at
  ** most 512), made long by directories of 'é' below the test's own */
  ck_assert_ptr_nonnull(zAbs);
  zPath = sqlite3_mprintf("%s", zAbs);
  nLeft = 488 - (int)strlen(zAbs) - 6;
  ck_assert_int_gt(nLeft, 200);
  while( nLeft>=3 ){
    char *zSeg = sqlite3_mprintf("%s", "");
    int nChar = (nLeft-1)/2 < 55 ? (nLeft-1)/2 : 55;
    for(j=0; j<nChar; j++) zSeg = sqlite3_mprintf("%z\xc3\xa9", zSeg);
    zPath = sqlite3_mprintf("%z/%z", zPath, zSeg);
    ck_assert_int_eq(mkdir(zPath, 0755), 0);
    nLeft -= 1 + 2*nChar;
  }
  free(zAbs);
  for(iPad=0; iPad<2; iPad++){
    char *zFile = sqlite3_mprintf("%s/%s.db", zPath, iPad ? "pp" : "p");
    char *zUri = sqlite3_mprintf("file:%s?vfs=depot", zFile);
    const char *z;
    int n;
    sqlite3 *p;
    ck_assert_int_eq(sqlite3_open_v2(zFile, &p, SQLITE_OPEN_READWRITE
                                     |SQLITE_OPEN_CREATE, "unix"), SQLITE_OK);
    th_exec(p, "CREATE TABLE t(x)");
    sqlite3_close(p);
    ck_assert_int_eq(try_open_uri(zUri), SQLITE_CANTOPEN);
    z = depot_vfs_last_error();
    ck_assert_ptr_nonnull(z);
    ck_assert_ptr_nonnull(strstr(z, "is an SQLite database but not a depot"));
    n = (int)strlen(z);
    ck_assert_int_le(n, 1023);
    ck_assert_int_ge(n, 1022);
    if( n==1022 ) nCut++;
    /* whole characters: the last lead byte has all its continuation bytes */
    for(i=n-1; i>0 && ((unsigned char)z[i] & 0xc0)==0x80; i--){}
    if( (unsigned char)z[i]>=0xc0 ) ck_assert_int_eq(n-i, 2);
    sqlite3_free(zUri);
    sqlite3_free(zFile);
  }
  ck_assert_int_eq(nCut, 1);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* ---- depot_default_vfs(): hosts that cannot name a VFS ---- */

/* Gives the default VFS back whatever a test left (teardown). */
static void default_vfs_restore(void){
  depot_vfs_set_default(0);
}

/* Opens store zStore through a vfs=depot URI with extra parameters. */
static sqlite3 *open_depot_store(const char *zStore, const char *zExtra){
  char *zUri = sqlite3_mprintf("file:%s?vfs=depot%s%s", zStore,
                               zExtra ? "&" : "", zExtra ? zExtra : "");
  sqlite3 *db = th_open(zUri);
  sqlite3_free(zUri);
  return db;
}

/* Opens zPath without a VFS name and without SQLITE_OPEN_URI, as a host
** without URI filenames (better-sqlite3) does. */
static sqlite3 *open_plain_name(const char *zPath){
  sqlite3 *db = 0;
  int rc = sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READWRITE
                           |SQLITE_OPEN_CREATE, 0);
  ck_assert_msg(rc==SQLITE_OK, "open %s: %s", zPath, sqlite3_errmsg(db));
  sqlite3_extended_result_codes(db, 1);
  return db;
}

START_TEST(test_depot_default_vfs_opens_a_plain_name_as_a_depot_database){
  char *zDir = th_tmpdir("depot-dflt");
  char *zStore = sqlite3_mprintf("%s/s.depot", zDir);
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *boot, *db, *p;
  char *z;
  setup_vfs();
  boot = th_open(":memory:");
  z = th_text(boot, "SELECT depot_default_vfs()");
  ck_assert_str_ne(z, "depot");
  sqlite3_free(z);
  z = th_text(boot, "SELECT depot_default_vfs(1)");
  ck_assert_str_eq(z, "depot");
  sqlite3_free(z);
  z = th_text(boot, "SELECT depot_default_vfs(1.0)");    /* as JS binds 1 */
  ck_assert_str_eq(z, "depot");
  sqlite3_free(z);
  ck_assert_str_eq(sqlite3_vfs_find(0)->zName, "depot");
  db = open_plain_name(zStore);
  th_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1),(2);");
  z = th_text(boot, "SELECT depot_default_vfs(0)");
  ck_assert_str_ne(z, "depot");
  ck_assert_str_eq(z, sqlite3_vfs_find(0)->zName);
  sqlite3_free(z);
  /* Opened after the default went back: a plain SQLite file. */
  p = open_plain_name(zPlain);
  th_exec(p, "CREATE TABLE p(x)");
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM t"), 3);
  sqlite3_close(db);
  /* The store holds database main, branch main, with both commits. */
  ck_assert_int_eq(th_intf(boot, "SELECT count(*) FROM depot_commits(%Q,"
                           " 'main', 'main')", zStore), 2);
  db = th_open(z = sqlite3_mprintf("file:%s?vfs=depot", zStore));
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM t"), 3);
  sqlite3_close(db);
  z = sqlite3_mprintf("SELECT count(*) FROM depot_databases(%Q)", zPlain);
  ck_assert_int_eq(th_try(boot, z, 0), SQLITE_CANTOPEN);
  sqlite3_free(z);
  sqlite3_close(p);
  sqlite3_close(boot);
  sqlite3_free(zStore);
  sqlite3_free(zPlain);
  sqlite3_free(zDir);
}
END_TEST

/* While depot is the default VFS, the module's own SQLite files (a store
** named by a function, kv_btree data files, the plain side of an import or
** an export) still open through the VFS that was the default. */
START_TEST(test_depot_default_vfs_leaves_the_module_files_plain){
  char *zDir = th_tmpdir("depot-dfltown");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zOut = sqlite3_mprintf("%s/out.db", zDir);
  char *zStore = sqlite3_mprintf("%s/s.depot", zDir);
  char *z;
  sqlite3 *boot, *p;
  setup_vfs();
  p = open_plain_name(zSrc);
  th_exec(p, "CREATE TABLE s(x); INSERT INTO s VALUES(7);");
  sqlite3_close(p);
  boot = th_open(":memory:");
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(1)"));
  ck_assert_int_gt(th_intf(boot, "SELECT depot_import(%Q, %Q, 'app')", zSrc,
                           zStore), 0);
  ck_assert_int_gt(th_intf(boot, "SELECT depot_export(%Q, 'app', 'main',"
                           " %Q)", zStore, zOut), 0);
  z = sqlite3_mprintf("CREATE VIRTUAL TABLE temp.b USING kv_btree(dir=%Q)",
                      zDir);
  th_exec(boot, z);
  sqlite3_free(z);
  th_exec(boot, "INSERT INTO temp.b VALUES('k', 'v')");
  ck_assert_int_eq(th_intf(boot, "SELECT count(*) FROM depot_databases(%Q)",
                           zStore), 1);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(0)"));
  /* Both files are plain SQLite databases of the plain VFS. */
  p = open_plain_name(zOut);
  ck_assert_int_eq(th_int(p, "SELECT x FROM s"), 7);
  sqlite3_close(p);
  z = sqlite3_mprintf("%s/kv_btree.db", zDir);
  p = open_plain_name(z);
  sqlite3_free(z);
  ck_assert_int_ge(th_int(p, "SELECT count(*) FROM sqlite_schema"), 1);
  sqlite3_close(p);
  ck_assert_int_eq(th_int(boot, "SELECT count(*) FROM temp.b"), 1);
  sqlite3_close(boot);
  sqlite3_free(zSrc);
  sqlite3_free(zOut);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* depot_default_vfs(1, 'branch=try') makes the next plain-name open a
** connection to branch try of the store: it reads the fork and its writes
** stay there; 'db=crm' reaches another database; (0) drops the
** parameters, so the next plain-name open is main/main again. */
START_TEST(test_depot_default_vfs_params_open_a_fork_by_plain_name){
  char *zDir = th_tmpdir("depot-dfltparm");
  char *zStore = sqlite3_mprintf("%s/app.depot", zDir);
  sqlite3 *boot, *p;
  setup_vfs();
  boot = th_open(":memory:");
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(1)"));
  p = open_plain_name(zStore);
  th_exec(p, "CREATE TABLE t(x); INSERT INTO t VALUES('main');");
  sqlite3_close(p);
  ck_assert_int_gt(th_intf(boot, "SELECT depot_fork(%Q, 'main', 'main', "
                           "'try')", zStore), 0);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(1, 'branch=try')"));
  p = open_plain_name(zStore);
  ck_assert_int_eq(th_int(p, "SELECT count(*) FROM t WHERE x='main'"), 1);
  th_exec(p, "INSERT INTO t VALUES('try')");
  sqlite3_close(p);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(1, 'db=crm')"));
  p = open_plain_name(zStore);
  th_exec(p, "CREATE TABLE c(y); INSERT INTO c VALUES(1);");
  sqlite3_close(p);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(0)"));
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(1)"));
  p = open_plain_name(zStore);
  ck_assert_int_eq(th_int(p, "SELECT count(*) FROM t"), 1);
  sqlite3_close(p);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(0)"));
  /* the same from URIs: the fork has its row, database crm exists */
  p = open_depot_store(zStore, "branch=try");
  ck_assert_int_eq(th_int(p, "SELECT count(*) FROM t"), 2);
  sqlite3_close(p);
  p = open_depot_store(zStore, "db=crm");
  ck_assert_int_eq(th_int(p, "SELECT y FROM c"), 1);
  sqlite3_close(p);
  sqlite3_close(boot);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* A URI that names the depot VFS takes none of the depot_default_vfs
** parameters; one that does not takes those it does not give itself. */
START_TEST(test_depot_default_vfs_params_leave_uris_that_name_the_vfs){
  char *zDir = th_tmpdir("depot-dfltparmuri");
  char *zStore = sqlite3_mprintf("%s/app.depot", zDir);
  char *zUri;
  sqlite3 *boot, *p;
  setup_vfs();
  boot = th_open(":memory:");
  p = open_depot_store(zStore, 0);
  th_exec(p, "CREATE TABLE t(x); INSERT INTO t VALUES(1);");
  sqlite3_close(p);
  ck_assert_int_gt(th_intf(boot, "SELECT depot_fork(%Q, 'main', 'main', "
                           "'try')", zStore), 0);
  p = open_depot_store(zStore, "branch=try");
  th_exec(p, "INSERT INTO t VALUES(2)");
  sqlite3_close(p);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(1, 'branch=try')"));
  p = open_depot_store(zStore, 0);                   /* names vfs=depot */
  ck_assert_int_eq(th_int(p, "SELECT count(*) FROM t"), 1);
  sqlite3_close(p);
  zUri = sqlite3_mprintf("file:%s?zstd_level=3", zStore);  /* no vfs= */
  p = th_open(zUri);
  ck_assert_int_eq(th_int(p, "SELECT count(*) FROM t"), 2);
  sqlite3_close(p);
  sqlite3_free(zUri);
  zUri = sqlite3_mprintf("file:%s?branch=main", zStore);   /* its own wins */
  p = th_open(zUri);
  ck_assert_int_eq(th_int(p, "SELECT count(*) FROM t"), 1);
  sqlite3_close(p);
  sqlite3_free(zUri);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(0)"));
  sqlite3_close(boot);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* Bad parameters are refused with a message, and change neither the
** default VFS nor the parameters in force. */
START_TEST(test_depot_default_vfs_params_bad_are_refused_and_change_nothing){
  static const char *azBad[] = {
    "'wat=1'", "'branch'", "'branch=a&branch=b'", "'branch='",
    "'zstd_level=99'", "'store_sync=maybe'", "'db=a/b'", "5", "x'00'",
  };
  char *zDir = th_tmpdir("depot-dfltparmbad");
  char *zStore = sqlite3_mprintf("%s/app.depot", zDir);
  char *z;
  sqlite3 *boot, *p;
  int i;
  setup_vfs();
  boot = th_open(":memory:");
  p = open_depot_store(zStore, "branch=dev");
  th_exec(p, "CREATE TABLE t(x); INSERT INTO t VALUES(1);");
  sqlite3_close(p);
  for(i=0; i<(int)(sizeof(azBad)/sizeof(azBad[0])); i++){
    char *zErr = 0;
    char *zSql = sqlite3_mprintf("SELECT depot_default_vfs(1, %s)", azBad[i]);
    ck_assert_int_ne(th_try(boot, zSql, &zErr), SQLITE_OK);
    ck_assert_msg(zErr && strstr(zErr, "depot"), "%s: %s", azBad[i],
                  zErr ? zErr : "(no message)");
    sqlite3_free(zErr);
    sqlite3_free(zSql);
    z = th_text(boot, "SELECT depot_default_vfs()");
    ck_assert_str_ne(z, "depot");
    sqlite3_free(z);
  }
  ck_assert_int_ne(th_try(boot, "SELECT depot_default_vfs(0, 'branch=x')", 0),
                   SQLITE_OK);
  /* with parameters in force, a bad call keeps them */
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(1, 'branch=dev')"));
  ck_assert_int_ne(th_try(boot, "SELECT depot_default_vfs(1, 'wat=1')", 0),
                   SQLITE_OK);
  p = open_plain_name(zStore);
  ck_assert_int_eq(th_int(p, "SELECT x FROM t"), 1);
  sqlite3_close(p);
  sqlite3_free(th_text(boot, "SELECT depot_default_vfs(0)"));
  sqlite3_close(boot);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* Another thread turning depot_default_vfs on and off never sends the
** module's own files into depot: a kv_btree data file opened while the
** default flips is always the plain SQLite file of the VFS that was the
** default before depot (before, the module asked "is depot the default
** now?" and then opened with the default, which could be depot by then). */
typedef struct FlipArg FlipArg;
struct FlipArg { int bStop; int nFlip; };

static void *flip_default_vfs(void *pArg){
  FlipArg *p = (FlipArg*)pArg;
  while( !__atomic_load_n(&p->bStop, __ATOMIC_ACQUIRE) ){
    depot_vfs_set_default(1);
    depot_vfs_set_default(0);
    p->nFlip++;
  }
  return 0;
}

START_TEST(test_depot_default_vfs_flipped_by_another_thread_leaves_module_files_plain){
  char *zDir = th_tmpdir("depot-dfltrace");
  char *zFile = sqlite3_mprintf("%s/kv_btree.db", zDir);
  int i, n = th_scaled(40, 4);
  FlipArg flip = { 0, 0 };
  pthread_t t;
  sqlite3 *p;
  setup_vfs();
  ck_assert_int_eq(pthread_create(&t, 0, flip_default_vfs, &flip), 0);
  for(i=0; i<n; i++){
    /* :memory: needs no VFS file; the kv_btree data file is the module's */
    sqlite3 *db = 0;
    char *z;
    ck_assert_int_eq(sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE,
                                     "unix"), SQLITE_OK);
    z = sqlite3_mprintf("CREATE VIRTUAL TABLE temp.b USING kv_btree(dir=%Q);"
                        "INSERT INTO temp.b VALUES(%d, 'v');", zDir, i);
    th_exec(db, z);
    sqlite3_free(z);
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM temp.b"), i+1);
    sqlite3_close(db);
  }
  __atomic_store_n(&flip.bStop, 1, __ATOMIC_RELEASE);
  pthread_join(t, 0);
  depot_vfs_set_default(0);
  ck_assert_int_gt(flip.nFlip, 0);
  /* a plain SQLite database of the plain VFS, with every row */
  ck_assert_int_eq(sqlite3_open_v2(zFile, &p, SQLITE_OPEN_READONLY, "unix"),
                   SQLITE_OK);
  ck_assert_int_ge(th_int(p, "SELECT count(*) FROM sqlite_schema"), 1);
  sqlite3_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_default_vfs_refuses_other_arguments){
  static const char *azBad[] = { "2", "-1", "NULL", "'1'", "0.5", "x'01'" };
  sqlite3 *boot;
  char *zBefore, *zErr = 0;
  int i;
  setup_vfs();
  boot = th_open(":memory:");
  zBefore = th_text(boot, "SELECT depot_default_vfs()");
  for(i=0; i<(int)(sizeof(azBad)/sizeof(azBad[0])); i++){
    char *zSql = sqlite3_mprintf("SELECT depot_default_vfs(%s)", azBad[i]);
    ck_assert_int_eq(th_try(boot, zSql, &zErr), SQLITE_ERROR);
    ck_assert_msg(strstr(zErr, "depot_default_vfs takes 1")!=0, "%s", zErr);
    sqlite3_free(zErr);
    zErr = 0;
    sqlite3_free(zSql);
    ck_assert_str_eq(sqlite3_vfs_find(0)->zName, zBefore);
  }
  sqlite3_free(zBefore);
  sqlite3_close(boot);
}
END_TEST

START_TEST(test_depot_write_then_read_after_reopen){
  char *zDir = th_tmpdir("depot-rt");
  sqlite3 *db = open_depot(zDir, "app", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t(b) VALUES('x'),('y');");
  sqlite3_close(db);
  db = open_depot(zDir, "app", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 2);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM depot_commits("
      "(SELECT file FROM pragma_database_list WHERE name='main'), 'app')"), 2);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---- the oracle: the same random workload on a plain file and on depot ---- */

typedef struct Rng Rng;
struct Rng { uint64_t s; };
static uint32_t rng_next(Rng *r){
  r->s = r->s*6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(r->s>>33);
}
static int rng_below(Rng *r, int n){ return (int)(rng_next(r)%(uint32_t)n); }

/* Run zSql on both; both must succeed or both fail with the same code. */
static void both(sqlite3 *a, sqlite3 *b, const char *zSql){
  char *zErrA = 0, *zErrB = 0;
  int rcA = th_try(a, zSql, &zErrA);
  int rcB = th_try(b, zSql, &zErrB);
  ck_assert_msg(rcA==rcB, "%s: plain rc=%d (%s), depot rc=%d (%s)", zSql,
                rcA, zErrA ? zErrA : "", rcB, zErrB ? zErrB : "");
  sqlite3_free(zErrA);
  sqlite3_free(zErrB);
}

/* Every row of zSql must be equal on both connections. */
static void same_rows(sqlite3 *a, sqlite3 *b, const char *zSql){
  sqlite3_stmt *pA = 0, *pB = 0;
  int rcA, rcB, nRow = 0;
  ck_assert_int_eq(sqlite3_prepare_v2(a, zSql, -1, &pA, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(b, zSql, -1, &pB, 0), SQLITE_OK);
  do{
    int i;
    rcA = sqlite3_step(pA);
    rcB = sqlite3_step(pB);
    ck_assert_msg(rcA==rcB, "%s: row %d: rc %d vs %d (%s)", zSql, nRow, rcA,
                  rcB, sqlite3_errmsg(b));
    for(i=0; rcA==SQLITE_ROW && i<sqlite3_column_count(pA); i++){
      int n = sqlite3_column_bytes(pA, i);
      ck_assert_int_eq(sqlite3_column_type(pA, i), sqlite3_column_type(pB, i));
      ck_assert_int_eq(n, sqlite3_column_bytes(pB, i));
      ck_assert(n==0 || memcmp(sqlite3_column_blob(pA, i),
                               sqlite3_column_blob(pB, i), n)==0);
    }
    nRow++;
  }while( rcA==SQLITE_ROW );
  ck_assert_int_eq(rcA, SQLITE_DONE);
  sqlite3_finalize(pA);
  sqlite3_finalize(pB);
}

static void oracle_step(sqlite3 *a, sqlite3 *b, Rng *r){
  char *z = 0;
  int k = rng_below(r, 1000), n = 1+rng_below(r, 40);
  switch( rng_below(r, 12) ){
    case 0: case 1: case 2:
      z = sqlite3_mprintf("INSERT INTO t1(k,v,w) SELECT %d+value,"
          " printf('%%.*c', %d+value%%50, 'a'), %d*value FROM"
          " (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<%d) SELECT value FROM g) WHERE true ON CONFLICT(k) DO NOTHING",
          k, rng_below(r, 300), k, n);
      break;
    case 3:
      z = sqlite3_mprintf("INSERT INTO t2(x,y) VALUES(%d, zeroblob(%d)),"
          " (%d, randomblob(0) || x'%08x')", k, rng_below(r, 20000),
          k+1, rng_next(r));
      break;
    case 4: case 5:
      z = sqlite3_mprintf("UPDATE t1 SET v=v||'%d', w=w+1 WHERE k BETWEEN %d"
                          " AND %d", k, k, k+n);
      break;
    case 6:
      z = sqlite3_mprintf("DELETE FROM t1 WHERE k BETWEEN %d AND %d", k, k+n);
      break;
    case 7:
      z = sqlite3_mprintf("DELETE FROM t2 WHERE x%%7=%d", k%7);
      break;
    case 8:
      z = sqlite3_mprintf("BEGIN; INSERT INTO t1(k,v,w) VALUES(%d,'r',0)"
          " ON CONFLICT DO NOTHING; DELETE FROM t1 WHERE k<%d; ROLLBACK", k, k);
      break;
    case 9:
      z = sqlite3_mprintf("BEGIN; SAVEPOINT s1; UPDATE t1 SET w=-w WHERE k<%d;"
          " SAVEPOINT s2; DELETE FROM t1 WHERE k>%d; ROLLBACK TO s2;"
          " RELEASE s1; INSERT INTO t2(x,y) VALUES(%d, x'00'); ROLLBACK TO s1;"
          " UPDATE t1 SET w=w+100 WHERE k=%d; COMMIT", k, k, k, k);
      break;
    case 10:
      z = sqlite3_mprintf(rng_below(r, 4) ? "PRAGMA page_count"
                          : "VACUUM");
      break;
    default:
      /* Bigger than the page cache: spills before COMMIT. */
      z = sqlite3_mprintf("PRAGMA cache_size=10; BEGIN;"
          " INSERT INTO t2(x,y) SELECT %d+value, randomblob(3000) FROM"
          " (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<%d) SELECT value FROM g); UPDATE t2 SET y=zeroblob(10) WHERE x=%d;"
          " %s; PRAGMA cache_size=-2000", k, 50+n*5, k,
          rng_below(r, 3) ? "COMMIT" : "ROLLBACK");
      break;
  }
  both(a, b, z);
  sqlite3_free(z);
}

static void oracle_compare(sqlite3 *a, sqlite3 *b){
  same_rows(a, b, "SELECT * FROM t1 ORDER BY k");
  same_rows(a, b, "SELECT x, length(y), hex(substr(y,1,16)) FROM t2"
                  " ORDER BY rowid");
  same_rows(a, b, "SELECT v, count(*) FROM t1 INDEXED BY t1v GROUP BY v"
                  " ORDER BY v");
  assert_integrity(a);
  assert_integrity(b);
}

/* randomblob(N) replaced by a deterministic stream, so that both sides of
** the oracle store the same bytes. */
static void det_blob(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  Rng *r = (Rng*)sqlite3_user_data(ctx);
  int n = sqlite3_value_int(argv[0]), i;
  unsigned char *a;
  (void)argc;
  if( n<1 ) n = 1;
  a = sqlite3_malloc(n);
  if( a==0 ){ sqlite3_result_error_nomem(ctx); return; }
  for(i=0; i<n; i++) a[i] = (unsigned char)rng_next(r);
  sqlite3_result_blob(ctx, a, n, sqlite3_free);
}

static const int aOraclePage[] = { 4096, 512, 65536 };

START_TEST(test_depot_oracle_random_workload_matches_plain_file){
  char *zDir = th_tmpdir("depot-oracle");
  char *zPlain = sqlite3_mprintf("%s/plain.db", zDir);
  sqlite3 *a = th_open(zPlain);
  sqlite3 *b = open_depot(zDir, "oracle", 0);
  char *z = sqlite3_mprintf("PRAGMA page_size=%d", aOraclePage[_i]);
  Rng r, ra, rb;
  int i;
  r.s = 1000 + (uint64_t)_i;
  ra.s = rb.s = 77;
  sqlite3_create_function(a, "randomblob", 1, SQLITE_UTF8, &ra, det_blob, 0, 0);
  sqlite3_create_function(b, "randomblob", 1, SQLITE_UTF8, &rb, det_blob, 0, 0);
  both(a, b, z);
  both(a, b, "CREATE TABLE t1(k INTEGER PRIMARY KEY, v TEXT, w INT);"
             "CREATE INDEX t1v ON t1(v); CREATE INDEX t1w ON t1(w, v);"
             "CREATE TABLE t2(x INT, y BLOB); CREATE INDEX t2x ON t2(x)");
  for(i=0; i<160; i++){
    oracle_step(a, b, &r);
    if( i%40==39 ) oracle_compare(a, b);
  }
  oracle_compare(a, b);
  ck_assert_int_eq(th_int(b, "PRAGMA page_size"), aOraclePage[_i]);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_free(z); sqlite3_free(zPlain); sqlite3_free(zDir);
}
END_TEST

static const int aPageSizes[] = { 512, 1024, 2048, 4096, 8192, 16384, 32768,
                                  65536 };

START_TEST(test_depot_every_page_size_works){
  char *zDir = th_tmpdir("depot-pgsz");
  sqlite3 *db = open_depot(zDir, "p", 0);
  char *z = sqlite3_mprintf("PRAGMA page_size=%d; CREATE TABLE t(a, b);"
      " INSERT INTO t SELECT value, randomblob(700) FROM"
      " (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<300) SELECT value FROM g); CREATE INDEX ta ON t(a);", aPageSizes[_i]);
  th_exec(db, z);
  sqlite3_close(db);
  db = open_depot(zDir, "p", 0);
  ck_assert_int_eq(th_int(db, "PRAGMA page_size"), aPageSizes[_i]);
  ck_assert_int_eq(th_int(db, "SELECT sum(a) FROM t"), 300*301/2);
  th_exec(db, "DELETE FROM t WHERE a%3=0; VACUUM;");
  assert_integrity(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 200);
  sqlite3_close(db);
  sqlite3_free(z); sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_page_size_change_of_existing_database_fails_cleanly){
  char *zDir = th_tmpdir("depot-pgchg");
  sqlite3 *db = open_depot(zDir, "p", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  ck_assert_int_ne(th_try(db, "PRAGMA page_size=1024; VACUUM", 0), SQLITE_OK);
  sqlite3_close(db);
  db = open_depot(zDir, "p", 0);
  ck_assert_int_eq(th_int(db, "PRAGMA page_size"), 4096);
  ck_assert_int_eq(th_int(db, "SELECT a FROM t"), 1);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A VACUUM to a larger page size must fail like one to a smaller size:
** the pages of a depot database have the size of its first commit. */
START_TEST(test_depot_vacuum_to_larger_page_size_fails_and_keeps_writable){
  char *zDir = th_tmpdir("depot-pggrow");
  sqlite3 *db = open_depot(zDir, "p", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  ck_assert_int_ne(th_try(db, "PRAGMA page_size=8192; VACUUM", 0), SQLITE_OK);
  ck_assert_int_eq(th_int(db, "PRAGMA page_size"), 4096);
  th_exec(db, "INSERT INTO t VALUES(2)");
  sqlite3_close(db);
  db = open_depot(zDir, "p", 0);
  ck_assert_int_eq(th_int(db, "PRAGMA page_size"), 4096);
  ck_assert_int_eq(th_int(db, "SELECT sum(a) FROM t"), 3);
  th_exec(db, "INSERT INTO t VALUES(3)");
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---- concurrency ---- */

START_TEST(test_depot_reader_keeps_snapshot_while_other_connection_commits){
  char *zDir = th_tmpdir("depot-snap");
  sqlite3 *w = open_depot(zDir, "s", 0);
  sqlite3 *r;
  th_exec(w, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  r = open_depot(zDir, "s", 0);
  th_exec(r, "BEGIN");
  ck_assert_int_eq(th_int(r, "SELECT count(*) FROM t"), 1);
  th_exec(w, "INSERT INTO t VALUES(2)");          /* readers never block */
  th_exec(w, "INSERT INTO t SELECT value FROM (WITH RECURSIVE g(value) AS (SELECT 3 UNION ALL SELECT value+1 FROM g WHERE value<2000) SELECT value FROM g)");
  ck_assert_int_eq(th_int(r, "SELECT count(*) FROM t"), 1);
  ck_assert_int_eq(th_int(r, "SELECT max(a) FROM t"), 1);
  th_exec(r, "COMMIT");
  ck_assert_int_eq(th_int(r, "SELECT count(*) FROM t"), 2000);
  assert_integrity(r);
  sqlite3_close(r);
  sqlite3_close(w);
  sqlite3_free(zDir);
}
END_TEST

/* In exclusive locking mode SQLite stops bumping the change counter, yet
** depot readers stay open beside the writer: they must still see every
** commit, not their stale page cache. */
START_TEST(test_depot_reader_sees_commits_of_exclusive_mode_writer){
  char *zDir = th_tmpdir("depot-xcc");
  sqlite3 *w = open_depot(zDir, "x", 0);
  sqlite3 *r;
  int i;
  th_exec(w, "PRAGMA locking_mode=EXCLUSIVE; CREATE TABLE t(a);"
             "INSERT INTO t VALUES(0)");
  r = open_depot(zDir, "x", 0);
  for(i=1; i<=3; i++){
    char *z = sqlite3_mprintf("UPDATE t SET a=%d", i);
    ck_assert_int_eq(th_int(r, "SELECT a FROM t"), i-1);
    th_exec(w, z);
    ck_assert_int_eq(th_int(r, "SELECT a FROM t"), i);
    sqlite3_free(z);
  }
  sqlite3_close(r);
  sqlite3_close(w);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_stale_writer_gets_busy_snapshot){
  char *zDir = th_tmpdir("depot-stale");
  sqlite3 *a = open_depot(zDir, "s", 0);
  sqlite3 *b = open_depot(zDir, "s", 0);
  int rc;
  th_exec(a, "CREATE TABLE t(a)");
  th_exec(a, "BEGIN");
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM t"), 0);
  th_exec(b, "INSERT INTO t VALUES('from b')");
  rc = th_try(a, "INSERT INTO t VALUES('from a')", 0);
  ck_assert_int_eq(rc, SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(sqlite3_extended_errcode(a), SQLITE_BUSY_SNAPSHOT);
  th_exec(a, "ROLLBACK");
  th_exec(a, "INSERT INTO t VALUES('from a, retried')");
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM t"), 2);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_second_writer_in_process_is_busy){
  char *zDir = th_tmpdir("depot-busy");
  sqlite3 *a = open_depot(zDir, "s", 0);
  sqlite3 *b = open_depot(zDir, "s", 0);
  th_exec(a, "CREATE TABLE t(a)");
  th_exec(a, "BEGIN IMMEDIATE; INSERT INTO t VALUES(1)");
  ck_assert_int_eq(th_try(b, "INSERT INTO t VALUES(2)", 0), SQLITE_BUSY);
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM t"), 0);
  th_exec(a, "COMMIT");
  th_exec(b, "INSERT INTO t VALUES(2)");
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM t"), 2);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_free(zDir);
}
END_TEST

/* The write lock is one across processes: a writer of another process
** whose BEGIN IMMEDIATE finds it held waits in its busy handler until this
** one commits, then writes from a snapshot that has this one's row; both
** commits stand. */
START_TEST(test_depot_writer_in_other_process_waits_for_the_write_lock){
  char *zDir = th_tmpdir("depot-fence");
  int toChild[2], toParent[2];
  char c = 0;
  pid_t pid;
  int st;
  sqlite3 *a = open_depot(zDir, "f", 0);
  th_exec(a, "CREATE TABLE t(who TEXT)");
  sqlite3_close(a);
  ck_assert_int_eq(pipe(toChild), 0);
  ck_assert_int_eq(pipe(toParent), 0);
  pid = fork();
  if( pid==0 ){
    sqlite3 *b;
    sqlite3_stmt *pStmt = 0;
    char *zUri = depot_uri(zDir, "f", 0);
    int nParent = -1;
    if( read(toChild[0], &c, 1)!=1 ) _exit(3);
    if( sqlite3_open_v2(zUri, &b, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0) ){
      _exit(4);
    }
    sqlite3_busy_timeout(b, th_busy_ms(10000));
    if( write(toParent[1], "w", 1)!=1 ) _exit(6);
    if( sqlite3_exec(b, "BEGIN IMMEDIATE", 0, 0, 0) ) _exit(5);
    if( sqlite3_prepare_v2(b, "SELECT count(*) FROM t WHERE who='parent'",
                           -1, &pStmt, 0)==SQLITE_OK
     && sqlite3_step(pStmt)==SQLITE_ROW ){
      nParent = sqlite3_column_int(pStmt, 0);
    }
    sqlite3_finalize(pStmt);
    if( nParent!=1 ) _exit(7);
    if( sqlite3_exec(b, "INSERT INTO t VALUES('child'); COMMIT", 0, 0, 0) ){
      _exit(8);
    }
    sqlite3_close(b);
    _exit(0);
  }
  a = open_depot(zDir, "f", 0);
  th_exec(a, "BEGIN IMMEDIATE; INSERT INTO t VALUES('parent')");
  ck_assert_int_eq(write(toChild[1], "g", 1), 1);
  ck_assert_int_eq(read(toParent[0], &c, 1), 1);
  usleep(200000);                 /* the child is waiting in BEGIN IMMEDIATE */
  th_exec(a, "COMMIT");
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM t WHERE who='child'"), 1);
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM t WHERE who='parent'"), 1);
  assert_integrity(a);
  sqlite3_close(a);
  sqlite3_free(zDir);
}
END_TEST

/* Child: nInc increments of the counter, each BEGIN IMMEDIATE waiting in
** the busy handler for the write lock; exit status 0 when all committed at
** the first try. */
static void increment_child(const char *zDir, int nInc){
  char *zUri = depot_uri(zDir, "inc", 0);
  sqlite3 *db;
  int i;
  if( sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0) ){
    _exit(4);
  }
  sqlite3_busy_timeout(db, th_busy_ms(10000));
  for(i=0; i<nInc; i++){
    if( sqlite3_exec(db, "BEGIN IMMEDIATE; UPDATE c SET n=n+1; COMMIT",
                     0, 0, 0)!=SQLITE_OK ){
      _exit(5);
    }
  }
  sqlite3_close(db);
  _exit(0);
}

/* Two processes increment one counter; the write lock serialises their
** transactions, so none fails and no increment is lost. */
START_TEST(test_depot_concurrent_processes_lose_no_update){
  char *zDir = th_tmpdir("depot-inc");
  sqlite3 *db = open_depot(zDir, "inc", 0);
  pid_t aPid[2];
  int i, st;
  th_exec(db, "CREATE TABLE c(n); INSERT INTO c VALUES(0)");
  sqlite3_close(db);
  for(i=0; i<2; i++){
    aPid[i] = fork();
    if( aPid[i]==0 ) increment_child(zDir, 100);
  }
  for(i=0; i<2; i++){
    waitpid(aPid[i], &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child %d: %d", i, st);
  }
  db = open_depot(zDir, "inc", 0);
  ck_assert_int_eq(th_int(db, "SELECT n FROM c"), 200);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A reader keeps its snapshot while another process commits. */
START_TEST(test_depot_reader_keeps_snapshot_while_other_process_commits){
  char *zDir = th_tmpdir("depot-xsnap");
  int toChild[2], toParent[2], st;
  char c = 0;
  pid_t pid;
  sqlite3 *r = open_depot(zDir, "x", 0);
  th_exec(r, "CREATE TABLE t(a); INSERT INTO t VALUES(0)");
  sqlite3_close(r);
  ck_assert_int_eq(pipe(toChild), 0);
  ck_assert_int_eq(pipe(toParent), 0);
  pid = fork();
  if( pid==0 ){
    sqlite3 *w;
    char *zUri = depot_uri(zDir, "x", 0);
    if( read(toChild[0], &c, 1)!=1 ) _exit(3);
    if( sqlite3_open_v2(zUri, &w, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0) ){
      _exit(4);
    }
    if( sqlite3_exec(w, "INSERT INTO t VALUES(1); INSERT INTO t VALUES(2);"
                        " DELETE FROM t WHERE a=0", 0, 0, 0) ) _exit(5);
    sqlite3_close(w);
    _exit(write(toParent[1], "k", 1)==1 ? 0 : 6);
  }
  r = open_depot(zDir, "x", 0);
  th_exec(r, "BEGIN");
  ck_assert_int_eq(th_int(r, "SELECT sum(a)+10*count(*) FROM t"), 10);
  ck_assert_int_eq(write(toChild[1], "g", 1), 1);
  ck_assert_int_eq(read(toParent[0], &c, 1), 1);
  waitpid(pid, &st, 0);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  ck_assert_int_eq(th_int(r, "SELECT sum(a)+10*count(*) FROM t"), 10);
  th_exec(r, "COMMIT");
  ck_assert_int_eq(th_int(r, "SELECT sum(a)+10*count(*) FROM t"), 23);
  assert_integrity(r);
  sqlite3_close(r);
  sqlite3_free(zDir);
}
END_TEST

/* Threads of one process: a writer moves value between two rows in small
** transactions while readers check, in read transactions, that the total
** never changes (each reader sees whole commits only). */
typedef struct ThreadArg ThreadArg;
struct ThreadArg {
  const char *zDir; int nBad; int nDone; int bWriter;
  char zErr[160];                 /* the first failure's error code and text */
};

/* Count a failure of the thread; keep the first one's error. */
static void thread_bad(ThreadArg *a, sqlite3 *db, int rc){
  if( a->nBad++==0 ){
    snprintf(a->zErr, sizeof(a->zErr), "rc %d: %s", rc,
             db ? sqlite3_errmsg(db) : "no connection");
  }
}

static void *thread_main(void *pArg){
  ThreadArg *a = (ThreadArg*)pArg;
  char *zUri = depot_uri(a->zDir, "th", 0);
  sqlite3 *db = 0;
  int i;
  int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI,
                           0);
  if( rc ) thread_bad(a, db, rc);
  sqlite3_busy_timeout(db, th_busy_ms(10000));
  for(i=0; i<150 && a->nBad==0; i++){
    sqlite3_stmt *p = 0;
    if( a->bWriter ){
      rc = sqlite3_exec(db, "BEGIN IMMEDIATE; UPDATE acct SET v=v-1 WHERE id=1;"
              " UPDATE acct SET v=v+1 WHERE id=2; COMMIT", 0, 0, 0);
      if( rc ) thread_bad(a, db, sqlite3_extended_errcode(db));
    }else if( sqlite3_prepare_v2(db, "SELECT sum(v), count(*) FROM acct", -1,
                                 &p, 0)==SQLITE_OK
           && sqlite3_step(p)==SQLITE_ROW ){
      if( sqlite3_column_int(p, 0)!=1000 || sqlite3_column_int(p, 1)!=2 ){
        thread_bad(a, db, SQLITE_OK);
      }
    }else{
      thread_bad(a, db, sqlite3_extended_errcode(db));
    }
    sqlite3_finalize(p);
    a->nDone++;
  }
  sqlite3_close(db);
  sqlite3_free(zUri);
  return 0;
}

START_TEST(test_depot_threads_see_only_whole_commits){
  char *zDir = th_tmpdir("depot-threads");
  sqlite3 *db = open_depot(zDir, "th", 0);
  pthread_t aT[4];
  ThreadArg aArg[4];
  int i;
  th_exec(db, "CREATE TABLE acct(id INTEGER PRIMARY KEY, v INT);"
              "INSERT INTO acct VALUES(1, 1000), (2, 0)");
  for(i=0; i<4; i++){
    memset(&aArg[i], 0, sizeof(aArg[i]));
    aArg[i].zDir = zDir;
    aArg[i].bWriter = (i<2);
    ck_assert_int_eq(pthread_create(&aT[i], 0, thread_main, &aArg[i]), 0);
  }
  for(i=0; i<4; i++) pthread_join(aT[i], 0);
  for(i=0; i<4; i++){
    ck_assert_msg(aArg[i].nBad==0, "thread %d saw %d bad results, first %s",
                  i, aArg[i].nBad, aArg[i].zErr);
    ck_assert_int_eq(aArg[i].nDone, 150);
  }
  ck_assert_int_eq(th_int(db, "SELECT v FROM acct WHERE id=2"), 300);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---- crashes ---- */

/* Child: commit rows 1, 2, ... forever, acknowledging each on fd. */
static int kill_child(const char *zDir, int fd, unsigned seed){
  char *zUri = depot_uri(zDir, "k", 0);
  sqlite3 *db;
  int i;
  if( sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0) ){
    return 4;
  }
  sqlite3_busy_timeout(db, th_busy_ms(5000));
  for(i=1; ; i++){
    char *z = sqlite3_mprintf("BEGIN; INSERT INTO t VALUES(%d,"
        " randomblob(%u)); UPDATE c SET n=%d; COMMIT", i, (seed*i)%20000, i);
    if( sqlite3_exec(db, z, 0, 0, 0)!=SQLITE_OK ) return 5;
    sqlite3_free(z);
    if( write(fd, &i, sizeof(i))!=(ssize_t)sizeof(i) ) return 6;
  }
}

/* The child mode of this program (th_spawn): "kill-writer DIR FD SEED"
** runs kill_child. */
int depot_test_child(int argc, char **argv){
  if( argc!=4 || strcmp(argv[0], "kill-writer")!=0 ) return 2;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( depot_vfs_register()!=SQLITE_OK ) return 3;
  return kill_child(argv[1], atoi(argv[2]), (unsigned)strtoul(argv[3], 0, 10));
}

static int nKillAcks = 0;

/* One round: a writer commits until it is killed at a random moment, then
** the database holds the acknowledged commits, or one more.  The writer is
** a new process (th_spawn), not a fork() of this one: past 1000 commits
** this process runs the background compactor, whose thread may hold
** SQLite's mutexes and a store connection at any moment. */
static void kill_round(const char *zDir, unsigned seed){
  int fd[2], i, nAck = 0, st;
  pid_t pid;
  sqlite3 *db;
  sqlite3_int64 nMax;
  char zFd[16], zSeed[16];
  const char *azArg[5];
  ck_assert_int_eq(pipe(fd), 0);
  ck_assert_int_eq(fcntl(fd[0], F_SETFD, FD_CLOEXEC), 0);
  sqlite3_snprintf(sizeof(zFd), zFd, "%d", fd[1]);
  sqlite3_snprintf(sizeof(zSeed), zSeed, "%u", seed);
  azArg[0] = "kill-writer";
  azArg[1] = zDir;
  azArg[2] = zFd;
  azArg[3] = zSeed;
  azArg[4] = 0;
  pid = th_spawn(azArg);
  close(fd[1]);
  /* Kill at a random moment after the first acknowledged commit: waiting
  ** for it keeps the round meaningful however slow the build (the
  ** sanitizer builds on a loaded machine may take longer than the sleep to
  ** commit at all). */
  if( read(fd[0], &i, sizeof(i))==(ssize_t)sizeof(i) ) nAck = i;
  usleep(20000 + (seed*7919)%150000);
  kill(pid, SIGKILL);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st), "the writer exited with %d before the kill",
                WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  while( read(fd[0], &i, sizeof(i))==(ssize_t)sizeof(i) ) nAck = i;
  close(fd[0]);
  nKillAcks += nAck;
  db = open_depot(zDir, "k", 0);
  nMax = th_int(db, "SELECT coalesce(max(i),0) FROM t");
  ck_assert_msg(nMax>=nAck && nMax<=nAck+1, "acked %d, found %lld", nAck,
                nMax);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), nMax);
  ck_assert_int_eq(th_int(db, "SELECT n FROM c"), nMax);
  assert_integrity(db);
  th_exec(db, "DELETE FROM t; UPDATE c SET n=0");
  sqlite3_close(db);
}

START_TEST(test_depot_sigkill_leaves_last_or_next_commit){
  char *zDir = th_tmpdir("depot-kill");
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int nIter = zIters ? atoi(zIters) : 3;
  sqlite3 *db;
  int i;
  if( th_under_tsan() ){
    printf("depot: SIGKILL rounds skipped under ThreadSanitizer\n");
    sqlite3_free(zDir);
    return;
  }
  db = open_depot(zDir, "k", 0);
  th_exec(db, "CREATE TABLE t(i INTEGER PRIMARY KEY, pad BLOB);"
              "CREATE TABLE c(n); INSERT INTO c VALUES(0)");
  sqlite3_close(db);
  for(i=0; i<nIter; i++) kill_round(zDir, 1+(unsigned)i*2654435761u%1000);
  ck_assert_int_gt(nKillAcks, 0);    /* the child did commit before dying */
  sqlite3_free(zDir);
}
END_TEST

/* ---- injected store failures ---- */

/* A VFS over the default one whose Nth write (faultWrites) or Nth sync
** (faultSyncs) fails; 0 = off. */
static int faultWrites = 0, faultSyncs = 0;
static int faultWriteRc = SQLITE_IOERR_WRITE;   /* what a failing write returns */
static int faultNWrite = 0;           /* writes made through the VFS */
static int faultExitMainWrites = 0;   /* the process dies at the Nth write to
                                      ** a main database file; 0 = off */
static sqlite3_vfs *pFaultRoot = 0;
typedef struct FaultFile FaultFile;
struct FaultFile { sqlite3_file base; sqlite3_file *pReal; int bMainDb; };

static int faultHit(int *pCount){
  return *pCount>0 && --*pCount==0;
}
#define REAL(f) (((FaultFile*)(f))->pReal)
static int fClose(sqlite3_file *f){ return REAL(f)->pMethods->xClose(REAL(f)); }
static int fRead(sqlite3_file *f, void *p, int n, sqlite3_int64 o){
  return REAL(f)->pMethods->xRead(REAL(f), p, n, o);
}
static int fWrite(sqlite3_file *f, const void *p, int n, sqlite3_int64 o){
  faultNWrite++;
  if( ((FaultFile*)f)->bMainDb && faultHit(&faultExitMainWrites) ) _exit(0);
  if( faultHit(&faultWrites) ) return faultWriteRc;
  return REAL(f)->pMethods->xWrite(REAL(f), p, n, o);
}
static int fTruncate(sqlite3_file *f, sqlite3_int64 n){
  return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int fSync(sqlite3_file *f, int flags){
  if( faultHit(&faultSyncs) ) return SQLITE_IOERR_FSYNC;
  return REAL(f)->pMethods->xSync(REAL(f), flags);
}
static int fFileSize(sqlite3_file *f, sqlite3_int64 *p){
  return REAL(f)->pMethods->xFileSize(REAL(f), p);
}
static int fLock(sqlite3_file *f, int e){ return REAL(f)->pMethods->xLock(REAL(f), e); }
static int fUnlock(sqlite3_file *f, int e){ return REAL(f)->pMethods->xUnlock(REAL(f), e); }
static int fCheck(sqlite3_file *f, int *p){
  return REAL(f)->pMethods->xCheckReservedLock(REAL(f), p);
}
static int fFcntl(sqlite3_file *f, int op, void *p){
  return REAL(f)->pMethods->xFileControl(REAL(f), op, p);
}
static int fSector(sqlite3_file *f){ return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int fDevice(sqlite3_file *f){
  return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int fShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){
  return REAL(f)->pMethods->xShmMap(REAL(f), i, sz, b, pp);
}
static int fShmLock(sqlite3_file *f, int o, int n, int fl){
  return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void fShmBarrier(sqlite3_file *f){ REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int fShmUnmap(sqlite3_file *f, int d){
  return REAL(f)->pMethods->xShmUnmap(REAL(f), d);
}
static const sqlite3_io_methods faultIo = {
  2, fClose, fRead, fWrite, fTruncate, fSync, fFileSize, fLock, fUnlock,
  fCheck, fFcntl, fSector, fDevice, fShmMap, fShmLock, fShmBarrier, fShmUnmap,
  0, 0
};
static int faultOpen(sqlite3_vfs *v, const char *z, sqlite3_file *f, int fl,
                     int *pOut){
  FaultFile *p = (FaultFile*)f;
  int rc;
  (void)v;
  p->pReal = (sqlite3_file*)&p[1];
  p->bMainDb = (fl & SQLITE_OPEN_MAIN_DB)!=0;
  rc = pFaultRoot->xOpen(pFaultRoot, z, p->pReal, fl, pOut);
  p->base.pMethods = p->pReal->pMethods ? &faultIo : 0;
  return rc;
}
static sqlite3_vfs faultVfs;

static void setup_fault_vfs(void){
  if( pFaultRoot ) return;
  pFaultRoot = sqlite3_vfs_find(0);
  faultVfs = *pFaultRoot;
  faultVfs.zName = "faulty";
  faultVfs.szOsFile = (int)sizeof(FaultFile) + pFaultRoot->szOsFile;
  faultVfs.xOpen = faultOpen;
  faultVfs.pAppData = 0;
  ck_assert_int_eq(sqlite3_vfs_register(&faultVfs, 0), SQLITE_OK);
}

/* The statements of the crash test below, run in the child that dies. */
static int superjournal_child(const char *zDir, const char *zAttach){
  sqlite3 *db = 0;
  char *zUri = depot_uri(zDir, "m", 0);
  int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                           |SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db, zAttach, 0, 0, 0);
  faultExitMainWrites = 20;
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "BEGIN; UPDATE main.t SET a=1;"
      " UPDATE p.t SET v=printf('%08d-%.900c', 1, 'x'); COMMIT", 0, 0, 0);
  return 3;                           /* the crash did not come */
}

START_TEST(test_depot_crash_in_commit_leaves_attached_plain_file_whole){
  /* A transaction writes the depot main database and a plain file attached
  ** through another VFS; the process dies while the plain file's pages are
  ** being written, after the depot database published.  The plain file's
  ** journal names the super-journal, so the super-journal must be a file
  ** on disk until the commit is done: then the next open of the plain
  ** file rolls it back.  Kept in memory, the plain file was left half
  ** written ("database disk image is malformed"). */
  char *zDir = th_tmpdir("depot-superjournal");
  char *zAttach, *z;
  sqlite3 *db;
  pid_t pid;
  int st = 0;
  setup_fault_vfs();
  zAttach = sqlite3_mprintf("ATTACH 'file:%s/plain.db?vfs=faulty' AS p", zDir);
  db = open_depot(zDir, "m", 0);
  th_exec(db, zAttach);
  th_exec(db, "CREATE TABLE main.t(a); INSERT INTO main.t VALUES(0);"
      "CREATE TABLE p.t(k INTEGER PRIMARY KEY, v TEXT);"
      "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s"
      " WHERE i<400) INSERT INTO p.t SELECT i, printf('%08d-%.900c', 0, 'x')"
      " FROM s");
  sqlite3_close(db);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ) _exit(superjournal_child(zDir, zAttach));
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  z = sqlite3_mprintf("%s/plain.db", zDir);
  db = th_open(z);
  sqlite3_free(z);
  assert_integrity(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE v=printf("
                   "'%08d-%.900c', 0, 'x')"), 400);
  sqlite3_close(db);
  ck_assert_int_eq(th_count_suffix(zDir, "-journal"), 0);
  sqlite3_free(zAttach);
  sqlite3_free(zDir);
}
END_TEST

/* {Nth write fails, Nth sync fails} for one commit of about 40 pages. */
static const int aFault[][2] = {
  {1,0}, {2,0}, {3,0}, {5,0}, {10,0}, {20,0}, {35,0}, {45,0}, {60,0},
  {0,1}, {0,2}, {0,3}, {4,1}, {0,0}
};

START_TEST(test_depot_store_write_and_sync_failures_fail_commit_cleanly){
  char *zDir = th_tmpdir("depot-fault");
  sqlite3 *db;
  int n, nFailed = 0;
  setup_fault_vfs();
  db = open_depot(zDir, "x", "store_vfs=faulty");
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB)");
  for(n=0; n<(int)(sizeof(aFault)/sizeof(aFault[0])); n++){
    sqlite3 *chk;
    sqlite3_int64 nBefore = th_int(db, "SELECT count(*) FROM t"), nAfter;
    int rc;
    faultWrites = aFault[n][0];
    faultSyncs = aFault[n][1];
    rc = th_try(db, "INSERT INTO t(b) SELECT randomblob(5000) FROM"
                    " (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<30) SELECT value FROM g)", 0);
    faultWrites = faultSyncs = 0;
    if( rc!=SQLITE_OK ){
      nFailed++;
      ck_assert_msg((rc&0xff)==SQLITE_IOERR, "rc=%d", rc);
    }
    chk = open_depot(zDir, "x", 0);
    nAfter = th_int(chk, "SELECT count(*) FROM t");
    ck_assert(nAfter==nBefore || nAfter==nBefore+30);
    if( rc==SQLITE_OK ) ck_assert_int_eq(nAfter, nBefore+30);
    assert_integrity(chk);
    sqlite3_close(chk);
  }
  ck_assert_int_gt(nFailed, 8);
  th_exec(db, "INSERT INTO t(b) VALUES(x'01')");
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* The last error logged under an I/O or full code, through
** SQLITE_CONFIG_LOG. */
static char zIoLog[1024];
static void io_log(void *pArg, int rc, const char *zMsg){
  (void)pArg;
  if( (rc&0xff)==SQLITE_IOERR || (rc&0xff)==SQLITE_FULL ){
    snprintf(zIoLog, sizeof(zIoLog), "%s", zMsg);
  }
}

/* A commit that fails because the store file cannot be written logs a
** message naming that store file, so an operator seeing "disk I/O error"
** or "database or disk is full" at COMMIT learns which file failed. */
START_TEST(test_depot_failed_store_write_logs_the_store_file){
  char *zDir = th_tmpdir("depot-faultlog");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *db;
  int rc;
  sqlite3_shutdown();
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_LOG, io_log, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
  setup_fault_vfs();
  db = open_depot(zDir, "x", "store_vfs=faulty");
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB)");
  zIoLog[0] = 0;
  faultWrites = 1;
  rc = th_try(db, "INSERT INTO t(b) VALUES(randomblob(5000))", 0);
  faultWrites = 0;
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  ck_assert_msg(strstr(zIoLog, zStore)!=0, "log: %s", zIoLog);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  th_exec(db, "INSERT INTO t(b) VALUES(x'01')");
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* Found on a full disk: opening a depot database whose store needed a new
** -shm file (the last connection had closed cleanly) failed with
** SQLITE_CANTOPEN, "unable to open database file", and logged only "disk I/O
** error": nothing said the disk was full.  The open now fails with
** SQLITE_FULL and logs the cause; nothing in the store changes.  A child
** whose files may not grow past 8 KiB (RLIMIT_FSIZE: EFBIG, as a full
** disk's ENOSPC) stands for the full disk; it exits 0 when the open failed
** as it should, else with a code saying what it saw. */
static int full_open_child(const char *zDir, const char *zStore){
  struct rlimit rl = { 8192, 8192 };
  char *zUri = depot_uri(zDir, "app", 0);
  sqlite3 *db = 0;
  int rc;
  signal(SIGXFSZ, SIG_IGN);
  sqlite3_shutdown();
  if( sqlite3_config(SQLITE_CONFIG_LOG, io_log, 0)!=SQLITE_OK ) return 2;
  if( sqlite3_initialize()!=SQLITE_OK ) return 3;
  setup_vfs();
  if( setrlimit(RLIMIT_FSIZE, &rl)!=0 ) return 4;
  zIoLog[0] = 0;
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) return 5;
  if( rc!=SQLITE_FULL ) return 10 + (rc & 0xff);
  if( strstr(zIoLog, zStore)==0 ) return 6;
  if( strstr(zIoLog, strerror(EFBIG))==0 ) return 7;
  sqlite3_close(db);
  return 0;
}

START_TEST(test_depot_open_on_full_disk_fails_full_naming_the_cause){
  char *zDir = th_tmpdir("depot-open-full");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zShm = sqlite3_mprintf("%s-shm", zStore);
  sqlite3 *db = open_depot(zDir, "app", 0);
  struct stat st;
  int status = 0;
  pid_t pid;
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB); INSERT INTO t"
              " SELECT value, randomblob(3000) FROM (WITH RECURSIVE g(value) AS"
              " (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<40)"
              " SELECT value FROM g)");
  sqlite3_close(db);
  ck_assert_int_ne(stat(zShm, &st), 0);      /* closed cleanly: no -shm */
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ) _exit(full_open_child(zDir, zStore));
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status)==0,
                "child status %d (exit %d; 10+N: open gave code N)", status,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  db = open_depot(zDir, "app", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 40);
  assert_integrity(db);
  th_exec(db, "INSERT INTO t(b) VALUES(x'01')");
  sqlite3_close(db);
  sqlite3_free(zShm);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* ---- corrupted rows ---- */

/* Run zSql on the outer store file directly. */
static void poke_store(const char *zDir, const char *zSql){
  char *zPath = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *db = 0;
  ck_assert_int_eq(sqlite3_open(zPath, &db), SQLITE_OK);
  th_exec(db, zSql);
  sqlite3_close(db);
  sqlite3_free(zPath);
}

static const char *const azCorrupt[] = {
  /* flip a byte inside the first frame of every blob chunk 0 */
  "UPDATE depot_kv SET value=substr(value,1,80)||CASE WHEN"
  " substr(value,81,1)=x'41' THEN x'42' ELSE x'41' END||substr(value,82)"
  " WHERE substr(key,1,2)=x'0230' AND substr(key,11,1)=x'30'",
  /* drop every blob chunk */
  "DELETE FROM depot_kv WHERE substr(key,1,2)=x'0230'"
  " AND substr(key,11,1)=x'30'",
  /* truncate every page index value */
  "UPDATE depot_kv SET value=substr(value,1,5) WHERE substr(key,1,2)=x'0230'"
  " AND substr(key,11,1)=x'20'",
  /* a head row of the wrong length */
  "UPDATE depot_kv SET value=x'01' WHERE substr(key,1,2)=x'0230'"
  " AND length(key)=11 AND substr(key,11,1)=x'01'",
  /* frame offsets pointing past the blob */
  "UPDATE depot_kv SET value=x'7fffff00'||substr(value,5) WHERE"
  " substr(key,1,2)=x'0230' AND substr(key,11,1)=x'20'",
};

START_TEST(test_depot_corrupt_store_rows_give_sqlite_corrupt){
  char *zDir = th_tmpdir("depot-corrupt");
  sqlite3 *db = open_depot(zDir, "c", 0);
  char *zErr = 0, *zUri;
  int rc;
  th_exec(db, "CREATE TABLE t(a, b); INSERT INTO t SELECT value,"
              " printf('%.500c', 'z') FROM (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<200) SELECT value FROM g)");
  sqlite3_close(db);
  poke_store(zDir, azCorrupt[_i]);
  /* the pages decoded before outlive the connection in the process: a
  ** cold read (no cache, no page map) meets the corruption */
  zUri = depot_uri(zDir, "c", "cache_kb=0&map_kb=0");
  /* Either the open (which reads the header) or the query fails. */
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = th_try(db, "SELECT sum(length(b)) FROM t", &zErr);
  ck_assert_msg((rc&0xff)==SQLITE_CORRUPT, "rc=%d %s", rc, zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_corrupt_commit_row_and_unknown_layout_are_errors){
  char *zDir = th_tmpdir("depot-meta");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zSql = sqlite3_mprintf("SELECT count(*) FROM depot_commits(%Q,'m')",
                               zStore);
  char *zUri = depot_uri(zDir, "m", 0);
  sqlite3 *db = open_depot(zDir, "m", 0), *db2 = 0;
  char *zErr = 0;
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  poke_store(zDir, "UPDATE depot_kv SET value=x'0102' WHERE"
             " substr(key,1,2)=x'0230' AND substr(key,11,1)=x'10'");
  db = th_open(":memory:");
  ck_assert_int_eq(th_try(db, zSql, &zErr), SQLITE_CORRUPT);
  ck_assert_ptr_nonnull(strstr(zErr, "corrupt commit row"));
  sqlite3_free(zErr);
  poke_store(zDir, "UPDATE depot_kv SET value=x'00000004' WHERE"
             " key=x'0200666f726d6174'");
  ck_assert_int_eq(th_try(db, zSql, 0), SQLITE_CANTOPEN);
  ck_assert_int_eq(sqlite3_open_v2(zUri, &db2, SQLITE_OPEN_READWRITE
                   |SQLITE_OPEN_URI, 0), SQLITE_CANTOPEN);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zUri); sqlite3_free(zSql); sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* ---- rollback, spill, pragmas, URI ---- */

/* The journal modes a depot database runs with (each journal lives in
** memory: MEMORY keeps it in SQLite's heap instead of a depot MemFile). */
static const char *const azExclJournal[] = {
  "PRAGMA journal_mode=delete", "PRAGMA journal_mode=truncate",
  "PRAGMA journal_mode=persist", "PRAGMA journal_mode=memory"
};

START_TEST(test_depot_rolled_back_spilled_transaction_leaves_no_commit){
  char *zDir = th_tmpdir("depot-spill");
  sqlite3 *db = open_depot(zDir, "s", 0);
  sqlite3_int64 nCommit;
  th_exec(db, azExclJournal[_i]);
  th_exec(db, "CREATE TABLE t(a, b); INSERT INTO t VALUES(1, 'keep')");
  nCommit = th_int(db, "SELECT count(*) FROM depot_commits("
      "(SELECT file FROM pragma_database_list WHERE name='main'), 's')");
  th_exec(db, "PRAGMA cache_size=5; BEGIN; INSERT INTO t SELECT value,"
              " randomblob(2000) FROM (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<500) SELECT value FROM g);"
              " UPDATE t SET b='changed' WHERE a=1; ROLLBACK");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM depot_commits("
      "(SELECT file FROM pragma_database_list WHERE name='main'), 's')"),
      nCommit);
  sqlite3_close(db);
  db = open_depot(zDir, "s", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE b='keep'"), 1);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A journal past MEMFILE_SPILL_BYTES moves to a temporary file: the
** transaction that wrote it still rolls back whole, the next one commits,
** and VACUUM (whose temporary database spills too) keeps every row. */
START_TEST(test_depot_journal_past_the_memory_bound_spills_and_rolls_back){
  char *zDir = th_tmpdir("depot-jspill");
  sqlite3 *db = open_depot(zDir, "s", 0);
  sqlite3_file *pJrnl = 0;
  char *zSum;
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b);"
              "WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v+1 FROM g"
              " WHERE v<1500) INSERT INTO t SELECT v, randomblob(2000) FROM g");
  zSum = th_text(db, "SELECT group_concat(hex(substr(b,1,6)), '') FROM"
                     " (SELECT b FROM t ORDER BY a)");
  th_exec(db, "PRAGMA cache_size=20; BEGIN; UPDATE t SET b=zeroblob(2000)");
  ck_assert_int_eq(sqlite3_file_control(db, "main",
                   SQLITE_FCNTL_JOURNAL_POINTER, &pJrnl), SQLITE_OK);
  ck_assert_ptr_nonnull(pJrnl);
  ck_assert_ptr_nonnull(pJrnl->pMethods);
  ck_assert_int_eq(memfile_spilled(pJrnl), 1);
  th_exec(db, "ROLLBACK");
  {
    char *z = th_text(db, "SELECT group_concat(hex(substr(b,1,6)), '') FROM"
                      " (SELECT b FROM t ORDER BY a)");
    ck_assert_str_eq(z, zSum);
    sqlite3_free(z);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE b=zeroblob(2000)"),
                   0);
  th_exec(db, "UPDATE t SET b=zeroblob(100) WHERE a%2=0");
  th_exec(db, "VACUUM");
  assert_integrity(db);
  sqlite3_close(db);
  db = open_depot(zDir, "s", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1500);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE b=zeroblob(100)"),
                   750);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zSum);
  sqlite3_free(zDir);
}
END_TEST

/* A journal record is three writes (page number, page, checksum); past
** MEMFILE_SPILL_BYTES a MemFile gathers adjacent writes into few writes
** to its temporary file, and every read, overwrite and truncation sees
** the bytes written, those not yet out too.  A write that fails to go out
** is the error of the read that needed it and loses no byte. */
static void jrnl_record(unsigned char *a, int i){
  memset(a, 0, 4104);
  a[0] = (unsigned char)(i>>8); a[1] = (unsigned char)i;
  memset(a+4, 'a'+i%26, 4096);
  a[4100] = (unsigned char)(i*7);
}

START_TEST(test_depot_spilled_journal_gathers_adjacent_writes){
  sqlite3_file *f = sqlite3_malloc(memfile_size());
  unsigned char a[4104], b[4104];
  sqlite3_int64 n = 0;
  int i, nWrite;
  setup_fault_vfs();
  memset(f, 0, memfile_size());
  memfile_open(f, 0, 0, &faultVfs);
  faultNWrite = 0;
  for(i=0; i<400; i++){                    /* 1.6 MB */
    jrnl_record(a, i);
    ck_assert_int_eq(f->pMethods->xWrite(f, a, 4, (sqlite3_int64)i*4104),
                     SQLITE_OK);
    ck_assert_int_eq(f->pMethods->xWrite(f, a+4, 4096,
                     (sqlite3_int64)i*4104+4), SQLITE_OK);
    ck_assert_int_eq(f->pMethods->xWrite(f, a+4100, 4,
                     (sqlite3_int64)i*4104+4100), SQLITE_OK);
  }
  ck_assert_int_eq(memfile_spilled(f), 1);
  nWrite = faultNWrite;
  ck_assert_int_le(nWrite, 40);     /* 16 to spill, then 64 KiB each */
  ck_assert_int_eq(f->pMethods->xFileSize(f, &n), SQLITE_OK);
  ck_assert_int_eq(n, 400*4104);
  /* the last record is not out yet: a read of it sees it */
  jrnl_record(a, 399);
  ck_assert_int_eq(f->pMethods->xRead(f, b, 4104, 399*4104), SQLITE_OK);
  ck_assert(memcmp(a, b, 4104)==0);
  for(i=0; i<400; i+=37){
    jrnl_record(a, i);
    ck_assert_int_eq(f->pMethods->xRead(f, b, 4104, (sqlite3_int64)i*4104),
                     SQLITE_OK);
    ck_assert(memcmp(a, b, 4104)==0);
  }
  /* an overwrite of a header field (as the pager updates its record
  ** count), then appends after it */
  ck_assert_int_eq(f->pMethods->xWrite(f, "\1\2\3\4", 4, 8), SQLITE_OK);
  jrnl_record(a, 400);
  ck_assert_int_eq(f->pMethods->xWrite(f, a, 4104, 400*4104), SQLITE_OK);
  ck_assert_int_eq(f->pMethods->xRead(f, b, 4, 8), SQLITE_OK);
  ck_assert(memcmp(b, "\1\2\3\4", 4)==0);
  /* the write of the gathered bytes fails: the read that needs them fails,
  ** and the next one has them */
  faultWrites = 1;
  ck_assert_int_eq(f->pMethods->xRead(f, b, 4104, 400*4104),
                   SQLITE_IOERR_WRITE);
  faultWrites = 0;
  ck_assert_int_eq(f->pMethods->xRead(f, b, 4104, 400*4104), SQLITE_OK);
  ck_assert(memcmp(a, b, 4104)==0);
  /* truncation, then a write past a gap reads back, the gap as zeros */
  jrnl_record(a, 401);
  ck_assert_int_eq(f->pMethods->xWrite(f, a, 4104, 401*4104), SQLITE_OK);
  ck_assert_int_eq(f->pMethods->xTruncate(f, 300*4104), SQLITE_OK);
  ck_assert_int_eq(f->pMethods->xFileSize(f, &n), SQLITE_OK);
  ck_assert_int_eq(n, 300*4104);
  ck_assert_int_eq(f->pMethods->xWrite(f, a, 4104, 310*4104), SQLITE_OK);
  ck_assert_int_eq(f->pMethods->xRead(f, b, 4104, 305*4104), SQLITE_OK);
  for(i=0; i<4104; i++) ck_assert_int_eq(b[i], 0);
  ck_assert_int_eq(f->pMethods->xRead(f, b, 4104, 310*4104), SQLITE_OK);
  ck_assert(memcmp(a, b, 4104)==0);
  jrnl_record(a, 299);
  ck_assert_int_eq(f->pMethods->xRead(f, b, 4104, 299*4104), SQLITE_OK);
  ck_assert(memcmp(a, b, 4104)==0);
  f->pMethods->xClose(f);
  sqlite3_free(f);
}
END_TEST


/* Pages a transaction takes from the freelist are not journaled, so a
** ROLLBACK of a spilled transaction does not restore them: the sync that
** follows the playback must still publish nothing.  With journal_mode=
** MEMORY SQLite keeps the journal in its own heap, where the VFS cannot see
** the playback start: that sync may store the zeroed free pages as one
** commit (docs/SQL.md, "Journal modes"), which changes no row. */
START_TEST(test_depot_rolled_back_spill_into_free_pages_leaves_no_commit){
  char *zDir = th_tmpdir("depot-spillfree");
  sqlite3 *db = open_depot(zDir, "s", 0);
  sqlite3_int64 nCommit, nAfter;
  th_exec(db, azExclJournal[_i]);
  th_exec(db, "CREATE TABLE t(a, b); INSERT INTO t SELECT value,"
              " randomblob(2000) FROM (WITH RECURSIVE g(value) AS (SELECT 1"
              " UNION ALL SELECT value+1 FROM g WHERE value<400) SELECT value"
              " FROM g); DELETE FROM t WHERE a>10");
  nCommit = th_int(db, "SELECT count(*) FROM depot_commits("
      "(SELECT file FROM pragma_database_list WHERE name='main'), 's')");
  th_exec(db, "PRAGMA cache_size=5; BEGIN; INSERT INTO t SELECT value,"
              " randomblob(2000) FROM (WITH RECURSIVE g(value) AS (SELECT 1"
              " UNION ALL SELECT value+1 FROM g WHERE value<300) SELECT value"
              " FROM g); ROLLBACK");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 10);
  nAfter = th_int(db, "SELECT count(*) FROM depot_commits("
      "(SELECT file FROM pragma_database_list WHERE name='main'), 's')");
  if( strstr(azExclJournal[_i], "memory") ){
    ck_assert_int_ge(nAfter, nCommit);
    ck_assert_int_le(nAfter, nCommit+1);
  }else{
    ck_assert_int_eq(nAfter, nCommit);
  }
  assert_integrity(db);
  sqlite3_close(db);
  db = open_depot(zDir, "s", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 10);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* SAVEPOINT outside BEGIN opens the transaction; a ROLLBACK TO it after
** the transaction spilled plays the journal back from its first header,
** which is no ROLLBACK: the rows written afterwards must be committed by
** RELEASE. */
START_TEST(test_depot_release_after_rollback_to_of_spilled_savepoint_commits){
  char *zDir = th_tmpdir("depot-sprb");
  sqlite3 *db = open_depot(zDir, "s", 0);
  sqlite3_int64 nCommit;
  th_exec(db, azExclJournal[_i]);
  th_exec(db, "CREATE TABLE t(a, b); INSERT INTO t VALUES(1, 'keep')");
  nCommit = th_int(db, "SELECT count(*) FROM depot_commits("
      "(SELECT file FROM pragma_database_list WHERE name='main'), 's')");
  th_exec(db, "PRAGMA cache_size=5; SAVEPOINT s1; INSERT INTO t SELECT value,"
              " randomblob(2000) FROM (WITH RECURSIVE g(value) AS (SELECT 1"
              " UNION ALL SELECT value+1 FROM g WHERE value<300) SELECT value"
              " FROM g); ROLLBACK TO s1; INSERT INTO t VALUES(2, 'after');"
              " RELEASE s1");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 2);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM depot_commits("
      "(SELECT file FROM pragma_database_list WHERE name='main'), 's')"),
      nCommit+1);
  sqlite3_close(db);
  db = open_depot(zDir, "s", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE b='after'"), 1);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

static const char *const azFailJournal[] = {
  "delete", "truncate", "persist", "off"
};

/* In exclusive locking mode SQLite keeps the write lock after a COMMIT
** that failed (here: over the database's quota), so no unlock drops what
** the failed transaction wrote; with journal_mode=OFF no playback does
** either.  The next commit must not store the failed transaction: it
** stored its rows although its COMMIT had said SQLITE_FULL. */
START_TEST(test_depot_failed_commit_in_exclusive_mode_is_never_stored){
  char *zDir = th_tmpdir("depot-failexcl");
  sqlite3 *db = open_depot(zDir, "q", 0);
  char *z;
  sqlite3_int64 nUsed;
  z = sqlite3_mprintf("PRAGMA journal_mode=%s", azFailJournal[_i]);
  th_exec(db, z);
  sqlite3_free(z);
  th_exec(db, "PRAGMA locking_mode=exclusive;"
      " CREATE TABLE t(k INTEGER PRIMARY KEY, v); INSERT INTO t SELECT"
      " value, 'orig' FROM (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL"
      " SELECT value+1 FROM g WHERE value<300) SELECT value FROM g)");
  nUsed = th_int(db, "SELECT quota_used_bytes FROM depot_stats("
      "(SELECT file FROM pragma_database_list WHERE name='main'))");
  z = sqlite3_mprintf("SELECT depot_quota((SELECT file FROM"
      " pragma_database_list WHERE name='main'), 'q', %lld)", nUsed+200);
  th_exec(db, z);
  sqlite3_free(z);
  ck_assert_int_eq(th_try(db, "BEGIN; UPDATE t SET v=randomblob(500)"
                   " WHERE k%2=0; COMMIT", 0), SQLITE_FULL);
  if( !sqlite3_get_autocommit(db) ) th_exec(db, "ROLLBACK");
  th_exec(db, "SELECT depot_quota((SELECT file FROM pragma_database_list"
              " WHERE name='main'), 'q', NULL);"
              " INSERT INTO t VALUES(1000, 'x')");
  sqlite3_close(db);
  db = open_depot(zDir, "q", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 301);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE v='orig'"), 300);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

static const char *const azOffLocking[] = { "normal", "exclusive" };

/* With journal_mode=OFF SQLite cannot undo what a spilled transaction
** wrote (a plain file is left corrupt).  The depot keeps those pages in
** the write buffer, which a ROLLBACK drops: at the unlock in normal
** locking mode, and in exclusive mode, where the lock is kept, when the
** pager starts over after the rollback.  It stored them with the next
** commit, and the database was corrupt. */
START_TEST(test_depot_rollback_with_journal_off_is_whole){
  char *zDir = th_tmpdir("depot-offrb");
  sqlite3 *db = open_depot(zDir, "o", 0);
  char *z = sqlite3_mprintf("PRAGMA journal_mode=off; PRAGMA locking_mode=%s;"
                            " PRAGMA cache_size=5", azOffLocking[_i]);
  th_exec(db, z);
  sqlite3_free(z);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b);"
      " INSERT INTO t SELECT value, zeroblob(2000) FROM (WITH RECURSIVE"
      " g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE"
      " value<300) SELECT value FROM g)");
  th_exec(db, "BEGIN; UPDATE t SET b=zeroblob(2100) WHERE a%3=0;"
      " INSERT INTO t SELECT value+1000, zeroblob(3000) FROM (WITH RECURSIVE"
      " g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE"
      " value<200) SELECT value FROM g); ROLLBACK");
  th_exec(db, "INSERT INTO t VALUES(5000, 'after')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 301);
  sqlite3_close(db);
  db = open_depot(zDir, "o", 0);
  assert_integrity(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 301);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE"
                   " b=zeroblob(2000)"), 300);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_exclusive_mode_and_synchronous_off_commit_and_roll_back){
  char *zDir = th_tmpdir("depot-excl");
  sqlite3 *db = open_depot(zDir, "e", 0);
  char *z;
  th_exec(db, azExclJournal[_i]);
  th_exec(db, "PRAGMA synchronous=OFF; CREATE TABLE t(a);"
              "INSERT INTO t VALUES(1); PRAGMA locking_mode=EXCLUSIVE;"
              "INSERT INTO t VALUES(2);"
              "BEGIN; INSERT INTO t VALUES(3); ROLLBACK; PRAGMA cache_size=5;"
              "BEGIN; INSERT INTO t SELECT randomblob(2000) FROM"
              " (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<300) SELECT value FROM g); ROLLBACK; INSERT INTO t VALUES(4)");
  sqlite3_close(db);
  db = open_depot(zDir, "e", 0);
  z = th_text(db, "SELECT group_concat(a) FROM t");
  ck_assert_str_eq(z, "1,2,4");
  sqlite3_free(z);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* journal_mode=WAL answers the mode in effect and changes nothing, as on
** any VFS without shared memory (no error: applications set it at start-up
** and go on); MEMORY is accepted; what is written after each reaches the
** store. */
START_TEST(test_depot_journal_mode_wal_answers_mode_and_memory_is_accepted){
  char *zDir = th_tmpdir("depot-wal");
  sqlite3 *db = open_depot(zDir, "w", 0);
  char *z;
  th_exec(db, "CREATE TABLE t(a)");
  z = th_text(db, "PRAGMA journal_mode=WAL");
  ck_assert_str_eq(z, "delete");
  sqlite3_free(z);
  z = th_text(db, "PRAGMA journal_mode");
  ck_assert_str_eq(z, "delete");
  sqlite3_free(z);
  z = th_text(db, "PRAGMA journal_mode=memory");
  ck_assert_str_eq(z, "memory");
  sqlite3_free(z);
  th_exec(db, "INSERT INTO t VALUES(0)");
  z = th_text(db, "PRAGMA journal_mode=wal");
  ck_assert_str_eq(z, "memory");
  sqlite3_free(z);
  th_exec(db, "PRAGMA journal_mode=truncate; INSERT INTO t VALUES(1);"
              "PRAGMA journal_mode=persist; INSERT INTO t VALUES(2);");
  sqlite3_close(db);
  db = open_depot(zDir, "w", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_mmap_size_pragma_answers_zero){
  /* A depot database is never memory-mapped: PRAGMA mmap_size answers 0,
  ** set or read, as on a plain file opened with memory mapping off (an
  ** answer with no row breaks code that reads the value back). */
  char *zDir = th_tmpdir("depot-mmap");
  sqlite3 *db = open_depot(zDir, "m", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  ck_assert_int_eq(th_int(db, "PRAGMA mmap_size=268435456"), 0);
  ck_assert_int_eq(th_int(db, "PRAGMA mmap_size"), 0);
  ck_assert_int_eq(th_int(db, "PRAGMA main.mmap_size"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Write one row with value zVal into a new store in zDir, in a child
** process, so nothing of it reaches this process's page cache. */
static void replaced_store_child(const char *zDir, const char *zVal){
  pid_t pid = fork();
  int st = 0;
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *db = 0;
    char *zUri = depot_uri(zDir, "r", 0);
    char *zSql = sqlite3_mprintf("CREATE TABLE t(a, b);"
                                 " INSERT INTO t VALUES(1, %Q)", zVal);
    int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE
                             |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
    if( rc==SQLITE_OK ) rc = sqlite3_exec(db, zSql, 0, 0, 0);
    sqlite3_close(db);
    _exit(rc==SQLITE_OK ? 0 : 1);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
}

START_TEST(test_depot_store_replaced_at_its_path_is_read_afresh){
  /* A store file deleted and made anew at the same path while a
  ** connection of this process still has the old one open (as a test
  ** suite with a fixed scratch path does) has the same branch ids and
  ** txids: its pages must not come from the old store's page cache. */
  char *zDir = th_tmpdir("depot-replaced");
  char *zPath = sqlite3_mprintf("%s/store.depot", zDir);
  char *zSide;
  sqlite3 *pOld, *pNew;
  char *z;
  setup_vfs();
  replaced_store_child(zDir, "old");
  pOld = open_depot(zDir, "r", 0);
  z = th_text(pOld, "SELECT b FROM t");
  ck_assert_str_eq(z, "old");
  sqlite3_free(z);
  ck_assert_int_eq(unlink(zPath), 0);
  zSide = sqlite3_mprintf("%s-wal", zPath);
  unlink(zSide);
  sqlite3_free(zSide);
  zSide = sqlite3_mprintf("%s-shm", zPath);
  unlink(zSide);
  sqlite3_free(zSide);
  replaced_store_child(zDir, "new");
  pNew = open_depot(zDir, "r", 0);
  z = th_text(pNew, "SELECT b FROM t");
  ck_assert_str_eq(z, "new");
  sqlite3_free(z);
  assert_integrity(pNew);
  z = th_text(pOld, "SELECT b FROM t");
  ck_assert_str_eq(z, "old");
  sqlite3_free(z);
  sqlite3_close(pNew);
  sqlite3_close(pOld);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_cache_kb_pragma_reads_sets_and_validates){
  char *zDir = th_tmpdir("depot-cache");
  sqlite3 *db = open_depot(zDir, "c", "cache_kb=100");
  char *z;
  ck_assert_int_eq(th_int(db, "PRAGMA depot_cache_kb"), 100);
  ck_assert_int_eq(th_int(db, "PRAGMA depot_cache_kb=2048"), 2048);
  ck_assert_int_eq(th_try(db, "PRAGMA depot_cache_kb=-1", &z), SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(z, "depot_cache_kb must be"));
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "PRAGMA depot_cache_kb"), 2048);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* PRAGMA depot_store_cache_kb reads back store_cache_kb, sets the store
** connection's page cache (the limit depot_memory reports follows, and a
** smaller one frees the pages past it at once) and refuses a value out of
** 1..1048576 with a message naming the pragma, changing nothing. */
START_TEST(test_depot_store_cache_kb_pragma_reads_sets_and_validates){
  char *zDir = th_tmpdir("depot-storecache");
  sqlite3 *db = open_depot(zDir, "c", "store_cache_kb=4096");
  static const char *const azBad[] = { "0", "-1", "1048577", "abc",
                                       "'12x'" };
  char *z;
  int i;
  ck_assert_int_eq(th_int(db, "PRAGMA depot_store_cache_kb"), 4096);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b);"
              "WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v+1 FROM g"
              " WHERE v<20000) INSERT INTO t SELECT v, randomblob(200)"
              " FROM g");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 20000);
  ck_assert_int_eq(th_int(db, "PRAGMA depot_store_cache_kb=64"), 64);
  ck_assert_int_eq(th_int(db, "SELECT limit_bytes FROM depot_memory"
                              " WHERE name='store_connection'"), 64*1024);
  for(i=0; i<(int)(sizeof(azBad)/sizeof(azBad[0])); i++){
    char *zSql = sqlite3_mprintf("PRAGMA depot_store_cache_kb=%s", azBad[i]);
    ck_assert_int_eq(th_try(db, zSql, &z), SQLITE_ERROR);
    ck_assert_ptr_nonnull(strstr(z, "depot_store_cache_kb must be an integer"
                                    " 1..1048576"));
    sqlite3_free(z);
    sqlite3_free(zSql);
  }
  ck_assert_int_eq(th_int(db, "PRAGMA depot_store_cache_kb"), 64);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 20000);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* At tiny limits (cache_kb=16 and map_kb=16: three decoded pages, 512
** page map entries) a workload of ~3 MB (a load, an index, updates, a
** scan) gives the right results while depot_memory shows the decoded-page
** cache and the page map within their limits after every step. */
START_TEST(test_depot_tiny_cache_limits_hold_under_a_larger_workload){
  char *zDir = th_tmpdir("depot-tinycache");
  sqlite3 *db = open_depot(zDir, "c", "cache_kb=16&map_kb=16");
  static const char *const azStep[] = {
    "CREATE TABLE t(a INTEGER PRIMARY KEY, b INT, c TEXT)",
    "INSERT INTO t SELECT value, value*7919%10007, printf('%d %s', value,"
    " hex(randomblob(60))) FROM (WITH RECURSIVE g(value) AS (SELECT 1"
    " UNION ALL SELECT value+1 FROM g WHERE value<20000) SELECT value"
    " FROM g)",
    "CREATE INDEX tb ON t(b)",
    "UPDATE t SET b=b+1 WHERE a%3=0",
    "DELETE FROM t WHERE a%7=0",
    "SELECT sum(length(c)) FROM t",
  };
  int i;
  sqlite3_int64 nPage = 0;
  for(i=0; i<(int)(sizeof(azStep)/sizeof(azStep[0])); i++){
    th_exec(db, azStep[i]);
    ck_assert_int_le(th_int(db, "SELECT bytes FROM depot_memory"
                                " WHERE name='decoded_page_cache'"), 16*1024);
    ck_assert_int_le(th_int(db, "SELECT bytes FROM depot_memory"
                                " WHERE name='page_map'"), 16*1024);
  }
  nPage = th_int(db, "PRAGMA page_count");
  ck_assert_int_gt(nPage*4096, 32*16*1024);    /* far past the limits */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 20000 - 20000/7);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE a%3=0"
                              " AND b!=a*7919%10007+1"), 0);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Pages committed at a fast (negative) zstd level read back under any
** level, and a database mixes frames of both. */
START_TEST(test_depot_fast_zstd_level_commits_and_reads){
  char *zDir = th_tmpdir("depot-fastlevel");
  sqlite3 *db = open_depot(zDir, "z", "zstd_level=-7");
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b);"
              "WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v+1 FROM g"
              " WHERE v<2000) INSERT INTO t SELECT v, printf('row %d of text"
              " that compresses %d', v, v*v) FROM g");
  sqlite3_close(db);
  db = open_depot(zDir, "z", "zstd_level=19&cache_kb=0");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE b LIKE 'row %'"),
                   2000);
  th_exec(db, "UPDATE t SET b=b||'!' WHERE a%3=0");
  sqlite3_close(db);
  db = open_depot(zDir, "z", "cache_kb=0");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE b LIKE '%!'"),
                   666);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* With no decoded-page cache and no page map, a commit learns the old
** CRC-64 of each page it changes from the stored frame's header; pages
** rewritten unchanged (equal CRCs) are compared byte by byte and not
** stored.  The head's checksum stays right: depot_verify recomputes it
** from the pages. */
START_TEST(test_depot_commit_of_uncached_pages_keeps_the_checksum){
  char *zDir = th_tmpdir("depot-oldcrc");
  char *zSql, *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *db = open_depot(zDir, "c", "cache_kb=0&map_kb=0");
  sqlite3 *admin = th_open(":memory:");
  sqlite3_int64 iTxid;
  th_exec(db, "PRAGMA cache_size=5; CREATE TABLE t(a INTEGER PRIMARY KEY, b);"
              "WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v+1 FROM g"
              " WHERE v<3000) INSERT INTO t SELECT v, randomblob(300) FROM g");
  th_exec(db, "UPDATE t SET b=randomblob(300) WHERE a%7=0");
  zSql = sqlite3_mprintf("SELECT max(txid) FROM depot_commits(%Q, 'c')",
                         zStore);
  iTxid = th_int(admin, zSql);
  sqlite3_free(zSql);
  /* every leaf page rewritten, none changed: at most page 1 (its change
  ** counter) is stored */
  th_exec(db, "UPDATE t SET b=b");
  ck_assert_int_le(th_intf(admin, "SELECT coalesce(sum(pages_written), 0)"
                   " FROM depot_commits(%Q, 'c') WHERE txid>%lld", zStore,
                   (long long)iTxid), 1);
  iTxid = th_intf(admin, "SELECT max(txid) FROM depot_commits(%Q, 'c')",
                  zStore);
  th_exec(db, "UPDATE t SET b=x'00' WHERE a=5");
  ck_assert_int_eq(th_intf(admin, "SELECT count(*) FROM depot_commits(%Q,"
                   " 'c') WHERE txid>%lld AND pages_written>0", zStore,
                   (long long)iTxid), 1);
  ck_assert_int_eq(th_intf(admin, "SELECT count(*) FROM depot_verify(%Q)",
                           zStore), 0);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_close(admin);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

static const char *const azBadUri[] = {
  "cache_kb=-5", "zstd_level=40", "store_sync=sometimes", "store_vfs=nosuch",
  "branch=", "store_vfs=depot", "cache_kb=abc", "cache_kb=12kb",
  "zstd_level=abc", "zstd_level=4294967297", "zstd_level=", "cache_kb=",
  "zstd_level=-8",
  "nolock=1", "cache_kb=%0910", "compact_after=-0x5",
  "compact_after=99999999999999999999", "cache_kb=-99999999999999999999"
};

START_TEST(test_depot_bad_uri_parameters_cannot_open){
  char *zDir = th_tmpdir("depot-uri");
  char *zUri = depot_uri(zDir, "u", azBadUri[_i]);
  sqlite3 *db = 0;
  int rc;
  setup_vfs();
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                       |SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = th_try(db, "CREATE TABLE t(a)", 0);
  ck_assert_int_eq(rc, SQLITE_CANTOPEN);
  sqlite3_close(db);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* The bytes of file zPath (sqlite3_malloc'd, *pn its size), NULL if none. */
static unsigned char *file_bytes(const char *zPath, long *pn){
  FILE *f = fopen(zPath, "rb");
  unsigned char *a = 0;
  long n;
  *pn = -1;
  if( f==0 ) return 0;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  a = sqlite3_malloc64(n>0 ? n : 1);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq((long)fread(a, 1, n, f), n);
  fclose(f);
  *pn = n;
  return a;
}

/* An application's own SQLite database given where a store is expected
** (the depot VFS, or the store argument of a depot_* function) is refused
** with SQLITE_CANTOPEN and left as it was: no depot_kv table, no switch
** to WAL mode. */
START_TEST(test_depot_plain_database_as_store_is_refused_and_unchanged){
  static const char *const azSql[] = {
    "SELECT * FROM depot_commits(%Q)",
    "SELECT * FROM depot_verify(%Q)",
    "SELECT * FROM depot_stats(%Q)",
    "SELECT depot_fork_bucket(%Q,'main','b')",
    "SELECT depot_quota(%Q,'app',1000)",
    "SELECT depot_import('%q-src','%q','app')",
    "SELECT depot_export('%q','app','main','%q-out')",
    "SELECT depot_compact(%Q)",
  };
  char *zDir = th_tmpdir("depot-plainstore");
  char *zPlain = sqlite3_mprintf("%s/app.db", zDir);
  char *zSrc = sqlite3_mprintf("%s-src", zPlain);
  char *zUri = sqlite3_mprintf("file:%s?vfs=depot&db=app", zPlain);
  char *zWal = sqlite3_mprintf("%s-wal", zPlain);
  unsigned char *aBefore, *aAfter;
  long nBefore, nAfter;
  sqlite3 *db = th_open(zPlain), *dbD = 0;
  int i, rc;
  char *zErr = 0;
  setup_vfs();
  th_exec(db, "CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT);"
              "INSERT INTO orders(item) VALUES('bolt'),('nut')");
  sqlite3_close(db);
  db = th_open(zSrc);
  th_exec(db, "CREATE TABLE s(a); INSERT INTO s VALUES(1)");
  sqlite3_close(db);
  aBefore = file_bytes(zPlain, &nBefore);
  db = th_open(":memory:");
  sqlite3_extended_result_codes(db, 1);
  for(i=0; i<(int)(sizeof(azSql)/sizeof(azSql[0])); i++){
    char *z = sqlite3_mprintf(azSql[i], zPlain, zPlain);
    rc = th_try(db, z, &zErr);
    ck_assert_msg(rc==SQLITE_CANTOPEN, "%s: rc %d (%s)", z, rc,
                  zErr ? zErr : "");
    ck_assert_msg(zErr && strstr(zErr, "but not a depot store"),
                  "%s: %s", z, zErr ? zErr : "");
    sqlite3_free(zErr); zErr = 0;
    sqlite3_free(z);
  }
  sqlite3_close(db);
  rc = sqlite3_open_v2(zUri, &dbD, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                       |SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = th_try(dbD, "SELECT count(*) FROM sqlite_schema", 0);
  ck_assert_int_eq(rc & 0xff, SQLITE_CANTOPEN);
  sqlite3_close(dbD);
  aAfter = file_bytes(zPlain, &nAfter);
  ck_assert_int_eq(nAfter, nBefore);
  ck_assert(memcmp(aBefore, aAfter, nBefore)==0);
  ck_assert_int_ne(access(zWal, F_OK), 0);
  {
    char *zOut = sqlite3_mprintf("%s-out", zPlain);
    ck_assert_int_ne(access(zOut, F_OK), 0);   /* no export target made */
    sqlite3_free(zOut);
  }
  db = th_open(zPlain);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM orders"), 2);
  sqlite3_close(db);
  sqlite3_free(aBefore); sqlite3_free(aAfter);
  sqlite3_free(zWal); sqlite3_free(zUri); sqlite3_free(zSrc);
  sqlite3_free(zPlain); sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_missing_database_without_create_cannot_open){
  char *zDir = th_tmpdir("depot-nocreate");
  char *zUri = depot_uri(zDir, "nope", 0);
  sqlite3 *db = open_depot(zDir, "other", 0), *db2 = 0;
  th_exec(db, "CREATE TABLE t(a)");
  ck_assert_int_eq(sqlite3_open_v2(zUri, &db2,
                   SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0), SQLITE_CANTOPEN);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_read_only_connection_reads_and_refuses_writes){
  char *zDir = th_tmpdir("depot-ro");
  char *zUri = depot_uri(zDir, "r", 0);
  sqlite3 *db = open_depot(zDir, "r", 0), *ro = 0;
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(7)");
  sqlite3_close(db);
  ck_assert_int_eq(sqlite3_open_v2(zUri, &ro,
                   SQLITE_OPEN_READONLY|SQLITE_OPEN_URI, 0), SQLITE_OK);
  ck_assert_int_eq(th_int(ro, "SELECT a FROM t"), 7);
  ck_assert_int_eq(th_try(ro, "INSERT INTO t VALUES(8)", 0), SQLITE_READONLY);
  sqlite3_close(ro);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* ---- a store on read-only media ---- */

/* In this (forked, single-threaded) process: a private mount namespace
** (a user namespace too when not root) in which zDir is bind-mounted onto
** itself read-only.  Nothing outside the process sees the mount.  0 on
** success, else errno of the step that failed.  The kernel ignores the
** file system type of these calls (and the source of the propagation
** change and the remount); they get "none" rather than NULL, which
** Valgrind's memcheck reports as an unaddressable syscall parameter. */
static int ro_mount(const char *zDir){
  if( unshare(CLONE_NEWNS)!=0 && unshare(CLONE_NEWUSER|CLONE_NEWNS)!=0 ){
    return errno;
  }
  if( mount("none", "/", "none", MS_REC|MS_PRIVATE, 0)!=0 ) return errno;
  if( mount(zDir, zDir, "none", MS_BIND, 0)!=0 ) return errno;
  if( mount("none", zDir, "none", MS_REMOUNT|MS_BIND|MS_RDONLY, 0)!=0 ){
    return errno;
  }
  return 0;
}

/* What a connection opened with zUri gets: 100*open rc + the rc of a
** read of t (0 = read "7|8" exactly) + 10 when a write is refused with
** SQLITE_READONLY. */
static int ro_probe(const char *zUri){
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READONLY|SQLITE_OPEN_URI, 0);
  int r = 100*rc;
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "SELECT group_concat(a,'|') FROM t", -1,
                            &pStmt, 0);
    if( rc==SQLITE_OK ) rc = sqlite3_step(pStmt);
    if( rc==SQLITE_ROW && sqlite3_column_text(pStmt, 0)
     && strcmp((const char*)sqlite3_column_text(pStmt, 0), "7|8")==0 ){
      rc = SQLITE_OK;
    }else if( rc==SQLITE_ROW ){
      rc = SQLITE_MISMATCH;
    }
    sqlite3_finalize(pStmt);
    r += rc;
    rc = sqlite3_exec(db, "PRAGMA integrity_check; INSERT INTO t VALUES(9)",
                      0, 0, 0);
    if( (rc&0xff)==SQLITE_READONLY ) r += 10;
  }
  sqlite3_close(db);
  return r;
}

START_TEST(test_depot_store_on_read_only_mount_opens_with_immutable){
  char *zDir = th_tmpdir("depot-rofs");
  char *zRo = sqlite3_mprintf("%s/media", zDir);
  char *zUri, *zRw;
  sqlite3 *db;
  pid_t pid;
  int st = 0;
  ck_assert_int_eq(mkdir(zRo, 0755), 0);
  db = open_depot(zRo, "r", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(7); INSERT INTO t"
              " VALUES(8)");
  sqlite3_close(db);
  zUri = depot_uri(zRo, "r", "immutable=1");
  zRw = depot_uri(zRo, "r", "mode=ro");
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    int e = ro_mount(zRo), r;
    if( e ){
      fprintf(stderr, "read-only bind mount: %s\n", strerror(e));
      _exit(77);
    }
    /* SQLite's own rule for a WAL file on read-only media: mode=ro needs
    ** a -shm it can create; immutable=1 reads without one. */
    if( ro_probe(zRw)/100==SQLITE_OK ) _exit(71);
    r = ro_probe(zUri);
    _exit(r==10 ? 0 : (r/100 ? 72 : (r%10 ? 73 : 74)));
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  if( WEXITSTATUS(st)==77 ){
    fprintf(stderr, "test_depot_store_on_read_only_mount_opens_with_immutable:"
            " skipped, no private mount namespace here\n");
  }else{
    ck_assert_msg(WEXITSTATUS(st)==0, "read-only media child: %d (71: mode=ro"
        " opened without a -shm; 72: immutable=1 did not open; 73: read"
        " failed; 74: write not refused)", WEXITSTATUS(st));
  }
  sqlite3_free(zUri); sqlite3_free(zRw); sqlite3_free(zRo);
  sqlite3_free(zDir);
}
END_TEST

/* The first column of the first row of zSql on db as an integer, or -1
** when it fails (its message on stderr). */
static int ro_int(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  int r = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    r = sqlite3_column_int(pStmt, 0);
  }else{
    fprintf(stderr, "%s: %s\n", zSql, sqlite3_errmsg(db));
  }
  sqlite3_finalize(pStmt);
  return r;
}

/* The functions that only read a store (depot_commits, depot_stats,
** depot_verify, depot_export, the listings, depot_pitr_policy and the
** other readings of settings) read one on read-only media, without
** immutable=1 (they open it immutable there; the store must not change
** meanwhile); those that write it (depot_compact, depot_import) say why
** they cannot, with SQLITE_CANTOPEN. */
START_TEST(test_depot_read_functions_read_a_store_on_read_only_media){
  char *zDir = th_tmpdir("depot-rofn");
  char *zRo = sqlite3_mprintf("%s/media", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zRo);
  sqlite3 *db;
  pid_t pid;
  int st = 0;
  ck_assert_int_eq(mkdir(zRo, 0755), 0);
  db = open_depot(zRo, "r", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(7); INSERT INTO t"
              " VALUES(8)");
  sqlite3_close(db);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    int e = ro_mount(zRo);
    char *zSql;
    if( e ){
      fprintf(stderr, "read-only bind mount: %s\n", strerror(e));
      _exit(77);
    }
    db = th_open(":memory:");
    zSql = sqlite3_mprintf("SELECT count(*) FROM depot_commits('%q', 'r')",
                           zStore);
    if( ro_int(db, zSql)!=3 ) _exit(71);
    sqlite3_free(zSql);
    zSql = sqlite3_mprintf("SELECT count(*) FROM depot_stats('%q')", zStore);
    if( ro_int(db, zSql)<1 ) _exit(72);
    sqlite3_free(zSql);
    zSql = sqlite3_mprintf("SELECT count(*) FROM depot_verify('%q')", zStore);
    if( ro_int(db, zSql)!=0 ) _exit(73);
    sqlite3_free(zSql);
    zSql = sqlite3_mprintf("SELECT depot_export('%q', 'r', 'main', "
                           "'%q/copy.db')", zStore, zDir);
    if( ro_int(db, zSql)<2 ) _exit(74);
    sqlite3_free(zSql);
    /* the listings and the policy read: they only read the store too */
    zSql = sqlite3_mprintf("SELECT (SELECT count(*) FROM depot_branches('%q'))"
        " + (SELECT count(*) FROM depot_databases('%q'))"
        " + (SELECT count(*) FROM depot_restore_points('%q', 'r'))"
        " + (SELECT length(depot_pitr_policy('%q')))"
        " + (SELECT count(*) FROM depot_quotas('%q'))"
        " + depot_compact_threshold('%q') + coalesce(depot_quota('%q','r'),0)",
        zStore, zStore, zStore, zStore, zStore, zStore, zStore);
    if( ro_int(db, zSql)!=2+35+1+1000 ) _exit(79);
    sqlite3_free(zSql);
    zSql = sqlite3_mprintf("SELECT depot_compact('%q')", zStore);
    if( sqlite3_exec(db, zSql, 0, 0, 0)==SQLITE_OK
     || strstr(sqlite3_errmsg(db), "is on a read-only file system")==0 ){
      fprintf(stderr, "depot_compact: %s\n", sqlite3_errmsg(db));
      _exit(76);
    }
    sqlite3_free(zSql);
    /* depot_import writes the store: the same code and reason */
    zSql = sqlite3_mprintf("SELECT depot_import('%q/copy.db', '%q', 'r2')",
                           zDir, zStore);
    sqlite3_extended_result_codes(db, 1);
    if( sqlite3_exec(db, zSql, 0, 0, 0)!=SQLITE_CANTOPEN
     || strstr(sqlite3_errmsg(db), "is on a read-only file system")==0 ){
      fprintf(stderr, "depot_import: %s\n", sqlite3_errmsg(db));
      _exit(78);
    }
    sqlite3_free(zSql);
    sqlite3_close(db);
    zSql = sqlite3_mprintf("%s/copy.db", zDir);
    db = th_open(zSql);
    sqlite3_free(zSql);
    if( ro_int(db, "SELECT sum(a) FROM t")!=15 ) _exit(75);
    sqlite3_close(db);
    _exit(0);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  if( WEXITSTATUS(st)==77 ){
    fprintf(stderr, "test_depot_read_functions_read_a_store_on_read_only_"
            "media: skipped, no private mount namespace here\n");
  }else{
    ck_assert_msg(WEXITSTATUS(st)==0, "read-only media child: %d (71:"
        " depot_commits, 72: depot_stats, 73: depot_verify, 74: depot_export,"
        " 75: the exported copy, 76: depot_compact's message, 77: skipped,"
        " 78: depot_import's code and message, 79: the listings and the"
        " readings of settings)",
        WEXITSTATUS(st));
  }
  sqlite3_free(zStore); sqlite3_free(zRo); sqlite3_free(zDir);
}
END_TEST

/* A child commits row 8 and exits without closing: the commit stays in
** the outer store's -wal (and its -shm stays), not yet in the store file. */
static void commit_and_exit(const char *zDir){
  pid_t pid = fork();
  int st = 0;
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *db = 0;
    char *zUri = depot_uri(zDir, "r", 0);
    int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI,
                             0);
    if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "INSERT INTO t VALUES(8)", 0,
                                          0, 0);
    _exit(rc==SQLITE_OK ? 0 : 1);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
}

START_TEST(test_depot_immutable_refuses_store_whose_wal_holds_commits){
  char *zDir = th_tmpdir("depot-rowal");
  char *zRo = sqlite3_mprintf("%s/media", zDir);
  char *zWal = sqlite3_mprintf("%s/store.depot-wal", zRo);
  char *zUri, *zRw;
  struct stat sb;
  sqlite3 *db;
  pid_t pid;
  int st = 0;
  ck_assert_int_eq(mkdir(zRo, 0755), 0);
  db = open_depot(zRo, "r", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(7)");
  sqlite3_close(db);
  commit_and_exit(zRo);
  ck_assert_int_eq(stat(zWal, &sb), 0);
  ck_assert_int_gt(sb.st_size, 0);
  zUri = depot_uri(zRo, "r", "immutable=1");
  zRw = depot_uri(zRo, "r", "mode=ro");
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    int e = ro_mount(zRo);
    if( e ){
      fprintf(stderr, "read-only bind mount: %s\n", strerror(e));
      _exit(77);
    }
    /* with its -shm present, mode=ro reads the commit in the -wal */
    if( ro_probe(zRw)!=10 ) _exit(71);
    /* immutable=1 cannot read the -wal: it must not open (and show the
    ** store without the acknowledged commit) */
    _exit(ro_probe(zUri)==100*SQLITE_CANTOPEN ? 0 : 72);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  if( WEXITSTATUS(st)==77 ){
    fprintf(stderr, "test_depot_immutable_refuses_store_whose_wal_holds_"
            "commits: skipped, no private mount namespace here\n");
  }else{
    ck_assert_msg(WEXITSTATUS(st)==0, "read-only media child: %d (71: mode=ro"
        " did not read the -wal; 72: immutable=1 opened a store whose -wal"
        " holds commits)", WEXITSTATUS(st));
  }
  sqlite3_free(zUri); sqlite3_free(zRw); sqlite3_free(zWal);
  sqlite3_free(zRo); sqlite3_free(zDir);
}
END_TEST

/* An empty store path names no store: depot_commits and depot_stats refuse
** it as every other depot function does, instead of reporting on an
** anonymous temporary file. */
START_TEST(test_depot_commits_and_stats_refuse_an_empty_store_path){
  static const char *const azSql[] = {
    "SELECT * FROM depot_commits('')",
    "SELECT * FROM depot_commits('', 'app')",
    "SELECT * FROM depot_stats('')",
  };
  sqlite3 *db;
  char *zErr = 0;
  int i;
  setup_vfs();
  db = th_open(":memory:");
  for(i=0; i<(int)(sizeof(azSql)/sizeof(azSql[0])); i++){
    ck_assert_int_eq(th_try(db, azSql[i], &zErr), SQLITE_ERROR);
    ck_assert_msg(zErr && strcmp(zErr, "depot: store must be non-empty"
                  " text")==0, "%s: %s", azSql[i], zErr ? zErr : "");
    sqlite3_free(zErr); zErr = 0;
  }
  sqlite3_close(db);
}
END_TEST

/* ---- a database that gets smaller ---- */

/* Each case empties most of a 500-page database, then makes it smaller:
** the stored database must shrink with it. */
static const char *const azShrink[] = {
  "DELETE FROM t WHERE rowid>10; VACUUM",
  "PRAGMA auto_vacuum=FULL; VACUUM; DELETE FROM t WHERE rowid>10",
  "PRAGMA auto_vacuum=INCREMENTAL; VACUUM; DELETE FROM t WHERE rowid>10;"
  " PRAGMA incremental_vacuum",
};

START_TEST(test_depot_database_made_smaller_is_stored_smaller){
  char *zDir = th_tmpdir("depot-shrink");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zSql;
  sqlite3 *db = open_depot(zDir, "s", 0), *db2;
  sqlite3_int64 nPage;
  th_exec(db, "CREATE TABLE t(x); WITH RECURSIVE g(i) AS (SELECT 1 UNION"
              " ALL SELECT i+1 FROM g WHERE i<2000) INSERT INTO t"
              " SELECT randomblob(1000) FROM g");
  ck_assert_int_gt(th_int(db, "PRAGMA page_count"), 500);
  th_exec(db, azShrink[_i]);
  nPage = th_int(db, "PRAGMA page_count");
  ck_assert_int_lt(nPage, 20);
  zSql = sqlite3_mprintf("SELECT db_pages FROM depot_commits(%Q,'s')"
                         " ORDER BY txid DESC LIMIT 1", zStore);
  ck_assert_int_eq(th_int(db, zSql), nPage);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT logical_size FROM depot_branches(%Q,'s')",
                         zStore);
  ck_assert_int_eq(th_int(db, zSql), nPage*th_int(db, "PRAGMA page_size"));
  sqlite3_free(zSql);
  db2 = open_depot(zDir, "s", 0);
  ck_assert_int_eq(th_int(db2, "PRAGMA page_count"), nPage);
  ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM t"), 10);
  assert_integrity(db2);
  th_exec(db2, "INSERT INTO t VALUES(zeroblob(5000))");
  assert_integrity(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 11);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zStore); sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_databases_and_branches_are_independent){
  char *zDir = th_tmpdir("depot-multi");
  sqlite3 *a = open_depot(zDir, "one", 0);
  sqlite3 *b = open_depot(zDir, "two", "branch=dev");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zSql;
  th_exec(a, "CREATE TABLE t(x); INSERT INTO t VALUES('a')");
  th_exec(b, "CREATE TABLE t(x); INSERT INTO t VALUES('b1'),('b2')");
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM t"), 1);
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM t"), 2);
  zSql = sqlite3_mprintf("SELECT databases*100+branches FROM depot_stats(%Q)",
                         zStore);
  ck_assert_int_eq(th_int(a, zSql), 202);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT count(*) FROM depot_commits(%Q,'two','dev')",
                         zStore);
  ck_assert_int_eq(th_int(a, zSql), 2);
  sqlite3_free(zSql);
  sqlite3_close(a); sqlite3_close(b);
  sqlite3_free(zStore); sqlite3_free(zDir);
}
END_TEST

/* ---- SQL functions ---- */

START_TEST(test_depot_commits_lists_txids_sizes_and_checksums){
  char *zDir = th_tmpdir("depot-commits");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *db = open_depot(zDir, "app", 0);
  sqlite3 *m = th_open(":memory:");
  char *zSql, *z;
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1); BEGIN;"
              " INSERT INTO t VALUES(2); INSERT INTO t VALUES(3); COMMIT");
  zSql = sqlite3_mprintf("SELECT group_concat(txid) FROM depot_commits(%Q,"
                         " 'app')", zStore);
  z = th_text(m, zSql);
  ck_assert_str_eq(z, "1,2,3");
  sqlite3_free(z); sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT db_pages*page_size, bytes_stored>0,"
      " length(checksum), pages_written>0 FROM depot_commits(%Q,'app',"
      " 'main') WHERE txid=3", zStore);
  ck_assert_int_eq(th_int(m, zSql), th_int(db, "SELECT page_count*page_size"
      " FROM pragma_page_count, pragma_page_size"));
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT count(*) FROM depot_commits(%Q, 'nope')",
                         zStore);
  ck_assert_int_eq(th_int(m, zSql), 0);
  sqlite3_free(zSql);
  ck_assert_int_ne(th_try(m, "SELECT * FROM depot_commits()", 0), SQLITE_OK);
  ck_assert_int_ne(th_try(m, "SELECT * FROM depot_commits(NULL)", 0),
                   SQLITE_OK);
  ck_assert_int_ne(th_try(m, "SELECT * FROM depot_commits('/nonexistent/x')",
                          0), SQLITE_OK);
  sqlite3_close(m); sqlite3_close(db);
  sqlite3_free(zStore); sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_stats_reports_compression_of_text){
  char *zDir = th_tmpdir("depot-stats");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *db = open_depot(zDir, "app", 0);
  char *zSql;
  th_exec(db, "CREATE TABLE t(a, b); INSERT INTO t SELECT value,"
      " printf('row %d of a text-heavy table with repeated words', value)"
      " FROM (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<5000) SELECT value FROM g)");
  zSql = sqlite3_mprintf("SELECT compression_ratio<0.6 AND stored_bytes>0 AND"
      " logical_bytes>=stored_bytes AND cache_hits+cache_misses>=0"
      " FROM depot_stats(%Q)", zStore);
  ck_assert_int_eq(th_int(db, zSql), 1);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zStore); sqlite3_free(zDir);
}
END_TEST

/* The whole file zPath (sqlite3_malloc'd), its size in *pn. */
static unsigned char *read_whole_file(const char *zPath, long *pn){
  FILE *pF = fopen(zPath, "rb");
  unsigned char *a;
  ck_assert_ptr_nonnull(pF);
  fseek(pF, 0, SEEK_END);
  *pn = ftell(pF);
  fseek(pF, 0, SEEK_SET);
  a = sqlite3_malloc64(*pn>0 ? (sqlite3_uint64)*pn : 1);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq((long)fread(a, 1, (size_t)*pn, pF), *pn);
  fclose(pF);
  return a;
}

/* zTo, a new plain file, made from the plain file zFrom by the backup API
** (what the shell's .backup does). */
static void backup_copy(const char *zFrom, const char *zTo){
  sqlite3 *a = th_open(zFrom), *b = th_open(zTo);
  sqlite3_backup *pB = sqlite3_backup_init(b, "main", a, "main");
  ck_assert_ptr_nonnull(pB);
  ck_assert_int_eq(sqlite3_backup_step(pB, -1), SQLITE_DONE);
  sqlite3_backup_finish(pB);
  sqlite3_close(a);
  sqlite3_close(b);
}

/* depot_export of an imported file is byte for byte the backup-API copy
** of the source file. */
START_TEST(test_depot_export_equals_a_backup_copy_byte_for_byte){
  char *zDir = th_tmpdir("depot-bytes");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zDst = sqlite3_mprintf("%s/dst.db", zDir);
  char *zCopy = sqlite3_mprintf("%s/copy.db", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *src = th_open(zSrc), *m;
  unsigned char *a, *b;
  long na, nb;
  char *zSql;
  th_exec(src, "CREATE TABLE t(a INTEGER PRIMARY KEY, b); CREATE INDEX tb"
      " ON t(b); WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM g"
      " WHERE i<500) INSERT INTO t SELECT i, randomblob(i) FROM g;"
      " DELETE FROM t WHERE a%7=0");
  sqlite3_close(src);
  m = th_open(":memory:");
  zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'imp');"
      "SELECT depot_export(%Q, 'imp', 'main', %Q)", zSrc, zStore, zStore, zDst);
  th_exec(m, zSql);
  sqlite3_close(m);
  backup_copy(zSrc, zCopy);
  a = read_whole_file(zDst, &na);
  b = read_whole_file(zCopy, &nb);
  ck_assert_int_eq(na, nb);
  ck_assert_msg(memcmp(a, b, (size_t)na)==0, "export differs from the copy");
  sqlite3_free(a); sqlite3_free(b); sqlite3_free(zSql);
  sqlite3_free(zSrc); sqlite3_free(zDst); sqlite3_free(zCopy);
  sqlite3_free(zStore); sqlite3_free(zDir);
}
END_TEST

/* A plain file in WAL mode states it in its header (bytes 18..19); a depot
** database is never in WAL mode, so the pages the backup API copies from
** such a file must not leave the depot database unreadable, neither for
** the connection that took the backup (normal or exclusive locking) nor
** for a later one. */
static const char *azBackupLocking[] = { "normal", "exclusive" };

START_TEST(test_depot_backup_from_wal_mode_file_stays_readable){
  char *zDir = th_tmpdir("depot-bkwal");
  char *zSrc, *z;
  sqlite3 *db = open_depot(zDir, "app", 0), *src;
  sqlite3_backup *pB;
  z = sqlite3_mprintf("PRAGMA locking_mode=%s", azBackupLocking[_i]);
  th_exec(db, z);
  sqlite3_free(z);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  zSrc = sqlite3_mprintf("%s/src.db", zDir);
  src = th_open(zSrc);
  th_exec(src, "PRAGMA journal_mode=WAL; CREATE TABLE a(x);"
               "INSERT INTO a VALUES(1),(2)");
  pB = sqlite3_backup_init(db, "main", src, "main");
  ck_assert_ptr_nonnull(pB);
  ck_assert_int_eq(sqlite3_backup_step(pB, -1), SQLITE_DONE);
  ck_assert_int_eq(sqlite3_backup_finish(pB), SQLITE_OK);
  sqlite3_close(src);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM a"), 2);
  th_exec(db, "INSERT INTO a VALUES(3)");
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM a"), 6);
  z = th_text(db, "PRAGMA journal_mode");
  ck_assert_str_ne(z, "wal");
  sqlite3_free(z);
  sqlite3_close(db);
  db = open_depot(zDir, "app", 0);
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM a"), 6);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zSrc); sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_import_of_wal_mode_file_opens_and_reads){
  char *zDir = th_tmpdir("depot-impwal");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zSql;
  sqlite3 *src = th_open(zSrc), *m, *db;
  th_exec(src, "PRAGMA journal_mode=WAL; CREATE TABLE a(x);"
               "INSERT INTO a VALUES(1),(2)");
  sqlite3_close(src);
  m = th_open(":memory:");
  zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'imp')", zSrc, zStore);
  th_exec(m, zSql);
  sqlite3_close(m);
  db = open_depot(zDir, "imp", 0);
  ck_assert_int_eq(th_int(db, "SELECT sum(x) FROM a"), 3);
  th_exec(db, "INSERT INTO a VALUES(3)");
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zSql); sqlite3_free(zSrc); sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* Importing a file of another page size into an existing database fails
** with a message naming both sizes, and stores nothing: the imported
** header would state a page size the stored pages do not have. */
START_TEST(test_depot_import_of_another_page_size_fails_and_changes_nothing){
  char *zDir = th_tmpdir("depot-imp-pgsz");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *src = th_open(zSrc), *db, *m;
  char *zSql, *zErr = 0;
  th_exec(src, "PRAGMA page_size=8192; CREATE TABLE z(a); INSERT INTO z"
               " VALUES(42)");
  sqlite3_close(src);
  db = open_depot(zDir, "crm", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  m = th_open(":memory:");
  zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'crm')", zSrc, zStore);
  ck_assert_int_eq(th_try(m, zSql, &zErr), SQLITE_ERROR);
  ck_assert_msg(strstr(zErr, "has pages of 8192 bytes, database crm has pages"
                " of 4096 bytes"), "%s", zErr);
  sqlite3_free(zErr); sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT count(*) FROM depot_commits(%Q, 'crm')",
                         zStore);
  ck_assert_int_eq(th_int(m, zSql), 2);
  ck_assert_int_eq(th_int(db, "SELECT a FROM t"), 1);
  ck_assert_int_eq(th_int(db, "PRAGMA page_size"), 4096);
  th_exec(db, "INSERT INTO t VALUES(2)");
  assert_integrity(db);
  sqlite3_close(db); sqlite3_close(m);
  sqlite3_free(zSql); sqlite3_free(zSrc); sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* An import into a database whose write lock a connection of this
** process holds fails with SQLITE_BUSY (a code the caller can retry on,
** not SQLITE_ERROR), stores nothing, and succeeds once the writer ends. */
START_TEST(test_depot_import_into_a_held_database_is_busy_then_retries){
  char *zDir = th_tmpdir("depot-imp-busy");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *src = th_open(zSrc), *db, *m;
  char *zSql, *zCount, *zErr = 0;
  th_exec(src, "CREATE TABLE z(a); INSERT INTO z VALUES(42)");
  sqlite3_close(src);
  db = open_depot(zDir, "crm", 0);
  th_exec(db, "CREATE TABLE t(a); BEGIN; INSERT INTO t VALUES(1)");
  m = th_open(":memory:");
  zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'crm')", zSrc, zStore);
  zCount = sqlite3_mprintf("SELECT count(*) FROM depot_commits(%Q, 'crm')",
                           zStore);
  ck_assert_int_eq(th_try(m, zSql, &zErr) & 0xff, SQLITE_BUSY);
  ck_assert_msg(strstr(zErr, "depot: import failed: database is locked"),
                "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(m, zCount), 1);
  th_exec(db, "COMMIT");
  th_exec(m, zSql);
  ck_assert_int_eq(th_int(m, zCount), 3);
  sqlite3_close(db); sqlite3_close(m);
  sqlite3_free(zCount); sqlite3_free(zSql); sqlite3_free(zSrc);
  sqlite3_free(zStore); sqlite3_free(zDir);
}
END_TEST

/* A store of the older layout (tests/check/data/store_v1.depot: a WITHOUT
** ROWID depot_kv with the blob chunks in its cells, layout version 1, made
** by the build before the change) opens read-only as it is, and a writable
** open migrates it to the current store format (user_version 2: the keys
** in depot_keys, the big values in depot_blobs, depot_kv a view of them),
** the format row says 3, every row is still there, the database reads the
** same, passes integrity_check and depot_verify, and takes new commits. */
START_TEST(test_depot_store_of_the_old_layout_is_migrated){
  const char *zData = getenv("DEPOT_TEST_DATA");
  char *zDir = th_tmpdir("depot-migrate");
  char *zSrc = sqlite3_mprintf("%s/store_v1.depot",
                               zData ? zData : "tests/check/data");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zCmd = sqlite3_mprintf("cp '%q' '%q'", zSrc, zStore);
  char *zRo = depot_uri(zDir, "app", "mode=ro");
  char *zSql;
  sqlite3 *db, *raw;
  sqlite3_int64 nRows;
  ck_assert_int_eq(system(zCmd), 0);
  raw = th_open(zStore);
  nRows = th_int(raw, "SELECT count(*) FROM depot_kv");
  ck_assert_int_eq(th_int(raw, "SELECT sql LIKE '%WITHOUT ROWID%' FROM"
                   " sqlite_schema WHERE name='depot_kv'"), 1);
  sqlite3_close(raw);
  /* read-only: the old layout is read as it is */
  setup_vfs();
  ck_assert_int_eq(sqlite3_open_v2(zRo, &db, SQLITE_OPEN_READONLY
                                   |SQLITE_OPEN_URI, 0), SQLITE_OK);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 300);
  ck_assert_int_eq(th_int(db, "SELECT sum(length(b)) FROM t"), 62334);
  sqlite3_close(db);
  raw = th_open(zStore);
  ck_assert_int_eq(th_int(raw, "SELECT sql LIKE '%WITHOUT ROWID%' FROM"
                   " sqlite_schema WHERE name='depot_kv'"), 1);
  sqlite3_close(raw);
  /* writable: migrated */
  db = open_depot(zDir, "app", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 300);
  ck_assert_int_eq(th_int(db, "SELECT sum(length(b)) FROM t"), 62334);
  assert_integrity(db);
  th_exec(db, "INSERT INTO t VALUES(1000, 'after the migration')");
  sqlite3_close(db);
  raw = th_open(zStore);
  ck_assert_int_eq(th_int(raw, "SELECT sql LIKE '%WITHOUT ROWID%' FROM"
                   " sqlite_schema WHERE name='depot_kv'"), 0);
  ck_assert_int_eq(th_int(raw, "PRAGMA user_version"), 2);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM sqlite_schema WHERE"
                   " name='depot_kv' AND type='view'"), 1);
  th_text_is(raw, "PRAGMA integrity_check", "ok");
  ck_assert_int_eq(th_int(raw, "SELECT hex(value) FROM depot_kv WHERE"
                   " key=x'0200666f726d6174'"), 3);
  ck_assert_int_gt(th_int(raw, "SELECT count(*) FROM depot_kv"), nRows);
  sqlite3_close(raw);
  db = th_open(":memory:");
  zSql = sqlite3_mprintf("SELECT count(*) FROM depot_verify(%Q)", zStore);
  ck_assert_int_eq(th_int(db, zSql), 0);
  sqlite3_free(zSql);
  sqlite3_close(db);
  db = open_depot(zDir, "app", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 301);
  sqlite3_close(db);
  sqlite3_free(zRo); sqlite3_free(zCmd); sqlite3_free(zStore);
  sqlite3_free(zSrc); sqlite3_free(zDir);
}
END_TEST

static sqlite3_int64 store_disk_bytes(const char *zPath){
  struct stat st;
  char *zWal = sqlite3_mprintf("%s-wal", zPath);
  sqlite3_int64 n = stat(zPath, &st)==0 ? st.st_size : 0;
  if( stat(zWal, &st)==0 ) n += st.st_size;
  sqlite3_free(zWal);
  return n;
}

/* A new store gives the pages depot_gc frees back to the file system
** (auto_vacuum=INCREMENTAL, incremental_vacuum and a truncated -wal):
** after rewriting a table many times, compact + gc leave a smaller file,
** depot_stats.physical_bytes says its size, and depot_vacuum leaves a store
** that passes integrity_check and depot_verify and reads the same. */
/* depot_vacuum of a store that does not exist fails with a clear error
** and creates no file. */
START_TEST(test_depot_vacuum_of_a_missing_store_fails_and_creates_nothing){
  char *zDir = th_tmpdir("depot-vacuum-missing");
  char *zStore = sqlite3_mprintf("%s/none.depot", zDir);
  char *zSql = sqlite3_mprintf("SELECT depot_vacuum(%Q)", zStore);
  char *zErr = 0;
  sqlite3 *m = th_open(":memory:");
  struct stat st;
  ck_assert_int_eq(th_try(m, zSql, &zErr) & 0xff, SQLITE_CANTOPEN);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "cannot open the store file")!=0, "%s", zErr);
  ck_assert_int_ne(stat(zStore, &st), 0);
  sqlite3_free(zErr);
  sqlite3_close(m);
  sqlite3_free(zSql);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_store_file_shrinks_after_gc_and_vacuum){
  char *zDir = th_tmpdir("depot-shrink");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zSql;
  sqlite3 *db = open_depot(zDir, "app", 0), *m, *raw;
  sqlite3_int64 nFull, nGc, nVac, nSum;
  int i;
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)");
  for(i=0; i<8; i++){
    th_exec(db, "DELETE FROM t; WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL"
        " SELECT x+1 FROM g WHERE x<2000) INSERT INTO t SELECT x,"
        " hex(randomblob(200)) FROM g");
  }
  nSum = th_int(db, "SELECT sum(length(b)) FROM t");
  sqlite3_close(db);
  /* a background compaction the commits started would hold a read of
  ** the store (its -wal then stays) and leave depot_compact less to do */
  th_compact_idle();
  nFull = store_disk_bytes(zStore);
  m = th_open(":memory:");
  zSql = sqlite3_mprintf("SELECT depot_compact(%Q), depot_gc(%Q)", zStore,
                         zStore);
  th_exec(m, zSql);
  sqlite3_free(zSql);
  nGc = store_disk_bytes(zStore);
  ck_assert_msg(nGc < nFull/2, "store %lld bytes after gc, %lld before",
                (long long)nGc, (long long)nFull);
  ck_assert_int_eq(th_intf(m, "SELECT physical_bytes FROM depot_stats(%Q)",
                           zStore), nGc);
  zSql = sqlite3_mprintf("SELECT depot_vacuum(%Q)", zStore);
  th_exec(m, zSql);
  sqlite3_free(zSql);
  nVac = store_disk_bytes(zStore);
  ck_assert_int_le(nVac, nGc);
  ck_assert_int_eq(th_intf(m, "SELECT count(*) FROM depot_verify(%Q)",
                           zStore), 0);
  sqlite3_close(m);
  raw = th_open(zStore);
  zSql = th_text(raw, "PRAGMA integrity_check");
  ck_assert_str_eq(zSql, "ok");
  sqlite3_free(zSql);
  ck_assert_int_eq(th_int(raw, "PRAGMA auto_vacuum"), 2);
  sqlite3_close(raw);
  db = open_depot(zDir, "app", 0);
  ck_assert_int_eq(th_int(db, "SELECT sum(length(b)) FROM t"), nSum);
  assert_integrity(db);
  sqlite3_close(db);
  sqlite3_free(zStore); sqlite3_free(zDir);
}
END_TEST

/* On a full disk (every write of the default VFS fails with SQLITE_FULL
** from the Nth on), depot_import and depot_export fail with SQLITE_FULL
** (they said SQLITE_ERROR), the import stores nothing, and the export
** leaves no partial target file behind, which made the retry fail with
** "export target ... already exists"; with space again both succeed. */
START_TEST(test_depot_import_export_on_full_disk_fail_full_and_retry){
  char *zDir = th_tmpdir("depot-imex-full");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zDst = sqlite3_mprintf("%s/dst.db", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zImp = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'imp')", zSrc,
                               zStore);
  char *zExp = sqlite3_mprintf("SELECT depot_export(%Q, 'imp', 'main', %Q)",
                               zStore, zDst);
  char *zCommits = sqlite3_mprintf("SELECT count(*) FROM depot_commits(%Q,"
                                   " 'imp')", zStore);
  char *zErr = 0;
  sqlite3 *src = th_open(zSrc), *m;
  struct stat st;
  th_exec(src, "CREATE TABLE t(a INTEGER PRIMARY KEY, b); INSERT INTO t"
      " SELECT value, randomblob(2000) FROM (WITH RECURSIVE g(value) AS"
      " (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<200)"
      " SELECT value FROM g)");
  sqlite3_close(src);
  m = th_open(":memory:");
  ck_assert_int_gt(th_int(m, zImp), 10);             /* the first commit */
  setup_fault_vfs();
  ck_assert_int_eq(sqlite3_vfs_register(&faultVfs, 1), SQLITE_OK);
  faultWriteRc = SQLITE_FULL;
  faultWrites = 3;
  ck_assert_int_eq(th_try(m, zImp, &zErr), SQLITE_FULL);
  ck_assert_msg(strstr(zErr, "full")!=0, "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  faultWrites = 3;
  ck_assert_int_eq(th_try(m, zExp, &zErr), SQLITE_FULL);
  ck_assert_msg(strstr(zErr, "depot: export failed")!=0, "%s", zErr);
  sqlite3_free(zErr);
  faultWrites = 0;
  ck_assert_int_ne(stat(zDst, &st), 0);             /* no partial target */
  ck_assert_int_eq(th_int(m, zCommits), 1);         /* the import stored nothing */
  ck_assert_int_gt(th_int(m, zExp), 10);
  ck_assert_int_gt(th_int(m, zImp), 10);
  ck_assert_int_eq(th_int(m, zCommits), 2);
  sqlite3_close(m);
  sqlite3_free(zCommits); sqlite3_free(zExp); sqlite3_free(zImp);
  sqlite3_free(zSrc); sqlite3_free(zDst); sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_depot_import_export_round_trip){
  char *zDir = th_tmpdir("depot-imex");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zDst = sqlite3_mprintf("%s/dst.db", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  sqlite3 *src = th_open(zSrc), *m, *dst;
  char *zSql, *zErr = 0;
  th_exec(src, "CREATE TABLE t(a PRIMARY KEY, b); INSERT INTO t SELECT value,"
               " randomblob(300) FROM (WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<1000) SELECT value FROM g)");
  sqlite3_close(src);
  m = th_open(":memory:");
  zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'imp')", zSrc, zStore);
  ck_assert_int_gt(th_int(m, zSql), 10);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT depot_export(%Q, 'imp', 'main', %Q)",
                         zStore, zDst);
  ck_assert_int_gt(th_int(m, zSql), 10);
  ck_assert_int_eq(th_try(m, zSql, &zErr), SQLITE_ERROR);   /* exists */
  ck_assert_ptr_nonnull(strstr(zErr, "already exists"));
  sqlite3_free(zErr); sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'imp')", zSrc, zStore);
  th_int(m, zSql);                      /* a second import: a new commit */
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT count(*) FROM depot_commits(%Q, 'imp')",
                         zStore);
  ck_assert_int_eq(th_int(m, zSql), 2);
  sqlite3_free(zSql);
  ck_assert_int_eq(th_try(m, "SELECT depot_import(NULL, 'x')", &zErr),
                   SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(zErr, "depot_import(src_path, store[, db])"));
  sqlite3_free(zErr);
  dst = th_open(zDst);
  zSql = sqlite3_mprintf("ATTACH %Q AS s", zSrc);
  th_exec(dst, zSql);
  ck_assert_int_eq(th_int(dst, "SELECT count(*) FROM (SELECT * FROM t EXCEPT"
                   " SELECT * FROM s.t)"), 0);
  ck_assert_int_eq(th_int(dst, "SELECT count(*) FROM t"), 1000);
  assert_integrity(dst);
  sqlite3_free(zSql);
  sqlite3_close(dst); sqlite3_close(m);
  sqlite3_free(zSrc); sqlite3_free(zDst); sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* A db name is NAME or BUCKET/NAME wherever the branch functions take one:
** the URI refuses a '/' in db= (such a database could never be addressed
** there), and depot_import / depot_export read BUCKET/NAME as the others. */
START_TEST(test_depot_db_name_with_slash_is_a_bucket_address){
  char *zDir = th_tmpdir("depot-slash");
  char *zSrc = sqlite3_mprintf("%s/src.db", zDir);
  char *zDst = sqlite3_mprintf("%s/dst.db", zDir);
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zUri = depot_uri(zDir, "a/b", 0), *zSql, *zErr = 0;
  sqlite3 *src = th_open(zSrc), *m, *db = 0;
  int rc;
  th_exec(src, "CREATE TABLE t(a); INSERT INTO t VALUES(7)");
  sqlite3_close(src);
  m = open_depot(zDir, "app", 0);
  th_exec(m, "CREATE TABLE t(a)");
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                       |SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ) rc = th_try(db, "CREATE TABLE t(a)", 0);
  ck_assert_int_eq(rc, SQLITE_CANTOPEN);
  sqlite3_close(db);
  zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'a/b')", zSrc, zStore);
  ck_assert_int_eq(th_try(m, zSql, &zErr), SQLITE_ERROR);
  ck_assert_str_eq(zErr, "depot: bucket a does not exist");
  sqlite3_free(zErr); sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT count(*) FROM depot_databases(%Q)", zStore);
  ck_assert_int_eq(th_int(m, zSql), 1);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT depot_fork_bucket(%Q, 'main', 'stg');"
      "SELECT depot_import(%Q, %Q, 'stg/imp');"
      "SELECT depot_export(%Q, 'stg/imp', 'main', %Q);", zStore, zSrc, zStore,
      zStore, zDst);
  th_exec(m, zSql);
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT group_concat(n) FROM (SELECT bucket||'.'||"
      "database||inherited AS n FROM depot_databases(%Q) ORDER BY n)", zStore);
  zErr = th_text(m, zSql);
  ck_assert_str_eq(zErr, "main.app0,stg.app1,stg.imp0");
  sqlite3_free(zErr); sqlite3_free(zSql);
  sqlite3_close(m);
  m = th_open(zDst);
  ck_assert_int_eq(th_int(m, "SELECT a FROM t"), 7);
  sqlite3_close(m);
  sqlite3_free(zSrc); sqlite3_free(zDst); sqlite3_free(zStore);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* The tests that reach the store only through depot_uri(): with
** $DEPOT_TEST_STORE_URI they run on a PostgreSQL store (pg_suite.sh). */
static Suite *depotStoreUriSuite(void){
  Suite *s = suite_create("depot");
  TCase *tc = tcase_create("store_uri");
  tcase_add_loop_test(tc, test_depot_oracle_random_workload_matches_plain_file,
                      0, (int)(sizeof(aOraclePage)/sizeof(aOraclePage[0])));
  tcase_add_loop_test(tc, test_depot_every_page_size_works, 0,
                      (int)(sizeof(aPageSizes)/sizeof(aPageSizes[0])));
  tcase_add_test(tc,
      test_depot_reader_keeps_snapshot_while_other_connection_commits);
  tcase_add_test(tc, test_depot_stale_writer_gets_busy_snapshot);
  tcase_add_test(tc, test_depot_reader_sees_commits_of_exclusive_mode_writer);
  tcase_add_test(tc, test_depot_second_writer_in_process_is_busy);
  tcase_add_test(tc, test_depot_writer_in_other_process_waits_for_the_write_lock);
  tcase_add_test(tc, test_depot_threads_see_only_whole_commits);
  tcase_add_test(tc, test_depot_concurrent_processes_lose_no_update);
  tcase_add_test(tc,
      test_depot_reader_keeps_snapshot_while_other_process_commits);
  suite_add_tcase(s, tc);
  return s;
}

Suite *depot_test_suite(void){
  Suite *s;
  TCase *tc;
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  if( zPg && zPg[0] ) return depotStoreUriSuite();
  s = suite_create("depot");
  tc = tcase_create("basic");
  tcase_add_test(tc, test_depot_write_then_read_after_reopen);
  tcase_add_test(tc, test_depot_plain_database_as_store_is_refused_and_unchanged);
  tcase_add_test(tc, test_depot_commits_and_stats_refuse_an_empty_store_path);
  tcase_add_loop_test(tc, test_depot_oracle_random_workload_matches_plain_file,
                      0, (int)(sizeof(aOraclePage)/sizeof(aOraclePage[0])));
  tcase_add_loop_test(tc, test_depot_every_page_size_works, 0,
                      (int)(sizeof(aPageSizes)/sizeof(aPageSizes[0])));
  tcase_add_test(tc,
      test_depot_page_size_change_of_existing_database_fails_cleanly);
  tcase_add_test(tc,
      test_depot_vacuum_to_larger_page_size_fails_and_keeps_writable);
  tcase_add_loop_test(tc,
      test_depot_rolled_back_spilled_transaction_leaves_no_commit, 0,
      (int)(sizeof(azExclJournal)/sizeof(azExclJournal[0])));
  tcase_add_test(tc,
      test_depot_journal_past_the_memory_bound_spills_and_rolls_back);
  tcase_add_test(tc, test_depot_spilled_journal_gathers_adjacent_writes);
  tcase_add_test(tc, test_depot_fast_zstd_level_commits_and_reads);
  tcase_add_test(tc, test_depot_commit_of_uncached_pages_keeps_the_checksum);
  tcase_add_loop_test(tc,
      test_depot_exclusive_mode_and_synchronous_off_commit_and_roll_back, 0,
      (int)(sizeof(azExclJournal)/sizeof(azExclJournal[0])));
  tcase_add_loop_test(tc,
      test_depot_release_after_rollback_to_of_spilled_savepoint_commits, 0,
      (int)(sizeof(azExclJournal)/sizeof(azExclJournal[0])));
  tcase_add_loop_test(tc,
      test_depot_rolled_back_spill_into_free_pages_leaves_no_commit, 0,
      (int)(sizeof(azExclJournal)/sizeof(azExclJournal[0])));
  tcase_add_test(tc, test_depot_journal_mode_wal_answers_mode_and_memory_is_accepted);
  tcase_add_loop_test(tc, test_depot_rollback_with_journal_off_is_whole, 0,
      (int)(sizeof(azOffLocking)/sizeof(azOffLocking[0])));
  tcase_add_loop_test(tc,
      test_depot_failed_commit_in_exclusive_mode_is_never_stored, 0,
      (int)(sizeof(azFailJournal)/sizeof(azFailJournal[0])));
  tcase_add_test(tc, test_depot_cache_kb_pragma_reads_sets_and_validates);
  tcase_add_test(tc, test_depot_store_cache_kb_pragma_reads_sets_and_validates);
  tcase_add_test(tc, test_depot_tiny_cache_limits_hold_under_a_larger_workload);
  tcase_add_test(tc, test_depot_mmap_size_pragma_answers_zero);
  tcase_add_test(tc, test_depot_store_replaced_at_its_path_is_read_afresh);
  tcase_add_loop_test(tc, test_depot_bad_uri_parameters_cannot_open, 0,
                      (int)(sizeof(azBadUri)/sizeof(azBadUri[0])));
  tcase_add_test(tc, test_depot_missing_database_without_create_cannot_open);
  tcase_add_test(tc, test_depot_db_name_with_slash_is_a_bucket_address);
  tcase_add_test(tc, test_depot_read_only_connection_reads_and_refuses_writes);
  tcase_add_test(tc, test_depot_databases_and_branches_are_independent);
  tcase_add_test(tc, test_depot_store_on_read_only_mount_opens_with_immutable);
  tcase_add_test(tc, test_depot_read_functions_read_a_store_on_read_only_media);
  tcase_add_test(tc, test_depot_immutable_refuses_store_whose_wal_holds_commits);
  tcase_add_loop_test(tc, test_depot_database_made_smaller_is_stored_smaller,
                      0, (int)(sizeof(azShrink)/sizeof(azShrink[0])));
  suite_add_tcase(s, tc);
  tc = tcase_create("concurrency");
  tcase_add_test(tc,
      test_depot_reader_keeps_snapshot_while_other_connection_commits);
  tcase_add_test(tc, test_depot_stale_writer_gets_busy_snapshot);
  tcase_add_test(tc, test_depot_reader_sees_commits_of_exclusive_mode_writer);
  tcase_add_test(tc, test_depot_second_writer_in_process_is_busy);
  tcase_add_test(tc, test_depot_writer_in_other_process_waits_for_the_write_lock);
  tcase_add_test(tc, test_depot_threads_see_only_whole_commits);
  tcase_add_test(tc, test_depot_concurrent_processes_lose_no_update);
  tcase_add_test(tc,
      test_depot_reader_keeps_snapshot_while_other_process_commits);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_add_test(tc, test_depot_sigkill_leaves_last_or_next_commit);
  tcase_add_test(tc,
      test_depot_store_write_and_sync_failures_fail_commit_cleanly);
  tcase_add_test(tc, test_depot_failed_store_write_logs_the_store_file);
  tcase_add_test(tc,
      test_depot_crash_in_commit_leaves_attached_plain_file_whole);
  tcase_add_test(tc, test_depot_open_on_full_disk_fails_full_naming_the_cause);
  tcase_add_test(tc,
      test_depot_corrupt_commit_row_and_unknown_layout_are_errors);
  tcase_add_test(tc, test_depot_store_of_the_old_layout_is_migrated);
  tcase_add_test(tc, test_depot_store_file_shrinks_after_gc_and_vacuum);
  tcase_add_test(tc, test_depot_vacuum_of_a_missing_store_fails_and_creates_nothing);
  tcase_add_loop_test(tc, test_depot_corrupt_store_rows_give_sqlite_corrupt,
                      0, (int)(sizeof(azCorrupt)/sizeof(azCorrupt[0])));
  suite_add_tcase(s, tc);
  tc = tcase_create("sql");
  tcase_add_test(tc, test_depot_commits_lists_txids_sizes_and_checksums);
  tcase_add_test(tc, test_depot_stats_reports_compression_of_text);
  tcase_add_test(tc, test_depot_import_export_round_trip);
  tcase_add_test(tc, test_depot_import_export_on_full_disk_fail_full_and_retry);
  tcase_add_test(tc,
      test_depot_import_of_another_page_size_fails_and_changes_nothing);
  tcase_add_test(tc,
      test_depot_import_into_a_held_database_is_busy_then_retries);
  tcase_add_test(tc, test_depot_export_equals_a_backup_copy_byte_for_byte);
  tcase_add_loop_test(tc, test_depot_backup_from_wal_mode_file_stays_readable,
      0, (int)(sizeof(azBackupLocking)/sizeof(azBackupLocking[0])));
  tcase_add_test(tc, test_depot_import_of_wal_mode_file_opens_and_reads);
  suite_add_tcase(s, tc);

  tc = tcase_create("last_error");
  tcase_add_test(tc, test_depot_last_error_gives_the_reason_of_a_failed_open);
  tcase_add_test(tc, test_depot_last_error_is_per_thread);
  tcase_add_test(tc, test_depot_last_error_cuts_a_long_reason_at_a_character);
  suite_add_tcase(s, tc);

  tc = tcase_create("default_vfs");
  tcase_add_checked_fixture(tc, 0, default_vfs_restore);
  tcase_add_test(tc,
      test_depot_default_vfs_opens_a_plain_name_as_a_depot_database);
  tcase_add_test(tc, test_depot_default_vfs_leaves_the_module_files_plain);
  tcase_add_test(tc, test_depot_default_vfs_refuses_other_arguments);
  tcase_add_test(tc, test_depot_default_vfs_params_open_a_fork_by_plain_name);
  tcase_add_test(tc, test_depot_default_vfs_params_leave_uris_that_name_the_vfs);
  tcase_add_test(tc,
      test_depot_default_vfs_params_bad_are_refused_and_change_nothing);
  tcase_add_test(tc,
      test_depot_default_vfs_flipped_by_another_thread_leaves_module_files_plain);
  suite_add_tcase(s, tc);
  return s;
}
