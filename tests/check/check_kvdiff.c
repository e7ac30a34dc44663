/*
** check_kvdiff.c -- the "kvdiff" suite: a differential test of the KV
** virtual tables (kv_memory, kv_btree, kv_log) against a plain SQLite table
** CREATE TABLE ref(key PRIMARY KEY NOT NULL, value) WITHOUT ROWID.
**
** A seeded pseudo-random generator builds a sequence of SQL statements;
** each runs on the KV table "kv" and on "ref", in the same connection and
** the same transaction, and the outcomes must be equal: the primary result
** code (an error is compared by class, not by text), and every row of a
** query, column by column, value and sqlite3_column_type (reals compared
** bit for bit), and sqlite3_changes() of a write.  Queries without ORDER
** BY are compared as multisets.  The whole contents of both tables are
** compared after every transaction (every autocommit statement, COMMIT,
** ROLLBACK) and after every ROLLBACK TO, also through a second connection,
** which must see the last commit only.  kv_btree and kv_log tables are
** also compared after a reopen of the database now and then.
**
** Statements: INSERT (also multi-row, of keys that exist, with RETURNING,
** and 1..60 generated rows from a recursive CTE), INSERT OR REPLACE / OR
** IGNORE / OR FAIL, INSERT ... SELECT from the table itself, UPDATE of the
** value by key and by range, UPDATE of the key (by key, also OR IGNORE /
** OR REPLACE; over a range, also OR IGNORE / OR FAIL), DELETE by key,
** range, IN list and IN (subquery); SELECT with =, <, <=, >, >=, BETWEEN
** (also with bounds of mixed types), IN lists with duplicates and NULLs,
** IS NULL, comparisons with NULL, ORDER BY key ASC/DESC with LIMIT and
** OFFSET, count(*), min(key), max(key), self-joins, OR of two lookups,
** LIKE and COLLATE NOCASE (left to SQLite); BEGIN / COMMIT / ROLLBACK and
** nested SAVEPOINT / ROLLBACK TO / RELEASE (also an outermost SAVEPOINT
** as the transaction).  Keys and values: small and large integers (near
** +-2^63), reals (-0.0, 1e308, +-Inf, integral reals such as 3.0, 2^63),
** text (empty, non-ASCII, with NUL bytes, long with a common prefix),
** blobs (also x'' and one of 32768 bytes, the key limit), values up to
** 100000 bytes, NULL values; range bounds that are text but not UTF-8.
** What the generator leaves out, each a deviation documented in
** docs/SQL.md and marked where it is avoided: keys over 32768 bytes or
** text keys that are not UTF-8, multi-row UPDATE OR REPLACE of keys, and
** INSERT OR IGNORE ... RETURNING.

** make check runs KD_SEEDS seeds of KD_STEPS statements for each table
** type.  Environment:
**   DEPOT_KVDIFF_ITERS=n   run n seeds per table type (long runs)
**   DEPOT_KVDIFF_STEPS=n   statements per seed
**   DEPOT_KVDIFF_SEED=s    run only seed s (replay of a reported failure)
**   DEPOT_KVDIFF_VERBOSE=1 print every statement to stderr, and per seed
**                          how many statements, failures and rows were
**                          compared
** Long runs also need CK_DEFAULT_TIMEOUT (seconds; make check sets 300),
** e.g. DEPOT_KVDIFF_ITERS=300 CK_DEFAULT_TIMEOUT=6000 ./tests/check/check_kvdiff
** (about 0.5 s per seed and table type on 2 loaded cores).
** A mismatch fails the test with the table type, the seed and the
** statement number, the statement and both results.
*/
#include "config.h"
#include "tests/check/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_SEEDS 4              /* seeds per table type in make check */
#define KD_STEPS 300            /* statements per seed */
#define KD_MAX_SAVEPOINTS 4

static const char *const azKdType[] = { "kv_memory", "kv_btree", "kv_log" };

/* ------------------------------------------------------------- random --- */

typedef struct KdRand KdRand;
struct KdRand { sqlite3_uint64 s; };

static sqlite3_uint64 kd_next(KdRand *r){        /* splitmix64 */
  sqlite3_uint64 z = (r->s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z>>30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z>>27)) * 0x94d049bb133111ebULL;
  return z ^ (z>>31);
}

static int kd_below(KdRand *r, int n){
  return (int)(kd_next(r) % (sqlite3_uint64)n);
}

/* ------------------------------------------------------------ domain --- */

/* Key literals: numbers (integers and reals that collide, 2^63 limits),
** text (also with NUL bytes), blobs.  Small pools so that keys collide
** often. */
static const char *const azKdKey[] = {
  "0", "1", "2", "3", "-1", "7", "100",
  "9223372036854775807", "-9223372036854775808", "9223372036854775806",
  "9007199254740993", "-9007199254740993",
  "3.0", "-0.0", "0.0", "2.5", "-2.5", "1e308", "-1e308",
  "9.2233720368547758e18", "-9.2233720368547758e18", "9007199254740992.0",
  "1.0e-300", "100.0", "9e999", "-9e999",
  "''", "'a'", "'A'", "'ab'", "'b'", "'3'", "'é'", "'日本語'", "'z'",
  "' '", "'a''b'", "'~'", "CAST(x'610062' AS TEXT)", "CAST(x'00' AS TEXT)",
  "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'",
  "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab'",
  "x''", "x'00'", "x'0000'", "x'61'", "x'ff'", "x'6162'", "x'00ff'",
  "x'ffff'", "x'0001'",
  "printf('%.2000c', 'k')", "zeroblob(32768)",   /* 32768: the key limit */
};
#define KD_NKEY ((int)(sizeof(azKdKey)/sizeof(azKdKey[0])))

/* Value literals beyond the keys. */
static const char *const azKdVal[] = {
  "NULL", "NULL", "'x'", "-0.0", "1e308", "x''", "''",
  "'a longer text value with ünïcödé'", "zeroblob(40)", "4.5",
  "9223372036854775807", "-9223372036854775808",
  "zeroblob(100000)", "printf('%.20000c', 'v')",
};
#define KD_NVAL ((int)(sizeof(azKdVal)/sizeof(azKdVal[0])))

/* Non-zero for an integer literal beyond 2^53 in magnitude.  Under
** Valgrind, SQLite compares such an integer with a real in double
** precision (memcheck has no wider long double), so the reference calls
** 9007199254740993 and 9007199254740992.0 equal while the KV table, exact,
** does not; those keys are left out there (docs/RELIABILITY.md). */
static int kd_big_int(const char *z){
  int n = (int)strlen(z) - (z[0]=='-');
  return n>=16 && strspn(z + (z[0]=='-'), "0123456789")==(size_t)n;
}

/* Pick from az[0..n-1] (no big integer under Valgrind). */
static const char *kd_pick(KdRand *r, const char *const *az, int n){
  const char *z;
  do{ z = az[kd_below(r, n)]; }while( th_under_valgrind() && kd_big_int(z) );
  return z;
}

static const char *kd_key(KdRand *r){
  return kd_pick(r, azKdKey, KD_NKEY);
}

/* A key for an INSERT: now and then NULL (refused by both). */
static const char *kd_key_or_null(KdRand *r){
  return kd_below(r, 40)==0 ? "NULL" : kd_key(r);
}

static const char *kd_val(KdRand *r){
  return kd_below(r, 2) ? kd_pick(r, azKdVal, KD_NVAL) : kd_key(r);
}

/* A comparison operand: a key literal, now and then NULL or text that is
** not valid UTF-8 (no key can be such text, but a bound may: it compares
** by bytes). */
static const char *kd_operand(KdRand *r){
  static const char *const azOdd[] = {
    "NULL", "CAST(x'ff' AS TEXT)", "CAST(x'61ff' AS TEXT)", "'a'||x'00'",
  };
  return kd_below(r, 12)==0 ? azOdd[kd_below(r, 4)] : kd_key(r);
}

/* ------------------------------------------------------ SQL generator --- */

/* Append " (k1, k2, ...)" with duplicates and NULLs now and then. */
static void kd_in_list(KdRand *r, sqlite3_str *p){
  int i, n = 1 + kd_below(r, 5);
  const char *zPrev = kd_key(r);
  sqlite3_str_appendall(p, "(");
  for(i=0; i<n; i++){
    int e = kd_below(r, 8);
    const char *z = e==0 ? "NULL" : e==1 ? zPrev : kd_key(r);
    sqlite3_str_appendf(p, "%s%s", i ? ", " : "", z);
    zPrev = z;
  }
  sqlite3_str_appendall(p, ")");
}

/* Append a WHERE condition on key that the table may answer itself (or,
** for IS NULL, != and NOT, leave to SQLite). */
static void kd_cond(KdRand *r, sqlite3_str *p){
  static const char *const azOp[] = { "=", "<", "<=", ">", ">=" };
  switch( kd_below(r, 11) ){
    case 0: case 1:
      sqlite3_str_appendf(p, "key %s %s", azOp[kd_below(r, 5)], kd_operand(r));
      break;
    case 2: case 3:
      sqlite3_str_appendf(p, "key BETWEEN %s AND %s", kd_operand(r),
                          kd_operand(r));
      break;
    case 4: case 5:
      sqlite3_str_appendall(p, "key IN ");
      kd_in_list(r, p);
      break;
    case 6:
      sqlite3_str_appendf(p, "key %s %s AND key %s %s",
                          azOp[1+kd_below(r, 4)], kd_operand(r),
                          azOp[1+kd_below(r, 4)], kd_operand(r));
      break;
    case 7:
      sqlite3_str_appendall(p, kd_below(r, 2) ? "key IS NULL"
                                               : "key IS NOT NULL");
      break;
    case 8:
      sqlite3_str_appendf(p, "key != %s", kd_operand(r));
      break;
    case 9:
      sqlite3_str_appendf(p, "key = %s AND key %s %s", kd_operand(r),
                          azOp[kd_below(r, 5)], kd_operand(r));
      break;
    default:
      sqlite3_str_appendf(p, "key NOT BETWEEN %s AND %s", kd_operand(r),
                          kd_operand(r));
      break;
  }
}

static void kd_values(KdRand *r, sqlite3_str *p){
  int i, n = kd_below(r, 3)==0 ? 2 + kd_below(r, 3) : 1;
  for(i=0; i<n; i++){
    sqlite3_str_appendf(p, "%s(%s, %s)", i ? ", " : " VALUES",
                        kd_key_or_null(r), kd_val(r));
  }
}

/* Append a query on @T; *pbOrdered tells whether its row order is
** defined (ORDER BY key, or a single row). */
static void kd_query(KdRand *r, sqlite3_str *p, int *pbOrdered){
  int e = kd_below(r, 11);
  *pbOrdered = 1;
  if( e==0 ){
    sqlite3_str_appendall(p, "SELECT count(*) FROM @T");
    if( kd_below(r, 2) ){ sqlite3_str_appendall(p, " WHERE "); kd_cond(r, p); }
    return;
  }
  if( e==1 ){
    static const char *const az[] = {
      "SELECT min(key) FROM @T", "SELECT max(key) FROM @T",
      "SELECT min(key), max(key) FROM @T",
    };
    sqlite3_str_appendall(p, az[kd_below(r, 3)]);
    return;
  }
  if( e==2 ){
    sqlite3_str_appendf(p, "SELECT value, typeof(key) FROM @T WHERE key = %s",
                        kd_operand(r));
    return;
  }
  if( e==3 ){
    /* constraints whose operand changes per outer row (joins), OR of two
    ** lookups, and constraints the table leaves to SQLite (LIKE, NOCASE) */
    static const char *const az[] = {
      "SELECT a.key, b.key FROM @T a, @T b WHERE a.key = b.value",
      "SELECT a.key, b.key FROM @T a, @T b WHERE a.key > b.value "
        "AND a.key <= b.key",
      "SELECT a.key, b.key FROM @T a JOIN @T b ON b.key IN (a.value, a.key)",
      "SELECT key, value FROM @T WHERE key IN (SELECT value FROM @T)",
      "SELECT key FROM @T WHERE key LIKE 'a%%'",
      "SELECT key FROM @T WHERE key = 'A' COLLATE NOCASE",
      "SELECT key FROM @T WHERE key > 'a' COLLATE NOCASE",
      "SELECT key FROM @T ORDER BY key COLLATE NOCASE, key",
    };
    int k = kd_below(r, 9);
    if( k<8 ){
      sqlite3_str_appendf(p, az[k]);
      *pbOrdered = k==7;
    }else{
      sqlite3_str_appendf(p, "SELECT key, value FROM @T WHERE key = %s "
                          "OR key %s %s", kd_operand(r),
                          kd_below(r, 2) ? "=" : ">=", kd_operand(r));
      *pbOrdered = 0;
    }
    return;
  }
  sqlite3_str_appendall(p, "SELECT key, value FROM @T");
  if( kd_below(r, 5) ){ sqlite3_str_appendall(p, " WHERE "); kd_cond(r, p); }
  if( kd_below(r, 4)==0 ){ *pbOrdered = 0; return; }
  {
    static const char *const azOrder[] = {
      " ORDER BY key DESC", " ORDER BY key", " ORDER BY key ASC",
      " ORDER BY key DESC, value", " ORDER BY -key, key",
    };
    sqlite3_str_appendall(p, azOrder[kd_below(r, 5)]);
  }
  if( kd_below(r, 2) ){
    sqlite3_str_appendf(p, " LIMIT %d", kd_below(r, 6));
    if( kd_below(r, 2) ) sqlite3_str_appendf(p, " OFFSET %d", kd_below(r, 4));
  }
}

/* The key of an existing row of ref (as a literal), or a random key. */
static char *kd_existing_key(sqlite3 *db, KdRand *r){
  sqlite3_int64 n = th_int(db, "SELECT count(*) FROM ref");
  char *zSql, *z;
  if( n==0 ) return sqlite3_mprintf("%s", kd_key(r));
  zSql = sqlite3_mprintf("SELECT quote(key) FROM ref ORDER BY key "
                         "LIMIT 1 OFFSET %d", kd_below(r, (int)n));
  z = th_text(db, zSql);
  sqlite3_free(zSql);
  ck_assert_ptr_nonnull(z);
  return z;
}

/* Append a write statement on @T. */
static void kd_write(sqlite3 *db, KdRand *r, sqlite3_str *p){
  static const char *const azOr[] = { "", " OR REPLACE", " OR IGNORE" };
  char *z;
  switch( kd_below(r, 18) ){
    case 0: case 1:
      sqlite3_str_appendall(p, "INSERT INTO @T");
      kd_values(r, p);
      if( kd_below(r, 3)==0 ) sqlite3_str_appendall(p, " RETURNING *");
      break;
    case 2:
      /* RETURNING, but not with OR IGNORE: documented deviation (docs/SQL.md,
      ** "CREATE VIRTUAL TABLE ... USING kv_memory"): SQLite returns the rows
      ** a virtual table skipped too. */
      sqlite3_str_appendall(p, "INSERT OR REPLACE INTO @T");
      kd_values(r, p);
      if( kd_below(r, 3)==0 ) sqlite3_str_appendall(p, " RETURNING key");
      break;
    case 3:
      sqlite3_str_appendall(p, "INSERT OR IGNORE INTO @T");
      kd_values(r, p);
      break;
    case 4:
      sqlite3_str_appendall(p, "INSERT OR FAIL INTO @T");
      kd_values(r, p);
      break;
    case 5:                         /* a key that exists: both must fail */
      z = kd_existing_key(db, r);
      sqlite3_str_appendf(p, "INSERT INTO @T VALUES(%s, %s)", z, kd_val(r));
      sqlite3_free(z);
      break;
    case 6:
      z = kd_existing_key(db, r);
      sqlite3_str_appendf(p, "UPDATE @T SET value = %s WHERE key = %s",
                          kd_val(r), z);
      sqlite3_free(z);
      break;
    case 7:
      sqlite3_str_appendf(p, "UPDATE @T SET value = %s WHERE ", kd_val(r));
      kd_cond(r, p);
      break;
    case 8:
      z = kd_existing_key(db, r);
      sqlite3_str_appendf(p, "UPDATE%s @T SET key = %s WHERE key = %s",
                          azOr[kd_below(r, 3)], kd_key_or_null(r), z);
      sqlite3_free(z);
      break;
    case 9: {
      static const char *const azExpr[] = {
        "key + 1", "-key", "key || 'x'", "key * 2.0", "CAST(key AS TEXT)",
      };
      int e = kd_below(r, 5);
      sqlite3_str_appendf(p, "UPDATE @T SET key = %s WHERE ", azExpr[e]);
      kd_cond(r, p);
      /* Documented deviations (docs/SQL.md, "KV tables", Limits): a text
      ** key must be valid UTF-8 (these are the blobs of the pool that turn
      ** into invalid text through || or CAST), and holds at most 32768
      ** bytes (the longest key of the pool has exactly that many). */
      if( e==2 || e==4 ){
        sqlite3_str_appendall(p, " AND key NOT IN (x'ff', x'00ff', x'ffff')"
                                 " AND length(CAST(key AS BLOB))<32768");
      }
      break;
    }
    case 10:
      z = kd_existing_key(db, r);
      sqlite3_str_appendf(p, "DELETE FROM @T WHERE key = %s", z);
      sqlite3_free(z);
      break;
    case 11: case 12:
      sqlite3_str_appendall(p, "DELETE FROM @T WHERE ");
      kd_cond(r, p);
      break;
    case 13:
      sqlite3_str_appendall(p, "DELETE FROM @T WHERE key IN ");
      kd_in_list(r, p);
      break;
    case 14:                    /* the key of many rows, on a conflict */
      /* Not OR REPLACE: documented deviation (docs/SQL.md, "CREATE VIRTUAL
      ** TABLE ... USING kv_memory"): SQLite hands a virtual table the rows
      ** of a multi-row UPDATE as they were before the statement, so a row
      ** that an earlier row of the same UPDATE OR REPLACE replaced is
      ** still written with its old value. */
      sqlite3_str_appendf(p, "UPDATE OR %s @T SET key = %s WHERE ",
                          kd_below(r, 2) ? "IGNORE" : "FAIL",
                          kd_below(r, 2) ? "key + 1" : "-key");
      kd_cond(r, p);
      break;
    case 16: {                  /* many rows at once: a larger table */
      static const char *const azK[] = {
        "i*%d %% %d", "printf('k%%05d', i*%d %% %d)", "(i*%d %% %d) + 0.5",
      };
      char *zKey = sqlite3_mprintf(azK[kd_below(r, 3)], 1 + kd_below(r, 97),
                                   50 + kd_below(r, 2000));
      ck_assert_ptr_nonnull(zKey);
      sqlite3_str_appendf(p, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
          "SELECT i+1 FROM c WHERE i<%d) INSERT OR %s INTO @T "
          "SELECT %s, i FROM c", 1 + kd_below(r, 60),
          kd_below(r, 2) ? "REPLACE" : "IGNORE", zKey);
      sqlite3_free(zKey);
      break;
    }
    case 15:                    /* the table read while it is written */
      sqlite3_str_appendall(p, kd_below(r, 2)
          ? "UPDATE @T SET value = key WHERE key IN (SELECT value FROM @T)"
          : "DELETE FROM @T WHERE key IN (SELECT value FROM @T)");
      break;
    default:
      /* Values as keys, but none over the key limit: documented deviation
      ** (docs/SQL.md, "KV tables", Limits: a key holds at most 32768
      ** bytes). */
      sqlite3_str_appendall(p, kd_below(r, 8)
          ? "INSERT OR IGNORE INTO @T SELECT value, key FROM @T "
            "WHERE value IS NOT NULL AND length(CAST(value AS BLOB))<=32768"
          : "DELETE FROM @T");
      break;
  }
}

/* ------------------------------------------------------------ running --- */

/* Replace every "@T" in zTmpl by zTab (sqlite3_malloc'd result). */
static char *kd_subst(const char *zTmpl, const char *zTab){
  sqlite3_str *p = sqlite3_str_new(0);
  const char *z;
  for(z=zTmpl; *z; z++){
    if( z[0]=='@' && z[1]=='T' ){ sqlite3_str_appendall(p, zTab); z++; }
    else sqlite3_str_appendchar(p, 1, *z);
  }
  z = sqlite3_str_finish(p);
  ck_assert_ptr_nonnull(z);
  return (char*)z;
}

/* FNV-1a of a/n: long text and blobs are shown by length and hash. */
static sqlite3_uint64 kd_hash(const unsigned char *a, int n){
  sqlite3_uint64 h = 0xcbf29ce484222325ULL;
  int i;
  for(i=0; i<n; i++){ h ^= a[i]; h *= 0x100000001b3ULL; }
  return h;
}

/* One column of the current row as text: type tag and exact value. */
static void kd_column(sqlite3_stmt *pStmt, int i, sqlite3_str *p){
  int eType = sqlite3_column_type(pStmt, i);
  int j, n;
  const unsigned char *a;
  double d;
  sqlite3_uint64 u;
  switch( eType ){
    case SQLITE_INTEGER:
      sqlite3_str_appendf(p, "I:%lld", sqlite3_column_int64(pStmt, i));
      break;
    case SQLITE_FLOAT:
      d = sqlite3_column_double(pStmt, i);
      memcpy(&u, &d, sizeof(u));
      sqlite3_str_appendf(p, "R:%!.17g(%016llx)", d, u);
      break;
    case SQLITE_TEXT:                /* bytes below 0x20 escaped (NUL) */
      a = sqlite3_column_text(pStmt, i);
      n = sqlite3_column_bytes(pStmt, i);
      if( n>64 ){
        sqlite3_str_appendf(p, "T:%d bytes, hash %016llx", n, kd_hash(a, n));
        break;
      }
      sqlite3_str_appendall(p, "T:'");
      for(j=0; j<n; j++){
        if( a[j]<0x20 || a[j]=='\\' ) sqlite3_str_appendf(p, "\\x%02x", a[j]);
        else sqlite3_str_appendchar(p, 1, (char)a[j]);
      }
      sqlite3_str_appendall(p, "'");
      break;
    case SQLITE_BLOB:
      a = sqlite3_column_blob(pStmt, i);
      n = sqlite3_column_bytes(pStmt, i);
      if( n>64 ){
        sqlite3_str_appendf(p, "B:%d bytes, hash %016llx", n, kd_hash(a, n));
        break;
      }
      sqlite3_str_appendall(p, "B:x'");
      for(j=0; j<n; j++) sqlite3_str_appendf(p, "%02x", a[j]);
      sqlite3_str_appendall(p, "'");
      break;
    default:
      sqlite3_str_appendall(p, "N");
      break;
  }
}

static int kd_strcmp(const void *pA, const void *pB){
  return strcmp(*(char*const*)pA, *(char*const*)pB);
}

/* Run zSql; return its outcome as text: "rc=<primary code>", for a write
** that succeeded " changes=<sqlite3_changes()>", for an error " | <the
** message>", then one line per row (sorted unless bOrdered).
** sqlite3_malloc'd. */
static char *kd_run(sqlite3 *db, const char *zSql, int bOrdered, int bWrite){
  sqlite3_stmt *pStmt = 0;
  sqlite3_str *pOut = sqlite3_str_new(0);
  char **azRow = 0;
  int nRow = 0, i, rc;
  rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  while( rc==SQLITE_OK && (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    sqlite3_str *pRow = sqlite3_str_new(0);
    for(i=0; i<sqlite3_column_count(pStmt); i++){
      if( i ) sqlite3_str_appendall(pRow, " | ");
      kd_column(pStmt, i, pRow);
    }
    azRow = sqlite3_realloc64(azRow, (nRow+1)*sizeof(char*));
    ck_assert_ptr_nonnull(azRow);
    azRow[nRow] = sqlite3_str_finish(pRow);
    ck_assert_ptr_nonnull(azRow[nRow]);
    nRow++;
    rc = SQLITE_OK;
  }
  if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  sqlite3_str_appendf(pOut, "rc=%d", rc & 0xff);
  if( bWrite && rc==SQLITE_OK ){
    sqlite3_str_appendf(pOut, " changes=%d", sqlite3_changes(db));
  }
  if( rc ) sqlite3_str_appendf(pOut, " | %s", sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  if( !bOrdered && nRow>1 ) qsort(azRow, nRow, sizeof(char*), kd_strcmp);
  for(i=0; i<nRow; i++){
    sqlite3_str_appendf(pOut, "\n  %s", azRow[i]);
    sqlite3_free(azRow[i]);
  }
  sqlite3_free(azRow);
  return sqlite3_str_finish(pOut);
}

/* Compare two outcomes: equal row lines and equal primary code (the
** message after the code is not compared). */
static int kd_same(const char *zA, const char *zB){
  size_t nA = strcspn(zA, "|\n"), nB = strcspn(zB, "|\n");
  const char *a = strchr(zA, '\n'), *b = strchr(zB, '\n');
  if( nA!=nB || memcmp(zA, zB, nA)!=0 ) return 0;
  if( (a==0)!=(b==0) ) return 0;
  return a==0 || strcmp(a, b)==0;
}

typedef struct KdRun KdRun;
struct KdRun {
  sqlite3 *db;
  const char *zType;
  sqlite3_uint64 iSeed;
  int iStep;
  int bVerbose;
  sqlite3 *db2;                 /* a second connection: reads commits */
  int nStmt, nErr, nRow;        /* statements compared, failed, rows */
};

/* Run the template on kv and on ref through db (pR->db or pR->db2) and
** fail on any difference. */
static void kd_diff_db(KdRun *pR, sqlite3 *db, const char *zTmpl,
                       int bOrdered){
  int bWrite = strncmp(zTmpl, "SELECT", 6)!=0;
  char *zKv = kd_subst(zTmpl, "kv");
  char *zRef = kd_subst(zTmpl, "ref");
  char *zA, *zB;
  const char *z;
  if( pR->bVerbose ) fprintf(stderr, "%d: %s\n", pR->iStep, zTmpl);
  zA = kd_run(db, zKv, bOrdered, bWrite);
  zB = kd_run(db, zRef, bOrdered, bWrite);
  pR->nStmt++;
  if( strncmp(zB, "rc=0", 4)!=0 ) pR->nErr++;
  for(z=strchr(zB, '\n'); z; z=strchr(z+1, '\n')) pR->nRow++;
  if( !kd_same(zA, zB) ){
    ck_abort_msg("kvdiff: %s seed %llu statement %d differs%s "
        "(replay: DEPOT_KVDIFF_SEED=%llu CK_RUN_CASE=kvdiff "
        "./tests/check/check_kvdiff)\n  %s\nkv:  %s\nref: %s",
        pR->zType, pR->iSeed, pR->iStep,
        db==pR->db ? "" : " on a second connection", pR->iSeed, zTmpl,
        zA, zB);
  }
  sqlite3_free(zKv);
  sqlite3_free(zRef);
  sqlite3_free(zA);
  sqlite3_free(zB);
}

/* Compare the whole contents of both tables. */
static void kd_diff(KdRun *pR, const char *zTmpl, int bOrdered){
  kd_diff_db(pR, pR->db, zTmpl, bOrdered);
}

/* Compare the whole contents of both tables, as the connection sees them
** and as the second connection does (the last commit: main.db is in WAL
** mode, so its readers never wait). */
static void kd_contents(KdRun *pR){
  kd_diff(pR, "SELECT key, value FROM @T ORDER BY key", 1);
  kd_diff(pR, "SELECT key, value FROM @T", 0);
  kd_diff_db(pR, pR->db2, "SELECT key, value FROM @T ORDER BY key", 1);
}

/* A transaction-control step on the connection (both tables). */
typedef struct KdTxn KdTxn;
struct KdTxn {
  int bOpen;                  /* inside a transaction */
  int bBegin;                 /* ... started by BEGIN (not a SAVEPOINT) */
  int nSp;                    /* savepoints s0..s(nSp-1) open */
};

static void kd_txn_exec(KdRun *pR, const char *zSql){
  char *zErr = 0;
  if( pR->bVerbose ) fprintf(stderr, "%d: %s\n", pR->iStep, zSql);
  if( th_try(pR->db, zSql, &zErr)!=SQLITE_OK ){
    ck_abort_msg("kvdiff: %s seed %llu statement %d: %s failed: %s",
                 pR->zType, pR->iSeed, pR->iStep, zSql, zErr);
  }
  sqlite3_free(zErr);
  ck_assert_int_eq(sqlite3_get_autocommit(pR->db), 0);
}

/* Maybe run a transaction step; returns 1 if one ran. */
static int kd_txn_step(KdRun *pR, KdRand *r, KdTxn *t){
  char zSql[64];
  int e = kd_below(r, 100), k;
  if( !t->bOpen ){
    if( e>=20 ) return 0;
    t->bOpen = 1;
    t->bBegin = e<15;
    t->nSp = t->bBegin ? 0 : 1;
    kd_txn_exec(pR, t->bBegin ? "BEGIN" : "SAVEPOINT s0");
    return 1;
  }
  if( e<4 || (e<7 && !t->bBegin) ){                     /* end it */
    const char *z = e<2 ? "ROLLBACK" : t->bBegin ? "COMMIT" : "RELEASE s0";
    if( pR->bVerbose ) fprintf(stderr, "%d: %s\n", pR->iStep, z);
    th_exec(pR->db, z);
    ck_assert_int_ne(sqlite3_get_autocommit(pR->db), 0);
    t->bOpen = 0;
    t->nSp = 0;
    kd_contents(pR);
    return 1;
  }
  if( e<12 && t->nSp<KD_MAX_SAVEPOINTS ){
    snprintf(zSql, sizeof(zSql), "SAVEPOINT s%d", t->nSp++);
    kd_txn_exec(pR, zSql);
    return 1;
  }
  k = t->bBegin ? 0 : 1;                   /* s0 of a SAVEPOINT txn stays */
  if( e<16 && t->nSp>k ){
    k += kd_below(r, t->nSp-k);
    snprintf(zSql, sizeof(zSql), "RELEASE s%d", k);
    t->nSp = k;
    kd_txn_exec(pR, zSql);
    return 1;
  }
  if( e<21 && t->nSp>0 ){
    k = kd_below(r, t->nSp);
    snprintf(zSql, sizeof(zSql), "ROLLBACK TO s%d", k);
    t->nSp = k+1;
    kd_txn_exec(pR, zSql);
    kd_contents(pR);
    return 1;
  }
  return 0;
}

/* Close the connection and open the database again (kv_btree, kv_log:
** the KV table's rows now come from its files), then compare. */
static void kd_reopen(KdRun *pR, const char *zDb){
  if( pR->bVerbose ) fprintf(stderr, "%d: (reopen)\n", pR->iStep);
  ck_assert_int_eq(sqlite3_close(pR->db2), SQLITE_OK);
  ck_assert_int_eq(sqlite3_close(pR->db), SQLITE_OK);
  pR->db = th_open(zDb);
  pR->db2 = th_open(zDb);
  th_exec(pR->db, "PRAGMA synchronous=OFF");
  kd_contents(pR);
}

/* One statement: a transaction step, a query or a write. */
static void kd_step(KdRun *pR, KdRand *r, KdTxn *t){
  sqlite3_str *p;
  char *zTmpl;
  int bOrdered = 1;
  if( kd_txn_step(pR, r, t) ) return;
  p = sqlite3_str_new(0);
  if( kd_below(r, 5)<2 ) kd_query(r, p, &bOrdered);
  else kd_write(pR->db, r, p);
  zTmpl = sqlite3_str_finish(p);
  ck_assert_ptr_nonnull(zTmpl);
  kd_diff(pR, zTmpl, bOrdered);
  sqlite3_free(zTmpl);
  if( t->bOpen && sqlite3_get_autocommit(pR->db) ){
    ck_abort_msg("kvdiff: %s seed %llu statement %d ended the transaction",
                 pR->zType, pR->iSeed, pR->iStep);
  }
  if( !t->bOpen ) kd_contents(pR);
}

/* One seed: a fresh database and store, nStep statements. */
static void kd_run_seed(const char *zType, sqlite3_uint64 iSeed, int nStep){
  char *zDir = th_tmpdir("kvdiff");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  int bPersistent = strcmp(zType, "kv_memory")!=0;
  char *zSql;
  KdRand r;
  KdRun run;
  KdTxn t;
  int i;
  ck_assert_ptr_nonnull(zDb);
  memset(&t, 0, sizeof(t));
  memset(&run, 0, sizeof(run));
  run.db = th_open(zDb);
  run.zType = zType;
  run.iSeed = iSeed;
  run.bVerbose = getenv("DEPOT_KVDIFF_VERBOSE")!=0;
  r.s = iSeed*0x2545f4914f6cdd1dULL + 1;
  zSql = sqlite3_mprintf("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF;"
      "CREATE VIRTUAL TABLE kv USING %s(dir='%q/store');"
      "CREATE TABLE ref(key PRIMARY KEY NOT NULL, value) WITHOUT ROWID;",
      zType, zDir);
  th_exec(run.db, zSql);
  sqlite3_free(zSql);
  run.db2 = th_open(zDb);
  for(i=0; i<nStep; i++){
    run.iStep = i;
    /* now and then, between transactions, a reopen (kv_memory tables
    ** are not persistent: they would come back empty) */
    if( kd_below(&r, 60)==0 && !t.bOpen && bPersistent ){
      kd_reopen(&run, zDb);
    }else{
      kd_step(&run, &r, &t);
    }
  }
  if( t.bOpen ) th_exec(run.db, "ROLLBACK");
  run.iStep = nStep;
  kd_contents(&run);
  if( bPersistent ) kd_reopen(&run, zDb);
  if( run.bVerbose ){
    fprintf(stderr, "kvdiff: %s seed %llu: %d statements compared (%d "
            "failed in both), %d rows\n", zType, iSeed, run.nStmt, run.nErr,
            run.nRow);
  }
  ck_assert_int_eq(sqlite3_close(run.db2), SQLITE_OK);
  ck_assert_int_eq(sqlite3_close(run.db), SQLITE_OK);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}

static int kd_env_int(const char *zName, int iDefault){
  const char *z = getenv(zName);
  return (z && z[0]) ? atoi(z) : iDefault;
}

/* The KV table of type azKdType[_i] behaves like the WITHOUT ROWID table
** on every generated statement of every seed. */
START_TEST(test_kvdiff_kv_table_matches_without_rowid_table){
  const char *zType = azKdType[_i];
  const char *zSeed = getenv("DEPOT_KVDIFF_SEED");
  int nStep = kd_env_int("DEPOT_KVDIFF_STEPS", th_scaled(KD_STEPS, 4));
  int nSeed = kd_env_int("DEPOT_KVDIFF_ITERS", th_scaled(KD_SEEDS, 3));
  int i;
  if( zSeed && zSeed[0] ){
    kd_run_seed(zType, strtoull(zSeed, 0, 10), nStep);
    return;
  }
  for(i=0; i<nSeed; i++) kd_run_seed(zType, (sqlite3_uint64)i+1, nStep);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvdiff");
  TCase *tc = tcase_create("kvdiff");
  tcase_add_loop_test(tc, test_kvdiff_kv_table_matches_without_rowid_table,
                      0, (int)(sizeof(azKdType)/sizeof(azKdType[0])));
  suite_add_tcase(s, tc);
  return s;
}
