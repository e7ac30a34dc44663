## ext/ -- the extension: entry point, public C API, SQL surface.
## The KV engine is ext/kv/ (ext/kv/local.mk).
include_HEADERS = ext/depot.h ext/depot_pool.h ext/depot_kv.h
DEPOT_SOURCES += \
	ext/depot.h \
	ext/depot_int.h \
	ext/sqlite3_api.c \
	ext/args.c \
	ext/listing.h \
	ext/listing.c \
	ext/depot.c \
	ext/depot_version.c \
	ext/depot_sql.c \
	ext/depot_branch_sql.c \
	ext/depot_verify_sql.c \
	ext/depot_compact_sql.c \
	ext/kv_sql.h \
	ext/kv_conn.c \
	ext/kv_coord.c \
	ext/kv_decl.c \
	ext/kv_attach.c \
	ext/kv_vtab.c \
	ext/kv_func.c \
	ext/kv_tables.c \
	ext/kv_derived.c \
	ext/kv_queue.h \
	ext/kv_queue.c \
	ext/kv_stream.c \
	ext/kv_ttl.c \
	ext/kv_watch.c \
	ext/kv_readset.c \
	ext/kv_vfunc.c \
	ext/kv_prepared.c \
	ext/kv_stats.c \
	ext/depot_kv.h \
	ext/kv_hook_api.c \
	ext/depot_pool.h \
	ext/pool_int.h \
	ext/pool_sql.c \
	ext/pool.c \
	ext/async.c
