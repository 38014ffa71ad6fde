#!/usr/bin/env bash
# tools/tapegrad_run's own behaviour, run by ctest as tapegrad_run_launcher (the restart itself is
# elastic_restart.sh's test):
#   tapegrad_run_checks.sh LAUNCHER
# - a job that always fails is started 1 + --max-restarts times, then the launcher gives up with mpirun's status;
# - SIGTERM to the launcher stops the job (its ranks are gone) and is not followed by a restart;
# - TAPEGRAD_RESTART_COUNT counts the attempts; usage errors exit 2 with a message.
set -uo pipefail

launcher=$1
mpi=(--mpirun-arg --oversubscribe --mpirun-arg --allow-run-as-root)
failures=0
check() {  # description, then a command that must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$(( failures + 1 )); fi
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A rank that fails in every attempt, printing the attempt it is in.
"$launcher" --nproc 1 --max-restarts 2 "${mpi[@]}" -- bash -c 'echo "attempt $TAPEGRAD_RESTART_COUNT"; exit 3' \
  >"$work/fails.log" 2>&1
status=$?
sed 's/^/  fails| /' "$work/fails.log"
check "a job that always fails makes the launcher fail (status $status)" test "$status" -ne 0
check "it was started 3 times (1 + --max-restarts 2), with TAPEGRAD_RESTART_COUNT 0, 1, 2" \
  bash -c "[[ \$(grep '^attempt ' '$work/fails.log' | tr '\n' ' ') == 'attempt 0 attempt 1 attempt 2 ' ]]"
check "then it gave up" grep -q "no restarts left (2 allowed), giving up" "$work/fails.log"

# SIGTERM while the job runs: the ranks stop, and no restart follows.
"$launcher" --nproc 1 --max-restarts 3 "${mpi[@]}" -- bash -c 'echo started; echo $$ > '"$work/rank.pid"'; exec sleep 60' \
  >"$work/term.log" 2>&1 &
launcher_pid=$!
for _ in $(seq 100); do [[ -s "$work/rank.pid" ]] && break; sleep 0.1; done
rank_pid=$(cat "$work/rank.pid" 2>/dev/null)
kill -TERM "$launcher_pid"
wait "$launcher_pid"
status=$?
sed 's/^/  term| /' "$work/term.log"
check "the rank had started (pid ${rank_pid:-none})" test -n "$rank_pid"
check "SIGTERM makes the launcher fail (status $status)" test "$status" -ne 0
# (mpirun may exit while the kernel still tears its ranks down: give that a few seconds.)
for _ in $(seq 50); do kill -0 "${rank_pid:-0}" 2>/dev/null || break; sleep 0.1; done
check "the rank is gone" bash -c "! kill -0 '${rank_pid:-0}' 2>/dev/null"
check "no restart followed" bash -c "grep -q 'stopped by SIGTERM' '$work/term.log' && [[ \$(grep -c '^started' '$work/term.log') == 1 ]]"

# Usage errors.
"$launcher" --nproc 0 -- true >"$work/usage.log" 2>&1
status=$?
check "--nproc 0 is a usage error (status $status)" \
  bash -c "[[ $status == 2 ]] && grep -q -- '--nproc must be a positive integer' '$work/usage.log'"
"$launcher" --nproc 2 >"$work/usage.log" 2>&1
status=$?
check "no program is a usage error (status $status)" bash -c "[[ $status == 2 ]] && grep -q 'no program given' '$work/usage.log'"

if (( failures > 0 )); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
