## tests/fuzz/ -- fuzz targets, their seed corpora and their smoke runs.
##
## make check builds every target with gcc and tests/fuzz/driver.c (no
## fuzzing engine) as tests/fuzz/smoke_<target> and feeds it its seed
## corpus tests/fuzz/corpus/<target>/ once.
## make fuzz builds the targets with clang and libFuzzer (see fuzz.mk) and
## fuzzes each for FUZZ_SECONDS (default 60) seconds.
## make fuzz-seeds rewrites the seed corpora with the project's encoders.

FUZZ_SMOKE_LDADD = libdepot_core.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
# The targets include layer headers that pull in sqlite3ext.h.
FUZZ_SMOKE_CPPFLAGS = $(AM_CPPFLAGS) -DSQLITE_CORE

check_PROGRAMS += tests/fuzz/smoke_wal_record tests/fuzz/smoke_ltx \
	tests/fuzz/smoke_layout tests/fuzz/smoke_kv_codec \
	tests/fuzz/smoke_sql_args
TESTS += tests/fuzz/smoke_wal_record tests/fuzz/smoke_ltx \
	tests/fuzz/smoke_layout tests/fuzz/smoke_kv_codec \
	tests/fuzz/smoke_sql_args

tests_fuzz_smoke_wal_record_SOURCES = tests/fuzz/driver.c tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_wal_record.c
tests_fuzz_smoke_wal_record_CPPFLAGS = $(FUZZ_SMOKE_CPPFLAGS) -DFUZZ_TARGET='"wal_record"'
tests_fuzz_smoke_wal_record_LDADD = $(FUZZ_SMOKE_LDADD)

tests_fuzz_smoke_ltx_SOURCES = tests/fuzz/driver.c tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_ltx.c
tests_fuzz_smoke_ltx_CPPFLAGS = $(FUZZ_SMOKE_CPPFLAGS) -DFUZZ_TARGET='"ltx"'
tests_fuzz_smoke_ltx_LDADD = $(FUZZ_SMOKE_LDADD)

tests_fuzz_smoke_layout_SOURCES = tests/fuzz/driver.c tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_layout.c
tests_fuzz_smoke_layout_CPPFLAGS = $(FUZZ_SMOKE_CPPFLAGS) -DFUZZ_TARGET='"layout"'
tests_fuzz_smoke_layout_LDADD = $(FUZZ_SMOKE_LDADD)

tests_fuzz_smoke_kv_codec_SOURCES = tests/fuzz/driver.c tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_kv_codec.c
tests_fuzz_smoke_kv_codec_CPPFLAGS = $(FUZZ_SMOKE_CPPFLAGS) -DFUZZ_TARGET='"kv_codec"'
tests_fuzz_smoke_kv_codec_LDADD = $(FUZZ_SMOKE_LDADD)

tests_fuzz_smoke_sql_args_SOURCES = tests/fuzz/driver.c tests/fuzz/fuzz.h \
	tests/fuzz/fuzz_sql_args.c
tests_fuzz_smoke_sql_args_CPPFLAGS = $(FUZZ_SMOKE_CPPFLAGS) -DFUZZ_TARGET='"sql_args"'
tests_fuzz_smoke_sql_args_LDADD = $(FUZZ_SMOKE_LDADD)

EXTRA_PROGRAMS += tests/fuzz/fuzz_seeds
tests_fuzz_fuzz_seeds_SOURCES = tests/fuzz/seeds.c
tests_fuzz_fuzz_seeds_CPPFLAGS = $(FUZZ_SMOKE_CPPFLAGS)
tests_fuzz_fuzz_seeds_LDADD = $(FUZZ_SMOKE_LDADD)
CLEANFILES += tests/fuzz/fuzz_seeds

EXTRA_DIST += tests/fuzz/corpus tests/fuzz/fuzz.mk

fuzz-seeds: tests/fuzz/fuzz_seeds$(EXEEXT)
	./tests/fuzz/fuzz_seeds$(EXEEXT) $(srcdir)/tests/fuzz/corpus

fuzz: config.h $(BUILT_SOURCES)
	$(MAKE) -f $(srcdir)/tests/fuzz/fuzz.mk srcdir='$(srcdir)' \
	  DEPOT_SOURCES='$(DEPOT_SOURCES)' SQLITE3_CFLAGS='$(SQLITE3_CFLAGS)' \
	  ZSTD_CFLAGS='$(ZSTD_CFLAGS) $(LIBPQ_CFLAGS)' SQLITE3_LIBS='$(SQLITE3_LIBS)' \
	  ZSTD_LIBS='$(ZSTD_LIBS) $(LIBPQ_LIBS)'

clean-local: clean-fuzz
clean-fuzz:
	-rm -rf tests/fuzz/build tests/fuzz/work tests/fuzz/fuzz_wal_record \
	  tests/fuzz/fuzz_ltx tests/fuzz/fuzz_layout tests/fuzz/fuzz_kv_codec \
	  tests/fuzz/fuzz_sql_args

.PHONY: fuzz fuzz-seeds clean-fuzz
