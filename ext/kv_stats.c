/*
** kv_stats.c -- the eponymous virtual table kv_stats: counters of every KV
** store open in the process and of each of its tables.
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
** they are computed only when the query uses one of those columns.
*/
#include "config.h"
#include "ext/kv/kv.h"
#include "ext/kv_sql.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

typedef struct KsRow KsRow;
struct KsRow {
  char *zStore;                 /* NULL: anonymous */
  char *zTab;                   /* NULL: the store row */
  char zType[32];
  KvBackendStats st;
  int bStore;
  int bWal;
  WalStats wal;
};

typedef struct KsCursor KsCursor;
struct KsCursor {
  sqlite3_vtab_cursor base;
  KsRow *aRow; int nRow, nAlloc;
  int iRow;
  int bCount;                   /* row_count or stored_bytes wanted */
};

/* ---------------------------------------------------------- gather --- */

static KsRow *ksNewRow(KsCursor *pCur, KvEngine *pEng){
  KsRow *r;
  const char *zDir = kv_engine_dir(pEng);
  if( pCur->nRow==pCur->nAlloc ){
    int nNew = pCur->nAlloc ? pCur->nAlloc*2 : 16;
    KsRow *a = sqlite3_realloc64(pCur->aRow, nNew*sizeof(KsRow));
    if( a==0 ) return 0;
    pCur->aRow = a;
    pCur->nAlloc = nNew;
  }
  r = &pCur->aRow[pCur->nRow];
  memset(r, 0, sizeof(*r));
  if( zDir && (r->zStore = sqlite3_mprintf("%s", zDir))==0 ){
    return 0;
  }
  pCur->nRow++;
  return r;
}

/* The row of one table of a store (kv_engine_table_stats callback). */
typedef struct KsTableCtx KsTableCtx;
struct KsTableCtx { KsCursor *pCur; KvEngine *pEng; };

static int ksTableRow(void *pCtx, const char *zName, const char *zType,
                      const KvBackendStats *pSt){
  KsTableCtx *p = (KsTableCtx*)pCtx;
  KsRow *r = ksNewRow(p->pCur, p->pEng);
  if( r==0 || (r->zTab = sqlite3_mprintf("%s", zName))==0 ){
    return SQLITE_NOMEM;
  }
  sqlite3_snprintf(sizeof(r->zType), r->zType, "%s", zType);
  r->st = *pSt;
  return SQLITE_OK;
}

/* The store row, then the table rows of one store (kv_engine_foreach
** callback). */
static int ksEngineRows(KvEngine *pEng, void *pArg){
  KsCursor *pCur = (KsCursor*)pArg;
  KsTableCtx ctx;
  KsRow *r = ksNewRow(pCur, pEng);
  if( r==0 ) return SQLITE_NOMEM;
  r->bStore = 1;
  memcpy(r->zType, "store", 6);
  r->bWal = kv_engine_wal_stats(pEng, &r->wal);
  ctx.pCur = pCur;
  ctx.pEng = pEng;
  return kv_engine_table_stats(pEng, pCur->bCount, ksTableRow, &ctx);
}

static void ksClear(KsCursor *pCur){
  int i;
  for(i=0; i<pCur->nRow; i++){
    sqlite3_free(pCur->aRow[i].zStore);
    sqlite3_free(pCur->aRow[i].zTab);
  }
  sqlite3_free(pCur->aRow);
  pCur->aRow = 0;
  pCur->nRow = pCur->nAlloc = 0;
}

/* ---------------------------------------------------------- module --- */

static int ksConnect(sqlite3 *db, void *pAux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr){
  sqlite3_vtab *p;
  int rc;
  (void)pAux; (void)argc; (void)argv; (void)pzErr;
  rc = sqlite3_declare_vtab(db, "CREATE TABLE x(store, tbl, type, row_count,"
      " stored_bytes, overlay_entries, pending_confirmations,"
      " collector_errors, last_error, wal_segments, wal_unconfirmed)");
  if( rc!=SQLITE_OK ) return rc;
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *ppVtab = p;
  return SQLITE_OK;
}

static int ksDisconnect(sqlite3_vtab *p){
  sqlite3_free(p);
  return SQLITE_OK;
}

/* idxNum 1: row_count or stored_bytes is used (they may cost a walk). */
static int ksBestIndex(sqlite3_vtab *p, sqlite3_index_info *pInfo){
  (void)p;
  pInfo->idxNum = (pInfo->colUsed & ((sqlite3_uint64)3<<3)) ? 1 : 0;
  pInfo->estimatedCost = 1000;
  return SQLITE_OK;
}

static int ksOpen(sqlite3_vtab *p, sqlite3_vtab_cursor **pp){
  KsCursor *c = sqlite3_malloc64(sizeof(*c));
  (void)p;
  if( c==0 ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *pp = &c->base;
  return SQLITE_OK;
}

static int ksClose(sqlite3_vtab_cursor *pCur){
  ksClear((KsCursor*)pCur);
  sqlite3_free(pCur);
  return SQLITE_OK;
}

static int ksFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  KsCursor *c = (KsCursor*)pCur;
  (void)idxStr; (void)argc; (void)argv;
  ksClear(c);
  c->bCount = idxNum;
  c->iRow = 0;
  return kv_engine_foreach(ksEngineRows, c);
}

static int ksNext(sqlite3_vtab_cursor *pCur){
  ((KsCursor*)pCur)->iRow++;
  return SQLITE_OK;
}

static int ksEof(sqlite3_vtab_cursor *pCur){
  KsCursor *c = (KsCursor*)pCur;
  return c->iRow>=c->nRow;
}

static int ksColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  KsRow *r = &((KsCursor*)pCur)->aRow[((KsCursor*)pCur)->iRow];
  switch( i ){
    case 0: if( r->zStore ) sqlite3_result_text(ctx, r->zStore, -1,
                                                SQLITE_TRANSIENT); break;
    case 1: if( r->zTab ) sqlite3_result_text(ctx, r->zTab, -1,
                                              SQLITE_TRANSIENT); break;
    case 2: sqlite3_result_text(ctx, r->zType, -1, SQLITE_TRANSIENT); break;
    case 9: if( r->bWal ) sqlite3_result_int(ctx, r->wal.nSegment); break;
    case 10: if( r->bWal ) sqlite3_result_int64(ctx, r->wal.nUnconfirmed);
             break;
    default:
      if( r->bStore ) break;
      if( i==3 ) sqlite3_result_int64(ctx, r->st.nRow);
      if( i==4 ) sqlite3_result_int64(ctx, r->st.nByte);
      if( i==5 ) sqlite3_result_int64(ctx, r->st.nOverlay);
      if( i==6 ) sqlite3_result_int64(ctx, r->st.nPending);
      if( i==7 ) sqlite3_result_int64(ctx, r->st.nError);
      if( i==8 && r->st.zError[0] ){
        sqlite3_result_text(ctx, r->st.zError, -1, SQLITE_TRANSIENT);
      }
  }
  return SQLITE_OK;
}

static int ksRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((KsCursor*)pCur)->iRow;
  return SQLITE_OK;
}

static sqlite3_module ksModule = {
  0, 0, ksConnect, ksBestIndex, ksDisconnect, 0,
  ksOpen, ksClose, ksFilter, ksNext, ksEof, ksColumn, ksRowid,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

int kv_stats_register(sqlite3 *db){
  return sqlite3_create_module(db, "kv_stats", &ksModule, 0);
}
