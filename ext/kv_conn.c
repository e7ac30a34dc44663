/*
** kv_conn.c -- the per-connection state of the KV SQL surface (KvConn,
** declared in ext/kv_sql.h): the stores a connection uses, its SQL root
** transaction, its kv_begin() handles, and the read-only rule.
**
** ext/depot.c makes one KvConn per connection and hands it to every KV
** component as it registers; the kv_memory/kv_btree/kv_log modules
** (kv_vtab.c), the kv_* functions (kv_func.c) and the key-version
** functions and listings (kv_vfunc.c) each hold a reference.  Stores:
** kv_conn_store resolves a dir= argument, or the main database's sidecar
** directory "<file>-kv", to a store kept open until the connection
** closes; kv_conn_store_existing / _attach / _readonly are the variants
** that create nothing.  Handles: kv_conn_handle finds one by id,
** kv_handle_unusable says why one takes no more operations,
** kv_conn_handle_drop ends one.  kv_sql_error is the error result of the
** kv_* functions.
**
** This file calls nothing else of ext/ (only the KV engine).
*/
#include "config.h"
#include "ext/kv_sql.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------- connections --- */

KvConn *kv_conn_new(sqlite3 *db){
  KvConn *p = sqlite3_malloc64(sizeof(*p));
  if( p ){
    memset(p, 0, sizeof(*p));
    p->nRef = 1;
    p->db = db;
  }
  return p;
}

void kv_conn_ref(KvConn *p){
  p->nRef++;
}

void kv_conn_unref(void *pArg){
  KvConn *p = (KvConn*)pArg;
  if( p==0 || --p->nRef>0 ) return;
  while( p->pHandle ){
    KvHandle *h = p->pHandle;
    p->pHandle = h->pNext;
    kv_root_free(h->pRoot);          /* rolls back */
    sqlite3_free(h);
  }
  kv_root_free(p->pSqlRoot);
  sqlite3_free(p->pSpareRoot);
  if( p->xDerivedFree ) p->xDerivedFree(p);    /* kv_derived.c's cache */
  if( p->xTtlFree ) p->xTtlFree(p);            /* kv_ttl.c's policies */
  while( p->pDecl ){                 /* the notes of kv_decl.c */
    KvDecl *d = p->pDecl;
    p->pDecl = d->pNext;
    sqlite3_free(d->zName);
    sqlite3_free(d->zType);
    sqlite3_free(d);
  }
  while( p->nStore>0 ) kv_engine_unref(p->apStore[--p->nStore]);
  sqlite3_free(p->apStore);
  kv_engine_unref(p->pAnon);
  sqlite3_free(p->zLastDir);
  sqlite3_free(p);
}

/* Keep a reference to pEng for the life of the connection. */
static int connKeep(KvConn *p, KvEngine *pEng){
  KvEngine **a;
  int i;
  for(i=0; i<p->nStore; i++){
    if( p->apStore[i]==pEng ) return SQLITE_OK;
  }
  a = sqlite3_realloc64(p->apStore, (p->nStore+1)*sizeof(KvEngine*));
  if( a==0 ) return SQLITE_NOMEM;
  p->apStore = a;
  a[p->nStore++] = kv_engine_ref(pEng);
  return SQLITE_OK;
}

/* Remember that absolute directory zDir is store pEng (kept open by the
** connection, so the pointer stays valid).  Relative paths are not
** remembered: their meaning changes with the working directory. */
static void connRemember(KvConn *p, const char *zDir, KvEngine *pEng){
  char *z;
  if( zDir[0]!='/' ) return;
  z = sqlite3_mprintf("%s", zDir);
  if( z==0 ) return;                    /* only a lost shortcut */
  sqlite3_free(p->zLastDir);
  p->zLastDir = z;
  p->pLastEng = pEng;
}

/* Is zDir (with suffix zSuffix appended) the remembered directory? */
static int connIsLast(KvConn *p, const char *zDir, const char *zSuffix){
  size_t n = strlen(zDir);
  return p->zLastDir && strncmp(p->zLastDir, zDir, n)==0
      && strcmp(p->zLastDir+n, zSuffix)==0;
}

static int connOpen(KvConn *p, const char *zDir, KvEngine **ppEng,
                    char **pzErr){
  int rc = kv_conn_readonly(p->db) ? kv_engine_open_readonly(zDir, ppEng, pzErr)
                                   : kv_engine_open(zDir, ppEng, pzErr);
  if( rc==SQLITE_OK && (rc = connKeep(p, *ppEng))!=SQLITE_OK ){
    kv_engine_unref(*ppEng);
    *ppEng = 0;
  }
  if( rc==SQLITE_OK ) connRemember(p, zDir, *ppEng);
  return rc;
}

int kv_conn_store(KvConn *p, const char *zDir, const char *zSchema,
                  KvEngine **ppEng, char **pzErr){
  const char *zFile;
  char *zSide;
  int rc;
  if( zDir && connIsLast(p, zDir, "") ){
    *ppEng = kv_engine_ref(p->pLastEng);
    return SQLITE_OK;
  }
  if( zDir && zDir[0]==0 ){
    *pzErr = sqlite3_mprintf("kv: store directory must not be empty (NULL "
                             "means the default store)");
    return SQLITE_ERROR;
  }
  if( zDir ) return connOpen(p, zDir, ppEng, pzErr);
  zFile = sqlite3_db_filename(p->db, zSchema ? zSchema : "main");
  if( zFile && zFile[0] && connIsLast(p, zFile, "-kv") ){
    *ppEng = kv_engine_ref(p->pLastEng);
    return SQLITE_OK;
  }
  if( zFile==0 || zFile[0]==0 ){
    if( p->pAnon==0 ){
      rc = kv_engine_open(0, &p->pAnon, pzErr);
      if( rc!=SQLITE_OK ) return rc;
    }
    *ppEng = kv_engine_ref(p->pAnon);
    return SQLITE_OK;
  }
  zSide = sqlite3_mprintf("%s-kv", zFile);
  if( zSide==0 ) return SQLITE_NOMEM;
  rc = connOpen(p, zSide, ppEng, pzErr);
  sqlite3_free(zSide);
  return rc;
}

/* The directory kv_conn_store would open for zDir or schema zSchema's
** sidecar, in *pzPath (sqlite3_malloc'd), for a check that it exists; NULL
** when there is nothing to check: a store this connection already has open,
** an anonymous in-memory store, or an empty zDir (kv_conn_store's error). */
static int connStorePath(KvConn *p, const char *zDir, const char *zSchema,
                         char **pzPath){
  *pzPath = 0;
  if( zDir==0 ){
    const char *zFile = sqlite3_db_filename(p->db, zSchema ? zSchema : "main");
    if( zFile && zFile[0] && !connIsLast(p, zFile, "-kv") ){
      *pzPath = sqlite3_mprintf("%s-kv", zFile);
      if( *pzPath==0 ) return SQLITE_NOMEM;
    }
  }else if( zDir[0] && !connIsLast(p, zDir, "") ){
    *pzPath = sqlite3_mprintf("%s", zDir);
    if( *pzPath==0 ) return SQLITE_NOMEM;
  }
  return SQLITE_OK;
}

/* Is there no store at zPath?  CONN_ABSENT_NONE: there is (or zPath is not
** a directory: opening it gives its own error).  CONN_ABSENT_PATH: zPath
** names nothing (itself or a component of its parent path).
** CONN_ABSENT_STORE: a directory that holds neither the catalog file nor the
** wal/ folder every store has from its creation on: an empty mount point
** whose disk is not mounted, or a folder whose files were deleted. */
#define CONN_ABSENT_NONE  0
#define CONN_ABSENT_PATH  1
#define CONN_ABSENT_STORE 2
static int connStoreAbsence(const char *zPath){
  static const char *azPart[] = { "tables_meta", "wal" };
  struct stat st;
  int i;
  if( stat(zPath, &st)!=0 ){
    return (errno==ENOENT || errno==ENOTDIR) ? CONN_ABSENT_PATH
                                             : CONN_ABSENT_NONE;
  }
  if( !S_ISDIR(st.st_mode) ) return CONN_ABSENT_NONE;
  for(i=0; i<2; i++){
    char *z = sqlite3_mprintf("%s/%s", zPath, azPart[i]);
    int bThere = z==0 || stat(z, &st)==0 || errno!=ENOENT;
    sqlite3_free(z);
    if( bThere ) return CONN_ABSENT_NONE;
  }
  return CONN_ABSENT_STORE;
}

int kv_conn_store_arg(KvConn *pConn, sqlite3_value *pDir, int bExisting,
                      KvEngine **ppEng, char **pzErr){
  const char *zDir = 0;
  if( pDir && sqlite3_value_type(pDir)!=SQLITE_NULL ){
    if( sqlite3_value_type(pDir)!=SQLITE_TEXT ){
      *pzErr = sqlite3_mprintf("kv: store directory must be text, got %s",
                               kv_value_type_name(pDir));
      return SQLITE_MISMATCH;
    }
    zDir = (const char*)sqlite3_value_text(pDir);
    if( zDir && (int)strlen(zDir)!=sqlite3_value_bytes(pDir) ){
      *pzErr = sqlite3_mprintf("kv: store directory must not contain NUL");
      return SQLITE_ERROR;
    }
  }
  if( bExisting ) return kv_conn_store_existing(pConn, zDir, ppEng, pzErr);
  return kv_conn_store(pConn, zDir, 0, ppEng, pzErr);
}

int kv_conn_store_existing(KvConn *p, const char *zDir, KvEngine **ppEng,
                           char **pzErr){
  char *zPath = 0;
  int rc = connStorePath(p, zDir, 0, &zPath);
  if( rc!=SQLITE_OK ) return rc;
  if( zPath && connStoreAbsence(zPath)!=CONN_ABSENT_NONE ){
    *pzErr = sqlite3_mprintf("kv: no KV store at %s", zPath);
    rc = SQLITE_ERROR;
  }
  sqlite3_free(zPath);
  if( rc!=SQLITE_OK ) return rc;
  return kv_conn_store(p, zDir, 0, ppEng, pzErr);
}

int kv_conn_store_attach(KvConn *p, const char *zDir, const char *zSchema,
                         KvEngine **ppEng, char **pzMissing, int *pbEmpty,
                         char **pzErr){
  char *zPath = 0;
  int rc = connStorePath(p, zDir, zSchema, &zPath);
  int eAbsent;
  *ppEng = 0;
  *pzMissing = 0;
  *pbEmpty = 0;
  if( rc!=SQLITE_OK ) return rc;
  if( zPath && (eAbsent = connStoreAbsence(zPath))!=CONN_ABSENT_NONE ){
    *pzMissing = zPath;
    *pbEmpty = eAbsent==CONN_ABSENT_STORE;
    return SQLITE_OK;
  }
  sqlite3_free(zPath);
  return kv_conn_store(p, zDir, zSchema, ppEng, pzErr);
}

/* ---------------------------------------------- read-only connections --- */

int kv_conn_readonly(sqlite3 *db){
  return sqlite3_db_readonly(db, "main")==1;
}

int kv_conn_writable(sqlite3 *db, const char *zFunc, char **pzErr){
  if( !kv_conn_readonly(db) ) return SQLITE_OK;
  *pzErr = sqlite3_mprintf("kv: %s on a read-only connection (the database "
                           "was opened read-only)", zFunc);
  return *pzErr ? SQLITE_READONLY : SQLITE_NOMEM;
}

int kv_conn_store_readonly(KvConn *p, const char *zDir, KvEngine **ppEng,
                           char **pzErr){
  char *zPath = 0;
  int rc = connStorePath(p, zDir, 0, &zPath);
  if( rc!=SQLITE_OK ) return rc;
  if( zPath && connStoreAbsence(zPath)!=CONN_ABSENT_NONE ){
    *pzErr = sqlite3_mprintf("kv: no KV store at %s (a read-only connection "
                             "does not create one)", zPath);
    rc = *pzErr ? SQLITE_CANTOPEN : SQLITE_NOMEM;
  }
  sqlite3_free(zPath);
  if( rc!=SQLITE_OK ) return rc;
  return kv_conn_store(p, zDir, 0, ppEng, pzErr);
}

/* ------------------------------------------------------------- handles --- */

KvHandle *kv_conn_handle(KvConn *p, sqlite3_int64 id, KvHandle ***pppPrev,
                         char **pzErr){
  KvHandle **pp;
  for(pp=&p->pHandle; *pp; pp=&(*pp)->pNext){
    if( (*pp)->id==id ){
      if( pppPrev ) *pppPrev = pp;
      return *pp;
    }
  }
  *pzErr = (id>0 && id<=p->iLastHandle)
      ? sqlite3_mprintf("kv: transaction handle %lld is finished", id)
      : sqlite3_mprintf("kv: unknown transaction handle %lld (handles "
                        "belong to the connection that began them)", id);
  return 0;
}

void kv_conn_handle_drop(KvHandle **pp){
  KvHandle *h = *pp;
  *pp = h->pNext;
  kv_root_free(h->pRoot);
  sqlite3_free(h);
}

char *kv_handle_unusable(KvHandle *h, int bPreparedOk, int *pbNoMem){
  int e = kv_root_state(h->pRoot);
  const char *zCommit = kv_root_protocol_get(h->pRoot)==KV_PROTO_VERSIONED
      ? "kv_commit_with_version" : "kv_commit";
  char *z;
  *pbNoMem = 0;
  if( e==KV_ROOT_ACTIVE || (e==KV_ROOT_PREPARED && bPreparedOk) ) return 0;
  if( e==KV_ROOT_PREPARED ){
    z = sqlite3_mprintf("kv: transaction handle %lld is prepared and takes "
        "no more operations: end it with %s or kv_rollback", h->id, zCommit);
  }else{
    z = sqlite3_mprintf("kv: transaction handle %lld %s", h->id,
        e==KV_ROOT_FAILED ? "failed and was rolled back: end it with "
                            "kv_rollback" : "is finished");
  }
  *pbNoMem = z==0;
  return z;
}

/* ---------------------------------------------------------- SQL errors --- */

void kv_sql_error(sqlite3_context *ctx, int rc, char *zErr){
  if( rc==SQLITE_NOMEM && zErr==0 ){
    sqlite3_result_error_nomem(ctx);
    return;
  }
  sqlite3_result_error(ctx, zErr ? zErr : sqlite3_errstr(rc), -1);
  sqlite3_result_error_code(ctx, rc);
  sqlite3_free(zErr);
}
