/*
** cmd_branch.c -- the commands on branches and their history:
**
**   depot branches STORE [DB]                  depot_branches
**   depot fork STORE DB FROM NEW [--at AT]     depot_fork
**   depot log STORE DB [BRANCH] [--limit N]    depot_commits, newest first
**   depot restore-point STORE DB BRANCH NAME   depot_restore_point
**   depot restore STORE DB BRANCH --at AT      depot_restore
**   depot rollback STORE DB BRANCH [--at AT]   depot_rollback
**   depot drop-branch STORE DB BRANCH|--id N   depot_drop_branch
*/
#include "config.h"
#include "ext/cli/cli.h"

#include <stdlib.h>
#include <string.h>

/* Prepare zSql and bind the texts azBind[0..nBind-1] to ?1.. (a NULL
** binds NULL). */
static sqlite3_stmt *branchStmt(Cli *p, const char *zSql, int nBind,
                                const char *const *azBind){
  sqlite3_stmt *pStmt = cli_prepare(p, zSql);
  int i;
  for(i=0; pStmt && i<nBind; i++){
    sqlite3_bind_text(pStmt, i+1, azBind[i], -1, SQLITE_STATIC);
  }
  return pStmt;
}

/* Step pStmt once for a one-value result: SQLITE_ROW, else report. */
static int branchStep(Cli *p, sqlite3_stmt *pStmt){
  int rc = sqlite3_step(pStmt);
  if( rc!=SQLITE_ROW ) cli_sql_fail(p);
  return rc;
}

static void branchNames(Cli *p, const char *zStore, const char *zDb,
                        const char *zBranch){
  out_begin(p);
  out_str(p, "store", zStore);
  if( zDb ) out_str(p, "db", zDb);
  if( zBranch ) out_str(p, "branch", zBranch);
}

int cmd_branches(Cli *p, int nArg, char **azArg){
  const char *az[2];
  sqlite3_stmt *pStmt;
  int nRow = 0, rc;
  az[0] = azArg[0];
  az[1] = nArg>1 ? azArg[1] : 0;
  branchNames(p, az[0], az[1], 0);
  pStmt = branchStmt(p, "SELECT database AS db, branch, branch_id, parent,"
      " fork_txid, head_txid, state, logical_size AS logical_bytes,"
      " stored_bytes, bucket, pins FROM depot_branches(?1, ?2)", 2, az);
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  rc = out_rows(p, "branches", pStmt, 1, &nRow);
  if( rc!=SQLITE_OK ) rc = cli_sql_fail(p);
  else if( nRow==0 ) out_text(p, "no branches\n");
  sqlite3_finalize(pStmt);
  return out_end(p, rc==SQLITE_OK ? CLI_OK : CLI_FAIL);
}

/* Bind --at (if given) to parameter i; CLI_OK or CLI_USAGE. */
static int branchAt(Cli *p, sqlite3_stmt *pStmt, int i, const char *zAt){
  char *zErr = 0;
  int rc;
  if( zAt==0 ) return CLI_OK;
  if( zAt[0]==0 ) return cli_usage(p, "--at needs a txid, a time or a"
                                   " restore point name");
  if( cli_bind_at(pStmt, i, zAt, &zErr)==SQLITE_OK ) return CLI_OK;
  rc = cli_usage(p, "%s", zErr);
  sqlite3_free(zErr);
  return rc;
}

int cmd_fork(Cli *p, int nArg, char **azArg){
  const char *zAt = cli_opt(p, "at");
  sqlite3_stmt *pStmt;
  int rc;
  (void)nArg;
  pStmt = branchStmt(p, zAt ? "SELECT depot_fork(?1, ?2, ?3, ?4, ?5)"
                            : "SELECT depot_fork(?1, ?2, ?3, ?4)",
                     4, (const char *const*)azArg);
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  if( (rc = branchAt(p, pStmt, 5, zAt))!=CLI_OK ){
    sqlite3_finalize(pStmt);
    return rc;
  }
  branchNames(p, azArg[0], azArg[1], azArg[3]);
  out_str(p, "from", azArg[2]);
  out_str(p, "at", zAt);
  rc = CLI_FAIL;
  if( branchStep(p, pStmt)==SQLITE_ROW ){
    sqlite3_int64 id = sqlite3_column_int64(pStmt, 0);
    out_int(p, "branch_id", id);
    out_text(p, "forked %s@%s%s%s as %s (branch id %lld)\n", azArg[1],
             azArg[2], zAt ? " at " : "", zAt ? zAt : "", azArg[3], id);
    rc = CLI_OK;
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}

int cmd_log(Cli *p, int nArg, char **azArg){
  const char *zLimit = cli_opt(p, "limit");
  const char *az[3];
  sqlite3_stmt *pStmt;
  sqlite3_int64 nLimit = 20;
  int nRow = 0, rc;
  if( zLimit ){
    char *zEnd = 0;
    nLimit = strtoll(zLimit, &zEnd, 10);
    if( zLimit[0]==0 || *zEnd || nLimit<0 ){
      return cli_usage(p, "--limit must be an integer >= 0, got '%s'",
                       zLimit);
    }
  }
  az[0] = azArg[0];
  az[1] = azArg[1];
  az[2] = nArg>2 ? azArg[2] : "main";
  branchNames(p, az[0], az[1], az[2]);
  pStmt = branchStmt(p, "SELECT txid, replace(time, ' ', 'T') || 'Z' AS time,"
      " db_pages, page_size, pages_written, bytes_stored, checksum"
      " FROM depot_commits(?1, ?2, ?3) ORDER BY txid DESC LIMIT ?4", 3, az);
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  sqlite3_bind_int64(pStmt, 4, nLimit ? nLimit : -1);
  rc = out_rows(p, "commits", pStmt, 1, &nRow);
  if( rc!=SQLITE_OK ) rc = cli_sql_fail(p);
  else if( nRow==0 ) out_text(p, "no commits\n");
  sqlite3_finalize(pStmt);
  return out_end(p, rc==SQLITE_OK ? CLI_OK : CLI_FAIL);
}

int cmd_restore_point(Cli *p, int nArg, char **azArg){
  sqlite3_stmt *pStmt;
  int rc = CLI_FAIL;
  (void)nArg;
  branchNames(p, azArg[0], azArg[1], azArg[2]);
  out_str(p, "restore_point", azArg[3]);
  pStmt = branchStmt(p, "SELECT depot_restore_point(?1, ?2, ?3, ?4)", 4,
                     (const char *const*)azArg);
  if( pStmt && branchStep(p, pStmt)==SQLITE_ROW ){
    out_text(p, "restore point %s pins the head of %s@%s\n", azArg[3],
             azArg[1], azArg[2]);
    rc = CLI_OK;
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}

int cmd_restore(Cli *p, int nArg, char **azArg){
  const char *zAt = cli_opt(p, "at");
  sqlite3_stmt *pStmt;
  int rc;
  (void)nArg;
  if( zAt==0 ) return cli_usage(p, "restore needs --at AT (a txid, a time"
                                " or a restore point)");
  pStmt = branchStmt(p, "SELECT depot_restore(?1, ?2, ?3, ?4)", 3,
                     (const char *const*)azArg);
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  if( (rc = branchAt(p, pStmt, 4, zAt))!=CLI_OK ){
    sqlite3_finalize(pStmt);
    return rc;
  }
  branchNames(p, azArg[0], azArg[1], azArg[2]);
  out_str(p, "at", zAt);
  rc = CLI_FAIL;
  if( branchStep(p, pStmt)==SQLITE_ROW ){
    const char *zUndo = (const char*)sqlite3_column_text(pStmt, 0);
    out_str(p, "undo_point", zUndo);
    out_text(p, "restored %s@%s to %s; undo with --at %s\n", azArg[1],
             azArg[2], zAt, zUndo);
    rc = CLI_OK;
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}

int cmd_rollback(Cli *p, int nArg, char **azArg){
  const char *zAt = cli_opt(p, "at");
  sqlite3_stmt *pStmt;
  int rc;
  (void)nArg;
  pStmt = branchStmt(p, zAt ? "SELECT depot_rollback(?1, ?2, ?3, ?4)"
                            : "SELECT depot_rollback(?1, ?2, ?3)",
                     3, (const char *const*)azArg);
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  if( (rc = branchAt(p, pStmt, 4, zAt))!=CLI_OK ){
    sqlite3_finalize(pStmt);
    return rc;
  }
  branchNames(p, azArg[0], azArg[1], azArg[2]);
  out_str(p, "at", zAt);
  rc = CLI_FAIL;
  if( branchStep(p, pStmt)==SQLITE_ROW ){
    sqlite3_int64 id = sqlite3_column_int64(pStmt, 0);
    out_int(p, "branch_id", id);
    if( zAt ){
      out_text(p, "rolled %s@%s back to %s (branch id %lld)\n", azArg[1],
               azArg[2], zAt, id);
    }else{
      out_text(p, "undid the last move of %s@%s (branch id %lld)\n",
               azArg[1], azArg[2], id);
    }
    rc = CLI_OK;
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}

int cmd_drop_branch(Cli *p, int nArg, char **azArg){
  const char *zId = cli_opt(p, "id");
  sqlite3_stmt *pStmt;
  sqlite3_int64 iId = 0;
  int rc = CLI_FAIL;
  if( (zId!=0)==(nArg==3) ){
    return cli_usage(p, "drop-branch takes BRANCH or --id N (one of them)");
  }
  if( zId ){
    char *zEnd = 0;
    iId = strtoll(zId, &zEnd, 10);
    if( zId[0]==0 || *zEnd || iId<=0 ){
      return cli_usage(p, "--id must be a branch id (an integer > 0), got"
                       " '%s'", zId);
    }
  }
  branchNames(p, azArg[0], azArg[1], zId ? 0 : azArg[2]);
  if( zId ) out_int(p, "branch_id", iId);
  pStmt = branchStmt(p, "SELECT depot_drop_branch(?1, ?2, ?3)", 2,
                     (const char *const*)azArg);
  if( pStmt ){
    if( zId ) sqlite3_bind_int64(pStmt, 3, iId);
    else sqlite3_bind_text(pStmt, 3, azArg[2], -1, SQLITE_STATIC);
    if( branchStep(p, pStmt)==SQLITE_ROW ){
      if( zId ) out_text(p, "dropped branch %lld of %s\n", iId, azArg[1]);
      else out_text(p, "dropped %s@%s\n", azArg[1], azArg[2]);
      rc = CLI_OK;
    }
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}
