/*
** bench.c -- make bench: every workload of the project, each against its
** baseline in the same run, printed as a Markdown table (see bench.h).
**
** Usage: tests/bench/depot_bench [--pairs N] [--doc FILE] [WORKLOAD ...]
**
** With no WORKLOAD every workload runs; an unknown name is an error (exit
** 2, nothing run).  --pairs N overrides every workload's number of pairs.
**
** --doc FILE: after the run, rewrite the results table of FILE: the lines
** between the marker lines BENCH_DOC_BEGIN and BENCH_DOC_END.  The new
** table has one row per workload of this program, in table order: a
** workload this run measured gets its new row, any other keeps the row
** FILE had for it, or a row without figures.  The line above the table
** names the machine of this run.  FILE is checked for both markers before
** anything runs, re-read after the run (it may have been edited
** meanwhile), written to FILE.tmp and renamed over FILE; without the
** markers it is left alone and the program fails.
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
  { "kv_btree_point",
    "20k point reads, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_btree table on a file (temp declaration)",
    1.00, 5, bench_kvsql_btree_point },
  { "kv_btree_range",
    "10000 range reads of 20 rows, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_btree table on a file (temp declaration)",
    1.00, 5, bench_kvsql_btree_range },
  { "kv_btree_scan",
    "20 full scans of 20k rows, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_btree table on a file (temp declaration)",
    1.00, 5, bench_kvsql_btree_scan },
  { "kv_btree_upsert1",
    "2000 single-row autocommit upserts, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_btree table on a file (temp declaration), kv_synchronous('normal')",
    1.00, 5, bench_kvsql_btree_upsert1 },
  { "kv_btree_upsert1_full",
    "2000 single-row autocommit upserts, WITHOUT ROWID file table (WAL, synchronous=FULL)",
    "same, kv_btree table on a file (temp declaration), kv_synchronous('full')",
    0, 5, bench_kvsql_btree_upsert1_full },
  { "kv_btree_upsertN",
    "20x1000 upserts in transactions, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_btree table on a file (temp declaration)",
    1.00, 5, bench_kvsql_btree_upsertN },
  { "twopc_mixed_vs_file",
    "2000 transactions inserting an order row, file table (WAL, synchronous=NORMAL)",
    "same, plus an upsert of a kv_btree table (mixed: commit marker)",
    0, 5, bench_twopc_mixed_vs_file },
  { "twopc_mixed_vs_before",
    "2000 mixed order + kv_btree transactions, commit marker switched off",
    "same, with the commit marker",
    0, 5, bench_twopc_mixed_vs_before },
  { "twopc_kv_only",
    "2000 kv_btree-only transactions, commit marker step switched off",
    "same, marker step on (it writes nothing for KV-only commits)",
    1.05, 5, bench_twopc_kv_only },
  { "kv_log_point",
    "20k point reads, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_log table on a file (temp declaration)",
    1.00, 5, bench_kvsql_log_point },
  { "kv_log_range",
    "10000 range reads of 20 rows, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_log table on a file (temp declaration)",
    1.00, 5, bench_kvsql_log_range },
  { "kv_log_scan",
    "20 full scans of 20k rows, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_log table on a file (temp declaration)",
    1.00, 5, bench_kvsql_log_scan },
  { "kv_log_upsert1",
    "2000 single-row autocommit upserts, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_log table on a file (temp declaration), kv_synchronous('normal')",
    1.00, 5, bench_kvsql_log_upsert1 },
  { "kv_log_upsert1_full",
    "2000 single-row autocommit upserts, WITHOUT ROWID file table (WAL, synchronous=FULL)",
    "same, kv_log table on a file (temp declaration), kv_synchronous('full')",
    0, 5, bench_kvsql_log_upsert1_full },
  { "kv_log_upsertN",
    "20x1000 upserts in transactions, WITHOUT ROWID file table (WAL, synchronous=NORMAL)",
    "same, kv_log table on a file (temp declaration)",
    1.00, 5, bench_kvsql_log_upsertN },
  { "kv_memory_point",
    "20k point reads, WITHOUT ROWID :memory: table",
    "same, kv_memory table on a file (temp declaration)",
    1.00, 5, bench_kvsql_memory_point },
  { "kv_memory_range",
    "10000 range reads of 20 rows, WITHOUT ROWID :memory: table",
    "same, kv_memory table on a file (temp declaration)",
    1.00, 5, bench_kvsql_memory_range },
  { "kv_memory_scan",
    "20 full scans of 20k rows, WITHOUT ROWID :memory: table",
    "same, kv_memory table on a file (temp declaration)",
    1.00, 5, bench_kvsql_memory_scan },
  { "kv_memory_upsert1",
    "2000 single-row autocommit upserts, WITHOUT ROWID :memory: table",
    "same, kv_memory table on a file (temp declaration)",
    1.00, 5, bench_kvsql_memory_upsert1 },
  { "kv_memory_upsertN",
    "20x1000 upserts in transactions, WITHOUT ROWID :memory: table",
    "same, kv_memory table on a file (temp declaration)",
    1.00, 5, bench_kvsql_memory_upsertN },
  { "kv_floor_point",
    "20k point reads, WITHOUT ROWID :memory: table",
    "same, a minimal virtual table (rows in a C array, no work per row)",
    0, 5, bench_kvsql_floor_point },
  { "kv_floor_range",
    "10000 range reads of 20 rows, WITHOUT ROWID :memory: table",
    "same, a minimal virtual table (rows in a C array, no work per row)",
    0, 5, bench_kvsql_floor_range },
  { "kv_floor_scan",
    "20 full scans of 20k rows, WITHOUT ROWID :memory: table",
    "same, a minimal virtual table (rows in a C array, no work per row)",
    0, 5, bench_kvsql_floor_scan },
  { "kvmp_point_read",
    "20000 autocommit point reads of a kv_btree table, no other process",
    "same while another process commits to the table",
    0, 5, bench_kvmp_point_read },
  { "kvmp_4proc_commit",
    "2000 one-row commits (FULL) of a kv_btree table, 1 process (per commit)",
    "same on disjoint keys, 4 processes with 500 each at once",
    1.00, 5, bench_kvmp_4proc_commit },
  { "kvmp_log_point_read",
    "20000 autocommit point reads of a kv_log table, no other process",
    "same while another process commits to the table",
    0, 5, bench_kvmp_log_point_read },
  { "kvmp_log_4proc_commit",
    "2000 one-row commits (FULL) of a kv_log table, 1 process (per commit)",
    "same on disjoint keys, 4 processes with 500 each at once",
    1.00, 5, bench_kvmp_log_4proc_commit },
  { "kv_btree_8conn",
    "4000 read-modify-write txns, 1 connection (per txn)",
    "same on disjoint keys, 8 connections on one file, 8 threads (per txn)",
    0.33, 5, bench_kvsql_btree_8conn },
  { "derived_vs_sqlite",
    "10k inserts + 10k updates in 1000-row txns: SQLite table, expression "
    "index, trigger counter (WAL, sync NORMAL)",
    "the same into a kv_btree table with a kv_index and a kv_counter "
    "(kv_synchronous normal)",
    1.00, 5, bench_derived_vs_sqlite },
  { "derived_vs_plain",
    "the same into a kv_btree table without carriers",
    "the same with a kv_index and a kv_counter",
    0, 5, bench_derived_vs_plain },
  { "queue_vs_sqlite",
    "4000 enqueues, leases of 10, 4000 acks, each its own txn: SQLite table "
    "with UPDATE ... RETURNING leases (WAL, sync NORMAL)",
    "the same through a kv_queue: kv_enqueue, kv_queue_lease, kv_queue_ack "
    "(kv_synchronous normal)",
    1.00, 5, bench_queue_vs_sqlite },
  { "ttl_sweep_vs_sqlite",
    "20k rows, 10k expired: DELETE of 256 expired rows per txn until none, "
    "plain table with a deadline index (WAL, sync NORMAL)",
    "the same rows in a kv_btree table with ttl_ms, removed by kv_sweep() "
    "(256 per root txn, kv_synchronous normal)",
    0, 5, bench_ttl_sweep_vs_sqlite },
  { "ttl_sweep_200k_vs_sqlite",
    "200k rows, the same 10k expired (every 20th key): the same DELETEs",
    "the same rows in a kv_btree table with ttl_ms, removed by kv_sweep()",
    0, 5, bench_ttl_sweep_200k_vs_sqlite },
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
  { "big_vacuum",
    "VACUUM INTO a plain file, ~1 GB TPC-H-like source (DEPOT_BENCH_BIG_MB)",
    "VACUUM INTO a new depot database (peak RSS of each run: stderr)",
    3.00, 3, bench_big_vacuum },
  { "big_import",
    "backup API copy of the source into a plain file",
    "depot_import of the source into a new depot database",
    3.00, 3, bench_big_import },
  { "big_load",
    "one transaction INSERT of every lineitem row into a plain file",
    "the same transaction into a depot database",
    0, 3, bench_big_load },
  { "big_read",
    "scan, aggregate, 2000 lookups; read-only process, 2 MB page cache, plain",
    "the same on the imported depot database, cache_kb=2048",
    0, 3, bench_big_read },
  { "big_compact",
    "VACUUM of the plain file after the load",
    "depot_compact + depot_gc of the depot database after the load",
    0, 3, bench_big_compact },
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
    "stored bytes after depot_compact + depot_gc, time targets off (DEPOT_BENCH_COMPACT_COMMITS)",
    2.00, 1, bench_compact_space },
  { "compact_read",
    "cold full read of 100 MB / 10k commits, no read-ahead, before compaction",
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
  { "pool_acquire",
    "fixed reference: 1 µs per acquire+release (the target)",
    "CPU per uncontended read lease acquire+release, pool of 4 readers",
    1.00, 7, bench_pool_acquire },
  { "pool_read_file",
    "32000 range reads (200 rows each), 1 reader lease, 1 thread, WAL file",
    "same reads over 4 reader leases in 4 threads",
    0.59, 7, bench_pool_read_file },
  { "pool_read_depot",
    "32000 range reads (200 rows each), 1 reader lease, 1 thread, depot db",
    "same reads over 4 reader leases in 4 threads",
    0.59, 7, bench_pool_read_depot },
  { "async_overhead",
    "fixed reference: 10 µs per statement (the target)",
    "CPU per point read: async runner (1 worker, 64 in flight, recipe)"
    " minus direct sqlite3_step loop",
    1.00, 7, bench_async_overhead },
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

/* The table's header and separator lines (no newline at the end). */
#define BENCH_TABLE_HEAD \
  "| workload | baseline | candidate | pairs | baseline cost (median) | " \
  "candidate cost (median) | ratio (median) | ratio min–max | target | " \
  "peak RSS |\n" \
  "|---|---|---|---|---|---|---|---|---|---|"

/* The target cell of workload pW; med<0: no figure to compare. */
static char *benchTarget(const BenchWorkload *pW, double med){
  if( pW->rTarget<=0 ) return sqlite3_mprintf("(report)");
  if( med<0 ) return sqlite3_mprintf("≤ %.2f", pW->rTarget);
  return sqlite3_mprintf("≤ %.2f %s", pW->rTarget,
                         med<=pW->rTarget ? "met" : "NOT MET");
}

/* The row of a workload that has no figures (not run, or failed with
** zWhy "failed"), sqlite3_malloc'd. */
static char *benchEmptyRow(const BenchWorkload *pW, const char *zWhy){
  char *zTarget = benchTarget(pW, -1);
  char *z = sqlite3_mprintf("| %s | %s | %s | |%s%s | | | | %s | |",
      pW->zName, pW->zBaseline, pW->zCandidate, zWhy[0] ? " " : "", zWhy,
      zTarget);
  sqlite3_free(zTarget);
  return z;
}

/* Run workload pW in a child process.  Returns its table row
** (sqlite3_malloc'd, no newline; NULL on OOM) and sets *pbFail when the
** workload failed. */
static char *benchRun(const BenchWorkload *pW, int nPair, const char *zTmp,
                      int *pbFail){
  int fd[2];
  pid_t pid;
  BenchResult r;
  double aRatio[BENCH_MAX_PAIR];
  double lo, hi, med, bMed, cMed;
  int i, st;
  char *zDir, *zTarget, *zRow;
  *pbFail = 1;
  if( pipe(fd)!=0 ) return benchEmptyRow(pW, "failed");
  zDir = sqlite3_mprintf("%s/bench-%s", zTmp, pW->zName);
  fflush(stdout);
  pid = fork();
  if( pid==0 ){
    close(fd[0]);
    benchChild(pW, nPair, zDir, fd[1]);
  }
  close(fd[1]);
  memset(&r, 0, sizeof(r));
  if( pid<0 || read(fd[0], &r, sizeof(r))!=(ssize_t)sizeof(r) ) r.ok = 0;
  close(fd[0]);
  if( pid>0 ) waitpid(pid, &st, 0);
  emptyDir(zDir);
  rmdir(zDir);
  sqlite3_free(zDir);
  if( !r.ok || r.nPair<1 || r.nPair>BENCH_MAX_PAIR ){
    return benchEmptyRow(pW, "failed");
  }
  *pbFail = 0;
  for(i=0; i<r.nPair; i++) aRatio[i] = r.aCand[i]/r.aBase[i];
  med = median(aRatio, r.nPair);      /* sorts aRatio */
  lo = aRatio[0]; hi = aRatio[r.nPair-1];
  bMed = median(r.aBase, r.nPair);
  cMed = median(r.aCand, r.nPair);
  zTarget = benchTarget(pW, med);
  zRow = sqlite3_mprintf(
      "| %s | %s | %s | %d | %.4g | %.4g | %.3f | %.3f–%.3f | %s |"
      " %.1f MiB |",
      pW->zName, pW->zBaseline, pW->zCandidate, r.nPair, bMed, cMed, med,
      lo, hi, zTarget, r.maxRssKb/1024.0);
  sqlite3_free(zTarget);
  return zRow;
}

/* "sqlite-depot V, SQLite V, OS arch, cpu, N cores", sqlite3_malloc'd. */
static char *benchMachine(void){
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
  return sqlite3_mprintf("sqlite-depot %s, SQLite %s, %s %s, %s, %ld cores",
      PACKAGE_VERSION, sqlite3_libversion(), u.sysname, u.machine, zCpu,
      sysconf(_SC_NPROCESSORS_ONLN));
}

/* ---- the results table of a document (--doc) ---- */

#define BENCH_DOC_BEGIN "<!-- bench:begin -->"
#define BENCH_DOC_END   "<!-- bench:end -->"

/* The whole of file zPath, sqlite3_malloc'd and NUL-terminated; NULL with
** a message on stderr when it cannot be read. */
static char *benchDocRead(const char *zPath){
  FILE *f = fopen(zPath, "rb");
  char *z = 0;
  long n;
  if( f==0 ){
    fprintf(stderr, "bench: cannot open %s: %s\n", zPath, strerror(errno));
    return 0;
  }
  if( fseek(f, 0, SEEK_END)==0 && (n = ftell(f))>=0
   && fseek(f, 0, SEEK_SET)==0 && (z = sqlite3_malloc64(n+1))!=0 ){
    if( fread(z, 1, (size_t)n, f)!=(size_t)n ){
      sqlite3_free(z);
      z = 0;
    }else{
      z[n] = 0;
    }
  }
  if( z==0 ) fprintf(stderr, "bench: cannot read %s\n", zPath);
  fclose(f);
  return z;
}

/* The first line of zDoc, at or after z, that is exactly zLine (given
** without its newline; the last line may lack one), or NULL. */
static const char *benchDocLine(const char *zDoc, const char *z,
                                const char *zLine){
  size_t n = strlen(zLine);
  for(z=strstr(z, zLine); z; z=strstr(z+1, zLine)){
    if( (z==zDoc || z[-1]=='\n') && (z[n]=='\n' || z[n]==0) ) return z;
  }
  return 0;
}

/* Where the table of document zDoc goes: *piBody is the offset just past
** the begin marker's line, *piEnd that of the end marker.  0 if zDoc lacks
** either marker on a line of its own, in that order. */
static int benchDocFind(const char *zDoc, size_t *piBody, size_t *piEnd){
  const char *zBegin = benchDocLine(zDoc, zDoc, BENCH_DOC_BEGIN);
  const char *zEnd;
  if( zBegin==0 ) return 0;
  zBegin += strlen(BENCH_DOC_BEGIN);
  if( *zBegin=='\n' ) zBegin++;
  zEnd = benchDocLine(zDoc, zBegin, BENCH_DOC_END);
  if( zEnd==0 ) return 0;
  *piBody = (size_t)(zBegin - zDoc);
  *piEnd = (size_t)(zEnd - zDoc);
  return 1;
}

/* The row the table zDoc[iBody..iEnd) has for workload zName (a line
** whose first cell is exactly zName), sqlite3_malloc'd without its
** newline, or NULL. */
static char *benchDocRow(const char *zDoc, size_t iBody, size_t iEnd,
                         const char *zName){
  size_t i = iBody, nName = strlen(zName);
  while( i<iEnd ){
    size_t n = strcspn(zDoc+i, "\n");
    if( i+n>iEnd ) n = iEnd - i;
    if( n>=nName+4 && strncmp(zDoc+i, "| ", 2)==0
     && strncmp(zDoc+i+2, zName, nName)==0
     && strncmp(zDoc+i+2+nName, " |", 2)==0 ){
      return sqlite3_mprintf("%.*s", (int)n, zDoc+i);
    }
    i += n+1;
  }
  return 0;
}

/* Rewrite the table of document zPath with the rows azRow[] (NULL: a
** workload this run did not measure).  Returns 0 on success. */
static int benchDocWrite(const char *zPath, const char *zMachine,
                         char **azRow){
  char *zDoc = benchDocRead(zPath);
  char *zTmp = 0;
  sqlite3_str *pOut;
  size_t iBody = 0, iEnd = 0;
  FILE *f = 0;
  int j, rc = 1;
  if( zDoc==0 ) return 1;
  if( !benchDocFind(zDoc, &iBody, &iEnd) ){
    fprintf(stderr, "bench: %s has no line \"%s\" followed by a line"
            " \"%s\"; not changed\n", zPath, BENCH_DOC_BEGIN, BENCH_DOC_END);
    sqlite3_free(zDoc);
    return 1;
  }
  pOut = sqlite3_str_new(0);
  sqlite3_str_append(pOut, zDoc, (int)iBody);
  sqlite3_str_appendf(pOut, "\nMachine of the latest run: %s.\n\n%s\n",
                      zMachine, BENCH_TABLE_HEAD);
  for(j=0; j<BENCH_NWORKLOAD; j++){
    char *zRow = azRow[j];
    char *zOld = 0;
    if( zRow==0 ){
      zOld = benchDocRow(zDoc, iBody, iEnd, aWorkload[j].zName);
      if( zOld==0 ) zOld = benchEmptyRow(&aWorkload[j], "");
      zRow = zOld;
    }
    sqlite3_str_appendf(pOut, "%s\n", zRow ? zRow : "");
    sqlite3_free(zOld);
  }
  sqlite3_str_appendf(pOut, "\n%s", zDoc+iEnd);
  zTmp = sqlite3_mprintf("%s.tmp", zPath);
  if( sqlite3_str_errcode(pOut)==SQLITE_OK && zTmp
   && (f = fopen(zTmp, "wb"))!=0 ){
    size_t n = (size_t)sqlite3_str_length(pOut);
    int bOk = fwrite(sqlite3_str_value(pOut), 1, n, f)==n;
    if( fclose(f)==0 && bOk && rename(zTmp, zPath)==0 ){
      rc = 0;
    }
  }
  if( rc ){
    fprintf(stderr, "bench: cannot write %s: %s\n", zPath, strerror(errno));
    if( zTmp ) unlink(zTmp);
  }
  sqlite3_free(sqlite3_str_finish(pOut));
  sqlite3_free(zTmp);
  sqlite3_free(zDoc);
  return rc;
}

/* Index of workload zName in aWorkload[], or -1. */
static int benchFind(const char *zName){
  int j;
  for(j=0; j<BENCH_NWORKLOAD; j++){
    if( strcmp(aWorkload[j].zName, zName)==0 ) return j;
  }
  return -1;
}

int main(int argc, char **argv){
  const char *zTmp = getenv("DEPOT_TEST_TMPDIR");
  const char *zDoc = 0;
  char *azRow[BENCH_NWORKLOAD];
  int abSel[BENCH_NWORKLOAD];
  char *zMachine;
  int nPairOverride = 0;
  int nFail = 0;
  int i, j, nSel = 0;
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "tests/tmp";
  memset(azRow, 0, sizeof(azRow));
  memset(abSel, 0, sizeof(abSel));
  for(i=1; i<argc; i++){
    if( strcmp(argv[i], "--pairs")==0 && i+1<argc ){
      nPairOverride = atoi(argv[++i]);
      if( nPairOverride<1 || nPairOverride>BENCH_MAX_PAIR ){
        fprintf(stderr, "bench: --pairs must be 1..%d\n", BENCH_MAX_PAIR);
        return 2;
      }
    }else if( strcmp(argv[i], "--doc")==0 && i+1<argc ){
      zDoc = argv[++i];
    }else if( (j = benchFind(argv[i]))>=0 ){
      abSel[j] = 1;
      nSel++;
    }else{
      fprintf(stderr, "bench: unknown workload or option \"%s\"\n"
              "usage: %s [--pairs N] [--doc FILE] [WORKLOAD ...]\n",
              argv[i], argv[0]);
      return 2;
    }
  }
  if( zDoc ){
    char *z = benchDocRead(zDoc);
    size_t iBody, iEnd;
    int bOk = z && benchDocFind(z, &iBody, &iEnd);
    sqlite3_free(z);
    if( !bOk ){
      if( z ) fprintf(stderr, "bench: %s has no line \"%s\" followed by a"
                      " line \"%s\"\n", zDoc, BENCH_DOC_BEGIN, BENCH_DOC_END);
      return 2;
    }
  }
  mkdir(zTmp, 0777);
  zMachine = benchMachine();
  printf("%s\n\n%s\n", zMachine ? zMachine : "", BENCH_TABLE_HEAD);
  for(j=0; j<BENCH_NWORKLOAD; j++){
    int bFail = 0;
    if( nSel>0 && !abSel[j] ) continue;
    azRow[j] = benchRun(&aWorkload[j],
                        nPairOverride ? nPairOverride : aWorkload[j].nPair,
                        zTmp, &bFail);
    printf("%s\n", azRow[j] ? azRow[j] : "");
    nFail += bFail || azRow[j]==0;
  }
  printf("\nratio = candidate cost / baseline cost per alternated pair; "
         "below 1 means the candidate is faster.\n");
  if( zDoc ){
    if( benchDocWrite(zDoc, zMachine ? zMachine : "", azRow) ) nFail++;
    else printf("bench: results table of %s rewritten\n", zDoc);
  }
  for(j=0; j<BENCH_NWORKLOAD; j++) sqlite3_free(azRow[j]);
  sqlite3_free(zMachine);
  return nFail ? 1 : 0;
}
