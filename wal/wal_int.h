/*
** wal_int.h -- private declarations shared by the files of wal/.
**
** record.c builds and decodes record bodies and frames, segment.c knows
** the segment files (names, header, frame scan, creation, retirement),
** wal.c ties them into the log.  Nothing outside wal/ includes this file.
*/
#ifndef DEPOT_WAL_INT_H
#define DEPOT_WAL_INT_H

#include "wal/wal.h"

#include <semaphore.h>

/* Segment header (WAL_SEG_HDR bytes, little-endian), see segment.c. */
#define WAL_SEG_MAGIC       "DEPOTWAL"
#define WAL_SEG_MAGIC_LEN   8
#define WAL_FORMAT_VERSION  1
#define WAL_SEG_HDR         48

/* First byte after the (zero) table count of an abort record. */
#define WAL_ABORT_TAG       0x01

/* Frame header: u32 body length, u32 CRC32C of (length bytes + body). */
#define WAL_FRAME_HDR       8
/* Largest record body accepted by the builder and by the scanner. */
#define WAL_MAX_BODY        ((size_t)1 << 30)

/* ---- record.c ---- */

/* Little-endian fixed-width helpers. */

/* The abort record of a root (TID tid) whose record cidAborted is
** withdrawn; NULL on OOM or when cidAborted is 0.  Only wal_abort()
** appends one (it also confirms cidAborted). */
WalRecordBuilder *wal_record_abort_new(uint64_t tid, uint64_t cidAborted);
int wal_record_is_abort(const WalRecordBuilder*);

/* Bytes of the frame (header + body) that record pRec gets with CID cid. */
size_t wal_frame_size(const WalRecordBuilder *pRec, uint64_t cid);
/* Write that frame to aOut, which has wal_frame_size() bytes. */
void wal_frame_encode(const WalRecordBuilder *pRec, uint64_t cid,
                      uint8_t *aOut);
/* Check a frame header against the bytes that follow it in the file
** (nAvail, counted after the header).  Returns 0 and sets *pnBody if the
** length is plausible, else a static reason. */
const char *wal_frame_length(const uint8_t *aHdr, uint64_t nAvail,
                             size_t *pnBody);
/* Non-zero if the CRC of the frame (header aHdr, body aBody/nBody)
** matches, 0 if it does not. */
int wal_frame_crc_ok(const uint8_t *aHdr, const uint8_t *aBody, size_t nBody);

/* ---- segment.c ---- */

/* A segment header, decoded. */
typedef struct WalSegHdr WalSegHdr;
struct WalSegHdr {
  uint64_t segno;            /* number in the file name */
  uint64_t baseCid;          /* next CID of the log when it was created */
  uint64_t prevSegno;        /* the live segment before it then, or 0 */
  uint64_t prevEnd;          /* ... and its size when it was sealed */
};

/* "<zWalDir>/<segno as 16 digits>.log", sqlite3_malloc'd (NULL on OOM). */
char *wal_segment_path(const char *zWalDir, uint64_t segno);
/* Numbers of the live segments in zWalDir, ascending, in *paSeg
** (sqlite3_malloc'd, may be NULL when *pnSeg==0). */
int wal_segment_list(const char *zWalDir, uint64_t **paSeg, int *pnSeg,
                     char **pzErr);
/* Create segment pHdr->segno with header *pHdr, flush it and its
** directory.  On success *pFd is open read-write. */
int wal_segment_create(const WalIo *pIo, const char *zWalDir,
                       const WalSegHdr *pHdr, int *pFd, char **pzErr);
/* Read and check the header of an open segment.  SQLITE_CORRUPT (with
** message) when it is short or wrong; *pbShort set when the file is shorter
** than a header (a creation that never finished). */
int wal_segment_read_header(const WalIo *pIo, int fd, const char *zPath,
                            uint64_t segno, WalSegHdr *pHdr, int *pbShort,
                            char **pzErr);
/* Retire segment segno: unlink it, or rename it to "<name>.bak". */
int wal_segment_retire(const WalIo *pIo, const char *zWalDir,
                       uint64_t segno, int bKeepBak, char **pzErr);

/* Trims the zero padding off segment file fd (zPath) down to the end of
** its frames, iEnd.  Best effort and not flushed: padding that survives a
** crash reads as the end of the log.  Failures are only logged. */
void wal_segment_trim(const WalIo *pIo, int fd, const char *zPath,
                      uint64_t iEnd);

/* Sequential reader of the frames of one segment. */
typedef struct WalScan WalScan;
struct WalScan {
  const WalIo *pIo;
  int fd;
  const char *zPath;         /* for messages; not owned */
  uint64_t iOff;             /* file offset of the next frame */
  uint64_t iEnd;             /* bytes of the file to consider */
  uint8_t *aBuf;             /* read buffer */
  size_t nBuf;               /* allocated size of aBuf */
  uint64_t iBufOff;          /* file offset of aBuf[0] */
  size_t nBufData;           /* valid bytes in aBuf */
};
void wal_scan_init(WalScan*, const WalIo*, int fd, const char *zPath,
                   uint64_t iStart, uint64_t iEnd);
/* Next frame: SQLITE_ROW with *paBody, *pnBody (valid until the next call)
** and *piFrame its offset; SQLITE_DONE at iEnd, or where zero padding
** begins that runs to iEnd (then *piFrame is the end of the frames, where
** appends continue); SQLITE_CORRUPT with
** *pzWhy (static) when the frame at *piFrame is torn or damaged;
** SQLITE_IOERR_READ / SQLITE_NOMEM otherwise. */
int wal_scan_next(WalScan*, const uint8_t **paBody, size_t *pnBody,
                  uint64_t *piFrame, const char **pzWhy);
void wal_scan_finish(WalScan*);

/* errno of a failed I/O call mapped to an SQLite code: SQLITE_FULL for
** ENOSPC/EFBIG/EDQUOT, else iDefault. */
int wal_errno_rc(int err, int iDefault);

/* ---- the log (wal.c, append.c, confirm.c) ---- */

#include <pthread.h>

/* One table name a record waits for. */
typedef struct WalName WalName;
struct WalName { const char *z; int n; };

/* The appender of an in-flight record waits on this (on its stack).  The
** leader sets bDone/rc/zErr (or bLead) under Wal.mutex, then posts it
** after releasing the mutex: it swaps iState to WAL_WAITER_POSTED and
** calls sem_post only if the appender had gone to sleep on sem
** (WAL_WAITER_SLEEPING).  The appender reads the fields once it sees
** WAL_WAITER_POSTED or sem_wait returns, without the mutex, and the leader
** touches nothing of it after the post. */
#define WAL_WAITER_WAITING  0    /* spinning (or about to sleep) */
#define WAL_WAITER_POSTED   1
#define WAL_WAITER_SLEEPING 2    /* in sem_wait: the post must sem_post */
typedef struct WalWaiter WalWaiter;
struct WalWaiter {
  sem_t sem;                 /* posted once, if the appender sleeps */
  int iState;                /* WAL_WAITER_*, accessed atomically */
  int bDone;                 /* the record's group has finished */
  int bLead;                 /* not done: this appender now leads */
  int rc;                    /* its outcome */
  char *zErr;                /* sqlite3_malloc'd message when rc!=OK */
  WalWaiter *pNextPost;      /* leader's list of waiters to post */
};

/* A record that is in flight or durable and unconfirmed.  One allocation
** holding the struct, aName[] and the name bytes. */
typedef struct WalPend WalPend;
struct WalPend {
  uint64_t cid;
  uint64_t segno;            /* segment holding the record, once durable */
  int nPending;              /* tables that have not confirmed */
  WalName *aName;            /* aName[0..nPending) */
  WalPend *pNext;            /* next record of the same group */
  WalWaiter *pWaiter;        /* in flight: the appender; else NULL */
  int bSyncOnly;             /* a wal_sync() request: no record, cid 0 */
};

/* An entry of the CID-ordered index of unconfirmed records. */
typedef struct WalUnconf WalUnconf;
struct WalUnconf {
  uint64_t cid;
  WalPend *p;                /* NULL once confirmed (awaiting compaction) */
};

/* A live segment. */
typedef struct WalSeg WalSeg;
struct WalSeg {
  uint64_t segno;
  uint64_t baseCid;          /* no record in it has a lower CID */
  uint64_t szEnd;            /* end of its frames (active: see szActive) */
  int64_t nUnconf;           /* durable records not yet confirmed (one
                             ** more while bForeign) */
  int bForeign;              /* holds other writers' records (shared
                             ** mode): never retired by this Wal */
};

/* The frames of a group being accumulated or written. */
typedef struct WalGroup WalGroup;
struct WalGroup {
  uint8_t *a;                /* encoded frames, back to back */
  size_t n, nAlloc;
  WalPend *pFirst, *pLast;   /* its records, in CID order */
  int nRec;                  /* written with __atomic stores (read by a
                             ** spinning gatherer without the mutex) */
  uint64_t cidFirst;
  uint64_t cidLast;          /* CID of its last record (0: none) */
  int nSyncOnly;             /* wal_sync() requests among its nRec */
  int bSync;                 /* some member needs the group flushed */
};

struct Wal {
  const WalIo *pIo;
  char *zWalDir;             /* "<store>/wal" */
  int64_t szSegment;
  int bKeepBak;

  pthread_mutex_t mutex;     /* guards every field below unless noted */
  pthread_cond_t cond;       /* leadership ended, or replay ended */
  pthread_cond_t condGather; /* the open group reached nGroupTarget */
  pthread_mutex_t retireMutex; /* serialises retirement, oldest first */

  WalSeg *aSeg;              /* live segments, oldest first; last = active */
  int nSeg, nSegAlloc;

  /* The active segment.  Written by the leader only (bLeader set), which
  ** reads them without the mutex and changes them with it held. */
  int fdActive;
  char *zActive;             /* its path */
  uint64_t segActive;
  uint64_t szActive;         /* bytes of durable frames (cut point) */
  uint64_t szAlloc;          /* its file size, flushed: zero padding from
                             ** szActive on (append.c, preallocation) */
  int64_t nActiveRec;        /* records in it */

  uint64_t nextCid;          /* CID of the next append */
  uint64_t lastCid;          /* highest CID written or found */
  int64_t nAppendTried;      /* CIDs handed out since open */
  int64_t nAppend;           /* acknowledged appends since open */
  int64_t nFlush;            /* group flushes since open */
  int64_t nDeferred;         /* groups written without a flush */
  int64_t nGatherWait;       /* leaders that waited for more records */

  /* Deferred flushes (WAL_SYNC_NORMAL appends, append.c).  The active
  ** segment's bytes [szSynced, szActive) are written but not flushed;
  ** every record up to cidSynced is durable, up to cidWritten written.
  ** Older segments are flushed when they are sealed. */
  uint64_t szSynced;         /* leader only, like szActive */
  uint64_t cidSynced;        /* mutex */
  uint64_t cidWritten;       /* mutex */
  int64_t usUnsynced;        /* when the oldest unflushed group was
                             ** written (0: none), leader only */

  WalUnconf *aUnconf;        /* unconfirmed index, CID order */
  int iUnconfHead;           /* entries before this are dead */
  int nUnconf, nUnconfAlloc;
  int64_t nUnconfirmed;      /* live entries of aUnconf */
  int nInflight;             /* records in unfinished groups */

  WalGroup aGroup[2];
  WalGroup *pOpen;           /* the group new appends join */
  int bLeader;               /* a leader is gathering or writing a group,
                             ** or leadership is being handed over */
  int bGathering;            /* the leader sleeps on condGather until
                             ** appenders join (append.c) */
  int nGroupTarget;          /* records a leader waits for, see append.c */
  int64_t usLastFlush;       /* duration of the last group flush */
  int bReplaying;            /* wal_replay() is running */
  pthread_t replayer;        /* ... in this thread (when bReplaying) */
  int bNeedRotate;           /* a flush failed: next group starts a segment */
  char *zFailed;             /* non-NULL: the failed state and its reason */
  int bOpen;                 /* wal_open() completed */
  int bHold;                 /* wal_hold(): retire nothing any more */
  int bShared;               /* wal_set_shared(): retire nothing for now,
                             ** close leaves the active segment alone */
};

/* confirm.c */
WalPend *wal_pend_new(uint64_t cid, int nName, const char *const *az,
                      const int *an);
int wal_unconf_reserve(Wal*, int nMore);         /* mutex held */
void wal_unconf_push(Wal*, WalPend*);            /* mutex held, reserved */
int wal_unconf_has(Wal*, uint64_t cid);          /* mutex held */
/* Record cid is withdrawn by an abort record: confirmed without its
** tables.  Returns true if a segment may be retirable.  Mutex held (or
** the open scan).  Unknown cid: no-op, 0. */
int wal_unconf_drop(Wal*, uint64_t cid);
int wal_seg_reserve(Wal*);                       /* mutex held */
void wal_retire(Wal*);                           /* mutex not held */

/* append.c */
void wal_group_reset(WalGroup*);
int wal_rotate(Wal*, uint64_t baseCid, char **pzErr); /* as the leader */

/* Sets *pzErr (if pzErr) to the printf-formatted message. */
void wal_set_err(char **pzErr, const char *zFmt, ...);

#endif /* DEPOT_WAL_INT_H */
