"""The amdgcn and SASS parsers on random text and on mutated real assembly.

Whatever the input, the only exception allowed is `ParseError`, and its message names a line.
The real samples in tests/fixtures/asm/ are `xisa compile --emit` output of tinyproj's kernels
(scale on gfx942, dot on gfx1100, scale on sm_90).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import FIXTURES
from xisa.analyze import amdgcn, sass
from xisa.errors import ParseError

ASM = FIXTURES / "asm"
AMDGCN_SAMPLES = [(ASM / "scale_gfx942.amdgcn").read_text(), (ASM / "dot_gfx1100.amdgcn").read_text()]
SASS_SAMPLES = [(ASM / "scale_sm_90.sass").read_text()]
RESOURCE_SAMPLE = ("Resource usage:\n Common:\n  GLOBAL:0\n Function scale_kernel:\n"
                   "  REG:12 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:392 TEXTURE:0 SURFACE:0 SAMPLER:0\n")

FUZZ = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_LINE = re.compile(r"\bline (\d+)\b")

# Text that looks like assembly: mnemonics, labels, directives, comments, metadata, control bits.
_TOKENS = st.sampled_from([
    "s_endpgm", "v_add_f32_e32 v0, v1, v2", "s_branch .LBB0_1", ".LBB0_1:", ".Lfunc_end0:", "scale_kernel:",
    ".type scale_kernel,@function", ".amdhsa_kernel scale_kernel", ".amdhsa_next_free_vgpr 12", "; comment",
    ".amdgpu_metadata", ".end_amdgpu_metadata", "amdhsa.kernels:", "  - .vgpr_count: 8", ": [", "{{", "\t",
    "Function:scale_kernel", "--:-:0:-:1\tLDC R1, c[0x0][0x28];", "EXIT;", "LBB0:", "BRA LBB0;", "BRA 0x40;",
    "@!P0 LDG.E.64 R8, desc[UR4][R2.64];", "/*0040*/ NOP ;", ".L_x_1:", "BSSY B0, 0x3f0 ;", "code for sm_90",
    "Function : other", "REG:12 STACK:0 SHARED:0 LOCAL:0", "\x00", "é", "//---", "0x", ":", ";", "",
])
_GARBAGE = st.one_of(st.text(max_size=40), _TOKENS)


def _lines_of(text: str) -> int:
    return max(1, len(text.splitlines()))


def _assert_parse_error_names_a_line(exc: ParseError, text: str) -> None:
    message = str(exc)
    match = _LINE.search(message)
    assert match, f"ParseError without a line: {message!r}"
    assert 1 <= int(match.group(1)) <= _lines_of(text) + 1, message
    assert "\n" not in message


def _only_parse_errors(parse, text: str) -> None:
    try:
        parse(text)
    except ParseError as exc:
        _assert_parse_error_names_a_line(exc, text)


@st.composite
def mutated(draw, samples: list[str]) -> str:
    """A real sample with lines deleted, duplicated, swapped, garbage inserted, or cut short."""
    lines = draw(st.sampled_from(samples)).splitlines()
    for _ in range(draw(st.integers(1, 6))):
        if not lines:
            break
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "garbage", "truncate", "mangle"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "garbage":
            lines.insert(i, draw(_GARBAGE))
        elif op == "truncate":
            cut = draw(st.integers(0, len(lines[i])))
            lines = lines[:i] + [lines[i][:cut]]
        else:
            cut = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:cut] + draw(_GARBAGE) + lines[i][cut:]
    return "\n".join(lines) + draw(st.sampled_from(["\n", ""]))


random_text = st.one_of(st.text(max_size=400), st.lists(_GARBAGE, max_size=40).map("\n".join))


def _amdgcn_all(text: str) -> None:
    amdgcn.parse_stream(text)
    amdgcn.analyze_amdgcn(text, lds_bytes=0)


def test_real_samples_parse():
    for text in AMDGCN_SAMPLES:
        analysis, name = amdgcn.analyze_amdgcn(text)
        assert analysis.instructions > 0 and name
    for text in SASS_SAMPLES:
        assert sum(1 for _ in sass.parse_stream(text).instructions()) > 0
    assert sass.parse_resource_usage(RESOURCE_SAMPLE, "scale_kernel")["REG"] == 12


@FUZZ
@given(random_text)
def test_amdgcn_random_text(text):
    _only_parse_errors(_amdgcn_all, text)


@FUZZ
@given(mutated(AMDGCN_SAMPLES))
def test_amdgcn_mutated_real_assembly(text):
    _only_parse_errors(_amdgcn_all, text)


@FUZZ
@given(st.sampled_from(AMDGCN_SAMPLES), st.integers(min_value=0))
def test_amdgcn_truncated_anywhere(sample, cut):
    text = sample[: cut % (len(sample) + 1)]
    _only_parse_errors(_amdgcn_all, text)


@FUZZ
@given(random_text)
def test_sass_random_text(text):
    _only_parse_errors(sass.parse_stream, text)
    _only_parse_errors(sass.parse_resource_usage, text)


@FUZZ
@given(mutated(SASS_SAMPLES))
def test_sass_mutated_real_assembly(text):
    _only_parse_errors(sass.parse_stream, text)


@FUZZ
@given(mutated([RESOURCE_SAMPLE]))
def test_sass_resource_usage_mutated(text):
    _only_parse_errors(sass.parse_resource_usage, text)


@pytest.mark.parametrize("parse,text,line", [
    (amdgcn.parse_stream, AMDGCN_SAMPLES[0].split(".Lfunc_end0:")[0], None),       # truncated: no .Lfunc_end
    (amdgcn.parse_stream, "\n".join(AMDGCN_SAMPLES[0].splitlines()[:5]), None),    # no kernel label
    (sass.parse_stream, "Function:k\nLDC R1, c[0x0][0x28]\n", 2),                  # no ';'
    (sass.parse_stream, "Function:a\nEXIT;\nFunction:b\nEXIT;\n", 3),              # two functions
])
def test_parse_errors_name_the_line(parse, text, line):
    with pytest.raises(ParseError) as info:
        parse(text)
    _assert_parse_error_names_a_line(info.value, text)
    if line is not None:
        assert f"line {line}" in str(info.value)
