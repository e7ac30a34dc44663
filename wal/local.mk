## wal/ -- the root write-ahead log of KV stores.
DEPOT_SOURCES += \
	wal/wal.h \
	wal/wal_int.h \
	wal/io.c \
	wal/record.c \
	wal/segment.c \
	wal/confirm.c \
	wal/append.c \
	wal/wal.c

check_PROGRAMS += tests/check_wal
TESTS += tests/check_wal
tests_check_wal_SOURCES = tests/check_wal.c $(TEST_HARNESS)
tests_check_wal_LDADD = $(TEST_LDADD)
tests_depot_bench_SOURCES += tests/bench_wal.c
