/*
** ddl.c -- tables created and removed while a store is shared by several
** processes (engine.c, "Sharing a store"): the prepare of a root that
** changes the catalog, the catalog records of other processes applied at
** catch-up, and the deferred deletion of removed tables' files.
**
** A catalog change commits like any commit: under the store's writer
** lock its root gives each table it creates a fresh id (above every id
** the catalog and the store's files name: a table id is never picked by
** two processes), makes the table's files and puts the table in shared
** mode (xShare), then appends its record; its commit publishes the change
** here, saves the catalog file and only then publishes the log's new tail
** (txn.c), so a process that joins (it reads the tail, then the file)
** never finds a tail past a change its catalog file lacks.  Other
** processes apply the record at catch-up (kvDdlFollow): a created table is
** opened in shared mode, a removed one leaves the live list (children
** bound to it fail at their next bind or prepare with SQLITE_BUSY_SNAPSHOT;
** snapshots already taken keep reading it).
**
** Removed tables' files.  While shared, no process deletes the files of a
** table whose removal it publishes or follows: another may still read
** them.  The removing root lists the table (name and catalog entry) in
** <store>/tables_dropped before it appends its record, under the writer
** lock.  The process running the store's work (the owner) reads that list
** now and then: an entry whose id no longer names a live table (its
** removal is published and this process applied it) gets the position
** this process has applied as its due mark (kvDdlReapCollect); once every
** other process that can write has published a position at or past it
** (engine.c's slots) and no read-only process has the store open, the
** owner takes the writer lock, opens each such table, deletes its files
** (xDrop) and rewrites the list without it (kvDdlReapRun).  The next open
** of the store alone does the same for every entry whose table is gone
** (kvDdlOpenAlone).  An entry whose removal never commits stays until the
** table is removed after all.
**
** List file format (integers big-endian), written atomically as the
** catalog file is:
**     "KVDROP01"  u32 nEntry  { u32 nName name u32 nMeta meta }*  u32 crc32c
** meta is the catalog entry encoding (kv_meta_encode).
**
** Locking: kvDdlFollow runs with the engine mutex held; kvDdlPrepare and
** kvDdlReapRun with the writer lock held (which orders every writer of
** the list file) and without the engine mutex; the reap state is the
** store thread's.
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
#include <time.h>

#define KV_DROP_FILE   "tables_dropped"
#define KV_DROP_MAGIC  "KVDROP01"
#define KV_DDL_CHECK_MS 100         /* the owner reads the list this often */
#define KV_DDL_RETRY_MS 10000       /* ... and after a failure, this late */

/* One entry of the list file. */
typedef struct DdlEntry DdlEntry;
struct DdlEntry {
  char *zName; int nName;
  KvMeta meta;
};

typedef struct DdlList DdlList;
struct DdlList {
  int n, nAlloc;
  DdlEntry *a;
};

/* The owner's reap state (KvEngine.pDdl): ids found gone, and the
** position every other process must have passed before they go. */
struct KvDdl {
  int nId;
  uint64_t *aId;
  uint64_t cidDue;
  int64_t iCheckMs;
};

static int64_t ddlNowMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

static void ddlListClear(DdlList *p){
  int i;
  for(i=0; i<p->n; i++){
    sqlite3_free(p->a[i].zName);
    kv_meta_clear(&p->a[i].meta);
  }
  sqlite3_free(p->a);
  memset(p, 0, sizeof(*p));
}

/* Append an entry (zName copied, *pMeta's options copied). */
static int ddlListAdd(DdlList *p, const char *zName, int nName,
                      const KvMeta *pMeta){
  DdlEntry *e;
  if( p->n==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 8;
    DdlEntry *a = sqlite3_realloc64(p->a, nNew*sizeof(DdlEntry));
    if( a==0 ) return SQLITE_NOMEM;
    p->a = a;
    p->nAlloc = nNew;
  }
  e = &p->a[p->n];
  memset(e, 0, sizeof(*e));
  e->zName = sqlite3_mprintf("%.*s", nName, zName);
  e->nName = nName;
  e->meta = *pMeta;
  e->meta.zOptions = 0;
  if( pMeta->zOptions ) e->meta.zOptions = sqlite3_mprintf("%s", pMeta->zOptions);
  if( e->zName==0 || (pMeta->zOptions && e->meta.zOptions==0) ){
    sqlite3_free(e->zName);
    sqlite3_free(e->meta.zOptions);
    return SQLITE_NOMEM;
  }
  p->n++;
  return SQLITE_OK;
}

static char *ddlPath(KvEngine *pEng){
  return sqlite3_mprintf("%s/%s", pEng->zDir, KV_DROP_FILE);
}

/* Load the list file (none: an empty list). */
static int ddlListLoad(KvEngine *pEng, DdlList *pList, char **pzErr){
  char *zPath = ddlPath(pEng);
  uint8_t *a = 0;
  int64_t sz = 0;
  int64_t off = 12;
  uint32_t i, nEntry = 0;
  int rc;
  memset(pList, 0, sizeof(*pList));
  if( zPath==0 ) return SQLITE_NOMEM;
  rc = kvCatalogReadFile(pEng, zPath, (int64_t)1<<26, &a, &sz, pzErr);
  if( rc!=SQLITE_OK || a==0 ){
    sqlite3_free(zPath);
    return rc;
  }
  if( sz<16 || memcmp(a, KV_DROP_MAGIC, 8)!=0
   || wal_crc32c(0, a, (size_t)(sz-4))!=wal_get_be32(&a[sz-4]) ){
    rc = SQLITE_CORRUPT;
  }
  if( rc==SQLITE_OK ) nEntry = wal_get_be32(&a[8]);
  for(i=0; rc==SQLITE_OK && i<nEntry; i++){
    uint32_t nName, nMeta;
    KvMeta meta;
    if( off+4>sz-4 ){ rc = SQLITE_CORRUPT; break; }
    nName = wal_get_be32(&a[off]);
    if( nName<1 || nName>KV_MAX_NAME_BYTES || off+8+(int64_t)nName>sz-4 ){
      rc = SQLITE_CORRUPT; break;
    }
    nMeta = wal_get_be32(&a[off+4+nName]);
    if( nMeta>65536 || off+8+(int64_t)nName+nMeta>sz-4 ){
      rc = SQLITE_CORRUPT; break;
    }
    rc = kv_meta_decode(&a[off+8+nName], (int)nMeta, &meta);
    if( rc==SQLITE_OK ){
      rc = ddlListAdd(pList, (const char*)&a[off+4], (int)nName, &meta);
    }
    kv_meta_clear(&meta);
    off += 8+nName+nMeta;
  }
  if( rc==SQLITE_OK && off!=sz-4 ) rc = SQLITE_CORRUPT;
  if( rc==SQLITE_CORRUPT ){
    *pzErr = sqlite3_mprintf("kv: list of removed tables %s is corrupt",
                             zPath);
  }
  if( rc!=SQLITE_OK ) ddlListClear(pList);
  sqlite3_free(a);
  sqlite3_free(zPath);
  return rc;
}

/* Write the list file atomically (an empty list: remove the file). */
static int ddlListSave(KvEngine *pEng, const DdlList *pList, char **pzErr){
  const WalIo *io = pEng->pIo;
  KvBuf buf = {0, 0, 0};
  char *zPath = ddlPath(pEng);
  uint8_t a4[4];
  int i, rc = SQLITE_OK;
  if( zPath==0 ) return SQLITE_NOMEM;
  if( pList->n==0 ){
    if( io->xUnlink(io->pCtx, zPath)==0 ) io->xSyncDir(io->pCtx, pEng->zDir);
    sqlite3_free(zPath);
    return SQLITE_OK;
  }
  rc = kv_buf_append(&buf, KV_DROP_MAGIC "\0\0\0\0", 12);
  for(i=0; rc==SQLITE_OK && i<pList->n; i++){
    KvBuf meta = {0, 0, 0};
    rc = kv_meta_encode(&pList->a[i].meta, &meta);
    wal_put_be32(a4, (uint32_t)pList->a[i].nName);
    if( rc==SQLITE_OK ) rc = kv_buf_append(&buf, a4, 4);
    if( rc==SQLITE_OK ){
      rc = kv_buf_append(&buf, pList->a[i].zName, pList->a[i].nName);
    }
    wal_put_be32(a4, (uint32_t)meta.n);
    if( rc==SQLITE_OK ) rc = kv_buf_append(&buf, a4, 4);
    if( rc==SQLITE_OK ) rc = kv_buf_append(&buf, meta.a, meta.n);
    kv_buf_free(&meta);
  }
  if( rc==SQLITE_OK ){
    wal_put_be32(&buf.a[8], (uint32_t)pList->n);
    wal_put_be32(a4, wal_crc32c(0, buf.a, buf.n));
    rc = kv_buf_append(&buf, a4, 4);
  }
  if( rc==SQLITE_OK ) rc = kvCatalogWriteFile(pEng, zPath, buf.a, buf.n, pzErr);
  kv_buf_free(&buf);
  sqlite3_free(zPath);
  return rc;
}

/* ------------------------------------------------------- catch-up --- */

int kvDdlFollow(KvEngine *pEng, const WalTableActions *pT, uint64_t iSeq,
                char **pzErr){
  KvMap *pBatch = kv_map_new();
  KvMapCursor *pCsr = 0;
  KvMapEntry e;
  int i, bOn, rc = SQLITE_OK;
  int bJoining = pEng->bJoining, bLoading = pEng->bLoadingCatalog;
  if( pBatch==0 ) return SQLITE_NOMEM;
  for(i=0; i<pT->nAction && rc==SQLITE_OK; i++){
    const WalAction *a = &pT->aAction[i];
    char *zIgnore = 0;
    if( kv_name_check((const char*)a->aKey, a->nKey, &zIgnore)!=SQLITE_OK ){
      rc = SQLITE_CORRUPT;
    }else{
      rc = kv_map_put(&pBatch, a->aKey, a->nKey, a->aVal,
                      a->bDelete ? 0 : a->nVal, 0, a->bDelete);
    }
    sqlite3_free(zIgnore);
  }
  if( rc==SQLITE_CORRUPT ){
    *pzErr = sqlite3_mprintf("kv: a catalog record of shared store %s names "
                             "an invalid table", pEng->zDir);
  }
  /* Tables another process created: their files exist (its prepare made
  ** them before the record was appended); open them as a joiner does. */
  pEng->bJoining = 1;
  pEng->bLoadingCatalog = 1;
  if( rc==SQLITE_OK ) rc = kvCatalogApply(pEng, pBatch, iSeq, 0, 0, pzErr);
  pEng->bJoining = bJoining;
  pEng->bLoadingCatalog = bLoading;
  if( rc==SQLITE_OK && (pCsr = kv_map_cursor_new(pBatch))==0 ) rc = SQLITE_NOMEM;
  for(bOn=rc==SQLITE_OK && kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    KvTable *t;
    kv_map_cursor_entry(pCsr, &e);
    if( e.bTomb ) continue;
    t = kvTableFind(pEng, (const char*)e.aKey, e.nKey);
    if( t && t->pData && t->pBackend->xShare ){
      rc = t->pBackend->xShare(t->pData, pzErr);
    }
  }
  kv_map_cursor_free(pCsr);
  kv_map_unref(pBatch);
  return rc;
}

/* -------------------------------------------------------- prepare --- */

/* The pending table root p creates under the name of catalog entry e (a
** put of a table that is not live yet), or NULL. */
static KvTable *ddlNewTable(KvRoot *p, const KvMapEntry *e){
  int i;
  for(i=0; i<p->nNew; i++){
    KvTable *t = p->apNew[i];
    if( t->nName==e->nKey && memcmp(t->zName, e->aKey, e->nKey)==0
     && !t->bLive && t->pData==0 ){
      return t;
    }
  }
  return 0;
}

int kvDdlCreateCheck(KvEngine *pEng, const char *zTab, int nTab,
                     const char *zType, int bPersist, char **pzErr){
  const KvBackend *pB = kvBackendFind(zType);
  if( !__atomic_load_n(&pEng->bShared, __ATOMIC_RELAXED) || pB==0
   || pB->xShare || !bPersist ){
    return SQLITE_OK;
  }
  *pzErr = sqlite3_mprintf("kv: store %s is shared by several processes: "
      "table %.*s cannot be created as %s with persistence=1, whose rows "
      "would live in one process's memory (kv_btree and kv_log tables are "
      "shared; kv_memory with persistence=0 is private to each process)",
      pEng->zDir, nTab, zTab, zType);
  return SQLITE_ERROR;
}

int kvDdlPrepare(KvRoot *p, char **pzErr){
  KvEngine *pEng = p->pEng;
  KvMapCursor *pCsr;
  KvMapEntry e;
  DdlList add, list;
  int bOn, i, rc = SQLITE_OK, nNew = 0;
  if( !p->bWriterLock || p->pSchema==0 || kv_map_count(p->pSchema->pWrite)==0 ){
    return SQLITE_OK;
  }
  memset(&add, 0, sizeof(add));
  memset(&list, 0, sizeof(list));
  if( (pCsr = kv_map_cursor_new(p->pSchema->pWrite))==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&pEng->mutex);
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    KvTable *t;
    kv_map_cursor_entry(pCsr, &e);
    if( e.bTomb ){
      t = kvTableFind(pEng, (const char*)e.aKey, e.nKey);
      if( t && t->pBackend->bNeedsStore ){
        rc = ddlListAdd(&add, t->zName, t->nName, &t->meta);
      }
    }else if( (t = ddlNewTable(p, &e))!=0 ){
      rc = kvDdlCreateCheck(pEng, t->zName, t->nName, t->meta.zType,
                            t->meta.bPersist, pzErr);
      nNew++;
    }
  }
  kv_map_cursor_free(pCsr);
  /* Fresh ids, above every id the catalog (caught up under the writer
  ** lock), the store's files and the list of removed tables name (a
  ** removed table may have left no file an id scan finds), and the new
  ** tables' files. */
  if( rc==SQLITE_OK && nNew>0 ) rc = kvBackendReserveIds(pEng, pzErr);
  if( rc==SQLITE_OK && nNew>0 ){
    char *zErr = 0;
    if( ddlListLoad(pEng, &list, &zErr)==SQLITE_OK ){
      for(i=0; i<list.n; i++){
        if( list.a[i].meta.iId>=pEng->iNextTableId ){
          pEng->iNextTableId = list.a[i].meta.iId+1;
        }
      }
    }
    sqlite3_free(zErr);               /* damaged: the removal starts afresh */
    ddlListClear(&list);
  }
  for(i=0; rc==SQLITE_OK && i<p->nNew; i++){
    KvTable *t = p->apNew[i];
    KvBuf buf = {0, 0, 0};
    if( t->bLive || t->pData
     || !kv_map_get(p->pSchema->pWrite, t->zName, t->nName, &e) || e.bTomb ){
      continue;
    }
    t->meta.iId = pEng->iNextTableId++;
    rc = kv_meta_encode(&t->meta, &buf);
    if( rc==SQLITE_OK ){
      rc = kv_map_put(&p->pSchema->pWrite, t->zName, t->nName, buf.a, buf.n,
                      0, 0);
    }
    kv_buf_free(&buf);
    if( rc==SQLITE_OK ) rc = kvTableOpenData(t, 1, pzErr);
    if( rc==SQLITE_OK && t->pBackend->xShare ){
      rc = t->pBackend->xShare(t->pData, pzErr);
    }
  }
  pthread_mutex_unlock(&pEng->mutex);
  /* The tables it removes, listed before the record exists.  A damaged
  ** list is started afresh: the files it named stay (later tables get
  ** higher ids), which costs space, never a table. */
  if( rc==SQLITE_OK && add.n>0 ){
    char *zErr = 0;
    rc = ddlListLoad(pEng, &list, &zErr);
    if( rc==SQLITE_CORRUPT ){
      sqlite3_log(rc, "%s: started afresh", zErr);
      rc = SQLITE_OK;
    }else if( rc!=SQLITE_OK ){
      *pzErr = zErr;
      zErr = 0;
    }
    sqlite3_free(zErr);
  }
  for(i=0; rc==SQLITE_OK && i<add.n; i++){
    rc = ddlListAdd(&list, add.a[i].zName, add.a[i].nName, &add.a[i].meta);
  }
  if( rc==SQLITE_OK && add.n>0 ) rc = ddlListSave(pEng, &list, pzErr);
  ddlListClear(&add);
  ddlListClear(&list);
  return rc;
}

/* ---------------------------------------------------------- reaping --- */

static int ddlIdLive(KvEngine *pEng, uint64_t iId){
  KvTable *t;
  for(t=pEng->pTables; t; t=t->pNext){
    if( t->meta.iId==iId ) return 1;
  }
  return 0;
}

/* Open the table of entry e as a joiner would and delete its files.
** Engine mutex held. */
static int ddlDropFiles(KvEngine *pEng, const DdlEntry *e, char **pzErr){
  KvTable *t = 0;
  int bJoining = pEng->bJoining;
  int rc = kvTableNew(pEng, e->zName, e->nName, &e->meta, &t, pzErr);
  if( rc==SQLITE_OK ){
    pEng->bJoining = pEng->bShared;
    rc = kvTableOpenData(t, 0, pzErr);
    pEng->bJoining = bJoining;
  }
  if( rc==SQLITE_OK ) rc = t->pBackend->xDrop(t->pData, pzErr);
  kvTableUnref(t);
  return rc;
}

/* Delete the files of every entry whose id is in aId (n ids; aId NULL:
** every entry whose table is gone) and rewrite the list without them.
** Engine mutex not held; writer lock held, or the store alone. */
static int ddlDropListed(KvEngine *pEng, const uint64_t *aId, int n,
                         char **pzErr){
  DdlList list, keep;
  int i, j, rc, nDone = 0;
  memset(&keep, 0, sizeof(keep));
  rc = ddlListLoad(pEng, &list, pzErr);
  if( rc!=SQLITE_OK || list.n==0 ) return rc;
  pthread_mutex_lock(&pEng->mutex);
  /* Every catalog change up to now applied (the writer lock is held): an
  ** id that names a live table again keeps its files. */
  if( pEng->bShared ) rc = pEng->xCatchUp(pEng, 0, pzErr);
  for(i=0; rc==SQLITE_OK && i<list.n; i++){
    DdlEntry *e = &list.a[i];
    int bDrop = 0;
    if( aId ){
      for(j=0; j<n; j++) if( aId[j]==e->meta.iId ) bDrop = 1;
    }else{
      bDrop = 1;
    }
    if( bDrop && !ddlIdLive(pEng, e->meta.iId) ){
      char *zErr = 0;
      int rc2 = ddlDropFiles(pEng, e, &zErr);
      if( rc2!=SQLITE_OK ){
        sqlite3_log(rc2, "kv: store %s: files of removed table %s (id %llu) "
            "stay: %s", pEng->zDir, e->zName,
            (unsigned long long)e->meta.iId, zErr ? zErr : "");
      }
      sqlite3_free(zErr);
      nDone++;
    }else{
      rc = ddlListAdd(&keep, e->zName, e->nName, &e->meta);
    }
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && nDone>0 ) rc = ddlListSave(pEng, &keep, pzErr);
  ddlListClear(&list);
  ddlListClear(&keep);
  return rc;
}

int kvDdlOpenAlone(KvEngine *pEng, char **pzErr){
  char *zErr = 0;
  int rc;
  (void)pzErr;
  if( pEng->zDir==0 || pEng->bReadOnly ) return SQLITE_OK;
  rc = ddlDropListed(pEng, 0, 0, &zErr);
  if( rc!=SQLITE_OK ){
    /* Never a reason not to open: a damaged list goes, and the files it
    ** named stay (later tables get higher ids). */
    sqlite3_log(rc, "kv: store %s: removed tables' files not deleted: %s",
                pEng->zDir, zErr ? zErr : sqlite3_errstr(rc));
    if( rc==SQLITE_CORRUPT ){
      DdlList empty;
      char *zIgnore = 0;
      memset(&empty, 0, sizeof(empty));
      ddlListSave(pEng, &empty, &zIgnore);
      sqlite3_free(zIgnore);
    }
  }
  sqlite3_free(zErr);
  return SQLITE_OK;
}

int kvDdlReapDue(KvEngine *pEng, uint64_t *pcidDue){
  KvDdl *d = pEng->pDdl;
  if( d==0 || d->nId==0 ) return 0;
  *pcidDue = d->cidDue;
  return 1;
}

int kvDdlReapCollect(KvEngine *pEng, char **pzErr){
  KvDdl *d = pEng->pDdl;
  DdlList list;
  int64_t iNow = ddlNowMs();
  int i, rc;
  if( d==0 ){
    if( (d = sqlite3_malloc64(sizeof(*d)))==0 ) return SQLITE_NOMEM;
    memset(d, 0, sizeof(*d));
    pEng->pDdl = d;
  }
  if( d->nId>0 || iNow-d->iCheckMs<KV_DDL_CHECK_MS ) return SQLITE_OK;
  d->iCheckMs = iNow;
  rc = ddlListLoad(pEng, &list, pzErr);
  if( rc!=SQLITE_OK ) d->iCheckMs = iNow + KV_DDL_RETRY_MS;
  if( rc!=SQLITE_OK || list.n==0 ) return rc;
  sqlite3_free(d->aId);
  d->aId = sqlite3_malloc64(list.n*sizeof(uint64_t));
  if( d->aId==0 ) rc = SQLITE_NOMEM;
  pthread_mutex_lock(&pEng->mutex);
  if( rc==SQLITE_OK && !pEng->rcFailed ){
    rc = pEng->xCatchUp(pEng, 0, pzErr);
  }
  for(i=0; rc==SQLITE_OK && i<list.n; i++){
    if( !ddlIdLive(pEng, list.a[i].meta.iId) ){
      d->aId[d->nId++] = list.a[i].meta.iId;
    }
  }
  d->cidDue = pEng->cidSeen;
  pthread_mutex_unlock(&pEng->mutex);
  if( rc!=SQLITE_OK ){
    d->nId = 0;
    d->iCheckMs = iNow + KV_DDL_RETRY_MS;
  }
  ddlListClear(&list);
  return rc;
}

int kvDdlReapRun(KvEngine *pEng, char **pzErr){
  KvDdl *d = pEng->pDdl;
  int rc;
  if( d==0 || d->nId==0 ) return SQLITE_OK;
  rc = ddlDropListed(pEng, d->aId, d->nId, pzErr);
  if( rc==SQLITE_OK ){
    sqlite3_log(SQLITE_NOTICE, "kv: store %s: deleted the files of %d "
                "removed table%s", pEng->zDir, d->nId, d->nId==1 ? "" : "s");
  }else{
    d->iCheckMs = ddlNowMs() + KV_DDL_RETRY_MS;    /* collected again */
  }
  d->nId = 0;
  return rc;
}

void kvDdlFree(KvEngine *pEng){
  KvDdl *d = pEng->pDdl;
  if( d==0 ) return;
  sqlite3_free(d->aId);
  sqlite3_free(d);
  pEng->pDdl = 0;
}

#ifdef DEPOT_TEST
static int ddlTestKillAt = -1;      /* kv_engine_test_kill_ddl */

void kv_engine_test_kill_ddl(int iAt){
  __atomic_store_n(&ddlTestKillAt, iAt, __ATOMIC_SEQ_CST);
}

void kvDdlTestPoint(KvRoot *p, int iAt){
  if( p->bWriterLock && p->pSchema && kv_map_count(p->pSchema->pWrite)>0
   && __atomic_load_n(&ddlTestKillAt, __ATOMIC_SEQ_CST)==iAt ){
    raise(SIGKILL);
  }
}
#endif /* DEPOT_TEST */
