/*
** args.c -- argument checks and error results shared by the SQL functions
** and listings of ext/ (declared in ext/depot_int.h).
**
** One definition each of what an argument must be, so that every function
** accepts the same values and words its refusal the same way:
**
**   depot_value_int64   an integer, or a real with an integral value (the
**                       form JavaScript hosts bind every number in)
**   depot_text_value    non-empty text without NUL bytes (store paths,
**                       database, branch and bucket names)
**   depot_text_arg      the same, with the error "depot: F: W must be
**                       non-empty text" set on the function's context
**   depot_text_args     the text arguments of a depot listing, with the
**                       error "depot: argument N must be non-empty text"
**   depot_result_error  a depot_* function's error: message and code
**
** This file calls nothing else of ext/; every SQL-facing file of ext/
** may call it.
*/
#include "config.h"
#include "ext/depot_int.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

int depot_value_int64(sqlite3_value *v, sqlite3_int64 *piOut){
  double r;
  switch( sqlite3_value_type(v) ){
    case SQLITE_INTEGER:
      *piOut = sqlite3_value_int64(v);
      return 1;
    case SQLITE_FLOAT:
      r = sqlite3_value_double(v);
      if( r>=-9223372036854775808.0 && r<9223372036854775808.0
       && r==(double)(sqlite3_int64)r ){
        *piOut = (sqlite3_int64)r;
        return 1;
      }
      break;
  }
  return 0;
}

const char *depot_text_value(sqlite3_value *v){
  const char *z;
  if( sqlite3_value_type(v)!=SQLITE_TEXT ) return 0;
  z = (const char*)sqlite3_value_text(v);
  if( z==0 || z[0]==0 || (int)strlen(z)!=sqlite3_value_bytes(v) ) return 0;
  return z;
}

const char *depot_text_arg(sqlite3_context *ctx, sqlite3_value *v,
                           const char *zFunc, const char *zWhat){
  const char *z = depot_text_value(v);
  if( z==0 ){
    char *zMsg = sqlite3_mprintf("depot: %s: %s must be non-empty text",
                                 zFunc, zWhat);
    sqlite3_result_error(ctx, zMsg, -1);
    sqlite3_free(zMsg);
  }
  return z;
}

int depot_text_args(sqlite3_value **apArg, int nArg, int nNotNull,
                    const char **az, char **pzErr){
  int i;
  for(i=0; i<nArg; i++){
    az[i] = 0;
    if( apArg[i]==0 ) continue;
    if( i>0 && i>=nNotNull && sqlite3_value_type(apArg[i])==SQLITE_NULL ){
      continue;
    }
    if( (az[i] = depot_text_value(apArg[i]))==0 ){
      *pzErr = sqlite3_mprintf("depot: argument %d must be non-empty text",
                               i+1);
      return SQLITE_ERROR;
    }
  }
  return SQLITE_OK;
}

void depot_result_error(sqlite3_context *ctx, int rc, char *zErr){
  sqlite3_result_error(ctx, zErr ? zErr : "depot: out of memory", -1);
  if( (rc&0xff)!=SQLITE_ERROR ) sqlite3_result_error_code(ctx, rc);
  sqlite3_free(zErr);
}

int depot_sql_text(sqlite3 *db, const char *zSql, const char *z1,
                   const char *z2, char **pz){
  sqlite3_stmt *pStmt = 0;
  int rc;
  *pz = 0;
  if( db==0 ) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  if( rc!=SQLITE_OK ) return rc;
  if( z1 ) sqlite3_bind_text(pStmt, 1, z1, -1, SQLITE_STATIC);
  if( z2 ) sqlite3_bind_text(pStmt, 2, z2, -1, SQLITE_STATIC);
  rc = sqlite3_step(pStmt);
  if( rc==SQLITE_ROW ){
    const char *z = (const char*)sqlite3_column_text(pStmt, 0);
    rc = SQLITE_OK;
    if( z && (*pz = sqlite3_mprintf("%s", z))==0 ) rc = SQLITE_NOMEM;
  }else if( rc==SQLITE_DONE ){
    rc = SQLITE_OK;
  }
  sqlite3_finalize(pStmt);
  return rc;
}

int depot_json_text(sqlite3 *db, const char *zJson, const char *zPath,
                    char **pz){
  return depot_sql_text(db, "SELECT CASE WHEN json_valid(?1) THEN "
                        "json_extract(?1, ?2) END", zJson, zPath, pz);
}
