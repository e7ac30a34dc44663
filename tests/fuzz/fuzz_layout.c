/*
** fuzz_layout.c -- fuzz target for the outer store's key layout and row
** codecs (vfs/layout.c).
**
** The first input byte picks what the rest is: a META/head, COMMITS, BRANCHES
** or PIDX row for its decoder (a row that decodes must re-encode to the same
** bytes and decode again to the same fields), or the ids of two keys of one
** kind, whose memcmp order must be the numeric order of the ids (the layout
** promises that keys sort numerically).
*/
#include "config.h"
#include "tests/fuzz/fuzz.h"
#include "vfs/layout.h"
#include "vfs/ltx.h"
#include <sqlite3.h>

#include <string.h>

static void fuzzHead(const uint8_t *a, int n){
  DbHead h, h2;
  unsigned char b[LAYOUT_MAX_ROW];
  if( layout_head_decode(a, n, &h)!=SQLITE_OK ) return;
  FUZZ_CHECK( layout_head_encode(b, &h)==n && memcmp(a, b, n)==0 );
  FUZZ_CHECK( layout_head_decode(b, n, &h2)==SQLITE_OK );
  FUZZ_CHECK( memcmp(&h, &h2, sizeof(h))==0 );
}

static void fuzzCommit(const uint8_t *a, int n){
  CommitRow c, c2;
  unsigned char b[LAYOUT_MAX_ROW];
  memset(&c, 0, sizeof(c));           /* the struct has padding */
  memset(&c2, 0, sizeof(c2));
  if( layout_commit_decode(a, n, &c)!=SQLITE_OK ) return;
  FUZZ_CHECK( c.szChunk>0 && (uint64_t)c.nChunk*c.szChunk>=c.nBlob );
  FUZZ_CHECK( layout_commit_encode(b, &c)==n && memcmp(a, b, n)==0 );
  FUZZ_CHECK( layout_commit_decode(b, n, &c2)==SQLITE_OK );
  FUZZ_CHECK( memcmp(&c, &c2, sizeof(c))==0 );
}

/* A branch row decodes to names that are valid, and re-encodes (always in
** the current row version) to bytes that decode to the same record; a row
** of the current version re-encodes to itself. */
static void fuzzBranch(const uint8_t *a, int n){
  BranchRecord r, r2;
  unsigned char b[LAYOUT_MAX_ROW];
  int m;
  memset(&r, 0, sizeof(r));
  memset(&r2, 0, sizeof(r2));
  if( layout_branch_decode(a, n, &r)!=SQLITE_OK ) return;
  FUZZ_CHECK( layout_name_ok(r.zDb) && layout_name_ok(r.zBranch) );
  m = layout_branch_encode(b, &r);
  FUZZ_CHECK( m>0 && m<=LAYOUT_MAX_ROW );
  if( a[0]==b[0] ) FUZZ_CHECK( m==n && memcmp(a, b, n)==0 );
  FUZZ_CHECK( layout_branch_decode(b, m, &r2)==SQLITE_OK );
  FUZZ_CHECK( memcmp(&r, &r2, sizeof(r))==0 );
}

static void fuzzPidx(const uint8_t *a, int n){
  PidxValue v, v2;
  unsigned char b[LAYOUT_MAX_ROW];
  if( layout_pidx_decode(a, n, &v)!=SQLITE_OK ) return;
  FUZZ_CHECK( layout_pidx_encode(b, &v)==n && memcmp(a, b, n)==0 );
  FUZZ_CHECK( layout_pidx_decode(b, n, &v2)==SQLITE_OK );
  FUZZ_CHECK( memcmp(&v, &v2, sizeof(v))==0 );
}

/* Sign of x-y for two tuples of ids compared left to right. */
static int fuzzCmpIds(const uint64_t *x, const uint64_t *y, int n){
  int i;
  for(i=0; i<n; i++){
    if( x[i]!=y[i] ) return x[i]<y[i] ? -1 : 1;
  }
  return 0;
}

static int fuzzSign(int c){ return c<0 ? -1 : c>0; }

/* Build key kind eKind from ids; returns its length. */
static int fuzzKey(int eKind, const uint64_t *id, unsigned char *k){
  switch( eKind ){
    case 0:  return layout_key_branch(k, id[0]);
    case 1:  return layout_key_commit(k, id[0], id[1]);
    case 2:  return layout_key_vtx(k, id[0], id[1]);
    case 3:  return layout_key_pidx(k, id[0], (uint32_t)id[1], id[2]);
    default: return layout_key_delta(k, id[0], id[1], (uint32_t)id[2]);
  }
}

static void fuzzKeyOrder(int eKind, const uint8_t *a, int n){
  uint64_t x[3] = {0,0,0}, y[3] = {0,0,0};
  unsigned char kx[LAYOUT_MAX_KEY], ky[LAYOUT_MAX_KEY];
  int i, nx, ny, c;
  if( n<48 ) return;
  for(i=0; i<3; i++){
    x[i] = bytes_get64(a+8*i);
    y[i] = bytes_get64(a+24+8*i);
  }
  if( eKind==3 ){ x[1] = (uint32_t)x[1]; y[1] = (uint32_t)y[1]; }
  if( eKind==4 ){ x[2] = (uint32_t)x[2]; y[2] = (uint32_t)y[2]; }
  nx = fuzzKey(eKind, x, kx);
  ny = fuzzKey(eKind, y, ky);
  FUZZ_CHECK( nx==ny && nx<=LAYOUT_MAX_KEY );
  c = memcmp(kx, ky, nx);
  /* branch keys use one id, commit and vtx keys two, pidx and delta 3 */
  FUZZ_CHECK( fuzzSign(c)==fuzzCmpIds(x, y,
                                      eKind==0 ? 1 : eKind<3 ? 2 : 3) );
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  int n;
  if( nData<1 || nData>LAYOUT_MAX_ROW+1 ) return 0;
  n = (int)nData-1;
  switch( aData[0]%9 ){
    case 0: fuzzHead(aData+1, n); break;
    case 1: fuzzCommit(aData+1, n); break;
    case 2: fuzzBranch(aData+1, n); break;
    case 3: fuzzPidx(aData+1, n); break;
    default: fuzzKeyOrder(aData[0]%9-4, aData+1, n); break;
  }
  return 0;
}
