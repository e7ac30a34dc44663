/*
** confirm.c -- confirmation bookkeeping of the root WAL: which durable
** records still wait for which tables, per-segment counts of unconfirmed
** records, and retirement of the fully confirmed prefix of segments.
**
** Unconfirmed records live in aUnconf[], ordered by CID (groups finish in
** CID order, and open loads segments oldest first), so wal_confirm() finds
** a record by binary search.  A confirmed entry is freed at once and its
** slot is dropped when it reaches the head.  A segment is retired only when
** it and every older segment have no unconfirmed record and it is not the
** active segment; retirement runs under retireMutex so files disappear
** oldest first even when several threads confirm at once.
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <string.h>

/* True if name i of az/an repeats one of the names before it. */
static int confirmRepeats(const char *const *az, const int *an, int i){
  int k;
  for(k=0; k<i; k++){
    if( an[k]==an[i] && memcmp(az[k], az[i], an[i])==0 ) return 1;
  }
  return 0;
}

/* A record waiting for the nName tables az/an (repeats counted once). */
WalPend *wal_pend_new(uint64_t cid, int nName, const char *const *az,
                      const int *an){
  size_t nByte = sizeof(WalPend) + sizeof(WalName)*(size_t)nName;
  WalPend *p;
  char *z;
  int i;
  for(i=0; i<nName; i++) nByte += (size_t)an[i];
  p = sqlite3_malloc64(nByte);
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  p->cid = cid;
  p->aName = (WalName*)&p[1];
  z = (char*)&p->aName[nName];
  for(i=0; i<nName; i++){
    if( confirmRepeats(az, an, i) ) continue;
    memcpy(z, az[i], an[i]);
    p->aName[p->nPending].z = z;
    p->aName[p->nPending].n = an[i];
    p->nPending++;
    z += an[i];
  }
  return p;
}

int wal_unconf_reserve(Wal *p, int nMore){
  int nLive = p->nUnconf - p->iUnconfHead;
  int nNew;
  WalUnconf *aNew;
  if( p->nUnconf + nMore <= p->nUnconfAlloc ) return SQLITE_OK;
  if( p->iUnconfHead>0 ){
    memmove(p->aUnconf, &p->aUnconf[p->iUnconfHead],
            sizeof(WalUnconf)*(size_t)nLive);
    p->nUnconf = nLive;
    p->iUnconfHead = 0;
    if( nLive + nMore <= p->nUnconfAlloc ) return SQLITE_OK;
  }
  nNew = p->nUnconfAlloc ? p->nUnconfAlloc*2 : 64;
  while( nNew < nLive + nMore ) nNew *= 2;
  aNew = sqlite3_realloc64(p->aUnconf, sizeof(WalUnconf)*(size_t)nNew);
  if( aNew==0 ) return SQLITE_NOMEM;
  p->aUnconf = aNew;
  p->nUnconfAlloc = nNew;
  return SQLITE_OK;
}

void wal_unconf_push(Wal *p, WalPend *pPend){
  WalUnconf *e = &p->aUnconf[p->nUnconf++];
  e->cid = pPend->cid;
  e->p = pPend;
  p->nUnconfirmed++;
}

int wal_seg_reserve(Wal *p){
  int nNew;
  WalSeg *aNew;
  if( p->nSeg < p->nSegAlloc ) return SQLITE_OK;
  nNew = p->nSegAlloc ? p->nSegAlloc*2 : 8;
  aNew = sqlite3_realloc64(p->aSeg, sizeof(WalSeg)*(size_t)nNew);
  if( aNew==0 ) return SQLITE_NOMEM;
  p->aSeg = aNew;
  p->nSegAlloc = nNew;
  return SQLITE_OK;
}

/* Index in aUnconf of the live entry for cid, or -1. */
static int confirmFind(Wal *p, uint64_t cid){
  int lo = p->iUnconfHead, hi = p->nUnconf - 1;
  while( lo<=hi ){
    int mid = lo + (hi-lo)/2;
    if( p->aUnconf[mid].cid==cid ) return p->aUnconf[mid].p ? mid : -1;
    if( p->aUnconf[mid].cid<cid ) lo = mid+1; else hi = mid-1;
  }
  return -1;
}

int wal_unconf_has(Wal *p, uint64_t cid){
  return confirmFind(p, cid)>=0;
}

static WalSeg *confirmSeg(Wal *p, uint64_t segno){
  int i;
  for(i=0; i<p->nSeg; i++){
    if( p->aSeg[i].segno==segno ) return &p->aSeg[i];
  }
  return 0;
}

/* Entry i is fully confirmed: drop it and the dead entries at the head.
** Returns true if the oldest segment may now be retirable. */
static int confirmDone(Wal *p, int i){
  WalPend *pPend = p->aUnconf[i].p;
  WalSeg *pSeg = confirmSeg(p, pPend->segno);
  if( pSeg ) pSeg->nUnconf--;
  p->aUnconf[i].p = 0;
  p->nUnconfirmed--;
  sqlite3_free(pPend);
  while( p->iUnconfHead<p->nUnconf && p->aUnconf[p->iUnconfHead].p==0 ){
    p->iUnconfHead++;
  }
  if( p->iUnconfHead==p->nUnconf ) p->iUnconfHead = p->nUnconf = 0;
  return p->nSeg>1 && p->aSeg[0].nUnconf==0;
}

/* Removes table zTable from the waiting list of entry i.  Returns true
** when the record became confirmed and a segment may be retirable. */
static int confirmTable(Wal *p, int i, const char *zTable, int nTable){
  WalPend *pPend = p->aUnconf[i].p;
  int k;
  for(k=0; k<pPend->nPending; k++){
    WalName *pName = &pPend->aName[k];
    if( pName->n==nTable && memcmp(pName->z, zTable, nTable)==0 ){
      pPend->aName[k] = pPend->aName[--pPend->nPending];
      return pPend->nPending==0 ? confirmDone(p, i) : 0;
    }
  }
  return 0;
}

int wal_confirm(Wal *p, uint64_t cid, const char *zTable, int nTable){
  int i, bRetire = 0;
  if( p==0 || zTable==0 || nTable<=0 ) return SQLITE_MISUSE;
  pthread_mutex_lock(&p->mutex);
  i = confirmFind(p, cid);
  if( i>=0 ) bRetire = confirmTable(p, i, zTable, nTable);
  pthread_mutex_unlock(&p->mutex);
  if( bRetire ) wal_retire(p);
  return SQLITE_OK;
}

int wal_unconf_drop(Wal *p, uint64_t cid){
  int i = confirmFind(p, cid);
  return i>=0 ? confirmDone(p, i) : 0;
}

int wal_confirm_record(Wal *p, uint64_t cid){
  int i, bRetire = 0;
  if( p==0 ) return SQLITE_MISUSE;
  pthread_mutex_lock(&p->mutex);
  i = confirmFind(p, cid);
  if( i>=0 ) bRetire = confirmDone(p, i);
  pthread_mutex_unlock(&p->mutex);
  if( bRetire ) wal_retire(p);
  return SQLITE_OK;
}

/* Detaches the retirable prefix of aSeg into a new array (*paSegno,
** sqlite3_malloc'd).  Mutex held.  Returns how many. */
static int confirmDetach(Wal *p, uint64_t **paSegno){
  int n = 0, i;
  uint64_t *a;
  *paSegno = 0;
  if( p->bHold || p->bShared ) return 0;
  while( n<p->nSeg-1 && p->aSeg[n].nUnconf==0 ) n++;
  if( n==0 ) return 0;
  a = sqlite3_malloc64(sizeof(uint64_t)*(size_t)n);
  if( a==0 ) return 0;             /* retried by the next confirmation */
  for(i=0; i<n; i++) a[i] = p->aSeg[i].segno;
  memmove(p->aSeg, &p->aSeg[n], sizeof(WalSeg)*(size_t)(p->nSeg-n));
  p->nSeg -= n;
  *paSegno = a;
  return n;
}

void wal_set_shared(Wal *p, int bShared){
  int bRetire;
  if( p==0 ) return;
  pthread_mutex_lock(&p->mutex);
  bRetire = p->bShared && !bShared;
  p->bShared = bShared;
  pthread_mutex_unlock(&p->mutex);
  if( bRetire ) wal_retire(p);     /* what was confirmed meanwhile */
}

void wal_hold(Wal *p){
  if( p==0 ) return;
  pthread_mutex_lock(&p->mutex);
  p->bHold = 1;
  pthread_mutex_unlock(&p->mutex);
}

void wal_retire(Wal *p){
  uint64_t *aSegno;
  int n, i;
  pthread_mutex_lock(&p->retireMutex);
  pthread_mutex_lock(&p->mutex);
  n = confirmDetach(p, &aSegno);
  pthread_mutex_unlock(&p->mutex);
  for(i=0; i<n; i++){
    char *zErr = 0;
    int rc = wal_segment_retire(p->pIo, p->zWalDir, aSegno[i],
                   __atomic_load_n(&p->bKeepBak, __ATOMIC_RELAXED), &zErr);
    /* The segment is fully confirmed: if it cannot be removed, reopening
    ** only replays confirmed records again, which replay tolerates. */
    if( rc!=SQLITE_OK ) sqlite3_log(rc, "%s", zErr ? zErr : "wal: retire");
    sqlite3_free(zErr);
  }
  sqlite3_free(aSegno);
  pthread_mutex_unlock(&p->retireMutex);
}

int wal_shared_retire(Wal *p, uint64_t segBefore, int *pnRetired,
                      char **pzErr){
  uint64_t *aSegno = 0;
  uint64_t segUpTo = segBefore;      /* every segment below it is gone */
  int nSegno = 0, n = 0, i, k, rc;
  if( pnRetired ) *pnRetired = 0;
  if( p==0 ) return SQLITE_MISUSE;
  pthread_mutex_lock(&p->retireMutex);
  rc = wal_segment_list(p->zWalDir, &aSegno, &nSegno, pzErr);
  if( rc!=SQLITE_OK ) segUpTo = 0;
  /* This Wal's active segment may be among them: its next append adopts
  ** the published tail first, which lies in a later segment. */
  for(i=0; rc==SQLITE_OK && i<nSegno && aSegno[i]<segBefore; i++){
    rc = wal_segment_retire(p->pIo, p->zWalDir, aSegno[i],
                   __atomic_load_n(&p->bKeepBak, __ATOMIC_RELAXED), pzErr);
    if( rc==SQLITE_OK ) n++; else segUpTo = aSegno[i];
  }
  pthread_mutex_lock(&p->mutex);
  for(k=0; k<p->nSeg-1 && p->aSeg[k].segno<segUpTo; k++){}
  if( k>0 ){
    memmove(p->aSeg, &p->aSeg[k], sizeof(WalSeg)*(size_t)(p->nSeg-k));
    p->nSeg -= k;
  }
  pthread_mutex_unlock(&p->mutex);
  pthread_mutex_unlock(&p->retireMutex);
  sqlite3_free(aSegno);
  if( pnRetired ) *pnRetired = n;
  return rc;
}
