// node_smoke.cjs -- better-sqlite3 (Node) loads the built module and uses
// it as a Node program would: depot_version(), a KV table and the kv_*
// handle functions (numbers arrive as REALs), a depot database opened by
// its plain name while depot_default_vfs(1) is in force, a fork of it
// opened the same way with 'branch=try', and both branches read back.
// Run by node_smoke.sh: node node_smoke.cjs MODULE TMPDIR.
"use strict";
const assert = require("assert");
const path = require("path");
const Database = require("better-sqlite3");
const [modulePath, tmp] = process.argv.slice(2);

const boot = new Database(":memory:");
boot.loadExtension(modulePath);
const version = boot.prepare("select depot_version() as v").get().v;
assert.match(version, /^\d+\.\d+\.\d+$/);

// A KV table, and the transaction-handle functions.
const kv = path.join(tmp, "kvs");
boot.exec(`create virtual table acct using kv_memory(dir='${kv}')`);
boot.exec("insert into acct values ('a', 1), ('b', 2)");
assert.strictEqual(boot.prepare("select sum(value) as s from acct").get().s, 3);
const h = boot.prepare("select kv_begin(?) as h").get(kv).h;
boot.prepare("select kv_put(?, 'acct', 'c', 4)").get(h);
assert.strictEqual(boot.prepare("select kv_get(?, 'acct', 'c') as v").get(h).v, 4);
boot.prepare("select kv_commit(?)").get(h);
assert.deepStrictEqual(
  boot.prepare("select key from acct order by key").all().map(r => r.key),
  ["a", "b", "c"]);

// A depot database by plain name: store app.depot, database main, branch main.
const store = path.join(tmp, "app.depot");
assert.strictEqual(boot.prepare("select depot_default_vfs(1) as v").get().v, "depot");
const db = new Database(store);
assert.notStrictEqual(boot.prepare("select depot_default_vfs(0) as v").get().v, "depot");
db.exec("create table t(x); insert into t values (1)");

// Fork it and write the fork only.
const id = boot.prepare("select depot_fork(?, 'main', 'main', 'try') as id").get(store).id;
assert.strictEqual(id, 2);
boot.prepare("select depot_default_vfs(1, 'branch=try')").get();
const fork = new Database(store);
boot.prepare("select depot_default_vfs(0)").get();
fork.exec("insert into t values (2)");

const xs = (d) => d.prepare("select x from t order by x").all().map(r => r.x);
assert.deepStrictEqual(xs(db), [1]);
assert.deepStrictEqual(xs(fork), [1, 2]);
const branches = boot.prepare(
  "select branch, parent from depot_branches(?) order by branch_id").all(store);
assert.deepStrictEqual(branches, [{ branch: "main", parent: null },
                                  { branch: "try", parent: 1 }]);
assert.strictEqual(fork.pragma("integrity_check", { simple: true }), "ok");
fork.close(); db.close(); boot.close();
console.log("node", process.version, "better-sqlite3",
            require("better-sqlite3/package.json").version, "depot", version);
