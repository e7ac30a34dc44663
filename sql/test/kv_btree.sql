-- kv_btree.sql -- KV tables of the kv_btree backend (rows in the store's
-- B-tree data file) from SQL: create, insert, update, delete, range reads,
-- ORDER BY, transactions; the rows survive closing the store; drop.
.headers on
.mode list
.print '== create: two tables in the store ./kv'
CREATE VIRTUAL TABLE stock USING kv_btree(dir='kv');
CREATE VIRTUAL TABLE big USING kv_btree(dir='kv');
SELECT name, type, persistence, rows FROM kv_tables ORDER BY name;

.print '== insert: keys and values keep their types; keys sort as SQLite sorts'
INSERT INTO stock VALUES('bolt', 120), ('nut', 300), (7, x'00ff'), (2.5, 'half'),
  (x'0102', NULL), ('washer', 7.5);
SELECT quote(key) AS k, typeof(key) AS kt, quote(value) AS v, typeof(value) AS vt
  FROM stock ORDER BY key;
INSERT OR IGNORE INTO stock VALUES('bolt', 0);
SELECT changes() AS ignored_changes;
REPLACE INTO stock VALUES('nut', 301);
SELECT key, value FROM stock WHERE key IN ('bolt', 'nut') ORDER BY key;

.print '== update: a value, several values, a key'
UPDATE stock SET value = value - 20 WHERE key = 'bolt';
UPDATE stock SET value = value * 2 WHERE typeof(value) = 'integer';
UPDATE stock SET key = 'screw' WHERE key = 'nut';
SELECT key, value FROM stock WHERE typeof(key) = 'text' ORDER BY key;

.print '== range reads'
SELECT 'key >= bolt AND key < washer' AS range, group_concat(key, ',') AS keys
  FROM (SELECT key FROM stock WHERE key >= 'bolt' AND key < 'washer' ORDER BY key);
SELECT 'key > 2.5 AND key <= screw, DESC' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM stock WHERE key > 2.5 AND key <= 'screw' ORDER BY key DESC);
SELECT 'key IN (7, washer, nope)' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM stock WHERE key IN (7, 'washer', 'nope') ORDER BY key);
SELECT 'last two' AS range, group_concat(quote(key), ',') AS keys
  FROM (SELECT key FROM stock ORDER BY key DESC LIMIT 2);

.print '== delete: one key, a range'
DELETE FROM stock WHERE key = 'washer';
SELECT changes() AS deleted;
DELETE FROM stock WHERE key < 'a';
SELECT changes() AS deleted;
SELECT quote(key) AS k, quote(value) AS v FROM stock ORDER BY key;

.print '== a thousand rows, read back by ranges'
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
INSERT INTO big SELECT i, substr('abcdef', 1, i % 7) || i FROM n;
SELECT count(*) AS n, sum(key) AS sum_keys, min(key) AS lo, max(key) AS hi FROM big;
SELECT count(*) AS n_500_599 FROM big WHERE key >= 500 AND key < 600;
SELECT key, value, length(value) AS len FROM big WHERE key > 995 ORDER BY key DESC;
DELETE FROM big WHERE key % 2 = 0;
UPDATE big SET value = 'odd' WHERE key > 890;
SELECT count(*) AS odd_rows, sum(key) AS sum_keys FROM big;

.print '== transactions over both tables: a rollback leaves nothing'
BEGIN;
INSERT INTO stock VALUES('rivet', 4);
DELETE FROM big WHERE key < 100;
ROLLBACK;
SELECT (SELECT count(*) FROM stock) AS stock_rows, (SELECT count(*) FROM big) AS big_rows;
BEGIN;
INSERT INTO stock VALUES('rivet', 4);
SAVEPOINT s;
DELETE FROM big WHERE key < 100;
ROLLBACK TO s;
DELETE FROM big WHERE key > 900;
RELEASE s;
COMMIT;
SELECT (SELECT count(*) FROM stock) AS stock_rows, (SELECT count(*) FROM big) AS big_rows;
SELECT tbl, type, row_count FROM kv_stats WHERE tbl IS NOT NULL ORDER BY tbl;

.print '== reopen: the rows come back from the data file'
.open :memory:
.load ./depot
CREATE VIRTUAL TABLE stock USING kv_btree(dir='kv');
CREATE VIRTUAL TABLE big USING kv_btree(dir='kv');
SELECT name, type, persistence, rows FROM kv_tables ORDER BY name;
SELECT quote(key) AS k, quote(value) AS v FROM stock ORDER BY key;
SELECT count(*) AS n, sum(key) AS sum_keys, max(key) AS hi FROM big;
SELECT key, value FROM big WHERE key BETWEEN 885 AND 905 ORDER BY key;

.print '== drop: the table leaves the store, the other stays'
DROP TABLE big;
SELECT name, rows FROM kv_tables ORDER BY name;
.open :memory:
.load ./depot
CREATE VIRTUAL TABLE stock USING kv_btree(dir='kv');
SELECT name, rows FROM kv_tables ORDER BY name;
DROP TABLE stock;
SELECT count(*) AS tables_left FROM kv_tables;
