/*
** logstore.c -- the kv_log storage engine: the load at open (newest to
** oldest), appends and syncs, point reads, snapshots and cursors, stats,
** and the background thread that runs due compactions.  The files, their
** frames and the MANIFEST are in logfile.c, compaction in logcompact.c.
** The file format and the contracts are in logstore.h.
*/
#include "config.h"
#include "ext/kv/logstore_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- load -- */

/* One record found by the forward scan of a file. */
typedef struct KlRec KlRec;
struct KlRec {
  int64_t iOff;
  uint32_t nFrame;
  uint32_t nKey;
  int64_t iKey;          /* offset of the key in the scan's key arena */
  uint64_t cid;
  int flags;
};

typedef struct KlScan KlScan;
struct KlScan {
  KlRec *aRec; int64_t nRec, nRecAlloc;
  uint8_t *aKeys; int64_t nKeys, nKeysAlloc;
  KvLogBuf win;          /* read window */
  int64_t iWin;          /* file offset of win.a[0] */
  int64_t iEnd;          /* end of the valid records */
  int64_t sz;            /* bytes of the file to scan */
};

static void klScanFree(KlScan *pScan){
  sqlite3_free(pScan->aRec);
  sqlite3_free(pScan->aKeys);
  kv_logbuf_free(&pScan->win);
}

static int klGrow(void **pp, int64_t *pnAlloc, int64_t nNeed, size_t szElem){
  int64_t nNew = *pnAlloc ? *pnAlloc*2 : 1024;
  void *pNew;
  if( nNeed<=*pnAlloc ) return SQLITE_OK;
  while( nNew<nNeed ) nNew *= 2;
  pNew = sqlite3_realloc64(*pp, (sqlite3_uint64)nNew*szElem);
  if( pNew==0 ) return SQLITE_NOMEM;
  *pp = pNew;
  *pnAlloc = nNew;
  return SQLITE_OK;
}

/* Make bytes [iOff, iOff+n) of the file available in the window (n is
** clipped to the file size).  Sets *pa and *pnAvail. */
#define KL_WINDOW (1024*1024)
static int klScanWindow(KvLogStore *p, KlFile *pFile, KlScan *pScan,
                        int64_t iOff, int64_t n, const uint8_t **pa,
                        int64_t *pnAvail, char **pzErr){
  int rc;
  if( iOff+n>pScan->sz ) n = pScan->sz-iOff;
  if( iOff<pScan->iWin || iOff+n>pScan->iWin+pScan->win.n ){
    int64_t nRead = n>KL_WINDOW ? n : KL_WINDOW;
    if( iOff+nRead>pScan->sz ) nRead = pScan->sz-iOff;
    rc = kl_buf_reserve(&pScan->win, nRead);
    if( rc ) return rc;
    rc = kl_read(p, p->pIo, pFile, pScan->win.a, (size_t)nRead, iOff, pzErr);
    if( rc==SQLITE_IOERR_SHORT_READ ) rc = SQLITE_IOERR_READ;
    if( rc ) return rc;
    pScan->iWin = iOff;
    pScan->win.n = (int)nRead;
  }
  *pa = pScan->win.a + (iOff-pScan->iWin);
  *pnAvail = n;
  return SQLITE_OK;
}

static int klScanAdd(KlScan *pScan, int64_t iOff, const KlFrame *pFr){
  KlRec *pRec;
  int rc = klGrow((void**)&pScan->aRec, &pScan->nRecAlloc, pScan->nRec+1,
                  sizeof(KlRec));
  if( rc==SQLITE_OK ){
    rc = klGrow((void**)&pScan->aKeys, &pScan->nKeysAlloc,
                pScan->nKeys+pFr->nKey, 1);
  }
  if( rc ) return rc;
  pRec = &pScan->aRec[pScan->nRec++];
  pRec->iOff = iOff;
  pRec->nFrame = KL_FRAME_HDR+KL_BODY_FIXED+pFr->nKey+pFr->nVal;
  pRec->nKey = pFr->nKey;
  pRec->iKey = pScan->nKeys;
  pRec->cid = pFr->cid;
  pRec->flags = pFr->flags;
  memcpy(pScan->aKeys+pScan->nKeys, pFr->aKey, pFr->nKey);
  pScan->nKeys += pFr->nKey;
  return SQLITE_OK;
}

/* Check the file header.  NULL if valid, else the reason.  *pbTorn is set
** when the header was never written (too short, or all zero): then no
** sync of the file ever completed, as every sync covers the header. */
static const char *klHeaderCheck(KvLogStore *p, KlFile *pFile, KlScan *pScan,
                                 int *pbTorn, int *pRc, char **pzErr){
  static const uint8_t aZero[KL_HDR] = {0};
  const uint8_t *a;
  int64_t n;
  *pbTorn = 1;
  if( pFile->sz<KL_HDR ) return "file shorter than its header";
  *pRc = klScanWindow(p, pFile, pScan, 0, KL_HDR, &a, &n, pzErr);
  if( *pRc ) return 0;
  if( memcmp(a, aZero, KL_HDR)==0 ) return "header never written";
  *pbTorn = 0;
  return kl_header_check(a, pFile);
}

/* The frame at iOff of pFile in the scan window: its header, then (when
** the header names a body of a possible length) the whole frame; *pnAvail
** bytes at *pa (fewer than the frame at the end of the file). */
static int klScanFrame(KvLogStore *p, KlFile *pFile, KlScan *pScan,
                       int64_t iOff, const uint8_t **pa, int64_t *pnAvail,
                       char **pzErr){
  int rc = klScanWindow(p, pFile, pScan, iOff, KL_FRAME_HDR, pa, pnAvail,
                        pzErr);
  if( rc==SQLITE_OK && *pnAvail>=KL_FRAME_HDR
   && wal_get_u32(*pa)<=KL_MAX_BODY ){
    rc = klScanWindow(p, pFile, pScan, iOff, KL_FRAME_HDR+wal_get_u32(*pa),
                      pa, pnAvail, pzErr);
  }
  return rc;
}

/* Forward scan: every frame checked, records listed.  A bad frame in the
** newest log file (bNewest), or a header that was never written there,
** ends the scan (the tail is cut by the caller at pScan->iEnd); any other
** damage is SQLITE_CORRUPT. */
static int klScanFile(KvLogStore *p, KlFile *pFile, int bNewest,
                      KlScan *pScan, char **pzErr){
  int rc = SQLITE_OK;
  int64_t iOff = KL_HDR;
  int bTorn = 0;
  const char *zWhy;
  pScan->sz = pFile->sz;
  zWhy = klHeaderCheck(p, pFile, pScan, &bTorn, &rc, pzErr);
  pScan->iEnd = KL_HDR;
  if( rc ) return rc;
  if( zWhy ){
    if( bNewest && bTorn ){ pScan->iEnd = 0; return SQLITE_OK; }
    return kl_corrupt(pzErr, pFile->zPath, 0, zWhy);
  }
  while( iOff<pFile->sz ){
    const uint8_t *a;
    int64_t nAvail;
    KlFrame fr;
    rc = klScanFrame(p, pFile, pScan, iOff, &a, &nAvail, pzErr);
    if( rc ) return rc;
    zWhy = kl_frame_parse(a, nAvail, &fr);
    if( zWhy ) break;
    rc = klScanAdd(pScan, iOff, &fr);
    if( rc ) return rc;
    iOff += pScan->aRec[pScan->nRec-1].nFrame;
    if( pFile->eKind==KL_KIND_MRG || (fr.flags & KL_FLAG_LAST) ){
      pScan->iEnd = iOff;
    }
  }
  if( zWhy==0 && pScan->iEnd<iOff ){
    zWhy = "file ends inside a transaction";
    iOff = pScan->iEnd;
  }
  if( zWhy && !bNewest ) return kl_corrupt(pzErr, pFile->zPath, iOff, zWhy);
  while( pScan->nRec>0 && pScan->aRec[pScan->nRec-1].iOff>=pScan->iEnd ){
    pScan->nRec--;
  }
  return SQLITE_OK;
}

/* Apply the scanned records to the index *ppIndex and its counters,
** newest first: the first record met for a key decides it. */
static int klScanApplyTo(KvMap **ppIndex, KlCounts *pCnt, KlFile *pFile,
                         KlScan *pScan){
  int64_t i;
  int rc = SQLITE_OK;
  for(i=pScan->nRec-1; i>=0 && rc==SQLITE_OK; i--){
    KlRec *pRec = &pScan->aRec[i];
    const uint8_t *aKey = pScan->aKeys + pRec->iKey;
    KlLoc loc;
    int bTomb = (pRec->flags & KL_FLAG_DELETE)!=0;
    int bAdded = 0;
    if( pRec->cid>pCnt->maxCid ) pCnt->maxCid = pRec->cid;
    loc.iFile = pFile->iKey;
    loc.nFrame = pRec->nFrame;
    loc.iOff = (uint64_t)pRec->iOff;
    rc = kv_map_put_absent(ppIndex, aKey, (int)pRec->nKey, &loc,
                           sizeof(loc), pRec->cid, bTomb, &bAdded);
    if( rc!=SQLITE_OK || !bAdded ) continue;   /* a newer record decided */
    if( bTomb ){
      pCnt->nTomb++;
    }else{
      pCnt->nLive++;
      pCnt->szLive += pRec->nFrame;
    }
  }
  return rc;
}

static int klScanApply(KvLogStore *p, KlFile *pFile, KlScan *pScan){
  return klScanApplyTo(&p->pIndex, &p->cnt, pFile, pScan);
}

/* Cut the newest log file at iEnd (rewriting its header if that was
** damaged), logging the cut. */
static int klCutTail(KvLogStore *p, KlFile *pFile, int64_t iEnd,
                     char **pzErr){
  sqlite3_log(SQLITE_NOTICE, "kv_log: cutting torn tail of %s at offset "
              "%lld (%lld bytes)", pFile->zPath, (long long)iEnd,
              (long long)(pFile->sz-iEnd));
  if( p->pIo->xFtruncate(p->pIo->pCtx, pFile->fd, (off_t)iEnd) ){
    return kl_io_err(pzErr, SQLITE_IOERR_TRUNCATE, "truncate", pFile->zPath,
                   errno);
  }
  pFile->sz = iEnd;
  if( iEnd==0 ){
    uint8_t aHdr[KL_HDR];
    int rc;
    kl_file_header(aHdr, pFile->iNum, pFile->eKind);
    rc = kl_write(p, pFile, aHdr, KL_HDR, 0, pzErr);
    if( rc ) return rc;
    pFile->sz = KL_HDR;
  }
  return SQLITE_OK;
}

/* Open an existing file of the live set, read-write. */
static int klFileOpen(KvLogStore *p, uint32_t iNum, int eKind,
                      KlFile **ppFile, char **pzErr){
  KlFile *pFile = kl_file_new(p, iNum, eKind);
  off_t sz = 0;
  int rc;
  *ppFile = 0;
  if( pFile==0 ) return SQLITE_NOMEM;
  pFile->fd = p->pIo->xOpen(p->pIo->pCtx, pFile->zPath,
                            (p->cfg.bReadOnly ? O_RDONLY : O_RDWR)|O_CLOEXEC,
                            0);
  if( pFile->fd<0 ){
    rc = kl_io_err(pzErr, SQLITE_CANTOPEN, "open", pFile->zPath, errno);
    kl_file_unref(pFile);
    return rc;
  }
  if( p->pIo->xFstatSize(p->pIo->pCtx, pFile->fd, &sz) ){
    rc = kl_io_err(pzErr, SQLITE_IOERR_FSTAT, "stat", pFile->zPath, errno);
    kl_file_unref(pFile);
    return rc;
  }
  pFile->sz = (int64_t)sz;
  *ppFile = pFile;
  return SQLITE_OK;
}

/* Load one file into the index.  The newest log file gets its tail cut;
** shared (KvLogConfig.bShared), its known end is the last whole
** transaction instead, and 0 when its header is not written yet. */
static int klLoadFile(KvLogStore *p, KlFile *pFile, int bNewest,
                      char **pzErr){
  KlScan scan;
  int rc;
  memset(&scan, 0, sizeof(scan));
  scan.iWin = -1;
  rc = klScanFile(p, pFile, bNewest, &scan, pzErr);
  if( rc==SQLITE_OK && bNewest && p->cfg.bShared ){
    pFile->sz = scan.iEnd;
  }else if( rc==SQLITE_OK && bNewest
         && (scan.iEnd<pFile->sz || scan.iEnd==0) ){
    rc = klCutTail(p, pFile, scan.iEnd, pzErr);
  }
  if( rc==SQLITE_OK ) rc = klScanApply(p, pFile, &scan);
  klScanFree(&scan);
  return rc;
}

/* ---------------------------------------------------- directory listing */

typedef struct KlDirList KlDirList;
struct KlDirList {
  uint32_t *aLog; int64_t nLog, nLogAlloc;
  uint32_t *aMrg; int64_t nMrg, nMrgAlloc;
  int bManifestTmp;
  uint32_t iMax;           /* highest number seen */
};

static int klCmpU32(const void *a, const void *b){
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return x<y ? -1 : x>y;
}

/* Parse "NNNNNNNN.klog" / ".kmrg"; returns the kind or 0. */
static int klParseName(const char *z, uint32_t *piNum){
  uint32_t v = 0;
  int i;
  for(i=0; i<8; i++){
    if( z[i]<'0' || z[i]>'9' ) return 0;
    v = v*10 + (uint32_t)(z[i]-'0');
  }
  if( v==0 ) return 0;
  *piNum = v;
  if( strcmp(z+8, ".klog")==0 ) return KL_KIND_LOG;
  if( strcmp(z+8, ".kmrg")==0 ) return KL_KIND_MRG;
  return 0;
}

static int klListDir(KvLogStore *p, KlDirList *pList, char **pzErr){
  DIR *pDir = opendir(p->zDir);
  struct dirent *pEnt;
  int rc = SQLITE_OK;
  if( pDir==0 ){
    return kl_io_err(pzErr, SQLITE_CANTOPEN, "listing", p->zDir, errno);
  }
  while( rc==SQLITE_OK && (pEnt = readdir(pDir))!=0 ){
    uint32_t iNum = 0;
    int eKind = klParseName(pEnt->d_name, &iNum);
    if( strcmp(pEnt->d_name, "MANIFEST.tmp")==0 ) pList->bManifestTmp = 1;
    if( eKind==0 ) continue;
    if( iNum>pList->iMax ) pList->iMax = iNum;
    if( eKind==KL_KIND_LOG ){
      rc = klGrow((void**)&pList->aLog, &pList->nLogAlloc, pList->nLog+1, 4);
      if( rc==SQLITE_OK ) pList->aLog[pList->nLog++] = iNum;
    }else{
      rc = klGrow((void**)&pList->aMrg, &pList->nMrgAlloc, pList->nMrg+1, 4);
      if( rc==SQLITE_OK ) pList->aMrg[pList->nMrg++] = iNum;
    }
  }
  closedir(pDir);
  if( pList->nLog ) qsort(pList->aLog, pList->nLog, 4, klCmpU32);
  if( pList->nMrg ) qsort(pList->aMrg, pList->nMrg, 4, klCmpU32);
  return rc;
}

static int klCmpFilePtr(const void *a, const void *b){
  uint32_t x = (*(KlFile*const*)a)->iKey, y = (*(KlFile*const*)b)->iKey;
  return x<y ? -1 : x>y;
}

static int klInList(const uint32_t *a, int64_t n, uint32_t v){
  return n>0 && bsearch(&v, a, n, sizeof(uint32_t), klCmpU32)!=0;
}

/* Delete what a crashed or finished compaction left behind. */
static void klDeleteGarbage(KvLogStore *p, KlDirList *pList, uint32_t iMerged,
                            const uint32_t *aList, int nList){
  int64_t i;
  for(i=0; i<pList->nLog; i++){
    if( pList->aLog[i]<=iMerged ){
      char *z = kl_path(p->zDir, pList->aLog[i], KL_KIND_LOG);
      if( z ) p->pIo->xUnlink(p->pIo->pCtx, z);
      sqlite3_free(z);
    }
  }
  for(i=0; i<pList->nMrg; i++){
    if( !klInList(aList, nList, pList->aMrg[i]) ){
      char *z = kl_path(p->zDir, pList->aMrg[i], KL_KIND_MRG);
      if( z ) p->pIo->xUnlink(p->pIo->pCtx, z);
      sqlite3_free(z);
    }
  }
  if( pList->bManifestTmp ){
    char *z = sqlite3_mprintf("%s/MANIFEST.tmp", p->zDir);
    if( z ) p->pIo->xUnlink(p->pIo->pCtx, z);
    sqlite3_free(z);
  }
}

/* Open and load the live files: log files above iMerged newest first,
** then the listed merged files.  Fills p->pSet (sorted) and p->pActive. */
static int klLoadAll(KvLogStore *p, KlDirList *pList, uint32_t iMerged,
                     const uint32_t *aList, int nList, char **pzErr){
  int64_t i;
  int rc = SQLITE_OK;
  KlSet *pSet = kl_set_new((int)(pList->nLog + nList));
  if( pSet==0 ) return SQLITE_NOMEM;
  p->pSet = pSet;
  for(i=pList->nLog-1; rc==SQLITE_OK && i>=0; i--){
    KlFile *pFile = 0;
    if( pList->aLog[i]<=iMerged ) break;
    rc = klFileOpen(p, pList->aLog[i], KL_KIND_LOG, &pFile, pzErr);
    if( rc==SQLITE_OK ){
      pSet->apFile[pSet->nFile++] = pFile;
      rc = klLoadFile(p, pFile, pSet->nFile==1, pzErr);
    }
    if( rc==SQLITE_OK && pFile->sz==0 ){
      /* Shared: a roll in progress; kv_logstore_follow takes it later. */
      pSet->nFile--;
      kl_file_unref(pFile);
    }
  }
  if( pSet->nFile>0 ) p->pActive = pSet->apFile[0];
  for(i=nList-1; rc==SQLITE_OK && i>=0; i--){
    KlFile *pFile = 0;
    if( !klInList(pList->aMrg, pList->nMrg, aList[i]) ){
      char *z = kl_path(p->zDir, aList[i], KL_KIND_MRG);
      rc = kl_corrupt(pzErr, z ? z : p->zDir, 0, "listed in MANIFEST but "
                     "missing");
      sqlite3_free(z);
      break;
    }
    rc = klFileOpen(p, aList[i], KL_KIND_MRG, &pFile, pzErr);
    if( rc==SQLITE_OK ){
      pSet->apFile[pSet->nFile++] = pFile;
      rc = klLoadFile(p, pFile, 0, pzErr);
    }
  }
  /* Loaded newest first; the set is kept in ascending number order. */
  qsort(pSet->apFile, pSet->nFile, sizeof(KlFile*), klCmpFilePtr);
  return rc;
}

/* ---------------------------------------------------------------- open -- */

static void klStoreFree(KvLogStore *p){
  if( p==0 ) return;
  kv_map_unref(p->pIndex);
  kv_map_unref(p->pSynced);
  kv_map_unref(p->pIdxRoll);
  kl_set_unref(p->pSet);
  kl_delta_free(p->pDeltaFirst);
  kv_logbuf_free(&p->wbuf);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->muWrite);
  pthread_mutex_destroy(&p->muCompact);
  pthread_cond_destroy(&p->cond);
  sqlite3_free(p->zDir);
  sqlite3_free(p);
}

static KvLogStore *klStoreNew(const char *zDir, const KvLogConfig *pCfg){
  KvLogStore *p = sqlite3_malloc64(sizeof(KvLogStore));
  int n = (int)strlen(zDir);
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  pthread_mutex_init(&p->mu, 0);
  pthread_mutex_init(&p->muWrite, 0);
  pthread_mutex_init(&p->muCompact, 0);
  pthread_cond_init(&p->cond, 0);
  while( n>1 && zDir[n-1]=='/' ) n--;
  p->zDir = sqlite3_mprintf("%.*s", n, zDir);
  p->pIndex = kv_map_new();
  if( pCfg ) p->cfg = *pCfg;
  if( p->cfg.szFile<=0 ) p->cfg.szFile = KL_DEFAULT_SZFILE;
  if( p->cfg.szDeadTrigger==0 ) p->cfg.szDeadTrigger = p->cfg.szFile;
  p->pIo = p->cfg.pIo ? p->cfg.pIo : wal_io_posix();
  if( p->zDir==0 || p->pIndex==0 ){
    klStoreFree(p);
    return 0;
  }
  return p;
}

/* Create the directory if it does not exist (and make its entry durable). */
static int klMakeDir(KvLogStore *p, char **pzErr){
  char *zParent;
  const char *zSlash;
  int rc = SQLITE_OK;
  if( p->pIo->xMkdir(p->pIo->pCtx, p->zDir, 0755)==0 ){
    zSlash = strrchr(p->zDir, '/');
    if( zSlash==p->zDir ) zParent = sqlite3_mprintf("/");
    else if( zSlash ) zParent = sqlite3_mprintf("%.*s",
                                       (int)(zSlash-p->zDir), p->zDir);
    else zParent = sqlite3_mprintf(".");
    if( zParent==0 ) return SQLITE_NOMEM;
    if( p->pIo->xSyncDir(p->pIo->pCtx, zParent) ){
      rc = kl_io_err(pzErr, SQLITE_IOERR_DIR_FSYNC, "directory sync", zParent,
                   errno);
    }
    sqlite3_free(zParent);
  }else if( errno!=EEXIST ){
    rc = kl_io_err(pzErr, SQLITE_CANTOPEN, "mkdir", p->zDir, errno);
  }
  return rc;
}

/* Until a compaction commits a MANIFEST (whose M is then at least 1), no
** log file is ever deleted, so 00000001.klog must be there: its absence
** means files were lost (or MANIFEST was). */
static int klCheckFirst(KvLogStore *p, KlDirList *pList, uint32_t iMerged,
                        char **pzErr){
  char *zPath;
  int rc;
  if( iMerged>0 || (pList->nLog==0 && pList->nMrg==0) ) return SQLITE_OK;
  if( pList->nLog>0 && pList->aLog[0]==1 ) return SQLITE_OK;
  zPath = kl_path(p->zDir, 1, KL_KIND_LOG);
  rc = kl_corrupt(pzErr, zPath ? zPath : p->zDir, 0, "missing, and there "
                  "is no MANIFEST that replaced it");
  sqlite3_free(zPath);
  return rc;
}

/* Read MANIFEST, delete leftovers, load every live file.  The MANIFEST
** is read before the directory is listed, so every file it names is
** listed unless it was removed since. */
static int klOpenFilesOnce(KvLogStore *p, uint32_t *piMerged, char **pzErr){
  KlDirList list;
  uint32_t iMerged = 0;
  uint64_t maxCid = 0;
  uint32_t *aList = 0;
  int nList = 0, i;
  int rc;
  memset(&list, 0, sizeof(list));
  rc = kl_manifest_read(p, &iMerged, &maxCid, &aList, &nList, pzErr);
  if( rc==SQLITE_OK ) rc = klListDir(p, &list, pzErr);
  p->cnt.maxCid = maxCid;
  p->iGen = *piMerged = iMerged;
  if( rc==SQLITE_OK ) rc = klCheckFirst(p, &list, iMerged, pzErr);
  if( rc==SQLITE_OK ){
    if( nList>1 ) qsort(aList, nList, sizeof(uint32_t), klCmpU32);
    if( !p->cfg.bShared ) klDeleteGarbage(p, &list, iMerged, aList, nList);
    rc = klLoadAll(p, &list, iMerged, aList, nList, pzErr);
  }
  if( p->pActive ) kl_file_hold(p->pActive, 1);
  p->iNext = list.iMax>iMerged ? list.iMax+1 : iMerged+1;
  for(i=0; i<nList; i++){
    if( aList[i]>=p->iNext ) p->iNext = aList[i]+1;
  }
  sqlite3_free(list.aLog);
  sqlite3_free(list.aMrg);
  sqlite3_free(aList);
  return rc;
}

/* M of the MANIFEST on disk now (0: none, or it cannot be read). */
static uint32_t klManifestGen(KvLogStore *p){
  uint32_t iMerged = 0, *aList = 0;
  uint64_t maxCid;
  int nList = 0;
  if( kl_manifest_read(p, &iMerged, &maxCid, &aList, &nList, 0) ){
    iMerged = 0;
  }
  sqlite3_free(aList);
  return iMerged;
}

/* klOpenFilesOnce.  Shared, another process may compact meanwhile and
** remove the files it replaced: they are kept while a process holds the
** lock of a log file they include (kl_file_hold), which an opener takes
** only once it has loaded.  So a load that met a file removed meanwhile,
** or that read a MANIFEST replaced since, starts again. */
static int klOpenFiles(KvLogStore *p, char **pzErr){
  int nTry;
  for(nTry=0; ; nTry++){
    uint32_t iMerged = 0;
    int rc = klOpenFilesOnce(p, &iMerged, pzErr);
    if( !p->cfg.bShared || nTry>=100 || klManifestGen(p)==iMerged ){
      return rc;
    }
    kl_set_err(pzErr, 0);
    kl_set_unref(p->pSet);
    p->pSet = 0;
    p->pActive = 0;
    kv_map_unref(p->pIndex);
    p->pIndex = kv_map_new();
    if( p->pIndex==0 ) return SQLITE_NOMEM;
    memset(&p->cnt, 0, sizeof(p->cnt));
  }
}

/* Make sure there is an active log file, then make everything loaded
** durable. */
static int klOpenActive(KvLogStore *p, char **pzErr){
  int rc = SQLITE_OK;
  if( p->pActive==0 && p->cfg.bReadOnly ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: %s holds no log file, and a "
                                      "read-only open creates none", p->zDir));
    return SQLITE_CANTOPEN;
  }
  if( p->pActive==0 ){
    KlFile *pFile = 0;
    KlSet *pNew;
    if( p->iNext>KL_MAX_FILENUM ) return SQLITE_FULL;
    rc = kl_file_create(p, p->iNext++, KL_KIND_LOG, &pFile, pzErr);
    if( rc ) return rc;
    pNew = kl_set_with(p->pSet, pFile);
    kl_file_unref(pFile);
    if( pNew==0 ) return SQLITE_NOMEM;
    kl_set_unref(p->pSet);
    p->pSet = pNew;
    p->pActive = pFile;
    kl_file_hold(pFile, 1);
  }
  if( !p->cfg.bShared ){      /* shared: the appending processes sync */
    rc = kl_fsync(p, p->pActive, pzErr);
    if( rc==SQLITE_OK ) rc = kl_syncdir(p, pzErr);
  }
  if( rc==SQLITE_OK ) kl_sync_point_locked(p);
  return rc;
}

static void *klThreadMain(void*);

int kv_logstore_open(const char *zDir, const KvLogConfig *pCfg,
                     KvLogStore **ppStore, char **pzErr){
  KvLogStore *p;
  int rc;
  *ppStore = 0;
  if( zDir==0 || zDir[0]==0 ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: store directory must be a "
                                    "non-empty path"));
    return SQLITE_MISUSE;
  }
  p = klStoreNew(zDir, pCfg);
  if( p==0 ) return SQLITE_NOMEM;
  rc = p->cfg.bReadOnly ? SQLITE_OK : klMakeDir(p, pzErr);
  if( rc==SQLITE_OK ) rc = klOpenFiles(p, pzErr);
  if( rc==SQLITE_OK ) rc = klOpenActive(p, pzErr);
  if( rc==SQLITE_OK && p->cfg.bBackground ){
    if( pthread_create(&p->thread, 0, klThreadMain, p)!=0 ){
      kl_set_err(pzErr, sqlite3_mprintf("kv_log: cannot start the compaction "
                                      "thread of %s", p->zDir));
      rc = SQLITE_ERROR;
    }else{
      p->bThread = 1;
    }
  }
  if( rc!=SQLITE_OK ){
    klStoreFree(p);
    return rc;
  }
  *ppStore = p;
  return SQLITE_OK;
}

void kv_logstore_close(KvLogStore *p){
  if( p==0 ) return;
  if( p->bThread ){
    pthread_mutex_lock(&p->mu);
    p->bStop = 1;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, 0);
  }
  klStoreFree(p);
}

/* ------------------------------------------------------------ appends -- */

static int64_t klFrameSize(const KvLogAction *pA){
  return KL_FRAME_HDR + KL_BODY_FIXED + pA->nKey + (pA->bDelete ? 0 : pA->nVal);
}

static int klCheckActions(KvLogStore *p, uint64_t cid, int nAction,
                          const KvLogAction *aAction, char **pzErr){
  int64_t nTotal = 0;
  int i;
  if( nAction<0 || (nAction>0 && aAction==0) ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: invalid action list"));
    return SQLITE_MISUSE;
  }
  for(i=0; i<nAction; i++){
    const KvLogAction *pA = &aAction[i];
    if( pA->aKey==0 || pA->nKey<1 || pA->nKey>KVLOG_MAX_KEY ){
      kl_set_err(pzErr, sqlite3_mprintf("kv_log: key must be 1..%d bytes, got "
                                      "%d", KVLOG_MAX_KEY, pA->nKey));
      return pA->nKey>KVLOG_MAX_KEY ? SQLITE_TOOBIG : SQLITE_MISUSE;
    }
    if( !pA->bDelete && (pA->nVal<0 || pA->nVal>KVLOG_MAX_VALUE
                         || (pA->nVal>0 && pA->aVal==0)) ){
      kl_set_err(pzErr, sqlite3_mprintf("kv_log: value must be 0..%d bytes, "
                                      "got %d", KVLOG_MAX_VALUE, pA->nVal));
      return pA->nVal>KVLOG_MAX_VALUE ? SQLITE_TOOBIG : SQLITE_MISUSE;
    }
    nTotal += klFrameSize(pA);
  }
  if( nTotal>0x3fffffff ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: transaction is %lld bytes, the "
                                    "limit is %d", (long long)nTotal,
                                    0x3fffffff));
    return SQLITE_TOOBIG;
  }
  if( nAction>0 && cid<=p->cnt.maxCid ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: commit id %llu is not above "
             "the last applied %llu", (unsigned long long)cid,
             (unsigned long long)p->cnt.maxCid));
    return SQLITE_MISUSE;
  }
  return SQLITE_OK;
}

/* Encode the transaction's frames into p->wbuf. */
static int klEncode(KvLogStore *p, uint64_t cid, int nAction,
                    const KvLogAction *aAction){
  int64_t nTotal = 0;
  int i, rc;
  for(i=0; i<nAction; i++) nTotal += klFrameSize(&aAction[i]);
  rc = kl_buf_reserve(&p->wbuf, nTotal);
  if( rc ) return rc;
  p->wbuf.n = 0;
  for(i=0; i<nAction; i++){
    const KvLogAction *pA = &aAction[i];
    uint8_t *a = p->wbuf.a + p->wbuf.n;
    int nVal = pA->bDelete ? 0 : pA->nVal;
    uint32_t nBody = (uint32_t)(KL_BODY_FIXED + pA->nKey + nVal);
    wal_put_u32(a, nBody);
    a[8] = (uint8_t)((pA->bDelete ? KL_FLAG_DELETE : 0)
                     | (i==nAction-1 ? KL_FLAG_LAST : 0));
    wal_put_u64(a+9, cid);
    wal_put_u32(a+17, (uint32_t)pA->nKey);
    memcpy(a+KL_FRAME_HDR+KL_BODY_FIXED, pA->aKey, pA->nKey);
    if( nVal ) memcpy(a+KL_FRAME_HDR+KL_BODY_FIXED+pA->nKey, pA->aVal, nVal);
    wal_put_u32(a+4, wal_crc32c(wal_crc32c(0, a, 4), a+KL_FRAME_HDR, nBody));
    p->wbuf.n += KL_FRAME_HDR + (int)nBody;
  }
  return SQLITE_OK;
}

/* The index with the transaction applied, as a new version (the current
** one is untouched), and the counters that go with it. */
static int klIndexBuild(KvLogStore *p, uint64_t cid, int nAction,
                        const KvLogAction *aAction, int64_t iBase,
                        KvMap **ppNew, KlCounts *pCnt){
  KvMap *pNew = kv_map_ref(p->pIndex);
  int64_t iOff = iBase;
  int i, rc = SQLITE_OK;
  *pCnt = p->cnt;
  for(i=0; i<nAction && rc==SQLITE_OK; i++){
    const KvLogAction *pA = &aAction[i];
    KvMapOld o;
    KlLoc loc, old;
    loc.iFile = p->pActive->iKey;
    loc.nFrame = (uint32_t)klFrameSize(pA);
    loc.iOff = (uint64_t)iOff;
    iOff += loc.nFrame;
    o.aBuf = &old;
    o.nBuf = sizeof(old);
    rc = kv_map_put_old(&pNew, pA->aKey, pA->nKey, &loc, sizeof(loc), cid,
                        pA->bDelete, &o);
    if( rc!=SQLITE_OK ) break;
    if( o.bFound && o.bTomb ){
      pCnt->nTomb--;
    }else if( o.bFound ){
      pCnt->nLive--;
      pCnt->szLive -= old.nFrame;
    }
    if( pA->bDelete ){ pCnt->nTomb++; }
    else{ pCnt->nLive++; pCnt->szLive += loc.nFrame; }
  }
  pCnt->maxCid = cid;
  if( rc ){
    kv_map_unref(pNew);
    return rc;
  }
  *ppNew = pNew;
  return SQLITE_OK;
}

/* Record the transaction's index changes for a running compaction. */
static int klDeltaAdd(KvLogStore *p, uint64_t cid, int nAction,
                      const KvLogAction *aAction, int64_t iBase){
  int64_t nByte = sizeof(KlDelta) + sizeof(KlDeltaItem)*nAction;
  KlDelta *pD;
  uint8_t *aKeys;
  int i;
  for(i=0; i<nAction; i++) nByte += aAction[i].nKey;
  pD = sqlite3_malloc64((sqlite3_uint64)nByte);
  if( pD==0 ) return SQLITE_NOMEM;
  pD->pNext = 0;
  pD->nItem = nAction;
  aKeys = (uint8_t*)&pD->aItem[nAction];
  for(i=0; i<nAction; i++){
    KlDeltaItem *pI = &pD->aItem[i];
    memcpy(aKeys, aAction[i].aKey, aAction[i].nKey);
    pI->aKey = aKeys;
    pI->nKey = aAction[i].nKey;
    aKeys += aAction[i].nKey;
    pI->loc.iFile = p->pActive->iKey;
    pI->loc.nFrame = (uint32_t)klFrameSize(&aAction[i]);
    pI->loc.iOff = (uint64_t)iBase;
    iBase += pI->loc.nFrame;
    pI->cid = cid;
    pI->bTomb = aAction[i].bDelete;
  }
  if( p->pDeltaLast ) p->pDeltaLast->pNext = pD; else p->pDeltaFirst = pD;
  p->pDeltaLast = pD;
  return SQLITE_OK;
}

/* Dead bytes and whether a compaction is due.  Caller holds mu. */
static int64_t klDeadLocked(KvLogStore *p, int64_t *pszStored){
  int64_t szStored = 0;
  int i;
  for(i=0; i<p->pSet->nFile; i++) szStored += p->pSet->apFile[i]->sz;
  if( pszStored ) *pszStored = szStored;
  return szStored - (int64_t)p->pSet->nFile*KL_HDR - p->cnt.szLive;
}

static int klDueLocked(KvLogStore *p){
  int64_t szStored;
  int64_t szDead = klDeadLocked(p, &szStored);
  if( p->cfg.szDeadTrigger<0 ) return 0;
  return szDead>p->cfg.szDeadTrigger && 2*szDead>szStored;
}

int kv_logstore_compaction_due(KvLogStore *p){
  int bDue;
  pthread_mutex_lock(&p->mu);
  bDue = klDueLocked(p);
  pthread_mutex_unlock(&p->mu);
  return bDue;
}

static int klRefuse(KvLogStore *p, char **pzErr){
  if( p->bDestroyed ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: store %s was destroyed",
                                    p->zDir));
    return SQLITE_MISUSE;
  }
  if( p->bFailed ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: store %s had a failed write or "
                                    "sync; reopen it", p->zDir));
    return SQLITE_IOERR;
  }
  return SQLITE_OK;
}

/* Write the encoded transaction at the end of the active file and build
** the index that includes it; on failure the file is cut back. */
static int klAppendLocked(KvLogStore *p, uint64_t cid, int nAction,
                          const KvLogAction *aAction, char **pzErr){
  int64_t iBase = p->pActive->sz;
  KvMap *pNew = 0;
  KlCounts cnt;
  int rc = klEncode(p, cid, nAction, aAction);
  if( rc==SQLITE_OK ) rc = kl_write(p, p->pActive, p->wbuf.a, p->wbuf.n,
                                    iBase, pzErr);
  if( rc==SQLITE_OK ) rc = klIndexBuild(p, cid, nAction, aAction, iBase,
                                        &pNew, &cnt);
  if( rc==SQLITE_OK && p->bCompacting ){
    rc = klDeltaAdd(p, cid, nAction, aAction, iBase);
  }
  if( rc ){
    kv_map_unref(pNew);
    if( p->pIo->xFtruncate(p->pIo->pCtx, p->pActive->fd, (off_t)iBase) ){
      __atomic_store_n(&p->bFailed, 1, __ATOMIC_RELEASE);
    }
    if( rc==SQLITE_NOMEM ) kl_set_err(pzErr, 0);
    return rc;
  }
  p->bDirty = 1;
  pthread_mutex_lock(&p->mu);
  kv_map_unref(p->pIndex);
  p->pIndex = pNew;
  p->cnt = cnt;
  __atomic_store_n(&p->pActive->sz, iBase + p->wbuf.n, __ATOMIC_RELEASE);
  if( p->bThread && klDueLocked(p) ){
    p->bKick = 1;
    pthread_cond_signal(&p->cond);
  }
  pthread_mutex_unlock(&p->mu);
  return SQLITE_OK;
}

int kv_logstore_apply(KvLogStore *p, uint64_t cid, int nAction,
                      const KvLogAction *aAction, char **pzErr){
  int rc;
  int64_t nTotal = 0;
  int i;
  pthread_mutex_lock(&p->muWrite);
  rc = klRefuse(p, pzErr);
  if( rc==SQLITE_OK ) rc = klCheckActions(p, cid, nAction, aAction, pzErr);
  if( rc==SQLITE_OK && nAction>0 ){
    for(i=0; i<nAction; i++) nTotal += klFrameSize(&aAction[i]);
    if( p->pActive->sz>KL_HDR && p->pActive->sz+nTotal>p->cfg.szFile ){
      rc = kl_roll_locked(p, pzErr);
    }
    if( rc==SQLITE_OK ) rc = klAppendLocked(p, cid, nAction, aAction, pzErr);
  }
  pthread_mutex_unlock(&p->muWrite);
  return rc;
}

int kv_logstore_sync(KvLogStore *p, char **pzErr){
  int rc;
  pthread_mutex_lock(&p->muWrite);
  rc = klRefuse(p, pzErr);
  if( rc==SQLITE_OK ) rc = kl_sync_locked(p, pzErr);
  pthread_mutex_unlock(&p->muWrite);
  return rc;
}

/* -------------------------------------------------------------- reads -- */

/* Look key up in pIndex: 1 (filling *pLoc and *pCid) if live, else 0. */
static int klLookup(KvMap *pIndex, const void *aKey, int nKey, KlLoc *pLoc,
                    uint64_t *pCid){
  KvMapEntry e;
  if( !kv_map_get(pIndex, aKey, nKey, &e) || e.bTomb ) return 0;
  memcpy(pLoc, e.aVal, sizeof(*pLoc));
  if( pCid ) *pCid = e.rev;
  return 1;
}

static int klReadValue(KlSet *pSet, int bFound, const KlLoc *pLoc,
                       const void *aKey, int nKey, KvLogBuf *pOut,
                       int *pbFound, char **pzErr){
  KlWindow win;
  int rc = SQLITE_OK;
  *pbFound = 0;
  if( bFound ){
    memset(&win, 0, sizeof(win));
    rc = kl_read_frame_ahead(pSet, pLoc, aKey, nKey, &win, pOut, pzErr);
    kl_window_release(&win);
    if( rc==SQLITE_OK ) *pbFound = 1;
  }
  return rc;
}

int kv_logstore_get(KvLogStore *p, const void *aKey, int nKey, KvLogBuf *pOut,
                    uint64_t *pCid, int *pbFound, char **pzErr){
  KlLoc loc;
  KlSet *pSet;
  int bFound, rc;
  *pbFound = 0;
  if( aKey==0 || nKey<1 ) return SQLITE_OK;
  pthread_mutex_lock(&p->mu);
  bFound = klLookup(p->pIndex, aKey, nKey, &loc, pCid);
  pSet = kl_set_ref(p->pSet);
  pthread_mutex_unlock(&p->mu);
  rc = klReadValue(pSet, bFound, &loc, aKey, nKey, pOut, pbFound, pzErr);
  kl_set_unref(pSet);
  return rc;
}

struct KvLogSnap {
  KvMap *pIndex;
  KlSet *pSet;
  int64_t nLive;
};

int kv_logstore_snapshot(KvLogStore *p, KvLogSnap **ppSnap){
  KvLogSnap *pSnap = sqlite3_malloc64(sizeof(KvLogSnap));
  *ppSnap = 0;
  if( pSnap==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&p->mu);
  pSnap->pIndex = kv_map_ref(p->pIndex);
  pSnap->pSet = kl_set_ref(p->pSet);
  pSnap->nLive = p->cnt.nLive;
  pthread_mutex_unlock(&p->mu);
  *ppSnap = pSnap;
  return SQLITE_OK;
}

void kv_logsnap_free(KvLogSnap *pSnap){
  if( pSnap==0 ) return;
  kv_map_unref(pSnap->pIndex);
  kl_set_unref(pSnap->pSet);
  sqlite3_free(pSnap);
}

int kv_logsnap_dup(KvLogSnap *pSnap, KvLogSnap **ppCopy){
  KvLogSnap *pCopy = sqlite3_malloc64(sizeof(KvLogSnap));
  *ppCopy = 0;
  if( pCopy==0 ) return SQLITE_NOMEM;
  pCopy->pIndex = kv_map_ref(pSnap->pIndex);
  pCopy->pSet = kl_set_ref(pSnap->pSet);
  pCopy->nLive = pSnap->nLive;
  *ppCopy = pCopy;
  return SQLITE_OK;
}

int kv_logsnap_get(KvLogSnap *pSnap, const void *aKey, int nKey,
                   KvLogBuf *pOut, uint64_t *pCid, int *pbFound,
                   char **pzErr){
  KlLoc loc;
  int bFound;
  *pbFound = 0;
  if( aKey==0 || nKey<1 ) return SQLITE_OK;
  bFound = klLookup(pSnap->pIndex, aKey, nKey, &loc, pCid);
  return klReadValue(pSnap->pSet, bFound, &loc, aKey, nKey, pOut, pbFound,
                     pzErr);
}

int64_t kv_logsnap_count(KvLogSnap *pSnap){
  return pSnap->nLive;
}

struct KvLogCursor {
  KvMapCursor *pCsr;
  KlSet *pSet;
  KlWindow win;                 /* the chunk of the values it walks */
};

/* The process keeps one freed cursor for the next cursor of any store
** (taken and given back by atomic exchange, so from any thread).  A
** cursor's window starts empty, KL_WINDOW_FIRST bytes next. */
static KvLogCursor *klSpareCursor = 0;

int kv_logsnap_cursor(KvLogSnap *pSnap, KvLogCursor **ppCsr){
  KvLogCursor *pCur = __atomic_exchange_n(&klSpareCursor, (KvLogCursor*)0,
                                          __ATOMIC_ACQ_REL);
  *ppCsr = 0;
  if( pCur==0 && (pCur = sqlite3_malloc64(sizeof(KvLogCursor)))==0 ){
    return SQLITE_NOMEM;
  }
  memset(&pCur->win, 0, sizeof(pCur->win));
  pCur->pCsr = kv_map_cursor_new(pSnap->pIndex);
  if( pCur->pCsr==0 ){
    sqlite3_free(pCur);
    return SQLITE_NOMEM;
  }
  pCur->pSet = kl_set_ref(pSnap->pSet);
  *ppCsr = pCur;
  return SQLITE_OK;
}

void kv_logcursor_free(KvLogCursor *pCur){
  if( pCur==0 ) return;
  kl_window_release(&pCur->win);
  kv_map_cursor_free(pCur->pCsr);
  kl_set_unref(pCur->pSet);
  pCur->pCsr = 0;
  pCur->pSet = 0;
  pCur = __atomic_exchange_n(&klSpareCursor, pCur, __ATOMIC_ACQ_REL);
  sqlite3_free(pCur);
}

/* Step over tombstones in direction dir (+1 next, -1 prev). */
static int klSkipTombs(KvLogCursor *pCur, int bOn, int dir){
  KvMapEntry e;
  while( bOn ){
    kv_map_cursor_entry(pCur->pCsr, &e);
    if( !e.bTomb ) return 1;
    bOn = dir>0 ? kv_map_cursor_next(pCur->pCsr)
                : kv_map_cursor_prev(pCur->pCsr);
  }
  return 0;
}

int kv_logcursor_seek(KvLogCursor *pCur, int eSeek, const void *aKey,
                      int nKey){
  int bOn = kv_map_cursor_seek(pCur->pCsr, eSeek, aKey, nKey);
  int dir = (eSeek==KV_SEEK_FIRST || eSeek==KV_SEEK_GE || eSeek==KV_SEEK_GT)
            ? 1 : -1;
  return klSkipTombs(pCur, bOn, dir);
}

int kv_logcursor_next(KvLogCursor *pCur){
  return klSkipTombs(pCur, kv_map_cursor_next(pCur->pCsr), 1);
}

int kv_logcursor_prev(KvLogCursor *pCur){
  return klSkipTombs(pCur, kv_map_cursor_prev(pCur->pCsr), -1);
}

int kv_logcursor_valid(KvLogCursor *pCur){
  return kv_map_cursor_valid(pCur->pCsr);
}

void kv_logcursor_key(KvLogCursor *pCur, const uint8_t **paKey, int *pnKey,
                      uint64_t *pCid){
  KvMapEntry e;
  kv_map_cursor_entry(pCur->pCsr, &e);
  *paKey = e.aKey;
  *pnKey = e.nKey;
  if( pCid ) *pCid = e.rev;
}

int kv_logcursor_value(KvLogCursor *pCur, KvLogBuf *pOut, char **pzErr){
  KvMapEntry e;
  KlLoc loc;
  kv_map_cursor_entry(pCur->pCsr, &e);
  memcpy(&loc, e.aVal, sizeof(loc));
  return kl_read_frame_ahead(pCur->pSet, &loc, e.aKey, e.nKey, &pCur->win,
                             pOut, pzErr);
}

int kv_logcursor_row(KvLogCursor *pCur, const uint8_t **paKey, int *pnKey,
                     KvLogBuf *pSpare, const uint8_t **paVal, int *pnVal,
                     char **pzErr){
  KvMapEntry e;
  KlLoc loc;
  kv_map_cursor_entry(pCur->pCsr, &e);
  memcpy(&loc, e.aVal, sizeof(loc));
  *paKey = e.aKey;
  *pnKey = e.nKey;
  return kl_read_frame_in(pCur->pSet, &loc, e.aKey, e.nKey, &pCur->win,
                          pSpare, paVal, pnVal, pzErr);
}

int kv_logcursor_step_row(KvLogCursor *pCur, int bPrev,
                          const uint8_t **paKey, int *pnKey, KvLogBuf *pSpare,
                          const uint8_t **paVal, int *pnVal, char **pzErr){
  KvMapEntry e;
  KlLoc loc;
  do{
    if( !kv_map_cursor_step(pCur->pCsr, bPrev, &e) ) return SQLITE_DONE;
  }while( e.bTomb );
  memcpy(&loc, e.aVal, sizeof(loc));
  *paKey = e.aKey;
  *pnKey = e.nKey;
  if( kl_window_value(&pCur->win, &loc, e.aKey, e.nKey, paVal, pnVal) ){
    return SQLITE_OK;
  }
  return kl_read_frame_in(pCur->pSet, &loc, e.aKey, e.nKey, &pCur->win,
                          pSpare, paVal, pnVal, pzErr);
}

/* -------------------------------------------------- stats and destroy -- */

int kv_logstore_failed(KvLogStore *p){
  return __atomic_load_n(&p->bFailed, __ATOMIC_ACQUIRE);
}

void kv_logstore_stats(KvLogStore *p, KvLogStats *pStats){
  memset(pStats, 0, sizeof(*pStats));
  pthread_mutex_lock(&p->mu);
  pStats->nLive = p->cnt.nLive;
  pStats->nTomb = p->cnt.nTomb;
  pStats->szLive = p->cnt.szLive;
  pStats->maxCid = p->cnt.maxCid;
  pStats->szDead = klDeadLocked(p, &pStats->szStored);
  pStats->nFile = p->pSet->nFile;
  pStats->nCompaction = p->nCompaction;
  pStats->nCompactError = p->nCompactError;
  memcpy(pStats->zCompactError, p->zCompactError, sizeof(p->zCompactError));
  pthread_mutex_unlock(&p->mu);
  pStats->bFailed = __atomic_load_n(&p->bFailed, __ATOMIC_ACQUIRE);
}

/* Unlink every file of the store named in the directory, then it. */
static int klRemoveAll(KvLogStore *p, char **pzErr){
  KlDirList list;
  int rc;
  memset(&list, 0, sizeof(list));
  rc = klListDir(p, &list, pzErr);
  if( rc==SQLITE_OK ){
    klDeleteGarbage(p, &list, KL_MAX_FILENUM, 0, 0);
    char *z = sqlite3_mprintf("%s/MANIFEST", p->zDir);
    if( z==0 ) rc = SQLITE_NOMEM;
    else p->pIo->xUnlink(p->pIo->pCtx, z);
    sqlite3_free(z);
  }
  if( rc==SQLITE_OK && rmdir(p->zDir)!=0 && errno!=ENOENT ){
    rc = kl_io_err(pzErr, SQLITE_IOERR_DELETE, "removal", p->zDir, errno);
  }
  sqlite3_free(list.aLog);
  sqlite3_free(list.aMrg);
  return rc;
}

int kv_logstore_destroy(KvLogStore *p, char **pzErr){
  int rc;
  pthread_mutex_lock(&p->muCompact);
  pthread_mutex_lock(&p->muWrite);
  p->bDestroyed = 1;
  rc = klRemoveAll(p, pzErr);
  pthread_mutex_unlock(&p->muWrite);
  pthread_mutex_unlock(&p->muCompact);
  return rc;
}

/* ------------------------------------------------ shared compaction --
**
** While shared, the one process that runs the store's background work
** compacts (kv_logstore_tick says which; kl_compact_shared) and removes
** what compactions replaced (klReap); every process loads a new MANIFEST
** when its thread notices one (klReload).  Each process holds a shared
** lock on its active log file (kl_file_hold), so the files a compaction
** replaced are removed only once no process may still have to read one
** it has not opened: every process has read past them.  Files a process
** has open stay readable after their removal, so a process reads its
** snapshots through them until it loads the new MANIFEST. */

/* Remove what compactions replaced: log files up to the MANIFEST's M,
** merged files it does not list (a crashed compaction's too), and
** MANIFEST.tmp, once no process holds the lock of one of those log
** files.  *pbClean: none is left.  The merged-file numbers on disk
** afterwards go to *paMrg / *pnMrg (sqlite3_malloc'd; may be NULL). */
static int klReap(KvLogStore *p, int *pbClean, uint32_t **paMrg, int *pnMrg,
                  char **pzErr){
  KlDirList list;
  uint32_t iMerged = 0, *aList = 0;
  uint64_t maxCid = 0;
  int nList = 0, rc, bAny = 0, bHeld = 0;
  int64_t i;
  memset(&list, 0, sizeof(list));
  *pbClean = 0;
  rc = kl_manifest_read(p, &iMerged, &maxCid, &aList, &nList, pzErr);
  if( rc==SQLITE_OK ) rc = klListDir(p, &list, pzErr);
  if( rc==SQLITE_OK ){
    if( nList>1 ) qsort(aList, nList, sizeof(uint32_t), klCmpU32);
    bAny = list.bManifestTmp;
    for(i=0; i<list.nMrg; i++){
      if( !klInList(aList, nList, list.aMrg[i]) ) bAny = 1;
    }
    for(i=0; rc==SQLITE_OK && !bHeld && i<list.nLog; i++){
      char *z;
      if( list.aLog[i]>iMerged ) break;
      bAny = 1;
      z = kl_path(p->zDir, list.aLog[i], KL_KIND_LOG);
      if( z==0 ) rc = SQLITE_NOMEM;
      else bHeld = kl_file_locked(z);
      sqlite3_free(z);
    }
  }
  if( rc==SQLITE_OK && bAny && !bHeld ){
    /* the MANIFEST that replaced them is durable first */
    rc = kl_syncdir(p, pzErr);
    if( rc==SQLITE_OK ){
      klDeleteGarbage(p, &list, iMerged, aList, nList);
      list.nMrg = 0;
      for(i=0; i<nList; i++) list.aMrg[list.nMrg++] = aList[i];
    }
  }
  if( rc==SQLITE_OK && !bHeld ){
    *pbClean = 1;
    if( paMrg ){
      *paMrg = list.aMrg;
      *pnMrg = (int)list.nMrg;
      list.aMrg = 0;
    }
  }
  sqlite3_free(list.aLog);
  sqlite3_free(list.aMrg);
  sqlite3_free(aList);
  return rc;
}

/* Load the MANIFEST another process's compaction committed (muCompact
** held), once this process has read every log file it replaced (its
** active file is past M): the new index is the merged files' records plus
** every entry of the current one that names a log file past M; the new
** set, the merged files plus those log files.  Nothing to do (SQLITE_OK)
** when the MANIFEST is the loaded one or the process is not past it yet;
** a merged file removed meanwhile (a later compaction) fails the load,
** which the next try repeats with the newer MANIFEST.  Costs a read of
** the merged files and a walk of the index. */
static int klReload(KvLogStore *p, char **pzErr){
  uint32_t iMerged = 0, *aList = 0;
  uint64_t maxCid = 0;
  int nList = 0, nMrg = 0, rc, i, bReady;
  KlFile **apMrg = 0;
  KvMap *pNew = 0;
  KlCounts cnt;
  KvMapCursor *pCsr = 0;
  rc = kl_manifest_read(p, &iMerged, &maxCid, &aList, &nList, pzErr);
  if( rc ) return rc;
  pthread_mutex_lock(&p->muWrite);
  bReady = iMerged>p->iGen && p->pActive && p->pActive->iNum>iMerged
        && !p->bFailed && !p->bDestroyed;
  pthread_mutex_unlock(&p->muWrite);
  if( !bReady ){
    sqlite3_free(aList);
    return SQLITE_OK;
  }
  memset(&cnt, 0, sizeof(cnt));
  pNew = kv_map_new();
  apMrg = sqlite3_malloc64(sizeof(KlFile*)*(nList+1));
  if( pNew==0 || apMrg==0 ) rc = SQLITE_NOMEM;
  for(i=0; rc==SQLITE_OK && i<nList; i++){
    KlScan scan;
    KlFile *pFile = 0;
    rc = klFileOpen(p, aList[i], KL_KIND_MRG, &pFile, pzErr);
    if( rc ) break;
    apMrg[nMrg++] = pFile;
    memset(&scan, 0, sizeof(scan));
    scan.iWin = -1;
    rc = klScanFile(p, pFile, 0, &scan, pzErr);
    if( rc==SQLITE_OK ) rc = klScanApplyTo(&pNew, &cnt, pFile, &scan);
    klScanFree(&scan);
  }
  if( rc==SQLITE_OK ){
    KlSet *pSet = 0;
    int bOn;
    pthread_mutex_lock(&p->muWrite);
    rc = klRefuse(p, pzErr);
    if( rc==SQLITE_OK ) rc = kl_sync_locked(p, pzErr);
    if( rc==SQLITE_OK && (pCsr = kv_map_cursor_new(p->pIndex))==0 ){
      rc = SQLITE_NOMEM;
    }
    for(bOn = rc==SQLITE_OK && kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
        bOn && rc==SQLITE_OK; bOn = kv_map_cursor_next(pCsr)){
      KvMapEntry e;
      KlLoc loc;
      kv_map_cursor_entry(pCsr, &e);
      memcpy(&loc, e.aVal, sizeof(loc));
      if( (loc.iFile & KL_KEY_MRG)==0 && loc.iFile>iMerged ){
        rc = kv_map_put(&pNew, e.aKey, e.nKey, &loc, sizeof(loc), e.rev,
                        e.bTomb);
      }
    }
    kv_map_cursor_free(pCsr);
    if( rc==SQLITE_OK && (pSet = kl_set_new(p->pSet->nFile+nMrg))==0 ){
      rc = SQLITE_NOMEM;
    }
    if( rc==SQLITE_OK ){
      for(i=0; i<p->pSet->nFile; i++){
        KlFile *pF = p->pSet->apFile[i];
        if( pF->eKind!=KL_KIND_LOG || pF->iNum<=iMerged ) continue;
        pSet->apFile[pSet->nFile++] = pF;
        __atomic_add_fetch(&pF->nRef, 1, __ATOMIC_RELAXED);
      }
      for(i=0; i<nMrg; i++){
        pSet->apFile[pSet->nFile++] = apMrg[i];
        apMrg[i] = 0;
      }
      qsort(pSet->apFile, pSet->nFile, sizeof(KlFile*), klCmpFilePtr);
      pthread_mutex_lock(&p->mu);
      kl_set_unref(p->pSet);
      p->pSet = pSet;
      kv_map_unref(p->pIndex);
      p->pIndex = pNew;
      pNew = 0;
      p->cnt.nTomb = kv_map_count(p->pIndex) - p->cnt.nLive;
      if( maxCid>p->cnt.maxCid ) p->cnt.maxCid = maxCid;
      p->iGen = iMerged;
      pthread_mutex_unlock(&p->mu);
      kl_sync_point_locked(p);
      kv_map_unref(p->pIdxRoll);
      p->pIdxRoll = 0;
    }
    pthread_mutex_unlock(&p->muWrite);
  }
  for(i=0; i<nMrg; i++) kl_file_unref(apMrg[i]);
  sqlite3_free(apMrg);
  kv_map_unref(pNew);
  sqlite3_free(aList);
  return rc;
}

/* The shared compaction (muCompact held): the new MANIFEST loaded first,
** what earlier compactions replaced removed; if some of it must stay (a
** process has not read past it), SQLITE_BUSY and nothing else.  bDue: a
** compaction runs (else only the removal). */
static int klCompactShared(KvLogStore *p, int bDue, char **pzErr){
  uint32_t *aMrg = 0;
  int nMrg = 0, bClean = 0, bCommitted = 0, rc;
  rc = klReload(p, pzErr);
  if( rc==SQLITE_OK && klManifestGen(p)!=p->iGen ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: %s: this process has not "
        "read past the files the last compaction replaced", p->zDir));
    return SQLITE_BUSY;
  }
  if( rc==SQLITE_OK ) rc = klReap(p, &bClean, &aMrg, &nMrg, pzErr);
  if( rc==SQLITE_OK && !bClean ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: %s: a process has not read "
        "past the files the last compaction replaced", p->zDir));
    rc = SQLITE_BUSY;
  }
  if( rc==SQLITE_OK ) p->bReapDue = 0;
  if( rc==SQLITE_OK && bDue ){
    rc = kl_compact_shared(p, aMrg, nMrg, &bCommitted, pzErr);
    if( bCommitted ) p->bReapDue = 1;
  }
  sqlite3_free(aMrg);
  if( rc==SQLITE_OK && p->bReapDue ){
    rc = klReap(p, &bClean, 0, 0, pzErr);    /* the others may be past */
    if( rc==SQLITE_OK && bClean ) p->bReapDue = 0;
  }
  return rc;
}

/* A turn of the background thread while shared: load a new MANIFEST;
** in the process that compacts, remove what was replaced and compact
** when due.  SQLITE_BUSY (files still needed) is no failure. */
static int klSharedWork(KvLogStore *p, char **pzErr){
  int rc;
  pthread_mutex_lock(&p->muCompact);
  rc = klReload(p, pzErr);
  if( rc==SQLITE_OK && __atomic_load_n(&p->bOwner, __ATOMIC_ACQUIRE) ){
    int bDue = kv_logstore_compaction_due(p);
    if( bDue || p->bReapDue ) rc = klCompactShared(p, bDue, pzErr);
    if( rc==SQLITE_BUSY ){
      kl_set_err(pzErr, 0);
      rc = SQLITE_OK;
    }
  }
  pthread_mutex_unlock(&p->muCompact);
  return rc;
}

int kv_logstore_compact(KvLogStore *p, char **pzErr){
  int rc;
  pthread_mutex_lock(&p->muCompact);
  if( __atomic_load_n(&p->cfg.bShared, __ATOMIC_ACQUIRE) ){
    rc = klCompactShared(p, 1, pzErr);
  }else{
    rc = kl_compact(p, pzErr);
  }
  pthread_mutex_unlock(&p->muCompact);
  return rc;
}

void kv_logstore_tick(KvLogStore *p, int bOwner){
  __atomic_store_n(&p->bOwner, bOwner, __ATOMIC_RELEASE);
  if( !p->bThread ) return;
  pthread_mutex_lock(&p->mu);
  p->bKick = 1;
  pthread_cond_signal(&p->cond);
  pthread_mutex_unlock(&p->mu);
}

/* ------------------------------------------------- background thread -- */

static void *klThreadMain(void *pArg){
  KvLogStore *p = (KvLogStore*)pArg;
  pthread_mutex_lock(&p->mu);
  while( !p->bStop ){
    char *zErr = 0;
    int rc;
    if( !p->bKick ){
      pthread_cond_wait(&p->cond, &p->mu);
      continue;
    }
    p->bKick = 0;
    pthread_mutex_unlock(&p->mu);
    if( __atomic_load_n(&p->cfg.bShared, __ATOMIC_ACQUIRE) ){
      rc = klSharedWork(p, &zErr);
    }else{
      rc = kv_logstore_compact(p, &zErr);
    }
    if( rc!=SQLITE_OK ) sqlite3_log(rc, "%s", zErr ? zErr : "kv_log: "
                                    "background compaction failed");
    sqlite3_free(zErr);
    pthread_mutex_lock(&p->mu);
    if( rc!=SQLITE_OK && !p->bStop ){
      /* Back off: the next attempt waits for a kick after a second. */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_cond_timedwait(&p->cond, &p->mu, &ts);
      p->bKick = 0;
    }
  }
  pthread_mutex_unlock(&p->mu);
  return 0;
}

/* --------------------------------------------------- several processes -- */

void kv_logstore_share(KvLogStore *p){
  pthread_mutex_lock(&p->muCompact);    /* a compaction finishes first */
  pthread_mutex_lock(&p->muWrite);
  __atomic_store_n(&p->cfg.bShared, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&p->muWrite);
  pthread_mutex_unlock(&p->muCompact);
}

/* Scan the frames of pFile from iFrom to szNow into pScan; pScan->iEnd
** ends the last whole transaction (records after it are dropped), of CID
** at most cidMax unless that is 0 (*pbBound set when a later one was
** there). */
static int klFollowScan(KvLogStore *p, KlFile *pFile, int64_t iFrom,
                        int64_t szNow, uint64_t cidMax, KlScan *pScan,
                        int *pbBound, char **pzErr){
  int64_t iOff = iFrom;
  int rc = SQLITE_OK;
  pScan->sz = szNow;
  pScan->iWin = -1;
  pScan->iEnd = iFrom;
  while( iOff<szNow ){
    const uint8_t *a;
    int64_t nAvail;
    KlFrame fr;
    rc = klScanFrame(p, pFile, pScan, iOff, &a, &nAvail, pzErr);
    if( rc ) return rc;
    if( kl_frame_parse(a, nAvail, &fr) ) break;   /* in progress, or torn */
    if( cidMax && fr.cid>cidMax ){ *pbBound = 1; break; }
    rc = klScanAdd(pScan, iOff, &fr);
    if( rc ) return rc;
    iOff += pScan->aRec[pScan->nRec-1].nFrame;
    if( fr.flags & KL_FLAG_LAST ) pScan->iEnd = iOff;
  }
  while( pScan->nRec>0 && pScan->aRec[pScan->nRec-1].iOff>=pScan->iEnd ){
    pScan->nRec--;
  }
  return SQLITE_OK;
}

/* Put the scanned records of pFile into *ppIndex, oldest first (each
** replaces what the key had), with the counters *pCnt; *pnTxn counts the
** transactions. */
static int klFollowIndex(KlFile *pFile, KlScan *pScan, KvMap **ppIndex,
                         KlCounts *pCnt, int *pnTxn){
  int64_t i;
  int rc = SQLITE_OK;
  for(i=0; i<pScan->nRec && rc==SQLITE_OK; i++){
    KlRec *pRec = &pScan->aRec[i];
    int bTomb = (pRec->flags & KL_FLAG_DELETE)!=0;
    KvMapOld o;
    KlLoc loc, old;
    loc.iFile = pFile->iKey;
    loc.nFrame = pRec->nFrame;
    loc.iOff = (uint64_t)pRec->iOff;
    o.aBuf = &old;
    o.nBuf = sizeof(old);
    rc = kv_map_put_old(ppIndex, pScan->aKeys+pRec->iKey, (int)pRec->nKey,
                        &loc, sizeof(loc), pRec->cid, bTomb, &o);
    if( rc!=SQLITE_OK ) break;
    if( o.bFound && o.bTomb ){
      pCnt->nTomb--;
    }else if( o.bFound ){
      pCnt->nLive--;
      pCnt->szLive -= old.nFrame;
    }
    if( bTomb ){ pCnt->nTomb++; }
    else{ pCnt->nLive++; pCnt->szLive += pRec->nFrame; }
    if( pRec->cid>pCnt->maxCid ) pCnt->maxCid = pRec->cid;
    if( pRec->flags & KL_FLAG_LAST ) (*pnTxn)++;
  }
  return rc;
}

/* Read the whole transactions appended to the active file past its known
** end and publish them; the writer cuts what follows them. */
static int klFollowActive(KvLogStore *p, int bWriter, uint64_t cidMax,
                          int *pbBound, int *pnTxn, char **pzErr){
  KlFile *pFile = p->pActive;
  KvMap *pNew = 0;
  KlCounts cnt;
  KlScan scan;
  off_t szNow = 0;
  int rc = SQLITE_OK;
  memset(&scan, 0, sizeof(scan));
  if( p->pIo->xFstatSize(p->pIo->pCtx, pFile->fd, &szNow) ){
    return kl_io_err(pzErr, SQLITE_IOERR_FSTAT, "stat", pFile->zPath, errno);
  }
  if( (int64_t)szNow<=pFile->sz ){
    if( bWriter && (int64_t)szNow<pFile->sz ){
      return kl_corrupt(pzErr, pFile->zPath, (int64_t)szNow, "the log file "
                        "is shorter than the transactions read from it");
    }
    return SQLITE_OK;
  }
  rc = klFollowScan(p, pFile, pFile->sz, (int64_t)szNow,
                    bWriter ? 0 : cidMax, &scan, pbBound, pzErr);
  if( rc==SQLITE_OK && scan.nRec>0 ){
    pNew = kv_map_ref(p->pIndex);
    cnt = p->cnt;
    rc = klFollowIndex(pFile, &scan, &pNew, &cnt, pnTxn);
    if( rc==SQLITE_OK ){
      pthread_mutex_lock(&p->mu);
      kv_map_unref(p->pIndex);
      p->pIndex = pNew;
      pNew = 0;
      p->cnt = cnt;
      __atomic_store_n(&pFile->sz, scan.iEnd, __ATOMIC_RELEASE);
      pthread_mutex_unlock(&p->mu);
    }
  }
  kv_map_unref(pNew);
  if( rc==SQLITE_OK && bWriter && scan.iEnd<(int64_t)szNow ){
    sqlite3_log(SQLITE_NOTICE, "kv_log: cutting the tail a process left in "
                "%s at offset %lld", pFile->zPath, (long long)scan.iEnd);
    if( p->pIo->xFtruncate(p->pIo->pCtx, pFile->fd, (off_t)scan.iEnd) ){
      rc = kl_io_err(pzErr, SQLITE_IOERR_TRUNCATE, "truncate", pFile->zPath,
                     errno);
    }
  }
  klScanFree(&scan);
  return rc;
}

/* The number of the log file a roll starts after the active one, while
** shared: the next number (a merged file may have it too: its name and
** its KlFile.iKey differ), so every process agrees whatever merged files
** it knows. */
static uint32_t klNextLogNum(KvLogStore *p){
  return p->pActive->iNum + 1;
}

/* The log file after the active one, when another process rolled to it
** (*ppNext, one reference, its known end past the header), or NULL.  A
** header not written yet: a follower waits for it, the writer (whose
** predecessor died there) writes it again. */
static int klFollowNext(KvLogStore *p, int bWriter, KlFile **ppNext,
                        char **pzErr){
  uint32_t iNum = klNextLogNum(p);
  KlFile *pFile = kl_file_new(p, iNum, KL_KIND_LOG);
  uint8_t aHdr[KL_HDR];
  int rc;
  *ppNext = 0;
  if( pFile==0 ) return SQLITE_NOMEM;
  pFile->fd = p->pIo->xOpen(p->pIo->pCtx, pFile->zPath,
                            (p->cfg.bReadOnly ? O_RDONLY : O_RDWR)|O_CLOEXEC,
                            0);
  if( pFile->fd<0 ){
    rc = errno==ENOENT ? SQLITE_OK
       : kl_io_err(pzErr, SQLITE_CANTOPEN, "open", pFile->zPath, errno);
    kl_file_unref(pFile);
    return rc;
  }
  rc = kl_read(p, p->pIo, pFile, aHdr, KL_HDR, 0, pzErr);
  if( rc==SQLITE_OK && kl_header_check(aHdr, pFile)!=0 ) rc = SQLITE_EMPTY;
  if( rc==SQLITE_IOERR_SHORT_READ ) rc = SQLITE_EMPTY;
  if( rc==SQLITE_EMPTY ){
    kl_file_unref(pFile);
    pFile = 0;
    rc = bWriter ? kl_file_create(p, iNum, KL_KIND_LOG, &pFile, pzErr)
                 : SQLITE_OK;
    if( pFile ) p->bDirDirty = 1;
  }
  if( rc!=SQLITE_OK ){
    kl_file_unref(pFile);
    return rc;
  }
  if( pFile ) pFile->sz = KL_HDR;
  *ppNext = pFile;
  return SQLITE_OK;
}

/* Make pNext (a reference is taken) the active file. */
static int klFollowSwitch(KvLogStore *p, KlFile *pNext){
  KlSet *pSet;
  KlFile *pOld = p->pActive;
  pthread_mutex_lock(&p->mu);
  pSet = kl_set_with(p->pSet, pNext);
  if( pSet ){
    kl_set_unref(p->pSet);
    p->pSet = pSet;
    p->pActive = pNext;
  }
  pthread_mutex_unlock(&p->mu);
  if( pSet==0 ) return SQLITE_NOMEM;
  kl_active_switched(p, pOld);
  return SQLITE_OK;
}

int kv_logstore_follow(KvLogStore *p, int bWriter, uint64_t cidMax,
                       int *pnTxn, char **pzErr){
  int nTxn = 0, rc, bBound = 0;
  pthread_mutex_lock(&p->muWrite);
  rc = klRefuse(p, pzErr);
  while( rc==SQLITE_OK ){
    KlFile *pNext = 0;
    rc = klFollowActive(p, bWriter, cidMax, &bBound, &nTxn, pzErr);
    if( rc!=SQLITE_OK || bBound ) break;
    rc = klFollowNext(p, bWriter, &pNext, pzErr);
    if( rc!=SQLITE_OK || pNext==0 ) break;
    /* A roll: the active file is whole now, read it to its end first. */
    rc = klFollowActive(p, bWriter, cidMax, &bBound, &nTxn, pzErr);
    if( rc==SQLITE_OK && bBound ){
      kl_file_unref(pNext);
      break;
    }
    if( rc==SQLITE_OK ) rc = klFollowSwitch(p, pNext);
    kl_file_unref(pNext);
  }
  if( rc==SQLITE_OK && bWriter ){
    p->iNext = klNextLogNum(p);
    if( nTxn>0 ) p->bDirty = 1;    /* a dead writer's appends: sync them */
  }
  pthread_mutex_unlock(&p->muWrite);
  if( p->cfg.bReadOnly && nTxn>0 ){
    kv_logstore_tick(p, 0);        /* no tick otherwise: look for a MANIFEST */
  }
  if( pnTxn ) *pnTxn = nTxn;
  return rc;
}

int kv_logstore_sync_shared(KvLogStore *p, char **pzErr){
  KlSet *pSet;
  int64_t *aSz;
  int i, rc, bNew = 0;
  rc = klRefuse(p, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  /* Off muWrite (appends go on meanwhile; the fsyncs cover at least the
  ** sizes read here).  One caller at a time (the engine's mutex), the
  ** only writer of szShSynced. */
  pthread_mutex_lock(&p->mu);
  pSet = kl_set_ref(p->pSet);
  aSz = sqlite3_malloc64(sizeof(int64_t)*(pSet->nFile+1));
  for(i=0; aSz && i<pSet->nFile; i++){
    aSz[i] = pSet->apFile[i]->sz;
    if( pSet->apFile[i]->szShSynced==0 ) bNew = 1;
  }
  pthread_mutex_unlock(&p->mu);
  if( aSz==0 ) rc = SQLITE_NOMEM;
  if( rc==SQLITE_OK && bNew ) rc = kl_syncdir(p, pzErr);
  for(i=0; rc==SQLITE_OK && i<pSet->nFile; i++){
    KlFile *pFile = pSet->apFile[i];
    if( aSz[i]<=pFile->szShSynced ) continue;
    rc = kl_fsync(p, pFile, pzErr);
    if( rc==SQLITE_OK ) pFile->szShSynced = aSz[i];
  }
  sqlite3_free(aSz);
  kl_set_unref(pSet);
  return rc;
}
