/*
** torture.c -- the cross-engine crash-torture runner and I/O-error sweep
** (make torture; a short smoke in make check).
**
** Each round starts a fresh directory and forks a child that runs a seeded
** random workload on both engines through the simulated disk of
** tests/torture/torture_io.c:
**   - KV: three bank tables, one per backend (kv_memory persistence=1,
**     kv_btree, kv_log with small log files so compaction runs), funded in
**     one transaction; transfers of 1..3 legs across tables, an account
**     emptied by a transfer is deleted; extra tables of every type created,
**     filled and dropped;
**   - depot: a bank table in database "bank" of store.depot, transfers on a
**     chosen branch, forks, restore points and restores.
** Before committing, the child sends the parent what the transaction
** writes (a pipe: what a client saw acknowledged, which no crash of the
** child can take back); after the commit returns OK it sends the ack.  The
** child then dies in one of three ways:
**   power  the simulated disk loses power at write/sync call N (unsynced
**          writes dropped or torn, see tests/torture/torture.h);
**   kill   the parent sends SIGKILL after a random ack and delay;
**   fault  (the sweep) the nth call of one I/O class fails once with EIO,
**          ENOSPC or a short write; the failing operation must return
**          SQLITE_IOERR_* / SQLITE_FULL / SQLITE_CANTOPEN with a message,
**          and the child stops and closes everything.
** A verifier child then reopens everything and checks that each engine's
** state is exactly the acknowledged model, or the model plus the one
** transaction in flight (so nothing acknowledged is lost and nothing is
** partial), that every live depot branch passes PRAGMA integrity_check,
** and that the root WAL retires: once every record is confirmed and the
** store is closed, one segment is left.
**
** Usage: torture [--points N] [--seed S] [--steps N] [--sweep-steps N]
**                [--sweep-stride N] [--no-sweep] [--no-crash] [--smoke]
**                [--self-check] [--round SEED power|kill POINT]
**                [--fault SEED CLASS N EIO|ENOSPC|short]
** --smoke (make check) runs the self-check (a disk whose syncs make nothing
** durable must be caught), 120 crash points of a 20-step workload and
** every 9th call site of the sweep.
** A failure prints the round's seed, mode and crash point and the command
** line that replays it.  Environment: TORTURE_POINTS, TORTURE_SEED.
*/
#include "config.h"
#include "tests/torture/torture.h"
#include "ext/depot.h"
#include "ext/kv/kv.h"
#include "ext/kv/kv_test.h"
#include <sqlite3.h>

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ model --- */

#define T_NKEY     8        /* accounts per bank table / depot branch */
#define T_NKVTAB   12       /* KV tables: 3 bank + extra */
#define T_NBRANCH  12
#define T_NRP      12
#define T_FUND     100      /* initial balance of every account */

enum { KV_MEMORY, KV_BTREE, KV_LOG };
static const char *const azKvType[] = {"kv_memory", "kv_btree", "kv_log"};

typedef struct KvTab KvTab;
struct KvTab {
  char zName[16];
  int eType, bExists;
  int64_t aVal[T_NKEY];
  unsigned mPresent;        /* bit k: key k holds aVal[k] */
  int bVolatile;            /* kv_memory after a clean close: a row may be
                            ** gone (its WAL record retired), but a row that
                            ** is there holds its last acknowledged value */
};
typedef struct DBranch DBranch;
struct DBranch {
  char zName[16];
  int bExists;
  int64_t aBal[T_NKEY];
};
typedef struct Model Model;
struct Model {
  KvTab aTab[T_NKVTAB];
  DBranch aBr[T_NBRANCH];
  DBranch aRp[T_NRP];       /* restore points: a copy of the branch state */
};

/* Messages child -> parent (one write each, < PIPE_BUF: atomic). */
enum {
  M_BEGIN = 1, M_KV_PUT, M_KV_DEL, M_KV_CREATE, M_KV_DROP,
  M_D_SET, M_D_FORK, M_D_RP, M_D_RESTORE,
  M_END, M_ACK, M_FAIL, M_DONE, M_COUNT, M_CLOSE
};
typedef struct Msg Msg;
struct Msg {
  int eType, iTxn, a, b;
  int64_t v;
  char z[16], z2[16];
  char zErr[160];
};

static KvTab *kvFind(Model *m, const char *z, int bAdd){
  int i;
  for(i=0; i<T_NKVTAB; i++){
    if( m->aTab[i].zName[0] && strcmp(m->aTab[i].zName, z)==0 ) return &m->aTab[i];
  }
  for(i=0; bAdd && i<T_NKVTAB; i++){
    if( m->aTab[i].zName[0]==0 ){
      snprintf(m->aTab[i].zName, sizeof(m->aTab[i].zName), "%s", z);
      return &m->aTab[i];
    }
  }
  return 0;
}

static DBranch *dFind(DBranch *a, int n, const char *z, int bAdd){
  int i;
  for(i=0; i<n; i++) if( a[i].zName[0] && strcmp(a[i].zName, z)==0 ) return &a[i];
  for(i=0; bAdd && i<n; i++){
    if( a[i].zName[0]==0 ){
      snprintf(a[i].zName, sizeof(a[i].zName), "%s", z);
      return &a[i];
    }
  }
  return 0;
}

/* Apply one operation message to model m. */
static void modelApply(Model *m, const Msg *p){
  KvTab *t;
  DBranch *b, *s;
  switch( p->eType ){
    case M_KV_CREATE:
      t = kvFind(m, p->z, 1);
      memset(t->aVal, 0, sizeof(t->aVal));
      t->eType = p->a; t->bExists = 1; t->mPresent = 0; t->bVolatile = 0;
      break;
    case M_KV_DROP:
      if( (t = kvFind(m, p->z, 0))!=0 ){ t->bExists = 0; t->mPresent = 0; }
      break;
    case M_KV_PUT:
      t = kvFind(m, p->z, 1);
      t->aVal[p->a] = p->v; t->mPresent |= 1u<<p->a;
      break;
    case M_KV_DEL:
      t = kvFind(m, p->z, 1);
      t->mPresent &= ~(1u<<p->a);
      break;
    case M_D_SET:
      b = dFind(m->aBr, T_NBRANCH, p->z, 1);
      b->bExists = 1; b->aBal[p->a] = p->v;
      break;
    case M_D_FORK:
      s = dFind(m->aBr, T_NBRANCH, p->z, 0);
      b = dFind(m->aBr, T_NBRANCH, p->z2, 1);
      if( s && b ){ memcpy(b->aBal, s->aBal, sizeof(b->aBal)); b->bExists = 1; }
      break;
    case M_D_RP:
      s = dFind(m->aBr, T_NBRANCH, p->z, 0);
      b = dFind(m->aRp, T_NRP, p->z2, 1);
      if( s && b ){ memcpy(b->aBal, s->aBal, sizeof(b->aBal)); b->bExists = 1; }
      break;
    case M_D_RESTORE:
      b = dFind(m->aBr, T_NBRANCH, p->z, 0);
      s = dFind(m->aRp, T_NRP, p->z2, 0);
      if( s && b ) memcpy(b->aBal, s->aBal, sizeof(b->aBal));
      break;
  }
}

/* ------------------------------------------------------------- utils --- */

static uint64_t rngNext(uint64_t *p){
  uint64_t x = (*p += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x>>30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x>>27)) * 0x94d049bb133111ebull;
  return x ^ (x>>31);
}
static int rngInt(uint64_t *p, int n){ return (int)(rngNext(p)%(uint64_t)n); }

static double nowSec(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (double)tv.tv_sec + tv.tv_usec*1e-6;
}

static void rmTree(const char *zPath){
  DIR *d = opendir(zPath);
  struct dirent *e;
  if( d==0 ){ unlink(zPath); return; }
  while( (e = readdir(d))!=0 ){
    char *z;
    if( strcmp(e->d_name, ".")==0 || strcmp(e->d_name, "..")==0 ) continue;
    z = sqlite3_mprintf("%s/%s", zPath, e->d_name);
    if( z ){ rmTree(z); sqlite3_free(z); }
  }
  closedir(d);
  rmdir(zPath);
}

/* Files in zDir whose name ends in zSuffix. */
static int countFiles(const char *zDir, const char *zSuffix){
  DIR *d = opendir(zDir);
  struct dirent *e;
  int n = 0;
  size_t nSuf = strlen(zSuffix);
  if( d==0 ) return -1;
  while( (e = readdir(d))!=0 ){
    size_t nName = strlen(e->d_name);
    if( nName>=nSuf && strcmp(e->d_name+nName-nSuf, zSuffix)==0 ) n++;
  }
  closedir(d);
  return n;
}

/* ----------------------------------------------------------- workload --- */

typedef struct Work Work;
struct Work {
  sqlite3 *db;
  const char *zDir;
  int fd;                   /* pipe to the parent */
  uint64_t rng;
  int iTxn;
  Model m;                  /* the child's own view: its acked state */
  char zBranch[16];         /* depot branch attached as "d", or "" */
  int nExtra, nBranch, nRp;
  int bDepot;               /* depot bank initialised (acked) */
  int bFailed;              /* an operation failed (sweep): stop */
};

static void wSend(Work *w, int eType, const char *z, const char *z2, int a,
                  int64_t v){
  Msg m;
  memset(&m, 0, sizeof(m));
  m.eType = eType; m.iTxn = w->iTxn; m.a = a; m.v = v;
  if( z ) snprintf(m.z, sizeof(m.z), "%s", z);
  if( z2 ) snprintf(m.z2, sizeof(m.z2), "%s", z2);
  if( write(w->fd, &m, sizeof(m))!=(ssize_t)sizeof(m) ) _exit(3);
}

/* Pending operations of the running transaction (applied to w->m at ack). */
static Msg aPend[64];
static int nPend;

static void wOp(Work *w, int eType, const char *z, const char *z2, int a,
                int64_t v){
  wSend(w, eType, z, z2, a, v);
  if( nPend<64 ){
    Msg *p = &aPend[nPend++];
    memset(p, 0, sizeof(*p));
    p->eType = eType; p->a = a; p->v = v;
    if( z ) snprintf(p->z, sizeof(p->z), "%s", z);
    if( z2 ) snprintf(p->z2, sizeof(p->z2), "%s", z2);
  }
}

static void wBegin(Work *w){
  w->iTxn++;
  nPend = 0;
  wSend(w, M_BEGIN, 0, 0, 0, 0);
}

/* Report a failed statement; the sweep stops at the first one. */
static int wFail(Work *w, int rc, const char *zWhat){
  Msg m;
  memset(&m, 0, sizeof(m));
  m.eType = M_FAIL; m.iTxn = w->iTxn; m.a = rc;
  snprintf(m.zErr, sizeof(m.zErr), "%s: %s", zWhat,
           w->db ? sqlite3_errmsg(w->db) : "no connection");
  if( write(w->fd, &m, sizeof(m))!=(ssize_t)sizeof(m) ) _exit(3);
  w->bFailed = 1;
  return rc;
}

/* Run the commit-effecting statement zSql: END before, ACK after. */
static int wCommit(Work *w, const char *zSql){
  int rc, i;
  wSend(w, M_END, 0, 0, 0, 0);
  rc = sqlite3_exec(w->db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ){
    wFail(w, sqlite3_extended_errcode(w->db), zSql);
    sqlite3_exec(w->db, "ROLLBACK", 0, 0, 0);
    return rc;
  }
  for(i=0; i<nPend; i++) modelApply(&w->m, &aPend[i]);
  wSend(w, M_ACK, 0, 0, 0, 0);
  return SQLITE_OK;
}

static int wExec(Work *w, const char *zSql){
  int rc = sqlite3_exec(w->db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ){
    wFail(w, sqlite3_extended_errcode(w->db), zSql);
    sqlite3_exec(w->db, "ROLLBACK", 0, 0, 0);
  }
  return rc;
}

static int wExecf(Work *w, const char *zFmt, ...){
  va_list ap;
  char *z;
  int rc;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  if( z==0 ) return wFail(w, SQLITE_NOMEM, "out of memory");
  rc = wExec(w, z);
  sqlite3_free(z);
  return rc;
}

/* Create (or attach to) KV table zName of type eType as a new acked step. */
static int wKvCreate(Work *w, const char *zName, int eType){
  char *z = sqlite3_mprintf("CREATE VIRTUAL TABLE %s USING %s(dir='%q/kv'%s)",
                            zName, azKvType[eType], w->zDir,
                            eType==KV_MEMORY ? ", persistence=1" : "");
  int rc;
  wBegin(w);
  wOp(w, M_KV_CREATE, zName, 0, eType, 0);
  rc = wCommit(w, z);
  sqlite3_free(z);
  return rc;
}

static const char *const azBank[] = {"bank_mem", "bank_bt", "bank_lg"};

/* Fund every account of the three bank tables in one transaction. */
static int wKvFund(Work *w){
  int i, k, rc = wExec(w, "BEGIN");
  wBegin(w);
  for(i=0; rc==SQLITE_OK && i<3; i++){
    for(k=0; rc==SQLITE_OK && k<T_NKEY; k++){
      wOp(w, M_KV_PUT, azBank[i], 0, k, T_FUND);
      rc = wExecf(w, "INSERT INTO %s VALUES(%d, %d)", azBank[i], k, T_FUND);
    }
  }
  return rc==SQLITE_OK ? wCommit(w, "COMMIT") : rc;
}

/* Write the new balance of account k of table zTab (0: delete it). */
static int wKvSet(Work *w, const char *zTab, int k, int64_t v){
  if( v==0 ){
    wOp(w, M_KV_DEL, zTab, 0, k, 0);
    return wExecf(w, "DELETE FROM %s WHERE key=%d", zTab, k);
  }
  wOp(w, M_KV_PUT, zTab, 0, k, v);
  return wExecf(w, "INSERT OR REPLACE INTO %s VALUES(%d, %lld)", zTab, k,
                (long long)v);
}

/* 1..3 transfers between accounts of the bank tables, one transaction. */
static int wKvTransfer(Work *w){
  int64_t aBal[3][T_NKEY];
  int i, k, nLeg = 1 + rngInt(&w->rng, 3), rc;
  unsigned aDirty[3] = {0, 0, 0};
  for(i=0; i<3; i++){
    KvTab *t = kvFind(&w->m, azBank[i], 0);
    for(k=0; k<T_NKEY; k++) aBal[i][k] = (t->mPresent>>k)&1 ? t->aVal[k] : 0;
  }
  for(i=0; i<nLeg; i++){
    int ta = rngInt(&w->rng, 3), ka = rngInt(&w->rng, T_NKEY);
    int tb = rngInt(&w->rng, 3), kb = rngInt(&w->rng, T_NKEY);
    int64_t amt = aBal[ta][ka];
    if( rngInt(&w->rng, 4) ) amt = amt ? 1 + rngInt(&w->rng, (int)amt) : 0;
    aBal[ta][ka] -= amt; aBal[tb][kb] += amt;
    aDirty[ta] |= 1u<<ka; aDirty[tb] |= 1u<<kb;
  }
  rc = wExec(w, "BEGIN");
  wBegin(w);
  for(i=0; rc==SQLITE_OK && i<3; i++){
    for(k=0; rc==SQLITE_OK && k<T_NKEY; k++){
      if( (aDirty[i]>>k)&1 ) rc = wKvSet(w, azBank[i], k, aBal[i][k]);
    }
  }
  return rc==SQLITE_OK ? wCommit(w, "COMMIT") : rc;
}

/* Drop an extra table, or create one of a random type and fill it. */
static int wKvExtra(Work *w){
  int i, rc;
  char zName[16], zSql[64];
  for(i=3; i<T_NKVTAB; i++){
    KvTab *t = &w->m.aTab[i];
    if( t->zName[0] && t->bExists && rngInt(&w->rng, 2) ){
      snprintf(zName, sizeof(zName), "%s", t->zName);
      snprintf(zSql, sizeof(zSql), "DROP TABLE %s", zName);
      wBegin(w);
      wOp(w, M_KV_DROP, zName, 0, 0, 0);
      return wCommit(w, zSql);
    }
  }
  if( w->nExtra>=T_NKVTAB-3 ) return SQLITE_OK;
  snprintf(zName, sizeof(zName), "x%d", w->nExtra++);
  rc = wKvCreate(w, zName, rngInt(&w->rng, 3));
  if( rc==SQLITE_OK ) rc = wExec(w, "BEGIN");
  if( rc==SQLITE_OK ){
    wBegin(w);
    for(i=0; rc==SQLITE_OK && i<T_NKEY; i++){
      int64_t v = 1000 + rngInt(&w->rng, 100000);
      wOp(w, M_KV_PUT, zName, 0, i, v);
      rc = wExecf(w, "INSERT INTO %s VALUES(%d, %lld)", zName, i, (long long)v);
    }
    if( rc==SQLITE_OK ) rc = wCommit(w, "COMMIT");
  }
  return rc;
}

/* ------------------------------------------------------- depot steps --- */

static char *storePath(const char *zDir){
  return sqlite3_mprintf("%s/store.depot", zDir);
}

/* Attach branch zBranch of the bank database as "d" (if not already). */
static int wAttach(Work *w, const char *zBranch){
  char *zStore;
  int rc;
  if( strcmp(w->zBranch, zBranch)==0 ) return SQLITE_OK;
  if( w->zBranch[0] && (rc = wExec(w, "DETACH d"))!=SQLITE_OK ) return rc;
  w->zBranch[0] = 0;
  zStore = storePath(w->zDir);
  rc = wExecf(w, "ATTACH 'file:%q?vfs=depot&db=bank&branch=%q' AS d",
              zStore, zBranch);
  sqlite3_free(zStore);
  if( rc==SQLITE_OK ) snprintf(w->zBranch, sizeof(w->zBranch), "%s", zBranch);
  return rc;
}

static int wDepotInit(Work *w){
  int k, rc = wAttach(w, "main");
  if( rc==SQLITE_OK ) rc = wExec(w, "BEGIN");
  if( rc==SQLITE_OK ) rc = wExec(w, "CREATE TABLE d.acct(id INTEGER PRIMARY KEY, bal INT)");
  if( rc!=SQLITE_OK ) return rc;
  wBegin(w);
  for(k=0; rc==SQLITE_OK && k<T_NKEY; k++){
    wOp(w, M_D_SET, "main", 0, k, T_FUND);
    rc = wExecf(w, "INSERT INTO d.acct VALUES(%d, %d)", k, T_FUND);
  }
  if( rc==SQLITE_OK ) rc = wCommit(w, "COMMIT");
  if( rc==SQLITE_OK ) w->bDepot = 1;
  return rc;
}

static DBranch *wPickBranch(Work *w){
  int n = 0, i, j;
  for(i=0; i<T_NBRANCH; i++) if( w->m.aBr[i].bExists ) n++;
  j = rngInt(&w->rng, n);
  for(i=0; i<T_NBRANCH; i++) if( w->m.aBr[i].bExists && j--==0 ) return &w->m.aBr[i];
  return &w->m.aBr[0];
}

static int wDepotInit(Work *w);

static int wDepotTransfer(Work *w){
  DBranch *b;
  if( !w->bDepot ) return wDepotInit(w);
  b = wPickBranch(w);
  int ka = rngInt(&w->rng, T_NKEY), kb = rngInt(&w->rng, T_NKEY), rc;
  int64_t amt = b->aBal[ka] ? 1 + rngInt(&w->rng, (int)b->aBal[ka]) : 0;
  char zName[16];
  snprintf(zName, sizeof(zName), "%s", b->zName);
  rc = wAttach(w, zName);
  if( rc==SQLITE_OK ) rc = wExec(w, "BEGIN");
  if( rc!=SQLITE_OK ) return rc;
  wBegin(w);
  wOp(w, M_D_SET, zName, 0, ka, b->aBal[ka]-amt);
  rc = wExecf(w, "UPDATE d.acct SET bal=%lld WHERE id=%d",
              (long long)(b->aBal[ka]-amt), ka);
  if( rc==SQLITE_OK ){
    int64_t vb = (ka==kb ? b->aBal[ka]-amt : b->aBal[kb]) + amt;
    wOp(w, M_D_SET, zName, 0, kb, vb);
    rc = wExecf(w, "UPDATE d.acct SET bal=%lld WHERE id=%d", (long long)vb, kb);
  }
  return rc==SQLITE_OK ? wCommit(w, "COMMIT") : rc;
}

/* A fork, a restore point or a restore: one store transaction each. */
static int wDepotAdmin(Work *w){
  DBranch *b;
  char *zStore, *zSql = 0;
  char zName[16], zNew[16];
  int e, rc;
  if( !w->bDepot ) return wDepotInit(w);
  b = wPickBranch(w);
  zStore = storePath(w->zDir);
  e = rngInt(&w->rng, 3);
  snprintf(zName, sizeof(zName), "%s", b->zName);
  if( e==2 && w->nRp==0 ) e = 1;
  if( e==0 && w->nBranch>=T_NBRANCH-1 ) e = 1;
  if( e==1 && w->nRp>=T_NRP ) e = w->nBranch<T_NBRANCH-1 ? 0 : 2;
  wBegin(w);
  if( e==0 ){
    snprintf(zNew, sizeof(zNew), "b%d", ++w->nBranch);
    wOp(w, M_D_FORK, zName, zNew, 0, 0);
    zSql = sqlite3_mprintf("SELECT depot_fork('%q','bank','%q','%q')",
                           zStore, zName, zNew);
  }else if( e==1 ){
    snprintf(zNew, sizeof(zNew), "rp%d", ++w->nRp);
    wOp(w, M_D_RP, zName, zNew, 0, 0);
    zSql = sqlite3_mprintf("SELECT depot_restore_point('%q','bank','%q','%q')",
                           zStore, zName, zNew);
  }else{
    snprintf(zNew, sizeof(zNew), "rp%d", 1 + rngInt(&w->rng, w->nRp));
    wOp(w, M_D_RESTORE, zName, zNew, 0, 0);
    zSql = sqlite3_mprintf("SELECT depot_restore('%q','bank','%q','%q')",
                           zStore, zName, zNew);
    /* the connection on the old branch must reopen to write */
    if( strcmp(w->zBranch, zName)==0 ){
      rc = wExec(w, "DETACH d");
      w->zBranch[0] = 0;
      if( rc!=SQLITE_OK ) goto done;
    }
  }
  rc = zSql ? wCommit(w, zSql) : SQLITE_NOMEM;
done:
  sqlite3_free(zSql);
  sqlite3_free(zStore);
  return rc;
}

/* Compaction or reclaim of the depot store: changes no state a reader
** sees, so it sends no M_* message; a crash inside it must leave every
** branch reading its acknowledged state and depot_verify clean. */
static int wDepotCompact(Work *w){
  char *zStore;
  int rc;
  if( !w->bDepot ) return wDepotInit(w);
  zStore = storePath(w->zDir);
  rc = wExecf(w, rngInt(&w->rng, 2) ? "SELECT depot_compact('%q')"
              : "SELECT depot_gc('%q')", zStore);
  sqlite3_free(zStore);
  return rc;
}

/* --------------------------------------------------------- the child --- */

static int wOpen(Work *w){
  int i, rc = sqlite3_open_v2(":memory:", &w->db,
                   SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0);
  if( rc!=SQLITE_OK ) return wFail(w, rc, "open");
  sqlite3_extended_result_codes(w->db, 1);
  sqlite3_busy_timeout(w->db, 10000);
  for(i=0; i<3 && rc==SQLITE_OK; i++) rc = wKvCreate(w, azBank[i], i);
  return rc;
}

/* The workload's steps and their weights.  A new kind of step (depot
** compaction, GC, ...) is one entry: a function that runs one operation
** through wBegin/wOp/wCommit, sending an M_* message for each change of
** logical state it makes (none for an operation that must change nothing
** a reader sees), so that the verifier's model follows it. */
typedef struct TortureStep TortureStep;
struct TortureStep {
  const char *zName;
  int nWeight;
  int (*xStep)(Work*);
};
static const TortureStep aStep[] = {
  { "kv_transfer",    40, wKvTransfer },     /* 1..3 legs over the 3 backends */
  { "kv_table",       10, wKvExtra },        /* create+fill or drop a table */
  { "depot_transfer", 38, wDepotTransfer },  /* on a random live branch */
  { "depot_branch",   12, wDepotAdmin },     /* fork, restore point, restore */
  { "depot_compact",   6, wDepotCompact },   /* depot_compact or depot_gc */
};

/* One step of the workload, chosen by the seed. */
static int wStep(Work *w){
  int i, nTotal = 0, r;
  for(i=0; i<(int)(sizeof(aStep)/sizeof(aStep[0])); i++) nTotal += aStep[i].nWeight;
  r = rngInt(&w->rng, nTotal);
  for(i=0; r>=aStep[i].nWeight; i++) r -= aStep[i].nWeight;
  return aStep[i].xStep(w);
}

static void childRun(const char *zDir, int fd, uint64_t seed, int nStep,
                     const TioConfig *pCfg){
  Work w;
  int i, rc;
  memset(&w, 0, sizeof(w));
  w.zDir = zDir; w.fd = fd; w.rng = seed;
  kv_log_test_file_size(256);
  tio_setup(pCfg);
  rc = wOpen(&w);
  if( rc==SQLITE_OK ) rc = wKvFund(&w);
  for(i=0; rc==SQLITE_OK && i<nStep; i++) rc = wStep(&w);
  wSend(&w, M_CLOSE, 0, 0, 0, 0);   /* from here kv_memory rows may go */
  sqlite3_close_v2(w.db);
  for(i=0; i<TIO_NCLASS; i++) wSend(&w, M_COUNT, 0, 0, i, (int64_t)tio_count(i));
  wSend(&w, M_COUNT, 0, 0, TIO_NCLASS, (int64_t)tio_count_ws());
  wSend(&w, M_COUNT, 0, 0, TIO_NCLASS+1, tio_fault_fired());
  wSend(&w, M_DONE, 0, 0, 0, 0);
  _exit(0);
}

/* --------------------------------------------------------- verifying --- */

typedef struct Check Check;
struct Check {
  sqlite3 *db;
  char zErr[512];
};

static int ckFail(Check *c, const char *zFmt, ...){
  va_list ap;
  if( c->zErr[0]==0 ){
    va_start(ap, zFmt);
    vsnprintf(c->zErr, sizeof(c->zErr), zFmt, ap);
    va_end(ap);
  }
  return 1;
}

/* Compare the KV store with model m; 0 if equal, else a message. */
static int ckKv(Check *c, const char *zDir, const Model *m, char *zWhy, int nWhy){
  sqlite3_stmt *pStmt = 0;
  int i, nTab = 0, nSeen = 0;
  char *zSql;
  (void)zDir;
  for(i=0; i<T_NKVTAB; i++){
    const KvTab *t = &m->aTab[i];
    unsigned mSeen = 0;
    int rc;
    if( !t->bExists ) continue;
    nTab++;
    zSql = sqlite3_mprintf("SELECT key, value FROM %s", t->zName);
    rc = sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0);
    sqlite3_free(zSql);
    if( rc!=SQLITE_OK ){
      snprintf(zWhy, nWhy, "table %s missing: %s", t->zName, sqlite3_errmsg(c->db));
      return 1;
    }
    while( sqlite3_step(pStmt)==SQLITE_ROW ){
      int k = sqlite3_column_int(pStmt, 0);
      int64_t v = sqlite3_column_int64(pStmt, 1);
      if( k<0 || k>=T_NKEY || !((t->mPresent>>k)&1) || t->aVal[k]!=v ){
        snprintf(zWhy, nWhy, "table %s key %d holds %lld, expected %s%lld",
                 t->zName, k, (long long)v,
                 k>=0 && k<T_NKEY && ((t->mPresent>>k)&1) ? "" : "no row, not ",
                 k>=0 && k<T_NKEY ? (long long)t->aVal[k] : 0LL);
        sqlite3_finalize(pStmt);
        return 1;
      }
      mSeen |= 1u<<k;
    }
    if( sqlite3_finalize(pStmt)!=SQLITE_OK ){
      snprintf(zWhy, nWhy, "reading %s: %s", t->zName, sqlite3_errmsg(c->db));
      return 1;
    }
    if( t->bVolatile ? (mSeen & ~t->mPresent)!=0 : mSeen!=t->mPresent ){
      snprintf(zWhy, nWhy, "table %s has keys 0x%x, expected 0x%x", t->zName,
               mSeen, t->mPresent);
      return 1;
    }
  }
  if( sqlite3_prepare_v2(c->db, "SELECT name FROM kv_tables WHERE dir IS NOT NULL",
                         -1, &pStmt, 0)==SQLITE_OK ){
    while( sqlite3_step(pStmt)==SQLITE_ROW ){
      const char *z = (const char*)sqlite3_column_text(pStmt, 0);
      const KvTab *t = z ? kvFind((Model*)m, z, 0) : 0;
      if( t==0 || !t->bExists ){
        snprintf(zWhy, nWhy, "table %s exists, the model has no such table", z);
        sqlite3_finalize(pStmt);
        return 1;
      }
      nSeen++;
    }
    sqlite3_finalize(pStmt);
  }
  if( nSeen!=nTab ){
    snprintf(zWhy, nWhy, "%d tables, expected %d", nSeen, nTab);
    return 1;
  }
  return 0;
}

/* Attach every KV table the store holds (whatever the models say). */
static int ckKvOpen(Check *c, const char *zDir, const Model *a, const Model *b){
  int i, j, rc;
  sqlite3_int64 h = 0;
  sqlite3_stmt *pStmt = 0;
  char *zSql = sqlite3_mprintf("SELECT kv_begin('%q/kv')", zDir);
  rc = sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0);
  sqlite3_free(zSql);
  if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    h = sqlite3_column_int64(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  if( h==0 ){
    return ckFail(c, "kv: cannot open the store: %s", sqlite3_errmsg(c->db));
  }
  for(j=0; j<2; j++){
    const Model *m = j ? b : a;
    for(i=0; i<T_NKVTAB; i++){
      const KvTab *t = &m->aTab[i];
      int bHave = 0;
      if( t->zName[0]==0 ) continue;
      zSql = sqlite3_mprintf("SELECT kv_table_meta(%lld, '%q')", h, t->zName);
      rc = sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0);
      sqlite3_free(zSql);
      if( rc==SQLITE_OK && (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
        bHave = sqlite3_column_type(pStmt, 0)!=SQLITE_NULL;
        rc = SQLITE_OK;
      }
      sqlite3_finalize(pStmt);
      if( rc!=SQLITE_OK ){
        return ckFail(c, "kv: cannot open the store: %s", sqlite3_errmsg(c->db));
      }
      if( bHave ){
        zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE IF NOT EXISTS %s USING %s(dir='%q/kv'%s)",
                               t->zName, azKvType[t->eType], zDir,
                               t->eType==KV_MEMORY ? ", persistence=1" : "");
        rc = sqlite3_exec(c->db, zSql, 0, 0, 0);
        sqlite3_free(zSql);
        if( rc!=SQLITE_OK ){
          return ckFail(c, "kv: cannot attach table %s: %s", t->zName,
                        sqlite3_errmsg(c->db));
        }
      }
    }
  }
  return 0;
}

/* Live branches of the bank database and their balances, compared with
** model m; 0 if equal. */
static int ckDepot(Check *c, const char *zDir, const Model *m, char *zWhy,
                   int nWhy){
  char *zStore = storePath(zDir), *zSql;
  sqlite3_stmt *pStmt = 0;
  int i, nLive = 0, nModel = 0, rc = 0;
  for(i=0; i<T_NBRANCH; i++) if( m->aBr[i].bExists ) nModel++;
  zSql = sqlite3_mprintf("SELECT branch FROM depot_branches('%q','bank')"
                         " WHERE state='live'", zStore);
  if( access(zStore, F_OK)==0
   && sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0)==SQLITE_OK ){
    while( rc==0 && sqlite3_step(pStmt)==SQLITE_ROW ){
      const char *z = (const char*)sqlite3_column_text(pStmt, 0);
      const DBranch *b = z ? dFind((DBranch*)m->aBr, T_NBRANCH, z, 0) : 0;
      nLive++;
      if( b==0 || !b->bExists ){
        snprintf(zWhy, nWhy, "depot branch %s exists, not in the model", z);
        rc = 1;
      }
    }
    sqlite3_finalize(pStmt);
  }
  sqlite3_free(zSql);
  if( rc==0 && nLive!=nModel ){
    snprintf(zWhy, nWhy, "%d live depot branches, expected %d", nLive, nModel);
    rc = 1;
  }
  for(i=0; rc==0 && i<T_NBRANCH; i++){
    const DBranch *b = &m->aBr[i];
    int k;
    if( !b->bExists ) continue;
    for(k=0; rc==0 && k<T_NKEY; k++){
      zSql = sqlite3_mprintf("SELECT bal FROM b_%s.acct WHERE id=%d", b->zName, k);
      if( sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0)!=SQLITE_OK
       || sqlite3_step(pStmt)!=SQLITE_ROW ){
        snprintf(zWhy, nWhy, "depot branch %s account %d: %s", b->zName, k,
                 sqlite3_errmsg(c->db));
        rc = 1;
      }else if( sqlite3_column_int64(pStmt, 0)!=b->aBal[k] ){
        snprintf(zWhy, nWhy, "depot branch %s account %d holds %lld, expected"
                 " %lld", b->zName, k, (long long)sqlite3_column_int64(pStmt, 0),
                 (long long)b->aBal[k]);
        rc = 1;
      }
      sqlite3_finalize(pStmt);
      sqlite3_free(zSql);
    }
  }
  sqlite3_free(zStore);
  return rc;
}

/* Attach every live branch as b_<name> and run integrity_check on it. */
static int ckDepotOpen(Check *c, const char *zDir){
  char *zStore = storePath(zDir), *zSql;
  sqlite3_stmt *pStmt = 0;
  char azName[T_NBRANCH*2][16];
  int i, n = 0, rc = 0;
  if( access(zStore, F_OK)!=0 ){ sqlite3_free(zStore); return 0; }
  zSql = sqlite3_mprintf("SELECT branch FROM depot_branches('%q','bank')"
                         " WHERE state='live'", zStore);
  if( sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0)!=SQLITE_OK ){
    rc = ckFail(c, "depot: cannot list branches: %s", sqlite3_errmsg(c->db));
  }
  while( rc==0 && n<T_NBRANCH*2 && sqlite3_step(pStmt)==SQLITE_ROW ){
    snprintf(azName[n++], 16, "%s", (const char*)sqlite3_column_text(pStmt, 0));
  }
  if( rc==0 && sqlite3_finalize(pStmt)!=SQLITE_OK ){
    rc = ckFail(c, "depot: cannot list branches: %s", sqlite3_errmsg(c->db));
  }
  pStmt = 0;
  sqlite3_free(zSql);
  for(i=0; rc==0 && i<n; i++){
    char *zRes;
    zSql = sqlite3_mprintf("ATTACH 'file:%q?vfs=depot&db=bank&branch=%q' AS b_%s",
                           zStore, azName[i], azName[i]);
    if( sqlite3_exec(c->db, zSql, 0, 0, 0)!=SQLITE_OK ){
      rc = ckFail(c, "depot: cannot open branch %s: %s", azName[i],
                  sqlite3_errmsg(c->db));
    }
    sqlite3_free(zSql);
    if( rc ) break;
    zSql = sqlite3_mprintf("PRAGMA b_%s.integrity_check", azName[i]);
    if( sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0)!=SQLITE_OK
     || sqlite3_step(pStmt)!=SQLITE_ROW ){
      rc = ckFail(c, "depot: integrity_check of %s failed: %s", azName[i],
                  sqlite3_errmsg(c->db));
    }else{
      zRes = (char*)sqlite3_column_text(pStmt, 0);
      if( zRes==0 || strcmp(zRes, "ok")!=0 ){
        rc = ckFail(c, "depot: integrity_check of branch %s: %s", azName[i],
                    zRes ? zRes : "NULL");
      }
    }
    sqlite3_finalize(pStmt);
    sqlite3_free(zSql);
  }
  sqlite3_free(zStore);
  return rc;
}

/* Wait (up to 20 s) until the store has no unconfirmed WAL record. */
static int ckWalConfirmed(Check *c){
  double tEnd = nowSec() + 20;
  sqlite3_int64 n = -1;
  while( 1 ){
    sqlite3_stmt *pStmt = 0;
    n = -1;
    if( sqlite3_prepare_v2(c->db, "SELECT wal_unconfirmed FROM kv_stats"
                           " WHERE type='store' AND store IS NOT NULL",
                           -1, &pStmt, 0)==SQLITE_OK
     && sqlite3_step(pStmt)==SQLITE_ROW ){
      n = sqlite3_column_int64(pStmt, 0);
    }
    sqlite3_finalize(pStmt);
    if( n==0 ) return 0;
    if( nowSec()>tEnd ) break;
    usleep(2000);
  }
  return ckFail(c, "kv: %lld WAL records still unconfirmed after 20 s",
                (long long)n);
}

/* The state checks after a crash.  Each compares what it reads with the
** acknowledged model a and with b (a plus the transaction in flight, if
** any): the state must equal one of them.  Returns 0 or sets c->zErr. */
static int ckKvState(Check *c, const char *zDir, const Model *a, const Model *b){
  char zWhyA[256] = "", zWhyB[256] = "";
  if( ckKvOpen(c, zDir, a, b) ) return 1;
  if( ckKv(c, zDir, a, zWhyA, sizeof(zWhyA))
   && ckKv(c, zDir, b, zWhyB, sizeof(zWhyB)) ){
    return ckFail(c, "kv state is neither the acknowledged one (%s) nor that"
                  " plus the transaction in flight (%s)", zWhyA, zWhyB);
  }
  return 0;
}

static int ckDepotState(Check *c, const char *zDir, const Model *a,
                        const Model *b){
  char zWhyA[256] = "", zWhyB[256] = "";
  if( ckDepotOpen(c, zDir) ) return 1;
  if( ckDepot(c, zDir, a, zWhyA, sizeof(zWhyA))
   && ckDepot(c, zDir, b, zWhyB, sizeof(zWhyB)) ){
    return ckFail(c, "depot state is neither the acknowledged one (%s) nor"
                  " that plus the transaction in flight (%s)", zWhyA, zWhyB);
  }
  return 0;
}

/* depot_verify finds nothing in the store (every blob, shard, page-index
** row, head checksum, pin and counter). */
static int ckDepotVerify(Check *c, const char *zDir, const Model *a,
                         const Model *b){
  char *zStore = storePath(zDir), *zSql;
  sqlite3_stmt *pStmt = 0;
  int rc = 0, e;
  (void)a; (void)b;
  if( access(zStore, F_OK)!=0 ){ sqlite3_free(zStore); return 0; }
  zSql = sqlite3_mprintf("SELECT kind, message FROM depot_verify('%q')",
                         zStore);
  if( sqlite3_prepare_v2(c->db, zSql, -1, &pStmt, 0)!=SQLITE_OK ){
    rc = ckFail(c, "depot_verify: %s", sqlite3_errmsg(c->db));
  }else if( (e = sqlite3_step(pStmt))==SQLITE_ROW ){
    rc = ckFail(c, "depot_verify: %s: %s", sqlite3_column_text(pStmt, 0),
                sqlite3_column_text(pStmt, 1));
  }else if( e!=SQLITE_DONE ){
    rc = ckFail(c, "depot_verify: %s", sqlite3_errmsg(c->db));
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(zSql);
  sqlite3_free(zStore);
  return rc;
}

/* Every WAL record gets confirmed, and once the store is closed one
** segment is left.  Closes the connection: it runs last. */
static int ckWalRetires(Check *c, const char *zDir, const Model *a,
                        const Model *b){
  char *zWal;
  int nSeg, rc;
  (void)a; (void)b;
  rc = ckWalConfirmed(c);
  sqlite3_close_v2(c->db);
  c->db = 0;
  zWal = sqlite3_mprintf("%s/kv/wal", zDir);
  nSeg = countFiles(zWal, ".log");
  sqlite3_free(zWal);
  if( rc==0 && nSeg!=1 ){
    return ckFail(c, "kv: %d WAL segments left after every record was"
                  " confirmed and the store closed, expected 1", nSeg);
  }
  return rc;
}

/* The post-crash checks, in order.  A new check (depot_verify of every
** database, ...) is one entry before the last, which closes the
** connection. */
typedef struct TortureCheck TortureCheck;
struct TortureCheck {
  const char *zName;
  int (*xCheck)(Check*, const char *zDir, const Model *a, const Model *b);
};
static const TortureCheck aCheck[] = {
  { "kv state",    ckKvState },     /* acked model or model + in flight */
  { "depot state", ckDepotState },  /* the same per branch; integrity_check */
  { "depot verify", ckDepotVerify }, /* depot_verify returns no row */
  { "wal retires", ckWalRetires },  /* last: closes the connection */
};

/* The verifier (a child process): reopen, run every check.  Exits 0 when
** everything holds, else 1 after writing the message to fdOut. */
static void verifyRun(const char *zDir, const Model *a, const Model *b,
                      int fdOut){
  Check c;
  TioConfig cfg;
  int i;
  memset(&c, 0, sizeof(c));
  memset(&cfg, 0, sizeof(cfg));
  tio_setup(&cfg);
  if( sqlite3_open_v2(":memory:", &c.db, SQLITE_OPEN_READWRITE
                      |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0)!=SQLITE_OK ){
    ckFail(&c, "cannot open a connection");
  }else{
    sqlite3_busy_timeout(c.db, 10000);
  }
  for(i=0; c.zErr[0]==0 && i<(int)(sizeof(aCheck)/sizeof(aCheck[0])); i++){
    aCheck[i].xCheck(&c, zDir, a, b);
  }
  sqlite3_close_v2(c.db);
  if( c.zErr[0] ){
    if( write(fdOut, c.zErr, strlen(c.zErr))<0 ) _exit(2);
    _exit(1);
  }
  _exit(0);
}

/* ------------------------------------------------------------ rounds --- */

enum { MODE_COUNT, MODE_POWER, MODE_KILL, MODE_FAULT, MODE_LIE };
static const char *const azMode[] = {"count", "power", "kill", "fault", "lie"};

typedef struct Round Round;
struct Round {
  int eMode;
  uint64_t seed;            /* the workload and what a crash keeps */
  int nStep;                /* workload steps after the set-up */
  uint64_t iPoint;          /* power: crash point; kill: ack to kill after */
  int eClass, eKind;        /* fault: class, kind; iPoint: the nth call */
};

typedef struct Outcome Outcome;
struct Outcome {
  int bCrashed;             /* died at the crash point / by the kill */
  int nAck;                 /* acknowledged transactions */
  int bFail; int rcFail;    /* an operation failed (its code) */
  char zErr[160];
  uint64_t aCount[TIO_NCLASS+2];  /* per class, writes+syncs, fault fired */
  char zFinding[700];       /* non-empty: the round failed */
};

static const char *zArgv0 = "tests/torture/torture";

static void replayLine(const Round *r, char *z, int n){
  if( r->eMode==MODE_FAULT ){
    snprintf(z, n, "%s --steps %d --fault %llu %s %llu %s", zArgv0, r->nStep,
             (unsigned long long)r->seed, tio_class_name(r->eClass),
             (unsigned long long)r->iPoint, tio_kind_name(r->eKind));
  }else{
    snprintf(z, n, "%s --steps %d --round %llu %s %llu", zArgv0, r->nStep,
             (unsigned long long)r->seed, azMode[r->eMode],
             (unsigned long long)r->iPoint);
  }
}

/* Read the child's messages into the acked model *a and the in-flight
** transaction; in kill mode, kill it after the iPoint-th ack. */
static void roundRead(int fd, pid_t pid, const Round *r, Model *a, Model *b,
                      Outcome *o){
  Msg m, aOps[64];
  int nOps = 0, bEnd = 0, i;
  uint64_t rng = r->seed ^ 0x5bd1e995u;
  int bTrace = getenv("TORTURE_TRACE")!=0;
  while( read(fd, &m, sizeof(m))==(ssize_t)sizeof(m) ){
    if( bTrace ){
      printf("  txn %d: msg %d %s %s a=%d v=%lld %s\n", m.iTxn, m.eType, m.z,
             m.z2, m.a, (long long)m.v, m.zErr);
    }
    switch( m.eType ){
      case M_BEGIN: nOps = 0; bEnd = 0; break;
      case M_END:   bEnd = 1; break;
      case M_ACK:
        for(i=0; i<nOps; i++) modelApply(a, &aOps[i]);
        nOps = 0; bEnd = 0; o->nAck++;
        if( r->eMode==MODE_KILL && (uint64_t)o->nAck==r->iPoint ){
          usleep((useconds_t)rngInt(&rng, 3000));
          kill(pid, SIGKILL);
        }
        break;
      case M_FAIL:
        if( !o->bFail ){
          o->bFail = 1; o->rcFail = m.a;
          memcpy(o->zErr, m.zErr, sizeof(o->zErr));
        }
        break;
      case M_COUNT:
        if( m.a>=0 && m.a<TIO_NCLASS+2 ) o->aCount[m.a] = (uint64_t)m.v;
        break;
      case M_DONE:
      case M_CLOSE:                 /* a clean close lets kv_memory rows go */
        for(i=0; i<T_NKVTAB; i++){
          if( a->aTab[i].eType==KV_MEMORY ) a->aTab[i].bVolatile = 1;
        }
        break;
      default:
        if( nOps<64 ) aOps[nOps++] = m;
        break;
    }
  }
  *b = *a;
  for(i=0; bEnd && i<nOps; i++) modelApply(b, &aOps[i]);
}

/* Fork the verifier and collect its verdict into o->zFinding. */
static void roundVerify(const char *zDir, const Model *a, const Model *b,
                        Outcome *o){
  int aFd[2], st = 0;
  pid_t pid;
  ssize_t n;
  if( pipe(aFd) ){ snprintf(o->zFinding, sizeof(o->zFinding), "pipe failed"); return; }
  pid = fork();
  if( pid==0 ){
    close(aFd[0]);
    alarm(300);
    verifyRun(zDir, a, b, aFd[1]);
  }
  close(aFd[1]);
  n = read(aFd[0], o->zFinding, sizeof(o->zFinding)-1);
  o->zFinding[n>0 ? n : 0] = 0;
  close(aFd[0]);
  waitpid(pid, &st, 0);
  if( o->zFinding[0]==0 && !(WIFEXITED(st) && WEXITSTATUS(st)==0) ){
    snprintf(o->zFinding, sizeof(o->zFinding), "the verifier died (status"
             " 0x%x) reopening the stores", st);
  }
}

/* Judge how the workload child ended. */
static void roundJudge(const Round *r, int st, Outcome *o){
  int bExit0 = WIFEXITED(st) && WEXITSTATUS(st)==0;
  if( (r->eMode==MODE_POWER || r->eMode==MODE_LIE)
   && WIFEXITED(st) && WEXITSTATUS(st)==TIO_EXIT_CRASH ){
    o->bCrashed = 1;
  }else if( r->eMode==MODE_KILL && WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL ){
    o->bCrashed = 1;
  }else if( !bExit0 ){
    snprintf(o->zFinding, sizeof(o->zFinding), "the workload died: %s %d",
             WIFSIGNALED(st) ? "signal" : "exit status",
             WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  }
  if( o->zFinding[0]==0 && o->bFail && r->eMode!=MODE_FAULT ){
    snprintf(o->zFinding, sizeof(o->zFinding), "an operation failed without"
             " an injected fault: rc=%d %s", o->rcFail, o->zErr);
  }
  if( o->zFinding[0]==0 && o->bFail && r->eMode==MODE_FAULT ){
    int e = o->rcFail & 0xff;
    if( (e!=SQLITE_IOERR && e!=SQLITE_FULL && e!=SQLITE_CANTOPEN)
     || strlen(o->zErr)<3 ){
      snprintf(o->zFinding, sizeof(o->zFinding), "the injected fault gave"
               " rc=%d (%s), expected SQLITE_IOERR_*, SQLITE_FULL or"
               " SQLITE_CANTOPEN with a message", o->rcFail, o->zErr);
    }
  }
}

/* Run one round in zDir (emptied first). */
static void roundRun(const char *zDir, const Round *r, Outcome *o){
  Model a, b;
  TioConfig cfg;
  int aFd[2], st = 0;
  pid_t pid;
  memset(o, 0, sizeof(*o));
  memset(&a, 0, sizeof(a));
  memset(&cfg, 0, sizeof(cfg));
  rmTree(zDir);
  if( mkdir(zDir, 0755) || pipe(aFd) ){
    snprintf(o->zFinding, sizeof(o->zFinding), "cannot set up %s", zDir);
    return;
  }
  cfg.iSeed = r->seed;
  if( r->eMode==MODE_POWER || r->eMode==MODE_LIE ) cfg.iCrashAt = r->iPoint;
  cfg.bLieSync = r->eMode==MODE_LIE;
  if( r->eMode==MODE_FAULT ){
    cfg.eFaultClass = r->eClass; cfg.nFault = r->iPoint; cfg.eFaultKind = r->eKind;
  }
  pid = fork();
  if( pid==0 ){
    close(aFd[0]);
    alarm(300);
    childRun(zDir, aFd[1], r->seed, r->nStep, &cfg);
  }
  close(aFd[1]);
  roundRead(aFd[0], pid, r, &a, &b, o);
  close(aFd[0]);
  waitpid(pid, &st, 0);
  roundJudge(r, st, o);
  if( o->zFinding[0]==0 ) roundVerify(zDir, &a, &b, o);
}

/* ------------------------------------------------------------- main --- */

typedef struct Totals Totals;
struct Totals {
  int nRound, nPower, nPowerHit, nKill, nKillHit, nFinding;
  int64_t nAck;
  int nSite[TIO_NCLASS];
  int nFault[4], nFaultFired, nFaultSurfaced;
};

static int report(const Round *r, const Outcome *o, Totals *t){
  char zReplay[256];
  t->nAck += o->nAck;
  if( o->zFinding[0]==0 ) return 0;
  t->nFinding++;
  replayLine(r, zReplay, sizeof(zReplay));
  printf("torture: FAILED: %s round, seed %llu, %s %llu%s%s: %s\n"
         "  replay: %s\n", azMode[r->eMode], (unsigned long long)r->seed,
         r->eMode==MODE_KILL ? "kill after ack" : "call",
         (unsigned long long)r->iPoint,
         r->eMode==MODE_FAULT ? " " : "",
         r->eMode==MODE_FAULT ? tio_class_name(r->eClass) : "",
         o->zFinding, zReplay);
  fflush(stdout);
  return 1;
}

static uint64_t mix(uint64_t a, uint64_t b){
  uint64_t x = a*0x9e3779b97f4a7c15ull + b;
  return rngNext(&x);
}

/* nPoint crash rounds: three of four lose power at a write/sync call
** chosen in the range the workload reaches, one in four is SIGKILLed. */
static void runCrash(const char *zDir, uint64_t seed, int nPoint, int nStep,
                     Totals *t){
  Round r;
  Outcome o;
  uint64_t nWS;
  int i;
  memset(&r, 0, sizeof(r));
  r.eMode = MODE_COUNT; r.seed = seed; r.nStep = nStep;
  roundRun(zDir, &r, &o);
  report(&r, &o, t);
  nWS = o.aCount[TIO_NCLASS] ? o.aCount[TIO_NCLASS] : 1;
  for(i=0; i<nPoint; i++){
    uint64_t rng = mix(seed, (uint64_t)i);
    r.seed = rngNext(&rng);
    r.eMode = (i%4==3) ? MODE_KILL : MODE_POWER;
    r.iPoint = 1 + rngNext(&rng) % (r.eMode==MODE_KILL ? (uint64_t)nStep+4 : nWS);
    roundRun(zDir, &r, &o);
    t->nRound++;
    if( r.eMode==MODE_POWER ){ t->nPower++; t->nPowerHit += o.bCrashed; }
    else{ t->nKill++; t->nKillHit += o.bCrashed; }
    report(&r, &o, t);
    if( (i+1)%1000==0 ){
      printf("torture: %d of %d crash rounds, %d findings\n", i+1, nPoint,
             t->nFinding);
    }
  }
}

/* The I/O-error sweep: count each class's calls in one run of an nStep
** workload, then fail the nth call of each class (every nStride-th n) once
** with each kind that applies. */
static void runSweep(const char *zDir, uint64_t seed, int nStep, int nStride,
                     Totals *t){
  Round r;
  Outcome o;
  uint64_t aCount[TIO_NCLASS];
  int c, k;
  uint64_t n;
  memset(&r, 0, sizeof(r));
  r.eMode = MODE_COUNT; r.seed = seed; r.nStep = nStep;
  roundRun(zDir, &r, &o);
  report(&r, &o, t);
  memcpy(aCount, o.aCount, sizeof(aCount));
  r.eMode = MODE_FAULT;
  for(c=0; c<TIO_NCLASS; c++){
    t->nSite[c] = (int)aCount[c];
    for(n=1; n<=aCount[c]; n+=(uint64_t)nStride){
      for(k=TIO_EIO; k<=(c==TIO_WRITE ? TIO_SHORT : TIO_ENOSPC); k++){
        r.eClass = c; r.eKind = k; r.iPoint = n;
        roundRun(zDir, &r, &o);
        t->nRound++;
        t->nFault[k]++;
        t->nFaultFired += o.aCount[TIO_NCLASS+1]!=0;
        t->nFaultSurfaced += o.bFail;
        report(&r, &o, t);
      }
    }
  }
}

/* Proof that the checks can fail: rounds on a disk whose syncs make
** nothing durable, crashed in the second half of the workload, must be
** caught.  Returns 1 (and prints) if none of nRound is. */
static int runSelfCheck(const char *zDir, uint64_t seed, int nStep, int nRound){
  Round r;
  Outcome o;
  int i, nCaught = 0, nCrashed = 0;
  memset(&r, 0, sizeof(r));
  r.eMode = MODE_COUNT; r.seed = seed; r.nStep = nStep;
  roundRun(zDir, &r, &o);
  for(i=0; i<nRound; i++){
    uint64_t rng = mix(seed ^ 0x11fe, (uint64_t)i), nWS = o.aCount[TIO_NCLASS];
    Round rl = r;
    Outcome ol;
    rl.eMode = MODE_LIE;
    rl.seed = seed;
    rl.iPoint = nWS/2 + 1 + rngNext(&rng) % (nWS/2 + 1);
    roundRun(zDir, &rl, &ol);
    nCrashed += ol.bCrashed;
    nCaught += ol.zFinding[0]!=0;
  }
  printf("torture: self-check: a disk that loses synced writes was caught in"
         " %d of %d rounds (%d crashed)\n", nCaught, nRound, nCrashed);
  if( nCaught==0 ){
    printf("torture: FAILED: the self-check caught nothing\n");
    return 1;
  }
  return 0;
}

static int classByName(const char *z){
  int i;
  for(i=0; i<TIO_NCLASS; i++) if( strcmp(z, tio_class_name(i))==0 ) return i;
  return -1;
}
static int kindByName(const char *z){
  int i;
  for(i=TIO_EIO; i<=TIO_SHORT; i++) if( strcmp(z, tio_kind_name(i))==0 ) return i;
  return 0;
}

static void printTotals(const Totals *t, uint64_t seed, double secs, int bSweep){
  printf("torture: seed %llu: %d rounds in %.0f s, %d findings\n",
         (unsigned long long)seed, t->nRound, secs, t->nFinding);
  printf("  power-loss crash points: %d (%d reached mid-workload, %d after"
         " the workload finished)\n", t->nPower, t->nPowerHit,
         t->nPower-t->nPowerHit);
  printf("  SIGKILL rounds: %d (%d killed mid-workload)\n", t->nKill, t->nKillHit);
  printf("  acknowledged commits checked after reopening: %lld\n", (long long)t->nAck);
  if( bSweep ){
    printf("  I/O-error sweep call sites: %d write, %d sync, %d read, %d open,"
           " %d truncate\n", t->nSite[TIO_WRITE], t->nSite[TIO_SYNC],
           t->nSite[TIO_READ], t->nSite[TIO_OPEN], t->nSite[TIO_TRUNCATE]);
    printf("  faults injected: %d EIO, %d ENOSPC, %d short writes (%d reached,"
           " %d returned an error, the rest absorbed)\n", t->nFault[TIO_EIO],
           t->nFault[TIO_ENOSPC], t->nFault[TIO_SHORT], t->nFaultFired,
           t->nFaultSurfaced);
  }
}

static int usage(void){
  fprintf(stderr, "usage: %s [--points N] [--seed S] [--steps N]"
          " [--sweep-steps N] [--sweep-stride N] [--no-sweep] [--no-crash]"
          " [--smoke] [--self-check] [--keep] [--round SEED power|kill POINT]"
          " [--fault SEED CLASS N EIO|ENOSPC|short]\n", zArgv0);
  return 2;
}

/* Command-line options (see the header comment). */
typedef struct Options Options;
struct Options {
  uint64_t seed;
  int nPoint, nStep, nSweepStep, nStride;
  int bSweep, bCrash, bSelf, bKeep, bHelp;
  Round rOne;               /* --round / --fault: one round to replay */
};

/* Parse argv into *p (defaults and TORTURE_POINTS/TORTURE_SEED first);
** 0 on success, 1 on a bad argument. */
static int parseArgs(int argc, char **argv, Options *p){
  const char *zEnv;
  int i;
  memset(p, 0, sizeof(*p));
  p->seed = (uint64_t)time(0);
  p->nPoint = 10000; p->nStep = 40; p->nSweepStep = 12; p->nStride = 1;
  p->bSweep = 1; p->bCrash = 1;
  if( (zEnv = getenv("TORTURE_POINTS"))!=0 && zEnv[0] ) p->nPoint = atoi(zEnv);
  if( (zEnv = getenv("TORTURE_SEED"))!=0 && zEnv[0] ) p->seed = strtoull(zEnv, 0, 10);
  for(i=1; i<argc; i++){
    const char *z = argv[i];
    int bMore = i+1<argc;
    if( strcmp(z, "--points")==0 && bMore ) p->nPoint = atoi(argv[++i]);
    else if( strcmp(z, "--seed")==0 && bMore ) p->seed = strtoull(argv[++i], 0, 10);
    else if( strcmp(z, "--steps")==0 && bMore ) p->nStep = atoi(argv[++i]);
    else if( strcmp(z, "--sweep-steps")==0 && bMore ) p->nSweepStep = atoi(argv[++i]);
    else if( strcmp(z, "--sweep-stride")==0 && bMore ) p->nStride = atoi(argv[++i]);
    else if( strcmp(z, "--no-sweep")==0 ) p->bSweep = 0;
    else if( strcmp(z, "--no-crash")==0 ) p->bCrash = 0;
    else if( strcmp(z, "--smoke")==0 ){
      p->nPoint = 120; p->nStep = 20; p->nSweepStep = 6; p->nStride = 9;
      p->bSelf = 1;
    }
    else if( strcmp(z, "--self-check")==0 ) p->bSelf = 1;
    else if( strcmp(z, "--keep")==0 ) p->bKeep = 1;
    else if( strcmp(z, "--help")==0 ) p->bHelp = 1;
    else if( strcmp(z, "--round")==0 && i+3<argc ){
      p->rOne.seed = strtoull(argv[++i], 0, 10);
      p->rOne.eMode = strcmp(argv[++i], "kill")==0 ? MODE_KILL : MODE_POWER;
      p->rOne.iPoint = strtoull(argv[++i], 0, 10);
    }else if( strcmp(z, "--fault")==0 && i+4<argc ){
      p->rOne.eMode = MODE_FAULT;
      p->rOne.seed = strtoull(argv[++i], 0, 10);
      p->rOne.eClass = classByName(argv[++i]);
      p->rOne.iPoint = strtoull(argv[++i], 0, 10);
      p->rOne.eKind = kindByName(argv[++i]);
      if( p->rOne.eClass<0 || p->rOne.eKind==0 ) return 1;
    }else return 1;
  }
  return p->nPoint<0 || p->nStep<0 || p->nSweepStep<0 || p->nStride<1;
}

/* Replay one round (--round / --fault). */
static void runOne(const char *zDir, Options *p, Totals *t){
  Outcome o;
  p->rOne.nStep = p->nStep;
  roundRun(zDir, &p->rOne, &o);
  t->nRound = 1;
  if( report(&p->rOne, &o, t)==0 ){
    printf("torture: %s round passed (%s, %d acks)\n", azMode[p->rOne.eMode],
           o.bCrashed ? "crashed at the point" : "no crash", o.nAck);
  }
}

int main(int argc, char **argv){
  const char *zTmp = getenv("DEPOT_TEST_TMPDIR");
  Options opt;
  Totals t;
  char *zDir;
  double t0 = nowSec();
  memset(&t, 0, sizeof(t));
  zArgv0 = argv[0];
  if( parseArgs(argc, argv, &opt) ) return usage();
  if( opt.bHelp ){ usage(); return 0; }
  setvbuf(stdout, 0, _IOLBF, 0);
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( tio_vfs_register()!=SQLITE_OK ){
    fprintf(stderr, "torture: cannot register the torture VFS\n");
    return 1;
  }
  kv_engine_test_io(tio_walio());
  zDir = sqlite3_mprintf("%s/torture-%d", zTmp ? zTmp : "tests/tmp", (int)getpid());
  if( zDir==0 ) return 1;
  mkdir(zTmp ? zTmp : "tests/tmp", 0755);     /* may exist already */
  if( opt.rOne.iPoint ){
    runOne(zDir, &opt, &t);
  }else{
    printf("torture: seed %llu, %d crash points, %d steps per round\n",
           (unsigned long long)opt.seed, opt.bCrash ? opt.nPoint : 0, opt.nStep);
    if( opt.bSelf ) t.nFinding += runSelfCheck(zDir, opt.seed, opt.nStep, 6);
    if( opt.bCrash ) runCrash(zDir, opt.seed, opt.nPoint, opt.nStep, &t);
    if( opt.bSweep ) runSweep(zDir, opt.seed, opt.nSweepStep, opt.nStride, &t);
    printTotals(&t, opt.seed, nowSec()-t0, opt.bSweep);
  }
  if( t.nFinding==0 && !opt.bKeep ) rmTree(zDir);
  else printf("torture: the last round's files are in %s\n", zDir);
  sqlite3_free(zDir);
  return t.nFinding ? 1 : 0;
}
