"""Shared test settings: hypothesis profile and the constructor arguments of every registered encoding."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=60)
settings.register_profile("ci", deadline=None, max_examples=60, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

#: Small constructor arguments for each registered encoding; a new encoding must add a line.
ENCODING_KWARGS = {
    "sinusoidal": {"d_model": 16},
    "learned": {"max_len": 64, "d_model": 16},
    "nope": {},
    "rope": {"d_head": 16},
    "alibi": {"n_heads": 4},
    "t5": {"n_heads": 4},
    "swin": {"n_heads": 4, "window": 7},
}
