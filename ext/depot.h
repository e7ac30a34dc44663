/*
** depot.h -- public C interface of the sqlite-depot extension.
**
** sqlite-depot is one SQLite extension that adds transactional key-value
** virtual tables with their own root write-ahead log, and a VFS named
** "depot" that stores databases as versioned, branchable page blobs.
**
** Most users load it at run time:
**
**     sqlite3 shell:   .load /usr/local/lib/depot      (the installed module)
**     C:               sqlite3_load_extension(db, "/usr/local/lib/depot",
**                                             0, &zErr);
**
** A bare "depot" is found only where $(libdir) is in the dynamic loader's
** search path (--prefix=/usr, or LD_LIBRARY_PATH).
**
** Programs that link the sources statically (built with -DSQLITE_CORE) call
** sqlite3_auto_extension((void(*)(void))sqlite3_depot_init) once, before
** opening connections.  The SQL surface is documented in docs/SQL.md.
*/
#ifndef DEPOT_H
#define DEPOT_H

#include <sqlite3.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
** The oldest SQLite library the extension runs on, in the form returned by
** sqlite3_libversion_number().  Loading into an older library fails with
** SQLITE_ERROR and the message "depot: requires SQLite 3.40.0 or later,
** found X".
*/
#define DEPOT_MIN_SQLITE_VERSION_NUMBER 3040000

/*
** Entry point.  Registers every SQL function, virtual-table module and (once
** per process) the "depot" VFS on connection db.
**
** Returns SQLITE_OK_LOAD_PERMANENTLY when loaded through
** sqlite3_load_extension(), so the shared object, and the VFS it registers,
** stay loaded after the loading connection closes; SQLITE_OK when built
** into the program with -DSQLITE_CORE; an error code with *pzErrMsg set
** (from sqlite3_malloc, owned by the caller) when registration fails, in
** which case nothing usable was registered on db.
*/
int sqlite3_depot_init(sqlite3 *db, char **pzErrMsg,
                       const sqlite3_api_routines *pApi);

#ifdef __cplusplus
}
#endif
#endif /* DEPOT_H */
