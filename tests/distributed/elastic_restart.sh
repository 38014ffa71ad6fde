#!/usr/bin/env bash
# The fault test of docs/distributed.md ("Surviving a killed rank"), run by ctest as distributed_restart_after_kill:
#   elastic_restart.sh LAUNCHER TRAINER WORK_DIR
# 1. straight: elastic_trainer on 2 ranks under tools/tapegrad_run, uninterrupted (3 epochs of 12 steps, a
#    checkpoint every 5 steps);
# 2. killed: the same run, in which a random rank SIGKILLs itself during a random step; tapegrad_run must restart
#    the job once, the restart must resume from the last checkpoint before the kill, and the final state (model,
#    optimizer, schedule, position, every rank's generators) must be bit-identical with the straight run's. The
#    time lost is measured and printed against its bound (checkpoint interval + restart time);
# 3. shrunk: the same fault, restarted on 1 rank: the run must finish from the 2-rank checkpoint, close to the
#    straight run but not identical (docs: restarting with fewer ranks is not bit-identical).
# The random choice is seeded and printed; TAPEGRAD_FAULT_SEED=<seed> replays it.
set -euo pipefail

launcher=$1
trainer=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
cd "$work"

seed=${TAPEGRAD_FAULT_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
RANDOM=$seed
ranks=2
epochs=3
steps_per_epoch=12
every=5
total=$(( epochs * steps_per_epoch ))
kill_rank=$(( RANDOM % ranks ))
kill_step=$(( 1 + RANDOM % total ))
last_checkpoint=$(( (kill_step - 1) / every * every ))
echo "fault seed $seed: rank $kill_rank is killed in step $kill_step of $total; the last checkpoint before it is" \
     "at step $last_checkpoint (replay: TAPEGRAD_FAULT_SEED=$seed)"

failures=0
check() {  # description, then a command that must succeed
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$(( failures + 1 )); fi
}

# run NAME LAUNCHER-OPTIONS... -- TRAINER-OPTIONS...: runs in NAME/, output in NAME.log, wall time (ms) in NAME.ms.
run() {
  local name=$1
  shift
  local launch=()
  while [[ $1 != -- ]]; do launch+=("$1"); shift; done
  shift
  mkdir -p "$name"
  local start end status=0
  start=$(date +%s%3N)
  (cd "$name" && "$launcher" --nproc $ranks --mpirun-arg --oversubscribe --mpirun-arg --allow-run-as-root \
                 "${launch[@]}" -- "$trainer" --epochs $epochs --every-steps $every "$@") >"$name.log" 2>&1 || status=$?
  end=$(date +%s%3N)
  echo $(( end - start )) >"$name.ms"
  sed "s/^/  $name| /" "$name.log"
  return $status
}

# The first number after "at" on the first line of LOG matching PATTERN (Unix milliseconds).
time_of() { grep -m1 -- "$2" "$1" | sed -E 's/.* at ([0-9]+).*/\1/'; }

check "the uninterrupted run succeeds" run straight --max-restarts 0 --
check "the killed run succeeds after restarts" \
  run killed --max-restarts 2 -- --kill-rank $kill_rank --kill-step $kill_step
check "rank $kill_rank killed itself in step $kill_step" grep -q "rank $kill_rank SIGKILLs itself in step $kill_step " killed.log
check "tapegrad_run restarted the job exactly once" \
  bash -c "grep -q 'restart 1 of 2' killed.log && ! grep -q 'restart 2 of 2' killed.log"
if (( last_checkpoint > 0 )); then
  check "the restart resumed at step $last_checkpoint" grep -q "resumed at step $last_checkpoint " killed.log
else
  check "the restart started over (the kill came before the first checkpoint)" \
    bash -c "[[ \$(grep -c 'no checkpoint, step 0' killed.log) == 2 ]]"
fi
check "the final state is bit-identical with the uninterrupted run's" cmp straight/final.ckpt killed/final.ckpt

# The time lost: the killed run's wall time minus the straight run's. Its bound: the checkpoint interval (the
# straight run's time between consecutive checkpoints) plus the restart time (kill -> the restarted job resumed).
straight_ms=$(cat straight.ms)
killed_ms=$(cat killed.ms)
checkpoint_times=($(grep 'checkpoint at step' straight.log | sed -E 's/.* at step [0-9]+ at ([0-9]+).*/\1/'))
interval_ms=$(( (checkpoint_times[-1] - checkpoint_times[0]) / (${#checkpoint_times[@]} - 1) ))
kill_time=$(time_of killed.log "SIGKILLs itself")
if (( last_checkpoint > 0 )); then
  checkpoint_time=$(time_of killed.log "checkpoint at step $last_checkpoint ")
  resumed_time=$(time_of killed.log "resumed at step")
else
  checkpoint_time=$(time_of killed.log "no checkpoint, step 0")
  resumed_time=$(grep 'no checkpoint, step 0' killed.log | tail -1 | sed -E 's/.* at ([0-9]+).*/\1/')
fi
restart_ms=$(( resumed_time - kill_time ))
redone_ms=$(( kill_time - checkpoint_time ))
lost_ms=$(( killed_ms - straight_ms ))
echo "time: straight run ${straight_ms} ms, killed run ${killed_ms} ms: ${lost_ms} ms lost;" \
     "bound: checkpoint interval ${interval_ms} ms (${every} steps) + restart time ${restart_ms} ms" \
     "(kill -> resumed) = $(( interval_ms + restart_ms )) ms; work redone: ${redone_ms} ms since the checkpoint" \
     "at step ${last_checkpoint}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Note: both wall times carry start-up costs and the machine's noise; the part the bound is about, the work done
# since the last checkpoint, must not exceed the interval (with a margin for a loaded machine).
check "the work redone (${redone_ms} ms) is at most the checkpoint interval (${interval_ms} ms) + 1 s" \
  test "$redone_ms" -le $(( interval_ms + 1000 ))

check "the run restarted on 1 rank succeeds" \
  run shrunk --max-restarts 1 --restart-nproc 1 -- --kill-rank $kill_rank --kill-step $kill_step --compare ../straight/final.ckpt
if (( last_checkpoint > 0 )); then
  check "the 1-rank restart resumed the 2-rank checkpoint" grep -q "written by 2 ranks" shrunk.log
fi
difference=$(grep -m1 'largest |difference|' shrunk.log | sed -E 's/.*: ([-0-9.e+]+)$/\1/')
check "the 1-rank restart ends close to the 2-rank run (largest |difference| $difference < 0.05)" \
  awk -v d="$difference" 'BEGIN { exit !(d >= 0 && d < 0.05) }'

if (( failures > 0 )); then
  echo "$failures check(s) failed (fault seed $seed; replay: TAPEGRAD_FAULT_SEED=$seed)"
  exit 1
fi
echo "all checks passed (fault seed $seed)"
