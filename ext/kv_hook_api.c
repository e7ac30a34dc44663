/*
** kv_hook_api.c -- the public write-hook API of ext/depot_kv.h on top of
** the engine's hooks (ext/kv/kv.h, "hooks"; ext/kv/hook.c delivers).
**
** depot_kv_hook_register names a table as a connection sees it.  The
** schema, when not given, is found the way SQLite resolves an unqualified
** name (temp, main, then the attached databases, each schema's
** sqlite_schema asked in turn); preparing "SELECT 1 FROM s.t" then makes
** SQLite connect the virtual table, and kv_vtab_lookup (kv_vtab.c) finds
** it on the process's list of connected KV tables and gives its store and
** KV table name.  The engine hook is registered on that store, so it is
** the store's, not the connection's: it holds a reference on the store
** and outlives the connection.  The engine's callbacks get encoded bytes;
** the adapters here decode them (kv_key_decode, kv_value_decode) into
** depot_kv_value structs on the stack, valid during the user's callback.
** A depot_kv_hook lives as long as the engine's hook: apiDestroy (its
** xDestroy) frees it, so a call still in progress when it is unregistered
** never reads freed memory.
*/
#include "config.h"
#include "ext/depot_kv.h"
#include "ext/kv_sql.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

struct depot_kv_hook {
  KvHook *pHook;                /* the engine's hook */
  depot_kv_hook_methods m;
  void *pArg;
  char *zTable;                 /* schema.table, for log lines */
};

#define API_FLAGS (DEPOT_KV_HOOK_NEEDS_OLD_VALUE|DEPOT_KV_HOOK_NEEDS_INIT \
                   |DEPOT_KV_HOOK_NEEDS_WRITE)

/* The public flags are the engine's. */
typedef char apiFlagsMatch[(DEPOT_KV_HOOK_NEEDS_OLD_VALUE
    ==KV_HOOK_NEEDS_OLD_VALUE && DEPOT_KV_HOOK_NEEDS_INIT==KV_HOOK_NEEDS_INIT
    && DEPOT_KV_HOOK_NEEDS_WRITE==KV_HOOK_NEEDS_WRITE) ? 1 : -1];

/* ---------------------------------------------------------- adapters --- */

static void apiValue(const KvDatum *d, depot_kv_value *v){
  memset(v, 0, sizeof(*v));
  v->eType = d->eType;
  v->i = d->i;
  v->r = d->r;
  v->p = d->z;
  v->n = d->n;
}

/* Log a key or value that cannot be decoded, which the callback skips. */
static void apiSkipped(depot_kv_hook *p, int rc, const uint8_t *aKey,
                       int nKey){
  char *zKey = kv_key_describe(aKey, nKey);
  sqlite3_log(rc, "depot_kv_hook: a write hook of %s skips key %s: it "
              "cannot be decoded (%s)", p->zTable, zKey ? zKey : "?",
              sqlite3_errstr(rc));
  sqlite3_free(zKey);
}

static void apiWrite(void *pArg, const uint8_t *aKey, int nKey,
                     const uint8_t *aOld, int nOld,
                     const uint8_t *aNew, int nNew){
  depot_kv_hook *p = (depot_kv_hook*)pArg;
  KvDatum k, o, n;
  depot_kv_value vk, vo, vn;
  int rc;
  memset(&o, 0, sizeof(o));
  memset(&n, 0, sizeof(n));
  /* The value stored with the key records its numeric kind. */
  rc = aNew ? kv_key_decode(aKey, nKey, aNew, nNew, &k)
            : kv_key_decode(aKey, nKey, aOld, aOld ? nOld : 0, &k);
  if( rc==SQLITE_OK && aOld ) rc = kv_value_decode(aOld, nOld, &o);
  if( rc==SQLITE_OK && aNew ) rc = kv_value_decode(aNew, nNew, &n);
  if( rc==SQLITE_OK ){
    apiValue(&k, &vk);
    apiValue(&o, &vo);
    apiValue(&n, &vn);
    p->m.xWrite(p->pArg, &vk, aOld ? &vo : 0, aNew ? &vn : 0);
  }else{
    apiSkipped(p, rc, aKey, nKey);
  }
  kv_datum_clear(&k);
  kv_datum_clear(&o);
  kv_datum_clear(&n);
}

static void apiInit(void *pArg, const uint8_t *aKey, int nKey,
                    const uint8_t *aVal, int nVal){
  depot_kv_hook *p = (depot_kv_hook*)pArg;
  KvDatum k, v;
  depot_kv_value vk, vv;
  int rc;
  memset(&v, 0, sizeof(v));
  rc = kv_key_decode(aKey, nKey, aVal, nVal, &k);
  if( rc==SQLITE_OK ) rc = kv_value_decode(aVal, nVal, &v);
  if( rc==SQLITE_OK ){
    apiValue(&k, &vk);
    apiValue(&v, &vv);
    p->m.xInit(p->pArg, &vk, &vv);
  }else{
    apiSkipped(p, rc, aKey, nKey);
  }
  kv_datum_clear(&k);
  kv_datum_clear(&v);
}

static void apiRemoved(void *pArg){
  depot_kv_hook *p = (depot_kv_hook*)pArg;
  p->m.xRemoved(p->pArg);
}

/* The engine frees its hook: no callback runs or will run. */
static void apiDestroy(void *pArg){
  depot_kv_hook *p = (depot_kv_hook*)pArg;
  if( p->m.xDestroy ) p->m.xDestroy(p->pArg);
  sqlite3_free(p->zTable);
  sqlite3_free(p);
}

/* -------------------------------------------------------- resolution --- */

static int apiError(char **pzErr, int rc, const char *zFmt, const char *z1,
                    const char *z2, const char *z3){
  *pzErr = sqlite3_mprintf(zFmt, z1, z2, z3);
  return *pzErr ? rc : SQLITE_NOMEM;
}

/* Finalize pStmt; rc, or the finalize's error when rc is SQLITE_OK. */
static int apiFinalize(sqlite3_stmt *pStmt, int rc){
  int rc2 = sqlite3_finalize(pStmt);
  return rc==SQLITE_OK ? rc2 : rc;
}

/* The schema of the table or view zTable reaches, unqualified, on db
** (sqlite3_malloc'd into *pzSchema), or NULL when none holds it. */
static int apiSchemaOf(sqlite3 *db, const char *zFunc, const char *zTable,
                       char **pzSchema, char **pzErr){
  sqlite3_stmt *pList = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT name FROM pragma_database_list "
                              "ORDER BY seq<>1, seq", -1, &pList, 0);
  *pzSchema = 0;
  while( rc==SQLITE_OK && *pzSchema==0 && sqlite3_step(pList)==SQLITE_ROW ){
    const char *zDb = (const char*)sqlite3_column_text(pList, 0);
    char *zSql = sqlite3_mprintf("SELECT 1 FROM \"%w\".sqlite_schema WHERE "
        "type IN ('table','view') AND name=?1 COLLATE NOCASE", zDb);
    sqlite3_stmt *pFind = 0;
    if( zDb==0 || zSql==0 ){
      rc = SQLITE_NOMEM;
    }else if( (rc = sqlite3_prepare_v2(db, zSql, -1, &pFind, 0))==SQLITE_OK ){
      sqlite3_bind_text(pFind, 1, zTable, -1, SQLITE_STATIC);
      if( sqlite3_step(pFind)==SQLITE_ROW ){
        *pzSchema = sqlite3_mprintf("%s", zDb);
        if( *pzSchema==0 ) rc = SQLITE_NOMEM;
      }
      rc = apiFinalize(pFind, rc);
    }
    sqlite3_free(zSql);
  }
  rc = apiFinalize(pList, rc);
  if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ){
    rc = apiError(pzErr, rc, "%s: cannot read the schema: %s%s", zFunc,
                  sqlite3_errmsg(db), "");
  }
  return rc;
}

int kv_hook_resolve(sqlite3 *db, const char *zFunc, const char *zSchema,
                    const char *zTable, KvEngine **ppEng, char **pzKvTab,
                    char **pzErr){
  char *zFound = 0, *zSql = 0;
  sqlite3_stmt *pStmt = 0;
  int rc = SQLITE_OK;
  if( zSchema==0 ){
    rc = apiSchemaOf(db, zFunc, zTable, &zFound, pzErr);
    if( rc!=SQLITE_OK ) return rc;
    if( zFound==0 ){
      return apiError(pzErr, SQLITE_ERROR, "%s: no such table: %s%s", zFunc,
                      zTable, "");
    }
    zSchema = zFound;
  }
  /* Naming the table connects it, so that the lookup finds it. */
  zSql = sqlite3_mprintf("SELECT 1 FROM \"%w\".\"%w\"", zSchema, zTable);
  if( zSql==0 ){
    rc = SQLITE_NOMEM;
  }else if( sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0)!=SQLITE_OK ){
    rc = apiError(pzErr, SQLITE_ERROR, "%s: %s%s", zFunc,
                  sqlite3_errmsg(db), "");
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(zSql);
  if( rc==SQLITE_OK ){
    rc = kv_vtab_lookup(db, zSchema, zTable, ppEng, pzKvTab, pzErr);
    if( rc==SQLITE_NOTFOUND ){
      rc = apiError(pzErr, SQLITE_ERROR, "%s: %s.%s is not a KV table "
          "(kv_memory, kv_btree or kv_log) of this library", zFunc, zSchema,
          zTable);
    }
  }
  sqlite3_free(zFound);
  return rc;
}

/* ------------------------------------------------------- the API --- */

static int apiMisuse(char **pzErr, const char *zWhy){
  *pzErr = sqlite3_mprintf("depot_kv_hook_register: %s", zWhy);
  return SQLITE_MISUSE;
}

static int apiCheck(sqlite3 *db, const char *zTable, unsigned flags,
                    const depot_kv_hook_methods *pM, depot_kv_hook **ppHook,
                    char **pzErr){
  if( db==0 ) return apiMisuse(pzErr, "db is NULL");
  if( zTable==0 ) return apiMisuse(pzErr, "table name is NULL");
  if( pM==0 ) return apiMisuse(pzErr, "methods are NULL");
  if( ppHook==0 ) return apiMisuse(pzErr, "ppHook is NULL");
  if( pM->iVersion!=1 ){
    return apiMisuse(pzErr, "depot_kv_hook_methods.iVersion must be 1");
  }
  if( flags & ~(unsigned)API_FLAGS ){
    return apiMisuse(pzErr, "unknown flag bits (allowed: "
        "DEPOT_KV_HOOK_NEEDS_OLD_VALUE, DEPOT_KV_HOOK_NEEDS_INIT, "
        "DEPOT_KV_HOOK_NEEDS_WRITE)");
  }
  if( (flags & (DEPOT_KV_HOOK_NEEDS_INIT|DEPOT_KV_HOOK_NEEDS_WRITE))==0 ){
    return apiMisuse(pzErr, "flags need DEPOT_KV_HOOK_NEEDS_WRITE or "
                     "DEPOT_KV_HOOK_NEEDS_INIT");
  }
  if( (flags & DEPOT_KV_HOOK_NEEDS_WRITE) && pM->xWrite==0 ){
    return apiMisuse(pzErr, "DEPOT_KV_HOOK_NEEDS_WRITE without xWrite");
  }
  if( (flags & DEPOT_KV_HOOK_NEEDS_INIT) && pM->xInit==0 ){
    return apiMisuse(pzErr, "DEPOT_KV_HOOK_NEEDS_INIT without xInit");
  }
  if( kv_hook_active() ){
    return apiMisuse(pzErr, "called from inside a hook callback");
  }
  return SQLITE_OK;
}

/* depot_kv_hook_register with a pzErr that is not NULL. */
static int apiRegister(sqlite3 *db, const char *zSchema, const char *zTable,
                       unsigned flags, const depot_kv_hook_methods *pM,
                       void *pArg, depot_kv_hook **ppHook, char **pzErr){
  static const KvHookMethods apiMethods = {
    apiWrite, apiInit, apiRemoved, apiDestroy
  };
  KvHookMethods m = apiMethods;
  KvEngine *pEng = 0;
  char *zKvTab = 0;
  depot_kv_hook *p;
  int rc;
  if( ppHook ) *ppHook = 0;
  rc = apiCheck(db, zTable, flags, pM, ppHook, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_mutex_enter(sqlite3_db_mutex(db));
  rc = kv_hook_resolve(db, "depot_kv_hook_register", zSchema, zTable, &pEng,
                       &zKvTab, pzErr);
  sqlite3_mutex_leave(sqlite3_db_mutex(db));
  if( rc!=SQLITE_OK ) return rc;
  if( (p = sqlite3_malloc64(sizeof(*p)))==0 ){
    rc = SQLITE_NOMEM;
  }else{
    memset(p, 0, sizeof(*p));
    p->m = *pM;
    p->pArg = pArg;
    p->zTable = zSchema ? sqlite3_mprintf("%s.%s", zSchema, zKvTab)
                        : sqlite3_mprintf("%s", zKvTab);
    if( p->zTable==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ){
    if( pM->xRemoved==0 ) m.xRemoved = 0;
    rc = kv_hook_register(pEng, zKvTab, -1, (int)flags, &m, p, &p->pHook,
                          pzErr);
  }
  if( rc!=SQLITE_OK && p ){
    sqlite3_free(p->zTable);
    sqlite3_free(p);
  }else if( rc==SQLITE_OK ){
    *ppHook = p;
  }
  sqlite3_free(zKvTab);
  kv_engine_unref(pEng);          /* the engine hook holds its own */
  return rc;
}

int depot_kv_hook_register(sqlite3 *db, const char *zSchema,
                           const char *zTable, unsigned flags,
                           const depot_kv_hook_methods *pMethods, void *pArg,
                           depot_kv_hook **ppHook, char **pzErr){
  char *zErr = 0;
  int rc = apiRegister(db, zSchema, zTable, flags, pMethods, pArg, ppHook,
                       &zErr);
  if( pzErr ) *pzErr = zErr; else sqlite3_free(zErr);
  return rc;
}

void depot_kv_hook_unregister(depot_kv_hook *p){
  /* p is freed by apiDestroy, when the engine's hook is: here, or at the
  ** end of a call still in progress on another thread. */
  if( p ) kv_hook_unregister(p->pHook);
}

int depot_kv_value_bind(sqlite3_stmt *pStmt, int iParam,
                        const depot_kv_value *v){
  if( v==0 ) return sqlite3_bind_null(pStmt, iParam);
  switch( v->eType ){
    case SQLITE_INTEGER: return sqlite3_bind_int64(pStmt, iParam, v->i);
    case SQLITE_FLOAT:   return sqlite3_bind_double(pStmt, iParam, v->r);
    case SQLITE_TEXT:
      return sqlite3_bind_text64(pStmt, iParam, v->p ? v->p : "",
                                 (sqlite3_uint64)v->n, SQLITE_TRANSIENT,
                                 SQLITE_UTF8);
    case SQLITE_BLOB:
      return sqlite3_bind_blob64(pStmt, iParam, v->p ? v->p : "",
                                 (sqlite3_uint64)v->n, SQLITE_TRANSIENT);
    default:             return sqlite3_bind_null(pStmt, iParam);
  }
}
