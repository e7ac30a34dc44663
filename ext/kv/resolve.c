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
**     body: u8 decision ('C' commit, 'R' rollback)  u64 unix ms
**           u64 cid of the prepared WAL record  gid bytes
** (or, as first written: u8 'c' or 'r', u64 unix ms, gid bytes: cid 0).
** A torn or damaged tail (a crash in an append) is cut off at open.
** Decisions older than KV_RESOLVED_KEEP_MS whose prepared record is in a
** retired WAL segment (cid below kv_engine_replay_floor: no replay can
** meet it again and take it for in doubt) are forgotten and the file is
** rewritten without them (temp file prepared.log-new, fsync, rename,
** directory fsync: a crash at any point leaves the old file or the new
** one, each holding every decision younger than the keep time) at open,
** and while the store runs whenever the file reaches nResTrimAt entries,
** max(2 x the entries kept by the last trim, KV_RESOLVED_TRIM_MIN): the
** file holds at most max(2D, KV_RESOLVED_TRIM_MIN) entries of at most
** 8+17+KV_GID_MAX_BYTES bytes, D being the most decisions taken within
** one KV_RESOLVED_KEEP_MS (or whose records are still in the WAL), and
** each trim costs O(entries), amortised O(1)
** per decision.  A trim that fails to write keeps the old file (its old
** entries are dropped at the next open) and the decision stands.
** In memory: KvEngine.pResolved, gid -> (decision, ms), guarded by the
** engine mutex; appends and trims are serialised by KvEngine.resMutex.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "ext/kv/kv_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>

#define RES_FILE  "prepared.log"

/* *pzErr = the printf-formatted message. */
#define resErr(pzErr, ...) \
  do{ if( pzErr ) *(pzErr) = sqlite3_mprintf(__VA_ARGS__); }while(0)
#define RES_HDR   8                 /* u32 length, u32 crc */
#define RES_FIXED_OLD 9             /* decision + ms ('c', 'r') */
#define RES_FIXED 17                /* decision + ms + cid ('C', 'R') */

#ifdef DEPOT_TEST
static int64_t resSkewMs = 0;      /* kv_engine_test_resolved */
static int resTrimMin = 0;
static int resKillAt = -1;

void kv_engine_test_resolved(int64_t iSkewMs, int nTrimMin, int iKillAt){
  __atomic_store_n(&resSkewMs, iSkewMs, __ATOMIC_SEQ_CST);
  __atomic_store_n(&resTrimMin, nTrimMin, __ATOMIC_SEQ_CST);
  __atomic_store_n(&resKillAt, iKillAt, __ATOMIC_SEQ_CST);
}
# define resSkew()    __atomic_load_n(&resSkewMs, __ATOMIC_SEQ_CST)
# define resTrimMinNow() (__atomic_load_n(&resTrimMin, __ATOMIC_SEQ_CST)>0 \
    ? __atomic_load_n(&resTrimMin, __ATOMIC_SEQ_CST) : KV_RESOLVED_TRIM_MIN)
# define resKillPoint(i) \
    do{ if( __atomic_load_n(&resKillAt, __ATOMIC_SEQ_CST)==(i) ) \
          raise(SIGKILL); }while(0)
#else
# define resSkew()       0
# define resTrimMinNow() KV_RESOLVED_TRIM_MIN
# define resKillPoint(i)
#endif

int64_t kvNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000 + resSkew();
}

/* The lowest cid a replay could still meet (kv_engine_replay_floor). */
static uint64_t resFloor(KvEngine *pEng){
  WalStats st;
  if( pEng->pWal==0 ) return 0;
  wal_stats(pEng->pWal, &st);
  return st.firstCid;
}

/* The trim threshold after a trim that kept nKept entries. */
static int resTrimAt(int nKept){
  int nMin = resTrimMinNow();
  return nKept>nMin/2 ? 2*nKept : nMin;
}

/* Encode one entry (header and body) into pBuf (appended). */
static int resEncode(KvBuf *pBuf, int cDecision, int64_t iMs, uint64_t cid,
                     const char *zGid, int nGid){
  uint8_t aHdr[RES_HDR+RES_FIXED];
  int iBody = pBuf->n + RES_HDR;
  int rc;
  wal_put_u32(aHdr, (uint32_t)(RES_FIXED+nGid));
  aHdr[RES_HDR] = (uint8_t)(cDecision=='c' ? 'C' : 'R');
  wal_put_u64(aHdr+RES_HDR+1, (uint64_t)iMs);
  wal_put_u64(aHdr+RES_HDR+9, cid);
  rc = kv_buf_append(pBuf, aHdr, (int)sizeof(aHdr));
  if( rc==SQLITE_OK ) rc = kv_buf_append(pBuf, zGid, nGid);
  if( rc==SQLITE_OK ){
    wal_put_u32(pBuf->a+iBody-4, wal_crc32c(0, pBuf->a+iBody,
                                             RES_FIXED+nGid));
  }
  return rc;
}

/* The map value of a decision: u8 decision ('c', 'r'), u64 ms, u64 cid. */
static int resRemember(KvEngine *pEng, int cDecision, int64_t iMs,
                       uint64_t cid, const uint8_t *aGid, int nGid){
  uint8_t aVal[RES_FIXED];
  aVal[0] = (uint8_t)cDecision;
  wal_put_u64(aVal+1, (uint64_t)iMs);
  wal_put_u64(aVal+9, cid);
  if( pEng->pResolved==0 && (pEng->pResolved = kv_map_new())==0 ){
    return SQLITE_NOMEM;
  }
  return kv_map_put(&pEng->pResolved, aGid, nGid, aVal, RES_FIXED, 0, 0);
}

/* May a decision of time iMs on the record cid be forgotten?  Older than
** iOld and its record in a retired segment (below iFloor). */
static int resForget(int64_t iMs, uint64_t cid, int64_t iOld,
                     uint64_t iFloor){
  return iMs<iOld && cid<iFloor;
}

/* Append the entries of map pMap to pBuf; *pnOut = their number. */
static int resEncodeMap(KvMap *pMap, KvBuf *pBuf, int *pnOut){
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  *pnOut = 0;
  if( pMap==0 ) return SQLITE_OK;
  if( (pCsr = kv_map_cursor_new(pMap))==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    rc = resEncode(pBuf, e.aVal[0], (int64_t)wal_get_u64(e.aVal+1),
                   wal_get_u64(e.aVal+9), (const char*)e.aKey, e.nKey);
    (*pnOut)++;
  }
  kv_map_cursor_free(pCsr);
  return rc;
}

/* Replace the file by pBuf atomically: temp file, fsync, rename,
** directory fsync. */
static int resWriteFile(KvEngine *pEng, const KvBuf *pBuf, char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zPath = sqlite3_mprintf("%s/" RES_FILE, pEng->zDir);
  char *zTmp = sqlite3_mprintf("%s/" RES_FILE "-new", pEng->zDir);
  int fd = -1, rc = (zPath && zTmp) ? SQLITE_OK : SQLITE_NOMEM;
  if( rc==SQLITE_OK ){
    int nHalf = pBuf->n/2;
    fd = io->xOpen(io->pCtx, zTmp, O_WRONLY|O_CREAT|O_TRUNC, 0644);
    if( fd>=0 && nHalf>0 ){
      if( io->xPwrite(io->pCtx, fd, pBuf->a, nHalf, 0)!=nHalf ) nHalf = -1;
      resKillPoint(0);
    }
    if( fd<0 || nHalf<0
     || (pBuf->n>nHalf && io->xPwrite(io->pCtx, fd, pBuf->a+nHalf,
                                      pBuf->n-nHalf, nHalf)!=pBuf->n-nHalf)
     || io->xFsync(io->pCtx, fd)!=0 ){
      rc = SQLITE_IOERR_WRITE;
    }
    if( rc==SQLITE_OK ){
      resKillPoint(1);
      if( io->xRename(io->pCtx, zTmp, zPath)!=0 ) rc = SQLITE_IOERR_WRITE;
    }
    if( rc==SQLITE_OK ){
      resKillPoint(2);
      if( io->xSyncDir(io->pCtx, pEng->zDir)!=0 ) rc = SQLITE_IOERR_WRITE;
    }
    if( rc!=SQLITE_OK ){
      resErr(pzErr, "kv: cannot rewrite %s: %s", zPath, strerror(errno));
    }
  }
  if( fd>=0 ) io->xClose(io->pCtx, fd);
  sqlite3_free(zPath);
  sqlite3_free(zTmp);
  return rc;
}

/* Rewrite the file from the map (the decisions kept), atomically; at
** open, no other thread uses the store. */
static int resRewrite(KvEngine *pEng, char **pzErr){
  KvBuf buf = {0, 0, 0};
  int nKept = 0;
  int rc = resEncodeMap(pEng->pResolved, &buf, &nKept);
  if( rc==SQLITE_OK ) rc = resWriteFile(pEng, &buf, pzErr);
  if( rc==SQLITE_OK ) pEng->nResFile = nKept;
  kv_buf_free(&buf);
  return rc;
}

/* Forget the decisions older than the keep time and rewrite the file
** without them, if there are any.  resMutex held. */
static void resTrim(KvEngine *pEng){
  int64_t iOld = kvNowMs() - KV_RESOLVED_KEEP_MS;
  uint64_t iFloor = resFloor(pEng);
  KvMap *pNew = kv_map_new();
  KvMapCursor *pCsr = 0;
  KvMapEntry e;
  KvBuf buf = {0, 0, 0};
  char *zErr = 0;
  int bOn, nKept = 0, nDrop = 0, rc = pNew ? SQLITE_OK : SQLITE_NOMEM;
  pthread_mutex_lock(&pEng->mutex);
  if( rc==SQLITE_OK && pEng->pResolved
   && (pCsr = kv_map_cursor_new(pEng->pResolved))==0 ){
    rc = SQLITE_NOMEM;
  }
  for(bOn = pCsr ? kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0) : 0;
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    if( resForget((int64_t)wal_get_u64(e.aVal+1), wal_get_u64(e.aVal+9),
                  iOld, iFloor) ){
      nDrop++;
    }else{
      rc = kv_map_put(&pNew, e.aKey, e.nKey, e.aVal, e.nVal, 0, 0);
      nKept++;
    }
  }
  kv_map_cursor_free(pCsr);
  if( rc==SQLITE_OK && nDrop>0 ) rc = resEncodeMap(pNew, &buf, &nKept);
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && nDrop>0 ) rc = resWriteFile(pEng, &buf, &zErr);
  if( rc==SQLITE_OK && nDrop>0 ){
    /* the file no longer holds them: forget them in memory too */
    pthread_mutex_lock(&pEng->mutex);
    kv_map_unref(pEng->pResolved);
    pEng->pResolved = pNew;
    pNew = 0;
    pthread_mutex_unlock(&pEng->mutex);
    pEng->nResFile = nKept;
  }
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "kv: store %s: prepared.log is not trimmed: %s",
                pEng->zDir, zErr ? zErr : sqlite3_errstr(rc));
  }
  pEng->nResTrimAt = resTrimAt(rc==SQLITE_OK ? nKept : pEng->nResFile);
  kv_map_unref(pNew);
  kv_buf_free(&buf);
  sqlite3_free(zErr);
}

int kvResolvedLoad(KvEngine *pEng, char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zPath = sqlite3_mprintf("%s/" RES_FILE, pEng->zDir);
  int64_t iOld = kvNowMs() - KV_RESOLVED_KEEP_MS;
  uint64_t iFloor = resFloor(pEng);
  uint8_t *a = 0;
  off_t sz = 0;
  size_t iOff = 0;
  int fd, nDrop = 0, bTorn = 0, rc = SQLITE_OK;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = io->xOpen(io->pCtx, zPath, O_RDONLY, 0);
  if( fd<0 ){
    sqlite3_free(zPath);
    pEng->nResTrimAt = resTrimAt(0);
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
    int nFixed = 0, cDec = 0;
    uint64_t cid = 0;
    int64_t iMs;
    if( iOff+RES_HDR+n<=(size_t)sz && n>0 ){
      switch( pBody[0] ){
        case 'C': case 'R': nFixed = RES_FIXED;     break;
        case 'c': case 'r': nFixed = RES_FIXED_OLD; break;
      }
      cDec = pBody[0]=='C' || pBody[0]=='c' ? 'c' : 'r';
    }
    if( nFixed==0 || n<(uint32_t)nFixed+1
     || n>(uint32_t)nFixed+KV_GID_MAX_BYTES
     || wal_crc32c(0, pBody, n)!=wal_get_u32(a+iOff+4) ){
      bTorn = 1;
      break;
    }
    iMs = (int64_t)wal_get_u64(pBody+1);
    if( nFixed==RES_FIXED ) cid = wal_get_u64(pBody+9);
    pEng->nResFile++;
    if( resForget(iMs, cid, iOld, iFloor) ) nDrop++;
    else rc = resRemember(pEng, cDec, iMs, cid, pBody+nFixed, n-nFixed);
    iOff += RES_HDR + n;
  }
  if( rc==SQLITE_OK && iOff<(size_t)sz ) bTorn = 1;
  sqlite3_free(a);
  if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ){
    resErr(pzErr, "kv: cannot read %s: %s", zPath, strerror(errno));
  }
  if( rc==SQLITE_OK && (bTorn || nDrop>0) && pEng->pShm==0
   && !pEng->bReadOnly ){
    /* (a process joining a shared store rewrites nothing: the others
    ** append meanwhile; the next one to decide cuts a torn tail) */
    if( bTorn ){
      sqlite3_log(SQLITE_NOTICE, "kv: %s: a torn tail is cut off at byte %lld",
                  zPath, (long long)iOff);
    }
    rc = resRewrite(pEng, pzErr);
  }
  pEng->nResTrimAt = resTrimAt(pEng->nResFile);
  sqlite3_free(zPath);
  return rc;
}

int kvResolvedAdd(KvEngine *pEng, int cDecision, uint64_t cid,
                  const char *zGid, int nGid, char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zPath = sqlite3_mprintf("%s/" RES_FILE, pEng->zDir);
  int64_t iMs = kvNowMs();
  KvBuf buf = {0, 0, 0};
  int fd = -1, bNew = 0, rc = zPath ? SQLITE_OK : SQLITE_NOMEM;
  off_t sz = 0;
  if( rc==SQLITE_OK ) rc = resEncode(&buf, cDecision, iMs, cid, zGid, nGid);
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
  if( rc==SQLITE_OK ){
    /* in memory before a trim can rewrite the file from memory */
    pEng->nResFile++;
    pthread_mutex_lock(&pEng->mutex);
    rc = resRemember(pEng, cDecision, iMs, cid, (const uint8_t*)zGid, nGid);
    pthread_mutex_unlock(&pEng->mutex);
  }
  if( rc==SQLITE_OK && pEng->nResFile>=pEng->nResTrimAt ) resTrim(pEng);
  pthread_mutex_unlock(&pEng->resMutex);
  kv_buf_free(&buf);
  sqlite3_free(zPath);
  return rc;
}

int kvResolvedGet(KvEngine *pEng, const char *zGid, int nGid, int64_t *piMs){
  KvMapEntry e;
  if( pEng->pResolved==0
   || !kv_map_get(pEng->pResolved, zGid, nGid, &e) || e.nVal<RES_FIXED_OLD ){
    return 0;
  }
  if( piMs ) *piMs = (int64_t)wal_get_u64(e.aVal+1);
  return e.aVal[0];
}

int kvResolvedGetCid(KvEngine *pEng, const char *zGid, int nGid,
                     uint64_t cid){
  KvMapEntry e;
  uint64_t cidHad;
  if( pEng->pResolved==0
   || !kv_map_get(pEng->pResolved, zGid, nGid, &e) || e.nVal<RES_FIXED ){
    return 0;
  }
  cidHad = wal_get_u64(e.aVal+9);
  return (cidHad==0 || cidHad==cid) ? e.aVal[0] : 0;
}

/* A shared store: every process appends its decisions to the one file
** (under the writer lock, which orders them), so a process reads it again
** before it prepares or resolves under a gid.  A torn tail (a process
** died appending) ends the reading; the file is not rewritten here. */
int kvResolvedSync(KvEngine *pEng, char **pzErr){
  const WalIo *io = pEng->pIo;
  char *zPath = sqlite3_mprintf("%s/" RES_FILE, pEng->zDir);
  uint8_t *a = 0;
  off_t sz = 0;
  size_t iOff = 0;
  int fd, n = 0, rc = SQLITE_OK;
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
    uint32_t nBody = wal_get_u32(a+iOff);
    const uint8_t *pBody = a+iOff+RES_HDR;
    int nFixed = 0;
    if( iOff+RES_HDR+nBody>(size_t)sz || nBody==0 ) break;
    switch( pBody[0] ){
      case 'C': case 'R': nFixed = RES_FIXED;     break;
      case 'c': case 'r': nFixed = RES_FIXED_OLD; break;
    }
    if( nFixed==0 || nBody<(uint32_t)nFixed+1
     || nBody>(uint32_t)nFixed+KV_GID_MAX_BYTES
     || wal_crc32c(0, pBody, nBody)!=wal_get_u32(a+iOff+4) ){
      break;
    }
    rc = resRemember(pEng, pBody[0]=='C' || pBody[0]=='c' ? 'c' : 'r',
                     (int64_t)wal_get_u64(pBody+1),
                     nFixed==RES_FIXED ? wal_get_u64(pBody+9) : 0,
                     pBody+nFixed, (int)nBody-nFixed);
    n++;
    iOff += RES_HDR + nBody;
  }
  sqlite3_free(a);
  if( rc==SQLITE_OK && iOff<(size_t)sz ){
    /* a torn tail (a process died appending): cut off, so that the next
    ** decision is appended after the last whole one */
    fd = io->xOpen(io->pCtx, zPath, O_RDWR, 0);
    if( fd<0 || io->xFtruncate(io->pCtx, fd, (off_t)iOff)!=0
     || io->xFsync(io->pCtx, fd)!=0 ){
      rc = SQLITE_IOERR_TRUNCATE;
    }
    if( fd>=0 ) io->xClose(io->pCtx, fd);
  }
  if( rc==SQLITE_OK ){
    pEng->nResFile = n;
  }else if( rc!=SQLITE_NOMEM ){
    resErr(pzErr, "kv: cannot read %s: %s", zPath, strerror(errno));
  }
  sqlite3_free(zPath);
  return rc;
}
