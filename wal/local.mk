## wal/ -- the root write-ahead log of KV stores.
DEPOT_SOURCES += \
	wal/wal.h \
	wal/wal_int.h \
	wal/io.c \
	wal/record.c \
	wal/segment.c \
	wal/confirm.c \
	wal/append.c \
	wal/follow.c \
	wal/shared.c \
	wal/wal.c
