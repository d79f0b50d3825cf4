#!/usr/bin/env bash
# fuzz/signals.sh [INT TERM HUP KILL LOADED]: signals sent at random moments of real runs of ./sorter, and every
# output checked afterwards (make signals runs it; the defaults are 40, 10, 10, 10 and 10 runs).
#
# INT, TERM, HUP: a run that trains, evaluates, scores --test-len and writes a checkpoint, a report and three
# pictures gets the signal at a moment drawn evenly over its whole length. Afterwards:
#   - a run that printed its table's head (so training began) leaves a checkpoint that loads and trains on;
#   - the report and each picture are whole (they end as such a file ends) or absent;
#   - no temporary file (NAME.tmp-PID) is left.
# LOADED: SIGINT, SIGTERM and SIGHUP, LOADED runs each, at a random moment of one phase of a run that loads a model
# and trains no further (--inspect, --test-len, a report and pictures): its held-out score, --inspect, --test-len or
# the report, each in turn. A run that printed its "loaded" line is after training: it must exit with 128 + the
# signal having written a whole report, which says it was cut short when a figure before it was.
# KILL: a --save-every 50 run of 2,000 steps (dropout, Adam, the linear schedule) is killed outright at a moment
# drawn over its training, then finished with --finish; its checkpoint must equal the uninterrupted run's, byte
# for byte. (SIGKILL cannot be caught: a save under way leaves its temporary, which is removed first.) Every second
# such run is a LoRA fine-tuning of that run's checkpoint instead (2,000 steps, adapters on every matrix, dropout
# still on): its file before the end keeps the adapters apart, and the finished one is the merged model.
set -uo pipefail
cd "$(dirname "$0")/.."
INT=${1:-40} TERM_RUNS=${2:-10} HUP=${3:-10} KILL_RUNS=${4:-10} LOADED=${5:-10}
BIN=$PWD/sorter
WORK=$(mktemp -d /tmp/sorter-signals-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
RUN=(--steps 300 --d-model 64 --heads 4 --d-ff 256 --enc-layers 3 --dec-layers 3 --test-len 16)
fail() { echo "FAIL: $*" | tee -a "$WORK/failures" >&2; }
seconds_of() {  # how long a command takes, in seconds (bash's own timer: date +%N is GNU's, not macOS's)
  local TIMEFORMAT=%2R
  { time "$@" >/dev/null 2>&1; } 2>&1
}
moment() { awk -v span="$1" -v r=$RANDOM 'BEGIN { printf "%.3f", span * r / 32767 }'; }  # bash's draw, evenly
# The runs go side by side, as many at a time as there are cores (JOBS=N to choose); a run's span is measured so too.
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
several() {  # COUNT FUNCTION ARGS...: FUNCTION ARGS N for N = 1 .. COUNT, JOBS at a time; their outputs in order
  local count=$1 out n pids=(); shift
  out=$(mktemp -d "$WORK/several-XXXXXX")
  for n in $(seq "$count"); do
    if [ ${#pids[@]} -ge "$JOBS" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    "$@" "$n" > "$out/$n" &
    pids+=($!)
  done
  wait
  for n in $(seq "$count"); do cat "$out/$n"; done
}
whole_run() { mkdir -p "$WORK/whole$1/svg"; "$BIN" "${RUN[@]}" --save "$WORK/whole$1/m.txt" --report "$WORK/whole$1/r.html" --svg "$WORK/whole$1/svg"; }

if [ $((INT + TERM_RUNS + HUP)) -gt 0 ]; then
  span=$(seconds_of several "$JOBS" whole_run)
  echo "a whole run takes $span s ($JOBS at a time); the signals come at moments drawn from 0 to $span s"
fi

# One run of RUN, signal SIG at a random moment; then every output checked. Prints the phase it stopped in.
signal_run() {
  local sig=$1 n=$2 dir="$WORK/$1-$2" at
  mkdir -p "$dir/svg"
  at=$(moment "$span")
  "$BIN" "${RUN[@]}" --save "$dir/m.txt" --report "$dir/r.html" --svg "$dir/svg" >"$dir/log" 2>&1 &
  local pid=$!
  sleep "$at"
  kill -s "$sig" "$pid" 2>/dev/null
  wait "$pid"
  local status=$? phase
  if grep -q "^interrupted at step" "$dir/log"; then phase="training"
  elif grep -q "^final: .*cut the evaluation short" "$dir/log"; then phase="the final evaluation"
  elif grep -q "^  length .*\(not scored\|cut the evaluation short\)" "$dir/log"; then phase="--test-len"
  elif grep -qs "cut the decoding short" "$dir/r.html"; then phase="the report's decoding"
  elif [ "$status" -eq 0 ]; then phase="none: the run had ended"
  elif grep -q "^final: " "$dir/log"; then phase="writing the outputs"
  else phase="before training"; fi
  if grep -q "held-out loss" "$dir/log" && [ "$phase" != "before training" ]; then
    [ -f "$dir/m.txt" ] || fail "$sig at $at s ($phase): no checkpoint"
    "$BIN" --load "$dir/m.txt" --steps 1 --save "$dir/m2.txt" >/dev/null 2>&1 ||
      fail "$sig at $at s ($phase): the checkpoint does not load and train on"
  fi
  [ ! -e "$dir/r.html" ] || [ "$(tail -c 8 "$dir/r.html")" = "</html>"$'\n' ] || [ "$(tail -n 1 "$dir/r.html")" = "</html>" ] ||
    fail "$sig at $at s: a partial report"
  for svg in "$dir"/svg/*.svg; do
    [ ! -e "$svg" ] || [ "$(tail -n 1 "$svg")" = "</svg>" ] || fail "$sig at $at s: a partial $(basename "$svg")"
  done
  if ls "$dir" "$dir/svg" | grep -q '\.tmp-'; then fail "$sig at $at s: a temporary file was left"; fi
  echo "$phase"
}
for plan in "INT $INT" "TERM $TERM_RUNS" "HUP $HUP"; do
  set -- $plan
  [ "$2" -gt 0 ] || continue
  phases=$(several "$2" signal_run "$1" | sort | uniq -c | sed 's/^ */  /')
  echo "SIG$1, $2 runs, stopped in:"
  echo "$phases"
done

# A smaller model than RUN's, so that a loaded run takes about 3 s here: a signal at a random moment of one phase of
# it (once the line the phase starts with is in the log, within about as long as the phase lasts here), then every
# output checked.
LRUN=(--d-model 32 --heads 4 --d-ff 128 --enc-layers 2 --dec-layers 2 --test-len 12)
PHASE_STARTS=("^loaded " "^--- inspect" "^--- held-out exact-match by input length" "^--- the loaded model")
PHASE_SPANS=(0.08 2.0 0.15 0.08)
loaded_run() {
  local sig=$1 n=$2 dir="$WORK/loaded-$1-$2" phase
  mkdir -p "$dir/svg"
  "$BIN" --load "$WORK/small.txt" --inspect --test-len 12 --report "$dir/r.html" --svg "$dir/svg" >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 1000); do grep -q "${PHASE_STARTS[$(((n - 1) % 4))]}" "$dir/log" && break; sleep 0.01; done
  sleep "$(moment "${PHASE_SPANS[$(((n - 1) % 4))]}")"
  kill -s "$sig" "$pid" 2>/dev/null
  wait "$pid"
  local status=$? cut=""
  grep -q "cut .* short" "$dir/log" && cut=yes
  if grep -q "^held-out: .*cut the evaluation short" "$dir/log"; then phase="the held-out score"
  elif grep -q "cut --inspect short\|^--- inspect.*cut the evaluation short\|head . off:.*cut the evaluation short" "$dir/log"; then phase="--inspect"
  elif grep -q "^  length .*\(not scored\|cut the evaluation short\)" "$dir/log"; then phase="--test-len"
  elif grep -qs "cut the decoding short" "$dir/r.html"; then phase="the report's decoding"
  elif [ "$status" -eq 0 ]; then phase="none: the run had ended"
  elif grep -q "^loaded " "$dir/log"; then phase="writing the outputs"
  else phase="loading the model"; fi
  if grep -q "^loaded " "$dir/log" && [ "$status" -ne 0 ]; then
    [ "$status" -eq $((128 + $(kill -l "$sig"))) ] || fail "loaded, $sig ($phase): exit status $status"
    grep -q "^($(sed 's/INT/Ctrl-C/; s/^\(TERM\|HUP\)$/SIG&/' <<< "$sig") came as the loaded model was scored" "$dir/log" ||
      fail "loaded, $sig ($phase): no line saying where the signal came"
    [ -f "$dir/r.html" ] || fail "loaded, $sig ($phase): no report"
    [ -z "$cut" ] || grep -qs "cut the \(evaluation\|decoding\) short" "$dir/r.html" ||
      fail "loaded, $sig ($phase): the report does not say it was cut short"
  fi
  [ ! -e "$dir/r.html" ] || [ "$(tail -n 1 "$dir/r.html")" = "</html>" ] || fail "loaded, $sig ($phase): a partial report"
  for svg in "$dir"/svg/*.svg; do
    [ ! -e "$svg" ] || [ "$(tail -n 1 "$svg")" = "</svg>" ] || fail "loaded, $sig ($phase): a partial $(basename "$svg")"
  done
  if ls "$dir" "$dir/svg" | grep -q '\.tmp-'; then fail "loaded, $sig ($phase): a temporary file was left"; fi
  echo "$phase"
}
if [ "$LOADED" -gt 0 ]; then
  "$BIN" --steps 300 "${LRUN[@]}" --save "$WORK/small.txt" >/dev/null 2>&1 || fail "the model to load was not trained"
  for sig in INT TERM HUP; do
    phases=$(several "$LOADED" loaded_run "$sig" | sort | uniq -c | sed 's/^ */  /')
    echo "SIG$sig at a loaded model (--load, no training), $LOADED runs, stopped in:"
    echo "$phases"
  done
fi

KRUN=(--steps 2000 --dropout 0.1 --optimizer adam --eval-every 1000000)
TUNE=(--load "$WORK/kill/whole1.txt" --lora 2 --lora-on all --steps 2000 --eval-every 1000000)  # LoRA, on KRUN's file
kill_whole() { "$BIN" "${KRUN[@]}" --save "$WORK/kill/whole$1.txt"; }
tune_whole() { "$BIN" "${TUNE[@]}" --save "$WORK/kill/tuned$1.txt"; }
kill_run() {  # N: a run killed at a random moment, then finished; its checkpoint against the whole run's (even N: LoRA)
  local k="$WORK/kill/k$1.txt" at pid kept run=("${KRUN[@]}") whole="$WORK/kill/whole1.txt" span=$kspan kind=""
  if [ $(($1 % 2)) -eq 0 ]; then run=("${TUNE[@]}") whole="$WORK/kill/tuned1.txt" span=$tspan kind=" (LoRA)"; fi
  at=$(moment "$span")
  "$BIN" "${run[@]}" --save "$k" --save-every 50 >/dev/null 2>&1 &
  pid=$!
  sleep "$at"
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -f "$k".tmp-*
  if [ ! -f "$k" ]; then echo "  SIGKILL$kind at $at s: before the first checkpoint"; return; fi
  kept=$(grep -m1 '^updates ' "$k" | cut -d' ' -f2)
  if grep -q '^planned_steps 2000$' "$k" && [ "$kept" -lt 2000 ]; then  # (a LoRA run's end is merged: no plan)
    "$BIN" --load "$k" --finish --save "$k" >/dev/null 2>&1 || fail "--finish$kind from step $kept"
  else kept=2000; fi
  if cmp -s "$k" "$whole"; then echo "  SIGKILL$kind at $at s: checkpoint of step $kept, finished"
  else fail "SIGKILL$kind at $at s (step $kept): not the same bytes"; echo "  SIGKILL$kind at $at s: step $kept, NOT the same bytes"; fi
}
if [ "$KILL_RUNS" -gt 0 ]; then
  mkdir -p "$WORK/kill"
  kspan=$(seconds_of several "$JOBS" kill_whole)
  for j in $(seq 2 "$JOBS"); do cmp -s "$WORK/kill/whole1.txt" "$WORK/kill/whole$j.txt" || fail "two whole runs differ"; done
  tspan=$(seconds_of several "$JOBS" tune_whole)
  for j in $(seq 2 "$JOBS"); do cmp -s "$WORK/kill/tuned1.txt" "$WORK/kill/tuned$j.txt" || fail "two LoRA runs differ"; done
  lines=$(several "$KILL_RUNS" kill_run)
  echo "$lines"
  same=$(grep -c ", finished$" <<< "$lines") none=$(grep -c "before the first checkpoint" <<< "$lines")
  lora=$(grep ", finished$" <<< "$lines" | grep -c "(LoRA)")
  echo "SIGKILL, $KILL_RUNS runs over $kspan s ($tspan s for LoRA): $same finished byte-identical to the whole run" \
       "($lora of them LoRA), $none killed before the first checkpoint"
fi
if [ -s "$WORK/failures" ]; then echo "make signals: $(wc -l < "$WORK/failures") failures"; exit 1; fi
echo "make signals: every check passed"
