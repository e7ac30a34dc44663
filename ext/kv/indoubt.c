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

int kv_root_prepare_named(KvRoot **pp, const char *zGid, int nGid,
                          char **pzErr){
  KvRoot *p = *pp;
  KvEngine *pEng = p->pEng;
  int64_t iMs = 0;
  int rc = idGidCheck(zGid, nGid, pzErr);
  if( rc==SQLITE_OK ) rc = idPreparable(p, pzErr);
  if( rc==SQLITE_OK ) rc = kv_root_protocol(p, KV_PROTO_ORDINARY, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( (p->zGid = sqlite3_mprintf("%.*s", nGid, zGid))==0 ) return SQLITE_NOMEM;
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
    return SQLITE_CONSTRAINT;
  }
  p->iPreparedMs = kvNowMs();
  rc = kvRootPrepareEx(p, 0, 0, pzErr);
  pthread_mutex_lock(&pEng->mutex);
  p->bResolving = 0;
  if( rc!=SQLITE_OK ) idUnlink(pEng, p);
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK ){
    sqlite3_free(p->zGid);
    p->zGid = 0;
    p->nGid = 0;
    return rc;
  }
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
  if( p==0 ){
    if( cHad==cWant ) return SQLITE_OK;
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
  rc = kvResolvedAdd(pEng, cWant, p->cid, zGid, nGid, pzErr);
  pthread_mutex_lock(&pEng->mutex);
  if( rc==SQLITE_OK ) idUnlink(pEng, p);
  else p->bResolving = 0;
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
