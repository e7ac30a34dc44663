/*
** txbuf.c -- the transaction write buffer (see vfs/txbuf.h): an
** open-addressing hash table from page number to a page copy, and a
** bitmap of the staged pages.
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

/* A copy is szPage bytes and one more, after them: 1 once the page was
** put again while the buffer held it (txbuf_rewritten()). */
int txbuf_put(TxBuf *p, uint32_t pgno, const void *pPage, uint32_t szPage){
  unsigned char *a = txbuf_get(p, pgno);
  if( a==0 ){
    if( (p->nUsed+1)*2 > p->nSlot ){
      int rc = txbufRehash(p, p->nSlot ? p->nSlot*2 : 64, 0xffffffffu);
      if( rc!=SQLITE_OK ) return rc;
    }
    a = sqlite3_malloc64((uint64_t)szPage+1);
    if( a==0 ) return SQLITE_NOMEM;
    txbufInsert(p->aPgno, p->apPage, p->nSlot, pgno, a);
    p->nUsed++;
    a[szPage] = 0;
  }else{
    a[szPage] = 1;
  }
  memcpy(a, pPage, szPage);
  return SQLITE_OK;
}

int txbuf_rewritten(const TxBuf *p, uint32_t pgno, uint32_t szPage){
  const unsigned char *a = txbuf_get(p, pgno);
  return a!=0 && a[szPage]!=0;
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

int txstage_reserve(TxStage *p, uint32_t pgno){
  uint32_t iWord = pgno ? (pgno-1)/64 : 0;
  if( p->aGone==0 ){
    p->aGone = sqlite3_malloc64(sizeof(uint32_t)*TXSTAGE_GONE);
    if( p->aGone==0 ) return SQLITE_NOMEM;
  }
  if( iWord>=p->nWord ){
    /* grown in steps of 4 KiB (32 Ki pages), so it stays within 4 KiB
    ** of one bit per page up to the highest page staged */
    uint64_t nNew = ((uint64_t)iWord/512 + 1)*512;
    uint64_t *a = sqlite3_realloc64(p->aBit, sizeof(uint64_t)*nNew);
    if( a==0 ) return SQLITE_NOMEM;
    memset(a+p->nWord, 0, sizeof(uint64_t)*(nNew-p->nWord));
    p->aBit = a;
    p->nWord = (uint32_t)nNew;
  }
  return SQLITE_OK;
}

int txstage_set(TxStage *p, uint32_t pgno){
  int rc;
  if( pgno==0 ) return SQLITE_OK;
  rc = txstage_reserve(p, pgno);
  if( rc==SQLITE_OK ) p->aBit[(pgno-1)/64] |= 1ULL<<((pgno-1)%64);
  return rc;
}

int txstage_has(const TxStage *p, uint32_t pgno){
  uint32_t iWord = (pgno-1)/64;
  if( pgno==0 || iWord>=p->nWord ) return 0;
  return (p->aBit[iWord]>>((pgno-1)%64)) & 1;
}

int txstage_unset(TxStage *p, uint32_t pgno, int bGone){
  if( !txstage_has(p, pgno) ) return SQLITE_OK;
  if( bGone ){
    if( p->aGone==0 ){
      p->aGone = sqlite3_malloc64(sizeof(uint32_t)*TXSTAGE_GONE);
      if( p->aGone==0 ) return SQLITE_NOMEM;
    }
    if( p->nGone>=TXSTAGE_GONE ) return SQLITE_FULL;
    p->aGone[p->nGone++] = pgno;
  }
  p->aBit[(pgno-1)/64] &= ~(1ULL<<((pgno-1)%64));
  return SQLITE_OK;
}

uint32_t txstage_next(const TxStage *p, uint32_t pgno){
  uint64_t iBit = pgno;                /* bit of page pgno+1 */
  uint32_t iWord = (uint32_t)(iBit/64);
  uint64_t m;
  if( iWord>=p->nWord ) return 0;
  m = p->aBit[iWord] & (~0ULL << (iBit%64));
  while( m==0 ){
    if( ++iWord>=p->nWord ) return 0;
    m = p->aBit[iWord];
  }
  return iWord*64 + (uint32_t)__builtin_ctzll(m) + 1;
}

void txstage_clear(TxStage *p){
  sqlite3_free(p->aBit);
  sqlite3_free(p->aGone);
  memset(p, 0, sizeof(*p));
}

int64_t txstage_bytes(const TxStage *p){
  return (int64_t)p->nWord*8 + (p->aGone ? 4*TXSTAGE_GONE : 0);
}
