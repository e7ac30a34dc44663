/*
** pcache.c -- the decoded-page cache (see vfs/pcache.h): a chained hash
** table over a doubly linked LRU list, bounded in bytes; pages of
** sequential scans never evict other scans' pages.
**
** The spill file.  A page evicted from memory goes, when the cache has a
** spill limit, to a slot of an unlinked temporary file; its entry stays in
** the hash table as a header without the bytes (iSpill: the slot's
** offset), on a second LRU list.  A get of such an entry reads the slot
** (pread: the bytes come from the OS page cache, as a plain database
** file's would, instead of being decoded again).  Slots all have the size
** of the first page spilled (pages of another size are not spilled);
** freed slots are reused; past the spill limit the least recently used
** spilled entry gives its slot up.  The headers count in the cache's byte
** limit.  A failed write or read drops the page (the next read decodes
** it); the file is opened on the first spill, in SQLite's temporary
** directory, and a process forked from the one that opened it drops the
** spilled entries it inherited and opens its own (the slots of the
** parent's file are the parent's to change).  All of it is under the
** cache's mutex.
**
** Slabs.  An entry that holds its bytes is carved from a slab: one
** allocation of about CACHE_SLAB_BYTES cut into entries of one page size,
** with its free entries on a list of its own.  A cache filling up takes
** one allocation per slab instead of one per page (an allocator's arena
** that grows page by page costs a system call per page), and evicting
** and adding pages reuses entries without the allocator.  A slab whose
** entries are all free goes back to the allocator unless it is the only
** one of its page size with a free entry.  Spilled entries' headers are
** allocated one by one.  Before a new slab is taken while the slabs'
** free room exceeds 1/16 of the limit (pages of another size, a cache
** that shrank), and when the limit is lowered, every slab with a free
** entry moves its pages into allocations of their own and is freed: the
** cache holds at most its limit, plus 1/16 of it, plus a slab.
*/
#define _GNU_SOURCE 1            /* PTHREAD_MUTEX_ADAPTIVE_NP, where glibc */
#include "config.h"
#include "vfs/pcache.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct CacheEntry CacheEntry;
typedef struct CacheSlab CacheSlab;
typedef struct CacheClass CacheClass;
struct CacheEntry {
  uint64_t iBranch, iOwner;
  CacheSlab *pSlab;               /* the slab it is carved from, or NULL */
  uint32_t pgno, szPage;
  int bScan;                      /* added by a scan (depot_cache_put_scan) */
  int bMem;                       /* holds its bytes (else: a header) */
  int64_t iSpill;                 /* offset of its spill slot, or -1 */
  CacheEntry *pHashNext;
  CacheEntry *pPrev, *pNext;      /* LRU list, most recent at the head */
  unsigned char a[];              /* szPage bytes (none when spilled) */
};

/* A slab: nEntry entries of one page size after this header, nFree of
** them on pFree (linked by pHashNext). */
struct CacheSlab {
  CacheSlab *pPrev, *pNext;       /* its class's list: with a free entry,
                                  ** or full */
  CacheEntry *pFree;
  uint32_t nFree, nEntry;
  CacheClass *pClass;
};

/* The slabs of one page size. */
struct CacheClass {
  uint32_t szPage;
  uint32_t szStride;              /* bytes of an entry in a slab */
  CacheSlab *pPart;               /* slabs with a free entry */
  CacheSlab *pFull;               /* slabs without */
  CacheClass *pNext;
};

/* The bytes of a slab: at most CACHE_SLAB_BYTES and at most 1/64 of the
** cache's limit, and at least CACHE_SLAB_MIN entries; a cache whose limit
** is too small for that allocates its entries one by one. */
#define CACHE_SLAB_BYTES (256*1024)
#define CACHE_SLAB_MIN   4
#define CACHE_SLAB_HDR ((sizeof(CacheSlab)+15) & ~(size_t)15)

struct DepotCache {
  pthread_mutex_t mutex;          /* guards every field below */
  int64_t nMax;                   /* bytes: entries, table and this */
  int64_t nUsed;                  /* bytes of the entries (headers too) */
  uint32_t nSlot;                 /* power of two */
  uint32_t nEntry;
  CacheEntry **aSlot;
  CacheEntry *pHead, *pTail;      /* entries holding their bytes */
  /* the spill file */
  int64_t nSpillMax;              /* bytes of slots at most; 0: no spill */
  int64_t nSpillEnd;              /* the slots the file has: their bytes */
  int64_t nSpillHdr;              /* bytes of the spilled entries' headers */
  uint32_t szSpill;               /* the slot size (0: none spilled yet) */
  int fdSpill;                    /* -1: not open */
  pid_t pidSpill;                 /* the process that opened fdSpill */
  int bSpillFailed;               /* the file could not be opened */
  int64_t *aFree;                 /* offsets of free slots */
  int nFree, nFreeAlloc;
  CacheEntry *pSpHead, *pSpTail;  /* spilled entries */
  CacheClass *pClass;             /* the slabs, by page size */
  int64_t nSlabBytes;             /* bytes of every slab */
  int64_t nSlabLive;              /* bytes of the entries in use in them */
};

#define CACHE_MIN_SLOT 16        /* the hash table's first size */

static int64_t nCacheHit = 0, nCacheMiss = 0;   /* atomic */
static int64_t nSpillWrite = 0, nSpillRead = 0; /* atomic */

#ifdef DEPOT_TEST
/* Spill writes and reads to fail from now on: this many (< 0: all). */
int depot_cache_test_spill_fail = 0;
#endif

/* 1 when a spill write or read is to fail (the test hook), else 0. */
static int spillFault(void){
#ifdef DEPOT_TEST
  int n = __atomic_load_n(&depot_cache_test_spill_fail, __ATOMIC_RELAXED);
  while( n>0 && !__atomic_compare_exchange_n(&depot_cache_test_spill_fail,
                     &n, n-1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ){}
  return n!=0;
#else
  return 0;
#endif
}

/* This process's id without a system call (glibc's getpid() makes one, and
** spillReady() runs on every read of a spilled page): taken at the first
** use, and again in the child by fork()'s handler. */
static pid_t cachePidNow = 0;           /* atomic */
static pthread_once_t cachePidOnce = PTHREAD_ONCE_INIT;
static void cachePidSet(void){
  __atomic_store_n(&cachePidNow, getpid(), __ATOMIC_RELAXED);
}
static void cachePidInit(void){
  cachePidSet();
  pthread_atfork(0, 0, cachePidSet);
}
static pid_t cachePid(void){
  pthread_once(&cachePidOnce, cachePidInit);
  return __atomic_load_n(&cachePidNow, __ATOMIC_RELAXED);
}

void depot_cache_spill_counters(int64_t *pnWrite, int64_t *pnRead){
  *pnWrite = __atomic_load_n(&nSpillWrite, __ATOMIC_RELAXED);
  *pnRead = __atomic_load_n(&nSpillRead, __ATOMIC_RELAXED);
}

void depot_cache_counters(int64_t *pnHit, int64_t *pnMiss){
  *pnHit = __atomic_load_n(&nCacheHit, __ATOMIC_RELAXED);
  *pnMiss = __atomic_load_n(&nCacheMiss, __ATOMIC_RELAXED);
}

static uint32_t cacheHash(uint64_t b, uint32_t pgno, uint64_t o){
  uint64_t h = (b*0x9E3779B97F4A7C15ULL) ^ (o*0xC2B2AE3D27D4EB4FULL) ^ pgno;
  h ^= h>>29;
  h *= 0xBF58476D1CE4E5B9ULL;
  return (uint32_t)(h ^ (h>>32));
}

void depot_mutex_init_adaptive(pthread_mutex_t *pMutex){
#if HAVE_DECL_PTHREAD_MUTEX_ADAPTIVE_NP
  pthread_mutexattr_t attr;
  if( pthread_mutexattr_init(&attr)==0 ){
    int rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    if( rc==0 ) rc = pthread_mutex_init(pMutex, &attr);
    pthread_mutexattr_destroy(&attr);
    if( rc==0 ) return;
  }
#endif
  pthread_mutex_init(pMutex, 0);
}

DepotCache *depot_cache_new(int64_t nMaxBytes){
  DepotCache *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  p->nSlot = CACHE_MIN_SLOT;
  p->aSlot = sqlite3_malloc64(sizeof(CacheEntry*)*p->nSlot);
  if( p->aSlot==0 ){ sqlite3_free(p); return 0; }
  memset(p->aSlot, 0, sizeof(CacheEntry*)*p->nSlot);
  p->nMax = nMaxBytes;
  p->fdSpill = -1;
  depot_mutex_init_adaptive(&p->mutex);
  return p;
}

/* Free every slab of p (and so every entry carved from them). */
static void slabFreeAll(DepotCache *p){
  while( p->pClass ){
    CacheClass *c = p->pClass;
    int iList;
    for(iList=0; iList<2; iList++){
      CacheSlab *b = iList ? c->pFull : c->pPart, *pNext;
      for(; b; b=pNext){ pNext = b->pNext; sqlite3_free(b); }
    }
    p->pClass = c->pNext;
    sqlite3_free(c);
  }
  p->nSlabBytes = p->nSlabLive = 0;
}

void depot_cache_free(DepotCache *p){
  CacheEntry *e, *pNext;
  if( p==0 ) return;
  for(e=p->pHead; e; e=pNext){ pNext = e->pNext; if( !e->pSlab ) sqlite3_free(e); }
  for(e=p->pSpHead; e; e=pNext){ pNext = e->pNext; sqlite3_free(e); }
  slabFreeAll(p);
  if( p->fdSpill>=0 ) close(p->fdSpill);
  pthread_mutex_destroy(&p->mutex);
  sqlite3_free(p->aFree);
  sqlite3_free(p->aSlot);
  sqlite3_free(p);
}

static int64_t cacheEntryBytes(uint32_t szPage);
static void slabRelease(DepotCache*);

/* Move slab b from list *ppFrom of its class to list *ppTo. */
static void slabMove(CacheSlab *b, CacheSlab **ppFrom, CacheSlab **ppTo){
  if( b->pPrev ) b->pPrev->pNext = b->pNext; else *ppFrom = b->pNext;
  if( b->pNext ) b->pNext->pPrev = b->pPrev;
  b->pPrev = 0;
  b->pNext = *ppTo;
  if( *ppTo ) (*ppTo)->pPrev = b;
  *ppTo = b;
}

/* The class of szPage pages, made when new; NULL when out of memory. */
static CacheClass *slabClass(DepotCache *p, uint32_t szPage){
  CacheClass *c;
  for(c=p->pClass; c && c->szPage!=szPage; c=c->pNext){}
  if( c==0 && (c = sqlite3_malloc64(sizeof(*c)))!=0 ){
    memset(c, 0, sizeof(*c));
    c->szPage = szPage;
    c->szStride = (uint32_t)cacheEntryBytes(szPage);
    c->pNext = p->pClass;
    p->pClass = c;
  }
  return c;
}

/* A free entry for a page of szPage bytes, from a slab (a new slab when
** none of that size has one), or else allocated on its own; NULL when out
** of memory.  Only its pSlab is set. */
static CacheEntry *cacheEntryAlloc(DepotCache *p, uint32_t szPage){
  CacheClass *c = slabClass(p, szPage);
  CacheSlab *b = 0;
  CacheEntry *e;
  if( c && c->pPart==0 && p->nSlabBytes-p->nSlabLive > p->nMax/16 ){
    /* the room evictions and drops left free in slabs of other sizes
    ** (or partly used ones) is not reused by this size: give it back */
    slabRelease(p);
  }
  if( c && c->pPart==0 ){
    int64_t nSlab = p->nMax/64 < CACHE_SLAB_BYTES ? p->nMax/64
                                                   : CACHE_SLAB_BYTES;
    int64_t nPer = (nSlab - (int64_t)CACHE_SLAB_HDR) / c->szStride;
    int64_t nByte = (int64_t)CACHE_SLAB_HDR + nPer*c->szStride;
    uint32_t i;
    if( nPer>=CACHE_SLAB_MIN ) b = sqlite3_malloc64(nByte);
    if( b ){
      memset(b, 0, sizeof(*b));
      b->pClass = c;
      b->nEntry = b->nFree = (uint32_t)nPer;
      for(i=(uint32_t)nPer; i>0; i--){
        e = (CacheEntry*)((unsigned char*)b + CACHE_SLAB_HDR
                          + (size_t)(i-1)*c->szStride);
        e->szPage = 0;                    /* free */
        e->pHashNext = b->pFree;
        b->pFree = e;
      }
      b->pNext = 0;
      c->pPart = b;
      p->nSlabBytes += nByte;
    }
  }
  if( c==0 || (b = c->pPart)==0 ){
    e = sqlite3_malloc64(sizeof(*e)+szPage);
    if( e ) e->pSlab = 0;
    return e;
  }
  e = b->pFree;
  b->pFree = e->pHashNext;
  if( --b->nFree==0 ) slabMove(b, &c->pPart, &c->pFull);
  p->nSlabLive += c->szStride;
  e->pSlab = b;
  return e;
}

/* Give entry e back: to its slab, or to the allocator. */
static void cacheEntryFree(DepotCache *p, CacheEntry *e){
  CacheSlab *b = e->pSlab;
  CacheClass *c;
  if( b==0 ){
    sqlite3_free(e);
    return;
  }
  c = b->pClass;
  e->szPage = 0;                          /* free */
  e->pHashNext = b->pFree;
  b->pFree = e;
  if( b->nFree++==0 ) slabMove(b, &c->pFull, &c->pPart);
  p->nSlabLive -= c->szStride;
  if( b->nFree==b->nEntry && (b->pPrev || b->pNext) ){
    /* empty, and not the only one with a free entry */
    if( b->pPrev ) b->pPrev->pNext = b->pNext; else c->pPart = b->pNext;
    if( b->pNext ) b->pNext->pPrev = b->pPrev;
    p->nSlabBytes -= (int64_t)CACHE_SLAB_HDR + (int64_t)b->nEntry*c->szStride;
    sqlite3_free(b);
  }
}

/* Unlink e from its LRU list: the spilled entries' or the others'. */
static void cacheUnlink(DepotCache *p, CacheEntry *e){
  CacheEntry **ppHead = e->bMem ? &p->pHead : &p->pSpHead;
  CacheEntry **ppTail = e->bMem ? &p->pTail : &p->pSpTail;
  if( e->pPrev ) e->pPrev->pNext = e->pNext; else *ppHead = e->pNext;
  if( e->pNext ) e->pNext->pPrev = e->pPrev; else *ppTail = e->pPrev;
  e->pPrev = e->pNext = 0;
}

static void cachePushFront(DepotCache *p, CacheEntry *e){
  CacheEntry **ppHead = e->bMem ? &p->pHead : &p->pSpHead;
  CacheEntry **ppTail = e->bMem ? &p->pTail : &p->pSpTail;
  e->pNext = *ppHead;
  e->pPrev = 0;
  if( *ppHead ) (*ppHead)->pPrev = e; else *ppTail = e;
  *ppHead = e;
}

static CacheEntry **cacheFind(DepotCache *p, uint64_t b, uint32_t pgno,
                              uint64_t o){
  CacheEntry **pp = &p->aSlot[cacheHash(b, pgno, o) & (p->nSlot-1)];
  while( *pp && ((*pp)->pgno!=pgno || (*pp)->iOwner!=o || (*pp)->iBranch!=b) ){
    pp = &(*pp)->pHashNext;
  }
  return pp;
}

/* The bytes an entry of a szPage page takes (its stride in a slab). */
static int64_t cacheEntryBytes(uint32_t szPage){
  return ((int64_t)sizeof(CacheEntry) + (int64_t)szPage + 15) & ~(int64_t)15;
}

/* The bytes the cache holds: its entries, the spilled entries' headers
** and the free-slot list, its hash table and itself. */
static int64_t cacheBytes(const DepotCache *p){
  return p->nUsed + p->nSpillHdr + (int64_t)p->nFreeAlloc*(int64_t)sizeof(int64_t)
       + (int64_t)p->nSlot*(int64_t)sizeof(CacheEntry*)
       + (int64_t)sizeof(*p);
}

int64_t depot_cache_bytes_for(uint32_t nPage, uint32_t szPage){
  return (int64_t)nPage*cacheEntryBytes(szPage)
       + (int64_t)CACHE_MIN_SLOT*(int64_t)sizeof(CacheEntry*)
       + (int64_t)sizeof(DepotCache);
}

/* Put slot iOff on the free list (best effort: a slot the list has no
** room for is lost until the file is reset). */
static void spillFreeSlot(DepotCache *p, int64_t iOff){
  if( p->nFree==p->nFreeAlloc ){
    int n = p->nFreeAlloc ? p->nFreeAlloc*2 : 64;
    int64_t *a = sqlite3_realloc64(p->aFree, sizeof(int64_t)*(uint64_t)n);
    if( a==0 ) return;
    p->aFree = a;
    p->nFreeAlloc = n;
  }
  p->aFree[p->nFree++] = iOff;
}

/* Remove entry e, whose hash chain link is *pp, and free it. */
static void cacheRemove(DepotCache *p, CacheEntry **pp, CacheEntry *e){
  *pp = e->pHashNext;
  cacheUnlink(p, e);
  if( e->iSpill>=0 ) spillFreeSlot(p, e->iSpill);
  if( e->bMem ){
    p->nUsed -= cacheEntryBytes(e->szPage);
  }else{
    p->nSpillHdr -= (int64_t)sizeof(CacheEntry);
  }
  p->nEntry--;
  cacheEntryFree(p, e);
}

/* Drop every spilled entry and forget the file's slots (the file of
** another process, or a lowered limit): those pages decode again. */
static void spillReset(DepotCache *p){
  CacheEntry *e;
  while( p->pSpTail ){
    e = p->pSpTail;
    cacheRemove(p, cacheFind(p, e->iBranch, e->pgno, e->iOwner), e);
  }
  for(e=p->pHead; e; e=e->pNext) e->iSpill = -1;
  p->nFree = 0;
  p->nSpillEnd = 0;
  p->szSpill = 0;
  if( p->fdSpill>=0 ){
    if( p->pidSpill==cachePid() ){
      if( ftruncate(p->fdSpill, 0)!=0 ){ /* the slots are rewritten first */ }
    }else{
      close(p->fdSpill);          /* this process's copy of the parent's */
      p->fdSpill = -1;
    }
  }
}

/* An unlinked temporary file open for reading and writing (close-on-exec)
** in the first of $SQLITE_TMPDIR, $TMPDIR, /var/tmp, /usr/tmp, /tmp and .
** that takes one, or -1. */
static int spillTempFile(void){
  const char *azDir[] = { 0, 0, "/var/tmp", "/usr/tmp", "/tmp", "." };
  unsigned i;
  azDir[0] = getenv("SQLITE_TMPDIR");
  azDir[1] = getenv("TMPDIR");
  for(i=0; i<sizeof(azDir)/sizeof(azDir[0]); i++){
    struct stat st;
    int fd;
    if( azDir[i]==0 || stat(azDir[i], &st)!=0 || !S_ISDIR(st.st_mode) ){
      continue;
    }
#ifdef O_TMPFILE
    fd = open(azDir[i], O_TMPFILE|O_RDWR|O_CLOEXEC, 0600);
    if( fd>=0 ) return fd;
#endif
    {
      char *z = sqlite3_mprintf("%s/depot-spill-XXXXXX", azDir[i]);
      if( z==0 ) return -1;
      fd = mkostemp(z, O_CLOEXEC);
      if( fd>=0 ) unlink(z);
      sqlite3_free(z);
      if( fd>=0 ) return fd;
    }
  }
  return -1;
}

/* The spill file is usable by this process: 1, or 0 (no spill). */
static int spillReady(DepotCache *p){
  if( p->nSpillMax<=0 ) return 0;
  if( p->fdSpill>=0 && p->pidSpill!=cachePid() ) spillReset(p);
  if( p->fdSpill<0 && !p->bSpillFailed ){
    p->fdSpill = spillTempFile();
    p->pidSpill = cachePid();
    if( p->fdSpill<0 ) p->bSpillFailed = 1;
  }
  return p->fdSpill>=0;
}

/* Replace entry e (in the hash table) by a copy n of nByte bytes of
** which the first nCopy are e's; e's place in the LRU lists goes to n
** (bMem says which list), and e is freed.  Returns n, or 0 (and e stays)
** when out of memory. */
static CacheEntry *cacheReplace(DepotCache *p, CacheEntry *e, size_t nByte,
                                size_t nCopy, int bMem){
  CacheEntry *n, **pp;
  if( bMem ){
    n = cacheEntryAlloc(p, e->szPage);
  }else{
    n = sqlite3_malloc64(nByte);
    if( n ) n->pSlab = 0;
  }
  if( n==0 ) return 0;
  /* e's hash chain link, found after the allocation (it may move
  ** entries: slabRelease()) */
  pp = cacheFind(p, e->iBranch, e->pgno, e->iOwner);
  {
    CacheSlab *pSlab = n->pSlab;
    memcpy(n, e, nCopy);
    n->pSlab = pSlab;
  }
  cacheUnlink(p, e);
  *pp = n;                               /* n->pHashNext is e's */
  n->pPrev = n->pNext = 0;
  n->bMem = bMem;
  cachePushFront(p, n);
  if( e->bMem ) p->nUsed -= cacheEntryBytes(e->szPage);
  else p->nSpillHdr -= (int64_t)sizeof(CacheEntry);
  if( bMem ) p->nUsed += cacheEntryBytes(n->szPage);
  else p->nSpillHdr += (int64_t)sizeof(CacheEntry);
  cacheEntryFree(p, e);
  return n;
}

/* A free slot of the spill file for a page of szPage bytes in *piOff:
** 1, or 0 (none: another size, or the file full of slots no spilled
** header can give up, or bEvict 0 and no slot free).  With bEvict, may
** remove the least recently used spilled entry (so hash chain links taken
** before may be stale). */
static int spillSlot(DepotCache *p, uint32_t szPage, int bEvict,
                     int64_t *piOff){
  if( p->szSpill==0 ) p->szSpill = szPage;
  if( szPage!=p->szSpill ) return 0;
  if( p->nFree==0 && p->nSpillEnd + p->szSpill <= p->nSpillMax ){
    *piOff = p->nSpillEnd;
    p->nSpillEnd += p->szSpill;
    return 1;
  }
  if( p->nFree==0 && p->pSpTail && bEvict ){
    CacheEntry *t = p->pSpTail;
    cacheRemove(p, cacheFind(p, t->iBranch, t->pgno, t->iOwner), t);
  }
  if( p->nFree==0 ) return 0;
  *piOff = p->aFree[--p->nFree];
  return 1;
}

/* Write page a to slot iOff: 1, or 0 (the slot is freed again). */
static int spillWrite(DepotCache *p, const unsigned char *a, uint32_t szPage,
                      int64_t iOff){
  if( spillFault() || pwrite(p->fdSpill, a, szPage, iOff)!=(ssize_t)szPage ){
    spillFreeSlot(p, iOff);
    return 0;
  }
  __atomic_add_fetch(&nSpillWrite, 1, __ATOMIC_RELAXED);
  return 1;
}

/* Make e (holding its bytes, the memory list's tail) a spilled header:
** its bytes go to a slot of the spill file unless they have one already.
** 1 done (e is freed), 0 not spilled. */
static int cacheSpill(DepotCache *p, CacheEntry *e){
  int64_t iOff;
  if( (e->iOwner & DEPOT_CACHE_STAGED)!=0
   || p->nSpillHdr + (int64_t)sizeof(CacheEntry) > p->nMax/2
   || !spillReady(p) ){
    return 0;
  }
  if( e->iSpill<0 ){                  /* after spillReady(): it may reset */
    if( !spillSlot(p, e->szPage, 1, &iOff) ) return 0;
    if( !spillWrite(p, e->a, e->szPage, iOff) ) return 0;
    e->iSpill = iOff;
  }
  return cacheReplace(p, e, sizeof(CacheEntry), sizeof(CacheEntry), 0)!=0;
}

/* Drop or spill least recently used entries until the cache fits nMax;
** the spilled entries' headers take at most half of it (the least recently
** used go first), and when the pages in memory are gone, as much as is
** left. */
static void cacheEvict(DepotCache *p){
  while( p->pSpTail && p->nSpillHdr > p->nMax/2 ){
    CacheEntry *e = p->pSpTail;
    cacheRemove(p, cacheFind(p, e->iBranch, e->pgno, e->iOwner), e);
  }
  while( p->pTail && cacheBytes(p) > p->nMax ){
    CacheEntry *e = p->pTail;
    if( !cacheSpill(p, e) ){
      /* cacheSpill() can remove others: find e's link now */
      cacheRemove(p, cacheFind(p, e->iBranch, e->pgno, e->iOwner), e);
    }
  }
  while( p->pSpTail && cacheBytes(p) > p->nMax ){
    CacheEntry *e = p->pSpTail;
    cacheRemove(p, cacheFind(p, e->iBranch, e->pgno, e->iOwner), e);
  }
}

void depot_cache_drop(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                      uint64_t iOwner){
  CacheEntry **pp;
  pthread_mutex_lock(&p->mutex);
  pp = cacheFind(p, iBranch, pgno, iOwner);
  if( *pp ) cacheRemove(p, pp, *pp);
  pthread_mutex_unlock(&p->mutex);
}

void depot_cache_rekey(DepotCache *p, uint64_t iBranch, uint64_t iFrom,
                       uint64_t iTo, int (*xKeep)(void*, uint32_t pgno),
                       void *pArg){
  CacheEntry *e, *pNext;
  int iList;
  pthread_mutex_lock(&p->mutex);
  for(iList=0; iList<2; iList++){
    for(e=iList ? p->pSpHead : p->pHead; e; e=pNext){
      CacheEntry **pp;
      pNext = e->pNext;
      if( e->iBranch!=iBranch || e->iOwner!=iFrom ) continue;
      pp = cacheFind(p, iBranch, e->pgno, iFrom);
      if( xKeep && xKeep(pArg, e->pgno)
       && *cacheFind(p, iBranch, e->pgno, iTo)==0 ){
        CacheEntry **ppTo;
        *pp = e->pHashNext;               /* out of the old key's chain */
        e->iOwner = iTo;
        e->bScan = 0;
        ppTo = &p->aSlot[cacheHash(iBranch, e->pgno, iTo) & (p->nSlot-1)];
        e->pHashNext = *ppTo;
        *ppTo = e;
      }else{
        cacheRemove(p, pp, e);
      }
    }
  }
  pthread_mutex_unlock(&p->mutex);
}

/* Double the hash table when it gets crowded (best effort), while it
** stays within 1/64 of the limit (a chain of a few entries costs less than
** the pages a larger table would evict). */
static void cacheGrow(DepotCache *p){
  uint32_t n = p->nSlot*2, i;
  CacheEntry **a;
  if( p->nEntry < p->nSlot || n>(1u<<24)
   || (int64_t)n*(int64_t)sizeof(CacheEntry*) > p->nMax/64 ) return;
  a = sqlite3_malloc64(sizeof(CacheEntry*)*n);
  if( a==0 ) return;
  memset(a, 0, sizeof(CacheEntry*)*n);
  for(i=0; i<p->nSlot; i++){
    CacheEntry *e, *pNext;
    for(e=p->aSlot[i]; e; e=pNext){
      uint32_t h = cacheHash(e->iBranch, e->pgno, e->iOwner) & (n-1);
      pNext = e->pHashNext;
      e->pHashNext = a[h];
      a[h] = e;
    }
  }
  sqlite3_free(p->aSlot);
  p->aSlot = a;
  p->nSlot = n;
}

/* Free every slab that has a free entry, moving its pages into
** allocations of their own (after the limit is lowered: the room such a
** slab keeps free is no longer the cache's to hold).  Stops where memory
** runs out, every list consistent. */
static void slabRelease(DepotCache *p){
  CacheClass *c;
  for(c=p->pClass; c; c=c->pNext){
    CacheSlab *b, *pNext;
    for(b=c->pPart; b; b=pNext){
      uint32_t i;
      pNext = b->pNext;
      for(i=0; i<b->nEntry; i++){
        CacheEntry *e = (CacheEntry*)((unsigned char*)b + CACHE_SLAB_HDR
                                      + (size_t)i*c->szStride);
        CacheEntry *m, **pp;
        size_t n;
        if( e->szPage==0 ) continue;            /* free */
        n = sizeof(*e) + e->szPage;
        if( (m = sqlite3_malloc64(n))==0 ) return;
        pp = cacheFind(p, e->iBranch, e->pgno, e->iOwner);
        memcpy(m, e, n);
        m->pSlab = 0;
        *pp = m;
        if( m->pPrev ) m->pPrev->pNext = m; else p->pHead = m;
        if( m->pNext ) m->pNext->pPrev = m; else p->pTail = m;
        e->szPage = 0;
        e->pHashNext = b->pFree;
        b->pFree = e;
        b->nFree++;
        p->nSlabLive -= c->szStride;
      }
      if( b->pPrev ) b->pPrev->pNext = b->pNext; else c->pPart = b->pNext;
      if( b->pNext ) b->pNext->pPrev = b->pPrev;
      p->nSlabBytes -= (int64_t)CACHE_SLAB_HDR + (int64_t)b->nEntry*c->szStride;
      sqlite3_free(b);
    }
  }
}

void depot_cache_set_limit(DepotCache *p, int64_t nMaxBytes){
  pthread_mutex_lock(&p->mutex);
  if( nMaxBytes<0 ) nMaxBytes = 0;
  if( nMaxBytes<p->nMax ){
    p->nMax = nMaxBytes;
    cacheEvict(p);
    slabRelease(p);
  }
  p->nMax = nMaxBytes;
  cacheEvict(p);
  pthread_mutex_unlock(&p->mutex);
}

void depot_cache_set_spill_limit(DepotCache *p, int64_t nMaxBytes){
  pthread_mutex_lock(&p->mutex);
  if( nMaxBytes<0 ) nMaxBytes = 0;
  if( nMaxBytes<p->nSpillEnd ) spillReset(p);
  p->nSpillMax = nMaxBytes;
  pthread_mutex_unlock(&p->mutex);
}

int64_t depot_cache_spill_limit(DepotCache *p){
  int64_t n;
  pthread_mutex_lock(&p->mutex);
  n = p->nSpillMax;
  pthread_mutex_unlock(&p->mutex);
  return n;
}

int64_t depot_cache_spill_bytes(DepotCache *p){
  int64_t n;
  pthread_mutex_lock(&p->mutex);
  n = p->fdSpill>=0 && p->pidSpill==cachePid() ? p->nSpillEnd : 0;
  pthread_mutex_unlock(&p->mutex);
  return n;
}


int64_t depot_cache_limit(DepotCache *p){
  int64_t n;
  pthread_mutex_lock(&p->mutex);
  n = p->nMax;
  pthread_mutex_unlock(&p->mutex);
  return n;
}

int64_t depot_cache_used(DepotCache *p){
  int64_t n;
  pthread_mutex_lock(&p->mutex);
  n = cacheBytes(p) + (p->nSlabBytes - p->nSlabLive);  /* + free slab room */
  pthread_mutex_unlock(&p->mutex);
  return n;
}

static int cacheGet(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                    uint64_t iOwner, uint32_t szPage, unsigned char *pOut,
                    int bScan){
  CacheEntry *e;
  int bHit = 0;
  pthread_mutex_lock(&p->mutex);
  e = *cacheFind(p, iBranch, pgno, iOwner);
  if( e && e->szPage==szPage ){
    if( e->bMem ){
      memcpy(pOut, e->a, szPage);
      cacheUnlink(p, e);
      cachePushFront(p, e);
      bHit = 1;
    }else{
      int bReady = spillReady(p);        /* may drop every spilled entry */
      CacheEntry **pp = cacheFind(p, iBranch, pgno, iOwner);
      e = *pp;
      if( e && bReady && !spillFault()
       && pread(p->fdSpill, pOut, szPage, e->iSpill)==(ssize_t)szPage ){
        CacheEntry *m;
        bHit = 1;
        __atomic_add_fetch(&nSpillRead, 1, __ATOMIC_RELAXED);
        /* back in memory, keeping its slot: evicted again, it needs no
        ** write; a scan's read leaves it in its slot */
        m = bScan ? 0 : cacheReplace(p, e, sizeof(CacheEntry)+szPage,
                                     sizeof(CacheEntry), 1);
        if( m ){
          memcpy(m->a, pOut, szPage);
          cacheEvict(p);
        }else{
          cacheUnlink(p, e);
          cachePushFront(p, e);
        }
      }else if( e ){
        cacheRemove(p, pp, e);
      }
    }
  }
  pthread_mutex_unlock(&p->mutex);
  __atomic_add_fetch(bHit ? &nCacheHit : &nCacheMiss, 1, __ATOMIC_RELAXED);
  return bHit;
}

int depot_cache_get(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                    uint64_t iOwner, uint32_t szPage, unsigned char *pOut){
  return cacheGet(p, iBranch, pgno, iOwner, szPage, pOut, 0);
}

int depot_cache_get_scan(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                         uint64_t iOwner, uint32_t szPage,
                         unsigned char *pOut){
  return cacheGet(p, iBranch, pgno, iOwner, szPage, pOut, 1);
}

int depot_cache_has(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                    uint64_t iOwner, uint32_t szPage){
  CacheEntry *e;
  int bHas;
  pthread_mutex_lock(&p->mutex);
  e = *cacheFind(p, iBranch, pgno, iOwner);
  bHas = e!=0 && e->szPage==szPage;
  pthread_mutex_unlock(&p->mutex);
  return bHas;
}

/* Add page a unless the cache has it or is smaller than a page.  A page
** that needs room is dropped instead when the least recently used entry
** is of its own kind: for a scan's page (eKind CACHE_SCAN) a scan's page,
** for a bulk page (CACHE_BULK) one of the same branch and owner.  So a
** scan only ever evicts what other reads brought in, and a transaction's
** pages never evict its own.  A staged page (a bulk page whose owner has
** DEPOT_CACHE_STAGED) counts as a scan's until depot_cache_rekey()
** publishes it. */
#define CACHE_READ 0
#define CACHE_SCAN 1
#define CACHE_BULK 2
static void cachePut(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                     uint64_t iOwner, uint32_t szPage, const unsigned char *a,
                     int eKind){
  CacheEntry *e, **pp;
  int64_t nNew = cacheEntryBytes(szPage);
  int bFits, bAdd;
  pthread_mutex_lock(&p->mutex);
  pp = cacheFind(p, iBranch, pgno, iOwner);
  bFits = cacheBytes(p)+nNew<=p->nMax || p->pTail==0;
  bAdd = *pp==0 && cacheBytes(p)-p->nUsed-p->nSpillHdr+nNew<=p->nMax
      && (eKind==CACHE_READ || bFits
          || (eKind==CACHE_SCAN && !p->pTail->bScan)
          || (eKind==CACHE_BULK && (p->pTail->iBranch!=iBranch
                                    || p->pTail->iOwner!=iOwner)));
  if( bAdd && (e = cacheEntryAlloc(p, szPage))!=0 ){
    CacheSlab *pSlab = e->pSlab;
    pp = cacheFind(p, iBranch, pgno, iOwner);  /* the alloc may move entries */
    memset(e, 0, sizeof(*e));
    e->pSlab = pSlab;
    e->iSpill = -1;
    e->bMem = 1;
    e->iBranch = iBranch; e->pgno = pgno; e->iOwner = iOwner;
    e->szPage = szPage;
    e->bScan = eKind==CACHE_SCAN
            || (eKind==CACHE_BULK && (iOwner & DEPOT_CACHE_STAGED)!=0);
    memcpy(e->a, a, szPage);
    *pp = e;
    cachePushFront(p, e);
    p->nUsed += nNew;
    p->nEntry++;
    cacheGrow(p);
    cacheEvict(p);
  }
  pthread_mutex_unlock(&p->mutex);
}

void depot_cache_put(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                     uint64_t iOwner, uint32_t szPage, const unsigned char *a){
  cachePut(p, iBranch, pgno, iOwner, szPage, a, CACHE_READ);
}

void depot_cache_put_bulk(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                          uint64_t iOwner, uint32_t szPage,
                          const unsigned char *a){
  cachePut(p, iBranch, pgno, iOwner, szPage, a, CACHE_BULK);
}

void depot_cache_put_scan(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                          uint64_t iOwner, uint32_t szPage,
                          const unsigned char *a){
  cachePut(p, iBranch, pgno, iOwner, szPage, a, CACHE_SCAN);
}

void depot_cache_put_spill(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                           uint64_t iOwner, uint32_t szPage,
                           const unsigned char *a){
  CacheEntry *h;
  int64_t iOff;
  pthread_mutex_lock(&p->mutex);
  if( *cacheFind(p, iBranch, pgno, iOwner)==0
   && p->nSpillHdr + (int64_t)sizeof(CacheEntry) <= p->nMax/2
   && spillReady(p) && spillSlot(p, szPage, 0, &iOff) ){
    if( (h = sqlite3_malloc64(sizeof(CacheEntry)))==0 ){
      spillFreeSlot(p, iOff);
    }else if( !spillWrite(p, a, szPage, iOff) ){
      sqlite3_free(h);
    }else{
      CacheEntry **pp = cacheFind(p, iBranch, pgno, iOwner);
      memset(h, 0, sizeof(*h));          /* pSlab NULL: its own allocation */
      h->iBranch = iBranch; h->pgno = pgno; h->iOwner = iOwner;
      h->szPage = szPage;
      h->iSpill = iOff;
      *pp = h;
      cachePushFront(p, h);
      p->nSpillHdr += (int64_t)sizeof(CacheEntry);
      p->nEntry++;
      cacheGrow(p);
      cacheEvict(p);
    }
  }
  pthread_mutex_unlock(&p->mutex);
}
