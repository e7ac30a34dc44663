/*
** txn.c -- root transactions of the KV engine: binding children to
** tables, point reads and writes, create/remove table, the conflict check
** and reservations of prepare, WAL logging, publication at commit,
** rollback and savepoints.  The rules are in kv.h.
**
** Locking: a root is used by one thread at a time and needs no lock of
** its own; binding, the conflict check with its reservations, and the
** publication run under the engine mutex; the WAL append and flush of a
** prepare, and the abort record of a rollback, run without it, so
** concurrent committers share a group commit.  A commit hands its
** published writes to the write hooks (hook.c) under the engine mutex
** and waits for their delivery after releasing it.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "ext/kv/kv_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int txnIsPending(const KvTable *t){
  return t->pData==0 && !t->bLive;
}

const char *kv_root_who(const KvRoot *p){
  return p->iHandle>0 ? "transaction handle" : "transaction";
}

unsigned long long kv_root_who_id(const KvRoot *p){
  return p->iHandle>0 ? (unsigned long long)p->iHandle
                      : (unsigned long long)p->tid;
}

static int txnRootUsable(KvRoot *p, char **pzErr){
  if( p->eState==KV_ROOT_ACTIVE ) return kvEngineFailed(p->pEng, pzErr);
  *pzErr = sqlite3_mprintf("kv: %s %llu is %s",
      kv_root_who(p), kv_root_who_id(p),
      p->eState==KV_ROOT_PREPARED ? "prepared and takes no more operations"
      : p->eState==KV_ROOT_FAILED ? "failed and was rolled back"
      : "finished");
  return SQLITE_MISUSE;
}

int kv_root_begin(KvEngine *pEng, KvRoot **pp){
  return kv_root_begin_spare(pEng, 0, pp);
}

int kv_root_begin_spare(KvEngine *pEng, KvRoot **ppSpare, KvRoot **pp){
  KvRoot *p;
  if( ppSpare && *ppSpare ){
    p = *ppSpare;
    *ppSpare = 0;
  }else{
    p = sqlite3_malloc64(sizeof(*p));
  }
  *pp = 0;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pEng = kv_engine_ref(pEng);
  p->tid = __atomic_fetch_add(&pEng->iNextTid, 1, __ATOMIC_RELAXED);
  p->msBusy = KV_BUSY_DEFAULT_MS;
  kvMetricRootCreated();
  *pp = p;
  return SQLITE_OK;
}

KvEngine *kv_root_engine(KvRoot *p){ return p->pEng; }
int kv_root_state(KvRoot *p){ return p->eState; }
uint64_t kv_root_tid(KvRoot *p){ return p->tid; }
uint64_t kv_root_cid(KvRoot *p){ return p->cid; }

int kv_root_set_condition(KvRoot *p, const char *zCoord, int64_t iMarker){
  char *z = 0;
  if( p->eState!=KV_ROOT_ACTIVE ) return SQLITE_MISUSE;
  if( zCoord ){
    if( strlen(zCoord)>KV_COND_MAX_BYTES ) return SQLITE_TOOBIG;
    if( (z = sqlite3_mprintf("%s", zCoord))==0 ) return SQLITE_NOMEM;
  }
  sqlite3_free(p->zCond);
  p->zCond = z;
  p->iMarker = z ? iMarker : 0;
  return SQLITE_OK;
}
void kv_root_set_handle(KvRoot *p, int64_t iHandle){ p->iHandle = iHandle; }
void kv_root_set_sync(KvRoot *p, int eSync){ p->eSync = eSync; }
void kv_root_set_busy_timeout(KvRoot *p, int ms){ p->msBusy = ms>0 ? ms : 0; }
void kv_root_set_origin(KvRoot *p, int eOrigin){ p->eOrigin = eOrigin; }
int kv_root_origin(KvRoot *p){ return p->eOrigin; }
int kv_root_protocol_get(KvRoot *p){ return p->eProto; }

int kv_root_protocol(KvRoot *p, int eProto, char **pzErr){
  if( p->eProto==KV_PROTO_NONE || p->eProto==eProto ){
    p->eProto = eProto;
    return SQLITE_OK;
  }
  *pzErr = sqlite3_mprintf("kv: %s %llu uses the %s protocol; "
      "ordinary (kv_get, kv_prepare, kv_commit) and versioned "
      "(kv_prepare_with_version, kv_commit_with_version) calls cannot be "
      "mixed in one transaction", kv_root_who(p), kv_root_who_id(p),
      p->eProto==KV_PROTO_ORDINARY ? "ordinary" : "versioned");
  return SQLITE_MISUSE;
}

/* ----------------------------------------------------------- children --- */

static int txnChildAdd(KvRoot *p, KvTable *pTab, uint64_t iSnap,
                      KvBackendSnap *pSnap, KvChild **ppChild){
  KvMap *pWrite = kv_map_new();
  KvChild *c = pWrite ? kvRootChildNew(p) : 0;
  if( c==0 ){ kv_map_unref(pWrite); return SQLITE_NOMEM; }
  c->pTab = pTab;
  c->iSnap = iSnap;
  c->pSnap = pSnap;
  c->pWrite = pWrite;
  *ppChild = c;
  return SQLITE_OK;
}

/* Count child c as active on table t, at the end of t's active list (so
** the list stays in bind order: the version sweeper keeps the records the
** oldest of them may need).  Engine mutex held. */
static void txnActiveLink(KvTable *t, KvChild *c){
  c->bActive = 1;
  c->iBindMs = kvVersionBindStamp(t->pEng);
  c->pActPrev = t->pActLast;
  c->pActNext = 0;
  if( t->pActLast ) t->pActLast->pActNext = c; else t->pActFirst = c;
  t->pActLast = c;
  t->nActive++;
}

/* Undo txnActiveLink; true when no child is active on t any more. */
static int txnActiveUnlink(KvTable *t, KvChild *c){
  if( c->pActPrev ) c->pActPrev->pActNext = c->pActNext;
  else t->pActFirst = c->pActNext;
  if( c->pActNext ) c->pActNext->pActPrev = c->pActPrev;
  else t->pActLast = c->pActPrev;
  c->bActive = 0;
  return --t->nActive==0;
}

/* Bind a new child to live table pTab: reference, snapshot, activity.
** bLazy (a write binds it): the snapshot waits for the first read, so a
** transaction that only writes pins no version of the table, and other
** commits can update it in place.  Engine mutex held. */
static int txnBindLive(KvRoot *p, KvTable *pTab, int bSchema, int bLazy,
                      KvChild **ppChild){
  KvEngine *pEng = p->pEng;
  KvBackendSnap *pSnap = 0;
  int rc = bLazy ? SQLITE_OK : pTab->pBackend->xSnapshot(pTab->pData, &pSnap);
  if( rc==SQLITE_OK ) rc = txnChildAdd(p, pTab, pEng->iSeq, pSnap, ppChild);
  if( rc!=SQLITE_OK ){
    if( pSnap ) pTab->pBackend->xSnapshotFree(pSnap);
    return rc;
  }
  pTab->nRef++;
  (*ppChild)->bSchema = bSchema;
  if( !bSchema ) txnActiveLink(pTab, *ppChild);
  (*ppChild)->bSnapLater = bLazy;
  return SQLITE_OK;
}

/* Take the snapshot child c put off at bind (bSnapLater).  A child that
** has neither written nor registered a read yet simply moves its snapshot
** point to now; one that wrote keeps iSnap, so its writes are still
** checked from the point it bound, and reads of keys committed since then
** conflict at commit.  A table removed since the bind (and perhaps
** recreated: a new KvTable then) is an error: the transaction could not
** commit anyway.  Engine mutex held. */
int kvChildSnapLocked(KvRoot *p, KvChild *c, char **pzErr){
  int rc;
  if( !c->bSnapLater ) return SQLITE_OK;
  rc = kvEngineCatchUp(p->pEng, 0, pzErr);   /* a shared store */
  if( rc!=SQLITE_OK ) return rc;
  if( !c->pTab->bLive ){
    *pzErr = sqlite3_mprintf("kv: table %s was removed or recreated by a "
        "concurrent transaction; roll back and retry", c->pTab->zName);
    return SQLITE_BUSY_SNAPSHOT;
  }
  rc = c->pTab->pBackend->xSnapshot(c->pTab->pData, &c->pSnap);
  if( rc!=SQLITE_OK ) return rc;
  c->bSnapLater = 0;
  if( kv_map_count(c->pWrite)==0 && c->pRead==0 && !c->bWatch ){
    c->iSnap = p->pEng->iSeq;
  }
  return SQLITE_OK;
}

static int txnChildSnap(KvRoot *p, KvChild *c, char **pzErr){
  int rc;
  if( !c->bSnapLater ) return SQLITE_OK;
  pthread_mutex_lock(&p->pEng->mutex);
  rc = kvChildSnapLocked(p, c, pzErr);
  pthread_mutex_unlock(&p->pEng->mutex);
  return rc;
}

static int txnSchemaChild(KvRoot *p, KvChild **ppChild){
  int rc = SQLITE_OK;
  if( p->pSchema==0 ){
    char *zErr = 0;
    pthread_mutex_lock(&p->pEng->mutex);
    kvEngineCatchUp(p->pEng, 0, &zErr);      /* a shared store; retried */
    sqlite3_free(zErr);
    rc = txnBindLive(p, p->pEng->pMeta, 1, 0, &p->pSchema);
    pthread_mutex_unlock(&p->pEng->mutex);
  }
  *ppChild = p->pSchema;
  return rc;
}

/* What the root's own catalog writes say about zTab: 0 nothing, 1 created
** (*ppNew is its pending table), 2 removed. */
static int txnOwnSchema(KvRoot *p, const char *zTab, int nTab, KvTable **ppNew){
  KvMapEntry e;
  int i;
  *ppNew = 0;
  if( p->pSchema==0 || !kv_map_get(p->pSchema->pWrite, zTab, nTab, &e) ){
    return 0;
  }
  if( e.bTomb ) return 2;
  for(i=0; i<p->nNew; i++){
    if( p->apNew[i]->nName==nTab && memcmp(p->apNew[i]->zName, zTab, nTab)==0 ){
      *ppNew = p->apNew[i];
    }
  }
  return 1;
}

static int txnNoSuchTable(KvRoot *p, const char *zTab, int nTab, char **pzErr){
  const char *zDir = p->pEng->zDir;
  *pzErr = sqlite3_mprintf("kv: no such table: %.*s (store %s)", nTab, zTab,
                           zDir ? zDir : "in memory");
  return SQLITE_ERROR;
}

/* Find or make the root's child for data table zTab (bWrite: for a write,
** which puts its snapshot off until the first read). */
static int txnBind(KvRoot *p, const char *zTab, int nTab, int bWrite,
                  KvChild **ppChild, char **pzErr){
  KvTable *pNew = 0, *pTab;
  int i, eOwn, rc;
  *ppChild = 0;
  if( (rc = txnRootUsable(p, pzErr))!=SQLITE_OK ) return rc;
  if( p->bRemove ){
    *pzErr = sqlite3_mprintf("kv: remove_table must be alone in its "
                             "transaction");
    return SQLITE_MISUSE;
  }
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( !c->bSchema && c->pTab->nName==nTab
     && memcmp(c->pTab->zName, zTab, nTab)==0 ){
      if( txnIsPending(c->pTab) && txnOwnSchema(p, zTab, nTab, &pNew)!=1 ){
        return txnNoSuchTable(p, zTab, nTab, pzErr);
      }
      *ppChild = c;
      return SQLITE_OK;
    }
  }
  if( (rc = kv_name_check(zTab, nTab, pzErr))!=SQLITE_OK ) return rc;
  eOwn = txnOwnSchema(p, zTab, nTab, &pNew);
  if( eOwn==2 ) return txnNoSuchTable(p, zTab, nTab, pzErr);
  pthread_mutex_lock(&p->pEng->mutex);
  rc = kvEngineCatchUp(p->pEng, 0, pzErr);    /* a shared store */
  if( rc!=SQLITE_OK ){
    /* nothing bound */
  }else if( eOwn==1 && pNew ){
    rc = txnChildAdd(p, pNew, p->pEng->iSeq, 0, ppChild);
    if( rc==SQLITE_OK ) pNew->nRef++;
  }else if( (pTab = kvTableFind(p->pEng, zTab, nTab))!=0 ){
    rc = txnBindLive(p, pTab, 0, bWrite, ppChild);
    if( rc!=SQLITE_OK ) kvSnapshotError(rc, zTab, nTab, pzErr);
  }else{
    rc = SQLITE_NOTFOUND;
  }
  pthread_mutex_unlock(&p->pEng->mutex);
  if( rc==SQLITE_NOTFOUND ) return txnNoSuchTable(p, zTab, nTab, pzErr);
  return rc;
}

/* ------------------------------------------------------ reads, writes --- */

static int txnCopyOut(KvBuf *pVal, const KvMapEntry *e){
  kv_buf_reset(pVal);
  return kv_buf_append(pVal, e->aVal, e->nVal);
}

/* Point read of the committed side: a failure gets the backend's message
** (e.g. the damaged log file and offset) or a generic one. */
static int txnSnapGet(KvTable *t, KvBackendSnap *pSnap, const uint8_t *aKey,
                     int nKey, int *pbFound, KvMapEntry *pE, char **pzErr){
  int rc = t->pBackend->xGet(pSnap, aKey, nKey, pbFound, pE);
  if( rc!=SQLITE_OK && *pzErr==0 ){
    if( t->pBackend->xGetError ) t->pBackend->xGetError(pSnap, pzErr);
    if( *pzErr==0 ){
      *pzErr = sqlite3_mprintf("kv: read of table %s failed: %s", t->zName,
                               sqlite3_errstr(rc));
    }
  }
  return rc;
}

/* Add key aKey to the read set of child c (its conflict check); a key
** already there is left as it is, without an allocation. */
static int txnReadNote(KvChild *c, const uint8_t *aKey, int nKey){
  if( c->pRead==0 && (c->pRead = kv_map_new())==0 ) return SQLITE_NOMEM;
  if( kv_map_get(c->pRead, aKey, nKey, 0) ) return SQLITE_OK;
  return kv_map_put(&c->pRead, aKey, nKey, 0, 0, 0, 0);
}

/* Has entry e a deadline that has passed (kv.h "Deadlines")? */
static int txnExpired(const KvMapEntry *e){
  return e->nVal>=10 && (e->aVal[0] & 0x80)
      && kv_value_expired(e->aVal, e->nVal, kv_clock_ms());
}

/* A read with no root: the latest committed state.  A backend with
** xGetNow reads under the engine mutex and pins the entry: with paPin,
** the pinned value is handed over (*paPin, *pnPin; the caller unpins
** it), else copied into *pVal and unpinned.  Any other backend reads a
** snapshot taken for the read. */
static int txnGetDetached(KvEngine *pEng, const char *zTab, int nTab,
                         const uint8_t *aKey, int nKey, KvBuf *pVal,
                         const uint8_t **paPin, int *pnPin,
                         int *pbFound, char **pzErr){
  KvBackendSnap *pSnap = 0;
  KvTable *pTab;
  KvMapEntry e;
  int rc = kvEngineFailed(pEng, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&pEng->mutex);
  rc = kvEngineCatchUp(pEng, 0, pzErr);
  if( rc!=SQLITE_OK ){
    pthread_mutex_unlock(&pEng->mutex);
    return rc;
  }
  pTab = kvTableFind(pEng, zTab, nTab);
  if( pTab && pTab->pData && pTab->pBackend->xGetNow ){
    /* an in-memory lookup: done under the mutex, no snapshot */
    rc = pTab->pBackend->xGetNow(pTab->pData, aKey, nKey, &e, pbFound);
    pthread_mutex_unlock(&pEng->mutex);
    if( rc!=SQLITE_OK || !*pbFound ) return rc;
    if( txnExpired(&e) ){
      *pbFound = 0;
    }else if( paPin ){
      *paPin = e.aVal;
      *pnPin = e.nVal;
      return SQLITE_OK;
    }else{
      rc = txnCopyOut(pVal, &e);
    }
    kv_map_value_unpin(e.aVal);
    return rc;
  }
  if( pTab ){
    pTab->nRef++;
    rc = pTab->pBackend->xSnapshot(pTab->pData, &pSnap);
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( pTab==0 ){
    *pzErr = sqlite3_mprintf("kv: no such table: %.*s (store %s)", nTab,
                             zTab, pEng->zDir ? pEng->zDir : "in memory");
    return SQLITE_ERROR;
  }
  if( rc!=SQLITE_OK ) kvSnapshotError(rc, zTab, nTab, pzErr);
  if( rc==SQLITE_OK ) rc = txnSnapGet(pTab, pSnap, aKey, nKey, pbFound, &e, pzErr);
  if( rc==SQLITE_OK && *pbFound && txnExpired(&e) ) *pbFound = 0;
  if( rc==SQLITE_OK && *pbFound ) rc = txnCopyOut(pVal, &e);
  if( pSnap ) pTab->pBackend->xSnapshotFree(pSnap);
  pthread_mutex_lock(&pEng->mutex);
  kvTableUnref(pTab);
  pthread_mutex_unlock(&pEng->mutex);
  return rc;
}

int kv_get(KvEngine *pEng, KvRoot *p, const char *zTab, int nTab,
           const uint8_t *aKey, int nKey, KvBuf *pVal, int *pbFound,
           char **pzErr){
  KvChild *c = 0;
  KvMapEntry e;
  int rc;
  *pbFound = 0;
  if( p==0 ){
    return txnGetDetached(pEng, zTab, nTab, aKey, nKey, pVal, 0, 0,
                          pbFound, pzErr);
  }
  if( (rc = txnRootUsable(p, pzErr))!=SQLITE_OK ) return rc;
  if( (rc = kv_root_protocol(p, KV_PROTO_ORDINARY, pzErr))!=SQLITE_OK ){
    return rc;
  }
  if( (rc = txnBind(p, zTab, nTab, 0, &c, pzErr))!=SQLITE_OK ) return rc;
  if( kv_map_get(c->pWrite, aKey, nKey, &e) ){
    *pbFound = !e.bTomb && !txnExpired(&e);
    return *pbFound ? txnCopyOut(pVal, &e) : SQLITE_OK;
  }
  if( (rc = txnChildSnap(p, c, pzErr))!=SQLITE_OK ) return rc;
  rc = txnReadNote(c, aKey, nKey);
  if( rc==SQLITE_OK && c->pSnap ){
    rc = txnSnapGet(c->pTab, c->pSnap, aKey, nKey, pbFound, &e, pzErr);
    if( rc==SQLITE_OK && *pbFound && txnExpired(&e) ) *pbFound = 0;
    if( rc==SQLITE_OK && *pbFound ) rc = txnCopyOut(pVal, &e);
  }
  return rc;
}

void kv_get_unpin(const uint8_t *aPin){
  kv_map_value_unpin(aPin);
}

int kv_get_pin(KvEngine *pEng, KvRoot *p, const char *zTab, int nTab,
               const uint8_t *aKey, int nKey, KvBuf *pVal,
               const uint8_t **paPin, int *pnPin, int *pbFound,
               char **pzErr){
  *paPin = 0;
  *pnPin = 0;
  if( p==0 ){
    *pbFound = 0;
    return txnGetDetached(pEng, zTab, nTab, aKey, nKey, pVal, paPin, pnPin,
                          pbFound, pzErr);
  }
  return kv_get(pEng, p, zTab, nTab, aKey, nKey, pVal, pbFound, pzErr);
}

int kv_peek(KvRoot *p, const char *zTab, int nTab, const uint8_t *aKey,
            int nKey, KvBuf *pVal, int *pbFound, char **pzErr){
  KvChild *c = 0;
  KvMapEntry e;
  int rc = txnBind(p, zTab, nTab, 0, &c, pzErr);
  *pbFound = 0;
  if( rc!=SQLITE_OK ) return rc;
  if( kv_map_get(c->pWrite, aKey, nKey, &e) ){
    *pbFound = !e.bTomb;
    return e.bTomb ? SQLITE_OK : txnCopyOut(pVal, &e);
  }
  if( (rc = txnChildSnap(p, c, pzErr))!=SQLITE_OK ) return rc;
  if( c->pSnap ){
    rc = txnSnapGet(c->pTab, c->pSnap, aKey, nKey, pbFound, &e, pzErr);
    if( rc==SQLITE_OK && *pbFound ) rc = txnCopyOut(pVal, &e);
  }
  return rc;
}

int kvNoteRead(KvRoot *p, const char *zTab, int nTab, const uint8_t *aKey,
               int nKey, char **pzErr){
  KvChild *c = 0;
  KvMapEntry e;
  int rc = txnBind(p, zTab, nTab, 0, &c, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  /* A key the root writes is reserved by its write, which conflicts with
  ** every read and write another root checks against it, and the root's
  ** own check of its reads skips its written keys (txnCheckRoot). */
  if( kv_map_get(c->pWrite, aKey, nKey, &e) ) return SQLITE_OK;
  return txnReadNote(c, aKey, nKey);
}

/* memcmp order over the common length, a prefix first (kv_map's). */
static int txnKeyCmp(const uint8_t *a, int na, const uint8_t *b, int nb){
  int c = memcmp(a, b, (size_t)(na<nb ? na : nb));
  return c ? c : na - nb;
}

int kvNoteReads(KvRoot *p, const char *zTab, int nTab,
                const uint8_t *const *paKey, const int *pnKey, size_t szElem,
                int n, char **pzErr){
#define KV_NTH_KEY(i) \
  (*(const uint8_t *const*)((const char*)paKey + (size_t)(i)*szElem))
#define KV_NTH_LEN(i) \
  (*(const int*)((const char*)pnKey + (size_t)(i)*szElem))
  KvChild *c = 0;
  KvMapCursor *pCsr = 0;
  KvMapEntry e;
  int i, bOn = 0, rc = txnBind(p, zTab, nTab, 0, &c, pzErr);
  if( rc!=SQLITE_OK || n==0 ) return rc;
  if( kv_map_count(c->pWrite)>0 ){
    if( (pCsr = kv_map_cursor_new(c->pWrite))==0 ) return SQLITE_NOMEM;
    bOn = kv_map_cursor_seek(pCsr, KV_SEEK_GE, KV_NTH_KEY(0), KV_NTH_LEN(0));
    if( bOn ) kv_map_cursor_entry(pCsr, &e);
  }
  for(i=0; rc==SQLITE_OK && i<n; i++){
    const uint8_t *aKey = KV_NTH_KEY(i);
    int nKey = KV_NTH_LEN(i), cmp = 1;
    while( bOn && (cmp = txnKeyCmp(e.aKey, e.nKey, aKey, nKey))<0 ){
      if( (bOn = kv_map_cursor_next(pCsr))!=0 ) kv_map_cursor_entry(pCsr, &e);
    }
    if( bOn && cmp==0 ) continue;      /* written: the write reserves it */
    rc = txnReadNote(c, aKey, nKey);
  }
  kv_map_cursor_free(pCsr);
  return rc;
#undef KV_NTH_KEY
#undef KV_NTH_LEN
}

/* ---------------------------------------------------------- the undo log
** Savepoints.  While a savepoint is open, every write to a write set first
** appends the key's old entry to KvRoot.undo: a record of
**     header (TxnUndoHdr) | key bytes | old value bytes | u32 record size
** (the size last, so that the log is read newest first).  A savepoint is
** the log's length when it was opened; rolling back to it restores the
** records above that length, newest first, and releasing the outermost
** savepoint empties the log.  A write so costs a lookup and a copy of the
** old entry, instead of the path copy that a snapshot of the write set
** (kv_map_ref) would cost at the next write - per row of a statement,
** since SQLite opens a savepoint per statement inside a transaction. */
typedef struct TxnUndoHdr TxnUndoHdr;
struct TxnUndoHdr {
  int iChild;                   /* index in KvRoot.apChild */
  int bDelta;                   /* the entry is of its counter deltas */
  int eOld;                     /* 0: absent, 1: a value, 2: a tombstone */
  int nKey, nVal;
};
#define TXN_UNDO_ABSENT 0
#define TXN_UNDO_VALUE  1
#define TXN_UNDO_TOMB   2

static int txnChildIndex(KvRoot *p, KvChild *c){
  int i;
  for(i=p->nChild-1; i>=0 && p->apChild[i]!=c; i--){}
  return i;
}

/* Append c's entry of key aKey (bDelta: of its counter deltas) to the
** undo log.  SQLITE_NOMEM. */
static int txnUndoNote(KvRoot *p, KvChild *c, int bDelta,
                       const void *aKey, int nKey){
  KvMap *pMap = bDelta ? c->pDelta : c->pWrite;
  KvMapEntry e;
  TxnUndoHdr h;
  uint32_t nRec;
  int rc;
  memset(&h, 0, sizeof(h));
  h.iChild = txnChildIndex(p, c);
  h.bDelta = bDelta;
  h.nKey = nKey;
  if( pMap && kv_map_get(pMap, aKey, nKey, &e) ){
    h.eOld = e.bTomb ? TXN_UNDO_TOMB : TXN_UNDO_VALUE;
    h.nVal = e.bTomb ? 0 : e.nVal;
  }
  nRec = (uint32_t)(sizeof(h) + nKey + h.nVal + sizeof(uint32_t));
  rc = kv_buf_reserve(&p->undo, (int)nRec);
  if( rc!=SQLITE_OK ) return rc;
  memcpy(p->undo.a + p->undo.n, &h, sizeof(h));
  p->undo.n += sizeof(h);
  if( nKey>0 ) memcpy(p->undo.a + p->undo.n, aKey, nKey);
  p->undo.n += nKey;
  if( h.nVal>0 ) memcpy(p->undo.a + p->undo.n, e.aVal, h.nVal);
  p->undo.n += h.nVal;
  memcpy(p->undo.a + p->undo.n, &nRec, sizeof(nRec));
  p->undo.n += sizeof(nRec);
  return SQLITE_OK;
}

/* Restore the write sets to what they were when the undo log was iTo
** bytes long, and cut it there.  Out of memory stops the restore with the
** newer writes kept. */
static void txnUndoTo(KvRoot *p, int iTo){
  while( p->undo.n>iTo ){
    uint32_t nRec;
    TxnUndoHdr h;
    const uint8_t *a;
    KvChild *c;
    KvMap **ppMap;
    int rc;
    memcpy(&nRec, p->undo.a + p->undo.n - sizeof(nRec), sizeof(nRec));
    a = p->undo.a + p->undo.n - nRec;
    memcpy(&h, a, sizeof(h));
    c = p->apChild[h.iChild];
    ppMap = h.bDelta ? &c->pDelta : &c->pWrite;
    if( h.eOld==TXN_UNDO_ABSENT ){
      rc = kv_map_remove(ppMap, a+sizeof(h), h.nKey);
    }else{
      rc = kv_map_put(ppMap, a+sizeof(h), h.nKey,
                      a+sizeof(h)+h.nKey, h.nVal, 0, h.eOld==TXN_UNDO_TOMB);
    }
    if( rc!=SQLITE_OK ) break;
    p->undo.n -= (int)nRec;
  }
  p->undo.n = iTo;
}

/* Write key aKey of child c (bTomb: a delete), noting the old entry for
** open savepoints. */
static int txnWrite(KvRoot *p, KvChild *c, const void *aKey, int nKey,
                    const void *aVal, int nVal, int bTomb){
  if( p->nSp>0 ){
    int rc = txnUndoNote(p, c, 0, aKey, nKey);
    if( rc!=SQLITE_OK ) return rc;
  }
  return kv_map_put(&c->pWrite, aKey, nKey, aVal, nVal, 0, bTomb);
}

int kv_put(KvRoot *p, const char *zTab, int nTab, const uint8_t *aKey,
           int nKey, const uint8_t *aVal, int nVal, char **pzErr){
  KvChild *c = 0;
  int rc = txnBind(p, zTab, nTab, 1, &c, pzErr);
  if( rc==SQLITE_OK ) rc = txnWrite(p, c, aKey, nKey, aVal, nVal, 0);
  return rc;
}

int kv_del(KvRoot *p, const char *zTab, int nTab, const uint8_t *aKey,
           int nKey, char **pzErr){
  KvChild *c = 0;
  int rc = txnBind(p, zTab, nTab, 1, &c, pzErr);
  if( rc==SQLITE_OK ) rc = txnWrite(p, c, aKey, nKey, 0, 0, 1);
  return rc;
}

/* ------------------------------------------------------------ counters --- */

/* A delta record: kind byte, real flag, count, integer sum (big-endian
** 64-bit), real sum (the double's bits, big-endian). */
#define KV_DELTA_BYTES 26
typedef struct KvDelta KvDelta;
struct KvDelta {
  uint8_t eKind, bReal;
  int64_t nCount, iSum;
  double rSum;
};

static void txnPut64(uint8_t *a, uint64_t u){
  int i;
  for(i=0; i<8; i++) a[i] = (uint8_t)(u >> (56-8*i));
}
static uint64_t txnGet64(const uint8_t *a){
  uint64_t u = 0;
  int i;
  for(i=0; i<8; i++) u = (u<<8) | a[i];
  return u;
}

static void txnDeltaEncode(const KvDelta *d, uint8_t *a){
  uint64_t u;
  a[0] = d->eKind;
  a[1] = d->bReal;
  txnPut64(a+2, (uint64_t)d->nCount);
  txnPut64(a+10, (uint64_t)d->iSum);
  memcpy(&u, &d->rSum, 8);
  txnPut64(a+18, u);
}

static void txnDeltaDecode(const uint8_t *a, KvDelta *d){
  uint64_t u;
  d->eKind = a[0];
  d->bReal = a[1];
  d->nCount = (int64_t)txnGet64(a+2);
  d->iSum = (int64_t)txnGet64(a+10);
  u = txnGet64(a+18);
  memcpy(&d->rSum, &u, 8);
}

int kv_counter_add(KvRoot *p, const char *zTab, int nTab, const uint8_t *aKey,
                   int nKey, const uint8_t *aKind, int64_t nCount,
                   int64_t iSum, double rSum, int bReal, char **pzErr){
  KvChild *c = 0;
  KvMapEntry e;
  KvDelta d;
  uint8_t a[KV_DELTA_BYTES];
  int rc = txnBind(p, zTab, nTab, 1, &c, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( c->pDelta==0 && (c->pDelta = kv_map_new())==0 ) return SQLITE_NOMEM;
  memset(&d, 0, sizeof(d));
  if( kv_map_get(c->pDelta, aKey, nKey, &e) && e.nVal==KV_DELTA_BYTES ){
    txnDeltaDecode(e.aVal, &d);
  }
  d.eKind = aKind ? aKind[0] : d.eKind;
  d.nCount += nCount;
  d.iSum += iSum;
  d.rSum += rSum;
  d.bReal = d.bReal || bReal;
  txnDeltaEncode(&d, a);
  if( p->nSp>0 ){
    rc = txnUndoNote(p, c, 1, aKey, nKey);
    if( rc!=SQLITE_OK ) return rc;
  }
  return kv_map_put(&c->pDelta, aKey, nKey, a, KV_DELTA_BYTES, 0, 0);
}

/* The counter text of a published row (count, sums), zeros if none. */
static void txnCounterParse(const uint8_t *aVal, int nVal, KvDelta *d){
  char zBuf[128];
  const char *z, *zS;
  int n = 0;
  z = aVal ? kv_value_text(aVal, nVal, &n) : 0;
  if( z==0 || n>=(int)sizeof(zBuf) ) return;
  memcpy(zBuf, z, n);
  zBuf[n] = 0;
  if( (zS = strstr(zBuf, "\"count\":"))!=0 ) d->nCount += strtoll(zS+8, 0, 10);
  if( (zS = strstr(zBuf, "\"sum\":"))!=0 ){
    zS += 6;
    if( strpbrk(zS, ".eEnN")!=0 ){ d->bReal = 1; d->rSum += strtod(zS, 0); }
    else d->iSum += strtoll(zS, 0, 10);
  }
}

/* Does a prepared root other than p write, or add to, key aKey of t? */
static int txnDeltaBusy(KvRoot *p, KvTable *t, const uint8_t *aKey, int nKey){
  KvRoot *q;
  KvMapEntry e;
  for(q=p->pEng->pPrepared; q; q=q->pNextPrepared){
    int i;
    if( q==p ) continue;
    for(i=0; i<q->nChild; i++){
      KvChild *d = q->apChild[i];
      if( d->pTab!=t ) continue;
      if( kv_map_get(d->pWrite, aKey, nKey, &e) ) return 1;
      if( d->pDelta && kv_map_get(d->pDelta, aKey, nKey, &e) ) return 1;
    }
  }
  return 0;
}

/* The first counter row of p's deltas that another prepared root writes:
** its child and key (*pc, *pe), or 0.  Engine mutex held. */
static int txnDeltaBlocked(KvRoot *p, KvChild **pc, KvMapEntry *pe){
  int i;
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    KvMapCursor *pCsr;
    int bOn, bHit = 0;
    if( c->pDelta==0 || kv_map_count(c->pDelta)==0 ) continue;
    if( (pCsr = kv_map_cursor_new(c->pDelta))==0 ) return 0;
    for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn && !bHit;
        bOn=kv_map_cursor_next(pCsr)){
      kv_map_cursor_entry(pCsr, pe);
      bHit = txnDeltaBusy(p, c->pTab, pe->aKey, pe->nKey);
    }
    kv_map_cursor_free(pCsr);
    if( bHit ){ *pc = c; return 1; }
  }
  return 0;
}

/* Wait (engine mutex held; released while waiting) until no other
** prepared root writes a counter row p adds to; after KV_COUNTER_WAIT_MS
** the row is a conflict. */
static int txnDeltaWait(KvRoot *p){
  struct timespec ts;
  KvChild *c = 0;
  KvMapEntry e;
  int bTimed = 0;
  while( txnDeltaBlocked(p, &c, &e) ){
    if( !bTimed ){
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += KV_COUNTER_WAIT_MS/1000;
      ts.tv_nsec += (KV_COUNTER_WAIT_MS%1000)*1000000L;
      if( ts.tv_nsec>=1000000000L ){ ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
      bTimed = 1;
    }
    if( pthread_cond_timedwait(&p->pEng->deltaCond, &p->pEng->mutex, &ts)
        ==ETIMEDOUT && txnDeltaBlocked(p, &c, &e) ){
      return kvConflictAddKind(p, c->pTab->zName, c->pTab->nName, e.aKey,
                               e.nKey, KV_CONFLICT_TXN);
    }
  }
  return SQLITE_OK;
}

/* Turn child c's deltas into writes of the resulting rows, from the
** latest published rows (engine mutex held). */
static int txnDeltaResolveChild(KvChild *c){
  KvTable *t = c->pTab;
  KvBackendSnap *pSnap = 0;
  KvMapCursor *pCsr = 0;
  KvMapEntry e, g;
  KvBuf val = {0, 0, 0};
  int bOn, rc;
  if( t->pData==0 ) return SQLITE_OK;
  c->pWritePre = kv_map_ref(c->pWrite);
  rc = t->pBackend->xSnapshot(t->pData, &pSnap);
  if( rc==SQLITE_OK && (pCsr = kv_map_cursor_new(c->pDelta))==0 ){
    rc = SQLITE_NOMEM;
  }
  for(bOn=pCsr ? kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0) : 0;
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    KvDelta d, cur;
    int bFound = 0;
    kv_map_cursor_entry(pCsr, &e);
    if( e.nVal!=KV_DELTA_BYTES ) continue;
    txnDeltaDecode(e.aVal, &d);
    memset(&cur, 0, sizeof(cur));
    rc = t->pBackend->xGet(pSnap, e.aKey, e.nKey, &bFound, &g);
    if( rc!=SQLITE_OK ) break;
    if( bFound ) txnCounterParse(g.aVal, g.nVal, &cur);
    cur.nCount += d.nCount;
    cur.iSum += d.iSum;
    cur.rSum += d.rSum;
    cur.bReal = cur.bReal || d.bReal;
    if( cur.nCount<=0 ){
      rc = kv_map_put(&c->pWrite, e.aKey, e.nKey, 0, 0, 0, 1);
    }else{
      char *z = cur.bReal
        ? sqlite3_mprintf("{\"count\":%lld,\"sum\":%!.17g}",
                          (long long)cur.nCount, cur.rSum + (double)cur.iSum)
        : sqlite3_mprintf("{\"count\":%lld,\"sum\":%lld}",
                          (long long)cur.nCount, (long long)cur.iSum);
      kv_buf_reset(&val);
      rc = z ? kv_value_encode_text(&d.eKind, z, (int)strlen(z), &val)
             : SQLITE_NOMEM;
      if( rc==SQLITE_OK ){
        rc = kv_map_put(&c->pWrite, e.aKey, e.nKey, val.a, val.n, 0, 0);
      }
      sqlite3_free(z);
    }
  }
  kv_map_cursor_free(pCsr);
  if( pSnap ) t->pBackend->xSnapshotFree(pSnap);
  kv_buf_free(&val);
  return rc;
}

static int txnDeltaResolve(KvRoot *p){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( c->pDelta && kv_map_count(c->pDelta)>0 ) rc = txnDeltaResolveChild(c);
  }
  return rc;
}

/* Undo txnDeltaResolve (the root is active again). */
static void txnDeltaUnresolve(KvRoot *p){
  int i;
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( c->pWritePre ){
      kv_map_unref(c->pWrite);
      c->pWrite = c->pWritePre;
      c->pWritePre = 0;
    }
  }
}

int kv_root_bind(KvRoot *p, const char *zTab, int nTab, char **pzErr){
  KvChild *c = 0;
  int rc = txnBind(p, zTab, nTab, 0, &c, pzErr);
  if( rc==SQLITE_OK ) rc = txnChildSnap(p, c, pzErr);
  return rc;
}

/* Is zTab bound by root p already? */
static int txnIsBound(KvRoot *p, const char *zTab, int nTab){
  int i;
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( !c->bSchema && c->pTab->nName==nTab
     && memcmp(c->pTab->zName, zTab, nTab)==0 ){
      return 1;
    }
  }
  return 0;
}

int kv_root_bind_set(KvRoot *p, int n, const char *const *azTab,
                     const int *anTab, char **pzErr){
  KvTable *pNew = 0, *apTab[KV_BIND_SET_MAX];
  KvChild *c = 0;
  int i, j, bTogether = n>0 && n<=KV_BIND_SET_MAX && !p->bRemove;
  int rc = txnRootUsable(p, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  for(i=0; bTogether && i<n; i++){
    char *zNameErr = 0;
    bTogether = kv_name_check(azTab[i], anTab[i], &zNameErr)==SQLITE_OK
        && !txnIsBound(p, azTab[i], anTab[i])
        && txnOwnSchema(p, azTab[i], anTab[i], &pNew)==0;
    sqlite3_free(zNameErr);
  }
  if( bTogether ){
    pthread_mutex_lock(&p->pEng->mutex);
    rc = kvEngineCatchUp(p->pEng, 0, pzErr);    /* a shared store */
    for(i=0; rc==SQLITE_OK && bTogether && i<n; i++){
      apTab[i] = kvTableFind(p->pEng, azTab[i], anTab[i]);
      bTogether = apTab[i]!=0;
      for(j=0; bTogether && j<i; j++) bTogether = apTab[j]!=apTab[i];
    }
    /* one sequence for every snapshot */
    for(i=0; rc==SQLITE_OK && bTogether && i<n; i++){
      rc = txnBindLive(p, apTab[i], 0, 0, &c);
      if( rc!=SQLITE_OK ) kvSnapshotError(rc, azTab[i], anTab[i], pzErr);
    }
    pthread_mutex_unlock(&p->pEng->mutex);
    if( rc!=SQLITE_OK || bTogether ) return rc;
  }
  for(i=0; rc==SQLITE_OK && i<n; i++){
    rc = kv_root_bind(p, azTab[i], anTab[i], pzErr);
  }
  return rc;
}

int kv_root_has_writes(KvRoot *p){
  int i;
  if( p->bRemove ) return 1;
  for(i=0; i<p->nChild; i++){
    if( kv_map_count(p->apChild[i]->pWrite)>0 ) return 1;
    if( p->apChild[i]->pDelta && kv_map_count(p->apChild[i]->pDelta)>0 ){
      return 1;
    }
  }
  return 0;
}

/* --------------------------------------------------------- the schema --- */

int kv_table_meta(KvEngine *pEng, KvRoot *p, const char *zTab, int nTab,
                  KvMeta *pMeta, int *pbFound){
  KvTable *pT = 0;
  int eOwn = p ? txnOwnSchema(p, zTab, nTab, &pT) : 0;
  int rc = SQLITE_OK;
  memset(pMeta, 0, sizeof(*pMeta));
  *pbFound = 0;
  if( eOwn==2 ) return SQLITE_OK;
  if( eOwn==1 && pT==0 ){
    /* options rewritten by this root (kv_table_set_options) */
    KvMapEntry e;
    if( kv_map_get(p->pSchema->pWrite, zTab, nTab, &e) && !e.bTomb ){
      rc = kv_meta_decode(e.aVal, e.nVal, pMeta);
      *pbFound = rc==SQLITE_OK;
    }
    return rc;
  }
  if( eOwn!=1 ){
    char *zErr = 0;
    pthread_mutex_lock(&pEng->mutex);
    kvEngineCatchUp(pEng, 0, &zErr);          /* a shared store; retried */
    sqlite3_free(zErr);
    pT = kvTableFind(pEng, zTab, nTab);
  }
  if( pT ){
    *pbFound = 1;
    *pMeta = pT->meta;
    pMeta->zOptions = 0;
    if( pT->meta.zOptions ){
      pMeta->zOptions = sqlite3_mprintf("%s", pT->meta.zOptions);
      if( pMeta->zOptions==0 ) rc = SQLITE_NOMEM;
    }
  }
  if( eOwn!=1 ) pthread_mutex_unlock(&pEng->mutex);
  return rc;
}

static int txnCreateCheck(KvRoot *p, const char *zTab, int nTab,
                         const char *zType, int bPersist, char **pzErr){
  int i, rc = txnRootUsable(p, pzErr);
  if( rc==SQLITE_OK ) rc = kv_name_check(zTab, nTab, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( kvBackendFind(zType)==0 ){
    *pzErr = sqlite3_mprintf("kv: unknown table type '%s' (this build "
                             "has: kv_memory, kv_btree, kv_log)", zType);
    return SQLITE_ERROR;
  }
  if( kvBackendFind(zType)->bNeedsStore && !p->pEng->zDir ){
    *pzErr = sqlite3_mprintf("kv: %s tables need a store directory "
        "(dir=PATH); this store is in memory (an in-memory or temporary "
        "database has no <file>-kv sidecar store)", zType);
    return SQLITE_ERROR;
  }
  if( kvBackendFind(zType)->bNeedsStore && !bPersist ){
    *pzErr = sqlite3_mprintf("kv: %s tables need a store directory and "
                             "persistence=1", zType);
    return SQLITE_ERROR;
  }
  if( bPersist && p->pEng->zDir==0 ){
    *pzErr = sqlite3_mprintf("kv: persistence=1 needs a store directory "
                             "(dir=...); this store is in memory");
    return SQLITE_ERROR;
  }
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( p->bRemove || (!c->bSchema && kv_map_count(c->pWrite)>0) ){
      *pzErr = sqlite3_mprintf("kv: create_table must come before every "
                               "write and remove in its transaction");
      return SQLITE_MISUSE;
    }
  }
  return SQLITE_OK;
}

/* The pending table object for a create, reusing one made earlier in this
** root (after a rollback to a savepoint) so bound children stay valid. */
static int txnPendingTable(KvRoot *p, const char *zTab, int nTab,
                          const KvMeta *pMeta, char **pzErr){
  KvTable *pT = 0, **a;
  int i, rc;
  for(i=0; i<p->nNew; i++){
    if( p->apNew[i]->nName==nTab && memcmp(p->apNew[i]->zName, zTab, nTab)==0 ){
      KvTable *t = p->apNew[i];
      char *zOpt = pMeta->zOptions ? sqlite3_mprintf("%s", pMeta->zOptions) : 0;
      if( pMeta->zOptions && zOpt==0 ) return SQLITE_NOMEM;
      sqlite3_free(t->meta.zOptions);
      t->meta = *pMeta;
      t->meta.zOptions = zOpt;
      return SQLITE_OK;
    }
  }
  a = sqlite3_realloc64(p->apNew, (p->nNew+1)*sizeof(KvTable*));
  if( a==0 ) return SQLITE_NOMEM;
  p->apNew = a;
  rc = kvTableNew(p->pEng, zTab, nTab, pMeta, &pT, pzErr);
  if( rc==SQLITE_OK ) p->apNew[p->nNew++] = pT;
  return rc;
}

int kv_create_table(KvRoot *p, const char *zTab, int nTab, const char *zType,
                    int bPersist, const char *zOptions, int *pbCreated,
                    char **pzErr){
  KvMeta meta;
  KvBuf buf = {0, 0, 0};
  KvChild *s = 0;
  int bFound = 0;
  int rc = txnCreateCheck(p, zTab, nTab, zType, bPersist, pzErr);
  *pbCreated = 0;
  if( rc==SQLITE_OK ){
    rc = kvDdlCreateCheck(p->pEng, zTab, nTab, zType, bPersist, pzErr);
  }
  /* Shared: the check below sees the catalog the schema child binds, and
  ** a create another process commits after that conflicts at prepare. */
  if( rc==SQLITE_OK && __atomic_load_n(&p->pEng->bShared, __ATOMIC_RELAXED) ){
    rc = txnSchemaChild(p, &s);
  }
  if( rc==SQLITE_OK ) rc = kv_table_meta(p->pEng, p, zTab, nTab, &meta, &bFound);
  if( rc!=SQLITE_OK ) return rc;
  if( bFound ){
    if( strcmp(meta.zType, zType)!=0 || meta.bPersist!=bPersist ){
      *pzErr = sqlite3_mprintf("kv: table %.*s exists as %s with "
          "persistence=%d, not %s with persistence=%d", nTab, zTab,
          meta.zType, meta.bPersist, zType, bPersist);
      rc = SQLITE_ERROR;
    }
    kv_meta_clear(&meta);
    return rc;
  }
  memcpy(meta.zType, zType, strlen(zType)+1);
  meta.bPersist = bPersist;
  meta.zOptions = (char*)zOptions;
  pthread_mutex_lock(&p->pEng->mutex);
  meta.iId = p->pEng->iNextTableId++;
  pthread_mutex_unlock(&p->pEng->mutex);
  rc = txnSchemaChild(p, &s);
  if( rc==SQLITE_OK ) rc = kv_meta_encode(&meta, &buf);
  if( rc==SQLITE_OK ) rc = txnPendingTable(p, zTab, nTab, &meta, pzErr);
  if( rc==SQLITE_OK ) rc = txnWrite(p, s, zTab, nTab, buf.a, buf.n, 0);
  if( rc==SQLITE_OK ) *pbCreated = 1;
  kv_buf_free(&buf);
  return rc;
}

int kv_remove_table(KvRoot *p, const char *zTab, int nTab, char **pzErr){
  KvChild *s = 0;
  KvMeta meta;
  int bFound = 0;
  int rc = txnRootUsable(p, pzErr);
  if( rc==SQLITE_OK ) rc = kv_name_check(zTab, nTab, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( p->nChild>(p->pSchema ? 1 : 0) ){
    *pzErr = sqlite3_mprintf("kv: remove_table must be alone in its "
                             "transaction");
    return SQLITE_MISUSE;
  }
  memset(&meta, 0, sizeof(meta));
  if( __atomic_load_n(&p->pEng->bShared, __ATOMIC_RELAXED) ){
    rc = txnSchemaChild(p, &s);                  /* as kv_create_table */
  }
  if( rc==SQLITE_OK ) rc = kv_table_meta(p->pEng, p, zTab, nTab, &meta, &bFound);
  kv_meta_clear(&meta);
  if( rc==SQLITE_OK && !bFound ) return txnNoSuchTable(p, zTab, nTab, pzErr);
  if( rc==SQLITE_OK ) rc = txnSchemaChild(p, &s);
  if( rc==SQLITE_OK ) rc = txnWrite(p, s, zTab, nTab, 0, 0, 1);
  if( rc==SQLITE_OK ) p->bRemove = 1;
  return rc;
}

int kv_table_set_options(KvRoot *p, const char *zTab, int nTab,
                         const char *zOptions, char **pzErr){
  KvChild *s = 0;
  KvTable *pNew = 0;
  KvBuf buf = {0, 0, 0};
  KvMeta meta;
  int bFound = 0;
  int rc = txnRootUsable(p, pzErr);
  if( rc==SQLITE_OK ) rc = kv_table_meta(p->pEng, p, zTab, nTab, &meta, &bFound);
  if( rc!=SQLITE_OK ) return rc;
  if( !bFound ){
    kv_meta_clear(&meta);
    return txnNoSuchTable(p, zTab, nTab, pzErr);
  }
  sqlite3_free(meta.zOptions);
  meta.zOptions = (char*)zOptions;
  rc = txnSchemaChild(p, &s);
  if( rc==SQLITE_OK ) rc = kv_meta_encode(&meta, &buf);
  if( rc==SQLITE_OK && txnOwnSchema(p, zTab, nTab, &pNew)==1 && pNew ){
    rc = txnPendingTable(p, zTab, nTab, &meta, pzErr);
  }
  if( rc==SQLITE_OK ) rc = kv_map_put(&s->pWrite, zTab, nTab, buf.a, buf.n, 0, 0);
  kv_buf_free(&buf);
  return rc;
}

uint64_t kv_engine_catalog_seq(KvEngine *pEng){
  return __atomic_load_n(&pEng->iCatalogSeq, __ATOMIC_RELAXED);
}

int kv_root_touch(KvRoot *p, const char *zTab, int nTab, int bWatch,
                  char **pzErr){
  KvChild *c = 0;
  int rc = txnBind(p, zTab, nTab, 1, &c, pzErr);
  if( rc==SQLITE_OK && bWatch ) c->bWatch = 1;
  return rc;
}

int kv_root_note_range(KvRoot *p, const char *zTab, int nTab,
                       const uint8_t *aLo, int nLo, const uint8_t *aHi,
                       int nHi, char **pzErr){
  KvChild *c = 0;
  int rc = txnRootUsable(p, pzErr);
  if( rc==SQLITE_OK ) rc = txnBind(p, zTab, nTab, 0, &c, pzErr);
  if( rc==SQLITE_OK && c->pRange==0 && (c->pRange = kv_map_new())==0 ){
    rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = kv_map_put(&c->pRange, aLo, nLo, aHi, nHi, 0, 0);
  return rc;
}

int kv_root_note_read(KvRoot *p, const char *zTab, int nTab,
                      const uint8_t *aKey, int nKey, char **pzErr){
  int rc = txnRootUsable(p, pzErr);
  if( rc==SQLITE_OK ) rc = kvNoteRead(p, zTab, nTab, aKey, nKey, pzErr);
  return rc;
}

/* ---------------------------------------------------------- conflicts --- */

int kvConflictAddKind(KvRoot *p, const char *zTab, int nTab,
                      const uint8_t *aKey, int nKey, int eKind){
  KvConflict *a;
  char *zBlock;
  a = sqlite3_realloc64(p->aConflict, (p->nConflict+1)*sizeof(KvConflict));
  if( a==0 ) return SQLITE_NOMEM;
  p->aConflict = a;
  zBlock = sqlite3_malloc64(nTab + 1 + nKey + 1);
  if( zBlock==0 ) return SQLITE_NOMEM;
  memcpy(zBlock, zTab, nTab);
  zBlock[nTab] = 0;                  /* zTable is a C string */
  memcpy(zBlock+nTab+1, aKey, nKey);
  zBlock[nTab+1+nKey] = 0;
  a[p->nConflict].zTable = zBlock;
  a[p->nConflict].nTable = nTab;
  a[p->nConflict].aKey = (const uint8_t*)zBlock + nTab + 1;
  a[p->nConflict].nKey = nKey;
  a[p->nConflict].eKind = eKind;
  p->nConflict++;
  return SQLITE_OK;
}

static int txnConflictAdd(KvRoot *p, const char *zTab, int nTab,
                         const uint8_t *aKey, int nKey){
  return kvConflictAddKind(p, zTab, nTab, aKey, nKey, KV_CONFLICT_TXN);
}

static int txnBytesCmp(const void *a, int na, const void *b, int nb){
  int c = memcmp(a, b, na<nb ? na : nb);
  return c ? c : na-nb;
}

/* Is c a table-level conflict (catalog table, key = the table's name)? */
static int txnConflictIsTable(const KvConflict *c){
  return c->nTable==(int)strlen(KV_META_TABLE)
      && memcmp(c->zTable, KV_META_TABLE, c->nTable)==0;
}

/* Order: by the name of the table concerned, a table-level conflict before
** that table's keys, then by key bytes. */
static int txnConflictCmp(const void *pA, const void *pB){
  const KvConflict *a = pA, *b = pB;
  int bA = txnConflictIsTable(a), bB = txnConflictIsTable(b), c;
  c = txnBytesCmp(bA ? (const char*)a->aKey : a->zTable, bA ? a->nKey : a->nTable,
                 bB ? (const char*)b->aKey : b->zTable, bB ? b->nKey : b->nTable);
  if( c==0 ) c = bB - bA;
  return (c || bA) ? c : txnBytesCmp(a->aKey, a->nKey, b->aKey, b->nKey);
}

/* Sort order: the key order, then version_mismatch first (so dedup keeps
** it when both kinds hit one key). */
static int txnConflictSortCmp(const void *pA, const void *pB){
  const KvConflict *a = pA, *b = pB;
  int c = txnConflictCmp(pA, pB);
  return c ? c : b->eKind - a->eKind;
}

static void txnConflictSort(KvRoot *p){
  int i, j = 0;
  if( p->nConflict==0 ) return;
  qsort(p->aConflict, p->nConflict, sizeof(KvConflict), txnConflictSortCmp);
  for(i=1; i<p->nConflict; i++){
    if( txnConflictCmp(&p->aConflict[j], &p->aConflict[i])==0 ){
      sqlite3_free((char*)p->aConflict[i].zTable);
    }else{
      p->aConflict[++j] = p->aConflict[i];
    }
  }
  p->nConflict = j+1;
}

/* The child of prepared root q on table t, if any. */
static KvChild *txnChildOn(KvRoot *q, KvTable *t){
  int i;
  for(i=0; i<q->nChild; i++){
    if( q->apChild[i]->pTab==t ) return q->apChild[i];
  }
  return 0;
}

/* Is key aKey inside one of the ranges of map pRange (low -> high)? */
static int txnInRange(KvMap *pRange, const uint8_t *aKey, int nKey){
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bIn = 0;
  if( pRange==0 || (pCsr = kv_map_cursor_new(pRange))==0 ) return 0;
  if( kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0) ){
    do{
      kv_map_cursor_entry(pCsr, &e);
      if( txnKeyCmp(e.aKey, e.nKey, aKey, nKey)>0 ) break;
      if( e.nVal==0 || txnKeyCmp(aKey, nKey, e.aVal, e.nVal)<=0 ) bIn = 1;
    }while( !bIn && kv_map_cursor_next(pCsr) );
  }
  kv_map_cursor_free(pCsr);
  return bIn;
}

/* Add a conflict for the first key of map pKeys (revisions: rev > iSnap
** when bRev) inside range aLo..aHi (nHi==0: unbounded), if any. */
static int txnRangeHit(KvRoot *p, KvChild *c, KvMap *pKeys, int bRev,
                      const uint8_t *aLo, int nLo, const uint8_t *aHi,
                      int nHi, int *pbHit){
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  if( pKeys==0 || *pbHit ) return SQLITE_OK;
  if( (pCsr = kv_map_cursor_new(pKeys))==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_GE, aLo, nLo); bOn;
      bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    if( nHi>0 && txnKeyCmp(e.aKey, e.nKey, aHi, nHi)>0 ) break;
    if( bRev && e.rev<=c->iSnap ) continue;
    rc = txnConflictAdd(p, c->pTab->zName, c->pTab->nName, e.aKey, e.nKey);
    *pbHit = 1;
    break;
  }
  kv_map_cursor_free(pCsr);
  return rc;
}

/* The range reads of child c: a key in a range committed after c's
** snapshot, or written by another prepared root, is a conflict. */
static int txnCheckRanges(KvRoot *p, KvChild *c){
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  if( c->pRange==0 ) return SQLITE_OK;
  if( (pCsr = kv_map_cursor_new(c->pRange))==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    KvRoot *q;
    int bHit = 0;
    kv_map_cursor_entry(pCsr, &e);
    rc = txnRangeHit(p, c, c->pTab->pRev, 1, e.aKey, e.nKey, e.aVal, e.nVal,
                     &bHit);
    for(q=p->pEng->pPrepared; rc==SQLITE_OK && q; q=q->pNextPrepared){
      KvChild *d = q==p ? 0 : txnChildOn(q, c->pTab);
      if( d ) rc = txnRangeHit(p, c, d->pWrite, 0, e.aKey, e.nKey, e.aVal,
                               e.nVal, &bHit);
    }
  }
  kv_map_cursor_free(pCsr);
  return rc;
}

/* Does key k of child c (bWrite: c writes it) conflict?  Engine mutex. */
static int txnKeyConflicts(KvRoot *p, KvChild *c, const uint8_t *aKey,
                          int nKey, int bWrite){
  KvMapEntry e;
  KvRoot *q;
  if( c->pTab->pRev && kv_map_get(c->pTab->pRev, aKey, nKey, &e)
   && e.rev>c->iSnap ){
    return 1;
  }
  for(q=p->pEng->pPrepared; q; q=q->pNextPrepared){
    KvChild *d = q==p ? 0 : txnChildOn(q, c->pTab);
    int bStrict;
    if( d==0 ) continue;
    bStrict = c->bSchema || d->bSchema;
    if( kv_map_get(d->pWrite, aKey, nKey, &e)
     || ((bWrite || bStrict) && d->pRead
         && kv_map_get(d->pRead, aKey, nKey, &e)) ){
      if( q->zGid && p->zHeldBy==0 ){
        p->zHeldBy = sqlite3_mprintf("%.*s", q->nGid, q->zGid);
      }
      return 1;
    }
    if( bWrite && txnInRange(d->pRange, aKey, nKey) ) return 1;
  }
  return 0;
}

/* Check every key of map pKeys (skipping those in pSkip). */
static int txnCheckKeys(KvRoot *p, KvChild *c, KvMap *pKeys, KvMap *pSkip,
                       int bWrite){
  KvMapCursor *pCsr;
  KvMapEntry e, e2;
  int bOn, rc = SQLITE_OK;
  if( pKeys==0 || kv_map_count(pKeys)==0 ) return SQLITE_OK;
  if( c->pTab->pRev==0 && p->pEng->pPrepared==0 ) return SQLITE_OK;
  pCsr = kv_map_cursor_new(pKeys);
  if( pCsr==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    if( pSkip && kv_map_get(pSkip, e.aKey, e.nKey, &e2) ) continue;
    if( txnKeyConflicts(p, c, e.aKey, e.nKey, bWrite) ){
      rc = txnConflictAdd(p, c->pTab->zName, c->pTab->nName, e.aKey, e.nKey);
    }
  }
  kv_map_cursor_free(pCsr);
  return rc;
}

/* Did the catalog entry of data child c's table change since it bound?
** Engine mutex held. */
static int txnTableRedefinedLocked(KvRoot *p, KvChild *c){
  KvTable *pMeta = p->pEng->pMeta;
  KvMapEntry e;
  KvRoot *q;
  if( !c->pTab->bLive ) return 1;
  if( pMeta->pRev && kv_map_get(pMeta->pRev, c->pTab->zName, c->pTab->nName, &e)
   && e.rev>c->iSnap ){
    return 1;
  }
  for(q=p->pEng->pPrepared; q; q=q->pNextPrepared){
    if( q!=p && q->pSchema
     && kv_map_get(q->pSchema->pWrite, c->pTab->zName, c->pTab->nName, &e) ){
      return 1;
    }
  }
  return 0;
}

/* Collect every conflict of the root (engine mutex held). */
static int txnCheckRoot(KvRoot *p){
  int i, rc = SQLITE_OK;
  for(i=0; i<p->nChild && rc==SQLITE_OK; i++){
    KvChild *c = p->apChild[i];
    if( txnIsPending(c->pTab) ) continue;    /* nobody else can see it */
    if( !c->bSchema
     && (kv_map_count(c->pWrite)>0 || c->pRead || c->bWatch || c->pRange)
     && txnTableRedefinedLocked(p, c) ){
      rc = txnConflictAdd(p, KV_META_TABLE, (int)strlen(KV_META_TABLE),
                         (const uint8_t*)c->pTab->zName, c->pTab->nName);
    }
    if( rc==SQLITE_OK ) rc = txnCheckKeys(p, c, c->pWrite, 0, 1);
    if( rc==SQLITE_OK ) rc = txnCheckKeys(p, c, c->pRead, c->pWrite, 0);
    if( rc==SQLITE_OK ) rc = txnCheckRanges(p, c);
  }
  return rc;
}

/* "kv: ... t1 key 'a', table t2 (created or removed concurrently)" */
static char *txnConflictMessage(KvRoot *p){
  char *z = sqlite3_mprintf("kv: transaction conflicts with a concurrent "
      "commit on %d key%s:", p->nConflict, p->nConflict==1 ? "" : "s");
  int i;
  for(i=0; z && i<p->nConflict && i<8; i++){
    const KvConflict *c = &p->aConflict[i];
    if( c->nTable==(int)strlen(KV_META_TABLE)
     && memcmp(c->zTable, KV_META_TABLE, c->nTable)==0 ){
      z = sqlite3_mprintf("%z%s table %.*s (created or removed concurrently)",
                          z, i ? "," : "", c->nKey, c->aKey);
    }else{
      char *zKey = kv_key_describe(c->aKey, c->nKey);
      z = sqlite3_mprintf("%z%s %.*s key %s", z, i ? "," : "", c->nTable,
                          c->zTable, zKey ? zKey : "?");
      sqlite3_free(zKey);
    }
  }
  if( z && p->nConflict>8 ) z = sqlite3_mprintf("%z, and %d more", z,
                                                p->nConflict-8);
  if( z && p->zHeldBy ){
    z = sqlite3_mprintf("%z (held by prepared transaction '%s', in doubt "
        "until kv_commit_prepared or kv_rollback_prepared resolves it)", z,
        p->zHeldBy);
  }
  if( z ) z = sqlite3_mprintf("%z; the transaction was rolled back, retry it "
                              "in a new one", z);
  return z;
}

int kv_root_conflicts(KvRoot *p, const KvConflict **pa){
  *pa = p->aConflict;
  return p->nConflict;
}

/* ------------------------------------------------------------ finish --- */

/* Close the savepoints above the nKeep oldest; with none left, nothing
** can roll back into the undo log any more. */
static void txnSavepointsClear(KvRoot *p, int nKeep){
  if( p->nSp>nKeep ) p->nSp = nKeep;
  if( p->nSp==0 ) p->undo.n = 0;
}

static void txnUnlinkPrepared(KvRoot *p){
  KvRoot **pp;
  for(pp=&p->pEng->pPrepared; *pp; pp=&(*pp)->pNextPrepared){
    if( *pp==p ){
      *pp = p->pNextPrepared;
      pthread_cond_broadcast(&p->pEng->deltaCond);  /* txnDeltaWait */
      break;
    }
  }
  p->pNextPrepared = 0;
}

/* The root ends without publishing: delete the files its prepare made for
** the tables it creates (txnOpenNewTables), so a create that fails or is
** rolled back leaves no file behind.  Only for a root whose record will
** never be applied, or that a replay would create afresh (xOpen with
** bCreate makes the files again).  Errors are logged: the table never
** existed, and a later table gets a higher id than leftover files
** (xStoreMaxId). */
static void txnDropNewTableFiles(KvRoot *p){
  int i;
  for(i=0; i<p->nNew; i++){
    KvTable *t = p->apNew[i];
    char *zErr = 0;
    int rc;
    if( t->bLive || t->pData==0 ) continue;
    rc = t->pBackend->xDrop(t->pData, &zErr);
    if( rc!=SQLITE_OK ){
      sqlite3_log(rc, "kv: files of table %.*s, whose create was rolled "
                  "back, stay: %s", t->nName, t->zName, zErr ? zErr : "");
    }
    sqlite3_free(zErr);
  }
}

/* A root holding the store's writer lock (shared store) lets it go, after
** publishing the log's new tail when it appended (its record, committed
** and published here, or withdrawn by its abort record).  A publication
** that failed publishes nothing: the next writer applies the record. */
static void txnWriterRelease(KvRoot *p){
  KvEngine *pEng = p->pEng;
  if( !p->bWriterLock ) return;
  if( p->bAppended && !p->bPubFailed ){
    char *zErr = 0;
    int rc;
    pthread_mutex_lock(&pEng->mutex);
    rc = kvEnginePublishTail(pEng, &zErr);
    pthread_mutex_unlock(&pEng->mutex);
    if( rc!=SQLITE_OK ) sqlite3_log(rc, "%s", zErr ? zErr : "kv: tail");
    sqlite3_free(zErr);
  }
  kvEngineWriterUnlock(pEng);
  p->bWriterLock = 0;
  p->bAppended = 0;
}

/* Release every child, pending table and savepoint of the root. */
static void txnRootFinish(KvRoot *p, int eState){
  KvEngine *pEng = p->pEng;
  int i;
  txnWriterRelease(p);
  pthread_mutex_lock(&pEng->mutex);
  txnUnlinkPrepared(p);
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    KvTable *t = c->pTab;
    if( c->pSnap ) t->pBackend->xSnapshotFree(c->pSnap);
    /* Only children bound live counted themselves: a table this root
    ** created is live by now if it committed, but was never counted. */
    if( c->bActive && txnActiveUnlink(t, c) ){
      kv_map_unref(t->pRev);      /* no older snapshot needs them now */
      t->pRev = 0;
      t->nRevKept = 0;
    }
    kvTableUnref(t);
  }
  for(i=0; i<p->nNew; i++) kvTableUnref(p->apNew[i]);
  pthread_mutex_unlock(&pEng->mutex);
  for(i=0; i<p->nChild; i++){
    kv_map_unref(p->apChild[i]->pWrite);
    kv_map_unref(p->apChild[i]->pRead);
    kv_map_unref(p->apChild[i]->pRange);
    kv_map_unref(p->apChild[i]->pDelta);
    kv_map_unref(p->apChild[i]->pWritePre);
  }
  kvRootChildrenFree(p);
  sqlite3_free(p->apNew);
  p->apNew = 0; p->nNew = 0;
  p->pSchema = 0;
  txnSavepointsClear(p, 0);
  sqlite3_free(p->aSp);
  p->aSp = 0;
  kv_buf_free(&p->undo);
  p->eState = eState;
}

/* A prepared root whose WAL record is durable is being rolled back:
** withdraw the record with a durable abort record (tried twice: after a
** failed flush the log moves to a fresh segment).  If that cannot be done
** the store stops (kvEngineFailAbort) and the error is returned. */
static int txnRootAbortRecord(KvRoot *p, char **pzErr){
  KvEngine *pEng = p->pEng;
  char *zErr = 0;
  int rc;
  if( p->eState!=KV_ROOT_PREPARED || p->cid==0 || pEng->pWal==0 ){
    return SQLITE_OK;
  }
  rc = wal_abort(pEng->pWal, p->cid, p->tid, &zErr);
  if( rc!=SQLITE_OK && rc!=SQLITE_MISUSE ){
    sqlite3_free(zErr);
    zErr = 0;
    rc = wal_abort(pEng->pWal, p->cid, p->tid, &zErr);
  }
  if( rc!=SQLITE_OK ){
    kvEngineFailAbort(pEng, rc, p->tid, p->cid, zErr);
    if( pzErr ) kvEngineFailed(pEng, pzErr);
    p->bPubFailed = 1;
  }
  sqlite3_free(zErr);
  p->cid = 0;
  return rc;
}

int kv_root_rollback_err(KvRoot *p, char **pzErr){
  int rc = SQLITE_OK;
  if( p->eState==KV_ROOT_ACTIVE || p->eState==KV_ROOT_PREPARED ){
    rc = txnRootAbortRecord(p, pzErr);
    if( rc==SQLITE_OK ) txnDropNewTableFiles(p);
    txnRootFinish(p, KV_ROOT_DONE);
  }
  return rc;
}

void kv_root_rollback(KvRoot *p){
  kv_root_rollback_err(p, 0);
}

/* The tables root p creates go back to pending, as before its prepare:
** the files txnOpenNewTables made for them are deleted (as by a rollback)
** and closed; the next prepare makes them again.  Nobody else sees these
** tables, so no lock is needed. */
static void txnNewTablesPending(KvRoot *p){
  int i;
  txnDropNewTableFiles(p);
  for(i=0; i<p->nNew; i++){
    KvTable *t = p->apNew[i];
    if( t->bLive || t->pData==0 ) continue;
    t->pBackend->xClose(t->pData);
    t->pData = 0;
  }
}

int kv_root_unprepare(KvRoot *p, char **pzErr){
  int rc;
  if( p->eState!=KV_ROOT_PREPARED ) return SQLITE_OK;
  rc = txnRootAbortRecord(p, pzErr);
  if( rc!=SQLITE_OK ){
    txnRootFinish(p, KV_ROOT_DONE);
    return rc;
  }
  txnWriterRelease(p);
  txnNewTablesPending(p);
  txnDeltaUnresolve(p);
  pthread_mutex_lock(&p->pEng->mutex);
  txnUnlinkPrepared(p);
  p->eState = KV_ROOT_ACTIVE;
  pthread_mutex_unlock(&p->pEng->mutex);
  return SQLITE_OK;
}

void kvRootDetach(KvRoot *p){
  KvEngine *pEng = p->pEng;
  int i;
  pthread_mutex_lock(&pEng->mutex);
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    KvTable *t = c->pTab;
    if( c->pSnap ){
      t->pBackend->xSnapshotFree(c->pSnap);
      c->pSnap = 0;
    }
    if( c->bActive && txnActiveUnlink(t, c) ){
      kv_map_unref(t->pRev);
      t->pRev = 0;
      t->nRevKept = 0;
    }
    c->bActive = 0;
  }
  pthread_mutex_unlock(&pEng->mutex);
}

void kv_root_free(KvRoot *p){
  kv_root_free_spare(p, 0);
}

void kv_root_free_spare(KvRoot *p, KvRoot **ppSpare){
  int i;
  if( p==0 ) return;
  kv_root_rollback(p);
  kvMetricRootClosed();
  for(i=0; i<p->nConflict; i++) sqlite3_free((char*)p->aConflict[i].zTable);
  sqlite3_free(p->aConflict);
  sqlite3_free(p->zCond);
  sqlite3_free(p->zGid);
  sqlite3_free(p->zHeldBy);
  if( !p->bNoEngRef ) kv_engine_unref(p->pEng);
  if( ppSpare && *ppSpare==0 ){
    *ppSpare = p;
  }else{
    sqlite3_free(p);
  }
}

/* ----------------------------------------------------------- prepare --- */

static int txnIsLogged(KvRoot *p, KvChild *c){
  return p->pEng->pWal && c->pTab->meta.bPersist
      && kv_map_count(c->pWrite)>0;
}

/* Must the WAL record of root p wait for child c to confirm it? */
static int txnIsPendingConfirm(KvRoot *p, KvChild *c){
  return txnIsLogged(p, c) && (c->bSchema || !c->pTab->pBackend->bNoDataFile);
}

static int txnRecordTable(WalRecordBuilder *pRec, KvChild *c){
  KvMapCursor *pCsr = kv_map_cursor_new(c->pWrite);
  KvMapEntry e;
  int bOn, rc;
  if( pCsr==0 ) return SQLITE_NOMEM;
  rc = wal_record_table(pRec, c->pTab->zName, c->pTab->nName);
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    rc = wal_record_action(pRec, e.bTomb, e.aKey, e.nKey, e.aVal, e.nVal);
  }
  kv_map_cursor_free(pCsr);
  return rc;
}

/* The condition of a conditional root, as the record's first table
** (KV_REC_COND). */
static int txnRecordCondition(WalRecordBuilder *pRec, KvRoot *p){
  uint8_t aMarker[8];
  int rc = wal_record_table(pRec, KV_REC_COND, KV_REC_COND_LEN);
  wal_put_u64(aMarker, (uint64_t)p->iMarker);
  if( rc==SQLITE_OK ){
    rc = wal_record_action(pRec, 0, aMarker, 8, p->zCond,
                           (int)strlen(p->zCond));
  }
  return rc;
}

/* The gid of a named prepared root (KV_REC_GID), then its point reads of
** persistent tables (KV_REC_READS), so a replay restores its reservations.
** Reads of keys it writes need none: the write reserves them. */
static int txnRecordGid(WalRecordBuilder *pRec, KvRoot *p){
  uint8_t aMs[8];
  KvBuf key = {0, 0, 0};
  int i, bReads = 0, rc = wal_record_table(pRec, KV_REC_GID, KV_REC_GID_LEN);
  wal_put_u64(aMs, (uint64_t)p->iPreparedMs);
  if( rc==SQLITE_OK ) rc = wal_record_action(pRec, 0, p->zGid, p->nGid, aMs, 8);
  for(i=0; rc==SQLITE_OK && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    KvMapCursor *pCsr;
    KvMapEntry e, e2;
    int bOn;
    if( c->bSchema || c->pRead==0 || !c->pTab->meta.bPersist ) continue;
    if( !bReads ){
      rc = wal_record_table(pRec, KV_REC_READS, KV_REC_READS_LEN);
      bReads = 1;
    }
    if( (pCsr = kv_map_cursor_new(c->pRead))==0 ) rc = SQLITE_NOMEM;
    for(bOn=pCsr ? kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0) : 0;
        bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
      uint8_t aLen[4];
      kv_map_cursor_entry(pCsr, &e);
      if( kv_map_get(c->pWrite, e.aKey, e.nKey, &e2) ) continue;
      kv_buf_reset(&key);
      wal_put_u32(aLen, (uint32_t)c->pTab->nName);
      rc = kv_buf_append(&key, aLen, 4);
      if( rc==SQLITE_OK ) rc = kv_buf_append(&key, c->pTab->zName,
                                             c->pTab->nName);
      if( rc==SQLITE_OK ) rc = kv_buf_append(&key, e.aKey, e.nKey);
      if( rc==SQLITE_OK ) rc = wal_record_action(pRec, 1, key.a, key.n, 0, 0);
    }
    kv_map_cursor_free(pCsr);
  }
  kv_buf_free(&key);
  return rc;
}

/* How the root's record is flushed (kv_root_set_sync): KV_SYNC_NORMAL
** defers it, unless the record changes the catalog (saved at once after
** the commit, it must not outlive the record) or writes a table whose
** backend writes its files at publication (bWritesAtApply: kv_log) and
** another persistent table - the OS may write that file back before the
** WAL's, and a power loss would then keep the transaction in one table
** only - or is conditional or named (see below). */
static int txnSyncMode(KvRoot *p){
  int i, nLogged = 0, bAtApply = 0;
  if( p->eSync!=KV_SYNC_NORMAL ) return WAL_SYNC_FULL;
  /* A conditional record must be durable before the coordinator's file
  ** commits its marker, and a named prepared one before it is reported in
  ** doubt: both are always flushed. */
  if( p->zCond || p->zGid ) return WAL_SYNC_FULL;
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( !txnIsLogged(p, c) ) continue;
    if( c->bSchema ) return WAL_SYNC_FULL;
    nLogged++;
    bAtApply |= c->pTab->pBackend->bWritesAtApply;
  }
  return (bAtApply && nLogged>1) ? WAL_SYNC_FULL : WAL_SYNC_NORMAL;
}

/* Must root p's record be flushed before its publication writes a table's
** files (write-ahead)?  When it writes a table whose backend writes its
** files at publication (kv_log) and another persistent table: the OS may
** write that file back before the WAL's, and a power loss would then keep
** the transaction in one table only.  A record of one such table alone is
** all in that table's log or not there. */
static int txnWriteAhead(KvRoot *p){
  int i, nLogged = 0, bAtApply = 0;
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( !txnIsLogged(p, c) ) continue;
    nLogged++;
    bAtApply |= c->pTab->pBackend->bWritesAtApply;
  }
  return bAtApply && nLogged>1;
}

/* Append the root's persistent writes to the WAL (nothing if none).  The
** record waits for the confirmations of the tables txnIsPendingConfirm()
** names (at most nChild; a few fit on the stack). */
#define KV_LOG_STACK_NAMES 8
static int txnRootLog(KvRoot *p, char **pzErr){
  WalRecordBuilder *pRec;
  const char *azStack[KV_LOG_STACK_NAMES], **az = azStack;
  int anStack[KV_LOG_STACK_NAMES], *an = anStack;
  int i, n = 0, nPend = 0, rc = SQLITE_OK;
  for(i=0; i<p->nChild; i++) n += txnIsLogged(p, p->apChild[i]);
  if( n==0 && p->zGid==0 ) return SQLITE_OK;
  pRec = wal_record_new(p->tid);
  if( n+1>KV_LOG_STACK_NAMES ){
    az = sqlite3_malloc64((n+1)*sizeof(char*));
    an = sqlite3_malloc64((n+1)*sizeof(int));
  }
  if( pRec==0 || az==0 || an==0 ) rc = SQLITE_NOMEM;
  if( rc==SQLITE_OK && p->zCond ) rc = txnRecordCondition(pRec, p);
  if( rc==SQLITE_OK && p->zGid ){
    az[nPend] = KV_REC_GID;
    an[nPend++] = KV_REC_GID_LEN;
    rc = txnRecordGid(pRec, p);
  }
  for(i=0; rc==SQLITE_OK && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( !txnIsLogged(p, c) ) continue;
    if( txnIsPendingConfirm(p, c) ){
      az[nPend] = c->pTab->zName;
      an[nPend++] = c->pTab->nName;
    }
    rc = txnRecordTable(pRec, c);
  }
  if( rc==SQLITE_OK && p->bWriterLock ){
    /* A shared store: continue the log where the last writer left it. */
    WalPos pos;
    uint64_t cid;
    pthread_mutex_lock(&p->pEng->mutex);
    pos = p->pEng->posSeen;
    cid = p->pEng->cidSeen;
    pthread_mutex_unlock(&p->pEng->mutex);
    rc = wal_adopt_tail(p->pEng->pWal, &pos, cid, pzErr);
  }
  if( rc==SQLITE_OK ){
    int eSync = txnSyncMode(p);
    if( eSync==WAL_SYNC_FULL && p->bWriterLock && !p->zCond && !p->zGid
     && !txnWriteAhead(p) ){
      /* A shared store: the flush waits until the writer lock is let go
      ** (kv_root_commit), so that other processes' writers append while it
      ** runs and flushes overlap (a record that needs write-ahead is
      ** flushed here, before its publication writes a table's files). */
      eSync = WAL_SYNC_NORMAL;
      p->bFlushAfter = 1;
    }
    rc = wal_append_sync(p->pEng->pWal, pRec, eSync, nPend, az, an,
                         &p->cid, pzErr);
    if( rc==SQLITE_OK ) p->bAppended = 1;
  }
  wal_record_free(pRec);
  if( az!=azStack ) sqlite3_free(az);
  if( an!=anStack ) sqlite3_free(an);
  return rc;
}

/* Before the WAL append: can every table the root writes take its writes
** at publication?  (A backend that knows it would refuse them - a kv_log
** table whose log failed - fails the prepare here, with nothing logged,
** instead of failing the publication after the WAL flush.) */
static int txnCheckWritable(KvRoot *p, char **pzErr){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    KvTable *t = c->pTab;
    if( c->bSchema || t->pData==0 || t->pBackend->xCheckWrite==0
     || kv_map_count(c->pWrite)==0 ){
      continue;
    }
    rc = t->pBackend->xCheckWrite(t->pData, pzErr);
  }
  return rc;
}

int kv_root_prepare(KvRoot *p, char **pzErr){
  int rc = txnRootUsable(p, pzErr);
  if( rc==SQLITE_OK ) rc = kv_root_protocol(p, KV_PROTO_ORDINARY, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  return kvRootPrepareEx(p, 0, 0, pzErr);
}

/* Open the data files of every table this root creates, before its record
** is logged: a backend that cannot create or open its files (an I/O error)
** fails the prepare with that error, so a commit never publishes a table
** whose data it cannot reach.  A root that then fails (its WAL append) or
** is rolled back deletes them again (txnDropNewTableFiles). */
static int txnOpenNewTables(KvRoot *p, char **pzErr){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<p->nNew; i++){
    KvTable *t = p->apNew[i], *pOwn = 0;
    if( t->pData ) continue;
    if( txnOwnSchema(p, t->zName, t->nName, &pOwn)!=1 || pOwn!=t ) continue;
    rc = kvTableOpenData(t, 1, pzErr);
  }
  return rc;
}

/* The in-doubt root holding table zTab among its children, or NULL.
** Engine mutex held. */
static KvRoot *txnInDoubtHolder(KvEngine *pEng, const uint8_t *aTab, int nTab){
  KvRoot *q;
  int i;
  for(q=pEng->pInDoubt; q; q=q->pNextInDoubt){
    for(i=0; i<q->nChild; i++){
      KvTable *t = q->apChild[i]->pTab;
      if( !q->apChild[i]->bSchema && t && t->nName==nTab
       && memcmp(t->zName, aTab, nTab)==0 ){
        return q;
      }
    }
  }
  return 0;
}

/* SQLITE_BUSY with *pzErr naming the gid if root p removes a table that an
** in-doubt root (or one being prepared under a gid) writes or reads, else
** SQLITE_OK: its commit or replay needs the table.  Engine mutex held. */
static int txnInDoubtRemoveCheck(KvRoot *p, char **pzErr){
  KvEngine *pEng = p->pEng;
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  if( !p->bRemove || p->pSchema==0 || pEng->pInDoubt==0 ) return SQLITE_OK;
  if( (pCsr = kv_map_cursor_new(p->pSchema->pWrite))==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    KvRoot *q;
    kv_map_cursor_entry(pCsr, &e);
    if( !e.bTomb || (q = txnInDoubtHolder(pEng, e.aKey, e.nKey))==0 ) continue;
    *pzErr = sqlite3_mprintf("kv: table %.*s cannot be removed: prepared "
        "transaction '%.*s' is in doubt and uses it; resolve it first "
        "(kv_commit_prepared or kv_rollback_prepared)", e.nKey, e.aKey,
        q->nGid, q->zGid);
    rc = *pzErr ? SQLITE_BUSY : SQLITE_NOMEM;
  }
  kv_map_cursor_free(pCsr);
  return rc;
}

/* Does root p append to the WAL at prepare (so, in a shared store, take
** the writer lock)? */
static int txnNeedsWriter(KvRoot *p){
  int i;
  if( p->pEng->pWal==0 ) return 0;
  if( p->zGid ) return 1;
  for(i=0; i<p->nChild; i++){
    if( txnIsLogged(p, p->apChild[i]) ) return 1;
  }
  return 0;
}

/* A shared store: refuse what processes cannot share, then take the
** writer lock (the busy timeout bounds the wait).  Engine mutex not held. */
static int txnSharedLock(KvRoot *p, char **pzErr){
  KvEngine *pEng = p->pEng;
  if( p->zGid ){
    /* indoubt.c takes the lock first; the store turned shared since */
    *pzErr = sqlite3_mprintf("kv: store %s turned shared by several "
        "processes during the named prepare; retry it", pEng->zDir);
    return SQLITE_BUSY;
  }
  if( kvEngineWriterLock(pEng, p->msBusy, pzErr)!=SQLITE_OK ){
    return SQLITE_BUSY;
  }
  p->bWriterLock = 1;
  return SQLITE_OK;
}

/* A store opened read-only (kv_engine_open_readonly) takes no writes. */
static int txnReadOnlyCheck(KvRoot *p, char **pzErr){
  int i;
  if( !p->pEng->bReadOnly ) return SQLITE_OK;
  for(i=0; i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( kv_map_count(c->pWrite)>0 || kv_map_count(c->pDelta)>0 ){
      *pzErr = sqlite3_mprintf("kv: store %s is open read-only in this "
          "process: table %s cannot be written", p->pEng->zDir,
          c->pTab->zName);
      txnRootFinish(p, KV_ROOT_FAILED);
      return SQLITE_READONLY;
    }
  }
  return SQLITE_OK;
}

int kvRootPrepareEx(KvRoot *p, int (*xCheck)(KvRoot*, void*), void *pArg,
                    char **pzErr){
  KvEngine *pEng = p->pEng;
  int rc = txnRootUsable(p, pzErr);
  if( rc==SQLITE_OK ) rc = txnReadOnlyCheck(p, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  for(;;){
    pthread_mutex_lock(&pEng->mutex);
    kvEngineShareWait(pEng);
    if( !pEng->bShared || p->bWriterLock || !txnNeedsWriter(p) ) break;
    pthread_mutex_unlock(&pEng->mutex);
    rc = txnSharedLock(p, pzErr);
    if( rc!=SQLITE_OK ){
      txnRootFinish(p, KV_ROOT_FAILED);
      return rc;
    }
  }
  rc = kvEngineCatchUp(pEng, p->bWriterLock, pzErr);
  if( rc==SQLITE_OK ) rc = txnDeltaWait(p);
  if( rc==SQLITE_OK && xCheck ) rc = xCheck(p, pArg);
  if( rc==SQLITE_OK ) rc = txnInDoubtRemoveCheck(p, pzErr);
  if( rc==SQLITE_OK ) rc = txnCheckRoot(p);
  if( rc==SQLITE_OK && p->nConflict==0 ) rc = txnDeltaResolve(p);
  if( rc==SQLITE_OK && p->nConflict==0 ){
    p->eState = KV_ROOT_PREPARED;
    p->pNextPrepared = pEng->pPrepared;
    pEng->pPrepared = p;
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && p->nConflict>0 ){
    txnConflictSort(p);
    *pzErr = txnConflictMessage(p);
    rc = SQLITE_BUSY_SNAPSHOT;
  }
  if( rc==SQLITE_OK ) rc = kvDdlPrepare(p, pzErr);   /* shared: ddl.c */
  if( rc==SQLITE_OK ) rc = txnCheckWritable(p, pzErr);
  if( rc==SQLITE_OK ) rc = txnOpenNewTables(p, pzErr);
  if( rc==SQLITE_OK ) rc = txnRootLog(p, pzErr);
  if( rc!=SQLITE_OK ){
    txnDropNewTableFiles(p);
    txnRootFinish(p, KV_ROOT_FAILED);
  }
  return rc;
}

/* ------------------------------------------------------------ commit --- */

/* Drop the revisions of table t no active child can need (engine mutex):
** a revision only ever conflicts with a child whose snapshot is older, and
** a child's iSnap never decreases, while new children bind at the current
** sequence.  So entries at or below the oldest iSnap of t's active children
** go.  Runs when pRev has doubled since the last pass (amortised O(1) per
** recorded revision), so under a busy workload, where t is never idle and
** pRev is never dropped whole, it stays proportional to the commits the
** open transactions overlap.  Out of memory keeps pRev as it was. */
static void txnRevPrune(KvTable *t){
  KvMapCursor *pCsr;
  KvMapEntry e;
  KvMap *pNew;
  KvChild *c;
  uint64_t iMin = UINT64_MAX;
  int bOn, rc = SQLITE_OK;
  if( kv_map_count(t->pRev) < 2*t->nRevKept + 256 ) return;
  for(c=t->pActFirst; c; c=c->pActNext){
    if( c->iSnap<iMin ) iMin = c->iSnap;
  }
  if( (pNew = kv_map_new())==0 ) return;
  if( (pCsr = kv_map_cursor_new(t->pRev))==0 ){ kv_map_unref(pNew); return; }
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    if( e.rev>iMin ) rc = kv_map_put_from(&pNew, pCsr, e.rev, 0);
  }
  kv_map_cursor_free(pCsr);
  if( rc!=SQLITE_OK ){ kv_map_unref(pNew); return; }
  kv_map_unref(t->pRev);
  t->pRev = pNew;
  t->nRevKept = kv_map_count(pNew);
}

/* Record the revisions of c's writes when other children may check them. */
static int txnNoteRevisions(KvChild *c, uint64_t iSeq){
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  if( c->pTab->nActive<=1 ) return SQLITE_OK;
  if( c->pTab->pRev==0 && (c->pTab->pRev = kv_map_new())==0 ) return SQLITE_NOMEM;
  pCsr = kv_map_cursor_new(c->pWrite);
  if( pCsr==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    rc = kv_map_put(&c->pTab->pRev, e.aKey, e.nKey, 0, 0, iSeq, 0);
  }
  kv_map_cursor_free(pCsr);
  if( rc==SQLITE_OK ) txnRevPrune(c->pTab);
  return rc;
}

#ifdef DEPOT_TEST
static int txnApplyFault = 0;     /* kv_engine_test_fail_apply */

void kv_engine_test_fail_apply(int n){
  __atomic_store_n(&txnApplyFault, n, __ATOMIC_SEQ_CST);
}

/* Should this xApply fail (kv_engine_test_fail_apply)? */
static int txnApplyFaultNow(void){
  return __atomic_load_n(&txnApplyFault, __ATOMIC_SEQ_CST)>0
      && __atomic_sub_fetch(&txnApplyFault, 1, __ATOMIC_SEQ_CST)==0;
}
#else
# define txnApplyFaultNow() 0
#endif

/* Make every write visible at one new sequence number (engine mutex). */
static int txnPublish(KvRoot *p, char **pzErr){
  KvEngine *pEng = p->pEng;
  uint64_t iSeq = ++pEng->iSeq;
  int i, rc = SQLITE_OK;
  kvVersionSnapDrop(pEng);
  if( p->pSchema && kv_map_count(p->pSchema->pWrite)>0 ){
    rc = kvCatalogApply(pEng, p->pSchema->pWrite, iSeq, p->apNew, p->nNew,
                        pzErr);
  }
  for(i=0; rc==SQLITE_OK && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( c->bSchema || c->pTab->pData==0 || kv_map_count(c->pWrite)==0 ){
      continue;
    }
    if( c->pSnap ){
      /* Done reading: without this reference the backend may update its
      ** published version in place. */
      c->pTab->pBackend->xSnapshotFree(c->pSnap);
      c->pSnap = 0;
    }
    rc = kvHookCapture(p, c->pTab, c->pWrite, iSeq);   /* before xApply */
    if( rc==SQLITE_OK ){
      rc = txnApplyFaultNow() ? SQLITE_NOMEM
         : c->pTab->pBackend->xApply(c->pTab->pData, c->pWrite, iSeq, p->cid);
    }
    if( rc!=SQLITE_OK && *pzErr==0 ) *pzErr = kvApplyErrmsg(c->pTab, rc);
    if( rc==SQLITE_OK ) rc = txnNoteRevisions(c, iSeq);
    if( rc==SQLITE_OK ) rc = kvVersionPublish(p, c->pTab, c->pWrite);
  }
  txnUnlinkPrepared(p);
  return rc;
}

/* After publication: confirm the WAL record for every table whose effects
** are durable now.  Failures leave the record unconfirmed (it is replayed
** at the next open) and are logged, not returned: the commit stands. */
static void txnConfirm(KvRoot *p){
  int i, rc;
  for(i=0; p->cid && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    char *zErr = 0;
    if( !txnIsPendingConfirm(p, c) ) continue;
    if( c->bSchema ){
      rc = kvCatalogSave(p->pEng, &zErr);
      if( rc!=SQLITE_OK ){
        sqlite3_log(rc, "%s (record %llu stays in the WAL)", zErr,
                    (unsigned long long)p->cid);
        sqlite3_free(zErr);
        continue;
      }
    }else if( c->pTab->pData==0
           || !c->pTab->pBackend->xDurable(c->pTab->pData, p->cid) ){
      continue;
    }
    wal_confirm(p->pEng->pWal, p->cid, c->pTab->zName, c->pTab->nName);
  }
}

/* The flush of a shared store's commit, after its writer lock went: the
** commit returns once its record is durable (a flush of another thread
** of the process may already cover it; concurrent flushes of several
** processes overlap in the file system).  A failed flush fails the
** commit and puts the store in its failed state: the commit is published
** already, but may not outlive a power loss. */
static int txnFlushAfter(KvRoot *p, char **pzErr){
  int rc = kvEngineFlushShared(p->pEng, p->cid, &p->posEnd, pzErr);
  p->bFlushAfter = 0;
  if( rc!=SQLITE_OK ){
    pthread_mutex_lock(&p->pEng->mutex);
    kvEngineFail(p->pEng, rc, p->cid, pzErr);
    pthread_mutex_unlock(&p->pEng->mutex);
  }
  return rc;
}

int kv_root_commit(KvRoot *p, char **pzErr){
  int rc = SQLITE_OK;
  if( p->eState==KV_ROOT_ACTIVE ) rc = kv_root_prepare(p, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( p->eState!=KV_ROOT_PREPARED ) return txnRootUsable(p, pzErr);
  if( p->eProto==KV_PROTO_VERSIONED && p->pReceipts==0 ){
    *pzErr = sqlite3_mprintf("kv: %s %llu was prepared with "
        "kv_prepare_with_version; finish it with kv_commit_with_version",
        kv_root_who(p), kv_root_who_id(p));
    return SQLITE_MISUSE;
  }
  kvDdlTestPoint(p, 0);
  pthread_mutex_lock(&p->pEng->mutex);
  rc = kvEngineFailed(p->pEng, pzErr);
  if( rc==SQLITE_OK ){
    rc = txnPublish(p, pzErr);
    if( rc!=SQLITE_OK ) kvEngineFail(p->pEng, rc, p->cid, pzErr);
  }
  if( rc==SQLITE_OK && p->bWriterLock && p->pSchema
   && kv_map_count(p->pSchema->pWrite)>0 ){
    /* A shared store: the catalog file holds the change before the tail
    ** that covers it is published (a joiner reads the tail, then the
    ** file: ddl.c). */
    char *zErr = 0;
    if( kvCatalogSaveLocked(p->pEng, &zErr)!=SQLITE_OK ){
      sqlite3_log(SQLITE_IOERR, "%s", zErr ? zErr : "kv: catalog file");
    }
    sqlite3_free(zErr);
  }
  kvDdlTestPoint(p, 1);
  if( p->bWriterLock ){
    if( rc==SQLITE_OK && p->bAppended ){
      char *zErr = 0;
      if( kvEnginePublishTail(p->pEng, &zErr)!=SQLITE_OK ){
        sqlite3_log(SQLITE_IOERR, "%s", zErr ? zErr : "kv: tail");
      }
      sqlite3_free(zErr);
      wal_tail(p->pEng->pWal, &p->posEnd, 0);   /* where its record ends */
    }
    p->bPubFailed = rc!=SQLITE_OK;
  }
  kvHookPublished(p, rc);
  pthread_mutex_unlock(&p->pEng->mutex);
  if( rc==SQLITE_OK ) txnConfirm(p);
  txnRootFinish(p, rc==SQLITE_OK ? KV_ROOT_DONE : KV_ROOT_FAILED);
  if( rc==SQLITE_OK && p->bFlushAfter ) rc = txnFlushAfter(p, pzErr);
  kvHookDeliver(p);              /* write hooks, outside the engine mutex */
  return rc;
}

/* -------------------------------------------------------- savepoints --- */

int kv_root_savepoint(KvRoot *p, int iLevel){
  KvSavepoint *a;
  if( p->eState!=KV_ROOT_ACTIVE ) return SQLITE_OK;
  if( p->nSp>0 && p->aSp[p->nSp-1].iLevel>=iLevel ) return SQLITE_OK;
  if( (p->nSp & 7)==0 ){            /* room in steps of 8 */
    a = sqlite3_realloc64(p->aSp, (p->nSp+8)*sizeof(KvSavepoint));
    if( a==0 ) return SQLITE_NOMEM;
    p->aSp = a;
  }
  p->aSp[p->nSp].iLevel = iLevel;
  p->aSp[p->nSp].iUndo = p->undo.n;
  p->nSp++;
  return SQLITE_OK;
}

void kv_root_release(KvRoot *p, int iLevel){
  int n = p->nSp;
  while( n>0 && p->aSp[n-1].iLevel>=iLevel ) n--;
  txnSavepointsClear(p, n);
}

/* Back to the write sets as they were when savepoint iLevel was opened.
** A savepoint with no record here was opened before the root began: SQLite
** tells a table that joins a transaction only the innermost level open at
** that moment (which may be the joining statement's own, released when
** it ends), and numbers the SAVEPOINT that began the transaction -1.  For
** such a savepoint the root goes back to no writes at all. */
void kv_root_rollback_to(KvRoot *p, int iLevel){
  int i, n = 0;
  if( p->eState!=KV_ROOT_ACTIVE ) return;
  while( n<p->nSp && p->aSp[n].iLevel<iLevel ) n++;
  if( n<p->nSp && p->aSp[n].iLevel==iLevel ){
    p->nSp = n+1;                      /* it stays open */
    txnUndoTo(p, p->aSp[n].iUndo);
    return;
  }
  txnSavepointsClear(p, n);
  for(i=0; i<p->nChild; i++){
    KvMap *pOld = kv_map_new();
    KvMap *pD = 0;
    if( pOld==0 ) continue;             /* OOM: keep the newer writes */
    kv_map_unref(p->apChild[i]->pWrite);
    p->apChild[i]->pWrite = pOld;
    kv_map_unref(p->apChild[i]->pDelta);
    p->apChild[i]->pDelta = pD ? kv_map_ref(pD) : 0;
  }
}

/* ---------------------------------- named prepares, shared store --- */

void kvRootWriterRelease(KvRoot *p){
  txnWriterRelease(p);
}

int kvRootLogGidDone(KvRoot *p, char **pzErr){
  KvEngine *pEng = p->pEng;
  WalRecordBuilder *pRec = wal_record_new(p->tid);
  const char **az = sqlite3_malloc64((p->nChild+1)*sizeof(char*));
  int *an = sqlite3_malloc64((p->nChild+1)*sizeof(int));
  uint8_t aCid[8];
  uint64_t cid = 0, cidNew = 0;
  WalPos pos;
  int i, nPend = 0, rc = SQLITE_OK;
  if( pRec==0 || az==0 || an==0 ) rc = SQLITE_NOMEM;
  wal_put_u64(aCid, p->cid);
  if( rc==SQLITE_OK ){
    rc = wal_record_table(pRec, KV_REC_GID_DONE, KV_REC_GID_DONE_LEN);
  }
  if( rc==SQLITE_OK ) rc = wal_record_action(pRec, 0, p->zGid, p->nGid, aCid, 8);
  for(i=0; rc==SQLITE_OK && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( !txnIsLogged(p, c) ) continue;
    if( txnIsPendingConfirm(p, c) ){
      az[nPend] = c->pTab->zName;
      an[nPend++] = c->pTab->nName;
    }
    rc = txnRecordTable(pRec, c);
  }
  if( rc==SQLITE_OK ){
    /* continue the log where the last writer left it */
    pthread_mutex_lock(&pEng->mutex);
    pos = pEng->posSeen;
    cid = pEng->cidSeen;
    pthread_mutex_unlock(&pEng->mutex);
    rc = wal_adopt_tail(pEng->pWal, &pos, cid, pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = wal_append_sync(pEng->pWal, pRec, WAL_SYNC_FULL, nPend, az, an,
                         &cidNew, pzErr);
  }
  if( rc==SQLITE_OK ){
    p->cid = cidNew;
    p->bAppended = 1;
  }
  wal_record_free(pRec);
  sqlite3_free(az);
  sqlite3_free(an);
  return rc;
}
