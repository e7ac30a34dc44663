#!/bin/sh
# python_kvversion_app.sh -- the key-version protocol used the way a caching
# application uses it: three applications (threads with a connection each)
# keep their own (table, key) -> (value, version) cache over a kv_memory, a
# kv_btree and a kv_log table of one store, read through
# kv_query_with_version on a miss, commit transfers, counter increments and
# account deletes/re-creations with kv_prepare_with_version (read set from
# the cache) and kv_commit_with_version (cache updated from the receipts),
# and on a conflict invalidate exactly the keys of kv_conflicts(h), roll back
# and retry.  An ordinary SQL thread updates the same keys, another reads
# kv_metrics.  At the end: balances sum to the start, counters equal the
# acknowledged increments, every receipt matched its write, and every cache
# entry is accepted by a prepare exactly when its version is current (a
# stale one gives version_mismatch, never a lost update).  Runs ~4 s.
# Skips (exit 77) only where no Python whose sqlite3 module can load
# extensions exists.
name=python_kvversion_app; . "$(dirname "$0")/python_env.sh"
"$py" - "$DEPOT_MODULE" "$tmp" <<'PY'
import json, os, random, sqlite3, sys, threading, time
module, tmp = sys.argv[1], sys.argv[2]
store = os.path.join(tmp, "store")
tables = {"m": "kv_memory(dir='%s', persistence=1)", "b": "kv_btree(dir='%s')",
          "l": "kv_log(dir='%s')"}
nacct, init, nctr, dur = 6, 100, 3, 4.0
errors = []

def fail(msg):
    errors.append(msg)

def connect():
    c = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    c.enable_load_extension(True)
    c.load_extension(module)
    for t, decl in tables.items():
        c.execute("create virtual table %s using %s" % (t, decl % store))
    return c

def kjson(k):
    return {"hex": k.hex()} if isinstance(k, bytes) else k

def kparse(j):
    return bytes.fromhex(j["hex"]) if isinstance(j, dict) else j

def ctr(i):                        # numeric and blob counter keys
    return 1000 + i if i % 2 == 0 else b"\x00c" + bytes([i])

class App:
    def __init__(self):
        self.c = connect()
        self.cache, self.acks = {}, {}
        self.commits = self.conflicts = 0

    def one(self, sql, *a):
        return self.c.execute(sql, a).fetchone()

    def read(self, t, k):
        if (t, k) not in self.cache:
            v, ver = self.one("select value, version from "
                              "kv_query_with_version(?,?,?)", t, k, store)
            if ver[:2] not in ("u:", "d:") or (v is None) != (ver[0] == "d"):
                fail("query %s/%r: %r %s" % (t, k, v, ver))
            self.cache[(t, k)] = (v, ver)
        return self.cache[(t, k)]

    def txn(self, body):
        for attempt in range(500):
            h, = self.one("select kv_begin(?)", store)
            rs, ws = {}, {}
            def get(t, k):
                if (t, k) in ws: return ws[(t, k)]
                v, ver = self.read(t, k)
                rs[(t, k)] = ver
                return v
            def put(t, k, v):
                self.one("select kv_put(?,?,?,?)", h, t, k, v); ws[(t, k)] = v
            def delete(t, k):
                self.one("select kv_delete(?,?,?)", h, t, k); ws[(t, k)] = None
            if not body(get, put, delete):
                self.one("select kv_rollback(?)", h)
                return None
            try:
                self.one("select kv_prepare_with_version(?,?)", h, json.dumps(
                    [{"table": t, "key": kjson(k), "version": v}
                     for (t, k), v in rs.items()]))
            except sqlite3.Error as e:
                if getattr(e, "sqlite_errorcode", 517) != 517:
                    raise
                self.conflicts += 1
                rows = self.c.execute('select "table", key, kind from '
                                      'kv_conflicts(?)', (h,)).fetchall()
                if not rows: fail("conflict without rows: %s" % e)
                for t, k, kind in rows:
                    if (t, k) not in rs and (t, k) not in ws:
                        fail("conflict on untouched %s/%r" % (t, k))
                    if kind == "version_mismatch" and (t, k) not in rs:
                        fail("version_mismatch on unread %s/%r" % (t, k))
                    self.cache.pop((t, k), None)
                self.one("select kv_rollback(?)", h)
                time.sleep(random.random() * 0.0002 * min(attempt, 50))
                continue
            rec = json.loads(self.one("select kv_commit_with_version(?)", h)[0])
            got = {}
            for r in rec:
                tk = (r["table"], kparse(r["key"]))
                want = "delete" if ws.get(tk, 0) is None else "upsert"
                if tk in got or tk not in ws or r["op"] != want \
                   or r["version"][0] != want[0]:
                    fail("receipt %r for writes %r" % (r, ws))
                got[tk] = r["version"]
                self.cache[tk] = (ws.get(tk), r["version"])
            if set(got) != set(ws) or len(set(v[2:] for v in got.values())) != 1:
                fail("receipts %r for writes %r" % (rec, ws))
            self.commits += 1
            return rec
        fail("no commit after 500 tries")

def transfer(app, rnd):
    t1, t2 = rnd.choice("mbl"), rnd.choice("mbl")
    a, b = "a%d" % rnd.randrange(nacct), "a%d" % rnd.randrange(nacct)
    amt = rnd.randint(1, 20)
    def body(get, put, delete):
        va, vb = get(t1, a), get(t2, b)
        if (t1, a) == (t2, b) or va is None or vb is None or va < amt:
            return False
        put(t1, a, va - amt); put(t2, b, vb + amt)
        return True
    app.txn(body)

def close_or_reopen(app, rnd):
    t = rnd.choice("mbl")
    a, b = "a%d" % rnd.randrange(nacct), "a%d" % rnd.randrange(nacct)
    def body(get, put, delete):
        va = get(t, a)
        if va is None:                       # re-create a closed account
            put(t, a, 0); return True
        vb = get(t, b)
        if a == b or vb is None: return False
        put(t, b, vb + va); delete(t, a)     # close a into b
        return True
    app.txn(body)

def incr(app, rnd):
    t, k = rnd.choice("mbl"), ctr(rnd.randrange(nctr))
    def body(get, put, delete):
        put(t, k, (get(t, k) or 0) + 1); return True
    if app.txn(body) is not None:
        app.acks[(t, k)] = app.acks.get((t, k), 0) + 1

apps, sql_acks = [], {}

def run_app(seed, stop):
    rnd, app = random.Random(seed), App()
    apps.append(app)
    ops = [transfer] * 4 + [incr] * 3 + [close_or_reopen]
    try:
        while not stop.is_set():
            rnd.choice(ops)(app, rnd)
    except Exception as e:
        fail("app %d: %r" % (seed, e))

def run_sql(stop):                 # ordinary SQL transactions, same keys
    c, rnd = connect(), random.Random(7)
    while not stop.is_set():
        t, k = rnd.choice("mbl"), ctr(rnd.randrange(nctr))
        try:
            c.execute("begin")
            if c.execute("select 1 from %s where key=?" % t, (k,)).fetchall():
                c.execute("update %s set value=value+1 where key=?" % t, (k,))
            else:
                c.execute("insert into %s values(?, 1)" % t, (k,))
            c.execute("commit")
            sql_acks[(t, k)] = sql_acks.get((t, k), 0) + 1
        except sqlite3.Error as e:
            if c.in_transaction: c.execute("rollback")
            if getattr(e, "sqlite_errorcode", 0) != 517:
                fail("sql: %s" % e)

def run_metrics(stop):             # counters never go back, never torn
    c, last = connect(), {}
    while not stop.is_set():
        for n, l, v in c.execute("select name, labels, value from kv_metrics "
                                 "where store is null"):
            if v < last.get((n, l), 0): fail("metric %s %s went back" % (n, l))
            last[(n, l)] = v

c = connect()
c.execute("begin")
for t in "mbl":
    for i in range(nacct):
        c.execute("insert into %s values(?, ?)" % t, ("a%d" % i, init))
c.execute("commit")
stop = threading.Event()
ths = [threading.Thread(target=run_app, args=(i, stop)) for i in range(3)]
ths += [threading.Thread(target=run_sql, args=(stop,)),
        threading.Thread(target=run_metrics, args=(stop,))]
for th in ths: th.start()
time.sleep(dur)
stop.set()
for th in ths: th.join()

def current(t, k):
    return c.execute("select value, version from kv_query_with_version(?,?,?)",
                     (t, k, store)).fetchone()

total = sum(current(t, "a%d" % i)[0] or 0 for t in "mbl" for i in range(nacct))
if total != 3 * nacct * init: fail("balances sum to %d" % total)
for t in "mbl":
    for i in range(nctr):
        k = ctr(i)
        want = sum(a.acks.get((t, k), 0) for a in apps) + sql_acks.get((t, k), 0)
        if (current(t, k)[0] or 0) != want:
            fail("counter %s/%r is %r, %d increments acknowledged"
                 % (t, k, current(t, k)[0], want))
nstale = 0
for app in apps:
    for (t, k), (v, ver) in app.cache.items():
        cv, cver = current(t, k)
        if cver == ver and cv != v: fail("same version, other value: %s/%r" % (t, k))
        nstale += cver != ver
        h, = c.execute("select kv_begin(?)", (store,)).fetchone()
        c.execute("select kv_put(?, 'm', 'scratch', 1)", (h,)).fetchone()
        try:
            c.execute("select kv_prepare_with_version(?, ?)", (h, json.dumps(
                [{"table": t, "key": kjson(k), "version": ver}]))).fetchone()
            c.execute("select kv_commit_with_version(?)", (h,)).fetchone()
            if cver != ver: fail("stale version of %s/%r accepted" % (t, k))
        except sqlite3.Error:
            kinds = c.execute("select kind from kv_conflicts(?)", (h,)).fetchall()
            c.execute("select kv_rollback(?)", (h,)).fetchone()
            if cver == ver or kinds != [("version_mismatch",)]:
                fail("cache entry %s/%r: %r" % (t, k, kinds))
commits = sum(a.commits for a in apps)
if commits < 10: fail("only %d commits" % commits)
for e in errors[:20]: print("FAIL:", e)
print("kv version app: %d commits, %d conflicts, %d SQL increments, "
      "%d stale cache entries" % (commits, sum(a.conflicts for a in apps),
      sum(sql_acks.values()), nstale))
sys.exit(1 if errors else 0)
PY
