-- quickstart.sql -- a tour of sqlite-depot through the sqlite3 shell.
--
-- Load the extension first, then feed this script:
--     sqlite3 -cmd ".load ./.libs/depot" :memory: < examples/quickstart.sql
-- (make demo does exactly that, in a scratch directory).
.bail on
.mode box
.print '== the extension is loaded; its version:'
SELECT depot_version() AS version;
