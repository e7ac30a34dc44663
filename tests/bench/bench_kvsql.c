/*
** bench_kvsql.c -- make bench workloads of KV tables through prepared SQL
** statements against a plain table, one per backend and operation, and the
** throughput of eight connections on one database file.
**
** Baseline: "CREATE TABLE t(key PRIMARY KEY NOT NULL, value) WITHOUT
** ROWID" in a file database (WAL, synchronous=NORMAL); for kv_memory in a
** :memory: database, its in-memory counterpart.  Candidate: the KV table t
** of the backend, declared in the main schema of a file database (WAL,
** synchronous=NORMAL) and reached through its temp declaration, as every
** connection opened later reaches it, committing at the same durability
** (kv_synchronous('normal')).  The _full variants compare both sides at
** synchronous=FULL / kv_synchronous('full'), report only.  Both hold the same KS_ROWS rows
** (integer keys 0..KS_ROWS-1, 16-byte text values), loaded outside the
** timed region; a kv_btree table's rows are all in its data file.  Reads
** fetch every column of every row as Python's sqlite3 module does: a text
** with sqlite3_column_text (a NUL-terminated string), an integer with
** sqlite3_column_int64.
**
** kv_<backend>_point    KS_POINT "SELECT value FROM t WHERE key=?1" of
**                       random present keys
** kv_<backend>_range    KS_RANGE "... WHERE key>=?1 AND key<?1+KS_SPAN"
**                       (KS_SPAN rows each)
** kv_<backend>_scan     KS_SCAN full scans "SELECT key, value FROM t"
** kv_<backend>_upsert1  KS_UP1 single-row autocommit INSERT OR REPLACE
** kv_<backend>_upsertN  KS_UPN_TXN transactions of 1000 INSERT OR REPLACE
** kv_<backend>_upsert1_full  upsert1 with both sides at FULL (report only)
** kv_floor_<op>         point, range and scan: the same reads of a
**                       minimal virtual table (its rows in a C array built
**                       before the timed part, each column one
**                       sqlite3_result_* call, texts SQLITE_STATIC and
**                       NUL-terminated) against the :memory: baseline of
**                       kv_memory: what SQLite's virtual-table interface
**                       itself costs per statement and per row, the floor
**                       under every KV table's figure (report only)
** kv_btree_8conn        short read-modify-write transactions (BEGIN; read
**                       a key; UPDATE it; COMMIT; all four prepared) on
**                       disjoint keys of one
**                       kv_btree table: baseline one connection, candidate
**                       eight connections of one process, each in its own
**                       thread, on the same file; cost per transaction
**                       (both at FULL: their flushes are shared).
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include <sqlite3.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KS_ROWS    20000
#define KS_POINT   20000
#define KS_RANGE   10000         /* 20 rows each: 50-100 ms, long enough
                                 ** that timer and scheduling noise do not
                                 ** decide the median */
#define KS_SPAN    20
#define KS_SCAN    20
#define KS_UP1     2000
#define KS_UPN_TXN 20
#define KS_CONN    8
#define KS_RMW     4000          /* read-modify-write transactions in all */

static const char *const azKsType[] = { "kv_btree", "kv_log", "kv_memory",
                                         "kvsql_floor" };

static int ksExec(sqlite3 *db, const char *zSql){
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ) fprintf(stderr, "kvsql bench: %s: %s\n", zSql,
                              sqlite3_errmsg(db));
  return rc;
}

/* Wait until every collector of the connection's stores has confirmed
** everything (the rows are in the data file). */
static int ksDrain(sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT coalesce(sum(pending_"
      "confirmations),0) + coalesce(sum(overlay_entries),0) FROM kv_stats",
      -1, &pStmt, 0);
  while( rc==SQLITE_OK ){
    sqlite3_int64 n = -1;
    if( sqlite3_step(pStmt)==SQLITE_ROW ) n = sqlite3_column_int64(pStmt, 0);
    sqlite3_reset(pStmt);
    if( n==0 ) break;
    if( n<0 ) rc = SQLITE_ERROR;
    usleep(1000);
  }
  sqlite3_finalize(pStmt);
  return rc;
}

/* Both sides of the _full workloads commit at FULL, else at NORMAL. */
static int ksFull = 0;

/* Open the file zDir/zName with the extension, WAL, synchronous=NORMAL
** and kv_synchronous('normal') (ksFull: both FULL). */
static sqlite3 *ksOpenFile(const char *zDir, const char *zName){
  char *zFile = sqlite3_mprintf("%s/%s", zDir, zName);
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(zFile, &db)!=SQLITE_OK
   || ksExec(db, ksFull ? "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                          "SELECT kv_synchronous('full')"
                        : "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                          "SELECT kv_synchronous('normal')")
      !=SQLITE_OK ){
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zFile);
  return db;
}

/* nTxn transactions of nRow upserts of keys iKey0.. (stride 1). */
static int ksLoad(sqlite3 *db, int iKey0, int nTxn, int nRow){
  sqlite3_stmt *pStmt = 0;
  int i, j, rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t "
      "VALUES(?1, printf('value-%010d', ?1))", -1, &pStmt, 0);
  for(i=0; rc==SQLITE_OK && i<nTxn; i++){
    rc = ksExec(db, "BEGIN");
    for(j=0; rc==SQLITE_OK && j<nRow; j++){
      sqlite3_bind_int(pStmt, 1, iKey0 + i*nRow + j);
      rc = sqlite3_step(pStmt)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
      sqlite3_reset(pStmt);
    }
    if( rc==SQLITE_OK ) rc = ksExec(db, "COMMIT");
  }
  if( rc!=SQLITE_OK ) fprintf(stderr, "kvsql load: %s\n", sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  return rc;
}

/* ------------------------------------------------- the floor module --- */

/* kvsql_floor: the virtual table t(key INTEGER PRIMARY KEY, value) of rows
** (i, printf('value-%010d', i)) for i in 0..KS_ROWS-1, read from a C array.
** It plans key=?, key>=? AND key<? and full scans as kv_vtab.c does
** (unique point, bounded range, whole table in key order) and does no
** other work per row than one sqlite3_result_* call per column. */
typedef struct KsFloorCsr KsFloorCsr;
struct KsFloorCsr {
  sqlite3_vtab_cursor base;
  sqlite3_int64 i, iEnd;            /* current row, one past the last */
};
static char (*ksFloorRow)[20] = 0;  /* KS_ROWS NUL-terminated values */

static int ksFloorConnect(sqlite3 *db, void *pAux, int argc,
                          const char *const *argv, sqlite3_vtab **ppVtab,
                          char **pzErr){
  sqlite3_vtab *p;
  int rc;
  (void)pAux; (void)argc; (void)argv; (void)pzErr;
  rc = sqlite3_declare_vtab(db,
      "CREATE TABLE x(key INTEGER PRIMARY KEY, value)");
  if( rc!=SQLITE_OK ) return rc;
  p = sqlite3_malloc(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  *ppVtab = p;
  return SQLITE_OK;
}

static int ksFloorBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  int i, iEq = -1, iGe = -1, iLt = -1;
  (void)pVtab;
  for(i=0; i<pInfo->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &pInfo->aConstraint[i];
    if( !c->usable || c->iColumn!=0 ) continue;
    if( c->op==SQLITE_INDEX_CONSTRAINT_EQ ) iEq = i;
    if( c->op==SQLITE_INDEX_CONSTRAINT_GE ) iGe = i;
    if( c->op==SQLITE_INDEX_CONSTRAINT_LT ) iLt = i;
  }
  if( iEq>=0 ){
    pInfo->idxNum = 1;
    pInfo->aConstraintUsage[iEq].argvIndex = 1;
    pInfo->aConstraintUsage[iEq].omit = 1;
    pInfo->estimatedCost = 1;
    pInfo->estimatedRows = 1;
    pInfo->idxFlags = SQLITE_INDEX_SCAN_UNIQUE;
  }else if( iGe>=0 && iLt>=0 ){
    pInfo->idxNum = 2;
    pInfo->aConstraintUsage[iGe].argvIndex = 1;
    pInfo->aConstraintUsage[iLt].argvIndex = 2;
    pInfo->aConstraintUsage[iGe].omit = 1;
    pInfo->aConstraintUsage[iLt].omit = 1;
    pInfo->estimatedCost = 20;
    pInfo->estimatedRows = 20;
  }else{
    pInfo->idxNum = 0;
    pInfo->estimatedCost = KS_ROWS;
    pInfo->estimatedRows = KS_ROWS;
  }
  if( pInfo->nOrderBy==1 && pInfo->aOrderBy[0].iColumn==0
   && !pInfo->aOrderBy[0].desc ){
    pInfo->orderByConsumed = 1;
  }
  return SQLITE_OK;
}

static int ksFloorDisconnect(sqlite3_vtab *pVtab){
  sqlite3_free(pVtab);
  return SQLITE_OK;
}

static int ksFloorOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCsr){
  KsFloorCsr *c = sqlite3_malloc(sizeof(*c));
  (void)pVtab;
  if( c==0 ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *ppCsr = &c->base;
  return SQLITE_OK;
}

static int ksFloorClose(sqlite3_vtab_cursor *pCsr){
  sqlite3_free(pCsr);
  return SQLITE_OK;
}

static int ksFloorFilter(sqlite3_vtab_cursor *pCsr, int idxNum,
                         const char *idxStr, int argc, sqlite3_value **argv){
  KsFloorCsr *c = (KsFloorCsr*)pCsr;
  (void)idxStr; (void)argc;
  c->i = 0;
  c->iEnd = KS_ROWS;
  if( idxNum==1 ){
    c->i = sqlite3_value_int64(argv[0]);
    c->iEnd = c->i + 1;
  }else if( idxNum==2 ){
    c->i = sqlite3_value_int64(argv[0]);
    c->iEnd = sqlite3_value_int64(argv[1]);
  }
  if( c->i<0 ) c->i = 0;
  if( c->iEnd>KS_ROWS ) c->iEnd = KS_ROWS;
  return SQLITE_OK;
}

static int ksFloorNext(sqlite3_vtab_cursor *pCsr){
  ((KsFloorCsr*)pCsr)->i++;
  return SQLITE_OK;
}

static int ksFloorEof(sqlite3_vtab_cursor *pCsr){
  KsFloorCsr *c = (KsFloorCsr*)pCsr;
  return c->i>=c->iEnd;
}

static int ksFloorColumn(sqlite3_vtab_cursor *pCsr, sqlite3_context *ctx,
                         int iCol){
  KsFloorCsr *c = (KsFloorCsr*)pCsr;
  if( iCol==0 ){
    sqlite3_result_int64(ctx, c->i);
  }else{
    sqlite3_result_text(ctx, ksFloorRow[c->i], -1, SQLITE_STATIC);
  }
  return SQLITE_OK;
}

static int ksFloorRowid(sqlite3_vtab_cursor *pCsr, sqlite3_int64 *piRowid){
  *piRowid = ((KsFloorCsr*)pCsr)->i;
  return SQLITE_OK;
}

static sqlite3_module ksFloorModule = {
  0, ksFloorConnect, ksFloorConnect, ksFloorBestIndex, ksFloorDisconnect,
  ksFloorDisconnect, ksFloorOpen, ksFloorClose, ksFloorFilter, ksFloorNext,
  ksFloorEof, ksFloorColumn, ksFloorRowid,
  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

/* A :memory: connection with temp.t of module kvsql_floor. */
static sqlite3 *ksFloorOpenDb(void){
  sqlite3 *db = 0;
  int i;
  if( ksFloorRow==0 ){
    ksFloorRow = malloc(sizeof(*ksFloorRow)*KS_ROWS);
    if( ksFloorRow==0 ) return 0;
    for(i=0; i<KS_ROWS; i++){
      snprintf(ksFloorRow[i], sizeof(ksFloorRow[i]), "value-%010d", i);
    }
  }
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK
   || sqlite3_create_module(db, "kvsql_floor", &ksFloorModule, 0)!=SQLITE_OK
   || ksExec(db, "CREATE VIRTUAL TABLE temp.t USING kvsql_floor")
      !=SQLITE_OK ){
    sqlite3_close(db);
    return 0;
  }
  return db;
}

/* A connection set up for one side with table t holding KS_ROWS rows. */
static sqlite3 *ksOpen(int iType, int bCandidate, const char *zDir){
  sqlite3 *db = 0;
  int rc;
  if( iType==3 ){                       /* the floor: kv_memory's baseline */
    if( bCandidate ) return ksFloorOpenDb();
    iType = 2;
  }
  if( !bCandidate && iType==2 ){
    sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
    if( sqlite3_open(":memory:", &db)!=SQLITE_OK ){
      sqlite3_close(db);
      return 0;
    }
  }else{
    db = ksOpenFile(zDir, bCandidate ? "app.db" : "plain.db");
    if( db==0 ) return 0;
  }
  if( bCandidate ){
    char *z = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING %s;"
                              "SELECT kv_attach_all()", azKsType[iType]);
    rc = ksExec(db, z);
    sqlite3_free(z);
  }else{
    rc = ksExec(db, "CREATE TABLE t(key PRIMARY KEY NOT NULL, value) "
                    "WITHOUT ROWID");
  }
  if( rc==SQLITE_OK ) rc = ksLoad(db, 0, KS_ROWS/1000, 1000);
  if( rc==SQLITE_OK && bCandidate ) rc = ksDrain(db);
  if( rc!=SQLITE_OK ){
    sqlite3_close(db);
    db = 0;
  }
  return db;
}

/* Step pStmt to its end, fetching every column of every row as most
** hosts do (Python's sqlite3 module): by its type, a text with
** sqlite3_column_text, which needs a NUL-terminated string, then its
** length; *pn += the bytes of the texts and blobs and the integers. */
static int ksStepAll(sqlite3_stmt *pStmt, sqlite3_int64 *pn){
  int rc, i, nCol = sqlite3_column_count(pStmt);
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    for(i=0; i<nCol; i++){
      switch( sqlite3_column_type(pStmt, i) ){
        case SQLITE_INTEGER:
          *pn += sqlite3_column_int64(pStmt, i);
          break;
        case SQLITE_TEXT:
          if( sqlite3_column_text(pStmt, i)==0 ) rc = SQLITE_NOMEM;
          *pn += sqlite3_column_bytes(pStmt, i);
          break;
        case SQLITE_BLOB:
          if( sqlite3_column_blob(pStmt, i)==0 ) rc = SQLITE_NOMEM;
          *pn += sqlite3_column_bytes(pStmt, i);
          break;
        default:
          break;
      }
    }
    if( rc!=SQLITE_ROW ) break;
  }
  sqlite3_reset(pStmt);
  return rc==SQLITE_DONE ? SQLITE_OK : rc;
}

#define KS_POINT_OP  0
#define KS_RANGE_OP  1
#define KS_SCAN_OP   2
#define KS_UP1_OP    3
#define KS_UPN_OP    4

static int ksReads(sqlite3 *db, int eOp, sqlite3_int64 *pn){
  static const char *azSql[] = {
    "SELECT value FROM t WHERE key=?1",
    "SELECT value FROM t WHERE key>=?1 AND key<?1+20",
    "SELECT value, key FROM t",
  };
  static const int anLoop[] = { KS_POINT, KS_RANGE, KS_SCAN };
  sqlite3_stmt *pStmt = 0;
  unsigned x = 12345;
  int i, rc = sqlite3_prepare_v2(db, azSql[eOp], -1, &pStmt, 0);
  for(i=0; rc==SQLITE_OK && i<anLoop[eOp]; i++){
    x = x*1103515245u + 12345u;
    sqlite3_bind_int(pStmt, 1, (int)((x>>8) % (KS_ROWS - KS_SPAN)));
    rc = ksStepAll(pStmt, pn);
  }
  sqlite3_finalize(pStmt);
  return rc;
}

static int ksUpserts(sqlite3 *db, int eOp){
  sqlite3_stmt *pStmt = 0;
  unsigned x = 777;
  int nTxn = eOp==KS_UP1_OP ? KS_UP1 : KS_UPN_TXN;
  int nRow = eOp==KS_UP1_OP ? 1 : 1000;
  int i, j, rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t "
      "VALUES(?1, printf('upsert-%010d', ?1))", -1, &pStmt, 0);
  for(i=0; rc==SQLITE_OK && i<nTxn; i++){
    if( nRow>1 ) rc = ksExec(db, "BEGIN");
    for(j=0; rc==SQLITE_OK && j<nRow; j++){
      x = x*1103515245u + 12345u;
      sqlite3_bind_int(pStmt, 1, (int)((x>>8) % (2*KS_ROWS)));
      rc = sqlite3_step(pStmt)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
      sqlite3_reset(pStmt);
    }
    if( rc==SQLITE_OK && nRow>1 ) rc = ksExec(db, "COMMIT");
  }
  sqlite3_finalize(pStmt);
  return rc;
}

static double ksRun(int iType, int eOp, int bCandidate, const char *zDir){
  sqlite3 *db = ksOpen(iType, bCandidate, zDir);
  sqlite3_int64 n = 0;
  double t0, t1 = -1;
  int rc;
  if( db==0 ) return -1;
  t0 = bench_now();
  rc = eOp<=KS_SCAN_OP ? ksReads(db, eOp, &n) : ksUpserts(db, eOp);
  if( rc==SQLITE_OK ) t1 = bench_now() - t0;
  else fprintf(stderr, "kvsql %s op %d: %s\n", azKsType[iType], eOp,
               sqlite3_errmsg(db));
  if( rc==SQLITE_OK && bCandidate && iType==0 ) ksDrain(db);
  sqlite3_close(db);
  return t1;
}

#define KS_WORKLOAD(NAME, TYPE, OP) \
  double NAME(int bCandidate, const char *zDir){ \
    return ksRun(TYPE, OP, bCandidate, zDir); \
  }
KS_WORKLOAD(bench_kvsql_btree_point,   0, KS_POINT_OP)
KS_WORKLOAD(bench_kvsql_btree_range,   0, KS_RANGE_OP)
KS_WORKLOAD(bench_kvsql_btree_scan,    0, KS_SCAN_OP)
KS_WORKLOAD(bench_kvsql_btree_upsert1, 0, KS_UP1_OP)
KS_WORKLOAD(bench_kvsql_btree_upsertN, 0, KS_UPN_OP)
KS_WORKLOAD(bench_kvsql_log_point,     1, KS_POINT_OP)
KS_WORKLOAD(bench_kvsql_log_range,     1, KS_RANGE_OP)
KS_WORKLOAD(bench_kvsql_log_scan,      1, KS_SCAN_OP)
KS_WORKLOAD(bench_kvsql_log_upsert1,   1, KS_UP1_OP)
KS_WORKLOAD(bench_kvsql_log_upsertN,   1, KS_UPN_OP)
KS_WORKLOAD(bench_kvsql_memory_point,  2, KS_POINT_OP)
KS_WORKLOAD(bench_kvsql_memory_range,  2, KS_RANGE_OP)
KS_WORKLOAD(bench_kvsql_memory_scan,   2, KS_SCAN_OP)
KS_WORKLOAD(bench_kvsql_memory_upsert1, 2, KS_UP1_OP)
KS_WORKLOAD(bench_kvsql_memory_upsertN, 2, KS_UPN_OP)
KS_WORKLOAD(bench_kvsql_floor_point,   3, KS_POINT_OP)
KS_WORKLOAD(bench_kvsql_floor_range,   3, KS_RANGE_OP)
KS_WORKLOAD(bench_kvsql_floor_scan,    3, KS_SCAN_OP)

double bench_kvsql_btree_upsert1_full(int bCandidate, const char *zDir){
  double t;
  ksFull = 1;
  t = ksRun(0, KS_UP1_OP, bCandidate, zDir);
  ksFull = 0;
  return t;
}
double bench_kvsql_log_upsert1_full(int bCandidate, const char *zDir){
  double t;
  ksFull = 1;
  t = ksRun(1, KS_UP1_OP, bCandidate, zDir);
  ksFull = 0;
  return t;
}

/* ------------------------------------------------- eight connections --- */

typedef struct KsWorker KsWorker;
struct KsWorker {
  const char *zDir;
  int iFirst, nKey;         /* its keys: iFirst, iFirst+nKey-1 */
  int nTxn;                 /* transactions to commit */
  int rc;
};

/* nTxn read-modify-write transactions over keys iFirst.. on its own
** connection; a conflict (there is none on disjoint keys) is retried. */
static void *ksWorker(void *pArg){
  KsWorker *w = (KsWorker*)pArg;
  sqlite3 *db = ksOpenFile(w->zDir, "app.db");
  sqlite3_stmt *pRead = 0, *pWrite = 0, *pBegin = 0, *pCommit = 0;
  int i, rc = db ? SQLITE_OK : SQLITE_CANTOPEN;
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db, "BEGIN", -1, &pBegin, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db, "COMMIT", -1, &pCommit, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "SELECT value FROM t WHERE key=?1", -1,
                            &pRead, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "UPDATE t SET value=?2 WHERE key=?1", -1,
                            &pWrite, 0);
  }
  for(i=0; rc==SQLITE_OK && i<w->nTxn; i++){
    int k = w->iFirst + i % w->nKey;
    sqlite3_int64 v = 0;
    rc = sqlite3_step(pBegin)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(pBegin);
    sqlite3_bind_int(pRead, 1, k);
    if( rc==SQLITE_OK && sqlite3_step(pRead)==SQLITE_ROW ){
      v = sqlite3_column_int64(pRead, 0);
    }
    sqlite3_reset(pRead);
    sqlite3_bind_int(pWrite, 1, k);
    sqlite3_bind_int64(pWrite, 2, v+1);
    if( rc==SQLITE_OK && sqlite3_step(pWrite)!=SQLITE_DONE ) rc = SQLITE_ERROR;
    sqlite3_reset(pWrite);
    if( rc==SQLITE_OK && sqlite3_step(pCommit)!=SQLITE_DONE ) rc = SQLITE_ERROR;
    sqlite3_reset(pCommit);
    if( rc!=SQLITE_OK ){
      rc = sqlite3_extended_errcode(db);
      if( !sqlite3_get_autocommit(db) ) sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
      if( rc==SQLITE_BUSY_SNAPSHOT ){ rc = SQLITE_OK; i--; }
      else fprintf(stderr, "kv_btree_8conn: %s\n", sqlite3_errmsg(db));
    }
  }
  sqlite3_finalize(pRead);
  sqlite3_finalize(pWrite);
  sqlite3_finalize(pBegin);
  sqlite3_finalize(pCommit);
  sqlite3_close(db);
  w->rc = rc;
  return 0;
}

double bench_kvsql_btree_8conn(int bCandidate, const char *zDir){
  sqlite3 *db;
  pthread_t aThr[KS_CONN];
  KsWorker aW[KS_CONN];
  int i, nConn = bCandidate ? KS_CONN : 1, rc;
  double t0, t1 = -1;
  ksFull = 1;                /* group commit shares the flushes of FULL */
  db = ksOpenFile(zDir, "app.db");
  if( db==0 ){ ksFull = 0; return -1; }
  rc = ksExec(db, "CREATE VIRTUAL TABLE t USING kv_btree");
  if( rc==SQLITE_OK ) rc = ksLoad(db, 0, 1, 1000);
  if( rc==SQLITE_OK ) rc = ksExec(db, "UPDATE t SET value=0");
  t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<nConn; i++){
    aW[i].zDir = zDir;
    aW[i].nKey = 1000/KS_CONN;
    aW[i].iFirst = i*aW[i].nKey;
    aW[i].nTxn = KS_RMW/nConn;
    aW[i].rc = SQLITE_OK;
    if( pthread_create(&aThr[i], 0, ksWorker, &aW[i])!=0 ){
      rc = SQLITE_ERROR;
      nConn = i;
    }
  }
  for(i=0; i<nConn; i++){
    pthread_join(aThr[i], 0);
    if( aW[i].rc!=SQLITE_OK ) rc = aW[i].rc;
  }
  if( rc==SQLITE_OK ) t1 = (bench_now() - t0)/KS_RMW;
  ksDrain(db);
  sqlite3_close(db);
  ksFull = 0;
  return t1;
}
