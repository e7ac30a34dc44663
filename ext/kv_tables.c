/*
** kv_tables.c -- the eponymous, read-only table kv_tables: every KV table
** of every store open in this process.
**
**   SELECT name, type, persistence, dir, rows FROM kv_tables;
**
** dir is the store directory (NULL for a connection's in-memory store),
** rows the number of committed entries.  The rows are a snapshot taken
** when the scan starts.  The internal catalog is never listed.
*/
#include "config.h"
#include "ext/kv_sql.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

typedef struct KvTablesCursor KvTablesCursor;
struct KvTablesCursor {
  sqlite3_vtab_cursor base;     /* must be first */
  KvTableInfo *aInfo;
  int nInfo;
  int i;
};

static int ktConnect(sqlite3 *db, void *pAux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr){
  sqlite3_vtab *p;
  int rc;
  (void)pAux; (void)argc; (void)argv; (void)pzErr;
  rc = sqlite3_declare_vtab(db, "CREATE TABLE x(name TEXT, type TEXT, "
                            "persistence INTEGER, dir TEXT, rows INTEGER)");
  if( rc!=SQLITE_OK ) return rc;
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *ppVtab = p;
  return SQLITE_OK;
}

static int ktDisconnect(sqlite3_vtab *p){
  sqlite3_free(p);
  return SQLITE_OK;
}

static int ktBestIndex(sqlite3_vtab *p, sqlite3_index_info *pInfo){
  (void)p;
  pInfo->estimatedCost = 100.0;
  pInfo->estimatedRows = 100;
  return SQLITE_OK;
}

static int ktOpen(sqlite3_vtab *p, sqlite3_vtab_cursor **ppCsr){
  KvTablesCursor *c = sqlite3_malloc64(sizeof(*c));
  (void)p;
  if( c==0 ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *ppCsr = &c->base;
  return SQLITE_OK;
}

static int ktClose(sqlite3_vtab_cursor *pCsr){
  KvTablesCursor *c = (KvTablesCursor*)pCsr;
  kv_engine_list_free(c->aInfo, c->nInfo);
  sqlite3_free(c);
  return SQLITE_OK;
}

static int ktFilter(sqlite3_vtab_cursor *pCsr, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  KvTablesCursor *c = (KvTablesCursor*)pCsr;
  (void)idxNum; (void)idxStr; (void)argc; (void)argv;
  kv_engine_list_free(c->aInfo, c->nInfo);
  c->aInfo = 0;
  c->nInfo = c->i = 0;
  return kv_engine_list(&c->aInfo, &c->nInfo);
}

static int ktNext(sqlite3_vtab_cursor *pCsr){
  ((KvTablesCursor*)pCsr)->i++;
  return SQLITE_OK;
}

static int ktEof(sqlite3_vtab_cursor *pCsr){
  KvTablesCursor *c = (KvTablesCursor*)pCsr;
  return c->i>=c->nInfo;
}

static int ktColumn(sqlite3_vtab_cursor *pCsr, sqlite3_context *ctx, int i){
  KvTablesCursor *c = (KvTablesCursor*)pCsr;
  const KvTableInfo *p = &c->aInfo[c->i];
  switch( i ){
    case 0: sqlite3_result_text(ctx, p->zName, p->nName, SQLITE_TRANSIENT); break;
    case 1: sqlite3_result_text(ctx, p->zType, -1, SQLITE_TRANSIENT); break;
    case 2: sqlite3_result_int(ctx, p->bPersist); break;
    case 3:
      if( p->zDir ) sqlite3_result_text(ctx, p->zDir, -1, SQLITE_TRANSIENT);
      break;
    default: sqlite3_result_int64(ctx, p->nRow); break;
  }
  return SQLITE_OK;
}

static int ktRowid(sqlite3_vtab_cursor *pCsr, sqlite3_int64 *pRowid){
  *pRowid = ((KvTablesCursor*)pCsr)->i;
  return SQLITE_OK;
}

static sqlite3_module kvTablesModule = {
  0, 0, ktConnect, ktBestIndex, ktDisconnect, 0,
  ktOpen, ktClose, ktFilter, ktNext, ktEof, ktColumn, ktRowid,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

int kv_tables_register(sqlite3 *db){
  return sqlite3_create_module(db, "kv_tables", &kvTablesModule, 0);
}
