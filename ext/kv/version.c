/*
** version.c -- key versions of KV tables: the per-table version maps,
** their publication at commit (the engine's hook) with the recording of
** receipts, first observations by kv_version_query(), and version TTL: a
** per-table FIFO of key tokens and a sweeper thread per store.  The
** versioned prepare and commit are in vertxn.c; the rules are in kv.h.
**
** A table's versions are a hash table of records (KvVerRec), one
** allocation per key: the key, its version (KV_VERSION_BYTES), the
** record's stamp (monotonic ms of its last first observation or commit
** publication) and its lease end (monotonic ms).  Both are 0 while TTL is
** off.  The lease end is the stamp plus the TTL in force at that moment:
** lowering the TTL later does not shorten it, so whoever first observed a
** version (or got it in a receipt) may present it in a read set for the
** whole TTL it was given.  The sweeper removes a record once both its
** lease and the current TTL (counted from the stamp) are over.  Nothing
** needs the versions in key order and nothing shares them, so a lookup is
** one hash and a short chain, and a new version overwrites its record in
** place.  The slot array doubles when the records outnumber the slots and
** halves when they fall below an eighth of them.
** With TTL on, every record has exactly one token (a copy of its key) in
** its table's FIFO: queued when the record is inserted, freed when the
** sweeper removes the record.  Extra memory is O(live records).
**
** Locking: the engine mutex guards the maps, FIFOs and ttl; the counters
** read by kv_metrics are relaxed atomics.  KvVerStore.mu guards the
** sweeper's stop flag and poll interval and is never held while taking
** the engine mutex.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "ext/kv/kv_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KV_SWEEP_BATCH      256
#define KV_VER_TOKEN_BYTES  16     /* token header */
#define KV_TTL_MAX_MS       (INT64_C(1)<<40)
#define KV_VER_MIN_SLOTS    16

typedef struct KvVerToken KvVerToken;
struct KvVerToken {
  KvVerToken *pNext;
  int nKey;
  uint8_t aKey[1];
};

/* The version record of one key. */
typedef struct KvVerRec KvVerRec;
struct KvVerRec {
  KvVerRec *pNext;               /* next record of its hash slot */
  uint64_t h;                    /* verHash of aKey */
  int64_t iStamp;                /* last first observation or publication */
  int64_t iLease;                /* lease end */
  int nKey;
  uint8_t aVer[KV_VERSION_BYTES];
  uint8_t aKey[1];               /* nKey bytes */
};

struct KvVerTable {
  KvVerRec **aSlot;              /* nSlot chains; NULL when no records */
  uint32_t nSlot;                /* 0 or a power of two */
  KvVerToken *pHead, *pTail;     /* the TTL FIFO */
  int64_t nRecord;               /* atomic */
  int64_t nByte;                 /* atomic */
};

struct KvVerStore {
  uint64_t iEpoch;
  uint64_t iHashSeed;            /* of verHash, new at every open */
  int64_t ttlMs;                 /* engine mutex */
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int64_t pollMs;                /* mu */
  int bStop;                     /* mu */
  pthread_mutex_t cfgMu;         /* serialises kv_version_configure */
  int bThread;                   /* a sweeper runs (cfgMu) */
  pthread_t thread;
  /* The query snapshot (engine mutex): the backend snapshot the last
  ** kv_version_query took, of table pSnapTab (referenced), at commit
  ** sequence iSnapSeq.  Reused while nothing was published since; dropped
  ** at the start of every publication (so no backend keeps an old version
  ** alive, or copies on write, because of it). */
  KvTable *pSnapTab;
  KvBackendSnap *pSnap;
  uint64_t iSnapSeq;
};

static int64_t verNowMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

/* ------------------------------------------------------------ format --- */

static void verPut64(uint8_t *a, uint64_t v){
  int i;
  for(i=7; i>=0; i--){ a[i] = (uint8_t)v; v >>= 8; }
}

static void verMake(uint8_t *aVer, int bDelete, uint64_t hi, uint64_t lo){
  aVer[0] = bDelete ? 'd' : 'u';
  verPut64(aVer+1, hi);
  verPut64(aVer+9, lo);
}

/* Two lowercase hex digits per byte value, for rendering. */
static const char verHexPair[] =
  "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
  "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f"
  "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
  "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f"
  "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
  "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
  "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
  "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";

/* The value of a hex digit (either case) by character, -1 for others. */
static const signed char verHexValue[256] = {
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
   0,  1,  2,  3,  4,  5,  6,  7,  8,  9, -1, -1, -1, -1, -1, -1,
  -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};

/* 16 bytes -> 32 hex digits at z (unrolled: every versioned key renders
** one or two). */
static void verHex(const uint8_t *a, char *z){
#define KV_HEX2(i) memcpy(&z[2*(i)], &verHexPair[2*a[i]], 2)
  KV_HEX2(0);  KV_HEX2(1);  KV_HEX2(2);  KV_HEX2(3);
  KV_HEX2(4);  KV_HEX2(5);  KV_HEX2(6);  KV_HEX2(7);
  KV_HEX2(8);  KV_HEX2(9);  KV_HEX2(10); KV_HEX2(11);
  KV_HEX2(12); KV_HEX2(13); KV_HEX2(14); KV_HEX2(15);
#undef KV_HEX2
}

/* 32 hex digits at z -> 16 bytes; 0 if one is not a digit (unrolled:
** every key of a read set has its version parsed). */
static int verUnhex(const char *z, uint8_t *a){
  int bad = 0;
#define KV_UNHEX2(i) do{ \
    int h = verHexValue[(unsigned char)z[2*(i)]]; \
    int l = verHexValue[(unsigned char)z[2*(i)+1]]; \
    bad |= h | l;                  /* negative if either is not a digit */ \
    a[i] = (uint8_t)(((unsigned)h<<4) | (unsigned)l); \
  }while(0)
  KV_UNHEX2(0);  KV_UNHEX2(1);  KV_UNHEX2(2);  KV_UNHEX2(3);
  KV_UNHEX2(4);  KV_UNHEX2(5);  KV_UNHEX2(6);  KV_UNHEX2(7);
  KV_UNHEX2(8);  KV_UNHEX2(9);  KV_UNHEX2(10); KV_UNHEX2(11);
  KV_UNHEX2(12); KV_UNHEX2(13); KV_UNHEX2(14); KV_UNHEX2(15);
#undef KV_UNHEX2
  return bad>=0;
}

void kv_version_text(const uint8_t *aVer, char *z){
  z[0] = (char)aVer[0];
  z[1] = ':';
  verHex(aVer+1, z+2);
  z[KV_VERSION_TEXT] = 0;
}

int kv_version_parse(const char *z, int n, uint8_t *aVer){
  if( n!=KV_VERSION_TEXT || (z[0]!='u' && z[0]!='d') || z[1]!=':' ){
    return SQLITE_ERROR;
  }
  aVer[0] = (uint8_t)z[0];
  return verUnhex(z+2, aVer+1) ? SQLITE_OK : SQLITE_ERROR;
}

/* ------------------------------------------------------------ tables --- */

/* The estimated memory of a record: its allocation, one hash slot (the
** slots number between one and eight per record) and its token. */
static int64_t verRecordBytes(int nKey, int bToken){
  return (int64_t)offsetof(KvVerRec, aKey) + nKey + (int64_t)sizeof(void*)
       + (bToken ? nKey + KV_VER_TOKEN_BYTES : 0);
}

/* A 64-bit hash of key bytes (its low bits pick the slot), seeded per
** open of the store (KvVerStore.iHashSeed), so that which keys share a
** slot cannot be worked out ahead of time to make long chains. */
static uint64_t verHash(uint64_t iSeed, const uint8_t *a, int n){
  uint64_t h = iSeed ^ (uint64_t)n;
  uint64_t w;
  while( n>=8 ){
    memcpy(&w, a, 8);
    h = (h ^ w) * UINT64_C(0xbf58476d1ce4e5b9);
    h ^= h >> 31;
    a += 8;
    n -= 8;
  }
  if( n>0 ){
    w = 0;
    memcpy(&w, a, (size_t)n);
    h = (h ^ w) * UINT64_C(0x94d049bb133111eb);
  }
  h ^= h >> 29;
  h *= UINT64_C(0xbf58476d1ce4e5b9);
  h ^= h >> 32;
  return h;
}

static KvVerRec *verFind(const KvVerTable *v, const uint8_t *aKey,
                           int nKey, uint64_t h){
  KvVerRec *r;
  if( v->nSlot==0 ) return 0;
  for(r=v->aSlot[h & (v->nSlot-1)]; r; r=r->pNext){
    if( r->h==h && r->nKey==nKey && memcmp(r->aKey, aKey, nKey)==0 ){
      return r;
    }
  }
  return 0;
}

/* Move every record to a new array of nNew slots.  Without memory the
** records stay where they are (longer chains, still correct). */
static void verResize(KvVerTable *v, uint32_t nNew){
  KvVerRec **a = sqlite3_malloc64((sqlite3_uint64)nNew*sizeof(KvVerRec*));
  uint32_t i;
  if( a==0 ) return;
  memset(a, 0, (size_t)nNew*sizeof(KvVerRec*));
  for(i=0; i<v->nSlot; i++){
    KvVerRec *r, *pNext;
    for(r=v->aSlot[i]; r; r=pNext){
      pNext = r->pNext;
      r->pNext = a[r->h & (nNew-1)];
      a[r->h & (nNew-1)] = r;
    }
  }
  sqlite3_free(v->aSlot);
  v->aSlot = a;
  v->nSlot = nNew;
}

/* A new record of aKey (absent), version and times unset; NULL on OOM.
** The caller counts it (verCount). */
static KvVerRec *verInsert(KvVerTable *v, const uint8_t *aKey, int nKey,
                             uint64_t h){
  int64_t nRec = __atomic_load_n(&v->nRecord, __ATOMIC_RELAXED);
  KvVerRec *r;
  if( v->nSlot==0 ) verResize(v, KV_VER_MIN_SLOTS);
  else if( nRec>=(int64_t)v->nSlot && v->nSlot<(UINT32_C(1)<<30) ){
    verResize(v, v->nSlot*2);
  }
  if( v->nSlot==0 ) return 0;
  r = sqlite3_malloc64(offsetof(KvVerRec, aKey) + (size_t)nKey);
  if( r==0 ) return 0;
  r->h = h;
  r->nKey = nKey;
  memcpy(r->aKey, aKey, (size_t)nKey);
  r->pNext = v->aSlot[h & (v->nSlot-1)];
  v->aSlot[h & (v->nSlot-1)] = r;
  return r;
}

/* Unlink and free record r; the caller uncounts it, then calls
** verShrink. */
static void verDelete(KvVerTable *v, KvVerRec *r){
  KvVerRec **pp = &v->aSlot[r->h & (v->nSlot-1)];
  while( *pp!=r ) pp = &(*pp)->pNext;
  *pp = r->pNext;
  sqlite3_free(r);
}

/* Halve the slots while the records fall below an eighth of them. */
static void verShrink(KvVerTable *v){
  int64_t nRec = __atomic_load_n(&v->nRecord, __ATOMIC_RELAXED);
  uint32_t nNew = v->nSlot;
  while( nNew>KV_VER_MIN_SLOTS && nRec*8<(int64_t)nNew ) nNew /= 2;
  if( nNew!=v->nSlot ) verResize(v, nNew);
}

static void verCount(KvVerTable *v, int64_t nRec, int64_t nByte){
  __atomic_fetch_add(&v->nRecord, nRec, __ATOMIC_RELAXED);
  __atomic_fetch_add(&v->nByte, nByte, __ATOMIC_RELAXED);
}

static void verTokensFree(KvVerTable *v){
  while( v->pHead ){
    KvVerToken *t = v->pHead;
    v->pHead = t->pNext;
    sqlite3_free(t);
  }
  v->pTail = 0;
}

/* Drop every record and token of table t (engine mutex held). */
static void verTableClear(KvVerTable *v){
  uint32_t i;
  verTokensFree(v);
  for(i=0; i<v->nSlot; i++){
    while( v->aSlot[i] ){
      KvVerRec *r = v->aSlot[i];
      v->aSlot[i] = r->pNext;
      sqlite3_free(r);
    }
  }
  sqlite3_free(v->aSlot);
  v->aSlot = 0;
  v->nSlot = 0;
  __atomic_store_n(&v->nRecord, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&v->nByte, 0, __ATOMIC_RELAXED);
}

/* KvTable.xVerFree: free t->pVer (the table's last reference is gone). */
static void verTableFree(KvTable *t){
  if( t->pVer==0 ) return;
  verTableClear(t->pVer);
  sqlite3_free(t->pVer);
  t->pVer = 0;
}

void kvVersionTableStats(KvTable *t, int64_t *pnRec, int64_t *pnByte){
  KvVerTable *v = t->pVer;
  *pnRec = v ? __atomic_load_n(&v->nRecord, __ATOMIC_RELAXED) : 0;
  *pnByte = v ? __atomic_load_n(&v->nByte, __ATOMIC_RELAXED) : 0;
}

static KvVerTable *verTable(KvTable *t){
  if( t->pVer==0 ){
    t->pVer = sqlite3_malloc64(sizeof(KvVerTable));
    if( t->pVer ) memset(t->pVer, 0, sizeof(KvVerTable));
    t->xVerFree = verTableFree;
  }
  return t->pVer;
}

static void verTokenPush(KvVerTable *v, KvVerToken *k){
  k->pNext = 0;
  if( v->pTail ) v->pTail->pNext = k; else v->pHead = k;
  v->pTail = k;
}

static int verTokenQueue(KvVerTable *v, const uint8_t *aKey, int nKey){
  KvVerToken *k = sqlite3_malloc64(sizeof(*k) + nKey);
  if( k==0 ) return SQLITE_NOMEM;
  k->nKey = nKey;
  memcpy(k->aKey, aKey, nKey);
  verTokenPush(v, k);
  return SQLITE_OK;
}

/* Give aKey version aVer, stamped now (engine mutex held): in its record
** r, or in a new one when r is NULL (the key has none; h is its hash).  A
** new record gets its token when TTL is on.  Replacing never allocates
** and never fails; on a failed insert no record is left for aKey, so
** nobody can validate against a stale version. */
static int verPut(KvEngine *pEng, KvVerTable *v, KvVerRec *r,
                    const uint8_t *aKey, int nKey, uint64_t h,
                    const uint8_t *aVer){
  int64_t ttl = pEng->pVer->ttlMs;
  int64_t now = ttl>0 ? verNowMs() : 0;
  if( r==0 ){
    if( (r = verInsert(v, aKey, nKey, h))==0 ) return SQLITE_NOMEM;
    if( ttl>0 && verTokenQueue(v, aKey, nKey)!=SQLITE_OK ){
      verDelete(v, r);
      return SQLITE_NOMEM;
    }
    verCount(v, 1, verRecordBytes(nKey, ttl>0));
  }
  memcpy(r->aVer, aVer, KV_VERSION_BYTES);
  r->iStamp = now;
  r->iLease = ttl>0 ? now+ttl : 0;
  return SQLITE_OK;
}

/* --------------------------------------------------------- receipts --- */

/* Record a receipt.  While recording, zTab holds an offset into p->data
** (which moves as it grows); kv_version_commit makes it a pointer.  A table's
** name is stored once per run of its receipts; the key is not copied: it
** points into the committed write set, which the receipts reference. */
static int verReceiptAdd(KvVerReceipts *p, KvTable *t, const uint8_t *aKey,
                        int nKey, const uint8_t *aVer){
  KvVerReceipt *r;
  int rc = SQLITE_OK;
  if( p->n==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    KvVerReceipt *a = sqlite3_realloc64(p->a, nNew*sizeof(*a));
    if( a==0 ) return SQLITE_NOMEM;
    p->a = a;
    p->nAlloc = nNew;
  }
  if( p->pLastTab!=(const void*)t ){
    p->iLastTab = p->data.n;
    p->pLastTab = t;
    rc = kv_buf_append(&p->data, t->zName, t->nName+1);    /* with NUL */
  }
  if( rc!=SQLITE_OK ) return rc;
  r = &p->a[p->n];
  r->zTab = (const char*)(intptr_t)p->iLastTab;
  r->nTab = t->nName;
  r->aKey = aKey;
  r->nKey = nKey;
  memcpy(r->aVer, aVer, KV_VERSION_BYTES);
  p->n++;
  return SQLITE_OK;
}

#ifdef DEPOT_TEST
static int verReceiptFault = 0;     /* kv_engine_test_fault_receipt */
static int verReceiptFaultDup = 0;

void kv_engine_test_fault_receipt(int n, int bDup){
  __atomic_store_n(&verReceiptFaultDup, bDup, __ATOMIC_SEQ_CST);
  __atomic_store_n(&verReceiptFault, n, __ATOMIC_SEQ_CST);
}
#endif /* DEPOT_TEST */

/* Record the receipt of one published write, unless the test hook says
** to lose it or to record it twice. */
static int verReceiptRecord(KvVerReceipts *p, KvTable *t, const uint8_t *aKey,
                           int nKey, const uint8_t *aVer){
  int rc = SQLITE_OK;
#ifdef DEPOT_TEST
  int bFault = __atomic_load_n(&verReceiptFault, __ATOMIC_SEQ_CST)>0
      && __atomic_sub_fetch(&verReceiptFault, 1, __ATOMIC_SEQ_CST)==0;
  if( bFault && !__atomic_load_n(&verReceiptFaultDup, __ATOMIC_SEQ_CST) ){
    return SQLITE_OK;
  }
  if( bFault ) rc = verReceiptAdd(p, t, aKey, nKey, aVer);
#endif
  if( rc==SQLITE_OK ) rc = verReceiptAdd(p, t, aKey, nKey, aVer);
  return rc;
}

/* ------------------------------------------------------- publication --- */

/* Publish one write of root p (engine mutex held).  An ordinary root only
** updates records that exist: a key without a record gets a first
** observation when it is next queried, and a read set naming a version
** that has no record is a mismatch. */
static void verPublishOne(KvRoot *p, KvVerTable *v, KvTable *t,
                         const KvMapEntry *e, uint8_t *aVer){
  uint64_t h = verHash(p->pEng->pVer->iHashSeed, e->aKey, e->nKey);
  KvVerRec *r = verFind(v, e->aKey, e->nKey, h);
  int rc;
  if( p->eProto!=KV_PROTO_VERSIONED && r==0 ) return;
  aVer[0] = e->bTomb ? 'd' : 'u';          /* the kind; the id is the root's */
  rc = verPut(p->pEng, v, r, e->aKey, e->nKey, h, aVer);
  if( p->pReceipts && p->pReceipts->rc==SQLITE_OK ){
    if( rc==SQLITE_OK ){
      rc = verReceiptRecord(p->pReceipts, t, e->aKey, e->nKey, aVer);
    }
    p->pReceipts->rc = rc;
  }
}

int kvVersionPublish(KvRoot *p, KvTable *t, KvMap *pWrite){
  KvMapCursor *pCsr;
  KvMapEntry e;
  KvVerTable *v = t->pVer;
  uint8_t aVer[KV_VERSION_BYTES];
  int bOn;
  if( p->eProto!=KV_PROTO_VERSIONED
   && (v==0 || __atomic_load_n(&v->nRecord, __ATOMIC_RELAXED)==0) ){
    return SQLITE_OK;
  }
  verMake(aVer, 0, p->pEng->pVer->iEpoch, p->tid);
  v = verTable(t);
  pCsr = v ? kv_map_cursor_new(pWrite) : 0;
  if( pCsr==0 ){
    /* No memory: the versions of these keys cannot be recorded, so drop
    ** their old records; the receipts check reports the loss. */
    if( v ) verTableClear(v);
    if( p->pReceipts ) p->pReceipts->rc = SQLITE_NOMEM;
    return SQLITE_OK;
  }
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn;
      bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    verPublishOne(p, v, t, &e, aVer);
  }
  kv_map_cursor_free(pCsr);
  return SQLITE_OK;
}

void kvVersionForeign(KvEngine *pEng, KvTable *t, const uint8_t *aKey,
                      int nKey, int bDelete){
  KvVerTable *v = t->pVer;
  uint8_t aVer[KV_VERSION_BYTES];
  uint64_t h;
  KvVerRec *r;
  if( v==0 || __atomic_load_n(&v->nRecord, __ATOMIC_RELAXED)==0 ) return;
  h = verHash(pEng->pVer->iHashSeed, aKey, nKey);
  if( (r = verFind(v, aKey, nKey, h))==0 ) return;
  verMake(aVer, bDelete, pEng->pVer->iEpoch,
          __atomic_fetch_add(&pEng->iNextTid, 1, __ATOMIC_RELAXED));
  aVer[0] = bDelete ? 'd' : 'u';
  if( verPut(pEng, v, r, aKey, nKey, h, aVer)!=SQLITE_OK ){
    verTableClear(v);            /* no memory: every version changes */
  }
}

void kvVersionOfRoot(KvRoot *p, uint8_t *aVer){
  verMake(aVer, 0, p->pEng->pVer->iEpoch, p->tid);
}

int kvVersionIs(KvEngine *pEng, KvTable *t, const uint8_t *aKey, int nKey,
                const uint8_t *aVer){
  uint64_t h;
  KvVerRec *r;
  if( t==0 || t->pVer==0 ) return 0;
  h = verHash(pEng->pVer->iHashSeed, aKey, nKey);
  r = verFind(t->pVer, aKey, nKey, h);
  return r!=0 && memcmp(r->aVer, aVer, KV_VERSION_BYTES)==0;
}

void kvVersionClearAll(KvEngine *pEng){
  KvTable *t;
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; t; t=t->pNext){
    if( t->pVer ) verTableClear(t->pVer);
  }
  pthread_mutex_unlock(&pEng->mutex);
}

/* kvVersionClearAll with the engine mutex held (a read-only process
** that skipped records it cannot read). */
void kvVersionClearLocked(KvEngine *pEng){
  KvTable *t;
  for(t=pEng->pTables; t; t=t->pNext){
    if( t->pVer ) verTableClear(t->pVer);
  }
}

/* ------------------------------------------------------------- query --- */

/* Under the engine mutex: the value and the version of aKey in t. */
static int verQueryLocked(KvEngine *pEng, KvTable *t, const uint8_t *aKey,
                         int nKey, KvBackendSnap *pSnap, KvBuf *pVal,
                         int *pbFound, uint8_t *aVer){
  KvMapEntry e;
  KvVerTable *v;
  KvVerRec *r;
  uint64_t h;
  int rc = t->pBackend->xGet(pSnap, aKey, nKey, pbFound, &e);
  if( rc==SQLITE_OK && *pbFound && e.nVal>=10 && (e.aVal[0] & 0x80)
   && kv_value_expired(e.aVal, e.nVal, kv_clock_ms()) ){
    *pbFound = 0;                  /* expired: absent, as kv_get says */
  }
  if( rc==SQLITE_OK && *pbFound ) rc = kv_buf_append(pVal, e.aVal, e.nVal);
  if( rc!=SQLITE_OK ) return rc;
  if( (v = verTable(t))==0 ) return SQLITE_NOMEM;
  h = verHash(pEng->pVer->iHashSeed, aKey, nKey);
  if( (r = verFind(v, aKey, nKey, h))!=0 ){
    memcpy(aVer, r->aVer, KV_VERSION_BYTES);
    return SQLITE_OK;
  }
  verMake(aVer, !*pbFound, pEng->pVer->iEpoch,
            __atomic_fetch_add(&pEng->iNextTid, 1, __ATOMIC_RELAXED));
  return verPut(pEng, v, 0, aKey, nKey, h, aVer);
}

void kvVersionSnapDrop(KvEngine *pEng){
  KvVerStore *s = pEng->pVer;
  if( s==0 || s->pSnapTab==0 ) return;
  if( s->pSnap ) s->pSnapTab->pBackend->xSnapshotFree(s->pSnap);
  kvTableUnref(s->pSnapTab);
  s->pSnap = 0;
  s->pSnapTab = 0;
}

/* The snapshot of table t's published state for a query (engine mutex):
** the cached one if it is of t and nothing was published since, else a
** new one, cached.  Owned by the store: never freed by the caller. */
static int verQuerySnap(KvEngine *pEng, KvTable *t, KvBackendSnap **ppSnap){
  KvVerStore *s = pEng->pVer;
  int rc;
  if( s->pSnapTab==t && s->iSnapSeq==pEng->iSeq ){
    *ppSnap = s->pSnap;
    return SQLITE_OK;
  }
  kvVersionSnapDrop(pEng);
  rc = t->pBackend->xSnapshot(t->pData, &s->pSnap);
  if( rc!=SQLITE_OK ){ s->pSnap = 0; return rc; }
  s->pSnapTab = t;
  t->nRef++;
  s->iSnapSeq = pEng->iSeq;
  *ppSnap = s->pSnap;
  return SQLITE_OK;
}

int kv_version_query(KvEngine *pEng, const char *zTab, int nTab,
                     const uint8_t *aKey, int nKey, KvBuf *pVal,
                     int *pbFound, uint8_t *aVer, char **pzErr){
  KvBackendSnap *pSnap = 0;
  KvTable *t;
  int rc = kv_name_check(zTab, nTab, pzErr);
  *pbFound = 0;
  kv_buf_reset(pVal);
  if( rc!=SQLITE_OK ) return rc;
  /* One critical section: the snapshot, the value and the version are of
  ** the same published state. */
  pthread_mutex_lock(&pEng->mutex);
  /* A stopped store may hold part of a commit: nobody may read it. */
  rc = kvEngineFailed(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = pEng->xCatchUp(pEng, 0, pzErr);   /* shared */
  t = rc==SQLITE_OK ? kvTableFind(pEng, zTab, nTab) : 0;
  if( t ){
    rc = verQuerySnap(pEng, t, &pSnap);
    if( rc==SQLITE_OK ){
      rc = verQueryLocked(pEng, t, aKey, nKey, pSnap, pVal, pbFound, aVer);
    }
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && t==0 ){
    *pzErr = sqlite3_mprintf("kv: no such table: %.*s (store %s)", nTab, zTab,
                             pEng->zDir ? pEng->zDir : "in memory");
    return SQLITE_ERROR;
  }
  return rc;
}

/* Every key of pList through xRow (engine mutex held). */
static int verQueryListLocked(KvEngine *pEng, KvTable *t, const KvKeyList *pL,
                             KvVerRowFn xRow, void *pArg){
  KvBackendSnap *pSnap = 0;
  KvBuf val = {0, 0, 0};
  uint8_t aVer[KV_VERSION_BYTES];
  int i, bFound, rc = verQuerySnap(pEng, t, &pSnap);
  for(i=0; rc==SQLITE_OK && i<pL->n; i++){
    const uint8_t *aKey = pL->buf.a + pL->aOff[i];
    int nKey = pL->aOff[i+1] - pL->aOff[i];
    kv_buf_reset(&val);
    rc = verQueryLocked(pEng, t, aKey, nKey, pSnap, &val, &bFound, aVer);
    if( rc==SQLITE_OK ){
      rc = xRow(pArg, i, aKey, nKey,
                bFound ? (val.a ? val.a : (uint8_t*)"") : 0, val.n, aVer);
    }
  }
  kv_buf_free(&val);
  return rc;
}

int kv_version_query_list(KvEngine *pEng, const char *zTab, int nTab,
                          const KvKeyList *pList, KvVerRowFn xRow,
                          void *pArg, char **pzErr){
  KvTable *t;
  int rc = kv_name_check(zTab, nTab, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&pEng->mutex);
  rc = kvEngineFailed(pEng, pzErr);      /* see kv_version_query */
  if( rc==SQLITE_OK ) rc = pEng->xCatchUp(pEng, 0, pzErr);   /* shared */
  t = rc==SQLITE_OK ? kvTableFind(pEng, zTab, nTab) : 0;
  if( t ) rc = verQueryListLocked(pEng, t, pList, xRow, pArg);
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && t==0 ){
    *pzErr = sqlite3_mprintf("kv: no such table: %.*s (store %s)", nTab, zTab,
                             pEng->zDir ? pEng->zDir : "in memory");
    return SQLITE_ERROR;
  }
  return rc;
}

/* ---------------------------------------------------------------- TTL --- */

int64_t kvVersionBindStamp(KvEngine *pEng){
  return pEng->pVer && pEng->pVer->ttlMs>0 ? verNowMs() : 0;
}

/* What to do with token k (engine mutex): 0 keep it, 1 remove its record
** (due: its lease and the current TTL from its stamp are both over, in
** whole ms, so never early, and no unfinished transaction bound to the
** table before that end: one that did may have read the version while it
** was live and still present it), 2 drop the token alone (its record is
** gone).  Only the oldest active child matters (t's active list is in
** bind order), so transactions that bound later, as under a busy
** workload, keep nothing that had expired before they began. */
static int verTokenDue(KvEngine *pEng, KvTable *t, KvVerToken *k,
                      KvVerRec **ppRec, int64_t now){
  KvVerRec *r = verFind(t->pVer, k->aKey, k->nKey,
                          verHash(pEng->pVer->iHashSeed, k->aKey, k->nKey));
  int64_t iEnd;
  *ppRec = r;
  if( r==0 ) return 2;
  iEnd = r->iStamp + pEng->pVer->ttlMs;
  if( r->iLease>iEnd ) iEnd = r->iLease;
  if( t->pActFirst && t->pActFirst->iBindMs <= iEnd + 1 ) return 0;
  return now >= iEnd + 1;
}

/* One batch of at most KV_SWEEP_BATCH tokens of table t (engine mutex).
** Kept tokens go back to the FIFO's tail before the batch returns. */
static int verSweepTable(KvEngine *pEng, KvTable *t, int64_t now){
  KvVerTable *v = t->pVer;
  KvVerToken *pKeep = 0, *pKeepTail = 0;
  int i, nRemoved = 0;
  for(i=0; i<KV_SWEEP_BATCH && v->pHead; i++){
    KvVerToken *k = v->pHead;
    KvVerRec *r;
    int eDue;
    v->pHead = k->pNext;
    if( v->pHead==0 ) v->pTail = 0;
    k->pNext = 0;
    eDue = verTokenDue(pEng, t, k, &r, now);
    if( eDue==2 ){
      verCount(v, 0, -(k->nKey + KV_VER_TOKEN_BYTES));
      sqlite3_free(k);
      continue;
    }
    if( eDue==1 ){
      verDelete(v, r);
      verCount(v, -1, -verRecordBytes(k->nKey, 1));
      verShrink(v);
      sqlite3_free(k);
      nRemoved++;
      continue;
    }
    if( pKeepTail ) pKeepTail->pNext = k; else pKeep = k;
    pKeepTail = k;
  }
  for(; pKeep; pKeep=pKeepTail){
    pKeepTail = pKeep->pNext;
    verTokenPush(v, pKeep);
  }
  return nRemoved;
}

/* One sweep round over every table; returns the records removed. */
static int verSweepNow(KvEngine *pEng){
  KvTable *t;
  int nRemoved = 0;
  int64_t now = verNowMs();
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; pEng->pVer->ttlMs>0 && t; t=t->pNext){
    if( t->pVer && t->pVer->pHead ) nRemoved += verSweepTable(pEng, t, now);
  }
  pthread_mutex_unlock(&pEng->mutex);
  return nRemoved;
}

static void *verSweeper(void *pArg){
  KvEngine *pEng = (KvEngine*)pArg;
  KvVerStore *s = pEng->pVer;
  pthread_mutex_lock(&s->mu);
  while( !s->bStop ){
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += s->pollMs/1000;
    ts.tv_nsec += (s->pollMs%1000)*1000000;
    if( ts.tv_nsec>=1000000000 ){ ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    pthread_cond_timedwait(&s->cond, &s->mu, &ts);
    if( s->bStop ) break;
    pthread_mutex_unlock(&s->mu);
    while( verSweepNow(pEng)>0 ){
      pthread_mutex_lock(&s->mu);
      if( s->bStop ){ pthread_mutex_unlock(&s->mu); break; }
      pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static void verSweeperStop(KvVerStore *s){
  if( !s->bThread ) return;
  pthread_mutex_lock(&s->mu);
  s->bStop = 1;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, 0);
  s->bThread = 0;
  s->bStop = 0;
}

/* TTL turned on: stamp every record now, lease it for ttl (or keep the
** longer lease it was given while TTL was on before: turning TTL off and
** on again never shortens a lease), and give it its token.  A table's
** tokens are all made before any of its records changes, so without
** memory its records stay as they were. */
static int verTtlStart(KvEngine *pEng, int64_t ttl){
  KvTable *t;
  int64_t now = verNowMs();
  for(t=pEng->pTables; t; t=t->pNext){
    KvVerTable *v = t->pVer, tmp;
    KvVerToken *k;
    int64_t nByte = 0;
    uint32_t i;
    KvVerRec *r;
    if( v==0 || v->nSlot==0 ) continue;
    memset(&tmp, 0, sizeof(tmp));
    for(i=0; i<v->nSlot; i++){
      for(r=v->aSlot[i]; r; r=r->pNext){
        if( verTokenQueue(&tmp, r->aKey, r->nKey)!=SQLITE_OK ){
          verTokensFree(&tmp);
          return SQLITE_NOMEM;
        }
        nByte += r->nKey + KV_VER_TOKEN_BYTES;
      }
    }
    for(i=0; i<v->nSlot; i++){
      for(r=v->aSlot[i]; r; r=r->pNext){
        r->iStamp = now;
        if( r->iLease<now+ttl ) r->iLease = now+ttl;
      }
    }
    while( (k = tmp.pHead)!=0 ){
      tmp.pHead = k->pNext;
      verTokenPush(v, k);
    }
    verCount(v, 0, nByte);
  }
  pEng->pVer->ttlMs = ttl;
  return SQLITE_OK;
}

/* TTL turned off: drop every token (the records stay). */
static void verTtlStop(KvEngine *pEng){
  KvTable *t;
  for(t=pEng->pTables; t; t=t->pNext){
    KvVerToken *k;
    if( t->pVer==0 ) continue;
    for(k=t->pVer->pHead; k; k=k->pNext){
      verCount(t->pVer, 0, -(k->nKey + KV_VER_TOKEN_BYTES));
    }
    verTokensFree(t->pVer);
  }
  pEng->pVer->ttlMs = 0;
}

/* ms quantisation: (0,1) -> 1, else truncated.  -1 if out of range. */
static int64_t verQuantise(double r){
  if( !(r>=0.0) || r>(double)KV_TTL_MAX_MS ) return -1;
  if( r>0.0 && r<1.0 ) return 1;
  return (int64_t)r;
}

int kv_version_configure(KvEngine *pEng, double rTtl, double rPoll,
                         char **pzErr){
  KvVerStore *s = pEng->pVer;
  int64_t ttl = verQuantise(rTtl), poll = verQuantise(rPoll);
  int rc = SQLITE_OK;
  if( ttl<0 || poll<=0 ){
    *pzErr = sqlite3_mprintf("kv: key_version_ttl_ms must be 0..%lld and "
        "key_version_ttl_poll_ms 1..%lld (milliseconds)",
        (long long)KV_TTL_MAX_MS, (long long)KV_TTL_MAX_MS);
    return SQLITE_RANGE;
  }
  pthread_mutex_lock(&s->cfgMu);
  verSweeperStop(s);
  pthread_mutex_lock(&s->mu);
  s->pollMs = poll;
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_lock(&pEng->mutex);
  if( ttl==0 && s->ttlMs>0 ) verTtlStop(pEng);
  else if( ttl>0 && s->ttlMs==0 ){
    rc = verTtlStart(pEng, ttl);
    if( rc!=SQLITE_OK ) verTtlStop(pEng);    /* no half-queued FIFOs */
  }
  else s->ttlMs = ttl;
  pthread_mutex_unlock(&pEng->mutex);
  if( rc==SQLITE_OK && ttl>0 ){
    if( pthread_create(&s->thread, 0, verSweeper, pEng)!=0 ){
      *pzErr = sqlite3_mprintf("kv: cannot start the version sweeper thread");
      rc = SQLITE_ERROR;
    }else{
      s->bThread = 1;
    }
  }
  pthread_mutex_unlock(&s->cfgMu);
  return rc;
}

void kv_version_options(KvEngine *pEng, int64_t *pTtl, int64_t *pPoll){
  pthread_mutex_lock(&pEng->mutex);
  *pTtl = pEng->pVer->ttlMs;
  pthread_mutex_unlock(&pEng->mutex);
  pthread_mutex_lock(&pEng->pVer->mu);
  *pPoll = pEng->pVer->pollMs;
  pthread_mutex_unlock(&pEng->pVer->mu);
}

/* ------------------------------------------------------------- store --- */

int kvVersionStoreInit(KvEngine *pEng){
  KvVerStore *s = sqlite3_malloc64(sizeof(*s));
  struct timespec ts;
  if( s==0 ) return SQLITE_NOMEM;
  memset(s, 0, sizeof(*s));
  clock_gettime(CLOCK_REALTIME, &ts);
  /* A new epoch per open: versions never match across restarts. */
  s->iEpoch = ((uint64_t)ts.tv_sec<<32) ^ (uint64_t)ts.tv_nsec
            ^ ((uint64_t)getpid()<<16) ^ (uint64_t)(uintptr_t)pEng;
  sqlite3_randomness((int)sizeof(s->iHashSeed), &s->iHashSeed);
  s->iHashSeed ^= s->iEpoch * UINT64_C(0xd6e8feb86659fd93);
  s->pollMs = 1000;
  pthread_mutex_init(&s->mu, 0);
  pthread_mutex_init(&s->cfgMu, 0);
  pthread_cond_init(&s->cond, 0);
  pEng->pVer = s;
  return SQLITE_OK;
}

void kvVersionStoreStop(KvEngine *pEng){
  KvVerStore *s = pEng->pVer;
  if( s==0 ) return;
  verSweeperStop(s);                    /* the last user: no configure runs */
  kvVersionSnapDrop(pEng);             /* before the tables close */
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->cfgMu);
  pthread_cond_destroy(&s->cond);
  sqlite3_free(s);
  pEng->pVer = 0;
}
