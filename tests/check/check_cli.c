/*
** check_cli.c -- the "cli" suite: the `depot` program ($DEPOT_CLI) under
** a pseudo-terminal.  The progress bar appears on a terminal only (not
** when stderr is a pipe, not with --quiet); SIGINT during an import and
** during a compaction stops the program with exit status 1 and leaves the
** store unchanged row for row (every key and value of the store file's
** depot_kv table hashed before and after; the compaction is of one
** branch, so of one job, which is what Ctrl-C rolls back) and clean
** under depot_verify;
** an interrupted import into a new store file removes that file.  The
** text and --json output of every command and the usage errors are in
** cli.sh.
*/
#include "config.h"
#include "tests/check/harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *cliPath(void){
  const char *z = getenv("DEPOT_CLI");
  ck_assert_msg(z && z[0], "DEPOT_CLI is not set");
  return z;
}

/* A plain database of about nRow KiB (one ~1000-byte row per KiB). */
static char *cliSource(const char *zDir, const char *zName, int nRow){
  char *zPath = sqlite3_mprintf("%s/%s", zDir, zName);
  sqlite3 *db = th_open(zPath);
  char *zSql = sqlite3_mprintf("CREATE TABLE t(a INTEGER PRIMARY KEY, b);"
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n"
      " WHERE i<%d) INSERT INTO t SELECT i, randomblob(1000) FROM n;", nRow);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  sqlite3_close(db);
  return zPath;
}

/* A hash of every row of the store file's depot_kv table, and its row
** count in *pnRow. */
static sqlite3_uint64 cliStoreHash(const char *zStore, int *pnRow){
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  sqlite3_uint64 h = 1469598103934665603ULL;
  int i;
  *pnRow = 0;
  ck_assert_int_eq(sqlite3_open_v2(zStore, &db, SQLITE_OPEN_READONLY, 0),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key, value FROM depot_kv"
                                      " ORDER BY key", -1, &pStmt, 0),
                   SQLITE_OK);
  while( sqlite3_step(pStmt)==SQLITE_ROW ){
    for(i=0; i<2; i++){
      const unsigned char *a = sqlite3_column_blob(pStmt, i);
      int j, n = sqlite3_column_bytes(pStmt, i);
      for(j=0; j<n; j++) h = (h ^ a[j]) * 1099511628211ULL;
      h = (h ^ (sqlite3_uint64)n) * 1099511628211ULL;
    }
    (*pnRow)++;
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return h;
}

static sqlite3_int64 cliVerifyCount(const char *zStore){
  sqlite3 *db = th_open(":memory:");
  sqlite3_int64 n = th_intf(db, "SELECT count(*) FROM depot_verify(%Q)",
                            zStore);
  sqlite3_close(db);
  return n;
}

/* What one run of the program printed and how it ended. */
typedef struct CliRun CliRun;
struct CliRun {
  char *zOut;                     /* everything read from the terminal */
  int nOut;
  int status;                     /* waitpid status */
  int bSignalled;                 /* SIGINT was sent */
};

/* Is there a progress bar "[....] N/M UNIT" with 0 < N < M in z? */
static int cliMidBar(const char *z, const char *zUnit){
  const char *p = z;
  while( (p = strstr(p, "] "))!=0 ){
    long long n = 0, m = 0;
    char zU[16];
    if( sscanf(p, "] %lld/%lld %15s", &n, &m, zU)==3 && n>0 && n<m
     && strcmp(zU, zUnit)==0 ){
      return 1;
    }
    p += 2;
  }
  return 0;
}

/* Run depot with azArg under a pseudo-terminal (stdout and stderr);
** when zStopUnit is set, send SIGINT as soon as a progress bar in that
** unit shows some but not all of the work done. */
static void cliRunPty(const char **azArg, const char *zStopUnit, CliRun *r){
  int fd = -1, nAlloc = 1<<16;
  pid_t pid;
  memset(r, 0, sizeof(*r));
  r->zOut = sqlite3_malloc(nAlloc);
  ck_assert_ptr_nonnull(r->zOut);
  pid = forkpty(&fd, 0, 0, 0);
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    execv(cliPath(), (char**)azArg);
    _exit(127);
  }
  for(;;){
    struct pollfd pfd;
    ssize_t n;
    pfd.fd = fd;
    pfd.events = POLLIN;
    if( poll(&pfd, 1, 60000)<=0 ) break;
    if( r->nOut+4096>=nAlloc ){
      nAlloc *= 2;
      r->zOut = sqlite3_realloc(r->zOut, nAlloc);
      ck_assert_ptr_nonnull(r->zOut);
    }
    n = read(fd, r->zOut+r->nOut, 4095);
    if( n<=0 ) break;                  /* EIO: the terminal closed */
    r->nOut += (int)n;
    r->zOut[r->nOut] = 0;
    if( zStopUnit && !r->bSignalled && cliMidBar(r->zOut, zStopUnit) ){
      kill(pid, SIGINT);
      r->bSignalled = 1;
    }
  }
  r->zOut[r->nOut] = 0;
  close(fd);
  ck_assert_int_eq(waitpid(pid, &r->status, 0), pid);
}

/* Run depot with stdout and stderr on pipes: the exit status, and what
** stderr got in *pzErr (sqlite3_malloc'd). */
static int cliRunPipe(const char **azArg, char **pzErr){
  int aOut[2], aErr[2], status = 0, nAlloc = 4096, n = 0;
  char *z = sqlite3_malloc(nAlloc);
  pid_t pid;
  ssize_t k;
  ck_assert_int_eq(pipe(aOut), 0);
  ck_assert_int_eq(pipe(aErr), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    dup2(aOut[1], 1);
    dup2(aErr[1], 2);
    close(aOut[0]); close(aErr[0]);
    execv(cliPath(), (char**)azArg);
    _exit(127);
  }
  close(aOut[1]);
  close(aErr[1]);
  while( (k = read(aErr[0], z+n, nAlloc-n-1))>0 ){
    n += (int)k;
    if( n+1>=nAlloc ){
      nAlloc *= 2;
      z = sqlite3_realloc(z, nAlloc);
    }
  }
  z[n] = 0;
  close(aErr[0]);
  close(aOut[0]);
  waitpid(pid, &status, 0);
  *pzErr = z;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int cliExit(const CliRun *r){
  return WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1;
}

START_TEST(progress_only_on_a_terminal){
  char *zDir = th_tmpdir("cli_tty");
  char *zSrc = cliSource(zDir, "src.db", 4000);
  char *zS1 = sqlite3_mprintf("%s/a.depot", zDir);
  char *zS2 = sqlite3_mprintf("%s/b.depot", zDir);
  char *zS3 = sqlite3_mprintf("%s/c.depot", zDir);
  char *zErr = 0;
  const char *azTty[] = { "depot", "import", zSrc, zS1, 0 };
  const char *azPipe[] = { "depot", "import", zSrc, zS2, 0 };
  const char *azQuiet[] = { "depot", "--quiet", "import", zSrc, zS3, 0 };
  const char *azVerify[] = { "depot", "verify", zS1, 0 };
  CliRun r;

  cliRunPty(azTty, 0, &r);
  ck_assert_int_eq(cliExit(&r), 0);
  ck_assert_msg(strstr(r.zOut, "\rimport  [")!=0, "no bar: %s", r.zOut);
  ck_assert_msg(strstr(r.zOut, " pages ")!=0, "%s", r.zOut);
  ck_assert_msg(strstr(r.zOut, "B/s")!=0, "no rate: %s", r.zOut);
  ck_assert_msg(strstr(r.zOut, " left")!=0, "no time left: %s", r.zOut);
  ck_assert_msg(strstr(r.zOut, "imported ")!=0, "%s", r.zOut);
  sqlite3_free(r.zOut);

  ck_assert_int_eq(cliRunPipe(azPipe, &zErr), 0);
  ck_assert_msg(zErr[0]==0, "stderr off a terminal: %s", zErr);
  sqlite3_free(zErr);

  cliRunPty(azQuiet, 0, &r);
  ck_assert_int_eq(cliExit(&r), 0);
  ck_assert_msg(r.nOut==0, "--quiet printed: %s", r.zOut);
  sqlite3_free(r.zOut);

  cliRunPty(azVerify, 0, &r);
  ck_assert_int_eq(cliExit(&r), 0);
  ck_assert_msg(strstr(r.zOut, "\rverify  [")!=0, "no bar: %s", r.zOut);
  ck_assert_msg(strstr(r.zOut, "ok: no problems found")!=0, "%s", r.zOut);
  sqlite3_free(r.zOut);

  sqlite3_free(zS1); sqlite3_free(zS2); sqlite3_free(zS3);
  sqlite3_free(zSrc); sqlite3_free(zDir);
}
END_TEST

/* The store with one small database; big.db of about 30 MB beside it. */
static void cliStoreSetup(const char *zDir, char **pzStore, char **pzBig){
  char *zSmall = cliSource(zDir, "small.db", 20);
  const char *azImp[] = { "depot", "import", zSmall, 0, "--db", "keep", 0 };
  char *zErr = 0;
  *pzStore = sqlite3_mprintf("%s/s.depot", zDir);
  *pzBig = cliSource(zDir, "big.db", 30000);
  azImp[3] = *pzStore;
  ck_assert_int_eq(cliRunPipe(azImp, &zErr), 0);
  sqlite3_free(zErr);
  sqlite3_free(zSmall);
}

START_TEST(sigint_during_import_changes_nothing){
  char *zDir = th_tmpdir("cli_sigint_import");
  char *zStore, *zBig, *zNew;
  const char *azImp[] = { "depot", "import", 0, 0, "--db", "big", 0 };
  sqlite3_uint64 h0, h1;
  int n0, n1;
  struct stat st;
  CliRun r;
  cliStoreSetup(zDir, &zStore, &zBig);
  h0 = cliStoreHash(zStore, &n0);
  azImp[2] = zBig;
  azImp[3] = zStore;
  cliRunPty(azImp, "pages", &r);
  ck_assert_msg(r.bSignalled, "no progress bar mid-way: %s", r.zOut);
  ck_assert_int_eq(cliExit(&r), 1);
  ck_assert_msg(strstr(r.zOut, "import interrupted: nothing was stored; the"
                       " store is unchanged")!=0, "%s", r.zOut);
  sqlite3_free(r.zOut);
  h1 = cliStoreHash(zStore, &n1);
  ck_assert_int_eq(n1, n0);
  ck_assert_msg(h1==h0, "the store's rows changed");
  ck_assert_int_eq(cliVerifyCount(zStore), 0);

  /* Into a store that did not exist: the file it made is removed. */
  zNew = sqlite3_mprintf("%s/new.depot", zDir);
  azImp[3] = zNew;
  cliRunPty(azImp, "pages", &r);
  ck_assert_msg(r.bSignalled, "no progress bar mid-way: %s", r.zOut);
  ck_assert_int_eq(cliExit(&r), 1);
  ck_assert_msg(strstr(r.zOut, "the new store file was removed")!=0, "%s",
                r.zOut);
  ck_assert_int_ne(stat(zNew, &st), 0);
  sqlite3_free(r.zOut);
  sqlite3_free(zNew);
  sqlite3_free(zStore);
  sqlite3_free(zBig);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(sigint_during_compaction_changes_nothing){
  char *zDir = th_tmpdir("cli_sigint_compact");
  char *zStore, *zBig, *zErr = 0;
  const char *azImp[] = { "depot", "import", 0, 0, "--db", "big", 0 };
  const char *azCmp[] = { "depot", "compact", 0, "big", 0 };
  sqlite3_uint64 h0, h1;
  int n0, n1;
  CliRun r;
  cliStoreSetup(zDir, &zStore, &zBig);
  azImp[2] = zBig;
  azImp[3] = zStore;
  ck_assert_int_eq(cliRunPipe(azImp, &zErr), 0);
  sqlite3_free(zErr);
  h0 = cliStoreHash(zStore, &n0);
  azCmp[2] = zStore;
  cliRunPty(azCmp, "shards", &r);
  ck_assert_msg(r.bSignalled, "no progress bar mid-way: %s", r.zOut);
  ck_assert_int_eq(cliExit(&r), 1);
  ck_assert_msg(strstr(r.zOut, "compact interrupted: the job in progress was"
                       " rolled back")!=0, "%s", r.zOut);
  sqlite3_free(r.zOut);
  h1 = cliStoreHash(zStore, &n1);
  ck_assert_int_eq(n1, n0);
  ck_assert_msg(h1==h0, "the store's rows changed");
  ck_assert_int_eq(cliVerifyCount(zStore), 0);

  /* The same compaction, not interrupted, then completes. */
  azCmp[1] = "compact";
  ck_assert_int_eq(cliRunPipe(azCmp, &zErr), 0);
  sqlite3_free(zErr);
  ck_assert_int_eq(cliVerifyCount(zStore), 0);
  sqlite3_free(zStore);
  sqlite3_free(zBig);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("cli");
  TCase *tc = tcase_create("cli");
  tcase_add_test(tc, progress_only_on_a_terminal);
  tcase_add_test(tc, sigint_during_import_changes_nothing);
  tcase_add_test(tc, sigint_during_compaction_changes_nothing);
  suite_add_tcase(s, tc);
  return s;
}
