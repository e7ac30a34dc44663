/*
** c_example.c -- a C program that uses the installed extension: it links
** libdepot (`cc c_example.c $(pkg-config --cflags --libs depot)`),
** registers it once with sqlite3_auto_extension(), and then every
** connection has the SQL functions, the KV tables and the depot VFS.
**
**   ./c_example DIR      (DIR: an existing directory for the files)
**
** It writes a KV table, keeps a running total of it with a write hook
** (depot_kv.h), creates a depot database, forks it, writes the fork only,
** and reads both branches back.  Exit status 0 on success.
*/
#include <depot.h>
#include <depot_kv.h>
#include <sqlite3.h>
#include <stdio.h>

/* A write hook's state: the sum of the table's integer values, kept by
** xInit (the rows at registration) and xWrite (every committed change). */
static void totalInit(void *pArg, const depot_kv_value *pKey,
                      const depot_kv_value *pVal){
  (void)pKey;
  if( pVal->eType==SQLITE_INTEGER ) *(sqlite3_int64*)pArg += pVal->i;
}
static void totalWrite(void *pArg, const depot_kv_value *pKey,
                       const depot_kv_value *pOld, const depot_kv_value *pNew){
  (void)pKey;
  if( pOld && pOld->eType==SQLITE_INTEGER ) *(sqlite3_int64*)pArg -= pOld->i;
  if( pNew && pNew->eType==SQLITE_INTEGER ) *(sqlite3_int64*)pArg += pNew->i;
}
static const depot_kv_hook_methods totalMethods = {
  1, totalWrite, totalInit, 0, 0
};

static int run(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  if( sqlite3_exec(db, zSql, 0, 0, &zErr)!=SQLITE_OK ){
    fprintf(stderr, "c_example: %s: %s\n", zSql, zErr);
    sqlite3_free(zErr);
    return 1;
  }
  return 0;
}

/* The integer the one-row, one-column query zSql returns, -1 on error. */
static sqlite3_int64 value(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    v = sqlite3_column_int64(pStmt, 0);
  }else{
    fprintf(stderr, "c_example: %s: %s\n", zSql, sqlite3_errmsg(db));
  }
  sqlite3_finalize(pStmt);
  return v;
}

int main(int argc, char **argv){
  sqlite3 *db = 0, *pMain = 0, *pFork = 0;
  depot_kv_hook *pHook = 0;
  sqlite3_int64 iTotal = 0;
  char *z;
  int rc = 1;
  if( argc!=2 ){
    fprintf(stderr, "usage: c_example DIR\n");
    return 2;
  }
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ) return 1;

  z = sqlite3_mprintf("CREATE VIRTUAL TABLE fruit USING kv_btree(dir='%q/kv');"
                      "INSERT INTO fruit VALUES('apple', 3), ('kiwi', 5);",
                      argv[1]);
  if( run(db, z) || value(db, "SELECT sum(value) FROM fruit")!=8 ) goto done;
  sqlite3_free(z);
  z = 0;

  /* A write hook on fruit: 8 from the existing rows, then every change. */
  if( depot_kv_hook_register(db, 0, "fruit", DEPOT_KV_HOOK_NEEDS_INIT
          |DEPOT_KV_HOOK_NEEDS_WRITE|DEPOT_KV_HOOK_NEEDS_OLD_VALUE,
          &totalMethods, &iTotal, &pHook, &z)!=SQLITE_OK ){
    fprintf(stderr, "c_example: depot_kv_hook_register: %s\n", z);
    goto done;
  }
  if( run(db, "UPDATE fruit SET value=4 WHERE key='apple';"
              "INSERT INTO fruit VALUES('fig', 2);") ) goto done;
  if( iTotal!=11 || value(db, "SELECT sum(value) FROM fruit")!=11 ){
    fprintf(stderr, "c_example: the hook's total is %lld, not 11\n",
            (long long)iTotal);
    goto done;
  }
  depot_kv_hook_unregister(pHook);
  pHook = 0;

  /* A depot database: store DIR/app.depot, database app, branch main. */
  z = sqlite3_mprintf("file:%s/app.depot?vfs=depot&db=app", argv[1]);
  if( sqlite3_open_v2(z, &pMain, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, 0)!=SQLITE_OK ) goto done;
  sqlite3_free(z);
  z = 0;
  if( run(pMain, "CREATE TABLE t(x); INSERT INTO t VALUES(1);") ) goto done;

  z = sqlite3_mprintf("SELECT depot_fork('%q/app.depot', 'app', 'main', 'dev')",
                      argv[1]);
  if( value(db, z)<=0 ) goto done;
  sqlite3_free(z);
  z = 0;
  z = sqlite3_mprintf("file:%s/app.depot?vfs=depot&db=app&branch=dev",
                      argv[1]);
  if( sqlite3_open_v2(z, &pFork, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0)
      !=SQLITE_OK ) goto done;
  if( run(pFork, "INSERT INTO t VALUES(2);") ) goto done;

  if( value(pMain, "SELECT sum(x) FROM t")!=1 ) goto done;
  if( value(pFork, "SELECT sum(x) FROM t")!=3 ) goto done;
  printf("c_example: SQLite %s; hook total %lld; branch main reads 1 row, "
         "dev 2\n", sqlite3_libversion(), (long long)iTotal);
  rc = 0;
done:
  depot_kv_hook_unregister(pHook);
  sqlite3_free(z);
  sqlite3_close(pFork);
  sqlite3_close(pMain);
  sqlite3_close(db);
  return rc;
}
