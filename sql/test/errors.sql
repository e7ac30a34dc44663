-- errors.sql -- errors the SQL surface reports, and that a failed
-- statement changes nothing.  The whole script runs with .bail off: the
-- runner prints the error messages after the output, under "-- stderr",
-- in the order of the numbered steps below.
.headers on
.mode list
.bail off
CREATE VIRTUAL TABLE acct USING kv_memory(dir='kv');
INSERT INTO acct VALUES('alice', 100), ('bob', 50);
CREATE TEMP TABLE h(name TEXT PRIMARY KEY, id INTEGER);

.print '1. INSERT of an existing key'
INSERT INTO acct VALUES('alice', 0);
.print '2. a NULL key'
INSERT INTO acct VALUES(NULL, 1);
.print '3. a statement that fails half way applies none of its rows'
INSERT INTO acct VALUES('carol', 1), ('bob', 2);
SELECT key, value FROM acct ORDER BY key;

.print '4. a conflict between two connections: the COMMIT fails, nothing applied'
.connection 1
.load ./depot
CREATE VIRTUAL TABLE acct USING kv_memory(dir='kv');
BEGIN;
SELECT value AS alice_read FROM acct WHERE key = 'alice';
.connection 0
UPDATE acct SET value = value + 1 WHERE key = 'alice';
.connection 1
UPDATE acct SET value = 0 WHERE key = 'bob';
COMMIT;
SELECT key, value FROM acct ORDER BY key;
.connection 0
.connection close 1

.print '5. an unknown table, 6. an unknown handle, 7. a finished handle'
INSERT INTO h VALUES('t1', kv_begin('kv'));
SELECT kv_get(id, 'nope', 'k') FROM h WHERE name = 't1';
SELECT kv_put(99, 'acct', 'k', 'v');
SELECT kv_commit(id) AS committed FROM h WHERE name = 't1';
SELECT kv_commit(id) FROM h WHERE name = 't1';

.print '8. a kv_btree table cannot be volatile, 9. an unknown argument'
CREATE VIRTUAL TABLE b USING kv_btree(dir='kv', persistence=0);
CREATE VIRTUAL TABLE c USING kv_memory(dir='kv', colour=blue);
SELECT name FROM kv_tables ORDER BY name;

.print '10. DROP TABLE of a KV table inside a transaction is refused'
BEGIN;
DROP TABLE acct;
ROLLBACK;
SELECT name FROM kv_tables ORDER BY name;

.print '11. a fork of a branch that does not exist, 12. verify of a database'
.print '    that does not exist'
ATTACH 'file:store.depot?vfs=depot&db=inventory' AS d;
CREATE TABLE d.item(id INTEGER PRIMARY KEY, name TEXT);
SELECT depot_fork('store.depot', 'inventory', 'nope', 'dev');
SELECT * FROM depot_verify('store.depot', 'nope');
SELECT branch FROM depot_branches('store.depot', 'inventory');
