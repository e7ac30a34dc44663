/*
** logcompact.c -- compaction (merge) of kv_log stores.  The MANIFEST that
** makes its result atomic is read and written by logfile.c.
**
** A compaction (kv_logstore_compact):
**   1. start: roll the active file A (syncing the old one), take the index
**      version V0 and file set S0; every record V0 names is in a file of S0
**      other than A.  From now on appends record their index changes in the
**      delta list.                                   (KVLOG_STEP_ROLLED)
**   2. copy the frame of every live key of V0, verbatim, in key order, into
**      new merged files (rolled at szFile), building the new index N.
**                                                    (KVLOG_STEP_OUTPUT)
**   3. sync every merged file and the directory.     (..._OUTPUT_SYNCED)
**   4. apply the delta recorded so far to N (off every lock).
**   5. MANIFEST := (M = A-1, V0's highest CID, the merged files).
**                  (..._MANIFEST_TMP, ..._RENAMED, ..._COMMITTED)
**   6. under the write lock: sync the active file, apply the rest of the
**      delta to N, then under the state lock swap index and file set and
**      doom the old files; each is unlinked when its last user (a snapshot,
**      a cursor, a read in progress) lets go.        (..._SWAPPED)
** A crash before the rename of step 5 leaves the old MANIFEST, under which
** the merged files are unlisted leftovers; after it, the new MANIFEST,
** under which the old files are leftovers.  Either set is complete, because
** nothing is deleted before the new MANIFEST is durable.
**
** Shared stores (KvLogConfig.bShared: other processes append to the same
** files, one at a time under the caller's writer lock, and follow each
** other's appends).  One process compacts: the holder of the store's
** OWNER lock (kv_logstore_tick), on its log store's thread
** (kl_compact_shared; logstore.c drives it).
**   1. no roll: A is the active file, and the input V0 is the index as it
**      was when A became active (KvLogStore.pIdxRoll, kept at each roll
**      and each followed roll): the state at the end of file A-1, which
**      every process reads the same way.  Nothing to do until a roll.
**   2, 3. as above; the merged files take the lowest numbers that no
**      merged file on disk has (a log file may have the same one: the
**      file kinds are keyed apart, KlFile.iKey, so every process rolls
**      to active+1 whatever merged files it knows).
**   4. nothing: V0 names records of files before A only.
**   5. MANIFEST := (M = A-1, V0's highest CID, the merged files).
**   6. under the write lock: the new index is N plus every entry of the
**      current one that names a log file from A on (later records and
**      the tombstones that hide merged ones); the replaced files are not
**      doomed: other processes may still read them.
** Every process (logstore.c, klReload) loads a MANIFEST newer than its own
** once its active file is past M, so it has read every replaced file to
** its end: its new index is the merged records plus its entries that name
** log files past M (a read of the merged files and a walk of the index,
** in proportion to the live data, once per compaction).  Each process
** holds a shared lock on its active log file (kl_file_hold), from its
** open on; the compacting process removes the replaced files - log files
** up to M, unlisted merged files (a dead compactor's too), MANIFEST.tmp -
** after a directory sync and only when no other process holds the lock
** of one of those log files (klReap), before it starts its next
** compaction.  A process keeps reading the files it has open after their
** removal; one that opens loads again when the MANIFEST changed during
** its load.  The compacting process killed at any step: its successor
** loads the MANIFEST if it was renamed, then removes what is left over.
*/
#include "config.h"
#include "ext/kv/logstore_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* --------------------------------------------------------- compaction -- */

typedef struct KlCompact KlCompact;
struct KlCompact {
  KvMap *pV0;             /* index at the start */
  KlSet *pS0;             /* files at the start */
  uint32_t iActive;       /* the active file at the start (not merged) */
  uint64_t maxCid;        /* highest CID in V0's files */
  KlFile **apOut;         /* merged files written */
  int nOut, nOutAlloc;
  KvLogBuf obuf;          /* frames not yet written to apOut[nOut-1] */
  KvLogBuf rbuf;          /* one frame read back */
  KvMap *pNew;            /* the index being built */
  KlDelta *pSeen;         /* last delta node applied to pNew */
  int bRenamed;           /* MANIFEST may name apOut: never delete them */
  int bShared;            /* the store is shared (kl_compact_shared) */
  const uint32_t *aUsed;  /* shared: merged-file numbers on disk, sorted */
  int nUsed;
  uint32_t iNextMrg;      /* shared: the next merged-file number to try */
};

#define KL_OBUF (1024*1024)

/* Step 1: roll, then take V0 and S0.  *pbNothing if there is no file to
** merge. */
static int klcStart(KvLogStore *p, KlCompact *c, int *pbNothing,
                          char **pzErr){
  int rc = SQLITE_OK;
  pthread_mutex_lock(&p->muWrite);
  if( p->bDestroyed || p->bFailed ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: store %s %s", p->zDir,
               p->bDestroyed ? "was destroyed"
                             : "had a failed write or sync; reopen it"));
    rc = p->bDestroyed ? SQLITE_MISUSE : SQLITE_IOERR;
  }else if( p->pActive->sz>KL_HDR ){
    rc = kl_roll_locked(p, pzErr);
  }
  if( rc==SQLITE_OK ){
    c->iActive = p->pActive->iNum;
    c->maxCid = p->cnt.maxCid;
    pthread_mutex_lock(&p->mu);
    c->pV0 = kv_map_ref(p->pIndex);
    c->pS0 = p->pSet;
    __atomic_add_fetch(&c->pS0->nRef, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->mu);
    *pbNothing = (c->pS0->nFile<=1);
    p->bCompacting = !*pbNothing;
  }
  pthread_mutex_unlock(&p->muWrite);
  return rc;
}

/* Write the buffered frames to the current merged file. */
static int klcOutFlush(KvLogStore *p, KlCompact *c, char **pzErr){
  KlFile *pOut;
  int rc;
  if( c->obuf.n==0 ) return SQLITE_OK;
  pOut = c->apOut[c->nOut-1];
  rc = kl_write(p, pOut, c->obuf.a, c->obuf.n, pOut->sz, pzErr);
  if( rc==SQLITE_OK ){
    pOut->sz += c->obuf.n;
    c->obuf.n = 0;
  }
  return rc;
}

/* Finish the current merged file (if any) and start the next one. */
static int klcOutNext(KvLogStore *p, KlCompact *c, char **pzErr){
  KlFile *pFile = 0;
  uint32_t iNum;
  int rc = SQLITE_OK;
  if( c->nOut>0 ){
    rc = klcOutFlush(p, c, pzErr);
    if( rc==SQLITE_OK ) rc = kl_step(p, KVLOG_STEP_OUTPUT, pzErr);
    if( rc ) return rc;
  }
  if( c->nOut==c->nOutAlloc ){
    int nNew = c->nOutAlloc ? 2*c->nOutAlloc : 8;
    KlFile **apNew = sqlite3_realloc64(c->apOut, sizeof(KlFile*)*nNew);
    if( apNew==0 ) return SQLITE_NOMEM;
    c->apOut = apNew;
    c->nOutAlloc = nNew;
  }
  if( c->bShared ){
    /* Numbers no merged file on disk has: a log file's number is free */
    int j = 0;
    iNum = c->iNextMrg;
    while( j<c->nUsed && c->aUsed[j]<iNum ) j++;
    while( j<c->nUsed && c->aUsed[j]==iNum ){ iNum++; j++; }
    c->iNextMrg = iNum+1;
  }else{
    pthread_mutex_lock(&p->muWrite);
    iNum = p->iNext++;
    pthread_mutex_unlock(&p->muWrite);
  }
  if( iNum>KL_MAX_FILENUM ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: %s ran out of file numbers",
                                      p->zDir));
    return SQLITE_FULL;
  }
  rc = kl_file_create(p, iNum, KL_KIND_MRG, &pFile, pzErr);
  if( rc==SQLITE_OK ) c->apOut[c->nOut++] = pFile;
  return rc;
}

/* Copy one live record of V0 into the merged files and the new index. */
static int klcCopyOne(KvLogStore *p, KlCompact *c, const KvMapEntry *pE,
                     char **pzErr){
  KlLoc loc, locNew;
  KlFile *pOut;
  int rc;
  memcpy(&loc, pE->aVal, sizeof(loc));
  rc = kl_read_frame(c->pS0, &loc, pE->aKey, pE->nKey, &c->rbuf, 0, pzErr);
  if( rc ) return rc;
  pOut = c->nOut ? c->apOut[c->nOut-1] : 0;
  if( pOut==0 || (pOut->sz+c->obuf.n>KL_HDR
                  && pOut->sz+c->obuf.n+loc.nFrame>p->cfg.szFile) ){
    rc = klcOutNext(p, c, pzErr);
    if( rc ) return rc;
    pOut = c->apOut[c->nOut-1];
  }
  locNew.iFile = pOut->iKey;
  locNew.nFrame = loc.nFrame;
  locNew.iOff = (uint64_t)(pOut->sz + c->obuf.n);
  rc = kl_buf_reserve(&c->obuf, (int64_t)c->obuf.n + loc.nFrame);
  if( rc ) return rc;
  memcpy(c->obuf.a+c->obuf.n, c->rbuf.a, loc.nFrame);
  c->obuf.n += (int)loc.nFrame;
  rc = kv_map_put(&c->pNew, pE->aKey, pE->nKey, &locNew, sizeof(locNew),
                  pE->rev, 0);
  if( rc==SQLITE_OK && c->obuf.n>=KL_OBUF ) rc = klcOutFlush(p, c, pzErr);
  return rc;
}

/* Steps 2 and 3: write and sync the merged files. */
static int klcWrite(KvLogStore *p, KlCompact *c, char **pzErr){
  KvMapCursor *pCsr = kv_map_cursor_new(c->pV0);
  int bOn, rc = SQLITE_OK, i;
  c->pNew = kv_map_new();
  if( pCsr==0 || c->pNew==0 ){
    kv_map_cursor_free(pCsr);
    return SQLITE_NOMEM;
  }
  for(bOn = kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn = kv_map_cursor_next(pCsr)){
    KvMapEntry e;
    kv_map_cursor_entry(pCsr, &e);
    if( !e.bTomb ) rc = klcCopyOne(p, c, &e, pzErr);
  }
  kv_map_cursor_free(pCsr);
  if( rc==SQLITE_OK && c->nOut>0 ){
    rc = klcOutFlush(p, c, pzErr);
    if( rc==SQLITE_OK ) rc = kl_step(p, KVLOG_STEP_OUTPUT, pzErr);
  }
  for(i=0; rc==SQLITE_OK && i<c->nOut; i++){
    rc = kl_fsync(p, c->apOut[i], pzErr);
  }
  if( rc==SQLITE_OK ) rc = kl_syncdir(p, pzErr);
  if( rc==SQLITE_OK ) rc = kl_step(p, KVLOG_STEP_OUTPUT_SYNCED, pzErr);
  return rc;
}

/* Apply delta nodes after c->pSeen up to and including pLast to pNew. */
static int klcDeltaApply(KvLogStore *p, KlCompact *c, KlDelta *pFirst,
                        KlDelta *pLast){
  KlDelta *pD = c->pSeen ? c->pSeen->pNext : pFirst;
  int rc = SQLITE_OK, i;
  (void)p;
  if( pLast==0 || pLast==c->pSeen ) return SQLITE_OK;
  for(; pD && rc==SQLITE_OK; pD=pD->pNext){
    for(i=0; i<pD->nItem && rc==SQLITE_OK; i++){
      KlDeltaItem *pI = &pD->aItem[i];
      rc = kv_map_put(&c->pNew, pI->aKey, pI->nKey, &pI->loc,
                      sizeof(pI->loc), pI->cid, pI->bTomb);
    }
    if( rc==SQLITE_OK ) c->pSeen = pD;
    if( pD==pLast ) break;
  }
  return rc;
}

/* Step 4: the delta recorded so far, off every lock. */
static int klcCatchUp(KvLogStore *p, KlCompact *c){
  KlDelta *pFirst, *pLast;
  pthread_mutex_lock(&p->muWrite);
  pFirst = p->pDeltaFirst;
  pLast = p->pDeltaLast;
  pthread_mutex_unlock(&p->muWrite);
  return klcDeltaApply(p, c, pFirst, pLast);
}

/* The file set after the swap: the merged files plus every file of the
** current set that was not merged. */
static KlSet *klcSetAfter(KvLogStore *p, KlCompact *c){
  KlSet *pCur = p->pSet;
  KlSet *pNew = kl_set_new(pCur->nFile + c->nOut);
  int i;
  if( pNew==0 ) return 0;
  for(i=0; i<pCur->nFile; i++){
    KlFile *pF = pCur->apFile[i];
    if( pF->iNum!=c->iActive && kl_set_find(c->pS0, pF->iKey)==pF ) continue;
    __atomic_add_fetch(&pF->nRef, 1, __ATOMIC_RELAXED);
    pNew->apFile[pNew->nFile++] = pF;
  }
  for(i=0; i<c->nOut; i++){
    int j = pNew->nFile++;
    __atomic_add_fetch(&c->apOut[i]->nRef, 1, __ATOMIC_RELAXED);
    while( j>0 && pNew->apFile[j-1]->iKey>c->apOut[i]->iKey ){
      pNew->apFile[j] = pNew->apFile[j-1];
      j--;
    }
    pNew->apFile[j] = c->apOut[i];
  }
  return pNew;
}

/* Publish the new index and set; doom the merged files.  muWrite held. */
static void klcSwapLocked(KvLogStore *p, KlCompact *c, KlSet *pNewSet){
  int i;
  pthread_mutex_lock(&p->mu);
  for(i=0; i<c->pS0->nFile; i++){
    KlFile *pF = c->pS0->apFile[i];
    if( pF->iNum!=c->iActive ){
      __atomic_store_n(&pF->bDoomed, 1, __ATOMIC_RELEASE);
    }
  }
  kl_set_unref(p->pSet);
  p->pSet = pNewSet;
  kv_map_unref(p->pIndex);
  p->pIndex = c->pNew;
  c->pNew = 0;
  p->cnt.nTomb = kv_map_count(p->pIndex) - p->cnt.nLive;
  p->nCompaction++;
  pthread_mutex_unlock(&p->mu);
  kl_sync_point_locked(p);
}

/* Step 6. */
static int klcSwap(KvLogStore *p, KlCompact *c, char **pzErr){
  KlSet *pNewSet = 0;
  int rc = SQLITE_OK;
  pthread_mutex_lock(&p->muWrite);
  if( p->bFailed || p->bDestroyed ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: compaction of %s abandoned: "
                                      "the store failed meanwhile", p->zDir));
    rc = SQLITE_IOERR;
  }
  if( rc==SQLITE_OK ) rc = kl_sync_locked(p, pzErr);
  if( rc==SQLITE_OK ) rc = klcDeltaApply(p, c, p->pDeltaFirst, p->pDeltaLast);
  if( rc==SQLITE_OK && (pNewSet = klcSetAfter(p, c))==0 ) rc = SQLITE_NOMEM;
  if( rc==SQLITE_OK ) klcSwapLocked(p, c, pNewSet);
  pthread_mutex_unlock(&p->muWrite);
  return rc;
}

/* Release everything the compaction holds.  Merged files that no
** MANIFEST can name are deleted.  A failure (rc, message zErr or NULL) is
** counted and its message kept for kv_stats. */
static void klcEnd(KvLogStore *p, KlCompact *c, int rc,
                         const char *zErr){
  int i;
  pthread_mutex_lock(&p->muWrite);
  p->bCompacting = 0;
  kl_delta_free(p->pDeltaFirst);
  p->pDeltaFirst = p->pDeltaLast = 0;
  pthread_mutex_unlock(&p->muWrite);
  for(i=0; i<c->nOut; i++){
    if( rc!=SQLITE_OK && !c->bRenamed ){
      __atomic_store_n(&c->apOut[i]->bDoomed, 1, __ATOMIC_RELEASE);
    }
    kl_file_unref(c->apOut[i]);
  }
  sqlite3_free(c->apOut);
  kv_map_unref(c->pV0);
  kv_map_unref(c->pNew);
  kl_set_unref(c->pS0);
  kv_logbuf_free(&c->obuf);
  kv_logbuf_free(&c->rbuf);
  pthread_mutex_lock(&p->mu);
  if( rc!=SQLITE_OK ){
    p->nCompactError++;
    sqlite3_snprintf(sizeof(p->zCompactError), p->zCompactError, "%s",
                     zErr ? zErr : sqlite3_errstr(rc));
  }
  pthread_mutex_unlock(&p->mu);
}

/* Step 5: the MANIFEST names the merged files (M = the active file at the
** start - 1). */
static int klcManifest(KvLogStore *p, KlCompact *c, char **pzErr){
  uint32_t *aList = sqlite3_malloc64(sizeof(uint32_t)*(c->nOut+1));
  int rc, i;
  if( aList==0 ) return SQLITE_NOMEM;
  for(i=0; i<c->nOut; i++) aList[i] = c->apOut[i]->iNum;
  rc = kl_manifest_write(p, c->iActive-1, c->maxCid, aList, c->nOut,
                         &c->bRenamed, pzErr);
  sqlite3_free(aList);
  return rc;
}

/* The compaction of a store one process has open (muCompact held). */
int kl_compact(KvLogStore *p, char **pzErr){
  KlCompact c;
  int bNothing = 0;
  int rc;
  memset(&c, 0, sizeof(c));
  rc = klcStart(p, &c, &bNothing, pzErr);
  if( rc==SQLITE_OK && !bNothing ){
    rc = kl_step(p, KVLOG_STEP_ROLLED, pzErr);
    if( rc==SQLITE_OK ) rc = klcWrite(p, &c, pzErr);
    if( rc==SQLITE_OK ) rc = klcCatchUp(p, &c);
    if( rc==SQLITE_OK ) rc = klcManifest(p, &c, pzErr);
    if( rc==SQLITE_OK ) rc = klcSwap(p, &c, pzErr);
    if( rc==SQLITE_OK ) kl_step(p, KVLOG_STEP_SWAPPED, 0);
  }
  if( rc==SQLITE_NOMEM ) kl_set_err(pzErr, 0);
  klcEnd(p, &c, rc, pzErr ? *pzErr : 0);
  return rc;
}

/* ------------------------------------------------ shared compaction -- */

/* Step 1, shared: no roll (the appends of other processes go on): the
** input is the index as it was when the active file A became active
** (KvLogStore.pIdxRoll), which names records of files before A alone,
** every one of them read to its end.  *pbNothing when there is none, or
** no log file before A. */
static int klcStartShared(KvLogStore *p, KlCompact *c, int *pbNothing,
                          char **pzErr){
  int rc = SQLITE_OK, i;
  *pbNothing = 1;
  pthread_mutex_lock(&p->muWrite);
  if( p->bDestroyed || p->bFailed ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: store %s %s", p->zDir,
               p->bDestroyed ? "was destroyed"
                             : "had a failed write or sync; reopen it"));
    rc = p->bDestroyed ? SQLITE_MISUSE : SQLITE_IOERR;
  }else if( p->pIdxRoll ){
    c->iActive = p->pActive->iNum;
    c->maxCid = p->cntRoll.maxCid;
    c->pV0 = kv_map_ref(p->pIdxRoll);
    pthread_mutex_lock(&p->mu);
    c->pS0 = kl_set_ref(p->pSet);
    pthread_mutex_unlock(&p->mu);
    for(i=0; i<c->pS0->nFile; i++){
      KlFile *pF = c->pS0->apFile[i];
      if( pF->eKind==KL_KIND_LOG && pF->iNum<c->iActive ) *pbNothing = 0;
    }
  }
  pthread_mutex_unlock(&p->muWrite);
  return rc;
}

/* Step 6, shared: the new index is the merged records plus every entry of
** the current one that names a log file from A on (what this process
** appended or read since A became active: later records, and the
** tombstones that hide merged ones); the new set, the merged files plus
** those log files.  The replaced files are not doomed: other processes
** may read them until they load the new MANIFEST (the caller removes them
** later, kv_logstore_compact). */
static int klcSwapShared(KvLogStore *p, KlCompact *c, char **pzErr){
  KvMapCursor *pCsr = 0;
  KlSet *pNewSet = 0;
  int rc = SQLITE_OK, bOn, i;
  pthread_mutex_lock(&p->muWrite);
  if( p->bFailed || p->bDestroyed ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: compaction of %s abandoned: "
                                      "the store failed meanwhile", p->zDir));
    rc = SQLITE_IOERR;
  }
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
    if( (loc.iFile & KL_KEY_MRG)==0 && loc.iFile>=c->iActive ){
      rc = kv_map_put(&c->pNew, e.aKey, e.nKey, &loc, sizeof(loc), e.rev,
                      e.bTomb);
    }
  }
  kv_map_cursor_free(pCsr);
  if( rc==SQLITE_OK ){
    pNewSet = kl_set_new(p->pSet->nFile + c->nOut);
    if( pNewSet==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ){
    for(i=0; i<p->pSet->nFile; i++){
      KlFile *pF = p->pSet->apFile[i];
      if( pF->eKind!=KL_KIND_LOG || pF->iNum<c->iActive ) continue;
      __atomic_add_fetch(&pF->nRef, 1, __ATOMIC_RELAXED);
      pNewSet->apFile[pNewSet->nFile++] = pF;
    }
    for(i=0; i<c->nOut; i++){             /* after the log files: iKey */
      __atomic_add_fetch(&c->apOut[i]->nRef, 1, __ATOMIC_RELAXED);
      pNewSet->apFile[pNewSet->nFile++] = c->apOut[i];
    }
    pthread_mutex_lock(&p->mu);
    kl_set_unref(p->pSet);
    p->pSet = pNewSet;
    kv_map_unref(p->pIndex);
    p->pIndex = c->pNew;
    c->pNew = 0;
    p->cnt.nTomb = kv_map_count(p->pIndex) - p->cnt.nLive;
    p->nCompaction++;
    p->iGen = c->iActive-1;
    pthread_mutex_unlock(&p->mu);
    kl_sync_point_locked(p);
    kv_map_unref(p->pIdxRoll);
    p->pIdxRoll = 0;
  }
  pthread_mutex_unlock(&p->muWrite);
  return rc;
}

int kl_compact_shared(KvLogStore *p, const uint32_t *aUsed, int nUsed,
                      int *pbCommitted, char **pzErr){
  KlCompact c;
  int bNothing = 0;
  int rc;
  memset(&c, 0, sizeof(c));
  c.bShared = 1;
  c.aUsed = aUsed;
  c.nUsed = nUsed;
  c.iNextMrg = 1;
  *pbCommitted = 0;
  rc = klcStartShared(p, &c, &bNothing, pzErr);
  if( rc==SQLITE_OK && !bNothing ){
    rc = kl_step(p, KVLOG_STEP_ROLLED, pzErr);
    if( rc==SQLITE_OK ) rc = klcWrite(p, &c, pzErr);
    if( rc==SQLITE_OK ) rc = klcManifest(p, &c, pzErr);
    *pbCommitted = c.bRenamed;
    if( rc==SQLITE_OK ) rc = klcSwapShared(p, &c, pzErr);
    if( rc==SQLITE_OK ) kl_step(p, KVLOG_STEP_SWAPPED, 0);
  }
  if( rc==SQLITE_NOMEM ) kl_set_err(pzErr, 0);
  klcEnd(p, &c, rc, pzErr ? *pzErr : 0);
  return rc;
}
