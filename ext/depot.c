/*
** depot.c -- entry point of the sqlite-depot extension, and the registry
** of its components.
**
** sqlite3_depot_init() checks the SQLite library it was loaded into, runs
** the once-per-process setup of every component (the VFS registers itself
** there), then registers every component's SQL functions and modules on
** the connection.  The component table below is the one place that knows
** which components exist: each file of the SQL surface registers only its
** own functions and modules (ext/depot_int.h), so nothing below calls back
** up here, and this file is the only one that calls every other.
*/
#include "config.h"
#include "ext/depot.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>

/* Every component, in registration order.  One line per component.  The
** version component comes last: depot_version() on a connection is the
** sign that every component is registered there (depotHasExtension). */
static const DepotComponent *const aDepotComponent[] = {
  &depotKvFuncComponent,      /* kv_begin, kv_get, ... kv_remove_table */
  &depotKvVtabComponent,      /* kv_memory, kv_btree, kv_log tables */
  &depotKvTablesComponent,    /* kv_tables */
  &depotKvStatsComponent,     /* kv_stats */
  &depotKvVfuncComponent,     /* key versions, kv_store_options, kv_metrics */
  &depotKvPreparedComponent,  /* kv_prepared, kv_commit/rollback_prepared */
  &depotKvAttachComponent,    /* kv_attach; temp declarations at load */
  &depotKvDerivedComponent,   /* kv_index, kv_counter, kv_validate, ... */
  &depotKvQueueComponent,     /* kv_queue, kv_enqueue, kv_queue_lease, ... */
  &depotKvTtlComponent,       /* kv_sweep */
  &depotSqlComponent,         /* the depot VFS, commits, stats, import */
  &depotBranchSqlComponent,   /* forks, restore points, PITR, buckets */
  &depotVerifySqlComponent,   /* quotas, verify */
  &depotCompactSqlComponent,  /* compaction, reclaim */
  &depotPoolSqlComponent,     /* depot_pool_status */
  &depotVersionComponent,     /* depot_version(): last */
};
#define DEPOT_NCOMPONENT \
  ((int)(sizeof(aDepotComponent)/sizeof(aDepotComponent[0])))

/* Guards the once-per-process setup.  A failed setup is retried by the
** next load, so a transient failure is not remembered forever. */
static pthread_mutex_t depotInitMutex = PTHREAD_MUTEX_INITIALIZER;
static int depotProcessReady = 0;

static int depotProcessInit(char **pzErr){
  int rc = SQLITE_OK;
  int i;
  pthread_mutex_lock(&depotInitMutex);
  /* kv_btree data files never go through the depot VFS. */
  if( !depotProcessReady ) kv_set_plain_vfs(depot_vfs_plain);
  /* Mixed transactions: the replay asks their database files. */
  if( !depotProcessReady ) kv_set_condition_probe(kv_coord_probe);
  for(i=0; !depotProcessReady && i<DEPOT_NCOMPONENT && rc==SQLITE_OK; i++){
    if( aDepotComponent[i]->xProcess ){
      rc = aDepotComponent[i]->xProcess(pzErr);
    }
  }
  if( rc==SQLITE_OK ) depotProcessReady = 1;
  pthread_mutex_unlock(&depotInitMutex);
  return rc;
}

/* Nonzero if db already has every component of this version
** (depot_version(), registered last, exists and returns PACKAGE_VERSION).
** Registering a function again fails with SQLITE_BUSY while a statement of
** db runs, as SELECT load_extension(...) does in a connection that got the
** extension automatically, so such a connection is left as it is.  The
** probe leaves no error on db, and none in SQLite's error log: the function
** is looked up in pragma_function_list before it is called, as preparing a
** call of a missing function logs "no such function" (a library built
** without that pragma gets the direct call). */
static int depotHasExtension(sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  int bHas = 0;
  int bListed = 1;
  int rc = sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_function_list"
                              " WHERE name='depot_version' AND narg=0", -1,
                              &pStmt, 0);
  if( rc==SQLITE_OK ) bListed = sqlite3_step(pStmt)==SQLITE_ROW;
  sqlite3_finalize(pStmt);
  pStmt = 0;
  if( bListed ){
    rc = sqlite3_prepare_v2(db, "SELECT depot_version()", -1, &pStmt, 0);
    if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
      const char *z = (const char*)sqlite3_column_text(pStmt, 0);
      bHas = z!=0 && strcmp(z, PACKAGE_VERSION)==0;
    }
    sqlite3_finalize(pStmt);
  }
  sqlite3_exec(db, "", 0, 0, 0);
  return bHas;
}

/* Checks the library, runs the process setup and registers every
** component on db.  Returns an SQLite code; on failure *pzErr holds the
** message (sqlite3_malloc'd). */
static int depotInitConnection(sqlite3 *db, char **pzErr){
  KvConn *pKv;
  int rc;
  int i;
  if( sqlite3_libversion_number()<DEPOT_MIN_SQLITE_VERSION_NUMBER ){
    *pzErr = sqlite3_mprintf(
        "depot: requires SQLite 3.40.0 or later, found %s",
        sqlite3_libversion());
    return SQLITE_ERROR;
  }
  /* A database opened to decide a KV replay gets nothing: it is opened
  ** inside a store's open (kv_coord.c). */
  if( kv_coord_probing() ) return SQLITE_OK;
  if( depotHasExtension(db) ) return SQLITE_OK;
  rc = depotProcessInit(pzErr);
  if( rc!=SQLITE_OK ) return rc;
  pKv = kv_conn_new(db);
  if( pKv==0 ) return SQLITE_NOMEM;
  for(i=0; rc==SQLITE_OK && i<DEPOT_NCOMPONENT; i++){
    const DepotComponent *p = aDepotComponent[i];
    if( p->xConnection && (rc = p->xConnection(db, pKv))!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("%s: %s", p->zFail, sqlite3_errmsg(db));
    }
  }
  kv_conn_unref(pKv);          /* the registrations hold their own */
  return rc;
}

#ifndef SQLITE_CORE
/* The automatic extension the loaded module installs: every connection
** opened later in the process gets the extension too, as a connection
** opened with vfs=depot needs its SQL functions.  Automatic extensions
** must return SQLITE_OK on success. */
static int depotAutoInit(sqlite3 *db, char **pzErrMsg,
                         const sqlite3_api_routines *pApi){
  char *zErr = 0;
  int rc = depotInitConnection(db, &zErr);
  (void)pApi;
  if( pzErrMsg ) *pzErrMsg = zErr; else sqlite3_free(zErr);
  return rc;
}
#endif

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_depot_init(
  sqlite3 *db,
  char **pzErrMsg,
  const sqlite3_api_routines *pApi
){
  char *zErr = 0;
  int rc;
#ifndef SQLITE_CORE
  /* Every load in the process passes the same routines, and a thread may
  ** load the module into its own connection while other threads call
  ** through sqlite3_api: write the pointer only when it changes (the first
  ** load), never again, so later loads only read it. */
  if( sqlite3_api!=pApi ) SQLITE_EXTENSION_INIT2(pApi);
#else
  SQLITE_EXTENSION_INIT2(pApi);
#endif
  rc = depotInitConnection(db, &zErr);
  if( rc!=SQLITE_OK ){
    if( pzErrMsg ) *pzErrMsg = zErr; else sqlite3_free(zErr);
    return rc;
  }
#ifdef SQLITE_CORE
  return SQLITE_OK;
#else
  /* Keep the shared object mapped after the loading connection closes (the
  ** VFS registered by this module must outlive it), and register it for
  ** every connection opened later in this process.  A failure to register
  ** the automatic extension only costs later connections a .load. */
  sqlite3_auto_extension((void(*)(void))depotAutoInit);
  return SQLITE_OK_LOAD_PERMANENTLY;
#endif
}
