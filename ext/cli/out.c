/*
** out.c -- what the `depot` program prints: text results on stdout, one
** JSON document per command with --json, "depot: ..." errors on stderr,
** and the progress bar of long operations on stderr when it is a
** terminal (pages or units done of the total, bytes per second, time
** left), redrawn at most ten times a second and erased at the end.
**
** Long operations run with SIGINT and SIGTERM caught: the handler only
** sets a flag, which the progress hook (vfs/depot_vfs.h) returns, so the
** operation stops at its next report and undoes its unfinished part.
*/
#include "config.h"
#include "ext/cli/cli.h"
#include "vfs/depot_vfs.h"
#include "vfs/store/store.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

/* ---- JSON document ---- */

char *out_quote(const char *z){
  sqlite3_str *p = sqlite3_str_new(0);
  const unsigned char *s = (const unsigned char*)z;
  sqlite3_str_appendchar(p, 1, '"');
  for(; *s; s++){
    if( *s=='"' || *s=='\\' ){
      sqlite3_str_appendf(p, "\\%c", *s);
    }else if( *s=='\n' ){
      sqlite3_str_appendall(p, "\\n");
    }else if( *s=='\t' ){
      sqlite3_str_appendall(p, "\\t");
    }else if( *s<0x20 ){
      sqlite3_str_appendf(p, "\\u%04x", *s);
    }else{
      sqlite3_str_appendchar(p, 1, (char)*s);
    }
  }
  sqlite3_str_appendchar(p, 1, '"');
  return sqlite3_str_finish(p);
}

static void outKey(Cli *p, const char *zKey){
  if( !p->bJsonFirst ) sqlite3_str_appendchar(p->pJson, 1, ',');
  p->bJsonFirst = 0;
  sqlite3_str_appendf(p->pJson, "\"%s\":", zKey);
}

void out_begin(Cli *p){
  char *z;
  if( !p->bJson || p->pJson ) return;
  p->pJson = sqlite3_str_new(0);
  p->bJsonFirst = 1;
  sqlite3_str_appendchar(p->pJson, 1, '{');
  z = out_quote(p->zCmd);
  outKey(p, "command");
  sqlite3_str_appendall(p->pJson, z ? z : "\"\"");
  sqlite3_free(z);
}

char *out_store(const char *zStore){
  if( store_is_pg_uri(zStore) ) return store_pg_redact(zStore);
  return sqlite3_mprintf("%s", zStore);
}

void out_str(Cli *p, const char *zKey, const char *zVal){
  char *z, *zShow = 0;
  if( !p->bJson ) return;
  out_begin(p);
  outKey(p, zKey);
  if( zVal==0 ){
    sqlite3_str_appendall(p->pJson, "null");
    return;
  }
  if( strcmp(zKey, "store")==0 ) zVal = zShow = out_store(zVal);
  z = zVal ? out_quote(zVal) : 0;
  sqlite3_str_appendall(p->pJson, z ? z : "null");
  sqlite3_free(z);
  sqlite3_free(zShow);
}

void out_int(Cli *p, const char *zKey, sqlite3_int64 iVal){
  if( !p->bJson ) return;
  out_begin(p);
  outKey(p, zKey);
  sqlite3_str_appendf(p->pJson, "%lld", iVal);
}

void out_json(Cli *p, const char *zKey, const char *zJson){
  if( !p->bJson ) return;
  out_begin(p);
  outKey(p, zKey);
  sqlite3_str_appendall(p->pJson, zJson ? zJson : "null");
}

int out_end(Cli *p, int rc){
  char *z;
  if( !p->bJson ) return rc;
  out_begin(p);
  out_int(p, "exit_code", rc);
  sqlite3_str_appendchar(p->pJson, 1, '}');
  z = sqlite3_str_finish(p->pJson);
  p->pJson = 0;
  if( z ) printf("%s\n", z);
  sqlite3_free(z);
  fflush(stdout);
  return rc;
}

void out_text(Cli *p, const char *zFmt, ...){
  va_list ap;
  if( p->bJson || p->bQuiet ) return;
  va_start(ap, zFmt);
  vprintf(zFmt, ap);
  va_end(ap);
}

int out_fail(Cli *p, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  fprintf(stderr, "depot: %s\n", z ? z : "out of memory");
  out_str(p, "error", z ? z : "out of memory");
  sqlite3_free(z);
  return CLI_FAIL;
}

sqlite3_stmt *cli_prepare(Cli *p, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  if( sqlite3_prepare_v2(p->db, zSql, -1, &pStmt, 0)!=SQLITE_OK ){
    cli_sql_fail(p);
    return 0;
  }
  return pStmt;
}

/* The extension's messages already start with "depot: " or "kv: ". */
int cli_sql_fail(Cli *p){
  const char *z = sqlite3_errmsg(p->db);
  if( strncmp(z, "depot: ", 7)==0 ) z += 7;
  return out_fail(p, "%s", z);
}

/* ---- rows ---- */

/* Text of cell i: integers and text as they are, reals %g, blobs x'..',
** NULL as the empty string (text tables) */
static char *outCell(sqlite3_stmt *pStmt, int i){
  switch( sqlite3_column_type(pStmt, i) ){
    case SQLITE_NULL:    return sqlite3_mprintf("");
    case SQLITE_FLOAT:   return sqlite3_mprintf("%.6g",
                                                sqlite3_column_double(pStmt, i));
    case SQLITE_BLOB: {
      const unsigned char *a = sqlite3_column_blob(pStmt, i);
      int j, n = sqlite3_column_bytes(pStmt, i);
      sqlite3_str *s = sqlite3_str_new(0);
      sqlite3_str_appendall(s, "x'");
      for(j=0; j<n; j++) sqlite3_str_appendf(s, "%02X", a[j]);
      sqlite3_str_appendchar(s, 1, '\'');
      return sqlite3_str_finish(s);
    }
    default: return sqlite3_mprintf("%s", sqlite3_column_text(pStmt, i));
  }
}

/* Cell i as a JSON value: numbers, strings, null; a blob as "x'..'". */
static char *outCellJson(sqlite3_stmt *pStmt, int i){
  char *z, *zQ;
  switch( sqlite3_column_type(pStmt, i) ){
    case SQLITE_NULL:    return sqlite3_mprintf("null");
    case SQLITE_INTEGER: return sqlite3_mprintf("%lld",
                                                sqlite3_column_int64(pStmt, i));
    case SQLITE_FLOAT:   return sqlite3_mprintf("%!.17g",
                                                sqlite3_column_double(pStmt, i));
    default:
      z = outCell(pStmt, i);
      zQ = z ? out_quote(z) : 0;
      sqlite3_free(z);
      return zQ;
  }
}

typedef struct OutTable OutTable;
struct OutTable {
  int nCol, nRow, nAlloc;
  char **az;                      /* nRow+1 rows of nCol cells (header) */
  int *aw;                        /* column widths */
};

static void outTablePrint(OutTable *t){
  int r, c;
  for(r=0; r<=t->nRow; r++){
    for(c=0; c<t->nCol; c++){
      const char *z = t->az[r*t->nCol+c];
      if( c==t->nCol-1 ) printf("%s\n", z ? z : "");
      else printf("%-*s  ", t->aw[c], z ? z : "");
    }
  }
}

static void outTableFree(OutTable *t){
  int i;
  for(i=0; i<(t->nRow+1)*t->nCol; i++) sqlite3_free(t->az[i]);
  sqlite3_free(t->az);
  sqlite3_free(t->aw);
}

static int outTableAdd(OutTable *t, int iRow, int iCol, char *z){
  int n;
  if( z==0 ) return SQLITE_NOMEM;
  t->az[iRow*t->nCol+iCol] = z;
  n = (int)strlen(z);
  if( n>t->aw[iCol] ) t->aw[iCol] = n;
  return SQLITE_OK;
}

static int outTableGrow(OutTable *t){
  if( (t->nRow+2)*t->nCol > t->nAlloc ){
    int nNew = t->nAlloc*2 + t->nCol*4;
    char **az = sqlite3_realloc64(t->az, sizeof(char*)*nNew);
    if( az==0 ) return SQLITE_NOMEM;
    memset(az+t->nAlloc, 0, sizeof(char*)*(nNew-t->nAlloc));
    t->az = az;
    t->nAlloc = nNew;
  }
  return SQLITE_OK;
}

int out_rows(Cli *p, const char *zKey, sqlite3_stmt *pStmt, int bText,
             int *pnRow){
  OutTable t;
  sqlite3_str *pArr = p->bJson ? sqlite3_str_new(0) : 0;
  int i, rc = SQLITE_OK, bShow = bText && !p->bJson && !p->bQuiet;
  memset(&t, 0, sizeof(t));
  t.nCol = sqlite3_column_count(pStmt);
  t.aw = sqlite3_malloc64(sizeof(int)*(t.nCol+1));
  if( t.aw==0 || outTableGrow(&t) ) rc = SQLITE_NOMEM;
  else memset(t.aw, 0, sizeof(int)*t.nCol);
  for(i=0; rc==SQLITE_OK && i<t.nCol; i++){
    rc = outTableAdd(&t, 0, i, sqlite3_mprintf("%s",
                                               sqlite3_column_name(pStmt, i)));
  }
  if( pArr ) sqlite3_str_appendchar(pArr, 1, '[');
  while( rc==SQLITE_OK && (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    rc = SQLITE_OK;
    if( pArr ){
      sqlite3_str_appendall(pArr, t.nRow ? ",{" : "{");
      for(i=0; i<t.nCol; i++){
        char *z = outCellJson(pStmt, i);
        sqlite3_str_appendf(pArr, "%s\"%s\":%s", i ? "," : "",
                            sqlite3_column_name(pStmt, i), z ? z : "null");
        sqlite3_free(z);
      }
      sqlite3_str_appendchar(pArr, 1, '}');
    }
    if( bShow ){
      rc = outTableGrow(&t);
      for(i=0; rc==SQLITE_OK && i<t.nCol; i++){
        rc = outTableAdd(&t, t.nRow+1, i, outCell(pStmt, i));
      }
    }
    t.nRow++;
  }
  if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  *pnRow = t.nRow;
  if( pArr ){
    char *z;
    sqlite3_str_appendchar(pArr, 1, ']');
    z = sqlite3_str_finish(pArr);
    if( rc==SQLITE_OK ) out_json(p, zKey, z);
    sqlite3_free(z);
  }
  if( rc==SQLITE_OK && bShow && t.nRow>0 ) outTablePrint(&t);
  if( !bShow ) t.nRow = 0;
  outTableFree(&t);
  return rc;
}

/* ---- long operations: progress bar and stop requests ---- */

static volatile sig_atomic_t bOutStop = 0;

static void outOnSignal(int sig){
  (void)sig;
  bOutStop = 1;
}

typedef struct OutBar OutBar;
struct OutBar {
  Cli *p;
  const char *zUnit;              /* "pages", "shards", "branches" */
  double tStart, tLast;
  int bDrawn;
  int bMoved;                     /* a bar with nDone>0 was drawn */
};

static double outNow(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (double)tv.tv_sec + tv.tv_usec/1e6;
}

static void outBytes(char *z, size_t n, double x){
  const char *azU[] = { "B", "KB", "MB", "GB", "TB" };
  int i = 0;
  while( x>=1000.0 && i<4 ){ x /= 1000.0; i++; }
  snprintf(z, n, i ? "%.1f %s" : "%.0f %s", x, azU[i]);
}

static void outBarDraw(OutBar *b, const char *zWhat, int64_t nDone,
                       int64_t nTotal, int64_t nBytes, double tNow){
  char zRate[32], zLeft[32] = "--:--", zBar[26];
  double dt = tNow - b->tStart;
  int i, nFill = 0;
  if( nTotal>0 ){
    nFill = (int)(25*nDone/nTotal);
    if( nDone>0 && dt>0 ){
      double tLeft = dt*(double)(nTotal-nDone)/(double)nDone;
      snprintf(zLeft, sizeof(zLeft), "%d:%02d", (int)tLeft/60,
               (int)tLeft%60);
    }
  }
  for(i=0; i<25; i++) zBar[i] = i<nFill ? '#' : '.';
  zBar[25] = 0;
  outBytes(zRate, sizeof(zRate), dt>0 ? nBytes/dt : 0);
  fprintf(stderr, "\r%-7s [%s] %lld/%lld %s  %s/s  %s left\033[K", zWhat,
          zBar, (long long)nDone, (long long)(nTotal<0 ? 0 : nTotal),
          b->zUnit, zRate, zLeft);
  fflush(stderr);
  b->bDrawn = 1;
  b->tLast = tNow;
}

static int outBarHook(void *pArg, const char *zWhat, int64_t nDone,
                      int64_t nTotal, int64_t nBytes){
  OutBar *b = (OutBar*)pArg;
  if( b->p->bProgress ){
    double tNow = outNow();
    if( !b->bDrawn || tNow-b->tLast>=0.1 || (nDone>0 && !b->bMoved)
     || (nTotal>0 && nDone==nTotal) ){
      b->bMoved = nDone>0;
      outBarDraw(b, zWhat, nDone, nTotal, nBytes, tNow);
    }
  }
  return bOutStop!=0;
}

int out_run_long(Cli *p, sqlite3_stmt *pStmt, const char *zUnit,
                 int *pbStopped){
  struct sigaction sa, saInt, saTerm;
  OutBar b;
  int rc;
  memset(&b, 0, sizeof(b));
  b.p = p;
  b.zUnit = zUnit;
  b.tStart = outNow();
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = outOnSignal;
  sigemptyset(&sa.sa_mask);
  bOutStop = 0;
  sigaction(SIGINT, &sa, &saInt);
  sigaction(SIGTERM, &sa, &saTerm);
  depot_progress_set(outBarHook, &b);
  rc = sqlite3_step(pStmt);
  depot_progress_set(0, 0);
  sigaction(SIGINT, &saInt, 0);
  sigaction(SIGTERM, &saTerm, 0);
  if( b.bDrawn ){
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
  }
  *pbStopped = bOutStop!=0;
  return rc;
}
