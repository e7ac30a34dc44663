/*
** bench_pgfail.c -- make bench-pg's failover figure: how long a depot
** writer on a replicated PostgreSQL store cannot commit when its primary
** dies.
**
** Usage: tests/bench/pgfail_bench --cluster tests/check/pg_cluster.sh
**                                 --dir DIR [--trials N]
**
** Each trial (default 5) starts, with pg_cluster.sh under DIR/tN, a
** primary and a streaming standby with synchronous replication, opens a
** depot database through the multi-host URI of both
** (target_session_attrs=read-write) and commits one-row INSERTs for a
** second; then it kills the primary (pg_ctl stop -m immediate), starts
** the standby's promotion in a child process, and goes on trying the same
** INSERT on the same connection every 5 ms until one commits.  It prints
** per trial the milliseconds from the primary's death (the kill command
** returned) to the promotion command's return and to the first
** acknowledged commit, and their medians, minima and maxima.  The writer
** reaches the new primary through the backend's failover: the call that
** finds its connection lost connects again, trying each host of the URI
** with pauses of 50..500 ms, until a primary accepts (failover_ms).
** Every commit acknowledged before the kill must be there after it
** (checked).
*/
#include "config.h"
#include "ext/depot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define PF_MAX_TRIAL 50

static double pfNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return tv.tv_sec*1000.0 + tv.tv_usec/1000.0;
}

static const char *zPfCluster = 0;

/* "sh CLUSTER ARGS": its first output line (sqlite3_malloc'd), NULL when
** it fails. */
static char *pfSh(const char *zArgs){
  char *zCmd = sqlite3_mprintf("sh '%s' %s", zPfCluster, zArgs);
  char aLine[4096];
  FILE *f = popen(zCmd, "r");
  int n;
  sqlite3_free(zCmd);
  if( f==0 ) return 0;
  aLine[0] = 0;
  if( fgets(aLine, sizeof(aLine), f)==0 ) aLine[0] = 0;
  while( fgetc(f)!=EOF ){}
  if( pclose(f)!=0 ) return 0;
  n = (int)strlen(aLine);
  while( n>0 && (aLine[n-1]=='\n' || aLine[n-1]=='\r') ) aLine[--n] = 0;
  return sqlite3_mprintf("%s", aLine);
}

/* zUri escaped for a value of an SQLite URI parameter. */
static char *pfEsc(const char *zUri){
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

static int pfCmp(const void *a, const void *b){
  double x = *(const double*)a, y = *(const double*)b;
  return x<y ? -1 : x>y;
}

static double pfMedian(double *a, int n){
  qsort(a, n, sizeof(double), pfCmp);
  return n%2 ? a[n/2] : (a[n/2-1]+a[n/2])/2;
}

/* One trial in zDir: *prPromote and *prCommit the milliseconds from the
** kill to the promotion's end and to the first commit.  0, or 1 when the
** trial failed (a message says why). */
static int pfTrial(const char *zDir, int iTrial, double *prPromote,
                   double *prCommit){
  char *zP = sqlite3_mprintf("%s/t%d/p", zDir, iTrial);
  char *zS = sqlite3_mprintf("%s/t%d/s", zDir, iTrial);
  char *zArgs, *zMulti = 0, *zE, *zName;
  sqlite3 *db = 0;
  double t0, tKill, tPromoted = 0, t;
  pid_t pid;
  int i, nBefore = 0, nFail = 0, rc = 1, st = 0, bDone = 0;
  zArgs = sqlite3_mprintf("start '%s'", zP);
  sqlite3_free(pfSh(zArgs));
  sqlite3_free(zArgs);
  zArgs = sqlite3_mprintf("standby '%s' '%s' s", zP, zS);
  sqlite3_free(pfSh(zArgs));
  sqlite3_free(zArgs);
  zArgs = sqlite3_mprintf("sync '%s' 'FIRST 1 (s)'", zP);
  sqlite3_free(pfSh(zArgs));
  sqlite3_free(zArgs);
  zArgs = sqlite3_mprintf("multi '%s' '%s'", zP, zS);
  zMulti = pfSh(zArgs);
  sqlite3_free(zArgs);
  if( zMulti==0 || zMulti[0]==0 ){
    fprintf(stderr, "pgfail: trial %d: no servers\n", iTrial);
    goto done;
  }
  {
    char *zUri = sqlite3_mprintf("%s&schema=failover", zMulti);
    zE = pfEsc(zUri);
    sqlite3_free(zUri);
  }
  zName = sqlite3_mprintf("file:%s/t%d/app?vfs=depot&db=app&store=%s", zDir,
                          iTrial, zE);
  sqlite3_free(zE);
  sqlite3_open(":memory:", &db);
  sqlite3_close(db);
  db = 0;
  if( sqlite3_open_v2(zName, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, 0)!=SQLITE_OK
   || sqlite3_exec(db, "CREATE TABLE t(i INTEGER PRIMARY KEY, b)", 0, 0,
                   0)!=SQLITE_OK ){
    fprintf(stderr, "pgfail: trial %d: %s\n", iTrial, sqlite3_errmsg(db));
    sqlite3_free(zName);
    goto done;
  }
  sqlite3_free(zName);
  /* a second of commits on the primary */
  t0 = pfNowMs();
  for(i=0; pfNowMs()<t0+1000; i++){
    char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d, randomblob(500))", i);
    if( sqlite3_exec(db, z, 0, 0, 0)!=SQLITE_OK ){
      fprintf(stderr, "pgfail: trial %d: %s\n", iTrial, sqlite3_errmsg(db));
      sqlite3_free(z);
      goto done;
    }
    sqlite3_free(z);
  }
  nBefore = i;
  /* the primary dies; the standby's promotion starts */
  zArgs = sqlite3_mprintf("kill '%s'", zP);
  sqlite3_free(pfSh(zArgs));
  sqlite3_free(zArgs);
  tKill = pfNowMs();
  pid = fork();
  if( pid==0 ){
    char *zCmd = sqlite3_mprintf("sh '%s' promote '%s'", zPfCluster, zS);
    execlp("sh", "sh", "-c", zCmd, (char*)0);
    _exit(127);
  }
  for(i=nBefore; ; i++){
    char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d, randomblob(500))", i);
    int rcIns = sqlite3_exec(db, z, 0, 0, 0);
    sqlite3_free(z);
    t = pfNowMs();
    if( !bDone && waitpid(pid, &st, WNOHANG)==pid ){
      bDone = 1;
      tPromoted = t;
    }
    if( rcIns==SQLITE_OK ) break;
    nFail++;
    if( t>tKill+60000 ){
      fprintf(stderr, "pgfail: trial %d: no commit 60 s after the kill: %s\n",
              iTrial, sqlite3_errmsg(db));
      goto done;
    }
    usleep(5000);
  }
  if( !bDone ){
    waitpid(pid, &st, 0);
    tPromoted = pfNowMs();
  }
  *prCommit = t - tKill;
  *prPromote = tPromoted - tKill;
  /* the commits acknowledged before the kill are all there */
  {
    sqlite3_stmt *q = 0;
    int n = -1;
    if( sqlite3_prepare_v2(db, "SELECT count(*) FROM t WHERE i<?1", -1, &q,
                           0)==SQLITE_OK ){
      sqlite3_bind_int(q, 1, nBefore);
      if( sqlite3_step(q)==SQLITE_ROW ) n = sqlite3_column_int(q, 0);
    }
    sqlite3_finalize(q);
    if( n!=nBefore ){
      fprintf(stderr, "pgfail: trial %d: %d of %d acknowledged commits"
              " after the failover\n", iTrial, n, nBefore);
      goto done;
    }
  }
  printf("| %d | %d | %d | %.0f | %.0f |\n", iTrial, nBefore, nFail,
         *prPromote, *prCommit);
  fflush(stdout);
  rc = 0;
done:
  sqlite3_close(db);
  zArgs = sqlite3_mprintf("stopall '%s' '%s'", zP, zS);
  sqlite3_free(pfSh(zArgs));
  sqlite3_free(zArgs);
  sqlite3_free(zMulti);
  sqlite3_free(zP);
  sqlite3_free(zS);
  return rc;
}

int main(int argc, char **argv){
  const char *zDir = 0;
  int nTrial = 5, i, n = 0, nFailed = 0;
  double aPromote[PF_MAX_TRIAL], aCommit[PF_MAX_TRIAL];
  double aP2[PF_MAX_TRIAL], aC2[PF_MAX_TRIAL], aD[PF_MAX_TRIAL];
  for(i=1; i<argc; i++){
    if( strcmp(argv[i], "--cluster")==0 && i+1<argc ){
      zPfCluster = argv[++i];
    }else if( strcmp(argv[i], "--dir")==0 && i+1<argc ){
      zDir = argv[++i];
    }else if( strcmp(argv[i], "--trials")==0 && i+1<argc ){
      nTrial = atoi(argv[++i]);
    }else{
      zDir = 0;
      break;
    }
  }
  if( zPfCluster==0 || zDir==0 || nTrial<1 || nTrial>PF_MAX_TRIAL ){
    fprintf(stderr, "usage: %s --cluster pg_cluster.sh --dir DIR"
            " [--trials 1..%d]\n", argv[0], PF_MAX_TRIAL);
    return 2;
  }
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  printf("\n### failover: primary killed (pg_ctl stop -m immediate) ->"
         " standby promoted -> first commit, synchronous replication,"
         " %d trials\n\n", nTrial);
  printf("| trial | commits before | failed tries | kill->promoted ms"
         " | kill->first commit ms |\n|---|---|---|---|---|\n");
  fflush(stdout);
  for(i=0; i<nTrial; i++){
    if( pfTrial(zDir, i, &aPromote[n], &aCommit[n])==0 ){
      n++;
    }else{
      nFailed++;
    }
  }
  if( n>0 ){
    for(i=0; i<n; i++) aD[i] = aCommit[i] - aPromote[i];
    memcpy(aP2, aPromote, sizeof(double)*n);
    memcpy(aC2, aCommit, sizeof(double)*n);
    qsort(aP2, n, sizeof(double), pfCmp);
    qsort(aC2, n, sizeof(double), pfCmp);
    printf("\nfailover (kill -> first commit): median %.0f ms, min %.0f,"
           " max %.0f; kill -> promoted (pg_ctl promote until"
           " pg_is_in_recovery() is false): median %.0f ms; first commit -"
           " promoted: median %.0f ms\n", pfMedian(aC2, n), aC2[0], aC2[n-1],
           pfMedian(aP2, n), pfMedian(aD, n));
  }
  if( nFailed ) printf("failed trials: %d\n", nFailed);
  return nFailed>0;
}
