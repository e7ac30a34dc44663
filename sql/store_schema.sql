-- store_schema.sql -- what the embedded outer store (vfs/store/sqlite.c)
-- executes on every writable open of its SQLite file (after PRAGMA
-- auto_vacuum=INCREMENTAL on a new, empty file; depot_vacuum() turns it on
-- for an older store): WAL journaling with the -wal truncated
-- back to 4 MiB after checkpoints, the ordered key table that holds every
-- commit record, page index row, blob chunk and catalog entry under keys
-- the vfs/ layer encodes.  depot_kv is a rowid table: its keys live in the key
-- index, apart from the values (blob chunks of up to 64 KiB), so key
-- seeks only touch small index cells.  IF NOT EXISTS: the same text runs
-- on a new file and on an existing store (vfs/store/sqlite.c migrates a
-- store of the older WITHOUT ROWID layout, user_version 0; this layout
-- is user_version 1).
--
-- Compiled in: the build turns this file into sql/store_schema.h (the C
-- string STORE_SCHEMA_SQL, comment lines and blank lines left out, every
-- other line kept as written).  The CREATE TABLE text is what the store
-- file's sqlite_schema keeps, so a change here changes the schema of new
-- stores; existing stores keep theirs.
PRAGMA journal_mode=WAL;
PRAGMA journal_size_limit=4194304;
CREATE TABLE IF NOT EXISTS depot_kv(key BLOB PRIMARY KEY, value BLOB);
