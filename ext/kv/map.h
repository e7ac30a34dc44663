/*
** map.h -- a persistent (copy-on-write) ordered map of byte keys (private
** to ext/kv/; map.c).  It is the storage of kv_memory tables, the write
** overlay of kv_btree, the in-memory index of kv_log and the per-transaction
** write sets.
**
** A KvMap is one immutable version: a reference-counted root.  Updates
** return a new version that shares every untouched node with the old one
** (path copying), so taking a snapshot is kv_map_ref() (O(1)), and readers of
** a snapshot never see later writes and never block writers.  Lookups and
** updates are O(log n); a cursor walks a version forward or backward.
**
** Keys order by memcmp() over their common length, a shorter key first
** when it is a prefix of the other (the order of the key encodings of
** kv.h).
**
** Entries: key bytes -> (value bytes, 64-bit revision, tombstone flag).  The
** revision is the commit sequence number of the write that produced the
** entry (the engine's conflict detection compares it with a snapshot's).  A
** tombstone is an entry that records a delete (used by write sets and
** overlays); kv_map_remove() removes an entry physically.
**
** Threads: versions are immutable once published; node reference counts are
** atomic, so versions may be shared, referenced and released from any
** thread.  A caller that holds the only reference to a version (refcount 1,
** never shared) may update it in place: kv_map_put()/kv_map_remove() on such
** a version reuse its unshared nodes instead of copying them ("transient"
** updates) - which is why they take the old version by reference and
** consume it.
**
** Errors: SQLITE_OK, SQLITE_NOMEM (on NOMEM the old version is left intact
** and still owned by the caller), SQLITE_MISUSE for a NULL map or a
** negative length.
**
** Durability: none; a KvMap lives in memory only.
*/
#ifndef DEPOT_KV_MAP_H
#define DEPOT_KV_MAP_H

#include "ext/kv/kv.h"             /* KvMapEntry */
#include <stdint.h>

typedef struct KvMap KvMap;
typedef struct KvMapCursor KvMapCursor;

/* Entries are KvMapEntry (kv.h); their pointers stay valid while the
** version they were read from is referenced.  Every entry's value bytes
** are followed by a NUL byte that nVal does not count (aVal[nVal]==0, for
** tombstones and empty values too), so a text value without an interior
** NUL is also a NUL-terminated string in place. */

/* A new empty version (refcount 1), or NULL on OOM. */
KvMap *kv_map_new(void);
/* Add a reference (a snapshot); returns p.  NULL-safe. */
KvMap *kv_map_ref(KvMap *p);
/* Drop a reference; frees nodes no version uses any more.  NULL-safe. */
void kv_map_unref(KvMap *p);

/* Number of entries (tombstones included) and a byte estimate (keys,
** values and node overhead).  O(1). */
int64_t kv_map_count(const KvMap *p);
int64_t kv_map_bytes(const KvMap *p);

/* Look key up.  Returns 1 and fills *pOut if present (tombstones too),
** 0 if absent. */
int kv_map_get(const KvMap *p, const void *aKey, int nKey, KvMapEntry *pOut);

/* Pins.  An entry's bytes never change; a put or remove of its key drops
** the map's reference to it.  kv_map_value_pin(aVal) adds a reference to
** the entry whose value starts at aVal (the aVal of a KvMapEntry this
** map's kv_map_get or cursors gave, tombstones and empty values too), so
** its key and value bytes stay valid, whatever happens to the map, until
** the matching kv_map_value_unpin(aVal), which frees the entry when no
** version or pin holds it.  Both may be called from any thread, without
** the map's owner's lock; pinning needs the entry to be alive (read under
** that lock, or while the version it was read from is referenced). */
void kv_map_value_pin(const uint8_t *aVal);
void kv_map_value_unpin(const uint8_t *aVal);

/* Insert or replace key -> (val, rev, bTomb).  KvMapEntry pointers taken
** from the consumed version stay valid only if the caller holds another
** reference to it (a snapshot or a cursor); an unshared version is changed
** in place.  *ppMap is the version to
** update; on success it is replaced by the new version (the caller's
** reference to the old version is consumed).  Key and value bytes are
** copied. */
int kv_map_put(KvMap **ppMap, const void *aKey, int nKey,
               const void *aVal, int nVal, uint64_t rev, int bTomb);

/* Like kv_map_put, but an existing entry of the key (value or tombstone)
** is kept as it is: *pbAdded (may be NULL) is set to 1 if the key was
** absent and has been added, 0 if it was present.  One descent instead of
** a kv_map_get followed by a kv_map_put (used where the first write met
** for a key wins, as in a log replayed newest first).  Ownership and
** errors as for kv_map_put; *pbAdded is 0 on error. */
int kv_map_put_absent(KvMap **ppMap, const void *aKey, int nKey,
                      const void *aVal, int nVal, uint64_t rev, int bTomb,
                      int *pbAdded);

/* Like kv_map_put, and tells what the key held before, in one descent
** instead of a kv_map_get followed by a kv_map_put: pOld->bFound is 1 if
** the key had an entry (then bTomb, rev and nVal, its value's length, are
** set, and its first min(nVal, pOld->nBuf) value bytes are copied to
** pOld->aBuf), 0 if it was absent or on error.  Ownership and errors as
** for kv_map_put. */
typedef struct KvMapOld KvMapOld;
struct KvMapOld {
  int bFound, bTomb;
  uint64_t rev;
  int nVal;
  void *aBuf;                 /* in: room for nBuf bytes (may be NULL/0) */
  int nBuf;
};
int kv_map_put_old(KvMap **ppMap, const void *aKey, int nKey,
                   const void *aVal, int nVal, uint64_t rev, int bTomb,
                   KvMapOld *pOld);

/* Like kv_map_put for the entry pCur is on (a cursor on this or another
** map), with revision rev and tombstone flag bTomb: the new version shares
** that entry's key and value bytes instead of copying them (a commit
** applying its write set allocates and copies nothing per entry).
** SQLITE_MISUSE if pCur is not on an entry. */
int kv_map_put_from(KvMap **ppMap, const KvMapCursor *pCur, uint64_t rev,
                    int bTomb);

/* Remove key if present (no-op otherwise).  Same ownership as put. */
int kv_map_remove(KvMap **ppMap, const void *aKey, int nKey);

/* Cursors.  A cursor holds its own reference to the version it walks. */
#define KV_SEEK_FIRST 0   /* smallest key (aKey ignored) */
#define KV_SEEK_LAST  1   /* largest key (aKey ignored) */
#define KV_SEEK_GE    2   /* first key >= aKey */
#define KV_SEEK_GT    3
#define KV_SEEK_LE    4   /* last key <= aKey */
#define KV_SEEK_LT    5
KvMapCursor *kv_map_cursor_new(KvMap *p);      /* NULL on OOM */
void kv_map_cursor_free(KvMapCursor*);
/* Point the cursor at version p instead (a reference to p is taken, the
** one to its old version dropped), on no entry: a walk of another version
** without allocating a cursor.  p NULL: it holds no version, and a seek
** finds nothing until the next reset. */
void kv_map_cursor_reset(KvMapCursor*, KvMap *p);
/* Position; returns 1 if the cursor is on an entry, 0 if none matches (or
** eSeek is not one of the modes above).  After next/prev ran off either
** end the cursor is on no entry until the next seek. */
int kv_map_cursor_seek(KvMapCursor*, int eSeek, const void *aKey, int nKey);
int kv_map_cursor_next(KvMapCursor*);          /* 1 if on an entry */
int kv_map_cursor_prev(KvMapCursor*);
int kv_map_cursor_valid(const KvMapCursor*);
/* kv_map_cursor_next (bPrev: _prev) and, when on an entry, its
** kv_map_cursor_entry into *pOut: one call per step of a walk. */
int kv_map_cursor_step(KvMapCursor*, int bPrev, KvMapEntry *pOut);
void kv_map_cursor_entry(const KvMapCursor*, KvMapEntry *pOut);

#endif /* DEPOT_KV_MAP_H */
