/*
** logstore_int.h -- the structures and functions shared by the files of
** the kv_log storage engine: logcache.c (the process's cache of checked
** file bytes that reads serve records from), logfile.c (files, sets,
** frames, the active file's sync and roll, the MANIFEST), logcompact.c
** (compaction) and logstore.c (load, appends, reads, the background
** thread).  They call each other in that order only.  Private to those
** four files.
**
** Locking: KvLogStore.mu guards the published state (index, file set,
** counters, thread control); KvLogStore.muWrite the write side (active
** file, sync point, delta list); KvLogStore.muCompact admits one
** compaction at a time.  Lock order: muCompact, muWrite, mu.
*/
#ifndef DEPOT_KV_LOGSTORE_INT_H
#define DEPOT_KV_LOGSTORE_INT_H

#include "ext/kv/logstore.h"
#include "ext/kv/map.h"
#include <pthread.h>
#include <string.h>

#define KL_HDR          16            /* file header bytes */
#define KL_FRAME_HDR    8             /* u32 nBody, u32 crc */
#define KL_BODY_FIXED   13            /* flags, cid, nKey */
#define KL_MAX_BODY     (KL_BODY_FIXED + KVLOG_MAX_KEY + KVLOG_MAX_VALUE)
#define KL_FLAG_DELETE  0x01
#define KL_FLAG_LAST    0x02
#define KL_KIND_LOG     1             /* NNNNNNNN.klog */
#define KL_KIND_MRG     2             /* NNNNNNNN.kmrg */
#define KL_MAX_FILENUM  99999999u
#define KL_DEFAULT_SZFILE (64*1024*1024)
#define KL_KEY_MRG      0x80000000u   /* KlFile.iKey of a merged file */

typedef struct KlChunk KlChunk;

/* One open file.  Referenced by every KlSet that lists it and, briefly,
** by readers; the last unref closes it and, if bDoomed (it was replaced by
** a committed compaction), unlinks it. */
typedef struct KlFile KlFile;
struct KlFile {
  uint32_t iNum;
  uint32_t iKey;         /* iNum, | KL_KEY_MRG for a merged file: a log
                         ** file and a merged file may share a number */
  int eKind;
  int fd;
  int nRef;              /* atomic */
  int bDoomed;           /* atomic; set once, under KvLogStore.mu */
  int64_t sz;            /* bytes; the active file's grows under mu */
  int64_t szShSynced;    /* shared: bytes this process made durable
                         ** (kv_logstore_sync_shared, its only user) */
  const WalIo *pIo;
  char *zPath;
  KlChunk **apChunk;     /* logcache.c's mutex: the file's cached chunks, */
  int nChunk, nChunkAlloc; /* sorted by offset, never overlapping */
};

/* An immutable, reference-counted set of files sorted by iKey (log files
** by number, then merged files by number). */
typedef struct KlSet KlSet;
struct KlSet {
  int nRef;              /* atomic */
  int nFile;
  KlFile **apFile;
};

/* Where a key's newest record is: the value stored in the index map. */
typedef struct KlLoc KlLoc;
struct KlLoc {
  uint32_t iFile;        /* KlFile.iKey */
  uint32_t nFrame;       /* whole frame: header + body */
  uint64_t iOff;
};

/* Counters that follow the index (guarded like it). */
typedef struct KlCounts KlCounts;
struct KlCounts {
  int64_t nLive;
  int64_t nTomb;
  int64_t szLive;
  uint64_t maxCid;
};

/* Index changes made while a compaction runs, in order: one node per
** applied transaction, never modified after it is linked. */
typedef struct KlDeltaItem KlDeltaItem;
struct KlDeltaItem {
  const uint8_t *aKey; int nKey;
  KlLoc loc;
  uint64_t cid;
  int bTomb;
};
typedef struct KlDelta KlDelta;
struct KlDelta {
  KlDelta *pNext;
  int nItem;
  KlDeltaItem aItem[1];  /* nItem items, then the key bytes */
};

struct KvLogStore {
  char *zDir;
  KvLogConfig cfg;       /* szFile, szDeadTrigger resolved */
  const WalIo *pIo;

  /* mu guards the published state: */
  pthread_mutex_t mu;
  KvMap *pIndex;         /* key -> KlLoc, rev = cid, tombstones */
  KlSet *pSet;           /* live files */
  KlCounts cnt;
  int64_t nCompaction;
  int64_t nCompactError;
  char zCompactError[400]; /* the last failed compaction's message */
  int bStop, bKick;      /* background thread control */
  pthread_cond_t cond;

  /* muWrite serialises appends, syncs, rolls and the compaction's start
  ** and swap; it guards: */
  pthread_mutex_t muWrite;
  KlFile *pActive;       /* the active log file (also in pSet) */
  uint32_t iNext;        /* next file number */
  int bDirty;            /* active file written since the last sync */
  int bDirDirty;         /* a file was created since the last dir sync */
  int bFailed;           /* refuse writes until reopened */
  int bDestroyed;
  KvMap *pSynced;        /* index as of the last successful sync */
  KlCounts cntSynced;
  KvLogBuf wbuf;         /* encoded frames of the transaction */
  int bCompacting;       /* record index changes in the delta list */
  KlDelta *pDeltaFirst, *pDeltaLast;

  /* Shared (cfg.bShared), under muWrite: the index and counters as they
  ** were when the active file became active (every file before it read
  ** to its end, nothing of it): the input of a shared compaction.  NULL
  ** until this process's first roll, or follow of a roll, while shared. */
  KvMap *pIdxRoll;
  KlCounts cntRoll;
  uint32_t iGen;         /* M of the MANIFEST the file set follows */
  int bOwner;            /* atomic: this process compacts (kv_logstore_tick) */
  int bReapDue;          /* muCompact: a compaction of this process
                         ** committed; the files it replaced remain */

  pthread_mutex_t muCompact;  /* one compaction at a time */
  int bThread;
  pthread_t thread;
};

/* Parsed view of one frame's body (kl_frame_parse). */
typedef struct KlFrame KlFrame;
struct KlFrame {
  int flags;
  uint64_t cid;
  const uint8_t *aKey; uint32_t nKey;
  const uint8_t *aVal; uint32_t nVal;
};

/* ---- logcache.c: used by logfile.c and logstore.c ----
** The process keeps the bytes that reads fetch from log and merged files
** in chunks: each chunk holds whole frames of one file, [iOff, iOff+n),
** read once and kept with the file (a file's chunks never overlap) up to
** a process-wide byte limit (kv_logstore_cache_limit), least recently
** used first out; a file's chunks go when the file is closed.  Frames of
** a file are never rewritten while an index refers to them, and a chunk
** only holds bytes below the file's published end (KlFile.sz), so a
** chunk stays true for the life of its file.  Each chunk remembers which
** of its frames passed their checksum (one bit per 16 bytes of the chunk:
** a frame is longer, so at most one starts in each): a frame is checked
** the first time it is read from the chunk, never again.
**
** A walk reads through a KlWindow: the chunk holding the frame it reads
** (a reference), found in the cache or read into a new chunk of up to
** nNext bytes from the frame on.  nNext starts at KL_WINDOW_FIRST and
** doubles at each read up to KL_WINDOW_BYTES (0 means KL_WINDOW_FIRST),
** so a short range reads little and a long walk reads few times. */
#define KL_WINDOW_FIRST 4096
#define KL_WINDOW_BYTES 65536
#define KL_CACHE_DEFAULT (16*1024*1024)
typedef struct KlWindow KlWindow;
struct KlWindow {
  KlChunk *pChunk;              /* NULL: empty */
  const uint8_t *a;             /* pChunk's bytes ... */
  uint8_t *aCheck;              /* ... and its checked-frame bits */
  uint64_t iOff;                /* file offset of a[0] */
  uint32_t iFile;               /* KlFile.iKey */
  int n;                        /* bytes at a */
  int nNext;                    /* bytes of the next read */
};
/* Point pWin at a chunk holding the whole frame at *pLoc of pFile: one of
** the cache, or one read now (and cached when it fits the limit).  Lets
** go of the chunk pWin held.  SQLITE_OK, or SQLITE_NOTFOUND when the
** frame cannot be read into a chunk (larger than KL_WINDOW_BYTES, not
** whole below the file's published end, a read error): pWin is then
** empty and the caller reads the frame on its own, which reports why. */
int kl_window_fill(KlFile *pFile, const KlLoc *pLoc, KlWindow *pWin);
/* Let go of pWin's chunk (pWin is then empty). */
void kl_window_release(KlWindow *pWin);
/* Whether the frame at file offset iOff, inside pWin, passed its checksum
** (kl_window_checked), and record that it did (kl_window_mark). */
static inline int kl_window_checked(const KlWindow *pWin, uint64_t iOff){
  uint32_t i = (uint32_t)(iOff - pWin->iOff) >> 4;
  return (__atomic_load_n(&pWin->aCheck[i>>3], __ATOMIC_RELAXED)>>(i&7)) & 1;
}
static inline void kl_window_mark(const KlWindow *pWin, uint64_t iOff){
  uint32_t i = (uint32_t)(iOff - pWin->iOff) >> 4;
  __atomic_fetch_or(&pWin->aCheck[i>>3], (uint8_t)(1<<(i&7)),
                    __ATOMIC_RELAXED);
}
/* The file is being closed: drop its chunks from the cache. */
void kl_cache_drop_file(KlFile *pFile);

/* ---- logfile.c: used by logstore.c and logcompact.c ----
** Errors follow logstore.h: an SQLite code, and for functions that take
** pzErr a sqlite3_malloc'd message naming the file (kl_set_err replaces
** any earlier one; pzErr may be NULL). */
int kl_errno_rc(int err, int rcDefault);      /* SQLITE_FULL for ENOSPC.. */
void kl_set_err(char **pzErr, char *zMsg);
int kl_io_err(char **pzErr, int rc, const char *zOp, const char *zPath,
              int err);
int kl_corrupt(char **pzErr, const char *zPath, int64_t iOff,
               const char *zWhy);
int kl_buf_reserve(KvLogBuf*, int64_t n);
/* "<zDir>/NNNNNNNN.klog" or ".kmrg" (sqlite3_malloc'd, NULL on OOM). */
char *kl_path(const char *zDir, uint32_t iNum, int eKind);
/* KvLogConfig.xStep at step eStep: SQLITE_ABORT when it says stop. */
int kl_step(KvLogStore*, int eStep, char **pzErr);
/* All n bytes at iOff (short writes continued). */
int kl_write(KvLogStore*, KlFile*, const void *p, size_t n, int64_t iOff,
             char **pzErr);
/* Exactly n bytes at iOff; SQLITE_IOERR_SHORT_READ (no message) at EOF. */
int kl_read(KvLogStore*, const WalIo*, KlFile*, void *p, size_t n,
            int64_t iOff, char **pzErr);
int kl_fsync(KvLogStore*, KlFile*, char **pzErr);
int kl_syncdir(KvLogStore*, char **pzErr);
/* A KlFile (one reference, fd -1) for file iNum of kind eKind; NULL on
** OOM.  kl_file_unref closes it and, if doomed, unlinks it. */
KlFile *kl_file_new(KvLogStore*, uint32_t iNum, int eKind);
void kl_file_unref(KlFile*);
/* The KL_HDR header bytes of file iNum of kind eKind, and its check:
** NULL when a holds the header of pFile, else the reason. */
void kl_file_header(uint8_t *a, uint32_t iNum, int eKind);
const char *kl_header_check(const uint8_t *a, const KlFile *pFile);
/* Create (truncating) file iNum and write its header; nothing is left
** behind on failure. */
int kl_file_create(KvLogStore*, uint32_t iNum, int eKind, KlFile **ppFile,
                   char **pzErr);
/* Sets: kl_set_new has room for nFile files and holds none; kl_set_with
** is a copy of pOld plus pAdd (references taken on every file). */
KlSet *kl_set_new(int nFile);
KlSet *kl_set_ref(KlSet*);
void kl_set_unref(KlSet*);
KlFile *kl_set_find(KlSet*, uint32_t iKey);
KlSet *kl_set_with(KlSet *pOld, KlFile *pAdd);
/* Check the frame at a (nAvail bytes) and parse it: NULL if whole and
** valid, else the reason. */
const char *kl_frame_parse(const uint8_t *a, int64_t nAvail, KlFrame *pOut);
/* Read and check the frame at *pLoc (holding key aKey, unless NULL) into
** pOut: the value alone with bValueOnly, else the whole frame. */
int kl_read_frame(KlSet*, const KlLoc*, const void *aKey, int nKey,
                  KvLogBuf *pOut, int bValueOnly, char **pzErr);
/* kl_read_frame of the value alone through a window: served from *pWin
** when the frame is inside it, else from the chunk kl_window_fill finds
** or reads (a frame it cannot serve, and every read error, go through
** kl_read_frame, which reports them).  A frame is checked (checksum, key)
** the first time it is read from its chunk; later reads check its key
** and lengths. */
int kl_read_frame_ahead(KlSet*, const KlLoc*, const void *aKey, int nKey,
                        KlWindow *pWin, KvLogBuf *pOut, char **pzErr);
/* kl_read_frame_ahead without the copy: *paVal and *pnVal give the value
** in place, in pWin's chunk (valid until the window's next fill) or, for a
** frame read on its own, in pOut. */
int kl_read_frame_in(KlSet*, const KlLoc*, const void *aKey, int nKey,
                     KlWindow *pWin, KvLogBuf *pOut, const uint8_t **paVal,
                     int *pnVal, char **pzErr);
/* Whether the n bytes at a and b are the same (a record's key against the
** index's: short, so compared here rather than by a call to memcmp). */
static inline __attribute__((always_inline)) int kl_same_bytes(
  const uint8_t *a, const uint8_t *b, int n
){
  uint64_t x, y;
  if( n<8 ){
    while( n>0 ){
      if( *a++!=*b++ ) return 0;
      n--;
    }
    return 1;
  }
  while( n>8 ){
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    if( x!=y ) return 0;
    a += 8; b += 8; n -= 8;
  }
  memcpy(&x, a+n-8, 8);         /* the last 8 bytes, overlapping */
  memcpy(&y, b+n-8, 8);
  return x==y;
}
/* kl_read_frame_in's common case, inlined into a walk's step: 1, with the
** value in place, when the frame is inside pWin, was checked before and
** still holds key aKey with the lengths the index gives; else 0 (the
** caller then calls kl_read_frame_in, which checks and reports). */
static inline __attribute__((always_inline)) int kl_window_value(
  const KlWindow *pWin, const KlLoc *pLoc, const uint8_t *aKey, int nKey,
  const uint8_t **paVal, int *pnVal
){
  const uint8_t *a;
  uint32_t nBody;
  if( pWin->pChunk==0 || pWin->iFile!=pLoc->iFile || pLoc->iOff<pWin->iOff
   || pLoc->iOff+pLoc->nFrame > pWin->iOff+(uint64_t)pWin->n
   || !kl_window_checked(pWin, pLoc->iOff) ){
    return 0;
  }
  a = pWin->a + (pLoc->iOff - pWin->iOff);
  nBody = wal_get_u32(a);
  if( (uint64_t)nBody+KL_FRAME_HDR!=pLoc->nFrame
   || wal_get_u32(a+KL_FRAME_HDR+9)!=(uint32_t)nKey
   || (uint32_t)nKey>nBody-KL_BODY_FIXED ){
    return 0;
  }
  a += KL_FRAME_HDR+KL_BODY_FIXED;
  if( !kl_same_bytes(a, aKey, nKey) ) return 0;
  *paVal = a+nKey;
  *pnVal = (int)(nBody-KL_BODY_FIXED-(uint32_t)nKey);
  return 1;
}
void kl_delta_free(KlDelta*);
/* muWrite held: remember the current index as the last durable one. */
void kl_sync_point_locked(KvLogStore*);
/* muWrite held: sync the active file (and the directory when a file was
** created); on failure the index goes back to the last sync point and
** the store refuses writes until reopened. */
int kl_sync_locked(KvLogStore*, char **pzErr);
/* muWrite held: sync, then start a new active log file. */
int kl_roll_locked(KvLogStore*, char **pzErr);
/* Shared: hold (bHold) or let go a shared lock on byte 0 of pFile: each
** process holds one on its active log file, so the compacting process
** sees which processes may still have to read the log files a compaction
** replaced (kl_file_locked).  muWrite held, or the open. */
void kl_file_hold(KlFile*, int bHold);
/* 1 if another open of the file at zPath holds that lock (or the check
** fails), 0 if none does or the file is gone. */
int kl_file_locked(const char *zPath);
/* muWrite held, p->pActive just replaced pOld (NULL: none) as the active
** file: hold the new one's lock, let the old one's go and, while shared,
** keep the index at this moment as KvLogStore.pIdxRoll. */
void kl_active_switched(KvLogStore*, KlFile *pOld);
/* MANIFEST: read it (no file: M 0, no list), or replace it (temp file,
** fsync, rename, directory fsync), reporting each
** KVLOG_STEP_MANIFEST_TMP..COMMITTED.  *pbRenamed is set once the rename
** happened: from then on the new set may be the one on disk. */
int kl_manifest_read(KvLogStore*, uint32_t *piMerged, uint64_t *pMaxCid,
                     uint32_t **paList, int *pnList, char **pzErr);
int kl_manifest_write(KvLogStore*, uint32_t iMerged, uint64_t maxCid,
                      const uint32_t *aList, int nList, int *pbRenamed,
                      char **pzErr);

/* ---- logcompact.c: used by logstore.c (kv_logstore_compact) ----
** Both run with muCompact held.  kl_compact: the compaction of a store one
** process has open (see logcompact.c).  kl_compact_shared: the one of a
** shared store, by the one process that compacts it: merged files take
** numbers that no merged file on disk has (aUsed, nUsed: those, sorted);
** *pbCommitted is set once its MANIFEST may be the one on disk. */
int kl_compact(KvLogStore*, char **pzErr);
int kl_compact_shared(KvLogStore*, const uint32_t *aUsed, int nUsed,
                      int *pbCommitted, char **pzErr);

#endif /* DEPOT_KV_LOGSTORE_INT_H */
