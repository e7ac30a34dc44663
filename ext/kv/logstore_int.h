/*
** kv_logstore_int.h -- declarations shared by the files of the kv_log
** storage engine (kv_logstore.c: files, load, appends, reads;
** kv_logcompact.c: MANIFEST and compaction).  Private to those two files.
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

/* kv_logstore.c, used by kv_logcompact.c */
int kl_errno_rc(int err, int rcDefault);
void kl_set_err(char **pzErr, char *zMsg);
int kl_io_err(char **pzErr, int rc, const char *zOp, const char *zPath,
              int err);
int kl_corrupt(char **pzErr, const char *zPath, int64_t iOff,
               const char *zWhy);
uint32_t kl_get32(const uint8_t*);
void kl_put32(uint8_t*, uint32_t);
char *kl_path(const char *zDir, uint32_t iNum, int eKind);
int kl_file_create(KvLogStore*, uint32_t iNum, int eKind, KlFile **ppFile,
                   char **pzErr);
void kl_file_unref(KlFile*);
int kl_write(KvLogStore*, KlFile*, const void *p, size_t n, int64_t iOff,
             char **pzErr);
int kl_fsync(KvLogStore*, KlFile*, char **pzErr);
int kl_syncdir(KvLogStore*, char **pzErr);
KlSet *kl_set_new(int nFile);
void kl_set_unref(KlSet*);
KlFile *kl_set_find(KlSet*, uint32_t iNum);
int kl_read_frame(KlSet*, const KlLoc*, const void *aKey, int nKey,
                  KvLogBuf *pOut, int bValueOnly, char **pzErr);
int kl_buf_reserve(KvLogBuf*, int64_t n);
int kl_roll_locked(KvLogStore*, char **pzErr);
void kl_sync_point_locked(KvLogStore*);
int kl_sync_locked(KvLogStore*, char **pzErr);
void kl_delta_free(KlDelta*);
int kl_step(KvLogStore*, int eStep, char **pzErr);

/* kv_logcompact.c, used by kv_logstore.c */
int kl_manifest_read(KvLogStore*, uint32_t *piMerged, uint64_t *pMaxCid,
                     uint32_t **paList, int *pnList, char **pzErr);
/* Replace MANIFEST (temp file, fsync, rename, directory fsync), reporting
** each KVLOG_STEP_MANIFEST_TMP..COMMITTED.  *pbRenamed is set once the
** rename happened: from then on the new set may be the one on disk. */
int kl_manifest_write(KvLogStore*, uint32_t iMerged, uint64_t maxCid,
                      const uint32_t *aList, int nList, int *pbRenamed,
                      char **pzErr);

#endif /* DEPOT_KV_LOGSTORE_INT_H */
