#!/usr/bin/env bash
# `make test`: every test of pytest's default selection, in two lanes at once on this machine.
#
# The fleet tests are real time (callers that speak and listen at the pace of speech), so on 2 cores they leave
# about 0.8 of a core idle (1.17 cores busy on average: bench/results/cpu-probes-2026-11-28-amd/cpu_account.py). The
# `background` lane (tests marked so: CPU work with no clock in it, e.g. golden audio, promtool's rule tests,
# kustomize renders) runs beside them under SCHED_IDLE, so it only takes CPU the main lane leaves idle and never
# starves a real-time test. Its output goes to build/test-background.log and is printed after the main lane's.
# Plain `pytest` (no TEST_LANE) still runs everything in one process.
set -u
python=${1:?usage: scripts/test-lanes.sh PYTHON [pytest args]}
shift
mkdir -p build
log=build/test-background.log
if command -v chrt >/dev/null && chrt --idle 0 true 2>/dev/null; then
  idle=(chrt --idle 0)
else
  idle=(nice -n 19)  # no SCHED_IDLE here (not Linux): the lowest nice value instead
fi
TEST_LANE=background "${idle[@]}" "$python" -m pytest -p no:cacheprovider "$@" >"$log" 2>&1 &
background=$!
trap 'kill "$background" 2>/dev/null' INT TERM
TEST_LANE=main "$python" -m pytest "$@"
main=$?
echo "=== waiting for the background lane (build/test-background.log) ==="
wait "$background"
back=$?
cat "$log"
echo "=== main lane: exit $main; background lane: exit $back ==="
# pytest's exit 5 (nothing collected) counts as a failure: each lane must have run something.
[ "$main" = 0 ] && [ "$back" = 0 ]
