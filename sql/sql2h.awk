# sql2h.awk -- turns an SQL file into a C header that defines one string
# macro holding the file's statements, for the build (sql/local.mk).
#
#   awk -v name=MACRO -v src=PATH -f sql2h.awk FILE.sql > FILE.h
#
# Lines that are only a "--" comment and blank lines are left out; every
# other line goes into the string as written, followed by a newline, with
# backslashes and double quotes escaped.  src is the name the header's
# opening comment gives as its origin.
# s with every backslash and double quote escaped for a C string literal.
function cEscape(s,    i, c, out){
  out = ""
  for(i=1; i<=length(s); i++){
    c = substr(s, i, 1)
    out = out (c=="\\" || c=="\"" ? "\\" : "") c
  }
  return out
}

BEGIN {
  guard = name "_H"
  printf "/* Generated from %s by sql/sql2h.awk; do not edit. */\n", src
  printf "#ifndef %s\n#define %s\n#define %s \\\n", guard, guard, name
  n = 0
}
/^[ \t]*(--.*)?$/ { next }
{
  line = cEscape($0)
  if( n++ ) print zPrev " \\"
  zPrev = "  \"" line "\\n\""
}
END {
  if( n==0 ) zPrev = "  \"\""
  print zPrev
  printf "#endif\n"
}
