## sql/ -- SQL text shipped with the product.
##
##   store_schema.sql  what the embedded outer store executes when it opens
##                     its file writable; compiled in as sql/store_schema.h
##                     (the macro STORE_SCHEMA_SQL), made in the build tree
##                     by sql2h.awk before anything is compiled
##   quickstart.sql    the tour `make demo` runs through the sqlite3 shell
##   test/NAME.sql     SQL regression scripts, with their expected output
##                     test/NAME.out (run by tests/check/sqltest.sh)
BUILT_SOURCES += sql/store_schema.h
CLEANFILES += sql/store_schema.h
EXTRA_DIST += sql/store_schema.sql sql/sql2h.awk sql/quickstart.sql sql/test

sql/store_schema.h: $(srcdir)/sql/store_schema.sql $(srcdir)/sql/sql2h.awk
	$(AM_V_GEN)$(MKDIR_P) sql && \
	  $(AWK) -v name=STORE_SCHEMA_SQL -v src=sql/store_schema.sql \
	    -f $(srcdir)/sql/sql2h.awk $(srcdir)/sql/store_schema.sql >$@-t && \
	  mv -f $@-t $@

# The reference entries of docs/SQL.md with their example SQL (make sql-doc).
EXTRA_DIST += sql/reference
