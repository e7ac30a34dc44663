/*
** db.h -- one database branch in the outer store: resolving names, the
** head, reading a page as of a txid, and publishing a commit (private to
** vfs/; the VFS in vfs/vfs.c and the public calls in vfs/depot.h use it).
**
** Everything here goes through vfs/store.h only.
*/
#ifndef DEPOT_DB_H
#define DEPOT_DB_H

#include "vfs/store.h"
#include "vfs/layout.h"
#include "vfs/ltx.h"
#include "vfs/pcache.h"

/* Check the format-version row: SQLITE_OK when absent (new store) or
** LAYOUT_VERSION, SQLITE_CANTOPEN with *pzErr for another version. */
int depot_db_check_format(Store*, char **pzErr);

/* The branch id of (zDb, zBranch), 0 if it does not exist yet. */
int depot_db_resolve(Store*, const char *zDb, const char *zBranch,
                     uint64_t *piBranch, char **pzErr);

/* The head of branch iBranch; a branch id of 0 (not created) gives an
** all-zero head.  SQLITE_CORRUPT with *pzErr if the row does not decode. */
int depot_db_head(Store*, uint64_t iBranch, DbHead *pHead, char **pzErr);

/* The last few blob chunk rows one reader fetched: chunks are immutable
** once committed, so a scan that reads neighbouring frames of one commit
** fetches each chunk row once.  Owned by one file handle (no locking). */
#define DEPOT_CHUNK_SLOTS 4
typedef struct DepotChunkCache DepotChunkCache;
struct DepotChunkCache {
  struct DepotChunkSlot {
    uint64_t iBranch, iTxid;
    uint32_t iChunk;
    int n;                    /* bytes in a; 0: empty slot */
    unsigned char *a;         /* sqlite3_malloc'd */
  } aSlot[DEPOT_CHUNK_SLOTS];
  int iNext;                  /* slot to replace next */
};

/* Free every cached chunk. */
void depot_chunk_cache_clear(DepotChunkCache*);

/* Read page pgno of branch iBranch as of txid iTxid into pOut (szPage
** bytes): the newest page index row at or before iTxid, then its frame
** (through pCache and pChunks when not NULL).  A page with no row reads as zeros.
** *piOwner (if not NULL) gets the owning txid (0 for a zero page).
** SQLITE_CORRUPT with *pzErr for a missing chunk or a bad frame. */
int depot_db_read_page(Store*, DepotCache *pCache,
                       DepotChunkCache *pChunks, ZSTD_DCtx*,
                       uint64_t iBranch, uint32_t pgno, uint64_t iTxid,
                       uint32_t szPage, unsigned char *pOut,
                       uint64_t *piOwner, char **pzErr);

/* One commit to publish: the changed pages (ascending, already compared
** with the base) and the new size and checksum. */
typedef struct DepotCommit DepotCommit;
struct DepotCommit {
  const char *zDb, *zBranch;
  uint64_t iBranch;           /* 0: create the branch in this commit */
  DbHead base;                /* head the writer started from */
  uint32_t szPage, nPage;     /* after the commit */
  uint64_t iChecksum;         /* post-apply database checksum */
  uint32_t nDirty;
  const uint32_t *aPgno;
  const unsigned char *const *apPage;
};

/* Publish pC as one store transaction: the blob in DELTA chunk rows, a
** page index row per page, COMMITS/VTX rows, quota counters and the head,
** which must still equal pC->base (compare-and-set).  On SQLITE_OK the
** commit is durable (store_commit()'s promise), *pHead is the new head and
** *piBranch the branch id.  SQLITE_BUSY_SNAPSHOT when another writer
** committed first (nothing written); any other error: nothing written,
** *pzErr says why. */
int depot_db_commit(Store*, const DepotCommit *pC, ZSTD_CCtx*, int iLevel,
                    DbHead *pHead, uint64_t *piBranch, char **pzErr);

/* Called for each commit row by depot_db_list_commits(); nonzero stops. */
typedef int (*DepotCommitRowFn)(void*, const CommitRow*);

/* The commit rows of a branch in txid order. */
int depot_db_list_commits(Store*, uint64_t iBranch, DepotCommitRowFn,
                          void*, char **pzErr);

/* Read and check the whole blob of commit iTxid (its rows joined).  On
** SQLITE_OK *ppBlob is sqlite3_malloc'd. */
int depot_db_read_blob(Store*, uint64_t iBranch, const CommitRow*,
                       unsigned char **ppBlob, char **pzErr);

#endif /* DEPOT_DB_H */
