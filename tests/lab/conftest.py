"""Shared fixture of the lab tests: one smoke sweep, recorded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.helpers import lab


@pytest.fixture(scope="session")
def smoke_db(tmp_path_factory) -> Path:
    """A database holding the whole smoke preset (every task and encoding, seed 0)."""
    db = tmp_path_factory.mktemp("smoke") / "records.sqlite"
    assert lab("run", "--preset", "smoke", "--db", str(db), "--threads", "1", "--no-progress") == 0
    return db
