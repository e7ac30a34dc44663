/*
** engine.c -- KV stores: the process-wide registry of open stores
** (refcounted by real path), the locks that order the processes using a
** store, opening a store (alone: catalog file, then WAL replay in CID
** order, then confirmation; else joining the processes that share it)
** and closing it, sharing a store and catching up with what other
** processes committed (see "Sharing a store"), read-only opens, which
** write nothing (alone: the WAL replayed in memory; see "Read-only
** opens"), the listings of every open store (kv_engine_list, and the
** kv_stats accessors), and key rendering for messages.  The contracts are
** in kv.h.
**
** Locking: engGlobalMutex (the registry mutex) guards engList and the
** last release of every KvEngine.nRef (an atomic count: a holder takes
** or drops a further reference without the mutex), and is held across a
** whole open, so one store is never opened twice; it is taken before any
** engine mutex, never after.  The listings take each store's engine
** mutex in turn.
*/
#define _GNU_SOURCE 1            /* PTHREAD_MUTEX_ADAPTIVE_NP, where glibc */
#include "config.h"
#include "ext/kv/engine_int.h"
#include "ext/kv/kv_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Open stores, guarded by engGlobalMutex. */
static pthread_mutex_t engGlobalMutex = PTHREAD_MUTEX_INITIALIZER;
static KvEngine *engList = 0;
/* Stores whose last reference is gone and that are closing (their real
** paths; engGlobalMutex): an open of one waits on engClosedCond until its
** files and locks are released, since the close may run on another
** thread (a TTL sweep pass holding the last reference, expire.c). */
static pthread_cond_t engClosedCond = PTHREAD_COND_INITIALIZER;
static char **azEngClosing = 0;
static int nEngClosing = 0, nEngClosingAlloc = 0;

static int engClosingFind(const char *zReal){
  int i;
  for(i=0; i<nEngClosing; i++){
    if( strcmp(azEngClosing[i], zReal)==0 ) return i;
  }
  return -1;
}

#ifdef DEPOT_TEST
/* Test hooks (kv_test.h), guarded by engGlobalMutex. */
static const WalIo *engTestIo = 0;  /* kv_engine_test_io */
static WalConfig engTestWalCfg;     /* kv_engine_test_wal_config */

void kv_engine_test_io(const WalIo *pIo){
  pthread_mutex_lock(&engGlobalMutex);
  engTestIo = pIo;
  pthread_mutex_unlock(&engGlobalMutex);
}

static int engTestJoinWaitMs = 0;  /* kv_engine_test_join_wait */

void kv_engine_test_join_wait(int ms){
  __atomic_store_n(&engTestJoinWaitMs, ms, __ATOMIC_RELAXED);
}

void kv_engine_test_wal_config(int64_t szSegment, int bKeepBak){
  pthread_mutex_lock(&engGlobalMutex);
  engTestWalCfg.szSegment = szSegment;
  engTestWalCfg.bKeepBak = bKeepBak;
  pthread_mutex_unlock(&engGlobalMutex);
}
#endif /* DEPOT_TEST */

/* ------------------------------------------------------------ names --- */

/* Non-zero if a/n is NOT a usable table name (for bytes from disk). */
static int engNameBad(const uint8_t *a, int n){
  char *zErr = 0;
  int rc = kv_name_check((const char*)a, n, &zErr);
  sqlite3_free(zErr);
  return rc!=SQLITE_OK;
}

/* ---------------------------------------------------------- replay --- */

typedef struct KvReplay KvReplay;
struct KvReplay {
  KvEngine *pEng;
  int nCid, nCidAlloc;
  uint64_t *aCid;               /* records that touched the catalog */
  int nDrop, nDropAlloc;
  uint64_t *aDrop;              /* conditional records to withdraw: CID,
                                ** TID pairs */
  char *zErr;
};

/* The condition probe (kv_set_condition_probe), process-wide. */
static KvCondProbe engCondProbe = 0;

void kv_set_condition_probe(KvCondProbe xProbe){
  __atomic_store_n(&engCondProbe, xProbe, __ATOMIC_SEQ_CST);
}

/* A well-formed data key: one key encoding, or two in a row (the entries
** of a secondary index: the projected key, then the source key). */
static int engKeyOk(const uint8_t *aKey, int nKey){
  int n = kv_key_length(aKey, nKey);
  if( n<=0 || n>nKey ) return 0;
  if( n==nKey ) return kv_key_check(aKey, nKey)==SQLITE_OK;
  return kv_key_check(aKey, n)==SQLITE_OK
      && kv_key_check(aKey+n, nKey-n)==SQLITE_OK;
}

/* Build a batch map from the actions of one table of a record.  Data keys
** must be well-formed key encodings (catalog keys are table names). */
static int engReplayBatch(const WalTableActions *pT, int bMeta, KvMap **ppBatch){
  KvMap *p = kv_map_new();
  int i, rc = SQLITE_OK;
  if( p==0 ) return SQLITE_NOMEM;
  for(i=0; i<pT->nAction && rc==SQLITE_OK; i++){
    const WalAction *a = &pT->aAction[i];
    if( bMeta ? engNameBad(a->aKey, a->nKey)
              : !engKeyOk(a->aKey, a->nKey) ){
      rc = SQLITE_CORRUPT;
    }
    else rc = kv_map_put(&p, a->aKey, a->nKey, a->aVal, a->bDelete ? 0 : a->nVal,
                         0, a->bDelete);
  }
  if( rc!=SQLITE_OK ){ kv_map_unref(p); p = 0; }
  *ppBatch = p;
  return rc;
}

static int engReplayNoteCid(KvReplay *pR, uint64_t cid){
  if( pR->nCid==pR->nCidAlloc ){
    int nNew = pR->nCidAlloc ? pR->nCidAlloc*2 : 16;
    uint64_t *a = sqlite3_realloc64(pR->aCid, nNew*sizeof(uint64_t));
    if( a==0 ) return SQLITE_NOMEM;
    pR->aCid = a;
    pR->nCidAlloc = nNew;
  }
  pR->aCid[pR->nCid++] = cid;
  return SQLITE_OK;
}

/* Apply one table's actions of a replayed record. */
static int engReplayTable(KvReplay *pR, uint64_t cid, const WalTableActions *pT){
  KvEngine *pEng = pR->pEng;
  KvMap *pBatch = 0;
  int bMeta = pT->nTable==(int)strlen(KV_META_TABLE)
           && memcmp(pT->zTable, KV_META_TABLE, pT->nTable)==0;
  KvTable *pTab = bMeta ? 0 : kvTableFind(pEng, pT->zTable, pT->nTable);
  int rc;
  if( !bMeta && (pTab==0 || !pTab->meta.bPersist) ){
    /* Removed by a later record (or never persistent): nothing to do. */
    sqlite3_log(SQLITE_NOTICE, "kv: replay of record %llu skips table %.*s,"
                " which no longer exists", (unsigned long long)cid,
                pT->nTable, pT->zTable);
    return wal_confirm(pEng->pWal, cid, pT->zTable, pT->nTable);
  }
  rc = engReplayBatch(pT, bMeta, &pBatch);
  if( rc==SQLITE_OK ){
    pEng->iSeq++;
    if( bMeta ){
      rc = kvCatalogApply(pEng, pBatch, pEng->iSeq, 0, 0, &pR->zErr);
      if( rc==SQLITE_OK ) rc = engReplayNoteCid(pR, cid);
    }else{
      rc = pTab->pBackend->xApply(pTab->pData, pBatch, pEng->iSeq, cid);
      if( rc!=SQLITE_OK && pR->zErr==0 ){
        char *zWhy = kvApplyErrmsg(pTab, rc);
        pR->zErr = sqlite3_mprintf("kv: cannot replay WAL record %llu of "
            "store %s into %s", (unsigned long long)cid, pEng->zDir,
            zWhy ? zWhy : sqlite3_errstr(rc));
        sqlite3_free(zWhy);
      }
      if( rc==SQLITE_OK && pTab->pBackend->xDurable(pTab->pData, cid) ){
        rc = wal_confirm(pEng->pWal, cid, pT->zTable, pT->nTable);
      }
    }
  }
  kv_map_unref(pBatch);
  return rc;
}

/* Did the coordinator of conditional record pRec (its first table is
** KV_REC_COND) commit?  Sets *pbHeld; an error sets pR->zErr. */
static int engReplayDecide(KvReplay *pR, const WalRecord *pRec, int *pbHeld){
  const WalTableActions *pT = &pRec->aTable[0];
  KvCondProbe xProbe = __atomic_load_n(&engCondProbe, __ATOMIC_SEQ_CST);
  char *zCoord, *zErr = 0;
  int rc;
  if( pT->nAction!=1 || pT->aAction[0].nKey!=8 || pT->aAction[0].bDelete ){
    return SQLITE_CORRUPT;
  }
  zCoord = sqlite3_mprintf("%.*s", pT->aAction[0].nVal,
                           (const char*)pT->aAction[0].aVal);
  if( zCoord==0 ) return SQLITE_NOMEM;
  if( xProbe==0 ){
    zErr = sqlite3_mprintf("no coordinator probe is installed (load the "
                           "depot extension first)");
    rc = SQLITE_ERROR;
  }else{
    rc = xProbe(zCoord, (int64_t)wal_get_u64(pT->aAction[0].aKey), pRec->cid,
                pbHeld, &zErr);
  }
  if( rc!=SQLITE_OK && pR->zErr==0 ){
    pR->zErr = sqlite3_mprintf("kv: cannot replay WAL record %llu of store "
        "%s: its transaction was committed by database %s, which cannot be "
        "read: %s", (unsigned long long)pRec->cid, pR->pEng->zDir, zCoord,
        zErr ? zErr : sqlite3_errstr(rc));
  }
  sqlite3_free(zErr);
  sqlite3_free(zCoord);
  return rc;
}

/* A conditional record whose coordinator did not commit: withdrawn after
** the replay (engReplayWithdraw). */
static int engReplayNoteDrop(KvReplay *pR, uint64_t cid, uint64_t tid){
  if( pR->nDrop+2>pR->nDropAlloc ){
    int nNew = pR->nDropAlloc ? pR->nDropAlloc*2 : 16;
    uint64_t *a = sqlite3_realloc64(pR->aDrop, nNew*sizeof(uint64_t));
    if( a==0 ) return SQLITE_NOMEM;
    pR->aDrop = a;
    pR->nDropAlloc = nNew;
  }
  pR->aDrop[pR->nDrop++] = cid;
  pR->aDrop[pR->nDrop++] = tid;
  return SQLITE_OK;
}

static int engIsCondTable(const WalTableActions *pT){
  return pT->nTable==KV_REC_COND_LEN
      && memcmp(pT->zTable, KV_REC_COND, KV_REC_COND_LEN)==0;
}

static int engIsGidTable(const WalTableActions *pT){
  return pT->nTable==KV_REC_GID_LEN
      && memcmp(pT->zTable, KV_REC_GID, KV_REC_GID_LEN)==0
      && pT->nAction==1 && pT->aAction[0].nKey>0
      && pT->aAction[0].nKey<=KV_GID_MAX_BYTES && pT->aAction[0].nVal==8;
}

/* ------------------------------------------------- root children --- */

KvChild *kvRootChildNew(KvRoot *p){
  KvChild *c;
  if( p->apChild==0 ){
    p->apChild = p->aChildIn;
    p->nChildAlloc = KV_ROOT_CHILDREN;
  }
  if( p->nChild==p->nChildAlloc ){
    int nNew = p->nChildAlloc*2;
    KvChild **a = sqlite3_malloc64(nNew*sizeof(KvChild*));
    if( a==0 ) return 0;
    memcpy(a, p->apChild, p->nChild*sizeof(KvChild*));
    if( p->apChild!=p->aChildIn ) sqlite3_free(p->apChild);
    p->apChild = a;
    p->nChildAlloc = nNew;
  }
  c = p->nChild==0 ? &p->child0 : sqlite3_malloc64(sizeof(*c));
  if( c==0 ) return 0;
  memset(c, 0, sizeof(*c));
  p->apChild[p->nChild++] = c;
  return c;
}

void kvRootChildrenFree(KvRoot *p){
  int i;
  for(i=1; i<p->nChild; i++) sqlite3_free(p->apChild[i]);
  if( p->apChild!=p->aChildIn ) sqlite3_free(p->apChild);
  p->apChild = 0;
  p->nChild = p->nChildAlloc = 0;
}

/* The child of in-doubt root p on table t, made if needed. */
static int engInDoubtChild(KvRoot *p, KvTable *t, KvChild **ppChild){
  KvChild *c;
  int i;
  for(i=0; i<p->nChild; i++){
    if( p->apChild[i]->pTab==t ){ *ppChild = p->apChild[i]; return SQLITE_OK; }
  }
  if( (c = kvRootChildNew(p))==0 ) return SQLITE_NOMEM;
  c->pTab = t;
  t->nRef++;
  c->iSnap = p->pEng->iSeq;
  c->pWrite = kv_map_new();
  *ppChild = c;
  return c->pWrite ? SQLITE_OK : SQLITE_NOMEM;
}

/* The read reservations of an in-doubt record (KV_REC_READS). */
static int engInDoubtReads(KvRoot *p, const WalTableActions *pT){
  int i, rc = SQLITE_OK;
  for(i=0; i<pT->nAction && rc==SQLITE_OK; i++){
    const WalAction *a = &pT->aAction[i];
    uint32_t nName = a->nKey>=4 ? wal_get_u32(a->aKey) : 0;
    KvTable *t;
    KvChild *c = 0;
    if( a->nKey<4 || nName==0 || nName>(uint32_t)(a->nKey-4) ) return SQLITE_CORRUPT;
    t = kvTableFind(p->pEng, (const char*)a->aKey+4, (int)nName);
    if( t==0 ) continue;                      /* removed since: no reads */
    rc = engInDoubtChild(p, t, &c);
    if( rc==SQLITE_OK && c->pRead==0 && (c->pRead = kv_map_new())==0 ){
      rc = SQLITE_NOMEM;
    }
    if( rc==SQLITE_OK ){
      rc = kv_map_put(&c->pRead, a->aKey+4+nName, a->nKey-4-(int)nName,
                      0, 0, 0, 0);
    }
  }
  return rc;
}

/* A named prepared record nobody resolved: restore its root, prepared and
** in doubt, holding its reservations; nothing of it is applied. */
static int engReplayInDoubt(KvReplay *pR, const WalRecord *pRec){
  KvEngine *pEng = pR->pEng;
  const WalAction *g = &pRec->aTable[0].aAction[0];
  KvRoot *p = sqlite3_malloc64(sizeof(*p));
  int i, rc = SQLITE_OK;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pEng = pEng;
  p->bNoEngRef = 1;
  p->tid = pRec->tid;
  p->cid = pRec->cid;
  p->eState = KV_ROOT_PREPARED;
  p->eProto = KV_PROTO_ORDINARY;
  p->iPreparedMs = (int64_t)wal_get_u64(g->aVal);
  p->nGid = g->nKey;
  p->zGid = sqlite3_mprintf("%.*s", g->nKey, (const char*)g->aKey);
  kvMetricRootCreated();
  if( p->zGid==0 ) rc = SQLITE_NOMEM;
  for(i=1; i<pRec->nTable && rc==SQLITE_OK; i++){
    const WalTableActions *pT = &pRec->aTable[i];
    KvTable *t;
    KvChild *c = 0;
    KvMap *pBatch = 0;
    if( pT->nTable==KV_REC_READS_LEN
     && memcmp(pT->zTable, KV_REC_READS, KV_REC_READS_LEN)==0 ){
      rc = engInDoubtReads(p, pT);
      continue;
    }
    t = kvTableFind(pEng, pT->zTable, pT->nTable);
    if( t==0 || !t->meta.bPersist ) continue;
    rc = engInDoubtChild(p, t, &c);
    if( rc==SQLITE_OK ) rc = engReplayBatch(pT, 0, &pBatch);
    if( rc==SQLITE_OK ){
      kv_map_unref(c->pWrite);
      c->pWrite = pBatch;
    }
  }
  p->pNextPrepared = pEng->pPrepared;
  pEng->pPrepared = p;
  p->pNextInDoubt = pEng->pInDoubt;
  pEng->pInDoubt = p;
  return rc;
}

static int engIsGidDoneTable(const WalTableActions *pT);
static int engInDoubtForget(KvEngine *pEng, uint64_t cid);

static int engReplayRecord(void *pCtx, const WalRecord *pRec){
  KvReplay *pR = (KvReplay*)pCtx;
  int i = 0, rc = SQLITE_OK;
  if( pRec->tid>=pR->pEng->iNextTid ) pR->pEng->iNextTid = pRec->tid+1;
  if( pRec->nTable>0 && engIsGidDoneTable(&pRec->aTable[0]) ){
    /* a commit of a shared store's in-doubt transaction: it is decided,
    ** and its writes are this record's */
    uint64_t cidPrep = wal_get_u64(pRec->aTable[0].aAction[0].aVal);
    if( engInDoubtForget(pR->pEng, cidPrep) ){
      wal_confirm_record(pR->pEng->pWal, cidPrep);
    }
  }
  if( pRec->nTable>0 && engIsGidTable(&pRec->aTable[0]) ){
    const WalAction *g = &pRec->aTable[0].aAction[0];
    int c = kvResolvedGet(pR->pEng, (const char*)g->aKey, g->nKey, 0);
    if( c==0 ) return engReplayInDoubt(pR, pRec);
    if( c=='r' ) return engReplayNoteDrop(pR, pRec->cid, pRec->tid);
    rc = wal_confirm(pR->pEng->pWal, pRec->cid, KV_REC_GID, KV_REC_GID_LEN);
    i = 1;                            /* committed: apply it here */
  }else if( pRec->nTable>0 && engIsCondTable(&pRec->aTable[0]) ){
    int bHeld = 0;
    rc = engReplayDecide(pR, pRec, &bHeld);
    if( rc==SQLITE_OK && !bHeld ){
      sqlite3_log(SQLITE_NOTICE, "kv: WAL record %llu of store %s is "
          "discarded: the database transaction it belonged to did not "
          "commit", (unsigned long long)pRec->cid, pR->pEng->zDir);
      return engReplayNoteDrop(pR, pRec->cid, pRec->tid);
    }
    if( rc==SQLITE_OK ){
      rc = wal_confirm(pR->pEng->pWal, pRec->cid, KV_REC_COND,
                       KV_REC_COND_LEN);
    }
    i = 1;
  }
  for(; i<pRec->nTable && rc==SQLITE_OK; i++){
    const WalTableActions *pT = &pRec->aTable[i];
    if( pT->nTable>0 && pT->zTable[0]==0 ){
      /* a pseudo-table (KV_REC_*): nothing to apply */
      rc = wal_confirm(pR->pEng->pWal, pRec->cid, pT->zTable, pT->nTable);
      continue;
    }
    rc = engReplayTable(pR, pRec->cid, pT);
  }
  if( rc!=SQLITE_OK && pR->zErr==0 ){
    pR->zErr = sqlite3_mprintf("kv: cannot replay WAL record %llu of store "
        "%s: %s", (unsigned long long)pRec->cid, pR->pEng->zDir,
        sqlite3_errstr(rc));
  }
  return rc;
}

/* Replay every unconfirmed record, save the catalog if any record touched
** it, then confirm the catalog's part of those records. */
static int engReplay(KvEngine *pEng, char **pzErr){
  KvReplay r;
  int rc, i;
  memset(&r, 0, sizeof(r));
  r.pEng = pEng;
  rc = wal_replay(pEng->pWal, engReplayRecord, &r, pzErr);
  if( rc!=SQLITE_OK && r.zErr ){
    sqlite3_free(*pzErr);
    *pzErr = r.zErr;
    r.zErr = 0;
  }
  for(i=0; rc==SQLITE_OK && i<r.nDrop; i+=2){
    char *zErr = 0;
    if( wal_abort(pEng->pWal, r.aDrop[i], r.aDrop[i+1], &zErr)!=SQLITE_OK ){
      /* Not withdrawn: the next open decides it again, the same way. */
      sqlite3_log(SQLITE_WARNING, "kv: store %s: %s", pEng->zDir,
                  zErr ? zErr : "abort record not written");
      wal_confirm_record(pEng->pWal, r.aDrop[i]);
    }
    sqlite3_free(zErr);
  }
  if( rc==SQLITE_OK && r.nCid>0 ){
    rc = kvCatalogSave(pEng, pzErr);
    for(i=0; rc==SQLITE_OK && i<r.nCid; i++){
      rc = wal_confirm(pEng->pWal, r.aCid[i], KV_META_TABLE,
                       (int)strlen(KV_META_TABLE));
    }
  }
  sqlite3_free(r.zErr);
  sqlite3_free(r.aCid);
  sqlite3_free(r.aDrop);
  return rc;
}

/* ------------------------------------------------------ open / close --- */

/* The pid the holder of the store's lock wrote into LOCK (engLockStore),
** or 0 when it holds none that can be read. */
static long engLockHolder(KvEngine *pEng){
  char a[24];
  ssize_t n = pEng->fdLock>=0 ? pread(pEng->fdLock, a, sizeof(a)-1, 0) : -1;
  long iPid = 0;
  int i;
  if( n<=0 ) return 0;
  for(i=0; i<n && a[i]>='0' && a[i]<='9' && iPid<100000000; i++){
    iPid = iPid*10 + (a[i]-'0');
  }
  return iPid;
}

/* The refusal of a lock held elsewhere (naming the holder's pid when its
** LOCK file gives one), or the failure to lock. */
static int engLockBusy(KvEngine *pEng, int e, char **pzErr){
  long iPid = e==EWOULDBLOCK ? engLockHolder(pEng) : 0;
  if( e==EWOULDBLOCK && iPid>0 ){
    *pzErr = sqlite3_mprintf("kv: store %s is locked by another process "
                             "(pid %ld)", pEng->zDir, iPid);
  }else if( e==EWOULDBLOCK ){
    *pzErr = sqlite3_mprintf("kv: store %s is locked by another process",
                             pEng->zDir);
  }else{
    *pzErr = sqlite3_mprintf("kv: cannot lock store %s: %s", pEng->zDir,
                             strerror(e));
  }
  return e==EWOULDBLOCK ? SQLITE_BUSY : SQLITE_CANTOPEN;
}

/* Write this process's pid into the LOCK file it holds, for the message
** of the next process that finds the store locked.  Only a courtesy: a
** failure leaves the file as it was. */
static void engLockWritePid(KvEngine *pEng){
  char a[24];
  int n = snprintf(a, sizeof(a), "%ld\n", (long)getpid());
  ssize_t nDone = -1;
  if( ftruncate(pEng->fdLock, 0)==0 ) nDone = pwrite(pEng->fdLock, a, n, 0);
  (void)nDone;                /* no pid written: the message names none */
}

/* Every committing connection of a store takes the engine mutex a few
** times per transaction, for short stretches (bind, prepare, publish), and
** a group commit releases a whole group of them at once.  Where glibc has
** it, the mutex is adaptive: a contended lock spins briefly before it
** sleeps, which saves a futex sleep and wake-up per collision. */
static void engMutexInit(pthread_mutex_t *pMutex){
#if HAVE_DECL_PTHREAD_MUTEX_ADAPTIVE_NP
  pthread_mutexattr_t attr;
  if( pthread_mutexattr_init(&attr)==0 ){
    int rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    if( rc==0 ) rc = pthread_mutex_init(pMutex, &attr);
    pthread_mutexattr_destroy(&attr);
    if( rc==0 ) return;
  }
#endif
  pthread_mutex_init(pMutex, 0);
}

/* ------------------------------------------------ sharing a store ---
**
** Processes share a store through byte-range locks on LOCK (open file
** description locks: per open of the file, released by the kernel with
** the process) and the shared header <store>/SHARED (wal_shared):
**
**   ALIVE  every process that has the store open holds it, shared; a
**          process that can take it exclusively is alone: it opens the
**          store as before (recovery, replay) and keeps it exclusive
**          until another process asks to join.
**   WRITER the writer lock: one process at a time appends to the root
**          WAL, from the conflict check of a prepare to the publication
**          of its commit (or abort) and of the new tail in SHARED.  A
**          waiter sleeps on a futex word of SHARED that each release
**          bumps and wakes (2 ms at most: a holder that dies wakes no
**          one).
**   JOIN   a process that finds the store held takes it and waits; the
**          alone holder's join thread sees it, finishes its prepared
**          commits, lets its kv_btree collector write everything it
**          queued, makes kv_btree write through (backend xShare), turns
**          its WAL shared, publishes the tail and downgrades ALIVE and
**          the directory lock to shared: the joiner's shared ALIVE lock
**          then succeeds.
**
**   REFUSE the alone holder's answer to a joiner when it holds a table
**          that cannot be shared (a kv_memory table with persistence=1:
**          its rows live in the holder's memory; see KvBackend.xShare):
**          it writes the table's name into LOCK after its pid and holds
**          REFUSE while the joiner holds JOIN; the joiner, seeing it,
**          fails at once with SQLITE_BUSY naming the table.
**
** A store holding in-doubt prepared transactions turns shared too: they
** become the in-doubt transactions of every process (engInDoubtShare,
** engJoinInDoubt).  A shared store stays shared while this process has it
** open: its WAL segments retire only through the owner (below); named
** prepares (kv_prepare with a gid) made while it is shared are in doubt in
** every process (see "in-doubt transactions, shared"); tables are created
** and removed as ddl.c says: the catalog record commits like any other,
** other processes apply it at catch-up, and the owner deletes a removed
** table's files once every process is past the removal (engDdlReap).
**
** Catch-up (kvEngineCatchUp): before a child binds a snapshot, a read
** without a root, and the conflict check of a prepare, a process whose
** position (posSeen) is behind the published tail reads the records in
** between (wal_follow) and applies each one: one commit sequence number,
** revisions for the conflict check, changed key versions, new readers
** of the kv_btree data file, which the writer already wrote, and catalog
** changes (kvDdlFollow: tables opened in shared mode, or dropped from the
** live list).
** A writer first also reads past the tail (wal_follow_end): records a
** writer wrote and flushed but did not publish before it died, which it
** applies as replay would (a conditional one only if its coordinator
** committed, else withdrawn), writes through, and publishes.
**
** Work done once per store (kvEngineWorkTurn) goes to one process at a
** time, the holder of a lock byte taken without waiting and kept until
** the process closes the store or dies, when the kernel releases it and
** another process takes it at its next try:
**
**   OWNER  WAL retirement (and a backend's log compaction: each turn
**          tells every table whether this process holds it,
**          KvBackend.xSharedTick): the store thread of each shared
**          process tries it every ENG_BG_MS; the process that turned the
**          store shared takes it first.
**   SWEEP  TTL sweep passes: the sweeper thread of a process that has one
**          tries it before each pass (expire.c).
**   SYNC   the flush of a commit (kvEngineFlushShared): a writer lets
**          the writer lock go before it flushes its record; holding SYNC
**          (waited for in the kernel) it reads the position the last
**          flush reached (ENG_SYNC_OFF in LOCK): when that covers its
**          record it is done, else it reads the published tail, flushes
**          the segment file and publishes that tail as flushed, so every
**          record written before it shares the flush.
**   SLOT+i position slots: each shared process holds one, and publishes
**          in LOCK at ENG_POS_OFF+8*i the segment of the log it has
**          caught up to (u64, little-endian; 0 while it joins: hold all),
**          and at ENG_CID_OFF+8*i the CID of the last record it applied
**          (0 while it joins), which the deletion of removed tables'
**          files waits for (engDdlReap).
**
** The store thread of a shared process catches up every ENG_BG_MS, so
** an idle process does not hold the log back.  The owner retires
** segments (engRetire): it reads the published tail first, then every
** live slot (a slot whose byte another process holds), and takes the
** lowest segment among them; when that passed the last retirement it
** catches up (so it knows every commit up to that tail, which its writer
** wrote through before publishing it), has every table make durable what
** any process wrote through (xSharedSync: one synced commit of the
** kv_btree data file, an fsync of each kv_log file that grew), and
** removes the segments below (wal_shared_retire), holding READER
** exclusively meanwhile.  Read-only processes write nothing into LOCK,
** so they hold no slot and do none of this work: each holds READER
** (shared) only while it catches up, and one whose next segment retired
** reads the tables' files instead (see "read-only catch-up").  A joiner writes 0 in
** its slot before it reads the tail, so an owner that read the tail
** earlier never retires past what the joiner will follow from. */
#define ENG_BYTE_ALIVE    0
#define ENG_BYTE_WRITER   1
#define ENG_BYTE_JOIN     2
#define ENG_JOIN_WAIT_MS  10000      /* a joiner waits this long */
#define ENG_JOIN_POLL_MS  10         /* the join thread looks this often */
#define ENG_SHM_CID       0          /* shared header slots */
#define ENG_SHM_SEGNO     1
#define ENG_SHM_OFF       2
#define ENG_SHM_INDOUBT   7          /* lowest segment holding the record
                                     ** of an in-doubt transaction, or 0 */
#define ENG_BYTE_OWNER    3
#define ENG_BYTE_SWEEP    4
#define ENG_BYTE_SYNC     5
#define ENG_BYTE_REFUSE   6
#define ENG_BYTE_READER   7          /* read-only processes: shared */
#define ENG_BYTE_WRITABLE 8          /* every process that opened the
                                     ** store writable: shared */
#define ENG_BYTE_ROALONE  9          /* read-only processes that opened
                                     ** it with no writer: shared */
#define ENG_SYNC_OFF      4064       /* flushed position: segno, offset */
#define ENG_WORD_WRITER   0          /* SHARED word: bumped at each release
                                     ** of WRITER, a futex its waiters
                                     ** sleep on */
#define ENG_BYTE_SLOT     64         /* first of ENG_SLOTS slot bytes */
#define ENG_SLOTS         128
#define ENG_POS_OFF       4096       /* slot i: u64 at ENG_POS_OFF+8*i */
#define ENG_CID_OFF       16384      /* slot i: applied CID (engDdlReap) */
#define ENG_BG_MS         20         /* shared: the store thread's period */
#define ENG_RETIRE_MS     100        /* owner: retirement checks at most */

/* fcntl() command eCmd (F_OFD_SETLK, F_OFD_SETLKW, F_OFD_GETLK) with a
** lock of type eType on byte iByte of LOCK: fcntl's result, *pfl as it
** left it. */
static int engOfdCmd(KvEngine *pEng, int eCmd, int eType, int iByte,
                     struct flock *pfl){
  memset(pfl, 0, sizeof(*pfl));
  pfl->l_type = (short)eType;
  pfl->l_whence = SEEK_SET;
  pfl->l_start = iByte;
  pfl->l_len = 1;
  return fcntl(pEng->fdLock, eCmd, pfl);
}

/* Set (eType F_RDLCK, F_WRLCK, F_UNLCK) the lock of byte iByte of LOCK
** without waiting: 0, or the errno (EAGAIN: held elsewhere). */
static int engOfd(KvEngine *pEng, int eType, int iByte){
  struct flock fl;
  if( engOfdCmd(pEng, F_OFD_SETLK, eType, iByte, &fl)==0 ) return 0;
  return errno==EACCES ? EAGAIN : errno;
}

/* Byte iByte of LOCK shared, waiting while another open holds it
** exclusively (the owner holds READER so only while it removes
** segments): 0, or the errno of the failure. */
static int engOfdWaitShared(KvEngine *pEng, int iByte){
  struct flock fl;
  while( engOfdCmd(pEng, F_OFD_SETLKW, F_RDLCK, iByte, &fl)!=0 ){
    if( errno!=EINTR ) return errno;
  }
  return 0;
}

/* Does another open of LOCK hold (any lock on) byte iByte? */
static int engOfdHeld(KvEngine *pEng, int iByte){
  struct flock fl;
  if( engOfdCmd(pEng, F_OFD_GETLK, F_WRLCK, iByte, &fl)!=0 ) return 0;
  return fl.l_type!=F_UNLCK;
}

static int64_t engNowMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

static void engSleepMs(int ms){
  struct timespec ts;
  ts.tv_sec = ms/1000;
  ts.tv_nsec = (long)(ms%1000)*1000000L;
  nanosleep(&ts, 0);
}

/* Can table t be used by several processes? */
static int engTableShareable(KvTable *t){
  if( t->pBackend->xShare ) return 1;
  return !t->meta.bPersist;           /* kv_memory: private to a process */
}

/* The first table of the store that cannot be shared, or NULL (engine
** mutex held, or the open). */
static KvTable *engUnshareable(KvEngine *pEng){
  KvTable *t;
  for(t=pEng->pTables; t; t=t->pNext){
    if( !engTableShareable(t) ) return t;
  }
  return 0;
}

/* The alone path of engLockStore: ALIVE is held exclusively; the store
** directory is flocked too.  That second lock keeps a store locked when
** LOCK is deleted while the store is open (taken for a stale leftover):
** an opener that made a new LOCK is alone on it, but not on the
** directory.  A file system that cannot flock a directory leaves LOCK
** alone to do the job. */
static int engLockAlone(KvEngine *pEng, char **pzErr){
  pEng->fdDirLock = open(pEng->zDir, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
  if( pEng->fdDirLock>=0 && flock(pEng->fdDirLock, LOCK_EX|LOCK_NB)!=0 ){
    int e = errno;
    close(pEng->fdDirLock);
    pEng->fdDirLock = -1;
    if( e==EWOULDBLOCK ) return engLockBusy(pEng, e, pzErr);
  }
  engOfd(pEng, F_RDLCK, ENG_BYTE_WRITABLE);
  engLockWritePid(pEng);
  return SQLITE_OK;
}

/* The refusal of a joiner that the holder did not let in (within ms). */
static int engJoinRefused(KvEngine *pEng, int64_t ms, char **pzErr){
  long iPid = engLockHolder(pEng);
  char zPid[32];
  zPid[0] = 0;
  if( iPid>0 ) sqlite3_snprintf(sizeof(zPid), zPid, " (pid %ld)", iPid);
  *pzErr = sqlite3_mprintf("kv: store %s is locked by another process%s, "
      "which did not share it within %lld ms", pEng->zDir, zPid,
      (long long)ms);
  return SQLITE_BUSY;
}

/* The refusal of a joiner by a holder with a table that cannot be shared,
** whose name it wrote into LOCK after its pid (engJoinRefuse). */
static int engJoinRefusedTable(KvEngine *pEng, char **pzErr){
  char a[4200];
  ssize_t n = pread(pEng->fdLock, a, sizeof(a)-1, 0);
  long iPid = engLockHolder(pEng);
  const char *zTab = "";
  char *zNl;
  a[n>0 ? n : 0] = 0;
  if( (zNl = strchr(a, '\n'))!=0 ){
    zTab = zNl+1;
    if( (zNl = strchr(zNl+1, '\n'))!=0 ) *zNl = 0;
  }
  *pzErr = sqlite3_mprintf("kv: store %s is locked by another process "
      "(pid %ld), which holds kv_memory table %s with persistence=1, whose "
      "rows live in that process's memory: such a store is used by one "
      "process at a time (kv_btree and kv_log tables are shared)",
      pEng->zDir, iPid, zTab[0] ? zTab : "?");
  return SQLITE_BUSY;
}

/* Takes the store's locks: alone (*pbJoin 0), joining processes that
** share it (*pbJoin 1), or next to read-only processes only (*pbJoin 2:
** JOIN stays held, see "Read-only opens"). */
static int engLockStore(KvEngine *pEng, int *pbJoin, char **pzErr){
  char *zLock = sqlite3_mprintf("%s/LOCK", pEng->zDir);
  int64_t iEnd, iStart;
  int e;
  *pbJoin = 0;
  if( zLock==0 ) return SQLITE_NOMEM;
  pEng->fdLock = open(zLock, O_RDWR|O_CREAT|O_CLOEXEC, 0644);
  sqlite3_free(zLock);
  if( pEng->fdLock<0 ){
    *pzErr = sqlite3_mprintf("kv: cannot open lock file of store %s: %s",
                             pEng->zDir, strerror(errno));
    return SQLITE_CANTOPEN;
  }
  e = engOfd(pEng, F_WRLCK, ENG_BYTE_ALIVE);
  if( e==0 ) return engLockAlone(pEng, pzErr);
  if( e!=EAGAIN ) return engLockBusy(pEng, e, pzErr);
  iStart = engNowMs();
  iEnd = iStart + ENG_JOIN_WAIT_MS;
#ifdef DEPOT_TEST
  if( __atomic_load_n(&engTestJoinWaitMs, __ATOMIC_RELAXED)>0 ){
    iEnd = engNowMs() + __atomic_load_n(&engTestJoinWaitMs, __ATOMIC_RELAXED);
  }
#endif
  for(;;){
    if( engOfd(pEng, F_WRLCK, ENG_BYTE_JOIN)==0 ){
      if( engOfd(pEng, F_WRLCK, ENG_BYTE_ALIVE)==0 ){
        engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);          /* the holder left */
        return engLockAlone(pEng, pzErr);
      }
      if( engOfd(pEng, F_RDLCK, ENG_BYTE_ALIVE)==0 ){
        if( !engOfdHeld(pEng, ENG_BYTE_WRITABLE)
         && engOfdHeld(pEng, ENG_BYTE_ROALONE) ){
          *pbJoin = 2;              /* read-only processes opened alone */
        }
        engOfd(pEng, F_RDLCK, ENG_BYTE_WRITABLE);
        if( *pbJoin==0 ) engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
        break;
      }
      if( engOfdHeld(pEng, ENG_BYTE_REFUSE) ){
        int rc = engJoinRefusedTable(pEng, pzErr);
        engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
        return rc;
      }
    }
    if( engNowMs()>iEnd ){
      engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
      return engJoinRefused(pEng, engNowMs()-iStart, pzErr);
    }
    engSleepMs(2);
  }
  pEng->fdDirLock = open(pEng->zDir, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
  if( pEng->fdDirLock>=0 && flock(pEng->fdDirLock, LOCK_SH|LOCK_NB)!=0 ){
    e = errno;
    close(pEng->fdDirLock);
    pEng->fdDirLock = -1;
    if( e==EWOULDBLOCK ) return engLockBusy(pEng, e, pzErr);
  }
  if( *pbJoin==0 ) *pbJoin = 1;
  return SQLITE_OK;
}

int kvEngineWriterLock(KvEngine *pEng, int msBusy, char **pzErr){
  int64_t iEnd = engNowMs() + (msBusy>0 ? msBusy : 0);
  struct timespec ts;
  int nUs = 20, e;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += msBusy/1000;
  ts.tv_nsec += (long)(msBusy%1000)*1000000L;
  if( ts.tv_nsec>=1000000000L ){ ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  e = msBusy>0 ? pthread_mutex_timedlock(&pEng->writerMutex, &ts)
               : pthread_mutex_trylock(&pEng->writerMutex);
  while( e==0 ){
    uint32_t *pWake = pEng->pShm ? wal_shared_word(pEng->pShm, ENG_WORD_WRITER)
                                 : 0;
    uint32_t v = pWake ? __atomic_load_n(pWake, __ATOMIC_ACQUIRE) : 0;
    int eLock = engOfd(pEng, F_WRLCK, ENG_BYTE_WRITER);
    if( eLock==0 ) return SQLITE_OK;
    if( eLock!=EAGAIN || engNowMs()>=iEnd ){
      pthread_mutex_unlock(&pEng->writerMutex);
      e = eLock;
      break;
    }
    if( pWake ){
      /* Sleep until the holder lets go (kvEngineWriterUnlock bumps the
      ** word and wakes every waiter), or 2 ms at most: a holder that dies
      ** wakes nobody, but the kernel releases its lock. */
      ts.tv_sec = 0;
      ts.tv_nsec = 2000000L;
      syscall(SYS_futex, pWake, FUTEX_WAIT, v, &ts, 0, 0);
      continue;
    }
    /* Poll: a writer holds the lock for one commit, a millisecond or
    ** two; short naps hand it on quickly without spinning. */
    ts.tv_sec = 0;
    ts.tv_nsec = nUs*1000L;
    nanosleep(&ts, 0);
    if( nUs<500 ) nUs *= 2;
  }
  *pzErr = sqlite3_mprintf("kv: store %s is being written by another "
      "%s; gave up waiting for its writer lock after %d ms (the busy "
      "timeout)", pEng->zDir, e==EAGAIN ? "process" : "transaction",
      msBusy);
  return SQLITE_BUSY;
}

void kvEngineWriterUnlock(KvEngine *pEng){
  engOfd(pEng, F_UNLCK, ENG_BYTE_WRITER);
  if( pEng->pShm ){
    uint32_t *pWake = wal_shared_word(pEng->pShm, ENG_WORD_WRITER);
    __atomic_add_fetch(pWake, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, pWake, FUTEX_WAKE, INT_MAX, 0, 0, 0);
  }
  pthread_mutex_unlock(&pEng->writerMutex);
}

/* Publish tail pPos / cid in the shared header (writer lock held) and
** take it as seen (engine mutex held). */
static int engPublish(KvEngine *pEng, const WalPos *pPos, uint64_t cid,
                      char **pzErr){
  uint64_t a[WAL_SHARED_SLOTS];
  int rc;
  memset(a, 0, sizeof(a));
  a[ENG_SHM_CID] = cid;
  a[ENG_SHM_SEGNO] = pPos->segno;
  a[ENG_SHM_OFF] = pPos->iOff;
  a[ENG_SHM_INDOUBT] = kvEngineInDoubtSegment(pEng);
  rc = wal_shared_write(pEng->pShm, a);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: cannot publish the tail of store %s",
                             pEng->zDir);
    return rc;
  }
  pEng->posSeen = *pPos;
  if( cid>pEng->cidSeen ) pEng->cidSeen = cid;
  return SQLITE_OK;
}

int kvEnginePublishTail(KvEngine *pEng, char **pzErr){
  WalPos pos;
  uint64_t cid = 0;
  wal_tail(pEng->pWal, &pos, &cid);
  return engPublish(pEng, &pos, cid, pzErr);
}

void kvEngineShareWait(KvEngine *pEng){
  while( pEng->bSharing ) pthread_cond_wait(&pEng->deltaCond, &pEng->mutex);
}

/* The state of a catch-up: pass 1 collects the CIDs that abort records
** withdraw, pass 2 applies every other record. */
typedef struct KvFollow KvFollow;
struct KvFollow {
  KvEngine *pEng;
  int ePass;                    /* 1 or 2 */
  int bRecover;                 /* past the tail: a dead writer's records */
  int nAbort, nAbortAlloc;
  uint64_t *aAbort;             /* withdrawn CIDs */
  int nDrop, nDropAlloc;
  uint64_t *aDrop;              /* recovered conditional records to
                                ** withdraw: CID, TID pairs */
  uint64_t cidLast;             /* last record applied */
  int bCatalog;                 /* a record changed the catalog */
  char *zErr;
  const WalPos *pPos;           /* the segment being read (in-doubt
                                ** records) */
};

static int engFollowPush(uint64_t **pa, int *pn, int *pnAlloc, uint64_t v){
  if( *pn==*pnAlloc ){
    int nNew = *pnAlloc ? *pnAlloc*2 : 16;
    uint64_t *a = sqlite3_realloc64(*pa, nNew*sizeof(uint64_t));
    if( a==0 ) return SQLITE_NOMEM;
    *pa = a;
    *pnAlloc = nNew;
  }
  (*pa)[(*pn)++] = v;
  return SQLITE_OK;
}

static int engFollowAborted(KvFollow *f, uint64_t cid){
  int i;
  for(i=0; i<f->nAbort; i++) if( f->aAbort[i]==cid ) return 1;
  return 0;
}

/* One table's actions of another process's record, published at iSeq:
** revisions (when a child may check them), key versions, readers; a
** recovered record is also written (its writer may have died before). */
static int engFollowTable(KvFollow *f, uint64_t iSeq, uint64_t cid,
                          const WalTableActions *pT){
  KvEngine *pEng = f->pEng;
  KvTable *t;
  int i, rc = SQLITE_OK;
  if( pT->nTable>0 && pT->zTable[0]==0 ) return SQLITE_OK;  /* pseudo */
  if( pT->nTable==(int)strlen(KV_META_TABLE)
   && memcmp(pT->zTable, KV_META_TABLE, pT->nTable)==0 ){
    f->bCatalog = 1;                 /* tables created or removed: ddl.c */
    return kvDdlFollow(pEng, pT, iSeq, &f->zErr);
  }
  t = kvTableFind(pEng, pT->zTable, pT->nTable);
  if( t==0 || !t->meta.bPersist || t->pData==0 ) return SQLITE_OK;
  if( f->bRecover ){
    KvMap *pBatch = 0;
    rc = engReplayBatch(pT, 0, &pBatch);
    if( rc==SQLITE_OK ) rc = t->pBackend->xApply(t->pData, pBatch, iSeq, cid);
    if( rc!=SQLITE_OK && f->zErr==0 ){
      char *zWhy = kvApplyErrmsg(t, rc);
      f->zErr = sqlite3_mprintf("kv: cannot apply record %llu of store %s, "
          "left by a process that died: %s", (unsigned long long)cid,
          pEng->zDir, zWhy ? zWhy : sqlite3_errstr(rc));
      sqlite3_free(zWhy);
    }
    kv_map_unref(pBatch);
  }else if( t->pBackend->xRefresh ){
    t->pBackend->xRefresh(t->pData, cid);
  }
  for(i=0; rc==SQLITE_OK && i<pT->nAction; i++){
    const WalAction *a = &pT->aAction[i];
    if( t->nActive>0 ){
      if( t->pRev==0 && (t->pRev = kv_map_new())==0 ) return SQLITE_NOMEM;
      rc = kv_map_put(&t->pRev, a->aKey, a->nKey, 0, 0, iSeq, 0);
    }
    kvVersionForeign(pEng, t, a->aKey, a->nKey, a->bDelete);
  }
  return rc;
}

/* Raise pEng->iNextTid past tid (atomic: kv_root_begin takes TIDs without
** the engine mutex). */
static void engNextTidPast(KvEngine *pEng, uint64_t tid){
  uint64_t v = __atomic_load_n(&pEng->iNextTid, __ATOMIC_RELAXED);
  while( tid>=v && !__atomic_compare_exchange_n(&pEng->iNextTid, &v, tid+1,
                          0, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ){}
}

/* ------------------------------- in-doubt transactions, shared ---
**
** A named prepare in a shared store (indoubt.c) appends its record under
** the writer lock and publishes it; every other process learns it at
** catch-up (engFollowInDoubt) and keeps the transaction in doubt, with
** its reservations, as the replay of an alone open restores one.  Its
** resolution, from any process and under the writer lock, is published
** the same way: a commit as a new record holding the writes after a
** KV_REC_GID_DONE pseudo-table naming the prepared record, a rollback as
** the abort record of the prepared one; followers then forget the
** transaction (engInDoubtForget) and apply the commit record as any
** other.  Each process knows the segment of every in-doubt record it
** holds (KvRoot.segInDoubt): the lowest one is published in the shared
** header (ENG_SHM_INDOUBT), so a joiner reads the log from there to learn
** the transactions in doubt (engJoinInDoubt), and the owner never
** retires it (engRetire). */
#define ENG_WAL_SEG_HDR 48           /* where a segment's frames start */

static void engInDoubtFree(KvRoot *p);

static int engIsGidDoneTable(const WalTableActions *pT){
  return pT->nTable==KV_REC_GID_DONE_LEN
      && memcmp(pT->zTable, KV_REC_GID_DONE, KV_REC_GID_DONE_LEN)==0
      && pT->nAction==1 && pT->aAction[0].nVal==8;
}

uint64_t kvEngineInDoubtSegment(KvEngine *pEng){
  uint64_t seg = 0;
  KvRoot *p;
  for(p=pEng->pInDoubt; p; p=p->pNextInDoubt){
    if( p->cid && p->segInDoubt && (seg==0 || p->segInDoubt<seg) ){
      seg = p->segInDoubt;
    }
  }
  return seg;
}

/* Another process resolved the in-doubt transaction whose prepared record
** is cid: forget it here (engine mutex held, or the open); 1 if it was
** here.  A root this process is resolving itself (bResolving) stays. */
static int engInDoubtForget(KvEngine *pEng, uint64_t cid){
  KvRoot **pp, *p;
  for(pp=&pEng->pInDoubt; (p = *pp)!=0; pp=&p->pNextInDoubt){
    if( p->cid==cid && !p->bResolving ) break;
  }
  if( p==0 ) return 0;
  *pp = p->pNextInDoubt;
  for(pp=&pEng->pPrepared; *pp; pp=&(*pp)->pNextPrepared){
    if( *pp==p ){ *pp = p->pNextPrepared; break; }
  }
  pthread_cond_broadcast(&pEng->deltaCond);
  engInDoubtFree(p);
  return 1;
}

/* A named prepared record another process published (or a dead writer
** left): the transaction is in doubt here too, holding its reservations
** (engine mutex held, or the open). */
static int engFollowInDoubt(KvFollow *f, const WalRecord *pRec){
  KvEngine *pEng = f->pEng;
  KvReplay r;
  KvRoot *p;
  int rc;
  for(p=pEng->pInDoubt; p; p=p->pNextInDoubt){
    if( p->cid==pRec->cid ) return SQLITE_OK;          /* known already */
  }
  memset(&r, 0, sizeof(r));
  r.pEng = pEng;
  rc = engReplayInDoubt(&r, pRec);
  if( pEng->pInDoubt && pEng->pInDoubt->cid==pRec->cid ){
    pEng->pInDoubt->segInDoubt = f->pPos ? f->pPos->segno : 0;
  }
  if( rc!=SQLITE_OK && f->zErr==0 ){
    f->zErr = sqlite3_mprintf("kv: cannot take in prepared transaction "
        "'%.*s' (record %llu) of store %s: %s",
        pRec->aTable[0].aAction[0].nKey,
        (const char*)pRec->aTable[0].aAction[0].aKey,
        (unsigned long long)pRec->cid, pEng->zDir, sqlite3_errstr(rc));
  }
  return rc;
}

/* The joiner's reading of the log from the lowest in-doubt segment to
** the tail: pass 1 collects the abort records, pass 2 takes in every
** named prepared record neither withdrawn, nor committed by a later
** record, nor decided in prepared.log. */
static int engJoinScanRecord(void *pCtx, const WalRecord *pRec){
  KvFollow *f = (KvFollow*)pCtx;
  const WalTableActions *pT = pRec->nTable>0 ? &pRec->aTable[0] : 0;
  if( f->ePass==1 ){
    if( pRec->cidAborted==0 ) return SQLITE_OK;
    return engFollowPush(&f->aAbort, &f->nAbort, &f->nAbortAlloc,
                         pRec->cidAborted);
  }
  if( pRec->cidAborted || engFollowAborted(f, pRec->cid) || pT==0 ){
    return SQLITE_OK;
  }
  if( engIsGidDoneTable(pT) ){
    engInDoubtForget(f->pEng, wal_get_u64(pT->aAction[0].aVal));
  }else if( engIsGidTable(pT)
         && kvResolvedGetCid(f->pEng, (const char*)pT->aAction[0].aKey,
                             pT->aAction[0].nKey, pRec->cid)==0 ){
    return engFollowInDoubt(f, pRec);
  }
  return SQLITE_OK;
}

static int engJoinInDoubt(KvEngine *pEng, uint64_t seg, char **pzErr){
  KvFollow f;
  WalPos pos;
  int rc = SQLITE_OK;
  if( seg==0 || seg>pEng->posSeen.segno ) return SQLITE_OK;
  memset(&f, 0, sizeof(f));
  f.pEng = pEng;
  f.pPos = &pos;
  for(f.ePass=1; rc==SQLITE_OK && f.ePass<=2; f.ePass++){
    pos.segno = seg;
    pos.iOff = ENG_WAL_SEG_HDR;
    rc = wal_follow(pEng->zDir, pEng->pIo, &pos, &pEng->posSeen,
                    engJoinScanRecord, &f, pzErr);
  }
  if( rc!=SQLITE_OK && f.zErr ){
    sqlite3_free(*pzErr);
    *pzErr = f.zErr;
    f.zErr = 0;
  }
  sqlite3_free(f.zErr);
  sqlite3_free(f.aAbort);
  return rc;
}

static int engFollowRecord(void *pCtx, const WalRecord *pRec){
  KvFollow *f = (KvFollow*)pCtx;
  KvEngine *pEng = f->pEng;
  uint64_t iSeq;
  int i = 0, rc = SQLITE_OK;
  if( f->ePass==1 ){
    if( pRec->cidAborted==0 ) return SQLITE_OK;
    return engFollowPush(&f->aAbort, &f->nAbort, &f->nAbortAlloc,
                         pRec->cidAborted);
  }
  engNextTidPast(pEng, pRec->tid);
  if( pRec->cid>f->cidLast ) f->cidLast = pRec->cid;
  if( pRec->cidAborted ) engInDoubtForget(pEng, pRec->cidAborted);
  if( pRec->cidAborted || engFollowAborted(f, pRec->cid) ) return SQLITE_OK;
  if( pRec->nTable>0 && engIsGidTable(&pRec->aTable[0]) ){
    return engFollowInDoubt(f, pRec);
  }
  if( pRec->nTable>0 && engIsGidDoneTable(&pRec->aTable[0]) ){
    engInDoubtForget(pEng, wal_get_u64(pRec->aTable[0].aAction[0].aVal));
  }
  if( pRec->nTable>0 && engIsCondTable(&pRec->aTable[0]) ){
    if( f->bRecover ){
      /* Its writer died between the flush and the publication: did the
      ** coordinator's file commit?  (Published ones did: a writer that
      ** rolls back publishes the abort record with the record.) */
      KvReplay r;
      int bHeld = 0;
      memset(&r, 0, sizeof(r));
      r.pEng = pEng;
      rc = engReplayDecide(&r, pRec, &bHeld);
      if( rc!=SQLITE_OK ){
        f->zErr = r.zErr;
        return rc;
      }
      if( !bHeld ){
        rc = engFollowPush(&f->aDrop, &f->nDrop, &f->nDropAlloc, pRec->cid);
        if( rc==SQLITE_OK ){
          rc = engFollowPush(&f->aDrop, &f->nDrop, &f->nDropAlloc,
                             pRec->tid);
        }
        return rc;
      }
    }
    i = 1;
  }
  iSeq = ++pEng->iSeq;
  kvVersionSnapDrop(pEng);
  for(; i<pRec->nTable && rc==SQLITE_OK; i++){
    rc = engFollowTable(f, iSeq, pRec->cid, &pRec->aTable[i]);
  }
  return rc;
}

/* Apply the records from posSeen to pTo (NULL: to the end of the whole
** frames, recovering a dead writer's records; writer lock held). */
static int engFollow(KvEngine *pEng, const WalPos *pTo, char **pzErr){
  KvFollow f;
  WalPos pos = pEng->posSeen;
  uint64_t cidEnd = pEng->cidSeen;
  int rc, i;
  memset(&f, 0, sizeof(f));
  f.pEng = pEng;
  f.bRecover = pTo==0;
  f.pPos = &pos;
  for(f.ePass=1; f.ePass<=2; f.ePass++){
    pos = pEng->posSeen;
    if( pTo ){
      rc = wal_follow(pEng->zDir, pEng->pIo, &pos, pTo, engFollowRecord, &f,
                      pzErr);
    }else{
      rc = wal_follow_end(pEng->zDir, pEng->pIo, &pos, engFollowRecord, &f,
                          &cidEnd, pzErr);
    }
    if( rc!=SQLITE_OK ) break;
    if( pos.segno==pEng->posSeen.segno && pos.iOff==pEng->posSeen.iOff ){
      break;                     /* nothing there: no second pass */
    }
  }
  if( rc!=SQLITE_OK && f.zErr ){
    sqlite3_free(*pzErr);
    *pzErr = f.zErr;
    f.zErr = 0;
  }
  if( rc==SQLITE_OK && pTo ){
    pEng->posSeen = pos;
    if( f.cidLast>pEng->cidSeen ) pEng->cidSeen = f.cidLast;
  }else if( rc==SQLITE_OK && (pos.segno!=pEng->posSeen.segno
                              || pos.iOff!=pEng->posSeen.iOff) ){
    /* A dead writer's records: continue the log after them, withdraw the
    ** conditional ones whose coordinator did not commit, publish. */
    sqlite3_log(SQLITE_NOTICE, "kv: store %s: applied the records a "
                "process wrote before it died, up to %llu", pEng->zDir,
                (unsigned long long)cidEnd);
    rc = wal_adopt_tail(pEng->pWal, &pos, cidEnd, pzErr);
    for(i=0; rc==SQLITE_OK && i<f.nDrop; i+=2){
      rc = wal_abort(pEng->pWal, f.aDrop[i], f.aDrop[i+1], pzErr);
    }
    /* the catalog file before the tail, as the commit would have (ddl.c) */
    if( rc==SQLITE_OK && f.bCatalog ) rc = kvCatalogSaveLocked(pEng, pzErr);
    if( rc==SQLITE_OK ) rc = kvEnginePublishTail(pEng, pzErr);
  }
  sqlite3_free(f.zErr);
  sqlite3_free(f.aAbort);
  sqlite3_free(f.aDrop);
  return rc;
}

static int engRoAloneJoin(KvEngine *pEng, char **pzErr);
static void engRoAloneRelease(KvEngine *pEng);
static int engCatchUpReader(KvEngine *pEng, char **pzErr);

int kvEngineCatchUp(KvEngine *pEng, int bRecover, char **pzErr){
  uint64_t a[WAL_SHARED_SLOTS];
  WalPos tail;
  int rc;
  if( !pEng->bShared && pEng->bReadOnly ) return engRoAloneJoin(pEng, pzErr);
  if( !pEng->bShared ) return SQLITE_OK;
  if( pEng->bRoAloneHeld ) engRoAloneRelease(pEng);
  if( pEng->bReadOnly ) return engCatchUpReader(pEng, pzErr);
  rc = wal_shared_read(pEng->pShm, a);
  if( rc==SQLITE_BUSY && !bRecover ){
    *pzErr = sqlite3_mprintf("kv: the shared header of store %s is "
        "half-written (its writer died); the next writer repairs it",
        pEng->zDir);
    return SQLITE_BUSY;
  }
  if( rc==SQLITE_OK ){
    tail.segno = a[ENG_SHM_SEGNO];
    tail.iOff = a[ENG_SHM_OFF];
    if( tail.segno!=pEng->posSeen.segno || tail.iOff!=pEng->posSeen.iOff ){
      rc = engFollow(pEng, &tail, pzErr);
    }
  }else{
    rc = SQLITE_OK;                  /* recover from where this one is */
  }
  if( rc==SQLITE_OK && bRecover ) rc = engFollow(pEng, 0, pzErr);
  return rc;
}

/* ----------------------------------------- read-only catch-up ---
**
** A read-only process has no position slot: nothing tells the owner how
** far it has read, and it would hold the WAL back forever if it kept its
** segments.  So it holds READER (shared) only while it catches up: it
** takes it (waiting for an owner that holds it exclusively, for the
** moment it removes segments), reads the published tail, follows the
** records from its position, and lets READER go.  The owner retires
** segments only while it holds READER exclusively (engRetire).  A reader
** whose next segment retired meanwhile (wal_follow: SQLITE_NOTFOUND, met
** before any record is applied) rebuilds from the tables' files instead
** (engReaderRebuild): the owner made them hold every retired record
** before it removed a segment, and every writer wrote its commit there
** before it published it. */

/* The records between the position of a read-only process and the tail
** (pTail, CID cidTail) are gone: refresh every table up to that record
** (kv_btree rereads its data file, kv_log follows its log files up to
** cidTail), give every key a new version (the changed keys are unknown),
** and take the tail as seen.  Engine mutex held, READER held. */
static void engReaderRebuild(KvEngine *pEng, const WalPos *pTail,
                             uint64_t cidTail){
  KvTable *t;
  sqlite3_log(SQLITE_NOTICE, "kv: store %s: the WAL segments this "
              "read-only process had not read were retired; it reads the "
              "tables' files up to record %llu", pEng->zDir,
              (unsigned long long)cidTail);
  ++pEng->iSeq;
  kvVersionSnapDrop(pEng);
  for(t=pEng->pTables; t; t=t->pNext){
    if( t->meta.bPersist && t->pData && t->pBackend->xRefresh ){
      t->pBackend->xRefresh(t->pData, cidTail);
    }
  }
  kvVersionClearLocked(pEng);
  pEng->posSeen = *pTail;
  if( cidTail>pEng->cidSeen ) pEng->cidSeen = cidTail;
}

/* kvEngineCatchUp of a read-only process (engine mutex held). */
static int engCatchUpReader(KvEngine *pEng, char **pzErr){
  uint64_t a[WAL_SHARED_SLOTS];
  WalPos tail;
  int rc, e = engOfdWaitShared(pEng, ENG_BYTE_READER);
  if( e ){
    *pzErr = sqlite3_mprintf("kv: cannot lock store %s: %s", pEng->zDir,
                             strerror(e));
    return SQLITE_IOERR_LOCK;
  }
  rc = wal_shared_read(pEng->pShm, a);
  if( rc==SQLITE_BUSY ){
    *pzErr = sqlite3_mprintf("kv: the shared header of store %s is "
        "half-written (its writer died); the next writer repairs it",
        pEng->zDir);
  }else if( rc==SQLITE_OK ){
    tail.segno = a[ENG_SHM_SEGNO];
    tail.iOff = a[ENG_SHM_OFF];
    if( tail.segno!=pEng->posSeen.segno || tail.iOff!=pEng->posSeen.iOff ){
      rc = engFollow(pEng, &tail, pzErr);
      if( rc==SQLITE_NOTFOUND ){
        sqlite3_free(*pzErr);
        *pzErr = 0;
        engReaderRebuild(pEng, &tail, a[ENG_SHM_CID]);
        rc = SQLITE_OK;
      }
    }
  }
  engOfd(pEng, F_UNLCK, ENG_BYTE_READER);
  return rc;
}

/* The owner holds READER exclusively while it removes segments, so no
** read-only process is reading them: SQLITE_OK when it has it, else
** SQLITE_BUSY (a reader is catching up: the next check retries).  A few
** tries, a millisecond apart: readers hold it for one catch-up. */
static int engReaderExclude(KvEngine *pEng){
  int i;
  for(i=0; i<5; i++){
    if( engOfd(pEng, F_WRLCK, ENG_BYTE_READER)==0 ) return SQLITE_OK;
    engSleepMs(1);
  }
  return SQLITE_BUSY;
}

/* ------------------------------------------------ background work --- */

/* Publish segment segno as this process's position (its slot). */
static void engSlotWrite(KvEngine *pEng, uint64_t segno){
  uint8_t a[8];
  ssize_t n;
  if( pEng->iSlot<0 ) return;
  wal_put_u64(a, segno);
  n = pwrite(pEng->fdLock, a, 8, ENG_POS_OFF + 8*(off_t)pEng->iSlot);
  if( n==8 ) pEng->segSlot = segno;
}

/* The position slot i publishes (0, which holds every segment, when it
** cannot be read). */
static uint64_t engSlotRead(KvEngine *pEng, int i){
  uint8_t a[8];
  if( pread(pEng->fdLock, a, 8, ENG_POS_OFF + 8*(off_t)i)!=8 ) return 0;
  return wal_get_u64(a);
}

/* Publish cid as the position this process applied (its slot's word at
** ENG_CID_OFF: see engDdlReap). */
static void engSlotCidWrite(KvEngine *pEng, uint64_t cid){
  uint8_t a[8];
  if( pEng->iSlot<0 ) return;
  wal_put_u64(a, cid);
  if( pwrite(pEng->fdLock, a, 8, ENG_CID_OFF + 8*(off_t)pEng->iSlot)==8 ){
    pEng->cidSlot = cid;
  }
}

/* Take a free position slot and publish 0 in it (hold every segment). */
static int engSlotClaim(KvEngine *pEng, char **pzErr){
  int i;
  for(i=0; i<ENG_SLOTS; i++){
    if( engOfd(pEng, F_WRLCK, ENG_BYTE_SLOT+i)==0 ){
      pEng->iSlot = i;
      engSlotWrite(pEng, 0);
      engSlotCidWrite(pEng, 0);
      __atomic_thread_fence(__ATOMIC_SEQ_CST);
      return SQLITE_OK;
    }
  }
  *pzErr = sqlite3_mprintf("kv: store %s is shared by %d processes, the "
                           "most it takes", pEng->zDir, ENG_SLOTS);
  return SQLITE_BUSY;
}

int kvEngineWorkTurn(KvEngine *pEng, int eWork){
  int iByte = eWork==KV_WORK_SWEEP ? ENG_BYTE_SWEEP : ENG_BYTE_OWNER;
  if( pEng->bReadOnly ) return 0;     /* a read-only process writes nothing */
  if( pEng->zDir==0 || !__atomic_load_n(&pEng->bShared, __ATOMIC_RELAXED) ){
    return 1;
  }
  if( __atomic_load_n(&pEng->abWork[eWork], __ATOMIC_ACQUIRE) ) return 1;
  if( engOfd(pEng, F_WRLCK, iByte)!=0 ) return 0;
  __atomic_store_n(&pEng->abWork[eWork], 1, __ATOMIC_RELEASE);
  sqlite3_log(SQLITE_NOTICE, "kv: store %s: process %ld now runs its %s",
              pEng->zDir, (long)getpid(),
              eWork==KV_WORK_SWEEP ? "TTL sweeps" : "WAL retirement");
  return 1;
}

int kvEngineFlushShared(KvEngine *pEng, uint64_t cid, const WalPos *pEnd,
                        char **pzErr){
  uint64_t a[WAL_SHARED_SLOTS], segFlushed = 0;
  uint8_t aPos[16];
  WalPos done, tail;
  struct flock fl;
  int rc;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = ENG_BYTE_SYNC;
  fl.l_len = 1;
  pthread_mutex_lock(&pEng->syncMutex);
  while( fcntl(pEng->fdLock, F_OFD_SETLKW, &fl)!=0 ){
    if( errno!=EINTR ){            /* no lock: flush alone, share nothing */
      pthread_mutex_unlock(&pEng->syncMutex);
      return wal_sync(pEng->pWal, cid, pzErr);
    }
  }
  memset(&done, 0, sizeof(done));
  if( pread(pEng->fdLock, aPos, 16, ENG_SYNC_OFF)==16 ){
    done.segno = wal_get_u64(aPos);
    done.iOff = wal_get_u64(aPos+8);
  }
  if( done.segno==pEnd->segno && done.iOff>=pEnd->iOff ){
    rc = SQLITE_OK;                /* another process's flush covers it */
  }else{
    tail = *pEnd;
    if( wal_shared_read(pEng->pShm, a)==SQLITE_OK
     && a[ENG_SHM_SEGNO]==pEnd->segno && a[ENG_SHM_OFF]>tail.iOff ){
      tail.iOff = a[ENG_SHM_OFF];  /* written before it was published */
    }
    rc = wal_shared_flush(pEng->pWal, &segFlushed, pzErr);
    if( rc==SQLITE_OK && segFlushed==tail.segno
     && (tail.segno>done.segno
         || (tail.segno==done.segno && tail.iOff>done.iOff)) ){
      wal_put_u64(aPos, tail.segno);
      wal_put_u64(aPos+8, tail.iOff);
      if( pwrite(pEng->fdLock, aPos, 16, ENG_SYNC_OFF)!=16 ){
        /* not published: later writers flush for themselves */
      }
    }
  }
  fl.l_type = F_UNLCK;
  fcntl(pEng->fdLock, F_OFD_SETLK, &fl);
  pthread_mutex_unlock(&pEng->syncMutex);
  return rc;
}

/* The owner's retirement check: see "Sharing a store".  Store thread. */
static void engRetire(KvEngine *pEng){
  uint64_t a[WAL_SHARED_SLOTS], segMin;
  int64_t iNow = engNowMs();
  char *zErr = 0;
  KvTable *t;
  int i, rc, n = 0;
  if( iNow-pEng->iRetireMs<ENG_RETIRE_MS ) return;
  pEng->iRetireMs = iNow;
  if( wal_shared_read(pEng->pShm, a)!=SQLITE_OK ) return;
  segMin = a[ENG_SHM_SEGNO];               /* the tail first, then slots */
  if( segMin<=pEng->segRetired ) return;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  for(i=0; i<ENG_SLOTS && segMin>pEng->segRetired; i++){
    uint64_t v;
    if( i==pEng->iSlot ){
      v = pEng->segSlot;
    }else if( engOfdHeld(pEng, ENG_BYTE_SLOT+i) ){
      v = engSlotRead(pEng, i);
    }else{
      continue;
    }
    if( v<segMin ) segMin = v;
  }
  if( segMin<=pEng->segRetired ) return;
  /* Every record up to the tail read above was written through before
  ** that tail was published; the catch-up tells the tables of this
  ** process about the ones of other processes (xRefresh), then one synced
  ** commit per data file makes them all durable. */
  pthread_mutex_lock(&pEng->mutex);
  rc = pEng->rcFailed;
  for(t=pEng->pTables; rc==SQLITE_OK && t; t=t->pNext){
    if( t->meta.bPersist && t->pData && t->pBackend->xSharedSync==0 ){
      rc = SQLITE_BUSY;         /* its files never say: keep all */
    }
  }
  if( rc==SQLITE_OK ) rc = kvEngineCatchUp(pEng, 0, &zErr);
  for(t=pEng->pTables; rc==SQLITE_OK && t; t=t->pNext){
    if( t->meta.bPersist && t->pData ){
      /* a kv_log table the catch-up just opened (ddl.c): keep all */
      rc = t->pBackend->xSharedSync ? t->pBackend->xSharedSync(t->pData, &zErr)
                                    : SQLITE_BUSY;
    }
  }
  if( rc==SQLITE_OK ){
    uint64_t segKeep = kvEngineInDoubtSegment(pEng);  /* in doubt: stays */
    if( segKeep && segKeep<segMin ) segMin = segKeep;
    if( segMin<=pEng->segRetired ) rc = SQLITE_DONE;
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && (rc = engReaderExclude(pEng))==SQLITE_OK ){
    rc = wal_shared_retire(pEng->pWal, segMin, &n, &zErr);
    engOfd(pEng, F_UNLCK, ENG_BYTE_READER);
  }
  if( rc==SQLITE_OK ){
    pEng->segRetired = segMin;
  }else if( zErr ){
    sqlite3_log(rc, "kv: store %s: WAL segments not retired: %s",
                pEng->zDir, zErr);
  }
  sqlite3_free(zErr);
}

/* ------------------------------------------ removed tables' files ---
**
** The owner deletes the files of tables removed while the store is
** shared (ddl.c) once no process can read them: each process that can
** write publishes, next to its slot's segment, the CID of the last record
** it applied (u64 at ENG_CID_OFF+8*i, 0 while it joins); a set of removed
** tables waits until every live slot shows the CID the owner had applied
** when it found them gone, and no read-only process (READER) has the
** store open.  The deletion itself runs under the writer lock (taken
** without waiting: else the next turn tries again). */
static int engSlotsPast(KvEngine *pEng, uint64_t cid){
  int i;
  if( engOfdHeld(pEng, ENG_BYTE_READER) ) return 0;
  for(i=0; i<ENG_SLOTS; i++){
    uint8_t a[8];
    if( i==pEng->iSlot || !engOfdHeld(pEng, ENG_BYTE_SLOT+i) ) continue;
    if( pread(pEng->fdLock, a, 8, ENG_CID_OFF + 8*(off_t)i)!=8 ) return 0;
    if( wal_get_u64(a)<cid ) return 0;
  }
  return 1;
}

static void engDdlReap(KvEngine *pEng){
  uint64_t cidDue = 0;
  char *zErr = 0;
  int rc;
  if( !kvDdlReapDue(pEng, &cidDue) ){
    rc = kvDdlReapCollect(pEng, &zErr);
  }else if( !engSlotsPast(pEng, cidDue) ){
    rc = SQLITE_OK;
  }else if( kvEngineWriterLock(pEng, 0, &zErr)==SQLITE_OK ){
    rc = kvDdlReapRun(pEng, &zErr);
    kvEngineWriterUnlock(pEng);
  }else{
    rc = SQLITE_OK;                  /* a writer holds it: the next turn */
    sqlite3_free(zErr);
    zErr = 0;
  }
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "kv: store %s: removed tables' files: %s", pEng->zDir,
                zErr ? zErr : sqlite3_errstr(rc));
  }
  sqlite3_free(zErr);
}

/* One turn of the store thread of a shared store: catch up, publish the
** position, and do the store's work when it is this process's turn. */
static void engBackground(KvEngine *pEng){
  uint64_t segno, cid;
  char *zErr = 0;
  KvTable *t;
  int bOwner;
  pthread_mutex_lock(&pEng->mutex);
  if( !pEng->rcFailed ) kvEngineCatchUp(pEng, 0, &zErr);  /* retried */
  segno = pEng->posSeen.segno;
  cid = pEng->cidSeen;
  pthread_mutex_unlock(&pEng->mutex);
  sqlite3_free(zErr);
  if( segno!=pEng->segSlot ) engSlotWrite(pEng, segno);
  if( cid!=pEng->cidSlot ) engSlotCidWrite(pEng, cid);
  bOwner = kvEngineWorkTurn(pEng, KV_WORK_STORE);
  if( bOwner ){
    engRetire(pEng);
    engDdlReap(pEng);
  }
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; t; t=t->pNext){
    if( t->pData && t->pBackend->xSharedTick ){
      t->pBackend->xSharedTick(t->pData, bOwner);
    }
  }
  pthread_mutex_unlock(&pEng->mutex);
}

/* The first publication of a store turning shared (writer lock and
** engine mutex held): its tail, with a CID at least every CID a table's
** files hold (xMaxCid), so that every commit from now on has a CID above
** them (a kv_log table's labels are then its commits' CIDs, which its
** readers in other processes go by). */
static int engPublishShared(KvEngine *pEng, char **pzErr){
  WalPos pos;
  uint64_t cid = 0;
  KvTable *t;
  wal_tail(pEng->pWal, &pos, &cid);
  for(t=pEng->pTables; t; t=t->pNext){
    if( t->pData && t->pBackend->xMaxCid ){
      uint64_t c = t->pBackend->xMaxCid(t->pData);
      if( c>cid ) cid = c;
    }
  }
  wal_advance_cid(pEng->pWal, cid);
  return engPublish(pEng, &pos, cid, pzErr);
}

/* Is a prepared root of the store under way (engine mutex held)?  Every
** one but the in-doubt transactions, which stay prepared, and which the
** store shares. */
static int engPreparedBusy(KvEngine *pEng){
  KvRoot *p;
  for(p=pEng->pPrepared; p; p=p->pNextPrepared){
    if( p->zGid==0 || p->bResolving || p->cid==0 ) return 1;
  }
  return 0;
}

/* The in-doubt transactions of a store turning shared (engine mutex held):
** each record lies in a live segment (it is unconfirmed), whose segments
** are numbered one after the other up to the active one; the lowest is
** published, and a joiner reads from there (engJoinInDoubt). */
static void engInDoubtShare(KvEngine *pEng){
  WalStats st;
  WalPos pos;
  KvRoot *p;
  uint64_t segFirst;
  if( pEng->pInDoubt==0 ) return;
  wal_stats(pEng->pWal, &st);
  wal_tail(pEng->pWal, &pos, 0);
  segFirst = pos.segno+1>(uint64_t)st.nSegment
           ? pos.segno+1-(uint64_t)st.nSegment : 1;
  for(p=pEng->pInDoubt; p; p=p->pNextInDoubt){
    if( p->segInDoubt==0 ) p->segInDoubt = segFirst;
  }
}

/* Turn the alone store shared, for a process that asks to join: see
** "Sharing a store".  SQLITE_BUSY (nothing changed) when it holds a table
** that cannot be shared. */
static int engGoShared(KvEngine *pEng){
  uint64_t segno = 0;
  KvTable *t, **apTab = 0;
  char *zErr = 0;
  int nTab = 0, i, rc = SQLITE_OK, bWriter = 0;
  pthread_mutex_lock(&pEng->mutex);
  if( pEng->bShared || pEng->rcFailed || engUnshareable(pEng) ){
    rc = pEng->bShared ? SQLITE_OK : SQLITE_BUSY;
    pthread_mutex_unlock(&pEng->mutex);
    return rc;
  }
  pEng->bSharing = 1;
  while( engPreparedBusy(pEng) ){
    pthread_cond_wait(&pEng->deltaCond, &pEng->mutex);
  }
  engInDoubtShare(pEng);
  for(t=pEng->pTables; t; t=t->pNext) nTab++;
  apTab = sqlite3_malloc64((nTab+1)*sizeof(KvTable*));
  if( apTab==0 ){
    rc = SQLITE_NOMEM;
  }else{
    for(i=0, t=pEng->pTables; t; t=t->pNext){ t->nRef++; apTab[i++] = t; }
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK ) rc = kvCatalogSave(pEng, &zErr);
  for(i=0; rc==SQLITE_OK && i<nTab; i++){
    if( apTab[i]->pData && apTab[i]->pBackend->xShare ){
      rc = apTab[i]->pBackend->xShare(apTab[i]->pData, &zErr);
    }
  }
  if( rc==SQLITE_OK && pEng->pShm==0 ){
    rc = wal_shared_open(pEng->zDir, 0, &pEng->pShm, &zErr);
  }
  if( rc==SQLITE_OK ) rc = kvEngineWriterLock(pEng, ENG_JOIN_WAIT_MS, &zErr);
  bWriter = rc==SQLITE_OK;
  if( rc==SQLITE_OK ) wal_set_shared(pEng->pWal, 1);
  pthread_mutex_lock(&pEng->mutex);
  if( rc==SQLITE_OK ) rc = engPublishShared(pEng, &zErr);
  if( rc==SQLITE_OK ) __atomic_store_n(&pEng->bShared, 1, __ATOMIC_RELAXED);
  segno = pEng->posSeen.segno;
  pEng->bSharing = 0;
  pthread_cond_broadcast(&pEng->deltaCond);
  for(i=0; apTab && i<nTab; i++) kvTableUnref(apTab[i]);
  pthread_mutex_unlock(&pEng->mutex);
  sqlite3_free(apTab);
  if( bWriter ) kvEngineWriterUnlock(pEng);
  if( rc==SQLITE_OK ){
    char *zSlot = 0;
    if( engSlotClaim(pEng, &zSlot)==SQLITE_OK ) engSlotWrite(pEng, segno);
    sqlite3_free(zSlot);
    kvEngineWorkTurn(pEng, KV_WORK_STORE);   /* the first owner */
    if( pEng->fdDirLock>=0 ) flock(pEng->fdDirLock, LOCK_SH);
    engOfd(pEng, F_RDLCK, ENG_BYTE_ALIVE);
  }else{
    sqlite3_log(rc, "kv: store %s cannot be shared with another process: "
                "%s", pEng->zDir, zErr ? zErr : sqlite3_errstr(rc));
  }
  sqlite3_free(zErr);
  return rc;
}

/* The store thread's answer while a joiner waits (bOn) and it holds a
** table that cannot be shared: its name in LOCK, REFUSE held (see
** "Sharing a store"); *pbRefusing tracks the lock. */
static void engJoinRefuse(KvEngine *pEng, int bOn, int *pbRefusing){
  char *zLine = 0;
  if( bOn && !*pbRefusing ){
    KvTable *t;
    pthread_mutex_lock(&pEng->mutex);
    t = engUnshareable(pEng);
    if( t ) zLine = sqlite3_mprintf("%ld\n%s\n", (long)getpid(), t->zName);
    pthread_mutex_unlock(&pEng->mutex);
    if( zLine && ftruncate(pEng->fdLock, 0)==0
     && pwrite(pEng->fdLock, zLine, strlen(zLine), 0)==(ssize_t)strlen(zLine)
     && engOfd(pEng, F_WRLCK, ENG_BYTE_REFUSE)==0 ){
      *pbRefusing = 1;
    }
    sqlite3_free(zLine);
  }else if( !bOn && *pbRefusing ){
    engOfd(pEng, F_UNLCK, ENG_BYTE_REFUSE);
    *pbRefusing = 0;
  }
}

/* The store thread: while the store is open alone, it looks for a
** process asking to join (JOIN held elsewhere) and turns the store shared
** for it, or refuses it (engJoinRefuse); while shared, it runs engBackground every ENG_BG_MS.  Ends when
** the store closes. */
static void *engJoinMain(void *pArg){
  KvEngine *pEng = (KvEngine*)pArg;
  int bRefusing = 0;
  for(;;){
    struct timespec ts;
    int bStop;
    int bShared = __atomic_load_n(&pEng->bShared, __ATOMIC_RELAXED);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (bShared ? ENG_BG_MS : ENG_JOIN_POLL_MS)*1000000L;
    if( ts.tv_nsec>=1000000000L ){ ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_mutex_lock(&pEng->joinMutex);
    if( !pEng->bJoinStop ){
      pthread_cond_timedwait(&pEng->joinCond, &pEng->joinMutex, &ts);
    }
    bStop = pEng->bJoinStop;
    pthread_mutex_unlock(&pEng->joinMutex);
    if( bStop ) break;
    if( bShared ){
      engBackground(pEng);
    }else if( !engOfdHeld(pEng, ENG_BYTE_JOIN) ){
      engJoinRefuse(pEng, 0, &bRefusing);
    }else if( engGoShared(pEng)==SQLITE_OK ){
      engJoinRefuse(pEng, 0, &bRefusing);
    }else{
      engJoinRefuse(pEng, 1, &bRefusing);
    }
  }
  engJoinRefuse(pEng, 0, &bRefusing);
  return 0;
}

/* Start the store thread (engJoinMain). */
static int engThreadStart(KvEngine *pEng){
  if( pthread_create(&pEng->joinThread, 0, engJoinMain, pEng)!=0 ){
    return SQLITE_NOMEM;
  }
  pEng->bJoinThread = 1;
  return SQLITE_OK;
}

static void engJoinStop(KvEngine *pEng){
  if( !pEng->bJoinThread ) return;
  pthread_mutex_lock(&pEng->joinMutex);
  pEng->bJoinStop = 1;
  pthread_cond_broadcast(&pEng->joinCond);
  pthread_mutex_unlock(&pEng->joinMutex);
  pthread_join(pEng->joinThread, 0);
  pEng->bJoinThread = 0;
}

/* Free an in-doubt root (detached: no snapshot, not active) as the store
** closes; its WAL record stays and restores it at the next open. */
static void engInDoubtFree(KvRoot *p){
  int i;
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    kvTableUnref(c->pTab);
    kv_map_unref(c->pWrite);
    kv_map_unref(c->pRead);
  }
  kvRootChildrenFree(p);
  for(i=0; i<p->nConflict; i++) sqlite3_free((char*)p->aConflict[i].zTable);
  sqlite3_free(p->aConflict);
  sqlite3_free(p->zGid);
  sqlite3_free(p->zHeldBy);
  sqlite3_free(p->zCond);
  kvMetricRootClosed();
  sqlite3_free(p);
}

static void engFree(KvEngine *pEng){
  KvTable *p, *pNext;
  if( pEng==0 ) return;
  if( pEng->xSweepStop ) pEng->xSweepStop(pEng);  /* no TTL sweep after */
  engJoinStop(pEng);
  kvVersionStoreStop(pEng);            /* joins the version sweeper */
  if( pEng->xHookFree ) pEng->xHookFree(pEng);   /* hook.c's state */
  while( pEng->pInDoubt ){             /* they stay in the WAL */
    KvRoot *pRoot = pEng->pInDoubt;
    pEng->pInDoubt = pRoot->pNextInDoubt;
    engInDoubtFree(pRoot);
  }
  kv_map_unref(pEng->pResolved);
  /* Tables first: a backend's collector confirms its last batches to the
  ** WAL as it closes. */
  for(p=pEng->pTables; p; p=pNext){
    pNext = p->pNext;
    p->bLive = 0;
    kvTableUnref(p);
  }
  kvTableUnref(pEng->pMeta);
  kvDdlFree(pEng);
  wal_close(pEng->pWal);
  wal_shared_close(pEng->pShm);
  if( pEng->fdLock>=0 ) close(pEng->fdLock);   /* releases the locks */
  if( pEng->fdDirLock>=0 ) close(pEng->fdDirLock);
  pthread_mutex_destroy(&pEng->mutex);
  pthread_mutex_destroy(&pEng->catMutex);
  pthread_mutex_destroy(&pEng->resMutex);
  pthread_mutex_destroy(&pEng->writerMutex);
  pthread_mutex_destroy(&pEng->syncMutex);
  pthread_mutex_destroy(&pEng->joinMutex);
  pthread_cond_destroy(&pEng->joinCond);
  pthread_cond_destroy(&pEng->deltaCond);
  sqlite3_free(pEng->zFailed);
  sqlite3_free(pEng->zDir);
  sqlite3_free(pEng);
}

static int engAlloc(const char *zReal, KvEngine **pp){
  KvEngine *p = sqlite3_malloc64(sizeof(*p));
  KvMeta meta;
  char *zErr = 0;
  int rc;
  *pp = 0;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->fdLock = -1;
  p->fdDirLock = -1;
  p->iSlot = -1;
  p->nRef = 1;
  p->iSeq = 1;
  p->iNextTid = 1;
  p->iNextTableId = 1;
  engMutexInit(&p->mutex);
  pthread_mutex_init(&p->catMutex, 0);
  pthread_mutex_init(&p->resMutex, 0);
  pthread_mutex_init(&p->writerMutex, 0);
  pthread_mutex_init(&p->syncMutex, 0);
  pthread_mutex_init(&p->joinMutex, 0);
  pthread_cond_init(&p->joinCond, 0);
  pthread_cond_init(&p->deltaCond, 0);
  p->xCatchUp = kvEngineCatchUp;
  p->xWorkTurn = kvEngineWorkTurn;
  p->xFilesPinned = kvEngineFilesPinned;
#ifdef DEPOT_TEST
  p->pIo = engTestIo ? engTestIo : wal_io_posix();
#else
  p->pIo = wal_io_posix();
#endif
  if( kvVersionStoreInit(p)!=SQLITE_OK ){
    engFree(p);
    return SQLITE_NOMEM;
  }
  if( zReal && (p->zDir = sqlite3_mprintf("%s", zReal))==0 ){
    engFree(p);
    return SQLITE_NOMEM;
  }
  memset(&meta, 0, sizeof(meta));
  memcpy(meta.zType, "kv_memory", 10);
  meta.bPersist = zReal!=0;
  rc = kvTableNew(p, KV_META_TABLE, (int)strlen(KV_META_TABLE), &meta,
                  &p->pMeta, &zErr);
  if( rc==SQLITE_OK ) rc = kvTableOpenData(p->pMeta, 1, &zErr);
  sqlite3_free(zErr);
  if( rc!=SQLITE_OK ){ engFree(p); return rc; }
  *pp = p;
  return SQLITE_OK;
}

/* After the replay: every live table's backend check (xCheckOpen), and
** no CID a table's files hold is handed out again (xMaxCid). */
static int engCheckTables(KvEngine *pEng, char **pzErr){
  KvTable *p;
  int rc = SQLITE_OK;
  for(p=pEng->pTables; p && rc==SQLITE_OK; p=p->pNext){
    if( p->pData && p->pBackend->xCheckOpen ){
      rc = p->pBackend->xCheckOpen(p->pData, pzErr);
    }
    if( rc==SQLITE_OK && p->pData && p->pBackend->xMaxCid ){
      wal_advance_cid(pEng->pWal, p->pBackend->xMaxCid(p->pData));
    }
  }
  return rc;
}

/* Join a store other processes share: load the catalog and the log (in
** shared mode, changing nothing), put every table in shared mode, and
** take the published tail as seen; nothing is replayed (the processes
** that wrote the store applied it, and kv_btree wrote it through). */
static int engJoin(KvEngine *pEng, char **pzErr){
  WalConfig cfg;
  KvTable *t;
  uint64_t a[WAL_SHARED_SLOTS];
  int rc, bTail;
  /* The published tail first: the tables then hold at least what it
  ** published (a kv_log table's index is what its files hold when it
  ** opens, and later catch-ups read only the records past the tail). */
  rc = wal_shared_open(pEng->zDir, 0, &pEng->pShm, pzErr);
  if( rc==SQLITE_OK ) rc = engSlotClaim(pEng, pzErr);  /* before the tail */
  bTail = rc==SQLITE_OK && wal_shared_read(pEng->pShm, a)==SQLITE_OK;
  if( rc==SQLITE_OK ){
    pEng->bJoining = 1;
    rc = kvCatalogLoad(pEng, pzErr);
    pEng->bJoining = 0;
  }
  if( rc==SQLITE_OK && (t = engUnshareable(pEng))!=0 ){
    *pzErr = sqlite3_mprintf("kv: store %s is shared by other processes "
        "but holds table %s, which cannot be shared", pEng->zDir, t->zName);
    rc = SQLITE_BUSY;
  }
  for(t=pEng->pTables; rc==SQLITE_OK && t; t=t->pNext){
    if( t->pData && t->pBackend->xShare ){
      rc = t->pBackend->xShare(t->pData, pzErr);
    }
  }
  if( rc==SQLITE_OK ){
#ifdef DEPOT_TEST
    cfg = engTestWalCfg;          /* engGlobalMutex is held */
#else
    memset(&cfg, 0, sizeof(cfg));
#endif
    cfg.pIo = pEng->pIo;
    cfg.bShared = 1;
    rc = wal_open(pEng->zDir, &cfg, &pEng->pWal, pzErr);
  }
  if( rc==SQLITE_OK ) rc = kvResolvedLoad(pEng, pzErr);
  if( rc==SQLITE_OK && bTail ){
    pEng->posSeen.segno = a[ENG_SHM_SEGNO];
    pEng->posSeen.iOff = a[ENG_SHM_OFF];
    pEng->cidSeen = a[ENG_SHM_CID];
    rc = engJoinInDoubt(pEng, a[ENG_SHM_INDOUBT], pzErr);
  }else if( rc==SQLITE_OK ){
    /* Half-written by a writer that died publishing: under the writer
    ** lock the end of the log's whole frames is the tail. */
    rc = kvEngineWriterLock(pEng, ENG_JOIN_WAIT_MS, pzErr);
    if( rc==SQLITE_OK ){
      rc = kvEnginePublishTail(pEng, pzErr);
      kvEngineWriterUnlock(pEng);
    }
    /* the tables opened before it: they read up to it now */
    for(t=pEng->pTables; rc==SQLITE_OK && t; t=t->pNext){
      if( t->pData && t->pBackend->xRefresh ){
        t->pBackend->xRefresh(t->pData, pEng->cidSeen);
      }
    }
  }
  if( rc==SQLITE_OK ) rc = kvBackendReserveIds(pEng, pzErr);
  if( rc==SQLITE_OK ){
    WalStats st;
    wal_stats(pEng->pWal, &st);
    if( st.lastCid>=pEng->iNextTid ) pEng->iNextTid = st.lastCid+1;
    engSlotWrite(pEng, pEng->posSeen.segno);
    __atomic_store_n(&pEng->bShared, 1, __ATOMIC_RELAXED);
    rc = engThreadStart(pEng);
  }
  return rc;
}

static int engBesideReaders(KvEngine *pEng, int rc, char **pzErr);

/* Lock; alone: load the catalog, open and replay the WAL, check the
** tables, and start the join thread; else join the processes sharing it.
** Next to read-only processes only, as alone, then shared at once. */
static int engStart(KvEngine *pEng, char **pzErr){
  WalConfig cfg;
  int bJoin = 0;
  int rc = engLockStore(pEng, &bJoin, pzErr);
  if( rc==SQLITE_OK && bJoin==1 ) return engJoin(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = kvCatalogLoad(pEng, pzErr);
  if( rc==SQLITE_OK ){
#ifdef DEPOT_TEST
    cfg = engTestWalCfg;          /* engGlobalMutex is held */
#else
    memset(&cfg, 0, sizeof(cfg));  /* the defaults */
#endif
    cfg.pIo = pEng->pIo;
    rc = wal_open(pEng->zDir, &cfg, &pEng->pWal, pzErr);
  }
  if( rc==SQLITE_OK && bJoin==2 ) wal_set_shared(pEng->pWal, 1);  /* keep */
  if( rc==SQLITE_OK ) rc = kvResolvedLoad(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = engReplay(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = engCheckTables(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = kvDdlOpenAlone(pEng, pzErr);  /* removed files */
  if( rc==SQLITE_OK ) rc = kvBackendReserveIds(pEng, pzErr);
  if( rc==SQLITE_OK ) kvVersionClearAll(pEng);   /* versions: memory only */
  if( rc==SQLITE_OK ){
    WalStats st;
    wal_stats(pEng->pWal, &st);
    if( st.lastCid>=pEng->iNextTid ) pEng->iNextTid = st.lastCid+1;
  }
  if( rc==SQLITE_OK ) rc = engThreadStart(pEng);
  if( bJoin==2 ) rc = engBesideReaders(pEng, rc, pzErr);
  return rc;
}

/* ------------------------------------------------ read-only opens ---
**
** A read-only store object (kv_engine_open_readonly) creates and writes
** no file of the store, whether or not another process has it open.  It
** opens LOCK read-only and takes only read locks (OFD read locks need no
** write access): READER and ALIVE shared, and JOIN shared while it opens
** (a writer holds JOIN while it joins or recovers the store: the reader
** waits; an alone holder sees it as a request to share).  Every write is
** refused at prepare (txn.c).  A directory with neither LOCK nor wal/ is
** not a store: the open fails, creating nothing.
**
** With a writer process there (WRITABLE held: every process that opened
** the store writable holds it, shared), it joins the processes that share
** the store as a reader: the shared header mapped read-only, tables opened
** read-only (KvTableDef.bReadOnly with bShared), no WAL object (catch-up
** reads the WAL segments by name), no writer lock, no store thread; it
** sees later commits as every shared process does.
**
** With none, it opens alone (engReadOnlyAlone): it also holds ROALONE
** shared, loads the catalog, opens the tables read-only (bReadOnly
** without bShared: kv_btree reads its data file as it is, through one read
** transaction, creating no -wal or -shm), and replays every record of the
** live WAL segments in memory (engRoReplay: into a kv_btree table's
** overlay, never its file), so it reads what a writable open would.  It
** keeps that state, a consistent snapshot, until a writer process has
** the store open and shared; from its next snapshot on it follows their
** commits as a reader that joined them (engRoAloneJoin).  A writer
** process that opens the store meanwhile
** finds ALIVE and ROALONE held and WRITABLE free: it opens as if alone
** (recovery and replay, with its WAL shared from the start so that no
** segment retires, and kv_btree's data file written only through that
** file's own WAL), holding JOIN so that no process joins before it is
** done, and turns the store shared at once (engBesideReaders); a writer
** that finds only readers that joined writers (ROALONE free) joins as
** before, by the tail they published.  While ROALONE is held, no
** kv_btree checkpoint writes into the data file (kvEngineFilesPinned),
** and, READER being held, no root WAL segment retires.  A kv_log table
** whose files lack a record the WAL holds (its writer died in between)
** cannot be read that way: the open fails, asking for a writable open
** first.  Without a LOCK file (a read-only file system, a store copied
** without it) it takes no lock at all. */

#define ENG_WAL_FIRST_OFF 48       /* a segment's first frame (wal.h) */

int kvEngineFilesPinned(KvEngine *pEng){
  return pEng->zDir && pEng->fdLock>=0 && !pEng->bReadOnly
      && engOfdHeld(pEng, ENG_BYTE_ROALONE);
}

/* A writer opening next to read-only processes only (engLockStore set
** *pbJoin 2, JOIN held; rc: its alone open): the store turns shared at
** once, so that the next writer joins it, and JOIN is let go. */
static int engBesideReaders(KvEngine *pEng, int rc, char **pzErr){
  if( rc==SQLITE_OK && engGoShared(pEng)!=SQLITE_OK ){
    KvTable *t = engUnshareable(pEng);
    if( t ){
      *pzErr = sqlite3_mprintf("kv: store %s is open read-only in another "
          "process, and holds kv_memory table %s with persistence=1, whose "
          "rows live in one process's memory: such a store is written by "
          "one process at a time, with no other process reading it",
          pEng->zDir, t->zName);
    }else{
      *pzErr = sqlite3_mprintf("kv: store %s is open read-only in another "
          "process and cannot be shared yet (an unresolved prepared "
          "transaction, or a kv_btree collector that cannot write)",
          pEng->zDir);
    }
    rc = SQLITE_BUSY;
  }
  engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
  return rc;
}

/* SQLITE_OK if zDir holds a store (its LOCK file or its wal folder). */
static int engRoIsStore(KvEngine *pEng, char **pzErr){
  char *zLock = sqlite3_mprintf("%s/LOCK", pEng->zDir);
  char *zWal = sqlite3_mprintf("%s/wal", pEng->zDir);
  struct stat st;
  int rc = SQLITE_OK;
  if( zLock==0 || zWal==0 ){
    rc = SQLITE_NOMEM;
  }else if( lstat(zLock, &st)!=0
         && (stat(zWal, &st)!=0 || !S_ISDIR(st.st_mode)) ){
    *pzErr = sqlite3_mprintf("kv: %s is not a KV store (it holds neither a "
        "LOCK file nor a wal folder); a read-only open creates none",
        pEng->zDir);
    rc = SQLITE_CANTOPEN;
  }
  sqlite3_free(zLock);
  sqlite3_free(zWal);
  return rc;
}

/* Read locks only: *pbAlone 1 when no writer process has the store open
** (ALIVE then held shared, and JOIN until engReadOnlyAlone is done, or no
** LOCK file: no lock), else 0 (ALIVE shared next to a writer process, after
** asking an alone holder to share). */
static int engLockReadOnly(KvEngine *pEng, int *pbAlone, char **pzErr){
  char *zLock = sqlite3_mprintf("%s/LOCK", pEng->zDir);
  int64_t iStart = engNowMs(), iEnd = iStart + ENG_JOIN_WAIT_MS;
  int rc = SQLITE_OK, e;
  *pbAlone = 0;
  if( zLock==0 ) return SQLITE_NOMEM;
  pEng->fdLock = open(zLock, O_RDONLY|O_CLOEXEC);
  e = errno;
  sqlite3_free(zLock);
  if( pEng->fdLock<0 && e==ENOENT ){
    *pbAlone = 1;                 /* no LOCK: nothing writes the store */
    return SQLITE_OK;
  }
  if( pEng->fdLock<0 ){
    *pzErr = sqlite3_mprintf("kv: cannot open lock file of store %s "
                             "read-only: %s", pEng->zDir, strerror(e));
    return SQLITE_CANTOPEN;
  }
#ifdef DEPOT_TEST
  if( __atomic_load_n(&engTestJoinWaitMs, __ATOMIC_RELAXED)>0 ){
    iEnd = iStart + __atomic_load_n(&engTestJoinWaitMs, __ATOMIC_RELAXED);
  }
#endif
  for(;;){
    if( engOfd(pEng, F_RDLCK, ENG_BYTE_JOIN)==0 ){
      if( engOfd(pEng, F_RDLCK, ENG_BYTE_ALIVE)==0 ){
        if( !engOfdHeld(pEng, ENG_BYTE_WRITABLE) ){
          *pbAlone = 1;           /* JOIN stays held while it opens */
          return SQLITE_OK;
        }
        break;                    /* writer processes share it: in */
      }
      if( engOfdHeld(pEng, ENG_BYTE_REFUSE) ){   /* held alone: asked */
        rc = engJoinRefusedTable(pEng, pzErr);
        break;
      }
    }
    if( engNowMs()>iEnd ){
      rc = engJoinRefused(pEng, engNowMs()-iStart, pzErr);
      break;
    }
    engSleepMs(2);
  }
  engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
  return rc;
}

/* The number of the oldest segment in the store's wal folder (0: none). */
static int engRoFirstSegment(KvEngine *pEng, uint64_t *pSeg, char **pzErr){
  char *zWal = sqlite3_mprintf("%s/wal", pEng->zDir);
  DIR *d;
  struct dirent *pE;
  *pSeg = 0;
  if( zWal==0 ) return SQLITE_NOMEM;
  d = opendir(zWal);
  if( d==0 ){
    int e = errno;
    if( e!=ENOENT ){
      *pzErr = sqlite3_mprintf("kv: cannot list %s: %s", zWal, strerror(e));
    }
    sqlite3_free(zWal);
    return e==ENOENT ? SQLITE_OK : SQLITE_CANTOPEN;
  }
  while( (pE = readdir(d))!=0 ){
    const char *z = pE->d_name;
    uint64_t v = 0;
    int i;
    for(i=0; i<16 && z[i]>='0' && z[i]<='9'; i++) v = v*10 + (z[i]-'0');
    if( i==16 && strcmp(&z[16], ".log")==0 && v>0 && (*pSeg==0 || v<*pSeg) ){
      *pSeg = v;
    }
  }
  closedir(d);
  sqlite3_free(zWal);
  return SQLITE_OK;
}

/* Catalog batch pBatch of a replayed record, in memory: a removed table
** is unlinked without xDrop (its files stay as they are). */
static int engRoCatalog(KvEngine *pEng, KvMap *pBatch, char **pzErr){
  KvMapCursor *pCsr = kv_map_cursor_new(pBatch);
  KvMapEntry e;
  int bOn;
  if( pCsr==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn;
      bOn=kv_map_cursor_next(pCsr)){
    KvTable *t;
    kv_map_cursor_entry(pCsr, &e);
    if( e.bTomb && (t = kvTableFind(pEng, (const char*)e.aKey, e.nKey))!=0 ){
      kvTableUnlink(pEng, t);
    }
  }
  kv_map_cursor_free(pCsr);
  return kvCatalogApply(pEng, pBatch, pEng->iSeq, 0, 0, pzErr);
}

/* One table's actions of a replayed record, in memory. */
static int engRoTable(KvFollow *f, uint64_t cid, const WalTableActions *pT){
  KvEngine *pEng = f->pEng;
  int bMeta = pT->nTable==(int)strlen(KV_META_TABLE)
           && memcmp(pT->zTable, KV_META_TABLE, pT->nTable)==0;
  KvTable *t = 0;
  KvMap *pBatch = 0;
  int rc;
  if( pT->nTable>0 && pT->zTable[0]==0 ) return SQLITE_OK;   /* pseudo */
  if( !bMeta ){
    t = kvTableFind(pEng, pT->zTable, pT->nTable);
    if( t==0 || !t->meta.bPersist || t->pData==0 ) return SQLITE_OK;
    if( t->pBackend->bWritesAtApply ){
      /* its files hold every record they were given: the ones missing
      ** would have to be written */
      uint64_t cMax = t->pBackend->xMaxCid ? t->pBackend->xMaxCid(t->pData)
                                           : 0;
      if( cid<=cMax ) return SQLITE_OK;
      f->zErr = sqlite3_mprintf("kv: store %s cannot be read read-only: "
          "WAL record %llu is not in the files of %s table %s yet (the "
          "process that wrote it died first); open the store writable once "
          "to apply it", pEng->zDir, (unsigned long long)cid,
          t->meta.zType, t->zName);
      return SQLITE_CANTOPEN;
    }
  }
  rc = engReplayBatch(pT, bMeta, &pBatch);
  if( rc==SQLITE_OK ){
    pEng->iSeq++;
    if( bMeta ){
      rc = engRoCatalog(pEng, pBatch, &f->zErr);
    }else{
      rc = t->pBackend->xApply(t->pData, pBatch, pEng->iSeq, cid);
      if( rc!=SQLITE_OK && f->zErr==0 ){
        char *zWhy = kvApplyErrmsg(t, rc);
        f->zErr = sqlite3_mprintf("kv: cannot replay WAL record %llu of "
            "store %s into %s", (unsigned long long)cid, pEng->zDir,
            zWhy ? zWhy : sqlite3_errstr(rc));
        sqlite3_free(zWhy);
      }
    }
  }
  kv_map_unref(pBatch);
  return rc;
}

/* wal_follow_end callback of engRoReplay: pass 1 collects the withdrawn
** CIDs, pass 2 applies the other records as engReplayRecord does, in
** memory (a named prepared one only when its commit was decided, a
** conditional one only when its coordinator committed). */
static int engRoRecord(void *pCtx, const WalRecord *pRec){
  KvFollow *f = (KvFollow*)pCtx;
  KvEngine *pEng = f->pEng;
  int i = 0, rc = SQLITE_OK;
  if( f->ePass==1 ){
    if( pRec->cidAborted==0 ) return SQLITE_OK;
    return engFollowPush(&f->aAbort, &f->nAbort, &f->nAbortAlloc,
                         pRec->cidAborted);
  }
  if( pRec->cid>f->cidLast ) f->cidLast = pRec->cid;
  if( pRec->cidAborted || engFollowAborted(f, pRec->cid) ) return SQLITE_OK;
  if( pRec->nTable>0 && engIsGidTable(&pRec->aTable[0]) ){
    const WalAction *g = &pRec->aTable[0].aAction[0];
    int c = kvResolvedGet(pEng, (const char*)g->aKey, g->nKey, 0);
    if( c==0 || c=='r' ) return SQLITE_OK;     /* in doubt, rolled back */
    i = 1;
  }else if( pRec->nTable>0 && engIsCondTable(&pRec->aTable[0]) ){
    KvReplay r;
    int bHeld = 0;
    memset(&r, 0, sizeof(r));
    r.pEng = pEng;
    rc = engReplayDecide(&r, pRec, &bHeld);
    if( rc!=SQLITE_OK ){
      f->zErr = r.zErr;
      return rc;
    }
    if( !bHeld ) return SQLITE_OK;
    i = 1;
  }
  for(; i<pRec->nTable && rc==SQLITE_OK; i++){
    rc = engRoTable(f, pRec->cid, &pRec->aTable[i]);
  }
  return rc;
}

/* Replay every record of the live WAL segments in memory (see above):
** the records a writable open would replay, and those it would skip as
** already in the tables' files, which give the same state again. */
static int engRoReplay(KvEngine *pEng, char **pzErr){
  KvFollow f;
  WalPos pos;
  uint64_t segFirst = 0;
  int rc = engRoFirstSegment(pEng, &segFirst, pzErr);
  memset(&f, 0, sizeof(f));
  memset(&pos, 0, sizeof(pos));
  f.pEng = pEng;
  for(f.ePass=1; rc==SQLITE_OK && segFirst && f.ePass<=2; f.ePass++){
    pos.segno = segFirst;
    pos.iOff = ENG_WAL_FIRST_OFF;
    rc = wal_follow_end(pEng->zDir, pEng->pIo, &pos, engRoRecord, &f, 0,
                        pzErr);
  }
  if( rc!=SQLITE_OK && f.zErr ){
    sqlite3_free(*pzErr);
    *pzErr = f.zErr;
    f.zErr = 0;
  }
  if( rc==SQLITE_OK ){
    pEng->posSeen = pos;
    pEng->cidSeen = f.cidLast;
  }
  sqlite3_free(f.zErr);
  sqlite3_free(f.aAbort);
  sqlite3_free(f.aDrop);
  return rc;
}

/* An alone read-only store (engine mutex held, before a snapshot): once a
** writer process has the store open and shared (WRITABLE held, JOIN free),
** it joins it as engStartReadOnly would have: the shared header, the
** tables in shared mode, the records from where its replay ended to the
** published tail followed, then every table refreshed (kv_btree drops
** what the replay put in its overlay, which that writer's recovery wrote
** into the data file, and reads the file through ordinary read-only
** connections from then on); ROALONE is let go once no transaction bound
** before is left (engRoAloneRelease).  Until then it reads its snapshot.
** One lock test per call while alone. */
static int engRoAloneJoin(KvEngine *pEng, char **pzErr){
  uint64_t a[WAL_SHARED_SLOTS];
  WalPos tail;
  KvTable *t;
  int rc = SQLITE_OK;
  if( pEng->fdLock<0 || pEng->zDir==0
   || !engOfdHeld(pEng, ENG_BYTE_WRITABLE) ){
    return SQLITE_OK;
  }
  if( engOfd(pEng, F_RDLCK, ENG_BYTE_JOIN)!=0 ) return SQLITE_OK;  /* later */
  if( pEng->pShm==0 ) rc = wal_shared_open(pEng->zDir, 1, &pEng->pShm, pzErr);
  if( rc==SQLITE_OK && wal_shared_read(pEng->pShm, a)!=SQLITE_OK ){
    engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
    return SQLITE_OK;                /* half-written: the next call */
  }
  if( rc==SQLITE_OK && pEng->posSeen.segno==0 ){
    /* the WAL had no segment at the open: all there is now is new */
    uint64_t seg = 0;
    rc = engRoFirstSegment(pEng, &seg, pzErr);
    pEng->posSeen.segno = seg;
    pEng->posSeen.iOff = ENG_WAL_FIRST_OFF;
  }
  for(t=pEng->pTables; rc==SQLITE_OK && t; t=t->pNext){
    if( t->pData && t->pBackend->xShare ){
      rc = t->pBackend->xShare(t->pData, pzErr);
    }
  }
  if( rc==SQLITE_OK ){
    tail.segno = a[ENG_SHM_SEGNO];
    tail.iOff = a[ENG_SHM_OFF];
    if( pEng->posSeen.segno && (tail.segno!=pEng->posSeen.segno
                                || tail.iOff!=pEng->posSeen.iOff) ){
      rc = engFollow(pEng, &tail, pzErr);
    }
  }
  if( rc==SQLITE_OK ){
    if( a[ENG_SHM_CID]>pEng->cidSeen ) pEng->cidSeen = a[ENG_SHM_CID];
    for(t=pEng->pTables; t; t=t->pNext){
      if( t->pData && t->pBackend->xRefresh ){
        t->pBackend->xRefresh(t->pData, pEng->cidSeen);
      }
    }
    kvVersionSnapDrop(pEng);
    __atomic_store_n(&pEng->bShared, 1, __ATOMIC_RELAXED);
    engRoAloneRelease(pEng);
  }
  engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
  return rc;
}

/* A read-only store that joined writers after it opened alone lets
** ROALONE go once no transaction is bound to any table (engine mutex
** held): one bound before may still read the kv_btree data file through
** the connection that ignores its WAL, which a checkpoint would change
** under it. */
static void engRoAloneRelease(KvEngine *pEng){
  KvTable *t;
  for(t=pEng->pTables; t; t=t->pNext){
    if( t->nActive>0 ) return;
  }
  engOfd(pEng, F_UNLCK, ENG_BYTE_ROALONE);
  pEng->bRoAloneHeld = 0;
}

/* Open alone (see above): READER and ROALONE shared (with a LOCK file),
** the catalog, the tables read-only, the WAL replayed in memory; then
** JOIN is let go. */
static int engReadOnlyAlone(KvEngine *pEng, char **pzErr){
  KvTable *t;
  int rc = SQLITE_OK, e = 0;
  if( pEng->fdLock>=0 ){
    e = engOfdWaitShared(pEng, ENG_BYTE_READER);
    if( e==0 ) e = engOfd(pEng, F_RDLCK, ENG_BYTE_ROALONE);
    pEng->bRoAloneHeld = e==0;
    if( e ){
      *pzErr = sqlite3_mprintf("kv: cannot lock store %s: %s", pEng->zDir,
                               strerror(e));
      rc = SQLITE_CANTOPEN;
    }
  }
  if( rc==SQLITE_OK ) rc = kvCatalogLoad(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = kvResolvedLoad(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = engRoReplay(pEng, pzErr);
  for(t=pEng->pTables; rc==SQLITE_OK && t; t=t->pNext){
    if( t->pData && t->pBackend->xCheckOpen ){
      rc = t->pBackend->xCheckOpen(t->pData, pzErr);
    }
  }
  if( pEng->fdLock>=0 ) engOfd(pEng, F_UNLCK, ENG_BYTE_JOIN);
  return rc;
}

/* Alone (see above), or join as a reader: the catalog and the tables
** (read-only, shared), the shared header (read-only) and its tail as
** seen. */
static int engStartReadOnly(KvEngine *pEng, char **pzErr){
  KvTable *t;
  uint64_t a[WAL_SHARED_SLOTS];
  int e, bAlone = 0;
  int rc = engRoIsStore(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = engLockReadOnly(pEng, &bAlone, pzErr);
  if( rc==SQLITE_OK && bAlone ) return engReadOnlyAlone(pEng, pzErr);
  /* READER before the tail (the segments from it on stay), then the
  ** published tail, as engJoin reads it. */
  if( rc==SQLITE_OK && (e = engOfdWaitShared(pEng, ENG_BYTE_READER))!=0 ){
    *pzErr = sqlite3_mprintf("kv: cannot lock store %s: %s", pEng->zDir,
                             strerror(e));
    rc = SQLITE_CANTOPEN;
  }
  if( rc==SQLITE_OK ) rc = wal_shared_open(pEng->zDir, 1, &pEng->pShm, pzErr);
  if( rc==SQLITE_OK && wal_shared_read(pEng->pShm, a)!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: the shared header of store %s is "
        "half-written (its writer died); the next writer repairs it",
        pEng->zDir);
    rc = SQLITE_BUSY;
  }
  if( rc==SQLITE_OK ){
    pEng->bJoining = 1;
    rc = kvCatalogLoad(pEng, pzErr);
    pEng->bJoining = 0;
  }
  for(t=pEng->pTables; rc==SQLITE_OK && t; t=t->pNext){
    if( !engTableShareable(t) ){
      *pzErr = sqlite3_mprintf("kv: store %s holds table %s, which cannot "
          "be shared", pEng->zDir, t->zName);
      rc = SQLITE_BUSY;
    }else if( t->pData && t->pBackend->xShare ){
      rc = t->pBackend->xShare(t->pData, pzErr);
    }
  }
  if( rc==SQLITE_OK ){
    pEng->posSeen.segno = a[ENG_SHM_SEGNO];
    pEng->posSeen.iOff = a[ENG_SHM_OFF];
    pEng->cidSeen = a[ENG_SHM_CID];
    rc = engJoinInDoubt(pEng, a[ENG_SHM_INDOUBT], pzErr);
  }
  if( rc==SQLITE_OK ){
    __atomic_store_n(&pEng->bShared, 1, __ATOMIC_RELAXED);
  }
  if( pEng->fdLock>=0 ) engOfd(pEng, F_UNLCK, ENG_BYTE_READER);  /* held
                                ** again at each catch-up */
  return rc;
}

/* The real path of an existing store directory (sqlite3_malloc'd). */
static int engRealDirReadOnly(const char *zDir, char **pzReal, char **pzErr){
  char *zBuf = sqlite3_malloc64(PATH_MAX+1);
  *pzReal = 0;
  if( zBuf==0 ) return SQLITE_NOMEM;
  if( realpath(zDir, zBuf)==0 ){
    *pzErr = sqlite3_mprintf("kv: cannot open store directory %s "
                             "read-only: %s", zDir, strerror(errno));
    sqlite3_free(zBuf);
    return SQLITE_CANTOPEN;
  }
  *pzReal = zBuf;
  return SQLITE_OK;
}

/* mkdir zDir if missing and return its real path (sqlite3_malloc'd). */
static int engRealDir(const char *zDir, char **pzReal, char **pzErr){
  char *zBuf = sqlite3_malloc64(PATH_MAX+1);
  *pzReal = 0;
  if( zBuf==0 ) return SQLITE_NOMEM;
  if( mkdir(zDir, 0755)!=0 && errno!=EEXIST ){
    *pzErr = sqlite3_mprintf("kv: cannot create store directory %s: %s",
                             zDir, strerror(errno));
    sqlite3_free(zBuf);
    return SQLITE_CANTOPEN;
  }
  if( realpath(zDir, zBuf)==0 ){
    *pzErr = sqlite3_mprintf("kv: cannot resolve store directory %s: %s",
                             zDir, strerror(errno));
    sqlite3_free(zBuf);
    return SQLITE_CANTOPEN;
  }
  *pzReal = zBuf;
  return SQLITE_OK;
}

/* kv_engine_open (bReadOnly 0) and kv_engine_open_readonly (1): one
** store object per directory and mode in the process. */
static int engOpen(const char *zDir, int bReadOnly, KvEngine **ppEng,
                   char **pzErr){
  char *zReal = 0;
  KvEngine *p = 0;
  int rc = SQLITE_OK;
  *ppEng = 0;
  if( zDir && bReadOnly ) rc = engRealDirReadOnly(zDir, &zReal, pzErr);
  else if( zDir ) rc = engRealDir(zDir, &zReal, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&engGlobalMutex);
  while( zReal && engClosingFind(zReal)>=0 ){
    pthread_cond_wait(&engClosedCond, &engGlobalMutex);
  }
  /* A read-only open reads through a read-write store object of the
  ** process when there is one. */
  for(p=zReal ? engList : 0; p; p=p->pNextEngine){
    if( p->zDir && strcmp(p->zDir, zReal)==0
     && (p->bReadOnly==bReadOnly || bReadOnly) ){
      break;
    }
  }
  if( p ){
    __atomic_add_fetch(&p->nRef, 1, __ATOMIC_RELAXED);
  }else{
    rc = engAlloc(zReal, &p);
    if( rc==SQLITE_OK && zReal && bReadOnly ){
      p->bReadOnly = 1;
      rc = engStartReadOnly(p, pzErr);
    }else if( rc==SQLITE_OK && zReal ){
      rc = engStart(p, pzErr);
    }
    if( rc==SQLITE_OK ){
      p->pNextEngine = engList;
      engList = p;
    }else{
      engFree(p);
      p = 0;
    }
  }
  pthread_mutex_unlock(&engGlobalMutex);
  sqlite3_free(zReal);
  *ppEng = p;
  return rc;
}

int kv_engine_open(const char *zDir, KvEngine **ppEng, char **pzErr){
  return engOpen(zDir, 0, ppEng, pzErr);
}

int kv_engine_open_readonly(const char *zDir, KvEngine **ppEng,
                            char **pzErr){
  return engOpen(zDir, 1, ppEng, pzErr);
}

uint64_t kv_engine_replay_floor(KvEngine *p){
  WalStats st;
  if( p==0 || p->pWal==0 ) return 0;
  wal_stats(p->pWal, &st);
  return st.firstCid;
}

int kv_engine_wal_config(KvEngine *p, WalConfig *pCfg){
  memset(pCfg, 0, sizeof(*pCfg));
  if( p==0 || p->pWal==0 ) return 0;
  wal_get_config(p->pWal, pCfg);
  return 1;
}

int kv_engine_set_wal_config(KvEngine *p, const WalConfig *pCfg){
  if( p==0 || p->pWal==0 ) return 0;
  wal_set_config(p->pWal, pCfg);
  return 1;
}

int kvEngineTryRef(KvEngine *p){
  int bOk;
  pthread_mutex_lock(&engGlobalMutex);
  bOk = __atomic_load_n(&p->nRef, __ATOMIC_RELAXED)>0;
  if( bOk ) __atomic_add_fetch(&p->nRef, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&engGlobalMutex);
  return bOk;
}

/* The caller holds a reference, so the count cannot reach 0 meanwhile:
** no registry mutex is needed. */
KvEngine *kv_engine_ref(KvEngine *p){
  __atomic_add_fetch(&p->nRef, 1, __ATOMIC_RELAXED);
  return p;
}

/* The last engine of the process to close also closes the codec's private
** connection (kv_codec_release): it serves the key descriptions of
** conflict messages, and is opened again when next needed. */
void kv_engine_unref(KvEngine *p){
  KvEngine **pp;
  int bFree = 0, bLast = 0;
  char *zClosing = 0;
  int n;
  if( p==0 ) return;
  /* Not the last reference: drop it without the registry mutex.  The last
  ** one is dropped under the mutex, so an open that finds the engine in
  ** the list (under the mutex) either refs it before or never sees it. */
  n = __atomic_load_n(&p->nRef, __ATOMIC_RELAXED);
  while( n>1 ){
    if( __atomic_compare_exchange_n(&p->nRef, &n, n-1, 1, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED) ){
      return;
    }
  }
  pthread_mutex_lock(&engGlobalMutex);
  if( __atomic_sub_fetch(&p->nRef, 1, __ATOMIC_ACQ_REL)==0 ){
    for(pp=&engList; *pp; pp=&(*pp)->pNextEngine){
      if( *pp==p ){ *pp = p->pNextEngine; break; }
    }
    bFree = 1;
    bLast = engList==0;
    if( p->zDir ){
      /* without memory to note it, a reopen meanwhile may see the
      ** store's lock still held, and say so */
      if( nEngClosing==nEngClosingAlloc ){
        int nNew = nEngClosingAlloc ? nEngClosingAlloc*2 : 4;
        char **aNew = sqlite3_realloc64(azEngClosing, nNew*sizeof(char*));
        if( aNew ){ azEngClosing = aNew; nEngClosingAlloc = nNew; }
      }
      if( nEngClosing<nEngClosingAlloc
       && (zClosing = sqlite3_mprintf("%s", p->zDir))!=0 ){
        azEngClosing[nEngClosing++] = zClosing;
      }
    }
  }
  pthread_mutex_unlock(&engGlobalMutex);
  if( bFree ) engFree(p);
  if( zClosing ){
    int i;
    pthread_mutex_lock(&engGlobalMutex);
    for(i=0; i<nEngClosing && azEngClosing[i]!=zClosing; i++){}
    if( i<nEngClosing ) azEngClosing[i] = azEngClosing[--nEngClosing];
    if( nEngClosing==0 ){
      sqlite3_free(azEngClosing);
      azEngClosing = 0;
      nEngClosingAlloc = 0;
    }
    pthread_cond_broadcast(&engClosedCond);
    pthread_mutex_unlock(&engGlobalMutex);
    sqlite3_free(zClosing);
  }
  if( bLast ) kv_codec_release();
}

const char *kv_engine_dir(KvEngine *p){
  return p->zDir;
}

int kv_engine_shared(KvEngine *p){
  return p ? __atomic_load_n(&p->bShared, __ATOMIC_RELAXED) : 0;
}

/* ---------------------------------------------------------- listing --- */

int kv_engine_foreach(int (*xEach)(KvEngine*, void*), void *pCtx){
  KvEngine *p, **apEng;
  int nEng = 0, i, rc = SQLITE_OK;
  pthread_mutex_lock(&engGlobalMutex);
  for(p=engList; p; p=p->pNextEngine) nEng++;
  apEng = sqlite3_malloc64((nEng+1)*sizeof(KvEngine*));
  if( apEng ){
    for(i=0, p=engList; p; p=p->pNextEngine){
      __atomic_add_fetch(&p->nRef, 1, __ATOMIC_RELAXED);
      apEng[i++] = p;
    }
  }
  pthread_mutex_unlock(&engGlobalMutex);
  if( apEng==0 ) return SQLITE_NOMEM;
  for(i=0; i<nEng; i++){
    if( rc==SQLITE_OK ) rc = xEach(apEng[i], pCtx);
    kv_engine_unref(apEng[i]);
  }
  sqlite3_free(apEng);
  return rc;
}

int kv_engine_wal_stats(KvEngine *p, WalStats *pSt){
  memset(pSt, 0, sizeof(*pSt));
  if( p->pWal==0 ) return 0;
  wal_stats(p->pWal, pSt);
  return 1;
}

int kv_engine_table_stats(KvEngine *pEng, int bCount,
                          int (*xTable)(void*, const char*, const char*,
                                        const KvBackendStats*),
                          void *pCtx){
  KvTable **apTab, *t;
  int nTab = 0, i, rc = SQLITE_OK;
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; t; t=t->pNext) nTab++;
  apTab = sqlite3_malloc64((nTab+1)*sizeof(KvTable*));
  if( apTab ){
    for(i=0, t=pEng->pTables; t; t=t->pNext){ t->nRef++; apTab[i++] = t; }
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( apTab==0 ) return SQLITE_NOMEM;
  for(i=nTab-1; i>=0 && rc==SQLITE_OK; i--){    /* the list is newest first */
    KvBackendStats st;
    t = apTab[i];
    memset(&st, 0, sizeof(st));
    if( t->pData && t->pBackend->xStatsEx ){
      t->pBackend->xStatsEx(t->pData, bCount, &st);
    }else if( t->pData ){
      pthread_mutex_lock(&pEng->mutex);
      t->pBackend->xStats(t->pData, &st.nRow, &st.nByte);
      pthread_mutex_unlock(&pEng->mutex);
    }
    st.nSweepPass = __atomic_load_n(&t->nSweepPass, __ATOMIC_RELAXED);
    st.nSwept = __atomic_load_n(&t->nSwept, __ATOMIC_RELAXED);
    rc = xTable(pCtx, t->zName, t->meta.zType, &st);
  }
  pthread_mutex_lock(&pEng->mutex);
  for(i=0; i<nTab; i++) kvTableUnref(apTab[i]);
  pthread_mutex_unlock(&pEng->mutex);
  sqlite3_free(apTab);
  return rc;
}

static int engListOne(KvEngine *pEng, KvTableInfo **pa, int *pn, int *pnAlloc){
  KvTable *t;
  int64_t nByte;
  int rc = SQLITE_OK;
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; t && rc==SQLITE_OK; t=t->pNext){
    KvTableInfo *pI;
    if( *pn==*pnAlloc ){
      int nNew = *pnAlloc ? *pnAlloc*2 : 16;
      KvTableInfo *a = sqlite3_realloc64(*pa, nNew*sizeof(KvTableInfo));
      if( a==0 ){ rc = SQLITE_NOMEM; break; }
      *pa = a; *pnAlloc = nNew;
    }
    pI = &(*pa)[*pn];
    memset(pI, 0, sizeof(*pI));
    (*pn)++;
    pI->zName = sqlite3_mprintf("%s", t->zName);
    pI->nName = t->nName;
    memcpy(pI->zType, t->meta.zType, sizeof(pI->zType));
    pI->bPersist = t->meta.bPersist;
    if( pEng->zDir ) pI->zDir = sqlite3_mprintf("%s", pEng->zDir);
    t->pBackend->xStats(t->pData, &pI->nRow, &nByte);
    kvVersionTableStats(t, &pI->nVerRecord, &pI->nVerBytes);
    if( pI->zName==0 || (pEng->zDir && pI->zDir==0) ) rc = SQLITE_NOMEM;
  }
  pthread_mutex_unlock(&pEng->mutex);
  return rc;
}

int kv_engine_list(KvTableInfo **paInfo, int *pnInfo){
  KvEngine *p;
  int nAlloc = 0, rc = SQLITE_OK;
  *paInfo = 0;
  *pnInfo = 0;
  pthread_mutex_lock(&engGlobalMutex);
  for(p=engList; p && rc==SQLITE_OK; p=p->pNextEngine){
    rc = engListOne(p, paInfo, pnInfo, &nAlloc);
  }
  pthread_mutex_unlock(&engGlobalMutex);
  if( rc!=SQLITE_OK ){
    kv_engine_list_free(*paInfo, *pnInfo);
    *paInfo = 0;
    *pnInfo = 0;
  }
  return rc;
}

void kv_engine_list_free(KvTableInfo *a, int n){
  int i;
  for(i=0; i<n; i++){
    sqlite3_free(a[i].zName);
    sqlite3_free(a[i].zDir);
  }
  sqlite3_free(a);
}

/* ----------------------------------------------------- key display --- */

/* Text t (n bytes) cut to at most 64 bytes on a UTF-8 character boundary,
** quoted as an SQL literal; a cut is marked with "... (n bytes)". */
static char *engDescribeText(const unsigned char *t, int n){
  int m = n;
  if( n>64 ){
    m = 64;
    while( m>0 && (t[m]&0xc0)==0x80 ) m--;   /* t[m] starts a character */
    return sqlite3_mprintf("'%.*q'... (%d bytes)", m, t, n);
  }
  return sqlite3_mprintf("'%.*q'", m, t);
}

/* Blob a (n bytes) as x'..' of at most its first 32 bytes; a cut is marked
** with "... (n bytes)". */
static char *engDescribeBlob(const unsigned char *a, int n){
  char *z = sqlite3_mprintf("x'");
  int i;
  for(i=0; z && i<n && i<32; i++) z = sqlite3_mprintf("%z%02x", z, a[i]);
  if( z && n>32 ) return sqlite3_mprintf("%z'... (%d bytes)", z, n);
  if( z ) z = sqlite3_mprintf("%z'", z);
  return z;
}

char *kv_key_describe(const uint8_t *aKey, int nKey){
  int rc = SQLITE_OK;
  sqlite3_value *v = kv_key_to_value(aKey, nKey, 0, 0, &rc);
  char *z = 0;
  if( v==0 ) return sqlite3_mprintf("<%d-byte key>", nKey);
  switch( sqlite3_value_type(v) ){
    case SQLITE_INTEGER:
      z = sqlite3_mprintf("%lld", sqlite3_value_int64(v)); break;
    case SQLITE_FLOAT:
      z = sqlite3_mprintf("%!.15g", sqlite3_value_double(v)); break;
    case SQLITE_TEXT:
      z = engDescribeText(sqlite3_value_text(v), sqlite3_value_bytes(v));
      break;
    default:
      z = engDescribeBlob(sqlite3_value_blob(v), sqlite3_value_bytes(v));
      break;
  }
  sqlite3_value_free(v);
  return z;
}
