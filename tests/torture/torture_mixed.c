/*
** torture_mixed.c -- the crash-torture oracle of mixed transactions
** (make torture; a smoke in make check): one SQLite transaction that
** writes a table of the database file and a kv_btree table must survive a
** crash whole or not at all (ext/kv_coord.c).
**
** Each round forks a child on a fresh directory that runs, through the
** simulated disk of tests/torture/torture_io.c (power loss keeps a random
** part of the unsynced writes):
**     BEGIN; INSERT INTO orders VALUES(j, j);          -- the file
**            INSERT INTO stock VALUES(j, j);           -- kv_btree
**            UPDATE stock SET value=value+1 WHERE key=0; COMMIT
** for j = 1, 2, ..., telling the parent through a pipe before each COMMIT
** (begun j) and after it returned OK (acknowledged j).  The database is,
** by round, a plain file in WAL mode, a plain file in rollback-journal
** mode, or a depot database (file:store.depot?vfs=depot&db=shop).  The
** child dies by a simulated power loss at write/sync call N (three rounds
** of four), or by SIGKILL from the parent after a random acknowledgement
** and delay.  A verifier child then reopens the database and checks that
** orders holds exactly ids 1..n, stock exactly keys 1..n, the counter n,
** and lastAck <= n <= lastBegun: every acknowledged mixed commit whole,
** the one in flight whole or absent, never split.
**
** Usage: torture_mixed [--points N] [--seed S] [--txns N] [--smoke]
**                      [--round KIND SEED power|kill POINT]
** Environment: TORTURE_POINTS (default 10000), TORTURE_SEED.
*/
#include "config.h"
#include "tests/torture/torture.h"
#include "ext/depot.h"
#include "ext/kv/kv.h"
#include "ext/kv/kv_test.h"
#include <sqlite3.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const azKind[] = { "wal", "delete", "depot" };
#define MODE_COUNT 0
#define MODE_POWER 1
#define MODE_KILL  2
static const char *const azMode[] = { "count", "power", "kill" };

/* Messages child -> parent: {eType, j}. */
enum { MX_READY = 1, MX_BEGIN, MX_ACK, MX_FAIL, MX_DONE };

static uint64_t rngNext(uint64_t *p){
  uint64_t x = (*p += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x>>30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x>>27)) * 0x94d049bb133111ebull;
  return x ^ (x>>31);
}

static void rmTree(const char *zPath){
  DIR *d = opendir(zPath);
  struct dirent *e;
  if( d==0 ){ unlink(zPath); return; }
  while( (e = readdir(d))!=0 ){
    char z[4096];
    if( strcmp(e->d_name, ".")==0 || strcmp(e->d_name, "..")==0 ) continue;
    snprintf(z, sizeof(z), "%s/%s", zPath, e->d_name);
    rmTree(z);
  }
  closedir(d);
  rmdir(zPath);
}

static char *mxUri(const char *zDir, int eKind){
  if( eKind==2 ){
    return sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=shop", zDir);
  }
  return sqlite3_mprintf("file:%s/shop.db", zDir);
}

static void mxSend(int fd, int eType, int64_t v){
  int64_t a[2];
  a[0] = eType; a[1] = v;
  if( write(fd, a, sizeof(a))!=(ssize_t)sizeof(a) ) _exit(5);
}

/* Open the round's database (journal mode and synchronous=FULL set);
** NULL on error, message printed. */
static sqlite3 *mxOpen(const char *zDir, int eKind){
  char *zUri = mxUri(zDir, eKind);
  sqlite3 *db = 0;
  char *zErr = 0;
  int rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE
                           |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK ){
    sqlite3_busy_timeout(db, 10000);
    rc = sqlite3_exec(db, eKind==0 ? "PRAGMA journal_mode=WAL" :
                          eKind==1 ? "PRAGMA journal_mode=DELETE" : "",
                      0, 0, &zErr);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_exec(db, "PRAGMA synchronous=FULL", 0, 0, &zErr);
  }
  if( rc!=SQLITE_OK ){
    printf("torture_mixed: open %s: %s\n", zUri, zErr ? zErr
                                                  : sqlite3_errmsg(db));
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zErr);
  sqlite3_free(zUri);
  return db;
}

/* The workload child: set up, then nTxn mixed transactions. */
static void childRun(const char *zDir, int eKind, int fd, const TioConfig *pCfg,
                     int nTxn){
  TioConfig cfg0;
  sqlite3 *dbFirst = 0, *db;
  int j;
  memset(&cfg0, 0, sizeof(cfg0));
  tio_setup(&cfg0);
  sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0);
  db = mxOpen(zDir, eKind);
  if( db==0 ) _exit(4);
  if( sqlite3_exec(db, "CREATE TABLE orders(id INTEGER PRIMARY KEY, qty);"
                   "CREATE VIRTUAL TABLE stock USING kv_btree;"
                   "INSERT INTO stock VALUES(0, 0)", 0, 0, 0)!=SQLITE_OK ){
    printf("torture_mixed: setup: %s\n", sqlite3_errmsg(db));
    _exit(4);
  }
  mxSend(fd, MX_READY, 0);
  tio_setup(pCfg);                  /* crash points count from here */
  for(j=1; j<=nTxn; j++){
    char *z = sqlite3_mprintf("BEGIN; INSERT INTO orders VALUES(%d, %d);"
        "INSERT INTO stock VALUES(%d, %d);"
        "UPDATE stock SET value=value+1 WHERE key=0; COMMIT", j, j, j, j);
    int rc;
    mxSend(fd, MX_BEGIN, j);
    rc = sqlite3_exec(db, z, 0, 0, 0);
    sqlite3_free(z);
    if( rc!=SQLITE_OK ){
      mxSend(fd, MX_FAIL, j);
      _exit(3);
    }
    mxSend(fd, MX_ACK, j);
  }
  sqlite3_close(db);
  sqlite3_close(dbFirst);
  mxSend(fd, MX_DONE, (int64_t)tio_count_ws());
  _exit(0);
}

/* The verifier child: exit 0 when the state is whole and within
** [nAck, nBegun], else print the finding and exit 1. */
static void verifyRun(const char *zDir, int eKind, int64_t nAck,
                      int64_t nBegun){
  sqlite3 *dbFirst = 0, *db;
  sqlite3_stmt *pStmt = 0;
  int64_t a[6];
  int i, rc;
  sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0);
  db = mxOpen(zDir, eKind);
  if( db==0 ) _exit(1);
  rc = sqlite3_prepare_v2(db,
      "SELECT (SELECT count(*) FROM orders), (SELECT max(id) FROM orders),"
      " (SELECT count(*) FROM stock WHERE key>0),"
      " (SELECT max(key) FROM stock WHERE key>0),"
      " (SELECT value FROM stock WHERE key=0),"
      " (SELECT count(*) FROM orders WHERE qty IS NOT id)", -1, &pStmt, 0);
  if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    for(i=0; i<6; i++) a[i] = sqlite3_column_int64(pStmt, i);
  }else{
    printf("torture_mixed: verify: %s\n", sqlite3_errmsg(db));
    _exit(1);
  }
  sqlite3_finalize(pStmt);
  if( a[0]!=a[1] || a[2]!=a[3] || a[0]!=a[2] || a[4]!=a[0] || a[5]!=0
   || a[0]<nAck || a[0]>nBegun ){
    printf("torture_mixed: %s database: orders %lld rows (max id %lld), "
           "stock %lld keys (max %lld), counter %lld; acknowledged %lld, "
           "begun %lld\n", azKind[eKind], (long long)a[0], (long long)a[1],
           (long long)a[2], (long long)a[3], (long long)a[4],
           (long long)nAck, (long long)nBegun);
    _exit(1);
  }
  sqlite3_close(db);
  sqlite3_close(dbFirst);
  _exit(0);
}

typedef struct Round Round;
struct Round {
  int eKind, eMode;
  uint64_t seed, iPoint;
  int nTxn;
};

/* Run one round; returns 0 if it passed, 1 on a finding.  *pnWS gets the
** write/sync calls of a count round. */
static int roundRun(const char *zDir, const Round *r, uint64_t *pnWS,
                    int *pbHit){
  int aFd[2], st = 0, bKilled = 0;
  int64_t m[2], nAck = 0, nBegun = 0;
  uint64_t rng = r->seed;
  TioConfig cfg;
  pid_t pid;
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSeed = r->seed;
  if( r->eMode==MODE_POWER ) cfg.iCrashAt = r->iPoint;
  rmTree(zDir);
  if( mkdir(zDir, 0755) || pipe(aFd) ) return 1;
  pid = fork();
  if( pid==0 ){
    close(aFd[0]);
    alarm(120);
    childRun(zDir, r->eKind, aFd[1], &cfg, r->nTxn);
  }
  close(aFd[1]);
  while( read(aFd[0], m, sizeof(m))==(ssize_t)sizeof(m) ){
    if( m[0]==MX_BEGIN ) nBegun = m[1];
    if( m[0]==MX_ACK ) nAck = m[1];
    if( m[0]==MX_DONE && pnWS ) *pnWS = (uint64_t)m[1];
    if( m[0]==MX_ACK && r->eMode==MODE_KILL && (uint64_t)nAck>=r->iPoint
     && !bKilled ){
      usleep((useconds_t)(rngNext(&rng)%3000));
      kill(pid, SIGKILL);
      bKilled = 1;
    }
  }
  close(aFd[0]);
  waitpid(pid, &st, 0);
  *pbHit = (WIFEXITED(st) && WEXITSTATUS(st)==TIO_EXIT_CRASH)
        || (WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL);
  if( !*pbHit && !(WIFEXITED(st) && WEXITSTATUS(st)==0) ){
    printf("torture_mixed: child status %d\n", st);
    return 1;
  }
  if( nBegun==0 ) return 0;        /* died in the setup */
  pid = fork();
  if( pid==0 ){
    alarm(120);
    verifyRun(zDir, r->eKind, nAck, nBegun);
  }
  waitpid(pid, &st, 0);
  return !(WIFEXITED(st) && WEXITSTATUS(st)==0);
}

int main(int argc, char **argv){
  const char *zTmp = getenv("DEPOT_TEST_TMPDIR");
  const char *zEnv = getenv("TORTURE_POINTS");
  int nPoint = zEnv ? atoi(zEnv) : 10000;
  uint64_t seed = getenv("TORTURE_SEED") ? strtoull(getenv("TORTURE_SEED"),
                                                    0, 10) : (uint64_t)time(0);
  int nTxn = 8, i, nFind = 0, nHit = 0, bHit = 0;
  uint64_t aWS[3];
  char zDir[4096];
  Round r;
  memset(&r, 0, sizeof(r));
  for(i=1; i<argc; i++){
    if( strcmp(argv[i], "--points")==0 && i+1<argc ) nPoint = atoi(argv[++i]);
    else if( strcmp(argv[i], "--seed")==0 && i+1<argc ){
      seed = strtoull(argv[++i], 0, 10);
    }else if( strcmp(argv[i], "--txns")==0 && i+1<argc ) nTxn = atoi(argv[++i]);
    else if( strcmp(argv[i], "--smoke")==0 ) nPoint = 45;
    else if( strcmp(argv[i], "--round")==0 && i+4<argc ){
      for(r.eKind=0; r.eKind<2 && strcmp(azKind[r.eKind], argv[i+1]); r.eKind++){}
      r.seed = strtoull(argv[i+2], 0, 10);
      r.eMode = strcmp(argv[i+3], "kill")==0 ? MODE_KILL : MODE_POWER;
      r.iPoint = strtoull(argv[i+4], 0, 10);
      i += 4;
      nPoint = -1;
    }else{
      fprintf(stderr, "usage: %s [--points N] [--seed S] [--txns N] "
              "[--smoke] [--round wal|delete|depot SEED power|kill POINT]\n",
              argv[0]);
      return 2;
    }
  }
  snprintf(zDir, sizeof(zDir), "%s/torture_mixed.%d", zTmp ? zTmp : "tests/tmp",
           (int)getpid());
  mkdir(zTmp ? zTmp : "tests/tmp", 0755);
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  tio_vfs_register();
  kv_engine_test_io(tio_walio());
  r.nTxn = nTxn;
  if( nPoint<0 ){
    nFind = roundRun(zDir, &r, 0, &bHit);
    printf("torture_mixed: round %s\n", nFind ? "FAILED" : "passed");
    if( !nFind ) rmTree(zDir);
    return nFind!=0;
  }
  for(i=0; i<3; i++){
    aWS[i] = 1;
    r.eKind = i; r.eMode = MODE_COUNT; r.seed = seed;
    nFind += roundRun(zDir, &r, &aWS[i], &bHit);
  }
  for(i=0; i<nPoint; i++){
    uint64_t rng = seed*0x9e3779b97f4a7c15ull + (uint64_t)i;
    r.seed = rngNext(&rng);
    r.eKind = i%3;
    r.eMode = (i%4==3) ? MODE_KILL : MODE_POWER;
    r.iPoint = 1 + rngNext(&rng) % (r.eMode==MODE_KILL ? (uint64_t)nTxn
                                                     : aWS[r.eKind]);
    if( roundRun(zDir, &r, 0, &bHit) ){
      nFind++;
      printf("torture_mixed: FAILED: %s database, %s round at %llu; replay: "
             "%s --round %s %llu %s %llu\n", azKind[r.eKind],
             azMode[r.eMode], (unsigned long long)r.iPoint, argv[0],
             azKind[r.eKind], (unsigned long long)r.seed, azMode[r.eMode],
             (unsigned long long)r.iPoint);
      fflush(stdout);
    }
    nHit += bHit;
    if( (i+1)%1000==0 ){
      printf("torture_mixed: %d of %d rounds, %d findings\n", i+1, nPoint,
             nFind);
      fflush(stdout);
    }
  }
  printf("torture_mixed: %d crash rounds (%d crashed mid-workload) over WAL, "
         "rollback-journal and depot databases, seed %llu: %d findings\n",
         nPoint, nHit, (unsigned long long)seed, nFind);
  if( nFind==0 ) rmTree(zDir);
  return nFind!=0;
}
