/*
** check_pgrepl.c -- the PostgreSQL store backend (vfs/store/pg.c) on a
** replicated PostgreSQL: a primary with a streaming standby, synchronous
** or asynchronous replication, multi-host URIs, the primary killed
** (pg_ctl stop -m immediate) during a write loop and the standby
** promoted, the old primary restarted.
**
** Runs only under tests/check/pgrepl_suite.sh, which starts a primary and
** a synchronous standby with tests/check/pg_cluster.sh and names them in
** the environment (see pgrepl_suite.sh).  A test that changes which
** server is the primary makes a primary and a standby of its own under
** $DEPOT_TEST_PGREPL_DIR (replNewPair()).  Each test works in a schema of
** its own.
*/
#include "harness.h"
#include "vfs/store/store.h"
#include "vfs/depot_vfs.h"
#include "ext/depot.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static int64_t replNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* Run "sh pg_cluster.sh ARGS" (ARGS formatted by sqlite3_mprintf); fails
** the test unless it exits 0; returns its first output line
** (sqlite3_malloc'd, "" when none). */
static char *replSh(const char *zFmt, ...){
  const char *zCluster = getenv("DEPOT_TEST_PG_CLUSTER");
  char *zArgs, *zCmd, aLine[4096];
  FILE *f;
  va_list ap;
  int st;
  size_t n;
  ck_assert_ptr_nonnull(zCluster);
  va_start(ap, zFmt);
  zArgs = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  zCmd = sqlite3_mprintf("sh '%s' %s", zCluster, zArgs);
  fflush(stdout);
  fflush(stderr);
  f = popen(zCmd, "r");
  ck_assert_ptr_nonnull(f);
  aLine[0] = 0;
  if( fgets(aLine, sizeof(aLine), f)==0 ) aLine[0] = 0;
  while( fgetc(f)!=EOF ){}
  st = pclose(f);
  if( !(WIFEXITED(st) && WEXITSTATUS(st)==0) ){
    ck_abort_msg("pg_cluster.sh %s failed", zArgs);
  }
  n = strlen(aLine);
  while( n>0 && (aLine[n-1]=='\n' || aLine[n-1]=='\r') ) aLine[--n] = 0;
  sqlite3_free(zArgs);
  sqlite3_free(zCmd);
  return sqlite3_mprintf("%s", aLine);
}

/* A primary and a streaming standby of its own for one test, in
** $DEPOT_TEST_PGREPL_DIR/<zTag>p and .../<zTag>s (the suite's exit trap
** stops them), with synchronous replication when bSync.  *pzP and *pzS get
** the directories, *pzMulti the multi-host URI of both (all
** sqlite3_malloc'd). */
static void replNewPair(const char *zTag, int bSync, char **pzP, char **pzS,
                        char **pzMulti){
  const char *zBase = getenv("DEPOT_TEST_PGREPL_DIR");
  char *z;
  ck_assert_ptr_nonnull(zBase);
  *pzP = sqlite3_mprintf("%s/%sp", zBase, zTag);
  *pzS = sqlite3_mprintf("%s/%ss", zBase, zTag);
  sqlite3_free(replSh("start '%s'", *pzP));
  z = replSh("standby '%s' '%s' %ss", *pzP, *pzS, zTag);
  sqlite3_free(z);
  if( bSync ){
    sqlite3_free(replSh("sync '%s' 'FIRST 1 (%ss)'", *pzP, zTag));
  }
  *pzMulti = replSh("multi '%s' '%s'", *pzP, *pzS);
}

/* zUri with the schema "r_<zTag>_<pid>" and zExtra ("&name=value..." or
** ""). */
static char *replUri(const char *zUri, const char *zTag, const char *zExtra){
  ck_assert_ptr_nonnull(zUri);
  ck_assert_ptr_nonnull(strchr(zUri, '?'));
  return sqlite3_mprintf("%s&schema=r_%s_%d%s", zUri, zTag, (int)getpid(),
                         zExtra);
}

/* zUri escaped for a value of an SQLite URI parameter. */
static char *replEsc(const char *zUri){
  sqlite3_str *s = sqlite3_str_new(0);
  const char *z;
  for(z=zUri; *z; z++){
    if( *z=='&' || *z=='%' || *z=='#' || *z=='?' ){
      sqlite3_str_appendf(s, "%%%02X", (unsigned char)*z);
    }else{
      sqlite3_str_appendchar(s, 1, *z);
    }
  }
  return sqlite3_str_finish(s);
}

/* A depot database of the store zUri (db zDb, branch main). */
static sqlite3 *replOpenDb(const char *zDir, const char *zUri,
                           const char *zDb){
  char *zE = replEsc(zUri);
  sqlite3 *db;
  sqlite3_close(th_open(":memory:"));      /* registers the depot VFS */
  db = th_openf("file:%s/app?vfs=depot&db=%s&branch=main&store=%s", zDir,
                zDb, zE);
  sqlite3_free(zE);
  sqlite3_busy_timeout(db, 0);
  return db;
}

/* ---------------------------------------------------------------- */

/* The suite's servers: the multi-host URI reaches the primary, commits
** made through it are on the primary, and the standby streams them as a
** synchronous standby. */
START_TEST(t_harness){
  char *zDir = th_tmpdir("pgrepl_harness");
  char *zUri = replUri(getenv("DEPOT_TEST_PGREPL_MULTI_URI"), "harness", "");
  char *zP = replUri(getenv("DEPOT_TEST_STORE_URI"), "harness", "");
  char *z;
  sqlite3 *db = replOpenDb(zDir, zUri, "app"), *mem;
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1),(2),(3)");
  sqlite3_close(db);
  db = replOpenDb(zDir, zP, "app");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  sqlite3_close(db);
  mem = th_open(":memory:");
  ck_assert_int_eq(th_intf(mem, "SELECT count(*) FROM depot_verify(%Q)", zP),
                   0);
  sqlite3_close(mem);
  z = replSh("wait '%s' s1 sync", getenv("DEPOT_TEST_PGREPL_PRIMARY"));
  sqlite3_free(z);
  z = replSh("timeline '%s'", getenv("DEPOT_TEST_PGREPL_PRIMARY"));
  ck_assert_str_eq(z, "1");
  sqlite3_free(z);
  sqlite3_free(zUri); sqlite3_free(zP); sqlite3_free(zDir);
}
END_TEST

/* One write loop of replFailover(): inserts rows 0.. one per transaction
** until tStop, retrying a failed one after a pause; aOk[i] is 1 for a
** row whose commit was acknowledged. */
typedef struct ReplLoop ReplLoop;
struct ReplLoop {
  int nOk, nFail, nAfter;    /* acknowledged, failed, acknowledged after
                             ** the promotion */
  int nRow;                  /* rows tried */
  char aOk[20000];
  char zLastErr[512];
};

/* Kill the primary of a fresh pair during a write loop through the
** multi-host URI and promote the standby: with synchronous replication
** every acknowledged commit is on the new primary, depot_verify is clean
** and the writer goes on committing there. */
START_TEST(t_failover_sync){
  char *zDir = th_tmpdir("pgrepl_failover");
  char *zP, *zS, *zMulti, *zUri;
  sqlite3 *db, *mem;
  ReplLoop *pL = sqlite3_malloc64(sizeof(ReplLoop));
  pid_t pid;
  int i, st = 0, bDone = 0;
  int64_t tDone = 0, tEnd;
  ck_assert_ptr_nonnull(pL);
  memset(pL, 0, sizeof(*pL));
  replNewPair("fs", 1, &zP, &zS, &zMulti);
  zUri = replUri(zMulti, "failover", "");
  db = replOpenDb(zDir, zUri, "app");
  th_exec(db, "CREATE TABLE t(i INTEGER PRIMARY KEY, b)");
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    const char *zCluster = getenv("DEPOT_TEST_PG_CLUSTER");
    char *zCmd = sqlite3_mprintf("sleep 0.5; sh '%s' kill '%s' && sh '%s'"
        " promote '%s'", zCluster, zP, zCluster, zS);
    execlp("sh", "sh", "-c", zCmd, (char*)0);
    _exit(127);
  }
  tEnd = replNowMs() + 60000;
  for(i=0; i<20000 && replNowMs()<tEnd; i++){
    char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d, randomblob(2000))", i);
    char *zErr = 0;
    int rc = th_try(db, z, &zErr);
    sqlite3_free(z);
    if( rc==SQLITE_OK ){
      pL->aOk[i] = 1;
      pL->nOk++;
      if( bDone ) pL->nAfter++;
    }else{
      pL->nFail++;
      sqlite3_snprintf(sizeof(pL->zLastErr), pL->zLastErr, "%s",
                       zErr ? zErr : "");
      usleep(20000);
    }
    sqlite3_free(zErr);
    if( !bDone && waitpid(pid, &st, WNOHANG)==pid ){
      bDone = 1;
      tDone = replNowMs();
    }
    if( bDone && replNowMs()>tDone+1000 && pL->nAfter>=20 ) break;
  }
  pL->nRow = i;
  if( !bDone ) ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  fprintf(stderr, "check_pgrepl: failover: %d commits acknowledged (%d after"
          " the promotion), %d failed (%s)\n", pL->nOk, pL->nAfter, pL->nFail,
          pL->zLastErr);
  ck_assert_int_ge(pL->nAfter, 20);
  sqlite3_close(db);
  /* every acknowledged commit is on the new primary */
  db = replOpenDb(zDir, zUri, "app");
  for(i=0; i<pL->nRow; i++){
    if( pL->aOk[i] ){
      ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM t WHERE i=%d", i), 1);
    }
  }
  ck_assert_str_eq(th_text(db, "PRAGMA integrity_check"), "ok");
  sqlite3_close(db);
  mem = th_open(":memory:");
  ck_assert_int_eq(th_intf(mem, "SELECT count(*) FROM depot_verify(%Q)",
                           zUri), 0);
  sqlite3_close(mem);
  sqlite3_free(replSh("stopall '%s' '%s'", zP, zS));
  sqlite3_free(pL);
  sqlite3_free(zP); sqlite3_free(zS); sqlite3_free(zMulti);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("pgrepl");
  TCase *tc = tcase_create("harness");
  tcase_add_test(tc, t_harness);
  suite_add_tcase(s, tc);
  tc = tcase_create("failover");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, t_failover_sync);
  suite_add_tcase(s, tc);
  return s;
}
