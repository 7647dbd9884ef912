#!/usr/bin/env bash
# The fair decode-balancing study (manual/features/decode_balancing.md, "Method"): every
# condition the results table has, one after another, in two nights on a 2-core machine.
#
#   bench/study-fair.sh                 # all of it (~8.9 h; it resumes where it stopped)
#   bench/study-fair.sh --night 2       # one night's steps (night 1 ~6.8 h, night 2 ~2.1 h)
#   bench/study-fair.sh --list          # the steps, their commands and budgets; runs nothing
#   bench/study-fair.sh scale-out unsaturated   # only these steps
#
# Needs a release build (cargo build --release -p infera-bench -p infera-control -p infera-proxy),
# `cargo xtask setup` (SMG, sglang-router) and `cargo xtask traces` (the agentic traces, in traces/). Each step writes OUT/STEP/ (stdout.log with the
# tables, study.json, the SVGs) and OUT/STEP/done when it finished; a finished step is skipped,
# so a night cut short resumes where it stopped. Nothing else should run on the machine meanwhile:
# the arms share its cores with whatever else does.
#
# Budget, at 10x (an arm-run is 1,000 emulated s: 100 s of wall clock plus ~3 s to deploy):
# a headline scenario with the screen is 9 arms in run 1 and 3 in runs 2-5, 21 arm-runs or
# 37 min; a further condition is screened the same way with 3 runs, 15 arm-runs or 26 min;
# the 1x check is 2 arms x 2 runs of 17 min. Seven headline scenarios (259 min) + three
# conditions (78 min) + the 1x check (68 min) = 405 min, night 1. The equal-throughput sweeps
# are 2 arms x 3 loads x 3 runs, 18 arm-runs or 32 min each, 128 min for four: night 2.
set -euo pipefail

cd "$(dirname "$0")/.."
B=${INFERA_BENCH_BIN:-target/release/infera-bench}
TRACES=${INFERA_STUDY_TRACES:-traces/agentx}
OUT=${INFERA_STUDY_OUT:-target/study-fair}
ARMS=1e6/age,least-running,round-robin,smg:round_robin,smg:least_load,smg:power_of_two,smg:cache_aware,smg:least_load:no-overload,sglang-router:cache_aware
BEST_PEER=${INFERA_STUDY_BEST_PEER:-smg:least_load:no-overload}
# Agentic clients name their conversation (prompt_cache_key, metadata.user_id): every request
# carries its session in x-session-id, which infera's prefill affinity reads and SMG ignores.
V8="--trace $TRACES/weka_v8.jsonl.gz --session-header"
SCREENED="--arms $ARMS --screen"
SWEEP="--arms 1e6/age,$BEST_PEER --concurrency 66,88,110 --runs 3"

# night | step | minutes | flags after `study decode-weight`
STEPS=(
  "1|headline|74|$V8 --loads seed --scenarios steady,multi-proxy $SCREENED --runs 5"
  # The scenarios where a ledger sees what a stateless router cannot (issue targets ≥ 1.05×).
  "1|scale-out|37|$V8 --loads seed --scenarios scale-out $SCREENED --runs 5"
  "1|mixed-dp|37|$V8 --loads seed --scenarios mixed-dp $SCREENED --runs 5"
  "1|kv-pressure|37|$V8 --loads seed --scenarios kv-pressure --kv-pressure-tokens 2000000 $SCREENED --runs 5"
  "1|unsaturated|37|$V8 --loads seed --scenarios unsaturated-prefill $SCREENED --runs 5"
  # Two prefills at half the seed load: a prefill that keeps up (the seed load saturates both).
  "1|keeps-up|37|$V8 --loads seed --scenarios unsaturated-prefill --concurrency 44 $SCREENED --runs 5"
  "1|hrrn|26|$V8 --loads seed --scenarios steady --prefill-schedule-policy hrrn $SCREENED --runs 3"
  "1|weka-v6|26|--trace $TRACES/weka_v6.jsonl.gz --session-header --loads seed --scenarios steady $SCREENED --runs 3"
  "1|published|26|$V8 --loads published --scenarios steady $SCREENED --runs 3"
  "1|realtime|68|$V8 --loads seed --scenarios steady --arms 1e6/age,$BEST_PEER --runs 2 --speedup 1"
  # At equal throughput: each scenario's sweep of the recommended arm and the best peer, whose
  # curves are compared at the same tok/s/GPU (manual/reference/bench.md, "Sweeps").
  "2|iso-unsaturated|32|$V8 --loads seed --scenarios unsaturated-prefill $SWEEP"
  "2|iso-multi-proxy|32|$V8 --loads seed --scenarios multi-proxy $SWEEP"
  "2|iso-scale-out|32|$V8 --loads seed --scenarios scale-out $SWEEP"
  "2|iso-mixed-dp|32|$V8 --loads seed --scenarios mixed-dp $SWEEP"
)

list=false
only_night=
wanted=()
while (($#)); do
  case $1 in
    --list) list=true ;;
    --night) only_night=$2; shift ;;
    -h|--help) sed -n 2,21p "$0"; exit 0 ;;
    *) wanted+=("$1") ;;
  esac
  shift
done

total=0
declare -A nights=()
for step in "${STEPS[@]}"; do
  IFS='|' read -r night name minutes flags <<<"$step"
  if ((${#wanted[@]})) && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  if [[ -n $only_night && $night != "$only_night" ]]; then continue; fi
  total=$((total + minutes))
  nights[$night]=$((${nights[$night]:-0} + minutes))
  cmd="$B study decode-weight $flags --quiet --out $OUT/$name"
  if $list; then
    printf '%-16s night %s ~%3d min  %s\n' "$name" "$night" "$minutes" "$cmd"
    continue
  fi
  if [[ -f $OUT/$name/done ]]; then
    echo "== $name: done already ($OUT/$name/stdout.log)"
    continue
  fi
  mkdir -p "$OUT/$name"
  echo "== $name (~$minutes min) started $(date -u +%H:%M): $cmd"
  # shellcheck disable=SC2086 # the flags are words on purpose
  $cmd >"$OUT/$name/stdout.log"
  touch "$OUT/$name/done"
  echo "== $name finished $(date -u +%H:%M)"
done
for night in $(printf '%s\n' "${!nights[@]}" | sort); do
  echo "== budget of night $night: ${nights[$night]} min"
done
echo "== budget of these steps: $total min"
