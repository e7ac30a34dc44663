# python_env.sh -- sourced by the Python test scripts: picks the system
# Python ($py) whose sqlite3 module can load extensions (else exits 77,
# skip), checks DEPOT_MODULE, preloads the sanitizer runtime a sanitizer
# build's module needs, and makes a scratch directory $tmp named after $name,
# removed on exit.
py=${SYSTEM_PYTHON3:-/usr/bin/python3}
[ -x "$py" ] || py=/usr/bin/python3
if [ ! -x "$py" ]; then
  echo "SKIP: no system python3"; exit 77
fi
if ! "$py" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension(True)' 2>/dev/null; then
  echo "SKIP: $py's sqlite3 module cannot load extensions"; exit 77
fi
: "${DEPOT_MODULE:?DEPOT_MODULE is not set}"
case "${DEPOT_SANITIZER:-none}" in
  asan|tsan)
    LD_PRELOAD=$(${DEPOT_CC:-cc} -print-file-name=lib${DEPOT_SANITIZER}.so)
    export LD_PRELOAD
    ASAN_OPTIONS=detect_leaks=0; export ASAN_OPTIONS ;;
esac
tmp=${DEPOT_TEST_TMPDIR:-tests/tmp}
mkdir -p "$tmp" && tmp=$(mktemp -d "$tmp/$name.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
