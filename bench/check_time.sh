#!/usr/bin/env bash
# A cold and a warm `xisa check` of two revisions, alternating on this machine (the machines are shared
# and noisy: side by side, rounds interleaved), each from a clean export with its own empty cache; prints
# the median seconds of each and the ratios HEAD/BASE:
#     bench/check_time.sh BASE HEAD [ROUNDS [CHECK ARGS...]]     e.g. bench/check_time.sh e3cc51c HEAD 3 --arch gfx942 --arch sm_90
# Each revision runs its own xisa package (PYTHONPATH=the export, ahead of this checkout's editable install)
# with this checkout's .venv (the same torch and Triton for both). The verdict is not judged here (a revision
# whose goldens record more still checks the same cells); its exit code is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
base=$1 head=$2 rounds=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
xisa="$PWD/.venv/bin/xisa"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for rev in "$base" "$head"; do
    mkdir -p "$work/$rev/tree" && git archive "$rev" | tar -x -C "$work/$rev/tree"
done
timed() {  # REV [CHECK ARGS] -> seconds of one `xisa check` in that revision's export, its cache as it is
    local rev=$1 start rc=0
    shift
    start=$(date +%s%N)
    (cd "$work/$rev/tree" && PYTHONPATH="$work/$rev/tree" XISA_CACHE_DIR="$work/$rev/cache" "$xisa" check --quiet "$@" \
        >"$work/$rev/out" 2>&1) || rc=$?
    python3 -c "print(f'{($(date +%s%N) - $start) / 1e9:.2f}')"
    echo "  $rev: exit $rc, $(tail -1 "$work/$rev/out")" >&2
}
declare -A cold warm
for round in $(seq "$rounds"); do
    for rev in "$base" "$head"; do
        rm -rf "$work/$rev/cache"
        c=$(timed "$rev" "$@"); w=$(timed "$rev" "$@")
        cold[$rev]+="$c " warm[$rev]+="$w "
        echo "round $round $rev: cold ${c}s, warm ${w}s"
    done
done
python3 - "$base" "$head" "${cold[$base]}" "${cold[$head]}" "${warm[$base]}" "${warm[$head]}" <<'PY'
import statistics, sys
base, head, *runs = sys.argv[1:]
cb, ch, wb, wh = (statistics.median(map(float, r.split())) for r in runs)
print(f"median cold check: {base} {cb:.1f}s, {head} {ch:.1f}s; ratio {head}/{base}: {ch / cb:.3f}")
print(f"median warm check: {base} {wb:.2f}s, {head} {wh:.2f}s; ratio {head}/{base}: {wh / wb:.3f}")
PY
