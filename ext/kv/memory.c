/*
** memory.c -- the kv_memory backend: a table's committed state is one
** copy-on-write ordered map (map.h) in memory.
**
** A snapshot is a reference to the current version, so readers never block
** and never see later commits; xApply builds the next version (in place
** when no snapshot shares the nodes).  The data is volatile: with
** persistence=1 the engine logs the actions in the root WAL and replays
** live records at open; the table has no data file, so a batch is durable
** as soon as it is published (xDurable says so at once).
*/
#include "config.h"
#include "ext/kv/backend.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

struct KvBackendTable {
  KvMap *pData;                 /* published version; engine mutex */
  KvMapCursor *pApply;          /* xApply's walk of a batch, reused (on no
                                ** version between batches); engine mutex */
};
/* A snapshot is a reference to a version: the KvBackendSnap pointer is
** the KvMap itself.  A cursor is a kv_map cursor on it: the
** KvBackendCursor pointer is the KvMapCursor.  Neither costs an
** allocation of its own. */
#define memSnapMap(s)  ((KvMap*)(s))
#define memCsr(c)      ((KvMapCursor*)(c))

static int memOpen(const KvTableDef *pDef, int bCreate, KvBackendTable **pp,
                   char **pzErr){
  KvBackendTable *p = sqlite3_malloc64(sizeof(*p));
  (void)pDef; (void)bCreate; (void)pzErr;
  *pp = 0;
  if( p==0 ) return SQLITE_NOMEM;
  p->pData = kv_map_new();
  p->pApply = kv_map_cursor_new(0);
  if( p->pData==0 || p->pApply==0 ){
    kv_map_unref(p->pData);
    kv_map_cursor_free(p->pApply);
    sqlite3_free(p);
    return SQLITE_NOMEM;
  }
  *pp = p;
  return SQLITE_OK;
}

static void memClose(KvBackendTable *p){
  if( p ){
    kv_map_unref(p->pData);
    kv_map_cursor_free(p->pApply);
    sqlite3_free(p);
  }
}

static int memDrop(KvBackendTable *p, char **pzErr){
  (void)p; (void)pzErr;
  return SQLITE_OK;              /* no files */
}

static int memSnapshot(KvBackendTable *p, KvBackendSnap **pp){
  *pp = (KvBackendSnap*)kv_map_ref(p->pData);
  return SQLITE_OK;
}

static void memSnapshotFree(KvBackendSnap *s){
  kv_map_unref(memSnapMap(s));
}

static int memSnapshotDup(KvBackendSnap *s, KvBackendSnap **pp){
  *pp = (KvBackendSnap*)kv_map_ref(memSnapMap(s));
  return SQLITE_OK;
}

static int memGet(KvBackendSnap *s, const uint8_t *aKey, int nKey,
                  int *pbFound, KvMapEntry *pOut){
  *pbFound = kv_map_get(memSnapMap(s), aKey, nKey, pOut) && !pOut->bTomb;
  return SQLITE_OK;
}

static int memGetNow(KvBackendTable *p, const uint8_t *aKey, int nKey,
                     KvMapEntry *pOut, int *pbFound){
  *pbFound = kv_map_get(p->pData, aKey, nKey, pOut) && !pOut->bTomb;
  if( *pbFound ) kv_map_value_pin(pOut->aVal);
  return SQLITE_OK;
}

static int memCursorOpen(KvBackendSnap *s, KvBackendCursor **pp){
  KvMapCursor *pCsr = kv_map_cursor_new(memSnapMap(s));
  *pp = (KvBackendCursor*)pCsr;
  return pCsr ? SQLITE_OK : SQLITE_NOMEM;
}

static void memCursorClose(KvBackendCursor *c){
  kv_map_cursor_free(memCsr(c));
}

static int memCursorSeek(KvBackendCursor *c, int eSeek, const void *a, int n){
  return kv_map_cursor_seek(memCsr(c), eSeek, a, n);
}
static int memCursorNext(KvBackendCursor *c){
  return kv_map_cursor_next(memCsr(c));
}
static int memCursorPrev(KvBackendCursor *c){
  return kv_map_cursor_prev(memCsr(c));
}
static void memCursorEntry(KvBackendCursor *c, KvMapEntry *pOut){
  kv_map_cursor_entry(memCsr(c), pOut);
}
static int memCursorStep(KvBackendCursor *c, int bPrev, KvMapEntry *pOut){
  return kv_map_cursor_step(memCsr(c), bPrev, pOut);
}

/* Fold every entry of pBatch into the published map.  Only SQLITE_NOMEM
** can fail it, part-way: the entries applied so far stay (the engine
** reports the error; a persistent batch is still in the WAL). */
static int memApply(KvBackendTable *p, KvMap *pBatch, uint64_t iSeq,
                    uint64_t cid){
  KvMap *pNew = kv_map_ref(p->pData);
  KvMapCursor *pCsr = p->pApply;
  KvMapEntry e;
  int rc = SQLITE_OK;
  int bOn;
  (void)cid;
  kv_map_cursor_reset(pCsr, pBatch);
  /* Drop the published reference so that, when no snapshot shares the
  ** nodes, the updates below happen in place. */
  kv_map_unref(p->pData);
  p->pData = 0;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0);
      bOn && rc==SQLITE_OK; bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    if( e.bTomb ){
      rc = kv_map_remove(&pNew, e.aKey, e.nKey);
    }else{
      rc = kv_map_put_from(&pNew, pCsr, iSeq, 0);   /* shares the bytes */
    }
  }
  kv_map_cursor_reset(pCsr, 0);         /* the batch is not kept */
  p->pData = pNew;   /* on NOMEM: the entries applied so far stay */
  return rc;
}

static int memDurable(KvBackendTable *p, uint64_t cid){
  (void)p; (void)cid;
  return 1;
}

static void memStats(KvBackendTable *p, int64_t *pnRow, int64_t *pnByte){
  *pnRow = kv_map_count(p->pData);
  *pnByte = kv_map_bytes(p->pData);
}

const KvBackend kvMemoryBackend = {
  "kv_memory",
  memOpen, memClose, memDrop,
  memSnapshot, memSnapshotFree, memSnapshotDup, memGet,
  memCursorOpen, memCursorClose, memCursorSeek, memCursorNext, memCursorPrev,
  memCursorEntry,
  memApply, memDurable, memStats,
  0, 0,                         /* any directory; xStats only */
  0, 0,                         /* in memory: reads cannot fail */
  0,                            /* always writable */
  1,                            /* no data file: records need no confirm */
  0, 0,                         /* no files */
  0,                            /* xApply fails only for want of memory */
  memGetNow,                    /* a read with no root: one lookup */
  0, 0,                         /* no files: no write at apply, no CIDs */
  KV_ENTRY_STABLE|KV_ENTRY_TERM, /* entries live in the snapshot's version,
                                ** a kv_map (values terminated: map.h) */
  memCursorStep,
  0, 0,                         /* shared stores: persistence=0 tables stay
                                ** private to their process, persistence=1
                                ** ones are not shared */
  0,                            /* (so no shared sync) */
  0                             /* nor shared background work */
};
