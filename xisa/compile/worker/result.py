"""The outcome of one cell: compiled and analyzed, or an error with its message."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from xisa.analyze.expect import Launch
from xisa.analyze.model import Analysis
from xisa.names import NamedByCell


@dataclass
class CellResult(NamedByCell):
    kernel: str
    case: str
    target: str
    status: str                                   # ok | error
    error: str | None = None
    error_kind: str | None = None                 # spec | bind | compile | parse | timeout | crash
    analysis: Analysis | None = None
    binding: dict[str, Any] = field(default_factory=dict)   # signature, constexprs, attrs
    options: dict[str, Any] = field(default_factory=dict)
    # The autotuner config compiled, of those the target's pruning keeps: {index (None: the pruner made it), values}
    config: dict[str, Any] | None = None
    seconds: float = 0.0
    stages: dict[str, str | bytes] = field(default_factory=dict, repr=False)
    cached: bool = False
    # Compiled by this run's front end, its back end's work found in xisa's back-end store (`backend_store.py`).
    reused_backend: bool = False
    # ... and its front end's inputs were ones seen before (`front_end_key.py`): the front end did not run either.
    skipped_front_end: bool = False
    # What the cell's target resolved (`resolution`): the autotuner config, the platform facts the load and the
    # compile read -> value, notes on launch options Triton rewrote. Shown per cell; not part of a golden.
    resolved: dict[str, Any] = field(default_factory=dict)
    # Whether one workgroup fits the target, judged with the spec's `launchable` (`xisa.api.run.judge_launches`);
    # derived from the analysis, the options and the target file, so never cached nor written to a golden.
    launch: Launch | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def resources(self) -> dict[str, Any]:
        return dict(self.analysis.resources) if self.analysis else {}

    def to_json(self) -> dict[str, Any]:
        analysis = self.analysis
        return {
            "kernel": self.kernel, "case": self.case, "target": self.target, "status": self.status,
            "error": self.error,
            "sha256": analysis.sha256 if analysis else None,
            "code_sha256": analysis.code_sha256 if analysis else None,
            "code_sections": dict(analysis.code_sections) if analysis else {},
            "metadata": dict(analysis.metadata) if analysis else {},   # what the launcher reads beside the code
            "instructions": analysis.instructions if analysis else None,
            "histogram": dict(analysis.histogram) if analysis else {},
            "base_histogram": dict(analysis.base_histogram) if analysis else {},
            "classes": dict(analysis.classes) if analysis else {},
            "stages": dict(analysis.stages) if analysis else {},   # stage -> SHA-256, pipeline order
            "lines": [dict(row) for row in analysis.lines] if analysis else [],   # instructions per source line
            "signature": self.binding.get("signature", {}),
            "constexprs": self.binding.get("constexprs", {}),
            "attrs": self.binding.get("attrs", {}),
            "options": dict(self.options),
            "config": self.config,
            "resources": self.resources(),
            "launch": self.launch.to_json() if self.launch else None,
            "seconds": round(self.seconds, 3),
            "cached": self.cached,   # read from xisa's result cache, not compiled by this run
            "resolved": dict(self.resolved),
        }

    def to_cache(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "case": self.case, "target": self.target, "status": self.status,
            "error": self.error, "error_kind": self.error_kind, **analysis_to_cache(self.analysis),
            "binding": self.binding, "options": self.options, "config": self.config, "seconds": self.seconds,
            "resolved": self.resolved,
        }

    @classmethod
    def from_cache(cls, data: dict[str, Any]) -> "CellResult":
        return cls(kernel=data["kernel"], case=data["case"], target=data["target"], status=data["status"],
                   error=data["error"], error_kind=data.get("error_kind"), analysis=analysis_from_cache(data),
                   binding=data["binding"], options=data["options"], config=data["config"], seconds=data["seconds"],
                   resolved=data["resolved"], cached=True)


def analysis_to_cache(analysis: Analysis | None) -> dict[str, Any]:
    """An analysis as a cache entry keeps it: its record, its stream, and its source lines outside the record, as
    runs [loc, count] in stream order (neighbours share a line: ~40x smaller than a loc per instruction, which a
    warm check would read for every cell)."""
    return {
        "analysis": analysis.to_record() if analysis else None,
        "stream": analysis.stream_text if analysis else "",
        "loc_runs": [[loc, len(list(run))] for loc, run in itertools.groupby(analysis.locs)]
        if analysis and any(analysis.locs) else [],
    }


def analysis_from_cache(data: dict[str, Any]) -> Analysis | None:
    analysis = Analysis.from_record(data["analysis"], data["stream"]) if data.get("analysis") else None
    if analysis is not None:
        analysis.locs = [loc for loc, count in data.get("loc_runs") or [] for _ in range(count)]
    return analysis
