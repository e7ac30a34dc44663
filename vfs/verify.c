/*
** verify.c -- depot_verify() (vfs/depot_vfs.h): read a store in one read
** transaction and report every damaged or inconsistent row, never
** changing anything.  One check function per row kind:
**
**   vfyBlobs         DELTA chunk rows against COMMITS rows, then every
**                    blob decoded whole (frames, page CRCs, blob CRC) and
**                    compared with its commit row; commits at or below the
**                    compaction watermark have no blob (it was folded
**                    into shards)
**   vfyShards        every shard version checked by depot_shard_verify()
**                    (chunks, frames, CRCs, each slot's page), shard chunk
**                    rows against their shard rows
**   vfyVtx           VTX rows and commits lead to each other
**   vfyPidx          every page index row: its commit exists and its frame
**                    decodes to that page with a good CRC
**   vfyHead          the head against its commit row, and the database
**                    checksum recomputed from every page as of the head,
**                    read through the fork ancestors and their shards
**   vfyForks         a fork's parent, fork point and fork pin
**   vfyPins          DB_PIN rows against history and their owners, then
**                    the refcount / descendant / restore-point summaries
**   vfyRestorePoints restore points against history and their pins
**   vfyCounters      stored-byte counters: branch, database, store
**   vfyLog           LOG rows decode and carry a handed-out sequence
**
** Compaction clears page index rows, DELTA rows and the commit rows that
** are no coverage point; none of that is a finding, and neither are page
** index and DELTA rows at or below the watermark that its sweep has not
** cleared yet (their bytes still count).  Rows are read in
** batches (vfyEach), so memory stays bounded by the batch, one LTX part
** of a commit blob (a staged part or the last part: about the writer's
** transaction budget) plus VFY_READ bytes, one shard blob, and one small
** record per branch and commit of the branch being checked, whatever the
** rows contain.
*/
#include "config.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define VFY_BATCH 64
#define VFY_KEY   (LAYOUT_MAX_KEY+8)

typedef struct VBranch VBranch;
struct VBranch {
  uint64_t iId;
  BranchRecord rec;
  int bSel;                 /* selected for verification */
  int64_t nBlobBytes;       /* bytes of its blob rows (DELTA and shard
                            ** chunk rows) */
  uint64_t iMark;           /* its compaction watermark (0: none) */
  uint64_t iStaged;         /* blob rows of this txid or later are staged
                            ** by a write transaction (not yet a commit) */
  int64_t nCounter;         /* its BR 02 counter */
  int64_t nPin;             /* its DB_PIN rows */
  int bMinF, bMinR;
  uint64_t iMinF, iMinR;    /* smallest 'f' / 'r'+'h' pin txid */
};

typedef struct VCommit VCommit;
struct VCommit {
  CommitRow row;
  int bSeen;                /* has chunk rows */
  int bChunksOk;            /* ... exactly the ones the row describes */
  int bVtx;                 /* its VTX row was seen */
};

typedef struct VRow VRow;
struct VRow {
  unsigned char aKey[VFY_KEY];
  int nKey;                 /* bytes kept in aKey */
  int bLongKey;             /* the key was longer than VFY_KEY */
  unsigned char aVal[LAYOUT_MAX_ROW];
  int nVal;                 /* the value's real length */
};

typedef struct VBatch VBatch;
struct VBatch {
  VRow a[VFY_BATCH];
  int n;
  unsigned char aLo[VFY_KEY+1];
  int nLo;
};

typedef struct Vfy Vfy;
struct Vfy {
  Store *pStore;
  ZSTD_DCtx *pDctx;
  DepotFindingFn xFn;
  void *pArg;
  int nFound;
  int bStop;                /* the callback or the finding limit stopped */
  int rc;                   /* first hard error (store, memory) */
  char **pzErr;
  VBranch *aBr;
  int nBr, nBrAlloc;
  int bWhole;               /* the whole store is selected */
  int bWholeDb;             /* whole databases are selected */
  VCommit *aC;              /* commits of the branch being checked */
  int nC, nCAlloc;
  unsigned char *aPage;     /* one page of the largest size */
  int64_t nRead;            /* bytes of the rows read, for progress */
  DepotChunkCache chunks;   /* recent chunk rows (immutable in the txn) */
};

typedef void (*VfyRowFn)(Vfy*, void*, const VRow*);

static int vfyPageSizeOk(uint32_t sz){
  return sz>=512 && sz<=65536 && (sz & (sz-1))==0;
}

static void vfyFail(Vfy *p, int rc, char *zMsg){
  if( p->rc==SQLITE_OK ){
    p->rc = zMsg ? rc : SQLITE_NOMEM;
    sqlite3_free(*p->pzErr);
    *p->pzErr = zMsg;
  }else{
    sqlite3_free(zMsg);
  }
}

static void vfyStoreErr(Vfy *p, int rc){
  vfyFail(p, rc, sqlite3_mprintf("depot: %s", store_errmsg(p->pStore)));
}

/* "NAME" or "BUCKET/NAME" of a branch's database into z (2*256 bytes). */
static void vfyLabel(Vfy *p, const VBranch *pB, char *z){
  unsigned char k[LAYOUT_MAX_KEY];
  BucketRecord rec;
  void *pVal = 0;
  int nVal = 0, n = 2*(LAYOUT_MAX_NAME+1);
  if( pB->rec.iBucket==0 ){
    sqlite3_snprintf(n, z, "%s", pB->rec.zDb);
  }else if( store_get(p->pStore, k, layout_key_bucket(k, pB->rec.iBucket, 0),
                      &pVal, &nVal)==SQLITE_OK && pVal
         && layout_bucket_decode(pVal, nVal, &rec)==SQLITE_OK ){
    sqlite3_snprintf(n, z, "%s/%s", rec.zName, pB->rec.zDb);
  }else{
    sqlite3_snprintf(n, z, "bucket %llu/%s",
                     (unsigned long long)pB->rec.iBucket, pB->rec.zDb);
  }
  sqlite3_free(pVal);
}

/* Report one finding (zMsg consumed; NULL means out of memory). */
static void vfyFind(Vfy *p, const VBranch *pB, const char *zKind,
                    int64_t iTxid, int64_t iPgno, const unsigned char *pKey,
                    int nKey, char *zMsg){
  static const char hex[] = "0123456789abcdef";
  char zLabel[2*(LAYOUT_MAX_NAME+1)], zHex[2*VFY_KEY+1];
  DepotFinding f;
  int i;
  if( zMsg==0 || p->bStop || p->rc!=SQLITE_OK ){
    if( zMsg==0 ) vfyFail(p, SQLITE_NOMEM, 0);
    sqlite3_free(zMsg);
    return;
  }
  memset(&f, 0, sizeof(f));
  if( ++p->nFound>=DEPOT_VERIFY_MAX_FINDINGS ){
    sqlite3_free(zMsg);
    zMsg = sqlite3_mprintf("depot: verification stopped after %d findings",
                           DEPOT_VERIFY_MAX_FINDINGS);
    zKind = "limit";
    pB = 0; pKey = 0; iTxid = iPgno = -1;
    p->bStop = 1;
    if( zMsg==0 ){ vfyFail(p, SQLITE_NOMEM, 0); return; }
  }
  if( pB ){
    vfyLabel(p, pB, zLabel);
    f.zDb = zLabel;
    f.zBranch = pB->rec.zBranch;
    f.iBranch = pB->iId;
  }
  for(i=0; pKey && i<nKey && i<VFY_KEY; i++){
    zHex[2*i] = hex[pKey[i]>>4];
    zHex[2*i+1] = hex[pKey[i]&15];
  }
  zHex[2*i] = 0;
  f.zKind = zKind;
  f.iTxid = iTxid;
  f.iPgno = iPgno;
  f.zKey = pKey ? zHex : 0;
  f.zMsg = zMsg;
  if( p->xFn(p->pArg, &f) ) p->bStop = 1;
  sqlite3_free(zMsg);
}

/* ---- batched scans ---- */

static int vfyBatchRow(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  VBatch *b = (VBatch*)pArg;
  VRow *r = &b->a[b->n++];
  r->bLongKey = nKey>VFY_KEY;
  r->nKey = r->bLongKey ? VFY_KEY : nKey;
  memcpy(r->aKey, pKey, r->nKey);
  r->nVal = nVal;
  if( nVal>0 && nVal<=LAYOUT_MAX_ROW ) memcpy(r->aVal, pVal, nVal);
  return b->n>=VFY_BATCH;
}

/* The first key after row r (and, for a key cut at VFY_KEY bytes, after
** every key with that prefix).  0 when there is none. */
static int vfyAfter(const VRow *r, unsigned char *a, int *pn){
  int i = r->nKey-1;
  memcpy(a, r->aKey, r->nKey);
  if( !r->bLongKey ){
    a[r->nKey] = 0;
    *pn = r->nKey+1;
    return 1;
  }
  while( i>=0 && a[i]==0xff ) i--;
  if( i<0 ) return 0;
  a[i]++;
  *pn = i+1;
  return 1;
}

/* Call xRow for every row with lo <= key < hi, VFY_BATCH rows per scan,
** outside the scans (so xRow may read the store). */
static void vfyEach(Vfy *p, const unsigned char *lo, int nLo,
                    const unsigned char *hi, int nHi, VfyRowFn xRow,
                    void *pCtx){
  VBatch *b = sqlite3_malloc64(sizeof(VBatch));
  if( b==0 ){ vfyFail(p, SQLITE_NOMEM, 0); return; }
  memcpy(b->aLo, lo, nLo);
  b->nLo = nLo;
  while( p->rc==SQLITE_OK && !p->bStop ){
    int i, rc;
    b->n = 0;
    rc = store_scan(p->pStore, b->aLo, b->nLo, hi, nHi, 0, VFY_BATCH,
                    vfyBatchRow, b);
    if( rc!=SQLITE_OK ){ vfyStoreErr(p, rc); break; }
    for(i=0; i<b->n && p->rc==SQLITE_OK && !p->bStop; i++){
      p->nRead += b->a[i].nKey + b->a[i].nVal;
      xRow(p, pCtx, &b->a[i]);
    }
    if( b->n<VFY_BATCH || !vfyAfter(&b->a[b->n-1], b->aLo, &b->nLo) ) break;
  }
  sqlite3_free(b);
}

/* Scan the rows of branch iBranch's BR partition eSub. */
static void vfyEachBr(Vfy *p, uint64_t iBranch, int eSub, VfyRowFn xRow,
                      void *pCtx){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_br(lo, iBranch, eSub);
  layout_key_br(hi, iBranch, eSub+1);
  vfyEach(p, lo, n, hi, n, xRow, pCtx);
}

/* Whether a row exists; *ppVal (may be NULL) gets its value. */
static int vfyGet(Vfy *p, const unsigned char *k, int nKey, void **ppVal,
                  int *pnVal){
  void *pVal = 0;
  int nVal = 0;
  int rc = store_get(p->pStore, k, nKey, &pVal, &nVal);
  if( rc!=SQLITE_OK ){ vfyStoreErr(p, rc); return 0; }
  if( ppVal ){ *ppVal = pVal; *pnVal = nVal; }
  else sqlite3_free(pVal);
  return pVal!=0;
}

/* Whether commit iTxid of iBranch exists (txid 0: the fork point of a
** forked branch, which always exists). */
static int vfyHasCommit(Vfy *p, const VBranch *pB, uint64_t iTxid){
  unsigned char k[LAYOUT_MAX_KEY];
  if( iTxid==0 ) return pB->rec.iParent!=0;
  return vfyGet(p, k, layout_key_commit(k, pB->iId, iTxid), 0, 0);
}

static VBranch *vfyBranch(Vfy *p, uint64_t iId){
  int lo = 0, hi = p->nBr-1;
  while( lo<=hi ){
    int mid = (lo+hi)/2;
    if( p->aBr[mid].iId==iId ) return &p->aBr[mid];
    if( p->aBr[mid].iId<iId ) lo = mid+1; else hi = mid-1;
  }
  return 0;
}

static VCommit *vfyCommit(Vfy *p, uint64_t iTxid){
  int lo = 0, hi = p->nC-1;
  while( lo<=hi ){
    int mid = (lo+hi)/2;
    if( p->aC[mid].row.iTxid==iTxid ) return &p->aC[mid];
    if( p->aC[mid].row.iTxid<iTxid ) lo = mid+1; else hi = mid-1;
  }
  return 0;
}

/* ---- branch records and the selection ---- */

static void vfyBranchRow(Vfy *p, void *pCtx, const VRow *r){
  VBranch *pB;
  (void)pCtx;
  if( r->nKey==11 ) return;           /* refcount / pin summaries */
  if( r->nKey!=10 || r->nVal>LAYOUT_MAX_ROW ){
    vfyFind(p, 0, "branch", -1, -1, r->aKey, r->nKey,
            sqlite3_mprintf("depot: unexpected row in the branch records"));
    return;
  }
  if( p->nBr==p->nBrAlloc ){
    int nNew = p->nBrAlloc ? p->nBrAlloc*2 : 16;
    VBranch *aNew = sqlite3_realloc64(p->aBr, sizeof(VBranch)*nNew);
    if( aNew==0 ){ vfyFail(p, SQLITE_NOMEM, 0); return; }
    p->aBr = aNew;
    p->nBrAlloc = nNew;
  }
  pB = &p->aBr[p->nBr];
  memset(pB, 0, sizeof(*pB));
  pB->iId = bytes_get64(r->aKey+2);
  if( layout_branch_decode(r->aVal, r->nVal, &pB->rec)!=SQLITE_OK ){
    vfyFind(p, 0, "branch", -1, -1, r->aKey, r->nKey, sqlite3_mprintf(
        "depot: the record of branch %llu does not decode",
        (unsigned long long)pB->iId));
    return;
  }
  p->nBr++;
}

/* Load every branch record and mark the selected ones. */
static int vfySelect(Vfy *p, const char *zQual, const char *zBranch){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BRANCHES };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BRANCHES+1 };
  char zBucket[LAYOUT_MAX_NAME+1];
  const char *zSlash = zQual ? strchr(zQual, '/') : 0;
  const char *zDb = zSlash ? zSlash+1 : zQual;
  size_t nB = zSlash ? (size_t)(zSlash-zQual) : 4;
  uint64_t iBucket = 0;
  int i, nSel = 0, bFound = 1, rc;
  vfyEach(p, lo, 2, hi, 2, vfyBranchRow, 0);
  if( p->rc!=SQLITE_OK ) return p->rc;
  p->bWhole = zQual==0;
  p->bWholeDb = zBranch==0;
  if( zQual ){
    memcpy(zBucket, zSlash ? zQual : "main", nB);
    zBucket[nB] = 0;
    rc = depot_bucket_find(p->pStore, zBucket, &iBucket, &bFound, p->pzErr);
    if( rc!=SQLITE_OK ) return p->rc = rc;
    if( !bFound ){
      vfyFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does not"
          " exist", zBucket));
      return p->rc;
    }
  }
  for(i=0; i<p->nBr; i++){
    const BranchRecord *r = &p->aBr[i].rec;
    p->aBr[i].bSel = zQual==0 || (r->iBucket==iBucket
        && strcmp(r->zDb, zDb)==0
        && (zBranch==0 || strcmp(r->zBranch, zBranch)==0));
    nSel += p->aBr[i].bSel;
  }
  if( zQual && nSel==0 ){
    vfyFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: no database '%s'%s%s%s"
        " in this store", zQual, zBranch ? " with a branch '" : "",
        zBranch ? zBranch : "", zBranch ? "'" : ""));
  }
  return p->rc;
}

/* ---- blobs: DELTA chunk rows against COMMITS rows ---- */

static void vfyCommitRow(Vfy *p, void *pCtx, const VRow *r){
  VBranch *pB = (VBranch*)pCtx;
  int64_t iTxid = r->nKey==19 ? (int64_t)bytes_get64(r->aKey+11) : -1;
  VCommit *c;
  if( p->nC==p->nCAlloc ){
    int nNew = p->nCAlloc ? p->nCAlloc*2 : 16;
    VCommit *aNew = sqlite3_realloc64(p->aC, sizeof(VCommit)*nNew);
    if( aNew==0 ){ vfyFail(p, SQLITE_NOMEM, 0); return; }
    p->aC = aNew;
    p->nCAlloc = nNew;
  }
  c = &p->aC[p->nC];
  memset(c, 0, sizeof(*c));
  if( iTxid<0 || r->nVal>LAYOUT_MAX_ROW
   || layout_commit_decode(r->aVal, r->nVal, &c->row)!=SQLITE_OK ){
    vfyFind(p, pB, "commit", iTxid, -1, r->aKey, r->nKey,
            sqlite3_mprintf("depot: commit row does not decode"));
  }else if( c->row.iTxid!=(uint64_t)iTxid ){
    vfyFind(p, pB, "commit", iTxid, -1, r->aKey, r->nKey, sqlite3_mprintf(
        "depot: commit row of txid %lld says txid %llu", (long long)iTxid,
        (unsigned long long)c->row.iTxid));
  }else{
    p->nC++;
  }
}

/* One run of DELTA rows of one txid, as a scan meets them. */
typedef struct VRun VRun;
struct VRun {
  VBranch *pB;
  int bOpen;
  uint64_t iTxid;
  uint32_t nRow;
  int64_t nByte;
  int bGap;                 /* a chunk number was skipped */
  int bSize;                /* a row of the wrong length */
  uint32_t iMissing;
  unsigned char aKey[LAYOUT_MAX_KEY];
  int nKey;
};

static void vfyRunEnd(Vfy *p, VRun *u){
  VCommit *c = u->bOpen ? vfyCommit(p, u->iTxid) : 0;
  if( !u->bOpen ) return;
  u->bOpen = 0;
  if( c==0 ){
    vfyFind(p, u->pB, "chunk", (int64_t)u->iTxid, -1, u->aKey, u->nKey,
        sqlite3_mprintf("depot: %u blob rows (%lld bytes) of txid %llu have"
        " no commit row", u->nRow, (long long)u->nByte,
        (unsigned long long)u->iTxid));
    return;
  }
  c->bSeen = 1;
  if( u->bGap || u->bSize || u->nRow!=c->row.nChunk
   || (uint64_t)u->nByte!=c->row.nBlob ){
    vfyFind(p, u->pB, "chunk", (int64_t)u->iTxid, -1, u->aKey, u->nKey,
        sqlite3_mprintf("depot: blob of txid %llu has %u of %u chunk rows"
        " and %lld of %llu bytes%s", (unsigned long long)u->iTxid, u->nRow,
        c->row.nChunk, (long long)u->nByte, (unsigned long long)c->row.nBlob,
        u->bGap ? "; a chunk is missing" : u->bSize ? "; a chunk has the"
        " wrong length" : ""));
    return;
  }
  c->bChunksOk = 1;
}

static void vfyDeltaRow(Vfy *p, void *pCtx, const VRow *r){
  VRun *u = (VRun*)pCtx;
  uint64_t iTxid;
  uint32_t iChunk;
  VCommit *c;
  if( r->nKey==23 && bytes_get64(r->aKey+11)>=u->pB->iStaged ) return;
  u->pB->nBlobBytes += r->nVal;
  /* folded into shards, left for the compaction's sweep (vfs/compact.c) */
  if( r->nKey==23 && bytes_get64(r->aKey+11)<=u->pB->iMark ) return;
  if( r->nKey!=23 ){
    vfyFind(p, u->pB, "chunk", -1, -1, r->aKey, r->nKey,
            sqlite3_mprintf("depot: unexpected key among the blob rows"));
    return;
  }
  iTxid = bytes_get64(r->aKey+11);
  iChunk = bytes_get32(r->aKey+19);
  if( u->bOpen && u->iTxid!=iTxid ) vfyRunEnd(p, u);
  if( !u->bOpen ){
    memset(&u->iTxid, 0, sizeof(*u)-offsetof(VRun, iTxid));
    u->bOpen = 1;
    u->iTxid = iTxid;
    u->nKey = r->nKey;
    memcpy(u->aKey, r->aKey, r->nKey);
  }
  if( iChunk!=u->nRow && !u->bGap ){ u->bGap = 1; u->iMissing = u->nRow; }
  c = vfyCommit(p, iTxid);
  if( c && (r->nVal<=0 || (uint32_t)r->nVal>c->row.szChunk
         || (iChunk+1<c->row.nChunk && (uint32_t)r->nVal!=c->row.szChunk)) ){
    u->bSize = 1;
  }
  u->nRow++;
  u->nByte += r->nVal;
}

/* A commit blob read part by part (vfyBlobDecode): blob bytes [iStart,
** iStart+nHave) in a, read VFY_READ bytes ahead at a time, so that memory
** holds one LTX part (a staged part, or the last one: at most the
** writer's transaction budget compressed) and not the whole blob. */
#define VFY_READ (1024*1024)
typedef struct VBlobRd VBlobRd;
struct VBlobRd {
  Store *pStore;
  DepotPageLoc loc;         /* the blob's branch, txid and chunk size */
  int64_t nBlob;
  unsigned char *a;
  int64_t nAlloc, iStart, nHave;
};

/* Make r hold the blob's bytes up to iEnd (at most nBlob). */
static int vfyBlobNeed(VBlobRd *r, int64_t iEnd, char **pzErr){
  int64_t iHave = r->iStart + r->nHave, iTo;
  int rc;
  if( iEnd<=iHave ) return SQLITE_OK;
  iTo = iEnd + VFY_READ < r->nBlob ? iEnd + VFY_READ : r->nBlob;
  if( iTo - r->iStart > r->nAlloc ){
    int64_t nNew = iTo - r->iStart;
    unsigned char *aNew = sqlite3_realloc64(r->a, (uint64_t)nNew);
    if( aNew==0 ) return SQLITE_NOMEM;
    r->a = aNew;
    r->nAlloc = nNew;
  }
  r->loc.iOffset = (uint32_t)iHave;
  rc = depot_db_read_span(r->pStore, &r->loc, 1, (uint32_t)(iTo - iHave),
                          r->a + r->nHave, pzErr);
  if( rc==SQLITE_OK ) r->nHave = iTo - r->iStart;
  return rc;
}

/* The length of the LTX part at blob offset iOff (its header, frames,
** index and trailer), read into r, or 0 when its header or frame lengths
** do not fit the blob. */
static int vfyPartLen(VBlobRd *r, int64_t iOff, int64_t *pnPart,
                      char **pzErr){
  LtxHeader h;
  char *zErr = 0;
  int64_t off = LTX_HEADER_SIZE;
  int64_t n = r->nBlob - iOff;
  uint32_t i;
  int rc = vfyBlobNeed(r, iOff + (n<LTX_HEADER_SIZE ? n : LTX_HEADER_SIZE),
                       pzErr);
  *pnPart = 0;
  if( rc!=SQLITE_OK ) return rc;
  if( ltx_decode_header(r->a + (iOff - r->iStart), n, &h, &zErr)
      !=SQLITE_OK ){
    sqlite3_free(zErr);
    return SQLITE_OK;
  }
  for(i=0; i<h.nFrame; i++){
    if( off+LTX_FRAME_HEADER>n ) return SQLITE_OK;
    rc = vfyBlobNeed(r, iOff + off + LTX_FRAME_HEADER, pzErr);
    if( rc!=SQLITE_OK ) return rc;
    off += LTX_FRAME_HEADER
         + (int64_t)bytes_get32(r->a + (iOff - r->iStart) + off + 4);
  }
  off += (int64_t)h.nFrame*LTX_INDEX_ENTRY + LTX_TRAILER_SIZE;
  if( off<=n ) *pnPart = off;
  return SQLITE_OK;
}

/* ltx_verify() of every part of a commit blob: one LTX blob, or (a staged
** transaction, vfs/db.h) several back to back, each its own LTX blob, the
** last one ending the blob.  *pHdr gets the last part's header with the
** frames of all parts, *pTrailer the last part's trailer. */
static int vfyBlobParts(Vfy *p, VBlobRd *r, uint64_t iTxid, LtxHeader *pHdr,
                        LtxTrailer *pTrailer, char **pzErr){
  int64_t off = 0, n = r->nBlob;
  uint32_t nFrame = 0;
  int rc = SQLITE_OK;
  while( rc==SQLITE_OK ){
    int64_t nPart = 0;
    rc = vfyPartLen(r, off, &nPart, pzErr);
    if( rc!=SQLITE_OK ) break;
    if( nPart==0 || nPart==n-off ) nPart = n-off;   /* the last part */
    rc = vfyBlobNeed(r, off + nPart, pzErr);
    if( rc!=SQLITE_OK ) break;
    rc = ltx_verify(r->a + (off - r->iStart), nPart, p->pDctx, pHdr,
                    pTrailer, pzErr);
    if( rc==SQLITE_OK && (pHdr->iMinTxid!=iTxid || pHdr->iMaxTxid!=iTxid) ){
      sqlite3_free(*pzErr);
      *pzErr = sqlite3_mprintf("depot: a part of the blob of txid %llu is of"
                               " another txid", (unsigned long long)iTxid);
      rc = SQLITE_CORRUPT;
    }
    nFrame += pHdr->nFrame;
    off += nPart;
    if( off>=n ) break;
    /* forget the part just checked, keep what was read past it */
    memmove(r->a, r->a + (off - r->iStart), (size_t)(r->nHave
            - (off - r->iStart)));
    r->nHave -= off - r->iStart;
    r->iStart = off;
  }
  pHdr->nFrame = nFrame;
  return rc;
}

/* Decode a whole blob whose chunk rows are in order, one part at a time,
** and compare it with its commit row. */
static void vfyBlobDecode(Vfy *p, VBranch *pB, VCommit *c){
  unsigned char k[LAYOUT_MAX_KEY];
  char *zErr = 0;
  LtxHeader h;
  LtxTrailer t;
  VBlobRd r;
  int nKey = layout_key_delta(k, pB->iId, c->row.iTxid, 0);
  int rc = SQLITE_OK;
  memset(&r, 0, sizeof(r));
  r.pStore = p->pStore;
  r.loc.eKind = DEPOT_LOC_DELTA;
  r.loc.iBranch = pB->iId;
  r.loc.iTxid = c->row.iTxid;
  r.loc.szChunk = c->row.szChunk;
  r.nBlob = (int64_t)c->row.nBlob;
  if( c->row.nBlob > 0xffffffffULL || c->row.nBlob < LTX_HEADER_SIZE ){
    rc = SQLITE_CORRUPT;
    zErr = sqlite3_mprintf("depot: commit row gives a bad blob size");
  }
  if( rc==SQLITE_OK ) rc = vfyBlobParts(p, &r, c->row.iTxid, &h, &t, &zErr);
  sqlite3_free(r.a);
  if( rc!=SQLITE_OK && (rc&0xff)!=SQLITE_CORRUPT ){
    vfyFail(p, rc, zErr);
    return;
  }
  if( rc!=SQLITE_OK ){
    vfyFind(p, pB, "blob", (int64_t)c->row.iTxid, -1, k, nKey, zErr);
    return;
  }
  sqlite3_free(zErr);
  if( h.iMinTxid!=c->row.iTxid || h.iMaxTxid!=c->row.iTxid
   || h.szPage!=c->row.szPage || h.nPage!=c->row.nPage
   || h.nFrame!=c->row.nWritten || t.iDbChecksum!=c->row.iChecksum ){
    vfyFind(p, pB, "commit", (int64_t)c->row.iTxid, -1, k, nKey,
        sqlite3_mprintf("depot: the blob of txid %llu does not match its"
        " commit row (txid, page size, pages, frames or checksum)",
        (unsigned long long)c->row.iTxid));
  }
}

/* pB->iMark from the compaction watermark row (absent: 0). */
static void vfyWatermark(Vfy *p, VBranch *pB){
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = layout_key_br(k, pB->iId, LAYOUT_BR_CMPMARK), nVal = 0;
  void *pVal = 0;
  pB->iMark = 0;
  if( vfyGet(p, k, nKey, &pVal, &nVal) ){
    if( nVal==8 ){
      pB->iMark = bytes_get64(pVal);
    }else{
      vfyFind(p, pB, "shard", -1, -1, k, nKey, sqlite3_mprintf("depot: the"
          " compaction watermark row has %d bytes, not 8", nVal));
    }
  }
  sqlite3_free(pVal);
}

static void vfyBlobs(Vfy *p, VBranch *pB){
  VRun u;
  DbHead h;
  char *zErr = 0;
  int i;
  p->nC = 0;
  /* rows past the head are staged (vfs/db.h, DepotStageStream); a head
  ** that does not read is reported by vfyHead() */
  pB->iStaged = depot_db_head(p->pStore, pB->iId, &h, &zErr)==SQLITE_OK ?
                h.iTxid+1 : UINT64_MAX;
  sqlite3_free(zErr);
  vfyWatermark(p, pB);
  vfyEachBr(p, pB->iId, LAYOUT_BR_COMMITS, vfyCommitRow, pB);
  memset(&u, 0, sizeof(u));
  u.pB = pB;
  vfyEachBr(p, pB->iId, LAYOUT_BR_DELTA, vfyDeltaRow, &u);
  vfyRunEnd(p, &u);
  for(i=0; i<p->nC && p->rc==SQLITE_OK && !p->bStop; i++){
    VCommit *c = &p->aC[i];
    if( !c->bSeen && c->row.iTxid<=pB->iMark ) continue;   /* compacted */
    if( !c->bSeen ){
      unsigned char k[LAYOUT_MAX_KEY];
      vfyFind(p, pB, "chunk", (int64_t)c->row.iTxid, -1, k,
          layout_key_delta(k, pB->iId, c->row.iTxid, 0), sqlite3_mprintf(
          "depot: the blob of txid %llu has no chunk rows",
          (unsigned long long)c->row.iTxid));
    }else if( c->bChunksOk ){
      vfyBlobDecode(p, pB, c);
    }
  }
}

/* ---- shard versions (written by compaction) ---- */

static void vfyShardRow(Vfy *p, void *pCtx, const VRow *r){
  VBranch *pB = (VBranch*)pCtx;
  uint32_t iShard;
  uint64_t iAsOf;
  char *zErr = 0;
  int rc;
  if( r->nKey!=23 ){
    vfyFind(p, pB, "shard", -1, -1, r->aKey, r->nKey,
            sqlite3_mprintf("depot: unexpected key among the shard rows"));
    return;
  }
  iShard = bytes_get32(r->aKey+11);
  iAsOf = bytes_get64(r->aKey+15);
  rc = depot_shard_verify(p->pStore, pB->iId, iShard, iAsOf, p->pDctx, &zErr);
  if( rc!=SQLITE_OK && (rc&0xff)!=SQLITE_CORRUPT ){
    vfyFail(p, rc, zErr);
    return;
  }
  if( rc!=SQLITE_OK ){
    vfyFind(p, pB, "shard", (int64_t)iAsOf,
        (int64_t)iShard*LAYOUT_SHARD_SIZE+1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: shard %u (pages %u..%u) as of txid %llu: %s",
        iShard, iShard*LAYOUT_SHARD_SIZE+1, (iShard+1)*LAYOUT_SHARD_SIZE,
        (unsigned long long)iAsOf, zErr ? zErr : "damaged"));
  }
  sqlite3_free(zErr);
}

/* The shard version whose chunk rows are being counted. */
typedef struct VShardRun VShardRun;
struct VShardRun {
  VBranch *pB;
  int bOpen;
  uint32_t iShard;
  uint64_t iAsOf;
};

/* Count a shard chunk row's bytes; the first chunk row met of each
** version must have that version's shard row. */
static void vfyShardChunkRow(Vfy *p, void *pCtx, const VRow *r){
  VShardRun *u = (VShardRun*)pCtx;
  unsigned char k[LAYOUT_MAX_KEY];
  uint32_t iShard;
  uint64_t iAsOf;
  u->pB->nBlobBytes += r->nVal;
  if( r->nKey!=27 ){
    vfyFind(p, u->pB, "shard", -1, -1, r->aKey, r->nKey,
            sqlite3_mprintf("depot: unexpected key among the shard chunks"));
    return;
  }
  iShard = bytes_get32(r->aKey+11);
  iAsOf = bytes_get64(r->aKey+15);
  if( u->bOpen && u->iShard==iShard && u->iAsOf==iAsOf ) return;
  u->bOpen = 1;
  u->iShard = iShard;
  u->iAsOf = iAsOf;
  if( !vfyGet(p, k, layout_key_shard(k, u->pB->iId, iShard, iAsOf), 0, 0)
   && p->rc==SQLITE_OK ){
    vfyFind(p, u->pB, "shard", (int64_t)iAsOf,
        (int64_t)iShard*LAYOUT_SHARD_SIZE+1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: chunk rows of shard %u as of txid %llu have"
        " no shard row", iShard, (unsigned long long)iAsOf));
  }
}

static void vfyShards(Vfy *p, VBranch *pB){
  VShardRun u;
  memset(&u, 0, sizeof(u));
  u.pB = pB;
  vfyEachBr(p, pB->iId, LAYOUT_BR_SHARD, vfyShardRow, pB);
  vfyEachBr(p, pB->iId, LAYOUT_BR_SHARDBLOB, vfyShardChunkRow, &u);
}

/* ---- VTX: store sequence -> txid ---- */

static void vfyVtxRow(Vfy *p, void *pCtx, const VRow *r){
  VBranch *pB = (VBranch*)pCtx;
  uint64_t iVs = r->nKey==19 ? bytes_get64(r->aKey+11) : 0;
  VCommit *c = r->nKey==19 && r->nVal==8 ? vfyCommit(p, bytes_get64(r->aVal))
                                         : 0;
  if( c && c->row.iVs==iVs ){
    c->bVtx = 1;
    return;
  }
  vfyFind(p, pB, "vtx", c ? (int64_t)c->row.iTxid : -1, -1, r->aKey, r->nKey,
      sqlite3_mprintf("depot: VTX row of sequence %llu does not lead to a"
      " commit of that sequence", (unsigned long long)iVs));
}

/* Every VTX row leads to its commit and every commit has its VTX row. */
static void vfyVtx(Vfy *p, VBranch *pB){
  int i;
  vfyEachBr(p, pB->iId, LAYOUT_BR_VTX, vfyVtxRow, pB);
  for(i=0; i<p->nC && p->rc==SQLITE_OK && !p->bStop; i++){
    unsigned char k[LAYOUT_MAX_KEY];
    if( p->aC[i].bVtx ) continue;
    vfyFind(p, pB, "vtx", (int64_t)p->aC[i].row.iTxid, -1, k,
        layout_key_vtx(k, pB->iId, p->aC[i].row.iVs), sqlite3_mprintf(
        "depot: commit %llu has no VTX row for its sequence %llu",
        (unsigned long long)p->aC[i].row.iTxid,
        (unsigned long long)p->aC[i].row.iVs));
  }
}

/* ---- the page index ---- */

static void vfyPidxRow(Vfy *p, void *pCtx, const VRow *r){
  VBranch *pB = (VBranch*)pCtx;
  PidxValue pv;
  VCommit *c;
  uint32_t pgno;
  uint64_t iTxid;
  char *zErr = 0;
  int rc;
  if( r->nKey!=23 || r->nVal>LAYOUT_MAX_ROW
   || layout_pidx_decode(r->aVal, r->nVal, &pv)!=SQLITE_OK ){
    vfyFind(p, pB, "page_index", -1, -1, r->aKey, r->nKey,
            sqlite3_mprintf("depot: page index row does not decode"));
    return;
  }
  pgno = bytes_get32(r->aKey+11);
  iTxid = bytes_get64(r->aKey+15);
  if( iTxid<=pB->iMark ) return;     /* folded, left for the sweep */
  if( iTxid>=pB->iStaged ) return;   /* staged past the head (layout.h) */
  c = vfyCommit(p, iTxid);
  if( c==0 ){
    vfyFind(p, pB, "page_index", (int64_t)iTxid, pgno, r->aKey, r->nKey,
        sqlite3_mprintf("depot: page %u names txid %llu, which has no commit"
        " row", pgno, (unsigned long long)iTxid));
    return;
  }
  if( !vfyPageSizeOk(c->row.szPage)
   || (uint64_t)pv.iOffset+pv.nByte > c->row.nBlob ){
    vfyFind(p, pB, "page_index", (int64_t)iTxid, pgno, r->aKey, r->nKey,
        sqlite3_mprintf("depot: page %u points outside the blob of txid"
        " %llu", pgno, (unsigned long long)iTxid));
    return;
  }
  rc = depot_db_read_frame(p->pStore, &p->chunks, p->pDctx, pB->iId, iTxid,
                           &pv, pgno, c->row.szPage, p->aPage, &zErr);
  if( (rc&0xff)==SQLITE_CORRUPT ){
    vfyFind(p, pB, "page_index", (int64_t)iTxid, pgno, r->aKey, r->nKey,
            zErr);
  }else if( rc!=SQLITE_OK ){
    vfyFail(p, rc, zErr);
  }else{
    sqlite3_free(zErr);
  }
}

static void vfyPidx(Vfy *p, VBranch *pB){
  vfyEachBr(p, pB->iId, LAYOUT_BR_PIDX, vfyPidxRow, pB);
}

/* ---- the head and its checksum ---- */

typedef struct VNext VNext;
struct VNext { int bFound; uint32_t pgno; };

static int vfyNextRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  VNext *x = (VNext*)pArg;
  (void)pVal; (void)nVal;
  if( nKey>=15 ){ x->bFound = 1; x->pgno = bytes_get32(pKey+11); }
  return 1;
}

/* The first page >= pgno that the first row in [lo, hi) may hold: a page
** index row names its page, a shard row (bShard) its shard's pages. */
static void vfyNextAt(Vfy *p, const unsigned char *lo, int nLo,
                      const unsigned char *hi, int nHi, int bShard,
                      uint32_t pgno, uint32_t *pNext, int *pbFound){
  VNext x = { 0, 0 };
  uint64_t iPg;
  int rc = store_scan(p->pStore, lo, nLo, hi, nHi, 0, 1, vfyNextRow, &x);
  if( rc!=SQLITE_OK ){ vfyStoreErr(p, rc); return; }
  if( !x.bFound ) return;
  iPg = bShard ? (uint64_t)x.pgno*LAYOUT_SHARD_SIZE+1 : x.pgno;
  if( iPg<pgno ) iPg = pgno;
  if( iPg<=0xffffffffu && (!*pbFound || iPg<*pNext) ){
    *pNext = (uint32_t)iPg;
    *pbFound = 1;
  }
}

/* The smallest page >= pgno with a page index row or in a shard version
** at any level of the chain (*pbFound 0: none). */
static void vfyNextPage(Vfy *p, const DepotChain *pChain, uint32_t pgno,
                        uint32_t *pNext, int *pbFound){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int i, n, nHi;
  *pbFound = 0;
  for(i=0; i<pChain->n && p->rc==SQLITE_OK; i++){
    uint64_t b = pChain->aBranch[i];
    if( pChain->aCap[i]==0 ) continue;
    n = layout_key_pidx(lo, b, pgno, 0);
    nHi = layout_key_br(hi, b, LAYOUT_BR_PIDX+1);
    vfyNextAt(p, lo, n, hi, nHi, 0, pgno, pNext, pbFound);
    n = layout_key_shard(lo, b, (pgno-1)/LAYOUT_SHARD_SIZE, 0);
    nHi = layout_key_br(hi, b, LAYOUT_BR_SHARD+1);
    if( p->rc==SQLITE_OK ) vfyNextAt(p, lo, n, hi, nHi, 1, pgno, pNext,
                                     pbFound);
  }
}

/* XOR of the CRC-64 of every page 1..nPage as of the head, reading only
** pages that have rows (the others are zero pages).  0 when a page cannot
** be read (reported). */
static int vfyChecksum(Vfy *p, VBranch *pB, const DbHead *h,
                       DepotChain *pChain, uint64_t *piSum){
  uint64_t nZero = 0, iSum = 0;
  uint32_t pgno = 1, next = 0;
  int bFound = 0;
  while( pgno>=1 && pgno<=h->nPage && p->rc==SQLITE_OK ){
    char *zErr = 0;
    int rc;
    vfyNextPage(p, pChain, pgno, &next, &bFound);
    if( !bFound || next>h->nPage ){ nZero += h->nPage-pgno+1; break; }
    nZero += next-pgno;
    rc = depot_db_read_page(p->pStore, 0, &p->chunks, p->pDctx, pChain, next,
                            h->szPage, p->aPage, 0, &zErr);
    if( rc!=SQLITE_OK && (rc&0xff)!=SQLITE_CORRUPT ){
      vfyFail(p, rc, zErr);
      break;
    }
    if( rc!=SQLITE_OK ){
      vfyFind(p, pB, "head", (int64_t)h->iTxid, next, 0, 0, sqlite3_mprintf(
          "depot: page %u as of the head cannot be read, so the database"
          " checksum was not recomputed: %s", next, zErr ? zErr : ""));
      sqlite3_free(zErr);
      return 0;
    }
    iSum ^= ltx_crc64(0, p->aPage, h->szPage);
    pgno = next+1;
  }
  if( nZero & 1 ){
    memset(p->aPage, 0, h->szPage);
    iSum ^= ltx_crc64(0, p->aPage, h->szPage);
  }
  *piSum = iSum;
  return p->rc==SQLITE_OK;
}

/* The head row against its commit row (or its fork head). */
static int vfyHeadRow(Vfy *p, VBranch *pB, DbHead *h){
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = layout_key_br(k, pB->iId, LAYOUT_BR_HEAD);
  char *zErr = 0;
  DbHead at;
  int rc = depot_db_head(p->pStore, pB->iId, h, &zErr);
  if( rc!=SQLITE_OK || !vfyPageSizeOk(h->szPage) ){
    if( rc==SQLITE_OK || (rc&0xff)==SQLITE_CORRUPT ){
      vfyFind(p, pB, "head", -1, -1, k, nKey, zErr ? zErr : sqlite3_mprintf(
          "depot: the head gives a bad page size %u", h->szPage));
    }else{
      vfyFail(p, rc, zErr);
    }
    return 0;
  }
  rc = depot_db_state_at(p->pStore, pB->iId, h->iTxid, &at, &zErr);
  if( rc!=SQLITE_OK && (rc&0xff)!=SQLITE_CORRUPT && rc!=SQLITE_NOTFOUND ){
    vfyFail(p, rc, zErr);
    return 0;
  }
  if( rc!=SQLITE_OK || at.nPage!=h->nPage || at.szPage!=h->szPage
   || at.iChecksum!=h->iChecksum ){
    sqlite3_free(zErr);
    vfyFind(p, pB, "head", (int64_t)h->iTxid, -1, k, nKey, sqlite3_mprintf(
        "depot: the head (txid %llu) does not match its commit row",
        (unsigned long long)h->iTxid));
    return 0;
  }
  return 1;
}

static void vfyHead(Vfy *p, VBranch *pB){
  unsigned char k[LAYOUT_MAX_KEY];
  DepotChain chain;
  DbHead h;
  uint64_t iSum = 0;
  char *zErr = 0;
  int rc;
  if( !vfyHeadRow(p, pB, &h) ) return;
  rc = depot_db_chain(p->pStore, pB->iId, h.iTxid, &chain, &zErr);
  if( rc!=SQLITE_OK ){
    if( (rc&0xff)!=SQLITE_CORRUPT ){ vfyFail(p, rc, zErr); return; }
    vfyFind(p, pB, "head", (int64_t)h.iTxid, -1, 0, 0, zErr);
    return;
  }
  if( !vfyChecksum(p, pB, &h, &chain, &iSum) || iSum==h.iChecksum ) return;
  vfyFind(p, pB, "head", (int64_t)h.iTxid, -1, k,
      layout_key_br(k, pB->iId, LAYOUT_BR_HEAD), sqlite3_mprintf(
      "depot: the head's database checksum is %016llx but its %u pages give"
      " %016llx", (unsigned long long)h.iChecksum, h.nPage,
      (unsigned long long)iSum));
}

/* ---- forks ---- */

static void vfyForks(Vfy *p, VBranch *pB){
  unsigned char k[LAYOUT_MAX_KEY], o[8];
  const BranchRecord *r = &pB->rec;
  VBranch *pParent;
  if( r->iParent==0 ) return;
  pParent = vfyBranch(p, r->iParent);
  if( pParent==0 ){
    vfyFind(p, pB, "fork", (int64_t)r->iParentTxid, -1, 0, 0, sqlite3_mprintf(
        "depot: the parent branch %llu does not exist",
        (unsigned long long)r->iParent));
    return;
  }
  if( !vfyHasCommit(p, pParent, r->iParentTxid) ){
    vfyFind(p, pB, "fork", (int64_t)r->iParentTxid, -1, 0, 0, sqlite3_mprintf(
        "depot: the fork point, txid %llu of parent branch %llu, is not in"
        " the parent's history", (unsigned long long)r->iParentTxid,
        (unsigned long long)r->iParent));
  }
  bytes_put64(o, pB->iId);
  if( r->eState!=LAYOUT_STATE_DROPPED && !vfyGet(p, k, layout_key_pin(k,
        r->iParent, r->iParentTxid, LAYOUT_PIN_FORK, o, 8), 0, 0) ){
    vfyFind(p, pB, "fork", (int64_t)r->iParentTxid, -1, k,
        layout_key_pin(k, r->iParent, r->iParentTxid, LAYOUT_PIN_FORK, o, 8),
        sqlite3_mprintf("depot: the parent branch %llu has no fork pin for"
        " this branch", (unsigned long long)r->iParent));
  }
}

/* ---- pins ---- */

/* Whether the owner of a pin row leads back to (pB, iTxid). */
static int vfyPinOwner(Vfy *p, VBranch *pB, uint64_t iTxid, int eKind,
                       const unsigned char *o, int nOwner){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, bOk = 0;
  if( eKind==LAYOUT_PIN_FORK && nOwner==8 ){
    VBranch *pChild = vfyBranch(p, bytes_get64(o));
    return pChild && pChild->rec.iParent==pB->iId
        && pChild->rec.iParentTxid==iTxid;
  }
  if( eKind==LAYOUT_PIN_HISTORY && nOwner==8 ){
    PtrHistory hi;
    if( vfyGet(p, k, layout_key_ptr_hist(k, pB->rec.iBucket, pB->rec.zDb,
               pB->rec.zBranch, bytes_get64(o)), &pVal, &nVal) ){
      bOk = layout_hist_decode(pVal, nVal, &hi)==SQLITE_OK
         && hi.iOld==pB->iId;
    }
  }else if( eKind==LAYOUT_PIN_RP && nOwner>=10 ){
    const unsigned char *zEnd = memchr(o+8, 0, nOwner-8);
    char zDb[LAYOUT_MAX_NAME+1], zName[LAYOUT_MAX_NAME+1];
    int nDb = zEnd ? (int)(zEnd-(o+8)) : -1, nName = nOwner-9-nDb;
    RestorePoint rp;
    if( nDb<1 || nDb>LAYOUT_MAX_NAME || nName<1 || nName>LAYOUT_MAX_NAME
     || memchr(zEnd+1, 0, nName) ){
      return 0;
    }
    memcpy(zDb, o+8, nDb); zDb[nDb] = 0;
    memcpy(zName, zEnd+1, nName); zName[nName] = 0;
    if( vfyGet(p, k, layout_key_rp(k, bytes_get64(o), zDb, zName),
               &pVal, &nVal) ){
      bOk = layout_rp_decode(pVal, nVal, &rp)==SQLITE_OK
         && rp.iBranch==pB->iId && rp.iTxid==iTxid;
    }
  }
  sqlite3_free(pVal);
  return bOk;
}

static void vfyPinRow(Vfy *p, void *pCtx, const VRow *r){
  VBranch *pB = r->nKey>=19 ? vfyBranch(p, bytes_get64(r->aKey+2)) : 0;
  uint64_t iTxid = r->nKey>=19 ? bytes_get64(r->aKey+10) : 0;
  int eKind = r->nKey>=19 ? r->aKey[18] : 0;
  (void)pCtx;
  if( pB==0 || r->bLongKey ){
    if( p->bWhole ) vfyFind(p, 0, "pin", -1, -1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: pin row that does not decode or names a"
        " branch that does not exist"));
    return;
  }
  if( !pB->bSel ) return;
  pB->nPin++;
  if( eKind==LAYOUT_PIN_FORK && (!pB->bMinF || iTxid<pB->iMinF) ){
    pB->bMinF = 1; pB->iMinF = iTxid;
  }else if( eKind!=LAYOUT_PIN_FORK && (!pB->bMinR || iTxid<pB->iMinR) ){
    pB->bMinR = 1; pB->iMinR = iTxid;
  }
  if( !vfyHasCommit(p, pB, iTxid) ){
    vfyFind(p, pB, "pin", (int64_t)iTxid, -1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: pin on txid %llu, which is not in the"
        " branch's history", (unsigned long long)iTxid));
  }else if( !vfyPinOwner(p, pB, iTxid, eKind, r->aKey+19, r->nKey-19) ){
    vfyFind(p, pB, "pin", (int64_t)iTxid, -1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: pin of kind '%c' on txid %llu has no owner"
        " that holds it", eKind>=32 && eKind<127 ? eKind : '?',
        (unsigned long long)iTxid));
  }
}

/* One summary row (BRANCHES sub eSub) against the pin rows. */
static void vfyPinSummary(Vfy *p, VBranch *pB, int eSub, int bHave,
                          uint64_t iWant){
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = layout_key_branch_sub(k, pB->iId, eSub);
  void *pVal = 0;
  int nVal = 0;
  int bRow = vfyGet(p, k, nKey, &pVal, &nVal);
  int bOk = bRow ? (bHave && nVal==8 && bytes_get64(pVal)==iWant) : !bHave;
  sqlite3_free(pVal);
  if( !bOk && p->rc==SQLITE_OK ){
    vfyFind(p, pB, "pin", bHave ? (int64_t)iWant : -1, -1, k, nKey,
        sqlite3_mprintf("depot: the %s pin row does not match the pin rows"
        " (they give %s %llu)", eSub==LAYOUT_BRANCH_DESCPIN ? "descendant"
        : "restore-point", bHave ? "txid" : "none", (unsigned long long)iWant));
  }
}

static void vfyPinTotals(Vfy *p, VBranch *pB){
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = layout_key_branch_sub(k, pB->iId, LAYOUT_BRANCH_REFCOUNT);
  void *pVal = 0;
  int nVal = 0;
  int64_t nRef = 0;
  int bRow = vfyGet(p, k, nKey, &pVal, &nVal);
  if( bRow && nVal==8 ){
    nRef = (int64_t)bytes_get64le((const unsigned char*)pVal);
  }
  sqlite3_free(pVal);
  if( p->rc==SQLITE_OK && ((bRow && nVal!=8) || nRef!=pB->nPin) ){
    vfyFind(p, pB, "refcount", -1, -1, k, nKey, sqlite3_mprintf(
        "depot: refcount is %lld but the branch has %lld pin rows",
        (long long)nRef, (long long)pB->nPin));
  }
  vfyPinSummary(p, pB, LAYOUT_BRANCH_DESCPIN, pB->bMinF, pB->iMinF);
  vfyPinSummary(p, pB, LAYOUT_BRANCH_RPPIN, pB->bMinR, pB->iMinR);
}

static void vfyPins(Vfy *p){
  unsigned char lo[2] = { 0x02, LAYOUT_P_DBPIN };
  unsigned char hi[2] = { 0x02, LAYOUT_P_DBPIN+1 };
  int i;
  vfyEach(p, lo, 2, hi, 2, vfyPinRow, 0);
  for(i=0; i<p->nBr && p->rc==SQLITE_OK && !p->bStop; i++){
    if( p->aBr[i].bSel ) vfyPinTotals(p, &p->aBr[i]);
  }
}

/* ---- restore points ---- */

static void vfyRpRow(Vfy *p, void *pCtx, const VRow *r){
  const unsigned char *zEnd = r->nKey>12 ? memchr(r->aKey+10, 0, r->nKey-10)
                                         : 0;
  unsigned char k[LAYOUT_MAX_KEY], o[LAYOUT_MAX_KEY];
  RestorePoint rp;
  VBranch *pB;
  int nOwner = r->nKey-3;
  (void)pCtx;
  if( zEnd==0 || r->aKey[r->nKey-1]!=0 || r->nVal>LAYOUT_MAX_ROW
   || layout_rp_decode(r->aVal, r->nVal, &rp)!=SQLITE_OK ){
    if( p->bWhole ) vfyFind(p, 0, "restore_point", -1, -1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: restore point row does not decode"));
    return;
  }
  pB = vfyBranch(p, rp.iBranch);
  if( pB && !pB->bSel ) return;
  if( pB==0 ){
    if( p->bWhole ) vfyFind(p, 0, "restore_point", (int64_t)rp.iTxid, -1,
        r->aKey, r->nKey, sqlite3_mprintf("depot: restore point on branch"
        " %llu, which does not exist", (unsigned long long)rp.iBranch));
    return;
  }
  memcpy(o, r->aKey+2, nOwner);          /* {bucket:8}{db} 00 {name} */
  if( !vfyHasCommit(p, pB, rp.iTxid) ){
    vfyFind(p, pB, "restore_point", (int64_t)rp.iTxid, -1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: restore point on txid %llu, which is not in"
        " the branch's history", (unsigned long long)rp.iTxid));
  }else if( !vfyGet(p, k, layout_key_pin(k, rp.iBranch, rp.iTxid,
                    LAYOUT_PIN_RP, o, nOwner), 0, 0) ){
    vfyFind(p, pB, "restore_point", (int64_t)rp.iTxid, -1, r->aKey, r->nKey,
        sqlite3_mprintf("depot: restore point has no pin row"));
  }
}

static void vfyRestorePoints(Vfy *p){
  unsigned char lo[2] = { 0x02, LAYOUT_P_RP };
  unsigned char hi[2] = { 0x02, LAYOUT_P_RP+1 };
  vfyEach(p, lo, 2, hi, 2, vfyRpRow, 0);
}

/* ---- stored-byte counters ---- */

static int64_t vfyI64(Vfy *p, const unsigned char *k, int nKey, int *pbRow){
  void *pVal = 0;
  int nVal = 0;
  int64_t n = 0;
  *pbRow = vfyGet(p, k, nKey, &pVal, &nVal);
  if( *pbRow && nVal==8 ){
    n = (int64_t)bytes_get64le((const unsigned char*)pVal);
  }
  if( *pbRow && nVal!=8 ) n = -1;
  sqlite3_free(pVal);
  return n;
}

static void vfyBranchCounter(Vfy *p, VBranch *pB){
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = layout_key_br(k, pB->iId, LAYOUT_BR_QUOTA), bRow;
  pB->nCounter = vfyI64(p, k, nKey, &bRow);
  if( p->rc==SQLITE_OK && pB->nCounter!=pB->nBlobBytes ){
    vfyFind(p, pB, "counter", -1, -1, k, nKey, sqlite3_mprintf(
        "depot: the branch's stored-byte counter is %lld but its blob rows"
        " hold %lld bytes", (long long)pB->nCounter,
        (long long)pB->nBlobBytes));
  }
}

static int vfyDbCmp(const void *a, const void *b){
  const VBranch *x = *(const VBranch*const*)a, *y = *(const VBranch*const*)b;
  if( x->rec.iBucket!=y->rec.iBucket ){
    return x->rec.iBucket<y->rec.iBucket ? -1 : 1;
  }
  return strcmp(x->rec.zDb, y->rec.zDb);
}

/* The QUOTA 'u' row of the database of ap[0..n) against their counters. */
static void vfyDbCounter(Vfy *p, VBranch **ap, int n){
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = layout_key_quota(k, ap[0]->rec.iBucket, ap[0]->rec.zDb,
                              LAYOUT_QUOTA_USED);
  int64_t nSum = 0, nRow;
  int i, bRow;
  for(i=0; i<n; i++){
    nSum = (int64_t)((uint64_t)nSum + (uint64_t)ap[i]->nCounter);
  }
  nRow = vfyI64(p, k, nKey, &bRow);
  if( p->rc==SQLITE_OK && bRow && nRow!=nSum ){
    vfyFind(p, ap[0], "counter", -1, -1, k, nKey, sqlite3_mprintf(
        "depot: the database's quota use is %lld but its %d branches count"
        " %lld bytes", (long long)nRow, n, (long long)nSum));
  }
}

static void vfyCounters(Vfy *p){
  unsigned char k[LAYOUT_MAX_KEY];
  VBranch **ap;
  int64_t nSum = 0, nRow;
  int i, j, n = 0, bRow;
  if( !p->bWholeDb ) return;
  ap = sqlite3_malloc64(sizeof(VBranch*)*(p->nBr+1));
  if( ap==0 ){ vfyFail(p, SQLITE_NOMEM, 0); return; }
  for(i=0; i<p->nBr; i++){
    if( !p->aBr[i].bSel ) continue;
    ap[n++] = &p->aBr[i];
    nSum = (int64_t)((uint64_t)nSum + (uint64_t)p->aBr[i].nCounter);
  }
  qsort(ap, n, sizeof(VBranch*), vfyDbCmp);
  for(i=0; i<n && p->rc==SQLITE_OK && !p->bStop; i=j){
    for(j=i+1; j<n && vfyDbCmp(&ap[i], &ap[j])==0; j++){}
    vfyDbCounter(p, &ap[i], j-i);
  }
  sqlite3_free(ap);
  if( !p->bWhole || p->rc!=SQLITE_OK ) return;
  nRow = vfyI64(p, k, layout_key_ctr(k, "stored"), &bRow);
  if( p->rc==SQLITE_OK && nRow!=nSum ){
    vfyFind(p, 0, "counter", -1, -1, k, layout_key_ctr(k, "stored"),
        sqlite3_mprintf("depot: the store's stored-byte counter is %lld but"
        " its branches count %lld bytes", (long long)nRow, (long long)nSum));
  }
}

/* ---- the store-wide LOG ---- */

/* A LOG row: a 10-byte key, a value that decodes, a sequence number the
** store has handed out, and txid 0 exactly for a catalog change (branch
** 0).  Its branch and commit may be gone (reclaim deletes them and keeps
** the LOG row), which is no finding. */
static void vfyLogRow(Vfy *p, void *pCtx, const VRow *r){
  const int64_t *piVs = (const int64_t*)pCtx;
  LogRow lg;
  char *zMsg = 0;
  if( r->nKey!=10 || r->nVal>LAYOUT_MAX_ROW
   || layout_log_decode(r->aVal, r->nVal, &lg)!=SQLITE_OK ){
    zMsg = sqlite3_mprintf("depot: LOG row does not decode");
  }else if( bytes_get64(r->aKey+2)==0
         || bytes_get64(r->aKey+2)>(uint64_t)*piVs ){
    zMsg = sqlite3_mprintf("depot: LOG row of store sequence %llu, which"
        " the store has not handed out (1..%lld)",
        (unsigned long long)bytes_get64(r->aKey+2), (long long)*piVs);
  }else if( (lg.iBranch==0)!=(lg.iTxid==0) ){
    zMsg = sqlite3_mprintf("depot: LOG row names branch %llu txid %llu",
        (unsigned long long)lg.iBranch, (unsigned long long)lg.iTxid);
  }else{
    return;
  }
  vfyFind(p, 0, "log", -1, -1, r->aKey, r->nKey, zMsg);
}

/* The LOG rows, when the whole store is verified. */
static void vfyLog(Vfy *p){
  unsigned char k[LAYOUT_MAX_KEY];
  unsigned char lo[2] = { 0x02, LAYOUT_P_LOG };
  unsigned char hi[2] = { 0x02, LAYOUT_P_LOG+1 };
  int64_t iVs;
  int bRow;
  if( !p->bWhole ) return;
  iVs = vfyI64(p, k, layout_key_ctr(k, "vs"), &bRow);
  if( p->rc!=SQLITE_OK ) return;
  if( bRow && iVs<0 ){
    vfyFind(p, 0, "log", -1, -1, k, layout_key_ctr(k, "vs"), sqlite3_mprintf(
        "depot: the store sequence counter does not decode"));
    return;
  }
  vfyEach(p, lo, 2, hi, 2, vfyLogRow, &iVs);
}

/* ---- the whole run ---- */

/* The progress hook, before each selected branch: a stop request ends
** the verification with SQLITE_INTERRUPT. */
static void vfyProgress(Vfy *p, int nDone, int nSel){
  if( depot_progress_report("verify", nDone, nSel, p->nRead) ){
    vfyFail(p, SQLITE_INTERRUPT, sqlite3_mprintf("depot: interrupted"));
  }
}

static void vfyRun(Vfy *p){
  int i, nSel = 0, nDone = 0;
  for(i=0; i<p->nBr; i++) nSel += p->aBr[i].bSel!=0;
  for(i=0; i<p->nBr && p->rc==SQLITE_OK && !p->bStop; i++){
    VBranch *pB = &p->aBr[i];
    if( !pB->bSel ) continue;
    vfyProgress(p, nDone++, nSel);
    if( p->rc!=SQLITE_OK ) break;
    vfyBlobs(p, pB);
    if( p->rc==SQLITE_OK && !p->bStop ) vfyShards(p, pB);
    if( p->rc==SQLITE_OK && !p->bStop ) vfyVtx(p, pB);
    if( p->rc==SQLITE_OK && !p->bStop ) vfyPidx(p, pB);
    if( p->rc==SQLITE_OK && !p->bStop ) vfyHead(p, pB);
    if( p->rc==SQLITE_OK && !p->bStop ) vfyForks(p, pB);
    if( p->rc==SQLITE_OK && !p->bStop ) vfyBranchCounter(p, pB);
  }
  if( p->rc==SQLITE_OK && !p->bStop ) vfyPins(p);
  if( p->rc==SQLITE_OK && !p->bStop ) vfyRestorePoints(p);
  if( p->rc==SQLITE_OK && !p->bStop ) vfyCounters(p);
  if( p->rc==SQLITE_OK && !p->bStop ) vfyLog(p);
  if( p->rc==SQLITE_OK ) vfyProgress(p, nSel, nSel);
}

static int vfyOpen(Vfy *p, const char *zStore){
  StoreSqliteConfig cfg;
  int rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSynchronous = 2;
  cfg.bInspect = 1;
  rc = store_open(zStore, &cfg, &p->pStore, p->pzErr);
  if( rc!=SQLITE_OK ) return (rc&0xff)==SQLITE_NOMEM ? rc : SQLITE_CANTOPEN;
  rc = depot_db_check_format(p->pStore, p->pzErr);
  if( rc!=SQLITE_OK ) return SQLITE_CANTOPEN;
  p->pDctx = ZSTD_createDCtx();
  p->aPage = sqlite3_malloc64(65536);
  if( p->pDctx==0 || p->aPage==0 ) return SQLITE_NOMEM;
  rc = store_begin(p->pStore, 0);
  if( rc!=SQLITE_OK ) vfyStoreErr(p, rc);
  return p->rc;
}

/* zDb NULL or NAME or BUCKET/NAME; zBranch NULL or a name, only with zDb. */
static int vfyNameOk(const char *zDb, const char *zBranch){
  const char *zSlash = zDb ? strchr(zDb, '/') : 0;
  if( zBranch && (zDb==0 || !layout_name_ok(zBranch)) ) return 0;
  if( zDb==0 ) return 1;
  if( zSlash && (zSlash==zDb || zSlash-zDb>LAYOUT_MAX_NAME) ) return 0;
  return layout_name_ok(zSlash ? zSlash+1 : zDb);
}

int depot_verify(const char *zStore, const char *zDb, const char *zBranch,
                 DepotFindingFn xFn, void *pArg, char **pzErr){
  Vfy v;
  int rc;
  memset(&v, 0, sizeof(v));
  v.xFn = xFn;
  v.pArg = pArg;
  v.pzErr = pzErr;
  if( !vfyNameOk(zDb, zBranch) ){
    *pzErr = sqlite3_mprintf("depot: depot_verify(store[, db[, branch]]):"
        " db is NAME or BUCKET/NAME and branch a name, each 1..%d bytes",
        LAYOUT_MAX_NAME);
    return SQLITE_ERROR;
  }
  rc = vfyOpen(&v, zStore);
  if( rc==SQLITE_OK ) rc = vfySelect(&v, zDb, zBranch);
  if( rc==SQLITE_OK ){
    vfyRun(&v);
    rc = v.rc;
  }
  if( v.pStore ) store_rollback(v.pStore);
  store_close(v.pStore);
  ZSTD_freeDCtx(v.pDctx);
  sqlite3_free(v.aPage);
  sqlite3_free(v.aBr);
  sqlite3_free(v.aC);
  depot_chunk_cache_clear(&v.chunks);
  return rc;
}
