/*
** drop.c -- dropping a branch (depot_drop_branch): by name (the name goes,
** a tombstone in a forked bucket) or a frozen branch by id; its restore
** points and history pins are released, and its fork pin on the parent
** once nothing reads through it.  Its rows stay for reclaim (vfs/gc.c).
** Also the abandonment of an unborn branch's name (vfs/layout.h).
** One operation of vfs/op.h.
*/
#include "config.h"
#include "vfs/op.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* Pins of iBranch of one kind, collected (txid and owner). */
typedef struct PinList PinList;
struct PinList {
  int eKind;
  int n;
  uint64_t aTxid[64];
  unsigned char aOwner[64][LAYOUT_MAX_KEY];
  int anOwner[64];
};

static int dropPinRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  PinList *l = (PinList*)pArg;
  (void)pVal; (void)nVal;
  if( nKey<19 || pKey[18]!=l->eKind ) return 0;
  l->aTxid[l->n] = bytes_get64(pKey+10);
  l->anOwner[l->n] = nKey-19;
  memcpy(l->aOwner[l->n], pKey+19, nKey-19);
  return ++l->n>=64;
}

/* Remove every pin of kind eKind on iBranch (64 per pass). */
static int dropPins(Op *p, uint64_t iBranch, int eKind){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_pin(lo, iBranch, 0, 0, 0, 0) - 9;
  int rc, i;
  PinList *l = sqlite3_malloc64(sizeof(*l));
  if( l==0 ) return SQLITE_NOMEM;
  layout_key_pin(hi, iBranch+1, 0, 0, 0, 0);
  do{
    l->eKind = eKind;
    l->n = 0;
    rc = store_scan(p->pStore, lo, n, hi, n, 0, -1, dropPinRow, l);
    if( rc!=SQLITE_OK ) rc = op_store_err(p, rc);
    for(i=0; rc==SQLITE_OK && i<l->n; i++){
      rc = depot_pin_remove(p->pStore, iBranch, l->aTxid[i], eKind,
                            l->aOwner[i], l->anOwner[i], p->pzErr);
    }
  }while( rc==SQLITE_OK && l->n==64 );
  sqlite3_free(l);
  return rc;
}

/* Branch iBranch is dropped: release its restore points and history
** pins; then, walking up while nothing reads through a dropped branch,
** its fork pin on the parent. */
static int dropRelease(Op *p, uint64_t iBranch){
  RpList l;
  int i, rc = restore_rp_collect(p, &l);
  for(i=0; rc==SQLITE_OK && i<l.n; i++){
    if( l.a[i].iBranch==iBranch ) rc = restore_rp_drop(p, l.azName[i], &l.a[i]);
  }
  restore_rp_free(&l);
  if( rc==SQLITE_OK ) rc = dropPins(p, iBranch, LAYOUT_PIN_HISTORY);
  while( rc==SQLITE_OK && iBranch ){
    BranchRecord rec;
    int64_t nRef = 0;
    unsigned char o[8];
    rc = op_refcount(p, iBranch, &nRef);
    if( rc==SQLITE_OK ) rc = depot_branch_get(p->pStore, iBranch, &rec,
                                              p->pzErr);
    if( rc!=SQLITE_OK || nRef>0 || rec.eState!=LAYOUT_STATE_DROPPED
     || rec.iParent==0 ){
      break;
    }
    bytes_put64(o, iBranch);
    rc = depot_pin_remove(p->pStore, rec.iParent, rec.iParentTxid,
                          LAYOUT_PIN_FORK, o, 8, p->pzErr);
    iBranch = rec.iParent;
  }
  return rc;
}

/* The branch to drop by id: it must be a branch of p->zDb no name leads
** to, not dropped yet. */
static int dropCheckId(Op *p, uint64_t iBranch){
  BranchRecord rec;
  DepotName nm;
  int rc = depot_branch_get(p->pStore, iBranch, &rec, p->pzErr);
  if( rc==SQLITE_OK && strcmp(rec.zDb, p->zDb)!=0 ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %llu is"
        " not a branch of database %s", (unsigned long long)iBranch, p->zDb));
  }
  if( rc==SQLITE_OK && rec.eState==LAYOUT_STATE_DROPPED ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %llu is"
        " already dropped", (unsigned long long)iBranch));
  }
  if( rc==SQLITE_OK ) rc = depot_name_resolve(p->pStore, rec.iBucket, p->zDb,
                                              rec.zBranch, &nm, p->pzErr);
  if( rc==SQLITE_OK && nm.iBranch==iBranch ){
    return op_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch %llu is"
        " the live branch %s; drop it by name", (unsigned long long)iBranch,
        rec.zBranch));
  }
  return rc;
}

int depot_drop_branch(const char *zStore, const char *zDb,
                      const char *zBranch, uint64_t iBranch, char **pzErr){
  Op op;
  OpView v;
  uint64_t iVs = 0;
  int rc = op_open(&op, zStore, zDb, pzErr);
  memset(&v, 0, sizeof(v));
  if( rc==SQLITE_OK && zBranch ){
    rc = op_check_name(&op, "branch", zBranch);
    if( rc==SQLITE_OK ) rc = op_view(&op, zBranch, &v);
    if( rc==SQLITE_OK ) rc = op_next_vs(&op, &iVs);
    if( rc==SQLITE_OK ) rc = depot_ptr_set(op.pStore, op.iBucket, op.zDb,
                                           zBranch, v.iOwn, 0, iVs, 'd', pzErr);
    iBranch = v.iOwn;
  }else if( rc==SQLITE_OK ){
    rc = dropCheckId(&op, iBranch);
  }
  if( rc==SQLITE_OK && iBranch ){
    rc = op_set_state(&op, iBranch, LAYOUT_STATE_DROPPED);
    if( rc==SQLITE_OK ) rc = dropRelease(&op, iBranch);
  }
  return op_end(&op, rc);
}

int depot_abandon_unborn(const char *zStore, const char *zDb,
                         const char *zBranch, char **pzErr){
  Op op;
  DepotName nm;
  BranchRecord rec;
  int bDone = 0;
  int rc = op_open(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "branch", zBranch);
  if( rc==SQLITE_OK ) rc = depot_name_resolve(op.pStore, op.iBucket, op.zDb,
                                              zBranch, &nm, pzErr);
  if( rc==SQLITE_OK && nm.iBranch ){
    rc = depot_branch_get(op.pStore, nm.iBranch, &rec, pzErr);
    if( rc==SQLITE_OK ) rc = depot_branch_abandon(op.pStore, nm.iBranch, &rec,
                                                  &bDone, pzErr);
  }
  return op_end(&op, rc);
}
