## ext/cli/ -- the `depot` command-line program, and libdepot, the
## extension as a shared library for C programs (pkg-config depot).
##
## libdepot_nt.la is $(DEPOT_SOURCES) compiled with -DSQLITE_CORE and no
## test hooks (libdepot_core.la has -DDEPOT_TEST); the program links it
## statically, and libdepot.la is it as an installed shared library that
## exports sqlite3_depot_init and the depot_* C API (depot_pool.h,
## depot_kv.h).
noinst_LTLIBRARIES += libdepot_nt.la
libdepot_nt_la_SOURCES = $(DEPOT_SOURCES)
libdepot_nt_la_CPPFLAGS = $(AM_CPPFLAGS) -DSQLITE_CORE
libdepot_nt_la_LIBADD = $(SQLITE3_LIBS) $(ZSTD_LIBS) $(LIBPQ_LIBS)

lib_LTLIBRARIES += libdepot.la
libdepot_la_SOURCES =
libdepot_la_LIBADD = libdepot_nt.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
libdepot_la_LDFLAGS = $(AM_LDFLAGS) -version-info 0:0:0 \
	-export-symbols-regex '^(sqlite3_depot_init|depot_(pool|lease|async|kv)_.*)$$'

pkgconfigdir = $(libdir)/pkgconfig
pkgconfig_DATA = depot.pc
EXTRA_DIST += depot.pc.in

bin_PROGRAMS = depot
depot_SOURCES = ext/cli/cli.h ext/cli/main.c ext/cli/out.c ext/cli/name.c \
	ext/cli/cmd_data.c ext/cli/cmd_branch.c ext/cli/cmd_store.c \
	ext/cli/cmd_kv.c
depot_CPPFLAGS = $(AM_CPPFLAGS) -DSQLITE_CORE \
	-DDEPOT_MODULE_DIR='"$(libdir)"'
depot_LDADD = libdepot_nt.la $(SQLITE3_LIBS) $(ZSTD_LIBS)
