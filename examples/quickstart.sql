-- quickstart.sql -- a tour of sqlite-depot through the sqlite3 shell.
--
-- Load the extension first, then feed this script:
--     sqlite3 -cmd ".load ./.libs/depot" :memory: < examples/quickstart.sql
-- (make demo does exactly that, in a scratch directory).
.bail on
.mode box
.print '== the extension is loaded; its version:'
SELECT depot_version() AS version;

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
