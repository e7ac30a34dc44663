#!/bin/sh
# sqltest.sh -- the SQL regression scripts: each sql/test/NAME.sql runs
# through the real sqlite3 shell with the built module loaded, and what it
# prints must be sql/test/NAME.out, byte for byte.
#
# Every script runs in a fresh scratch directory
# $DEPOT_TEST_TMPDIR/sqltest/NAME/ (stores it creates stay there; the
# module is linked in as ./depot.so, so a script may `.load ./depot` again
# after `.open`) as
#
#     $SQLITE3_SHELL -bail -init /dev/null -cmd '.load ./depot' :memory: \
#       < NAME.sql
#
# The text compared is the shell's standard output; then, if it wrote to
# standard error, a line "-- stderr" and those lines, with the shell's
# "Parse error near line N: " / "Runtime error near line N: " prefixes
# written "error: " and a runtime error's trailing " (CODE)" left out (so
# line numbers and shell versions do not matter); then, if it exited
# non-zero, a line "-- exit status N".  The path of the scratch directory
# reads SCRATCH wherever it appears.  Any error stops a script (-bail), and
# the output it did not print shows in the diff; a script that expects
# errors turns .bail off for the rest of it (once an error happened, the
# shell stops at the next statement if .bail is turned on again).
#
# On a difference the test fails with `diff -u expected actual`.  With
# SQLTEST_UPDATE=1 it writes the actual output into the .out files of the
# source tree instead (review them with git diff before committing).
# SQLTEST_ONLY=NAME runs one script.
#
# Environment (set by make check): srcdir, SQLITE3_SHELL, DEPOT_MODULE,
# DEPOT_TEST_TMPDIR.  Exit status: 0 all match, 1 a difference, 77 (skip)
# no sqlite3 shell, 99 the module or the scripts are missing.

srcdir=${srcdir:-.}
shell=${SQLITE3_SHELL:-`command -v sqlite3 2>/dev/null`}
module=${DEPOT_MODULE:-`pwd`/.libs/depot.so}
tmp=${DEPOT_TEST_TMPDIR:-`pwd`/tests/tmp}/sqltest

if test -z "$shell" || test "$shell" = no; then
  echo "sqltest: no sqlite3 shell (configure found none): skipped"
  exit 77
fi
if test ! -f "$module"; then
  echo "sqltest: no module at $module (build it first)" >&2
  exit 99
fi
case $module in
  /*) ;;
  *) module=`pwd`/$module ;;
esac
srcdir=`cd "$srcdir" && pwd` || exit 99   # the scripts run from elsewhere
set -- "$srcdir"/sql/test/*.sql
if test ! -f "$1"; then
  echo "sqltest: no scripts in $srcdir/sql/test" >&2
  exit 99
fi

# A sanitizer build's module needs the sanitizer runtime loaded first in
# a host that was not built with it (the leaks of the host are not ours).
case "${DEPOT_SANITIZER:-none}" in
  asan|tsan)
    LD_PRELOAD=`${DEPOT_CC:-cc} -print-file-name=lib${DEPOT_SANITIZER}.so`
    export LD_PRELOAD
    ASAN_OPTIONS=detect_leaks=0; export ASAN_OPTIONS ;;
esac

mkdir -p "$tmp" || exit 99
nFail=0
nRun=0
for script in "$@"; do
  name=`basename "$script" .sql`
  if test -n "$SQLTEST_ONLY" && test "$SQLTEST_ONLY" != "$name"; then
    continue
  fi
  expected=`dirname "$script"`/$name.out
  dir=$tmp/$name
  rm -rf "$dir" && mkdir "$dir" || exit 99
  ln -s "$module" "$dir/`basename "$module"`" || exit 99
  (
    cd "$dir" &&
    "$shell" -bail -init /dev/null -cmd '.load ./depot' :memory: \
      <"$script" >stdout 2>stderr
    rc=$?
    cat stdout
    if test -s stderr; then
      echo "-- stderr"
      sed -e 's/^Parse error near line [0-9]*: /error: /' \
          -e 's/^Runtime error near line [0-9]*: \(.*\) ([0-9]*)$/error: \1/' \
          -e 's/^Runtime error near line [0-9]*: /error: /' \
          -e 's/^Error: near line [0-9]*: /error: /' stderr
    fi
    if test $rc != 0; then
      echo "-- exit status $rc"
    fi
  ) >"$dir.raw"
  # The scratch directory's path (as given and as resolved) reads SCRATCH.
  real=`cd "$dir" && pwd -P`
  awk -v d1="$dir" -v d2="$real" '
    function swap(s, d,    i, out){
      out = ""
      while( d!="" && (i = index(s, d))>0 ){
        out = out substr(s, 1, i-1) "SCRATCH"
        s = substr(s, i+length(d))
      }
      return out s
    }
    { print swap(swap($0, d1), d2) }' "$dir.raw" >"$dir.actual"
  nRun=`expr $nRun + 1`
  if test -n "$SQLTEST_UPDATE"; then
    cp "$dir.actual" "$expected" && echo "sqltest: wrote $expected"
  elif test ! -f "$expected"; then
    echo "FAIL $name: no expected output $expected (SQLTEST_UPDATE=1 writes it)"
    nFail=`expr $nFail + 1`
  elif cmp -s "$expected" "$dir.actual"; then
    echo "PASS $name"
  else
    echo "FAIL $name: the output differs from $name.out:"
    diff -u "$expected" "$dir.actual"
    nFail=`expr $nFail + 1`
  fi
done

if test $nFail != 0; then
  echo "sqltest: $nFail of $nRun scripts failed (scratch files in $tmp)"
  exit 1
fi
echo "sqltest: $nRun scripts match their expected output"
exit 0
