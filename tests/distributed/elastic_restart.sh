#!/usr/bin/env bash
# The fault test of docs/distributed.md ("Surviving a killed rank"), run by ctest as distributed_restart_after_kill:
#   elastic_restart.sh LAUNCHER TRAINER WORK_DIR
# 1. straight: elastic_trainer on 2 ranks under tools/tapegrad_run, uninterrupted (3 epochs of 12 steps, a
#    checkpoint every 5 steps);
# 2. killed: the same run, in which a random rank SIGKILLs itself during a random step; tapegrad_run must restart
#    the job once, the restart must resume from the last checkpoint before the kill, and the final state (model,
#    optimizer, schedule, position, every rank's generators) must be bit-identical with the straight run's. The
#    time lost is measured and printed against its bound (checkpoint interval + restart time);
# 3. shrunk: the same fault, restarted on 1 rank: the run must finish from the 2-rank checkpoint, training every
#    step on the same global batch as the straight run (the sampler re-sharded; compared by the digests of the
#    batches' samples), and end close to it but not identical (docs: fewer ranks are not bit-identical).
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

# The time lost: the killed run's time from its first start to its end minus the straight run's (the program's own
# clock: mpirun's first start-up and last teardown, the same in both, are left out as noise). Its parts: the work
# redone (from the last
# checkpoint to the kill) and the restart time (detection, relaunch, start-up, resume and warm-up: from the kill
# until the restarted job reaches the next checkpoint, minus the time the straight run took between those two
# checkpoints). The bound: the checkpoint interval (the straight run's mean time between checkpoints) plus that
# restart time.
# event_time LOG STEP first|last: when the run reached STEP (Unix ms): its start (0), a checkpoint, or the end.
event_time() {
  local pattern="checkpoint at step $2 "
  if (( $2 == 0 )); then pattern="no checkpoint, step 0"; elif (( $2 == total )); then pattern="done, $total steps"; fi
  grep -- "$pattern" "$1" | if [[ $3 == first ]]; then head -1; else tail -1; fi | sed -E 's/.* at ([0-9]+).*/\1/'
}
run_ms() { echo $(( $(event_time "$1" "$total" last) - $(grep -m1 'start at' "$1" | sed -E 's/.* at ([0-9]+).*/\1/') )); }
straight_ms=$(run_ms straight.log)
killed_ms=$(run_ms killed.log)
interval_ms=$(( ($(event_time straight.log $(( total / every * every )) last) - $(event_time straight.log $every last)) /
                (total / every - 1) ))
next_checkpoint=$(( last_checkpoint + every > total ? total : last_checkpoint + every ))
kill_time=$(grep -m1 "SIGKILLs itself" killed.log | sed -E 's/.* at ([0-9]+).*/\1/')
redone_ms=$(( kill_time - $(event_time killed.log $last_checkpoint first) ))
# The straight run's time for the checkpoint interval the kill fell in (the same steps; for a kill before the first
# checkpoint, its start-up and first steps too, which the killed run's first attempt also paid).
segment_ms=$(( $(event_time straight.log $next_checkpoint last) - $(event_time straight.log $last_checkpoint last) ))
restart_ms=$(( $(event_time killed.log $next_checkpoint last) - kill_time - segment_ms ))
lost_ms=$(( killed_ms - straight_ms ))
echo "time lost: ${lost_ms} ms (killed run ${killed_ms} ms - straight run ${straight_ms} ms, from the first start to" \
     "the end; wall times with the launcher $(cat killed.ms) and $(cat straight.ms) ms); its parts: work redone" \
     "${redone_ms} ms (checkpoint at step ${last_checkpoint} -> kill) + restart ${restart_ms} ms = $(( redone_ms + restart_ms ))" \
     "ms; bound: checkpoint interval ${interval_ms} ms (${every} steps) + restart ${restart_ms} ms =" \
     "$(( interval_ms + restart_ms )) ms; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Note: run times on a shared machine are noisy, so the checks are on the parts: the work redone is bounded by the
# time the straight run took for the same checkpoint interval (steps last_checkpoint .. next_checkpoint). Not by
# the mean interval: a kill before the first checkpoint redoes the start-up and the slow first steps, which the
# mean interval leaves out (a sanitized run at load ~3 redid 1233 ms against a 223-ms mean interval).
check "the work redone (${redone_ms} ms) is at most the straight run's time for that interval (${segment_ms} ms), with 1 s for noise" \
  test "$redone_ms" -le $(( segment_ms + 1000 ))

check "the run restarted on 1 rank succeeds" \
  run shrunk --max-restarts 1 --restart-nproc 1 -- --kill-rank $kill_rank --kill-step $kill_step --compare ../straight/final.ckpt
if (( last_checkpoint > 0 )); then
  check "the 1-rank restart resumed the 2-rank checkpoint" grep -q "written by 2 ranks" shrunk.log
fi
# The same global batches, step by step (the last attempt's digest of each step; batches.txt is appended to).
last_digests() { awk '{ d[$2] = $0 } END { for (s in d) print d[s] }' "$1" | sort -k2,2n; }
check "every step of the killed run trained the straight run's global batch" \
  cmp <(last_digests straight/batches.txt) <(last_digests killed/batches.txt)
check "every step of the 1-rank restart trained the 2-rank run's global batch (the sampler re-sharded)" \
  cmp <(last_digests straight/batches.txt) <(last_digests shrunk/batches.txt)
# Note: not bit-identical (sums in another order, rank 1's noise stream gone, rank 0 drawing the noise and the
# augmentation of all 32 images), but the same run with other noise: measured 0.001-0.17 (the larger the earlier
# the kill), against 0 for a 2-rank restart.
difference=$(grep -m1 "parameters' relative difference" shrunk.log | sed -E 's/.*: ([-0-9.e+]+)$/\1/')
check "the 1-rank restart ends close to, not identical with, the 2-rank run (relative difference $difference in (0, 0.5))" \
  awk -v d="$difference" 'BEGIN { exit !(d > 0 && d < 0.5) }'

if (( failures > 0 )); then
  echo "$failures check(s) failed (fault seed $seed; replay: TAPEGRAD_FAULT_SEED=$seed)"
  exit 1
fi
echo "all checks passed (fault seed $seed)"
