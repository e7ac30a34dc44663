#!/bin/sh
# python_smoke.sh -- the system Python loads the built module and uses it as
# a Python program would: depot_version(), SQL load_extension() in a second
# connection (which already has the extension), a KV table shared by two
# connections, a depot database opened with uri=True, threads with a
# connection each, a check_same_thread=False connection used from another
# thread, and a depot database opened by a plain name while depot is the
# default VFS (depot_default_vfs).  Skips (exit 77) only where no Python
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
print("python", sys.version.split()[0], "sqlite", sqlite3.sqlite_version,
      "depot", version)
PY
