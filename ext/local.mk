## ext/ -- extension entry point, SQL surface, KV engine.
include_HEADERS = ext/depot.h
DEPOT_SOURCES += \
	ext/depot.h \
	ext/depot_int.h \
	ext/depot.c \
	ext/version.c
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
