"""QK-norm: the RMSNorm of a head against a float64 loop of its formula for each gain, half types normalised
in float32 and rounded once, and the refusals."""

from __future__ import annotations

import pytest
import torch

from posenc.qk_norm import WEIGHTS, HeadRMSNorm, QKNorm, check_qk_norm
from tests.reference.layer_loop import rms_norm

GEMMA3 = QKNorm(weight="unit_offset")
LLAMA4 = QKNorm(weight=None, eps=1e-5, after_rotation=True)
QWEN3 = QKNorm()


def _gain(norm: HeadRMSNorm) -> list[float] | None:
    if norm.mode is None:
        return None
    w = norm.weight.detach().tolist()
    return w if norm.mode == "learned" else [1.0 + a for a in w]


@pytest.mark.parametrize("weight", WEIGHTS)
def test_head_norm_is_its_formula_for_each_gain(weight):
    norm = QKNorm(weight=weight, eps=1e-3).build(8).double()
    if weight is not None:
        with torch.no_grad():
            norm.weight.normal_()
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64) * 0.1  # small, so eps weighs
    expected = torch.tensor(
        [rms_norm(row, _gain(norm), 1e-3) for row in x.reshape(-1, 8).tolist()], dtype=torch.float64
    ).view_as(x)
    torch.testing.assert_close(norm(x), expected, atol=1e-15, rtol=1e-14)


def test_half_inputs_are_normalised_in_float32_and_rounded_once():
    norm = QKNorm(weight="unit_offset").build(64)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    out = norm(x)
    assert out.dtype == torch.bfloat16
    expected = torch.tensor(
        [rms_norm(row, _gain(norm), 1e-6) for row in x.double().tolist()], dtype=torch.float64
    )
    assert torch.equal(out, expected.to(torch.bfloat16))  # one rounding of the exact value


def test_qk_norm_errors_name_the_value():
    with pytest.raises(
        ValueError, match=r"qk_norm weight must be one of \['learned', 'unit_offset', None\], got 'gemma'"
    ):
        QKNorm(weight="gemma")
    with pytest.raises(ValueError, match="qk_norm eps must be positive and finite, got 0.0"):
        QKNorm(eps=0.0)
    with pytest.raises(TypeError, match="qk_norm eps must be a real number, got '1e-6'"):
        QKNorm(eps="1e-6")
    with pytest.raises(TypeError, match="after_rotation must be True or False, got 1"):
        QKNorm(after_rotation=1)
    with pytest.raises(TypeError, match="qk_norm must be a posenc.qk_norm.QKNorm or None, got 'rms'"):
        check_qk_norm("rms")
    with pytest.raises(ValueError, match="RotaryEncoding does not rotate each token on its own"):
        LLAMA4.check_place("RotaryEncoding", False)
    GEMMA3.check_place("RotaryEncoding", False)  # before the rotation, any rotation
