/*
** check_pgread.c -- the PostgreSQL store read by many processes and from
** standbys: several processes (standing in for hosts) with connections of
** their own write their own databases and branches of one store and
** contend on one shared branch (fenced by the branch's writer lock and the
** head compare-and-set), each seeing the others' acknowledged commits at
** its next read transaction, with an oracle (a counter whose every value
** is handed out once, a bank whose total never changes); and, when a
** streaming standby is there, readers on it: every read transaction is
** one committed state of the primary, never going back, the lag and role
** visible in depot_stats and depot_replay_lag, writes through it refused
** with a clear error.
**
** Runs under tests/check/pgrepl_suite.sh: the primary's URI in
** DEPOT_TEST_STORE_URI, a hot standby's (synchronous replication) in
** DEPOT_TEST_PGREPL_STANDBY_URI (without it, the standby tests pass with
** a note).  Each test works in a schema of its own.
*/
#include "harness.h"
#include "vfs/store/store.h"
#include "vfs/depot_vfs.h"
#include "ext/depot.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define PR_HOSTS    4              /* processes of the many-hosts test */
#define PR_ACCOUNTS 40             /* bank accounts, 100 each */

/* zBase (a store URI with a query part) with schema=t_<zTag>_<pid>. */
static char *prUriOf(const char *zBase, const char *zTag, int pid){
  ck_assert_ptr_nonnull(zBase);
  ck_assert_ptr_nonnull(strchr(zBase, '?'));
  return sqlite3_mprintf("%s&schema=t_%s_%d", zBase, zTag, pid);
}

/* zUri escaped for a value of an SQLite URI parameter. */
static char *prEsc(const char *zUri){
  sqlite3_str *s = sqlite3_str_new(0);
  const char *z;
  for(z=zUri; *z; z++){
    if( *z=='&' || *z=='%' || *z=='#' ){
      sqlite3_str_appendf(s, "%%%02X", (unsigned char)*z);
    }else{
      sqlite3_str_appendchar(s, 1, *z);
    }
  }
  return sqlite3_str_finish(s);
}

/* Database zDb branch zBranch of the store zUri, through the depot VFS;
** bReadOnly: mode=ro.  *pRc the open's result code (NULL: the test fails
** on an error). */
static sqlite3 *prOpen(const char *zDir, const char *zUri, const char *zDb,
                       const char *zBranch, int bReadOnly, int *pRc){
  char *zE = prEsc(zUri);
  char *zName = sqlite3_mprintf("file:%s/%s?vfs=depot&db=%s&branch=%s%s"
      "&store=%s", zDir, zDb, zDb, zBranch, bReadOnly ? "&mode=ro" : "", zE);
  sqlite3 *db = 0;
  int rc;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  sqlite3_open(":memory:", &db);           /* registers the depot VFS */
  sqlite3_close(db);
  db = 0;
  rc = sqlite3_open_v2(zName, &db, (bReadOnly ? SQLITE_OPEN_READONLY
      : SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE)|SQLITE_OPEN_URI, 0);
  sqlite3_free(zE);
  sqlite3_free(zName);
  if( pRc ){
    *pRc = rc;
  }else{
    ck_assert_msg(rc==SQLITE_OK, "open: %s", sqlite3_errmsg(db));
  }
  if( db ) sqlite3_busy_timeout(db, 0);
  return db;
}

static int64_t prNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* The integer in file zPath (0 when absent). */
static int64_t prFileInt(const char *zPath){
  FILE *f = fopen(zPath, "r");
  long long v = 0;
  if( f ){
    if( fscanf(f, "%lld", &v)!=1 ) v = 0;
    fclose(f);
  }
  return v;
}

/* Write v to zPath atomically (a temporary file renamed over it). */
static void prFileSet(const char *zPath, int64_t v){
  char *zTmp = sqlite3_mprintf("%s.tmp", zPath);
  FILE *f = fopen(zTmp, "w");
  if( f ){
    fprintf(f, "%lld\n", (long long)v);
    fclose(f);
    rename(zTmp, zPath);
  }
  sqlite3_free(zTmp);
}

/* One integer of a statement, or -1 on an error (child processes cannot
** use the test's assertions). */
static int64_t prInt(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  int64_t v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)==SQLITE_OK
   && sqlite3_step(p)==SQLITE_ROW ){
    v = sqlite3_column_int64(p, 0);
  }
  sqlite3_finalize(p);
  return v;
}

/* ---- many hosts ---- */

/* Child "host URI DIR I N": host I of the many-hosts test.  N rounds of:
** a row into its own database h<I> and its own branch b<I> of database
** shared; a read transaction of the shared branch that must show every
** commit another host acknowledged before it began (the others' files
** last_<J>) and the bank's total; one increment of the shared counter
** with a transfer between two accounts, retried while another host holds
** the branch (SQLITE_BUSY), whose counter value goes to the file
** got_<I> once the commit is acknowledged; at the end the process's
** page cache must have served reads.  Exit status: 0, or the number of
** the check that failed. */
static int prHost(const char *zUri, const char *zDir, int iHost, int nRound){
  sqlite3 *dbOwn, *dbBranch, *dbShared;
  char *zGot = sqlite3_mprintf("%s/got_%d", zDir, iHost);
  char *zLast = sqlite3_mprintf("%s/last_%d", zDir, iHost);
  char *zOwn = sqlite3_mprintf("h%d", iHost);
  char *zBr = sqlite3_mprintf("b%d", iHost);
  FILE *fGot = fopen(zGot, "w");
  unsigned int seed = (unsigned int)(getpid()*7919 + iHost);
  int64_t nPrev = 0;
  int i, j, rc = 0;
  if( fGot==0 ) return 2;
  dbOwn = prOpen(zDir, zUri, zOwn, "main", 0, &rc);
  if( rc ) return 3;
  dbBranch = prOpen(zDir, zUri, "shared", zBr, 0, &rc);
  if( rc ) return 3;
  dbShared = prOpen(zDir, zUri, "shared", "main", 0, &rc);
  if( rc ) return 3;
  if( sqlite3_exec(dbOwn, "CREATE TABLE IF NOT EXISTS r(host, k, pad)", 0, 0,
                   0)!=SQLITE_OK ) return 4;
  for(i=0; i<nRound; i++){
    char zSql[200];
    int64_t nSeen, nSum, nMin = 0;
    sqlite3_snprintf(sizeof(zSql), zSql, "INSERT INTO r VALUES(%d, %d,"
                     " randomblob(600))", iHost, i);
    if( sqlite3_exec(dbOwn, zSql, 0, 0, 0)!=SQLITE_OK ) return 5;
    sqlite3_snprintf(sizeof(zSql), zSql, "INSERT INTO mine VALUES(%d, %d)",
                     iHost, i);
    if( sqlite3_exec(dbBranch, zSql, 0, 0, 0)!=SQLITE_OK ) return 6;
    /* the others' acknowledged commits, then a read transaction */
    for(j=0; j<PR_HOSTS; j++){
      char *z = sqlite3_mprintf("%s/last_%d", zDir, j);
      int64_t v = prFileInt(z);
      sqlite3_free(z);
      if( v>nMin ) nMin = v;
    }
    if( sqlite3_exec(dbShared, "BEGIN", 0, 0, 0)!=SQLITE_OK ) return 7;
    nSeen = prInt(dbShared, "SELECT n FROM c");
    nSum = prInt(dbShared, "SELECT sum(bal) FROM acct");
    sqlite3_exec(dbShared, "COMMIT", 0, 0, 0);
    if( nSeen<nMin || nSeen<nPrev ) return 8;      /* a stale read */
    if( nSum!=PR_ACCOUNTS*100 ) return 9;          /* not one state */
    nPrev = nSeen;
    /* one increment of the shared counter, retried while fenced */
    for(j=0; ; j++){
      int a = rand_r(&seed)%PR_ACCOUNTS, b = rand_r(&seed)%PR_ACCOUNTS;
      int64_t n;
      rc = sqlite3_exec(dbShared, "BEGIN IMMEDIATE", 0, 0, 0);
      if( rc==SQLITE_OK ){
        n = prInt(dbShared, "UPDATE c SET n=n+1 RETURNING n");
        sqlite3_snprintf(sizeof(zSql), zSql, "UPDATE acct SET bal=bal-7"
                         " WHERE id=%d; UPDATE acct SET bal=bal+7 WHERE id=%d",
                         a, b);
        rc = n>0 ? sqlite3_exec(dbShared, zSql, 0, 0, 0) : SQLITE_ERROR;
        if( rc==SQLITE_OK ) rc = sqlite3_exec(dbShared, "COMMIT", 0, 0, 0);
        if( rc==SQLITE_OK ){
          fprintf(fGot, "%lld\n", (long long)n);
          fflush(fGot);
          prFileSet(zLast, n);
          if( n<=nPrev ) return 10;
          nPrev = n;
          break;
        }
        sqlite3_exec(dbShared, "ROLLBACK", 0, 0, 0);
      }
      if( (rc&0xff)!=SQLITE_BUSY || j>2000 ) return 11;
      usleep(1000 + rand_r(&seed)%4000);
    }
  }
  fclose(fGot);
  /* the process's page cache served reads (and served them right: the
  ** checks above) */
  {
    char *zSql = sqlite3_mprintf("SELECT cache_hits>0 FROM depot_stats(%Q)",
                                 zUri);
    int64_t bHit = prInt(dbOwn, zSql);
    sqlite3_free(zSql);
    if( bHit!=1 ) return 12;
  }
  sqlite3_close(dbOwn);
  sqlite3_close(dbBranch);
  sqlite3_close(dbShared);
  sqlite3_free(zGot); sqlite3_free(zLast); sqlite3_free(zOwn);
  sqlite3_free(zBr);
  return 0;
}

/* Child "bank URI DIR N": N commits on database bank of the primary, each
** a transfer between two accounts that also sets every account's v to
** the commit's number k; before commit k the file "trying" says k, after
** it the file "acked" says k. */
static int prBank(const char *zUri, const char *zDir, int nCommit){
  sqlite3 *db;
  char *zTry = sqlite3_mprintf("%s/trying", zDir);
  char *zAck = sqlite3_mprintf("%s/acked", zDir);
  unsigned int seed = (unsigned int)getpid();
  int k, rc = 0;
  db = prOpen(zDir, zUri, "bank", "main", 0, &rc);
  if( rc ) return 3;
  sqlite3_busy_timeout(db, 5000);
  for(k=1; k<=nCommit; k++){
    char *z = sqlite3_mprintf("BEGIN IMMEDIATE; UPDATE acct SET v=%d;"
        " UPDATE acct SET bal=bal-%d WHERE id=%d;"
        " UPDATE acct SET bal=bal+%d WHERE id=%d; COMMIT", k, k%13+1,
        rand_r(&seed)%PR_ACCOUNTS, k%13+1, rand_r(&seed)%PR_ACCOUNTS);
    prFileSet(zTry, k);
    rc = sqlite3_exec(db, z, 0, 0, 0);
    sqlite3_free(z);
    if( rc!=SQLITE_OK ) return 4;
    prFileSet(zAck, k);
  }
  sqlite3_close(db);
  sqlite3_free(zTry);
  sqlite3_free(zAck);
  return 0;
}

int depot_test_child(int argc, char **argv){
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( argc==5 && strcmp(argv[0], "host")==0 ){
    return prHost(argv[1], argv[2], atoi(argv[3]), atoi(argv[4]));
  }
  if( argc==4 && strcmp(argv[0], "bank")==0 ){
    return prBank(argv[1], argv[2], atoi(argv[3]));
  }
  return 2;
}

/* The bank of PR_ACCOUNTS accounts (id, bal 100, v 0, a 300-byte pad:
** several pages) and the counter c(n) in db. */
static void prMakeBank(sqlite3 *db){
  th_exec(db, "CREATE TABLE acct(id INTEGER PRIMARY KEY, bal, v, pad);"
      "CREATE TABLE c(n); INSERT INTO c VALUES(0);");
  th_execf(db, "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM s"
      " WHERE i<%d) INSERT INTO acct SELECT i, 100, 0, randomblob(300) FROM s",
      PR_ACCOUNTS-1);
}

/* Several processes, each with its own connections, write their own
** databases and branches of one store and contend on one shared branch:
** every increment of the shared counter that was acknowledged is there
** once (its values are exactly 1..n), the bank's total holds, each process
** saw the others' acknowledged commits at its next read transaction, and
** the store verifies clean. */
START_TEST(t_many_hosts){
  char *zDir = th_tmpdir("pgread_hosts");
  char *zUri = prUriOf(getenv("DEPOT_TEST_STORE_URI"), "hosts", getpid());
  int nRound = th_scaled(25, 1);
  sqlite3 *db = prOpen(zDir, zUri, "shared", "main", 0, 0);
  sqlite3 *mem = th_open(":memory:");
  pid_t aPid[PR_HOSTS];
  int i, j, nTotal = 0;
  char *aSeen;
  int64_t n;
  prMakeBank(db);
  th_exec(db, "CREATE TABLE mine(host, k)");
  for(i=0; i<PR_HOSTS; i++){
    th_execf(mem, "SELECT depot_fork(%Q, 'shared', 'main', 'b%d')", zUri, i);
  }
  sqlite3_close(db);
  for(i=0; i<PR_HOSTS; i++){
    char zI[16], zN[16];
    const char *azArg[6];
    sqlite3_snprintf(sizeof(zI), zI, "%d", i);
    sqlite3_snprintf(sizeof(zN), zN, "%d", nRound);
    azArg[0] = "host"; azArg[1] = zUri; azArg[2] = zDir; azArg[3] = zI;
    azArg[4] = zN; azArg[5] = 0;
    aPid[i] = th_spawn(azArg);
  }
  for(i=0; i<PR_HOSTS; i++){
    int st = 0;
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0,
                  "host %d failed check %d", i, WEXITSTATUS(st));
  }
  /* the oracle: the values handed out are exactly 1..n, once each */
  db = prOpen(zDir, zUri, "shared", "main", 0, 0);
  n = th_int(db, "SELECT n FROM c");
  ck_assert_int_eq(n, PR_HOSTS*nRound);
  aSeen = sqlite3_malloc64(n+1);
  memset(aSeen, 0, n+1);
  for(i=0; i<PR_HOSTS; i++){
    char *z = sqlite3_mprintf("%s/got_%d", zDir, i);
    FILE *f = fopen(z, "r");
    long long v;
    ck_assert_ptr_nonnull(f);
    while( fscanf(f, "%lld", &v)==1 ){
      ck_assert(v>=1 && v<=n);
      ck_assert_int_eq(aSeen[v], 0);
      aSeen[v] = 1;
      nTotal++;
    }
    fclose(f);
    sqlite3_free(z);
  }
  ck_assert_int_eq(nTotal, n);
  sqlite3_free(aSeen);
  ck_assert_int_eq(th_int(db, "SELECT sum(bal) FROM acct"), PR_ACCOUNTS*100);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM mine"), 0);
  sqlite3_close(db);
  /* each host's own database and branch have all its rows */
  for(i=0; i<PR_HOSTS; i++){
    char zName[16];
    sqlite3_snprintf(sizeof(zName), zName, "h%d", i);
    db = prOpen(zDir, zUri, zName, "main", 1, 0);
    ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM r WHERE host=%d", i),
                     nRound);
    sqlite3_close(db);
    sqlite3_snprintf(sizeof(zName), zName, "b%d", i);
    db = prOpen(zDir, zUri, "shared", zName, 1, 0);
    for(j=0; j<PR_HOSTS; j++){
      ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM mine WHERE host=%d",
                               j), j==i ? nRound : 0);
    }
    th_text_is(db, "PRAGMA integrity_check", "ok");
    sqlite3_close(db);
  }
  ck_assert_int_eq(th_intf(mem, "SELECT count(*) FROM depot_verify(%Q)",
                           zUri), 0);
  sqlite3_close(mem);
  sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* ---- standbys ---- */

/* The standby's URI with the schema of zTag, or NULL (and a note) when
** the suite started no standby. */
static char *prStandbyUri(const char *zTag){
  const char *z = getenv("DEPOT_TEST_PGREPL_STANDBY_URI");
  if( z==0 || z[0]==0 ){
    fprintf(stderr, "check_pgread: no standby"
            " (DEPOT_TEST_PGREPL_STANDBY_URI):"
            " %s skipped\n", zTag);
    return 0;
  }
  return prUriOf(z, zTag, getpid());
}

/* The value of parameter zName of the URI zUri (sqlite3_malloc'd), or
** NULL. */
static char *prParam(const char *zUri, const char *zName){
  const char *z = strchr(zUri, '?');
  int n = (int)strlen(zName);
  while( z && *z ){
    z++;
    if( strncmp(z, zName, n)==0 && z[n]=='=' ){
      return sqlite3_mprintf("%.*s", (int)strcspn(z+n+1, "&"), z+n+1);
    }
    z = strchr(z, '&');
  }
  return 0;
}

/* One URI naming the primary and the standby (each given by host= and
** port= parameters, the port 5432 when absent), with
** target_session_attrs=zAttrs and the schema of zTag. */
static char *prMultiHostUri(const char *zAttrs, const char *zTag){
  const char *zP = getenv("DEPOT_TEST_STORE_URI");
  const char *zS = getenv("DEPOT_TEST_PGREPL_STANDBY_URI");
  char *zHp = prParam(zP, "host"), *zHs = prParam(zS, "host");
  char *zPp = prParam(zP, "port"), *zPs = prParam(zS, "port");
  char *zUser = prParam(zP, "user");
  char *zUri;
  ck_assert_ptr_nonnull(zHp);
  ck_assert_ptr_nonnull(zHs);
  zUri = sqlite3_mprintf("postgresql:///postgres?host=%s,%s&port=%s,%s%s%s"
      "&target_session_attrs=%s&schema=t_%s_%d", zHp, zHs,
      zPp ? zPp : "5432", zPs ? zPs : "5432", zUser ? "&user=" : "",
      zUser ? zUser : "", zAttrs, zTag, (int)getpid());
  sqlite3_free(zHp); sqlite3_free(zHs); sqlite3_free(zPp); sqlite3_free(zPs);
  sqlite3_free(zUser);
  return zUri;
}

/* Waits up to 30 s until the standby's database db shows the integer
** nWant for zSql; returns what it showed last. */
static int64_t prAwait(sqlite3 *db, const char *zSql, int64_t nWant){
  int64_t t0 = prNowMs(), v = -1;
  while( prNowMs()<t0+30000 ){
    v = th_int(db, zSql);
    if( v==nWant ) break;
    usleep(20000);
  }
  return v;
}

/* Readers of a standby while a process commits on the primary: each read
** transaction (several statements, a page cache too small to hold the
** table, so pages are read throughout it) is one committed state (every
** account has one v, the total holds, v no newer than the commit being
** tried), never older than the previous one; the standby catches up. */
START_TEST(t_standby_snapshots){
  char *zDir = th_tmpdir("pgread_snap");
  char *zUri = prUriOf(getenv("DEPOT_TEST_STORE_URI"), "snap", getpid());
  char *zStandby = prStandbyUri("snap");
  char *zTry, *zAck;
  const char *azArg[5];
  char zN[16];
  sqlite3 *db, *rd;
  pid_t pid;
  int nCommit = th_scaled(150, 1), nRead = 0, nMoved = 0, st = 0, bDone = 0;
  int64_t vPrev = 0;
  if( zStandby==0 ){ sqlite3_free(zUri); sqlite3_free(zDir); return; }
  zTry = sqlite3_mprintf("%s/trying", zDir);
  zAck = sqlite3_mprintf("%s/acked", zDir);
  db = prOpen(zDir, zUri, "bank", "main", 0, 0);
  prMakeBank(db);
  sqlite3_close(db);
  rd = prOpen(zDir, zStandby, "bank", "main", 1, 0);
  th_exec(rd, "PRAGMA cache_size=2");
  /* the standby replays the bank */
  ck_assert_int_eq(prAwait(rd, "SELECT count(*) FROM acct", PR_ACCOUNTS), PR_ACCOUNTS);
  sqlite3_snprintf(sizeof(zN), zN, "%d", nCommit);
  azArg[0] = "bank"; azArg[1] = zUri; azArg[2] = zDir; azArg[3] = zN;
  azArg[4] = 0;
  pid = th_spawn(azArg);
  while( !bDone ){
    int64_t vMin, vMax, nSum, nSum2, nTry;
    bDone = waitpid(pid, &st, WNOHANG)==pid;
    th_exec(rd, "BEGIN");
    vMin = th_int(rd, "SELECT min(v) FROM acct");
    usleep(3000);
    nSum = th_int(rd, "SELECT sum(bal) FROM acct");
    usleep(3000);
    vMax = th_int(rd, "SELECT max(v) FROM acct");
    nSum2 = th_int(rd, "SELECT sum(bal) FROM acct WHERE id%2=0")
          + th_int(rd, "SELECT sum(bal) FROM acct WHERE id%2=1");
    th_exec(rd, "COMMIT");
    nTry = prFileInt(zTry);
    ck_assert_int_eq(vMin, vMax);                 /* one commit's state */
    ck_assert_int_eq(nSum, PR_ACCOUNTS*100);
    ck_assert_int_eq(nSum2, PR_ACCOUNTS*100);
    ck_assert_int_le(vMin, nTry);                 /* nothing not committed */
    ck_assert_int_ge(vMin, vPrev);                /* never going back */
    if( vMin>vPrev ) nMoved++;
    vPrev = vMin;
    nRead++;
  }
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  ck_assert_int_eq(prFileInt(zAck), nCommit);
  /* every acknowledged commit reaches the standby's readers */
  ck_assert_int_eq(prAwait(rd, "SELECT min(v) FROM acct", nCommit), nCommit);
  ck_assert_int_eq(th_int(rd, "SELECT max(v) FROM acct"), nCommit);
  th_text_is(rd, "PRAGMA integrity_check", "ok");
  fprintf(stderr, "check_pgread: standby: %d read transactions during %d"
          " commits, %d saw a newer head\n", nRead, nCommit, nMoved);
  ck_assert_int_gt(nMoved, 1);
  sqlite3_close(rd);
  sqlite3_free(zTry); sqlite3_free(zAck);
  sqlite3_free(zStandby); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* The role and lag of each server in depot_stats and depot_replay_lag;
** the listings that only read read a standby; writes through one (a
** database opened for writing, a depot_* change) fail with
** SQLITE_READONLY and say why; one
** URI listing both servers reads from the standby with
** target_session_attrs=prefer-standby and writes to the primary with
** read-write. */
START_TEST(t_standby_role_and_writes){
  char *zDir = th_tmpdir("pgread_role");
  char *zUri = prUriOf(getenv("DEPOT_TEST_STORE_URI"), "role", getpid());
  char *zStandby = prStandbyUri("role");
  sqlite3 *db, *rd, *mem;
  char *zErr = 0;
  double rLag;
  int rc;
  if( zStandby==0 ){ sqlite3_free(zUri); sqlite3_free(zDir); return; }
  mem = th_open(":memory:");
  db = prOpen(zDir, zUri, "app", "main", 0, 0);
  th_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1)");
  /* the primary: no standby, no lag */
  ck_assert_int_eq(th_intf(mem, "SELECT standby FROM depot_stats(%Q)", zUri),
                   0);
  ck_assert_int_eq(th_intf(mem, "SELECT replay_lag=0 FROM depot_stats(%Q)",
                           zUri), 1);
  ck_assert_int_eq(th_intf(mem, "SELECT depot_replay_lag(%Q)=0", zUri), 1);
  /* the standby: its role, a lag of a few seconds at most once caught up */
  rd = prOpen(zDir, zStandby, "app", "main", 1, 0);
  ck_assert_int_eq(prAwait(rd, "SELECT count(*) FROM t", 1), 1);
  ck_assert_int_eq(th_intf(mem, "SELECT standby FROM depot_stats(%Q)",
                           zStandby), 1);
  {
    char *z = th_textf(mem, "SELECT depot_replay_lag(%Q)", zStandby);
    ck_assert_ptr_nonnull(z);
    rLag = atof(z);
    sqlite3_free(z);
  }
  ck_assert(rLag>=0 && rLag<30);
  ck_assert_int_eq(th_intf(mem, "SELECT databases FROM depot_stats(%Q)",
                           zStandby), 1);
  /* the listings that only read read the standby */
  ck_assert_int_eq(th_intf(mem, "SELECT count(*) FROM depot_commits(%Q,"
                           " 'app', 'main')", zStandby), 2);
  ck_assert_int_eq(th_intf(mem, "SELECT count(*) FROM depot_verify(%Q)",
                           zStandby), 0);
  sqlite3_close(rd);
  /* a database opened for writing on the standby refuses writes, saying
  ** why */
  rd = prOpen(zDir, zStandby, "app", "main", 0, &rc);
  ck_assert_int_eq(rc, SQLITE_OK);
  ck_assert_int_eq(th_int(rd, "SELECT count(*) FROM t"), 1);
  rc = th_try(rd, "INSERT INTO t VALUES(2)", 0);
  ck_assert_int_eq(rc&0xff, SQLITE_READONLY);
  sqlite3_close(rd);
  zErr = th_text(mem, "SELECT depot_last_error()");
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "standby")!=0, "%s", zErr);
  sqlite3_free(zErr);
  zErr = 0;
  rc = th_tryf(mem, &zErr, "SELECT depot_fork(%Q, 'app', 'main', 'dev')",
               zStandby);
  ck_assert_int_ne(rc, SQLITE_OK);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "standby")!=0, "%s", zErr);
  sqlite3_free(zErr);
  /* the primary still takes writes */
  th_exec(db, "INSERT INTO t VALUES(3)");
  /* one URI listing both servers: libpq picks the standby for a reader
  ** that prefers one, the primary for a writer */
  {
    char *zPrefer = prMultiHostUri("prefer-standby", "role");
    char *zWrite = prMultiHostUri("read-write", "role");
    sqlite3 *w;
    ck_assert_int_eq(th_intf(mem, "SELECT standby FROM depot_stats(%Q)",
                             zPrefer), 1);
    ck_assert_int_eq(th_intf(mem, "SELECT standby FROM depot_stats(%Q)",
                             zWrite), 0);
    w = prOpen(zDir, zWrite, "app", "main", 0, 0);
    th_exec(w, "INSERT INTO t VALUES(4)");
    sqlite3_close(w);
    rd = prOpen(zDir, zPrefer, "app", "main", 1, 0);
    ck_assert_int_eq(prAwait(rd, "SELECT count(*) FROM t", 3), 3);
    sqlite3_close(rd);
    sqlite3_free(zPrefer);
    sqlite3_free(zWrite);
  }
  sqlite3_close(db);
  sqlite3_close(mem);
  sqlite3_free(zStandby); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

/* One SQL command on the standby's server through libpq (its URI
** without the backend's parameters); 1 when it returned true. */
static int prStandbySql(const char *zSql){
  PGconn *c = PQconnectdb(getenv("DEPOT_TEST_PGREPL_STANDBY_URI"));
  PGresult *r = PQexec(c, zSql);
  int bTrue = PQresultStatus(r)==PGRES_TUPLES_OK && PQntuples(r)==1
           && PQgetvalue(r, 0, 0)[0]=='t';
  PQclear(r);
  PQfinish(c);
  return bTrue;
}

/* The replay lag depot_replay_lag() reports for zStore (-1: NULL). */
static double prLag(sqlite3 *mem, const char *zStore){
  char *z = th_textf(mem, "SELECT depot_replay_lag(%Q)", zStore);
  double r = z ? atof(z) : -1;
  sqlite3_free(z);
  return r;
}

/* With the standby's replay paused, its readers go on reading the head it
** replayed last while the primary commits, and the lag shows it; once
** replay resumes, the next read transaction sees the new head and the lag
** goes back to 0. */
START_TEST(t_standby_paused){
  char *zDir = th_tmpdir("pgread_pause");
  char *zUri = prUriOf(getenv("DEPOT_TEST_STORE_URI"), "pause", getpid());
  char *zStandby = prStandbyUri("pause");
  sqlite3 *db, *rd, *mem;
  int64_t nPaused, nStale, bStandby;
  double rLagPaused, rLagAfter = -1;
  int bPaused, i;
  if( zStandby==0 ){ sqlite3_free(zUri); sqlite3_free(zDir); return; }
  mem = th_open(":memory:");
  db = prOpen(zDir, zUri, "pz", "main", 0, 0);
  th_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(0)");
  rd = prOpen(zDir, zStandby, "pz", "main", 1, 0);
  ck_assert_int_eq(prAwait(rd, "SELECT count(*) FROM t", 1), 1);
  /* pause replay; the primary commits five rows (synchronous_commit on
  ** waits for the standby's flush, not for its replay) */
  prStandbySql("SELECT pg_wal_replay_pause() IS NULL");
  for(i=0, bPaused=0; i<300 && !bPaused; i++){
    bPaused = prStandbySql("SELECT pg_get_wal_replay_pause_state()='paused'");
    if( !bPaused ) usleep(10000);
  }
  for(i=1; i<=5; i++) th_execf(db, "INSERT INTO t VALUES(%d)", i);
  usleep(300000);
  nPaused = th_int(rd, "SELECT count(*) FROM t");
  nStale = th_int(rd, "SELECT max(x) FROM t");
  rLagPaused = prLag(mem, zStandby);
  bStandby = th_intf(mem, "SELECT standby FROM depot_stats(%Q)", zStandby);
  /* resume before any assertion, so that a failure leaves the standby
  ** replaying for the tests after this one */
  prStandbySql("SELECT pg_wal_replay_resume() IS NULL");
  ck_assert(bPaused);
  ck_assert_int_eq(nPaused, 1);          /* the head replayed before */
  ck_assert_int_eq(nStale, 0);
  ck_assert_int_eq(bStandby, 1);
  ck_assert_msg(rLagPaused>=0.2, "lag while paused: %f", rLagPaused);
  /* replay resumed: the next read transactions see the new head */
  ck_assert_int_eq(prAwait(rd, "SELECT count(*) FROM t", 6), 6);
  for(i=0; i<300; i++){
    rLagAfter = prLag(mem, zStandby);
    if( rLagAfter==0 ) break;
    usleep(10000);
  }
  ck_assert_msg(rLagAfter==0, "lag after catching up: %f", rLagAfter);
  sqlite3_close(rd);
  sqlite3_close(db);
  sqlite3_close(mem);
  sqlite3_free(zStandby); sqlite3_free(zUri); sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("pgread");
  TCase *tc = tcase_create("hosts");
  tcase_add_test(tc, t_many_hosts);
  suite_add_tcase(s, tc);
  tc = tcase_create("standby");
  tcase_add_test(tc, t_standby_snapshots);
  tcase_add_test(tc, t_standby_role_and_writes);
  tcase_add_test(tc, t_standby_paused);
  suite_add_tcase(s, tc);
  return s;
}
