/*
** op.c -- the frame of the branch operations (vfs/op.h): opening the
** store for one transaction (reusing idle store handles between
** operations), ending it, reporting errors, and the steps several
** operations share: names, views, normalizing fork points, store
** sequence numbers, restore point rows, new forks, branch states and
** refcounts.
*/
#include "config.h"
#include "vfs/op.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

/* One idle store handle kept between operations, so a fork does not pay
** for opening the store file: reused only by the process that opened it
** and only while the path still names the same file (device and inode),
** else closed.  Guarded by opMutex.
**
** fork(): the handle is closed before the fork (opForkPrepare), never
** carried into the child.  An open SQLite connection in the child's
** memory would make SQLite's unix VFS share that file's lock and -shm
** bookkeeping with the connections the child opens on the store: they
** would take no real lock, and the parent closing its handle (its last
** connection) could checkpoint and delete the -wal the child appends to,
** losing the child's commits. */
static pthread_mutex_t opMutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t opForkOnce = PTHREAD_ONCE_INIT;
static struct {
  Store *pStore;
  char *zPath;
  dev_t dev;
  ino_t ino;
  pid_t pid;
} opIdle;

/* Idle handles of PostgreSQL stores (a connection each, which costs a
** new server session to make): up to OP_IDLE_URI of them, of any URIs,
** the least recently kept one closed to make room.  A handle is taken out
** of the list while an operation uses it, so no two threads ever share
** one.  Also guarded by opMutex, also closed before fork(), and closed
** when the process exits or the library is unloaded (opIdleAtExit). */
#define OP_IDLE_URI 4
static struct {
  Store *pStore;
  char *zUri;
  pid_t pid;
  uint64_t iSeq;             /* when kept: the least is the oldest */
} aOpIdleUri[OP_IDLE_URI];
static uint64_t opIdleSeq = 0;

/* Take an idle handle of the PostgreSQL store zUri, else NULL. */
static Store *opTakeIdleUri(const char *zUri){
  Store *pStore = 0;
  int i, iBest = -1;
  pthread_mutex_lock(&opMutex);
  for(i=0; i<OP_IDLE_URI; i++){
    if( aOpIdleUri[i].pStore && aOpIdleUri[i].pid==getpid()
     && strcmp(aOpIdleUri[i].zUri, zUri)==0
     && (iBest<0 || aOpIdleUri[i].iSeq>aOpIdleUri[iBest].iSeq) ){
      iBest = i;
    }
  }
  if( iBest>=0 ){
    pStore = aOpIdleUri[iBest].pStore;
    aOpIdleUri[iBest].pStore = 0;
    sqlite3_free(aOpIdleUri[iBest].zUri);
    aOpIdleUri[iBest].zUri = 0;
  }
  pthread_mutex_unlock(&opMutex);
  return pStore;
}

/* Keep pStore (no transaction open) as an idle handle of zUri, closing
** the oldest one when the list is full. */
static void opPutIdleUri(Store *pStore, const char *zUri){
  char *zCopy = sqlite3_mprintf("%s", zUri);
  Store *pOld = 0;
  int i, iSlot = 0;
  if( zCopy==0 ){
    store_close(pStore);
    return;
  }
  pthread_mutex_lock(&opMutex);
  for(i=0; i<OP_IDLE_URI; i++){
    if( aOpIdleUri[i].pStore==0 || aOpIdleUri[i].pid!=getpid() ){
      iSlot = i;
      break;
    }
    if( aOpIdleUri[i].iSeq<aOpIdleUri[iSlot].iSeq ) iSlot = i;
  }
  if( aOpIdleUri[iSlot].pid==getpid() ) pOld = aOpIdleUri[iSlot].pStore;
  sqlite3_free(aOpIdleUri[iSlot].zUri);
  aOpIdleUri[iSlot].pStore = pStore;
  aOpIdleUri[iSlot].zUri = zCopy;
  aOpIdleUri[iSlot].pid = getpid();
  aOpIdleUri[iSlot].iSeq = ++opIdleSeq;
  pthread_mutex_unlock(&opMutex);
  store_close(pOld);
}

/* The idle handles of PostgreSQL stores of this process, taken out of the
** list (opMutex held); the caller closes them. */
static int opDetachIdleUri(Store **apStore){
  int i, n = 0;
  for(i=0; i<OP_IDLE_URI; i++){
    if( aOpIdleUri[i].zUri==0 ) continue;   /* (no SQLite call on an empty
                                            ** list: at exit of a process
                                            ** that never used one) */
    if( aOpIdleUri[i].pStore && aOpIdleUri[i].pid==getpid() ){
      apStore[n++] = aOpIdleUri[i].pStore;
    }
    aOpIdleUri[i].pStore = 0;
    sqlite3_free(aOpIdleUri[i].zUri);
    aOpIdleUri[i].zUri = 0;
  }
  return n;
}

/* At exit (or unload): end the idle handles' server sessions cleanly. */
#if defined(__GNUC__)
__attribute__((destructor))
#endif
static void opIdleAtExit(void){
  Store *apStore[OP_IDLE_URI];
  int i, n;
  pthread_mutex_lock(&opMutex);
  n = opDetachIdleUri(apStore);
  pthread_mutex_unlock(&opMutex);
  for(i=0; i<n; i++) store_close(apStore[i]);
}

/* Take the idle handle of zPath if it is still good, else NULL. */
static Store *opTakeIdle(const char *zPath, const struct stat *pSt){
  Store *pStore = 0;
  pthread_mutex_lock(&opMutex);
  if( opIdle.pStore && strcmp(opIdle.zPath, zPath)==0
   && opIdle.pid==getpid() && opIdle.dev==pSt->st_dev
   && opIdle.ino==pSt->st_ino ){
    pStore = opIdle.pStore;
    opIdle.pStore = 0;
  }
  pthread_mutex_unlock(&opMutex);
  return pStore;
}

/* The fork handlers: close the idle handle and hold opMutex across
** fork(), so that no thread keeps a new one meanwhile. */
static void opForkPrepare(void){
  Store *pStore = 0, *apStore[OP_IDLE_URI];
  int i, n;
  pthread_mutex_lock(&opMutex);
  if( opIdle.pid==getpid() ) pStore = opIdle.pStore;
  opIdle.pStore = 0;
  store_close(pStore);
  n = opDetachIdleUri(apStore);
  for(i=0; i<n; i++) store_close(apStore[i]);
}
static void opForkRelease(void){
  pthread_mutex_unlock(&opMutex);
}
static void opForkRegister(void){
  pthread_atfork(opForkPrepare, opForkRelease, opForkRelease);
}

/* Keep pStore (no transaction open) as the idle handle of zPath, closing
** the one it replaces, or close it. */
static void opPutIdle(Store *pStore, const char *zPath){
  struct stat st;
  char *zCopy = sqlite3_mprintf("%s", zPath);
  Store *pOld = 0;
  pthread_once(&opForkOnce, opForkRegister);
  if( zCopy==0 || stat(zPath, &st)!=0 ){
    sqlite3_free(zCopy);
    store_close(pStore);
    return;
  }
  pthread_mutex_lock(&opMutex);
  if( opIdle.pid==getpid() ) pOld = opIdle.pStore;
  sqlite3_free(opIdle.zPath);
  opIdle.pStore = pStore;
  opIdle.zPath = zCopy;
  opIdle.dev = st.st_dev;
  opIdle.ino = st.st_ino;
  opIdle.pid = getpid();
  pthread_mutex_unlock(&opMutex);
  store_close(pOld);
}

void depot_fork_idle_close(void){
  Store *pStore = 0, *apStore[OP_IDLE_URI];
  int i, n;
  pthread_mutex_lock(&opMutex);
  if( opIdle.pid==getpid() ) pStore = opIdle.pStore;
  opIdle.pStore = 0;
  sqlite3_free(opIdle.zPath);
  opIdle.zPath = 0;
  n = opDetachIdleUri(apStore);
  pthread_mutex_unlock(&opMutex);
  store_close(pStore);
  for(i=0; i<n; i++) store_close(apStore[i]);
}

int op_fail(Op *p, int rc, char *zMsg){
  sqlite3_free(*p->pzErr);
  *p->pzErr = zMsg;
  return rc;
}

int op_store_err(Op *p, int rc){
  return op_fail(p, rc, sqlite3_mprintf("depot: %s", store_errmsg(p->pStore)));
}

int64_t op_now_ms(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* A new store sequence number for a change of the catalog (fork, restore
** point, restore, rollback, drop) and its LOG row (branch 0, txid 0, the
** time now), so that a bucket fork at a time sees the catalog changes made
** before that time, not only the commits. */
int op_next_vs(Op *p, uint64_t *piVs){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  LogRow lg;
  int rc = depot_next_vs(p->pStore, piVs, p->pzErr);
  if( rc!=SQLITE_OK ) return rc;
  lg.iBranch = 0;
  lg.iTxid = 0;
  lg.iTimeMs = (uint64_t)op_now_ms();
  rc = store_put(p->pStore, k, layout_key_log(k, *piVs), v,
                 layout_log_encode(v, &lg));
  return rc==SQLITE_OK ? rc : op_store_err(p, rc);
}

/* "NAME" or "BUCKET/NAME" into p->zBucket / p->zDb. */
static int opSplitName(Op *p, const char *zQual){
  const char *zSlash = zQual ? strchr(zQual, '/') : 0;
  size_t nB = zSlash ? (size_t)(zSlash-zQual) : 4;
  const char *zName = zSlash ? zSlash+1 : zQual;
  if( zQual==0 || nB<1 || nB>LAYOUT_MAX_NAME || !layout_name_ok(zName) ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: a database is"
        " named NAME or BUCKET/NAME, each part 1..%d bytes; got '%s'",
        LAYOUT_MAX_NAME, zQual ? zQual : "NULL"));
  }
  memcpy(p->zBucket, zSlash ? zQual : "main", nB);
  p->zBucket[nB] = 0;
  memcpy(p->zDb, zName, strlen(zName)+1);
  return SQLITE_OK;
}

int op_check_name(Op *p, const char *zWhat, const char *z){
  if( layout_name_ok(z) ) return SQLITE_OK;
  return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: %s name must be"
      " 1..%d bytes, got %d", zWhat, LAYOUT_MAX_NAME, z ? (int)strlen(z) : 0));
}

/* Open zStore and start a write transaction; resolve the bucket of zQual
** (NULL: none).  With bRead (an operation that only reads), a store on
** read-only media is opened immutable in a read transaction instead, as
** depot_commits opens it (StoreSqliteConfig.bInspect). */
int op_open_as(Op *p, const char *zStore, const char *zQual, int bRead,
               char **pzErr){
  StoreSqliteConfig cfg;
  struct stat st;
  int rc, bFound = 1, bReused = 0;
  memset(p, 0, sizeof(*p));
  p->pzErr = pzErr;
  p->zPath = zStore;
  if( zQual && (rc = opSplitName(p, zQual))!=SQLITE_OK ) return rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSynchronous = 2;
  p->bMedia = bRead && store_sqlite_read_only_fs(zStore);
  cfg.bInspect = p->bMedia;
  if( store_is_pg_uri(zStore) ){
    /* the layout was checked when the handle was opened: the reused
    ** handle's first round trip is the BEGIN, which reconnects a session
    ** the server dropped meanwhile */
    p->pStore = opTakeIdleUri(zStore);
    bReused = p->pStore!=0;
  }else if( !p->bMedia && stat(zStore, &st)==0 ){
    p->pStore = opTakeIdle(zStore, &st);
  }
  if( p->pStore==0 ){
    rc = store_open(zStore, &cfg, &p->pStore, pzErr);
    if( rc!=SQLITE_OK ) return (rc&0xff)==SQLITE_NOMEM ? rc : SQLITE_CANTOPEN;
  }
  rc = bReused ? SQLITE_OK : depot_db_check_format(p->pStore, pzErr);
  if( rc==SQLITE_OK
   && (rc = store_begin(p->pStore, !p->bMedia))!=SQLITE_OK ){
    rc = op_store_err(p, rc);
  }
  if( rc==SQLITE_OK && zQual ){
    rc = depot_bucket_find(p->pStore, p->zBucket, &p->iBucket, &bFound, pzErr);
    if( rc==SQLITE_OK && !bFound ){
      rc = op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
          " not exist", p->zBucket));
    }
  }
  return rc;
}

int op_open(Op *p, const char *zStore, const char *zQual,
            char **pzErr){
  return op_open_as(p, zStore, zQual, 0, pzErr);
}

/* Commit on success, else roll back; keep the handle for the next
** operation, or close it after a failure. */
int op_end(Op *p, int rc){
  if( p->pStore && rc==SQLITE_OK ){
    rc = store_commit(p->pStore);
    if( rc!=SQLITE_OK ) op_store_err(p, rc);
  }else if( p->pStore ){
    store_rollback(p->pStore);
  }
  if( p->pStore && rc==SQLITE_OK && store_is_pg_uri(p->zPath) ){
    pthread_once(&opForkOnce, opForkRegister);
    opPutIdleUri(p->pStore, p->zPath);
  }else if( p->pStore && rc==SQLITE_OK && !p->bMedia ){
    opPutIdle(p->pStore, p->zPath);
  }else{
    store_close(p->pStore);
  }
  p->pStore = 0;
  if( rc==SQLITE_NOTFOUND ) rc = SQLITE_ERROR;
  return rc;
}

/* The view of branch zBranch; SQLITE_ERROR if the name leads nowhere. */
int op_view(Op *p, const char *zBranch, OpView *pV){
  DepotName nm;
  DbHead head;
  int rc = depot_name_resolve(p->pStore, p->iBucket, p->zDb, zBranch, &nm,
                              p->pzErr);
  memset(pV, 0, sizeof(*pV));
  if( rc!=SQLITE_OK ) return rc;
  if( nm.iBranch==0 && nm.iInhBranch==0 ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has"
        " no branch %s%s%s", p->zDb, zBranch, p->iBucket ? " in bucket " : "",
        p->iBucket ? p->zBucket : ""));
  }
  if( nm.iBranch==0 ){
    pV->iTop = nm.iInhBranch;
    pV->iTopTxid = nm.iInhTxid;
    return SQLITE_OK;
  }
  rc = depot_db_head(p->pStore, nm.iBranch, &head, p->pzErr);
  pV->iOwn = pV->iTop = nm.iBranch;
  pV->iTopTxid = head.iTxid;
  return rc;
}

/* Move (b, 0) of a fork to the parent's (branch, cap): the same state one
** level up, so forks of fresh forks do not deepen the chain. */
int op_normalize(Op *p, uint64_t *piBranch, uint64_t *piTxid){
  while( *piTxid==0 ){
    BranchRecord rec;
    int rc = depot_branch_get(p->pStore, *piBranch, &rec, p->pzErr);
    if( rc!=SQLITE_OK ) return rc;
    if( rec.iParent==0 ){
      return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s"
          " has nothing committed at that point", p->zDb));
    }
    *piBranch = rec.iParent;
    *piTxid = rec.iParentTxid;
  }
  return SQLITE_OK;
}

int op_restore_point(Op *p, const char *zName, RestorePoint *pRp,
                     int *pbFound){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int rc;
  /* No restore point has a longer name, and its key would not fit in k. */
  *pbFound = 0;
  if( strlen(zName)>LAYOUT_MAX_NAME ) return SQLITE_OK;
  rc = store_get(p->pStore, k, layout_key_rp(k, p->iBucket, p->zDb, zName),
                     &pVal, &nVal);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  *pbFound = pVal!=0;
  if( pVal && layout_rp_decode(pVal, nVal, pRp)!=SQLITE_OK ){
    rc = op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt restore"
        " point %s", zName));
  }
  sqlite3_free(pVal);
  return rc;
}

/* A new branch named zName forked from (iFrom, iTxid); refuses a chain
** deeper than DEPOT_MAX_FORK_DEPTH. */
int op_new_fork(Op *p, const char *zName, uint64_t iFrom, uint64_t iTxid,
                uint64_t iVs, uint64_t *piNew){
  DepotChain chain;
  BranchRecord rec;
  DbHead st;
  int rc = depot_db_chain(p->pStore, iFrom, iTxid, &chain, p->pzErr);
  if( rc==SQLITE_OK && chain.n>DEPOT_MAX_FORK_DEPTH ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: fork depth limit"
        " reached: the fork point already has %d ancestors and a branch may"
        " have at most %d", chain.n-1, DEPOT_MAX_FORK_DEPTH));
  }
  if( rc==SQLITE_OK ) rc = depot_db_state_at(p->pStore, iFrom, iTxid, &st,
                                             p->pzErr);
  if( rc!=SQLITE_OK ) return rc;
  memset(&rec, 0, sizeof(rec));
  rec.iParent = iFrom;
  rec.iParentTxid = iTxid;
  memcpy(rec.zDb, p->zDb, strlen(p->zDb));
  memcpy(rec.zBranch, zName, strlen(zName));
  rec.iBucket = p->iBucket;
  rec.iCreateVs = iVs;
  st.iVs = iVs;
  return depot_branch_create(p->pStore, &rec, &st, piNew, p->pzErr);
}

/* Mark branch iBranch frozen (or dropped). */
int op_set_state(Op *p, uint64_t iBranch, int eState){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  BranchRecord rec;
  int rc = depot_branch_get(p->pStore, iBranch, &rec, p->pzErr);
  if( rc!=SQLITE_OK ) return rc;
  rec.eState = eState;
  rc = store_put(p->pStore, k, layout_key_branch(k, iBranch), v,
                 layout_branch_encode(v, &rec));
  return rc==SQLITE_OK ? rc : op_store_err(p, rc);
}

/* The refcount of iBranch (0 without a row), read without writing, so a
** listing also reads a store opened immutable on read-only media. */
int op_refcount(Op *p, uint64_t iBranch, int64_t *pn){
  unsigned char k[LAYOUT_MAX_KEY];
  unsigned char *pVal = 0;
  uint64_t v = 0;
  int nVal = 0;
  int rc = store_get(p->pStore, k,
      layout_key_branch_sub(k, iBranch, LAYOUT_BRANCH_REFCOUNT),
      (void**)&pVal, &nVal);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  if( pVal && nVal!=8 ){
    sqlite3_free(pVal);
    return op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
        " refcount row of branch %llu", (unsigned long long)iBranch));
  }
  if( pVal ) v = bytes_get64le(pVal);
  sqlite3_free(pVal);
  *pn = (int64_t)v;
  return SQLITE_OK;
}
