/*
** cmd_data.c -- the commands that move data in and out of a store:
**
**   depot import FILE STORE [--db NAME]     SELECT depot_import(...)
**   depot export STORE[:DB[@BRANCH]] FILE   SELECT depot_export(...)
**   depot shell STORE[:DB[@BRANCH]]         exec sqlite3 on that branch
**
** depot_import copies the file with the backup API into one write
** transaction of the target database, which is one depot commit: it is
** stored whole at the end or not at all, so an interrupted or failed
** import leaves an existing store as it was.  A store file that the
** import itself created is removed again (with its -wal and -shm).
*/
#include "config.h"
#include "ext/cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Remove the store file zStore and its -wal and -shm files. */
static void dataRemoveStore(const char *zStore){
  static const char *const azSuffix[] = { "", "-wal", "-shm", "-journal" };
  int i;
  for(i=0; i<4; i++){
    char *z = sqlite3_mprintf("%s%s", zStore, azSuffix[i]);
    if( z ) unlink(z);
    sqlite3_free(z);
  }
}

int cmd_import(Cli *p, int nArg, char **azArg){
  const char *zFile = azArg[0], *zStore = azArg[1];
  const char *zDb = cli_opt(p, "db");
  struct stat st;
  sqlite3_stmt *pStmt;
  int bNew, bStop = 0, rc;
  (void)nArg;
  if( zDb==0 ) zDb = "main";
  if( zDb[0]==0 ) return cli_usage(p, "--db needs a database name");
  out_begin(p);
  out_str(p, "file", zFile);
  out_str(p, "store", zStore);
  out_str(p, "db", zDb);
  out_str(p, "branch", "main");
  if( stat(zFile, &st)!=0 || access(zFile, R_OK)!=0 ){
    out_fail(p, "cannot read %s: %s", zFile, strerror(errno));
    return out_end(p, CLI_FAIL);
  }
  bNew = cli_store_is_file(zStore) && stat(zStore, &st)!=0;
  pStmt = cli_prepare(p, "SELECT depot_import(?1, ?2, ?3)");
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  sqlite3_bind_text(pStmt, 1, zFile, -1, SQLITE_STATIC);
  sqlite3_bind_text(pStmt, 2, zStore, -1, SQLITE_STATIC);
  sqlite3_bind_text(pStmt, 3, zDb, -1, SQLITE_STATIC);
  rc = out_run_long(p, pStmt, "pages", &bStop);
  if( rc==SQLITE_ROW ){
    sqlite3_int64 n = sqlite3_column_int64(pStmt, 0);
    char *zShow = out_store(zStore);
    sqlite3_finalize(pStmt);
    out_int(p, "pages", n);
    out_text(p, "imported %s into %s:%s@main: %lld pages\n", zFile,
             zShow ? zShow : "", zDb, n);
    sqlite3_free(zShow);
    return out_end(p, CLI_OK);
  }
  if( bStop ){
    out_fail(p, "import interrupted: nothing was stored%s", bNew ?
             " (the new store file was removed)" : "; the store is unchanged");
  }else{
    cli_sql_fail(p);
  }
  sqlite3_finalize(pStmt);
  if( bNew ) dataRemoveStore(zStore);
  return out_end(p, CLI_FAIL);
}

int cmd_export(Cli *p, int nArg, char **azArg){
  CliTarget t;
  char *zErr = 0;
  sqlite3_stmt *pStmt;
  int bStop = 0, rc;
  (void)nArg;
  if( cli_parse_target(azArg[0], &t, &zErr)!=SQLITE_OK ){
    rc = cli_usage(p, "%s", zErr);
    sqlite3_free(zErr);
    return rc;
  }
  out_begin(p);
  out_str(p, "store", t.zStore);
  out_str(p, "db", t.zDb);
  out_str(p, "branch", t.zBranch);
  out_str(p, "file", azArg[1]);
  pStmt = cli_prepare(p, "SELECT depot_export(?1, ?2, ?3, ?4)");
  if( pStmt ){
    sqlite3_bind_text(pStmt, 1, t.zStore, -1, SQLITE_STATIC);
    sqlite3_bind_text(pStmt, 2, t.zDb, -1, SQLITE_STATIC);
    sqlite3_bind_text(pStmt, 3, t.zBranch, -1, SQLITE_STATIC);
    sqlite3_bind_text(pStmt, 4, azArg[1], -1, SQLITE_STATIC);
    rc = out_run_long(p, pStmt, "pages", &bStop);
    if( rc==SQLITE_ROW ){
      sqlite3_int64 n = sqlite3_column_int64(pStmt, 0);
      char *zShow = out_store(t.zStore);
      out_int(p, "pages", n);
      out_text(p, "exported %s:%s@%s to %s: %lld pages\n", zShow ? zShow : "",
               t.zDb, t.zBranch, azArg[1], n);
      sqlite3_free(zShow);
      rc = CLI_OK;
    }else if( bStop ){
      rc = out_fail(p, "export interrupted: %s was removed", azArg[1]);
    }else{
      rc = cli_sql_fail(p);
    }
    sqlite3_finalize(pStmt);
  }else{
    rc = CLI_FAIL;
  }
  cli_target_free(&t);
  return out_end(p, rc);
}

/* Append z to s %-escaped for a URI part (bParam: a parameter value). */
static void dataUriPart(sqlite3_str *s, const char *z, int n, int bParam){
  int i;
  for(i=0; i<n; i++){
    char c = z[i];
    if( c=='?' || c=='#' || c=='%' || (bParam && (c=='&' || c=='=')) ){
      sqlite3_str_appendf(s, "%%%02X", (unsigned char)c);
    }else{
      sqlite3_str_appendchar(s, 1, c);
    }
  }
}

/* The file: URI of the target's branch (sqlite3_malloc'd). */
static char *dataUri(const CliTarget *t){
  sqlite3_str *s = sqlite3_str_new(0);
  const char *zSlash = strchr(t->zDb, '/');
  const char *zDb = zSlash ? zSlash+1 : t->zDb;
  sqlite3_str_appendall(s, "file:");
  dataUriPart(s, t->zStore, (int)strlen(t->zStore), 0);
  sqlite3_str_appendall(s, "?vfs=depot");
  if( zSlash ){
    sqlite3_str_appendall(s, "&bucket=");
    dataUriPart(s, t->zDb, (int)(zSlash-t->zDb), 1);
  }
  sqlite3_str_appendall(s, "&db=");
  dataUriPart(s, zDb, (int)strlen(zDb), 1);
  sqlite3_str_appendall(s, "&branch=");
  dataUriPart(s, t->zBranch, (int)strlen(t->zBranch), 1);
  return sqlite3_str_finish(s);
}

/* A shell dot-command argument: z in double quotes, with \ and " escaped. */
static char *dataDotArg(const char *z){
  sqlite3_str *s = sqlite3_str_new(0);
  sqlite3_str_appendchar(s, 1, '"');
  for(; *z; z++){
    if( *z=='"' || *z=='\\' ) sqlite3_str_appendchar(s, 1, '\\');
    sqlite3_str_appendchar(s, 1, *z);
  }
  sqlite3_str_appendchar(s, 1, '"');
  return sqlite3_str_finish(s);
}

/* Does the module zMod exist, as named or with the suffix .load adds? */
static int dataModuleExists(const char *zMod){
  static const char *const azSuffix[] = { "", ".so", ".dylib" };
  struct stat st;
  int i, bFound = 0;
  for(i=0; i<3 && !bFound; i++){
    char *z = sqlite3_mprintf("%s%s", zMod, azSuffix[i]);
    bFound = z && stat(z, &st)==0 && S_ISREG(st.st_mode);
    sqlite3_free(z);
  }
  return bFound;
}

int cmd_shell(Cli *p, int nArg, char **azArg){
  CliTarget t;
  char *zErr = 0, *zUri, *zLoad = 0, *zOpen = 0, *zMod, *zArg;
  const char *zEnv = getenv("DEPOT_MODULE");
  struct stat st;
  int rc;
  (void)nArg;
  if( cli_parse_target(azArg[0], &t, &zErr)!=SQLITE_OK ){
    rc = cli_usage(p, "%s", zErr);
    sqlite3_free(zErr);
    return rc;
  }
  zUri = dataUri(&t);
  zMod = zEnv && zEnv[0] ? sqlite3_mprintf("%s", zEnv)
                         : sqlite3_mprintf("%s/depot", DEPOT_MODULE_DIR);
  zArg = zMod ? dataDotArg(zMod) : 0;
  if( zArg ) zLoad = sqlite3_mprintf(".load %s", zArg);
  sqlite3_free(zArg);
  zArg = zUri ? dataDotArg(zUri) : 0;
  if( zArg ) zOpen = sqlite3_mprintf(".open %s", zArg);
  sqlite3_free(zArg);
  out_begin(p);
  out_str(p, "store", t.zStore);
  out_str(p, "db", t.zDb);
  out_str(p, "branch", t.zBranch);
  out_str(p, "uri", zUri);
  out_str(p, "module", zMod);
  if( zLoad==0 || zOpen==0 ){
    rc = out_fail(p, "out of memory");
  }else if( cli_store_is_file(t.zStore) && stat(t.zStore, &st)!=0 ){
    rc = out_fail(p, "no store file %s", t.zStore);
  }else if( !dataModuleExists(zMod) ){
    rc = out_fail(p, "no depot module at %s (install it, or set"
                  " DEPOT_MODULE to its path)", zMod);
  }else if( p->bJson ){
    rc = CLI_OK;                  /* --json: say what would run, no shell */
  }else{
    char *azExec[8];
    azExec[0] = "sqlite3";
    azExec[1] = "-cmd";
    azExec[2] = zLoad;
    azExec[3] = "-cmd";
    azExec[4] = zOpen;
    azExec[5] = ":memory:";
    azExec[6] = 0;
    fflush(stdout);
    execvp("sqlite3", azExec);
    rc = out_fail(p, "cannot run the sqlite3 shell: %s (is sqlite3"
                  " installed and on PATH?)", strerror(errno));
  }
  sqlite3_free(zUri);
  sqlite3_free(zMod);
  sqlite3_free(zLoad);
  sqlite3_free(zOpen);
  cli_target_free(&t);
  return out_end(p, rc);
}
