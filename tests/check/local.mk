## tests/check/ -- the Check suites, one program per layer.
##
## A suite is three lines: the program, its TESTS entry, its sources
## with $(TEST_HARNESS); every suite links $(TEST_LDADD).

# The longest suite first: make -j starts the tests in this order, so it
# runs beside the others instead of alone at the end.
check_PROGRAMS += tests/check/check_staging
TESTS += tests/check/check_staging
tests_check_check_staging_SOURCES = tests/check/check_staging.c $(TEST_HARNESS)
tests_check_check_staging_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_wal
TESTS += tests/check/check_wal
tests_check_check_wal_SOURCES = tests/check/check_wal.c $(TEST_HARNESS)
tests_check_check_wal_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvlib
TESTS += tests/check/check_kvlib
tests_check_check_kvlib_SOURCES = tests/check/check_kvlib.c $(TEST_HARNESS)
tests_check_check_kvlib_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kv
TESTS += tests/check/check_kv
tests_check_check_kv_SOURCES = tests/check/check_kv.c $(TEST_HARNESS)
tests_check_check_kv_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvmp
TESTS += tests/check/check_kvmp
tests_check_check_kvmp_SOURCES = tests/check/check_kvmp.c $(TEST_HARNESS)
tests_check_check_kvmp_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvconc
TESTS += tests/check/check_kvconc
tests_check_check_kvconc_SOURCES = tests/check/check_kvconc.c $(TEST_HARNESS)
tests_check_check_kvconc_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvversion
TESTS += tests/check/check_kvversion
tests_check_check_kvversion_SOURCES = tests/check/check_kvversion.c $(TEST_HARNESS)
tests_check_check_kvversion_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_hooks
TESTS += tests/check/check_hooks
tests_check_check_hooks_SOURCES = tests/check/check_hooks.c $(TEST_HARNESS)
tests_check_check_hooks_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_hooks_api
TESTS += tests/check/check_hooks_api
tests_check_check_hooks_api_SOURCES = tests/check/check_hooks_api.c $(TEST_HARNESS)
tests_check_check_hooks_api_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvbtree
TESTS += tests/check/check_kvbtree
tests_check_check_kvbtree_SOURCES = tests/check/check_kvbtree.c $(TEST_HARNESS)
tests_check_check_kvbtree_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvlog
TESTS += tests/check/check_kvlog
tests_check_check_kvlog_SOURCES = tests/check/check_kvlog.c $(TEST_HARNESS)
tests_check_check_kvlog_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvsync
TESTS += tests/check/check_kvsync
tests_check_check_kvsync_SOURCES = tests/check/check_kvsync.c $(TEST_HARNESS)
tests_check_check_kvsync_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_kvdiff
TESTS += tests/check/check_kvdiff
tests_check_check_kvdiff_SOURCES = tests/check/check_kvdiff.c $(TEST_HARNESS)
tests_check_check_kvdiff_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_ext
TESTS += tests/check/check_ext
tests_check_check_ext_SOURCES = tests/check/check_ext.c $(TEST_HARNESS)
tests_check_check_ext_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_vfs
TESTS += tests/check/check_vfs
tests_check_check_vfs_SOURCES = tests/check/check_vfs.c $(TEST_HARNESS)
tests_check_check_vfs_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_depot
TESTS += tests/check/check_depot
tests_check_check_depot_SOURCES = tests/check/check_depot.c $(TEST_HARNESS)
tests_check_check_depot_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_fork
TESTS += tests/check/check_fork
tests_check_check_fork_SOURCES = tests/check/check_fork.c $(TEST_HARNESS)
tests_check_check_fork_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_verify
TESTS += tests/check/check_verify
tests_check_check_verify_SOURCES = tests/check/check_verify.c $(TEST_HARNESS)
tests_check_check_verify_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_pagemap
TESTS += tests/check/check_pagemap
tests_check_check_pagemap_SOURCES = tests/check/check_pagemap.c $(TEST_HARNESS)
tests_check_check_pagemap_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_compact
TESTS += tests/check/check_compact
tests_check_check_compact_SOURCES = tests/check/check_compact.c $(TEST_HARNESS)
tests_check_check_compact_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_depotdiff
TESTS += tests/check/check_depotdiff
tests_check_check_depotdiff_SOURCES = tests/check/check_depotdiff.c $(TEST_HARNESS)
tests_check_check_depotdiff_LDADD = $(TEST_LDADD)

# The loadable module carries none of the test hooks (DEPOT_TEST, which
# only libdepot_core.la is built with).
TESTS += tests/check/no_test_hooks.sh
EXTRA_DIST += tests/check/no_test_hooks.sh

# Checks of the product's shape: includes follow the layers (layers.sh),
# no source files call each other in a loop (cycles.sh, on the module's
# objects).
TESTS += tests/check/layers.sh tests/check/cycles.sh
EXTRA_DIST += tests/check/layers.sh tests/check/cycles.sh

# The SQL regression scripts sql/test/*.sql through the sqlite3 shell.
TESTS += tests/check/sqltest.sh
TESTS += tests/check/cache_sizes.sh
EXTRA_DIST += tests/check/cache_sizes.sh
EXTRA_DIST += tests/check/sqltest.sh
AM_TESTS_ENVIRONMENT += SQLITE3_SHELL='$(SQLITE3_SHELL)'; export SQLITE3_SHELL;

check_PROGRAMS += tests/check/check_lock
TESTS += tests/check/check_lock
tests_check_check_lock_SOURCES = tests/check/check_lock.c $(TEST_HARNESS)
tests_check_check_lock_LDADD = $(TEST_LDADD)

# make torture: the SIGKILL and store-fault tests of the depot and fork
# suites with many kill rounds (DEPOT_TORTURE_ITERS, default 200).
torture: tests/check/check_depot$(EXEEXT) tests/check/check_fork$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	DEPOT_TORTURE_ITERS=$${DEPOT_TORTURE_ITERS:-200} CK_RUN_CASE=faults \
	CK_DEFAULT_TIMEOUT=$${CK_DEFAULT_TIMEOUT:-3600} \
	  ./tests/check/check_depot$(EXEEXT)
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	DEPOT_TORTURE_ITERS=$${DEPOT_TORTURE_ITERS:-200} CK_RUN_CASE=faults \
	CK_DEFAULT_TIMEOUT=$${CK_DEFAULT_TIMEOUT:-3600} \
	  ./tests/check/check_fork$(EXEEXT)
.PHONY: torture

# The SQL reference: tests/check/sqldoc runs every example of the sources
# in sql/reference/ and writes docs/SQL.md (make sql-doc writes it into the
# source tree); make check's sqldoc.sh fails with a diff when the checked-in
# docs/SQL.md differs from a fresh generation.
check_PROGRAMS += tests/check/sqldoc
TESTS += tests/check/sqldoc.sh
EXTRA_DIST += tests/check/sqldoc.sh
tests_check_sqldoc_SOURCES = tests/check/sqldoc.c
tests_check_sqldoc_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)

sql-doc: tests/check/sqldoc$(EXEEXT)
	./tests/check/sqldoc$(EXEEXT) $(srcdir)/sql/reference $(srcdir)/docs/SQL.md
.PHONY: sql-doc

# The depot program: output, usage errors (cli.sh); terminal, progress
# bar and SIGINT (check_cli, under a pseudo-terminal).
check_PROGRAMS += tests/check/check_cli
TESTS += tests/check/check_cli tests/check/cli.sh
tests_check_check_cli_SOURCES = tests/check/check_cli.c $(TEST_HARNESS)
tests_check_check_cli_LDADD = $(TEST_LDADD)
EXTRA_DIST += tests/check/cli.sh

# tests/check/data/store_v1.depot: a store of the older layout (format 0,
# layout version 1) for the migration test of check_depot.
EXTRA_DIST += tests/check/data/store_v1.depot
AM_TESTS_ENVIRONMENT += DEPOT_TEST_DATA='$(abs_top_srcdir)/tests/check/data'; export DEPOT_TEST_DATA;

check_PROGRAMS += tests/check/check_pool
TESTS += tests/check/check_pool
tests_check_check_pool_SOURCES = tests/check/check_pool.c $(TEST_HARNESS)
tests_check_check_pool_LDADD = $(TEST_LDADD)

# examples/async_loop.c, the epoll loop of the async runner, as a test: the
# loop's timer never falls behind by more than a bound (async_loop.sh).
check_PROGRAMS += examples/async_loop
examples_async_loop_SOURCES = examples/async_loop.c
examples_async_loop_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/ext
examples_async_loop_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
TESTS += tests/check/async_loop.sh
EXTRA_DIST += tests/check/async_loop.sh

# make torture: the lock suite with long workloads and many SIGKILL rounds
# (DEPOT_LOCK_OPS operations per process or thread, default 1000;
# DEPOT_LOCK_KILLS rounds, default 100, of DEPOT_LOCK_KILL_OPS operations
# per worker, default 200; DEPOT_LOCK_BUSY_MS busy timeout of the workers,
# default 120000: back-to-back writers may keep one waiting for long).
torture-lock: tests/check/check_lock$(EXEEXT)
	@mkdir -p tests/tmp
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	DEPOT_LOCK_OPS=$${DEPOT_LOCK_OPS:-1000} \
	DEPOT_LOCK_KILLS=$${DEPOT_LOCK_KILLS:-100} \
	DEPOT_LOCK_KILL_OPS=$${DEPOT_LOCK_KILL_OPS:-200} \
	DEPOT_LOCK_BUSY_MS=$${DEPOT_LOCK_BUSY_MS:-120000} \
	CK_DEFAULT_TIMEOUT=$${CK_DEFAULT_TIMEOUT:-3600} \
	  ./tests/check/check_lock$(EXEEXT)
torture: torture-lock
.PHONY: torture-lock

check_PROGRAMS += tests/check/check_twopc
TESTS += tests/check/check_twopc
tests_check_check_twopc_SOURCES = tests/check/check_twopc.c $(TEST_HARNESS)
tests_check_check_twopc_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_derived
TESTS += tests/check/check_derived
tests_check_check_derived_SOURCES = tests/check/check_derived.c $(TEST_HARNESS)
tests_check_check_derived_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_queue
TESTS += tests/check/check_queue
tests_check_check_queue_SOURCES = tests/check/check_queue.c $(TEST_HARNESS)
tests_check_check_queue_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_ttl
TESTS += tests/check/check_ttl
tests_check_check_ttl_SOURCES = tests/check/check_ttl.c $(TEST_HARNESS)
tests_check_check_ttl_LDADD = $(TEST_LDADD)

check_PROGRAMS += tests/check/check_watch
TESTS += tests/check/check_watch
tests_check_check_watch_SOURCES = tests/check/check_watch.c $(TEST_HARNESS)
tests_check_check_watch_LDADD = $(TEST_LDADD)

# The PostgreSQL store backend against a private cluster that pg_suite.sh
# starts (pg_cluster.sh: initdb, pg_ctl on a unix socket, trust auth) and
# stops, also on failure; skipped without libpq or the server programs.
if HAVE_PG
check_PROGRAMS += tests/check/check_pg
tests_check_check_pg_SOURCES = tests/check/check_pg.c $(TEST_HARNESS)
tests_check_check_pg_LDADD = $(TEST_LDADD)
check_PROGRAMS += tests/check/check_pgread
tests_check_check_pgread_SOURCES = tests/check/check_pgread.c $(TEST_HARNESS)
tests_check_check_pgread_LDADD = $(TEST_LDADD)
endif
TESTS += tests/check/pg_suite.sh
EXTRA_DIST += tests/check/pg_suite.sh tests/check/pg_cluster.sh
# ... and on a primary with a streaming standby (pgrepl_suite.sh)
if HAVE_PG
check_PROGRAMS += tests/check/check_pgrepl
tests_check_check_pgrepl_SOURCES = tests/check/check_pgrepl.c $(TEST_HARNESS)
tests_check_check_pgrepl_LDADD = $(TEST_LDADD)
endif
TESTS += tests/check/pgrepl_suite.sh
EXTRA_DIST += tests/check/pgrepl_suite.sh
AM_TESTS_ENVIRONMENT += PG_BINDIR='$(PG_BINDIR)'; export PG_BINDIR;
