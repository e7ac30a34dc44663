/*
** op.h -- the frame every branch operation of vfs/depot_vfs.h runs in
** (private to vfs/op.c, pitr.c, fork.c, restore.c, drop.c and list.c).
**
** An operation opens the store with op_open() (a write transaction; with
** op_open_as(bRead) a store on read-only media is opened immutable in a
** read transaction), works inside that one store transaction and ends
** with op_end(), which commits on success and rolls back otherwise: the
** operation is all or nothing, also under SIGKILL.  Every step reports
** its error through op_fail() into the operation's *pzErr and returns the
** code.
*/
#ifndef DEPOT_OP_H
#define DEPOT_OP_H

#include "vfs/db.h"

/* Bucket ancestry deeper than this is corrupt (and no fork makes one). */
#define OP_MAX_BUCKET_DEPTH 64

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
typedef struct OpView OpView;
struct OpView {
  uint64_t iOwn;            /* 0: inherited */
  uint64_t iTop, iTopTxid;  /* the state the name reads now */
};

/* ---- the frame (vfs/op.c) ---- */

/* Replace *p->pzErr with zMsg (consumed); returns rc. */
int op_fail(Op *p, int rc, char *zMsg);

/* op_fail() with the store's own message. */
int op_store_err(Op *p, int rc);

/* The wall clock in ms since 1970. */
int64_t op_now_ms(void);

/* Open zStore and start a write transaction; resolve the bucket of zQual
** ("NAME" or "BUCKET/NAME" into p->zBucket, p->zDb, p->iBucket; NULL:
** none).  With bRead (an operation that only reads), a store on
** read-only media is opened immutable in a read transaction instead.
** op_open() is op_open_as() without bRead. */
int op_open_as(Op *p, const char *zStore, const char *zQual, int bRead,
               char **pzErr);
int op_open(Op *p, const char *zStore, const char *zQual, char **pzErr);

/* Commit on success, else roll back; the handle is kept idle for the next
** operation, or closed after a failure.  Returns the operation's code. */
int op_end(Op *p, int rc);

/* SQLITE_ERROR unless z is a valid name (zWhat names it in the message). */
int op_check_name(Op *p, const char *zWhat, const char *z);

/* A new store sequence number for a change of the catalog, with its LOG
** row (branch 0, txid 0, the time now). */
int op_next_vs(Op *p, uint64_t *piVs);

/* The view of branch zBranch of p->zDb; SQLITE_ERROR if the name leads
** nowhere. */
int op_view(Op *p, const char *zBranch, OpView *pV);

/* Move (b, 0) of a fork to the parent's (branch, cap), repeatedly. */
int op_normalize(Op *p, uint64_t *piBranch, uint64_t *piTxid);

/* Restore point zName of p->zDb into *pRp; *pbFound 0 if there is none. */
int op_restore_point(Op *p, const char *zName, RestorePoint *pRp,
                     int *pbFound);

/* A new branch named zName of p->zDb forked from (iFrom, iTxid) as of
** store sequence iVs; refuses a chain deeper than DEPOT_MAX_FORK_DEPTH. */
int op_new_fork(Op *p, const char *zName, uint64_t iFrom, uint64_t iTxid,
                uint64_t iVs, uint64_t *piNew);

/* Mark branch iBranch frozen or dropped (LAYOUT_STATE_*). */
int op_set_state(Op *p, uint64_t iBranch, int eState);

/* The refcount of iBranch (0 without a row), read without writing. */
int op_refcount(Op *p, uint64_t iBranch, int64_t *pn);

/* ---- where `at` leads (vfs/pitr.c) ---- */

/* The (branch, txid) that pAt (NULL: the head) names on view pV,
** normalized: the head, a txid, an ISO-8601 time under the database's
** point-in-time policy, or a restore point name. */
int pitr_resolve_at(Op *p, const OpView *pV, const DepotAt *pAt,
                    uint64_t *piBranch, uint64_t *piTxid);

/* The store sequence number pAt names for a bucket fork: the current one
** (NULL, head), a store sequence number (DEPOT_AT_TXID) or an ISO-8601
** time under the store's point-in-time policy. */
int pitr_bucket_at(Op *p, const DepotAt *pAt, uint64_t *piVs);

/* ---- restore points (vfs/restore.c) ---- */

/* Restore points of one database: collected, then handed out. */
/* Restore points of one database: collected, then handed out. */
typedef struct RpList RpList;
struct RpList {
  int n, nAlloc;
  char **azName;
  RestorePoint *a;
  int rc;
};

/* Every restore point of p->zDb into l (free it with restore_rp_free()). */
int restore_rp_collect(Op *p, RpList *l);
void restore_rp_free(RpList *l);

/* Remove restore point zName (which exists, as pRp) and its pin. */
int restore_rp_drop(Op *p, const char *zName, const RestorePoint *pRp);

#endif /* DEPOT_OP_H */
