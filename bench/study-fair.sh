#!/usr/bin/env bash
# The fair decode-balancing study (manual/features/decode_balancing.md, "Method"): every
# condition the results table has, one after another, in one night on a 2-core machine.
#
#   bench/study-fair.sh                 # all of it (~6.1 h)
#   bench/study-fair.sh --list          # the steps, their commands and budgets; runs nothing
#   bench/study-fair.sh ledger unsaturated   # only these steps
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
# the 1x check is 2 arms x 2 runs of 17 min. Six headline scenarios (222 min) + three
# conditions (78 min) + the 1x check (68 min) = 368 min.
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

# step | minutes | flags after `study decode-weight`
STEPS=(
  "headline|74|$V8 --loads seed --scenarios steady,multi-proxy $SCREENED --runs 5"
  "ledger|111|$V8 --loads seed --scenarios scale-out,mixed-dp,kv-pressure --kv-pressure-tokens 2000000 $SCREENED --runs 5"
  "unsaturated|37|$V8 --loads seed --scenarios unsaturated-prefill $SCREENED --runs 5"
  "hrrn|26|$V8 --loads seed --scenarios steady --prefill-schedule-policy hrrn $SCREENED --runs 3"
  "weka-v6|26|--trace $TRACES/weka_v6.jsonl.gz --session-header --loads seed --scenarios steady $SCREENED --runs 3"
  "published|26|$V8 --loads published --scenarios steady $SCREENED --runs 3"
  "realtime|68|$V8 --loads seed --scenarios steady --arms 1e6/age,$BEST_PEER --runs 2 --speedup 1"
)

list=false
wanted=()
for a in "$@"; do
  case $a in
    --list) list=true ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    *) wanted+=("$a") ;;
  esac
done

total=0
for step in "${STEPS[@]}"; do
  IFS='|' read -r name minutes flags <<<"$step"
  if ((${#wanted[@]})) && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  total=$((total + minutes))
  cmd="$B study decode-weight $flags --quiet --out $OUT/$name"
  if $list; then
    printf '%-12s ~%3d min  %s\n' "$name" "$minutes" "$cmd"
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
echo "== budget of these steps: $total min"
