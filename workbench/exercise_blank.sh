#!/bin/sh
# workbench/exercise_blank.sh -- make blank, in a student's copy ("Write it yourself", docs/course.md): each gap of the
# tutorial, from `// exercise NAME: your code from here` to `// exercise NAME: to here`, back to the blank it was
# handed out as, which EXERCISE.md keeps (a ```cpp FILE block a gap, in order). What a gap held goes to
# exercise-yours.txt first. A shell script, not part of ./exercise-check: it must work when the student's code does
# not compile.
page=EXERCISE.md
kept=exercise-yours.txt
test -f "$page" || { echo "make blank: no $page here: run it in a student's copy (make exercise made it)"; exit 2; }
files=$(awk '/^```cpp /{ print $2 }' "$page" | sort -u)
test -n "$files" || { echo "make blank: $page holds no blank gap"; exit 2; }
stamp=$(date '+%Y-%m-%d %H:%M:%S')
for file in $files; do
    awk -v file="$file" -v page="$page" -v kept="$kept" -v stamp="$stamp" '
        BEGIN {
            n = 0; inside = 0
            while ((getline line < page) > 0) {
                if (!inside && line == "```cpp " file) { inside = 1; blank[++n] = ""; continue }
                if (inside && line == "```") { inside = 0; continue }
                if (inside) blank[n] = blank[n] line "\n"
            }
            print "---- make blank, " stamp ": " file " ----" >> kept
        }
        !gap && /\/\/ exercise [^ ]*: your code from here/ { gap = 1; k++; if (k <= n) printf "%s", blank[k] }
        gap { print >> kept; if ($0 ~ /\/\/ exercise [^ ]*: to here/) gap = 0; next }
        { print }
        END { if (k != n || gap) exit 3 }
    ' "$file" > "$file.blank-tmp" && mv "$file.blank-tmp" "$file" || {
        rm -f "$file.blank-tmp"
        echo "make blank: $file: its gaps (from '// exercise NAME: your code from here' to '... to here') do not" \
             "match the $page's: are the marker lines intact?"
        exit 1
    }
    echo "$file: the gap is blank again"
done
echo "what the gaps held: $kept"
