#!/bin/sh
# layers.sh -- the include check: the product's layers depend on each other
# one way, through public headers only.
#
# Scans every .c and .h file of the five product folders (wal/, ext/kv/,
# vfs/store/, vfs/, ext/; not tests/) under $srcdir and fails, naming file
# and line, for each `#include "..."` that reaches
#   (a) a private header of another folder: any header of another folder
#       but that folder's public header(s)
#         wal/wal.h  ext/kv/kv.h  vfs/store/store.h  vfs/store/bytes.h  vfs/depot_vfs.h
#         ext/depot.h
#   (b) a folder its folder must not depend on:
#         wal/        nothing of the others
#         ext/kv/     wal/ only
#         vfs/store/  nothing of the others
#         vfs/        vfs/store/ only
#         ext/        ext/kv/ and vfs/ only (wal/ and vfs/store/ reach it
#                     through their public headers, never directly)
#   (c) a header of tests/ (product code never includes the tests' code).
# Headers outside these folders (config.h, sqlite3ext.h, the generated
# sql/*.h) are not layers and are not checked.  An include is resolved as
# the compiler does for quotes: next to the including file first, then
# from the top of the tree (-I$(srcdir)).
#
# Exit status: 0 clean, 1 violations (all listed), 99 the tree is missing.
# Runs from make check (srcdir set by the test harness) or by hand from the
# top of the source tree.

srcdir=${srcdir:-.}
LAYERS="wal ext/kv vfs/store vfs ext"

if test ! -f "$srcdir/wal/wal.h"; then
  echo "layers: no source tree at srcdir=$srcdir" >&2
  exit 99
fi

files=
for d in $LAYERS; do
  for f in "$srcdir/$d"/*.c "$srcdir/$d"/*.h; do
    test -f "$f" && files="$files $f"
  done
done

# shellcheck disable=SC2086  # $files is a list of paths without blanks
awk -v srcdir="$srcdir" '
function dirOf(p){ return p ~ /\// ? substr(p, 1, match(p, /\/[^\/]*$/)-1) : "." }

# Resolve "." and ".." in a relative path.
function normalize(p,    n, a, i, out, k, o){
  n = split(p, a, "/")
  k = 0
  for(i=1; i<=n; i++){
    if( a[i]=="" || a[i]=="." ) continue
    if( a[i]==".." && k>0 && o[k]!=".." ){ k--; continue }
    o[++k] = a[i]
  }
  out = ""
  for(i=1; i<=k; i++) out = out (i>1 ? "/" : "") o[i]
  return out
}

function exists(p,    line, r){
  r = (getline line < p)
  close(p)
  return r>=0
}

# The layer a path of the tree belongs to ("" when none of the five).
function layerOf(p){
  return (dirOf(p) in isLayer) ? dirOf(p) : ""
}

# What layer z may include, in words.
function allowed(z,    n, a, i, out){
  n = split(allow[z], a, " ")
  if( n==0 ) return "nothing of the other layers"
  out = ""
  for(i=1; i<=n; i++) out = out (i==1 ? "" : i==n ? " and " : ", ") a[i] "/"
  return out " only"
}

BEGIN {
  nLayer = split("wal ext/kv vfs/store vfs ext", aLayer, " ")
  for(i=1; i<=nLayer; i++) isLayer[aLayer[i]] = 1
  split("wal/wal.h ext/kv/kv.h vfs/store/store.h vfs/store/bytes.h vfs/depot_vfs.h ext/depot.h",
        aPub, " ")
  for(i in aPub){
    isPublic[aPub[i]] = 1
    d = dirOf(aPub[i])
    if( d in publicOf ) publicOf[d] = publicOf[d] " " aPub[i]
    else publicOf[d] = aPub[i]
  }
  allow["wal"] = ""
  allow["ext/kv"] = "wal"
  allow["vfs/store"] = ""
  allow["vfs"] = "vfs/store"
  allow["ext"] = "ext/kv vfs"
  nBad = 0
}

FNR==1 {
  zFile = FILENAME
  if( index(zFile, srcdir "/")==1 ) zFile = substr(zFile, length(srcdir)+2)
  zFile = normalize(zFile)
  zMine = layerOf(zFile)
}

/^[ \t]*#[ \t]*include[ \t]*"/ {
  zName = $0
  sub(/^[^"]*"/, "", zName)
  sub(/".*$/, "", zName)
  zHdr = normalize(dirOf(zFile) "/" zName)
  if( !exists(srcdir "/" zHdr) ) zHdr = normalize(zName)
  zTheirs = layerOf(zHdr)
  zWhy = ""
  if( zHdr ~ /^tests\// ){
    zWhy = "product code must not include the tests'"'"' headers"
  }else if( zTheirs!="" && zTheirs!=zMine ){
    if( !(zHdr in isPublic) ){
      zWhy = "a private header of " zTheirs "/ (its public header: " \
             publicOf[zTheirs] ")"
    }
    if( index(" " allow[zMine] " ", " " zTheirs " ")==0 ){
      zWhy = zWhy (zWhy!="" ? "; " : "") zMine "/ must not depend on " \
             zTheirs "/ (" zMine "/ may include " allowed(zMine) ")"
    }
  }
  if( zWhy!="" ){
    printf "%s:%d: includes %s: %s\n", zFile, FNR, zHdr, zWhy
    nBad++
    badFile[zFile] = 1
  }
}

END {
  if( nBad==0 ){
    print "layers: every include follows the layer rules"
    exit 0
  }
  nFile = 0
  for(f in badFile) nFile++
  printf "layers: %d include%s in %d file%s break the layer rules\n", \
         nBad, nBad==1 ? "" : "s", nFile, nFile==1 ? "" : "s"
  exit 1
}
' $files
