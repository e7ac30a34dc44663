/*
** fuzz_kv_codec.c -- fuzz target for the KV key and value codecs
** (ext/kv_codec.c).
**
** The first input byte picks a mode:
**   0  the rest is an encoded key: kv_key_check(); a key that checks must
**      decode (kv_key_to_value) and re-encode to the same bytes, since key
**      encodings are canonical;
**   1  the rest is an encoded value: one that decodes must re-encode and
**      decode to the same type and bytes;
**   2  the rest is an encoded key and value (split by the next byte) for
**      kv_key_to_value(), which must not fail other than SQLITE_CORRUPT;
**   3  the rest describes two SQL values: each encodes as a key and as a
**      value, decodes back to itself, and the memcmp order of the two keys
**      is the order in which SQLite sorts the two values.
*/
#include "config.h"
#include "tests/fuzz/fuzz.h"
#include "ext/kv/codec.h"
#include <sqlite3.h>

#include <string.h>

static sqlite3 *fuzzDb = 0;
static sqlite3_stmt *fuzzPair = 0;   /* SELECT ?1, ?2, sign of ?1 vs ?2 */

static int fuzzOpen(void){
  if( fuzzPair ) return 1;
  if( sqlite3_open(":memory:", &fuzzDb)!=SQLITE_OK ) return 0;
  return sqlite3_prepare_v2(fuzzDb, "SELECT ?1, ?2, CASE WHEN ?1<?2 THEN -1 "
                            "WHEN ?1=?2 THEN 0 ELSE 1 END", -1,
                            &fuzzPair, 0)==SQLITE_OK;
}

/* 1 if v and w have the same type and the same bytes / number. */
static int fuzzSame(sqlite3_value *v, sqlite3_value *w){
  int t = sqlite3_value_type(v), n;
  if( t!=sqlite3_value_type(w) ) return 0;
  switch( t ){
    case SQLITE_NULL:    return 1;
    case SQLITE_INTEGER: return sqlite3_value_int64(v)==sqlite3_value_int64(w);
    case SQLITE_FLOAT:   return memcmp(&(double){sqlite3_value_double(v)},
                                       &(double){sqlite3_value_double(w)}, 8)==0;
  }
  n = sqlite3_value_bytes(v);
  if( n!=sqlite3_value_bytes(w) ) return 0;
  return n==0 || memcmp(sqlite3_value_blob(v), sqlite3_value_blob(w), n)==0;
}

static void fuzzKey(const uint8_t *a, int n){
  sqlite3_value *v;
  KvBuf b = {0,0,0};
  int rc;
  if( kv_key_check(a, n)!=SQLITE_OK ) return;
  v = kv_key_to_value(a, n, 0, 0, &rc);
  if( v==0 ){ FUZZ_CHECK( rc==SQLITE_NOMEM ); return; }
  if( kv_key_encode(v, &b, 0)==SQLITE_OK ){
    FUZZ_CHECK( b.n==n && memcmp(b.a, a, n)==0 );
  }
  kv_buf_free(&b);
  sqlite3_value_free(v);
}

static void fuzzValue(const uint8_t *a, int n){
  sqlite3_value *v, *w;
  KvBuf b = {0,0,0};
  int rc;
  v = kv_value_to_value(a, n, &rc);
  if( v==0 ){ FUZZ_CHECK( rc==SQLITE_CORRUPT || rc==SQLITE_NOMEM ); return; }
  if( kv_value_encode(0, v, &b, 0)==SQLITE_OK ){
    w = kv_value_to_value(b.a, b.n, &rc);
    FUZZ_CHECK( w!=0 || rc==SQLITE_NOMEM );
    if( w ) FUZZ_CHECK( fuzzSame(v, w) );
    sqlite3_value_free(w);
  }
  kv_buf_free(&b);
  sqlite3_value_free(v);
}

static void fuzzKeyValue(const uint8_t *a, int n){
  int nKey = n>0 ? a[0] : 0, rc;
  sqlite3_value *v;
  if( n<1 || nKey>n-1 ) return;
  v = kv_key_to_value(a+1, nKey, a+1+nKey, n-1-nKey, &rc);
  if( v==0 ) FUZZ_CHECK( rc==SQLITE_CORRUPT || rc==SQLITE_NOMEM );
  sqlite3_value_free(v);
}

/* Bind parameter i of fuzzPair from a[0..n): a type byte, then its bytes;
** returns the bytes used. */
static int fuzzBind(int i, const uint8_t *a, int n){
  int nUse = n>1 ? 1 + (a[1] % (n-1 < 64 ? n-1 : 64)) : 0;
  sqlite3_int64 x = 0;
  double r = 0;
  if( n<2 ){ sqlite3_bind_null(fuzzPair, i); return n; }
  memcpy(&x, a+2, nUse-1>8 ? 8 : nUse-1);
  memcpy(&r, &x, 8);
  switch( a[0]%5 ){
    case 0: sqlite3_bind_null(fuzzPair, i); break;
    case 1: sqlite3_bind_int64(fuzzPair, i, x); break;
    case 2: sqlite3_bind_double(fuzzPair, i, r); break;
    case 3: sqlite3_bind_text(fuzzPair, i, (const char*)a+2, nUse-1,
                              SQLITE_TRANSIENT); break;
    default: sqlite3_bind_blob(fuzzPair, i, a+2, nUse-1, SQLITE_TRANSIENT);
  }
  return 1+nUse;
}

/* memcmp order of two byte strings, shorter first on a common prefix. */
static int fuzzBytesCmp(const KvBuf *x, const KvBuf *y){
  int c = memcmp(x->a, y->a, x->n<y->n ? x->n : y->n);
  if( c ) return c<0 ? -1 : 1;
  return x->n==y->n ? 0 : (x->n<y->n ? -1 : 1);
}

/* Key and value round trip of column i of fuzzPair into *pKey. */
static int fuzzRoundTrip(int i, KvBuf *pKey){
  sqlite3_value *v = sqlite3_column_value(fuzzPair, i), *w;
  KvBuf b = {0,0,0};
  int rc;
  if( kv_value_encode(v, v, &b, 0)==SQLITE_OK ){
    w = kv_value_to_value(b.a, b.n, &rc);
    FUZZ_CHECK( w!=0 || rc==SQLITE_NOMEM );
    if( w ) FUZZ_CHECK( fuzzSame(v, w) );
    sqlite3_value_free(w);
  }
  rc = kv_key_encode(v, pKey, 0);
  FUZZ_CHECK( rc!=SQLITE_OK || sqlite3_value_type(v)!=SQLITE_NULL );
  if( rc==SQLITE_OK ){
    FUZZ_CHECK( kv_key_check(pKey->a, pKey->n)==SQLITE_OK );
    w = kv_key_to_value(pKey->a, pKey->n, b.a, b.n, &rc);
    FUZZ_CHECK( w!=0 || rc==SQLITE_NOMEM );
    if( w && sqlite3_value_type(v)!=SQLITE_FLOAT ) FUZZ_CHECK( fuzzSame(v, w) );
    sqlite3_value_free(w);
  }
  kv_buf_free(&b);
  return rc;
}

static void fuzzPairOrder(const uint8_t *a, int n){
  KvBuf x = {0,0,0}, y = {0,0,0};
  int nUsed;
  if( !fuzzOpen() ) return;
  nUsed = fuzzBind(1, a, n);
  fuzzBind(2, a+nUsed, n-nUsed);
  if( sqlite3_step(fuzzPair)==SQLITE_ROW ){
    int bx = fuzzRoundTrip(0, &x)==SQLITE_OK;
    int by = fuzzRoundTrip(1, &y)==SQLITE_OK;
    if( bx && by ){
      FUZZ_CHECK( fuzzBytesCmp(&x, &y)==sqlite3_column_int(fuzzPair, 2) );
    }
  }
  sqlite3_reset(fuzzPair);
  kv_buf_free(&x);
  kv_buf_free(&y);
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  int n;
  if( nData<1 || nData>65536 ) return 0;
  n = (int)nData-1;
  switch( aData[0]%4 ){
    case 0: fuzzKey(aData+1, n); break;
    case 1: fuzzValue(aData+1, n); break;
    case 2: fuzzKeyValue(aData+1, n); break;
    default: fuzzPairOrder(aData+1, n); break;
  }
  return 0;
}
