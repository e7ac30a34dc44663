/*
** log.c -- the kv_log backend: the adapter between the KV engine and the
** kv_log storage engine (logstore.h).
**
** Each kv_log table keeps its log files in its own directory,
** <store>/kv_log/<table id>/ - named after the table's stable id, never
** after its name.  xApply appends a committed batch to the active log file
** and publishes it to the store's index (new snapshots see it at once);
** the table's collector thread then syncs the log (one fdatasync for every
** batch appended meanwhile) and only after that confirms each batch's WAL
** record.  A failed append fails the publication (the WAL keeps the
** record); a failed sync confirms nothing, is counted in kv_stats, and
** leaves the log store refusing writes until the next open, which repairs
** from the root WAL.  Compaction runs on the log store's own background
** thread and blocks neither readers nor committers.
**
** Several processes (xShare, xRefresh; see logShare).  Once the store is
** shared, every process appends to the same log files, one at a time
** under the store's writer lock, after reading what the others appended
** (kv_logstore_follow); a process that another one's commit reaches reads
** the new frames into its index before its next snapshot.  While shared,
** the process running the store's background work compacts (xSharedTick
** tells the log store; see logcompact.c), and every process's log store
** loads the new file set.  Before the process running the store's
** background work retires root WAL segments, it reads every frame up to
** the published tail and syncs the log files (logSharedSync), so the
** retired records are durable in them whichever process appended them.
**
** Stored values.  Each value is stored behind an 8-byte big-endian prefix:
** the CID of the WAL record that wrote it.  The log store itself labels
** each transaction with an increasing number: the CID, or the last label
** + 1 when a CID is not above it (two committers racing, so that a lower
** CID publishes second, or a replay applying an old record again).
**
** Replay is idempotent.  kv_logstore_open() reports the highest label the
** log durably holds, which is at least every CID it holds.  A replayed
** record with a CID above it is applied whole; one at or below it may be
** there already, so each action is checked against the key's entry in the
** log: a key whose stored CID is >= the record's already has this write or
** a later one (skipped); a delete of an absent key is skipped; anything else
** is applied.  Replay runs over the live WAL segments in CID order, so a put
** applied again over a later delete is deleted again by that later record.
** A record that needed nothing is confirmed at once (xDurable).
**
** Lost records.  The log store cuts a damaged tail of its newest file at
** open, assuming it was never synced.  To tell that apart from damage to
** synced data, the collector writes the highest label it has synced to
** <store>/kv_log/<id>.synced (label and its complement, 16 bytes; written,
** not synced: after a power loss it can only be behind).  An open that
** finds the log holding less than that label fails with SQLITE_CORRUPT.
*/
#include "config.h"
#include "ext/kv/backend.h"
#include "ext/kv/kv_test.h"
#include "ext/kv/logstore.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct KvBackendTable {
  KvLogStore *pLog;
  int (*xConfirm)(void*, uint64_t, const char*, int); /* KvTableDef's */
  int (*xWalSync)(void*, uint64_t, char**);           /* KvTableDef's */
  void *pConfirmCtx;
  char *zName; int nName;
  char *zDir;
  uint64_t labelLoaded;         /* highest label durable at open; CIDs
                                ** at or below it are checked per key */
  uint64_t labelLast;           /* highest label applied (engine mutex) */
  uint64_t cidAppended;         /* last replayed cid that appended */
  pthread_mutex_t mu;
  pthread_cond_t cond;
  uint64_t *aCid; int nCid, nAlloc;   /* applied, not yet synced */
  int bStop, bThread;
  pthread_t thread;
  int64_t nError;
  char zError[160];
  char zApplyError[400];        /* why the last xApply failed (mu) */
  int bLost;                    /* a publication failed: the index lacks a
                                ** committed record until reopen (atomic) */
  const WalIo *pIo;
  int bMissing;                 /* listed in the catalog file, but its
                                ** directory is gone: nothing is open or
                                ** created; only a replayed drop may end
                                ** it (xCheckOpen fails the open else) */
  char *zMark;                  /* <store>/kv_log/<id>.synced */
  int fdMark;
  uint64_t labelPending;        /* mu: highest label applied */
  int bShared;                  /* several processes append (logShare);
                                ** engine mutex, set once */
  int bReadOnly;                /* a read-only process: no file written */
};

struct KvBackendSnap {
  KvLogSnap *pSnap;
  KvLogBuf val;
  char *zErr;                   /* message of the last failed xGet */
};

struct KvBackendCursor {
  KvLogCursor *pCsr;
  KvLogBuf val;                 /* a value read on its own (not windowed) */
  const uint8_t *aKey;          /* the current row (bOn): key, and value */
  const uint8_t *aVal;          /* with its CID prefix, in place */
  int nKey, nVal;
  int bOn;
  int rc;                       /* read error that ended the walk */
  char *zErr;                   /* its message */
};

#ifdef DEPOT_TEST
static int64_t logTestSzFile = 0;  /* kv_log_test_file_size (kv_test.h) */
static int logTestKillStep = 0;    /* kv_log_test_compact_kill */

void kv_log_test_file_size(int64_t szFile){
  __atomic_store_n(&logTestSzFile, szFile, __ATOMIC_SEQ_CST);
}

void kv_log_test_compact_kill(int eStep){
  __atomic_store_n(&logTestKillStep, eStep, __ATOMIC_SEQ_CST);
}

static int logTestStep(void *pCtx, int eStep){
  (void)pCtx;
  if( eStep==__atomic_load_n(&logTestKillStep, __ATOMIC_SEQ_CST) ){
    raise(SIGKILL);
  }
  return 0;
}
#endif /* DEPOT_TEST */

/* ------------------------------------------------------- collector --- */

/* Record that every label up to iLabel is synced (see "Lost records").
** A failed write only weakens the check; it is logged.  A failed or short
** write may have left a torn marker, which the next open would take for
** damage and refuse the store: the marker is emptied instead (an empty
** marker turns the check off until the next good write). */
static void logMarkWrite(KvBackendTable *t, uint64_t iLabel){
  uint8_t a[16];
  int i;
  for(i=0; i<8; i++){
    a[i] = (uint8_t)(iLabel>>(56-8*i));
    a[8+i] = (uint8_t)~a[i];
  }
  if( t->pIo->xPwrite(t->pIo->pCtx, t->fdMark, a, 16, 0)!=16 ){
    sqlite3_log(SQLITE_IOERR_WRITE, "kv_log: cannot write %s", t->zMark);
    if( t->pIo->xFtruncate(t->pIo->pCtx, t->fdMark, 0) ){
      sqlite3_log(SQLITE_IOERR_TRUNCATE, "kv_log: cannot empty %s after a "
                  "failed write; the next open will report it", t->zMark);
    }
  }
}

/* After the first commit of a pass arrives, the collector lets more
** gather for LOG_GATHER_MS (mu held; a stop ends the wait), so one root
** WAL flush and one log sync carry many commits: the flush a pass makes
** (wal_sync) holds up a commit that appends meanwhile, which a pass per
** commit would do to nearly every commit. */
#define LOG_GATHER_MS 20
static void logGather(KvBackendTable *t){
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)LOG_GATHER_MS*1000000L;
  ts.tv_sec += ts.tv_nsec/1000000000L;
  ts.tv_nsec %= 1000000000L;
  while( !t->bStop ){
    if( pthread_cond_timedwait(&t->cond, &t->mu, &ts)==ETIMEDOUT ) break;
  }
}

/* Sync what was appended, then confirm it.  The root WAL is flushed up to
** the records first (write-ahead: commits that deferred its flush,
** KV_SYNC_NORMAL).  Returns 0 when told to stop. */
static int logCollectOnce(KvBackendTable *t){
  uint64_t *aCid, iLabel, cidMax = 0;
  char *zErr = 0;
  int n, i, rc = SQLITE_OK, bStop;
  pthread_mutex_lock(&t->mu);
  while( t->nCid==0 && !t->bStop ) pthread_cond_wait(&t->cond, &t->mu);
  logGather(t);
  bStop = t->bStop;
  iLabel = t->labelPending;
  n = t->nCid;
  aCid = t->aCid;
  t->aCid = 0; t->nCid = 0; t->nAlloc = 0;
  pthread_mutex_unlock(&t->mu);
  if( n==0 ) return !bStop;
  for(i=0; i<n; i++) if( aCid[i]>cidMax ) cidMax = aCid[i];
  /* Shared: each committing thread flushes its record (logFollowWriter);
  ** a flush from here could meet the committing thread taking over the
  ** tail. */
  if( t->xWalSync && cidMax && !__atomic_load_n(&t->bShared, __ATOMIC_ACQUIRE) ){
    rc = t->xWalSync(t->pConfirmCtx, cidMax, &zErr);
  }
  if( rc==SQLITE_OK ) rc = kv_logstore_sync(t->pLog, &zErr);
  if( rc==SQLITE_OK ){
    logMarkWrite(t, iLabel);
    for(i=0; i<n; i++) t->xConfirm(t->pConfirmCtx, aCid[i], t->zName, t->nName);
  }else{
    pthread_mutex_lock(&t->mu);
    t->nError++;
    sqlite3_snprintf(sizeof(t->zError), t->zError, "%s", zErr ? zErr : "");
    pthread_mutex_unlock(&t->mu);
    sqlite3_log(rc, "kv_log: %s (records stay in the WAL)", zErr);
  }
  sqlite3_free(zErr);
  sqlite3_free(aCid);
  return !bStop;
}

static void *logCollector(void *pArg){
  KvBackendTable *t = (KvBackendTable*)pArg;
  while( logCollectOnce(t) ){}
  return 0;
}

static void logStopCollector(KvBackendTable *t){
  if( !t->bThread ) return;
  pthread_mutex_lock(&t->mu);
  t->bStop = 1;
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->mu);
  pthread_join(t->thread, 0);
  t->bThread = 0;
}

/* ----------------------------------------------------------- tables --- */

static void logFree(KvBackendTable *t){
  kv_logstore_close(t->pLog);
  if( t->fdMark>=0 ) t->pIo->xClose(t->pIo->pCtx, t->fdMark);
  sqlite3_free(t->zMark);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->cond);
  sqlite3_free(t->aCid);
  sqlite3_free(t->zDir);
  sqlite3_free(t);
}

/* Open the "synced" marker and check the loaded log against it. */
static int logMarkCheck(KvBackendTable *t, char **pzErr){
  uint8_t a[16];
  uint64_t iMark = 0;
  ssize_t n;
  int i;
  t->zMark = sqlite3_mprintf("%s.synced", t->zDir);
  if( t->zMark==0 ) return SQLITE_NOMEM;
  if( t->bReadOnly ) return SQLITE_OK;   /* it writes no marker */
  t->fdMark = t->pIo->xOpen(t->pIo->pCtx, t->zMark, O_RDWR|O_CREAT|O_CLOEXEC,
                            0644);
  if( t->fdMark<0 ){
    *pzErr = sqlite3_mprintf("kv_log: cannot open %s: %s", t->zMark,
                             strerror(errno));
    return SQLITE_CANTOPEN;
  }
  n = t->pIo->xPread(t->pIo->pCtx, t->fdMark, a, 16, 0);
  if( n<0 ){
    *pzErr = sqlite3_mprintf("kv_log: cannot read %s: %s", t->zMark,
                             strerror(errno));
    return SQLITE_IOERR_READ;
  }
  for(i=0; n==16 && i<8; i++){
    uint8_t c = (uint8_t)(a[i]^0xff);
    if( c!=a[8+i] ) n = -1;
    iMark = (iMark<<8) | a[i];
  }
  if( n!=0 && n!=16 ){
    *pzErr = sqlite3_mprintf("kv_log: %s is corrupt at offset 0", t->zMark);
    return SQLITE_CORRUPT;
  }
  if( iMark>t->labelLoaded && !t->bShared ){
    *pzErr = sqlite3_mprintf("kv_log: the log in %s lost synced records: it "
        "holds labels up to %llu, %llu were synced (a log file is damaged "
        "or truncated)", t->zDir, (unsigned long long)t->labelLoaded,
        (unsigned long long)iMark);
    return SQLITE_CORRUPT;
  }
  return SQLITE_OK;
}

/* 1 if the table's directory does not exist.  A table the catalog file
** lists made its directory (and synced its entry) before that catalog was
** saved, so then it was removed: by a DROP whose catalog save a crash
** prevented (the WAL replays the drop), or by damage. */
static int logDirMissing(KvBackendTable *t){
  struct stat st;
  t->bMissing = stat(t->zDir, &st)!=0 && errno==ENOENT;
  return t->bMissing;
}

/* After the open's replay: a table whose directory is missing and that
** the replay did not drop has lost its files. */
static int logCheckOpen(KvBackendTable *t, char **pzErr){
  if( !t->bMissing ) return SQLITE_OK;
  *pzErr = sqlite3_mprintf("kv_log: the log directory %s is missing, but the "
      "catalog of the store lists kv_log table %s: its files were deleted",
      t->zDir, t->zName);
  return SQLITE_CORRUPT;
}

/* A create that failed: remove the table's directory zDir, which did not
** exist before it, with whatever files the failed open left in it, and
** its marker, so a failed create leaves no file behind.  Best effort: a
** leftover is never read (later tables get higher ids: logStoreMaxId). */
static void logUndoCreate(const char *zDir){
  DIR *d = opendir(zDir);
  char *zMark = sqlite3_mprintf("%s.synced", zDir);
  struct dirent *e;
  while( d && (e = readdir(d))!=0 ){
    char *zFile;
    if( strcmp(e->d_name, ".")==0 || strcmp(e->d_name, "..")==0 ) continue;
    zFile = sqlite3_mprintf("%s/%s", zDir, e->d_name);
    if( zFile ) unlink(zFile);
    sqlite3_free(zFile);
  }
  if( d ) closedir(d);
  rmdir(zDir);
  if( zMark ) unlink(zMark);
  sqlite3_free(zMark);
}

static int logOpen(const KvTableDef *pDef, int bCreate, KvBackendTable **pp,
                   char **pzErr){
  KvBackendTable *t;
  KvLogConfig cfg;
  KvLogStats st;
  char *zParent;
  int rc, bNew;
  *pp = 0;
  if( pDef->zStore==0 || pDef->xConfirm==0 ){
    *pzErr = sqlite3_mprintf("kv_log: tables need a store directory");
    return SQLITE_MISUSE;
  }
  t = sqlite3_malloc64(sizeof(*t) + pDef->nName + 1);
  if( t==0 ) return SQLITE_NOMEM;
  memset(t, 0, sizeof(*t));
  pthread_mutex_init(&t->mu, 0);
  pthread_cond_init(&t->cond, 0);
  t->zName = (char*)&t[1];
  memcpy(t->zName, pDef->zName, pDef->nName);
  t->zName[pDef->nName] = 0;
  t->nName = pDef->nName;
  t->xConfirm = pDef->xConfirm;
  t->xWalSync = pDef->xWalSync;
  t->pConfirmCtx = pDef->pConfirmCtx;
  t->pIo = pDef->pIo ? pDef->pIo : wal_io_posix();
  t->fdMark = -1;
  zParent = sqlite3_mprintf("%s/kv_log", pDef->zStore);
  t->zDir = sqlite3_mprintf("%s/kv_log/%llu", pDef->zStore,
                            (unsigned long long)pDef->iTableId);
  if( zParent==0 || t->zDir==0 ){
    sqlite3_free(zParent);
    logFree(t);
    return SQLITE_NOMEM;
  }
  t->bReadOnly = pDef->bReadOnly;
  if( !t->bReadOnly && mkdir(zParent, 0755)!=0 && errno!=EEXIST ){
    *pzErr = sqlite3_mprintf("kv_log: cannot create directory %s: %s",
                             zParent, strerror(errno));
    sqlite3_free(zParent);
    logFree(t);
    return SQLITE_CANTOPEN;
  }
  sqlite3_free(zParent);
  if( !bCreate && logDirMissing(t) ){
    *pp = t;                     /* see bMissing; xCheckOpen reports it */
    return SQLITE_OK;
  }
  bNew = bCreate && access(t->zDir, F_OK)!=0 && errno==ENOENT;
  memset(&cfg, 0, sizeof(cfg));
  cfg.bBackground = 1;
  cfg.bShared = pDef->bShared;
  cfg.bReadOnly = pDef->bReadOnly;
  t->bShared = pDef->bShared;
#ifdef DEPOT_TEST
  cfg.szFile = __atomic_load_n(&logTestSzFile, __ATOMIC_SEQ_CST);
  cfg.xStep = logTestStep;
#endif
  cfg.pIo = pDef->pIo;
  rc = kv_logstore_open(t->zDir, &cfg, &t->pLog, pzErr);
  if( rc==SQLITE_OK ){
    kv_logstore_stats(t->pLog, &st);
    t->labelLoaded = t->labelLast = t->labelPending = st.maxCid;
    rc = logMarkCheck(t, pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = pthread_create(&t->thread, 0, logCollector, t)==0 ? SQLITE_OK
                                                          : SQLITE_NOMEM;
    t->bThread = rc==SQLITE_OK;
  }
  if( rc!=SQLITE_OK ){
    if( bNew ){
      char *zDir = t->zDir;
      t->zDir = 0;
      logFree(t);
      logUndoCreate(zDir);
      sqlite3_free(zDir);
    }else{
      logFree(t);
    }
    return rc;
  }
  *pp = t;
  return SQLITE_OK;
}

/* Stop the collector (it syncs and confirms what is pending first). */
static void logClose(KvBackendTable *t){
  if( t==0 ) return;
  logStopCollector(t);
  logFree(t);
}

/* Durable when it returns: the table's directory and marker are removed
** and <store>/kv_log is synced (before the engine saves its catalog), so
** a later table can never find this table's files under a reused id.  A
** failed sync is logged; the catalog still decides that the table is
** gone. */
static int logDrop(KvBackendTable *t, char **pzErr){
  char *zParent = sqlite3_mprintf("%.*s", (int)(strrchr(t->zDir, '/')
                                                - t->zDir), t->zDir);
  int rc = SQLITE_OK;
  logStopCollector(t);
  if( t->bMissing ){             /* nothing was opened: the marker only */
    char *zMark = sqlite3_mprintf("%s.synced", t->zDir);
    if( zMark ) t->pIo->xUnlink(t->pIo->pCtx, zMark);
    sqlite3_free(zMark);
    sqlite3_free(zParent);
    return SQLITE_OK;
  }
  t->pIo->xUnlink(t->pIo->pCtx, t->zMark);
  rc = kv_logstore_destroy(t->pLog, pzErr);
  if( rc==SQLITE_OK && zParent
   && t->pIo->xSyncDir(t->pIo->pCtx, zParent)!=0 ){
    sqlite3_log(SQLITE_IOERR_DIR_FSYNC, "kv_log: cannot sync %s", zParent);
  }
  sqlite3_free(zParent);
  return rc;
}

/* ------------------------------------------------------ publishing --- */

static void logPut64(uint8_t *a, uint64_t v){
  int i;
  for(i=7; i>=0; i--){ a[i] = (uint8_t)v; v >>= 8; }
}

static uint64_t logGet64(const uint8_t *a){
  uint64_t v = 0;
  int i;
  for(i=0; i<8; i++) v = (v<<8) | a[i];
  return v;
}

/* The batch as an action array.  Keys point into pBatch's bytes; values
** are copied behind their CID prefix into *paBuf (one allocation). */
static int logActions(KvMap *pBatch, uint64_t cid, KvLogAction **paAct,
                      int *pnAct, uint8_t **paBuf){
  int64_t n = kv_map_count(pBatch), nByte = kv_map_bytes(pBatch) + 8*n + 8;
  KvLogAction *a = sqlite3_malloc64((n ? n : 1)*sizeof(*a));
  uint8_t *aBuf = sqlite3_malloc64(nByte), *p = aBuf;
  KvMapCursor *pCsr = kv_map_cursor_new(pBatch);
  KvMapEntry e;
  int i = 0, bOn;
  if( a==0 || pCsr==0 || aBuf==0 ){
    sqlite3_free(a);
    sqlite3_free(aBuf);
    kv_map_cursor_free(pCsr);
    return SQLITE_NOMEM;
  }
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn && i<n;
      bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    a[i].bDelete = e.bTomb;
    a[i].aKey = e.aKey; a[i].nKey = e.nKey;
    a[i].aVal = p; a[i].nVal = 0;
    if( !e.bTomb ){
      logPut64(p, cid);
      if( e.nVal ) memcpy(p+8, e.aVal, e.nVal);
      a[i].nVal = 8 + e.nVal;
      p += 8 + e.nVal;
    }
    i++;
  }
  kv_map_cursor_free(pCsr);   /* pBatch keeps the key bytes alive */
  *paAct = a;
  *pnAct = i;
  *paBuf = aBuf;
  return SQLITE_OK;
}

static int logNotePending(KvBackendTable *t, uint64_t cid, uint64_t iLabel){
  pthread_mutex_lock(&t->mu);
  if( t->nCid==t->nAlloc ){
    int nNew = t->nAlloc ? t->nAlloc*2 : 16;
    uint64_t *a = sqlite3_realloc64(t->aCid, nNew*sizeof(uint64_t));
    if( a==0 ){ pthread_mutex_unlock(&t->mu); return SQLITE_NOMEM; }
    t->aCid = a;
    t->nAlloc = nNew;
  }
  t->aCid[t->nCid++] = cid;
  if( iLabel>t->labelPending ) t->labelPending = iLabel;
  if( t->nCid==1 ) pthread_cond_signal(&t->cond);  /* a pass starts */
  pthread_mutex_unlock(&t->mu);
  return SQLITE_OK;
}

/* Replay of a record the log may already hold: drop from a[] the actions
** whose effect is there (see the header comment). */
static int logFilterReplayed(KvBackendTable *t, uint64_t cid,
                             KvLogAction *a, int *pn){
  KvLogBuf v = {0, 0, 0};
  char *zErr = 0;
  int i, nOut = 0, rc = SQLITE_OK;
  for(i=0; i<*pn && rc==SQLITE_OK; i++){
    int bFound = 0;
    rc = kv_logstore_get(t->pLog, a[i].aKey, a[i].nKey, &v, 0, &bFound,
                         &zErr);
    if( rc==SQLITE_OK && bFound && v.n<8 ) rc = SQLITE_CORRUPT;
    if( rc!=SQLITE_OK ) break;
    if( bFound ? logGet64(v.a)>=cid : a[i].bDelete ) continue;
    a[nOut++] = a[i];
  }
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "kv_log: replay check in %s: %s", t->zDir,
                zErr ? zErr : "value without its CID prefix");
  }
  sqlite3_free(zErr);
  kv_logbuf_free(&v);
  *pn = nOut;
  return rc;
}

/* The log follows what other processes appended (see logShare). */
static void logFollowed(KvBackendTable *t){
  KvLogStats st;
  kv_logstore_stats(t->pLog, &st);
  if( st.maxCid>t->labelLast ) t->labelLast = st.maxCid;
}

/* A shared table's apply, before its append (the writer lock is held):
** read what the others appended, cutting a dead writer's torn tail.  The
** WAL is not flushed here: a record that also writes another table was
** flushed before its publication (write-ahead), one of this table alone
** is flushed by its committing thread after the writer lock is let go
** (it is all in this log or not at all).  A
** record found whole there (a writer died after its append, before it
** published; the engine applies the record again) appends nothing: its
** actions are filtered as a replay's, and the collector syncs and
** confirms it all the same. */
static int logFollowWriter(KvBackendTable *t, uint64_t cid, KvLogAction *a,
                           int *pn, char **pzErr){
  int nTxn = 0, rc;
  rc = kv_logstore_follow(t->pLog, 1, 0, &nTxn, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  logFollowed(t);
  if( nTxn==0 ) return SQLITE_OK;
  rc = logFilterReplayed(t, cid, a, pn);
  if( rc==SQLITE_OK && *pn==0 ) rc = logNotePending(t, cid, t->labelLast);
  return rc;
}

static int logApply(KvBackendTable *t, KvMap *pBatch, uint64_t iSeq,
                    uint64_t cid){
  KvLogAction *a = 0;
  uint8_t *aBuf = 0;
  char *zErr = 0;
  int n = 0, rc;
  (void)iSeq;
  if( cid==0 ) return SQLITE_MISUSE;   /* kv_log tables are persistent */
  if( t->bMissing ) return SQLITE_OK;  /* replay only; xCheckOpen decides */
  rc = logActions(pBatch, cid, &a, &n, &aBuf);
  if( rc==SQLITE_OK && t->bShared ){
    rc = logFollowWriter(t, cid, a, &n, &zErr);
  }else if( rc==SQLITE_OK && cid<=t->labelLoaded ){
    rc = logFilterReplayed(t, cid, a, &n);
  }
  if( rc==SQLITE_OK && n>0 ){
    uint64_t iLabel = cid>t->labelLast ? cid : t->labelLast+1;
    rc = kv_logstore_apply(t->pLog, iLabel, n, a, &zErr);
    if( rc==SQLITE_OK ){
      t->labelLast = iLabel;
      t->cidAppended = cid;
      rc = logNotePending(t, cid, iLabel);
    }
  }
  if( rc!=SQLITE_OK ){
    __atomic_store_n(&t->bLost, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&t->mu);
    sqlite3_snprintf(sizeof(t->zApplyError), t->zApplyError, "%s",
                     zErr ? zErr : sqlite3_errstr(rc));
    pthread_mutex_unlock(&t->mu);
    sqlite3_log(rc, "kv_log: publishing record %llu to %s failed: %s "
                "(the record stays in the WAL)", (unsigned long long)cid,
                t->zDir, zErr ? zErr : "");
  }
  sqlite3_free(zErr);
  sqlite3_free(a);
  sqlite3_free(aBuf);
  return rc;
}

/* Why the last logApply failed: the log file and the cause. */
static void logApplyError(KvBackendTable *t, char **pzErr){
  pthread_mutex_lock(&t->mu);
  if( t->zApplyError[0] ) *pzErr = sqlite3_mprintf("%s", t->zApplyError);
  pthread_mutex_unlock(&t->mu);
}

/* Prepare's check: a log that refused writes after a failed sync would
** refuse this commit's too, after its WAL flush; fail it now instead. */
static int logCheckWrite(KvBackendTable *t, char **pzErr){
  KvLogStats st;
  if( t->bMissing ) return logCheckOpen(t, pzErr);
  kv_logstore_stats(t->pLog, &st);
  if( !st.bFailed ) return SQLITE_OK;
  pthread_mutex_lock(&t->mu);
  *pzErr = sqlite3_mprintf("kv_log: table %s takes no writes until the store "
      "is opened again: its log in %s failed (%s)", t->zName, t->zDir,
      t->zError[0] ? t->zError : "a write or sync failed");
  pthread_mutex_unlock(&t->mu);
  return SQLITE_IOERR;
}

/* Several processes.  The store turns shared: compaction follows the
** shared protocol from now on (kv_logstore_share, logSharedTick), and
** every apply first reads what the others
** appended (logFollowWriter), under the store's writer lock that orders
** the appends of all processes.  Each process's collector syncs its own
** appends and confirms their records; the root WAL keeps a record until
** the owner's logSharedSync made its frames durable, and the next open
** alone replays the live segments as it would after a crash. */
static int logShare(KvBackendTable *t, char **pzErr){
  (void)pzErr;
  if( t->bMissing || t->bShared ) return SQLITE_OK;
  kv_logstore_share(t->pLog);
  __atomic_store_n(&t->bShared, 1, __ATOMIC_RELEASE);
  return SQLITE_OK;
}

/* Another process published record cid to the table: read its appends,
** up to that record's, into the index (engine mutex held).  A shared
** log's labels are its records' CIDs (logMaxCid: the store's CIDs start
** above every label when it turns shared), so a commit applied but not
** published yet stays unread.  A read that fails leaves the table
** refusing snapshots until the store is opened again (as a failed
** publication does). */
static void logRefresh(KvBackendTable *t, uint64_t cid){
  char *zErr = 0;
  int rc;
  if( t->bMissing ) return;
  rc = kv_logstore_follow(t->pLog, 0, cid, 0, &zErr);
  if( rc==SQLITE_OK ){
    logFollowed(t);
  }else{
    __atomic_store_n(&t->bLost, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&t->mu);
    sqlite3_snprintf(sizeof(t->zApplyError), t->zApplyError, "%s",
                     zErr ? zErr : sqlite3_errstr(rc));
    pthread_mutex_unlock(&t->mu);
    sqlite3_log(rc, "kv_log: reading what another process appended to %s "
                "failed: %s", t->zDir, zErr ? zErr : "");
  }
  sqlite3_free(zErr);
}

/* The owner's sync before root WAL segments retire (see logShare): the
** frames every process appended, up to what this process has read (the
** engine caught up to the published tail first), made durable in the log
** files.  A table whose index lacks a record (bLost) or whose log failed
** refuses: the WAL keeps its segments. */
static int logSharedSync(KvBackendTable *t, char **pzErr){
  if( t->bMissing ) return SQLITE_OK;
  if( __atomic_load_n(&t->bLost, __ATOMIC_ACQUIRE) ){
    *pzErr = sqlite3_mprintf("kv_log: table %s lacks a record in this "
                             "process (%s)", t->zName, t->zDir);
    return SQLITE_IOERR;
  }
  return kv_logstore_sync_shared(t->pLog, pzErr);
}

/* The store thread's turn (see logShare): the log store's thread loads a
** compaction's MANIFEST and, in the owner, compacts. */
static void logSharedTick(KvBackendTable *t, int bOwner){
  if( t->bMissing || !t->bShared ) return;
  kv_logstore_tick(t->pLog, bOwner);
}

/* A replayed record that appended nothing is durable already. */
/* The log's labels are at least the CIDs it holds (see "Stored values"):
** the highest one it holds (engine mutex held, or the open). */
static uint64_t logMaxCid(KvBackendTable *t){
  return t->labelLast>t->labelLoaded ? t->labelLast : t->labelLoaded;
}

static int logDurable(KvBackendTable *t, uint64_t cid){
  if( t->bMissing ) return 1;
  return cid<=t->labelLoaded && t->cidAppended!=cid;
}

/* ------------------------------------------------------- snapshots --- */

/* A table whose publication or log sync failed refuses new snapshots
** (so every read and write of it) with SQLITE_IOERR until the store is
** reopened: its index lacks commits that are durable in the root WAL, and
** a transaction reading it would decide on a state that never existed. */
/* Snapshot handles.  A point read with no root takes a snapshot, reads
** its value into the handle's buffer and frees it: the process keeps one
** freed handle, with its buffer (up to LOG_SPARE_BYTES), for the next
** snapshot of any kv_log table (taken and given back by atomic exchange,
** so from any thread), so such a read allocates only the store's view. */
#define LOG_SPARE_BYTES 65536
static KvBackendSnap *logSpareSnap = 0;

/* A handle holding no view, with an empty buffer; NULL on OOM. */
static KvBackendSnap *logSnapTake(void){
  KvBackendSnap *h = __atomic_exchange_n(&logSpareSnap, (KvBackendSnap*)0,
                                         __ATOMIC_ACQ_REL);
  if( h==0 ){
    h = sqlite3_malloc64(sizeof(*h));
    if( h ) memset(h, 0, sizeof(*h));
  }
  return h;
}

/* Give back a handle whose view is released. */
static void logSnapGive(KvBackendSnap *h){
  h->pSnap = 0;
  sqlite3_free(h->zErr);
  h->zErr = 0;
  h->val.n = 0;
  if( h->val.nAlloc>LOG_SPARE_BYTES ) kv_logbuf_free(&h->val);
  h = __atomic_exchange_n(&logSpareSnap, h, __ATOMIC_ACQ_REL);
  if( h ){
    kv_logbuf_free(&h->val);
    sqlite3_free(h);
  }
}

static int logSnapshot(KvBackendTable *t, KvBackendSnap **pp){
  KvBackendSnap *h;
  int rc;
  *pp = 0;
  if( t->bMissing || __atomic_load_n(&t->bLost, __ATOMIC_ACQUIRE)
   || kv_logstore_failed(t->pLog) ){
    return SQLITE_IOERR;
  }
  h = logSnapTake();
  if( h==0 ) return SQLITE_NOMEM;
  rc = kv_logstore_snapshot(t->pLog, &h->pSnap);
  if( rc!=SQLITE_OK ){ logSnapGive(h); return rc; }
  *pp = h;
  return SQLITE_OK;
}

static void logSnapshotFree(KvBackendSnap *h){
  if( h==0 ) return;
  kv_logsnap_free(h->pSnap);
  logSnapGive(h);
}

static int logSnapshotDup(KvBackendSnap *h, KvBackendSnap **pp){
  KvBackendSnap *c = logSnapTake();
  int rc;
  *pp = 0;
  if( c==0 ) return SQLITE_NOMEM;
  rc = kv_logsnap_dup(h->pSnap, &c->pSnap);
  if( rc!=SQLITE_OK ){ logSnapGive(c); return rc; }
  *pp = c;
  return SQLITE_OK;
}

/* A damaged or unreadable record is an error, never "absent". */
static int logGet(KvBackendSnap *h, const uint8_t *aKey, int nKey,
                  int *pbFound, KvMapEntry *pOut){
  char *zErr = 0;
  int rc = kv_logsnap_get(h->pSnap, aKey, nKey, &h->val, 0, pbFound, &zErr);
  if( rc==SQLITE_OK && *pbFound && h->val.n<8 ){
    rc = SQLITE_CORRUPT;
    zErr = sqlite3_mprintf("kv_log: a value without its CID prefix");
  }
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "%s", zErr ? zErr : "kv_log: read error");
    *pbFound = 0;
    sqlite3_free(h->zErr);
    h->zErr = zErr;
    zErr = 0;
  }else if( *pbFound ){
    memset(pOut, 0, sizeof(*pOut));
    pOut->aKey = aKey; pOut->nKey = nKey;
    pOut->aVal = h->val.a+8; pOut->nVal = h->val.n-8;
  }
  sqlite3_free(zErr);
  return rc;
}

/* --------------------------------------------------------- cursors --- */

static int logCursorOpen(KvBackendSnap *h, KvBackendCursor **pp){
  KvBackendCursor *c = sqlite3_malloc64(sizeof(*c));
  int rc;
  *pp = 0;
  if( c==0 ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  rc = kv_logsnap_cursor(h->pSnap, &c->pCsr);
  if( rc!=SQLITE_OK ){ sqlite3_free(c); return rc; }
  *pp = c;
  return SQLITE_OK;
}

static void logCursorClose(KvBackendCursor *c){
  if( c==0 ) return;
  kv_logcursor_free(c->pCsr);
  kv_logbuf_free(&c->val);
  sqlite3_free(c->zErr);
  sqlite3_free(c);
}

/* Load the value of the key the cursor landed on.  A record that cannot
** be read (damaged: SQLITE_CORRUPT naming the log file and offset; or an
** I/O error) ends the walk with that error, kept for logCursorError();
** a failed walk stays failed. */
static int logLandedRow(KvBackendCursor *c, int bOn, int rc, char *zErr);
static int logLanded(KvBackendCursor *c, int bOn){
  char *zErr = 0;
  int rc = SQLITE_OK;
  if( c->rc!=SQLITE_OK ) bOn = 0;
  if( bOn ){
    rc = kv_logcursor_row(c->pCsr, &c->aKey, &c->nKey, &c->val, &c->aVal,
                          &c->nVal, &zErr);
  }
  return logLandedRow(c, bOn, rc, zErr);
}

/* The row the cursor landed on was read with rc (message zErr, taken). */
static int logLandedRow(KvBackendCursor *c, int bOn, int rc, char *zErr){
  if( bOn ){
    if( rc==SQLITE_OK && c->nVal<8 ){
      rc = SQLITE_CORRUPT;
      zErr = sqlite3_mprintf("kv_log: a value without its CID prefix");
    }
  }
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "%s (scan stopped)", zErr ? zErr : "kv_log: read error");
    c->rc = rc;
    c->zErr = zErr;
    zErr = 0;
    bOn = 0;
  }
  sqlite3_free(zErr);
  c->bOn = bOn;
  return bOn;
}

static void logGetError(KvBackendSnap *h, char **pzErr){
  *pzErr = h->zErr ? sqlite3_mprintf("%s", h->zErr) : 0;
}

static int logCursorError(KvBackendCursor *c, char **pzErr){
  *pzErr = 0;
  if( c->rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("%s", c->zErr ? c->zErr
                             : "kv_log: a log record could not be read");
  }
  return c->rc;
}

static int logCursorSeek(KvBackendCursor *c, int eSeek, const void *a, int n){
  return logLanded(c, kv_logcursor_seek(c->pCsr, eSeek, a, n));
}
static int logCursorNext(KvBackendCursor *c){
  return logLanded(c, kv_logcursor_next(c->pCsr));
}
static int logCursorPrev(KvBackendCursor *c){
  return logLanded(c, kv_logcursor_prev(c->pCsr));
}

static void logCursorEntry(KvBackendCursor *c, KvMapEntry *pOut){
  if( !c->bOn ){
    memset(pOut, 0, sizeof(*pOut));
    return;
  }
  pOut->aKey = c->aKey;
  pOut->nKey = c->nKey;
  pOut->aVal = c->aVal+8;
  pOut->nVal = c->nVal-8;
  pOut->rev = 0;
  pOut->bTomb = 0;
}

/* logCursorNext or logCursorPrev, then logCursorEntry, with the step and
** the read in one call of the store (kv_logcursor_step_row). */
static int logCursorStep(KvBackendCursor *c, int bPrev, KvMapEntry *pOut){
  char *zErr = 0;
  int rc;
  if( c->rc!=SQLITE_OK ) return logLandedRow(c, 0, SQLITE_OK, 0);
  rc = kv_logcursor_step_row(c->pCsr, bPrev, &c->aKey, &c->nKey, &c->val,
                             &c->aVal, &c->nVal, &zErr);
  if( rc==SQLITE_OK && c->nVal>=8 ){
    c->bOn = 1;
  }else if( rc==SQLITE_DONE ){
    return logLandedRow(c, 0, SQLITE_OK, 0);
  }else if( !logLandedRow(c, 1, rc, zErr) ){
    return 0;
  }
  pOut->aKey = c->aKey;
  pOut->nKey = c->nKey;
  pOut->aVal = c->aVal+8;
  pOut->nVal = c->nVal-8;
  pOut->rev = 0;
  pOut->bTomb = 0;
  return 1;
}

/* ----------------------------------------------------------- stats --- */

static void logStats(KvBackendTable *t, int64_t *pnRow, int64_t *pnByte){
  KvLogStats st;
  memset(&st, 0, sizeof(st));
  if( t->pLog ) kv_logstore_stats(t->pLog, &st);
  *pnRow = st.nLive;
  *pnByte = st.szStored;
}

/* kv_stats counters.  nError and zError cover the collector's failed
** writes and syncs and the log store's failed compactions; a collector
** failure's message wins (it stops the table until reopen). */
static void logStatsEx(KvBackendTable *t, int bCount, KvBackendStats *pS){
  KvLogStats st;
  (void)bCount;                 /* cheap: counters of the log store */
  memset(pS, 0, sizeof(*pS));
  memset(&st, 0, sizeof(st));
  if( t->pLog ) kv_logstore_stats(t->pLog, &st);
  pS->nRow = st.nLive;
  pS->nByte = st.szStored;
  pthread_mutex_lock(&t->mu);
  pS->nPending = t->nCid;
  pS->nError = t->nError + st.nCompactError;
  memcpy(pS->zError, t->zError, sizeof(t->zError));
  pthread_mutex_unlock(&t->mu);
  if( pS->zError[0]==0 && st.zCompactError[0] ){
    sqlite3_snprintf(sizeof(pS->zError), pS->zError, "compaction: %s",
                     st.zCompactError);
  }
}

/* The largest number a name in <store>/kv_log starts with: the table
** directories <id> and markers <id>.synced (numbers past 2^48 are not
** ids this engine makes and are ignored). */
static int logStoreMaxId(const char *zStore, uint64_t *piMax, char **pzErr){
  char *zDir = sqlite3_mprintf("%s/kv_log", zStore);
  struct dirent *e;
  DIR *d;
  *piMax = 0;
  if( zDir==0 ) return SQLITE_NOMEM;
  if( (d = opendir(zDir))==0 ){
    int rc = errno==ENOENT ? SQLITE_OK : SQLITE_CANTOPEN;
    if( rc ){
      *pzErr = sqlite3_mprintf("kv_log: cannot list %s: %s", zDir,
                               strerror(errno));
    }
    sqlite3_free(zDir);
    return rc;
  }
  while( (e = readdir(d))!=0 ){
    const char *z = e->d_name;
    uint64_t v = 0;
    while( *z>='0' && *z<='9' && v<((uint64_t)1<<48) ) v = v*10 + (*z++-'0');
    if( v<((uint64_t)1<<48) && v>*piMax ) *piMax = v;
  }
  closedir(d);
  sqlite3_free(zDir);
  return SQLITE_OK;
}

const KvBackend kvLogBackend = {
  "kv_log",
  logOpen, logClose, logDrop,
  logSnapshot, logSnapshotFree, logSnapshotDup, logGet,
  logCursorOpen, logCursorClose, logCursorSeek, logCursorNext, logCursorPrev,
  logCursorEntry,
  logApply, logDurable, logStats,
  1, logStatsEx,
  logCursorError, logGetError, logCheckWrite,
  0,                            /* data files: records wait for them */
  logCheckOpen, logStoreMaxId, logApplyError,
  0,                            /* reads may read a log file */
  1,                            /* xApply appends to the log file */
  logMaxCid,
  0,                            /* entries: the value buffer is reused */
  logCursorStep,
  logShare, logRefresh,
  logSharedSync,
  logSharedTick
};
