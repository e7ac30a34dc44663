/*
** db.c -- one database branch in the outer store (see vfs/db.h): name
** resolution, the head row, page reads as of a txid through the page index,
** and the commit transaction with its head compare-and-set.
*/
#include "config.h"
#include "vfs/db.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <sys/time.h>

static int dbErr(char **pzErr, int rc, const char *zFmt, const char *zArg){
  if( pzErr ){
    sqlite3_free(*pzErr);
    *pzErr = sqlite3_mprintf(zFmt, zArg);
  }
  return rc;
}

static int dbStoreErr(Store *pStore, char **pzErr, int rc){
  return dbErr(pzErr, rc, "depot: %s", store_errmsg(pStore));
}

int depot_db_resolve(Store *pStore, const char *zDb, const char *zBranch,
                     uint64_t *piBranch, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  PtrValue pv;
  int rc = store_get(pStore, k, layout_key_dbptr(k, zDb, zBranch),
                     &pVal, &nVal);
  *piBranch = 0;
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  if( pVal ){
    if( layout_ptr_decode(pVal, nVal, &pv)!=SQLITE_OK ){
      rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: corrupt pointer row of"
                 " database %s", zDb);
    }else{
      *piBranch = pv.iBranch;
    }
  }
  sqlite3_free(pVal);
  return rc;
}

int depot_db_head(Store *pStore, uint64_t iBranch, DbHead *pHead,
                  char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int rc;
  memset(pHead, 0, sizeof(*pHead));
  if( iBranch==0 ) return SQLITE_OK;
  rc = store_get(pStore, k, layout_key_br(k, iBranch, LAYOUT_BR_HEAD),
                 &pVal, &nVal);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  if( pVal==0 ){
    rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: branch has no head row%s", "");
  }else if( layout_head_decode(pVal, nVal, pHead)!=SQLITE_OK ){
    memset(pHead, 0, sizeof(*pHead));
    rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: corrupt head row%s", "");
  }
  sqlite3_free(pVal);
  return rc;
}

/* ---- page reads ---- */

typedef struct PidxHit PidxHit;
struct PidxHit {
  int bFound;
  int rc;
  uint64_t iOwner;
  PidxValue v;
};

static int dbPidxRow(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  PidxHit *p = (PidxHit*)pArg;
  p->bFound = 1;
  p->iOwner = nKey>=8 ? bytes_get64(pKey+nKey-8) : 0;
  p->rc = layout_pidx_decode(pVal, nVal, &p->v);
  return 1;
}

void depot_chunk_cache_stable(DepotChunkCache *p, int bStable){
  p->bStable = bStable;
  memset(p->aNoPidxLo, 0, sizeof(p->aNoPidxLo));
  memset(p->aNoPidxHi, 0, sizeof(p->aNoPidxHi));
  p->shard.bValid = 0;
  p->win.bValid = 0;
  p->win.iLastBranch = 0;
}

void depot_chunk_cache_clear(DepotChunkCache *p){
  memset(p, 0, sizeof(*p));
}

/* Which blob a chunk belongs to: DELTA/{iTxid} (iShard 0) or the shard
** version SHARD/{iShard-1}/{iTxid}. */
typedef struct BlobId BlobId;
struct BlobId {
  uint64_t iBranch, iTxid;
  uint32_t iShard;
};

static int dbChunkKey(unsigned char *k, const BlobId *pId, uint32_t iChunk){
  if( pId->iShard ){
    return layout_key_shard_chunk(k, pId->iBranch, pId->iShard-1, pId->iTxid,
                                  iChunk);
  }
  return layout_key_delta(k, pId->iBranch, pId->iTxid, iChunk);
}

/* Copy bytes [iOff, iOff+n) of blob pId into pOut, reading from each
** chunk row that covers them only the bytes wanted (store_get_range():
** the store reads a range of a chunk without loading the rest of it). */
static int dbReadRange(Store *pStore, const BlobId *pId, uint32_t szChunk,
                       uint32_t iOff, uint32_t n, unsigned char *pOut,
                       char **pzErr){
  uint32_t iChunk = iOff/szChunk, nDone = 0;
  int rc = SQLITE_OK;
  while( rc==SQLITE_OK && nDone<n ){
    unsigned char k[LAYOUT_MAX_KEY];
    uint32_t iAt = (iOff+nDone) - iChunk*szChunk;
    uint32_t nTake = szChunk - iAt;
    int nGot = 0;
    if( nTake > n-nDone ) nTake = n-nDone;
    rc = store_get_range(pStore, k, dbChunkKey(k, pId, iChunk), (int)iAt,
                         (int)nTake, pOut+nDone, &nGot);
    if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
    if( nGot<0 || (uint32_t)nGot!=nTake ){
      rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: %s blob chunk missing or"
                 " short", pId->iShard ? "shard" : "page");
    }else{
      nDone += nTake;
      iChunk++;
    }
  }
  return rc;
}

static int dbFindOwner(Store *pStore, uint64_t iBranch, uint32_t pgno,
                       uint64_t iTxid, PidxHit *pHit, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int nLo = layout_key_pidx(lo, iBranch, pgno, 0);
  int nHi = layout_key_pidx(hi, iBranch, pgno, iTxid+1);
  int rc = store_scan(pStore, lo, nLo, hi, nHi, STORE_SCAN_REVERSE, 1,
                      dbPidxRow, pHit);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  if( pHit->bFound && pHit->rc!=SQLITE_OK ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: corrupt page index row%s", "");
  }
  return SQLITE_OK;
}

static int dbNextRow(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  uint32_t *pNext = (uint32_t*)pArg;
  (void)pVal; (void)nVal;
  if( nKey>=12 ) *pNext = bytes_get32(pKey+nKey-12);
  return 1;
}

typedef struct ShardHit ShardHit;
struct ShardHit {
  int bFound;
  int rc;
  uint64_t iAsOf;
  ShardRow row;
};

static int dbShardRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  ShardHit *p = (ShardHit*)pArg;
  p->bFound = 1;
  p->iAsOf = nKey>=8 ? bytes_get64(pKey+nKey-8) : 0;
  p->rc = layout_shard_decode(pVal, nVal, &p->row);
  return 1;
}

int depot_shard_find(Store *pStore, uint64_t iBranch, uint32_t iShard,
                     uint64_t iTxid, int *pbFound, uint64_t *piAsOf,
                     ShardRow *pRow, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  ShardHit *pHit = sqlite3_malloc64(sizeof(*pHit));
  int nLo = layout_key_shard(lo, iBranch, iShard, 0);
  int nHi = layout_key_shard(hi, iBranch, iShard, iTxid+1);
  int rc;
  *pbFound = 0;
  if( pHit==0 ) return SQLITE_NOMEM;
  memset(pHit, 0, sizeof(*pHit));
  rc = store_scan(pStore, lo, nLo, hi, nHi, STORE_SCAN_REVERSE, 1,
                  dbShardRow, pHit);
  if( rc!=SQLITE_OK ){
    rc = dbStoreErr(pStore, pzErr, rc);
  }else if( pHit->bFound && pHit->rc!=SQLITE_OK ){
    rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: corrupt shard row%s", "");
  }else if( pHit->bFound ){
    *pbFound = 1;
    *piAsOf = pHit->iAsOf;
    *pRow = pHit->row;
  }
  sqlite3_free(pHit);
  return rc;
}

/* The first page at or after pgno with a shard version at level i
** (0xffffffff: none): a shard holds every page of its range. */
static int dbNextShardPage(Store *pStore, uint64_t iBranch, uint32_t pgno,
                           uint32_t *pNext, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  uint32_t iShard = (pgno-1)/LAYOUT_SHARD_SIZE;
  int nLo = layout_key_shard(lo, iBranch, iShard, 0);
  int nHi = layout_key_br(hi, iBranch, LAYOUT_BR_SHARD+1);
  uint32_t aNext[1] = { 0xffffffff };
  int rc = store_scan(pStore, lo, nLo, hi, nHi, 0, 1, dbNextRow, aNext);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  *pNext = 0xffffffff;
  if( aNext[0]!=0xffffffff ){
    /* dbNextRow read the u32 12 bytes from the end: the shard number */
    *pNext = aNext[0]==iShard ? pgno : aNext[0]*LAYOUT_SHARD_SIZE+1;
  }
  return SQLITE_OK;
}

/* Page pgno has neither a row nor a shard at level i: find the next page
** that has one there (any txid) and remember the run between as that
** level's gap. */
static int dbFindGap(Store *pStore, DepotChain *pChain, int i, uint32_t pgno,
                     char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  uint32_t iNext = 0xffffffff, iShardNext = 0xffffffff;
  int nLo = layout_key_pidx(lo, pChain->aBranch[i], pgno, 0);
  int nHi = layout_key_br(hi, pChain->aBranch[i], LAYOUT_BR_PIDX+1);
  int rc = store_scan(pStore, lo, nLo, hi, nHi, 0, 1, dbNextRow, &iNext);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  rc = dbNextShardPage(pStore, pChain->aBranch[i], pgno, &iShardNext, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( iShardNext<iNext ) iNext = iShardNext;
  pChain->aGapLo[i] = pgno;
  pChain->aGapHi[i] = iNext>pgno ? iNext : pgno;
  return SQLITE_OK;
}

/* Where page pgno comes from. */
typedef struct PageSrc PageSrc;
struct PageSrc {
  PidxHit hit;              /* a page index row ... */
  ShardHit shard;           /* ... or a shard version (bFound, newer) */
  uint64_t iBranch;         /* level it was found at */
};

/* Level i of the chain for page pgno: the page index row and the shard
** version at or before the level's cap; keep the newer (see db.h). */
/* The page index row of pgno at level i, skipping the seek inside a
** remembered run of pages without rows (stable snapshots only). */
/* The page index rows of pages [pgno, pgno+DEPOT_PIDX_WINDOW) of branch
** b, capped at iCap, with one scan of at most DEPOT_PIDX_WINDOW_ROWS rows
** (a page whose rows the limit cuts off ends the window). */
#define DEPOT_PIDX_WINDOW_ROWS (4*DEPOT_PIDX_WINDOW)
typedef struct PidxWinScan PidxWinScan;
struct PidxWinScan {
  struct DepotPidxWindow *w;
  int nRow;
  uint32_t iLastPg;
};

static int dbPidxWinRow(void *pArg, const unsigned char *pKey, int nKey,
                        const unsigned char *pVal, int nVal){
  PidxWinScan *x = (PidxWinScan*)pArg;
  struct DepotPidxWindow *w = x->w;
  uint32_t pg;
  uint64_t iTxid;
  x->nRow++;
  if( nKey<12 ) return 0;
  pg = bytes_get32(pKey+nKey-12);
  iTxid = bytes_get64(pKey+nKey-8);
  x->iLastPg = pg;
  if( pg>=w->lo && pg<w->lo+DEPOT_PIDX_WINDOW && iTxid<=w->iCap ){
    struct DepotPidxSlot *s = &w->a[pg-w->lo];
    s->bFound = 1;
    s->iOwner = iTxid;
    s->rc = layout_pidx_decode(pVal, nVal, &s->v);
  }
  return 0;
}

static int dbPidxWindow(Store *pStore, struct DepotPidxWindow *w,
                        uint64_t b, uint64_t iCap, uint32_t pgno,
                        char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  PidxWinScan x;
  int rc, nLo, nHi;
  w->bValid = 0;
  if( pgno>0xffffffff-DEPOT_PIDX_WINDOW ) return SQLITE_OK;
  w->iBranch = b;
  w->iCap = iCap;
  w->lo = pgno;
  memset(w->a, 0, sizeof(w->a));
  memset(&x, 0, sizeof(x));
  x.w = w;
  nLo = layout_key_pidx(lo, b, pgno, 0);
  nHi = layout_key_pidx(hi, b, pgno+DEPOT_PIDX_WINDOW, 0);
  rc = store_scan(pStore, lo, nLo, hi, nHi, 0, DEPOT_PIDX_WINDOW_ROWS,
                  dbPidxWinRow, &x);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  w->hi = x.nRow<DEPOT_PIDX_WINDOW_ROWS ? pgno+DEPOT_PIDX_WINDOW : x.iLastPg;
  w->bValid = w->hi>pgno;
  return SQLITE_OK;
}

/* The window's answer for page pgno of level (b, iCap): 1 when it has
** one (then in *pHit, or rc), else 0. */
static int dbPidxFromWindow(struct DepotPidxWindow *w, uint64_t b,
                            uint64_t iCap, uint32_t pgno, PidxHit *pHit,
                            int *pRc, char **pzErr){
  struct DepotPidxSlot *s;
  if( !w->bValid || w->iBranch!=b || w->iCap!=iCap || pgno<w->lo
   || pgno>=w->hi ){
    return 0;
  }
  s = &w->a[pgno-w->lo];
  *pRc = SQLITE_OK;
  if( s->bFound ){
    pHit->bFound = 1;
    pHit->rc = s->rc;
    pHit->iOwner = s->iOwner;
    pHit->v = s->v;
    if( s->rc!=SQLITE_OK ){
      *pRc = dbErr(pzErr, SQLITE_CORRUPT, "depot: corrupt page index"
                   " row%s", "");
    }
  }
  return 1;
}

static int dbLookPidx(Store *pStore, DepotChunkCache *pMemo,
                      DepotChain *pChain, int i, uint32_t pgno,
                      PidxHit *pHit, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  uint64_t b = pChain->aBranch[i];
  uint32_t iNext = 0xffffffff;
  int bMemo = pMemo && pMemo->bStable, rc, nLo, nHi;
  if( bMemo && pgno>=pMemo->aNoPidxLo[i] && pgno<pMemo->aNoPidxHi[i] ){
    return SQLITE_OK;
  }
  if( bMemo ){
    struct DepotPidxWindow *w = &pMemo->win;
    int bSeq = w->iLastBranch==b && w->iLastLevel==i && w->iLast+1==pgno;
    w->iLastBranch = b;
    w->iLastLevel = i;
    w->iLast = pgno;
    if( dbPidxFromWindow(w, b, pChain->aCap[i], pgno, pHit, &rc, pzErr) ){
      return rc;
    }
    if( bSeq ){
      rc = dbPidxWindow(pStore, w, b, pChain->aCap[i], pgno, pzErr);
      if( rc!=SQLITE_OK ) return rc;
      if( dbPidxFromWindow(w, b, pChain->aCap[i], pgno, pHit, &rc, pzErr) ){
        return rc;
      }
    }
  }
  rc = dbFindOwner(pStore, b, pgno, pChain->aCap[i], pHit, pzErr);
  if( rc!=SQLITE_OK || pHit->bFound || !bMemo ) return rc;
  nLo = layout_key_pidx(lo, b, pgno, 0);
  nHi = layout_key_br(hi, b, LAYOUT_BR_PIDX+1);
  rc = store_scan(pStore, lo, nLo, hi, nHi, 0, 1, dbNextRow, &iNext);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  pMemo->aNoPidxLo[i] = pgno;
  pMemo->aNoPidxHi[i] = iNext>pgno ? iNext : pgno;
  return SQLITE_OK;
}

/* The shard version of pgno at level i, remembering the last lookup
** (stable snapshots only). */
static int dbLookShard(Store *pStore, DepotChunkCache *pMemo,
                       DepotChain *pChain, int i, uint32_t pgno,
                       ShardHit *pShard, char **pzErr){
  struct DepotShardMemo *m = pMemo ? &pMemo->shard : 0;
  uint64_t b = pChain->aBranch[i], iCap = pChain->aCap[i];
  uint32_t iShard = (pgno-1)/LAYOUT_SHARD_SIZE;
  int rc;
  if( m && pMemo->bStable && m->bValid && m->iBranch==b && m->iCap==iCap
   && m->iShard==iShard ){
    pShard->bFound = m->bFound;
    pShard->iAsOf = m->iAsOf;
    if( m->bFound ) pShard->row = m->row;
    return SQLITE_OK;
  }
  rc = depot_shard_find(pStore, b, iShard, iCap, &pShard->bFound,
                        &pShard->iAsOf, &pShard->row, pzErr);
  if( rc==SQLITE_OK && m && pMemo->bStable ){
    m->bValid = 1;
    m->bFound = pShard->bFound;
    m->iBranch = b;
    m->iCap = iCap;
    m->iShard = iShard;
    m->iAsOf = pShard->iAsOf;
    if( pShard->bFound ) m->row = pShard->row;
  }
  return rc;
}

static int dbLookLevel(Store *pStore, DepotChunkCache *pMemo,
                       DepotChain *pChain, int i, uint32_t pgno,
                       PageSrc *pSrc, char **pzErr){
  uint64_t b = pChain->aBranch[i];
  int rc = dbLookPidx(pStore, pMemo, pChain, i, pgno, &pSrc->hit, pzErr);
  if( rc==SQLITE_OK ){
    rc = dbLookShard(pStore, pMemo, pChain, i, pgno, &pSrc->shard, pzErr);
  }
  if( rc!=SQLITE_OK ) return rc;
  if( pSrc->shard.bFound && pSrc->hit.bFound
   && pSrc->hit.iOwner>pSrc->shard.iAsOf ){
    pSrc->shard.bFound = 0;
  }else if( pSrc->shard.bFound ){
    pSrc->hit.bFound = 0;
  }
  pSrc->iBranch = b;
  return SQLITE_OK;
}

/* The source of page pgno: level by level down the chain, skipping levels
** whose cap is 0 and ancestor levels whose gap holds the page. */
static int dbFindSource(Store *pStore, DepotChunkCache *pMemo,
                        DepotChain *pChain, uint32_t pgno,
                        PageSrc *pSrc, char **pzErr){
  int i, rc = SQLITE_OK;
  for(i=0; i<pChain->n; i++){
    if( pChain->aCap[i]==0 ) continue;
    if( i>0 && pgno>=pChain->aGapLo[i] && pgno<pChain->aGapHi[i] ) continue;
    rc = dbLookLevel(pStore, pMemo, pChain, i, pgno, pSrc, pzErr);
    if( rc!=SQLITE_OK || pSrc->hit.bFound || pSrc->shard.bFound ) break;
    if( i>0 ) rc = dbFindGap(pStore, pChain, i, pgno, pzErr);
    if( rc!=SQLITE_OK ) break;
  }
  return rc;
}

/* Read the frame of page pgno at (pId, iOffset, nByte) and decode it.  A
** frame of up to 8 KiB (pages of 4 KiB and less) is read into a buffer on
** the stack, a larger one into the heap. */
static int dbReadFrame(Store *pStore, DepotChunkCache *pChunks,
                       ZSTD_DCtx *pDctx, const BlobId *pId, uint32_t szChunk,
                       uint32_t iOffset, uint32_t nByte, uint32_t pgno,
                       uint32_t szPage, unsigned char *pOut, char **pzErr){
  unsigned char aBuf[8192];
  unsigned char *aFrame = aBuf;
  int rc;
  if( nByte > LTX_FRAME_HEADER + ZSTD_compressBound(szPage) || szChunk==0 ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: page index or shard row"
                 " gives an oversized frame or no chunk size%s", "");
  }
  if( nByte>sizeof(aBuf) ) aFrame = sqlite3_malloc64(nByte);
  if( aFrame==0 ) return SQLITE_NOMEM;
  (void)pChunks;
  rc = dbReadRange(pStore, pId, szChunk, iOffset, nByte, aFrame, pzErr);
  if( rc==SQLITE_OK ){
    rc = ltx_decode_frame(aFrame, nByte, pgno, szPage, pDctx, pOut, 0, pzErr);
  }
  if( aFrame!=aBuf ) sqlite3_free(aFrame);
  return rc;
}

int depot_db_read_frame(Store *pStore, DepotChunkCache *pChunks,
                        ZSTD_DCtx *pDctx, uint64_t iBranch, uint64_t iTxid,
                        const PidxValue *pv, uint32_t pgno, uint32_t szPage,
                        unsigned char *pOut, char **pzErr){
  BlobId id;
  id.iBranch = iBranch;
  id.iTxid = iTxid;
  id.iShard = 0;
  return dbReadFrame(pStore, pChunks, pDctx, &id, pv->szChunk, pv->iOffset,
                     pv->nByte, pgno, szPage, pOut, pzErr);
}

int depot_db_locate(Store *pStore, DepotChunkCache *pChunks,
                    DepotChain *pChain, uint32_t pgno, DepotPageLoc *pLoc,
                    char **pzErr){
  PageSrc *pSrc = sqlite3_malloc64(sizeof(*pSrc));
  int rc, iSlot = (int)((pgno-1)%LAYOUT_SHARD_SIZE);
  memset(pLoc, 0, sizeof(*pLoc));
  if( pSrc==0 ) return SQLITE_NOMEM;
  memset(pSrc, 0, sizeof(*pSrc));
  rc = dbFindSource(pStore, pChunks, pChain, pgno, pSrc, pzErr);
  if( rc==SQLITE_OK ){
    pLoc->iBranch = pSrc->iBranch;
    if( pSrc->hit.bFound ){
      pLoc->eKind = DEPOT_LOC_DELTA;
      pLoc->iTxid = pSrc->hit.iOwner;
      pLoc->szChunk = pSrc->hit.v.szChunk;
      pLoc->iOffset = pSrc->hit.v.iOffset;
      pLoc->nByte = pSrc->hit.v.nByte;
    }else if( pSrc->shard.bFound && pSrc->shard.row.aLen[iSlot]!=0 ){
      pLoc->eKind = DEPOT_LOC_SHARD;
      pLoc->iTxid = pSrc->shard.iAsOf;
      pLoc->szChunk = pSrc->shard.row.szChunk;
      pLoc->iOffset = pSrc->shard.row.aOff[iSlot];
      pLoc->nByte = pSrc->shard.row.aLen[iSlot];
    }else{
      pLoc->eKind = DEPOT_LOC_ZERO;
      pLoc->iBranch = 0;
    }
  }
  sqlite3_free(pSrc);
  return rc;
}

uint64_t depot_loc_owner(const DepotPageLoc *pLoc){
  if( pLoc->eKind==DEPOT_LOC_DELTA ) return pLoc->iTxid;
  if( pLoc->eKind==DEPOT_LOC_SHARD ) return pLoc->iTxid | (1ULL<<63);
  return 0;
}

int depot_db_read_loc(Store *pStore, DepotCache *pCache, int bScan,
                      ZSTD_DCtx *pDctx,
                      const DepotPageLoc *pLoc, uint32_t pgno,
                      uint32_t szPage, unsigned char *pOut, char **pzErr){
  BlobId id;
  uint64_t iOwner = depot_loc_owner(pLoc);
  int rc;
  if( pLoc->eKind!=DEPOT_LOC_DELTA && pLoc->eKind!=DEPOT_LOC_SHARD ){
    memset(pOut, 0, szPage);
    return SQLITE_OK;
  }
  if( pCache && (bScan ? depot_cache_get_scan : depot_cache_get)(pCache,
                         pLoc->iBranch, pgno, iOwner, szPage, pOut) ){
    return SQLITE_OK;
  }
  id.iBranch = pLoc->iBranch;
  id.iTxid = pLoc->iTxid;
  id.iShard = pLoc->eKind==DEPOT_LOC_SHARD ?
              (pgno-1)/LAYOUT_SHARD_SIZE + 1 : 0;
  rc = dbReadFrame(pStore, 0, pDctx, &id, pLoc->szChunk, pLoc->iOffset,
                   pLoc->nByte, pgno, szPage, pOut, pzErr);
  if( rc==SQLITE_OK && pCache && bScan ){
    depot_cache_put_scan(pCache, pLoc->iBranch, pgno, iOwner, szPage, pOut);
  }else if( rc==SQLITE_OK && pCache ){
    depot_cache_put(pCache, pLoc->iBranch, pgno, iOwner, szPage, pOut);
  }
  return rc;
}

int depot_db_read_span(Store *pStore, const DepotPageLoc *pLoc, uint32_t pgno,
                       uint32_t nByte, unsigned char *pOut, char **pzErr){
  BlobId id;
  if( (pLoc->eKind!=DEPOT_LOC_DELTA && pLoc->eKind!=DEPOT_LOC_SHARD)
   || pLoc->szChunk==0 ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: no frame to read%s", "");
  }
  id.iBranch = pLoc->iBranch;
  id.iTxid = pLoc->iTxid;
  id.iShard = pLoc->eKind==DEPOT_LOC_SHARD ?
              (pgno-1)/LAYOUT_SHARD_SIZE + 1 : 0;
  return dbReadRange(pStore, &id, pLoc->szChunk, pLoc->iOffset, nByte, pOut,
                     pzErr);
}

int depot_db_loc_crc(Store *pStore, const DepotPageLoc *pLoc, uint32_t pgno,
                     uint32_t szPage, uint64_t *piCrc, char **pzErr){
  unsigned char a[LTX_FRAME_HEADER];
  BlobId id;
  int rc;
  if( pLoc->eKind!=DEPOT_LOC_DELTA && pLoc->eKind!=DEPOT_LOC_SHARD ){
    return SQLITE_NOTFOUND;
  }
  if( pLoc->nByte<LTX_FRAME_HEADER || pLoc->szChunk==0 ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: page index or shard row"
                 " gives a frame shorter than its header%s", "");
  }
  id.iBranch = pLoc->iBranch;
  id.iTxid = pLoc->iTxid;
  id.iShard = pLoc->eKind==DEPOT_LOC_SHARD ?
              (pgno-1)/LAYOUT_SHARD_SIZE + 1 : 0;
  rc = dbReadRange(pStore, &id, pLoc->szChunk, pLoc->iOffset,
                   LTX_FRAME_HEADER, a, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( bytes_get32(a)!=pgno || bytes_get32(a+4)+LTX_FRAME_HEADER!=pLoc->nByte
   || bytes_get32(a+4)>szPage ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: frame header does not match"
                 " its page index or shard row%s", "");
  }
  *piCrc = bytes_get64(a+12);
  return SQLITE_OK;
}

int depot_db_read_page(Store *pStore, DepotCache *pCache,
                       DepotChunkCache *pChunks, ZSTD_DCtx *pDctx,
                       DepotChain *pChain, uint32_t pgno,
                       uint32_t szPage, unsigned char *pOut,
                       uint64_t *piOwner, char **pzErr){
  DepotPageLoc loc;
  int rc;
  if( piOwner ) *piOwner = 0;
  rc = depot_db_locate(pStore, pChunks, pChain, pgno, &loc, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( piOwner ) *piOwner = depot_loc_owner(&loc);
  return depot_db_read_loc(pStore, pCache, 0, pDctx, &loc, pgno, szPage,
                           pOut, pzErr);
}

/* ---- commits ---- */

static uint64_t dbNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (uint64_t)tv.tv_sec*1000 + (uint64_t)tv.tv_usec/1000;
}

/* Inside the write transaction: check the name still leads where it led
** and the head still equals the base, or create the branch on its first
** commit (a fork of the inherited branch when the name was inherited). */
static int dbCasOrCreate(Store *pStore, const DepotCommit *pC, uint64_t iVs,
                         uint64_t *piBranch, char **pzErr){
  DepotName nm;
  DbHead cur;
  BranchRecord br;
  int rc = depot_name_resolve(pStore, pC->iBucket, pC->zDb, pC->zBranch,
                              &nm, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( nm.iBranch!=pC->iBranch ) return SQLITE_BUSY_SNAPSHOT;
  if( nm.iBranch ){
    rc = depot_db_head(pStore, nm.iBranch, &cur, pzErr);
    if( rc==SQLITE_OK && cur.iTxid!=pC->base.iTxid ) rc = SQLITE_BUSY_SNAPSHOT;
    *piBranch = nm.iBranch;
    return rc;
  }
  if( nm.iInhBranch!=pC->iInhBranch || nm.iInhTxid!=pC->iInhTxid ){
    return SQLITE_BUSY_SNAPSHOT;
  }
  memset(&br, 0, sizeof(br));
  memcpy(br.zDb, pC->zDb, strlen(pC->zDb));
  memcpy(br.zBranch, pC->zBranch, strlen(pC->zBranch));
  br.iParent = nm.iInhBranch;
  br.iParentTxid = nm.iInhTxid;
  br.iBucket = pC->iBucket;
  br.iCreateVs = iVs;
  rc = depot_branch_create(pStore, &br, &pC->base, piBranch, pzErr);
  if( rc==SQLITE_OK ){
    rc = depot_ptr_set(pStore, pC->iBucket, pC->zDb, pC->zBranch, 0,
                       *piBranch, iVs, 'c', pzErr);
  }
  return rc;
}

int depot_db_create(Store *pStore, const DepotCommit *pC, DbHead *pHead,
                    uint64_t *piBranch, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  uint64_t iVs = 0, iBranch = 0;
  int rc;
  if( pC->iBranch ){
    return dbErr(pzErr, SQLITE_MISUSE, "depot: branch exists already%s", "");
  }
  rc = store_begin(pStore, 1);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  rc = depot_next_vs(pStore, &iVs, pzErr);
  if( rc==SQLITE_OK ) rc = dbCasOrCreate(pStore, pC, iVs, &iBranch, pzErr);
  if( rc==SQLITE_OK ){
    *pHead = pC->base;
    pHead->iTxid = 0;
    rc = store_put(pStore, k, layout_key_br(k, iBranch, LAYOUT_BR_HEAD), v,
                   layout_head_encode(v, pHead));
    if( rc==SQLITE_OK ) rc = store_put(pStore, k, layout_key_br(k, iBranch,
        LAYOUT_BR_FORKHEAD), v, layout_head_encode(v, pHead));
    bytes_put64(v, iVs);
    if( rc==SQLITE_OK ) rc = store_put(pStore, k, layout_key_br(k, iBranch,
        LAYOUT_BR_UNBORN), v, 8);
    if( rc==SQLITE_OK ) rc = store_commit(pStore);
    if( rc!=SQLITE_OK ) dbStoreErr(pStore, pzErr, rc);
  }
  if( rc!=SQLITE_OK ) store_rollback(pStore);
  if( rc==SQLITE_OK ) *piBranch = iBranch;
  return rc;
}

/* DELTA chunk rows and one page index row per frame. */
static int dbPutBlob(Store *pStore, uint64_t iBranch, uint64_t iTxid,
                     const unsigned char *a, int64_t n, uint32_t szChunk,
                     const LtxFrameRef *aRef, uint32_t nRef){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  int64_t off;
  uint32_t i;
  int rc = SQLITE_OK;
  for(off=0, i=0; rc==SQLITE_OK && off<n; off+=szChunk, i++){
    int64_t nPart = n-off < szChunk ? n-off : szChunk;
    rc = store_put(pStore, k, layout_key_delta(k, iBranch, iTxid, i),
                   a+off, (int)nPart);
  }
  for(i=0; rc==SQLITE_OK && i<nRef; i++){
    PidxValue pv;
    pv.iOffset = aRef[i].iOffset;
    pv.nByte = aRef[i].nByte;
    pv.szChunk = szChunk;
    rc = store_put(pStore, k, layout_key_pidx(k, iBranch, aRef[i].pgno, iTxid),
                   v, layout_pidx_encode(v, &pv));
  }
  return rc;
}

/* COMMITS, VTX, LOG and head rows. */
static int dbPutCommitRows(Store *pStore, uint64_t iBranch, uint64_t iVs,
                           CommitRow *pRow, DbHead *pHead){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  LogRow lg;
  int rc;
  pRow->iVs = pHead->iVs = iVs;
  lg.iBranch = iBranch;
  lg.iTxid = pRow->iTxid;
  lg.iTimeMs = pRow->iTimeMs;
  rc = store_put(pStore, k, layout_key_log(k, iVs), v,
                 layout_log_encode(v, &lg));
  if( rc==SQLITE_OK ) rc = store_put(pStore, k,
      layout_key_commit(k, iBranch, pRow->iTxid), v,
      layout_commit_encode(v, pRow));
  bytes_put64(v, pRow->iTxid);
  if( rc==SQLITE_OK ) rc = store_put(pStore, k,
      layout_key_vtx(k, iBranch, (uint64_t)iVs), v, 8);
  if( rc==SQLITE_OK ) rc = store_put(pStore, k,
      layout_key_br(k, iBranch, LAYOUT_BR_HEAD), v, layout_head_encode(v, pHead));
  return rc;
}

/* ---- staged blobs ---- */

static int dbCountRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  (void)pKey; (void)nKey; (void)pVal; (void)nVal;
  (*(int64_t*)pArg)++;
  return 0;
}

int depot_stage_begin(DepotStageStream *pS, uint64_t iBranch, uint64_t iTxid,
                      uint32_t szChunk){
  depot_stage_reset(pS);
  pS->aTail = sqlite3_malloc64(szChunk ? szChunk : 1);
  if( pS->aTail==0 ) return SQLITE_NOMEM;
  pS->iBranch = iBranch;
  pS->iTxid = iTxid;
  pS->szChunk = szChunk;
  return SQLITE_OK;
}

void depot_stage_reset(DepotStageStream *pS){
  sqlite3_free(pS->aTail);
  memset(pS, 0, sizeof(*pS));
}

int depot_stage_clear(Store *pStore, uint64_t iBranch, uint64_t iFrom,
                      int64_t *pnRow, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int nLo = layout_key_delta(lo, iBranch, iFrom, 0);
  int nHi = layout_key_br(hi, iBranch, LAYOUT_BR_DELTA+1);
  int rc = SQLITE_OK;
  if( pnRow ){
    *pnRow = 0;
    rc = store_scan(pStore, lo, nLo, hi, nHi, 0, -1, dbCountRow, pnRow);
  }
  if( rc==SQLITE_OK ) rc = store_clear_range(pStore, lo, nLo, hi, nHi);
  return rc==SQLITE_OK ? rc : dbStoreErr(pStore, pzErr, rc);
}

int depot_stage_exists(Store *pStore, uint64_t iBranch, uint64_t iFrom,
                       int *pbExists, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int nLo = layout_key_delta(lo, iBranch, iFrom, 0);
  int nHi = layout_key_br(hi, iBranch, LAYOUT_BR_DELTA+1);
  int64_t n = 0;
  int rc = store_scan(pStore, lo, nLo, hi, nHi, 0, 1, dbCountRow, &n);
  if( rc==SQLITE_OK && n==0 ){
    nLo = layout_key_br(lo, iBranch, LAYOUT_BR_STAGE);
    nHi = layout_key_br(hi, iBranch, LAYOUT_BR_STAGE+1);
    rc = store_scan(pStore, lo, nLo, hi, nHi, 0, 1, dbCountRow, &n);
  }
  *pbExists = n>0;
  return rc==SQLITE_OK ? rc : dbStoreErr(pStore, pzErr, rc);
}

/* The first STAGE row of a scan, copied. */
typedef struct StageHit StageHit;
struct StageHit {
  int bFound;
  unsigned char aKey[LAYOUT_MAX_KEY];
  int nKey;
  unsigned char aVal[LAYOUT_STAGE_ROW];
  int nVal;                 /* -1: longer than any STAGE row */
};

static int dbStageRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  StageHit *p = (StageHit*)pArg;
  p->bFound = 1;
  p->nKey = nKey<LAYOUT_MAX_KEY ? nKey : LAYOUT_MAX_KEY;
  memcpy(p->aKey, pKey, p->nKey);
  p->nVal = nVal<=LAYOUT_STAGE_ROW ? nVal : -1;
  if( p->nVal>0 ) memcpy(p->aVal, pVal, nVal);
  return 1;
}

int depot_stage_step(Store *pStore, uint64_t iBranch, int nMax,
                     int64_t *pnRow, int *pbMore, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY], k[LAYOUT_MAX_KEY];
  unsigned char aNext[LAYOUT_MAX_KEY+1];
  StageHit *pHit = 0;
  DbHead head;
  int64_t n = 0;
  int nLo, nHi, nNext = 0, rc;
  *pnRow = 0;
  *pbMore = 0;
  rc = depot_db_head(pStore, iBranch, &head, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  /* published records: the commit of their txid happened */
  nLo = layout_key_stage(lo, iBranch, 0, 0);
  nHi = layout_key_stage(hi, iBranch, head.iTxid+1, 0);
  rc = store_clear_some(pStore, lo, nLo, hi, nHi, nMax, 0, &n, aNext,
                        (int)sizeof(aNext), &nNext);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  if( n>0 ){
    *pnRow = n;
    *pbMore = 1;
    return SQLITE_OK;
  }
  /* one record past the head: its page index rows, then itself */
  pHit = sqlite3_malloc64(sizeof(*pHit));
  if( pHit==0 ) return SQLITE_NOMEM;
  memset(pHit, 0, sizeof(*pHit));
  nLo = nHi;
  memcpy(lo, hi, nHi);
  nHi = layout_key_br(hi, iBranch, LAYOUT_BR_STAGE+1);
  rc = store_scan(pStore, lo, nLo, hi, nHi, 0, 1, dbStageRow, pHit);
  if( rc!=SQLITE_OK ){
    rc = dbStoreErr(pStore, pzErr, rc);
  }else if( pHit->bFound ){
    int nPg = pHit->nKey==nLo ? layout_stage_count(pHit->aVal, pHit->nVal)
                              : -1;
    uint64_t iTxid = nPg>=0 ? bytes_get64(pHit->aKey+pHit->nKey-12) : 0;
    int i;
    if( nPg<0 ){
      rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: corrupt staged-pages row%s",
                 "");
    }
    for(i=0; rc==SQLITE_OK && i<nPg; i++){
      rc = store_clear(pStore, k, layout_key_pidx(k, iBranch,
                       layout_stage_pgno(pHit->aVal, i), iTxid));
      if( rc!=SQLITE_OK ) dbStoreErr(pStore, pzErr, rc);
    }
    if( rc==SQLITE_OK ){
      rc = store_clear(pStore, pHit->aKey, pHit->nKey);
      if( rc!=SQLITE_OK ) dbStoreErr(pStore, pzErr, rc);
    }
    *pnRow = nPg+1;
    *pbMore = 1;
  }
  sqlite3_free(pHit);
  if( rc!=SQLITE_OK || *pbMore ) return rc;
  /* the staged blob's chunk rows */
  nLo = layout_key_delta(lo, iBranch, head.iTxid+1, 0);
  nHi = layout_key_br(hi, iBranch, LAYOUT_BR_DELTA+1);
  rc = store_clear_some(pStore, lo, nLo, hi, nHi, nMax, 0, &n, aNext,
                        (int)sizeof(aNext), &nNext);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  *pnRow = n;
  *pbMore = nNext>0;
  return SQLITE_OK;
}

int depot_stage_sweep(Store *pStore, uint64_t iBranch, int nMax,
                      char **pzErr){
  int rc;
  for(;;){
    int64_t n = 0;
    int bMore = 0;
    rc = store_begin(pStore, 1);
    if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
    rc = depot_stage_step(pStore, iBranch, nMax, &n, &bMore, pzErr);
    if( rc==SQLITE_OK ){
      rc = store_commit(pStore);
      if( rc!=SQLITE_OK ) dbStoreErr(pStore, pzErr, rc);
    }else{
      store_rollback(pStore);
    }
    if( rc!=SQLITE_OK || !bMore ) break;
  }
  return rc;
}

/* Write the stream's unwritten tail (its first pS->nBlob%szChunk bytes,
** in pS->aTail) and a[0..n) after it as DELTA chunk rows of pS's txid:
** every whole chunk row, and with bLast the partial last one too; else
** the bytes of a partial last row stay unwritten.  No row is written
** twice.  aBuf (szChunk bytes) gets the last row's bytes. */
static int dbStreamPut(Store *pStore, const DepotStageStream *pS,
                       const unsigned char *a, int64_t n, int bLast,
                       unsigned char *aBuf){
  unsigned char k[LAYOUT_MAX_KEY];
  uint32_t sz = pS->szChunk;
  uint32_t iChunk = (uint32_t)(pS->nBlob/sz);
  uint32_t nHave = (uint32_t)(pS->nBlob%sz);
  int64_t i = 0;
  int rc = SQLITE_OK;
  if( nHave ) memcpy(aBuf, pS->aTail, nHave);
  while( rc==SQLITE_OK && (i<n || (bLast && nHave>0)) ){
    uint32_t nTake = (uint32_t)(n-i < (int64_t)(sz-nHave) ? n-i : sz-nHave);
    memcpy(aBuf+nHave, a+i, nTake);
    i += nTake;
    nHave += nTake;
    if( nHave<sz && !bLast ) break;          /* the new unwritten tail */
    rc = store_put(pStore, k, layout_key_delta(k, pS->iBranch, pS->iTxid,
                                               iChunk), aBuf, nHave);
    iChunk++;
    if( i<n ) nHave = 0;
    else break;
  }
  return rc;
}

/* The stream moved past n more bytes given to dbStreamPut(). */
static void dbStreamAdvance(DepotStageStream *pS, int64_t n,
                            const unsigned char *aBuf, uint32_t nFrame){
  pS->nBlob += (uint64_t)n;
  pS->nFrame += nFrame;
  if( pS->nBlob%pS->szChunk ){
    memcpy(pS->aTail, aBuf, (size_t)(pS->nBlob%pS->szChunk));
  }
}

/* The page index rows of a staged part's frames (offsets from the
** part's start, which is at pS->nBlob) and the STAGE rows naming them. */
static int dbStagePidx(Store *pStore, const DepotStageStream *pS,
                       const LtxFrameRef *aRef, uint32_t nFrame){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  unsigned char *aRec = sqlite3_malloc64(LAYOUT_STAGE_ROW);
  uint32_t *aPg = sqlite3_malloc64(sizeof(uint32_t)*LAYOUT_STAGE_PAGES);
  uint32_t i, iPart = pS->nPart;
  int rc = SQLITE_OK;
  if( aRec==0 || aPg==0 ) rc = SQLITE_NOMEM;
  for(i=0; rc==SQLITE_OK && i<nFrame; i++){
    PidxValue pv;
    pv.iOffset = (uint32_t)(pS->nBlob + aRef[i].iOffset);
    pv.nByte = aRef[i].nByte;
    pv.szChunk = pS->szChunk;
    rc = store_put(pStore, k, layout_key_pidx(k, pS->iBranch, aRef[i].pgno,
                   pS->iTxid), v, layout_pidx_encode(v, &pv));
    aPg[i%LAYOUT_STAGE_PAGES] = aRef[i].pgno;
    if( rc==SQLITE_OK && (i+1==nFrame || (i+1)%LAYOUT_STAGE_PAGES==0) ){
      rc = store_put(pStore, k, layout_key_stage(k, pS->iBranch, pS->iTxid,
                     iPart++), aRec, layout_stage_encode(aRec, aPg,
                     (int)(i%LAYOUT_STAGE_PAGES)+1));
    }
  }
  sqlite3_free(aRec);
  sqlite3_free(aPg);
  return rc;
}

int depot_stage_append(Store *pStore, DepotStageStream *pS,
                       const unsigned char *a, int64_t n, uint32_t nFrame,
                       const LtxFrameRef *aRef, char **pzErr){
  unsigned char *aBuf;
  int rc;
  if( pS->nBlob + (uint64_t)n > 0xffffffffULL ){
    return dbErr(pzErr, SQLITE_TOOBIG, "depot: a transaction's blob would"
                 " pass 4 GiB%s", "");
  }
  aBuf = sqlite3_malloc64(pS->szChunk);
  if( aBuf==0 ) return SQLITE_NOMEM;
  rc = store_begin(pStore, 1);
  if( rc!=SQLITE_OK ){
    sqlite3_free(aBuf);
    return dbStoreErr(pStore, pzErr, rc);
  }
  if( pS->nBlob==0 ){
    rc = depot_stage_clear(pStore, pS->iBranch, pS->iTxid, 0, pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = dbStreamPut(pStore, pS, a, n, 0, aBuf);
    if( rc==SQLITE_OK ) rc = dbStagePidx(pStore, pS, aRef, nFrame);
    if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ) dbStoreErr(pStore, pzErr, rc);
  }
  if( rc==SQLITE_OK ){
    rc = store_commit(pStore);
    if( rc!=SQLITE_OK ) dbStoreErr(pStore, pzErr, rc);
  }else{
    store_rollback(pStore);
  }
  if( rc==SQLITE_OK ){
    pS->nPart += (nFrame + LAYOUT_STAGE_PAGES - 1)/LAYOUT_STAGE_PAGES;
    dbStreamAdvance(pS, n, aBuf, nFrame);
  }
  sqlite3_free(aBuf);
  return rc;
}

int depot_stage_unindex(Store *pStore, const DepotStageStream *pS,
                        const uint32_t *aPgno, uint32_t n, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  uint32_t i;
  int rc = store_begin(pStore, 1);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    rc = store_clear(pStore, k, layout_key_pidx(k, pS->iBranch, aPgno[i],
                                                pS->iTxid));
  }
  if( rc==SQLITE_OK ) rc = store_commit(pStore);
  else store_rollback(pStore);
  return rc==SQLITE_OK ? rc : dbStoreErr(pStore, pzErr, rc);
}

int depot_stage_locate(Store *pStore, const DepotStageStream *pS,
                       uint32_t pgno, PidxValue *pv, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int rc = store_get(pStore, k, layout_key_pidx(k, pS->iBranch, pgno,
                                                pS->iTxid), &pVal, &nVal);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  if( pVal==0 || layout_pidx_decode(pVal, nVal, pv)!=SQLITE_OK
   || pv->szChunk!=pS->szChunk
   || (uint64_t)pv->iOffset + pv->nByte > pS->nBlob ){
    rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: the page index row of a"
               " staged page is missing or wrong%s", "");
  }
  sqlite3_free(pVal);
  return rc;
}

/* The last part of a staged commit: its frames after the stream and
** their page index rows (the staged pages have theirs). */
static int dbPutStaged(Store *pStore, const DepotCommit *pC,
                       const unsigned char *a, int64_t n,
                       const LtxFrameRef *aRef){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  DepotStageStream *pS = pC->pStage;
  unsigned char *aBuf = sqlite3_malloc64(pS->szChunk);
  uint32_t i;
  int rc;
  if( aBuf==0 ) return SQLITE_NOMEM;
  rc = dbStreamPut(pStore, pS, a, n, 1, aBuf);
  sqlite3_free(aBuf);
  for(i=0; rc==SQLITE_OK && i<pC->nDirty; i++){
    PidxValue pv;
    pv.iOffset = (uint32_t)(pS->nBlob + aRef[i].iOffset);
    pv.nByte = aRef[i].nByte;
    pv.szChunk = pS->szChunk;
    rc = store_put(pStore, k, layout_key_pidx(k, pS->iBranch, aRef[i].pgno,
                   pS->iTxid), v, layout_pidx_encode(v, &pv));
  }
  return rc;
}

/* The places of the committed pages, when pC asks for them. */
static void dbLocOut(const DepotCommit *pC, const LtxFrameRef *aRef,
                     const CommitRow *pRow, uint64_t iBranch){
  uint32_t i;
  if( pC->aLocOut==0 ) return;
  for(i=0; i<pC->nDirty; i++){
    DepotPageLoc *pLoc = &pC->aLocOut[i];
    pLoc->eKind = DEPOT_LOC_DELTA;
    pLoc->iBranch = iBranch;
    pLoc->iTxid = pRow->iTxid;
    pLoc->szChunk = pRow->szChunk;
    pLoc->iOffset = aRef[i].iOffset
                  + (pC->pStage ? (uint32_t)pC->pStage->nBlob : 0);
    pLoc->nByte = aRef[i].nByte;
  }
}

/* 1 in *pbLeft if iBranch has STAGE rows of txid iTxid or later: rows
** that another write transaction staged and left (a crash), which a commit
** of iTxid that staged nothing itself must not publish. */
static int dbStagedLeft(Store *pStore, uint64_t iBranch, uint64_t iTxid,
                        int *pbLeft, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int nLo = layout_key_stage(lo, iBranch, iTxid, 0);
  int nHi = layout_key_br(hi, iBranch, LAYOUT_BR_STAGE+1);
  int64_t n = 0;
  int rc = store_scan(pStore, lo, nLo, hi, nHi, 0, 1, dbCountRow, &n);
  *pbLeft = n>0;
  return rc==SQLITE_OK ? rc : dbStoreErr(pStore, pzErr, rc);
}

/* One attempt at the store transaction of a commit, given the encoded
** blob.  *pbLeft is set (and nothing written, SQLITE_BUSY) when staged
** rows of another transaction are in the way (dbStagedLeft()). */
static int dbCommitOnce(Store *pStore, const DepotCommit *pC,
                       const unsigned char *aBlob, int64_t nBlob,
                       const LtxFrameRef *aRef, CommitRow *pRow,
                       DbHead *pHead, uint64_t *piBranch, int *pbLeft,
                       char **pzErr){
  uint64_t iBranch = 0, iVs = 0;
  int rc = store_begin(pStore, 1);
  *pbLeft = 0;
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  rc = depot_next_vs(pStore, &iVs, pzErr);
  if( rc==SQLITE_OK ) rc = dbCasOrCreate(pStore, pC, iVs, &iBranch, pzErr);
  if( rc==SQLITE_OK ){
    rc = depot_quota_charge(pStore, iBranch, (int64_t)nBlob, 1, pzErr);
  }
  if( rc==SQLITE_OK && pC->pStage && iBranch!=pC->pStage->iBranch ){
    rc = SQLITE_BUSY_SNAPSHOT;
  }
  if( rc==SQLITE_OK && pC->pStage==0 && pC->iBranch ){
    rc = dbStagedLeft(pStore, iBranch, pRow->iTxid, pbLeft, pzErr);
    if( rc==SQLITE_OK && *pbLeft ) rc = SQLITE_BUSY;
  }
  if( rc==SQLITE_OK ){
    if( pC->pStage ){
      rc = dbPutStaged(pStore, pC, aBlob, nBlob - pC->pStage->nBlob, aRef);
    }else{
      rc = dbPutBlob(pStore, iBranch, pRow->iTxid, aBlob, nBlob,
                     pRow->szChunk, aRef, pC->nDirty);
    }
    /* rows a crashed or abandoned staging left past the blob */
    if( rc==SQLITE_OK && pC->iBranch ){
      unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
      rc = store_clear_range(pStore, lo, layout_key_delta(lo, iBranch,
                             pRow->iTxid, pRow->nChunk), hi,
                             layout_key_br(hi, iBranch, LAYOUT_BR_DELTA+1));
    }
    if( rc==SQLITE_OK ) rc = dbPutCommitRows(pStore, iBranch, iVs, pRow,
                                             pHead);
    if( rc!=SQLITE_OK ) dbStoreErr(pStore, pzErr, rc);
  }
  if( rc==SQLITE_OK ){
    rc = store_commit(pStore);
    if( rc!=SQLITE_OK ) dbStoreErr(pStore, pzErr, rc);
  }else{
    store_rollback(pStore);
  }
  if( rc==SQLITE_OK ) *piBranch = iBranch;
  if( rc==SQLITE_OK ) dbLocOut(pC, aRef, pRow, iBranch);
  return rc;
}

/* The outcome of a commit whose COMMIT the store lost on the way
** (STORE_LOST_UNKNOWN), read from the store in a read transaction: 1 it
** is there (the name leads to its branch, whose head is its txid and whose
** commit row is the one it wrote: *piBranch gets the branch), 0 it is not
** (the head is still the base), 2 another commit took its place. */
static int dbCommitOutcome(Store *pStore, const DepotCommit *pC,
                           const CommitRow *pRow, int *peOut,
                           uint64_t *piBranch, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  DepotName nm;
  DbHead cur;
  void *pVal = 0;
  int nVal = 0, nWant;
  int rc = store_begin(pStore, 0);
  *peOut = 2;
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  rc = depot_name_resolve(pStore, pC->iBucket, pC->zDb, pC->zBranch, &nm,
                          pzErr);
  if( rc==SQLITE_OK && nm.iBranch==0 ){
    /* a commit creating its branch that did not happen */
    if( pC->iBranch==0 && nm.iInhBranch==pC->iInhBranch
     && nm.iInhTxid==pC->iInhTxid ) *peOut = 0;
  }else if( rc==SQLITE_OK && (pC->iBranch==0 || nm.iBranch==pC->iBranch) ){
    rc = depot_db_head(pStore, nm.iBranch, &cur, pzErr);
    if( rc==SQLITE_OK && cur.iTxid==pRow->iTxid ){
      rc = store_get(pStore, k, layout_key_commit(k, nm.iBranch, pRow->iTxid),
                     &pVal, &nVal);
      nWant = layout_commit_encode(v, pRow);
      if( rc!=SQLITE_OK ){
        dbStoreErr(pStore, pzErr, rc);
      }else if( pVal && nVal==nWant && memcmp(pVal, v, nWant)==0 ){
        *peOut = 1;
        *piBranch = nm.iBranch;
      }
      sqlite3_free(pVal);
    }else if( rc==SQLITE_OK && pC->iBranch && cur.iTxid==pC->base.iTxid ){
      *peOut = 0;
    }
  }
  store_rollback(pStore);
  return rc;
}

/* The store transaction of a commit: run again (at most twice more) when
** the store lost it with its connection before its commit (a failover:
** the store connects to the new primary), and when the COMMIT itself was
** lost, only after the store shows it did not happen; never for a commit
** of a staged blob, whose rows came in earlier transactions. */
static int dbCommitTxn(Store *pStore, const DepotCommit *pC,
                       const unsigned char *aBlob, int64_t nBlob,
                       const LtxFrameRef *aRef, CommitRow *pRow,
                       DbHead *pHead, uint64_t *piBranch, char **pzErr){
  int nTry, rc;
  for(nTry=0; ; nTry++){
    int eLost, eOut = 0, bLeft = 0;
    char *zLost = 0;
    rc = dbCommitOnce(pStore, pC, aBlob, nBlob, aRef, pRow, pHead, piBranch,
                      &bLeft, pzErr);
    if( rc==SQLITE_OK ) break;
    if( bLeft && nTry<2 ){
      /* remove them (the caller holds the name's write lock), then again */
      rc = depot_stage_sweep(pStore, pC->iBranch, DEPOT_STAGE_BATCH, pzErr);
      if( rc!=SQLITE_OK ) break;
      continue;
    }
    eLost = store_commit_lost(pStore);
    if( eLost==STORE_LOST_NONE ) break;
    if( eLost==STORE_LOST_UNKNOWN ){
      int rcLost = rc;
      zLost = sqlite3_mprintf("%s", pzErr && *pzErr ? *pzErr : "");
      rc = dbCommitOutcome(pStore, pC, pRow, &eOut, piBranch, pzErr);
      if( rc!=SQLITE_OK ){
        char *z = sqlite3_mprintf("depot: the connection was lost during a"
            " commit and the store could not be read to tell whether the"
            " commit happened (%s): %s", zLost ? zLost : "",
            pzErr && *pzErr ? *pzErr : "");
        sqlite3_free(zLost);
        if( pzErr && z ){ sqlite3_free(*pzErr); *pzErr = z; }
        else sqlite3_free(z);
        return rc;
      }
      if( eOut==1 ){
        sqlite3_free(zLost);
        if( pzErr ){ sqlite3_free(*pzErr); *pzErr = 0; }
        dbLocOut(pC, aRef, pRow, *piBranch);
        return SQLITE_OK;
      }
      if( eOut==2 ){
        sqlite3_free(zLost);
        return dbErr(pzErr, SQLITE_BUSY_SNAPSHOT, "depot: the connection"
            " was lost during a commit, and another commit took its"
            " place%s", "");
      }
      /* It did not happen: the commit failed as it was, unless a try is
      ** left (the store connects again). */
      rc = rcLost;
      if( pzErr ){
        sqlite3_free(*pzErr);
        *pzErr = sqlite3_mprintf("depot: the connection was lost during a"
            " commit, which did not happen (%d %s): %s", nTry+1,
            nTry ? "tries" : "try", zLost ? zLost : "");
      }
      sqlite3_free(zLost);
    }
    if( pC->pStage || nTry>=2 ) break;
    if( pzErr ){ sqlite3_free(*pzErr); *pzErr = 0; }
  }
  return rc;
}

/* pC without its (empty) staged stream, in *pPlain. */
static const DepotCommit *dbUnstaged(const DepotCommit *pC,
                                     DepotCommit *pPlain){
  *pPlain = *pC;
  pPlain->pStage = 0;
  return pPlain;
}

int depot_db_commit(Store *pStore, const DepotCommit *pC, ZSTD_CCtx *pCctx,
                    int iLevel, DbHead *pHead, uint64_t *piBranch,
                    char **pzErr){
  DepotCommit plain;
  LtxHeader h;
  CommitRow row;
  LtxFrameRef *aRef;
  unsigned char *aBlob = 0;
  int64_t nBlob = 0;
  int rc;
  memset(&row, 0, sizeof(row));
  row.iTxid = pC->iBranch ? pC->base.iTxid + 1 : 1;
  row.iTimeMs = dbNowMs();
  h.szPage = row.szPage = pC->szPage;
  h.nPage = row.nPage = pC->nPage;
  h.iMinTxid = h.iMaxTxid = row.iTxid;
  h.iTimeMs = row.iTimeMs;
  h.nFrame = row.nWritten = pC->nDirty;
  if( pC->pStage && pC->pStage->iTxid==0 ) pC = dbUnstaged(pC, &plain);
  if( pC->pStage ){
    if( pC->iBranch!=pC->pStage->iBranch || row.iTxid!=pC->pStage->iTxid ){
      return dbErr(pzErr, SQLITE_MISUSE, "depot: staged blob of another"
                   " commit%s", "");
    }
    row.nWritten += pC->pStage->nFrame;
  }
  aRef = sqlite3_malloc64(sizeof(LtxFrameRef)*(pC->nDirty+1));
  if( aRef==0 ) return SQLITE_NOMEM;
  rc = ltx_encode_threads(&h, pC->aPgno, pC->apPage, pC->iChecksum, pCctx,
                          iLevel, pC->nThread, &aBlob, &nBlob, aRef);
  if( rc==SQLITE_OK && pC->pStage ){
    nBlob += (int64_t)pC->pStage->nBlob;     /* the whole stream */
    if( nBlob > 0xffffffffLL ){
      rc = dbErr(pzErr, SQLITE_TOOBIG, "depot: a transaction's blob would"
                 " pass 4 GiB%s", "");
    }
  }
  if( rc==SQLITE_OK ){
    row.nBlob = (uint64_t)nBlob;
    row.szChunk = pC->pStage ? pC->pStage->szChunk
                             : (uint32_t)store_max_value(pStore);
    row.nChunk = (uint32_t)((row.nBlob + row.szChunk - 1)/row.szChunk);
    row.iChecksum = pC->iChecksum;
    pHead->iTxid = row.iTxid;
    pHead->szPage = pC->szPage;
    pHead->nPage = pC->nPage;
    pHead->iChecksum = pC->iChecksum;
    rc = dbCommitTxn(pStore, pC, aBlob, nBlob, aRef, &row, pHead, piBranch,
                     pzErr);
  }
  sqlite3_free(aBlob);
  sqlite3_free(aRef);
  return rc;
}

/* ---- listing ---- */

typedef struct ListCtx ListCtx;
struct ListCtx {
  DepotCommitRowFn xRow;
  void *pArg;
  int rc;
};

static int dbCommitRow(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  ListCtx *p = (ListCtx*)pArg;
  CommitRow row;
  (void)pKey; (void)nKey;
  if( layout_commit_decode(pVal, nVal, &row)!=SQLITE_OK ){
    p->rc = SQLITE_CORRUPT;
    return 1;
  }
  return p->xRow(p->pArg, &row);
}

int depot_db_list_commits(Store *pStore, uint64_t iBranch,
                          DepotCommitRowFn xRow, void *pArg, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  ListCtx ctx;
  int nLo = layout_key_br(lo, iBranch, LAYOUT_BR_COMMITS);
  int nHi = layout_key_br(hi, iBranch, LAYOUT_BR_COMMITS+1);
  int rc;
  ctx.xRow = xRow; ctx.pArg = pArg; ctx.rc = SQLITE_OK;
  rc = store_scan(pStore, lo, nLo, hi, nHi, 0, -1, dbCommitRow, &ctx);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  if( ctx.rc!=SQLITE_OK ){
    return dbErr(pzErr, ctx.rc, "depot: corrupt commit row%s", "");
  }
  return SQLITE_OK;
}

int depot_db_read_blob(Store *pStore, uint64_t iBranch, const CommitRow *pRow,
                       unsigned char **ppBlob, char **pzErr){
  unsigned char *a;
  BlobId id;
  int rc;
  *ppBlob = 0;
  if( pRow->nBlob > 0xffffffffULL || pRow->nBlob < LTX_HEADER_SIZE ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: commit row gives a bad blob"
                 " size%s", "");
  }
  a = sqlite3_malloc64(pRow->nBlob);
  if( a==0 ) return SQLITE_NOMEM;
  id.iBranch = iBranch;
  id.iTxid = pRow->iTxid;
  id.iShard = 0;
  rc = dbReadRange(pStore, &id, pRow->szChunk, 0, (uint32_t)pRow->nBlob,
                   a, pzErr);
  if( rc!=SQLITE_OK ){
    sqlite3_free(a);
    return rc;
  }
  *ppBlob = a;
  return SQLITE_OK;
}

/* ---- shard blobs ---- */

int depot_shard_read_blob(Store *pStore, uint64_t iBranch, uint32_t iShard,
                          uint64_t iAsOf, const ShardRow *pRow,
                          unsigned char **ppBlob, char **pzErr){
  unsigned char *a;
  BlobId id;
  int rc;
  *ppBlob = 0;
  a = sqlite3_malloc64(pRow->nBlob);
  if( a==0 ) return SQLITE_NOMEM;
  id.iBranch = iBranch;
  id.iTxid = iAsOf;
  id.iShard = iShard+1;
  rc = dbReadRange(pStore, &id, pRow->szChunk, 0, (uint32_t)pRow->nBlob,
                   a, pzErr);
  if( rc!=SQLITE_OK ){
    sqlite3_free(a);
    return rc;
  }
  *ppBlob = a;
  return SQLITE_OK;
}

/* Every slot of pRow against the blob's own index (a[0..n), verified). */
static int dbShardSlots(const ShardRow *pRow, uint32_t iShard,
                        const unsigned char *a, int64_t n,
                        const LtxHeader *pHdr, char **pzErr){
  uint32_t iIdx = bytes_get32(a+n-LTX_TRAILER_SIZE), i, j = 0;
  for(i=0; i<LAYOUT_SHARD_SIZE; i++){
    uint32_t pgno = iShard*LAYOUT_SHARD_SIZE + 1 + i;
    const unsigned char *e = a + iIdx + (uint64_t)j*LTX_INDEX_ENTRY;
    int bHere = j<pHdr->nFrame && bytes_get32(e)==pgno;
    if( bHere!=(pRow->aLen[i]!=0) || (bHere && bytes_get32(e+4)!=pRow->aOff[i])
     || (bHere && bytes_get32(a+pRow->aOff[i]+4)+LTX_FRAME_HEADER
                  !=pRow->aLen[i]) ){
      sqlite3_free(*pzErr);
      *pzErr = sqlite3_mprintf("depot: shard %u row gives a wrong frame for"
                               " page %u", iShard, pgno);
      return SQLITE_CORRUPT;
    }
    j += bHere;
  }
  if( j!=pHdr->nFrame ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: shard blob holds pages"
                 " outside its shard%s", "");
  }
  return SQLITE_OK;
}

int depot_shard_verify(Store *pStore, uint64_t iBranch, uint32_t iShard,
                       uint64_t iAsOf, ZSTD_DCtx *pDctx, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  unsigned char *a = 0;
  void *pVal = 0;
  int nVal = 0, rc;
  ShardRow row;
  LtxHeader h;
  rc = store_get(pStore, k, layout_key_shard(k, iBranch, iShard, iAsOf),
                 &pVal, &nVal);
  if( rc!=SQLITE_OK ) return dbStoreErr(pStore, pzErr, rc);
  if( pVal==0 ){
    return dbErr(pzErr, SQLITE_NOTFOUND, "depot: no such shard version%s", "");
  }
  rc = layout_shard_decode(pVal, nVal, &row);
  sqlite3_free(pVal);
  if( rc!=SQLITE_OK ){
    return dbErr(pzErr, SQLITE_CORRUPT, "depot: corrupt shard row%s", "");
  }
  rc = depot_shard_read_blob(pStore, iBranch, iShard, iAsOf, &row, &a, pzErr);
  if( rc==SQLITE_OK ){
    rc = ltx_verify(a, (int64_t)row.nBlob, pDctx, &h, 0, pzErr);
  }
  if( rc==SQLITE_OK && (h.szPage!=row.szPage || h.nPage!=row.nPage
                        || h.iMaxTxid!=iAsOf) ){
    rc = dbErr(pzErr, SQLITE_CORRUPT, "depot: shard blob header does not"
               " match its row%s", "");
  }
  if( rc==SQLITE_OK ){
    rc = dbShardSlots(&row, iShard, a, (int64_t)row.nBlob, &h, pzErr);
  }
  sqlite3_free(a);
  return rc;
}
