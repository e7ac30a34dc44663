/*
** ltx.h -- the page-blob codec of vfs/ (private to vfs/ and its tests).
**
** One depot commit stores its dirty pages as one blob in an LTX-like format
** (all integers big-endian):
**
**   header   48 bytes  "DLTX", format version u16 (1), flags u16 (0),
**                      page size u32, database size in pages after the
**                      commit u32, min txid u64, max txid u64, wall-clock
**                      time in ms u64 (informational), frame count u32,
**                      reserved u32 (0)
**   frames   per page, ascending page number: pgno u32, stored length u32,
**                      flags u32 (bit 0: zstd frame; else raw page),
**                      CRC-64 of the uncompressed page u64, stored bytes
**   index    per frame: pgno u32, offset of the frame from the blob start u32
**   trailer  32 bytes  index offset u32, frame count u32, CRC-64 over the
**                      uncompressed pages in frame order u64, post-apply
**                      database checksum u64, CRC-64 of every byte before
**                      this field u64
**
** A page is stored raw when zstd saves less than about 20%.  Frames of
** levels up to LTX_RAW_LITERAL_LEVEL keep zstd's literals raw (no Huffman
** stage: cheaper to encode and decode); any zstd decoder reads both.  Readers that
** know a frame's offset (the page index rows carry it) decode that frame
** alone and check it against its own CRC; ltx_verify() checks a whole blob.
** Every decoder bounds-checks against the given length: corrupt input gives
** SQLITE_CORRUPT and a message, never a crash or an unbounded allocation.
*/
#ifndef DEPOT_LTX_H
#define DEPOT_LTX_H

#include <stdint.h>
#include <zstd.h>

#include "vfs/store/bytes.h"

#define LTX_HEADER_SIZE   48
#define LTX_FRAME_HEADER  20
#define LTX_INDEX_ENTRY    8
#define LTX_TRAILER_SIZE  32
#define LTX_VERSION        1
#define LTX_FLAG_ZSTD      0x01
#define LTX_RAW_LITERAL_LEVEL 3

typedef struct LtxHeader LtxHeader;
struct LtxHeader {
  uint32_t szPage;          /* 512..65536, a power of two */
  uint32_t nPage;           /* database size in pages after this blob */
  uint64_t iMinTxid;
  uint64_t iMaxTxid;
  uint64_t iTimeMs;
  uint32_t nFrame;
};

typedef struct LtxTrailer LtxTrailer;
struct LtxTrailer {
  uint64_t iPagesCrc;       /* CRC-64 over the uncompressed pages */
  uint64_t iDbChecksum;     /* XOR of the CRC-64 of every database page */
};

/* Where one page's frame sits in a blob (what a page index row records). */
typedef struct LtxFrameRef LtxFrameRef;
struct LtxFrameRef {
  uint32_t pgno;
  uint32_t iOffset;         /* from the start of the blob */
  uint32_t nByte;           /* frame header + stored bytes */
  uint64_t iCrc;            /* CRC-64 of the uncompressed page */
};

/* CRC-64/XZ (ECMA-182 polynomial, reflected).  Start with crc 0; feed the
** previous result to continue over more bytes.  Carry-less multiplication
** (PCLMULQDQ, checked for at run time) over inputs of 128 bytes and more
** where the CPU has it, else slicing-by-8 tables; both give the same
** result.  ltx_crc64_table() always uses the tables (for tests). */
uint64_t ltx_crc64(uint64_t crc, const void *p, size_t n);
uint64_t ltx_crc64_table(uint64_t crc, const void *p, size_t n);

/* The CRC-64 of A followed by B from the CRC-64 of each (crcA, crcB) and
** xShift = ltx_crc64_shift(length of B in bytes), without reading either:
** a multiplication mod P.  A blob's CRC over all its pages comes from the
** pages' own CRCs this way. */
uint64_t ltx_crc64_shift(uint64_t nB);
uint64_t ltx_crc64_combine(uint64_t crcA, uint64_t crcB, uint64_t xShift);

/* Encode pHdr->nFrame pages (aPgno ascending, apPage[i] szPage bytes
** each) with the trailer's checksum iDbChecksum.  pCctx is a zstd context
** reused across calls (level iLevel; its parameters are reset).  On SQLITE_OK *ppBlob is a
** sqlite3_malloc'd blob of *pnBlob bytes and aRef[i] (caller-allocated,
** nFrame entries) describes frame i.  SQLITE_NOMEM, SQLITE_TOOBIG (blob over
** 4 GiB) or SQLITE_MISUSE (unsorted pages, bad page size) otherwise. */
int ltx_encode(const LtxHeader *pHdr, const uint32_t *aPgno,
               const unsigned char *const *apPage, uint64_t iDbChecksum,
               ZSTD_CCtx *pCctx, int iLevel, unsigned char **ppBlob,
               int64_t *pnBlob, LtxFrameRef *aRef);

/* ltx_encode() with the frames compressed on nThread worker threads as
** well as the calling one (at most LTX_MAX_THREADS; 0, or fewer than
** 2*LTX_MIN_THREAD_FRAMES frames: ltx_encode() itself).  Each frame is
** compressed on its own at level iLevel, so the blob is byte for byte the
** one ltx_encode() gives, whatever the thread count.  Each worker makes
** and frees a zstd context of its own; a thread that cannot be started
** leaves its frames to the caller's thread.  Same results and errors. */
#define LTX_MAX_THREADS 64
#define LTX_MIN_THREAD_FRAMES 64
int ltx_encode_threads(const LtxHeader *pHdr, const uint32_t *aPgno,
                       const unsigned char *const *apPage,
                       uint64_t iDbChecksum, ZSTD_CCtx *pCctx, int iLevel,
                       int nThread, unsigned char **ppBlob, int64_t *pnBlob,
                       LtxFrameRef *aRef);

/* Decode and check the 48-byte header at a[0..n).  SQLITE_CORRUPT with
** *pzErr (sqlite3_malloc'd) on a bad magic, version or field. */
int ltx_decode_header(const unsigned char *a, int64_t n, LtxHeader *pHdr,
                      char **pzErr);

/* Decode the frame at a[0..n) (n may exceed the frame) for page pgno into
** pOut (szPage bytes), checking the page number, the lengths and the
** frame's CRC-64, which is returned in *piCrc if not NULL.  SQLITE_CORRUPT
** with *pzErr on any mismatch. */
int ltx_decode_frame(const unsigned char *a, int64_t n, uint32_t pgno,
                     uint32_t szPage, ZSTD_DCtx *pDctx, unsigned char *pOut,
                     uint64_t *piCrc, char **pzErr);

/* Check a whole blob: header, trailer, the whole-blob CRC, the index
** against the frames, every frame, and the pages CRC.  Fills *pHdr and
** *pTrailer (either may be NULL).  SQLITE_CORRUPT with *pzErr on any
** problem, SQLITE_NOMEM. */
int ltx_verify(const unsigned char *a, int64_t n, ZSTD_DCtx *pDctx,
               LtxHeader *pHdr, LtxTrailer *pTrailer, char **pzErr);

#endif /* DEPOT_LTX_H */
