## vfs/ -- the depot VFS; vfs/store/ -- the outer store and its backends.
DEPOT_SOURCES += \
	vfs/store/bytes.h vfs/store/store.h vfs/store/store.c vfs/store/sqlite.c vfs/store/pg.c \
	vfs/store/lockfile.h vfs/store/lockfile.c
DEPOT_SOURCES += \
	vfs/ltx.h vfs/ltx.c \
	vfs/layout.h vfs/layout.c \
	vfs/pcache.h vfs/pcache.c vfs/pagemap.h vfs/pagemap.c \
	vfs/readahead.h vfs/readahead.c \
	vfs/txbuf.h vfs/txbuf.c \
	vfs/db.h vfs/db.c vfs/branch.c \
	vfs/op.h vfs/op.c vfs/pitr.c vfs/fork.c vfs/restore.c vfs/drop.c \
	vfs/list.c \
	vfs/coverage.h vfs/coverage.c vfs/compact.c vfs/gc.c \
	vfs/admin.c vfs/quota.c vfs/verify.c vfs/progress.c \
	vfs/memfile.h vfs/memfile.c vfs/uri.h vfs/uri.c \
	vfs/lock.h vfs/lock.c vfs/share.h vfs/share.c \
	vfs/depot_vfs.h vfs/vfs_test.h vfs/vfs.c
