/*
** coverage.h -- what of a branch can still be read, and the context
** compaction (vfs/compact.c) and reclaim (vfs/gc.c) both run in (private
** to those files and vfs/coverage.c).
**
** Coverage points of a branch: its head, the txid of every DB_PIN row on
** it (fork caps, restore points, heads a pointer moved away from), the
** point-in-time representatives its database's policy retains (the last
** commit of each interval newer than the retention cutoff, and the newest
** such commit at or before the cutoff, which a target just inside the
** window resolves to), and its newest commit at or before the store
** sequence of every bucket fork.  Only these states can ever be read again
** (readers of an older head hold a store read transaction, see vfs.c).
*/
#ifndef DEPOT_COVERAGE_H
#define DEPOT_COVERAGE_H

#include "vfs/db.h"

/* ---- sorted sets of u64 ---- */

typedef struct U64Set U64Set;
struct U64Set {
  int n, nAlloc;
  uint64_t *a;
};

/* Append v (SQLITE_NOMEM when out of memory). */
int cov_set_add(U64Set *s, uint64_t v);

/* Sort and drop duplicates. */
void cov_set_sort(U64Set *s);

/* The smallest member >= v, or 0 when none (members are never 0). */
uint64_t cov_set_ceil(const U64Set *s, uint64_t v);

void cov_set_free(U64Set *s);

/* ---- the context of a compaction or reclaim ---- */

typedef struct Cov Cov;
struct Cov {
  Store *pStore;
  char **pzErr;
  ZSTD_CCtx *pCctx;
  ZSTD_DCtx *pDctx;
  int64_t iNowMs;
  const char *zPath;        /* the store file */
  U64Set forkVs;            /* store sequence of every bucket fork */
};

/* Open zStore for compaction, gc or, with bInspect, a call that only
** reads (which opens a store on read-only media too: StoreSqliteConfig);
** close it with cov_close() whatever this returns. */
int cov_open(Cov *p, const char *zStore, int bInspect, char **pzErr);
void cov_close(Cov *p);

/* Replace *p->pzErr with zMsg (consumed); returns rc. */
int cov_fail(Cov *p, int rc, char *zMsg);

/* cov_fail() with the store's own message. */
int cov_store_err(Cov *p, int rc);

/* The wall clock in ms since 1970. */
int64_t cov_now_ms(void);

/* End the write transaction open on p: committed when rc is SQLITE_OK and
** not bStale, else rolled back.  Returns rc or the commit's error. */
int cov_in_write(Cov *p, int rc, int bStale);

/* An 8-byte row: big-endian (bLe 0) or a little-endian counter; absent
** reads as 0.  cov_br_get() reads BR row eSub of branch b. */
int cov_get64(Cov *p, const unsigned char *k, int nKey, int bLe,
              int64_t *pv);
int cov_br_get(Cov *p, uint64_t b, int eSub, int bLe, int64_t *pv);

/* Add iDelta to branch b's net stored bytes, the store's and its
** database's quota use, never enforcing the cap (compaction and reclaim
** must not fail on it).  b's record must still exist. */
int cov_credit(Cov *p, uint64_t b, int64_t iDelta);

/* Every branch id of the store into s. */
int cov_all_branches(Cov *p, U64Set *s);

/* ---- coverage points ---- */

/* The store sequence of every bucket fork into p->forkVs (read once per
** transaction, before cov_points()). */
int cov_load_buckets(Cov *p);

/* Every coverage point of branch b (record pRec, head iHead), sorted. */
int cov_points(Cov *p, uint64_t b, const BranchRecord *pRec,
               uint64_t iHead, U64Set *pK);

/* The same in parts, so that the retained points in time, one visit per
** commit row, can be found in batches of transactions of their own:
** cov_points_base() adds the head, the pins and the bucket forks' points;
** cov_pitr_begin() reads zDb's policy; each cov_pitr_some() visits at most
** nMax (<0: all) more commit rows up to iHead, *pbMore while some may be
** left; cov_pitr_end() adds the newest point older than the retention.
** Then sort the set (cov_set_sort). */
typedef struct CovPitr CovPitr;
struct CovPitr {
  int bOn;                  /* the policy retains points in time */
  int64_t iInterval, iCutoff;
  int bHave;
  uint64_t iPrevTxid, iPrevTime;
  uint64_t iOldRep;         /* newest representative at or before cutoff */
  U64Set *pK;
  int nRow;                 /* rows the last cov_pitr_some() visited */
  int rc;
};
int cov_points_base(Cov *p, uint64_t b, uint64_t iHead, U64Set *pK);
int cov_pitr_begin(Cov *p, const char *zDb, U64Set *pK, CovPitr *w);
int cov_pitr_some(Cov *p, uint64_t b, uint64_t iHead, CovPitr *w, int nMax,
                  int *pbMore);
int cov_pitr_end(CovPitr *w);

/* ---- commit rows a job folds or reclaims ---- */

/* COMMITS rows of txids (lo, hi]: their blob bytes, and which to drop
** (those that are not coverage points of pK). */
/* COMMITS rows of txids (W, T]: their blob bytes, and which to drop. */
typedef struct FoldScan FoldScan;
struct FoldScan {
  const U64Set *pK;
  int64_t nBlob;
  int nCommit;
  U64Set drop;              /* txids to drop ... */
  U64Set dropVs;            /* ... and their VTX keys */
  int nMax;                 /* >0: stop after this many rows ... */
  uint64_t iLast;           /* ... the last txid scanned */
  int rc;
};

/* The commits with lo < txid <= hi of branch b, scanned into f (the first
** f->nMax of them when f->nMax>0: f->nCommit==f->nMax says there may be
** more after f->iLast). */
int cov_scan_commits(Cov *p, uint64_t b, uint64_t lo, uint64_t hi,
                     FoldScan *f);

/* Delete the COMMITS and VTX rows listed in f. */
int cov_drop_commits(Cov *p, uint64_t b, const FoldScan *f);

#endif /* DEPOT_COVERAGE_H */
