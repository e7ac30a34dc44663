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
** Case "roalone": read-only processes that have a store to themselves
** (closed, or left by a killed writer with commits only in the root WAL,
** or on a read-only mount) read what a writable open reads and change no
** file; a writer that opens the store meanwhile (in another process or
** the same one) recovers it beside them, and they catch up with it.
** Case "background": the background work of a shared store (WAL
** retirement, TTL sweeps) passes to another process when the one doing
** it is killed, and the WAL stays small over a long shared run.  Case
** "logshared": the same long run over a kv_log table, also with the
** owner SIGKILLed at any point of its retirement.  Case "rolong": a
** read-only process stays open through a long run of bank writers, over
** kv_btree and kv_log tables, and holds none of the WAL back.  Case
** "logcompact": a kv_log table is compacted while shared, by the process
** that runs the background work, with another one appending, with that
** process SIGKILLed at each compaction step, and with a read-only reader
** open throughout.
** DEPOT_TORTURE_ITERS=n makes each bank and the long run last n seconds
** (make torture).
*/
#define _GNU_SOURCE 1  /* F_OFD_SETLK */
#define SQLITE_CORE 1  /* engine headers pull in sqlite3ext.h */
#define DEPOT_TEST 1   /* kv_sql.h's test hooks (libdepot_core has them) */
#include "config.h"
#include "tests/check/harness.h"
#include "ext/kv/kv_test.h"
#include "ext/depot.h"
#include "ext/kv_sql.h"
#include "ext/kv/logstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
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
static int mpRoStateChild(char **argv);
static int mpRoHold(char **argv);
static int mpRoKill(char **argv);
static int mpTtl(char **argv);
static int mpPrepKill(char **argv);
static int mpLcWrite(char **argv);
static int mpLcRead(char **argv);
static int mpLcReadOnly(char **argv);
static int mpLcHold(char **argv);

/* roread <db> <uri 0|1> <rows>: a read-only connection (URI mode=ro, or
** SQLITE_OPEN_READONLY) reads tables b (kv_btree) and l (kv_log), to
** which the parent writes rows i and -i in one transaction each, until
** both hold 2*<rows> rows (60 s at most: a loaded machine stretches the
** writer); every snapshot of a table must hold both rows of a pair or
** neither, and a write must fail with SQLITE_READONLY. */
static int mpReadOnly(char **argv){
  sqlite3 *db = 0, *dbFirst = 0;
  int64_t iEnd = mpNowMs() + 60000;
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

/* roddl <db> <ready file>: a read-only connection of a store another
** process has open reads table a, writes <ready file>, then waits (10 s
** at most) until table nr, which another process creates meanwhile,
** holds 2 rows, and then until it is removed (its reads fail). */
static int mpReadOnlyDdl(char **argv){
  sqlite3 *db = 0, *dbFirst = 0;
  int64_t iEnd = mpNowMs() + 10000;
  char *zUri = sqlite3_mprintf("file:%s?mode=ro", argv[1]);
  int rc, fd, nStep = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0);
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  sqlite3_close(dbFirst);
  if( rc ) return 2;
  sqlite3_exec(db, "PRAGMA busy_timeout=5000", 0, 0, 0);
  if( mpInt(db, "SELECT count(*) FROM a", &rc)<1 || rc ) return 3;
  fd = open(argv[2], O_WRONLY|O_CREAT, 0644);
  if( fd<0 ) return 4;
  close(fd);
  while( mpNowMs()<iEnd && nStep<2 ){
    sqlite3_int64 n = mpInt(db, "SELECT count(*) FROM nr", &rc);
    if( nStep==0 && rc==SQLITE_OK && n==2 ) nStep = 1;
    if( nStep==1 && rc!=SQLITE_OK ) nStep = 2;
    usleep(10000);
  }
  sqlite3_close(db);
  return nStep==2 ? 0 : 6;
}
static int mpSegBank(char **argv);
static int mpRoAudit(char **argv);

int depot_test_child(int argc, char **argv){
  if( argc==5 && strcmp(argv[0], "sbank")==0 ) return mpSegBank(argv);
  if( argc==4 && strcmp(argv[0], "roaudit")==0 ) return mpRoAudit(argv);
  if( argc==4 && strcmp(argv[0], "roread")==0 ) return mpReadOnly(argv);
  if( argc==3 && strcmp(argv[0], "roddl")==0 ) return mpReadOnlyDdl(argv);
  if( argc==5 && strcmp(argv[0], "bank")==0 ) return mpBank(argv);
  if( argc==3 && strcmp(argv[0], "audit")==0 ) return mpAudit(argv);
  if( (argc==3 || argc==4)
   && (strcmp(argv[0], "exec")==0 || strcmp(argv[0], "execq")==0) ){
    return mpExecChild(argc, argv);
  }
  if( argc==5 && strcmp(argv[0], "fill")==0 ) return mpFill(argv);
  if( argc==3 && strcmp(argv[0], "idle")==0 ) return mpIdle(argv);
  if( argc==4 && strcmp(argv[0], "rostate")==0 ) return mpRoStateChild(argv);
  if( argc==4 && strcmp(argv[0], "rohold")==0 ) return mpRoHold(argv);
  if( argc==3 && strcmp(argv[0], "rokill")==0 ) return mpRoKill(argv);
  if( argc==5 && strcmp(argv[0], "ttl")==0 ) return mpTtl(argv);
  if( argc==4 && strcmp(argv[0], "execk")==0 ){
    /* execk <db> <kill point> <sql>: exec, SIGKILLed in a catalog commit */
    const char *azExec[] = { "exec", argv[1], argv[3], 0 };
    kv_engine_test_kill_ddl(atoi(argv[2]));
    return mpExecChild(3, (char**)azExec);
  }
  if( argc==3 && strcmp(argv[0], "prepkill")==0 ) return mpPrepKill(argv);
  if( argc==6 && strcmp(argv[0], "lcw")==0 ) return mpLcWrite(argv);
  if( argc==3 && strcmp(argv[0], "lcread")==0 ) return mpLcRead(argv);
  if( argc==3 && strcmp(argv[0], "lcro")==0 ) return mpLcReadOnly(argv);
  if( argc==3 && strcmp(argv[0], "lchold")==0 ) return mpLcHold(argv);
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

/* A read-only process opens the store while the owner holds READER
** exclusively (byte 7 of LOCK, which it holds while it removes WAL
** segments): the open waits for the segments to go, and reads. */
START_TEST(test_kvmp_readonly_open_waits_for_segment_removal){
  char *zDir = th_tmpdir("kvmp-roretire");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zLock = sqlite3_mprintf("%s/app.db-kv/LOCK", zDir);
  const char *azArg[] = { "roread", zDb, "0", "1", 0 };
  sqlite3 *db = th_open(zDb);
  struct flock fl;
  int fd, st = 0;
  pid_t pid;
  th_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree;"
              "CREATE VIRTUAL TABLE l USING kv_log;"
              "BEGIN; INSERT INTO b VALUES(1, 'x'), (-1, 'x');"
              "INSERT INTO l VALUES(1, 'x'), (-1, 'x'); COMMIT");
  fd = open(zLock, O_RDWR|O_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 7;                      /* ENG_BYTE_READER */
  fl.l_len = 1;
  ck_assert_int_eq(fcntl(fd, F_OFD_SETLK, &fl), 0);
  pid = th_spawn(azArg);
  usleep(300000);
  ck_assert_int_eq(waitpid(pid, &st, WNOHANG), 0);   /* still waiting */
  fl.l_type = F_UNLCK;
  ck_assert_int_eq(fcntl(fd, F_OFD_SETLK, &fl), 0);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "reader status %d", st);
  close(fd);
  sqlite3_close(db);
  sqlite3_free(zLock);
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
  while( mpNowMs()<iEnd
      && (hi<40 || mpNowMs()<iStart+2000 || mpNowMs()<iStart+msRun) ){
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

/* ------------------------------------------- read-only, opened alone --- */

/* Open zDb read-only in a child: URI mode=ro (bUri) or
** SQLITE_OPEN_READONLY; NULL (and a message) when it fails. */
static sqlite3 *mpRoOpen(const char *zDb, int bUri){
  sqlite3 *db = 0, *dbFirst = 0;
  int rc;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0);
  if( bUri ){
    char *zUri = sqlite3_mprintf("file:%s?mode=ro", zDb);
    rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
    sqlite3_free(zUri);
  }else{
    rc = sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READONLY, 0);
  }
  sqlite3_close(dbFirst);
  if( rc ){
    fprintf(stderr, "ro: cannot open %s\n", zDb);
    sqlite3_close(db);
    return 0;
  }
  sqlite3_extended_result_codes(db, 1);
  return db;
}

/* "count|sum of keys" of table zTab on db (a read error: "error: ..."). */
static char *mpRoState(sqlite3 *db, const char *zTab){
  char *zSql = sqlite3_mprintf("SELECT count(*), sum(key), "
                               "sum(length(value)) FROM %s", zTab);
  sqlite3_stmt *p = 0;
  char *zOut;
  int rc = sqlite3_prepare_v2(db, zSql, -1, &p, 0);
  sqlite3_free(zSql);
  if( rc==SQLITE_OK && (rc = sqlite3_step(p))==SQLITE_ROW ){
    zOut = sqlite3_mprintf("%lld|%lld|%lld", sqlite3_column_int64(p, 0),
                           sqlite3_column_int64(p, 1),
                           sqlite3_column_int64(p, 2));
  }else{
    zOut = sqlite3_mprintf("error: %s", sqlite3_errmsg(db));
  }
  sqlite3_finalize(p);
  return zOut;
}

/* rostate <db> <uri 0|1> <out file>: a read-only connection writes the
** state (mpRoState) of tables b and l, one line each, into the out file
** (outside the store), and checks that a write fails with
** SQLITE_READONLY. */
static int mpRoStateChild(char **argv){
  sqlite3 *db = mpRoOpen(argv[1], atoi(argv[2]));
  FILE *f;
  char *zB, *zL;
  int rc;
  if( db==0 ) return 2;
  zB = mpRoState(db, "b");
  zL = mpRoState(db, "l");
  f = fopen(argv[3], "w");
  if( f==0 ) return 3;
  fprintf(f, "%s\n%s\n", zB, zL);
  fclose(f);
  rc = mpExec(db, "INSERT INTO b VALUES(0, 'no')");
  if( (rc & 0xff)!=SQLITE_READONLY ){
    fprintf(stderr, "rostate: a write gave %d: %s\n", rc, sqlite3_errmsg(db));
    return 8;
  }
  sqlite3_free(zB);
  sqlite3_free(zL);
  sqlite3_close(db);
  return 0;
}

/* Wait (up to 30 s) for file zPath to exist. */
static int mpWaitFile(const char *zPath){
  int64_t iEnd = mpNowMs() + 30000;
  while( access(zPath, F_OK)!=0 ){
    if( mpNowMs()>iEnd ) return 0;
    usleep(5000);
  }
  return 1;
}

/* The commits of table b's writer in test_kvmp_roalone_writer_opens_*:
** commit j adds keys 1000+10*j .. 1000+10*j+9.  How many of them a read
** holds (the keys from 1000 on), or -1 when that is not a whole prefix
** of the commits. */
static int mpRoCommits(sqlite3 *db){
  sqlite3_int64 n, j;
  int rc;
  /* one statement: one snapshot (count, and the sum of the keys, mixed) */
  n = mpInt(db, "SELECT count(*)*1000000000 + sum(key) FROM b "
                "WHERE key>=1000", &rc);
  if( rc || n<0 ) return -1;
  j = n/1000000000;
  if( j%10!=0 ) return -1;
  j /= 10;
  return n%1000000000==j*10045 + 100*j*(j+1)/2 ? (int)j : -1;
}

/* rohold <db> <dir> <commits>: a read-only connection, alone with the
** store, reads table b and creates <dir>/ro.ready; then, while a writer
** process opens the store and commits, every read (one statement, or a
** transaction of two) must hold a whole prefix of the writer's commits
** (mpRoCommits), until one holds all of them (30 s at most). */
static int mpRoHold(char **argv){
  sqlite3 *db = mpRoOpen(argv[1], 1);
  char *zReady = sqlite3_mprintf("%s/ro.ready", argv[2]);
  int nWant = atoi(argv[3]), n = 0, i, fd;
  int64_t iEnd = mpNowMs() + 30000;
  if( db==0 ) return 2;
  if( mpRoCommits(db)!=0 ) return 5;
  fd = open(zReady, O_WRONLY|O_CREAT, 0644);
  if( fd<0 ) return 3;
  close(fd);
  for(i=0; n<nWant && mpNowMs()<iEnd; i++){
    int n2;
    if( i%2 ){
      mpExec(db, "BEGIN");
      n = mpRoCommits(db);
      n2 = mpRoCommits(db);
      mpExec(db, "COMMIT");
      if( n2!=n ){
        fprintf(stderr, "rohold: one transaction read %d, then %d commits\n",
                n, n2);
        return 7;
      }
    }else{
      n = mpRoCommits(db);
    }
    if( n<0 ){
      fprintf(stderr, "rohold: a read holds part of a commit\n");
      return 7;
    }
  }
  sqlite3_close(db);
  sqlite3_free(zReady);
  return n==nWant ? 0 : 6;
}

/* rokill <db> <rows>: with kv_btree's collector failing every write, commits
** rows 1..rows to tables b (kv_btree) and l (kv_log), one commit each, then
** writes <db>.acked and waits to be killed: b's rows are only in the root
** WAL. */
static int mpRoKill(char **argv){
  sqlite3 *db = mpChildOpen(argv[1]);
  char *zAck = sqlite3_mprintf("%s.acked", argv[1]);
  int i, n = atoi(argv[2]), fd;
  kv_btree_test_fail_writes(1000000000);
  for(i=1; i<=n; i++){
    char zSql[200];
    sqlite3_snprintf(sizeof(zSql), zSql, "INSERT INTO b VALUES(%d, 'v%d');"
                     "INSERT INTO l VALUES(%d, 'w%d')", i, i, i, i);
    if( mpExec(db, zSql) ){
      fprintf(stderr, "rokill: %s\n", sqlite3_errmsg(db));
      return 5;
    }
  }
  fd = open(zAck, O_WRONLY|O_CREAT, 0644);
  if( fd<0 ) return 3;
  close(fd);
  for(;;) sleep(1);
  return 0;
}

/* Every file and folder under zDir as "path size mtime inode" lines,
** SQLite's -shm files included. */
static void mpListAll(const char *zDir, KvBuf *pOut){
  char *zCmd = sqlite3_mprintf("cd '%s' && find . -printf "
      "'%%p %%s %%T@ %%i\n' | sort", zDir);
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

/* Run rostate on zDb (bUri: URI mode=ro) and return the two lines it
** wrote (sqlite3_malloc'd); the child must exit 0. */
static char *mpRunRoState(const char *zDb, int bUri, const char *zOut){
  char zUri[4];
  const char *azArg[] = { "rostate", zDb, zUri, zOut, 0 };
  char aBuf[512];
  int st = 0;
  size_t n;
  FILE *f;
  pid_t pid;
  snprintf(zUri, sizeof(zUri), "%d", bUri);
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "rostate status %d",
                st);
  f = fopen(zOut, "r");
  ck_assert_ptr_nonnull(f);
  n = fread(aBuf, 1, sizeof(aBuf)-1, f);
  aBuf[n] = 0;
  fclose(f);
  unlink(zOut);
  return sqlite3_mprintf("%s", aBuf);
}

/* The store of zDb read by read-only processes that have it to
** themselves (URI mode=ro, SQLITE_OPEN_READONLY): the values of a
** writable open, and no file or folder of the database or its store
** changes (path, size, mtime, inode), none is created (no LOCK, no -wal or
** -shm of the kv_btree data file).  zWant: the state (mpRoState of b and
** l) a writable open reads. */
static void mpRoAloneCheck(const char *zDir, const char *zDb,
                           const char *zWant){
  char *zOut = sqlite3_mprintf("%s.state", zDir);  /* outside zDir */
  KvBuf before, after;
  int bUri;
  memset(&before, 0, sizeof(before));
  memset(&after, 0, sizeof(after));
  mpListAll(zDir, &before);
  usleep(20000);                        /* a write would show in mtimes */
  for(bUri=1; bUri>=0; bUri--){
    char *zGot = mpRunRoState(zDb, bUri, zOut);
    ck_assert_msg(strcmp(zGot, zWant)==0, "read-only (uri %d) read:\n%s"
                  "want:\n%s", bUri, zGot, zWant);
    sqlite3_free(zGot);
  }
  mpListAll(zDir, &after);
  ck_assert_msg(after.n==before.n && memcmp(after.a, before.a, after.n)==0,
                "before:\n%.*s\nafter:\n%.*s", before.n, before.a,
                after.n, after.a);
  sqlite3_free(before.a);
  sqlite3_free(after.a);
  sqlite3_free(zOut);
}

/* The state (mpRoState of b, then l) of zDb through a writable open. */
static char *mpRwState(const char *zDb){
  sqlite3 *db = th_open(zDb);
  char *zB = mpRoState(db, "b");
  char *zL = mpRoState(db, "l");
  char *z = sqlite3_mprintf("%s\n%s\n", zB, zL);
  sqlite3_close(db);
  sqlite3_free(zB);
  sqlite3_free(zL);
  return z;
}

/* A store written and closed, then opened read-only by processes that have
** it to themselves: the values are right and nothing is written. */
START_TEST(test_kvmp_roalone_closed_store_writes_nothing){
  char *zDir = th_tmpdir("kvmp-roalone");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zWant;
  sqlite3 *db = th_open(zDb);
  int i;
  th_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree;"
              "CREATE VIRTUAL TABLE l USING kv_log");
  for(i=1; i<=20; i++){
    th_execf(db, "INSERT INTO b VALUES(%d, 'v%d');"
                 "INSERT INTO l VALUES(%d, 'w%d')", i, i, i, i);
  }
  th_exec(db, "DELETE FROM b WHERE key=3; UPDATE b SET value='long' "
              "WHERE key=4");
  sqlite3_close(db);
  zWant = mpRwState(zDb);
  ck_assert_msg(strncmp(zWant, "19|207|", 7)==0, "%s", zWant);
  mpRoAloneCheck(zDir, zDb, zWant);
  sqlite3_free(zWant);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A process killed with commits in the root WAL that the kv_btree data
** file never got (its collector failed every write): a read-only process
** alone replays them in memory, reads what a writable open reads, and
** writes nothing; the writable open afterwards still finds them there. */
START_TEST(test_kvmp_roalone_replays_killed_writer_in_memory){
  char *zDir = th_tmpdir("kvmp-rokill");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zAck = sqlite3_mprintf("%s.acked", zDb);
  const char *azArg[] = { "rokill", zDb, "30", 0 };
  char *zWant, *zAfter;
  sqlite3 *db = th_open(zDb);
  int st;
  pid_t pid;
  th_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree;"
              "CREATE VIRTUAL TABLE l USING kv_log;"
              "INSERT INTO b VALUES(100, 'before')");
  sqlite3_close(db);
  pid = th_spawn(azArg);
  ck_assert_msg(mpWaitFile(zAck), "the writer did not commit");
  kill(pid, SIGKILL);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  unlink(zAck);
  zAfter = sqlite3_mprintf("%s/app.db-kv", zDir);
  ck_assert_int_eq(mpDataFileRows(zAfter), 1);   /* only the first row */
  sqlite3_free(zAfter);
  zWant = sqlite3_mprintf("31|565|%d\n30|465|%d\n", 6+9*2+21*3, 9*2+21*3);
  mpRoAloneCheck(zDir, zDb, zWant);
  zAfter = mpRwState(zDb);
  ck_assert_msg(strcmp(zAfter, zWant)==0, "%s", zAfter);
  sqlite3_free(zAfter);
  sqlite3_free(zWant);
  sqlite3_free(zAck);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A writer process opens the store while a read-only process that opened
** it alone reads it: the writer recovers it and commits, with enough
** data for the kv_btree data file's own WAL to pass its checkpoint size;
** the reader reads whole commits, catches up with the writer, and reads
** every commit in the end; all of them are there at the next open. */
START_TEST(test_kvmp_roalone_writer_opens_while_it_reads){
  char *zDir = th_tmpdir("kvmp-rohold");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zReady = sqlite3_mprintf("%s/ro.ready", zDir);
  const char *azArg[] = { "rohold", zDb, zDir, "300", 0 };
  sqlite3 *db = th_open(zDb);
  int i, nState = 0;
  pid_t pid;
  th_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree");
  for(i=1; i<=50; i++) th_execf(db, "INSERT INTO b VALUES(%d, 'v')", i);
  sqlite3_close(db);
  pid = th_spawn(azArg);
  ck_assert_msg(mpWaitFile(zReady), "the reader did not start");
  db = th_open(zDb);                 /* a writer, next to the reader */
  th_exec(db, "PRAGMA busy_timeout=5000");
  for(i=1; i<=300; i++){
    th_execf(db, "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x+1 "
                 "FROM c WHERE x<9) INSERT INTO b SELECT 1000+%d*10+x, "
                 "randomblob(700) FROM c", i);
  }
  ck_assert_int_eq(waitpid(pid, &nState, 0), pid);
  ck_assert_msg(WIFEXITED(nState) && WEXITSTATUS(nState)==0,
                "reader status %d", nState);
  sqlite3_close(db);
  db = th_open(zDb);
  ck_assert_int_eq(mpRoCommits(db), 300);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b"), 50+3000);
  sqlite3_close(db);
  sqlite3_free(zReady);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* In one process, a read-only connection opens the store first (alone),
** then a writable one: the read-only connection reads the writer's
** commits from its next statement on, as SQLite's readers do. */
START_TEST(test_kvmp_roalone_then_writer_in_same_process){
  char *zDir = th_tmpdir("kvmp-rosame");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb), *dbRo;
  int i;
  th_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree;"
              "CREATE VIRTUAL TABLE l USING kv_log;"
              "INSERT INTO b VALUES(1, 'one'); INSERT INTO l VALUES(1, 'one')");
  sqlite3_close(db);
  dbRo = mpRoOpen(zDb, 0);
  ck_assert_ptr_nonnull(dbRo);
  ck_assert_int_eq(th_int(dbRo, "SELECT count(*) FROM b"), 1);
  ck_assert_int_eq(th_int(dbRo, "SELECT count(*) FROM l"), 1);
  db = th_open(zDb);
  for(i=2; i<=5; i++){
    th_execf(db, "INSERT INTO b VALUES(%d, 'x'); INSERT INTO l VALUES(%d, "
                 "'x')", i, i);
    ck_assert_int_eq(th_int(dbRo, "SELECT count(*) FROM b"), i);
    ck_assert_int_eq(th_int(dbRo, "SELECT count(*) FROM l"), i);
  }
  sqlite3_close(db);
  ck_assert_int_eq(th_int(dbRo, "SELECT sum(key) FROM b"), 15);
  sqlite3_close(dbRo);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* The sqlite3 shell with -readonly reads store zDir/app.db-kv alone, in
** a private mount namespace with zDir mounted read-only (bMount; *pbSkip
** set when mounts are not permitted here) or not; returns its output. */
static char *mpRoShell(const char *zDir, int bMount, int *pbSkip){
  const char *zModule = th_module_path();
  const char *zSan = getenv("DEPOT_SANITIZER");
  int bPre = zSan && (strcmp(zSan, "asan")==0 || strcmp(zSan, "tsan")==0);
  char *zShell = sqlite3_mprintf("%s%s%s/usr/bin/sqlite3 -readonly "
      "%s/app.db \".load %s\" \"SELECT count(*), sum(key) FROM b\"",
      bPre ? "LD_PRELOAD=$(${DEPOT_CC:-cc} -print-file-name=lib" : "",
      bPre ? zSan : "", bPre ? ".so) ASAN_OPTIONS=detect_leaks=0 " : "",
      zDir, zModule);
  char *zCmd;
  char zOut[512];
  size_t n;
  FILE *p;
  if( bMount ){
    zCmd = sqlite3_mprintf("unshare -m sh -c 'mount --bind %s %s && "
        "mount -o remount,bind,ro %s %s || exit 97; touch %s/x 2>/dev/null "
        "&& exit 98; %s' 2>&1", zDir, zDir, zDir, zDir, zDir, zShell);
  }else{
    zCmd = sqlite3_mprintf("%s 2>&1", zShell);
  }
  p = popen(zCmd, "r");
  ck_assert_ptr_nonnull(p);
  n = fread(zOut, 1, sizeof(zOut)-1, p);
  zOut[n] = 0;
  *pbSkip = WEXITSTATUS(pclose(p))==97;
  sqlite3_free(zCmd);
  sqlite3_free(zShell);
  return sqlite3_mprintf("%s", zOut);
}

/* The sqlite3 shell with -readonly reads a kv_btree table of a store no
** process has open, writing nothing; then the same from a read-only
** mount of the directory (a private mount namespace, when this system
** lets the test make one), with the store's LOCK file (read locks on a
** read-only descriptor) and without it (no lock at all). */
START_TEST(test_kvmp_roalone_shell_and_read_only_mount){
  char *zDir = th_tmpdir("kvmp-romount");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zLock = sqlite3_mprintf("%s/app.db-kv/LOCK", zDir);
  KvBuf before, after;
  sqlite3 *db;
  char *zOut;
  int i, bSkip = 0;
  if( th_module_path()==0 || access("/usr/bin/sqlite3", X_OK)!=0 ){
    fprintf(stderr, "kvmp: roalone shell test skipped: no sqlite3 shell "
            "or module\n");
    sqlite3_free(zLock);
    sqlite3_free(zDb);
    sqlite3_free(zDir);
    return;
  }
  memset(&before, 0, sizeof(before));
  memset(&after, 0, sizeof(after));
  db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree");
  for(i=1; i<=20; i++) th_execf(db, "INSERT INTO b VALUES(%d, 'v')", i);
  sqlite3_close(db);
  mpListAll(zDir, &before);
  usleep(20000);
  zOut = mpRoShell(zDir, 0, &bSkip);
  ck_assert_msg(strcmp(zOut, "20|210\n")==0, "shell said: %s", zOut);
  sqlite3_free(zOut);
  mpListAll(zDir, &after);
  ck_assert_msg(after.n==before.n && memcmp(after.a, before.a, after.n)==0,
                "before:\n%.*s\nafter:\n%.*s", before.n, before.a,
                after.n, after.a);
  for(i=0; i<2; i++){
    if( i==1 ) ck_assert_int_eq(unlink(zLock), 0);
    zOut = mpRoShell(zDir, 1, &bSkip);
    if( bSkip ){
      fprintf(stderr, "kvmp: read-only mount variant skipped: mounts are "
              "not permitted here (%s)\n", zOut);
      sqlite3_free(zOut);
      break;
    }
    ck_assert_msg(strcmp(zOut, "20|210\n")==0, "shell on a read-only mount "
                  "(%s LOCK) said: %s", i ? "without" : "with", zOut);
    sqlite3_free(zOut);
  }
  sqlite3_free(before.a);
  sqlite3_free(after.a);
  sqlite3_free(zLock);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A read-only open of a directory that holds no store fails, saying so,
** and creates nothing in it. */
START_TEST(test_kvmp_roalone_not_a_store){
  char *zDir = th_tmpdir("kvmp-ronone");
  char *zStore = sqlite3_mprintf("%s/empty-kv", zDir);
  KvBuf before, after;
  KvEngine *pEng = 0;
  char *zErr = 0;
  int rc;
  memset(&before, 0, sizeof(before));
  memset(&after, 0, sizeof(after));
  ck_assert_int_eq(mkdir(zStore, 0755), 0);
  mpListAll(zDir, &before);
  rc = kv_engine_open_readonly(zStore, &pEng, &zErr);
  ck_assert_int_eq(rc, SQLITE_CANTOPEN);
  ck_assert_ptr_null(pEng);
  ck_assert_msg(zErr && strstr(zErr, "is not a KV store"), "%s",
                zErr ? zErr : "(no message)");
  mpListAll(zDir, &after);
  ck_assert_msg(after.n==before.n && memcmp(after.a, before.a, after.n)==0,
                "before:\n%.*s\nafter:\n%.*s", before.n, before.a,
                after.n, after.a);
  sqlite3_free(zErr);
  sqlite3_free(before.a);
  sqlite3_free(after.a);
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------- tables created and removed --- */

/* Tables t<id> of the kv_btree data file, read with plain SQLite. */
static int mpDataFileTables(const char *zStore){
  char *zPath = sqlite3_mprintf("%s/kv_btree.db", zStore);
  sqlite3 *db = 0;
  int rc, n;
  ck_assert_int_eq(sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READONLY, 0), 0);
  n = (int)mpInt(db, "SELECT count(*) FROM sqlite_schema "
                     "WHERE type='table' AND name GLOB 't[0-9]*'", &rc);
  ck_assert_int_eq(rc, SQLITE_OK);
  sqlite3_close(db);
  sqlite3_free(zPath);
  return n;
}

/* Entries of <store>/kv_log (a directory and a marker per kv_log table). */
static int mpLogDirEntries(const char *zStore){
  char *zCmd = sqlite3_mprintf("ls -A '%s/kv_log' 2>/dev/null", zStore);
  FILE *p = popen(zCmd, "r");
  char zLine[256];
  int n = 0;
  ck_assert_ptr_nonnull(p);
  while( fgets(zLine, sizeof(zLine), p) ) n++;
  pclose(p);
  sqlite3_free(zCmd);
  return n;
}

/* The statement made by sqlite3_mprintf(zFmt, ...) must fail with a
** message that contains zWant. */
static void mpFails(sqlite3 *db, const char *zWant, const char *zFmt, ...){
  char *zErr = 0, *zSql;
  va_list ap;
  int rc;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "%s succeeded", zSql);
  ck_assert_msg(zErr && strstr(zErr, zWant), "%s: '%s' lacks '%s'", zSql,
                zErr ? zErr : "", zWant);
  sqlite3_free(zErr);
  sqlite3_free(zSql);
}

/* th_text_is of the statement made by sqlite3_mprintf(zFmt, ...). */
static void mpTextIs(sqlite3 *db, const char *zWant, const char *zFmt, ...){
  char *zSql;
  va_list ap;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  th_text_is(db, zSql, zWant);
  sqlite3_free(zSql);
}

/* Process A has the store open and writes it; process B creates a
** kv_btree and a kv_log table through SQL and writes them; A reads them
** (its connection, a fresh one, a handle).  B removes both while handles
** of A use them: a snapshot A took keeps reading, its commit fails with
** SQLITE_BUSY_SNAPSHOT, a handle that only wrote fails at its first read;
** a new handle works (the tables are gone).  A, which turned the store
** shared, runs its background work: it deletes the removed tables' files
** once B is past the removal.  B creates a table of the same name again:
** A sees the new, empty one; the store opened alone has the same tables. */
START_TEST(test_kvmp_ddl_create_remove_while_shared){
  char *zDir = th_tmpdir("kvmp-ddl");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *zDropped = sqlite3_mprintf("%s/tables_dropped", zStore);
  sqlite3 *db = th_open(zDb), *db2;
  sqlite3_int64 h, h2;
  int64_t iEnd;
  th_exec(db, "CREATE VIRTUAL TABLE a USING kv_btree;"
              "INSERT INTO a VALUES(1, 'one')");
  ck_assert_int_eq(mpRun(zDb, "CREATE VIRTUAL TABLE nb USING kv_btree;"
      "CREATE VIRTUAL TABLE nl USING kv_log;"
      "INSERT INTO nb VALUES(1, 'b1'), (2, 'b2');"
      "INSERT INTO nl VALUES(1, 'l1');"
      "INSERT INTO a VALUES(2, 'two')"), 0);
  th_exec(db, "INSERT INTO a VALUES(3, 'three')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM nb"), 2);
  th_text_is(db, "SELECT value FROM nl WHERE key=1", "l1");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM a"), 3);
  db2 = th_open(zDb);
  ck_assert_int_eq(th_int(db2, "SELECT sum(key) FROM nb"), 3);
  th_text_is(db2, "SELECT value FROM nl", "l1");
  sqlite3_close(db2);
  h = th_int(db, "SELECT kv_begin()");
  mpTextIs(db, "b2", "SELECT kv_get(%lld, 'nb', 2)", h);
  th_execf(db, "SELECT kv_put(%lld, 'nl', 2, 'l2'), kv_commit(%lld)", h, h);
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE x(v CHECK(v=2));"
                              "INSERT INTO x SELECT count(*) FROM nl"), 0);
  ck_assert_int_eq(mpLogDirEntries(zStore), 2);
  ck_assert_int_eq(mpDataFileTables(zStore), 2);

  /* B removes both while A's handles use them */
  h = th_int(db, "SELECT kv_begin()");
  mpTextIs(db, "l1", "SELECT kv_get(%lld, 'nl', 1)", h);
  h2 = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_put(%lld, 'nb', 9, 'x')", h2);
  ck_assert_int_eq(mpRun(zDb, "DROP TABLE main.nl; DROP TABLE main.nb"), 0);
  mpTextIs(db, "l1", "SELECT kv_get(%lld, 'nl', 1)", h);
  mpFails(db, "table nl (created or removed",
          "SELECT kv_put(%lld, 'nl', 3, 'z'), "
          "kv_commit(%lld)", h, h);
  mpFails(db, "table nb was removed or recreated by a concurrent "
          "transaction", "SELECT kv_get(%lld, 'nb', 1)", h2);
  th_execf(db, "SELECT kv_rollback(%lld)", h2);
  h = th_int(db, "SELECT kv_begin()");                 /* the retry */
  mpFails(db, "no such table: nl", "SELECT kv_get(%lld, 'nl', 1)", h);
  mpTextIs(db, "two", "SELECT kv_get(%lld, 'a', 2)", h);
  th_execf(db, "SELECT kv_put(%lld, 'a', 4, 'four'), kv_commit(%lld)", h, h);
  mpFails(db, "no such table", "SELECT * FROM nb");

  /* the owner (A) deletes their files once no process can read them */
  iEnd = mpNowMs() + 10000;
  while( mpNowMs()<iEnd && (mpLogDirEntries(zStore)>0
         || mpDataFileTables(zStore)>1 || access(zDropped, F_OK)==0) ){
    usleep(20000);
  }
  ck_assert_int_eq(mpLogDirEntries(zStore), 0);
  ck_assert_int_eq(mpDataFileTables(zStore), 1);
  ck_assert_int_ne(access(zDropped, F_OK), 0);

  /* the same name again: a new table */
  ck_assert_int_eq(mpRun(zDb, "CREATE VIRTUAL TABLE nl USING kv_log;"
                              "INSERT INTO nl VALUES(5, 'new')"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM nl"), 1);
  th_text_is(db, "SELECT value FROM nl", "new");
  sqlite3_close(db);
  db = th_open(zDb);                          /* alone */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM a"), 4);
  th_text_is(db, "SELECT value FROM nl", "new");
  h = th_int(db, "SELECT kv_begin()");
  mpFails(db, "no such table: nb", "SELECT kv_get(%lld, 'nb', 1)", h);
  sqlite3_close(db);
  sqlite3_free(zDropped);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* Two processes create one name: the second commit fails as a second
** connection's would, and sees the first's table.  kv_memory: with
** persistence=0 each process has its own rows of a shared declaration;
** with persistence=1 it is refused while the store is shared. */
START_TEST(test_kvmp_ddl_name_clash_and_memory_tables){
  char *zDir = th_tmpdir("kvmp-ddlclash");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  sqlite3_int64 h, h2;
  th_exec(db, "CREATE VIRTUAL TABLE a USING kv_btree;"
              "INSERT INTO a VALUES(1, 'one')");
  ck_assert_int_eq(mpRun(zDb, "INSERT INTO a VALUES(2, 'two')"), 0);
  h = th_int(db, "SELECT kv_begin()");
  ck_assert_int_eq(th_intf(db, "SELECT kv_create_table(%lld, 'c', "
                               "'kv_btree')", h), 1);
  ck_assert_int_eq(mpRun(zDb, "CREATE VIRTUAL TABLE c USING kv_btree;"
                              "INSERT INTO c VALUES(1, 'theirs')"), 0);
  mpFails(db, "table c (created or removed concurrently)",
          "SELECT kv_commit(%lld)", h);
  h = th_int(db, "SELECT kv_begin()");
  ck_assert_int_eq(th_intf(db, "SELECT kv_create_table(%lld, 'c', "
                               "'kv_btree')", h), 0);
  mpTextIs(db, "theirs", "SELECT kv_get(%lld, 'c', 1)", h);
  th_execf(db, "SELECT kv_rollback(%lld)", h);

  h = th_int(db, "SELECT kv_begin()");
  mpFails(db, "persistence=1", "SELECT kv_create_table(%lld, 'm', "
          "'kv_memory', '{\"persistence\":1}')", h);
  th_execf(db, "SELECT kv_rollback(%lld)", h);
  h = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_create_table(%lld, 'pm', 'kv_memory'), "
               "kv_put(%lld, 'pm', 1, 'mine'), kv_commit(%lld)", h, h, h);
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE hh AS SELECT kv_begin() h;"
      "CREATE TEMP TABLE x(v CHECK(v IS NULL));"
      "INSERT INTO x SELECT kv_get((SELECT h FROM hh), 'pm', 1);"
      "SELECT kv_put((SELECT h FROM hh), 'pm', 2, 'theirs');"
      "SELECT kv_commit((SELECT h FROM hh))"), 0);
  h2 = th_int(db, "SELECT kv_begin()");
  mpTextIs(db, "mine", "SELECT kv_get(%lld, 'pm', 1)", h2);
  ck_assert_int_eq(th_intf(db, "SELECT kv_get(%lld, 'pm', 2) IS NULL", h2), 1);
  th_execf(db, "SELECT kv_rollback(%lld)", h2);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A process creating a table (and writing it in the same commit) is
** SIGKILLed after its WAL append, before it published anything (point 0),
** or after it saved the catalog file (point 1): the next writer applies
** the commit, so the table is there, with its row, in every process and
** after an open alone. */
static void mpDdlKillTest(const char *zType, int iAt){
  char *zDir = th_tmpdir("kvmp-ddlkill");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zSql = sqlite3_mprintf("CREATE TEMP TABLE hh AS SELECT kv_begin() h;"
      "SELECT kv_create_table((SELECT h FROM hh), 'k', '%s');"
      "SELECT kv_put((SELECT h FROM hh), 'k', 1, 'v');"
      "SELECT kv_commit((SELECT h FROM hh))", zType);
  char zAt[8];
  const char *azArg[] = { "execk", zDb, zAt, zSql, 0 };
  sqlite3 *db = th_open(zDb);
  sqlite3_int64 h;
  pid_t pid;
  int st = 0;
  snprintf(zAt, sizeof(zAt), "%d", iAt);
  th_exec(db, "CREATE VIRTUAL TABLE a USING kv_btree;"
              "INSERT INTO a VALUES(1, 'one')");
  ck_assert_int_eq(mpRun(zDb, "INSERT INTO a VALUES(2, 'two')"), 0);
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st), "the creator ended with status %d", st);
  th_exec(db, "INSERT INTO a VALUES(3, 'three')");    /* the next writer */
  h = th_int(db, "SELECT kv_begin()");
  mpTextIs(db, "v", "SELECT kv_get(%lld, 'k', 1)", h);
  th_execf(db, "SELECT kv_put(%lld, 'k', 2, 'w'), kv_commit(%lld)", h, h);
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE hh AS SELECT kv_begin() h;"
      "CREATE TEMP TABLE x(v CHECK(v='vw'));"
      "INSERT INTO x SELECT kv_get((SELECT h FROM hh), 'k', 1)"
      " || kv_get((SELECT h FROM hh), 'k', 2)"), 0);
  sqlite3_close(db);
  db = th_open(zDb);                          /* alone: the catalog file */
  h = th_int(db, "SELECT kv_begin()");
  ck_assert_int_eq(th_intf(db, "SELECT kv_create_table(%lld, 'k', '%s')",
                           h, zType), 0);
  mpTextIs(db, "w", "SELECT kv_get(%lld, 'k', 2)", h);
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

START_TEST(test_kvmp_ddl_creator_killed_before_publish){
  mpDdlKillTest("kv_btree", 0);
  mpDdlKillTest("kv_log", 0);
  mpDdlKillTest("kv_btree", 1);
  mpDdlKillTest("kv_log", 1);
}
END_TEST

/* A process removing a table is SIGKILLed after its WAL append (point 0)
** or after it saved the catalog file (point 1): the next writer applies
** the removal, so the table is gone in every process and after an open
** alone, and that open deletes its files. */
static void mpDdlRemoveKillTest(const char *zType, int iAt){
  char *zDir = th_tmpdir("kvmp-ddlrmkill");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *zDropped = sqlite3_mprintf("%s/tables_dropped", zStore);
  char zAt[8];
  const char *azArg[] = { "execk", zDb, zAt, 0, 0 };
  sqlite3 *db = th_open(zDb);
  sqlite3_int64 h;
  pid_t pid;
  int st = 0;
  char *zRm = sqlite3_mprintf("CREATE TEMP TABLE hh AS SELECT kv_begin() h;"
      "SELECT kv_remove_table((SELECT h FROM hh), 'k');"
      "SELECT kv_commit((SELECT h FROM hh))");
  azArg[3] = zRm;
  snprintf(zAt, sizeof(zAt), "%d", iAt);
  th_exec(db, "CREATE VIRTUAL TABLE a USING kv_btree;"
              "INSERT INTO a VALUES(1, 'one')");
  h = th_int(db, "SELECT kv_begin()");
  th_execf(db, "SELECT kv_create_table(%lld, 'k', '%s'), "
               "kv_put(%lld, 'k', 1, 'v'), kv_commit(%lld)", h, zType, h, h);
  ck_assert_int_eq(mpRun(zDb, "INSERT INTO a VALUES(2, 'two')"), 0);
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st), "the remover ended with status %d", st);
  th_exec(db, "INSERT INTO a VALUES(3, 'three')");    /* the next writer */
  h = th_int(db, "SELECT kv_begin()");
  mpFails(db, "no such table: k", "SELECT kv_get(%lld, 'k', 1)", h);
  ck_assert_int_eq(mpRun(zDb, "CREATE TEMP TABLE hh AS SELECT kv_begin() h;"
      "SELECT kv_get((SELECT h FROM hh), 'k', 1)"), 5);
  sqlite3_close(db);
  db = th_open(zDb);                          /* alone */
  h = th_int(db, "SELECT kv_begin()");
  mpFails(db, "no such table: k", "SELECT kv_get(%lld, 'k', 1)", h);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM a"), 3);
  ck_assert_int_ne(access(zDropped, F_OK), 0);
  ck_assert_int_eq(mpLogDirEntries(zStore), 0);
  ck_assert_int_eq(mpDataFileTables(zStore), 1);
  sqlite3_close(db);
  sqlite3_free(zRm);
  sqlite3_free(zDropped);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

/* ------------------------------------------- kv_log, long shared runs --- */

/* A long shared run over a kv_log table (log files of 64 KiB): two fill
** writers and an idle process, as the kv_btree long run.  With bKill, one
** of the three is SIGKILLed every 600 ms, in turn (the owner among them,
** at whatever point of its retirement it is), and replaced, 9 times at
** least.  The run lasts 2 s at least, past the start-up (the first
** segments roll before the owner's first turn).  The root WAL keeps a
** handful of segments (at most a third of those written); the store
** opened alone afterwards holds every acknowledged row of every writer. */
static void mpLogLongRun(int bKill){
  char *zDir = th_tmpdir(bKill ? "kvmp-logkill" : "kvmp-logbounded");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int msRun = zIters && atoi(zIters)>0 ? atoi(zIters)*1000 : 0;
  unsigned long long lo, hi = 0;
  const char *azIdle[4];
  pid_t aPid[3];
  int aId[3];
  int st, nMax = 0, nSeg, i, nId = 2, nKill = 0, nAck = 0;
  int64_t iStart, iEnd, iKill;
  sqlite3 *db = th_open(zDb);
  setenv("KVMP_LOG_FILE_SIZE", "65536", 1);
  th_exec(db, "CREATE VIRTUAL TABLE fill USING kv_log");
  sqlite3_close(db);

  azIdle[0] = "idle"; azIdle[1] = zDb; azIdle[2] = "600000"; azIdle[3] = 0;
  aPid[0] = th_spawn(azIdle);
  aId[0] = 0;
  aId[1] = 1; aPid[1] = mpSpawnFill(zDb, 1, 600000, zDir);
  aId[2] = 2; aPid[2] = mpSpawnFill(zDb, 2, 600000, zDir);
  mpWaitAcks(zDir, 1, 1);
  mpWaitAcks(zDir, 2, 1);
  iStart = mpNowMs();
  iEnd = iStart + (msRun>25000 ? msRun : 25000);
  iKill = iStart + 600;
  while( mpNowMs()<iEnd
      && (hi<40 || mpNowMs()<iStart+2000 || mpNowMs()<iStart+msRun
          || (bKill && nKill<9)) ){
    nSeg = mpSegments(zStore, &lo, &hi);
    if( nSeg>nMax ) nMax = nSeg;
    if( bKill && mpNowMs()>=iKill ){
      int k = nKill%3;
      kill(aPid[k], SIGKILL);
      ck_assert_int_eq(waitpid(aPid[k], &st, 0), aPid[k]);
      ck_assert_msg(WIFSIGNALED(st), "process %d ended early, status %d",
                    aId[k], st);
      nKill++;
      if( k==0 ){
        aPid[0] = th_spawn(azIdle);
      }else{
        aId[k] = ++nId;
        aPid[k] = mpSpawnFill(zDb, aId[k], 600000, zDir);
      }
      iKill = mpNowMs() + 600;
    }
    usleep(50000);
  }
  for(i=0; i<3; i++){
    kill(aPid[i], SIGKILL);
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert_msg(WIFSIGNALED(st), "process %d ended early, status %d",
                  aId[i], st);
  }
  unsetenv("KVMP_LOG_FILE_SIZE");
  ck_assert_msg(hi>=24, "only %llu segments written", hi);
  ck_assert_msg(nMax<=16 || (unsigned long long)nMax*3<=hi,
                "up to %d live segments of %llu", nMax, hi);

  db = th_open(zDb);                /* alone: replays the live segments */
  for(i=1; i<=nId; i++) nAck += mpCheckFillAcks(db, zDir, i);
  ck_assert_int_gt(nAck, 0);
  ck_assert_int_ge(th_int(db, "SELECT count(*) FROM fill"), nAck);
  sqlite3_close(db);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

/* The root WAL of a store shared over a kv_log table stays bounded: the
** owner syncs the log files every process appended to before it retires
** segments. */
START_TEST(test_kvmp_log_wal_bounded_in_long_shared_run){
  mpLogLongRun(0);
}
END_TEST

/* The same with a process SIGKILLed every 600 ms (the owner in turn, at
** any point of its retirement): no acknowledged row is lost. */
START_TEST(test_kvmp_log_owner_killed_during_retirement){
  mpLogLongRun(1);
}
END_TEST

/* ------------------------------ read-only process, long writer run --- */

/* sbank: bank (same arguments) on 8 KB root WAL segments. */
static int mpSegBank(char **argv){
  kv_engine_test_wal_config(MP_SEGMENT, 0);
  return mpBank(argv);
}

static int mpRoRebuilds = 0;          /* roaudit: rebuilds logged */

static void mpRoLog(void *pArg, int rc, const char *zMsg){
  (void)pArg;
  if( (rc & 0xff)==SQLITE_NOTICE && strstr(zMsg, "were retired") ){
    mpRoRebuilds++;
  }
}

/* roaudit <db> <stop file> <out file>: a read-only connection (URI
** mode=ro) checks the bank's total on every snapshot, resting 250 ms
** after every 8 snapshots (the WAL it has not read meanwhile may retire),
** until the stop file exists (60 s at most); it takes one more snapshot
** then, and writes "<snapshots> <rebuilds> <tlog rows of that snapshot>"
** to the out file. */
static int mpRoAudit(char **argv){
  sqlite3 *db = 0, *dbFirst = 0;
  char *zUri;
  int64_t iEnd;
  int nSnap = 0, rc, bStop = 0;
  sqlite3_int64 nLog = 0;
  FILE *f;
  sqlite3_config(SQLITE_CONFIG_LOG, mpRoLog, (void*)0);
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0);
  zUri = sqlite3_mprintf("file:%s?mode=ro", argv[1]);
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
  sqlite3_free(zUri);
  sqlite3_close(dbFirst);
  if( rc ) return 2;
  sqlite3_exec(db, "PRAGMA busy_timeout=5000", 0, 0, 0);
  iEnd = mpNowMs() + 60000;
  while( !bStop ){
    sqlite3_int64 nSum, nRow;
    bStop = access(argv[2], F_OK)==0 || mpNowMs()>iEnd;
    rc = mpExec(db, "BEGIN");
    nSum = rc ? 0 : mpInt(db, "SELECT sum(value) FROM acct", &rc);
    nRow = rc ? 0 : mpInt(db, "SELECT count(*) FROM acct", &rc);
    if( rc==SQLITE_OK ) nLog = mpInt(db, "SELECT count(*) FROM tlog", &rc);
    mpExec(db, "COMMIT");
    if( rc!=SQLITE_OK ){
      fprintf(stderr, "roaudit: %s\n", sqlite3_errmsg(db));
      return 5;
    }
    if( nSum!=MP_ACCOUNTS*MP_START || nRow!=MP_ACCOUNTS ){
      fprintf(stderr, "roaudit: total %lld over %lld accounts\n",
              (long long)nSum, (long long)nRow);
      return 7;
    }
    if( (++nSnap)%8==0 && !bStop ) usleep(250000);
  }
  sqlite3_close(db);
  f = fopen(argv[3], "w");
  if( f==0 ) return 3;
  fprintf(f, "%d %d %lld\n", nSnap, mpRoRebuilds, (long long)nLog);
  fclose(f);
  return 0;
}

/* Four bank writers (8 KB root WAL segments) and a read-only process that
** stays open through the run, until 40 segments were written (at most
** 25 s) or DEPOT_TORTURE_ITERS seconds; then the writers are killed.  The
** WAL keeps a handful of segments (the read-only process holds none
** back); the reader's snapshots keep the total, also after it found the
** segments it had not read retired and read the tables' files instead;
** its last snapshot, taken after the writers died, holds every
** acknowledged transfer. */
static void mpRoLongRun(const char *zType){
  char *zDir = th_tmpdir("kvmp-rolong");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *zOut = sqlite3_mprintf("%s/roaudit.out", zDir);
  char *zStop = sqlite3_mprintf("%s/roaudit.stop", zDir);
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int msRun = zIters && atoi(zIters)>0 ? atoi(zIters)*1000 : 0;
  const char *azRo[5];
  unsigned long long lo, hi = 0;
  pid_t aPid[MP_WRITERS], pidRo;
  int i, st, nMax = 0, nSeg, nSnap = 0, nRebuild = 0, nAck = 0;
  long long nLog = -1;
  int64_t iStart, iEnd;
  FILE *f;
  sqlite3 *db = th_open(zDb);
  th_execf(db, "PRAGMA busy_timeout=5000;"
               "CREATE VIRTUAL TABLE acct USING %s;"
               "CREATE VIRTUAL TABLE tlog USING %s", zType, zType);
  for(i=0; i<MP_ACCOUNTS; i++){
    th_execf(db, "INSERT INTO acct VALUES(%d, %d)", i, MP_START);
  }
  /* this connection keeps the store open until the reader is in */
  azRo[0] = "roaudit"; azRo[1] = zDb; azRo[2] = zStop; azRo[3] = zOut;
  azRo[4] = 0;
  pidRo = th_spawn(azRo);
  usleep(300000);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM acct"), MP_ACCOUNTS);
  for(i=0; i<MP_WRITERS; i++){
    char zId[16];
    char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, i+1);
    const char *azArg[] = { "sbank", zDb, zId, "600000", zAck, 0 };
    snprintf(zId, sizeof(zId), "%d", i+1);
    aPid[i] = th_spawn(azArg);
    sqlite3_free(zAck);
  }
  sqlite3_close(db);
  iStart = mpNowMs();
  iEnd = iStart + (msRun>25000 ? msRun : 25000);
  while( mpNowMs()<iEnd
      && (hi<40 || mpNowMs()<iStart+2000 || mpNowMs()<iStart+msRun) ){
    nSeg = mpSegments(zStore, &lo, &hi);
    if( nSeg>nMax ) nMax = nSeg;
    usleep(50000);
  }
  for(i=0; i<MP_WRITERS; i++){
    kill(aPid[i], SIGKILL);
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert_msg(WIFSIGNALED(st), "writer %d ended early, status %d", i+1,
                  st);
  }
  f = fopen(zStop, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  ck_assert_int_eq(waitpid(pidRo, &st, 0), pidRo);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "reader status %d", st);
  f = fopen(zOut, "r");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%d %d %lld", &nSnap, &nRebuild, &nLog), 3);
  fclose(f);
  ck_assert_msg(hi>=24, "only %llu segments written", hi);
  ck_assert_msg(nMax<=16 || (unsigned long long)nMax*3<=hi,
                "up to %d live segments of %llu", nMax, hi);
  ck_assert_int_gt(nSnap, 8);
  ck_assert_msg(nRebuild>0, "the reader never found its segments retired "
                "(%d snapshots)", nSnap);

  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"),
                   MP_ACCOUNTS*MP_START);
  for(i=1; i<=MP_WRITERS; i++) nAck += mpCheckAcks(db, zDir, i);
  ck_assert_int_gt(nAck, 0);
  ck_assert_msg(nLog>=nAck, "the reader's last snapshot holds %lld "
                "transfers, %d were acknowledged", nLog, nAck);
  ck_assert_int_ge(th_int(db, "SELECT count(*) FROM tlog"), nLog);
  sqlite3_close(db);
  sqlite3_free(zStop);
  sqlite3_free(zOut);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

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

START_TEST(test_kvmp_ddl_remover_killed_before_publish){
  mpDdlRemoveKillTest("kv_btree", 0);
  mpDdlRemoveKillTest("kv_log", 0);
  mpDdlRemoveKillTest("kv_btree", 1);
  mpDdlRemoveKillTest("kv_log", 1);
}
END_TEST

/* A read-only process follows a table another process creates (it reads
** its rows) and its removal (its reads fail); the removed table's files
** are deleted once it has closed the store (the owner waits while a
** read-only process, which publishes no position, has it open). */
START_TEST(test_kvmp_ddl_readonly_process_follows){
  char *zDir = th_tmpdir("kvmp-ddlro");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *zReady = sqlite3_mprintf("%s/ready", zDir);
  const char *azArg[] = { "roddl", zDb, zReady, 0 };
  sqlite3 *db = th_open(zDb);
  pid_t pid;
  int st = 0;
  int64_t iEnd;
  th_exec(db, "CREATE VIRTUAL TABLE a USING kv_btree;"
              "INSERT INTO a VALUES(1, 'one')");
  pid = th_spawn(azArg);
  iEnd = mpNowMs() + 10000;
  while( access(zReady, F_OK)!=0 && mpNowMs()<iEnd ) usleep(10000);
  ck_assert_int_eq(access(zReady, F_OK), 0);
  ck_assert_int_eq(mpRun(zDb, "CREATE VIRTUAL TABLE nr USING kv_log;"
                              "INSERT INTO nr VALUES(1, 'x'), (2, 'y')"), 0);
  usleep(300000);
  ck_assert_int_eq(mpLogDirEntries(zStore), 2);
  th_exec(db, "DROP TABLE main.nr");
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0,
                "the read-only process ended with status %d", st);
  iEnd = mpNowMs() + 10000;
  while( mpLogDirEntries(zStore)>0 && mpNowMs()<iEnd ) usleep(20000);
  ck_assert_int_eq(mpLogDirEntries(zStore), 0);
  sqlite3_close(db);
  sqlite3_free(zReady);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

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

/* Three processes create, write, check and remove tables of both types
** at the same time, ten rounds each, while this one writes: every id is
** taken once (no table finds another's rows), every statement succeeds,
** and the removed tables' files are all deleted in the end. */
START_TEST(test_kvmp_ddl_concurrent_creates_and_removes){
  char *zDir = th_tmpdir("kvmp-ddlmany");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *azSql[3];
  pid_t aPid[3];
  sqlite3 *db = th_open(zDb);
  int64_t iEnd;
  int i, j, st;
  th_exec(db, "PRAGMA busy_timeout=10000;"
              "CREATE VIRTUAL TABLE a USING kv_btree;"
              "INSERT INTO a VALUES(0, 'zero')");
  for(i=0; i<3; i++){
    azSql[i] = sqlite3_mprintf("");
    for(j=0; j<10; j++){
      azSql[i] = sqlite3_mprintf("%z"
          "CREATE VIRTUAL TABLE b%d_%d USING kv_btree;"
          "CREATE VIRTUAL TABLE l%d_%d USING kv_log;"
          "INSERT INTO b%d_%d VALUES(%d, 'b');"
          "INSERT INTO l%d_%d VALUES(%d, 'l');"
          "CREATE TEMP TABLE c%d(v CHECK(v=%d));"
          "INSERT INTO c%d SELECT sum(key) FROM b%d_%d;"
          "INSERT INTO c%d SELECT sum(key) FROM l%d_%d;"
          "DROP TABLE main.b%d_%d; DROP TABLE main.l%d_%d;",
          azSql[i], i, j, i, j, i, j, 100*i+j, i, j, 100*i+j,
          j, 100*i+j, j, i, j, j, i, j, i, j, i, j);
    }
    {
      const char *azArg[] = { "exec", zDb, azSql[i], 0 };
      aPid[i] = th_spawn(azArg);
    }
  }
  for(j=1; j<=50; j++){
    th_execf(db, "INSERT INTO a VALUES(%d, 'x')", j);
    usleep(2000);
  }
  for(i=0; i<3; i++){
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0,
                  "process %d ended with status %d", i, st);
    sqlite3_free(azSql[i]);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM a"), 51);
  iEnd = mpNowMs() + 10000;
  while( mpNowMs()<iEnd
         && (mpLogDirEntries(zStore)>0 || mpDataFileTables(zStore)>1) ){
    usleep(20000);
  }
  ck_assert_int_eq(mpLogDirEntries(zStore), 0);
  ck_assert_int_eq(mpDataFileTables(zStore), 1);
  sqlite3_close(db);
  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM a"), 51);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_schema "
                              "WHERE name GLOB '[bl][0-9]_*'"), 0);
  sqlite3_close(db);
  sqlite3_free(zStore);
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

START_TEST(test_kvmp_readonly_open_through_long_run){
  mpRoLongRun("kv_btree");
}
END_TEST

START_TEST(test_kvmp_log_readonly_open_through_long_run){
  mpRoLongRun("kv_log");
}
END_TEST

/* ------------------------------------ kv_log compaction while shared --- */

/* The value a writer of table lc stores at its n-th commit: n, then
** padding (each commit replaces one of the writer's 8 keys). */
#define MP_LC_SQL "INSERT OR REPLACE INTO lc VALUES(%d, printf('%%d:%%.200c', " \
                  "%d, 'x'))"

/* lcw <db> <id> <ms> <ack file> <kill step>: writes key id*100 + n%8 with
** value n (MP_LC_SQL) for n = 1, 2, ... until the time is up, appending
** "key n" to the ack file once a commit returned OK; with a kill step
** (logstore.h's KVLOG_STEP_*, 0: none), a compaction of the table while
** shared raises SIGKILL there. */
static int mpLcWrite(char **argv){
  sqlite3 *db;
  int id = atoi(argv[2]), n = 0, nOk = 0;
  int64_t iEnd;
  int fd = open(argv[4], O_WRONLY|O_CREAT|O_APPEND, 0644);
  kv_log_test_compact_kill(atoi(argv[5]));
  db = mpChildOpen(argv[1]);
  iEnd = mpNowMs() + atoi(argv[3]);
  if( fd<0 ) return 3;
  while( mpNowMs()<iEnd ){
    int key = id*100 + (++n)%8, rc;
    char zSql[200];
    sqlite3_snprintf(sizeof(zSql), zSql, MP_LC_SQL, key, n);
    rc = mpExec(db, zSql);
    if( rc==SQLITE_OK ){
      char zLine[48];
      int nLine = snprintf(zLine, sizeof(zLine), "%d %d\n", key, n);
      if( write(fd, zLine, nLine)!=nLine ) return 4;
      nOk++;
    }else if( (sqlite3_extended_errcode(db) & 0xff)!=SQLITE_BUSY ){
      fprintf(stderr, "lcw %d: %s\n", id, sqlite3_errmsg(db));
      return 5;
    }
  }
  close(fd);
  sqlite3_close(db);
  return nOk>0 ? 0 : 6;
}

/* The n stored for key in table lc (-1: none, or not a value of MP_LC_SQL
** for that key). */
static int mpLcValue(sqlite3 *db, int key, int *pRc){
  char zSql[200];
  sqlite3_int64 v;
  sqlite3_snprintf(sizeof(zSql), zSql, "SELECT CASE WHEN length(value)=201"
                   "+length(value+0) THEN value+0 ELSE -1 END FROM lc "
                   "WHERE key=%d", key);
  v = mpInt(db, zSql, pRc);
  if( *pRc!=SQLITE_OK ) return -1;
  if( v<=0 || (int)(v%8)!=key%100 ) return -1;
  return (int)v;
}

/* Check every commit writer id acknowledged in its ack file: each of its
** keys holds the last n acknowledged for it, or a later one (a commit
** whose acknowledgement a kill prevented).  Returns the acks read. */
static int mpLcCheckAcks(sqlite3 *db, const char *zDir, int id){
  char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, id);
  FILE *f = fopen(zAck, "r");
  int aLast[8], key, n, i, nAck = 0, rc;
  memset(aLast, 0, sizeof(aLast));
  ck_assert_ptr_nonnull(f);
  while( fscanf(f, "%d %d", &key, &n)==2 ){
    ck_assert_int_eq(key/100, id);
    aLast[key%100] = n;
    nAck++;
  }
  fclose(f);
  for(i=0; i<8; i++){
    int v;
    if( aLast[i]==0 ) continue;
    v = mpLcValue(db, id*100+i, &rc);
    ck_assert_msg(rc==SQLITE_OK, "reading key %d: %s", id*100+i,
                  sqlite3_errmsg(db));
    ck_assert_msg(v>=aLast[i], "writer %d key %d: acknowledged %d, holds %d",
                  id, id*100+i, aLast[i], v);
  }
  sqlite3_free(zAck);
  return nAck;
}

static pid_t mpSpawnLc(const char *zDb, int id, int ms, const char *zDir,
                       int iKill){
  char zId[16], zMs[16], zKill[16];
  char *zAck = sqlite3_mprintf("%s/ack.%d", zDir, id);
  const char *azArg[] = { "lcw", zDb, zId, zMs, zAck, zKill, 0 };
  pid_t pid;
  snprintf(zId, sizeof(zId), "%d", id);
  snprintf(zMs, sizeof(zMs), "%d", ms);
  snprintf(zKill, sizeof(zKill), "%d", iKill);
  pid = th_spawn(azArg);
  sqlite3_free(zAck);
  return pid;
}

/* The log directory of the store's one kv_log table. */
static char *mpLcDir(const char *zStore){
  char *zParent = sqlite3_mprintf("%s/kv_log", zStore), *zOut = 0;
  DIR *d = opendir(zParent);
  struct dirent *e;
  ck_assert_ptr_nonnull(d);
  while( zOut==0 && (e = readdir(d))!=0 ){
    if( e->d_name[0]>='0' && e->d_name[0]<='9' && strchr(e->d_name, '.')==0 ){
      zOut = sqlite3_mprintf("%s/%s", zParent, e->d_name);
    }
  }
  closedir(d);
  sqlite3_free(zParent);
  ck_assert_ptr_nonnull(zOut);
  return zOut;
}

/* What the log directory zLog holds: the M of its MANIFEST (0: none), the
** bytes of its log and merged files, and the leftovers of compactions
** (log files up to M, merged files the MANIFEST does not list,
** MANIFEST.tmp). */
typedef struct MpLc MpLc;
struct MpLc { unsigned M; long long nByte; int nLeft; int nFile; };
static MpLc mpLcScan(const char *zLog){
  MpLc r;
  unsigned aList[4096];
  unsigned n = 0, i;
  char *zMan = sqlite3_mprintf("%s/MANIFEST", zLog);
  FILE *f = fopen(zMan, "rb");
  DIR *d;
  struct dirent *e;
  memset(&r, 0, sizeof(r));
  if( f ){
    unsigned char a[24];
    if( fread(a, 1, 24, f)==24 ){
      r.M = a[8] | a[9]<<8 | a[10]<<16 | (unsigned)a[11]<<24;
      n = a[20] | a[21]<<8 | a[22]<<16 | (unsigned)a[23]<<24;
      for(i=0; i<n && i<4096; i++){
        unsigned char b[4];
        if( fread(b, 1, 4, f)!=4 ) break;
        aList[i] = b[0] | b[1]<<8 | b[2]<<16 | (unsigned)b[3]<<24;
      }
    }
    fclose(f);
  }
  d = opendir(zLog);
  ck_assert_ptr_nonnull(d);
  while( (e = readdir(d))!=0 ){
    unsigned v = (unsigned)strtoul(e->d_name, 0, 10);
    const char *zExt = strchr(e->d_name, '.');
    struct stat st;
    char *zPath;
    if( strcmp(e->d_name, "MANIFEST.tmp")==0 ){ r.nLeft++; continue; }
    if( zExt==0 || (strcmp(zExt, ".klog") && strcmp(zExt, ".kmrg")) ){
      continue;
    }
    zPath = sqlite3_mprintf("%s/%s", zLog, e->d_name);
    if( stat(zPath, &st)==0 ) r.nByte += st.st_size;
    sqlite3_free(zPath);
    r.nFile++;
    if( strcmp(zExt, ".klog")==0 ){
      if( v<=r.M ) r.nLeft++;
    }else{
      int bListed = 0;
      for(i=0; i<n; i++) if( aList[i]==v ) bListed = 1;
      if( !bListed ) r.nLeft++;
    }
  }
  closedir(d);
  sqlite3_free(zMan);
  return r;
}

/* Wait (up to ms) until the log directory's MANIFEST passes M: 1 if it
** did. */
static int mpLcWaitM(const char *zLog, unsigned M, int ms){
  int64_t iEnd = mpNowMs() + ms;
  while( mpLcScan(zLog).M<=M ){
    if( mpNowMs()>iEnd ) return 0;
    usleep(10000);
  }
  return 1;
}

/* lcread <db> <n>: reads keys 0..7 of table lc, which the parent wrote
** with MP_LC_SQL up to its n-th commit (key n%8), then writes keys
** 500..507 (n 1..8). */
static int mpLcRead(char **argv){
  sqlite3 *db = mpChildOpen(argv[1]);
  int n = atoi(argv[2]), k, rc;
  for(k=0; k<8; k++){
    int v = mpLcValue(db, k, &rc), want = n - ((n-k)%8+8)%8;
    if( v!=want ){
      fprintf(stderr, "lcread: key %d holds %d, not %d (%s)\n", k, v, want,
              rc ? sqlite3_errmsg(db) : "");
      return 5;
    }
  }
  for(k=0; k<8; k++){
    char zSql[200];
    sqlite3_snprintf(sizeof(zSql), zSql, MP_LC_SQL, 500+k, 8+k);
    if( mpExec(db, zSql) ){
      fprintf(stderr, "lcread: %s\n", sqlite3_errmsg(db));
      return 6;
    }
  }
  sqlite3_close(db);
  return 0;
}

/* lcro <db> <ms>: a read-only connection reads table lc until key 999
** holds the parent's last n (then keys 0..7 must hold its last values),
** checking on every read that each of keys 0..7 holds a value MP_LC_SQL
** wrote for it, and that those values never go back. */
static int mpLcReadOnly(char **argv){
  sqlite3 *db = mpRoOpen(argv[1], 1);
  int64_t iEnd = mpNowMs() + atoi(argv[2]);
  int aSeen[8], k, rc, nRead = 0;
  memset(aSeen, 0, sizeof(aSeen));
  if( db==0 ) return 2;
  sqlite3_exec(db, "PRAGMA busy_timeout=5000", 0, 0, 0);
  while( mpNowMs()<iEnd ){
    sqlite3_int64 nLast = mpInt(db, "SELECT value FROM lc WHERE key=999",
                                &rc);
    if( rc ){
      fprintf(stderr, "lcro: %s\n", sqlite3_errmsg(db));
      return 5;
    }
    for(k=0; k<8; k++){
      int v = mpLcValue(db, k, &rc);
      if( v<0 || v<aSeen[k] ){
        fprintf(stderr, "lcro: key %d holds %d after %d (%s)\n", k, v,
                aSeen[k], rc ? sqlite3_errmsg(db) : "");
        return 7;
      }
      aSeen[k] = v;
      if( nLast>0 && v!=nLast - ((nLast-k)%8+8)%8 ){
        fprintf(stderr, "lcro: key %d holds %d at the end (%lld)\n", k, v,
                (long long)nLast);
        return 8;
      }
    }
    nRead++;
    if( nLast>0 ) break;
    usleep(2000);
  }
  sqlite3_close(db);
  return mpNowMs()<iEnd ? 0 : 6;
}

/* lchold <db> <ready file>: opens the store (which turns shared when
** another process has it), reads table lc, creates the ready file, and
** stays until killed (60 s at most). */
static int mpLcHold(char **argv){
  sqlite3 *db = mpChildOpen(argv[1]);
  int rc, fd;
  mpInt(db, "SELECT count(*) FROM lc", &rc);
  if( rc ){
    fprintf(stderr, "lchold: %s\n", sqlite3_errmsg(db));
    return 5;
  }
  fd = open(argv[2], O_WRONLY|O_CREAT, 0644);
  if( fd<0 ) return 3;
  close(fd);
  sleep(60);
  sqlite3_close(db);
  return 0;
}

/* Start lchold and wait until it has the store open. */
static pid_t mpSpawnHold(const char *zDb, const char *zDir){
  char *zReady = sqlite3_mprintf("%s/hold.ready", zDir);
  const char *azArg[] = { "lchold", zDb, zReady, 0 };
  pid_t pid;
  unlink(zReady);
  pid = th_spawn(azArg);
  ck_assert_msg(mpWaitFile(zReady), "lchold did not open the store");
  sqlite3_free(zReady);
  return pid;
}

/* th_open with a busy timeout (other processes write). */
static sqlite3 *mpLcOpen(const char *zDb){
  sqlite3 *db = th_open(zDb);
  th_exec(db, "PRAGMA busy_timeout=5000");
  return db;
}

/* Commit n (1..) of the parent: key n%8, value n (MP_LC_SQL). */
static void mpLcParent(sqlite3 *db, int n){
  th_execf(db, MP_LC_SQL, n%8, n);
}

/* Two processes share a store; the first (which runs the store's
** background work) writes many versions of 8 keys to a kv_log table, and
** its compactions run meanwhile: the MANIFEST moves on, the log files on
** disk shrink back, no leftover stays; the other process then reads
** every key right and keeps writing, and a later open alone reads all. */
START_TEST(test_kvmp_log_compacts_while_shared){
  char *zDir = th_tmpdir("kvmp-lcshared");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *zLog, zN[16];
  const char *azRead[] = { "lcread", zDb, zN, 0 };
  sqlite3 *db;
  MpLc r0, r;
  long long nMax = 0;
  int n, st;
  pid_t pidIdle;
  int64_t iEnd;
  kv_log_test_file_size(2048);
  setenv("KVMP_LOG_FILE_SIZE", "2048", 1);
  db = mpLcOpen(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE lc USING kv_log");
  zLog = mpLcDir(zStore);
  pidIdle = mpSpawnHold(zDb, zDir);       /* the store turns shared */
  for(n=1; n<=8; n++) mpLcParent(db, n);
  r0 = mpLcScan(zLog);
  for(n=9; n<=600; n++){
    mpLcParent(db, n);
    r = mpLcScan(zLog);
    if( r.nByte>nMax ) nMax = r.nByte;
  }
  ck_assert_msg(mpLcWaitM(zLog, r0.M, 5000), "no compaction while shared");
  iEnd = mpNowMs() + 5000;
  while( (r = mpLcScan(zLog)).nLeft>0 || r.nByte>8*2048 ){
    ck_assert_msg(mpNowMs()<iEnd, "log files: %lld bytes, %d leftovers "
                  "(at most %lld bytes)", r.nByte, r.nLeft, nMax);
    usleep(10000);
  }
  /* 600 commits of 200-byte values were appended: bounded by compactions,
  ** the log files hold a fraction of it, during the run and after */
  ck_assert_msg(4*r.nByte<600*200 && nMax<600*200, "%lld bytes of log "
                "files, %lld at most", r.nByte, nMax);
  snprintf(zN, sizeof(zN), "%d", 600);
  {
    pid_t pid = th_spawn(azRead);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "lcread: %d", st);
  }
  for(n=0; n<8; n++){
    ck_assert_int_eq(th_intf(db, "SELECT value+0 FROM lc WHERE key=%d",
                             500+n), 8+n);
  }
  kill(pidIdle, SIGKILL);
  waitpid(pidIdle, &st, 0);
  sqlite3_close(db);
  unsetenv("KVMP_LOG_FILE_SIZE");
  db = th_open(zDb);                       /* alone */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM lc"), 16);
  for(n=0; n<8; n++){
    ck_assert_int_eq(th_intf(db, "SELECT value+0 FROM lc WHERE key=%d", n),
                     600 - ((600-n)%8));
  }
  sqlite3_close(db);
  ck_assert_int_eq(mpLcScan(zLog).nLeft, 0);
  kv_log_test_file_size(0);
  sqlite3_free(zLog);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* While the process that compacts (the first one) runs a compaction,
** another process appends to the same table: no commit either one saw
** acknowledged is lost, in the store shared or opened alone later. */
START_TEST(test_kvmp_log_appends_during_shared_compaction){
  char *zDir = th_tmpdir("kvmp-lcappend");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *zLog;
  sqlite3 *db;
  MpLc r0;
  pid_t pid;
  int n = 0, k, st = 0, nAck;
  kv_log_test_file_size(2048);
  setenv("KVMP_LOG_FILE_SIZE", "2048", 1);
  db = mpLcOpen(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE lc USING kv_log");
  zLog = mpLcDir(zStore);
  r0 = mpLcScan(zLog);
  pid = mpSpawnLc(zDb, 1, 2500, zDir, 0);
  mpWaitAcks(zDir, 1, 1);
  while( waitpid(pid, &st, WNOHANG)==0 ) mpLcParent(db, ++n);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "lcw: status %d", st);
  ck_assert_msg(mpLcScan(zLog).M>r0.M, "no compaction while shared");
  nAck = mpLcCheckAcks(db, zDir, 1);
  ck_assert_int_gt(nAck, 50);
  for(k=0; k<8; k++){
    ck_assert_int_eq(th_intf(db, "SELECT value+0 FROM lc WHERE key=%d", k),
                     n - ((n-k)%8+8)%8);
  }
  sqlite3_close(db);
  unsetenv("KVMP_LOG_FILE_SIZE");
  db = th_open(zDb);                       /* alone */
  ck_assert_int_eq(mpLcCheckAcks(db, zDir, 1), nAck);
  for(k=0; k<8; k++){
    ck_assert_int_eq(th_intf(db, "SELECT value+0 FROM lc WHERE key=%d", k),
                     n - ((n-k)%8+8)%8);
  }
  sqlite3_close(db);
  ck_assert_int_eq(mpLcScan(zLog).nLeft, 0);
  kv_log_test_file_size(0);
  sqlite3_free(zLog);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* The process that compacts a shared kv_log table is SIGKILLed at step
** _i of a compaction (KVLOG_STEP_ROLLED .. KVLOG_STEP_SWAPPED) while
** another process writes it: the other one takes the compactions over
** (the files of the dead one's are removed or loaded), a third process
** and a later open alone read every acknowledged commit, and no leftover
** file stays. */
START_TEST(test_kvmp_log_compactor_killed_at_each_step){
  char *zDir = th_tmpdir("kvmp-lckill");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  char *zLog;
  sqlite3 *db;
  pid_t pidA, pidB;
  int st = 0, nA, nB, bClean = 0;
  int64_t iEnd;
  MpLc r, rDeath;
  kv_log_test_file_size(2048);
  setenv("KVMP_LOG_FILE_SIZE", "2048", 1);
  db = mpLcOpen(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE lc USING kv_log");
  sqlite3_close(db);
  zLog = mpLcDir(zStore);
  pidA = mpSpawnLc(zDb, 1, 8000, zDir, _i);    /* alone first: it compacts */
  mpWaitAcks(zDir, 1, 1);
  pidB = mpSpawnLc(zDb, 2, 3500, zDir, 0);
  ck_assert_int_eq(waitpid(pidA, &st, 0), pidA);
  ck_assert_msg(WIFSIGNALED(st), "the compacting process was not killed "
                "at step %d (status %d)", _i, st);
  rDeath = mpLcScan(zLog);
  db = mpLcOpen(zDb);                      /* a third process, shared */
  nA = mpLcCheckAcks(db, zDir, 1);
  ck_assert_int_gt(nA, 0);
  sqlite3_close(db);
  iEnd = mpNowMs() + 3000;
  while( !bClean && mpNowMs()<iEnd ){      /* B compacts from now on */
    r = mpLcScan(zLog);
    bClean = r.M>rDeath.M && r.nLeft==0;
    usleep(5000);
  }
  ck_assert_msg(bClean, "step %d: M %u (%u at the kill), %d leftovers",
                _i, r.M, rDeath.M, r.nLeft);
  ck_assert_int_eq(waitpid(pidB, &st, 0), pidB);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "lcw: status %d", st);
  unsetenv("KVMP_LOG_FILE_SIZE");
  db = th_open(zDb);                       /* alone */
  ck_assert_int_eq(mpLcCheckAcks(db, zDir, 1), nA);
  nB = mpLcCheckAcks(db, zDir, 2);
  ck_assert_int_gt(nB, 0);
  sqlite3_close(db);
  ck_assert_int_eq(mpLcScan(zLog).nLeft, 0);
  kv_log_test_file_size(0);
  sqlite3_free(zLog);
  sqlite3_free(zStore);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A read-only process reads a kv_log table through compactions that the
** process writing it runs while a third one shares the store: every read
** holds values the writer wrote, never older than an earlier read, and
** the last ones at the end. */
START_TEST(test_kvmp_log_readonly_reads_through_shared_compactions){
  char *zDir = th_tmpdir("kvmp-lcro");
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  char *zStore = sqlite3_mprintf("%s/app.db-kv", zDir);
  const char *azRo[] = { "lcro", zDb, "30000", 0 };
  char *zLog;
  sqlite3 *db;
  MpLc r0;
  pid_t pidHold, pidRo;
  int n, st;
  kv_log_test_file_size(2048);
  setenv("KVMP_LOG_FILE_SIZE", "2048", 1);
  db = mpLcOpen(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE lc USING kv_log");
  zLog = mpLcDir(zStore);
  pidHold = mpSpawnHold(zDb, zDir);
  for(n=1; n<=8; n++) mpLcParent(db, n);
  r0 = mpLcScan(zLog);
  pidRo = th_spawn(azRo);
  for(n=9; n<=600; n++){
    mpLcParent(db, n);
    if( n%50==0 ) usleep(20000);
  }
  ck_assert_msg(mpLcWaitM(zLog, r0.M, 5000), "no compaction while shared");
  th_exec(db, "INSERT INTO lc VALUES(999, 600)");
  ck_assert_int_eq(waitpid(pidRo, &st, 0), pidRo);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "lcro: status %d", st);
  kill(pidHold, SIGKILL);
  waitpid(pidHold, &st, 0);
  sqlite3_close(db);
  unsetenv("KVMP_LOG_FILE_SIZE");
  kv_log_test_file_size(0);
  sqlite3_free(zLog);
  sqlite3_free(zStore);
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
  tcase_add_test(tc, test_kvmp_readonly_open_waits_for_segment_removal);
  tcase_add_test(tc, test_kvmp_readonly_shell_reads_log_while_app_writes);
  suite_add_tcase(s, tc);
  tc = tcase_create("roalone");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_roalone_closed_store_writes_nothing);
  tcase_add_test(tc, test_kvmp_roalone_replays_killed_writer_in_memory);
  tcase_add_test(tc, test_kvmp_roalone_writer_opens_while_it_reads);
  tcase_add_test(tc, test_kvmp_roalone_shell_and_read_only_mount);
  tcase_add_test(tc, test_kvmp_roalone_not_a_store);
  tcase_add_test(tc, test_kvmp_roalone_then_writer_in_same_process);
  suite_add_tcase(s, tc);
  tc = tcase_create("ddl");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_ddl_create_remove_while_shared);
  tcase_add_test(tc, test_kvmp_ddl_name_clash_and_memory_tables);
  tcase_add_test(tc, test_kvmp_ddl_creator_killed_before_publish);
  tcase_add_test(tc, test_kvmp_ddl_remover_killed_before_publish);
  tcase_add_test(tc, test_kvmp_ddl_readonly_process_follows);
  tcase_add_test(tc, test_kvmp_ddl_concurrent_creates_and_removes);
  suite_add_tcase(s, tc);
  tc = tcase_create("logshared");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_log_wal_bounded_in_long_shared_run);
  tcase_add_test(tc, test_kvmp_log_owner_killed_during_retirement);
  suite_add_tcase(s, tc);
  tc = tcase_create("rolong");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_readonly_open_through_long_run);
  tcase_add_test(tc, test_kvmp_log_readonly_open_through_long_run);
  suite_add_tcase(s, tc);
  tc = tcase_create("gid");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_gid_prepare_resolve_across_processes);
  tcase_add_test(tc, test_kvmp_log_gid_prepare_resolve_across_processes);
  tcase_add_test(tc, test_kvmp_gid_preparer_killed);
  tcase_add_test(tc, test_kvmp_gid_in_doubt_store_turns_shared);
  suite_add_tcase(s, tc);
  tc = tcase_create("logcompact");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_kvmp_log_compacts_while_shared);
  tcase_add_test(tc, test_kvmp_log_appends_during_shared_compaction);
  tcase_add_loop_test(tc, test_kvmp_log_compactor_killed_at_each_step,
                      KVLOG_STEP_ROLLED, KVLOG_STEP_SWAPPED+1);
  tcase_add_test(tc, test_kvmp_log_readonly_reads_through_shared_compactions);
  suite_add_tcase(s, tc);
  return s;
}
