-- kv_memory.sql -- KV tables of the kv_memory backend from SQL: create,
-- insert, update, delete, range reads, ORDER BY, transactions, drop; a
-- persistence=1 table keeps its catalog entry over a reopen, not its rows.
.headers on
.mode list
.print '== create: two tables in the store ./kv'
CREATE VIRTUAL TABLE fruit USING kv_memory(dir='kv');
CREATE VIRTUAL TABLE durable USING kv_memory(dir='kv', persistence=1);
SELECT name, type, persistence, rows FROM kv_tables ORDER BY name;

.print '== insert: keys and values keep their types; keys sort as SQLite sorts'
INSERT INTO fruit VALUES('apple', 3), ('pear', 5), (7, x'00ff'), (2.5, 'half'),
  (x'0102', NULL), ('fig', 1.25);
SELECT quote(key) AS k, typeof(key) AS kt, quote(value) AS v, typeof(value) AS vt
  FROM fruit ORDER BY key;
.print '-- 2 and 2.0 are one key'
INSERT INTO fruit VALUES(2, 'two');
INSERT OR REPLACE INTO fruit VALUES(2.0, 'two again');
SELECT quote(key) AS k, value FROM fruit WHERE key = 2;
.print '-- INSERT OR IGNORE skips an existing key, REPLACE overwrites it'
INSERT OR IGNORE INTO fruit VALUES('apple', 99);
SELECT changes() AS ignored_changes;
REPLACE INTO fruit VALUES('pear', 6);
SELECT key, value FROM fruit WHERE key IN ('apple', 'pear') ORDER BY key;

.print '== update: a value, several values, a key'
UPDATE fruit SET value = value + 10 WHERE key = 'apple';
UPDATE fruit SET value = value * 2 WHERE typeof(value) = 'integer';
UPDATE fruit SET key = 'plum' WHERE key = 'pear';
SELECT key, value FROM fruit WHERE typeof(key) = 'text' ORDER BY key;

.print '== range reads'
SELECT 'key >= fig AND key < plum' AS range, group_concat(key, ',') AS keys
  FROM (SELECT key FROM fruit WHERE key >= 'fig' AND key < 'plum' ORDER BY key);
SELECT 'key > 2 AND key <= 7' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM fruit WHERE key > 2 AND key <= 7 ORDER BY key);
SELECT 'key BETWEEN 2 AND apple, DESC' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM fruit WHERE key BETWEEN 2 AND 'apple' ORDER BY key DESC);
SELECT 'key IN (7, fig, nope)' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM fruit WHERE key IN (7, 'fig', 'nope') ORDER BY key);
SELECT 'blob keys' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM fruit WHERE key >= x'' ORDER BY key);
SELECT 'first two, DESC' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM fruit ORDER BY key DESC LIMIT 2);

.print '== delete: one key, a range'
DELETE FROM fruit WHERE key = 'fig';
SELECT changes() AS deleted;
DELETE FROM fruit WHERE key < 'a';
SELECT changes() AS deleted;
SELECT quote(key) AS k, quote(value) AS v FROM fruit ORDER BY key;

.print '== a thousand rows, read back by ranges'
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
INSERT INTO durable SELECT i, 'row ' || i FROM n;
SELECT count(*) AS n, sum(key) AS sum_keys, min(key) AS lo, max(key) AS hi FROM durable;
SELECT count(*) AS n_500_599 FROM durable WHERE key >= 500 AND key < 600;
SELECT key, value FROM durable WHERE key > 995 ORDER BY key DESC;
DELETE FROM durable WHERE key % 2 = 0;
SELECT count(*) AS odd_rows, sum(key) AS sum_keys FROM durable;

.print '== transactions: a rollback leaves nothing, a savepoint undoes its part'
BEGIN;
INSERT INTO fruit VALUES('kiwi', 4);
DELETE FROM fruit WHERE key = 'apple';
ROLLBACK;
SELECT key, value FROM fruit WHERE typeof(key) = 'text' ORDER BY key;
BEGIN;
INSERT INTO fruit VALUES('kiwi', 4);
SAVEPOINT s;
UPDATE fruit SET value = 0 WHERE key = 'kiwi';
INSERT INTO fruit VALUES('lime', 8);
ROLLBACK TO s;
RELEASE s;
COMMIT;
SELECT key, value FROM fruit WHERE typeof(key) = 'text' ORDER BY key;
SELECT name, rows FROM kv_tables ORDER BY name;

.print '== reopen: the catalog stays, kv_memory rows are volatile'
.open :memory:
.load ./depot
CREATE VIRTUAL TABLE durable USING kv_memory(dir='kv');
SELECT name, type, persistence, rows FROM kv_tables ORDER BY name;
INSERT INTO durable VALUES('after', 'reopen');
SELECT key, value FROM durable;

.print '== drop: the table leaves the store'
DROP TABLE durable;
CREATE VIRTUAL TABLE fruit USING kv_memory(dir='kv');
DROP TABLE fruit;
SELECT count(*) AS tables_left FROM kv_tables;
