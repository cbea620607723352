#!/usr/bin/env bash
# The dependency rules of DESIGN.md, checked:
#   1. the include graph has no cycle inside engine/ (file -> the engine/ headers it includes);
#   2. no two engine/ files call each other, directly or around a loop (file -> the files that
#      define the symbols its object file uses; needs the objects of a build: OBJ_DIR);
#   3. folders layer one way: core <- layout/text/io/kernels <- engine <- tools (no #include
#      that points up).
#
#   scripts/check-includes.sh [OBJ_DIR]    (OBJ_DIR: build/CMakeFiles/lwq.dir, the default)
#
# Exit 0 when all hold; 1 with the offending loop or include printed.  Plain bash, coreutils'
# tsort (which names the files of a loop) and binutils' nm.
set -euo pipefail
cd "$(dirname "$0")/.."
obj=${1:-build/CMakeFiles/lwq.dir}
status=0

# tsort prints "tsort: -: input contains a loop:" and the loop's members on stderr
loops() { # edges on stdin ("a b" per line) -> the loop report, empty when acyclic
    tsort 2>&1 >/dev/null | sed 's/^tsort: //' || true
}

# 1. includes
inc_edges=$(for f in engine/*/*.c engine/*/*.h; do
    grep -o '^#include "engine/[a-z0-9_/]*\.h"' "$f" | sed 's/^#include "//; s/"$//' |
        while read -r h; do echo "$f $h"; done
    echo "$f $f"
done)
out=$(echo "$inc_edges" | loops)
if [ -n "$out" ]; then
    echo "check-includes: engine/ include cycle:"
    echo "$out"
    status=1
else
    echo "check-includes: engine/ include graph: $(echo "$inc_edges" | awk '$1 != $2' | wc -l) includes, no cycle"
fi

# 2. calls between files
if [ -d "$obj/engine" ]; then
    defs=$(for o in "$obj"/engine/*/*.o; do
        nm --defined-only -g "$o" | awk -v f="$(basename "$o" .o)" 'NF == 3 { print $3, f }'
    done | sort -k1,1)
    uses=$(for o in "$obj"/engine/*/*.o; do
        nm -u "$o" | awk -v f="$(basename "$o" .o)" '{ print $NF, f }'
    done | sort -k1,1)
    call_edges=$(join <(echo "$uses") <(echo "$defs") | awk '$2 != $3 { print $2, $3 }' | sort -u)
    self=$(ls "$obj"/engine/*/*.o | xargs -n1 basename | sed 's/\.o$//' | awk '{ print $1, $1 }')
    out=$(printf '%s\n%s\n' "$call_edges" "$self" | loops)
    if [ -n "$out" ]; then
        echo "check-includes: engine/ files calling each other:"
        echo "$out"
        echo "$call_edges" | sed 's/^/  /'
        status=1
    else
        echo "check-includes: engine/ call graph: $(echo "$call_edges" | grep -c .) file->file edges, no cycle"
    fi
else
    echo "check-includes: no objects in $obj/engine: call graph not checked"
fi

# 3. layering: a folder includes only its own headers and those of the folders below it
declare -A allowed=(
    [core]="core"
    [layout]="core layout"
    [text]="core text"
    [io]="core io"
    [kernels]="core layout kernels"
    [engine]="core layout text io kernels engine"
)
for dir in "${!allowed[@]}"; do
    while IFS= read -r line; do
        [ -z "$line" ] && continue
        target=${line#*#include \"}
        target=${target%%/*}
        ok=0
        for a in ${allowed[$dir]}; do [ "$a" = "$target" ] && ok=1; done
        if [ $ok = 0 ]; then
            echo "check-includes: $dir/ must not include $target/: $line"
            status=1
        fi
    done < <(grep -rn --include='*.c' --include='*.h' --include='*.cu' '^#include "[a-z]*/' "$dir" || true)
done
[ $status = 0 ] && echo "check-includes: folders layer one way"
exit $status
