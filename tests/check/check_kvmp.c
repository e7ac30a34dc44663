/*
** check_kvmp.c -- the "kvmp" suite: KV tables shared by several
** processes (real processes, started with th_spawn, never threads).
**
** A bank: four writer processes move money between shared accounts
** (kv_btree tables in case "processes", kv_log in case "log"), each with
** a busy timeout, while a reader process checks on every snapshot that
** the total never changes; writers are SIGKILLed at random moments and
** replaced.  Every transfer a writer saw commit must be there at the end,
** and the total holds.  Then conflicts and the key-version protocol
** between two processes, the sqlite3 shell reading a table a process
** writes, kv_log appends followed across log file rolls, and a store with
** a kv_memory table with persistence=1 kept to one process (refused at
** once).  Case "readonly": read-only processes (URI mode=ro,
** SQLITE_OPEN_READONLY, the shell's -readonly) read whole commits of a
** store another process writes, and leave every file of it as it was.
** Case "background": the background work of a shared store (WAL
** retirement, TTL sweeps) passes to another process when the one doing
** it is killed, and the WAL stays small over a long shared run.
** DEPOT_TORTURE_ITERS=n makes each bank and the long run last n seconds
** (make torture).
*/
#define SQLITE_CORE 1  /* engine headers pull in sqlite3ext.h */
#define DEPOT_TEST 1   /* kv_sql.h's test hooks (libdepot_core has them) */
#include "config.h"
#include "tests/check/harness.h"
#include "ext/kv/kv_test.h"
#include "ext/depot.h"
#include "ext/kv_sql.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MP_ACCOUNTS 8
#define MP_START    1000
#define MP_WRITERS  4

/* ------------------------------------------------------ child modes --- */

static int64_t mpNowMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

/* A connection of a child: the depot extension, a busy timeout. */
static sqlite3 *mpChildOpen(const char *zDb){
  sqlite3 *db = 0, *dbFirst = 0;
  const char *zLogSz = getenv("KVMP_LOG_FILE_SIZE");
  if( zLogSz ) kv_log_test_file_size(atoll(zLogSz));   /* rolls often */
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0)
   || sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READWRITE, 0) ){
    fprintf(stderr, "child: cannot open %s\n", zDb);
    exit(2);
  }
  sqlite3_close(dbFirst);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_exec(db, "PRAGMA busy_timeout=5000", 0, 0, 0);
  return db;
}

/* The first column of the first row of zSql as an integer (*pRc set). */
static sqlite3_int64 mpInt(sqlite3 *db, const char *zSql, int *pRc){
  sqlite3_stmt *p = 0;
  sqlite3_int64 v = 0;
  int rc = sqlite3_prepare_v2(db, zSql, -1, &p, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(p);
    if( rc==SQLITE_ROW ){ v = sqlite3_column_int64(p, 0); rc = SQLITE_OK; }
    else if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  }
  sqlite3_finalize(p);
  *pRc = rc;
  return v;
}

static int mpExec(sqlite3 *db, const char *zSql){
  return sqlite3_exec(db, zSql, 0, 0, 0);
}

/* bank <db> <writer id> <ms> <ack file>: transfers until the time is up;
** each committed transfer's id is appended to the ack file after COMMIT
** returned OK. */
static int mpBank(char **argv){
  sqlite3 *db = mpChildOpen(argv[1]);
  int id = atoi(argv[2]);
  int64_t iEnd = mpNowMs() + atoi(argv[3]);
  int fd = open(argv[4], O_WRONLY|O_CREAT|O_APPEND, 0644);
  unsigned int seed = (unsigned int)getpid();
  int n = 0, nOk = 0;
  if( fd<0 ) return 3;
  while( mpNowMs()<iEnd ){
    int a = rand_r(&seed)%MP_ACCOUNTS, b = rand_r(&seed)%MP_ACCOUNTS;
    int amt = 1 + rand_r(&seed)%50, rc;
    sqlite3_int64 va, vb, tid = (sqlite3_int64)id*10000000 + (++n);
    char zSql[400];
    if( a==b ) continue;
    rc = mpExec(db, "BEGIN");
    sqlite3_snprintf(sizeof(zSql), zSql,
                     "SELECT value FROM acct WHERE key=%d", a);
    va = rc ? 0 : mpInt(db, zSql, &rc);
    sqlite3_snprintf(sizeof(zSql), zSql,
                     "SELECT value FROM acct WHERE key=%d", b);
    vb = rc ? 0 : mpInt(db, zSql, &rc);
    if( rc==SQLITE_OK ){
      sqlite3_snprintf(sizeof(zSql), zSql,
          "UPDATE acct SET value=%lld WHERE key=%d;"
          "UPDATE acct SET value=%lld WHERE key=%d;"
          "INSERT INTO tlog VALUES(%lld, %d)",
          va-amt, a, vb+amt, b, tid, amt);
      rc = mpExec(db, zSql);
    }
    if( rc==SQLITE_OK ) rc = mpExec(db, "COMMIT");
    if( rc==SQLITE_OK ){
      char zLine[32];
      int nLine = snprintf(zLine, sizeof(zLine), "%lld\n", tid);
      if( write(fd, zLine, nLine)!=nLine ) return 4;
      nOk++;
    }else{
      int e = sqlite3_extended_errcode(db);
      char *zMsg = sqlite3_mprintf("%s", sqlite3_errmsg(db));
      mpExec(db, "ROLLBACK");
      if( (e & 0xff)!=SQLITE_BUSY ){
        fprintf(stderr, "writer %d: %d %s\n", id, e, zMsg);
        return 5;
      }
      sqlite3_free(zMsg);
    }
  }
  close(fd);
  sqlite3_close(db);
  return nOk>0 ? 0 : 6;
}

/* audit <db> <ms>: reads the total on every snapshot it can take. */
static int mpAudit(char **argv){
  sqlite3 *db = mpChildOpen(argv[1]);
  int64_t iEnd = mpNowMs() + atoi(argv[2]);
  int nSnap = 0;
  while( mpNowMs()<iEnd ){
    int rc = mpExec(db, "BEGIN");
    sqlite3_int64 nSum = rc ? 0 : mpInt(db, "SELECT sum(value) FROM acct", &rc);
    sqlite3_int64 nRow = rc ? 0 : mpInt(db, "SELECT count(*) FROM acct", &rc);
    mpExec(db, "COMMIT");
    if( rc!=SQLITE_OK ){
      if( (rc & 0xff)==SQLITE_BUSY ) continue;
      fprintf(stderr, "audit: %s\n", sqlite3_errmsg(db));
      return 5;
    }
    if( nSum!=MP_ACCOUNTS*MP_START || nRow!=MP_ACCOUNTS ){
      sqlite3_int64 nAgain = mpInt(db, "SELECT sum(value) FROM acct", &rc);
      fprintf(stderr, "audit: total %lld over %lld accounts (then %lld)\n",
              (long long)nSum, (long long)nRow, (long long)nAgain);
      return 7;
    }
    nSnap++;
  }
  sqlite3_close(db);
  return nSnap>0 ? 0 : 6;
}

/* exec <db> <sql>: one statement list, exit 0 if it succeeded.  execq:
** the same, giving up on a store held alone after 300 ms. */
static int mpExecChild(int argc, char **argv){
  sqlite3 *db;
  if( strcmp(argv[0], "execq")==0 ) kv_engine_test_join_wait(300);
  db = mpChildOpen(argv[1]);
  int rc = mpExec(db, argv[2]);
  if( rc ) fprintf(stderr, "exec: %s\n", sqlite3_errmsg(db));
  if( rc && argc==4 ){                  /* exec <db> <sql> <message file> */
    FILE *f = fopen(argv[3], "w");
    if( f ){ fputs(sqlite3_errmsg(db), f); fclose(f); }
  }
  sqlite3_close(db);
  return rc ? 5 : 0;
}

static int mpFill(char **argv);
static int mpIdle(char **argv);
static int mpTtl(char **argv);
static int mpPrepKill(char **argv);

/* roread <db> <uri 0|1> <rows>: a read-only connection (URI mode=ro, or
** SQLITE_OPEN_READONLY) reads tables b (kv_btree) and l (kv_log), to
** which the parent writes rows i and -i in one transaction each, until
** both hold 2*<rows> rows (10 s at most); every snapshot of a table must
** hold both rows of a pair or neither, and a write must fail with
** SQLITE_READONLY. */
static int mpReadOnly(char **argv){
  sqlite3 *db = 0, *dbFirst = 0;
  int64_t iEnd = mpNowMs() + 10000;
  int nWant = 2*atoi(argv[3]), rc, nDone = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0);
  if( atoi(argv[2]) ){
    char *zUri = sqlite3_mprintf("file:%s?mode=ro", argv[1]);
    rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
    sqlite3_free(zUri);
  }else{
    rc = sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, 0);
  }
  sqlite3_close(dbFirst);
  if( rc ) return 2;
  sqlite3_exec(db, "PRAGMA busy_timeout=5000", 0, 0, 0);
  while( mpNowMs()<iEnd && nDone<2 ){
    static const char *azTab[] = { "b", "l" };
    int i;
    for(nDone=0, i=0; i<2; i++){
      char *zSql = sqlite3_mprintf("SELECT count(*)*1000000 + sum(key) "
                                   "FROM %s", azTab[i]);
      sqlite3_int64 v = mpInt(db, zSql, &rc);
      sqlite3_free(zSql);
      if( rc ){
        fprintf(stderr, "roread: %s\n", sqlite3_errmsg(db));
        return 5;
      }
      if( v%1000000!=0 || (v/1000000)%2!=0 ){
        fprintf(stderr, "roread: table %s: %lld rows, keys sum to %lld\n",
                azTab[i], (long long)(v/1000000), (long long)(v%1000000));
        return 7;
      }
      if( v/1000000>=nWant ) nDone++;
    }
  }
  rc = mpExec(db, "INSERT INTO l VALUES(0, 'no')");
  if( (rc & 0xff)!=SQLITE_READONLY ){
    fprintf(stderr, "roread: a write gave %d: %s\n", rc, sqlite3_errmsg(db));
    return 8;
  }
  sqlite3_close(db);
  return nDone==2 ? 0 : 6;
}

int depot_test_child(int argc, char **argv){
  if( argc==4 && strcmp(argv[0], "roread")==0 ) return mpReadOnly(argv);
  if( argc==5 && strcmp(argv[0], "bank")==0 ) return mpBank(argv);
  if( argc==3 && strcmp(argv[0], "audit")==0 ) return mpAudit(argv);
  if( (argc==3 || argc==4)
   && (strcmp(argv[0], "exec")==0 || strcmp(argv[0], "execq")==0) ){
    return mpExecChild(argc, argv);
  }
  if( argc==5 && strcmp(argv[0], "fill")==0 ) return mpFill(argv);
  if( argc==3 && strcmp(argv[0], "idle")==0 ) return mpIdle(argv);
  if( argc==5 && strcmp(argv[0], "ttl")==0 ) return mpTtl(argv);
  if( argc==3 && strcmp(argv[0], "prepkill")==0 ) return mpPrepKill(argv);
  return 2;
}

/* ---------------------------------------------------------- helpers --- */

/* Run child mode zMode (exec, execq) on zDb with zSql and wait: its exit
** status. */
static int mpRunMode(const char *zMode, const char *zDb, const char *zSql){
  const char *azArg[] = { zMode, zDb, zSql, 0 };
  int st = 0;
  pid_t pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static int mpRun(const char *zDb, const char *zSql){
  return mpRunMode("exec", zDb, zSql);
}

static pid_t mpSpawnBank(const char *zDb, int id, int ms, const char *zDir){
  char zId[16], zMs[16];
  char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, id);
  const char *azArg[] = { "bank", zDb, zId, zMs, zAck, 0 };
  pid_t pid;
  snprintf(zId, sizeof(zId), "%d", id);
  snprintf(zMs, sizeof(zMs), "%d", ms);
  pid = th_spawn(azArg);
  sqlite3_free(zAck);
  return pid;
}

/* Every id in the ack file of writer id is a row of tlog; returns how
** many there were. */
static int mpCheckAcks(sqlite3 *db, const char *zDir, int id){
  char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, id);
  FILE *f = fopen(zAck, "r");
  char zLine[64];
  int n = 0;
  sqlite3_free(zAck);
  if( f==0 ) return 0;
  while( fgets(zLine, sizeof(zLine), f) ){
    long long tid = atoll(zLine);
    if( tid==0 ) continue;              /* a line cut by the kill */
    ck_assert_msg(th_intf(db, "SELECT count(*) FROM tlog WHERE key=%lld",
                          tid)==1, "acknowledged transfer %lld is lost", tid);
    n++;
  }
  fclose(f);
  return n;
}

/* ------------------------------------------------------------- bank --- */

/* The bank over tables of type zType (kv_btree, kv_log). */
static void mpBankTest(const char *zType){
  char *zDir = th_tmpdir(zType);
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int msRun = zIters && atoi(zIters)>0 ? atoi(zIters)*1000 : 3000;
  pid_t aPid[MP_WRITERS], pidAudit;
  int aId[MP_WRITERS];
  int nId = 0, i, st, nKill = 0, nAck = 0;
  int64_t iStart, iEnd;
  unsigned int seed = (unsigned int)time(0);
  const char *azAudit[4];
  char zMs[16];
  sqlite3 *db = th_open(zDb);
  th_execf(db, "CREATE VIRTUAL TABLE acct USING %s;"
               "CREATE VIRTUAL TABLE tlog USING %s", zType, zType);
  for(i=0; i<MP_ACCOUNTS; i++){
    th_execf(db, "INSERT INTO acct VALUES(%d, %d)", i, MP_START);
  }
  sqlite3_close(db);

  iStart = mpNowMs();
  iEnd = iStart + msRun;
  for(i=0; i<MP_WRITERS; i++){
    aId[i] = ++nId;
    aPid[i] = mpSpawnBank(zDb, aId[i], msRun, zDir);
  }
  snprintf(zMs, sizeof(zMs), "%d", msRun);
  azAudit[0] = "audit"; azAudit[1] = zDb; azAudit[2] = zMs; azAudit[3] = 0;
  pidAudit = th_spawn(azAudit);

  /* Kill a random writer now and then; a new one takes its place. */
  while( mpNowMs() < iEnd - 400 ){
    struct timespec ts;
    int w = rand_r(&seed)%MP_WRITERS;
    ts.tv_sec = 0;
    ts.tv_nsec = (200 + rand_r(&seed)%400)*1000000L;
    nanosleep(&ts, 0);
    if( mpNowMs() >= iEnd - 400 ) break;
    kill(aPid[w], SIGKILL);
    ck_assert_int_eq(waitpid(aPid[w], &st, 0), aPid[w]);
    ck_assert_msg(WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st)==0),
                  "writer %d status %d", aId[w], st);
    nKill++;
    aId[w] = ++nId;
    aPid[w] = mpSpawnBank(zDb, aId[w], (int)(iEnd - mpNowMs()), zDir);
  }
  for(i=0; i<MP_WRITERS; i++){
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert_msg(WIFEXITED(st) && (WEXITSTATUS(st)==0
                                    || WEXITSTATUS(st)==6),
                  "writer %d status %d", aId[i], st);
  }
  ck_assert_int_eq(waitpid(pidAudit, &st, 0), pidAudit);
  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"),
                   MP_ACCOUNTS*MP_START);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "audit status %d", st);
  ck_assert_int_gt(nKill, 0);

  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"),
                   MP_ACCOUNTS*MP_START);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM acct"), MP_ACCOUNTS);
  for(i=1; i<=nId; i++) nAck += mpCheckAcks(db, zDir, i);
  ck_assert_int_gt(nAck, 0);
  ck_assert_int_ge(th_int(db, "SELECT count(*) FROM tlog"), nAck);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

START_TEST(test_kvmp_bank_survives_sigkill){
  mpBankTest("kv_btree");
}
END_TEST

/* ---------------------------------------------- two processes, rules --- */

/* A process whose transaction read a key that another process changed
** since fails its COMMIT with SQLITE_BUSY_SNAPSHOT naming the key; one
** that read nothing stale commits. */
static void mpConflictTest(const char *zType){
  char *zDir = th_tmpdir("kvmp-conflict");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  char *zErr = 0;
  int rc;
  th_execf(db, "CREATE VIRTUAL TABLE acct USING %s;"
               "INSERT INTO acct VALUES('alice', 100), ('bob', 50)", zType);
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"),
                   100);
  ck_assert_int_eq(mpRun(zDb, "UPDATE acct SET value=70 WHERE key='alice'"),
                   0);
  /* this snapshot still reads the old value ... */
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"),
                   100);
  th_exec(db, "UPDATE acct SET value=value+1 WHERE key='alice'");
  rc = th_try(db, "COMMIT", &zErr);
  ck_assert_int_eq(rc, SQLITE_BUSY);
  ck_assert_int_eq(sqlite3_extended_errcode(db), SQLITE_BUSY_SNAPSHOT);
  ck_assert_msg(zErr && strstr(zErr, "'alice'"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  th_try(db, "ROLLBACK", 0);
  /* ... a new one reads the other process's commit, and commits */
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"),
                   70);
  th_exec(db, "UPDATE acct SET value=value+1 WHERE key='bob'");
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE x(v CHECK(v=51));"
                              "INSERT INTO x SELECT value FROM acct "
                              "WHERE key='bob'"), 0);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

START_TEST(test_kvmp_conflict_with_another_process){
  mpConflictTest("kv_btree");
}
END_TEST

/* The key-version protocol sees another process's change: a versioned
** prepare with the version read before it conflicts. */
static void mpVersionTest(const char *zType){
  char *zDir = th_tmpdir("kvmp-version");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  sqlite3 *db = th_open(zDb);
  char *zVer, *zErr = 0;
  int rc;
  th_execf(db, "CREATE VIRTUAL TABLE acct USING %s;"
               "INSERT INTO acct VALUES('alice', 100)", zType);
  zVer = th_textf(db, "SELECT version FROM kv_query_with_version('acct', "
                  "'alice', '%q')", zStore);
  ck_assert_int_eq(mpRun(zDb, "UPDATE acct SET value=70 WHERE key='alice'"),
                   0);
  th_execf(db, "SELECT kv_begin('%q')", zStore);
  th_exec(db, "SELECT kv_put(1, 'acct', 'alice', 71)");
  rc = th_tryf(db, &zErr, "SELECT kv_prepare_with_version(1, "
               "'[{\"table\":\"acct\",\"key\":\"alice\",\"version\":\"%s\"}]')",
               zVer);
  ck_assert_msg(rc==SQLITE_BUSY, "%d %s", rc, zErr ? zErr : "");
  ck_assert_int_eq(sqlite3_extended_errcode(db), SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_conflicts(1) "
                              "WHERE kind='version_mismatch'"), 1);
  sqlite3_free(zErr);
  sqlite3_free(zVer);
  sqlite3_close(db);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

START_TEST(test_kvmp_version_protocol_sees_other_process){
  mpVersionTest("kv_btree");
}
END_TEST

/* The sqlite3 shell (loading the module) reads a KV table that this
** process keeps open and writes, and sees each of its commits. */
static void mpShellTestEx(const char *zType, const char *zFlags){
  const char *zModule = th_module_path();
  char *zDir = th_tmpdir("kvmp-shell");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db;
  int i;
  if( zModule==0 || access("/usr/bin/sqlite3", X_OK)!=0 ){
    sqlite3_free(zDb);
    sqlite3_free(zDir);
    return;                           /* no shell or module here */
  }
  db = th_open(zDb);
  th_execf(db, "CREATE VIRTUAL TABLE t USING %s;"
               "INSERT INTO t VALUES(1, 'one')", zType);
  for(i=2; i<=4; i++){
    /* a sanitizer build's module needs its runtime loaded first */
    const char *zSan = getenv("DEPOT_SANITIZER");
    int bPre = zSan && (strcmp(zSan, "asan")==0 || strcmp(zSan, "tsan")==0);
    char *zCmd = sqlite3_mprintf("%s%s%s/usr/bin/sqlite3 %s'%s' '.load %s' "
        "'SELECT count(*), max(key) FROM t' 2>&1",
        bPre ? "LD_PRELOAD=$(${DEPOT_CC:-cc} -print-file-name=lib" : "",
        bPre ? zSan : "",
        bPre ? ".so) ASAN_OPTIONS=detect_leaks=0 " : "", zFlags, zDb,
        zModule);
    char zOut[256];
    FILE *p = popen(zCmd, "r");
    size_t n;
    char zWant[32];
    ck_assert_ptr_nonnull(p);
    n = fread(zOut, 1, sizeof(zOut)-1, p);
    zOut[n] = 0;
    pclose(p);
    snprintf(zWant, sizeof(zWant), "%d|%d\n", i-1, i-1);
    ck_assert_msg(strcmp(zOut, zWant)==0, "shell said: %s (want %s)", zOut,
                  zWant);
    th_execf(db, "INSERT INTO t VALUES(%d, 'more')", i);
    sqlite3_free(zCmd);
  }
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

static void mpShellTest(const char *zType){
  mpShellTestEx(zType, "");
}

START_TEST(test_kvmp_sqlite3_shell_reads_while_app_writes){
  mpShellTest("kv_btree");
}
END_TEST

/* A store with a kv_memory table with persistence=1 stays with one
** process: another gives up with SQLITE_BUSY saying why; once the first
** closes it, it opens. */
START_TEST(test_kvmp_unshareable_store_stays_with_one_process){
  char *zDir = th_tmpdir("kvmp-mem");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE lg USING kv_memory(persistence=1);"
              "INSERT INTO lg VALUES(1, 'one')");
  ck_assert_int_eq(mpRunMode("execq", zDb, "SELECT count(*) FROM lg"), 5);
  sqlite3_close(db);
  ck_assert_int_eq(mpRun(zDb, "SELECT 1/(count(*)=1) FROM lg"), 0);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------ background work --- */

#define MP_SEGMENT 8192              /* small root WAL segments */

/* fill <db> <id> <ms> <ack file>: autocommit inserts of 300-byte rows
** into table fill (keys id*10^7+n) on 8 KB WAL segments until the time
** is up; each key is appended to the ack file once its INSERT returned
** OK. */
static int mpFill(char **argv){
  sqlite3 *db;
  int id = atoi(argv[2]);
  int64_t iEnd;
  int fd = open(argv[4], O_WRONLY|O_CREAT|O_APPEND, 0644);
  int n = 0, nOk = 0;
  kv_engine_test_wal_config(MP_SEGMENT, 0);
  db = mpChildOpen(argv[1]);
  iEnd = mpNowMs() + atoi(argv[3]);
  if( fd<0 ) return 3;
  while( mpNowMs()<iEnd ){
    sqlite3_int64 key = (sqlite3_int64)id*10000000 + (++n);
    char zSql[120];
    int rc;
    sqlite3_snprintf(sizeof(zSql), zSql,
        "INSERT INTO fill VALUES(%lld, randomblob(300))", key);
    rc = mpExec(db, zSql);
    if( rc==SQLITE_OK ){
      char zLine[32];
      int nLine = snprintf(zLine, sizeof(zLine), "%lld\n", key);
      if( write(fd, zLine, nLine)!=nLine ) return 4;
      nOk++;
    }else if( (sqlite3_extended_errcode(db) & 0xff)!=SQLITE_BUSY ){
      fprintf(stderr, "fill %d: %s\n", id, sqlite3_errmsg(db));
      return 5;
    }
  }
  close(fd);
  sqlite3_close(db);
  return nOk>0 ? 0 : 6;
}

/* idle <db> <ms>: opens the store, reads once, then runs no transaction
** until the time is up (its store thread alone keeps it caught up). */
static int mpIdle(char **argv){
  sqlite3 *db;
  int rc;
  kv_engine_test_wal_config(MP_SEGMENT, 0);
  db = mpChildOpen(argv[1]);
  mpInt(db, "SELECT count(*) FROM fill", &rc);
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "idle: %s\n", sqlite3_errmsg(db));
    return 5;
  }
  usleep((useconds_t)atoi(argv[2])*1000);
  sqlite3_close(db);
  return 0;
}

static pid_t mpSpawnFill(const char *zDb, int id, int ms, const char *zDir){
  char zId[16], zMs[16];
  char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, id);
  const char *azArg[] = { "fill", zDb, zId, zMs, zAck, 0 };
  pid_t pid;
  snprintf(zId, sizeof(zId), "%d", id);
  snprintf(zMs, sizeof(zMs), "%d", ms);
  pid = th_spawn(azArg);
  sqlite3_free(zAck);
  return pid;
}

/* Lines in the ack file of writer id. */
static int mpAckCount(const char *zDir, int id){
  char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, id);
  FILE *f = fopen(zAck, "r");
  char zLine[64];
  int n = 0;
  sqlite3_free(zAck);
  if( f==0 ) return 0;
  while( fgets(zLine, sizeof(zLine), f) ) n++;
  fclose(f);
  return n;
}

/* Wait (up to 20 s) until writer id acknowledged at least n rows. */
static void mpWaitAcks(const char *zDir, int id, int n){
  int64_t iEnd = mpNowMs() + 20000;
  while( mpAckCount(zDir, id)<n ){
    ck_assert_msg(mpNowMs()<iEnd, "writer %d acknowledged fewer than %d "
                  "rows in 20 s", id, n);
    usleep(10000);
  }
}

/* The live segments of the store's root WAL: how many, and the lowest
** and highest numbers. */
static int mpSegments(const char *zStore, unsigned long long *pLo,
                      unsigned long long *pHi){
  char *zCmd = sqlite3_mprintf("ls '%s/wal'", zStore);
  FILE *p = popen(zCmd, "r");
  char zLine[128];
  int n = 0;
  *pLo = 0; *pHi = 0;
  ck_assert_ptr_nonnull(p);
  while( fgets(zLine, sizeof(zLine), p) ){
    unsigned long long v;
    if( strstr(zLine, ".log")==0 || strstr(zLine, ".bak") ) continue;
    v = strtoull(zLine, 0, 10);
    if( n==0 || v<*pLo ) *pLo = v;
    if( v>*pHi ) *pHi = v;
    n++;
  }
  pclose(p);
  sqlite3_free(zCmd);
  return n;
}

/* Rows of every table of the kv_btree data file, read with plain SQLite
** (not through the store: nothing is replayed). */
static int mpDataFileRows(const char *zStore){
  char *zPath = sqlite3_mprintf("%s/kv_btree.db", zStore);
  sqlite3 *db = 0;
  sqlite3_stmt *p = 0;
  int n = 0;
  ck_assert_int_eq(sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READONLY, 0), 0);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_schema "
      "WHERE type='table' AND name GLOB 't[0-9]*'", -1, &p, 0), 0);
  while( sqlite3_step(p)==SQLITE_ROW ){
    char *zSql = sqlite3_mprintf("SELECT count(*) FROM \"%w\"",
                                 (const char*)sqlite3_column_text(p, 0));
    int rc;
    n += (int)mpInt(db, zSql, &rc);
    ck_assert_int_eq(rc, SQLITE_OK);
    sqlite3_free(zSql);
  }
  sqlite3_finalize(p);
  sqlite3_close(db);
  sqlite3_free(zPath);
  return n;
}

/* Every key in writer id's ack file is a row of fill; how many. */
static int mpCheckFillAcks(sqlite3 *db, const char *zDir, int id){
  char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, id);
  FILE *f = fopen(zAck, "r");
  char zLine[64];
  int n = 0;
  sqlite3_free(zAck);
  if( f==0 ) return 0;
  while( fgets(zLine, sizeof(zLine), f) ){
    long long key = atoll(zLine);
    if( key==0 ) continue;              /* a line cut by the kill */
    ck_assert_msg(th_intf(db, "SELECT count(*) FROM fill WHERE key=%lld",
                          key)==1, "acknowledged row %lld is lost", key);
    n++;
  }
  fclose(f);
  return n;
}

/* The process that runs the store's background work (the first writer,
** which turned the store shared) is SIGKILLed: the other takes the work
** over and retires the WAL segments written since (then it is killed
** too); the data file holds every row (read with plain SQLite, before
** any replay), and no acknowledged row of either process is lost. */
START_TEST(test_kvmp_owner_killed_work_handed_over){
  char *zDir = th_tmpdir("kvmp-owner");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  unsigned long long lo, hi, loKill, hiKill;
  pid_t pidA, pidB;
  int st, nSeg, nAck = 0;
  int64_t iEnd;
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE fill USING kv_btree");
  sqlite3_close(db);

  pidA = mpSpawnFill(zDb, 1, 600000, zDir);
  mpWaitAcks(zDir, 1, 20);
  pidB = mpSpawnFill(zDb, 2, 600000, zDir);   /* joins: A turns shared */
  mpWaitAcks(zDir, 2, 20);
  usleep(300000);
  kill(pidA, SIGKILL);
  ck_assert_int_eq(waitpid(pidA, &st, 0), pidA);
  ck_assert(WIFSIGNALED(st));
  mpSegments(zStore, &loKill, &hiKill);
  /* B alone writes on; only it can retire anything now */
  iEnd = mpNowMs() + 20000;
  do{
    usleep(50000);
    nSeg = mpSegments(zStore, &lo, &hi);
  }while( mpNowMs()<iEnd && (hi<hiKill+6 || lo<=hiKill || nSeg>10) );
  kill(pidB, SIGKILL);
  ck_assert_int_eq(waitpid(pidB, &st, 0), pidB);
  ck_assert(WIFSIGNALED(st));
  ck_assert_msg(hi>=hiKill+6, "B wrote segments %llu..%llu only", hiKill, hi);
  ck_assert_msg(lo>hiKill, "segments from %llu on are live (%llu..%llu at "
                "the kill): none retired after it", lo, loKill, hiKill);
  ck_assert_msg(nSeg<=10, "%d live segments (%llu..%llu)", nSeg, lo, hi);

  nAck = mpAckCount(zDir, 1) + mpAckCount(zDir, 2);
  ck_assert_int_ge(mpDataFileRows(zStore), nAck-2);   /* cut lines */
  db = th_open(zDb);
  ck_assert_int_gt(mpCheckFillAcks(db, zDir, 1), 0);
  ck_assert_int_gt(mpCheckFillAcks(db, zDir, 2), 0);
  sqlite3_close(db);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* -------------------------------------------- kv_log, kv_memory --- */

/* The bank over kv_log tables, whose log files roll every few KiB (each
** process's appends follow the others' across files). */
START_TEST(test_kvmp_log_bank_survives_sigkill){
  setenv("KVMP_LOG_FILE_SIZE", "4096", 1);
  mpBankTest("kv_log");
  unsetenv("KVMP_LOG_FILE_SIZE");
}
END_TEST

START_TEST(test_kvmp_log_conflict_with_another_process){
  mpConflictTest("kv_log");
}
END_TEST

START_TEST(test_kvmp_log_version_protocol_sees_other_process){
  mpVersionTest("kv_log");
}
END_TEST

START_TEST(test_kvmp_log_sqlite3_shell_reads_while_app_writes){
  mpShellTest("kv_log");
}
END_TEST

/* Two processes take turns appending to one kv_log table, across rolls of
** its log file: each reads (and deletes) rows of the other, scans
** included, and the store opened alone afterwards holds them all. */
START_TEST(test_kvmp_log_appends_follow_across_rolls){
  char *zDir = th_tmpdir("kvmp-logroll");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db;
  int i;
  kv_log_test_file_size(2048);
  setenv("KVMP_LOG_FILE_SIZE", "2048", 1);
  db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE lg USING kv_log;"
              "INSERT INTO lg VALUES(0, 'zero')");
  for(i=1; i<=20; i++){
    char *zSql = sqlite3_mprintf("CREATE TEMP TABLE x(v CHECK(v=%d));"
        "INSERT INTO x SELECT count(*) FROM lg;"
        "INSERT INTO lg VALUES(%d, printf('%%.200c', 'a'));"
        "DELETE FROM lg WHERE key=%d", 2*i-1, 100+i, 2*i-2);
    ck_assert_int_eq(mpRun(zDb, zSql), 0);
    sqlite3_free(zSql);
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM lg"), 2*i-1);
    ck_assert_int_eq(th_intf(db, "SELECT length(value) FROM lg "
                                 "WHERE key=%d", 100+i), 200);
    th_execf(db, "INSERT INTO lg VALUES(%d, 'mine')", 2*i-1);
    th_execf(db, "INSERT INTO lg VALUES(%d, 'mine')", 2*i);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM lg WHERE key<100"), 21);
  sqlite3_close(db);
  unsetenv("KVMP_LOG_FILE_SIZE");
  db = th_open(zDb);                      /* alone again: replay, check */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM lg"), 41);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM lg WHERE key>100"), 20);
  sqlite3_close(db);
  kv_log_test_file_size(0);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A process finding the store held by one with a kv_memory table with
** persistence=1 fails at once (not after the 10 s join wait), naming the
** table and the holder's pid. */
START_TEST(test_kvmp_persistent_memory_refused_at_once){
  char *zDir = th_tmpdir("kvmp-memref");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zMsg = sqlite3_mprintf("%s/msg", zDir);
  char *zPid = sqlite3_mprintf("(pid %ld)", (long)getpid());
  const char *azArg[] = { "exec", zDb, "SELECT count(*) FROM pm", zMsg, 0 };
  sqlite3 *db = th_open(zDb);
  char zOut[1024];
  FILE *f;
  size_t n;
  int st = 0;
  int64_t iStart;
  pid_t pid;
  th_exec(db, "CREATE VIRTUAL TABLE pm USING kv_memory(persistence=1);"
              "INSERT INTO pm VALUES(1, 'one')");
  iStart = mpNowMs();
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==5);
  ck_assert_msg(mpNowMs()-iStart < 5000, "refused after %lld ms",
                (long long)(mpNowMs()-iStart));
  f = fopen(zMsg, "r");
  ck_assert_ptr_nonnull(f);
  n = fread(zOut, 1, sizeof(zOut)-1, f);
  zOut[n] = 0;
  fclose(f);
  ck_assert_msg(strstr(zOut, "kv_memory table pm with persistence=1")
                && strstr(zOut, zPid), "%s", zOut);
  /* the table is still the holder's, and the refusal changed nothing */
  th_exec(db, "INSERT INTO pm VALUES(2, 'two')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM pm"), 2);
  sqlite3_close(db);
  ck_assert_int_eq(mpRun(zDb, "SELECT 1/(count(*)=2) FROM pm"), 0);
  sqlite3_free(zPid);
  sqlite3_free(zMsg);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------ read-only --- */

/* Every file under zDir (but SQLite's shared-memory index of the kv_btree
** data file, which any reader of a WAL database writes) as "path size
** mtime inode" lines. */
static void mpListFiles(const char *zDir, KvBuf *pOut){
  char *zCmd = sqlite3_mprintf("cd '%s' && find . -type f ! -name '*-shm' "
      "-printf '%%p %%s %%T@ %%i\n' | sort", zDir);
  char aBuf[4096];
  size_t n;
  FILE *p = popen(zCmd, "r");
  ck_assert_ptr_nonnull(p);
  pOut->n = 0;
  while( (n = fread(aBuf, 1, sizeof(aBuf), p))>0 ){
    ck_assert_int_eq(kv_buf_append(pOut, aBuf, (int)n), SQLITE_OK);
  }
  pclose(p);
  sqlite3_free(zCmd);
}

static int mpRunReadOnly(const char *zDb, int bUri, int nWant){
  char zUri[4], zWant[16];
  const char *azArg[] = { "roread", zDb, zUri, zWant, 0 };
  int st = 0;
  pid_t pid;
  snprintf(zUri, sizeof(zUri), "%d", bUri);
  snprintf(zWant, sizeof(zWant), "%d", nWant);
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* A read-only process (URI mode=ro, then SQLITE_OPEN_READONLY as the
** shell's -readonly) reads a store another process has open and writes
** no file of it: every file keeps its size, time and inode, and none is
** created. */
START_TEST(test_kvmp_readonly_open_writes_nothing){
  char *zDir = th_tmpdir("kvmp-ro");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  KvBuf before, after;
  sqlite3 *db = th_open(zDb);
  int i;
  memset(&before, 0, sizeof(before));
  memset(&after, 0, sizeof(after));
  th_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree;"
              "CREATE VIRTUAL TABLE l USING kv_log");
  for(i=1; i<=5; i++){
    th_execf(db, "INSERT INTO b VALUES(%d, 'x'), (%d, 'x');"
                 "INSERT INTO l VALUES(%d, 'x'), (%d, 'x')", i, -i, i, -i);
  }
  /* the first reader makes the holder share the store (the holder writes
  ** its shared header then); later ones change nothing */
  ck_assert_int_eq(mpRunReadOnly(zDb, 1, 5), 0);
  usleep(200000);                       /* collectors settle */
  mpListFiles(zStore, &before);
  ck_assert_int_gt(before.n, 0);
  usleep(20000);                        /* a write would show in mtimes */
  ck_assert_int_eq(mpRunReadOnly(zDb, 1, 5), 0);
  ck_assert_int_eq(mpRunReadOnly(zDb, 0, 5), 0);
  mpListFiles(zStore, &after);
  ck_assert_msg(after.n==before.n && memcmp(after.a, before.a, after.n)==0,
                "before:\n%.*s\nafter:\n%.*s", before.n, before.a,
                after.n, after.a);
  sqlite3_close(db);
  sqlite3_free(before.a);
  sqlite3_free(after.a);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A read-only process reads whole commits while another process commits
** pairs of rows to a kv_btree and a kv_log table. */
START_TEST(test_kvmp_readonly_reads_while_another_writes){
  char *zDir = th_tmpdir("kvmp-rowrite");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char zWant[16];
  const char *azArg[] = { "roread", zDb, "0", zWant, 0 };
  sqlite3 *db = th_open(zDb);
  int i, st = 0;
  pid_t pid;
  th_exec(db, "PRAGMA busy_timeout=5000;"
              "CREATE VIRTUAL TABLE b USING kv_btree;"
              "CREATE VIRTUAL TABLE l USING kv_log");
  snprintf(zWant, sizeof(zWant), "%d", 300);
  pid = th_spawn(azArg);
  for(i=1; i<=300; i++){
    char *zSql = sqlite3_mprintf("BEGIN; INSERT INTO b VALUES(%d, 'x'), "
        "(%d, 'x'); INSERT INTO l VALUES(%d, 'x'), (%d, 'x'); COMMIT",
        i, -i, i, -i);
    int rc, nTry = 0;
    while( (rc = sqlite3_exec(db, zSql, 0, 0, 0))==SQLITE_BUSY && nTry++<50 ){
      sqlite3_exec(db, "ROLLBACK", 0, 0, 0);  /* the store turning shared */
      usleep(20000);
    }
    ck_assert_msg(rc==SQLITE_OK, "%s: %s", zSql, sqlite3_errmsg(db));
    sqlite3_free(zSql);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "reader status %d", st);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A long shared run, two writers and a process that opened the store and
** then runs no transaction: the root WAL keeps a handful of segments
** (those written in the last few retirement periods), not all it ever
** had.  The run lasts until 40 segments were written (at most 25 s), or
** DEPOT_TORTURE_ITERS seconds; then every process is killed. */
START_TEST(test_kvmp_wal_bounded_in_long_shared_run){
  char *zDir = th_tmpdir("kvmp-bounded");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int msRun = zIters && atoi(zIters)>0 ? atoi(zIters)*1000 : 0;
  unsigned long long lo, hi = 0;
  const char *azIdle[4];
  pid_t aPid[3];
  int st, nMax = 0, nSeg, i;
  int64_t iStart, iEnd;
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE fill USING kv_btree");
  sqlite3_close(db);

  azIdle[0] = "idle"; azIdle[1] = zDb; azIdle[2] = "600000"; azIdle[3] = 0;
  aPid[0] = th_spawn(azIdle);
  aPid[1] = mpSpawnFill(zDb, 1, 600000, zDir);
  aPid[2] = mpSpawnFill(zDb, 2, 600000, zDir);
  mpWaitAcks(zDir, 1, 1);
  mpWaitAcks(zDir, 2, 1);
  iStart = mpNowMs();
  iEnd = iStart + (msRun>25000 ? msRun : 25000);
  while( mpNowMs()<iEnd && (hi<40 || mpNowMs()<iStart+msRun) ){
    nSeg = mpSegments(zStore, &lo, &hi);
    if( nSeg>nMax ) nMax = nSeg;
    usleep(50000);
  }
  for(i=0; i<3; i++){
    kill(aPid[i], SIGKILL);
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert_msg(WIFSIGNALED(st), "process %d ended early, status %d", i,
                  st);
  }
  ck_assert_msg(hi>=24, "only %llu segments written", hi);
  /* bounded: the owner retires behind the writers (every 100 ms, so a
  ** loaded machine lets a few more pile up), never all of them */
  ck_assert_msg(nMax<=16 || (unsigned long long)nMax*3<=hi,
                "up to %d live segments of %llu", nMax, hi);

  db = th_open(zDb);
  ck_assert_int_gt(mpCheckFillAcks(db, zDir, 1), 0);
  ck_assert_int_gt(mpCheckFillAcks(db, zDir, 2), 0);
  sqlite3_close(db);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* ttl <db> <sweep interval ms> <rows> <ms>: with sweeper passes every
** interval, writes rows rows into table s (ttl_ms=), then runs no
** transaction until the time is up. */
static int mpTtl(char **argv){
  sqlite3 *db;
  int i, n = atoi(argv[3]);
  kv_ttl_test_interval(atoi(argv[2]));
  db = mpChildOpen(argv[1]);
  if( mpExec(db, "SELECT count(*) FROM s") ){
    fprintf(stderr, "ttl: %s\n", sqlite3_errmsg(db));
    return 5;
  }
  for(i=0; i<n; i++){
    char zSql[80];
    sqlite3_snprintf(sizeof(zSql), zSql, "INSERT INTO s VALUES(%d, 'x')",
                     (int)getpid()*1000+i);
    if( mpExec(db, zSql) ){
      fprintf(stderr, "ttl: %s\n", sqlite3_errmsg(db));
      return 5;
    }
  }
  usleep((useconds_t)atoi(argv[4])*1000);
  sqlite3_close(db);
  return 0;
}

/* TTL sweeps of a shared store run in one process: the first sweeper to
** try (A, every 50 ms) takes them; B's sweeper (every 1 s) finds them
** taken.  A is SIGKILLed: B's sweeper takes over and removes the rows B
** wrote, which expired meanwhile (counted in the data file, where expired
** rows stay until swept). */
START_TEST(test_kvmp_ttl_sweeps_handed_over){
  char *zDir = th_tmpdir("kvmp-ttl");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  const char *azA[] = { "ttl", 0, "50", "0", "600000", 0 };
  const char *azB[] = { "ttl", 0, "1000", "40", "600000", 0 };
  pid_t pidA, pidB;
  int st, n = -1;
  int64_t iEnd;
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE s USING kv_btree(ttl_ms=200)");
  sqlite3_close(db);
  azA[1] = azB[1] = zDb;
  pidA = th_spawn(azA);
  usleep(300000);                      /* A opened the store alone */
  pidB = th_spawn(azB);                /* joins; A's sweeper takes sweeps */
  usleep(600000);
  kill(pidA, SIGKILL);
  ck_assert_int_eq(waitpid(pidA, &st, 0), pidA);
  iEnd = mpNowMs() + 15000;
  while( mpNowMs()<iEnd ){
    n = mpDataFileRows(zStore);
    if( n==0 ) break;
    usleep(100000);
  }
  kill(pidB, SIGKILL);
  ck_assert_int_eq(waitpid(pidB, &st, 0), pidB);
  ck_assert_msg(WIFSIGNALED(st), "B ended early, status %d", st);
  ck_assert_msg(n==0, "%d rows and index entries of s are still stored", n);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* The sqlite3 shell with -readonly reads a kv_log table a process writes. */
START_TEST(test_kvmp_readonly_shell_reads_log_while_app_writes){
  mpShellTestEx("kv_log", "-readonly ");
}
END_TEST

/* ------------------------------------- named prepares while shared --- */

/* prepkill <db> <sql>: run zSql (a named prepare), then die by SIGKILL. */
static int mpPrepKill(char **argv){
  sqlite3 *db = mpChildOpen(argv[1]);
  if( mpExec(db, argv[2]) ){
    fprintf(stderr, "prepkill: %s\n", sqlite3_errmsg(db));
    return 5;
  }
  raise(SIGKILL);
  return 6;
}

/* Run zSql in another process; its error message (or "") into zOut. */
static int mpRunMsg(const char *zDb, const char *zDir, const char *zSql,
                    char *zOut, int nOut){
  char *zMsg = sqlite3_mprintf("%s/msg", zDir);
  const char *azArg[] = { "exec", zDb, zSql, zMsg, 0 };
  FILE *f;
  size_t n = 0;
  int st = 0;
  pid_t pid;
  unlink(zMsg);
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  f = fopen(zMsg, "r");
  if( f ){ n = fread(zOut, 1, nOut-1, f); fclose(f); }
  zOut[n] = 0;
  sqlite3_free(zMsg);
  return WEXITSTATUS(st);
}

/* kv_prepare(h, zGid) of a new handle that writes key zKey = v. */
static void mpPrepare(sqlite3 *db, const char *zKey, int v, const char *zGid){
  sqlite3_int64 h = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_put(%lld, 'acct', '%s', %d), kv_prepare(%lld, '%s')",
           h, zKey, v, h, zGid);
}

/* A named prepare in one process, seen by another: its keys conflict
** there naming the gid, the other process lists it and commits or rolls
** it back, and a gid taken in one process is taken in the other. */
static void mpGidTest(const char *zType){
  char *zDir = th_tmpdir("kvmp-gid");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  char zOut[1024];
  sqlite3_int64 h;
  int rc;
  th_execf(db, "CREATE VIRTUAL TABLE acct USING %s;"
               "INSERT INTO acct VALUES('alice', 100), ('bob', 50)", zType);
  /* a second process joins: the store is shared from now on */
  ck_assert_int_eq(mpRun(zDb, "SELECT count(*) FROM acct"), 0);
  mpPrepare(db, "alice", 70, "g1");
  /* the other process: a writer of alice fails naming the gid ... */
  rc = mpRunMsg(zDb, zDir, "UPDATE acct SET value=1 WHERE key='alice'",
                zOut, sizeof(zOut));
  ck_assert_int_eq(rc, 5);
  ck_assert_msg(strstr(zOut, "prepared transaction 'g1'"), "%s", zOut);
  /* ... it lists it, and commits it */
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE x(v CHECK(v));"
      "INSERT INTO x SELECT count(*)=1 AND max(gid)='g1' "
      "AND max(keys)=1 FROM kv_prepared()"), 0);
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE x(v CHECK(v));"
      "INSERT INTO x SELECT kv_commit_prepared('g1')=1"), 0);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"),
                   70);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 0);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g1')"), 0);
  th_exec(db, "UPDATE acct SET value=value+1 WHERE key='alice'");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"),
                   71);
  /* rolled back from the other process */
  mpPrepare(db, "bob", 40, "g2");
  ck_assert_int_eq(mpRun(zDb, "SELECT kv_rollback_prepared('g2')"), 0);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='bob'"), 50);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 0);
  rc = th_try(db, "SELECT kv_commit_prepared('g2')", 0);
  ck_assert_int_eq(rc, SQLITE_CONSTRAINT);
  th_exec(db, "UPDATE acct SET value=value+1 WHERE key='bob'");
  /* a gid in doubt in this process is taken in the other, and one
  ** resolved there is taken here */
  mpPrepare(db, "carol", 5, "g3");
  rc = mpRunMsg(zDb, zDir, "SELECT kv_begin(), kv_put(1, 'acct', 'dave', 1),"
                " kv_prepare(1, 'g3')", zOut, sizeof(zOut));
  ck_assert_int_eq(rc, 5);
  ck_assert_msg(strstr(zOut, "'g3' already exists"), "%s", zOut);
  rc = mpRunMsg(zDb, zDir, "SELECT kv_begin(), kv_put(1, 'acct', 'dave', 1),"
                " kv_prepare(1, 'g1')", zOut, sizeof(zOut));
  ck_assert_int_eq(rc, 5);
  ck_assert_msg(strstr(zOut, "'g1' belongs to a transaction"), "%s", zOut);
  /* prepared in the other process, which exits: resolved here */
  ck_assert_int_eq(mpRun(zDb, "SELECT kv_begin(), "
      "kv_put(1, 'acct', 'erin', 9), kv_prepare(1, 'g4')"), 0);
  h = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_put(%lld, 'acct', 'erin', 1)", h);
  rc = th_tryf(db, 0, "SELECT kv_prepare(%lld, 'g5')", h);
  ck_assert_int_eq(rc & 0xff, SQLITE_BUSY);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 2);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g4')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g3')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='erin'"), 9);
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE x(v CHECK(v));"
      "INSERT INTO x SELECT sum(value)=71+51+5+9 FROM acct"), 0);
  sqlite3_close(db);
  /* alone again: nothing in doubt, every commit there */
  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 0);
  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"), 71+51+5+9);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

START_TEST(test_kvmp_gid_prepare_resolve_across_processes){
  mpGidTest("kv_btree");
}
END_TEST

START_TEST(test_kvmp_log_gid_prepare_resolve_across_processes){
  mpGidTest("kv_log");
}
END_TEST

/* A process that prepared under a gid is SIGKILLed: the transaction stays
** in doubt in the other process, which commits one and rolls one back;
** one left in doubt when every process closed the store is there at the
** next open alone, and a process joining later takes it in. */
START_TEST(test_kvmp_gid_preparer_killed){
  char *zDir = th_tmpdir("kvmp-gidkill");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  const char *azA[] = { "prepkill", zDb, "SELECT kv_begin(), "
      "kv_put(1, 'acct', 'alice', 1), kv_prepare(1, 'k1')", 0 };
  const char *azB[] = { "prepkill", zDb, "SELECT kv_begin(), "
      "kv_put(1, 'acct', 'bob', 2), kv_prepare(1, 'k2')", 0 };
  const char *azC[] = { "prepkill", zDb, "SELECT kv_begin(), "
      "kv_put(1, 'acct', 'carol', 3), kv_prepare(1, 'k3')", 0 };
  sqlite3 *db = th_open(zDb);
  int st = 0;
  pid_t pid;
  if( th_under_tsan() ){ sqlite3_close(db); return; }
  th_exec(db, "CREATE VIRTUAL TABLE acct USING kv_btree;"
              "INSERT INTO acct VALUES('alice', 100), ('bob', 50)");
  pid = th_spawn(azA);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL);
  pid = th_spawn(azB);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 2);
  ck_assert_int_ne(th_try(db, "UPDATE acct SET value=0 WHERE key='bob'", 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"),
                   100);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('k1')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_rollback_prepared('k2')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='bob'"), 50);
  /* k3: its process dies, a later process joins and sees it */
  pid = th_spawn(azC);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL);
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE x(v CHECK(v));"
      "INSERT INTO x SELECT count(*)=1 AND max(gid)='k3' FROM kv_prepared()"),
      0);
  sqlite3_close(db);
  /* alone: still in doubt, not lost, not applied */
  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM acct WHERE key='carol'"),
                   0);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('k3')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='carol'"), 3);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A store holding transactions in doubt turns shared at once: the joining
** process lists them, a writer there fails naming the gid, and it commits
** one and rolls the other back. */
START_TEST(test_kvmp_gid_in_doubt_store_turns_shared){
  char *zDir = th_tmpdir("kvmp-gidjoin");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  char zOut[1024];
  th_exec(db, "CREATE VIRTUAL TABLE acct USING kv_btree;"
              "INSERT INTO acct VALUES('alice', 100), ('bob', 50)");
  mpPrepare(db, "alice", 70, "j1");
  sqlite3_close(db);
  db = th_open(zDb);                    /* restored from the WAL alone */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 1);
  mpPrepare(db, "bob", 40, "j2");
  ck_assert_int_eq(mpRunMode("execq", zDb, "CREATE TEMP TABLE x(v CHECK(v));"
      "INSERT INTO x SELECT count(*)=2 AND min(gid)='j1' AND max(gid)='j2' "
      "FROM kv_prepared()"), 0);
  ck_assert_int_eq(mpRunMsg(zDb, zDir, "UPDATE acct SET value=1 "
                            "WHERE key='bob'", zOut, sizeof(zOut)), 5);
  ck_assert_msg(strstr(zOut, "prepared transaction 'j2'"), "%s", zOut);
  ck_assert_int_eq(mpRun(zDb, "SELECT kv_commit_prepared('j1'), "
                              "kv_rollback_prepared('j2')"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 0);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='alice'"),
                   70);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='bob'"), 50);
  sqlite3_close(db);
  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared()"), 0);
  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"), 120);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvmp");
  TCase *tc = tcase_create("processes");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_bank_survives_sigkill);
  tcase_add_test(tc, test_kvmp_conflict_with_another_process);
  tcase_add_test(tc, test_kvmp_version_protocol_sees_other_process);
  tcase_add_test(tc, test_kvmp_sqlite3_shell_reads_while_app_writes);
  tcase_add_test(tc, test_kvmp_unshareable_store_stays_with_one_process);
  suite_add_tcase(s, tc);
  tc = tcase_create("background");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_owner_killed_work_handed_over);
  tcase_add_test(tc, test_kvmp_wal_bounded_in_long_shared_run);
  tcase_add_test(tc, test_kvmp_ttl_sweeps_handed_over);
  suite_add_tcase(s, tc);
  tc = tcase_create("log");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_log_bank_survives_sigkill);
  tcase_add_test(tc, test_kvmp_log_conflict_with_another_process);
  tcase_add_test(tc, test_kvmp_log_version_protocol_sees_other_process);
  tcase_add_test(tc, test_kvmp_log_sqlite3_shell_reads_while_app_writes);
  tcase_add_test(tc, test_kvmp_log_appends_follow_across_rolls);
  tcase_add_test(tc, test_kvmp_persistent_memory_refused_at_once);
  suite_add_tcase(s, tc);
  tc = tcase_create("readonly");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_readonly_open_writes_nothing);
  tcase_add_test(tc, test_kvmp_readonly_reads_while_another_writes);
  tcase_add_test(tc, test_kvmp_readonly_shell_reads_log_while_app_writes);
  suite_add_tcase(s, tc);
  tc = tcase_create("gid");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_gid_prepare_resolve_across_processes);
  tcase_add_test(tc, test_kvmp_log_gid_prepare_resolve_across_processes);
  tcase_add_test(tc, test_kvmp_gid_preparer_killed);
  tcase_add_test(tc, test_kvmp_gid_in_doubt_store_turns_shared);
  suite_add_tcase(s, tc);
  return s;
}
