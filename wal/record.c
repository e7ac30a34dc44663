/*
** record.c -- WAL records: the builder the KV engine fills, the frame that
** goes to disk, the bounds-checked decoder that replay and the fuzz target
** use, and CRC32C.
**
** Record body (all integers unsigned LEB128 varints unless noted):
**
**     cid  tid  nTable
**     nTable times:  nName  name-bytes  nAction (u32 little-endian)
**                    nAction times:  kind (1 byte: 0 put, 1 delete)
**                                    nKey key-bytes
**                                    [nVal val-bytes]    -- put only
**
** An abort record (a prepared root rolled back after its record was
** written) has its own CID, the TID of the root, no tables, and then:
**
**     0x01 (the abort tag)  cidAborted
**
** cidAborted is the CID of the record it withdraws, below its own CID.
** Records written before abort records existed never have bytes after
** their tables, so they decode exactly as before; a reader that predates
** the tag rejects an abort record as malformed (a log holding one must be
** opened by this or a later version).
**
** Frame: u32 LE body length, u32 LE CRC32C of (the 4 length bytes + body),
** then the body.  Table names are 1..WAL_MAX_BODY bytes; keys and values
** may be empty.  The builder keeps everything after nTable, so the CID can
** be assigned at append time without re-encoding.
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <pthread.h>
#include <string.h>

/* ---------------------------------------------------------------- bytes */

static int recVarintLen(uint64_t v){
  int n = 1;
  while( v>=0x80 ){ v >>= 7; n++; }
  return n;
}
static size_t recPutVarint(uint8_t *a, uint64_t v){
  size_t n = 0;
  while( v>=0x80 ){ a[n++] = (uint8_t)(v|0x80); v >>= 7; }
  a[n++] = (uint8_t)v;
  return n;
}

/* Reads a varint at a[*pi] (n bytes in a).  0 on success, 1 if it runs
** past the end, is longer than 10 bytes or overflows 64 bits. */
static int recGetVarint(const uint8_t *a, size_t n, size_t *pi,
                        uint64_t *pv){
  uint64_t v = 0;
  size_t i = *pi;
  int shift;
  for(shift=0; shift<64; shift+=7){
    uint8_t c;
    if( i>=n ) return 1;
    c = a[i++];
    if( shift==63 && (c & 0x7e) ) return 1;
    v |= (uint64_t)(c & 0x7f) << shift;
    if( (c & 0x80)==0 ){ *pi = i; *pv = v; return 0; }
  }
  return 1;
}

/* -------------------------------------------------------------- builder */

typedef struct RecName RecName;
struct RecName { size_t off; int n; };  /* a table name inside a[] */

struct WalRecordBuilder {
  uint64_t tid;
  uint8_t *a;               /* tables and actions, encoded */
  size_t n;                 /* bytes used in a[] */
  size_t nAlloc;            /* bytes allocated for a[] */
  RecName *aName;           /* every table started, in order */
  int nTable;
  int nNameAlloc;
  size_t iCount;            /* offset of the current table's u32 count */
  uint32_t nAction;         /* actions of the current table so far */
  int bAbort;               /* an abort record: takes no table */
};

WalRecordBuilder *wal_record_new(uint64_t tid){
  WalRecordBuilder *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  p->tid = tid;
  return p;
}

WalRecordBuilder *wal_record_abort_new(uint64_t tid, uint64_t cidAborted){
  WalRecordBuilder *p;
  if( cidAborted==0 ) return 0;
  p = wal_record_new(tid);
  if( p==0 ) return 0;
  p->a = sqlite3_malloc64(11);
  if( p->a==0 ){ sqlite3_free(p); return 0; }
  p->nAlloc = 11;
  p->a[0] = WAL_ABORT_TAG;
  p->n = 1 + recPutVarint(p->a+1, cidAborted);
  p->bAbort = 1;
  return p;
}

int wal_record_is_abort(const WalRecordBuilder *p){
  return p ? p->bAbort : 0;
}

void wal_record_free(WalRecordBuilder *p){
  if( p==0 ) return;
  sqlite3_free(p->a);
  sqlite3_free(p->aName);
  sqlite3_free(p);
}

int wal_record_ntable(const WalRecordBuilder *p){
  return p ? p->nTable : 0;
}

/* Makes room for nMore bytes; SQLITE_TOOBIG past the record size limit. */
static int recReserve(WalRecordBuilder *p, size_t nMore){
  size_t nNew;
  uint8_t *aNew;
  /* 3 varints of <=10 bytes precede a[] in the body */
  if( nMore > WAL_MAX_BODY - 30 - p->n ) return SQLITE_TOOBIG;
  if( p->n + nMore <= p->nAlloc ) return SQLITE_OK;
  nNew = p->nAlloc ? p->nAlloc*2 : 256;
  while( nNew < p->n + nMore ) nNew *= 2;
  aNew = sqlite3_realloc64(p->a, nNew);
  if( aNew==0 ) return SQLITE_NOMEM;
  p->a = aNew;
  p->nAlloc = nNew;
  return SQLITE_OK;
}

static int recHasTable(const WalRecordBuilder *p, const char *z, int n){
  int i;
  for(i=0; i<p->nTable; i++){
    if( p->aName[i].n==n && memcmp(p->a+p->aName[i].off, z, n)==0 ) return 1;
  }
  return 0;
}

int wal_record_table(WalRecordBuilder *p, const char *zTable, int nTable){
  int rc;
  if( p==0 || zTable==0 || nTable<=0 || p->bAbort ) return SQLITE_MISUSE;
  if( recHasTable(p, zTable, nTable) ) return SQLITE_MISUSE;
  if( p->nTable==p->nNameAlloc ){
    int nNew = p->nNameAlloc ? p->nNameAlloc*2 : 8;
    RecName *aNew = sqlite3_realloc64(p->aName, sizeof(RecName)*nNew);
    if( aNew==0 ) return SQLITE_NOMEM;
    p->aName = aNew;
    p->nNameAlloc = nNew;
  }
  rc = recReserve(p, (size_t)nTable + 10 + 4);
  if( rc!=SQLITE_OK ) return rc;
  p->n += recPutVarint(p->a+p->n, (uint64_t)nTable);
  p->aName[p->nTable].off = p->n;
  p->aName[p->nTable].n = nTable;
  memcpy(p->a+p->n, zTable, nTable);
  p->n += nTable;
  p->iCount = p->n;
  wal_put_u32(p->a+p->n, 0);
  p->n += 4;
  p->nAction = 0;
  p->nTable++;
  return SQLITE_OK;
}

int wal_record_action(WalRecordBuilder *p, int bDelete,
                      const void *aKey, int nKey,
                      const void *aVal, int nVal){
  int rc;
  size_t nNeed;
  if( p==0 || p->nTable==0 || nKey<0 || (nKey>0 && aKey==0) ){
    return SQLITE_MISUSE;
  }
  if( !bDelete && (nVal<0 || (nVal>0 && aVal==0)) ) return SQLITE_MISUSE;
  if( p->nAction==UINT32_MAX ) return SQLITE_TOOBIG;
  nNeed = 1 + 10 + (size_t)nKey + (bDelete ? 0 : 10 + (size_t)nVal);
  rc = recReserve(p, nNeed);
  if( rc!=SQLITE_OK ) return rc;
  p->a[p->n++] = bDelete ? 1 : 0;
  p->n += recPutVarint(p->a+p->n, (uint64_t)nKey);
  if( nKey ) memcpy(p->a+p->n, aKey, nKey);
  p->n += nKey;
  if( !bDelete ){
    p->n += recPutVarint(p->a+p->n, (uint64_t)nVal);
    if( nVal ) memcpy(p->a+p->n, aVal, nVal);
    p->n += nVal;
  }
  p->nAction++;
  wal_put_u32(p->a+p->iCount, p->nAction);
  return SQLITE_OK;
}

/* ---------------------------------------------------------------- frame */

static size_t recBodySize(const WalRecordBuilder *p, uint64_t cid){
  return recVarintLen(cid) + recVarintLen(p->tid)
       + recVarintLen((uint64_t)p->nTable) + p->n;
}

size_t wal_frame_size(const WalRecordBuilder *p, uint64_t cid){
  return WAL_FRAME_HDR + recBodySize(p, cid);
}

void wal_frame_encode(const WalRecordBuilder *p, uint64_t cid,
                      uint8_t *aOut){
  size_t nBody = recBodySize(p, cid);
  uint8_t *b = aOut + WAL_FRAME_HDR;
  size_t i = 0;
  uint32_t crc;
  i += recPutVarint(b+i, cid);
  i += recPutVarint(b+i, p->tid);
  i += recPutVarint(b+i, (uint64_t)p->nTable);
  if( p->n ) memcpy(b+i, p->a, p->n);
  wal_put_u32(aOut, (uint32_t)nBody);
  crc = wal_crc32c(0, aOut, 4);
  crc = wal_crc32c(crc, b, nBody);
  wal_put_u32(aOut+4, crc);
}

const char *wal_frame_length(const uint8_t *aHdr, uint64_t nAvail,
                             size_t *pnBody){
  uint32_t n = wal_get_u32(aHdr);
  if( n==0 ) return "zero record length";
  if( n>WAL_MAX_BODY ) return "record length over the limit";
  if( n>nAvail ) return "record runs past the end of the file";
  *pnBody = n;
  return 0;
}

int wal_frame_crc_ok(const uint8_t *aHdr, const uint8_t *aBody,
                     size_t nBody){
  uint32_t crc = wal_crc32c(0, aHdr, 4);
  crc = wal_crc32c(crc, aBody, nBody);
  return crc==wal_get_u32(aHdr+4);
}

/* --------------------------------------------------------------- decode */

/* Parse state shared by the counting pass and the filling pass. */
typedef struct RecParse RecParse;
struct RecParse {
  const uint8_t *a;
  size_t n;
  size_t i;
  WalRecord *pRec;          /* NULL during the counting pass */
  WalAction *aNext;         /* next free action slot (filling pass) */
  uint64_t nActTotal;       /* actions seen (counting pass) */
};

/* A length-prefixed byte string at the cursor; 1 if it does not fit. */
static int recGetBytes(RecParse *r, const uint8_t **pa, int *pn){
  uint64_t n;
  if( recGetVarint(r->a, r->n, &r->i, &n) ) return 1;
  if( n > r->n - r->i || n > INT32_MAX ) return 1;
  *pa = r->a + r->i;
  *pn = (int)n;
  r->i += (size_t)n;
  return 0;
}

static int recParseAction(RecParse *r, WalAction *pAct){
  const uint8_t *aKey, *aVal = 0;
  int nKey, nVal = 0, kind;
  if( r->i >= r->n ) return 1;
  kind = r->a[r->i++];
  if( kind!=0 && kind!=1 ) return 1;
  if( recGetBytes(r, &aKey, &nKey) ) return 1;
  if( kind==0 && recGetBytes(r, &aVal, &nVal) ) return 1;
  if( pAct ){
    pAct->bDelete = kind;
    pAct->aKey = aKey; pAct->nKey = nKey;
    pAct->aVal = aVal; pAct->nVal = nVal;
  }
  return 0;
}

static int recParseTable(RecParse *r, WalTableActions *pTab){
  const uint8_t *aName;
  int nName;
  uint32_t nAct, k;
  if( recGetBytes(r, &aName, &nName) || nName==0 ) return 1;
  if( r->n - r->i < 4 ) return 1;
  nAct = wal_get_u32(r->a + r->i);
  r->i += 4;
  if( nAct > (r->n - r->i)/2 ) return 1;   /* an action is >= 2 bytes */
  if( pTab ){
    pTab->zTable = (const char*)aName;
    pTab->nTable = nName;
    pTab->nAction = (int)nAct;
    pTab->aAction = nAct ? r->aNext : 0;
  }
  for(k=0; k<nAct; k++){
    if( recParseAction(r, pTab ? r->aNext++ : 0) ) return 1;
  }
  r->nActTotal += nAct;
  return 0;
}

/* The tail of an abort record after its (zero) table count: the tag and
** the CID it withdraws, which must be below the record's own CID. */
static int recParseAbort(RecParse *r, uint64_t cid, uint64_t *pAborted){
  if( r->a[r->i++]!=WAL_ABORT_TAG ) return 1;
  if( recGetVarint(r->a, r->n, &r->i, pAborted) ) return 1;
  return (*pAborted==0 || *pAborted>=cid) ? 1 : 0;
}

/* One full pass over the body.  1 on any malformation. */
static int recParse(RecParse *r, uint64_t *pCid, uint64_t *pTid,
                    uint64_t *pnTable, uint64_t *pAborted){
  uint64_t nTable, t;
  *pAborted = 0;
  r->i = 0;
  r->nActTotal = 0;
  if( recGetVarint(r->a, r->n, &r->i, pCid) || *pCid==0 ) return 1;
  if( recGetVarint(r->a, r->n, &r->i, pTid) ) return 1;
  if( recGetVarint(r->a, r->n, &r->i, &nTable) ) return 1;
  if( nTable > (r->n - r->i)/6 ) return 1;  /* a table is >= 6 bytes */
  for(t=0; t<nTable; t++){
    if( recParseTable(r, r->pRec ? &r->pRec->aTable[t] : 0) ) return 1;
  }
  *pnTable = nTable;
  if( nTable==0 && r->i<r->n && recParseAbort(r, *pCid, pAborted) ) return 1;
  return r->i==r->n ? 0 : 1;
}

int wal_record_decode(const uint8_t *aBody, size_t nBody, WalRecord **ppRec){
  RecParse r;
  uint64_t cid, tid, nTable, cidAborted;
  WalRecord *pRec;
  size_t nByte;
  *ppRec = 0;
  if( aBody==0 || nBody==0 || nBody>WAL_MAX_BODY ) return SQLITE_CORRUPT;
  memset(&r, 0, sizeof(r));
  r.a = aBody;
  r.n = nBody;
  if( recParse(&r, &cid, &tid, &nTable, &cidAborted) ) return SQLITE_CORRUPT;
  nByte = sizeof(WalRecord) + nTable*sizeof(WalTableActions)
        + r.nActTotal*sizeof(WalAction);
  pRec = sqlite3_malloc64(nByte);
  if( pRec==0 ) return SQLITE_NOMEM;
  memset(pRec, 0, nByte);
  pRec->cid = cid;
  pRec->tid = tid;
  pRec->nTable = (int)nTable;
  pRec->cidAborted = cidAborted;
  pRec->aTable = nTable ? (WalTableActions*)&pRec[1] : 0;
  r.pRec = pRec;
  /* Not &pRec->aTable[nTable]: aTable is NULL for a record of no tables. */
  r.aNext = (WalAction*)((WalTableActions*)&pRec[1] + nTable);
  if( recParse(&r, &cid, &tid, &nTable, &cidAborted) ){
    sqlite3_free(pRec);       /* cannot happen: same bytes as pass one */
    return SQLITE_CORRUPT;
  }
  *ppRec = pRec;
  return SQLITE_OK;
}

/* ---------------------------------------------------------------- CRC32C */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The SSE4.2 crc32 instruction computes CRC-32C itself: 8 bytes per
** instruction over the bulk (unaligned loads cost nothing extra on x86,
** and the short records read most often would spend more on a bytewise
** run up to an 8-byte boundary), then 4, 2 and 1 bytes.  Only called when
** the CPU has it (crcHave, set once by crcInit). */
#define WAL_CRC_HW 1
__attribute__((target("sse4.2")))
static uint32_t crcHw(uint32_t crc, const uint8_t *a, size_t n){
  uint64_t c = ~crc;
  while( n>=8 ){
    uint64_t v;
    memcpy(&v, a, 8);
    c = __builtin_ia32_crc32di(c, v);
    a += 8;
    n -= 8;
  }
  if( n>=4 ){
    uint32_t v;
    memcpy(&v, a, 4);
    c = __builtin_ia32_crc32si((uint32_t)c, v);
    a += 4;
    n -= 4;
  }
  if( n>=2 ){
    uint16_t v;
    memcpy(&v, a, 2);
    c = __builtin_ia32_crc32hi((uint32_t)c, v);
    a += 2;
    n -= 2;
  }
  if( n>0 ) c = __builtin_ia32_crc32qi((uint32_t)c, *a);
  return ~(uint32_t)c;
}
static int crcHave = 0;
#endif

static uint32_t aCrcTable[8][256];
static pthread_once_t crcOnce = PTHREAD_ONCE_INIT;
static int crcReady = 0;           /* crcInit has run (acquire/release) */

static void crcInit(void){
  uint32_t i, j, c;
#ifdef WAL_CRC_HW
  __builtin_cpu_init();
  crcHave = __builtin_cpu_supports("sse4.2")!=0;
#endif
  for(i=0; i<256; i++){
    c = i;
    for(j=0; j<8; j++) c = (c>>1) ^ (0x82F63B78u & (0u - (c & 1)));
    aCrcTable[0][i] = c;
  }
  for(i=0; i<256; i++){
    c = aCrcTable[0][i];
    for(j=1; j<8; j++){
      c = aCrcTable[0][c & 0xff] ^ (c>>8);
      aCrcTable[j][i] = c;
    }
  }
  __atomic_store_n(&crcReady, 1, __ATOMIC_RELEASE);
}

#ifdef DEPOT_TEST
int wal_crc32c_test_table(int bOn){
  pthread_once(&crcOnce, crcInit);
#ifdef WAL_CRC_HW
  crcHave = bOn ? 0 : __builtin_cpu_supports("sse4.2")!=0;
  return __builtin_cpu_supports("sse4.2")!=0;
#else
  (void)bOn;
  return 0;
#endif
}
#endif

/* The hardware instruction where the CPU has one; else slicing-by-8 over
** the bulk, bytewise at both ends. */
uint32_t wal_crc32c(uint32_t crc, const void *p, size_t n){
  const uint8_t *a = (const uint8_t*)p;
  if( !__atomic_load_n(&crcReady, __ATOMIC_ACQUIRE) ){
    pthread_once(&crcOnce, crcInit);
  }
#ifdef WAL_CRC_HW
  if( crcHave ) return crcHw(crc, a, n);
#endif
  crc = ~crc;
  while( n>0 && ((uintptr_t)a & 7) ){
    crc = aCrcTable[0][(crc ^ *a++) & 0xff] ^ (crc>>8);
    n--;
  }
  while( n>=8 ){
    uint32_t lo = crc ^ wal_get_u32(a);
    uint32_t hi = wal_get_u32(a+4);
    crc = aCrcTable[7][lo & 0xff] ^ aCrcTable[6][(lo>>8) & 0xff]
        ^ aCrcTable[5][(lo>>16) & 0xff] ^ aCrcTable[4][lo>>24]
        ^ aCrcTable[3][hi & 0xff] ^ aCrcTable[2][(hi>>8) & 0xff]
        ^ aCrcTable[1][(hi>>16) & 0xff] ^ aCrcTable[0][hi>>24];
    a += 8;
    n -= 8;
  }
  while( n>0 ){
    crc = aCrcTable[0][(crc ^ *a++) & 0xff] ^ (crc>>8);
    n--;
  }
  return ~crc;
}
