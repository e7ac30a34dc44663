/*
** pg.c -- the PostgreSQL outer store: vfs/store/store.h on libpq, for a
** store named by a connection URI "postgresql://..." (or "postgres://...").
**
** Schema.  In the schema of the URI parameter schema= (default "depot"),
** made on the first writable open in one transaction under an advisory
** lock, so that concurrent first opens make it once:
**
**     CREATE TABLE depot_kv(key bytea PRIMARY KEY, value bytea NOT NULL);
**     CREATE TABLE depot_store_meta(name text PRIMARY KEY, value bigint);
**
** depot_kv's value column has STORAGE EXTERNAL (values are compressed
** already; a range read of an uncompressed TOAST value fetches only the
** TOAST chunks holding the range).  depot_store_meta holds the row
** ('format', 1), the store format, as the embedded store's user_version.
** bytea sorts by memcmp(), a prefix first: the order store.h asks for.
**
** URI parameters of the backend, removed before the URI goes to libpq:
** schema= (an SQL identifier), chunk_bytes= (the largest value of one row,
** 1024..1073741823, default 65536: longer blobs are chunked by the caller),
** busy_ms= (the wait for the store's write lock, default the open's
** nBusyMs or 10000), retries= (the retries of a serialization failure or
** deadlock, default 3), failover_ms= (0..3600000, default 30000: how long
** a lost connection is connected again, see Failover), require_sync_standby=
** (0 or 1).  Every other parameter is libpq's; connect_timeout defaults to
** 5 seconds, and a writable handle of a URI of several hosts without
** target_session_attrs gets target_session_attrs=read-write.
**
** Transactions.  A write transaction is READ COMMITTED and starts by
** taking the store's transaction lock, pg_advisory_xact_lock(K1, K2) of
** the schema name (waited for up to busy_ms through lock_timeout, then
** SQLITE_BUSY): writers of one store run one at a time, and each statement
** of a writer sees every commit made before it took the lock, so the head
** compare-and-set of a depot commit is race-free across processes and
** hosts, as under the embedded store's BEGIN IMMEDIATE.  A read
** transaction is REPEATABLE READ READ ONLY: one snapshot, whose BEGIN goes
** in one pipeline with its first statement (a read transaction that reads
** nothing costs no round trip).  Writes of a
** write transaction are buffered and sent in one libpq pipeline with the
** COMMIT (or before a scan, or once the buffer is long), so a commit of any
** number of chunk rows costs one round trip to begin and one to commit,
** plus one per read of a key it did not write (a key it wrote is answered
** from the buffer).
** Outside a transaction each call is one autocommit statement (a write of
** several statements runs as its own write transaction).
**
** Reads.  Inside a transaction, the second range read of one chunked value
** (keys that differ only in their last 4 bytes, the chunk number) reads
** that chunk row and the ones after it whole, up to 1 MiB, with one
** statement; later range reads of them are answered from memory until the
** transaction ends or writes (at most 4 MiB kept).  The rows are those of
** the transaction's snapshot, so nothing stale is served.
**
** Errors.  SQLSTATE 40001 and 40P01 of a call the backend owns whole (an
** autocommit call, BEGIN) are retried up to retries= times, then
** SQLITE_BUSY; inside a transaction they end it with SQLITE_BUSY.
** 55P03 (lock_timeout) is SQLITE_BUSY, 53100 SQLITE_FULL, a lost
** connection SQLITE_IOERR (the open transaction is gone: PostgreSQL
** committed all of it or none; store_commit_lost() says which it may
** be); the next call reconnects (Failover).  Messages name
** the store by its URI without the password.
**
** Failover.  Each connect of a handle reads, in its one session-setup
** round trip, the server's replication state (store_pg_info()):
** synchronous_commit (kept as the server, database or role sets it, only
** "off" becomes "on" unless the open asked for iSynchronous 0),
** synchronous_standby_names, whether it is in recovery, its timeline and
** system identifier, and the standbys attached (pg_stat_replication, sync
** and all).  A writable handle accepts a primary whose timeline is not
** older than the newest timeline a writable handle of this process
** connected to on the same system identifier, or, for a URI of several
** hosts, that any of them reports at the connect (pgProbeHosts) (a
** demoted old primary that comes back runs on the timeline its standby
** left when promoted: it is fenced out), with require_sync_standby=1 only one with a synchronous
** standby attached and synchronous_commit neither off nor local; and a
** standby only when the URI names one host (its writes fail with
** SQLITE_READONLY).  With several hosts a refused server makes the
** handle try each host of the URI in turn.  A lost connection is
** connected again at the next call outside a transaction
** (or at BEGIN), trying for up to failover_ms, a pause of 50..500 ms
** between tries, then SQLITE_IOERR "no server of URI accepted ... within
** N ms" with the last reason.  The transaction a lost connection cuts is
** never run again here: store_commit_lost() tells the caller whether its
** COMMIT had been sent (STORE_LOST_UNKNOWN: the server may have committed
** it) or not (STORE_LOST_ABORTED: nothing of it was written).
**
** Standbys.  A handle may be connected to a hot standby (a read-only one
** by a URI with target_session_attrs=prefer-standby, standby or any, any
** one by a one-host URI of a standby; see Failover): its read
** transactions are REPEATABLE READ snapshots of what the standby has
** replayed, each one a committed state of the primary (the head and every
** row it names, as of one commit; a commit of the primary that replays
** during the transaction is not seen by it), and the next read
** transaction sees the newer head.  Its writes (a write transaction, a
** put, a writer lock) fail with SQLITE_READONLY and a message saying the
** server is a standby: the server's in_hot_standby, which libpq keeps
** current at no round trip, says whether it is one.  store_pg_replica()
** reports the server's role and replay lag.
**
** Writer locks: pg_try_advisory_lock(K) of a 64-bit hash of the schema
** and the key, a session lock the server drops with the lost session.  A
** reconnect takes the handle's locks again; a lock another session took
** meanwhile is lost, and the next write transaction is SQLITE_BUSY.
*/
#include "config.h"
#include "vfs/store/store.h"
#include "vfs/store/bytes.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <stdlib.h>

int store_is_pg_uri(const char *zPath){
  return zPath && (strncmp(zPath, "postgresql://", 13)==0
                   || strncmp(zPath, "postgres://", 11)==0);
}

/* The URI zUri without the password of its user part and of a password=
** parameter (sqlite3_malloc'd). */
char *store_pg_redact(const char *zUri){
  sqlite3_str *s = sqlite3_str_new(0);
  const char *z = strstr(zUri, "://");
  const char *zAuthEnd, *zAt, *zColon;
  if( z==0 ){
    sqlite3_str_appendall(s, zUri);
    return sqlite3_str_finish(s);
  }
  z += 3;
  sqlite3_str_append(s, zUri, (int)(z-zUri));
  zAuthEnd = z + strcspn(z, "/?");
  zAt = 0;
  for(zColon=z; zColon<zAuthEnd; zColon++){ if( *zColon=='@' ) zAt = zColon; }
  if( zAt ){
    const char *zC = memchr(z, ':', zAt-z);
    sqlite3_str_append(s, z, (int)((zC ? zC : zAt)-z));
    sqlite3_str_append(s, zAt, (int)(zAuthEnd-zAt));
  }else{
    sqlite3_str_append(s, z, (int)(zAuthEnd-z));
  }
  z = zAuthEnd;
  while( *z ){
    /* copy up to and including the next separator, dropping password= */
    if( (*z=='?' || *z=='&') && strncmp(z+1, "password=", 9)==0 ){
      const char *zEnd = z+1+strcspn(z+1, "&");
      if( *z=='?' ){
        sqlite3_str_appendchar(s, 1, '?');
        z = *zEnd ? zEnd+1 : zEnd;
      }else{
        z = zEnd;
      }
      continue;
    }
    sqlite3_str_appendchar(s, 1, *z);
    z++;
  }
  return sqlite3_str_finish(s);
}

#ifndef DEPOT_HAVE_PG

int store_pg_open(const char *zUri, const StoreSqliteConfig *pCfg,
                  Store **ppStore, char **pzErr){
  char *zShow = store_pg_redact(zUri);
  (void)pCfg;
  *ppStore = 0;
  if( pzErr ){
    *pzErr = sqlite3_mprintf("store: cannot open %s: this build has no"
        " PostgreSQL backend (configure found no libpq; Debian: libpq-dev)",
        zShow ? zShow : "");
  }
  sqlite3_free(zShow);
  return SQLITE_CANTOPEN;
}

int store_pg_replica(Store *pStore, int *pbStandby, double *prLag){
  (void)pStore;
  *pbStandby = 0;
  *prLag = 0.0;
  return SQLITE_OK;
}

int store_pg_info(Store *p, int bRefresh, StorePgInfo *pInfo){
  (void)p; (void)bRefresh;
  memset(pInfo, 0, sizeof(*pInfo));
  return SQLITE_NOTFOUND;
}

#else /* DEPOT_HAVE_PG */

#include <libpq-fe.h>
#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>

#define PG_FORMAT 1
#define PG_SCAN_PAGE 256               /* rows fetched per scan statement */
#define PG_BUF_FLUSH (16*1024*1024)    /* buffered write bytes: send them */
#define PG_RA_PREFIXES 8               /* chunked values remembered */

enum {
  PS_GET, PS_PUT, PS_DEL, PS_DELRANGE, PS_DELOPEN,
  PS_SCANF, PS_SCANF_OPEN, PS_SCANFX, PS_SCANFX_OPEN, PS_SCANR,
  PS_SCANR_OPEN, PS_RANGE, PS_WLOCK, PS_WUNLOCK, PS_NSTMT
};

/* %s is the quoted schema. */
static const char *const azPgSql[PS_NSTMT] = {
  "SELECT value FROM %s.depot_kv WHERE key=$1",
  "INSERT INTO %s.depot_kv(key,value) VALUES($1,$2)"
  " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
  "DELETE FROM %s.depot_kv WHERE key=$1",
  "DELETE FROM %s.depot_kv WHERE key>=$1 AND key<$2",
  "DELETE FROM %s.depot_kv WHERE key>=$1",
  "SELECT key,value FROM %s.depot_kv WHERE key>=$1 AND key<$2"
  " ORDER BY key LIMIT $3",
  "SELECT key,value FROM %s.depot_kv WHERE key>=$1 ORDER BY key LIMIT $2",
  "SELECT key,value FROM %s.depot_kv WHERE key>$1 AND key<$2"
  " ORDER BY key LIMIT $3",
  "SELECT key,value FROM %s.depot_kv WHERE key>$1 ORDER BY key LIMIT $2",
  "SELECT key,value FROM %s.depot_kv WHERE key>=$1 AND key<$2"
  " ORDER BY key DESC LIMIT $3",
  "SELECT key,value FROM %s.depot_kv WHERE key>=$1"
  " ORDER BY key DESC LIMIT $2",
  "SELECT substring(value from $2::int4 for $3::int4) FROM %s.depot_kv"
  " WHERE key=$1",
  "SELECT pg_try_advisory_lock($1::int8)",
  "SELECT pg_advisory_unlock($1::int8)",
};

/* One buffered write of a write transaction. */
typedef struct PgOp PgOp;
struct PgOp {
  int eStmt;                 /* PS_PUT, PS_DEL, PS_DELRANGE or PS_DELOPEN */
  int nKey, nVal;            /* nVal: value or upper bound bytes */
  unsigned char *pKey;       /* one allocation: key bytes then value */
  unsigned char *pVal;
};

/* A chunk row read ahead inside a transaction (see pgGetRange). */
typedef struct PgRaRow PgRaRow;
struct PgRaRow {
  int nKey, nVal;
  unsigned char *pKey;       /* one allocation: key bytes then value */
  unsigned char *pVal;
};

/* A writer lock this handle holds. */
typedef struct PgLock PgLock;
struct PgLock {
  int64_t iKey;
  PgLock *pNext;
};

typedef struct StorePg StorePg;
struct StorePg {
  Store base;                /* must be first */
  PGconn *pConn;
  char *zConnUri;            /* the URI given to libpq */
  char *zShow;               /* the URI without the password */
  char *zSchema;             /* quoted identifier */
  int bPrepared;             /* statements prepared on this connection */
  int bInTxn;                /* inside store_begin() */
  int rcDead;                /* the failure that aborted that transaction
                             ** (every call fails with it until commit or
                             ** rollback), or 0 */
  int bDeadGone;             /* ... was the loss of the session */
  int bSchemaReady;          /* the tables exist: statements can be made */
  int bWriteTxn;             /* ... a write transaction */
  int bBeginPending;         /* ... a read transaction whose BEGIN goes
                             ** with its first statement */
  int bReadOnly;
  int bLockLost;             /* a writer lock did not survive a reconnect */
  int iSync;                 /* StoreSqliteConfig.iSynchronous */
  int nMaxValue;
  int nBusyMs;
  int nRetry;
  int nFailoverMs;           /* failover_ms= */
  int bRequireSync;          /* require_sync_standby=1 */
  int nHost;                 /* hosts the URI names (libpq's host list) */
  int eLost;                 /* store_commit_lost() of the last commit */
  StorePgInfo info;          /* the server's, as of the latest connect */
  int32_t aTxnLock[2];       /* the transaction lock's two keys */
  PgOp *aOp;                 /* buffered writes */
  int nOp, nOpAlloc;
  int64_t nOpByte;
  PgLock *pLock;             /* writer locks held */
  PgLock *pUnlock;           /* locks released while an aborted transaction
                             ** kept the server from hearing it: released
                             ** when the transaction ends */
  PgRaRow *aRa;              /* chunk rows read ahead in this transaction */
  int nRa, nRaAlloc;
  int64_t nRaByte;           /* their bytes */
  char *azRaPrefix[PG_RA_PREFIXES];  /* the chunk key prefixes (keys without
                             ** their last 4 bytes) range read in this
                             ** transaction, the latest ones */
  int anRaPrefix[PG_RA_PREFIXES];
  int iRaPrefix;             /* the slot of the next one */
  int64_t nRoundTrip;        /* round trips made (test hooks, bench) */
  char *zErr;
};

/* Counts of round trips of every handle (vfs/store/store.h test API). */
static int64_t pgRoundTrips = 0;
int64_t store_pg_round_trips(void){
  return __atomic_load_n(&pgRoundTrips, __ATOMIC_RELAXED);
}
static void pgTrip(StorePg *p){
  p->nRoundTrip++;
  __atomic_add_fetch(&pgRoundTrips, 1, __ATOMIC_RELAXED);
}

static void pgSetErr(StorePg *p, char *zMsg){
  sqlite3_free(p->zErr);
  p->zErr = zMsg;
}

/* 1 when the handle's connection is to a hot standby: the server's
** in_hot_standby, which PostgreSQL 14 and later report at connect and
** again after a promotion, before the next query's result (no round
** trip).  An older server says nothing: 0, and its own error
** (SQLSTATE 25006) refuses a write. */
static int pgIsStandby(StorePg *p){
  const char *z;
  if( p->pConn==0 || PQstatus(p->pConn)!=CONNECTION_OK ) return 0;
  z = PQparameterStatus(p->pConn, "in_hot_standby");
  return z!=0 && strcmp(z, "on")==0;
}

/* The error of a write through a handle connected to a standby. */
static int pgStandbyErr(StorePg *p){
  pgSetErr(p, sqlite3_mprintf("store: %s: the server is a standby (in"
      " recovery), which takes no writes: a writer connects to the primary"
      " (target_session_attrs=read-write)", p->zShow));
  return SQLITE_READONLY;
}

/* The 64-bit FNV-1a hash of a and b (with a separator). */
static uint64_t pgHash(const void *a, int na, const void *b, int nb){
  uint64_t h = 0xcbf29ce484222325ULL;
  int i;
  for(i=0; i<na; i++){ h ^= ((const unsigned char*)a)[i]; h *= 0x100000001b3ULL; }
  h ^= 0xff; h *= 0x100000001b3ULL;
  for(i=0; i<nb; i++){ h ^= ((const unsigned char*)b)[i]; h *= 0x100000001b3ULL; }
  return h;
}

/* The SQLite code of a failed result (or NULL result) and the message. */
static int pgResultErr(StorePg *p, PGresult *r, const char *zWhat){
  const char *zState = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : 0;
  const char *zMsg = r ? PQresultErrorMessage(r) : 0;
  int rc = SQLITE_IOERR;
  size_t n;
  if( zMsg==0 || zMsg[0]==0 ) zMsg = PQerrorMessage(p->pConn);
  n = strlen(zMsg);
  while( n>0 && (zMsg[n-1]=='\n' || zMsg[n-1]==' ') ) n--;
  if( PQstatus(p->pConn)==CONNECTION_BAD || PQsocket(p->pConn)<0 ){
    pgSetErr(p, sqlite3_mprintf("store: %s of %s: connection lost: %.*s",
                                zWhat, p->zShow, (int)n, zMsg));
    if( p->bInTxn && !p->rcDead ){
      p->rcDead = SQLITE_IOERR;
      p->bDeadGone = 1;
    }
    return SQLITE_IOERR;
  }
  if( zState ){
    if( strcmp(zState, "40001")==0 || strcmp(zState, "40P01")==0
     || strcmp(zState, "55P03")==0 ){
      rc = SQLITE_BUSY;
    }else if( strcmp(zState, "53100")==0 ){
      rc = SQLITE_FULL;
    }else if( strcmp(zState, "25006")==0 ){
      rc = SQLITE_READONLY;
    }else if( strncmp(zState, "53", 2)==0 ){
      rc = SQLITE_NOMEM;
    }else if( strcmp(zState, "XX001")==0 || strcmp(zState, "XX002")==0 ){
      rc = SQLITE_CORRUPT;
    }
  }
  if( rc==SQLITE_READONLY && pgIsStandby(p) ){
    pgStandbyErr(p);
  }else{
    pgSetErr(p, sqlite3_mprintf("store: %s of %s: %s%s%.*s", zWhat, p->zShow,
        zState ? zState : "", zState ? " " : "", (int)n, zMsg));
  }
  if( p->bInTxn && !p->rcDead ){
    p->rcDead = rc;
    /* no SQLSTATE: libpq's own error (in pipeline mode a closed
    ** connection can leave the status OK); 57P, 08: the session ended */
    p->bDeadGone = zState==0 || strncmp(zState, "57P", 3)==0
                || strncmp(zState, "08", 2)==0;
  }
  return rc;
}

/* 1 when the failed result r is a serialization failure or deadlock. */
static int pgRetryable(PGresult *r){
  const char *zState = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : 0;
  return zState && (strcmp(zState, "40001")==0 || strcmp(zState, "40P01")==0);
}

/* Run a command without parameters; SQLITE_OK when it succeeded. */
static int pgExec(StorePg *p, const char *zSql, const char *zWhat){
  PGresult *r = PQexec(p->pConn, zSql);
  int rc = SQLITE_OK;
  pgTrip(p);
  if( r==0 || (PQresultStatus(r)!=PGRES_COMMAND_OK
               && PQresultStatus(r)!=PGRES_TUPLES_OK) ){
    rc = pgResultErr(p, r, zWhat);
  }
  PQclear(r);
  return rc;
}

/* Prepare the statements on a new connection, in one pipeline. */
static int pgPrepare(StorePg *p){
  int i, rc = SQLITE_OK;
  if( PQenterPipelineMode(p->pConn)!=1 ){
    pgSetErr(p, sqlite3_mprintf("store: %s: cannot enter pipeline mode",
                                p->zShow));
    return SQLITE_IOERR;
  }
  for(i=0; i<PS_NSTMT; i++){
    char zName[8];
    char *zSql = sqlite3_mprintf(azPgSql[i], p->zSchema);
    sqlite3_snprintf(sizeof(zName), zName, "d%d", i);
    if( zSql==0 ){ rc = SQLITE_NOMEM; break; }
    if( PQsendPrepare(p->pConn, zName, zSql, 0, 0)!=1 ) rc = SQLITE_IOERR;
    sqlite3_free(zSql);
    if( rc ) break;
  }
  if( rc==SQLITE_OK && PQpipelineSync(p->pConn)!=1 ) rc = SQLITE_IOERR;
  if( rc==SQLITE_OK ){
    pgTrip(p);
    for(i=0; i<=PS_NSTMT; i++){
      PGresult *r = PQgetResult(p->pConn);
      ExecStatusType e = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
      if( i==PS_NSTMT ){
        if( e!=PGRES_PIPELINE_SYNC && rc==SQLITE_OK ){
          rc = pgResultErr(p, r, "prepare");
        }
        PQclear(r);
        break;
      }
      if( e!=PGRES_COMMAND_OK && rc==SQLITE_OK ){
        rc = pgResultErr(p, r, "prepare");
      }
      PQclear(r);
      if( r && PQgetResult(p->pConn)!=0 ){ rc = SQLITE_IOERR; break; }
      if( r==0 ) break;
    }
  }else if( rc==SQLITE_IOERR ){
    pgResultErr(p, 0, "prepare");
  }
  if( PQpipelineStatus(p->pConn)!=PQ_PIPELINE_OFF ){
    PQexitPipelineMode(p->pConn);
  }
  if( rc==SQLITE_OK ) p->bPrepared = 1;
  return rc;
}

/* The server's replication state (StorePgInfo), as columns 1..6 of a
** SELECT whose column 0 is synchronous_commit. */
#define PG_INFO_COLS \
  " current_setting('synchronous_standby_names'), pg_is_in_recovery()," \
  " CASE WHEN pg_is_in_recovery() THEN coalesce((SELECT received_tli" \
  "   FROM pg_stat_wal_receiver), 0) ELSE ('x'||substr(pg_walfile_name(" \
  "   pg_current_wal_lsn()), 1, 8))::bit(32)::int END," \
  " CASE WHEN has_function_privilege('pg_control_system()', 'execute')" \
  "   THEN (SELECT system_identifier FROM pg_control_system()) ELSE 0 END," \
  " CASE WHEN pg_has_role('pg_read_all_stats', 'member') THEN (SELECT" \
  "   count(*) FROM pg_stat_replication WHERE sync_state IN ('sync'," \
  "   'quorum')) ELSE -1 END," \
  " CASE WHEN pg_has_role('pg_read_all_stats', 'member') THEN (SELECT" \
  "   count(*) FROM pg_stat_replication WHERE state='streaming')" \
  "   ELSE -1 END"

/* p->info from the row of a SELECT of synchronous_commit, PG_INFO_COLS. */
static void pgInfoRead(StorePg *p, PGresult *r){
  StorePgInfo *pI = &p->info;
  sqlite3_snprintf(sizeof(pI->zSyncCommit), pI->zSyncCommit, "%s",
                   PQgetvalue(r, 0, 0));
  sqlite3_snprintf(sizeof(pI->zSyncNames), pI->zSyncNames, "%s",
                   PQgetvalue(r, 0, 1));
  pI->bInRecovery = PQgetvalue(r, 0, 2)[0]=='t';
  pI->iTimeline = atoi(PQgetvalue(r, 0, 3));
  pI->iSystemId = strtoull(PQgetvalue(r, 0, 4), 0, 10);
  pI->nSyncStandby = atoi(PQgetvalue(r, 0, 5));
  pI->nStandby = atoi(PQgetvalue(r, 0, 6));
}

/* Settings of each new session, and the server's replication state
** (p->info): one round trip. */
static int pgSession(StorePg *p){
  char *zSql = sqlite3_mprintf("SET lock_timeout=%d;"
      " SET idle_in_transaction_session_timeout=0;"
      " SELECT set_config('synchronous_commit', %s, false)," PG_INFO_COLS,
      p->nBusyMs, p->iSync==0 ? "'off'" :
      "CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on'"
      " ELSE current_setting('synchronous_commit') END");
  PGresult *r;
  int rc = SQLITE_OK;
  if( zSql==0 ) return SQLITE_NOMEM;
  r = PQexec(p->pConn, zSql);
  pgTrip(p);
  sqlite3_free(zSql);
  if( r && PQresultStatus(r)==PGRES_TUPLES_OK && PQntuples(r)==1
   && PQnfields(r)==7 ){
    pgInfoRead(p, r);
  }else{
    rc = pgResultErr(p, r, "session setup");
  }
  PQclear(r);
  return rc;
}

static void pgNoNotice(void *pArg, const char *zMsg){
  (void)pArg; (void)zMsg;
}

/* The newest timeline a writable handle of this process connected to, per
** system identifier (fencing: see Failover above).  Guarded by pgTlMutex;
** the oldest entry makes room. */
#define PG_TL_SYSTEMS 16
static pthread_mutex_t pgTlMutex = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t iSystemId; int iTimeline; } aPgTl[PG_TL_SYSTEMS];
static int iPgTlNext = 0;

/* The newest timeline seen of system iSystemId (0: none), after raising
** it to iTimeline when bRecord. */
static int pgTimelineSeen(uint64_t iSystemId, int iTimeline, int bRecord){
  int i, iSeen = 0;
  pthread_mutex_lock(&pgTlMutex);
  for(i=0; i<PG_TL_SYSTEMS; i++){
    if( aPgTl[i].iSystemId==iSystemId ) break;
  }
  if( i<PG_TL_SYSTEMS ){
    if( bRecord && aPgTl[i].iTimeline<iTimeline ) aPgTl[i].iTimeline = iTimeline;
    iSeen = aPgTl[i].iTimeline;
  }else if( bRecord ){
    aPgTl[iPgTlNext].iSystemId = iSystemId;
    aPgTl[iPgTlNext].iTimeline = iSeen = iTimeline;
    iPgTlNext = (iPgTlNext+1)%PG_TL_SYSTEMS;
  }
  pthread_mutex_unlock(&pgTlMutex);
  return iSeen;
}

/* Whether a writable handle may use the server it just connected to
** (p->info): SQLITE_OK, or SQLITE_CANTOPEN with the reason in p->zErr.  A
** standby is refused when the URI names several hosts (the primary is
** among the others), else kept: its writes fail with SQLITE_READONLY. */
static int pgCheckPrimary(StorePg *p, const char *zHost){
  StorePgInfo *pI = &p->info;
  const char *zAt = zHost ? zHost : PQhost(p->pConn);
  if( pI->bInRecovery ){
    if( p->nHost<2 ) return SQLITE_OK;
    pgSetErr(p, sqlite3_mprintf("store: %s: server %s is a standby (in"
        " recovery), not a primary", p->zShow, zAt ? zAt : ""));
    return SQLITE_CANTOPEN;
  }
  if( pI->iSystemId && pI->iTimeline ){
    int iSeen = pgTimelineSeen(pI->iSystemId, 0, 0);
    if( iSeen>pI->iTimeline ){
      pgSetErr(p, sqlite3_mprintf("store: %s: server %s is on timeline %d,"
          " older than timeline %d of the same cluster that this process"
          " has written on: a demoted primary, fenced out", p->zShow,
          zAt ? zAt : "", pI->iTimeline, iSeen));
      return SQLITE_CANTOPEN;
    }
  }
  if( p->bRequireSync ){
    if( pI->nSyncStandby<0 ){
      pgSetErr(p, sqlite3_mprintf("store: %s: require_sync_standby=1, but"
          " the role cannot see the standbys of server %s"
          " (pg_stat_replication needs pg_monitor)", p->zShow,
          zAt ? zAt : ""));
      return SQLITE_CANTOPEN;
    }
    if( pI->nSyncStandby==0 || strcmp(pI->zSyncCommit, "off")==0
     || strcmp(pI->zSyncCommit, "local")==0 ){
      pgSetErr(p, sqlite3_mprintf("store: %s: require_sync_standby=1, but"
          " server %s has no synchronous standby attached"
          " (synchronous_commit=%s, synchronous_standby_names='%s',"
          " %d standbys streaming, %d synchronous)", p->zShow,
          zAt ? zAt : "", pI->zSyncCommit, pI->zSyncNames, pI->nStandby,
          pI->nSyncStandby));
      return SQLITE_CANTOPEN;
    }
  }
  return SQLITE_OK;
}

/* One connection attempt, to the URI's hosts (zHost NULL: libpq picks
** among them) or to host zHost (port zPort, hostaddr zAddr, either NULL)
** alone; the session set up and, for a writable handle, the server
** checked (pgCheckPrimary).  SQLITE_CANTOPEN with the reason in p->zErr
** when refused or unreachable. */
static int pgConnectOne(StorePg *p, const char *zHost, const char *zPort,
                        const char *zAddr){
  const char *azKey[5], *azVal[5];
  int n = 0, rc;
  if( p->pConn ){ PQfinish(p->pConn); p->pConn = 0; }
  azKey[n] = "dbname"; azVal[n++] = p->zConnUri;
  if( zHost ){ azKey[n] = "host"; azVal[n++] = zHost; }
  if( zPort ){ azKey[n] = "port"; azVal[n++] = zPort; }
  if( zAddr ){ azKey[n] = "hostaddr"; azVal[n++] = zAddr; }
  azKey[n] = 0; azVal[n] = 0;
  p->pConn = PQconnectdbParams(azKey, azVal, 1);
  pgTrip(p);
  if( p->pConn==0 ) return SQLITE_NOMEM;
  if( PQstatus(p->pConn)!=CONNECTION_OK ){
    const char *zMsg = PQerrorMessage(p->pConn);
    size_t nMsg = strlen(zMsg);
    while( nMsg>0 && (zMsg[nMsg-1]=='\n' || zMsg[nMsg-1]==' ') ) nMsg--;
    pgSetErr(p, sqlite3_mprintf("store: cannot connect to %s%s%s: %.*s",
        p->zShow, zHost ? " at " : "", zHost ? zHost : "", (int)nMsg, zMsg));
    return SQLITE_CANTOPEN;
  }
  /* the server's notices (a terminated session's FATAL among them) are
  ** not for the application's stderr */
  PQsetNoticeProcessor(p->pConn, pgNoNotice, 0);
  rc = pgSession(p);
  if( rc!=SQLITE_OK ) return rc==SQLITE_NOMEM ? rc : SQLITE_CANTOPEN;
  if( !p->bReadOnly ) rc = pgCheckPrimary(p, zHost);
  return rc;
}

/* The i-th entry of the comma-separated list z (the last one when the
** list is shorter, NULL for an empty list), sqlite3_malloc'd. */
static char *pgListItem(const char *z, int i){
  int k;
  if( z==0 || z[0]==0 ) return 0;
  for(k=0; k<i; k++){
    const char *zC = strchr(z, ',');
    if( zC==0 ) break;
    z = zC+1;
  }
  return sqlite3_mprintf("%.*s", (int)strcspn(z, ","), z);
}

/* Fencing across the URI's hosts, for a writable handle of a URI naming
** several: ask every host that answers (any role, connect_timeout 2 s)
** for its system identifier and timeline, and raise the newest timeline
** seen of each cluster (pgTimelineSeen), so that a process that never
** wrote on the new primary still refuses a demoted one that came back on
** an older timeline (pgCheckPrimary).  Hosts that do not answer count
** for nothing.  One connection per host, at each connect of the handle. */
static void pgProbeHosts(StorePg *p, const char *zHosts, const char *zPorts,
                         const char *zAddrs){
  int i;
  for(i=0; i<p->nHost; i++){
    char *zH = pgListItem(zHosts, i);
    char *zP = pgListItem(zPorts, i);
    char *zA = pgListItem(zAddrs, i);
    const char *azKey[7], *azVal[7];
    PGconn *pC;
    int n = 0;
    azKey[n] = "dbname"; azVal[n++] = p->zConnUri;
    azKey[n] = "host"; azVal[n++] = zH ? zH : "";
    if( zP ){ azKey[n] = "port"; azVal[n++] = zP; }
    if( zA ){ azKey[n] = "hostaddr"; azVal[n++] = zA; }
    azKey[n] = "target_session_attrs"; azVal[n++] = "any";
    azKey[n] = "connect_timeout"; azVal[n++] = "2";
    azKey[n] = 0; azVal[n] = 0;
    pC = PQconnectdbParams(azKey, azVal, 1);
    pgTrip(p);
    if( pC && PQstatus(pC)==CONNECTION_OK ){
      PGresult *r;
      PQsetNoticeProcessor(pC, pgNoNotice, 0);
      r = PQexec(pC, "SELECT current_setting('synchronous_commit'),"
                     PG_INFO_COLS);
      pgTrip(p);
      if( r && PQresultStatus(r)==PGRES_TUPLES_OK && PQntuples(r)==1
       && PQnfields(r)==7 ){
        int iTl = atoi(PQgetvalue(r, 0, 3));
        uint64_t iSys = strtoull(PQgetvalue(r, 0, 4), 0, 10);
        if( iSys && iTl>0 ) pgTimelineSeen(iSys, iTl, 1);
      }
      PQclear(r);
    }
    if( pC ) PQfinish(pC);
    sqlite3_free(zH); sqlite3_free(zP); sqlite3_free(zA);
  }
}

/* Connect to a server the handle may use: libpq's pick among the URI's
** hosts, and when a writable handle refuses it (pgCheckPrimary) and the
** URI names several hosts, each host in turn.  A writable handle of
** several hosts first learns their timelines (pgProbeHosts).  The reasons
** of every refusal in p->zErr. */
static int pgConnectServer(StorePg *p){
  PQconninfoOption *aOpt = 0, *o;
  const char *zHosts = 0, *zPorts = 0, *zAddrs = 0;
  sqlite3_str *pWhy;
  int rc, i;
  if( !p->bReadOnly && p->nHost>=2 ){
    aOpt = PQconninfoParse(p->zConnUri, 0);
    for(o=aOpt; o && o->keyword; o++){
      if( strcmp(o->keyword, "host")==0 ) zHosts = o->val;
      if( strcmp(o->keyword, "port")==0 ) zPorts = o->val;
      if( strcmp(o->keyword, "hostaddr")==0 ) zAddrs = o->val;
    }
    if( aOpt ) pgProbeHosts(p, zHosts, zPorts, zAddrs);
  }
  rc = pgConnectOne(p, 0, 0, 0);
  if( rc!=SQLITE_CANTOPEN || p->bReadOnly || p->nHost<2 || aOpt==0 ){
    PQconninfoFree(aOpt);
    return rc;
  }
  pWhy = sqlite3_str_new(0);
  sqlite3_str_appendall(pWhy, p->zErr ? p->zErr : "");
  for(i=0; i<p->nHost; i++){
    char *zH = pgListItem(zHosts, i);
    char *zP = pgListItem(zPorts, i);
    char *zA = pgListItem(zAddrs, i);
    rc = pgConnectOne(p, zH ? zH : "", zP, zA);
    if( rc==SQLITE_CANTOPEN ){
      sqlite3_str_appendf(pWhy, "; %s", p->zErr ? p->zErr : "");
    }
    sqlite3_free(zH); sqlite3_free(zP); sqlite3_free(zA);
    if( rc!=SQLITE_CANTOPEN ) break;
  }
  PQconninfoFree(aOpt);
  if( rc==SQLITE_CANTOPEN ){
    pgSetErr(p, sqlite3_str_finish(pWhy));
  }else{
    sqlite3_free(sqlite3_str_finish(pWhy));
  }
  return rc;
}

/* Connect (again); takes the writer locks of the handle again. */
static int pgConnect(StorePg *p){
  PgLock *pL, **ppL;
  int rc;
  p->bPrepared = 0;
  p->bInTxn = 0;
  p->bWriteTxn = 0;
  rc = pgConnectServer(p);
  if( rc==SQLITE_OK && !p->bReadOnly && !p->info.bInRecovery
   && p->info.iSystemId ){
    pgTimelineSeen(p->info.iSystemId, p->info.iTimeline, 1);
  }
  if( rc==SQLITE_OK && p->bSchemaReady ) rc = pgPrepare(p);
  for(ppL=&p->pLock; rc==SQLITE_OK && (pL = *ppL)!=0; ){
    char zKey[24];
    const char *az[1];
    PGresult *r;
    int bGot;
    sqlite3_snprintf(sizeof(zKey), zKey, "%lld", (long long)pL->iKey);
    az[0] = zKey;
    r = PQexecPrepared(p->pConn, "d12", 1, az, 0, 0, 0);
    pgTrip(p);
    if( r==0 || PQresultStatus(r)!=PGRES_TUPLES_OK ){
      rc = pgResultErr(p, r, "writer lock");
      PQclear(r);
      break;
    }
    bGot = PQgetvalue(r, 0, 0)[0]=='t';
    PQclear(r);
    if( bGot ){
      ppL = &pL->pNext;
    }else{
      *ppL = pL->pNext;
      sqlite3_free(pL);
      p->bLockLost = 1;
    }
  }
  return rc;
}

static int64_t pgNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* Connect again after a lost connection: tries for up to failover_ms
** (a failover: the new primary takes a while to be promoted), then
** SQLITE_IOERR with the last reason. */
static int pgReconnect(StorePg *p){
  int64_t tEnd = pgNowMs() + p->nFailoverMs;
  int nPause = 50, rc;
  p->info.nReconnect++;
  for(;;){
    int64_t tLeft;
    rc = pgConnect(p);
    if( rc!=SQLITE_CANTOPEN ) break;
    tLeft = tEnd - pgNowMs();
    if( tLeft<=0 ){
      char *z = sqlite3_mprintf("store: no server of %s accepted the"
          " connection within %d ms (failover_ms): %s", p->zShow,
          p->nFailoverMs, p->zErr ? p->zErr : "");
      if( z ) pgSetErr(p, z);
      return SQLITE_IOERR;
    }
    usleep((useconds_t)(tLeft<nPause ? tLeft : nPause)*1000);
    if( nPause<500 ) nPause *= 2;
  }
  return rc;
}

/* A live connection: reconnects a lost one (outside a transaction). */
static int pgLive(StorePg *p){
  if( p->bInTxn ) return p->rcDead;
  if( p->pConn && PQstatus(p->pConn)==CONNECTION_OK
   && PQsocket(p->pConn)>=0 && p->bPrepared ){
    return SQLITE_OK;
  }
  return pgReconnect(p);
}

/* Run prepared statement i with binary parameters; *ppRes gets the result
** (caller clears) of a statement returning rows. */
#define PG_BEGIN_READ "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"

static int pgSessionGone(StorePg *p, PGresult *r);

/* The pending BEGIN of a read transaction and the prepared statement
** zName, in one pipeline: one round trip.  SQLITE_OK with *ppRes the
** statement's result (failed or not; NULL if none came), or the error of
** BEGIN, when *pbGone says whether the session was found gone. */
static int pgBeginAndRun(StorePg *p, const char *zName, int nParam,
                         const char *const *azVal, const int *anLen,
                         const int *aFmt, PGresult **ppRes, int *pbGone){
  int i, rc = SQLITE_OK;
  *ppRes = 0;
  *pbGone = 0;
  if( PQenterPipelineMode(p->pConn)!=1
   || PQsendQueryParams(p->pConn, PG_BEGIN_READ, 0, 0, 0, 0, 0, 0)!=1
   || PQsendQueryPrepared(p->pConn, zName, nParam, azVal, anLen, aFmt, 1)!=1
   || PQpipelineSync(p->pConn)!=1 ){
    rc = pgResultErr(p, 0, "begin");
    *pbGone = pgSessionGone(p, 0);
    if( PQstatus(p->pConn)==CONNECTION_OK
     && PQpipelineStatus(p->pConn)!=PQ_PIPELINE_OFF ){
      while( PQgetResult(p->pConn) ){}
      PQexitPipelineMode(p->pConn);
    }
    return rc;
  }
  pgTrip(p);
  /* BEGIN's result, the statement's, each followed by NULL; then SYNC */
  for(i=0; i<=2; i++){
    PGresult *r = PQgetResult(p->pConn);
    ExecStatusType e;
    if( r==0 ){
      if( rc==SQLITE_OK && i<2 ){
        rc = pgResultErr(p, 0, "begin");
        *pbGone = pgSessionGone(p, 0);
      }
      break;
    }
    e = PQresultStatus(r);
    if( i==2 ){ PQclear(r); break; }
    if( i==0 && e!=PGRES_COMMAND_OK ){
      rc = pgResultErr(p, r, "begin");
      *pbGone = pgSessionGone(p, r);
    }
    if( i==1 && rc==SQLITE_OK ){
      *ppRes = r;
    }else{
      PQclear(r);
    }
    PQclear(PQgetResult(p->pConn));
  }
  if( PQstatus(p->pConn)==CONNECTION_OK ) PQexitPipelineMode(p->pConn);
  if( rc!=SQLITE_OK ){
    PQclear(*ppRes);
    *ppRes = 0;
    if( PQstatus(p->pConn)==CONNECTION_OK
     && PQtransactionStatus(p->pConn)!=PQTRANS_IDLE ){
      PQclear(PQexec(p->pConn, "ROLLBACK"));
      pgTrip(p);
    }
  }
  return rc;
}

/* A read transaction's BEGIN still pending goes with the statement zName
** (see pgBeginAndRun); a session found gone at that BEGIN, when nothing
** was in flight, is connected again once.  The statement's result in
** *ppRes, or the error of BEGIN, which ends the transaction for the
** server (every later call fails with it until the rollback). */
static int pgRunFirst(StorePg *p, const char *zName, int nParam,
                      const char *const *azVal, const int *anLen,
                      const int *aFmt, PGresult **ppRes){
  int rc, bGone = 0, bAgain;
  p->bBeginPending = 0;
  for(bAgain=1; ; bAgain=0){
    rc = pgBeginAndRun(p, zName, nParam, azVal, anLen, aFmt, ppRes, &bGone);
    if( rc==SQLITE_OK || !bGone || !bAgain ) break;
    PQfinish(p->pConn);
    p->pConn = 0;
    p->bPrepared = 0;
    p->bInTxn = 0;
    p->rcDead = 0;
    p->bDeadGone = 0;
    rc = pgReconnect(p);
    p->bInTxn = 1;
    if( rc!=SQLITE_OK ){
      rc = SQLITE_IOERR;
      break;
    }
  }
  if( rc!=SQLITE_OK && !p->rcDead ) p->rcDead = rc;
  return rc;
}

/* Send the pending BEGIN of a read transaction alone (before a statement
** that is not prepared). */
static int pgBeginNow(StorePg *p){
  int rc;
  if( !p->bBeginPending ) return SQLITE_OK;
  p->bBeginPending = 0;
  rc = pgExec(p, PG_BEGIN_READ, "begin");
  if( rc!=SQLITE_OK && !p->rcDead ) p->rcDead = rc;
  return rc;
}

static int pgRun(StorePg *p, int i, int nParam, const char *const *azVal,
                 const int *anLen, const int *aFmt, PGresult **ppRes,
                 const char *zWhat){
  char zName[8];
  PGresult *r;
  int rc = SQLITE_OK;
  sqlite3_snprintf(sizeof(zName), zName, "d%d", i);
  if( p->bBeginPending ){
    rc = pgRunFirst(p, zName, nParam, azVal, anLen, aFmt, &r);
    if( rc!=SQLITE_OK ) return rc;
  }else{
    r = PQexecPrepared(p->pConn, zName, nParam, azVal, anLen, aFmt, 1);
    pgTrip(p);
  }
  if( r==0 || (PQresultStatus(r)!=PGRES_TUPLES_OK
               && PQresultStatus(r)!=PGRES_COMMAND_OK) ){
    rc = pgResultErr(p, r, zWhat);
    if( ppRes && r && pgRetryable(r) ) rc = SQLITE_BUSY;
    PQclear(r);
    r = 0;
  }
  if( ppRes ) *ppRes = r; else PQclear(r);
  return rc;
}

/* ---- chunk read-ahead ---- */

#define PG_RA_BYTES (1024*1024)        /* chunk bytes one read-ahead fetches */
#define PG_RA_KEEP (4*PG_RA_BYTES)     /* most bytes of rows kept */
#define PG_RA_ROWS 1024                /* most rows kept */

static int pgFlush(StorePg *p, const char *zTail);

/* Forget the rows read ahead (a transaction ends, or writes). */
static void pgRaDrop(StorePg *p){
  int i;
  for(i=0; i<p->nRa; i++) sqlite3_free(p->aRa[i].pKey);
  p->nRa = 0;
  p->nRaByte = 0;
}
static void pgRaClear(StorePg *p){
  int i;
  pgRaDrop(p);
  for(i=0; i<PG_RA_PREFIXES; i++){
    sqlite3_free(p->azRaPrefix[i]);
    p->azRaPrefix[i] = 0;
    p->anRaPrefix[i] = 0;
  }
}

static PgRaRow *pgRaFind(StorePg *p, const void *pKey, int nKey){
  int i;
  for(i=0; i<p->nRa; i++){
    if( p->aRa[i].nKey==nKey && memcmp(p->aRa[i].pKey, pKey, nKey)==0 ){
      return &p->aRa[i];
    }
  }
  return 0;
}

/* 1 when pKey is a chunk of a value a recent range read of this
** transaction read (the keys differ only in their last 4 bytes); else
** remembers pKey's prefix, in place of the oldest one, and 0. */
static int pgRaSequential(StorePg *p, const void *pKey, int nKey){
  int n = nKey-4, i;
  char *z;
  if( n<1 ) return 0;
  for(i=0; i<PG_RA_PREFIXES; i++){
    if( p->anRaPrefix[i]==n && memcmp(p->azRaPrefix[i], pKey, n)==0 ){
      return 1;
    }
  }
  z = sqlite3_malloc64(n);
  if( z==0 ) return 0;
  memcpy(z, pKey, n);
  i = p->iRaPrefix;
  sqlite3_free(p->azRaPrefix[i]);
  p->azRaPrefix[i] = z;
  p->anRaPrefix[i] = n;
  p->iRaPrefix = (i+1)%PG_RA_PREFIXES;
  return 0;
}

/* Read the chunk row pKey and the chunk rows after it (the keys with its
** prefix, pKey without its last 4 bytes), up to PG_RA_BYTES, with one
** statement, into p->aRa (which forgets what it held when it would grow
** past PG_RA_KEEP bytes or PG_RA_ROWS rows). */
static int pgRaFetch(StorePg *p, const void *pKey, int nKey){
  unsigned char *aHi = sqlite3_malloc64(nKey);
  const char *az[3]; int an[3], af[3];
  char zLim[24];
  PGresult *r = 0;
  int i, nHi = nKey-4, nRow, nLim, rc;
  int64_t nByte;
  if( aHi==0 ) return SQLITE_NOMEM;
  /* the server answers for every key of the range: it hears the buffered
  ** writes first */
  if( p->nOp && (rc = pgFlush(p, 0))!=SQLITE_OK ){
    sqlite3_free(aHi);
    return rc;
  }
  memcpy(aHi, pKey, nHi);
  /* the first key after every key with the prefix */
  while( nHi>0 && aHi[nHi-1]==0xff ) nHi--;
  if( nHi>0 ) aHi[nHi-1]++;
  nLim = PG_RA_BYTES/p->nMaxValue;
  if( nLim<2 ) nLim = 2;
  if( nLim>PG_SCAN_PAGE ) nLim = PG_SCAN_PAGE;
  sqlite3_snprintf(sizeof(zLim), zLim, "%d", nLim);
  az[0] = pKey; an[0] = nKey; af[0] = 1;
  if( nHi>0 ){
    az[1] = (const char*)aHi; an[1] = nHi; af[1] = 1;
    az[2] = zLim; an[2] = 0; af[2] = 0;
    rc = pgRun(p, PS_SCANF, 3, az, an, af, &r, "chunk read");
  }else{
    az[1] = zLim; an[1] = 0; af[1] = 0;
    rc = pgRun(p, PS_SCANF_OPEN, 2, az, an, af, &r, "chunk read");
  }
  sqlite3_free(aHi);
  if( rc!=SQLITE_OK ) return rc;
  nRow = PQntuples(r);
  for(i=0, nByte=0; i<nRow; i++) nByte += PQgetlength(r, i, 1);
  if( p->nRa+nRow>PG_RA_ROWS || p->nRaByte+nByte>PG_RA_KEEP ) pgRaDrop(p);
  if( p->nRa+nRow>p->nRaAlloc ){
    PgRaRow *aNew = sqlite3_realloc64(p->aRa, sizeof(PgRaRow)*(p->nRa+nRow));
    if( aNew==0 ){ PQclear(r); return SQLITE_NOMEM; }
    p->aRa = aNew;
    p->nRaAlloc = p->nRa+nRow;
  }
  for(i=0; i<nRow; i++){
    PgRaRow *pRow = &p->aRa[p->nRa];
    int nK = PQgetlength(r, i, 0), nV = PQgetlength(r, i, 1);
    pRow->pKey = sqlite3_malloc64((nK>0 ? nK : 1) + (nV>0 ? nV : 0));
    if( pRow->pKey==0 ){ rc = SQLITE_NOMEM; break; }
    memcpy(pRow->pKey, PQgetvalue(r, i, 0), nK);
    pRow->pVal = pRow->pKey + nK;
    if( nV>0 ) memcpy(pRow->pVal, PQgetvalue(r, i, 1), nV);
    pRow->nKey = nK;
    pRow->nVal = nV;
    p->nRa++;
    p->nRaByte += nV;
  }
  PQclear(r);
  return rc;
}

/* ---- buffered writes ---- */

static void pgOpsClear(StorePg *p){
  int i;
  for(i=0; i<p->nOp; i++) sqlite3_free(p->aOp[i].pKey);
  p->nOp = 0;
  p->nOpByte = 0;
}

/* The parameters of buffered write pOp. */
static int pgOpParams(PgOp *pOp, const char **az, int *an, int *af){
  az[0] = (const char*)pOp->pKey; an[0] = pOp->nKey; af[0] = 1;
  az[1] = (const char*)pOp->pVal; an[1] = pOp->nVal; af[1] = 1;
  return pOp->eStmt==PS_PUT || pOp->eStmt==PS_DELRANGE ? 2 : 1;
}

/* Send the buffered writes, then zTail (COMMIT, or NULL), in one pipeline:
** one round trip.  SQLITE_OK when every statement succeeded. */
static int pgFlush(StorePg *p, const char *zTail){
  int i, rc = SQLITE_OK, nSent = 0, bTail = 0;
  if( p->nOp==0 && zTail==0 ) return SQLITE_OK;
  if( PQenterPipelineMode(p->pConn)!=1 ){
    pgOpsClear(p);
    return pgResultErr(p, 0, "pipeline");
  }
  for(i=0; i<p->nOp; i++){
    const char *az[2]; int an[2], af[2];
    char zName[8];
    int n = pgOpParams(&p->aOp[i], az, an, af);
    sqlite3_snprintf(sizeof(zName), zName, "d%d", p->aOp[i].eStmt);
    if( PQsendQueryPrepared(p->pConn, zName, n, az, an, af, 1)!=1 ){
      rc = SQLITE_IOERR;
      break;
    }
    nSent++;
  }
  if( rc==SQLITE_OK && zTail ){
    if( PQsendQueryParams(p->pConn, zTail, 0, 0, 0, 0, 0, 1)!=1 ){
      rc = SQLITE_IOERR;
    }else{
      bTail = 1;
    }
  }
  pgOpsClear(p);
  if( PQpipelineSync(p->pConn)!=1 ) rc = SQLITE_IOERR;
  if( rc!=SQLITE_OK ){
    rc = pgResultErr(p, 0, zTail ? "commit" : "write");
    if( PQstatus(p->pConn)!=CONNECTION_OK ) return rc;
  }
  pgTrip(p);
  /* results: one per statement sent (each followed by NULL), then SYNC */
  for(i=0; i<nSent+bTail+1; i++){
    PGresult *r = PQgetResult(p->pConn);
    ExecStatusType e;
    if( r==0 ){
      if( rc==SQLITE_OK ) rc = pgResultErr(p, 0, zTail ? "commit" : "write");
      break;
    }
    e = PQresultStatus(r);
    if( i==nSent+bTail ){
      PQclear(r);
      break;
    }
    if( e!=PGRES_COMMAND_OK && e!=PGRES_TUPLES_OK && rc==SQLITE_OK ){
      rc = pgResultErr(p, r, zTail ? "commit" : "write");
    }
    PQclear(r);
    r = PQgetResult(p->pConn);          /* the NULL ending the statement */
    PQclear(r);
  }
  if( PQstatus(p->pConn)==CONNECTION_OK ) PQexitPipelineMode(p->pConn);
  return rc;
}

/* Buffer one write of a write transaction (copies the bytes). */
static int pgOpAdd(StorePg *p, int eStmt, const void *pKey, int nKey,
                   const void *pVal, int nVal){
  PgOp *pOp;
  if( p->nRa ) pgRaDrop(p);
  if( p->nOp==p->nOpAlloc ){
    int nNew = p->nOpAlloc ? p->nOpAlloc*2 : 64;
    PgOp *aNew = sqlite3_realloc64(p->aOp, sizeof(PgOp)*nNew);
    if( aNew==0 ) return SQLITE_NOMEM;
    p->aOp = aNew;
    p->nOpAlloc = nNew;
  }
  pOp = &p->aOp[p->nOp];
  pOp->pKey = sqlite3_malloc64((nKey>0 ? nKey : 1) + (nVal>0 ? nVal : 0));
  if( pOp->pKey==0 ) return SQLITE_NOMEM;
  if( nKey>0 ) memcpy(pOp->pKey, pKey, nKey);
  pOp->pVal = pOp->pKey + nKey;
  if( nVal>0 ) memcpy(pOp->pVal, pVal, nVal);
  pOp->eStmt = eStmt;
  pOp->nKey = nKey;
  pOp->nVal = nVal>0 ? nVal : 0;
  p->nOp++;
  p->nOpByte += nKey + (nVal>0 ? nVal : 0);
  if( p->nOpByte>PG_BUF_FLUSH ) return pgFlush(p, 0);
  return SQLITE_OK;
}

/* Before a read inside a write transaction: the buffered writes go first. */
static int pgBeforeRead(StorePg *p){
  if( p->bInTxn ){
    if( p->rcDead ) return p->rcDead;
    return p->nOp ? pgFlush(p, 0) : SQLITE_OK;
  }
  return pgLive(p);
}

/* memcmp() order, a prefix first. */
static int pgKeyCmp(const void *a, int na, const void *b, int nb){
  int c = memcmp(a, b, na<nb ? na : nb);
  return c ? c : na-nb;
}

/* A point read inside a write transaction: the buffered write that decides
** key pKey, newest first: 1 a put (*ppOp), 2 a delete, 0 none (the server
** has the answer).  Long buffers are sent first instead (the walk is
** linear): then 0. */
#define PG_LOOKUP_MAX 512
static int pgOpLookup(StorePg *p, const void *pKey, int nKey, PgOp **ppOp,
                      int *pRc){
  int i;
  *pRc = SQLITE_OK;
  if( !p->bInTxn || !p->bWriteTxn || p->nOp==0 ) return 0;
  if( p->nOp>PG_LOOKUP_MAX ){
    *pRc = pgFlush(p, 0);
    return 0;
  }
  for(i=p->nOp-1; i>=0; i--){
    PgOp *o = &p->aOp[i];
    switch( o->eStmt ){
      case PS_PUT: case PS_DEL:
        if( o->nKey==nKey && memcmp(o->pKey, pKey, nKey)==0 ){
          *ppOp = o;
          return o->eStmt==PS_PUT ? 1 : 2;
        }
        break;
      case PS_DELRANGE:
        if( pgKeyCmp(pKey, nKey, o->pKey, o->nKey)>=0
         && pgKeyCmp(pKey, nKey, o->pVal, o->nVal)<0 ) return 2;
        break;
      default:   /* PS_DELOPEN */
        if( pgKeyCmp(pKey, nKey, o->pKey, o->nKey)>=0 ) return 2;
        break;
    }
  }
  return 0;
}

/* ---- transactions ---- */

static int pgLockCall(StorePg *p, int eStmt, int64_t iKey, int *pbGot);

/* After a transaction: the writer locks released during it. */
static void pgUnlockPending(StorePg *p){
  PgLock *pL;
  int bGot;
  while( (pL = p->pUnlock)!=0 ){
    p->pUnlock = pL->pNext;
    if( p->pConn && PQstatus(p->pConn)==CONNECTION_OK && p->bPrepared ){
      pgLockCall(p, PS_WUNLOCK, pL->iKey, &bGot);
    }
    sqlite3_free(pL);
  }
}

static int pgRollback(Store *pStore){
  StorePg *p = (StorePg*)pStore;
  int rc = SQLITE_OK;
  pgOpsClear(p);
  pgRaClear(p);
  if( !p->bInTxn ) return SQLITE_OK;
  p->bBeginPending = 0;
  p->bInTxn = 0;
  p->bWriteTxn = 0;
  p->rcDead = 0;
  p->bDeadGone = 0;
  if( PQstatus(p->pConn)==CONNECTION_OK
   && PQtransactionStatus(p->pConn)!=PQTRANS_IDLE ){
    rc = pgExec(p, "ROLLBACK", "rollback");
  }
  pgUnlockPending(p);
  return rc;
}

/* 1 when the failed result r (or NULL) says the session is gone: the
** connection is lost, or the server ended the session (SQLSTATE class 57P:
** shut down, crash of another server process; class 08: connection
** failure). */
static int pgSessionGone(StorePg *p, PGresult *r){
  const char *zState = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : 0;
  if( PQstatus(p->pConn)!=CONNECTION_OK || PQsocket(p->pConn)<0 ) return 1;
  /* no SQLSTATE: libpq's own error (in pipeline mode a closed connection
  ** can leave the status OK) */
  return zState==0
      || strncmp(zState, "57P", 3)==0 || strncmp(zState, "08", 2)==0;
}

/* One attempt at BEGIN (and the transaction lock of a writer), pipelined:
** one round trip.  *pbGone: the session was found gone. */
static int pgBeginOnce(StorePg *p, int bWrite, int *pbRetry, int *pbGone){
  char zLock[64];
  const char *zBegin = bWrite ? "BEGIN ISOLATION LEVEL READ COMMITTED"
                              : "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
  int i, n = bWrite ? 2 : 1, rc = SQLITE_OK;
  *pbRetry = 0;
  *pbGone = 0;
  sqlite3_snprintf(sizeof(zLock), zLock, "SELECT pg_advisory_xact_lock(%d,%d)",
                   p->aTxnLock[0], p->aTxnLock[1]);
  if( PQenterPipelineMode(p->pConn)!=1
   || PQsendQueryParams(p->pConn, zBegin, 0, 0, 0, 0, 0, 0)!=1
   || (bWrite && PQsendQueryParams(p->pConn, zLock, 0, 0, 0, 0, 0, 0)!=1)
   || PQpipelineSync(p->pConn)!=1 ){
    rc = pgResultErr(p, 0, "begin");
    *pbGone = pgSessionGone(p, 0);
    if( PQstatus(p->pConn)==CONNECTION_OK
     && PQpipelineStatus(p->pConn)!=PQ_PIPELINE_OFF ){
      while( PQgetResult(p->pConn) ){}
      PQexitPipelineMode(p->pConn);
    }
    return rc;
  }
  pgTrip(p);
  for(i=0; i<=n; i++){
    PGresult *r = PQgetResult(p->pConn);
    ExecStatusType e;
    if( r==0 ){
      if( rc==SQLITE_OK ) rc = pgResultErr(p, 0, "begin");
      *pbGone = *pbGone || pgSessionGone(p, 0);
      break;
    }
    e = PQresultStatus(r);
    if( i==n ){ PQclear(r); break; }
    if( e!=PGRES_COMMAND_OK && e!=PGRES_TUPLES_OK && rc==SQLITE_OK ){
      *pbRetry = pgRetryable(r);
      *pbGone = pgSessionGone(p, r);
      rc = pgResultErr(p, r, bWrite ? "begin (the store's write lock)"
                                    : "begin");
    }
    PQclear(r);
    PQclear(PQgetResult(p->pConn));
  }
  if( PQstatus(p->pConn)==CONNECTION_OK ) PQexitPipelineMode(p->pConn);
  if( rc!=SQLITE_OK && PQstatus(p->pConn)==CONNECTION_OK
   && PQtransactionStatus(p->pConn)!=PQTRANS_IDLE ){
    PQclear(PQexec(p->pConn, "ROLLBACK"));
    pgTrip(p);
  }
  return rc;
}

static int pgBegin(Store *pStore, int bWrite){
  StorePg *p = (StorePg*)pStore;
  int rc, bRetry = 0, i, bLost = 0, bGone = 0;
  if( p->bInTxn ) return SQLITE_MISUSE;
  if( bWrite && p->bReadOnly ) return SQLITE_READONLY;
  if( bWrite && pgIsStandby(p) ) return pgStandbyErr(p);
  if( bWrite && p->bLockLost ){
    p->bLockLost = 0;
    pgSetErr(p, sqlite3_mprintf("store: %s: the connection was lost and a"
        " writer lock this handle held was taken by another session",
        p->zShow));
    return SQLITE_BUSY;
  }
  if( !bWrite ){
    /* BEGIN goes with the first statement (pgRun): a read transaction
    ** costs no round trip of its own */
    rc = pgLive(p);
    if( rc!=SQLITE_OK ) return rc;
    p->bInTxn = 1;
    p->bWriteTxn = 0;
    p->bBeginPending = 1;
    pgRaClear(p);
    return SQLITE_OK;
  }
  for(i=0; ; i++){
    rc = pgLive(p);
    if( rc!=SQLITE_OK ) return rc;
    rc = pgBeginOnce(p, bWrite, &bRetry, &bGone);
    if( rc!=SQLITE_OK && !bLost && bGone ){
      /* the session was gone before this BEGIN (a server restart, an
      ** idle connection dropped): nothing was in flight, connect again */
      bLost = 1;
      i--;
      PQfinish(p->pConn);
      p->pConn = 0;
      p->bPrepared = 0;
      continue;
    }
    if( rc==SQLITE_OK || !bRetry || i>=p->nRetry ) break;
  }
  if( rc==SQLITE_OK ){
    p->bInTxn = 1;
    p->bWriteTxn = bWrite;
    pgRaClear(p);
  }else if( bRetry ){
    char *z = sqlite3_mprintf("%s (after %d retries)", p->zErr, p->nRetry);
    if( z ) pgSetErr(p, z);
    rc = SQLITE_BUSY;
  }
  return rc;
}

#ifdef DEPOT_TEST
int depot_pg_test_lost_commits = 0;
#endif

static int pgCommit(Store *pStore){
  StorePg *p = (StorePg*)pStore;
  int rc;
  if( !p->bInTxn ) return SQLITE_MISUSE;
  if( p->bBeginPending ){
    /* a read transaction that read nothing: nothing to end */
    p->bBeginPending = 0;
    p->bInTxn = 0;
    pgRaClear(p);
    pgUnlockPending(p);
    return SQLITE_OK;
  }
  p->eLost = STORE_LOST_NONE;
  if( p->rcDead ){
    /* COMMIT was never sent: a lost session took the transaction */
    rc = p->rcDead;
    if( p->bDeadGone ) p->eLost = STORE_LOST_ABORTED;
  }else{
#ifdef DEPOT_TEST
    if( p->bWriteTxn && depot_pg_test_lost_commits>0 ){
      /* The server rolls the transaction back and the answer never comes
      ** back: to the caller, a COMMIT lost on the way. */
      depot_pg_test_lost_commits--;
      pgFlush(p, "ROLLBACK");
      PQfinish(p->pConn);
      p->pConn = 0;
      p->bPrepared = 0;
      pgSetErr(p, sqlite3_mprintf("store: commit of %s: connection lost:"
                                  " (test) no answer", p->zShow));
      p->eLost = STORE_LOST_UNKNOWN;
      rc = SQLITE_IOERR;
    }else
#endif
    {
      /* lost on the way: the server may have committed it */
      rc = pgFlush(p, "COMMIT");
      if( rc!=SQLITE_OK && p->bDeadGone ) p->eLost = STORE_LOST_UNKNOWN;
    }
  }
  pgOpsClear(p);
  pgRaClear(p);
  p->bInTxn = 0;
  p->bWriteTxn = 0;
  p->rcDead = 0;
  p->bDeadGone = 0;
  if( rc!=SQLITE_OK && PQstatus(p->pConn)==CONNECTION_OK
   && PQtransactionStatus(p->pConn)!=PQTRANS_IDLE ){
    PQclear(PQexec(p->pConn, "ROLLBACK"));
    pgTrip(p);
  }
  pgUnlockPending(p);
  return rc;
}

/* Run one autocommit write (a put or a delete outside a transaction),
** retrying serialization failures. */
static int pgAutoWrite(StorePg *p, int eStmt, const void *pKey, int nKey,
                       const void *pVal, int nVal, const char *zWhat){
  int i, rc = SQLITE_OK;
  for(i=0; i<=p->nRetry; i++){
    const char *az[2]; int an[2], af[2];
    PGresult *r = 0;
    char zName[8];
    rc = pgLive(p);
    if( rc!=SQLITE_OK ) return rc;
    az[0] = pKey; an[0] = nKey; af[0] = 1;
    az[1] = pVal; an[1] = nVal; af[1] = 1;
    sqlite3_snprintf(sizeof(zName), zName, "d%d", eStmt);
    r = PQexecPrepared(p->pConn, zName, pVal ? 2 : 1, az, an, af, 1);
    pgTrip(p);
    if( r && PQresultStatus(r)==PGRES_COMMAND_OK ){
      PQclear(r);
      return SQLITE_OK;
    }
    rc = pgResultErr(p, r, zWhat);
    if( !pgRetryable(r) ){ PQclear(r); return rc; }
    PQclear(r);
  }
  return SQLITE_BUSY;
}

/* ---- reads and writes ---- */

static int pgGet(Store *pStore, const void *pKey, int nKey,
                 void **ppVal, int *pnVal){
  StorePg *p = (StorePg*)pStore;
  const char *az[1]; int an[1], af[1];
  PGresult *r = 0;
  PgOp *pOp = 0;
  int rc, eBuf;
  *ppVal = 0;
  *pnVal = -1;
  if( p->bInTxn && p->rcDead ) return p->rcDead;
  /* a key the transaction wrote is answered here, any other one by the
  ** server without sending the buffered writes first */
  eBuf = pgOpLookup(p, pKey, nKey, &pOp, &rc);
  if( rc!=SQLITE_OK ) return rc;
  if( eBuf==2 ) return SQLITE_OK;
  if( eBuf==1 ){
    void *a = sqlite3_malloc64(pOp->nVal>0 ? pOp->nVal : 1);
    if( a==0 ) return SQLITE_NOMEM;
    if( pOp->nVal>0 ) memcpy(a, pOp->pVal, pOp->nVal);
    *ppVal = a;
    *pnVal = pOp->nVal;
    return SQLITE_OK;
  }
  if( !p->bInTxn && (rc = pgLive(p))!=SQLITE_OK ) return rc;
  az[0] = pKey; an[0] = nKey; af[0] = 1;
  rc = pgRun(p, PS_GET, 1, az, an, af, &r, "get");
  if( rc==SQLITE_OK && PQntuples(r)>0 ){
    int n = PQgetlength(r, 0, 0);
    void *a = sqlite3_malloc64(n>0 ? n : 1);
    if( a==0 ){
      rc = SQLITE_NOMEM;
    }else{
      if( n>0 ) memcpy(a, PQgetvalue(r, 0, 0), n);
      *ppVal = a;
      *pnVal = n;
    }
  }
  PQclear(r);
  return rc;
}

static int pgGetRange(Store *pStore, const void *pKey, int nKey, int iOff,
                      int n, void *pOut, int *pnGot){
  StorePg *p = (StorePg*)pStore;
  const char *az[3]; int an[3], af[3];
  unsigned char aOff[4], aLen[4];
  PGresult *r = 0;
  PgOp *pOp = 0;
  int rc, eBuf;
  *pnGot = -1;
  if( p->bInTxn && p->rcDead ) return p->rcDead;
  eBuf = pgOpLookup(p, pKey, nKey, &pOp, &rc);
  if( rc!=SQLITE_OK ) return rc;
  if( eBuf==2 ) return SQLITE_OK;
  if( eBuf==1 ){
    int nTake = pOp->nVal>iOff ? pOp->nVal-iOff : 0;
    if( nTake>n ) nTake = n;
    if( nTake>0 ) memcpy(pOut, pOp->pVal+iOff, nTake);
    *pnGot = nTake;
    return SQLITE_OK;
  }
  if( p->bInTxn ){
    /* the second range read of one chunked value in a transaction reads
    ** the chunk and those after it whole, and later ones come from them */
    PgRaRow *pRow = pgRaFind(p, pKey, nKey);
    if( pRow==0 && pgRaSequential(p, pKey, nKey) ){
      rc = pgRaFetch(p, pKey, nKey);
      if( rc!=SQLITE_OK ) return rc;
      pRow = pgRaFind(p, pKey, nKey);
      if( pRow==0 ) return SQLITE_OK;        /* no such key */
    }
    if( pRow ){
      int nTake = pRow->nVal>iOff ? pRow->nVal-iOff : 0;
      if( nTake>n ) nTake = n;
      if( nTake>0 ) memcpy(pOut, pRow->pVal+iOff, nTake);
      *pnGot = nTake;
      return SQLITE_OK;
    }
  }else if( (rc = pgLive(p))!=SQLITE_OK ){
    return rc;
  }
  /* int4 parameters in binary: big-endian */
  aOff[0] = (unsigned char)((iOff+1)>>24); aOff[1] = (unsigned char)((iOff+1)>>16);
  aOff[2] = (unsigned char)((iOff+1)>>8); aOff[3] = (unsigned char)(iOff+1);
  aLen[0] = (unsigned char)(n>>24); aLen[1] = (unsigned char)(n>>16);
  aLen[2] = (unsigned char)(n>>8); aLen[3] = (unsigned char)n;
  az[0] = pKey; an[0] = nKey; af[0] = 1;
  az[1] = (const char*)aOff; an[1] = 4; af[1] = 1;
  az[2] = (const char*)aLen; an[2] = 4; af[2] = 1;
  rc = pgRun(p, PS_RANGE, 3, az, an, af, &r, "range read");
  if( rc==SQLITE_OK && PQntuples(r)>0 ){
    int nGot = PQgetlength(r, 0, 0);
    if( nGot>n ) nGot = n;
    if( nGot>0 ) memcpy(pOut, PQgetvalue(r, 0, 0), nGot);
    *pnGot = nGot;
  }
  PQclear(r);
  return rc;
}

static int pgScan(Store *pStore, const void *pLo, int nLo, const void *pHi,
                  int nHi, int flags, int nLimit, StoreRowFn xRow, void *pArg){
  StorePg *p = (StorePg*)pStore;
  int bRev = (flags & STORE_SCAN_REVERSE)!=0;
  unsigned char *aLast = 0;          /* the last key of the previous page */
  int nLast = 0, bFirst = 1, rc;
  int64_t nLeft = nLimit<0 ? -1 : nLimit;
  rc = pgBeforeRead(p);
  if( rc!=SQLITE_OK ) return rc;
  while( nLeft!=0 ){
    const char *az[3]; int an[3], af[3];
    char zLim[24];
    PGresult *r = 0;
    int i, nRow, eStmt, nPage = PG_SCAN_PAGE, bStop = 0;
    if( nLeft>0 && nLeft<nPage ) nPage = (int)nLeft;
    sqlite3_snprintf(sizeof(zLim), zLim, "%d", nPage);
    az[2] = zLim; an[2] = 0; af[2] = 0;
    if( bRev ){
      az[0] = pLo; an[0] = nLo; af[0] = 1;
      if( !bFirst ){ az[1] = (const char*)aLast; an[1] = nLast; af[1] = 1; }
      else{ az[1] = pHi; an[1] = nHi; af[1] = 1; }
      eStmt = (bFirst && nHi==0) ? PS_SCANR_OPEN : PS_SCANR;
    }else{
      if( !bFirst ){ az[0] = (const char*)aLast; an[0] = nLast; af[0] = 1; }
      else{ az[0] = pLo; an[0] = nLo; af[0] = 1; }
      az[1] = pHi; an[1] = nHi; af[1] = 1;
      if( bFirst ) eStmt = nHi>0 ? PS_SCANF : PS_SCANF_OPEN;
      else eStmt = nHi>0 ? PS_SCANFX : PS_SCANFX_OPEN;
    }
    if( az[0]==0 ) az[0] = "";
    if( eStmt==PS_SCANF_OPEN || eStmt==PS_SCANFX_OPEN || eStmt==PS_SCANR_OPEN ){
      az[1] = az[2]; an[1] = an[2]; af[1] = af[2];
    }
    rc = pgRun(p, eStmt, 3 - (eStmt==PS_SCANF_OPEN || eStmt==PS_SCANFX_OPEN
                              || eStmt==PS_SCANR_OPEN),
               az, an, af, &r, "scan");
    if( rc!=SQLITE_OK ) break;
    nRow = PQntuples(r);
    for(i=0; i<nRow; i++){
      if( xRow(pArg, (const unsigned char*)PQgetvalue(r, i, 0),
               PQgetlength(r, i, 0), (const unsigned char*)PQgetvalue(r, i, 1),
               PQgetlength(r, i, 1)) ){
        bStop = 1;
        break;
      }
    }
    if( !bStop && nRow==nPage ){
      int n = PQgetlength(r, nRow-1, 0);
      unsigned char *a = sqlite3_realloc64(aLast, n>0 ? n : 1);
      if( a==0 ){ PQclear(r); rc = SQLITE_NOMEM; break; }
      aLast = a;
      nLast = n;
      memcpy(aLast, PQgetvalue(r, nRow-1, 0), n);
    }
    PQclear(r);
    if( bStop || nRow<nPage ) break;
    if( nLeft>0 ) nLeft -= nRow;
    bFirst = 0;
    if( bRev && nLast==0 ) break;
  }
  sqlite3_free(aLast);
  return rc;
}

static int pgCheckWritable(StorePg *p){
  if( p->bReadOnly ){
    pgSetErr(p, sqlite3_mprintf("store: %s is open read-only", p->zShow));
    return SQLITE_READONLY;
  }
  if( pgIsStandby(p) ) return pgStandbyErr(p);
  return SQLITE_OK;
}

static int pgPut(Store *pStore, const void *pKey, int nKey,
                 const void *pVal, int nVal){
  StorePg *p = (StorePg*)pStore;
  int rc = pgCheckWritable(p);
  if( rc ) return rc;
  if( nVal>p->nMaxValue ){
    pgSetErr(p, sqlite3_mprintf("store: value of %d bytes exceeds the limit"
                                " of %d", nVal, p->nMaxValue));
    return SQLITE_TOOBIG;
  }
  if( p->bInTxn ){
    if( p->rcDead ) return p->rcDead;
    if( !p->bWriteTxn ) return SQLITE_READONLY;
    return pgOpAdd(p, PS_PUT, pKey, nKey, pVal ? pVal : "", nVal);
  }
  return pgAutoWrite(p, PS_PUT, pKey, nKey, pVal ? pVal : "", nVal, "put");
}

static int pgClear(Store *pStore, const void *pKey, int nKey){
  StorePg *p = (StorePg*)pStore;
  int rc = pgCheckWritable(p);
  if( rc ) return rc;
  if( p->bInTxn ){
    if( p->rcDead ) return p->rcDead;
    if( !p->bWriteTxn ) return SQLITE_READONLY;
    return pgOpAdd(p, PS_DEL, pKey, nKey, 0, 0);
  }
  return pgAutoWrite(p, PS_DEL, pKey, nKey, 0, 0, "delete");
}

static int pgClearRange(Store *pStore, const void *pLo, int nLo,
                        const void *pHi, int nHi){
  StorePg *p = (StorePg*)pStore;
  int e = nHi>0 ? PS_DELRANGE : PS_DELOPEN;
  int rc = pgCheckWritable(p);
  if( rc ) return rc;
  if( p->bInTxn ){
    if( p->rcDead ) return p->rcDead;
    if( !p->bWriteTxn ) return SQLITE_READONLY;
    return pgOpAdd(p, e, pLo, nLo, pHi, nHi);
  }
  return pgAutoWrite(p, e, pLo ? pLo : "", nLo, nHi>0 ? pHi : 0, nHi,
                     "delete range");
}

static int pgAdd(Store *pStore, const void *pKey, int nKey, int64_t iDelta,
                 int64_t *piNew){
  StorePg *p = (StorePg*)pStore;
  void *pOld = 0;
  int nOld = 0, rc = SQLITE_OK;
  unsigned char a[8];
  int bOwn = !p->bInTxn;
  uint64_t v = 0;
  if( bOwn ) rc = pgBegin(pStore, 1);
  if( rc==SQLITE_OK ) rc = pgGet(pStore, pKey, nKey, &pOld, &nOld);
  if( rc==SQLITE_OK && pOld && nOld!=8 ){
    pgSetErr(p, sqlite3_mprintf("store: counter value has %d bytes, not 8",
                                nOld));
    rc = SQLITE_CORRUPT;
  }
  if( rc==SQLITE_OK ){
    if( pOld ) v = bytes_get64le((const unsigned char*)pOld);
    v += (uint64_t)iDelta;
    bytes_put64le(a, v);
    rc = pgPut(pStore, pKey, nKey, a, 8);
  }
  sqlite3_free(pOld);
  if( bOwn ) rc = (rc==SQLITE_OK) ? pgCommit(pStore) : (pgRollback(pStore), rc);
  if( rc==SQLITE_OK && piNew ) *piNew = (int64_t)v;
  return rc;
}

static int pgMaxValue(Store *pStore){
  return ((StorePg*)pStore)->nMaxValue;
}

static const char *pgErrMsg(Store *pStore){
  StorePg *p = (StorePg*)pStore;
  return p->zErr ? p->zErr : "";
}

/* pg_total_relation_size of the two tables (with indexes and TOAST). */
static int pgPhysicalBytes(Store *pStore, int64_t *pnByte){
  StorePg *p = (StorePg*)pStore;
  char *zSql;
  PGresult *r;
  int rc = p->bInTxn ? pgBeforeRead(p) : pgLive(p);
  *pnByte = 0;
  if( rc==SQLITE_OK ) rc = pgBeginNow(p);
  if( rc!=SQLITE_OK ) return rc;
  zSql = sqlite3_mprintf("SELECT pg_total_relation_size('%q.depot_kv')"
      " + pg_total_relation_size('%q.depot_store_meta')", p->zSchema,
      p->zSchema);
  if( zSql==0 ) return SQLITE_NOMEM;
  r = PQexec(p->pConn, zSql);
  pgTrip(p);
  sqlite3_free(zSql);
  if( r && PQresultStatus(r)==PGRES_TUPLES_OK && PQntuples(r)==1 ){
    *pnByte = strtoll(PQgetvalue(r, 0, 0), 0, 10);
  }else{
    rc = pgResultErr(p, r, "size");
  }
  PQclear(r);
  return rc;
}

/* VACUUM of depot_kv: its free space goes to reuse, trailing empty pages
** back to the file system.  (VACUUM FULL, which would give all of it
** back, takes a lock that stops every reader: left to the DBA.) */
static int pgMaintain(Store *pStore, int eOp){
  StorePg *p = (StorePg*)pStore;
  char *zSql;
  int rc;
  (void)eOp;
  if( p->bInTxn ) return SQLITE_MISUSE;
  if( p->bReadOnly ) return SQLITE_OK;
  rc = pgLive(p);
  if( rc!=SQLITE_OK ) return rc;
  zSql = sqlite3_mprintf("VACUUM %s.depot_kv", p->zSchema);
  if( zSql==0 ) return SQLITE_NOMEM;
  rc = pgExec(p, zSql, "vacuum");
  sqlite3_free(zSql);
  return rc;
}

/* ---- writer locks ---- */

static int64_t pgLockKey(StorePg *p, const void *pKey, int nKey){
  return (int64_t)pgHash(p->zSchema, (int)strlen(p->zSchema), pKey, nKey);
}

/* pg_try_advisory_lock (eStmt PS_WLOCK) or pg_advisory_unlock of iKey;
** *pbGot whether it returned true. */
static int pgLockCall(StorePg *p, int eStmt, int64_t iKey, int *pbGot){
  char zKey[24];
  const char *az[1];
  PGresult *r = 0;
  int rc;
  *pbGot = 0;
  rc = pgBeforeRead(p);
  if( rc!=SQLITE_OK ) return rc;
  sqlite3_snprintf(sizeof(zKey), zKey, "%lld", (long long)iKey);
  az[0] = zKey;
  rc = pgRun(p, eStmt, 1, az, 0, 0, &r, "writer lock");
  if( rc==SQLITE_OK ){
    *pbGot = PQntuples(r)==1 && PQgetlength(r, 0, 0)==1
          && PQgetvalue(r, 0, 0)[0]==1;
  }
  PQclear(r);
  return rc;
}

static PgLock **pgFindLock(StorePg *p, int64_t iKey){
  PgLock **pp;
  for(pp=&p->pLock; *pp && (*pp)->iKey!=iKey; pp=&(*pp)->pNext){}
  return pp;
}

static int pgWriterLock(Store *pStore, const void *pKey, int nKey){
  StorePg *p = (StorePg*)pStore;
  int64_t iKey = pgLockKey(p, pKey, nKey);
  PgLock *pL;
  int rc, bGot = 0;
  if( p->bReadOnly ) return SQLITE_READONLY;
  if( *pgFindLock(p, iKey) ) return SQLITE_OK;
  if( !p->bInTxn ) pgLive(p);         /* a failure comes again below */
  if( pgIsStandby(p) ) return pgStandbyErr(p);
  rc = pgLockCall(p, PS_WLOCK, iKey, &bGot);
  if( rc==SQLITE_BUSY || (rc&0xff)==SQLITE_IOERR ) rc = SQLITE_IOERR_LOCK;
  if( rc!=SQLITE_OK ) return rc;
  if( !bGot ) return SQLITE_BUSY;
  pL = sqlite3_malloc64(sizeof(*pL));
  if( pL==0 ){
    pgLockCall(p, PS_WUNLOCK, iKey, &bGot);
    return SQLITE_NOMEM;
  }
  pL->iKey = iKey;
  pL->pNext = p->pLock;
  p->pLock = pL;
  return SQLITE_OK;
}

static int pgWriterUnlock(Store *pStore, const void *pKey, int nKey){
  StorePg *p = (StorePg*)pStore;
  int64_t iKey = pgLockKey(p, pKey, nKey);
  PgLock **pp = pgFindLock(p, iKey), *pL = *pp;
  int bGot;
  if( pL==0 ) return SQLITE_OK;
  *pp = pL->pNext;
  /* a lost session released it already */
  if( p->pConn && PQstatus(p->pConn)==CONNECTION_OK && p->bPrepared ){
    if( p->bInTxn && p->rcDead ){
      pL->pNext = p->pUnlock;
      p->pUnlock = pL;
      return SQLITE_OK;
    }
    pgLockCall(p, PS_WUNLOCK, iKey, &bGot);
  }
  sqlite3_free(pL);
  return SQLITE_OK;
}

static int pgWriterHeld(Store *pStore, const void *pKey, int nKey,
                        int *pbHeld){
  StorePg *p = (StorePg*)pStore;
  int64_t iKey = pgLockKey(p, pKey, nKey);
  int rc, bGot = 0, bFree;
  *pbHeld = 0;
  if( *pgFindLock(p, iKey) ) return SQLITE_OK;
  rc = pgLockCall(p, PS_WLOCK, iKey, &bGot);
  if( rc!=SQLITE_OK ) return rc;
  if( bGot ) return pgLockCall(p, PS_WUNLOCK, iKey, &bFree);
  *pbHeld = 1;
  return SQLITE_OK;
}

static void pgClose(Store *pStore){
  StorePg *p = (StorePg*)pStore;
  PgLock *pL;
  pgOpsClear(p);
  sqlite3_free(p->aOp);
  pgRaClear(p);
  sqlite3_free(p->aRa);
  /* the server ends the session a moment after PQfinish(): its writer
  ** locks go now, so that the next holder need not race that */
  if( (p->pLock || p->pUnlock) && p->pConn
   && PQstatus(p->pConn)==CONNECTION_OK ){
    if( PQtransactionStatus(p->pConn)!=PQTRANS_IDLE ){
      PQclear(PQexec(p->pConn, "ROLLBACK"));
    }
    PQclear(PQexec(p->pConn, "SELECT pg_advisory_unlock_all()"));
  }
  while( (pL = p->pLock)!=0 ){
    p->pLock = pL->pNext;
    sqlite3_free(pL);
  }
  while( (pL = p->pUnlock)!=0 ){
    p->pUnlock = pL->pNext;
    sqlite3_free(pL);
  }
  if( p->pConn ) PQfinish(p->pConn);   /* ends the session: its locks and
                                       ** any open transaction go */
  sqlite3_free(p->zConnUri);
  sqlite3_free(p->zShow);
  sqlite3_free(p->zSchema);
  sqlite3_free(p->zErr);
  sqlite3_free(p);
}

static int pgCommitLost(Store *pStore){
  return ((StorePg*)pStore)->eLost;
}

static const StoreMethods storePgMethods = {
  4, pgClose, pgBegin, pgCommit, pgRollback, pgGet, pgScan, pgPut, pgClear,
  pgClearRange, pgAdd, pgMaxValue, pgErrMsg, pgGetRange, pgMaintain,
  pgPhysicalBytes, pgWriterLock, pgWriterUnlock, pgWriterHeld, 0, 0,
  pgCommitLost
};

/* ---- replication ---- */

/* The role and replay lag of the server (vfs/store/store.h).  The lag:
** 0 on a primary, and on a standby whose WAL receiver runs and that has
** replayed all the WAL it received; else the time since the commit it
** replayed last (a standby behind, or cut off from its primary), -1 when
** it has replayed none. */
#define PG_REPLICA_SQL \
  "SELECT pg_is_in_recovery(), CASE WHEN NOT pg_is_in_recovery() THEN 0" \
  " WHEN EXISTS(SELECT 1 FROM pg_stat_wal_receiver)" \
  "  AND pg_last_wal_receive_lsn()<=pg_last_wal_replay_lsn() THEN 0" \
  " ELSE coalesce(greatest(0, extract(epoch FROM clock_timestamp()" \
  "  - pg_last_xact_replay_timestamp()))::float8, -1) END"

int store_pg_replica(Store *pStore, int *pbStandby, double *prLag){
  StorePg *p = (StorePg*)pStore;
  PGresult *r;
  int rc;
  *pbStandby = 0;
  *prLag = 0.0;
  if( pStore==0 || pStore->pMethods!=&storePgMethods ) return SQLITE_OK;
  if( p->bInTxn ){
    if( p->rcDead ) return p->rcDead;
  }else if( (rc = pgLive(p))!=SQLITE_OK ){
    return rc;
  }
  /* a pipeline of buffered writes or a pending BEGIN is not disturbed:
  ** PQexec of a query that reads no table, on the idle connection */
  r = PQexec(p->pConn, PG_REPLICA_SQL);
  pgTrip(p);
  if( r && PQresultStatus(r)==PGRES_TUPLES_OK && PQntuples(r)==1 ){
    *pbStandby = PQgetvalue(r, 0, 0)[0]=='t';
    *prLag = strtod(PQgetvalue(r, 0, 1), 0);
    rc = SQLITE_OK;
  }else{
    rc = pgResultErr(p, r, "replication state");
  }
  PQclear(r);
  return rc;
}

int store_pg_info(Store *pStore, int bRefresh, StorePgInfo *pInfo){
  StorePg *p = (StorePg*)pStore;
  int rc = SQLITE_OK;
  memset(pInfo, 0, sizeof(*pInfo));
  if( pStore==0 || pStore->pMethods!=&storePgMethods ) return SQLITE_NOTFOUND;
  if( bRefresh && !p->bInTxn ){
    PGresult *r;
    rc = pgLive(p);
    if( rc!=SQLITE_OK ) return rc;
    r = PQexec(p->pConn, "SELECT current_setting('synchronous_commit'),"
                         PG_INFO_COLS);
    pgTrip(p);
    if( r && PQresultStatus(r)==PGRES_TUPLES_OK && PQntuples(r)==1
     && PQnfields(r)==7 ){
      pgInfoRead(p, r);
    }else{
      rc = pgResultErr(p, r, "replication state");
    }
    PQclear(r);
  }
  *pInfo = p->info;
  return rc;
}

/* ---- open ---- */

/* Splits the backend's own parameters off zUri: the rest, with
** connect_timeout added when absent, goes to p->zConnUri. */
static int pgParseUri(StorePg *p, const char *zUri, char **pzSchema,
                      char **pzErr){
  const char *zQ = strchr(zUri, '?');
  sqlite3_str *s = sqlite3_str_new(0);
  int bTimeout = 0, nSep = 0, bTsa = 0;
  PQconninfoOption *aOpt, *o;
  char *zCopy, *z, *zNext;
  *pzSchema = 0;
  sqlite3_str_append(s, zUri, zQ ? (int)(zQ-zUri) : (int)strlen(zUri));
  zCopy = sqlite3_mprintf("%s", zQ ? zQ+1 : "");
  if( zCopy==0 ) return SQLITE_NOMEM;
  for(z=zCopy; z && *z; z=zNext){
    char *zEq;
    if( (zNext = strchr(z, '&'))!=0 ) *zNext++ = 0;
    zEq = strchr(z, '=');
    if( zEq && strncmp(z, "schema=", 7)==0 ){
      sqlite3_free(*pzSchema);
      *pzSchema = sqlite3_mprintf("%s", zEq+1);
    }else if( zEq && (strncmp(z, "chunk_bytes=", 12)==0
                      || strncmp(z, "busy_ms=", 8)==0
                      || strncmp(z, "retries=", 8)==0
                      || strncmp(z, "failover_ms=", 12)==0
                      || strncmp(z, "require_sync_standby=", 21)==0) ){
      char *zEnd = 0;
      long v = strtol(zEq+1, &zEnd, 10);
      int bOk = zEq[1] && *zEnd==0;
      if( z[0]=='c' ){
        bOk = bOk && v>=1024 && v<=1073741823;
        if( bOk ) p->nMaxValue = (int)v;
      }else if( z[0]=='b' ){
        bOk = bOk && v>=0 && v<=86400000;
        if( bOk ) p->nBusyMs = (int)v;
      }else if( z[0]=='f' ){
        bOk = bOk && v>=0 && v<=3600000;
        if( bOk ) p->nFailoverMs = (int)v;
      }else if( z[2]=='q' ){
        bOk = bOk && (v==0 || v==1);
        if( bOk ) p->bRequireSync = (int)v;
      }else{
        bOk = bOk && v>=0 && v<=1000;
        if( bOk ) p->nRetry = (int)v;
      }
      if( !bOk ){
        *pzErr = sqlite3_mprintf("store: %s: bad value %s (chunk_bytes:"
            " 1024..1073741823, busy_ms: 0..86400000, retries: 0..1000,"
            " failover_ms: 0..3600000, require_sync_standby: 0 or 1)",
            p->zShow, z);
        sqlite3_free(zCopy);
        sqlite3_free(sqlite3_str_finish(s));
        return SQLITE_CANTOPEN;
      }
    }else{
      if( strncmp(z, "connect_timeout=", 16)==0 ) bTimeout = 1;
      if( strncmp(z, "target_session_attrs=", 21)==0 ) bTsa = 1;
      sqlite3_str_appendchar(s, 1, nSep++ ? '&' : '?');
      sqlite3_str_appendall(s, z);
    }
  }
  if( !bTimeout ){
    sqlite3_str_appendall(s, nSep++ ? "&" : "?");
    sqlite3_str_appendall(s, "connect_timeout=5");
  }
  sqlite3_free(zCopy);
  p->zConnUri = sqlite3_str_finish(s);
  if( p->zConnUri==0 ) return SQLITE_NOMEM;
  /* the hosts (libpq's list, of the URI's authority or of host=) */
  p->nHost = 1;
  aOpt = PQconninfoParse(p->zConnUri, 0);
  for(o=aOpt; o && o->keyword; o++){
    if( strcmp(o->keyword, "host")==0 && o->val ){
      const char *zC;
      for(zC=o->val; (zC = strchr(zC, ','))!=0; zC++) p->nHost++;
    }
  }
  if( aOpt ) PQconninfoFree(aOpt);
  if( p->nHost>1 && !bTsa && !p->bReadOnly ){
    char *zNew = sqlite3_mprintf("%s&target_session_attrs=read-write",
                                 p->zConnUri);
    if( zNew==0 ) return SQLITE_NOMEM;
    sqlite3_free(p->zConnUri);
    p->zConnUri = zNew;
  }
  return SQLITE_OK;
}

/* zName as a quoted SQL identifier (sqlite3_malloc'd). */
static char *pgQuoteIdent(const char *zName){
  sqlite3_str *s = sqlite3_str_new(0);
  const char *z;
  sqlite3_str_appendchar(s, 1, '"');
  for(z=zName; *z; z++){
    sqlite3_str_appendchar(s, *z=='"' ? 2 : 1, *z);
  }
  sqlite3_str_appendchar(s, 1, '"');
  return sqlite3_str_finish(s);
}

/* Makes the schema (bCreate) and checks the format row. */
static int pgSetupSchema(StorePg *p, const char *zSchemaRaw, int bCreate,
                         char **pzErr){
  PGresult *r;
  char *zSql;
  int rc, nFormat = -1, bThere;
  zSql = sqlite3_mprintf("SELECT to_regclass('%q.depot_kv') IS NOT NULL,"
      " to_regclass('%q.depot_store_meta') IS NOT NULL", p->zSchema,
      p->zSchema);
  if( zSql==0 ) return SQLITE_NOMEM;
  r = PQexec(p->pConn, zSql);
  pgTrip(p);
  sqlite3_free(zSql);
  if( r==0 || PQresultStatus(r)!=PGRES_TUPLES_OK ){
    rc = pgResultErr(p, r, "schema check");
    PQclear(r);
    *pzErr = sqlite3_mprintf("%s", p->zErr);
    return rc;
  }
  bThere = PQgetvalue(r, 0, 0)[0]=='t' && PQgetvalue(r, 0, 1)[0]=='t';
  PQclear(r);
  if( !bThere ){
    if( !bCreate || p->bReadOnly ){
      *pzErr = sqlite3_mprintf("store: %s has no depot store in schema %s",
                               p->zShow, zSchemaRaw);
      return SQLITE_CANTOPEN;
    }
    zSql = sqlite3_mprintf("BEGIN; SELECT pg_advisory_xact_lock(%d,%d);"
        " CREATE SCHEMA IF NOT EXISTS %s;"
        " CREATE TABLE IF NOT EXISTS %s.depot_kv(key bytea PRIMARY KEY,"
        "   value bytea NOT NULL);"
        " ALTER TABLE %s.depot_kv ALTER COLUMN value SET STORAGE EXTERNAL;"
        " CREATE TABLE IF NOT EXISTS %s.depot_store_meta(name text PRIMARY"
        "   KEY, value bigint NOT NULL);"
        " INSERT INTO %s.depot_store_meta VALUES('format', %d)"
        "   ON CONFLICT DO NOTHING;"
        " COMMIT", p->aTxnLock[0], p->aTxnLock[1], p->zSchema, p->zSchema,
        p->zSchema, p->zSchema, p->zSchema, PG_FORMAT);
    if( zSql==0 ) return SQLITE_NOMEM;
    rc = pgExec(p, zSql, "schema setup");
    sqlite3_free(zSql);
    if( rc!=SQLITE_OK ){
      if( PQstatus(p->pConn)==CONNECTION_OK ) pgExec(p, "ROLLBACK", "rollback");
      *pzErr = sqlite3_mprintf("%s", p->zErr);
      return rc;
    }
  }
  zSql = sqlite3_mprintf("SELECT value FROM %s.depot_store_meta WHERE"
                         " name='format'", p->zSchema);
  if( zSql==0 ) return SQLITE_NOMEM;
  r = PQexec(p->pConn, zSql);
  pgTrip(p);
  sqlite3_free(zSql);
  if( r==0 || PQresultStatus(r)!=PGRES_TUPLES_OK ){
    /* the question was not answered (a lost connection, no privilege):
    ** say why, not that the format is unknown */
    rc = pgResultErr(p, r, "format check");
    PQclear(r);
    *pzErr = sqlite3_mprintf("%s", p->zErr);
    return rc;
  }
  if( PQntuples(r)==1 ) nFormat = atoi(PQgetvalue(r, 0, 0));
  PQclear(r);
  if( nFormat!=PG_FORMAT ){
    *pzErr = sqlite3_mprintf("store: %s schema %s: store format %d, this"
        " build reads format %d", p->zShow, zSchemaRaw, nFormat, PG_FORMAT);
    return SQLITE_CANTOPEN;
  }
  return SQLITE_OK;
}

int store_pg_open(const char *zUri, const StoreSqliteConfig *pCfg,
                  Store **ppStore, char **pzErr){
  StorePg *p;
  char *zSchema = 0, *zErr = 0;
  int rc;
  uint64_t h;
  *ppStore = 0;
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->base.pMethods = &storePgMethods;
  p->nMaxValue = pCfg->nMaxValue>0 ? pCfg->nMaxValue : 65536;
  p->nBusyMs = pCfg->nBusyMs>0 ? pCfg->nBusyMs : 10000;
  p->nRetry = 3;
  p->nFailoverMs = 30000;
  p->iSync = pCfg->iSynchronous;
  p->bReadOnly = pCfg->bReadOnly || pCfg->bImmutable || pCfg->bInspect;
  p->zShow = store_pg_redact(zUri);
  if( p->zShow==0 ){ pgClose(&p->base); return SQLITE_NOMEM; }
  rc = pgParseUri(p, zUri, &zSchema, &zErr);
  if( rc==SQLITE_OK ){
    const char *zRaw = zSchema && zSchema[0] ? zSchema : "depot";
    h = pgHash(zRaw, (int)strlen(zRaw), "", 0);
    p->aTxnLock[0] = 0x64707374;                 /* "dpst" */
    p->aTxnLock[1] = (int32_t)(uint32_t)h;
    p->zSchema = pgQuoteIdent(zRaw);
    rc = p->zSchema ? pgConnect(p) : SQLITE_NOMEM;
    if( rc!=SQLITE_OK ){
      zErr = sqlite3_mprintf("%s", p->zErr ? p->zErr : "out of memory");
      if( rc!=SQLITE_NOMEM ) rc = SQLITE_CANTOPEN;
    }else{
      /* the statements name the tables: made once they exist */
      rc = pgSetupSchema(p, zRaw, pCfg->bCreate, &zErr);
      if( rc==SQLITE_OK ){
        p->bSchemaReady = 1;
        rc = pgPrepare(p);
        if( rc ) zErr = sqlite3_mprintf("%s", p->zErr);
      }
    }
  }
  sqlite3_free(zSchema);
  if( rc!=SQLITE_OK ){
    if( pzErr ){
      *pzErr = zErr;
    }else{
      sqlite3_free(zErr);
    }
    pgClose(&p->base);
    return rc;
  }
  *ppStore = &p->base;
  return SQLITE_OK;
}

#endif /* DEPOT_HAVE_PG */
