/*
** fuzz_sql_args.c -- fuzz target for the argument handling of the SQL
** surface: the kv_* functions, the kv_memory and kv_tables virtual tables,
** depot_commits / depot_stats / depot_import / depot_export and depot URIs.
**
** Each input is a short program run on a fresh in-memory connection with
** the extension registered: an opcode byte picks a statement from
** aFuzzSql[], and its parameters are bound from the following bytes with
** fuzzer-chosen types and values.  Any result code is acceptable; a crash,
** a sanitizer report or a leak is not.
**
** FUZZ_SQL_TRACE=1 in the environment prints each statement and its
** result code to stderr (for reading what an input does).
**
** Files: the process works in a private directory made with mkdtemp()
** below $DEPOT_TEST_TMPDIR (or $TMPDIR, or /tmp), which is emptied after
** every input and removed at exit.  Every text parameter has its '/' and
** '\' replaced by '_', so every path an argument names (store files, KV
** store directories, import sources, export targets, URIs) is relative to
** that directory and cannot leave it.
*/
#define _GNU_SOURCE 1          /* nftw */
#include "config.h"
#include "tests/fuzz/fuzz.h"
#include "ext/depot.h"
#include <sqlite3.h>

#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Statements an opcode picks.  "%s" marks SQL text taken from the input
** (sanitised as a text parameter), placed inside a quoted string. */
static const char *const aFuzzSql[] = {
  "SELECT kv_begin()",
  "SELECT kv_begin(?)",
  "SELECT kv_get(?,?,?)",
  "SELECT kv_put(?,?,?,?)",
  "SELECT kv_delete(?,?,?)",
  "SELECT kv_prepare(?)",
  "SELECT kv_commit(?)",
  "SELECT kv_rollback(?)",
  "SELECT kv_try_commit(?)",
  "SELECT kv_table_meta(?,?)",
  "SELECT kv_create_table(?,?,?)",
  "SELECT kv_create_table(?,?,?,?)",
  "SELECT kv_remove_table(?,?)",
  "SELECT count(*), max(rows) FROM kv_tables",
  "CREATE VIRTUAL TABLE IF NOT EXISTS m USING kv_memory",
  "CREATE VIRTUAL TABLE IF NOT EXISTS d USING kv_memory(dir='%s')",
  "CREATE VIRTUAL TABLE IF NOT EXISTS p USING kv_memory(%s)",
  "INSERT OR REPLACE INTO m VALUES(?,?)",
  "INSERT INTO d VALUES(?,?)",
  "UPDATE m SET key=? WHERE key=?",
  "SELECT quote(value) FROM m WHERE key=?",
  "SELECT count(*) FROM m WHERE key BETWEEN ? AND ? ORDER BY key DESC",
  "DELETE FROM m WHERE key>=?",
  "SELECT count(*) FROM d WHERE key IN (?,?,?)",
  "DROP TABLE IF EXISTS d",
  "BEGIN",
  "COMMIT",
  "ROLLBACK",
  "SAVEPOINT s",
  "ROLLBACK TO s",
  "SELECT count(*) FROM depot_commits(?)",
  "SELECT count(*) FROM depot_commits(?,?,?)",
  "SELECT * FROM depot_stats(?)",
  "SELECT depot_import(?,?)",
  "SELECT depot_import(?,?,?)",
  "SELECT depot_export(?,?,?,?)",
  "ATTACH ? AS a",
  "CREATE TABLE IF NOT EXISTS a.t(x)",
  "INSERT INTO a.t VALUES(?)",
  "DETACH a",
  "PRAGMA a.depot_cache_kb=%s",
  "SELECT depot_version()",
};
#define FUZZ_NSQL ((int)(sizeof(aFuzzSql)/sizeof(aFuzzSql[0])))
#define FUZZ_MAX_STEPS 24

static char zFuzzDir[4096];

static int fuzzRmOne(const char *zPath, const struct stat *st, int eFlag,
                     struct FTW *pFtw){
  if( pFtw->level>0 ) remove(zPath);
  return 0;
}

/* Empty the private directory (it stays, as the working directory). */
static void fuzzEmptyDir(void){
  nftw(zFuzzDir, fuzzRmOne, 16, FTW_DEPTH|FTW_PHYS);
}

static void fuzzRemoveDir(void){
  fuzzEmptyDir();
  if( chdir("/")==0 ) rmdir(zFuzzDir);
}

/* Make the private directory and enter it; register the extension. */
static int fuzzSetup(void){
  const char *zBase = getenv("DEPOT_TEST_TMPDIR");
  if( zFuzzDir[0] ) return 1;
  if( zBase==0 ) zBase = getenv("TMPDIR");
  if( zBase==0 ) zBase = "/tmp";
  mkdir(zBase, 0777);
  snprintf(zFuzzDir, sizeof(zFuzzDir), "%s/fuzz-sql-XXXXXX", zBase);
  if( mkdtemp(zFuzzDir)==0 || chdir(zFuzzDir)!=0 ){
    fprintf(stderr, "fuzz_sql_args: cannot make a directory in %s\n", zBase);
    abort();
  }
  atexit(fuzzRemoveDir);
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  return 1;
}

/* Input cursor. */
typedef struct FuzzIn FuzzIn;
struct FuzzIn { const uint8_t *a; size_t n, i; };

static int fuzzByte(FuzzIn *p){
  return p->i<p->n ? p->a[p->i++] : 0;
}

/* Up to 255 bytes of text from the input, '/' and '\' made '_', in z
** (256 bytes); returns its length. */
static int fuzzText(FuzzIn *p, char *z){
  int n = fuzzByte(p), k;
  if( (size_t)n > p->n - p->i ) n = (int)(p->n - p->i);
  for(k=0; k<n; k++){
    char c = (char)p->a[p->i++];
    z[k] = (c=='/' || c=='\\') ? '_' : c;
  }
  z[n] = 0;
  return n;
}

static void fuzzBindOne(sqlite3_stmt *pStmt, int i, FuzzIn *p){
  char z[256];
  int n;
  sqlite3_int64 x = 0;
  switch( fuzzByte(p)%7 ){
    case 0: sqlite3_bind_null(pStmt, i); break;
    case 1: sqlite3_bind_int(pStmt, i, (signed char)fuzzByte(p)); break;
    case 2:
      n = (int)(p->n - p->i < 8 ? p->n - p->i : 8);
      memcpy(&x, p->a + p->i, n);
      p->i += n;
      sqlite3_bind_int64(pStmt, i, x);
      break;
    case 3: sqlite3_bind_double(pStmt, i, (signed char)fuzzByte(p)/4.0); break;
    case 4: case 5:
      n = fuzzText(p, z);
      sqlite3_bind_text(pStmt, i, z, n, SQLITE_TRANSIENT);
      break;
    default:
      n = fuzzText(p, z);
      sqlite3_bind_blob(pStmt, i, z, n, SQLITE_TRANSIENT);
      break;
  }
}

/* Run one statement picked by the next opcode. */
static void fuzzStep(sqlite3 *db, FuzzIn *p){
  const char *zTmpl = aFuzzSql[fuzzByte(p) % FUZZ_NSQL];
  char *zSql = 0;
  sqlite3_stmt *pStmt = 0;
  int i, nRow = 0, rc;
  if( strstr(zTmpl, "%s") ){
    char z[256], *q;
    fuzzText(p, z);
    for(q=z; *q; q++) if( *q=='\'' ) *q = '_';
    zSql = sqlite3_mprintf(zTmpl, z);
    if( zSql==0 ) return;
    zTmpl = zSql;
  }
  if( sqlite3_prepare_v2(db, zTmpl, -1, &pStmt, 0)==SQLITE_OK && pStmt ){
    for(i=1; i<=sqlite3_bind_parameter_count(pStmt); i++){
      fuzzBindOne(pStmt, i, p);
    }
    while( (rc = sqlite3_step(pStmt))==SQLITE_ROW && ++nRow<1000 ){}
    if( getenv("FUZZ_SQL_TRACE") ){
      fprintf(stderr, "%s -> %d %s\n", zTmpl, rc, sqlite3_errmsg(db));
    }
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(zSql);
}

int LLVMFuzzerTestOneInput(const uint8_t *aData, size_t nData){
  sqlite3 *db = 0;
  FuzzIn in;
  int k;
  fuzzSetup();
  in.a = aData; in.n = nData; in.i = 0;
  if( sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE|
                      SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0)==SQLITE_OK ){
    for(k=0; k<FUZZ_MAX_STEPS && in.i<in.n; k++) fuzzStep(db, &in);
  }
  sqlite3_close_v2(db);
  fuzzEmptyDir();
  return 0;
}
