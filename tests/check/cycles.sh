#!/bin/sh
# cycles.sh -- the call-circle check: no group of source files of the
# product calls each other in a loop.
#
# Reads the symbol tables (nm -P) of the objects of the shipped module
# depot.la, one per .c file of the product folders (wal/, ext/kv/,
# vfs/store/, vfs/, ext/) under $srcdir, and builds the graph "source file
# A references a symbol that source file B defines" (A != B).  Its strongly
# connected components of two files or more are the groups of files that
# reach each other through calls or data references; each is listed with
# the references between its members (file -> file: symbols), and the
# check fails.  The symbol sqlite3_api is not a reference between files:
# it is the extension-API pointer that SQLITE_EXTENSION_INIT1 defines in
# ext/depot.c and every file of a loadable module uses.
#
# The objects are found from the libtool objects of the build tree (the
# current directory, the top of the build tree under make check):
# DIR/depot_la-NAME.lo or DIR/NAME.lo, whose pic_object (else
# non_pic_object) is the object file.  DEPOT_NM names the nm program
# (default nm).
#
# Exit status: 0 no loop, 1 loops (all listed), 99 an object is missing
# (build first) or nm failed.

srcdir=${srcdir:-.}
NM=${DEPOT_NM:-nm}
LAYERS="wal ext/kv vfs/store vfs ext"

if test ! -f "$srcdir/wal/wal.h"; then
  echo "cycles: no source tree at srcdir=$srcdir" >&2
  exit 99
fi

# The object file of source $1 (relative to the tree), or nothing.
objectOf() {
  d=`dirname "$1"`
  b=`basename "$1" .c`
  for lo in "$d/depot_la-$b.lo" "$d/$b.lo"; do
    test -f "$lo" || continue
    o=`sed -n "s/^pic_object='\\(.*\\)'\$/\\1/p" "$lo"`
    if test -z "$o" || test "$o" = none; then
      o=`sed -n "s/^non_pic_object='\\(.*\\)'\$/\\1/p" "$lo"`
    fi
    if test -n "$o" && test "$o" != none && test -f "$d/$o"; then
      echo "$d/$o"
      return
    fi
  done
}

tmp=${TMPDIR:-/tmp}/cycles.$$
trap 'rm -f "$tmp"' EXIT
trap 'exit 1' INT TERM
: >"$tmp"
for d in $LAYERS; do
  for f in "$srcdir/$d"/*.c; do
    test -f "$f" || continue
    src="$d/`basename "$f"`"
    obj=`objectOf "$src"`
    if test -z "$obj"; then
      echo "cycles: no object of $src in the build tree (run make first)" >&2
      exit 99
    fi
    echo "@ $src" >>"$tmp"
    if ! $NM -P "$obj" >>"$tmp"; then
      echo "cycles: $NM -P $obj failed" >&2
      exit 99
    fi
  done
done

awk '
# Tarjan: strongly connected components of the file graph.
function visit(v,    k, w){
  idx[v] = low[v] = ++nIdx
  stack[++nStack] = v
  onStack[v] = 1
  for(k=1; k<=nOut[v]; k++){
    w = out[v, k]
    if( !(w in idx) ){
      visit(w)
      if( low[w]<low[v] ) low[v] = low[w]
    }else if( onStack[w] && idx[w]<low[v] ){
      low[v] = idx[w]
    }
  }
  if( low[v]==idx[v] ){
    nComp++
    nMember[nComp] = 0
    do{
      w = stack[nStack--]
      onStack[w] = 0
      comp[w] = nComp
      member[nComp, ++nMember[nComp]] = w
    }while( w!=v )
  }
}

$1=="@" { f = ++nFile; zName[f] = $2; next }
# nm -P: name type [value size]
$2=="U" || $2=="w" || $2=="v" { if( $1!="sqlite3_api" ) ref[f, $1] = 1; next }
$2 ~ /^[A-TV-Zu]$/ { definer[$1] = f; next }

END {
  for(key in ref){
    split(key, a, SUBSEP)
    if( !(a[2] in definer) ) continue
    from = a[1] + 0
    to = definer[a[2]]
    if( from==to ) continue
    if( !((from, to) in edge) ){
      edge[from, to] = 1
      out[from, ++nOut[from]] = to
    }
    syms[from, to] = syms[from, to] " " a[2]
  }
  # Same order of visits on every run: neighbours sorted by file number.
  for(v=1; v<=nFile; v++){
    for(i=2; i<=nOut[v]; i++){
      for(j=i; j>1 && out[v, j-1]>out[v, j]; j--){
        t = out[v, j]; out[v, j] = out[v, j-1]; out[v, j-1] = t
      }
    }
  }
  for(v=1; v<=nFile; v++) if( !(v in idx) ) visit(v)

  nLoop = 0
  for(c=1; c<=nComp; c++){
    if( nMember[c]<2 ) continue
    nLoop++
    # members in file order
    for(i=2; i<=nMember[c]; i++){
      for(j=i; j>1 && member[c, j-1]>member[c, j]; j--){
        t = member[c, j]; member[c, j] = member[c, j-1]; member[c, j-1] = t
      }
    }
    line = ""
    for(i=1; i<=nMember[c]; i++) line = line " " zName[member[c, i]]
    printf "cycles: loop %d, %d files:%s\n", nLoop, nMember[c], line
    for(i=1; i<=nMember[c]; i++){
      v = member[c, i]
      for(k=1; k<=nOut[v]; k++){
        w = out[v, k]
        if( comp[w]!=c ) continue
        n = split(substr(syms[v, w], 2), s, " ")
        for(x=2; x<=n; x++){          # symbols sorted by name
          for(y=x; y>1 && s[y-1]>s[y]; y--){ t = s[y]; s[y] = s[y-1]; s[y-1] = t }
        }
        list = s[1]
        for(x=2; x<=n && x<=4; x++) list = list ", " s[x]
        if( n>4 ) list = list sprintf(" and %d more", n-4)
        printf "  %s -> %s: %s\n", zName[v], zName[w], list
      }
    }
  }
  if( nLoop==0 ){
    printf "cycles: no loop among the %d source files\n", nFile
    exit 0
  }
  printf "cycles: %d group%s of source files call each other in a loop\n", \
         nLoop, nLoop==1 ? "" : "s"
  exit 1
}
' "$tmp"
