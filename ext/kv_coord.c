/*
** kv_coord.c -- the database file as the coordinator of a transaction that
** writes KV tables and tables of a database file (a "mixed" transaction),
** so that a crash never applies one part without the other.
**
** Protocol.  SQLite calls the xSync of the written virtual tables before
** it starts committing any database file (vdbeCommit: "an xSync() callback
** may add an attached database to the transaction").  There, when the
** connection has a write transaction open on a database file (not temp,
** not in memory), kv_coord_prepare():
**   1. names that file as the root's condition: its URI and a random
**      marker id (kv_root_set_condition);
**   2. prepares the root: the KV part's WAL record is flushed, marked as
**      conditional on the marker;
**   3. inserts the marker row (id, cid, store) into
**      <schema>._depot_kv_commit of that file, created on demand, inside
**      the same SQLite transaction; and deletes the markers of the same
**      store whose records no replay can reach any more (their CID is
**      below the store's replay floor: their WAL segments have retired).
** SQLite then commits the file: the marker row is durable exactly when the
** file part is.  When the store is next opened after a crash, the replay
** asks kv_coord_probe() about each conditional record: marker present ->
** applied, absent -> withdrawn.  A transaction that writes no database
** file, or whose KV part logs nothing, takes none of these steps.
**
** The probe opens the coordinator on a private connection with the
** extension's automatic setup suspended for the thread (kv_coord_probing),
** since it runs inside the store's open: a hot journal is rolled back
** there, as any first reader would.  A coordinator file that no longer
** exists committed nothing that survives: its records are withdrawn.
*/
#include "config.h"
#include "ext/kv_sql.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define COORD_TABLE "_depot_kv_commit"

/* Set while this thread opens a coordinator for the probe. */
static __thread int coordProbing = 0;

int kv_coord_probing(void){
  return coordProbing;
}

/* ------------------------------------------------------- coordinator --- */

/* The schema of the first database file (main first, then attached ones)
** that has a write transaction open on db and a file, or NULL. */
static const char *coordSchema(sqlite3 *db){
  int i;
  for(i=0; ; i++){
    const char *zSchema = sqlite3_db_name(db, i);
    const char *zFile;
    if( zSchema==0 ) return 0;
    if( i==1 ) continue;                         /* temp */
    if( sqlite3_txn_state(db, zSchema)!=SQLITE_TXN_WRITE ) continue;
    zFile = sqlite3_db_filename(db, zSchema);
    if( zFile && zFile[0] ) return zSchema;
  }
}

/* Append z to the URI being built in *pz, percent-escaping what a URI
** path or parameter cannot hold as is. */
static char *coordEscape(char *zOut, const char *z){
  static const char aHex[] = "0123456789ABCDEF";
  char *zNew;
  size_t n = zOut ? strlen(zOut) : 0, m = strlen(z), i, j;
  zNew = sqlite3_realloc64(zOut, n + 3*m + 1);
  if( zNew==0 ){ sqlite3_free(zOut); return 0; }
  for(i=0, j=n; i<m; i++){
    unsigned char c = (unsigned char)z[i];
    if( (c>='a' && c<='z') || (c>='A' && c<='Z') || (c>='0' && c<='9')
     || c=='/' || c=='.' || c=='_' || c=='-' || c=='~' ){
      zNew[j++] = (char)c;
    }else{
      zNew[j++] = '%';
      zNew[j++] = aHex[c>>4];
      zNew[j++] = aHex[c&15];
    }
  }
  zNew[j] = 0;
  return zNew;
}

/* The URI that opens database zSchema of db again, with its VFS and URI
** parameters: "file:/abs/path?vfs=depot&db=orders".  sqlite3_malloc'd,
** NULL on OOM. */
static char *coordUri(sqlite3 *db, const char *zSchema){
  sqlite3_filename zFile = sqlite3_db_filename(db, zSchema);
  sqlite3_vfs *pVfs = 0, *pDflt = sqlite3_vfs_find(0);
  char *z = sqlite3_mprintf("file:");
  int i, bVfs = 0;
  const char *zKey;
  z = z ? coordEscape(z, zFile) : 0;
  for(i=0; z && (zKey = sqlite3_uri_key(zFile, i))!=0; i++){
    const char *zVal = sqlite3_uri_parameter(zFile, zKey);
    if( strcmp(zKey, "vfs")==0 ) bVfs = 1;
    z = sqlite3_mprintf("%z%c", z, i==0 ? '?' : '&');
    if( z ) z = coordEscape(z, zKey);
    if( z ) z = sqlite3_mprintf("%z=", z);
    if( z ) z = coordEscape(z, zVal ? zVal : "");
  }
  if( z && !bVfs
   && sqlite3_file_control(db, zSchema, SQLITE_FCNTL_VFS_POINTER, &pVfs)
      ==SQLITE_OK
   && pVfs && pDflt && strcmp(pVfs->zName, pDflt->zName)!=0 ){
    z = sqlite3_mprintf("%z%cvfs=", z, i==0 ? '?' : '&');
    if( z ) z = coordEscape(z, pVfs->zName);
  }
  return z;
}

/* Run zSql (one statement whose parameters are ?1 and ?2, integers i1
** and i2, and ?3, the text zText, each where present) on db.  SQLITE_OK or the error, message in
** *pzErr. */
static int coordExec(sqlite3 *db, const char *zSql, int64_t i1, int64_t i2,
                     const char *zText, char **pzErr){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  if( rc==SQLITE_OK ){
    int nParam = sqlite3_bind_parameter_count(pStmt);
    if( nParam>=1 ) sqlite3_bind_int64(pStmt, 1, i1);
    if( nParam>=2 ) sqlite3_bind_int64(pStmt, 2, i2);
    if( nParam>=3 ) sqlite3_bind_text(pStmt, 3, zText, -1, SQLITE_STATIC);
    rc = sqlite3_step(pStmt);
    if( rc==SQLITE_DONE || rc==SQLITE_ROW ) rc = SQLITE_OK;
    else rc = sqlite3_finalize(pStmt), pStmt = 0;
  }
  if( rc!=SQLITE_OK && *pzErr==0 ){
    *pzErr = sqlite3_mprintf("kv: the commit marker of a transaction that "
                             "writes KV tables and database files could not "
                             "be written: %s", sqlite3_errmsg(db));
  }
  sqlite3_finalize(pStmt);
  return rc;
}

/* Insert the marker of record cid of store zStore into zSchema (creating
** the table first if needed), then drop the markers no replay needs. */
static int coordMark(KvConn *p, const char *zSchema, int64_t iMarker,
                     KvEngine *pEng, uint64_t cid, char **pzErr){
  const char *zStore = kv_engine_dir(pEng);
  uint64_t iFloor;
  char *zSql = sqlite3_mprintf("CREATE TABLE IF NOT EXISTS \"%w\"."
      COORD_TABLE "(id INTEGER PRIMARY KEY, cid INTEGER NOT NULL, "
      "store TEXT NOT NULL)", zSchema);
  int rc = zSql ? SQLITE_OK : SQLITE_NOMEM;
  if( rc==SQLITE_OK && sqlite3_table_column_metadata(p->db, zSchema,
          COORD_TABLE, 0, 0, 0, 0, 0, 0)!=SQLITE_OK ){
    rc = coordExec(p->db, zSql, 0, 0, 0, pzErr);
  }
  sqlite3_free(zSql);
  if( rc!=SQLITE_OK ) return rc;
  zSql = sqlite3_mprintf("INSERT INTO \"%w\"." COORD_TABLE
                         "(id, cid, store) VALUES(?1, ?2, ?3)", zSchema);
  rc = zSql ? coordExec(p->db, zSql, iMarker, (int64_t)cid, zStore, pzErr)
            : SQLITE_NOMEM;
  sqlite3_free(zSql);
  iFloor = kv_engine_replay_floor(pEng);
  if( rc==SQLITE_OK && (p->pGcEng!=pEng || iFloor>p->iGcFloor) ){
    zSql = sqlite3_mprintf("DELETE FROM \"%w\"." COORD_TABLE
                            " WHERE store=?3 AND cid<?1", zSchema);
    rc = zSql ? coordExec(p->db, zSql, (int64_t)iFloor, 0, zStore, pzErr)
              : SQLITE_NOMEM;
    sqlite3_free(zSql);
    if( rc==SQLITE_OK ){
      p->pGcEng = pEng;              /* compared, never dereferenced */
      p->iGcFloor = iFloor;
    }
  }
  return rc;
}

#ifdef DEPOT_TEST
static int coordTestOff = 0;        /* kv_coord_test_off */
void kv_coord_test_off(int bOff){
  __atomic_store_n(&coordTestOff, bOff, __ATOMIC_SEQ_CST);
}
# define coordOff() __atomic_load_n(&coordTestOff, __ATOMIC_SEQ_CST)
#else
# define coordOff() 0
#endif

int kv_coord_prepare(KvConn *p, KvRoot *r, char **pzErr){
  const char *zSchema = coordOff() ? 0 : coordSchema(p->db);
  KvEngine *pEng = kv_root_engine(r);
  char *zUri;
  int64_t iMarker = 0;
  int rc;
  if( zSchema==0 || kv_engine_dir(pEng)==0 ){
    kv_root_set_condition(r, 0, 0);
    return kv_root_prepare(r, pzErr);
  }
  zUri = coordUri(p->db, zSchema);
  if( zUri==0 ) return SQLITE_NOMEM;
  sqlite3_randomness(sizeof(iMarker), &iMarker);
  iMarker &= INT64_MAX;
  if( iMarker==0 ) iMarker = 1;
  rc = kv_root_set_condition(r, zUri, iMarker);
  if( rc==SQLITE_TOOBIG ){
    *pzErr = sqlite3_mprintf("kv: the URI of database %s is %d bytes, the "
        "limit for a database that commits KV tables is %d", zSchema,
        (int)strlen(zUri), KV_COND_MAX_BYTES);
  }
  sqlite3_free(zUri);
  if( rc==SQLITE_OK ) rc = kv_root_prepare(r, pzErr);
  if( rc==SQLITE_OK && kv_root_cid(r)!=0 ){
    rc = coordMark(p, zSchema, iMarker, pEng, kv_root_cid(r), pzErr);
  }
  return rc;
}

/* ------------------------------------------------------------- probe --- */

/* The file path of URI zUri ("file:" + escaped path + "?..."), unescaped
** (sqlite3_malloc'd), or NULL. */
static char *coordUriPath(const char *zUri){
  size_t n, i, j;
  char *z;
  if( strncmp(zUri, "file:", 5)!=0 ) return 0;
  zUri += 5;
  n = strcspn(zUri, "?#");
  z = sqlite3_malloc64(n+1);
  if( z==0 ) return 0;
  for(i=j=0; i<n; i++){
    int c = (unsigned char)zUri[i];
    if( c=='%' && i+2<n+1 && zUri[i+1] && zUri[i+2] ){
      char a[3] = { zUri[i+1], zUri[i+2], 0 };
      c = (int)strtol(a, 0, 16);
      i += 2;
    }
    z[j++] = (char)c;
  }
  z[j] = 0;
  return z;
}

int kv_coord_probe(const char *zCoord, int64_t iMarker, uint64_t cid,
                   int *pbHeld, char **pzErr){
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  char *zPath = coordUriPath(zCoord);
  struct stat st;
  int rc;
  *pbHeld = 0;
  if( zPath && stat(zPath, &st)!=0 && errno==ENOENT ){
    sqlite3_log(SQLITE_NOTICE, "kv: database %s is gone: the KV part of "
                "its transaction %lld is discarded", zPath,
                (long long)iMarker);
    sqlite3_free(zPath);
    return SQLITE_OK;
  }
  sqlite3_free(zPath);
  coordProbing = 1;
  rc = sqlite3_open_v2(zCoord, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
  coordProbing = 0;
  if( rc==SQLITE_OK ) sqlite3_busy_timeout(db, 10000);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "SELECT cid FROM " COORD_TABLE
                            " WHERE id=?1", -1, &pStmt, 0);
    if( rc==SQLITE_ERROR
     && sqlite3_table_column_metadata(db, "main", COORD_TABLE, 0, 0, 0, 0,
                                      0, 0)!=SQLITE_OK ){
      rc = SQLITE_OK;                 /* no marker was ever written there */
    }else if( rc==SQLITE_OK ){
      sqlite3_bind_int64(pStmt, 1, iMarker);
      rc = sqlite3_step(pStmt);
      if( rc==SQLITE_ROW ){
        *pbHeld = (uint64_t)sqlite3_column_int64(pStmt, 0)==cid;
        rc = SQLITE_OK;
      }else if( rc==SQLITE_DONE ){
        rc = SQLITE_OK;
      }
    }
  }
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("%s", db ? sqlite3_errmsg(db)
                                      : sqlite3_errstr(rc));
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return rc;
}
