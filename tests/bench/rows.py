"""The check every row group of `posenc bench attention` gets at tiny sizes."""

from __future__ import annotations

import torch

from posenc.bench import attention


def assert_rows_agree_with_float64(inputs, rows: dict[str, str], weighs: float) -> None:
    """Each row in ``rows`` (name -> the reference it computes) is within its tolerance of the float64
    reference, and that reference is more than ``weighs`` from unbiased attention (the term matters)."""
    runs = attention.candidates(inputs, compile=False)
    plain = attention.reference(inputs, "none")
    for name, bias in rows.items():
        assert attention.CANDIDATES[name][0] == bias
        expected = attention.reference(inputs, bias)
        with torch.no_grad():
            error = attention.check(name, runs[name](), expected, inputs["q"].shape[-2])
        assert error <= attention.ROW_TOLERANCE.get(name, attention.TOLERANCE), (name, error)
        assert (plain - expected).abs().max() > weighs, name  # without the term, far from the scheme
