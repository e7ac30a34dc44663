/*
** kv_attach.c -- declaring KV tables in the connection's temp schema, from
** SQL and when the extension is loaded (the design is in kv_decl.c):
**
**   SELECT kv_attach('acct');             -- 1: declared temp.acct
**   SELECT kv_attach('acct', '/data/kv'); -- the table of another store
**   SELECT kv_attach_all();               -- how many were declared
**
** kv_attach(name[, dir]) declares KV table `name` of store `dir` (NULL or
** absent: the main database's default store, "<file>-kv") as temp.name:
** 1 when it declared it, 0 when temp.name already was that table.  NULL
** name: NULL, nothing done.  Errors: no such store or table, temp holding
** another table of that name, an in-memory store (shared by nobody).
** kv_attach_all() declares every KV table of the main schema that has no
** temp declaration (what loading the extension does) and returns how many.
** Both write no file: a read-only connection may call them.
*/
#include "config.h"
#include "ext/kv_sql.h"
SQLITE_EXTENSION_INIT3

static void attachFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *p = (KvConn*)sqlite3_user_data(ctx);
  const char *zName = (const char*)sqlite3_value_text(argv[0]);
  const char *zDir = argc>1 ? (const char*)sqlite3_value_text(argv[1]) : 0;
  char *zErr = 0;
  int bMade = 0, rc;
  if( zName==0 ){
    if( sqlite3_value_type(argv[0])!=SQLITE_NULL ){
      sqlite3_result_error_nomem(ctx);
    }
    return;                                   /* NULL name: NULL */
  }
  rc = kv_attach_table(p, zName, zDir, &bMade, &zErr);
  if( rc!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  sqlite3_result_int(ctx, bMade);
}

static void attachAllFunc(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  KvConn *p = (KvConn*)sqlite3_user_data(ctx);
  char *zErr = 0;
  int nMade = 0;
  int rc = kv_attach_main(p, &nMade, &zErr);
  (void)argc; (void)argv;
  if( rc!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  sqlite3_result_int(ctx, nMade);
}

/* Registers the functions, then declares the main schema's KV tables in
** temp.  That step never fails the load: a database that cannot be read
** yet (locked, not a database) leaves its tables on main, with a line in
** the error log, and no error on the connection. */
static int attachConnection(sqlite3 *db, KvConn *pKv){
  static const int eFlags = SQLITE_UTF8|SQLITE_DIRECTONLY;
  char *zErr = 0;
  int i, nMade = 0, rc = SQLITE_OK;
  for(i=1; rc==SQLITE_OK && i<=2; i++){
    kv_conn_ref(pKv);
    rc = sqlite3_create_function_v2(db, "kv_attach", i, eFlags, pKv,
                                    attachFunc, 0, 0, kv_conn_unref);
  }
  if( rc==SQLITE_OK ){
    kv_conn_ref(pKv);
    rc = sqlite3_create_function_v2(db, "kv_attach_all", 0, eFlags, pKv,
                                    attachAllFunc, 0, 0, kv_conn_unref);
  }
  if( rc!=SQLITE_OK ) return rc;
  rc = kv_attach_main(pKv, &nMade, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: no temp declarations");
    sqlite3_exec(db, "", 0, 0, 0);        /* leaves no error on db */
  }
  sqlite3_free(zErr);
  return rc==SQLITE_NOMEM ? rc : SQLITE_OK;
}

const DepotComponent depotKvAttachComponent = {
  "kv: cannot register kv_attach", 0, attachConnection
};
