/*
** depot_tvf.c -- the table-valued functions that list things of a depot
** store (depot_branches, depot_databases, depot_restore_points,
** depot_quotas, depot_verify): one sqlite3_module, depot_tvf_module, whose
** client data is a DepotTvf describing one listing.
**
** A listing has a fixed schema (visible columns, then up to
** DEPOT_TVF_MAX_ARG hidden argument columns, the first required).  xFilter
** checks the arguments (non-empty text without NUL; one after the first
** nReq may be NULL, meaning "all") and calls the listing's xFill, which
** collects every row at once as cells (depot_tvf_row, depot_tvf_int,
** depot_tvf_str, depot_tvf_str_own); the cursor then walks them.  Each listing reads one
** consistent state of the store, so no store transaction stays open while
** SQLite steps the rows.
*/
#include "config.h"
#include "ext/depot_int.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

typedef struct DepotTvfVtab DepotTvfVtab;
struct DepotTvfVtab {
  sqlite3_vtab base;          /* must be first */
  const DepotTvf *pTab;
};

static void tvfCellsFree(DepotTvfCursor *p){
  int i;
  for(i=0; i<p->nRow*p->pTab->nCol; i++) sqlite3_free(p->a[i].z);
  sqlite3_free(p->a);
  p->a = 0;
  p->nRow = p->nAlloc = p->iRow = 0;
}

DepotTvfCell *depot_tvf_row(DepotTvfCursor *p){
  int nCol = p->pTab->nCol;
  if( p->nRow==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    DepotTvfCell *a = sqlite3_realloc64(p->a, sizeof(DepotTvfCell)*nCol*nNew);
    if( a==0 ){
      p->rc = SQLITE_NOMEM;
      return 0;
    }
    p->a = a;
    p->nAlloc = nNew;
  }
  memset(&p->a[p->nRow*nCol], 0, sizeof(DepotTvfCell)*nCol);
  return &p->a[nCol*p->nRow++];
}

void depot_tvf_int(DepotTvfCell *c, sqlite3_int64 i){
  c->eType = SQLITE_INTEGER;
  c->i = i;
}

void depot_tvf_str(DepotTvfCursor *p, DepotTvfCell *c, const char *z){
  if( z==0 ) return;
  depot_tvf_str_own(p, c, sqlite3_mprintf("%s", z));
}

void depot_tvf_str_own(DepotTvfCursor *p, DepotTvfCell *c, char *z){
  if( z==0 ){
    p->rc = SQLITE_NOMEM;
    return;
  }
  c->eType = SQLITE_TEXT;
  c->z = z;
}

static int tvfConnect(sqlite3 *db, void *pAux, int argc,
                      const char *const *argv, sqlite3_vtab **ppVtab,
                      char **pzErr){
  const DepotTvf *pTab = (const DepotTvf*)pAux;
  DepotTvfVtab *p;
  int rc = sqlite3_declare_vtab(db, pTab->zSchema);
  (void)argc; (void)argv; (void)pzErr;
  if( rc!=SQLITE_OK ) return rc;
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pTab = pTab;
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = &p->base;
  return SQLITE_OK;
}

static int tvfDisconnect(sqlite3_vtab *p){
  sqlite3_free(p);
  return SQLITE_OK;
}

static int tvfBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  const DepotTvf *pTab = ((DepotTvfVtab*)pVtab)->pTab;
  return depot_tvf_best_index(pInfo, pTab->nCol, pTab->nArg);
}

static int tvfOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  DepotTvfCursor *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pTab = ((DepotTvfVtab*)pVtab)->pTab;
  *ppCur = &p->base;
  return SQLITE_OK;
}

static int tvfClose(sqlite3_vtab_cursor *pCur){
  DepotTvfCursor *p = (DepotTvfCursor*)pCur;
  tvfCellsFree(p);
  sqlite3_free(p);
  return SQLITE_OK;
}

static int tvfVtabErr(sqlite3_vtab_cursor *pCur, int rc, char *zErr){
  sqlite3_free(pCur->pVtab->zErrMsg);
  pCur->pVtab->zErrMsg = zErr ? zErr : sqlite3_mprintf("depot: error %d", rc);
  return rc;
}

static int tvfFilter(sqlite3_vtab_cursor *pCur, int idxNum,
                     const char *idxStr, int argc, sqlite3_value **argv){
  DepotTvfCursor *p = (DepotTvfCursor*)pCur;
  const char *az[DEPOT_TVF_MAX_ARG] = { 0, 0, 0 };
  char *zErr = 0;
  int i, j = 0, rc;
  (void)idxStr;
  tvfCellsFree(p);
  p->rc = SQLITE_OK;
  for(i=0; i<p->pTab->nArg; i++){
    if( (idxNum & (1<<i))==0 || j>=argc ) continue;
    if( i>0 && i>=p->pTab->nReq
     && sqlite3_value_type(argv[j])==SQLITE_NULL ){ j++; continue; }
    az[i] = (const char*)sqlite3_value_text(argv[j]);
    if( sqlite3_value_type(argv[j])!=SQLITE_TEXT || az[i]==0 || !az[i][0]
     || (int)strlen(az[i])!=sqlite3_value_bytes(argv[j]) ){
      return tvfVtabErr(pCur, SQLITE_ERROR, sqlite3_mprintf("depot: argument"
          " %d must be non-empty text", i+1));
    }
    j++;
  }
  rc = p->pTab->xFill(p, az, &zErr);
  if( rc==SQLITE_OK && p->rc!=SQLITE_OK ) rc = p->rc;
  if( rc!=SQLITE_OK ){
    tvfCellsFree(p);
    return tvfVtabErr(pCur, rc, zErr);
  }
  sqlite3_free(zErr);
  return SQLITE_OK;
}

static int tvfNext(sqlite3_vtab_cursor *pCur){
  ((DepotTvfCursor*)pCur)->iRow++;
  return SQLITE_OK;
}

static int tvfEof(sqlite3_vtab_cursor *pCur){
  DepotTvfCursor *p = (DepotTvfCursor*)pCur;
  return p->iRow>=p->nRow;
}

static int tvfColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  DepotTvfCursor *p = (DepotTvfCursor*)pCur;
  const DepotTvfCell *c;
  if( i>=p->pTab->nCol ) return SQLITE_OK;
  c = &p->a[p->iRow*p->pTab->nCol + i];
  if( c->eType==SQLITE_INTEGER ) sqlite3_result_int64(ctx, c->i);
  else if( c->eType==SQLITE_TEXT ) sqlite3_result_text(ctx, c->z, -1,
                                                       SQLITE_TRANSIENT);
  return SQLITE_OK;
}

static int tvfRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((DepotTvfCursor*)pCur)->iRow + 1;
  return SQLITE_OK;
}

const sqlite3_module depot_tvf_module = {
  0, 0, tvfConnect, tvfBestIndex, tvfDisconnect, 0, tvfOpen, tvfClose,
  tvfFilter, tvfNext, tvfEof, tvfColumn, tvfRowid,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};
