## tests/bench/ -- make bench: one program, tests/bench/depot_bench, with a
## workload file per layer; not built by make all or make check.
EXTRA_PROGRAMS += tests/bench/depot_bench
tests_bench_depot_bench_SOURCES = tests/bench/bench.c tests/bench/bench.h \
	tests/bench/bench_wal.c \
	tests/bench/bench_kvlib.c tests/bench/bench_kv.c \
	tests/bench/bench_kvlog.c tests/bench/bench_kvlogsql.c \
	tests/bench/bench_kvversion.c tests/bench/bench_kvbtree.c \
	tests/bench/bench_kvsql.c tests/bench/bench_twopc.c \
	tests/bench/bench_derived.c tests/bench/bench_queue.c \
	tests/bench/bench_ttl.c \
	tests/bench/bench_depot.c tests/bench/bench_fork.c \
	tests/bench/bench_compact.c tests/bench/bench_lock.c \
	tests/bench/bench_pool.c tests/bench/bench_kvmp.c tests/bench/bench_big.c
tests_bench_depot_bench_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
# bench_lock.c runs one-row commits with and without the writer lock
tests_bench_depot_bench_LDFLAGS = $(AM_LDFLAGS) \
	-Wl,--wrap=store_writer_lock -Wl,--wrap=store_writer_unlock
CLEANFILES += tests/bench/depot_bench
EXTRA_PROGRAMS += tests/bench/speed_bench
tests_bench_speed_bench_SOURCES = tests/bench/bench_speed.c
tests_bench_speed_bench_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
CLEANFILES += tests/bench/speed_bench

# make bench also rewrites the results table of BENCH_DOC (the rows of the
# workloads it ran; see tests/bench/bench.c, --doc).  BENCH_DOC= only prints.
BENCH_DOC = $(srcdir)/docs/PERFORMANCE.md
## A whole make bench (no BENCH_ARGS) ends with make bench-pg when the
## build has the PostgreSQL backend.
if HAVE_PG
BENCH_THEN_PG = yes
endif
bench: tests/bench/depot_bench$(EXEEXT)
	@mkdir -p tests/tmp
	d='$(BENCH_DOC)'; DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	  ./tests/bench/depot_bench$(EXEEXT) $${d:+--doc "$$d"} $(BENCH_ARGS)
	@if test -z '$(BENCH_ARGS)' && test -n '$(BENCH_THEN_PG)'; then \
	  $(MAKE) $(AM_MAKEFLAGS) bench-pg; fi

## make bench-large: the big_* workloads (tests/bench/bench_big.c) on a
## 4 GB source, one pair each; BENCH_ARGS as for make bench.
bench-large: tests/bench/depot_bench$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_BENCH_BIG_MB=4096 DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	  ./tests/bench/depot_bench$(EXEEXT) --pairs 1 $(BENCH_ARGS) \
	  big_vacuum big_import big_load big_read big_compact
.PHONY: bench-large

## make bench-speed: the speedtest-class workload at two sizes (a few
## minutes); BENCH_SPEED_ARGS e.g. --sizes 25,100 --runs 3.
bench-speed: tests/bench/speed_bench$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	  ./tests/bench/speed_bench$(EXEEXT) $(BENCH_SPEED_ARGS)

## make bench-pg: bench-speed's workload on the embedded store, then on a
## PostgreSQL store of private servers as a single server, with an
## asynchronous and with a synchronous streaming standby, side by side
## (commit latency and throughput, ratios), then BENCH_PG_TRIALS failover
## trials (tests/bench/pg_bench.sh, tests/bench/bench_pgfail.c);
## BENCH_PG_ARGS default --sizes 10 --runs 3 --no-history.
BENCH_PG_ARGS = --sizes 10 --runs 3 --no-history
BENCH_PG_TRIALS = 5
EXTRA_PROGRAMS += tests/bench/pgfail_bench
tests_bench_pgfail_bench_SOURCES = tests/bench/bench_pgfail.c
tests_bench_pgfail_bench_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
CLEANFILES += tests/bench/pgfail_bench
EXTRA_DIST += tests/bench/pg_bench.sh
bench-pg: tests/bench/speed_bench$(EXEEXT) tests/bench/pgfail_bench$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	  PG_BINDIR='$(PG_BINDIR)' sh $(srcdir)/tests/bench/pg_bench.sh \
	  ./tests/bench/speed_bench$(EXEEXT) ./tests/bench/pgfail_bench$(EXEEXT) \
	  $(srcdir)/tests/check/pg_cluster.sh '$(BENCH_PG_ARGS)' \
	  '$(BENCH_PG_TRIALS)'
.PHONY: bench-pg
