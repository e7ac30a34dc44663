/*
** db.h -- one database branch in the outer store: resolving names, the
** head, reading a page as of a txid, and publishing a commit (private to
** vfs/; the VFS in vfs/vfs.c and the public calls of vfs/depot_vfs.h use
** it).
**
** Everything here goes through vfs/store/store.h only.
*/
#ifndef DEPOT_DB_H
#define DEPOT_DB_H

#include "vfs/store/store.h"
#include "vfs/depot_vfs.h"
#include "vfs/layout.h"
#include "vfs/ltx.h"
#include "vfs/pcache.h"
#include "vfs/pagemap.h"

/* The branch id of (zDb, zBranch) in bucket main, 0 if it does not exist
** yet (inherited names of other buckets: depot_name_resolve()). */
int depot_db_resolve(Store*, const char *zDb, const char *zBranch,
                     uint64_t *piBranch, char **pzErr);

/* ---- the format row, names, buckets, chains and pins (vfs/branch.c) ---- */

/* Check the format-version row (written with the first branch):
** SQLITE_OK when absent (new store) or LAYOUT_VERSION, SQLITE_CANTOPEN
** with *pzErr for another version. */
int depot_db_check_format(Store*, char **pzErr);

/* Where the name (bucket, db, branch) leads now. */
typedef struct DepotName DepotName;
struct DepotName {
  uint64_t iBranch;       /* the name's own branch in its bucket; 0: none */
  uint64_t iInhBranch;    /* else, if not 0: inherited from an ancestor
                          ** bucket: that branch ... */
  uint64_t iInhTxid;      /* ... as of this txid (the bucket fork point) */
};

/* Resolve a name, walking bucket parents (each capped at its fork vs;
** tombstones hide inherited names).  All-zero *pName: no such name. */
int depot_name_resolve(Store*, uint64_t iBucket, const char *zDb,
                       const char *zBranch, DepotName *pName, char **pzErr);

/* The id of bucket zBucket ("main" is 0).  *pbFound 0 if it does not
** exist. */
int depot_bucket_find(Store*, const char *zBucket, uint64_t *piBucket,
                      int *pbFound, char **pzErr);

/* The read path of a branch: level 0 is the branch itself up to aCap[0],
** each next level its parent up to the fork point.  Immutable once built,
** except aCap[0], which follows the snapshot.  aGapLo/aGapHi remember, per
** ancestor level, the last run of pages [lo, hi) found to have no page
** index row at all there, so a scan skips that level's seeks for them
** (ancestor levels only: rows written later are past their caps). */
typedef struct DepotChain DepotChain;
struct DepotChain {
  int n;
  uint64_t aBranch[DEPOT_MAX_FORK_DEPTH+1];
  uint64_t aCap[DEPOT_MAX_FORK_DEPTH+1];
  uint32_t aGapLo[DEPOT_MAX_FORK_DEPTH+1];
  uint32_t aGapHi[DEPOT_MAX_FORK_DEPTH+1];
};

/* Build the chain of iBranch capped at iCap.  SQLITE_CORRUPT for a
** missing record or a chain longer than DEPOT_MAX_FORK_DEPTH+1 levels. */
int depot_db_chain(Store*, uint64_t iBranch, uint64_t iCap, DepotChain*,
                   char **pzErr);

/* The branch record of iBranch.  SQLITE_NOTFOUND (with *pzErr) if absent. */
int depot_branch_get(Store*, uint64_t iBranch, BranchRecord*, char **pzErr);

/* The database as of txid iTxid of iBranch: the commit row's geometry and
** checksum, or for txid 0 the head the branch was forked with (all zero
** for a root branch).  SQLITE_NOTFOUND with *pzErr when that commit's row
** is gone. */
int depot_db_state_at(Store*, uint64_t iBranch, uint64_t iTxid, DbHead*,
                      char **pzErr);

/* The newest txid of iBranch committed at or before store sequence iVs
** (0: none). */
int depot_db_txid_at_vs(Store*, uint64_t iBranch, uint64_t iVs,
                        uint64_t *piTxid, char **pzErr);

/* Next store-wide sequence number (inside a write transaction). */
int depot_next_vs(Store*, uint64_t *piVs, char **pzErr);

/* Point (bucket, db, branch) at iNew (0: remove it; a tombstone in a
** bucket that can inherit) as of sequence iVs, with a PTRHIST row that
** records iOld and eReason. */
int depot_ptr_set(Store*, uint64_t iBucket, const char *zDb,
                  const char *zBranch, uint64_t iOld, uint64_t iNew,
                  uint64_t iVs, int eReason, char **pzErr);

/* Add or remove one DB_PIN row of iBranch at iTxid and keep the branch's
** refcount, descendant pin and restore-point pin in step with the rows. */
int depot_pin_add(Store*, uint64_t iBranch, uint64_t iTxid, int eKind,
                  const void *pOwner, int nOwner, char **pzErr);
int depot_pin_remove(Store*, uint64_t iBranch, uint64_t iTxid, int eKind,
                     const void *pOwner, int nOwner, char **pzErr);

/* Create a branch record (id from CTR "branch") forked from iParent at
** iParentTxid (0, 0: a root), with its head (txid 0, geometry of pState)
** and head_at_fork rows and the fork pin on the parent.  *piNew gets it. */
int depot_branch_create(Store*, const BranchRecord *pRec,
                        const DbHead *pState, uint64_t *piNew, char **pzErr);

/* *pbUnborn: 1 when branch iBranch was created by a staged batch and has
** no commit (its UNBORN row is there and its head is at txid 0). */
int depot_branch_unborn(Store*, uint64_t iBranch, int *pbUnborn,
                        char **pzErr);

/* Inside a write transaction: if branch iBranch (record *pRec) is unborn,
** live, unpinned, the one its name leads to, and no writer holds the
** name's lock (a writer that takes it later finds the name gone), take
** the name away as if the branch had never been created (its pointer and
** the pointer's history row; a tombstone in a bucket other than main
** when nothing was inherited, which shows the same), release its fork pin
** and mark it dropped, so reclaim removes its rows and record.
** *pbDone says whether it did. */
int depot_branch_abandon(Store*, uint64_t iBranch, const BranchRecord *pRec,
                         int *pbDone, char **pzErr);

/* The head of branch iBranch; a branch id of 0 (not created) gives an
** all-zero head.  SQLITE_CORRUPT with *pzErr if the row does not decode. */
int depot_db_head(Store*, uint64_t iBranch, DbHead *pHead, char **pzErr);

/* What one reader remembers of its lookups.  Frames are read by byte
** range from their chunk rows (store_get_range()), so no chunk is kept
** here.  Owned by one file handle (no locking). */
#define DEPOT_PIDX_WINDOW 64     /* pages of one page index window */
typedef struct DepotChunkCache DepotChunkCache;
struct DepotChunkCache {
  /* While bStable (the owner holds a store read transaction, so nothing
  ** it reads can change), lookups remember: per chain level, a run of
  ** pages [lo, hi) with no page index row at all, and the last shard
  ** lookup.  depot_chunk_cache_unstable() forgets both. */
  int bStable;
  uint32_t aNoPidxLo[DEPOT_MAX_FORK_DEPTH+1];
  uint32_t aNoPidxHi[DEPOT_MAX_FORK_DEPTH+1];
  struct DepotShardMemo {
    int bValid, bFound;
    uint64_t iBranch, iCap, iAsOf;
    uint32_t iShard;
    ShardRow row;
  } shard;
  /* Once lookups of one level go page after page: the page index rows of
  ** the next pages [lo, hi) of that level, read with one scan (a server
  ** store pays a round trip per seek). */
  struct DepotPidxWindow {
    int bValid;
    int iLastLevel;              /* the level and page of the last lookup */
    uint64_t iLastBranch;
    uint32_t iLast;
    uint64_t iBranch, iCap;      /* the window's level */
    uint32_t lo, hi;
    struct DepotPidxSlot {
      int bFound, rc;            /* rc: the row's decoding */
      uint64_t iOwner;
      PidxValue v;
    } a[DEPOT_PIDX_WINDOW];
  } win;
};

/* Mark the snapshot stable (bStable) or not; either way forget the
** lookups remembered under the previous snapshot. */
void depot_chunk_cache_stable(DepotChunkCache*, int bStable);

/* Forget everything. */
void depot_chunk_cache_clear(DepotChunkCache*);

/* Read page pgno through chain pChain into pOut (szPage bytes): level by
** level, the newest page index row at or before the level's cap and the
** newest version of the page's shard at or before it (two reverse seeks
** per level, stopping at the first level with either).  The newer of the
** two wins: a shard version as of S holds the page as the branch read it
** at S, so a page index row older than S is superseded (compaction may
** already have cleared the rows between), while a row newer than S was
** written after it.  Ties read the same page.  A shard is a full image
** (ancestors included), so a shard hit ends the walk.  Then the frame is
** read (through pCache and pChunks when not NULL).  A page with neither
** reads as zeros.  *piOwner (if not NULL) gets the owning txid, or the
** shard's as_of with bit 63 set (0 for a zero page).  SQLITE_CORRUPT with
** *pzErr for a missing chunk or a bad frame or row. */
int depot_db_read_page(Store*, DepotCache *pCache,
                       DepotChunkCache *pChunks, ZSTD_DCtx*,
                       DepotChain *pChain, uint32_t pgno,
                       uint32_t szPage, unsigned char *pOut,
                       uint64_t *piOwner, char **pzErr);

/* Where page pgno lives through pChain, found as depot_db_read_page()
** finds it (the seeks), in *pLoc (DEPOT_LOC_ZERO for a page with neither
** row).  SQLITE_CORRUPT with *pzErr for a bad row. */
int depot_db_locate(Store*, DepotChunkCache *pChunks, DepotChain *pChain,
                    uint32_t pgno, DepotPageLoc *pLoc, char **pzErr);

/* The decoded-page cache key of a location: its txid, bit 63 set for a
** shard, 0 for no page. */
uint64_t depot_loc_owner(const DepotPageLoc*);

/* Read page pgno from location pLoc into pOut: zeros for DEPOT_LOC_ZERO,
** else through pCache (when not NULL), then the frame's byte range; a
** page decoded for a sequential scan (bScan) enters pCache through
** depot_cache_put_scan().  SQLITE_CORRUPT with *pzErr for a
** missing chunk (a blob reclaimed since the location was found) or a bad
** frame. */
int depot_db_read_loc(Store*, DepotCache *pCache, int bScan, ZSTD_DCtx*,
                      const DepotPageLoc *pLoc, uint32_t pgno,
                      uint32_t szPage, unsigned char *pOut, char **pzErr);

/* Read nByte stored bytes of the blob of location pLoc (of page pgno),
** from its frame's offset on, into pOut: the frames of the following
** pages of the same blob when they are stored next to it (read-ahead).
** SQLITE_CORRUPT with *pzErr when the blob's chunks are missing or short. */
int depot_db_read_span(Store*, const DepotPageLoc *pLoc, uint32_t pgno,
                       uint32_t nByte, unsigned char *pOut, char **pzErr);

/* The CRC-64 of page pgno (szPage bytes) at location pLoc, as its frame
** header states it, read without decoding the frame (the 20 header bytes
** only).  SQLITE_NOTFOUND for a location that holds no frame (a zero
** page); SQLITE_CORRUPT with *pzErr for a missing chunk (a blob reclaimed
** since the location was found) or a header that does not match. */
int depot_db_loc_crc(Store*, const DepotPageLoc *pLoc, uint32_t pgno,
                     uint32_t szPage, uint64_t *piCrc, char **pzErr);

/* Read and decode the frame of page pgno that page index row pv of
** DELTA/{iTxid} of iBranch points at (through pChunks when not NULL).
** SQLITE_CORRUPT with *pzErr for a missing or short chunk, a frame of
** another page or a CRC mismatch. */
int depot_db_read_frame(Store*, DepotChunkCache *pChunks, ZSTD_DCtx*,
                        uint64_t iBranch, uint64_t iTxid,
                        const PidxValue *pv, uint32_t pgno, uint32_t szPage,
                        unsigned char *pOut, char **pzErr);

/* The blob of a write transaction larger than its budget, written ahead
** of its commit (vfs/vfs.c stages pages past the budget): the DELTA chunk
** rows of txid iTxid (the head's txid + 1) of iBranch, a stream of LTX
** parts back to back, cut into chunks of szChunk bytes, with the page
** index rows (P, iTxid) of the pages staged and the STAGE rows naming
** those pages (vfs/layout.h).  No commit row and no head name those rows
** until the commit publishes them, and every read is capped at a head, so
** no reader, fork or restore point can reach them; rows of a txid past a
** branch's head are staged rows, which the branch's next writer (before it
** stages or commits) and depot_gc remove with depot_stage_step().  Owned
** by one file handle, whose writer holds the name's write lock from its
** first staged part to its commit. */
typedef struct DepotStageStream DepotStageStream;
struct DepotStageStream {
  uint64_t iBranch, iTxid;    /* iTxid 0: nothing staged */
  uint32_t szChunk;
  uint32_t nFrame;            /* frames in the parts so far */
  uint32_t nPart;             /* STAGE rows written so far */
  uint64_t nBlob;             /* bytes so far: whole chunk rows, then ... */
  unsigned char *aTail;       /* ... (szChunk bytes) the nBlob%szChunk bytes
                              ** of the partial last chunk, written by the
                              ** next append or the commit: no chunk row of
                              ** the stream is ever written twice */
};

/* Start staging txid iTxid of iBranch (drops any earlier stream). */
int depot_stage_begin(DepotStageStream*, uint64_t iBranch, uint64_t iTxid,
                      uint32_t szChunk);

/* Append one LTX part of n bytes in a store write transaction of its own:
** the whole chunk rows it completes (the rest stays in aTail), a page
** index row (P, txid) for each of its nFrame frames aRef[] (offsets from
** the part's start; a page staged before gets its row replaced), and the
** STAGE rows naming those pages.  The caller has removed what an earlier
** stream of the txid left (depot_stage_step()); the first append also
** removes any DELTA row of the txid.  On an error nothing is appended (the
** stream stays as it was). */
int depot_stage_append(Store*, DepotStageStream*, const unsigned char *a,
                       int64_t n, uint32_t nFrame, const LtxFrameRef *aRef,
                       char **pzErr);

/* Remove the page index rows (aPgno[i], pS->iTxid) of n pages whose staged
** frames the transaction no longer publishes, in a store write transaction
** of its own (their STAGE rows stay: removing a row twice is harmless). */
int depot_stage_unindex(Store*, const DepotStageStream*,
                        const uint32_t *aPgno, uint32_t n, char **pzErr);

/* Where the newest staged frame of page pgno of stream pS is: its page
** index row (pgno, pS->iTxid), in *pv (offset from the blob's start).  A
** missing or malformed row is SQLITE_CORRUPT. */
int depot_stage_locate(Store*, const DepotStageStream *pS, uint32_t pgno,
                       PidxValue *pv, char **pzErr);

/* Remove every DELTA row of iBranch at txid iFrom or later inside the
** caller's write transaction; *pnRow (if not NULL) gets how many there
** were. */
int depot_stage_clear(Store*, uint64_t iBranch, uint64_t iFrom,
                      int64_t *pnRow, char **pzErr);

/* One bounded step of the removal of iBranch's staged rows, inside the
** caller's write transaction, against the head read in it: published
** STAGE rows (txid at or below the head, at most nMax); else one STAGE
** row past the head with the page index rows it names (at most
** LAYOUT_STAGE_PAGES + 1 rows); else DELTA rows past the head (at most
** nMax).  *pnRow gets the rows removed, *pbMore 1 when more may remain.
** Only the holder of the name's write lock, or a reclaim that found it
** free inside this transaction, may call it. */
int depot_stage_step(Store*, uint64_t iBranch, int nMax, int64_t *pnRow,
                     int *pbMore, char **pzErr);

/* Rows one removal step of a writer visits (depot_stage_sweep()). */
#define DEPOT_STAGE_BATCH 1024

/* depot_stage_step() until nothing is left, one store write transaction a
** step (none may be open): the writer's removal of staged rows. */
int depot_stage_sweep(Store*, uint64_t iBranch, int nMax, char **pzErr);

/* 1 if iBranch has DELTA rows at txid iFrom or later or any STAGE row. */
int depot_stage_exists(Store*, uint64_t iBranch, uint64_t iFrom,
                       int *pbExists, char **pzErr);

/* Forget the stream (its rows stay for the caller to remove). */
void depot_stage_reset(DepotStageStream*);

/* One commit to publish: the changed pages (ascending, already compared
** with the base) and the new size and checksum. */
typedef struct DepotCommit DepotCommit;
struct DepotCommit {
  const char *zDb, *zBranch;
  uint64_t iBucket;
  uint64_t iBranch;           /* 0: create the branch in this commit */
  uint64_t iInhBranch;        /* creating: fork of this inherited branch */
  uint64_t iInhTxid;          /* ... at this txid (see DepotName) */
  DbHead base;                /* head the writer started from */
  uint32_t szPage, nPage;     /* after the commit */
  uint64_t iChecksum;         /* post-apply database checksum */
  uint32_t nDirty;
  const uint32_t *aPgno;
  const unsigned char *const *apPage;
  DepotPageLoc *aLocOut;      /* not NULL: gets the nDirty pages' locations
                              ** when the commit succeeds */
  DepotStageStream *pStage;   /* not NULL and staged: the commit's blob
                              ** starts with this stream (iBranch must be
                              ** its branch, base.iTxid+1 its txid), whose
                              ** page index rows the commit publishes (a
                              ** page of aPgno gets its row replaced) */
  int nThread;                /* zstd worker threads (ltx_encode_threads) */
};

/* Publish pC as one store transaction: the blob in DELTA chunk rows (after
** a staged stream: only its unwritten tail and the last part, the staged
** rows stay as written, none is written again), a page index row per page
** of aPgno (staged pages have theirs already: the transaction's size is
** bounded by the writer's budget, not by the pages staged), COMMITS/VTX/
** LOG rows, quota counters and the
** head, which must still equal pC->base (compare-and-set); the name must
** still lead where it led (to iBranch, or to the inherited branch).  The
** blob's bytes are charged with depot_quota_charge() before any row is
** written: past the database's cap the commit fails with SQLITE_FULL.  A
** branch created by the commit (iBranch 0) starts at txid 1.  On SQLITE_OK the
** commit is durable (store_commit()'s promise), *pHead is the new head and
** *piBranch the branch id.  A commit that staged nothing and finds STAGE
** rows of its txid (a crashed writer's) removes them and their page index
** rows first (depot_stage_sweep(): the caller holds the name's write lock)
** and tries again.  SQLITE_BUSY_SNAPSHOT when another writer
** committed first (nothing written); SQLITE_FULL when the commit would
** pass the quota of its database (nothing written, *pzErr says how many
** bytes it needs and how many of the cap are used); any other error:
** nothing written, *pzErr says why. */
int depot_db_commit(Store*, const DepotCommit *pC, ZSTD_CCtx*, int iLevel,
                    DbHead *pHead, uint64_t *piBranch, char **pzErr);

/* Create the branch a first commit of pC would create (iBranch must be 0;
** a fork of the inherited branch when the name was inherited), without a
** commit, as one store transaction of its own: its record, its pointer
** and a head at txid 0 with the geometry and checksum of pC->base, and
** its UNBORN row (vfs/layout.h: unborn until its first commit).  A
** write transaction that stages pages (vfs/vfs.c) creates its branch so
** first.  *pHead gets the head, *piBranch the id.  SQLITE_BUSY_SNAPSHOT
** when the name leads elsewhere now (nothing written). */
int depot_db_create(Store*, const DepotCommit *pC, DbHead *pHead,
                    uint64_t *piBranch, char **pzErr);

/* ---- quotas (vfs/quota.c) ---- */

/* The one place that moves stored-byte counters: inside the caller's
** write transaction, add nDelta (negative: bytes reclaimed) to the BR 02
** counter of iBranch, the store-wide CTR "stored" and the QUOTA 'u' row
** of the branch's database (bucket and name from its record; an absent
** row is first set to the sum of the database's branch counters).  With
** bEnforce and nDelta>0, a database with a cap that the charge would pass
** gets SQLITE_FULL with *pzErr ("depot: quota of database 'app' exceeded:
** commit needs N bytes, M of CAP used") and nothing written.  Commits
** call it with their blob size and bEnforce 1; reclaim calls it with the
** negative size of what it deletes and bEnforce 0.  Nothing is durable
** until the caller's store_commit(). */
int depot_quota_charge(Store*, uint64_t iBranch, int64_t nDelta,
                       int bEnforce, char **pzErr);

/* Called for each commit row by depot_db_list_commits(); nonzero stops. */
typedef int (*DepotCommitRowFn)(void*, const CommitRow*);

/* The commit rows of a branch in txid order. */
int depot_db_list_commits(Store*, uint64_t iBranch, DepotCommitRowFn,
                          void*, char **pzErr);

/* Read and check the whole blob of commit iTxid (its rows joined).  On
** SQLITE_OK *ppBlob is sqlite3_malloc'd. */
int depot_db_read_blob(Store*, uint64_t iBranch, const CommitRow*,
                       unsigned char **ppBlob, char **pzErr);

/* ---- shards (vfs/db.c, written by vfs/compact.c) ---- */

/* The newest version of shard iShard of iBranch at or before iTxid:
** *pbFound, its as_of in *piAsOf and its row in *pRow. */
int depot_shard_find(Store*, uint64_t iBranch, uint32_t iShard,
                     uint64_t iTxid, int *pbFound, uint64_t *piAsOf,
                     ShardRow *pRow, char **pzErr);

/* Check one shard version as a verifier would: its ShardRow decodes, its
** chunk rows are all present with the row's sizes, the joined blob passes
** ltx_verify() (header, index, every frame's CRC-64, pages CRC, whole-blob
** CRC), its header matches the row (page size, database size, as_of), and
** every slot of the row points at the frame of its own page in the blob
** (and a zero-length slot at a page the blob does not hold).  SQLITE_OK
** when sound; SQLITE_CORRUPT with *pzErr naming the first problem;
** SQLITE_NOTFOUND when the version does not exist; store errors. */
int depot_shard_verify(Store*, uint64_t iBranch, uint32_t iShard,
                       uint64_t iAsOf, ZSTD_DCtx*, char **pzErr);

/* Read and join the whole blob of one shard version.  On SQLITE_OK
** *ppBlob is sqlite3_malloc'd (pRow->nBlob bytes). */
int depot_shard_read_blob(Store*, uint64_t iBranch, uint32_t iShard,
                          uint64_t iAsOf, const ShardRow *pRow,
                          unsigned char **ppBlob, char **pzErr);

/* ---- compaction internals (vfs/compact.c) ---- */

/* The store's background threshold (CONFIG "compact"; absent: the
** default) read through an open handle. */
int depot_compact_threshold_read(Store*, int64_t *pn);

/* The compaction watermark of iBranch (0: never compacted). */
int depot_compact_mark(Store*, uint64_t iBranch, uint64_t *piMark);

/* depot_compact() of one branch by id. */
int depot_compact_branch_id(const char *zStore, uint64_t iBranch,
                            DepotCompactResult *pRes, char **pzErr);

/* Queue branch iBranch of the store file zPath for the process's
** background compactor (started on first use; a request already queued
** is not repeated): it compacts the branch, then reclaims the store, with
** the default VFS; failures go to sqlite3_log.  Never blocks on store
** work.  depot_compact_background_runs() counts the requests done;
** depot_compact_background_pending() the requests queued or running. */
void depot_compact_wake(const char *zPath, uint64_t iBranch);
int64_t depot_compact_background_runs(void);
int depot_compact_background_pending(void);

#endif /* DEPOT_DB_H */
