## ext/kv/ -- the KV engine: its public header kv.h, the test hooks of
## kv_test.h, and (callee first) the codec, the ordered map, the kv_memory,
## kv_btree and kv_log backends with the log store, then tables, catalog,
## versions, stores, metrics, write hooks, transactions, scans, versioned
## commits and named prepared transactions.
DEPOT_SOURCES += \
	ext/kv/kv.h ext/kv/kv_test.h \
	ext/kv/clock.c \
	ext/kv/expire.c \
	ext/kv/codec.h ext/kv/codec.c \
	ext/kv/map.h ext/kv/map.c \
	ext/kv/backend.h \
	ext/kv/memory.c \
	ext/kv/btree.c \
	ext/kv/logstore.h ext/kv/logstore_int.h ext/kv/logcache.c \
	ext/kv/logfile.c \
	ext/kv/logcompact.c ext/kv/logstore.c \
	ext/kv/log.c \
	ext/kv/engine_int.h ext/kv/table.c \
	ext/kv/catalog.c \
	ext/kv/ddl.c \
	ext/kv/resolve.c \
	ext/kv/version.c \
	ext/kv/engine.c \
	ext/kv/metrics.c \
	ext/kv/hook.c \
	ext/kv/txn.c \
	ext/kv/iter.c \
	ext/kv/vertxn.c \
	ext/kv/indoubt.c
