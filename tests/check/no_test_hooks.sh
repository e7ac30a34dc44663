#!/bin/sh
# no_test_hooks.sh -- the loadable module carries no test hook.
#
# The test hooks (ext/kv/kv_test.h, and wal_fault_* of wal/wal.h) are
# compiled only when DEPOT_TEST is defined, which the build does for
# libdepot_core.la alone.  Fails when depot.so exports or holds a hook
# function, or when an object of depot.la holds the static state behind
# the hooks.  So that it cannot pass by looking for names that no longer
# exist, it also fails when libdepot_core.la lacks one of them.
set -u
command -v nm >/dev/null 2>&1 || { echo "no_test_hooks: nm not found"; exit 77; }
mod=${DEPOT_MODULE:?DEPOT_MODULE is not set}
test -f "$mod" || { echo "no_test_hooks: $mod is not built"; exit 99; }
top=$(cd "$(dirname "$mod")/.." && pwd)

# The hook functions, and the static variables behind them.
HOOKS="kv_engine_test_io kv_engine_test_wal_config kv_engine_test_fail_apply
kv_engine_test_fault_receipt kv_btree_test_fail_writes
kv_btree_test_fail_writes_left kv_btree_test_fail_reads
kv_btree_test_overlay_limit kv_log_test_file_size wal_fault_new
wal_fault_free wal_fault_io wal_fault_arm wal_fault_count kv_coord_test_off
kv_ttl_test_interval kv_ttl_test_before_commit wal_crc32c_test_table
depot_cache_test_spill_fail
depot_ra_test_patient depot_ra_test_no_store"
STATE="engTestIo engTestWalCfg txnApplyFault verReceiptFault
verReceiptFaultDup btFailWrites btFailReads logTestSzFile coordTestOff
ttlTestBeforeCommit"

# Defined symbol names in the files given, one per line.
defined(){ nm "$@" 2>/dev/null | awk 'NF>=3 && $2!="U" && $2!="w" {print $3}'; }

tmp=${TMPDIR:-/tmp}/no_test_hooks.$$
mkdir -p "$tmp" || exit 99
trap 'rm -rf "$tmp"' EXIT
find "$top" -path '*/.libs/*.o' ! -name 'libdepot_core_la-*' >"$tmp/mobj"
find "$top" -path '*/.libs/libdepot_core_la-*.o' >"$tmp/cobj"
if ! test -s "$tmp/mobj" || ! test -s "$tmp/cobj"; then
  echo "no_test_hooks: no objects of depot.la or libdepot_core.la under $top"
  exit 99
fi
{ nm -D --defined-only "$mod" 2>/dev/null | awk 'NF>=3 {print $3}'
  defined "$mod"; } | sort -u >"$tmp/module"
xargs sh -c 'nm "$@" 2>/dev/null' sh <"$tmp/mobj" \
  | awk 'NF>=3 && $2!="U" && $2!="w" {print $3}' | sort -u >"$tmp/mstate"
xargs sh -c 'nm "$@" 2>/dev/null' sh <"$tmp/cobj" \
  | awk 'NF>=3 && $2!="U" && $2!="w" {print $3}' | sort -u >"$tmp/core"

fail=0
for s in $HOOKS; do
  if grep -qx "$s" "$tmp/module" || grep -qx "$s" "$tmp/mstate"; then
    echo "no_test_hooks: depot.so (or an object of depot.la) holds test" \
      "hook $s"; fail=1
  fi
  if ! grep -qx "$s" "$tmp/core"; then
    echo "no_test_hooks: libdepot_core.la lacks $s (is this list stale?)"
    fail=1
  fi
done
for s in $STATE; do
  if grep -qx "$s" "$tmp/mstate"; then
    echo "no_test_hooks: an object of depot.la holds test state $s"; fail=1
  fi
  if ! grep -qx "$s" "$tmp/core"; then
    echo "no_test_hooks: libdepot_core.la lacks $s (is this list stale?)"
    fail=1
  fi
done
test $fail = 0 && echo "no_test_hooks: depot.so has none of" \
  "$(echo $HOOKS $STATE | wc -w) test hook symbols"
exit $fail
