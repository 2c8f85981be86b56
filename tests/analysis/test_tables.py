"""Code tables, bias matrices, bias per distance and Swin offset tables, against float64 loops."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc.analysis import (
    bias_by_distance,
    bias_matrix,
    code_table,
    swin_offset_table,
    t5_bucket_map,
)
from tests.reference.bias_loop import alibi_bias_loop, alibi_slopes_paper, t5_bucket
from tests.reference.sinusoidal_loop import sinusoidal_rows


def test_sinusoidal_code_table_equals_the_seed_loop():
    table = code_table(posenc.build("sinusoidal", d_model=16), 40)
    loop = torch.tensor(sinusoidal_rows(range(40), 16), dtype=torch.float64)
    assert table.dtype == torch.float64 and table.shape == (40, 16)
    torch.testing.assert_close(table, loop, rtol=0, atol=1e-13)


def test_learned_code_table_is_the_weight_rows():
    encoding = posenc.build("learned", max_len=32, d_model=8)
    torch.testing.assert_close(code_table(encoding, 32), encoding.weight.detach().double(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="max_len=32"):
        code_table(encoding, 33)


def test_code_table_refuses_encodings_without_codes():
    with pytest.raises(TypeError, match="RotaryEncoding adds none"):
        code_table(posenc.build("rope", d_head=8), 4)


@pytest.mark.parametrize("n_heads", [4, 6])
def test_alibi_bias_matrix_equals_the_loop(n_heads):
    bias = bias_matrix(posenc.build("alibi", n_heads=n_heads), 12)
    loop = alibi_bias_loop(range(12), range(12), alibi_slopes_paper(n_heads))
    torch.testing.assert_close(
        bias, torch.tensor(loop, dtype=torch.float64), rtol=1e-7, atol=0
    )  # float32 hook


def test_bias_matrix_of_an_encoding_without_bias_is_refused():
    with pytest.raises(ValueError, match="RotaryEncoding adds no attention bias"):
        bias_matrix(posenc.build("rope", d_head=8), 4)


def test_alibi_bias_by_distance_is_minus_slope_times_distance():
    distances = list(range(-5, 40))
    values = bias_by_distance(posenc.build("alibi", n_heads=8), torch.tensor(distances))
    loop = [[-m * d for d in distances] for m in alibi_slopes_paper(8)]
    torch.testing.assert_close(values, torch.tensor(loop, dtype=torch.float64), rtol=0, atol=0)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_bias_by_distance_looks_up_the_bucket_of_minus_the_distance(bidirectional):
    encoding = posenc.build("t5", n_heads=3, bidirectional=bidirectional)
    distances = list(range(-200, 201, 7))
    values = bias_by_distance(encoding, distances)
    table = encoding.table.detach().double()
    loop = [[float(table[t5_bucket(-d, bidirectional), h]) for d in distances] for h in range(3)]
    torch.testing.assert_close(values, torch.tensor(loop, dtype=torch.float64), rtol=0, atol=0)


def test_bias_by_distance_refuses_swin_and_encodings_without_bias():
    with pytest.raises(TypeError, match="positions index tokens on 2 axes"):
        bias_by_distance(posenc.build("swin", n_heads=2, window=3), [0, 1])
    with pytest.raises(ValueError, match="NoPE adds no attention bias"):
        bias_by_distance(posenc.build("nope"), [0, 1])


@pytest.mark.parametrize("window", [3, (2, 4)])
def test_swin_offset_table_holds_the_bias_of_every_token_pair_at_its_offset(window):
    encoding = posenc.build("swin", n_heads=2, window=window)
    height, width = (window, window) if isinstance(window, int) else window
    tokens = height * width
    offsets = swin_offset_table(encoding)
    bias = encoding.bias(torch.arange(tokens), torch.arange(tokens)).detach().double()  # [h, N, N]
    assert offsets.shape == (2, 2 * height - 1, 2 * width - 1)
    for p in range(tokens):
        for q in range(tokens):
            (y1, x1), (y2, x2) = divmod(p, width), divmod(q, width)
            assert torch.equal(offsets[:, y1 - y2 + height - 1, x1 - x2 + width - 1], bias[:, p, q])


def test_swin_offset_table_refuses_other_encodings():
    with pytest.raises(TypeError, match="got T5RelativeBias"):
        swin_offset_table(posenc.build("t5", n_heads=2))


def test_t5_bucket_map_equals_the_loop_for_both_variants():
    relative = list(range(-300, 301))
    buckets = t5_bucket_map(torch.tensor(relative), num_buckets=32, max_distance=128)
    assert list(buckets) == ["bidirectional", "causal"]
    assert buckets["bidirectional"].tolist() == [t5_bucket(r, True) for r in relative]
    assert buckets["causal"].tolist() == [t5_bucket(r, False) for r in relative]
