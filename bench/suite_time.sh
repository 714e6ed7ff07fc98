#!/usr/bin/env bash
# The README's test command on two revisions, one after the other on this machine, each from a clean
# export with a cold cache as .ci/run has it, then .ci/run's `xisa check` on the warm cache; prints the
# ratio HEAD/BASE of the test times:
#     bench/suite_time.sh [BASE [HEAD]]        (default: main and HEAD)
# Each revision runs its own xisa package (PYTHONPATH=the export, ahead of this checkout's editable
# install) with this checkout's .venv (the same torch, Triton and pytest for both).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-main} head=${2:-HEAD} python="$PWD/.venv/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
declare -A seconds
for rev in "$base" "$head"; do
    dir="$work/$(git rev-parse --short "$rev")"
    mkdir -p "$dir" && git archive "$rev" | tar -x -C "$dir"
    start=$(date +%s)
    (cd "$dir" && PYTHONPATH="$dir" XISA_CACHE_DIR="$dir/.xisa-cache" "$python" -m pytest -p no:cacheprovider 2>&1 \
        | grep -E '^(FAILED|ERROR) |(passed|failed)' | tail -20) || true  # a failing test still has a time
    tests=$(( $(date +%s) - start ))
    (cd "$dir" && PYTHONPATH="$dir" XISA_CACHE_DIR="$dir/.xisa-cache" "$(dirname "$python")/xisa" check --quiet 2>&1 | tail -1) || true
    echo "$rev ($(git rev-parse --short "$rev")): tests ${tests}s, then xisa check $(( $(date +%s) - start - tests ))s"
    seconds[$rev]=$tests
done
python3 -c "print(f'test time {\"$head\"}/{\"$base\"}: {${seconds[$head]}/${seconds[$base]}:.2f}')"
