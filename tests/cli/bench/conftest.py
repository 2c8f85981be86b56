"""Tiny real results of each benchmark (so the commands render what the benchmarks really return)."""

from __future__ import annotations

import pytest

from posenc.bench import attention, attention_cuda, rope
from posenc.kernels.rope_triton import TRITON_INSTALLED


@pytest.fixture(scope="session")
def attention_result():
    return attention.run(
        seq_lens=(64,),
        rounds=1,
        reuse_memory=False,
        memory=False,
        sweep_sizes=(),
        only="alibi",
        heads=2,
        d_head=16,
    )


@pytest.fixture(scope="session")
def attention_gpu_result():
    """The GPU benchmark's code run on CPU, at two small lengths."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention_cuda, "CHECK_LEN", 64)
        return attention_cuda.run_cuda(
            seq_lens=(32, 64), device="cpu", dtype="float32", heads=2, d_head=16, rounds=1, compile=False
        )


@pytest.fixture(scope="session")
def rope_gpu_result():
    """The GPU benchmark's code run on CPU, the kernel in Triton's interpreter."""
    if not TRITON_INSTALLED:
        pytest.skip("triton is not installed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        return rope.run_cuda(
            shapes=((1, 8, 2, 1, 8),), dtypes=("float32", "bfloat16"), rounds=1, compile=False, device="cpu"
        )


@pytest.fixture
def wide(monkeypatch):
    """Tables one row per line."""
    monkeypatch.setenv("COLUMNS", "200")
