/*
** wal.h -- the root write-ahead log of a KV store (public header of wal/).
**
** A store directory holds a "wal/" folder of numbered segment files
** (wal/0000000000000001.log, ...).  Every writing root transaction appends
** exactly one record:
**
**     CID (commit id, assigned here, strictly increasing across the store's
**     life), TID (the root's transaction id, from the caller), then for each
**     touched table in first-touch order: the table name and its final
**     actions (put key value | delete key).
**
** Each record is framed with its length and a CRC32C.  At open, a torn or
** corrupt tail of the newest segment is detected and cut off (never
** replayed, never a crash); corruption anywhere before the tail is
** SQLITE_CORRUPT naming the file and offset.
**
** Durability: wal_append() returns only after the record is written and
** flushed (fdatasync) - or fails.  Concurrent appenders share flushes
** (group commit): one leader flushes for everyone appended before it.
** wal_append_sync() with WAL_SYNC_NORMAL defers the flush: the record is
** written (it survives the death of the process) but made durable against
** power loss only by a later flush - a WAL_SYNC_FULL append, wal_sync(),
** sealing its segment, wal_close(), or an append that finds the oldest
** unflushed record older than WAL_SYNC_MAX_MS or more than
** WAL_SYNC_MAX_BYTES unflushed.  File order is CID order, so a flush makes
** every record before it durable too.
** Segment files grow ahead of the appends in flushed chunks of zeros, so
** that a record's flush carries no change of the file size; zeros after
** the last record are the end of the log, not damage.
**
** Confirmation: each record remembers the persistent tables it touched that
** have not yet confirmed (the caller names them at append).  A record is
** confirmed when all have called wal_confirm().  A segment is retired
** (deleted, or renamed to *.bak when WalConfig.bKeepBak) only when it and
** every older segment hold confirmed records only.  Segments rotate when
** they pass WalConfig.szSegment bytes.
**
** Abort: wal_abort() withdraws a durable record whose root was rolled
** back after all (prepared, then not committed): it appends an abort
** record naming the record's CID, flushed like any record.  Replay never
** hands a withdrawn record to its callback, and a withdrawn record counts
** as confirmed for retirement (the abort record itself needs no
** confirmation).  Retirement only ever removes the oldest segments and an
** abort record always follows its record, so while a withdrawn record is
** in a live segment its abort record is too.
**
** Replay: wal_replay() hands every unconfirmed record to a callback in CID
** order.  The caller applies it idempotently and then confirms it.
**
** Threads: a Wal is safe to use from many threads at once; every function
** takes the Wal's internal mutex as needed.  No callback is invoked while
** that mutex is held.  One Wal per store directory and process; several
** processes append to one log only in shared mode (wal_set_shared), one
** at a time: the log takes no file lock of its own (the KV engine's store
** locks provide that).
**
** Errors: functions return SQLite result codes (SQLITE_OK, SQLITE_NOMEM,
** SQLITE_IOERR_WRITE, SQLITE_IOERR_FSYNC, SQLITE_IOERR_READ, SQLITE_FULL
** for ENOSPC/EFBIG, SQLITE_CORRUPT, SQLITE_CANTOPEN, SQLITE_MISUSE) and,
** where they take char **pzErr, set it to a sqlite3_malloc'd message that
** names the file ("wal: write of wal/0000000000000003.log failed: No space
** left on device").  The caller frees it.
*/
#ifndef DEPOT_WAL_H
#define DEPOT_WAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ------------------------------------------------------- byte order ---
** The byte-order helpers of the WAL and of the KV engine above it (one
** set for the whole chain): little-endian (the WAL's frames and records,
** the kv_log files) and big-endian (the KV catalog file, kv_btree row
** checksums).  a must have room for the bytes read or written. */
static inline void wal_put_u32(uint8_t *a, uint32_t v){
  a[0] = (uint8_t)v; a[1] = (uint8_t)(v>>8);
  a[2] = (uint8_t)(v>>16); a[3] = (uint8_t)(v>>24);
}
static inline void wal_put_u64(uint8_t *a, uint64_t v){
  wal_put_u32(a, (uint32_t)v);
  wal_put_u32(a+4, (uint32_t)(v>>32));
}
static inline uint32_t wal_get_u32(const uint8_t *a){
  return (uint32_t)a[0] | ((uint32_t)a[1]<<8)
       | ((uint32_t)a[2]<<16) | ((uint32_t)a[3]<<24);
}
static inline uint64_t wal_get_u64(const uint8_t *a){
  return (uint64_t)wal_get_u32(a) | ((uint64_t)wal_get_u32(a+4)<<32);
}
static inline void wal_put_be32(uint8_t *a, uint32_t v){
  a[0] = (uint8_t)(v>>24); a[1] = (uint8_t)(v>>16);
  a[2] = (uint8_t)(v>>8); a[3] = (uint8_t)v;
}
static inline uint32_t wal_get_be32(const uint8_t *a){
  return ((uint32_t)a[0]<<24) | ((uint32_t)a[1]<<16)
       | ((uint32_t)a[2]<<8) | (uint32_t)a[3];
}

/* ---------------------------------------------------------------- I/O ---
** The injectable file layer.  wal/ (and the persistent KV backends, which
** reuse it) never call POSIX file functions directly, so tests can fail any
** write or flush.  Every method returns 0 on success or -1 with errno set.
** A short write is reported by the return of xWrite (bytes written). */
typedef struct WalIo WalIo;
struct WalIo {
  void *pCtx;                                   /* passed to every method */
  int (*xOpen)(void *pCtx, const char *zPath, int flags, int mode);
  ssize_t (*xPwrite)(void *pCtx, int fd, const void *p, size_t n, off_t off);
  ssize_t (*xPread)(void *pCtx, int fd, void *p, size_t n, off_t off);
  int (*xFsync)(void *pCtx, int fd);            /* fdatasync or fsync */
  int (*xFtruncate)(void *pCtx, int fd, off_t n);
  int (*xFstatSize)(void *pCtx, int fd, off_t *pSize);
  int (*xClose)(void *pCtx, int fd);
  int (*xUnlink)(void *pCtx, const char *zPath);
  int (*xRename)(void *pCtx, const char *zFrom, const char *zTo);
  int (*xMkdir)(void *pCtx, const char *zPath, int mode);
  int (*xSyncDir)(void *pCtx, const char *zDir); /* fsync a directory */
};

/* The real POSIX implementation (static storage; never freed). */
const WalIo *wal_io_posix(void);

/* A fault-injecting wrapper around another WalIo, for tests and the
** torture harness: a test hook, compiled only when DEPOT_TEST is defined
** (libdepot_core.la, which the test programs link; the loadable module has
** none of it, see ext/kv/kv_test.h).  Operations are counted from 1 in call order; a fault
** armed for the Nth write (or fsync, ftruncate, pread) fails that call once
** with the given errno, or for WAL_FAULT_SHORT, writes half the bytes and
** returns that.  Thread-safe. */
typedef struct WalFault WalFault;
#define WAL_FAULT_WRITE  1
#define WAL_FAULT_FSYNC  2
#define WAL_FAULT_SHORT  3         /* short write on the Nth write */
#define WAL_FAULT_TRUNCATE 4       /* the Nth xFtruncate fails */
#define WAL_FAULT_READ   5         /* the Nth xPread fails */
WalFault *wal_fault_new(const WalIo *pBase);   /* NULL on OOM */
void wal_fault_free(WalFault*);
const WalIo *wal_fault_io(WalFault*);         /* owned by the WalFault */
/* Arm: the nth (1-based, counted from now) call of kind eKind fails with
** errno err (ignored for WAL_FAULT_SHORT).  n==0 disarms.  With bSticky,
** every call from the nth on fails. */
void wal_fault_arm(WalFault*, int eKind, int n, int err, int bSticky);
/* Calls seen so far of kind eKind (WAL_FAULT_SHORT counts writes). */
int wal_fault_count(WalFault*, int eKind);

/* -------------------------------------------------------------- records --
** A record under construction, and the decoded view handed to replay. */
typedef struct WalRecordBuilder WalRecordBuilder;
WalRecordBuilder *wal_record_new(uint64_t tid); /* NULL on OOM */
void wal_record_free(WalRecordBuilder*);
/* Start the actions of table zTable (nTable bytes, nTable>0).  Tables must
** be started in first-touch order and each at most once (a repeat is
** SQLITE_MISUSE).  On any error the builder is unchanged: SQLITE_MISUSE,
** SQLITE_NOMEM, or SQLITE_TOOBIG when the record would pass 1 GiB. */
int wal_record_table(WalRecordBuilder*, const char *zTable, int nTable);
/* Append an action to the current table.  Keys and values are opaque bytes
** (the KV layer's encodings), 0 or more bytes each.  bDelete: a delete,
** aVal/nVal ignored.  SQLITE_MISUSE before the first table or for negative
** lengths / NULL pointers with a positive length; errors as above. */
int wal_record_action(WalRecordBuilder*, int bDelete,
                      const void *aKey, int nKey,
                      const void *aVal, int nVal);
int wal_record_ntable(const WalRecordBuilder*);  /* tables started so far */

/* A decoded record.  Pointers stay valid only during the replay callback. */
typedef struct WalRecord WalRecord;
typedef struct WalAction WalAction;
struct WalAction {
  int bDelete;
  const uint8_t *aKey; int nKey;
  const uint8_t *aVal; int nVal;      /* NULL/0 for a delete */
};
typedef struct WalTableActions WalTableActions;
struct WalTableActions {
  const char *zTable; int nTable;      /* not NUL-terminated */
  int nAction;
  WalAction *aAction;
};
struct WalRecord {
  uint64_t cid;
  uint64_t tid;
  int nTable;
  WalTableActions *aTable;             /* first-touch order */
  uint64_t cidAborted;                 /* an abort record: the CID it
                                       ** withdraws (nTable is 0); else 0 */
};

/* Decode a record body (the bytes inside one frame).  Used by open and
** replay, and fed truncated, flipped and hostile bodies by the wal suite.
** On success *ppRec is sqlite3_malloc'd (one allocation, pointing into
** aBody, which must outlive it); free with sqlite3_free.  Malformed input
** gives SQLITE_CORRUPT (and *ppRec NULL), never a crash or a read outside
** aBody, and no allocation larger than a bounded multiple of nBody (about
** 20 bytes per body byte at worst). */
int wal_record_decode(const uint8_t *aBody, size_t nBody, WalRecord **ppRec);

/* ------------------------------------------------------------------ log -- */
typedef struct Wal Wal;
typedef struct WalConfig WalConfig;
struct WalConfig {
  int64_t szSegment;        /* rotate past this many bytes; 0: 64 MiB */
  int bKeepBak;             /* retire by renaming to .bak, not deleting */
  const WalIo *pIo;         /* NULL: wal_io_posix() */
  int bShared;              /* other processes append too: see
                            ** wal_set_shared() */
};

/* Open (creating if needed) the log in zDir/wal/ (zDir must exist).
** Scans every segment, checks every frame, cuts a torn/corrupt tail off
** the newest segment (the cut is logged with sqlite3_log(SQLITE_NOTICE,
** ...)), replaces a newest segment whose header never reached the disk,
** and rebuilds the set of unconfirmed records: at open every record still
** in a live segment is unconfirmed, waiting for every table it names
** (retired segments are gone), unless an abort record withdraws it.  The next CID continues after the highest
** CID the log ever handed out, even if every record has retired.  Nothing
** is replayed yet.  A bad frame or header in an older segment is
** SQLITE_CORRUPT naming file and offset, and nothing is changed.  The
** caller owns *ppWal; free with wal_close().  Listing the folder is the
** one file operation that does not go through WalIo. */
int wal_open(const char *zDir, const WalConfig *pCfg, Wal **ppWal,
             char **pzErr);

/* Hand every unconfirmed record to xRecord, in CID order.  A non-OK return
** from xRecord stops the replay and is returned.  Replay does not confirm;
** the caller confirms each record once its effects are applied (for
** in-memory effects, at once).  Must be called before the first append;
** wal_append() calls made concurrently from other threads wait until it is
** over, and replay itself never waits on them. */
int wal_replay(Wal*, int (*xRecord)(void*, const WalRecord*), void *pCtx,
               char **pzErr);

/* Append the record and flush it, sharing the flush with concurrent
** appenders.  azPending/anPending name the nPending tables of this record
** whose confirmation is required (the persistent tables it touched; a
** record with nPending==0 is confirmed as soon as it is durable).  On
** success *pCid is the record's CID and the record - and every record
** acknowledged before it - is durable.
**
** On failure (write, short write, ENOSPC, flush failure) the record is not
** acknowledged (*pCid is 0): the function truncates the segment back to
** where the record's group began and flushes that, so the failed record is
** never replayed; after a failed flush the next append starts a fresh
** segment.  If even that truncation fails the Wal enters a failed state in
** which every later append returns SQLITE_IOERR at once ("... reopen the
** store") until the store is reopened (at reopen, the tail check cuts the
** record off if it is torn; a record that reached the disk whole despite
** the error is replayed - see docs/ARCHITECTURE.md, "Root WAL").
** SQLITE_MISUSE for NULL arguments, an unnamed pending table, or a call
** from inside the replay callback (which would wait for itself). */
int wal_append(Wal*, const WalRecordBuilder*, int nPending,
               const char *const *azPending, const int *anPending,
               uint64_t *pCid, char **pzErr);

/* wal_append() with a choice of durability at return.  WAL_SYNC_FULL is
** wal_append().  WAL_SYNC_NORMAL: on success the record is written to
** the segment file (the OS holds it: a crash of the process loses
** nothing) and flushed later, see "Durability" above; the group it joins
** is flushed anyway when another member asks for it.  Failures are those
** of wal_append(). */
#define WAL_SYNC_NORMAL 1
#define WAL_SYNC_FULL   2
#define WAL_SYNC_MAX_MS     1000           /* bounds of a deferred flush */
#define WAL_SYNC_MAX_BYTES  (4*1024*1024)
int wal_append_sync(Wal*, const WalRecordBuilder*, int eSync, int nPending,
                    const char *const *azPending, const int *anPending,
                    uint64_t *pCid, char **pzErr);

/* Make every record up to CID cid durable (cid 0: every record written so
** far), sharing a flush with concurrent appenders; SQLITE_OK at once when
** they are.  Callers that make a record's effects durable elsewhere (a
** table's data file) call this first, so that nothing outlives a power
** loss that the log lost.  A failed flush of deferred records is returned
** (SQLITE_IOERR_FSYNC naming the file) and puts the log in the failed
** state of wal_append() (the records written since the last flush cannot
** be trusted to reach the disk any more): every later append and sync
** fails until the store is reopened.  Records acknowledged durable before
** stay durable. */
int wal_sync(Wal*, uint64_t cid, char **pzErr);

/* Make the next CID greater than cid (no-op when it is).  For a caller
** whose data files may hold CIDs of records the log lost (written ahead of
** a deferred flush, then a power loss): a CID is never handed out twice. */
void wal_advance_cid(Wal*, uint64_t cid);

/* Withdraw record cid (appended earlier, by the root with TID tid, and
** not yet confirmed - its root was rolled back after the append): append
** an abort record for it and flush it like wal_append() (sharing group
** commit).  On SQLITE_OK the abort is durable: no later open replays
** record cid, and it counts as confirmed.  On failure nothing is
** withdrawn - record cid stays durable and would be replayed at the next
** open; the error is that of wal_append() (the caller decides how to
** stop).  Withdrawing a record already confirmed or retired appends a
** harmless abort record.  SQLITE_MISUSE for a NULL log, cid 0 or a CID
** never handed out. */
int wal_abort(Wal*, uint64_t cid, uint64_t tid, char **pzErr);

/* Table zTable has made its effects of record cid durable in its own data
** files.  Retires every segment that is now fully confirmed, together with
** all older ones (never the active segment, and never past an unconfirmed
** record).  Confirming a table the record does not wait for, or an
** unknown/already confirmed CID, is a no-op returning SQLITE_OK; a NULL or
** empty name is SQLITE_MISUSE.  Durability: confirmations are kept in
** memory only; after a crash, every record of a live segment is replayed
** again.  A segment that cannot be removed is logged (sqlite3_log) and its
** records are replayed again at the next open. */
int wal_confirm(Wal*, uint64_t cid, const char *zTable, int nTable);

/* Every table record cid waits for has confirmed: the same as calling
** wal_confirm() for each of them (after replay, the tables of a record are
** all its tables).  Unknown/already confirmed CID: a no-op, SQLITE_OK. */
int wal_confirm_record(Wal*, uint64_t cid);

/* From now on retire no segment, neither on confirmation nor at close:
** every record still in a live segment is replayed at the next open, even
** the confirmed ones.  For a caller that can no longer trust what it has
** confirmed (the KV engine after a publication failed past the WAL
** flush).  Appends continue as before.  Safe on NULL. */
void wal_hold(Wal*);

/* The rotation size and the retirement mode of an open log.
** wal_set_config() changes them (pCfg->pIo is ignored; szSegment 0 means
** the default 64 MiB): the size applies from the next append (an active
** segment already past it is rotated then), bKeepBak from the next
** retirement.  Neither is stored: a reopened log takes its WalConfig
** again.  wal_get_config() reads them (pIo set to NULL).  Safe on NULL
** (get: zeros). */
void wal_set_config(Wal*, const WalConfig *pCfg);
void wal_get_config(Wal*, WalConfig *pCfg);

/* Counters for kv_stats. */
typedef struct WalStats WalStats;
struct WalStats {
  int nSegment;             /* live segment files */
  int64_t nUnconfirmed;     /* records not yet confirmed */
  int64_t nAppend;          /* records appended since open */
  int64_t nFlush;           /* fdatasync calls since open */
  uint64_t lastCid;         /* highest CID written or replayed */
  uint64_t firstCid;        /* no record with a lower CID is in a live
                            ** segment: none will ever be replayed again */
  int64_t nDeferred;        /* groups written without a flush */
  uint64_t syncedCid;       /* every record up to it is durable */
  int64_t nGatherWait;      /* group leaders that waited for more records
                            ** to share a flush (never for a group that
                            ** asks for none) */
};
void wal_stats(Wal*, WalStats*);

/* Close: flushes what deferred appends left unflushed (a failure is
** logged with sqlite3_log).  When every record is
** confirmed, a fresh segment carrying the next CID is started and all
** others retire, so a clean reopen has nothing to replay.  The active
** segment's preallocated padding is trimmed off (not flushed: padding
** that survives a crash is harmless).  No append may be running.  Safe
** on NULL. */
void wal_close(Wal*);

/* ------------------------------------------------- following the log ---
** Several processes may write one store's log, one at a time (the KV
** engine orders them with a lock of its own); each reads what the others
** appended.  A position is a segment number and the file offset of the
** next frame in that segment (offsets start after the 48-byte header). */
typedef struct WalPos WalPos;
struct WalPos {
  uint64_t segno;
  uint64_t iOff;
};

/* Where this log's next record goes (the end of the frames it has
** written, flushed or not), and *pLastCid the CID of its last written
** record (pLastCid may be NULL).  Zeros for a NULL log. */
void wal_tail(Wal*, WalPos *pPos, uint64_t *pLastCid);

/* Shared mode, for a log other processes append to as well, one writer
** at a time under a lock the caller takes: nothing retires (confirmations
** are only counted), and a close neither rotates nor trims the active
** segment.  Opened with WalConfig.bShared, the open changes nothing on
** disk either: the end of the newest segment's whole frames is its end
** for now (a torn frame there may be another process's write in
** progress), and a log without a segment is SQLITE_CANTOPEN.  A log opened
** alone turns shared when a second process joins, and back when it is
** alone again (then confirmed segments retire at the next confirmation or
** close).  Safe on NULL. */
void wal_set_shared(Wal*, int bShared);

/* Continue this log from another writer's tail: the caller holds the
** writers' lock, pTail/lastCid are the position and CID that the last
** writer published (wal_tail() of its log, or the end of whole frames that
** wal_follow_end() found), and no append of this Wal is in flight.  The
** next append goes to pTail (in a later segment than this Wal's active
** one: that segment becomes active), with a CID above lastCid; the
** segment's size is read again, so preallocation never writes over
** another writer's frames.  A leftover segment after pTail whose creation
** never finished (a writer died rotating) is removed.  SQLITE_CORRUPT when
** the log holds a whole segment after pTail (pTail is stale), SQLITE_MISUSE
** during an append. */
int wal_adopt_tail(Wal*, const WalPos *pTail, uint64_t lastCid,
                   char **pzErr);

/* Hands every record between *pFrom and *pTo (a position another writer
** published with wal_tail()) to xRecord, in file order (CID order),
** abort records included (WalRecord.cidAborted set), and moves *pFrom past
** each record the callback took: on success *pFrom equals *pTo, after a
** failure it names the first record not taken, so a later call resumes
** there.  Reads the segment files of zDir/wal/ only (through pIo, NULL:
** wal_io_posix()), writes nothing, and needs no open Wal.  A segment
** between the two positions must be whole: a torn or damaged frame, or a
** segment that does not continue the one before it where that one was
** sealed, is SQLITE_CORRUPT naming file and offset.  SQLITE_NOTFOUND when
** the segment of *pFrom was retired (its records are gone from the log);
** SQLITE_MISUSE when *pFrom lies after *pTo.  A non-OK return of xRecord
** stops the walk and is returned. */
int wal_follow(const char *zDir, const WalIo *pIo, WalPos *pFrom,
               const WalPos *pTo, int (*xRecord)(void*, const WalRecord*),
               void *pCtx, char **pzErr);

/* wal_follow() from *pFrom to the end of the log's whole frames: the
** records a writer wrote but did not publish (it died first), for the
** next holder of the writers' lock, which calls it with that lock held.
** A torn or damaged frame of the newest segment, or zero padding, ends
** the walk there (not an error); *pFrom ends after the last record taken,
** and *pLastCid (may be NULL) is the CID of the last record taken (left
** alone when none was). */
int wal_follow_end(const char *zDir, const WalIo *pIo, WalPos *pFrom,
                   int (*xRecord)(void*, const WalRecord*), void *pCtx,
                   uint64_t *pLastCid, char **pzErr);

/* Shared mode: retire every segment file of the log numbered below
** segBefore (deleted, or renamed to *.bak with WalConfig.bKeepBak), found
** by listing the folder (other processes' segments included), and forget
** them in this Wal (its active segment may go too: in shared mode its
** next append adopts the published tail first).  For the one process that
** runs a shared store's background work: the caller has made every
** record in them durable in the tables' own files and knows that no
** process will follow the log from inside them again.  *pnRetired (may be
** NULL): how many went.  A segment that cannot be removed stops the walk
** (the error is returned; the older ones are gone). */
int wal_shared_retire(Wal*, uint64_t segBefore, int *pnRetired,
                      char **pzErr);

/* Shared mode: flush the active segment file now, whatever this Wal
** knows of it, so that every byte any process wrote to that file before
** the call is durable (a flush of the file, not of this Wal's records
** only); *pSegno (may be NULL) is its number.  Waits for an append of
** this Wal in flight to finish, never writes.  Records of this Wal in an
** older segment were flushed when it left that segment (wal_adopt_tail).
** A failed flush puts the log in the failed state of wal_sync(). */
int wal_shared_flush(Wal*, uint64_t *pSegno, char **pzErr);

/* --------------------------------------------------- shared header ---
** A store's shared header, the file zDir/SHARED that every process using
** the store maps: WAL_SHARED_SLOTS 64-bit values that its writers publish
** for every reader (which ones, the caller decides).  Readers never wait
** for writers: a read that overlaps a write reads again.  Writes must be
** serialised by the caller (a lock every writer of the store takes). */
#define WAL_SHARED_SLOTS 16
typedef struct WalShared WalShared;

/* Map zDir/SHARED, creating it when missing (bReadOnly: never created or
** changed; a missing or short file is SQLITE_CANTOPEN).  A new file reads
** as all slots 0.  A file of another layout is SQLITE_CANTOPEN. */
int wal_shared_open(const char *zDir, int bReadOnly, WalShared **pp,
                    char **pzErr);
void wal_shared_close(WalShared*);       /* safe on NULL */

/* The published slots, into aSlot[WAL_SHARED_SLOTS]: SQLITE_OK, or
** SQLITE_BUSY when the header stays half-written (its writer died in the
** middle of wal_shared_write()): the caller then takes the writers' lock
** and writes the header again. */
int wal_shared_read(WalShared*, uint64_t *aSlot);

/* Publish aSlot[WAL_SHARED_SLOTS].  SQLITE_READONLY for a read-only
** mapping. */
int wal_shared_write(WalShared*, const uint64_t *aSlot);

/* Word i (0..WAL_SHARED_WORDS-1) of the header, apart from the slots:
** 32 bits of shared memory that its users change with atomics only, e.g.
** a futex word that a process waits on for another to post (the header
** is mapped shared: FUTEX_WAIT and FUTEX_WAKE without FUTEX_PRIVATE_FLAG).
** A read-only mapping must not be written through it.  A new file holds
** zeros. */
#define WAL_SHARED_WORDS 16
uint32_t *wal_shared_word(WalShared*, int i);

/* CRC32C (Castagnoli) of n bytes, continuing from crc (0 to start). */
uint32_t wal_crc32c(uint32_t crc, const void *p, size_t n);
/* Test hook (DEPOT_TEST only, like wal_fault_*): bOn=1 makes wal_crc32c
** take its table path even where the CPU has the crc32 instruction, 0
** restores the choice.  Returns 1 if the CPU has the instruction. */
int wal_crc32c_test_table(int bOn);

#endif /* DEPOT_WAL_H */
