## tests/bench/ -- make bench: one program, tests/bench/depot_bench, with a
## workload file per layer; not built by make all or make check.
EXTRA_PROGRAMS += tests/bench/depot_bench
tests_bench_depot_bench_SOURCES = tests/bench/bench.c tests/bench/bench.h \
	tests/bench/bench_wal.c \
	tests/bench/bench_kvlib.c tests/bench/bench_kv.c \
	tests/bench/bench_kvlog.c tests/bench/bench_kvlogsql.c \
	tests/bench/bench_kvversion.c tests/bench/bench_kvbtree.c \
	tests/bench/bench_depot.c tests/bench/bench_fork.c \
	tests/bench/bench_compact.c tests/bench/bench_lock.c
tests_bench_depot_bench_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
# bench_lock.c runs one-row commits with and without the writer lock
tests_bench_depot_bench_LDFLAGS = $(AM_LDFLAGS) \
	-Wl,--wrap=store_writer_lock -Wl,--wrap=store_writer_unlock
CLEANFILES += tests/bench/depot_bench

bench: tests/bench/depot_bench$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	  ./tests/bench/depot_bench$(EXEEXT) $(BENCH_ARGS)
