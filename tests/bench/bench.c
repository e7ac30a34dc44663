/*
** bench.c -- make bench: every workload of the project, each against its
** baseline in the same run, printed as a Markdown table (see bench.h).
**
** Usage: tests/bench/depot_bench [--pairs N] [WORKLOAD ...]
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BENCH_MAX_PAIR 64

double bench_now(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec/1e9;
}

/* ---- calibration: plain SQLite inserts, with and without the module ---- */

#define CAL_ROWS 100000

static double calInsert(int bCandidate, const char *zDir){
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  double t0, t1;
  int i;
  (void)zDir;
  sqlite3_reset_auto_extension();
  if( bCandidate ){
    sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  }
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ) return -1;
  sqlite3_exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)", 0, 0, 0);
  sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?1, printf('value-%d', ?1))",
                     -1, &pStmt, 0);
  t0 = bench_now();
  sqlite3_exec(db, "BEGIN", 0, 0, 0);
  for(i=0; i<CAL_ROWS; i++){
    sqlite3_bind_int(pStmt, 1, i);
    sqlite3_step(pStmt);
    sqlite3_reset(pStmt);
  }
  sqlite3_exec(db, "COMMIT", 0, 0, 0);
  t1 = bench_now();
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  sqlite3_reset_auto_extension();
  return t1 - t0;
}

static const BenchWorkload aWorkload[] = {
  { "calibration",
    "100k inserts, plain SQLite",
    "100k inserts, depot loaded",
    1.10, 9, calInsert },
  { "kv_map_put",
    "100 x 1000-row INSERT OR REPLACE txns, WITHOUT ROWID, in memory",
    "same rows: kv_codec + write-set kv_map, applied to a shared kv_map",
    0, 7, bench_kv_map_put },
  { "kv_memory_upsert",
    "20x1000 upserts, WITHOUT ROWID table, :memory:",
    "20x1000 upserts, kv_memory table",
    1.00, 7, bench_kv_memory_upsert },
  { "kv_group_commit",
    "800 durable commits, 1 thread (per commit)",
    "800 durable commits, 8 threads pulling from one counter (per commit)",
    0.25, 5, bench_kv_group_commit },
  { "kv_btree_upsert",
    "20x1000 upserts, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "20x1000 upserts, kv_btree table (collector running meanwhile)",
    1.25, 5, bench_kv_btree_upsert },
  { "kv_btree_upsert_drained",
    "same, then PRAGMA wal_checkpoint(FULL)",
    "same, then wait until the collector has written and confirmed all",
    0, 5, bench_kv_btree_upsert_drained },
  { "kv_btree_read",
    "20k point reads by key, WITHOUT ROWID file table",
    "20k point reads by key, kv_btree table (rows in its data file)",
    1.25, 5, bench_kv_btree_read },
  { "kv_btree_stream",
    "200x1000 upserts of 200-byte values, file table",
    "same into kv_btree with a 20000-entry overlay limit (10x): peak RSS",
    0, 3, bench_kv_btree_stream },
  { "kv_log_load",
    "1M keys, 100 synced txns, SQLite file WITHOUT ROWID (WAL, sync FULL)",
    "1M keys, 100 kv_logstore_apply + kv_logstore_sync",
    0, 3, bench_kvlog_load },
  { "kv_log_reopen",
    "open the 1M-row SQLite file, count(*)",
    "kv_logstore_open of 1M keys (median = s per million keys)",
    0, 3, bench_kvlog_reopen },
  { "kv_log_sql_load",
    "1M keys via SQL, 100 txns of 10k INSERTs, WITHOUT ROWID file (WAL, sync FULL)",
    "same INSERTs into a kv_log table, until the log is synced and confirmed",
    0, 3, bench_kvlog_sql_load },
  { "kv_log_sql_reopen",
    "reopen the file database, first point query",
    "reopen, first point query on the kv_log table (median = s per million keys)",
    0, 3, bench_kvlog_sql_reopen },
  { "kv_version_1",
    "ordinary 2PC, kv_memory, 1 key/txn: kv_get over json_each, kv_put, "
    "kv_prepare, kv_commit",
    "versioned 2PC: kv_query_with_versions, kv_put, "
    "prepare/commit_with_version",
    0, 5, bench_kvversion_1 },
  { "kv_version_16",
    "ordinary 2PC, kv_memory, 16 keys/txn",
    "versioned 2PC, kv_memory, 16 keys/txn",
    0, 5, bench_kvversion_16 },
  { "kv_version_256",
    "ordinary 2PC, kv_memory, 256 keys/txn",
    "versioned 2PC, kv_memory, 256 keys/txn",
    1.10, 5, bench_kvversion_256 },
  { "kv_version_btree_1",
    "ordinary 2PC, kv_btree, 1 key/txn",
    "versioned 2PC, kv_btree, 1 key/txn",
    0, 5, bench_kvversion_btree_1 },
  { "kv_version_btree_16",
    "ordinary 2PC, kv_btree, 16 keys/txn",
    "versioned 2PC, kv_btree, 16 keys/txn",
    0, 5, bench_kvversion_btree_16 },
  { "kv_version_btree_256",
    "ordinary 2PC, kv_btree, 256 keys/txn",
    "versioned 2PC, kv_btree, 256 keys/txn",
    1.10, 5, bench_kvversion_btree_256 },
  { "kv_version_durable_1",
    "ordinary 2PC, kv_memory persistence=1 (WAL sync per commit), 1 key/txn",
    "versioned 2PC, kv_memory persistence=1, 1 key/txn",
    0, 5, bench_kvversion_durable_1 },
  { "kv_version_durable_16",
    "ordinary 2PC, kv_memory persistence=1, 16 keys/txn",
    "versioned 2PC, kv_memory persistence=1, 16 keys/txn",
    0, 5, bench_kvversion_durable_16 },
  { "kv_version_durable_256",
    "ordinary 2PC, kv_memory persistence=1, 256 keys/txn",
    "versioned 2PC, kv_memory persistence=1, 256 keys/txn",
    1.10, 5, bench_kvversion_durable_256 },
  { "wal_group_commit",
    "1 thread, durable WAL appends",
    "8 threads appending at once",
    0.25, 5, bench_wal_group_commit },
  { "depot_speed",
    "speedtest steps, unix VFS, synchronous=FULL",
    "same steps, depot VFS, store synchronous=FULL",
    1.50, 3, bench_depot_speed },
  { "depot_bytes",
    "text-heavy table, plain file bytes (=1.0)",
    "same table, depot store bytes / plain bytes",
    0.60, 1, bench_depot_bytes },
  { "lock_commit",
    "one-row transaction, depot, writer lock skipped",
    "same with the cross-process writer lock (store_sync=normal)",
    1.10, 5, bench_lock_commit },
  { "lock_procs",
    "4 processes x 250 autocommit INSERTs, plain file, WAL, sync FULL",
    "same on one depot database, store_sync=full",
    0, 3, bench_lock_procs },
  { "lock_procs_normal",
    "4 processes x 250 autocommit INSERTs, plain file, WAL, sync NORMAL",
    "same on one depot database, store_sync=normal",
    0, 3, bench_lock_procs_normal },
  { "fork_size",
    "fork a 1 MB depot database (per fork)",
    "fork a 1 GB one (DEPOT_BENCH_FORK_MB; smaller if the build passes ~60 s)",
    2.00, 3, bench_fork_size },
  { "fork_read_1",
    "read a 32 MB database on its own branch, page cache off",
    "same read through a fork 1 level deep",
    0, 3, bench_fork_read_1 },
  { "fork_read_4",
    "read a 32 MB database on its own branch, page cache off",
    "same read through a fork 4 levels deep",
    0, 3, bench_fork_read_4 },
  { "fork_read_16",
    "read a 32 MB database on its own branch, page cache off",
    "same read through a fork 16 levels deep",
    0, 3, bench_fork_read_16 },
  { "compact_space",
    "live bytes of a depot database after 100k small commits",
    "stored bytes after depot_compact + depot_gc (DEPOT_BENCH_COMPACT_COMMITS)",
    2.00, 1, bench_compact_space },
  { "compact_read",
    "cold full read of 100 MB / 10k commits, before compaction",
    "same read after depot_compact + depot_gc (DEPOT_BENCH_COMPACT_MB)",
    0.50, 3, bench_compact_read },
  { "compact_pitr",
    "restore lookup at a time, 1k commits of history (per restore)",
    "same with 100k commits of history (DEPOT_BENCH_PITR_COMMITS)",
    2.00, 3, bench_compact_pitr },
  { "compact_commits",
    "500 five-row commits on a 20 MB database, background compaction off",
    "same with compact_after=5 (DEPOT_BENCH_COMMITS)",
    0, 3, bench_compact_commits },
};
#define BENCH_NWORKLOAD ((int)(sizeof(aWorkload)/sizeof(aWorkload[0])))

/* ---- the framework ---- */

typedef struct BenchResult BenchResult;
struct BenchResult {
  int nPair;
  double aBase[BENCH_MAX_PAIR];
  double aCand[BENCH_MAX_PAIR];
  long maxRssKb;
  int ok;
};

static int cmpDouble(const void *a, const void *b){
  double x = *(const double*)a, y = *(const double*)b;
  return x<y ? -1 : x>y ? 1 : 0;
}

static double median(double *a, int n){
  qsort(a, n, sizeof(double), cmpDouble);
  return (n%2) ? a[n/2] : (a[n/2-1]+a[n/2])/2;
}

static void emptyDir(const char *zDir){
  char *zCmd = sqlite3_mprintf("rm -rf '%q' && mkdir -p '%q'", zDir, zDir);
  if( system(zCmd)!=0 ) fprintf(stderr, "bench: cannot reset %s\n", zDir);
  sqlite3_free(zCmd);
}

/* Child side: alternate the runs and write the result to fd. */
static void benchChild(const BenchWorkload *pW, int nPair,
                       const char *zDir, int fd){
  BenchResult r;
  struct rusage ru;
  int i;
  memset(&r, 0, sizeof(r));
  r.nPair = nPair;
  r.ok = 1;
  for(i=0; i<nPair && r.ok; i++){
    emptyDir(zDir);
    r.aBase[i] = pW->xRun(0, zDir);
    emptyDir(zDir);
    r.aCand[i] = pW->xRun(1, zDir);
    if( r.aBase[i]<=0 || r.aCand[i]<=0 ) r.ok = 0;
  }
  getrusage(RUSAGE_SELF, &ru);
  r.maxRssKb = ru.ru_maxrss;
  if( write(fd, &r, sizeof(r))!=(ssize_t)sizeof(r) ) _exit(2);
  _exit(0);
}

static int benchRun(const BenchWorkload *pW, int nPair, const char *zTmp){
  int fd[2];
  pid_t pid;
  BenchResult r;
  double aRatio[BENCH_MAX_PAIR];
  double lo, hi, med, bMed, cMed;
  int i, st;
  char *zDir = sqlite3_mprintf("%s/bench-%s", zTmp, pW->zName);
  if( pipe(fd)!=0 ) return 1;
  fflush(stdout);
  pid = fork();
  if( pid==0 ){
    close(fd[0]);
    benchChild(pW, nPair, zDir, fd[1]);
  }
  close(fd[1]);
  memset(&r, 0, sizeof(r));
  if( read(fd[0], &r, sizeof(r))!=(ssize_t)sizeof(r) ) r.ok = 0;
  close(fd[0]);
  waitpid(pid, &st, 0);
  emptyDir(zDir);
  rmdir(zDir);
  sqlite3_free(zDir);
  if( !r.ok ){
    printf("| %s | %s | %s | failed | | | | | |\n",
           pW->zName, pW->zBaseline, pW->zCandidate);
    return 1;
  }
  for(i=0; i<r.nPair; i++) aRatio[i] = r.aCand[i]/r.aBase[i];
  med = median(aRatio, r.nPair);
  lo = aRatio[0]; hi = aRatio[r.nPair-1];
  bMed = median(r.aBase, r.nPair);
  cMed = median(r.aCand, r.nPair);
  printf("| %s | %s | %s | %.4g s | %.4g s | %.3f | %.3f–%.3f |",
         pW->zName, pW->zBaseline, pW->zCandidate, bMed, cMed, med, lo, hi);
  if( pW->rTarget>0 ){
    printf(" ≤ %.2f %s |", pW->rTarget, med<=pW->rTarget ? "met" : "NOT MET");
  }else{
    printf(" (report) |");
  }
  printf(" %.1f MiB |\n", r.maxRssKb/1024.0);
  return 0;
}

static void printMachine(void){
  struct utsname u;
  FILE *f = fopen("/proc/cpuinfo", "r");
  char zLine[256];
  char zCpu[200] = "unknown cpu";
  if( f ){
    while( fgets(zLine, sizeof(zLine), f) ){
      if( strncmp(zLine, "model name", 10)==0 ){
        char *p = strchr(zLine, ':');
        if( p ){
          snprintf(zCpu, sizeof(zCpu), "%s", p+2);
          zCpu[strcspn(zCpu, "\n")] = 0;
        }
        break;
      }
    }
    fclose(f);
  }
  uname(&u);
  printf("sqlite-depot %s, SQLite %s, %s %s, %s, %ld cores\n\n",
         PACKAGE_VERSION, sqlite3_libversion(), u.sysname, u.machine, zCpu,
         sysconf(_SC_NPROCESSORS_ONLN));
}

int main(int argc, char **argv){
  const char *zTmp = getenv("DEPOT_TEST_TMPDIR");
  int nPairOverride = 0;
  int nFail = 0;
  int i, j, nSel = 0;
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "tests/tmp";
  mkdir(zTmp, 0777);
  for(i=1; i<argc; i++){
    if( strcmp(argv[i], "--pairs")==0 && i+1<argc ){
      nPairOverride = atoi(argv[++i]);
      if( nPairOverride<1 || nPairOverride>BENCH_MAX_PAIR ){
        fprintf(stderr, "bench: --pairs must be 1..%d\n", BENCH_MAX_PAIR);
        return 2;
      }
    }else{
      nSel++;
    }
  }
  printMachine();
  printf("| workload | baseline | candidate | baseline median | "
         "candidate median | ratio (median) | ratio min–max | target | "
         "peak RSS |\n");
  printf("|---|---|---|---|---|---|---|---|---|\n");
  for(j=0; j<BENCH_NWORKLOAD; j++){
    const BenchWorkload *pW = &aWorkload[j];
    int bRun = (nSel==0);
    for(i=1; i<argc && !bRun; i++){
      if( strcmp(argv[i], "--pairs")==0 ){ i++; continue; }
      if( strcmp(argv[i], pW->zName)==0 ) bRun = 1;
    }
    if( !bRun ) continue;
    nFail += benchRun(pW, nPairOverride ? nPairOverride : pW->nPair, zTmp);
  }
  printf("\nratio = candidate cost / baseline cost per alternated pair; "
         "below 1 means the candidate is faster.\n");
  return nFail ? 1 : 0;
}
