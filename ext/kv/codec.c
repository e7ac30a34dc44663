/*
** codec.c -- the byte encodings of KV table keys and values (see kv.h
** for the contract, codec.h for the engine-only parts).
**
** Key encoding (every encoding is self-delimiting, so a key may be followed
** by other bytes in a composite key without changing its order):
**
**   number  0x10, D (8 bytes), 0x00                      exact double D
**           0x10, D (8 bytes), 0x01, OFF (2 bytes BE)     integer D+OFF
**   text    0x20, bytes with 0x00 escaped as 0x00 0xFF, then 0x00 0x00
**   blob    0x30, bytes escaped the same way, then 0x00 0x00
**
** D is an order-preserving image of a double: its IEEE-754 bits, big-endian,
** with the sign bit flipped for positive numbers and every bit flipped for
** negative ones, so memcmp() orders images as the doubles order (-Inf first,
** +Inf last).  -0.0 is encoded as +0.0.  A real is encoded as itself.  An
** integer I is encoded as F, the largest double <= I, and OFF = I - F, which
** is 0 for every integer a double represents (all |I| <= 2^53 and many
** more) and at most 1023 otherwise (the spacing of doubles below 2^63 is at
** most 1024).  Because rounding down is monotonic, two numbers compare as
** (F, OFF) compare, exactly: 2^53+1 sorts after the real 2^53 and before the
** next double 2^53+2, and INT64_MAX sorts below the real 2^63.  An integer
** and a real that SQLite considers equal have the same F and OFF 0, so the
** same bytes.
**
** Value encoding: one byte for the numeric kind of the key the value is
** stored under (KVC_KIND_*), then a type tag and the payload:
**   0x00                       NULL
**   0x01+n, n bytes (0..8)     INTEGER, big-endian two's complement,
**                              sign-extended (n=0 is the value 0)
**   0x0A, 8 bytes              REAL, the IEEE-754 bits (exact, -0.0 kept)
**   0x0B, bytes                TEXT (to the end of the buffer)
**   0x0C, bytes                BLOB (to the end of the buffer)
** A value with a deadline (per-entry TTL) has KVC_KIND_DEADLINE set in its
** kind byte and the deadline, unix ms as a big-endian int64, in the 8
** bytes after it, before the type tag.  Every decoder skips the deadline:
** reads return the same value with or without one.
**
** kv_key_decode() and kv_value_decode() decode to C (KvDatum), with no
** lock and no allocation but the copy of a key whose bytes held escapes.
**
** kv_key_to_value() and kv_value_to_value() need real sqlite3_value
** objects, which only a statement can produce: a private in-memory
** connection with a prepared "SELECT ?1" serves them, opened on first use,
** guarded by a mutex, and closed when the process's last KV engine closes
** (kv_codec_release).
*/
#include "config.h"
#include "ext/kv/codec.h"
#include "ext/kv/map.h"
SQLITE_EXTENSION_INIT3

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define KVC_KEY_NUM   0x10
#define KVC_KEY_TEXT  0x20
#define KVC_KEY_BLOB  0x30

#define KVC_KIND_NONE    0   /* key not numeric, or kind not recorded */
#define KVC_KIND_INT     1
#define KVC_KIND_REAL    2
#define KVC_KIND_NEGZERO 3   /* the real -0.0 */
#define KVC_KIND_DEADLINE 0x80  /* flag: 8 bytes of deadline follow */
#define KVC_KIND_MASK    0x7F

#define KVC_VAL_NULL  0x00
#define KVC_VAL_INT0  0x01   /* 0x01..0x09: integer of 0..8 bytes */
#define KVC_VAL_REAL  0x0A
#define KVC_VAL_TEXT  0x0B
#define KVC_VAL_BLOB  0x0C

#define KVC_TWO63 9223372036854775808.0

/* A decoded SQLite value.  z/n point into the caller's buffer, or into
** zFree (sqlite3_malloc'd) when unescaping was needed. */
typedef struct KvcVal KvcVal;
struct KvcVal {
  int eType;            /* SQLITE_INTEGER ... SQLITE_NULL */
  int64_t i;
  double r;
  const uint8_t *z;
  int n;
  uint8_t *zFree;
};

/* ---- KvBuf ---- */

/* Grow p to hold n more bytes (n>0, not yet room). */
static inline int kvcBufGrow(KvBuf *p, int n){
  int64_t nNew = p->nAlloc ? (int64_t)p->nAlloc*2 : 64;
  uint8_t *aNew;
  while( nNew < (int64_t)p->n + n ) nNew *= 2;
  if( nNew>INT_MAX ){
    if( (int64_t)p->n + n > INT_MAX ) return SQLITE_NOMEM;
    nNew = INT_MAX;
  }
  aNew = sqlite3_realloc64(p->a, (sqlite3_uint64)nNew);
  if( aNew==0 ) return SQLITE_NOMEM;
  p->a = aNew;
  p->nAlloc = (int)nNew;
  return SQLITE_OK;
}

int kv_buf_reserve(KvBuf *p, int n){
  if( n>0 && (int64_t)p->n + n > p->nAlloc ) return kvcBufGrow(p, n);
  return SQLITE_OK;
}

int kv_buf_append(KvBuf *p, const void *pData, int n){
  if( n<=0 ) return SQLITE_OK;
  if( (int64_t)p->n + n > p->nAlloc && kvcBufGrow(p, n)!=SQLITE_OK ){
    return SQLITE_NOMEM;
  }
  memcpy(p->a + p->n, pData, (size_t)n);
  p->n += n;
  return SQLITE_OK;
}

void kv_buf_reset(KvBuf *p){
  p->n = 0;
}

void kv_buf_free(KvBuf *p){
  sqlite3_free(p->a);
  p->a = 0;
  p->n = 0;
  p->nAlloc = 0;
}

/* ---- doubles ---- */

static uint64_t kvcDoubleBits(double r){
  uint64_t u;
  memcpy(&u, &r, 8);
  return u;
}

static double kvcBitsDouble(uint64_t u){
  double r;
  memcpy(&r, &u, 8);
  return r;
}

static int kvcIsNan(double r){
  return r!=r;
}

/* The next double below r (r finite and not zero). */
static double kvcNextDown(double r){
  uint64_t u = kvcDoubleBits(r);
  return kvcBitsDouble(r>0 ? u-1 : u+1);
}

/* Big-endian 64-bit store and load (one byte swap where the compiler
** says the machine is little-endian). */
static void kvcPut64(uint8_t *a, uint64_t u){
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__==__ORDER_LITTLE_ENDIAN__
  u = __builtin_bswap64(u);
  memcpy(a, &u, 8);
#else
  int i;
  for(i=7; i>=0; i--){ a[i] = (uint8_t)u; u >>= 8; }
#endif
}

static uint64_t kvcGet64(const uint8_t *a){
  uint64_t u = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__==__ORDER_LITTLE_ENDIAN__
  memcpy(&u, a, 8);
  u = __builtin_bswap64(u);
#else
  int i;
  for(i=0; i<8; i++) u = (u<<8) | a[i];
#endif
  return u;
}

/* The order-preserving image of r (not NaN) into a[0..7]. */
static void kvcDoubleImage(double r, uint8_t *a){
  uint64_t u;
  if( r==0.0 ) r = 0.0;             /* -0.0 sorts and encodes as 0.0 */
  u = kvcDoubleBits(r);
  u = (u>>63) ? ~u : (u | ((uint64_t)1<<63));
  kvcPut64(a, u);
}

static double kvcImageDouble(const uint8_t *a){
  uint64_t u = kvcGet64(a);
  u = (u>>63) ? (u & ~((uint64_t)1<<63)) : ~u;
  return kvcBitsDouble(u);
}

/* ---- keys ---- */

/* Encode the number of an integer key into a[]; returns the length. */
static int kvcIntKey(int64_t i, uint8_t *a){
  double f = (double)i;
  uint64_t off;
  if( f>=KVC_TWO63 || (int64_t)f>i ) f = kvcNextDown(f);
  off = (uint64_t)i - (uint64_t)(int64_t)f;
  a[0] = KVC_KEY_NUM;
  kvcDoubleImage(f, a+1);
  if( off==0 ){
    a[9] = 0x00;
    return 10;
  }
  a[9] = 0x01;
  a[10] = (uint8_t)(off>>8);
  a[11] = (uint8_t)off;
  return 12;
}

static int kvcRealKey(double r, uint8_t *a){
  a[0] = KVC_KEY_NUM;
  kvcDoubleImage(r, a+1);
  a[9] = 0x00;
  return 10;
}

/* Append tag, the escaped bytes of z/n and the terminator. */
static int kvcAppendEscaped(KvBuf *p, int eTag, const uint8_t *z, int n){
  static const uint8_t aEsc[2] = {0x00, 0xFF};
  static const uint8_t aEnd[2] = {0x00, 0x00};
  uint8_t t = (uint8_t)eTag;
  int rc = kv_buf_append(p, &t, 1);
  while( rc==SQLITE_OK && n>0 ){
    const uint8_t *zZero = memchr(z, 0, (size_t)n);
    int nRun = zZero ? (int)(zZero - z) : n;
    rc = kv_buf_append(p, z, nRun);
    if( rc==SQLITE_OK && zZero ){
      rc = kv_buf_append(p, aEsc, 2);
      nRun++;
    }
    z += nRun;
    n -= nRun;
  }
  if( rc==SQLITE_OK ) rc = kv_buf_append(p, aEnd, 2);
  return rc;
}

/* The text or blob bytes of v.  SQLITE_NOMEM if SQLite could not produce
** them. */
static int kvcValueBytes(sqlite3_value *v, int eType,
                         const uint8_t **pz, int *pn){
  const uint8_t *z;
  if( eType==SQLITE_TEXT ){
    z = sqlite3_value_text(v);
  }else{
    z = sqlite3_value_blob(v);
  }
  *pn = sqlite3_value_bytes(v);
  if( z==0 && *pn>0 ) return SQLITE_NOMEM;
  if( eType==SQLITE_TEXT && z==0 ) return SQLITE_NOMEM;
  *pz = z;
  return SQLITE_OK;
}

int kv_utf8_invalid_at(const uint8_t *z, int n, int bNulOk){
  int i = 0;
  while( i<n ){
    unsigned int c = z[i];
    int len, j;
    if( c<0x80 ){
      if( c==0 && !bNulOk ) return i;
      i++;
      continue;
    }
    len = c<0xc2 ? 0 : c<0xe0 ? 2 : c<0xf0 ? 3 : c<0xf5 ? 4 : 0;
    if( len==0 || len>n-i ) return i;
    for(j=1; j<len; j++){
      if( (z[i+j]&0xc0)!=0x80 ) return i;
    }
    if( (c==0xe0 && z[i+1]<0xa0)             /* overlong */
     || (c==0xed && z[i+1]>=0xa0)            /* surrogate */
     || (c==0xf0 && z[i+1]<0x90)             /* overlong */
     || (c==0xf4 && z[i+1]>=0x90) ){         /* past U+10FFFF */
      return i;
    }
    i += len;
  }
  return -1;
}

/* SQLITE_MISMATCH with the message if text key z/n is not valid UTF-8. */
static int kvcKeyUtf8(const uint8_t *z, int n, char **pzErr){
  int iBad = kv_utf8_invalid_at(z, n, 1);
  if( iBad<0 ) return SQLITE_OK;
  if( pzErr ){
    *pzErr = sqlite3_mprintf("kv: text key is not valid UTF-8 (at byte %d); "
                             "store such a key as a blob", iBad);
  }
  return SQLITE_MISMATCH;
}

/* SQLite type of v, with a NaN real reported as NULL (as SQLite stores
** it). */
static int kvcType(sqlite3_value *v){
  int eType = sqlite3_value_type(v);
  if( eType==SQLITE_FLOAT && kvcIsNan(sqlite3_value_double(v)) ){
    eType = SQLITE_NULL;
  }
  return eType;
}

/* Shared body of kv_key_encode and kv_key_encode_bound.  The caller has
** rejected NULL and checked the size. */
static int kvcKeyAppend(sqlite3_value *v, int eType, KvBuf *pOut){
  uint8_t a[12];
  const uint8_t *z = 0;
  int n = 0;
  int rc;
  switch( eType ){
    case SQLITE_INTEGER:
      return kv_buf_append(pOut, a, kvcIntKey(sqlite3_value_int64(v), a));
    case SQLITE_FLOAT:
      return kv_buf_append(pOut, a, kvcRealKey(sqlite3_value_double(v), a));
    default:
      rc = kvcValueBytes(v, eType, &z, &n);
      if( rc!=SQLITE_OK ) return rc;
      return kvcAppendEscaped(pOut,
          eType==SQLITE_TEXT ? KVC_KEY_TEXT : KVC_KEY_BLOB, z, n);
  }
}

static void kvcSetErr(char **pzErr, const char *zMsg){
  if( pzErr ){
    *pzErr = sqlite3_mprintf("%s", zMsg);
  }
}

/* kv_key_encode, and kv_key_encode_old when bStored (no UTF-8 check). */
static int kvcKeyEncode(sqlite3_value *pKey, int bStored, KvBuf *pOut,
                        char **pzErr){
  int eType = pKey ? kvcType(pKey) : SQLITE_NULL;
  int n0 = pOut->n, rc;
  if( eType==SQLITE_NULL ){
    kvcSetErr(pzErr, "kv: key must not be NULL");
    return SQLITE_CONSTRAINT;
  }
  if( eType==SQLITE_TEXT || eType==SQLITE_BLOB ){
    int n;
    if( eType==SQLITE_TEXT ) (void)sqlite3_value_text(pKey);
    n = sqlite3_value_bytes(pKey);
    if( n>KV_MAX_KEY_BYTES ){
      if( pzErr ){
        *pzErr = sqlite3_mprintf("kv: key is %d bytes, the limit is %d",
                                 n, KV_MAX_KEY_BYTES);
      }
      return SQLITE_TOOBIG;
    }
    if( eType==SQLITE_TEXT && !bStored ){
      const uint8_t *z = sqlite3_value_text(pKey);
      if( z==0 && n>0 ) return SQLITE_NOMEM;
      rc = kvcKeyUtf8(z, n, pzErr);
      if( rc!=SQLITE_OK ) return rc;
    }
  }
  rc = kvcKeyAppend(pKey, eType, pOut);
  if( rc!=SQLITE_OK ) pOut->n = n0;     /* nothing half-appended */
  return rc;
}

int kv_key_encode(sqlite3_value *pKey, KvBuf *pOut, char **pzErr){
  return kvcKeyEncode(pKey, 0, pOut, pzErr);
}

int kv_key_encode_old(sqlite3_value *pKey, KvBuf *pOut, char **pzErr){
  return kvcKeyEncode(pKey, 1, pOut, pzErr);
}

int kv_key_encode_bound(sqlite3_value *pBound, KvBuf *pOut){
  int eType = pBound ? kvcType(pBound) : SQLITE_NULL;
  int n0 = pOut->n, rc;
  if( eType==SQLITE_NULL ) return SQLITE_EMPTY;
  rc = kvcKeyAppend(pBound, eType, pOut);
  if( rc!=SQLITE_OK ) pOut->n = n0;
  return rc;
}

/* Decode the escaped bytes a[0..n-1] of a text or blob key (after the
** tag, including the terminator).  Sets p->z/p->n, allocating p->zFree
** only when there were escapes and bCheck is 0 (bCheck: validate only, p->z
** then points at the still escaped bytes). */
static int kvcUnescape(const uint8_t *a, int n, int bCheck, KvcVal *p){
  int i, j, nOut = 0, bEsc = 0;
  for(i=0; i<n; i++){
    if( a[i]!=0x00 ){ nOut++; continue; }
    if( i+1>=n ) return SQLITE_CORRUPT;
    if( a[i+1]==0x00 ) break;
    if( a[i+1]!=0xFF ) return SQLITE_CORRUPT;
    bEsc = 1;
    nOut++;
    i++;
  }
  if( i!=n-2 ) return SQLITE_CORRUPT;          /* no or early terminator */
  p->n = nOut;
  if( !bEsc || bCheck ){
    p->z = a;
    return SQLITE_OK;
  }
  p->zFree = sqlite3_malloc64((sqlite3_uint64)nOut + 1);
  if( p->zFree==0 ) return SQLITE_NOMEM;
  for(i=0, j=0; j<nOut; i++, j++){
    p->zFree[j] = a[i];
    if( a[i]==0x00 ) i++;
  }
  p->z = p->zFree;
  return SQLITE_OK;
}

/* Decode a numeric key a[0..n-1] (tag included) into p as an integer or a
** real, following eKind (KVC_KIND_NONE: an integer when the number is one
** that fits int64, else a real).  Non-canonical bytes are corrupt. */
static int kvcNumDecode(const uint8_t *a, int n, int eKind, KvcVal *p){
  uint8_t aCanon[12];
  double f;
  int bInt;
  if( n!=10 && n!=12 ) return SQLITE_CORRUPT;
  f = kvcImageDouble(a+1);
  if( kvcIsNan(f) || (f==0.0 && kvcDoubleBits(f)!=0) ) return SQLITE_CORRUPT;
  bInt = (f>=-KVC_TWO63 && f<KVC_TWO63 && f==(double)(int64_t)f);
  if( n==12 || eKind==KVC_KIND_INT || (eKind==KVC_KIND_NONE && bInt) ){
    uint64_t off = n==12 ? ((uint64_t)a[10]<<8 | a[11]) : 0;
    if( !bInt || (n==12 && a[9]!=0x01) ) return SQLITE_CORRUPT;
    if( eKind==KVC_KIND_REAL || eKind==KVC_KIND_NEGZERO ){
      return SQLITE_CORRUPT;
    }
    p->eType = SQLITE_INTEGER;
    p->i = (int64_t)((uint64_t)(int64_t)f + off);
    /* Without an offset the canonical bytes are the tag, the image of f
    ** (which f was read from) and 0x00: only that last byte needs a look.
    ** With one, kvcIntKey() decides (a smaller F may have been due). */
    if( n==10 ) return a[9]==0x00 ? SQLITE_OK : SQLITE_CORRUPT;
    if( kvcIntKey(p->i, aCanon)!=n || memcmp(aCanon, a, (size_t)n)!=0 ){
      return SQLITE_CORRUPT;
    }
    return SQLITE_OK;
  }
  if( a[9]!=0x00 ) return SQLITE_CORRUPT;
  if( eKind==KVC_KIND_NEGZERO && f!=0.0 ) return SQLITE_CORRUPT;
  p->eType = SQLITE_FLOAT;
  p->r = (eKind==KVC_KIND_NEGZERO) ? -0.0 : f;
  return SQLITE_OK;
}

/* Decode key aKey/nKey with the numeric kind eKind. */
static int kvcKeyDecode(const uint8_t *aKey, int nKey, int eKind,
                        int bCheck, KvcVal *p){
  memset(p, 0, sizeof(*p));
  if( aKey==0 || nKey<1 ) return SQLITE_CORRUPT;
  switch( aKey[0] ){
    case KVC_KEY_NUM:
      return kvcNumDecode(aKey, nKey, eKind, p);
    case KVC_KEY_TEXT:
    case KVC_KEY_BLOB:
      if( eKind!=KVC_KIND_NONE ) return SQLITE_CORRUPT;
      p->eType = aKey[0]==KVC_KEY_TEXT ? SQLITE_TEXT : SQLITE_BLOB;
      return kvcUnescape(aKey+1, nKey-1, bCheck, p);
    default:
      return SQLITE_CORRUPT;
  }
}

int kv_key_check(const uint8_t *aKey, int nKey){
  KvcVal v;
  return kvcKeyDecode(aKey, nKey, KVC_KIND_NONE, 1, &v);
}

/* ---- values ---- */

/* The KVC_KIND_* of key pKey (NULL-safe). */
static int kvcKeyKind(sqlite3_value *pKey){
  double r;
  if( pKey==0 ) return KVC_KIND_NONE;
  switch( kvcType(pKey) ){
    case SQLITE_INTEGER: return KVC_KIND_INT;
    case SQLITE_FLOAT:
      r = sqlite3_value_double(pKey);
      return (r==0.0 && kvcDoubleBits(r)!=0) ? KVC_KIND_NEGZERO
                                              : KVC_KIND_REAL;
    default: return KVC_KIND_NONE;
  }
}

/* The low n bytes (0..8) of u, sign-extended to 64 bits. */
static int64_t kvcSignExtend(uint64_t u, int n){
  if( n==0 ) return 0;
  if( n<8 && (u>>(8*n-1) & 1) ) return (int64_t)(u | (~(uint64_t)0 << (8*n)));
  if( n<8 ) return (int64_t)(u & ~(~(uint64_t)0 << (8*n)));
  return (int64_t)u;
}

/* Append an integer payload: tag 0x01+n and the n low bytes of i, the
** fewest that sign-extend back to i. */
static int kvcAppendInt(KvBuf *pOut, int64_t i){
  uint8_t a[9];
  int n = 8, k;
  while( n>0 && kvcSignExtend((uint64_t)i, n-1)==i ) n--;
  a[0] = (uint8_t)(KVC_VAL_INT0 + n);
  for(k=0; k<n; k++) a[1+k] = (uint8_t)((uint64_t)i >> (8*(n-1-k)));
  return kv_buf_append(pOut, a, 1+n);
}

int kv_value_encode(sqlite3_value *pKey, sqlite3_value *pVal, KvBuf *pOut,
                    char **pzErr){
  uint8_t a[10];
  const uint8_t *z = 0;
  int n = 0, rc;
  int eType = pVal ? kvcType(pVal) : SQLITE_NULL;
  a[0] = (uint8_t)kvcKeyKind(pKey);
  switch( eType ){
    case SQLITE_NULL:
      a[1] = KVC_VAL_NULL;
      return kv_buf_append(pOut, a, 2);
    case SQLITE_INTEGER:
      rc = kv_buf_append(pOut, a, 1);
      if( rc==SQLITE_OK ){
        rc = kvcAppendInt(pOut, sqlite3_value_int64(pVal));
        if( rc!=SQLITE_OK ) pOut->n -= 1;
      }
      return rc;
    case SQLITE_FLOAT:
      a[1] = KVC_VAL_REAL;
      kvcPut64(a+2, kvcDoubleBits(sqlite3_value_double(pVal)));
      return kv_buf_append(pOut, a, 10);
  }
  rc = kvcValueBytes(pVal, eType, &z, &n);
  if( rc!=SQLITE_OK ) return rc;
  if( n>KV_MAX_VALUE_BYTES ){
    if( pzErr ){
      *pzErr = sqlite3_mprintf("kv: value is %d bytes, the limit is %d",
                               n, KV_MAX_VALUE_BYTES);
    }
    return SQLITE_TOOBIG;
  }
  a[1] = eType==SQLITE_TEXT ? KVC_VAL_TEXT : KVC_VAL_BLOB;
  rc = kv_buf_append(pOut, a, 2);
  if( rc==SQLITE_OK ){
    rc = kv_buf_append(pOut, z, n);
    if( rc!=SQLITE_OK ) pOut->n -= 2;   /* nothing half-appended */
  }
  return rc;
}

/* Decode the payload of value aVal/nVal (kind byte included). */
static int kvcValueDecode(const uint8_t *aVal, int nVal, KvcVal *p){
  int eTag, i;
  memset(p, 0, sizeof(*p));
  if( aVal==0 || nVal<2 ) return SQLITE_CORRUPT;
  if( (aVal[0] & KVC_KIND_MASK)>KVC_KIND_NEGZERO ) return SQLITE_CORRUPT;
  if( aVal[0] & KVC_KIND_DEADLINE ){
    /* skip the deadline: aVal[0] is not read below, only the tag on */
    if( nVal<10 ) return SQLITE_CORRUPT;
    aVal += 8;
    nVal -= 8;
  }
  eTag = aVal[1];
  if( eTag==KVC_VAL_NULL ){
    p->eType = SQLITE_NULL;
    return nVal==2 ? SQLITE_OK : SQLITE_CORRUPT;
  }
  if( eTag>=KVC_VAL_INT0 && eTag<=KVC_VAL_INT0+8 ){
    int n = eTag - KVC_VAL_INT0;
    uint64_t u = 0;
    if( nVal!=2+n ) return SQLITE_CORRUPT;
    for(i=0; i<n; i++) u = (u<<8) | aVal[2+i];
    p->eType = SQLITE_INTEGER;
    p->i = kvcSignExtend(u, n);
    return SQLITE_OK;
  }
  if( eTag==KVC_VAL_REAL ){
    if( nVal!=10 ) return SQLITE_CORRUPT;
    p->eType = SQLITE_FLOAT;
    p->r = kvcBitsDouble(kvcGet64(aVal+2));
    return kvcIsNan(p->r) ? SQLITE_CORRUPT : SQLITE_OK;
  }
  if( eTag!=KVC_VAL_TEXT && eTag!=KVC_VAL_BLOB ) return SQLITE_CORRUPT;
  p->eType = eTag==KVC_VAL_TEXT ? SQLITE_TEXT : SQLITE_BLOB;
  p->z = aVal+2;
  p->n = nVal-2;
  return SQLITE_OK;
}

/* The numeric kind recorded in a value, KVC_KIND_NONE when there is no
** value (nVal==0); SQLITE_CORRUPT for an impossible kind byte. */
static int kvcValueKind(const uint8_t *aVal, int nVal, int *peKind){
  *peKind = KVC_KIND_NONE;
  if( nVal==0 ) return SQLITE_OK;
  if( aVal==0 || nVal<0 ) return SQLITE_CORRUPT;
  if( (aVal[0] & KVC_KIND_MASK)>KVC_KIND_NEGZERO ) return SQLITE_CORRUPT;
  *peKind = aVal[0] & KVC_KIND_MASK;
  return SQLITE_OK;
}

/* ---- deadlines (per-entry TTL) ---- */

int kv_value_deadline(const uint8_t *aVal, int nVal, int64_t *piDeadline){
  if( aVal==0 || nVal<10 || (aVal[0] & KVC_KIND_DEADLINE)==0 ) return 0;
  *piDeadline = (int64_t)kvcGet64(aVal+1);
  return 1;
}

int kv_value_expired(const uint8_t *aVal, int nVal, int64_t iNow){
  int64_t iDeadline;
  return kv_value_deadline(aVal, nVal, &iDeadline) && iDeadline<=iNow;
}

int kv_value_set_deadline(KvBuf *pVal, int bDeadline, int64_t iDeadline){
  int bHas;
  if( pVal->n<2 ) return SQLITE_CORRUPT;
  bHas = (pVal->a[0] & KVC_KIND_DEADLINE)!=0;
  if( bHas && pVal->n<10 ) return SQLITE_CORRUPT;
  if( bDeadline && !bHas ){
    int rc = kv_buf_reserve(pVal, 8);
    if( rc!=SQLITE_OK ) return rc;
    memmove(pVal->a+9, pVal->a+1, (size_t)pVal->n-1);
    pVal->n += 8;
  }else if( !bDeadline && bHas ){
    memmove(pVal->a+1, pVal->a+9, (size_t)pVal->n-9);
    pVal->n -= 8;
  }
  if( bDeadline ){
    pVal->a[0] |= KVC_KIND_DEADLINE;
    kvcPut64(pVal->a+1, (uint64_t)iDeadline);
  }else{
    pVal->a[0] &= KVC_KIND_MASK;
  }
  return SQLITE_OK;
}

int kv_value_same_payload(const uint8_t *aA, int nA, const uint8_t *aB,
                          int nB){
  int64_t d;
  if( kv_value_deadline(aA, nA, &d) ){ aA += 8; nA -= 8; }
  if( kv_value_deadline(aB, nB, &d) ){ aB += 8; nB -= 8; }
  return nA==nB && nA>=1 && memcmp(aA+1, aB+1, (size_t)nA-1)==0;
}

/* ---- results and sqlite3_value objects ---- */

static void kvcResult(sqlite3_context *ctx, KvcVal *p,
                      void (*xDel)(void*)){
  switch( p->eType ){
    case SQLITE_INTEGER: sqlite3_result_int64(ctx, p->i); break;
    case SQLITE_FLOAT:   sqlite3_result_double(ctx, p->r); break;
    case SQLITE_TEXT:
      sqlite3_result_text64(ctx, p->n ? (const char*)p->z : "",
                            (sqlite3_uint64)p->n, xDel, SQLITE_UTF8);
      break;
    case SQLITE_BLOB:
      sqlite3_result_blob64(ctx, p->n ? (const void*)p->z : "",
                            (sqlite3_uint64)p->n, xDel);
      break;
    default: sqlite3_result_null(ctx); break;
  }
}

static int kvcResultError(sqlite3_context *ctx, int rc, const char *zWhat){
  if( rc==SQLITE_NOMEM ){
    sqlite3_result_error_nomem(ctx);
  }else{
    char *z = sqlite3_mprintf("kv: corrupt %s encoding", zWhat);
    sqlite3_result_error(ctx, z ? z : "kv: corrupt encoding", -1);
    sqlite3_result_error_code(ctx, rc);
    sqlite3_free(z);
  }
  return rc;
}

/* The integer of a canonical 10-byte numeric key (no offset) whose value
** records an integer or no kind, in *piOut: 1 if it is one, 0 if the key
** needs kvcKeyDecode (which then gives the same integer, or a real, or
** SQLITE_CORRUPT).  The common key of a scan, decoded without a KvcVal. */
/* The double is converted and converted back: it is an integer when the
** round trip gives it again, it lies in [-2^63, 2^63) (the conversion of
** anything outside, infinities and NaN included, is not used) and it is
** not -0.0 (whose round trip gives +0.0, equal to it).  Anything else
** (fractions, -0.0, infinities, NaN, |f| >= 2^63 but -2^63) is left to
** kvcKeyDecode. */
static int kvcIntKeyFast(const uint8_t *aKey, int nKey, const uint8_t *aVal,
                         int nVal, int64_t *piOut){
  const uint64_t SIGN = (uint64_t)1<<63;
  uint64_t u;
  double f;
  int64_t i;
  if( nKey!=10 || aKey==0 || aKey[0]!=KVC_KEY_NUM || aKey[9]!=0x00 ) return 0;
  if( nVal!=0 && (aVal==0 || nVal<0 || aVal[0]>KVC_KIND_INT) ) return 0;
  u = kvcGet64(aKey+1);
  u = (u & SIGN) ? (u & ~SIGN) : ~u;       /* the bits of the double */
  memcpy(&f, &u, sizeof(f));
  if( !(f>=-KVC_TWO63 && f<KVC_TWO63) ) return 0;
  i = (int64_t)f;
  if( (double)i!=f || (i==0 && u!=0) ) return 0;
  *piOut = i;
  return 1;
}

/* kv_key_result of a key that is not a canonical integer key (kept out
** of line so that the common case sets up no frame for a KvcVal). */
static __attribute__((noinline)) int kvcKeyResultDecode(
  sqlite3_context *ctx, const uint8_t *aKey, int nKey,
  const uint8_t *aVal, int nVal
){
  KvcVal v;
  int eKind;
  int rc;
  rc = kvcValueKind(aVal, nVal, &eKind);
  memset(&v, 0, sizeof(v));
  if( rc==SQLITE_OK ) rc = kvcKeyDecode(aKey, nKey, eKind, 0, &v);
  if( rc==SQLITE_OK ) kvcResult(ctx, &v, SQLITE_TRANSIENT);
  sqlite3_free(v.zFree);
  return rc==SQLITE_OK ? rc : kvcResultError(ctx, rc, "key");
}

int kv_key_result(sqlite3_context *ctx, const uint8_t *aKey, int nKey,
                  const uint8_t *aVal, int nVal){
  int64_t iKey;
  if( kvcIntKeyFast(aKey, nKey, aVal, nVal, &iKey) ){
    sqlite3_result_int64(ctx, iKey);
    return SQLITE_OK;
  }
  return kvcKeyResultDecode(ctx, aKey, nKey, aVal, nVal);
}

/* A text or blob value (the common case) goes straight to SQLite; any
** other is decoded (kvcValueDecode checks the same bytes the same way).
** A text whose bytes are followed by a NUL (bTerm) and hold none goes as
** a NUL-terminated string (length -1): SQLite marks it terminated, so
** sqlite3_value_text reads it where it is instead of making a terminated
** copy.  A text with an interior NUL keeps its length. */
static inline __attribute__((always_inline)) int kvcValueResult(
  sqlite3_context *ctx, const uint8_t *aVal, int nVal, void (*xDel)(void*),
  int bTerm
){
  KvcVal v;
  int rc;
  if( nVal>2 && aVal && aVal[0]<=KVC_KIND_NEGZERO ){
    if( aVal[1]==KVC_VAL_TEXT ){
      const char *z = (const char*)aVal+2;
      int n = nVal-2;
      if( bTerm && memchr(z, 0, (size_t)n)==0 ) n = -1;
      sqlite3_result_text(ctx, z, n, xDel);
      return SQLITE_OK;
    }
    if( aVal[1]==KVC_VAL_BLOB ){
      sqlite3_result_blob(ctx, aVal+2, nVal-2, xDel);
      return SQLITE_OK;
    }
  }
  rc = kvcValueDecode(aVal, nVal, &v);
  if( rc!=SQLITE_OK ) return kvcResultError(ctx, rc, "value");
  kvcResult(ctx, &v, xDel);
  return SQLITE_OK;
}

int kv_value_result(sqlite3_context *ctx, const uint8_t *aVal, int nVal){
  return kvcValueResult(ctx, aVal, nVal, SQLITE_TRANSIENT, 0);
}

int kv_value_result_entry(sqlite3_context *ctx, const uint8_t *aVal,
                          int nVal, int fEntry){
  int bTerm = (fEntry & KV_ENTRY_TERM)!=0;
  if( fEntry & KV_ENTRY_STABLE ){
    return kvcValueResult(ctx, aVal, nVal, SQLITE_STATIC, bTerm);
  }
  return kvcValueResult(ctx, aVal, nVal, SQLITE_TRANSIENT, bTerm);
}

/* SQLite's destructor of a value handed out by kv_value_result_pinned:
** z is the payload, 2 bytes (kind and type) after the pinned aVal. */
static void kvcPinnedRelease(void *z){
  kv_map_value_unpin((const uint8_t*)z - 2);
}

int kv_value_result_pinned(sqlite3_context *ctx, const uint8_t *aVal,
                           int nVal){
  if( nVal>2 && aVal[0]<=KVC_KIND_NEGZERO
   && (aVal[1]==KVC_VAL_TEXT || aVal[1]==KVC_VAL_BLOB) ){
    const uint8_t *z = aVal+2;
    int n = nVal-2;
    kv_map_value_pin(aVal);
    if( aVal[1]==KVC_VAL_BLOB ){
      sqlite3_result_blob(ctx, z, n, kvcPinnedRelease);
    }else{
      if( memchr(z, 0, (size_t)n)==0 ) n = -1;
      sqlite3_result_text(ctx, (const char*)z, n, kvcPinnedRelease);
    }
    return SQLITE_OK;
  }
  return kvcValueResult(ctx, aVal, nVal, SQLITE_TRANSIENT, 1);
}

int kv_value_result_unterm(sqlite3_context *ctx, const uint8_t *aVal,
                           int nVal, KvBuf *pScratch){
  if( nVal>2 && aVal[0]<=KVC_KIND_NEGZERO && aVal[1]==KVC_VAL_TEXT ){
    const uint8_t *z = aVal+2;
    int n = nVal-2;
    if( memchr(z, 0, (size_t)n)==0 ){
      kv_buf_reset(pScratch);
      if( kv_buf_reserve(pScratch, n+1)==SQLITE_OK ){
        memcpy(pScratch->a, z, (size_t)n);
        pScratch->a[n] = 0;
        sqlite3_result_text(ctx, (const char*)pScratch->a, -1,
                            SQLITE_TRANSIENT);
        return SQLITE_OK;
      }
    }
  }
  return kvcValueResult(ctx, aVal, nVal, SQLITE_TRANSIENT, 0);
}

/* The private connection that turns decoded values into sqlite3_value
** objects.  Opened on first use, closed by kv_codec_release(); kvcMutex
** guards both fields and every use of the statement. */
static pthread_mutex_t kvcMutex = PTHREAD_MUTEX_INITIALIZER;
static sqlite3 *kvcDb = 0;
static sqlite3_stmt *kvcEcho = 0;

static int kvcEchoOpen(void){
  int rc;
  if( kvcEcho ) return SQLITE_OK;
  if( kvcDb==0 ){
    rc = sqlite3_open_v2(":memory:", &kvcDb, SQLITE_OPEN_READWRITE
                         |SQLITE_OPEN_MEMORY|SQLITE_OPEN_PRIVATECACHE, 0);
    if( rc!=SQLITE_OK ){
      sqlite3_close(kvcDb);
      kvcDb = 0;
      return rc==SQLITE_NOMEM ? rc : SQLITE_ERROR;
    }
  }
  rc = sqlite3_prepare_v2(kvcDb, "SELECT ?1", -1, &kvcEcho, 0);
  return rc;
}

void kv_codec_release(void){
  if( pthread_mutex_trylock(&kvcMutex)!=0 ) return;    /* in use */
  sqlite3_finalize(kvcEcho);
  kvcEcho = 0;
  sqlite3_close(kvcDb);
  kvcDb = 0;
  pthread_mutex_unlock(&kvcMutex);
}

static int kvcBind(sqlite3_stmt *pStmt, KvcVal *p){
  switch( p->eType ){
    case SQLITE_INTEGER: return sqlite3_bind_int64(pStmt, 1, p->i);
    case SQLITE_FLOAT:   return sqlite3_bind_double(pStmt, 1, p->r);
    case SQLITE_TEXT:
      return sqlite3_bind_text64(pStmt, 1, p->n ? (const char*)p->z : "",
                                 (sqlite3_uint64)p->n, SQLITE_STATIC,
                                 SQLITE_UTF8);
    case SQLITE_BLOB:
      return sqlite3_bind_blob64(pStmt, 1, p->n ? (const void*)p->z : "",
                                 (sqlite3_uint64)p->n, SQLITE_STATIC);
    default: return sqlite3_bind_null(pStmt, 1);
  }
}

/* A new sqlite3_value holding *p, or NULL with *pRc set. */
static sqlite3_value *kvcDup(KvcVal *p, int *pRc){
  sqlite3_value *pOut = 0;
  int rc;
  pthread_mutex_lock(&kvcMutex);
  rc = kvcEchoOpen();
  if( rc==SQLITE_OK ) rc = kvcBind(kvcEcho, p);
  if( rc==SQLITE_OK ){
    if( sqlite3_step(kvcEcho)!=SQLITE_ROW ){
      rc = sqlite3_reset(kvcEcho);
      if( rc==SQLITE_OK ) rc = SQLITE_ERROR;
    }
  }
  if( rc==SQLITE_OK ){
    pOut = sqlite3_value_dup(sqlite3_column_value(kvcEcho, 0));
    if( pOut==0 ) rc = SQLITE_NOMEM;
  }
  if( kvcEcho ){
    sqlite3_reset(kvcEcho);
    sqlite3_clear_bindings(kvcEcho);
  }
  pthread_mutex_unlock(&kvcMutex);
  *pRc = rc;
  return pOut;
}

sqlite3_value *kv_key_to_value(const uint8_t *aKey, int nKey,
                               const uint8_t *aVal, int nVal, int *pRc){
  KvcVal v;
  sqlite3_value *pOut = 0;
  int eKind;
  int rc = kvcValueKind(aVal, nVal, &eKind);
  memset(&v, 0, sizeof(v));
  if( rc==SQLITE_OK ) rc = kvcKeyDecode(aKey, nKey, eKind, 0, &v);
  if( rc==SQLITE_OK ) pOut = kvcDup(&v, &rc);
  sqlite3_free(v.zFree);
  *pRc = rc;
  return pOut;
}

sqlite3_value *kv_value_to_value(const uint8_t *aVal, int nVal, int *pRc){
  KvcVal v;
  int rc = kvcValueDecode(aVal, nVal, &v);
  if( rc!=SQLITE_OK ){
    *pRc = rc;
    return 0;
  }
  return kvcDup(&v, pRc);
}

/* ---- C datums (KvDatum) ---- */

/* KvcVal and KvDatum hold the same fields. */
static void kvcDatum(const KvcVal *v, KvDatum *p){
  p->eType = v->eType;
  p->i = v->i;
  p->r = v->r;
  p->z = v->z;
  p->n = v->n;
  p->zFree = v->zFree;
  if( (p->eType==SQLITE_TEXT || p->eType==SQLITE_BLOB) && p->z==0 ){
    p->z = (const uint8_t*)"";
  }
}

int kv_key_decode(const uint8_t *aKey, int nKey, const uint8_t *aVal,
                  int nVal, KvDatum *p){
  KvcVal v;
  int eKind;
  int rc = kvcValueKind(aVal, nVal, &eKind);
  memset(&v, 0, sizeof(v));
  memset(p, 0, sizeof(*p));
  p->eType = SQLITE_NULL;
  if( rc==SQLITE_OK ) rc = kvcKeyDecode(aKey, nKey, eKind, 0, &v);
  if( rc!=SQLITE_OK ){
    sqlite3_free(v.zFree);
    return rc;
  }
  kvcDatum(&v, p);
  return SQLITE_OK;
}

int kv_value_decode(const uint8_t *aVal, int nVal, KvDatum *p){
  KvcVal v;
  int rc = kvcValueDecode(aVal, nVal, &v);
  memset(p, 0, sizeof(*p));
  p->eType = SQLITE_NULL;
  if( rc==SQLITE_OK ) kvcDatum(&v, p);
  return rc;
}

void kv_datum_clear(KvDatum *p){
  sqlite3_free(p->zFree);
  memset(p, 0, sizeof(*p));
  p->eType = SQLITE_NULL;
}

/* ---- type names for messages ---- */

const char *kv_value_type_name(sqlite3_value *v){
  switch( sqlite3_value_type(v) ){
    case SQLITE_INTEGER: return "integer";
    case SQLITE_FLOAT:   return "real";
    case SQLITE_TEXT:    return "text";
    case SQLITE_BLOB:    return "blob";
    default:             return "NULL";
  }
}

/* ---- JSON rendering of keys ---- */

int kv_json_text(KvBuf *pOut, const uint8_t *z, int n){
  static const char hex[] = "0123456789abcdef";
  int i, rc = kv_buf_append(pOut, "\"", 1);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    uint8_t c = z[i];
    int j = i;
    while( j<n && z[j]!='"' && z[j]!='\\' && z[j]>=0x20 ) j++;
    if( j>i ){                    /* a run that needs no escape, at once */
      rc = kv_buf_append(pOut, &z[i], j-i);
      i = j-1;
      continue;
    }
    if( c=='"' || c=='\\' ){
      char a[2] = { '\\', (char)c };
      rc = kv_buf_append(pOut, a, 2);
    }else if( c<0x20 ){
      char a[6] = { '\\', 'u', '0', '0', hex[c>>4], hex[c&15] };
      rc = kv_buf_append(pOut, a, 6);
    }else{
      rc = kv_buf_append(pOut, &z[i], 1);
    }
  }
  return rc==SQLITE_OK ? kv_buf_append(pOut, "\"", 1) : rc;
}

static int kvcJsonHex(KvBuf *pOut, const uint8_t *z, int n){
  static const char hex[] = "0123456789abcdef";
  int i, rc = kv_buf_append(pOut, "{\"hex\":\"", 8);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    char a[2] = { hex[z[i]>>4], hex[z[i]&15] };
    rc = kv_buf_append(pOut, a, 2);
  }
  return rc==SQLITE_OK ? kv_buf_append(pOut, "\"}", 2) : rc;
}

/* Write integer v in decimal to z (at least 20 bytes, no NUL); returns
** the length.  Digits come from the unsigned magnitude, so INT64_MIN
** needs no special case. */
static int kvcIntText(int64_t v, char *z){
  char a[20];
  uint64_t u = v<0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  int i = (int)sizeof(a), n = 0;
  do{ a[--i] = (char)('0' + u%10); u /= 10; }while( u );
  if( v<0 ) z[n++] = '-';
  memcpy(z+n, a+i, sizeof(a)-i);
  return n + (int)sizeof(a) - i;
}

int kv_key_json(const uint8_t *aKey, int nKey, KvBuf *pOut){
  KvcVal v;
  char *z = 0;
  int rc;
  if( nKey==10 && aKey[0]==KVC_KEY_NUM && aKey[9]==0x00 ){
    /* An integer whose double is exact (the common key): what
    ** kvcNumDecode would answer, its canonical re-encoding being these
    ** very bytes, without building a KvcVal. */
    double f = kvcImageDouble(aKey+1);
    if( f>=-KVC_TWO63 && f<KVC_TWO63 && f==(double)(int64_t)f
     && !(f==0.0 && kvcDoubleBits(f)!=0) ){
      char zInt[24];
      return kv_buf_append(pOut, zInt, kvcIntText((int64_t)f, zInt));
    }
  }
  rc = kvcKeyDecode(aKey, nKey, KVC_KIND_NONE, 0, &v);
  if( rc==SQLITE_OK ){
    switch( v.eType ){
      case SQLITE_INTEGER: {
        char zInt[24];
        rc = kv_buf_append(pOut, zInt, kvcIntText(v.i, zInt));
        break;
      }
      case SQLITE_FLOAT:
        z = v.r>1e308 ? sqlite3_mprintf("9e999")
          : v.r<-1e308 ? sqlite3_mprintf("-9e999")
          : sqlite3_mprintf("%!.17g", v.r);
        break;
      case SQLITE_TEXT: rc = kv_json_text(pOut, v.z, v.n); break;
      default: rc = kvcJsonHex(pOut, v.z, v.n); break;
    }
  }
  if( rc==SQLITE_OK && v.eType==SQLITE_FLOAT ){
    rc = z ? kv_buf_append(pOut, z, (int)strlen(z)) : SQLITE_NOMEM;
  }
  sqlite3_free(z);
  sqlite3_free(v.zFree);
  return rc;
}

/* ---- keys from C values ---- */

int kv_key_append_int(KvBuf *pOut, int64_t i){
  if( kv_buf_reserve(pOut, KV_KEY_INT_BYTES)!=SQLITE_OK ) return SQLITE_NOMEM;
  pOut->n += kvcIntKey(i, pOut->a + pOut->n);
  return SQLITE_OK;
}

int kv_key_encode_c(int eType, int64_t i, double r, const void *z, int n,
                    KvBuf *pOut, char **pzErr){
  uint8_t a[12];
  switch( eType ){
    case SQLITE_INTEGER: return kv_buf_append(pOut, a, kvcIntKey(i, a));
    case SQLITE_FLOAT:
      if( kvcIsNan(r) ){
        kvcSetErr(pzErr, "kv: key must not be NULL");
        return SQLITE_CONSTRAINT;
      }
      return kv_buf_append(pOut, a, kvcRealKey(r, a));
    case SQLITE_TEXT:
    case SQLITE_BLOB:
      if( n>KV_MAX_KEY_BYTES ){
        if( pzErr ){
          *pzErr = sqlite3_mprintf("kv: key is %d bytes, the limit is %d",
                                   n, KV_MAX_KEY_BYTES);
        }
        return SQLITE_TOOBIG;
      }
      if( eType==SQLITE_TEXT && kvcKeyUtf8(z, n, pzErr)!=SQLITE_OK ){
        return SQLITE_MISMATCH;
      }
      return kvcAppendEscaped(pOut, eType==SQLITE_TEXT ? KVC_KEY_TEXT
                                                       : KVC_KEY_BLOB, z, n);
    default:
      kvcSetErr(pzErr, "kv: key must not be NULL");
      return SQLITE_CONSTRAINT;
  }
}

/* ---- derived data (ext/kv_derived.c): composite keys and binding ---- */

int kv_key_length(const uint8_t *aKey, int nKey){
  int i;
  if( nKey<1 ) return -1;
  if( aKey[0]==KVC_KEY_NUM ){
    if( nKey<10 ) return -1;
    if( aKey[9]==0x01 ) return nKey>=12 ? 12 : -1;
    return 10;
  }
  if( aKey[0]!=KVC_KEY_TEXT && aKey[0]!=KVC_KEY_BLOB ) return -1;
  for(i=1; i+1<nKey; i++){
    if( aKey[i]!=0x00 ) continue;
    if( aKey[i+1]==0x00 ) return i+2;
    i++;                                /* 0x00 0xFF: an escaped NUL */
  }
  return -1;
}

static int kvcBindParam(sqlite3_stmt *pStmt, int iParam, KvcVal *p){
  /* bytes inside the caller's buffer are bound without a copy */
  void (*xDel)(void*) = p->zFree ? SQLITE_TRANSIENT : SQLITE_STATIC;
  switch( p->eType ){
    case SQLITE_INTEGER: return sqlite3_bind_int64(pStmt, iParam, p->i);
    case SQLITE_FLOAT:   return sqlite3_bind_double(pStmt, iParam, p->r);
    case SQLITE_TEXT:
      return sqlite3_bind_text64(pStmt, iParam, p->n ? (const char*)p->z : "",
                                 (sqlite3_uint64)p->n, xDel, SQLITE_UTF8);
    case SQLITE_BLOB:
      return sqlite3_bind_blob64(pStmt, iParam, p->n ? (const void*)p->z : "",
                                 (sqlite3_uint64)p->n, xDel);
    default: return sqlite3_bind_null(pStmt, iParam);
  }
}

int kv_key_bind(sqlite3_stmt *pStmt, int iParam, const uint8_t *aKey,
                int nKey, const uint8_t *aVal, int nVal){
  KvcVal v;
  int eKind;
  int rc = kvcValueKind(aVal, nVal, &eKind);
  memset(&v, 0, sizeof(v));
  if( rc==SQLITE_OK ) rc = kvcKeyDecode(aKey, nKey, eKind, 0, &v);
  if( rc==SQLITE_OK ) rc = kvcBindParam(pStmt, iParam, &v);
  sqlite3_free(v.zFree);
  return rc;
}

int kv_value_bind(sqlite3_stmt *pStmt, int iParam, const uint8_t *aVal,
                  int nVal){
  KvcVal v;
  int rc = kvcValueDecode(aVal, nVal, &v);
  if( rc==SQLITE_OK ) rc = kvcBindParam(pStmt, iParam, &v);
  return rc;
}

int kv_value_encode_text(const uint8_t *aKind, const char *z, int n,
                         KvBuf *pOut){
  uint8_t aHdr[2];
  int rc;
  aHdr[0] = aKind ? (uint8_t)(aKind[0] & KVC_KIND_MASK) : KVC_KIND_NONE;
  aHdr[1] = KVC_VAL_TEXT;
  rc = kv_buf_append(pOut, aHdr, 2);
  if( rc==SQLITE_OK && n>0 ){
    rc = kv_buf_append(pOut, z, n);
    if( rc!=SQLITE_OK ) pOut->n -= 2;
  }
  return rc;
}

int kv_value_encode_blob(const void *z, int n, KvBuf *pOut){
  uint8_t aHdr[2];
  int rc;
  aHdr[0] = KVC_KIND_NONE;
  aHdr[1] = KVC_VAL_BLOB;
  rc = kv_buf_append(pOut, aHdr, 2);
  if( rc==SQLITE_OK && n>0 ){
    rc = kv_buf_append(pOut, z, n);
    if( rc!=SQLITE_OK ) pOut->n -= 2;
  }
  return rc;
}

const char *kv_value_text(const uint8_t *aVal, int nVal, int *pn){
  KvcVal v;
  if( kvcValueDecode(aVal, nVal, &v)!=SQLITE_OK || v.eType!=SQLITE_TEXT ){
    return 0;
  }
  *pn = v.n;
  return v.n ? (const char*)v.z : "";
}
