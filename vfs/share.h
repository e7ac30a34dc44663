/*
** share.h -- the full pathname of a depot database, told apart per
** database name (private to vfs/; used by xFullPathname in vfs/vfs.c).
**
** SQLite's shared cache gives one pager to every connection whose main or
** attached database has the same full pathname and VFS, and the full
** pathname of a depot database is its store file's, whichever database,
** branch and bucket the URI names.  So that a shared cache never hands one
** database's pages to another, each (store, bucket, database, branch) the
** process opens gets a spelling of the store's path of its own: the first
** one the path itself ("/dir/store.depot"), the next ones the same path
** with path elements that name nothing inserted before the file name
** ("/dir/./store.depot", "/dir/.//store.depot", "/dir/././store.depot",
** ...: the number of the name in bijective base 2, a few bytes even for
** thousands of names): the same file for the operating system and for
** SQLite's unix VFS, a different name for the shared-cache lookup.  A
** spelling, once given, stays the name's for the life of the process.
*/
#ifndef DEPOT_SHARE_H
#define DEPOT_SHARE_H

/* zOut (nOut bytes) holds the full pathname of the store that zName names;
** rewrite it into the spelling of the database name zName's parameters
** (db, branch, bucket; where the name has none of its own, those of zDflt,
** a filename object of depot_vfs_set_default_params(), or NULL) give.
** zName must be a filename SQLite made (as SQLite gives xFullPathname):
** its URI parameters are read.  SQLITE_OK, SQLITE_NOMEM, or SQLITE_CANTOPEN
** when the spelling does not fit in nOut bytes. */
int depot_share_pathname(const char *zName, const char *zDflt, int nOut,
                         char *zOut);

#endif /* DEPOT_SHARE_H */
