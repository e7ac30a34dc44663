/*
** depot_version.c -- the depot_version() SQL function.
**
**     SELECT depot_version();      -- '0.1.0'
**
** Returns the version the extension was configured with (PACKAGE_VERSION),
** as text.  Takes no arguments; deterministic and innocuous.
*/
#include "config.h"
#include "ext/depot_int.h"
SQLITE_EXTENSION_INIT3

static void versionFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  (void)argc; (void)argv;
  sqlite3_result_text(ctx, PACKAGE_VERSION, -1, SQLITE_STATIC);
}

static int versionConnection(sqlite3 *db, KvConn *pKv){
  (void)pKv;
  return sqlite3_create_function(db, "depot_version", 0,
      SQLITE_UTF8|SQLITE_DETERMINISTIC|SQLITE_INNOCUOUS, 0,
      versionFunc, 0, 0);
}

/* Registered last (ext/depot.c): its presence on a connection means that
** every component is there. */
const DepotComponent depotVersionComponent = {
  "depot: cannot register depot_version()", 0, versionConnection
};
