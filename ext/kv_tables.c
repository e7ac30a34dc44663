/*
** kv_tables.c -- the listing kv_tables: every KV table of every store open
** in this process.
**
**   SELECT name, type, persistence, dir, rows FROM kv_tables;
**
** dir is the store directory (NULL for a connection's in-memory store),
** rows the number of committed entries.  The rows are a snapshot taken
** when the scan starts.  The internal catalog is never listed.  Innocuous
** (it only reads); a listing of ext/listing.h.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv/kv.h"
#include "ext/listing.h"
SQLITE_EXTENSION_INIT3

static int tablesRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  KvTableInfo *a = 0;
  int i, n = 0;
  int rc = kv_engine_list(&a, &n);
  (void)apArg; (void)pzErr;
  for(i=0; rc==SQLITE_OK && i<n; i++){
    depot_rows_cell(p, DEPOT_CELL_TEXT, 0, a[i].zName, a[i].nName);
    depot_rows_text(p, a[i].zType);
    depot_rows_int(p, a[i].bPersist);
    depot_rows_text(p, a[i].zDir);
    rc = depot_rows_int(p, a[i].nRow);
  }
  kv_engine_list_free(a, n);
  return rc;
}

static const DepotListingCol aTablesCol[] = {
  DEPOT_COLUMN("name", "TEXT"),
  DEPOT_COLUMN("type", "TEXT"),
  DEPOT_COLUMN("persistence", "INTEGER"),
  DEPOT_COLUMN("dir", "TEXT"),
  DEPOT_COLUMN("rows", "INTEGER"),
};

static const DepotListing tablesListing = {
  "kv_tables", 5, aTablesCol, 0, SQLITE_VTAB_INNOCUOUS, 100.0, 0, tablesRows
};

static int tablesConnection(sqlite3 *db, KvConn *pKv){
  (void)pKv;
  return depot_listing_register(db, &tablesListing, 0, 0);
}

const DepotComponent depotKvTablesComponent = {
  "kv: cannot register the KV functions", 0, tablesConnection
};
