## vfs/ -- the depot VFS; vfs/store/ -- the outer store and its backends.
DEPOT_SOURCES += \
	vfs/store/store.h vfs/store/store.c vfs/store/sqlite.c
DEPOT_SOURCES += \
	vfs/ltx.h vfs/ltx.c \
	vfs/layout.h vfs/layout.c \
	vfs/pcache.h vfs/pcache.c \
	vfs/txbuf.h vfs/txbuf.c \
	vfs/db.h vfs/db.c vfs/branch.c vfs/fork.c \
	vfs/admin.c vfs/quota.c vfs/verify.c vfs/compact.c \
	vfs/depot_vfs.h vfs/vfs.c
