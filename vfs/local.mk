## vfs/ -- the depot VFS and its outer store.
DEPOT_SOURCES += \
	vfs/store.h vfs/store.c vfs/store_sqlite.c \
	vfs/ltx.h vfs/ltx.c \
	vfs/layout.h vfs/layout.c \
	vfs/pcache.h vfs/pcache.c \
	vfs/txbuf.h vfs/txbuf.c \
	vfs/db.h vfs/db.c \
	vfs/admin.c \
	vfs/depot_vfs.h vfs/vfs.c
