/*
** kv.h -- the public interface of the KV engine (ext/kv/): everything the
** SQL surface in ext/ (kv_vtab.c, kv_func.c, kv_vfunc.c, kv_readset.c,
** kv_tables.c, kv_stats.c) and ext/depot.c use of it.  Every other header
** of ext/kv/ is private to that folder (the test suites may include them:
** they test the layers); the test hooks are in ext/kv/kv_test.h.
**
** Stores.  A store is a directory.  One KvEngine per store per process,
** shared by every connection and reference-counted by real path; an
** exclusive lock (<dir>/LOCK and the directory itself, flock) keeps other
** processes out.  The store holds the root WAL (<dir>/wal/, wal/wal.h) and
** the catalog file (<dir>/tables_meta): the committed contents of the
** internal table ".tables_meta" (name -> type, persistence, id, options).
** An anonymous store (zDir NULL) lives in memory only: no lock, no WAL, no
** catalog file, persistence=1 refused.  Table types are backends:
** "kv_memory" (in memory, persistent through the WAL), "kv_btree" (one
** B-tree data file per store) and "kv_log" (append-only log files per
** table).
**
** Transactions.  A KvRoot is one public transaction with one TID.  Its
** children are one per table it touched (first-touch order), plus the
** schema child (the catalog) when it creates or removes a table.  Children
** are internal: every operation goes through the root.  Each child binds
** to its table at first touch and takes a snapshot then: reads see that
** snapshot plus the root's own writes.
**
** Commit protocol: kv_root_prepare() checks conflicts and reserves (the
** root joins the store's list of prepared roots), then appends the WAL
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
** Ownership.  Handles (KvEngine, KvRoot, KvIter, KvVerReceipts) are
** released with their own function.  Text and buffers returned through
** char** / KvBuf / arrays are sqlite3_malloc'd and belong to the caller,
** who frees them (sqlite3_free, kv_buf_free, the matching *_free); byte
** pointers returned inside a struct (KvMapEntry, KvConflict) stay valid
** only as long as the text says.
**
** Errors.  SQLite result codes.  A function that takes char **pzErr sets
** *pzErr (which the caller initialises to NULL) to a sqlite3_malloc'd
** message when it fails, except for SQLITE_NOMEM, which may come without
** one.  A store whose commit failed after its WAL flush is stopped (its
** "failed state"): every later operation on it fails with that error and
** a message saying how to recover, until every connection closes it.
**
** Threads and locks.  A store may be used from any number of threads; a
** KvRoot or a KvIter by one thread at a time.  The locks are internal:
** the process registry mutex guards the list of open stores and their
** reference counts; each store's engine mutex guards its table list, its
** catalog, the commit sequence, the per-key revisions, the prepared roots
** and the key versions.  A callback the engine calls with a lock held says
** so, and must not call into the engine.
*/
#ifndef DEPOT_KV_H
#define DEPOT_KV_H

#include "sqlite3ext.h"
#include "wal/wal.h"
#include <stdint.h>

typedef struct KvEngine KvEngine;        /* an open store */
typedef struct KvRoot KvRoot;            /* a root transaction */
typedef struct KvIter KvIter;            /* a scan */

/* ================================================================ codec ==
** Encodings of KV table entries.
**
** Keys: an order-preserving byte encoding of an SQLite value, so that
** memcmp() order of two encoded keys equals the order in which SQLite's
** BINARY collation sorts the values of the key column:
**     numbers (INTEGER and REAL, compared numerically and exactly, as
**     sqlite3 does: 2 < 2.5 < 3, and 9007199254740993 > 9007199254740992.0)
**   < TEXT (memcmp of the UTF-8 bytes)
**   < BLOB (memcmp)
** Values that SQLite considers equal (integer 2 and real 2.0) encode to the
** same key bytes: they are the same key, as in a SQLite PRIMARY KEY.  NULL
** is not a key.  -0.0 is the key 0.  Every key encoding is self-delimiting
** (no encoding is a prefix of another), so an encoded key may be followed
** by more bytes in a composite key without changing the order; byte
** strings compare as memcmp() over the common length, then shorter first.
** The original numeric type of a key is kept in the entry's value bytes
** (below), so a key reads back with the type it was written with.
**
** Values: a self-describing encoding of any SQLite value (NULL, INTEGER,
** REAL, TEXT, BLOB) that round-trips type and bytes exactly, prefixed by
** one byte that records the numeric type of the key (integer or real) so
** the key can be returned with its original type.
**
** Limits: keys up to KV_MAX_KEY_BYTES of encoded input (text/blob bytes),
** values up to KV_MAX_VALUE_BYTES.  Larger input is SQLITE_TOOBIG with a
** message "kv: key is N bytes, the limit is 32768".
**
** Decoders never read outside the given buffer and return SQLITE_CORRUPT
** on malformed bytes (they are used on bytes read from disk and by
** fuzzers).  The encoders append to their output buffer and, on any
** error, leave it as it was.  Every function here is thread-safe.
*/
#define KV_MAX_KEY_BYTES    32768
#define KV_MAX_VALUE_BYTES  (16*1024*1024)

/* A growable byte buffer: a[0..n) holds the bytes, nAlloc is the room.
** Zero-initialise; the owner frees it with kv_buf_free. */
typedef struct KvBuf KvBuf;
struct KvBuf { uint8_t *a; int n; int nAlloc; };
/* Append n bytes at p.  SQLITE_OK, or SQLITE_NOMEM (the buffer as it
** was). */
int kv_buf_append(KvBuf*, const void *p, int n);
/* Room for n more bytes at a+n (n unchanged); SQLITE_OK/NOMEM. */
int kv_buf_reserve(KvBuf*, int n);
/* Empty the buffer (n=0), keeping its memory. */
void kv_buf_reset(KvBuf*);
/* Free the memory and zero the buffer (a zeroed buffer is fine). */
void kv_buf_free(KvBuf*);

/* Append the encoding of key pKey to pOut.  NULL -> SQLITE_CONSTRAINT
** ("kv: key must not be NULL"); too large -> SQLITE_TOOBIG; text that is
** not valid UTF-8 (NUL allowed) -> SQLITE_MISMATCH ("kv: text key is not
** valid UTF-8 ..."), so every key can be shown as JSON (receipts,
** kv_try_commit, kv_conflicts).  Messages go to *pzErr when pzErr is not
** NULL. */
int kv_key_encode(sqlite3_value *pKey, KvBuf *pOut, char **pzErr);
/* kv_key_encode without the UTF-8 check: encodes the key of a row that
** already exists (UPDATE, DELETE). */
int kv_key_encode_old(sqlite3_value *pKey, KvBuf *pOut, char **pzErr);
/* Encode a constraint operand for range/equality seeks: like
** kv_key_encode but never fails for size (a longer operand is encoded
** whole) and returns SQLITE_EMPTY for NULL (no key compares with NULL). */
int kv_key_encode_bound(sqlite3_value *pBound, KvBuf *pOut);
/* Like kv_key_encode for a key given as C values: eType SQLITE_INTEGER
** (i), SQLITE_FLOAT (r; NaN is NULL), SQLITE_TEXT or SQLITE_BLOB (z/n).
** Same errors. */
int kv_key_encode_c(int eType, int64_t i, double r, const void *z, int n,
                    KvBuf *pOut, char **pzErr);
/* Append the key of integer i (at most KV_KEY_INT_BYTES bytes); the same
** bytes as kv_key_encode_c(SQLITE_INTEGER, i, ...).  SQLITE_OK/NOMEM. */
#define KV_KEY_INT_BYTES 12
int kv_key_append_int(KvBuf *pOut, int64_t i);

/* Append the value-side encoding of (pKey's numeric kind, pVal) to pOut.
** pVal may be NULL-typed (or a NULL pointer: the value NULL); pKey may be
** a NULL pointer (no numeric kind recorded).  Too large -> SQLITE_TOOBIG
** ("kv: value is N bytes, the limit is 16777216"), message in *pzErr. */
int kv_value_encode(sqlite3_value *pKey, sqlite3_value *pVal, KvBuf *pOut,
                    char **pzErr);

/* Set the result of ctx to the key, given the encoded key and the encoded
** value stored with it (for the numeric kind).  With no value (nVal==0),
** or a value encoded with a non-numeric or NULL pKey, a numeric key comes
** back as an INTEGER when it is an int64 and as a REAL otherwise.
** Returns SQLITE_OK, SQLITE_NOMEM, or SQLITE_CORRUPT (malformed bytes, or
** a kind that contradicts the key); on error the result of ctx is that
** error. */
int kv_key_result(sqlite3_context *ctx, const uint8_t *aKey, int nKey,
                  const uint8_t *aVal, int nVal);
/* Set the result of ctx to the value stored in aVal/nVal (SQLITE_OK,
** SQLITE_CORRUPT or SQLITE_NOMEM, the result of ctx then being the
** error). */
int kv_value_result(sqlite3_context *ctx, const uint8_t *aVal, int nVal);
/* kv_value_result for a value whose buffer the caller vouches for with
** KV_ENTRY_* flags (kv_iter_step):
**   KV_ENTRY_STABLE  a text or blob goes to SQLite in place (SQLITE_STATIC):
**                    aVal must stay valid and unchanged until the
**                    statement that reads it is reset (SQLite may keep the
**                    pointer in a register or an aggregate,
**                    sqlite3VdbeMemCopy, beyond the row); without it the
**                    bytes are copied (SQLITE_TRANSIENT).
**   KV_ENTRY_TERM    aVal[nVal] is a NUL byte: a text with no interior NUL
**                    goes as a NUL-terminated string, which
**                    sqlite3_column_text then returns without a copy. */
int kv_value_result_entry(sqlite3_context *ctx, const uint8_t *aVal,
                          int nVal, int fEntry);
/* kv_value_result for a value with no NUL after its bytes (an entry
** without KV_ENTRY_TERM): a text with no interior NUL is copied with a
** terminator into *pScratch (reset first, its memory reused) and goes to
** SQLite as a NUL-terminated string (length -1, SQLITE_TRANSIENT), so
** SQLite's copy is terminated and sqlite3_column_text returns it without
** allocating; anything else (and a text when *pScratch cannot grow) goes
** as kv_value_result sends it.  *pScratch may be overwritten as soon as
** the call returns. */
int kv_value_result_unterm(sqlite3_context *ctx, const uint8_t *aVal,
                           int nVal, KvBuf *pScratch);
/* kv_value_result for a value pinned in a kv_map (kv_get_pin, map.h): a
** text or blob goes to SQLite in place, under a pin of its own that
** SQLite gives back through the destructor it is handed with the value
** (when the register that holds it is overwritten or its statement is
** reset), so the bytes outlive the cursor that read them (SQLite closes
** the cursor of a one-row UPDATE or DELETE before it uses the values);
** a text with no interior NUL goes NUL-terminated (the map keeps a NUL
** after every value).  Anything else is decoded and copied. */
int kv_value_result_pinned(sqlite3_context *ctx, const uint8_t *aVal,
                           int nVal);
/* The key as a new sqlite3_value (sqlite3_value_dup semantics: the caller
** frees it with sqlite3_value_free), or NULL with *pRc set
** (SQLITE_CORRUPT, SQLITE_NOMEM).  Serialised on a private in-memory
** connection opened on first use, so prefer kv_key_result on hot paths.
** The first call opens that connection, which runs the process's
** auto-extensions: do not make it while holding a lock that the
** extension's per-connection setup takes. */
sqlite3_value *kv_key_to_value(const uint8_t *aKey, int nKey,
                               const uint8_t *aVal, int nVal, int *pRc);

/* A key or value decoded to C: eType SQLITE_INTEGER (i), SQLITE_FLOAT
** (r), SQLITE_TEXT or SQLITE_BLOB (z/n: UTF-8 text is not NUL-terminated;
** z is never NULL for these, n may be 0) or SQLITE_NULL.  z points into
** the decoded bytes, or into zFree when a key's bytes held escapes; the
** owner calls kv_datum_clear.  No lock, no allocation but zFree. */
typedef struct KvDatum KvDatum;
struct KvDatum {
  int eType;
  int64_t i;
  double r;
  const uint8_t *z;
  int n;
  uint8_t *zFree;               /* sqlite3_malloc'd, or NULL */
};
/* Decode key aKey/nKey, with the value stored under it for the numeric
** kind (nVal==0: as kv_key_result decides).  Decode value aVal/nVal.
** SQLITE_OK, SQLITE_CORRUPT (malformed bytes), SQLITE_NOMEM; on error *p
** is an SQLITE_NULL datum that needs no kv_datum_clear. */
int kv_key_decode(const uint8_t *aKey, int nKey, const uint8_t *aVal,
                  int nVal, KvDatum *p);
int kv_value_decode(const uint8_t *aVal, int nVal, KvDatum *p);
/* Free what *p holds and make it an SQLITE_NULL datum. */
void kv_datum_clear(KvDatum *p);

/* Append key aKey/nKey as a JSON value to pOut: an integer, a real
** (integral reals print with ".0"; infinities as 9e999), a string, or
** {"hex":"<lowercase hex>"} for a blob.  SQLITE_OK, SQLITE_NOMEM or
** SQLITE_CORRUPT. */
int kv_key_json(const uint8_t *aKey, int nKey, KvBuf *pOut);
/* Append z/n (UTF-8) as a JSON string, quotes included.  SQLITE_OK or
** SQLITE_NOMEM. */
int kv_json_text(KvBuf *pOut, const uint8_t *z, int n);
/* The name of v's type for messages: "integer", "real", "text", "blob"
** or "NULL" (static text). */
const char *kv_value_type_name(sqlite3_value *v);

/* Derived data (ext/kv_derived.c).  kv_key_length: the length of the
** first key encoding in aKey/nKey (encodings are self-delimiting, so an
** index entry's key is the projected key followed by the source key), or
** -1 when the bytes do not start with a whole key.  kv_key_bind and
** kv_value_bind bind the decoded key (its numeric kind taken from the
** value aVal/nVal, as kv_key_result) or value to parameter iParam of
** pStmt: SQLITE_OK, SQLITE_CORRUPT, SQLITE_NOMEM or the bind's error.
** Text and blob bytes may be bound without a copy: aKey and aVal must
** stay unchanged until the statement is reset or rebound. */
int kv_key_length(const uint8_t *aKey, int nKey);
int kv_key_bind(sqlite3_stmt *pStmt, int iParam, const uint8_t *aKey,
                int nKey, const uint8_t *aVal, int nVal);
int kv_value_bind(sqlite3_stmt *pStmt, int iParam, const uint8_t *aVal,
                  int nVal);
/* Append the value encoding of text z/n, with the numeric kind byte of
** the value encoding aKind (NULL: none) - the counter rows of derived
** data.  SQLITE_OK or SQLITE_NOMEM.  kv_value_text: the text stored in
** aVal/nVal (not NUL-terminated, *pn bytes, pointing into aVal), or NULL
** when it holds no text. */
int kv_value_encode_text(const uint8_t *aKind, const char *z, int n,
                         KvBuf *pOut);
const char *kv_value_text(const uint8_t *aVal, int nVal, int *pn);
/* Append the value encoding of blob z/n (no numeric kind): queue
** records (ext/kv_queue.c).  SQLITE_OK or SQLITE_NOMEM. */
int kv_value_encode_blob(const void *z, int n, KvBuf *pOut);

/* Deadlines (per-entry TTL).  A value encoding may carry a deadline, unix
** ms on the clock kv_clock_ms(): every decoder above ignores it, so a
** read returns the same value with or without one.  An entry whose
** deadline is at or before now is expired: point reads (kv_get) and scans
** (kv_iter_open without KV_ITER_WITH_EXPIRED) skip it as if absent; it
** stays in the table until a delete removes it (the TTL sweeper of ext/).
** kv_value_deadline: 1 and *piDeadline when aVal/nVal carries one, else 0.
** kv_value_expired: it carries one and it is <= iNow.
** kv_value_set_deadline: give the value in *pVal a deadline (bDeadline)
** or remove it, in place (SQLITE_OK, SQLITE_NOMEM, SQLITE_CORRUPT for a
** buffer that holds no value).
** kv_value_same_payload: the two encodings hold the same value, ignoring
** the key's numeric kind byte and any deadline. */
int kv_value_deadline(const uint8_t *aVal, int nVal, int64_t *piDeadline);
int kv_value_expired(const uint8_t *aVal, int nVal, int64_t iNow);
int kv_value_set_deadline(KvBuf *pVal, int bDeadline, int64_t iDeadline);
int kv_value_same_payload(const uint8_t *aA, int nA, const uint8_t *aB,
                          int nB);

/* Render a key for messages: "'abc'", "42", "x'00ff'" (sqlite3_malloc'd;
** the caller frees it; NULL on OOM).  Text over 64 bytes and blobs over
** 32 bytes are shortened and marked: "'abc...'... (5000 bytes)". */
char *kv_key_describe(const uint8_t *aKey, int nKey);

/* One entry of a scan (kv_iter_entry): key bytes -> value bytes (both
** encodings above), the commit sequence number that wrote it, and whether
** it is a tombstone (a delete; scans never return one).  The pointers stay
** valid until the scan moves or closes. */
typedef struct KvMapEntry KvMapEntry;
struct KvMapEntry {
  const uint8_t *aKey; int nKey;
  const uint8_t *aVal; int nVal;
  uint64_t rev;
  int bTomb;
};

/* =============================================================== stores == */
#define KV_META_TABLE      ".tables_meta"
#define KV_MAX_NAME_BYTES  4096

/* Open (create if needed) the store in zDir, or a new anonymous store when
** zDir is NULL.  Alone, replays the WAL; when other processes have it
** open, joins them (engine.c, "Sharing a store").  *ppEng holds one
** reference, which the caller drops with kv_engine_unref.  Errors:
** SQLITE_BUSY "kv: store <dir> is locked by another process (pid N)..."
** (the pid the holder wrote into <dir>/LOCK) when the holder cannot share
** it, SQLITE_CANTOPEN, SQLITE_CORRUPT, I/O codes; *pzErr is set.  Takes
** the registry mutex. */
int kv_engine_open(const char *zDir, KvEngine **ppEng, char **pzErr);
/* Open the existing store in zDir to read it.  Nothing of the store is
** created or changed (only read locks are taken, none without a LOCK
** file), and every write fails with SQLITE_READONLY at prepare.  When a
** writer process has it open, this process joins the others as a reader,
** asking an alone holder to share the store, and reads their commits;
** with none, it reads the store as it is, with the WAL records its
** tables' files lack replayed in memory, as one snapshot until a writer
** opens the store, and from its next snapshot on reads that writer's
** commits.  A read-write store object of zDir in this process is reused
** instead.  Errors: SQLITE_CANTOPEN (no such directory, not a store, a
** kv_log table missing a record only the WAL holds), SQLITE_BUSY as
** kv_engine_open, I/O codes; *pzErr is set. */
int kv_engine_open_readonly(const char *zDir, KvEngine **ppEng,
                            char **pzErr);
/* Add a reference to p (the caller drops it with kv_engine_unref); returns
** p.  Takes the registry mutex. */
KvEngine *kv_engine_ref(KvEngine *p);
/* Drop a reference; the last one closes the store (its tables first, then
** the WAL, then the lock).  NULL-safe.  Takes the registry mutex. */
void kv_engine_unref(KvEngine *p);
/* Real path of the store directory (owned by the store, valid while the
** caller holds a reference), or NULL for an anonymous store. */
const char *kv_engine_dir(KvEngine *p);
/* 1 once other processes share store p (it then stays shared while open
** in this process), else 0.  Relaxed read, no lock. */
int kv_engine_shared(KvEngine *p);

/* The root WAL's rotation size and retirement mode of store p, as open in
** this process (wal_get_config / wal_set_config: not stored, a reopened
** store starts from the defaults).  Both return 0, and change nothing,
** when the store has no WAL (an anonymous, in-memory store); else 1. */
int kv_engine_wal_config(KvEngine *p, WalConfig *pCfg);
int kv_engine_set_wal_config(KvEngine *p, const WalConfig *pCfg);

/* Call xEach(p, pCtx) on every store open in the process, in registry
** order, each with a reference held for the call (taken under the
** registry mutex, which is not held while xEach runs: it may use the
** store freely, open and close stores).  Stops at the first result other
** than SQLITE_OK and returns it; SQLITE_NOMEM when the list cannot be
** copied. */
int kv_engine_foreach(int (*xEach)(KvEngine *p, void *pCtx), void *pCtx);

/* The root WAL counters of store p (wal_stats): 1 with *pSt set, or 0
** with *pSt zeroed when the store has no WAL (an anonymous store). */
int kv_engine_wal_stats(KvEngine *p, WalStats *pSt);

/* Counters of one table for kv_stats (all 0 when a backend has no such
** thing). */
typedef struct KvBackendStats KvBackendStats;
struct KvBackendStats {
  int64_t nRow;            /* live rows */
  int64_t nByte;           /* bytes stored for the table */
  int64_t nOverlay;        /* committed entries not yet in the data file */
  int64_t nPending;        /* WAL records of the table not yet confirmed */
  int64_t nError;          /* collector write/sync failures since open */
  char zError[400];        /* the last such failure ("" if none) */
  int64_t nSweepPass;      /* TTL sweep batches committed since open */
  int64_t nSwept;          /* rows they removed */
};
/* Call xTable once per live table of store p, oldest first, with its name,
** its type and its counters.  bCount=0 lets a backend leave nRow and nByte
** 0 when they would cost a walk of the table (kv_btree).  The strings and
** the counters are valid during the call only.  xTable runs without the
** engine mutex, on a table that stays open for the call; its first result
** other than SQLITE_OK ends the walk and is returned.  SQLITE_NOMEM when
** the table list cannot be copied. */
int kv_engine_table_stats(KvEngine *p, int bCount,
                          int (*xTable)(void *pCtx, const char *zName,
                                        const char *zType,
                                        const KvBackendStats *pSt),
                          void *pCtx);

/* One table of an open store, for kv_tables and kv_metrics. */
typedef struct KvTableInfo KvTableInfo;
struct KvTableInfo {
  char *zName; int nName;  /* sqlite3_malloc'd */
  char zType[32];
  int bPersist;
  char *zDir;              /* sqlite3_malloc'd, NULL for anonymous */
  int64_t nRow;
  int64_t nVerRecord;      /* key version records */
  int64_t nVerBytes;       /* their estimated memory */
};
/* Every table of every store open in the process: *paInfo (nInfo
** entries) belongs to the caller, who frees it with kv_engine_list_free.
** SQLITE_OK or SQLITE_NOMEM (then *paInfo is NULL).  Takes the registry
** mutex and each store's engine mutex in turn. */
int kv_engine_list(KvTableInfo **paInfo, int *pnInfo);
void kv_engine_list_free(KvTableInfo *aInfo, int nInfo);

/* 1 if a kv_btree table's options JSON zOptions (as stored in the catalog;
** NULL: none) asks for accelerated_repair, else 0. */
int kv_btree_accel_option(const char *zOptions);

/* =============================================================== tables == */

/* SQLITE_OK if z/n is a usable table name: 1..4096 bytes of valid UTF-8,
** not ".tables_meta".  Else SQLITE_ERROR with *pzErr. */
int kv_name_check(const char *z, int n, char **pzErr);

/* A table's catalog entry.  The struct belongs to whoever filled it; it
** owns zOptions, which kv_meta_clear frees (and zeroes the struct). */
typedef struct KvMeta KvMeta;
struct KvMeta {
  char zType[32];          /* "kv_memory", "kv_btree", "kv_log" */
  int bPersist;
  uint64_t iId;            /* stable id; backends name files after it */
  char *zOptions;          /* sqlite3_malloc'd JSON text or NULL */
};
void kv_meta_clear(KvMeta*);

/* The catalog entry of zTab as root pRoot sees it (its own creates and
** removes included), without registering a read.  pRoot may be NULL (the
** latest committed catalog).  *pbFound=0 when absent.  *pMeta is zeroed
** first and then belongs to the caller, who clears it with kv_meta_clear
** (always safe). */
int kv_table_meta(KvEngine*, KvRoot *pRoot, const char *zTab, int nTab,
                  KvMeta *pMeta, int *pbFound);

/* Create zTab (schema child of the root) unless it exists: *pbCreated=1
** if created, 0 if it existed with the same type and persistence (an
** error otherwise).  Must precede every write and remove in the root.
** The new table is visible to this root at once; nothing is durable or
** visible to others before commit, and a rollback leaves nothing.  In a
** store shared by several processes the table's id is chosen again at
** prepare, under the writer lock, and a kv_memory table with
** persistence=1 is refused (SQLITE_ERROR). */
int kv_create_table(KvRoot*, const char *zTab, int nTab, const char *zType,
                    int bPersist, const char *zOptions, int *pbCreated,
                    char **pzErr);
/* Remove zTab at commit.  The root must do nothing else but remove
** tables and set options (kv_table_set_options).  Durable when
** the commit returns (the WAL record), then in the catalog file.  The
** commit fails with SQLITE_BUSY naming the gid, removing nothing, while a
** named prepared transaction in doubt writes or reads zTab. */
int kv_remove_table(KvRoot*, const char *zTab, int nTab, char **pzErr);

/* Rewrite the catalog entry of live table zTab with options zOptions
** (JSON text, NULL: none) at commit, keeping its type, persistence and
** id: derived data records its carriers this way.  Any transaction bound
** to zTab before this commits then fails its prepare with a conflict
** (the table was redefined), so a writer never misses a carrier declared
** concurrently.  May follow kv_remove_table and precede or follow the
** root's data writes.  Errors: no such table, a finished root. */
int kv_table_set_options(KvRoot*, const char *zTab, int nTab,
                         const char *zOptions, char **pzErr);
/* The commit sequence number of the last published catalog change of
** the store (relaxed atomic read): derived data caches what it read from
** the catalog until this moves. */
uint64_t kv_engine_catalog_seq(KvEngine*);

/* ================================================================ roots == */
#define KV_ROOT_ACTIVE   0
#define KV_ROOT_PREPARED 1
#define KV_ROOT_FAILED   2   /* rolled back after an error; only free it */
#define KV_ROOT_DONE     3   /* committed or rolled back */

/* Begin a root transaction (new TID) on store pEng.  *ppRoot belongs to
** the caller, who frees it with kv_root_free; it holds a reference on the
** store.  SQLITE_OK or SQLITE_NOMEM. */
int kv_root_begin(KvEngine *pEng, KvRoot **ppRoot);
/* The store of the root (the root's reference: valid while it lives). */
KvEngine *kv_root_engine(KvRoot*);
/* The root's KV_ROOT_* state. */
int kv_root_state(KvRoot*);
/* Name the root in its error messages as "transaction handle iHandle", the
** number kv_begin() gave the caller, instead of "transaction <tid>" (the
** store-wide id, which callers never see).  iHandle>0. */
void kv_root_set_handle(KvRoot*, int64_t iHandle);
/* Roll back first if still active or prepared, then free.  NULL-safe. */
void kv_root_free(KvRoot*);
/* kv_root_begin and kv_root_free for a caller that begins roots one after
** another (a connection's SQL transactions): kv_root_free_spare keeps the
** freed root's memory in *ppSpare when that is empty (else frees it), and
** kv_root_begin_spare begins the next root there, so a transaction
** allocates no root.  The spare holds nothing else (no store reference);
** free it with sqlite3_free. */
int kv_root_begin_spare(KvEngine *pEng, KvRoot **ppSpare, KvRoot **ppRoot);
void kv_root_free_spare(KvRoot*, KvRoot **ppSpare);

/* Durability of the root's commit (its prepare, which writes the WAL
** record).  KV_SYNC_FULL (the default): the record is flushed
** (fdatasync) before the prepare returns.  KV_SYNC_NORMAL: it is written
** to the WAL file, so it survives a crash of the process, and flushed
** later (wal.h, wal_append_sync): by a later FULL commit of the store, by
** the kv_btree or kv_log collector before it writes the record's effects
** into the table's data file, at the first commit that finds the oldest
** unflushed record older than WAL_SYNC_MAX_MS or WAL_SYNC_MAX_BYTES
** unflushed, when a segment is sealed, and at close.  A commit that
** creates or removes a table, or writes a kv_log table and another
** persistent table, is flushed anyway.  Any other value is KV_SYNC_FULL. */
#define KV_SYNC_NORMAL 1
#define KV_SYNC_FULL   2
void kv_root_set_sync(KvRoot*, int eSync);
/* How long the prepare of root p waits for the store's writer lock when
** other processes share the store (ms, default 5000): then SQLITE_BUSY.
** The SQL layer passes the connection's busy timeout. */
void kv_root_set_busy_timeout(KvRoot *p, int ms);

/* Why a root writes.  KV_ORIGIN_APP (0, the default): the application.
** KV_ORIGIN_EXPIRE: the removal of rows whose deadline passed, so derived
** data (change streams) can tell an expiry from a delete. */
#define KV_ORIGIN_APP    0
#define KV_ORIGIN_EXPIRE 1
void kv_root_set_origin(KvRoot*, int eOrigin);
int kv_root_origin(KvRoot*);
/* The root's transaction id (unique among the store's transactions of
** this process; change streams record it). */
uint64_t kv_root_tid(KvRoot*);

/* The clock of deadlines (TTL, queue leases and delays), unix ms
** (clock.c).  The wall clock unless set for a test: KV_CLOCK_OFFSET adds
** iMs to the wall clock, KV_CLOCK_FIXED stops it at iMs, KV_CLOCK_WALL
** restores it.  Process-wide.  kv_clock_set returns SQLITE_MISUSE for an
** unknown mode; kv_clock_mode returns the mode in force. */
#define KV_CLOCK_WALL   0
#define KV_CLOCK_OFFSET 1
#define KV_CLOCK_FIXED  2
int64_t kv_clock_ms(void);
int kv_clock_set(int eMode, int64_t iMs);
int kv_clock_mode(void);

/* The TTL sweeper of a store (expire.c).  The engine hides expired
** entries ("Deadlines") but removing them is ext/'s work (derived data
** must hear each removal), so the pass is a callback: xPass(pEng, pArg)
** runs on the store's sweeper thread every iIntervalMs ms (and at once
** after kv_engine_sweeper_wake), holding a reference on the store for the
** pass only; it removes expired rows through ordinary roots.  Closing the
** store stops the thread before the tables flush: no pass runs after,
** and a running pass delays the close (it holds a reference).  xFree(pArg)
** runs when the sweeper ends.  One sweeper per store: starting another is
** a no-op that frees pArg.  Errors: SQLITE_NOMEM, SQLITE_ERROR (no
** thread), with pArg freed.  kv_table_sweep_note adds to the sweep
** counters of table zTab (kv_stats: sweep_passes, swept_rows). */
typedef int (*KvSweepFn)(KvEngine*, void *pArg);
int kv_engine_sweeper_start(KvEngine*, KvSweepFn xPass, void *pArg,
                            void (*xFree)(void*), int64_t iIntervalMs,
                            char **pzErr);
int kv_engine_sweeper_running(KvEngine*);
void kv_engine_sweeper_wake(KvEngine*);
void kv_table_sweep_note(KvEngine*, const char *zTab, int nTab,
                         int64_t nPass, int64_t nRows);
/* The rows of table zTab past their deadline and not yet removed: a scan
** of the table when its options declare a deadline, else 0 (also for no
** such table and a read error). */
int64_t kv_table_expired_count(KvEngine*, const char *zTab, int nTab);

/* Protocols of a root.  A root starts with none; kv_get with a root,
** kv_root_prepare and kv_root_commit of an active root select ORDINARY;
** kv_version_prepare selects VERSIONED, and an operation of one protocol
** on a root of the other fails with SQLITE_MISUSE and a message.
** kv_root_protocol_get returns the root's KV_PROTO_*. */
#define KV_PROTO_NONE       0
#define KV_PROTO_ORDINARY   1
#define KV_PROTO_VERSIONED  2
int kv_root_protocol_get(KvRoot*);

/* Point read of key aKey in table zTab: copies the value bytes into *pVal
** (reset first; the caller owns the buffer) and sets *pbFound.  With
** pRoot, sees the root's snapshot and writes and registers a Read; with
** pRoot NULL (pEng given), reads the latest committed state and registers
** nothing.  An expired entry (kv.h "Deadlines") is not found.  Errors: "kv: no such table", a finished root (SQLITE_MISUSE),
** the store's failed state, read errors of the backend. */
int kv_get(KvEngine*, KvRoot*, const char *zTab, int nTab,
           const uint8_t *aKey, int nKey, KvBuf *pVal, int *pbFound,
           char **pzErr);
/* kv_get, except that a read with no root of a table whose committed data
** is a kv_map in memory (kv_memory) copies nothing: the value's bytes are
** pinned where they are (map.h) and handed over in *paPin / *pnPin, a NUL
** after them, valid until the caller's kv_get_unpin(*paPin), from any
** thread; *pVal is then left as it was.  Otherwise *paPin is NULL, *pnPin
** 0, and the value is in *pVal as kv_get leaves it. */
int kv_get_pin(KvEngine*, KvRoot*, const char *zTab, int nTab,
               const uint8_t *aKey, int nKey, KvBuf *pVal,
               const uint8_t **paPin, int *pnPin, int *pbFound,
               char **pzErr);
void kv_get_unpin(const uint8_t *aPin);
/* Like kv_get with a root, but neutral: registers no read and selects no
** protocol, and sees an expired entry (kv.h "Deadlines") as it is stored:
** derived data and the TTL sweeper follow the stored rows.  A caller that
** shows the value to the application checks kv_value_expired itself. */
int kv_peek(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
            int nKey, KvBuf *pVal, int *pbFound, char **pzErr);
/* Write (aVal bytes) or delete key in the root's write set.  Nothing is
** durable or visible to others until commit.  The bytes are copied. */
int kv_put(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
           int nKey, const uint8_t *aVal, int nVal, char **pzErr);
int kv_del(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
           int nKey, char **pzErr);

/* Fix the root's view of table zTab now: bind the table if the root has
** not touched it yet (its snapshot is taken here), or take the snapshot a
** first write put off.  Later point reads and scans of zTab through the
** root see that snapshot plus the root's writes.  Registers no read and
** selects no protocol.  Errors as kv_get's, and SQLITE_BUSY_SNAPSHOT when
** a table the root wrote was removed since. */
int kv_root_bind(KvRoot*, const char *zTab, int nTab, char **pzErr);
/* Bind n tables (at most KV_BIND_SET_MAX) the root has not touched at
** one point: every snapshot is taken in one hold of the engine mutex, so
** no commit falls between them (separate kv_root_bind calls may each see
** a different last commit).  When a table is already bound, or created or
** removed by the root, or missing, each is bound as kv_root_bind does
** (and fails as it does). */
#define KV_BIND_SET_MAX 8
int kv_root_bind_set(KvRoot*, int n, const char *const *azTab,
                     const int *anTab, char **pzErr);
/* Bind the root to table zTab as a first write does (no snapshot is
** taken before the first read), so that a catalog change of zTab
** committed from now on makes the root's prepare fail, and (bWatch)
** make that check apply even if the root never reads or writes zTab.
** Registers no read and selects no protocol.  Errors as kv_put's. */
int kv_root_touch(KvRoot*, const char *zTab, int nTab, int bWatch,
                  char **pzErr);
/* Register a read of key aKey in table zTab (as kv_get does, without
** reading or selecting a protocol): the root's prepare fails if the key
** is committed by another transaction after the root's snapshot of
** zTab. */
int kv_root_note_read(KvRoot*, const char *zTab, int nTab,
                      const uint8_t *aKey, int nKey, char **pzErr);
/* Register a read of every key of zTab from aLo to aHi (both included;
** nHi==0: no upper bound), present or not: the root's prepare fails if
** another transaction commits (or holds prepared) a write of any key in
** that range after the root's snapshot of zTab, and a transaction that
** writes into the range while this root is prepared fails its own
** prepare.  Used by the batches that build derived data. */
int kv_root_note_range(KvRoot*, const char *zTab, int nTab,
                       const uint8_t *aLo, int nLo, const uint8_t *aHi,
                       int nHi, char **pzErr);
/* Counters (derived data).  Add (nCount, the sum iSum + rSum; bReal: the
** sum is real) to the row aKey of counter table zTab at commit.  The row's
** value is the text {"count":N,"sum":S} (S an integer until a real is
** added); a row whose count reaches 0 or less is deleted.  aKind is the
** first byte of a value encoding of the key (its numeric kind; NULL:
** none).  Deltas commute: two transactions adding to one counter row do
** not conflict.  Prepare turns the root's deltas into ordinary writes of
** the resulting rows, computed from the latest published rows; a prepare
** whose counter row another prepared transaction is writing waits for that
** one to finish (at most KV_COUNTER_WAIT_MS, then it fails with
** SQLITE_BUSY_SNAPSHOT as a conflict), so the WAL records of one counter
** row follow their commit order and each holds the row's value after it.
** Reads through the root do not see its own deltas before commit. */
#define KV_COUNTER_WAIT_MS 5000
int kv_counter_add(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
                   int nKey, const uint8_t *aKind, int64_t nCount,
                   int64_t iSum, double rSum, int bReal, char **pzErr);
/* Non-zero if the root has a write (put or delete) in any table, or a
** create or remove. */
int kv_root_has_writes(KvRoot*);

/* Prepare: conflict check + reservation, then WAL append and flush.  On
** SQLITE_OK the transaction's persistent writes are durable in the WAL (a
** crash from here on replays them).  On error the root is rolled back
** (state FAILED); a conflict is SQLITE_BUSY_SNAPSHOT with a message naming
** the tables and keys, and kv_root_conflicts lists them. */
int kv_root_prepare(KvRoot*, char **pzErr);
/* Take back a successful prepare, for a transaction that goes on: the
** WAL record is withdrawn with a durable abort record (as by a rollback),
** the reservations are released, and the root is active again with its
** snapshots, reads and writes, so a later prepare checks them anew.  Does
** nothing unless the root is prepared.  If the abort record cannot be
** made durable the store is stopped (see kv_root_rollback_err), the root
** is finished and that error is returned. */
int kv_root_unprepare(KvRoot*, char **pzErr);

/* The conflicts found by the last failed prepare (sorted, deduplicated):
** *paConflict points at n entries owned by the root, valid until it is
** freed; returns n. */
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
** logged: the WAL record then stays and is replayed at the next open).
** A failed publication stops the store (its failed state). */
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

/* Savepoints of the write sets, numbered like SQLite's (0 outermost).
** kv_root_savepoint: SQLITE_OK or SQLITE_NOMEM; a no-op unless the root is
** active.  kv_root_rollback_to of a level the root has no savepoint for
** (one opened before the root began, or -1, SQLite's number for the
** SAVEPOINT that began the transaction) undoes every write of the root. */
int kv_root_savepoint(KvRoot*, int iLevel);
void kv_root_release(KvRoot*, int iLevel);
void kv_root_rollback_to(KvRoot*, int iLevel);

/* ========================================================== conditions ==
** A root whose commit another resource decides: the database file of the
** SQL transaction it belongs to (ext/kv_coord.c).  Before its prepare,
** kv_root_set_condition() names the coordinator (zCoord, the URI that
** opens it again) and a marker id; the prepare then logs the root's WAL
** record as conditional on that marker.  The coordinator writes the
** marker in its own transaction, after the prepare, so the marker exists
** exactly when that transaction committed.  When a store opens and
** replays such a record, the engine asks the probe (kv_set_condition
** _probe, set once by ext/) whether the marker exists: yes, the record is
** applied; no, it is withdrawn (an abort record) and never applied.  A
** root with nothing to log writes no record and so depends on nothing. */
#define KV_COND_MAX_BYTES 4096      /* longest coordinator URI */
/* Set (or, zCoord NULL, clear) the condition of an active root; it holds
** for every later prepare.  SQLITE_TOOBIG for a URI over
** KV_COND_MAX_BYTES, SQLITE_NOMEM, SQLITE_MISUSE unless active. */
int kv_root_set_condition(KvRoot*, const char *zCoord, int64_t iMarker);
/* The CID of the root's WAL record after a successful prepare, 0 when it
** logged nothing. */
uint64_t kv_root_cid(KvRoot*);
/* The probe: does coordinator zCoord hold marker iMarker written for WAL
** record cid?  Sets *pbHeld and returns SQLITE_OK, or an error (with
** *pzErr) that fails the store's open.  Called during kv_engine_open with
** the registry mutex held: it must not open a store. */
typedef int (*KvCondProbe)(const char *zCoord, int64_t iMarker,
                           uint64_t cid, int *pbHeld, char **pzErr);
void kv_set_condition_probe(KvCondProbe xProbe);
/* The lowest CID a replay of store p could still hand out (records below
** it are in retired segments); 0 for a store without a WAL. */
uint64_t kv_engine_replay_floor(KvEngine *p);

/* ============================================== named prepared roots ==
** An external coordinator's participant (XA style).  kv_root_prepare_named
** prepares a root under a global id: its WAL record names the gid and
** carries its read reservations too, and waits, unconfirmed (its WAL
** segment never retires), until the transaction is resolved.  The store
** takes the root over: it stays prepared, in doubt, with its keys
** reserved, across restarts (the replay restores it and applies nothing of
** it), until kv_prepared_resolve commits or rolls it back, from any
** connection.  The decision is written to <store>/prepared.log and flushed
** before it takes effect, and is remembered for KV_RESOLVED_KEEP_MS after
** it: resolving again the same way is a no-op, the other way an error,
** and the gid cannot be used again meanwhile.  Older decisions are
** forgotten at open and, while the store runs, whenever prepared.log
** reaches max(2 x the entries its last trim kept, KV_RESOLVED_TRIM_MIN)
** entries (rewritten atomically, resolve.c); so it holds at most
** max(2D, KV_RESOLVED_TRIM_MIN) entries of at most 17+KV_GID_MAX_BYTES
** bytes, D the most decisions taken within one KV_RESOLVED_KEEP_MS.
** Writes to tables with persistence=0 are not logged, so a restart loses
** them as it loses those tables' contents. */
#define KV_GID_MAX_BYTES     200
#define KV_RESOLVED_KEEP_MS  ((int64_t)24*3600*1000)
#define KV_RESOLVED_TRIM_MIN 1024
/* Prepare active root *ppRoot as gid zGid/nGid (1..KV_GID_MAX_BYTES bytes
** of UTF-8, no NUL).  On SQLITE_OK the store owns the root and *ppRoot is
** NULL.  Errors that change nothing (the root stays active): a bad gid, a
** gid in doubt or remembered in the store (SQLITE_CONSTRAINT), a root
** that creates or removes tables, is versioned, not active, or on a store
** without a WAL (SQLITE_MISUSE).  A conflict or a WAL failure fails the
** root as kv_root_prepare does. */
int kv_root_prepare_named(KvRoot **ppRoot, const char *zGid, int nGid,
                          char **pzErr);
/* Commit (bCommit) or roll back the in-doubt root gid of store p.
** *pbDone: 1 when this call resolved it, 0 when it was resolved that way
** before.  Errors: no such gid (SQLITE_NOTFOUND), resolved the other way
** (SQLITE_CONSTRAINT), a resolution of it under way (SQLITE_BUSY), and
** the errors of writing the decision (it then stays in doubt) or of the
** commit itself. */
int kv_prepared_resolve(KvEngine *p, const char *zGid, int nGid, int bCommit,
                        int *pbDone, char **pzErr);
/* The in-doubt roots of store p, oldest prepare first: *paOut (n entries)
** belongs to the caller, freed with kv_prepared_list_free. */
typedef struct KvPreparedInfo KvPreparedInfo;
struct KvPreparedInfo {
  char *zGid; int nGid;
  uint64_t tid;
  int64_t iPreparedMs;     /* unix ms */
  char *zTables;           /* JSON array of the tables it writes or read */
  int64_t nKey;            /* keys it writes */
};
int kv_prepared_list(KvEngine *p, KvPreparedInfo **paOut, int *pnOut);
void kv_prepared_list_free(KvPreparedInfo *a, int n);

/* ============================================================ iterators ==
** A scan of zTab between optional bounds (encoded keys), as of now (pRoot
** NULL) or as the root sees it: its snapshot plus its writes as they were
** when the scan opened.  Registers no reads.  Later writes, by anyone, are
** never seen.  *ppIter belongs to the caller (kv_iter_close). */
typedef struct KvBound KvBound;
struct KvBound {
  const uint8_t *aKey; int nKey;
  int bIncl;               /* include aKey itself */
};
/* bDesc holds flags: KV_ITER_DESC (1: reverse key order) and
** KV_ITER_WITH_EXPIRED (also entries whose deadline has passed, which a
** scan skips otherwise: the TTL sweeper, derived-data builds and checks,
** which follow the stored rows). */
#define KV_ITER_DESC          0x01
#define KV_ITER_WITH_EXPIRED  0x02
int kv_iter_open(KvEngine*, KvRoot*, const char *zTab, int nTab,
                 const KvBound *pLo, const KvBound *pHi, int bDesc,
                 KvIter **ppIter, char **pzErr);
/* Non-zero once the scan has no current entry. */
int kv_iter_eof(KvIter*);
/* Step to the next entry (in key order, or reverse with bDesc). */
void kv_iter_next(KvIter*);
/* SQLITE_OK, or the read error that ended the scan early (it is then at
** EOF); *pzErr gets the message (sqlite3_malloc'd; the caller frees it). */
int kv_iter_error(KvIter*, char **pzErr);
/* The current entry (see KvMapEntry for how long its bytes live). */
void kv_iter_entry(KvIter*, KvMapEntry *pOut);
/* The current entry in place, without a copy (valid as kv_iter_entry's,
** until the scan moves or closes). */
const KvMapEntry *kv_iter_current(KvIter*);
/* Release the scan p holds (snapshot, cursors, table) but keep p and its
** buffers for kv_iter_reopen; a released p is at its end.  NULL-safe. */
void kv_iter_release(KvIter*);
/* kv_iter_open into an existing iterator (its scan, if any, is released
** first), without allocating it again; on error p holds no scan. */
int kv_iter_reopen(KvIter *p, KvEngine*, KvRoot*, const char *zTab,
                   int nTab, const KvBound *pLo, const KvBound *pHi,
                   int bDesc, char **pzErr);
/* Whether the current entry's bytes stay valid and unchanged until the
** iterator is released or closed (not only until it moves): entries of
** the committed data of a backend whose versions are immutable in memory
** (KvBackend.fEntries); never an entry of the root's write set. */
int kv_iter_stable(KvIter*);
/* What a scan promises about its current entry (kv_iter_landed,
** kv_iter_step), a set of flags:
**   KV_ENTRY_STABLE  the bytes stay valid and unchanged until the iterator
**                    is released or closed (kv_iter_stable);
**   KV_ENTRY_TERM    a NUL byte follows the value bytes (aVal[nVal]==0,
**                    not counted in nVal) for as long as they are valid:
**                    entries of the root's write set, and of a backend
**                    that says so (KvBackend.fEntries).
** Without KV_ENTRY_TERM nothing may be assumed about aVal[nVal]. */
#define KV_ENTRY_STABLE 0x01
#define KV_ENTRY_TERM   0x02
/* kv_iter_eof, kv_iter_current and the current entry's KV_ENTRY_* flags
** in one call (a scan asks after every step): the current entry in place
** and *pfEntry, or NULL at EOF. */
const KvMapEntry *kv_iter_landed(KvIter*, int *pfEntry);
/* kv_iter_next and kv_iter_landed in one call: the next entry in place
** and *pfEntry, or NULL at EOF (then kv_iter_error says why). */
const KvMapEntry *kv_iter_step(KvIter*, int *pfEntry);
/* Close the scan and release its snapshot.  NULL-safe. */
void kv_iter_close(KvIter*);

/* ================================================================ hooks ==
** Write hooks: C callbacks that observe every applied mutation of one
** table of an open store (xWrite) and its rows at registration (xInit).
** They are the low-level tool, for derived state kept outside the store
** (an in-memory index, a metric, a notification); a rule that must be
** able to refuse a write belongs in the transaction, before its prepare.
**
** A hook cannot refuse a write: xWrite returns nothing and runs after the
** commit is published, when its rows are already visible to every new
** snapshot.  It also runs after the commit is durable: kv_root_prepare
** appended and flushed the root WAL record of the persistent writes
** before the publication, so a failed WAL append or flush fails the
** prepare, the root is rolled back, and no hook hears of it.  Rolled-back
** roots, roots that lose a conflict, and a publication that fails (the
** store then stops, kv.h "Errors") call no hook; the stopped store's WAL
** record is replayed at the next open, where the hooks registered then
** see its rows in their xInit pass.  kv_btree and kv_log tables write
** their data files later, in their collectors; a failure there does not
** undo the commit (its WAL record stays and is replayed), so what a hook
** saw stays true.
**
** xWrite(pArg, key, old, new): once per key of the root's write set in
** the table, in key order; new (aNew/nNew) is the value written, aNew NULL
** for a delete.  With KV_HOOK_NEEDS_OLD_VALUE old is the committed value
** the commit replaced (aOld NULL: the key was absent) and the delete of an
** absent key is not reported; without it aOld is always NULL and such a
** delete comes with both NULL.  Rewriting a key's value with the same
** value is reported.  Keys and values are the encodings of this header
** (kv_key_to_value, kv_value_result decode them), valid during the call.
**
** Order and threads.  Commits reach the hooks in commit order, which is
** their publication order, one sequence per store (a commit's tables in
** the order the root first touched them).  The calls of one store are
** made one at a time, with no engine lock held, on a committing thread:
** normally the one whose commit it is, which waits in kv_root_commit until
** its commit (and every earlier one) is delivered; while one thread
** delivers, other committers leave their writes to it and wait.  So when
** kv_root_commit returns, the store's hooks have seen that commit.  A
** callback may read the store (kv_get with no root, scans, its own roots)
** and sees the state with the commit applied, or a later one.  It may
** write to the store through a root of its own: that commit does not wait
** for its own delivery, which follows the current callback in commit order
** (a hook that reacts to its own writes must stop itself).  It must not
** call kv_hook_register (SQLITE_MISUSE), nor wait for anything a
** committer of the store may hold while it waits for delivery (its SQLite
** connection, a lock of the caller's around kv_root_commit).
**
** xInit(pArg, key, value), with KV_HOOK_NEEDS_INIT: once per live key,
** with its value, over the committed state of the table at registration;
** xWrite then reports exactly the commits published after that state, so
** xInit and xWrite together see every mutation once and an additive
** consumer is never counted twice.  A store is opened, and its WAL
** replayed, before a hook can be registered on it: replay calls no hook,
** and a key that several replayed records rewrote gets one xInit, with
** its final value.  Hooks do not outlive the process: it registers them
** after its kv_engine_open, and xInit rebuilds from the recovered rows.
** While an xInit pass runs, commits with hooks to call wait for it.
**
** The table.  A hook is bound to the table object its name gives at
** registration.  When that table is removed (kv_remove_table, which is
** also DROP TABLE of a KV table), the hook gets xRemoved, if given, once,
** in commit order, then no call; the rows that go with the table get no
** xWrite, and a table created later under the name is another one, which
** the hook does not follow.  kv_memory, kv_btree and kv_log tables, on
** disk or in an anonymous store, persistent or not, behave alike.
**
** Cost: a table without hooks pays one counter test per commit.  With
** KV_HOOK_NEEDS_OLD_VALUE the commit keeps a snapshot of the table as it
** was before the commit until delivery, and each old value is a point
** read of it (a data-file read for kv_btree and kv_log, possibly; a failed
** read is logged with sqlite3_log and reported as an absent old value).
*/
#define KV_HOOK_NEEDS_OLD_VALUE 0x01   /* xWrite gets the old value */
#define KV_HOOK_NEEDS_INIT      0x02   /* xInit pass at registration */
#define KV_HOOK_NEEDS_WRITE     0x04   /* xWrite for every commit */

typedef struct KvHook KvHook;
typedef struct KvHookMethods KvHookMethods;
struct KvHookMethods {
  /* Required with KV_HOOK_NEEDS_WRITE. */
  void (*xWrite)(void *pArg, const uint8_t *aKey, int nKey,
                 const uint8_t *aOld, int nOld,
                 const uint8_t *aNew, int nNew);
  /* Required with KV_HOOK_NEEDS_INIT. */
  void (*xInit)(void *pArg, const uint8_t *aKey, int nKey,
                const uint8_t *aVal, int nVal);
  /* Optional: the table was removed. */
  void (*xRemoved)(void *pArg);
  /* Optional: the hook is freed, after kv_hook_unregister, once no
  ** callback of it runs or will run (pArg may be freed here).  Called on
  ** the thread that drops the hook's last reference, with no lock held:
  ** kv_hook_unregister's, or a delivering thread that still held the hook
  ** (possibly after kv_hook_unregister returned).  Not called when
  ** kv_hook_register fails. */
  void (*xDestroy)(void *pArg);
};

/* Register a hook on table zTab (nTab bytes; negative: NUL-terminated) of
** store pEng.  flags: KV_HOOK_*, with NEEDS_WRITE or NEEDS_INIT or both;
** *pMethods is copied; pArg goes to every callback.  With NEEDS_INIT the
** xInit pass runs on this thread before this returns.  The hook holds a
** reference on the store, which stays open until kv_hook_unregister.
** *ppHook belongs to the caller.  Errors, with *pzErr set when pzErr is
** not NULL: SQLITE_MISUSE for a NULL store, table name, methods or
** ppHook, unknown flag bits, neither NEEDS_WRITE nor NEEDS_INIT, a flag
** without its callback, a call from inside a hook callback; SQLITE_ERROR
** "kv: no such table: T (store D)"; the store's failed state; a read
** error of the xInit pass (the hook is not registered then, though xInit
** may have run for some keys); SQLITE_NOMEM. */
int kv_hook_register(KvEngine *pEng, const char *zTab, int nTab, int flags,
                     const KvHookMethods *pMethods, void *pArg,
                     KvHook **ppHook, char **pzErr);
/* Unregister and free the hook (NULL-safe).  On return no callback of
** the hook runs or will run, so pArg may be freed; called from inside a
** hook callback, it does not wait for a call of this hook in progress on
** another thread (which may be waiting for this one), but the hook gets
** no call after that one (xDestroy, when given, runs after it).  Drops
** the hook's reference on the store (the last one closes it). */
void kv_hook_unregister(KvHook *pHook);
/* Non-zero on a thread that is inside a hook callback (xWrite, xInit or
** xRemoved, of any store). */
int kv_hook_active(void);

/* ============================================================= versions ==
** The key-version protocol.  A version is a kind (upsert 'u' or delete
** 'd') plus a 128-bit id: the store's epoch (chosen at open, 64 bits) and
** a transaction id (64 bits) from the store's TID generator.
** KV_VERSION_BYTES bytes in memory: kind, epoch big-endian, tid
** big-endian; as text "u:<32 hex>".
**
** Version records live in memory only (never in the WAL or a data file);
** a store starts with none after open and replay.  All version state is
** guarded by the engine mutex: a query takes its snapshot and reads or
** creates the version in one critical section, and a commit publishes each
** table's data and versions in one, so the pair a query returns is always
** consistent.
*/
#define KV_VERSION_BYTES 17
#define KV_VERSION_TEXT  34      /* "u:" + 32 hex, NUL excluded */

/* Render aVer as "u:<32 hex>" into z (KV_VERSION_TEXT+1 bytes). */
void kv_version_text(const uint8_t *aVer, char *z);
/* Parse text z/n into aVer; SQLITE_OK or SQLITE_ERROR (bad form). */
int kv_version_parse(const char *z, int n, uint8_t *aVer);

/* Read key aKey of zTab and its version atomically, with no transaction.
** A missing version is created (a first observation, kind 'd' if the key
** is absent) with a new TID; concurrent first reads publish one.  Sets
** *pbFound and the value bytes in *pVal (reset first); aVer gets the
** version.  A stopped store fails with its code and message. */
int kv_version_query(KvEngine*, const char *zTab, int nTab,
                     const uint8_t *aKey, int nKey, KvBuf *pVal,
                     int *pbFound, uint8_t *aVer, char **pzErr);

/* A list of keys (kv_keylist_parse, ext/kv_sql.h): n key encodings in
** input order; key i is buf.a[aOff[i] .. aOff[i+1]).  A key given as a
** JSON integer of at most 18 digits also has its value in aInt[i], with
** abInt[i] set, so it need not be decoded again.  Owned by whoever filled
** it. */
typedef struct KvKeyList KvKeyList;
struct KvKeyList {
  int n;
  int *aOff;                     /* n+1 offsets */
  int64_t *aInt;                 /* n values, where abInt[i] */
  uint8_t *abInt;                /* n flags */
  KvBuf buf;
};

/* kv_version_query for every key of pList, all from one published state
** (one critical section: no commit publishes in between).  xRow is called
** once per key, in list order (iKey: its index), with the engine mutex
** held (it must not call into the engine); its non-OK result stops the
** walk and is returned.  aVal is NULL when the key is absent; the bytes
** are valid during the call only. */
typedef int (*KvVerRowFn)(void *pArg, int iKey, const uint8_t *aKey,
                          int nKey, const uint8_t *aVal, int nVal,
                          const uint8_t *aVer);
int kv_version_query_list(KvEngine*, const char *zTab, int nTab,
                          const KvKeyList *pList, KvVerRowFn xRow,
                          void *pArg, char **pzErr);

/* One element of a read set: the version the caller read of (table,
** key).  The pointers belong to the caller. */
typedef struct KvVerRead KvVerRead;
struct KvVerRead {
  const char *zTab; int nTab;
  const uint8_t *aKey; int nKey;
  uint8_t aVer[KV_VERSION_BYTES];
};

/* Versioned prepare of an active root: select the versioned protocol
** (SQLITE_MISUSE if the root is ordinary; nothing changes then), check
** that every table of the read set exists and that the root writes
** something, register the reads, then under the engine mutex compare
** every read version with the current one (version_mismatch) and run the
** standard conflict checks (transaction_conflict).  On a conflict:
** SQLITE_BUSY_SNAPSHOT, the root is rolled back and kv_root_conflicts()
** lists them.  On SQLITE_OK the persistent writes are durable in the WAL.
** aRead (sorted by table) must hold no (table, key) twice (the caller
** checks). */
int kv_version_prepare(KvRoot*, const KvVerRead *aRead, int nRead,
                       char **pzErr);

/* The receipts of a versioned commit: one per final write, in table, then
** key order of the write sets.  a[i].zTab points into data, a[i].aKey
** into a committed write set the receipts keep (apMap); both live until
** kv_version_receipts_free.  The other members are the engine's
** bookkeeping. */
typedef struct KvVerReceipt KvVerReceipt;
typedef struct KvVerReceipts KvVerReceipts;
struct KvVerReceipt {
  const char *zTab; int nTab;    /* in KvVerReceipts.data (NUL after) */
  const uint8_t *aKey; int nKey; /* in a write set of apMap */
  uint8_t aVer[KV_VERSION_BYTES];
};
struct KvVerReceipts {
  int n, nAlloc;
  KvVerReceipt *a;
  int rc;                        /* an OOM while recording */
  KvBuf data;                    /* every table name */
  int nMap;                      /* the committed write sets, referenced: */
  struct KvMap **apMap;          /* the receipts' keys are their bytes */
  const void *pLastTab;          /* while recording: the last table ... */
  int iLastTab;                  /* ... and its name's offset in data */
};
/* Free receipts and release the write sets they keep.  NULL-safe. */
void kv_version_receipts_free(KvVerReceipts*);

/* Commit a root prepared by kv_version_prepare: publish, then check that
** the receipts name every final write exactly once, with this root's TID
** and the right kind.  On SQLITE_OK *ppOut holds them (the caller frees
** them with kv_version_receipts_free).  A receipt mismatch is
** SQLITE_INTERNAL with a message (the commit itself stands: its writes are
** visible and, for persistent tables, durable in the WAL since the
** prepare). */
int kv_version_commit(KvRoot*, KvVerReceipts **ppOut, char **pzErr);

/* Store options.  ttl: 0 = versions are kept until the store closes;
** else the minimum time in ms a version record is kept after its last
** first observation or commit publication.  That refresh leases the
** record for the ttl then in force: a lower ttl set later does not
** shorten the lease, a higher one keeps the record longer.  poll: ms
** between sweeps.
** Quantisation (both): a value in (0,1) counts as 1, others are truncated
** to whole ms.  Starting TTL starts the store's sweeper thread; ttl 0
** stops and joins it (as does closing the store).  Errors: SQLITE_RANGE
** for a negative or too large value, a zero poll interval. */
int kv_version_configure(KvEngine*, double rTtlMs, double rPollMs,
                         char **pzErr);
/* The options in force (ttl and poll in whole ms). */
void kv_version_options(KvEngine*, int64_t *pTtlMs, int64_t *pPollMs);

/* Metric counters of the version protocol, process-wide, relaxed atomics
** (no lock). */
#define KV_METRIC_QUERY_OK       0
#define KV_METRIC_QUERY_FAIL     1
#define KV_METRIC_PREPARE_OK     2
#define KV_METRIC_PREPARE_FAIL   3
#define KV_METRIC_COMMIT_OK      4
#define KV_METRIC_COMMIT_FAIL    5
#define KV_METRIC_N              6
/* Count one event iMetric (a KV_METRIC_* below KV_METRIC_N). */
void kv_metric_add(int iMetric);
/* Copy the KV_METRIC_N counters, then roots created and closed, to
** aOut (KV_METRIC_N+2 entries). */
void kv_metrics_read(int64_t *aOut);

/* ============================================================== process ==
** The SQLite VFS the kv_btree backend opens its data files with.
** xPlainVfs() is called at every open of a data file and returns a VFS
** name (NULL: SQLite's default VFS).  ext/depot.c sets depot_vfs_plain
** once, at process setup, so the data files never go through the depot
** VFS, even while it is the default.  Until it is set, data files use the
** default VFS.  Any thread; the last call wins. */
void kv_set_plain_vfs(const char *(*xPlainVfs)(void));

#endif /* DEPOT_KV_H */
