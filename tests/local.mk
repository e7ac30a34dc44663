## tests/ -- check/ (Check suites), bench/, torture/, bindings/, fuzz/.
##
## Each subfolder's local.mk adds its programs; this file holds what they
## share: the test environment and make valgrind.

TEST_HARNESS = tests/check/harness.c tests/check/harness.h
TEST_LDADD = libdepot_core.la $(CHECK_LIBS) $(SQLITE3_LIBS) $(ZSTD_LIBS) $(LIBPQ_LIBS)
AM_CPPFLAGS += $(CHECK_CFLAGS)

# Every test sees the built module, the shell, and a scratch directory.
# CK_DEFAULT_TIMEOUT is generous: sanitizer builds run 3-10x slower.
AM_TESTS_ENVIRONMENT = \
	DEPOT_MODULE='$(abs_top_builddir)/.libs/depot.so'; export DEPOT_MODULE; \
	DEPOT_CLI='$(abs_top_builddir)/depot$(EXEEXT)'; export DEPOT_CLI; \
	DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp'; export DEPOT_TEST_TMPDIR; \
	DEPOT_SANITIZER='$(DEPOT_SANITIZER)'; export DEPOT_SANITIZER; \
	DEPOT_CC='$(CC)'; export DEPOT_CC; \
	SYSTEM_PYTHON3='$(SYSTEM_PYTHON3)'; export SYSTEM_PYTHON3; \
	CK_DEFAULT_TIMEOUT=$${CK_DEFAULT_TIMEOUT:-300}; export CK_DEFAULT_TIMEOUT; \
	CK_FORK=$${CK_FORK:-yes}; export CK_FORK;

# make valgrind: every test program under Valgrind memcheck in one process
# (CK_FORK=no), leak checking on.  Any memory error fails (in the program
# or in a child a test forks: the child then exits 1 and its test fails);
# any leak at the exit of the program fails.  Leaks of the children that
# tests fork and kill or let exit mid-test are not counted: their logs are
# kept but not checked.  Reports go to tests/<program>.valgrind.<pid>.
# tests/valgrind.supp holds suppressions for third-party noise only.  A few
# minutes on 2 cores (figures in docs/RELIABILITY.md); not part of make check.
# VALGRIND_FLAGS+=--track-origins=yes helps read a report.
VALGRIND = valgrind
VALGRIND_FLAGS = --error-exitcode=1 --leak-check=full \
	--show-leak-kinds=definite,indirect,possible \
	--errors-for-leak-kinds=none --num-callers=30 \
	--suppressions=$(srcdir)/tests/valgrind.supp
EXTRA_DIST += tests/valgrind.supp
# The crash-torture runner under memcheck: its self-check, a few crash
# points and a sparse I/O-error sweep (the crash children it kills are
# not leak-checked; one that finishes with a memory error fails its round).
VALGRIND_TORTURE_ARGS = --smoke --points 8 --steps 8 --sweep-steps 4 \
	--sweep-stride 25

valgrind: $(check_PROGRAMS) depot.la depot$(EXEEXT)
	@mkdir -p tests/tmp
	@fail=; for p in $(check_PROGRAMS); do \
	  b=`echo $$p | sed 's|/|_|g'`; rm -f tests/$$b.valgrind.*; \
	  echo "== valgrind $$p"; \
	  a=; if test $$p = tests/torture/torture; then a='$(VALGRIND_TORTURE_ARGS)'; fi; \
	  DEPOT_MODULE='$(abs_top_builddir)/.libs/depot.so' \
	  DEPOT_CLI='$(abs_top_builddir)/depot$(EXEEXT)' \
	  DEPOT_TEST_TMPDIR='$(abs_top_builddir)/tests/tmp' \
	  DEPOT_SANITIZER=valgrind CK_FORK=no srcdir='$(srcdir)' \
	  $(VALGRIND) $(VALGRIND_FLAGS) --log-file=tests/$$b.valgrind.%p \
	    ./$$p$(EXEEXT) $$a >tests/$$b.valgrind-out 2>&1 & pid=$$!; \
	  wait $$pid; rc=$$?; \
	  grep -E '^[0-9]+%: Checks:|inputs fed|^torture: seed [0-9]+:' \
	    tests/$$b.valgrind-out; \
	  grep -E 'ERROR SUMMARY|definitely lost|indirectly lost|possibly lost' \
	    tests/$$b.valgrind.$$pid | sed 's/^==[0-9]*== /  /'; \
	  if grep -qE '(definitely|indirectly|possibly) lost: [1-9]' \
	       tests/$$b.valgrind.$$pid; then rc=1; fi; \
	  if test $$rc != 0; then fail="$$fail $$p"; fi; \
	done; \
	if test -n "$$fail"; then echo "valgrind: failed:$$fail"; exit 1; fi; \
	echo "valgrind: all clean"
.PHONY: valgrind

include tests/check/local.mk
include tests/bench/local.mk
include tests/torture/local.mk
include tests/bindings/local.mk
include tests/fuzz/local.mk
