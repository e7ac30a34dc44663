#!/bin/sh
# python_smoke.sh -- the system Python loads the built module and uses it as
# a Python program would: depot_version(), SQL load_extension() in a second
# connection (which already has the extension), a KV table shared by two
# connections, a depot database opened with uri=True, threads with a
# connection each, a check_same_thread=False connection used from another
# thread, and a depot database opened by a plain name while depot is the
# default VFS (depot_default_vfs); then every other public feature family:
# the kv_* handle functions and catalog functions, kv_btree and kv_log
# tables, key versions, kv_tables / kv_stats / kv_metrics /
# kv_store_options, depot import and export, forks, restore points,
# restore, rollback, drop, buckets, quotas, the point-in-time policy,
# verify, compaction, reclaim, depot_stats and PRAGMA depot_cache_kb.
# Skips (exit 77) only where no Python
# whose sqlite3 module can load extensions exists.
name=python_smoke; . "$(dirname "$0")/python_env.sh"
"$py" - "$DEPOT_MODULE" "$tmp" <<'PY'
import os, sqlite3, sys, threading
module, tmp = sys.argv[1], sys.argv[2]
con = sqlite3.connect(":memory:")
con.enable_load_extension(True)
con.load_extension(module)
(version,) = con.execute("select depot_version()").fetchone()
assert isinstance(version, str) and version.count(".") == 2, version

# A second connection has the extension already; loading it again with SQL
# (as hosts that only speak SQL do) must succeed.
con2 = sqlite3.connect(":memory:", check_same_thread=False)
con2.enable_load_extension(True)
con2.execute("select load_extension(?)", (module,)).fetchone()
assert con2.execute("select depot_version()").fetchone()[0] == version

# A KV table seen by two connections of the process.
kv = os.path.join(tmp, "kvs")
for c in (con, con2):
    c.execute("create virtual table acct using kv_memory(dir='%s')"
              % kv.replace("'", "''"))
con.execute("insert into acct values('a', 1), ('b', 2)")
con.commit()
assert con2.execute("select sum(value) from acct").fetchone()[0] == 3

# A depot database opened with uri=True, written by four threads with a
# connection each.
uri = "file:" + os.path.join(tmp, "s.depot") + "?vfs=depot&db=app"
d = sqlite3.connect(uri, uri=True)
d.execute("create table t(n)"); d.execute("insert into t values(0)")
d.commit()
def bump():
    c = sqlite3.connect(uri, uri=True, timeout=60, isolation_level=None)
    done = 0
    while done < 10:
        try:
            c.execute("begin immediate")
            c.execute("update t set n = n + 1")
            c.execute("commit")
            done += 1
        except sqlite3.OperationalError:
            if c.in_transaction: c.execute("rollback")
    c.close()
ts = [threading.Thread(target=bump) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
assert d.execute("select n from t").fetchone()[0] == 40
assert d.execute("pragma integrity_check").fetchone()[0] == "ok"

# The check_same_thread=False connection, used from another thread.
out = []
t = threading.Thread(target=lambda: out.append(con2.execute(
    "select count(*) from depot_commits(?, 'app')",
    (os.path.join(tmp, "s.depot"),)).fetchone()[0]))
t.start(); t.join()
assert out == [42], out

# Without uri=True: depot_default_vfs(1) makes the next plain name a depot
# database (main/main of that store); (0) gives the default back.
plain_store = os.path.join(tmp, "plain.depot")
assert con.execute("select depot_default_vfs(1)").fetchone()[0] == "depot"
p = sqlite3.connect(plain_store)
assert con.execute("select depot_default_vfs(0)").fetchone()[0] != "depot"
p.execute("create table t(x)"); p.execute("insert into t values (5)")
p.commit(); p.close()
assert con.execute("select count(*) from depot_commits(?, 'main')",
                   (plain_store,)).fetchone()[0] == 2
q = sqlite3.connect("file:" + plain_store + "?vfs=depot", uri=True)
assert q.execute("select x from t").fetchone()[0] == 5
q.close()
# With parameters, a plain name reaches a fork: its writes stay there.
con.execute("select depot_fork(?, 'main', 'main', 'try')", (plain_store,))
con.execute("select depot_default_vfs(1, 'branch=try')")
p = sqlite3.connect(plain_store)
con.execute("select depot_default_vfs(0)")
p.execute("insert into t values (6)"); p.commit(); p.close()
q = sqlite3.connect("file:" + plain_store + "?vfs=depot&branch=try", uri=True)
assert [r[0] for r in q.execute("select x from t order by x")] == [5, 6]
q.close()
q = sqlite3.connect("file:" + plain_store + "?vfs=depot", uri=True)
assert [r[0] for r in q.execute("select x from t")] == [5]
q.close()
# A failed open says only "unable to open database file";
# depot_last_error() on the same thread says why, and a good open clears it.
plain_db = os.path.join(tmp, "plain.db")
x = sqlite3.connect(plain_db); x.execute("create table t(x)"); x.close()
try:
    sqlite3.connect("file:" + plain_db + "?vfs=depot", uri=True).execute(
        "select 1")
    raise AssertionError("a plain database opened as a store")
except sqlite3.OperationalError as e:
    assert "unable to open" in str(e), e
why = con.execute("select depot_last_error()").fetchone()[0]
assert why and "not a depot store" in why, why
sqlite3.connect("file:" + plain_store + "?vfs=depot", uri=True).execute(
    "select 1").fetchone()
assert con.execute("select depot_last_error()").fetchone()[0] is None

# --- KV: the handle functions and the catalog functions ---
kvd = os.path.join(tmp, "kv2")
def one(sql, *args):
    return con.execute(sql, args).fetchone()[0]
h = one("select kv_begin(?)", kvd)
assert one("select kv_create_table(?, 'fruit', 'kv_btree')", h) == 1
assert one("select kv_create_table(?, 'log', 'kv_log')", h) == 1
assert one("select kv_create_table(?, 'tmp', 'kv_memory')", h) == 1
one("select kv_put(?, 'fruit', 'apple', 3)", h)
one("select kv_put(?, 'fruit', x'00ff', 'blob key')", h)
one("select kv_put(?, 'log', 1, 'first')", h)
assert one("select kv_get(?, 'fruit', 'apple')", h) == 3
assert '"type":"kv_btree"' in one("select kv_table_meta(?, 'fruit')", h)
assert one("select kv_commit(?)", h) == 1
h = one("select kv_begin(?)", kvd)
one("select kv_delete(?, 'fruit', 'apple')", h)
assert one("select kv_rollback(?)", h) == 1          # the delete never happens
h = one("select kv_begin(?)", kvd)
assert one("select kv_remove_table(?, 'tmp')", h) == 1
one("select kv_prepare(?)", h)
assert one("select kv_try_commit(?)", h) is None      # committed
# The tables as SQL tables, and the listings.
con.execute("create virtual table temp.fruit using kv_btree(dir='%s')"
            % kvd.replace("'", "''"))
assert con.execute("select key, value from temp.fruit order by key"
                   ).fetchall() == [("apple", 3), (b"\x00\xff", "blob key")]
con.execute("create virtual table temp.log using kv_log(dir='%s')"
            % kvd.replace("'", "''"))
assert con.execute("select value from temp.log").fetchall() == [("first",)]
names = {r[0] for r in con.execute("select name from kv_tables where dir like ?",
                                   ("%kv2",))}
assert names == {"fruit", "log"}, names
assert con.execute("select row_count from kv_stats where tbl='fruit'"
                   " and store like '%kv2'").fetchone()[0] == 2
assert con.execute("select count(*) from kv_metrics").fetchone()[0] > 0
assert "key_version_ttl_ms" in one("select kv_store_options(?)", kvd)
# Key versions: read with a version, write conditionally on it.
(val, ver) = con.execute("select value, version from"
                         " kv_query_with_version('fruit', 'apple', ?)",
                         (kvd,)).fetchone()
assert val == 3 and ver, ver
vs = con.execute("select count(*) from kv_query_with_versions('fruit', ?, ?)",
                 ('["apple","nope"]', kvd)).fetchone()[0]
assert vs == 2, vs
h = one("select kv_begin(?)", kvd)
one("select kv_put(?, 'fruit', 'apple', 4)", h)
one("select kv_prepare_with_version(?, ?)", h,
    '[{"table":"fruit","key":"apple","version":"%s"}]' % ver)
receipts = one("select kv_commit_with_version(?)", h)
assert '"key":"apple"' in receipts and '"op":"upsert"' in receipts, receipts
(val, ver2) = con.execute("select value, version from"
                          " kv_query_with_version('fruit', 'apple', ?)",
                          (kvd,)).fetchone()
assert val == 4 and ver2 != ver, (val, ver2)

# --- depot: import and export, history, forks, buckets, quotas ---
store = os.path.join(tmp, "fam.depot")
src = os.path.join(tmp, "src.db")
s = sqlite3.connect(src)
s.execute("create table item(id integer primary key, qty)")
s.executemany("insert into item values (?, ?)", [(i, i * 10) for i in range(200)])
s.commit(); s.close()
n = one("select depot_import(?, ?, 'inv')", src, store)
assert n > 0
out = os.path.join(tmp, "out.db")
assert one("select depot_export(?, 'inv', 'main', ?)", store, out) == n
o = sqlite3.connect(out)
assert o.execute("pragma integrity_check").fetchone()[0] == "ok"
assert o.execute("select sum(qty) from item").fetchone()[0] == 199000
o.close()
assert one("select count(*) from depot_commits(?, 'inv')", store) == 1
assert one("select depot_fork(?, 'inv', 'main', 'dev')", store) == 2
assert one("select depot_restore_point(?, 'inv', 'main', 'rp')", store) == "rp"
assert con.execute("select name, kind from depot_restore_points(?, 'inv')",
                   (store,)).fetchall() == [("rp", "user")]
w = sqlite3.connect("file:%s?vfs=depot&db=inv" % store, uri=True)
w.execute("update item set qty = 0"); w.commit(); w.close()
undo = one("select depot_restore(?, 'inv', 'main', 'rp')", store)
assert undo.startswith("undo-main-"), undo
r = sqlite3.connect("file:%s?vfs=depot&db=inv" % store, uri=True)
assert r.execute("select sum(qty) from item").fetchone()[0] == 199000
r.close()
assert one("select depot_rollback(?, 'inv', 'main')", store) > 0
assert one("select depot_drop_branch(?, 'inv', 'dev')", store) == 1
assert one("select depot_drop_restore_point(?, 'inv', 'rp')", store) == 1
assert one("select depot_fork_bucket(?, 'main', 'staging')", store) > 0
assert ("staging", "inv", "main") in con.execute(
    "select bucket, database, branch from depot_databases(?)",
    (store,)).fetchall()
assert one("select depot_quota(?, 'inv', 100000000)", store) == 100000000
assert con.execute("select cap_bytes from depot_quotas(?) where db='inv'",
                   (store,)).fetchone()[0] == 100000000
assert '"interval":60' in one("select depot_pitr_policy(?, 'inv', 60, 86400)",
                              store)
assert one("select count(*) from depot_verify(?)", store) == 0
assert '"branches"' in one("select depot_compact(?)", store)
assert '"dropped_branches"' in one("select depot_gc(?)", store)
assert one("select depot_compact_threshold(?, 500)", store) == 500
st = con.execute("select databases, branches, stored_bytes from depot_stats(?)",
                 (store,)).fetchone()
assert st[0] == 1 and st[2] > 0, st
assert one("select count(*) from depot_verify(?)", store) == 0
c = sqlite3.connect("file:%s?vfs=depot&db=inv&cache_kb=1024" % store, uri=True)
assert c.execute("pragma depot_cache_kb").fetchone()[0] == "1024"
c.close()

print("python", sys.version.split()[0], "sqlite", sqlite3.sqlite_version,
      "depot", version)
PY
