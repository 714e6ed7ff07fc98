#!/bin/sh
# `git bisect run` over Triton: which Triton commit changed your kernels' machine code?
#
#   cd triton                                   # a Triton checkout (git clone https://github.com/triton-lang/triton)
#   git bisect start v3.9.0 v3.8.0              # the first revision that changes the cells (bad), then one that does not (good)
#   XISA_PROJECT=~/my-kernels XISA_AB_ARGS="--arch gfx942 --kernel gemm" \
#       git bisect run /path/to/xisa/examples/bisect-triton.sh
#
# Each step installs the Triton under test into a virtual environment of its own and compares the project's
# goldens with its compile, every target of the selection at once:
#     xisa ab --a-golden --b-python "$VENV/bin/python" $XISA_AB_ARGS
# and turns xisa's exit code into bisect's: 0 every cell as the goldens (good), 1 a cell changed (bad),
# anything else (the build failed, a side failed, a Triton outside xisa's range) 125: skip this commit.
#
# XISA_PROJECT   the project whose goldens are the reference (required)
# XISA_AB_ARGS   the selection, e.g. "--arch gfx942 --kernel gemm" (default: every cell)
# XISA           the xisa command (default: xisa on PATH; the Python running it needs no Triton of the test)
# BISECT_VENV    the virtual environment the Triton under test goes into (default: $TMPDIR/xisa-bisect-venv),
#                made once with torch, pyyaml, typer and rich
# TRITON_INSTALL a pip requirement to install instead of building this checkout (e.g. triton==3.9.0: one step
#                by hand, or a script of your own over nightly wheels); building Triton takes from minutes
#                (ccache, a downloaded LLVM) to an hour
set -u
: "${XISA_PROJECT:?set XISA_PROJECT to the project whose goldens are the reference}"
venv=${BISECT_VENV:-${TMPDIR:-/tmp}/xisa-bisect-venv}
xisa=${XISA:-xisa}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" && "$venv/bin/pip" install -q torch==2.13.0 pyyaml typer rich || exit 125
fi
if [ -n "${TRITON_INSTALL:-}" ]; then
    "$venv/bin/pip" install -q "$TRITON_INSTALL" || exit 125
else
    "$venv/bin/pip" install -q . || exit 125      # this Triton commit, built
fi
cd "$XISA_PROJECT" || exit 125
# XISA_AB_ARGS is a list of words: split on purpose.
# shellcheck disable=SC2086
$xisa ab --a-golden --b-python "$venv/bin/python" --quiet ${XISA_AB_ARGS:-}
case $? in
    0) exit 0 ;;
    1) exit 1 ;;
    *) exit 125 ;;
esac
