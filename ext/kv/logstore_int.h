/*
** logstore_int.h -- the structures and functions shared by the files of
** the kv_log storage engine: logfile.c (files, sets, frames, the active
** file's sync and roll, the MANIFEST), logcompact.c (compaction) and
** logstore.c (load, appends, reads, the background thread).  They call
** each other in that order only.  Private to those three files.
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

/* One open file.  Referenced by every KlSet that lists it and, briefly,
** by readers; the last unref closes it and, if bDoomed (it was replaced by
** a committed compaction), unlinks it. */
typedef struct KlFile KlFile;
struct KlFile {
  uint32_t iNum;
  int eKind;
  int fd;
  int nRef;              /* atomic */
  int bDoomed;           /* atomic; set once, under KvLogStore.mu */
  int64_t sz;            /* bytes; the active file's grows under mu */
  int64_t szShSynced;    /* shared: bytes this process made durable
                         ** (kv_logstore_sync_shared, its only user) */
  const WalIo *pIo;
  char *zPath;
};

/* An immutable, reference-counted set of files sorted by number. */
typedef struct KlSet KlSet;
struct KlSet {
  int nRef;              /* atomic */
  int nFile;
  KlFile **apFile;
};

/* Where a key's newest record is: the value stored in the index map. */
typedef struct KlLoc KlLoc;
struct KlLoc {
  uint32_t iFile;
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
KlFile *kl_set_find(KlSet*, uint32_t iNum);
KlSet *kl_set_with(KlSet *pOld, KlFile *pAdd);
/* Check the frame at a (nAvail bytes) and parse it: NULL if whole and
** valid, else the reason. */
const char *kl_frame_parse(const uint8_t *a, int64_t nAvail, KlFrame *pOut);
/* Read and check the frame at *pLoc (holding key aKey, unless NULL) into
** pOut: the value alone with bValueOnly, else the whole frame. */
int kl_read_frame(KlSet*, const KlLoc*, const void *aKey, int nKey,
                  KvLogBuf *pOut, int bValueOnly, char **pzErr);
/* The read-ahead window of a walk: up to KL_WINDOW_BYTES of one log file
** from iOff (buf.n of them valid; 0: empty).  The first read of a walk is
** KL_WINDOW_FIRST bytes and each refill doubles it up to KL_WINDOW_BYTES
** (nNext; 0 means KL_WINDOW_FIRST), so a short range reads little and a
** long walk reads few times.  Frames of a set are never rewritten, so a
** window stays true for the life of the walk's set. */
#define KL_WINDOW_FIRST 4096
#define KL_WINDOW_BYTES 65536
typedef struct KlWindow KlWindow;
struct KlWindow {
  uint32_t iFile;
  uint64_t iOff;
  int nNext;                    /* bytes of the next fill */
  KvLogBuf buf;
};
/* kl_read_frame of the value alone for a walk: served from *pWin when the
** frame is inside it, else from one read of a new window at the frame
** (a frame larger than a window, and every read error, go through
** kl_read_frame, which reports them). */
int kl_read_frame_ahead(KlSet*, const KlLoc*, const void *aKey, int nKey,
                        KlWindow *pWin, KvLogBuf *pOut, char **pzErr);
/* kl_read_frame_ahead without the copy: *paVal and *pnVal give the value
** in place, in pWin's buffer (valid until the window's next fill) or, for a
** frame read on its own, in pOut. */
int kl_read_frame_in(KlSet*, const KlLoc*, const void *aKey, int nKey,
                     KlWindow *pWin, KvLogBuf *pOut, const uint8_t **paVal,
                     int *pnVal, char **pzErr);
void kl_delta_free(KlDelta*);
/* muWrite held: remember the current index as the last durable one. */
void kl_sync_point_locked(KvLogStore*);
/* muWrite held: sync the active file (and the directory when a file was
** created); on failure the index goes back to the last sync point and
** the store refuses writes until reopened. */
int kl_sync_locked(KvLogStore*, char **pzErr);
/* muWrite held: sync, then start a new active log file. */
int kl_roll_locked(KvLogStore*, char **pzErr);
/* MANIFEST: read it (no file: M 0, no list), or replace it (temp file,
** fsync, rename, directory fsync), reporting each
** KVLOG_STEP_MANIFEST_TMP..COMMITTED.  *pbRenamed is set once the rename
** happened: from then on the new set may be the one on disk. */
int kl_manifest_read(KvLogStore*, uint32_t *piMerged, uint64_t *pMaxCid,
                     uint32_t **paList, int *pnList, char **pzErr);
int kl_manifest_write(KvLogStore*, uint32_t iMerged, uint64_t maxCid,
                      const uint32_t *aList, int nList, int *pbRenamed,
                      char **pzErr);

/* ---- logcompact.c: used by logstore.c (its background thread) ----
** kv_logstore_compact, declared in logstore.h. */

#endif /* DEPOT_KV_LOGSTORE_INT_H */
