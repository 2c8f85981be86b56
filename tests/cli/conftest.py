"""Running the posenc command in-process, and what a refusal must look like."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from posenc.cli import main


@dataclass
class Run:
    """One in-process run of the posenc command: exit status and what it printed."""

    code: int
    out: str
    err: str

    def assert_refused(self, *fragments: str, code: int = 2) -> None:
        """Exit status ``code`` and one line on stderr containing every fragment; no traceback."""
        assert self.code == code, (self.code, self.err)
        assert "Traceback" not in self.err
        assert len(self.err.strip().splitlines()) == 1, self.err
        for fragment in fragments:
            assert fragment in self.err, (fragment, self.err)


@pytest.fixture
def cli(capsys):
    """``cli(*argv) -> Run``; an interrupt escaping main fails the test instead of ending the session."""

    def run(*argv: str) -> Run:
        try:
            code = main(list(argv))
        except KeyboardInterrupt:
            pytest.fail("KeyboardInterrupt escaped posenc.cli.main")
        captured = capsys.readouterr()
        return Run(code, captured.out, captured.err)

    return run
