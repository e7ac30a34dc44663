/*
** harness.c -- main() and helpers for the Check test programs (see
** harness.h).
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"                 /* depot_compact_background_pending() */

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* A program that defines no child mode has no depot_test_child(). */
#pragma weak depot_test_child

/* The absolute path of this program, for th_spawn(). */
static char zThSelf[PATH_MAX];

static void th_mkdir_p(const char *zDir){
  char *z = sqlite3_mprintf("%s", zDir);
  char *p;
  ck_assert_ptr_nonnull(z);
  for(p=z+1; *p; p++){
    if( *p=='/' ){
      *p = 0;
      if( mkdir(z, 0777)!=0 && errno!=EEXIST ){
        ck_abort_msg("mkdir %s: %s", z, strerror(errno));
      }
      *p = '/';
    }
  }
  if( mkdir(z, 0777)!=0 && errno!=EEXIST ){
    ck_abort_msg("mkdir %s: %s", z, strerror(errno));
  }
  sqlite3_free(z);
}

char *th_tmpdir(const char *zTag){
  const char *zBase = getenv("DEPOT_TEST_TMPDIR");
  char *zTemplate;
  char *zDir;
  if( zBase==0 || zBase[0]==0 ) zBase = "tests/tmp";
  th_mkdir_p(zBase);
  zTemplate = sqlite3_mprintf("%s/%s.XXXXXX", zBase, zTag);
  ck_assert_ptr_nonnull(zTemplate);
  zDir = mkdtemp(zTemplate);
  ck_assert_msg(zDir!=0, "mkdtemp %s: %s", zTemplate, strerror(errno));
  return zTemplate;
}

/* The cache parameters DEPOT_TEST_CACHE selects for depot URIs that set
** none: "tiny" (a few pages of decoded cache, a page map of a few
** entries, a spill file of four pages), "large", or unset (the
** defaults). */
static const char *thCacheParams(void){
  const char *z = getenv("DEPOT_TEST_CACHE");
  if( z && strcmp(z, "tiny")==0 ){
    return "&cache_kb=8&map_kb=1&readahead=64&spill_kb=16";
  }
  if( z && strcmp(z, "large")==0 ){
    return "&cache_kb=262144&map_kb=65536&readahead=256";
  }
  return 0;
}

/* The write-transaction budget DEPOT_TEST_BUDGET selects for depot URIs
** that set none: "tiny" (two 4 KiB pages: every larger transaction stages
** its pages in the store), "small" (16 pages, so pages rewritten after
** they were staged stay in memory), or unset (the default). */
static const char *thBudgetParams(void){
  const char *z = getenv("DEPOT_TEST_BUDGET");
  if( z && strcmp(z, "tiny")==0 ) return "&txn_budget_kb=8";
  if( z && strcmp(z, "small")==0 ) return "&txn_budget_kb=64";
  return 0;
}

sqlite3 *th_open(const char *zPath){
  sqlite3 *db = 0;
  const char *zCache = thCacheParams();
  const char *zBudget = thBudgetParams();
  char *zWith = 0;
  int rc;
  int bDepotUri = strncmp(zPath, "file:", 5)==0 && strstr(zPath, "vfs=depot")
               && !strchr(zPath, '#');
  if( zCache && bDepotUri
   && !strstr(zPath, "cache_kb=") && !strstr(zPath, "map_kb=") ){
    zWith = sqlite3_mprintf("%s%s", zPath, zCache);
    ck_assert_ptr_nonnull(zWith);
  }
  if( zBudget && bDepotUri && !strstr(zPath, "txn_budget_kb=") ){
    char *z = sqlite3_mprintf("%s%s", zWith ? zWith : zPath, zBudget);
    ck_assert_ptr_nonnull(z);
    sqlite3_free(zWith);
    zWith = z;
  }
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  rc = sqlite3_open_v2(zWith ? zWith : zPath, &db,
      SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  ck_assert_msg(rc==SQLITE_OK, "open %s: %s", zWith ? zWith : zPath,
                db ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_free(zWith);
  return db;
}

int th_try(sqlite3 *db, const char *zSql, char **pzErr){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( pzErr ){
    *pzErr = zErr;
  }else{
    sqlite3_free(zErr);
  }
  return rc;
}

void th_exec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "%s\n  -> rc=%d %s", zSql, rc,
                zErr ? zErr : "");
}

static sqlite3_stmt *th_first_row(sqlite3 *db, const char *zSql, int *pHave){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  ck_assert_msg(rc==SQLITE_OK, "prepare %s: %s", zSql, sqlite3_errmsg(db));
  rc = sqlite3_step(pStmt);
  ck_assert_msg(rc==SQLITE_ROW || rc==SQLITE_DONE, "step %s: %s", zSql,
                sqlite3_errmsg(db));
  *pHave = (rc==SQLITE_ROW);
  return pStmt;
}

void th_execf(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *zSql;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  th_exec(db, zSql);
  sqlite3_free(zSql);
}

int th_tryf(sqlite3 *db, char **pzErr, const char *zFmt, ...){
  va_list ap;
  char *zSql;
  int rc;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  rc = th_try(db, zSql, pzErr);
  sqlite3_free(zSql);
  return rc;
}

char *th_textf(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *zSql, *z;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  z = th_text(db, zSql);
  sqlite3_free(zSql);
  return z;
}

sqlite3 *th_openf(const char *zFmt, ...){
  va_list ap;
  char *zPath;
  sqlite3 *db;
  va_start(ap, zFmt);
  zPath = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  db = th_open(zPath);
  sqlite3_free(zPath);
  return db;
}

void th_text_is(sqlite3 *db, const char *zSql, const char *zWant){
  char *z = th_text(db, zSql);
  ck_assert_msg(z && strcmp(z, zWant)==0, "%s: '%s', want '%s'", zSql,
                z ? z : "NULL", zWant);
  sqlite3_free(z);
}

char *th_text(sqlite3 *db, const char *zSql){
  int have;
  sqlite3_stmt *pStmt = th_first_row(db, zSql, &have);
  char *z = 0;
  if( have && sqlite3_column_type(pStmt, 0)!=SQLITE_NULL ){
    z = sqlite3_mprintf("%s", (const char*)sqlite3_column_text(pStmt, 0));
  }
  sqlite3_finalize(pStmt);
  return z;
}

sqlite3_int64 th_int(sqlite3 *db, const char *zSql){
  int have;
  sqlite3_stmt *pStmt = th_first_row(db, zSql, &have);
  sqlite3_int64 v;
  ck_assert_msg(have, "no row from %s", zSql);
  v = sqlite3_column_int64(pStmt, 0);
  sqlite3_finalize(pStmt);
  return v;
}

sqlite3_int64 th_intf(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *z;
  sqlite3_int64 v;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  ck_assert_ptr_nonnull(z);
  v = th_int(db, z);
  sqlite3_free(z);
  return v;
}

int th_under_tsan(void){
  const char *z = getenv("DEPOT_SANITIZER");
  return z && strcmp(z, "tsan")==0;
}

int th_under_asan(void){
  const char *z = getenv("DEPOT_SANITIZER");
  return z && strcmp(z, "asan")==0;
}

int th_under_valgrind(void){
  const char *z = getenv("DEPOT_SANITIZER");
  return z && strcmp(z, "valgrind")==0;
}

int th_scaled(int n, int nDiv){
  if( !th_under_valgrind() || nDiv<=1 ) return n;
  return n/nDiv>0 ? n/nDiv : 1;
}

int th_busy_ms(int ms){
  return th_under_valgrind() ? ms*10 : ms;
}

int th_count_suffix(const char *zDir, const char *zSuffix){
  DIR *d = opendir(zDir);
  struct dirent *e;
  size_t nSuf = strlen(zSuffix);
  int n = 0;
  ck_assert_msg(d!=0, "cannot list %s", zDir);
  while( (e = readdir(d))!=0 ){
    size_t nName = strlen(e->d_name);
    if( nName>nSuf && strcmp(e->d_name+nName-nSuf, zSuffix)==0 ) n++;
  }
  closedir(d);
  return n;
}

const char *th_module_path(void){
  const char *z = getenv("DEPOT_MODULE");
  return (z && z[0]) ? z : 0;
}

pid_t th_spawn(const char *const azArg[]){
  char *azArgv[16];
  pid_t pid = 0;
  int n = 0, rc;
  azArgv[n++] = zThSelf;
  while( azArg[n-1] && n<15 ){ azArgv[n] = (char*)azArg[n-1]; n++; }
  azArgv[n] = 0;
  ck_assert_msg(azArg[n-1]==0, "th_spawn: too many arguments");
  fflush(stdout);
  fflush(stderr);
  rc = posix_spawn(&pid, zThSelf, 0, 0, azArgv, environ);
  ck_assert_msg(rc==0, "spawn %s: %s", zThSelf, strerror(rc));
  return pid;
}

int main(int argc, char **argv){
  SRunner *sr;
  int nFail;
  if( realpath(argv[0], zThSelf)==0 ){
    sqlite3_snprintf(sizeof(zThSelf), zThSelf, "/proc/self/exe");
  }
  if( argc>1 && depot_test_child ) return depot_test_child(argc-1, argv+1);
  sr = srunner_create(depot_test_suite());
  srunner_run_all(sr, CK_NORMAL);
  nFail = srunner_ntests_failed(sr);
  srunner_free(sr);
  /* the store handle that branch operations keep idle, not a leak of the
  ** tests: closed for a clean exit under a leak checker */
  depot_fork_idle_close();
  return nFail==0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* ---- the fault-injecting VFS (th_fault_vfs) ---- */

int th_fault_writes = 0, th_fault_syncs = 0, th_fault_hits = 0;
static sqlite3_vfs *pFaultRoot = 0;
typedef struct FaultFile FaultFile;
struct FaultFile { sqlite3_file base; sqlite3_file *pReal; };

static int faultHit(int *pCount){
  if( *pCount>0 && --(*pCount)==0 ){ th_fault_hits++; return 1; }
  return 0;
}
#define REAL(f) (((FaultFile*)(f))->pReal)
static int faultClose(sqlite3_file *f){
  int rc = REAL(f)->pMethods->xClose(REAL(f));
  return rc;
}
static int faultRead(sqlite3_file *f, void *p, int n, sqlite3_int64 o){
  return REAL(f)->pMethods->xRead(REAL(f), p, n, o);
}
static int faultWrite(sqlite3_file *f, const void *p, int n,
                      sqlite3_int64 o){
  if( faultHit(&th_fault_writes) ) return SQLITE_IOERR_WRITE;
  return REAL(f)->pMethods->xWrite(REAL(f), p, n, o);
}
static int faultTruncate(sqlite3_file *f, sqlite3_int64 n){
  return REAL(f)->pMethods->xTruncate(REAL(f), n);
}
static int faultSync(sqlite3_file *f, int fl){
  if( faultHit(&th_fault_syncs) ) return SQLITE_IOERR_FSYNC;
  return REAL(f)->pMethods->xSync(REAL(f), fl);
}
static int faultSize(sqlite3_file *f, sqlite3_int64 *p){
  return REAL(f)->pMethods->xFileSize(REAL(f), p);
}
static int faultLock(sqlite3_file *f, int e){
  return REAL(f)->pMethods->xLock(REAL(f), e);
}
static int faultUnlock(sqlite3_file *f, int e){
  return REAL(f)->pMethods->xUnlock(REAL(f), e);
}
static int faultReserved(sqlite3_file *f, int *p){
  return REAL(f)->pMethods->xCheckReservedLock(REAL(f), p);
}
static int faultFcntl(sqlite3_file *f, int op, void *p){
  return REAL(f)->pMethods->xFileControl(REAL(f), op, p);
}
static int faultSector(sqlite3_file *f){
  return REAL(f)->pMethods->xSectorSize(REAL(f));
}
static int faultDevchar(sqlite3_file *f){
  return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int faultShmMap(sqlite3_file *f, int i, int n, int b,
                       void volatile **pp){
  return REAL(f)->pMethods->xShmMap(REAL(f), i, n, b, pp);
}
static int faultShmLock(sqlite3_file *f, int o, int n, int fl){
  return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void faultShmBarrier(sqlite3_file *f){
  REAL(f)->pMethods->xShmBarrier(REAL(f));
}
static int faultShmUnmap(sqlite3_file *f, int d){
  return REAL(f)->pMethods->xShmUnmap(REAL(f), d);
}
static const sqlite3_io_methods faultIo = {
  2, faultClose, faultRead, faultWrite, faultTruncate, faultSync, faultSize,
  faultLock, faultUnlock, faultReserved, faultFcntl, faultSector,
  faultDevchar, faultShmMap, faultShmLock, faultShmBarrier, faultShmUnmap,
  0, 0
};
static int faultOpen(sqlite3_vfs *v, const char *z, sqlite3_file *f, int fl,
                     int *pOut){
  FaultFile *p = (FaultFile*)f;
  int rc;
  (void)v;
  p->pReal = (sqlite3_file*)&p[1];
  rc = pFaultRoot->xOpen(pFaultRoot, z, p->pReal, fl, pOut);
  p->base.pMethods = p->pReal->pMethods ? &faultIo : 0;
  return rc;
}
static sqlite3_vfs faultVfs;

void th_fault_vfs(void){
  if( pFaultRoot ) return;
  pFaultRoot = sqlite3_vfs_find(0);
  faultVfs = *pFaultRoot;
  faultVfs.zName = "faulty-default";
  faultVfs.szOsFile = (int)sizeof(FaultFile) + pFaultRoot->szOsFile;
  faultVfs.xOpen = faultOpen;
  ck_assert_int_eq(sqlite3_vfs_register(&faultVfs, 1), SQLITE_OK);
}

void th_compact_idle(void){
  int i;
  for(i=0; i<400 && depot_compact_background_pending()>0; i++){
    usleep(50000);
  }
  ck_assert_int_eq(depot_compact_background_pending(), 0);
}
