"""The application layer: each of xisa's jobs written once, as plain functions that return result objects.

Compile a selection, check it against its goldens (or against a base revision, its goldens read from
git or its kernels compiled), bless it, review it as a page, compare two toolchains, run it on the GPUs
present, diagnose the machine, capture specs from launches. The CLI commands, the pytest plugin and the
`xisa ab` side process build one `Selection` from their options, call one of these and render what comes
back; nothing here prints or exits: refusals are the typed errors of `xisa.errors`.
"""

from xisa.api.ab import AbOutcome, ab
from xisa.api.bless import BlessResult, ToolchainUpgrade, bless, bless_run, toolchain_upgrade
from xisa.api.capture import CaptureOutcome, capture
from xisa.api.check import check, review, unused_goldens
from xisa.api.gate import gate
from xisa.api.judging import CheckOutcome, bless_commands, judge
from xisa.api.loops import cell_loops, loop_estimates
from xisa.api.machine import device, doctor
from xisa.api.run import Progress, Run, compile, compile_cells, compile_selection, no_progress
from xisa.api.selection import Selection
from xisa.api.workspace import Workspace, check_golden_toolchains, open_workspace, validate_scopes

__all__ = [
    "AbOutcome", "BlessResult", "CaptureOutcome", "CheckOutcome", "Progress", "Run", "Selection", "ToolchainUpgrade",
    "Workspace", "ab", "bless", "bless_commands", "bless_run", "capture", "cell_loops", "check",
    "check_golden_toolchains", "compile", "compile_cells", "compile_selection", "device", "doctor", "gate", "judge",
    "loop_estimates", "no_progress", "open_workspace", "review", "toolchain_upgrade", "unused_goldens",
    "validate_scopes",
]
