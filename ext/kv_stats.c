/*
** kv_stats.c -- the listing kv_stats: counters of every KV store open in
** the process and of each of its tables.
**
**   SELECT * FROM kv_stats;
**
** Row shape (see docs/SQL.md): one row per store (tbl NULL, type 'store',
** wal_segments and wal_unconfirmed set, the table counters NULL) followed
** by one row per table of that store (wal_* NULL):
**   store, tbl, type, row_count, stored_bytes, overlay_entries,
**   pending_confirmations, collector_errors, last_error,
**   wal_segments, wal_unconfirmed
** Anonymous (in-memory) stores show store NULL and no WAL counters.
** row_count and stored_bytes of a kv_btree table walk the table (O(n));
** they are computed only when the query uses one of those columns (the
** listing's costly columns, ext/listing.h).  Innocuous.  It reads the
** engine's stores and tables directly (ext/kv/engine_int.h), each under
** the engine's own locks.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "ext/depot_int.h"
#include "ext/listing.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* ---------------------------------------------------------- gather --- */

typedef struct StatsEngines StatsEngines;
struct StatsEngines { KvEngine **a; int n, nAlloc; };

/* kv_engine_foreach callback: hold a reference on each store. */
static int statsCollectEngine(KvEngine *p, void *pCtx){
  StatsEngines *pE = (StatsEngines*)pCtx;
  if( pE->n==pE->nAlloc ){
    int nNew = pE->nAlloc ? pE->nAlloc*2 : 8;
    KvEngine **a = sqlite3_realloc64(pE->a, nNew*sizeof(KvEngine*));
    if( a==0 ) return SQLITE_NOMEM;
    pE->a = a;
    pE->nAlloc = nNew;
  }
  p->nRef++;                    /* the registry mutex is held */
  pE->a[pE->n++] = p;
  return SQLITE_OK;
}

/* One table's row, computed without the engine mutex. */
static int statsTableRow(DepotRows *p, KvEngine *pEng, KvTable *t){
  KvBackendStats st;
  memset(&st, 0, sizeof(st));
  if( t->pData && t->pBackend->xStatsEx ){
    t->pBackend->xStatsEx(t->pData, p->bCostly, &st);
  }else if( t->pData ){
    pthread_mutex_lock(&pEng->mutex);
    t->pBackend->xStats(t->pData, &st.nRow, &st.nByte);
    pthread_mutex_unlock(&pEng->mutex);
  }
  depot_rows_text(p, pEng->zDir);
  depot_rows_text(p, t->zName);
  depot_rows_cell(p, DEPOT_CELL_TEXT, 0, t->meta.zType,
                  (int)strnlen(t->meta.zType, sizeof(t->meta.zType)));
  depot_rows_int(p, st.nRow);
  depot_rows_int(p, st.nByte);
  depot_rows_int(p, st.nOverlay);
  depot_rows_int(p, st.nPending);
  depot_rows_int(p, st.nError);
  depot_rows_text(p, st.zError[0] ? st.zError : 0);
  depot_rows_null(p);
  return depot_rows_null(p);
}

/* The store row: the table counters NULL, the WAL's when it has one. */
static int statsStoreRow(DepotRows *p, KvEngine *pEng){
  WalStats wal;
  int i;
  depot_rows_text(p, pEng->zDir);
  depot_rows_null(p);
  depot_rows_text(p, "store");
  for(i=0; i<6; i++) depot_rows_null(p);
  if( pEng->pWal==0 ){
    depot_rows_null(p);
    return depot_rows_null(p);
  }
  wal_stats(pEng->pWal, &wal);
  depot_rows_int(p, wal.nSegment);
  return depot_rows_int(p, wal.nUnconfirmed);
}

/* The store row, then the table rows of one store. */
static int statsEngineRows(DepotRows *p, KvEngine *pEng){
  KvTable **apTab = 0, *t;
  int nTab = 0, i, rc = statsStoreRow(p, pEng);
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; t; t=t->pNext) nTab++;
  apTab = sqlite3_malloc64((nTab+1)*sizeof(KvTable*));
  if( apTab ){
    for(i=0, t=pEng->pTables; t; t=t->pNext){ t->nRef++; apTab[i++] = t; }
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( apTab==0 ) return SQLITE_NOMEM;
  for(i=nTab-1; i>=0; i--){
    if( rc==SQLITE_OK ) rc = statsTableRow(p, pEng, apTab[i]);
  }
  pthread_mutex_lock(&pEng->mutex);
  for(i=0; i<nTab; i++) kvTableUnref(apTab[i]);
  pthread_mutex_unlock(&pEng->mutex);
  sqlite3_free(apTab);
  return rc;
}

static int statsRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  StatsEngines e;
  int i, rc;
  (void)apArg; (void)pzErr;
  memset(&e, 0, sizeof(e));
  rc = kv_engine_foreach(statsCollectEngine, &e);
  for(i=0; i<e.n; i++){
    if( rc==SQLITE_OK ) rc = statsEngineRows(p, e.a[i]);
    kv_engine_unref(e.a[i]);
  }
  sqlite3_free(e.a);
  return rc;
}

/* ------------------------------------------------------- component --- */

static const DepotListingCol aStatsCol[] = {
  DEPOT_COLUMN("store", 0),
  DEPOT_COLUMN("tbl", 0),
  DEPOT_COLUMN("type", 0),
  DEPOT_COLUMN("row_count", 0),              /* costly */
  DEPOT_COLUMN("stored_bytes", 0),           /* costly */
  DEPOT_COLUMN("overlay_entries", 0),
  DEPOT_COLUMN("pending_confirmations", 0),
  DEPOT_COLUMN("collector_errors", 0),
  DEPOT_COLUMN("last_error", 0),
  DEPOT_COLUMN("wal_segments", 0),
  DEPOT_COLUMN("wal_unconfirmed", 0),
};

static const DepotListing statsListing = {
  "kv_stats", 11, aStatsCol, 0, SQLITE_VTAB_INNOCUOUS, 1000.0,
  (sqlite3_uint64)3<<3, statsRows
};

static int statsConnection(sqlite3 *db, KvConn *pKv){
  (void)pKv;
  return depot_listing_register(db, &statsListing, 0, 0);
}

const DepotComponent depotKvStatsComponent = {
  "kv: cannot register the KV functions", 0, statsConnection
};
