/*
** layout.h -- the key layout of the outer store and the codecs of its rows
** (private to vfs/ and its tests).
**
** Every key starts with the prefix byte 0x02 and a partition byte; ids are
** big-endian and fixed-width so that keys sort numerically:
**
**   FORMAT   02 00 "format"                     -> u32 layout version (1)
**   DBPTR    02 10 {db} 00 {branch} 00          -> u64 branch id
**   BRANCHES 02 20 {branch_id:8}                -> BranchRecord
**   BR       02 30 {branch_id:8} 01             -> DbHead (META/head)
**            02 30 {branch_id:8} 02             -> i64 LE net stored bytes
**            02 30 {branch_id:8} 10 {txid:8}    -> CommitRow (COMMITS)
**            02 30 {branch_id:8} 11 {vs:8}      -> u64 txid (VTX)
**            02 30 {branch_id:8} 20 {pgno:4}{txid:8} -> PidxValue (PIDX)
**            02 30 {branch_id:8} 30 {txid:8}{chunk:4} -> blob chunk (DELTA)
**   CTR      02 40 "vs"                         -> i64 LE commit sequence
**            02 40 "branch"                     -> i64 LE last branch id
**            02 40 "stored"                     -> i64 LE stored blob bytes
**
** The page index row of page P written by commit T is keyed (P, T), so
** "the owner of P as of txid T" is one reverse seek from (P, T).  Txids of
** a branch are 1, 2, 3... in the order the head compare-and-set accepted
** them; "vs" orders commits across the whole store.  Neither comes from a
** clock.  Names of databases and branches are 1..255 bytes without NUL.
** SHARD rows (partition 0x40 under BR) are reserved for compaction.
*/
#ifndef DEPOT_LAYOUT_H
#define DEPOT_LAYOUT_H

#include <stdint.h>

#define LAYOUT_VERSION     1
#define LAYOUT_MAX_KEY     520      /* longest key any builder produces */
#define LAYOUT_MAX_NAME    255

#define LAYOUT_P_FORMAT    0x00
#define LAYOUT_P_DBPTR     0x10
#define LAYOUT_P_BRANCHES  0x20
#define LAYOUT_P_BR        0x30
#define LAYOUT_P_CTR       0x40

#define LAYOUT_BR_HEAD     0x01
#define LAYOUT_BR_QUOTA    0x02
#define LAYOUT_BR_COMMITS  0x10
#define LAYOUT_BR_VTX      0x11
#define LAYOUT_BR_PIDX     0x20
#define LAYOUT_BR_DELTA    0x30

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

/* BRANCHES/{id}. */
typedef struct BranchRecord BranchRecord;
struct BranchRecord {
  uint64_t iParent;         /* 0: a root branch */
  uint64_t iParentTxid;     /* fork point in the parent */
  char zDb[LAYOUT_MAX_NAME+1];
  char zBranch[LAYOUT_MAX_NAME+1];
};

/* PIDX/{pgno}/{txid}: where the page's frame sits in DELTA/{txid}. */
typedef struct PidxValue PidxValue;
struct PidxValue {
  uint32_t iOffset;
  uint32_t nByte;
  uint32_t szChunk;
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
int layout_key_ctr(unsigned char *a, const char *zName);

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

#endif /* DEPOT_LAYOUT_H */
