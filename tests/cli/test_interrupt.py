"""Ctrl-C is one line and exit 130 wherever it lands, also inside a class's creation during an import."""

import subprocess
import sys

from xisa.errors import interrupted


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
