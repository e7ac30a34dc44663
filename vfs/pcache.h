/*
** pcache.h -- the decoded-page cache of the depot VFS (private to vfs/).
**
** Decoding a page costs a page-index seek, a chunk read and a zstd frame;
** the cache keeps decoded pages keyed by (branch id, page number, owner
** txid).  A key names immutable content (a commit's page never changes), so
** entries never go stale; they are evicted, least recently used first,
** when the cache holds more than its byte limit, and dropped when a writer
** of the process replaces them.  One cache serves every
** connection of the process to one store, whatever database, branch or
** bucket it opens (the branch in the key is the blob's, so a fork reads
** its parent's pages from the parent's entries); compaction and GC only
** make entries unreachable.  All calls are thread-safe (one mutex per
** cache guards every field).
*/
#ifndef DEPOT_PCACHE_H
#define DEPOT_PCACHE_H

#include <pthread.h>
#include <stdint.h>

typedef struct DepotCache DepotCache;

/* Initialise a mutex that two threads take for short stretches, page by
** page (a connection and its read-ahead thread, in the cache and in the
** read-ahead ring): where glibc has it the mutex is adaptive, so a
** collision spins briefly instead of a futex sleep and wake-up. */
void depot_mutex_init_adaptive(pthread_mutex_t*);

/* A new, empty cache holding at most nMaxBytes of pages (0: caching off).
** NULL when out of memory. */
DepotCache *depot_cache_new(int64_t nMaxBytes);
void depot_cache_free(DepotCache*);

/* The smallest limit that holds nPage pages of szPage bytes (below 16
** pages: the table does not grow before it holds 16). */
int64_t depot_cache_bytes_for(uint32_t nPage, uint32_t szPage);

/* Change the byte limit, evicting at once if needed. */
void depot_cache_set_limit(DepotCache*, int64_t nMaxBytes);
int64_t depot_cache_limit(DepotCache*);

/* The bytes the cache holds now: its pages, their entries' headers, the
** free room of its slabs, the hash table and the cache itself.  The pages
** take at most the limit (except for a table and cache struct, 8 KiB,
** larger than a limit below that); the free room of the slabs their
** entries are cut from adds at most 1/16 of the limit plus one slab (1/64
** of the limit, 256 KiB at most), and is given back when the limit is
** lowered. */
int64_t depot_cache_used(DepotCache*);

/* Copy the cached page into pOut (szPage bytes) and return 1, or return 0
** on a miss.  Counts a hit or a miss in the process-wide counters. */
int depot_cache_get(DepotCache*, uint64_t iBranch, uint32_t pgno,
                    uint64_t iOwner, uint32_t szPage, unsigned char *pOut);

/* depot_cache_get() for a page a sequential scan reads: a spilled page is
** read from its slot and stays there (most recently used of the spilled
** ones), so a scan neither evicts pages from memory nor writes slots for
** them. */
int depot_cache_get_scan(DepotCache*, uint64_t iBranch, uint32_t pgno,
                         uint64_t iOwner, uint32_t szPage, unsigned char *pOut);

/* 1 when the cache holds the page, else 0; neither copies it, moves it
** in the LRU order nor counts a hit or a miss (read-ahead asks this). */
int depot_cache_has(DepotCache*, uint64_t iBranch, uint32_t pgno,
                    uint64_t iOwner, uint32_t szPage);

/* Add a copy of page p (best effort: silently skipped when out of memory
** or when the page, its entry and the table exceed the limit). */
void depot_cache_put(DepotCache*, uint64_t iBranch, uint32_t pgno,
                     uint64_t iOwner, uint32_t szPage, const unsigned char *p);

/* Remove the page if the cache holds it: a writer drops the version of a
** page its commit replaces, so versions no head reads do not fill the
** cache up to its limit (a reader of an older snapshot decodes it again). */
void depot_cache_drop(DepotCache*, uint64_t iBranch, uint32_t pgno,
                      uint64_t iOwner);

/* depot_cache_put() for a page a sequential scan read: when the cache is
** full and its least recently used entry came from a scan too, the page
** is not added.  So a scan evicts what other reads brought in but never
** other scan pages: a scan longer than the cache leaves its first part in
** place instead of flushing it (LRU order would, and then miss on every
** page of the next pass), and a repeated scan hits on that part; a scan
** shorter than the cache fits whole once older reads' pages made room. */
void depot_cache_put_scan(DepotCache*, uint64_t iBranch, uint32_t pgno,
                          uint64_t iOwner, uint32_t szPage,
                          const unsigned char *p);

/* The owner bit of the entries of a write transaction's staged pages
** (vfs/vfs.c): such an entry of (branch, pgno, txid|DEPOT_CACHE_STAGED)
** holds the newest frame the writer of that branch staged for that page as
** that txid.  No page location has the bit (txids stay below it; shards
** set bit 63), so no reader reaches these entries; the writer reads them
** back, and its commit moves them to their published key with
** depot_cache_rekey() or drops them. */
#define DEPOT_CACHE_STAGED ((uint64_t)1<<62)

/* Every entry of iBranch with owner iFrom: when xKeep is not NULL and
** returns nonzero for its page number, the entry takes owner iTo (it keeps
** its place in the LRU order, and counts as a read's page from then on; an
** entry of (iBranch, pgno, iTo) already there wins and this one is
** dropped); else it is dropped.  Walks every entry of the cache. */
void depot_cache_rekey(DepotCache*, uint64_t iBranch, uint64_t iFrom,
                       uint64_t iTo, int (*xKeep)(void*, uint32_t pgno),
                       void *pArg);

/* depot_cache_put() for a page of a bulk transaction (its staged pages,
** then its commit's): when the cache is full and its least recently used
** entry has the same branch and owner, the page is not added.  So a
** transaction larger than the cache keeps its first pages cached instead
** of cycling every page through it and leaving only its last ones (a
** following pass in page order hits on that part).  A staged page (owner
** with DEPOT_CACHE_STAGED) counts as a scan's page until
** depot_cache_rekey() publishes it: the transaction's own reads of the
** snapshot, when sequential, do not evict it; published, it is evicted as
** any read's page is. */
void depot_cache_put_bulk(DepotCache*, uint64_t iBranch, uint32_t pgno,
                          uint64_t iOwner, uint32_t szPage,
                          const unsigned char *p);

/* The spill file: a page the cache evicts goes to a slot of an unlinked
** temporary file (in $SQLITE_TMPDIR, $TMPDIR, /var/tmp, /usr/tmp, /tmp or
** ., the first that is a directory) holding at most nMaxBytes of slots,
** and a later get reads it from there (a pread, served by the OS page
** cache) instead of missing; a spilled page read goes back to memory and
** keeps its slot.  Slots have the size of the first page spilled; pages
** of another size are not spilled, nor are staged pages evicted from
** memory (depot_cache_put_spill() puts them there directly).  The
** spilled entries' headers count in the cache's byte limit.  A failed
** open, write or read only drops pages.  0 (the default of a new cache)
** turns spilling off; a limit below the bytes the file has drops every
** spilled entry. */
void depot_cache_set_spill_limit(DepotCache*, int64_t nMaxBytes);
int64_t depot_cache_spill_limit(DepotCache*);
/* Add page p to the spill file only (not to memory; its header counts in
** the limit), best effort, into a free slot (it never takes the slot of
** another spilled page): a bulk transaction's pages past the part it
** keeps in memory. */
void depot_cache_put_spill(DepotCache*, uint64_t iBranch, uint32_t pgno,
                           uint64_t iOwner, uint32_t szPage,
                           const unsigned char *p);

/* Process-wide counts of pages written to and read from spill files. */
void depot_cache_spill_counters(int64_t *pnWrite, int64_t *pnRead);
/* The bytes of slots the spill file of this process has (0: none). */
int64_t depot_cache_spill_bytes(DepotCache*);

/* Process-wide hit and miss counts since the module loaded. */
void depot_cache_counters(int64_t *pnHit, int64_t *pnMiss);

#endif /* DEPOT_PCACHE_H */
