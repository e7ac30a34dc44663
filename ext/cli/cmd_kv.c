/*
** cmd_kv.c -- the commands on KV stores (a directory of KV tables):
**
**   depot kv tables DIR              kv_begin + kv_tables
**   depot kv stats DIR               kv_begin + kv_stats
**   depot kv get DIR TABLE KEY       a read of the table
**   depot kv put DIR TABLE KEY VAL   kv_begin, kv_put, kv_commit
**   depot kv dump DIR TABLE          every row, in key order
**
** The store is opened by a transaction handle (kv_begin), which the
** program holds while it reads; get and dump read through a virtual table
** of the table's own type made in the temp schema of the program's
** in-memory connection (it attaches to the existing KV table; nothing is
** ever dropped, so the table is never removed from the store).  Keys and
** values are text unless --key-type / --value-type say otherwise.
*/
#include "config.h"
#include "ext/cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A KV store must exist for every command but put --create. */
static int kvCheckDir(Cli *p, const char *zDir, int bMayCreate){
  struct stat st;
  char *zWal = sqlite3_mprintf("%s/wal", zDir);
  int bStore = zWal && stat(zDir, &st)==0 && S_ISDIR(st.st_mode)
            && stat(zWal, &st)==0;
  sqlite3_free(zWal);
  if( bStore || bMayCreate ) return CLI_OK;
  return out_fail(p, "no KV store at %s", zDir);
}

/* kv_begin(zDir): the handle, or 0 after reporting the error. */
static sqlite3_int64 kvBegin(Cli *p, const char *zDir){
  sqlite3_stmt *pStmt = cli_prepare(p, "SELECT kv_begin(?1)");
  sqlite3_int64 h = 0;
  if( pStmt==0 ) return 0;
  sqlite3_bind_text(pStmt, 1, zDir, -1, SQLITE_STATIC);
  if( sqlite3_step(pStmt)==SQLITE_ROW ) h = sqlite3_column_int64(pStmt, 0);
  else cli_sql_fail(p);
  sqlite3_finalize(pStmt);
  return h;
}

/* Run "SELECT f(h)" for f kv_rollback or kv_commit; SQLITE_OK or error
** (reported). */
static int kvEnd(Cli *p, sqlite3_int64 h, const char *zFunc){
  char *zSql = sqlite3_mprintf("SELECT %s(%lld)", zFunc, h);
  int rc = zSql ? sqlite3_exec(p->db, zSql, 0, 0, 0) : SQLITE_NOMEM;
  sqlite3_free(zSql);
  if( rc!=SQLITE_OK ) cli_sql_fail(p);
  return rc;
}

/* A listing of the open store (only this one is open in the process). */
static int kvListing(Cli *p, const char *zDir, const char *zKey,
                     const char *zSql){
  sqlite3_stmt *pStmt;
  sqlite3_int64 h;
  int nRow = 0, rc = CLI_FAIL;
  out_begin(p);
  out_str(p, "dir", zDir);
  if( kvCheckDir(p, zDir, 0)!=CLI_OK ) return out_end(p, CLI_FAIL);
  if( (h = kvBegin(p, zDir))==0 ) return out_end(p, CLI_FAIL);
  pStmt = cli_prepare(p, zSql);
  if( pStmt ){
    if( out_rows(p, zKey, pStmt, 1, &nRow)!=SQLITE_OK ) cli_sql_fail(p);
    else rc = CLI_OK;
    sqlite3_finalize(pStmt);
  }
  if( kvEnd(p, h, "kv_rollback")!=SQLITE_OK ) rc = CLI_FAIL;
  if( rc==CLI_OK && nRow==0 ) out_text(p, "no tables\n");
  return out_end(p, rc);
}

int cmd_kv_tables(Cli *p, int nArg, char **azArg){
  (void)nArg;
  return kvListing(p, azArg[0], "tables", "SELECT name, type, persistence,"
                   " rows FROM kv_tables ORDER BY name");
}

int cmd_kv_stats(Cli *p, int nArg, char **azArg){
  (void)nArg;
  return kvListing(p, azArg[0], "stats", "SELECT tbl AS \"table\", type,"
      " row_count, stored_bytes, overlay_entries, pending_confirmations,"
      " collector_errors, last_error, wal_segments, wal_unconfirmed"
      " FROM kv_stats");
}

/* Bind z as parameter i, typed by zType (NULL: text).  CLI_OK or
** CLI_USAGE. */
static int kvBindTyped(Cli *p, sqlite3_stmt *pStmt, int i, const char *z,
                       const char *zType, int bValue){
  char *zEnd = 0;
  if( zType==0 || strcmp(zType, "text")==0 ){
    sqlite3_bind_text(pStmt, i, z, -1, SQLITE_STATIC);
  }else if( strcmp(zType, "int")==0 ){
    long long v = strtoll(z, &zEnd, 10);
    if( z[0]==0 || *zEnd ) return cli_usage(p, "'%s' is not an integer", z);
    sqlite3_bind_int64(pStmt, i, v);
  }else if( strcmp(zType, "real")==0 ){
    double v = strtod(z, &zEnd);
    if( z[0]==0 || *zEnd ) return cli_usage(p, "'%s' is not a number", z);
    sqlite3_bind_double(pStmt, i, v);
  }else if( strcmp(zType, "hex")==0 ){
    size_t j, n = strlen(z);
    unsigned char *a = sqlite3_malloc64(n/2+1);
    if( a==0 ) return out_fail(p, "out of memory");
    for(j=0; j+1<n || j<n; j+=2){
      unsigned int b;
      if( j+1>=n || sscanf(z+j, "%2x", &b)!=1
       || !strchr("0123456789abcdefABCDEF", z[j+1]) ){
        sqlite3_free(a);
        return cli_usage(p, "'%s' is not an even number of hex digits", z);
      }
      a[j/2] = (unsigned char)b;
    }
    sqlite3_bind_blob(pStmt, i, a, (int)(n/2), sqlite3_free);
  }else if( bValue && strcmp(zType, "null")==0 ){
    sqlite3_bind_null(pStmt, i);
  }else{
    return cli_usage(p, "unknown %s type '%s' (text, int, real, hex%s)",
                     bValue ? "value" : "key", zType, bValue ? ", null" : "");
  }
  return CLI_OK;
}

/* Attach temp."TABLE" to the KV table of store zDir (its own type):
** CLI_OK, or CLI_FAIL after reporting (no such table). */
static int kvAttach(Cli *p, sqlite3_int64 h, const char *zDir,
                    const char *zTable){
  sqlite3_stmt *pStmt = cli_prepare(p, "SELECT json_extract(kv_table_meta("
                                       "?1, ?2), '$.type')");
  char *zType = 0, *zSql;
  int rc;
  if( pStmt==0 ) return CLI_FAIL;
  sqlite3_bind_int64(pStmt, 1, h);
  sqlite3_bind_text(pStmt, 2, zTable, -1, SQLITE_STATIC);
  rc = sqlite3_step(pStmt);
  if( rc==SQLITE_ROW && sqlite3_column_type(pStmt, 0)==SQLITE_TEXT ){
    zType = sqlite3_mprintf("%s", sqlite3_column_text(pStmt, 0));
  }else if( rc!=SQLITE_ROW ){
    cli_sql_fail(p);
    sqlite3_finalize(pStmt);
    return CLI_FAIL;
  }
  sqlite3_finalize(pStmt);
  if( zType==0 ) return out_fail(p, "kv: no such table: %s", zTable);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE temp.\"%w\" USING %s(dir=%Q)",
                         zTable, zType, zDir);
  rc = zSql ? sqlite3_exec(p->db, zSql, 0, 0, 0) : SQLITE_NOMEM;
  sqlite3_free(zSql);
  sqlite3_free(zType);
  if( rc!=SQLITE_OK ) return cli_sql_fail(p);
  return CLI_OK;
}

#define KV_TEXT(c) "CASE typeof(" c ") WHEN 'blob' THEN 'x''' || hex(" c ")" \
  " || '''' WHEN 'null' THEN 'NULL' ELSE " c " END"
#define KV_JSON(c) "CASE typeof(" c ") WHEN 'blob' THEN json_quote('x''' ||" \
  " hex(" c ") || '''') ELSE json_quote(" c ") END"

int cmd_kv_get(Cli *p, int nArg, char **azArg){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 h;
  char *zSql;
  int rc;
  (void)nArg;
  out_begin(p);
  out_str(p, "dir", azArg[0]);
  out_str(p, "table", azArg[1]);
  out_str(p, "key", azArg[2]);
  if( kvCheckDir(p, azArg[0], 0)!=CLI_OK ) return out_end(p, CLI_FAIL);
  if( (h = kvBegin(p, azArg[0]))==0 ) return out_end(p, CLI_FAIL);
  rc = kvAttach(p, h, azArg[0], azArg[1]);
  if( rc==CLI_OK ){
    zSql = sqlite3_mprintf("SELECT " KV_TEXT("value") ", " KV_JSON("value")
                           " FROM temp.\"%w\" WHERE key=?1", azArg[1]);
    pStmt = zSql ? cli_prepare(p, zSql) : 0;
    sqlite3_free(zSql);
    if( pStmt==0 ) rc = CLI_FAIL;
  }
  if( rc==CLI_OK ){
    rc = kvBindTyped(p, pStmt, 1, azArg[2], cli_opt(p, "key-type"), 0);
  }
  if( rc==CLI_OK ){
    int e = sqlite3_step(pStmt);
    if( e==SQLITE_ROW ){
      out_json(p, "value", (const char*)sqlite3_column_text(pStmt, 1));
      out_text(p, "%s\n", sqlite3_column_text(pStmt, 0));
    }else if( e==SQLITE_DONE ){
      rc = out_fail(p, "kv: no key %s in table %s", azArg[2], azArg[1]);
    }else{
      rc = cli_sql_fail(p);
    }
  }
  sqlite3_finalize(pStmt);
  if( rc!=CLI_USAGE ) kvEnd(p, h, "kv_rollback");
  return rc==CLI_USAGE ? rc : out_end(p, rc);
}

int cmd_kv_put(Cli *p, int nArg, char **azArg){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 h;
  int rc, bCreate = cli_opt(p, "create")!=0;
  (void)nArg;
  pStmt = cli_prepare(p, "SELECT CASE WHEN ?5 AND kv_table_meta(?1, ?2)"
      " IS NULL THEN kv_create_table(?1, ?2, 'kv_btree') END,"
      " kv_put(?1, ?2, ?3, ?4)");
  if( pStmt==0 ) return CLI_FAIL;
  rc = kvBindTyped(p, pStmt, 3, azArg[2], cli_opt(p, "key-type"), 0);
  if( rc==CLI_OK ){
    rc = kvBindTyped(p, pStmt, 4, azArg[3], cli_opt(p, "value-type"), 1);
  }
  if( rc!=CLI_OK ){
    sqlite3_finalize(pStmt);
    return rc;
  }
  out_begin(p);
  out_str(p, "dir", azArg[0]);
  out_str(p, "table", azArg[1]);
  out_str(p, "key", azArg[2]);
  if( kvCheckDir(p, azArg[0], bCreate)!=CLI_OK
   || (h = kvBegin(p, azArg[0]))==0 ){
    sqlite3_finalize(pStmt);
    return out_end(p, CLI_FAIL);
  }
  sqlite3_bind_int64(pStmt, 1, h);
  sqlite3_bind_text(pStmt, 2, azArg[1], -1, SQLITE_STATIC);
  sqlite3_bind_int(pStmt, 5, bCreate);
  if( sqlite3_step(pStmt)!=SQLITE_ROW ){
    rc = cli_sql_fail(p);
    sqlite3_finalize(pStmt);
    kvEnd(p, h, "kv_rollback");
  }else{
    sqlite3_finalize(pStmt);
    rc = kvEnd(p, h, "kv_commit")==SQLITE_OK ? CLI_OK : CLI_FAIL;
    if( rc==CLI_OK ) out_text(p, "put %s in %s\n", azArg[2], azArg[1]);
  }
  return out_end(p, rc);
}

int cmd_kv_dump(Cli *p, int nArg, char **azArg){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 h;
  char *zSql;
  int rc, nRow = 0;
  (void)nArg;
  out_begin(p);
  out_str(p, "dir", azArg[0]);
  out_str(p, "table", azArg[1]);
  if( kvCheckDir(p, azArg[0], 0)!=CLI_OK ) return out_end(p, CLI_FAIL);
  if( (h = kvBegin(p, azArg[0]))==0 ) return out_end(p, CLI_FAIL);
  rc = kvAttach(p, h, azArg[0], azArg[1]);
  if( rc==CLI_OK ){
    zSql = p->bJson
      ? sqlite3_mprintf("SELECT key, value FROM temp.\"%w\" ORDER BY key",
                        azArg[1])
      : sqlite3_mprintf("SELECT " KV_TEXT("key") ", " KV_TEXT("value")
                        " FROM temp.\"%w\" ORDER BY key", azArg[1]);
    pStmt = zSql ? cli_prepare(p, zSql) : 0;
    sqlite3_free(zSql);
    if( pStmt==0 ) rc = CLI_FAIL;
  }
  if( rc==CLI_OK && p->bJson ){
    if( out_rows(p, "rows", pStmt, 0, &nRow)!=SQLITE_OK ) rc = cli_sql_fail(p);
  }else if( rc==CLI_OK ){
    int e;
    while( (e = sqlite3_step(pStmt))==SQLITE_ROW ){
      out_text(p, "%s\t%s\n", sqlite3_column_text(pStmt, 0),
               sqlite3_column_text(pStmt, 1));
    }
    if( e!=SQLITE_DONE ) rc = cli_sql_fail(p);
  }
  sqlite3_finalize(pStmt);
  kvEnd(p, h, "kv_rollback");
  return out_end(p, rc);
}
