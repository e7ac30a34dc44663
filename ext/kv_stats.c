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
**   wal_segments, wal_unconfirmed, expired_rows, sweep_passes, swept_rows
** expired_rows counts the rows of a table with a deadline (kv_ttl.c) that
** are past it and not yet removed (a scan of the table: costly, like
** row_count); sweep_passes and swept_rows count the TTL sweeps of the
** table since the store opened and the rows they removed.
** Anonymous (in-memory) stores show store NULL and no WAL counters.
** row_count and stored_bytes of a kv_btree table walk the table (O(n));
** they are computed only when the query uses one of those columns (the
** listing's costly columns, ext/listing.h).  Innocuous.  It reads the
** engine through kv_engine_foreach, kv_engine_wal_stats and
** kv_engine_table_stats (ext/kv/kv.h), which take the engine's locks.
*/
#include "config.h"
#include "ext/kv/kv.h"
#include "ext/depot_int.h"
#include "ext/listing.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* ---------------------------------------------------------- gather --- */

/* The row of one table of a store (kv_engine_table_stats callback). */
typedef struct StatsTableCtx StatsTableCtx;
struct StatsTableCtx { DepotRows *pRows; KvEngine *pEng; };

static int statsTableRow(void *pCtx, const char *zName, const char *zType,
                         const KvBackendStats *pSt){
  StatsTableCtx *c = (StatsTableCtx*)pCtx;
  DepotRows *p = c->pRows;
  depot_rows_text(p, kv_engine_dir(c->pEng));
  depot_rows_text(p, zName);
  depot_rows_text(p, zType);
  depot_rows_int(p, pSt->nRow);
  depot_rows_int(p, pSt->nByte);
  depot_rows_int(p, pSt->nOverlay);
  depot_rows_int(p, pSt->nPending);
  depot_rows_int(p, pSt->nError);
  depot_rows_text(p, pSt->zError[0] ? pSt->zError : 0);
  depot_rows_null(p);
  depot_rows_null(p);
  if( p->bCostly ){
    depot_rows_int(p, kv_table_expired_count(c->pEng, zName,
                                             (int)strlen(zName)));
  }else{
    depot_rows_int(p, 0);
  }
  depot_rows_int(p, pSt->nSweepPass);
  return depot_rows_int(p, pSt->nSwept);
}

/* The store row (the table counters NULL, the WAL's when it has one),
** then the table rows of one store (kv_engine_foreach callback). */
static int statsEngineRows(KvEngine *pEng, void *pCtx){
  DepotRows *p = (DepotRows*)pCtx;
  StatsTableCtx c;
  WalStats wal;
  int i, rc;
  depot_rows_text(p, kv_engine_dir(pEng));
  depot_rows_null(p);
  depot_rows_text(p, "store");
  for(i=0; i<6; i++) depot_rows_null(p);
  if( kv_engine_wal_stats(pEng, &wal) ){
    depot_rows_int(p, wal.nSegment);
    depot_rows_int(p, wal.nUnconfirmed);
  }else{
    depot_rows_null(p);
    depot_rows_null(p);
  }
  for(i=0; i<3; i++) rc = depot_rows_null(p);   /* the TTL counters */
  if( rc!=SQLITE_OK ) return rc;
  c.pRows = p;
  c.pEng = pEng;
  return kv_engine_table_stats(pEng, p->bCostly, statsTableRow, &c);
}

static int statsRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  (void)apArg; (void)pzErr;
  return kv_engine_foreach(statsEngineRows, p);
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
  DEPOT_COLUMN("expired_rows", 0),           /* costly */
  DEPOT_COLUMN("sweep_passes", 0),
  DEPOT_COLUMN("swept_rows", 0),
};

static const DepotListing statsListing = {
  "kv_stats", 14, aStatsCol, 0, SQLITE_VTAB_INNOCUOUS, 1000.0,
  ((sqlite3_uint64)3<<3)|((sqlite3_uint64)1<<11), statsRows
};

static int statsConnection(sqlite3 *db, KvConn *pKv){
  (void)pKv;
  return depot_listing_register(db, &statsListing, 0, 0);
}

const DepotComponent depotKvStatsComponent = {
  "kv: cannot register the KV functions", 0, statsConnection
};
