/*
** check_lock.c -- the "lock" suite: a depot database behaves like an SQLite
** file for several processes and threads.  Each workload runs twice in the
** same test, on a depot database and on a plain file of the unix VFS in
** WAL mode (the oracle for "behaves like a file"), and both runs must give
** the same result:
**
**   - processes (fork(), not threads) with a busy timeout mixing BEGIN
**     IMMEDIATE read-modify-writes of shared counters, autocommit INSERTs
**     and UPDATEs, and deferred transactions that read, then write, and
**     retry on SQLITE_BUSY / SQLITE_BUSY_SNAPSHOT at their first write
**     (docs/SQL.md, "Writers": the only place a busy code reaches the
**     application).  Every other statement succeeds, the counters add up
**     exactly and every row is there;
**   - the same with a process SIGKILLed while it holds the write lock, or
**     at a random moment of its commits: the others go on within their busy
**     timeout, nothing of the dead one is half there, integrity_check and
**     depot_verify are clean;
**   - the two BEGIN IMMEDIATE processes: the second waits for the
**     first and both rows stand;
**   - threads of one process: own connections (default, FULLMUTEX,
**     NOMUTEX), one FULLMUTEX connection shared by threads,
**     sqlite3_enable_shared_cache(1) and cache=shared URIs (SQLite's
**     shared-cache semantics: table locks, SQLITE_LOCKED_SHAREDCACHE);
**   - locking_mode=EXCLUSIVE keeps another process's writer out (the oracle
**     there is a file in rollback-journal mode, where a reader's SHARED
**     lock does that);
**   - PRAGMA journal_mode=WAL/MEMORY/DELETE/OFF/TRUNCATE/PERSIST on main and
**     attached depot databases in normal and exclusive locking mode, with
**     the rows written after each read back from the store.
**
** Environment:
**   DEPOT_LOCK_OPS=N       operations per process or thread (default 40)
**   DEPOT_LOCK_KILLS=N     SIGKILL rounds (default 2)
**   DEPOT_LOCK_KILL_OPS=N  operations per worker of a SIGKILL round
**                          (default 40)
**   DEPOT_LOCK_BUSY_MS=N   busy timeout of the workers (default 10000)
** make torture runs this program with larger values (tests/check/local.mk).
**   DEPOT_TEST_STORE_URI=postgresql://...  the depot databases on that
**                          PostgreSQL server (tests/check/pg_suite.sh), in
**                          a schema named after each test's directory; the
**                          tests of the store file's own files stay out.
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"               /* depot_compact_background_pending() */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LK_COUNTERS 5             /* rows of the counters table */
#define LK_MAXWORKERS 8

static int lk_env(const char *zVar, int nDflt){
  const char *z = getenv(zVar);
  int n = z ? atoi(z) : 0;
  return n>0 ? n : nDflt;
}

static int lk_ops(void){ return th_scaled(lk_env("DEPOT_LOCK_OPS", 40), 4); }

/* The busy timeout of the workers.  Neither SQLite's busy handler nor the
** lock is fair: under writers that commit back to back, a waiter may find
** the lock taken at every poll; the long runs give them more time. */
static int lk_busy(void){
  return th_busy_ms(lk_env("DEPOT_LOCK_BUSY_MS", 10000));
}

/* ---- the two databases of a test: depot and the plain oracle ---- */

/* The store of directory zDir: <zDir>/store.depot, or with
** $DEPOT_TEST_STORE_URI that PostgreSQL server in a schema named after
** zDir. */
static char *lk_store_path(const char *zDir){
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  const char *zBase = strrchr(zDir, '/');
  if( zPg && zPg[0] ){
    return sqlite3_mprintf("%s&schema=%s", zPg, zBase ? zBase+1 : zDir);
  }
  return sqlite3_mprintf("%s/store.depot", zDir);
}

/* The depot URI of the store of zDir with the parameters zParams. */
static char *lk_depot_uri(const char *zDir, const char *zParams){
  char *zStore = lk_store_path(zDir);
  char *zUri;
  if( strncmp(zStore, "postgresql://", 13)==0 ){
    sqlite3_str *s = sqlite3_str_new(0);
    const char *z;
    sqlite3_str_appendf(s, "file:%s/app?vfs=depot&%s&store=", zDir, zParams);
    for(z=zStore; *z; z++){
      if( *z=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *z);
    }
    zUri = sqlite3_str_finish(s);
  }else{
    zUri = sqlite3_mprintf("file:%s?vfs=depot&%s", zStore, zParams);
  }
  sqlite3_free(zStore);
  return zUri;
}

/* One database a workload runs on. */
typedef struct Target Target;
struct Target {
  const char *zKind;        /* "depot" or "unix" */
  char *zName;              /* what sqlite3_open_v2 is given */
  char *zStore;             /* the depot store file (depot only) */
  int bDepot;
};

static void target_init(Target *t, const char *zDir, int bDepot,
                        const char *zDb){
  memset(t, 0, sizeof(*t));
  t->bDepot = bDepot;
  t->zKind = bDepot ? "depot" : "unix";
  if( bDepot ){
    char *zP = sqlite3_mprintf("db=%s&store_sync=normal", zDb);
    t->zStore = lk_store_path(zDir);
    t->zName = lk_depot_uri(zDir, zP);
    sqlite3_free(zP);
  }else{
    t->zName = sqlite3_mprintf("file:%s/%s.db?vfs=unix", zDir, zDb);
  }
}

static void target_free(Target *t){
  sqlite3_free(t->zName);
  sqlite3_free(t->zStore);
}

/* Open t with flags (0: READWRITE|CREATE), a busy timeout of ms, extended
** result codes; NULL on failure (no Check assertion: children use it). */
static sqlite3 *target_open_flags(const Target *t, int flags, int ms){
  sqlite3 *db = 0;
  if( flags==0 ) flags = SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE;
  if( sqlite3_open_v2(t->zName, &db, flags|SQLITE_OPEN_URI, 0)!=SQLITE_OK ){
    sqlite3_close(db);
    return 0;
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, ms);
  return db;
}

static sqlite3 *target_open(const Target *t){
  sqlite3 *db = target_open_flags(t, 0, lk_busy());
  ck_assert_msg(db!=0, "cannot open %s", t->zName);
  return db;
}

static void lk_setup(void){
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
}

/* The schema of the workloads; the plain file in WAL mode, as the depot
** store itself is (docs/SQL.md compares depot with a file in WAL mode). */
static void target_create(const Target *t, int bWal){
  sqlite3 *db = target_open(t);
  int i;
  if( !t->bDepot ){
    th_exec(db, bWal ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE");
    th_exec(db, "PRAGMA synchronous=NORMAL");
  }
  th_exec(db, "CREATE TABLE counters(id INTEGER PRIMARY KEY, n INTEGER);"
              "CREATE TABLE log(who INTEGER, i INTEGER, PRIMARY KEY(who, i))");
  for(i=0; i<LK_COUNTERS; i++){
    char *z = sqlite3_mprintf("INSERT INTO counters VALUES(%d, 0)", i);
    th_exec(db, z);
    sqlite3_free(z);
  }
  sqlite3_close(db);
}

/* ---- the scripted workload ---- */

/* What one worker (process or thread) saw. */
typedef struct LkStats LkStats;
struct LkStats {
  int nDone;                /* operations that committed */
  int nBusy;                /* deferred first writes: SQLITE_BUSY */
  int nSnapshot;            /* deferred first writes: SQLITE_BUSY_SNAPSHOT */
  int nLocked;              /* SQLITE_LOCKED retries (shared cache only) */
  int nFail;                /* anything else: the test fails */
  char zErr[256];           /* the first failure */
};

static void lk_fail(LkStats *s, sqlite3 *db, const char *zWhat, int rc){
  if( s->nFail++==0 ){
    snprintf(s->zErr, sizeof(s->zErr), "%s: rc=%d %s", zWhat, rc,
             db ? sqlite3_errmsg(db) : "");
  }
}

/* Run zSql, SQLITE_OK or the extended code. */
static int lk_run(sqlite3 *db, const char *zSql){
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  return rc==SQLITE_OK ? rc : sqlite3_extended_errcode(db);
}

/* The value of counter k, or -1 with *pRc set. */
static sqlite3_int64 lk_read(sqlite3 *db, int k, int *pRc){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 n = -1;
  int rc = sqlite3_prepare_v2(db, "SELECT n FROM counters WHERE id=?1", -1,
                              &pStmt, 0);
  if( rc==SQLITE_OK ){
    sqlite3_bind_int(pStmt, 1, k);
    rc = sqlite3_step(pStmt);
    if( rc==SQLITE_ROW ){
      n = sqlite3_column_int64(pStmt, 0);
      rc = SQLITE_OK;
    }else{
      rc = sqlite3_extended_errcode(db);
    }
  }
  sqlite3_finalize(pStmt);
  *pRc = rc;
  return n;
}

/* The counter an operation increments: a fixed function of worker and
** operation, so both runs of a test expect the same values. */
static int lk_counter(int iWho, int i){ return (iWho*7 + i) % LK_COUNTERS; }

/* A shared-cache table lock (SQLite returns it without calling the busy
** handler; an application retries): only allowed with bLocked. */
static int lk_is_locked(int rc){ return (rc&0xff)==SQLITE_LOCKED; }

/* Operation i of worker iWho: one transaction that increments one counter
** and adds one log row, in one of three styles.  Returns 0 when it
** committed, 1 when the whole operation must be retried (a deferred
** transaction's first write found the lock held or its snapshot stale, or,
** with bLocked, a shared-cache table lock), -1 on any other failure. */
static int lk_op(sqlite3 *db, int iWho, int i, int bLocked, LkStats *s){
  int k = lk_counter(iWho, i), rc;
  char *z = 0;
  const char *zStep = "BEGIN";
  struct timespec t0, t1;
  sqlite3_int64 n;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  switch( i%3 ){
    case 0:               /* BEGIN IMMEDIATE read-modify-write */
      rc = lk_run(db, "BEGIN IMMEDIATE");
      if( rc==SQLITE_OK ){ zStep = "read"; n = lk_read(db, k, &rc); }
      if( rc==SQLITE_OK ){
        zStep = "write and COMMIT";
        z = sqlite3_mprintf("UPDATE counters SET n=%lld WHERE id=%d;"
                            "INSERT INTO log VALUES(%d, %d); COMMIT",
                            n+1, k, iWho, i);
        rc = lk_run(db, z);
      }
      break;
    case 1:               /* autocommit statements */
      zStep = "INSERT";
      z = sqlite3_mprintf("INSERT INTO log VALUES(%d, %d)", iWho, i);
      rc = lk_run(db, z);
      if( rc!=SQLITE_OK && bLocked && lk_is_locked(rc) ){
        s->nLocked++;                  /* nothing done: retry it all */
        sqlite3_free(z);
        return 1;
      }
      if( rc==SQLITE_OK ){
        sqlite3_free(z);
        zStep = "UPDATE";
        z = sqlite3_mprintf("UPDATE counters SET n=n+1 WHERE id=%d", k);
        rc = lk_run(db, z);
        if( rc!=SQLITE_OK && bLocked && lk_is_locked(rc) ){
          /* the row is in: only the increment is retried */
          int nTry;
          for(nTry=0; nTry<100000 && lk_is_locked(rc); nTry++){
            s->nLocked++;
            sqlite3_sleep(1);
            rc = lk_run(db, z);
          }
        }
      }
      break;
    default:              /* deferred: read, then write */
      rc = lk_run(db, "BEGIN");
      if( rc==SQLITE_OK ){ zStep = "read"; n = lk_read(db, k, &rc); }
      if( rc==SQLITE_OK ){
        zStep = "first write";
        z = sqlite3_mprintf("UPDATE counters SET n=%lld WHERE id=%d",
                            n+1, k);
        rc = lk_run(db, z);
        if( rc==SQLITE_BUSY || rc==SQLITE_BUSY_SNAPSHOT ){
          if( rc==SQLITE_BUSY ) s->nBusy++; else s->nSnapshot++;
          lk_run(db, "ROLLBACK");
          sqlite3_free(z);
          return 1;
        }
      }
      if( rc==SQLITE_OK ){
        sqlite3_free(z);
        zStep = "INSERT and COMMIT";
        z = sqlite3_mprintf("INSERT INTO log VALUES(%d, %d); COMMIT",
                            iWho, i);
        rc = lk_run(db, z);
      }
      break;
  }
  sqlite3_free(z);
  if( rc==SQLITE_OK ){
    s->nDone++;
    return 0;
  }
  if( !sqlite3_get_autocommit(db) ) lk_run(db, "ROLLBACK");
  if( bLocked && lk_is_locked(rc) && i%3!=1 ){
    s->nLocked++;
    return 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  z = sqlite3_mprintf("%s, %s (op %d, %.0f ms into it)",
      i%3==0 ? "BEGIN IMMEDIATE transaction" :
      i%3==1 ? "autocommit statements" : "deferred transaction", zStep, i,
      (t1.tv_sec-t0.tv_sec)*1e3 + (t1.tv_nsec-t0.tv_nsec)/1e6);
  lk_fail(s, db, z, rc);
  sqlite3_free(z);
  return -1;
}

/* Worker iWho's nOps operations on db, each retried as lk_op() says. */
static void lk_work(sqlite3 *db, int iWho, int nOps, int bLocked,
                    LkStats *s){
  int i;
  for(i=0; i<nOps && s->nFail==0; i++){
    int nTry = 0, r;
    while( (r = lk_op(db, iWho, i, bLocked, s))==1 ){
      if( ++nTry>100000 ){
        lk_fail(s, db, "retried 100000 times", SQLITE_BUSY);
        return;
      }
      sqlite3_sleep(1);
    }
  }
}

/* The counters and log rows nWorkers workers of nOps operations leave. */
static void lk_assert_result(const Target *t, int nWorkers, int nOps,
                             const char *zCtx){
  sqlite3 *db = target_open(t);
  sqlite3_int64 aWant[LK_COUNTERS];
  int w, i;
  char *z;
  memset(aWant, 0, sizeof(aWant));
  for(w=0; w<nWorkers; w++){
    for(i=0; i<nOps; i++) aWant[lk_counter(w, i)]++;
  }
  for(i=0; i<LK_COUNTERS; i++){
    sqlite3_int64 n = th_intf(db, "SELECT n FROM counters WHERE id=%d", i);
    ck_assert_msg(n==aWant[i], "%s on %s: counter %d is %lld, not %lld",
                  zCtx, t->zKind, i, n, aWant[i]);
  }
  for(w=0; w<nWorkers; w++){
    sqlite3_int64 n = th_intf(db, "SELECT count(*) FROM log WHERE who=%d", w);
    ck_assert_msg(n==nOps, "%s on %s: worker %d has %lld rows, not %d",
                  zCtx, t->zKind, w, n, nOps);
  }
  z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
  sqlite3_close(db);
  if( t->bDepot ){
    sqlite3 *m = th_open(":memory:");
    ck_assert_int_eq(th_intf(m, "SELECT count(*) FROM depot_verify(%Q)",
                             t->zStore), 0);
    sqlite3_close(m);
  }
}

/* A digest of the database's rows, to compare the depot run with the
** oracle's. */
static char *lk_digest(const Target *t){
  sqlite3 *db = target_open(t);
  char *z = th_text(db, "SELECT (SELECT group_concat(id||'='||n, ',') FROM"
      " (SELECT * FROM counters ORDER BY id)) || ' / ' || (SELECT"
      " group_concat(who||':'||c, ',') FROM (SELECT who, count(*) c FROM log"
      " GROUP BY who ORDER BY who))");
  sqlite3_close(db);
  return z;
}

/* ---- processes ---- */

/* Fork a worker process that runs the workload on its own connection and
** writes its LkStats to fd; it exits 0 when nothing failed. */
static pid_t lk_spawn(const Target *t, int iWho, int nOps, int fd){
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    LkStats s;
    sqlite3 *db;
    memset(&s, 0, sizeof(s));
    db = target_open_flags(t, SQLITE_OPEN_READWRITE, lk_busy());
    if( db==0 ){
      lk_fail(&s, 0, "open", SQLITE_CANTOPEN);
    }else{
      lk_work(db, iWho, nOps, 0, &s);
      if( sqlite3_close(db)!=SQLITE_OK ) lk_fail(&s, db, "close", 0);
    }
    if( write(fd, &s, sizeof(s))!=(ssize_t)sizeof(s) ) _exit(3);
    _exit(s.nFail ? 1 : 0);
  }
  return pid;
}

/* Wait for the workers and sum their stats; fails the test for any worker
** that failed. */
static void lk_reap(const pid_t *aPid, int n, int fd, LkStats *pSum,
                    const char *zKind){
  int i;
  memset(pSum, 0, sizeof(*pSum));
  for(i=0; i<n; i++){
    LkStats s;
    ck_assert_int_eq(read(fd, &s, sizeof(s)), (int)sizeof(s));
    ck_assert_msg(s.nFail==0, "%s worker: %d failures, first: %s", zKind,
                  s.nFail, s.zErr);
    pSum->nDone += s.nDone;
    pSum->nBusy += s.nBusy;
    pSum->nSnapshot += s.nSnapshot;
  }
  for(i=0; i<n; i++){
    int st;
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "%s worker %d: %d",
                  zKind, i, st);
  }
}

/* nProc processes run the workload on t; the result must add up. */
static void lk_run_processes(const Target *t, int nProc, int nOps,
                             LkStats *pSum){
  pid_t aPid[LK_MAXWORKERS];
  int aFd[2], i;
  ck_assert_int_eq(pipe(aFd), 0);
  for(i=0; i<nProc; i++) aPid[i] = lk_spawn(t, i, nOps, aFd[1]);
  close(aFd[1]);
  lk_reap(aPid, nProc, aFd[0], pSum, t->zKind);
  close(aFd[0]);
  ck_assert_int_eq(pSum->nDone, nProc*nOps);
  lk_assert_result(t, nProc, nOps, "processes");
}

/* Four processes, the mixed workload: no statement fails except a deferred
** transaction's first write, which is retried; the counters add up; depot
** and the file give the same rows. */
START_TEST(test_lock_processes_mixed_workload_adds_up_like_a_file){
  char *zDir = th_tmpdir("lock-procs");
  int nOps = lk_ops(), b;
  char *az[2];
  lk_setup();
  for(b=0; b<2; b++){
    Target t;
    LkStats s;
    target_init(&t, zDir, b==0, "app");
    target_create(&t, 1);
    lk_run_processes(&t, 4, nOps, &s);
    if( getenv("DEPOT_TEST_VERBOSE") ){
      fprintf(stderr, "lock: %s: %d ops, deferred retries %d busy %d"
              " snapshot\n", t.zKind, s.nDone, s.nBusy, s.nSnapshot);
    }
    az[b] = lk_digest(&t);
    target_free(&t);
  }
  ck_assert_str_eq(az[0], az[1]);
  sqlite3_free(az[0]);
  sqlite3_free(az[1]);
  sqlite3_free(zDir);
}
END_TEST

/* Three processes of 300 autocommit INSERTs each (the report):
** every insert succeeds, on depot as on the file. */
START_TEST(test_lock_autocommit_inserts_of_processes_all_succeed){
  char *zDir = th_tmpdir("lock-ins");
  int nIns = th_scaled(lk_env("DEPOT_LOCK_OPS", 40)*3, 10), b;
  lk_setup();
  for(b=0; b<2; b++){
    Target t;
    pid_t aPid[3];
    int i, st;
    sqlite3 *db;
    target_init(&t, zDir, b==0, "ins");
    target_create(&t, 1);
    for(i=0; i<3; i++){
      aPid[i] = fork();
      ck_assert_int_ge(aPid[i], 0);
      if( aPid[i]==0 ){
        sqlite3 *c = target_open_flags(&t, SQLITE_OPEN_READWRITE,
                                       lk_busy());
        int j;
        if( c==0 ) _exit(2);
        for(j=0; j<nIns; j++){
          char *z = sqlite3_mprintf("INSERT INTO log VALUES(%d, %d)", i, j);
          int rc = sqlite3_exec(c, z, 0, 0, 0);
          sqlite3_free(z);
          if( rc!=SQLITE_OK ){
            fprintf(stderr, "insert %d of process %d: %s\n", j, i,
                    sqlite3_errmsg(c));
            _exit(1);
          }
        }
        sqlite3_close(c);
        _exit(0);
      }
    }
    for(i=0; i<3; i++){
      ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
      ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "%s process %d: %d",
                    t.zKind, i, st);
    }
    db = target_open(&t);
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM log"), 3*nIns);
    sqlite3_close(db);
    target_free(&t);
  }
  sqlite3_free(zDir);
}
END_TEST

/* The scenario: A takes BEGIN IMMEDIATE and works for a while
** before COMMIT; B's BEGIN IMMEDIATE, begun meanwhile with a busy timeout,
** waits until A commits and then sees A's row; both rows stand. */
START_TEST(test_lock_begin_immediate_of_other_process_waits_for_commit){
  char *zDir = th_tmpdir("lock-wait");
  int b;
  lk_setup();
  for(b=0; b<2; b++){
    Target t;
    pid_t pid;
    int aGo[2], aReady[2], st;
    char c = 0;
    sqlite3 *a;
    target_init(&t, zDir, b==0, "wait");
    target_create(&t, 1);
    ck_assert_int_eq(pipe(aGo), 0);
    ck_assert_int_eq(pipe(aReady), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if( pid==0 ){
      sqlite3 *db;
      int rc, rcRead = 0;
      sqlite3_int64 nA;
      if( read(aGo[0], &c, 1)!=1 ) _exit(2);
      db = target_open_flags(&t, SQLITE_OPEN_READWRITE, lk_busy());
      if( db==0 ) _exit(3);
      if( write(aReady[1], "r", 1)!=1 ) _exit(4);
      rc = sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0);
      if( rc!=SQLITE_OK ) _exit(5);
      nA = lk_read(db, 0, &rcRead);          /* A set counter 0 to 1 */
      if( rcRead!=SQLITE_OK || nA!=1 ) _exit(6);
      rc = sqlite3_exec(db, "INSERT INTO log VALUES(2, 0); COMMIT", 0, 0, 0);
      sqlite3_close(db);
      _exit(rc==SQLITE_OK ? 0 : 7);
    }
    a = target_open(&t);
    th_exec(a, "BEGIN IMMEDIATE; INSERT INTO log VALUES(1, 0);"
               "UPDATE counters SET n=1 WHERE id=0");
    ck_assert_int_eq(write(aGo[1], "g", 1), 1);
    ck_assert_int_eq(read(aReady[0], &c, 1), 1);
    usleep(300000);             /* B is in BEGIN IMMEDIATE by now */
    th_exec(a, "COMMIT");
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "%s: B exited %d",
                  t.zKind, st);
    ck_assert_int_eq(th_int(a, "SELECT count(*) FROM log"), 2);
    sqlite3_close(a);
    close(aGo[0]); close(aGo[1]); close(aReady[0]); close(aReady[1]);
    target_free(&t);
  }
  sqlite3_free(zDir);
}
END_TEST

/* A deferred transaction that read and then finds the lock held, or its
** snapshot overtaken, gets SQLITE_BUSY / SQLITE_BUSY_SNAPSHOT at its
** first write, on depot as on the file, and nothing of it is stored. */
START_TEST(test_lock_deferred_writer_fails_at_first_write_like_a_file){
  char *zDir = th_tmpdir("lock-deferred");
  int b;
  lk_setup();
  for(b=0; b<2; b++){
    Target t;
    sqlite3 *a, *c;
    target_init(&t, zDir, b==0, "deferred");
    target_create(&t, 1);
    a = target_open(&t);
    c = target_open(&t);
    sqlite3_busy_timeout(c, 50);
    /* the lock is held: SQLITE_BUSY, without the busy handler's wait */
    th_exec(a, "BEGIN IMMEDIATE; INSERT INTO log VALUES(1, 1)");
    th_exec(c, "BEGIN");
    ck_assert_int_eq(th_int(c, "SELECT count(*) FROM log"), 0);
    ck_assert_int_eq(lk_run(c, "INSERT INTO log VALUES(2, 1)"), SQLITE_BUSY);
    th_exec(a, "COMMIT");
    /* the lock is free now, the snapshot stale: SQLITE_BUSY_SNAPSHOT */
    ck_assert_int_eq(lk_run(c, "INSERT INTO log VALUES(2, 1)"),
                     SQLITE_BUSY_SNAPSHOT);
    th_exec(c, "ROLLBACK");
    /* retried as a new transaction, it goes through */
    th_exec(c, "BEGIN; INSERT INTO log VALUES(2, 1); COMMIT");
    ck_assert_int_eq(th_int(a, "SELECT count(*) FROM log"), 2);
    sqlite3_close(a);
    sqlite3_close(c);
    target_free(&t);
  }
  sqlite3_free(zDir);
}
END_TEST

/* ---- SIGKILL ---- */

/* A process that takes the write lock, writes, tells the parent (fd) and
** waits to be killed. */
static pid_t lk_spawn_holder(const Target *t, int fd){
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *db = target_open_flags(t, SQLITE_OPEN_READWRITE,
                                    lk_busy());
    if( db==0 ) _exit(2);
    if( sqlite3_exec(db, "BEGIN IMMEDIATE;"
          "UPDATE counters SET n=n+1000000;"
          "INSERT INTO log SELECT 99, value FROM (WITH RECURSIVE g(value) AS"
          " (SELECT 1 UNION ALL SELECT value+1 FROM g WHERE value<2000)"
          " SELECT value FROM g)", 0, 0, 0)!=SQLITE_OK ){
      _exit(3);
    }
    if( write(fd, "L", 1)!=1 ) _exit(4);
    for(;;) pause();
  }
  return pid;
}

/* A process that commits transactions in a loop until killed: each adds
** one to counter 0 and one row of worker 98. */
static pid_t lk_spawn_committer(const Target *t, int fd){
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *db = target_open_flags(t, SQLITE_OPEN_READWRITE,
                                    lk_busy());
    int i;
    if( db==0 ) _exit(2);
    if( write(fd, "C", 1)!=1 ) _exit(4);
    for(i=0; ; i++){
      char *z = sqlite3_mprintf("BEGIN IMMEDIATE;"
          "UPDATE counters SET n=n+1 WHERE id=0;"
          "INSERT INTO log VALUES(98, %d); COMMIT", i);
      int rc = sqlite3_exec(db, z, 0, 0, 0);
      sqlite3_free(z);
      if( rc!=SQLITE_OK ) _exit(5);
    }
  }
  return pid;
}

/* Workers run while one process is killed holding the write lock and
** another is killed at a random moment of its commits: every worker
** finishes, the held transaction left nothing, each commit of the killed
** committer is whole (counter 0 is the workers' increments plus its rows),
** and the database checks clean. */
static void lk_kill_round(const Target *t, int iRound, int nOps){
  pid_t aPid[3], pidHold, pidCommit;
  int aFd[2], aSig[2], i, st;
  LkStats s;
  sqlite3 *db;
  sqlite3_int64 nRows, n0, nWant0 = 0;
  char c = 0, *z;
  ck_assert_int_eq(pipe(aFd), 0);
  ck_assert_int_eq(pipe(aSig), 0);
  pidHold = lk_spawn_holder(t, aSig[1]);
  ck_assert_int_eq(read(aSig[0], &c, 1), 1);
  for(i=0; i<3; i++) aPid[i] = lk_spawn(t, i, nOps, aFd[1]);
  pidCommit = lk_spawn_committer(t, aSig[1]);
  ck_assert_int_eq(read(aSig[0], &c, 1), 1);
  usleep(20000 + (iRound*7919)%80000);   /* the workers wait meanwhile */
  kill(pidHold, SIGKILL);
  ck_assert_int_eq(waitpid(pidHold, &st, 0), pidHold);
  ck_assert(WIFSIGNALED(st));
  usleep(1000 + (iRound*104729)%50000);
  kill(pidCommit, SIGKILL);
  ck_assert_int_eq(waitpid(pidCommit, &st, 0), pidCommit);
  close(aFd[1]);
  lk_reap(aPid, 3, aFd[0], &s, t->zKind);
  close(aFd[0]);
  close(aSig[0]);
  close(aSig[1]);
  db = target_open(t);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM log WHERE who=99"), 0);
  nRows = th_int(db, "SELECT count(*) FROM log WHERE who=98");
  for(i=0; i<3*nOps; i++) if( lk_counter(i/nOps, i%nOps)==0 ) nWant0++;
  n0 = th_int(db, "SELECT n FROM counters WHERE id=0");
  ck_assert_msg(n0==nWant0+nRows, "%s: counter 0 is %lld, workers %lld +"
                " committer rows %lld", t->zKind, n0, nWant0, nRows);
  /* take the committer's share out: the rest is the workers' */
  z = sqlite3_mprintf("DELETE FROM log WHERE who=98;"
                      "UPDATE counters SET n=n-%lld WHERE id=0", nRows);
  th_exec(db, z);
  sqlite3_free(z);
  sqlite3_close(db);
  lk_assert_result(t, 3, nOps, "after SIGKILL");
}

START_TEST(test_lock_sigkill_of_lock_holder_lets_others_go_on){
  char *zDir = th_tmpdir("lock-kill");
  int nKill = lk_env("DEPOT_LOCK_KILLS", 2), b, r;
  int nOps = th_scaled(lk_env("DEPOT_LOCK_KILL_OPS", 40), 4);
  if( th_under_tsan() ) return;
  lk_setup();
  for(r=0; r<nKill; r++){
    for(b=0; b<2; b++){
      Target t;
      char zDb[32];
      snprintf(zDb, sizeof(zDb), "kill%d", r);
      target_init(&t, zDir, b==0, zDb);
      target_create(&t, 1);
      lk_kill_round(&t, r, nOps);
      target_free(&t);
    }
  }
  sqlite3_free(zDir);
}
END_TEST

/* A process that has run the background compactor (compact_after=1: a
** wake after every commit) forks a child that writes: the child commits
** and wakes a compactor of its own instead of waiting forever on the
** parent's thread (which a fork does not copy). */
START_TEST(test_lock_child_forked_after_background_compaction_writes){
  char *zDir = th_tmpdir("lock-cmpfork");
  char *zUri = lk_depot_uri(zDir, "db=c&compact_after=1&store_sync=normal");
  sqlite3 *db;
  pid_t pid;
  int i, st;
  /* ThreadSanitizer refuses a thread started after a fork of a process
  ** with threads, which is what this test makes the child do */
  if( th_under_tsan() ){
    sqlite3_free(zUri);
    sqlite3_free(zDir);
    return;
  }
  lk_setup();
  db = th_open(zUri);
  sqlite3_busy_timeout(db, lk_busy());
  th_exec(db, "CREATE TABLE t(a)");
  for(i=0; i<20; i++) th_exec(db, "INSERT INTO t VALUES(1)");
  for(i=0; i<10000 && (depot_compact_background_runs()==0
                       || depot_compact_background_pending()>0); i++){
    usleep(1000);
  }
  ck_assert_int_gt(depot_compact_background_runs(), 0);
  usleep(20000);               /* the thread waits for work again */
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *c = 0;
    int rc = sqlite3_open_v2(zUri, &c, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI,
                             0);
    if( rc==SQLITE_OK ) sqlite3_busy_timeout(c, lk_busy());
    for(i=0; rc==SQLITE_OK && i<20; i++){
      rc = sqlite3_exec(c, "INSERT INTO t VALUES(2)", 0, 0, 0);
    }
    sqlite3_close(c);
    _exit(rc==SQLITE_OK ? 0 : 1);
  }
  th_exec(db, "INSERT INTO t VALUES(1)");
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child: %d", st);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 41);
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

/* ---- exclusive locking mode ---- */

/* Child: one INSERT with a short busy timeout; exits with its result code
** (0 committed, 5 SQLITE_BUSY, 1 anything else). */
static int lk_try_insert_in_child(const Target *t, int iRow){
  pid_t pid = fork();
  int st;
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *db = target_open_flags(t, SQLITE_OPEN_READWRITE, 100);
    char *z = sqlite3_mprintf("INSERT INTO log VALUES(7, %d)", iRow);
    int rc;
    if( db==0 ) _exit(2);
    rc = sqlite3_exec(db, z, 0, 0, 0);
    sqlite3_close(db);
    _exit(rc==SQLITE_OK ? 0 : (rc==SQLITE_BUSY ? 5 : 1));
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  return WEXITSTATUS(st);
}

/* A connection in locking_mode=EXCLUSIVE that has written, or read, keeps
** another process's writer out (SQLITE_BUSY once its busy timeout runs
** out) until it leaves the mode and touches the database again, or
** closes; the oracle is a file in rollback-journal mode. */
START_TEST(test_lock_exclusive_locking_mode_keeps_other_process_out){
  char *zDir = th_tmpdir("lock-excl");
  int b;
  lk_setup();
  for(b=0; b<2; b++){
    Target t;
    sqlite3 *x;
    target_init(&t, zDir, b==0, "excl");
    target_create(&t, 0);
    /* after a write */
    x = target_open(&t);
    th_exec(x, "PRAGMA locking_mode=EXCLUSIVE; INSERT INTO log VALUES(1, 1)");
    ck_assert_int_eq(lk_try_insert_in_child(&t, 1), 5);
    th_exec(x, "INSERT INTO log VALUES(1, 2)");
    ck_assert_int_eq(lk_try_insert_in_child(&t, 2), 5);
    th_exec(x, "PRAGMA locking_mode=NORMAL");
    ck_assert_int_eq(th_int(x, "SELECT count(*) FROM log"), 2);
    ck_assert_int_eq(lk_try_insert_in_child(&t, 3), 0);
    /* after a read only */
    th_exec(x, "PRAGMA locking_mode=EXCLUSIVE");
    ck_assert_int_eq(th_int(x, "SELECT count(*) FROM log"), 3);
    ck_assert_int_eq(lk_try_insert_in_child(&t, 4), 5);
    th_exec(x, "INSERT INTO log VALUES(1, 3)");   /* its own write goes on */
    ck_assert_int_eq(lk_try_insert_in_child(&t, 5), 5);
    sqlite3_close(x);                           /* closing releases */
    ck_assert_int_eq(lk_try_insert_in_child(&t, 6), 0);
    x = target_open(&t);
    ck_assert_int_eq(th_int(x, "SELECT count(*) FROM log"), 5);
    sqlite3_close(x);
    target_free(&t);
  }
  sqlite3_free(zDir);
}
END_TEST

/* ---- threads ---- */

typedef struct LkThread LkThread;
struct LkThread {
  const Target *t;
  sqlite3 *db;              /* a connection shared by the threads, or 0 */
  int flags;                /* open flags of a thread's own connection */
  int iWho, nOps;
  int bLocked;              /* shared cache: retry SQLITE_LOCKED */
  LkStats s;
};

static void *lk_thread_main(void *pArg){
  LkThread *p = (LkThread*)pArg;
  sqlite3 *db = p->db;
  if( db==0 ){
    db = target_open_flags(p->t, p->flags, lk_busy());
    if( db==0 ){
      lk_fail(&p->s, 0, "open", SQLITE_CANTOPEN);
      return 0;
    }
  }
  if( p->db ){
    /* one connection, many threads: autocommit statements only */
    int i;
    for(i=0; i<p->nOps && p->s.nFail==0; i++){
      char *z = sqlite3_mprintf("INSERT INTO log VALUES(%d, %d);", p->iWho,
                                i);
      int rc = lk_run(db, z);
      sqlite3_free(z);
      if( rc==SQLITE_OK ){
        z = sqlite3_mprintf("UPDATE counters SET n=n+1 WHERE id=%d",
                            lk_counter(p->iWho, i));
        rc = lk_run(db, z);
        sqlite3_free(z);
      }
      if( rc!=SQLITE_OK ) lk_fail(&p->s, db, "shared connection", rc);
      else p->s.nDone++;
    }
  }else{
    lk_work(db, p->iWho, p->nOps, p->bLocked, &p->s);
    if( sqlite3_close(db)!=SQLITE_OK ) lk_fail(&p->s, db, "close", 0);
  }
  return 0;
}

/* nThread threads run the workload on t; see LkThread. */
static void lk_run_threads(const Target *t, int nThread, int flags,
                           sqlite3 *dbShared, int bLocked, int nOps){
  pthread_t aTid[LK_MAXWORKERS];
  LkThread aT[LK_MAXWORKERS];
  int i;
  for(i=0; i<nThread; i++){
    memset(&aT[i], 0, sizeof(aT[i]));
    aT[i].t = t;
    aT[i].db = dbShared;
    aT[i].flags = flags;
    aT[i].iWho = i;
    aT[i].nOps = nOps;
    aT[i].bLocked = bLocked;
    ck_assert_int_eq(pthread_create(&aTid[i], 0, lk_thread_main, &aT[i]), 0);
  }
  for(i=0; i<nThread; i++){
    ck_assert_int_eq(pthread_join(aTid[i], 0), 0);
    ck_assert_msg(aT[i].s.nFail==0, "%s thread %d: %s", t->zKind, i,
                  aT[i].s.zErr);
    ck_assert_int_eq(aT[i].s.nDone, nOps);
  }
}

/* Open flags of each thread's own connection, by loop index. */
static const int aThreadFlags[] = {
  SQLITE_OPEN_READWRITE,
  SQLITE_OPEN_READWRITE|SQLITE_OPEN_FULLMUTEX,
  SQLITE_OPEN_READWRITE|SQLITE_OPEN_NOMUTEX,
};

/* Threads of one process, each with its own connection (opened with the
** flags of the loop index): the mixed workload adds up like on a file. */
START_TEST(test_lock_threads_with_own_connections_add_up_like_a_file){
  char *zDir = th_tmpdir("lock-threads");
  int nOps = lk_ops(), b;
  char *az[2];
  lk_setup();
  for(b=0; b<2; b++){
    Target t;
    target_init(&t, zDir, b==0, "threads");
    target_create(&t, 1);
    lk_run_threads(&t, 4, aThreadFlags[_i], 0, 0, nOps);
    lk_assert_result(&t, 4, nOps, "threads");
    az[b] = lk_digest(&t);
    target_free(&t);
  }
  ck_assert_str_eq(az[0], az[1]);
  sqlite3_free(az[0]);
  sqlite3_free(az[1]);
  sqlite3_free(zDir);
}
END_TEST

/* Threads sharing one FULLMUTEX (serialized) connection: every
** autocommit statement succeeds. */
START_TEST(test_lock_threads_sharing_a_fullmutex_connection){
  char *zDir = th_tmpdir("lock-serial");
  int nOps = lk_ops(), b;
  lk_setup();
  for(b=0; b<2; b++){
    Target t;
    sqlite3 *db;
    target_init(&t, zDir, b==0, "serial");
    target_create(&t, 1);
    db = target_open_flags(&t, SQLITE_OPEN_READWRITE|SQLITE_OPEN_FULLMUTEX,
                           lk_busy());
    ck_assert_ptr_nonnull(db);
    lk_run_threads(&t, 3, 0, db, 0, nOps);
    ck_assert_int_eq(sqlite3_close(db), SQLITE_OK);
    lk_assert_result(&t, 3, nOps, "shared FULLMUTEX connection");
    target_free(&t);
  }
  sqlite3_free(zDir);
}
END_TEST

/* ---- shared cache ---- */

/* Shared cache on (bGlobal: sqlite3_enable_shared_cache(1), else
** cache=shared in the URI): opening a depot database returns (it used to
** hang), connections to one database share its cache with SQLite's
** semantics (a write transaction's table lock gives the other connection
** SQLITE_LOCKED_SHAREDCACHE; read_uncommitted reads through it), and two
** databases of one store never share one. */
static void lk_shared_cache_semantics(int bGlobal){
  char *zDir = th_tmpdir("lock-sc");
  int b;
  lk_setup();
  if( bGlobal ) ck_assert_int_eq(sqlite3_enable_shared_cache(1), SQLITE_OK);
  for(b=0; b<2; b++){
    Target t, u;
    sqlite3 *a, *a2, *o;
    char *z;
    target_init(&t, zDir, b==0, "one");
    target_init(&u, zDir, b==0, "two");
    if( !bGlobal ){
      char *zT = sqlite3_mprintf("%s&cache=shared", t.zName);
      char *zU = sqlite3_mprintf("%s&cache=shared", u.zName);
      sqlite3_free(t.zName);
      sqlite3_free(u.zName);
      t.zName = zT;
      u.zName = zU;
    }
    a = target_open(&t);
    a2 = target_open(&t);
    o = target_open(&u);
    th_exec(a, "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
    ck_assert_int_eq(th_int(a2, "SELECT count(*) FROM t"), 1);
    th_exec(o, "CREATE TABLE other(y)");
    ck_assert_int_eq(th_int(o, "SELECT count(*) FROM sqlite_schema"
                               " WHERE name='t'"), 0);
    ck_assert_int_eq(th_int(a, "SELECT count(*) FROM sqlite_schema"
                               " WHERE name='other'"), 0);
    th_exec(a, "BEGIN; INSERT INTO t VALUES(2)");
    ck_assert_int_eq(lk_run(a2, "SELECT count(*) FROM t"),
                     SQLITE_LOCKED_SHAREDCACHE);
    th_exec(a2, "PRAGMA read_uncommitted=1");
    ck_assert_int_eq(th_int(a2, "SELECT count(*) FROM t"), 2);
    th_exec(a, "COMMIT");
    th_exec(a2, "PRAGMA read_uncommitted=0; INSERT INTO t VALUES(3)");
    sqlite3_close(a);
    sqlite3_close(a2);
    sqlite3_close(o);
    a = target_open_flags(&t, SQLITE_OPEN_READWRITE|SQLITE_OPEN_PRIVATECACHE,
                          1000);
    ck_assert_ptr_nonnull(a);
    z = th_text(a, "SELECT group_concat(x) FROM t");
    ck_assert_str_eq(z, "1,2,3");
    sqlite3_free(z);
    sqlite3_close(a);
    target_free(&t);
    target_free(&u);
  }
  if( bGlobal ) sqlite3_enable_shared_cache(0);
  sqlite3_free(zDir);
}

START_TEST(test_lock_enable_shared_cache_opens_and_shares_one_database){
  lk_shared_cache_semantics(1);
}
END_TEST

START_TEST(test_lock_cache_shared_uri_opens_and_shares_one_database){
  lk_shared_cache_semantics(0);
}
END_TEST

/* Threads with shared cache (by loop index: sqlite3_enable_shared_cache(1),
** or cache=shared URIs) run the workload, retrying SQLITE_LOCKED as SQLite
** documents for a shared cache: the result adds up as on the file. */
START_TEST(test_lock_threads_with_shared_cache_add_up_like_a_file){
  char *zDir = th_tmpdir("lock-scthreads");
  int nOps = lk_ops(), b;
  char *az[2];
  lk_setup();
  if( _i==0 ) ck_assert_int_eq(sqlite3_enable_shared_cache(1), SQLITE_OK);
  for(b=0; b<2; b++){
    Target t;
    target_init(&t, zDir, b==0, "scthreads");
    if( _i==1 ){
      char *z = sqlite3_mprintf("%s&cache=shared", t.zName);
      sqlite3_free(t.zName);
      t.zName = z;
    }
    target_create(&t, 1);
    lk_run_threads(&t, 4, SQLITE_OPEN_READWRITE, 0, 1, nOps);
    lk_assert_result(&t, 4, nOps, "shared-cache threads");
    az[b] = lk_digest(&t);
    target_free(&t);
  }
  if( _i==0 ) sqlite3_enable_shared_cache(0);
  ck_assert_str_eq(az[0], az[1]);
  sqlite3_free(az[0]);
  sqlite3_free(az[1]);
  sqlite3_free(zDir);
}
END_TEST

/* A process opening many databases of one store (each name gets its own
** spelling of the store's path, vfs/share.h): the names stay a few bytes
** longer than the path, and each opens its own database. */
START_TEST(test_lock_many_databases_of_one_store_in_one_process){
  char *zDir = th_tmpdir("lock-many");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  size_t nPath = 0;
  int i, n = th_scaled(300, 10);
  lk_setup();
  for(i=0; i<n; i++){
    char *zUri = sqlite3_mprintf("file:%s?vfs=depot&db=d%d&store_sync=off",
                                 zStore, i);
    sqlite3 *db = th_open(zUri);
    const char *zFile = sqlite3_db_filename(db, "main");
    char *z;
    if( i==0 ) nPath = strlen(zFile);
    ck_assert_int_le(strlen(zFile), nPath + 3*10);
    z = sqlite3_mprintf("CREATE TABLE t%d(a); INSERT INTO t%d VALUES(%d)",
                        i, i, i);
    th_exec(db, z);
    sqlite3_free(z);
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_schema"), 1);
    sqlite3_close(db);
    sqlite3_free(zUri);
  }
  sqlite3_free(zStore);
  sqlite3_free(zDir);
}
END_TEST

/* ---- journal modes ---- */

/* No "-wal" file in zDir but the store's own. */
static void lk_assert_no_wal_but_the_store(const char *zDir){
  char *zStoreWal = sqlite3_mprintf("%s/store.depot-wal", zDir);
  int nStore = access(zStoreWal, F_OK)==0;
  ck_assert_int_eq(th_count_suffix(zDir, "-wal"), nStore);
  sqlite3_free(zStoreWal);
}

/* PRAGMA journal_mode=X on a depot database answers X, except WAL, which
** answers the mode in effect and changes nothing; on main (bAttach 0) or
** an attached depot database named by its schema, in normal or exclusive
** locking mode (by loop index).  The rows written after each pragma are in
** the store when the database is opened again. */
static const char *const azModes[] = {
  "delete", "wal", "memory", "wal", "truncate", "persist", "wal", "off",
  "wal", "delete"
};

START_TEST(test_lock_journal_mode_pragmas_answer_and_data_reaches_store){
  int bExcl = _i & 1, bAttach = (_i>>1) & 1;
  char *zDir = th_tmpdir("lock-jmode");
  char *zUri = lk_depot_uri(zDir, "db=j");
  const char *zS = bAttach ? "aux." : "";
  const char *zEffect = "delete";
  sqlite3 *db;
  char *z;
  int i;
  lk_setup();
  if( bAttach ){
    db = th_open(":memory:");
    z = sqlite3_mprintf("ATTACH %Q AS aux", zUri);
    th_exec(db, z);
    sqlite3_free(z);
  }else{
    db = th_open(zUri);
  }
  if( bExcl ) th_exec(db, "PRAGMA locking_mode=EXCLUSIVE");
  z = sqlite3_mprintf("CREATE TABLE %st(mode TEXT, i INT)", zS);
  th_exec(db, z);
  sqlite3_free(z);
  for(i=0; i<(int)(sizeof(azModes)/sizeof(azModes[0])); i++){
    char *zAnswer;
    z = sqlite3_mprintf("PRAGMA %sjournal_mode=%s", zS, azModes[i]);
    zAnswer = th_text(db, z);
    sqlite3_free(z);
    if( strcmp(azModes[i], "wal")!=0 ) zEffect = azModes[i];
    ck_assert_msg(strcmp(zAnswer, zEffect)==0, "journal_mode=%s answered %s,"
                  " not %s", azModes[i], zAnswer, zEffect);
    sqlite3_free(zAnswer);
    z = sqlite3_mprintf("PRAGMA %sjournal_mode", zS);
    zAnswer = th_text(db, z);
    sqlite3_free(z);
    ck_assert_str_eq(zAnswer, zEffect);
    sqlite3_free(zAnswer);
    z = sqlite3_mprintf("INSERT INTO %st VALUES(%Q, %d);"
                        "BEGIN; INSERT INTO %st VALUES('rolled back', %d);"
                        "ROLLBACK", zS, azModes[i], i, zS, i);
    if( strcmp(zEffect, "off")==0 ){
      /* ROLLBACK is not defined without a journal: no rolled-back row */
      sqlite3_free(z);
      z = sqlite3_mprintf("INSERT INTO %st VALUES(%Q, %d)", zS, azModes[i],
                          i);
    }
    th_exec(db, z);
    sqlite3_free(z);
  }
  sqlite3_close(db);
  lk_assert_no_wal_but_the_store(zDir);
  db = th_open(zUri);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"),
                   (int)(sizeof(azModes)/sizeof(azModes[0])));
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE mode='wal'"), 4);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE mode LIKE"
                              " 'rolled%'"), 0);
  z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

/* A schema-less PRAGMA journal_mode=WAL reaches SQLite's file control on
** main only; in exclusive locking mode SQLite then gives an attached depot
** database the label "wal" (an in-heap WAL is allowed there).  Such a
** database still journals in memory and commits to the store, and no WAL
** file is ever made for it (docs/SQL.md, "Journal modes"). */
START_TEST(test_lock_schemaless_wal_in_exclusive_mode_still_commits_to_store){
  char *zDir = th_tmpdir("lock-jwal");
  char *zUri = lk_depot_uri(zDir, "db=j");
  sqlite3 *db = th_open(":memory:");
  char *z;
  lk_setup();
  z = sqlite3_mprintf("ATTACH %Q AS aux", zUri);
  th_exec(db, z);
  sqlite3_free(z);
  th_exec(db, "CREATE TABLE aux.t(i); INSERT INTO aux.t VALUES(1);"
              "PRAGMA locking_mode=EXCLUSIVE; INSERT INTO aux.t VALUES(2);"
              "PRAGMA journal_mode=WAL; INSERT INTO aux.t VALUES(3);"
              "BEGIN; INSERT INTO aux.t VALUES(4); ROLLBACK;"
              "INSERT INTO aux.t VALUES(5)");
  z = th_text(db, "SELECT group_concat(i) FROM aux.t");
  ck_assert_str_eq(z, "1,2,3,5");
  sqlite3_free(z);
  sqlite3_close(db);
  lk_assert_no_wal_but_the_store(zDir);
  db = th_open(zUri);
  z = th_text(db, "SELECT group_concat(i) FROM t");
  ck_assert_str_eq(z, "1,2,3,5");
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

/* The depot VFS refuses to open a WAL file: one would live in memory and
** lose its commits. */
START_TEST(test_lock_depot_vfs_never_opens_a_wal_file){
  sqlite3_vfs *pVfs;
  sqlite3_file *pFile;
  int outFlags = 0;
  lk_setup();
  pVfs = sqlite3_vfs_find(DEPOT_VFS_NAME);
  ck_assert_ptr_nonnull(pVfs);
  pFile = sqlite3_malloc(pVfs->szOsFile);
  ck_assert_ptr_nonnull(pFile);
  ck_assert_int_eq(pVfs->xOpen(pVfs, "/nonexistent/store.depot-wal", pFile,
      SQLITE_OPEN_WAL|SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, &outFlags),
      SQLITE_CANTOPEN);
  ck_assert_ptr_null(pFile->pMethods);
  ck_assert_ptr_nonnull(strstr(depot_vfs_last_error(), "never runs in WAL"));
  sqlite3_free(pFile);
}
END_TEST

/* ---- the lock file ---- */

/* The lock lives in "<store>-lock", made on the first write with the
** store's permissions; a read-only connection never makes it. */
START_TEST(test_lock_file_is_made_by_the_first_writer_only){
  char *zDir = th_tmpdir("lock-file");
  char *zStore = sqlite3_mprintf("%s/store.depot", zDir);
  char *zLock = sqlite3_mprintf("%s-lock", zStore);
  char *zUri = sqlite3_mprintf("file:%s?vfs=depot&db=f", zStore);
  char *zRo = sqlite3_mprintf("file:%s?vfs=depot&db=f&mode=ro", zStore);
  struct stat stS, stL;
  sqlite3 *db;
  lk_setup();
  db = th_open(zUri);
  th_exec(db, "CREATE TABLE t(a)");
  sqlite3_close(db);
  ck_assert_int_eq(chmod(zStore, 0640), 0);
  ck_assert_int_eq(unlink(zLock), 0);
  db = th_open(zRo);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  ck_assert_int_eq(lk_run(db, "INSERT INTO t VALUES(1)"), SQLITE_READONLY);
  sqlite3_close(db);
  ck_assert_int_ne(access(zLock, F_OK), 0);
  db = th_open(zUri);
  th_exec(db, "INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  ck_assert_int_eq(stat(zStore, &stS), 0);
  ck_assert_int_eq(stat(zLock, &stL), 0);
  ck_assert_int_eq(stL.st_mode & 0777, stS.st_mode & 0777);
  ck_assert_int_eq(stL.st_size, 0);
  sqlite3_free(zStore);
  sqlite3_free(zLock);
  sqlite3_free(zUri);
  sqlite3_free(zRo);
  sqlite3_free(zDir);
}
END_TEST

/* With $DEPOT_TEST_STORE_URI: the tests that reach the store only through
** its path, on that PostgreSQL server. */
static Suite *lockStoreUriSuite(void){
  Suite *s = suite_create("lock");
  TCase *tc = tcase_create("store_uri");
  tcase_add_test(tc, test_lock_processes_mixed_workload_adds_up_like_a_file);
  tcase_add_test(tc, test_lock_autocommit_inserts_of_processes_all_succeed);
  tcase_add_test(tc,
      test_lock_begin_immediate_of_other_process_waits_for_commit);
  tcase_add_test(tc,
      test_lock_deferred_writer_fails_at_first_write_like_a_file);
  tcase_add_test(tc,
      test_lock_exclusive_locking_mode_keeps_other_process_out);
  tcase_add_test(tc,
      test_lock_child_forked_after_background_compaction_writes);
  tcase_add_test(tc, test_lock_sigkill_of_lock_holder_lets_others_go_on);
  tcase_add_loop_test(tc,
      test_lock_threads_with_own_connections_add_up_like_a_file, 0,
      (int)(sizeof(aThreadFlags)/sizeof(aThreadFlags[0])));
  tcase_add_test(tc, test_lock_threads_sharing_a_fullmutex_connection);
  tcase_add_test(tc,
      test_lock_enable_shared_cache_opens_and_shares_one_database);
  tcase_add_test(tc,
      test_lock_cache_shared_uri_opens_and_shares_one_database);
  tcase_add_loop_test(tc,
      test_lock_threads_with_shared_cache_add_up_like_a_file, 0, 2);
  tcase_add_loop_test(tc,
      test_lock_journal_mode_pragmas_answer_and_data_reaches_store, 0, 4);
  tcase_add_test(tc,
      test_lock_schemaless_wal_in_exclusive_mode_still_commits_to_store);
  suite_add_tcase(s, tc);
  return s;
}

Suite *depot_test_suite(void){
  Suite *s;
  TCase *tc;
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  if( zPg && zPg[0] ) return lockStoreUriSuite();
  s = suite_create("lock");
  tc = tcase_create("processes");
  tcase_add_test(tc, test_lock_processes_mixed_workload_adds_up_like_a_file);
  tcase_add_test(tc, test_lock_autocommit_inserts_of_processes_all_succeed);
  tcase_add_test(tc,
      test_lock_begin_immediate_of_other_process_waits_for_commit);
  tcase_add_test(tc,
      test_lock_deferred_writer_fails_at_first_write_like_a_file);
  tcase_add_test(tc,
      test_lock_exclusive_locking_mode_keeps_other_process_out);
  tcase_add_test(tc, test_lock_file_is_made_by_the_first_writer_only);
  tcase_add_test(tc,
      test_lock_child_forked_after_background_compaction_writes);
  suite_add_tcase(s, tc);

  tc = tcase_create("faults");
  tcase_add_test(tc, test_lock_sigkill_of_lock_holder_lets_others_go_on);
  suite_add_tcase(s, tc);

  tc = tcase_create("threads");
  tcase_add_loop_test(tc,
      test_lock_threads_with_own_connections_add_up_like_a_file, 0,
      (int)(sizeof(aThreadFlags)/sizeof(aThreadFlags[0])));
  tcase_add_test(tc, test_lock_threads_sharing_a_fullmutex_connection);
  tcase_add_test(tc,
      test_lock_enable_shared_cache_opens_and_shares_one_database);
  tcase_add_test(tc,
      test_lock_cache_shared_uri_opens_and_shares_one_database);
  tcase_add_loop_test(tc,
      test_lock_threads_with_shared_cache_add_up_like_a_file, 0, 2);
  tcase_add_test(tc, test_lock_many_databases_of_one_store_in_one_process);
  suite_add_tcase(s, tc);

  tc = tcase_create("journal");
  tcase_add_loop_test(tc,
      test_lock_journal_mode_pragmas_answer_and_data_reaches_store, 0, 4);
  tcase_add_test(tc,
      test_lock_schemaless_wal_in_exclusive_mode_still_commits_to_store);
  tcase_add_test(tc, test_lock_depot_vfs_never_opens_a_wal_file);
  suite_add_tcase(s, tc);
  return s;
}
