/*
** pcache.c -- the decoded-page cache (see vfs/pcache.h): a chained hash
** table over a doubly linked LRU list, bounded in bytes; pages of
** sequential scans never evict other scans' pages.
*/
#define _GNU_SOURCE 1            /* PTHREAD_MUTEX_ADAPTIVE_NP, where glibc */
#include "config.h"
#include "vfs/pcache.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>

typedef struct CacheEntry CacheEntry;
struct CacheEntry {
  uint64_t iBranch, iOwner;
  uint32_t pgno, szPage;
  int bScan;                      /* added by a scan (depot_cache_put_scan) */
  CacheEntry *pHashNext;
  CacheEntry *pPrev, *pNext;      /* LRU list, most recent at pHead */
  unsigned char a[];              /* szPage bytes */
};

struct DepotCache {
  pthread_mutex_t mutex;          /* guards every field below */
  int64_t nMax;                   /* bytes: entries, table and this */
  int64_t nUsed;                  /* bytes of the entries (headers too) */
  uint32_t nSlot;                 /* power of two */
  uint32_t nEntry;
  CacheEntry **aSlot;
  CacheEntry *pHead, *pTail;
};

#define CACHE_MIN_SLOT 16        /* the hash table's first size */

static int64_t nCacheHit = 0, nCacheMiss = 0;   /* atomic */

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

/* A connection's read-ahead thread puts pages while the connection looks
** pages up, each for a short stretch; where glibc has it the mutex is
** adaptive, so a collision spins briefly instead of a futex sleep and
** wake-up. */
static void cacheMutexInit(pthread_mutex_t *pMutex){
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
  cacheMutexInit(&p->mutex);
  return p;
}

void depot_cache_free(DepotCache *p){
  CacheEntry *e, *pNext;
  if( p==0 ) return;
  for(e=p->pHead; e; e=pNext){ pNext = e->pNext; sqlite3_free(e); }
  pthread_mutex_destroy(&p->mutex);
  sqlite3_free(p->aSlot);
  sqlite3_free(p);
}

static void cacheUnlink(DepotCache *p, CacheEntry *e){
  if( e->pPrev ) e->pPrev->pNext = e->pNext; else p->pHead = e->pNext;
  if( e->pNext ) e->pNext->pPrev = e->pPrev; else p->pTail = e->pPrev;
  e->pPrev = e->pNext = 0;
}

static void cachePushFront(DepotCache *p, CacheEntry *e){
  e->pNext = p->pHead;
  e->pPrev = 0;
  if( p->pHead ) p->pHead->pPrev = e; else p->pTail = e;
  p->pHead = e;
}

static CacheEntry **cacheFind(DepotCache *p, uint64_t b, uint32_t pgno,
                              uint64_t o){
  CacheEntry **pp = &p->aSlot[cacheHash(b, pgno, o) & (p->nSlot-1)];
  while( *pp && ((*pp)->pgno!=pgno || (*pp)->iOwner!=o || (*pp)->iBranch!=b) ){
    pp = &(*pp)->pHashNext;
  }
  return pp;
}

/* The bytes an entry of a szPage page takes. */
static int64_t cacheEntryBytes(uint32_t szPage){
  return (int64_t)sizeof(CacheEntry) + (int64_t)szPage;
}

/* The bytes the cache holds: its entries, its hash table and itself. */
static int64_t cacheBytes(const DepotCache *p){
  return p->nUsed + (int64_t)p->nSlot*(int64_t)sizeof(CacheEntry*)
       + (int64_t)sizeof(*p);
}

int64_t depot_cache_bytes_for(uint32_t nPage, uint32_t szPage){
  return (int64_t)nPage*cacheEntryBytes(szPage)
       + (int64_t)CACHE_MIN_SLOT*(int64_t)sizeof(CacheEntry*)
       + (int64_t)sizeof(DepotCache);
}

/* Remove entry e, whose hash chain link is *pp, and free it. */
static void cacheRemove(DepotCache *p, CacheEntry **pp, CacheEntry *e){
  *pp = e->pHashNext;
  cacheUnlink(p, e);
  p->nUsed -= cacheEntryBytes(e->szPage);
  p->nEntry--;
  sqlite3_free(e);
}

/* Drop least recently used entries until the cache fits nMax. */
static void cacheEvict(DepotCache *p){
  while( p->pTail && cacheBytes(p) > p->nMax ){
    CacheEntry *e = p->pTail;
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
  pthread_mutex_lock(&p->mutex);
  for(e=p->pHead; e; e=pNext){
    CacheEntry **pp;
    pNext = e->pNext;
    if( e->iBranch!=iBranch || e->iOwner!=iFrom ) continue;
    pp = cacheFind(p, iBranch, e->pgno, iFrom);
    if( xKeep && xKeep(pArg, e->pgno)
     && *cacheFind(p, iBranch, e->pgno, iTo)==0 ){
      CacheEntry **ppTo;
      *pp = e->pHashNext;                 /* out of the old key's chain */
      e->iOwner = iTo;
      e->bScan = 0;
      ppTo = &p->aSlot[cacheHash(iBranch, e->pgno, iTo) & (p->nSlot-1)];
      e->pHashNext = *ppTo;
      *ppTo = e;
    }else{
      cacheRemove(p, pp, e);
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

void depot_cache_set_limit(DepotCache *p, int64_t nMaxBytes){
  pthread_mutex_lock(&p->mutex);
  p->nMax = nMaxBytes<0 ? 0 : nMaxBytes;
  cacheEvict(p);
  pthread_mutex_unlock(&p->mutex);
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
  n = cacheBytes(p);
  pthread_mutex_unlock(&p->mutex);
  return n;
}

int depot_cache_get(DepotCache *p, uint64_t iBranch, uint32_t pgno,
                    uint64_t iOwner, uint32_t szPage, unsigned char *pOut){
  CacheEntry *e;
  int bHit = 0;
  pthread_mutex_lock(&p->mutex);
  e = *cacheFind(p, iBranch, pgno, iOwner);
  if( e && e->szPage==szPage ){
    memcpy(pOut, e->a, szPage);
    cacheUnlink(p, e);
    cachePushFront(p, e);
    bHit = 1;
  }
  pthread_mutex_unlock(&p->mutex);
  __atomic_add_fetch(bHit ? &nCacheHit : &nCacheMiss, 1, __ATOMIC_RELAXED);
  return bHit;
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
  int bFits;
  pthread_mutex_lock(&p->mutex);
  pp = cacheFind(p, iBranch, pgno, iOwner);
  bFits = cacheBytes(p)+nNew<=p->nMax || p->pTail==0;
  if( *pp==0 && cacheBytes(p)-p->nUsed+nNew<=p->nMax
   && (eKind==CACHE_READ || bFits
       || (eKind==CACHE_SCAN && !p->pTail->bScan)
       || (eKind==CACHE_BULK && (p->pTail->iBranch!=iBranch
                                 || p->pTail->iOwner!=iOwner))) ){
    e = sqlite3_malloc64(sizeof(*e)+szPage);
    if( e ){
      memset(e, 0, sizeof(*e));
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
