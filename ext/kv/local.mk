## ext/kv/ -- the KV engine: catalog, transactions, iterators, versions,
## metrics, codec, ordered map, and the kv_memory, kv_btree and kv_log
## backends with the log store and its compaction.
DEPOT_SOURCES += \
	ext/kv/codec.h ext/kv/codec.c \
	ext/kv/map.h ext/kv/map.c \
	ext/kv/backend.h \
	ext/kv/engine.h ext/kv/engine_int.h ext/kv/table.c ext/kv/engine.c \
	ext/kv/catalog.c \
	ext/kv/txn.c \
	ext/kv/iter.c \
	ext/kv/version.h ext/kv/version.c ext/kv/vertxn.c \
	ext/kv/metrics.c \
	ext/kv/memory.c \
	ext/kv/btree.h ext/kv/btree.c \
	ext/kv/logstore.h ext/kv/logstore_int.h ext/kv/logfile.c \
	ext/kv/logstore.c ext/kv/logcompact.c \
	ext/kv/log.h ext/kv/log.c
