/*
** kv_sql.h -- state shared by the SQL surface of KV tables (private to
** ext/): the per-connection KvConn and its handles, implemented in
** kv_conn.c and used by kv_vtab.c, kv_func.c and kv_vfunc.c.
**
** Every connection the extension is loaded into gets one KvConn, made by
** ext/depot.c and handed to every component as it registers; it is shared
** by the kv_memory/kv_btree/kv_log modules, the kv_* functions and the kv
** listings (each registration holds a reference; SQLite drops them at
** sqlite3_close).  It owns the connection's
** SQL root transaction (the SQLite transaction's KV side), its explicit
** transaction handles, and the anonymous store used when the main database
** is in memory and no dir= is given.  A KvConn is used under its
** connection's mutex only, so it needs no lock of its own.
*/
#ifndef DEPOT_KV_SQL_H
#define DEPOT_KV_SQL_H

#include "ext/depot_int.h"          /* typedef KvConn */
#include "ext/kv/kv.h"

typedef struct KvHandle KvHandle;
typedef struct KvDecl KvDecl;

struct KvHandle {
  sqlite3_int64 id;
  KvRoot *pRoot;
  KvHandle *pNext;
};

/* A KV table declared in the main schema of a connection whose main
** database is a file (kv_vtab.c notes it as it connects), for its temp
** declaration (kv_decl.c). */
struct KvDecl {
  char *zName;              /* the table (and the SQL name) */
  char *zType;              /* kv_memory, kv_btree or kv_log */
  KvEngine *pEng;           /* its store (one of KvConn.apStore), or NULL
                            ** while the store directory is missing */
  int bOffered;             /* a temp declaration was made or refused:
                            ** first use makes no other */
  KvDecl *pNext;
};

struct KvConn {
  int nRef;
  sqlite3 *db;
  KvEngine *pAnon;          /* anonymous store, created on first use */
  int nStore;
  KvEngine **apStore;       /* stores used so far, kept open until close */
  KvRoot *pSqlRoot;         /* root of the open SQLite transaction */
  KvRoot *pSpareRoot;       /* memory for the next one
                            ** (kv_root_free_spare) */
  int nJoin;                /* virtual tables joined to pSqlRoot */
  KvEngine *pJoinEng;       /* set while a read joins the SQL transaction:
                            ** the store its root is to be on (kv_vtab.c) */
  KvHandle *pHandle;        /* open kv_begin() handles */
  sqlite3_int64 iLastHandle;
  char *zLastDir;           /* the absolute directory last resolved ... */
  KvEngine *pLastEng;       /* ... to this store (one of apStore) */
  KvDecl *pDecl;            /* main-schema KV tables seen (kv_decl.c) */
  KvEngine *pGcEng;         /* the store whose commit markers were last
                            ** collected (kv_coord.c; compared only) ... */
  uint64_t iGcFloor;        /* ... up to this replay floor */
  int eSync;                /* KV_SYNC_* of its SQL commits (kv_vtab.c,
                            ** kv_synchronous()); 0 is KV_SYNC_FULL */
  void *pDerived;           /* kv_derived.c's catalog cache, freed by ... */
  void (*xDerivedFree)(KvConn*);  /* ... this, which kv_derived.c sets */
  void *pTtl;               /* kv_ttl.c's deadline policies, freed by ... */
  void (*xTtlFree)(KvConn*);      /* ... this, which kv_ttl.c sets */
};

KvConn *kv_conn_new(sqlite3 *db);        /* refcount 1, NULL on OOM */

/* kv_coord.c: the database file as the coordinator of a transaction that
** writes KV tables and database files.  kv_coord_prepare prepares the SQL
** root r of connection p (from xSync): when p has a write transaction open
** on a database file, the root's WAL record is made conditional on a
** marker row inserted into that file's _depot_kv_commit table in the same
** transaction; otherwise it is kv_root_prepare.  kv_coord_probe is the
** engine's condition probe (KvCondProbe, kv.h).  kv_coord_probing is
** non-zero while this thread opens a coordinator for the probe: the
** extension's setup of new connections is then skipped. */
int kv_coord_prepare(KvConn *p, KvRoot *r, char **pzErr);
int kv_coord_probe(const char *zCoord, int64_t iMarker, uint64_t cid,
                   int *pbHeld, char **pzErr);
int kv_coord_probing(void);
#ifdef DEPOT_TEST
/* Test hook (libdepot_core only): bOff makes kv_coord_prepare a plain
** kv_root_prepare, the commit as it was before markers (the benchmark's
** baseline).  Process-wide. */
void kv_coord_test_off(int bOff);
#endif
void kv_conn_ref(KvConn*);
void kv_conn_unref(void *pConn);         /* rolls back handles at 0 */

/* The store for dir zDir, or when zDir is NULL the default store of
** schema zSchema: the sidecar directory "<database file>-kv", or the
** connection's anonymous store if that database has no file.  *ppEng holds
** a reference.  An empty zDir is SQLITE_ERROR with a message.  The
** connection keeps every store it used open until it closes, so kv_memory
** data outlives the transactions that wrote it.
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

/* The store named by an optional SQL argument pDir (NULL or SQL NULL: the
** default store): kv_conn_store_existing with bExisting, else
** kv_conn_store.  A directory that is not text, or holds a NUL, is an
** error (SQLITE_MISMATCH, SQLITE_ERROR) with *pzErr set. */
int kv_conn_store_arg(KvConn*, sqlite3_value *pDir, int bExisting,
                      KvEngine **ppEng, char **pzErr);

/* kv_conn_store for attaching an existing KV table (xConnect): when the
** store directory (zDir, or schema zSchema's sidecar) does not exist, or
** is a directory that holds no store (an empty mount point: *pbEmpty set),
** creates nothing and returns SQLITE_OK with *ppEng NULL and *pzMissing
** the directory (sqlite3_malloc'd; the caller frees it).  Otherwise
** *pzMissing is NULL and the result is kv_conn_store's. */
int kv_conn_store_attach(KvConn*, const char *zDir, const char *zSchema,
                         KvEngine **ppEng, char **pzMissing, int *pbEmpty,
                         char **pzErr);

/* kv_conn_store for kv_begin on a read-only connection: a store that does
** not exist is SQLITE_CANTOPEN "kv: no KV store at <dir> (a read-only
** connection does not create one)" and nothing is created (kv_conn_store
** would make the directory). */
int kv_conn_store_readonly(KvConn*, const char *zDir, KvEngine **ppEng,
                           char **pzErr);

/* Read-only connections.  A connection whose main database
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

/* The open handle id of the connection (*pppPrev, when not NULL, set to
** the link that points to it, for kv_conn_handle_drop), or NULL with
** *pzErr "kv: transaction handle N is finished" for a handle this
** connection ended, else "kv: unknown transaction handle N (handles belong
** to the connection that began them)". */
KvHandle *kv_conn_handle(KvConn*, sqlite3_int64 id, KvHandle ***pppPrev,
                         char **pzErr);

/* End the handle *pp points to: unlink it, free its root (rolling back
** what it did not commit) and the handle. */
void kv_conn_handle_drop(KvHandle **pp);

/* Why handle h takes no more operations: NULL when it is active (or
** prepared, with bPreparedOk); else an sqlite3_mprintf'd message naming
** the handle and the calls that end it (kv_commit_with_version for a
** handle prepared with kv_prepare_with_version).  The caller frees it;
** NULL is also returned when there is no memory for it (*pbNoMem set). */
char *kv_handle_unusable(KvHandle *h, int bPreparedOk, int *pbNoMem);

/* The error result of a kv_* function: rc with message zErr (consumed;
** NULL: SQLite's text for rc, or plain out-of-memory for SQLITE_NOMEM). */
void kv_sql_error(sqlite3_context *ctx, int rc, char *zErr);

/* Temp declarations (kv_decl.c; the SQL functions: kv_attach.c).  A KV
** table declared in the main schema of a file database is written under that file's write lock, one
** connection at a time; its declaration in the connection's temp schema
** (same name, dir= its store) takes no lock of the database file, so the
** connections of a process write it concurrently, ordered by the engine's
** conflict check alone.  SQLite resolves unqualified names in temp first.
**
** kv_attach_note: kv_vtab.c saw main-schema table zName of type zType on
** store pEng (NULL: directory missing) connect; remembered for the rest of
** the connection.  SQLITE_NOMEM or SQLITE_OK.
** kv_attach_first_use: a main-schema table is read or written for the
** first time: declares it in temp unless that was done or refused before
** (errors go to the error log only: the statement goes on through main).
** kv_attach_detached: the temp declaration of zName was dropped; first use
** does not declare it again (kv_attach does).
** kv_attach_table: kv_attach(zName, zDir); *pbMade is 1 when it declared,
** 0 when temp.zName already was that table.
** kv_attach_main: declares every KV table of the main schema that has no
** temp declaration yet; *pnMade counts them.  A table that cannot be
** declared (temp has another table of its name, its store is missing or
** locked) stays on main, with a line in the error log.  Run when the
** extension is loaded into a connection and by kv_attach_all().
** kv_conn_unref frees the notes. */
int kv_attach_note(KvConn*, const char *zName, const char *zType,
                   KvEngine *pEng);
void kv_attach_first_use(KvConn*, const char *zName);
void kv_attach_detached(KvConn*, const char *zName);
int kv_attach_table(KvConn*, const char *zName, const char *zDir,
                    int *pbMade, char **pzErr);
int kv_attach_main(KvConn*, int *pnMade, char **pzErr);

/* The KV table behind virtual table zSchema.zName of connection db
** (kv_vtab.c): when it is a kv_memory, kv_btree or kv_log table of this
** library connected on db (preparing a statement that names it connects
** it), SQLITE_OK with *ppEng a reference to its store and *pzTable its KV
** table name (sqlite3_malloc'd; the caller frees both).  SQLITE_NOTFOUND,
** no message, when there is none; a store that is missing gives its
** SQLITE_CANTOPEN with *pzErr.  The caller holds db's mutex. */
int kv_vtab_lookup(sqlite3 *db, const char *zSchema, const char *zName,
                   KvEngine **ppEng, char **pzTable, char **pzErr);

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

/* Derived data (kv_derived.c).
** kv_derived_write: before root r writes key aKey of zTab (aVal/nVal the
** new value, or bDelete; eOld: what the caller knows of the old row),
** write what the change means for zTab's
** carriers (indexes, counters) in r; refuses a write to a carrier itself.
** Errors: the projection's (naming carrier and key), SQLITE_CONSTRAINT_
** UNIQUE, the engine's; the source write must not be made then.
** kv_derived_prepare_error: after a prepare of r failed with rc, the code
** and message to report (a conflict on a unique index's value is
** SQLITE_CONSTRAINT_UNIQUE naming the index and the value).
** kv_derived_remove_carriers: root r removes source zTab: remove its
** carriers in r too.  kv_conn_unref frees the cache through
** KvConn.xDerivedFree. */
#define KV_DERIVED_EXPIRE      2   /* bDelete: the removal of an expired row
                                   ** (change streams: operation "expire") */
#define KV_DERIVED_OLD_UNKNOWN 0   /* read the old row (kv_peek) */
#define KV_DERIVED_OLD_ABSENT  1   /* the caller knows there is none */
#define KV_DERIVED_OLD_GIVEN   2   /* it is aOld/nOld */
int kv_derived_write(KvConn*, KvRoot *r, const char *zTab, int nTab,
                     const uint8_t *aKey, int nKey, const uint8_t *aVal,
                     int nVal, int bDelete, int eOld, const uint8_t *aOld,
                     int nOld, char **pzErr);
int kv_derived_prepare_error(KvConn*, KvRoot *r, int rc, char **pzErr);
int kv_derived_remove_carriers(KvConn*, KvRoot *r, const char *zTab,
                               int nTab, char **pzErr);
int kv_derived_remove(KvConn*, KvEngine*, const char *zName, int bSource,
                      char **pzErr);

/* kv_hook_api.c: the store and KV table behind table zSchema.zTable of
** db as the connection sees it (zSchema NULL: the table the unqualified
** name reaches); *ppEng holds a reference, *pzKvTab is sqlite3_malloc'd.
** The caller holds db's mutex.  Messages start with zFunc.  Used by the
** public hook and watch APIs (ext/depot_kv.h). */
int kv_hook_resolve(sqlite3 *db, const char *zFunc, const char *zSchema,
                    const char *zTable, KvEngine **ppEng, char **pzKvTab,
                    char **pzErr);

/* Per-entry TTL (kv_ttl.c).  A KV table declares a deadline with the
** module argument ttl_ms=N (every write lives N ms) or deadline='expr'
** (an SQL expression over key, value and now giving the deadline in unix
** ms, NULL: never), stored in its catalog options as {"ttl_ms":N} or
** {"deadline":"expr"}.
** kv_ttl_option: check the module arguments (either may be NULL) and
** append the option members to pJson (",\"ttl_ms\":N"...; nothing when
** both are NULL).  SQLITE_ERROR with *pzErr for a ttl_ms that is not a
** positive integer, both given, an expression that does not compile or is
** not deterministic.
** kv_ttl_stamp: before root r writes (pKey, pVal), encoded as *pEnc, to
** zTab: give *pEnc the table's deadline (or none); *pbTtl says
** whether the table declares one (the write must then let derived data
** read the stored old row: an expired row is invisible but still there).
** Starts the store's sweeper.  Errors: the expression's, a result that is
** no number, the catalog's.
** kv_ttl_attach: a KV table zTab of pEng was connected: start the
** store's sweeper if the table declares a deadline.
** kv_ttl_sweep_table: remove the expired rows of zTab now, in batches of
** nBatch rows, each its own root transaction (origin KV_ORIGIN_EXPIRE)
** that also updates the table's carriers; *pnRemoved counts them.
** SQLITE_ERROR "kv: table T declares no deadline" for a table without. */
#define KV_TTL_BATCH 256
/* The deadline index of table T is the KV table KV_TTL_INDEX_PREFIX T,
** keyed by (the deadline as a key-encoded integer, T's key), value the
** empty blob; no index when the name would pass KV_MAX_NAME_BYTES. */
#define KV_TTL_INDEX_PREFIX ".ttl:"
int kv_ttl_option(const char *zTtlMs, const char *zDeadline, KvBuf *pJson,
                  char **pzErr);
int kv_ttl_stamp(KvConn*, KvRoot *r, const char *zTab, int nTab,
                 sqlite3_value *pKey, sqlite3_value *pVal, KvBuf *pEnc,
                 int *pbTtl, char **pzErr);
void kv_ttl_attach(KvConn*, KvEngine*, const char *zTab, int nTab);
int kv_ttl_sweep_table(KvConn*, KvEngine*, const char *zTab, int nTab,
                       int nBatch, int64_t *pnRemoved, char **pzErr);
/* The deadline index of table zTab (kv_ttl.c "Deadline index"), in root
** r: kv_ttl_create_index creates it with the table (type and persistence
** of the table); kv_ttl_remove_index removes it, if there is one, in the
** root that removes the table. */
int kv_ttl_create_index(KvRoot *r, const char *zTab, int nTab,
                        const char *zType, int bPersist, char **pzErr);
int kv_ttl_remove_index(KvRoot *r, const char *zTab, int nTab,
                        char **pzErr);
#ifdef DEPOT_TEST
/* Test hooks: the interval between background sweeper passes of stores
** whose sweeper starts from now on (default 1000 ms); a callback that
** every sweep batch calls after it read its rows and before it commits
** (NULL: none), to interleave a writer (remove-if-still-expired). */
void kv_ttl_test_interval(int64_t iMs);
void kv_ttl_test_before_commit(void (*x)(void*), void *pArg);
/* Rows and deadline index entries sweep passes have read, process-wide. */
int64_t kv_ttl_test_examined(void);
#endif

#endif /* DEPOT_KV_SQL_H */
