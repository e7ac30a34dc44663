/*
** catalog.c -- the catalog of a KV store: the internal table
** ".tables_meta" (table name -> type, persistence, id, options), the byte
** encoding of its entries, and its data file <store>/tables_meta.
**
** The catalog changes only through committed root transactions: its
** actions go into the root WAL like any persistent table's; after a commit
** publishes them, the whole catalog is rewritten atomically (temp file,
** fsync, rename, directory fsync) and only then is the WAL record
** confirmed for the catalog.  At open the file is loaded, then the WAL
** replays every record not yet confirmed, so the file may lag the WAL but
** never leads it by a record that could be lost.
**
** File format (all integers big-endian):
**     "KVCATLG1"  u32 nEntry  { u32 nName name u32 nMeta meta }*  u32 crc32c
** Entry encoding (kv_meta_encode):
**     u8 version(1)  u8 persistence  u64 id  u8 nType type
**     u32 nOptions options
**
** An entry put again with the id it has keeps the table and replaces its
** options (kv_table_set_options).
**
** Locking: publishing (kvCatalogApply) runs with the engine mutex held;
** kvCatalogSave takes KvEngine.catMutex (one file writer at a time), then
** the engine mutex only to serialise the published catalog, and writes
** the file without it.  kvCatalogSaveLocked writes it with the engine
** mutex held, for the writer of a shared store, whose writer lock orders
** every catalog file write (ddl.c).  While the store is shared, a removal
** deletes no file: ddl.c does that once no process can read them.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <fcntl.h>
#include <string.h>

#define KV_CATALOG_FILE  "tables_meta"
#define KV_CATALOG_MAGIC "KVCATLG1"

int kv_meta_encode(const KvMeta *p, KvBuf *pOut){
  uint8_t aHdr[11];
  uint8_t a4[4];
  int nType = (int)strlen(p->zType);
  int nOpt = p->zOptions ? (int)strlen(p->zOptions) : 0;
  int i, rc;
  aHdr[0] = 1;
  aHdr[1] = p->bPersist ? 1 : 0;
  for(i=0; i<8; i++) aHdr[2+i] = (uint8_t)(p->iId >> (56-8*i));
  aHdr[10] = (uint8_t)nType;
  wal_put_be32(a4, (uint32_t)nOpt);
  rc = kv_buf_append(pOut, aHdr, 11);
  if( rc==SQLITE_OK ) rc = kv_buf_append(pOut, p->zType, nType);
  if( rc==SQLITE_OK ) rc = kv_buf_append(pOut, a4, 4);
  if( rc==SQLITE_OK && nOpt ) rc = kv_buf_append(pOut, p->zOptions, nOpt);
  return rc;
}

int kv_meta_decode(const uint8_t *a, int n, KvMeta *p){
  int nType, nOpt, i;
  memset(p, 0, sizeof(*p));
  if( n<15 || a[0]!=1 || a[1]>1 ) return SQLITE_CORRUPT;
  nType = a[10];
  if( nType<1 || nType>=(int)sizeof(p->zType) || 11+nType+4>n ){
    return SQLITE_CORRUPT;
  }
  p->bPersist = a[1];
  for(i=0; i<8; i++) p->iId = (p->iId<<8) | a[2+i];
  memcpy(p->zType, &a[11], nType);
  nOpt = (int)wal_get_be32(&a[11+nType]);
  if( nOpt<0 || 15+nType+nOpt!=n ) return SQLITE_CORRUPT;
  if( nOpt>0 ){
    p->zOptions = sqlite3_mprintf("%.*s", nOpt, &a[15+nType]);
    if( p->zOptions==0 ) return SQLITE_NOMEM;
  }
  return SQLITE_OK;
}

/* ------------------------------------------------------------ apply --- */

/* Make the live table list agree with one catalog entry (a put with its
** meta bytes, or a delete).  apNew: tables a committing root created,
** which are used instead of fresh objects. */
static int catEntry(KvEngine *pEng, const KvMapEntry *e,
                          KvTable **apNew, int nNew, char **pzErr){
  KvTable *pOld = kvTableFind(pEng, (const char*)e->aKey, e->nKey);
  KvTable *pNew = 0;
  KvMeta meta;
  int i, rc;
  if( e->bTomb ){
    if( pOld ){
      char *zIgnore = 0;
      /* shared: another process may read the files yet (ddl.c) */
      if( !pEng->bShared ) pOld->pBackend->xDrop(pOld->pData, &zIgnore);
      sqlite3_free(zIgnore);
      kvTableUnlink(pEng, pOld);
    }
    return SQLITE_OK;
  }
  rc = kv_meta_decode(e->aVal, e->nVal, &meta);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: corrupt catalog entry for table %.*s",
                             e->nKey, e->aKey);
    return rc;
  }
  if( meta.iId>=pEng->iNextTableId ) pEng->iNextTableId = meta.iId+1;
  if( pOld && pOld->meta.iId==meta.iId ){
    /* the same table with new options (kv_table_set_options) */
    sqlite3_free(pOld->meta.zOptions);
    pOld->meta.zOptions = meta.zOptions;
    return rc;
  }
  if( pOld ) kvTableUnlink(pEng, pOld);
  for(i=0; i<nNew; i++){
    if( apNew[i]->nName==e->nKey && memcmp(apNew[i]->zName, e->aKey, e->nKey)==0 ){
      pNew = apNew[i];
      pNew->nRef++;
    }
  }
  if( pNew==0 ){
    rc = kvTableNew(pEng, (const char*)e->aKey, e->nKey, &meta, &pNew, pzErr);
  }
  kv_meta_clear(&meta);
  if( rc==SQLITE_OK && pNew->pData==0 ){
    rc = kvTableOpenData(pNew, !pEng->bLoadingCatalog, pzErr);
  }
  if( rc==SQLITE_OK ) kvTableLink(pEng, pNew);
  kvTableUnref(pNew);
  return rc;
}

int kvCatalogApply(KvEngine *pEng, KvMap *pBatch, uint64_t iSeq,
                   KvTable **apNew, int nNew, char **pzErr){
  KvMapCursor *pCsr = kv_map_cursor_new(pBatch);
  KvTable *pMeta = pEng->pMeta;
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  if( pCsr==0 ) return SQLITE_NOMEM;
  if( pMeta->pRev==0 && (pMeta->pRev = kv_map_new())==0 ) rc = SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    rc = catEntry(pEng, &e, apNew, nNew, pzErr);
    if( rc==SQLITE_OK ){
      rc = kv_map_put(&pMeta->pRev, e.aKey, e.nKey, 0, 0, iSeq, 0);
    }
  }
  __atomic_store_n(&pEng->iCatalogSeq, iSeq, __ATOMIC_RELAXED);
  kv_map_cursor_free(pCsr);
  if( rc==SQLITE_OK ){
    rc = pMeta->pBackend->xApply(pMeta->pData, pBatch, iSeq, 0);
  }
  return rc;
}

/* ------------------------------------------------------------- load --- */

static int catParse(KvEngine *pEng, const uint8_t *a, int64_t n,
                          char **pzErr){
  KvMap *pBatch = kv_map_new();
  int64_t off = 12;
  uint32_t i, nEntry;
  int rc = SQLITE_OK;
  if( pBatch==0 ) return SQLITE_NOMEM;
  if( n<16 || memcmp(a, KV_CATALOG_MAGIC, 8)!=0
   || wal_crc32c(0, a, (size_t)(n-4))!=wal_get_be32(&a[n-4]) ){
    rc = SQLITE_CORRUPT;
  }
  nEntry = rc==SQLITE_OK ? wal_get_be32(&a[8]) : 0;
  for(i=0; i<nEntry && rc==SQLITE_OK; i++){
    uint32_t nName, nMeta;
    if( off+4>n-4 ){ rc = SQLITE_CORRUPT; break; }
    nName = wal_get_be32(&a[off]);
    if( nName<1 || nName>KV_MAX_NAME_BYTES || off+4+(int64_t)nName+4>n-4 ){
      rc = SQLITE_CORRUPT; break;
    }
    nMeta = wal_get_be32(&a[off+4+nName]);
    if( nMeta>65536 || off+8+(int64_t)nName+nMeta>n-4 ){
      rc = SQLITE_CORRUPT; break;
    }
    rc = kv_map_put(&pBatch, &a[off+4], nName, &a[off+8+nName], nMeta, 0, 0);
    off += 8+nName+nMeta;
  }
  if( rc==SQLITE_OK && off!=n-4 ) rc = SQLITE_CORRUPT;
  if( rc==SQLITE_OK ){
    pEng->bLoadingCatalog = 1;
    rc = kvCatalogApply(pEng, pBatch, pEng->iSeq, 0, 0, pzErr);
    pEng->bLoadingCatalog = 0;
  }
  if( rc==SQLITE_CORRUPT && *pzErr==0 ){
    *pzErr = sqlite3_mprintf("kv: catalog file %s/%s is corrupt",
                             pEng->zDir, KV_CATALOG_FILE);
  }
  kv_map_unref(pBatch);
  return rc;
}

int kvCatalogReadFile(KvEngine *pEng, const char *zPath, int64_t mxByte,
                      uint8_t **pa, int64_t *pn, char **pzErr){
  const WalIo *io = pEng->pIo;
  uint8_t *a = 0;
  off_t sz = 0;
  int fd, rc = SQLITE_OK;
  *pa = 0;
  *pn = 0;
  fd = io->xOpen(io->pCtx, zPath, O_RDONLY, 0);
  if( fd<0 ){
    if( errno==ENOENT ) return SQLITE_OK;
    *pzErr = sqlite3_mprintf("kv: cannot open %s: %s", zPath, strerror(errno));
    return SQLITE_CANTOPEN;
  }
  if( io->xFstatSize(io->pCtx, fd, &sz)!=0 || sz>(off_t)mxByte ){
    rc = SQLITE_IOERR_READ;
  }else if( (a = sqlite3_malloc64(sz>0 ? sz : 1))==0 ){
    rc = SQLITE_NOMEM;
  }else if( io->xPread(io->pCtx, fd, a, (size_t)sz, 0)!=(ssize_t)sz ){
    rc = SQLITE_IOERR_READ;
  }
  io->xClose(io->pCtx, fd);
  if( rc==SQLITE_IOERR_READ ){
    *pzErr = sqlite3_mprintf("kv: cannot read %s: %s", zPath,
                             sz>(off_t)mxByte ? "file too large"
                                              : strerror(errno));
  }
  if( rc!=SQLITE_OK ){
    sqlite3_free(a);
    return rc;
  }
  *pa = a;
  *pn = (int64_t)sz;
  return SQLITE_OK;
}

int kvCatalogLoad(KvEngine *pEng, char **pzErr){
  char *zPath = sqlite3_mprintf("%s/%s", pEng->zDir, KV_CATALOG_FILE);
  uint8_t *a = 0;
  int64_t sz = 0;
  int rc;
  if( zPath==0 ) return SQLITE_NOMEM;
  rc = kvCatalogReadFile(pEng, zPath, (int64_t)1<<30, &a, &sz, pzErr);
  if( rc==SQLITE_OK && a ) rc = catParse(pEng, a, sz, pzErr);
  sqlite3_free(a);
  sqlite3_free(zPath);
  return rc;
}

/* ------------------------------------------------------------- save --- */

/* Serialise the published catalog (engine mutex held by the caller). */
static int catSerialise(KvEngine *pEng, KvBuf *pOut){
  KvBackendSnap *pSnap = 0;
  KvBackendCursor *pCsr = 0;
  const KvBackend *pB = pEng->pMeta->pBackend;
  KvMapEntry e;
  uint8_t a4[4];
  uint32_t n = 0;
  int bOn, rc = pB->xSnapshot(pEng->pMeta->pData, &pSnap);
  if( rc==SQLITE_OK ) rc = pB->xCursorOpen(pSnap, &pCsr);
  if( rc==SQLITE_OK ) rc = kv_buf_append(pOut, KV_CATALOG_MAGIC "\0\0\0\0", 12);
  for(bOn=rc==SQLITE_OK && pB->xCursorSeek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=pB->xCursorNext(pCsr)){
    pB->xCursorEntry(pCsr, &e);
    wal_put_be32(a4, e.nKey);
    rc = kv_buf_append(pOut, a4, 4);
    if( rc==SQLITE_OK ) rc = kv_buf_append(pOut, e.aKey, e.nKey);
    wal_put_be32(a4, e.nVal);
    if( rc==SQLITE_OK ) rc = kv_buf_append(pOut, a4, 4);
    if( rc==SQLITE_OK ) rc = kv_buf_append(pOut, e.aVal, e.nVal);
    n++;
  }
  if( rc==SQLITE_OK ){
    wal_put_be32(&pOut->a[8], n);
    wal_put_be32(a4, wal_crc32c(0, pOut->a, pOut->n));
    rc = kv_buf_append(pOut, a4, 4);
  }
  if( pCsr ) pB->xCursorClose(pCsr);
  if( pSnap ) pB->xSnapshotFree(pSnap);
  return rc;
}

/* Write a[0..n) to zPath atomically through the store's I/O layer. */
static int catWriteAtomic(KvEngine *pEng, const char *zPath,
                         const uint8_t *a, int n, char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zTmp = sqlite3_mprintf("%s.tmp", zPath);
  const char *zStep = "open";
  int fd, rc = SQLITE_IOERR_WRITE;
  if( zTmp==0 ) return SQLITE_NOMEM;
  fd = io->xOpen(io->pCtx, zTmp, O_WRONLY|O_CREAT|O_TRUNC, 0644);
  if( fd>=0 ){
    zStep = "write";
    if( io->xPwrite(io->pCtx, fd, a, n, 0)==n ){
      zStep = "fsync";
      if( io->xFsync(io->pCtx, fd)==0 ) rc = SQLITE_OK;
    }
    if( io->xClose(io->pCtx, fd)!=0 && rc==SQLITE_OK ) rc = SQLITE_IOERR_WRITE;
  }
  if( rc==SQLITE_OK ){
    zStep = "rename";
    if( io->xRename(io->pCtx, zTmp, zPath)!=0 ) rc = SQLITE_IOERR_WRITE;
  }
  if( rc==SQLITE_OK ){
    zStep = "directory fsync";
    if( io->xSyncDir(io->pCtx, pEng->zDir)!=0 ) rc = SQLITE_IOERR_FSYNC;
  }
  if( rc!=SQLITE_OK ){
    if( errno==ENOSPC || errno==EDQUOT ) rc = SQLITE_FULL;
    *pzErr = sqlite3_mprintf("kv: %s of catalog file %s failed: %s",
                             zStep, zTmp, strerror(errno));
  }
  sqlite3_free(zTmp);
  return rc;
}

/* 1 if zPath holds exactly a[0..n) and was synced again with its
** directory (so it needs no rewrite, which a full disk would refuse: a
** replay after a crash applies creates the file already holds); 0
** otherwise, also on any error (then the caller rewrites it). */
static int catSame(KvEngine *pEng, const char *zPath,
                         const uint8_t *a, int n){
  const WalIo *io = pEng->pIo;
  int fd = io->xOpen(io->pCtx, zPath, O_RDONLY, 0);
  uint8_t *aOld = 0;
  off_t sz = 0;
  int bSame = 0;
  if( fd<0 ) return 0;
  if( io->xFstatSize(io->pCtx, fd, &sz)==0 && sz==(off_t)n
   && (aOld = sqlite3_malloc64(n>0 ? n : 1))!=0
   && io->xPread(io->pCtx, fd, aOld, (size_t)n, 0)==(ssize_t)n
   && memcmp(aOld, a, n)==0 ){
    bSame = io->xFsync(io->pCtx, fd)==0
         && io->xSyncDir(io->pCtx, pEng->zDir)==0;
  }
  sqlite3_free(aOld);
  io->xClose(io->pCtx, fd);
  return bSame;
}

int kvCatalogSave(KvEngine *pEng, char **pzErr){
  KvBuf buf = {0, 0, 0};
  char *zPath;
  int rc;
  if( pEng->zDir==0 ) return SQLITE_OK;
  zPath = sqlite3_mprintf("%s/%s", pEng->zDir, KV_CATALOG_FILE);
  if( zPath==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&pEng->catMutex);
  pthread_mutex_lock(&pEng->mutex);
  rc = catSerialise(pEng, &buf);
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && !catSame(pEng, zPath, buf.a, buf.n) ){
    rc = catWriteAtomic(pEng, zPath, buf.a, buf.n, pzErr);
  }
  pthread_mutex_unlock(&pEng->catMutex);
  kv_buf_free(&buf);
  sqlite3_free(zPath);
  return rc;
}

int kvCatalogWriteFile(KvEngine *pEng, const char *zPath, const uint8_t *a,
                       int n, char **pzErr){
  return catWriteAtomic(pEng, zPath, a, n, pzErr);
}

int kvCatalogSaveLocked(KvEngine *pEng, char **pzErr){
  KvBuf buf = {0, 0, 0};
  char *zPath;
  int rc;
  if( pEng->zDir==0 ) return SQLITE_OK;
  zPath = sqlite3_mprintf("%s/%s", pEng->zDir, KV_CATALOG_FILE);
  if( zPath==0 ) return SQLITE_NOMEM;
  rc = catSerialise(pEng, &buf);
  if( rc==SQLITE_OK && !catSame(pEng, zPath, buf.a, buf.n) ){
    rc = catWriteAtomic(pEng, zPath, buf.a, buf.n, pzErr);
  }
  kv_buf_free(&buf);
  sqlite3_free(zPath);
  return rc;
}
