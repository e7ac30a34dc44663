/*
** kv_func.c -- explicit KV transaction handles as SQL functions:
**
**   kv_begin([dir])                      -> handle (integer)
**   kv_get(h, table, key)                -> value or NULL
**   kv_put(h, table, key, value)         -> 1 (with the table's deadline)
**   kv_delete(h, table, key)             -> old value or NULL
**   kv_prepare(h) / kv_commit(h) / kv_rollback(h)  -> 1
**   kv_prepare(h, gid)                   -> 1: prepared in doubt, the
**                                           handle ends (kv_prepared.c)
**   kv_try_commit(h)                     -> NULL, or the conflicts as JSON
**   kv_table_meta(h, table)              -> JSON text or NULL
**   kv_create_table(h, table, type[, options_json]) -> 1 created, 0 existed
**   kv_remove_table(h, table)            -> 1
**
** A handle is one root transaction owned by the connection that began it;
** handles still open when the connection closes are rolled back.  An
** unknown, finished or other connection's handle is an error.  Every
** function is SQLITE_DIRECTONLY: none can run from a trigger or a view.
** On a connection whose main database was opened read-only the functions
** that write fail with SQLITE_READONLY, and kv_begin creates no store: its
** handle only reads (kv_conn_writable).  PRAGMA query_only governs SQL
** statements, as in SQLite, not these functions' side effects.
**
** The handles live in the connection's KvConn (ext/kv_conn.c), which every
** function gets as its user data.  Errors: sqlite3_result_error with a
** "kv: ..." message and the engine's code (kv_sql_error).
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* ----------------------------------------------------------- helpers --- */

/* The handle argument: its KvHandle, or NULL with the error set. */
static KvHandle *funcHandleArg(sqlite3_context *ctx, sqlite3_value *pArg,
                               KvHandle ***pppPrev){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  KvHandle *h;
  sqlite3_int64 id;
  char *zErr = 0;
  if( !depot_value_int64(pArg, &id) ){
    kv_sql_error(ctx, SQLITE_MISMATCH, sqlite3_mprintf(
        "kv: transaction handle must be an integer from kv_begin(), got %s",
        kv_value_type_name(pArg)));
    return 0;
  }
  h = kv_conn_handle(pConn, id, pppPrev, &zErr);
  if( h==0 ) kv_sql_error(ctx, SQLITE_ERROR, zErr);
  return h;
}

/* The handle argument, if its transaction still takes operations (also a
** prepared one when bPreparedOk): else NULL with an error that names the
** handle the caller holds and how to end it. */
static KvHandle *funcHandleActive(sqlite3_context *ctx, sqlite3_value *pArg,
                                  KvHandle ***pppPrev, int bPreparedOk){
  KvHandle *h = funcHandleArg(ctx, pArg, pppPrev);
  int bNoMem = 0;
  char *zErr = h ? kv_handle_unusable(h, bPreparedOk, &bNoMem) : 0;
  if( zErr==0 && !bNoMem ) return h;
  kv_sql_error(ctx, bNoMem ? SQLITE_NOMEM : SQLITE_MISUSE, zErr);
  return 0;
}

/* kv_conn_writable for SQL function zFunc: 1 if it may write, else 0 with
** the error set on ctx. */
static int funcWritable(sqlite3_context *ctx, const char *zFunc){
  char *zErr = 0;
  int rc = kv_conn_writable(sqlite3_context_db_handle(ctx), zFunc, &zErr);
  if( rc==SQLITE_OK ) return 1;
  kv_sql_error(ctx, rc, zErr);
  return 0;
}

/* A table-name argument: text, not NULL. */
static int funcNameArg(sqlite3_context *ctx, sqlite3_value *pArg,
                       const char **pz, int *pn){
  if( sqlite3_value_type(pArg)!=SQLITE_TEXT ){
    kv_sql_error(ctx, SQLITE_MISMATCH, sqlite3_mprintf(
        "kv: table name must be text, got %s", kv_value_type_name(pArg)));
    return 0;
  }
  *pz = (const char*)sqlite3_value_text(pArg);
  *pn = sqlite3_value_bytes(pArg);
  if( *pz==0 ){ sqlite3_result_error_nomem(ctx); return 0; }
  return 1;
}

/* A key argument, encoded into *pKey; 0 with the error set on failure. */
static int funcKeyArg(sqlite3_context *ctx, sqlite3_value *pArg, KvBuf *pKey){
  char *zErr = 0;
  int rc = kv_key_encode(pArg, pKey, &zErr);
  if( rc!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return 0;
  }
  return 1;
}

/* ------------------------------------------------------------ begin --- */

static void funcBegin(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  const char *zDir = 0;
  KvEngine *pEng = 0;
  KvHandle *h = 0;
  char *zErr = 0;
  int rc = SQLITE_OK;
  if( argc==1 && sqlite3_value_type(argv[0])!=SQLITE_NULL ){
    if( sqlite3_value_type(argv[0])!=SQLITE_TEXT ){
      kv_sql_error(ctx, SQLITE_MISMATCH, sqlite3_mprintf(
          "kv: store directory must be text, got %s",
          kv_value_type_name(argv[0])));
      return;
    }
    zDir = (const char*)sqlite3_value_text(argv[0]);
    if( zDir && (int)strlen(zDir)!=sqlite3_value_bytes(argv[0]) ){
      kv_sql_error(ctx, SQLITE_ERROR, sqlite3_mprintf(
          "kv: store directory must not contain NUL"));
      return;
    }
  }
  if( kv_conn_readonly(pConn->db) ){
    rc = kv_conn_store_readonly(pConn, zDir, &pEng, &zErr);
  }else{
    rc = kv_conn_store(pConn, zDir, 0, &pEng, &zErr);
  }
  if( rc==SQLITE_OK && (h = sqlite3_malloc64(sizeof(*h)))==0 ){
    rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = kv_root_begin(pEng, &h->pRoot);
  kv_engine_unref(pEng);                 /* the root holds its own */
  if( rc!=SQLITE_OK ){
    sqlite3_free(h);
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  h->id = ++pConn->iLastHandle;
  kv_root_set_handle(h->pRoot, h->id);
  h->pNext = pConn->pHandle;
  pConn->pHandle = h;
  sqlite3_result_int64(ctx, h->id);
}

/* ------------------------------------------------- reads and writes --- */

static void funcGet(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvHandle *h = funcHandleActive(ctx, argv[0], 0, 0);
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  const char *zTab;
  char *zErr = 0;
  int nTab, bFound = 0, rc;
  (void)argc;
  if( h==0 || !funcNameArg(ctx, argv[1], &zTab, &nTab) ) return;
  if( !funcKeyArg(ctx, argv[2], &k) ) return;
  rc = kv_get(kv_root_engine(h->pRoot), h->pRoot, zTab, nTab, k.a, k.n, &v,
              &bFound, &zErr);
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else if( bFound ) kv_value_result(ctx, v.a, v.n);
  kv_buf_free(&k);
  kv_buf_free(&v);
}

static void funcPut(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvHandle *h = funcHandleActive(ctx, argv[0], 0, 0);
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  const char *zTab;
  char *zErr = 0;
  int nTab, rc;
  (void)argc;
  if( h==0 || !funcWritable(ctx, "kv_put") ) return;
  if( !funcNameArg(ctx, argv[1], &zTab, &nTab) ) return;
  if( !funcKeyArg(ctx, argv[2], &k) ) return;
  rc = kv_value_encode(argv[2], argv[3], &v, &zErr);
  if( rc==SQLITE_OK ){
    int bTtl = 0;
    rc = kv_ttl_stamp((KvConn*)sqlite3_user_data(ctx), h->pRoot, zTab, nTab,
                      argv[2], argv[3], &v, &bTtl, &zErr);
  }
  if( rc==SQLITE_OK ){
    rc = kv_derived_write((KvConn*)sqlite3_user_data(ctx), h->pRoot, zTab,
                          nTab, k.a, k.n, v.a, v.n, 0, KV_DERIVED_OLD_UNKNOWN,
                          0, 0, &zErr);
  }
  if( rc==SQLITE_OK ){
    rc = kv_put(h->pRoot, zTab, nTab, k.a, k.n, v.a, v.n, &zErr);
  }
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else sqlite3_result_int(ctx, 1);
  kv_buf_free(&k);
  kv_buf_free(&v);
}

static void funcDelete(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvHandle *h = funcHandleActive(ctx, argv[0], 0, 0);
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  const char *zTab;
  char *zErr = 0;
  int nTab, bFound = 0, rc;
  (void)argc;
  if( h==0 || !funcWritable(ctx, "kv_delete") ) return;
  if( !funcNameArg(ctx, argv[1], &zTab, &nTab) ) return;
  if( !funcKeyArg(ctx, argv[2], &k) ) return;
  rc = kv_peek(h->pRoot, zTab, nTab, k.a, k.n, &v, &bFound, &zErr);
  if( rc==SQLITE_OK ){
    rc = kv_derived_write((KvConn*)sqlite3_user_data(ctx), h->pRoot, zTab,
                          nTab, k.a, k.n, 0, 0, 1, bFound ? KV_DERIVED_OLD_GIVEN
                          : KV_DERIVED_OLD_ABSENT, v.a, v.n, &zErr);
  }
  if( rc==SQLITE_OK ) rc = kv_del(h->pRoot, zTab, nTab, k.a, k.n, &zErr);
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else if( bFound && !kv_value_expired(v.a, v.n, kv_clock_ms()) ){
    kv_value_result(ctx, v.a, v.n);  /* an expired row was not there */
  }
  kv_buf_free(&k);
  kv_buf_free(&v);
}

/* ------------------------------------------------------ termination --- */

/* kv_prepare(h): prepared, the handle goes on (kv_commit/kv_rollback end
** it).  kv_prepare(h, gid): prepared under gid, in doubt; the store takes
** the transaction over and the handle ends (kv_prepared.c resolves it). */
static void funcPrepare(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvHandle **pp = 0;
  KvHandle *h = funcHandleActive(ctx, argv[0], &pp, 0);
  char *zErr = 0;
  int rc;
  if( h==0 ) return;
  if( argc>1 ){
    if( sqlite3_value_type(argv[1])!=SQLITE_TEXT ){
      kv_sql_error(ctx, SQLITE_RANGE, sqlite3_mprintf("kv: a gid must be "
          "text of 1..%d bytes, got %s", KV_GID_MAX_BYTES,
          kv_value_type_name(argv[1])));
      return;
    }
    if( !funcWritable(ctx, "kv_prepare") ) return;
    rc = kv_root_prepare_named(&h->pRoot,
                               (const char*)sqlite3_value_text(argv[1]),
                               sqlite3_value_bytes(argv[1]), &zErr);
    if( rc!=SQLITE_OK ){
      kv_sql_error(ctx, rc, zErr);
      return;
    }
    kv_conn_handle_drop(pp);
    sqlite3_result_int(ctx, 1);
    return;
  }
  rc = kv_root_prepare(h->pRoot, &zErr);
  rc = kv_derived_prepare_error((KvConn*)sqlite3_user_data(ctx), h->pRoot,
                                rc, &zErr);
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else sqlite3_result_int(ctx, 1);
}

static void funcCommit(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvHandle **pp = 0;
  KvHandle *h = funcHandleActive(ctx, argv[0], &pp, 1);
  char *zErr = 0;
  int rc;
  (void)argc;
  if( h==0 ) return;
  rc = kv_root_commit(h->pRoot, &zErr);
  rc = kv_derived_prepare_error((KvConn*)sqlite3_user_data(ctx), h->pRoot,
                                rc, &zErr);
  if( rc!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  kv_conn_handle_drop(pp);
  sqlite3_result_int(ctx, 1);
}

/* Blob a (n bytes) as the text x'..' in full (sqlite3_malloc'd, NULL on
** OOM). */
static char *funcBlobLiteral(const unsigned char *a, int n){
  static const char aHex[] = "0123456789abcdef";
  char *z = sqlite3_malloc64((sqlite3_uint64)n*2 + 4);
  int i;
  if( z==0 ) return 0;
  z[0] = 'x';
  z[1] = '\'';
  for(i=0; i<n; i++){
    z[2+i*2] = aHex[a[i]>>4];
    z[3+i*2] = aHex[a[i]&0xf];
  }
  z[2+n*2] = '\'';
  z[3+n*2] = 0;
  return z;
}

/* Bind conflict c as ?2 (table) and ?3 (key: its value, a blob as the text
** x'..', NULL for a table created or removed concurrently).  Returns the
** decoded key, which must stay alive until the statement is reset. */
static sqlite3_value *funcBindConflict(sqlite3_stmt *pStmt,
                                       const KvConflict *c){
  sqlite3_value *pKey = 0;
  int rc = SQLITE_OK;
  if( strcmp(c->zTable, KV_META_TABLE)==0 ){
    sqlite3_bind_text(pStmt, 2, (const char*)c->aKey, c->nKey, SQLITE_STATIC);
    sqlite3_bind_null(pStmt, 3);
    return 0;
  }
  sqlite3_bind_text(pStmt, 2, c->zTable, c->nTable, SQLITE_STATIC);
  pKey = kv_key_to_value(c->aKey, c->nKey, 0, 0, &rc);
  if( pKey && sqlite3_value_type(pKey)!=SQLITE_BLOB ){
    sqlite3_bind_value(pStmt, 3, pKey);
  }else if( pKey ){
    sqlite3_bind_text(pStmt, 3, funcBlobLiteral(sqlite3_value_blob(pKey),
                      sqlite3_value_bytes(pKey)), -1, sqlite3_free);
  }else{
    sqlite3_bind_text(pStmt, 3, kv_key_describe(c->aKey, c->nKey), -1,
                      sqlite3_free);
  }
  return pKey;
}

/* JSON array of the conflicts of h's failed prepare: [{"table":t,"key":k}]
** with key null when the table itself was created or removed. */
static int funcConflictJson(sqlite3_context *ctx, KvRoot *pRoot){
  const KvConflict *a;
  sqlite3_stmt *pStmt = 0;
  char *zAcc = sqlite3_mprintf("[]");
  int n = kv_root_conflicts(pRoot, &a);
  int i, rc = sqlite3_prepare_v2(sqlite3_context_db_handle(ctx),
      "SELECT json_insert(?1, '$[#]', json_object('table', ?2, 'key', ?3))",
      -1, &pStmt, 0);
  for(i=0; rc==SQLITE_OK && zAcc && i<n; i++){
    sqlite3_value *pKey = funcBindConflict(pStmt, &a[i]);
    sqlite3_bind_text(pStmt, 1, zAcc, -1, SQLITE_STATIC);
    if( sqlite3_step(pStmt)==SQLITE_ROW ){
      char *zNew = sqlite3_mprintf("%s", sqlite3_column_text(pStmt, 0));
      sqlite3_free(zAcc);
      zAcc = zNew;
    }
    rc = sqlite3_reset(pStmt);
    sqlite3_value_free(pKey);
  }
  sqlite3_finalize(pStmt);
  if( zAcc==0 && rc==SQLITE_OK ) rc = SQLITE_NOMEM;
  if( rc==SQLITE_OK ) sqlite3_result_text(ctx, zAcc, -1, sqlite3_free);
  else sqlite3_free(zAcc);
  return rc;
}

static void funcTryCommit(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  KvHandle **pp = 0;
  KvHandle *h = funcHandleArg(ctx, argv[0], &pp);
  char *zErr = 0;
  int rc;
  (void)argc;
  if( h==0 ) return;
  if( kv_root_state(h->pRoot)==KV_ROOT_FAILED ){
    /* Rolled back by an earlier failure: an error, and the handle ends. */
    kv_sql_error(ctx, SQLITE_MISUSE, sqlite3_mprintf("kv: transaction handle "
        "%lld failed and was rolled back: nothing to commit", h->id));
    kv_conn_handle_drop(pp);
    return;
  }
  rc = kv_root_commit(h->pRoot, &zErr);
  if( rc==SQLITE_BUSY_SNAPSHOT ){
    sqlite3_free(zErr);
    zErr = 0;
    rc = funcConflictJson(ctx, h->pRoot);
  }
  if( rc!=SQLITE_OK && kv_root_state(h->pRoot)!=KV_ROOT_FAILED ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else sqlite3_free(zErr);
  kv_conn_handle_drop(pp);
}

static void funcRollback(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvHandle **pp = 0;
  KvHandle *h = funcHandleArg(ctx, argv[0], &pp);
  char *zErr = 0;
  int rc;
  (void)argc;
  if( h==0 ) return;
  rc = kv_root_rollback_err(h->pRoot, &zErr);
  kv_conn_handle_drop(pp);
  if( rc!=SQLITE_OK ){
    sqlite3_result_error(ctx, zErr ? zErr : sqlite3_errstr(rc), -1);
    sqlite3_result_error_code(ctx, rc);
  }else{
    sqlite3_result_int(ctx, 1);
  }
  sqlite3_free(zErr);
}

/* ------------------------------------------------------------ schema --- */

static void funcTableMeta(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvHandle *h = funcHandleArg(ctx, argv[0], 0);
  sqlite3_stmt *pStmt = 0;
  const char *zTab;
  char *zErr = 0;
  KvMeta meta;
  int nTab, bFound = 0, rc;
  (void)argc;
  if( h==0 || !funcNameArg(ctx, argv[1], &zTab, &nTab) ) return;
  /* A name no table can have (and .tables_meta) is an error, not NULL. */
  if( (rc = kv_name_check(zTab, nTab, &zErr))!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  rc = kv_table_meta(kv_root_engine(h->pRoot), h->pRoot, zTab, nTab, &meta,
                     &bFound);
  if( rc==SQLITE_OK && bFound ){
    rc = sqlite3_prepare_v2(sqlite3_context_db_handle(ctx),
        "SELECT json_object('name',?1,'type',?2,'persistence',?3,'id',?4,"
        "'options',json(?5))", -1, &pStmt, 0);
  }
  if( pStmt ){
    sqlite3_bind_text(pStmt, 1, zTab, nTab, SQLITE_STATIC);
    sqlite3_bind_text(pStmt, 2, meta.zType, -1, SQLITE_STATIC);
    sqlite3_bind_int(pStmt, 3, meta.bPersist);
    sqlite3_bind_int64(pStmt, 4, (sqlite3_int64)meta.iId);
    sqlite3_bind_text(pStmt, 5, meta.zOptions ? meta.zOptions : "{}", -1,
                      SQLITE_STATIC);
    if( sqlite3_step(pStmt)==SQLITE_ROW ){
      sqlite3_result_value(ctx, sqlite3_column_value(pStmt, 0));
    }
    rc = sqlite3_finalize(pStmt);
  }
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, 0);
  kv_meta_clear(&meta);
}

/* One option of options_json (key zKey, JSON type zType, value v) for a
** table of type zTab: SQLITE_OK, or SQLITE_ERROR with *pzErr set. */
static int funcCheckOption(const char *zTab, const char *zKey,
                           const char *zType, sqlite3_int64 v, char **pzErr){
  /* Only the table types known to lack accelerated_repair refuse it: an
  ** unknown type is reported as such by kv_create_table(). */
  int bAccel = zTab==0 || (strcmp(zTab, "kv_memory")!=0
                           && strcmp(zTab, "kv_log")!=0);
  if( zKey==0 || (strcmp(zKey, "persistence")!=0
                  && strcmp(zKey, "accelerated_repair")!=0) ){
    *pzErr = sqlite3_mprintf("kv: unknown option '%s' (allowed: "
                             "persistence%s)", zKey ? zKey : "",
                             bAccel ? ", accelerated_repair" : "");
  }else if( zKey[0]=='a' && !bAccel ){
    *pzErr = sqlite3_mprintf("kv: option accelerated_repair applies to "
                             "kv_btree tables only, not %s", zTab);
  }else if( (strcmp(zType, "integer")!=0 && strcmp(zType, "true")!=0
          && strcmp(zType, "false")!=0) || v<0 || v>1 ){
    *pzErr = sqlite3_mprintf("kv: option %s must be 0 or 1", zKey);
  }else{
    return SQLITE_OK;
  }
  return SQLITE_ERROR;
}

/* Check options_json for a table of type zTab: an object whose keys are
** "persistence" (0|1, also true|false) and, for kv_btree only,
** "accelerated_repair" (0|1). */
static int funcParseOptions(sqlite3 *db, sqlite3_value *pJson, const char *zTab,
                            int *pbPersist, char **pzErr){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT json_type(?1)='object', key, atom, "
      "type FROM json_each(?1) WHERE json_valid(?1) UNION ALL "
      "SELECT 0, NULL, NULL, NULL WHERE NOT json_valid(?1)", -1, &pStmt, 0);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_bind_value(pStmt, 1, pJson);
  while( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    const char *zKey = (const char*)sqlite3_column_text(pStmt, 1);
    const char *zType = (const char*)sqlite3_column_text(pStmt, 3);
    /* 64-bit: a 32-bit read would take 4294967297 for 1 */
    sqlite3_int64 v = sqlite3_column_int64(pStmt, 2);
    if( !sqlite3_column_int(pStmt, 0) ){
      *pzErr = sqlite3_mprintf("kv: options must be a JSON object such as "
                               "'{\"persistence\":1}'");
      rc = SQLITE_ERROR;
    }else{
      rc = funcCheckOption(zTab, zKey, zType, v, pzErr);
      if( rc==SQLITE_OK && zKey[0]=='p' ) *pbPersist = (int)v;
    }
  }
  sqlite3_finalize(pStmt);
  return rc;
}

static void funcCreateTable(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv){
  KvHandle *h = funcHandleActive(ctx, argv[0], 0, 0);
  const char *zTab, *zType, *zOpt = 0;
  char *zErr = 0;
  int nTab, bPersist = 0, bCreated = 0, rc = SQLITE_OK;
  if( h==0 || !funcWritable(ctx, "kv_create_table") ) return;
  if( !funcNameArg(ctx, argv[1], &zTab, &nTab) ) return;
  if( sqlite3_value_type(argv[2])!=SQLITE_TEXT ){
    kv_sql_error(ctx, SQLITE_MISMATCH, sqlite3_mprintf(
        "kv: table type must be text such as 'kv_memory', got %s",
        kv_value_type_name(argv[2])));
    return;
  }
  zType = (const char*)sqlite3_value_text(argv[2]);
  /* kv_btree and kv_log tables are persistent unless told otherwise. */
  bPersist = zType && strcmp(zType, "kv_memory")!=0;
  if( argc==4 && sqlite3_value_type(argv[3])!=SQLITE_NULL ){
    rc = funcParseOptions(sqlite3_context_db_handle(ctx), argv[3], zType,
                          &bPersist, &zErr);
    zOpt = (const char*)sqlite3_value_text(argv[3]);
  }
  if( rc==SQLITE_OK ){
    rc = kv_create_table(h->pRoot, zTab, nTab, zType, bPersist, zOpt,
                         &bCreated, &zErr);
  }
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else sqlite3_result_int(ctx, bCreated);
}

static void funcRemoveTable(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv){
  KvHandle *h = funcHandleActive(ctx, argv[0], 0, 0);
  const char *zTab;
  char *zErr = 0;
  int nTab, rc;
  (void)argc;
  if( h==0 || !funcWritable(ctx, "kv_remove_table") ) return;
  if( !funcNameArg(ctx, argv[1], &zTab, &nTab) ) return;
  rc = kv_remove_table(h->pRoot, zTab, nTab, &zErr);
  if( rc==SQLITE_OK ){
    rc = kv_derived_remove_carriers((KvConn*)sqlite3_user_data(ctx),
                                    h->pRoot, zTab, nTab, &zErr);
  }
  if( rc==SQLITE_OK ) rc = kv_ttl_remove_index(h->pRoot, zTab, nTab, &zErr);
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else sqlite3_result_int(ctx, 1);
}

/* kv_clock([mode[, ms]]): the clock of deadlines (kv_clock_ms), after
** setting it when a mode is given: 'wall', 'offset' (ms added to the wall
** clock) or 'fixed' (stopped at ms). */
static void funcClock(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  if( argc>=1 ){
    const char *zMode = (const char*)sqlite3_value_text(argv[0]);
    int eMode;
    sqlite3_int64 iMs = 0;
    if( zMode==0 ){
      sqlite3_result_error(ctx, "kv_clock: the mode is 'wall', 'offset' "
                           "or 'fixed', not NULL", -1);
      return;
    }
    if( sqlite3_stricmp(zMode, "wall")==0 ) eMode = KV_CLOCK_WALL;
    else if( sqlite3_stricmp(zMode, "offset")==0 ) eMode = KV_CLOCK_OFFSET;
    else if( sqlite3_stricmp(zMode, "fixed")==0 ) eMode = KV_CLOCK_FIXED;
    else{
      char *z = sqlite3_mprintf("kv_clock: unknown mode '%s' (expected "
                                "'wall', 'offset' or 'fixed')", zMode);
      sqlite3_result_error(ctx, z ? z : "kv_clock: unknown mode", -1);
      sqlite3_free(z);
      return;
    }
    if( eMode!=KV_CLOCK_WALL ){
      if( argc<2 || sqlite3_value_type(argv[1])!=SQLITE_INTEGER ){
        sqlite3_result_error(ctx, "kv_clock: 'offset' and 'fixed' take "
                             "an integer number of milliseconds", -1);
        return;
      }
      iMs = sqlite3_value_int64(argv[1]);
    }else if( argc>=2 ){
      sqlite3_result_error(ctx, "kv_clock: 'wall' takes no milliseconds",
                           -1);
      return;
    }
    kv_clock_set(eMode, iMs);
  }
  sqlite3_result_int64(ctx, kv_clock_ms());
}

/* -------------------------------------------------------- component --- */

static const struct {
  const char *zName;
  int nArg;
  void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
} aFunc[] = {
  { "kv_begin",        0, funcBegin },
  { "kv_begin",        1, funcBegin },
  { "kv_get",          3, funcGet },
  { "kv_put",          4, funcPut },
  { "kv_delete",       3, funcDelete },
  { "kv_prepare",      1, funcPrepare },
  { "kv_prepare",      2, funcPrepare },
  { "kv_commit",       1, funcCommit },
  { "kv_rollback",     1, funcRollback },
  { "kv_try_commit",   1, funcTryCommit },
  { "kv_table_meta",   2, funcTableMeta },
  { "kv_create_table", 3, funcCreateTable },
  { "kv_create_table", 4, funcCreateTable },
  { "kv_remove_table", 2, funcRemoveTable },
  { "kv_clock",        0, funcClock },
  { "kv_clock",        1, funcClock },
  { "kv_clock",        2, funcClock },
};

static int funcConnection(sqlite3 *db, KvConn *pConn){
  size_t i;
  int rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<sizeof(aFunc)/sizeof(aFunc[0]); i++){
    kv_conn_ref(pConn);
    rc = sqlite3_create_function_v2(db, aFunc[i].zName, aFunc[i].nArg,
        SQLITE_UTF8|SQLITE_DIRECTONLY, pConn, aFunc[i].xFunc, 0, 0,
        kv_conn_unref);
  }
  return rc;
}

const DepotComponent depotKvFuncComponent = {
  "kv: cannot register the KV functions", 0, funcConnection
};
