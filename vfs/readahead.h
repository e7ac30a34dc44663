/*
** readahead.h -- decoding of read-ahead frames on a background thread
** (private to vfs/).
**
** When a connection reads the pages of its database in order (a table
** scan, integrity_check, a cold full scan), the frames of the pages it
** will read next can be decoded before it asks for them.  The connection
** reads those frames' stored bytes itself (one range read for a run of
** frames stored next to each other in one blob) and hands them here; a
** thread of the connection decodes them into the shared decoded-page
** cache, so that its next reads hit the cache.  The foreground never
** waits for it: a page it reads before the thread got to it is decoded in
** the foreground as always (the thread then skips it), and frames it
** would queue past a bound are simply not read ahead.  The thread starts
** with the first frames queued and is stopped and joined by
** depot_ra_free(), before the connection lets go of the cache.  A forked
** child's copy of a connection never reads ahead.
*/
#ifndef DEPOT_READAHEAD_H
#define DEPOT_READAHEAD_H

#include <stdint.h>
#include "vfs/pcache.h"

typedef struct DepotReadahead DepotReadahead;

/* A read-ahead decoder filling pCache (which must outlive it).  NULL when
** out of memory.  No thread runs until the first depot_ra_submit(). */
DepotReadahead *depot_ra_new(DepotCache *pCache);

/* Stop and join the thread (frames still queued are dropped) and free. */
void depot_ra_free(DepotReadahead*);

/* One stored frame to decode: page pgno, whose decoded-page cache key is
** (iBranch, pgno, iOwner), at bytes iOff..iOff+nByte of the job's buffer. */
typedef struct DepotRaFrame DepotRaFrame;
struct DepotRaFrame {
  uint64_t iBranch, iOwner;
  uint32_t pgno, iOff, nByte;
};

/* Queue the n frames aFrame (copied) of pages of szPage bytes, stored in
** aBuf (nBuf bytes, taken over: freed with sqlite3_free() whatever the
** outcome).  0 when queued, else nonzero (the thread could not start, or
** the queue holds nMaxPending pages or more already). */
int depot_ra_submit(DepotReadahead*, uint32_t szPage, uint32_t n,
                    const DepotRaFrame *aFrame, unsigned char *aBuf,
                    uint32_t nBuf, uint32_t nMaxPending);

/* Pages queued and not yet decoded (or skipped). */
uint32_t depot_ra_pending(DepotReadahead*);

/* Process-wide counts of pages queued for read-ahead, and of pages the
** read-ahead threads decoded into a cache (the rest the foreground read
** first, or a thread was stopped before it got to them). */
int64_t depot_ra_queued(void);
int64_t depot_ra_decoded(void);

#endif /* DEPOT_READAHEAD_H */
