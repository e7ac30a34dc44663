/*
** check_kvconc.c -- the "kvconc" suite: connections of one process on one
** database file writing its KV tables at the same time.  The temp
** declarations (ext/kv_decl.c) that take no lock of the database file, the
** conflict matrix between two connections (write/write, read/write, the
** key-version protocol) with the engine's errors and never "database is
** locked", transactions that mix KV and ordinary tables, DROP TABLE of a
** temp declaration, read-only connections, and a bank-invariant stress of
** eight connections in eight threads (run it under ThreadSanitizer too).
** No connection here sets a busy timeout: a wait on the database file's
** lock would show as SQLITE_BUSY "database is locked".
*/
#include "config.h"
#include "tests/check/harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The KV table types the matrix runs on (loop index). */
static const char *const azType[] = { "kv_btree", "kv_log", "kv_memory" };

/* A fresh database file app.db in a new directory, WAL, with KV table acct
** (type azType[iType]; keys 1..nKey, value 100) and ordinary table plain;
** *pzDb the file's path.  Returns the connection that made them, which the
** test closes last: it keeps the store open, as kv_memory rows live only
** while their store is open. */
static sqlite3 *conc_setup(const char *zTag, int iType, int nKey,
                           char **pzDb){
  char *zDir = th_tmpdir(zTag);
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  char *z;
  int i;
  th_exec(db, "PRAGMA journal_mode=WAL");
  z = sqlite3_mprintf("CREATE VIRTUAL TABLE acct USING %s%s", azType[iType],
                      iType==2 ? "(persistence=1)" : "");
  th_exec(db, z);
  sqlite3_free(z);
  th_exec(db, "CREATE TABLE plain(k PRIMARY KEY, v) WITHOUT ROWID; BEGIN");
  for(i=1; i<=nKey; i++){
    z = sqlite3_mprintf("INSERT INTO acct VALUES(%d, 100)", i);
    th_exec(db, z);
    sqlite3_free(z);
  }
  th_exec(db, "COMMIT");
  sqlite3_free(zDir);
  *pzDb = zDb;
  return db;
}

/* The text of the first row of zSql on db is zWant. */
static void conc_text_eq(sqlite3 *db, const char *zSql, const char *zWant){
  char *z = th_text(db, zSql);
  ck_assert_str_eq(z, zWant);
  sqlite3_free(z);
}

/* Run zSql, expecting rc (extended code) and, if zLike, a message holding
** it; a message of "database is locked" fails the test in any case. */
static void conc_expect(sqlite3 *db, const char *zSql, int rc,
                        const char *zLike){
  char *zErr = 0;
  int r = th_try(db, zSql, &zErr);
  if( r!=SQLITE_OK ) r = sqlite3_extended_errcode(db);
  ck_assert_msg(zErr==0 || strstr(zErr, "database is locked")==0,
                "%s: %s", zSql, zErr);
  ck_assert_msg(r==rc, "%s: rc=%d (want %d) %s", zSql, r, rc,
                zErr ? zErr : "");
  if( zLike ){
    ck_assert_msg(zErr && strstr(zErr, zLike), "%s: '%s' lacks '%s'", zSql,
                  zErr ? zErr : "", zLike);
  }
  sqlite3_free(zErr);
}

/* p1 of the first Transaction opcode of zSql: the schema it locks. */
static int conc_txn_schema(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pStmt = 0;
  int iDb = -1;
  char *z;
  z = sqlite3_mprintf("EXPLAIN %s", zSql);
  ck_assert_int_eq(sqlite3_prepare_v2(db, z, -1, &pStmt, 0), SQLITE_OK);
  while( sqlite3_step(pStmt)==SQLITE_ROW ){
    if( strcmp((const char*)sqlite3_column_text(pStmt, 1), "Transaction")==0 ){
      iDb = sqlite3_column_int(pStmt, 2);
      break;
    }
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(z);
  return iDb;
}

/* ----------------------------------------------------------- declaring --- */

/* Loading the extension into a connection on a file declares its KV tables
** in temp; reads and writes of acct then lock temp (schema 1), not main. */
START_TEST(test_kvconc_tables_are_declared_in_temp_at_open){
  char *zDb;
  sqlite3 *db;
  sqlite3 *pKeep = conc_setup("conc-open", _i, 2, &zDb);
  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_temp_schema "
                              "WHERE name='acct'"), 1);
  ck_assert_int_eq(conc_txn_schema(db, "INSERT INTO acct VALUES(9, 9)"), 1);
  ck_assert_int_eq(conc_txn_schema(db, "SELECT * FROM acct WHERE key=1"), 1);
  ck_assert_int_eq(conc_txn_schema(db, "INSERT INTO main.acct VALUES(9, 9)"),
                   0);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key=2"), 100);
  sqlite3_close(db);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* A table created after the connection opened is declared in temp at its
** first use, and a statement prepared before that moves to temp: it then
** writes while another connection holds the database file's write lock. */
START_TEST(test_kvconc_first_use_declares_and_moves_prepared_statements){
  char *zDb;
  sqlite3 *a, *b;
  sqlite3_stmt *pIns = 0;
  sqlite3 *pKeep = conc_setup("conc-first", 0, 1, &zDb);
  a = th_open(zDb);
  b = th_open(zDb);
  th_exec(a, "CREATE VIRTUAL TABLE late USING kv_btree");
  ck_assert_int_eq(sqlite3_prepare_v2(a, "INSERT OR REPLACE INTO late "
      "VALUES(?1, 1)", -1, &pIns, 0), SQLITE_OK);
  sqlite3_bind_int(pIns, 1, 1);
  ck_assert_int_eq(sqlite3_step(pIns), SQLITE_DONE);   /* through main */
  sqlite3_reset(pIns);
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM sqlite_temp_schema "
                             "WHERE name='late'"), 1);
  th_exec(b, "BEGIN IMMEDIATE");                 /* b holds main's lock */
  sqlite3_bind_int(pIns, 1, 2);
  ck_assert_int_eq(sqlite3_step(pIns), SQLITE_DONE);   /* through temp */
  sqlite3_finalize(pIns);
  th_exec(b, "COMMIT");
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM late"), 2);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* kv_attach: 1 declared, 0 already, NULL for a NULL name, and its errors. */
START_TEST(test_kvconc_kv_attach_declares_and_reports){
  char *zDb, *zErr = 0;
  sqlite3 *db;
  sqlite3 *pKeep = conc_setup("conc-attach", 0, 1, &zDb);
  db = th_open(zDb);
  ck_assert_int_eq(th_int(db, "SELECT kv_attach('acct')"), 0);
  th_exec(db, "DROP TABLE temp.acct");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_temp_schema"), 0);
  ck_assert_int_eq(th_int(db, "SELECT kv_attach('acct')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_attach_all()"), 0);
  th_exec(db, "DROP TABLE acct");                  /* the temp one */
  ck_assert_int_eq(th_int(db, "SELECT kv_attach_all()"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_attach(NULL) IS NULL"), 1);
  conc_expect(db, "SELECT kv_attach('nosuch')", SQLITE_ERROR,
              "kv: no KV table nosuch in store");
  th_exec(db, "CREATE TEMP TABLE other(x)");
  th_exec(db, "CREATE VIRTUAL TABLE main.other USING kv_btree");
  conc_expect(db, "SELECT kv_attach('other')", SQLITE_ERROR,
              "kv: temp.other exists and is not the kv_btree table other");
  sqlite3_close(db);
  db = th_open(":memory:");
  ck_assert_int_eq(th_try(db, "SELECT kv_attach('acct')", &zErr),
                   SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(zErr, "needs a dir"));
  sqlite3_free(zErr);
  sqlite3_close(db);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* DROP TABLE of the temp declaration detaches this connection only: the
** table and its rows stay, for main.acct and for other connections.  DROP
** TABLE main.acct removes the KV table. */
START_TEST(test_kvconc_drop_of_temp_declaration_only_detaches){
  char *zDb;
  sqlite3 *a, *b;
  sqlite3 *pKeep = conc_setup("conc-drop", _i, 3, &zDb);
  a = th_open(zDb);
  b = th_open(zDb);
  th_exec(a, "DROP TABLE temp.acct");
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM acct"), 3);   /* main */
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM acct"), 3);   /* temp */
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM kv_tables "
                             "WHERE name='acct'"), 1);
  th_exec(b, "DROP TABLE acct");                     /* b's temp one */
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM acct"), 3);
  th_exec(a, "DROP TABLE main.acct");                /* removes it */
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM kv_tables "
                             "WHERE name='acct'"), 0);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* A read-only connection gets the temp declaration for its reads, and its
** writes are refused as they were through main. */
START_TEST(test_kvconc_read_only_connection_reads_and_cannot_write){
  char *zDb, *zUri;
  sqlite3 *db;
  sqlite3 *pKeep = conc_setup("conc-ro", 0, 2, &zDb);
  zUri = sqlite3_mprintf("file:%s?mode=ro", zDb);
  db = th_open(zUri);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_temp_schema "
                              "WHERE name='acct'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"), 200);
  conc_expect(db, "INSERT INTO acct VALUES(3, 1)", SQLITE_READONLY,
              "read-only connection");
  conc_expect(db, "INSERT INTO main.acct VALUES(3, 1)", SQLITE_READONLY, 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM acct"), 2);
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* ------------------------------------------------------ conflict matrix --- */

/* Two connections in overlapping transactions: disjoint keys both commit;
** the same key: the second COMMIT fails with the engine's conflict
** (SQLITE_BUSY_SNAPSHOT naming the key) and its transaction is gone. */
START_TEST(test_kvconc_write_write_conflicts_only_on_the_same_key){
  char *zDb;
  sqlite3 *a, *b;
  sqlite3 *pKeep = conc_setup("conc-ww", _i, 4, &zDb);
  a = th_open(zDb);
  b = th_open(zDb);
  th_exec(a, "BEGIN; UPDATE acct SET value=value-10 WHERE key=1");
  th_exec(b, "BEGIN; UPDATE acct SET value=value-20 WHERE key=2");
  th_exec(a, "UPDATE acct SET value=value+10 WHERE key=3");
  th_exec(b, "UPDATE acct SET value=value+20 WHERE key=4");
  conc_expect(a, "COMMIT", SQLITE_OK, 0);
  conc_expect(b, "COMMIT", SQLITE_OK, 0);
  conc_text_eq(b, "SELECT group_concat(value, ',') FROM acct",
               "90,80,110,120");
  th_exec(a, "BEGIN; UPDATE acct SET value=1 WHERE key=1");
  th_exec(b, "BEGIN; UPDATE acct SET value=2 WHERE key=1");
  conc_expect(a, "COMMIT", SQLITE_OK, 0);
  conc_expect(b, "COMMIT", SQLITE_BUSY_SNAPSHOT, "acct");
  ck_assert_int_eq(sqlite3_get_autocommit(b), 1);
  ck_assert_int_eq(th_int(b, "SELECT value FROM acct WHERE key=1"), 1);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* A key read inside a transaction and changed by another connection's
** commit fails the reader's COMMIT (its writes depended on it); a key read
** by nobody does not. */
START_TEST(test_kvconc_read_write_conflict_fails_the_reader){
  char *zDb;
  sqlite3 *a, *b;
  sqlite3 *pKeep = conc_setup("conc-rw", _i, 3, &zDb);
  a = th_open(zDb);
  b = th_open(zDb);
  th_exec(a, "BEGIN");
  ck_assert_int_eq(th_int(a, "SELECT value FROM acct WHERE key=1"), 100);
  conc_expect(b, "UPDATE acct SET value=50 WHERE key=1", SQLITE_OK, 0);
  ck_assert_int_eq(th_int(a, "SELECT value FROM acct WHERE key=1"), 100);
  th_exec(a, "UPDATE acct SET value=value+1 WHERE key=2");
  conc_expect(a, "COMMIT", SQLITE_BUSY_SNAPSHOT, "acct");
  ck_assert_int_eq(th_int(a, "SELECT value FROM acct WHERE key=2"), 100);
  th_exec(a, "BEGIN");
  ck_assert_int_eq(th_int(a, "SELECT value FROM acct WHERE key=3"), 100);
  conc_expect(b, "UPDATE acct SET value=50 WHERE key=1", SQLITE_OK, 0);
  th_exec(a, "UPDATE acct SET value=value+1 WHERE key=2");
  conc_expect(a, "COMMIT", SQLITE_OK, 0);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* The key-version protocol between the two connections: a version read by
** one is outdated by the other's SQL write, and its prepare names it. */
START_TEST(test_kvconc_version_protocol_sees_sql_writes_of_other_connection){
  char *zDb, *zVer;
  sqlite3 *a, *b;
  char *zSql;
  sqlite3 *pKeep = conc_setup("conc-ver", _i, 2, &zDb);
  a = th_open(zDb);
  b = th_open(zDb);
  zVer = th_text(a, "SELECT version FROM kv_query_with_version('acct', 1)");
  ck_assert_ptr_nonnull(zVer);
  conc_expect(b, "UPDATE acct SET value=7 WHERE key=1", SQLITE_OK, 0);
  th_exec(a, "SELECT kv_begin(), kv_put(1, 'acct', 2, 1)");
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(1, '[{\"table\":"
      "\"acct\",\"key\":1,\"version\":\"%s\"}]')", zVer);
  conc_expect(a, zSql, SQLITE_BUSY_SNAPSHOT, 0);
  sqlite3_free(zSql);
  th_exec(a, "SELECT kv_rollback(1)");
  sqlite3_free(zVer);
  zVer = th_text(a, "SELECT version FROM kv_query_with_version('acct', 1)");
  th_exec(a, "SELECT kv_begin(), kv_put(2, 'acct', 2, 1)");
  zSql = sqlite3_mprintf("SELECT kv_prepare_with_version(2, '[{\"table\":"
      "\"acct\",\"key\":1,\"version\":\"%s\"}]'), kv_commit_with_version(2)",
      zVer);
  conc_expect(a, zSql, SQLITE_OK, 0);
  ck_assert_int_eq(th_int(b, "SELECT value FROM acct WHERE key=2"), 1);
  sqlite3_free(zSql);
  sqlite3_free(zVer);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* Transactions that write KV and ordinary tables: the ordinary part takes
** the database file's write lock as ever (the second writer of "plain" is
** SQLITE_BUSY until the first commits), the KV part takes none; both parts
** commit or roll back together. */
START_TEST(test_kvconc_mixed_transactions_keep_ordinary_locking){
  char *zDb;
  sqlite3 *a, *b;
  sqlite3 *pKeep = conc_setup("conc-mix", 0, 2, &zDb);
  a = th_open(zDb);
  b = th_open(zDb);
  th_exec(a, "BEGIN; UPDATE acct SET value=1 WHERE key=1; "
             "INSERT INTO plain VALUES('a', 1)");
  th_exec(b, "BEGIN; UPDATE acct SET value=2 WHERE key=2");
  ck_assert_int_eq(th_try(b, "INSERT INTO plain VALUES('b', 2)", 0),
                   SQLITE_BUSY);          /* an ordinary table, as ever */
  th_exec(a, "COMMIT");
  th_exec(b, "INSERT INTO plain VALUES('b', 2); COMMIT");
  conc_text_eq(a, "SELECT group_concat(value, ',') FROM acct", "1,2");
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM plain"), 2);
  th_exec(b, "BEGIN; UPDATE acct SET value=3 WHERE key=2; "
             "INSERT INTO plain VALUES('c', 3); ROLLBACK");
  ck_assert_int_eq(th_int(a, "SELECT value FROM acct WHERE key=2"), 2);
  ck_assert_int_eq(th_int(a, "SELECT count(*) FROM plain"), 2);
  th_exec(a, "BEGIN; UPDATE acct SET value=4 WHERE key=2; "
             "INSERT INTO plain VALUES('d', 4)");
  th_exec(b, "UPDATE acct SET value=5 WHERE key=2");   /* b commits first */
  conc_expect(a, "COMMIT", SQLITE_BUSY_SNAPSHOT, "acct");
  ck_assert_int_eq(th_int(b, "SELECT count(*) FROM plain"), 2);
  ck_assert_int_eq(th_int(b, "SELECT value FROM acct WHERE key=2"), 5);
  sqlite3_close(a);
  sqlite3_close(b);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

/* ------------------------------------------------------- bank stress --- */

#define CONC_THREADS  8
#define CONC_ACCOUNTS 16

typedef struct ConcWorker ConcWorker;
struct ConcWorker {
  const char *zDb;
  int iSeed;
  int nTxn;                 /* transfers to commit */
  int nDone, nConflict;
  char zFail[200];          /* the first unexpected error, or empty */
};

/* One transfer: BEGIN, read two balances, write both, COMMIT.  Returns
** SQLITE_OK, SQLITE_BUSY_SNAPSHOT (a conflict: retry) or the error. */
static int concTransfer(sqlite3 *db, int iFrom, int iTo, int nAmt,
                        char *zFail){
  char *z = sqlite3_mprintf("BEGIN;"
      "UPDATE acct SET value=value-%d WHERE key=%d;"
      "UPDATE acct SET value=value+%d WHERE key=%d;"
      "COMMIT", nAmt, iFrom, nAmt, iTo);
  char *zErr = 0;
  int rc = sqlite3_exec(db, z, 0, 0, &zErr);
  if( rc!=SQLITE_OK ) rc = sqlite3_extended_errcode(db);
  if( rc!=SQLITE_OK && !sqlite3_get_autocommit(db) ){
    sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
  }
  if( rc!=SQLITE_OK && rc!=SQLITE_BUSY_SNAPSHOT && zFail[0]==0 ){
    snprintf(zFail, 200, "rc=%d %s", rc, zErr ? zErr : "");
  }
  sqlite3_free(zErr);
  sqlite3_free(z);
  return rc;
}

static void *concWorker(void *pArg){
  ConcWorker *w = (ConcWorker*)pArg;
  sqlite3 *db = 0;
  unsigned int s = (unsigned int)w->iSeed;
  if( sqlite3_open_v2(w->zDb, &db, SQLITE_OPEN_READWRITE, 0)!=SQLITE_OK ){
    snprintf(w->zFail, sizeof(w->zFail), "open: %s", sqlite3_errmsg(db));
    sqlite3_close(db);
    return 0;
  }
  while( w->nDone<w->nTxn && w->zFail[0]==0 ){
    int iFrom = 1 + (int)(rand_r(&s) % CONC_ACCOUNTS);
    int iTo = 1 + (int)(rand_r(&s) % CONC_ACCOUNTS);
    int rc;
    if( iTo==iFrom ) iTo = 1 + iFrom % CONC_ACCOUNTS;
    rc = concTransfer(db, iFrom, iTo, 1 + (int)(rand_r(&s) % 5), w->zFail);
    if( rc==SQLITE_OK ) w->nDone++;
    else if( rc==SQLITE_BUSY_SNAPSHOT ) w->nConflict++;
  }
  sqlite3_close(db);
  return 0;
}

/* Eight connections, one per thread, move money between sixteen accounts
** of one kv_btree table in one file: every failure is a conflict
** (SQLITE_BUSY_SNAPSHOT), never "database is locked"; the total stays, and
** every committed transfer is there. */
START_TEST(test_kvconc_bank_invariant_with_eight_connections){
  char *zDb;
  pthread_t aThr[CONC_THREADS];
  ConcWorker aW[CONC_THREADS];
  sqlite3 *db;
  int i, nTxn = th_scaled(150, 10);
  sqlite3 *pKeep = conc_setup("conc-bank", _i, CONC_ACCOUNTS, &zDb);
  db = th_open(zDb);                    /* the extension, auto-loaded */
  for(i=0; i<CONC_THREADS; i++){
    memset(&aW[i], 0, sizeof(aW[i]));
    aW[i].zDb = zDb;
    aW[i].iSeed = 17 + i;
    aW[i].nTxn = nTxn;
    ck_assert_int_eq(pthread_create(&aThr[i], 0, concWorker, &aW[i]), 0);
  }
  for(i=0; i<CONC_THREADS; i++){
    pthread_join(aThr[i], 0);
    ck_assert_msg(aW[i].zFail[0]==0, "worker %d: %s", i, aW[i].zFail);
    ck_assert_int_eq(aW[i].nDone, nTxn);
  }
  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"),
                   100*CONC_ACCOUNTS);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM acct"), CONC_ACCOUNTS);
  sqlite3_close(db);
  sqlite3_close(pKeep);
  sqlite3_free(zDb);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvconc");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_kvconc_tables_are_declared_in_temp_at_open,
                      0, 3);
  tcase_add_test(tc,
      test_kvconc_first_use_declares_and_moves_prepared_statements);
  tcase_add_test(tc, test_kvconc_kv_attach_declares_and_reports);
  tcase_add_loop_test(tc, test_kvconc_drop_of_temp_declaration_only_detaches,
                      0, 3);
  tcase_add_test(tc, test_kvconc_read_only_connection_reads_and_cannot_write);
  tcase_add_loop_test(tc,
      test_kvconc_write_write_conflicts_only_on_the_same_key, 0, 3);
  tcase_add_loop_test(tc, test_kvconc_read_write_conflict_fails_the_reader,
                      0, 3);
  tcase_add_loop_test(tc,
      test_kvconc_version_protocol_sees_sql_writes_of_other_connection, 0, 3);
  tcase_add_test(tc, test_kvconc_mixed_transactions_keep_ordinary_locking);
  tcase_add_loop_test(tc, test_kvconc_bank_invariant_with_eight_connections,
                      0, 3);
  suite_add_tcase(s, tc);
  return s;
}
