-- quickstart.sql -- a tour of sqlite-depot through the sqlite3 shell.
--
-- Load the extension first, then feed this script:
--     sqlite3 -cmd ".load ./depot" :memory: < sql/quickstart.sql
-- from the build directory (make demo does exactly that, in a fresh scratch
-- directory each time).  It creates kvstore/ and store.depot in the current
-- directory; remove them before running it again there.
.bail on
.mode box
.print '== the extension is loaded; its version:'
SELECT depot_version() AS version;

-- ---------------------------------------------------------------- KV tables
.print ''
.print '== KV tables: two tables in the store directory ./kvstore'
CREATE VIRTUAL TABLE account USING kv_memory(dir='kvstore', persistence=1);
CREATE VIRTUAL TABLE ledger USING kv_memory(dir='kvstore');
INSERT INTO account VALUES('alice', 100), ('bob', 50);
SELECT name, type, persistence, rows FROM kv_tables ORDER BY name;

.print '== a transaction over both tables: all of it commits, or none'
BEGIN;
UPDATE account SET value = value - 30 WHERE key = 'alice';
UPDATE account SET value = value + 30 WHERE key = 'bob';
INSERT INTO ledger VALUES(1, 'alice -> bob: 30');
COMMIT;
SELECT key, value FROM account ORDER BY key;
SELECT key, value FROM ledger;

.print '== a rollback leaves nothing behind'
BEGIN;
DELETE FROM account WHERE key = 'bob';
INSERT INTO ledger VALUES(2, 'never happened');
ROLLBACK;
SELECT key, value FROM account ORDER BY key;
SELECT count(*) AS ledger_rows FROM ledger;

.print '== a conflict between two connections: both read alice and write it'
-- .connection 1 (sqlite3 shell 3.37 or later) opens a second connection to a
-- fresh in-memory database;
-- it loads the extension and attaches the same table of the same store.
.connection 1
.load ./depot
CREATE VIRTUAL TABLE account USING kv_memory(dir='kvstore', persistence=1);
CREATE TEMP TABLE h AS SELECT kv_begin('kvstore') AS id;
SELECT kv_put(id, 'account', 'alice', kv_get(id, 'account', 'alice') + 1) AS put
  FROM h;
.print '-- meanwhile the first connection commits a change to alice'
.connection 0
UPDATE account SET value = value * 2 WHERE key = 'alice';
SELECT key, value FROM account WHERE key = 'alice';
.print '-- the second connection now conflicts and is rolled back'
.connection 1
SELECT kv_try_commit(id) AS conflicts FROM h;
SELECT key, value FROM account WHERE key = 'alice';
.print '-- (kv_commit, or a SQL COMMIT, would have failed with SQLITE_BUSY_SNAPSHOT:'
.print "--  \"kv: transaction conflicts with a concurrent commit on 1 key: account"
.print "--  key 'alice'; the transaction was rolled back, retry it in a new one\")"
.connection 0
.connection close 1

.print ''
.print '== persistent tables: kv_btree (a B-tree data file) and kv_log (log files)'
CREATE VIRTUAL TABLE stock USING kv_btree(dir='kvstore');
CREATE VIRTUAL TABLE events USING kv_log(dir='kvstore');
BEGIN;
INSERT INTO stock VALUES('bolt', 120), ('nut', 300), ('washer', 75);
INSERT INTO events VALUES(1, 'stock counted'), (2, 'bolts reordered');
COMMIT;
DELETE FROM stock WHERE key = 'washer';
SELECT tbl, type, row_count, wal_segments FROM kv_stats ORDER BY tbl NULLS FIRST;
.print '== close the connection (the store closes, its collectors finish) and'
.print '== open a fresh one: the tables attach again and the data came back'
.open :memory:
.load ./depot
CREATE VIRTUAL TABLE stock USING kv_btree(dir='kvstore');
CREATE VIRTUAL TABLE events USING kv_log(dir='kvstore');
CREATE VIRTUAL TABLE account USING kv_memory(dir='kvstore');
SELECT key, value FROM stock ORDER BY key;
SELECT key, value FROM events ORDER BY key;
.print '-- (kv_memory data is volatile: account reopens empty, its catalog entry stays)'
SELECT count(*) AS account_rows FROM account;
.print '-- nothing was left to replay: every WAL record is confirmed'
SELECT wal_unconfirmed FROM kv_stats WHERE tbl IS NULL;
.print ''
.print '== the key-version protocol: read values with their versions, then commit'
.print '== a batch that succeeds only if none of them changed (versions start'
.print '== afresh at every open of the store: caches re-read after a restart)'
CREATE TEMP TABLE cache AS
  SELECT 'bolt' AS k, value, version FROM kv_query_with_version('stock', 'bolt', 'kvstore');
SELECT k, value, substr(version, 1, 2) AS kind FROM cache;
CREATE TEMP TABLE vh(name PRIMARY KEY, id);
INSERT INTO vh VALUES('versioned', kv_begin('kvstore'));
SELECT kv_put(id, 'stock', 'bolt', (SELECT value FROM cache) - 1) AS put
  FROM vh WHERE name = 'versioned';
SELECT kv_prepare_with_version(id, (SELECT json_group_array(json_object(
    'table', 'stock', 'key', k, 'version', version)) FROM cache)) AS prepared
  FROM vh WHERE name = 'versioned';
.print '-- the receipts: one per write, with the new version'
SELECT json_extract(r.value, '$.key') AS key, json_extract(r.value, '$.op') AS op,
       json_extract(r.value, '$.version') = (SELECT version FROM
         kv_query_with_version('stock', 'bolt', 'kvstore')) AS is_current
  FROM vh, json_each(kv_commit_with_version(vh.id)) AS r WHERE vh.name = 'versioned';
SELECT key, value FROM stock WHERE key = 'bolt';
.print '-- the cached version is now stale: kv_prepare_with_version(h, <the cached'
.print '-- read set>) would fail with SQLITE_BUSY_SNAPSHOT, and kv_conflicts(h)'
.print '-- would list stock|bolt|version_mismatch; the caller rolls back, re-reads'
SELECT (SELECT version FROM cache) = (SELECT version FROM
         kv_query_with_version('stock', 'bolt', 'kvstore')) AS cache_still_current;
SELECT name, json_extract(labels, '$.result') AS result, value FROM kv_metrics
  WHERE name = 'key_version_query_calls';
.print ''
.print '== branchable databases: a depot database inside the store file store.depot'
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
CREATE TABLE d.item(id INTEGER PRIMARY KEY, name TEXT, qty INT);
INSERT INTO d.item(name, qty) VALUES ('bolt', 120), ('nut', 300);
BEGIN;
UPDATE d.item SET qty = qty - 20 WHERE name = 'bolt';
INSERT INTO d.item(name, qty) VALUES ('washer', 75);
COMMIT;
.print '== a second connection (the VFS is registered for the whole process)'
.print '== opens the same database and reads it'
.connection 1
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
SELECT * FROM d.item ORDER BY id;
PRAGMA d.integrity_check;
.connection 0
.connection close 1
.print '== every transaction above is one commit of the database'
SELECT txid, db_pages, pages_written, bytes_stored FROM depot_commits('store.depot', 'inventory');
.print '== the store as a whole'
SELECT databases, branches, stored_bytes, logical_bytes FROM depot_stats('store.depot');
.print ''
.print '== forks: a branch "dev" of the inventory, made in constant time'
SELECT depot_fork('store.depot', 'inventory', 'main', 'dev') AS dev_branch_id;
ATTACH 'file:store.depot?vfs=depot&db=inventory&branch=dev' AS dev;
.print '== write on both sides: neither sees the other'
INSERT INTO d.item(name, qty) VALUES ('main-only', 1);
UPDATE dev.item SET qty = 0 WHERE name = 'nut';
SELECT 'main' AS branch, name, qty FROM d.item
UNION ALL SELECT 'dev', name, qty FROM dev.item ORDER BY 1, 2;
SELECT branch, parent, fork_txid, head_txid, state FROM depot_branches('store.depot', 'inventory');
.print '== a restore point, a mistake, and a restore to the point'
SELECT depot_restore_point('store.depot', 'inventory', 'main', 'before-cleanup') AS restore_point;
DELETE FROM d.item;
SELECT count(*) AS rows_after_mistake FROM d.item;
SELECT depot_restore('store.depot', 'inventory', 'main', 'before-cleanup') IS NOT NULL AS restored;
DETACH d;
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
SELECT name, qty FROM d.item ORDER BY id;
.print '== undo: restore to the undo point the restore made'
SELECT depot_restore('store.depot', 'inventory', 'main',
  (SELECT name FROM depot_restore_points('store.depot', 'inventory') WHERE kind = 'undo'))
  IS NOT NULL AS undone;
DETACH d;
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
SELECT count(*) AS rows_after_undo FROM d.item;
SELECT name, kind FROM depot_restore_points('store.depot', 'inventory') ORDER BY kind, name;
.print '== compaction, reclaim and a health check of the store'
SELECT json_extract(depot_compact('store.depot'), '$.branches') IS NOT NULL AS compacted;
SELECT depot_gc('store.depot') IS NOT NULL AS reclaimed;
SELECT count(*) AS verify_findings FROM depot_verify('store.depot');
