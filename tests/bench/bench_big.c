/*
** bench_big.c -- make bench workloads of databases larger than a write
** transaction's budget (txn_budget_kb, default 32 MiB).  The source is a
** plain database of a TPC-H-like schema of our own (region, nation,
** supplier, customer, part, orders, lineitem with its indexes), built to
** about DEPOT_BENCH_BIG_MB MB (default 1024; make bench-large: 4096) once
** and kept as tests/tmp/big-source-NMB.db for later workloads and runs
** (with big-source-NMB.depot, the store big_read reads).
**
**   big_vacuum   baseline: VACUUM INTO a plain file; candidate: VACUUM
**                INTO a new depot database.
**   big_import   baseline: the backup API into a plain file; candidate:
**                depot_import into a new depot database.
**   big_load     baseline: one transaction INSERT ... SELECT of every
**                lineitem row (attached source) into a plain file;
**                candidate: the same into a depot database.
**   big_read     baseline: a read-only process with a 2 MB page cache runs
**                a scan, an aggregate and 2000 index lookups on the plain
**                file; candidate: the same on the imported depot database
**                (cache_kb=2048: decoded-page cache as large).
**   big_compact  baseline: VACUUM of the plain file after the load;
**                candidate: depot_compact + depot_gc of the depot database
**                after the load.
**
** Every run forks a process that does only the measured work (its opens
** included), so its peak RSS (wait4) is that of the workload alone; each
** run prints its side, seconds and peak RSS to stderr, and the candidate
** also the RSS limit the issue sets (the baseline's peak + the budget + 64
** MB) and the compression thread count (threads=, default one per core).
** Cost: seconds of the forked process.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int nBigMb = 0;              /* size of the source, 0: not built */

static int bigExec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc!=SQLITE_OK ) fprintf(stderr, "bench: %.200s: %s\n", zSql, zErr);
  sqlite3_free(zErr);
  return rc;
}

static sqlite3 *bigOpen(const char *zName, int bUri){
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  depot_vfs_register();
  if( sqlite3_open_v2(zName, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |(bUri ? SQLITE_OPEN_URI : 0), 0)!=SQLITE_OK ){
    fprintf(stderr, "bench: open %s: %s\n", zName, sqlite3_errmsg(db));
    sqlite3_close(db);
    db = 0;
  }
  return db;
}

static const char zBigSchema[] =
  "PRAGMA page_size=4096;"
  "CREATE TABLE region(r_regionkey INTEGER PRIMARY KEY, r_name TEXT,"
  " r_comment TEXT);"
  "CREATE TABLE nation(n_nationkey INTEGER PRIMARY KEY, n_name TEXT,"
  " n_regionkey INT, n_comment TEXT);"
  "CREATE TABLE supplier(s_suppkey INTEGER PRIMARY KEY, s_name TEXT,"
  " s_address TEXT, s_nationkey INT, s_phone TEXT, s_acctbal REAL,"
  " s_comment TEXT);"
  "CREATE TABLE customer(c_custkey INTEGER PRIMARY KEY, c_name TEXT,"
  " c_address TEXT, c_nationkey INT, c_phone TEXT, c_acctbal REAL,"
  " c_mktsegment TEXT, c_comment TEXT);"
  "CREATE TABLE part(p_partkey INTEGER PRIMARY KEY, p_name TEXT, p_mfgr TEXT,"
  " p_brand TEXT, p_type TEXT, p_size INT, p_container TEXT,"
  " p_retailprice REAL, p_comment TEXT);"
  "CREATE TABLE orders(o_orderkey INTEGER PRIMARY KEY, o_custkey INT,"
  " o_orderstatus TEXT, o_totalprice REAL, o_orderdate TEXT,"
  " o_orderpriority TEXT, o_clerk TEXT, o_shippriority INT,"
  " o_comment TEXT);"
  "CREATE TABLE lineitem(l_orderkey INT, l_partkey INT, l_suppkey INT,"
  " l_linenumber INT, l_quantity REAL, l_extendedprice REAL,"
  " l_discount REAL, l_tax REAL, l_returnflag TEXT, l_linestatus TEXT,"
  " l_shipdate TEXT, l_commitdate TEXT, l_receiptdate TEXT,"
  " l_shipinstruct TEXT, l_shipmode TEXT, l_comment TEXT,"
  " PRIMARY KEY(l_orderkey, l_linenumber));"
  "CREATE INDEX lineitem_part ON lineitem(l_partkey);"
  "CREATE INDEX orders_cust ON orders(o_custkey);";

/* Words for comments: text that compresses about as TPC-H's does. */
#define BIG_WORDS "('furiously'),('carefully'),('quickly'),('blithely')," \
  "('slyly'),('ironic'),('final'),('pending'),('regular'),('special')," \
  "('express'),('bold'),('deposits'),('accounts'),('packages')," \
  "('requests'),('instructions'),('theodolites')"

/* The integers lo..hi as table s(value), for a FROM clause. */
static char *bigSeries(int lo, int hi){
  return sqlite3_mprintf("(WITH RECURSIVE s(value) AS (SELECT %d UNION ALL"
                         " SELECT value+1 FROM s WHERE value<%d) SELECT value"
                         " FROM s)", lo, hi);
}

/* Rows of one "scale unit" (about 12 MB of plain database): orders
** [iFrom, iFrom+nOrder) with 1..7 line items each, and the customers,
** parts and suppliers they name. */
static int bigFill(sqlite3 *db, int iUnit){
  int nOrder = 15000, iFrom = iUnit*nOrder + 1, rc;
  char *zC = bigSeries(iUnit*1500+1, iUnit*1500+1500);
  char *zP = bigSeries(iUnit*2000+1, iUnit*2000+2000);
  char *zO = bigSeries(iFrom, iFrom+nOrder-1);
  char *zL = bigSeries(1, 7);
  char *z = sqlite3_mprintf(
    "CREATE TEMP TABLE IF NOT EXISTS w(i INTEGER PRIMARY KEY, w TEXT);"
    "INSERT OR IGNORE INTO w(w) SELECT column1 FROM (VALUES %s)"
    " WHERE (SELECT count(*) FROM w)=0;"
    "INSERT INTO customer SELECT value, 'Customer#'||printf('%%09d',value),"
    " hex(randomblob(12)), value%%25, printf('%%02d-%%03d-%%03d-%%04d',"
    " 10+value%%25, value%%997, value%%991, value%%9973),"
    " (value%%1000000)/100.0, (SELECT w FROM w WHERE i=1+value%%18),"
    " (SELECT group_concat(w,' ') FROM w WHERE i%%5=value%%5)"
    " FROM %s;"
    "INSERT INTO part SELECT value, (SELECT group_concat(w,' ') FROM w WHERE"
    " i%%6=value%%6), 'Manufacturer#'||(1+value%%5), 'Brand#'||(value%%55),"
    " (SELECT w FROM w WHERE i=1+value%%18)||' BRASS', 1+value%%50,"
    " 'SM BOX', 900+(value%%20000)/10.0, 'final deposits'"
    " FROM %s;"
    "INSERT INTO orders SELECT value, 1+abs(random())%%(%d), 'O',"
    " abs(random())%%50000000/100.0, date('1992-01-01', '+'||(value%%2400)||"
    " ' days'), (1+value%%5)||'-URGENT', 'Clerk#'||printf('%%09d',value%%1000),"
    " 0, (SELECT group_concat(w,' ') FROM w WHERE i%%4=value%%4)"
    " FROM %s;"
    "INSERT INTO lineitem SELECT o.value, 1+abs(random())%%(%d),"
    " 1+abs(random())%%1000, l.value, 1+abs(random())%%50,"
    " abs(random())%%10000000/100.0, (abs(random())%%11)/100.0,"
    " (abs(random())%%9)/100.0, 'N', 'O',"
    " date('1992-01-02', '+'||((o.value+l.value*7)%%2500)||' days'),"
    " date('1992-01-30', '+'||(o.value%%2500)||' days'),"
    " date('1992-02-10', '+'||((o.value*3)%%2500)||' days'),"
    " 'DELIVER IN PERSON', 'TRUCK',"
    " (SELECT group_concat(w,' ') FROM w WHERE i%%7=(o.value+l.value)%%7)"
    " FROM %s o, %s l WHERE l.value<=1+o.value%%7;",
    BIG_WORDS, zC, zP, (iUnit+1)*1500, zO, (iUnit+1)*2000, zO, zL);
  rc = z && zC && zP && zO && zL ? bigExec(db, z) : SQLITE_NOMEM;
  sqlite3_free(z);
  sqlite3_free(zC);
  sqlite3_free(zP);
  sqlite3_free(zO);
  sqlite3_free(zL);
  return rc;
}

/* The source's path: next to the scratch directories of all workloads
** (tests/tmp/big-source-NMB.db), kept after the process ends, so the
** workloads of one make bench, and later runs, build it once. */
static char *bigSource(const char *zDir){
  const char *zMb = getenv("DEPOT_BENCH_BIG_MB");
  int nWant = zMb && atoi(zMb)>0 ? atoi(zMb) : 1024;
  const char *zSlash = strrchr(zDir, '/');
  int nParent = zSlash ? (int)(zSlash-zDir) : 1;
  return sqlite3_mprintf("%.*s/big-source-%dMB.db", nParent,
                         zSlash ? zDir : ".", nWant);
}

/* zName in the run's scratch directory (emptied between runs), but the
** source and the store that big_read reads are kept next to it. */
static char *bigPath(const char *zDir, const char *zName){
  if( strcmp(zName, "source.db")==0 ) return bigSource(zDir);
  if( strcmp(zName, "read.depot")==0 ){
    char *zSrc = bigSource(zDir);
    char *z = sqlite3_mprintf("%.*s.depot", (int)strlen(zSrc)-3, zSrc);
    sqlite3_free(zSrc);
    return z;
  }
  return sqlite3_mprintf("%s/%s", zDir, zName);
}

/* The source database, built on first use. */
static int bigPrepare(const char *zDir){
  const char *zMb = getenv("DEPOT_BENCH_BIG_MB");
  int nWant = zMb && atoi(zMb)>0 ? atoi(zMb) : 1024, rc = 0, i;
  char *zSrc = bigPath(zDir, "source.db");
  sqlite3 *db;
  double t0 = bench_now();
  struct stat st;
  if( nBigMb ){
    sqlite3_free(zSrc);
    return 0;
  }
  if( stat(zSrc, &st)==0 && st.st_size>=(sqlite3_int64)nWant<<20 ){
    nBigMb = (int)(st.st_size>>20);       /* built by an earlier process */
    sqlite3_free(zSrc);
    return 0;
  }
  unlink(zSrc);
  db = bigOpen(zSrc, 0);
  if( db==0 || bigExec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF")
   || bigExec(db, zBigSchema) ) rc = -1;
  for(i=0; rc==0; i++){
    if( stat(zSrc, &st)==0 && st.st_size>=(sqlite3_int64)nWant<<20 ) break;
    if( bigExec(db, "BEGIN") || bigFill(db, i) || bigExec(db, "COMMIT") ){
      rc = -1;
    }
  }
  sqlite3_close(db);
  if( rc==0 ){
    nBigMb = (int)(st.st_size>>20);
    fprintf(stderr, "big: built a %d MB TPC-H-like database (%d units) in"
            " %.1f s\n", nBigMb, i, bench_now()-t0);
  }
  sqlite3_free(zSrc);
  return rc;
}

/* ---- one measured run in a process of its own ---- */

typedef int (*BigWork)(const char *zDir, int bCandidate);

/* Run xWork in a forked process; returns its seconds (negative on
** failure) and prints its peak RSS (a candidate's next to the limit the
** baseline run before it sets). */
static double bigForked(const char *zWhat, BigWork xWork, const char *zDir,
                        int bCandidate){
  static long nBaseRssKb = 0;
  struct rusage ru;
  double t0 = bench_now(), t;
  int st = 0;
  pid_t pid;
  fflush(stderr);
  pid = fork();
  if( pid==0 ) _exit(xWork(zDir, bCandidate)==0 ? 0 : 1);
  if( pid<0 || wait4(pid, &st, 0, &ru)!=pid
   || !WIFEXITED(st) || WEXITSTATUS(st)!=0 ){
    fprintf(stderr, "big: %s %s failed\n", zWhat, bCandidate ? "depot"
                                                             : "plain");
    return -1;
  }
  t = bench_now()-t0;
  if( bCandidate ){
    fprintf(stderr, "big: %s %d MB depot: %.2f s, peak RSS %.1f MiB (limit"
            " plain %.1f + budget 32 + 64 = %.1f MiB), compression threads"
            " %ld (one per core)\n",
            zWhat, nBigMb, t, ru.ru_maxrss/1024.0, nBaseRssKb/1024.0,
            nBaseRssKb/1024.0+96.0, sysconf(_SC_NPROCESSORS_ONLN));
  }else{
    nBaseRssKb = ru.ru_maxrss;
    fprintf(stderr, "big: %s %d MB plain: %.2f s, peak RSS %.1f MiB\n",
            zWhat, nBigMb, t, ru.ru_maxrss/1024.0);
  }
  return t;
}

/* The URI of database zDb of the store zStore (a bigPath() name). */
static char *bigDepotUri(const char *zDir, const char *zStore,
                         const char *zDb, const char *zExtra){
  char *zPath = bigPath(zDir, zStore);
  char *z = sqlite3_mprintf("file:%s?vfs=depot&db=%s%s", zPath, zDb,
                            zExtra ? zExtra : "");
  sqlite3_free(zPath);
  return z;
}

static int bigVacuumWork(const char *zDir, int bCandidate){
  char *zSrc = bigPath(zDir, "source.db");
  char *zTo = bCandidate ? bigDepotUri(zDir, "store.depot", "tpch", 0)
                         : bigPath(zDir, "target.db");
  char *zSql = sqlite3_mprintf("VACUUM INTO %Q", zTo);
  sqlite3 *db = bigOpen(zSrc, 1);
  int rc = db ? bigExec(db, zSql) : -1;
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zTo);
  sqlite3_free(zSrc);
  return rc;
}

static int bigImportInto(const char *zDir, int bCandidate,
                         const char *zStoreName){
  char *zSrc = bigPath(zDir, "source.db");
  int rc = -1;
  if( bCandidate ){
    char *zStore = bigPath(zDir, zStoreName);
    char *zSql = sqlite3_mprintf("SELECT depot_import(%Q, %Q, 'tpch')", zSrc,
                                 zStore);
    sqlite3 *db = bigOpen(":memory:", 0);
    rc = db ? bigExec(db, zSql) : -1;
    sqlite3_close(db);
    sqlite3_free(zSql);
    sqlite3_free(zStore);
  }else{
    char *zTo = bigPath(zDir, "target.db");
    sqlite3 *pFrom = bigOpen(zSrc, 0), *pTo = bigOpen(zTo, 0);
    sqlite3_backup *pB = pFrom && pTo
                       ? sqlite3_backup_init(pTo, "main", pFrom, "main") : 0;
    if( pB && sqlite3_backup_step(pB, -1)==SQLITE_DONE ) rc = 0;
    if( pB ) sqlite3_backup_finish(pB);
    sqlite3_close(pFrom);
    sqlite3_close(pTo);
    sqlite3_free(zTo);
  }
  sqlite3_free(zSrc);
  return rc;
}

static int bigImportWork(const char *zDir, int bCandidate){
  return bigImportInto(zDir, bCandidate, "store.depot");
}

static int bigImportRead(const char *zDir, int bCandidate){
  return bigImportInto(zDir, bCandidate, "read.depot");
}

/* The schema, then every lineitem row in one transaction. */
static int bigLoadWork(const char *zDir, int bCandidate){
  char *zSrc = bigPath(zDir, "source.db");
  char *zTo = bCandidate ? bigDepotUri(zDir, "store.depot", "load", 0)
                         : bigPath(zDir, "target.db");
  char *zAttach = sqlite3_mprintf("ATTACH 'file:%q?mode=ro&vfs=%q' AS src",
                                  zSrc, depot_vfs_plain());
  sqlite3 *db = bigOpen(zTo, 1);
  int rc = db==0 || bigExec(db, zBigSchema) || bigExec(db, zAttach)
        || bigExec(db, "BEGIN; INSERT INTO lineitem SELECT * FROM"
                       " src.lineitem; COMMIT") ? -1 : 0;
  sqlite3_close(db);
  sqlite3_free(zAttach);
  sqlite3_free(zTo);
  sqlite3_free(zSrc);
  return rc;
}

static int bigReadWork(const char *zDir, int bCandidate){
  char *zSrc = bigPath(zDir, "source.db");
  char *zUri = bCandidate ? bigDepotUri(zDir, "read.depot", "tpch",
                                        "&cache_kb=2048")
                          : sqlite3_mprintf("file:%s?mode=ro", zSrc);
  sqlite3 *db = bigOpen(zUri, 1);
  int rc = db==0 || bigExec(db, "PRAGMA cache_size=-2048;"
      " PRAGMA query_only=1;"
      " SELECT l_returnflag, l_linestatus, sum(l_quantity),"
      " sum(l_extendedprice*(1-l_discount)), avg(l_discount), count(*)"
      " FROM lineitem WHERE l_shipdate<='1998-09-02'"
      " GROUP BY l_returnflag, l_linestatus;"
      " SELECT count(*), sum(o_totalprice) FROM orders"
      " WHERE o_orderdate>='1995-01-01';"
      " WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM k"
      " WHERE i<2000) SELECT sum((SELECT count(*) FROM lineitem"
      " WHERE l_partkey=(i*7919)%2000+1)) FROM k") ? -1 : 0;
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_free(zSrc);
  return rc;
}

static int bigCompactWork(const char *zDir, int bCandidate){
  int rc = -1;
  if( bCandidate ){
    char *zSql = sqlite3_mprintf("SELECT depot_compact('%q/store.depot');"
                                 "SELECT depot_gc('%q/store.depot')",
                                 zDir, zDir);
    sqlite3 *db = bigOpen(":memory:", 0);
    rc = db ? bigExec(db, zSql) : -1;
    sqlite3_close(db);
    sqlite3_free(zSql);
  }else{
    char *zTo = bigPath(zDir, "target.db");
    sqlite3 *db = bigOpen(zTo, 0);
    rc = db ? bigExec(db, "VACUUM") : -1;
    sqlite3_close(db);
    sqlite3_free(zTo);
  }
  return rc;
}

/* Run xWork in a forked process, unmeasured (no depot work runs in the
** bench process itself).  0 on success. */
static int bigForkQuiet(BigWork xWork, const char *zDir, int bCandidate){
  int st = 0;
  pid_t pid;
  fflush(stderr);
  pid = fork();
  if( pid==0 ) _exit(xWork(zDir, bCandidate)==0 ? 0 : 1);
  if( pid<0 || waitpid(pid, &st, 0)!=pid || !WIFEXITED(st)
   || WEXITSTATUS(st)!=0 ){
    return -1;
  }
  return 0;
}

static double bigRun(const char *zWhat, BigWork xWork, int bCandidate,
                     const char *zDir){
  if( bigPrepare(zDir) ) return -1;
  return bigForked(zWhat, xWork, zDir, bCandidate);
}

double bench_big_vacuum(int bCandidate, const char *zDir){
  return bigRun("VACUUM INTO", bigVacuumWork, bCandidate, zDir);
}

double bench_big_import(int bCandidate, const char *zDir){
  return bigRun("import", bigImportWork, bCandidate, zDir);
}

double bench_big_load(int bCandidate, const char *zDir){
  return bigRun("bulk load", bigLoadWork, bCandidate, zDir);
}

/* The depot database to read is imported once, next to the source (not
** measured). */
double bench_big_read(int bCandidate, const char *zDir){
  char *zRead;
  struct stat st;
  int bHave;
  if( bigPrepare(zDir) ) return -1;
  zRead = bigPath(zDir, "read.depot");
  bHave = stat(zRead, &st)==0;
  sqlite3_free(zRead);
  if( !bHave && bigForkQuiet(bigImportRead, zDir, 1) ) return -1;
  return bigForked("read (2 MB cache)", bigReadWork, zDir, bCandidate);
}

/* The load of big_load, once per side and run (not measured), then the
** measured compaction and reclaim (or VACUUM). */
double bench_big_compact(int bCandidate, const char *zDir){
  if( bigPrepare(zDir) ) return -1;
  if( bigForkQuiet(bigLoadWork, zDir, bCandidate) ) return -1;
  return bigForked("compact+gc", bigCompactWork, zDir, bCandidate);
}
