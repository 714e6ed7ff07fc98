"""Ctrl-C is one line and exit 130 wherever it lands, also inside a class's creation during an import."""

import subprocess
import sys

import pytest

from xisa.errors import interrupted

pytestmark = pytest.mark.unit   # needs no compile and no Triton: the unit tier (pytest -m unit)


def _wrapped_interrupt() -> RuntimeError:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:   # what type.__new__ does to an error in a field's __set_name__
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'x' in 'C'") from interrupt
    except RuntimeError as error:
        return error


def test_an_interrupt_wrapped_by_class_creation_is_an_interrupt():
    assert interrupted(KeyboardInterrupt())
    assert interrupted(_wrapped_interrupt())
    assert not interrupted(RuntimeError("Error calling __set_name__"))
    assert not interrupted(ValueError())


def test_the_entry_point_turns_a_wrapped_interrupt_at_import_into_one_line(tmp_path):
    """`xisa.cli` importing raises the RuntimeError a dataclass's creation makes of Ctrl-C: 130, one line."""
    (tmp_path / "xisa_cli_stand_in").mkdir()
    program = ("import sys, types\n"
               "from xisa import __main__ as entry\n"
               "class Finder:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'xisa.cli':\n"
               "            try:\n"
               "                raise KeyboardInterrupt\n"
               "            except KeyboardInterrupt as k:\n"
               "                raise RuntimeError('Error calling __set_name__') from k\n"
               "sys.meta_path.insert(0, Finder())\n"
               "entry.main()\n")
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130 and proc.stderr.strip().splitlines() == ["xisa: interrupted"], proc.stderr


def test_an_error_left_by_ctrl_c_inside_an_extension_s_import_is_an_interrupt(monkeypatch, capsys):
    """Ctrl-C inside NumPy's C import (torch importing it) leaves it half made; the next import of it fails with its
    own ImportError, no KeyboardInterrupt in its chain: after a SIGINT, that error is the interrupt (130, one line)."""
    import os
    import signal
    import time

    import pytest

    import xisa.cli as cli

    def command_hit_by_ctrl_c(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)   # the handler raises here
        except KeyboardInterrupt:
            pass            # swallowed where it landed, as a half-made extension module's import does
        raise ImportError("cannot load module more than once per process")

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(cli, "app", command_hit_by_ctrl_c)
        with pytest.raises(SystemExit) as exit_:
            cli.main(["check"])
    finally:
        signal.signal(signal.SIGINT, saved)
    assert exit_.value.code == 130 and capsys.readouterr().err == "xisa: interrupted\n"
    monkeypatch.setattr(cli, "app", lambda *a, **k: (_ for _ in ()).throw(ImportError("no interrupt came")))
    with pytest.raises(ImportError):   # without a SIGINT, the same error is an error
        cli.main(["check"])
