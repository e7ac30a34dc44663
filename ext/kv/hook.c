/*
** hook.c -- write hooks (kv.h, "hooks"): registration, the xInit pass
** over a snapshot of the table, and the delivery of published writes to
** xWrite in commit order, outside the engine's locks.
**
** Capture.  A commit's publication (txn.c, engine mutex held) calls
** kvHookCapture for each table it applies: for a table with hooks that
** want xWrite it keeps a reference to the root's write set and, when one
** of them wants old values, a snapshot of the table taken just before
** xApply (the committed state the commit replaces).  When the whole
** publication succeeded, kvHookPublished appends those events to the
** store's queue, still under the engine mutex, so the queue is in commit
** (publication) order; a failed publication discards them.
**
** Delivery.  After kv_root_commit has released the engine mutex, the
** committing thread calls kvHookDeliver: if no thread is delivering, it
** becomes the store's deliverer and pops events until the queue is empty,
** calling the hooks with no lock held; otherwise it waits until the
** deliverer has passed its sequence.  A thread that is inside a callback
** never waits (hookDepth): its commits are delivered by the deliverer
** already running, after the callback returns, so a callback may commit
** to the store without deadlocking.  Registration with NEEDS_INIT takes
** the deliverer role first, so no xWrite overtakes the xInit pass.
**
** Locking: KvHookStore.mutex (the hook mutex) guards the hook list, the
** queue, the deliverer flag, pCalling and the hooks' reference counts.  It
** is taken after the engine mutex (publication, registration), never
** before it, and is not held during a callback.  KvHook.bDead is written
** under it and also read without it (atomics), so that a delivery stops at
** the next key once a hook is unregistered.  KvTable.nHookWrite and
** nHookOld change under both mutexes and are read under the engine mutex.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>

#define HOOK_FLAGS (KV_HOOK_NEEDS_OLD_VALUE|KV_HOOK_NEEDS_INIT \
                    |KV_HOOK_NEEDS_WRITE)

struct KvHook {
  KvEngine *pEng;               /* holds a reference */
  KvTable *pTab;                /* holds a reference (engine mutex) */
  int flags;                    /* KV_HOOK_* */
  KvHookMethods m;
  void *pArg;
  uint64_t iStartSeq;           /* xWrite for commits published after it */
  int bDead;                    /* unregistered (atomic) */
  int bRemoveQueued;            /* its table's removal is queued */
  int nRef;                     /* the list's + one per delivery in flight */
  KvHook *pNext;                /* the store's list */
};

/* The writes of one table of one published commit, or (pWrite NULL) the
** removal of a hooked table. */
struct KvHookEvent {
  uint64_t iSeq;                /* the commit's sequence */
  KvTable *pTab;                /* holds a reference (engine mutex) */
  KvMap *pWrite;                /* holds a reference */
  KvBackendSnap *pOld;          /* pTab just before the commit, or NULL */
  KvHookEvent *pNext;
};

struct KvHookStore {
  pthread_mutex_t mutex;
  pthread_cond_t cond;          /* iDone moved, a delivery or call ended */
  KvHook *pList;
  KvHookEvent *pFirst, *pLast;  /* undelivered, in commit order */
  uint64_t iDone;               /* commits up to this one are delivered */
  int bDelivering;              /* a thread is the deliverer */
  KvHook *pCalling;             /* the hook it is calling now, or NULL */
};

/* Hook callbacks running on this thread (nested ones included). */
static __thread int hookDepth = 0;

/* ------------------------------------------------------------ store --- */

static void hookStoreFree(KvEngine*);

/* The store's hook state, made at the first registration (engine mutex
** held).  NULL on OOM. */
static KvHookStore *hookStoreLocked(KvEngine *pEng){
  KvHookStore *s = pEng->pHook;
  if( s ) return s;
  if( (s = sqlite3_malloc64(sizeof(*s)))==0 ) return 0;
  memset(s, 0, sizeof(*s));
  pthread_mutex_init(&s->mutex, 0);
  pthread_cond_init(&s->cond, 0);
  pEng->pHook = s;
  pEng->xHookFree = hookStoreFree;
  return s;
}

/* Free an event (engine mutex held: the table reference). */
static void hookEventFreeLocked(KvHookEvent *ev){
  if( ev->pOld ) ev->pTab->pBackend->xSnapshotFree(ev->pOld);
  kv_map_unref(ev->pWrite);
  kvTableUnref(ev->pTab);
  sqlite3_free(ev);
}

/* Free an event with no lock held. */
static void hookEventFree(KvEngine *pEng, KvHookEvent *ev){
  if( ev->pOld ) ev->pTab->pBackend->xSnapshotFree(ev->pOld);
  ev->pOld = 0;
  pthread_mutex_lock(&pEng->mutex);
  hookEventFreeLocked(ev);
  pthread_mutex_unlock(&pEng->mutex);
}

/* KvEngine.xHookFree: the store closes, with no hook registered (each
** holds a reference on it). */
static void hookStoreFree(KvEngine *pEng){
  KvHookStore *s = pEng->pHook;
  if( s==0 ) return;
  while( s->pFirst ){              /* none: commits deliver before return */
    KvHookEvent *ev = s->pFirst;
    s->pFirst = ev->pNext;
    hookEventFreeLocked(ev);
  }
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->mutex);
  sqlite3_free(s);
  pEng->pHook = 0;
}

/* ------------------------------------------------------------- hooks --- */

static int hookIsDead(KvHook *h){
  return __atomic_load_n(&h->bDead, __ATOMIC_ACQUIRE);
}

/* Count h in (d=1) or out of (d=-1) its table's counters.  Both mutexes
** held. */
static void hookCount(KvHook *h, int d){
  if( h->flags & KV_HOOK_NEEDS_WRITE ){
    h->pTab->nHookWrite += d;
    if( h->flags & KV_HOOK_NEEDS_OLD_VALUE ) h->pTab->nHookOld += d;
  }
}

/* Drop a reference to h (hook mutex NOT held); the last frees it. */
static void hookUnref(KvHook *h){
  KvHookStore *s = h->pEng->pHook;
  int bFree;
  pthread_mutex_lock(&s->mutex);
  bFree = --h->nRef==0;
  pthread_mutex_unlock(&s->mutex);
  if( bFree ){
    KvEngine *pEng = h->pEng;
    pthread_mutex_lock(&pEng->mutex);
    kvTableUnref(h->pTab);
    pthread_mutex_unlock(&pEng->mutex);
    if( h->m.xDestroy ) h->m.xDestroy(h->pArg);
    sqlite3_free(h);
    kv_engine_unref(pEng);
  }
}

/* Take h off the list and out of its table's counters (both mutexes
** held); marks it dead. */
static void hookUnlinkLocked(KvHookStore *s, KvHook *h){
  KvHook **pp;
  __atomic_store_n(&h->bDead, 1, __ATOMIC_RELEASE);
  for(pp=&s->pList; *pp; pp=&(*pp)->pNext){
    if( *pp==h ){
      *pp = h->pNext;
      hookCount(h, -1);
      break;
    }
  }
}

/* ---------------------------------------------------------- capture --- */

int kvHookCapture(KvRoot *p, KvTable *t, KvMap *pWrite, uint64_t iSeq){
  KvHookEvent *ev, **pp;
  int rc = SQLITE_OK;
  if( t->nHookWrite==0 ) return SQLITE_OK;
  ev = sqlite3_malloc64(sizeof(*ev));
  if( ev==0 ) return SQLITE_NOMEM;
  memset(ev, 0, sizeof(*ev));
  ev->iSeq = iSeq;
  ev->pTab = t;
  t->nRef++;
  ev->pWrite = kv_map_ref(pWrite);
  if( t->nHookOld>0 ) rc = t->pBackend->xSnapshot(t->pData, &ev->pOld);
  if( rc!=SQLITE_OK ){
    hookEventFreeLocked(ev);
    return rc;
  }
  for(pp=&p->pHookEv; *pp; pp=&(*pp)->pNext){}
  *pp = ev;
  return SQLITE_OK;
}

/* Queue ev (hook mutex held). */
static void hookQueue(KvHookStore *s, KvHookEvent *ev){
  ev->pNext = 0;
  if( s->pLast ) s->pLast->pNext = ev; else s->pFirst = ev;
  s->pLast = ev;
}

/* The root removed tables: queue one removal event for each removed table
** that has a hook with xRemoved (both mutexes held).  Out of memory loses
** the xRemoved call, which is logged. */
static void hookQueueRemovals(KvRoot *p, KvHookStore *s){
  KvHook *h, *g;
  for(h=s->pList; h; h=h->pNext){
    KvHookEvent *ev;
    if( h->pTab->bLive || h->bRemoveQueued ) continue;
    for(g=s->pList; g; g=g->pNext){
      if( g->pTab==h->pTab ) g->bRemoveQueued = 1;
    }
    ev = sqlite3_malloc64(sizeof(*ev));
    if( ev==0 ){
      sqlite3_log(SQLITE_NOMEM, "kv: hooks of removed table %s get no "
                  "xRemoved call (out of memory)", h->pTab->zName);
      continue;
    }
    memset(ev, 0, sizeof(*ev));
    ev->iSeq = p->pEng->iSeq;
    ev->pTab = h->pTab;
    h->pTab->nRef++;
    hookQueue(s, ev);
    p->iHookSeq = ev->iSeq;
  }
}

void kvHookPublished(KvRoot *p, int rc){
  KvHookStore *s = p->pEng->pHook;
  KvHookEvent *ev = p->pHookEv;
  p->pHookEv = 0;
  if( rc!=SQLITE_OK ){
    while( ev ){
      KvHookEvent *pNext = ev->pNext;
      hookEventFreeLocked(ev);
      ev = pNext;
    }
    return;
  }
  if( ev==0 && (p->bRemove==0 || s==0 || s->pList==0) ) return;
  pthread_mutex_lock(&s->mutex);
  while( ev ){
    KvHookEvent *pNext = ev->pNext;
    p->iHookSeq = ev->iSeq;
    hookQueue(s, ev);
    ev = pNext;
  }
  if( p->bRemove ) hookQueueRemovals(p, s);
  pthread_mutex_unlock(&s->mutex);
}

/* --------------------------------------------------------- delivery --- */

/* The old value of aKey for hook delivery: from the snapshot taken before
** the commit.  *pbFound=0 when absent; a read failure is logged and
** reported as absent. */
static void hookOldValue(KvHookEvent *ev, const uint8_t *aKey, int nKey,
                         int *pbFound, KvMapEntry *pE){
  const KvBackend *pB = ev->pTab->pBackend;
  int rc = pB->xGet(ev->pOld, aKey, nKey, pbFound, pE);
  if( rc!=SQLITE_OK ){
    char *zErr = 0, *zKey = kv_key_describe(aKey, nKey);
    if( pB->xGetError ) pB->xGetError(ev->pOld, &zErr);
    sqlite3_log(rc, "kv: write hook of table %s: the old value of key %s "
                "cannot be read, reported as absent: %s", ev->pTab->zName,
                zKey ? zKey : "?", zErr ? zErr : sqlite3_errstr(rc));
    sqlite3_free(zErr);
    sqlite3_free(zKey);
    *pbFound = 0;
  }
}

/* Call h->m.xWrite for every key of ev's write set, stopping early if h
** is unregistered meanwhile.  No lock held. */
static void hookCallWrite(KvHook *h, KvHookEvent *ev){
  int bOld = (h->flags & KV_HOOK_NEEDS_OLD_VALUE) && ev->pOld;
  KvMapCursor *pCsr = kv_map_cursor_new(ev->pWrite);
  KvMapEntry e, o;
  int bOn;
  if( pCsr==0 ){
    sqlite3_log(SQLITE_NOMEM, "kv: write hook of table %s misses commit "
                "%llu (out of memory)", ev->pTab->zName,
                (unsigned long long)ev->iSeq);
    return;
  }
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && !hookIsDead(h); bOn=kv_map_cursor_next(pCsr)){
    int bFound = 0;
    kv_map_cursor_entry(pCsr, &e);
    if( bOld ) hookOldValue(ev, e.aKey, e.nKey, &bFound, &o);
    if( bOld && !bFound && e.bTomb ) continue;   /* deleted nothing */
    h->m.xWrite(h->pArg, e.aKey, e.nKey,
                bFound ? o.aVal : 0, bFound ? o.nVal : 0,
                e.bTomb ? 0 : e.aVal, e.bTomb ? 0 : e.nVal);
  }
  kv_map_cursor_free(pCsr);
}

/* Collect the hooks event ev goes to, each with a reference (hook mutex
** held).  Returns their number, -1 on OOM. */
static int hookTargets(KvHookStore *s, KvHookEvent *ev, KvHook ***papHook){
  KvHook *h, **ap;
  int n = 0;
  *papHook = 0;
  for(h=s->pList; h; h=h->pNext) n++;
  if( n==0 ) return 0;
  ap = sqlite3_malloc64(n*sizeof(KvHook*));
  if( ap==0 ) return -1;
  n = 0;
  for(h=s->pList; h; h=h->pNext){
    if( h->pTab!=ev->pTab || h->iStartSeq>=ev->iSeq ) continue;
    if( ev->pWrite ? !(h->flags & KV_HOOK_NEEDS_WRITE) : !h->m.xRemoved ){
      continue;
    }
    h->nRef++;
    ap[n++] = h;
  }
  *papHook = ap;
  return n;
}

/* Deliver event ev to every hook it goes to (hook mutex held on entry and
** on return, released around the calls). */
static void hookDeliverEvent(KvEngine *pEng, KvHookStore *s, KvHookEvent *ev){
  KvHook **apHook;
  int i, n = hookTargets(s, ev, &apHook);
  if( n<0 ){
    sqlite3_log(SQLITE_NOMEM, "kv: write hooks of table %s miss commit %llu "
                "(out of memory)", ev->pTab->zName,
                (unsigned long long)ev->iSeq);
  }
  for(i=0; i<n; i++){
    KvHook *h = apHook[i];
    if( hookIsDead(h) ) continue;
    s->pCalling = h;
    pthread_mutex_unlock(&s->mutex);
    hookDepth++;
    if( ev->pWrite ) hookCallWrite(h, ev);
    else h->m.xRemoved(h->pArg);
    hookDepth--;
    pthread_mutex_lock(&s->mutex);
    s->pCalling = 0;
    pthread_cond_broadcast(&s->cond);
  }
  pthread_mutex_unlock(&s->mutex);
  for(i=0; i<n; i++) hookUnref(apHook[i]);
  sqlite3_free(apHook);
  hookEventFree(pEng, ev);
  pthread_mutex_lock(&s->mutex);
}

/* As the deliverer (hook mutex held, s->bDelivering set by the caller):
** deliver every queued event, then give up the role. */
static void hookDrain(KvEngine *pEng, KvHookStore *s){
  KvHookEvent *ev;
  while( (ev = s->pFirst)!=0 ){
    uint64_t iSeq = ev->iSeq;
    s->pFirst = ev->pNext;
    if( s->pFirst==0 ) s->pLast = 0;
    hookDeliverEvent(pEng, s, ev);
    /* A commit's events are queued together: it is done when the next
    ** event belongs to a later commit. */
    if( s->pFirst==0 || s->pFirst->iSeq!=iSeq ) s->iDone = iSeq;
  }
  s->bDelivering = 0;
  pthread_cond_broadcast(&s->cond);
}

void kvHookDeliver(KvRoot *p){
  KvEngine *pEng = p->pEng;
  KvHookStore *s = pEng->pHook;
  uint64_t iSeq = p->iHookSeq;
  if( iSeq==0 ) return;
  p->iHookSeq = 0;
  pthread_mutex_lock(&s->mutex);
  while( s->iDone<iSeq ){
    if( !s->bDelivering ){
      s->bDelivering = 1;
      hookDrain(pEng, s);
    }else if( hookDepth>0 ){
      break;                      /* the running deliverer gets to it */
    }else{
      pthread_cond_wait(&s->cond, &s->mutex);
    }
  }
  pthread_mutex_unlock(&s->mutex);
}

/* ------------------------------------------------------ registration --- */

static int hookMisuse(char **pzErr, const char *zWhy){
  if( pzErr ) *pzErr = sqlite3_mprintf("kv_hook_register: %s", zWhy);
  return SQLITE_MISUSE;
}

/* The checks of kv_hook_register that need no store. */
static int hookCheckArgs(KvEngine *pEng, const char *zTab, int flags,
                         const KvHookMethods *pM, KvHook **ppHook,
                         char **pzErr){
  if( pEng==0 ) return hookMisuse(pzErr, "store is NULL");
  if( zTab==0 ) return hookMisuse(pzErr, "table name is NULL");
  if( pM==0 ) return hookMisuse(pzErr, "methods are NULL");
  if( ppHook==0 ) return hookMisuse(pzErr, "ppHook is NULL");
  if( flags & ~HOOK_FLAGS ){
    return hookMisuse(pzErr, "unknown flag bits (allowed: "
                      "KV_HOOK_NEEDS_OLD_VALUE, KV_HOOK_NEEDS_INIT, "
                      "KV_HOOK_NEEDS_WRITE)");
  }
  if( (flags & (KV_HOOK_NEEDS_INIT|KV_HOOK_NEEDS_WRITE))==0 ){
    return hookMisuse(pzErr, "flags need KV_HOOK_NEEDS_WRITE or "
                      "KV_HOOK_NEEDS_INIT");
  }
  if( (flags & KV_HOOK_NEEDS_WRITE) && pM->xWrite==0 ){
    return hookMisuse(pzErr, "KV_HOOK_NEEDS_WRITE without xWrite");
  }
  if( (flags & KV_HOOK_NEEDS_INIT) && pM->xInit==0 ){
    return hookMisuse(pzErr, "KV_HOOK_NEEDS_INIT without xInit");
  }
  if( hookDepth>0 ){
    return hookMisuse(pzErr, "called from inside a hook callback");
  }
  return SQLITE_OK;
}

/* Find the table and link h to it as of the current commit sequence,
** taking a snapshot for the xInit pass into *ppSnap when asked (engine
** and hook mutexes taken here). */
static int hookLink(KvHook *h, const char *zTab, int nTab,
                    KvBackendSnap **ppSnap, char **pzErr){
  KvEngine *pEng = h->pEng;
  KvHookStore *s = pEng->pHook;
  KvTable *t;
  int rc = SQLITE_OK;
  pthread_mutex_lock(&pEng->mutex);
  t = kvTableFind(pEng, zTab, nTab);
  if( t==0 ){
    *pzErr = sqlite3_mprintf("kv: no such table: %.*s (store %s)", nTab,
                             zTab, pEng->zDir ? pEng->zDir : "in memory");
    rc = SQLITE_ERROR;
  }else if( ppSnap ){
    rc = t->pBackend->xSnapshot(t->pData, ppSnap);
    kvSnapshotError(rc, zTab, nTab, pzErr);
  }
  if( rc==SQLITE_OK ){
    t->nRef++;
    h->pTab = t;
    h->iStartSeq = pEng->iSeq;
    pthread_mutex_lock(&s->mutex);
    h->pNext = s->pList;
    s->pList = h;
    hookCount(h, 1);
    pthread_mutex_unlock(&s->mutex);
  }
  pthread_mutex_unlock(&pEng->mutex);
  return rc;
}

/* The xInit pass: every entry of snapshot pSnap of h's table. */
static int hookInitPass(KvHook *h, KvBackendSnap *pSnap, char **pzErr){
  const KvBackend *pB = h->pTab->pBackend;
  KvBackendCursor *pCsr = 0;
  KvMapEntry e;
  int bOn, rc = pB->xCursorOpen(pSnap, &pCsr);
  if( rc!=SQLITE_OK ) return rc;
  hookDepth++;
  for(bOn=pB->xCursorSeek(pCsr, KV_SEEK_FIRST, 0, 0); bOn;
      bOn=pB->xCursorNext(pCsr)){
    pB->xCursorEntry(pCsr, &e);
    if( !e.bTomb ) h->m.xInit(h->pArg, e.aKey, e.nKey, e.aVal, e.nVal);
  }
  hookDepth--;
  if( pB->xCursorError ) rc = pB->xCursorError(pCsr, pzErr);
  if( rc!=SQLITE_OK && *pzErr==0 ){
    *pzErr = sqlite3_mprintf("kv: the xInit pass of a hook on table %s "
                             "failed: %s", h->pTab->zName, sqlite3_errstr(rc));
  }
  pB->xCursorClose(pCsr);
  return rc;
}

/* Undo hookLink after a failed xInit pass. */
static void hookUnlink(KvHook *h){
  KvEngine *pEng = h->pEng;
  pthread_mutex_lock(&pEng->mutex);
  pthread_mutex_lock(&pEng->pHook->mutex);
  hookUnlinkLocked(pEng->pHook, h);
  pthread_mutex_unlock(&pEng->pHook->mutex);
  pthread_mutex_unlock(&pEng->mutex);
}

/* kv_hook_register with a pzErr that is not NULL. */
static int hookRegister(KvEngine *pEng, const char *zTab, int nTab,
                        int flags, const KvHookMethods *pMethods, void *pArg,
                        KvHook **ppHook, char **pzErr){
  KvHookStore *s;
  KvBackendSnap *pSnap = 0;
  KvHook *h;
  int bInit = (flags & KV_HOOK_NEEDS_INIT)!=0;
  int rc = hookCheckArgs(pEng, zTab, flags, pMethods, ppHook, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  *ppHook = 0;
  if( nTab<0 ) nTab = (int)strlen(zTab);
  if( (rc = kvEngineFailed(pEng, pzErr))!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&pEng->mutex);
  s = hookStoreLocked(pEng);
  pthread_mutex_unlock(&pEng->mutex);
  if( s==0 || (h = sqlite3_malloc64(sizeof(*h)))==0 ) return SQLITE_NOMEM;
  memset(h, 0, sizeof(*h));
  h->pEng = kv_engine_ref(pEng);
  h->flags = flags;
  h->m = *pMethods;
  h->pArg = pArg;
  h->nRef = 1;
  if( bInit ){                    /* no xWrite before the xInit pass ends */
    pthread_mutex_lock(&s->mutex);
    while( s->bDelivering ) pthread_cond_wait(&s->cond, &s->mutex);
    s->bDelivering = 1;
    pthread_mutex_unlock(&s->mutex);
  }
  rc = hookLink(h, zTab, nTab, bInit ? &pSnap : 0, pzErr);
  if( rc==SQLITE_OK && pSnap ){
    rc = hookInitPass(h, pSnap, pzErr);
    h->pTab->pBackend->xSnapshotFree(pSnap);
    if( rc!=SQLITE_OK ) hookUnlink(h);
  }
  if( bInit ){                    /* what was published meanwhile */
    pthread_mutex_lock(&s->mutex);
    hookDrain(pEng, s);
    pthread_mutex_unlock(&s->mutex);
  }
  if( rc!=SQLITE_OK ){
    h->m.xDestroy = 0;            /* pArg stays the caller's */
    if( h->pTab ){
      hookUnref(h);
    }else{
      sqlite3_free(h);
      kv_engine_unref(pEng);
    }
    return rc;
  }
  *ppHook = h;
  return SQLITE_OK;
}

int kv_hook_register(KvEngine *pEng, const char *zTab, int nTab, int flags,
                     const KvHookMethods *pMethods, void *pArg,
                     KvHook **ppHook, char **pzErr){
  char *zErr = 0;
  int rc = hookRegister(pEng, zTab, nTab, flags, pMethods, pArg, ppHook,
                        &zErr);
  if( pzErr ) *pzErr = zErr; else sqlite3_free(zErr);
  return rc;
}

void kv_hook_unregister(KvHook *h){
  KvEngine *pEng;
  KvHookStore *s;
  if( h==0 ) return;
  pEng = h->pEng;
  s = pEng->pHook;
  pthread_mutex_lock(&pEng->mutex);
  pthread_mutex_lock(&s->mutex);
  hookUnlinkLocked(s, h);
  pthread_mutex_unlock(&pEng->mutex);
  /* A call in progress on another thread ends first; inside a callback
  ** nothing waits (that call may be the one waiting for this thread). */
  while( s->pCalling==h && hookDepth==0 ){
    pthread_cond_wait(&s->cond, &s->mutex);
  }
  pthread_mutex_unlock(&s->mutex);
  hookUnref(h);
}

int kv_hook_active(void){
  return hookDepth>0;
}
