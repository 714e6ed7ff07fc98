"""@triton.autotune and @triton.heuristics objects as a spec's `function:`: the config a case picks (`config:` by index,
by values, or `all`) and the heuristics are applied to the stand-ins as a launch applies them."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from triton.compiler import make_backend
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITFunction

from support import FIXTURES, REPO
from xisa.compile.launch.config_all import config_lister
from xisa.compile.launch.bind import bind_cell, bind_values
from xisa.compile.launch.loader import load_kernel_function, load_kernel_object, unwrap_kernel
from xisa.compile.incremental.keys import result_key as cell_key
from xisa.errors import SpecError, XisaError
from xisa.spec.cases import build_cells, load_spec
from xisa.spec.targets import load_targets, select_targets

ARGS = """
defaults:
  args:
    x_ptr: {tensor: fp16, shape: [64, 4096]}
    y_ptr: {tensor: fp16, shape: [64, 4096]}
    n_cols: 4096
    stride_row: 4096
    scale: 0.5
"""


@pytest.fixture(scope="module")
def targets():
    return load_targets([REPO / "targets"])


@pytest.fixture
def project(tmp_path) -> Path:
    dest = tmp_path / "autotuned"
    shutil.copytree(FIXTURES / "autotuned", dest)
    return dest


def _spec(project: Path, function: str, cases: str, name: str = "k"):
    file = project / "kernels" / f"{name}.yaml"
    file.write_text(f"name: {name}\nsource: rows.py\nfunction: {function}\n{ARGS}cases:\n{cases}")
    return load_spec(file, display=f"kernels/{name}.yaml",
                     list_configs=config_lister([project], list(load_targets([REPO / "targets"]).values())))


def _cells(project, targets, function, cases, arch="gfx942"):
    spec = _spec(project, function, cases)
    return spec, build_cells([spec], select_targets(targets, [arch]))


def _bind(cell, project):
    return bind_cell(cell, load_kernel_object(cell.kernel, roots=[project]))


def _module(spec, project):
    return load_kernel_function(spec, roots=[project]).fn.__globals__


@pytest.mark.parametrize("function, kinds", [
    ("scale_rows", [Autotuner, Heuristics]), ("scale_rows_outer", [Heuristics, Autotuner]),
    ("scale_rows_heuristic", [Heuristics]), ("scale_rows_plain", [])])
def test_each_wrapper_kind_unwraps_to_its_jit_function(project, function, kinds):
    spec = _spec(project, function, "  - {name: c, config: 0}\n")
    named = load_kernel_object(spec, roots=[project])
    fn, wrappers = unwrap_kernel(named, spec)
    assert named is _module(spec, project)[function]
    assert isinstance(fn, JITFunction) and [type(w) for w in wrappers] == kinds
    assert load_kernel_function(spec, roots=[project]) is fn
    inner = named
    for _ in kinds:
        inner = inner.fn
    assert inner is fn


def test_something_else_is_refused_naming_what_it_wraps(project):
    (project / "kernels" / "rows.py").write_text((project / "kernels" / "rows.py").read_text()
                                                 + "\nnot_a_kernel = triton.runtime.autotuner.Heuristics(print, [], {})\n")
    spec = _spec(project, "not_a_kernel", "  - {name: c}\n")
    with pytest.raises(SpecError, match=r"'not_a_kernel' is a Heuristics around a builtin_function_or_method, "
                                        r"not a @triton.jit kernel.*fix: name a @triton.jit function"):
        load_kernel_object(spec, roots=[project])


def _launch_binding(tuner, fn, config_index, target, real_args, monkeypatch):
    """What Triton's own Autotuner.run / Heuristics.run hand to JITFunction.run when the autotuner picks config
    `config_index` (pruning leaves that one: no benchmark), bound for `target` by Triton's binder."""
    autotuner = next(w for w in [tuner, getattr(tuner, "fn", None)] if isinstance(w, Autotuner))
    seen = {}
    monkeypatch.setattr(autotuner, "cache", {})
    monkeypatch.setattr(autotuner, "prune_configs", lambda kwargs: [autotuner.configs[config_index]])
    monkeypatch.setattr(fn, "run", lambda *args, **kwargs: seen.update(args=args, kwargs=kwargs))
    tuner.run(*real_args, grid=(1,), warmup=False)
    names = [p.name for p in fn.params]
    kwargs = dict(zip(names, seen["args"]))
    kwargs.update({k: v for k, v in seen["kwargs"].items() if k in names})
    # JITFunction.run hands the rest to backend.parse_options, which keeps the fields its options have
    fields = {f.name for f in dataclasses.fields(make_backend(target.gpu_target()).parse_options({}))}
    options = {k: v for k, v in seen["kwargs"].items() if k not in names and k in fields}
    return bind_values(fn, target.gpu_target(), kwargs, options)


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
@pytest.mark.parametrize("function", ["scale_rows", "scale_rows_outer"])
@pytest.mark.parametrize("n_cols", [4096, 4000])
def test_each_config_binds_as_tritons_own_launch_path_does(project, targets, monkeypatch, arch, function, n_cols):
    """The attacker's case: xisa's reading of Config.all_kwargs / Heuristics.run drifting from Triton's code."""
    spec, cells = _cells(project, targets, function, f"  - {{name: c, config: all, args: {{n_cols: {n_cols}}}}}\n",
                         arch)
    tuner = load_kernel_object(spec, roots=[project])
    fn = load_kernel_function(spec, roots=[project])
    x = torch.empty((64, 4096), dtype=torch.float16)
    real_args = (x, torch.empty_like(x), n_cols, 4096, 0.5)
    records = []
    for index, cell in enumerate(sorted(cells, key=lambda c: c.case)):
        assert cell.case == f"c-config{index}"
        try:
            ours = _bind(cell, project)
        except XisaError as refused:   # a config this target refuses: Triton's launch refuses it too, alike
            with pytest.raises(XisaError) as launch_refused:
                _launch_binding(tuner, fn, index, cell.target, real_args, monkeypatch)
            assert str(refused).endswith(launch_refused.value.detail)
            continue
        theirs = _launch_binding(tuner, fn, index, cell.target, real_args, monkeypatch)
        assert ours.signature_record() == theirs.signature_record()
        assert ours.options_record() == theirs.options_record()
        records.append((ours.signature_record(), ours.options_record()))
    assert len(records) >= 2 and len(set(map(repr, records))) == len(records)   # each config binds its own


def test_config_all_expands_one_case_per_config(project, targets):
    spec, cells = _cells(project, targets, "scale_rows", "  - {name: c, config: all}\n  - {name: d, config: 1}\n")
    configs = _module(spec, project)["CONFIGS"]
    assert [case.name for case in spec.cases] == [f"c-config{i}" for i in range(len(configs))] + ["d"]
    assert [cell.config for cell in cells] == [*range(len(configs)), 1]
    # the cache keys the config: a case that picks another config under the same name is another compile
    other = _spec(project, "scale_rows", "  - {name: d, config: 0}\n", name="k")
    (other_cell,) = build_cells([other], select_targets(targets, ["gfx942"]))
    assert cell_key(other_cell, (project,)) != cell_key(cells[-1], (project,))


def test_config_by_values_picks_the_one_matching_config(project, targets):
    spec, cells = _cells(project, targets, "scale_rows",
                         "  - {name: big, config: {BLOCK: 256}}\n  - {name: small, config: {BLOCK: 64, num_warps: 2}}\n",
                         "sm_90")
    configs = _module(spec, project)["CONFIGS"]
    by_index = {i: _bind(cell, project) for i, cell in
                enumerate(build_cells([_spec(project, "scale_rows", "  - {name: c, config: all}\n", name="all")],
                                      select_targets(targets, ["sm_90"])))}
    for cell, want in zip(cells, [{"BLOCK": 256}, {"BLOCK": 64, "num_warps": 2}]):
        (index,) = [i for i, c in enumerate(configs) if want.items() <= c.all_kwargs().items()]
        bound = _bind(cell, project)
        assert bound.signature_record() == by_index[index].signature_record()
        assert bound.options_record() == by_index[index].options_record()
        assert bound.config.startswith(f"config {index} ")


def test_the_capture_form_full_values_picks_each_config(project, targets):
    """`xisa capture` writes the chosen config as every kwarg plus num_warps, num_stages, num_ctas (maxnreg when set)."""
    spec = _spec(project, "scale_rows", "  - {name: c, config: 0}\n")
    configs = _module(spec, project)["CONFIGS"]
    lines = "".join(f"  - {{name: c{i}, config: {json.dumps(c.all_kwargs())}}}\n" for i, c in enumerate(configs))
    _, cells = _cells(project, targets, "scale_rows", lines, "sm_90")
    assert [_bind(cell, project).config.split()[1] for cell in cells] == [str(i) for i in range(len(configs))]


def test_configs_compile_to_cells_of_their_own_and_a_failing_one_is_reported_alone(project, run_xisa):
    """AOT pruning: the config asking for a CTA cluster fails on AMD only, named, and the other cells compile."""
    out = run_xisa("compile", "--arch", "gfx942", "--arch", "sm_90", "--kernel", "rows:every*", "--json", "--top", "0",
                   cwd=project)
    cells = {(c["case"], c["target"]): c for c in json.loads(out.out)["cells"]}
    configs = _module(_spec(project, "scale_rows", "  - {name: c, config: 0}\n"), project)["CONFIGS"]
    failing = [i for i, c in enumerate(configs) if c.num_ctas > 1]
    assert failing and len(cells) == 2 * len(configs)
    for index in range(len(configs)):
        amd, nvidia = cells[f"every-config{index}", "gfx942"], cells[f"every-config{index}", "sm_90"]
        assert nvidia["status"] == "ok"
        if index in failing:
            assert amd["status"] == "error"
            assert f"config {index} {{" in amd["error"] and "num_ctas" in amd["error"]
            assert "every" in amd["error"] and "\n" not in amd["error"]
        else:
            assert amd["status"] == "ok"
    for target in ("gfx942", "sm_90"):
        fingerprints = [cells[f"every-config{i}", target]["sha256"] for i in range(len(configs))
                        if cells[f"every-config{i}", target]["status"] == "ok"]
        assert len(set(fingerprints)) == len(fingerprints) >= 2
    assert out.code == 2   # a cell that cannot compile is an error of the run, after every cell ran


def test_a_heuristic_of_an_int_argument_changes_the_code(project, run_xisa):
    out = run_xisa("compile", "--arch", "gfx942", "--kernel", "rows:every-config0", "--kernel", "rows:ragged", "--json",
                   "--top", "0", cwd=project)
    cells = {c["case"]: c for c in json.loads(out.out)["cells"]}
    even, ragged = cells["every-config0"], cells["ragged"]
    assert even["status"] == ragged["status"] == "ok"
    # same config, n_cols 4096 vs 4000: EVEN follows n_cols % BLOCK, as the kernel's heuristic computes it
    assert (even["constexprs"]["EVEN"], ragged["constexprs"]["EVEN"]) == (4096 % 64 == 0, 4000 % 64 == 0)
    assert even["constexprs"]["VEC"] == ragged["constexprs"]["VEC"] == 16 // torch.float16.itemsize
    assert even["sha256"] != ragged["sha256"]


def test_heuristics_read_tensor_standins_like_tensors(project, targets):
    (project / "kernels" / "rows.py").write_text((project / "kernels" / "rows.py").read_text() + """
probe = triton.heuristics({"BLOCK": lambda a: a["x_ptr"].shape[1] // 32 + a["x_ptr"].stride(0) // 4096
                           + a["x_ptr"].stride()[1] - 1 + a["x_ptr"].numel() // (64 * 4096) - 1
                           + (a["x_ptr"].data_ptr() % 16) + (str(a["x_ptr"].dtype) == "torch.float16"),
                           **HEURISTICS})(_scale_rows_fixed)
""")
    _, (cell,) = _cells(project, targets, "probe", "  - {name: c}\n")
    x = torch.empty((64, 4096), dtype=torch.float16)
    want = (x.shape[1] // 32 + x.stride(0) // 4096 + x.stride()[1] - 1 + x.numel() // (64 * 4096) - 1 + x.data_ptr() % 16
            + (str(x.dtype) == "torch.float16"))
    assert _bind(cell, project).signature_record()["constexprs"]["BLOCK"] == want


def _error(project, targets, function, case, arch="gfx942"):
    _, cells = _cells(project, targets, function, case, arch)
    with pytest.raises(XisaError) as info:
        _bind(cells[0], project)
    text = str(info.value)
    assert "\n" not in text and text.startswith("kernels/k.yaml: ")
    return text


def test_an_autotuned_function_without_config_names_the_fix(project, targets):
    text = _error(project, targets, "scale_rows", "  - {name: c}\n")
    count = len(_module(_spec(project, "scale_rows", "  - {name: c}\n", name="other"), project)["CONFIGS"])
    assert f"cases[0] (c).config: 'scale_rows' is autotuned ({count} configs) and the case picks none" in text
    assert "config: 0" in text and "or all" in text


@pytest.mark.parametrize("case, message", [
    ("{{name: c, config: {n}}}", "config {n} is out of range: the autotuner has {n} configs (fix: an index 0..{last}: "
                                 "config 0 {{BLOCK: 64, num_warps: 2"),
    ("{{name: c, config: {{num_stages: 1}}}}", "config {{num_stages: 1}} matches {n} ({every}) of the autotuner's {n} "
                                               "configs (fix: give values that match exactly one, or an index: config 0 {{"),
    ("{{name: c, config: {{BLOCK: 128}}}}", "config {{BLOCK: 128}} matches none of the autotuner's {n} configs"),
    ("{{name: c, config: {{BLOCK: 64, num_warps: '4'}}}}", "matches none"),   # a string is not the int
])
def test_a_config_that_is_not_exactly_one_lists_the_configs(project, targets, case, message):
    configs = _module(_spec(project, "scale_rows", "  - {name: c}\n", name="other"), project)["CONFIGS"]
    assert all(c.num_stages == 1 for c in configs) and not any(c.kwargs["BLOCK"] == 128 for c in configs)
    fill = dict(n=len(configs), last=len(configs) - 1, every=", ".join(map(str, range(len(configs)))))
    text = _error(project, targets, "scale_rows", f"  - {case.format(**fill)}\n")
    assert "cases[0] (c).config: " in text and message.format(**fill) in text


def test_config_on_a_plain_or_heuristics_only_function_is_refused(project, targets):
    for function in ("scale_rows_plain", "scale_rows_heuristic"):
        text = _error(project, targets, function, "  - {name: c, config: 0}\n")
        assert f"'{function}' is not an @triton.autotune object" in text and ".config" in text
        with pytest.raises(SpecError, match="is not an @triton.autotune object"):
            _spec(project, function, "  - {name: c, config: all}\n")


def test_a_case_value_the_config_would_replace_is_refused_naming_both(project, targets):
    text = _error(project, targets, "scale_rows", "  - {name: c, config: 1, constexprs: {BLOCK: 64}}\n")
    assert "cases[0] (c).constexprs.BLOCK: the case sets BLOCK to 64 but config 1 {BLOCK: 256" in text
    text = _error(project, targets, "scale_rows", "  - {name: c, config: 0, options: {num_warps: 8}}\n")
    assert "options.num_warps: the case sets num_warps to 8 but config 0 {" in text
    # the same value is no conflict (a captured case may repeat it)
    _, (cell,) = _cells(project, targets, "scale_rows", "  - {name: c, config: 0, constexprs: {BLOCK: 64}, "
                                                        "options: {num_warps: 2}}\n")
    _, (plain,) = _cells(project, targets, "scale_rows", "  - {name: c, config: 0}\n")
    assert _bind(cell, project).signature_record() == _bind(plain, project).signature_record()


def test_a_case_value_a_heuristic_would_replace_is_refused(project, targets):
    even = 4096 % 64 == 0   # n_cols % BLOCK of config 0, as the EVEN heuristic computes it
    text = _error(project, targets, "scale_rows", f"  - {{name: c, config: 0, constexprs: {{EVEN: {str(not even).lower()}}}}}\n")
    assert f"constexprs.EVEN: the case sets EVEN to {not even} but the kernel's heuristic 'EVEN' computes {even}" in text
    _, (cell,) = _cells(project, targets, "scale_rows", f"  - {{name: c, config: 0, constexprs: {{EVEN: {str(even).lower()}}}}}\n")
    assert _bind(cell, project).signature_record()["constexprs"]["EVEN"] == even


def test_a_heuristic_that_raises_names_the_heuristic_and_the_case(project, targets):
    text = _error(project, targets, "scale_rows", "  - {name: c, config: 0, args: {x_ptr: null}}\n")
    assert "cases[0] (c): heuristic 'VEC' raised AttributeError" in text


def test_config_all_cannot_vary_per_target(project, targets):
    with pytest.raises(SpecError, match=r"overrides.gfx\*.config: `config: all` expands a case"):
        _spec(project, "scale_rows", "  - {name: c, config: 0, overrides: {'gfx*': {config: all}}}\n")
    with pytest.raises(SpecError, match=r"overrides.gfx\*.config: `config: all` names one case per config"):
        _spec(project, "scale_rows", "  - {name: c, config: all, overrides: {'gfx*': {config: 1}}}\n")
    with pytest.raises(SpecError, match=r"cases\[0\] \(c\).config: config 'some' is not an index"):
        _spec(project, "scale_rows", "  - {name: c, config: some}\n")


def test_an_override_picks_another_config_per_target(project, targets):
    spec = _spec(project, "scale_rows", "  - {name: c, config: 2, overrides: {'gfx*': {config: 0}}}\n")
    cells = {c.target.name: c for c in build_cells([spec], select_targets(targets, ["gfx942", "sm_90"]))}
    assert (cells["gfx942"].config, cells["sm_90"].config) == (0, 2)
    assert _bind(cells["gfx942"], project).config.startswith("config 0 ")


EXTRA = """
def _zero_output(nargs):
    nargs["y_ptr"].zero_()            # data, not code: runs on the stand-in

def _needs_more(nargs):
    nargs["x_ptr"].fill_(0.0)         # what a stand-in cannot answer

with_hooks = triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2, pre_hook=_zero_output),
                                      triton.Config({"BLOCK": 64}, num_warps=4, pre_hook=_needs_more)],
                             key=[])(triton.heuristics(HEURISTICS)(_scale_rows))
with_maxnreg = triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2, maxnreg=128)],
                               key=[])(triton.heuristics(HEURISTICS)(_scale_rows))
twice = triton.autotune(configs=CONFIGS, key=[])(scale_rows)
"""


@pytest.fixture
def extra(project) -> Path:
    source = project / "kernels" / "rows.py"
    source.write_text(source.read_text() + EXTRA)
    return project


def test_a_config_pre_hook_runs_on_the_standins(extra, targets):
    _, (cell,) = _cells(extra, targets, "with_hooks", "  - {name: c, config: 0}\n")
    assert _bind(cell, extra).config.startswith("config 0 ")
    text = _error(extra, targets, "with_hooks", "  - {name: c, config: 1}\n")
    assert "config 1 {BLOCK: 64, num_warps: 4" in text and "pre_hook raised AttributeError" in text and "fill_" in text


@pytest.mark.parametrize("arch", ["gfx942", "sm_90"])
def test_maxnreg_is_an_option_where_the_backend_has_it_as_at_a_launch(extra, targets, monkeypatch, arch):
    spec, (cell,) = _cells(extra, targets, "with_maxnreg", "  - {name: c, config: {maxnreg: 128}}\n", arch)
    ours = _bind(cell, extra)
    x = torch.empty((64, 4096), dtype=torch.float16)
    theirs = _launch_binding(load_kernel_object(spec, roots=[extra]), load_kernel_function(spec, roots=[extra]), 0,
                             cell.target, (x, torch.empty_like(x), 4096, 4096, 0.5), monkeypatch)
    assert ours.options_record() == theirs.options_record()
    assert ours.options_record().get("maxnreg") == (128 if cell.target.backend == "cuda" else None)


def test_two_autotuners_stacked_are_refused(extra, targets):
    text = _error(extra, targets, "twice", "  - {name: c, config: 0}\n")
    assert "'twice' stacks 2 @triton.autotune decorators" in text


def test_config_in_defaults_and_matrix_patches(project, targets):
    file = project / "kernels" / "k.yaml"
    file.write_text(f"name: k\nsource: rows.py\nfunction: scale_rows\n{ARGS}  config: all\ncases:\n  - {{name: c}}\n"
                    "  - {name: m, matrix: {pick: {first: {config: 0}, by_block: {config: {BLOCK: 256}}}}}\n")
    spec = load_spec(file, display="kernels/k.yaml",
                     list_configs=config_lister([project], list(load_targets([REPO / "targets"]).values())))
    count = len(_module(spec, project)["CONFIGS"])
    assert [case.name for case in spec.cases] == [f"c-config{i}" for i in range(count)] + ["m-first", "m-by_block"]
    cells = {c.case: c for c in build_cells([spec], select_targets(targets, ["sm_90"]))}
    assert [cells[f"c-config{i}"].config for i in range(count)] == list(range(count))
    assert (cells["m-first"].config, cells["m-by_block"].config) == (0, {"BLOCK": 256})
    with pytest.raises(SpecError, match=r"cases\[0\] \(c\).config: `config: all` needs the kernel's config list"):
        load_spec(file, display="kernels/k.yaml")
