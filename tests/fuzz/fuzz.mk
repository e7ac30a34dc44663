## tests/fuzz/fuzz.mk -- GNU make rules of `make fuzz` (run by the fuzz
## target of tests/fuzz/local.mk with the build's variables; not part of
## the automake build).
##
## The library sources (DEPOT_SOURCES) are compiled with clang into
## tests/fuzz/build/ with ASan+UBSan and libFuzzer's coverage; each target
## tests/fuzz/fuzz_<t>.c is linked with them and libFuzzer into
## tests/fuzz/fuzz_<t>, then run for FUZZ_SECONDS against its committed
## seed corpus, new inputs going to tests/fuzz/work/<t>/.  A crash, a
## sanitizer report or a failed property stops the run with the input
## saved as tests/fuzz/work/<t>-crash-*.

FUZZ_CC ?= clang-14
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= wal_record ltx layout kv_codec sql_args
FUZZ_ARGS ?=

B := tests/fuzz/build
SRCS := $(filter %.c,$(DEPOT_SOURCES))
OBJS := $(patsubst %.c,$(B)/%.o,$(SRCS))
HDRS := $(wildcard $(srcdir)/*/*.h) config.h
SAN := -fsanitize=address,undefined -fno-sanitize-recover=all
FCFLAGS := -g -O1 -fno-omit-frame-pointer $(SAN) -DSQLITE_CORE \
	-I$(srcdir) -I. $(SQLITE3_CFLAGS) $(ZSTD_CFLAGS)
FLIBS := $(SQLITE3_LIBS) $(ZSTD_LIBS) -lpthread

all: check-cc $(addprefix run-,$(FUZZ_TARGETS))

check-cc:
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz: $(FUZZ_CC) not found \
	(Debian: clang-14 libclang-rt-14-dev; or make fuzz FUZZ_CC=clang)"; exit 1; }
build: $(addprefix tests/fuzz/fuzz_,$(FUZZ_TARGETS))

$(B)/%.o: $(srcdir)/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FCFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

tests/fuzz/fuzz_%: $(srcdir)/tests/fuzz/fuzz_%.c $(OBJS) $(HDRS)
	$(FUZZ_CC) $(FCFLAGS) -fsanitize=fuzzer $< $(OBJS) $(FLIBS) -o $@

# One bounded run; prints the executions, the corpus size and the
# coverage reached.  Paths are absolute: the sql_args target changes the
# working directory, and libFuzzer opens corpus files as it goes.
W = $(abspath tests/fuzz/work)
run-%: tests/fuzz/fuzz_%
	@mkdir -p tests/fuzz/work/$* tests/tmp
	@echo "fuzz $*: $(FUZZ_SECONDS) s"
	@DEPOT_TEST_TMPDIR=$(abspath tests/tmp) ./tests/fuzz/fuzz_$* \
	  -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix=$(W)/$*- $(FUZZ_ARGS) \
	  $(W)/$* $(abspath $(srcdir)/tests/fuzz/corpus/$*) \
	  >tests/fuzz/work/$*.log 2>&1 \
	  || { tail -n 60 tests/fuzz/work/$*.log; exit 1; }
	@grep -E '^#[0-9]+[[:space:]]+DONE' tests/fuzz/work/$*.log | tail -n 1
	@grep -E 'stat::number_of_executed_units|stat::average_exec_per_sec' \
	  tests/fuzz/work/$*.log

.PHONY: all build check-cc
.SECONDARY:
