"""Shared test settings: hypothesis profile, a torch seed per test, and the constructor arguments of every
registered encoding."""

from __future__ import annotations

import os
import zlib

import pytest
import torch
from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(autouse=True)
def _seeded_by_test(request):
    """Each test starts torch's global generator from a seed of its own id: its random inputs no longer
    depend on which tests ran before it, which the installed extras decide."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


class _SmallArguments(dict):
    """name -> small constructor arguments: these, else the encoding's own ``model_arguments`` for a
    model of width 32 with 4 heads (8 channels each: M-RoPE needs a pair per axis) and 64 positions
    (a new encoding needs no line here)."""

    def __missing__(self, name: str) -> dict:
        from posenc.encodings import encoding_class

        return encoding_class(name).model_arguments(d_model=32, n_heads=4, max_len=64, causal=True)


#: Small constructor arguments for each registered encoding (widths the tests' tensors use).
ENCODING_KWARGS = _SmallArguments(
    sinusoidal={"d_model": 16},
    learned={"max_len": 64, "d_model": 16},
    nope={},
    rope={"d_head": 16},
    alibi={"n_heads": 4},
    t5={"n_heads": 4},
    swin={"n_heads": 4, "window": 7},
)


@pytest.fixture(scope="session", autouse=True)
def _properties_measured_once():
    """Every claim of each of posenc's own encodings is measured once per test session: ``verify --all``,
    the report and the analysis tests ask for the same specimens many times, and each measurement takes
    seconds. An encoding defined by a test (another class under a registered name) is measured anew."""
    from posenc.analysis import verification
    from posenc.encodings import ENCODINGS

    measure = verification._properties_of
    measured: dict[tuple, dict] = {}

    def once(name: str, length: int) -> dict:
        cls = ENCODINGS.get(name)
        if cls is None or not cls.__module__.startswith("posenc."):
            return measure(name, length)
        key = (name, length, cls)
        if key not in measured:
            measured[key] = measure(name, length)
        return dict(measured[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(verification, "_properties_of", once)
        yield


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory):
    """A report written once by `posenc report` (no lab records), shared by the report tests."""
    from posenc.cli import main

    out = tmp_path_factory.mktemp("report")
    missing = out / "no-lab.sqlite"
    assert main(["report", "--out", str(out), "--no-progress", "--lab-db", str(missing)]) == 0
    return out
