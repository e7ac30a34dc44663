/*
** layout.c -- key builders and row codecs of the outer store layout (see
** vfs/layout.h).  Every row value starts with a one-byte format version so
** later layouts can read older rows.
*/
#include "config.h"
#include "vfs/layout.h"
#include "vfs/ltx.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

#define LAYOUT_ROW_V1 1
#define LAYOUT_ROW_V2 2          /* BranchRecord with bucket, vs, state */

int layout_key_format(unsigned char *a){
  a[0] = 0x02; a[1] = LAYOUT_P_FORMAT;
  memcpy(a+2, "format", 6);
  return 8;
}

int layout_name_ok(const char *z){
  size_t n = z ? strlen(z) : 0;
  return n>=1 && n<=LAYOUT_MAX_NAME;
}

int layout_key_dbptr_prefix(unsigned char *a, const char *zDb){
  size_t n = strlen(zDb);
  a[0] = 0x02; a[1] = LAYOUT_P_DBPTR;
  memcpy(a+2, zDb, n);
  a[2+n] = 0;
  return (int)(3+n);
}

int layout_key_dbptr(unsigned char *a, const char *zDb, const char *zBranch){
  int n = layout_key_dbptr_prefix(a, zDb);
  size_t m = strlen(zBranch);
  memcpy(a+n, zBranch, m);
  a[n+m] = 0;
  return (int)(n+m+1);
}

int layout_key_branch(unsigned char *a, uint64_t iBranch){
  a[0] = 0x02; a[1] = LAYOUT_P_BRANCHES;
  bytes_put64(a+2, iBranch);
  return 10;
}

int layout_key_br(unsigned char *a, uint64_t iBranch, int eSub){
  a[0] = 0x02; a[1] = LAYOUT_P_BR;
  bytes_put64(a+2, iBranch);
  a[10] = (unsigned char)eSub;
  return 11;
}

int layout_key_commit(unsigned char *a, uint64_t iBranch, uint64_t iTxid){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_COMMITS);
  bytes_put64(a+n, iTxid);
  return n+8;
}

int layout_key_vtx(unsigned char *a, uint64_t iBranch, uint64_t iVs){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_VTX);
  bytes_put64(a+n, iVs);
  return n+8;
}

int layout_key_pidx(unsigned char *a, uint64_t iBranch, uint32_t pgno,
                    uint64_t iTxid){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_PIDX);
  bytes_put32(a+n, pgno);
  bytes_put64(a+n+4, iTxid);
  return n+12;
}

int layout_key_delta(unsigned char *a, uint64_t iBranch, uint64_t iTxid,
                     uint32_t iChunk){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_DELTA);
  bytes_put64(a+n, iTxid);
  bytes_put32(a+n+8, iChunk);
  return n+12;
}

int layout_key_stage(unsigned char *a, uint64_t iBranch, uint64_t iTxid,
                     uint32_t iPart){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_STAGE);
  bytes_put64(a+n, iTxid);
  bytes_put32(a+n+8, iPart);
  return n+12;
}

int layout_key_shard(unsigned char *a, uint64_t iBranch, uint32_t iShard,
                     uint64_t iAsOf){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_SHARD);
  bytes_put32(a+n, iShard);
  bytes_put64(a+n+4, iAsOf);
  return n+12;
}

int layout_key_shard_chunk(unsigned char *a, uint64_t iBranch,
                           uint32_t iShard, uint64_t iAsOf, uint32_t iChunk){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_SHARDBLOB);
  bytes_put32(a+n, iShard);
  bytes_put64(a+n+4, iAsOf);
  bytes_put32(a+n+12, iChunk);
  return n+16;
}

int layout_key_ctr(unsigned char *a, const char *zName){
  size_t n = strlen(zName);
  a[0] = 0x02; a[1] = LAYOUT_P_CTR;
  memcpy(a+2, zName, n);
  return (int)(2+n);
}

/* {bucket:8}{db} 00 {name} 00 after a two-byte prefix. */
static int layoutNamed(unsigned char *a, int ePart, uint64_t iBucket,
                       const char *zDb, const char *zName){
  size_t nDb = strlen(zDb), nName = strlen(zName);
  a[0] = 0x02; a[1] = (unsigned char)ePart;
  bytes_put64(a+2, iBucket);
  memcpy(a+10, zDb, nDb);
  a[10+nDb] = 0;
  memcpy(a+11+nDb, zName, nName);
  a[11+nDb+nName] = 0;
  return (int)(12+nDb+nName);
}

int layout_key_ptr(unsigned char *a, uint64_t iBucket, const char *zDb,
                   const char *zBranch){
  if( iBucket==0 ) return layout_key_dbptr(a, zDb, zBranch);
  return layoutNamed(a, LAYOUT_P_BDBPTR, iBucket, zDb, zBranch);
}

int layout_key_ptr_hist(unsigned char *a, uint64_t iBucket, const char *zDb,
                        const char *zBranch, uint64_t iVs){
  int n = layoutNamed(a, LAYOUT_P_PTRHIST, iBucket, zDb, zBranch);
  bytes_put64(a+n, iVs);
  return n+8;
}

int layout_key_branch_sub(unsigned char *a, uint64_t iBranch, int eSub){
  int n = layout_key_branch(a, iBranch);
  a[n] = (unsigned char)eSub;
  return n+1;
}

int layout_key_bucket_ptr(unsigned char *a, const char *zBucket){
  size_t n = strlen(zBucket);
  a[0] = 0x02; a[1] = LAYOUT_P_BUCKET_PTR;
  memcpy(a+2, zBucket, n);
  a[2+n] = 0;
  return (int)(3+n);
}

int layout_key_bucket(unsigned char *a, uint64_t iBucket, int eSub){
  a[0] = 0x02; a[1] = LAYOUT_P_BUCKET;
  bytes_put64(a+2, iBucket);
  if( eSub==0 ) return 10;
  a[10] = (unsigned char)eSub;
  return 11;
}

int layout_key_log(unsigned char *a, uint64_t iVs){
  a[0] = 0x02; a[1] = LAYOUT_P_LOG;
  bytes_put64(a+2, iVs);
  return 10;
}

int layout_key_rp(unsigned char *a, uint64_t iBucket, const char *zDb,
                  const char *zName){
  return layoutNamed(a, LAYOUT_P_RP, iBucket, zDb, zName);
}

int layout_key_pitr(unsigned char *a, const char *zDb){
  size_t n = zDb ? strlen(zDb) : 0;
  a[0] = 0x02; a[1] = LAYOUT_P_CONFIG;
  memcpy(a+2, "pitr", 5);
  if( n ) memcpy(a+7, zDb, n);
  return (int)(7+n);
}

int layout_key_pin(unsigned char *a, uint64_t iBranch, uint64_t iTxid,
                   int eKind, const void *pOwner, int nOwner){
  a[0] = 0x02; a[1] = LAYOUT_P_DBPIN;
  bytes_put64(a+2, iBranch);
  bytes_put64(a+10, iTxid);
  a[18] = (unsigned char)eKind;
  if( nOwner>0 ) memcpy(a+19, pOwner, nOwner);
  return 19+nOwner;
}

int layout_key_quota(unsigned char *a, uint64_t iBucket, const char *zDb,
                     int eSub){
  size_t n = strlen(zDb);
  a[0] = 0x02; a[1] = LAYOUT_P_QUOTA;
  bytes_put64(a+2, iBucket);
  memcpy(a+10, zDb, n);
  a[10+n] = 0;
  a[11+n] = (unsigned char)eSub;
  return (int)(12+n);
}

int layout_key_bchild(unsigned char *a, uint64_t iSrc, uint64_t iVs,
                      uint64_t iChild){
  a[0] = 0x02; a[1] = LAYOUT_P_BCHILD;
  bytes_put64(a+2, iSrc);
  bytes_put64(a+10, iVs);
  bytes_put64(a+18, iChild);
  return 26;
}

int layout_head_encode(unsigned char *a, const DbHead *p){
  a[0] = LAYOUT_ROW_V1;
  bytes_put64(a+1, p->iTxid);
  bytes_put32(a+9, p->szPage);
  bytes_put32(a+13, p->nPage);
  bytes_put64(a+17, p->iChecksum);
  bytes_put64(a+25, p->iVs);
  return 33;
}

int layout_head_decode(const unsigned char *a, int n, DbHead *p){
  if( n!=33 || a[0]!=LAYOUT_ROW_V1 ) return SQLITE_CORRUPT;
  p->iTxid = bytes_get64(a+1);
  p->szPage = bytes_get32(a+9);
  p->nPage = bytes_get32(a+13);
  p->iChecksum = bytes_get64(a+17);
  p->iVs = bytes_get64(a+25);
  if( p->szPage<512 || p->szPage>65536 || (p->szPage&(p->szPage-1)) ){
    return SQLITE_CORRUPT;
  }
  return SQLITE_OK;
}

int layout_commit_encode(unsigned char *a, const CommitRow *p){
  a[0] = LAYOUT_ROW_V1;
  bytes_put64(a+1, p->iTxid);
  bytes_put64(a+9, p->iTimeMs);
  bytes_put32(a+17, p->szPage);
  bytes_put32(a+21, p->nPage);
  bytes_put32(a+25, p->nWritten);
  bytes_put32(a+29, p->nChunk);
  bytes_put32(a+33, p->szChunk);
  bytes_put64(a+37, p->nBlob);
  bytes_put64(a+45, p->iChecksum);
  bytes_put64(a+53, p->iVs);
  return 61;
}

int layout_commit_decode(const unsigned char *a, int n, CommitRow *p){
  if( n!=61 || a[0]!=LAYOUT_ROW_V1 ) return SQLITE_CORRUPT;
  p->iTxid = bytes_get64(a+1);
  p->iTimeMs = bytes_get64(a+9);
  p->szPage = bytes_get32(a+17);
  p->nPage = bytes_get32(a+21);
  p->nWritten = bytes_get32(a+25);
  p->nChunk = bytes_get32(a+29);
  p->szChunk = bytes_get32(a+33);
  p->nBlob = bytes_get64(a+37);
  p->iChecksum = bytes_get64(a+45);
  p->iVs = bytes_get64(a+53);
  /* nChunk == ceil(nBlob/szChunk), without nBlob+szChunk-1 wrapping. */
  if( p->szChunk==0 || p->nChunk != p->nBlob/p->szChunk
                                     + (p->nBlob%p->szChunk!=0) ){
    return SQLITE_CORRUPT;
  }
  return SQLITE_OK;
}

int layout_branch_encode(unsigned char *a, const BranchRecord *p){
  size_t nDb = strlen(p->zDb), nBr = strlen(p->zBranch);
  int n = 19+(int)(nDb+nBr);
  a[0] = LAYOUT_ROW_V2;
  bytes_put64(a+1, p->iParent);
  bytes_put64(a+9, p->iParentTxid);
  a[17] = (unsigned char)nDb;
  memcpy(a+18, p->zDb, nDb);
  a[18+nDb] = (unsigned char)nBr;
  memcpy(a+19+nDb, p->zBranch, nBr);
  bytes_put64(a+n, p->iBucket);
  bytes_put64(a+n+8, p->iCreateVs);
  a[n+16] = (unsigned char)p->eState;
  return n+17;
}

int layout_branch_decode(const unsigned char *a, int n, BranchRecord *p){
  int nDb, nBr, nExtra;
  if( n<19 || (a[0]!=LAYOUT_ROW_V1 && a[0]!=LAYOUT_ROW_V2) ){
    return SQLITE_CORRUPT;
  }
  nExtra = a[0]==LAYOUT_ROW_V2 ? 17 : 0;
  p->iParent = bytes_get64(a+1);
  p->iParentTxid = bytes_get64(a+9);
  nDb = a[17];
  if( 19+nDb>n ) return SQLITE_CORRUPT;
  nBr = a[18+nDb];
  if( 19+nDb+nBr+nExtra!=n ) return SQLITE_CORRUPT;
  /* Names are 1..255 bytes without NUL (layout_name_ok). */
  if( nDb==0 || nBr==0 || memchr(a+18, 0, nDb) || memchr(a+19+nDb, 0, nBr) ){
    return SQLITE_CORRUPT;
  }
  p->iBucket = nExtra ? bytes_get64(a+19+nDb+nBr) : 0;
  p->iCreateVs = nExtra ? bytes_get64(a+27+nDb+nBr) : 0;
  p->eState = nExtra ? a[35+nDb+nBr] : LAYOUT_STATE_LIVE;
  if( p->eState>LAYOUT_STATE_DROPPED ) return SQLITE_CORRUPT;
  memcpy(p->zDb, a+18, nDb);
  p->zDb[nDb] = 0;
  memcpy(p->zBranch, a+19+nDb, nBr);
  p->zBranch[nBr] = 0;
  return SQLITE_OK;
}

int layout_pidx_encode(unsigned char *a, const PidxValue *p){
  bytes_put32(a, p->iOffset);
  bytes_put32(a+4, p->nByte);
  bytes_put32(a+8, p->szChunk);
  return 12;
}

int layout_pidx_decode(const unsigned char *a, int n, PidxValue *p){
  if( n!=12 ) return SQLITE_CORRUPT;
  p->iOffset = bytes_get32(a);
  p->nByte = bytes_get32(a+4);
  p->szChunk = bytes_get32(a+8);
  if( p->szChunk==0 || p->nByte<LTX_FRAME_HEADER ) return SQLITE_CORRUPT;
  return SQLITE_OK;
}

int layout_ptr_encode(unsigned char *a, const PtrValue *p){
  bytes_put64(a, p->iBranch);
  bytes_put64(a+8, p->iVs);
  return 16;
}

/* 8-byte values are pointers written before pointers carried a vs. */
int layout_ptr_decode(const unsigned char *a, int n, PtrValue *p){
  if( n!=8 && n!=16 ) return SQLITE_CORRUPT;
  p->iBranch = bytes_get64(a);
  p->iVs = n==16 ? bytes_get64(a+8) : 0;
  if( n==8 && p->iBranch==0 ) return SQLITE_CORRUPT;
  return SQLITE_OK;
}

int layout_hist_encode(unsigned char *a, const PtrHistory *p){
  a[0] = LAYOUT_ROW_V1;
  bytes_put64(a+1, p->iOld);
  bytes_put64(a+9, p->iNew);
  bytes_put64(a+17, p->iTimeMs);
  a[25] = (unsigned char)p->eReason;
  return 26;
}

int layout_hist_decode(const unsigned char *a, int n, PtrHistory *p){
  if( n!=26 || a[0]!=LAYOUT_ROW_V1 ) return SQLITE_CORRUPT;
  p->iOld = bytes_get64(a+1);
  p->iNew = bytes_get64(a+9);
  p->iTimeMs = bytes_get64(a+17);
  p->eReason = a[25];
  return SQLITE_OK;
}

int layout_bucket_encode(unsigned char *a, const BucketRecord *p){
  size_t n = strlen(p->zName);
  a[0] = LAYOUT_ROW_V1;
  bytes_put64(a+1, p->iParent);
  bytes_put64(a+9, p->iForkVs);
  memcpy(a+17, p->zName, n);
  return (int)(17+n);
}

int layout_bucket_decode(const unsigned char *a, int n, BucketRecord *p){
  if( n<18 || n>17+LAYOUT_MAX_NAME || a[0]!=LAYOUT_ROW_V1 ){
    return SQLITE_CORRUPT;
  }
  p->iParent = bytes_get64(a+1);
  p->iForkVs = bytes_get64(a+9);
  memcpy(p->zName, a+17, n-17);
  p->zName[n-17] = 0;
  return SQLITE_OK;
}

int layout_rp_encode(unsigned char *a, const RestorePoint *p){
  a[0] = LAYOUT_ROW_V1;
  bytes_put64(a+1, p->iBranch);
  bytes_put64(a+9, p->iTxid);
  bytes_put64(a+17, p->iVs);
  bytes_put64(a+25, p->iTimeMs);
  a[33] = (unsigned char)(p->bUndo!=0);
  return 34;
}

int layout_rp_decode(const unsigned char *a, int n, RestorePoint *p){
  if( n!=34 || a[0]!=LAYOUT_ROW_V1 || a[33]>1 ) return SQLITE_CORRUPT;
  p->iBranch = bytes_get64(a+1);
  p->iTxid = bytes_get64(a+9);
  p->iVs = bytes_get64(a+17);
  p->iTimeMs = bytes_get64(a+25);
  p->bUndo = a[33];
  return p->iBranch ? SQLITE_OK : SQLITE_CORRUPT;
}

int layout_pitr_encode(unsigned char *a, const PitrPolicy *p){
  a[0] = LAYOUT_ROW_V1;
  bytes_put64(a+1, (uint64_t)p->iIntervalMs);
  bytes_put64(a+9, (uint64_t)p->iRetentionMs);
  return 17;
}

int layout_pitr_decode(const unsigned char *a, int n, PitrPolicy *p){
  if( n!=17 || a[0]!=LAYOUT_ROW_V1 ) return SQLITE_CORRUPT;
  p->iIntervalMs = (int64_t)bytes_get64(a+1);
  p->iRetentionMs = (int64_t)bytes_get64(a+9);
  if( p->iIntervalMs<0 || p->iRetentionMs<0 ) return SQLITE_CORRUPT;
  return SQLITE_OK;
}

int layout_log_encode(unsigned char *a, const LogRow *p){
  bytes_put64(a, p->iBranch);
  bytes_put64(a+8, p->iTxid);
  bytes_put64(a+16, p->iTimeMs);
  return 24;
}

int layout_log_decode(const unsigned char *a, int n, LogRow *p){
  if( n!=24 ) return SQLITE_CORRUPT;
  p->iBranch = bytes_get64(a);
  p->iTxid = bytes_get64(a+8);
  p->iTimeMs = bytes_get64(a+16);
  return SQLITE_OK;
}

int layout_shard_encode(unsigned char *a, const ShardRow *p){
  int i;
  bytes_put32(a, p->szPage);
  bytes_put32(a+4, p->nPage);
  bytes_put32(a+8, p->nChunk);
  bytes_put32(a+12, p->szChunk);
  bytes_put64(a+16, p->nBlob);
  for(i=0; i<LAYOUT_SHARD_SIZE; i++){
    bytes_put32(a+24+8*i, p->aOff[i]);
    bytes_put32(a+28+8*i, p->aLen[i]);
  }
  return LAYOUT_SHARD_ROW;
}

int layout_shard_decode(const unsigned char *a, int n, ShardRow *p){
  int i;
  if( n!=LAYOUT_SHARD_ROW ) return SQLITE_CORRUPT;
  p->szPage = bytes_get32(a);
  p->nPage = bytes_get32(a+4);
  p->nChunk = bytes_get32(a+8);
  p->szChunk = bytes_get32(a+12);
  p->nBlob = bytes_get64(a+16);
  if( p->szChunk==0 || p->nBlob<LTX_HEADER_SIZE || p->nBlob>0xffffffffULL
   || p->nChunk!=(p->nBlob+p->szChunk-1)/p->szChunk ){
    return SQLITE_CORRUPT;
  }
  for(i=0; i<LAYOUT_SHARD_SIZE; i++){
    p->aOff[i] = bytes_get32(a+24+8*i);
    p->aLen[i] = bytes_get32(a+28+8*i);
    if( p->aLen[i] && ((uint64_t)p->aOff[i]+p->aLen[i])>p->nBlob ){
      return SQLITE_CORRUPT;
    }
  }
  return SQLITE_OK;
}

int layout_stage_encode(unsigned char *a, const uint32_t *aPgno, int n){
  int i;
  a[0] = 1;
  for(i=0; i<n; i++) bytes_put32(a+1+4*i, aPgno[i]);
  return 1 + 4*n;
}

int layout_stage_count(const unsigned char *a, int n){
  if( n<1 || a[0]!=1 || (n-1)%4!=0 || (n-1)/4>LAYOUT_STAGE_PAGES ) return -1;
  return (n-1)/4;
}

uint32_t layout_stage_pgno(const unsigned char *a, int i){
  return bytes_get32(a+1+4*i);
}
