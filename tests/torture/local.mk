## tests/torture/ -- the crash-torture runner and the depot SIGKILL rounds.

# The crash-torture runner and I/O-error sweep over both engines
# (tests/torture/torture.c, docs/RELIABILITY.md).  make check runs a smoke of it
# (tests/torture/torture_smoke.sh); make torture runs TORTURE_POINTS crash points
# (default 10000) and the full sweep, TORTURE_SEED fixes the seed.
check_PROGRAMS += tests/torture/torture
TESTS += tests/torture/torture_smoke.sh
EXTRA_DIST += tests/torture/torture_smoke.sh
tests_torture_torture_SOURCES = tests/torture/torture.c tests/torture/torture_io.c tests/torture/torture.h
tests_torture_torture_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
tests_torture_torture_CPPFLAGS = $(AM_CPPFLAGS) -DSQLITE_CORE

torture-runner: tests/torture/torture$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	TORTURE_POINTS=$${TORTURE_POINTS:-10000} \
	  ./tests/torture/torture$(EXEEXT) $(TORTURE_ARGS)
torture: torture-runner
.PHONY: torture-runner

# The mixed-transaction oracle (tests/torture/torture_mixed.c): crash
# rounds over WAL, rollback-journal and depot databases.
check_PROGRAMS += tests/torture/torture_mixed
tests_torture_torture_mixed_SOURCES = tests/torture/torture_mixed.c tests/torture/torture_io.c tests/torture/torture.h
tests_torture_torture_mixed_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
tests_torture_torture_mixed_CPPFLAGS = $(AM_CPPFLAGS) -DSQLITE_CORE

torture-mixed: tests/torture/torture_mixed$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	TORTURE_POINTS=$${TORTURE_POINTS:-10000} \
	  ./tests/torture/torture_mixed$(EXEEXT)
torture: torture-mixed
.PHONY: torture-mixed

# KV tables shared by processes (tests/check/check_kvmp.c): the banks
# (kv_btree, kv_log) with SIGKILLed writers for KVMP_SECONDS (default 60)
# each instead of 3 s.
torture-kvmp: tests/check/check_kvmp$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	DEPOT_MODULE='$(abs_top_builddir)/.libs/depot.so' \
	DEPOT_TORTURE_ITERS=$${KVMP_SECONDS:-60} \
	  ./tests/check/check_kvmp$(EXEEXT)
torture: torture-kvmp
.PHONY: torture-kvmp
