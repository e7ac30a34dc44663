/*
** logstore.h -- the storage engine of kv_log tables (private to ext/kv/):
** append-only, checksummed log files with an in-memory ordered index, load
** at open, and crash-safe compaction.  The kv_log backend adapter is its
** only intended caller; nothing here knows about SQL, table names or the
** root WAL's records.
**
** Files.  A store is one directory, given by the caller (never derived
** from a table name here).  It holds:
**
**   NNNNNNNN.klog   log files, numbered from 1; the highest is the active
**                   file that appends go to.  It is rolled (synced, and a
**                   new one started) before a transaction would take it
**                   past KvLogConfig.szFile bytes; a transaction is never
**                   split, so one larger than szFile gets a file alone.
**   NNNNNNNN.kmrg   merged files written by compaction, one record per key
**                   (a merged file and a log file may have the same
**                   number: a shared store's compaction takes numbers no
**                   merged file has).
**   MANIFEST        which merged files are live, the highest log-file
**                   number they replaced ("merged-through" number M) and
**                   the highest CID they hold.
**
** A file starts with a 16-byte header (magic "dkvlog01", file number,
** kind).  Records follow, each framed as
**
**   u32 nBody | u32 crc32c(nBody bytes and body) | body
**   body = u8 flags (1: delete, 2: last record of its transaction)
**        | u64 cid | u32 nKey | key | value (the rest of the body)
**
** all integers little-endian.  The live set at open is: every merged file
** listed in MANIFEST plus every log file numbered above M.  Anything else
** (log files <= M, unlisted merged files, MANIFEST.tmp) is what a crashed
** or finished compaction left behind and is deleted at open (shared: by
** the compacting process, once no process may read it; see
** logcompact.c).
**
** Load.  Log files newest to oldest, then merged files; within a file the
** records newest to oldest (a forward scan finds the frame boundaries and
** checks every checksum first).  The first record met for a key decides
** it: a put becomes the key's location, a delete a tombstone; older
** records of the key are dead.  A torn or corrupt tail of the NEWEST log
** file - and any records after its last complete transaction - is cut off
** (it can only hold data never reported durable, which the root WAL still
** holds), and so is all of it when its header was never written (shorter
** than 16 bytes or all zero).  Any other damage is SQLITE_CORRUPT with a
** message naming the file and the offset.  A length field is checked
** against the record limit (KVLOG_MAX_KEY + KVLOG_MAX_VALUE + framing) and
** the file size before anything is allocated or read for it.
**
** CIDs.  Every transaction carries the commit id of its root-WAL record.
** kv_logstore_apply() requires CIDs to increase, so the log always holds a
** prefix of the applied transactions in CID order: after an open, every
** transaction with cid <= kv_logstore_stats().maxCid is present and
** durable, every later one absent.  Replaying root-WAL records with a
** larger CID is then exactly what is needed (and replaying an older one
** again is harmless: newest wins).  A compaction that drops the tombstones
** of the newest transactions keeps their CID in MANIFEST, so maxCid never
** goes back.
**
** Threads.  A store may be used from many threads.  Appends (apply, sync)
** are serialised by the store's write mutex; readers (get, snapshots,
** cursors) never wait for an append's I/O or for a compaction's I/O, only
** for short pointer swaps under the state mutex.  A snapshot and its
** cursors are used by one thread at a time.
**
** Errors.  SQLite result codes; where a function takes char **pzErr it
** sets it on failure to a sqlite3_malloc'd message naming the file
** ("kv_log: write of /x/t/00000003.klog failed: No space left on device")
** that the caller frees.  I/O failures are SQLITE_CANTOPEN,
** SQLITE_IOERR_WRITE, SQLITE_IOERR_FSYNC, SQLITE_IOERR_DIR_FSYNC,
** SQLITE_IOERR_READ, SQLITE_IOERR_FSTAT, SQLITE_IOERR_TRUNCATE,
** SQLITE_IOERR_DELETE or SQLITE_FULL (ENOSPC, EFBIG); damaged bytes are
** SQLITE_CORRUPT.  SQLITE_NOMEM comes without a message.
*/
#ifndef DEPOT_KV_LOGSTORE_H
#define DEPOT_KV_LOGSTORE_H

#include "wal/wal.h"
#include <stdint.h>

/* Largest key and value accepted by kv_logstore_apply(): room for the
** kv_codec encodings of the largest SQL keys and values. */
#define KVLOG_MAX_KEY    (2*32768 + 64)
#define KVLOG_MAX_VALUE  (16*1024*1024 + 1024)

typedef struct KvLogStore KvLogStore;
typedef struct KvLogSnap KvLogSnap;
typedef struct KvLogCursor KvLogCursor;

/* Compaction steps, in order, as reported to KvLogConfig.xStep (tests use
** it to stop a compaction at each step, or kill the process there). */
#define KVLOG_STEP_ROLLED         1  /* active file rolled, nothing written */
#define KVLOG_STEP_OUTPUT         2  /* a merged file written, not synced */
#define KVLOG_STEP_OUTPUT_SYNCED  3  /* all merged files synced + dir */
#define KVLOG_STEP_MANIFEST_TMP   4  /* MANIFEST.tmp written and synced */
#define KVLOG_STEP_RENAMED        5  /* renamed to MANIFEST, dir not synced */
#define KVLOG_STEP_COMMITTED      6  /* dir synced: new set durable */
#define KVLOG_STEP_SWAPPED        7  /* index swapped, old files doomed */

typedef struct KvLogConfig KvLogConfig;
struct KvLogConfig {
  int64_t szFile;         /* file size bound (see above); 0: 64 MiB */
  int64_t szDeadTrigger;  /* compaction is due when dead bytes exceed this
                          ** and half the stored bytes; 0: szFile; <0:
                          ** never (kv_logstore_compact() still works) */
  int bBackground;        /* run due compactions on a store-owned thread,
                          ** started at open and joined at close */
  const WalIo *pIo;       /* NULL: wal_io_posix() */
  /* Test hook: called at each KVLOG_STEP_*; a non-zero return stops the
  ** compaction right there, which then cleans up as after an I/O error
  ** and returns SQLITE_ABORT (a crash test kills the process in the hook
  ** instead).  The return after KVLOG_STEP_SWAPPED is ignored.  NULL:
  ** none. */
  int (*xStep)(void *pStepCtx, int eStep);
  void *pStepCtx;
  /* Other processes append to the store too, one at a time under a lock
  ** of the caller's (see kv_logstore_follow): the open changes no file
  ** (no torn tail is cut, no leftover deleted, nothing synced; the index
  ** ends at the last whole transaction), and compaction follows the
  ** shared protocol of logcompact.c (the process kv_logstore_tick names
  ** compacts; every process loads the new MANIFEST). */
  int bShared;
  /* With bShared: a reader only.  Files are opened read-only, nothing is
  ** created (a store without its files is SQLITE_CANTOPEN), and apply,
  ** sync and the writer's follow are never called. */
  int bReadOnly;
};

/* One action of a transaction.  Keys are 1..KVLOG_MAX_KEY bytes, values
** 0..KVLOG_MAX_VALUE bytes (ignored for a delete); both opaque. */
typedef struct KvLogAction KvLogAction;
struct KvLogAction {
  int bDelete;
  const uint8_t *aKey; int nKey;
  const uint8_t *aVal; int nVal;
};

/* A caller-owned buffer that reads fill.  Zero-initialise; reused across
** reads; free with kv_logbuf_free(). */
typedef struct KvLogBuf KvLogBuf;
struct KvLogBuf { uint8_t *a; int n; int nAlloc; };
void kv_logbuf_free(KvLogBuf*);

/* Open (creating the directory and its first log file if needed) the store
** in zDir and load its index, as described above.  When it returns OK,
** everything loaded is durable (the surviving tail of the newest file is
** synced) and kv_logstore_stats() reports its highest CID.  Errors:
** SQLITE_CORRUPT (file + offset in *pzErr), SQLITE_CANTOPEN, SQLITE_IOERR_*,
** SQLITE_NOMEM, SQLITE_MISUSE for a NULL or empty zDir.  *ppStore is NULL
** on failure; on success free it with kv_logstore_close(). */
int kv_logstore_open(const char *zDir, const KvLogConfig *pCfg,
                     KvLogStore **ppStore, char **pzErr);

/* Stop the background compaction thread (joining it), release the store's
** files and memory.  Snapshots must be freed first.  Nothing is synced:
** call kv_logstore_sync() first for anything that must survive.  NULL-safe. */
void kv_logstore_close(KvLogStore*);

/* Append one committed transaction (nAction actions, cid > every cid
** applied before; nAction==0 is a no-op) to the active file and publish it
** to the index: new snapshots and gets see it when this returns.
**
** Durable when it returns: nothing new.  The records are written to the
** file (the OS page cache) but only kv_logstore_sync() makes them durable;
** a crash before that may lose them (the root WAL still holds them).
**
** On failure (bad arguments: SQLITE_MISUSE / SQLITE_TOOBIG; a failed
** write, a short write being continued until it fails: SQLITE_IOERR_WRITE
** / SQLITE_FULL; SQLITE_NOMEM) nothing is
** published and the file is truncated back to where the transaction began.
** If that truncation fails too, the store refuses every later apply and
** sync with SQLITE_IOERR until it is reopened (the open cuts the tail). */
int kv_logstore_apply(KvLogStore*, uint64_t cid, int nAction,
                      const KvLogAction *aAction, char **pzErr);

/* Make every transaction applied so far durable (fdatasync of the active
** file, and of the directory when a file was created since the last sync).
** When it returns OK, every applied transaction survives a crash and the
** caller may confirm their CIDs to the root WAL.
**
** On failure (SQLITE_IOERR_FSYNC, SQLITE_IOERR_DIR_FSYNC): nothing applied
** since the last successful sync is visible any more - the index returns
** to its state at that sync - and the store refuses later applies and
** syncs with SQLITE_IOERR until it is reopened.  The records stay in the
** file; the reopen keeps them if they are whole (and syncs them) or cuts
** them; either way the root WAL still holds them unconfirmed. */
int kv_logstore_sync(KvLogStore*, char **pzErr);

/* Point read of the current state: *pbFound=1, pOut filled with the value
** and *pCid with the CID of the transaction that wrote it, or *pbFound=0
** (absent or deleted).  pCid may be NULL.  From the read cache, or one
** pread.  Errors: SQLITE_CORRUPT
** (the record read back fails its checksum; file + offset in *pzErr),
** SQLITE_IOERR_READ, SQLITE_NOMEM. */
int kv_logstore_get(KvLogStore*, const void *aKey, int nKey, KvLogBuf *pOut,
                    uint64_t *pCid, int *pbFound, char **pzErr);

/* A stable view of the current state: later applies, syncs and compactions
** do not change what it reads, and the files it reads are kept (not
** deleted) until it is freed.  O(1).  SQLITE_NOMEM on failure. */
int kv_logstore_snapshot(KvLogStore*, KvLogSnap **ppSnap);
void kv_logsnap_free(KvLogSnap*);               /* NULL-safe */
/* A second, independent handle on the same view (O(1); SQLITE_NOMEM). */
int kv_logsnap_dup(KvLogSnap*, KvLogSnap **ppCopy);
/* kv_logstore_get() on the snapshot. */
int kv_logsnap_get(KvLogSnap*, const void *aKey, int nKey, KvLogBuf *pOut,
                   uint64_t *pCid, int *pbFound, char **pzErr);
/* Number of live keys in the snapshot. */
int64_t kv_logsnap_count(KvLogSnap*);

/* Cursors over a snapshot's live keys (deleted keys are skipped), in key
** order (memcmp).  Seek codes are map.h's KV_SEEK_*.  A cursor holds a
** reference to its snapshot's state, so it may outlive kv_logsnap_free(). */
int kv_logsnap_cursor(KvLogSnap*, KvLogCursor **ppCsr);  /* SQLITE_NOMEM */
void kv_logcursor_free(KvLogCursor*);                     /* NULL-safe */
/* Position; 1 if on a key, 0 if none matches / past the end. */
int kv_logcursor_seek(KvLogCursor*, int eSeek, const void *aKey, int nKey);
int kv_logcursor_next(KvLogCursor*);
int kv_logcursor_prev(KvLogCursor*);
int kv_logcursor_valid(KvLogCursor*);
/* The current key (valid until the cursor moves or is freed) and CID. */
void kv_logcursor_key(KvLogCursor*, const uint8_t **paKey, int *pnKey,
                      uint64_t *pCid);
/* Read the current value into pOut (the read cache, or one pread).
** Errors as for get. */
int kv_logcursor_value(KvLogCursor*, KvLogBuf *pOut, char **pzErr);
/* The current key (as kv_logcursor_key, without the CID) and value (as
** kv_logcursor_value) in one call, the value in place: valid until the
** cursor moves or reads another value (pSpare holds it when its record
** is read on its own).  Errors as for get. */
int kv_logcursor_row(KvLogCursor*, const uint8_t **paKey, int *pnKey,
                     KvLogBuf *pSpare, const uint8_t **paVal, int *pnVal,
                     char **pzErr);
/* kv_logcursor_next (bPrev: _prev) and kv_logcursor_row in one call:
** SQLITE_OK on the next key, SQLITE_DONE past the end (the cursor is then
** on no key), else the read error. */
int kv_logcursor_step_row(KvLogCursor*, int bPrev, const uint8_t **paKey,
                          int *pnKey, KvLogBuf *pSpare,
                          const uint8_t **paVal, int *pnVal, char **pzErr);

/* Merge every file older than the active one into new merged files holding
** only live records, then switch to them atomically and delete the old
** files once no snapshot uses them.  Runs in the calling thread; appends
** and reads continue meanwhile (they wait only for the short steps that
** roll the active file and swap the index).  One compaction at a time: a
** second caller waits for the first.
**
** Durable when it returns OK: the new file set (MANIFEST renamed and the
** directory synced).  Crash safety: at every point, a reopen finds either
** the complete old set or the complete new set (see docs/ARCHITECTURE.md).
** Errors: SQLITE_IOERR_*, SQLITE_FULL (the old set stays in use, the
** partial output is deleted), SQLITE_CORRUPT (a record read back is
** damaged), SQLITE_ABORT (stopped by KvLogConfig.xStep).
**
** Shared: the caller is the one process that compacts (logcompact.c);
** SQLITE_BUSY, nothing compacted, while a process may still read files
** the last compaction replaced (they are removed first), and while this
** process has not read past them; nothing to merge is SQLITE_OK. */
int kv_logstore_compact(KvLogStore*, char **pzErr);

/* 1 if dead bytes have passed the configured trigger. */
int kv_logstore_compaction_due(KvLogStore*);

/* Several processes.  kv_logstore_share() turns an open store into the
** shared mode of KvLogConfig.bShared for good (waiting for a compaction
** it runs); its background thread then does the shared work that
** kv_logstore_tick() asks for.
**
** kv_logstore_follow() reads what other processes appended since this
** store last looked (from the known end of its active file, then each
** newer log file that a roll started) and publishes every whole
** transaction found to the index; the cost is the bytes appended.  A
** follower (bWriter 0) stops at the first incomplete or damaged frame: an
** append in progress.  The writer (bWriter 1: the caller holds the lock
** that orders appends, and calls it before each kv_logstore_apply) cuts
** such a tail, which a writer that died left, and a newer file whose
** header was never written is started again, so its appends continue the
** log where the last whole transaction ends.  cidMax (a follower's, 0:
** none): the transactions read end with the last one whose CID is at
** most cidMax (one committed but not yet published stays unread).
** *pnTxn (may be NULL): the transactions read.  Errors as for apply; a
** follower's index stays as it was. */
void kv_logstore_share(KvLogStore*);
/* Shared: called often (every few ms) by each process; bOwner says
** whether this process runs the store's background work.  Its background
** thread then loads a MANIFEST another process's compaction committed
** and, in that process alone, removes what compactions replaced and
** compacts when due (see the head comment of logcompact.c). */
void kv_logstore_tick(KvLogStore*, int bOwner);
int kv_logstore_follow(KvLogStore*, int bWriter, uint64_t cidMax,
                       int *pnTxn, char **pzErr);

/* Shared: make durable every byte of the log files this store has read
** or written so far (the known end of each live file), whichever process
** appended them: one fsync per file that grew since the last call, and
** one of the directory when a file is new to it.  The process that runs
** the store's background work calls it, after reading up to the
** published tail, before the root WAL segments below retire. */
int kv_logstore_sync_shared(KvLogStore*, char **pzErr);

/* The read cache.  Reads (gets, cursors) serve records from chunks of
** file bytes that the process keeps, least recently used first out, up to
** a limit for all stores together (16 MiB until set);
** a record's checksum is checked the first time it is read from the
** cache, not again.  So a record damaged on disk after this process
** cached it reads as it was until the cache lets go of it (the limit, or
** its store is closed); the next read from the file reports the damage.
** Damaged bytes are never returned.  kv_logstore_cache_limit sets the
** limit (nByte >= 0; 0: nothing is cached, each walk keeps its own
** chunk), dropping what no longer fits, and returns the one before
** (nByte < 0: only returns it); kv_logstore_cache_used reports the bytes
** cached. */
int64_t kv_logstore_cache_limit(int64_t nByte);
int64_t kv_logstore_cache_used(void);

/* Counters for kv_stats. */
typedef struct KvLogStats KvLogStats;
struct KvLogStats {
  int64_t nLive;          /* live keys */
  int64_t nTomb;          /* tombstones waiting for compaction */
  int64_t szStored;       /* bytes in the live files */
  int64_t szLive;         /* bytes of the live keys' records */
  int64_t szDead;         /* stored - live - file headers */
  int nFile;              /* live files (log + merged) */
  int64_t nCompaction;    /* compactions completed since open */
  int64_t nCompactError;  /* compactions failed since open */
  char zCompactError[400]; /* the last one's message ("" if none) */
  uint64_t maxCid;        /* highest CID applied or loaded */
  int bFailed;            /* refusing writes until reopened */
};
void kv_logstore_stats(KvLogStore*, KvLogStats*);
/* 1 once a write or sync of the store failed: it refuses writes, and its
** index may lack applied records (they are in the root WAL), until it is
** reopened.  Lock-free. */
int kv_logstore_failed(KvLogStore*);

/* Delete every file of the store and its directory (the table was
** dropped).  Afterwards only kv_logstore_close() may be called.  Open
** snapshots keep reading the unlinked files.  Durable when it returns:
** nothing - the removal is not synced, so a crash may leave the directory
** or some of its files behind; the caller's catalog, not this directory,
** decides whether the table exists.  Errors: SQLITE_IOERR_DELETE naming
** the directory, SQLITE_NOMEM. */
int kv_logstore_destroy(KvLogStore*, char **pzErr);

#endif /* DEPOT_KV_LOGSTORE_H */
