## ext/ -- extension entry point, SQL surface, KV engine.
include_HEADERS = ext/depot.h
DEPOT_SOURCES += \
	ext/depot.h \
	ext/depot_int.h \
	ext/depot.c \
	ext/version.c \
	ext/depot_sql.c \
	ext/depot_branch_sql.c ext/depot_verify_sql.c ext/depot_tvf.c
DEPOT_SOURCES += ext/depot_compact_sql.c
DEPOT_SOURCES += \
	ext/kv_codec.h \
	ext/kv_codec.c \
	ext/kv_map.h \
	ext/kv_map.c

# The kvlib suite: kv_codec and kv_map.
check_PROGRAMS += tests/check_kvlib
TESTS += tests/check_kvlib
tests_check_kvlib_SOURCES = tests/check_kvlib.c $(TEST_HARNESS)
tests_check_kvlib_LDADD = $(TEST_LDADD)
tests_depot_bench_SOURCES += tests/bench_kvlib.c

# The KV engine, the kv_memory backend and the KV SQL surface.
DEPOT_SOURCES += \
	ext/kv_backend.h \
	ext/kv_engine.h \
	ext/kv_engine_int.h \
	ext/kv_engine.c \
	ext/kv_catalog.c \
	ext/kv_txn.c \
	ext/kv_iter.c \
	ext/kv_memory.c \
	ext/kv_sql.h \
	ext/kv_vtab.c \
	ext/kv_func.c \
	ext/kv_tables.c \
	ext/kv_version.h \
	ext/kv_version.c \
	ext/kv_readset.c \
	ext/kv_metrics.c \
	ext/kv_vfunc.c

# The kv suite: engine, SQL surface, concurrency, durability.
check_PROGRAMS += tests/check_kv
TESTS += tests/check_kv
tests_check_kv_SOURCES = tests/check_kv.c $(TEST_HARNESS)
tests_check_kv_LDADD = $(TEST_LDADD)
tests_depot_bench_SOURCES += tests/bench_kv.c
## kv_log storage engine (private header ext/kv_logstore.h)
DEPOT_SOURCES += \
	ext/kv_logstore.h \
	ext/kv_logstore_int.h \
	ext/kv_logstore.c \
	ext/kv_logcompact.c

check_PROGRAMS += tests/check_kvlog
TESTS += tests/check_kvlog
tests_check_kvlog_SOURCES = tests/check_kvlog.c $(TEST_HARNESS)
tests_check_kvlog_LDADD = $(TEST_LDADD)
tests_depot_bench_SOURCES += tests/bench_kvlog.c
tests_depot_bench_SOURCES += tests/bench_kvlogsql.c

# The kvversion suite: the key-version protocol, version TTL, kv_metrics.
check_PROGRAMS += tests/check_kvversion
TESTS += tests/check_kvversion
tests_check_kvversion_SOURCES = tests/check_kvversion.c $(TEST_HARNESS)
tests_check_kvversion_LDADD = $(TEST_LDADD)
# The same protocol from Python, as a caching application uses it (~5 s).
TESTS += tests/python_kvversion_app.sh
EXTRA_DIST += tests/python_kvversion_app.sh
tests_depot_bench_SOURCES += tests/bench_kvversion.c

## kv_btree and kv_log backends, kv_stats.
DEPOT_SOURCES += \
	ext/kv_btree.h \
	ext/kv_btree.c \
	ext/kv_log.h \
	ext/kv_log.c \
	ext/kv_stats.c

check_PROGRAMS += tests/check_kvbtree
TESTS += tests/check_kvbtree
tests_check_kvbtree_SOURCES = tests/check_kvbtree.c $(TEST_HARNESS)
tests_check_kvbtree_LDADD = $(TEST_LDADD)
tests_depot_bench_SOURCES += tests/bench_kvbtree.c
