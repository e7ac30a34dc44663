/*
** listing.c -- the module of every read-only listing (ext/listing.h):
** depot_commits, depot_stats, depot_branches, depot_databases,
** depot_restore_points, depot_quotas, depot_verify, kv_tables, kv_stats,
** kv_query_with_version, kv_query_with_versions, kv_conflicts and
** kv_metrics each register one DepotListing with it.
**
** One sqlite3_module, listingModule; its client data (ListingAux) is the
** listing's definition and the pAux its producer gets.  The cursor keeps
** the rows of the last xFilter as cells (DepotRows) and copies of the
** arguments, which the argument columns read back.  This file calls
** nothing else of ext/ (the KV codec renders KEY and VALUE cells).
*/
#include "config.h"
#include "ext/listing.h"
#include "ext/kv/kv.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* Module client data. */
typedef struct ListingAux ListingAux;
struct ListingAux {
  const DepotListing *pDef;
  void *pAux;
  void (*xDestroy)(void*);
};

typedef struct ListingVtab ListingVtab;
struct ListingVtab {
  sqlite3_vtab base;          /* must be first */
  const ListingAux *pAux;
  int nArg;                   /* argument columns */
  /* aMap[iCol]: the visible column's cell index (>=0), or -1-i for
  ** argument i.  pDef->nCol entries. */
  int aMap[1];
};

typedef struct ListingCursor ListingCursor;
struct ListingCursor {
  sqlite3_vtab_cursor base;   /* must be first */
  DepotRows rows;
  int iRow, nRow;
  sqlite3_value *apArg[DEPOT_LISTING_MAX_ARG];  /* copies; NULL: left out */
};

/* ---------------------------------------------------------------- rows --- */

static void listingRowsClear(DepotRows *p){
  sqlite3_free(p->aCell);
  sqlite3_free(p->aData);
  p->aCell = 0;
  p->aData = 0;
  p->nCell = p->nAlloc = 0;
  p->nData = p->nDataAlloc = 0;
  p->rc = SQLITE_OK;
}

int depot_rows_room(DepotRows *p, int nCell, sqlite3_int64 nByte){
  if( p->rc!=SQLITE_OK ) return p->rc;
  if( p->nCell+nCell > p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    DepotCell *a;
    while( nNew < p->nCell+nCell ) nNew *= 2;
    a = sqlite3_realloc64(p->aCell, nNew*sizeof(DepotCell));
    if( a==0 ) return p->rc = SQLITE_NOMEM;
    p->aCell = a;
    p->nAlloc = nNew;
  }
  if( p->nData+nByte > p->nDataAlloc ){
    sqlite3_int64 nNew = p->nDataAlloc ? p->nDataAlloc*2 : 256;
    unsigned char *a;
    while( nNew < p->nData+nByte ) nNew *= 2;
    a = sqlite3_realloc64(p->aData, nNew);
    if( a==0 ) return p->rc = SQLITE_NOMEM;
    p->aData = a;
    p->nDataAlloc = nNew;
  }
  return SQLITE_OK;
}

void depot_rows_put(DepotRows *p, int eType, sqlite3_int64 i, const void *z,
                    int n){
  DepotCell *c = &p->aCell[p->nCell++];
  memset(c, 0, sizeof(*c));
  c->eType = eType;
  c->i = i;
  c->iOff = -1;
  if( z ){
    c->iOff = p->nData;
    c->n = n;
    memcpy(p->aData + p->nData, z, (size_t)n);
    p->aData[p->nData + n] = 0;
    p->nData += n+1;
  }
}

int depot_rows_cell(DepotRows *p, int eType, sqlite3_int64 i, const void *z,
                    int n){
  int rc = depot_rows_room(p, 1, z ? n+1 : 0);
  if( rc==SQLITE_OK ) depot_rows_put(p, eType, i, z, n);
  return rc;
}

int depot_rows_null(DepotRows *p){
  return depot_rows_cell(p, DEPOT_CELL_NULL, 0, 0, 0);
}

int depot_rows_int(DepotRows *p, sqlite3_int64 i){
  return depot_rows_cell(p, DEPOT_CELL_INT, i, 0, 0);
}

int depot_rows_real(DepotRows *p, double r){
  int rc = depot_rows_cell(p, DEPOT_CELL_REAL, 0, 0, 0);
  if( rc==SQLITE_OK ) p->aCell[p->nCell-1].r = r;
  return rc;
}

int depot_rows_text(DepotRows *p, const char *z){
  return z ? depot_rows_cell(p, DEPOT_CELL_TEXT, 0, z, (int)strlen(z))
           : depot_rows_null(p);
}

/* -------------------------------------------------------------- module --- */

/* "CREATE TABLE x(<columns>)" of pDef, sqlite3_malloc'd (NULL: OOM). */
static char *listingSchema(const DepotListing *pDef){
  sqlite3_str *pStr = sqlite3_str_new(0);
  int i;
  sqlite3_str_appendall(pStr, "CREATE TABLE x(");
  for(i=0; i<pDef->nCol; i++){
    const DepotListingCol *c = &pDef->aCol[i];
    sqlite3_str_appendf(pStr, "%s%s%s%s", i ? ", " : "", c->zName,
                        (c->bArg || c->zType) ? " " : "",
                        c->bArg ? "HIDDEN" : c->zType ? c->zType : "");
  }
  sqlite3_str_appendall(pStr, ")");
  return sqlite3_str_finish(pStr);
}

static int listingConnect(sqlite3 *db, void *pAux, int argc,
                          const char *const *argv, sqlite3_vtab **ppVtab,
                          char **pzErr){
  const ListingAux *pA = (const ListingAux*)pAux;
  const DepotListing *pDef = pA->pDef;
  ListingVtab *p;
  char *zSchema;
  int i, nVis = 0, nArg = 0, rc;
  (void)argc; (void)argv;
  for(i=0; i<pDef->nCol; i++) nArg += pDef->aCol[i].bArg;
  if( nArg>DEPOT_LISTING_MAX_ARG ){
    *pzErr = sqlite3_mprintf("depot: listing %s has %d arguments, more than"
                             " %d", pDef->zName, nArg, DEPOT_LISTING_MAX_ARG);
    return SQLITE_ERROR;
  }
  if( (zSchema = listingSchema(pDef))==0 ) return SQLITE_NOMEM;
  rc = sqlite3_declare_vtab(db, zSchema);
  sqlite3_free(zSchema);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_vtab_config(db, pDef->eVtabConfig);
  p = sqlite3_malloc64(sizeof(*p) + pDef->nCol*sizeof(int));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pAux = pA;
  p->nArg = nArg;
  for(i=0, nArg=0; i<pDef->nCol; i++){
    p->aMap[i] = pDef->aCol[i].bArg ? -1-(nArg++) : nVis++;
  }
  *ppVtab = &p->base;
  return SQLITE_OK;
}

static int listingDisconnect(sqlite3_vtab *pVtab){
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

/* Argument i of a column, or -1 for a visible column. */
static int listingArgOf(const ListingVtab *p, int iCol){
  if( iCol<0 || iCol>=p->pAux->pDef->nCol || p->aMap[iCol]>=0 ) return -1;
  return -1-p->aMap[iCol];
}

static int listingBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  ListingVtab *p = (ListingVtab*)pVtab;
  const DepotListing *pDef = p->pAux->pDef;
  int aIdx[DEPOT_LISTING_MAX_ARG];
  int i, nUsed = 0, mask = 0;
  for(i=0; i<DEPOT_LISTING_MAX_ARG; i++) aIdx[i] = -1;
  for(i=0; i<pInfo->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &pInfo->aConstraint[i];
    int iArg = listingArgOf(p, c->iColumn);
    if( iArg<0 || c->op!=SQLITE_INDEX_CONSTRAINT_EQ ) continue;
    if( !c->usable ) return SQLITE_CONSTRAINT;
    aIdx[iArg] = i;
  }
  for(i=0; i<p->nArg; i++){
    if( aIdx[i]<0 ){
      if( i<pDef->nReq ) return SQLITE_CONSTRAINT;
      continue;
    }
    pInfo->aConstraintUsage[aIdx[i]].argvIndex = ++nUsed;
    pInfo->aConstraintUsage[aIdx[i]].omit = 1;
    mask |= 1<<i;
  }
  if( pInfo->colUsed & pDef->mCostly ) mask |= 1<<p->nArg;
  pInfo->idxNum = mask;
  pInfo->estimatedCost = pDef->rRows;
  pInfo->estimatedRows = (sqlite3_int64)pDef->rRows;
  return SQLITE_OK;
}

static int listingOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  ListingCursor *p = sqlite3_malloc64(sizeof(*p));
  (void)pVtab;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  *ppCur = &p->base;
  return SQLITE_OK;
}

static void listingArgsFree(ListingCursor *p){
  int i;
  for(i=0; i<DEPOT_LISTING_MAX_ARG; i++){
    sqlite3_value_free(p->apArg[i]);
    p->apArg[i] = 0;
  }
}

static int listingClose(sqlite3_vtab_cursor *pCur){
  ListingCursor *p = (ListingCursor*)pCur;
  listingArgsFree(p);
  listingRowsClear(&p->rows);
  sqlite3_free(p);
  return SQLITE_OK;
}

static int listingFilter(sqlite3_vtab_cursor *pCur, int idxNum,
                         const char *idxStr, int argc, sqlite3_value **argv){
  ListingCursor *p = (ListingCursor*)pCur;
  ListingVtab *pTab = (ListingVtab*)pCur->pVtab;
  const DepotListing *pDef = pTab->pAux->pDef;
  sqlite3_value *apArg[DEPOT_LISTING_MAX_ARG];
  char *zErr = 0;
  int i, j = 0, nArg = pTab->nArg, rc;
  (void)idxStr;
  memset(apArg, 0, sizeof(apArg));
  for(i=0; i<nArg; i++){
    if( (idxNum & (1<<i)) && j<argc ) apArg[i] = argv[j++];
  }
  listingRowsClear(&p->rows);
  listingArgsFree(p);
  p->rows.pAux = pTab->pAux->pAux;
  p->rows.bCostly = (idxNum & (1<<nArg))!=0;
  p->rows.nCol = pDef->nCol - nArg;
  p->iRow = p->nRow = 0;
  for(i=0; i<nArg; i++){
    if( apArg[i] && (p->apArg[i] = sqlite3_value_dup(apArg[i]))==0 ){
      return SQLITE_NOMEM;
    }
  }
  rc = pDef->xRows(&p->rows, apArg, &zErr);
  if( rc==SQLITE_OK ) rc = p->rows.rc;
  if( rc!=SQLITE_OK ){
    sqlite3_free(pTab->base.zErrMsg);
    pTab->base.zErrMsg = zErr;
    listingRowsClear(&p->rows);
    return rc;
  }
  sqlite3_free(zErr);
  p->nRow = p->rows.nCol ? p->rows.nCell / p->rows.nCol : 0;
  return SQLITE_OK;
}

static int listingNext(sqlite3_vtab_cursor *pCur){
  ((ListingCursor*)pCur)->iRow++;
  return SQLITE_OK;
}

static int listingEof(sqlite3_vtab_cursor *pCur){
  ListingCursor *p = (ListingCursor*)pCur;
  return p->iRow>=p->nRow;
}

static int listingColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx,
                         int iCol){
  ListingCursor *p = (ListingCursor*)pCur;
  const ListingVtab *pTab = (const ListingVtab*)pCur->pVtab;
  int iArg = listingArgOf(pTab, iCol);
  const DepotCell *c;
  const char *z;
  if( iArg>=0 ){
    if( p->apArg[iArg] ) sqlite3_result_value(ctx, p->apArg[iArg]);
    return SQLITE_OK;
  }
  if( iCol<0 || iCol>=pTab->pAux->pDef->nCol ) return SQLITE_OK;
  c = &p->rows.aCell[p->iRow*p->rows.nCol + pTab->aMap[iCol]];
  z = c->iOff>=0 ? (const char*)p->rows.aData + c->iOff : 0;
  switch( c->eType ){
    case DEPOT_CELL_INT:  sqlite3_result_int64(ctx, c->i); break;
    case DEPOT_CELL_REAL: sqlite3_result_double(ctx, c->r); break;
    case DEPOT_CELL_TEXT:
      sqlite3_result_text(ctx, z, c->n, SQLITE_TRANSIENT);
      break;
    case DEPOT_CELL_KEY:
      return kv_key_result(ctx, (const uint8_t*)z, c->n, 0, 0);
    case DEPOT_CELL_VALUE:
      return kv_value_result(ctx, (const uint8_t*)z, c->n);
    default: break;
  }
  return SQLITE_OK;
}

static int listingRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((ListingCursor*)pCur)->iRow + 1;
  return SQLITE_OK;
}

static const sqlite3_module listingModule = {
  0,                          /* iVersion */
  0,                          /* xCreate: eponymous only */
  listingConnect, listingBestIndex, listingDisconnect,
  0,                          /* xDestroy */
  listingOpen, listingClose, listingFilter, listingNext, listingEof,
  listingColumn, listingRowid,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0   /* read-only: no xUpdate, no txn */
};

static void listingAuxFree(void *p){
  ListingAux *pA = (ListingAux*)p;
  if( pA->xDestroy ) pA->xDestroy(pA->pAux);
  sqlite3_free(pA);
}

int depot_listing_register(sqlite3 *db, const DepotListing *pDef, void *pAux,
                           void (*xDestroy)(void*)){
  ListingAux *pA = sqlite3_malloc64(sizeof(*pA));
  if( pA==0 ){
    if( xDestroy ) xDestroy(pAux);
    return SQLITE_NOMEM;
  }
  pA->pDef = pDef;
  pA->pAux = pAux;
  pA->xDestroy = xDestroy;
  return sqlite3_create_module_v2(db, pDef->zName, &listingModule, pA,
                                  listingAuxFree);
}
