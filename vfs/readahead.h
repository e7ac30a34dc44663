/*
** readahead.h -- decoding of read-ahead frames on a background thread
** (private to vfs/).
**
** When a connection reads the pages of its database in order (a table
** scan, integrity_check, a cold full scan), the frames of the pages it
** will read next can be read and decoded before it asks for them.  The
** connection finds where those frames are stored (runs of frames stored
** next to each other in one blob: spans) and hands their locations here; a
** thread of the connection reads each span with one range read, through a
** store handle of its own, and decodes its frames into a ring of decoded
** pages that the connection reads first (depot_ra_get()), and adds each to
** the shared decoded-page cache as a scan's page (depot_cache_put_scan()),
** so a scan longer than the cache is read ahead to its end.  Stored blobs
** never change under their identity, so the thread's reads, outside the
** connection's read transaction, read the bytes the connection would; a
** blob that compaction and GC removed since reads as missing.  The
** foreground waits only for the page the thread is decoding at that
** moment: a page it reads before the thread got to it, or that the thread
** could not read or decode, is read in the foreground as always (the
** thread then skips it), and frames it would queue past a bound are simply
** not read ahead.  The thread starts with the first frames queued, opens
** its store handle then, and is stopped and joined (its handle closed) by
** depot_ra_free(), before the connection lets go of the cache, and by
** fork() (a pthread_atfork() handler; the queue is dropped, the next
** read-ahead starts the thread again), so a child starts without
** read-ahead threads or their store handles.  A forked child's copy of a
** connection never reads ahead and never reads the ring.
*/
#ifndef DEPOT_READAHEAD_H
#define DEPOT_READAHEAD_H

#include <stdint.h>
#include "vfs/pcache.h"
#include "vfs/pagemap.h"
#include "vfs/store/store.h"

typedef struct DepotReadahead DepotReadahead;

/* A read-ahead decoder filling pCache (which must outlive it), whose
** thread reads the store zStore opened as pCfg says (both copied; its page
** cache is DEPOT_RA_STORE_CACHE_KB).  NULL when out of memory.  No thread
** runs until the first depot_ra_submit(). */
DepotReadahead *depot_ra_new(DepotCache *pCache, const char *zStore,
                             const StoreSqliteConfig *pCfg);
#define DEPOT_RA_STORE_CACHE_KB 256

/* Stop and join the thread (frames still queued are dropped) and free. */
void depot_ra_free(DepotReadahead*);

/* One stored frame to decode: page pgno, whose decoded-page cache key is
** (iBranch, pgno, iOwner), at bytes iOff..iOff+nByte of the job's
** buffer. */
typedef struct DepotRaFrame DepotRaFrame;
struct DepotRaFrame {
  uint64_t iBranch, iOwner;
  uint32_t pgno, iOff, nByte;
};

/* One run of frames stored next to each other: frames iFrame..
** iFrame+nFrame-1 of the job, nByte stored bytes from the location loc of
** the first (page pgno), read to the first frame's iOff. */
typedef struct DepotRaSpan DepotRaSpan;
struct DepotRaSpan {
  DepotPageLoc loc;
  uint32_t pgno, nByte, iFrame, nFrame;
};

/* Queue the nFrame frames aFrame of pages of szPage bytes, stored as the
** nSpan spans aSpan (both copied), whose bytes take nBuf bytes.  The caller
** reads at most nWindow pages ahead: the ring gets the power of two above
** nWindow slots (made anew, when it has fewer or another page size, only
** while nothing is queued).  0 when queued, else nonzero (the thread could
** not start or open the store, the ring could not be made, or the queue
** holds 2*nWindow pages or more already). */
int depot_ra_submit(DepotReadahead*, uint32_t szPage, uint32_t nFrame,
                    const DepotRaFrame *aFrame, uint32_t nSpan,
                    const DepotRaSpan *aSpan, uint32_t nBuf,
                    uint32_t nWindow);

/* 1 when frames can be queued: not a forked child's copy, and the thread's
** store handle did not fail to open (then the connection reads nothing
** ahead), else 0. */
int depot_ra_usable(DepotReadahead*);

/* 1 when the ring has page pgno of cache key (iBranch, pgno, iOwner)
** queued or decoded, else 0. */
int depot_ra_has(DepotReadahead*, uint64_t iBranch, uint32_t pgno,
                 uint64_t iOwner, uint32_t szPage);

/* Copy page pgno of cache key (iBranch, pgno, iOwner) into pOut (szPage
** bytes) from the ring and return 1, or return 0 when the ring does not
** have it decoded.  Waits while the thread decodes that very page; a page
** still queued is taken back (the thread skips it, the caller decodes
** it). */
int depot_ra_get(DepotReadahead*, uint64_t iBranch, uint32_t pgno,
                 uint64_t iOwner, uint32_t szPage, unsigned char *pOut);

/* The most memory a read-ahead of nWindow pages of szPage bytes takes:
** the ring, the stored frames of 2*nWindow queued pages and of two done
** jobs' buffers kept for reuse, the thread's zstd context and its store
** handle (0 when nWindow is 0). */
int64_t depot_ra_limit(uint32_t nWindow, uint32_t szPage);

/* The memory it holds now: the ring, the buffers of jobs and of done ones
** kept for reuse, the thread's zstd context and store handle. */
int64_t depot_ra_bytes(DepotReadahead*);

/* Pages queued and not yet decoded (or skipped). */
uint32_t depot_ra_pending(DepotReadahead*);

/* Process-wide counts of pages queued for read-ahead, and of pages the
** read-ahead threads decoded into their rings (the rest the foreground read
** first, or a thread was stopped before it got to them). */
int64_t depot_ra_queued(void);
int64_t depot_ra_decoded(void);

/* Process-wide count of pages read from a ring (depot_ra_get() hits). */
int64_t depot_ra_hits(void);

#endif /* DEPOT_READAHEAD_H */
