/*
** kv_queue.h -- queues and change streams on KV tables (private to ext/):
** what ext/kv_queue.c (queues, their SQL surface) and ext/kv_stream.c
** (change streams, the carrier kind that kv_derived.c calls on every
** source write) share, and what kv_derived.c calls.
**
** A queue is one KV table of its store (kv_memory by default, persistent)
** whose catalog options hold {"queue":1, "max_attempts":N, "source":S,
** "project":E}; its keys are composite integer keys:
**   (0, id)   a message          (1, id)   a dead letter
**   (2)       the id watermark (see kv_queue_alloc)
** Every entry's value is a blob value encoding (kv_value_encode_blob) of
** a record: KVQ_HDR bytes of header, the last error text, then the
** payload's own value encoding:
**   u8 version (1) | i64 visible_at | i64 enqueued_at | u64 lease_id |
**   u32 attempts | u32 error bytes | error | payload value encoding
** all little-endian.  visible_at is when the message may be delivered
** (enqueue time plus delay, a nack's delay, or the lease deadline); a dead
** letter's visible_at is when it died.  lease_id 0: not leased.
*/
#ifndef DEPOT_KV_QUEUE_H
#define DEPOT_KV_QUEUE_H

#include "ext/kv/kv.h"

#define KVQ_MSG    0              /* key part: messages */
#define KVQ_DEAD   1              /* dead letters */
#define KVQ_META   2              /* the watermark row */
#define KVQ_HDR    33

/* One decoded record; aErr and aPay point into the bytes decoded. */
typedef struct KvqRec KvqRec;
struct KvqRec {
  int64_t iVisible, iEnqueued;
  uint64_t iLease;
  uint32_t nAttempt;
  const uint8_t *aErr; int nErr;
  const uint8_t *aPay; int nPay; /* the payload's value encoding */
};

/* The key (ePart, id) of a queue entry, appended to pOut. */
int kv_queue_key(int ePart, int64_t iId, KvBuf *pOut);
/* Append the value encoding of record *p to pOut.  SQLITE_OK/NOMEM. */
int kv_queue_rec_encode(const KvqRec *p, KvBuf *pOut);
/* Decode a stored value; SQLITE_CORRUPT when it is no record. */
int kv_queue_rec_decode(const uint8_t *aVal, int nVal, KvqRec *p);

/* n new message ids of queue zQ (catalog id iTabId) of store pEng, never
** given before in the store, increasing in the order they are given:
** *piFirst .. *piFirst+n-1.  Ids come from a block reserved in memory for
** the process; each block's end is committed first (the watermark row,
** its own durable root transaction) with a random nonce.  A block is used
** only while the row still holds its end and nonce: the row is read back
** whenever the caller's memo (*pMemo, zeroed at first) has not seen this
** block on this store instance, so a block another process or another
** store reserved since is never used again.  The caller keeps the memo as
** long as it keeps the store open (its KvConn does), and no longer.
** Takes a process mutex. */
typedef struct KvqMemo KvqMemo;
struct KvqMemo {
  void *pAlloc;                 /* the process's block of the queue */
  int64_t iEnd;                 /* the block this caller has verified */
  uint64_t iNonce;
};
int kv_queue_alloc(KvEngine *pEng, const char *zQ, int nQ, uint64_t iTabId,
                   KvqMemo *pMemo, int n, int64_t *piFirst, char **pzErr);

/* Change streams (kv_stream.c), for kv_derived.c.  kv_stream_load reads,
** from the options zOpt of table zTab, the change streams declared on it
** ({"streams":[queue, ...]}) into *pp (NULL when none) and whether the
** table is itself a queue (*pbQueue: only the queue functions write it).
** db is the caller's private connection (projections, JSON).
** kv_stream_write: root r applies one mutation of zTab (bDelete, 2 for the
** removal of an expired row, KV_DERIVED_EXPIRE: operation "expire"; or
** the new value aVal; bOld: the old value aOld existed): append one event per
** declared stream to its queue, in r.  No event for the delete of an
** absent key.  Every event is built before the first is written, so a
** failing projection writes nothing. */
typedef struct KvStreams KvStreams;
int kv_stream_load(sqlite3 *db, KvEngine *pEng, const char *zOpt,
                   KvStreams **pp, int *pbQueue);
void kv_stream_free(KvStreams*);
int kv_stream_write(sqlite3 *db, KvStreams *p, KvRoot *r, const char *zTab,
                    int nTab, const uint8_t *aKey, int nKey,
                    const uint8_t *aVal, int nVal, int bDelete, int bOld,
                    const uint8_t *aOld, int nOld, char **pzErr);

/* The event of a mutation as JSON text into pOut (kv_stream.c; also the
** documented format): {"seq":N,"op":"insert|update|delete|expire",
** "key":K,"old":V,"new":V,"tid":T,"time":MS}. */

#endif /* DEPOT_KV_QUEUE_H */
