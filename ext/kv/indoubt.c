/*
** indoubt.c -- named prepared transactions (kv.h, "named prepared
** roots"): the prepare that hands a root over to its store under a global
** id, the resolution by gid from any connection, and the listing.
**
** The store keeps its in-doubt roots on KvEngine.pInDoubt (engine mutex);
** they are also on the prepared list, so their reservations take part in
** every conflict check.  An in-doubt root holds no reference on its store
** (bNoEngRef): a store with nothing but in-doubt roots closes when its
** last user goes, and the next open restores them from the WAL
** (engine.c).  While a prepare or a resolution of a root is under way its
** bResolving flag keeps the other ones off it.
** A root that removes a table an in-doubt root writes or reads fails its
** prepare with SQLITE_BUSY naming the gid (txnInDoubtRemoveCheck in
** txn.c): the commit or replay of the in-doubt root needs the table.
**
** Resolution order: the decision is flushed to the resolution log
** (resolve.c) first; then the root is committed (published, its tables
** confirm the record, then the record's KV_REC_GID) or rolled back (its
** record withdrawn by an abort record).  A crash in between finds the
** decision at the next open, and the replay carries it out.
**
** A shared store (engine.c, "in-doubt transactions, shared"): a named
** prepare takes the writer lock before it checks the gid (idSharedBegin:
** catch-up, prepared.log read again), so a gid in doubt or decided in any
** process is taken; it publishes its record and lets the lock go, and
** every process takes the transaction in at catch-up.  A resolution runs
** under the writer lock too (idResolveShared): it catches up, finds the
** transaction wherever it was prepared (a decision in prepared.log that
** its process died before carrying out is carried out instead), flushes
** the decision, then publishes a commit record (kvRootLogGidDone) or the
** abort record, which every other process follows.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "ext/kv/codec.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* The in-doubt root gid of pEng, or NULL.  Engine mutex held. */
static KvRoot *idFind(KvEngine *pEng, const char *zGid, int nGid){
  KvRoot *p;
  for(p=pEng->pInDoubt; p; p=p->pNextInDoubt){
    if( p->nGid==nGid && memcmp(p->zGid, zGid, nGid)==0 ) return p;
  }
  return 0;
}

static void idUnlink(KvEngine *pEng, KvRoot *p){
  KvRoot **pp;
  for(pp=&pEng->pInDoubt; *pp; pp=&(*pp)->pNextInDoubt){
    if( *pp==p ){ *pp = p->pNextInDoubt; break; }
  }
  p->pNextInDoubt = 0;
}

/* SQLITE_OK if zGid/nGid is a usable gid, else SQLITE_RANGE with *pzErr. */
static int idGidCheck(const char *zGid, int nGid, char **pzErr){
  if( zGid==0 || nGid<1 || nGid>KV_GID_MAX_BYTES
   || kv_utf8_invalid_at((const uint8_t*)zGid, nGid, 0)>=0 ){
    *pzErr = sqlite3_mprintf("kv: a gid must be 1..%d bytes of UTF-8 "
        "without NUL, got %d bytes%s", KV_GID_MAX_BYTES, zGid ? nGid : 0,
        zGid && nGid>=1 && nGid<=KV_GID_MAX_BYTES ? " that are not" : "");
    return SQLITE_RANGE;
  }
  return SQLITE_OK;
}

/* What keeps active root p from a named prepare, or SQLITE_OK. */
static int idPreparable(KvRoot *p, char **pzErr){
  const char *zWhy = 0;
  int rc = SQLITE_MISUSE;
  if( p->eState!=KV_ROOT_ACTIVE ){
    zWhy = p->eState==KV_ROOT_PREPARED ? "is already prepared"
         : "is finished";
  }else if( p->pEng->bReadOnly ){
    zWhy = "is on a store open read-only in this process";
  }else if( p->pEng->pWal==0 ){
    zWhy = "is on an in-memory store, which cannot keep it in doubt";
  }else if( p->pSchema ){
    zWhy = "creates or removes tables, which a prepared transaction cannot";
  }else if( p->eProto==KV_PROTO_VERSIONED ){
    zWhy = "uses the key-version protocol";
  }else{
    rc = kvEngineFailed(p->pEng, pzErr);
  }
  if( zWhy ){
    *pzErr = sqlite3_mprintf("kv: %s %llu %s", kv_root_who(p),
                             kv_root_who_id(p), zWhy);
  }
  return rc;
}

/* A shared store: the writer lock, then catch up and read prepared.log
** again, before the gid is checked.  SQLITE_OK (p->bWriterLock set when
** the store is shared) or an error, with nothing held. */
static int idSharedBegin(KvRoot *p, char **pzErr){
  KvEngine *pEng = p->pEng;
  int rc;
  if( !__atomic_load_n(&pEng->bShared, __ATOMIC_RELAXED) || pEng->pWal==0 ){
    return SQLITE_OK;
  }
  rc = kvEngineWriterLock(pEng, p->msBusy, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  p->bWriterLock = 1;
  pthread_mutex_lock(&pEng->mutex);
  rc = kvEngineCatchUp(pEng, 1, pzErr);
  if( rc==SQLITE_OK ) rc = kvResolvedSync(pEng, pzErr);
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK ) kvRootWriterRelease(p);
  return rc;
}

/* A shared store, after the named prepare of p appended its record: note
** the record's segment, then publish it and let the writer lock go. */
static void idSharedPrepared(KvRoot *p){
  WalPos pos;
  if( !p->bWriterLock ) return;
  wal_tail(p->pEng->pWal, &pos, 0);
  p->segInDoubt = pos.iOff>48 ? pos.segno : pos.segno-1;  /* 48: header */
  kvRootWriterRelease(p);
}

int kv_root_prepare_named(KvRoot **pp, const char *zGid, int nGid,
                          char **pzErr){
  KvRoot *p = *pp;
  KvEngine *pEng = p->pEng;
  int64_t iMs = 0;
  int rc = idGidCheck(zGid, nGid, pzErr);
  if( rc==SQLITE_OK ) rc = idPreparable(p, pzErr);
  if( rc==SQLITE_OK ) rc = kv_root_protocol(p, KV_PROTO_ORDINARY, pzErr);
  if( rc==SQLITE_OK ) rc = idSharedBegin(p, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( (p->zGid = sqlite3_mprintf("%.*s", nGid, zGid))==0 ){
    kvRootWriterRelease(p);
    return SQLITE_NOMEM;
  }
  p->nGid = nGid;
  pthread_mutex_lock(&pEng->mutex);
  if( idFind(pEng, zGid, nGid) ){
    rc = SQLITE_CONSTRAINT;
  }else if( kvResolvedGet(pEng, zGid, nGid, &iMs) ){
    rc = SQLITE_CONSTRAINT_UNIQUE;
  }else{
    p->bResolving = 1;                     /* reserves the gid */
    p->pNextInDoubt = pEng->pInDoubt;
    pEng->pInDoubt = p;
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK ){
    *pzErr = rc==SQLITE_CONSTRAINT
      ? sqlite3_mprintf("kv: prepared transaction '%s' already exists in "
                        "store %s", p->zGid, pEng->zDir)
      : sqlite3_mprintf("kv: gid '%s' belongs to a transaction of store %s "
                        "resolved less than 24 hours ago; use a new gid",
                        p->zGid, pEng->zDir);
    sqlite3_free(p->zGid);
    p->zGid = 0;
    p->nGid = 0;
    kvRootWriterRelease(p);
    return SQLITE_CONSTRAINT;
  }
  p->iPreparedMs = kvNowMs();
  rc = kvRootPrepareEx(p, 0, 0, pzErr);
  pthread_mutex_lock(&pEng->mutex);
  p->bResolving = 0;
  if( rc!=SQLITE_OK ) idUnlink(pEng, p);
  pthread_cond_broadcast(&pEng->deltaCond);    /* engGoShared waits */
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK ){
    sqlite3_free(p->zGid);
    p->zGid = 0;
    p->nGid = 0;
    return rc;
  }
  idSharedPrepared(p);
  kvRootDetach(p);
  *pp = 0;
  p->bNoEngRef = 1;
  kv_engine_unref(pEng);                   /* the root's own reference */
  return SQLITE_OK;
}

/* Carry out decision bCommit on in-doubt root p, already unlinked and
** decided durably. */
static int idFinish(KvRoot *p, int bCommit, char **pzErr){
  KvEngine *pEng = kv_engine_ref(p->pEng);
  uint64_t cid = p->cid;
  int rc;
  p->bNoEngRef = 0;                        /* takes the reference above */
  if( bCommit ){
    rc = kv_root_commit(p, pzErr);
    if( rc==SQLITE_OK ){
      wal_confirm(pEng->pWal, cid, KV_REC_GID, KV_REC_GID_LEN);
      wal_confirm(pEng->pWal, cid, KV_REC_READS, KV_REC_READS_LEN);
    }
  }else{
    rc = kv_root_rollback_err(p, pzErr);
  }
  kv_root_free(p);
  return rc;
}

/* The answer for gid when no transaction of that gid is in doubt: the
** decision cHad taken earlier ('c', 'r') or none (0). */
static int idNotInDoubt(KvEngine *pEng, const char *zGid, int nGid,
                        int cHad, int bCommit, char **pzErr){
  if( cHad==(bCommit ? 'c' : 'r') ) return SQLITE_OK;
  if( cHad ){
    *pzErr = sqlite3_mprintf("kv: prepared transaction '%.*s' was %s, it "
        "cannot be %s", nGid, zGid,
        cHad=='c' ? "committed" : "rolled back",
        bCommit ? "committed" : "rolled back");
    return SQLITE_CONSTRAINT;
  }
  *pzErr = sqlite3_mprintf("kv: no prepared transaction '%.*s' in store %s",
                           nGid, zGid, pEng->zDir);
  return SQLITE_NOTFOUND;
}

/* Carry out decision bCommit on in-doubt root p of a shared store, already
** unlinked and decided durably, whose commit record (bCommit) or abort
** record is to be published: p holds the writer lock, which its end
** lets go. */
static int idFinishShared(KvRoot *p, int bCommit, uint64_t cidPrepared,
                          char **pzErr){
  KvEngine *pEng = kv_engine_ref(p->pEng);
  int rc;
  p->bNoEngRef = 0;                        /* takes the reference above */
  if( bCommit ){
    rc = kv_root_commit(p, pzErr);
    if( rc==SQLITE_OK ) wal_confirm_record(pEng->pWal, cidPrepared);
  }else{
    rc = kv_root_rollback_err(p, pzErr);
  }
  kv_root_free(p);
  return rc;
}

/* kv_prepared_resolve in a shared store: see the header comment. */
static int idResolveShared(KvEngine *pEng, const char *zGid, int nGid,
                           int bCommit, int *pbDone, char **pzErr){
  int cWant = bCommit ? 'c' : 'r', cHad = 0, cDo;
  uint64_t cidPrepared = 0;
  KvRoot *p = 0;
  int rc = kvEngineWriterLock(pEng, KV_BUSY_DEFAULT_MS, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&pEng->mutex);
  rc = kvEngineCatchUp(pEng, 1, pzErr);
  if( rc==SQLITE_OK ) rc = kvResolvedSync(pEng, pzErr);
  if( rc==SQLITE_OK ) p = idFind(pEng, zGid, nGid);
  if( p && p->bResolving ){
    rc = SQLITE_BUSY;
    *pzErr = sqlite3_mprintf("kv: prepared transaction '%.*s' is being "
        "prepared or resolved by another connection", nGid, zGid);
  }else if( p ){
    p->bResolving = 1;
    cidPrepared = p->cid;
    cHad = kvResolvedGetCid(pEng, zGid, nGid, p->cid);
  }else if( rc==SQLITE_OK ){
    cHad = kvResolvedGet(pEng, zGid, nGid, 0);
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK || p==0 ){
    kvEngineWriterUnlock(pEng);
    if( rc!=SQLITE_OK ) return rc;
    return idNotInDoubt(pEng, zGid, nGid, cHad, bCommit, pzErr);
  }
  /* A decision found in prepared.log whose process died before it carried
  ** it out is carried out now, whatever was asked. */
  cDo = cHad ? cHad : cWant;
  if( cHad==0 ) rc = kvResolvedAdd(pEng, cWant, p->cid, zGid, nGid, pzErr);
  p->bWriterLock = 1;
  if( rc==SQLITE_OK && cDo=='c' ){
    rc = kvRootLogGidDone(p, pzErr);
  }else if( rc==SQLITE_OK ){
    WalPos pos;
    uint64_t cid;
    pthread_mutex_lock(&pEng->mutex);
    pos = pEng->posSeen;
    cid = pEng->cidSeen;
    pthread_mutex_unlock(&pEng->mutex);
    rc = wal_adopt_tail(pEng->pWal, &pos, cid, pzErr);
    if( rc==SQLITE_OK ) p->bAppended = 1;     /* its abort record, below */
  }
  if( rc!=SQLITE_OK ){
    kvRootWriterRelease(p);                   /* stays in doubt */
    pthread_mutex_lock(&pEng->mutex);
    p->bResolving = 0;
    pthread_mutex_unlock(&pEng->mutex);
    return rc;
  }
  pthread_mutex_lock(&pEng->mutex);
  idUnlink(pEng, p);
  pthread_mutex_unlock(&pEng->mutex);
  *pbDone = 1;
  rc = idFinishShared(p, cDo=='c', cidPrepared, pzErr);
  if( rc==SQLITE_OK && cDo!=cWant ){
    rc = idNotInDoubt(pEng, zGid, nGid, cDo, bCommit, pzErr);
  }
  return rc;
}

int kv_prepared_resolve(KvEngine *pEng, const char *zGid, int nGid,
                        int bCommit, int *pbDone, char **pzErr){
  int cWant = bCommit ? 'c' : 'r';
  int64_t iMs = 0;
  int cHad = 0, rc;
  KvRoot *p;
  *pbDone = 0;
  rc = idGidCheck(zGid, nGid, pzErr);
  if( rc==SQLITE_OK ) rc = kvEngineFailed(pEng, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( __atomic_load_n(&pEng->bShared, __ATOMIC_RELAXED) ){
    if( pEng->bReadOnly ){
      *pzErr = sqlite3_mprintf("kv: store %s is open read-only in this "
          "process: prepared transaction '%.*s' cannot be resolved here",
          pEng->zDir, nGid, zGid);
      return SQLITE_READONLY;
    }
    return idResolveShared(pEng, zGid, nGid, bCommit, pbDone, pzErr);
  }
  pthread_mutex_lock(&pEng->mutex);
  p = idFind(pEng, zGid, nGid);
  if( p && p->bResolving ){
    rc = SQLITE_BUSY;
  }else if( p ){
    p->bResolving = 1;
  }else{
    cHad = kvResolvedGet(pEng, zGid, nGid, &iMs);
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_BUSY ){
    *pzErr = sqlite3_mprintf("kv: prepared transaction '%.*s' is being "
        "prepared or resolved by another connection", nGid, zGid);
    return rc;
  }
  if( p==0 ) return idNotInDoubt(pEng, zGid, nGid, cHad, bCommit, pzErr);
  rc = kvResolvedAdd(pEng, cWant, p->cid, zGid, nGid, pzErr);
  pthread_mutex_lock(&pEng->mutex);
  if( rc==SQLITE_OK ) idUnlink(pEng, p);
  else p->bResolving = 0;
  pthread_cond_broadcast(&pEng->deltaCond);    /* engGoShared waits */
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK ) return rc;
  *pbDone = 1;
  return idFinish(p, bCommit, pzErr);
}

/* The JSON array of the tables of root p, and its write count. */
static int idTables(KvRoot *p, KvPreparedInfo *pInfo){
  KvBuf buf = {0, 0, 0};
  int i, rc = kv_buf_append(&buf, "[", 1);
  for(i=0; rc==SQLITE_OK && i<p->nChild; i++){
    KvChild *c = p->apChild[i];
    if( i>0 ) rc = kv_buf_append(&buf, ",", 1);
    if( rc==SQLITE_OK ){
      rc = kv_json_text(&buf, (const uint8_t*)c->pTab->zName, c->pTab->nName);
    }
    pInfo->nKey += kv_map_count(c->pWrite);
  }
  if( rc==SQLITE_OK ) rc = kv_buf_append(&buf, "]", 2);
  if( rc==SQLITE_OK ) pInfo->zTables = (char*)buf.a;
  else kv_buf_free(&buf);
  return rc;
}

int kv_prepared_list(KvEngine *pEng, KvPreparedInfo **paOut, int *pnOut){
  KvPreparedInfo *a = 0;
  KvRoot *p;
  int n = 0, i = 0, rc = SQLITE_OK;
  *paOut = 0;
  *pnOut = 0;
  pthread_mutex_lock(&pEng->mutex);
  if( __atomic_load_n(&pEng->bShared, __ATOMIC_RELAXED) ){
    char *zErr = 0;
    kvEngineCatchUp(pEng, 0, &zErr);   /* other processes' prepares */
    sqlite3_free(zErr);
  }
  for(p=pEng->pInDoubt; p; p=p->pNextInDoubt) n++;
  if( n>0 && (a = sqlite3_malloc64(n*sizeof(*a)))==0 ) rc = SQLITE_NOMEM;
  if( a ) memset(a, 0, n*sizeof(*a));
  /* The list is newest first: fill from the end, oldest first. */
  for(p=pEng->pInDoubt, i=n-1; p && rc==SQLITE_OK; p=p->pNextInDoubt, i--){
    a[i].zGid = sqlite3_mprintf("%.*s", p->nGid, p->zGid);
    a[i].nGid = p->nGid;
    a[i].tid = p->tid;
    a[i].iPreparedMs = p->iPreparedMs;
    if( a[i].zGid==0 ) rc = SQLITE_NOMEM;
    if( rc==SQLITE_OK ) rc = idTables(p, &a[i]);
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK ){
    kv_prepared_list_free(a, n);
    return rc;
  }
  *paOut = a;
  *pnOut = n;
  return SQLITE_OK;
}

void kv_prepared_list_free(KvPreparedInfo *a, int n){
  int i;
  for(i=0; a && i<n; i++){
    sqlite3_free(a[i].zGid);
    sqlite3_free(a[i].zTables);
  }
  sqlite3_free(a);
}
