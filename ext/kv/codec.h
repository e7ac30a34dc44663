/*
** codec.h -- the parts of the KV codec (codec.c) that only the engine and
** the tests use; the encodings, their contracts and every function the
** SQL surface calls are in kv.h.  Private to ext/kv/.  Thread-safe; no
** lock.
*/
#ifndef DEPOT_KV_CODEC_H
#define DEPOT_KV_CODEC_H

#include "ext/kv/kv.h"

/* Offset of the first byte of z/n that does not start a valid UTF-8
** sequence (a NUL counts as invalid unless bNulOk), or -1 if all is
** valid. */
int kv_utf8_invalid_at(const uint8_t *z, int n, int bNulOk);

/* Check that aKey/nKey is a well-formed key encoding (SQLITE_OK or
** SQLITE_CORRUPT): the engine checks the keys of replayed WAL records. */
int kv_key_check(const uint8_t *aKey, int nKey);

/* The value stored in aVal/nVal as a new sqlite3_value (the caller frees
** it with sqlite3_value_free), or NULL with *pRc set (SQLITE_CORRUPT,
** SQLITE_NOMEM); see kv_key_to_value in kv.h for its cost. */
sqlite3_value *kv_value_to_value(const uint8_t *aVal, int nVal, int *pRc);

/* Close the private connection of kv_key_to_value and kv_value_to_value
** (kv.h), if open and not in use by another thread at this moment; the
** next call opens it again.  The engine calls it when the process's last
** engine closes, so no connection outlives the KV engines that use it. */
void kv_codec_release(void);

#endif /* DEPOT_KV_CODEC_H */
