/*
** pool_sql.c -- the process's registry of connection pools
** (ext/pool_int.h) and the listing that shows them to SQL:
**
**   SELECT * FROM depot_pool_status;              -- every open pool
**   SELECT * FROM depot_pool_status('api');       -- the pool named api
**
** A pool is named by the zName option of depot_pool_open (ext/pool.c), or
** "poolN" when it has none; names are unique among the open pools of the
** process, and any connection of the process with the extension sees all
** of them.  The registry keeps, per pool, the function that fills in its
** counters, so this file calls nothing of ext/pool.c.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/listing.h"
#include "ext/pool_int.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct PoolRegEntry PoolRegEntry;
struct PoolRegEntry {
  char *zName;
  depot_pool *p;
  DepotPoolStatusFn xStatus;
  PoolRegEntry *pNext;
};

static pthread_mutex_t poolRegMutex = PTHREAD_MUTEX_INITIALIZER;
static PoolRegEntry *poolRegList = 0;
static int poolRegSeq = 0;

static PoolRegEntry *poolRegFind(const char *zName){
  PoolRegEntry *e;
  for(e=poolRegList; e; e=e->pNext){
    if( strcmp(e->zName, zName)==0 ) return e;
  }
  return 0;
}

int depot_poolreg_add(const char *zName, depot_pool *p, DepotPoolStatusFn x,
                      const char **pzName, char **pzErr){
  PoolRegEntry *e = sqlite3_malloc64(sizeof(*e));
  char zAuto[32];
  int rc = SQLITE_OK;
  if( e==0 ) return SQLITE_NOMEM;
  memset(e, 0, sizeof(*e));
  pthread_mutex_lock(&poolRegMutex);
  if( zName==0 ){
    do{
      snprintf(zAuto, sizeof(zAuto), "pool%d", ++poolRegSeq);
    }while( poolRegFind(zAuto) );
    zName = zAuto;
  }
  if( poolRegFind(zName) ){
    if( pzErr ){
      *pzErr = sqlite3_mprintf("registry: a pool named \"%s\" is open",
                               zName);
    }
    rc = SQLITE_ERROR;
  }else if( (e->zName = sqlite3_mprintf("%s", zName))==0 ){
    rc = SQLITE_NOMEM;
  }else{
    e->p = p;
    e->xStatus = x;
    e->pNext = poolRegList;
    poolRegList = e;
    *pzName = e->zName;
  }
  pthread_mutex_unlock(&poolRegMutex);
  if( rc!=SQLITE_OK ) sqlite3_free(e);
  return rc;
}

void depot_poolreg_remove(depot_pool *p){
  PoolRegEntry **pp, *e = 0;
  pthread_mutex_lock(&poolRegMutex);
  for(pp=&poolRegList; *pp; pp=&(*pp)->pNext){
    if( (*pp)->p==p ){
      e = *pp;
      *pp = e->pNext;
      break;
    }
  }
  pthread_mutex_unlock(&poolRegMutex);
  if( e ){
    sqlite3_free(e->zName);
    sqlite3_free(e);
  }
}

void depot_poolreg_each(void (*x)(void*, depot_pool*), void *pArg){
  PoolRegEntry *e;
  pthread_mutex_lock(&poolRegMutex);
  for(e=poolRegList; e; e=e->pNext) x(pArg, e->p);
  pthread_mutex_unlock(&poolRegMutex);
}

/* --------------------------------------------------------- listing --- */

static int poolStatusRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  const char *zWant = apArg[0] ? (const char*)sqlite3_value_text(apArg[0]) : 0;
  PoolRegEntry *e;
  int rc = SQLITE_OK;
  (void)pzErr;
  pthread_mutex_lock(&poolRegMutex);
  for(e=poolRegList; e && rc==SQLITE_OK; e=e->pNext){
    depot_pool_stats st;
    if( zWant && strcmp(zWant, e->zName)!=0 ) continue;
    e->xStatus(e->p, &st);
    depot_rows_text(p, e->zName);
    depot_rows_int(p, st.nSize);
    depot_rows_int(p, st.nReader);
    depot_rows_int(p, st.nInUse);
    depot_rows_int(p, st.nWaiting);
    depot_rows_int(p, st.nAcquired);
    depot_rows_int(p, st.nTimeout);
    depot_rows_int(p, st.nBroken);
    depot_rows_int(p, st.nLeaked);
    depot_rows_int(p, st.nBadRelease);
    depot_rows_real(p, st.iLongestWaitUs/1000.0);
    depot_rows_int(p, st.nHolding);
    rc = depot_rows_int(p, st.nPendingAsync);
  }
  pthread_mutex_unlock(&poolRegMutex);
  return rc;
}

static const DepotListingCol aPoolStatusCol[] = {
  DEPOT_COLUMN("name", "TEXT"),
  DEPOT_COLUMN("size", "INTEGER"),
  DEPOT_COLUMN("readers", "INTEGER"),
  DEPOT_COLUMN("in_use", "INTEGER"),
  DEPOT_COLUMN("waiting", "INTEGER"),
  DEPOT_COLUMN("acquired", "INTEGER"),
  DEPOT_COLUMN("timeouts", "INTEGER"),
  DEPOT_COLUMN("broken", "INTEGER"),
  DEPOT_COLUMN("leaked", "INTEGER"),
  DEPOT_COLUMN("bad_releases", "INTEGER"),
  DEPOT_COLUMN("longest_wait_ms", "REAL"),
  DEPOT_COLUMN("holding", "INTEGER"),
  DEPOT_COLUMN("pending_async", "INTEGER"),
  DEPOT_ARGUMENT("pool"),
};

static const DepotListing poolStatusListing = {
  "depot_pool_status", 14, aPoolStatusCol, 0, SQLITE_VTAB_INNOCUOUS, 10.0,
  0, poolStatusRows
};

static int poolSqlConnection(sqlite3 *db, KvConn *pKv){
  (void)pKv;
  return depot_listing_register(db, &poolStatusListing, 0, 0);
}

const DepotComponent depotPoolSqlComponent = {
  "depot: cannot register depot_pool_status", 0, poolSqlConnection
};
