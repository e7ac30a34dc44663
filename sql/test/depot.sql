-- depot.sql -- a depot database from SQL: create it in a store file, write
-- it in commits, fork a branch, write both branches and read each, pin a
-- restore point, restore to it and undo the restore, drop the branch, and
-- depot_verify the store at each stage (no findings: no rows); a KV table
-- of the database, in the store's sidecar KV store, written in one
-- transaction with the database.  Commit times and byte sizes are left out
-- of the output.
.headers on
.mode list
.print '== create: a database inventory in the store file store.depot'
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
CREATE TABLE d.item(id INTEGER PRIMARY KEY, name TEXT, qty INT);
INSERT INTO d.item(name, qty) VALUES ('bolt', 120), ('nut', 300);
BEGIN;
UPDATE d.item SET qty = qty - 20 WHERE name = 'bolt';
INSERT INTO d.item(name, qty) VALUES ('washer', 75);
COMMIT;
SELECT * FROM d.item ORDER BY id;
PRAGMA d.integrity_check;
.print '-- one commit per transaction'
SELECT txid, db_pages, length(checksum) AS checksum_digits
  FROM depot_commits('store.depot', 'inventory');
SELECT database, branch, branch_id, head_txid FROM depot_databases('store.depot');
SELECT count(*) AS verify_findings FROM depot_verify('store.depot');

.print '== a second connection reads the same database'
.connection 1
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
SELECT name, qty FROM d.item ORDER BY id;
.connection 0
.connection close 1

.print '== fork: dev is main at its head; each branch sees its own writes only'
SELECT depot_fork('store.depot', 'inventory', 'main', 'dev') AS dev_branch_id;
ATTACH 'file:store.depot?vfs=depot&db=inventory&branch=dev' AS dev;
INSERT INTO d.item(name, qty) VALUES ('main-only', 1);
UPDATE dev.item SET qty = 0 WHERE name = 'nut';
INSERT INTO dev.item(name, qty) VALUES ('dev-only', 2);
SELECT 'main' AS branch, name, qty FROM d.item
UNION ALL SELECT 'dev', name, qty FROM dev.item ORDER BY 1, 2;
SELECT branch, branch_id, parent, fork_txid, head_txid, state
  FROM depot_branches('store.depot', 'inventory') ORDER BY branch_id;
SELECT txid, db_pages FROM depot_commits('store.depot', 'inventory', 'dev');
.print '-- a fork at an earlier txid: main as of its second commit'
SELECT depot_fork('store.depot', 'inventory', 'main', 'first', 2) AS first_branch_id;
ATTACH 'file:store.depot?vfs=depot&db=inventory&branch=first' AS f;
SELECT name, qty FROM f.item ORDER BY id;
DETACH f;
SELECT count(*) AS verify_findings FROM depot_verify('store.depot');

.print '== restore: a restore point, a mistake, the restore, its undo'
SELECT depot_restore_point('store.depot', 'inventory', 'main', 'before-cleanup')
  AS restore_point;
DELETE FROM d.item WHERE qty > 50;
SELECT count(*) AS rows_after_mistake FROM d.item;
SELECT depot_restore('store.depot', 'inventory', 'main', 'before-cleanup') LIKE 'undo-main-%'
  AS restored;
DETACH d;
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
SELECT name, qty FROM d.item ORDER BY id;
SELECT name, branch, txid, kind FROM depot_restore_points('store.depot', 'inventory')
  ORDER BY kind, name;
SELECT depot_restore('store.depot', 'inventory', 'main',
  (SELECT name FROM depot_restore_points('store.depot', 'inventory') WHERE kind = 'undo'))
  LIKE 'undo-main-%' AS undone;
DETACH d;
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
SELECT name, qty FROM d.item ORDER BY id;
.print '-- the dev branch was never touched'
SELECT name, qty FROM dev.item ORDER BY id;
SELECT count(*) AS verify_findings FROM depot_verify('store.depot');
SELECT count(*) AS verify_findings_dev FROM depot_verify('store.depot', 'inventory', 'dev');

.print '== a fresh connection reads both branches from the store file'
.open :memory:
.load ./depot
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
ATTACH 'file:store.depot?vfs=depot&db=inventory&branch=dev' AS dev;
SELECT (SELECT group_concat(name, ',') FROM (SELECT name FROM d.item ORDER BY id)) AS main_items,
       (SELECT group_concat(name, ',') FROM (SELECT name FROM dev.item ORDER BY id)) AS dev_items;
PRAGMA dev.integrity_check;

.print '== drop the dev branch; compaction and reclaim keep the store whole'
DETACH dev;
SELECT depot_drop_branch('store.depot', 'inventory', 'dev') AS dropped;
SELECT branch, state FROM depot_branches('store.depot', 'inventory') ORDER BY branch_id;
SELECT json_valid(depot_compact('store.depot')) AS compacted;
SELECT depot_gc('store.depot') IS NOT NULL AS reclaimed;
SELECT name, qty FROM d.item ORDER BY id;
SELECT count(*) AS verify_findings FROM depot_verify('store.depot');
SELECT databases FROM depot_stats('store.depot');

.print '== a KV table of the depot database lives in the sidecar store store.depot-kv'
CREATE VIRTUAL TABLE d.tags USING kv_btree;
BEGIN;
INSERT INTO d.item(name, qty) VALUES ('rivet', 40);
INSERT INTO d.tags VALUES('rivet', 'metal'), ('main-only', 'test');
COMMIT;
SELECT i.name, i.qty, t.value AS tag FROM d.item i JOIN d.tags t ON t.key = i.name ORDER BY i.id;
SELECT name, type, rows FROM kv_tables;
SELECT txid FROM depot_commits('store.depot', 'inventory') ORDER BY txid DESC LIMIT 1;
SELECT count(*) AS verify_findings FROM depot_verify('store.depot');
