/*
** kv_codec.h -- encodings of KV table entries (private to ext/).
**
** Keys: an order-preserving byte encoding of an SQLite value, so that
** memcmp() order of two encoded keys equals the order in which SQLite's
** BINARY collation sorts the values of the key column:
**     numbers (INTEGER and REAL, compared numerically and exactly, as
**     sqlite3 does: 2 < 2.5 < 3, and 9007199254740993 > 9007199254740992.0)
**   < TEXT (memcmp of the UTF-8 bytes)
**   < BLOB (memcmp)
** Values that SQLite considers equal (integer 2 and real 2.0) encode to the
** same key bytes: they are the same key, as in a SQLite PRIMARY KEY.  NULL is
** not a key.  -0.0 is the key 0.  Every key encoding is self-delimiting (no
** encoding is a prefix of another), so an encoded key may be followed by
** more bytes in a composite key without changing the order; byte strings
** compare as memcmp() over the common length, then shorter first.  The original numeric type of a key is kept in the entry's
** value bytes (below), so a key reads back with the type it was written with.
**
** Values: a self-describing encoding of any SQLite value (NULL, INTEGER,
** REAL, TEXT, BLOB) that round-trips type and bytes exactly, prefixed by one
** byte that records the numeric type of the key (integer or real) so the key
** can be returned with its original type.
**
** Limits: keys up to KV_MAX_KEY_BYTES of encoded input (text/blob bytes),
** values up to KV_MAX_VALUE_BYTES.  Larger input is SQLITE_TOOBIG with a
** message "kv: key is N bytes, the limit is 32768".
**
** Decoders never read outside the given buffer and return SQLITE_CORRUPT on
** malformed bytes (they are used on bytes read from disk and by fuzzers).
*/
#ifndef DEPOT_KV_CODEC_H
#define DEPOT_KV_CODEC_H

#include "sqlite3ext.h"
#include <stdint.h>

#define KV_MAX_KEY_BYTES    32768
#define KV_MAX_VALUE_BYTES  (16*1024*1024)

/* A growable byte buffer.  Zero-initialise; free with kv_buf_free. */
typedef struct KvBuf KvBuf;
struct KvBuf { uint8_t *a; int n; int nAlloc; };
int kv_buf_append(KvBuf*, const void *p, int n);   /* SQLITE_OK/NOMEM */
/* Room for n more bytes at a+n (n unchanged); SQLITE_OK/NOMEM. */
int kv_buf_reserve(KvBuf*, int n);
void kv_buf_reset(KvBuf*);                          /* n=0, keep memory */
void kv_buf_free(KvBuf*);

/* The encoders below append to pOut and, on any error, leave pOut as it
** was.  The decoders accept exactly the bytes the encoders produce.
**
** Append the encoding of key pKey to pOut.  NULL -> SQLITE_CONSTRAINT
** ("kv: key must not be NULL"); too large -> SQLITE_TOOBIG.  Messages go to
** *pzErr (sqlite3_malloc'd; the caller initialises it to NULL and frees
** it) when pzErr is not NULL. */
int kv_key_encode(sqlite3_value *pKey, KvBuf *pOut, char **pzErr);

/* Keys that are text must be valid UTF-8 (NUL allowed): kv_key_encode and
** kv_key_encode_c refuse others with SQLITE_MISMATCH ("kv: text key is not
** valid UTF-8 ..."), so every key can be shown as JSON (receipts,
** kv_try_commit, kv_conflicts).  kv_key_encode_old skips that check: it
** encodes the key of a row that already exists (UPDATE, DELETE). */
int kv_key_encode_old(sqlite3_value *pKey, KvBuf *pOut, char **pzErr);

/* Offset of the first byte of z/n that does not start a valid UTF-8
** sequence (a NUL counts as invalid unless bNulOk), or -1 if all is
** valid. */
int kv_utf8_invalid_at(const uint8_t *z, int n, int bNulOk);

/* Encode a constraint operand for range/equality seeks: like
** kv_key_encode but never fails for size (a longer operand is encoded
** whole) and returns SQLITE_EMPTY for NULL (no key compares with NULL). */
int kv_key_encode_bound(sqlite3_value *pBound, KvBuf *pOut);

/* Append the value-side encoding of (pKey's numeric kind, pVal) to pOut.
** pVal may be NULL-typed (or a NULL pointer: the value NULL); pKey may be
** a NULL pointer (no numeric kind recorded).  Too large -> SQLITE_TOOBIG
** ("kv: value is N bytes, the limit is 16777216").  Error messages are
** written to *pzErr, which the caller initialises to NULL. */
int kv_value_encode(sqlite3_value *pKey, sqlite3_value *pVal, KvBuf *pOut,
                    char **pzErr);

/* Set the result of ctx to the key, given the encoded key and the encoded
** value stored with it (for the numeric kind).  With no value (nVal==0), or
** a value encoded with a non-numeric or NULL pKey, a numeric key comes back
** as an INTEGER when it is an int64 and as a REAL otherwise.  Returns
** SQLITE_OK, SQLITE_NOMEM, or SQLITE_CORRUPT (malformed bytes, or a kind
** that contradicts the key); on error the result of ctx is that error. */
int kv_key_result(sqlite3_context *ctx, const uint8_t *aKey, int nKey,
                  const uint8_t *aVal, int nVal);

/* Set the result of ctx to the value stored in aVal/nVal (SQLITE_OK,
** SQLITE_CORRUPT or SQLITE_NOMEM, the result of ctx then being the
** error). */
int kv_value_result(sqlite3_context *ctx, const uint8_t *aVal, int nVal);

/* Return the key/value as a new sqlite3_value (sqlite3_value_dup semantics,
** free with sqlite3_value_free), or NULL with *pRc set (SQLITE_CORRUPT,
** SQLITE_NOMEM).  Thread-safe; serialised on a private in-memory
** connection opened on first use, so prefer kv_key_result/kv_value_result
** on hot paths.  The first call opens that connection, which runs the
** process's auto-extensions: do not make it while holding a lock that
** the extension's per-connection setup takes. */
sqlite3_value *kv_key_to_value(const uint8_t *aKey, int nKey,
                               const uint8_t *aVal, int nVal, int *pRc);
sqlite3_value *kv_value_to_value(const uint8_t *aVal, int nVal, int *pRc);

/* Check that aKey/nKey is a well-formed key encoding (SQLITE_OK or
** SQLITE_CORRUPT). */
int kv_key_check(const uint8_t *aKey, int nKey);

/* Append key aKey/nKey as a JSON value to pOut: an integer, a real
** (integral reals print with ".0"; infinities as 9e999), a string, or
** {"hex":"<lowercase hex>"} for a blob.  SQLITE_OK, SQLITE_NOMEM or
** SQLITE_CORRUPT. */
int kv_key_json(const uint8_t *aKey, int nKey, KvBuf *pOut);
/* Like kv_key_encode for a key given as C values: eType SQLITE_INTEGER
** (i), SQLITE_FLOAT (r; NaN is NULL), SQLITE_TEXT or SQLITE_BLOB (z/n).
** Same errors. */
int kv_key_encode_c(int eType, int64_t i, double r, const void *z, int n,
                    KvBuf *pOut, char **pzErr);
/* Append the key of integer i (at most KV_KEY_INT_BYTES bytes); the same
** bytes as kv_key_encode_c(SQLITE_INTEGER, i, ...).  SQLITE_OK/NOMEM. */
#define KV_KEY_INT_BYTES 12
int kv_key_append_int(KvBuf *pOut, int64_t i);
/* Append z/n (UTF-8) as a JSON string, quotes included. */
int kv_json_text(KvBuf *pOut, const uint8_t *z, int n);

#endif /* DEPOT_KV_CODEC_H */
