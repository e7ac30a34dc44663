#!/bin/sh
# torture_smoke.sh -- make check's short run of the crash-torture runner:
# 120 crash points (power loss and SIGKILL) of a 20-step workload and every
# 9th call site of the I/O-error sweep, then 45 rounds of the
# mixed-transaction oracle.  make torture runs the full ones.
./tests/torture/torture --smoke "$@" || exit 1
exec ./tests/torture/torture_mixed --smoke
