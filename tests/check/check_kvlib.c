/*
** check_kvlib.c -- the "kvlib" suite: the KV key/value codec
** (ext/kv_codec.c) and the copy-on-write ordered map (ext/kv_map.c).
**
** The key order is checked against a real SQLite table of the same values
** (ORDER BY and the comparison operators are the oracle); the map against
** a sorted-array model under random operations, with snapshots taken along
** the way that must never change, and under concurrent readers and writers.
** The text form of key versions (ext/kv_version.c) is checked against
** printf's hex digits, and its parser against every byte value at every
** digit position.
** Set KVLIB_TORTURE=N to multiply the random rounds by N.
*/
#include "config.h"
#include "tests/check/harness.h"
#define SQLITE_CORE 1            /* the ext/ headers, linked directly */
#include "ext/kv/codec.h"
#include "ext/kv/map.h"
#include "ext/kv/kv.h"

#include <float.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

/* Check's own ck_assert macros record every passing assertion (a write
** system call each), far too slow for the random loops below; these call
** into Check only when they fail. */
#define T_ASSERT(c) do{ if( !(c) ){ \
  ck_abort_msg("%s:%d: assertion '%s' failed", __FILE__, __LINE__, #c); } \
}while(0)
#define T_MSG(c, ...) do{ if( !(c) ) ck_abort_msg(__VA_ARGS__); }while(0)
#define T_EQ(a, b) do{ long long x_ = (long long)(a), y_ = (long long)(b); \
  if( x_!=y_ ){ ck_abort_msg("%s:%d: %s == %s failed: %lld != %lld", \
                 __FILE__, __LINE__, #a, #b, x_, y_); } \
}while(0)


static uint64_t rngState;
static void rng_seed(uint64_t s){ rngState = s*0x9E3779B97F4A7C15ull + 1; }
static uint64_t rng(void){
  uint64_t x = rngState;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  rngState = x;
  return x * 0x2545F4914F6CDD1Dull;
}
static int rng_below(int n){ return (int)(rng() % (uint64_t)n); }

static int torture(void){
  const char *z = getenv("KVLIB_TORTURE");
  int n = z ? atoi(z) : 1;
  return n>0 ? n : 1;
}

static double bits_double(uint64_t u){ double r; memcpy(&r, &u, 8); return r; }
static uint64_t double_bits(double r){ uint64_t u; memcpy(&u, &r, 8); return u; }

/* A private connection that makes sqlite3_value objects for the tests. */
static sqlite3 *tvDb = 0;
static sqlite3_stmt *tvStmt = 0;

static sqlite3_stmt *tv_stmt(void){
  if( tvStmt==0 ){
    T_EQ(sqlite3_open(":memory:", &tvDb), SQLITE_OK);
    T_EQ(sqlite3_prepare_v2(tvDb, "SELECT ?1", -1, &tvStmt, 0),
                     SQLITE_OK);
  }
  return tvStmt;
}

static sqlite3_value *tv_finish(sqlite3_stmt *p){
  sqlite3_value *v;
  T_EQ(sqlite3_step(p), SQLITE_ROW);
  v = sqlite3_value_dup(sqlite3_column_value(p, 0));
  T_ASSERT((v)!=NULL);
  sqlite3_reset(p);
  sqlite3_clear_bindings(p);
  return v;
}

static sqlite3_value *tv_int(int64_t i){
  sqlite3_stmt *p = tv_stmt();
  sqlite3_bind_int64(p, 1, i);
  return tv_finish(p);
}
static sqlite3_value *tv_real(double r){
  sqlite3_stmt *p = tv_stmt();
  sqlite3_bind_double(p, 1, r);
  return tv_finish(p);
}
static sqlite3_value *tv_text(const char *z, int n){
  sqlite3_stmt *p = tv_stmt();
  sqlite3_bind_text(p, 1, z, n, SQLITE_TRANSIENT);
  return tv_finish(p);
}
static sqlite3_value *tv_blob(const void *z, int n){
  sqlite3_stmt *p = tv_stmt();
  if( n==0 ) sqlite3_bind_zeroblob(p, 1, 0);
  else sqlite3_bind_blob(p, 1, z, n, SQLITE_TRANSIENT);
  return tv_finish(p);
}
static sqlite3_value *tv_null(void){
  return tv_finish(tv_stmt());
}

static void tv_close(void){
  sqlite3_finalize(tvStmt);
  sqlite3_close(tvDb);
  tvStmt = 0;
  tvDb = 0;
}

/* Encode key v into a fresh buffer (must succeed).  The codec tests feed
** text of any bytes, so they use the encoding without the UTF-8 rule of
** new keys (kv_key_encode_old; the rule has its own test). */
static void enc_key(sqlite3_value *v, KvBuf *p){
  char *zErr = 0;
  int rc = kv_key_encode_old(v, p, &zErr);
  T_MSG(rc==SQLITE_OK, "kv_key_encode rc=%d %s", rc, zErr?zErr:"");
}

static int buf_cmp(const KvBuf *a, const KvBuf *b){
  int n = a->n<b->n ? a->n : b->n;
  int c = n ? memcmp(a->a, b->a, (size_t)n) : 0;
  if( c ) return c<0 ? -1 : 1;
  return a->n<b->n ? -1 : a->n>b->n ? 1 : 0;
}

/* Two values equal in type and exact bytes (-0.0 differs from 0.0). */
static int value_identical(sqlite3_value *a, sqlite3_value *b){
  int t = sqlite3_value_type(a);
  if( t!=sqlite3_value_type(b) ) return 0;
  switch( t ){
    case SQLITE_INTEGER:
      return sqlite3_value_int64(a)==sqlite3_value_int64(b);
    case SQLITE_FLOAT:
      return double_bits(sqlite3_value_double(a))
          ==double_bits(sqlite3_value_double(b));
    case SQLITE_TEXT: case SQLITE_BLOB: {
      const void *za = t==SQLITE_TEXT ? (const void*)sqlite3_value_text(a)
                                      : sqlite3_value_blob(a);
      const void *zb = t==SQLITE_TEXT ? (const void*)sqlite3_value_text(b)
                                      : sqlite3_value_blob(b);
      int n = sqlite3_value_bytes(a);
      return n==sqlite3_value_bytes(b) && (n==0 || memcmp(za, zb, n)==0);
    }
    default:
      return 1;
  }
}

/* ---- value generation ---- */

#define TWO53 9007199254740992ll
#define TWO62 4611686018427387904ll

static const int64_t aSpecialInt[] = {
  0, 1, -1, 2, -2, 255, 256, -256, 65535, 1000000007,
  INT64_MAX, INT64_MIN, INT64_MAX-1, INT64_MIN+1,
  TWO53, TWO53+1, TWO53-1, TWO53+2, TWO53+3, -TWO53, -TWO53-1, -TWO53+1,
  -TWO53-2, -TWO53-3, TWO62, TWO62+1, TWO62-1, -TWO62, -TWO62-1, -TWO62+1,
  INT64_MAX-511, INT64_MAX-512, INT64_MAX-513, INT64_MAX-1023,
  INT64_MAX-1024, INT64_MIN+511, INT64_MIN+512, INT64_MIN+513,
  INT64_MIN+1024, INT64_MIN+1025,
};
static const double aSpecialReal[] = {
  0.0, -0.0, 1.0, -1.0, 2.0, 2.5, -2.5, 0.1, 1e-300, -1e-300,
  4.9406564584124654e-324, -4.9406564584124654e-324, 2.2250738585072014e-308,
  DBL_MAX, -DBL_MAX, 1.0/0.0, -1.0/0.0,
  9007199254740992.0, 9007199254740994.0, -9007199254740992.0,
  -9007199254740994.0, 4611686018427387904.0, -4611686018427387904.0,
  9223372036854775808.0, -9223372036854775808.0, 9223372036854774784.0,
  -9223372036854774784.0, 18446744073709551616.0, 1e19, -1e19,
};
static const char *azSpecialText[] = {
  "", "a", "ab", "abc", "b", "A", "\x7f", "\xc3\xa9", "\xf0\x9f\x98\x80", "zz",
};

static sqlite3_value *gen_random_value(void){
  int k = rng_below(100);
  char z[16];
  int n, i;
  if( k<10 ){
    return tv_int(aSpecialInt[rng_below(
        (int)(sizeof(aSpecialInt)/sizeof(aSpecialInt[0])))]);
  }
  if( k<20 ){
    return tv_real(aSpecialReal[rng_below(
        (int)(sizeof(aSpecialReal)/sizeof(aSpecialReal[0])))]);
  }
  if( k<30 ) return tv_int((int64_t)rng() >> rng_below(64));
  if( k<35 ) return tv_int(rng_below(21) - 10);
  if( k<40 ){                      /* a double near a random big integer */
    int64_t i0 = (int64_t)rng() >> rng_below(12);
    uint64_t u = double_bits((double)i0);
    return tv_real(bits_double(u + (uint64_t)(rng_below(5) - 2)));
  }
  if( k<45 ){                      /* an integer near a big double */
    int64_t i0 = (int64_t)rng() >> rng_below(12);
    double r = (double)i0;
    if( r>=9223372036854775808.0 ) r = 9223372036854774784.0;
    return tv_int((int64_t)r + rng_below(2049) - 1024);
  }
  if( k<55 ){
    uint64_t u;
    do{ u = rng(); }while( ((u>>52)&0x7ff)==0x7ff && (u<<12)!=0 );
    return tv_real(bits_double(u));
  }
  if( k<60 ) return tv_real((double)(rng_below(41)-20) / 4.0);
  if( k<65 ){
    const char *zz = azSpecialText[rng_below(
        (int)(sizeof(azSpecialText)/sizeof(azSpecialText[0])))];
    return tv_text(zz, (int)strlen(zz));
  }
  n = rng_below(6);
  for(i=0; i<n; i++){
    static const char aAlpha[] = {0, 1, 'a', 'b', (char)0xff, (char)0xc3};
    z[i] = aAlpha[rng_below(6)];
  }
  if( k<82 ) return tv_text(z, n);
  return tv_blob(z, n);
}

/* ---- key order against SQLite ---- */

/* sign of SQLite's comparison of a and b (BINARY, no affinity) */
static int sqlite_cmp(sqlite3_stmt *pCmp, sqlite3_value *a,
                      sqlite3_value *b){
  int c;
  sqlite3_bind_value(pCmp, 1, a);
  sqlite3_bind_value(pCmp, 2, b);
  T_EQ(sqlite3_step(pCmp), SQLITE_ROW);
  c = sqlite3_column_int(pCmp, 0);
  sqlite3_reset(pCmp);
  return c;
}

/* True when SQLite's own comparison of a and b cannot serve as the oracle
** in this run: under Valgrind, memcheck computes long double arithmetic in
** double precision, so SQLite compares an integer beyond 2^53 with a real
** after rounding the integer (it calls -9223372036854775297 equal to
** -9223372036854775808.0).  The exact order of such pairs is checked by
** test_kvlib_key_big_integers_order_exactly_against_reals. */
static int oracle_inexact(sqlite3_value *a, sqlite3_value *b){
  int ta = sqlite3_value_type(a), tb = sqlite3_value_type(b);
  sqlite3_value *pInt;
  sqlite3_int64 i;
  if( !th_under_valgrind() ) return 0;
  if( ta==SQLITE_INTEGER && tb==SQLITE_FLOAT ) pInt = a;
  else if( ta==SQLITE_FLOAT && tb==SQLITE_INTEGER ) pInt = b;
  else return 0;
  i = sqlite3_value_int64(pInt);
  return i>TWO53 || i< -TWO53;
}

#define ORDER_N 1500

START_TEST(test_kvlib_key_order_matches_sqlite_order_by){
  sqlite3 *db = 0;
  sqlite3_stmt *pIns = 0, *pSel = 0, *pCmp = 0;
  sqlite3_value **apVal;
  KvBuf *aEnc;
  int nVal = ORDER_N * torture();
  int i, n = 0;
  rng_seed(1000 + _i);
  apVal = calloc(nVal, sizeof(*apVal));
  aEnc = calloc(nVal, sizeof(*aEnc));
  T_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  th_exec(db, "CREATE TABLE t(v)");
  sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?1)", -1, &pIns, 0);
  for(i=0; i<nVal; i++){
    sqlite3_value *v = gen_random_value();
    sqlite3_bind_value(pIns, 1, v);
    T_EQ(sqlite3_step(pIns), SQLITE_DONE);
    sqlite3_reset(pIns);
    sqlite3_value_free(v);
  }
  sqlite3_prepare_v2(db, "SELECT v FROM t ORDER BY v", -1, &pSel, 0);
  sqlite3_prepare_v2(db, "SELECT (?1>?2)-(?1<?2)", -1, &pCmp, 0);
  while( sqlite3_step(pSel)==SQLITE_ROW ){
    apVal[n] = sqlite3_value_dup(sqlite3_column_value(pSel, 0));
    enc_key(apVal[n], &aEnc[n]);
    n++;
  }
  T_EQ(n, nVal);
  /* Consecutive rows of ORDER BY: equal encodings exactly when SQLite
  ** says equal, otherwise ascending. */
  for(i=0; i+1<n; i++){
    int c = buf_cmp(&aEnc[i], &aEnc[i+1]);
    int s = sqlite_cmp(pCmp, apVal[i], apVal[i+1]);
    T_MSG(s<=0, "ORDER BY not sorted at %d", i);
    if( oracle_inexact(apVal[i], apVal[i+1]) ) continue;
    T_MSG(c==s, "row %d: memcmp %d, sqlite %d (%s vs %s)", i, c, s,
                  sqlite3_value_text(apVal[i]), sqlite3_value_text(apVal[i+1]));
  }
  /* Random pairs. */
  for(i=0; i<4*n; i++){
    int a = rng_below(n), b = rng_below(n);
    if( oracle_inexact(apVal[a], apVal[b]) ) continue;
    T_EQ(buf_cmp(&aEnc[a], &aEnc[b]),
                     sqlite_cmp(pCmp, apVal[a], apVal[b]));
  }
  for(i=0; i<n; i++){ sqlite3_value_free(apVal[i]); kv_buf_free(&aEnc[i]); }
  free(apVal); free(aEnc);
  sqlite3_finalize(pIns); sqlite3_finalize(pSel); sqlite3_finalize(pCmp);
  sqlite3_close(db);
  tv_close();
}
END_TEST

/* Pairs of an integer and a real that SQLite considers equal. */
static const struct { int64_t i; double r; } aEqualPair[] = {
  {0, 0.0}, {0, -0.0}, {2, 2.0}, {-7, -7.0}, {TWO53, 9007199254740992.0},
  {TWO53+2, 9007199254740994.0}, {INT64_MIN, -9223372036854775808.0},
  {INT64_MAX-1023, 9223372036854774784.0}, {TWO62, 4611686018427387904.0},
};

START_TEST(test_kvlib_key_equal_numbers_have_equal_bytes){
  sqlite3_value *a = tv_int(aEqualPair[_i].i);
  sqlite3_value *b = tv_real(aEqualPair[_i].r);
  KvBuf x = {0}, y = {0};
  enc_key(a, &x);
  enc_key(b, &y);
  T_EQ(buf_cmp(&x, &y), 0);
  kv_buf_free(&x); kv_buf_free(&y);
  sqlite3_value_free(a); sqlite3_value_free(b);
  tv_close();
}
END_TEST

/* Numbers that must be distinct keys in the stated order. */
START_TEST(test_kvlib_key_big_integers_order_exactly_against_reals){
  sqlite3_value *aV[] = {
    tv_real(-1.0/0.0), tv_int(INT64_MIN), tv_int(INT64_MIN+1),
    tv_real(-9223372036854774784.0), tv_int(INT64_MIN+1025),
    tv_int(-TWO53-1), tv_real(-9007199254740992.0), tv_int(-TWO53+1),
    tv_real(-0.5), tv_int(0), tv_real(4.9406564584124654e-324),
    tv_real(0.5), tv_int(TWO53-1), tv_real(9007199254740992.0),
    tv_int(TWO53+1), tv_real(9007199254740994.0), tv_int(TWO53+3),
    tv_int(INT64_MAX-1024), tv_real(9223372036854774784.0),
    tv_int(INT64_MAX-1022), tv_int(INT64_MAX), tv_real(9223372036854775808.0),
    tv_real(1.0/0.0), tv_text("", 0), tv_text("\0", 1), tv_text("a", 1),
    tv_text("a\0", 2), tv_text("a\0b", 3), tv_text("a\x01", 2),
    tv_text("ab", 2), tv_blob("", 0), tv_blob("\0", 1), tv_blob("\0\0", 2),
    tv_blob("\0\xff", 2), tv_blob("\x01", 1), tv_blob("\xff", 1),
  };
  int n = (int)(sizeof(aV)/sizeof(aV[0]));
  KvBuf a = {0}, b = {0};
  int i;
  for(i=0; i+1<n; i++){
    kv_buf_reset(&a); kv_buf_reset(&b);
    enc_key(aV[i], &a);
    enc_key(aV[i+1], &b);
    T_MSG(buf_cmp(&a, &b)<0, "item %d does not sort before %d", i, i+1);
  }
  for(i=0; i<n; i++) sqlite3_value_free(aV[i]);
  kv_buf_free(&a); kv_buf_free(&b);
  tv_close();
}
END_TEST

/* ---- round trips ---- */

/* Encode key and value, decode them back through kv_key_to_value and
** kv_value_to_value, and check type and bytes. */
static void check_round_trip(sqlite3_value *k, sqlite3_value *v){
  KvBuf kb = {0}, vb = {0};
  sqlite3_value *k2, *v2;
  int rc;
  enc_key(k, &kb);
  T_EQ(kv_value_encode(k, v, &vb, 0), SQLITE_OK);
  T_EQ(kv_key_check(kb.a, kb.n), SQLITE_OK);
  k2 = kv_key_to_value(kb.a, kb.n, vb.a, vb.n, &rc);
  T_EQ(rc, SQLITE_OK);
  v2 = kv_value_to_value(vb.a, vb.n, &rc);
  T_EQ(rc, SQLITE_OK);
  T_MSG(value_identical(k, k2), "key %s type %d came back as %s",
                sqlite3_value_text(k), sqlite3_value_type(k),
                sqlite3_value_text(k2));
  T_MSG(value_identical(v, v2), "value %s came back as %s",
                sqlite3_value_text(v), sqlite3_value_text(v2));
  sqlite3_value_free(k2); sqlite3_value_free(v2);
  kv_buf_free(&kb); kv_buf_free(&vb);
}

START_TEST(test_kvlib_round_trip_keeps_type_and_bytes){
  int i;
  rng_seed(77);
  for(i=0; i<3000*torture(); i++){
    sqlite3_value *k = gen_random_value();
    sqlite3_value *v = rng_below(10)==0 ? tv_null() : gen_random_value();
    check_round_trip(k, v);
    sqlite3_value_free(k); sqlite3_value_free(v);
  }
  tv_close();
}
END_TEST

START_TEST(test_kvlib_round_trip_edge_values){
  sqlite3_value *aV[] = {
    tv_null(), tv_int(0), tv_int(1), tv_int(-1), tv_int(127), tv_int(128),
    tv_int(-128), tv_int(-129), tv_int(32767), tv_int(-32769),
    tv_int(2147483648ll), tv_int(-2147483649ll), tv_int(INT64_MAX),
    tv_int(INT64_MIN), tv_int(TWO53+1), tv_real(-0.0), tv_real(0.0),
    tv_real(DBL_MAX), tv_real(-DBL_MAX), tv_real(4.9406564584124654e-324),
    tv_real(1.0/0.0), tv_real(-1.0/0.0), tv_real(9223372036854775808.0),
    tv_text("", 0), tv_text("a\0b\0", 4), tv_text("\0", 1),
    tv_blob("", 0), tv_blob("\0\0\xff", 3), tv_blob("x", 1),
  };
  int n = (int)(sizeof(aV)/sizeof(aV[0]));
  int i, j;
  for(i=1; i<n; i++){                 /* every non-NULL value as a key */
    for(j=0; j<n; j++) check_round_trip(aV[i], aV[j]);
  }
  for(i=0; i<n; i++) sqlite3_value_free(aV[i]);
  tv_close();
}
END_TEST

/* kv_key_result / kv_value_result through SQL functions:
**   kvt_key(K, V)   encodes K and V, returns the key decoded from them
**   kvt_value(K, V) encodes K and V, returns the value decoded */
static void kvtFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvBuf kb = {0}, vb = {0};
  char *zErr = 0;
  int bKey = sqlite3_user_data(ctx)!=0;
  int rc = kv_key_encode(argv[0], &kb, &zErr);
  if( rc==SQLITE_OK ) rc = kv_value_encode(argv[0], argv[1], &vb, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_result_error(ctx, zErr ? zErr : "?", -1);
    sqlite3_result_error_code(ctx, rc);
  }else if( bKey ){
    kv_key_result(ctx, kb.a, kb.n, vb.a, vb.n);
  }else{
    kv_value_result(ctx, vb.a, vb.n);
  }
  sqlite3_free(zErr);
  kv_buf_free(&kb); kv_buf_free(&vb);
}

/* kvt_raw_key(KEYBLOB, VALBLOB) / kvt_raw_value(VALBLOB): decode raw
** bytes (possibly corrupt) with kv_key_result / kv_value_result. */
static void kvtRawFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const uint8_t *aVal = sqlite3_value_blob(argv[argc-1]);
  int nVal = sqlite3_value_bytes(argv[argc-1]);
  int rc;
  if( argc==2 ){
    rc = kv_key_result(ctx, sqlite3_value_blob(argv[0]),
                       sqlite3_value_bytes(argv[0]), aVal, nVal);
  }else{
    rc = kv_value_result(ctx, aVal, nVal);
  }
  (void)rc;
}

static sqlite3 *open_kvt(void){
  sqlite3 *db = 0;
  T_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  sqlite3_create_function(db, "kvt_key", 2, SQLITE_UTF8, (void*)1,
                          kvtFunc, 0, 0);
  sqlite3_create_function(db, "kvt_value", 2, SQLITE_UTF8, 0, kvtFunc, 0, 0);
  sqlite3_create_function(db, "kvt_raw_key", 2, SQLITE_UTF8, 0,
                          kvtRawFunc, 0, 0);
  sqlite3_create_function(db, "kvt_raw_value", 1, SQLITE_UTF8, 0,
                          kvtRawFunc, 0, 0);
  return db;
}

static const char *azResultCase[] = {
  "SELECT typeof(kvt_key(2, 'x')), kvt_key(2, 'x')",                 "integer|2",
  "SELECT typeof(kvt_key(2.0, 'x')), kvt_key(2.0, 'x')",             "real|2.0",
  "SELECT typeof(kvt_key(-0.0, 1)), kvt_key(-0.0, 1)",               "real|0.0",
  "SELECT typeof(kvt_key(x'00ff', 1)), hex(kvt_key(x'00ff', 1))",    "blob|00FF",
  "SELECT typeof(kvt_key('', 1)), length(kvt_key('', 1))",           "text|0",
  "SELECT typeof(kvt_key(x'', 1)), length(kvt_key(x'', 1))",         "blob|0",
  "SELECT typeof(kvt_value(1, NULL)), kvt_value(1, NULL) IS NULL",   "null|1",
  "SELECT typeof(kvt_value(1, '')), length(kvt_value(1, ''))",       "text|0",
  "SELECT typeof(kvt_value(1, x'')), length(kvt_value(1, x''))",     "blob|0",
  "SELECT kvt_value('k', 9223372036854775807)",           "9223372036854775807",
  "SELECT kvt_value('k', -9223372036854775808)",         "-9223372036854775808",
  "SELECT kvt_value('k', 1e308)",                                    "1.0e+308",
  "SELECT hex(kvt_value('k', CAST(x'610062' AS TEXT)))",             "610062",
  "SELECT kvt_key(9007199254740993, 0)",                  "9007199254740993",
};

START_TEST(test_kvlib_result_functions_return_stored_type){
  sqlite3 *db = open_kvt();
  const char *zSql = azResultCase[2*_i];
  sqlite3_stmt *p = 0;
  char zGot[200];
  int i, n = 0;
  T_EQ(sqlite3_prepare_v2(db, zSql, -1, &p, 0), SQLITE_OK);
  T_EQ(sqlite3_step(p), SQLITE_ROW);
  zGot[0] = 0;
  for(i=0; i<sqlite3_column_count(p); i++){
    n += snprintf(zGot+n, sizeof(zGot)-n, "%s%s", i ? "|" : "",
                  (const char*)sqlite3_column_text(p, i));
  }
  ck_assert_str_eq(zGot, azResultCase[2*_i+1]);
  sqlite3_finalize(p);
  sqlite3_close(db);
}
END_TEST

/* Integer keys come back as the same integers through kv_key_result
** (its fast path reads the double's bits): powers of two and their
** neighbours across the whole range, both ends, and pseudo-random values
** of every magnitude; a real key with an integral value stays a real. */
START_TEST(test_kvlib_key_result_returns_every_integer){
  sqlite3 *db = open_kvt();
  sqlite3_stmt *p = 0;
  uint64_t x = 88172645463325252ull;
  int i, j;
  T_EQ(sqlite3_prepare_v2(db, "SELECT typeof(kvt_key(?1, 'v')), "
                          "kvt_key(?1, 'v')=?1", -1, &p, 0), SQLITE_OK);
  for(i=0; i<64*3*2 + 4000; i++){
    int64_t v;
    if( i<64*3*2 ){
      int iBit = i/6, iNear = (i/2)%3 - 1;
      v = (int64_t)(((uint64_t)1<<iBit) + (uint64_t)(int64_t)iNear);
      if( i & 1 ) v = (int64_t)(0 - (uint64_t)v);
    }else{
      x ^= x<<13; x ^= x>>7; x ^= x<<17;
      v = (int64_t)(x >> (x % 64));
      if( x & 1 ) v = (int64_t)(0 - (uint64_t)v);
    }
    for(j=0; j<2; j++){
      int64_t w = j ? (v<0 ? INT64_MIN : INT64_MAX) : v;
      sqlite3_bind_int64(p, 1, w);
      T_EQ(sqlite3_step(p), SQLITE_ROW);
      T_MSG(strcmp((const char*)sqlite3_column_text(p, 0), "integer")==0
            && sqlite3_column_int(p, 1)==1, "key %lld", (long long)w);
      sqlite3_reset(p);
    }
  }
  sqlite3_finalize(p);
  T_EQ(sqlite3_prepare_v2(db, "SELECT typeof(kvt_key(?1, 'v')), "
                          "kvt_key(?1, 'v')=?1", -1, &p, 0), SQLITE_OK);
  sqlite3_bind_double(p, 1, 4503599627370496.0);
  T_EQ(sqlite3_step(p), SQLITE_ROW);
  ck_assert_str_eq((const char*)sqlite3_column_text(p, 0), "real");
  sqlite3_finalize(p);
  sqlite3_close(db);
}
END_TEST

/* Corrupt bytes given to the result functions make the SQL statement
** fail with SQLITE_CORRUPT and a message. */
static const char *azCorruptSql[] = {
  "SELECT kvt_raw_key(x'', x'')",
  "SELECT kvt_raw_key(x'10', x'')",
  "SELECT kvt_raw_key(x'2061', x'')",            /* no terminator */
  "SELECT kvt_raw_key(x'20610001', x'')",        /* bad escape */
  "SELECT kvt_raw_key(x'40', x'')",              /* unknown tag */
  "SELECT kvt_raw_key(x'2061000000', x'')",      /* bytes after the end */
  "SELECT kvt_raw_key(x'20610000', x'0900')",    /* impossible kind */
  "SELECT kvt_raw_key(x'107FFFFFFFFFFFFFFF00', x'')",  /* -0.0 image */
  "SELECT kvt_raw_key(x'107FFFFFFFFFFFFFFF00', x'010B')",  /* as integer */
  "SELECT kvt_raw_key(x'10FFF800000000000000', x'')",  /* NaN image */
  "SELECT kvt_raw_value(x'')",
  "SELECT kvt_raw_value(x'00')",
  "SELECT kvt_raw_value(x'0005')",               /* 4-byte int, no bytes */
  "SELECT kvt_raw_value(x'000A00')",             /* short real */
  "SELECT kvt_raw_value(x'000D')",               /* unknown tag */
  "SELECT kvt_raw_value(x'000000')",             /* NULL with a payload */
};

START_TEST(test_kvlib_result_functions_report_corrupt_bytes){
  sqlite3 *db = open_kvt();
  char *zErr = 0;
  int rc = th_try(db, azCorruptSql[_i], &zErr);
  T_MSG(rc==SQLITE_CORRUPT, "%s: rc=%d", azCorruptSql[_i], rc);
  T_ASSERT(zErr!=NULL && strncmp(zErr, "kv: corrupt ", 12)==0);
  sqlite3_free(zErr);
  sqlite3_close(db);
}
END_TEST

/* kv_key_to_value / kv_value_to_value share one private connection:
** several threads decode at once (ThreadSanitizer checks the locking). */
static void *decoder_main(void *pArg){
  static const uint8_t aKey[] = {0x20, 'k', 'e', 'y', 0x00, 0x00};
  static const uint8_t aVal[] = {0x00, 0x0B, 'v', 'a', 'l'};
  int i, rc;
  (void)pArg;
  for(i=0; i<300; i++){
    sqlite3_value *k = kv_key_to_value(aKey, sizeof(aKey), aVal,
                                       sizeof(aVal), &rc);
    sqlite3_value *v = kv_value_to_value(aVal, sizeof(aVal), &rc);
    T_ASSERT(k!=NULL && v!=NULL);
    T_ASSERT(sqlite3_value_bytes(k)==3 && sqlite3_value_bytes(v)==3);
    T_ASSERT(memcmp(sqlite3_value_text(k), "key", 3)==0);
    T_ASSERT(memcmp(sqlite3_value_text(v), "val", 3)==0);
    sqlite3_value_free(k);
    sqlite3_value_free(v);
  }
  return 0;
}

START_TEST(test_kvlib_decoders_are_thread_safe){
  pthread_t aT[4];
  int i;
  for(i=0; i<4; i++) pthread_create(&aT[i], 0, decoder_main, 0);
  for(i=0; i<4; i++) pthread_join(aT[i], 0);
}
END_TEST

/* ---- limits and NULL ---- */

START_TEST(test_kvlib_key_null_is_constraint_error){
  sqlite3_value *v = tv_null();
  KvBuf b = {0};
  char *zErr = 0;
  T_EQ(kv_key_encode(v, &b, &zErr), SQLITE_CONSTRAINT);
  ck_assert_str_eq(zErr, "kv: key must not be NULL");
  T_EQ(b.n, 0);
  T_EQ(kv_key_encode_bound(v, &b), SQLITE_EMPTY);
  T_EQ(b.n, 0);
  sqlite3_free(zErr);
  sqlite3_value_free(v);
  kv_buf_free(&b);
  tv_close();
}
END_TEST

/* A new text key must be valid UTF-8 (NUL allowed); kv_key_encode_old
** encodes any bytes; kv_utf8_invalid_at finds the first bad byte. */
START_TEST(test_kvlib_new_text_key_must_be_utf8){
  static const struct { const char *z; int n; int iBad; } a[] = {
    { "abc", 3, -1 },            { "a\0b", 3, -1 },
    { "\xf0\x9f\x98\x80", 4, -1 }, { "\xff", 1, 0 },
    { "a\xc0\xaf", 3, 1 },       { "\xed\xa0\x80", 3, 0 },
    { "\xf4\x90\x80\x80", 4, 0 }, { "ab\xe2\x82", 4, 2 },
  };
  int i;
  for(i=0; i<(int)(sizeof(a)/sizeof(a[0])); i++){
    sqlite3_value *v = tv_text(a[i].z, a[i].n);
    KvBuf b = {0};
    char *zErr = 0;
    int rc = kv_key_encode(v, &b, &zErr);
    T_EQ(kv_utf8_invalid_at((const uint8_t*)a[i].z, a[i].n, 1), a[i].iBad);
    if( a[i].iBad<0 ){
      T_EQ(rc, SQLITE_OK);
    }else{
      T_EQ(rc, SQLITE_MISMATCH);
      T_ASSERT(zErr && strstr(zErr, "text key is not valid UTF-8"));
      T_EQ(b.n, 0);
      T_EQ(kv_key_encode_old(v, &b, 0), SQLITE_OK);
      T_ASSERT(b.n>0);
    }
    sqlite3_free(zErr);
    kv_buf_free(&b);
    sqlite3_value_free(v);
  }
  T_EQ(kv_utf8_invalid_at((const uint8_t*)"a\0b", 3, 0), 1);
  tv_close();
}
END_TEST

START_TEST(test_kvlib_key_over_limit_is_toobig){
  char *z = calloc(1, KV_MAX_KEY_BYTES+1);
  sqlite3_value *vOk, *vBig, *vBlob;
  KvBuf b = {0};
  char *zErr = 0;
  memset(z, 'k', KV_MAX_KEY_BYTES+1);
  vOk = tv_text(z, KV_MAX_KEY_BYTES);
  vBig = tv_text(z, KV_MAX_KEY_BYTES+1);
  vBlob = tv_blob(z, KV_MAX_KEY_BYTES+1);
  T_EQ(kv_key_encode(vOk, &b, &zErr), SQLITE_OK);
  T_ASSERT((zErr)==NULL);
  kv_buf_reset(&b);
  T_EQ(kv_key_encode(vBig, &b, &zErr), SQLITE_TOOBIG);
  ck_assert_str_eq(zErr, "kv: key is 32769 bytes, the limit is 32768");
  T_EQ(b.n, 0);
  sqlite3_free(zErr); zErr = 0;
  T_EQ(kv_key_encode(vBlob, &b, &zErr), SQLITE_TOOBIG);
  T_EQ(b.n, 0);
  /* A seek bound is never too big. */
  T_EQ(kv_key_encode_bound(vBig, &b), SQLITE_OK);
  T_EQ(b.n, KV_MAX_KEY_BYTES+1+3);
  sqlite3_free(zErr); free(z);
  sqlite3_value_free(vOk); sqlite3_value_free(vBig); sqlite3_value_free(vBlob);
  kv_buf_free(&b);
  tv_close();
}
END_TEST

START_TEST(test_kvlib_value_over_limit_is_toobig){
  char *z = calloc(1, KV_MAX_VALUE_BYTES+1);
  sqlite3_value *k = tv_int(1);
  sqlite3_value *vOk = tv_blob(z, KV_MAX_VALUE_BYTES);
  sqlite3_value *vBig = tv_blob(z, KV_MAX_VALUE_BYTES+1);
  KvBuf b = {0};
  char *zErr = 0;
  T_EQ(kv_value_encode(k, vOk, &b, &zErr), SQLITE_OK);
  kv_buf_reset(&b);
  T_EQ(kv_value_encode(k, vBig, &b, &zErr), SQLITE_TOOBIG);
  ck_assert_str_eq(zErr, "kv: value is 16777217 bytes, the limit is 16777216");
  T_EQ(b.n, 0);
  sqlite3_free(zErr); free(z);
  sqlite3_value_free(k); sqlite3_value_free(vOk); sqlite3_value_free(vBig);
  kv_buf_free(&b);
  tv_close();
}
END_TEST

/* ---- hardened decoders ---- */

/* Copy a[0..n-1] into an exactly sized heap block, so that any read past
** the end is caught by ASan. */
static uint8_t *exact_copy(const uint8_t *a, int n){
  uint8_t *p = malloc(n ? n : 1);
  if( n ) memcpy(p, a, n);
  return p;
}

START_TEST(test_kvlib_key_truncations_are_corrupt){
  int i, j, rc;
  rng_seed(5);
  for(i=0; i<400; i++){
    sqlite3_value *k = gen_random_value();
    KvBuf kb = {0}, vb = {0};
    enc_key(k, &kb);
    T_EQ(kv_value_encode(k, 0, &vb, 0), SQLITE_OK);
    for(j=0; j<kb.n; j++){
      uint8_t *p = exact_copy(kb.a, j);
      sqlite3_value *x;
      T_EQ(kv_key_check(p, j), SQLITE_CORRUPT);
      x = kv_key_to_value(p, j, vb.a, vb.n, &rc);
      T_ASSERT((x)==NULL);
      T_EQ(rc, SQLITE_CORRUPT);
      free(p);
    }
    kv_buf_free(&kb); kv_buf_free(&vb);
    sqlite3_value_free(k);
  }
  tv_close();
}
END_TEST

START_TEST(test_kvlib_value_truncations_are_corrupt_or_shorter){
  sqlite3_value *aV[] = {
    tv_null(), tv_int(1), tv_int(-300), tv_int(INT64_MIN), tv_real(0.5),
    tv_real(-0.0),
  };
  sqlite3_value *k = tv_text("k", 1);
  int i, j, rc;
  for(i=0; i<(int)(sizeof(aV)/sizeof(aV[0])); i++){
    KvBuf vb = {0};
    T_EQ(kv_value_encode(k, aV[i], &vb, 0), SQLITE_OK);
    for(j=0; j<vb.n; j++){
      uint8_t *p = exact_copy(vb.a, j);
      T_ASSERT((kv_value_to_value(p, j, &rc))==NULL);
      T_EQ(rc, SQLITE_CORRUPT);
      free(p);
    }
    kv_buf_free(&vb);
    sqlite3_value_free(aV[i]);
  }
  sqlite3_value_free(k);
  tv_close();
}
END_TEST

/* Random bytes: every decoder either fails with SQLITE_CORRUPT or returns
** a value whose encoding is exactly the input (canonical encodings). */
START_TEST(test_kvlib_random_bytes_never_crash_decoders){
  static const uint8_t aTag[] = {0x10, 0x20, 0x30, 0x00, 0x01, 0x0A, 0x0B};
  int i, j, rc, nOk = 0;
  sqlite3 *db = open_kvt();
  rng_seed(99);
  for(i=0; i<20000*torture(); i++){
    uint8_t a[24];
    int n = rng_below(24);
    uint8_t *p;
    sqlite3_value *x;
    for(j=0; j<n; j++){
      a[j] = rng_below(3)==0 ? (uint8_t)rng() : (uint8_t)rng_below(3);
    }
    if( n>0 && rng_below(2) ) a[0] = aTag[rng_below(7)];
    if( n>1 && rng_below(2) ) a[1] = aTag[rng_below(7)];
    p = exact_copy(a, n);
    rc = kv_key_check(p, n);
    T_ASSERT(rc==SQLITE_OK || rc==SQLITE_CORRUPT);
    x = kv_key_to_value(p, n, 0, 0, &rc);
    T_ASSERT(rc==SQLITE_OK || rc==SQLITE_CORRUPT);
    if( x ){
      KvBuf b = {0};
      enc_key(x, &b);
      T_ASSERT(b.n==n && memcmp(b.a, p, n)==0);
      nOk++;
      kv_buf_free(&b);
      sqlite3_value_free(x);
    }
    x = kv_value_to_value(p, n, &rc);
    T_ASSERT(rc==SQLITE_OK || rc==SQLITE_CORRUPT);
    sqlite3_value_free(x);
    free(p);
  }
  T_ASSERT((nOk)>(0));
  sqlite3_close(db);
  tv_close();
}
END_TEST

START_TEST(test_kvlib_key_with_contradicting_numeric_kind_is_corrupt){
  sqlite3_value *kInt = tv_int(TWO53+1);
  sqlite3_value *kReal = tv_real(2.5);
  sqlite3_value *kText = tv_text("a", 1);
  KvBuf bi = {0}, br = {0}, vi = {0}, vr = {0}, vt = {0};
  sqlite3_value *x;
  int rc;
  enc_key(kInt, &bi); enc_key(kReal, &br);
  kv_value_encode(kInt, kInt, &vi, 0);
  kv_value_encode(kReal, kInt, &vr, 0);
  kv_value_encode(kText, kInt, &vt, 0);
  /* an integer key recorded as a real, a real recorded as an integer */
  T_ASSERT((kv_key_to_value(bi.a, bi.n, vr.a, vr.n, &rc))==NULL);
  T_EQ(rc, SQLITE_CORRUPT);
  T_ASSERT((kv_key_to_value(br.a, br.n, vi.a, vi.n, &rc))==NULL);
  T_EQ(rc, SQLITE_CORRUPT);
  /* a number under a value without a numeric kind (written for a text
  ** key, or no value at all) reads back as an integer when it is one */
  x = kv_key_to_value(bi.a, bi.n, vt.a, vt.n, &rc);
  T_EQ(rc, SQLITE_OK);
  T_EQ(sqlite3_value_type(x), SQLITE_INTEGER);
  T_EQ(sqlite3_value_int64(x), TWO53+1);
  sqlite3_value_free(x);
  x = kv_key_to_value(br.a, br.n, 0, 0, &rc);
  T_EQ(sqlite3_value_type(x), SQLITE_FLOAT);
  sqlite3_value_free(x);
  kv_buf_free(&bi); kv_buf_free(&br); kv_buf_free(&vi); kv_buf_free(&vr);
  kv_buf_free(&vt);
  sqlite3_value_free(kInt); sqlite3_value_free(kReal); sqlite3_value_free(kText);
  tv_close();
}
END_TEST

/* ---- the map against a sorted-array model ---- */

typedef struct ModelEnt ModelEnt;
struct ModelEnt {
  uint8_t aKey[16]; int nKey;
  uint64_t valSeed; int nVal;     /* value: val_bytes(valSeed, nVal) */
  uint64_t rev;
  int bTomb;
};
typedef struct Model Model;
struct Model { ModelEnt *a; int n; int nAlloc; };

#define MAX_VAL 600

/* The value bytes of a model entry (generated from a seed, so the model
** stays small while values reach MAX_VAL bytes). */
static const uint8_t *val_bytes(uint64_t seed, int n){
  static uint8_t a[MAX_VAL];
  uint64_t x = seed | 1;
  int i;
  for(i=0; i<n; i++){
    x ^= x<<13; x ^= x>>7; x ^= x<<17;
    a[i] = (uint8_t)x;
  }
  return a;
}

static int model_cmp(const uint8_t *a, int na, const uint8_t *b, int nb){
  int n = na<nb ? na : nb;
  int c = n ? memcmp(a, b, n) : 0;
  if( c ) return c;
  return na - nb;
}

/* index of the first model entry >= key */
static int model_lower(const Model *m, const uint8_t *a, int n){
  int lo = 0, hi = m->n;
  while( lo<hi ){
    int mid = (lo+hi)/2;
    if( model_cmp(m->a[mid].aKey, m->a[mid].nKey, a, n)<0 ) lo = mid+1;
    else hi = mid;
  }
  return lo;
}

static void model_put(Model *m, const ModelEnt *e){
  int i = model_lower(m, e->aKey, e->nKey);
  if( i<m->n && model_cmp(m->a[i].aKey, m->a[i].nKey, e->aKey, e->nKey)==0 ){
    m->a[i] = *e;
    return;
  }
  if( m->n==m->nAlloc ){
    m->nAlloc = m->nAlloc ? 2*m->nAlloc : 64;
    m->a = realloc(m->a, sizeof(ModelEnt)*m->nAlloc);
  }
  memmove(&m->a[i+1], &m->a[i], sizeof(ModelEnt)*(m->n-i));
  m->a[i] = *e;
  m->n++;
}

static void model_remove(Model *m, const uint8_t *a, int n){
  int i = model_lower(m, a, n);
  if( i<m->n && model_cmp(m->a[i].aKey, m->a[i].nKey, a, n)==0 ){
    memmove(&m->a[i], &m->a[i+1], sizeof(ModelEnt)*(m->n-i-1));
    m->n--;
  }
}

static Model model_copy(const Model *m){
  Model c;
  c.n = c.nAlloc = m->n;
  c.a = malloc(sizeof(ModelEnt)*(m->n ? m->n : 1));
  memcpy(c.a, m->a, sizeof(ModelEnt)*m->n);
  return c;
}

static void check_entry(const KvMapEntry *p, const ModelEnt *e){
  T_EQ(p->nKey, e->nKey);
  T_ASSERT(p->nKey==0 || memcmp(p->aKey, e->aKey, e->nKey)==0);
  T_EQ(p->nVal, e->nVal);
  T_ASSERT(p->nVal==0 || memcmp(p->aVal, val_bytes(e->valSeed, e->nVal),
                                 e->nVal)==0);
  T_ASSERT(p->rev==e->rev);
  T_EQ(p->bTomb, e->bTomb);
}

/* Walk the whole map both ways and compare with the model. */
static void check_walk(KvMap *pMap, const Model *m){
  KvMapCursor *pCur = kv_map_cursor_new(pMap);
  KvMapEntry e;
  int i = 0, ok;
  T_ASSERT((pCur)!=NULL);
  T_EQ(kv_map_count(pMap), m->n);
  for(ok=kv_map_cursor_seek(pCur, KV_SEEK_FIRST, 0, 0); ok;
      ok=kv_map_cursor_next(pCur)){
    T_ASSERT((i)<(m->n));
    T_ASSERT(kv_map_cursor_valid(pCur));
    kv_map_cursor_entry(pCur, &e);
    check_entry(&e, &m->a[i++]);
  }
  T_EQ(i, m->n);
  T_ASSERT(!kv_map_cursor_valid(pCur));
  for(ok=kv_map_cursor_seek(pCur, KV_SEEK_LAST, 0, 0); ok;
      ok=kv_map_cursor_prev(pCur)){
    kv_map_cursor_entry(pCur, &e);
    check_entry(&e, &m->a[--i]);
  }
  T_EQ(i, 0);
  kv_map_cursor_free(pCur);
}

/* Seek in mode eSeek and compare with the model's answer. */
static void check_seek(KvMap *pMap, const Model *m, int eSeek,
                       const uint8_t *a, int n){
  KvMapCursor *pCur = kv_map_cursor_new(pMap);
  KvMapEntry e;
  int lo = model_lower(m, a, n);
  int bEq = lo<m->n && model_cmp(m->a[lo].aKey, m->a[lo].nKey, a, n)==0;
  int iExp, got;
  switch( eSeek ){
    case KV_SEEK_FIRST: iExp = m->n ? 0 : -1; break;
    case KV_SEEK_LAST:  iExp = m->n-1; break;
    case KV_SEEK_GE:    iExp = lo; break;
    case KV_SEEK_GT:    iExp = lo + bEq; break;
    case KV_SEEK_LE:    iExp = lo - 1 + bEq; break;
    default:            iExp = lo - 1; break;
  }
  if( iExp>=m->n ) iExp = -1;
  got = kv_map_cursor_seek(pCur, eSeek, a, n);
  T_EQ(got, iExp>=0);
  if( got ){
    kv_map_cursor_entry(pCur, &e);
    check_entry(&e, &m->a[iExp]);
    /* one step each way from the found entry */
    if( kv_map_cursor_next(pCur) ){
      T_ASSERT((iExp+1)<(m->n));
      kv_map_cursor_entry(pCur, &e);
      check_entry(&e, &m->a[iExp+1]);
    }else{
      T_EQ(iExp+1, m->n);
    }
  }
  kv_map_cursor_free(pCur);
}

/* Bytes every random key starts with (map_model_run's nPad). */
static int nKeyPad = 0;

static void random_key(uint8_t *a, int *pn, int nSpace){
  /* keys of 0..4 bytes from a small alphabet: many prefixes of each other,
  ** after nKeyPad bytes common to all */
  int v = rng_below(nSpace);
  int n = 0;
  while( n<nKeyPad ){ a[n] = (uint8_t)('k' + n); n++; }
  while( v>0 && n<nKeyPad+4 ){ a[n++] = (uint8_t)("\x00\x01\x61\xff\x62"[v%5]); v/=5; }
  *pn = n;
}

#define MAX_SNAP 16

/* Put e into *ppMap with kv_map_put_from, sharing the entry of a write-set
** map that has the same bytes under another revision and flag; the write
** set must not change. */
static void put_shared(KvMap **ppMap, const ModelEnt *e){
  KvMap *pWs = kv_map_new();
  KvMapCursor *pCur;
  KvMapEntry x;
  T_EQ(kv_map_put(&pWs, e->aKey, e->nKey, val_bytes(e->valSeed, e->nVal),
                  e->nVal, ~e->rev,
                  !e->bTomb), SQLITE_OK);
  pCur = kv_map_cursor_new(pWs);
  T_EQ(kv_map_put_from(ppMap, pCur, e->rev, e->bTomb), SQLITE_MISUSE);
  T_EQ(kv_map_cursor_seek(pCur, KV_SEEK_GE, e->aKey, e->nKey), 1);
  T_EQ(kv_map_put_from(ppMap, pCur, e->rev, e->bTomb), SQLITE_OK);
  kv_map_unref(pWs);
  kv_map_cursor_entry(pCur, &x);
  T_ASSERT(x.rev==~e->rev && x.bTomb==!e->bTomb);
  kv_map_cursor_free(pCur);
}

/* Random puts, removes, gets, seeks and walks, with snapshots. */
static void map_model_run(uint64_t seed, int nOp, int nSpace){
  KvMap *pMap = kv_map_new();
  KvMap *apSnap[MAX_SNAP];
  Model aSnapModel[MAX_SNAP];
  Model m = {0, 0, 0};
  int nSnap = 0, i, k;
  rng_seed(seed);
  T_ASSERT((pMap)!=NULL);
  for(i=0; i<nOp; i++){
    int op = rng_below(100);
    ModelEnt e;
    memset(&e, 0, sizeof(e));
    random_key(e.aKey, &e.nKey, nSpace);
    if( op<55 ){
      e.nVal = rng_below(13);
      e.valSeed = rng();
      if( rng_below(8)==0 ) e.nVal = 200 + rng_below(MAX_VAL-200);
      e.rev = rng();
      e.bTomb = rng_below(5)==0;
      if( op<10 ){
        put_shared(&pMap, &e);
      }else{
        T_EQ(kv_map_put(&pMap, e.aKey, e.nKey, val_bytes(e.valSeed, e.nVal),
                        e.nVal,
                        e.rev, e.bTomb), SQLITE_OK);
      }
      model_put(&m, &e);
    }else if( op<85 ){
      T_EQ(kv_map_remove(&pMap, e.aKey, e.nKey), SQLITE_OK);
      model_remove(&m, e.aKey, e.nKey);
    }else if( op<90 ){
      KvMapEntry me;
      int lo = model_lower(&m, e.aKey, e.nKey);
      int bEq = lo<m.n && model_cmp(m.a[lo].aKey, m.a[lo].nKey,
                                    e.aKey, e.nKey)==0;
      T_EQ(kv_map_get(pMap, e.aKey, e.nKey, &me), bEq);
      if( bEq ) check_entry(&me, &m.a[lo]);
    }else if( op<99 ){
      check_seek(pMap, &m, rng_below(6), e.aKey, e.nKey);
    }else if( nSnap<MAX_SNAP ){
      apSnap[nSnap] = kv_map_ref(pMap);
      aSnapModel[nSnap] = model_copy(&m);
      nSnap++;
    }else{
      check_walk(pMap, &m);
    }
    T_EQ(kv_map_count(pMap), m.n);
  }
  check_walk(pMap, &m);
  for(k=0; k<nSnap; k++){
    check_walk(apSnap[k], &aSnapModel[k]);
    kv_map_unref(apSnap[k]);
    free(aSnapModel[k].a);
  }
  /* Drain: remove everything, the map must end empty. */
  while( m.n>0 ){
    ModelEnt e = m.a[rng_below(m.n)];
    T_EQ(kv_map_remove(&pMap, e.aKey, e.nKey), SQLITE_OK);
    model_remove(&m, e.aKey, e.nKey);
    T_EQ(kv_map_count(pMap), m.n);
    if( m.n%257==0 ) check_walk(pMap, &m);
  }
  T_EQ(kv_map_bytes(pMap), 0);
  check_seek(pMap, &m, KV_SEEK_FIRST, 0, 0);
  kv_map_unref(pMap);
  free(m.a);
}

static const struct { int nOp; int nSpace; } aMapCase[] = {
  {2000, 20},        /* a single leaf, heavy churn */
  {20000, 700},      /* two levels */
  {40000, 625},      /* every key of up to 4 bytes, dense */
  {60000, 3125},     /* three levels, removes cause merges */
};

START_TEST(test_kvlib_map_matches_sorted_array_model){
  map_model_run(4242 + _i, aMapCase[_i].nOp * torture(),
                aMapCase[_i].nSpace);
}
END_TEST

/* The same with every key starting with 6 (9) common bytes: a node's
** 8-byte key prefixes tie for some (all) of its keys, so searches compare
** the tied keys in full. */
START_TEST(test_kvlib_map_keys_sharing_a_long_prefix_match_model){
  nKeyPad = _i==0 ? 6 : 9;
  map_model_run(4343 + _i, 20000 * torture(), 700);
  nKeyPad = 0;
}
END_TEST

/* Keys put in ascending order (appends to the last leaf, which splits
** unevenly) and then in descending order, with a snapshot in between:
** walks, seeks and gets match the model, the snapshot keeps its contents,
** and removing every key, in a random order, empties the map. */
START_TEST(test_kvlib_map_ordered_puts_match_model){
  KvMap *pMap = kv_map_new(), *pSnap = 0;
  Model m = {0, 0, 0}, mSnap;
  int i, n = 6000;
  rng_seed(99);
  for(i=0; i<2*n; i++){
    ModelEnt e;
    KvMapEntry me;
    uint32_t k = (uint32_t)(i<n ? 3*i : 3*(2*n-i) - 1);
    memset(&e, 0, sizeof(e));
    e.aKey[0] = (uint8_t)(k>>24); e.aKey[1] = (uint8_t)(k>>16);
    e.aKey[2] = (uint8_t)(k>>8);  e.aKey[3] = (uint8_t)k;
    e.nKey = 4;
    e.nVal = rng_below(13);
    e.valSeed = rng();
    e.rev = (uint64_t)i;
    T_EQ(kv_map_put(&pMap, e.aKey, e.nKey, val_bytes(e.valSeed, e.nVal),
                    e.nVal, e.rev, 0), SQLITE_OK);
    model_put(&m, &e);
    T_EQ(kv_map_get(pMap, e.aKey, e.nKey, &me), 1);
    check_entry(&me, &m.a[model_lower(&m, e.aKey, e.nKey)]);
    if( i==n ){
      pSnap = kv_map_ref(pMap);
      mSnap = model_copy(&m);
    }
    if( i%997==0 ){
      check_walk(pMap, &m);
      check_seek(pMap, &m, rng_below(6), e.aKey, e.nKey);
    }
  }
  T_EQ(kv_map_count(pMap), m.n);
  check_walk(pMap, &m);
  check_walk(pSnap, &mSnap);
  while( m.n>0 ){
    ModelEnt e = m.a[rng_below(m.n)];
    T_EQ(kv_map_remove(&pMap, e.aKey, e.nKey), SQLITE_OK);
    model_remove(&m, e.aKey, e.nKey);
    if( m.n%499==0 ) check_walk(pMap, &m);
  }
  T_EQ(kv_map_count(pMap), 0);
  check_walk(pSnap, &mSnap);
  kv_map_unref(pSnap);
  kv_map_unref(pMap);
  free(mSnap.a);
  free(m.a);
}
END_TEST

START_TEST(test_kvlib_map_bytes_tracks_keys_and_values){
  KvMap *p = kv_map_new();
  int64_t nOne, nTwo;
  T_EQ(kv_map_bytes(p), 0);
  kv_map_put(&p, "a", 1, "", 0, 1, 0);
  nOne = kv_map_bytes(p);
  T_ASSERT((nOne)>(1));
  kv_map_put(&p, "b", 1, "0123456789", 10, 1, 0);
  nTwo = kv_map_bytes(p);
  T_EQ(nTwo, 2*nOne + 10);
  kv_map_put(&p, "b", 1, "01234", 5, 1, 0);       /* replace */
  T_EQ(kv_map_bytes(p), 2*nOne + 5);
  kv_map_remove(&p, "a", 1);
  T_EQ(kv_map_bytes(p), nOne + 5);
  kv_map_unref(p);
}
END_TEST

START_TEST(test_kvlib_map_snapshot_is_unchanged_by_later_writes){
  KvMap *p = kv_map_new();
  KvMap *pSnap;
  KvMapEntry e;
  char z[16];
  int i;
  for(i=0; i<5000; i++){
    snprintf(z, sizeof(z), "%06d", i);
    T_EQ(kv_map_put(&p, z, 6, "old", 3, 1, 0), SQLITE_OK);
  }
  pSnap = kv_map_ref(p);
  for(i=0; i<5000; i+=2){
    snprintf(z, sizeof(z), "%06d", i);
    T_EQ(kv_map_put(&p, z, 6, "new", 3, 2, 0), SQLITE_OK);
    T_EQ(kv_map_remove(&p, z+1, 5), SQLITE_OK);
  }
  for(i=1; i<5000; i+=4){
    snprintf(z, sizeof(z), "%06d", i);
    T_EQ(kv_map_remove(&p, z, 6), SQLITE_OK);
  }
  T_ASSERT((p)!=(pSnap));
  T_EQ(kv_map_count(pSnap), 5000);
  T_EQ(kv_map_count(p), 5000 - 1250);
  for(i=0; i<5000; i++){
    snprintf(z, sizeof(z), "%06d", i);
    T_ASSERT(kv_map_get(pSnap, z, 6, &e));
    T_ASSERT(e.nVal==3 && memcmp(e.aVal, "old", 3)==0 && e.rev==1);
  }
  kv_map_unref(pSnap);
  kv_map_unref(p);
}
END_TEST

START_TEST(test_kvlib_map_unshared_version_is_updated_in_place){
  KvMap *p = kv_map_new();
  KvMap *pOrig = p;
  KvMap *pSnap;
  int i;
  char z[16];
  for(i=0; i<3000; i++){
    snprintf(z, sizeof(z), "%d", i*7919 % 3001);
    T_EQ(kv_map_put(&p, z, (int)strlen(z), z, 2, 1, 0),
                     SQLITE_OK);
    T_ASSERT((p)==(pOrig));
  }
  T_EQ(kv_map_remove(&p, "7", 1), SQLITE_OK);
  T_ASSERT((p)==(pOrig));
  /* Shared: the update makes a new version, the snapshot keeps the old. */
  pSnap = kv_map_ref(p);
  T_EQ(kv_map_put(&p, "x", 1, "y", 1, 2, 0), SQLITE_OK);
  T_ASSERT((p)!=(pSnap));
  T_ASSERT((pSnap)==(pOrig));
  T_ASSERT(!kv_map_get(pSnap, "x", 1, 0));
  T_ASSERT(kv_map_get(p, "x", 1, 0));
  /* Removing an absent key leaves the version as it is. */
  {
    KvMap *pBefore = p;
    T_EQ(kv_map_remove(&p, "absent", 6), SQLITE_OK);
    T_ASSERT((p)==(pBefore));
  }
  kv_map_unref(pSnap);
  kv_map_unref(p);
}
END_TEST

/* kv_map_put_absent adds a missing key and leaves a present one (value or
** tombstone) untouched, saying which; a snapshot never sees the add. */
START_TEST(test_kvlib_map_put_absent_keeps_present_entries){
  KvMap *p = kv_map_new();
  KvMap *pSnap;
  KvMapEntry e;
  char z[16];
  int i, bAdded = -1;
  for(i=0; i<2000; i+=2){
    snprintf(z, sizeof(z), "%05d", i);
    T_EQ(kv_map_put(&p, z, 5, "old", 3, 1, i%4==0), SQLITE_OK);
  }
  pSnap = kv_map_ref(p);
  for(i=0; i<2000; i++){
    snprintf(z, sizeof(z), "%05d", i);
    T_EQ(kv_map_put_absent(&p, z, 5, "new", 3, 2, 0, &bAdded), SQLITE_OK);
    T_EQ(bAdded, i%2);
  }
  T_EQ(kv_map_count(p), 2000);
  T_EQ(kv_map_count(pSnap), 1000);
  for(i=0; i<2000; i++){
    snprintf(z, sizeof(z), "%05d", i);
    T_ASSERT(kv_map_get(p, z, 5, &e));
    if( i%2 ){
      T_ASSERT(e.nVal==3 && memcmp(e.aVal, "new", 3)==0 && e.rev==2);
      T_ASSERT(!kv_map_get(pSnap, z, 5, 0));
    }else{
      T_ASSERT(e.nVal==3 && memcmp(e.aVal, "old", 3)==0 && e.rev==1);
      T_EQ(e.bTomb, i%4==0);
    }
  }
  T_EQ(kv_map_put_absent(&p, "x", -1, "", 0, 1, 0, &bAdded), SQLITE_MISUSE);
  T_EQ(bAdded, 0);
  kv_map_unref(pSnap);
  kv_map_unref(p);
}
END_TEST

/* kv_map_put_old reports the entry it replaces (value bytes cut to the
** room given), or that the key was absent, and puts like kv_map_put. */
START_TEST(test_kvlib_map_put_old_reports_the_replaced_entry){
  KvMap *p = kv_map_new();
  KvMap *pSnap;
  KvMapEntry e;
  KvMapOld o;
  char z[16], aBuf[4];
  int i;
  for(i=0; i<2000; i+=2){
    snprintf(z, sizeof(z), "%05d", i);
    T_EQ(kv_map_put(&p, z, 5, "old-value", 9, 7, i%4==0), SQLITE_OK);
  }
  pSnap = kv_map_ref(p);
  for(i=0; i<2000; i++){
    snprintf(z, sizeof(z), "%05d", i);
    memset(aBuf, 0, sizeof(aBuf));
    o.aBuf = aBuf;
    o.nBuf = 3;
    T_EQ(kv_map_put_old(&p, z, 5, "new", 3, 2, 0, &o), SQLITE_OK);
    T_EQ(o.bFound, i%2==0);
    if( o.bFound ){
      T_EQ(o.bTomb, i%4==0);
      T_ASSERT(o.rev==7 && o.nVal==9 && memcmp(aBuf, "old\0", 4)==0);
    }
    T_ASSERT(kv_map_get(p, z, 5, &e));
    T_ASSERT(e.nVal==3 && memcmp(e.aVal, "new", 3)==0 && e.rev==2);
  }
  T_EQ(kv_map_count(p), 2000);
  T_EQ(kv_map_count(pSnap), 1000);
  o.aBuf = 0;
  o.nBuf = 0;
  T_EQ(kv_map_put_old(&p, "00000", 5, "x", 1, 3, 0, &o), SQLITE_OK);
  T_ASSERT(o.bFound && o.nVal==3);
  T_EQ(kv_map_put_old(&p, "x", -1, "", 0, 1, 0, &o), SQLITE_MISUSE);
  T_EQ(o.bFound, 0);
  kv_map_unref(pSnap);
  kv_map_unref(p);
}
END_TEST

/* kv_map_put may be given bytes that point into the very version it
** updates in place (an entry re-put under a new revision, or another
** entry's value); ASan checks that nothing is read after it is freed. */
START_TEST(test_kvlib_map_put_accepts_bytes_from_the_map_itself){
  KvMap *p = kv_map_new();
  KvMapEntry e, f;
  char z[16];
  uint8_t aBig[400];
  int i, round;
  memset(aBig, 'v', sizeof(aBig));
  for(i=0; i<2000; i++){
    snprintf(z, sizeof(z), "%05d", i);
    T_EQ(kv_map_put(&p, z, 5, aBig, i%3 ? 20 : 300, 0, 0), SQLITE_OK);
  }
  for(round=1; round<=3; round++){
    for(i=0; i<2000; i++){
      snprintf(z, sizeof(z), "%05d", i);
      T_ASSERT(kv_map_get(p, z, 5, &e));
      T_EQ(kv_map_put(&p, e.aKey, e.nKey, e.aVal, e.nVal, round, 0),
           SQLITE_OK);
      snprintf(z, sizeof(z), "%05d", (i*7)%2000);
      T_ASSERT(kv_map_get(p, z, 5, &f));
      snprintf(z, sizeof(z), "x%05d", i);
      T_EQ(kv_map_put(&p, z, 6, f.aVal, f.nVal, round, 0), SQLITE_OK);
    }
  }
  T_EQ(kv_map_count(p), 4000);
  for(i=0; i<2000; i++){
    snprintf(z, sizeof(z), "%05d", i);
    T_ASSERT(kv_map_get(p, z, 5, &e));
    T_ASSERT(e.rev==3 && e.nVal==(i%3 ? 20 : 300));
    T_ASSERT(memcmp(e.aVal, aBig, e.nVal)==0);
  }
  kv_map_unref(p);
}
END_TEST

START_TEST(test_kvlib_map_cursor_outlives_the_callers_reference){
  KvMap *p = kv_map_new();
  KvMapCursor *pCur;
  KvMapEntry e;
  int i, n = 0;
  char z[16];
  for(i=0; i<1000; i++){
    snprintf(z, sizeof(z), "%04d", i);
    kv_map_put(&p, z, 4, z, 4, (uint64_t)i, i%3==0);
  }
  pCur = kv_map_cursor_new(p);
  kv_map_unref(p);
  for(i=kv_map_cursor_seek(pCur, KV_SEEK_GE, "0500", 4); i;
      i=kv_map_cursor_next(pCur)){
    kv_map_cursor_entry(pCur, &e);
    T_EQ(e.bTomb, (int)(e.rev%3==0));
    n++;
  }
  T_EQ(n, 500);
  T_ASSERT(!kv_map_cursor_next(pCur));
  kv_map_cursor_free(pCur);
}
END_TEST

/* A cursor reset to another version walks that one (the reference to the
** old version is dropped, the caller's may go); reset to none, it finds
** nothing. */
START_TEST(test_kvlib_map_cursor_reset_walks_the_new_version){
  KvMap *p1 = kv_map_new(), *p2 = kv_map_new();
  KvMapCursor *pCur;
  KvMapEntry e;
  int i, n = 0;
  char z[16];
  for(i=0; i<100; i++){
    snprintf(z, sizeof(z), "a%03d", i);
    kv_map_put(&p1, z, 4, z, 4, 1, 0);
    if( i<7 ){
      snprintf(z, sizeof(z), "b%03d", i);
      kv_map_put(&p2, z, 4, z, 4, 2, 0);
    }
  }
  pCur = kv_map_cursor_new(p1);
  kv_map_unref(p1);                    /* the cursor holds p1 */
  T_EQ(kv_map_cursor_seek(pCur, KV_SEEK_FIRST, 0, 0), 1);
  kv_map_cursor_reset(pCur, p2);       /* drops p1, off any entry */
  T_ASSERT(!kv_map_cursor_valid(pCur));
  kv_map_unref(p2);                    /* the cursor holds p2 */
  for(i=kv_map_cursor_seek(pCur, KV_SEEK_FIRST, 0, 0); i;
      i=kv_map_cursor_next(pCur)){
    kv_map_cursor_entry(pCur, &e);
    T_EQ(e.rev, 2);
    T_EQ(e.aKey[0], 'b');
    n++;
  }
  T_EQ(n, 7);
  kv_map_cursor_reset(pCur, 0);
  T_EQ(kv_map_cursor_seek(pCur, KV_SEEK_FIRST, 0, 0), 0);
  T_EQ(kv_map_cursor_seek(pCur, KV_SEEK_GE, "b", 1), 0);
  kv_map_cursor_free(pCur);
}
END_TEST

/* Every entry's value bytes are followed by a NUL byte that nVal does not
** count: empty values, values holding NULs, tombstones, and entries that
** kv_map_put_from shares into another map. */
START_TEST(test_kvlib_map_values_are_terminated){
  static const struct { const char *z; int n; } aVal[] = {
    { "", 0 }, { "abc", 3 }, { "a\0b", 3 }, { "\377\377", 2 },
  };
  KvMap *p = kv_map_new(), *q = kv_map_new();
  KvMapCursor *pCur;
  KvMapEntry e;
  int i, n = 0;
  for(i=0; i<4; i++){
    char k = (char)('a' + i);
    T_EQ(kv_map_put(&p, &k, 1, aVal[i].z, aVal[i].n, 1, 0), SQLITE_OK);
  }
  T_EQ(kv_map_put(&p, "t", 1, 0, 0, 1, 1), SQLITE_OK);    /* tombstone */
  pCur = kv_map_cursor_new(p);
  for(i=kv_map_cursor_seek(pCur, KV_SEEK_FIRST, 0, 0); i;
      i=kv_map_cursor_next(pCur)){
    kv_map_cursor_entry(pCur, &e);
    T_ASSERT(e.aVal!=0);
    T_EQ(e.aVal[e.nVal], 0);
    if( !e.bTomb ){
      T_EQ(e.nVal, aVal[e.aKey[0]-'a'].n);
      T_EQ(kv_map_put_from(&q, pCur, 2, 0), SQLITE_OK);
    }
    n++;
  }
  T_EQ(n, 5);
  kv_map_cursor_free(pCur);
  for(i=0; i<4; i++){
    char k = (char)('a' + i);
    T_ASSERT(kv_map_get(q, &k, 1, &e));
    T_EQ(e.nVal, aVal[i].n);
    T_EQ(memcmp(e.aVal, aVal[i].z, aVal[i].n), 0);
    T_EQ(e.aVal[e.nVal], 0);
  }
  kv_map_unref(p);
  kv_map_unref(q);
}
END_TEST

START_TEST(test_kvlib_map_empty_map_has_no_entries){
  KvMap *p = kv_map_new();
  KvMapCursor *pCur = kv_map_cursor_new(p);
  KvMapEntry x;
  int e;
  for(e=KV_SEEK_FIRST; e<=KV_SEEK_LT; e++){
    T_EQ(kv_map_cursor_seek(pCur, e, "a", 1), 0);
    T_ASSERT(!kv_map_cursor_valid(pCur));
  }
  T_EQ(kv_map_cursor_next(pCur), 0);
  T_EQ(kv_map_cursor_prev(pCur), 0);
  kv_map_cursor_entry(pCur, &x);
  T_ASSERT(x.aKey==NULL && x.nKey==0);
  T_EQ(kv_map_get(p, "", 0, 0), 0);
  T_EQ(kv_map_remove(&p, "a", 1), SQLITE_OK);
  T_EQ(kv_map_count(p), 0);
  T_EQ(kv_map_put(&p, "", 0, 0, 0, 0, 0), SQLITE_OK);
  T_EQ(kv_map_count(p), 1);
  T_ASSERT(kv_map_get(p, "", 0, 0));
  /* misuse: unknown seek mode, NULL map, negative lengths */
  kv_map_cursor_free(pCur);
  pCur = kv_map_cursor_new(p);
  T_EQ(kv_map_cursor_seek(pCur, 6, "", 0), 0);
  T_EQ(kv_map_cursor_seek(pCur, -1, "", 0), 0);
  T_EQ(kv_map_cursor_seek(pCur, KV_SEEK_GE, "", 0), 1);
  T_EQ(kv_map_put(0, "a", 1, 0, 0, 0, 0), SQLITE_MISUSE);
  T_EQ(kv_map_put(&p, "a", -1, 0, 0, 0, 0), SQLITE_MISUSE);
  T_EQ(kv_map_put(&p, "a", 1, "b", -1, 0, 0), SQLITE_MISUSE);
  T_EQ(kv_map_remove(&p, "a", -1), SQLITE_MISUSE);
  T_EQ(kv_map_count(p), 1);
  kv_map_cursor_free(pCur);
  kv_map_unref(p);
  kv_map_unref(0);
  T_ASSERT((kv_map_ref(0))==NULL);
}
END_TEST

/* ---- out of memory ---- */

static sqlite3_mem_methods oomDefault;
static int oomCountdown = -1;   /* fail the allocation when it reaches 0 */

static void *oomMalloc(int n){
  if( oomCountdown>=0 && oomCountdown--==0 ) return 0;
  return oomDefault.xMalloc(n);
}
static void *oomRealloc(void *p, int n){
  if( oomCountdown>=0 && oomCountdown--==0 ) return 0;
  return oomDefault.xRealloc(p, n);
}

static void oom_install(void){
  sqlite3_mem_methods m;
  sqlite3_shutdown();
  T_EQ(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &oomDefault),
                   SQLITE_OK);
  m = oomDefault;
  m.xMalloc = oomMalloc;
  m.xRealloc = oomRealloc;
  T_EQ(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
  T_EQ(sqlite3_initialize(), SQLITE_OK);
}

/* Put SQLite's own allocator back, so that a later test of the same
** process (CK_FORK=no, as under make valgrind) installs the failing one
** over the real one, not over itself (an endless recursion). */
static void oom_remove(void){
  oomCountdown = -1;
  sqlite3_shutdown();
  T_EQ(sqlite3_config(SQLITE_CONFIG_MALLOC, &oomDefault), SQLITE_OK);
  T_EQ(sqlite3_initialize(), SQLITE_OK);
}

/* An encoder that cannot grow its buffer returns SQLITE_NOMEM and leaves
** the buffer's contents as they were. */
START_TEST(test_kvlib_encoders_leave_buffer_unchanged_on_nomem){
  char z[300];
  sqlite3_value *k, *v;
  KvBuf b = {0};
  memset(z, 0, sizeof(z));        /* zeros: the escaped key grows most */
  k = tv_text(z, sizeof(z));
  v = tv_blob(z, sizeof(z));
  oom_install();
  T_EQ(kv_buf_append(&b, "abc", 3), SQLITE_OK);
  oomCountdown = 0;
  T_EQ(kv_key_encode(k, &b, 0), SQLITE_NOMEM);
  T_EQ(b.n, 3);
  oomCountdown = 0;
  T_EQ(kv_key_encode_bound(k, &b), SQLITE_NOMEM);
  T_EQ(b.n, 3);
  oomCountdown = 0;
  T_EQ(kv_value_encode(k, v, &b, 0), SQLITE_NOMEM);
  T_EQ(b.n, 3);
  T_ASSERT(memcmp(b.a, "abc", 3)==0);
  oomCountdown = -1;
  T_EQ(kv_key_encode(k, &b, 0), SQLITE_OK);
  T_EQ(b.n, 3 + 1 + 2*300 + 2);
  kv_buf_free(&b);
  sqlite3_value_free(k); sqlite3_value_free(v);
  tv_close();
  oom_remove();
}
END_TEST

/* Every allocation of a put or remove fails once in turn: the operation
** returns SQLITE_NOMEM and the version (and a snapshot) is unchanged. */
START_TEST(test_kvlib_map_nomem_leaves_version_unchanged){
  KvMap *p, *pSnap;
  Model m = {0, 0, 0};
  int i, k, nFail = 0;
  oom_install();
  p = kv_map_new();
  rng_seed(31);
  for(i=0; i<6000; i++){
    ModelEnt e;
    int rc;
    memset(&e, 0, sizeof(e));
    random_key(e.aKey, &e.nKey, 3125);
    e.nVal = 4;
    e.valSeed = (uint64_t)i;
    if( i%5==0 ) e.nVal = 300;          /* out of line */
    e.rev = (uint64_t)i;
    pSnap = (i%3==0) ? kv_map_ref(p) : 0;
    for(k=0; ; k++){
      oomCountdown = k;
      if( i%4==3 ){
        rc = kv_map_remove(&p, e.aKey, e.nKey);
      }else{
        rc = kv_map_put(&p, e.aKey, e.nKey, val_bytes(e.valSeed, e.nVal),
                        e.nVal, e.rev, 0);
      }
      oomCountdown = -1;
      if( rc==SQLITE_OK ) break;
      T_EQ(rc, SQLITE_NOMEM);
      nFail++;
      T_EQ(kv_map_count(p), m.n);
      if( i%500==0 ) check_walk(p, &m);
    }
    if( i%4==3 ) model_remove(&m, e.aKey, e.nKey); else model_put(&m, &e);
    if( pSnap ) kv_map_unref(pSnap);
  }
  check_walk(p, &m);
  T_ASSERT((nFail)>(4500));
  kv_map_unref(p);
  free(m.a);
  oom_remove();
}
END_TEST

/* ---- threads ---- */

/* One writer builds generation after generation from the published
** version; readers take snapshots of whatever is published, check that
** each is internally consistent and does not change while they walk it,
** then drop it (often the last reference, freeing nodes the writer's new
** versions no longer share). */
typedef struct Shared Shared;
struct Shared {
  pthread_mutex_t mu;
  KvMap *pCur;               /* published version, guarded by mu */
  int bDone;                 /* guarded by mu */
  int nGen;
  int nReads;                /* reads done by one reader */
};

#define GEN_KEYS 2000

static KvMap *shared_get(Shared *s, int *pbDone){
  KvMap *p;
  pthread_mutex_lock(&s->mu);
  p = kv_map_ref(s->pCur);
  *pbDone = s->bDone;
  pthread_mutex_unlock(&s->mu);
  return p;
}

/* Every version holds keys "k%05d" for 0..GEN_KEYS-1 plus "gen" whose value
** is the generation g; every entry's rev is <= g, and exactly the entries
** written in generation g have rev g. */
static uint64_t check_generation(KvMap *p){
  KvMapCursor *pCur = kv_map_cursor_new(p);
  KvMapEntry e;
  uint64_t g, sum = 0;
  int n = 0, ok;
  T_ASSERT(kv_map_get(p, "gen", 3, &e));
  g = e.rev;
  for(ok=kv_map_cursor_seek(pCur, KV_SEEK_GE, "k", 1); ok;
      ok=kv_map_cursor_next(pCur)){
    kv_map_cursor_entry(pCur, &e);
    T_ASSERT(e.rev<=g);
    T_EQ(e.nVal, 8);
    T_ASSERT(memcmp(e.aVal, &e.rev, 8)==0);
    sum += e.rev;
    n++;
  }
  T_EQ(n, GEN_KEYS);
  kv_map_cursor_free(pCur);
  return sum;
}

static void *reader_main(void *pArg){
  Shared *s = (Shared*)pArg;
  int bDone = 0, i;
  for(i=0; !bDone || i<s->nReads; i++){
    KvMap *p = shared_get(s, &bDone);
    uint64_t a = check_generation(p);
    uint64_t b = check_generation(p);
    T_ASSERT(a==b);
    kv_map_unref(p);
    if( bDone && i>=s->nReads ) break;
  }
  return 0;
}

static void *writer_main(void *pArg){
  Shared *s = (Shared*)pArg;
  uint64_t g;
  int i, bDone;
  char z[16];
  for(g=1; g<=(uint64_t)s->nGen; g++){
    KvMap *pNew = shared_get(s, &bDone), *pOld;
    for(i=0; i<50; i++){
      snprintf(z, sizeof(z), "k%05d", (int)(rng() % GEN_KEYS));
      T_EQ(kv_map_put(&pNew, z, 6, &g, 8, g, 0), SQLITE_OK);
    }
    T_EQ(kv_map_put(&pNew, "gen", 3, 0, 0, g, 0), SQLITE_OK);
    pthread_mutex_lock(&s->mu);
    pOld = s->pCur;
    s->pCur = pNew;
    s->bDone = g==(uint64_t)s->nGen;
    pthread_mutex_unlock(&s->mu);
    kv_map_unref(pOld);
  }
  return 0;
}

START_TEST(test_kvlib_map_concurrent_readers_and_writer){
  Shared s;
  pthread_t aReader[3], writer;
  uint64_t zero = 0;
  char z[16];
  int i;
  memset(&s, 0, sizeof(s));
  pthread_mutex_init(&s.mu, 0);
  s.nGen = 300 * torture();
  s.nReads = 20;
  s.pCur = kv_map_new();
  rng_seed(8);
  for(i=0; i<GEN_KEYS; i++){
    snprintf(z, sizeof(z), "k%05d", i);
    kv_map_put(&s.pCur, z, 6, &zero, 8, 0, 0);
  }
  kv_map_put(&s.pCur, "gen", 3, 0, 0, 0, 0);
  for(i=0; i<3; i++) pthread_create(&aReader[i], 0, reader_main, &s);
  pthread_create(&writer, 0, writer_main, &s);
  pthread_join(writer, 0);
  for(i=0; i<3; i++) pthread_join(aReader[i], 0);
  check_generation(s.pCur);
  kv_map_unref(s.pCur);
  pthread_mutex_destroy(&s.mu);
}
END_TEST

/* Several threads build their own versions from one shared base at the
** same time (each copying the nodes the others are also copying and
** releasing); the base never changes. */
typedef struct Brancher Brancher;
struct Brancher { KvMap *pBase; int iThread; };

static void *brancher_main(void *pArg){
  Brancher *b = (Brancher*)pArg;
  int round, i;
  char z[16];
  for(round=0; round<40; round++){
    KvMap *p = kv_map_ref(b->pBase);
    uint64_t tag = (uint64_t)(b->iThread*1000 + round);
    KvMapCursor *pCur;
    int ok;
    for(i=0; i<200; i++){
      snprintf(z, sizeof(z), "k%05d", (i*37 + round*11 + b->iThread) % GEN_KEYS);
      T_EQ(kv_map_put(&p, z, 6, &tag, 8, tag, 0), SQLITE_OK);
      if( i%10==0 ) T_EQ(kv_map_remove(&p, z, 6), SQLITE_OK);
    }
    /* Share this branch's entries into a second one built from the base
    ** (the entries are then referenced from two threads' versions). */
    pCur = kv_map_cursor_new(p);
    kv_map_unref(p);
    p = kv_map_ref(b->pBase);
    for(ok=kv_map_cursor_seek(pCur, KV_SEEK_GE, "k", 1); ok;
        ok=kv_map_cursor_next(pCur)){
      KvMapEntry e;
      kv_map_cursor_entry(pCur, &e);
      if( e.rev==tag ) T_EQ(kv_map_put_from(&p, pCur, tag+1, 0), SQLITE_OK);
    }
    kv_map_cursor_free(pCur);
    kv_map_unref(p);
  }
  return 0;
}

START_TEST(test_kvlib_map_concurrent_branches_from_one_base){
  KvMap *pBase = kv_map_new();
  Brancher aB[4];
  pthread_t aT[4];
  uint64_t zero = 0;
  char z[16];
  int i;
  for(i=0; i<GEN_KEYS; i++){
    snprintf(z, sizeof(z), "k%05d", i);
    kv_map_put(&pBase, z, 6, &zero, 8, 0, 0);
  }
  kv_map_put(&pBase, "gen", 3, 0, 0, 0, 0);
  for(i=0; i<4; i++){
    aB[i].pBase = pBase;
    aB[i].iThread = i;
    pthread_create(&aT[i], 0, brancher_main, &aB[i]);
  }
  for(i=0; i<4; i++) pthread_join(aT[i], 0);
  T_ASSERT(check_generation(pBase)==0);
  kv_map_unref(pBase);
}
END_TEST

/* ---- key JSON (receipts) ---- */

static void kvlib_key_json_eq(const uint8_t *aKey, int nKey,
                              const char *zWant){
  KvBuf out = {0, 0, 0};
  int rc = kv_key_json(aKey, nKey, &out);
  T_MSG(rc==SQLITE_OK, "kv_key_json rc=%d for %s", rc, zWant);
  T_MSG((int)strlen(zWant)==out.n && memcmp(out.a, zWant, out.n)==0,
        "kv_key_json gave '%.*s', want '%s'", out.n, out.a ? (char*)out.a : "",
        zWant);
  kv_buf_free(&out);
}

/* kv_key_json renders an integer key as the integer, whatever its
** encoding (10 bytes when its double is exact, 12 past 2^53), and
** kv_key_append_int encodes it as kv_key_encode_c does; a real key
** as 17 digits; equal numbers as the same key; a non-canonical number is
** corrupt. */
START_TEST(test_kvlib_key_json_renders_numbers_exactly){
  static const int64_t aInt[] = {
    0, 1, -1, 7, 255, 256, -256, 65535, 1000000007, -1000000007,
    (INT64_C(1)<<53) - 1, INT64_C(1)<<53, (INT64_C(1)<<53) + 1,
    -(INT64_C(1)<<53) - 1, (INT64_C(1)<<62) + 12345, INT64_MAX, INT64_MAX-1,
    INT64_MIN, INT64_MIN+1, INT64_C(-4611686018427387904),
  };
  static const uint8_t aNegZero[10] = {
    0x10, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00
  };
  KvBuf k = {0, 0, 0}, out = {0, 0, 0};
  char zWant[64];
  int i;
  srand(11);
  for(i=0; i<(int)(sizeof(aInt)/sizeof(aInt[0])) + 20000; i++){
    int64_t v = i<(int)(sizeof(aInt)/sizeof(aInt[0])) ? aInt[i]
      : (int64_t)(((uint64_t)rand()<<42) ^ ((uint64_t)rand()<<21) ^ rand())
        >> (rand()%64);
    kv_buf_reset(&k);
    T_ASSERT(kv_key_encode_c(SQLITE_INTEGER, v, 0, 0, 0, &k, 0)==SQLITE_OK);
    snprintf(zWant, sizeof(zWant), "%lld", (long long)v);
    kvlib_key_json_eq(k.a, k.n, zWant);
    /* kv_key_append_int writes the very same bytes, after what is there */
    kv_buf_reset(&out);
    T_ASSERT(kv_buf_append(&out, "x", 1)==SQLITE_OK);
    T_ASSERT(kv_key_append_int(&out, v)==SQLITE_OK);
    T_ASSERT(out.n==k.n+1 && memcmp(out.a+1, k.a, k.n)==0);
  }
  kv_buf_reset(&k);
  T_ASSERT(kv_key_encode_c(SQLITE_FLOAT, 0, 7.0, 0, 0, &k, 0)==SQLITE_OK);
  kvlib_key_json_eq(k.a, k.n, "7");
  kv_buf_reset(&k);
  T_ASSERT(kv_key_encode_c(SQLITE_FLOAT, 0, -0.0, 0, 0, &k, 0)==SQLITE_OK);
  kvlib_key_json_eq(k.a, k.n, "0");
  kv_buf_reset(&k);
  T_ASSERT(kv_key_encode_c(SQLITE_FLOAT, 0, 0.5, 0, 0, &k, 0)==SQLITE_OK);
  kvlib_key_json_eq(k.a, k.n, "0.5");
  kv_buf_reset(&k);
  T_ASSERT(kv_key_encode_c(SQLITE_FLOAT, 0, 9223372036854775808.0, 0, 0, &k,
                           0)==SQLITE_OK);
  /* 17 digits of 2^63 come from SQLite's printf, which works them out in
  ** long double: memcheck computes that in double precision and prints
  ** 9.2233720368547764e+18, so the digits are checked outside Valgrind */
  if( !th_under_valgrind() ){
    kvlib_key_json_eq(k.a, k.n, "9.2233720368547758e+18");
  }
  kv_buf_reset(&out);
  T_ASSERT(kv_key_json(aNegZero, 10, &out)==SQLITE_CORRUPT);
  kv_buf_free(&k);
  kv_buf_free(&out);
}
END_TEST

/* ---- version text ---- */

/* kv_version_text writes the kind, ':' and the 16 id bytes as lowercase
** hex, as printf does; kv_version_parse reads it back to the same bytes. */
START_TEST(test_kvlib_version_text_round_trips){
  uint8_t aVer[KV_VERSION_BYTES], aBack[KV_VERSION_BYTES];
  char z[KV_VERSION_TEXT+1], zWant[KV_VERSION_TEXT+1];
  int i, k;
  srand(7);
  for(i=0; i<20000; i++){
    aVer[0] = (i & 1) ? 'd' : 'u';
    for(k=1; k<KV_VERSION_BYTES; k++){
      aVer[k] = (uint8_t)(i<256 ? (i+k)%256 : rand());
    }
    kv_version_text(aVer, z);
    zWant[0] = (char)aVer[0];
    zWant[1] = ':';
    for(k=0; k<16; k++) snprintf(zWant+2+2*k, 3, "%02x", aVer[1+k]);
    T_ASSERT(strcmp(z, zWant)==0);
    memset(aBack, 0, sizeof(aBack));
    T_ASSERT(kv_version_parse(z, KV_VERSION_TEXT, aBack)==SQLITE_OK);
    T_ASSERT(memcmp(aBack, aVer, KV_VERSION_BYTES)==0);
  }
}
END_TEST

static int kvlib_hex_value(int c){
  if( c>='0' && c<='9' ) return c-'0';
  if( c>='a' && c<='f' ) return c-'a'+10;
  if( c>='A' && c<='F' ) return c-'A'+10;
  return -1;
}

/* Every byte value at every digit position: accepted exactly when it is a
** hex digit of either case, and then read as that digit; the kind must be
** 'u' or 'd' followed by ':', and the length exactly 34. */
START_TEST(test_kvlib_version_parse_accepts_exactly_hex_digits){
  static const char zBase[] = "u:0123456789abcdefABCDEF0a1b2c3d4e";
  uint8_t aVer[KV_VERSION_BYTES];
  char z[KV_VERSION_TEXT+1];
  int i, c, k;
  T_ASSERT((int)strlen(zBase)==KV_VERSION_TEXT);
  for(i=2; i<KV_VERSION_TEXT; i++){
    for(c=0; c<256; c++){
      int rc, bHex = kvlib_hex_value(c)>=0;
      memcpy(z, zBase, sizeof(zBase));
      z[i] = (char)c;
      rc = kv_version_parse(z, KV_VERSION_TEXT, aVer);
      T_ASSERT(rc==(bHex ? SQLITE_OK : SQLITE_ERROR));
      for(k=2; bHex && k<KV_VERSION_TEXT; k++){
        int v = kvlib_hex_value((unsigned char)z[k]);
        int got = (k%2==0) ? aVer[1+(k-2)/2]>>4 : aVer[1+(k-2)/2]&15;
        T_ASSERT(v==got);
      }
    }
  }
  for(c=0; c<256; c++){
    memcpy(z, zBase, sizeof(zBase));
    z[0] = (char)c;
    T_ASSERT(kv_version_parse(z, KV_VERSION_TEXT, aVer)
             ==(c=='u' || c=='d' ? SQLITE_OK : SQLITE_ERROR));
    memcpy(z, zBase, sizeof(zBase));
    z[1] = (char)c;
    T_ASSERT(kv_version_parse(z, KV_VERSION_TEXT, aVer)
             ==(c==':' ? SQLITE_OK : SQLITE_ERROR));
  }
  T_ASSERT(kv_version_parse(zBase, KV_VERSION_TEXT-1, aVer)==SQLITE_ERROR);
  T_ASSERT(kv_version_parse(zBase, KV_VERSION_TEXT+1, aVer)==SQLITE_ERROR);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvlib");
  TCase *tc = tcase_create("codec");
  tcase_add_loop_test(tc, test_kvlib_key_order_matches_sqlite_order_by, 0, 4);
  tcase_add_loop_test(tc, test_kvlib_key_equal_numbers_have_equal_bytes, 0,
      (int)(sizeof(aEqualPair)/sizeof(aEqualPair[0])));
  tcase_add_test(tc, test_kvlib_key_big_integers_order_exactly_against_reals);
  tcase_add_test(tc, test_kvlib_round_trip_keeps_type_and_bytes);
  tcase_add_test(tc, test_kvlib_round_trip_edge_values);
  tcase_add_loop_test(tc, test_kvlib_result_functions_return_stored_type, 0,
      (int)(sizeof(azResultCase)/sizeof(azResultCase[0])/2));
  tcase_add_test(tc, test_kvlib_key_null_is_constraint_error);
  tcase_add_test(tc, test_kvlib_key_over_limit_is_toobig);
  tcase_add_test(tc, test_kvlib_new_text_key_must_be_utf8);
  tcase_add_test(tc, test_kvlib_value_over_limit_is_toobig);
  tcase_add_test(tc, test_kvlib_key_truncations_are_corrupt);
  tcase_add_test(tc, test_kvlib_value_truncations_are_corrupt_or_shorter);
  tcase_add_test(tc, test_kvlib_random_bytes_never_crash_decoders);
  tcase_add_test(tc, test_kvlib_key_with_contradicting_numeric_kind_is_corrupt);
tcase_add_test(tc, test_kvlib_key_result_returns_every_integer);
    tcase_add_loop_test(tc, test_kvlib_result_functions_report_corrupt_bytes, 0,
      (int)(sizeof(azCorruptSql)/sizeof(azCorruptSql[0])));
  tcase_add_test(tc, test_kvlib_encoders_leave_buffer_unchanged_on_nomem);
  tcase_add_test(tc, test_kvlib_decoders_are_thread_safe);
  suite_add_tcase(s, tc);

  tc = tcase_create("map");
  tcase_add_loop_test(tc, test_kvlib_map_matches_sorted_array_model, 0,
      (int)(sizeof(aMapCase)/sizeof(aMapCase[0])));
  tcase_add_loop_test(tc, test_kvlib_map_keys_sharing_a_long_prefix_match_model,
                      0, 2);
  tcase_add_test(tc, test_kvlib_map_ordered_puts_match_model);
  tcase_add_test(tc, test_kvlib_map_bytes_tracks_keys_and_values);
  tcase_add_test(tc, test_kvlib_map_snapshot_is_unchanged_by_later_writes);
  tcase_add_test(tc, test_kvlib_map_unshared_version_is_updated_in_place);
  tcase_add_test(tc, test_kvlib_map_put_absent_keeps_present_entries);
  tcase_add_test(tc, test_kvlib_map_put_old_reports_the_replaced_entry);
  tcase_add_test(tc, test_kvlib_map_put_accepts_bytes_from_the_map_itself);
  tcase_add_test(tc, test_kvlib_map_cursor_outlives_the_callers_reference);
  tcase_add_test(tc, test_kvlib_map_cursor_reset_walks_the_new_version);
  tcase_add_test(tc, test_kvlib_map_values_are_terminated);
  tcase_add_test(tc, test_kvlib_map_empty_map_has_no_entries);
  tcase_add_test(tc, test_kvlib_map_nomem_leaves_version_unchanged);
  tcase_add_test(tc, test_kvlib_map_concurrent_readers_and_writer);
  tcase_add_test(tc, test_kvlib_map_concurrent_branches_from_one_base);
  suite_add_tcase(s, tc);

  tc = tcase_create("text");
  tcase_add_test(tc, test_kvlib_key_json_renders_numbers_exactly);
  tcase_add_test(tc, test_kvlib_version_text_round_trips);
  tcase_add_test(tc, test_kvlib_version_parse_accepts_exactly_hex_digits);
  suite_add_tcase(s, tc);
  return s;
}
