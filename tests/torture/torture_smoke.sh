#!/bin/sh
# torture_smoke.sh -- make check's short run of the crash-torture runner:
# 120 crash points (power loss and SIGKILL) of a 20-step workload and every
# 9th call site of the I/O-error sweep.  make torture runs the full one.
exec ./tests/torture/torture --smoke "$@"
