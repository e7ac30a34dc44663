-- store_schema.sql -- what the embedded outer store (vfs/store/sqlite.c)
-- executes on every writable open of its SQLite file: WAL journaling, and
-- the one table that holds every page blob, commit record and catalog entry
-- of the store, under keys the vfs/ layer encodes.  IF NOT EXISTS: the same
-- text runs on a new file and on an existing store.
--
-- Compiled in: the build turns this file into sql/store_schema.h (the C
-- string STORE_SCHEMA_SQL, comment lines and blank lines left out, every
-- other line kept as written).  The CREATE TABLE text is what the store
-- file's sqlite_schema keeps, so a change here changes the schema of new
-- stores; existing stores keep theirs.
PRAGMA journal_mode=WAL;
CREATE TABLE IF NOT EXISTS depot_kv(key BLOB PRIMARY KEY, value BLOB) WITHOUT ROWID;
