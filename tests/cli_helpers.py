"""Helpers the CLI test modules share."""

from __future__ import annotations

from dpalign.cli import main


def run_cli(argv, capsys):
    """``(exit code, stdout, stderr)`` of ``dpalign ARGV``; a traceback is a test failure."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err
