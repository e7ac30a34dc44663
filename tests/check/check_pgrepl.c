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

/* Assert that the statement formatted by sqlite3_mprintf answers zWant. */
static void replTextIs(sqlite3 *db, const char *zWant, const char *zFmt, ...){
  va_list ap;
  char *zSql, *z;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  z = th_text(db, zSql);
  ck_assert_msg(z!=0 && strcmp(z, zWant)==0, "%s: %s, not %s", zSql,
                z ? z : "NULL", zWant);
  sqlite3_free(z);
  sqlite3_free(zSql);
}

/* Child: "fork STORE-URI": depot_fork of app/main in a process that has
** seen no server yet.  Exits 0 when it succeeded, 10 when the store
** refused the server for want of a synchronous standby, 11 on another
** error (written to stderr). */
int depot_test_child(int argc, char **argv){
  sqlite3 *db;
  char *zSql;
  int rc;
  if( argc<2 || strcmp(argv[0], "fork")!=0 ) return 2;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ) return 3;
  zSql = sqlite3_mprintf("SELECT depot_fork(%Q, 'app', 'main', 'child')",
                         argv[1]);
  rc = sqlite3_exec(db, zSql, 0, 0, 0);
  sqlite3_free(zSql);
  if( rc==SQLITE_OK ){
    sqlite3_close(db);
    return 0;
  }
  if( strstr(sqlite3_errmsg(db), "has no synchronous standby attached") ){
    sqlite3_close(db);
    return 10;
  }
  fprintf(stderr, "check_pgrepl child: %s\n", sqlite3_errmsg(db));
  sqlite3_close(db);
  return 11;
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
  /* the standby, once it has replayed the store's tables: depot_stats
  ** reads its replication state (a standby on timeline 1, no standbys of
  ** its own) */
  {
    char *zS = replUri(getenv("DEPOT_TEST_PGREPL_STANDBY_URI"), "harness",
                       "");
    int64_t tEnd = replNowMs() + 10000;
    mem = th_open(":memory:");
    while( th_tryf(mem, 0, "SELECT * FROM depot_stats(%Q)", zS)!=SQLITE_OK
        && replNowMs()<tEnd ){
      usleep(100000);
    }
    replTextIs(mem, "on,0,0,1", "SELECT synchronous_commit||','||"
               "sync_standbys||','||standbys||','||timeline FROM"
               " depot_stats(%Q)", zS);
    sqlite3_close(mem);
    sqlite3_free(zS);
  }
  z = replSh("timeline '%s'", getenv("DEPOT_TEST_PGREPL_PRIMARY"));
  ck_assert_str_eq(z, "1");
  sqlite3_free(z);
  sqlite3_free(zUri); sqlite3_free(zP); sqlite3_free(zDir);
}
END_TEST

/* A write loop of replLoop(): rows 0.. one per transaction; aOk[i] is 1
** for a row whose commit was acknowledged, aMs[i] when the writer saw the
** acknowledgement; aStartMs[i] when it started the row's transaction. */
typedef struct ReplLoop ReplLoop;
struct ReplLoop {
  int nOk, nFail, nAfter;    /* acknowledged, failed, acknowledged after
                             ** the failover was done */
  int nRow;                  /* rows tried */
  char aOk[20000];
  int64_t aMs[20000];
  int64_t aStartMs[20000];
  char zLastErr[512];
};

/* Insert rows through db until a second after zCmd (run by sh in a child
** process, started now) is done and at least 20 commits came after it;
** a failed commit is tried again with the next row after a pause (with
** bReopen the database is opened again from zUri after 10 failures in a
** row). */
static void replLoop(sqlite3 **pDb, const char *zDir, const char *zUri,
                     const char *zCmd, int bReopen, ReplLoop *pL){
  pid_t pid;
  int i, st = 0, bDone = 0, nRowFail = 0;
  int64_t tDone = 0, tEnd;
  memset(pL, 0, sizeof(*pL));
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    execlp("sh", "sh", "-c", zCmd, (char*)0);
    _exit(127);
  }
  tEnd = replNowMs() + 90000;
  for(i=0; i<20000 && replNowMs()<tEnd; i++){
    char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d, randomblob(2000))", i);
    char *zErr = 0;
    int rc;
    pL->aStartMs[i] = replNowMs();
    rc = th_try(*pDb, z, &zErr);
    sqlite3_free(z);
    if( rc==SQLITE_OK ){
      pL->aOk[i] = 1;
      pL->aMs[i] = replNowMs();
      pL->nOk++;
      nRowFail = 0;
      if( bDone ) pL->nAfter++;
    }else{
      pL->nFail++;
      sqlite3_snprintf(sizeof(pL->zLastErr), pL->zLastErr, "%s",
                       zErr ? zErr : "");
      if( bReopen && ++nRowFail>=10 ){
        sqlite3_close(*pDb);
        *pDb = replOpenDb(zDir, zUri, "app");
        nRowFail = 0;
      }
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
}

/* depot_verify of zUri finds nothing. */
static void replVerify(const char *zUri){
  sqlite3 *mem = th_open(":memory:");
  ck_assert_int_eq(th_intf(mem, "SELECT count(*) FROM depot_verify(%Q)",
                           zUri), 0);
  sqlite3_close(mem);
}

/* Kill the primary of a fresh pair during a write loop through the
** multi-host URI and promote the standby: with synchronous replication
** every acknowledged commit is on the new primary, depot_verify is clean
** and the writer goes on committing there, on the same connection.  The
** old primary restarted is fenced out: the writer, whose URI names it
** first, goes on committing on the new primary, so does a new process
** through that URI, and opening it alone for writing is refused. */
START_TEST(t_failover_sync){
  char *zDir = th_tmpdir("pgrepl_failover");
  const char *zCluster = getenv("DEPOT_TEST_PG_CLUSTER");
  char *zP, *zS, *zMulti, *zUri, *zNew, *zOld, *zCmd, *z, *zErr = 0;
  sqlite3 *db, *mem;
  ReplLoop *pL = sqlite3_malloc64(sizeof(ReplLoop));
  int i, nBefore, rc;
  ck_assert_ptr_nonnull(pL);
  replNewPair("fs", 1, &zP, &zS, &zMulti);
  zUri = replUri(zMulti, "failover", "");
  z = replSh("uri '%s'", zS);
  zNew = replUri(z, "failover", "");
  sqlite3_free(z);
  z = replSh("uri '%s'", zP);
  zOld = replUri(z, "failover", "");
  sqlite3_free(z);
  db = replOpenDb(zDir, zUri, "app");
  th_exec(db, "CREATE TABLE t(i INTEGER PRIMARY KEY, b)");
  mem = th_open(":memory:");
  replTextIs(mem, "1", "SELECT timeline FROM depot_stats(%Q)",
             zUri);
  zCmd = sqlite3_mprintf("sleep 0.5; sh '%s' kill '%s' && sh '%s'"
        " promote '%s'", zCluster, zP, zCluster, zS);
  replLoop(&db, zDir, zUri, zCmd, 0, pL);
  sqlite3_free(zCmd);
  fprintf(stderr, "check_pgrepl: failover: %d commits acknowledged (%d after"
          " the promotion), %d failed (%s)\n", pL->nOk, pL->nAfter, pL->nFail,
          pL->zLastErr);
  ck_assert_int_ge(pL->nAfter, 20);
  /* every acknowledged commit is on the new primary */
  {
    sqlite3 *db2 = replOpenDb(zDir, zNew, "app");
    for(i=0; i<pL->nRow; i++){
      if( pL->aOk[i] ){
        ck_assert_int_eq(th_intf(db2, "SELECT count(*) FROM t WHERE i=%d", i),
                         1);
      }
    }
    th_text_is(db2, "PRAGMA integrity_check", "ok");
    sqlite3_close(db2);
  }
  replVerify(zNew);
  replTextIs(mem, "2", "SELECT timeline FROM depot_stats(%Q)",
             zNew);
  /* the old primary comes back, on timeline 1 */
  sqlite3_free(replSh("resume '%s'", zP));
  z = replSh("timeline '%s'", zP);
  ck_assert_str_eq(z, "1");
  sqlite3_free(z);
  nBefore = (int)th_int(db, "SELECT count(*) FROM t");
  for(i=0; i<10; i++){
    th_execf(db, "INSERT INTO t VALUES(%d, 'after')", 30000+i);
  }
  sqlite3_close(db);
  /* a new connection of the URI naming the old primary first (another
  ** URI: no idle handle of this process serves it) */
  z = sqlite3_mprintf("%s&failover_ms=20000", zUri);
  db = replOpenDb(zDir, z, "app");
  sqlite3_free(z);
  for(i=10; i<20; i++){
    th_execf(db, "INSERT INTO t VALUES(%d, 'after')", 30000+i);
  }
  sqlite3_close(db);
  db = replOpenDb(zDir, zNew, "app");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), nBefore+20);
  sqlite3_close(db);
  /* the old primary alone: refused for writing */
  z = sqlite3_mprintf("SELECT depot_fork(%Q, 'app', 'main', 'x')", zOld);
  rc = th_try(mem, z, &zErr);
  sqlite3_free(z);
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "fenced out")!=0, "%s", zErr);
  sqlite3_free(zErr);
  /* a process that never saw the new primary, through the URI naming the
  ** old one first: the timelines of the URI's hosts keep it off the old
  ** one, and its fork lands on the new primary */
  {
    const char *azArg[3];
    pid_t pid;
    int st = 0;
    azArg[0] = "fork"; azArg[1] = zUri; azArg[2] = 0;
    pid = th_spawn(azArg);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    replTextIs(mem, "1", "SELECT count(*) FROM depot_branches(%Q) "
               "WHERE branch='child'", zNew);
  }
  /* a process that never saw the new primary: kept off the old one by
  ** require_sync_standby=1 (its standby follows the new primary now) */
  {
    char *zReq = sqlite3_mprintf("%s&require_sync_standby=1", zOld);
    const char *azArg[3];
    pid_t pid;
    int st = 0;
    azArg[0] = "fork"; azArg[1] = zReq; azArg[2] = 0;
    pid = th_spawn(azArg);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 10);
    sqlite3_free(zReq);
  }
  sqlite3_close(mem);
  sqlite3_free(replSh("stopall '%s' '%s'", zP, zS));
  sqlite3_free(pL);
  sqlite3_free(zP); sqlite3_free(zS); sqlite3_free(zMulti);
  sqlite3_free(zUri); sqlite3_free(zNew); sqlite3_free(zOld);
  sqlite3_free(zDir);
}
END_TEST

/* Asynchronous replication: the primary killed during a write loop, the
** standby promoted.  What the new primary lacks is at most the commits
** acknowledged in the last REPL_ASYNC_WINDOW_MS before the kill started,
** or while it ran: each such commit was seen acknowledged no earlier than
** the window before the kill command started, and was started no later
** than the command's end (the primary accepts commits until it is down;
** when the writer sees the acknowledgement depends on its scheduling,
** so that time bounds only from below), and it
** holds every acknowledged commit before the first one missing (a prefix:
** the commits of one writer replay in order); depot_verify is clean; the
** writer, opened again, goes on on the new primary. */
#define REPL_ASYNC_WINDOW_MS 1000
START_TEST(t_failover_async){
  char *zDir = th_tmpdir("pgrepl_async");
  const char *zCluster = getenv("DEPOT_TEST_PG_CLUSTER");
  char *zP, *zS, *zMulti, *zUri, *zNew, *zCmd, *z, *zKillFile, *zDownFile;
  sqlite3 *db, *mem;
  ReplLoop *pL = sqlite3_malloc64(sizeof(ReplLoop));
  int i, nLost = 0, iFirstLost = -1;
  int64_t tKill = 0, tDown = 0;
  FILE *f;
  ck_assert_ptr_nonnull(pL);
  replNewPair("fa", 0, &zP, &zS, &zMulti);
  zUri = replUri(zMulti, "async", "");
  z = replSh("uri '%s'", zS);
  zNew = replUri(z, "async", "");
  sqlite3_free(z);
  db = replOpenDb(zDir, zUri, "app");
  th_exec(db, "CREATE TABLE t(i INTEGER PRIMARY KEY, b)");
  mem = th_open(":memory:");
  replTextIs(mem, "0,1", "SELECT sync_standbys||','||standbys FROM"
             " depot_stats(%Q)", zUri);
  zKillFile = sqlite3_mprintf("%s/killed_at", zDir);
  zDownFile = sqlite3_mprintf("%s/down_at", zDir);
  zCmd = sqlite3_mprintf("sleep 0.5; date +%%s%%3N >'%s'; sh '%s' kill '%s'"
        " && date +%%s%%3N >'%s' && sh '%s' promote '%s'", zKillFile,
        zCluster, zP, zDownFile, zCluster, zS);
  replLoop(&db, zDir, zUri, zCmd, 1, pL);
  sqlite3_free(zCmd);
  f = fopen(zKillFile, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%lld", (long long*)&tKill), 1);
  fclose(f);
  f = fopen(zDownFile, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%lld", (long long*)&tDown), 1);
  fclose(f);
  ck_assert_int_ge(tDown, tKill);
  sqlite3_close(db);
  db = replOpenDb(zDir, zNew, "app");
  for(i=0; i<pL->nRow; i++){
    if( !pL->aOk[i] ) continue;
    if( th_intf(db, "SELECT count(*) FROM t WHERE i=%d", i)==0 ){
      nLost++;
      if( iFirstLost<0 ) iFirstLost = i;
      /* lost: acknowledged within the window before the kill, or
      ** while it ran */
      ck_assert_int_ge(pL->aMs[i], tKill - REPL_ASYNC_WINDOW_MS);
      ck_assert_int_le(pL->aStartMs[i], tDown);
    }else if( iFirstLost>=0 && pL->aMs[i]<=tKill ){
      ck_abort_msg("row %d is there but row %d, acknowledged before it,"
                   " is not", i, iFirstLost);
    }
  }
  fprintf(stderr, "check_pgrepl: async failover: %d commits acknowledged"
          " (%d after the promotion), %d lost, %d failed (%s)\n", pL->nOk,
          pL->nAfter, nLost, pL->nFail, pL->zLastErr);
  ck_assert_int_ge(pL->nAfter, 20);
  th_text_is(db, "PRAGMA integrity_check", "ok");
  sqlite3_close(db);
  replVerify(zNew);
  sqlite3_close(mem);
  sqlite3_free(replSh("stopall '%s' '%s'", zP, zS));
  sqlite3_free(pL); sqlite3_free(zKillFile); sqlite3_free(zDownFile);
  sqlite3_free(zP); sqlite3_free(zS); sqlite3_free(zMulti);
  sqlite3_free(zUri); sqlite3_free(zNew); sqlite3_free(zDir);
}
END_TEST

/* The suite's primary with its synchronous standby: depot_stats shows
** synchronous_commit, one synchronous standby and timeline 1, and
** require_sync_standby=1 opens for writing; with asynchronous replication
** it shows none and require_sync_standby=1 is refused with a clear error. */
START_TEST(t_durability){
  char *zDir = th_tmpdir("pgrepl_durability");
  const char *zPdir = getenv("DEPOT_TEST_PGREPL_PRIMARY");
  char *zUri = replUri(getenv("DEPOT_TEST_STORE_URI"), "durable",
                       "&require_sync_standby=1");
  char *zErr = 0, *z;
  sqlite3 *db, *mem = th_open(":memory:");
  int rc;
  db = replOpenDb(zDir, zUri, "app");
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  replTextIs(mem, "on,1,1,1", "SELECT synchronous_commit||','||"
             "sync_standbys||','||standbys||','||timeline FROM"
             " depot_stats(%Q)", zUri);
  sqlite3_free(replSh("async '%s'", zPdir));
  z = sqlite3_mprintf("SELECT depot_fork(%Q, 'app', 'main', 'x')", zUri);
  rc = th_try(mem, z, &zErr);
  sqlite3_free(z);
  sqlite3_free(replSh("sync '%s' 'FIRST 1 (s1)'", zPdir));
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "require_sync_standby=1, but server")!=0
                && strstr(zErr, "has no synchronous standby attached")!=0,
                "%s", zErr);
  sqlite3_free(zErr);
  /* synchronous again: it opens */
  ck_assert_int_eq(th_intf(mem, "SELECT depot_fork(%Q, 'app', 'main', 'x')"
                           " IS NOT NULL", zUri), 1);
  sqlite3_close(mem);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* A commit whose COMMIT the connection loses on its way: the synchronous
** standby stopped, the primary's COMMIT waits for it (its commit record
** is written, not yet acknowledged), the primary is killed and both come
** back.  The writer, connected again, finds its commit row at the head:
** the statement succeeds and the commit is there once, not applied again. */
START_TEST(t_commit_outcome){
  char *zDir = th_tmpdir("pgrepl_outcome");
  const char *zCluster = getenv("DEPOT_TEST_PG_CLUSTER");
  char *zP, *zS, *zMulti, *zUri, *zCmd, *zErr = 0;
  sqlite3 *db;
  pid_t pid;
  int rc, st = 0, nCommit;
  int64_t t0;
  replNewPair("uo", 1, &zP, &zS, &zMulti);
  zUri = replUri(zMulti, "outcome", "&failover_ms=60000");
  db = replOpenDb(zDir, zUri, "app");
  th_exec(db, "CREATE TABLE t(i INTEGER PRIMARY KEY, b)");
  th_exec(db, "INSERT INTO t VALUES(1, 'one')");
  {
    sqlite3 *mem = th_open(":memory:");
    nCommit = (int)th_intf(mem, "SELECT count(*) FROM depot_commits(%Q,"
                           " 'app', 'main')", zUri);
    sqlite3_close(mem);
  }
  sqlite3_free(replSh("stop '%s'", zS));
  zCmd = sqlite3_mprintf("sleep 1; sh '%s' kill '%s' && sh '%s' resume '%s'"
      " && sh '%s' resume '%s'", zCluster, zP, zCluster, zP, zCluster, zS);
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    execlp("sh", "sh", "-c", zCmd, (char*)0);
    _exit(127);
  }
  t0 = replNowMs();
  rc = th_try(db, "INSERT INTO t VALUES(2, 'two')", &zErr);
  ck_assert_msg(rc==SQLITE_OK, "%s", zErr ? zErr : "");
  /* its COMMIT waited for the standby until the kill cut it */
  ck_assert_int_ge(replNowMs()-t0, 900);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  th_exec(db, "INSERT INTO t VALUES(3, 'three')");
  sqlite3_close(db);
  db = replOpenDb(zDir, zUri, "app");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  sqlite3_close(db);
  db = th_open(":memory:");
  /* rows 2 and 3: two commits more, none twice */
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM depot_commits(%Q,"
                           " 'app', 'main')", zUri), nCommit+2);
  sqlite3_close(db);
  replVerify(zUri);
  sqlite3_free(replSh("stopall '%s' '%s'", zP, zS));
  sqlite3_free(zCmd);
  sqlite3_free(zP); sqlite3_free(zS); sqlite3_free(zMulti);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* A primary that is gone and no standby promoted: a write fails with a
** clear error once failover_ms has passed, not sooner, not much later. */
START_TEST(t_no_primary){
  char *zDir = th_tmpdir("pgrepl_noprimary");
  const char *zBase = getenv("DEPOT_TEST_PGREPL_DIR");
  char *zP = sqlite3_mprintf("%s/np", zBase);
  char *z = replSh("start '%s'", zP);
  char *zUri = replUri(z, "noprimary", "&failover_ms=1500");
  char *zErr = 0, *zLast;
  sqlite3 *db = replOpenDb(zDir, zUri, "app"), *mem = th_open(":memory:");
  int64_t t0;
  int rc;
  sqlite3_free(z);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  sqlite3_free(replSh("kill '%s'", zP));
  t0 = replNowMs();
  rc = th_try(db, "INSERT INTO t VALUES(2)", &zErr);
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_int_ge(replNowMs()-t0, 1400);
  ck_assert_int_lt(replNowMs()-t0, 10000);
  sqlite3_free(zErr);
  zLast = th_text(mem, "SELECT depot_last_error()");
  ck_assert_ptr_nonnull(zLast);
  ck_assert_msg(strstr(zLast, "accepted the connection within 1500 ms"
                " (failover_ms)")!=0, "%s", zLast);
  sqlite3_free(zLast);
  sqlite3_close(db);
  sqlite3_close(mem);
  sqlite3_free(zP); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("pgrepl");
  TCase *tc = tcase_create("harness");
  tcase_add_test(tc, t_harness);
  tcase_add_test(tc, t_durability);
  tcase_add_test(tc, t_no_primary);
  suite_add_tcase(s, tc);
  tc = tcase_create("failover");
  tcase_add_test(tc, t_failover_sync);
  tcase_add_test(tc, t_failover_async);
  tcase_add_test(tc, t_commit_outcome);
  suite_add_tcase(s, tc);
  return s;
}
