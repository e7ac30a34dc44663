/*
** sqlite3_api.c -- the one definition of sqlite3_api, the table of SQLite
** routines through which the loadable module calls SQLite.
**
** SQLITE_EXTENSION_INIT1 defines it here; every other file of the module
** (ext/, ext/kv/, vfs/, wal/) declares it with SQLITE_EXTENSION_INIT3, and
** sqlite3_depot_init() (ext/depot.c) sets it with SQLITE_EXTENSION_INIT2
** before anything calls SQLite.  It has a file of its own so that every
** reference to it points down to a file that references nothing: the files
** of ext/ then depend on each other in one direction only.  Built with
** -DSQLITE_CORE the macro defines nothing and calls go to SQLite directly.
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT1
