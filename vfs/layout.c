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
  ltx_put64(a+2, iBranch);
  return 10;
}

int layout_key_br(unsigned char *a, uint64_t iBranch, int eSub){
  a[0] = 0x02; a[1] = LAYOUT_P_BR;
  ltx_put64(a+2, iBranch);
  a[10] = (unsigned char)eSub;
  return 11;
}

int layout_key_commit(unsigned char *a, uint64_t iBranch, uint64_t iTxid){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_COMMITS);
  ltx_put64(a+n, iTxid);
  return n+8;
}

int layout_key_vtx(unsigned char *a, uint64_t iBranch, uint64_t iVs){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_VTX);
  ltx_put64(a+n, iVs);
  return n+8;
}

int layout_key_pidx(unsigned char *a, uint64_t iBranch, uint32_t pgno,
                    uint64_t iTxid){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_PIDX);
  ltx_put32(a+n, pgno);
  ltx_put64(a+n+4, iTxid);
  return n+12;
}

int layout_key_delta(unsigned char *a, uint64_t iBranch, uint64_t iTxid,
                     uint32_t iChunk){
  int n = layout_key_br(a, iBranch, LAYOUT_BR_DELTA);
  ltx_put64(a+n, iTxid);
  ltx_put32(a+n+8, iChunk);
  return n+12;
}

int layout_key_ctr(unsigned char *a, const char *zName){
  size_t n = strlen(zName);
  a[0] = 0x02; a[1] = LAYOUT_P_CTR;
  memcpy(a+2, zName, n);
  return (int)(2+n);
}

int layout_head_encode(unsigned char *a, const DbHead *p){
  a[0] = LAYOUT_ROW_V1;
  ltx_put64(a+1, p->iTxid);
  ltx_put32(a+9, p->szPage);
  ltx_put32(a+13, p->nPage);
  ltx_put64(a+17, p->iChecksum);
  ltx_put64(a+25, p->iVs);
  return 33;
}

int layout_head_decode(const unsigned char *a, int n, DbHead *p){
  if( n!=33 || a[0]!=LAYOUT_ROW_V1 ) return SQLITE_CORRUPT;
  p->iTxid = ltx_get64(a+1);
  p->szPage = ltx_get32(a+9);
  p->nPage = ltx_get32(a+13);
  p->iChecksum = ltx_get64(a+17);
  p->iVs = ltx_get64(a+25);
  if( p->szPage<512 || p->szPage>65536 || (p->szPage&(p->szPage-1)) ){
    return SQLITE_CORRUPT;
  }
  return SQLITE_OK;
}

int layout_commit_encode(unsigned char *a, const CommitRow *p){
  a[0] = LAYOUT_ROW_V1;
  ltx_put64(a+1, p->iTxid);
  ltx_put64(a+9, p->iTimeMs);
  ltx_put32(a+17, p->szPage);
  ltx_put32(a+21, p->nPage);
  ltx_put32(a+25, p->nWritten);
  ltx_put32(a+29, p->nChunk);
  ltx_put32(a+33, p->szChunk);
  ltx_put64(a+37, p->nBlob);
  ltx_put64(a+45, p->iChecksum);
  ltx_put64(a+53, p->iVs);
  return 61;
}

int layout_commit_decode(const unsigned char *a, int n, CommitRow *p){
  if( n!=61 || a[0]!=LAYOUT_ROW_V1 ) return SQLITE_CORRUPT;
  p->iTxid = ltx_get64(a+1);
  p->iTimeMs = ltx_get64(a+9);
  p->szPage = ltx_get32(a+17);
  p->nPage = ltx_get32(a+21);
  p->nWritten = ltx_get32(a+25);
  p->nChunk = ltx_get32(a+29);
  p->szChunk = ltx_get32(a+33);
  p->nBlob = ltx_get64(a+37);
  p->iChecksum = ltx_get64(a+45);
  p->iVs = ltx_get64(a+53);
  /* nChunk == ceil(nBlob/szChunk), without nBlob+szChunk-1 wrapping. */
  if( p->szChunk==0 || p->nChunk != p->nBlob/p->szChunk
                                     + (p->nBlob%p->szChunk!=0) ){
    return SQLITE_CORRUPT;
  }
  return SQLITE_OK;
}

int layout_branch_encode(unsigned char *a, const BranchRecord *p){
  size_t nDb = strlen(p->zDb), nBr = strlen(p->zBranch);
  a[0] = LAYOUT_ROW_V1;
  ltx_put64(a+1, p->iParent);
  ltx_put64(a+9, p->iParentTxid);
  a[17] = (unsigned char)nDb;
  memcpy(a+18, p->zDb, nDb);
  a[18+nDb] = (unsigned char)nBr;
  memcpy(a+19+nDb, p->zBranch, nBr);
  return (int)(19+nDb+nBr);
}

int layout_branch_decode(const unsigned char *a, int n, BranchRecord *p){
  int nDb, nBr;
  if( n<19 || a[0]!=LAYOUT_ROW_V1 ) return SQLITE_CORRUPT;
  p->iParent = ltx_get64(a+1);
  p->iParentTxid = ltx_get64(a+9);
  nDb = a[17];
  if( 19+nDb>n ) return SQLITE_CORRUPT;
  nBr = a[18+nDb];
  if( 19+nDb+nBr!=n ) return SQLITE_CORRUPT;
  /* Names are 1..255 bytes without NUL (layout_name_ok). */
  if( nDb==0 || nBr==0 || memchr(a+18, 0, nDb) || memchr(a+19+nDb, 0, nBr) ){
    return SQLITE_CORRUPT;
  }
  memcpy(p->zDb, a+18, nDb);
  p->zDb[nDb] = 0;
  memcpy(p->zBranch, a+19+nDb, nBr);
  p->zBranch[nBr] = 0;
  return SQLITE_OK;
}

int layout_pidx_encode(unsigned char *a, const PidxValue *p){
  ltx_put32(a, p->iOffset);
  ltx_put32(a+4, p->nByte);
  ltx_put32(a+8, p->szChunk);
  return 12;
}

int layout_pidx_decode(const unsigned char *a, int n, PidxValue *p){
  if( n!=12 ) return SQLITE_CORRUPT;
  p->iOffset = ltx_get32(a);
  p->nByte = ltx_get32(a+4);
  p->szChunk = ltx_get32(a+8);
  if( p->szChunk==0 || p->nByte<LTX_FRAME_HEADER ) return SQLITE_CORRUPT;
  return SQLITE_OK;
}
