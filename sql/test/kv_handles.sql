-- kv_handles.sql -- root transactions through handles: kv_begin, kv_get,
-- kv_put, kv_delete, kv_table_meta, kv_prepare, kv_commit, kv_try_commit,
-- kv_rollback, kv_create_table, kv_remove_table; isolation of a handle's
-- writes and a conflict with a SQL commit, reported as JSON.
.headers on
.mode list
CREATE VIRTUAL TABLE acct USING kv_memory(dir='kv', persistence=1);
INSERT INTO acct VALUES('alice', 100), ('bob', 50);
CREATE TEMP TABLE h(name TEXT PRIMARY KEY, id INTEGER);

.print '== a handle reads and writes; nothing shows before its commit'
INSERT INTO h VALUES('t1', kv_begin('kv'));
SELECT kv_get(id, 'acct', 'alice') AS alice, quote(kv_get(id, 'acct', 'zed')) AS zed
  FROM h WHERE name = 't1';
SELECT kv_put(id, 'acct', 'carol', 75) AS put, kv_put(id, 'acct', 'alice', 90) AS put2,
       kv_delete(id, 'acct', 'bob') AS deleted_value
  FROM h WHERE name = 't1';
SELECT kv_get(id, 'acct', 'alice') AS alice_in_t1, quote(kv_get(id, 'acct', 'bob')) AS bob_in_t1
  FROM h WHERE name = 't1';
SELECT key, value FROM acct ORDER BY key;
SELECT kv_table_meta(id, 'acct') AS meta FROM h WHERE name = 't1';
SELECT kv_commit(id) AS committed FROM h WHERE name = 't1';
SELECT key, value FROM acct ORDER BY key;

.print '== prepare then rollback: nothing applied'
INSERT INTO h VALUES('t2', kv_begin('kv'));
SELECT kv_put(id, 'acct', 'alice', 0) AS put, kv_prepare(id) AS prepared,
       kv_rollback(id) AS rolled_back
  FROM h WHERE name = 't2';
SELECT key, value FROM acct ORDER BY key;

.print '== a conflict: t3 reads alice, SQL commits a change to alice first'
INSERT INTO h VALUES('t3', kv_begin('kv'));
SELECT kv_get(id, 'acct', 'alice') AS alice_read FROM h WHERE name = 't3';
SELECT kv_put(id, 'acct', 'carol', kv_get(id, 'acct', 'alice') - 10) AS put
  FROM h WHERE name = 't3';
UPDATE acct SET value = value + 1 WHERE key = 'alice';
SELECT kv_try_commit(id) AS conflicts FROM h WHERE name = 't3';
SELECT key, value FROM acct ORDER BY key;
.print '-- the retry in a new handle commits'
INSERT INTO h VALUES('t4', kv_begin('kv'));
SELECT kv_put(id, 'acct', 'carol', kv_get(id, 'acct', 'alice') - 10) AS put
  FROM h WHERE name = 't4';
SELECT quote(kv_try_commit(id)) AS conflicts FROM h WHERE name = 't4';
SELECT key, value FROM acct ORDER BY key;

.print '== a blob key and a NULL value through a handle'
INSERT INTO h VALUES('t5', kv_begin('kv'));
SELECT kv_put(id, 'acct', x'00ff', NULL) AS put, kv_put(id, 'acct', 12, 'twelve') AS put2
  FROM h WHERE name = 't5';
SELECT kv_commit(id) AS committed FROM h WHERE name = 't5';
SELECT quote(key) AS k, quote(value) AS v FROM acct ORDER BY key;

.print '== tables made and removed by handles'
INSERT INTO h VALUES('t6', kv_begin('kv'));
SELECT kv_create_table(id, 'veg', 'kv_log') AS created,
       kv_create_table(id, 'big', 'kv_btree', '{"accelerated_repair":1}') AS created2,
       kv_create_table(id, 'acct', 'kv_memory', '{"persistence":1}') AS existed
  FROM h WHERE name = 't6';
SELECT kv_put(id, 'veg', 'leek', 3) AS put, kv_put(id, 'big', 1, 'one') AS put2
  FROM h WHERE name = 't6';
SELECT kv_commit(id) AS committed FROM h WHERE name = 't6';
SELECT name, type, persistence, rows FROM kv_tables ORDER BY name;
CREATE VIRTUAL TABLE veg USING kv_log(dir='kv');
SELECT key, value FROM veg;
INSERT INTO h VALUES('t7', kv_begin('kv'));
SELECT kv_table_meta(id, 'big') AS meta FROM h WHERE name = 't7';
SELECT kv_remove_table(id, 'big') AS removed FROM h WHERE name = 't7';
SELECT kv_commit(id) AS committed FROM h WHERE name = 't7';
INSERT INTO h VALUES('t8', kv_begin('kv'));
SELECT quote(kv_table_meta(id, 'big')) AS meta FROM h WHERE name = 't8';
SELECT kv_rollback(id) AS rolled_back FROM h WHERE name = 't8';
SELECT name, type FROM kv_tables ORDER BY name;
