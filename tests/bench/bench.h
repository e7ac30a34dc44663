/*
** bench.h -- the make bench framework.
**
** A workload compares a candidate against a baseline in the same process:
** the framework alternates baseline and candidate runs (B C B C ...), each
** run returning its cost (seconds for a fixed amount of work, measured by
** the run itself so set-up is excluded).  The ratio of each candidate run
** to the baseline run just before it gives one sample; the table shows the
** median and the min-max of the samples.  A ratio below 1 means the
** candidate is cheaper.  Each workload runs in its own child process so its
** peak RSS can be reported.
*/
#ifndef DEPOT_BENCH_H
#define DEPOT_BENCH_H

typedef struct BenchWorkload BenchWorkload;
struct BenchWorkload {
  const char *zName;        /* short id, used to select workloads */
  const char *zBaseline;    /* what the baseline run does */
  const char *zCandidate;   /* what the candidate run does */
  double rTarget;           /* ratio the issue asks for at most; 0: none */
  int nPair;                /* baseline/candidate alternations */
  /* One run.  bCandidate selects the side; zDir is a scratch directory the
  ** run may fill (emptied between runs).  Returns the cost, or a negative
  ** value after printing the reason to stderr. */
  double (*xRun)(int bCandidate, const char *zDir);
};

/* Workloads (tests/bench/bench_<layer>.c). */
double bench_kv_map_put(int bCandidate, const char *zDir);
/* tests/bench/bench_kv.c */
double bench_kv_memory_upsert(int bCandidate, const char *zDir);
double bench_kv_group_commit(int bCandidate, const char *zDir);
/* tests/bench/bench_depot.c: the depot VFS against the unix VFS. */
double bench_depot_speed(int bCandidate, const char *zDir);
double bench_depot_bytes(int bCandidate, const char *zDir);
double bench_kvlog_load(int bCandidate, const char *zDir);
double bench_kvlog_reopen(int bCandidate, const char *zDir);
/* tests/bench/bench_kvlogsql.c: the same 1M keys through SQL, kv_log table. */
double bench_kvlog_sql_load(int bCandidate, const char *zDir);
double bench_kvlog_sql_reopen(int bCandidate, const char *zDir);

/* tests/bench/bench_kvversion.c: versioned against ordinary 2PC, kv_memory. */
double bench_kvversion_1(int bCandidate, const char *zDir);
double bench_kvversion_16(int bCandidate, const char *zDir);
double bench_kvversion_256(int bCandidate, const char *zDir);
double bench_kvversion_btree_1(int bCandidate, const char *zDir);
double bench_kvversion_btree_16(int bCandidate, const char *zDir);
double bench_kvversion_btree_256(int bCandidate, const char *zDir);
/* The same on a kv_memory table with persistence=1 (a WAL sync per
** commit). */
double bench_kvversion_durable_1(int bCandidate, const char *zDir);
double bench_kvversion_durable_16(int bCandidate, const char *zDir);
double bench_kvversion_durable_256(int bCandidate, const char *zDir);
/* tests/bench/bench_kvbtree.c */
double bench_kv_btree_upsert(int bCandidate, const char *zDir);
double bench_kv_btree_upsert_drained(int bCandidate, const char *zDir);
double bench_kv_btree_read(int bCandidate, const char *zDir);
double bench_kv_btree_stream(int bCandidate, const char *zDir);

/* tests/bench/bench_kvmp.c: a store shared by processes. */
double bench_kvmp_point_read(int bCandidate, const char *zDir);
double bench_kvmp_4proc_commit(int bCandidate, const char *zDir);
double bench_kvmp_log_point_read(int bCandidate, const char *zDir);
double bench_kvmp_log_4proc_commit(int bCandidate, const char *zDir);
/* tests/bench/bench_kvsql.c: KV tables against a plain table through
** prepared SQL, per backend; eight connections on one file against one. */
double bench_kvsql_btree_point(int bCandidate, const char *zDir);
double bench_kvsql_btree_range(int bCandidate, const char *zDir);
double bench_kvsql_btree_scan(int bCandidate, const char *zDir);
double bench_kvsql_btree_upsert1(int bCandidate, const char *zDir);
double bench_kvsql_btree_upsertN(int bCandidate, const char *zDir);
double bench_kvsql_log_point(int bCandidate, const char *zDir);
double bench_kvsql_log_range(int bCandidate, const char *zDir);
double bench_kvsql_log_scan(int bCandidate, const char *zDir);
double bench_kvsql_log_upsert1(int bCandidate, const char *zDir);
double bench_kvsql_log_upsertN(int bCandidate, const char *zDir);
double bench_kvsql_memory_point(int bCandidate, const char *zDir);
double bench_kvsql_memory_range(int bCandidate, const char *zDir);
double bench_kvsql_memory_scan(int bCandidate, const char *zDir);
double bench_kvsql_btree_upsert1_full(int bCandidate, const char *zDir);
double bench_kvsql_log_upsert1_full(int bCandidate, const char *zDir);
double bench_kvsql_memory_upsert1(int bCandidate, const char *zDir);
double bench_kvsql_memory_upsertN(int bCandidate, const char *zDir);
double bench_kvsql_floor_point(int bCandidate, const char *zDir);
double bench_kvsql_floor_range(int bCandidate, const char *zDir);
double bench_kvsql_floor_scan(int bCandidate, const char *zDir);
double bench_kvsql_btree_8conn(int bCandidate, const char *zDir);

/* tests/bench/bench_twopc.c: mixed KV + file transactions. */
double bench_twopc_mixed_vs_file(int bCandidate, const char *zDir);
double bench_twopc_mixed_vs_before(int bCandidate, const char *zDir);
double bench_twopc_kv_only(int bCandidate, const char *zDir);
/* tests/bench/bench_fork.c: fork time by size, reads through fork chains. */
double bench_fork_size(int bCandidate, const char *zDir);
double bench_fork_read_1(int bCandidate, const char *zDir);
double bench_fork_read_4(int bCandidate, const char *zDir);
double bench_fork_read_16(int bCandidate, const char *zDir);

/* tests/bench/bench_compact.c: compaction and reclaim. */
double bench_compact_space(int bCandidate, const char *zDir);
double bench_compact_read(int bCandidate, const char *zDir);
double bench_compact_pitr(int bCandidate, const char *zDir);
double bench_compact_commits(int bCandidate, const char *zDir);

/* tests/bench/bench_lock.c: the depot write lock. */
double bench_lock_commit(int bCandidate, const char *zDir);
double bench_lock_procs(int bCandidate, const char *zDir);
double bench_lock_procs_normal(int bCandidate, const char *zDir);

/* tests/bench/bench_derived.c: a KV source with an index and a counter
** against plain SQLite with an index and triggers, and against the KV
** source alone. */
double bench_derived_vs_sqlite(int bCandidate, const char *zDir);
double bench_derived_vs_plain(int bCandidate, const char *zDir);
/* tests/bench/bench_queue.c: a kv_queue against a SQLite table queue. */
double bench_queue_vs_sqlite(int bCandidate, const char *zDir);
/* tests/bench/bench_ttl.c: removing expired rows, kv_sweep against batched
** DELETEs of a plain table with a deadline index. */
double bench_ttl_sweep_vs_sqlite(int bCandidate, const char *zDir);
double bench_ttl_sweep_200k_vs_sqlite(int bCandidate, const char *zDir);

/* Monotonic clock, seconds. */
double bench_now(void);

/* tests/bench/bench_pool.c: the connection pool and the async runner. */
double bench_pool_acquire(int bCandidate, const char *zDir);
double bench_pool_read_file(int bCandidate, const char *zDir);
double bench_pool_read_depot(int bCandidate, const char *zDir);
double bench_async_overhead(int bCandidate, const char *zDir);

/* tests/bench/bench_big.c: databases larger than the transaction budget
** (DEPOT_BENCH_BIG_MB); peak RSS per run, printed. */
double bench_big_vacuum(int bCandidate, const char *zDir);
double bench_big_import(int bCandidate, const char *zDir);
double bench_big_load(int bCandidate, const char *zDir);
double bench_big_read(int bCandidate, const char *zDir);
double bench_big_compact(int bCandidate, const char *zDir);

/* tests/bench/bench_wal.c */
double bench_wal_group_commit(int bCandidate, const char *zDir);

#endif /* DEPOT_BENCH_H */
