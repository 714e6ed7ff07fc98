#!/usr/bin/env bash
# What `xisa capture` costs: this repo's kernel smoke test (tests/kernels/runtime_smoke.py, every kernel
# of the corpus launched under Triton's interpreter, TRITON_INTERPRET=1) run plain and under
# `xisa capture --no-check` (the hook alone, not its compile of the new cases), alternating, N rounds;
# prints each round's seconds and the ratio capture/plain of the medians:
#     bench/capture_overhead.sh [N]                (default 3)
#     bench/capture_overhead.sh N -- COMMAND...    (another command, e.g. -- python -m pytest tests/kernels -q)
# Both runs use this checkout's .venv; each capture writes into a fresh folder, removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
[ "${1:-}" = "--" ] && shift
venv="$PWD/.venv/bin"
if [ $# -eq 0 ]; then set -- "$venv/python" tests/kernels/runtime_smoke.py; fi
work=$(mktemp -d)
specs=$(mktemp -d -p "$PWD" .capture-bench.XXXXXX)   # inside the project: capture refuses specs outside it
trap 'rm -rf "$work" "$specs"' EXIT
export TRITON_INTERPRET=1 XISA_CACHE_DIR="$work/cache"
now() { date +%s.%N; }
plain=() captured=()
for round in $(seq "$rounds"); do
    start=$(now); "$@" >/dev/null 2>&1 || echo "round $round: plain run failed" >&2; end=$(now)
    plain+=("$(python3 -c "print(round($end - $start, 2))")")
    start=$(now)
    "$venv/xisa" capture --no-check --out "$specs/captured-$round" -- "$@" >/dev/null 2>&1 || echo "round $round: capture failed" >&2
    end=$(now)
    captured+=("$(python3 -c "print(round($end - $start, 2))")")
    echo "round $round: plain ${plain[-1]}s, capture ${captured[-1]}s ($(ls "$specs/captured-$round" 2>/dev/null | wc -l) specs)"
done
python3 - "${plain[*]}" "${captured[*]}" <<'EOF'
import statistics, sys
plain, captured = (statistics.median(map(float, arg.split())) for arg in sys.argv[1:3])
print(f"median: plain {plain:.2f}s, capture {captured:.2f}s; ratio capture/plain {captured / plain:.2f}")
EOF
