#!/usr/bin/env bash
# The dependency rules of DESIGN.md, checked on the whole tree (core layout text io kernels
# engine tools):
#   1. the include graph has no cycle (file -> the headers it includes);
#   2. no two files call each other, directly or around a loop (file -> the files that define
#      the symbols its object file uses; needs the objects of a build);
#   3. folders layer one way: core <- layout/text/io <- kernels <- engine <- tools, for includes
#      and for calls (nothing points up);
#   4. engine/'s subfolders layer one way: forward <- source <- quant <- run <- eval <- autoq, for
#      includes and for calls; every engine/ source file lives in one of them (or a folder of one:
#      engine/run/plan/ is engine/run/).
#
#   scripts/check-includes.sh [OBJ_DIR...]
#     OBJ_DIR: a CMake target's object folder, objects named by source path
#     (default: build/CMakeFiles/{lwq,lwq_cli,lwq_cuda_kernels,lwq_cuda}.dir; the CUDA ones are
#     there when the build has CUDA)
#
# Exit 0 when all hold; 1 with the offending loop, include or call printed.  Plain bash, awk,
# coreutils' tsort (which names the files of a loop) and binutils' nm.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- build/CMakeFiles/{lwq,lwq_cli,lwq_cuda_kernels,lwq_cuda}.dir
status=0
folders="core layout text io kernels engine tools"
# what each folder may include and call besides itself (tools: anything)
declare -A allowed=(
    [core]=""
    [layout]="core"
    [text]="core"
    [io]="core"
    [kernels]="core layout"
    [engine]="core layout text io kernels"
    [tools]="core layout text io kernels engine"
)
# engine/'s subfolders, bottom first: each may include and call only those before it
engine_order="forward source quant run eval autoq"

# tsort prints "tsort: -: input contains a loop:" and the loop's members on stderr
loops() { # edges on stdin ("a b" per line) -> the loop report, empty when acyclic
    tsort 2>&1 >/dev/null | sed 's/^tsort: //' || true
}

# The arrows that point the wrong way, from "from to" edges on stdin: one line each.
wrong_way() {
    awk -v order="$engine_order" -v rules="$(for f in $folders; do printf '%s:%s;' "$f" "${allowed[$f]}"; done)" '
        BEGIN {
            n = split(order, o, " "); for (i = 1; i <= n; i++) rank[o[i]] = i
            m = split(rules, r, ";")
            for (i = 1; i <= m; i++) {
                split(r[i], kv, ":"); ok[kv[1] SUBSEP kv[1]] = 1; known[kv[1]] = 1
                k = split(kv[2], a, " "); for (j = 1; j <= k; j++) ok[kv[1] SUBSEP a[j]] = 1
            }
        }
        {
            split($1, a, "/"); split($2, b, "/")
            if (a[1] in known && !((a[1] SUBSEP b[1]) in ok))
                print $1 " -> " $2 ": " a[1] "/ must not depend on " b[1] "/"
            else if (a[1] == "engine" && b[1] == "engine" && a[2] != b[2] &&
                     a[2] in rank && b[2] in rank && rank[b[2]] > rank[a[2]])
                print $1 " -> " $2 ": engine/" a[2] "/ must not depend on engine/" b[2] "/ (order: " order ")"
        }'
}

# 0. every engine/ source file in a known subfolder
for f in $(find engine -name '*.[ch]' -o -name '*.cu' | sort); do
    sub=${f#engine/}
    sub=${sub%%/*}
    case " $engine_order " in
    *" $sub "*) continue ;; # engine/SUB/FILE or engine/SUB/DIR/FILE
    esac
    echo "check-includes: $f: engine/ files live in one of engine/{${engine_order// /,}}/ (see docs/ARCHITECTURE.md)"
    status=1
done

# 1. includes
srcs=$(find $folders -name '*.[ch]' -o -name '*.cu' | sort)
inc_edges=$(echo "$srcs" | xargs grep -H -o '^#include "[a-z]*/[a-z0-9_/]*\.h"' |
    sed 's/:#include "/ /; s/"$//' || true)
out=$( (echo "$inc_edges"; for f in $srcs; do echo "$f $f"; done) | loops)
if [ -n "$out" ]; then
    echo "check-includes: include cycle:"
    echo "$out"
    status=1
else
    echo "check-includes: include graph: $(echo "$srcs" | wc -l) files, $(echo "$inc_edges" | grep -c .) includes, cycles: 0"
fi
out=$(echo "$inc_edges" | grep . | wrong_way || true)
if [ -n "$out" ]; then
    echo "check-includes: includes that point up:"
    echo "$out" | sed 's/^/  /'
    status=1
fi

# 2. calls between files
# (objects whose source is gone, left by an older build, do not count)
objs=$(for d in "$@"; do
    if [ -d "$d" ]; then
        (cd "$d" && find . -name '*.o' | sed 's|^\./||') | while read -r o; do
            if [ -f "${o%.o}" ]; then echo "$d $o"; fi
        done
    fi
done | sort -k2)
if [ -n "$objs" ]; then
    # nm -A: "OBJECT:ADDR TYPE SYMBOL" (defined) or "OBJECT:  U SYMBOL"; OBJECT -> its source
    strip=$(for d in "$@"; do printf 's|^%s/||;' "$d"; done)
    paths=$(echo "$objs" | awk '{ print $1 "/" $2 }')
    defs=$(echo "$paths" | xargs nm -A --defined-only -g | sed "$strip" |
        awk '{ f = $1; sub(/\.o:.*$/, "", f); if (NF == 3) print $3, f }' | sort -k1,1)
    uses=$(echo "$paths" | xargs nm -A -u | sed "$strip" |
        awk '{ f = $1; sub(/\.o:.*$/, "", f); print $NF, f }' | sort -k1,1)
    call_edges=$(join <(echo "$uses") <(echo "$defs") | awk '$2 != $3 { print $2, $3 }' | sort -u)
    self=$(echo "$objs" | awk '{ sub(/\.o$/, "", $2); print $2, $2 }')
    out=$(printf '%s\n%s\n' "$call_edges" "$self" | loops)
    if [ -n "$out" ]; then
        echo "check-includes: files calling each other:"
        echo "$out"
        status=1
    else
        echo "check-includes: call graph: $(echo "$objs" | wc -l) files, $(echo "$call_edges" | grep -c .) file->file edges, cycles: 0"
    fi
    out=$(echo "$call_edges" | grep . | wrong_way || true)
    if [ -n "$out" ]; then
        echo "check-includes: calls that point up:"
        echo "$out" | sed 's/^/  /'
        status=1
    fi
else
    echo "check-includes: no objects in $*: call graph not checked"
fi

if [ $status = 0 ]; then
    echo "check-includes: folders layer one way (what each may use: $(for f in $folders; do
        printf '%s: %s; ' "$f" "${allowed[$f]:--}"; done | sed 's/; $//'))"
    echo "check-includes: engine/ layers one way (${engine_order// / <- })"
fi
exit $status
