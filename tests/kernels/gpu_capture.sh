#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: capture real launches, compile the captured cases ahead of time, and compare
# each one's cubin with the cubins the launches themselves compiled (byte for byte outside debug information:
# xisa hands ptxas project-relative source paths, a launch its checkout's absolute ones). Two programs:
#   1. tests/kernels/spec_launches.py with every hand-written sm_90 cell of kernels/*.yaml (their runtime checks);
#   2. examples/liger/run_liger.py, Liger Kernel from a wheel in $WHEELS (an adopter's library, `module:` specs);
#   3. FlagGems' own tests from its source tree in $LIBS/flaggems (FLAGGEMS_TESTS: which test files);
#   4. examples/fla/run_fla.py, fla-core from a wheel in $LIBS.
# Then `xisa device --arch sm_90` (hand-written cells: launch fingerprint = ahead-of-time fingerprint).
#     tests/kernels/gpu_capture.sh OUT_DIR          (WHEELS: a folder of wheels to install offline, optional;
#                                                    LIBS: FlagGems' tree and fla-core's wheel, optional)
# Prints one summary line per program: "<program>: N captured cells, M with a launch cubin identical outside
# debug information".
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu_capture.sh OUT_DIR}
mkdir -p "$out"
work=$(mktemp -d)
python=${PYTHON:-python3}
if [ -n "${WHEELS:-}" ]; then
    "$python" -c "import typer, rich, yaml" 2>/dev/null ||
        "$python" -m pip install -q --no-index --find-links "$WHEELS" typer rich pyyaml
    "$python" -m pip install -q --no-index --no-deps "$WHEELS"/liger_kernel-*.whl
fi
export PYTHONPATH=$PWD XISA_CACHE_DIR=$work/xisa-cache
repo=$PWD
xisa() { "$python" -m xisa "$@"; }
aot() { env -u TRITON_INTERPRET "$python" -m xisa "$@"; }   # a dry run under the interpreter compiles for real

compare() {   # NAME PROJECT LAUNCH_CACHE: each captured cell's AOT cubin against the launches' cubins
    local name=$1 project=$2 launches=$3
    (cd "$project" && aot compile --spec captured --arch sm_90 --emit "$work/aot-$name" --json) \
        > "$out/$name-compile.json" 2> "$out/$name-compile.err"
    "$python" - "$name" "$work/aot-$name" "$launches" "$out/$name-compile.json" <<'EOF'
import json, sys
from pathlib import Path
from xisa.analyze.codeobject import code_sha256   # the code object outside debug information (xisa's verdict)
name, aot, launches, report = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
digest = lambda p: code_sha256(p.read_bytes())
launched = {digest(p) for p in launches.rglob("*.cubin")}
cells = json.loads(report.read_text())["cells"]
matched = [c for c in cells if c["status"] == "ok" and any(
    digest(p) in launched for p in (aot / c["kernel"] / c["case"] / "sm_90").glob("*.cubin"))]
missing = [f'{c["kernel"]}:{c["case"]} ({c["status"]})' for c in cells if c not in matched]
print(f"{name}: {len(cells)} captured cells, {len(matched)} with a launch cubin identical outside debug information"
      + (f"; not matched: {', '.join(missing)}" if missing else ""))
EOF
}

only=" ${ONLY:-spec liger flaggems fla device} "   # ONLY: which of the programs below to run
# 1. The hand-written cells, launched through their runtime checks.
if [[ $only == *" spec "* ]]; then
cells=${CELLS:-$(ls golden/*/*/sm_90.yaml | awk -F/ '{print $2":"$3"@sm_90"}')}   # CELLS: a subset
rm -rf captured   # this checkout's own (git-ignored) capture folder
TRITON_CACHE_DIR=$work/launch-spec xisa capture --targets sm_90 -- "$python" tests/kernels/spec_launches.py $cells \
    > "$out/spec-capture.txt" 2>&1
echo "spec_launches: capture exit $? ($(grep -c '^wrote' "$out/spec-capture.txt") specs)"
compare spec "$repo" "$work/launch-spec"
mkdir -p "$work/spec" && mv captured "$work/spec/"
fi

# 2. Liger Kernel, as an adopter captures it in a repository of their own.
if [[ $only == *" liger "* ]]; then
mkdir -p "$work/liger" && cp examples/liger/run_liger.py "$work/liger/"
printf '[tool.xisa]\nspecs = ["captured"]\n' > "$work/liger/pyproject.toml"
(cd "$work/liger" && TRITON_CACHE_DIR=$work/launch-liger xisa capture --targets sm_90 -- "$python" run_liger.py) \
    > "$out/liger-capture.txt" 2>&1
echo "liger: capture exit $? ($(grep -c '^wrote' "$out/liger-capture.txt") specs)"
compare liger "$work/liger" "$work/launch-liger"
fi

# 3. FlagGems, from its GitHub tree's own tests (LIBS/flaggems: src/ and tests/ of the tree), and 4. fla-core from a
# wheel in LIBS, its ops run by examples/fla/run_fla.py: as adopters capture them, in repositories of their own.
libs=${LIBS:+$(cd "$LIBS" && pwd)}
captured=""
[[ $only == *" spec "* ]] && captured+=" spec/captured"
[[ $only == *" liger "* ]] && captured+=" liger/captured"
if [[ $only == *" flaggems "* ]] && [ -n "$libs" ] && [ -d "$libs/flaggems/src" ]; then
    # captured into the tree's own captured/ (its kernels are that project's sources), as FlagGems' authors would
    tests=${FLAGGEMS_TESTS:-tests/test_norm_ops.py tests/test_reduction_ops.py tests/test_special_ops.py}
    rm -rf "$libs/flaggems/captured"
    (cd "$libs/flaggems" && PYTHONPATH=$repo:$PWD/src TRITON_CACHE_DIR=$work/launch-flaggems \
        xisa capture --targets sm_90 -- timeout -s INT ${FLAGGEMS_SECONDS:-200} "$python" -m pytest -q -p no:cacheprovider --mode quick $tests) \
        > "$out/flaggems-capture.txt" 2>&1
    echo "flaggems: capture exit $? ($(grep -c '^wrote' "$out/flaggems-capture.txt") specs)"
    PYTHONPATH=$repo:$libs/flaggems/src compare flaggems "$libs/flaggems" "$work/launch-flaggems"
    mkdir -p "$work/flaggems" && cp -r "$libs/flaggems/captured" "$work/flaggems/"
    captured+=" flaggems/captured"
fi
if [[ $only == *" fla "* ]] && [ -n "$libs" ] && ls "$libs"/fla_core-*.whl >/dev/null 2>&1; then
    "$python" -m pip install -q --no-index --no-deps --target "$work/site-fla" "$libs"/fla_core-*.whl
    mkdir -p "$work/fla" && cp examples/fla/run_fla.py "$work/fla/"
    printf '[tool.xisa]\nspecs = ["captured"]\n' > "$work/fla/pyproject.toml"
    (cd "$work/fla" && PYTHONPATH=$repo:$work/site-fla TRITON_CACHE_DIR=$work/launch-fla \
        xisa capture --targets sm_90 ${FLA_CAPTURE_OPTIONS:-} -- timeout -s INT ${FLA_SECONDS:-150} "$python" run_fla.py) > "$out/fla-capture.txt" 2>&1
    echo "fla: capture exit $? ($(grep -c '^wrote' "$out/fla-capture.txt") specs)"
    PYTHONPATH=$repo:$work/site-fla compare fla "$work/fla" "$work/launch-fla"
    captured+=" fla/captured"
fi

# 5. The device tier on the hand-written cells.
if [[ $only == *" device "* ]]; then
aot device --arch sm_90 --json > "$out/device.json" 2> "$out/device.err"
echo "device: exit $?"
fi
tar -C "$work" -czf "$out/captured.tgz" $captured
