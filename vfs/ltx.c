/*
** ltx.c -- encoder and decoders of the depot page-blob format described in
** vfs/ltx.h, and the CRC-64 used by blobs, page index rows and the rolling
** database checksum.
*/
#include "config.h"
#include "vfs/ltx.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>

/* Slicing-by-8 tables: aLtxCrc[0] is the byte-at-a-time table, table k
** advances a byte through k further zero bytes. */
#define LTX_CRC_POLY 0xC96C5795D7870F42ULL
static uint64_t aLtxCrc[8][256];
static pthread_once_t ltxCrcOnce = PTHREAD_ONCE_INIT;

/* x^k mod P in the reflected form of the tables (bit i is the coefficient
** of x^(63-i)): multiplying by x shifts right and folds x^64 back in. */
static uint64_t ltxCrcXPow(unsigned k){
  uint64_t v = 1ULL<<63;
  while( k-- ) v = (v>>1) ^ ((v & 1) ? LTX_CRC_POLY : 0);
  return v;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* Carry-less multiplication (PCLMULQDQ) folds 64 bytes per step, as in
** Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ":
** a 128-bit remainder X (low qword first in the stream) moved d bits on
** is congruent to clmul(X.lo, x^(d+63) mod P) ^ clmul(X.hi, x^(d-1) mod P)
** (the reflected product carries one factor x of its own).  Four
** remainders run side by side and are folded into one, whose 16 bytes
** then go through the tables with the bytes left over, so the result is
** the tables' to the bit.  Only called when the CPU has the instruction
** (ltxCrcClmul, set once by ltxCrcInit). */
#define LTX_CRC_CLMUL 1
#include <immintrin.h>
static int ltxCrcClmul = 0;
static uint64_t aLtxFold[8];   /* x^k mod P for k = 575,511 (64 bytes),
                               ** 447,383 (48), 319,255 (32), 191,127 (16) */

__attribute__((target("pclmul,sse2")))
static __m128i ltxFold(__m128i x, __m128i k){
  return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                       _mm_clmulepi64_si128(x, k, 0x11));
}

static uint64_t ltxCrcTable(uint64_t crc, const unsigned char *a, size_t n);

__attribute__((target("pclmul,sse2")))
static uint64_t ltxCrcFold(uint64_t crc, const unsigned char *a, size_t n){
  __m128i k64 = _mm_set_epi64x((long long)aLtxFold[1], (long long)aLtxFold[0]);
  __m128i k48 = _mm_set_epi64x((long long)aLtxFold[3], (long long)aLtxFold[2]);
  __m128i k32 = _mm_set_epi64x((long long)aLtxFold[5], (long long)aLtxFold[4]);
  __m128i k16 = _mm_set_epi64x((long long)aLtxFold[7], (long long)aLtxFold[6]);
  __m128i x0 = _mm_loadu_si128((const __m128i*)a);
  __m128i x1 = _mm_loadu_si128((const __m128i*)(a+16));
  __m128i x2 = _mm_loadu_si128((const __m128i*)(a+32));
  __m128i x3 = _mm_loadu_si128((const __m128i*)(a+48));
  unsigned char aRest[16];
  x0 = _mm_xor_si128(x0, _mm_set_epi64x(0, (long long)crc));
  a += 64;
  n -= 64;
  while( n>=64 ){
    x0 = _mm_xor_si128(ltxFold(x0, k64), _mm_loadu_si128((const __m128i*)a));
    x1 = _mm_xor_si128(ltxFold(x1, k64),
                       _mm_loadu_si128((const __m128i*)(a+16)));
    x2 = _mm_xor_si128(ltxFold(x2, k64),
                       _mm_loadu_si128((const __m128i*)(a+32)));
    x3 = _mm_xor_si128(ltxFold(x3, k64),
                       _mm_loadu_si128((const __m128i*)(a+48)));
    a += 64;
    n -= 64;
  }
  x3 = _mm_xor_si128(x3, _mm_xor_si128(ltxFold(x0, k48),
                         _mm_xor_si128(ltxFold(x1, k32), ltxFold(x2, k16))));
  while( n>=16 ){
    x3 = _mm_xor_si128(ltxFold(x3, k16), _mm_loadu_si128((const __m128i*)a));
    a += 16;
    n -= 16;
  }
  _mm_storeu_si128((__m128i*)aRest, x3);
  return ltxCrcTable(ltxCrcTable(0, aRest, 16), a, n);
}
#endif

static void ltxCrcInit(void){
  int i, j, k;
  for(i=0; i<256; i++){
    uint64_t c = (uint64_t)i;
    for(j=0; j<8; j++){
      c = (c & 1) ? (c>>1) ^ LTX_CRC_POLY : (c>>1);
    }
    aLtxCrc[0][i] = c;
  }
  for(k=1; k<8; k++){
    for(i=0; i<256; i++){
      uint64_t c = aLtxCrc[k-1][i];
      aLtxCrc[k][i] = (c>>8) ^ aLtxCrc[0][c & 0xff];
    }
  }
#ifdef LTX_CRC_CLMUL
  for(i=0; i<4; i++){
    unsigned d = 128*(4-i);
    aLtxFold[2*i] = ltxCrcXPow(d+63);
    aLtxFold[2*i+1] = ltxCrcXPow(d-1);
  }
  __builtin_cpu_init();
  ltxCrcClmul = __builtin_cpu_supports("pclmul")!=0
             && __builtin_cpu_supports("sse2")!=0;
#endif
}

/* The register (not inverted) after n more bytes, slicing-by-8. */
static uint64_t ltxCrcTable(uint64_t crc, const unsigned char *a, size_t n){
  while( n>=8 ){
    crc ^= bytes_get64le(a);
    crc = aLtxCrc[7][crc & 0xff] ^ aLtxCrc[6][(crc>>8) & 0xff]
        ^ aLtxCrc[5][(crc>>16) & 0xff] ^ aLtxCrc[4][(crc>>24) & 0xff]
        ^ aLtxCrc[3][(crc>>32) & 0xff] ^ aLtxCrc[2][(crc>>40) & 0xff]
        ^ aLtxCrc[1][(crc>>48) & 0xff] ^ aLtxCrc[0][crc>>56];
    a += 8;
    n -= 8;
  }
  while( n-- ){
    crc = aLtxCrc[0][(crc ^ *a++) & 0xff] ^ (crc>>8);
  }
  return crc;
}

/* Folding where the CPU can and the input is long enough to pay for it,
** else the tables. */
uint64_t ltx_crc64(uint64_t crc, const void *p, size_t n){
  const unsigned char *a = (const unsigned char*)p;
  pthread_once(&ltxCrcOnce, ltxCrcInit);
#ifdef LTX_CRC_CLMUL
  if( n>=128 && ltxCrcClmul ) return ~ltxCrcFold(~crc, a, n);
#endif
  return ~ltxCrcTable(~crc, a, n);
}

/* ltx_crc64() through the tables only (tests compare the two paths). */
uint64_t ltx_crc64_table(uint64_t crc, const void *p, size_t n){
  pthread_once(&ltxCrcOnce, ltxCrcInit);
  return ~ltxCrcTable(~crc, (const unsigned char*)p, n);
}

/* a*b mod P, both in the reflected form of the tables. */
static uint64_t ltxCrcMul(uint64_t a, uint64_t b){
  uint64_t m = 1ULL<<63, r = 0;
  for(; m && a; m>>=1){
    if( a & m ){
      r ^= b;
      a ^= m;
    }
    b = (b>>1) ^ ((b & 1) ? LTX_CRC_POLY : 0);
  }
  return r;
}

/* x^(8n) mod P: x^(2^k) by squaring for each bit k of 8n. */
static uint64_t ltxCrcBytePow(uint64_t n){
  uint64_t r = 1ULL<<63, p = ltxCrcXPow(8);
  for(; n; n>>=1){
    if( n & 1 ) r = ltxCrcMul(r, p);
    p = ltxCrcMul(p, p);
  }
  return r;
}

uint64_t ltx_crc64_shift(uint64_t nB){
  return ltxCrcBytePow(nB);
}

uint64_t ltx_crc64_combine(uint64_t crcA, uint64_t crcB, uint64_t xShift){
  return ltxCrcMul(crcA, xShift) ^ crcB;
}

static int ltxPageSizeOk(uint32_t sz){
  return sz>=512 && sz<=65536 && (sz & (sz-1))==0;
}

static void ltxEncodeHeader(unsigned char *a, const LtxHeader *p){
  memcpy(a, "DLTX", 4);
  a[4] = 0; a[5] = LTX_VERSION; a[6] = 0; a[7] = 0;
  bytes_put32(a+8, p->szPage);
  bytes_put32(a+12, p->nPage);
  bytes_put64(a+16, p->iMinTxid);
  bytes_put64(a+24, p->iMaxTxid);
  bytes_put64(a+32, p->iTimeMs);
  bytes_put32(a+40, p->nFrame);
  bytes_put32(a+44, 0);
}

/* zstd's parameter "literal compression mode" (ZSTD_c_experimentalParam5,
** ZSTD_c_literalCompressionMode under ZSTD_STATIC_LINKING_ONLY) and its
** value "disable" (ZSTD_ps_disable, formerly ZSTD_lcm_uncompressed). */
#define LTX_ZSTD_LITERAL_MODE     ZSTD_c_experimentalParam5
#define LTX_ZSTD_LITERAL_RAW      2

/* Set pCctx up for frames at iLevel.  Up to LTX_RAW_LITERAL_LEVEL the
** literals are stored raw: on a 4 KiB page zstd's Huffman stage takes
** about 40% of the decoding instructions and 30% of the encoding ones,
** and saves 1-6% of the bytes.  A zstd without the parameter keeps its
** default (the frames are valid either way). */
static int ltxEncodeSetup(ZSTD_CCtx *pCctx, int iLevel){
  size_t r;
  ZSTD_CCtx_reset(pCctx, ZSTD_reset_session_and_parameters);
  r = ZSTD_CCtx_setParameter(pCctx, ZSTD_c_compressionLevel, iLevel);
  if( ZSTD_isError(r) ) return SQLITE_MISUSE;
  if( iLevel<=LTX_RAW_LITERAL_LEVEL ){
    ZSTD_CCtx_setParameter(pCctx, LTX_ZSTD_LITERAL_MODE,
                           LTX_ZSTD_LITERAL_RAW);
  }
  return SQLITE_OK;
}

/* Write one frame for page pgno at a (room for the worst case) and return
** its length, or 0 if zstd failed.  pCctx is set up by ltxEncodeSetup(). */
static size_t ltxEncodeFrame(unsigned char *a, uint32_t pgno,
                             const unsigned char *pPage, uint32_t szPage,
                             ZSTD_CCtx *pCctx, uint64_t iCrc){
  unsigned char *pData = a + LTX_FRAME_HEADER;
  size_t nCap = ZSTD_compressBound(szPage);
  size_t nOut = ZSTD_compress2(pCctx, pData, nCap, pPage, szPage);
  uint32_t flags = LTX_FLAG_ZSTD;
  if( ZSTD_isError(nOut) ) return 0;
  if( nOut > (size_t)szPage - szPage/5 ){
    memcpy(pData, pPage, szPage);
    nOut = szPage;
    flags = 0;
  }
  bytes_put32(a, pgno);
  bytes_put32(a+4, (uint32_t)nOut);
  bytes_put32(a+8, flags);
  bytes_put64(a+12, iCrc);
  return LTX_FRAME_HEADER + nOut;
}

/* Append the index and the trailer after the frames, which end at off;
** return the blob's length. */
static size_t ltxEncodeTail(unsigned char *a, size_t off,
                            const LtxFrameRef *aRef, uint32_t n,
                            uint64_t iPagesCrc, uint64_t iDbChecksum){
  uint32_t i;
  size_t iIdx = off;
  for(i=0; i<n; i++){
    bytes_put32(a+off+8*i, aRef[i].pgno);
    bytes_put32(a+off+8*i+4, aRef[i].iOffset);
  }
  off += 8*(size_t)n;
  bytes_put32(a+off, (uint32_t)iIdx);
  bytes_put32(a+off+4, n);
  bytes_put64(a+off+8, iPagesCrc);
  bytes_put64(a+off+16, iDbChecksum);
  bytes_put64(a+off+24, ltx_crc64(0, a, off+24));
  return off + LTX_TRAILER_SIZE;
}

int ltx_encode(const LtxHeader *pHdr, const uint32_t *aPgno,
               const unsigned char *const *apPage, uint64_t iDbChecksum,
               ZSTD_CCtx *pCctx, int iLevel, unsigned char **ppBlob,
               int64_t *pnBlob, LtxFrameRef *aRef){
  uint32_t i, n = pHdr->nFrame, sz = pHdr->szPage;
  uint64_t nCap, iPagesCrc = 0, xPage;
  unsigned char *a;
  size_t off = LTX_HEADER_SIZE;
  *ppBlob = 0;
  *pnBlob = 0;
  if( !ltxPageSizeOk(sz) ) return SQLITE_MISUSE;
  for(i=1; i<n; i++) if( aPgno[i]<=aPgno[i-1] ) return SQLITE_MISUSE;
  nCap = LTX_HEADER_SIZE + LTX_TRAILER_SIZE
       + (uint64_t)n*(LTX_FRAME_HEADER + ZSTD_compressBound(sz)
                      + LTX_INDEX_ENTRY);
  if( nCap > 0xffffffffULL ) return SQLITE_TOOBIG;
  if( ltxEncodeSetup(pCctx, iLevel)!=SQLITE_OK ) return SQLITE_MISUSE;
  a = sqlite3_malloc64(nCap);
  if( a==0 ) return SQLITE_NOMEM;
  ltxEncodeHeader(a, pHdr);
  xPage = ltx_crc64_shift(sz);
  for(i=0; i<n; i++){
    uint64_t c = ltx_crc64(0, apPage[i], sz);
    size_t nFrame = ltxEncodeFrame(a+off, aPgno[i], apPage[i], sz, pCctx,
                                   c);
    if( nFrame==0 ){ sqlite3_free(a); return SQLITE_NOMEM; }
    aRef[i].pgno = aPgno[i];
    aRef[i].iOffset = (uint32_t)off;
    aRef[i].nByte = (uint32_t)nFrame;
    aRef[i].iCrc = c;
    iPagesCrc = ltx_crc64_combine(iPagesCrc, c, xPage);
    off += nFrame;
  }
  *ppBlob = a;
  *pnBlob = (int64_t)ltxEncodeTail(a, off, aRef, n, iPagesCrc, iDbChecksum);
  return SQLITE_OK;
}

/* Frames [iFrom, iTo) of an encode on worker threads: written one after
** the other from the start of the range's worst-case room in the blob
** (ltxSlot() a frame), so only the bytes they take are touched, with
** their position, length and CRC in aRef; nFail counts frames zstd failed
** on. */
typedef struct LtxWork LtxWork;
struct LtxWork {
  const uint32_t *aPgno;
  const unsigned char *const *apPage;
  uint32_t szPage, iFrom, iTo;
  int iLevel;
  ZSTD_CCtx *pCctx;          /* the caller's for range 0, else NULL (own) */
  unsigned char *a;
  LtxFrameRef *aRef;
  int nFail;
};

static size_t ltxSlot(uint32_t szPage){
  return LTX_FRAME_HEADER + ZSTD_compressBound(szPage);
}

static void *ltxWorkRun(void *pArg){
  LtxWork *w = (LtxWork*)pArg;
  ZSTD_CCtx *pCctx = w->pCctx ? w->pCctx : ZSTD_createCCtx();
  size_t off = LTX_HEADER_SIZE + (size_t)w->iFrom*ltxSlot(w->szPage);
  uint32_t i;
  if( pCctx && ltxEncodeSetup(pCctx, w->iLevel)!=SQLITE_OK ){
    if( pCctx!=w->pCctx ) ZSTD_freeCCtx(pCctx);
    pCctx = 0;                     /* every frame of the range fails */
  }
  for(i=w->iFrom; i<w->iTo; i++){
    unsigned char *pFrame = w->a + off;
    uint64_t c = ltx_crc64(0, w->apPage[i], w->szPage);
    size_t nFrame = pCctx ? ltxEncodeFrame(pFrame, w->aPgno[i], w->apPage[i],
                                           w->szPage, pCctx, c)
                          : 0;
    if( nFrame==0 ) w->nFail++;
    w->aRef[i].pgno = w->aPgno[i];
    w->aRef[i].iOffset = (uint32_t)off;
    w->aRef[i].nByte = (uint32_t)nFrame;
    w->aRef[i].iCrc = c;
    off += nFrame;
  }
  if( pCctx!=w->pCctx ) ZSTD_freeCCtx(pCctx);
  return 0;
}

int ltx_encode_threads(const LtxHeader *pHdr, const uint32_t *aPgno,
                       const unsigned char *const *apPage,
                       uint64_t iDbChecksum, ZSTD_CCtx *pCctx, int iLevel,
                       int nThread, unsigned char **ppBlob, int64_t *pnBlob,
                       LtxFrameRef *aRef){
  LtxWork aW[LTX_MAX_THREADS+1];
  pthread_t aTid[LTX_MAX_THREADS+1];
  int abTid[LTX_MAX_THREADS+1];
  uint32_t i, n = pHdr->nFrame, sz = pHdr->szPage, nPer;
  uint64_t nCap, iPagesCrc = 0, xPage;
  unsigned char *a;
  size_t off = LTX_HEADER_SIZE;
  int k, nW, nFail = 0;
  if( nThread>LTX_MAX_THREADS ) nThread = LTX_MAX_THREADS;
  if( nThread<=0 || n<LTX_MIN_THREAD_FRAMES*2 ){
    return ltx_encode(pHdr, aPgno, apPage, iDbChecksum, pCctx, iLevel, ppBlob,
                      pnBlob, aRef);
  }
  *ppBlob = 0;
  *pnBlob = 0;
  if( !ltxPageSizeOk(sz) ) return SQLITE_MISUSE;
  for(i=1; i<n; i++) if( aPgno[i]<=aPgno[i-1] ) return SQLITE_MISUSE;
  nCap = LTX_HEADER_SIZE + LTX_TRAILER_SIZE
       + (uint64_t)n*(ltxSlot(sz) + LTX_INDEX_ENTRY);
  if( nCap > 0xffffffffULL ) return SQLITE_TOOBIG;
  a = sqlite3_malloc64(nCap);
  if( a==0 ) return SQLITE_NOMEM;
  ltxEncodeHeader(a, pHdr);
  /* range 0 on this thread with pCctx, ranges 1..nThread on workers */
  nW = nThread+1;
  if( (uint32_t)nW > n/LTX_MIN_THREAD_FRAMES ) nW = (int)(n/LTX_MIN_THREAD_FRAMES);
  nPer = (n + (uint32_t)nW - 1)/(uint32_t)nW;
  for(k=0; k<nW; k++){
    memset(&aW[k], 0, sizeof(aW[k]));
    aW[k].aPgno = aPgno;
    aW[k].apPage = apPage;
    aW[k].szPage = sz;
    aW[k].iFrom = (uint32_t)k*nPer < n ? (uint32_t)k*nPer : n;
    aW[k].iTo = aW[k].iFrom+nPer < n ? aW[k].iFrom+nPer : n;
    aW[k].iLevel = iLevel;
    aW[k].pCctx = k==0 ? pCctx : 0;
    aW[k].a = a;
    aW[k].aRef = aRef;
    abTid[k] = k>0 && pthread_create(&aTid[k], 0, ltxWorkRun, &aW[k])==0;
  }
  for(k=0; k<nW; k++) if( !abTid[k] ) ltxWorkRun(&aW[k]);
  for(k=0; k<nW; k++){
    if( abTid[k] ) pthread_join(aTid[k], 0);
    nFail += aW[k].nFail;
  }
  xPage = ltx_crc64_shift(sz);
  for(i=0; i<n; i++){
    iPagesCrc = ltx_crc64_combine(iPagesCrc, aRef[i].iCrc, xPage);
  }
  if( nFail ){
    sqlite3_free(a);
    return SQLITE_NOMEM;
  }
  /* move the frames down after each other, in order (never forward) */
  for(i=0; i<n; i++){
    memmove(a+off, a+aRef[i].iOffset, aRef[i].nByte);
    aRef[i].iOffset = (uint32_t)off;
    off += aRef[i].nByte;
  }
  *ppBlob = a;
  *pnBlob = (int64_t)ltxEncodeTail(a, off, aRef, n, iPagesCrc, iDbChecksum);
  return SQLITE_OK;
}

static int ltxCorrupt(char **pzErr, const char *zMsg, uint64_t v){
  if( pzErr ){
    sqlite3_free(*pzErr);
    *pzErr = sqlite3_mprintf("depot: corrupt page blob: %s (%llu)", zMsg,
                             (unsigned long long)v);
  }
  return SQLITE_CORRUPT;
}

int ltx_decode_header(const unsigned char *a, int64_t n, LtxHeader *pHdr,
                      char **pzErr){
  if( n<LTX_HEADER_SIZE ) return ltxCorrupt(pzErr, "short header", n);
  if( memcmp(a, "DLTX", 4)!=0 ) return ltxCorrupt(pzErr, "bad magic", 0);
  if( a[4]!=0 || a[5]!=LTX_VERSION ){
    return ltxCorrupt(pzErr, "unknown format version", a[4]*256+a[5]);
  }
  pHdr->szPage = bytes_get32(a+8);
  pHdr->nPage = bytes_get32(a+12);
  pHdr->iMinTxid = bytes_get64(a+16);
  pHdr->iMaxTxid = bytes_get64(a+24);
  pHdr->iTimeMs = bytes_get64(a+32);
  pHdr->nFrame = bytes_get32(a+40);
  if( !ltxPageSizeOk(pHdr->szPage) ){
    return ltxCorrupt(pzErr, "bad page size", pHdr->szPage);
  }
  if( pHdr->iMinTxid>pHdr->iMaxTxid || pHdr->iMinTxid==0 ){
    return ltxCorrupt(pzErr, "bad txid range", pHdr->iMinTxid);
  }
  if( a[6] || a[7] || bytes_get32(a+44) ){
    return ltxCorrupt(pzErr, "unknown flags", bytes_get32(a+44));
  }
  return SQLITE_OK;
}

int ltx_decode_frame(const unsigned char *a, int64_t n, uint32_t pgno,
                     uint32_t szPage, ZSTD_DCtx *pDctx, unsigned char *pOut,
                     uint64_t *piCrc, char **pzErr){
  uint32_t nStored, flags;
  uint64_t iCrc;
  if( n<LTX_FRAME_HEADER ) return ltxCorrupt(pzErr, "short frame", n);
  if( bytes_get32(a)!=pgno ){
    return ltxCorrupt(pzErr, "frame holds another page", bytes_get32(a));
  }
  nStored = bytes_get32(a+4);
  flags = bytes_get32(a+8);
  iCrc = bytes_get64(a+12);
  if( (int64_t)nStored > n-LTX_FRAME_HEADER || (flags & ~LTX_FLAG_ZSTD) ){
    return ltxCorrupt(pzErr, "frame length or flags out of range", nStored);
  }
  if( flags & LTX_FLAG_ZSTD ){
    size_t r = ZSTD_decompressDCtx(pDctx, pOut, szPage, a+LTX_FRAME_HEADER,
                                   nStored);
    if( ZSTD_isError(r) || r!=szPage ){
      return ltxCorrupt(pzErr, "zstd frame does not decode to a page", pgno);
    }
  }else{
    if( nStored!=szPage ) return ltxCorrupt(pzErr, "raw frame size", nStored);
    memcpy(pOut, a+LTX_FRAME_HEADER, szPage);
  }
  if( ltx_crc64(0, pOut, szPage)!=iCrc ){
    return ltxCorrupt(pzErr, "page checksum mismatch", pgno);
  }
  if( piCrc ) *piCrc = iCrc;
  return SQLITE_OK;
}

/* The trailer and whole-blob CRC; returns the index offset in *piIdx. */
static int ltxCheckTrailer(const unsigned char *a, int64_t n,
                           const LtxHeader *pHdr, LtxTrailer *pT,
                           uint32_t *piIdx, char **pzErr){
  const unsigned char *t;
  uint32_t iIdx;
  if( n < LTX_HEADER_SIZE+LTX_TRAILER_SIZE ){
    return ltxCorrupt(pzErr, "blob too short", n);
  }
  t = a + n - LTX_TRAILER_SIZE;
  if( ltx_crc64(0, a, n-8)!=bytes_get64(t+24) ){
    return ltxCorrupt(pzErr, "blob checksum mismatch", n);
  }
  iIdx = bytes_get32(t);
  if( bytes_get32(t+4)!=pHdr->nFrame
   || (int64_t)iIdx + 8*(int64_t)pHdr->nFrame != n-LTX_TRAILER_SIZE
   || iIdx<LTX_HEADER_SIZE ){
    return ltxCorrupt(pzErr, "index does not fit the blob", iIdx);
  }
  pT->iPagesCrc = bytes_get64(t+8);
  pT->iDbChecksum = bytes_get64(t+16);
  *piIdx = iIdx;
  return SQLITE_OK;
}

/* Every index entry must point at the next frame in sequence. */
static int ltxCheckFrames(const unsigned char *a, uint32_t iIdx,
                          const LtxHeader *pHdr, ZSTD_DCtx *pDctx,
                          uint64_t *piPagesCrc, char **pzErr){
  unsigned char *pPage = sqlite3_malloc64(pHdr->szPage);
  uint32_t i, off = LTX_HEADER_SIZE, prev = 0;
  uint64_t c = 0;
  int rc = SQLITE_OK;
  if( pPage==0 ) return SQLITE_NOMEM;
  for(i=0; rc==SQLITE_OK && i<pHdr->nFrame; i++){
    uint32_t pgno = bytes_get32(a+iIdx+8*i);
    if( bytes_get32(a+iIdx+8*i+4)!=off || pgno<=prev || off>=iIdx ){
      rc = ltxCorrupt(pzErr, "index entry out of order", i);
      break;
    }
    rc = ltx_decode_frame(a+off, iIdx-off, pgno, pHdr->szPage, pDctx, pPage,
                          0, pzErr);
    if( rc==SQLITE_OK ){
      c = ltx_crc64(c, pPage, pHdr->szPage);
      off += LTX_FRAME_HEADER + bytes_get32(a+off+4);
      prev = pgno;
    }
  }
  if( rc==SQLITE_OK && off!=iIdx ) rc = ltxCorrupt(pzErr, "gap before index", off);
  sqlite3_free(pPage);
  *piPagesCrc = c;
  return rc;
}

int ltx_verify(const unsigned char *a, int64_t n, ZSTD_DCtx *pDctx,
               LtxHeader *pHdr, LtxTrailer *pTrailer, char **pzErr){
  LtxHeader h;
  LtxTrailer t;
  uint32_t iIdx = 0;
  uint64_t c = 0;
  int rc = ltx_decode_header(a, n, &h, pzErr);
  if( rc==SQLITE_OK ) rc = ltxCheckTrailer(a, n, &h, &t, &iIdx, pzErr);
  if( rc==SQLITE_OK ) rc = ltxCheckFrames(a, iIdx, &h, pDctx, &c, pzErr);
  if( rc==SQLITE_OK && c!=t.iPagesCrc ){
    rc = ltxCorrupt(pzErr, "pages checksum mismatch", c);
  }
  if( rc==SQLITE_OK ){
    if( pHdr ) *pHdr = h;
    if( pTrailer ) *pTrailer = t;
  }
  return rc;
}
