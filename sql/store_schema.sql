-- store_schema.sql -- the tables of the embedded outer store
-- (vfs/store/sqlite.c), which it creates on every writable open of its
-- SQLite file (IF NOT EXISTS: the same text runs on a new file and on an
-- existing store).  The store holds every commit record, page index row,
-- blob chunk and catalog entry under keys the vfs/ layer encodes, in key
-- order:
--
--   depot_keys   every key, WITHOUT ROWID, with its value in the same cell
--                when the value has at most 128 bytes (page index rows,
--                commit records, heads), else the id of its row in
--                depot_blobs (blob: NULL for an inline value).  A seek or
--                a scan of keys touches only small cells, and reads an
--                inline value where it finds the key.
--   depot_blobs  the values of more than 128 bytes (blob chunks of up to
--                64 KiB), a rowid table: a part of one is read through
--                sqlite3_blob_read(), which fetches only the overflow pages
--                that hold it.
--
-- Deleting a key, or replacing a value held in depot_blobs, deletes its
-- depot_blobs row (the two triggers on depot_keys).  depot_kv is a view of
-- the two as (key, value) pairs, writable through its INSTEAD OF triggers,
-- for people and tools that inspect a store with the sqlite3 shell.
--
-- PRAGMA user_version of the file is its store format: 2 for these
-- tables.  Format 1 was one rowid table depot_kv(key BLOB PRIMARY KEY,
-- value BLOB), format 0 a WITHOUT ROWID depot_kv holding keys and values
-- in its cells; a writable open migrates either in one transaction each
-- (vfs/store/sqlite.c), a read-only open reads them as they are.
--
-- Compiled in: the build turns this file into sql/store_schema.h (the C
-- string STORE_SCHEMA_SQL, comment lines and blank lines left out, every
-- other line kept as written).  The CREATE text is what the store file's
-- sqlite_schema keeps, so a change here changes the schema of new stores;
-- existing stores keep theirs.
CREATE TABLE IF NOT EXISTS depot_keys(key BLOB PRIMARY KEY, value BLOB,
  blob INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS depot_blobs(id INTEGER PRIMARY KEY, value BLOB);
CREATE TRIGGER IF NOT EXISTS depot_keys_delete AFTER DELETE ON depot_keys
  WHEN old.blob IS NOT NULL
BEGIN
  DELETE FROM depot_blobs WHERE id=old.blob;
END;
CREATE TRIGGER IF NOT EXISTS depot_keys_update AFTER UPDATE OF blob
  ON depot_keys WHEN old.blob IS NOT NULL AND old.blob IS NOT new.blob
BEGIN
  DELETE FROM depot_blobs WHERE id=old.blob;
END;
CREATE VIEW IF NOT EXISTS depot_kv(key, value) AS
  SELECT k.key, CASE WHEN k.blob IS NULL THEN k.value
    ELSE (SELECT b.value FROM depot_blobs AS b WHERE b.id=k.blob) END
  FROM depot_keys AS k;
CREATE TRIGGER IF NOT EXISTS depot_kv_insert INSTEAD OF INSERT ON depot_kv
BEGIN
  DELETE FROM depot_keys WHERE key=new.key;
  INSERT INTO depot_blobs(value) SELECT new.value
    WHERE length(CAST(new.value AS BLOB))>128;
  INSERT INTO depot_keys(key, value, blob) SELECT new.key,
    CASE WHEN length(CAST(new.value AS BLOB))>128 THEN NULL ELSE new.value END,
    CASE WHEN length(CAST(new.value AS BLOB))>128 THEN last_insert_rowid() END;
END;
CREATE TRIGGER IF NOT EXISTS depot_kv_update INSTEAD OF UPDATE ON depot_kv
BEGIN
  INSERT INTO depot_blobs(value) SELECT new.value
    WHERE length(CAST(new.value AS BLOB))>128;
  UPDATE depot_keys SET key=new.key,
    value=CASE WHEN length(CAST(new.value AS BLOB))>128 THEN NULL
               ELSE new.value END,
    blob=CASE WHEN length(CAST(new.value AS BLOB))>128
              THEN last_insert_rowid() END
    WHERE key=old.key;
END;
CREATE TRIGGER IF NOT EXISTS depot_kv_delete INSTEAD OF DELETE ON depot_kv
BEGIN
  DELETE FROM depot_keys WHERE key=old.key;
END;
