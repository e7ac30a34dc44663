/*
** pagemap.c -- the page map (see vfs/pagemap.h): a dense array indexed by
** page number, grown on demand up to the byte limit.
*/
#include "config.h"
#include "vfs/pagemap.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>

typedef struct MapEntry MapEntry;
struct MapEntry {
  DepotPageLoc loc;             /* loc.eKind 0: no entry */
  uint64_t iLo;                 /* valid for caps in [iLo, map's iHead] */
};

struct DepotPageMap {
  pthread_mutex_t mutex;        /* guards every field below */
  int64_t nMax;                 /* bytes */
  int bLive;                    /* iTop, iHead name a head */
  uint64_t iTop, iHead;
  uint32_t nAlloc;              /* entries allocated (pages 1..nAlloc) */
  MapEntry *a;                  /* a[pgno-1] */
};

static int64_t nMapHit = 0, nMapMiss = 0;   /* atomic */

void depot_pagemap_counters(int64_t *pnHit, int64_t *pnMiss){
  *pnHit = __atomic_load_n(&nMapHit, __ATOMIC_RELAXED);
  *pnMiss = __atomic_load_n(&nMapMiss, __ATOMIC_RELAXED);
}

int64_t depot_pagemap_entry_bytes(void){
  return (int64_t)sizeof(MapEntry);
}

DepotPageMap *depot_pagemap_new(int64_t nMaxBytes){
  DepotPageMap *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  p->nMax = nMaxBytes<0 ? 0 : nMaxBytes;
  pthread_mutex_init(&p->mutex, 0);
  return p;
}

void depot_pagemap_free(DepotPageMap *p){
  if( p==0 ) return;
  pthread_mutex_destroy(&p->mutex);
  sqlite3_free(p->a);
  sqlite3_free(p);
}

/* Forget every entry and the head (the array is kept). */
static void mapClear(DepotPageMap *p){
  if( p->a ) memset(p->a, 0, sizeof(MapEntry)*p->nAlloc);
  p->bLive = 0;
}

/* Start over at (iTop, iHead). */
static void mapReset(DepotPageMap *p, uint64_t iTop, uint64_t iHead){
  mapClear(p);
  p->bLive = 1;
  p->iTop = iTop;
  p->iHead = iHead;
}

void depot_pagemap_set_limit(DepotPageMap *p, int64_t nMaxBytes){
  pthread_mutex_lock(&p->mutex);
  p->nMax = nMaxBytes<0 ? 0 : nMaxBytes;
  sqlite3_free(p->a);
  p->a = 0;
  p->nAlloc = 0;
  p->bLive = 0;
  pthread_mutex_unlock(&p->mutex);
}

int64_t depot_pagemap_limit(DepotPageMap *p){
  int64_t n;
  pthread_mutex_lock(&p->mutex);
  n = p->nMax;
  pthread_mutex_unlock(&p->mutex);
  return n;
}

int64_t depot_pagemap_used(DepotPageMap *p){
  int64_t n;
  pthread_mutex_lock(&p->mutex);
  n = (int64_t)p->nAlloc*(int64_t)sizeof(MapEntry) + (int64_t)sizeof(*p);
  pthread_mutex_unlock(&p->mutex);
  return n;
}

/* The entry of pgno, growing the array (doubling, within the limit, which
** counts the array and the map) when needed; NULL when pgno is past the
** limit or out of memory. */
static MapEntry *mapSlot(DepotPageMap *p, uint32_t pgno){
  /* the array and the map itself fit the limit */
  int64_t nCap = (p->nMax - (int64_t)sizeof(*p)) / (int64_t)sizeof(MapEntry);
  if( pgno==0 || (int64_t)pgno>nCap ) return 0;
  if( pgno>p->nAlloc ){
    int64_t n = p->nAlloc ? (int64_t)p->nAlloc*2 : 1024;
    MapEntry *a;
    while( n<(int64_t)pgno ) n *= 2;
    if( n>nCap ) n = nCap;
    a = sqlite3_realloc64(p->a, sizeof(MapEntry)*(uint64_t)n);
    if( a==0 ) return 0;
    memset(a+p->nAlloc, 0, sizeof(MapEntry)*(uint64_t)(n-p->nAlloc));
    p->a = a;
    p->nAlloc = (uint32_t)n;
  }
  return &p->a[pgno-1];
}

int depot_pagemap_get(DepotPageMap *p, uint64_t iTop, uint64_t iCap,
                      uint32_t pgno, DepotPageLoc *pLoc){
  int bHit = 0;
  pthread_mutex_lock(&p->mutex);
  if( p->bLive && p->iTop==iTop && iCap<=p->iHead && pgno>=1
   && pgno<=p->nAlloc ){
    MapEntry *e = &p->a[pgno-1];
    if( e->loc.eKind && e->iLo<=iCap ){
      *pLoc = e->loc;
      bHit = 1;
    }
  }
  pthread_mutex_unlock(&p->mutex);
  __atomic_add_fetch(bHit ? &nMapHit : &nMapMiss, 1, __ATOMIC_RELAXED);
  return bHit;
}

void depot_pagemap_put(DepotPageMap *p, uint64_t iTop, uint64_t iCap,
                       uint32_t pgno, const DepotPageLoc *pLoc){
  MapEntry *e;
  pthread_mutex_lock(&p->mutex);
  if( !p->bLive || p->iTop!=iTop || p->iHead<iCap ) mapReset(p, iTop, iCap);
  if( p->iHead==iCap && (e = mapSlot(p, pgno))!=0 ){
    e->loc = *pLoc;
    e->iLo = iCap;
  }
  pthread_mutex_unlock(&p->mutex);
}

void depot_pagemap_commit(DepotPageMap *p, uint64_t iTop, uint64_t iBase,
                          uint64_t iNew, uint32_t n, const uint32_t *aPgno,
                          const DepotPageLoc *aLoc){
  uint32_t i;
  pthread_mutex_lock(&p->mutex);
  if( p->bLive && p->iTop==iTop && p->iHead==iBase && iNew>iBase ){
    p->iHead = iNew;
  }else{
    mapReset(p, iTop, iNew);
  }
  for(i=0; i<n; i++){
    MapEntry *e;
    if( aLoc ){
      e = mapSlot(p, aPgno[i]);
      if( e ){
        e->loc = aLoc[i];
        e->iLo = iNew;
      }
    }else if( aPgno[i]>=1 && aPgno[i]<=p->nAlloc ){
      memset(&p->a[aPgno[i]-1], 0, sizeof(MapEntry));
    }
  }
  pthread_mutex_unlock(&p->mutex);
}
