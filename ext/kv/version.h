/*
** kv_version.h -- the key-version protocol of KV tables (private to ext/):
** per-table version maps, first observations, the versioned prepare and
** commit with their receipts, version TTL with its sweeper thread, and the
** metric counters.
**
** A version is a kind (upsert 'u' or delete 'd') plus a 128-bit id: the
** store's epoch (chosen at open, 64 bits) and a transaction id (64 bits)
** from the engine's TID generator.  KV_VERSION_BYTES bytes in memory:
** kind, epoch big-endian, tid big-endian; as text "u:<32 hex>".
**
** Version records live in memory only (never in the WAL or a data file);
** a store starts with none after open and replay.  All version state is
** guarded by the engine mutex: a query takes its snapshot and reads or
** creates the version in one critical section, and a commit publishes each
** table's data and versions in one, so the pair a query returns is always
** consistent.
*/
#ifndef DEPOT_KV_VERSION_H
#define DEPOT_KV_VERSION_H

#include "ext/kv/engine.h"

#define KV_VERSION_BYTES 17
#define KV_VERSION_TEXT  34      /* "u:" + 32 hex, NUL excluded */

/* Render aVer as "u:<32 hex>" into z (KV_VERSION_TEXT+1 bytes). */
void kv_version_text(const uint8_t *aVer, char *z);
/* Parse text z/n into aVer; SQLITE_OK or SQLITE_ERROR (bad form). */
int kv_version_parse(const char *z, int n, uint8_t *aVer);

/* Read key aKey of zTab and its version atomically, with no transaction.
** A missing version is created (a first observation, kind 'd' if the key
** is absent) with a new TID; concurrent first reads publish one.  Sets
** *pbFound and the value bytes in *pVal; aVer gets the version.  A
** stopped store (kvEngineFailed) fails with its code and message. */
int kv_version_query(KvEngine*, const char *zTab, int nTab,
                     const uint8_t *aKey, int nKey, KvBuf *pVal,
                     int *pbFound, uint8_t *aVer, char **pzErr);

/* A parsed key list (kv_readset.c): n key encodings in input order; key
** i is buf.a[aOff[i] .. aOff[i+1]).  The JSON form is an array of keys
** encoded as in read sets: ["text", 7, 1.5, {"hex":"00ff"}].  A key given
** as a JSON integer of at most 18 digits (the common case) also has its
** value in aInt[i], with abInt[i] set, so it need not be decoded again. */
typedef struct KvKeyList KvKeyList;
struct KvKeyList {
  int n;
  int *aOff;                     /* n+1 offsets */
  int64_t *aInt;                 /* n values, where abInt[i] */
  uint8_t *abInt;                /* n flags */
  KvBuf buf;
};
/* SQLITE_ERROR with *pzErr for malformed input, key codes (SQLITE_TOOBIG,
** SQLITE_CONSTRAINT), SQLITE_NOMEM.  On error *p is empty. */
int kv_keylist_parse(const char *z, int n, KvKeyList *p, char **pzErr);
void kv_keylist_free(KvKeyList*);

/* kv_version_query for every key of pList, all from one published state
** (one critical section: no commit publishes in between).  xRow is called
** once per key, in list order (iKey: its index), with the engine mutex
** held (it must not call into the engine); its non-OK result stops the
** walk and is returned.  aVal is NULL when the key is absent. */
typedef int (*KvVerRowFn)(void *pArg, int iKey, const uint8_t *aKey,
                          int nKey, const uint8_t *aVal, int nVal,
                          const uint8_t *aVer);
int kv_version_query_list(KvEngine*, const char *zTab, int nTab,
                          const KvKeyList *pList, KvVerRowFn xRow,
                          void *pArg, char **pzErr);

/* One element of a read set. */
typedef struct KvVerRead KvVerRead;
struct KvVerRead {
  const char *zTab; int nTab;
  const uint8_t *aKey; int nKey;
  uint8_t aVer[KV_VERSION_BYTES];
};

/* A parsed read set (kv_readset.c): sorted by (table, key), no pair
** twice; the tables and keys of all elements are in one allocation. */
typedef struct KvReadSet KvReadSet;
struct KvReadSet {
  int n;
  KvVerRead *a;
  uint8_t *aData;                /* every table name and key */
};
/* Parse the read-set JSON text z/n (see kv_readset.c and docs/SQL.md).
** SQLITE_ERROR with *pzErr for malformed input or a duplicate, key codes
** (SQLITE_TOOBIG, SQLITE_CONSTRAINT), SQLITE_NOMEM.  On error *pSet is
** empty. */
int kv_readset_parse(const char *z, int n, KvReadSet *pSet, char **pzErr);
void kv_readset_free(KvReadSet*);

/* Versioned prepare of an active root: select the versioned protocol
** (SQLITE_MISUSE if the root is ordinary; nothing changes then), check
** that every table of the read set exists and that the root writes
** something, register the reads, then under the engine mutex compare
** every read version with the current one (version_mismatch) and run the
** standard conflict checks (transaction_conflict).  On a conflict:
** SQLITE_BUSY_SNAPSHOT, the root is rolled back and kv_root_conflicts()
** lists them.  On SQLITE_OK the persistent writes are durable in the WAL.
** aRead must hold no (table, key) twice (the caller checks). */
int kv_version_prepare(KvRoot*, const KvVerRead *aRead, int nRead,
                       char **pzErr);

/* One receipt of a versioned commit. */
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
  KvMap **apMap;                 /* the receipts' keys are their bytes */
  const void *pLastTab;          /* while recording: the last table ... */
  int iLastTab;                  /* ... and its name's offset in data */
};
void kv_version_receipts_free(KvVerReceipts*);

/* Commit a root prepared by kv_version_prepare: publish, then check that
** the receipts name every final write exactly once, with this root's TID
** and the right kind.  On SQLITE_OK *ppOut holds them (table, then key
** order of the write sets).  A receipt mismatch is SQLITE_INTERNAL with a
** message (the commit itself stands: its writes are visible and, for
** persistent tables, durable in the WAL since the prepare). */
int kv_version_commit(KvRoot*, KvVerReceipts **ppOut, char **pzErr);

/* Store options.  ttl: 0 = versions are kept until the store closes;
** else the minimum time in ms a version record is kept after its last
** first observation or commit publication.  That refresh leases the
** record for the ttl then in force: a lower ttl set later does not
** shorten the lease, a higher one keeps the record longer.  poll: ms
** between sweeps.
** Quantisation (both): a value in (0,1) counts as 1, others are truncated
** to whole ms.  Starting TTL starts the store's sweeper thread; ttl 0
** stops and joins it.  Errors: SQLITE_RANGE for a negative or too large
** value, a zero poll interval. */
int kv_version_configure(KvEngine*, double rTtlMs, double rPollMs,
                         char **pzErr);
void kv_version_options(KvEngine*, int64_t *pTtlMs, int64_t *pPollMs);

/* Test hook: run one sweep round now; returns the records removed. */
int kv_version_sweep_now(KvEngine*);

/* Metric counters (kv_metrics.c), process-wide, relaxed atomics. */
#define KV_METRIC_QUERY_OK       0
#define KV_METRIC_QUERY_FAIL     1
#define KV_METRIC_PREPARE_OK     2
#define KV_METRIC_PREPARE_FAIL   3
#define KV_METRIC_COMMIT_OK      4
#define KV_METRIC_COMMIT_FAIL    5
#define KV_METRIC_N              6
void kv_metric_add(int iMetric);
/* Copy the KV_METRIC_N counters, then roots created and closed, to
** aOut (KV_METRIC_N+2 entries). */
void kv_metrics_read(int64_t *aOut);

#endif /* DEPOT_KV_VERSION_H */
