-- kv_versions.sql -- the key-version protocol from SQL: versions read with
-- kv_query_with_version(s), a versioned commit (kv_prepare_with_version,
-- kv_commit_with_version) and its receipts, a stale version refused with
-- kv_conflicts listing it, on a kv_memory and a kv_btree table.  Versions
-- are random per open of the store: only their kind (u: or d:) and
-- equalities between them are printed.
.headers on
.mode list
CREATE VIRTUAL TABLE acct USING kv_memory(dir='kv');
CREATE VIRTUAL TABLE stock USING kv_btree(dir='kv');
INSERT INTO acct VALUES('alice', 100), ('bob', 50);
INSERT INTO stock VALUES('bolt', 120);
CREATE TEMP TABLE h(name TEXT PRIMARY KEY, id INTEGER);
CREATE TEMP TABLE seen(tbl TEXT, k, value, version TEXT);

.print '== versions: u: for a key that exists, d: for one that does not;'
.print '== asking again gives the same version'
INSERT INTO seen SELECT 'acct', 'alice', value, version FROM kv_query_with_version('acct', 'alice', 'kv');
INSERT INTO seen SELECT 'acct', 'zed', value, version FROM kv_query_with_version('acct', 'zed', 'kv');
INSERT INTO seen SELECT 'stock', 'bolt', value, version FROM kv_query_with_version('stock', 'bolt', 'kv');
SELECT tbl, k, quote(value) AS value, substr(version, 1, 2) AS kind, length(version) AS len
  FROM seen ORDER BY tbl, k;
SELECT (SELECT version FROM kv_query_with_version('acct', 'alice', 'kv'))
     = (SELECT version FROM seen WHERE k = 'alice') AS same_version;
.print '-- several keys in one call, in the order asked'
SELECT key, quote(value) AS value, substr(version, 1, 2) AS kind,
       version = (SELECT version FROM seen WHERE k = key) AS as_before
  FROM kv_query_with_versions('acct', '["zed", "alice", "bob"]', 'kv');

.print '== a versioned commit over both tables, with the versions read'
INSERT INTO h VALUES('v1', kv_begin('kv'));
SELECT kv_put(id, 'acct', 'alice', 90) AS put, kv_put(id, 'acct', 'zed', 10) AS put2,
       kv_put(id, 'stock', 'bolt', 119) AS put3
  FROM h WHERE name = 'v1';
SELECT kv_prepare_with_version(id, (SELECT json_group_array(json_object(
         'table', tbl, 'key', k, 'version', version)) FROM seen)) AS prepared
  FROM h WHERE name = 'v1';
CREATE TEMP TABLE receipts AS
  SELECT json_extract(r.value, '$.table') AS tbl, json_extract(r.value, '$.key') AS k,
         json_extract(r.value, '$.op') AS op, json_extract(r.value, '$.version') AS version
    FROM h, json_each(kv_commit_with_version(h.id)) AS r WHERE h.name = 'v1';
.print '-- one receipt per write, each carrying the new current version'
SELECT tbl, k, op, substr(version, 1, 2) AS kind,
       version = (SELECT version FROM kv_query_with_version(tbl, k, 'kv')) AS is_current,
       version = (SELECT s.version FROM seen s WHERE s.tbl = receipts.tbl AND s.k = receipts.k)
         AS is_old
  FROM receipts ORDER BY tbl, k;
SELECT count(DISTINCT version) AS one_version_per_transaction FROM receipts;
SELECT key, value FROM acct ORDER BY key;
SELECT key, value FROM stock ORDER BY key;

.print '== a delete gives a d: version'
INSERT INTO h VALUES('v2', kv_begin('kv'));
SELECT kv_delete(id, 'acct', 'zed') AS deleted_value FROM h WHERE name = 'v2';
SELECT kv_prepare_with_version(id, '[]') AS prepared FROM h WHERE name = 'v2';
SELECT json_extract(r.value, '$.key') AS k, json_extract(r.value, '$.op') AS op,
       substr(json_extract(r.value, '$.version'), 1, 2) AS kind
  FROM h, json_each(kv_commit_with_version(h.id)) AS r WHERE h.name = 'v2';
SELECT quote(value) AS value, substr(version, 1, 2) AS kind
  FROM kv_query_with_version('acct', 'zed', 'kv');

.print '== a stale version is refused: the prepare fails, kv_conflicts says why'
INSERT INTO h VALUES('v3', kv_begin('kv'));
SELECT kv_put(id, 'acct', 'alice', 0) AS put FROM h WHERE name = 'v3';
.print '-- (from here on an error does not stop the script: it shows under -- stderr)'
.bail off
SELECT kv_prepare_with_version(id, (SELECT json_group_array(json_object(
         'table', tbl, 'key', k, 'version', version)) FROM seen WHERE tbl = 'acct'))
  AS prepared
  FROM h WHERE name = 'v3';
SELECT "table", key, kind FROM h, kv_conflicts(h.id) WHERE h.name = 'v3';
SELECT kv_rollback(id) AS rolled_back FROM h WHERE name = 'v3';
SELECT key, value FROM acct ORDER BY key;
SELECT json_extract(labels, '$.table') AS tbl, value AS version_records FROM kv_metrics
  WHERE name = 'key_version_cache_record_count' ORDER BY tbl;
