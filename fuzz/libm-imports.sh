#!/usr/bin/env bash
# fuzz/libm-imports.sh FILE...: what each program or object file imports from the system's maths library (libm);
# exit 1 when it is anything but the exact functions. Every transcendental function a run computes (exp, log, sin,
# cos, pow, tanh, exp2, log1p, erf, ...) must come from matrix.hpp's maths::, built from + - * / alone: a system's
# library rounds them its own way, and one seed would no longer give the same bits on every system.
# Allowed: what IEEE 754 defines exactly, the same in every library (a whole number from floor, ceil or lround, a
# NaN, sqrt's correctly rounded root, ...). A vector variant of a maths function (glibc's libmvec, _ZGV...) is
# refused as well. make runs it on ./sorter, make test on the engine's tests (the tutorial's blocks, every one a
# model can be built with: a block that calls std::tanh shows there), CI on every build.
#   NM=aarch64-linux-gnu-nm fuzz/libm-imports.sh FILE   another architecture's file
#   LIBM=/path/to/libm.so.6                              whose names count as the maths library's (default: the
#                                                        one $CXX, or g++, links)
set -uo pipefail
NM=${NM:-nm}
LIBM=${LIBM:-$(${CXX:-g++} -print-file-name=libm.so.6 2>/dev/null)}
EXACT='^(floor|ceil|trunc|round|lround|llround|lrint|llrint|rint|nearbyint|fabs|copysign|nan|sqrt|fmin|fmax)$'
if [ ! -f "$LIBM" ]; then
  echo "libm-imports: no libm.so.6 here (macOS keeps its maths in libSystem): not checked"
  exit 0
fi
names=$(nm -D --defined-only "$LIBM" | awk '{print $NF}' | sed 's/@.*//' | sort -u)
status=0
for file in "$@"; do
  if ! symbols=$("$NM" -u "$file" 2>/dev/null); then
    echo "libm-imports: $NM cannot read $file (another architecture? name its nm: NM=...): not checked"
    continue
  fi
  imports=$(awk '{print $NF}' <<< "$symbols" | sed 's/@.*//' | sort -u | grep -xF -f <(echo "$names") | tr '\n' ' ')
  vector=$(awk '{print $NF}' <<< "$symbols" | grep '^_ZGV' | sed 's/@.*//' | sort -u | tr '\n' ' ')
  refused=$(tr ' ' '\n' <<< "$imports" | grep -v '^$' | grep -vE "$EXACT" | tr '\n' ' ')$vector
  echo "$file imports from libm: ${imports:-nothing}$vector"
  if [ -n "$refused" ]; then
    echo "refused: $file calls the system's ${refused% }: use maths:: (matrix.hpp) instead," \
         "so that every system computes the same bits"
    status=1
  fi
done
exit $status
