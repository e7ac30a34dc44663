/*
** sqlite.c -- the embedded outer store: one SQLite file in WAL mode
** (sql/store_schema.sql) implementing vfs/store/store.h:
**
**     depot_keys(key BLOB PRIMARY KEY, value BLOB, blob INTEGER)
**                                              WITHOUT ROWID
**     depot_blobs(id INTEGER PRIMARY KEY, value BLOB)
**
** A value of at most SS_INLINE_MAX (128) bytes lives in its key's cell;
** a bigger one (a blob chunk of up to 64 KiB) in a depot_blobs row whose
** id the key's cell holds.  A key seek or scan thus only ever compares
** small cells, never drags a chunk's overflow chain through memory, and
** reads a page index row or a commit record where it finds the key (no
** second seek, as a rowid table's key index needed); store_get_range()
** reads a byte range of a big value through sqlite3_blob_read(), which
** fetches only the overflow pages that hold the range.  A small put
** writes one B-tree, a big one two.
**
** Store format (PRAGMA user_version of the file): 2 is the layout above;
** 1 one rowid table depot_kv(key BLOB PRIMARY KEY, value BLOB), keys in
** its key index; 0 a WITHOUT ROWID depot_kv holding keys and values in its
** cells.  A writable open migrates an older store, each step in one
** transaction (0 to 1, then 1 to 2); a read-only open reads any of them as
** it is (range reads of format 0 fetch the whole value).  A build that
** knows only formats 0 and 1 refuses a format-2 store (it has no depot_kv
** table, only the view of that name): it cannot read it, and never writes
** to it.
**
** Statements are prepared once per handle.  A write transaction is BEGIN
** IMMEDIATE (the outer file's write lock, waited for up to nBusyMs); reads
** outside a transaction run in autocommit, and a big put outside one runs
** its two statements under a savepoint.  The writer locks of
** store_writer_lock() are byte-range locks on the file "<store>-lock"
** (vfs/store/lockfile.c).  The connection never takes part in SQLite's
** shared cache (SQLITE_OPEN_PRIVATECACHE): a store opened from the depot
** VFS's xOpen while shared cache is on would otherwise wait forever for the
** mutex SQLite holds across that xOpen.
*/
#include "config.h"
#include "vfs/store/store.h"
#include "vfs/store/bytes.h"
#include "vfs/store/lockfile.h"
#include "sql/store_schema.h"  /* STORE_SCHEMA_SQL, from sql/store_schema.sql */
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* The store format this build writes (PRAGMA user_version). */
#define SS_FORMAT 2

/* The largest value kept in its key's cell (format 2); the same number is
** in the triggers of sql/store_schema.sql. */
#define SS_INLINE_MAX 128

enum {
  SS_GET, SS_PUT, SS_DEL, SS_DELRANGE, SS_SCANF, SS_SCANR, SS_SCANF_OPEN,
  SS_SCANR_OPEN, SS_BEGINR, SS_BEGINW, SS_COMMIT, SS_ROLLBACK, SS_ROWID,
  SS_DATAVER, SS_PUTBLOB, SS_DELRANGE_OPEN, SS_NSTMT
};

/* A value of format 2: inline, or the depot_blobs row it names. */
#define SS_VALUE2 "CASE WHEN k.blob IS NULL THEN k.value" \
  " ELSE (SELECT b.value FROM depot_blobs AS b WHERE b.id=k.blob) END"

/* Formats 0 and 1 (read-only opens; SS_PUTBLOB is unused). */
static const char *const azStoreSql1[SS_NSTMT] = {
  "SELECT value FROM depot_kv WHERE key=?1",
  "INSERT OR REPLACE INTO depot_kv(key,value) VALUES(?1,?2)",
  "DELETE FROM depot_kv WHERE key=?1",
  "DELETE FROM depot_kv WHERE key>=?1 AND key<?2",
  "SELECT key,value FROM depot_kv WHERE key>=?1 AND key<?2 ORDER BY key"
  " LIMIT ?3",
  "SELECT key,value FROM depot_kv WHERE key>=?1 AND key<?2"
  " ORDER BY key DESC LIMIT ?3",
  "SELECT key,value FROM depot_kv WHERE key>=?1 ORDER BY key LIMIT ?3",
  "SELECT key,value FROM depot_kv WHERE key>=?1 ORDER BY key DESC LIMIT ?3",
  "BEGIN",
  "BEGIN IMMEDIATE",
  "COMMIT",
  "ROLLBACK",
  "SELECT rowid FROM depot_kv WHERE key=?1",
  "PRAGMA data_version",
  "",
  "DELETE FROM depot_kv WHERE key>=?1",
};

/* Format 2.  SS_PUT binds the key, the inline value (NULL for a big one)
** and the depot_blobs id (NULL for an inline one); replacing a big value
** deletes its depot_blobs row (trigger depot_keys_update), as does
** deleting its key (depot_keys_delete).  SS_ROWID answers the id and the
** inline value. */
static const char *const azStoreSql2[SS_NSTMT] = {
  "SELECT " SS_VALUE2 " FROM depot_keys AS k WHERE k.key=?1",
  "INSERT INTO depot_keys(key,value,blob) VALUES(?1,?2,?3)"
  " ON CONFLICT(key) DO UPDATE SET value=excluded.value, blob=excluded.blob",
  "DELETE FROM depot_keys WHERE key=?1",
  "DELETE FROM depot_keys WHERE key>=?1 AND key<?2",
  "SELECT k.key," SS_VALUE2 " FROM depot_keys AS k WHERE k.key>=?1"
  " AND k.key<?2 ORDER BY k.key LIMIT ?3",
  "SELECT k.key," SS_VALUE2 " FROM depot_keys AS k WHERE k.key>=?1"
  " AND k.key<?2 ORDER BY k.key DESC LIMIT ?3",
  "SELECT k.key," SS_VALUE2 " FROM depot_keys AS k WHERE k.key>=?1"
  " ORDER BY k.key LIMIT ?3",
  "SELECT k.key," SS_VALUE2 " FROM depot_keys AS k WHERE k.key>=?1"
  " ORDER BY k.key DESC LIMIT ?3",
  "BEGIN",
  "BEGIN IMMEDIATE",
  "COMMIT",
  "ROLLBACK",
  "SELECT blob, value FROM depot_keys WHERE key=?1",
  "PRAGMA data_version",
  "INSERT INTO depot_blobs(value) VALUES(?1)",
  "DELETE FROM depot_keys WHERE key>=?1",
};

typedef struct StoreSqlite StoreSqlite;
struct StoreSqlite {
  Store base;                     /* must be first */
  sqlite3 *db;                    /* the outer file's connection */
  sqlite3_stmt *aStmt[SS_NSTMT];  /* prepared on first use */
  sqlite3_blob *pBlob;            /* open on a depot_kv row, inside a
                                  ** transaction only (it holds a read) */
  unsigned char aBlobKey[64];     /* the key of that row (nBlobKey bytes, */
  int nBlobKey;                   /* 0: not remembered) */
  int iFormat;                    /* the store format: 0, 1 (read-only
                                  ** opens) or 2 (SS_FORMAT) */
  int bInTxn;                     /* inside store_begin() .. commit/rollback */
  int bReadOnly;                  /* opened read-only or immutable */
  int bUpgrade;                   /* writable, of an older format: its
                                  ** first write migrates the store
                                  ** (ssUpgradeNow()) */
  StoreLockFile lk;               /* writer locks */
  int nMaxValue;
  int nBusyMs;                    /* the connection's busy timeout */
  int nCacheKb;                   /* the bound of its page cache */
  uint64_t iDataVer;              /* store_data_version()'s number, ... */
  int64_t iLastDv;                /* ... moved on when PRAGMA data_version */
  int64_t iLastChanges;           /* or the handle's total changes move */
  char *zErr;                     /* last error, sqlite3_malloc'd */
};

/* Records the connection's last error as "store: WHAT of FILE: MESSAGE",
** so a failed write or sync names the store file it failed on. */
static void ssSetErr(StoreSqlite *p, const char *zWhat){
  const char *zFile = sqlite3_db_filename(p->db, "main");
  sqlite3_free(p->zErr);
  if( zFile && zFile[0] ){
    p->zErr = sqlite3_mprintf("store: %s of %s: %s", zWhat, zFile,
                              sqlite3_errmsg(p->db));
  }else{
    p->zErr = sqlite3_mprintf("store: %s: %s", zWhat, sqlite3_errmsg(p->db));
  }
}

/* The prepared statement i, reset and with its bindings cleared. */
static int ssStmt(StoreSqlite *p, int i, sqlite3_stmt **ppStmt){
  int rc = SQLITE_OK;
  if( p->aStmt[i]==0 ){
    rc = sqlite3_prepare_v3(p->db,
                            p->iFormat>=2 ? azStoreSql2[i] : azStoreSql1[i], -1,
                            SQLITE_PREPARE_PERSISTENT, &p->aStmt[i], 0);
    if( rc!=SQLITE_OK ){
      ssSetErr(p, "prepare");
      return rc;
    }
  }
  *ppStmt = p->aStmt[i];
  return SQLITE_OK;
}

/* Close the blob handle (it holds a read on the connection). */
static void ssBlobClose(StoreSqlite *p){
  p->nBlobKey = 0;
  if( p->pBlob ){
    sqlite3_blob_close(p->pBlob);
    p->pBlob = 0;
  }
}

/* Run statement i to completion (no result rows expected).  A write may
** change the row the blob handle is open on: the handle goes first. */
static int ssRun(StoreSqlite *p, sqlite3_stmt *pStmt, const char *zWhat){
  int rc;
  ssBlobClose(p);
  rc = sqlite3_step(pStmt);
  if( rc==SQLITE_DONE || rc==SQLITE_ROW ){
    rc = SQLITE_OK;
  }else{
    rc = sqlite3_extended_errcode(p->db);
    ssSetErr(p, zWhat);
  }
  sqlite3_reset(pStmt);
  sqlite3_clear_bindings(pStmt);
  return rc;
}

static void ssClose(Store *pStore){
  StoreSqlite *p = (StoreSqlite*)pStore;
  int i;
  ssBlobClose(p);
  for(i=0; i<SS_NSTMT; i++) sqlite3_finalize(p->aStmt[i]);
  if( p->bInTxn ) sqlite3_exec(p->db, "ROLLBACK", 0, 0, 0);
  store_lockfile_close(&p->lk);
  sqlite3_close(p->db);
  sqlite3_free(p->zErr);
  sqlite3_free(p);
}

/* A handle reading an older format (read-only) whose store another handle
** migrated since: its statements are made anew for the new tables. */
static int ssFormatOf(StoreSqlite*);
static void ssFollowFormat(StoreSqlite *p){
  int i, iFormat = ssFormatOf(p);
  if( iFormat<0 || iFormat==p->iFormat ) return;
  ssBlobClose(p);
  for(i=0; i<SS_NSTMT; i++){
    if( i!=SS_BEGINR && i!=SS_BEGINW && i!=SS_COMMIT && i!=SS_ROLLBACK ){
      sqlite3_finalize(p->aStmt[i]);
      p->aStmt[i] = 0;
    }
  }
  p->iFormat = iFormat;
}

/* Before a read outside a transaction on a handle of an older format. */
static void ssFresh(StoreSqlite *p){
  if( p->iFormat<SS_FORMAT && !p->bInTxn ) ssFollowFormat(p);
}

/* Before a write of a handle whose open found the store of an older
** format and its write lock held (bUpgrade): outside a transaction,
** migrate the store now, waiting for the lock as long as any write does
** (the busy timeout); inside one, whose snapshot still has the old
** tables, fail with SQLITE_BUSY.  SQLITE_OK when the handle writes
** format 2. */
static int ssUpgrade(StoreSqlite*, int nWaitMs);
static int ssUpgradeNow(StoreSqlite *p){
  int rc;
  if( !p->bUpgrade ) return SQLITE_OK;
  if( p->bInTxn ){
    const char *zFile = sqlite3_db_filename(p->db, "main");
    if( p->iFormat>=SS_FORMAT ){
      p->bUpgrade = 0;
      return SQLITE_OK;
    }
    sqlite3_free(p->zErr);
    p->zErr = sqlite3_mprintf("store: the store file %s is being migrated to"
        " format %d by another connection: a transaction begun before the"
        " migration committed cannot write (retry it)", zFile ? zFile : "",
        SS_FORMAT);
    return SQLITE_BUSY;
  }
  rc = ssUpgrade(p, p->nBusyMs);
  if( rc==SQLITE_OK ){
    p->bUpgrade = 0;
    ssFollowFormat(p);
  }
  return rc;
}

static int ssBegin(Store *pStore, int bWrite){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int rc;
  if( p->bInTxn ) return SQLITE_MISUSE;
  if( bWrite && (rc = ssUpgradeNow(p))!=SQLITE_OK ) return rc;
  rc = ssStmt(p, bWrite ? SS_BEGINW : SS_BEGINR, &pStmt);
  if( rc==SQLITE_OK ) rc = ssRun(p, pStmt, "begin");
  if( rc==SQLITE_OK ) p->bInTxn = 1;
  /* the transaction's first read: the schema of its snapshot */
  if( rc==SQLITE_OK && p->iFormat<SS_FORMAT ) ssFollowFormat(p);
  return rc;
}

static int ssRollback(Store *pStore){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int rc;
  if( !p->bInTxn ) return SQLITE_OK;
  p->bInTxn = 0;
  ssBlobClose(p);
  if( sqlite3_get_autocommit(p->db) ) return SQLITE_OK;
  rc = ssStmt(p, SS_ROLLBACK, &pStmt);
  if( rc==SQLITE_OK ) rc = ssRun(p, pStmt, "rollback");
  return rc;
}

static int ssCommit(Store *pStore){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int rc;
  if( !p->bInTxn ) return SQLITE_MISUSE;
  ssBlobClose(p);
  rc = ssStmt(p, SS_COMMIT, &pStmt);
  if( rc==SQLITE_OK ) rc = ssRun(p, pStmt, "commit");
  if( rc!=SQLITE_OK ){
    char *zKeep = p->zErr;
    p->zErr = 0;
    ssRollback(pStore);
    sqlite3_free(p->zErr);
    p->zErr = zKeep;
    return rc;
  }
  p->bInTxn = 0;
  return SQLITE_OK;
}

static int ssGet(Store *pStore, const void *pKey, int nKey,
                 void **ppVal, int *pnVal){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int rc;
  ssFresh(p);
  rc = ssStmt(p, SS_GET, &pStmt);
  *ppVal = 0;
  *pnVal = -1;
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_bind_blob(pStmt, 1, pKey, nKey, SQLITE_STATIC);
  rc = sqlite3_step(pStmt);
  if( rc==SQLITE_ROW ){
    int n = sqlite3_column_bytes(pStmt, 0);
    void *a = sqlite3_malloc64(n>0 ? n : 1);
    if( a==0 ){
      rc = SQLITE_NOMEM;
    }else{
      if( n>0 ) memcpy(a, sqlite3_column_blob(pStmt, 0), n);
      *ppVal = a;
      *pnVal = n;
      rc = SQLITE_OK;
    }
  }else if( rc==SQLITE_DONE ){
    rc = SQLITE_OK;
  }else{
    rc = sqlite3_extended_errcode(p->db);
    ssSetErr(p, "get");
  }
  sqlite3_reset(pStmt);
  sqlite3_clear_bindings(pStmt);
  return rc;
}

/* Bytes [iOff, iOff+n) of value pVal (nVal bytes) into pOut; the count
** taken. */
static int ssTakeRange(const void *pVal, int nVal, int iOff, int n,
                       void *pOut){
  int nTake = nVal>iOff ? nVal-iOff : 0;
  if( nTake>n ) nTake = n;
  if( nTake>0 ) memcpy(pOut, (const char*)pVal+iOff, nTake);
  return nTake;
}

/* Bytes [iOff, iOff+n) of the value under pKey into pOut; *pnGot gets how
** many there were (fewer at the value's end; -1: no such key).  The row of
** a big value comes from the key's cell (format 2; format 1: the key index
** alone); the range is read with sqlite3_blob_read(), which fetches only
** the overflow pages holding it.  The blob handle stays open until the
** transaction ends (outside one it is closed at once).  An inline value
** is copied from the key's cell. */
static int ssGetRange(Store *pStore, const void *pKey, int nKey, int iOff,
                      int n, void *pOut, int *pnGot){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 iRowid = 0;
  int rc, nVal, nTake;
  *pnGot = -1;
  ssFresh(p);
  if( p->iFormat==0 ){
    void *pVal = 0;
    rc = ssGet(pStore, pKey, nKey, &pVal, &nVal);
    if( rc==SQLITE_OK && pVal ){
      *pnGot = ssTakeRange(pVal, nVal, iOff, n, pOut);
    }
    sqlite3_free(pVal);
    return rc;
  }
  /* Another range of the row the handle is open on (a scan reading the
  ** frames of one chunk in turn): no seek, no reopen, and SQLite's cache
  ** of the row's overflow pages stays. */
  if( p->pBlob && p->nBlobKey==nKey && memcmp(p->aBlobKey, pKey, nKey)==0 ){
    goto read_range;
  }
  rc = ssStmt(p, SS_ROWID, &pStmt);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_bind_blob(pStmt, 1, pKey, nKey, SQLITE_STATIC);
  rc = sqlite3_step(pStmt);
  if( rc==SQLITE_ROW && p->iFormat>=2
   && sqlite3_column_type(pStmt, 0)==SQLITE_NULL ){
    /* an inline value */
    nVal = sqlite3_column_bytes(pStmt, 1);
    *pnGot = ssTakeRange(sqlite3_column_blob(pStmt, 1), nVal, iOff, n, pOut);
    rc = SQLITE_DONE;
  }else if( rc==SQLITE_ROW ){
    iRowid = sqlite3_column_int64(pStmt, 0);
    rc = SQLITE_OK;
  }else if( rc==SQLITE_DONE ){
    rc = SQLITE_DONE;
  }else{
    rc = sqlite3_extended_errcode(p->db);
    ssSetErr(p, "get");
  }
  sqlite3_reset(pStmt);
  sqlite3_clear_bindings(pStmt);
  if( rc==SQLITE_DONE ) return SQLITE_OK;
  if( rc!=SQLITE_OK ) return rc;
  p->nBlobKey = 0;
  if( p->pBlob && sqlite3_blob_reopen(p->pBlob, iRowid)!=SQLITE_OK ){
    ssBlobClose(p);
  }
  if( p->pBlob==0 ){
    rc = sqlite3_blob_open(p->db, "main",
                           p->iFormat>=2 ? "depot_blobs" : "depot_kv",
                           "value", iRowid, 0, &p->pBlob);
    if( rc!=SQLITE_OK ){
      ssSetErr(p, "range read");
      ssBlobClose(p);
      return rc;
    }
  }
  if( p->bInTxn && nKey<=(int)sizeof(p->aBlobKey) ){
    memcpy(p->aBlobKey, pKey, nKey);
    p->nBlobKey = nKey;
  }
read_range:
  nVal = sqlite3_blob_bytes(p->pBlob);
  nTake = nVal>iOff ? nVal-iOff : 0;
  if( nTake>n ) nTake = n;
  rc = nTake>0 ? sqlite3_blob_read(p->pBlob, pOut, nTake, iOff) : SQLITE_OK;
  if( rc!=SQLITE_OK ){
    ssSetErr(p, "range read");
    ssBlobClose(p);
    return rc;
  }
  *pnGot = nTake;
  if( !p->bInTxn ) ssBlobClose(p);
  return SQLITE_OK;
}

static int ssScan(Store *pStore, const void *pLo, int nLo, const void *pHi,
                  int nHi, int flags, int nLimit, StoreRowFn xRow, void *pArg){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int bRev = (flags & STORE_SCAN_REVERSE)!=0;
  int i = nHi>0 ? (bRev ? SS_SCANR : SS_SCANF)
                : (bRev ? SS_SCANR_OPEN : SS_SCANF_OPEN);
  int rc;
  ssFresh(p);
  rc = ssStmt(p, i, &pStmt);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_bind_blob(pStmt, 1, pLo, nLo, SQLITE_STATIC);
  if( nHi>0 ) sqlite3_bind_blob(pStmt, 2, pHi, nHi, SQLITE_STATIC);
  sqlite3_bind_int(pStmt, 3, nLimit);
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    if( xRow(pArg, sqlite3_column_blob(pStmt, 0),
             sqlite3_column_bytes(pStmt, 0), sqlite3_column_blob(pStmt, 1),
             sqlite3_column_bytes(pStmt, 1)) ){
      rc = SQLITE_DONE;
      break;
    }
  }
  if( rc==SQLITE_DONE ){
    rc = SQLITE_OK;
  }else{
    rc = sqlite3_extended_errcode(p->db);
    ssSetErr(p, "scan");
  }
  sqlite3_reset(pStmt);
  sqlite3_clear_bindings(pStmt);
  return rc;
}

/* A value of more than SS_INLINE_MAX bytes (format 2): a new depot_blobs
** row, then the key's cell naming it (which deletes the row of the value
** it replaces), both or neither: under a savepoint. */
static int ssPutBig(StoreSqlite *p, const void *pKey, int nKey,
                    const void *pVal, int nVal){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 iBlob;
  int rc = sqlite3_exec(p->db, "SAVEPOINT depot_put", 0, 0, 0);
  if( rc!=SQLITE_OK ){
    ssSetErr(p, "put");
    return rc;
  }
  rc = ssStmt(p, SS_PUTBLOB, &pStmt);
  if( rc==SQLITE_OK ){
    sqlite3_bind_blob(pStmt, 1, pVal, nVal, SQLITE_STATIC);
    rc = ssRun(p, pStmt, "put");
  }
  iBlob = sqlite3_last_insert_rowid(p->db);
  if( rc==SQLITE_OK ) rc = ssStmt(p, SS_PUT, &pStmt);
  if( rc==SQLITE_OK ){
    sqlite3_bind_blob(pStmt, 1, pKey, nKey, SQLITE_STATIC);
    sqlite3_bind_int64(pStmt, 3, iBlob);
    rc = ssRun(p, pStmt, "put");
  }
  if( rc!=SQLITE_OK ){
    char *zKeep = p->zErr;
    p->zErr = 0;
    sqlite3_exec(p->db, "ROLLBACK TO depot_put", 0, 0, 0);
    sqlite3_free(p->zErr);
    p->zErr = zKeep;
  }
  if( sqlite3_exec(p->db, "RELEASE depot_put", 0, 0, 0)!=SQLITE_OK ){
    if( rc==SQLITE_OK ){
      rc = sqlite3_extended_errcode(p->db);
      ssSetErr(p, "put");
    }
    /* the savepoint began the transaction and could not commit it */
    if( !p->bInTxn && !sqlite3_get_autocommit(p->db) ){
      sqlite3_exec(p->db, "ROLLBACK", 0, 0, 0);
    }
  }
  return rc;
}

static int ssPut(Store *pStore, const void *pKey, int nKey,
                 const void *pVal, int nVal){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int rc;
  if( nVal>p->nMaxValue ){
    sqlite3_free(p->zErr);
    p->zErr = sqlite3_mprintf("store: value of %d bytes exceeds the limit"
                              " of %d", nVal, p->nMaxValue);
    return SQLITE_TOOBIG;
  }
  if( (rc = ssUpgradeNow(p))!=SQLITE_OK ) return rc;
  if( p->iFormat>=2 && nVal>SS_INLINE_MAX ) return ssPutBig(p, pKey, nKey,
                                                         pVal, nVal);
  rc = ssStmt(p, SS_PUT, &pStmt);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_bind_blob(pStmt, 1, pKey, nKey, SQLITE_STATIC);
  sqlite3_bind_blob(pStmt, 2, nVal>0 ? pVal : "", nVal, SQLITE_STATIC);
  return ssRun(p, pStmt, "put");
}

static int ssClear(Store *pStore, const void *pKey, int nKey){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int rc = ssUpgradeNow(p);
  if( rc==SQLITE_OK ) rc = ssStmt(p, SS_DEL, &pStmt);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_bind_blob(pStmt, 1, pKey, nKey, SQLITE_STATIC);
  return ssRun(p, pStmt, "clear");
}

static int ssClearRange(Store *pStore, const void *pLo, int nLo,
                        const void *pHi, int nHi){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int rc = ssUpgradeNow(p);
  if( rc==SQLITE_OK ){
    rc = ssStmt(p, nHi>0 ? SS_DELRANGE : SS_DELRANGE_OPEN, &pStmt);
  }
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_bind_blob(pStmt, 1, pLo, nLo, SQLITE_STATIC);
  if( nHi>0 ) sqlite3_bind_blob(pStmt, 2, pHi, nHi, SQLITE_STATIC);
  return ssRun(p, pStmt, "clear range");
}

/* Read-modify-write of a little-endian i64, inside the caller's write
** transaction or a private one. */
static int ssAdd(Store *pStore, const void *pKey, int nKey, int64_t iDelta,
                 int64_t *piNew){
  StoreSqlite *p = (StoreSqlite*)pStore;
  unsigned char a[8];
  void *pOld = 0;
  int nOld = 0, rc = SQLITE_OK;
  int bOwn = !p->bInTxn;
  uint64_t v = 0;
  if( bOwn ) rc = ssBegin(pStore, 1);
  if( rc==SQLITE_OK ) rc = ssGet(pStore, pKey, nKey, &pOld, &nOld);
  if( rc==SQLITE_OK && pOld && nOld!=8 ){
    sqlite3_free(p->zErr);
    p->zErr = sqlite3_mprintf("store: counter value has %d bytes, not 8",
                              nOld);
    rc = SQLITE_CORRUPT;
  }
  if( rc==SQLITE_OK ){
    if( pOld ) v = bytes_get64le((const unsigned char*)pOld);
    v += (uint64_t)iDelta;
    bytes_put64le(a, v);
    rc = ssPut(pStore, pKey, nKey, a, 8);
  }
  sqlite3_free(pOld);
  if( bOwn ) rc = (rc==SQLITE_OK) ? ssCommit(pStore) : (ssRollback(pStore), rc);
  if( rc==SQLITE_OK && piNew ) *piNew = (int64_t)v;
  return rc;
}

static int ssMaxValue(Store *pStore){
  return ((StoreSqlite*)pStore)->nMaxValue;
}

static const char *ssErrMsg(Store *pStore){
  StoreSqlite *p = (StoreSqlite*)pStore;
  return p->zErr ? p->zErr : "";
}

/* The size of the store file plus its -wal. */
/* PRAGMA data_version (its OP_Transaction starts the read snapshot) moves
** when another connection committed; sqlite3_total_changes64() when this
** one wrote (rolled back or not: a move too many only costs a read). */
static int ssDataVersion(Store *pStore, uint64_t *piVersion){
  StoreSqlite *p = (StoreSqlite*)pStore;
  sqlite3_stmt *pStmt = 0;
  int64_t iDv = 0, iChanges;
  int rc;
  *piVersion = 0;
  if( !p->bInTxn || sqlite3_get_autocommit(p->db) ) return SQLITE_NOTFOUND;
  rc = ssStmt(p, SS_DATAVER, &pStmt);
  if( rc!=SQLITE_OK ) return rc;
  rc = sqlite3_step(pStmt);
  if( rc==SQLITE_ROW ){
    iDv = sqlite3_column_int64(pStmt, 0);
    rc = SQLITE_OK;
  }else{
    rc = sqlite3_extended_errcode(p->db);
    ssSetErr(p, "data version");
    if( rc==SQLITE_OK ) rc = SQLITE_ERROR;
  }
  sqlite3_reset(pStmt);
  if( rc!=SQLITE_OK ) return rc;
  iChanges = sqlite3_total_changes64(p->db);
  if( p->iDataVer==0 || iDv!=p->iLastDv || iChanges!=p->iLastChanges ){
    p->iDataVer++;
    p->iLastDv = iDv;
    p->iLastChanges = iChanges;
  }
  *piVersion = p->iDataVer;
  return SQLITE_OK;
}

static int ssPhysicalBytes(Store *pStore, int64_t *pnByte){
  StoreSqlite *p = (StoreSqlite*)pStore;
  const char *zFile = sqlite3_db_filename(p->db, "main");
  struct stat st;
  char *zWal;
  *pnByte = 0;
  if( zFile==0 || zFile[0]==0 ) return SQLITE_OK;
  if( stat(zFile, &st)==0 ) *pnByte += (int64_t)st.st_size;
  zWal = sqlite3_mprintf("%s-wal", zFile);
  if( zWal==0 ) return SQLITE_NOMEM;
  if( stat(zWal, &st)==0 ) *pnByte += (int64_t)st.st_size;
  sqlite3_free(zWal);
  return SQLITE_OK;
}

/* Give free pages back to the file system (see store_maintain()). */
static int ssMaintain(Store *pStore, int eOp){
  StoreSqlite *p = (StoreSqlite*)pStore;
  int rc;
  if( p->bInTxn ) return SQLITE_MISUSE;
  ssBlobClose(p);
  if( eOp==STORE_MAINT_VACUUM ){
    rc = sqlite3_exec(p->db, "PRAGMA auto_vacuum=INCREMENTAL; VACUUM", 0, 0,
                      0);
    if( rc!=SQLITE_OK ){ ssSetErr(p, "vacuum"); return rc; }
  }else{
    rc = sqlite3_exec(p->db, "PRAGMA incremental_vacuum", 0, 0, 0);
    if( rc!=SQLITE_OK ){ ssSetErr(p, "incremental vacuum"); return rc; }
  }
  /* best effort: a reader that pins the -wal keeps it (SQLITE_BUSY).  No
  ** busy wait: a TRUNCATE checkpoint waits for readers while it holds the
  ** write lock, which would stall every writer behind one long reader */
  sqlite3_busy_timeout(p->db, 0);
  rc = sqlite3_wal_checkpoint_v2(p->db, "main", SQLITE_CHECKPOINT_TRUNCATE,
                                 0, 0);
  sqlite3_busy_timeout(p->db, p->nBusyMs);
  if( rc==SQLITE_BUSY || rc==SQLITE_LOCKED ) rc = SQLITE_OK;
  if( rc!=SQLITE_OK ) ssSetErr(p, "checkpoint");
  return rc;
}

/* A failure of the lock file (rc) with its message zErr (consumed). */
static int ssLockErr(StoreSqlite *p, int rc, char *zErr){
  if( zErr ){
    sqlite3_free(p->zErr);
    p->zErr = zErr;
  }
  return rc;
}

static int ssWriterLock(Store *pStore, const void *pKey, int nKey){
  StoreSqlite *p = (StoreSqlite*)pStore;
  char *zErr = 0;
  int rc;
  if( p->bReadOnly ) return SQLITE_READONLY;
  rc = store_lockfile_lock(&p->lk, pKey, nKey, &zErr);
  return ssLockErr(p, rc, zErr);
}

static int ssWriterUnlock(Store *pStore, const void *pKey, int nKey){
  store_lockfile_unlock(&((StoreSqlite*)pStore)->lk, pKey, nKey);
  return SQLITE_OK;
}

static int ssWriterHeld(Store *pStore, const void *pKey, int nKey,
                        int *pbHeld){
  StoreSqlite *p = (StoreSqlite*)pStore;
  char *zErr = 0;
  int rc = store_lockfile_held(&p->lk, pKey, nKey, pbHeld, &zErr);
  return ssLockErr(p, rc, zErr);
}

static int ssMemory(Store *pStore, int64_t *pnUsed, int64_t *pnLimit){
  StoreSqlite *p = (StoreSqlite*)pStore;
  static const int aOp[] = { SQLITE_DBSTATUS_CACHE_USED,
    SQLITE_DBSTATUS_SCHEMA_USED, SQLITE_DBSTATUS_STMT_USED };
  int i;
  *pnUsed = 0;
  for(i=0; i<(int)(sizeof(aOp)/sizeof(aOp[0])); i++){
    int iCur = 0, iHi = 0;
    if( sqlite3_db_status(p->db, aOp[i], &iCur, &iHi, 0)==SQLITE_OK ){
      *pnUsed += iCur;
    }
  }
  *pnLimit = (int64_t)p->nCacheKb*1024;
  return SQLITE_OK;
}

static const StoreMethods storeSqliteMethods = {
  3, ssClose, ssBegin, ssCommit, ssRollback, ssGet, ssScan, ssPut, ssClear,
  ssClearRange, ssAdd, ssMaxValue, ssErrMsg, ssGetRange, ssMaintain,
  ssPhysicalBytes, ssWriterLock, ssWriterUnlock, ssWriterHeld, ssMemory,
  ssDataVersion, 0
};

int store_sqlite_set_cache_kb(Store *pStore, int nCacheKb){
  StoreSqlite *p = (StoreSqlite*)pStore;
  char *zSql;
  int rc;
  if( pStore==0 || pStore->pMethods!=&storeSqliteMethods ){
    return SQLITE_NOTFOUND;
  }
  if( nCacheKb<1 || nCacheKb>1048576 ) return SQLITE_RANGE;
  /* a smaller cache_size frees the pages past it at once */
  zSql = sqlite3_mprintf("PRAGMA cache_size=-%d", nCacheKb);
  rc = zSql ? sqlite3_exec(p->db, zSql, 0, 0, 0) : SQLITE_NOMEM;
  sqlite3_free(zSql);
  if( rc==SQLITE_OK ) p->nCacheKb = nCacheKb;
  return rc;
}

/* Names the VFS of a store whose StoreSqliteConfig.zVfs is NULL; set by
** store_sqlite_plain_vfs(), read by every open (atomically: opens on
** other threads may read it while it is set). */
static StoreVfsNameFn ssPlainVfs = 0;

void store_sqlite_plain_vfs(StoreVfsNameFn xPlain){
  __atomic_store_n(&ssPlainVfs, xPlain, __ATOMIC_RELEASE);
}

/* The VFS to open a store with: pCfg's, else the one the function set by
** store_sqlite_plain_vfs() names, else NULL (SQLite's default). */
static const char *ssVfsName(const StoreSqliteConfig *pCfg){
  StoreVfsNameFn xPlain;
  if( pCfg->zVfs ) return pCfg->zVfs;
  xPlain = __atomic_load_n(&ssPlainVfs, __ATOMIC_ACQUIRE);
  return xPlain ? xPlain() : 0;
}

int store_sqlite_read_only_fs(const char *zPath){
  struct statvfs sv;
  return statvfs(zPath, &sv)==0 && (sv.f_flag & ST_RDONLY)!=0;
}

/* The message of a store that could not be opened on a read-only file
** system: SQLite opens a WAL-mode file there only with its -shm file. */
static void ssReadOnlyFsErr(StoreSqlite *p, const char *zPath){
  sqlite3_free(p->zErr);
  p->zErr = sqlite3_mprintf("store: cannot open %s: it is on a read-only"
      " file system, where a store opens only with immutable=1", zPath);
}

/* Records why the first read of the store file failed (rc), unless a
** message is set already; returns rc. */
static int ssReadErr(StoreSqlite *p, int rc){
  const char *zFile = sqlite3_db_filename(p->db, "main");
  if( rc==SQLITE_OK || p->zErr ) return rc;
  if( (rc&0xff)==SQLITE_CANTOPEN && zFile
   && store_sqlite_read_only_fs(zFile) ){
    ssReadOnlyFsErr(p, zFile);
  }else{
    ssSetErr(p, "cannot read the schema of the store file");
  }
  return rc;
}

/* SQLITE_OK when the opened file is a store or empty (a new store); an
** SQLite database with a schema but no depot_kv table is some other
** program's database: SQLITE_CANTOPEN, before anything writes to it. */
static int ssCheckIsStore(StoreSqlite *p){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(p->db, "SELECT count(*), count(*) FILTER"
      " (WHERE type='table' AND name IN ('depot_kv','depot_keys'))"
      " FROM sqlite_schema", -1, &pStmt, 0);
  if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW
   && sqlite3_column_int(pStmt, 0)>0 && sqlite3_column_int(pStmt, 1)==0 ){
    const char *zFile = sqlite3_db_filename(p->db, "main");
    sqlite3_free(p->zErr);
    p->zErr = sqlite3_mprintf("store: %s is an SQLite database but not a"
        " depot store (it has no depot_kv table); give a new file or an"
        " existing store", zFile ? zFile : "");
    rc = SQLITE_CANTOPEN;
  }else if( rc==SQLITE_OK ){
    rc = sqlite3_reset(pStmt);
  }
  sqlite3_finalize(pStmt);
  return ssReadErr(p, rc);
}

/* Records a failed setup of the store file (rc) with the OS's cause: an
** I/O error for want of room (ENOSPC, EDQUOT, EFBIG: the -shm or -wal file
** could not be made) becomes SQLITE_FULL, "store: cannot set up the store
** file of FILE: database or disk is full (No space left on device)"; any
** other failure keeps its code and SQLite's message.  Returns the code to
** report. */
static int ssSetupErr(StoreSqlite *p, int rc){
  int e = sqlite3_system_errno(p->db);
  const char *zFile = sqlite3_db_filename(p->db, "main");
  int bNoRoom = e==ENOSPC || e==EFBIG;
#ifdef EDQUOT
  bNoRoom = bNoRoom || e==EDQUOT;
#endif
  if( ((rc&0xff)!=SQLITE_IOERR && (rc&0xff)!=SQLITE_FULL) || !bNoRoom ){
    ssSetErr(p, "cannot set up the store file");
    return rc;
  }
  sqlite3_free(p->zErr);
  p->zErr = sqlite3_mprintf("store: cannot set up the store file of %s: %s"
                            " (%s)", zFile ? zFile : "",
                            sqlite3_errstr(SQLITE_FULL), strerror(e));
  return SQLITE_FULL;
}

/* The store format of the file's tables: 2 with depot_keys, 0 when
** depot_kv is a WITHOUT ROWID table, 1 when it is a rowid table, -1
** without either (a new store). */
static int ssFormatOf(StoreSqlite *p){
  sqlite3_stmt *pStmt = 0;
  int iFormat = -1;
  if( sqlite3_prepare_v2(p->db, "SELECT CASE WHEN name='depot_keys' THEN 2"
      " WHEN sql LIKE '%WITHOUT ROWID%' THEN 0 ELSE 1 END FROM sqlite_schema"
      " WHERE type='table' AND name IN ('depot_kv','depot_keys')"
      " ORDER BY 1 DESC", -1, &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    iFormat = sqlite3_column_int(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  return iFormat;
}

/* 1 if the file has no schema yet (a new store). */
static int ssIsEmpty(StoreSqlite *p){
  sqlite3_stmt *pStmt = 0;
  int bEmpty = 0;
  if( sqlite3_prepare_v2(p->db, "SELECT count(*)=0 FROM sqlite_schema", -1,
                         &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    bEmpty = sqlite3_column_int(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  return bEmpty;
}

/* PRAGMA user_version of the store file (-1 on error). */
static int ssUserVersion(StoreSqlite *p){
  sqlite3_stmt *pStmt = 0;
  int v = -1;
  if( sqlite3_prepare_v2(p->db, "PRAGMA user_version", -1, &pStmt, 0)
      ==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    v = sqlite3_column_int(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  return v;
}

/* BEGIN IMMEDIATE for a migration, waiting at most nWaitMs for the write
** lock. */
static int ssMigrateBegin(StoreSqlite *p, int nWaitMs){
  int rc;
  sqlite3_busy_timeout(p->db, nWaitMs);
  rc = sqlite3_exec(p->db, "BEGIN IMMEDIATE", 0, 0, 0);
  sqlite3_busy_timeout(p->db, p->nBusyMs);
  return rc;
}

/* Migrate a format-0 store to format 1 in one write transaction: the rows
** move, in key order, into a new rowid table that takes depot_kv's name.
** Another connection migrating at the same time is waited for (up to
** nWaitMs), and then nothing is left to do. */
static int ssMigrate(StoreSqlite *p, int nWaitMs){
  int rc = ssMigrateBegin(p, nWaitMs);
  if( rc==SQLITE_OK && ssFormatOf(p)==0 ){
    rc = sqlite3_exec(p->db, "CREATE TABLE depot_kv_migrating(key BLOB"
        " PRIMARY KEY, value BLOB);"
        "INSERT INTO depot_kv_migrating(key, value) SELECT key, value FROM"
        " depot_kv ORDER BY key;"
        "DROP TABLE depot_kv;"
        "ALTER TABLE depot_kv_migrating RENAME TO depot_kv;"
        "PRAGMA user_version=1;", 0, 0, 0);
  }
  if( rc==SQLITE_OK ) rc = sqlite3_exec(p->db, "COMMIT", 0, 0, 0);
  if( rc!=SQLITE_OK ){
    ssSetErr(p, "cannot migrate the store to format 1");
    sqlite3_exec(p->db, "ROLLBACK", 0, 0, 0);
  }
  return rc;
}

/* Migrate a format-1 store to format 2 in one write transaction: every
** value of more than SS_INLINE_MAX bytes moves to depot_blobs under its
** old rowid, every key, in key order, to depot_keys with its value or that
** id; then the table depot_kv goes and the rest of the schema (triggers,
** the view depot_kv) is made.  A store another connection migrated
** meanwhile is left as it is. */
static int ssMigrate2(StoreSqlite *p, int nWaitMs){
  int rc = ssMigrateBegin(p, nWaitMs);
  if( rc==SQLITE_OK && ssFormatOf(p)==1 ){
    char *z = sqlite3_mprintf(
        "CREATE TABLE depot_keys(key BLOB PRIMARY KEY, value BLOB,"
        " blob INTEGER) WITHOUT ROWID;"
        "CREATE TABLE depot_blobs(id INTEGER PRIMARY KEY, value BLOB);"
        "INSERT INTO depot_blobs(id, value) SELECT rowid, value FROM"
        " depot_kv WHERE length(CAST(value AS BLOB))>%d;"
        "INSERT INTO depot_keys(key, value, blob) SELECT key,"
        " CASE WHEN length(CAST(value AS BLOB))>%d THEN NULL ELSE value END,"
        " CASE WHEN length(CAST(value AS BLOB))>%d THEN rowid END"
        " FROM depot_kv ORDER BY key;"
        "DROP TABLE depot_kv;", SS_INLINE_MAX, SS_INLINE_MAX, SS_INLINE_MAX);
    rc = z ? sqlite3_exec(p->db, z, 0, 0, 0) : SQLITE_NOMEM;
    sqlite3_free(z);
    if( rc==SQLITE_OK ) rc = sqlite3_exec(p->db, STORE_SCHEMA_SQL, 0, 0, 0);
    if( rc==SQLITE_OK ){
      rc = sqlite3_exec(p->db, "PRAGMA user_version=2", 0, 0, 0);
    }
  }
  if( rc==SQLITE_OK ) rc = sqlite3_exec(p->db, "COMMIT", 0, 0, 0);
  if( rc!=SQLITE_OK ){
    ssSetErr(p, "cannot migrate the store to format 2");
    sqlite3_exec(p->db, "ROLLBACK", 0, 0, 0);
  }
  return rc;
}

/* How long a writable open waits for the write lock to migrate an older
** store; a lock held longer (another connection migrating it) leaves the
** migration to the handle's first write (ssUpgradeNow()). */
#define SS_MIGRATE_WAIT_MS 1000

/* The tables, triggers and view of the current format, where missing, and
** its user_version. */
static int ssSchema(StoreSqlite *p){
  int rc = sqlite3_exec(p->db, STORE_SCHEMA_SQL, 0, 0, 0);
  if( rc==SQLITE_OK && ssUserVersion(p)!=SS_FORMAT ){
    char *zSql = sqlite3_mprintf("PRAGMA user_version=%d", SS_FORMAT);
    rc = zSql ? sqlite3_exec(p->db, zSql, 0, 0, 0) : SQLITE_NOMEM;
    sqlite3_free(zSql);
  }
  return rc;
}

/* Migrate a store of format 0 or 1 to the current format (each step
** waiting at most nWaitMs for the write lock; a step another connection
** did meanwhile is skipped), then give the old table's pages back and
** truncate the -wal that carried the copy. */
static int ssUpgrade(StoreSqlite *p, int nWaitMs){
  int rc = SQLITE_OK;
  ssBlobClose(p);
  if( ssFormatOf(p)==0 ) rc = ssMigrate(p, nWaitMs);
  if( rc==SQLITE_OK && ssFormatOf(p)==1 ){
    rc = ssMigrate2(p, nWaitMs);
    if( rc!=SQLITE_OK ) return rc;
    /* the pages of the old table go back to the file system (a store
    ** made with auto_vacuum=INCREMENTAL), and the -wal that carried the
    ** copy is truncated unless a reader pins it; neither is needed for
    ** the migration, which has committed */
    sqlite3_exec(p->db, "PRAGMA incremental_vacuum", 0, 0, 0);
    sqlite3_busy_timeout(p->db, 0);
    sqlite3_wal_checkpoint_v2(p->db, "main", SQLITE_CHECKPOINT_TRUNCATE,
                              0, 0);
    sqlite3_busy_timeout(p->db, p->nBusyMs);
  }
  if( rc==SQLITE_OK && (rc = ssSchema(p))!=SQLITE_OK ){
    ssSetErr(p, "cannot set up the store file");
  }
  return rc;
}

/* Pragmas and the table; the journal_mode change needs no transaction. */
static int ssSetup(StoreSqlite *p, const StoreSqliteConfig *pCfg){
  static const char *const azSync[] = { "OFF", "NORMAL", "FULL", "EXTRA" };
  int iSync = pCfg->iSynchronous;
  char *zSql;
  int rc;
  if( iSync<0 || iSync>3 ) iSync = 2;
  p->nBusyMs = pCfg->nBusyMs>0 ? pCfg->nBusyMs : 10000;
  sqlite3_busy_timeout(p->db, p->nBusyMs);
  zSql = sqlite3_mprintf("PRAGMA synchronous=%s;", azSync[iSync]);
  if( zSql==0 ) return SQLITE_NOMEM;
  rc = sqlite3_exec(p->db, zSql, 0, 0, 0);   /* reads the schema first */
  sqlite3_free(zSql);
  if( rc==SQLITE_OK ) rc = ssCheckIsStore(p);
  if( (rc&0xff)==SQLITE_CANTOPEN ) return ssReadErr(p, rc);
  if( rc==SQLITE_OK ){
    p->nCacheKb = pCfg->nCacheKb>0 ? pCfg->nCacheKb : 8192;
    zSql = sqlite3_mprintf("PRAGMA cache_size=-%d", p->nCacheKb);
    rc = zSql ? sqlite3_exec(p->db, zSql, 0, 0, 0) : SQLITE_NOMEM;
    sqlite3_free(zSql);
  }
  if( rc==SQLITE_OK && !pCfg->bReadOnly && !pCfg->bImmutable ){
    if( ssIsEmpty(p) ){
      /* a new file: free pages go back to the file system when compaction
      ** and GC call store_maintain() */
      rc = sqlite3_exec(p->db, "PRAGMA auto_vacuum=INCREMENTAL", 0, 0, 0);
    }
    /* WAL journaling, the -wal truncated back to 4 MiB after checkpoints */
    if( rc==SQLITE_OK ){
      rc = sqlite3_exec(p->db, "PRAGMA journal_mode=WAL;"
                        " PRAGMA journal_size_limit=4194304", 0, 0, 0);
    }
    if( rc==SQLITE_OK ){
      int iFormat = ssFormatOf(p);
      if( iFormat==0 || iFormat==1 ){
        rc = ssUpgrade(p, p->nBusyMs<SS_MIGRATE_WAIT_MS ? p->nBusyMs
                                                        : SS_MIGRATE_WAIT_MS);
        if( (rc&0xff)==SQLITE_BUSY ){
          /* another connection holds the write lock, as one migrating
          ** the store does: read the old tables (following the migration
          ** when it commits) and migrate at the first write */
          sqlite3_free(p->zErr);
          p->zErr = 0;
          p->bUpgrade = 1;
          rc = SQLITE_OK;
        }else if( rc!=SQLITE_OK ){
          return rc;
        }
      }else{
        rc = ssSchema(p);
      }
    }
  }
  if( rc==SQLITE_OK ){
    p->iFormat = ssFormatOf(p);
    /* a read-only open of a new, empty file reads it as it will be */
    if( p->iFormat<0 ) p->iFormat = SS_FORMAT;
  }
  if( rc!=SQLITE_OK ) rc = ssSetupErr(p, rc);
  return rc;
}

/* "file:PATH?immutable=1" with PATH escaped for a URI (sqlite3_malloc'd;
** NULL when out of memory). */
static char *ssImmutableUri(const char *zPath){
  sqlite3_str *s = sqlite3_str_new(0);
  const char *z;
  sqlite3_str_appendall(s, zPath[0]=='/' ? "file://" : "file:");
  for(z=zPath; *z; z++){
    if( *z=='%' || *z=='?' || *z=='#' ){
      sqlite3_str_appendf(s, "%%%02x", (unsigned char)*z);
    }else{
      sqlite3_str_appendchar(s, 1, *z);
    }
  }
  sqlite3_str_appendall(s, "?immutable=1");
  return sqlite3_str_finish(s);
}

/* SQLITE_OK when the store file zPath has no -wal file holding frames.
** An immutable connection never reads the -wal, so it would show the store
** without the commits still there: those stores are refused. */
static int ssNoWalFrames(StoreSqlite *p, const char *zPath){
  char *zWal = sqlite3_mprintf("%s-wal", zPath);
  struct stat st;
  int bFrames;
  if( zWal==0 ) return SQLITE_NOMEM;
  bFrames = stat(zWal, &st)==0 && st.st_size>0;
  sqlite3_free(zWal);
  if( !bFrames ) return SQLITE_OK;
  p->zErr = sqlite3_mprintf("store: immutable=1 cannot open %s: its -wal"
      " file holds commits not yet in the store file (open it with mode=ro"
      " where its -shm exists or can be created, or checkpoint it on"
      " writable storage)", zPath);
  return SQLITE_CANTOPEN;
}

/* Open the outer file's connection as pCfg says. */
static int ssOpenDb(StoreSqlite *p, const char *zPath,
                    const StoreSqliteConfig *pCfg){
  int flags = pCfg->bReadOnly||pCfg->bImmutable ? SQLITE_OPEN_READONLY
            : SQLITE_OPEN_READWRITE | (pCfg->bCreate ? SQLITE_OPEN_CREATE : 0);
  char *zUri = 0;
  int rc;
  if( pCfg->bImmutable ){
    zUri = ssImmutableUri(zPath);
    if( zUri==0 ) return SQLITE_NOMEM;
    flags |= SQLITE_OPEN_URI;
  }
  rc = sqlite3_open_v2(zUri ? zUri : zPath, &p->db,
                       flags|SQLITE_OPEN_NOMUTEX|SQLITE_OPEN_PRIVATECACHE,
                       ssVfsName(pCfg));
  sqlite3_free(zUri);
  return rc;
}

int store_sqlite_open(const char *zPath, const StoreSqliteConfig *pCfgIn,
                      Store **ppStore, char **pzErr){
  StoreSqliteConfig cfg = *pCfgIn;
  const StoreSqliteConfig *pCfg = &cfg;
  StoreSqlite *p;
  int rc;
  *ppStore = 0;
  if( cfg.bInspect && !cfg.bImmutable
   && store_sqlite_read_only_fs(zPath) ){
    cfg.bImmutable = 1;
  }
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->base.pMethods = &storeSqliteMethods;
  p->nMaxValue = pCfg->nMaxValue>0 ? pCfg->nMaxValue : 65536;
  p->bReadOnly = pCfg->bReadOnly || pCfg->bImmutable;
  p->lk.fd = -1;
  rc = pCfg->bImmutable ? ssNoWalFrames(p, zPath) : SQLITE_OK;
  if( rc==SQLITE_OK ) rc = ssOpenDb(p, zPath, pCfg);
  if( rc!=SQLITE_OK && p->db==0 ){
    if( pzErr ){
      *pzErr = sqlite3_mprintf("%s", p->zErr ? p->zErr : "out of memory");
    }
    ssClose(&p->base);
    return rc;
  }
  if( rc==SQLITE_OK ){
    const char *zFile;
    sqlite3_extended_result_codes(p->db, 1);
    rc = ssSetup(p, pCfg);
    zFile = sqlite3_db_filename(p->db, "main");
    if( rc==SQLITE_OK ){
      rc = store_lockfile_init(&p->lk, zFile && zFile[0] ? zFile : zPath);
    }
  }else{
    ssSetErr(p, "cannot open the store file");
  }
  if( rc!=SQLITE_OK ){
    if( pzErr ) *pzErr = sqlite3_mprintf("%s (%s)", p->zErr?p->zErr:"", zPath);
    ssClose(&p->base);
    return rc;
  }
  *ppStore = &p->base;
  return SQLITE_OK;
}
