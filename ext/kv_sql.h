/*
** kv_sql.h -- state shared by the SQL surface of KV tables (kv_vtab.c,
** kv_func.c; private to ext/).
**
** Every connection the extension is loaded into gets one KvConn, shared by
** the kv_memory module and the kv_* functions (each registration holds a
** reference; SQLite drops them at sqlite3_close).  It owns the connection's
** SQL root transaction (the SQLite transaction's KV side), its explicit
** transaction handles, and the anonymous store used when the main database
** is in memory and no dir= is given.  A KvConn is used under its
** connection's mutex only, so it needs no lock of its own.
*/
#ifndef DEPOT_KV_SQL_H
#define DEPOT_KV_SQL_H

#include "ext/kv/kv.h"

typedef struct KvConn KvConn;
typedef struct KvHandle KvHandle;

struct KvHandle {
  sqlite3_int64 id;
  KvRoot *pRoot;
  KvHandle *pNext;
};

struct KvConn {
  int nRef;
  sqlite3 *db;
  KvEngine *pAnon;          /* anonymous store, created on first use */
  int nStore;
  KvEngine **apStore;       /* stores used so far, kept open until close */
  KvRoot *pSqlRoot;         /* root of the open SQLite transaction */
  int nJoin;                /* virtual tables joined to pSqlRoot */
  KvEngine *pJoinEng;       /* set while a read joins the SQL transaction:
                            ** the store its root is to be on (kv_vtab.c) */
  KvHandle *pHandle;        /* open kv_begin() handles */
  sqlite3_int64 iLastHandle;
  char *zLastDir;           /* the absolute directory last resolved ... */
  KvEngine *pLastEng;       /* ... to this store (one of apStore) */
};

KvConn *kv_conn_new(sqlite3 *db);        /* refcount 1, NULL on OOM */
void kv_conn_ref(KvConn*);
void kv_conn_unref(void *pConn);         /* rolls back handles at 0 */

/* The store for dir zDir, or when zDir is NULL the default store of
** schema zSchema: the sidecar directory "<database file>-kv", or the
** connection's anonymous store if that database has no file.  *ppEng holds
** a reference.  An empty zDir is SQLITE_ERROR with a message.  The
** connection keeps every store it used open until it closes, so kv_memory data outlives the transactions that wrote it.
** The last absolute directory asked for is remembered with its store, so
** asking again (every kv_query_with_version of a default store) costs a
** string compare, not a mkdir and a realpath. */
int kv_conn_store(KvConn*, const char *zDir, const char *zSchema,
                  KvEngine **ppEng, char **pzErr);

/* kv_conn_store for a read that must not create a store: when the
** directory (zDir, or the main database's sidecar) does not exist or holds
** no store (neither its catalog file nor its wal/ folder), fails
** with SQLITE_ERROR "kv: no KV store at <dir>" and creates nothing. */
int kv_conn_store_existing(KvConn*, const char *zDir, KvEngine **ppEng,
                           char **pzErr);

/* kv_conn_store for attaching an existing KV table (xConnect): when the
** store directory (zDir, or schema zSchema's sidecar) does not exist, or
** is a directory that holds no store (an empty mount point: *pbEmpty set),
** creates nothing and returns SQLITE_OK with *ppEng NULL and *pzMissing
** the directory (sqlite3_malloc'd; the caller frees it).  Otherwise
** *pzMissing is NULL and the result is kv_conn_store's. */
int kv_conn_store_attach(KvConn*, const char *zDir, const char *zSchema,
                         KvEngine **ppEng, char **pzMissing, int *pbEmpty,
                         char **pzErr);

/* Read-only connections (kv_func.c).  A connection whose main database
** was opened read-only (sqlite3_db_readonly) writes nothing to any KV
** store, whichever store a call names: kv_conn_readonly says whether it
** is one, and kv_conn_writable is the check every state-changing kv_*
** function makes first: SQLITE_OK, or SQLITE_READONLY with *pzErr "kv:
** <zFunc> on a read-only connection (the database was opened read-only)".
** PRAGMA query_only is not consulted: it governs SQL statements (SQLite
** refuses INSERT into a KV table under it), not the side effects of
** functions. */
int kv_conn_readonly(sqlite3 *db);
int kv_conn_writable(sqlite3 *db, const char *zFunc, char **pzErr);

/* Why handle h takes no more operations (kv_func.c): NULL when it is
** active (or prepared, with bPreparedOk); else an sqlite3_mprintf'd
** message naming the handle and the calls that end it (kv_commit_with_version
** for a handle prepared with kv_prepare_with_version).  The caller frees
** it; NULL is also returned when there is no memory for it (*pbNoMem set). */
char *kv_handle_unusable(KvHandle *h, int bPreparedOk, int *pbNoMem);

/* Key lists and read sets (kv_readset.c).  Both parsers give
** SQLITE_ERROR with *pzErr for malformed input, the key codes of
** kv_key_encode (SQLITE_TOOBIG, SQLITE_CONSTRAINT), SQLITE_NOMEM; on error
** the output is empty.  The caller frees the output with the matching
** *_free.
**
** kv_keylist_parse: the JSON array z/n of keys, encoded as in read sets
** (["text", 7, 1.5, {"hex":"00ff"}]), into *p (KvKeyList, kv.h). */
int kv_keylist_parse(const char *z, int n, KvKeyList *p, char **pzErr);
void kv_keylist_free(KvKeyList*);

/* A parsed read set: sorted by (table, key), no pair twice; the tables
** and keys of all elements are in one allocation, aData. */
typedef struct KvReadSet KvReadSet;
struct KvReadSet {
  int n;
  KvVerRead *a;
  uint8_t *aData;                /* every table name and key */
};
/* Parse the read-set JSON text z/n (see kv_readset.c and docs/SQL.md);
** a duplicate (table, key) is also SQLITE_ERROR. */
int kv_readset_parse(const char *z, int n, KvReadSet *pSet, char **pzErr);
void kv_readset_free(KvReadSet*);

/* Register the kv_memory module (kv_vtab.c). */
int kv_vtab_register(sqlite3 *db, KvConn*);
/* Register the eponymous kv_tables table (kv_tables.c). */
int kv_tables_register(sqlite3 *db);
/* Register the eponymous kv_stats table (kv_stats.c). */
int kv_stats_register(sqlite3 *db);
/* Register the key-version functions, kv_query_with_version,
** kv_conflicts and kv_metrics (kv_vfunc.c). */
int kv_vfunc_register(sqlite3 *db, KvConn*);

#endif /* DEPOT_KV_SQL_H */
