/*
** kv_engine.h -- the KV engine: stores, catalogs and root transactions
** (private to ext/; the SQL surface in kv_vtab.c and kv_func.c is its only
** user).
**
** A store is a directory.  One KvEngine per store per process, shared by
** every connection and refcounted by real path; an exclusive lock file
** (<dir>/LOCK, flock) keeps other processes out.  The store holds the root
** WAL (<dir>/wal/) and the catalog file (<dir>/tables_meta): the committed
** contents of the internal table ".tables_meta" (name -> type,
** persistence, id, options).  An anonymous store (zDir NULL) lives in
** memory only: no lock, no WAL, no catalog file, persistence=1 refused.
**
** Transactions.  A KvRoot is one public transaction with one TID.  Its
** children are one per table it touched (first-touch order), plus the
** schema child (the catalog) when it creates or removes a table.  Children
** are internal: every operation goes through the root.  Each child binds
** to its table at first touch and takes a snapshot then: reads see that
** snapshot plus the root's own writes.  Writes go to the child's write set
** (a KvMap, so a savepoint is a reference to it).
**
** Commit protocol: kv_root_prepare() checks conflicts and reserves (the
** root joins the engine's list of prepared roots), then appends the WAL
** record of its persistent writes and flushes it (outside the engine
** mutex, so concurrent committers share a flush); kv_root_commit()
** publishes every child's writes at one new commit sequence number and
** releases the reservations, then confirms the WAL record as far as the
** tables allow.  A writable root with no writes runs the same steps but
** appends nothing.
**
** Conflicts, for every (table, key) a child read (point reads) or wrote:
**   - the key was committed after the child's snapshot (a per-key commit
**     revision; same-value and A->B->A writes conflict too);
**   - a prepared root holds a reservation on it that the matrix forbids:
**                 held:  Read     Write
**        want Read       ok       conflict
**        want Write      conflict conflict
**     and a schema child's reservations conflict with every other one.
**   - a data child also conflicts when its table's catalog entry changed
**     after it bound to the table (removed or recreated concurrently).
** All are collected, deduplicated and sorted by table name bytes, then key
** bytes; prepare fails with SQLITE_BUSY_SNAPSHOT and the root is rolled
** back.
**
** Threads: an engine may be used from any number of threads; a KvRoot or
** KvIter by one thread at a time.  KvEngine.mutex guards the table list,
** the catalog, the commit sequence, revision maps and the prepared list.
*/
#ifndef DEPOT_KV_ENGINE_H
#define DEPOT_KV_ENGINE_H

#include "ext/kv/codec.h"
#include "ext/kv/map.h"
#include "wal/wal.h"
#include <stdint.h>

typedef struct KvEngine KvEngine;
typedef struct KvRoot KvRoot;
typedef struct KvIter KvIter;

#define KV_META_TABLE      ".tables_meta"
#define KV_MAX_NAME_BYTES  4096

/* Test hook: every store opened from now on uses pIo for its WAL and
** catalog file (NULL: the real POSIX I/O).  The caller keeps pIo alive. */
void kv_engine_test_io(const WalIo *pIo);

/* Test hook: every store opened from now on rotates its WAL past
** szSegment bytes (0: the default, 64 MiB) and, with bKeepBak, retires
** segments by renaming them to *.log.bak instead of deleting them. */
void kv_engine_test_wal_config(int64_t szSegment, int bKeepBak);

/* The root WAL's rotation size and retirement mode of store p, as open in
** this process (wal_get_config / wal_set_config: not stored, a reopened
** store starts from the defaults).  Both return 0, and change nothing,
** when the store has no WAL (an anonymous, in-memory store); else 1. */
int kv_engine_wal_config(KvEngine *p, WalConfig *pCfg);
int kv_engine_set_wal_config(KvEngine *p, const WalConfig *pCfg);

/* Test hook: the n-th backend publication (xApply of one table of a
** committing root) from now fails with SQLITE_NOMEM, as running out of
** memory after the WAL flush would (1: the next one; 0: none). */
void kv_engine_test_fail_apply(int n);

/* Test hook: the n-th receipt recorded by a versioned commit from now is
** lost (bDup 0) or recorded twice (bDup 1), as a defect in publication
** would do; the commit's receipts check must report it (n 0: none). */
void kv_engine_test_fault_receipt(int n, int bDup);

/* Open (create if needed) the store in zDir, or a new anonymous store when
** zDir is NULL.  Replays the WAL.  *ppEng holds one reference.  Errors:
** SQLITE_BUSY "kv: store <dir> is open in another process",
** SQLITE_CANTOPEN, SQLITE_CORRUPT, I/O codes; *pzErr is set. */
int kv_engine_open(const char *zDir, KvEngine **ppEng, char **pzErr);
KvEngine *kv_engine_ref(KvEngine*);
/* Drop a reference; the last one closes the store.  NULL-safe. */
void kv_engine_unref(KvEngine*);
/* Real path of the store directory, or NULL for an anonymous store. */
const char *kv_engine_dir(KvEngine*);

/* SQLITE_OK if z/n is a usable table name: 1..4096 bytes of valid UTF-8,
** not ".tables_meta".  Else SQLITE_ERROR with *pzErr. */
int kv_name_check(const char *z, int n, char **pzErr);

/* A table's catalog entry. */
typedef struct KvMeta KvMeta;
struct KvMeta {
  char zType[32];
  int bPersist;
  uint64_t iId;
  char *zOptions;          /* sqlite3_malloc'd JSON text or NULL */
};
void kv_meta_clear(KvMeta*);

/* -------------------------------------------------------------- roots -- */
#define KV_ROOT_ACTIVE   0
#define KV_ROOT_PREPARED 1
#define KV_ROOT_FAILED   2   /* rolled back after an error; only free it */
#define KV_ROOT_DONE     3   /* committed or rolled back */

/* Begin a root transaction (new TID).  The root holds an engine ref. */
int kv_root_begin(KvEngine*, KvRoot **ppRoot);
KvEngine *kv_root_engine(KvRoot*);
int kv_root_state(KvRoot*);
uint64_t kv_root_tid(KvRoot*);
/* Name the root in its error messages as "transaction handle iHandle", the
** number kv_begin() gave the caller, instead of "transaction <tid>" (the
** store-wide id, which callers never see).  iHandle>0. */
void kv_root_set_handle(KvRoot*, int64_t iHandle);
/* Rolls back first if still active or prepared.  NULL-safe. */
void kv_root_free(KvRoot*);

/* Point read of key aKey in table zTab: copies the value bytes into *pVal
** (reset first) and sets *pbFound.  With pRoot, sees the root's snapshot
** and writes and registers a Read; with pRoot NULL (pEng given), reads the
** latest committed state and registers nothing. */
int kv_get(KvEngine*, KvRoot*, const char *zTab, int nTab,
           const uint8_t *aKey, int nKey, KvBuf *pVal, int *pbFound,
           char **pzErr);
/* Write (aVal bytes) or delete (aVal NULL) key in the root's write set.
** Nothing is durable or visible to others until commit. */
int kv_put(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
           int nKey, const uint8_t *aVal, int nVal, char **pzErr);
int kv_del(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
           int nKey, char **pzErr);

/* The catalog entry of zTab as the root sees it (its own creates and
** removes included), without registering a read.  pRoot may be NULL
** (latest committed catalog).  *pbFound=0 when absent. */
int kv_table_meta(KvEngine*, KvRoot*, const char *zTab, int nTab,
                  KvMeta *pMeta, int *pbFound);

/* Create zTab (schema child of the root) unless it exists: *pbCreated=1
** if created, 0 if it existed with the same type and persistence (an
** error otherwise).  Must precede every write and remove in the root.
** The new table is visible to this root at once; nothing is durable or
** visible to others before commit, and a rollback leaves nothing. */
int kv_create_table(KvRoot*, const char *zTab, int nTab, const char *zType,
                    int bPersist, const char *zOptions, int *pbCreated,
                    char **pzErr);
/* Remove zTab at commit.  The root must do nothing else.  Durable when
** the commit returns (the WAL record), then in the catalog file. */
int kv_remove_table(KvRoot*, const char *zTab, int nTab, char **pzErr);

/* Prepare: conflict check + reservation, then WAL append and flush.  On
** SQLITE_OK the transaction's persistent writes are durable in the WAL (a
** crash from here on replays them).  On error the root is rolled back
** (state FAILED); a conflict is SQLITE_BUSY_SNAPSHOT with a message naming
** the tables and keys. */
int kv_root_prepare(KvRoot*, char **pzErr);

/* Take back a successful prepare, for a transaction that goes on: the
** WAL record is withdrawn with a durable abort record (as by a rollback),
** the reservations are released, and the root is active again with its
** snapshots, reads and writes, so a later prepare checks them anew.  Does
** nothing unless the root is prepared.  If the abort record cannot be
** made durable the store is stopped (see kv_root_rollback_err), the root
** is finished and that error is returned. */
int kv_root_unprepare(KvRoot*, char **pzErr);
/* The conflicts found by the last failed prepare (sorted, deduplicated),
** valid until the root is freed. */
typedef struct KvConflict KvConflict;
#define KV_CONFLICT_TXN      0   /* transaction_conflict */
#define KV_CONFLICT_VERSION  1   /* version_mismatch (wins over TXN) */
struct KvConflict {
  const char *zTable; int nTable;    /* NUL-terminated */
  const uint8_t *aKey; int nKey;
  int eKind;               /* KV_CONFLICT_* */
};
int kv_root_conflicts(KvRoot*, const KvConflict **paConflict);
/* Commit a prepared (or still active: it prepares first) root: publish,
** release reservations, confirm.  Returns when the writes are visible to
** every new snapshot; persistent writes were made durable by the prepare,
** and DDL is also in the catalog file (unless writing it failed, which is
** logged: the WAL record then stays and is replayed at the next open). */
int kv_root_commit(KvRoot*, char **pzErr);
/* Roll back: release everything the root holds; nothing it wrote becomes
** visible.  A prepared root whose writes are already in the WAL also
** withdraws its record: an abort record is appended and flushed (sharing
** group commit) before this returns, so no later open replays the
** transaction, across any crash after the return.  If the abort record
** cannot be made durable, the store is stopped: every later operation on
** it fails with a message saying the transaction's WAL record will be
** applied when the store is next opened (the only outcome that can then
** be guaranteed).  kv_root_rollback_err returns that error (SQLITE_OK
** otherwise); kv_root_rollback ignores it.  The root is finished either
** way. */
int kv_root_rollback_err(KvRoot*, char **pzErr);
void kv_root_rollback(KvRoot*);

/* Protocols of a root (kv_version.h has the versioned one).  A root
** starts with none; kv_get with a root, kv_root_prepare and kv_root_commit
** of an active root select ORDINARY; kv_version_prepare selects VERSIONED.
** kv_root_protocol() selects eProto or fails with SQLITE_MISUSE and a
** message when the root already uses the other one; nothing else changes
** then (no TID, no WAL). */
#define KV_PROTO_NONE       0
#define KV_PROTO_ORDINARY   1
#define KV_PROTO_VERSIONED  2
int kv_root_protocol(KvRoot*, int eProto, char **pzErr);
int kv_root_protocol_get(KvRoot*);

/* Like kv_get with a root, but neutral: registers no read and selects no
** protocol (the old value a delete returns). */
int kv_peek(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
            int nKey, KvBuf *pVal, int *pbFound, char **pzErr);

/* Fix the root's view of table zTab now: bind the table if the root has
** not touched it yet (its snapshot is taken here), or take the snapshot a
** first write put off.  Later point reads and scans of zTab through the
** root see that snapshot plus the root's writes.  Registers no read and
** selects no protocol.  Errors as kv_get's ("kv: no such table", a
** finished root), and SQLITE_BUSY_SNAPSHOT when a table the root wrote
** was removed since. */
int kv_root_bind(KvRoot*, const char *zTab, int nTab, char **pzErr);
/* Non-zero if the root has a write (put or delete) in any table, or a
** create or remove. */
int kv_root_has_writes(KvRoot*);

/* Savepoints of the write sets, numbered like SQLite's (0 outermost).
** kv_root_rollback_to of a level the root has no savepoint for (one opened
** before the root began, or -1, SQLite's number for the SAVEPOINT that
** began the transaction) undoes every write of the root. */
int kv_root_savepoint(KvRoot*, int iLevel);
void kv_root_release(KvRoot*, int iLevel);
void kv_root_rollback_to(KvRoot*, int iLevel);

/* ---------------------------------------------------------- iterators --
** A scan of zTab between optional bounds, as of now (pRoot NULL) or as the
** root sees it: its snapshot plus its writes as they were when the scan
** opened.  Registers no reads. */
typedef struct KvBound KvBound;
struct KvBound {
  const uint8_t *aKey; int nKey;
  int bIncl;               /* include aKey itself */
};
int kv_iter_open(KvEngine*, KvRoot*, const char *zTab, int nTab,
                 const KvBound *pLo, const KvBound *pHi, int bDesc,
                 KvIter **ppIter, char **pzErr);
int kv_iter_eof(KvIter*);
void kv_iter_next(KvIter*);
/* SQLITE_OK, or the read error that ended the scan early (it is then at
** EOF); *pzErr gets the message (sqlite3_malloc'd; the caller frees it). */
int kv_iter_error(KvIter*, char **pzErr);
void kv_iter_entry(KvIter*, KvMapEntry *pOut);
void kv_iter_close(KvIter*);

/* ----------------------------------------------------------- listing -- */
typedef struct KvTableInfo KvTableInfo;
struct KvTableInfo {
  char *zName; int nName;  /* sqlite3_malloc'd */
  char zType[32];
  int bPersist;
  char *zDir;              /* sqlite3_malloc'd, NULL for anonymous */
  int64_t nRow;
  int64_t nVerRecord;      /* key version records (kv_version.h) */
  int64_t nVerBytes;       /* their estimated memory */
};
/* Every table of every store open in the process. */
int kv_engine_list(KvTableInfo **paInfo, int *pnInfo);
void kv_engine_list_free(KvTableInfo *aInfo, int nInfo);

/* Render a key for messages: "'abc'", "42", "x'00ff'" (sqlite3_malloc'd,
** NULL on OOM).  Text over 64 bytes and blobs over 32 bytes are shortened
** and marked: "'abc...'... (5000 bytes)". */
char *kv_key_describe(const uint8_t *aKey, int nKey);

/* For backends that confirm later: table zTab of record cid is durable. */
int kv_engine_confirm(KvEngine*, uint64_t cid, const char *zTab, int nTab);

#endif /* DEPOT_KV_ENGINE_H */
