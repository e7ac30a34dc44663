## vfs/ -- the depot VFS and its outer store.
DEPOT_SOURCES += \
	vfs/store.h vfs/store.c vfs/store_sqlite.c \
	vfs/ltx.h vfs/ltx.c \
	vfs/layout.h vfs/layout.c \
	vfs/pcache.h vfs/pcache.c \
	vfs/txbuf.h vfs/txbuf.c \
	vfs/db.h vfs/db.c vfs/branch.c vfs/fork.c \
	vfs/admin.c vfs/quota.c vfs/verify.c vfs/compact.c \
	vfs/depot_vfs.h vfs/vfs.c

check_PROGRAMS += tests/check_vfs tests/check_depot tests/check_fork
TESTS += tests/check_vfs tests/check_depot tests/check_fork
check_PROGRAMS += tests/check_verify
TESTS += tests/check_verify
tests_check_verify_SOURCES = tests/check_verify.c $(TEST_HARNESS)
tests_check_verify_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/check_compact
TESTS += tests/check_compact
tests_check_compact_SOURCES = tests/check_compact.c $(TEST_HARNESS)
tests_check_compact_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/check_depotdiff
TESTS += tests/check_depotdiff
tests_check_depotdiff_SOURCES = tests/check_depotdiff.c $(TEST_HARNESS)
tests_check_depotdiff_LDADD = $(TEST_LDADD)
tests_check_fork_SOURCES = tests/check_fork.c $(TEST_HARNESS)
tests_check_fork_LDADD = $(TEST_LDADD)
tests_check_vfs_SOURCES = tests/check_vfs.c $(TEST_HARNESS)
tests_check_vfs_LDADD = $(TEST_LDADD)
tests_check_depot_SOURCES = tests/check_depot.c $(TEST_HARNESS)
tests_check_depot_LDADD = $(TEST_LDADD)
tests_depot_bench_SOURCES += tests/bench_depot.c tests/bench_fork.c
tests_depot_bench_SOURCES += tests/bench_compact.c

# make torture: the SIGKILL and store-fault tests of the depot and fork
# suites with many kill rounds (DEPOT_TORTURE_ITERS, default 200).
torture: tests/check_depot$(EXEEXT) tests/check_fork$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	DEPOT_TORTURE_ITERS=$${DEPOT_TORTURE_ITERS:-200} CK_RUN_CASE=faults \
	CK_DEFAULT_TIMEOUT=$${CK_DEFAULT_TIMEOUT:-3600} \
	  ./tests/check_depot$(EXEEXT)
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	DEPOT_TORTURE_ITERS=$${DEPOT_TORTURE_ITERS:-200} CK_RUN_CASE=faults \
	CK_DEFAULT_TIMEOUT=$${CK_DEFAULT_TIMEOUT:-3600} \
	  ./tests/check_fork$(EXEEXT)
.PHONY: torture
