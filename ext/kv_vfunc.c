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
** The four tables are listings (ext/listing.h): eponymous, read-only, their
** rows computed at once by the vfunc*Rows producers here (a handful at
** most, or one per key asked for).  The queries and kv_conflicts are
** direct-only, kv_metrics innocuous; the functions are direct-only.  Every
** function and listing holds a reference to the connection's KvConn
** (ext/kv_conn.c), where the handles live.  The rules of the protocol are
** in ext/kv/version.h; the SQL forms are documented in docs/SQL.md.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
#include "ext/listing.h"
#include "ext/kv/kv.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- helpers --- */

/* The handle with integer id in pArg, or NULL with *pzErr set and *pRc
** the code: SQLITE_MISMATCH for a value that is no integer (as the kv_*
** scalar functions give), SQLITE_ERROR for an unknown or finished one. */
static KvHandle *vfuncHandle(KvConn *pConn, sqlite3_value *pArg,
                             KvHandle ***pppPrev, int *pRc, char **pzErr){
  KvHandle *h;
  sqlite3_int64 id;
  *pRc = SQLITE_OK;
  if( pArg==0 || !depot_value_int64(pArg, &id) ){
    *pzErr = sqlite3_mprintf("kv: transaction handle must be an integer "
        "from kv_begin(), got %s", pArg ? kv_value_type_name(pArg) : "NULL");
    *pRc = SQLITE_MISMATCH;
    return 0;
  }
  h = kv_conn_handle(pConn, id, pppPrev, pzErr);
  if( h==0 ) *pRc = SQLITE_ERROR;
  return h;
}

/* ------------------------------------------------ kv_query_with_version --- */

static int vfuncQueryRows(DepotRows *pRows, sqlite3_value **apArg,
                          char **pzErr){
  KvConn *pConn = (KvConn*)pRows->pAux;
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
  if( rc==SQLITE_OK ) rc = kv_conn_store_arg(pConn, apArg[2], 1, &pEng, pzErr);
  if( rc==SQLITE_OK ){
    rc = kv_version_query(pEng, (const char*)sqlite3_value_text(apArg[0]),
                          sqlite3_value_bytes(apArg[0]), k.a, k.n, &v,
                          &bFound, aVer, pzErr);
  }
  if( rc==SQLITE_OK ){
    kv_version_text(aVer, zVer);
    rc = bFound ? depot_rows_cell(pRows, DEPOT_CELL_VALUE, 0, v.a, v.n)
                : depot_rows_null(pRows);
    if( rc==SQLITE_OK ) rc = depot_rows_text(pRows, zVer);
  }
  kv_metric_add(rc==SQLITE_OK ? KV_METRIC_QUERY_OK : KV_METRIC_QUERY_FAIL);
  kv_engine_unref(pEng);
  kv_buf_free(&k);
  kv_buf_free(&v);
  return rc;
}

/* ----------------------------------------------- kv_query_with_versions --- */

typedef struct VfuncQueryListArg VfuncQueryListArg;
struct VfuncQueryListArg {
  DepotRows *pRows;
  const KvKeyList *pList;
};

/* One row; a key the list gave as a JSON integer is an integer cell (the
** same value the key's bytes decode to, without decoding them). */
static int vfuncQueryListRow(void *pArg, int iKey, const uint8_t *aKey,
                             int nKey, const uint8_t *aVal, int nVal,
                             const uint8_t *aVer){
  VfuncQueryListArg *pA = (VfuncQueryListArg*)pArg;
  DepotRows *pRows = pA->pRows;
  int bInt = pA->pList->abInt[iKey];
  char zVer[KV_VERSION_TEXT+1];
  int rc = depot_rows_room(pRows, 3, (bInt ? 0 : nKey+1) + (aVal ? nVal+1 : 0)
                           + KV_VERSION_TEXT+1);
  if( rc!=SQLITE_OK ) return rc;
  if( bInt ) depot_rows_put(pRows, DEPOT_CELL_INT, pA->pList->aInt[iKey], 0, 0);
  else depot_rows_put(pRows, DEPOT_CELL_KEY, 0, aKey, nKey);
  if( aVal ) depot_rows_put(pRows, DEPOT_CELL_VALUE, 0, aVal, nVal);
  else depot_rows_put(pRows, DEPOT_CELL_NULL, 0, 0, 0);
  kv_version_text(aVer, zVer);
  depot_rows_put(pRows, DEPOT_CELL_TEXT, 0, zVer, KV_VERSION_TEXT);
  return SQLITE_OK;
}

static int vfuncQueryListRows(DepotRows *pRows, sqlite3_value **apArg,
                              char **pzErr){
  KvConn *pConn = (KvConn*)pRows->pAux;
  KvKeyList list;
  VfuncQueryListArg arg;
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
  if( rc==SQLITE_OK ) rc = kv_conn_store_arg(pConn, apArg[2], 1, &pEng, pzErr);
  if( rc==SQLITE_OK && list.n>0 && list.n<(1<<20) ){
    /* room for every row's cells and version text at once (values and
    ** non-integer keys may grow the data further) */
    rc = depot_rows_room(pRows, 3*list.n, list.n*(KV_VERSION_TEXT+1+16));
  }
  if( rc==SQLITE_OK ){
    rc = kv_version_query_list(pEng, (const char*)sqlite3_value_text(apArg[0]),
                               sqlite3_value_bytes(apArg[0]), &list,
                               vfuncQueryListRow, &arg, pzErr);
  }
  kv_metric_add(rc==SQLITE_OK ? KV_METRIC_QUERY_OK : KV_METRIC_QUERY_FAIL);
  kv_engine_unref(pEng);
  kv_keylist_free(&list);
  return rc;
}

/* ------------------------------------------------------- kv_conflicts --- */

static int vfuncConflictsRows(DepotRows *pRows, sqlite3_value **apArg,
                              char **pzErr){
  KvConn *pConn = (KvConn*)pRows->pAux;
  int i, n, rc;
  KvHandle *h = vfuncHandle(pConn, apArg[0], 0, &rc, pzErr);
  const KvConflict *a;
  if( h==0 ) return rc;
  n = kv_root_conflicts(h->pRoot, &a);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    int bMeta = strcmp(a[i].zTable, KV_META_TABLE)==0;
    rc = bMeta
       ? depot_rows_cell(pRows, DEPOT_CELL_TEXT, 0, a[i].aKey, a[i].nKey)
       : depot_rows_cell(pRows, DEPOT_CELL_TEXT, 0, a[i].zTable, a[i].nTable);
    if( rc==SQLITE_OK ){
      rc = bMeta
         ? depot_rows_null(pRows)
         : depot_rows_cell(pRows, DEPOT_CELL_KEY, 0, a[i].aKey, a[i].nKey);
    }
    if( rc==SQLITE_OK ){
      rc = depot_rows_text(pRows, a[i].eKind==KV_CONFLICT_VERSION
                           ? "version_mismatch" : "transaction_conflict");
    }
  }
  return rc;
}

/* --------------------------------------------------------- kv_metrics --- */

static int vfuncMetricRow(DepotRows *p, const char *zName, const char *zLabels,
                          sqlite3_int64 v, const char *zStore){
  int rc = depot_rows_text(p, zName);
  if( rc==SQLITE_OK ) rc = depot_rows_text(p, zLabels);
  if( rc==SQLITE_OK ) rc = depot_rows_int(p, v);
  if( rc==SQLITE_OK ) rc = depot_rows_text(p, zStore);
  return rc;
}

static int vfuncMetricsTables(DepotRows *p){
  KvTableInfo *a = 0;
  int i, n = 0, rc = kv_engine_list(&a, &n);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    KvBuf lab = {0, 0, 0};
    rc = kv_buf_append(&lab, "{\"table\":", 9);
    if( rc==SQLITE_OK ){
      rc = kv_json_text(&lab, (uint8_t*)a[i].zName, a[i].nName);
    }
    if( rc==SQLITE_OK ) rc = kv_buf_append(&lab, "}", 2);   /* with NUL */
    if( rc==SQLITE_OK ){
      rc = vfuncMetricRow(p, "key_version_cache_record_count", (char*)lab.a,
                          a[i].nVerRecord, a[i].zDir);
    }
    if( rc==SQLITE_OK ){
      rc = vfuncMetricRow(p, "key_version_cache_estimated_memory_bytes",
                          (char*)lab.a, a[i].nVerBytes, a[i].zDir);
    }
    kv_buf_free(&lab);
  }
  kv_engine_list_free(a, n);
  return rc;
}

/* The process-wide counters, in row order: name, labels, index into the
** array kv_metrics_read fills (KV_METRIC_N and KV_METRIC_N+1: transactions
** created and closed). */
static const struct {
  const char *zName;
  const char *zLabels;
  int iMetric;
} aVfuncMetric[] = {
  { "key_version_query_calls", "{\"result\":\"success\"}",
    KV_METRIC_QUERY_OK },
  { "key_version_query_calls", "{\"result\":\"failure\"}",
    KV_METRIC_QUERY_FAIL },
  { "key_version_2pc_calls", "{\"phase\":\"prepare\",\"result\":\"success\"}",
    KV_METRIC_PREPARE_OK },
  { "key_version_2pc_calls", "{\"phase\":\"prepare\",\"result\":\"failure\"}",
    KV_METRIC_PREPARE_FAIL },
  { "key_version_2pc_calls", "{\"phase\":\"commit\",\"result\":\"success\"}",
    KV_METRIC_COMMIT_OK },
  { "key_version_2pc_calls", "{\"phase\":\"commit\",\"result\":\"failure\"}",
    KV_METRIC_COMMIT_FAIL },
  { "transaction_lifecycle", "{\"event\":\"created\"}", KV_METRIC_N },
  { "transaction_lifecycle", "{\"event\":\"closed\"}", KV_METRIC_N+1 },
};

static int vfuncMetricsRows(DepotRows *p, sqlite3_value **apArg,
                            char **pzErr){
  int64_t a[KV_METRIC_N+2];
  size_t i;
  int rc;
  (void)apArg; (void)pzErr;
  kv_metrics_read(a);
  rc = vfuncMetricsTables(p);
  for(i=0; rc==SQLITE_OK && i<sizeof(aVfuncMetric)/sizeof(aVfuncMetric[0]);
      i++){
    rc = vfuncMetricRow(p, aVfuncMetric[i].zName, aVfuncMetric[i].zLabels,
                        a[aVfuncMetric[i].iMetric], 0);
  }
  return rc;
}

/* ------------------------------------------- kv_prepare_with_version --- */

static void vfuncPrepare(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  KvReadSet set;
  char *zErr = 0;
  int rc, bNoMem = 0;
  KvHandle *h = vfuncHandle(pConn, argv[0], 0, &rc, &zErr);
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
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else sqlite3_result_int(ctx, 1);
}

/* ----------------------------------------------- kv_commit_with_version --- */

/* The JSON text every receipt of one table starts with, rendered once
** per run of that table's receipts: '{"table":<name>,"key":'. */
typedef struct VfuncReceiptHead VfuncReceiptHead;
struct VfuncReceiptHead {
  const char *zTab;          /* the table it was rendered for */
  KvBuf json;
};

/* Append receipt r as JSON to p (a comma first unless bFirst): the head
** of its table, its key, then the version and op written straight from
** the version bytes into one tail. */
static int vfuncReceiptJson(KvBuf *p, const KvVerReceipt *r, int bFirst,
                            VfuncReceiptHead *pHead){
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

static void vfuncCommit(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  KvHandle **pp = 0;
  KvVerReceipts *pR = 0;
  KvBuf out = {0, 0, 0};
  VfuncReceiptHead head = {0, {0, 0, 0}};
  char *zErr = 0;
  int i, rc;
  KvHandle *h = vfuncHandle(pConn, argv[0], &pp, &rc, &zErr);
  (void)argc;
  if( rc==SQLITE_OK ) rc = kv_version_commit(h->pRoot, &pR, &zErr);
  kv_metric_add(rc==SQLITE_OK ? KV_METRIC_COMMIT_OK : KV_METRIC_COMMIT_FAIL);
  if( h && kv_root_state(h->pRoot)==KV_ROOT_DONE ){
    kv_conn_handle_drop(pp);             /* finished: the handle goes */
  }
  if( rc==SQLITE_OK ) rc = kv_buf_append(&out, "[", 1);
  for(i=0; rc==SQLITE_OK && i<pR->n; i++){
    rc = vfuncReceiptJson(&out, &pR->a[i], i==0, &head);
  }
  if( rc==SQLITE_OK ) rc = kv_buf_append(&out, "]", 1);
  if( rc==SQLITE_OK ){
    /* The buffer is an sqlite3_malloc64 allocation: hand it over. */
    sqlite3_result_text(ctx, (const char*)out.a, out.n, sqlite3_free);
    out.a = 0;
  }else{
    kv_sql_error(ctx, rc, zErr);
  }
  kv_version_receipts_free(pR);
  kv_buf_free(&head.json);
  kv_buf_free(&out);
}

/* ---------------------------------------------------- kv_store_options --- */

/* The store options being read or changed: the two TTL values of the key
** versions (kv_version_configure) and the root WAL's configuration. */
typedef struct VfuncStoreOpts VfuncStoreOpts;
struct VfuncStoreOpts {
  double rTtl, rPoll;        /* key_version_ttl_ms, key_version_ttl_poll_ms */
  double rSegment;           /* wal_segment_bytes */
  int bKeepBak;              /* wal_keep_bak */
  int bWalSet;               /* a wal_* member was given */
};

#define KV_WAL_SEGMENT_MIN 4096.0
#define KV_WAL_SEGMENT_MAX 1099511627776.0     /* 2^40 */

/* The value of wal_keep_bak: true/false or the numbers 0/1. */
static int vfuncStoreKeepBak(const char *zType, sqlite3_stmt *pStmt,
                             int *pbKeep){
  if( strcmp(zType, "true")==0 ){ *pbKeep = 1; return 1; }
  if( strcmp(zType, "false")==0 ){ *pbKeep = 0; return 1; }
  if( strcmp(zType, "integer")==0 ){
    sqlite3_int64 v = sqlite3_column_int64(pStmt, 3);
    if( v==0 || v==1 ){ *pbKeep = (int)v; return 1; }
  }
  return 0;
}

/* One row of the options query of vfuncStoreConfigure into *pO: SQLITE_OK,
** SQLITE_DONE after the last member, or an error. */
static int vfuncStoreOption(sqlite3_stmt *pStmt, VfuncStoreOpts *pO,
                            char **pzErr){
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
         && vfuncStoreKeepBak(zType, pStmt, &pO->bKeepBak) ){
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
static int vfuncStoreOptsGet(KvEngine *pEng, VfuncStoreOpts *pO){
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
static int vfuncStoreOptsApply(KvEngine *pEng, int bWal,
                               const VfuncStoreOpts *pO, char **pzErr){
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
static int vfuncStoreConfigure(sqlite3 *db, KvEngine *pEng,
                               sqlite3_value *pJson, char **pzErr){
  sqlite3_stmt *pStmt = 0;
  VfuncStoreOpts o;
  int bWal, rcStep = SQLITE_ROW;
  int rc = sqlite3_prepare_v2(db, "WITH o(ok) AS (SELECT CASE WHEN "
      "json_valid(?1) THEN json_type(?1)='object' ELSE 0 END) "
      "SELECT ok, key, type, value FROM o, json_each(CASE WHEN ok THEN ?1 "
      "ELSE '{}' END) UNION ALL SELECT ok, NULL, NULL, NULL FROM o", -1,
      &pStmt, 0);
  if( rc!=SQLITE_OK ) return rc;
  bWal = vfuncStoreOptsGet(pEng, &o);
  o.bWalSet = 0;
  sqlite3_bind_value(pStmt, 1, pJson);
  while( rc==SQLITE_OK && (rcStep = sqlite3_step(pStmt))==SQLITE_ROW ){
    rc = vfuncStoreOption(pStmt, &o, pzErr);
  }
  if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  if( rc==SQLITE_OK && rcStep!=SQLITE_ROW && rcStep!=SQLITE_DONE ){
    *pzErr = sqlite3_mprintf("kv: cannot read the store options: %s",
                             sqlite3_errmsg(db));
    rc = rcStep;
  }
  sqlite3_finalize(pStmt);
  if( rc==SQLITE_OK ) rc = vfuncStoreOptsApply(pEng, bWal, &o, pzErr);
  return rc;
}

/* The options as JSON text: the WAL members only for a store with a WAL. */
static char *vfuncStoreOptsJson(KvEngine *pEng){
  VfuncStoreOpts o;
  int bWal = vfuncStoreOptsGet(pEng, &o);
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

static void vfuncStoreOptions(sqlite3_context *ctx, int argc,
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
    rc = kv_conn_store_arg(pConn, argc>0 ? argv[0] : 0, 1, &pEng, &zErr);
  }
  if( rc==SQLITE_OK && bSet ){
    rc = vfuncStoreConfigure(sqlite3_context_db_handle(ctx), pEng, argv[1],
                             &zErr);
  }
  if( rc==SQLITE_OK ){
    char *z = vfuncStoreOptsJson(pEng);
    if( z ) sqlite3_result_text(ctx, z, -1, sqlite3_free);
    else rc = SQLITE_NOMEM;
  }
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  kv_engine_unref(pEng);
}

/* ------------------------------------------------------ registration --- */

/* The queries create version records and kv_conflicts reads a handle: like
** the kv_* functions they are direct-only (no view or trigger may run
** them).  kv_metrics only reads counters. */
static const DepotListingCol aQueryCol[] = {
  DEPOT_COLUMN("value", 0), DEPOT_COLUMN("version", "TEXT"),
  DEPOT_ARGUMENT("\"table\""), DEPOT_ARGUMENT("key"), DEPOT_ARGUMENT("dir"),
};
static const DepotListingCol aQueryListCol[] = {
  DEPOT_COLUMN("key", 0), DEPOT_COLUMN("value", 0),
  DEPOT_COLUMN("version", "TEXT"),
  DEPOT_ARGUMENT("\"table\""), DEPOT_ARGUMENT("keys"), DEPOT_ARGUMENT("dir"),
};
static const DepotListingCol aConflictsCol[] = {
  DEPOT_COLUMN("\"table\"", "TEXT"), DEPOT_COLUMN("key", 0),
  DEPOT_COLUMN("kind", "TEXT"), DEPOT_ARGUMENT("h"),
};
static const DepotListingCol aMetricsCol[] = {
  DEPOT_COLUMN("name", "TEXT"), DEPOT_COLUMN("labels", "TEXT"),
  DEPOT_COLUMN("value", "INTEGER"), DEPOT_COLUMN("store", "TEXT"),
};
static const DepotListing aVfuncListing[] = {
  { "kv_query_with_version", 5, aQueryCol, 2, SQLITE_VTAB_DIRECTONLY,
    10.0, 0, vfuncQueryRows },
  { "kv_query_with_versions", 6, aQueryListCol, 2, SQLITE_VTAB_DIRECTONLY,
    10.0, 0, vfuncQueryListRows },
  { "kv_conflicts", 4, aConflictsCol, 1, SQLITE_VTAB_DIRECTONLY,
    10.0, 0, vfuncConflictsRows },
  { "kv_metrics", 4, aMetricsCol, 0, SQLITE_VTAB_INNOCUOUS,
    10.0, 0, vfuncMetricsRows },
};

static const struct {
  const char *zName;
  int nArg;
  void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
} aVfunc[] = {
  { "kv_prepare_with_version", 2, vfuncPrepare },
  { "kv_commit_with_version",  1, vfuncCommit },
  { "kv_store_options",        0, vfuncStoreOptions },
  { "kv_store_options",        1, vfuncStoreOptions },
  { "kv_store_options",        2, vfuncStoreOptions },
};

/* The functions and listings each hold a reference to the KvConn. */
static int vfuncConnection(sqlite3 *db, KvConn *pConn){
  size_t i;
  int rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<sizeof(aVfunc)/sizeof(aVfunc[0]); i++){
    kv_conn_ref(pConn);
    rc = sqlite3_create_function_v2(db, aVfunc[i].zName, aVfunc[i].nArg,
        SQLITE_UTF8|SQLITE_DIRECTONLY, pConn, aVfunc[i].xFunc, 0, 0,
        kv_conn_unref);
  }
  for(i=0; rc==SQLITE_OK && i<sizeof(aVfuncListing)/sizeof(aVfuncListing[0]);
      i++){
    kv_conn_ref(pConn);
    rc = depot_listing_register(db, &aVfuncListing[i], pConn, kv_conn_unref);
  }
  return rc;
}

const DepotComponent depotKvVfuncComponent = {
  "kv: cannot register the KV functions", 0, vfuncConnection
};
