/*
** sqldoc.c -- builds docs/SQL.md from the reference sources in
** sql/reference/, running every example.
**
**     sqldoc SOURCE_DIR OUTPUT.md [SCRATCH_BASE]
**     sqldoc               (compare: see below)
**
** SOURCE_DIR holds the title file and one folder per group, read in name
** order (numeric prefixes set the order).  Every file is one item in one
** fixed plain-text format: a header of "key: value" lines, then sections
** opened by "--- KIND" lines:
**
**     title: TEXT          the document title (one file at the top level)
**     group: TEXT          a group heading (the first file of a folder)
**     name: TEXT           a reference entry
**     topic: TEXT          a prose entry (no signature, no NULL section)
**     signature: TEXT      one line of the entry's signature (repeatable)
**
**     --- meaning          Markdown prose
**     --- null             Markdown prose: what NULL arguments do
**     --- setup            SQL run before the examples, not shown
**     --- example          SQL that must succeed, shown with its output
**     --- error            SQL statements that must fail, each shown with
**                          its error, optionally followed by queries that
**                          succeed and show what the failures left
**     --- c                C code, shown and not run (C API entries)
**
** Sections come in that order (setup may come before any example or
** error).  An entry needs a signature, a meaning, a null section and an
** example, error or C section.  The SQL of an item runs on one fresh
** in-memory connection (URI filenames on), opened with the extension
** registered through sqlite3_auto_extension(), in a fresh empty directory
** that is the working directory meanwhile, so examples make their stores
** with relative names.
** Every result set is written as a Markdown table; an error section is
** one SQL block in which each failing statement is followed by its error
** as comment lines: the message, the result code's name unless it is
** SQLITE_ERROR, and the extension's lines of the SQLite error log (see
** SD_LOG_LIMIT).  The scratch directory's path prints as /data, so the
** output does not depend on where it ran.
**
** Generation fails (exit status 1, the file and statement on stderr) when
** an example or setup statement fails, an error section has a statement
** before its last failure that does not fail (or after it one that is no
** query), an item breaks the format, or an entry leaves depot as the
** default VFS.  The output is written only when everything ran.
** SCRATCH_BASE (default $TMPDIR, else /tmp) holds the scratch directories,
** each removed after its entry ran (kept when generation fails).
**
** Without arguments (as make valgrind runs every check program) it
** generates from $srcdir/sql/reference and exits 1 when the result differs
** from $srcdir/docs/SQL.md; tests/check/sqldoc.sh is make check's test,
** which shows the difference.
*/
#define _XOPEN_SOURCE 700     /* nftw, mkdtemp, realpath */
#include "config.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"      /* depot_fork_idle_close */

#include <sqlite3.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Section kinds, in the order an item must give them. */
#define SD_MEANING 0
#define SD_NULL    1
#define SD_SETUP   2
#define SD_EXAMPLE 3
#define SD_ERROR   4
#define SD_C       5
static const char *const azKind[] = {
  "meaning", "null", "setup", "example", "error", "c"
};

/* Item types. */
#define SD_TITLE 0
#define SD_GROUP 1
#define SD_ENTRY 2
#define SD_TOPIC 3
static const char *const azType[] = { "title", "group", "name", "topic" };

typedef struct SdSection SdSection;
struct SdSection {
  int eKind;
  char *zText;              /* trimmed body, sqlite3_malloc'd */
  char *zOut;               /* rendered output of an SQL section, or 0 */
};

typedef struct SdItem SdItem;
struct SdItem {
  char *zFile;              /* path, for messages */
  int eType;                /* SD_TITLE..SD_TOPIC */
  char *zName;              /* heading text */
  char *zSlug;              /* its GitHub anchor */
  char *zSig;               /* signature lines joined by \n, or 0 */
  SdSection *aSec;
  int nSec;
};

typedef struct SdDoc SdDoc;
struct SdDoc {
  SdItem *aItem;
  int nItem;
  int nAlloc;
};

/* Scratch state of the entry that runs: its directory (as made and as
** resolved), for the path substitution, and the captured log. */
static char *zScratch = 0;
static char *zScratchReal = 0;
static sqlite3_str *pLog = 0;

static void sdDie(const char *zFile, const char *zFmt, const char *zArg){
  fprintf(stderr, "sqldoc: %s: ", zFile);
  fprintf(stderr, zFmt, zArg);
  fprintf(stderr, "\n");
  exit(1);
}

static void *sdAlloc(void *p, sqlite3_int64 n){
  void *pNew = sqlite3_realloc64(p, n);
  if( pNew==0 ){
    fprintf(stderr, "sqldoc: out of memory\n");
    exit(1);
  }
  return pNew;
}

static char *sdStrndup(const char *z, int n){
  char *zNew = sdAlloc(0, n+1);
  memcpy(zNew, z, n);
  zNew[n] = 0;
  return zNew;
}

static char *sdFinish(sqlite3_str *p){
  char *z;
  if( sqlite3_str_errcode(p) ) sdDie("output", "%s", "out of memory");
  z = sqlite3_str_finish(p);
  return z ? z : sdStrndup("", 0);
}

/* The whole of file zPath, sqlite3_malloc'd. */
static char *sdReadFile(const char *zPath){
  FILE *f = fopen(zPath, "rb");
  sqlite3_str *p = sqlite3_str_new(0);
  char aBuf[4096];
  size_t n;
  if( f==0 ) sdDie(zPath, "cannot open: %s", strerror(errno));
  while( (n = fread(aBuf, 1, sizeof(aBuf), f))>0 ){
    sqlite3_str_append(p, aBuf, (int)n);
  }
  if( ferror(f) ) sdDie(zPath, "cannot read: %s", strerror(errno));
  fclose(f);
  return sdFinish(p);
}

/* ---------------------------------------------------------------- parse */

/* Copy of z[0..n) without leading and trailing blank lines or spaces at
** the end. */
static char *sdTrim(const char *z, int n){
  for(;;){
    int i = 0;
    while( i<n && (z[i]==' ' || z[i]=='\t' || z[i]=='\r') ) i++;
    if( i==n || z[i]!='\n' ) break;
    z += i+1;
    n -= i+1;
  }
  while( n>0 && (z[n-1]=='\n' || z[n-1]==' ' || z[n-1]=='\t'
                 || z[n-1]=='\r') ) n--;
  return sdStrndup(z, n);
}

/* GitHub's anchor of heading zText: lowercase letters, digits, '-' and
** '_' kept, spaces become '-', everything else dropped; a repeat gets
** "-N" (counted through every heading of the document). */
static char *sdSlug(const char *zText, char ***pazSeen, int *pnSeen){
  sqlite3_str *p = sqlite3_str_new(0);
  char *zBase;
  char *zSlug;
  int i, nDup = 0;
  for(i=0; zText[i]; i++){
    unsigned char c = (unsigned char)zText[i];
    if( c>='A' && c<='Z' ) sqlite3_str_appendchar(p, 1, (char)(c+32));
    else if( (c>='a' && c<='z') || (c>='0' && c<='9') || c=='-' || c=='_' ){
      sqlite3_str_appendchar(p, 1, (char)c);
    }else if( c==' ' ) sqlite3_str_appendchar(p, 1, '-');
  }
  zBase = sdFinish(p);
  zSlug = sqlite3_mprintf("%s", zBase);
  for(;;){
    int bSeen = 0;
    for(i=0; i<*pnSeen; i++) if( strcmp((*pazSeen)[i], zSlug)==0 ) bSeen = 1;
    if( !bSeen ) break;
    sqlite3_free(zSlug);
    zSlug = sqlite3_mprintf("%s-%d", zBase, ++nDup);
  }
  sqlite3_free(zBase);
  *pazSeen = sdAlloc(*pazSeen, sizeof(char*)*(*pnSeen+1));
  (*pazSeen)[(*pnSeen)++] = zSlug;
  return sqlite3_mprintf("%s", zSlug);
}

static void sdAddSection(SdItem *pItem, int eKind, const char *z, int n){
  SdSection *s;
  pItem->aSec = sdAlloc(pItem->aSec, sizeof(SdSection)*(pItem->nSec+1));
  s = &pItem->aSec[pItem->nSec++];
  s->eKind = eKind;
  s->zText = sdTrim(z, n);
  s->zOut = 0;
  if( s->zText[0]==0 ){
    sdDie(pItem->zFile, "empty --- %s section", azKind[eKind]);
  }
}

/* One header line "key: value" of item pItem. */
static void sdHeaderLine(SdItem *pItem, const char *zLine, int n){
  const char *zColon = memchr(zLine, ':', n);
  char *zKey, *zVal;
  int i;
  if( zColon==0 ) sdDie(pItem->zFile, "header line without ':' (%s)", "");
  zKey = sdStrndup(zLine, (int)(zColon-zLine));
  /* One space after the colon is the separator; more indent the value. */
  if( zColon[1]==' ' ) zColon++;
  zVal = sdTrim(zColon+1, n-(int)(zColon-zLine)-1);
  if( strcmp(zKey, "signature")==0 ){
    char *zOld = pItem->zSig;
    pItem->zSig = zOld ? sqlite3_mprintf("%s\n%s", zOld, zVal)
                       : sqlite3_mprintf("%s", zVal);
    sqlite3_free(zOld);
    sqlite3_free(zVal);
  }else{
    for(i=0; i<4 && strcmp(zKey, azType[i])!=0; i++){}
    if( i==4 ) sdDie(pItem->zFile, "unknown header key '%s'", zKey);
    if( pItem->zName ) sdDie(pItem->zFile, "second name key '%s'", zKey);
    pItem->eType = i;
    pItem->zName = zVal;
  }
  sqlite3_free(zKey);
}

/* Parse file zPath into a new item of pDoc. */
static SdItem *sdParse(SdDoc *pDoc, const char *zPath){
  char *zAll = sdReadFile(zPath);
  SdItem *pItem;
  const char *z = zAll;
  const char *zBody = 0;
  int eKind = -1;
  int eLast = -1;
  if( pDoc->nItem==pDoc->nAlloc ){
    pDoc->nAlloc = pDoc->nAlloc ? pDoc->nAlloc*2 : 64;
    pDoc->aItem = sdAlloc(pDoc->aItem, sizeof(SdItem)*pDoc->nAlloc);
  }
  pItem = &pDoc->aItem[pDoc->nItem++];
  memset(pItem, 0, sizeof(*pItem));
  pItem->zFile = sqlite3_mprintf("%s", zPath);
  while( *z ){
    const char *zEol = strchr(z, '\n');
    int n = zEol ? (int)(zEol-z) : (int)strlen(z);
    if( n>=4 && strncmp(z, "--- ", 4)==0 ){
      char *zKind = sdTrim(z+4, n-4);
      int k;
      if( eKind>=0 ) sdAddSection(pItem, eKind, zBody, (int)(z-zBody));
      for(k=0; k<6 && strcmp(zKind, azKind[k])!=0; k++){}
      if( k==6 ) sdDie(zPath, "unknown section '--- %s'", zKind);
      sqlite3_free(zKind);
      if( k<eLast && !(k==SD_SETUP && eLast<=SD_ERROR) ){
        sdDie(zPath, "section --- %s out of order (meaning, null, setup/"
              "example, setup/error, c)", azKind[k]);
      }
      if( (k==SD_MEANING || k==SD_NULL) && k==eLast ){
        sdDie(zPath, "second --- %s section", azKind[k]);
      }
      if( k!=SD_SETUP ) eLast = k;
      eKind = k;
      zBody = zEol ? zEol+1 : z+n;
    }else if( eKind<0 ){
      int bBlank = 1, i;
      for(i=0; i<n; i++) if( z[i]!=' ' && z[i]!='\t' && z[i]!='\r' ) bBlank = 0;
      if( !bBlank ) sdHeaderLine(pItem, z, n);
    }
    z += n + (zEol ? 1 : 0);
  }
  if( eKind>=0 ) sdAddSection(pItem, eKind, zBody, (int)(z-zBody));
  sqlite3_free(zAll);
  if( pItem->zName==0 ) sdDie(zPath, "no title, group, name or topic %s", "");
  return pItem;
}

/* Check what an item of type eType must and may hold. */
static void sdValidate(SdItem *pItem){
  int aHas[6] = {0,0,0,0,0,0};
  int i;
  for(i=0; i<pItem->nSec; i++) aHas[pItem->aSec[i].eKind]++;
  if( !aHas[SD_MEANING] ) sdDie(pItem->zFile, "no --- meaning section%s", "");
  if( pItem->eType==SD_ENTRY ){
    if( pItem->zSig==0 ) sdDie(pItem->zFile, "entry without signature%s", "");
    if( !aHas[SD_NULL] ) sdDie(pItem->zFile, "entry without --- null%s", "");
    if( !aHas[SD_EXAMPLE] && !aHas[SD_ERROR] && !aHas[SD_C] ){
      sdDie(pItem->zFile, "entry without --- example, error or c%s", "");
    }
  }else{
    if( pItem->zSig ) sdDie(pItem->zFile, "only entries have a signature%s",
                            "");
    if( aHas[SD_NULL] ) sdDie(pItem->zFile, "only entries have --- null%s",
                              "");
  }
}

static int sdCmp(const void *a, const void *b){
  return strcmp(*(char*const*)a, *(char*const*)b);
}

/* The names in directory zDir (no dot files), sorted; *pn gets the count. */
static char **sdList(const char *zDir, int *pn){
  DIR *d = opendir(zDir);
  struct dirent *e;
  char **az = 0;
  int n = 0;
  if( d==0 ) sdDie(zDir, "cannot list: %s", strerror(errno));
  while( (e = readdir(d))!=0 ){
    if( e->d_name[0]=='.' ) continue;
    az = sdAlloc(az, sizeof(char*)*(n+1));
    az[n++] = sqlite3_mprintf("%s", e->d_name);
  }
  closedir(d);
  if( n>0 ) qsort(az, n, sizeof(char*), sdCmp);
  *pn = n;
  return az;
}

static int sdIsDir(const char *zPath){
  struct stat st;
  return stat(zPath, &st)==0 && S_ISDIR(st.st_mode);
}

/* Read the title file and every group folder of zDir into pDoc. */
static void sdReadSources(SdDoc *pDoc, const char *zDir){
  int nTop, i, j, nTitle = 0;
  char **azTop = sdList(zDir, &nTop);
  for(i=0; i<nTop; i++){
    char *zPath = sqlite3_mprintf("%s/%s", zDir, azTop[i]);
    if( sdIsDir(zPath) ){
      int nSub;
      char **azSub = sdList(zPath, &nSub);
      for(j=0; j<nSub; j++){
        char *zFile = sqlite3_mprintf("%s/%s", zPath, azSub[j]);
        SdItem *p = sdParse(pDoc, zFile);
        if( (j==0)!=(p->eType==SD_GROUP) ){
          sdDie(zFile, "a folder's first file, and only it, is its group%s",
                "");
        }
        sqlite3_free(zFile);
        sqlite3_free(azSub[j]);
      }
      sqlite3_free(azSub);
    }else{
      SdItem *p = sdParse(pDoc, zPath);
      if( p->eType!=SD_TITLE ) sdDie(zPath, "a top-level file is the title%s",
                                     "");
      if( pDoc->nItem!=1 ) sdDie(zPath, "the title comes before the groups%s",
                                 "");
      nTitle++;
    }
    sqlite3_free(zPath);
    sqlite3_free(azTop[i]);
  }
  sqlite3_free(azTop);
  if( nTitle!=1 ) sdDie(zDir, "needs exactly one title file%s", "");
  for(i=0; i<pDoc->nItem; i++) sdValidate(&pDoc->aItem[i]);
}

/* ------------------------------------------------------------------ run */

/* Error-code names of the primary and extended result codes. */
static const struct { int rc; const char *zName; } aCode[] = {
#define C(x) { x, #x }
  C(SQLITE_ERROR), C(SQLITE_INTERNAL), C(SQLITE_PERM), C(SQLITE_ABORT),
  C(SQLITE_BUSY), C(SQLITE_LOCKED), C(SQLITE_NOMEM), C(SQLITE_READONLY),
  C(SQLITE_INTERRUPT), C(SQLITE_IOERR), C(SQLITE_CORRUPT),
  C(SQLITE_NOTFOUND), C(SQLITE_FULL), C(SQLITE_CANTOPEN),
  C(SQLITE_PROTOCOL), C(SQLITE_EMPTY), C(SQLITE_SCHEMA), C(SQLITE_TOOBIG),
  C(SQLITE_CONSTRAINT), C(SQLITE_MISMATCH), C(SQLITE_MISUSE),
  C(SQLITE_NOLFS), C(SQLITE_AUTH), C(SQLITE_FORMAT), C(SQLITE_RANGE),
  C(SQLITE_NOTADB),
  C(SQLITE_ERROR_MISSING_COLLSEQ), C(SQLITE_ERROR_RETRY),
  C(SQLITE_ERROR_SNAPSHOT), C(SQLITE_IOERR_READ), C(SQLITE_IOERR_WRITE),
  C(SQLITE_IOERR_FSYNC), C(SQLITE_IOERR_SHORT_READ),
  C(SQLITE_IOERR_TRUNCATE), C(SQLITE_IOERR_NOMEM), C(SQLITE_IOERR_DELETE),
  C(SQLITE_LOCKED_SHAREDCACHE), C(SQLITE_BUSY_RECOVERY),
  C(SQLITE_BUSY_SNAPSHOT), C(SQLITE_BUSY_TIMEOUT),
  C(SQLITE_CANTOPEN_NOTEMPDIR), C(SQLITE_CANTOPEN_ISDIR),
  C(SQLITE_CANTOPEN_FULLPATH), C(SQLITE_CORRUPT_VTAB),
  C(SQLITE_CORRUPT_SEQUENCE), C(SQLITE_CORRUPT_INDEX),
  C(SQLITE_READONLY_RECOVERY), C(SQLITE_READONLY_CANTLOCK),
  C(SQLITE_READONLY_ROLLBACK), C(SQLITE_READONLY_DBMOVED),
  C(SQLITE_READONLY_CANTINIT), C(SQLITE_READONLY_DIRECTORY),
  C(SQLITE_ABORT_ROLLBACK), C(SQLITE_CONSTRAINT_CHECK),
  C(SQLITE_CONSTRAINT_FOREIGNKEY), C(SQLITE_CONSTRAINT_FUNCTION),
  C(SQLITE_CONSTRAINT_NOTNULL), C(SQLITE_CONSTRAINT_PRIMARYKEY),
  C(SQLITE_CONSTRAINT_TRIGGER), C(SQLITE_CONSTRAINT_UNIQUE),
  C(SQLITE_CONSTRAINT_VTAB), C(SQLITE_CONSTRAINT_ROWID),
  C(SQLITE_AUTH_USER),
#undef C
};

static const char *sdCodeName(int rc){
  static char zBuf[32];
  size_t i;
  for(i=0; i<sizeof(aCode)/sizeof(aCode[0]); i++){
    if( aCode[i].rc==rc ) return aCode[i].zName;
  }
  snprintf(zBuf, sizeof(zBuf), "result code %d", rc);
  return zBuf;
}

/* Append z to p with the scratch directory's path written as /data. */
static void sdAppendPath(sqlite3_str *p, const char *z){
  while( *z ){
    const char *zHit = 0;
    size_t nHit = 0;
    const char *aDir[2];
    int i;
    aDir[0] = zScratchReal;
    aDir[1] = zScratch;
    for(i=0; i<2; i++){
      const char *zAt = aDir[i] ? strstr(z, aDir[i]) : 0;
      if( zAt && (zHit==0 || zAt<zHit
                  || (zAt==zHit && strlen(aDir[i])>nHit)) ){
        zHit = zAt;
        nHit = strlen(aDir[i]);
      }
    }
    if( zHit==0 ){
      sqlite3_str_appendall(p, z);
      return;
    }
    sqlite3_str_append(p, z, (int)(zHit-z));
    sqlite3_str_appendall(p, "/data");
    z = zHit + nHit;
  }
}

/* Append cell text z to p, escaped for a Markdown table cell. */
static void sdAppendCell(sqlite3_str *p, const char *z){
  sqlite3_str *pRaw = sqlite3_str_new(0);
  char *zRaw;
  int i;
  sdAppendPath(pRaw, z);
  zRaw = sdFinish(pRaw);
  for(i=0; zRaw[i]; i++){
    char c = zRaw[i];
    if( c=='|' || c=='\\' || c=='*' || c=='`' ){
      sqlite3_str_appendchar(p, 1, '\\');
      sqlite3_str_appendchar(p, 1, c);
    }else if( c=='<' ){
      sqlite3_str_appendall(p, "&lt;");
    }else if( c=='\n' ){
      sqlite3_str_appendall(p, "<br>");
    }else if( c!='\r' ){
      sqlite3_str_appendchar(p, 1, c);
    }
  }
  sqlite3_free(zRaw);
}

static void sdAppendValue(sqlite3_str *p, sqlite3_stmt *pStmt, int i){
  switch( sqlite3_column_type(pStmt, i) ){
    case SQLITE_NULL:
      sqlite3_str_appendall(p, "NULL");
      break;
    case SQLITE_BLOB: {
      const unsigned char *a = sqlite3_column_blob(pStmt, i);
      int n = sqlite3_column_bytes(pStmt, i), j;
      sqlite3_str_appendall(p, "X'");
      for(j=0; j<n; j++) sqlite3_str_appendf(p, "%02X", a[j]);
      sqlite3_str_appendall(p, "'");
      break;
    }
    default:
      sdAppendCell(p, (const char*)sqlite3_column_text(pStmt, i));
      break;
  }
}

/* The log callback: keep the extension's own messages ("kv...",
** "depot...", "store...") while an entry runs. */
static void sdLogCallback(void *pArg, int rc, const char *zMsg){
  (void)pArg; (void)rc;
  if( pLog==0 || zMsg==0 ) return;
  if( strncmp(zMsg, "kv", 2)==0 || strncmp(zMsg, "depot", 5)==0
   || strncmp(zMsg, "store", 5)==0 ){
    int i;
    for(i=0; zMsg[i]; i++){
      sqlite3_str_appendchar(pLog, 1, zMsg[i]=='\n' ? ' ' : zMsg[i]);
    }
    sqlite3_str_appendchar(pLog, 1, '\n');
  }
}

/* Run statement pStmt to its end, appending its rows to pOut as a
** Markdown table when it has columns.  Returns the result code. */
static int sdStep(sqlite3_stmt *pStmt, sqlite3_str *pOut){
  int nCol = sqlite3_column_count(pStmt);
  int rc, i;
  sqlite3_str *pTab = sqlite3_str_new(0);
  char *zTab;
  if( nCol>0 ){
    sqlite3_str_appendall(pTab, "\n|");
    for(i=0; i<nCol; i++){
      sdAppendCell(pTab, sqlite3_column_name(pStmt, i));
      sqlite3_str_appendall(pTab, "|");
    }
    sqlite3_str_appendall(pTab, "\n|");
    for(i=0; i<nCol; i++) sqlite3_str_appendall(pTab, "---|");
    sqlite3_str_appendall(pTab, "\n");
  }
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    sqlite3_str_appendall(pTab, "|");
    for(i=0; i<nCol; i++){
      sdAppendValue(pTab, pStmt, i);
      sqlite3_str_appendall(pTab, "|");
    }
    sqlite3_str_appendall(pTab, "\n");
  }
  zTab = sdFinish(pTab);
  if( rc==SQLITE_DONE ){
    sqlite3_str_appendall(pOut, zTab);
    rc = SQLITE_OK;
  }
  sqlite3_free(zTab);
  return rc;
}

/* SQLite formats a log message into a buffer of 210 bytes and cuts what
** does not fit, so a log line is shown only where its length does not
** depend on the scratch directory: a line naming it is left out when it
** is longer than SD_LOG_PATH_LINE bytes as shown (scratch paths are at
** most SD_SCRATCH_MAX bytes, so a shown one is never cut), and a line of
** SD_LOG_LIMIT bytes or more without it fails generation. */
#define SD_LOG_LIMIT      200
#define SD_LOG_PATH_LINE  130
#define SD_SCRATCH_MAX     64

static int sdNamesScratch(const char *z){
  return (zScratch && strstr(z, zScratch))
      || (zScratchReal && strstr(z, zScratchReal));
}

/* Append the error of the failed statement as SQL comment lines: its
** message (and code), then the extension's log lines that add to it. */
static void sdAppendError(SdItem *pItem, sqlite3_str *pOut, sqlite3 *db,
                          const char *zLog){
  const char *zMsg = sqlite3_errmsg(db);
  int rc = sqlite3_extended_errcode(db);
  if( rc==SQLITE_ERROR ){
    sqlite3_str_appendall(pOut, "-- Error: ");
  }else{
    sqlite3_str_appendf(pOut, "-- Error (%s): ", sdCodeName(rc));
  }
  sdAppendPath(pOut, zMsg);
  sqlite3_str_appendall(pOut, "\n");
  while( zLog && *zLog ){
    const char *zEol = strchr(zLog, '\n');
    char *zLine = sdStrndup(zLog, (int)(zEol-zLog));
    /* SQLite logs a failed statement as "MESSAGE in SQL": skip those. */
    if( strstr(zMsg, zLine)==0 && strncmp(zLine, zMsg, strlen(zMsg))!=0 ){
      sqlite3_str *pLine = sqlite3_str_new(0);
      char *zShown;
      sdAppendPath(pLine, zLine);
      zShown = sdFinish(pLine);
      if( !sdNamesScratch(zLine) && strlen(zLine)>=SD_LOG_LIMIT ){
        sdDie(pItem->zFile, "a log line may be cut by SQLite's log buffer;"
              " choose an example with a shorter message:\n%s", zShown);
      }
      if( !sdNamesScratch(zLine) || strlen(zShown)<=SD_LOG_PATH_LINE ){
        sqlite3_str_appendf(pOut, "-- Log: %s\n", zShown);
      }
      sqlite3_free(zShown);
    }
    sqlite3_free(zLine);
    zLog = zEol+1;
  }
}

/* Length of the first complete SQL statement of z (through its ';'), or
** of all of z when no ';' completes one. */
static int sdStatementLen(const char *z){
  int i;
  for(i=0; z[i]; i++){
    if( z[i]==';' ){
      char *zPrefix = sdStrndup(z, i+1);
      int bComplete = sqlite3_complete(zPrefix);
      sqlite3_free(zPrefix);
      if( bComplete ) return i+1;
    }
  }
  return i;
}

/* Report a statement that did not do what its section says, and exit. */
static void sdFail(SdItem *pItem, SdSection *s, const char *zStmt,
                   sqlite3 *db, const char *zWhy){
  fprintf(stderr, "sqldoc: %s: --- %s statement %s:\n%s\n", pItem->zFile,
          azKind[s->eKind], zWhy, zStmt);
  if( db ){
    fprintf(stderr, "  -> %s: %s\n", sdCodeName(sqlite3_extended_errcode(db)),
            sqlite3_errmsg(db));
  }
  exit(1);
}

/* Run SQL section s of item pItem on db, one statement at a time, and
** render it into s->zOut.  An example's output is its result tables.  An
** error section is one or more statements that fail, each followed in the
** SQL block by its error as comment lines, optionally followed by queries
** that succeed and show what the failures left (their tables follow the
** block); its rendering includes the SQL block. */
static void sdRunSection(SdItem *pItem, SdSection *s, sqlite3 *db){
  const char *zSql = s->zText;
  sqlite3_str *pOut = sqlite3_str_new(0);
  sqlite3_str *pTabs = sqlite3_str_new(0);
  char *zTabs;
  int bError = s->eKind==SD_ERROR;
  int nFail = 0;                /* statements of an error section that failed */
  int nQuery = 0;               /* queries after them */
  if( bError ) sqlite3_str_appendall(pOut, "\n```sql\n");
  while( *zSql ){
    int nStmt = sdStatementLen(zSql);
    char *zStmt = sdStrndup(zSql, nStmt);
    sqlite3_stmt *pStmt = 0;
    int rc;
    zSql += nStmt;
    sqlite3_str_reset(pLog);
    rc = sqlite3_prepare_v2(db, zStmt, -1, &pStmt, 0);
    if( rc==SQLITE_OK && pStmt==0 ){             /* comments only */
      sqlite3_free(zStmt);
      continue;
    }
    if( bError ){
      char *zShow = sdTrim(zStmt, nStmt);
      sqlite3_str_appendf(pOut, "%s\n", zShow);
      sqlite3_free(zShow);
    }
    if( rc==SQLITE_OK ) rc = sdStep(pStmt, bError ? pTabs : pOut);
    if( rc!=SQLITE_OK ){
      if( !bError ) sdFail(pItem, s, zStmt, db, "failed");
      if( nQuery>0 ){
        sdFail(pItem, s, zStmt, db, "failed after a query that succeeded");
      }
      nFail++;
      sdAppendError(pItem, pOut, db, sqlite3_str_value(pLog));
    }else if( bError ){
      if( nFail==0 || sqlite3_column_count(pStmt)==0 ){
        sdFail(pItem, s, zStmt, 0, "did not fail");
      }
      nQuery++;
    }
    sqlite3_finalize(pStmt);
    sqlite3_free(zStmt);
  }
  zTabs = sdFinish(pTabs);
  if( bError ) sqlite3_str_appendf(pOut, "```\n%s", zTabs);
  sqlite3_free(zTabs);
  s->zOut = sdFinish(pOut);
}

static int sdRemove(const char *zPath, const struct stat *st, int eFlag,
                    struct FTW *pFtw){
  (void)st; (void)eFlag; (void)pFtw;
  return remove(zPath);
}

/* Run every SQL section of pItem in a fresh directory under zBase. */
static void sdRunItem(SdItem *pItem, const char *zBase){
  sqlite3 *db = 0;
  char zCwd[PATH_MAX];
  char zReal[PATH_MAX];
  sqlite3_vfs *pDflt;
  int i, nSql = 0, rc;
  for(i=0; i<pItem->nSec; i++){
    int k = pItem->aSec[i].eKind;
    if( k==SD_SETUP || k==SD_EXAMPLE || k==SD_ERROR ) nSql++;
  }
  if( nSql==0 ) return;
  if( getcwd(zCwd, sizeof(zCwd))==0 ) sdDie(".", "getcwd: %s",
                                            strerror(errno));
  zScratch = sqlite3_mprintf("%s/sqldoc.XXXXXX", zBase);
  if( mkdtemp(zScratch)==0 ) sdDie(zScratch, "mkdtemp: %s", strerror(errno));
  if( realpath(zScratch, zReal)==0 ) sdDie(zScratch, "realpath: %s",
                                           strerror(errno));
  zScratchReal = sqlite3_mprintf("%s", zReal);
  if( strlen(zScratch)>SD_SCRATCH_MAX || strlen(zReal)>SD_SCRATCH_MAX ){
    sdDie(zScratch, "scratch path longer than 64 bytes: give a shorter "
          "SCRATCH_BASE or TMPDIR%s", "");
  }
  if( chdir(zScratch)!=0 ) sdDie(zScratch, "chdir: %s", strerror(errno));
  rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE
                       |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  if( rc!=SQLITE_OK ) sdDie(pItem->zFile, "cannot open :memory:%s", "");
  for(i=0; i<pItem->nSec; i++){
    int k = pItem->aSec[i].eKind;
    if( k==SD_SETUP || k==SD_EXAMPLE || k==SD_ERROR ){
      sdRunSection(pItem, &pItem->aSec[i], db);
    }
  }
  if( sqlite3_close(db)!=SQLITE_OK ){
    sdDie(pItem->zFile, "connection does not close: %s", sqlite3_errmsg(db));
  }
  /* The store handle the branch functions keep idle is in this entry's
  ** scratch directory, which goes now. */
  depot_fork_idle_close();
  pDflt = sqlite3_vfs_find(0);
  if( pDflt && strcmp(pDflt->zName, "depot")==0 ){
    sdDie(pItem->zFile, "leaves depot the default VFS (end with "
          "depot_default_vfs(0))%s", "");
  }
  if( chdir(zCwd)!=0 ) sdDie(zCwd, "chdir: %s", strerror(errno));
  if( nftw(zScratch, sdRemove, 16, FTW_DEPTH|FTW_PHYS)!=0 ){
    sdDie(zScratch, "cannot remove: %s", strerror(errno));
  }
  sqlite3_free(zScratch);
  sqlite3_free(zScratchReal);
  zScratch = zScratchReal = 0;
}

/* --------------------------------------------------------------- render */

/* Prose of kind eKind of pItem (there is at most one), or 0. */
static const char *sdProse(const SdItem *pItem, int eKind){
  int i;
  for(i=0; i<pItem->nSec; i++){
    if( pItem->aSec[i].eKind==eKind ) return pItem->aSec[i].zText;
  }
  return 0;
}

static void sdRenderSql(sqlite3_str *p, const SdItem *pItem, int eKind){
  int i;
  for(i=0; i<pItem->nSec; i++){
    const SdSection *s = &pItem->aSec[i];
    if( s->eKind!=eKind ) continue;
    if( eKind!=SD_ERROR ){
      sqlite3_str_appendf(p, "\n```%s\n%s\n```\n",
                          eKind==SD_C ? "c" : "sql", s->zText);
    }
    if( s->zOut ) sqlite3_str_appendall(p, s->zOut);
  }
}

static int sdHas(const SdItem *pItem, int eKind){
  return sdProse(pItem, eKind)!=0;
}

static void sdRenderItem(sqlite3_str *p, const SdItem *pItem){
  static const char *const azHash[] = { "#", "##", "###", "###" };
  sqlite3_str_appendf(p, "\n%s %s\n", azHash[pItem->eType], pItem->zName);
  if( pItem->zSig ) sqlite3_str_appendf(p, "\n```\n%s\n```\n", pItem->zSig);
  sqlite3_str_appendf(p, "\n%s\n", sdProse(pItem, SD_MEANING));
  if( sdHas(pItem, SD_NULL) ){
    sqlite3_str_appendf(p, "\n**NULL:** %s\n", sdProse(pItem, SD_NULL));
  }
  sdRenderSql(p, pItem, SD_EXAMPLE);
  sdRenderSql(p, pItem, SD_C);
  if( sdHas(pItem, SD_ERROR) ){
    sqlite3_str_appendall(p, "\n**Errors:**\n");
    sdRenderSql(p, pItem, SD_ERROR);
  }
}

/* The table of contents: one line per group, its entries as links. */
static void sdRenderToc(sqlite3_str *p, const SdDoc *pDoc){
  int i;
  sqlite3_str_appendall(p, "\n## Contents\n");
  for(i=0; i<pDoc->nItem; i++){
    const SdItem *pItem = &pDoc->aItem[i];
    if( pItem->eType==SD_GROUP ){
      sqlite3_str_appendf(p, "\n- **[%s](#%s):**", pItem->zName,
                          pItem->zSlug);
    }else if( pItem->eType!=SD_TITLE ){
      /* entries by name only: each is a heading of its group's section */
      int bFirst = pDoc->aItem[i-1].eType==SD_GROUP;
      sqlite3_str_appendf(p, "%s%s", bFirst ? " " : ", ", pItem->zName);
    }
  }
  sqlite3_str_appendall(p, "\n");
}

static char *sdRender(SdDoc *pDoc){
  sqlite3_str *p = sqlite3_str_new(0);
  char **azSeen = 0;
  int nSeen = 0, i;
  for(i=0; i<pDoc->nItem; i++){
    pDoc->aItem[i].zSlug = sdSlug(pDoc->aItem[i].zName, &azSeen, &nSeen);
  }
  /* "Contents" is a heading too; its anchor must not be taken. */
  for(i=0; i<nSeen; i++){
    if( strcmp(azSeen[i], "contents")==0 ){
      sdDie(pDoc->aItem[i].zFile, "a heading may not be '%s'", "Contents");
    }
  }
  sdRenderItem(p, &pDoc->aItem[0]);
  sdRenderToc(p, pDoc);
  for(i=1; i<pDoc->nItem; i++) sdRenderItem(p, &pDoc->aItem[i]);
  for(i=0; i<nSeen; i++) sqlite3_free(azSeen[i]);
  sqlite3_free(azSeen);
  return sdFinish(p);
}

static void sdFree(SdDoc *pDoc){
  int i, j;
  for(i=0; i<pDoc->nItem; i++){
    SdItem *pItem = &pDoc->aItem[i];
    for(j=0; j<pItem->nSec; j++){
      sqlite3_free(pItem->aSec[j].zText);
      sqlite3_free(pItem->aSec[j].zOut);
    }
    sqlite3_free(pItem->aSec);
    sqlite3_free(pItem->zFile);
    sqlite3_free(pItem->zName);
    sqlite3_free(pItem->zSlug);
    sqlite3_free(pItem->zSig);
  }
  sqlite3_free(pDoc->aItem);
}

/* The first line where zA and zB differ (1-based), 0 if they are equal. */
static int sdFirstDiff(const char *zA, const char *zB){
  int iLine = 1;
  while( *zA && *zA==*zB ){
    if( *zA=='\n' ) iLine++;
    zA++;
    zB++;
  }
  return *zA==*zB ? 0 : iLine;
}

int main(int argc, char **argv){
  SdDoc doc;
  char zBase[PATH_MAX];
  const char *zScratchBase;
  char *zSrc, *zOut;
  char *zMd;
  int i, rc = 0;
  /* Before anything initialises SQLite (sqlite3_mprintf does). */
  sqlite3_config(SQLITE_CONFIG_LOG, sdLogCallback, (void*)0);
  if( argc!=1 && argc!=3 && argc!=4 ){
    fprintf(stderr, "usage: %s [SOURCE_DIR OUTPUT.md [SCRATCH_BASE]]\n",
            argv[0]);
    return 2;
  }
  if( argc==1 ){
    /* No arguments: compare with $srcdir/docs/SQL.md (make valgrind). */
    const char *zDir = getenv("srcdir");
    if( zDir==0 || zDir[0]==0 ) zDir = ".";
    zSrc = sqlite3_mprintf("%s/sql/reference", zDir);
    zOut = sqlite3_mprintf("%s/docs/SQL.md", zDir);
    zScratchBase = getenv("TMPDIR");
  }else{
    zSrc = sqlite3_mprintf("%s", argv[1]);
    zOut = sqlite3_mprintf("%s", argv[2]);
    zScratchBase = argc==4 ? argv[3] : getenv("TMPDIR");
  }
  if( zScratchBase==0 || zScratchBase[0]==0 ) zScratchBase = "/tmp";
  if( mkdir(zScratchBase, 0777)!=0 && errno!=EEXIST ){
    sdDie(zScratchBase, "mkdir: %s", strerror(errno));
  }
  if( realpath(zScratchBase, zBase)==0 ){
    sdDie(zScratchBase, "realpath: %s", strerror(errno));
  }
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  pLog = sqlite3_str_new(0);
  memset(&doc, 0, sizeof(doc));
  sdReadSources(&doc, zSrc);
  for(i=0; i<doc.nItem; i++) sdRunItem(&doc.aItem[i], zBase);
  zMd = sdRender(&doc);
  if( argc==1 ){
    char *zOld = sdReadFile(zOut);
    int iLine = sdFirstDiff(zOld, zMd+1);
    if( iLine ){
      fprintf(stderr, "sqldoc: %s differs from a fresh generation from %s"
              " at line %d: run make sql-doc\n", zOut, zSrc, iLine);
      rc = 1;
    }
    sqlite3_free(zOld);
  }else{
    FILE *f = fopen(zOut, "wb");
    if( f==0 ) sdDie(zOut, "cannot write: %s", strerror(errno));
    /* The first byte is the '\n' that opens every item. */
    if( fputs(zMd+1, f)<0 || fclose(f)!=0 ){
      sdDie(zOut, "cannot write: %s", strerror(errno));
    }
  }
  sqlite3_free(zMd);
  sqlite3_free(sdFinish(pLog));
  pLog = 0;
  sdFree(&doc);
  sqlite3_free(zSrc);
  sqlite3_free(zOut);
  sqlite3_reset_auto_extension();
  return rc;
}
