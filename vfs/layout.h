/*
** layout.h -- the key layout of the outer store and the codecs of its rows
** (private to vfs/ and its tests).
**
** Every key starts with the prefix byte 0x02 and a partition byte; ids are
** big-endian and fixed-width so that keys sort numerically:
**
**   FORMAT   02 00 "format"                     -> u32 layout version (3)
**   DBPTR    02 10 {db} 00 {branch} 00          -> PtrValue (bucket main)
**   BUCKET_PTR 02 11 {bucket} 00                -> u64 bucket id (not main)
**   BDBPTR   02 12 {bucket:8}{db} 00 {branch} 00 -> PtrValue (other buckets)
**   PTRHIST  02 13 {bucket:8}{db} 00 {branch} 00 {vs:8} -> PtrHistory
**   BRANCHES 02 20 {branch_id:8}                -> BranchRecord
**            02 20 {branch_id:8} 01             -> i64 LE refcount (pins)
**            02 20 {branch_id:8} 02             -> u64 descendant pin txid
**            02 20 {branch_id:8} 03             -> u64 restore-point pin txid
**   BUCKET_BRANCH 02 21 {bucket:8}              -> BucketRecord
**            02 21 {bucket:8} 01                -> i64 LE refcount (forks)
**   BR       02 30 {branch_id:8} 01             -> DbHead (META/head)
**            02 30 {branch_id:8} 02             -> i64 LE net stored bytes
**            02 30 {branch_id:8} 03             -> DbHead (META/head_at_fork)
**            02 30 {branch_id:8} 10 {txid:8}    -> CommitRow (COMMITS)
**            02 30 {branch_id:8} 11 {vs:8}      -> u64 txid (VTX)
**            02 30 {branch_id:8} 20 {pgno:4}{txid:8} -> PidxValue (PIDX)
**            02 30 {branch_id:8} 30 {txid:8}{chunk:4} -> blob chunk (DELTA)
**            02 30 {branch_id:8} 31 {txid:8}{part:4} -> staged pages (STAGE):
**                                                  01, then u32 page numbers
**            02 30 {branch_id:8} 04             -> u64 compacted watermark
**            02 30 {branch_id:8} 05             -> i64 LE compaction generation
**            02 30 {branch_id:8} 06             -> u64 creation vs: made by a
**                                                  writer's first staged batch
**            02 30 {branch_id:8} 40 {shard:4}{as_of:8} -> ShardRow (SHARD)
**            02 30 {branch_id:8} 41 {shard:4}{as_of:8}{chunk:4} -> blob chunk
**   CTR      02 40 "vs"                         -> i64 LE commit sequence
**            02 40 "branch"                     -> i64 LE last branch id
**            02 40 "stored"                     -> i64 LE stored blob bytes
**            02 40 "bucket"                     -> i64 LE last bucket id
**   LOG      02 41 {vs:8}                       -> LogRow (store-wide commits,
**                                                  and catalog changes as
**                                                  branch 0 txid 0)
**   QUOTA    02 42 {bucket:8}{db} 00 'u'        -> i64 LE net stored bytes of
**                                                  the database (all branches)
**            02 42 {bucket:8}{db} 00 'c'        -> i64 LE quota cap in bytes
**   RESTORE_POINT 02 50 {bucket:8}{db} 00 {name} 00 -> RestorePoint
**   CONFIG   02 60 "pitr" 00 [{db}]             -> PitrPolicy (store, db)
**   DB_PIN   02 70 {branch_id:8}{txid:8}{kind}{owner...} -> empty
**   BUCKET_CHILD 02 72 {src:8}{fork_vs:8}{child:8} -> empty
**
** Buckets.  Bucket "main" has id 0 and keeps its pointers in DBPTR; every
** other bucket has an id from CTR "bucket", a BUCKET_PTR row, a record with
** its parent bucket and fork vs, and its pointers in BDBPTR.  A pointer
** value carries the vs at which it was set; a zero branch id there is a
** tombstone hiding an inherited name.  Every change of a pointer also
** writes a PTRHIST row, so a pointer "as of vs V" is one reverse seek.
**
** Pins.  A DB_PIN row records one txid of a branch that something else can
** still read: kind 'f' a fork cap (owner: child branch id), 'r' a restore
** point (owner: bucket id and name), 'h' the head of a branch a pointer
** moved away from (owner: the vs of the move).  The refcount counts the
** branch's DB_PIN rows; the descendant pin is the smallest 'f' txid, the
** restore-point pin the smallest 'r' or 'h' txid (absent: none).
**
** The page index row of page P written by commit T is keyed (P, T), so
** "the owner of P as of txid T" is one reverse seek from (P, T).  Txids of
** a branch are 1, 2, 3... in the order the head compare-and-set accepted
** them; "vs" orders commits across the whole store.  Neither comes from a
** clock.  Names of databases and branches are 1..255 bytes without NUL.
**
** Staged rows (vfs/db.h, DepotStageStream).  The writer of a branch, which
** holds the name's write lock, knows its commit's txid T (the head + 1)
** before it commits: past its budget it writes DELTA rows of T, the page
** index rows (P, T) of the pages it staged, and STAGE rows of T naming
** those pages (at most LAYOUT_STAGE_PAGES a row), each batch in its own
** store transaction.  Nothing that reads as of the head or earlier reaches
** a row of T; the commit row and head of T publish them.  Every page index
** row past a branch's head is named by a STAGE row of its txid, so the
** rows of a transaction that did not commit are found (and removed, in
** bounded batches, by the next writer or depot_gc) without a scan of the
** page index; a STAGE row at or below the head is a published record,
** removed the same way.
**
** Quotas.  A database, for quotas, is a database name in one bucket: every
** branch whose record carries that (bucket, name) -- forks, restore and
** rollback branches, frozen and dropped ones -- counts the blob bytes stored
** under its own BR rows there.  A fork shares its ancestors' rows without
** counting them again; a branch made by the first write through a forked
** bucket counts toward that bucket's database.  The QUOTA 'u' row is the
** sum of the branches' BR 02 counters; it is written the first time a commit
** or reclaim of the database charges it (absent: computed from the branch
** counters), always through depot_quota_charge() (vfs/db.h).
**
** Unborn branches.  A branch with an UNBORN row and a head at txid 0 was
** created by a writer's first staged batch (depot_db_create()) and has no
** commit yet: listings and depot_stats leave it out, and depot_gc removes
** it, name and all, once no writer holds the name's lock.  Its first
** commit makes it an ordinary branch (the row stays until reclaim).
**
** Shards (vfs/compact.c).  Shard S of a branch covers pages
** S*LAYOUT_SHARD_SIZE+1 .. (S+1)*LAYOUT_SHARD_SIZE.  A shard version "as of
** txid T" is the full image of those pages as the branch reads them at T
** (through its ancestors), in one LTX blob in chunk rows under 0x41; its
** ShardRow under 0x40 gives the blob's geometry and every page's frame, so
** "the newest version of shard S at or before T" is one reverse seek.  The
** watermark row says every page index row at or below it has been folded
** into shards (and cleared); the generation row is bumped by every change
** of the branch's pins, every compaction install and every reclaim, so a
** compaction staged against one generation never installs over another.
*/
#ifndef DEPOT_LAYOUT_H
#define DEPOT_LAYOUT_H

#include <stdint.h>

/* Version 2: the store keeps blob chunks apart from the ordered keys
** (vfs/store/sqlite.c, format 1); the keys and rows are those of version
** 1, which a writable open upgrades (the backend migrates the file, then
** depot_db_check_format() rewrites the row).  Version 3: page index rows
** past the head (staged) and STAGE rows may exist; a version 2 store has
** none, so a writable open upgrades it by rewriting the row alone, and a
** build that reads only version 2 (whose commit would publish another
** writer's staged page index rows) refuses it. */
#define LAYOUT_VERSION     3
#define LAYOUT_VERSION_OLDEST 1
#define LAYOUT_MAX_KEY     520      /* longest key any builder produces */
#define LAYOUT_MAX_NAME    255

#define LAYOUT_P_FORMAT    0x00
#define LAYOUT_P_DBPTR     0x10
#define LAYOUT_P_BRANCHES  0x20
#define LAYOUT_P_BR        0x30
#define LAYOUT_P_CTR       0x40
#define LAYOUT_P_BUCKET_PTR 0x11
#define LAYOUT_P_BDBPTR    0x12
#define LAYOUT_P_PTRHIST   0x13
#define LAYOUT_P_BUCKET    0x21
#define LAYOUT_P_LOG       0x41
#define LAYOUT_P_QUOTA     0x42
#define LAYOUT_P_RP        0x50
#define LAYOUT_P_CONFIG    0x60
#define LAYOUT_P_DBPIN     0x70
#define LAYOUT_P_BCHILD    0x72

#define LAYOUT_BRANCH_REFCOUNT 0x01
#define LAYOUT_BRANCH_DESCPIN  0x02
#define LAYOUT_BRANCH_RPPIN    0x03

#define LAYOUT_PIN_FORK    'f'
#define LAYOUT_PIN_RP      'r'
#define LAYOUT_PIN_HISTORY 'h'

#define LAYOUT_STATE_LIVE    0
#define LAYOUT_STATE_FROZEN  1
#define LAYOUT_STATE_DROPPED 2

#define LAYOUT_QUOTA_USED  'u'
#define LAYOUT_QUOTA_CAP   'c'

#define LAYOUT_BR_HEAD     0x01
#define LAYOUT_BR_QUOTA    0x02
#define LAYOUT_BR_FORKHEAD 0x03
#define LAYOUT_BR_COMMITS  0x10
#define LAYOUT_BR_VTX      0x11
#define LAYOUT_BR_PIDX     0x20
#define LAYOUT_BR_DELTA    0x30
#define LAYOUT_BR_STAGE    0x31
#define LAYOUT_BR_CMPMARK  0x04
#define LAYOUT_BR_CMPGEN   0x05
#define LAYOUT_BR_UNBORN   0x06
#define LAYOUT_BR_SHARD    0x40
#define LAYOUT_BR_SHARDBLOB 0x41

/* Pages per shard: 64 pages are 256 KiB at the default 4 KiB page size, a
** few chunk rows once compressed, so a cold scan pays one shard seek per 64
** pages while a commit that touches one page makes a later compaction
** rewrite at most 64 pages of that shard per coverage point. */
#define LAYOUT_SHARD_SIZE  64

/* Page numbers one STAGE row names at most (4 KiB of value). */
#define LAYOUT_STAGE_PAGES 1024

/* META/head of a branch. */
typedef struct DbHead DbHead;
struct DbHead {
  uint64_t iTxid;           /* last commit; 0 = nothing committed */
  uint32_t szPage;
  uint32_t nPage;
  uint64_t iChecksum;       /* XOR of the CRC-64 of every page */
  uint64_t iVs;             /* store-wide sequence of the last commit */
};

/* COMMITS/{txid}. */
typedef struct CommitRow CommitRow;
struct CommitRow {
  uint64_t iTxid;
  uint64_t iTimeMs;         /* wall clock, informational only */
  uint32_t szPage;
  uint32_t nPage;           /* database size after the commit */
  uint32_t nWritten;        /* pages in the blob */
  uint32_t nChunk;          /* DELTA chunk rows */
  uint32_t szChunk;         /* bytes per chunk (the last may be shorter) */
  uint64_t nBlob;           /* blob bytes */
  uint64_t iChecksum;       /* post-apply database checksum */
  uint64_t iVs;
};

/* BRANCHES/{id}.  Ancestry fields never change; eState does. */
typedef struct BranchRecord BranchRecord;
struct BranchRecord {
  uint64_t iParent;         /* 0: a root branch */
  uint64_t iParentTxid;     /* fork point in the parent */
  char zDb[LAYOUT_MAX_NAME+1];
  char zBranch[LAYOUT_MAX_NAME+1];
  uint64_t iBucket;         /* bucket whose pointer created it */
  uint64_t iCreateVs;       /* store-wide sequence at creation */
  int eState;               /* LAYOUT_STATE_* */
};

/* DBPTR / BDBPTR value. */
typedef struct PtrValue PtrValue;
struct PtrValue {
  uint64_t iBranch;         /* 0: tombstone */
  uint64_t iVs;             /* set at this store-wide sequence */
};

/* PTRHIST/{...}/{vs}. */
typedef struct PtrHistory PtrHistory;
struct PtrHistory {
  uint64_t iOld, iNew;      /* branch ids (0: none / removed) */
  uint64_t iTimeMs;
  int eReason;              /* 'c'reate 'f'ork 'r'estore 'b' rollback 'd'rop */
};

/* BUCKET_BRANCH/{id}. */
typedef struct BucketRecord BucketRecord;
struct BucketRecord {
  uint64_t iParent;         /* parent bucket id (main is 0) */
  uint64_t iForkVs;         /* inherited entries are those set at or before */
  char zName[LAYOUT_MAX_NAME+1];
};

/* RESTORE_POINT/{bucket}/{db}/{name}. */
typedef struct RestorePoint RestorePoint;
struct RestorePoint {
  uint64_t iBranch, iTxid, iVs, iTimeMs;
  int bUndo;                /* made by depot_restore */
};

/* CONFIG/pitr. */
typedef struct PitrPolicy PitrPolicy;
struct PitrPolicy {
  int64_t iIntervalMs;      /* 0: every commit is a point */
  int64_t iRetentionMs;     /* 0: point-in-time restore is off */
};

/* LOG/{vs}. */
typedef struct LogRow LogRow;
struct LogRow {
  uint64_t iBranch, iTxid, iTimeMs;
};

/* PIDX/{pgno}/{txid}: where the page's frame sits in DELTA/{txid}. */
typedef struct PidxValue PidxValue;
struct PidxValue {
  uint32_t iOffset;
  uint32_t nByte;
  uint32_t szChunk;
};

/* SHARD/{shard}/{as_of}: one shard version.  aOff/aLen give each page's
** frame in the blob (slot i is page shard*LAYOUT_SHARD_SIZE+1+i); a zero
** length is a page that reads as zeros. */
typedef struct ShardRow ShardRow;
struct ShardRow {
  uint32_t szPage;
  uint32_t nPage;           /* database size at as_of */
  uint32_t nChunk, szChunk;
  uint64_t nBlob;
  uint32_t aOff[LAYOUT_SHARD_SIZE];
  uint32_t aLen[LAYOUT_SHARD_SIZE];
};

/* Key builders: write into a (LAYOUT_MAX_KEY bytes), return the length. */
int layout_key_format(unsigned char *a);
int layout_key_dbptr(unsigned char *a, const char *zDb, const char *zBranch);
int layout_key_dbptr_prefix(unsigned char *a, const char *zDb);
int layout_key_branch(unsigned char *a, uint64_t iBranch);
int layout_key_br(unsigned char *a, uint64_t iBranch, int eSub);
int layout_key_commit(unsigned char *a, uint64_t iBranch, uint64_t iTxid);
int layout_key_vtx(unsigned char *a, uint64_t iBranch, uint64_t iVs);
int layout_key_pidx(unsigned char *a, uint64_t iBranch, uint32_t pgno,
                    uint64_t iTxid);
int layout_key_delta(unsigned char *a, uint64_t iBranch, uint64_t iTxid,
                     uint32_t iChunk);
int layout_key_stage(unsigned char *a, uint64_t iBranch, uint64_t iTxid,
                     uint32_t iPart);
int layout_key_ctr(unsigned char *a, const char *zName);
int layout_key_shard(unsigned char *a, uint64_t iBranch, uint32_t iShard,
                     uint64_t iAsOf);
int layout_key_shard_chunk(unsigned char *a, uint64_t iBranch,
                           uint32_t iShard, uint64_t iAsOf, uint32_t iChunk);
/* Pointer of (db, branch) in bucket iBucket (DBPTR for 0, else BDBPTR);
** _hist appends the vs of a PTRHIST row. */
int layout_key_ptr(unsigned char *a, uint64_t iBucket, const char *zDb,
                   const char *zBranch);
int layout_key_ptr_hist(unsigned char *a, uint64_t iBucket, const char *zDb,
                        const char *zBranch, uint64_t iVs);
int layout_key_branch_sub(unsigned char *a, uint64_t iBranch, int eSub);
int layout_key_bucket_ptr(unsigned char *a, const char *zBucket);
int layout_key_bucket(unsigned char *a, uint64_t iBucket, int eSub);
int layout_key_log(unsigned char *a, uint64_t iVs);
int layout_key_rp(unsigned char *a, uint64_t iBucket, const char *zDb,
                  const char *zName);
int layout_key_pitr(unsigned char *a, const char *zDb);
int layout_key_pin(unsigned char *a, uint64_t iBranch, uint64_t iTxid,
                   int eKind, const void *pOwner, int nOwner);
/* QUOTA row eSub (LAYOUT_QUOTA_*) of database zDb in bucket iBucket. */
int layout_key_quota(unsigned char *a, uint64_t iBucket, const char *zDb,
                     int eSub);
int layout_key_bchild(unsigned char *a, uint64_t iSrc, uint64_t iVs,
                      uint64_t iChild);

/* 1 if z is a valid database or branch name, else 0. */
int layout_name_ok(const char *z);

/* Row codecs.  Encoders write into a and return the length (a must hold
** LAYOUT_MAX_ROW bytes); decoders return SQLITE_OK or SQLITE_CORRUPT. */
#define LAYOUT_MAX_ROW 600
int layout_head_encode(unsigned char *a, const DbHead*);
int layout_head_decode(const unsigned char *a, int n, DbHead*);
int layout_commit_encode(unsigned char *a, const CommitRow*);
int layout_commit_decode(const unsigned char *a, int n, CommitRow*);
int layout_branch_encode(unsigned char *a, const BranchRecord*);
int layout_branch_decode(const unsigned char *a, int n, BranchRecord*);
int layout_pidx_encode(unsigned char *a, const PidxValue*);
int layout_pidx_decode(const unsigned char *a, int n, PidxValue*);
int layout_ptr_encode(unsigned char *a, const PtrValue*);
int layout_ptr_decode(const unsigned char *a, int n, PtrValue*);
int layout_hist_encode(unsigned char *a, const PtrHistory*);
int layout_hist_decode(const unsigned char *a, int n, PtrHistory*);
int layout_bucket_encode(unsigned char *a, const BucketRecord*);
int layout_bucket_decode(const unsigned char *a, int n, BucketRecord*);
int layout_rp_encode(unsigned char *a, const RestorePoint*);
int layout_rp_decode(const unsigned char *a, int n, RestorePoint*);
int layout_pitr_encode(unsigned char *a, const PitrPolicy*);
int layout_pitr_decode(const unsigned char *a, int n, PitrPolicy*);
int layout_log_encode(unsigned char *a, const LogRow*);
int layout_log_decode(const unsigned char *a, int n, LogRow*);
/* STAGE row: n (<= LAYOUT_STAGE_PAGES) page numbers; a must hold
** LAYOUT_STAGE_ROW bytes.  The decoder gives the count (-1: corrupt) and
** the i-th page number with layout_stage_pgno(). */
#define LAYOUT_STAGE_ROW (1 + 4*LAYOUT_STAGE_PAGES)
int layout_stage_encode(unsigned char *a, const uint32_t *aPgno, int n);
int layout_stage_count(const unsigned char *a, int n);
uint32_t layout_stage_pgno(const unsigned char *a, int i);
/* ShardRow needs LAYOUT_SHARD_ROW bytes (more than LAYOUT_MAX_ROW). */
#define LAYOUT_SHARD_ROW (24 + 8*LAYOUT_SHARD_SIZE)
int layout_shard_encode(unsigned char *a, const ShardRow*);
int layout_shard_decode(const unsigned char *a, int n, ShardRow*);

#endif /* DEPOT_LAYOUT_H */
