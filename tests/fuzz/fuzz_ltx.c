/*
** fuzz_ltx.c -- fuzz target for the page-blob codec (vfs/ltx.c).
**
** The input is checked as a whole blob with ltx_verify(); a blob that
** verifies must have every indexed frame decode to a page whose CRC the
** frame states.  Its header is decoded alone, and the bytes after the
** header are decoded as one frame.  Then the input is cut into pages that
** ltx_encode() packs: the blob it writes must verify, and every frame
** must decode back to the page it was given.
*/
#include "config.h"
#include "tests/fuzz/fuzz.h"
#include "vfs/ltx.h"
#include <sqlite3.h>

#include <string.h>

#define FUZZ_LTX_PAGE 512
#define FUZZ_LTX_MAXPAGES 8

static ZSTD_DCtx *pFuzzDctx = 0;
static ZSTD_CCtx *pFuzzCctx = 0;

static void fuzzLtxDecode(const uint8_t *a, size_t n){
  LtxHeader h;
  char *zErr = 0;
  unsigned char *aPage;
  int rc = ltx_verify(a, (int64_t)n, pFuzzDctx, &h, 0, &zErr);
  FUZZ_CHECK( rc==SQLITE_OK || rc==SQLITE_CORRUPT || rc==SQLITE_NOMEM );
  FUZZ_CHECK( rc!=SQLITE_CORRUPT || zErr!=0 );
  sqlite3_free(zErr);
  zErr = 0;
  if( ltx_decode_header(a, (int64_t)n, &h, &zErr)!=SQLITE_OK ){
    sqlite3_free(zErr);
    return;
  }
  FUZZ_CHECK( h.szPage>=512 && h.szPage<=65536 );
  aPage = malloc(h.szPage);
  if( aPage ){
    uint32_t pgno = n>LTX_HEADER_SIZE+4 ? bytes_get32(a+LTX_HEADER_SIZE) : 1;
    rc = ltx_decode_frame(a+LTX_HEADER_SIZE, (int64_t)n-LTX_HEADER_SIZE,
                          pgno, h.szPage, pFuzzDctx, aPage, 0, &zErr);
    FUZZ_CHECK( rc==SQLITE_OK || rc==SQLITE_CORRUPT || rc==SQLITE_NOMEM );
    sqlite3_free(zErr);
    free(aPage);
  }
}

/* Pack the input into up to FUZZ_LTX_MAXPAGES pages and read them back. */
static void fuzzLtxRoundTrip(const uint8_t *a, size_t n){
  unsigned char aPage[FUZZ_LTX_MAXPAGES][FUZZ_LTX_PAGE];
  const unsigned char *apPage[FUZZ_LTX_MAXPAGES];
  uint32_t aPgno[FUZZ_LTX_MAXPAGES];
  LtxFrameRef aRef[FUZZ_LTX_MAXPAGES];
  unsigned char aOut[FUZZ_LTX_PAGE];
  LtxHeader h;
  unsigned char *pBlob = 0;
  int64_t nBlob = 0;
  char *zErr = 0;
  uint32_t i, nPage = (uint32_t)(n/FUZZ_LTX_PAGE) + 1;
  if( nPage>FUZZ_LTX_MAXPAGES ) nPage = FUZZ_LTX_MAXPAGES;
  memset(aPage, 0, sizeof(aPage));
  memcpy(aPage, a, n<sizeof(aPage) ? n : sizeof(aPage));
  for(i=0; i<nPage; i++){
    apPage[i] = aPage[i];
    aPgno[i] = 1 + 2*i + (n>0 ? a[0]%3 : 0);
  }
  memset(&h, 0, sizeof(h));
  h.szPage = FUZZ_LTX_PAGE;
  h.nPage = aPgno[nPage-1];
  h.iMinTxid = h.iMaxTxid = 1;
  h.nFrame = nPage;
  if( ltx_encode(&h, aPgno, apPage, 0, pFuzzCctx, 1, &pBlob, &nBlob,
                 aRef)!=SQLITE_OK ) return;
  FUZZ_CHECK( ltx_verify(pBlob, nBlob, pFuzzDctx, 0, 0, &zErr)==SQLITE_OK );
  for(i=0; i<nPage; i++){
    FUZZ_CHECK( aRef[i].pgno==aPgno[i] && aRef[i].iOffset<nBlob );
    FUZZ_CHECK( ltx_decode_frame(pBlob+aRef[i].iOffset, aRef[i].nByte,
                   aPgno[i], FUZZ_LTX_PAGE, pFuzzDctx, aOut, 0, &zErr)==SQLITE_OK );
    FUZZ_CHECK( memcmp(aOut, aPage[i], FUZZ_LTX_PAGE)==0 );
  }
  sqlite3_free(pBlob);
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  if( pFuzzDctx==0 ) pFuzzDctx = ZSTD_createDCtx();
  if( pFuzzCctx==0 ) pFuzzCctx = ZSTD_createCCtx();
  if( pFuzzDctx==0 || pFuzzCctx==0 ) return 0;
  fuzzLtxDecode(aData, nData);
  fuzzLtxRoundTrip(aData, nData);
  return 0;
}
