/*
** map.c -- the persistent (copy-on-write) ordered map of byte keys (see
** map.h for the contract).
**
** Shape: a B+tree of fan-out KVM_FAN (32).  Chosen over a binary
** persistent tree (AVL, weight-balanced) because a lookup touches about
** log32(n) nodes instead of log2(n): 3-4 node visits for a million keys,
** each a binary search over one contiguous array, so far fewer cache misses;
** and a path copy copies 3-4 nodes.  The price, copying up to 32 pointers
** per copied node, is paid only when a node is shared; transient updates
** (a version and path with reference count 1) change nodes in place.
**
**   KvmEntry  the bytes of one key/value pair, inline in one allocation,
**             immutable once created, reference counted: leaf copies share
**             entries, and kv_map_put_from shares an entry between maps
**             (a write set and the table it commits to).  Separator keys of
**             interior nodes are KvmEntry objects without a value, so a
**             removed or replaced entry's value is never kept alive by a
**             separator.
**   KvmNode   a leaf (aEnt[0..n-1], sorted, with the revision and tombstone
**             flag of each in aRev/aTomb: they belong to the put, not to
**             the bytes) or an interior node (aChild[0..n-1] and
**             aSep[1..n-1]; every key of aChild[i] is >= aSep[i] and
**             < aSep[i+1]).  aPfx holds the first 8 bytes of every key.
**             Atomic reference count: the parents and versions pointing at
**             it.
**   KvMap     a version: root, entry count and byte estimate, and its own
**             atomic reference count (kv_map_ref shares the struct).
**
** Entries in their own allocations rather than packed into the leaf's: a
** packed leaf (an append-only byte area, compacted on growth) gains
** nothing when a snapshot forces path copies, and slows in-place updates,
** which must move the leaf whenever its byte area fills (measured with
** the kv_map_put workload of make bench; docs/PERFORMANCE.md has the
** figures).
** kv_map_put copies the given bytes into the new entry before it changes
** anything, so they may point into the map being updated.
**
** Updates work top-down.  A node is changed in place only when it and
** every node above it on the path has reference count 1; any other node on
** the path is first copied (a copy shares children and entries, which gain
** a reference).  Inserts split a full interior node before descending into
** it and removes refill a small one (borrow from or merge with a sibling)
** before descending into it, so every step leaves a valid tree with the
** same contents, and an allocation failure half-way leaves the version
** unchanged in content.  Non-root nodes hold KVM_MIN..KVM_FAN items.
**
** Memory ordering: increments are relaxed; a decrement is acquire-release
** (not release plus a separate fence, which ThreadSanitizer cannot see) and
** the check for a count of 1 before an in-place change is an acquire load,
** so every read of a node by the threads that held it happens before the
** node is freed or changed.
*/
#include "config.h"
#include "ext/kv/map.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#define KVM_FAN       32
#define KVM_MIN       8       /* fewest items of a non-root node */
#define KVM_MAX_DEPTH 40      /* > any height reachable with int64 counts */

/* Bytes counted per entry beyond its key and value (kv_map_bytes). */
#define KVM_ENTRY_OVERHEAD 48

typedef struct KvmEntry KvmEntry;
typedef struct KvmNode KvmNode;

struct KvmEntry {
  atomic_int nRef;
  int nKey;
  int nVal;
  uint64_t pfx;               /* kvmPrefix() of the key */
  uint8_t a[];                /* nVal value bytes, a NUL, nKey key bytes:
                              ** the value first, so that its address
                              ** finds the entry (kv_map_value_pin) */
};

struct KvmNode {
  atomic_int nRef;
  int bLeaf;
  int n;                      /* entries (leaf) or children (interior) */
  union {
    KvmEntry *aEnt[KVM_FAN];  /* leaf */
    KvmEntry *aSep[KVM_FAN];  /* interior; aSep[0] is unused (NULL) */
  } u;
  union {
    KvmNode *aChild[KVM_FAN]; /* interior */
    uint64_t aRev[KVM_FAN];   /* leaf: revision of entry i */
  } c;
  uint64_t aPfx[KVM_FAN];     /* aPfx[i] == u.aEnt[i]->pfx (0 if NULL) */
  uint8_t aTomb[KVM_FAN];     /* leaf: entry i is a tombstone */
};

struct KvMap {
  atomic_int nRef;
  KvmNode *pRoot;             /* NULL when the map is empty */
  int64_t nEntry;
  int64_t nByte;
};

struct KvMapCursor {
  KvMap *pMap;                /* the version walked (a reference) */
  int nDepth;                 /* levels on the stack; 0: not on an entry */
  KvmNode *apNode[KVM_MAX_DEPTH];
  int aIdx[KVM_MAX_DEPTH];
};

/* ---- reference counts ---- */

static void kvmRef(atomic_int *p){
  atomic_fetch_add_explicit(p, 1, memory_order_relaxed);
}

/* Drop a reference; returns 1 if it was the last (the caller frees). */
static int kvmUnrefLast(atomic_int *p){
  return atomic_fetch_sub_explicit(p, 1, memory_order_acq_rel)==1;
}

/* True if the caller holds the only reference. */
static int kvmUnique(atomic_int *p){
  return atomic_load_explicit(p, memory_order_acquire)==1;
}

/* ---- keys ---- */

/* A key being looked up, with its prefix. */
typedef struct KvmKey KvmKey;
struct KvmKey {
  const uint8_t *a;
  int n;
  uint64_t pfx;
};

/* The first 8 bytes of a key as a big-endian integer, zero-padded.  Two
** keys whose prefixes differ compare as their prefixes do (a zero pad
** sorts like the end of a shorter key); equal prefixes need the full
** comparison.  Nodes keep the prefixes of their keys in an array, so a
** binary search touches the entries themselves only on a tie. */
static uint64_t kvmPrefix(const void *aKey, int nKey){
  const uint8_t *a = (const uint8_t*)aKey;
  uint64_t u = 0;
  int i;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__==__ORDER_LITTLE_ENDIAN__
  if( nKey>=8 ){                        /* one load, one byte swap */
    memcpy(&u, a, 8);
    return __builtin_bswap64(u);
  }
#endif
  for(i=0; i<8; i++) u = (u<<8) | (i<nKey ? a[i] : 0);
  return u;
}

static void kvmKeyInit(KvmKey *pKey, const void *aKey, int nKey){
  pKey->a = (const uint8_t*)aKey;
  pKey->n = nKey;
  pKey->pfx = kvmPrefix(aKey, nKey);
}

/* ---- entries ---- */

static KvmEntry *kvmEntryNew(const void *aKey, int nKey, const void *aVal,
                             int nVal){
  KvmEntry *p;
  if( nKey<0 || nVal<0 ) return 0;
  p = sqlite3_malloc64(sizeof(KvmEntry) + (sqlite3_uint64)nKey + nVal + 1);
  if( p==0 ) return 0;
  p->a[nVal] = 0;               /* the value's terminator (map.h) */
  atomic_init(&p->nRef, 1);
  p->nKey = nKey;
  p->nVal = nVal;
  p->pfx = kvmPrefix(aKey, nKey);
  if( nVal ) memcpy(p->a, aVal, (size_t)nVal);
  if( nKey ) memcpy(p->a + nVal + 1, aKey, (size_t)nKey);
  return p;
}

/* The key bytes of entry p. */
static const uint8_t *kvmKeyOf(const KvmEntry *p){
  return p->a + p->nVal + 1;
}

static void kvmEntryUnref(KvmEntry *p){
  if( p && kvmUnrefLast(&p->nRef) ) sqlite3_free(p);
}

static int64_t kvmEntryBytes(const KvmEntry *p){
  return (int64_t)p->nKey + p->nVal + KVM_ENTRY_OVERHEAD;
}

/* memcmp order, a shorter key before the longer keys it is a prefix of. */
static int kvmCmp(const KvmEntry *p, const KvmKey *pKey){
  int n = p->nKey<pKey->n ? p->nKey : pKey->n;
  int c = n ? memcmp(kvmKeyOf(p), pKey->a, (size_t)n) : 0;
  return c ? c : p->nKey - pKey->n;
}

/* ---- nodes ---- */

/* Compare item i of node p (an entry or a separator) with pKey. */
static int kvmCmpAt(const KvmNode *p, int i, const KvmKey *pKey){
  if( p->aPfx[i]!=pKey->pfx ) return p->aPfx[i]<pKey->pfx ? -1 : 1;
  return kvmCmp(p->u.aEnt[i], pKey);
}

/* Set item i of node p to pE (not releasing the old item). */
static void kvmSlot(KvmNode *p, int i, KvmEntry *pE){
  p->u.aEnt[i] = pE;
  p->aPfx[i] = pE ? pE->pfx : 0;
}

static KvmNode *kvmNodeNew(int bLeaf){
  KvmNode *p = sqlite3_malloc64(sizeof(KvmNode));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  atomic_init(&p->nRef, 1);
  p->bLeaf = bLeaf;
  return p;
}

static void kvmNodeUnref(KvmNode *p);

/* Start loading the reference counts of every item of p: copies and frees
** touch all of them, and entries live in scattered allocations, so issuing
** the loads together overlaps their cache misses. */
static void kvmPrefetchItems(const KvmNode *p){
#if defined(__GNUC__)
  int i;
  for(i=0; i<p->n; i++){
    if( p->bLeaf || i>0 ) __builtin_prefetch(p->u.aEnt[i], 1);
    if( !p->bLeaf ) __builtin_prefetch(p->c.aChild[i], 1);
  }
#else
  (void)p;
#endif
}

static void kvmNodeFree(KvmNode *p){
  int i;
  kvmPrefetchItems(p);
  for(i=0; i<p->n; i++){
    if( p->bLeaf ){
      kvmEntryUnref(p->u.aEnt[i]);
    }else{
      kvmEntryUnref(p->u.aSep[i]);
      kvmNodeUnref(p->c.aChild[i]);
    }
  }
  sqlite3_free(p);
}

static void kvmNodeUnref(KvmNode *p){
  if( p && kvmUnrefLast(&p->nRef) ) kvmNodeFree(p);
}

/* A private copy of p sharing its children and entries. */
static KvmNode *kvmNodeCopy(const KvmNode *p){
  KvmNode *pNew = sqlite3_malloc64(sizeof(KvmNode));
  int i;
  if( pNew==0 ) return 0;
  kvmPrefetchItems(p);
  memcpy(pNew, p, sizeof(*p));
  atomic_init(&pNew->nRef, 1);
  for(i=0; i<p->n; i++){
    if( p->u.aEnt[i] ) kvmRef(&p->u.aEnt[i]->nRef);
    if( !p->bLeaf ) kvmRef(&p->c.aChild[i]->nRef);
  }
  return pNew;
}

/* Make *pp (owned by a writable parent or version) writable: copy it if
** it is shared.  The copy replaces *pp.  SQLITE_OK or SQLITE_NOMEM. */
static int kvmWritable(KvmNode **pp){
  KvmNode *pCopy;
  if( kvmUnique(&(*pp)->nRef) ) return SQLITE_OK;
  pCopy = kvmNodeCopy(*pp);
  if( pCopy==0 ) return SQLITE_NOMEM;
  kvmNodeUnref(*pp);
  *pp = pCopy;
  return SQLITE_OK;
}

/* Index of the first of a[lo..hi) that is >= x, hi if none.  The loop
** runs log2(hi-lo) times whatever the data, and its one data-dependent
** choice compiles to a conditional move: a binary search over a node's
** prefixes costs no branch mispredictions. */
static int kvmPfxBound(const uint64_t *a, int lo, int hi, uint64_t x){
  const uint64_t *b = a + lo;
  int n = hi - lo;
  if( n<=0 ) return lo;
  while( n>1 ){
    int half = n/2;
    b = b[half]<x ? b + half : b;
    n -= half;
  }
  return (int)(b - a) + (*b<x);
}

/* Index of the first item in [lo, hi) of node p that is >= key (bGt:
** > key), hi if none.  The prefixes place the key among the items; only
** items whose prefix equals the key's are compared in full. */
static int kvmSearch(const KvmNode *p, int lo, int hi, const KvmKey *pKey,
                     int bGt){
  int i = kvmPfxBound(p->aPfx, lo, hi, pKey->pfx);
  int j = i;
  while( j<hi && p->aPfx[j]==pKey->pfx ) j++;
  while( i<j ){                       /* the items tied on the prefix */
    int mid = (i+j)/2;
    int c = kvmCmp(p->u.aEnt[mid], pKey);
    if( c<0 || (bGt && c==0) ) i = mid+1; else j = mid;
  }
  return i;
}

/* Index of the first entry of leaf p >= key (bGt: > key). */
static int kvmLeafSearch(const KvmNode *p, const KvmKey *pKey, int bGt){
  return kvmSearch(p, 0, p->n, pKey, bGt);
}

/* Index of the child of interior node p whose range holds key: the one
** before the first separator > key. */
static int kvmChildSearch(const KvmNode *p, const KvmKey *pKey){
  return kvmSearch(p, 1, p->n, pKey, 1) - 1;
}

/* Insert an item at index i of node p, which has room: for an interior
** node the separator pEnt and the child pChild, for a leaf the entry pEnt
** with its revision and tombstone flag. */
static void kvmNodeInsertAt(KvmNode *p, int i, KvmEntry *pEnt,
                            KvmNode *pChild, uint64_t rev, int bTomb){
  int nMove = p->n - i;
  memmove(&p->u.aEnt[i+1], &p->u.aEnt[i], sizeof(KvmEntry*)*nMove);
  memmove(&p->aPfx[i+1], &p->aPfx[i], sizeof(uint64_t)*nMove);
  memmove(&p->c.aRev[i+1], &p->c.aRev[i], sizeof(uint64_t)*nMove);
  memmove(&p->aTomb[i+1], &p->aTomb[i], nMove);
  kvmSlot(p, i, pEnt);
  if( p->bLeaf ){
    p->c.aRev[i] = rev;
    p->aTomb[i] = bTomb ? 1 : 0;
  }else{
    p->c.aChild[i] = pChild;
    p->aTomb[i] = 0;
  }
  p->n++;
}

/* Insert item j of leaf pFrom at index i of leaf p (not changing pFrom). */
static void kvmLeafInsertFrom(KvmNode *p, int i, const KvmNode *pFrom,
                              int j){
  kvmNodeInsertAt(p, i, pFrom->u.aEnt[j], 0, pFrom->c.aRev[j],
                  pFrom->aTomb[j]);
}

/* Remove item i of node p without releasing it. */
static void kvmNodeRemoveAt(KvmNode *p, int i){
  int nMove = p->n - i - 1;
  memmove(&p->u.aEnt[i], &p->u.aEnt[i+1], sizeof(KvmEntry*)*nMove);
  memmove(&p->aPfx[i], &p->aPfx[i+1], sizeof(uint64_t)*nMove);
  memmove(&p->c.aRev[i], &p->c.aRev[i+1], sizeof(uint64_t)*nMove);
  memmove(&p->aTomb[i], &p->aTomb[i+1], nMove);
  p->n--;
  kvmSlot(p, p->n, 0);
  p->c.aRev[p->n] = 0;
  p->aTomb[p->n] = 0;
}

/* ---- versions ---- */

KvMap *kv_map_new(void){
  KvMap *p = sqlite3_malloc64(sizeof(KvMap));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  atomic_init(&p->nRef, 1);
  return p;
}

KvMap *kv_map_ref(KvMap *p){
  if( p ) kvmRef(&p->nRef);
  return p;
}

void kv_map_unref(KvMap *p){
  if( p && kvmUnrefLast(&p->nRef) ){
    kvmNodeUnref(p->pRoot);
    sqlite3_free(p);
  }
}

int64_t kv_map_count(const KvMap *p){
  return p ? p->nEntry : 0;
}

int64_t kv_map_bytes(const KvMap *p){
  return p ? p->nByte : 0;
}

/* The version to update for *ppMap: *ppMap itself when the caller holds
** the only reference, else a new version sharing its root.  *ppOwn is set
** to the new version (to release on failure) or NULL. */
static KvMap *kvmWritableVersion(KvMap *p, KvMap **ppOwn){
  KvMap *pNew;
  *ppOwn = 0;
  if( kvmUnique(&p->nRef) ) return p;
  pNew = kv_map_new();
  if( pNew==0 ) return 0;
  pNew->pRoot = p->pRoot;
  if( pNew->pRoot ) kvmRef(&pNew->pRoot->nRef);
  pNew->nEntry = p->nEntry;
  pNew->nByte = p->nByte;
  *ppOwn = pNew;
  return pNew;
}

/* Finish an update of *ppMap done on pV (see kvmWritableVersion). */
static int kvmFinish(KvMap **ppMap, KvMap *pV, KvMap *pOwn, int rc){
  if( pOwn ){
    if( rc==SQLITE_OK ){
      kv_map_unref(*ppMap);
      *ppMap = pV;
    }else{
      kv_map_unref(pOwn);
    }
  }
  return rc;
}

/* Describe entry i of leaf p in *pOut. */
static void kvmEntryOut(const KvmNode *p, int i, KvMapEntry *pOut){
  const KvmEntry *pE = p->u.aEnt[i];
  pOut->aKey = kvmKeyOf(pE);
  pOut->nKey = pE->nKey;
  pOut->aVal = pE->a;
  pOut->nVal = pE->nVal;
  pOut->rev = p->c.aRev[i];
  pOut->bTomb = p->aTomb[i];
}

/* Start loading every cache line of node p.  A point lookup reads a few
** of them at each level, each read waiting for the one before (the
** header, then the prefixes a binary search visits, then the child or
** entry pointer, the revision and the flag): loading them all at once
** makes a level cost about one wait instead of several. */
static void kvmPrefetchNode(const KvmNode *p){
#if defined(__GNUC__)
  const char *a = (const char*)p;
  size_t i;
#pragma GCC unroll 16
  for(i=0; i<sizeof(*p); i+=64) __builtin_prefetch(a+i);
  __builtin_prefetch(a+sizeof(*p)-1);
#else
  (void)p;
#endif
}

int kv_map_get(const KvMap *p, const void *aKey, int nKey, KvMapEntry *pOut){
  const KvmNode *pNode = p ? p->pRoot : 0;
  KvmKey k;
  int i;
  if( pNode==0 || nKey<0 ) return 0;
  kvmPrefetchNode(pNode);
  kvmKeyInit(&k, aKey, nKey);
  while( !pNode->bLeaf ){
    pNode = pNode->c.aChild[kvmChildSearch(pNode, &k)];
    kvmPrefetchNode(pNode);
  }
  i = kvmLeafSearch(pNode, &k, 0);
  if( i>=pNode->n || kvmCmpAt(pNode, i, &k)!=0 ) return 0;
  if( pOut ) kvmEntryOut(pNode, i, pOut);
  return 1;
}

/* The entry whose value bytes start at aVal (KvmEntry.a). */
static KvmEntry *kvmEntryOfValue(const uint8_t *aVal){
  return (KvmEntry*)(void*)(aVal - offsetof(KvmEntry, a));
}

void kv_map_value_pin(const uint8_t *aVal){
  kvmRef(&kvmEntryOfValue(aVal)->nRef);
}

void kv_map_value_unpin(const uint8_t *aVal){
  kvmEntryUnref(kvmEntryOfValue(aVal));
}

/* ---- insert ---- */

/* Split the full writable node p in two: p keeps the lower half, the new
** node (*ppRight) the upper half, *ppSep is the lower bound of *ppRight
** (a new key-only entry for leaves, the moved separator for interior
** nodes). */
static int kvmSplit(KvmNode *p, int nLeft, KvmNode **ppRight,
                    KvmEntry **ppSep){
  int nRight = p->n - nLeft;
  KvmNode *pR = kvmNodeNew(p->bLeaf);
  KvmEntry *pSep;
  if( pR==0 ) return SQLITE_NOMEM;
  if( p->bLeaf ){
    const KvmEntry *pFirst = p->u.aEnt[nLeft];
    pSep = kvmEntryNew(kvmKeyOf(pFirst), pFirst->nKey, 0, 0);
    if( pSep==0 ){
      sqlite3_free(pR);
      return SQLITE_NOMEM;
    }
  }else{
    pSep = p->u.aSep[nLeft];
  }
  memcpy(pR->c.aRev, &p->c.aRev[nLeft], sizeof(uint64_t)*nRight);
  memset(&p->c.aRev[nLeft], 0, sizeof(uint64_t)*nRight);
  memcpy(pR->aTomb, &p->aTomb[nLeft], nRight);
  memset(&p->aTomb[nLeft], 0, nRight);
  memcpy(pR->u.aEnt, &p->u.aEnt[nLeft], sizeof(KvmEntry*)*nRight);
  memcpy(pR->aPfx, &p->aPfx[nLeft], sizeof(uint64_t)*nRight);
  memset(&p->u.aEnt[nLeft], 0, sizeof(KvmEntry*)*nRight);
  memset(&p->aPfx[nLeft], 0, sizeof(uint64_t)*nRight);
  if( !p->bLeaf ) kvmSlot(pR, 0, 0);
  pR->n = nRight;
  p->n = nLeft;
  *ppRight = pR;
  *ppSep = pSep;
  return SQLITE_OK;
}

/* Split child i of the writable interior node pParent (which has room) if
** the child is full.  The child must be writable. */
static int kvmSplitChild(KvmNode *pParent, int i){
  KvmNode *pRight = 0;
  KvmEntry *pSep = 0;
  int rc;
  if( pParent->c.aChild[i]->n<KVM_FAN ) return SQLITE_OK;
  rc = kvmSplit(pParent->c.aChild[i], pParent->c.aChild[i]->n/2, &pRight,
                &pSep);
  if( rc==SQLITE_OK ) kvmNodeInsertAt(pParent, i+1, pSep, pRight, 0, 0);
  return rc;
}

/* Add a level above the full, writable root of pV: a new interior root
** with the old root split in two below it. */
static int kvmGrowRoot(KvMap *pV){
  KvmNode *pRoot = kvmNodeNew(0);
  int rc;
  if( pRoot==0 ) return SQLITE_NOMEM;
  pRoot->c.aChild[0] = pV->pRoot;
  pRoot->n = 1;
  rc = kvmSplitChild(pRoot, 0);
  if( rc!=SQLITE_OK ){
    sqlite3_free(pRoot);
    return rc;
  }
  pV->pRoot = pRoot;
  return SQLITE_OK;
}

/* Give the writable version pV a writable root and, if the root is an
** interior node, room for one more child in it. */
static int kvmRootRoom(KvMap *pV){
  int rc;
  if( pV->pRoot==0 ){
    pV->pRoot = kvmNodeNew(1);
    return pV->pRoot ? SQLITE_OK : SQLITE_NOMEM;
  }
  rc = kvmWritable(&pV->pRoot);
  if( rc!=SQLITE_OK || pV->pRoot->n<KVM_FAN || pV->pRoot->bLeaf ) return rc;
  return kvmGrowRoot(pV);
}

/* What a put writes: an entry (key and value bytes, the reference to it
** passing to the map on success), its revision and tombstone flag. */
typedef struct KvmItem KvmItem;
struct KvmItem {
  KvmEntry *pEnt;
  KvmKey key;                 /* the entry's key */
  uint64_t rev;
  int bTomb;
  int *pbAdded;               /* not NULL: keep an existing entry, say so */
  KvMapOld *pOld;             /* not NULL: report the replaced entry */
};

/* Put pEnt into the writable leaf p, child iChild of the writable interior
** node pParent, which has room for one more child (pParent is NULL when p
** is the root).  Consumes pEnt on success. */
static int kvmLeafPut(KvMap *pV, KvmNode *pParent, int iChild, KvmNode *p,
                      const KvmItem *pItem){
  const KvmKey *pKey = &pItem->key;
  int i = kvmLeafSearch(p, pKey, 0);
  int rc;
  if( i<p->n && kvmCmpAt(p, i, pKey)==0 ){
    if( pItem->pbAdded ){
      *pItem->pbAdded = 0;
      kvmEntryUnref(pItem->pEnt);
      return SQLITE_OK;
    }
    if( pItem->pOld ){
      KvMapOld *pOld = pItem->pOld;
      KvmEntry *pE = p->u.aEnt[i];
      int n = pE->nVal<pOld->nBuf ? pE->nVal : pOld->nBuf;
      pOld->bFound = 1;
      pOld->bTomb = p->aTomb[i];
      pOld->rev = p->c.aRev[i];
      pOld->nVal = pE->nVal;
      if( n>0 ) memcpy(pOld->aBuf, pE->a, (size_t)n);
    }
    pV->nByte += kvmEntryBytes(pItem->pEnt) - kvmEntryBytes(p->u.aEnt[i]);
    kvmEntryUnref(p->u.aEnt[i]);
    p->u.aEnt[i] = pItem->pEnt;
    p->c.aRev[i] = pItem->rev;
    p->aTomb[i] = pItem->bTomb ? 1 : 0;
    return SQLITE_OK;
  }
  if( p->n==KVM_FAN ){
    KvmNode *pRight = 0;
    KvmEntry *pSep = 0;
    if( pParent==0 ){                 /* a full root leaf: grow a level */
      rc = kvmGrowRoot(pV);
      if( rc!=SQLITE_OK ) return rc;
      pParent = pV->pRoot;
      iChild = kvmChildSearch(pParent, pKey);
      return kvmLeafPut(pV, pParent, iChild, pParent->c.aChild[iChild], pItem);
    }
    /* An append to the last leaf of its parent (keys arriving in order)
    ** leaves the left leaf fuller than half: KVM_MIN items move right,
    ** where the next appends go, so ordered loads fill leaves to 3/4. */
    rc = kvmSplit(p, (i==p->n && iChild==pParent->n-1) ? p->n-KVM_MIN
                                                       : p->n/2,
                  &pRight, &pSep);
    if( rc!=SQLITE_OK ) return rc;
    kvmNodeInsertAt(pParent, iChild+1, pSep, pRight, 0, 0);
    if( i>p->n ){
      i -= p->n;
      p = pRight;
    }
  }
  kvmNodeInsertAt(p, i, pItem->pEnt, 0, pItem->rev, pItem->bTomb);
  if( pItem->pbAdded ) *pItem->pbAdded = 1;
  pV->nEntry++;
  pV->nByte += kvmEntryBytes(pItem->pEnt);
  return SQLITE_OK;
}

/* Put pItem into the writable version pV.  Consumes its entry reference
** on success. */
static int kvmPut(KvMap *pV, const KvmItem *pItem){
  const KvmKey *pKey = &pItem->key;
  KvmNode *pParent = 0, *p;
  int iChild = 0;
  int rc = kvmRootRoom(pV);
  if( rc!=SQLITE_OK ) return rc;
  p = pV->pRoot;
  while( !p->bLeaf ){
    int i = kvmChildSearch(p, pKey);
    int nBefore = p->n;
    rc = kvmWritable(&p->c.aChild[i]);
    if( rc==SQLITE_OK && !p->c.aChild[i]->bLeaf ) rc = kvmSplitChild(p, i);
    if( rc!=SQLITE_OK ) return rc;
    if( p->n>nBefore && kvmCmpAt(p, i+1, pKey)<=0 ){
      i++;
    }
    pParent = p;
    iChild = i;
    p = p->c.aChild[i];
  }
  return kvmLeafPut(pV, pParent, iChild, p, pItem);
}

/* Put entry pEnt (one reference, consumed whatever happens) into *ppMap
** with revision rev and tombstone flag bTomb.  pbAdded: see KvmItem. */
static int kvmPutEntryEx(KvMap **ppMap, KvmEntry *pEnt, uint64_t rev,
                         int bTomb, int *pbAdded, KvMapOld *pOld){
  KvMap *pOwn = 0;
  KvMap *pV = kvmWritableVersion(*ppMap, &pOwn);
  KvmItem item;
  int rc;
  item.pEnt = pEnt;
  item.key.a = kvmKeyOf(pEnt);
  item.key.n = pEnt->nKey;
  item.key.pfx = pEnt->pfx;
  item.rev = rev;
  item.bTomb = bTomb;
  item.pbAdded = pbAdded;
  item.pOld = pOld;
  rc = pV ? kvmPut(pV, &item) : SQLITE_NOMEM;
  if( rc!=SQLITE_OK ) kvmEntryUnref(pEnt);
  return kvmFinish(ppMap, pV, pOwn, rc);
}

static int kvmPutEntry(KvMap **ppMap, KvmEntry *pEnt, uint64_t rev,
                       int bTomb){
  return kvmPutEntryEx(ppMap, pEnt, rev, bTomb, 0, 0);
}

int kv_map_put_absent(KvMap **ppMap, const void *aKey, int nKey,
                      const void *aVal, int nVal, uint64_t rev, int bTomb,
                      int *pbAdded){
  KvmEntry *pEnt;
  int bAdded = 0, rc;
  if( pbAdded ) *pbAdded = 0;
  if( ppMap==0 || *ppMap==0 || nKey<0 || nVal<0 ) return SQLITE_MISUSE;
  pEnt = kvmEntryNew(aKey, nKey, aVal, nVal);
  if( pEnt==0 ) return SQLITE_NOMEM;
  rc = kvmPutEntryEx(ppMap, pEnt, rev, bTomb, &bAdded, 0);
  if( rc==SQLITE_OK && pbAdded ) *pbAdded = bAdded;
  return rc;
}

int kv_map_put(KvMap **ppMap, const void *aKey, int nKey,
               const void *aVal, int nVal, uint64_t rev, int bTomb){
  KvmEntry *pEnt;
  if( ppMap==0 || *ppMap==0 || nKey<0 || nVal<0 ) return SQLITE_MISUSE;
  pEnt = kvmEntryNew(aKey, nKey, aVal, nVal);
  if( pEnt==0 ) return SQLITE_NOMEM;
  return kvmPutEntry(ppMap, pEnt, rev, bTomb);
}

int kv_map_put_old(KvMap **ppMap, const void *aKey, int nKey,
                   const void *aVal, int nVal, uint64_t rev, int bTomb,
                   KvMapOld *pOld){
  KvmEntry *pEnt;
  int rc;
  pOld->bFound = 0;
  if( ppMap==0 || *ppMap==0 || nKey<0 || nVal<0 ) return SQLITE_MISUSE;
  pEnt = kvmEntryNew(aKey, nKey, aVal, nVal);
  if( pEnt==0 ) return SQLITE_NOMEM;
  rc = kvmPutEntryEx(ppMap, pEnt, rev, bTomb, 0, pOld);
  if( rc!=SQLITE_OK ) pOld->bFound = 0;
  return rc;
}

int kv_map_put_from(KvMap **ppMap, const KvMapCursor *pCur, uint64_t rev,
                    int bTomb){
  KvmEntry *pEnt;
  int d;
  if( ppMap==0 || *ppMap==0 || pCur==0 ) return SQLITE_MISUSE;
  d = pCur->nDepth-1;
  if( d<0 ) return SQLITE_MISUSE;
  pEnt = pCur->apNode[d]->u.aEnt[pCur->aIdx[d]];
  kvmRef(&pEnt->nRef);
  return kvmPutEntry(ppMap, pEnt, rev, bTomb);
}

/* ---- remove ---- */

/* Move one item between the writable children iLeft and iLeft+1 of the
** writable interior node p, from the larger to the smaller, updating the
** separator between them. */
static int kvmBorrow(KvmNode *p, int iLeft){
  KvmNode *pL = p->c.aChild[iLeft], *pR = p->c.aChild[iLeft+1];
  if( pL->n > pR->n ){                    /* last of pL to front of pR */
    int j = pL->n-1;
    if( pR->bLeaf ){
      KvmEntry *pE = pL->u.aEnt[j];
      KvmEntry *pSep = kvmEntryNew(kvmKeyOf(pE), pE->nKey, 0, 0);
      if( pSep==0 ) return SQLITE_NOMEM;
      kvmLeafInsertFrom(pR, 0, pL, j);
      kvmEntryUnref(p->u.aSep[iLeft+1]);
      kvmSlot(p, iLeft+1, pSep);
    }else{
      kvmNodeInsertAt(pR, 0, 0, pL->c.aChild[j], 0, 0);
      kvmSlot(pR, 1, p->u.aSep[iLeft+1]);
      kvmSlot(p, iLeft+1, pL->u.aSep[j]);
    }
    pL->c.aChild[j] = 0;
    pL->aTomb[j] = 0;
    kvmSlot(pL, j, 0);
    pL->n--;
  }else{                                  /* first of pR to end of pL */
    if( pR->bLeaf ){
      KvmEntry *pE = pR->u.aEnt[1];
      KvmEntry *pSep = kvmEntryNew(kvmKeyOf(pE), pE->nKey, 0, 0);
      if( pSep==0 ) return SQLITE_NOMEM;
      kvmLeafInsertFrom(pL, pL->n, pR, 0);
      kvmNodeRemoveAt(pR, 0);
      kvmEntryUnref(p->u.aSep[iLeft+1]);
      kvmSlot(p, iLeft+1, pSep);
    }else{
      kvmSlot(pL, pL->n, p->u.aSep[iLeft+1]);
      pL->c.aChild[pL->n++] = pR->c.aChild[0];
      kvmSlot(p, iLeft+1, pR->u.aSep[1]);
      kvmSlot(pR, 1, 0);
      kvmNodeRemoveAt(pR, 0);
    }
  }
  return SQLITE_OK;
}

/* Merge aChild[iLeft+1] into aChild[iLeft] of the writable node p (both
** children writable, their items fit in one node). */
static void kvmMerge(KvmNode *p, int iLeft){
  KvmNode *pL = p->c.aChild[iLeft], *pR = p->c.aChild[iLeft+1];
  int i;
  for(i=0; i<pR->n; i++){
    if( pL->bLeaf ){
      kvmSlot(pL, pL->n, pR->u.aEnt[i]);
      pL->c.aRev[pL->n] = pR->c.aRev[i];
      pL->aTomb[pL->n] = pR->aTomb[i];
    }else{
      kvmSlot(pL, pL->n, i==0 ? p->u.aSep[iLeft+1] : pR->u.aSep[i]);
      pL->c.aChild[pL->n] = pR->c.aChild[i];
    }
    pL->n++;
  }
  if( pL->bLeaf ) kvmEntryUnref(p->u.aSep[iLeft+1]);
  pR->n = 0;
  sqlite3_free(pR);   /* was writable: its only reference was p's */
  kvmNodeRemoveAt(p, iLeft+1);
}

/* Make sure child i of the writable interior node p is writable and holds
** more than KVM_MIN items, borrowing from or merging with a neighbour.
** Returns the index of the child that now covers the old child's range
** (i or i-1 after a merge to the left). */
static int kvmRefill(KvmNode *p, int i, int *piChild){
  int iL = i>0 ? i-1 : i;             /* the pair (iL, iL+1) */
  int rc = kvmWritable(&p->c.aChild[i]);
  *piChild = i;
  if( rc!=SQLITE_OK || p->c.aChild[i]->n>KVM_MIN ) return rc;
  rc = kvmWritable(&p->c.aChild[i==iL ? i+1 : iL]);
  if( rc!=SQLITE_OK ) return rc;
  if( p->c.aChild[iL]->n + p->c.aChild[iL+1]->n <= KVM_FAN - 1 ){
    kvmMerge(p, iL);
    *piChild = iL;
    return SQLITE_OK;
  }
  return kvmBorrow(p, iL);
}

/* Remove key from the writable version pV, in which it is present. */
static int kvmRemove(KvMap *pV, const void *aKey, int nKey){
  KvmNode *p;
  KvmKey k;
  int i, rc = kvmWritable(&pV->pRoot);
  if( rc!=SQLITE_OK ) return rc;
  kvmKeyInit(&k, aKey, nKey);
  p = pV->pRoot;
  while( !p->bLeaf ){
    rc = kvmRefill(p, kvmChildSearch(p, &k), &i);
    if( rc!=SQLITE_OK ) return rc;
    if( p==pV->pRoot && p->n==1 ){    /* root lost its last sibling */
      pV->pRoot = p->c.aChild[0];
      p->n = 0;
      sqlite3_free(p);
      p = pV->pRoot;
      continue;
    }
    if( i+1<p->n && kvmCmpAt(p, i+1, &k)<=0 ) i++;
    p = p->c.aChild[i];
  }
  i = kvmLeafSearch(p, &k, 0);
  pV->nEntry--;
  pV->nByte -= kvmEntryBytes(p->u.aEnt[i]);
  kvmEntryUnref(p->u.aEnt[i]);
  kvmNodeRemoveAt(p, i);
  if( p->n==0 ){                      /* only the root can become empty */
    sqlite3_free(p);
    pV->pRoot = 0;
  }
  return SQLITE_OK;
}

int kv_map_remove(KvMap **ppMap, const void *aKey, int nKey){
  KvMap *pOwn = 0;
  KvMap *pV;
  int rc;
  if( ppMap==0 || *ppMap==0 || nKey<0 ) return SQLITE_MISUSE;
  if( !kv_map_get(*ppMap, aKey, nKey, 0) ) return SQLITE_OK;
  pV = kvmWritableVersion(*ppMap, &pOwn);
  rc = pV ? kvmRemove(pV, aKey, nKey) : SQLITE_NOMEM;
  return kvmFinish(ppMap, pV, pOwn, rc);
}

/* ---- cursors ---- */

KvMapCursor *kv_map_cursor_new(KvMap *p){
  KvMapCursor *pCur = sqlite3_malloc64(sizeof(KvMapCursor));
  if( pCur==0 ) return 0;
  pCur->pMap = kv_map_ref(p);
  pCur->nDepth = 0;
  return pCur;
}

void kv_map_cursor_free(KvMapCursor *pCur){
  if( pCur ){
    kv_map_unref(pCur->pMap);
    sqlite3_free(pCur);
  }
}

void kv_map_cursor_reset(KvMapCursor *pCur, KvMap *p){
  KvMap *pOld = pCur->pMap;
  pCur->pMap = kv_map_ref(p);
  pCur->nDepth = 0;
  kv_map_unref(pOld);
}

int kv_map_cursor_valid(const KvMapCursor *pCur){
  return pCur->nDepth>0;
}

/* Descend from the node at level pCur->nDepth-1 (already on the stack with
** its index) to a leaf, taking the first (bLast==0) or last item of every
** node below it. */
static void kvmDescendEdge(KvMapCursor *pCur, int bLast){
  int d = pCur->nDepth-1;
  while( !pCur->apNode[d]->bLeaf ){
    KvmNode *pChild = pCur->apNode[d]->c.aChild[pCur->aIdx[d]];
    d++;
    pCur->apNode[d] = pChild;
    pCur->aIdx[d] = bLast ? pChild->n-1 : 0;
  }
  pCur->nDepth = d+1;
}

/* Step to the neighbouring leaf (bNext: right) and its first or last
** entry; the stack's leaf index is out of range on entry. */
static int kvmStepLeaf(KvMapCursor *pCur, int bNext){
  int d = pCur->nDepth-1;
  while( d>0 ){
    d--;
    pCur->aIdx[d] += bNext ? 1 : -1;
    if( pCur->aIdx[d]>=0 && pCur->aIdx[d]<pCur->apNode[d]->n ){
      pCur->nDepth = d+1;
      kvmDescendEdge(pCur, !bNext);
      return 1;
    }
  }
  pCur->nDepth = 0;
  return 0;
}

/* Move to the leaf that holds key's position, recording the path. */
static void kvmDescendKey(KvMapCursor *pCur, const KvmKey *pKey){
  KvmNode *p = pCur->pMap->pRoot;
  int d = 0;
  while( !p->bLeaf ){
    int i = kvmChildSearch(p, pKey);
    pCur->apNode[d] = p;
    pCur->aIdx[d] = i;
    d++;
    p = p->c.aChild[i];
  }
  pCur->apNode[d] = p;
  pCur->nDepth = d+1;
}

int kv_map_cursor_seek(KvMapCursor *pCur, int eSeek, const void *aKey,
                       int nKey){
  KvmNode *pLeaf;
  KvmKey k;
  int d, i;
  pCur->nDepth = 0;
  if( pCur->pMap==0 || pCur->pMap->pRoot==0 ) return 0;
  if( eSeek<KV_SEEK_FIRST || eSeek>KV_SEEK_LT ) return 0;
  if( eSeek==KV_SEEK_FIRST || eSeek==KV_SEEK_LAST ){
    int bLast = eSeek==KV_SEEK_LAST;
    pCur->apNode[0] = pCur->pMap->pRoot;
    pCur->aIdx[0] = bLast ? pCur->pMap->pRoot->n-1 : 0;
    pCur->nDepth = 1;
    kvmDescendEdge(pCur, bLast);
    return 1;
  }
  if( nKey<0 ) return 0;
  kvmKeyInit(&k, aKey, nKey);
  kvmDescendKey(pCur, &k);
  d = pCur->nDepth-1;
  pLeaf = pCur->apNode[d];
  i = kvmLeafSearch(pLeaf, &k, eSeek==KV_SEEK_GT||eSeek==KV_SEEK_LE);
  if( eSeek==KV_SEEK_LE || eSeek==KV_SEEK_LT ) i--;
  pCur->aIdx[d] = i;
  if( i<0 ) return kvmStepLeaf(pCur, 0);
  if( i>=pLeaf->n ) return kvmStepLeaf(pCur, 1);
  return 1;
}

/* A walk reads each entry it lands on, and entries are allocations of
** their own: the entry KVM_AHEAD steps further is fetched into the cache
** meanwhile (a hint; it changes nothing). */
#define KVM_AHEAD 3
static void kvmPrefetch(const KvMapCursor *pCur, int d, int iStep){
  int i = pCur->aIdx[d] + iStep;
  const KvmNode *p = pCur->apNode[d];
  if( i>=0 && i<p->n ) __builtin_prefetch(p->u.aEnt[i]);
}

int kv_map_cursor_next(KvMapCursor *pCur){
  int d = pCur->nDepth-1, i;
  if( d<0 ) return 0;
  if( ++pCur->aIdx[d] < pCur->apNode[d]->n ){
    kvmPrefetch(pCur, d, KVM_AHEAD);
    return 1;
  }
  if( !kvmStepLeaf(pCur, 1) ) return 0;
  d = pCur->nDepth-1;
  for(i=0; i<=KVM_AHEAD; i++) kvmPrefetch(pCur, d, i);
  return 1;
}

int kv_map_cursor_prev(KvMapCursor *pCur){
  int d = pCur->nDepth-1, i;
  if( d<0 ) return 0;
  if( --pCur->aIdx[d] >= 0 ){
    kvmPrefetch(pCur, d, -KVM_AHEAD);
    return 1;
  }
  if( !kvmStepLeaf(pCur, 0) ) return 0;
  d = pCur->nDepth-1;
  for(i=0; i<=KVM_AHEAD; i++) kvmPrefetch(pCur, d, -i);
  return 1;
}

int kv_map_cursor_step(KvMapCursor *pCur, int bPrev, KvMapEntry *pOut){
  int bOn, d = pCur->nDepth-1;
  if( !bPrev && d>=0 ){
    /* kv_map_cursor_next inline for the common step within a leaf */
    const KvmNode *p = pCur->apNode[d];
    int i = ++pCur->aIdx[d];
    if( i<p->n ){
      if( i+KVM_AHEAD<p->n ) __builtin_prefetch(p->u.aEnt[i+KVM_AHEAD]);
      kvmEntryOut(p, i, pOut);
      return 1;
    }
    if( !kvmStepLeaf(pCur, 1) ) return 0;
    d = pCur->nDepth-1;
    for(i=0; i<=KVM_AHEAD; i++) kvmPrefetch(pCur, d, i);
    kvmEntryOut(pCur->apNode[d], pCur->aIdx[d], pOut);
    return 1;
  }
  bOn = bPrev ? kv_map_cursor_prev(pCur) : kv_map_cursor_next(pCur);
  if( bOn ){
    kvmEntryOut(pCur->apNode[pCur->nDepth-1], pCur->aIdx[pCur->nDepth-1], pOut);
  }
  return bOn;
}

void kv_map_cursor_entry(const KvMapCursor *pCur, KvMapEntry *pOut){
  if( pCur->nDepth==0 ){
    memset(pOut, 0, sizeof(*pOut));
    return;
  }
  /* every field is written: no memset first, whose wide stores a caller's
  ** copy of *pOut would wait for */
  kvmEntryOut(pCur->apNode[pCur->nDepth-1], pCur->aIdx[pCur->nDepth-1], pOut);
}
