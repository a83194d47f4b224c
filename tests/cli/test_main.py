import subprocess
import sys

import pytest

from trilog.cli import main


def test_no_subcommand_prints_help(capsys):
    assert main([]) == 2
    assert "SUBCOMMAND" in capsys.readouterr().out


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "zookeeper" in capsys.readouterr().out


@pytest.mark.smoke
def test_console_script_version():
    out = subprocess.run([sys.executable, "-m", "trilog.cli._main", "--version"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert out.stdout.startswith("trilog ")
