/*
** kv_btree.c -- the kv_btree backend: a store's kv_btree tables live in one
** B-tree data file, <store>/kv_btree.db, an embedded SQLite database with
** one WITHOUT ROWID table "t<id>"(k BLOB PRIMARY KEY, v BLOB) per KV table.
** The data file is opened with sqlite3_open_v2() on the VFS that
** kv_set_plain_vfs() names (ext/depot.c gives depot_vfs_plain: the default
** VFS, or while the depot VFS is the default, the one that was before),
** never through this extension's SQL surface (see docs/ARCHITECTURE.md).
**
** Write path.  A commit's writes (the root's write set) are published by
** xApply, after the root WAL flush, into the table's overlay: a
** copy-on-write map of values and tombstones, each tagged with the commit
** sequence that wrote it.  xApply also queues the batch for the store's
** collector thread, which lets batches gather while they keep arriving
** (btGather), takes the queued batches in order, writes them in ONE
** data-file transaction, commits it (synchronous=FULL: synced), confirms
** each batch's WAL record for its table, and then drops every overlay
** entry whose tag still names that batch.  The overlays of a store
** hold at most nLimit entries: past that, xApply (the committer) waits for
** the collector (back-pressure).
**
** Errors.  A failed data-file write, commit or sync rolls the data-file
** transaction back, confirms nothing, counts an error (kv_stats), and is
** retried with a growing delay (10 ms .. 1 s) - the batches stay queued
** and in the overlay, so no write is ever lost or skipped; the WAL still
** holds them for the next open.
**
** Reads.  A snapshot is (overlay version, a data-file read transaction).
** Both are taken under the store mutex, and the collector takes its batch
** under the same mutex, so the data file a snapshot reads never holds a
** commit published after the snapshot's overlay version.  Snapshots taken
** between two collector commits share one reader connection (refcounted);
** its read transaction ends when the last one is freed.  A table whose
** physical table does not exist yet (created, nothing collected) reads as
** empty.  Data-file read errors are returned as errors, never as "absent".
** A scan reads the data file in batches of rows, one reader-mutex hold per
** batch, and a scan of a whole table leaves its decoded rows with the
** reader for later reads of the same data-file state (see "Scan cache"
** at the cursors).
**
** Row checksums.  SQLite checks the structure of its pages, not the bytes
** of a value, so a data file created by this version stores each value as
** its bytes followed by a CRC-32C of key and value (4 bytes, big-endian),
** and bt_meta holds ('row_crc', 1).  Every read from the file checks it: a
** value whose bytes changed on disk is SQLITE_CORRUPT, never a wrong value
** (rows in a scan cache were checked as they were read).  Data files
** made before (tables but no such row) are read and written without.
**
** accelerated_repair.  With {"accelerated_repair":1} in the options of any
** open kv_btree table of the store, the collector commits its batches with
** synchronous=OFF and makes them durable together, every 8 batches or when
** the queue runs dry, with one synced commit (an fsync of the data file's
** own WAL covers every earlier frame); only then are the batches confirmed.
** WAL replay and the rule "confirm only what is durable" do not change.
*/
#include "config.h"
#include "ext/kv/backend.h"
#include "ext/kv/kv_test.h"
#include "wal/wal.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define BT_DEFAULT_LIMIT  100000   /* overlay entries per store */
#define BT_MAX_BATCH      64       /* commits per data-file transaction */
#define BT_ACCEL_EVERY    8        /* accelerated: sync every N batches */
#define BT_POOL           8        /* idle reader connections kept */
#define BT_RANGE_CACHE    8        /* idle range statements per reader */
#define BT_READER_MMAP    "268435456"  /* readers map up to 256 MiB ... */
#define BT_READER_CACHE   "-8192"      /* ... and cache 8 MiB of pages */
#define BT_SCAN_CACHE     8388608  /* decoded rows a reader keeps (bytes) */
#define BT_GATHER_MS      20       /* collector: wait for the next batch */
#define BT_GATHER_MAX_MS  100      /* collector: at most this long in all */

typedef struct BtStore BtStore;
typedef struct BtReader BtReader;
typedef struct BtJob BtJob;
typedef struct BtSnapCore BtSnapCore;
typedef struct BtRow BtRow;
typedef struct BtBlock BtBlock;

/* One row of decoded data-file rows: offsets of its key and its value
** (CRC checked and stripped) in a buffer of rows. */
struct BtRow {
  int iKey, nKey;
  int iVal, nVal;
};

/* Every row of table iId as a reader's read transaction sees it, in key
** order: built by a walk of the whole table, kept by the reader until
** that transaction ends (see "Scan cache" at the cursors). */
struct BtBlock {
  uint64_t iId;
  int nRow;
  BtRow *aRow;
  uint8_t *aData;
  int64_t nByte;
  BtBlock *pNext;
};

struct BtReader {
  sqlite3 *db;
  int bAlone;                   /* opened for a read-only store alone */
  pthread_mutex_t mu;           /* one user of db at a time */
  int nRef;                     /* store mutex */
  int nStmt;
  uint64_t aId[8];              /* cached point-read statements */
  sqlite3_stmt *aStmt[8];
  int nAbsent;                  /* r->mu: tables this read transaction */
  uint64_t aAbsent[8];          /* found missing from the data file */
  sqlite3_stmt *apTxn[3];       /* BEGIN, schema read, COMMIT (prepared) */
  int nRange;                   /* idle range statements, newest first: */
  uint64_t aRangeId[BT_RANGE_CACHE];    /* table */
  int aRangeShape[BT_RANGE_CACHE];      /* btRangeShape() */
  sqlite3_stmt *aRange[BT_RANGE_CACHE];
  BtBlock *pBlock;              /* r->mu: scan cache, one block a table */
  int64_t nBlockByte;           /* r->mu: bytes of those blocks */
  uint64_t iWarmId;             /* r->mu: table of the last bounded walks */
  int nWarm;                    /* r->mu: how many in a row (<0: too big) */
  BtReader *pNextFree;
};

#define BT_JOB_WRITE 1
#define BT_JOB_DROP  2

struct BtJob {
  int eOp;
  KvBackendTable *pTab;         /* holds a reference */
  KvMap *pBatch;                /* BT_JOB_WRITE: the committed write set */
  KvMap *pOld;                  /* overlay version replaced, freed later */
  uint64_t iSeq, cid;
  BtJob *pNext;
};

struct BtStore {
  char *zPath;                  /* <dir>/kv_btree.db */
  int bReadOnly;                /* opened for a read-only store: every
                                ** connection reads only (btOpenDb) */
  int bAlone;                   /* read-only, opened with no writer process
                                ** (KvTableDef.bShared 0): see "Read-only
                                ** stores opened alone" */
  int (*xFilesPinned)(void*);   /* KvTableDef's (may be NULL) */
  int nRef;                     /* btGlobalMutex */
  int (*xConfirm)(void*, uint64_t, const char*, int); /* KvTableDef's */
  int (*xWalSync)(void*, uint64_t, char**);           /* KvTableDef's */
  void *pConfirmCtx;
  pthread_mutex_t mu;
  pthread_cond_t condWork;      /* collector: jobs queued or stop */
  pthread_cond_t condRoom;      /* committers: overlay shrank */
  sqlite3 *dbW;                 /* collector thread only (after open) */
  int bCrc;                     /* values carry a CRC-32C (set at open) */
  KvBuf crcBuf;                 /* collector: a value with its CRC */
  BtJob *pHead; BtJob **ppTail; /* queued, not yet taken */
  int nQueued, nDropQueued;     /* jobs queued, of which DROPs */
  int64_t nOverlay, nLimit;
  uint64_t gen;                 /* collector commits so far */
  uint64_t genSynced;           /* shared: gen at the last btSharedSync
                                ** (engine mutex) */
  int nCidFile;                 /* bt_meta 'cid.<id>' rows at open */
  uint64_t *aCidFile;           /* ... table id, CID pairs (btCidLoad) */
  BtReader *pCur;               /* reader pinned at gen, or NULL */
  BtReader *pFree; int nFree;
  int nAccel;                   /* open tables asking for it */
  int bThrough;                 /* shared store (btShare): xApply writes
                                ** the data file itself, no overlay */
  int bStop, bThread;
  pthread_t thread;
  int64_t nError;
  char zError[160];
  BtStore *pNext;
};

struct KvBackendTable {
  BtStore *pStore;
  uint64_t iId;
  char *zName; int nName;
  int nRef;                     /* store mutex: engine + jobs */
  KvMap *pOverlay;              /* store mutex */
  int bDropped;                  /* store mutex: physical table dropped */
  int bAccel;
  int64_t nPending;             /* store mutex: batches not confirmed */
  uint64_t cidFile;             /* every commit of this table up to it is
                                ** in the file (bt_meta, at open) */
  int bMade;                    /* collector: physical table exists */
  sqlite3_stmt *pPut, *pDel;    /* collector only */
};

struct BtSnapCore {
  int nRef;                     /* store mutex */
  KvBackendTable *pTab;         /* holds a reference */
  KvMap *pOverlay;
  BtReader *pReader;            /* NULL: data side empty */
};

struct KvBackendSnap {
  BtSnapCore *p;
  KvBuf val;                    /* the last value xGet read */
  char *zErr;                   /* message of the last failed xGet */
};

static pthread_mutex_t btGlobalMutex = PTHREAD_MUTEX_INITIALIZER;
static BtStore *btStoreList = 0;
static const char *(*btPlainVfs)(void) = 0;   /* kv_set_plain_vfs; atomic */

void kv_set_plain_vfs(const char *(*xPlainVfs)(void)){
  __atomic_store_n(&btPlainVfs, xPlainVfs, __ATOMIC_RELEASE);
}

/* The VFS to open a data file with now (NULL: SQLite's default). */
static const char *btVfs(void){
  const char *(*xPlainVfs)(void) = __atomic_load_n(&btPlainVfs,
                                                   __ATOMIC_ACQUIRE);
  return xPlainVfs ? xPlainVfs() : 0;
}
#ifdef DEPOT_TEST
static int btFailWrites = 0;   /* test hook, see kv_test.h */
static int btFailReads = 0;    /* test hook, see kv_test.h */

void kv_btree_test_fail_writes(int n){
  __atomic_store_n(&btFailWrites, n, __ATOMIC_SEQ_CST);
}

int kv_btree_test_fail_writes_left(void){
  return __atomic_load_n(&btFailWrites, __ATOMIC_SEQ_CST);
}

void kv_btree_test_fail_reads(int n){
  __atomic_store_n(&btFailReads, n, __ATOMIC_SEQ_CST);
}

/* rc, or SQLITE_IOERR_READ while the read-failure test hook is armed. */
static int btReadFault(int rc){
  if( __atomic_load_n(&btFailReads, __ATOMIC_SEQ_CST)>0
   && __atomic_fetch_sub(&btFailReads, 1, __ATOMIC_SEQ_CST)>0 ){
    return SQLITE_IOERR_READ;
  }
  return rc;
}

/* rc, or SQLITE_IOERR_WRITE while the write-failure test hook is armed. */
static int btWriteFault(int rc){
  if( rc==SQLITE_OK && __atomic_load_n(&btFailWrites, __ATOMIC_SEQ_CST)>0 ){
    __atomic_fetch_sub(&btFailWrites, 1, __ATOMIC_SEQ_CST);
    return SQLITE_IOERR_WRITE;
  }
  return rc;
}
#else
# define btReadFault(rc)  (rc)
# define btWriteFault(rc) (rc)
#endif /* DEPOT_TEST */

/* ------------------------------------------------------ data file --- */

static int btExec(sqlite3 *db, const char *zSql){
  return sqlite3_exec(db, zSql, 0, 0, 0);
}

/* The error of a failed open of data file zPath through db (NULL: out of
** memory): its message, with the system error when SQLite recorded one,
** so a full disk reads as one ("disk I/O error (No space left on
** device)") and returns SQLITE_FULL.  A file SQLite does not take for a
** database (a damaged header) is damage: SQLITE_CORRUPT.  Returns the
** code to report. */
static int btOpenError(sqlite3 *db, int rc, const char *zPath, char **pzErr){
  int e = db ? sqlite3_system_errno(db) : 0;
  const char *zMsg = db ? sqlite3_errmsg(db) : "out of memory";
  if( (rc&0xff)==SQLITE_NOTADB || (rc&0xff)==SQLITE_CORRUPT ){
    *pzErr = sqlite3_mprintf("kv_btree: data file %s is damaged: %s", zPath,
                             zMsg);
    return SQLITE_CORRUPT;
  }
  if( e==ENOSPC || e==EDQUOT || e==EFBIG ) rc = SQLITE_FULL;
  if( e!=0 ){
    *pzErr = sqlite3_mprintf("kv_btree: cannot open data file %s: %s (%s)",
                             zPath, zMsg, strerror(e));
  }else{
    *pzErr = sqlite3_mprintf("kv_btree: cannot open data file %s: %s",
                             zPath, zMsg);
  }
  return rc;
}

/* ------------------------------------ read-only stores opened alone ---
**
** A read-only store that no writer process had open when it opened
** (KvTableDef.bReadOnly, not bShared) writes no file, not even SQLite's
** -wal and -shm of the data file, which a read-only connection of a WAL
** database creates when they are missing.  Its connections open the data
** file by URI: with immutable=1 when the file has no WAL of its own (a
** clean close removed it; nothing else is read), else mode=ro with
** readonly_shm=1 (the -shm file is read, never written).  Every snapshot
** reads through one read transaction, taken at the open and kept while
** the store reads alone: the file as it was when the store opened.
** xApply (the engine's replay of root-WAL records the file does not hold
** yet) puts the batch into the overlay only.  A writer process that opens
** the store later writes the data file's own WAL and never checkpoints it
** into the file while such a reader is there (KvTableDef.xFilesPinned), so
** that reader keeps reading the state it opened until the engine joins it
** to that writer (xRefresh: the overlay goes, the writer wrote it into the
** file, and later snapshots read the file through ordinary read-only
** connections). */

/* The URI of data file zPath for a read-only store opened alone. */
static char *btAloneUri(const char *zPath){
  int64_t nWal = 0;
  char *zWal = sqlite3_mprintf("%s-wal", zPath);
  struct stat st;
  char *z = sqlite3_mprintf("file:");
  const char *p;
  if( zWal && stat(zWal, &st)==0 ) nWal = (int64_t)st.st_size;
  sqlite3_free(zWal);
  for(p=zPath; z && *p; p++){
    unsigned char c = (unsigned char)*p;
    if( (c>='a' && c<='z') || (c>='A' && c<='Z') || (c>='0' && c<='9')
     || c=='/' || c=='.' || c=='_' || c=='-' || c=='~' ){
      z = sqlite3_mprintf("%z%c", z, c);
    }else{
      z = sqlite3_mprintf("%z%%%02X", z, c);
    }
  }
  if( z ){
    z = sqlite3_mprintf("%z?%s", z, nWal>0 ? "mode=ro&readonly_shm=1"
                                           : "immutable=1");
  }
  return z;
}

/* Open a connection on the data file (WAL mode); bReadOnly: read-only,
** on a file a writer process keeps in WAL mode; 2: read-only, for a
** read-only store opened alone (btAloneUri). */
static int btOpenDbEx(const char *zPath, int bReadOnly, sqlite3 **pDb,
                      char **pzErr){
  sqlite3 *db = 0;
  char *zUri = bReadOnly==2 ? btAloneUri(zPath) : 0;
  int rc = (bReadOnly==2 && zUri==0) ? SQLITE_NOMEM
         : sqlite3_open_v2(zUri ? zUri : zPath, &db,
                           (bReadOnly ? SQLITE_OPEN_READONLY
                           : SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE)
                           |SQLITE_OPEN_NOMUTEX|SQLITE_OPEN_PRIVATECACHE
                           |(zUri ? SQLITE_OPEN_URI : 0),
                           btVfs());
  sqlite3_free(zUri);
  if( rc==SQLITE_OK ) rc = sqlite3_extended_result_codes(db, 1);
  if( rc==SQLITE_OK ) sqlite3_busy_timeout(db, 10000);
  if( rc==SQLITE_OK && !bReadOnly ) rc = btExec(db, "PRAGMA journal_mode=WAL");
  if( rc!=SQLITE_OK ){
    rc = btOpenError(db, rc, zPath, pzErr);
    sqlite3_close(db);
    db = 0;
  }
  *pDb = db;
  return rc;
}

static int btOpenDb(const char *zPath, sqlite3 **pDb, char **pzErr){
  return btOpenDbEx(zPath, 0, pDb, pzErr);
}

/* Check the data file at open: quick_check must say "ok". */
static int btCheckDb(sqlite3 *db, const char *zPath, char **pzErr){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &pStmt, 0);
  const char *zRes = 0;
  if( rc==SQLITE_OK && (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    zRes = (const char*)sqlite3_column_text(pStmt, 0);
    rc = (zRes && strcmp(zRes, "ok")==0) ? SQLITE_OK : SQLITE_CORRUPT;
  }
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv_btree: data file %s is damaged: %s", zPath,
                             zRes ? zRes : sqlite3_errmsg(db));
    if( (rc&0xff)==SQLITE_NOTADB || (rc&0xff)==SQLITE_ROW ) rc = SQLITE_CORRUPT;
    if( (rc&0xff)==SQLITE_CORRUPT ) rc = SQLITE_CORRUPT;
  }
  sqlite3_finalize(pStmt);
  return rc;
}

/* Size in bytes of zPath (with zSuffix appended), -1 if it does not
** exist or cannot be examined (the open that follows reports that). */
static int64_t btFileSize(const char *zPath, const char *zSuffix){
  char *z = sqlite3_mprintf("%s%s", zPath, zSuffix);
  struct stat st;
  int64_t n = -1;
  if( z && stat(z, &st)==0 ) n = (int64_t)st.st_size;
  sqlite3_free(z);
  return n;
}

/* With its own WAL empty or absent, the data file is all there is, and
** SQLite writes it in whole pages only: a size that is not a whole number
** of pages means the file was cut short, and SQLite would read the lost
** bytes as zeros (wrong values, no error).  nDb/nWal: sizes before the
** open. */
static int btCheckWhole(sqlite3 *db, const char *zPath, int64_t nDb,
                        int64_t nWal, char **pzErr){
  sqlite3_stmt *pStmt = 0;
  int64_t szPage = 0;
  int rc;
  if( nDb<=0 || nWal>0 ) return SQLITE_OK;
  rc = sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &pStmt, 0);
  if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
    szPage = sqlite3_column_int64(pStmt, 0);
  }
  rc = sqlite3_finalize(pStmt);
  if( rc==SQLITE_OK && szPage>0 && nDb%szPage!=0 ){
    *pzErr = sqlite3_mprintf("kv_btree: data file %s is damaged: its size, "
        "%lld bytes, is not a whole number of %lld-byte pages (the file was "
        "cut short)", zPath, (long long)nDb, (long long)szPage);
    rc = SQLITE_CORRUPT;
  }else if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv_btree: data file %s: %s", zPath,
                             sqlite3_errmsg(db));
  }
  return rc;
}

/* Whether the data file's values carry a CRC: yes when bt_meta says so,
** or when the file holds no table yet (then it is marked so). */
static int btCrcSetup(BtStore *s){
  int rc = btExec(s->dbW, "INSERT INTO bt_meta SELECT 'row_crc', 1 WHERE NOT "
      "EXISTS (SELECT 1 FROM bt_meta WHERE k='row_crc') AND NOT EXISTS "
      "(SELECT 1 FROM sqlite_schema WHERE name GLOB 't[0-9]*')");
  sqlite3_stmt *p = 0;
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(s->dbW, "SELECT v=1 FROM bt_meta WHERE "
                            "k='row_crc'", -1, &p, 0);
  }
  if( rc==SQLITE_OK ){
    s->bCrc = sqlite3_step(p)==SQLITE_ROW && sqlite3_column_int(p, 0);
    rc = sqlite3_finalize(p);
  }
  return rc;
}

/* The last commit of each table a shared store wrote through, as bt_meta
** records it ('cid.<table id>'), into s->aCidFile (pairs of table id and
** CID; read only after the open). */
static int btCidLoad(BtStore *s){
  sqlite3_stmt *p = 0;
  int rc = sqlite3_prepare_v2(s->dbW, "SELECT CAST(substr(k,5) AS INTEGER), "
      "v FROM bt_meta WHERE k GLOB 'cid.[0-9]*'", -1, &p, 0);
  while( rc==SQLITE_OK && sqlite3_step(p)==SQLITE_ROW ){
    uint64_t *a = sqlite3_realloc64(s->aCidFile,
                                    (s->nCidFile+1)*2*sizeof(uint64_t));
    if( a==0 ){ rc = SQLITE_NOMEM; break; }
    s->aCidFile = a;
    a[s->nCidFile*2] = (uint64_t)sqlite3_column_int64(p, 0);
    a[s->nCidFile*2+1] = (uint64_t)sqlite3_column_int64(p, 1);
    s->nCidFile++;
  }
  if( rc==SQLITE_OK ) rc = sqlite3_finalize(p); else sqlite3_finalize(p);
  return rc;
}

/* The CID bt_meta recorded for table iId at open, or 0. */
static uint64_t btCidFile(BtStore *s, uint64_t iId){
  int i;
  for(i=0; i<s->nCidFile; i++){
    if( s->aCidFile[i*2]==iId ) return s->aCidFile[i*2+1];
  }
  return 0;
}

/* The CRC-32C of a row, as stored after its value. */
static uint32_t btRowCrc(const void *aKey, int nKey, const void *aVal,
                         int nVal){
  return wal_crc32c(wal_crc32c(0, aKey, (size_t)nKey), aVal, (size_t)nVal);
}

/* Append value aVal of row aKey to pBuf; with bCrc, check and strip its
** CRC first: SQLITE_CORRUPT if it does not match. */
static int btRowValue(int bCrc, const uint8_t *aKey, int nKey,
                      const uint8_t *aVal, int nVal, KvBuf *pBuf){
  if( bCrc ){
    uint32_t x;
    if( nVal<4 ) return SQLITE_CORRUPT;
    nVal -= 4;
    x = wal_get_be32(aVal+nVal);
    if( x!=btRowCrc(aKey, nKey, aVal, nVal) ) return SQLITE_CORRUPT;
  }
  return kv_buf_append(pBuf, aVal, nVal);
}

/* A read-only store's connection: it writes nothing (no bt_meta, no
** journal mode), and only reads whether values carry a CRC. */
static int btOpenReadOnly(BtStore *s, char **pzErr){
  sqlite3_stmt *p = 0;
  int rc = btOpenDbEx(s->zPath, 1+s->bAlone, &s->dbW, pzErr);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(s->dbW, "SELECT v=1 FROM bt_meta WHERE "
                            "k='row_crc'", -1, &p, 0);
    if( rc==SQLITE_OK ){
      s->bCrc = sqlite3_step(p)==SQLITE_ROW && sqlite3_column_int(p, 0);
      rc = sqlite3_finalize(p);
    }
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv_btree: cannot read data file %s: %s",
                               s->zPath, sqlite3_errmsg(s->dbW));
    }
  }
  return rc;
}

/* Message text of a failed data-file read rc on db: a value that failed
** its CRC (bBad) or SQLite's error. */
static const char *btReadErrText(sqlite3 *db, int rc, int bBad){
  if( bBad ) return "a stored value fails its checksum (the file is damaged)";
  return sqlite3_extended_errcode(db)==rc ? sqlite3_errmsg(db)
                                          : sqlite3_errstr(rc);
}

/* The writer connection's WAL hook, in place of SQLite's automatic
** checkpoint (the same: a passive checkpoint once the data file's own WAL
** holds BT_CKPT_FRAMES frames), but none while a read-only process reads
** the file as it was (see "Read-only stores opened alone"). */
#define BT_CKPT_FRAMES 1000
static int btWalHook(void *pArg, sqlite3 *db, const char *zDb, int nFrame){
  BtStore *s = (BtStore*)pArg;
  if( nFrame>=BT_CKPT_FRAMES
   && !(s->xFilesPinned && s->xFilesPinned(s->pConfirmCtx)) ){
    sqlite3_wal_checkpoint_v2(db, zDb, SQLITE_CHECKPOINT_PASSIVE, 0, 0);
  }
  return SQLITE_OK;
}

static int btOpenWriter(BtStore *s, char **pzErr){
  int64_t nDb = btFileSize(s->zPath, "");
  int64_t nWal = btFileSize(s->zPath, "-wal");
  int rc;
  if( s->bReadOnly ) return btOpenReadOnly(s, pzErr);
  rc = btOpenDb(s->zPath, &s->dbW, pzErr);
  if( rc==SQLITE_OK ) sqlite3_wal_hook(s->dbW, btWalHook, s);
  if( rc==SQLITE_OK ) rc = btCheckDb(s->dbW, s->zPath, pzErr);
  if( rc==SQLITE_OK ) rc = btCheckWhole(s->dbW, s->zPath, nDb, nWal, pzErr);
  if( rc==SQLITE_OK ){
    rc = btExec(s->dbW, "PRAGMA synchronous=FULL;"
        "CREATE TABLE IF NOT EXISTS bt_meta(k TEXT PRIMARY KEY, v) "
        "WITHOUT ROWID");
    if( rc==SQLITE_OK ) rc = btCrcSetup(s);
    if( rc==SQLITE_OK ) rc = btCidLoad(s);
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv_btree: cannot set up data file %s: %s",
                               s->zPath, sqlite3_errmsg(s->dbW));
    }
  }
  return rc;
}

/* ------------------------------------------------------- readers --- */

/* Drop the reader's scan cache (no walk uses it: its snapshots are gone,
** or it is closing). */
static void btReaderDropBlocks(BtReader *r){
  while( r->pBlock ){
    BtBlock *b = r->pBlock;
    r->pBlock = b->pNext;
    sqlite3_free(b->aRow);
    sqlite3_free(b->aData);
    sqlite3_free(b);
  }
  r->nBlockByte = 0;
  r->nWarm = 0;
}

/* Index of the first row of block b >= key (bGt: > key). */
static int btBlockBound(const BtBlock *b, const void *aKey, int nKey,
                        int bGt){
  int lo = 0, hi = b->nRow;
  while( lo<hi ){
    int mid = (lo+hi)/2;
    const BtRow *pRow = &b->aRow[mid];
    int n = pRow->nKey<nKey ? pRow->nKey : nKey;
    int c = memcmp(b->aData + pRow->iKey, aKey, (size_t)n);
    if( c==0 ) c = pRow->nKey - nKey;
    if( c<0 || (bGt && c==0) ) lo = mid+1; else hi = mid;
  }
  return lo;
}

/* The scan-cache block of table iId on r, or NULL (r->mu held). */
static BtBlock *btReaderBlock(BtReader *r, uint64_t iId){
  BtBlock *b;
  for(b=r->pBlock; b && b->iId!=iId; b=b->pNext){}
  return b;
}

static void btReaderClose(BtReader *r){
  int i;
  btReaderDropBlocks(r);
  for(i=0; i<r->nStmt; i++) sqlite3_finalize(r->aStmt[i]);
  for(i=0; i<r->nRange; i++) sqlite3_finalize(r->aRange[i]);
  for(i=0; i<3; i++) sqlite3_finalize(r->apTxn[i]);
  sqlite3_close(r->db);
  pthread_mutex_destroy(&r->mu);
  sqlite3_free(r);
}

/* Run transaction statement i of r (0 BEGIN, 1 a read of the schema, which
** starts the read transaction, 2 COMMIT), prepared once per connection. */
static int btReaderTxn(BtReader *r, int i){
  static const char *azSql[3] = {
    "BEGIN", "SELECT 1 FROM sqlite_schema LIMIT 1", "COMMIT"
  };
  int rc = SQLITE_OK;
  if( r->apTxn[i]==0 ){
    rc = sqlite3_prepare_v3(r->db, azSql[i], -1, SQLITE_PREPARE_PERSISTENT,
                            &r->apTxn[i], 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(r->apTxn[i]);
    rc = (rc==SQLITE_DONE || rc==SQLITE_ROW) ? SQLITE_OK : rc;
    if( sqlite3_reset(r->apTxn[i])!=SQLITE_OK && rc==SQLITE_OK ){
      rc = sqlite3_errcode(r->db);
    }
  }
  return rc;
}

/* A reader with an open read transaction (store mutex held). */
static int btReaderPin(BtStore *s, BtReader **pp){
  BtReader *r = s->pFree;
  char *zErr = 0;
  int rc = SQLITE_OK;
  *pp = 0;
  if( r ){
    s->pFree = r->pNextFree;
    s->nFree--;
  }else{
    r = sqlite3_malloc64(sizeof(*r));
    if( r==0 ) return SQLITE_NOMEM;
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, 0);
    r->bAlone = s->bAlone;
    rc = btOpenDbEx(s->zPath, s->bReadOnly+s->bAlone, &r->db, &zErr);
    sqlite3_free(zErr);
    /* Readers only read: the data file mapped (no read() per page) and a
    ** cache that holds a working set, not SQLite's 2 MB default. */
    if( rc==SQLITE_OK ){
      rc = btExec(r->db, "PRAGMA mmap_size=" BT_READER_MMAP ";"
                         "PRAGMA cache_size=" BT_READER_CACHE);
    }
    if( rc!=SQLITE_OK ){ btReaderClose(r); return rc; }
  }
  rc = btReaderTxn(r, 0);
  if( rc==SQLITE_OK ) rc = btReaderTxn(r, 1);
  if( rc!=SQLITE_OK ){ btReaderClose(r); return rc; }
  r->nRef = 1;
  *pp = r;
  return SQLITE_OK;
}

/* Drop a reference (store mutex held): end the read transaction and keep
** the connection for later. */
static void btReaderUnref(BtStore *s, BtReader *r){
  if( r==0 || --r->nRef>0 ) return;
  btReaderDropBlocks(r);        /* its rows are of the ending transaction */
  r->nAbsent = 0;               /* so are its absent tables */
  if( btReaderTxn(r, 2)!=SQLITE_OK || s->nFree>=BT_POOL
   || r->bAlone!=s->bAlone ){
    btReaderClose(r);
    return;
  }
  r->pNextFree = s->pFree;
  s->pFree = r;
  s->nFree++;
}

/* The point-read statement of table iId on r (r->mu held). */
static int btReaderStmt(BtReader *r, uint64_t iId, sqlite3_stmt **pp){
  char *zSql;
  int i, rc;
  for(i=0; i<r->nStmt; i++){
    if( r->aId[i]==iId ){ *pp = r->aStmt[i]; return SQLITE_OK; }
  }
  zSql = sqlite3_mprintf("SELECT v FROM t%llu WHERE k=?1",
                         (unsigned long long)iId);
  if( zSql==0 ) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v3(r->db, zSql, -1, SQLITE_PREPARE_PERSISTENT, pp, 0);
  sqlite3_free(zSql);
  if( rc!=SQLITE_OK ) return rc;
  if( r->nStmt==8 ){
    sqlite3_finalize(r->aStmt[7]);
    r->nStmt--;
  }
  memmove(&r->aId[1], &r->aId[0], r->nStmt*sizeof(r->aId[0]));
  memmove(&r->aStmt[1], &r->aStmt[0], r->nStmt*sizeof(r->aStmt[0]));
  r->aId[0] = iId;
  r->aStmt[0] = *pp;
  r->nStmt++;
  return SQLITE_OK;
}


/* 1 if rc/db say the physical table does not exist (an empty table). */
static int btNoTable(sqlite3 *db, int rc){
  return rc==SQLITE_ERROR
      && strncmp(sqlite3_errmsg(db), "no such table", 13)==0;
}

/* ------------------------------------------------------ collector --- */

static void btTableUnref(KvBackendTable *t);   /* store mutex held */

static void btNote(BtStore *s, int rc, const char *zWhat){
  pthread_mutex_lock(&s->mu);
  s->nError++;
  pthread_cond_broadcast(&s->condRoom);
  sqlite3_snprintf(sizeof(s->zError), s->zError, "%s: %s (rc=%d)", zWhat,
                   s->dbW ? sqlite3_errmsg(s->dbW) : "", rc);
  pthread_mutex_unlock(&s->mu);
  sqlite3_log(rc, "kv_btree: collector of %s: %s", s->zPath, s->zError);
}

/* Physical table statements for t (collector thread). */
static int btMakeTable(BtStore *s, KvBackendTable *t){
  char *zSql;
  int rc;
  if( t->bMade ) return SQLITE_OK;
  sqlite3_finalize(t->pPut); t->pPut = 0;
  sqlite3_finalize(t->pDel); t->pDel = 0;
  zSql = sqlite3_mprintf("CREATE TABLE IF NOT EXISTS t%llu(k BLOB PRIMARY "
      "KEY NOT NULL, v BLOB NOT NULL) WITHOUT ROWID",
      (unsigned long long)t->iId);
  if( zSql==0 ) return SQLITE_NOMEM;
  rc = btExec(s->dbW, zSql);
  sqlite3_free(zSql);
  if( rc!=SQLITE_OK ) return rc;
  zSql = sqlite3_mprintf("INSERT OR REPLACE INTO t%llu(k,v) VALUES(?1,?2)",
                         (unsigned long long)t->iId);
  rc = zSql ? sqlite3_prepare_v2(s->dbW, zSql, -1, &t->pPut, 0) : SQLITE_NOMEM;
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("DELETE FROM t%llu WHERE k=?1",
                         (unsigned long long)t->iId);
  if( rc==SQLITE_OK ){
    rc = zSql ? sqlite3_prepare_v2(s->dbW, zSql, -1, &t->pDel, 0) : SQLITE_NOMEM;
  }
  sqlite3_free(zSql);
  t->bMade = rc==SQLITE_OK;
  return rc;
}

/* s->crcBuf = the value of entry e followed by its row CRC. */
static int btCrcValue(BtStore *s, const KvMapEntry *e){
  uint32_t x = btRowCrc(e->aKey, e->nKey, e->aVal, e->nVal);
  uint8_t a[4];
  int rc;
  wal_put_be32(a, x);
  kv_buf_reset(&s->crcBuf);
  rc = kv_buf_append(&s->crcBuf, e->aVal, e->nVal);
  if( rc==SQLITE_OK ) rc = kv_buf_append(&s->crcBuf, a, 4);
  return rc;
}

/* Write one batch into the open data-file transaction. */
static int btWriteJob(BtStore *s, BtJob *j){
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bOn, rc;
  if( j->eOp==BT_JOB_DROP ){
    char *z = sqlite3_mprintf("DROP TABLE IF EXISTS t%llu",
                              (unsigned long long)j->pTab->iId);
    rc = z ? btExec(s->dbW, z) : SQLITE_NOMEM;
    sqlite3_free(z);
    j->pTab->bMade = 0;
    return rc;
  }
  rc = btMakeTable(s, j->pTab);
  if( rc!=SQLITE_OK || j->eOp!=BT_JOB_WRITE ) return rc;
  if( (pCsr = kv_map_cursor_new(j->pBatch))==0 ) return SQLITE_NOMEM;
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn && rc==SQLITE_OK;
      bOn=kv_map_cursor_next(pCsr)){
    sqlite3_stmt *p;
    kv_map_cursor_entry(pCsr, &e);
    p = e.bTomb ? j->pTab->pDel : j->pTab->pPut;
    sqlite3_bind_blob(p, 1, e.aKey, e.nKey, SQLITE_STATIC);
    if( !e.bTomb && s->bCrc ){
      rc = btCrcValue(s, &e);
      if( rc!=SQLITE_OK ) break;
      sqlite3_bind_blob(p, 2, s->crcBuf.a, s->crcBuf.n, SQLITE_STATIC);
    }else if( !e.bTomb ){
      sqlite3_bind_blob(p, 2, e.nVal ? e.aVal : (const void*)"", e.nVal,
                        SQLITE_STATIC);
    }
    rc = sqlite3_step(p);
    sqlite3_reset(p);
    rc = rc==SQLITE_DONE ? SQLITE_OK : (rc==SQLITE_ROW ? SQLITE_OK : rc);
    if( rc==SQLITE_OK ) rc = sqlite3_reset(p);
  }
  kv_map_cursor_free(pCsr);
  return rc;
}

/* Before the data file takes the jobs of pList: the root WAL holds their
** records durably (write-ahead: the records of commits that deferred the
** WAL flush, KV_SYNC_NORMAL, are flushed here). */
static int btWalSync(BtStore *s, BtJob *pList){
  uint64_t cid = 0;
  char *zErr = 0;
  int rc;
  BtJob *j;
  for(j=pList; j; j=j->pNext){
    if( j->eOp==BT_JOB_WRITE && j->cid>cid ) cid = j->cid;
  }
  if( cid==0 || s->xWalSync==0 ) return SQLITE_OK;
  rc = s->xWalSync(s->pConfirmCtx, cid, &zErr);
  if( rc!=SQLITE_OK ){
    pthread_mutex_lock(&s->mu);
    s->nError++;
    pthread_cond_broadcast(&s->condRoom);
    sqlite3_snprintf(sizeof(s->zError), s->zError, "root WAL flush: %s "
                     "(rc=%d)", zErr ? zErr : sqlite3_errstr(rc), rc);
    pthread_mutex_unlock(&s->mu);
    sqlite3_log(rc, "kv_btree: collector of %s: %s", s->zPath, s->zError);
  }
  sqlite3_free(zErr);
  return rc;
}

/* Record in the open data-file transaction that it holds the writes of
** commit cid to table iId (and, by the order of the file's commits, those
** of every earlier commit to it). */
static int btCidNote(BtStore *s, uint64_t iId, uint64_t cid){
  char *z = sqlite3_mprintf("INSERT OR REPLACE INTO bt_meta VALUES("
      "'cid.%llu', %lld)", (unsigned long long)iId, (long long)cid);
  int rc = z ? btExec(s->dbW, z) : SQLITE_NOMEM;
  sqlite3_free(z);
  return rc;
}

/* One data-file transaction holding every job of the list: synced
** (bSync 1), not (0), or at synchronous=NORMAL (2: the file's own WAL is
** synced at its checkpoints only, so a power loss may take the last
** commits but never damages the file). */
static int btWriteBatch(BtStore *s, BtJob *pList, int bSync){
  BtJob *j;
  int rc = btWalSync(s, pList);
  if( rc!=SQLITE_OK ) return rc;
  rc = btExec(s->dbW, bSync==1 ? "PRAGMA synchronous=FULL"
                    : bSync==2 ? "PRAGMA synchronous=NORMAL"
                               : "PRAGMA synchronous=OFF");
  if( rc==SQLITE_OK ) rc = btExec(s->dbW, "BEGIN IMMEDIATE");
  for(j=pList; j && rc==SQLITE_OK; j=j->pNext) rc = btWriteJob(s, j);
  if( rc==SQLITE_OK && bSync==2 && pList && pList->cid ){
    rc = btCidNote(s, pList->pTab->iId, pList->cid);  /* see btApply */
  }
  rc = btWriteFault(rc);
  if( rc==SQLITE_OK && pList==0 ){
    /* nothing to write: a synced commit of its own makes the batches
    ** committed before it durable (accelerated_repair) */
    rc = btExec(s->dbW, "INSERT OR REPLACE INTO bt_meta VALUES('sync', "
                        "coalesce((SELECT v FROM bt_meta WHERE k='sync'),0)+1)");
  }
  if( rc==SQLITE_OK ) rc = btExec(s->dbW, "COMMIT");
  if( rc!=SQLITE_OK ){
    btNote(s, rc, "data-file write");
    btExec(s->dbW, "ROLLBACK");
    for(j=pList; j; j=j->pNext) if( j->pTab->bMade ) j->pTab->bMade = 0;
  }
  return rc;
}

/* Drop the overlay entries of a durable write job (store mutex held).
** When it was the table's last pending job, every overlay entry came from
** a durable job: the overlay is swapped for an empty one and the old
** version is left in j->pOld to be freed outside the mutex.  Otherwise
** each key still tagged with this job is removed. */
static void btOverlayDrop(BtStore *s, BtJob *j){
  KvBackendTable *t = j->pTab;
  KvMapCursor *pCsr;
  KvMapEntry e, o;
  int bOn;
  if( --t->nPending==0 && (j->pOld = kv_map_new())!=0 ){
    KvMap *pOld = t->pOverlay;
    s->nOverlay -= kv_map_count(pOld);
    t->pOverlay = j->pOld;
    j->pOld = pOld;
    return;
  }
  pCsr = kv_map_cursor_new(j->pBatch);
  for(bOn=pCsr ? kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0) : 0; bOn;
      bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    if( kv_map_get(t->pOverlay, e.aKey, e.nKey, &o)
     && o.rev==j->iSeq
     && kv_map_remove(&t->pOverlay, e.aKey, e.nKey)==SQLITE_OK ){
      s->nOverlay--;
    }
  }
  kv_map_cursor_free(pCsr);
}

/* After a durable commit: confirm each batch, then drop the overlay
** entries still tagged with it, and free the jobs. */
static void btFinishJobs(BtStore *s, BtJob *pList){
  BtJob *j, *pNext;
  for(j=pList; j; j=j->pNext){
    if( j->eOp==BT_JOB_WRITE && j->cid ){
      s->xConfirm(s->pConfirmCtx, j->cid, j->pTab->zName, j->pTab->nName);
    }
  }
  pthread_mutex_lock(&s->mu);
  for(j=pList; j; j=j->pNext){
    if( j->eOp==BT_JOB_DROP ) j->pTab->bDropped = 1;
    if( j->eOp==BT_JOB_WRITE ){
      btOverlayDrop(s, j);
      kv_map_unref(j->pBatch);
    }
    btTableUnref(j->pTab);
  }
  pthread_cond_broadcast(&s->condRoom);
  pthread_mutex_unlock(&s->mu);
  for(j=pList; j; j=pNext){
    pNext = j->pNext;
    kv_map_unref(j->pOld);
    sqlite3_free(j);
  }
}

/* New data is in the file: later snapshots need a new reader. */
static void btNewGeneration(BtStore *s){
  pthread_mutex_lock(&s->mu);
  s->gen++;
  if( s->pCur ){ btReaderUnref(s, s->pCur); s->pCur = 0; }
  pthread_mutex_unlock(&s->mu);
}

/* Count a list of jobs in or out of the queue (store mutex held). */
static void btQueueCount(BtStore *s, BtJob *pList, int iDir){
  BtJob *j;
  for(j=pList; j; j=j->pNext){
    s->nQueued += iDir;
    if( j->eOp==BT_JOB_DROP ) s->nDropQueued += iDir;
  }
}

/* Take up to BT_MAX_BATCH queued jobs (store mutex held). */
static BtJob *btTake(BtStore *s){
  BtJob *pList = s->pHead, *j = pList;
  int n = 1;
  if( j==0 ) return 0;
  while( j->pNext && n<BT_MAX_BATCH ){ j = j->pNext; n++; }
  s->pHead = j->pNext;
  if( s->pHead==0 ) s->ppTail = &s->pHead;
  j->pNext = 0;
  btQueueCount(s, pList, -1);
  return pList;
}

/* The CLOCK_REALTIME time (the clock of pthread_cond_timedwait) nMs
** milliseconds from now. */
static void btDeadline(struct timespec *pOut, int nMs){
  clock_gettime(CLOCK_REALTIME, pOut);
  pOut->tv_sec += nMs/1000;
  pOut->tv_nsec += (long)(nMs%1000)*1000000L;
  if( pOut->tv_nsec>=1000000000L ){
    pOut->tv_sec++;
    pOut->tv_nsec -= 1000000000L;
  }
}

static int btBefore(const struct timespec *a, const struct timespec *b){
  return a->tv_sec<b->tv_sec
      || (a->tv_sec==b->tv_sec && a->tv_nsec<b->tv_nsec);
}

/* Gather more queued batches before writing (store mutex held), so that
** one data-file transaction and one sync carry several commits: wait while
** batches keep arriving less than BT_GATHER_MS apart, for at most
** BT_GATHER_MAX_MS.  Returns at once when the store stops, when a full
** batch or a DROP is queued, or when the overlays are half full
** (committers must not come near the back-pressure limit because of this
** wait). */
static void btGather(BtStore *s){
  struct timespec tEnd, tNext;
  if( s->pHead==0 ) return;
  btDeadline(&tEnd, BT_GATHER_MAX_MS);
  while( !s->bStop && s->nQueued<BT_MAX_BATCH && s->nDropQueued==0
      && s->nOverlay<s->nLimit/2 ){
    btDeadline(&tNext, BT_GATHER_MS);
    if( btBefore(&tEnd, &tNext) ) tNext = tEnd;
    if( pthread_cond_timedwait(&s->condWork, &s->mu, &tNext)==ETIMEDOUT ){
      break;
    }
  }
}

static void btAppendList(BtJob **ppList, BtJob *pAdd){
  while( *ppList ) ppList = &(*ppList)->pNext;
  *ppList = pAdd;
}

static void btBackoff(int *pnMs){
  struct timespec ts;
  *pnMs = *pnMs ? (*pnMs*2>1000 ? 1000 : *pnMs*2) : 10;
  ts.tv_sec = *pnMs/1000;
  ts.tv_nsec = (long)(*pnMs%1000)*1000000L;
  nanosleep(&ts, 0);
}

/* Put jobs back at the head of the queue (store mutex held). */
static void btRequeue(BtStore *s, BtJob *pList){
  BtJob *j = pList;
  if( j==0 ) return;
  btQueueCount(s, pList, 1);
  while( j->pNext ) j = j->pNext;
  j->pNext = s->pHead;
  if( s->pHead==0 ) s->ppTail = &j->pNext;
  s->pHead = pList;
}

/* Free jobs without confirming them (closing after failed writes: the
** WAL still holds their records for the next open). */
static void btAbandon(BtStore *s, BtJob *pList){
  BtJob *j;
  pthread_mutex_lock(&s->mu);
  while( (j = pList)!=0 ){
    pList = j->pNext;
    if( j->eOp==BT_JOB_WRITE ) j->pTab->nPending--;
    kv_map_unref(j->pBatch);
    btTableUnref(j->pTab);
    sqlite3_free(j);
  }
  pthread_cond_broadcast(&s->condRoom);
  pthread_mutex_unlock(&s->mu);
}

/* The collector thread: batches -> data file -> sync -> confirm -> drop
** overlay entries.  Runs until the store closes and its queue is empty
** (or, at close, its writes keep failing). */
static void *btCollector(void *pArg){
  BtStore *s = (BtStore*)pArg;
  BtJob *pDone = 0;               /* committed, not yet synced (accel) */
  int nDone = 0, nMs = 0;
  for(;;){
    BtJob *pList;
    int bSync, bStop, rc;
    pthread_mutex_lock(&s->mu);
    while( s->pHead==0 && !s->bStop && pDone==0 ){
      pthread_cond_wait(&s->condWork, &s->mu);
    }
    if( s->pHead==0 && s->bStop && pDone==0 ){
      pthread_mutex_unlock(&s->mu);
      break;
    }
    btGather(s);
    pList = btTake(s);
    bStop = s->bStop;
    bSync = s->nAccel==0 || s->pHead==0 || nDone+1>=BT_ACCEL_EVERY;
    pthread_mutex_unlock(&s->mu);
    rc = btWriteBatch(s, pList, bSync);
    if( rc!=SQLITE_OK ){
      if( bStop ){
        btAbandon(s, pList);
        btAbandon(s, pDone);
        pthread_mutex_lock(&s->mu);
        pList = s->pHead; s->pHead = 0; s->ppTail = &s->pHead;
        btQueueCount(s, pList, -1);
        pthread_mutex_unlock(&s->mu);
        btAbandon(s, pList);
        break;
      }
      pthread_mutex_lock(&s->mu);
      btRequeue(s, pList);
      pthread_mutex_unlock(&s->mu);
      btBackoff(&nMs);
      continue;
    }
    nMs = 0;
    btNewGeneration(s);
    btAppendList(&pDone, pList);
    nDone++;
    if( bSync ){
      btFinishJobs(s, pDone);
      pDone = 0;
      nDone = 0;
    }
  }
  return 0;
}

/* --------------------------------------------------------- stores --- */

static void btStoreFree(BtStore *s){
  BtReader *r;
  if( s->bThread ){
    pthread_mutex_lock(&s->mu);
    s->bStop = 1;
    pthread_cond_broadcast(&s->condWork);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, 0);
  }
  if( s->pCur ) btReaderUnref(s, s->pCur);
  while( (r = s->pFree)!=0 ){ s->pFree = r->pNextFree; btReaderClose(r); }
  if( s->dbW && !s->bReadOnly && s->xFilesPinned
   && s->xFilesPinned(s->pConfirmCtx) ){
    /* the last close would checkpoint into the file a reader reads */
    sqlite3_db_config(s->dbW, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int*)0);
  }
  sqlite3_close(s->dbW);
  sqlite3_free(s->aCidFile);
  kv_buf_free(&s->crcBuf);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->condWork);
  pthread_cond_destroy(&s->condRoom);
  sqlite3_free(s->zPath);
  sqlite3_free(s);
}

static int btStoreNew(const KvTableDef *pDef, BtStore **pp, char **pzErr){
  BtStore *s = sqlite3_malloc64(sizeof(*s));
  int rc;
  *pp = 0;
  if( s==0 ) return SQLITE_NOMEM;
  memset(s, 0, sizeof(*s));
  pthread_mutex_init(&s->mu, 0);
  pthread_cond_init(&s->condWork, 0);
  pthread_cond_init(&s->condRoom, 0);
  s->ppTail = &s->pHead;
  s->nLimit = BT_DEFAULT_LIMIT;
  s->xConfirm = pDef->xConfirm;
  s->xWalSync = pDef->xWalSync;
  s->pConfirmCtx = pDef->pConfirmCtx;
  s->nRef = 1;
  s->bReadOnly = pDef->bReadOnly;
  s->bAlone = pDef->bReadOnly && !pDef->bShared;
  s->xFilesPinned = pDef->xFilesPinned;
  s->zPath = sqlite3_mprintf("%s/kv_btree.db", pDef->zStore);
  rc = s->zPath ? btOpenWriter(s, pzErr) : SQLITE_NOMEM;
  if( rc==SQLITE_OK && s->bAlone ){
    /* the one read transaction of every snapshot, from the open on */
    pthread_mutex_lock(&s->mu);
    rc = btReaderPin(s, &s->pCur);
    pthread_mutex_unlock(&s->mu);
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv_btree: cannot read data file %s",
                               s->zPath);
    }
  }
  if( rc==SQLITE_OK ){
    rc = pthread_create(&s->thread, 0, btCollector, s)==0 ? SQLITE_OK
                                                         : SQLITE_NOMEM;
    s->bThread = rc==SQLITE_OK;
  }
  if( rc!=SQLITE_OK ){ btStoreFree(s); return rc; }
  *pp = s;
  return SQLITE_OK;
}

/* Opening the data file for a table that the store's catalog file lists.
** That table's create made the data file (synced, through the file's own
** WAL) before the catalog was saved, so a data file that is gone or empty,
** with no WAL of its own holding frames, was deleted or truncated since.
** SQLite would start a new, empty one and every table would read as
** empty: refuse instead, creating nothing, so every later open refuses
** too. */
static int btCheckPresent(const char *zPath, const KvTableDef *pDef,
                          char **pzErr){
  int64_t nDb = btFileSize(zPath, "");
  if( nDb>0 || btFileSize(zPath, "-wal")>0 ) return SQLITE_OK;
  *pzErr = sqlite3_mprintf("kv_btree: data file %s is %s, but the catalog "
      "of the store lists kv_btree table %.*s: the file was deleted or "
      "truncated", zPath, nDb<0 ? "missing" : "empty", pDef->nName,
      pDef->zName);
  return SQLITE_CORRUPT;
}

/* The store of pDef->zStore, opened if needed (one reference).  bListed:
** the table is in the catalog file (see btCheckPresent). */
static int btStoreGet(const KvTableDef *pDef, int bListed, BtStore **pp,
                      char **pzErr){
  BtStore *s;
  int rc = SQLITE_OK;
  char *zPath = sqlite3_mprintf("%s/kv_btree.db", pDef->zStore);
  if( zPath==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&btGlobalMutex);
  for(s=btStoreList; s && (strcmp(s->zPath, zPath)!=0
                           || s->bReadOnly!=pDef->bReadOnly); s=s->pNext){}
  if( s ){
    s->nRef++;
  }else if( bListed && (rc = btCheckPresent(zPath, pDef, pzErr))!=SQLITE_OK ){
    s = 0;
  }else if( (rc = btStoreNew(pDef, &s, pzErr))==SQLITE_OK ){
    s->pNext = btStoreList;
    btStoreList = s;
  }
  pthread_mutex_unlock(&btGlobalMutex);
  sqlite3_free(zPath);
  *pp = s;
  return rc;
}

/* Drop a reference; the last one drains the queue and closes. */
static void btStoreUnref(BtStore *s){
  BtStore **pp;
  pthread_mutex_lock(&btGlobalMutex);
  if( --s->nRef>0 ){ pthread_mutex_unlock(&btGlobalMutex); return; }
  for(pp=&btStoreList; *pp!=s; pp=&(*pp)->pNext){}
  *pp = s->pNext;
  pthread_mutex_unlock(&btGlobalMutex);
  btStoreFree(s);
}

/* --------------------------------------------------------- tables --- */

static void btTableUnref(KvBackendTable *t){
  if( --t->nRef>0 ) return;
  sqlite3_finalize(t->pPut);
  sqlite3_finalize(t->pDel);
  kv_map_unref(t->pOverlay);
  sqlite3_free(t);
}

/* Queue a job (store mutex held). */
static int btQueue(BtStore *s, KvBackendTable *t, int eOp, KvMap *pBatch,
                   uint64_t iSeq, uint64_t cid){
  BtJob *j = sqlite3_malloc64(sizeof(*j));
  if( j==0 ) return SQLITE_NOMEM;
  memset(j, 0, sizeof(*j));
  j->eOp = eOp;
  j->pTab = t;
  t->nRef++;
  j->pBatch = kv_map_ref(pBatch);
  j->iSeq = iSeq;
  j->cid = cid;
  if( eOp==BT_JOB_WRITE ) t->nPending++;
  s->nQueued++;
  if( eOp==BT_JOB_DROP ) s->nDropQueued++;
  *s->ppTail = j;
  s->ppTail = &j->pNext;
  pthread_cond_signal(&s->condWork);
  return SQLITE_OK;
}

int kv_btree_accel_option(const char *z){
  const char *p = z ? strstr(z, "\"accelerated_repair\"") : 0;
  if( p==0 ) return 0;
  p += 20;
  while( *p==' ' || *p==':' ) p++;
  return *p=='1' || strncmp(p, "true", 4)==0;
}

static int btOpen(const KvTableDef *pDef, int bCreate, KvBackendTable **pp,
                  char **pzErr){
  KvBackendTable *t;
  BtStore *s = 0;
  int rc;
  *pp = 0;
  if( pDef->zStore==0 || pDef->xConfirm==0 ){
    *pzErr = sqlite3_mprintf("kv_btree: tables need a store directory");
    return SQLITE_MISUSE;
  }
  t = sqlite3_malloc64(sizeof(*t) + pDef->nName + 1);
  if( t==0 ) return SQLITE_NOMEM;
  memset(t, 0, sizeof(*t));
  t->zName = (char*)&t[1];
  memcpy(t->zName, pDef->zName, pDef->nName);
  t->zName[pDef->nName] = 0;
  t->nName = pDef->nName;
  t->iId = pDef->iTableId;
  t->nRef = 1;
  t->pOverlay = kv_map_new();
  t->bAccel = kv_btree_accel_option(pDef->zOptions);
  rc = t->pOverlay ? btStoreGet(pDef, !bCreate, &s, pzErr) : SQLITE_NOMEM;
  if( rc!=SQLITE_OK ){ kv_map_unref(t->pOverlay); sqlite3_free(t); return rc; }
  t->pStore = s;
  t->cidFile = btCidFile(s, t->iId);
  pthread_mutex_lock(&s->mu);
  s->nAccel += t->bAccel;
  pthread_mutex_unlock(&s->mu);
  *pp = t;
  return rc;
}

static void btClose(KvBackendTable *t){
  BtStore *s;
  if( t==0 ) return;
  s = t->pStore;
  pthread_mutex_lock(&s->mu);
  s->nAccel -= t->bAccel;
  btTableUnref(t);
  pthread_mutex_unlock(&s->mu);
  btStoreUnref(s);
}

/* The removal is committed: the collector drops the physical table after
** the batches queued before, and this waits for that commit (the engine
** saves its catalog only afterwards, so the id of a dropped table never
** names a physical table again).  Durable when it returns: the DROP is
** committed to the data file - unless the collector is failing, in which
** case it stays queued and is done once writes succeed again. */
static int btDrop(KvBackendTable *t, char **pzErr){
  BtStore *s = t->pStore;
  int64_t nErr0;
  int rc;
  (void)pzErr;
  pthread_mutex_lock(&s->mu);
  nErr0 = s->nError;
  rc = btQueue(s, t, BT_JOB_DROP, 0, 0, 0);
  /* A failing collector keeps the job queued (it drops the table once it
  ** can write again); this does not wait for that. */
  while( rc==SQLITE_OK && !t->bDropped && !s->bStop && s->nError==nErr0 ){
    pthread_cond_wait(&s->condRoom, &s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* A read-only store opened alone: the replay of a record the data file
** does not hold yet goes into the overlay only (nothing is queued: the
** file is never written; engine mutex held). */
static int btApplyOverlay(KvBackendTable *t, KvMap *pBatch, uint64_t iSeq){
  BtStore *s = t->pStore;
  KvMapCursor *pCsr = kv_map_cursor_new(pBatch);
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  if( pCsr==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&s->mu);
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn && rc==SQLITE_OK;
      bOn=kv_map_cursor_next(pCsr)){
    kv_map_cursor_entry(pCsr, &e);
    rc = kv_map_put_from(&t->pOverlay, pCsr, iSeq, e.bTomb);
  }
  pthread_mutex_unlock(&s->mu);
  kv_map_cursor_free(pCsr);
  return rc;
}

/* Publish a committed batch into the overlay and queue it.  Waits while
** the store's overlays are over their limit (engine mutex held; the
** collector needs neither the engine mutex nor anything a committer
** holds, so it always makes room). */
static int btApplyThrough(KvBackendTable *t, KvMap *pBatch, uint64_t iSeq,
                          uint64_t cid);
static int btApply(KvBackendTable *t, KvMap *pBatch, uint64_t iSeq,
                   uint64_t cid){
  BtStore *s = t->pStore;
  KvMapCursor *pCsr;
  KvMapEntry e;
  int bOn, rc = SQLITE_OK;
  if( __atomic_load_n(&s->bThrough, __ATOMIC_ACQUIRE) ){
    return btApplyThrough(t, pBatch, iSeq, cid);
  }
  if( s->bReadOnly ) return btApplyOverlay(t, pBatch, iSeq);
  if( cid && cid<=t->cidFile ) return SQLITE_OK;   /* in the file: replay */
  pCsr = kv_map_cursor_new(pBatch);
  if( pCsr==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&s->mu);
  while( s->nOverlay>=s->nLimit && !s->bStop ){
    pthread_cond_wait(&s->condRoom, &s->mu);
  }
  for(bOn=kv_map_cursor_seek(pCsr, KV_SEEK_FIRST, 0, 0); bOn && rc==SQLITE_OK;
      bOn=kv_map_cursor_next(pCsr)){
    int64_t n0 = kv_map_count(t->pOverlay);
    kv_map_cursor_entry(pCsr, &e);
    rc = kv_map_put_from(&t->pOverlay, pCsr, iSeq, e.bTomb);
    s->nOverlay += kv_map_count(t->pOverlay) - n0;
  }
  if( rc==SQLITE_OK ) rc = btQueue(s, t, BT_JOB_WRITE, pBatch, iSeq, cid);
  pthread_mutex_unlock(&s->mu);
  kv_map_cursor_free(pCsr);
  return rc;
}

/* A shared store (several processes write it, one at a time under the
** store's writer lock): the batch goes into the data file at once, in one
** transaction of the committing thread at synchronous=NORMAL, and later
** snapshots read it there (a new reader generation).  The same
** transaction records the commit's CID for the table in bt_meta
** ('cid.<id>'): the root WAL record may be flushed only after this write
** (the commit flushes it once the writer lock is let go), so after a
** power loss the file may hold commits the WAL lost; a replay skips the
** records up to that CID (btApply, btDurable) and the next CID passes it
** (btMaxCid).  Segments retire only after the engine's owner process had
** the file synced (btSharedSync); until then a replay rewrites whatever
** a power loss took from the file.  The collector is idle: btShare
** emptied its queue first, so no older batch can follow this one into
** the file.  Engine mutex held (one apply at a time in the process). */
static int btApplyThrough(KvBackendTable *t, KvMap *pBatch, uint64_t iSeq,
                          uint64_t cid){
  BtStore *s = t->pStore;
  BtJob j;
  int rc;
  memset(&j, 0, sizeof(j));
  j.eOp = BT_JOB_WRITE;
  j.pTab = t;
  j.pBatch = pBatch;
  j.iSeq = iSeq;
  j.cid = cid;
  rc = btWriteBatch(s, &j, 2);
  if( rc!=SQLITE_OK ) return rc;
  btNewGeneration(s);
  if( cid ) s->xConfirm(s->pConfirmCtx, cid, t->zName, t->nName);
  return SQLITE_OK;
}

/* The store turns shared: wait until the collector has written and
** dropped every queued batch, then let xApply write through.  SQLITE_BUSY
** when the collector is failing and the queue does not drain within 5 s.
** Idempotent; every table of the store shares the mode. */
static int btShare(KvBackendTable *t, char **pzErr){
  BtStore *s = t->pStore;
  struct timespec dl;
  int rc = SQLITE_OK;
  btDeadline(&dl, 5000);
  pthread_mutex_lock(&s->mu);
  while( (s->pHead || s->nQueued>0 || s->nOverlay>0) && !s->bStop ){
    if( pthread_cond_timedwait(&s->condRoom, &s->mu, &dl)!=0
     && (s->pHead || s->nQueued>0 || s->nOverlay>0) ){
      rc = SQLITE_BUSY;
      break;
    }
  }
  if( rc==SQLITE_OK ) __atomic_store_n(&s->bThrough, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&s->mu);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv_btree: the collector of %s cannot write "
                             "its queued batches (%s)", s->zPath, s->zError);
  }
  return rc;
}

/* Another process committed to the data file: later snapshots read it. */
static void btRefresh(KvBackendTable *t, uint64_t cid){
  BtStore *s = t->pStore;
  (void)cid;
  pthread_mutex_lock(&s->mu);
  if( s->bReadOnly && kv_map_count(t->pOverlay)>0 ){
    /* a read-only store opened alone, now next to a writer process,
    ** whose recovery wrote what the replay put here into the data file */
    KvMap *pEmpty = kv_map_new();
    if( pEmpty ){
      kv_map_unref(t->pOverlay);
      t->pOverlay = pEmpty;
    }
  }
  if( s->bAlone ){
    /* from now on, connections that read what the writer writes */
    BtReader *r;
    s->bAlone = 0;
    while( (r = s->pFree)!=0 ){ s->pFree = r->pNextFree; btReaderClose(r); }
    s->nFree = 0;
  }
  pthread_mutex_unlock(&s->mu);
  btNewGeneration(s);
}

/* Several processes: one synced data-file commit makes durable every
** commit written through before it, by any process (an fsync of the
** file's own WAL covers every earlier frame).  Skipped when nothing was
** written or refreshed since the last one (s->gen unchanged), so the
** tables of one store sync it once per pass.  Engine mutex held: the
** writer connection is the one btApplyThrough uses. */
static int btSharedSync(KvBackendTable *t, char **pzErr){
  BtStore *s = t->pStore;
  uint64_t gen;
  int rc;
  pthread_mutex_lock(&s->mu);
  gen = s->gen;
  pthread_mutex_unlock(&s->mu);
  if( gen==s->genSynced ) return SQLITE_OK;
  rc = btWriteBatch(s, 0, 1);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv_btree: cannot sync data file %s: %s",
                             s->zPath, s->zError);
    return rc;
  }
  s->genSynced = gen;
  return SQLITE_OK;
}

static int btDurable(KvBackendTable *t, uint64_t cid){
  /* a replayed record the file holds is durable; else the collector
  ** confirms */
  return cid && cid<=t->cidFile;
}

static uint64_t btMaxCid(KvBackendTable *t){
  return t->cidFile;
}

/* ------------------------------------------------------ snapshots --- */

/* Snapshot handles.  A point read with no root takes a snapshot, reads
** its value into the handle's buffer and frees it: the process keeps one
** freed handle, with its buffer (up to BT_SPARE_BYTES), for the next
** snapshot or dup of any kv_btree table (taken and given back by atomic
** exchange, so from any thread). */
#define BT_SPARE_BYTES 65536
static KvBackendSnap *btSpareSnap = 0;

/* A handle on no core, with an empty buffer; NULL on OOM. */
static KvBackendSnap *btSnapTake(void){
  KvBackendSnap *h = __atomic_exchange_n(&btSpareSnap, (KvBackendSnap*)0,
                                         __ATOMIC_ACQ_REL);
  if( h==0 ){
    h = sqlite3_malloc64(sizeof(*h));
    if( h ) memset(h, 0, sizeof(*h));
  }
  return h;
}

/* Give back a handle (its core is no longer referenced through it). */
static void btSnapGive(KvBackendSnap *h){
  h->p = 0;
  sqlite3_free(h->zErr);
  h->zErr = 0;
  h->val.n = 0;
  if( h->val.nAlloc>BT_SPARE_BYTES ) kv_buf_free(&h->val);
  h = __atomic_exchange_n(&btSpareSnap, h, __ATOMIC_ACQ_REL);
  if( h ){
    kv_buf_free(&h->val);
    sqlite3_free(h);
  }
}

static int btSnapshot(KvBackendTable *t, KvBackendSnap **pp){
  BtStore *s = t->pStore;
  KvBackendSnap *h = btSnapTake();
  BtSnapCore *c = sqlite3_malloc64(sizeof(*c));
  int rc = SQLITE_OK;
  *pp = 0;
  if( h==0 || c==0 ){
    if( h ) btSnapGive(h);
    sqlite3_free(c);
    return SQLITE_NOMEM;
  }
  memset(c, 0, sizeof(*c));
  pthread_mutex_lock(&s->mu);
  if( s->pCur==0 ) rc = btReaderPin(s, &s->pCur);
  if( rc==SQLITE_OK ){ c->pReader = s->pCur; s->pCur->nRef++; }
  if( rc==SQLITE_OK ){
    c->nRef = 1;
    c->pTab = t;
    t->nRef++;
    c->pOverlay = kv_map_ref(t->pOverlay);
  }
  pthread_mutex_unlock(&s->mu);
  if( rc!=SQLITE_OK ){ btSnapGive(h); sqlite3_free(c); return rc; }
  h->p = c;
  *pp = h;
  return SQLITE_OK;
}

static void btSnapshotFree(KvBackendSnap *h){
  BtSnapCore *c;
  BtStore *s;
  if( h==0 ) return;
  c = h->p;
  s = c->pTab->pStore;
  btSnapGive(h);
  pthread_mutex_lock(&s->mu);
  if( --c->nRef==0 ){
    btReaderUnref(s, c->pReader);
    btTableUnref(c->pTab);
    kv_map_unref(c->pOverlay);
    sqlite3_free(c);
  }
  pthread_mutex_unlock(&s->mu);
}

static int btSnapshotDup(KvBackendSnap *h, KvBackendSnap **pp){
  KvBackendSnap *n = btSnapTake();
  BtStore *s = h->p->pTab->pStore;
  *pp = 0;
  if( n==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&s->mu);
  h->p->nRef++;
  pthread_mutex_unlock(&s->mu);
  n->p = h->p;
  *pp = n;
  return SQLITE_OK;
}

/* Read key from the data file of the snapshot into pBuf. */
static int btDataGet(BtSnapCore *c, const uint8_t *aKey, int nKey,
                     KvBuf *pBuf, int *pbFound, char **pzErr){
  BtReader *r = c->pReader;
  sqlite3_stmt *p = 0;
  int k, rc, bBad = 0;
  BtBlock *b;
  *pbFound = 0;
  if( r==0 ) return SQLITE_OK;
  pthread_mutex_lock(&r->mu);
  if( (b = btReaderBlock(r, c->pTab->iId))!=0 ){
    /* the whole table as this transaction sees it: no statement */
    int i = btBlockBound(b, aKey, nKey, 0);
    rc = SQLITE_OK;
    if( i<b->nRow && b->aRow[i].nKey==nKey
     && memcmp(b->aData + b->aRow[i].iKey, aKey, (size_t)nKey)==0 ){
      kv_buf_reset(pBuf);
      rc = kv_buf_append(pBuf, b->aData + b->aRow[i].iVal, b->aRow[i].nVal);
      *pbFound = rc==SQLITE_OK;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
  }
  for(k=0; k<r->nAbsent; k++){
    /* not in the data file as of this read transaction: no statement to
    ** prepare (a failing prepare costs a parse), nothing to find */
    if( r->aAbsent[k]==c->pTab->iId ){
      pthread_mutex_unlock(&r->mu);
      return SQLITE_OK;
    }
  }
  rc = btReaderStmt(r, c->pTab->iId, &p);
  if( rc==SQLITE_OK ){
    sqlite3_bind_blob(p, 1, aKey, nKey, SQLITE_STATIC);
    rc = btReadFault(sqlite3_step(p));
    if( rc==SQLITE_ROW ){
      kv_buf_reset(pBuf);
      rc = btRowValue(c->pTab->pStore->bCrc, aKey, nKey,
                      sqlite3_column_blob(p, 0), sqlite3_column_bytes(p, 0),
                      pBuf);
      bBad = rc==SQLITE_CORRUPT;
      *pbFound = rc==SQLITE_OK;
    }else if( rc==SQLITE_DONE ){
      rc = SQLITE_OK;
    }
    sqlite3_reset(p);
  }else if( btNoTable(r->db, rc) ){
    rc = SQLITE_OK;
    r->aAbsent[r->nAbsent<8 ? r->nAbsent++ : 7] = c->pTab->iId;
  }
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv_btree: read of table %s from the data file "
        "%s failed: %s", c->pTab->zName, c->pTab->pStore->zPath,
        btReadErrText(r->db, rc, bBad));
    sqlite3_log(rc, "%s", *pzErr ? *pzErr : "kv_btree: read failed");
  }
  pthread_mutex_unlock(&r->mu);
  return rc;
}

static int btGet(KvBackendSnap *h, const uint8_t *aKey, int nKey,
                 int *pbFound, KvMapEntry *pOut){
  KvMapEntry e;
  int rc;
  if( kv_map_get(h->p->pOverlay, aKey, nKey, &e) ){
    *pbFound = !e.bTomb;
    *pOut = e;
    return SQLITE_OK;
  }
  sqlite3_free(h->zErr);
  h->zErr = 0;
  rc = btDataGet(h->p, aKey, nKey, &h->val, pbFound, &h->zErr);
  if( rc==SQLITE_OK && *pbFound ){
    memset(pOut, 0, sizeof(*pOut));
    pOut->aKey = aKey; pOut->nKey = nKey;
    pOut->aVal = h->val.a; pOut->nVal = h->val.n;
  }
  return rc;
}

static void btGetError(KvBackendSnap *h, char **pzErr){
  *pzErr = h->zErr ? sqlite3_mprintf("%s", h->zErr) : 0;
}

/* -------------------------------------------------------- cursors --- */

/* A walk merging the overlay (newer; tombstones hide keys) with the data
** file.  Each side is positioned on its own; the data side is a statement
** stepping in the current direction, re-prepared when it turns.
**
** Batches.  The data side takes its rows from the statement in batches,
** one reader-mutex hold per batch: the keys and checked values of up to
** nBatch rows are copied into one buffer (arena), each value followed by
** a NUL byte (KV_ENTRY_TERM: the overlay's values, a kv_map's, have one
** too), and handed out from there.  A walk's first batch is small (a
** short range read steps little past its end) and each next one twice
** as large, up to BT_BATCH_ROWS rows or BT_BATCH_BYTES bytes.  A read
** error met while filling a batch is kept (rcNext) and ends the walk only
** after the rows before it.
**
** Scan cache.  A reader's read transaction sees one state of the data
** file for as long as it lasts (until the collector's next commit, see
** btNewGeneration).  A walk of a whole table from its first key keeps
** every batch (bBuild) instead of reusing the buffer; when it reaches the
** end, its rows become the reader's block for the table (BtBlock), if
** the reader's blocks stay within BT_SCAN_CACHE bytes.  Later walks and
** point reads of the table on that reader read the block - by binary
** search, without a statement or a copy - until the transaction ends
** and the reader drops its blocks.  A walk past BT_SCAN_CACHE bytes
** stops keeping its batches. */
#define BT_BATCH_FIRST 8
#define BT_BATCH_ROWS  256
#define BT_BATCH_BYTES 262144

struct KvBackendCursor {
  BtSnapCore *c;                /* holds a reference */
  KvBackendSnap *pHold;         /* dup of the snapshot handle */
  KvMapCursor *pOv;
  int bOvOn;
  sqlite3_stmt *pData;          /* NULL once it returned its last row */
  int bDataOn;
  int bDesc;                    /* current direction */
  int eCur;                     /* 0 none, 1 overlay, 2 data, 3 both */
  int eShape;                   /* pData's btRangeShape() */
  KvBuf arena;                  /* the batch's keys and values */
  BtRow *aRow;                  /* the batch's rows, in walk order */
  int nRow, nRowAlloc;
  int iNext;                    /* aRow[iNext-1] is the current row */
  int nBatch;                   /* rows the next batch asks for */
  int rcNext;                   /* error met after the batch's rows */
  char *zErrNext;               /* its message */
  int bBuild;                   /* keeping every batch for a block */
  BtBlock *pBlock;              /* the data side reads this block, */
  int iPos;                     /* at this row (pData is NULL) */
  int rc;                       /* data-file read error that ended the walk */
  int bBad;                     /* that error is a value failing its CRC */
  char *zErr;                   /* its message */
};

/* The message of data-file read error rc on db (r->mu held). */
static char *btCsrMessage(KvBackendCursor *p, sqlite3 *db, int rc){
  return sqlite3_mprintf("kv_btree: scan of table %s in the data file "
      "%s failed: %s", p->c->pTab->zName, p->c->pTab->pStore->zPath,
      btReadErrText(db, rc, p->bBad));
}

/* The walk ends with error rc and message zErr (taken): kept for
** btCursorError, never as if the table had ended. */
static int btCsrEnd(KvBackendCursor *p, int rc, char *zErr){
  if( p->rc==SQLITE_OK ){
    p->rc = rc;
    p->zErr = zErr;
    sqlite3_log(rc, "%s", p->zErr ? p->zErr : "kv_btree: scan failed");
  }else{
    sqlite3_free(zErr);
  }
  return rc;
}

/* A data-file read failed (r->mu held): the walk ends with that error. */
static int btCsrFail(KvBackendCursor *p, sqlite3 *db, int rc){
  if( p->rc!=SQLITE_OK ) return rc;
  return btCsrEnd(p, rc, btCsrMessage(p, db, rc));
}

static int btCmp(const uint8_t *a, int na, const uint8_t *b, int nb){
  int c = memcmp(a, b, na<nb ? na : nb);
  return c ? c : na-nb;
}

/* Range statements.  A walk's data side is one of six statements per
** table (no bound, >=, > ; ascending or descending: btRangeShape), kept
** prepared on the reader between walks: a walk takes one out of the
** reader's cache (btRangeTake) and gives it back reset when it moves on
** (btRangeGive), so two walks never share one, and a short range read
** costs a bind and a step, not a prepare.  r->mu held for both. */
static int btRangeShape(int bDesc, int bIncl, const void *aKey){
  return bDesc*3 + (aKey==0 ? 0 : bIncl ? 1 : 2);
}

static sqlite3_stmt *btRangeTake(BtReader *r, uint64_t iId, int eShape){
  int i;
  for(i=0; i<r->nRange; i++){
    if( r->aRangeId[i]==iId && r->aRangeShape[i]==eShape ){
      sqlite3_stmt *pStmt = r->aRange[i];
      r->nRange--;
      memmove(&r->aRangeId[i], &r->aRangeId[i+1],
              (r->nRange-i)*sizeof(r->aRangeId[0]));
      memmove(&r->aRangeShape[i], &r->aRangeShape[i+1],
              (r->nRange-i)*sizeof(r->aRangeShape[0]));
      memmove(&r->aRange[i], &r->aRange[i+1],
              (r->nRange-i)*sizeof(r->aRange[0]));
      return pStmt;
    }
  }
  return 0;
}

static void btRangeGive(BtReader *r, uint64_t iId, int eShape,
                        sqlite3_stmt *pStmt){
  if( pStmt==0 ) return;
  sqlite3_reset(pStmt);
  sqlite3_clear_bindings(pStmt);
  if( r->nRange==BT_RANGE_CACHE ){
    sqlite3_finalize(r->aRange[--r->nRange]);
  }
  memmove(&r->aRangeId[1], &r->aRangeId[0], r->nRange*sizeof(r->aRangeId[0]));
  memmove(&r->aRangeShape[1], &r->aRangeShape[0],
          r->nRange*sizeof(r->aRangeShape[0]));
  memmove(&r->aRange[1], &r->aRange[0], r->nRange*sizeof(r->aRange[0]));
  r->aRangeId[0] = iId;
  r->aRangeShape[0] = eShape;
  r->aRange[0] = pStmt;
  r->nRange++;
}

/* Forget the batch (and an error met after it). */
static void btBatchClear(KvBackendCursor *p){
  p->pBlock = 0;
  p->nRow = p->iNext = 0;
  kv_buf_reset(&p->arena);
  p->rcNext = SQLITE_OK;
  sqlite3_free(p->zErrNext);
  p->zErrNext = 0;
}

/* Give the walk's data statement back to its reader. */
static void btDataRelease(KvBackendCursor *p){
  BtReader *r = p->c->pReader;
  btBatchClear(p);
  p->bBuild = 0;
  if( p->pData==0 ) return;
  pthread_mutex_lock(&r->mu);
  btRangeGive(r, p->c->pTab->iId, p->eShape, p->pData);
  pthread_mutex_unlock(&r->mu);
  p->pData = 0;
}

static int btBatchAdd(KvBackendCursor *p);
static void btBlockPublish(KvBackendCursor *p, BtReader *r);

/* Warm-up of the scan cache.  BT_WARM_WALKS bounded walks of one table in
** a row on a reader that has no block for it read the whole table into
** one (as a walk from the first key would), if it fits the reader's
** BT_SCAN_CACHE budget; the walk then reads the block.  A table too big,
** and a read error met on the way (the walk's own statement meets it
** again where it matters), stop the warm-ups of the table until the
** reader's blocks are dropped.  Returns 1 when p reads a new block (r->mu
** held, p's data side released). */
#define BT_WARM_WALKS 16
static int btBlockWarm(KvBackendCursor *p, BtReader *r){
  uint64_t iId = p->c->pTab->iId;
  int rc = SQLITE_OK;
  if( r->iWarmId!=iId ){
    r->iWarmId = iId;
    r->nWarm = 0;
  }
  if( r->nWarm<0 || ++r->nWarm<BT_WARM_WALKS ) return 0;
  r->nWarm = -1;                          /* one attempt */
  if( r->nBlockByte>=BT_SCAN_CACHE ) return 0;
  p->eShape = btRangeShape(0, 0, 0);
  p->pData = btRangeTake(r, iId, p->eShape);
  if( p->pData==0 ){
    char *zSql = sqlite3_mprintf("SELECT k,v FROM t%llu  ORDER BY k ASC",
                                 (unsigned long long)iId);
    rc = zSql ? sqlite3_prepare_v3(r->db, zSql, -1,
                                   SQLITE_PREPARE_PERSISTENT, &p->pData, 0)
              : SQLITE_NOMEM;
    sqlite3_free(zSql);
  }
  p->bBuild = 1;
  while( rc==SQLITE_OK && r->nBlockByte + p->arena.n < BT_SCAN_CACHE ){
    rc = btReadFault(sqlite3_step(p->pData));
    if( rc!=SQLITE_ROW ) break;
    rc = btBatchAdd(p);
  }
  if( p->pData ) btRangeGive(r, iId, p->eShape, p->pData);
  p->pData = 0;
  p->bBad = 0;
  if( rc==SQLITE_DONE ){
    p->iNext = p->nRow;
    btBlockPublish(p, r);                 /* sets pBlock, or keeps none */
  }
  p->bBuild = 0;
  if( p->pBlock==0 ){
    btBatchClear(p);
    kv_buf_free(&p->arena);
    sqlite3_free(p->aRow);
    p->aRow = 0;
    p->nRowAlloc = 0;
    return 0;
  }
  return 1;
}

/* Position the data side: first key (>|>=|<|<=) aKey, or from an end. */
static int btDataSeek(KvBackendCursor *p, int bDesc, int bIncl,
                      const void *aKey, int nKey){
  BtReader *r = p->c->pReader;
  uint64_t iId = p->c->pTab->iId;
  char *zSql = 0;
  int rc = SQLITE_OK;
  p->bDataOn = 0;
  btDataRelease(p);
  p->nBatch = BT_BATCH_FIRST;
  if( r==0 ) return SQLITE_OK;
  p->eShape = btRangeShape(bDesc, bIncl, aKey);
  pthread_mutex_lock(&r->mu);
  if( (p->pBlock = btReaderBlock(r, iId))!=0 ){
    /* iPos: the row before the first of the walk (btDataStep moves) */
    BtBlock *b = p->pBlock;
    if( aKey==0 ) p->iPos = bDesc ? b->nRow : -1;
    else if( !bDesc ) p->iPos = btBlockBound(b, aKey, nKey, !bIncl) - 1;
    else p->iPos = btBlockBound(b, aKey, nKey, bIncl);
    pthread_mutex_unlock(&r->mu);
    return SQLITE_OK;
  }
  if( aKey && btBlockWarm(p, r) ){
    BtBlock *b = p->pBlock;
    if( !bDesc ) p->iPos = btBlockBound(b, aKey, nKey, !bIncl) - 1;
    else p->iPos = btBlockBound(b, aKey, nKey, bIncl);
    pthread_mutex_unlock(&r->mu);
    return SQLITE_OK;
  }
  p->bBuild = !bDesc && aKey==0 && r->nBlockByte<BT_SCAN_CACHE;
  p->pData = btRangeTake(r, iId, p->eShape);
  if( p->pData==0 ){
    zSql = sqlite3_mprintf("SELECT k,v FROM t%llu %s ORDER BY k %s",
        (unsigned long long)iId,
        aKey==0 ? "" : bDesc ? (bIncl ? "WHERE k<=?1" : "WHERE k<?1")
                             : (bIncl ? "WHERE k>=?1" : "WHERE k>?1"),
        bDesc ? "DESC" : "ASC");
    rc = zSql ? sqlite3_prepare_v3(r->db, zSql, -1,
                                   SQLITE_PREPARE_PERSISTENT, &p->pData, 0)
              : SQLITE_NOMEM;
    sqlite3_free(zSql);
  }
  if( rc==SQLITE_OK && aKey ) sqlite3_bind_blob(p->pData, 1, aKey, nKey,
                                                SQLITE_TRANSIENT);
  if( btNoTable(r->db, rc) ) rc = SQLITE_OK;
  if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ) btCsrFail(p, r->db, rc);
  pthread_mutex_unlock(&r->mu);
  return rc;
}

/* Append one row of pData to the batch (r->mu held). */
static int btBatchAdd(KvBackendCursor *p){
  sqlite3_stmt *pStmt = p->pData;
  BtRow *pRow;
  const uint8_t *aKey, *aVal;
  int nKey, nVal, rc;
  if( p->nRow==p->nRowAlloc ){
    int nNew = p->nRowAlloc ? p->nRowAlloc*2 : 4*BT_BATCH_FIRST;
    BtRow *a = sqlite3_realloc64(p->aRow, nNew*sizeof(BtRow));
    if( a==0 ) return SQLITE_NOMEM;
    p->aRow = a;
    p->nRowAlloc = nNew;
  }
  /* btRowValue's check and copy, with one reservation for key and value */
  aKey = sqlite3_column_blob(pStmt, 0);
  nKey = sqlite3_column_bytes(pStmt, 0);
  aVal = sqlite3_column_blob(pStmt, 1);
  nVal = sqlite3_column_bytes(pStmt, 1);
  p->bBad = 0;
  if( p->c->pTab->pStore->bCrc ){
    if( nVal<4 ){ p->bBad = 1; return SQLITE_CORRUPT; }
    nVal -= 4;
    if( wal_get_be32(aVal+nVal)!=btRowCrc(aKey, nKey, aVal, nVal) ){
      p->bBad = 1;
      return SQLITE_CORRUPT;
    }
  }
  rc = kv_buf_reserve(&p->arena, nKey+nVal+1);
  if( rc!=SQLITE_OK ) return rc;
  pRow = &p->aRow[p->nRow];
  pRow->iKey = p->arena.n;
  pRow->nKey = nKey;
  if( nKey>0 ) memcpy(p->arena.a + p->arena.n, aKey, (size_t)nKey);
  p->arena.n += nKey;
  pRow->iVal = p->arena.n;
  pRow->nVal = nVal;
  if( nVal>0 ) memcpy(p->arena.a + p->arena.n, aVal, (size_t)nVal);
  p->arena.n += nVal;
  p->arena.a[p->arena.n++] = 0;         /* the value's terminator */
  p->nRow++;
  return SQLITE_OK;
}

/* The walk kept every row of the table: they become r's block for it,
** and the walk goes on reading them there (r->mu held). */
static void btBlockPublish(KvBackendCursor *p, BtReader *r){
  uint64_t iId = p->c->pTab->iId;
  BtBlock *b;
  p->bBuild = 0;
  if( btReaderBlock(r, iId)!=0
   || r->nBlockByte + p->arena.n > BT_SCAN_CACHE ){
    return;
  }
  b = sqlite3_malloc64(sizeof(*b));
  if( b==0 ) return;                    /* no block: nothing is lost */
  b->iId = iId;
  b->nRow = p->nRow;
  b->aRow = p->aRow;
  b->aData = p->arena.a;
  b->nByte = p->arena.n + (int64_t)p->nRowAlloc*sizeof(BtRow);
  b->pNext = r->pBlock;
  r->pBlock = b;
  r->nBlockByte += b->nByte;
  p->pBlock = b;
  p->iPos = p->iNext - 1;
  p->aRow = 0;
  p->nRow = p->nRowAlloc = p->iNext = 0;
  memset(&p->arena, 0, sizeof(p->arena));
}

/* Fill the batch with the next rows of pData, under one hold of r->mu.
** The statement goes back to the reader when it has no more rows; a read
** error stops the batch and waits in rcNext. */
static void btBatchFill(KvBackendCursor *p){
  BtReader *r = p->c->pReader;
  int rc = SQLITE_OK, nEnd, nByteEnd;
  if( p->bBuild && p->arena.n>=BT_SCAN_CACHE ){
    p->bBuild = 0;              /* too big to keep: back to one batch */
    btBatchClear(p);
    kv_buf_free(&p->arena);
    sqlite3_free(p->aRow);
    p->aRow = 0;
    p->nRowAlloc = 0;
  }
  if( !p->bBuild ) btBatchClear(p);
  nEnd = p->nRow + p->nBatch;
  nByteEnd = p->arena.n + BT_BATCH_BYTES;
  if( p->arena.nAlloc==0 ) rc = kv_buf_reserve(&p->arena, 4096);
  pthread_mutex_lock(&r->mu);
  while( rc==SQLITE_OK && p->nRow<nEnd && p->arena.n<nByteEnd ){
    rc = btReadFault(sqlite3_step(p->pData));
    if( rc!=SQLITE_ROW ) break;
    rc = btBatchAdd(p);
    if( rc!=SQLITE_OK ) break;
  }
  if( rc==SQLITE_DONE ){
    btRangeGive(r, p->c->pTab->iId, p->eShape, p->pData);
    p->pData = 0;
    if( p->bBuild ) btBlockPublish(p, r);
  }else if( rc!=SQLITE_OK && rc!=SQLITE_ROW ){
    p->rcNext = rc;
    p->zErrNext = btCsrMessage(p, r->db, rc);
  }
  pthread_mutex_unlock(&r->mu);
  if( p->nBatch<BT_BATCH_ROWS ) p->nBatch *= 2;
}

/* Move the data side to its next row (bDataOn), from the batch or a new
** one; SQLite code of a read error, which ends the walk. */
static int btDataStep(KvBackendCursor *p){
  p->bDataOn = 0;
  if( !p->pBlock && p->iNext>=p->nRow && p->rcNext==SQLITE_OK && p->pData ){
    btBatchFill(p);             /* may turn the walk to a block */
  }
  if( p->pBlock ){
    p->iPos += p->bDesc ? -1 : 1;
    p->bDataOn = p->iPos>=0 && p->iPos<p->pBlock->nRow;
    return SQLITE_OK;
  }
  if( p->iNext<p->nRow ){
    p->iNext++;
    p->bDataOn = 1;
    return SQLITE_OK;
  }
  if( p->rcNext!=SQLITE_OK ){
    int rc = p->rcNext;
    char *zErr = p->zErrNext;
    p->rcNext = SQLITE_OK;
    p->zErrNext = 0;
    return btCsrEnd(p, rc, zErr);
  }
  return SQLITE_OK;
}

/* The data side's current row. */
static void btDataRow(KvBackendCursor *p, KvMapEntry *pOut){
  const uint8_t *a = p->pBlock ? p->pBlock->aData : p->arena.a;
  const BtRow *pRow = p->pBlock ? &p->pBlock->aRow[p->iPos]
                                : &p->aRow[p->iNext-1];
  pOut->aKey = a + pRow->iKey; pOut->nKey = pRow->nKey;
  pOut->aVal = a + pRow->iVal; pOut->nVal = pRow->nVal;
  pOut->rev = 0;
  pOut->bTomb = 0;
}

/* Pick the current entry from the two sides, skipping keys the overlay
** deleted.  Returns 1 if on an entry. */
static int btSettle(KvBackendCursor *p){
  for(;;){
    KvMapEntry o;
    int cmp;
    p->eCur = 0;
    if( !p->bOvOn ){
      p->eCur = p->bDataOn ? 2 : 0;
      return p->eCur!=0;
    }
    kv_map_cursor_entry(p->pOv, &o);
    if( !p->bDataOn ) cmp = -1;
    else{
      KvMapEntry d;
      btDataRow(p, &d);
      cmp = btCmp(o.aKey, o.nKey, d.aKey, d.nKey);
      if( p->bDesc ) cmp = -cmp;
    }
    p->eCur = cmp<0 ? 1 : cmp>0 ? 2 : 3;
    if( p->eCur!=2 && o.bTomb ){
      if( p->eCur==3 && btDataStep(p)!=SQLITE_OK ){ p->eCur = 0; return 0; }
      p->bOvOn = p->bDesc ? kv_map_cursor_prev(p->pOv)
                          : kv_map_cursor_next(p->pOv);
      continue;
    }
    return 1;
  }
}

static int btCursorOpen(KvBackendSnap *h, KvBackendCursor **pp){
  KvBackendCursor *p = sqlite3_malloc64(sizeof(*p));
  int rc;
  *pp = 0;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  rc = btSnapshotDup(h, &p->pHold);
  if( rc==SQLITE_OK ){
    p->c = p->pHold->p;
    p->pOv = kv_map_cursor_new(p->c->pOverlay);
    if( p->pOv==0 ) rc = SQLITE_NOMEM;
  }
  if( rc!=SQLITE_OK ){
    btSnapshotFree(p->pHold);
    sqlite3_free(p);
    return rc;
  }
  *pp = p;
  return SQLITE_OK;
}

static void btCursorClose(KvBackendCursor *p){
  BtReader *r;
  if( p==0 ) return;
  r = p->c->pReader;
  if( r ) btDataRelease(p);
  kv_map_cursor_free(p->pOv);
  btBatchClear(p);
  kv_buf_free(&p->arena);
  sqlite3_free(p->aRow);
  sqlite3_free(p->zErr);
  btSnapshotFree(p->pHold);
  sqlite3_free(p);
}

/* Seek both sides the same way. */
static int btCursorSeek(KvBackendCursor *p, int eSeek, const void *aKey,
                        int n){
  int bDesc = eSeek==KV_SEEK_LAST || eSeek==KV_SEEK_LE || eSeek==KV_SEEK_LT;
  int bIncl = eSeek==KV_SEEK_GE || eSeek==KV_SEEK_LE;
  int bEnd = eSeek==KV_SEEK_FIRST || eSeek==KV_SEEK_LAST;
  if( p->rc!=SQLITE_OK ){ p->eCur = 0; return 0; }
  p->bDesc = bDesc;
  p->bOvOn = kv_map_cursor_seek(p->pOv, eSeek, aKey, n);
  if( btDataSeek(p, bDesc, bIncl, bEnd ? 0 : aKey, n)!=SQLITE_OK
   || btDataStep(p)!=SQLITE_OK ){
    p->bOvOn = p->bDataOn = 0;
    p->eCur = 0;
    return 0;
  }
  return btSettle(p);
}

/* Step in direction bDesc from the current key. */
static void btCursorEntry(KvBackendCursor *p, KvMapEntry *pOut);
static int btCursorMove(KvBackendCursor *p, int bDesc){
  KvBuf k;
  int r;
  if( p->eCur==0 || p->rc!=SQLITE_OK ) return 0;
  if( bDesc!=p->bDesc ){
    KvMapEntry e;
    btCursorEntry(p, &e);       /* the re-seek below replaces the batch */
    memset(&k, 0, sizeof(k));
    if( kv_buf_append(&k, e.aKey, e.nKey)!=SQLITE_OK ) return 0;
    r = btCursorSeek(p, bDesc ? KV_SEEK_LT : KV_SEEK_GT, k.a, k.n);
    kv_buf_free(&k);
    return r;
  }
  if( p->eCur & 1 ){
    p->bOvOn = bDesc ? kv_map_cursor_prev(p->pOv) : kv_map_cursor_next(p->pOv);
  }
  if( (p->eCur & 2) && btDataStep(p)!=SQLITE_OK ){
    p->eCur = 0;
    return 0;
  }
  return btSettle(p);
}

static int btCursorError(KvBackendCursor *p, char **pzErr){
  *pzErr = 0;
  if( p->rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("%s", p->zErr ? p->zErr
                             : "kv_btree: data-file read failed");
  }
  return p->rc;
}

static int btCursorNext(KvBackendCursor *p){ return btCursorMove(p, 0); }
static int btCursorPrev(KvBackendCursor *p){ return btCursorMove(p, 1); }

static void btCursorEntry(KvBackendCursor *p, KvMapEntry *pOut){
  if( p->eCur==2 ){
    btDataRow(p, pOut);
  }else if( p->eCur ){
    kv_map_cursor_entry(p->pOv, pOut);
  }else{
    memset(pOut, 0, sizeof(*pOut));
  }
}

static int btCursorStep(KvBackendCursor *p, int bPrev, KvMapEntry *pOut){
  int bOn;
  if( p->eCur==2 && !p->bOvOn && p->pBlock && bPrev==p->bDesc
   && p->rc==SQLITE_OK ){
    /* on a row of a scan-cache block, no overlay entry left: the next row
    ** is the block's (btCursorMove's steps, without the calls) */
    p->iPos += bPrev ? -1 : 1;
    if( p->iPos<0 || p->iPos>=p->pBlock->nRow ){
      p->bDataOn = 0;
      p->eCur = 0;
      return 0;
    }
    btDataRow(p, pOut);
    return 1;
  }
  bOn = btCursorMove(p, bPrev);
  if( bOn ) btCursorEntry(p, pOut);
  return bOn;
}

/* ----------------------------------------------------------- stats --- */

/* Rows and logical bytes: a walk of a fresh snapshot (O(n)). */
static void btCount(KvBackendTable *t, int64_t *pnRow, int64_t *pnByte){
  KvBackendSnap *h = 0;
  KvBackendCursor *p = 0;
  KvMapEntry e;
  int bOn;
  *pnRow = *pnByte = 0;
  if( btSnapshot(t, &h)!=SQLITE_OK ) return;
  if( btCursorOpen(h, &p)==SQLITE_OK ){
    for(bOn=btCursorSeek(p, KV_SEEK_FIRST, 0, 0); bOn; bOn=btCursorNext(p)){
      btCursorEntry(p, &e);
      (*pnRow)++;
      *pnByte += e.nKey + e.nVal;
    }
    btCursorClose(p);
  }
  btSnapshotFree(h);
}

static void btStats(KvBackendTable *t, int64_t *pnRow, int64_t *pnByte){
  btCount(t, pnRow, pnByte);
}

static void btStatsEx(KvBackendTable *t, int bCount, KvBackendStats *pS){
  BtStore *s = t->pStore;
  memset(pS, 0, sizeof(*pS));
  if( bCount ) btCount(t, &pS->nRow, &pS->nByte);
  pthread_mutex_lock(&s->mu);
  pS->nOverlay = kv_map_count(t->pOverlay);
  pS->nPending = t->nPending;
  pS->nError = s->nError;
  memcpy(pS->zError, s->zError, sizeof(s->zError));
  pthread_mutex_unlock(&s->mu);
}

#ifdef DEPOT_TEST
int kv_btree_test_overlay_limit(const char *zStoreDir, int64_t nLimit){
  BtStore *s;
  int rc = SQLITE_NOTFOUND;
  char *zPath = sqlite3_mprintf("%s/kv_btree.db", zStoreDir);
  if( zPath==0 ) return SQLITE_NOMEM;
  pthread_mutex_lock(&btGlobalMutex);
  for(s=btStoreList; s; s=s->pNext){
    if( strcmp(s->zPath, zPath)==0 ){
      pthread_mutex_lock(&s->mu);
      s->nLimit = nLimit>0 ? nLimit : BT_DEFAULT_LIMIT;
      pthread_cond_broadcast(&s->condRoom);
      pthread_mutex_unlock(&s->mu);
      rc = SQLITE_OK;
    }
  }
  pthread_mutex_unlock(&btGlobalMutex);
  sqlite3_free(zPath);
  return rc;
}
#endif /* DEPOT_TEST */

/* The largest id of a physical table t<id> in the data file (0: no file
** or none).  Opened on a connection of its own, read-write as the store's
** own connections are (the store lock is held), so a data file left by a
** crash is recovered as they would recover it. */
static int btStoreMaxId(const char *zStore, uint64_t *piMax, char **pzErr){
  char *zPath = sqlite3_mprintf("%s/kv_btree.db", zStore);
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  int rc = SQLITE_OK;
  *piMax = 0;
  if( zPath==0 ) return SQLITE_NOMEM;
  if( btFileSize(zPath, "")>0 ){
    rc = sqlite3_open_v2(zPath, &db, SQLITE_OPEN_READWRITE
                         |SQLITE_OPEN_NOMUTEX|SQLITE_OPEN_PRIVATECACHE,
                         btVfs());
    if( rc==SQLITE_OK ) sqlite3_busy_timeout(db, 10000);
    if( rc==SQLITE_OK ){
      rc = sqlite3_prepare_v2(db, "SELECT max(CAST(substr(name,2) AS "
          "INTEGER)) FROM sqlite_schema WHERE type='table' AND name GLOB "
          "'t[0-9]*'", -1, &pStmt, 0);
    }
    if( rc==SQLITE_OK && sqlite3_step(pStmt)==SQLITE_ROW ){
      sqlite3_int64 v = sqlite3_column_int64(pStmt, 0);
      *piMax = v>0 ? (uint64_t)v : 0;
    }
    if( rc==SQLITE_OK ) rc = sqlite3_finalize(pStmt);
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv_btree: cannot list the tables of data "
          "file %s: %s", zPath, db ? sqlite3_errmsg(db) : "out of memory");
      if( (rc&0xff)==SQLITE_NOTADB ) rc = SQLITE_CORRUPT;
    }
    sqlite3_close(db);
  }
  sqlite3_free(zPath);
  return rc;
}

const KvBackend kvBtreeBackend = {
  "kv_btree",
  btOpen, btClose, btDrop,
  btSnapshot, btSnapshotFree, btSnapshotDup, btGet,
  btCursorOpen, btCursorClose, btCursorSeek, btCursorNext, btCursorPrev,
  btCursorEntry,
  btApply, btDurable, btStats,
  1, btStatsEx,
  btCursorError, btGetError, 0,
  0,                            /* data files: records wait for them */
  0,                            /* its data file is checked by xOpen */
  btStoreMaxId,
  0,                            /* xApply fills the overlay: no file I/O */
  0,                            /* reads may read the data file */
  0,                            /* no write at apply: the collector writes
                                ** the file after a root WAL flush
                                ** (btWalSync) */
  btMaxCid,                     /* commits written through (shared) */
  KV_ENTRY_TERM,                /* entries: batches are reused; values
                                ** are terminated (btBatchAdd, map.h) */
  btCursorStep,
  btShare, btRefresh,
  btSharedSync,
  0                             /* no background work of its own */
};
