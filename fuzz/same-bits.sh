#!/usr/bin/env bash
# fuzz/same-bits.sh NAME=COMMAND NAME=COMMAND ...: one seed gives the same bits from every build.
#
# Each build runs the golden configurations below, each in a folder of its own; every file a run writes
# (checkpoints, step dumps, reports, pictures) and everything it prints must equal the first build's, byte
# for byte. Only timings are masked (train-time, examples/s): they are the one thing allowed to differ.
# A COMMAND may start with a runner, e.g.
#   fuzz/same-bits.sh x86-64=./sorter "arm64=qemu-aarch64 /tmp/sorter-arm64"
# .ci/run compares this way the x86-64 build with g++ against the builds without -march=native, with
# clang++ (libstdc++ and libc++) and for ARM64 under qemu; it is also how a change that is not meant to
# change results is checked against the commit before it. Exit status 1 when any file differs.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: fuzz/same-bits.sh NAME=COMMAND NAME=COMMAND ... (at least two builds)" >&2; exit 2; }
TRAIN_DATA=$PWD/docs/train-200.txt
WORK=$(mktemp -d /tmp/sorter-same-bits-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The golden configurations: one a line, run in this order (later lines load earlier checkpoints). Together
# they cover every variant, optimizer, schedule and output file, kept short: ARM64 runs them under qemu. c17 and
# c18 are large enough that --threads cuts their products and attention (engine/kernels.hpp's PARALLEL_WORK); so
# is c23, a mixture of experts (chapter 11), each expert's product on the rows routed to it. c24 and c25 fine-tune
# with LoRA (chapter 12): over the float model (its file saved unmerged at step 20, merged at 40) and over 8 bits.
CONFIGS=$(cat <<EOF
--steps 300 --save c01.txt
--steps 150 --norm post --pos learned --act gelu --tie-embeddings --save c02.txt --dump-step d02.txt
--steps 150 --pos random --min-len 2 --seq-len 6 --test-len 8 --save c03.txt
--steps 150 --dropout 0.1 --attn-dropout 0.1 --label-smoothing 0.1 --clip 1 --save c04.txt --dump-step d04.txt
--steps 150 --optimizer momentum --weight-decay 0.01 --save c05.txt
--steps 150 --optimizer adam --schedule warmup --warmup 50 --d-model 32 --heads 4 --d-ff 64 --save c06.txt
--steps 150 --rmsnorm --act swiglu --pos rope --kv-heads 1 --save c07.txt --dump-step d07.txt
--steps 150 --pos alibi --heads 4 --d-model 16 --enc-layers 2 --dec-layers 2 --save c08.txt
--steps 150 --llama --save c09.txt --beam 3 --sort 3 1 2 5 4
--steps 150 --arch decoder-only --pos alibi --norm post --save c10.txt
--load c01.txt --steps 50 --save c11.txt
--load c06.txt --steps 50 --save c12.txt
--steps 100 --train-data $TRAIN_DATA --min-len 2 --seq-len 6 --save c13.txt
--steps 100 --task reverse --min-len 3 --seq-len 6 --report r14.html --svg svg14 --inspect
--load c04.txt --beam 16 --sort 2 7 4 4 9
--steps 100 --save-every 40 --save c16.txt
--steps 10 --d-model 64 --heads 4 --d-ff 256 --seq-len 8 --batch 32 --dropout 0.1 --save c17.txt
--steps 10 --llama --heads 4 --d-model 64 --dec-layers 2 --d-ff 192 --seq-len 8 --batch 32 --optimizer adam --save c18.txt
--steps 100 --attention flash --arch decoder-only --pos alibi --heads 4 --kv-heads 2 --attn-dropout 0.1 --save c19.txt
--steps 60 --attention flash --seq-len 40 --min-len 30 --batch 4 --save c20.txt
--load c01.txt --quantize 8 --save c21.txt
--load c01.txt --quantize 4 --save c22.txt --sort 3 1 2 5 4 --test-len 7
--steps 20 --experts 4 --top-k 2 --shared-experts 1 --d-model 32 --heads 4 --d-ff 64 --seq-len 8 --batch 32 --save c23.txt --dump-step d23.txt
--load c01.txt --task reverse --lora 4 --lora-on all --lr 0.01 --steps 40 --save-every 20 --save c24.txt --save-adapters a24.txt
--load c21.txt --lora 2 --steps 40 --save c25.txt
EOF
)

# Timings are the only figures that may differ between builds.
mask() {
  sed -E -e 's/[0-9.]+ s of training/<t> s of training/g' -e 's/train-time [0-9.]+ s/train-time <t> s/g' \
         -e 's/ in [0-9.]+ s/ in <t> s/g' -e 's/[0-9.,]+ (training )?examples\/s/<n> examples\/s/g' \
         -e 's/[0-9.]+ us per/<t> us per/g'
}

# Each build runs the configurations in turn, in its own folder; the builds run side by side, as many at a time as
# there are cores (JOBS=N to choose), those under a runner (qemu) first: they take longest.
run_build() {  # NAME COMMAND...
  local name=$1 start n=0 line; shift
  start=$(date +%s)
  while read -r line; do
    n=$((n + 1))
    read -r -a args <<< "$line"
    mkdir -p "$WORK/$name/svg14"
    (cd "$WORK/$name" && "$@" "${args[@]}" > "run$n.out" 2>&1; echo "exit status $?" >> "run$n.out")
  done <<< "$CONFIGS"
  for f in "$WORK/$name"/*.out "$WORK/$name"/*.html; do mask < "$f" > "$f.masked" && mv "$f.masked" "$f"; done
  echo "$name: $n configurations in $(( $(date +%s) - start )) s ($*)" > "$WORK/$name.time"
}
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
names=() runners=() direct=()
for build in "$@"; do
  name=${build%%=*} command=${build#*=}
  [ "$name" != "$build" ] && [ -n "$command" ] || { echo "same-bits: '$build' is not NAME=COMMAND" >&2; exit 2; }
  names+=("$name")
  mkdir -p "$WORK/$name"
  case ${command%% *} in */*) direct+=("$build") ;; *) runners+=("$build") ;; esac
done
for build in ${runners[@]+"${runners[@]}"} ${direct[@]+"${direct[@]}"}; do
  name=${build%%=*} command=${build#*=}
  read -r -a argv <<< "$command"
  for i in "${!argv[@]}"; do  # the runs happen in folders of their own: ./sorter becomes /.../sorter
    case ${argv[$i]} in /*) ;; */*) argv[$i]=$PWD/${argv[$i]} ;; esac
  done
  while [ "$(jobs -pr | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done  # a free core (bash 3.2 has no wait -n)
  run_build "$name" "${argv[@]}" &
done
wait
for name in "${names[@]}"; do cat "$WORK/$name.time"; done

first=${names[0]} status=0
files=$(cd "$WORK/$first" && find . -type f | sort)
for name in "${names[@]:1}"; do
  differ=0
  for f in $files; do
    cmp -s "$WORK/$first/$f" "$WORK/$name/$f" || { echo "  differs: $f ($first and $name)"; differ=$((differ + 1)); }
  done
  extra=$(cd "$WORK/$name" && find . -type f | sort | comm -13 <(echo "$files") -)
  [ -z "$extra" ] || { echo "  only $name wrote: $extra"; differ=$((differ + 1)); }
  if [ $differ -eq 0 ]; then
    echo "same bits: $name = $first ($(echo "$files" | wc -l) files: checkpoints, step dumps, report, pictures, output)"
  else
    echo "NOT the same bits: $name and $first differ in $differ files"; status=1
  fi
done
exit $status
