/*
** kv_vfunc.c -- the key-version protocol from SQL, and kv_metrics:
**
**   SELECT value, version FROM kv_query_with_version(table, key[, dir])
**   SELECT key, value, version FROM kv_query_with_versions(table, keys[, dir])
**   kv_prepare_with_version(h, readset_json)   -> 1
**   SELECT "table", key, kind FROM kv_conflicts(h)
**   kv_commit_with_version(h)                  -> receipts JSON
**   kv_store_options([dir[, options_json]])    -> the options as JSON
**   SELECT name, labels, value, store FROM kv_metrics
**
** The three tables are eponymous, read-only virtual tables built on one
** helper here: xFilter computes every row at once (a handful at most) into
** an array of cells.  The rules of the protocol are in ext/kv/kv.h; the
** SQL forms are documented in docs/SQL.md.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
#include "ext/kv/kv.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------- rows --- */

#define KV_CELL_NULL   0
#define KV_CELL_INT    1
#define KV_CELL_TEXT   2
#define KV_CELL_KEY    3     /* encoded key bytes */
#define KV_CELL_VALUE  4     /* encoded value bytes */

typedef struct KvCell KvCell;
struct KvCell {
  int eType;
  sqlite3_int64 i;
  int iOff, n;               /* bytes at KvRows.data.a+iOff (NUL after) */
};

typedef struct KvRows KvRows;
struct KvRows {
  int nCol;
  int nCell, nAlloc;
  KvCell *a;
  KvBuf data;                /* every cell's bytes, one allocation */
};

static void kvRowsClear(KvRows *p){
  sqlite3_free(p->a);
  kv_buf_free(&p->data);
  p->a = 0;
  p->nCell = p->nAlloc = 0;
}

/* Room for nCell more cells holding nByte more bytes (NULs included). */
static int kvRowsRoom(KvRows *p, int nCell, int nByte){
  if( p->nCell+nCell > p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    KvCell *a;
    while( nNew < p->nCell+nCell ) nNew *= 2;
    if( (a = sqlite3_realloc64(p->a, nNew*sizeof(KvCell)))==0 ){
      return SQLITE_NOMEM;
    }
    p->a = a;
    p->nAlloc = nNew;
  }
  return kv_buf_reserve(&p->data, nByte);
}

/* Append a cell into the room kvRowsRoom made (n+1 bytes if z). */
static void kvRowsPut(KvRows *p, int eType, sqlite3_int64 i, const void *z,
                      int n){
  KvCell *c = &p->a[p->nCell++];
  c->eType = eType;
  c->i = i;
  c->iOff = -1;
  c->n = 0;
  if( z ){
    c->iOff = p->data.n;
    c->n = n;
    memcpy(p->data.a + p->data.n, z, (size_t)n);
    p->data.a[p->data.n + n] = 0;
    p->data.n += n+1;
  }
}

static int kvRowsCell(KvRows *p, int eType, sqlite3_int64 i, const void *z,
                      int n){
  int rc = kvRowsRoom(p, 1, z ? n+1 : 0);
  if( rc==SQLITE_OK ) kvRowsPut(p, eType, i, z, n);
  return rc;
}

static int kvRowsText(KvRows *p, const char *z){
  return z ? kvRowsCell(p, KV_CELL_TEXT, 0, z, (int)strlen(z))
           : kvRowsCell(p, KV_CELL_NULL, 0, 0, 0);
}

/* Fill p with the rows for arguments apArg (NULL pointers: absent). */
typedef int (*KvRowsFill)(KvConn*, sqlite3_value **apArg, KvRows *p,
                          char **pzErr);

typedef struct KvRowsDef KvRowsDef;
struct KvRowsDef {
  const char *zName;
  const char *zSchema;       /* visible columns, then the argument ones */
  int nCol;                  /* visible columns */
  int nArg;                  /* argument (HIDDEN) columns */
  int nReq;                  /* leading arguments that are required */
  int eVtabConfig;           /* SQLITE_VTAB_DIRECTONLY or _INNOCUOUS */
  KvRowsFill xFill;
};

typedef struct KvRowsVtab KvRowsVtab;
struct KvRowsVtab {
  sqlite3_vtab base;
  KvConn *pConn;
  const KvRowsDef *pDef;
};

typedef struct KvRowsCsr KvRowsCsr;
struct KvRowsCsr {
  sqlite3_vtab_cursor base;
  KvRows rows;
  int iRow, nRow;
  sqlite3_value *apArg[8];   /* copies of the arguments (NULL: absent) */
};

static void kvRowsArgsFree(KvRowsCsr *p){
  int i;
  for(i=0; i<8; i++){
    sqlite3_value_free(p->apArg[i]);
    p->apArg[i] = 0;
  }
}

static int kvRowsConnect(sqlite3 *db, void *pAux, int argc,
                         const char *const *argv, sqlite3_vtab **ppVtab,
                         char **pzErr){
  const KvRowsDef *pDef = (const KvRowsDef*)((void**)pAux)[0];
  KvRowsVtab *p;
  int rc = sqlite3_declare_vtab(db, pDef->zSchema);
  (void)argc; (void)argv; (void)pzErr;
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_vtab_config(db, pDef->eVtabConfig);
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pDef = pDef;
  p->pConn = (KvConn*)((void**)pAux)[1];
  *ppVtab = &p->base;
  return SQLITE_OK;
}

static int kvRowsDisconnect(sqlite3_vtab *pVtab){
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

/* Use every usable equality constraint on an argument column; fail the
** plan (SQLITE_CONSTRAINT) if a required argument has none. */
static int kvRowsBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  const KvRowsDef *pDef = ((KvRowsVtab*)pVtab)->pDef;
  int aIdx[8], i, n = 0, mask = 0;
  for(i=0; i<8; i++) aIdx[i] = -1;
  for(i=0; i<pInfo->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &pInfo->aConstraint[i];
    int iArg = c->iColumn - pDef->nCol;
    if( iArg<0 || iArg>=pDef->nArg || c->op!=SQLITE_INDEX_CONSTRAINT_EQ ){
      continue;
    }
    if( !c->usable ){
      if( iArg<pDef->nReq ) return SQLITE_CONSTRAINT;
      continue;
    }
    aIdx[iArg] = i;
  }
  for(i=0; i<pDef->nArg; i++){
    if( aIdx[i]<0 ){
      if( i<pDef->nReq ) return SQLITE_CONSTRAINT;
      continue;
    }
    pInfo->aConstraintUsage[aIdx[i]].argvIndex = ++n;
    pInfo->aConstraintUsage[aIdx[i]].omit = 1;
    mask |= 1<<i;
  }
  pInfo->idxNum = mask;
  pInfo->estimatedCost = 10.0;
  pInfo->estimatedRows = 10;
  return SQLITE_OK;
}

static int kvRowsOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCsr){
  KvRowsCsr *p = sqlite3_malloc64(sizeof(*p));
  (void)pVtab;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  *ppCsr = &p->base;
  return SQLITE_OK;
}

static int kvRowsClose(sqlite3_vtab_cursor *pCsr){
  kvRowsArgsFree((KvRowsCsr*)pCsr);
  kvRowsClear(&((KvRowsCsr*)pCsr)->rows);
  sqlite3_free(pCsr);
  return SQLITE_OK;
}

static int kvRowsFilter(sqlite3_vtab_cursor *pCur, int idxNum,
                        const char *idxStr, int argc, sqlite3_value **argv){
  KvRowsCsr *p = (KvRowsCsr*)pCur;
  KvRowsVtab *pTab = (KvRowsVtab*)pCur->pVtab;
  sqlite3_value *apArg[8];
  char *zErr = 0;
  int i, j = 0, rc;
  (void)idxStr;
  memset(apArg, 0, sizeof(apArg));
  for(i=0; i<pTab->pDef->nArg; i++){
    if( (idxNum & (1<<i)) && j<argc ) apArg[i] = argv[j++];
  }
  kvRowsClear(&p->rows);
  kvRowsArgsFree(p);
  p->rows.nCol = pTab->pDef->nCol;
  p->iRow = p->nRow = 0;
  for(i=0; i<pTab->pDef->nArg; i++){
    if( apArg[i] && (p->apArg[i] = sqlite3_value_dup(apArg[i]))==0 ){
      return SQLITE_NOMEM;
    }
  }
  rc = pTab->pDef->xFill(pTab->pConn, apArg, &p->rows, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_free(pTab->base.zErrMsg);
    pTab->base.zErrMsg = zErr;
    kvRowsClear(&p->rows);
    return rc;
  }
  p->nRow = p->rows.nCell / p->rows.nCol;
  return SQLITE_OK;
}

static int kvRowsNext(sqlite3_vtab_cursor *pCur){
  ((KvRowsCsr*)pCur)->iRow++;
  return SQLITE_OK;
}

static int kvRowsEof(sqlite3_vtab_cursor *pCur){
  KvRowsCsr *p = (KvRowsCsr*)pCur;
  return p->iRow>=p->nRow;
}

static int kvRowsColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx,
                        int iCol){
  KvRowsCsr *p = (KvRowsCsr*)pCur;
  const KvCell *c;
  const char *z;
  if( iCol>=p->rows.nCol ){                /* an argument column */
    sqlite3_value *pArg = p->apArg[iCol - p->rows.nCol];
    if( pArg ) sqlite3_result_value(ctx, pArg);
    return SQLITE_OK;
  }
  c = &p->rows.a[p->iRow*p->rows.nCol + iCol];
  z = c->iOff>=0 ? (const char*)p->rows.data.a + c->iOff : 0;
  switch( c->eType ){
    case KV_CELL_INT:  sqlite3_result_int64(ctx, c->i); break;
    case KV_CELL_TEXT: sqlite3_result_text(ctx, z, c->n, SQLITE_TRANSIENT);
                       break;
    case KV_CELL_KEY:
      return kv_key_result(ctx, (const uint8_t*)z, c->n, 0, 0);
    case KV_CELL_VALUE:
      return kv_value_result(ctx, (const uint8_t*)z, c->n);
    default: break;
  }
  return SQLITE_OK;
}

static int kvRowsRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((KvRowsCsr*)pCur)->iRow;
  return SQLITE_OK;
}

static const sqlite3_module kvRowsModule = {
  0, 0, kvRowsConnect, kvRowsBestIndex, kvRowsDisconnect, 0,
  kvRowsOpen, kvRowsClose, kvRowsFilter, kvRowsNext, kvRowsEof,
  kvRowsColumn, kvRowsRowid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

/* ----------------------------------------------------------- helpers --- */

static void kvVfError(sqlite3_context *ctx, int rc, char *zErr){
  if( rc==SQLITE_NOMEM && zErr==0 ){
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_error(ctx, zErr ? zErr : sqlite3_errstr(rc), -1);
  sqlite3_result_error_code(ctx, rc);
  sqlite3_free(zErr);
}

/* The store of an optional dir argument (NULL: the default store).  With
** bExisting (the queries) a store that does not exist is an error, not
** created. */
static int kvStoreArg(KvConn *pConn, sqlite3_value *pDir, int bExisting,
                      KvEngine **ppEng, char **pzErr){
  const char *zDir = 0;
  if( pDir && sqlite3_value_type(pDir)!=SQLITE_NULL ){
    if( sqlite3_value_type(pDir)!=SQLITE_TEXT ){
      *pzErr = sqlite3_mprintf("kv: store directory must be text, got %s",
                               kv_value_type_name(pDir));
      return SQLITE_MISMATCH;
    }
    zDir = (const char*)sqlite3_value_text(pDir);
    if( zDir && (int)strlen(zDir)!=sqlite3_value_bytes(pDir) ){
      *pzErr = sqlite3_mprintf("kv: store directory must not contain NUL");
      return SQLITE_ERROR;
    }
  }
  if( bExisting ) return kv_conn_store_existing(pConn, zDir, ppEng, pzErr);
  return kv_conn_store(pConn, zDir, 0, ppEng, pzErr);
}

/* The handle with integer id in pArg, or NULL with *pzErr set and *pRc
** the code: SQLITE_MISMATCH for a value that is no integer (as the kv_*
** scalar functions give), SQLITE_ERROR for an unknown or finished one. */
static KvHandle *kvHandleFind(KvConn *pConn, sqlite3_value *pArg,
                              KvHandle ***pppPrev, int *pRc, char **pzErr){
  KvHandle **pp;
  sqlite3_int64 id;
  *pRc = SQLITE_OK;
  if( pArg==0 || !depot_value_int64(pArg, &id) ){
    *pzErr = sqlite3_mprintf("kv: transaction handle must be an integer "
        "from kv_begin(), got %s", pArg ? kv_value_type_name(pArg) : "NULL");
    *pRc = SQLITE_MISMATCH;
    return 0;
  }
  for(pp=&pConn->pHandle; *pp; pp=&(*pp)->pNext){
    if( (*pp)->id==id ){
      if( pppPrev ) *pppPrev = pp;
      return *pp;
    }
  }
  *pzErr = (id>0 && id<=pConn->iLastHandle)
      ? sqlite3_mprintf("kv: transaction handle %lld is finished", id)
      : sqlite3_mprintf("kv: unknown transaction handle %lld (handles "
                        "belong to the connection that began them)", id);
  *pRc = SQLITE_ERROR;
  return 0;
}

/* ------------------------------------------------ kv_query_with_version --- */

static int kvQueryFill(KvConn *pConn, sqlite3_value **apArg, KvRows *pRows,
                       char **pzErr){
  uint8_t aVer[KV_VERSION_BYTES];
  char zVer[KV_VERSION_TEXT+1];
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  KvEngine *pEng = 0;
  int bFound = 0, rc = SQLITE_OK;
  if( apArg[0]==0 || sqlite3_value_type(apArg[0])!=SQLITE_TEXT ){
    *pzErr = sqlite3_mprintf("kv: table name must be text, got %s",
                             apArg[0] ? kv_value_type_name(apArg[0]) : "NULL");
    rc = SQLITE_MISMATCH;
  }
  if( rc==SQLITE_OK ) rc = kv_key_encode(apArg[1], &k, pzErr);
  if( rc==SQLITE_OK ) rc = kvStoreArg(pConn, apArg[2], 1, &pEng, pzErr);
  if( rc==SQLITE_OK ){
    rc = kv_version_query(pEng, (const char*)sqlite3_value_text(apArg[0]),
                          sqlite3_value_bytes(apArg[0]), k.a, k.n, &v,
                          &bFound, aVer, pzErr);
  }
  if( rc==SQLITE_OK ){
    kv_version_text(aVer, zVer);
    rc = bFound ? kvRowsCell(pRows, KV_CELL_VALUE, 0, v.a, v.n)
                : kvRowsCell(pRows, KV_CELL_NULL, 0, 0, 0);
    if( rc==SQLITE_OK ) rc = kvRowsText(pRows, zVer);
  }
  kv_metric_add(rc==SQLITE_OK ? KV_METRIC_QUERY_OK : KV_METRIC_QUERY_FAIL);
  kv_engine_unref(pEng);
  kv_buf_free(&k);
  kv_buf_free(&v);
  return rc;
}

/* ----------------------------------------------- kv_query_with_versions --- */

typedef struct KvQueryListArg KvQueryListArg;
struct KvQueryListArg {
  KvRows *pRows;
  const KvKeyList *pList;
};

/* One row; a key the list gave as a JSON integer is an integer cell (the
** same value the key's bytes decode to, without decoding them). */
static int kvQueryListRow(void *pArg, int iKey, const uint8_t *aKey,
                          int nKey, const uint8_t *aVal, int nVal,
                          const uint8_t *aVer){
  KvQueryListArg *pA = (KvQueryListArg*)pArg;
  KvRows *pRows = pA->pRows;
  int bInt = pA->pList->abInt[iKey];
  char zVer[KV_VERSION_TEXT+1];
  int rc = kvRowsRoom(pRows, 3, (bInt ? 0 : nKey+1) + (aVal ? nVal+1 : 0)
                                + KV_VERSION_TEXT+1);
  if( rc!=SQLITE_OK ) return rc;
  if( bInt ) kvRowsPut(pRows, KV_CELL_INT, pA->pList->aInt[iKey], 0, 0);
  else kvRowsPut(pRows, KV_CELL_KEY, 0, aKey, nKey);
  if( aVal ) kvRowsPut(pRows, KV_CELL_VALUE, 0, aVal, nVal);
  else kvRowsPut(pRows, KV_CELL_NULL, 0, 0, 0);
  kv_version_text(aVer, zVer);
  kvRowsPut(pRows, KV_CELL_TEXT, 0, zVer, KV_VERSION_TEXT);
  return SQLITE_OK;
}

static int kvQueryListFill(KvConn *pConn, sqlite3_value **apArg,
                           KvRows *pRows, char **pzErr){
  KvKeyList list;
  KvQueryListArg arg;
  KvEngine *pEng = 0;
  int rc = SQLITE_OK;
  memset(&list, 0, sizeof(list));
  arg.pRows = pRows;
  arg.pList = &list;
  if( apArg[0]==0 || sqlite3_value_type(apArg[0])!=SQLITE_TEXT ){
    *pzErr = sqlite3_mprintf("kv: table name must be text, got %s",
                             apArg[0] ? kv_value_type_name(apArg[0]) : "NULL");
    rc = SQLITE_MISMATCH;
  }else if( apArg[1]==0 || sqlite3_value_type(apArg[1])!=SQLITE_TEXT ){
    *pzErr = sqlite3_mprintf("kv: the key list must be a JSON array text "
        "such as '[\"a\",7,{\"hex\":\"00ff\"}]', got %s",
        apArg[1] ? kv_value_type_name(apArg[1]) : "NULL");
    rc = SQLITE_MISMATCH;
  }
  if( rc==SQLITE_OK ){
    rc = kv_keylist_parse((const char*)sqlite3_value_text(apArg[1]),
                          sqlite3_value_bytes(apArg[1]), &list, pzErr);
  }
  if( rc==SQLITE_OK ) rc = kvStoreArg(pConn, apArg[2], 1, &pEng, pzErr);
  if( rc==SQLITE_OK && list.n>0 && list.n<(1<<20) ){
    /* room for every row's cells and version text at once (values and
    ** non-integer keys may grow the data further) */
    rc = kvRowsRoom(pRows, 3*list.n, list.n*(KV_VERSION_TEXT+1+16));
  }
  if( rc==SQLITE_OK ){
    rc = kv_version_query_list(pEng, (const char*)sqlite3_value_text(apArg[0]),
                               sqlite3_value_bytes(apArg[0]), &list,
                               kvQueryListRow, &arg, pzErr);
  }
  kv_metric_add(rc==SQLITE_OK ? KV_METRIC_QUERY_OK : KV_METRIC_QUERY_FAIL);
  kv_engine_unref(pEng);
  kv_keylist_free(&list);
  return rc;
}

/* ------------------------------------------------------- kv_conflicts --- */

static int kvConflictsFill(KvConn *pConn, sqlite3_value **apArg,
                           KvRows *pRows, char **pzErr){
  int i, n, rc;
  KvHandle *h = kvHandleFind(pConn, apArg[0], 0, &rc, pzErr);
  const KvConflict *a;
  if( h==0 ) return rc;
  n = kv_root_conflicts(h->pRoot, &a);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    int bMeta = strcmp(a[i].zTable, KV_META_TABLE)==0;
    rc = bMeta ? kvRowsCell(pRows, KV_CELL_TEXT, 0, a[i].aKey, a[i].nKey)
               : kvRowsCell(pRows, KV_CELL_TEXT, 0, a[i].zTable, a[i].nTable);
    if( rc==SQLITE_OK ){
      rc = bMeta ? kvRowsCell(pRows, KV_CELL_NULL, 0, 0, 0)
                 : kvRowsCell(pRows, KV_CELL_KEY, 0, a[i].aKey, a[i].nKey);
    }
    if( rc==SQLITE_OK ){
      rc = kvRowsText(pRows, a[i].eKind==KV_CONFLICT_VERSION
                      ? "version_mismatch" : "transaction_conflict");
    }
  }
  return rc;
}

/* --------------------------------------------------------- kv_metrics --- */

static int kvMetricRow(KvRows *p, const char *zName, const char *zLabels,
                       sqlite3_int64 v, const char *zStore){
  int rc = kvRowsText(p, zName);
  if( rc==SQLITE_OK ) rc = kvRowsText(p, zLabels);
  if( rc==SQLITE_OK ) rc = kvRowsCell(p, KV_CELL_INT, v, 0, 0);
  if( rc==SQLITE_OK ) rc = kvRowsText(p, zStore);
  return rc;
}

static int kvMetricsTables(KvRows *p){
  KvTableInfo *a = 0;
  int i, n = 0, rc = kv_engine_list(&a, &n);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    KvBuf lab = {0, 0, 0};
    rc = kv_buf_append(&lab, "{\"table\":", 9);
    if( rc==SQLITE_OK ) rc = kv_json_text(&lab, (uint8_t*)a[i].zName, a[i].nName);
    if( rc==SQLITE_OK ) rc = kv_buf_append(&lab, "}", 2);   /* with NUL */
    if( rc==SQLITE_OK ){
      rc = kvMetricRow(p, "key_version_cache_record_count", (char*)lab.a,
                       a[i].nVerRecord, a[i].zDir);
    }
    if( rc==SQLITE_OK ){
      rc = kvMetricRow(p, "key_version_cache_estimated_memory_bytes",
                       (char*)lab.a, a[i].nVerBytes, a[i].zDir);
    }
    kv_buf_free(&lab);
  }
  kv_engine_list_free(a, n);
  return rc;
}

static int kvMetricsFill(KvConn *pConn, sqlite3_value **apArg, KvRows *p,
                         char **pzErr){
  int64_t a[KV_METRIC_N+2];
  int rc;
  (void)pConn; (void)apArg; (void)pzErr;
  kv_metrics_read(a);
  rc = kvMetricsTables(p);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "key_version_query_calls",
      "{\"result\":\"success\"}", a[KV_METRIC_QUERY_OK], 0);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "key_version_query_calls",
      "{\"result\":\"failure\"}", a[KV_METRIC_QUERY_FAIL], 0);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "key_version_2pc_calls",
      "{\"phase\":\"prepare\",\"result\":\"success\"}", a[KV_METRIC_PREPARE_OK], 0);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "key_version_2pc_calls",
      "{\"phase\":\"prepare\",\"result\":\"failure\"}", a[KV_METRIC_PREPARE_FAIL], 0);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "key_version_2pc_calls",
      "{\"phase\":\"commit\",\"result\":\"success\"}", a[KV_METRIC_COMMIT_OK], 0);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "key_version_2pc_calls",
      "{\"phase\":\"commit\",\"result\":\"failure\"}", a[KV_METRIC_COMMIT_FAIL], 0);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "transaction_lifecycle",
      "{\"event\":\"created\"}", a[KV_METRIC_N], 0);
  if( rc==SQLITE_OK ) rc = kvMetricRow(p, "transaction_lifecycle",
      "{\"event\":\"closed\"}", a[KV_METRIC_N+1], 0);
  return rc;
}

/* ------------------------------------------- kv_prepare_with_version --- */

static void kvPrepareVFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  KvReadSet set;
  char *zErr = 0;
  int rc, bNoMem = 0;
  KvHandle *h = kvHandleFind(pConn, argv[0], 0, &rc, &zErr);
  (void)argc;
  memset(&set, 0, sizeof(set));
  if( h && (zErr = kv_handle_unusable(h, 0, &bNoMem))!=0 ) rc = SQLITE_MISUSE;
  if( bNoMem ) rc = SQLITE_NOMEM;
  if( rc==SQLITE_OK && sqlite3_value_type(argv[1])!=SQLITE_TEXT ){
    zErr = sqlite3_mprintf("kv: the read set must be a JSON array text such "
        "as '[{\"table\":\"t\",\"key\":\"k\",\"version\":\"u:..\"}]', got %s",
        kv_value_type_name(argv[1]));
    rc = SQLITE_MISMATCH;
  }
  if( rc==SQLITE_OK ){
    rc = kv_readset_parse((const char*)sqlite3_value_text(argv[1]),
                          sqlite3_value_bytes(argv[1]), &set, &zErr);
  }
  if( rc==SQLITE_OK ) rc = kv_version_prepare(h->pRoot, set.a, set.n, &zErr);
  kv_metric_add(rc==SQLITE_OK ? KV_METRIC_PREPARE_OK : KV_METRIC_PREPARE_FAIL);
  kv_readset_free(&set);
  if( rc!=SQLITE_OK ) kvVfError(ctx, rc, zErr);
  else sqlite3_result_int(ctx, 1);
}

/* ------------------------------------------------ kv_commit_with_version --- */

/* The JSON text every receipt of one table starts with, rendered once
** per run of that table's receipts: '{"table":<name>,"key":'. */
typedef struct KvReceiptHead KvReceiptHead;
struct KvReceiptHead {
  const char *zTab;          /* the table it was rendered for */
  KvBuf json;
};

/* Append receipt r as JSON to p (a comma first unless bFirst): the head
** of its table, its key, then the version and op written straight from
** the version bytes into one tail. */
static int kvReceiptJson(KvBuf *p, const KvVerReceipt *r, int bFirst,
                         KvReceiptHead *pHead){
  static const char zUp[] = "\",\"op\":\"upsert\"}";
  static const char zDel[] = "\",\"op\":\"delete\"}";
  char zTail[12 + KV_VERSION_TEXT + 1 + sizeof(zUp)];
  int rc = SQLITE_OK;
  if( r->zTab!=pHead->zTab ){
    kv_buf_reset(&pHead->json);
    rc = kv_buf_append(&pHead->json, ",{\"table\":", 10);
    if( rc==SQLITE_OK ){
      rc = kv_json_text(&pHead->json, (const uint8_t*)r->zTab, r->nTab);
    }
    if( rc==SQLITE_OK ) rc = kv_buf_append(&pHead->json, ",\"key\":", 7);
    if( rc!=SQLITE_OK ) return rc;
    pHead->zTab = r->zTab;
  }
  rc = kv_buf_append(p, pHead->json.a + (bFirst ? 1 : 0),
                     pHead->json.n - (bFirst ? 1 : 0));
  if( rc==SQLITE_OK ) rc = kv_key_json(r->aKey, r->nKey, p);
  memcpy(zTail, ",\"version\":\"", 12);
  kv_version_text(r->aVer, zTail+12);
  memcpy(zTail+12+KV_VERSION_TEXT, r->aVer[0]=='d' ? zDel : zUp,
         sizeof(zUp)-1);
  if( rc==SQLITE_OK ){
    rc = kv_buf_append(p, zTail, 12 + KV_VERSION_TEXT + (int)sizeof(zUp)-1);
  }
  return rc;
}

static void kvCommitVFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  KvHandle **pp = 0;
  KvVerReceipts *pR = 0;
  KvBuf out = {0, 0, 0};
  KvReceiptHead head = {0, {0, 0, 0}};
  char *zErr = 0;
  int i, rc;
  KvHandle *h = kvHandleFind(pConn, argv[0], &pp, &rc, &zErr);
  (void)argc;
  if( rc==SQLITE_OK ) rc = kv_version_commit(h->pRoot, &pR, &zErr);
  kv_metric_add(rc==SQLITE_OK ? KV_METRIC_COMMIT_OK : KV_METRIC_COMMIT_FAIL);
  if( h && kv_root_state(h->pRoot)==KV_ROOT_DONE ){
    *pp = h->pNext;                      /* finished: the handle goes */
    kv_root_free(h->pRoot);
    sqlite3_free(h);
  }
  if( rc==SQLITE_OK ) rc = kv_buf_append(&out, "[", 1);
  for(i=0; rc==SQLITE_OK && i<pR->n; i++){
    rc = kvReceiptJson(&out, &pR->a[i], i==0, &head);
  }
  if( rc==SQLITE_OK ) rc = kv_buf_append(&out, "]", 1);
  if( rc==SQLITE_OK ){
    /* The buffer is an sqlite3_malloc64 allocation: hand it over. */
    sqlite3_result_text(ctx, (const char*)out.a, out.n, sqlite3_free);
    out.a = 0;
  }else{
    kvVfError(ctx, rc, zErr);
  }
  kv_version_receipts_free(pR);
  kv_buf_free(&head.json);
  kv_buf_free(&out);
}

/* ---------------------------------------------------- kv_store_options --- */

/* The store options being read or changed: the two TTL values of the key
** versions (kv_version_configure) and the root WAL's configuration. */
typedef struct KvStoreOpts KvStoreOpts;
struct KvStoreOpts {
  double rTtl, rPoll;        /* key_version_ttl_ms, key_version_ttl_poll_ms */
  double rSegment;           /* wal_segment_bytes */
  int bKeepBak;              /* wal_keep_bak */
  int bWalSet;               /* a wal_* member was given */
};

#define KV_WAL_SEGMENT_MIN 4096.0
#define KV_WAL_SEGMENT_MAX 1099511627776.0     /* 2^40 */

/* The value of wal_keep_bak: true/false or the numbers 0/1. */
static int kvStoreKeepBak(const char *zType, sqlite3_stmt *pStmt,
                          int *pbKeep){
  if( strcmp(zType, "true")==0 ){ *pbKeep = 1; return 1; }
  if( strcmp(zType, "false")==0 ){ *pbKeep = 0; return 1; }
  if( strcmp(zType, "integer")==0 ){
    sqlite3_int64 v = sqlite3_column_int64(pStmt, 3);
    if( v==0 || v==1 ){ *pbKeep = (int)v; return 1; }
  }
  return 0;
}

/* One row of the options query of kvStoreConfigure into *pO: SQLITE_OK,
** SQLITE_DONE after the last member, or an error. */
static int kvStoreOption(sqlite3_stmt *pStmt, KvStoreOpts *pO, char **pzErr){
  const char *zKey = (const char*)sqlite3_column_text(pStmt, 1);
  const char *zType = (const char*)sqlite3_column_text(pStmt, 2);
  int bNum = zType && (strcmp(zType, "integer")==0 || strcmp(zType, "real")==0);
  if( !sqlite3_column_int(pStmt, 0) ){
    *pzErr = sqlite3_mprintf("kv: store options must be a JSON object such "
                             "as '{\"key_version_ttl_ms\":60000}'");
    return SQLITE_ERROR;
  }
  if( zKey==0 ) return SQLITE_DONE;
  if( strcmp(zKey, "key_version_ttl_ms")==0 && bNum ){
    pO->rTtl = sqlite3_column_double(pStmt, 3);
  }else if( strcmp(zKey, "key_version_ttl_poll_ms")==0 && bNum ){
    pO->rPoll = sqlite3_column_double(pStmt, 3);
  }else if( strcmp(zKey, "wal_segment_bytes")==0 && bNum ){
    pO->rSegment = sqlite3_column_double(pStmt, 3);
    pO->bWalSet = 1;
  }else if( strcmp(zKey, "wal_keep_bak")==0 && zType
         && kvStoreKeepBak(zType, pStmt, &pO->bKeepBak) ){
    pO->bWalSet = 1;
  }else{
    *pzErr = sqlite3_mprintf("kv: unknown store option '%s' or a value of "
        "the wrong type (allowed: key_version_ttl_ms, key_version_ttl_poll_ms, "
        "wal_segment_bytes: numbers; wal_keep_bak: true, false, 0 or 1)",
        zKey);
    return SQLITE_ERROR;
  }
  return SQLITE_OK;
}

/* Reads the current options of pEng into *pO.  Returns whether the store
** has a root WAL. */
static int kvStoreOptsGet(KvEngine *pEng, KvStoreOpts *pO){
  WalConfig cfg;
  int64_t ttl, poll;
  int bWal;
  memset(pO, 0, sizeof(*pO));
  kv_version_options(pEng, &ttl, &poll);
  bWal = kv_engine_wal_config(pEng, &cfg);
  pO->rTtl = (double)ttl;
  pO->rPoll = (double)poll;
  pO->rSegment = (double)cfg.szSegment;
  pO->bKeepBak = cfg.bKeepBak;
  return bWal;
}

/* Checks the WAL members of *pO and applies every option.  Nothing
** changes when any value is refused. */
static int kvStoreOptsApply(KvEngine *pEng, int bWal, const KvStoreOpts *pO,
                            char **pzErr){
  WalConfig cfg;
  int rc;
  if( pO->bWalSet && !bWal ){
    *pzErr = sqlite3_mprintf("kv: wal_segment_bytes and wal_keep_bak need a "
        "store with a root WAL; this store is in memory (give dir=PATH)");
    return SQLITE_ERROR;
  }
  if( pO->bWalSet && !(pO->rSegment>=KV_WAL_SEGMENT_MIN
                       && pO->rSegment<=KV_WAL_SEGMENT_MAX) ){
    *pzErr = sqlite3_mprintf("kv: wal_segment_bytes must be %lld..%lld, "
        "got %g", (long long)KV_WAL_SEGMENT_MIN,
        (long long)KV_WAL_SEGMENT_MAX, pO->rSegment);
    return SQLITE_RANGE;
  }
  rc = kv_version_configure(pEng, pO->rTtl, pO->rPoll, pzErr);
  if( rc==SQLITE_OK && pO->bWalSet ){
    memset(&cfg, 0, sizeof(cfg));
    cfg.szSegment = (int64_t)pO->rSegment;
    cfg.bKeepBak = pO->bKeepBak;
    kv_engine_set_wal_config(pEng, &cfg);
  }
  return rc;
}

/* Apply options JSON {"key_version_ttl_ms":n, ...} (members left out keep
** their value).  Text that is not valid JSON, or not an object, an
** unknown member or a value out of range is an error and changes
** nothing. */
static int kvStoreConfigure(sqlite3 *db, KvEngine *pEng, sqlite3_value *pJson,
                            char **pzErr){
  sqlite3_stmt *pStmt = 0;
  KvStoreOpts o;
  int bWal, rcStep = SQLITE_ROW;
  int rc = sqlite3_prepare_v2(db, "WITH o(ok) AS (SELECT CASE WHEN "
      "json_valid(?1) THEN json_type(?1)='object' ELSE 0 END) "
      "SELECT ok, key, type, value FROM o, json_each(CASE WHEN ok THEN ?1 "
      "ELSE '{}' END) UNION ALL SELECT ok, NULL, NULL, NULL FROM o", -1,
      &pStmt, 0);
  if( rc!=SQLITE_OK ) return rc;
  bWal = kvStoreOptsGet(pEng, &o);
  o.bWalSet = 0;
  sqlite3_bind_value(pStmt, 1, pJson);
  while( rc==SQLITE_OK && (rcStep = sqlite3_step(pStmt))==SQLITE_ROW ){
    rc = kvStoreOption(pStmt, &o, pzErr);
  }
  if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  if( rc==SQLITE_OK && rcStep!=SQLITE_ROW && rcStep!=SQLITE_DONE ){
    *pzErr = sqlite3_mprintf("kv: cannot read the store options: %s",
                             sqlite3_errmsg(db));
    rc = rcStep;
  }
  sqlite3_finalize(pStmt);
  if( rc==SQLITE_OK ) rc = kvStoreOptsApply(pEng, bWal, &o, pzErr);
  return rc;
}

/* The options as JSON text: the WAL members only for a store with a WAL. */
static char *kvStoreOptsJson(KvEngine *pEng){
  KvStoreOpts o;
  int bWal = kvStoreOptsGet(pEng, &o);
  if( !bWal ){
    return sqlite3_mprintf("{\"key_version_ttl_ms\":%lld,"
        "\"key_version_ttl_poll_ms\":%lld}", (long long)o.rTtl,
        (long long)o.rPoll);
  }
  return sqlite3_mprintf("{\"key_version_ttl_ms\":%lld,"
      "\"key_version_ttl_poll_ms\":%lld,\"wal_segment_bytes\":%lld,"
      "\"wal_keep_bak\":%s}", (long long)o.rTtl, (long long)o.rPoll,
      (long long)o.rSegment, o.bKeepBak ? "true" : "false");
}

static void kvStoreOptionsFunc(sqlite3_context *ctx, int argc,
                               sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  KvEngine *pEng = 0;
  char *zErr = 0;
  int bSet = argc>1 && sqlite3_value_type(argv[1])!=SQLITE_NULL;
  int rc = SQLITE_OK;
  /* The options govern how every connection of the process writes the
  ** store (WAL segments, .bak files, version TTL): setting them is a
  ** write, which a read-only connection does not make. */
  if( bSet ){
    rc = kv_conn_writable(sqlite3_context_db_handle(ctx), "kv_store_options",
                          &zErr);
  }
  if( rc==SQLITE_OK ){
    rc = kvStoreArg(pConn, argc>0 ? argv[0] : 0, 1, &pEng, &zErr);
  }
  if( rc==SQLITE_OK && bSet ){
    rc = kvStoreConfigure(sqlite3_context_db_handle(ctx), pEng, argv[1], &zErr);
  }
  if( rc==SQLITE_OK ){
    char *z = kvStoreOptsJson(pEng);
    if( z ) sqlite3_result_text(ctx, z, -1, sqlite3_free);
    else rc = SQLITE_NOMEM;
  }
  if( rc!=SQLITE_OK ) kvVfError(ctx, rc, zErr);
  kv_engine_unref(pEng);
}

/* ------------------------------------------------------ registration --- */

/* The queries create version records and kv_conflicts reads a handle: like
** the kv_* functions they are direct-only (no view or trigger may run
** them).  kv_metrics only reads counters. */
static const KvRowsDef aKvRowsDef[] = {
  { "kv_query_with_version",
    "CREATE TABLE x(value, version TEXT, \"table\" HIDDEN, key HIDDEN, "
    "dir HIDDEN)", 2, 3, 2, SQLITE_VTAB_DIRECTONLY, kvQueryFill },
  { "kv_query_with_versions",
    "CREATE TABLE x(key, value, version TEXT, \"table\" HIDDEN, keys HIDDEN, "
    "dir HIDDEN)", 3, 3, 2, SQLITE_VTAB_DIRECTONLY, kvQueryListFill },
  { "kv_conflicts",
    "CREATE TABLE x(\"table\" TEXT, key, kind TEXT, h HIDDEN)", 3, 1, 1,
    SQLITE_VTAB_DIRECTONLY, kvConflictsFill },
  { "kv_metrics",
    "CREATE TABLE x(name TEXT, labels TEXT, value INTEGER, store TEXT)",
    4, 0, 0, SQLITE_VTAB_INNOCUOUS, kvMetricsFill },
};

/* Module aux data: the definition and the connection (one reference). */
static void kvRowsAuxFree(void *p){
  kv_conn_unref(((void**)p)[1]);
  sqlite3_free(p);
}

static int kvRowsRegister(sqlite3 *db, KvConn *pConn, const KvRowsDef *pDef){
  void **aux = sqlite3_malloc64(2*sizeof(void*));
  if( aux==0 ) return SQLITE_NOMEM;
  aux[0] = (void*)pDef;
  aux[1] = pConn;
  kv_conn_ref(pConn);
  return sqlite3_create_module_v2(db, pDef->zName, &kvRowsModule, aux,
                                  kvRowsAuxFree);
}

static const struct {
  const char *zName;
  int nArg;
  void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
} aKvVFunc[] = {
  { "kv_prepare_with_version", 2, kvPrepareVFunc },
  { "kv_commit_with_version",  1, kvCommitVFunc },
  { "kv_store_options",        0, kvStoreOptionsFunc },
  { "kv_store_options",        1, kvStoreOptionsFunc },
  { "kv_store_options",        2, kvStoreOptionsFunc },
};

int kv_vfunc_register(sqlite3 *db, KvConn *pConn){
  size_t i;
  int rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<sizeof(aKvVFunc)/sizeof(aKvVFunc[0]); i++){
    kv_conn_ref(pConn);
    rc = sqlite3_create_function_v2(db, aKvVFunc[i].zName, aKvVFunc[i].nArg,
        SQLITE_UTF8|SQLITE_DIRECTONLY, pConn, aKvVFunc[i].xFunc, 0, 0,
        kv_conn_unref);
  }
  for(i=0; rc==SQLITE_OK && i<sizeof(aKvRowsDef)/sizeof(aKvRowsDef[0]); i++){
    rc = kvRowsRegister(db, pConn, &aKvRowsDef[i]);
  }
  return rc;
}
