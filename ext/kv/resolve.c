/*
** resolve.c -- the resolution log of named prepared transactions: the
** decisions kv_commit_prepared / kv_rollback_prepared took, kept so that
** a resolution repeated later (after any number of restarts) is answered
** the same way, and so that a replay knows what became of a prepared
** record whose resolution it cannot see in the WAL.
**
** File <store>/prepared.log, appended to and flushed before a decision
** takes effect:
**     { u32 nBody  u32 crc32c(body)  body }*        (little-endian)
**     body: u8 decision ('c' commit, 'r' rollback)  u64 unix ms  gid bytes
** A torn or damaged tail (a crash in an append) is cut off at open.  At
** open, decisions older than KV_RESOLVED_KEEP_MS are forgotten and the file
** is rewritten without them (temp file, fsync, rename, directory fsync).
** In memory: KvEngine.pResolved, gid -> (decision, ms), guarded by the
** engine mutex; appends are serialised by KvEngine.resMutex.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/time.h>

#define RES_FILE  "prepared.log"

/* *pzErr = the printf-formatted message. */
#define resErr(pzErr, ...) \
  do{ if( pzErr ) *(pzErr) = sqlite3_mprintf(__VA_ARGS__); }while(0)
#define RES_HDR   8                 /* u32 length, u32 crc */
#define RES_FIXED 9                 /* decision + ms */

int64_t kvNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* Encode one entry (header and body) into pBuf (appended). */
static int resEncode(KvBuf *pBuf, int cDecision, int64_t iMs,
                     const char *zGid, int nGid){
  uint8_t aHdr[RES_HDR+RES_FIXED];
  int iBody = pBuf->n + RES_HDR;
  int rc;
  wal_put_u32(aHdr, (uint32_t)(RES_FIXED+nGid));
  aHdr[RES_HDR] = (uint8_t)cDecision;
  wal_put_u64(aHdr+RES_HDR+1, (uint64_t)iMs);
  rc = kv_buf_append(pBuf, aHdr, (int)sizeof(aHdr));
  if( rc==SQLITE_OK ) rc = kv_buf_append(pBuf, zGid, nGid);
  if( rc==SQLITE_OK ){
    wal_put_u32(pBuf->a+iBody-4, wal_crc32c(0, pBuf->a+iBody,
                                             RES_FIXED+nGid));
  }
  return rc;
}

/* The map value of a decision: u8 decision, u64 ms. */
static int resRemember(KvEngine *pEng, int cDecision, int64_t iMs,
                       const uint8_t *aGid, int nGid){
  uint8_t aVal[RES_FIXED];
  aVal[0] = (uint8_t)cDecision;
  wal_put_u64(aVal+1, (uint64_t)iMs);
  if( pEng->pResolved==0 && (pEng->pResolved = kv_map_new())==0 ){
    return SQLITE_NOMEM;
  }
  return kv_map_put(&pEng->pResolved, aGid, nGid, aVal, RES_FIXED, 0, 0);
}

/* Rewrite the file from the map (the decisions kept), atomically. */
static int resRewrite(KvEngine *pEng, char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zPath = sqlite3_mprintf("%s/" RES_FILE, pEng->zDir);
  char *zTmp = sqlite3_mprintf("%s/" RES_FILE "-new", pEng->zDir);
  KvBuf buf = {0, 0, 0};
  KvMapCursor *pCsr = pEng->pResolved ? kv_map_cursor_new(pEng->pResolved) : 0;
  KvMapEntry e;
  int bOn, fd = -1, rc = (zPath && zTmp) ? SQLITE_OK : SQLITE_NOMEM;
  for(bOn = pCsr ? kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0) : 0;
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    rc = resEncode(&buf, e.aVal[0], (int64_t)wal_get_u64(e.aVal+1),
                   (const char*)e.aKey, e.nKey);
  }
  kv_map_cursor_free(pCsr);
  if( rc==SQLITE_OK ){
    fd = io->xOpen(io->pCtx, zTmp, O_WRONLY|O_CREAT|O_TRUNC, 0644);
    if( fd<0
     || (buf.n>0 && io->xPwrite(io->pCtx, fd, buf.a, buf.n, 0)!=buf.n)
     || io->xFsync(io->pCtx, fd)!=0
     || io->xRename(io->pCtx, zTmp, zPath)!=0
     || io->xSyncDir(io->pCtx, pEng->zDir)!=0 ){
      resErr(pzErr, "kv: cannot rewrite %s: %s", zPath, strerror(errno));
      rc = SQLITE_IOERR_WRITE;
    }
  }
  if( fd>=0 ) io->xClose(io->pCtx, fd);
  kv_buf_free(&buf);
  sqlite3_free(zPath);
  sqlite3_free(zTmp);
  return rc;
}

int kvResolvedLoad(KvEngine *pEng, char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zPath = sqlite3_mprintf("%s/" RES_FILE, pEng->zDir);
  int64_t iOld = kvNowMs() - KV_RESOLVED_KEEP_MS;
  uint8_t *a = 0;
  off_t sz = 0;
  size_t iOff = 0;
  int fd, nDrop = 0, bTorn = 0, rc = SQLITE_OK;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = io->xOpen(io->pCtx, zPath, O_RDONLY, 0);
  if( fd<0 ){
    sqlite3_free(zPath);
    return SQLITE_OK;                      /* no decision was ever taken */
  }
  if( io->xFstatSize(io->pCtx, fd, &sz)!=0 ) rc = SQLITE_IOERR_READ;
  if( rc==SQLITE_OK && sz>0 && (a = sqlite3_malloc64(sz))==0 ) rc = SQLITE_NOMEM;
  if( rc==SQLITE_OK && sz>0 && io->xPread(io->pCtx, fd, a, sz, 0)!=sz ){
    rc = SQLITE_IOERR_READ;
  }
  io->xClose(io->pCtx, fd);
  while( rc==SQLITE_OK && iOff+RES_HDR<=(size_t)sz ){
    uint32_t n = wal_get_u32(a+iOff);
    const uint8_t *pBody = a+iOff+RES_HDR;
    int64_t iMs;
    if( n<RES_FIXED+1 || n>RES_FIXED+KV_GID_MAX_BYTES
     || iOff+RES_HDR+n>(size_t)sz
     || wal_crc32c(0, pBody, n)!=wal_get_u32(a+iOff+4)
     || (pBody[0]!='c' && pBody[0]!='r') ){
      bTorn = 1;
      break;
    }
    iMs = (int64_t)wal_get_u64(pBody+1);
    if( iMs<iOld ) nDrop++;
    else rc = resRemember(pEng, pBody[0], iMs, pBody+RES_FIXED, n-RES_FIXED);
    iOff += RES_HDR + n;
  }
  if( rc==SQLITE_OK && iOff<(size_t)sz ) bTorn = 1;
  sqlite3_free(a);
  if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ){
    resErr(pzErr, "kv: cannot read %s: %s", zPath, strerror(errno));
  }
  if( rc==SQLITE_OK && (bTorn || nDrop>0) ){
    if( bTorn ){
      sqlite3_log(SQLITE_NOTICE, "kv: %s: a torn tail is cut off at byte %lld",
                  zPath, (long long)iOff);
    }
    rc = resRewrite(pEng, pzErr);
  }
  sqlite3_free(zPath);
  return rc;
}

int kvResolvedAdd(KvEngine *pEng, int cDecision, const char *zGid, int nGid,
                  char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zPath = sqlite3_mprintf("%s/" RES_FILE, pEng->zDir);
  int64_t iMs = kvNowMs();
  KvBuf buf = {0, 0, 0};
  int fd = -1, bNew = 0, rc = zPath ? SQLITE_OK : SQLITE_NOMEM;
  off_t sz = 0;
  if( rc==SQLITE_OK ) rc = resEncode(&buf, cDecision, iMs, zGid, nGid);
  pthread_mutex_lock(&pEng->resMutex);
  if( rc==SQLITE_OK ){
    fd = io->xOpen(io->pCtx, zPath, O_RDWR, 0);
    if( fd<0 ){
      bNew = 1;
      fd = io->xOpen(io->pCtx, zPath, O_RDWR|O_CREAT, 0644);
    }
    if( fd<0 || io->xFstatSize(io->pCtx, fd, &sz)!=0
     || io->xPwrite(io->pCtx, fd, buf.a, buf.n, sz)!=buf.n
     || io->xFsync(io->pCtx, fd)!=0
     || (bNew && io->xSyncDir(io->pCtx, pEng->zDir)!=0) ){
      int e = errno;
      if( fd>=0 ) io->xFtruncate(io->pCtx, fd, sz);
      resErr(pzErr, "kv: cannot record the resolution of prepared "
                  "transaction '%.*s' in %s: %s; it stays in doubt", nGid,
                  zGid, zPath, strerror(e));
      rc = e==ENOSPC ? SQLITE_FULL : SQLITE_IOERR_WRITE;
    }
  }
  if( fd>=0 ) io->xClose(io->pCtx, fd);
  pthread_mutex_unlock(&pEng->resMutex);
  if( rc==SQLITE_OK ){
    pthread_mutex_lock(&pEng->mutex);
    rc = resRemember(pEng, cDecision, iMs, (const uint8_t*)zGid, nGid);
    pthread_mutex_unlock(&pEng->mutex);
  }
  kv_buf_free(&buf);
  sqlite3_free(zPath);
  return rc;
}

int kvResolvedGet(KvEngine *pEng, const char *zGid, int nGid, int64_t *piMs){
  KvMapEntry e;
  if( pEng->pResolved==0
   || !kv_map_get(pEng->pResolved, zGid, nGid, &e) || e.nVal<RES_FIXED ){
    return 0;
  }
  if( piMs ) *piMs = (int64_t)wal_get_u64(e.aVal+1);
  return e.aVal[0];
}
