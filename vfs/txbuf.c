/*
** txbuf.c -- the transaction write buffer (see vfs/txbuf.h): an
** open-addressing hash table from page number to a page copy, and one
** from page number to a staged frame's location.
*/
#include "config.h"
#include "vfs/txbuf.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>

static uint32_t txbufSlot(uint32_t pgno, uint32_t nSlot){
  return (pgno*2654435761u) & (nSlot-1);
}

static void txbufInsert(uint32_t *aPgno, unsigned char **apPage,
                        uint32_t nSlot, uint32_t pgno, unsigned char *p){
  uint32_t i = txbufSlot(pgno, nSlot);
  while( aPgno[i] ) i = (i+1) & (nSlot-1);
  aPgno[i] = pgno;
  apPage[i] = p;
}

/* Rehash into nSlot slots, keeping only pages <= nKeep. */
static int txbufRehash(TxBuf *p, uint32_t nSlot, uint32_t nKeep){
  uint32_t *aPgno = sqlite3_malloc64(sizeof(uint32_t)*(uint64_t)nSlot);
  unsigned char **apPage = sqlite3_malloc64(sizeof(void*)*(uint64_t)nSlot);
  uint32_t i;
  if( aPgno==0 || apPage==0 ){
    sqlite3_free(aPgno);
    sqlite3_free(apPage);
    return SQLITE_NOMEM;
  }
  memset(aPgno, 0, sizeof(uint32_t)*(uint64_t)nSlot);
  p->nUsed = 0;
  for(i=0; i<p->nSlot; i++){
    if( p->aPgno[i]==0 ) continue;
    if( p->aPgno[i]>nKeep ){
      sqlite3_free(p->apPage[i]);
    }else{
      txbufInsert(aPgno, apPage, nSlot, p->aPgno[i], p->apPage[i]);
      p->nUsed++;
    }
  }
  sqlite3_free(p->aPgno);
  sqlite3_free(p->apPage);
  p->aPgno = aPgno;
  p->apPage = apPage;
  p->nSlot = nSlot;
  return SQLITE_OK;
}

unsigned char *txbuf_get(const TxBuf *p, uint32_t pgno){
  uint32_t i;
  if( p->nSlot==0 ) return 0;
  i = txbufSlot(pgno, p->nSlot);
  while( p->aPgno[i] ){
    if( p->aPgno[i]==pgno ) return p->apPage[i];
    i = (i+1) & (p->nSlot-1);
  }
  return 0;
}

int txbuf_put(TxBuf *p, uint32_t pgno, const void *pPage, uint32_t szPage){
  unsigned char *a = txbuf_get(p, pgno);
  if( a==0 ){
    if( (p->nUsed+1)*2 > p->nSlot ){
      int rc = txbufRehash(p, p->nSlot ? p->nSlot*2 : 64, 0xffffffffu);
      if( rc!=SQLITE_OK ) return rc;
    }
    a = sqlite3_malloc64(szPage);
    if( a==0 ) return SQLITE_NOMEM;
    txbufInsert(p->aPgno, p->apPage, p->nSlot, pgno, a);
    p->nUsed++;
  }
  memcpy(a, pPage, szPage);
  return SQLITE_OK;
}

void txbuf_drop(TxBuf *p, uint32_t pgno){
  uint32_t i, j, mask = p->nSlot-1;
  if( p->nSlot==0 ) return;
  i = txbufSlot(pgno, p->nSlot);
  while( p->aPgno[i] && p->aPgno[i]!=pgno ) i = (i+1) & mask;
  if( p->aPgno[i]==0 ) return;
  sqlite3_free(p->apPage[i]);
  p->aPgno[i] = 0;
  p->nUsed--;
  /* Shift back the entries of the probe run after the hole that may not
  ** stay behind it (linear probing deletion). */
  for(j=(i+1) & mask; p->aPgno[j]; j=(j+1) & mask){
    uint32_t k = txbufSlot(p->aPgno[j], p->nSlot);
    if( i<=j ? (i<k && k<=j) : (i<k || k<=j) ) continue;
    p->aPgno[i] = p->aPgno[j];
    p->apPage[i] = p->apPage[j];
    p->aPgno[j] = 0;
    i = j;
  }
}

int txbuf_truncate(TxBuf *p, uint32_t nPage){
  if( p->nSlot==0 ) return SQLITE_OK;
  return txbufRehash(p, p->nSlot, nPage);
}

void txbuf_clear(TxBuf *p){
  uint32_t i;
  for(i=0; i<p->nSlot; i++){
    if( p->aPgno[i] ) sqlite3_free(p->apPage[i]);
  }
  sqlite3_free(p->aPgno);
  sqlite3_free(p->apPage);
  memset(p, 0, sizeof(*p));
}

static int txbufCmp(const void *a, const void *b){
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return x<y ? -1 : x>y;
}

int txbuf_sorted(const TxBuf *p, uint32_t **paPgno, uint32_t *pnPgno){
  uint32_t *a = sqlite3_malloc64(sizeof(uint32_t)*((uint64_t)p->nUsed+1));
  uint32_t i, n = 0;
  if( a==0 ) return SQLITE_NOMEM;
  for(i=0; i<p->nSlot; i++){
    if( p->aPgno[i] ) a[n++] = p->aPgno[i];
  }
  qsort(a, n, sizeof(uint32_t), txbufCmp);
  *paPgno = a;
  *pnPgno = n;
  return SQLITE_OK;
}

int64_t txbuf_bytes(const TxBuf *p, uint32_t szPage){
  return (int64_t)p->nUsed*szPage;
}

/* ---- staged pages ---- */

static TxStaged *txstageFind(const TxStage *p, uint32_t pgno){
  uint32_t i;
  if( p->nSlot==0 ) return 0;
  i = txbufSlot(pgno, p->nSlot);
  while( p->a[i].pgno ){
    if( p->a[i].pgno==pgno ) return &p->a[i];
    i = (i+1) & (p->nSlot-1);
  }
  return 0;
}

/* Rehash into nSlot slots, keeping live and dead entries; live pages
** above nKeep become dead. */
static int txstageRehash(TxStage *p, uint32_t nSlot, uint32_t nKeep){
  TxStaged *a = sqlite3_malloc64(sizeof(TxStaged)*(uint64_t)nSlot);
  uint32_t i;
  if( a==0 ) return SQLITE_NOMEM;
  memset(a, 0, sizeof(TxStaged)*(uint64_t)nSlot);
  p->nUsed = 0;
  p->nDead = 0;
  for(i=0; i<p->nSlot; i++){
    uint32_t j;
    if( p->a[i].pgno==0 || (p->a[i].nByte==0 && !p->a[i].bDead) ) continue;
    j = txbufSlot(p->a[i].pgno, nSlot);
    while( a[j].pgno ) j = (j+1) & (nSlot-1);
    a[j] = p->a[i];
    if( a[j].nByte && a[j].pgno>nKeep ){
      a[j].nByte = 0;
      a[j].bDead = 1;
    }
    p->nDead += a[j].bDead;
    p->nUsed++;
  }
  sqlite3_free(p->a);
  p->a = a;
  p->nSlot = nSlot;
  return SQLITE_OK;
}

int txstage_put(TxStage *p, const TxStaged *pSt){
  TxStaged *e = txstageFind(p, pSt->pgno);
  if( e==0 ){
    uint32_t i;
    if( (uint64_t)(p->nUsed+1)*4 > (uint64_t)p->nSlot*3 ){  /* 3/4 full */
      int rc = txstageRehash(p, p->nSlot ? p->nSlot*2 : 64, 0xffffffffu);
      if( rc!=SQLITE_OK ) return rc;
    }
    i = txbufSlot(pSt->pgno, p->nSlot);
    while( p->a[i].pgno ) i = (i+1) & (p->nSlot-1);
    e = &p->a[i];
    p->nUsed++;
  }else if( e->bDead ){
    p->nDead--;
  }
  *e = *pSt;
  e->bDead = 0;
  return SQLITE_OK;
}

const TxStaged *txstage_get(const TxStage *p, uint32_t pgno){
  const TxStaged *e = txstageFind(p, pgno);
  return e && e->nByte ? e : 0;
}

void txstage_drop(TxStage *p, uint32_t pgno){
  TxStaged *e = txstageFind(p, pgno);
  if( e && e->nByte ){       /* the slot stays, so probes go on past it */
    e->nByte = 0;
    e->bDead = 1;
    p->nDead++;
  }
}

uint32_t txstage_dead(const TxStage *p, uint32_t *aOut, uint32_t nMax){
  uint32_t i, n = 0;
  for(i=0; i<p->nSlot && n<nMax && n<p->nDead; i++){
    if( p->a[i].pgno && p->a[i].bDead ) aOut[n++] = p->a[i].pgno;
  }
  return n;
}

void txstage_undead(TxStage *p, uint32_t pgno){
  TxStaged *e = txstageFind(p, pgno);
  if( e && e->bDead ){
    e->bDead = 0;
    p->nDead--;
  }
}

int txstage_truncate(TxStage *p, uint32_t nPage){
  if( p->nSlot==0 ) return SQLITE_OK;
  return txstageRehash(p, p->nSlot, nPage);
}

void txstage_clear(TxStage *p){
  sqlite3_free(p->a);
  memset(p, 0, sizeof(*p));
}

static int txstagePgnoCmp(const void *a, const void *b){
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return x<y ? -1 : x>y;
}

int txstage_sorted_pgno(const TxStage *p, uint32_t **paOut, uint32_t *pnOut){
  uint32_t *a = sqlite3_malloc64(sizeof(uint32_t)*((uint64_t)p->nUsed+1));
  uint32_t i, n = 0;
  if( a==0 ) return SQLITE_NOMEM;
  for(i=0; i<p->nSlot; i++){
    if( p->a[i].pgno && p->a[i].nByte ) a[n++] = p->a[i].pgno;
  }
  qsort(a, n, sizeof(uint32_t), txstagePgnoCmp);
  *paOut = a;
  *pnOut = n;
  return SQLITE_OK;
}
