/*
** pitr.c -- point in time: the policy of a database (depot_pitr_set,
** depot_pitr_get), ISO-8601 times (depot_parse_time), the retention
** check, the search for the newest retained commit at or before a time,
** and resolving the `at` argument of the branch operations (the head, a
** txid, a time or a restore point) and of a bucket fork (a store
** sequence number or a time).
*/
#include "config.h"
#include "vfs/op.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <time.h>

#define PITR_MAX_POLICY_S     (100LL*366*86400)

static int pitrPolicy(Op *p, const char *zDb, PitrPolicy *pPol, int *pbSet){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, rc, i;
  pPol->iIntervalMs = DEPOT_PITR_DEFAULT_INTERVAL_S*1000LL;
  pPol->iRetentionMs = DEPOT_PITR_DEFAULT_RETENTION_S*1000LL;
  if( pbSet ) *pbSet = 0;
  for(i=zDb ? 0 : 1; i<2; i++){
    rc = store_get(p->pStore, k, layout_key_pitr(k, i==0 ? zDb : 0),
                   &pVal, &nVal);
    if( rc!=SQLITE_OK ) return op_store_err(p, rc);
    if( pVal==0 ) continue;
    rc = layout_pitr_decode(pVal, nVal, pPol);
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK ){
      return op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
          " point-in-time policy row"));
    }
    if( pbSet ) *pbSet = 1;
    break;
  }
  return SQLITE_OK;
}

/* Refuse time targets when the policy is off, the time is after now (no
** state of it exists yet) or older than the retention window. */
static int pitrCheckRetention(Op *p, const PitrPolicy *pPol, int64_t iMs,
                              const char *zText){
  if( pPol->iRetentionMs==0 ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: point-in-time"
        " restore is off for database %s (see depot_pitr_policy)", p->zDb));
  }
  if( iMs > op_now_ms() ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: %s is in the"
        " future: a point in time must be at or before now", zText));
  }
  if( iMs < op_now_ms() - pPol->iRetentionMs ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: %s is outside the"
        " point-in-time retention of database %s (%lld seconds)", zText,
        p->zDb, (long long)(pPol->iRetentionMs/1000)));
  }
  return SQLITE_OK;
}

/* One commit row found by a seek. */
typedef struct PitrRow PitrRow;
struct PitrRow {
  int bFound;
  int rc;
  uint64_t iTxid, iTimeMs;
};

static int pitrRow(void *pArg, const unsigned char *pKey, int nKey,
                   const unsigned char *pVal, int nVal){
  PitrRow *r = (PitrRow*)pArg;
  CommitRow row;
  (void)pKey; (void)nKey;
  r->bFound = 1;
  r->rc = layout_commit_decode(pVal, nVal, &row);
  r->iTxid = row.iTxid;
  r->iTimeMs = row.iTimeMs;
  return 1;
}

/* The first commit row of iBranch with lo <= txid <= hi. */
static int pitrCommitAtOrAfter(Op *p, uint64_t iBranch, uint64_t lo,
                               uint64_t hi, PitrRow *pRow){
  unsigned char kLo[LAYOUT_MAX_KEY], kHi[LAYOUT_MAX_KEY];
  int n = layout_key_commit(kLo, iBranch, lo), rc;
  layout_key_commit(kHi, iBranch, hi+1);
  memset(pRow, 0, sizeof(*pRow));
  rc = store_scan(p->pStore, kLo, n, kHi, n, 0, 1, pitrRow, pRow);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  if( pRow->rc!=SQLITE_OK ){
    return op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt commit"
        " row"));
  }
  return SQLITE_OK;
}

/* The newest commit of iBranch with txid <= iCap and time <= iMs (*piTxid
** 0: none): a binary search over txids, one seek per step, so it does not
** depend on how many commits there are (commit times of a branch follow
** its txids: the wall clock of each commit, which is assumed not to go
** backwards). */
static int pitrNewestAtOrBefore(Op *p, uint64_t iBranch, uint64_t iCap,
                                int64_t iMs, uint64_t *piTxid){
  uint64_t lo = 1, hi = iCap;
  int rc = SQLITE_OK;
  *piTxid = 0;
  while( rc==SQLITE_OK && lo<=hi && hi>0 ){
    uint64_t mid = lo + (hi-lo)/2;
    PitrRow r;
    rc = pitrCommitAtOrAfter(p, iBranch, mid, hi, &r);
    if( rc!=SQLITE_OK ) break;
    if( !r.bFound || (int64_t)r.iTimeMs>iMs ){
      hi = mid-1;
    }else{
      *piTxid = r.iTxid;
      lo = r.iTxid+1;
    }
  }
  return rc;
}

static int pitrPinTxidRow(void *pArg, const unsigned char *pKey, int nKey,
                          const unsigned char *pVal, int nVal){
  (void)pVal; (void)nVal;
  if( nKey>=18 ) *(uint64_t*)pArg = bytes_get64(pKey+10);
  return 1;
}

/* The newest txid of iBranch in (iAfter, iUpTo] that a DB_PIN row pins (a
** fork point, a restore point, a pointer move) into *piTxid; 0: none. */
static int pitrNewestPinIn(Op *p, uint64_t iBranch, uint64_t iAfter,
                           uint64_t iUpTo, uint64_t *piTxid){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_pin(lo, iBranch, iAfter+1, 0, 0, 0) - 1, rc;
  layout_key_pin(hi, iBranch, iUpTo+1, 0, 0, 0);
  *piTxid = 0;
  if( iUpTo<=iAfter ) return SQLITE_OK;
  rc = store_scan(p->pStore, lo, n, hi, n, STORE_SCAN_REVERSE, 1,
                  pitrPinTxidRow, piTxid);
  return rc==SQLITE_OK ? rc : op_store_err(p, rc);
}

/* The newest retained commit at or before iMs on one level (branch
** iBranch up to its cap iCap): the cap itself (a head or a pinned fork
** point) and every pinned commit are always retained, any other commit
** only when it is the last of its interval.  *piTxid 0: none on this
** level.  *pbAny is set when the level has a commit at or before iMs,
** retained or not. */
static int pitrLevel(Op *p, uint64_t iBranch, uint64_t iCap, int64_t iMs,
                     int64_t iInterval, uint64_t *piTxid, int *pbAny){
  PitrRow here, next;
  uint64_t t = 0;
  int rc = pitrNewestAtOrBefore(p, iBranch, iCap, iMs, &t);
  *piTxid = t;
  if( t ) *pbAny = 1;
  if( rc!=SQLITE_OK || t==0 || t==iCap || iInterval==0 ) return rc;
  rc = pitrCommitAtOrAfter(p, iBranch, t, t, &here);
  if( rc==SQLITE_OK ) rc = pitrCommitAtOrAfter(p, iBranch, t+1, iCap, &next);
  if( rc!=SQLITE_OK || !next.bFound
   || (int64_t)next.iTimeMs/iInterval != (int64_t)here.iTimeMs/iInterval ){
    return rc;
  }
  /* not the last of its interval: the last commit of an earlier one, or a
  ** pinned commit after that one */
  rc = pitrNewestAtOrBefore(p, iBranch, t-1,
      ((int64_t)here.iTimeMs/iInterval)*iInterval - 1, piTxid);
  if( rc==SQLITE_OK ) rc = pitrNewestPinIn(p, iBranch, *piTxid, t, &t);
  if( rc==SQLITE_OK && t ) *piTxid = t;
  return rc;
}

/* The newest retained commit at or before iMs along the chain of
** (iTop, iTopTxid). */
static int pitrFind(Op *p, const OpView *pV, int64_t iMs,
                    const PitrPolicy *pPol, const char *zText,
                    uint64_t *piBranch, uint64_t *piTxid){
  DepotChain chain;
  int rc = depot_db_chain(p->pStore, pV->iTop, pV->iTopTxid, &chain, p->pzErr);
  int i;
  int bAny = 0;
  for(i=0; rc==SQLITE_OK && i<chain.n; i++){
    uint64_t t = 0;
    if( chain.aCap[i]==0 ) continue;
    rc = pitrLevel(p, chain.aBranch[i], chain.aCap[i], iMs,
                   pPol->iIntervalMs, &t, &bAny);
    if( rc==SQLITE_OK && t ){
      *piBranch = chain.aBranch[i];
      *piTxid = t;
      return SQLITE_OK;
    }
  }
  if( rc!=SQLITE_OK ) return rc;
  if( bAny ){
    /* there are commits at or before it, but the interval keeps none */
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has"
        " no commit at or before %s retained for point-in-time restore (it"
        " keeps the last commit of each %lld-second interval, the branch"
        " heads and the pinned points; see depot_pitr_policy, or give the"
        " txid)", p->zDb, zText, (long long)(pPol->iIntervalMs/1000)));
  }
  return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has no"
      " commit at or before %s", p->zDb, zText));
}

/* A txid of the branch the name reads; a fork without commits of its own
** reads its parent's, so its txids are the parent's. */
static int pitrResolveTxid(Op *p, const OpView *pV, int64_t iTxid,
                           uint64_t *piBranch, uint64_t *piTxid){
  uint64_t b = pV->iTop, t = pV->iTopTxid;
  DbHead st;
  int rc;
  if( t==0 && (rc = op_normalize(p, &b, &t))!=SQLITE_OK ) return rc;
  if( iTxid<1 || (uint64_t)iTxid>t ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: txid %lld is"
        " not a commit of this branch of database %s (txids 1..%llu)",
        (long long)iTxid, p->zDb, (unsigned long long)t));
  }
  *piBranch = b;
  *piTxid = (uint64_t)iTxid;
  return depot_db_state_at(p->pStore, b, (uint64_t)iTxid, &st, p->pzErr);
}

/* The (branch, txid) that pAt names on view pV, normalized. */
int pitr_resolve_at(Op *p, const OpView *pV, const DepotAt *pAt,
                    uint64_t *piBranch, uint64_t *piTxid){
  int64_t iMs = 0;
  int rc = SQLITE_OK;
  if( pAt==0 || pAt->eType==DEPOT_AT_HEAD ){
    *piBranch = pV->iTop;
    *piTxid = pV->iTopTxid;
  }else if( pAt->eType==DEPOT_AT_TXID ){
    rc = pitrResolveTxid(p, pV, pAt->iTxid, piBranch, piTxid);
  }else if( depot_parse_time(pAt->zText, &iMs) ){
    PitrPolicy pol;
    rc = pitrPolicy(p, p->zDb, &pol, 0);
    if( rc==SQLITE_OK ) rc = pitrCheckRetention(p, &pol, iMs, pAt->zText);
    if( rc==SQLITE_OK ) rc = pitrFind(p, pV, iMs, &pol, pAt->zText,
                                      piBranch, piTxid);
  }else{
    RestorePoint rp;
    int bFound = 0;
    rc = op_restore_point(p, pAt->zText, &rp, &bFound);
    if( rc==SQLITE_OK && !bFound ){
      return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: '%s' is neither"
          " an ISO-8601 time nor a restore point of database %s",
          pAt->zText, p->zDb));
    }
    *piBranch = rp.iBranch;
    *piTxid = rp.iTxid;
  }
  if( rc==SQLITE_OK ) rc = op_normalize(p, piBranch, piTxid);
  return rc;
}

static int pitrLogRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  int64_t *a = (int64_t*)pArg;     /* a[0] time, a[1] found vs, a[2] rc */
  LogRow lg;
  if( nKey!=10 || layout_log_decode(pVal, nVal, &lg)!=SQLITE_OK ){
    a[2] = SQLITE_CORRUPT;
    return 1;
  }
  if( (int64_t)lg.iTimeMs<=a[0] ){
    a[1] = (int64_t)bytes_get64(pKey+2);
    return 1;
  }
  return 0;
}

/* The store sequence number pAt names for a bucket fork. */
int pitr_bucket_at(Op *p, const DepotAt *pAt, uint64_t *piVs){
  unsigned char k[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int64_t iNow = 0, a[3] = { 0, 0, SQLITE_OK }, iMs = 0;
  PitrPolicy pol;
  int rc = store_add(p->pStore, k, layout_key_ctr(k, "vs"), 0, &iNow);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  *piVs = (uint64_t)iNow;
  if( pAt==0 || pAt->eType==DEPOT_AT_HEAD ) return SQLITE_OK;
  if( pAt->eType==DEPOT_AT_TXID ){
    if( pAt->iTxid<1 || pAt->iTxid>iNow ){
      return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: store sequence"
          " %lld is out of range 1..%lld", (long long)pAt->iTxid,
          (long long)iNow));
    }
    *piVs = (uint64_t)pAt->iTxid;
    return SQLITE_OK;
  }
  if( !depot_parse_time(pAt->zText, &iMs) ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: a bucket fork"
        " point is NULL, a store sequence number or an ISO-8601 time, got"
        " '%s'", pAt->zText));
  }
  rc = pitrPolicy(p, 0, &pol, 0);
  if( rc==SQLITE_OK ) rc = pitrCheckRetention(p, &pol, iMs, pAt->zText);
  if( rc!=SQLITE_OK ) return rc;
  a[0] = iMs;
  layout_key_log(k, 0);
  layout_key_log(hi, UINT64_MAX);
  rc = store_scan(p->pStore, k, 10, hi, 10, STORE_SCAN_REVERSE, -1,
                  pitrLogRow, a);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  if( a[2]!=SQLITE_OK ){
    return op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt commit"
        " log row"));
  }
  *piVs = (uint64_t)a[1];
  return SQLITE_OK;
}

int depot_pitr_set(const char *zStore, const char *zDb, int64_t iIntervalS,
                   int64_t iRetentionS, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  PitrPolicy pol;
  Op op;
  int rc;
  if( iIntervalS<0 || iRetentionS<0 || iIntervalS>PITR_MAX_POLICY_S
   || iRetentionS>PITR_MAX_POLICY_S ){
    *pzErr = sqlite3_mprintf("depot: interval and retention are seconds"
        " 0..%lld, got %lld and %lld", PITR_MAX_POLICY_S,
        (long long)iIntervalS, (long long)iRetentionS);
    return SQLITE_ERROR;
  }
  rc = op_open(&op, zStore, zDb, pzErr);
  pol.iIntervalMs = iIntervalS*1000;
  pol.iRetentionMs = iRetentionS*1000;
  if( rc==SQLITE_OK ){
    rc = store_put(op.pStore, k, layout_key_pitr(k, zDb ? op.zDb : 0), v,
                   layout_pitr_encode(v, &pol));
    if( rc!=SQLITE_OK ) rc = op_store_err(&op, rc);
  }
  return op_end(&op, rc);
}

int depot_pitr_get(const char *zStore, const char *zDb, int64_t *piIntervalS,
                   int64_t *piRetentionS, char **pzErr){
  PitrPolicy pol;
  Op op;
  int rc = op_open_as(&op, zStore, zDb, 1, pzErr);
  if( rc==SQLITE_OK ) rc = pitrPolicy(&op, zDb ? op.zDb : 0, &pol, 0);
  if( rc==SQLITE_OK ){
    *piIntervalS = pol.iIntervalMs/1000;
    *piRetentionS = pol.iRetentionMs/1000;
  }
  return op_end(&op, rc);
}

/* ---- ISO-8601 ---- */

/* n digits at z into *pv; 0 if they are not all digits. */
static int pitrDigits(const char *z, int n, int *pv){
  int i;
  *pv = 0;
  for(i=0; i<n; i++){
    if( z[i]<'0' || z[i]>'9' ) return 0;
    *pv = *pv*10 + (z[i]-'0');
  }
  return 1;
}

/* The optional time part after a date; advances *pz. */
static int pitrTimePart(const char **pz, struct tm *pTm, int *pMs){
  const char *z = *pz;
  int ms = 0, i;
  if( *z!=' ' && *z!='T' ) return *z==0 || *z=='Z' || *z=='+' || *z=='-';
  z++;
  if( !pitrDigits(z, 2, &pTm->tm_hour) || z[2]!=':'
   || !pitrDigits(z+3, 2, &pTm->tm_min) ) return 0;
  z += 5;
  if( *z==':' ){
    if( !pitrDigits(z+1, 2, &pTm->tm_sec) ) return 0;
    z += 3;
    if( *z=='.' ){
      for(i=0, z++; *z>='0' && *z<='9'; z++, i++){
        if( i<3 ) ms = ms*10 + (*z-'0');
      }
      if( i==0 ) return 0;
      for(; i<3; i++) ms *= 10;
    }
  }
  *pMs = ms;
  *pz = z;
  return pTm->tm_hour<24 && pTm->tm_min<60 && pTm->tm_sec<61;
}

/* Days in month iMon (1..12) of year iYear. */
static int pitrMonthDays(int iYear, int iMon){
  static const int aDays[] = { 31,28,31,30,31,30,31,31,30,31,30,31 };
  int bLeap = (iYear%4==0 && iYear%100!=0) || iYear%400==0;
  return aDays[iMon-1] + (iMon==2 && bLeap);
}

int depot_parse_time(const char *z, int64_t *piMs){
  struct tm tm;
  int ms = 0, iOffMin = 0, hh, mm;
  time_t t;
  if( z==0 ) return 0;
  memset(&tm, 0, sizeof(tm));
  if( !pitrDigits(z, 4, &tm.tm_year) || z[4]!='-'
   || !pitrDigits(z+5, 2, &tm.tm_mon) || z[7]!='-'
   || !pitrDigits(z+8, 2, &tm.tm_mday) ) return 0;
  if( tm.tm_mon<1 || tm.tm_mon>12 || tm.tm_mday<1
   || tm.tm_mday>pitrMonthDays(tm.tm_year, tm.tm_mon) ) return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  z += 10;
  if( !pitrTimePart(&z, &tm, &ms) ) return 0;
  if( *z=='Z' ){
    z++;
  }else if( *z=='+' || *z=='-' ){
    if( !pitrDigits(z+1, 2, &hh) || z[3]!=':' || !pitrDigits(z+4, 2, &mm)
     || hh>23 || mm>59 ){
      return 0;
    }
    iOffMin = (hh*60+mm) * (*z=='-' ? -1 : 1);
    z += 6;
  }
  if( *z ) return 0;
  t = timegm(&tm);
  *piMs = ((int64_t)t - (int64_t)iOffMin*60)*1000 + ms;
  return 1;
}
