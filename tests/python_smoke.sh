#!/bin/sh
# python_smoke.sh -- the system Python loads the built module and calls
# depot_version().  Skips (exit 77) only where no Python whose sqlite3 module
# can load extensions exists.
py=${SYSTEM_PYTHON3:-/usr/bin/python3}
[ -x "$py" ] || py=/usr/bin/python3
if [ ! -x "$py" ]; then
  echo "SKIP: no system python3"; exit 77
fi
if ! "$py" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension(True)' 2>/dev/null; then
  echo "SKIP: $py's sqlite3 module cannot load extensions"; exit 77
fi
: "${DEPOT_MODULE:?DEPOT_MODULE is not set}"
# A sanitizer build's module needs the sanitizer runtime loaded first.
case "${DEPOT_SANITIZER:-none}" in
  asan|tsan)
    LD_PRELOAD=$(${DEPOT_CC:-cc} -print-file-name=lib${DEPOT_SANITIZER}.so)
    export LD_PRELOAD
    ASAN_OPTIONS=detect_leaks=0; export ASAN_OPTIONS ;;
esac
exec "$py" - "$DEPOT_MODULE" <<'PY'
import sqlite3, sys
module = sys.argv[1]
con = sqlite3.connect(":memory:")
con.enable_load_extension(True)
con.load_extension(module)
(version,) = con.execute("select depot_version()").fetchone()
assert isinstance(version, str) and version.count(".") == 2, version
print("python", sys.version.split()[0], "sqlite", sqlite3.sqlite_version,
      "depot", version)
PY
