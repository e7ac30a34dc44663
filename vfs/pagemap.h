/*
** pagemap.h -- where each page of a branch lives, as of one head (private
** to vfs/).
**
** A page-cache miss of the depot VFS would otherwise run two store seeks
** per chain level (page index, then shard) before it can even probe the
** decoded-page cache.  The page map remembers, per page, the location a
** seek found: a frame of a commit blob or of a shard blob (both immutable
** once written: a branch only ever appends commits, and a shard version is
** never rewritten), or "no page" (zeros).  So a miss is an array probe.
**
** One map serves every connection of the process to one (store, db,
** branch) name and is valid for one chain top branch iTop as of its txid
** iHead.  An entry also has the txid iLo from which it holds: a reader
** pinned at cap C of iTop uses an entry only when iLo <= C <= iHead.
** Entries are filled by readers pinned at exactly iHead, and moved forward
** by the writer of the process with the pages of its own commit
** (depot_pagemap_commit()); a reader that finds a newer head than iHead
** (a commit of another process, a fork, a restore or rollback moving the
** name to another branch) starts the map over at its head.  A location
** can go away (compaction moves pages into shards, then GC reclaims the
** blobs); its read then fails, and the caller reads through the seeks and
** puts the fresh location.  The map is bounded in bytes: pages past the
** limit are not mapped.  All calls are thread-safe (one mutex per map).
*/
#ifndef DEPOT_PAGEMAP_H
#define DEPOT_PAGEMAP_H

#include <stdint.h>

/* Where a page lives.  eKind: DEPOT_LOC_ZERO (no page: zeros),
** DEPOT_LOC_DELTA (frame of commit blob iBranch/iTxid) or DEPOT_LOC_SHARD
** (frame of the shard blob of the page's shard of iBranch as of iTxid).
** iOwner is the decoded-page cache key: iTxid, with bit 63 set for a
** shard. */
#define DEPOT_LOC_ZERO  1
#define DEPOT_LOC_DELTA 2
#define DEPOT_LOC_SHARD 3
typedef struct DepotPageLoc DepotPageLoc;
struct DepotPageLoc {
  uint32_t eKind;
  uint32_t szChunk, iOffset, nByte;
  uint64_t iBranch, iTxid;
};

typedef struct DepotPageMap DepotPageMap;

/* The bytes one mapped page costs. */
int64_t depot_pagemap_entry_bytes(void);

/* A new, empty map of at most nMaxBytes (0: mapping off).  NULL when out
** of memory. */
DepotPageMap *depot_pagemap_new(int64_t nMaxBytes);
void depot_pagemap_free(DepotPageMap*);

/* Change the byte limit (the map starts over) and read it. */
void depot_pagemap_set_limit(DepotPageMap*, int64_t nMaxBytes);
int64_t depot_pagemap_limit(DepotPageMap*);

/* The bytes the map holds now (its entry array and the map itself, both
** within the limit). */
int64_t depot_pagemap_used(DepotPageMap*);

/* The location of page pgno for a reader of iTop pinned at txid iCap:
** 1 with *pLoc when the map holds one valid there, else 0.  Counts a hit
** or a miss in the process-wide counters. */
int depot_pagemap_get(DepotPageMap*, uint64_t iTop, uint64_t iCap,
                      uint32_t pgno, DepotPageLoc *pLoc);

/* Remember pLoc as page pgno's location for a reader of iTop at iCap,
** found by the seeks.  A map of another top or an older head starts over
** at (iTop, iCap); a map already past iCap ignores the call. */
void depot_pagemap_put(DepotPageMap*, uint64_t iTop, uint64_t iCap,
                       uint32_t pgno, const DepotPageLoc *pLoc);

/* A commit of iTop moved its head from iBase to iNew, writing the n pages
** aPgno at aLoc (aLoc may be NULL: locations unknown).  A map at (iTop,
** iBase) moves to iNew with those entries replaced; any other map starts
** over at (iTop, iNew) holding only them. */
void depot_pagemap_commit(DepotPageMap*, uint64_t iTop, uint64_t iBase,
                          uint64_t iNew, uint32_t n, const uint32_t *aPgno,
                          const DepotPageLoc *aLoc);

/* Process-wide hit and miss counts of depot_pagemap_get(). */
void depot_pagemap_counters(int64_t *pnHit, int64_t *pnMiss);

#endif /* DEPOT_PAGEMAP_H */
