/*
** restore.c -- restore points (depot_restore_point,
** depot_drop_restore_point, depot_list_restore_points), restore (pin the
** head as an undo restore point, then point the name at a fork of the
** target) and rollback (point the name at a fork of the target, or undo
** its last move).  The old branch of a moved name is frozen and pinned by
** the pointer history.  Each is one operation of vfs/op.h.
*/
#include "config.h"
#include "vfs/op.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* ---- restore points ---- */

static int restoreRpOwner(Op *p, const char *zName, unsigned char *a){
  size_t n = strlen(zName);
  bytes_put64(a, p->iBucket);
  memcpy(a+8, p->zDb, strlen(p->zDb)+1);
  memcpy(a+9+strlen(p->zDb), zName, n);
  return (int)(9+strlen(p->zDb)+n);
}

/* Write restore point zName at (iBranch, iTxid) with its pin. */
static int restorePutRp(Op *p, const char *zName, uint64_t iBranch,
                        uint64_t iTxid, uint64_t iVs, int bUndo){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW], o[LAYOUT_MAX_KEY];
  RestorePoint rp;
  int rc;
  rp.iBranch = iBranch;
  rp.iTxid = iTxid;
  rp.iVs = iVs;
  rp.iTimeMs = (uint64_t)op_now_ms();
  rp.bUndo = bUndo;
  rc = store_put(p->pStore, k, layout_key_rp(k, p->iBucket, p->zDb, zName),
                 v, layout_rp_encode(v, &rp));
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  return depot_pin_add(p->pStore, iBranch, iTxid, LAYOUT_PIN_RP, o,
                       restoreRpOwner(p, zName, o), p->pzErr);
}

int depot_restore_point(const char *zStore, const char *zDb,
                        const char *zBranch, const char *zName, char **pzErr){
  Op op;
  OpView v;
  RestorePoint rp;
  uint64_t iBranch = 0, iTxid = 0, iVs = 0;
  int64_t iMs;
  int bFound = 0;
  int rc = op_open(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "branch", zBranch);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "restore point", zName);
  if( rc==SQLITE_OK && depot_parse_time(zName, &iMs) ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: a restore point"
        " may not be named like an ISO-8601 time: '%s'", zName));
  }
  if( rc==SQLITE_OK ) rc = op_restore_point(&op, zName, &rp, &bFound);
  if( rc==SQLITE_OK && bFound ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: restore point %s"
        " already exists in database %s", zName, op.zDb));
  }
  if( rc==SQLITE_OK ) rc = op_view(&op, zBranch, &v);
  if( rc==SQLITE_OK ) rc = pitr_resolve_at(&op, &v, 0, &iBranch, &iTxid);
  if( rc==SQLITE_OK ) rc = op_next_vs(&op, &iVs);
  if( rc==SQLITE_OK ) rc = restorePutRp(&op, zName, iBranch, iTxid, iVs, 0);
  return op_end(&op, rc);
}

/* Remove restore point zName (which exists, as pRp) and its pin. */
int restore_rp_drop(Op *p, const char *zName, const RestorePoint *pRp){
  unsigned char k[LAYOUT_MAX_KEY], o[LAYOUT_MAX_KEY];
  int rc = store_clear(p->pStore, k,
                       layout_key_rp(k, p->iBucket, p->zDb, zName));
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  return depot_pin_remove(p->pStore, pRp->iBranch, pRp->iTxid, LAYOUT_PIN_RP,
                          o, restoreRpOwner(p, zName, o), p->pzErr);
}

int depot_drop_restore_point(const char *zStore, const char *zDb,
                             const char *zName, char **pzErr){
  Op op;
  RestorePoint rp;
  int bFound = 0;
  int rc = op_open(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "restore point", zName);
  if( rc==SQLITE_OK ) rc = op_restore_point(&op, zName, &rp, &bFound);
  if( rc==SQLITE_OK && !bFound ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has"
        " no restore point %s", op.zDb, zName));
  }
  if( rc==SQLITE_OK ) rc = restore_rp_drop(&op, zName, &rp);
  return op_end(&op, rc);
}

static int restoreRpRow(void *pArg, const unsigned char *pKey, int nKey,
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

void restore_rp_free(RpList *l){
  int i;
  for(i=0; i<l->n; i++) sqlite3_free(l->azName[i]);
  sqlite3_free(l->azName);
  sqlite3_free(l->a);
}

/* Every restore point of p->zDb. */
int restore_rp_collect(Op *p, RpList *l){
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
  rc = store_scan(p->pStore, lo, nLo, hi, nLo, 0, -1, restoreRpRow, l);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  if( l->rc!=SQLITE_OK ){
    return op_fail(p, l->rc, sqlite3_mprintf("depot: corrupt restore point"
        " row of database %s", p->zDb));
  }
  return SQLITE_OK;
}

int depot_list_restore_points(const char *zStore, const char *zDb,
                              DepotRpFn xRp, void *pArg, char **pzErr){
  Op op;
  RpList l;
  int i, rc = op_open_as(&op, zStore, zDb, 1, pzErr);
  memset(&l, 0, sizeof(l));
  if( rc==SQLITE_OK ) rc = restore_rp_collect(&op, &l);
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
  restore_rp_free(&l);
  return op_end(&op, rc);
}

/* ---- restore, rollback ---- */

/* Point zBranch (now view pV) at a new fork of (iTo, iTxid): pointer
** history, the old branch frozen and its head pinned by the history. */
static int restoreRepoint(Op *p, const char *zBranch, const OpView *pV,
                          uint64_t iTo, uint64_t iTxid, uint64_t iVs,
                          int eReason, uint64_t *piNew){
  unsigned char o[8];
  int rc = op_new_fork(p, zBranch, iTo, iTxid, iVs, piNew);
  if( rc==SQLITE_OK ) rc = depot_ptr_set(p->pStore, p->iBucket, p->zDb,
      zBranch, pV->iOwn, *piNew, iVs, eReason, p->pzErr);
  if( rc!=SQLITE_OK || pV->iOwn==0 ) return rc;
  rc = op_set_state(p, pV->iOwn, LAYOUT_STATE_FROZEN);
  bytes_put64(o, iVs);
  if( rc==SQLITE_OK ) rc = depot_pin_add(p->pStore, pV->iOwn, pV->iTopTxid,
                                         LAYOUT_PIN_HISTORY, o, 8, p->pzErr);
  return rc;
}

int depot_restore(const char *zStore, const char *zDb, const char *zBranch,
                  const DepotAt *pAt, char **pzUndo, char **pzErr){
  Op op;
  OpView v;
  uint64_t iTo = 0, iTxid = 0, iHere = 0, iHereTxid = 0, iVs = 0, iNew = 0;
  char *zUndo = 0;
  int rc = op_open(&op, zStore, zDb, pzErr);
  *pzUndo = 0;
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "branch", zBranch);
  if( rc==SQLITE_OK ) rc = op_view(&op, zBranch, &v);
  if( rc==SQLITE_OK ) rc = pitr_resolve_at(&op, &v, pAt, &iTo, &iTxid);
  if( rc==SQLITE_OK ) rc = pitr_resolve_at(&op, &v, 0, &iHere, &iHereTxid);
  if( rc==SQLITE_OK ) rc = op_next_vs(&op, &iVs);
  if( rc==SQLITE_OK ){
    zUndo = sqlite3_mprintf("undo-%s-%llu", zBranch, (unsigned long long)iVs);
    if( zUndo==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK && !layout_name_ok(zUndo) ){
    sqlite3_free(zUndo);
    zUndo = sqlite3_mprintf("undo-%llu", (unsigned long long)iVs);
    if( zUndo==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = restorePutRp(&op, zUndo, iHere, iHereTxid, iVs, 1);
  if( rc==SQLITE_OK ) rc = restoreRepoint(&op, zBranch, &v, iTo, iTxid, iVs,
                                          'r', &iNew);
  rc = op_end(&op, rc);
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

static int restoreLastRow(void *pArg, const unsigned char *pKey, int nKey,
                          const unsigned char *pVal, int nVal){
  LastRow *l = (LastRow*)pArg;
  (void)pKey; (void)nKey;
  l->bFound = 1;
  l->nVal = nVal<=LAYOUT_MAX_ROW ? nVal : -1;
  if( l->nVal>0 ) memcpy(l->aVal, pVal, nVal);
  return 1;
}

/* The branch the name pointed to before its last move, at its head. */
static int restoreUndoTarget(Op *p, const char *zBranch, const OpView *pV,
                             uint64_t *piTo, uint64_t *piTxid){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_ptr_hist(lo, p->iBucket, p->zDb, zBranch, 0);
  PtrHistory h;
  DbHead head;
  LastRow last;
  int rc;
  memset(&last, 0, sizeof(last));
  layout_key_ptr_hist(hi, p->iBucket, p->zDb, zBranch, UINT64_MAX);
  rc = store_scan(p->pStore, lo, n, hi, n, STORE_SCAN_REVERSE, 1,
                  restoreLastRow, &last);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  if( last.bFound && layout_hist_decode(last.aVal, last.nVal, &h)!=SQLITE_OK ){
    return op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt pointer"
        " history row of database %s", p->zDb));
  }
  if( !last.bFound || h.iOld==0 || h.iNew!=pV->iOwn ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %s of"
        " database %s has no restore or rollback to undo", zBranch, p->zDb));
  }
  rc = depot_db_head(p->pStore, h.iOld, &head, p->pzErr);
  *piTo = h.iOld;
  *piTxid = head.iTxid;
  if( rc==SQLITE_OK ) rc = op_normalize(p, piTo, piTxid);
  return rc;
}

int depot_rollback(const char *zStore, const char *zDb, const char *zBranch,
                   const DepotAt *pAt, uint64_t *piNew, char **pzErr){
  Op op;
  OpView v;
  uint64_t iTo = 0, iTxid = 0, iVs = 0;
  int rc = op_open(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "branch", zBranch);
  if( rc==SQLITE_OK ) rc = op_view(&op, zBranch, &v);
  if( rc==SQLITE_OK && pAt ) rc = pitr_resolve_at(&op, &v, pAt, &iTo, &iTxid);
  if( rc==SQLITE_OK && !pAt ) rc = restoreUndoTarget(&op, zBranch, &v, &iTo,
                                                     &iTxid);
  if( rc==SQLITE_OK ) rc = op_next_vs(&op, &iVs);
  if( rc==SQLITE_OK ) rc = restoreRepoint(&op, zBranch, &v, iTo, iTxid, iVs,
                                          pAt ? 'b' : 'u', piNew);
  return op_end(&op, rc);
}
