/*
** seeds.c -- writes the seed corpora of the fuzz targets with the
** project's own encoders.
**
**   fuzz_seeds DIR        (make fuzz-seeds: DIR = tests/fuzz/corpus)
**
** Writes DIR/<target>/<name> for every target: WAL record bodies and
** frame runs, page blobs, store rows and key-order pairs, KV keys, values
** and value pairs, and short SQL-argument programs.  The files are small
** (well under 4 KiB each) and committed; rerun after a format change.
*/
#include "config.h"
#include "wal/wal_int.h"
#include "vfs/ltx.h"
#include "vfs/layout.h"
#include "ext/kv/codec.h"
#include <sqlite3.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *zSeedDir;

/* Write DIR/zTarget/zName = [prefix byte if >=0] + a[0..n). */
static void seedWrite(const char *zTarget, const char *zName, int iPrefix,
                      const void *a, size_t n){
  char zPath[4096];
  FILE *f;
  snprintf(zPath, sizeof(zPath), "%s/%s", zSeedDir, zTarget);
  mkdir(zPath, 0777);
  snprintf(zPath, sizeof(zPath), "%s/%s/%s", zSeedDir, zTarget, zName);
  f = fopen(zPath, "wb");
  if( f==0 ){ perror(zPath); exit(1); }
  if( iPrefix>=0 ) fputc(iPrefix, f);
  if( n && fwrite(a, 1, n, f)!=n ){ perror(zPath); exit(1); }
  fclose(f);
}

/* ---- wal_record ---- */

static WalRecordBuilder *seedRecord(int eShape){
  WalRecordBuilder *p = wal_record_new(7 + eShape);
  if( p==0 ) exit(1);
  wal_record_table(p, "accounts", 8);
  wal_record_action(p, 0, "\x02" "alice", 6, "\x00\x02\x05", 3);
  if( eShape>0 ){
    wal_record_action(p, 1, "\x02" "bob", 4, 0, 0);
    wal_record_table(p, "t", 1);
    wal_record_action(p, 0, "", 0, "", 0);
  }
  return p;
}

/* An abort record withdrawing record 100, alone and after aRec/nRec. */
static void seedWalAbort(uint8_t *aRec, size_t nRec){
  uint8_t a[512];
  WalRecordBuilder *p = wal_record_abort_new(7, 100);
  size_t n;
  if( p==0 ) exit(1);
  n = wal_frame_size(p, 102);
  wal_frame_encode(p, 102, a);
  wal_record_free(p);
  seedWrite("wal_record", "body-abort", -1, a+WAL_FRAME_HDR,
            n-WAL_FRAME_HDR);
  memmove(a+nRec, a, n);
  memcpy(a, aRec, nRec);
  seedWrite("wal_record", "frames-record-abort", -1, a, nRec+n);
}

static void seedWal(void){
  uint8_t a[2][256];
  size_t n[2];
  int i;
  for(i=0; i<2; i++){
    WalRecordBuilder *p = seedRecord(i);
    n[i] = wal_frame_size(p, 100+i);
    wal_frame_encode(p, 100+i, a[i]);
    wal_record_free(p);
  }
  seedWrite("wal_record", "body-one-action", -1, a[0]+WAL_FRAME_HDR,
            n[0]-WAL_FRAME_HDR);
  seedWrite("wal_record", "body-two-tables", -1, a[1]+WAL_FRAME_HDR,
            n[1]-WAL_FRAME_HDR);
  memcpy(a[0]+n[0], a[1], n[1]);
  seedWrite("wal_record", "frames-two", -1, a[0], n[0]+n[1]);
  seedWrite("wal_record", "frames-torn-tail", -1, a[0], n[0]+n[1]-3);
  seedWalAbort(a[0], n[0]);
}

/* ---- ltx ---- */

static void seedLtx(void){
  static unsigned char aPage[3][512];
  const unsigned char *ap[3] = { aPage[0], aPage[1], aPage[2] };
  uint32_t aPgno[3] = { 1, 2, 5 };
  LtxFrameRef aRef[3];
  LtxHeader h;
  unsigned char *pBlob;
  int64_t nBlob;
  ZSTD_CCtx *pC = ZSTD_createCCtx();
  int i;
  for(i=0; i<512; i++){
    aPage[0][i] = (unsigned char)(i*7 ^ (i>>3));   /* incompressible-ish */
    aPage[1][i] = (unsigned char)(i%16);           /* compresses */
  }
  memset(&h, 0, sizeof(h));
  h.szPage = 512; h.nPage = 5; h.iMinTxid = h.iMaxTxid = 3; h.nFrame = 3;
  if( pC==0 || ltx_encode(&h, aPgno, ap, 42, pC, 3, &pBlob, &nBlob,
                          aRef)!=SQLITE_OK ) exit(1);
  seedWrite("ltx", "blob-three-pages", -1, pBlob, (size_t)nBlob);
  seedWrite("ltx", "blob-header-only", -1, pBlob, LTX_HEADER_SIZE);
  seedWrite("ltx", "blob-truncated", -1, pBlob, (size_t)nBlob/2);
  sqlite3_free(pBlob);
  ZSTD_freeCCtx(pC);
}

/* ---- layout ---- */

static void seedLayout(void){
  unsigned char a[LAYOUT_MAX_ROW];
  DbHead h = { 9, 4096, 12, 0x1234, 77 };
  CommitRow c = { 9, 1700000000000ull, 4096, 12, 3, 2, 65536, 70000,
                  0x1234, 77 };
  BranchRecord b;
  PidxValue v = { 48, 900, 65536 };
  uint64_t ids[6] = { 1, 9, 3, 1, 10, 2 };
  int i;
  seedWrite("layout", "head", 0, a, layout_head_encode(a, &h));
  seedWrite("layout", "commit", 1, a, layout_commit_encode(a, &c));
  memset(&b, 0, sizeof(b));
  b.iParent = 1; b.iParentTxid = 4;
  strcpy(b.zDb, "inventory"); strcpy(b.zBranch, "feature");
  seedWrite("layout", "branch", 2, a, layout_branch_encode(a, &b));
  seedWrite("layout", "pidx", 3, a, layout_pidx_encode(a, &v));
  for(i=0; i<6; i++) bytes_put64(a+8*i, ids[i]);
  seedWrite("layout", "order-commit", 5, a, 48);
  seedWrite("layout", "order-pidx", 7, a, 48);
}

/* ---- kv_codec ---- */

static void seedKvKey(sqlite3_stmt *pStmt, const char *zName){
  KvBuf k = {0,0,0}, v = {0,0,0}, kv = {0,0,0};
  unsigned char nKey;
  char z[64];
  if( sqlite3_step(pStmt)!=SQLITE_ROW ) exit(1);
  if( kv_key_encode(sqlite3_column_value(pStmt, 0), &k, 0)!=SQLITE_OK
   || kv_value_encode(sqlite3_column_value(pStmt, 0),
                      sqlite3_column_value(pStmt, 1), &v, 0)!=SQLITE_OK ){
    exit(1);
  }
  snprintf(z, sizeof(z), "key-%s", zName);
  seedWrite("kv_codec", z, 0, k.a, k.n);
  snprintf(z, sizeof(z), "value-%s", zName);
  seedWrite("kv_codec", z, 1, v.a, v.n);
  nKey = (unsigned char)k.n;           /* key length, the key, the value */
  if( kv_buf_append(&kv, &nKey, 1) || kv_buf_append(&kv, k.a, k.n)
   || kv_buf_append(&kv, v.a, v.n) ) exit(1);
  snprintf(z, sizeof(z), "keyvalue-%s", zName);
  seedWrite("kv_codec", z, 2, kv.a, kv.n);
  kv_buf_free(&kv);
  kv_buf_free(&k);
  kv_buf_free(&v);
  sqlite3_reset(pStmt);
}

static void seedKv(void){
  static const struct { const char *zName; const char *zSql; } aKey[] = {
    { "int",      "SELECT 42, 'v'" },
    { "negint",   "SELECT -9007199254740993, NULL" },
    { "real",     "SELECT 2.5, 3.25" },
    { "bigreal",  "SELECT 1e300, x'00ff'" },
    { "text-nul", "SELECT CAST(x'610062' AS TEXT), -1" },
    { "blob",     "SELECT x'00ff00', 'text'" },
  };
  static const unsigned char aPair[][12] = {
    { 1, 3, 2, 0, 0, 0,  2, 3, 0, 0, 0x04, 0x40 },   /* int 2 vs real 2.0 */
    { 3, 3, 'a', 'b',  4, 2, 'a',  0 },              /* text vs blob */
    { 3, 3, 'a', 0, 'b',  3, 3, 'a', 0, 'c' },       /* texts with NUL */
  };
  sqlite3 *db;
  sqlite3_stmt *pStmt;
  size_t i;
  char z[32];
  if( sqlite3_open(":memory:", &db) ) exit(1);
  for(i=0; i<sizeof(aKey)/sizeof(aKey[0]); i++){
    if( sqlite3_prepare_v2(db, aKey[i].zSql, -1, &pStmt, 0) ) exit(1);
    seedKvKey(pStmt, aKey[i].zName);
    sqlite3_finalize(pStmt);
  }
  for(i=0; i<sizeof(aPair)/sizeof(aPair[0]); i++){
    snprintf(z, sizeof(z), "pair-%d", (int)i);
    seedWrite("kv_codec", z, 3, aPair[i], sizeof(aPair[i]));
  }
  sqlite3_close(db);
}

/* ---- sql_args: programs of (opcode, typed parameters) ---- */

/* Opcodes: indexes into aFuzzSql[] of fuzz_sql_args.c. */
enum { OP_BEGIN0, OP_BEGIN1, OP_GET, OP_PUT, OP_DELETE, OP_PREPARE,
       OP_COMMIT, OP_ROLLBACK, OP_TRY, OP_META, OP_CREATE3, OP_CREATE4,
       OP_REMOVE, OP_TABLES, OP_VT_MEM, OP_VT_DIR, OP_VT_ARGS, OP_INS_M,
       OP_INS_D, OP_UPD_M, OP_SEL_M, OP_RANGE_M, OP_DEL_M, OP_IN_D,
       OP_DROP_D, OP_TBEGIN, OP_TCOMMIT, OP_TROLLBACK, OP_SAVEPOINT,
       OP_ROLLBACK_TO, OP_COMMITS1, OP_COMMITS3, OP_STATS, OP_IMPORT2,
       OP_IMPORT3, OP_EXPORT, OP_ATTACH, OP_CREATE_T, OP_INSERT_T,
       OP_DETACH, OP_CACHE_KB, OP_VERSION };


typedef struct SeedProg SeedProg;
struct SeedProg { unsigned char a[512]; size_t n; };

static void progByte(SeedProg *p, int c){ p->a[p->n++] = (unsigned char)c; }
/* Parameters as fuzzBindOne reads them: a type byte (0 NULL, 1 small
** integer, 3 real/4, 4 text, 6 blob) and its bytes. */
static void progInt(SeedProg *p, int x){ progByte(p, 1); progByte(p, x&0xff); }
static void progReal(SeedProg *p, int x){ progByte(p, 3); progByte(p, x&0xff); }
static void progText(SeedProg *p, int eType, const char *z){
  size_t n = strlen(z);
  progByte(p, eType); progByte(p, (int)n);
  memcpy(p->a+p->n, z, n); p->n += n;
}
#define T(p,z) progText(p, 4, z)
#define B(p,z) progText(p, 6, z)
#define RAW(p,z) do{ size_t n_ = strlen(z); progByte(p, (int)n_); \
  memcpy((p)->a+(p)->n, z, n_); (p)->n += n_; }while(0)

static void seedSql(void){
  SeedProg p;
  /* An explicit transaction on the connection's in-memory store. */
  memset(&p, 0, sizeof(p));
  progByte(&p, OP_BEGIN0);
  progByte(&p, OP_CREATE3); progInt(&p, 1); T(&p, "t"); T(&p, "kv_memory");
  progByte(&p, OP_PUT); progInt(&p, 1); T(&p, "t"); T(&p, "k"); progInt(&p, 5);
  progByte(&p, OP_GET); progInt(&p, 1); T(&p, "t"); T(&p, "k");
  progByte(&p, OP_DELETE); progInt(&p, 1); T(&p, "t"); B(&p, "k");
  progByte(&p, OP_META); progInt(&p, 1); T(&p, "t");
  progByte(&p, OP_TRY); progInt(&p, 1);
  progByte(&p, OP_TABLES);
  seedWrite("sql_args", "kv-handle", -1, p.a, p.n);
  /* A persistent store directory and a kv_memory table in it. */
  memset(&p, 0, sizeof(p));
  progByte(&p, OP_BEGIN1); T(&p, "store");
  progByte(&p, OP_CREATE4); progInt(&p, 1); T(&p, "p"); T(&p, "kv_memory");
  T(&p, "{\"persistence\":1}");
  progByte(&p, OP_PREPARE); progInt(&p, 1);
  progByte(&p, OP_COMMIT); progInt(&p, 1);
  progByte(&p, OP_VT_DIR); RAW(&p, "store");
  progByte(&p, OP_INS_D); progReal(&p, 10); T(&p, "v");
  progByte(&p, OP_IN_D); progReal(&p, 10); progByte(&p, 0); B(&p, "x");
  progByte(&p, OP_DROP_D);
  progByte(&p, OP_VT_ARGS); RAW(&p, "persistence=1");
  seedWrite("sql_args", "kv-store-dir", -1, p.a, p.n);
  /* SQL transactions on a connection-private kv_memory table. */
  memset(&p, 0, sizeof(p));
  progByte(&p, OP_VT_MEM);
  progByte(&p, OP_TBEGIN);
  progByte(&p, OP_INS_M); T(&p, "a"); progInt(&p, 1);
  progByte(&p, OP_SAVEPOINT);
  progByte(&p, OP_INS_M); progInt(&p, 2); B(&p, "b");
  progByte(&p, OP_ROLLBACK_TO);
  progByte(&p, OP_UPD_M); T(&p, "z"); T(&p, "a");
  progByte(&p, OP_TCOMMIT);
  progByte(&p, OP_SEL_M); T(&p, "z");
  progByte(&p, OP_RANGE_M); progInt(&p, 0); T(&p, "zz");
  progByte(&p, OP_DEL_M); progByte(&p, 0);
  seedWrite("sql_args", "kv-vtab", -1, p.a, p.n);
  /* A depot database: attach, write, inspect, export, import. */
  memset(&p, 0, sizeof(p));
  progByte(&p, OP_ATTACH); T(&p, "file:s.depot?vfs=depot&db=inv");
  progByte(&p, OP_CREATE_T);
  progByte(&p, OP_INSERT_T); T(&p, "row");
  progByte(&p, OP_CACHE_KB); RAW(&p, "64");
  progByte(&p, OP_DETACH);
  progByte(&p, OP_COMMITS3); T(&p, "s.depot"); T(&p, "inv"); T(&p, "main");
  progByte(&p, OP_STATS); T(&p, "s.depot");
  progByte(&p, OP_EXPORT); T(&p, "s.depot"); T(&p, "inv"); T(&p, "main"); T(&p, "out.db");
  progByte(&p, OP_IMPORT3); T(&p, "out.db"); T(&p, "s.depot"); T(&p, "copy");
  progByte(&p, OP_COMMITS1); T(&p, "s.depot");
  progByte(&p, OP_IMPORT2); progByte(&p, 0); progInt(&p, 3);
  progByte(&p, OP_VERSION);
  seedWrite("sql_args", "depot", -1, p.a, p.n);
  /* Wrong types everywhere. */
  memset(&p, 0, sizeof(p));
  progByte(&p, OP_GET); B(&p, "h"); progInt(&p, 9); progByte(&p, 0);
  progByte(&p, OP_REMOVE); T(&p, "1"); progReal(&p, 4);
  progByte(&p, OP_ROLLBACK); progInt(&p, -1);
  progByte(&p, OP_TROLLBACK);
  seedWrite("sql_args", "wrong-types", -1, p.a, p.n);
}

int main(int argc, char **argv){
  if( argc!=2 ){
    fprintf(stderr, "usage: %s CORPUS-DIR\n", argv[0]);
    return 2;
  }
  zSeedDir = argv[1];
  mkdir(zSeedDir, 0777);
  seedWal();
  seedLtx();
  seedLayout();
  seedKv();
  seedSql();
  return 0;
}
