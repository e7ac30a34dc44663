/*
** listing.h -- the one module behind every read-only listing of the SQL
** surface (private to ext/; implemented in ext/listing.c).
**
** A listing is an eponymous, read-only virtual table -- used as a
** table-valued function when it has arguments:
**
**   SELECT * FROM depot_branches('store.depot', 'crm');
**   SELECT value, version FROM kv_query_with_version('acct', 'alice');
**   SELECT * FROM kv_tables;
**
** It declares its columns, some of them HIDDEN argument columns, and a row
** producer (xRows); the module does the rest:
**
**   xConnect    declares CREATE TABLE x(<columns>), with the listing's
**               SQLITE_VTAB_DIRECTONLY or SQLITE_VTAB_INNOCUOUS
**   xBestIndex  passes every equality constraint on an argument column to
**               xFilter; a plan in which such a constraint is not usable,
**               or one of the first nReq arguments is not constrained, is
**               refused with SQLITE_CONSTRAINT (so a query that leaves out
**               a required argument fails with "no query solution")
**   xFilter     calls xRows once with the arguments, which adds every row
**               at once (no store transaction stays open while SQLite
**               steps them); an error of xRows is the statement's error,
**               with xRows's message
**   xColumn     the cells xRows added; an argument column reads back the
**               argument as given (NULL when it was left out), as in
**               json_each
**   xRowid      the row number, from 1
**
** idxNum is the bitmask of the arguments given (bit i: argument i), plus
** bit nArg when the query reads a column of mCostly: a listing whose
** columns cost to compute (a walk of a table) computes them only then.
*/
#ifndef DEPOT_LISTING_H
#define DEPOT_LISTING_H

#include "sqlite3ext.h"

/* At most this many argument columns per listing. */
#define DEPOT_LISTING_MAX_ARG 8

/* One column.  Argument columns are HIDDEN; argument i is the i-th of
** them in column order, wherever it stands among the others. */
typedef struct DepotListingCol DepotListingCol;
struct DepotListingCol {
  const char *zName;          /* as written in SQL: "\"table\"" for table */
  const char *zType;          /* declared type, or NULL for none */
  int bArg;                   /* a HIDDEN argument column */
};
#define DEPOT_COLUMN(zName, zType)  { zName, zType, 0 }
#define DEPOT_ARGUMENT(zName)       { zName, 0, 1 }

/* Cell types. */
#define DEPOT_CELL_NULL   0
#define DEPOT_CELL_INT    1
#define DEPOT_CELL_REAL   2
#define DEPOT_CELL_TEXT   3
#define DEPOT_CELL_KEY    4   /* encoded KV key bytes (ext/kv/codec.h) */
#define DEPOT_CELL_VALUE  5   /* encoded KV value bytes */

typedef struct DepotCell DepotCell;
struct DepotCell {
  int eType;                  /* DEPOT_CELL_* */
  int n;                      /* bytes of a TEXT, KEY or VALUE cell */
  sqlite3_int64 iOff;         /* ... at DepotRows.aData+iOff (NUL after) */
  sqlite3_int64 i;            /* an INT cell */
  double r;                   /* a REAL cell */
};

/* The rows xRows adds: nCol cells per row (the visible columns, in
** order), all bytes in one buffer. */
typedef struct DepotRows DepotRows;
struct DepotRows {
  void *pAux;                 /* the pAux of depot_listing_register */
  int bCostly;                /* the query reads a column of mCostly */
  int nCol;                   /* visible columns: cells per row */
  int rc;                     /* sticky: SQLITE_NOMEM once a cell failed */
  int nCell, nAlloc;
  DepotCell *aCell;
  unsigned char *aData;
  sqlite3_int64 nData, nDataAlloc;
};

typedef struct DepotListing DepotListing;
struct DepotListing {
  const char *zName;          /* the table (module) name */
  int nCol;                   /* entries of aCol */
  const DepotListingCol *aCol;
  int nReq;                   /* leading arguments a query must give */
  int eVtabConfig;            /* SQLITE_VTAB_DIRECTONLY or _INNOCUOUS */
  double rRows;               /* estimated rows (and cost) of a scan */
  sqlite3_uint64 mCostly;     /* colUsed bits of the columns that cost */
  /* Add every row for the arguments apArg (NULL: left out) to p.  Returns
  ** SQLITE_OK, or an error code with *pzErr an sqlite3_malloc'd message
  ** (or NULL for SQLite's text of the code).  A cell that could not be
  ** added leaves p->rc set, which the module returns if xRows does not. */
  int (*xRows)(DepotRows *p, sqlite3_value **apArg, char **pzErr);
};

/* Register listing pDef (static, outliving db) on db as an eponymous
** module.  pAux is handed to xRows in DepotRows.pAux; xDestroy (may be
** NULL) is called on it when db drops the module, or at once when the
** registration fails. */
int depot_listing_register(sqlite3 *db, const DepotListing *pDef, void *pAux,
                           void (*xDestroy)(void*));

/* Cells, in column order.  Each returns p->rc: SQLITE_OK, or SQLITE_NOMEM
** (then and from then on nothing is added). */
int depot_rows_null(DepotRows *p);
int depot_rows_int(DepotRows *p, sqlite3_int64 i);
int depot_rows_real(DepotRows *p, double r);
int depot_rows_text(DepotRows *p, const char *z);   /* NULL z: a NULL cell */
/* A cell of type eType: i for INT, n bytes at z for TEXT, KEY, VALUE. */
int depot_rows_cell(DepotRows *p, int eType, sqlite3_int64 i, const void *z,
                    int n);

/* Room for nCell more cells holding nByte more bytes (a NUL after each
** TEXT, KEY or VALUE cell included), then depot_rows_put fills it
** without failing: for producers that add many small cells. */
int depot_rows_room(DepotRows *p, int nCell, sqlite3_int64 nByte);
void depot_rows_put(DepotRows *p, int eType, sqlite3_int64 i, const void *z,
                    int n);

#endif /* DEPOT_LISTING_H */
