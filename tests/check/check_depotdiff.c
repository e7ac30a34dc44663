/*
** check_depotdiff.c -- the "depotdiff" suite: a differential test of depot
** databases against plain SQLite files.
**
** A seeded generator drives one SQL workload against a database in the
** depot VFS and against a plain file on the default VFS (its reference),
** and after every step compares them: a digest of the schema and of every
** table (each value with its sqlite3_column_type), page_count,
** freelist_count, user_version, PRAGMA integrity_check, and the result
** code and message of every statement that fails.  The workload mixes
** inserts, updates and deletes over tables that come and go (rowid and
** WITHOUT ROWID, indexes created and dropped, also with the sorter
** spilling), BLOBs spanning overflow pages, explicit transactions ending
** in COMMIT or ROLLBACK, nested SAVEPOINTs, statements that fail,
** transactions bigger than the page cache, temporary tables, VACUUM,
** incremental vacuum, close and reopen, a second writer, and a reader
** that holds its snapshot across commits of the writer (against a
** WAL-mode reference its stale write must fail the same way).  The
** branchable part runs at random steps too: forks and forks of forks
** (each with a copy of its source's reference made then, which it must
** equal and from which both then diverge independently), restore points,
** restores to them and to points in time, rollbacks to an earlier txid,
** their undo, each against a saved copy of the reference,
** depot_compact / depot_gc (which must change nothing), backups into the
** depot database, and copies out of it (depot_export, the backup API,
** VACUUM INTO) compared page for page with the same copy of the
** reference.  depot_verify must find nothing.
**
** Every seed picks a page size, an auto_vacuum mode and a rollback-journal
** mode of the depot database, and rollback journal or WAL for the plain
** reference.  Deviations documented in docs/SQL.md are not compared:
** journal_mode=WAL on a depot database answers the mode in effect and
** changes nothing ("Journal modes"; checked once per seed); a reader of the
** plain file in rollback-journal mode would block the writer's COMMIT,
** so the plain reader only runs when the reference is in WAL mode
** ("Snapshots": depot readers never block a writer); a depot connection
** opens other files through its own VFS ("Other databases of the
** connection"), so VACUUM INTO names vfs=unix; page copies skip header
** fields a copy does not keep and freelist bytes that hold no data.
** journal_mode=OFF is not used because ROLLBACK is undefined there in
** SQLite itself.
**
** Environment:
**   DEPOT_DIFF_ITERS=N  steps per seed (default 40); long runs use more.
**   DEPOT_DIFF_SEEDS=N  number of seeds, 1..N (default 6; in a sanitizer
**                       or Valgrind build 3 by default: seeds 2, 6, 3;
**                       under ThreadSanitizer 2: seeds 2, 6).
**   DEPOT_DIFF_SEED=S   run only seed S, to replay a mismatch (a failure
**                       prints "seed S step N" and the variables to set).
**   DEPOT_DIFF_TRACE=1  print each step and statement on stderr.
**   DEPOT_TEST_STORE_URI=postgresql://...  the depot side on that
**                       PostgreSQL server (tests/check/pg_suite.sh), in a
**                       schema named after the test's directory; 2 seeds
**                       by default.
** A long run: DEPOT_DIFF_SEEDS=40 DEPOT_DIFF_ITERS=2000 CK_DEFAULT_TIMEOUT=3600
** ./tests/check/check_depotdiff
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- deterministic randomness ---- */

typedef struct Rng Rng;
struct Rng { uint64_t s; };

static uint64_t dd_mix(uint64_t z){
  z = (z ^ (z>>30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z>>27)) * 0x94d049bb133111ebULL;
  return z ^ (z>>31);
}
static uint64_t rng_next(Rng *r){
  r->s += 0x9e3779b97f4a7c15ULL;
  return dd_mix(r->s);
}
static int rng_below(Rng *r, int n){ return (int)(rng_next(r)%(uint64_t)n); }

/* dblob(seed, n): n bytes derived from seed only, so that both sides of
** the comparison store the same (incompressible) bytes. */
static void dd_dblob(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  sqlite3_int64 n = sqlite3_value_int64(argv[1]);
  Rng r;
  unsigned char *a;
  sqlite3_int64 i;
  (void)argc;
  if( n<0 ) n = 0;
  if( n>4000000 ){
    sqlite3_result_error(ctx, "dblob: n must be 0..4000000", -1);
    return;
  }
  r.s = (uint64_t)sqlite3_value_int64(argv[0]);
  a = sqlite3_malloc64(n+8);
  if( a==0 ){ sqlite3_result_error_nomem(ctx); return; }
  for(i=0; i<n; i+=8){
    uint64_t v = rng_next(&r);
    memcpy(a+i, &v, 8);
  }
  sqlite3_result_blob64(ctx, a, (sqlite3_uint64)n, sqlite3_free);
}

/* ---- one database and its reference ---- */

typedef struct Pair Pair;
struct Pair {
  char *zName;       /* "main" or the fork's branch name */
  char *zUri;        /* depot URI */
  char *zPlain;      /* reference file */
  sqlite3 *d;        /* depot connection */
  sqlite3 *p;        /* reference connection */
};

/* A saved reference copy and the depot point it stands for. */
typedef struct Saved Saved;
struct Saved {
  char *zFile;       /* copy of the reference */
  char *zPoint;      /* restore point name, or NULL */
  sqlite3_int64 iBranch, iTxid;   /* rollback target when zPoint is NULL */
  char *zTime;       /* a time between that commit and the next one */
};

#define DD_MAX_FORK  2
#define DD_MAX_SAVED 4

typedef struct Diff Diff;
struct Diff {
  uint64_t iSeed;
  int iStep;
  Rng r;
  char *zDir, *zStore;
  sqlite3 *adm;                    /* :memory:, runs the depot_* functions */
  int pgsz;                        /* page size of the seed */
  int eAutoVac;                    /* 0 none, 1 full, 2 incremental */
  const char *zJournal;            /* rollback journal mode of depot */
  int bPlainWal;                   /* reference in WAL mode */
  int nFile;                       /* names of saved files */
  Pair main;
  Pair aFork[DD_MAX_FORK];
  int nFork;
  Saved aSaved[DD_MAX_SAVED];
  int nSaved;
  int nFork_made, nRestore, nRollback, nReader, nReopen, nError;
  int bTrace;                      /* DEPOT_DIFF_TRACE */
  sqlite3_int64 nMaxBytes;         /* inserts turn to deletes beyond this */
};

static Diff *pDdNow = 0;          /* the run, for messages of dd_check */

/* ck_assert_msg with the seed and step of the run. */
#define dd_check(c, ...) do{ if( !(c) ){ \
  char *zM_ = sqlite3_mprintf(__VA_ARGS__); \
  ck_abort_msg("depotdiff: seed %llu step %d: %s", \
    pDdNow ? (unsigned long long)pDdNow->iSeed : 0ULL, \
    pDdNow ? pDdNow->iStep : -1, zM_); } }while(0)

static void dd_fail(Diff *x, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  ck_abort_msg("depotdiff: seed %llu step %d: %s (replay: DEPOT_DIFF_SEED=%llu"
               " DEPOT_DIFF_ITERS=%d)", (unsigned long long)x->iSeed,
               x->iStep, z, (unsigned long long)x->iSeed, x->iStep+1);
}

static void dd_setup_conn(Diff *x, sqlite3 *db, int bDepot){
  char *z;
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, th_busy_ms(5000));
  ck_assert_int_eq(sqlite3_create_function(db, "dblob", 2,
      SQLITE_UTF8|SQLITE_DETERMINISTIC, 0, dd_dblob, 0, 0), SQLITE_OK);
  /* A plain file goes to WAL mode only once it has pages: an empty file
  ** in WAL mode keeps its default page size and auto_vacuum. */
  if( !bDepot && x->bPlainWal && th_int(db, "PRAGMA page_count")==0 ) return;
  z = sqlite3_mprintf("PRAGMA journal_mode=%s",
      bDepot ? x->zJournal : (x->bPlainWal ? "wal" : "delete"));
  th_exec(db, z);
  sqlite3_free(z);
}

static sqlite3 *dd_open(Diff *x, const char *zPath, int bDepot){
  sqlite3 *db = th_open(zPath);
  dd_setup_conn(x, db, bDepot);
  return db;
}

static void pair_open(Diff *x, Pair *pp){
  pp->d = dd_open(x, pp->zUri, 1);
  pp->p = dd_open(x, pp->zPlain, 0);
}

static void pair_close(Pair *pp){
  ck_assert_int_eq(sqlite3_close(pp->d), SQLITE_OK);
  ck_assert_int_eq(sqlite3_close(pp->p), SQLITE_OK);
  pp->d = pp->p = 0;
}

static void pair_free(Pair *pp){
  if( pp->d ) pair_close(pp);
  sqlite3_free(pp->zName);
  sqlite3_free(pp->zUri);
  sqlite3_free(pp->zPlain);
  memset(pp, 0, sizeof(*pp));
}

/* The store of directory zDir: <zDir>/store.depot, or with
** $DEPOT_TEST_STORE_URI (tests/check/pg_suite.sh) that PostgreSQL server
** in a schema named after zDir. */
static char *dd_store_path(const char *zDir){
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  const char *zBase = strrchr(zDir, '/');
  if( zPg && zPg[0] ){
    return sqlite3_mprintf("%s&schema=%s", zPg, zBase ? zBase+1 : zDir);
  }
  return sqlite3_mprintf("%s/store.depot", zDir);
}

static void pair_init(Diff *x, Pair *pp, const char *zBranch){
  pp->zName = sqlite3_mprintf("%s", zBranch);
  if( strncmp(x->zStore, "postgresql://", 13)==0 ){
    sqlite3_str *s = sqlite3_str_new(0);
    const char *z;
    sqlite3_str_appendf(s, "file:%s/app?vfs=depot&db=app&branch=%s&store=",
                        x->zDir, zBranch);
    for(z=x->zStore; *z; z++){
      if( *z=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *z);
    }
    pp->zUri = sqlite3_str_finish(s);
  }else{
    pp->zUri = sqlite3_mprintf("file:%s?vfs=depot&db=app&branch=%s",
                               x->zStore, zBranch);
  }
  pp->zPlain = sqlite3_mprintf("%s/plain-%s.db", x->zDir, zBranch);
}

/* ---- comparing ---- */

static uint64_t dd_hash(uint64_t h, const void *p, size_t n){
  const unsigned char *a = (const unsigned char*)p;
  size_t i;
  for(i=0; i+8<=n; i+=8){
    uint64_t w;
    memcpy(&w, a+i, 8);
    h = dd_mix(h ^ w);
  }
  for(; i<n; i++){ h ^= a[i]; h *= 0x100000001b3ULL; }
  return h;
}

/* Digest of every row zSql returns: types and values. */
static uint64_t dd_rows(sqlite3 *db, const char *zSql, int *pnRow){
  sqlite3_stmt *pStmt = 0;
  uint64_t h = 0xcbf29ce484222325ULL;
  int rc, i, nRow = 0;
  rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  dd_check(rc==SQLITE_OK, "%s: %s", zSql, sqlite3_errmsg(db));
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    for(i=0; i<sqlite3_column_count(pStmt); i++){
      unsigned char t = (unsigned char)sqlite3_column_type(pStmt, i);
      h = dd_hash(h, &t, 1);
      if( t==SQLITE_INTEGER ){
        sqlite3_int64 v = sqlite3_column_int64(pStmt, i);
        h = dd_hash(h, &v, sizeof(v));
      }else if( t==SQLITE_FLOAT ){
        double v = sqlite3_column_double(pStmt, i);
        h = dd_hash(h, &v, sizeof(v));
      }else if( t!=SQLITE_NULL ){
        const void *p = sqlite3_column_blob(pStmt, i);
        int n = sqlite3_column_bytes(pStmt, i);
        h = dd_hash(h, &n, sizeof(n));
        if( n ) h = dd_hash(h, p, (size_t)n);
      }
    }
    nRow++;
  }
  dd_check(rc==SQLITE_DONE, "%s: %s", zSql, sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  if( pnRow ) *pnRow = nRow;
  return h;
}

/* The integer zSql gives on db; failures name the seed and step. */
static sqlite3_int64 dd_int(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 v;
  int rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  dd_check(rc==SQLITE_OK, "%s: %s", zSql, sqlite3_errmsg(db));
  rc = sqlite3_step(pStmt);
  dd_check(rc==SQLITE_ROW, "%s: %s", zSql, sqlite3_errmsg(db));
  v = sqlite3_column_int64(pStmt, 0);
  sqlite3_finalize(pStmt);
  return v;
}

/* The state of db as text: schema, each table's rows, page counts.  With
** bPages 0 the page counts are left out (a reader's view of the file
** size is not part of its snapshot on a plain WAL file). */
static char *dd_state(sqlite3 *db, int bPages){
  sqlite3_stmt *pStmt = 0;
  char *z;
  int n;
  uint64_t h = dd_rows(db, "SELECT type, name, tbl_name, rootpage, sql"
                           " FROM sqlite_schema ORDER BY type, name", &n);
  z = sqlite3_mprintf("schema=%d:%016llx uv=%lld", n, (unsigned long long)h,
                      dd_int(db, "PRAGMA user_version"));
  if( bPages ){
    z = sqlite3_mprintf("%z pages=%lld free=%lld", z,
                        dd_int(db, "PRAGMA page_count"),
                        dd_int(db, "PRAGMA freelist_count"));
  }
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_schema"
      " WHERE type='table' AND name GLOB 't*' ORDER BY name", -1, &pStmt, 0),
      SQLITE_OK);
  while( sqlite3_step(pStmt)==SQLITE_ROW ){
    const char *zT = (const char*)sqlite3_column_text(pStmt, 0);
    char *zQ = sqlite3_mprintf("SELECT * FROM \"%w\" ORDER BY id", zT);
    h = dd_rows(db, zQ, &n);
    z = sqlite3_mprintf("%z %s=%d:%016llx", z, zT, n, (unsigned long long)h);
    sqlite3_free(zQ);
  }
  sqlite3_finalize(pStmt);
  ck_assert_ptr_nonnull(z);
  return z;
}

static void dd_integrity(Diff *x, sqlite3 *db, const char *zWho){
  char *z = th_text(db, "PRAGMA integrity_check");
  if( z==0 || strcmp(z, "ok")!=0 ){
    dd_fail(x, "integrity_check of %s: %s", zWho, z ? z : "NULL");
  }
  sqlite3_free(z);
}

/* The depot database of pp must equal its reference. */
static void pair_compare(Diff *x, Pair *pp){
  char *zP = dd_state(pp->p, 1);
  char *zD = dd_state(pp->d, 1);
  if( strcmp(zP, zD)!=0 ){
    dd_fail(x, "branch %s differs from its reference\n  plain: %s\n  depot: %s",
            pp->zName, zP, zD);
  }
  dd_integrity(x, pp->p, "the reference");
  dd_integrity(x, pp->d, pp->zName);
  sqlite3_free(zP);
  sqlite3_free(zD);
}

/* Run zSql on both sides of pp: the same result code, the same message,
** the same transaction state.  Returns the result code. */
static int pair_exec(Diff *x, Pair *pp, const char *zSql){
  char *zEp = 0, *zEd = 0;
  if( x->bTrace ) fprintf(stderr, "%d %s: %s\n", x->iStep, pp->zName, zSql);
  int rcP = th_try(pp->p, zSql, &zEp);
  int rcD = th_try(pp->d, zSql, &zEd);
  int eP = rcP ? sqlite3_extended_errcode(pp->p) : 0;
  int eD = rcD ? sqlite3_extended_errcode(pp->d) : 0;
  if( rcP!=rcD || eP!=eD
   || (zEp && zEd && strcmp(zEp, zEd)!=0) || (zEp==0)!=(zEd==0) ){
    dd_fail(x, "on %s: %s\n  plain: rc=%d/%d %s\n  depot: rc=%d/%d %s",
            pp->zName, zSql, rcP, eP, zEp ? zEp : "", rcD, eD,
            zEd ? zEd : "");
  }
  if( sqlite3_get_autocommit(pp->p)!=sqlite3_get_autocommit(pp->d) ){
    dd_fail(x, "on %s: %s: transaction state differs (plain %d, depot %d)",
            pp->zName, zSql, sqlite3_get_autocommit(pp->p),
            sqlite3_get_autocommit(pp->d));
  }
  if( rcP ) x->nError++;
  sqlite3_free(zEp);
  sqlite3_free(zEd);
  return rcP;
}

static void pair_execf(Diff *x, Pair *pp, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  pair_exec(x, pp, z);
  sqlite3_free(z);
}

/* End a transaction a failed statement may have left open. */
static void pair_settle(Diff *x, Pair *pp){
  if( !sqlite3_get_autocommit(pp->p) ){
    pair_exec(x, pp, rng_below(&x->r, 2) ? "COMMIT" : "ROLLBACK");
  }
  if( !sqlite3_get_autocommit(pp->p) ) pair_exec(x, pp, "ROLLBACK");
}

/* ---- the workload ---- */

/* The number of a table t0..t5 of pp: mostly one that exists, sometimes
** any (then statements on it fail the same way on both sides). */
static int dd_table_of(Diff *x, Pair *pp){
  int t = rng_below(&x->r, 6);
  char *z;
  if( rng_below(&x->r, 8)==0 ) return t;
  z = th_text(pp->p, "SELECT group_concat(substr(name,2),' ') FROM"
              " sqlite_schema WHERE type='table' AND name GLOB 't[0-5]'");
  if( z ){
    int n = (int)(strlen(z)+1)/2;
    t = z[2*rng_below(&x->r, n)]-'0';
  }
  sqlite3_free(z);
  return t;
}
#define dd_table(x) dd_table_of(x, pp)

static const char *dd_rows_cte =
  "(WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v+1 FROM g"
  " WHERE v<%d) SELECT v FROM g)";

/* An expression for column b (text) and c (blob) of generated row v. */
static char *dd_text_expr(Diff *x){
  switch( rng_below(&x->r, 4) ){
    case 0: return sqlite3_mprintf("printf('%%.*c', (v*%d)%%400, 'a')",
                                   1+rng_below(&x->r, 50));
    case 1: return sqlite3_mprintf("hex(dblob(v+%d, %d))",
                                   rng_below(&x->r, 100000),
                                   rng_below(&x->r, 200));
    case 2: return sqlite3_mprintf("NULL");
    default: return sqlite3_mprintf("'k'||(v*%d)", 1+rng_below(&x->r, 9));
  }
}

static char *dd_blob_expr(Diff *x){
  int n;
  switch( rng_below(&x->r, 6) ){
    case 0: n = rng_below(&x->r, 100); break;
    case 1: case 2: n = 100+rng_below(&x->r, 3000); break;
    case 3: return sqlite3_mprintf("zeroblob(%d)", rng_below(&x->r, 20000));
    case 4: return sqlite3_mprintf("NULL");
    default: n = 5000+rng_below(&x->r, 150000); break;   /* overflow chain */
  }
  return sqlite3_mprintf("dblob(v*7919+%d, %d)", rng_below(&x->r, 1000000),
                         n);
}

static void op_delete(Diff *x, Pair *pp);

/* The size of pp's reference in bytes. */
static sqlite3_int64 dd_bytes(Pair *pp){
  return th_int(pp->p, "SELECT page_count*page_size FROM pragma_page_count,"
                       " pragma_page_size");
}

static void op_insert(Diff *x, Pair *pp){
  int n = 1+rng_below(&x->r, rng_below(&x->r, 4)==0 ? 200 : 20);
  int base = rng_below(&x->r, 5000);
  char *zB, *zC, *zRows;
  if( dd_bytes(pp)>x->nMaxBytes ){
    op_delete(x, pp);                /* keeps a run's time in bounds */
    return;
  }
  zB = dd_text_expr(x);
  zC = dd_blob_expr(x);
  if( strstr(zC, "dblob") && n>8 ) n = 8;      /* big blobs: few rows */
  zRows = sqlite3_mprintf(dd_rows_cte, n);
  pair_execf(x, pp, "INSERT %s INTO t%d(id,u,a,b,c,d) SELECT %d+v*%d,"
      " (%d+v*13)%%%d, v%%17, %s, %s, CASE WHEN v%%5 THEN v*1.25/%d END"
      " FROM %s", rng_below(&x->r, 3) ? "OR IGNORE" : "", dd_table(x),
      base, 1+rng_below(&x->r, 5), rng_below(&x->r, 100000),
      1+rng_below(&x->r, 100000), zB, zC, 1+rng_below(&x->r, 7), zRows);
  sqlite3_free(zB); sqlite3_free(zC); sqlite3_free(zRows);
}

static void op_update(Diff *x, Pair *pp){
  int k = rng_below(&x->r, 6000), n = 1+rng_below(&x->r, 300);
  char *zB = dd_text_expr(x), *zC = dd_blob_expr(x);
  pair_execf(x, pp, "UPDATE %s t%d SET a=a+%d, b=(SELECT %s FROM (SELECT"
      " id AS v)), c=(SELECT %s FROM (SELECT id AS v))%s WHERE id BETWEEN"
      " %d AND %d", rng_below(&x->r, 2) ? "OR IGNORE" : "", dd_table(x),
      1+rng_below(&x->r, 5), zB, zC,
      rng_below(&x->r, 4) ? "" : ", u=u+1", k, k+n);
  sqlite3_free(zB); sqlite3_free(zC);
}

static void op_delete(Diff *x, Pair *pp){
  int k = rng_below(&x->r, 6000), n = rng_below(&x->r, 500);
  if( rng_below(&x->r, 6)==0 ){
    /* shrink: most rows go */
    pair_execf(x, pp, "DELETE FROM t%d WHERE id%%%d<>0", dd_table(x),
               2+rng_below(&x->r, 10));
  }else{
    pair_execf(x, pp, "DELETE FROM t%d WHERE id BETWEEN %d AND %d",
               dd_table(x), k, k+n);
  }
}

static void op_create_table(Diff *x, Pair *pp){
  int t = rng_below(&x->r, 6);
  if( rng_below(&x->r, 3)==0 ){
    pair_execf(x, pp, "CREATE TABLE t%d(id INTEGER NOT NULL PRIMARY KEY,"
        " u INT UNIQUE, a INT, b TEXT, c BLOB, d REAL) WITHOUT ROWID", t);
  }else{
    pair_execf(x, pp, "CREATE TABLE t%d(id INTEGER PRIMARY KEY, u INT UNIQUE,"
        " a INT, b TEXT, c BLOB, d REAL)", t);
  }
}

static const char *azIdxCol[] = { "a", "b", "a, b", "d, a", "c", "b, d, id" };

static void op_index(Diff *x, Pair *pp){
  int t = dd_table(x), i = rng_below(&x->r, 6);
  if( rng_below(&x->r, 3)==0 ){
    pair_execf(x, pp, "DROP INDEX i%d_%d", t, i);
  }else if( rng_below(&x->r, 3)==0 ){
    /* a tiny cache: the sorter spills to temporary files */
    pair_execf(x, pp, "PRAGMA cache_size=5; CREATE INDEX i%d_%d ON t%d(%s);"
               " PRAGMA cache_size=-2000", t, i, t, azIdxCol[i]);
  }else{
    pair_execf(x, pp, "CREATE INDEX i%d_%d ON t%d(%s)", t, i, t, azIdxCol[i]);
  }
}

/* A temporary table bigger than its cache (a temporary file of the main
** database's VFS) feeds a write back. */
static void op_temp(Diff *x, Pair *pp){
  int t = dd_table(x);
  pair_execf(x, pp, "PRAGMA temp.cache_size=5; CREATE TEMP TABLE tmp AS"
      " SELECT * FROM t%d ORDER BY b, length(c) DESC", t);
  pair_execf(x, pp, "INSERT OR IGNORE INTO t%d(id,u,a,b,c,d) SELECT"
      " id+%d, NULL, a, b, c, d FROM tmp ORDER BY d, b", dd_table(x),
      1+rng_below(&x->r, 30000));
  pair_exec(x, pp, "DROP TABLE IF EXISTS temp.tmp");
}

/* One data-changing statement. */
static void op_dml(Diff *x, Pair *pp){
  switch( rng_below(&x->r, 8) ){
    case 0: case 1: case 2: op_insert(x, pp); break;
    case 3: case 4: op_update(x, pp); break;
    case 5: op_delete(x, pp); break;
    case 6:
      /* a single row that may collide with id or u: the same error */
      pair_execf(x, pp, "INSERT INTO t%d(id,u,a) VALUES(%d,%d,1)",
                 dd_table(x), rng_below(&x->r, 3000), rng_below(&x->r, 3000));
      break;
    default:
      pair_execf(x, pp, "INSERT INTO t%d(id,u,a,b) VALUES(%d,1,'bad',"
                 " 'x') ON CONFLICT(id) DO UPDATE SET a=a+1, b=b||'y'",
                 dd_table(x), rng_below(&x->r, 3000));
      break;
  }
}

static void op_txn(Diff *x, Pair *pp){
  int i, n = 2+rng_below(&x->r, 4);
  pair_exec(x, pp, rng_below(&x->r, 2) ? "BEGIN" : "BEGIN IMMEDIATE");
  for(i=0; i<n; i++){
    if( rng_below(&x->r, 8)==0 ) op_create_table(x, pp);
    else if( rng_below(&x->r, 8)==0 ) op_index(x, pp);
    else op_dml(x, pp);
  }
  if( !sqlite3_get_autocommit(pp->p) ){
    pair_exec(x, pp, rng_below(&x->r, 3) ? "COMMIT" : "ROLLBACK");
  }
}

static void op_savepoints(Diff *x, Pair *pp){
  pair_exec(x, pp, "SAVEPOINT s1");
  op_dml(x, pp);
  pair_exec(x, pp, "SAVEPOINT s2");
  op_dml(x, pp);
  if( rng_below(&x->r, 2) ) op_index(x, pp);
  pair_exec(x, pp, rng_below(&x->r, 2) ? "ROLLBACK TO s2" : "RELEASE s2");
  op_dml(x, pp);
  if( rng_below(&x->r, 3)==0 ) pair_exec(x, pp, "ROLLBACK TO s1");
  op_dml(x, pp);
  pair_exec(x, pp, rng_below(&x->r, 4) ? "RELEASE s1"
                                       : "ROLLBACK TO s1; RELEASE s1");
}

/* A transaction that spills beyond a tiny page cache before COMMIT. */
static void op_spill(Diff *x, Pair *pp){
  pair_exec(x, pp, "PRAGMA cache_size=5");
  pair_exec(x, pp, "BEGIN");
  pair_execf(x, pp, "INSERT OR REPLACE INTO t%d(id,u,a,c) SELECT 20000+v,"
             " NULL, v, dblob(v, %d) FROM " "(WITH RECURSIVE g(v) AS"
             " (SELECT 1 UNION ALL SELECT v+1 FROM g WHERE v<%d)"
             " SELECT v FROM g)", dd_table(x), 200+rng_below(&x->r, 3000),
             20+rng_below(&x->r, 150));
  op_dml(x, pp);
  if( !sqlite3_get_autocommit(pp->p) ){
    pair_exec(x, pp, rng_below(&x->r, 3) ? "COMMIT" : "ROLLBACK");
  }
  pair_exec(x, pp, "PRAGMA cache_size=-2000");
}

/* One random step on pp that never touches the branch functions. */
static void op_sql(Diff *x, Pair *pp){
  switch( rng_below(&x->r, 20) ){
    case 0: case 1: op_create_table(x, pp); break;
    case 2: pair_execf(x, pp, "DROP TABLE t%d", dd_table(x)); break;
    case 3: case 4: op_index(x, pp); break;
    case 5: case 6: op_txn(x, pp); break;
    case 7: op_savepoints(x, pp); break;
    case 8: pair_exec(x, pp, "VACUUM"); break;
    case 9:
      pair_execf(x, pp, "PRAGMA incremental_vacuum(%d)", rng_below(&x->r, 50));
      break;
    case 10: op_spill(x, pp); break;
    case 11:
      pair_execf(x, pp, "PRAGMA user_version=%d", rng_below(&x->r, 1000));
      break;
    case 13: op_temp(x, pp); break;
    case 12:
      /* statements that fail the same way on both sides */
      pair_execf(x, pp, rng_below(&x->r, 2)
          ? "INSERT INTO nosuch%d VALUES(1)"
          : "BEGIN; INSERT INTO t%d(id) VALUES(1); INSERT INTO t%d(id)"
            " VALUES(1); COMMIT", rng_below(&x->r, 6), rng_below(&x->r, 6));
      break;
    default: op_dml(x, pp); break;
  }
  pair_settle(x, pp);
}

/* ---- steps that need the depot as a whole ---- */


static char *adm_text(Diff *x, const char *zFmt, ...){
  va_list ap;
  char *z, *zRes = 0;
  char *zErr = 0;
  sqlite3_stmt *pStmt = 0;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  if( sqlite3_prepare_v2(x->adm, z, -1, &pStmt, 0)!=SQLITE_OK
   || sqlite3_step(pStmt)!=SQLITE_ROW ){
    zErr = sqlite3_mprintf("%s", sqlite3_errmsg(x->adm));
  }else if( sqlite3_column_type(pStmt, 0)!=SQLITE_NULL ){
    zRes = sqlite3_mprintf("%s", sqlite3_column_text(pStmt, 0));
  }
  sqlite3_finalize(pStmt);
  if( zErr ) dd_fail(x, "%s: %s", z, zErr);
  sqlite3_free(z);
  return zRes;
}

/* Copy the reference of pp to a new file, page for page. */
static char *dd_copy_ref(Diff *x, sqlite3 *pSrc){
  char *zFile = sqlite3_mprintf("%s/saved-%d.db", x->zDir, x->nFile++);
  sqlite3 *pDst = th_open(zFile);
  sqlite3_backup *pB = sqlite3_backup_init(pDst, "main", pSrc, "main");
  ck_assert_ptr_nonnull(pB);
  ck_assert_int_eq(sqlite3_backup_step(pB, -1), SQLITE_DONE);
  ck_assert_int_eq(sqlite3_backup_finish(pB), SQLITE_OK);
  ck_assert_int_eq(sqlite3_close(pDst), SQLITE_OK);
  return zFile;
}

/* Make the (open) reference of pp a page-for-page copy of zFile. */
static void dd_load_ref(Diff *x, Pair *pp, const char *zFile){
  sqlite3 *pSrc = dd_open(x, zFile, 0);
  sqlite3_backup *pB = sqlite3_backup_init(pp->p, "main", pSrc, "main");
  ck_assert_ptr_nonnull(pB);
  ck_assert_int_eq(sqlite3_backup_step(pB, -1), SQLITE_DONE);
  ck_assert_int_eq(sqlite3_backup_finish(pB), SQLITE_OK);
  ck_assert_int_eq(sqlite3_close(pSrc), SQLITE_OK);
}

static void saved_free(Saved *s){
  sqlite3_free(s->zFile);
  sqlite3_free(s->zPoint);
  sqlite3_free(s->zTime);
  memset(s, 0, sizeof(*s));
}

static void saved_add(Diff *x, Saved *s){
  if( x->nSaved==DD_MAX_SAVED ){
    int i = rng_below(&x->r, DD_MAX_SAVED);
    saved_free(&x->aSaved[i]);
    x->aSaved[i] = x->aSaved[--x->nSaved];
  }
  x->aSaved[x->nSaved++] = *s;
}

/* The live branch id of main and its head txid. */
static sqlite3_int64 dd_main_branch(Diff *x, sqlite3_int64 *piHead){
  sqlite3_int64 id = th_intf(x->adm, "SELECT branch_id FROM depot_branches(%Q,"
      "'app') WHERE branch='main' AND state='live'", x->zStore);
  *piHead = th_intf(x->adm, "SELECT head_txid FROM depot_branches(%Q,'app')"
                    " WHERE branch_id=%lld", x->zStore, id);
  return id;
}

/* Fork main, or a fork of it, at its head; the fork must equal the
** reference of its source now. */
static void step_fork(Diff *x){
  Pair *pp, *pSrc = &x->main;
  char zName[32];
  char *zCopy;
  if( x->nFork>0 && rng_below(&x->r, 3)==0 ){
    pSrc = &x->aFork[rng_below(&x->r, x->nFork)];
  }
  snprintf(zName, sizeof(zName), "f%d", x->nFork_made++);
  th_intf(x->adm, "SELECT depot_fork(%Q,'app',%Q,%Q)", x->zStore, pSrc->zName,
          zName);
  zCopy = dd_copy_ref(x, pSrc->p);
  if( x->nFork==DD_MAX_FORK ){
    int i = rng_below(&x->r, DD_MAX_FORK);
    pair_free(&x->aFork[i]);
    x->aFork[i] = x->aFork[--x->nFork];
  }
  pp = &x->aFork[x->nFork++];
  pair_init(x, pp, zName);
  sqlite3_free(pp->zPlain);
  pp->zPlain = zCopy;
  pair_open(x, pp);
  pair_compare(x, pp);
}

/* Save the reference now with a restore point or a rollback target. */
static void step_save(Diff *x){
  Saved s;
  memset(&s, 0, sizeof(s));
  if( rng_below(&x->r, 2) ){
    s.zPoint = sqlite3_mprintf("rp%d", x->nFile);
    sqlite3_free(adm_text(x, "SELECT depot_restore_point(%Q,'app','main',%Q)",
                          x->zStore, s.zPoint));
  }else{
    s.iBranch = dd_main_branch(x, &s.iTxid);
    if( s.iTxid==0 ) return;          /* a fork without commits of its own */
    /* commit times have milliseconds: a time strictly between this head
    ** and the next commit */
    sqlite3_sleep(3);
    s.zTime = adm_text(x, "SELECT strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ','now')");
    sqlite3_sleep(3);
  }
  s.zFile = dd_copy_ref(x, x->main.p);
  saved_add(x, &s);
}

/* The backup API writes a saved reference into main and its reference. */
static void step_backup_in(Diff *x){
  Saved *s;
  sqlite3 *pSrc;
  sqlite3_backup *pB;
  if( x->nSaved==0 ) return;
  s = &x->aSaved[rng_below(&x->r, x->nSaved)];
  dd_load_ref(x, &x->main, s->zFile);
  pSrc = dd_open(x, s->zFile, 0);
  pB = sqlite3_backup_init(x->main.d, "main", pSrc, "main");
  ck_assert_ptr_nonnull(pB);
  ck_assert_int_eq(sqlite3_backup_step(pB, -1), SQLITE_DONE);
  ck_assert_int_eq(sqlite3_backup_finish(pB), SQLITE_OK);
  ck_assert_int_eq(sqlite3_close(pSrc), SQLITE_OK);
}

/* Reopen main on the branch the name points to now, its reference loaded
** from zFile. */
static void dd_main_moved(Diff *x, const char *zFile){
  ck_assert_int_eq(sqlite3_close(x->main.d), SQLITE_OK);
  x->main.d = dd_open(x, x->main.zUri, 1);
  dd_load_ref(x, &x->main, zFile);
  pair_compare(x, &x->main);
}

/* Restore or roll back main to a saved point, then maybe undo it. */
static void step_restore(Diff *x){
  Saved *s;
  char *zBefore, *zUndo = 0;
  sqlite3_int64 iHead;
  if( x->nSaved==0 ) return;
  s = &x->aSaved[rng_below(&x->r, x->nSaved)];
  if( s->zPoint==0 && s->iBranch!=dd_main_branch(x, &iHead) ) return;
  zBefore = dd_copy_ref(x, x->main.p);
  if( s->zPoint ){
    zUndo = adm_text(x, "SELECT depot_restore(%Q,'app','main',%Q)",
                     x->zStore, s->zPoint);
    x->nRestore++;
  }else if( rng_below(&x->r, 3)==0 ){
    /* point in time: every commit is retained (see dd_begin) */
    zUndo = adm_text(x, "SELECT depot_restore(%Q,'app','main',%Q)",
                     x->zStore, s->zTime);
    x->nRestore++;
  }else{
    char *zAt = rng_below(&x->r, 2) ? sqlite3_mprintf("%Q", s->zTime)
                                    : sqlite3_mprintf("%lld", s->iTxid);
    th_intf(x->adm, "SELECT depot_rollback(%Q,'app','main',%s)", x->zStore, zAt);
    sqlite3_free(zAt);
    x->nRollback++;
  }
  dd_main_moved(x, s->zFile);
  if( rng_below(&x->r, 3)==0 ){
    /* undo at once */
    if( zUndo ){
      sqlite3_free(adm_text(x, "SELECT depot_restore(%Q,'app','main',%Q)",
                            x->zStore, zUndo));
    }else{
      th_intf(x->adm, "SELECT depot_rollback(%Q,'app','main')", x->zStore);
    }
    dd_main_moved(x, zBefore);
  }else if( zUndo ){
    Saved u;
    u.zFile = zBefore; zBefore = 0;
    u.zPoint = zUndo; zUndo = 0;
    u.iBranch = u.iTxid = 0;
    u.zTime = 0;
    saved_add(x, &u);
  }
  sqlite3_free(zBefore);
  sqlite3_free(zUndo);
}

static void step_compact(Diff *x);

/* A reader holds its snapshot across commits of the writer. */
static void step_reader(Diff *x){
  sqlite3 *rd = dd_open(x, x->main.zUri, 1);
  sqlite3 *rp = x->bPlainWal ? dd_open(x, x->main.zPlain, 0) : 0;
  char *z0, *z1, *zNow;
  int i, n = 1+rng_below(&x->r, 3);
  th_exec(rd, "BEGIN");
  z0 = dd_state(rd, 0);
  if( rp ){ th_exec(rp, "BEGIN"); sqlite3_free(dd_state(rp, 0)); }
  zNow = dd_state(x->main.p, 0);
  if( strcmp(z0, zNow)!=0 ) dd_fail(x, "reader starts at\n  %s\nnot\n  %s",
                                    z0, zNow);
  sqlite3_free(zNow);
  for(i=0; i<n; i++){
    op_sql(x, &x->main);
    pair_compare(x, &x->main);
    if( rng_below(&x->r, 4)==0 ) step_compact(x);
  }
  z1 = dd_state(rd, 0);
  if( strcmp(z0, z1)!=0 ){
    dd_fail(x, "depot reader's snapshot moved\n  was: %s\n  now: %s", z0, z1);
  }
  sqlite3_free(z1);
  if( rp ){
    char *zQ = sqlite3_mprintf("PRAGMA user_version=%d",
                               rng_below(&x->r, 1000));
    int rcD, rcP;
    z1 = dd_state(rp, 0);
    if( strcmp(z0, z1)!=0 ) dd_fail(x, "plain reader's snapshot moved");
    sqlite3_free(z1);
    /* a write from the old snapshot: SQLITE_BUSY_SNAPSHOT on both sides
    ** when a commit came in between, else it succeeds on both */
    rcD = th_try(rd, zQ, 0);
    if( rcD ) rcD = sqlite3_extended_errcode(rd);
    rcP = th_try(rp, zQ, 0);
    if( rcP ) rcP = sqlite3_extended_errcode(rp);
    if( rcD!=rcP ){
      dd_fail(x, "%s from a reader's snapshot: plain rc=%d, depot rc=%d",
              zQ, rcP, rcD);
    }
    sqlite3_free(zQ);
    th_exec(rp, "COMMIT");
    ck_assert_int_eq(sqlite3_close(rp), SQLITE_OK);
  }
  th_exec(rd, "COMMIT");
  z1 = dd_state(rd, 1);
  zNow = dd_state(x->main.p, 1);
  if( strcmp(z1, zNow)!=0 ){
    dd_fail(x, "reader after its snapshot\n  %s\nnot\n  %s", z1, zNow);
  }
  sqlite3_free(z1); sqlite3_free(zNow); sqlite3_free(z0);
  ck_assert_int_eq(sqlite3_close(rd), SQLITE_OK);
  x->nReader++;
}

/* The whole content of file zPath (sqlite3_malloc'd) and its size. */
static unsigned char *dd_slurp(const char *zPath, long *pn){
  FILE *f = fopen(zPath, "rb");
  unsigned char *a;
  long n;
  ck_assert_msg(f!=0, "cannot open %s", zPath);
  ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
  n = ftell(f);
  ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
  a = sqlite3_malloc64(n>0 ? (sqlite3_uint64)n : 1);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq((long)fread(a, 1, (size_t)n, f), n);
  fclose(f);
  *pn = n;
  return a;
}

/* A copy of pp's depot database as a plain file, made one of three ways:
** depot_export, the backup API, or VACUUM INTO; and the reference copied
** the same way (depot_export: the backup API). */
static const char *azCopyHow[] = { "depot_export", "the backup API",
                                   "VACUUM INTO" };

static int dd_copy_both(Diff *x, Pair *pp, char **pzOut, char **pzRef){
  int e = rng_below(&x->r, 3);
  *pzOut = sqlite3_mprintf("%s/export-%d.db", x->zDir, x->nFile++);
  if( e==2 ){
    /* the depot connection would open a bare name through its own VFS
    ** (docs/SQL.md, "Other databases of the connection") */
    char *z = sqlite3_mprintf("VACUUM INTO 'file:%q?vfs=unix'", *pzOut);
    th_exec(pp->d, z);
    sqlite3_free(z);
    *pzRef = sqlite3_mprintf("%s/export-%d.db", x->zDir, x->nFile++);
    z = sqlite3_mprintf("VACUUM INTO %Q", *pzRef);
    th_exec(pp->p, z);
    sqlite3_free(z);
    return e;
  }
  *pzRef = dd_copy_ref(x, pp->p);
  if( e==1 ){
    char *zCopy = dd_copy_ref(x, pp->d);
    ck_assert_int_eq(rename(zCopy, *pzOut), 0);
    sqlite3_free(zCopy);
  }else{
    th_intf(x->adm, "SELECT depot_export(%Q,'app',%Q,%Q)", x->zStore, pp->zName,
            *pzOut);
  }
  return e;
}

/* Set [aLo[i], aHi[i]) to the bytes of page i+1 of file image a (n bytes)
** that the freelist leaves without data: the leaf pages and the unused part
** of trunk pages.  Their content is not defined: a plain connection's page
** cache can even keep bytes for a free page that its file no longer holds
** (after a rollback of a transaction that spilled into freelist pages). */
static long dd_get32(const unsigned char *a){
  return (long)(((uint32_t)a[0]<<24) | ((uint32_t)a[1]<<16)
                | ((uint32_t)a[2]<<8) | a[3]);
}

static void dd_free_ranges(const unsigned char *a, long n, int pgsz,
                           long *aLo, long *aHi){
  long nPage = n/pgsz, iTrunk = dd_get32(a+32), nGuard = 0;
  while( iTrunk>0 && iTrunk<=nPage && nGuard++<nPage ){
    const unsigned char *t = a + (iTrunk-1)*pgsz;
    long nLeaf = dd_get32(t+4), j;
    if( nLeaf>(pgsz-8)/4 ) break;
    aLo[iTrunk-1] = 8+4*nLeaf;                 /* trunk: its tail */
    aHi[iTrunk-1] = pgsz;
    for(j=0; j<nLeaf; j++){
      long iLeaf = dd_get32(t+8+4*j);
      if( iLeaf>0 && iLeaf<=nPage ){ aLo[iLeaf-1] = 0; aHi[iLeaf-1] = pgsz; }
    }
    iTrunk = dd_get32(t);
  }
}

/* A plain copy of pp's branch is, page for page, the same copy of the
** reference: the same bytes except the header fields that count commits
** (24..27, 92..95), say the journal mode (18..19), and the schema cookie
** (40..43), which the backup API that made the reference of a fork or a
** restore bumps in its destination, and the freelist bytes that hold no
** data. */
static void step_export(Diff *x, Pair *pp){
  char *zOut, *zRef;
  unsigned char *aOut, *aRef;
  long nOut, nRef, i, *aLo, *aHi;
  int e = dd_copy_both(x, pp, &zOut, &zRef);
  aOut = dd_slurp(zOut, &nOut);
  aRef = dd_slurp(zRef, &nRef);
  if( nOut!=nRef ){
    dd_fail(x, "copy of %s by %s has %ld bytes, the reference %ld",
            pp->zName, azCopyHow[e], nOut, nRef);
  }
  aLo = sqlite3_malloc64(sizeof(long)*(nRef/x->pgsz+1));
  aHi = sqlite3_malloc64(sizeof(long)*(nRef/x->pgsz+1));
  ck_assert(aLo && aHi);
  for(i=0; i<=nRef/x->pgsz; i++) aLo[i] = aHi[i] = 0;
  dd_free_ranges(aRef, nRef, x->pgsz, aLo, aHi);
  for(i=0; i<nOut; i++){
    long iIn = i%x->pgsz, iPg = i/x->pgsz;
    if( i==18 || i==19 || (i>=24 && i<28) || (i>=40 && i<44)
     || (i>=92 && i<96) || (iIn>=aLo[iPg] && iIn<aHi[iPg]) ){
      continue;
    }
    if( aOut[i]!=aRef[i] ){
      dd_fail(x, "copy of %s by %s differs from the reference at byte %ld"
              " (page %ld)", pp->zName, azCopyHow[e], i, 1+i/x->pgsz);
    }
  }
  sqlite3_free(aOut); sqlite3_free(aRef);
  sqlite3_free(aLo); sqlite3_free(aHi);
  remove(zOut); remove(zRef);
  sqlite3_free(zOut); sqlite3_free(zRef);
}

static void step_compact(Diff *x){
  sqlite3_free(adm_text(x, rng_below(&x->r, 2)
      ? "SELECT depot_compact(%Q,'app')" : "SELECT depot_compact(%Q)",
      x->zStore));
  if( rng_below(&x->r, 2) ){
    sqlite3_free(adm_text(x, "SELECT depot_gc(%Q)", x->zStore));
  }
}

static void step_verify(Diff *x){
  sqlite3_int64 n = th_intf(x->adm, "SELECT count(*) FROM depot_verify(%Q)",
                            x->zStore);
  if( n!=0 ){
    char *z = adm_text(x, "SELECT group_concat(kind||': '||message, '; ')"
                       " FROM depot_verify(%Q)", x->zStore);
    dd_fail(x, "depot_verify: %lld findings: %s", n, z);
  }
}

static void step_reopen(Diff *x, Pair *pp){
  pair_close(pp);
  pair_open(x, pp);
  x->nReopen++;
}

/* A second connection of this process writes main; the first must see
** its commits. */
static void step_other_writer(Diff *x){
  Pair w = x->main;
  w.d = dd_open(x, x->main.zUri, 1);
  op_sql(x, &w);
  ck_assert_int_eq(sqlite3_close(w.d), SQLITE_OK);
}

/* Steps every run takes at fixed points of every 50, so that a short run
** still forks, restores, reads from a snapshot and copies out; the rest is
** random. */
static int dd_forced(Diff *x){
  int i = x->iStep%50;
  if( i==12 ) step_save(x);
  else if( i==16 ) step_fork(x);
  else if( i==25 ) step_reader(x);
  else if( i==33 ) step_restore(x);
  else if( i==37 ) step_export(x, &x->main);
  else return 0;
  pair_compare(x, &x->main);
  return 1;
}

static void dd_step(Diff *x){
  int e = rng_below(&x->r, 100);
  Pair *pp = &x->main;
  if( x->bTrace ) fprintf(stderr, "step %d: kind %d\n", x->iStep, e);
  if( e<60 ){
    op_sql(x, pp);
  }else if( e<70 && x->nFork>0 ){
    pp = &x->aFork[rng_below(&x->r, x->nFork)];
    op_sql(x, pp);
  }else if( e<73 ){
    step_reopen(x, pp);
  }else if( e<75 ){
    if( x->nFork>0 ) pp = &x->aFork[rng_below(&x->r, x->nFork)];
    step_reopen(x, pp);
  }else if( e<79 ){
    step_reader(x);
  }else if( e<83 ){
    step_fork(x);
  }else if( e<88 ){
    step_save(x);
  }else if( e<92 ){
    step_restore(x);
  }else if( e<95 ){
    step_compact(x);
  }else if( e<97 ){
    step_other_writer(x);
  }else if( e<98 ){
    if( x->nFork>0 && rng_below(&x->r, 2) ){
      pp = &x->aFork[rng_below(&x->r, x->nFork)];
    }
    step_export(x, pp);
  }else if( e<99 ){
    step_backup_in(x);
  }else{
    op_sql(x, pp);
  }
  pair_compare(x, pp);
  if( pp!=&x->main ) pair_compare(x, &x->main);
  if( x->iStep%10==9 ){
    /* writes on either side never show on the other */
    int i;
    for(i=0; i<x->nFork; i++) pair_compare(x, &x->aFork[i]);
  }
}

/* ---- the seeds ---- */

static const int aPgsz[] = { 4096, 512, 1024, 65536, 2048, 8192, 16384,
                             32768 };
static const char *azJournal[] = { "delete", "truncate", "persist" };

static int dd_slow_build(void);

static void dd_begin(Diff *x, uint64_t iSeed){
  Rng c;
  char *z;
  memset(x, 0, sizeof(*x));
  pDdNow = x;
  x->iSeed = iSeed;
  x->r.s = iSeed*0x2545f4914f6cdd1dULL + 1;
  c.s = iSeed;
  x->pgsz = aPgsz[iSeed>=1 && iSeed<=8 ? iSeed-1 : (uint64_t)rng_below(&c, 8)];
  x->eAutoVac = rng_below(&c, 3);
  x->zJournal = azJournal[rng_below(&c, 3)];
  x->bPlainWal = (int)(iSeed%2);
  x->bTrace = getenv("DEPOT_DIFF_TRACE")!=0;
  x->nMaxBytes = dd_slow_build() ? 768*1024 : 3<<20;
  x->zDir = th_tmpdir("depotdiff");
  x->zStore = dd_store_path(x->zDir);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
  x->adm = th_open(":memory:");
  sqlite3_extended_result_codes(x->adm, 1);
  pair_init(x, &x->main, "main");
  pair_open(x, &x->main);
  z = sqlite3_mprintf("PRAGMA page_size=%d; PRAGMA auto_vacuum=%d;"
      " CREATE TABLE t0(id INTEGER PRIMARY KEY, u INT UNIQUE, a INT, b TEXT,"
      " c BLOB, d REAL)", x->pgsz, x->eAutoVac);
  pair_exec(x, &x->main, z);
  sqlite3_free(z);
  if( x->bPlainWal ) th_exec(x->main.p, "PRAGMA journal_mode=wal");
  /* every commit stays a point of history (for depot_rollback targets) */
  sqlite3_free(adm_text(x, "SELECT depot_pitr_policy(%Q,'app',0,3162240000)",
                        x->zStore));
  pair_compare(x, &x->main);
}

/* docs/SQL.md "Journal modes": journal_mode=WAL answers the mode in
** effect, without an error, and changes nothing. */
static void dd_check_wal_answers_mode(Diff *x){
  char *zErr = 0;
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(x->main.d, "PRAGMA journal_mode=WAL", -1,
                              &pStmt, 0);
  char *zAnswer = 0, *zMode;
  if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    zAnswer = sqlite3_mprintf("%s", sqlite3_column_text(pStmt, 0));
  }
  if( rc!=SQLITE_OK ) zErr = sqlite3_mprintf("%s", sqlite3_errmsg(x->main.d));
  if( pStmt && sqlite3_finalize(pStmt)!=SQLITE_OK && zErr==0 ){
    zErr = sqlite3_mprintf("%s", sqlite3_errmsg(x->main.d));
  }
  zMode = th_text(x->main.d, "PRAGMA journal_mode");
  if( zErr || zAnswer==0 || strcmp(zAnswer, x->zJournal)!=0 ){
    dd_fail(x, "journal_mode=WAL on a depot database answered %s (%s), not"
            " %s", zAnswer ? zAnswer : "no row", zErr ? zErr : "no error",
            x->zJournal);
  }
  if( zMode==0 || strcmp(zMode, x->zJournal)!=0 ){
    dd_fail(x, "journal_mode is %s after journal_mode=WAL, not %s",
            zMode ? zMode : "NULL", x->zJournal);
  }
  sqlite3_free(zErr);
  sqlite3_free(zAnswer);
  sqlite3_free(zMode);
}

static void dd_end(Diff *x){
  int i;
  step_verify(x);
  for(i=0; i<x->nFork; i++) pair_free(&x->aFork[i]);
  for(i=0; i<x->nSaved; i++) saved_free(&x->aSaved[i]);
  pair_free(&x->main);
  ck_assert_int_eq(sqlite3_close(x->adm), SQLITE_OK);
  depot_fork_idle_close();
  sqlite3_free(x->zStore);
  sqlite3_free(x->zDir);
}

static int dd_env_int(const char *zName, int iDefault){
  const char *z = getenv(zName);
  return (z && z[0]) ? atoi(z) : iDefault;
}

/* A build 3 to 10 times slower than the plain one runs half the seeds;
** under ThreadSanitizer (slower still on the file I/O, and the workload
** has one thread) the two seeds of small databases. */
static int dd_slow_build(void){
  const char *z = getenv("DEPOT_SANITIZER");
  return z && z[0] && strcmp(z, "none")!=0 && !getenv("DEPOT_DIFF_SEEDS");
}
static int dd_tsan_build(void){
  const char *z = getenv("DEPOT_SANITIZER");
  return dd_slow_build() && strcmp(z, "tsan")==0;
}

START_TEST(test_depotdiff_random_workload_matches_plain_file){
  Diff x;
  const char *zSeed = getenv("DEPOT_DIFF_SEED");
  static const int aSlowSeed[] = { 2, 6, 3 };       /* 3: 2000+ pages */
  uint64_t iSeed = (zSeed && zSeed[0]) ? strtoull(zSeed, 0, 10)
                 : dd_slow_build() ? (uint64_t)aSlowSeed[_i%3]
                 : (uint64_t)(1+_i);
  int nStep = th_scaled(dd_env_int("DEPOT_DIFF_ITERS", 40), 10);
  dd_begin(&x, iSeed);
  dd_check_wal_answers_mode(&x);
  for(x.iStep=0; x.iStep<nStep; x.iStep++){
    if( !dd_forced(&x) ) dd_step(&x);
    if( x.iStep%40==39 ) step_verify(&x);
  }
  printf("depotdiff: seed %llu: %d steps, page size %d, auto_vacuum %d,"
         " journal %s, reference %s: %d forks, %d restores, %d rollbacks,"
         " %d readers, %d reopens, %d failed statements, %lld pages\n",
         (unsigned long long)iSeed, nStep, x.pgsz, x.eAutoVac, x.zJournal,
         x.bPlainWal ? "wal" : "delete", x.nFork_made, x.nRestore,
         x.nRollback, x.nReader, x.nReopen, x.nError,
         th_int(x.main.d, "PRAGMA page_count"));
  dd_end(&x);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("depotdiff");
  TCase *tc = tcase_create("differential");
  const char *zSeed = getenv("DEPOT_DIFF_SEED");
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  /* on a PostgreSQL store (pg_suite.sh) two seeds: each step costs round
  ** trips */
  int nSeed = (zSeed && zSeed[0]) ? 1 : dd_tsan_build() ? 2
            : dd_slow_build() ? 3
            : dd_env_int("DEPOT_DIFF_SEEDS", (zPg && zPg[0]) ? 2 : 6);
  tcase_add_loop_test(tc, test_depotdiff_random_workload_matches_plain_file,
                      0, nSeed);
  suite_add_tcase(s, tc);
  return s;
}
