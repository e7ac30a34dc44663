#!/bin/sh
# sqldoc.sh -- make check's test of docs/SQL.md: generates the reference
# from sql/reference/ (running every example) into a temporary file, and
# fails with a diff when the checked-in docs/SQL.md differs from it.  Run
# make sql-doc to regenerate the file, then commit it.
srcdir=${srcdir:-.}
tmp=${DEPOT_TEST_TMPDIR:-tests/tmp}
mkdir -p "$tmp" || exit 1
out=`mktemp "$tmp/SQL.md.XXXXXX"` || exit 1
if ! ./tests/check/sqldoc "$srcdir/sql/reference" "$out"; then
  rm -f "$out"
  echo "sqldoc.sh: generating the SQL reference failed"
  exit 1
fi
if diff -u "$srcdir/docs/SQL.md" "$out"; then
  rm -f "$out"
  echo "sqldoc.sh: docs/SQL.md matches sql/reference"
  exit 0
fi
rm -f "$out"
echo "sqldoc.sh: docs/SQL.md differs from a fresh generation: run make sql-doc"
exit 1
