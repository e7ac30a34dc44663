/*
** kv_vtab.c -- the kv_memory, kv_btree and kv_log virtual-table modules:
** KV tables in SQL.  One sqlite3_module, vtabModule, serves all three (the
** module name is the table type), plus vtabAnchorModule for the anchor
** table described under "Reads" below.  Writable, with transactions: the
** one virtual table of ext/ that is not a listing (ext/listing.h).
**
**   CREATE VIRTUAL TABLE t USING kv_memory[(dir=PATH, persistence=0|1)];
**   CREATE VIRTUAL TABLE t USING kv_btree[(dir=PATH, accelerated_repair=0|1)];
**   CREATE VIRTUAL TABLE t USING kv_log[(dir=PATH)];
**     ... any of them also with ttl_ms=N or deadline='expr' (kv_ttl.c)
**   INSERT [OR REPLACE] INTO t VALUES(key, value);
**   SELECT value FROM t WHERE key = ?;       -- also <, <=, >, >=, BETWEEN,
**   SELECT * FROM t ORDER BY key DESC;       -- IN and ORDER BY key [DESC]
**   DROP TABLE main.t;                       -- removes the KV table
**   DROP TABLE temp.t;                       -- detaches (see below)
**
** The table is the KV table of the same name in the store (default: the
** sidecar directory "<database file>-kv"); CREATE attaches to the existing
** one or creates it as part of the SQLite transaction (committed with it,
** undone by its rollback; it must come before the transaction's first KV
** write); DROP TABLE removes it in its own root transaction and is refused
** inside an explicit transaction.  Attaching an existing table (xConnect)
** never creates a store: while its directory is missing every read and
** write fails with SQLITE_CANTOPEN "kv: store DIR of table t is missing
** ...", and DROP TABLE only drops it from the schema (vtabStoreReady).
** Schema:
**     CREATE TABLE x(key PRIMARY KEY NOT NULL, value) WITHOUT ROWID
**
** Temp declarations (kv_decl.c): a connection whose main database is a
** file also declares each of main's KV tables in its temp schema, where
** writes take no lock of the database file; unqualified names reach
** those.  A temp declaration on a directory store is shared by other
** connections, so its DROP TABLE only detaches this connection
** (vtabDetach); a main declaration is noted as it connects
** (kv_attach_note) and declared in temp at its first use.  Writes through
** a temp declaration on a read-only connection are refused here, as
** SQLite refuses them through main.
**
** Transactions: the SQLite transaction is one root transaction of the
** store, shared by every KV table it writes (KvConn.pSqlRoot): xBegin joins
** it, xSync prepares it (conflict check, WAL flush), xCommit publishes it,
** xRollback rolls it back, and savepoints snapshot its write sets.  A
** conflict fails xSync -- so COMMIT -- with SQLITE_BUSY_SNAPSHOT, after
** which SQLite has rolled the whole transaction back.  A COMMIT that fails
** after xSync with SQLITE_BUSY (a database file is locked) leaves the
** transaction open: its next statement takes the prepare back
** (vtabSqlRootGoesOn) and the retried COMMIT prepares again.
**
** Reads.  Inside an explicit SQL transaction (BEGIN or SAVEPOINT) a read
** belongs to the transaction as much as a write: its table's snapshot is
** fixed at the first read, point reads join the conflict check, and every
** later statement of the transaction sees the same snapshot.  SQLite calls
** xBegin only for statements that write a virtual table, so a read that
** finds no SQL root yet enlists the connection's anchor table,
** temp.kv_sql_txn_anchor (module kv_sql_txn_anchor, no rows), in the
** transaction: "UPDATE temp.kv_sql_txn_anchor SET x=x WHERE 0" compiles an
** OP_VBegin for it and changes nothing (the first time, creating the
** anchor enlists it).  The anchor takes part in the root like a written KV
** table (xSync, xCommit, xRollback, savepoints) and, being in the temp
** database, makes only the connection's private temp database a write
** transaction.  A transaction that only read commits without a conflict
** check (its reads were one snapshot) and releases it.  Autocommit
** statements that only read take no root: they read the latest committed
** state.
**
** Every connected KV table is on a process-wide list (vtabLive), from
** which kv_vtab_lookup finds the store and KV table of a table named as a
** connection sees it, for the write hooks of ext/depot_kv.h.
*/
#include "config.h"
#include "ext/kv/kv.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct VtabTable VtabTable;
typedef struct VtabCursor VtabCursor;

/* The module arguments of a KV table (and its type). */
typedef struct VtabArgs VtabArgs;
struct VtabArgs {
  char *zDir;                   /* sqlite3_malloc'd or NULL */
  int bPersist;
  int bPersistGiven;
  int bAccel;                   /* accelerated_repair=1 */
  int bAccelGiven;
  char *zTtlMs;                 /* ttl_ms=, sqlite3_malloc'd or NULL */
  char *zDeadline;              /* deadline=, sqlite3_malloc'd or NULL */
  char *zOptions;               /* the catalog options they make, or NULL */
  const char *zType;            /* the module name: the table type */
};

struct VtabTable {
  sqlite3_vtab base;            /* must be first */
  sqlite3 *db;
  KvConn *pConn;                /* holds a reference */
  KvEngine *pEng;               /* holds a reference; NULL while the
                                ** store directory is missing (xConnect) */
  VtabArgs args;                  /* own copies of zDir and zType */
  char *zName; int nName;       /* the KV table */
  char *zSchema;                /* the database holding the vtab ("main") */
  int bJoined;                  /* joined pConn->pSqlRoot */
  KvBuf kOld, kNew, val;        /* xUpdate scratch, reused across rows */
  VtabCursor *pSpare;           /* a closed cursor kept with its buffers
                                ** for the next xOpen */
  int bListed;                  /* in the live list (vtabLive) */
  VtabTable *pLiveNext;
};

/* Values in place.  A range scan over a backend whose entries stay valid
** while its snapshot lives (kv_iter_stable: kv_memory's committed data)
** hands a text or blob value to SQLite with SQLITE_STATIC, no copy.
** SQLite may keep such a pointer past the row and past the next xFilter
** (sqlite3VdbeMemCopy copies MEM_Static values shallowly, e.g. into a
** min()/max() accumulator) until the statement is reset, which closes the
** cursor: so a scan that handed out values in place is kept open, snapshot
** and all, until xClose.  At most VTAB_KEEP scans are kept per cursor;
** once that many are, later scans of the statement copy (TRANSIENT).
** Keys and the root's own writes are always copied, and so are the
** values of point reads, but for one case: a point read with no root of
** a kv_memory table pins the entry in the map (kv_get_pin) instead of
** copying it, and its text or blob goes to SQLite in place under a pin
** of its own that SQLite's destructor gives back
** (kv_value_result_pinned), so such a value stays valid however long
** SQLite keeps it: past the one place SQLite closes a cursor early (a
** one-row DELETE or UPDATE, which needs SQLITE_INDEX_SCAN_UNIQUE: point
** mode), where no SQLITE_STATIC value may be handed out.  A text whose
** buffer has a NUL after it
** (KV_ENTRY_TERM), in place or copied, goes as a terminated string, so a
** host that fetches it with sqlite3_column_text gets it without SQLite
** making a terminated copy per row.  A text from a backend whose values
** have no NUL after them (kv_log: the next bytes of its cache) is copied
** with a terminator into the cursor's scratch buffer and goes from there,
** terminated and SQLITE_TRANSIENT: SQLite copies it into the register's
** own buffer, reused row after row, so no row allocates. */
#define VTAB_KEEP 4

struct VtabCursor {
  sqlite3_vtab_cursor base;     /* must be first */
  KvIter *pIter;                /* range mode */
  int bPoint;                   /* point mode: aPoint[] lookups */
  int nPoint, iPoint;
  int nPointAlloc;              /* aPoint[] entries with buffers: reused
                                ** by later xFilter calls */
  KvBuf *aPoint;                /* encoded keys, in output order */
  const uint8_t *aPin;          /* point mode: current value when pinned
                                ** (kv_get_pin), else NULL and in val: */
  int nPin;
  KvBuf val;                    /* point mode: current value, */
  int fVal;                     /* ... KV_ENTRY_TERM when a NUL follows;
                                ** range mode: val is xColumn's scratch for
                                ** a text that needs a terminator */
  KvBuf lo, hi;                 /* range mode: encoded bounds */
  int bStaticUsed;              /* pIter's scan handed out values in place */
  int nKeep;                    /* scans kept open until xClose: */
  KvIter *apKeep[VTAB_KEEP];    /* their values may still be referenced */
  const KvMapEntry *pEntry;     /* range mode: pIter's current entry */
  int fEntry;                   /* ... and its KV_ENTRY_* flags */
  int bEof;
  sqlite3_int64 iRow;
};

/* ---------------------------------------------------- create, connect --- */

/* Unquote a module argument value in place ('x', "x" or x): inside the
** quotes a doubled quote character stands for one, as in SQL. */
static void vtabUnquote(char *z){
  int n = (int)strlen(z), i, j = 0;
  char q = z[0];
  if( n<2 || (q!='\'' && q!='"') || z[n-1]!=q ) return;
  for(i=1; i<n-1; i++){
    z[j++] = z[i];
    if( z[i]==q && z[i+1]==q && i+1<n-1 ) i++;
  }
  z[j] = 0;
}

/* The error of a module argument that is not one this table type takes. */
static int vtabArgBad(const char *zArg, const VtabArgs *pA, char **pzErr){
  *pzErr = sqlite3_mprintf("kv: bad argument '%s': expected dir=PATH%s, "
      "and a deadline: ttl_ms=N or deadline='expr'",
      zArg, strcmp(pA->zType, "kv_btree")==0
            ? ", persistence=0|1 or accelerated_repair=0|1"
            : " or persistence=0|1");
  return SQLITE_ERROR;
}

/* Trim the blanks around z in place; returns z moved past the leading. */
static char *vtabTrim(char *z){
  while( *z==' ' ) z++;
  while( *z && z[strlen(z)-1]==' ' ) z[strlen(z)-1] = 0;
  return z;
}

/* Take one key=value argument (zK and zV trimmed, zV unquoted) into *pA.
** Each key may be given once. */
static int vtabTakeArg(const char *zArg, const char *zK, char *zV, VtabArgs *pA,
                       char **pzErr){
  int b01 = strcmp(zV, "0")==0 || strcmp(zV, "1")==0;
  int bDir = sqlite3_stricmp(zK, "dir")==0;
  int *pbGiven = sqlite3_stricmp(zK, "persistence")==0 ? &pA->bPersistGiven
      : sqlite3_stricmp(zK, "accelerated_repair")==0 ? &pA->bAccelGiven : 0;
  char **pzTtl = sqlite3_stricmp(zK, "ttl_ms")==0 ? &pA->zTtlMs
      : sqlite3_stricmp(zK, "deadline")==0 ? &pA->zDeadline : 0;
  if( pzTtl ){
    if( *pzTtl ){
      *pzErr = sqlite3_mprintf("kv: argument %s is given twice", zK);
      return SQLITE_ERROR;
    }
    *pzTtl = sqlite3_mprintf("%s", zV);
    return *pzTtl ? SQLITE_OK : SQLITE_NOMEM;
  }
  if( !bDir && pbGiven==0 ) return vtabArgBad(zArg, pA, pzErr);
  if( pbGiven ? *pbGiven : pA->zDir!=0 ){
    *pzErr = sqlite3_mprintf("kv: argument %s is given twice", zK);
    return SQLITE_ERROR;
  }
  if( pbGiven==0 && zV[0] ){
    pA->zDir = sqlite3_mprintf("%s", zV);
    return pA->zDir ? SQLITE_OK : SQLITE_NOMEM;
  }
  if( pbGiven==&pA->bPersistGiven && b01 ){
    pA->bPersist = zV[0]=='1';
  }else if( pbGiven==&pA->bAccelGiven && b01
         && strcmp(pA->zType, "kv_btree")==0 ){
    pA->bAccel = zV[0]=='1';
  }else{
    return vtabArgBad(zArg, pA, pzErr);
  }
  *pbGiven = 1;
  return SQLITE_OK;
}

static int vtabParseArg(const char *zArg, VtabArgs *pA, char **pzErr){
  const char *zEq = strchr(zArg, '=');
  char *zKey, *zVal;
  int rc;
  if( zEq==0 ) return vtabArgBad(zArg, pA, pzErr);
  zKey = sqlite3_mprintf("%.*s", (int)(zEq-zArg), zArg);
  zVal = sqlite3_mprintf("%s", zEq+1);
  if( zKey==0 || zVal==0 ){
    rc = SQLITE_NOMEM;
  }else{
    char *zV = vtabTrim(zVal);
    vtabUnquote(zV);
    rc = vtabTakeArg(zArg, vtabTrim(zKey), zV, pA, pzErr);
  }
  sqlite3_free(zKey);
  sqlite3_free(zVal);
  return rc;
}

/* The catalog options of the arguments (pA->zOptions): accelerated_repair
** and the deadline, checked (kv_ttl_option). */
static int vtabOptions(VtabArgs *pA, char **pzErr){
  KvBuf json = {0, 0, 0};
  int rc = SQLITE_OK;
  if( pA->bAccel ) rc = kv_buf_append(&json, ",\"accelerated_repair\":1", 23);
  if( rc==SQLITE_OK ){
    rc = kv_ttl_option(pA->zTtlMs, pA->zDeadline, &json, pzErr);
  }
  if( rc==SQLITE_OK && json.n>0 ){
    pA->zOptions = sqlite3_mprintf("{%.*s}", json.n-1, json.a+1);
    if( pA->zOptions==0 ) rc = SQLITE_NOMEM;
  }
  kv_buf_free(&json);
  return rc;
}

/* Do the stored options zStored give the deadline the arguments give?
** The deadline member is the last of pA->zOptions (vtabOptions), so its
** text runs to the closing brace; stored options may have more after. */
static int vtabSameDeadline(const VtabArgs *pA, const char *zStored){
  const char *zKey, *zMine, *zTheirs;
  size_t n;
  if( pA->zTtlMs==0 && pA->zDeadline==0 ) return 1;   /* kept as stored */
  zKey = pA->zTtlMs ? "\"ttl_ms\"" : "\"deadline\"";
  zMine = pA->zOptions ? strstr(pA->zOptions, zKey) : 0;
  zTheirs = zStored ? strstr(zStored, zKey) : 0;
  if( zMine==0 || zTheirs==0 ) return 0;
  n = strlen(zMine) - 1;
  return strncmp(zTheirs, zMine, n)==0
      && (zTheirs[n]==',' || zTheirs[n]=='}');
}

static int vtabBegin(sqlite3_vtab *pVtab);
static void vtabCursorFree(VtabCursor *c);
static void vtabLeave(VtabTable *p);

/* Attach the existing KV table, or (bCreate) create it in the connection's
** SQL root transaction: SQLite adds a table it has just created to the
** open transaction (without calling xBegin), so the create commits with
** the statement or the explicit transaction around it and is undone by its
** rollback.  Called last in xCreate, so nothing can fail after it. */
static int vtabCreateOrAttach(VtabTable *p, const VtabArgs *pA, int bCreate,
                              char **pzErr){
  KvMeta meta;
  int bFound = 0, bCreated = 0;
  int rc = kv_table_meta(p->pEng, 0, p->zName, p->nName, &meta, &bFound);
  if( rc!=SQLITE_OK ) return rc;
  if( bFound ){
    if( strcmp(meta.zType, pA->zType)!=0
     || (pA->bPersistGiven && meta.bPersist!=pA->bPersist) ){
      *pzErr = sqlite3_mprintf("kv: table %s exists as %s with persistence=%d;"
          " cannot attach it as %s%s", p->zName, meta.zType,
          meta.bPersist, pA->zType, pA->bPersistGiven
            ? (pA->bPersist ? " with persistence=1" : " with persistence=0")
            : "");
      rc = SQLITE_ERROR;
    }else if( pA->bAccelGiven
           && kv_btree_accel_option(meta.zOptions)!=pA->bAccel ){
      /* the stored option decides: a different one would be ignored */
      *pzErr = sqlite3_mprintf("kv: table %s exists as %s with "
          "accelerated_repair=%d; cannot attach it with accelerated_repair=%d",
          p->zName, meta.zType, !pA->bAccel, pA->bAccel);
      rc = SQLITE_ERROR;
    }else if( !vtabSameDeadline(pA, meta.zOptions) ){
      *pzErr = sqlite3_mprintf("kv: table %s exists with another deadline "
          "(its options: %s); cannot attach it with %s=%s", p->zName,
          meta.zOptions ? meta.zOptions : "none",
          pA->zTtlMs ? "ttl_ms" : "deadline",
          pA->zTtlMs ? pA->zTtlMs : pA->zDeadline);
      rc = SQLITE_ERROR;
    }
    kv_meta_clear(&meta);
    return rc;
  }
  if( !bCreate ){
    /* Removed behind SQLite's back (kv_remove_table, another schema):
    ** connect anyway so that DROP TABLE still works; every read and write
    ** fails with "kv: no such table". */
    return SQLITE_OK;
  }
  rc = vtabBegin(&p->base);
  if( rc!=SQLITE_OK ){
    *pzErr = p->base.zErrMsg;
    p->base.zErrMsg = 0;
    return rc;
  }
  rc = kv_create_table(p->pConn->pSqlRoot, p->zName, p->nName, pA->zType,
                       pA->bPersist, pA->zOptions, &bCreated, pzErr);
  if( rc==SQLITE_OK && bCreated && (pA->zTtlMs || pA->zDeadline) ){
    rc = kv_ttl_create_index(p->pConn->pSqlRoot, p->zName, p->nName,
                             pA->zType, pA->bPersist, pzErr);
  }
  if( rc!=SQLITE_OK ) vtabLeave(p);
  return rc;
}

/* ---------------------------------------------------------- live list ---
** Every connected KV table of the process, for kv_vtab_lookup (the C API
** of ext/depot_kv.h names a table as a connection sees it).  Guarded by
** vtabLiveMutex; a table joins it when xCreate/xConnect succeed and leaves
** it in vtabFree. */
static pthread_mutex_t vtabLiveMutex = PTHREAD_MUTEX_INITIALIZER;
static VtabTable *vtabLive = 0;

static void vtabLiveAdd(VtabTable *p){
  pthread_mutex_lock(&vtabLiveMutex);
  p->pLiveNext = vtabLive;
  vtabLive = p;
  p->bListed = 1;
  pthread_mutex_unlock(&vtabLiveMutex);
}

static void vtabLiveRemove(VtabTable *p){
  VtabTable **pp;
  if( !p->bListed ) return;
  pthread_mutex_lock(&vtabLiveMutex);
  for(pp=&vtabLive; *pp; pp=&(*pp)->pLiveNext){
    if( *pp==p ){
      *pp = p->pLiveNext;
      break;
    }
  }
  p->bListed = 0;
  pthread_mutex_unlock(&vtabLiveMutex);
}

static int vtabStoreReady(VtabTable *p);

int kv_vtab_lookup(sqlite3 *db, const char *zSchema, const char *zName,
                   KvEngine **ppEng, char **pzTable, char **pzErr){
  VtabTable *p;
  int rc;
  *ppEng = 0;
  *pzTable = 0;
  pthread_mutex_lock(&vtabLiveMutex);
  for(p=vtabLive; p; p=p->pLiveNext){
    if( p->db==db && sqlite3_stricmp(p->zSchema, zSchema)==0
     && sqlite3_stricmp(p->zName, zName)==0 ) break;
  }
  pthread_mutex_unlock(&vtabLiveMutex);
  /* The caller holds db's mutex: p stays connected until it returns. */
  if( p==0 ) return SQLITE_NOTFOUND;
  rc = vtabStoreReady(p);
  if( rc!=SQLITE_OK ){
    *pzErr = p->base.zErrMsg;
    p->base.zErrMsg = 0;
    return rc;
  }
  *pzTable = sqlite3_mprintf("%s", p->zName);
  if( *pzTable==0 ) return SQLITE_NOMEM;
  *ppEng = kv_engine_ref(p->pEng);
  return SQLITE_OK;
}

static void vtabFree(VtabTable *p){
  if( p ){
    vtabLiveRemove(p);
    kv_engine_unref(p->pEng);
    if( p->pConn ) kv_conn_unref(p->pConn);
    kv_buf_free(&p->kOld);
    kv_buf_free(&p->kNew);
    kv_buf_free(&p->val);
    vtabCursorFree(p->pSpare);
    sqlite3_free(p->args.zDir);
    sqlite3_free(p->args.zTtlMs);
    sqlite3_free(p->args.zDeadline);
    sqlite3_free(p->args.zOptions);
    sqlite3_free((char*)p->args.zType);
    sqlite3_free(p->zName);
    sqlite3_free(p->zSchema);
    sqlite3_free(p->base.zErrMsg);  /* an xDestroy message SQLite dropped */
    sqlite3_free(p);
  }
}

static void vtabSetError(VtabTable *p, char *zErr){
  sqlite3_free(p->base.zErrMsg);
  p->base.zErrMsg = zErr;
}

/* Open the store of a table attached while its directory was missing (or
** held no store), if the directory is back, and check that the table there
** is of this type.
** Called before every read and write (and by DROP TABLE): while the
** directory is still missing, SQLITE_CANTOPEN with a message naming the
** table and the directory, and nothing is created.  SQLITE_OK with p->pEng
** set otherwise. */
static int vtabStoreReady(VtabTable *p){
  char *zMissing = 0, *zErr = 0;
  int rc, bEmpty = 0;
  if( p->pEng ) return SQLITE_OK;
  rc = kv_conn_store_attach(p->pConn, p->args.zDir, p->zSchema, &p->pEng,
                            &zMissing, &bEmpty, &zErr);
  if( rc==SQLITE_OK && zMissing && bEmpty ){
    zErr = sqlite3_mprintf("kv: store %s of table %s holds no store files "
        "(disk not mounted? files deleted?); restore them, or DROP TABLE %s",
        zMissing, p->zName, p->zName);
    rc = zErr ? SQLITE_CANTOPEN : SQLITE_NOMEM;
  }else if( rc==SQLITE_OK && zMissing ){
    zErr = sqlite3_mprintf("kv: store %s of table %s is missing (moved or "
        "deleted?); restore it, or DROP TABLE %s", zMissing, p->zName,
        p->zName);
    rc = zErr ? SQLITE_CANTOPEN : SQLITE_NOMEM;
  }else if( rc==SQLITE_OK ){
    rc = vtabCreateOrAttach(p, &p->args, 0, &zErr);
    if( rc!=SQLITE_OK ){
      kv_engine_unref(p->pEng);
      p->pEng = 0;
    }
  }
  sqlite3_free(zMissing);
  if( rc!=SQLITE_OK ) vtabSetError(p, zErr);
  return rc;
}

/* The store of the table: xCreate opens (and makes) it; xConnect attaches
** an existing table and never makes a store, so a missing directory leaves
** p->pEng NULL and the table connected (every use fails, DROP TABLE
** works: see vtabStoreReady). */
static int vtabStore(VtabTable *p, int bCreate, char **pzErr){
  char *zMissing = 0;
  int rc, bEmpty;
  if( bCreate ){
    return kv_conn_store(p->pConn, p->args.zDir, p->zSchema, &p->pEng, pzErr);
  }
  rc = kv_conn_store_attach(p->pConn, p->args.zDir, p->zSchema, &p->pEng,
                            &zMissing, &bEmpty, pzErr);
  sqlite3_free(zMissing);
  return rc;
}

static int vtabInit(sqlite3 *db, void *pAux, int argc,
                    const char *const *argv, sqlite3_vtab **ppVtab,
                    char **pzErr, int bCreate){
  KvConn *pConn = (KvConn*)pAux;
  VtabTable *p = 0;
  VtabArgs a;
  int i, rc = SQLITE_OK;
  memset(&a, 0, sizeof(a));
  a.zType = argv[0];
  a.bPersist = strcmp(argv[0], "kv_memory")!=0;  /* kv_btree, kv_log: 1 */
  for(i=3; i<argc && rc==SQLITE_OK; i++) rc = vtabParseArg(argv[i], &a, pzErr);
  if( rc==SQLITE_OK ) rc = vtabOptions(&a, pzErr);
  if( rc==SQLITE_OK && (p = sqlite3_malloc64(sizeof(*p)))==0 ){
    rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ){
    memset(p, 0, sizeof(*p));
    p->db = db;
    kv_conn_ref(pConn);
    p->pConn = pConn;
    p->args = a;                               /* takes the strings */
    memset(&a, 0, sizeof(a));
    p->args.zType = sqlite3_mprintf("%s", argv[0]);
    p->zName = sqlite3_mprintf("%s", argv[2]);
    p->nName = p->zName ? (int)strlen(p->zName) : 0;
    p->zSchema = sqlite3_mprintf("%s", argv[1]);
    if( p->zName==0 || p->zSchema==0 || p->args.zType==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = kv_name_check(p->zName, p->nName, pzErr);
  if( rc==SQLITE_OK ) rc = vtabStore(p, bCreate, pzErr);
  if( rc==SQLITE_OK ){
    rc = sqlite3_declare_vtab(db, "CREATE TABLE x(key PRIMARY KEY NOT NULL, "
                                  "value) WITHOUT ROWID");
  }
  if( rc==SQLITE_OK ){
    sqlite3_vtab_config(db, SQLITE_VTAB_CONSTRAINT_SUPPORT, 1);
    sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
    if( p->pEng ) rc = vtabCreateOrAttach(p, &p->args, bCreate, pzErr);
    if( rc==SQLITE_OK && p->pEng ){
      kv_ttl_attach(pConn, p->pEng, p->zName, p->nName);
    }
  }
  if( rc==SQLITE_OK && sqlite3_stricmp(p->zSchema, "main")==0 ){
    rc = kv_attach_note(pConn, p->zName, p->args.zType, p->pEng);
  }
  if( rc==SQLITE_OK ){
    vtabLiveAdd(p);
    *ppVtab = &p->base;
  }else{
    vtabFree(p);
  }
  sqlite3_free(a.zDir);
  sqlite3_free(a.zTtlMs);
  sqlite3_free(a.zDeadline);
  sqlite3_free(a.zOptions);
  return rc;
}

static int vtabCreate(sqlite3 *db, void *pAux, int argc,
                      const char *const *argv, sqlite3_vtab **pp, char **pzErr){
  return vtabInit(db, pAux, argc, argv, pp, pzErr, 1);
}
static int vtabConnect(sqlite3 *db, void *pAux, int argc,
                       const char *const *argv, sqlite3_vtab **pp,
                       char **pzErr){
  return vtabInit(db, pAux, argc, argv, pp, pzErr, 0);
}

static int vtabDisconnect(sqlite3_vtab *pVtab){
  vtabFree((VtabTable*)pVtab);
  return SQLITE_OK;
}

/* Is p a declaration in temp of a table of a directory store, which other
** connections share (kv_decl.c)?  Its DROP TABLE only detaches it. */
static int vtabIsTempDecl(VtabTable *p){
  if( sqlite3_stricmp(p->zSchema, "temp")!=0 ) return 0;
  return p->pEng ? kv_engine_dir(p->pEng)!=0 : p->args.zDir!=0;
}

/* DROP TABLE of a temp declaration: detach, remove nothing.  Refused
** while the table takes part in the open transaction, whose commit still
** needs it. */
static int vtabDetach(VtabTable *p){
  if( p->bJoined ){
    char *zErr = sqlite3_mprintf("kv: DROP TABLE temp.%s must wait for the "
        "end of the transaction that uses it", p->zName);
    sqlite3_log(SQLITE_ERROR, "%s", zErr ? zErr : "kv: DROP TABLE refused");
    vtabSetError(p, zErr);
    return SQLITE_ERROR;
  }
  kv_attach_detached(p->pConn, p->zName);
  return vtabDisconnect(&p->base);
}

/* DROP TABLE: remove the KV table in its own root transaction.  SQLite
** gives a dropped virtual table no commit or rollback callback, so a
** removal inside an explicit transaction could not be undone by its
** ROLLBACK: it is refused there, and changes nothing.  The drop of a
** declaration in temp on a directory store (kv_decl.c) removes nothing:
** it detaches the connection from the table. */
static int vtabDestroy(sqlite3_vtab *pVtab){
  VtabTable *p = (VtabTable*)pVtab;
  KvRoot *pRoot = 0;
  KvMeta meta;
  char *zErr = 0;
  int bFound = 0;
  int rc;
  if( vtabIsTempDecl(p) ) return vtabDetach(p);
  if( !sqlite3_get_autocommit(p->db) ){
    /* SQLite drops xDestroy's message (the user sees "SQL logic error"),
    ** so it also goes to the error log. */
    zErr = sqlite3_mprintf("kv: DROP TABLE %s must run outside an explicit "
        "transaction: removing a KV table commits on its own", p->zName);
    sqlite3_log(SQLITE_ERROR, "%s", zErr ? zErr : "kv: DROP TABLE refused");
    vtabSetError(p, zErr);
    return SQLITE_ERROR;
  }
  if( p->pEng==0 ){
    rc = vtabStoreReady(p);
    if( rc==SQLITE_CANTOPEN ){
      /* The store is still missing: there is nothing to remove from it,
      ** and dropping the table from the schema is all the user can do. */
      vtabSetError(p, 0);
      return vtabDisconnect(pVtab);
    }
    if( rc!=SQLITE_OK ) return rc;
  }
  rc = kv_table_meta(p->pEng, 0, p->zName, p->nName, &meta, &bFound);
  kv_meta_clear(&meta);
  if( rc==SQLITE_OK && bFound ) rc = kv_root_begin(p->pEng, &pRoot);
  if( rc==SQLITE_OK && bFound ){
    rc = kv_remove_table(pRoot, p->zName, p->nName, &zErr);
    if( rc==SQLITE_OK ){
      rc = kv_derived_remove_carriers(p->pConn, pRoot, p->zName, p->nName,
                                      &zErr);
    }
    if( rc==SQLITE_OK ){
      rc = kv_ttl_remove_index(pRoot, p->zName, p->nName, &zErr);
    }
    if( rc==SQLITE_OK ) rc = kv_root_commit(pRoot, &zErr);
  }
  kv_root_free(pRoot);
  if( rc!=SQLITE_OK ){
    /* SQLite drops xDestroy's message: it also goes to the error log. */
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: DROP TABLE failed");
    vtabSetError(p, zErr);
    return rc;
  }
  return vtabDisconnect(pVtab);
}

/* ------------------------------------------------------------- planning --
** idxNum is a bitmask of what xFilter gets in argv, in this order:
**   0x01 KV_IDX_EQ   key = ?          (argv: the value; SQLite loops an IN
**                                      itself when it cannot hand it over)
**   0x02 KV_IDX_IN   key IN (...)     (argv: the list, read all at once
**                                      with sqlite3_vtab_in_first/next)
**   0x04 KV_IDX_GT   key > ?          lower bound (one of GT/GE)
**   0x08 KV_IDX_GE   key >= ?
**   0x10 KV_IDX_LT   key < ?          upper bound (one of LT/LE)
**   0x20 KV_IDX_LE   key <= ?
**   0x40 KV_IDX_DESC walk in descending key order (ORDER BY key DESC)
** BETWEEN arrives as GE + LE.  Constraints with a collation other than
** BINARY are left to SQLite.  ORDER BY key [ASC|DESC] is always consumed. */
#define KV_IDX_EQ   0x01
#define KV_IDX_IN   0x02
#define KV_IDX_GT   0x04
#define KV_IDX_GE   0x08
#define KV_IDX_LT   0x10
#define KV_IDX_LE   0x20
#define KV_IDX_DESC 0x40

static int vtabInAllAtOnce(sqlite3_index_info *pInfo, int i){
#if SQLITE_VERSION_NUMBER>=3038000
  if( sqlite3_libversion_number()>=3038000 && sqlite3_vtab_in(pInfo, i, -1) ){
    sqlite3_vtab_in(pInfo, i, 1);
    return 1;
  }
#endif
  (void)pInfo; (void)i;
  return 0;
}

/* Pick the constraint index for each role: [0] eq, [1] lower, [2] upper. */
static void vtabPickConstraints(sqlite3_index_info *pInfo, int *aPick,
                                int *pMask){
  int i;
  aPick[0] = aPick[1] = aPick[2] = -1;
  *pMask = 0;
  for(i=0; i<pInfo->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &pInfo->aConstraint[i];
    const char *zColl;
    if( !c->usable || c->iColumn!=0 ) continue;
    zColl = sqlite3_vtab_collation(pInfo, i);
    if( zColl && sqlite3_stricmp(zColl, "BINARY")!=0 ) continue;
    switch( c->op ){
      case SQLITE_INDEX_CONSTRAINT_EQ:
        if( aPick[0]<0 ){ aPick[0] = i; *pMask |= KV_IDX_EQ; }
        break;
      case SQLITE_INDEX_CONSTRAINT_GT: case SQLITE_INDEX_CONSTRAINT_GE:
        if( aPick[1]<0 ){
          aPick[1] = i;
          *pMask |= c->op==SQLITE_INDEX_CONSTRAINT_GT ? KV_IDX_GT : KV_IDX_GE;
        }
        break;
      case SQLITE_INDEX_CONSTRAINT_LT: case SQLITE_INDEX_CONSTRAINT_LE:
        if( aPick[2]<0 ){
          aPick[2] = i;
          *pMask |= c->op==SQLITE_INDEX_CONSTRAINT_LT ? KV_IDX_LT : KV_IDX_LE;
        }
        break;
    }
  }
}

static int vtabBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  int aPick[3], mask, i, n = 0;
  (void)pVtab;
  vtabPickConstraints(pInfo, aPick, &mask);
  if( mask & KV_IDX_EQ ){
    /* A point lookup: range constraints are redundant, SQLite checks them. */
    mask &= ~(KV_IDX_GT|KV_IDX_GE|KV_IDX_LT|KV_IDX_LE);
    aPick[1] = aPick[2] = -1;
    if( vtabInAllAtOnce(pInfo, aPick[0]) ) mask ^= KV_IDX_EQ|KV_IDX_IN;
  }
  for(i=0; i<3; i++){
    if( aPick[i]<0 ) continue;
    pInfo->aConstraintUsage[aPick[i]].argvIndex = ++n;
    pInfo->aConstraintUsage[aPick[i]].omit = 1;
  }
  if( pInfo->nOrderBy==1 && pInfo->aOrderBy[0].iColumn==0 ){
    if( pInfo->aOrderBy[0].desc ) mask |= KV_IDX_DESC;
    pInfo->orderByConsumed = 1;
  }
  if( mask & KV_IDX_EQ ){
    pInfo->estimatedCost = 1.0;
    pInfo->estimatedRows = 1;
    pInfo->idxFlags = SQLITE_INDEX_SCAN_UNIQUE;
  }else if( mask & KV_IDX_IN ){
    pInfo->estimatedCost = 10.0;
    pInfo->estimatedRows = 10;
  }else if( aPick[1]>=0 || aPick[2]>=0 ){
    pInfo->estimatedCost = (aPick[1]>=0 && aPick[2]>=0) ? 100.0 : 1000.0;
    pInfo->estimatedRows = (aPick[1]>=0 && aPick[2]>=0) ? 100 : 1000;
  }else{
    pInfo->estimatedCost = 1000000.0;
    pInfo->estimatedRows = 1000000;
  }
  pInfo->idxNum = mask;
  return SQLITE_OK;
}

/* -------------------------------------------------------------- cursors --- */

/* Cursors keep their buffers (the point keys, the value, the range
** iterator with its bound buffers, released between scans) from one
** xFilter to the next, and a closed cursor is kept by its table for the
** next xOpen (a prepared statement opens one at every run), so a point
** read allocates nothing once the buffers have grown, and a range read
** allocates only what the backend's snapshot and cursor need. */
static int vtabOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCsr){
  VtabTable *p = (VtabTable*)pVtab;
  VtabCursor *c = p->pSpare;
  if( c ){
    p->pSpare = 0;
  }else{
    c = sqlite3_malloc64(sizeof(*c));
    if( c==0 ) return SQLITE_NOMEM;
    memset(c, 0, sizeof(*c));
  }
  c->bEof = 1;
  c->iRow = 0;
  *ppCsr = &c->base;
  return SQLITE_OK;
}

/* Give back the point value's pin, if any. */
static void vtabPointUnpin(VtabCursor *c){
  if( c->aPin ){
    kv_get_unpin(c->aPin);
    c->aPin = 0;
    c->nPin = 0;
  }
}

static void vtabCursorReset(VtabCursor *c){
  vtabPointUnpin(c);
  if( c->bStaticUsed ){                 /* keep the scan until xClose */
    c->apKeep[c->nKeep++] = c->pIter;
    c->pIter = 0;
    c->bStaticUsed = 0;
  }
  kv_iter_release(c->pIter);            /* kept for the next range */
  c->nPoint = c->iPoint = 0;
  c->bPoint = 0;
  c->bEof = 1;
}

/* The statement is done with the cursor: release the scans kept for the
** values handed out in place (one iterator stays for reuse). */
static void vtabCursorUnkeep(VtabCursor *c){
  while( c->nKeep>0 ){
    KvIter *pIter = c->apKeep[--c->nKeep];
    if( c->pIter==0 ){
      kv_iter_release(pIter);
      c->pIter = pIter;
    }else{
      kv_iter_close(pIter);
    }
  }
}

static void vtabCursorFree(VtabCursor *c){
  int i;
  if( c==0 ) return;
  vtabCursorReset(c);
  vtabCursorUnkeep(c);
  kv_iter_close(c->pIter);
  for(i=0; i<c->nPointAlloc; i++) kv_buf_free(&c->aPoint[i]);
  sqlite3_free(c->aPoint);
  kv_buf_free(&c->val);
  kv_buf_free(&c->lo);
  kv_buf_free(&c->hi);
  sqlite3_free(c);
}

static int vtabClose(sqlite3_vtab_cursor *pCsr){
  VtabCursor *c = (VtabCursor*)pCsr;
  VtabTable *p = (VtabTable*)pCsr->pVtab;
  vtabCursorReset(c);
  vtabCursorUnkeep(c);
  if( p->pSpare==0 && c->val.nAlloc<=65536 ){
    p->pSpare = c;
  }else{
    vtabCursorFree(c);
  }
  return SQLITE_OK;
}

/* The root reads go through: the open SQL transaction's, if it is on this
** table's store and still active; else none (latest committed state). */
static KvRoot *vtabReadRoot(VtabTable *p){
  KvRoot *r = p->pConn->pSqlRoot;
  if( r && kv_root_engine(r)==p->pEng && kv_root_state(r)==KV_ROOT_ACTIVE ){
    return r;
  }
  return 0;
}

/* Move to the first point key at or after iPoint that exists. */
static int vtabPointSettle(VtabCursor *c){
  VtabTable *p = (VtabTable*)c->base.pVtab;
  int rc = SQLITE_OK, bFound = 0;
  char *zErr = 0;
  vtabPointUnpin(c);
  while( c->iPoint<c->nPoint && rc==SQLITE_OK ){
    KvBuf *k = &c->aPoint[c->iPoint];
    rc = kv_get_pin(p->pEng, vtabReadRoot(p), p->zName, p->nName, k->a,
                    k->n, &c->val, &c->aPin, &c->nPin, &bFound, &zErr);
    if( rc==SQLITE_OK && bFound ) break;
    c->iPoint++;
  }
  c->bEof = rc!=SQLITE_OK || c->iPoint>=c->nPoint;
  c->fVal = c->aPin ? KV_ENTRY_TERM : 0;   /* a map keeps a NUL after it */
  if( !c->bEof && c->aPin==0 && kv_buf_reserve(&c->val, 1)==SQLITE_OK ){
    c->val.a[c->val.n] = 0;       /* a text goes terminated (xColumn) */
    c->fVal = KV_ENTRY_TERM;
  }
  if( zErr ) vtabSetError(p, zErr);
  return rc;
}

static int vtabBufCmp(const void *pA, const void *pB){
  const KvBuf *a = pA, *b = pB;
  int c = memcmp(a->a, b->a, a->n<b->n ? a->n : b->n);
  return c ? c : a->n - b->n;
}
static int vtabBufCmpDesc(const void *pA, const void *pB){
  return -vtabBufCmp(pA, pB);
}

static int vtabPointAdd(VtabCursor *c, sqlite3_value *pVal){
  int rc;
  if( c->nPoint==c->nPointAlloc ){
    int nNew = c->nPointAlloc ? c->nPointAlloc*2 : 4;
    KvBuf *a = sqlite3_realloc64(c->aPoint, nNew*sizeof(KvBuf));
    if( a==0 ) return SQLITE_NOMEM;
    memset(&a[c->nPointAlloc], 0, (nNew-c->nPointAlloc)*sizeof(KvBuf));
    c->aPoint = a;
    c->nPointAlloc = nNew;
  }
  kv_buf_reset(&c->aPoint[c->nPoint]);
  rc = kv_key_encode_bound(pVal, &c->aPoint[c->nPoint]);
  if( rc==SQLITE_EMPTY ) return SQLITE_OK;       /* NULL matches no key */
  if( rc==SQLITE_OK ) c->nPoint++;
  return rc;
}

/* Point mode: collect, order and deduplicate the keys, then look up. */
static int vtabFilterPoints(VtabCursor *c, int idxNum, sqlite3_value *pArg){
  int rc = SQLITE_OK, i, j;
  c->bPoint = 1;
#if SQLITE_VERSION_NUMBER>=3038000
  if( idxNum & KV_IDX_IN ){
    sqlite3_value *v = 0;
    for(rc=sqlite3_vtab_in_first(pArg, &v); rc==SQLITE_OK && v;
        rc=sqlite3_vtab_in_next(pArg, &v)){
      if( (rc = vtabPointAdd(c, v))!=SQLITE_OK ) return rc;
    }
    if( rc==SQLITE_DONE ) rc = SQLITE_OK;
  }else
#endif
  rc = vtabPointAdd(c, pArg);
  if( rc!=SQLITE_OK ) return rc;
  if( c->nPoint>1 ){          /* nPoint is 0 when every operand was NULL */
    qsort(c->aPoint, c->nPoint, sizeof(KvBuf),
          (idxNum & KV_IDX_DESC) ? vtabBufCmpDesc : vtabBufCmp);
  }
  for(i=1, j=0; i<c->nPoint; i++){        /* swaps keep every buffer */
    if( vtabBufCmp(&c->aPoint[j], &c->aPoint[i])!=0 && ++j!=i ){
      KvBuf t = c->aPoint[j];
      c->aPoint[j] = c->aPoint[i];
      c->aPoint[i] = t;
    }
  }
  if( c->nPoint>0 ) c->nPoint = j+1;
  return vtabPointSettle(c);
}

/* Range mode: the scan moved; note where it is for xEof and xColumn. */
static void vtabRangeLanded(VtabCursor *c){
  c->pEntry = kv_iter_landed(c->pIter, &c->fEntry);
  c->bEof = c->pEntry==0;
}

static int vtabFilterRange(VtabCursor *c, int idxNum, int argc,
                           sqlite3_value **argv){
  VtabTable *p = (VtabTable*)c->base.pVtab;
  KvBuf *lo = &c->lo, *hi = &c->hi;       /* reused by every xFilter */
  KvBound bLo, bHi;
  char *zErr = 0;
  int i = 0, rc = SQLITE_OK;
  kv_buf_reset(lo);
  kv_buf_reset(hi);
  if( idxNum & (KV_IDX_GT|KV_IDX_GE) ){
    rc = kv_key_encode_bound(argv[i++], lo);
    bLo.aKey = lo->a; bLo.nKey = lo->n; bLo.bIncl = (idxNum & KV_IDX_GE)!=0;
  }
  if( rc==SQLITE_OK && (idxNum & (KV_IDX_LT|KV_IDX_LE)) && i<argc ){
    rc = kv_key_encode_bound(argv[i++], hi);
    bHi.aKey = hi->a; bHi.nKey = hi->n; bHi.bIncl = (idxNum & KV_IDX_LE)!=0;
  }
  if( rc==SQLITE_OK ){
    const KvBound *pLo = (idxNum & (KV_IDX_GT|KV_IDX_GE)) ? &bLo : 0;
    const KvBound *pHi = (idxNum & (KV_IDX_LT|KV_IDX_LE)) ? &bHi : 0;
    if( c->pIter ){                   /* the cursor's, reused */
      rc = kv_iter_reopen(c->pIter, p->pEng, vtabReadRoot(p), p->zName,
                          p->nName, pLo, pHi, (idxNum & KV_IDX_DESC)!=0, &zErr);
    }else{
      rc = kv_iter_open(p->pEng, vtabReadRoot(p), p->zName, p->nName, pLo,
                        pHi, (idxNum & KV_IDX_DESC)!=0, &c->pIter, &zErr);
    }
    if( rc==SQLITE_OK ) vtabRangeLanded(c);
  }
  if( rc==SQLITE_EMPTY ) rc = SQLITE_OK;      /* a NULL bound: no rows */
  if( zErr ) vtabSetError(p, zErr);
  return rc;
}

/* Enlists the anchor table in the SQLite transaction: the UPDATE compiles
** an OP_VBegin for it (xBegin) and matches no row; if the anchor does not
** exist yet, creating it enlists it.  Whether it exists is asked first
** (sqlite3_table_column_metadata), as preparing the UPDATE of a missing
** table would log "no such table" to SQLite's error log.  Returns an
** SQLite code, and the message in *pzErr on error. */
#define KV_ANCHOR "kv_sql_txn_anchor"
static int vtabAnchorEnlist(sqlite3 *db, char **pzErr){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_table_column_metadata(db, "temp", KV_ANCHOR, 0, 0, 0, 0,
                                         0, 0);
  if( rc==SQLITE_ERROR ){                 /* no such table: create it */
    rc = sqlite3_exec(db, "CREATE VIRTUAL TABLE temp." KV_ANCHOR " USING "
                      KV_ANCHOR, 0, 0, 0);
  }else if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "UPDATE temp." KV_ANCHOR " SET x=x WHERE 0",
                            -1, &pStmt, 0);
    if( rc==SQLITE_OK && sqlite3_step(pStmt)!=SQLITE_DONE ){
      rc = sqlite3_extended_errcode(db);
    }
  }
  if( rc!=SQLITE_OK ) *pzErr = sqlite3_mprintf("%s", sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  return rc;
}

/* Starts the SQL root on this table's store for a transaction that has
** not used a KV table yet, through the anchor.  A connection that may not
** write at all (PRAGMA query_only) cannot enlist it: it reads without a
** root, as autocommit statements do. */
static int vtabJoinByStatement(VtabTable *p){
  KvConn *pConn = p->pConn;
  char *zErr = 0;
  int rc;
  pConn->pJoinEng = p->pEng;
  rc = vtabAnchorEnlist(p->db, &zErr);
  pConn->pJoinEng = 0;
  if( (rc & 0xff)==SQLITE_READONLY ){
    rc = SQLITE_OK;
  }else if( rc!=SQLITE_OK ){
    vtabSetError(p, sqlite3_mprintf("kv: a read of %s inside a transaction "
        "could not join it: %s", p->zName, zErr ? zErr : "?"));
  }else if( pConn->pSqlRoot==0 ){
    /* The UPDATE ran but reached no anchor: temp.kv_sql_txn_anchor is a
    ** table of another kind that the user made. */
    vtabSetError(p, sqlite3_mprintf("kv: a read of %s inside a transaction "
        "could not join it: SQLite did not enlist temp." KV_ANCHOR " (a "
        "temp table of that name that is not of module " KV_ANCHOR " must "
        "be dropped)", p->zName));
    rc = SQLITE_ERROR;
  }
  sqlite3_free(zErr);
  return rc;
}

/* Before a statement of an SQL transaction whose root is prepared: SQLite
** kept the transaction open after a COMMIT that failed past xSync
** (SQLITE_BUSY from a database file), so the transaction goes on and its
** root takes the prepare back (kv_root_unprepare): its statements read
** its own writes and may write more; the retried COMMIT prepares again. */
static int vtabSqlRootGoesOn(VtabTable *p){
  KvRoot *r = p->pConn->pSqlRoot;
  char *zErr = 0;
  int rc;
  if( r==0 || kv_root_state(r)!=KV_ROOT_PREPARED ) return SQLITE_OK;
  rc = kv_root_unprepare(r, &zErr);
  if( rc!=SQLITE_OK ) vtabSetError(p, zErr);
  else sqlite3_free(zErr);
  return rc;
}

/* Before a read inside an explicit SQL transaction: join (or start) the
** SQL root and fix this table's snapshot in it.  Autocommit statements,
** and tables of another store than the root's, read without a root. */
static int vtabReadJoin(VtabTable *p){
  KvConn *pConn = p->pConn;
  char *zErr = 0;
  int rc = SQLITE_OK;
  if( sqlite3_get_autocommit(p->db) || pConn->pJoinEng ) return SQLITE_OK;
  rc = vtabSqlRootGoesOn(p);
  if( rc==SQLITE_OK && pConn->pSqlRoot==0 ) rc = vtabJoinByStatement(p);
  if( rc!=SQLITE_OK || vtabReadRoot(p)==0 ) return rc;
  rc = kv_root_bind(pConn->pSqlRoot, p->zName, p->nName, &zErr);
  if( rc!=SQLITE_OK ) vtabSetError(p, zErr);
  return rc;
}

/* A read or write of a main-schema declaration: declare the table in temp
** for the next statements, if that was not done (kv_decl.c). */
static void vtabFirstUse(VtabTable *p){
  if( p->zSchema[0]=='m' && sqlite3_stricmp(p->zSchema, "main")==0 ){
    kv_attach_first_use(p->pConn, p->zName);
  }
}

static int vtabFilter(sqlite3_vtab_cursor *pCsr, int idxNum, const char *idxStr,
                      int argc, sqlite3_value **argv){
  VtabCursor *c = (VtabCursor*)pCsr;
  int rc;
  (void)idxStr;
  vtabCursorReset(c);
  c->iRow = 0;
  rc = vtabStoreReady((VtabTable*)pCsr->pVtab);
  if( rc==SQLITE_OK ) vtabFirstUse((VtabTable*)pCsr->pVtab);
  if( rc==SQLITE_OK ) rc = vtabReadJoin((VtabTable*)pCsr->pVtab);
  if( rc!=SQLITE_OK ) return rc;
  if( idxNum & (KV_IDX_EQ|KV_IDX_IN) ){
    return vtabFilterPoints(c, idxNum, argv[0]);
  }
  return vtabFilterRange(c, idxNum, argc, argv);
}

static int vtabNext(sqlite3_vtab_cursor *pCsr){
  VtabCursor *c = (VtabCursor*)pCsr;
  c->iRow++;
  if( c->bPoint ){
    c->iPoint++;
    return vtabPointSettle(c);
  }
  c->pEntry = kv_iter_step(c->pIter, &c->fEntry);
  c->bEof = c->pEntry==0;
  if( c->bEof ){
    char *zErr = 0;
    int rc = kv_iter_error(c->pIter, &zErr);
    if( rc!=SQLITE_OK ) vtabSetError((VtabTable*)pCsr->pVtab, zErr);
    else sqlite3_free(zErr);
    return rc;
  }
  return SQLITE_OK;
}

static int vtabEof(sqlite3_vtab_cursor *pCsr){
  return ((VtabCursor*)pCsr)->bEof;
}

static int vtabColumn(sqlite3_vtab_cursor *pCsr, sqlite3_context *ctx, int i){
  VtabCursor *c = (VtabCursor*)pCsr;
  if( c->bPoint ){
    const KvBuf *k = &c->aPoint[c->iPoint];
    if( c->aPin ){
      if( i==0 ) return kv_key_result(ctx, k->a, k->n, c->aPin, c->nPin);
      return kv_value_result_pinned(ctx, c->aPin, c->nPin);
    }
    if( i==0 ) return kv_key_result(ctx, k->a, k->n, c->val.a, c->val.n);
    return kv_value_result_entry(ctx, c->val.a, c->val.n, c->fVal);
  }else{
    const KvMapEntry *e = c->pEntry;
    if( i==0 ) return kv_key_result(ctx, e->aKey, e->nKey, e->aVal, e->nVal);
    int f = c->fEntry;
    if( (f & (KV_ENTRY_TERM|KV_ENTRY_STABLE))==0 ){
      return kv_value_result_unterm(ctx, e->aVal, e->nVal, &c->val);
    }
    if( (f & KV_ENTRY_STABLE) && c->nKeep<VTAB_KEEP ){
      c->bStaticUsed = 1;
    }else{
      f &= ~KV_ENTRY_STABLE;
    }
    return kv_value_result_entry(ctx, e->aVal, e->nVal, f);
  }
}

static int vtabRowid(sqlite3_vtab_cursor *pCsr, sqlite3_int64 *pRowid){
  *pRowid = ((VtabCursor*)pCsr)->iRow;
  return SQLITE_OK;
}

/* --------------------------------------------------------------- writes --- */

/* The root this table's writes go to (xBegin made it).  A table declared
** inside the open transaction is in it without an xBegin (SQLite enlists
** a table it creates, and later OP_VBegin finds it enlisted): its first
** write joins here. */
static int vtabWriteRoot(VtabTable *p, KvRoot **ppRoot){
  KvRoot *r;
  if( !p->bJoined && !sqlite3_get_autocommit(p->db) ){
    int rc = vtabBegin(&p->base);
    if( rc!=SQLITE_OK ) return rc;
  }
  r = p->pConn->pSqlRoot;
  if( r==0 || !p->bJoined ){
    vtabSetError(p, sqlite3_mprintf("kv: table %s is written outside a "
                                    "transaction", p->zName));
    return SQLITE_MISUSE;
  }
  *ppRoot = r;
  return vtabSqlRootGoesOn(p);
}

/* Insert key k (unless it exists and the conflict mode says otherwise).
** An existing key is SQLITE_CONSTRAINT_PRIMARYKEY: under OR IGNORE without
** a message, and SQLite then skips the row without counting it as a
** change (a row skipped with SQLITE_OK would count in sqlite3_changes). */
static int vtabInsertKey(VtabTable *p, KvRoot *r, const KvBuf *k,
                         const KvBuf *v, int bTtl, char **pzErr){
  int eConflict = sqlite3_vtab_on_conflict(p->db);
  if( eConflict!=SQLITE_REPLACE ){
    KvBuf old = {0, 0, 0};
    int bFound = 0;
    int rc = kv_get(p->pEng, r, p->zName, p->nName, k->a, k->n, &old,
                    &bFound, pzErr);
    kv_buf_free(&old);
    if( rc!=SQLITE_OK ) return rc;
    if( bFound ){
      if( eConflict!=SQLITE_IGNORE ){
        *pzErr = sqlite3_mprintf("UNIQUE constraint failed: %s.key",
                                 p->zName);
      }
      return SQLITE_CONSTRAINT_PRIMARYKEY;
    }
  }
  {
    /* an expired row is not found above but is still stored: derived
    ** data must read it (KV_DERIVED_OLD_UNKNOWN) to replace its entries */
    int rc = kv_derived_write(p->pConn, r, p->zName, p->nName, k->a, k->n,
                              v->a, v->n, 0, eConflict!=SQLITE_REPLACE
                              && !bTtl ? KV_DERIVED_OLD_ABSENT
                              : KV_DERIVED_OLD_UNKNOWN, 0, 0, pzErr);
    if( rc!=SQLITE_OK ) return rc;
  }
  return kv_put(r, p->zName, p->nName, k->a, k->n, v->a, v->n, pzErr);
}

static int vtabUpdateRow(VtabTable *p, KvRoot *r, sqlite3_value **argv,
                         char **pzErr){
  KvBuf *kOld = &p->kOld, *kNew = &p->kNew, *v = &p->val;
  int bOld = sqlite3_value_type(argv[0])!=SQLITE_NULL;
  int bTtl = 0;
  int rc;
  kv_buf_reset(kOld);
  kv_buf_reset(kNew);
  kv_buf_reset(v);
  rc = kv_key_encode(argv[2], kNew, pzErr);
  if( rc==SQLITE_CONSTRAINT ) rc = SQLITE_CONSTRAINT_NOTNULL;
  if( rc==SQLITE_OK ) rc = kv_value_encode(argv[2], argv[3], v, pzErr);
  if( rc==SQLITE_OK ){
    rc = kv_ttl_stamp(p->pConn, r, p->zName, p->nName, argv[2], argv[3], v,
                      &bTtl, pzErr);
  }
  if( rc==SQLITE_OK && bOld ) rc = kv_key_encode_old(argv[0], kOld, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( bOld && vtabBufCmp(kOld, kNew)==0 ){
    rc = kv_derived_write(p->pConn, r, p->zName, p->nName, kNew->a, kNew->n,
                          v->a, v->n, 0, KV_DERIVED_OLD_UNKNOWN, 0, 0, pzErr);
    if( rc!=SQLITE_OK ) return rc;
    return kv_put(r, p->zName, p->nName, kNew->a, kNew->n, v->a, v->n, pzErr);
  }
  rc = vtabInsertKey(p, r, kNew, v, bTtl, pzErr);
  if( rc==SQLITE_OK && bOld ){
    rc = kv_derived_write(p->pConn, r, p->zName, p->nName, kOld->a, kOld->n,
                          0, 0, 1, KV_DERIVED_OLD_UNKNOWN, 0, 0, pzErr);
    if( rc==SQLITE_OK ){
      rc = kv_del(r, p->zName, p->nName, kOld->a, kOld->n, pzErr);
    }
  }
  return rc;
}

static int vtabUpdate(sqlite3_vtab *pVtab, int argc, sqlite3_value **argv,
                      sqlite3_int64 *pRowid){
  VtabTable *p = (VtabTable*)pVtab;
  KvRoot *r = 0;
  char *zErr = 0;
  int rc = vtabWriteRoot(p, &r);
  (void)pRowid;
  if( rc!=SQLITE_OK ) return rc;
  vtabFirstUse(p);
  if( argc==1 ){
    kv_buf_reset(&p->kOld);
    rc = kv_key_encode_old(argv[0], &p->kOld, &zErr);
    if( rc==SQLITE_OK ){
      rc = kv_derived_write(p->pConn, r, p->zName, p->nName, p->kOld.a,
                            p->kOld.n, 0, 0, 1, KV_DERIVED_OLD_UNKNOWN, 0, 0,
                            &zErr);
    }
    if( rc==SQLITE_OK ){
      rc = kv_del(r, p->zName, p->nName, p->kOld.a, p->kOld.n, &zErr);
    }
  }else{
    rc = vtabUpdateRow(p, r, argv, &zErr);
  }
  if( zErr ) vtabSetError(p, zErr);
  return rc;
}

static int vtabRename(sqlite3_vtab *pVtab, const char *zNew){
  VtabTable *p = (VtabTable*)pVtab;
  (void)zNew;
  vtabSetError(p, sqlite3_mprintf("kv: KV table %s cannot be renamed",
                                  p->zName));
  return SQLITE_ERROR;
}

/* --------------------------------------------------------- transactions --- */

static int vtabBegin(sqlite3_vtab *pVtab){
  VtabTable *p = (VtabTable*)pVtab;
  KvConn *pConn = p->pConn;
  int rc = vtabStoreReady(p);
  if( rc!=SQLITE_OK ) return rc;
  if( p->zSchema && sqlite3_stricmp(p->zSchema, "temp")==0
   && kv_conn_readonly(p->db) ){
    /* SQLite refuses writes to main on such a connection, not to temp */
    vtabSetError(p, sqlite3_mprintf("kv: table %s cannot be written on a "
        "read-only connection (the database was opened read-only)",
        p->zName));
    return SQLITE_READONLY;
  }
  if( pConn->pSqlRoot && kv_root_engine(pConn->pSqlRoot)!=p->pEng ){
    const char *zA = kv_engine_dir(kv_root_engine(pConn->pSqlRoot));
    const char *zB = kv_engine_dir(p->pEng);
    vtabSetError(p, sqlite3_mprintf("kv: one transaction can write the tables "
        "of one store only: %s is in store %s, and the transaction is bound "
        "to store %s by its first KV read or write", p->zName,
        zB ? zB : "(memory)", zA ? zA : "(memory)"));
    return SQLITE_ERROR;
  }
  if( pConn->pSqlRoot==0 ){
    rc = kv_root_begin_spare(p->pEng, &pConn->pSpareRoot, &pConn->pSqlRoot);
  }
  if( rc==SQLITE_OK && !p->bJoined ){
    p->bJoined = 1;
    pConn->nJoin++;
  }
  return rc;
}

/* This table is done with the SQL root; the last one frees it. */
static void vtabLeave(VtabTable *p){
  KvConn *pConn = p->pConn;
  if( !p->bJoined ) return;
  p->bJoined = 0;
  if( --pConn->nJoin==0 ){
    kv_root_free_spare(pConn->pSqlRoot, &pConn->pSpareRoot);
    pConn->pSqlRoot = 0;
  }
}

/* The connection's busy timeout (PRAGMA busy_timeout), or -1.  A busy
** handler set with sqlite3_busy_handler() is not seen: it reads 0. */
static int vtabBusyMs(sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  int ms = -1;
  if( sqlite3_prepare_v2(db, "PRAGMA busy_timeout", -1, &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    ms = sqlite3_column_int(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  return ms;
}

static int vtabSync(sqlite3_vtab *pVtab){
  VtabTable *p = (VtabTable*)pVtab;
  KvRoot *r = p->pConn->pSqlRoot;
  char *zErr = 0;
  int rc = SQLITE_OK;
  if( r && p->bJoined && kv_root_state(r)==KV_ROOT_ACTIVE ){
    /* A root that only read commits without a check (see vtabCommit). */
    if( kv_root_has_writes(r) ){
      kv_root_set_sync(r, p->pConn->eSync);
      if( kv_engine_shared(p->pEng) ){
        /* other processes write the store: wait for its writer lock as
        ** long as SQLite waits for a database file's */
        int ms = vtabBusyMs(p->pConn->db);
        if( ms>=0 ) kv_root_set_busy_timeout(r, ms);
      }
      rc = kv_coord_prepare(p->pConn, r, &zErr);
      rc = kv_derived_prepare_error(p->pConn, r, rc, &zErr);
    }
  }else if( r && kv_root_state(r)==KV_ROOT_FAILED ){
    zErr = sqlite3_mprintf("kv: the transaction failed and was rolled back");
    rc = SQLITE_ABORT;
  }
  if( rc!=SQLITE_OK ) vtabSetError(p, zErr);
  return rc;
}

static int vtabCommit(sqlite3_vtab *pVtab){
  VtabTable *p = (VtabTable*)pVtab;
  KvRoot *r = p->pConn->pSqlRoot;
  char *zErr = 0;
  int rc = SQLITE_OK;
  if( r && p->bJoined && kv_root_state(r)==KV_ROOT_ACTIVE
   && !kv_root_has_writes(r) ){
    kv_root_rollback(r);      /* read only: nothing to publish, release */
  }else if( r && p->bJoined && kv_root_state(r)!=KV_ROOT_DONE
   && kv_root_state(r)!=KV_ROOT_FAILED ){
    rc = kv_root_commit(r, &zErr);
  }
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: commit failed");
    vtabSetError(p, zErr);
  }else{
    sqlite3_free(zErr);
  }
  vtabLeave(p);
  return rc;
}

static int vtabRollback(sqlite3_vtab *pVtab){
  VtabTable *p = (VtabTable*)pVtab;
  if( p->bJoined && p->pConn->pSqlRoot ) kv_root_rollback(p->pConn->pSqlRoot);
  vtabLeave(p);
  return SQLITE_OK;
}

static int vtabSavepoint(sqlite3_vtab *pVtab, int iSavepoint){
  VtabTable *p = (VtabTable*)pVtab;
  KvRoot *r = p->pConn->pSqlRoot;
  int rc = (r && p->bJoined) ? vtabSqlRootGoesOn(p) : SQLITE_OK;
  if( rc!=SQLITE_OK ) return rc;
  return (r && p->bJoined) ? kv_root_savepoint(r, iSavepoint) : SQLITE_OK;
}

static int vtabRelease(sqlite3_vtab *pVtab, int iSavepoint){
  VtabTable *p = (VtabTable*)pVtab;
  KvRoot *r = p->pConn->pSqlRoot;
  if( r && p->bJoined ) kv_root_release(r, iSavepoint);
  return SQLITE_OK;
}

static int vtabRollbackTo(sqlite3_vtab *pVtab, int iSavepoint){
  VtabTable *p = (VtabTable*)pVtab;
  KvRoot *r = p->pConn->pSqlRoot;
  int rc = (r && p->bJoined) ? vtabSqlRootGoesOn(p) : SQLITE_OK;
  if( rc==SQLITE_OK && r && p->bJoined ) kv_root_rollback_to(r, iSavepoint);
  return rc;
}

static sqlite3_module vtabModule = {
  2,                            /* iVersion: savepoints */
  vtabCreate, vtabConnect, vtabBestIndex, vtabDisconnect, vtabDestroy,
  vtabOpen, vtabClose, vtabFilter, vtabNext, vtabEof, vtabColumn, vtabRowid,
  vtabUpdate, vtabBegin, vtabSync, vtabCommit, vtabRollback,
  0,                            /* xFindFunction */
  vtabRename, vtabSavepoint, vtabRelease, vtabRollbackTo,
  0                             /* xShadowName */
};

/* ------------------------------------------------------------- anchor ---
** temp.kv_sql_txn_anchor: a table without rows whose only job is to be
** enlisted in the SQLite transaction when a read joins it (vtabReadJoin).
** It is a VtabTable without a KV table (zName is its own name, pEng the store
** of the root it joined); the transaction methods are the KV table's. */

/* Join the SQL root on the store a joining read asked for (nothing when
** no read is joining: a user's own statement on the anchor). */
static int vtabAnchorJoin(VtabTable *p){
  KvEngine *pEng = p->pConn->pJoinEng;
  if( pEng==0 || p->pConn->pSqlRoot || p->bJoined ) return SQLITE_OK;
  kv_engine_unref(p->pEng);
  p->pEng = kv_engine_ref(pEng);
  return vtabBegin(&p->base);
}

static int vtabAnchorBegin(sqlite3_vtab *pVtab){
  return vtabAnchorJoin((VtabTable*)pVtab);
}

/* xCreate / xConnect.  SQLite enlists a table it creates inside a
** transaction without calling xBegin, so a creation joins at once. */
static int vtabAnchorInit(sqlite3 *db, void *pAux, int argc,
                          const char *const *argv, sqlite3_vtab **ppVtab,
                          char **pzErr, int bCreate){
  VtabTable *p = sqlite3_malloc64(sizeof(*p));
  int rc;
  (void)argc; (void)argv;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->db = db;
  p->pConn = (KvConn*)pAux;
  kv_conn_ref(p->pConn);
  p->zName = sqlite3_mprintf("%s", KV_ANCHOR);
  p->nName = (int)strlen(KV_ANCHOR);
  rc = p->zName ? sqlite3_declare_vtab(db, "CREATE TABLE x(x)") : SQLITE_NOMEM;
  if( rc==SQLITE_OK ){
    sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
    if( bCreate ) rc = vtabAnchorJoin(p);
    if( rc!=SQLITE_OK && p->base.zErrMsg ){
      *pzErr = p->base.zErrMsg;
      p->base.zErrMsg = 0;
    }
  }
  if( rc==SQLITE_OK ) *ppVtab = &p->base; else vtabFree(p);
  return rc;
}

static int vtabAnchorCreate(sqlite3 *db, void *pAux, int argc,
                            const char *const *argv, sqlite3_vtab **pp,
                            char **pzErr){
  return vtabAnchorInit(db, pAux, argc, argv, pp, pzErr, 1);
}
static int vtabAnchorConnect(sqlite3 *db, void *pAux, int argc,
                             const char *const *argv, sqlite3_vtab **pp,
                             char **pzErr){
  return vtabAnchorInit(db, pAux, argc, argv, pp, pzErr, 0);
}

static int vtabAnchorDisconnect(sqlite3_vtab *pVtab){
  VtabTable *p = (VtabTable*)pVtab;
  vtabLeave(p);
  vtabFree(p);
  return SQLITE_OK;
}

/* DROP TABLE of the anchor: refused while it enlists a transaction, whose
** root (and the reads in its conflict check) would go with it. */
static int vtabAnchorDestroy(sqlite3_vtab *pVtab){
  VtabTable *p = (VtabTable*)pVtab;
  if( p->bJoined ){
    vtabSetError(p, sqlite3_mprintf("kv: temp." KV_ANCHOR " cannot be dropped "
        "inside the transaction whose reads it enlists"));
    sqlite3_log(SQLITE_ERROR, "%s", p->base.zErrMsg);
    return SQLITE_ERROR;
  }
  return vtabAnchorDisconnect(pVtab);
}

static int vtabAnchorBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  (void)pVtab;
  pInfo->estimatedCost = 1.0;
  pInfo->estimatedRows = 0;
  return SQLITE_OK;
}

static int vtabAnchorFilter(sqlite3_vtab_cursor *pCsr, int idxNum,
                            const char *idxStr, int argc, sqlite3_value **argv){
  (void)idxNum; (void)idxStr; (void)argc; (void)argv;
  ((VtabCursor*)pCsr)->bEof = 1;
  return SQLITE_OK;
}

static int vtabAnchorNext(sqlite3_vtab_cursor *pCsr){
  ((VtabCursor*)pCsr)->bEof = 1;
  return SQLITE_OK;
}

static int vtabAnchorColumn(sqlite3_vtab_cursor *pCsr, sqlite3_context *ctx,
                            int i){
  (void)pCsr; (void)i;
  sqlite3_result_null(ctx);
  return SQLITE_OK;
}

static int vtabAnchorUpdate(sqlite3_vtab *pVtab, int argc, sqlite3_value **argv,
                            sqlite3_int64 *pRowid){
  (void)argc; (void)argv; (void)pRowid;
  vtabSetError((VtabTable*)pVtab, sqlite3_mprintf("kv: table " KV_ANCHOR
      " holds no rows; it only enlists reads in SQL transactions"));
  return SQLITE_CONSTRAINT;
}

static sqlite3_module vtabAnchorModule = {
  2,
  vtabAnchorCreate, vtabAnchorConnect, vtabAnchorBestIndex,
  vtabAnchorDisconnect,
  vtabAnchorDestroy,
  vtabOpen, vtabClose, vtabAnchorFilter, vtabAnchorNext, vtabEof,
  vtabAnchorColumn,
  vtabRowid,
  vtabAnchorUpdate, vtabAnchorBegin, vtabSync, vtabCommit, vtabRollback,
  0,
  0, vtabSavepoint, vtabRelease, vtabRollbackTo,
  0
};

static void vtabModuleDestroy(void *pAux){
  kv_conn_unref(pAux);
}

/* ------------------------------------------------------ durability --- */

/* The KV_SYNC_* level named by z (SQLite's names and numbers of PRAGMA
** synchronous: NORMAL/1, FULL/2, EXTRA/3 - which is FULL here), or 0. */
static int vtabSyncLevel(const char *z){
  if( z==0 ) return 0;
  if( sqlite3_stricmp(z, "normal")==0 || strcmp(z, "1")==0 ){
    return KV_SYNC_NORMAL;
  }
  if( sqlite3_stricmp(z, "full")==0 || strcmp(z, "2")==0
   || sqlite3_stricmp(z, "extra")==0 || strcmp(z, "3")==0 ){
    return KV_SYNC_FULL;
  }
  return 0;
}

/* kv_synchronous([level]): the durability of this connection's SQL
** commits on KV tables, set first by the URI parameter kv_synchronous of
** the main database (default full), changed by the argument ('normal',
** 'full', 'extra' or 1, 2, 3 as in PRAGMA synchronous); returns the level
** in force ('normal' or 'full').  A transaction takes the level in force
** when it commits.  See KV_SYNC_NORMAL in ext/kv/kv.h. */
static void vtabSynchronousFunc(sqlite3_context *ctx, int argc,
                                sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  if( argc==1 ){
    int e = vtabSyncLevel((const char*)sqlite3_value_text(argv[0]));
    if( e==0 ){
      sqlite3_result_error(ctx, "kv_synchronous: the level is 'normal', "
          "'full' or 'extra' (1, 2 or 3); KV commits always write the WAL, "
          "so there is no 'off'", -1);
      return;
    }
    pConn->eSync = e;
  }
  sqlite3_result_text(ctx, pConn->eSync==KV_SYNC_NORMAL ? "normal" : "full",
                      -1, SQLITE_STATIC);
}

/* The three table types share vtabModule (the type is the module name,
** argv[0] of xCreate); the anchor has its own.  Also kv_synchronous(),
** whose first level comes from the main database's URI. */
static int vtabConnection(sqlite3 *db, KvConn *pConn){
  static const char *const azModule[] = { "kv_memory", "kv_btree", "kv_log" };
  const char *zFile = sqlite3_db_filename(db, "main");
  int i, rc = SQLITE_OK;
  if( zFile && zFile[0] ){
    pConn->eSync = vtabSyncLevel(sqlite3_uri_parameter(zFile,
                                                       "kv_synchronous"));
  }
  for(i=0; rc==SQLITE_OK && i<2; i++){
    kv_conn_ref(pConn);
    rc = sqlite3_create_function_v2(db, "kv_synchronous", i, SQLITE_UTF8,
                                    pConn, vtabSynchronousFunc, 0, 0,
                                    kv_conn_unref);
  }
  for(i=0; rc==SQLITE_OK && i<3; i++){
    kv_conn_ref(pConn);
    rc = sqlite3_create_module_v2(db, azModule[i], &vtabModule, pConn,
                                  vtabModuleDestroy);
  }
  if( rc==SQLITE_OK ){
    kv_conn_ref(pConn);
    rc = sqlite3_create_module_v2(db, KV_ANCHOR, &vtabAnchorModule, pConn,
                                  vtabModuleDestroy);
  }
  return rc;
}

const DepotComponent depotKvVtabComponent = {
  "kv: cannot register the KV functions", 0, vtabConnection
};
