/*
** fork.c -- the branch operations of vfs/depot_vfs.h: forks, restore
** points, point-in-time targets, restore and rollback, dropping branches,
** bucket forks, and the listings behind depot_branches, depot_databases
** and depot_restore_points.  Each operation is one store transaction on
** its own store handle, so it is all or nothing, also under SIGKILL.
*/
#include "config.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define FORK_MAX_BUCKET_DEPTH 64
#define FORK_MAX_POLICY_S     (100LL*366*86400)

/* One idle store handle kept between operations, so a fork does not pay
** for opening the store file: reused only by the process that opened it
** (never across fork()) and only while the path still names the same file
** (device and inode), else closed.  Guarded by forkMutex. */
static pthread_mutex_t forkMutex = PTHREAD_MUTEX_INITIALIZER;
static struct {
  Store *pStore;
  char *zPath;
  dev_t dev;
  ino_t ino;
  pid_t pid;
} forkIdle;

/* Take the idle handle of zPath if it is still good, else NULL. */
static Store *forkTakeIdle(const char *zPath, const struct stat *pSt){
  Store *pStore = 0;
  pthread_mutex_lock(&forkMutex);
  if( forkIdle.pStore && strcmp(forkIdle.zPath, zPath)==0
   && forkIdle.pid==getpid() && forkIdle.dev==pSt->st_dev
   && forkIdle.ino==pSt->st_ino ){
    pStore = forkIdle.pStore;
    forkIdle.pStore = 0;
  }
  pthread_mutex_unlock(&forkMutex);
  return pStore;
}

/* Keep pStore (no transaction open) as the idle handle of zPath, closing
** the one it replaces, or close it. */
static void forkPutIdle(Store *pStore, const char *zPath){
  struct stat st;
  char *zCopy = sqlite3_mprintf("%s", zPath);
  Store *pOld = 0;
  if( zCopy==0 || stat(zPath, &st)!=0 ){
    sqlite3_free(zCopy);
    store_close(pStore);
    return;
  }
  pthread_mutex_lock(&forkMutex);
  if( forkIdle.pid==getpid() ) pOld = forkIdle.pStore;
  sqlite3_free(forkIdle.zPath);
  forkIdle.pStore = pStore;
  forkIdle.zPath = zCopy;
  forkIdle.dev = st.st_dev;
  forkIdle.ino = st.st_ino;
  forkIdle.pid = getpid();
  pthread_mutex_unlock(&forkMutex);
  store_close(pOld);
}

void depot_fork_idle_close(void){
  Store *pStore = 0;
  pthread_mutex_lock(&forkMutex);
  if( forkIdle.pid==getpid() ) pStore = forkIdle.pStore;
  forkIdle.pStore = 0;
  sqlite3_free(forkIdle.zPath);
  forkIdle.zPath = 0;
  pthread_mutex_unlock(&forkMutex);
  store_close(pStore);
}

/* An open operation: the store in a transaction and the database name. */
typedef struct Op Op;
struct Op {
  Store *pStore;
  const char *zPath;
  uint64_t iBucket;
  char zBucket[LAYOUT_MAX_NAME+1];
  char zDb[LAYOUT_MAX_NAME+1];
  char **pzErr;
  int bMedia;               /* opened immutable on read-only media: read
                            ** transaction, never kept as the idle handle */
};

/* Where a name leads: its own branch, or the inherited branch and cap. */
typedef struct View View;
struct View {
  uint64_t iOwn;            /* 0: inherited */
  uint64_t iTop, iTopTxid;  /* the state the name reads now */
};

static int opFail(Op *p, int rc, char *zMsg){
  sqlite3_free(*p->pzErr);
  *p->pzErr = zMsg;
  return rc;
}

static int opStoreErr(Op *p, int rc){
  return opFail(p, rc, sqlite3_mprintf("depot: %s", store_errmsg(p->pStore)));
}

static int64_t forkNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* A new store sequence number for a change of the catalog (fork, restore
** point, restore, rollback, drop) and its LOG row (branch 0, txid 0, the
** time now), so that a bucket fork at a time sees the catalog changes made
** before that time, not only the commits. */
static int opNextVs(Op *p, uint64_t *piVs){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  LogRow lg;
  int rc = depot_next_vs(p->pStore, piVs, p->pzErr);
  if( rc!=SQLITE_OK ) return rc;
  lg.iBranch = 0;
  lg.iTxid = 0;
  lg.iTimeMs = (uint64_t)forkNowMs();
  rc = store_put(p->pStore, k, layout_key_log(k, *piVs), v,
                 layout_log_encode(v, &lg));
  return rc==SQLITE_OK ? rc : opStoreErr(p, rc);
}

/* "NAME" or "BUCKET/NAME" into p->zBucket / p->zDb. */
static int opSplitName(Op *p, const char *zQual){
  const char *zSlash = zQual ? strchr(zQual, '/') : 0;
  size_t nB = zSlash ? (size_t)(zSlash-zQual) : 4;
  const char *zName = zSlash ? zSlash+1 : zQual;
  if( zQual==0 || nB<1 || nB>LAYOUT_MAX_NAME || !layout_name_ok(zName) ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: a database is"
        " named NAME or BUCKET/NAME, each part 1..%d bytes; got '%s'",
        LAYOUT_MAX_NAME, zQual ? zQual : "NULL"));
  }
  memcpy(p->zBucket, zSlash ? zQual : "main", nB);
  p->zBucket[nB] = 0;
  memcpy(p->zDb, zName, strlen(zName)+1);
  return SQLITE_OK;
}

static int opCheckName(Op *p, const char *zWhat, const char *z){
  if( layout_name_ok(z) ) return SQLITE_OK;
  return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: %s name must be"
      " 1..%d bytes, got %d", zWhat, LAYOUT_MAX_NAME, z ? (int)strlen(z) : 0));
}

/* Open zStore and start a write transaction; resolve the bucket of zQual
** (NULL: none).  With bRead (an operation that only reads), a store on
** read-only media is opened immutable in a read transaction instead, as
** depot_commits opens it (StoreSqliteConfig.bInspect). */
static int opOpenAs(Op *p, const char *zStore, const char *zQual, int bRead,
                    char **pzErr){
  StoreSqliteConfig cfg;
  struct stat st;
  int rc, bFound = 1;
  memset(p, 0, sizeof(*p));
  p->pzErr = pzErr;
  p->zPath = zStore;
  if( zQual && (rc = opSplitName(p, zQual))!=SQLITE_OK ) return rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSynchronous = 2;
  p->bMedia = bRead && depot_store_on_read_only_fs(zStore);
  cfg.bInspect = p->bMedia;
  if( !p->bMedia && stat(zStore, &st)==0 ){
    p->pStore = forkTakeIdle(zStore, &st);
  }
  if( p->pStore==0 ){
    rc = store_sqlite_open(zStore, &cfg, &p->pStore, pzErr);
    if( rc!=SQLITE_OK ) return (rc&0xff)==SQLITE_NOMEM ? rc : SQLITE_CANTOPEN;
  }
  rc = depot_db_check_format(p->pStore, pzErr);
  if( rc==SQLITE_OK
   && (rc = store_begin(p->pStore, !p->bMedia))!=SQLITE_OK ){
    rc = opStoreErr(p, rc);
  }
  if( rc==SQLITE_OK && zQual ){
    rc = depot_bucket_find(p->pStore, p->zBucket, &p->iBucket, &bFound, pzErr);
    if( rc==SQLITE_OK && !bFound ){
      rc = opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
          " not exist", p->zBucket));
    }
  }
  return rc;
}

static int opOpen(Op *p, const char *zStore, const char *zQual,
                  char **pzErr){
  return opOpenAs(p, zStore, zQual, 0, pzErr);
}

/* Commit on success, else roll back; keep the handle for the next
** operation, or close it after a failure. */
static int opEnd(Op *p, int rc){
  if( p->pStore && rc==SQLITE_OK ){
    rc = store_commit(p->pStore);
    if( rc!=SQLITE_OK ) opStoreErr(p, rc);
  }else if( p->pStore ){
    store_rollback(p->pStore);
  }
  if( p->pStore && rc==SQLITE_OK && !p->bMedia ){
    forkPutIdle(p->pStore, p->zPath);
  }else{
    store_close(p->pStore);
  }
  p->pStore = 0;
  if( rc==SQLITE_NOTFOUND ) rc = SQLITE_ERROR;
  return rc;
}

/* The view of branch zBranch; SQLITE_ERROR if the name leads nowhere. */
static int opView(Op *p, const char *zBranch, View *pV){
  DepotName nm;
  DbHead head;
  int rc = depot_name_resolve(p->pStore, p->iBucket, p->zDb, zBranch, &nm,
                              p->pzErr);
  memset(pV, 0, sizeof(*pV));
  if( rc!=SQLITE_OK ) return rc;
  if( nm.iBranch==0 && nm.iInhBranch==0 ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has"
        " no branch %s%s%s", p->zDb, zBranch, p->iBucket ? " in bucket " : "",
        p->iBucket ? p->zBucket : ""));
  }
  if( nm.iBranch==0 ){
    pV->iTop = nm.iInhBranch;
    pV->iTopTxid = nm.iInhTxid;
    return SQLITE_OK;
  }
  rc = depot_db_head(p->pStore, nm.iBranch, &head, p->pzErr);
  pV->iOwn = pV->iTop = nm.iBranch;
  pV->iTopTxid = head.iTxid;
  return rc;
}

/* Move (b, 0) of a fork to the parent's (branch, cap): the same state one
** level up, so forks of fresh forks do not deepen the chain. */
static int opNormalize(Op *p, uint64_t *piBranch, uint64_t *piTxid){
  while( *piTxid==0 ){
    BranchRecord rec;
    int rc = depot_branch_get(p->pStore, *piBranch, &rec, p->pzErr);
    if( rc!=SQLITE_OK ) return rc;
    if( rec.iParent==0 ){
      return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s"
          " has nothing committed at that point", p->zDb));
    }
    *piBranch = rec.iParent;
    *piTxid = rec.iParentTxid;
  }
  return SQLITE_OK;
}

/* ---- point-in-time ---- */

static int opPolicy(Op *p, const char *zDb, PitrPolicy *pPol, int *pbSet){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, rc, i;
  pPol->iIntervalMs = DEPOT_PITR_DEFAULT_INTERVAL_S*1000LL;
  pPol->iRetentionMs = DEPOT_PITR_DEFAULT_RETENTION_S*1000LL;
  if( pbSet ) *pbSet = 0;
  for(i=zDb ? 0 : 1; i<2; i++){
    rc = store_get(p->pStore, k, layout_key_pitr(k, i==0 ? zDb : 0),
                   &pVal, &nVal);
    if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
    if( pVal==0 ) continue;
    rc = layout_pitr_decode(pVal, nVal, pPol);
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK ){
      return opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
          " point-in-time policy row"));
    }
    if( pbSet ) *pbSet = 1;
    break;
  }
  return SQLITE_OK;
}

/* Refuse time targets when the policy is off, the time is after now (no
** state of it exists yet) or older than the retention window. */
static int opCheckRetention(Op *p, const PitrPolicy *pPol, int64_t iMs,
                            const char *zText){
  if( pPol->iRetentionMs==0 ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: point-in-time"
        " restore is off for database %s (see depot_pitr_policy)", p->zDb));
  }
  if( iMs > forkNowMs() ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: %s is in the"
        " future: a point in time must be at or before now", zText));
  }
  if( iMs < forkNowMs() - pPol->iRetentionMs ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: %s is outside the"
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

static int opPitrRow(void *pArg, const unsigned char *pKey, int nKey,
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
static int opCommitAtOrAfter(Op *p, uint64_t iBranch, uint64_t lo,
                             uint64_t hi, PitrRow *pRow){
  unsigned char kLo[LAYOUT_MAX_KEY], kHi[LAYOUT_MAX_KEY];
  int n = layout_key_commit(kLo, iBranch, lo), rc;
  layout_key_commit(kHi, iBranch, hi+1);
  memset(pRow, 0, sizeof(*pRow));
  rc = store_scan(p->pStore, kLo, n, kHi, n, 0, 1, opPitrRow, pRow);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  if( pRow->rc!=SQLITE_OK ){
    return opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt commit"
        " row"));
  }
  return SQLITE_OK;
}

/* The newest commit of iBranch with txid <= iCap and time <= iMs (*piTxid
** 0: none): a binary search over txids, one seek per step, so it does not
** depend on how many commits there are (commit times of a branch follow
** its txids: the wall clock of each commit, which is assumed not to go
** backwards). */
static int opNewestAtOrBefore(Op *p, uint64_t iBranch, uint64_t iCap,
                              int64_t iMs, uint64_t *piTxid){
  uint64_t lo = 1, hi = iCap;
  int rc = SQLITE_OK;
  *piTxid = 0;
  while( rc==SQLITE_OK && lo<=hi && hi>0 ){
    uint64_t mid = lo + (hi-lo)/2;
    PitrRow r;
    rc = opCommitAtOrAfter(p, iBranch, mid, hi, &r);
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

static int opPinTxidRow(void *pArg, const unsigned char *pKey, int nKey,
                        const unsigned char *pVal, int nVal){
  (void)pVal; (void)nVal;
  if( nKey>=18 ) *(uint64_t*)pArg = ltx_get64(pKey+10);
  return 1;
}

/* The newest txid of iBranch in (iAfter, iUpTo] that a DB_PIN row pins (a
** fork point, a restore point, a pointer move) into *piTxid; 0: none. */
static int opNewestPinIn(Op *p, uint64_t iBranch, uint64_t iAfter,
                         uint64_t iUpTo, uint64_t *piTxid){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_pin(lo, iBranch, iAfter+1, 0, 0, 0) - 1, rc;
  layout_key_pin(hi, iBranch, iUpTo+1, 0, 0, 0);
  *piTxid = 0;
  if( iUpTo<=iAfter ) return SQLITE_OK;
  rc = store_scan(p->pStore, lo, n, hi, n, STORE_SCAN_REVERSE, 1,
                  opPinTxidRow, piTxid);
  return rc==SQLITE_OK ? rc : opStoreErr(p, rc);
}

/* The newest retained commit at or before iMs on one level (branch
** iBranch up to its cap iCap): the cap itself (a head or a pinned fork
** point) and every pinned commit are always retained, any other commit
** only when it is the last of its interval.  *piTxid 0: none on this
** level.  *pbAny is set when the level has a commit at or before iMs,
** retained or not. */
static int opPitrLevel(Op *p, uint64_t iBranch, uint64_t iCap, int64_t iMs,
                       int64_t iInterval, uint64_t *piTxid, int *pbAny){
  PitrRow here, next;
  uint64_t t = 0;
  int rc = opNewestAtOrBefore(p, iBranch, iCap, iMs, &t);
  *piTxid = t;
  if( t ) *pbAny = 1;
  if( rc!=SQLITE_OK || t==0 || t==iCap || iInterval==0 ) return rc;
  rc = opCommitAtOrAfter(p, iBranch, t, t, &here);
  if( rc==SQLITE_OK ) rc = opCommitAtOrAfter(p, iBranch, t+1, iCap, &next);
  if( rc!=SQLITE_OK || !next.bFound
   || (int64_t)next.iTimeMs/iInterval != (int64_t)here.iTimeMs/iInterval ){
    return rc;
  }
  /* not the last of its interval: the last commit of an earlier one, or a
  ** pinned commit after that one */
  rc = opNewestAtOrBefore(p, iBranch, t-1,
      ((int64_t)here.iTimeMs/iInterval)*iInterval - 1, piTxid);
  if( rc==SQLITE_OK ) rc = opNewestPinIn(p, iBranch, *piTxid, t, &t);
  if( rc==SQLITE_OK && t ) *piTxid = t;
  return rc;
}

/* The newest retained commit at or before iMs along the chain of
** (iTop, iTopTxid). */
static int opPitrFind(Op *p, const View *pV, int64_t iMs,
                      const PitrPolicy *pPol, const char *zText,
                      uint64_t *piBranch, uint64_t *piTxid){
  DepotChain chain;
  int rc = depot_db_chain(p->pStore, pV->iTop, pV->iTopTxid, &chain, p->pzErr);
  int i;
  int bAny = 0;
  for(i=0; rc==SQLITE_OK && i<chain.n; i++){
    uint64_t t = 0;
    if( chain.aCap[i]==0 ) continue;
    rc = opPitrLevel(p, chain.aBranch[i], chain.aCap[i], iMs,
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
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has"
        " no commit at or before %s retained for point-in-time restore (it"
        " keeps the last commit of each %lld-second interval, the branch"
        " heads and the pinned points; see depot_pitr_policy, or give the"
        " txid)", p->zDb, zText, (long long)(pPol->iIntervalMs/1000)));
  }
  return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has no"
      " commit at or before %s", p->zDb, zText));
}

/* ---- resolving `at` ---- */

static int opRestorePoint(Op *p, const char *zName, RestorePoint *pRp,
                          int *pbFound){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int rc;
  /* No restore point has a longer name, and its key would not fit in k. */
  *pbFound = 0;
  if( strlen(zName)>LAYOUT_MAX_NAME ) return SQLITE_OK;
  rc = store_get(p->pStore, k, layout_key_rp(k, p->iBucket, p->zDb, zName),
                     &pVal, &nVal);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  *pbFound = pVal!=0;
  if( pVal && layout_rp_decode(pVal, nVal, pRp)!=SQLITE_OK ){
    rc = opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt restore"
        " point %s", zName));
  }
  sqlite3_free(pVal);
  return rc;
}

/* A txid of the branch the name reads; a fork without commits of its own
** reads its parent's, so its txids are the parent's. */
static int opResolveTxid(Op *p, const View *pV, int64_t iTxid,
                         uint64_t *piBranch, uint64_t *piTxid){
  uint64_t b = pV->iTop, t = pV->iTopTxid;
  DbHead st;
  int rc;
  if( t==0 && (rc = opNormalize(p, &b, &t))!=SQLITE_OK ) return rc;
  if( iTxid<1 || (uint64_t)iTxid>t ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: txid %lld is"
        " not a commit of this branch of database %s (txids 1..%llu)",
        (long long)iTxid, p->zDb, (unsigned long long)t));
  }
  *piBranch = b;
  *piTxid = (uint64_t)iTxid;
  return depot_db_state_at(p->pStore, b, (uint64_t)iTxid, &st, p->pzErr);
}

/* The (branch, txid) that pAt names on view pV, normalized. */
static int opResolveAt(Op *p, const View *pV, const DepotAt *pAt,
                       uint64_t *piBranch, uint64_t *piTxid){
  int64_t iMs = 0;
  int rc = SQLITE_OK;
  if( pAt==0 || pAt->eType==DEPOT_AT_HEAD ){
    *piBranch = pV->iTop;
    *piTxid = pV->iTopTxid;
  }else if( pAt->eType==DEPOT_AT_TXID ){
    rc = opResolveTxid(p, pV, pAt->iTxid, piBranch, piTxid);
  }else if( depot_parse_time(pAt->zText, &iMs) ){
    PitrPolicy pol;
    rc = opPolicy(p, p->zDb, &pol, 0);
    if( rc==SQLITE_OK ) rc = opCheckRetention(p, &pol, iMs, pAt->zText);
    if( rc==SQLITE_OK ) rc = opPitrFind(p, pV, iMs, &pol, pAt->zText,
                                        piBranch, piTxid);
  }else{
    RestorePoint rp;
    int bFound = 0;
    rc = opRestorePoint(p, pAt->zText, &rp, &bFound);
    if( rc==SQLITE_OK && !bFound ){
      return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: '%s' is neither"
          " an ISO-8601 time nor a restore point of database %s",
          pAt->zText, p->zDb));
    }
    *piBranch = rp.iBranch;
    *piTxid = rp.iTxid;
  }
  if( rc==SQLITE_OK ) rc = opNormalize(p, piBranch, piTxid);
  return rc;
}

/* ---- creating forks ---- */

/* A new branch named zName forked from (iFrom, iTxid); refuses a chain
** deeper than DEPOT_MAX_FORK_DEPTH. */
static int opNewFork(Op *p, const char *zName, uint64_t iFrom, uint64_t iTxid,
                     uint64_t iVs, uint64_t *piNew){
  DepotChain chain;
  BranchRecord rec;
  DbHead st;
  int rc = depot_db_chain(p->pStore, iFrom, iTxid, &chain, p->pzErr);
  if( rc==SQLITE_OK && chain.n>DEPOT_MAX_FORK_DEPTH ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: fork depth limit"
        " reached: the fork point already has %d ancestors and a branch may"
        " have at most %d", chain.n-1, DEPOT_MAX_FORK_DEPTH));
  }
  if( rc==SQLITE_OK ) rc = depot_db_state_at(p->pStore, iFrom, iTxid, &st,
                                             p->pzErr);
  if( rc!=SQLITE_OK ) return rc;
  memset(&rec, 0, sizeof(rec));
  rec.iParent = iFrom;
  rec.iParentTxid = iTxid;
  memcpy(rec.zDb, p->zDb, strlen(p->zDb));
  memcpy(rec.zBranch, zName, strlen(zName));
  rec.iBucket = p->iBucket;
  rec.iCreateVs = iVs;
  st.iVs = iVs;
  return depot_branch_create(p->pStore, &rec, &st, piNew, p->pzErr);
}

int depot_fork(const char *zStore, const char *zDb, const char *zFrom,
               const char *zNew, const DepotAt *pAt, uint64_t *piNew,
               char **pzErr){
  Op op;
  View v;
  DepotName nm;
  uint64_t iFrom = 0, iTxid = 0, iVs = 0;
  int rc = opOpen(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "branch", zFrom);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "new branch", zNew);
  if( rc==SQLITE_OK ) rc = depot_name_resolve(op.pStore, op.iBucket, op.zDb,
                                              zNew, &nm, pzErr);
  if( rc==SQLITE_OK && (nm.iBranch || nm.iInhBranch) ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: database %s"
        " already has a branch %s", op.zDb, zNew));
  }
  if( rc==SQLITE_OK ) rc = opView(&op, zFrom, &v);
  if( rc==SQLITE_OK ) rc = opResolveAt(&op, &v, pAt, &iFrom, &iTxid);
  if( rc==SQLITE_OK ) rc = opNextVs(&op, &iVs);
  if( rc==SQLITE_OK ) rc = opNewFork(&op, zNew, iFrom, iTxid, iVs, piNew);
  if( rc==SQLITE_OK ) rc = depot_ptr_set(op.pStore, op.iBucket, op.zDb, zNew,
                                         0, *piNew, iVs, 'f', pzErr);
  return opEnd(&op, rc);
}

/* ---- restore points ---- */

static int opRpOwner(Op *p, const char *zName, unsigned char *a){
  size_t n = strlen(zName);
  ltx_put64(a, p->iBucket);
  memcpy(a+8, p->zDb, strlen(p->zDb)+1);
  memcpy(a+9+strlen(p->zDb), zName, n);
  return (int)(9+strlen(p->zDb)+n);
}

/* Write restore point zName at (iBranch, iTxid) with its pin. */
static int opPutRp(Op *p, const char *zName, uint64_t iBranch, uint64_t iTxid,
                   uint64_t iVs, int bUndo){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW], o[LAYOUT_MAX_KEY];
  RestorePoint rp;
  int rc;
  rp.iBranch = iBranch;
  rp.iTxid = iTxid;
  rp.iVs = iVs;
  rp.iTimeMs = (uint64_t)forkNowMs();
  rp.bUndo = bUndo;
  rc = store_put(p->pStore, k, layout_key_rp(k, p->iBucket, p->zDb, zName),
                 v, layout_rp_encode(v, &rp));
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  return depot_pin_add(p->pStore, iBranch, iTxid, LAYOUT_PIN_RP, o,
                       opRpOwner(p, zName, o), p->pzErr);
}

int depot_restore_point(const char *zStore, const char *zDb,
                        const char *zBranch, const char *zName, char **pzErr){
  Op op;
  View v;
  RestorePoint rp;
  uint64_t iBranch = 0, iTxid = 0, iVs = 0;
  int64_t iMs;
  int bFound = 0;
  int rc = opOpen(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "branch", zBranch);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "restore point", zName);
  if( rc==SQLITE_OK && depot_parse_time(zName, &iMs) ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: a restore point"
        " may not be named like an ISO-8601 time: '%s'", zName));
  }
  if( rc==SQLITE_OK ) rc = opRestorePoint(&op, zName, &rp, &bFound);
  if( rc==SQLITE_OK && bFound ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: restore point %s"
        " already exists in database %s", zName, op.zDb));
  }
  if( rc==SQLITE_OK ) rc = opView(&op, zBranch, &v);
  if( rc==SQLITE_OK ) rc = opResolveAt(&op, &v, 0, &iBranch, &iTxid);
  if( rc==SQLITE_OK ) rc = opNextVs(&op, &iVs);
  if( rc==SQLITE_OK ) rc = opPutRp(&op, zName, iBranch, iTxid, iVs, 0);
  return opEnd(&op, rc);
}

/* Remove restore point zName (which exists, as pRp) and its pin. */
static int opDropRp(Op *p, const char *zName, const RestorePoint *pRp){
  unsigned char k[LAYOUT_MAX_KEY], o[LAYOUT_MAX_KEY];
  int rc = store_clear(p->pStore, k,
                       layout_key_rp(k, p->iBucket, p->zDb, zName));
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  return depot_pin_remove(p->pStore, pRp->iBranch, pRp->iTxid, LAYOUT_PIN_RP,
                          o, opRpOwner(p, zName, o), p->pzErr);
}

int depot_drop_restore_point(const char *zStore, const char *zDb,
                             const char *zName, char **pzErr){
  Op op;
  RestorePoint rp;
  int bFound = 0;
  int rc = opOpen(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "restore point", zName);
  if( rc==SQLITE_OK ) rc = opRestorePoint(&op, zName, &rp, &bFound);
  if( rc==SQLITE_OK && !bFound ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has"
        " no restore point %s", op.zDb, zName));
  }
  if( rc==SQLITE_OK ) rc = opDropRp(&op, zName, &rp);
  return opEnd(&op, rc);
}

/* Restore points of one database: collected, then handed out. */
typedef struct RpList RpList;
struct RpList {
  int n, nAlloc;
  char **azName;
  RestorePoint *a;
  int rc;
};

static int opRpRow(void *pArg, const unsigned char *pKey, int nKey,
                   const unsigned char *pVal, int nVal){
  RpList *l = (RpList*)pArg;
  const unsigned char *zDbEnd = memchr(pKey+10, 0, nKey-10);
  int nName = zDbEnd ? (int)(nKey - (zDbEnd+1-pKey) - 1) : -1;
  if( nName<1 || layout_rp_decode(pVal, nVal, &l->a[l->n])!=SQLITE_OK ){
    l->rc = SQLITE_CORRUPT;
    return 1;
  }
  if( l->n+1>=l->nAlloc ){
    int nNew = l->nAlloc*2;
    char **az = sqlite3_realloc64(l->azName, sizeof(char*)*nNew);
    RestorePoint *a = az ? sqlite3_realloc64(l->a, sizeof(*a)*nNew) : 0;
    if( az ) l->azName = az;
    if( a==0 ){ l->rc = SQLITE_NOMEM; return 1; }
    l->a = a;
    l->nAlloc = nNew;
  }
  l->azName[l->n] = sqlite3_mprintf("%.*s", nName, (const char*)zDbEnd+1);
  if( l->azName[l->n]==0 ){ l->rc = SQLITE_NOMEM; return 1; }
  l->n++;
  return 0;
}

static void opRpListFree(RpList *l){
  int i;
  for(i=0; i<l->n; i++) sqlite3_free(l->azName[i]);
  sqlite3_free(l->azName);
  sqlite3_free(l->a);
}

/* Every restore point of p->zDb. */
static int opRpCollect(Op *p, RpList *l){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int nLo = layout_key_rp(lo, p->iBucket, p->zDb, "") - 1;
  int rc;
  memcpy(hi, lo, nLo);
  hi[nLo-1] = 1;             /* just past the db name's NUL */
  memset(l, 0, sizeof(*l));
  l->nAlloc = 8;
  l->azName = sqlite3_malloc64(sizeof(char*)*8);
  l->a = sqlite3_malloc64(sizeof(RestorePoint)*8);
  if( l->azName==0 || l->a==0 ) return SQLITE_NOMEM;
  rc = store_scan(p->pStore, lo, nLo, hi, nLo, 0, -1, opRpRow, l);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  if( l->rc!=SQLITE_OK ){
    return opFail(p, l->rc, sqlite3_mprintf("depot: corrupt restore point"
        " row of database %s", p->zDb));
  }
  return SQLITE_OK;
}

int depot_list_restore_points(const char *zStore, const char *zDb,
                              DepotRpFn xRp, void *pArg, char **pzErr){
  Op op;
  RpList l;
  int i, rc = opOpenAs(&op, zStore, zDb, 1, pzErr);
  memset(&l, 0, sizeof(l));
  if( rc==SQLITE_OK ) rc = opRpCollect(&op, &l);
  for(i=0; rc==SQLITE_OK && i<l.n; i++){
    BranchRecord rec;
    DepotRpInfo info;
    rc = depot_branch_get(op.pStore, l.a[i].iBranch, &rec, pzErr);
    info.zName = l.azName[i];
    info.zBranch = rec.zBranch;
    info.iBranch = l.a[i].iBranch;
    info.iTxid = l.a[i].iTxid;
    info.iTimeMs = l.a[i].iTimeMs;
    info.bUndo = l.a[i].bUndo;
    if( rc==SQLITE_OK && xRp(pArg, &info) ) break;
  }
  opRpListFree(&l);
  return opEnd(&op, rc);
}

/* ---- restore, rollback ---- */

/* Mark branch iBranch frozen (or dropped). */
static int opSetState(Op *p, uint64_t iBranch, int eState){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  BranchRecord rec;
  int rc = depot_branch_get(p->pStore, iBranch, &rec, p->pzErr);
  if( rc!=SQLITE_OK ) return rc;
  rec.eState = eState;
  rc = store_put(p->pStore, k, layout_key_branch(k, iBranch), v,
                 layout_branch_encode(v, &rec));
  return rc==SQLITE_OK ? rc : opStoreErr(p, rc);
}

/* Point zBranch (now view pV) at a new fork of (iTo, iTxid): pointer
** history, the old branch frozen and its head pinned by the history. */
static int opRepoint(Op *p, const char *zBranch, const View *pV,
                     uint64_t iTo, uint64_t iTxid, uint64_t iVs, int eReason,
                     uint64_t *piNew){
  unsigned char o[8];
  int rc = opNewFork(p, zBranch, iTo, iTxid, iVs, piNew);
  if( rc==SQLITE_OK ) rc = depot_ptr_set(p->pStore, p->iBucket, p->zDb,
      zBranch, pV->iOwn, *piNew, iVs, eReason, p->pzErr);
  if( rc!=SQLITE_OK || pV->iOwn==0 ) return rc;
  rc = opSetState(p, pV->iOwn, LAYOUT_STATE_FROZEN);
  ltx_put64(o, iVs);
  if( rc==SQLITE_OK ) rc = depot_pin_add(p->pStore, pV->iOwn, pV->iTopTxid,
                                         LAYOUT_PIN_HISTORY, o, 8, p->pzErr);
  return rc;
}

int depot_restore(const char *zStore, const char *zDb, const char *zBranch,
                  const DepotAt *pAt, char **pzUndo, char **pzErr){
  Op op;
  View v;
  uint64_t iTo = 0, iTxid = 0, iHere = 0, iHereTxid = 0, iVs = 0, iNew = 0;
  char *zUndo = 0;
  int rc = opOpen(&op, zStore, zDb, pzErr);
  *pzUndo = 0;
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "branch", zBranch);
  if( rc==SQLITE_OK ) rc = opView(&op, zBranch, &v);
  if( rc==SQLITE_OK ) rc = opResolveAt(&op, &v, pAt, &iTo, &iTxid);
  if( rc==SQLITE_OK ) rc = opResolveAt(&op, &v, 0, &iHere, &iHereTxid);
  if( rc==SQLITE_OK ) rc = opNextVs(&op, &iVs);
  if( rc==SQLITE_OK ){
    zUndo = sqlite3_mprintf("undo-%s-%llu", zBranch, (unsigned long long)iVs);
    if( zUndo==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK && !layout_name_ok(zUndo) ){
    sqlite3_free(zUndo);
    zUndo = sqlite3_mprintf("undo-%llu", (unsigned long long)iVs);
    if( zUndo==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = opPutRp(&op, zUndo, iHere, iHereTxid, iVs, 1);
  if( rc==SQLITE_OK ) rc = opRepoint(&op, zBranch, &v, iTo, iTxid, iVs, 'r',
                                     &iNew);
  rc = opEnd(&op, rc);
  if( rc==SQLITE_OK ) *pzUndo = zUndo;
  else sqlite3_free(zUndo);
  return rc;
}

typedef struct LastRow LastRow;
struct LastRow {
  int bFound;
  unsigned char aVal[LAYOUT_MAX_ROW];
  int nVal;
};

static int opLastRow(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  LastRow *l = (LastRow*)pArg;
  (void)pKey; (void)nKey;
  l->bFound = 1;
  l->nVal = nVal<=LAYOUT_MAX_ROW ? nVal : -1;
  if( l->nVal>0 ) memcpy(l->aVal, pVal, nVal);
  return 1;
}

/* The branch the name pointed to before its last move, at its head. */
static int opUndoTarget(Op *p, const char *zBranch, const View *pV,
                        uint64_t *piTo, uint64_t *piTxid){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_ptr_hist(lo, p->iBucket, p->zDb, zBranch, 0);
  PtrHistory h;
  DbHead head;
  LastRow last;
  int rc;
  memset(&last, 0, sizeof(last));
  layout_key_ptr_hist(hi, p->iBucket, p->zDb, zBranch, UINT64_MAX);
  rc = store_scan(p->pStore, lo, n, hi, n, STORE_SCAN_REVERSE, 1, opLastRow,
                  &last);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  if( last.bFound && layout_hist_decode(last.aVal, last.nVal, &h)!=SQLITE_OK ){
    return opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt pointer"
        " history row of database %s", p->zDb));
  }
  if( !last.bFound || h.iOld==0 || h.iNew!=pV->iOwn ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %s of"
        " database %s has no restore or rollback to undo", zBranch, p->zDb));
  }
  rc = depot_db_head(p->pStore, h.iOld, &head, p->pzErr);
  *piTo = h.iOld;
  *piTxid = head.iTxid;
  if( rc==SQLITE_OK ) rc = opNormalize(p, piTo, piTxid);
  return rc;
}

int depot_rollback(const char *zStore, const char *zDb, const char *zBranch,
                   const DepotAt *pAt, uint64_t *piNew, char **pzErr){
  Op op;
  View v;
  uint64_t iTo = 0, iTxid = 0, iVs = 0;
  int rc = opOpen(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "branch", zBranch);
  if( rc==SQLITE_OK ) rc = opView(&op, zBranch, &v);
  if( rc==SQLITE_OK && pAt ) rc = opResolveAt(&op, &v, pAt, &iTo, &iTxid);
  if( rc==SQLITE_OK && !pAt ) rc = opUndoTarget(&op, zBranch, &v, &iTo,
                                                &iTxid);
  if( rc==SQLITE_OK ) rc = opNextVs(&op, &iVs);
  if( rc==SQLITE_OK ) rc = opRepoint(&op, zBranch, &v, iTo, iTxid, iVs,
                                     pAt ? 'b' : 'u', piNew);
  return opEnd(&op, rc);
}

/* ---- dropping ---- */

/* Pins of iBranch of one kind, collected (txid and owner). */
typedef struct PinList PinList;
struct PinList {
  int eKind;
  int n;
  uint64_t aTxid[64];
  unsigned char aOwner[64][LAYOUT_MAX_KEY];
  int anOwner[64];
};

static int opPinRow(void *pArg, const unsigned char *pKey, int nKey,
                    const unsigned char *pVal, int nVal){
  PinList *l = (PinList*)pArg;
  (void)pVal; (void)nVal;
  if( nKey<19 || pKey[18]!=l->eKind ) return 0;
  l->aTxid[l->n] = ltx_get64(pKey+10);
  l->anOwner[l->n] = nKey-19;
  memcpy(l->aOwner[l->n], pKey+19, nKey-19);
  return ++l->n>=64;
}

/* Remove every pin of kind eKind on iBranch (64 per pass). */
static int opDropPins(Op *p, uint64_t iBranch, int eKind){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_pin(lo, iBranch, 0, 0, 0, 0) - 9;
  int rc, i;
  PinList *l = sqlite3_malloc64(sizeof(*l));
  if( l==0 ) return SQLITE_NOMEM;
  layout_key_pin(hi, iBranch+1, 0, 0, 0, 0);
  do{
    l->eKind = eKind;
    l->n = 0;
    rc = store_scan(p->pStore, lo, n, hi, n, 0, -1, opPinRow, l);
    if( rc!=SQLITE_OK ) rc = opStoreErr(p, rc);
    for(i=0; rc==SQLITE_OK && i<l->n; i++){
      rc = depot_pin_remove(p->pStore, iBranch, l->aTxid[i], eKind,
                            l->aOwner[i], l->anOwner[i], p->pzErr);
    }
  }while( rc==SQLITE_OK && l->n==64 );
  sqlite3_free(l);
  return rc;
}

/* The refcount of iBranch (0 without a row), read without writing, so a
** listing also reads a store opened immutable on read-only media. */
static int opRefcount(Op *p, uint64_t iBranch, int64_t *pn){
  unsigned char k[LAYOUT_MAX_KEY];
  unsigned char *pVal = 0;
  uint64_t v = 0;
  int nVal = 0, i;
  int rc = store_get(p->pStore, k,
      layout_key_branch_sub(k, iBranch, LAYOUT_BRANCH_REFCOUNT),
      (void**)&pVal, &nVal);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  if( pVal && nVal!=8 ){
    sqlite3_free(pVal);
    return opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
        " refcount row of branch %llu", (unsigned long long)iBranch));
  }
  for(i=7; pVal && i>=0; i--) v = (v<<8) | pVal[i];
  sqlite3_free(pVal);
  *pn = (int64_t)v;
  return SQLITE_OK;
}

/* Branch iBranch is dropped: release its restore points and history
** pins; then, walking up while nothing reads through a dropped branch,
** its fork pin on the parent. */
static int opReleaseBranch(Op *p, uint64_t iBranch){
  RpList l;
  int i, rc = opRpCollect(p, &l);
  for(i=0; rc==SQLITE_OK && i<l.n; i++){
    if( l.a[i].iBranch==iBranch ) rc = opDropRp(p, l.azName[i], &l.a[i]);
  }
  opRpListFree(&l);
  if( rc==SQLITE_OK ) rc = opDropPins(p, iBranch, LAYOUT_PIN_HISTORY);
  while( rc==SQLITE_OK && iBranch ){
    BranchRecord rec;
    int64_t nRef = 0;
    unsigned char o[8];
    rc = opRefcount(p, iBranch, &nRef);
    if( rc==SQLITE_OK ) rc = depot_branch_get(p->pStore, iBranch, &rec,
                                              p->pzErr);
    if( rc!=SQLITE_OK || nRef>0 || rec.eState!=LAYOUT_STATE_DROPPED
     || rec.iParent==0 ){
      break;
    }
    ltx_put64(o, iBranch);
    rc = depot_pin_remove(p->pStore, rec.iParent, rec.iParentTxid,
                          LAYOUT_PIN_FORK, o, 8, p->pzErr);
    iBranch = rec.iParent;
  }
  return rc;
}

/* The branch to drop by id: it must be a branch of p->zDb no name leads
** to, not dropped yet. */
static int opCheckDropId(Op *p, uint64_t iBranch){
  BranchRecord rec;
  DepotName nm;
  int rc = depot_branch_get(p->pStore, iBranch, &rec, p->pzErr);
  if( rc==SQLITE_OK && strcmp(rec.zDb, p->zDb)!=0 ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %llu is"
        " not a branch of database %s", (unsigned long long)iBranch, p->zDb));
  }
  if( rc==SQLITE_OK && rec.eState==LAYOUT_STATE_DROPPED ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %llu is"
        " already dropped", (unsigned long long)iBranch));
  }
  if( rc==SQLITE_OK ) rc = depot_name_resolve(p->pStore, rec.iBucket, p->zDb,
                                              rec.zBranch, &nm, p->pzErr);
  if( rc==SQLITE_OK && nm.iBranch==iBranch ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %llu is"
        " the live branch %s; drop it by name", (unsigned long long)iBranch,
        rec.zBranch));
  }
  return rc;
}

int depot_drop_branch(const char *zStore, const char *zDb,
                      const char *zBranch, uint64_t iBranch, char **pzErr){
  Op op;
  View v;
  uint64_t iVs = 0;
  int rc = opOpen(&op, zStore, zDb, pzErr);
  memset(&v, 0, sizeof(v));
  if( rc==SQLITE_OK && zBranch ){
    rc = opCheckName(&op, "branch", zBranch);
    if( rc==SQLITE_OK ) rc = opView(&op, zBranch, &v);
    if( rc==SQLITE_OK ) rc = opNextVs(&op, &iVs);
    if( rc==SQLITE_OK ) rc = depot_ptr_set(op.pStore, op.iBucket, op.zDb,
                                           zBranch, v.iOwn, 0, iVs, 'd', pzErr);
    iBranch = v.iOwn;
  }else if( rc==SQLITE_OK ){
    rc = opCheckDropId(&op, iBranch);
  }
  if( rc==SQLITE_OK && iBranch ){
    rc = opSetState(&op, iBranch, LAYOUT_STATE_DROPPED);
    if( rc==SQLITE_OK ) rc = opReleaseBranch(&op, iBranch);
  }
  return opEnd(&op, rc);
}

/* ---- point-in-time policy ---- */

int depot_pitr_set(const char *zStore, const char *zDb, int64_t iIntervalS,
                   int64_t iRetentionS, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  PitrPolicy pol;
  Op op;
  int rc;
  if( iIntervalS<0 || iRetentionS<0 || iIntervalS>FORK_MAX_POLICY_S
   || iRetentionS>FORK_MAX_POLICY_S ){
    *pzErr = sqlite3_mprintf("depot: interval and retention are seconds"
        " 0..%lld, got %lld and %lld", FORK_MAX_POLICY_S,
        (long long)iIntervalS, (long long)iRetentionS);
    return SQLITE_ERROR;
  }
  rc = opOpen(&op, zStore, zDb, pzErr);
  pol.iIntervalMs = iIntervalS*1000;
  pol.iRetentionMs = iRetentionS*1000;
  if( rc==SQLITE_OK ){
    rc = store_put(op.pStore, k, layout_key_pitr(k, zDb ? op.zDb : 0), v,
                   layout_pitr_encode(v, &pol));
    if( rc!=SQLITE_OK ) rc = opStoreErr(&op, rc);
  }
  return opEnd(&op, rc);
}

int depot_pitr_get(const char *zStore, const char *zDb, int64_t *piIntervalS,
                   int64_t *piRetentionS, char **pzErr){
  PitrPolicy pol;
  Op op;
  int rc = opOpenAs(&op, zStore, zDb, 1, pzErr);
  if( rc==SQLITE_OK ) rc = opPolicy(&op, zDb ? op.zDb : 0, &pol, 0);
  if( rc==SQLITE_OK ){
    *piIntervalS = pol.iIntervalMs/1000;
    *piRetentionS = pol.iRetentionMs/1000;
  }
  return opEnd(&op, rc);
}

/* ---- buckets ---- */

static int opLogRow(void *pArg, const unsigned char *pKey, int nKey,
                    const unsigned char *pVal, int nVal){
  int64_t *a = (int64_t*)pArg;     /* a[0] time, a[1] found vs, a[2] rc */
  LogRow lg;
  if( nKey!=10 || layout_log_decode(pVal, nVal, &lg)!=SQLITE_OK ){
    a[2] = SQLITE_CORRUPT;
    return 1;
  }
  if( (int64_t)lg.iTimeMs<=a[0] ){
    a[1] = (int64_t)ltx_get64(pKey+2);
    return 1;
  }
  return 0;
}

/* The store sequence number pAt names for a bucket fork. */
static int opBucketCap(Op *p, const DepotAt *pAt, uint64_t *piVs){
  unsigned char k[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int64_t iNow = 0, a[3] = { 0, 0, SQLITE_OK }, iMs = 0;
  PitrPolicy pol;
  int rc = store_add(p->pStore, k, layout_key_ctr(k, "vs"), 0, &iNow);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  *piVs = (uint64_t)iNow;
  if( pAt==0 || pAt->eType==DEPOT_AT_HEAD ) return SQLITE_OK;
  if( pAt->eType==DEPOT_AT_TXID ){
    if( pAt->iTxid<1 || pAt->iTxid>iNow ){
      return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: store sequence"
          " %lld is out of range 1..%lld", (long long)pAt->iTxid,
          (long long)iNow));
    }
    *piVs = (uint64_t)pAt->iTxid;
    return SQLITE_OK;
  }
  if( !depot_parse_time(pAt->zText, &iMs) ){
    return opFail(p, SQLITE_ERROR, sqlite3_mprintf("depot: a bucket fork"
        " point is NULL, a store sequence number or an ISO-8601 time, got"
        " '%s'", pAt->zText));
  }
  rc = opPolicy(p, 0, &pol, 0);
  if( rc==SQLITE_OK ) rc = opCheckRetention(p, &pol, iMs, pAt->zText);
  if( rc!=SQLITE_OK ) return rc;
  a[0] = iMs;
  layout_key_log(k, 0);
  layout_key_log(hi, UINT64_MAX);
  rc = store_scan(p->pStore, k, 10, hi, 10, STORE_SCAN_REVERSE, -1,
                  opLogRow, a);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  if( a[2]!=SQLITE_OK ){
    return opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt commit"
        " log row"));
  }
  *piVs = (uint64_t)a[1];
  return SQLITE_OK;
}

static int opBucketDepth(Op *p, uint64_t iBucket, int *pnDepth){
  *pnDepth = 0;
  while( iBucket ){
    unsigned char k[LAYOUT_MAX_KEY];
    BucketRecord rec;
    void *pVal = 0;
    int nVal = 0;
    int rc = store_get(p->pStore, k, layout_key_bucket(k, iBucket, 0), &pVal,
                       &nVal);
    if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
    rc = pVal ? layout_bucket_decode(pVal, nVal, &rec) : SQLITE_CORRUPT;
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK || ++*pnDepth>FORK_MAX_BUCKET_DEPTH ){
      return opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
          " bucket ancestry"));
    }
    iBucket = rec.iParent;
  }
  return SQLITE_OK;
}

/* Write the records of bucket zNew forked from iSrc at iVs. */
static int opPutBucket(Op *p, uint64_t iSrc, const char *zNew, uint64_t iVs){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  BucketRecord rec;
  int64_t iNew = 0;
  int rc = store_add(p->pStore, k, layout_key_ctr(k, "bucket"), 1, &iNew);
  memset(&rec, 0, sizeof(rec));
  rec.iParent = iSrc;
  rec.iForkVs = iVs;
  memcpy(rec.zName, zNew, strlen(zNew));
  ltx_put64(v, (uint64_t)iNew);
  if( rc==SQLITE_OK ) rc = store_put(p->pStore, k,
      layout_key_bucket_ptr(k, zNew), v, 8);
  if( rc==SQLITE_OK ) rc = store_put(p->pStore, k,
      layout_key_bucket(k, (uint64_t)iNew, 0), v, layout_bucket_encode(v, &rec));
  if( rc==SQLITE_OK ) rc = store_put(p->pStore, k,
      layout_key_bchild(k, iSrc, iVs, (uint64_t)iNew), "", 0);
  if( rc==SQLITE_OK ) rc = store_add(p->pStore, k,
      layout_key_bucket(k, iSrc, LAYOUT_BRANCH_REFCOUNT), 1, 0);
  return rc==SQLITE_OK ? rc : opStoreErr(p, rc);
}

int depot_fork_bucket(const char *zStore, const char *zBucket,
                      const char *zNew, const DepotAt *pAt, uint64_t *piVs,
                      char **pzErr){
  Op op;
  uint64_t iSrc = 0, iOther = 0, iVs = 0;
  int bFound = 0, nDepth = 0;
  int rc = opOpen(&op, zStore, 0, pzErr);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "bucket", zBucket);
  if( rc==SQLITE_OK ) rc = opCheckName(&op, "new bucket", zNew);
  if( rc==SQLITE_OK && strchr(zNew, '/') ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: a bucket name may"
        " not contain '/': %s", zNew));
  }
  if( rc==SQLITE_OK ) rc = depot_bucket_find(op.pStore, zBucket, &iSrc,
                                             &bFound, pzErr);
  if( rc==SQLITE_OK && !bFound ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
        " not exist", zBucket));
  }
  if( rc==SQLITE_OK ) rc = depot_bucket_find(op.pStore, zNew, &iOther,
                                             &bFound, pzErr);
  if( rc==SQLITE_OK && bFound ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s already"
        " exists", zNew));
  }
  if( rc==SQLITE_OK ) rc = opBucketDepth(&op, iSrc, &nDepth);
  if( rc==SQLITE_OK && nDepth>=FORK_MAX_BUCKET_DEPTH ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket fork depth"
        " limit of %d reached", FORK_MAX_BUCKET_DEPTH));
  }
  if( rc==SQLITE_OK ) rc = opBucketCap(&op, pAt, &iVs);
  if( rc==SQLITE_OK ) rc = opPutBucket(&op, iSrc, zNew, iVs);
  *piVs = iVs;
  return opEnd(&op, rc);
}

/* ---- listings ---- */

typedef struct BranchScan BranchScan;
struct BranchScan {
  Op *p;
  const char *zDb;          /* NULL: all */
  DepotBranchFn xFn;
  void *pArg;
  int rc, bStop;
};

static int opBucketName(Op *p, uint64_t iBucket, char *zOut){
  unsigned char k[LAYOUT_MAX_KEY];
  BucketRecord rec;
  void *pVal = 0;
  int nVal = 0, rc;
  if( iBucket==0 ){
    memcpy(zOut, "main", 5);
    return SQLITE_OK;
  }
  rc = store_get(p->pStore, k, layout_key_bucket(k, iBucket, 0), &pVal, &nVal);
  if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
  rc = pVal ? layout_bucket_decode(pVal, nVal, &rec) : SQLITE_CORRUPT;
  sqlite3_free(pVal);
  if( rc!=SQLITE_OK ){
    return opFail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt record"
        " of bucket %llu", (unsigned long long)iBucket));
  }
  memcpy(zOut, rec.zName, strlen(rec.zName)+1);
  return SQLITE_OK;
}

static int opBranchRow(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  BranchScan *s = (BranchScan*)pArg;
  DepotBranchInfo info;
  BranchRecord rec;
  DbHead head;
  char zBucket[LAYOUT_MAX_NAME+1];
  uint64_t iBranch;
  if( nKey!=10 ) return 0;
  iBranch = ltx_get64(pKey+2);
  if( layout_branch_decode(pVal, nVal, &rec)!=SQLITE_OK ){
    s->rc = opFail(s->p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
        " record of branch %llu", (unsigned long long)iBranch));
    return 1;
  }
  if( s->zDb && strcmp(s->zDb, rec.zDb)!=0 ) return 0;
  s->rc = depot_db_head(s->p->pStore, iBranch, &head, s->p->pzErr);
  if( s->rc==SQLITE_OK ) s->rc = opBucketName(s->p, rec.iBucket, zBucket);
  if( s->rc==SQLITE_OK ) s->rc = opRefcount(s->p, iBranch, &info.nRef);
  if( s->rc!=SQLITE_OK ) return 1;
  info.zBucket = zBucket;
  info.zDb = rec.zDb;
  info.zBranch = rec.zBranch;
  info.iBranch = iBranch;
  info.iParent = rec.iParent;
  info.iForkTxid = rec.iParentTxid;
  info.iHeadTxid = head.iTxid;
  info.eState = rec.eState;
  info.nLogical = (int64_t)head.nPage*head.szPage;
  s->bStop = s->xFn(s->pArg, &info);
  return s->bStop;
}

int depot_list_branches(const char *zStore, const char *zDb,
                        DepotBranchFn xFn, void *pArg, char **pzErr){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BRANCHES };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BRANCHES+1 };
  BranchScan s;
  Op op;
  int rc = opOpenAs(&op, zStore, 0, 1, pzErr);
  if( rc==SQLITE_OK && zDb ) rc = opCheckName(&op, "database", zDb);
  if( rc==SQLITE_OK && zDb && strchr(zDb, '/') ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: depot_branches"
        " matches db in every bucket: give it without a bucket part, got"
        " '%s'", zDb));
  }
  memset(&s, 0, sizeof(s));
  s.p = &op;
  s.zDb = zDb;
  s.xFn = xFn;
  s.pArg = pArg;
  if( rc==SQLITE_OK ){
    rc = store_scan(op.pStore, lo, 2, hi, 2, 0, -1, opBranchRow, &s);
    if( rc!=SQLITE_OK ) rc = opStoreErr(&op, rc);
    else rc = s.rc;
  }
  return opEnd(&op, rc);
}

/* Names seen while listing a bucket: (db, branch) pairs, deduplicated. */
typedef struct NameSet NameSet;
struct NameSet {
  int n, nAlloc;
  char **az;                /* "db\0branch\0" */
  int rc;
};

static int opNameRow(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  NameSet *s = (NameSet*)pArg;
  int iStart = pKey[1]==LAYOUT_P_DBPTR ? 2 : 10, i;
  char *z;
  (void)pVal; (void)nVal;
  if( nKey<=iStart+2 || pKey[nKey-1]!=0
   || memchr(pKey+iStart, 0, nKey-iStart-1)==0 ) return 0;
  for(i=0; i<s->n; i++){
    size_t n = strlen(s->az[i])+1;
    n += strlen(s->az[i]+n)+1;
    if( n==(size_t)(nKey-iStart)
     && memcmp(s->az[i], pKey+iStart, n)==0 ) return 0;
  }
  if( s->n==s->nAlloc ){
    int nNew = s->nAlloc ? s->nAlloc*2 : 16;
    char **az = sqlite3_realloc64(s->az, sizeof(char*)*nNew);
    if( az==0 ){ s->rc = SQLITE_NOMEM; return 1; }
    s->az = az;
    s->nAlloc = nNew;
  }
  z = sqlite3_malloc64(nKey-iStart);
  if( z==0 ){ s->rc = SQLITE_NOMEM; return 1; }
  memcpy(z, pKey+iStart, nKey-iStart);
  s->az[s->n++] = z;
  return 0;
}

/* Collect the names of bucket iBucket and its ancestors. */
static int opCollectNames(Op *p, uint64_t iBucket, NameSet *s){
  int nDepth = 0;
  for(;;){
    unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
    BucketRecord rec;
    void *pVal = 0;
    int nVal = 0, n, rc;
    lo[0] = hi[0] = 0x02;
    lo[1] = iBucket ? LAYOUT_P_BDBPTR : LAYOUT_P_DBPTR;
    ltx_put64(lo+2, iBucket);
    memcpy(hi, lo, 10);
    n = iBucket ? 10 : 2;
    if( iBucket ) ltx_put64(hi+2, iBucket+1); else hi[1]++;
    rc = store_scan(p->pStore, lo, n, hi, n, 0, -1, opNameRow, s);
    if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
    if( s->rc!=SQLITE_OK ) return s->rc;
    if( iBucket==0 || ++nDepth>FORK_MAX_BUCKET_DEPTH ) return SQLITE_OK;
    rc = store_get(p->pStore, lo, layout_key_bucket(lo, iBucket, 0), &pVal,
                   &nVal);
    if( rc!=SQLITE_OK ) return opStoreErr(p, rc);
    rc = pVal ? layout_bucket_decode(pVal, nVal, &rec) : SQLITE_CORRUPT;
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK ){
      return opFail(p, rc, sqlite3_mprintf("depot: corrupt bucket record"));
    }
    iBucket = rec.iParent;
  }
}

/* Hand out every name of the collected set that resolves in iBucket. */
static int opEmitNames(Op *p, uint64_t iBucket, const char *zBucket,
                       NameSet *s, DepotNameFn xFn, void *pArg, int *pbStop){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<s->n && !*pbStop; i++){
    const char *zDb = s->az[i], *zBranch = zDb+strlen(zDb)+1;
    DepotNameInfo info;
    DepotName nm;
    DbHead head;
    memset(&head, 0, sizeof(head));
    rc = depot_name_resolve(p->pStore, iBucket, zDb, zBranch, &nm, p->pzErr);
    if( rc!=SQLITE_OK || (nm.iBranch==0 && nm.iInhBranch==0) ) continue;
    if( nm.iBranch ){
      rc = depot_db_head(p->pStore, nm.iBranch, &head, p->pzErr);
    }else{
      rc = depot_db_state_at(p->pStore, nm.iInhBranch, nm.iInhTxid, &head,
                             p->pzErr);
      head.iTxid = nm.iInhTxid;
    }
    info.zBucket = zBucket;
    info.zDb = zDb;
    info.zBranch = zBranch;
    info.iBranch = nm.iBranch ? nm.iBranch : nm.iInhBranch;
    info.iTxid = head.iTxid;
    info.bInherited = nm.iBranch==0;
    info.nLogical = (int64_t)head.nPage*head.szPage;
    if( rc==SQLITE_OK ) *pbStop = xFn(pArg, &info);
  }
  return rc;
}

static void opNameSetFree(NameSet *s){
  int i;
  for(i=0; i<s->n; i++) sqlite3_free(s->az[i]);
  sqlite3_free(s->az);
  memset(s, 0, sizeof(*s));
}

/* List one bucket. */
static int opListBucket(Op *p, uint64_t iBucket, const char *zBucket,
                        DepotNameFn xFn, void *pArg, int *pbStop){
  NameSet s;
  int rc;
  memset(&s, 0, sizeof(s));
  rc = opCollectNames(p, iBucket, &s);
  if( rc==SQLITE_OK ) rc = opEmitNames(p, iBucket, zBucket, &s, xFn, pArg,
                                       pbStop);
  opNameSetFree(&s);
  return rc;
}

/* Bucket names other than main, collected from BUCKET_PTR. */
typedef struct BucketSet BucketSet;
struct BucketSet {
  int n, nAlloc;
  char **az;
  uint64_t *aId;
  int rc;
};

static int opBucketPtrRow(void *pArg, const unsigned char *pKey, int nKey,
                          const unsigned char *pVal, int nVal){
  BucketSet *s = (BucketSet*)pArg;
  if( nVal!=8 || nKey<4 || pKey[nKey-1]!=0 ){
    s->rc = SQLITE_CORRUPT;
    return 1;
  }
  if( s->n==s->nAlloc ){
    int nNew = s->nAlloc ? s->nAlloc*2 : 8;
    char **az = sqlite3_realloc64(s->az, sizeof(char*)*nNew);
    uint64_t *a = az ? sqlite3_realloc64(s->aId, sizeof(uint64_t)*nNew) : 0;
    if( az ) s->az = az;
    if( a==0 ){ s->rc = SQLITE_NOMEM; return 1; }
    s->aId = a;
    s->nAlloc = nNew;
  }
  s->az[s->n] = sqlite3_mprintf("%s", (const char*)pKey+2);
  if( s->az[s->n]==0 ){ s->rc = SQLITE_NOMEM; return 1; }
  s->aId[s->n++] = ltx_get64(pVal);
  return 0;
}

/* depot_databases without a bucket: main, then every other bucket. */
static int opListAll(Op *p, DepotNameFn xFn, void *pArg){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BUCKET_PTR };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BUCKET_PTR+1 };
  BucketSet s;
  int bStop = 0, i;
  int rc = opListBucket(p, 0, "main", xFn, pArg, &bStop);
  memset(&s, 0, sizeof(s));
  if( rc==SQLITE_OK ){
    rc = store_scan(p->pStore, lo, 2, hi, 2, 0, -1, opBucketPtrRow, &s);
    if( rc!=SQLITE_OK ) rc = opStoreErr(p, rc);
    else if( s.rc!=SQLITE_OK ){
      rc = opFail(p, s.rc, sqlite3_mprintf("depot: corrupt bucket pointer"));
    }
  }
  for(i=0; rc==SQLITE_OK && i<s.n && !bStop; i++){
    rc = opListBucket(p, s.aId[i], s.az[i], xFn, pArg, &bStop);
  }
  for(i=0; i<s.n; i++) sqlite3_free(s.az[i]);
  sqlite3_free(s.az);
  sqlite3_free(s.aId);
  return rc;
}

int depot_list_databases(const char *zStore, const char *zBucket,
                         DepotNameFn xFn, void *pArg, char **pzErr){
  Op op;
  uint64_t iBucket = 0;
  int bFound = 1, bStop = 0, rc = opOpenAs(&op, zStore, 0, 1, pzErr);
  if( rc!=SQLITE_OK || zBucket==0 ){
    if( rc==SQLITE_OK ) rc = opListAll(&op, xFn, pArg);
    return opEnd(&op, rc);
  }
  rc = opCheckName(&op, "bucket", zBucket);
  if( rc==SQLITE_OK ) rc = depot_bucket_find(op.pStore, zBucket, &iBucket,
                                             &bFound, pzErr);
  if( rc==SQLITE_OK && !bFound ){
    rc = opFail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
        " not exist", zBucket));
  }
  if( rc==SQLITE_OK ) rc = opListBucket(&op, iBucket, zBucket, xFn, pArg,
                                        &bStop);
  return opEnd(&op, rc);
}

/* ---- ISO-8601 ---- */

/* n digits at z into *pv; 0 if they are not all digits. */
static int forkDigits(const char *z, int n, int *pv){
  int i;
  *pv = 0;
  for(i=0; i<n; i++){
    if( z[i]<'0' || z[i]>'9' ) return 0;
    *pv = *pv*10 + (z[i]-'0');
  }
  return 1;
}

/* The optional time part after a date; advances *pz. */
static int forkTimePart(const char **pz, struct tm *pTm, int *pMs){
  const char *z = *pz;
  int ms = 0, i;
  if( *z!=' ' && *z!='T' ) return *z==0 || *z=='Z' || *z=='+' || *z=='-';
  z++;
  if( !forkDigits(z, 2, &pTm->tm_hour) || z[2]!=':'
   || !forkDigits(z+3, 2, &pTm->tm_min) ) return 0;
  z += 5;
  if( *z==':' ){
    if( !forkDigits(z+1, 2, &pTm->tm_sec) ) return 0;
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
static int forkMonthDays(int iYear, int iMon){
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
  if( !forkDigits(z, 4, &tm.tm_year) || z[4]!='-'
   || !forkDigits(z+5, 2, &tm.tm_mon) || z[7]!='-'
   || !forkDigits(z+8, 2, &tm.tm_mday) ) return 0;
  if( tm.tm_mon<1 || tm.tm_mon>12 || tm.tm_mday<1
   || tm.tm_mday>forkMonthDays(tm.tm_year, tm.tm_mon) ) return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  z += 10;
  if( !forkTimePart(&z, &tm, &ms) ) return 0;
  if( *z=='Z' ){
    z++;
  }else if( *z=='+' || *z=='-' ){
    if( !forkDigits(z+1, 2, &hh) || z[3]!=':' || !forkDigits(z+4, 2, &mm)
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
