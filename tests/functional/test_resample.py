"""Learned tables on a new grid or window: shapes, dtypes, the prefix rows, what stays exact, bad input."""

from __future__ import annotations

import re

import pytest
import torch

import posenc
from posenc.functional import resample_table, resize_relative_table


def test_the_same_grid_gives_the_same_table_and_the_prefix_rows_are_kept():
    table = torch.randn(1, 1 + 6 * 4, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(
        resample_table(table, (6, 4), (6, 4), prefix_tokens=1), table, rtol=0, atol=1e-6
    )
    larger = resample_table(table, (6, 4), (12, 9), prefix_tokens=1)
    assert larger.shape == (1, 1 + 12 * 9, 8) and torch.equal(larger[:, :1], table[:, :1])


def test_a_table_that_is_linear_in_row_and_column_is_interpolated_exactly_by_bilinear():
    # the grid's rows and columns in float64: align_corners=False samples at (i + 0.5)·old/new − 0.5
    rows, cols = torch.meshgrid(torch.arange(4.0), torch.arange(6.0), indexing="ij")
    table = torch.stack((rows, cols), dim=-1).reshape(24, 2).double()  # the code is the coordinate
    new = resample_table(table, (4, 6), (8, 12), mode="bilinear", antialias=False)
    sample = lambda size, old: ((torch.arange(size) + 0.5) * old / size - 0.5).clamp(0, old - 1)  # noqa: E731
    expected_rows, expected_cols = torch.meshgrid(sample(8, 4), sample(12, 6), indexing="ij")
    torch.testing.assert_close(new[:, 0], expected_rows.flatten().double(), rtol=0, atol=1e-12)
    torch.testing.assert_close(new[:, 1], expected_cols.flatten().double(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(8))
def test_the_table_comes_back_in_its_dtype_computed_in_float32_or_better(dtype, seed):
    table = torch.randn(16, 4, generator=torch.Generator().manual_seed(seed)).to(dtype)
    assert resample_table(table, (4, 4), (6, 6)).dtype == dtype
    reference = resample_table(table.double(), (4, 4), (6, 6))
    error = (resample_table(table, (4, 4), (6, 6)).double() - reference).abs().max()
    # relative to the largest entry: half precisions are computed in float32 and round once (≤ ½ ulp
    # seen); float32 accumulates the roundings of a 4-tap filter on each axis (≤ 6 ulp seen over 3000
    # tables). An absolute bound failed for a table of large entries.
    ulps = 1 if dtype in (torch.bfloat16, torch.float16) else 8
    assert error <= ulps * torch.finfo(dtype).eps * table.double().abs().max()


def test_learned_encodings_and_swin_tables_move_to_a_new_grid_or_window():
    learned = posenc.build("learned", max_len=1 + 16, d_model=8)
    moved = learned.resampled((4, 4), (6, 6), prefix_tokens=1)
    assert moved.max_len == 37 and torch.equal(moved.weight[0], learned.weight[0])
    swin = posenc.build("swin", n_heads=3, window=7)
    larger = swin.resized(12)
    assert larger.table.shape == (23 * 23, 3)
    # the centre offset (0, 0) stays the centre: bicubic at matching sample points keeps it close
    centre_old, centre_new = swin.offset_table()[:, 6, 6], larger.offset_table()[:, 11, 11]
    assert torch.allclose(centre_old, centre_new, atol=0.05)
    torch.testing.assert_close(resize_relative_table(swin.table, 7, 7), swin.table, rtol=0, atol=1e-6)


def test_an_int_size_is_the_side_of_a_grid_with_the_other_grids_axes():
    table = torch.randn(1 + 14 * 14, 8, generator=torch.Generator().manual_seed(0))
    square = resample_table(table, (14, 14), (16, 16), prefix_tokens=1)
    for old, new in [(14, 16), (14, (16, 16)), ((14, 14), 16)]:
        assert torch.equal(resample_table(table, old, new, prefix_tokens=1), square)
    cube = torch.randn(2 * 2 * 2, 4, generator=torch.Generator().manual_seed(1))
    expected = resample_table(cube, (2, 2, 2), (3, 3, 3), mode="trilinear", antialias=False)
    assert torch.equal(resample_table(cube, 2, (3, 3, 3), mode="trilinear", antialias=False), expected)
    learned = posenc.build("learned", max_len=1 + 16, d_model=8)
    assert torch.equal(
        learned.resampled(4, 6, prefix_tokens=1).weight,
        learned.resampled((4, 4), (6, 6), prefix_tokens=1).weight,
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_a_resampled_learned_encoding_keeps_its_tables_dtype(dtype):
    learned = posenc.build("learned", max_len=16, d_model=8).to(dtype)
    moved = learned.resampled((4, 4), (6, 6))
    assert moved.weight.dtype == dtype and moved.weight.device == learned.weight.device
    assert torch.equal(moved.weight, resample_table(learned.weight.detach(), (4, 4), (6, 6)))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: resample_table(torch.zeros(17, 4), (4, 4), (0, 4), prefix_tokens=1),
            "new_size[0] must be positive, got 0",
        ),
        (
            lambda: resample_table(torch.zeros(17, 4), (4, 4), (8, 8), prefix_tokens=20),
            "prefix_tokens must lie in 0 … 17 (the table's rows), got 20",
        ),
        (
            lambda: resample_table(torch.zeros(17, 4), (4, 5), (8, 8), prefix_tokens=1),
            "the table holds 16 grid rows after 1 prefix tokens, but a grid of (4, 5) has 20",
        ),
        (
            lambda: resample_table(torch.zeros(16, 4), (4, 4), (8, 8, 8)),
            "old_size (4, 4) and new_size (8, 8, 8) must have the same number of axes",
        ),
        (lambda: resample_table(torch.zeros(16, 4), (4, 4), (8, 8), mode="trilinear"), "mode must be one of"),
        (
            lambda: resample_table(torch.zeros(16, 4), (4, 4), (8, 8), mode="nearest"),
            "antialias=True needs mode bilinear or bicubic",
        ),
        (
            lambda: resample_table(torch.zeros(2, 16, 4), (4, 4), (8, 8)),
            "table must be [N, d] or [1, N, d], got shape (2, 16, 4)",
        ),
        (lambda: resize_relative_table(torch.zeros(10, 3), 3, 5), "a 3×3 window's table has 25 rows"),
    ],
)
def test_bad_grids_and_tables_are_refused_naming_the_value(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_an_integer_table_is_refused():
    with pytest.raises(TypeError, match="table must be a floating-point tensor, got dtype torch.int64"):
        resample_table(torch.zeros(16, 4, dtype=torch.long), (4, 4), (8, 8))
