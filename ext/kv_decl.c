/*
** kv_decl.c -- temp declarations of KV tables: what lets the connections
** of one process write the KV tables of one database file at the same time.
**
** SQLite compiles a write of a virtual table into OP_Transaction on the
** schema that declares it, with the write flag (sqlite3BeginWriteOperation
** in insert.c, update.c, delete.c), and every statement that names a
** table verifies that table's schema with a read transaction on it.  A KV
** table declared in main therefore takes the database file's write lock
** for each write and its read lock for each read, and the second writer
** waits for the first (busy_timeout) or fails "database is locked" before
** the engine's conflict check is reached.  Declared in temp -- the
** connection's private database -- the same table takes temp's locks only:
** EXPLAIN shows "Transaction 1 1".  So every KV table of the main schema
** gets a second declaration in the connection's temp schema,
**
**   CREATE VIRTUAL TABLE temp."t" USING kv_btree(dir='<its store>')
**
** which attaches to the same KV table, and since SQLite resolves an
** unqualified name in temp before main, existing SQL takes the concurrent
** path unchanged; "main.t" still names the main declaration.  Declared:
** for every main-schema KV table when the extension is loaded into a
** connection whose main database is a file (kv_attach_main); for a table
** created or first connected later, at its first read or write through
** main (kv_attach_first_use: that statement still goes through main, the
** next ones through temp); on request with kv_attach() / kv_attach_all()
** (kv_attach.c).  A connection whose main database has no file has no
** lock to avoid, and gets none.
**
** Dropping a temp declaration (DROP TABLE t, DROP TABLE temp.t) detaches
** it and removes nothing (kv_vtab.c); DROP TABLE main.t removes the KV
** table.  Nothing here calls another file of ext/: it runs SQL.
*/
#include "config.h"
#include "ext/kv_sql.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

static KvDecl *declFind(KvConn *p, const char *zName){
  KvDecl *d;
  for(d=p->pDecl; d; d=d->pNext){
    if( sqlite3_stricmp(d->zName, zName)==0 ) return d;
  }
  return 0;
}

int kv_attach_note(KvConn *p, const char *zName, const char *zType,
                   KvEngine *pEng){
  KvDecl *d = declFind(p, zName);
  if( d==0 ){
    d = sqlite3_malloc64(sizeof(*d));
    if( d==0 ) return SQLITE_NOMEM;
    memset(d, 0, sizeof(*d));
    d->zName = sqlite3_mprintf("%s", zName);
    d->zType = sqlite3_mprintf("%s", zType);
    if( d->zName==0 || d->zType==0 ){
      sqlite3_free(d->zName);
      sqlite3_free(d->zType);
      sqlite3_free(d);
      return SQLITE_NOMEM;
    }
    d->pNext = p->pDecl;
    p->pDecl = d;
  }
  if( pEng ) d->pEng = pEng;
  return SQLITE_OK;
}

/* The CREATE statement of the temp declaration of table zName, type zType,
** on the store in directory zDir: also the text SQLite keeps for it in
** sqlite_temp_schema once the "temp." is dropped (declSql(…, 0)). */
static char *declSql(const char *zName, const char *zType, const char *zDir,
                     int bTemp){
  return sqlite3_mprintf("CREATE VIRTUAL TABLE %s\"%w\" USING %s(dir='%q')",
                         bTemp ? "temp." : "", zName, zType, zDir);
}

/* What temp holds under zName: 0 nothing, 1 the declaration zSql (the
** text declSql(…, 0) makes), 2 something else; -1 on error (*pzErr). */
static int declTempHas(sqlite3 *db, const char *zName, const char *zSql,
                       char **pzErr){
  sqlite3_stmt *pStmt = 0;
  int e = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT sql FROM temp.sqlite_schema "
                              "WHERE name=?1 COLLATE NOCASE", -1, &pStmt, 0);
  if( rc==SQLITE_OK ){
    sqlite3_bind_text(pStmt, 1, zName, -1, SQLITE_STATIC);
    if( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
      const char *z = (const char*)sqlite3_column_text(pStmt, 0);
      e = (z && strcmp(z, zSql)==0) ? 1 : 2;
      rc = SQLITE_OK;
    }else if( rc==SQLITE_DONE ){
      rc = SQLITE_OK;
    }
  }
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: cannot read the temp schema: %s",
                             sqlite3_errmsg(db));
    e = -1;
  }
  sqlite3_finalize(pStmt);
  return e;
}

/* Declare KV table zName of type zType of store pEng in temp.  *pbMade: 1
** declared now, 0 it was already.  Temp holding another table of that
** name is SQLITE_ERROR. */
static int declMake(KvConn *p, const char *zName, const char *zType,
                    KvEngine *pEng, int *pbMade, char **pzErr){
  const char *zDir = kv_engine_dir(pEng);
  char *zKept, *zSql;
  int e, rc = SQLITE_OK;
  *pbMade = 0;
  if( zDir==0 ){
    *pzErr = sqlite3_mprintf("kv: table %s is in an in-memory store, which "
        "no other connection shares: it needs no temp declaration", zName);
    return SQLITE_ERROR;
  }
  zKept = declSql(zName, zType, zDir, 0);
  zSql = declSql(zName, zType, zDir, 1);
  if( zKept==0 || zSql==0 ){
    rc = SQLITE_NOMEM;
  }else if( (e = declTempHas(p->db, zName, zKept, pzErr))<0 ){
    rc = SQLITE_ERROR;
  }else if( e==2 ){
    *pzErr = sqlite3_mprintf("kv: temp.%s exists and is not the %s table %s "
        "of store %s", zName, zType, zName, zDir);
    rc = SQLITE_ERROR;
  }else if( e==0 ){
    rc = sqlite3_exec(p->db, zSql, 0, 0, 0);
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv: cannot declare temp.%s: %s", zName,
                               sqlite3_errmsg(p->db));
    }else{
      *pbMade = 1;
    }
  }
  sqlite3_free(zKept);
  sqlite3_free(zSql);
  return rc;
}

/* Does the main database have a file (the only case with a lock to
** avoid)? */
static int declMainIsFile(sqlite3 *db){
  const char *z = sqlite3_db_filename(db, "main");
  return z && z[0];
}

/* Does store pEng hold KV table zName (and of which type, in *pzType,
** sqlite3_malloc'd)? */
static int declExists(KvEngine *pEng, const char *zName, char **pzType,
                      int *pbFound){
  KvMeta meta;
  int rc = kv_table_meta(pEng, 0, zName, (int)strlen(zName), &meta, pbFound);
  *pzType = 0;
  if( rc==SQLITE_OK && *pbFound ){
    *pzType = sqlite3_mprintf("%s", meta.zType);
    if( *pzType==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) kv_meta_clear(&meta);
  return rc;
}

/* Declare main-schema table d in temp if it has a store and is in it
** (then d is offered: first use tries no more). */
static int declOffer(KvConn *p, KvDecl *d, int *pbMade, char **pzErr){
  char *zType = 0;
  int bFound = 0, rc;
  *pbMade = 0;
  if( d->pEng==0 || kv_engine_dir(d->pEng)==0 ) return SQLITE_OK;
  rc = declExists(d->pEng, d->zName, &zType, &bFound);
  if( rc==SQLITE_OK && bFound && strcmp(zType, d->zType)==0 ){
    d->bOffered = 1;
    rc = declMake(p, d->zName, d->zType, d->pEng, pbMade, pzErr);
  }
  sqlite3_free(zType);
  return rc;
}

void kv_attach_first_use(KvConn *p, const char *zName){
  KvDecl *d = declFind(p, zName);
  char *zErr = 0;
  int bMade, rc;
  if( d==0 || d->bOffered || !declMainIsFile(p->db) ) return;
  rc = declOffer(p, d, &bMade, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: no temp declaration");
  }
  sqlite3_free(zErr);
}

void kv_attach_detached(KvConn *p, const char *zName){
  KvDecl *d = declFind(p, zName);
  if( d ) d->bOffered = 1;
}

int kv_attach_table(KvConn *p, const char *zName, const char *zDir,
                    int *pbMade, char **pzErr){
  KvEngine *pEng = 0;
  char *zType = 0;
  int bFound = 0;
  int rc;
  *pbMade = 0;
  if( zDir==0 && !declMainIsFile(p->db) ){
    *pzErr = sqlite3_mprintf("kv: kv_attach(%Q) needs a dir: the main "
        "database has no file, so it has no default store", zName);
    return SQLITE_ERROR;
  }
  rc = kv_name_check(zName, (int)strlen(zName), pzErr);
  if( rc==SQLITE_OK ) rc = kv_conn_store_existing(p, zDir, &pEng, pzErr);
  if( rc==SQLITE_OK ) rc = declExists(pEng, zName, &zType, &bFound);
  if( rc==SQLITE_OK && !bFound ){
    *pzErr = sqlite3_mprintf("kv: no KV table %s in store %s", zName,
                             kv_engine_dir(pEng));
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ) rc = declMake(p, zName, zType, pEng, pbMade, pzErr);
  sqlite3_free(zType);
  kv_engine_unref(pEng);
  return rc;
}

/* Connect every KV table of the main schema that temp does not hide, so
** that kv_vtab.c notes it (preparing a statement that names a virtual
** table connects it).  A table that fails to connect (its module is
** another's, its store is locked) is left out: it stays on main. */
static int declConnectMain(KvConn *p){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(p->db,
      "SELECT name FROM main.sqlite_schema WHERE type='table'"
      " AND sql LIKE 'CREATE VIRTUAL TABLE%USING kv\\_%' ESCAPE '\\'"
      " AND name NOT IN (SELECT name FROM temp.sqlite_schema)", -1, &pStmt, 0);
  while( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    const char *zName = (const char*)sqlite3_column_text(pStmt, 0);
    char *zSql = zName ? sqlite3_mprintf("SELECT 1 FROM main.\"%w\"", zName)
                       : 0;
    sqlite3_stmt *pProbe = 0;
    if( zName && zSql==0 ) rc = SQLITE_NOMEM;
    if( zSql && sqlite3_prepare_v2(p->db, zSql, -1, &pProbe, 0)!=SQLITE_OK ){
      sqlite3_log(sqlite3_errcode(p->db), "kv: %s stays on main: %s", zName,
                  sqlite3_errmsg(p->db));
    }
    sqlite3_finalize(pProbe);
    sqlite3_free(zSql);
  }
  if( rc==SQLITE_OK ) rc = sqlite3_finalize(pStmt); else sqlite3_finalize(pStmt);
  return rc;
}

int kv_attach_main(KvConn *p, int *pnMade, char **pzErr){
  KvDecl *d;
  int rc;
  *pnMade = 0;
  if( !declMainIsFile(p->db) ) return SQLITE_OK;
  rc = declConnectMain(p);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: cannot read the main schema: %s",
                             sqlite3_errmsg(p->db));
    return rc;
  }
  for(d=p->pDecl; d; d=d->pNext){
    char *zErr = 0;
    int bMade = 0;
    rc = declOffer(p, d, &bMade, &zErr);
    if( rc==SQLITE_NOMEM ) return rc;
    if( rc!=SQLITE_OK ){           /* that table stays on main */
      sqlite3_log(rc, "%s", zErr ? zErr : "kv: no temp declaration");
    }
    sqlite3_free(zErr);
    *pnMade += bMade;
  }
  return SQLITE_OK;
}
