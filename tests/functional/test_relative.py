"""T5 buckets and Swin's relative index against loops written from the papers, their properties and bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from posenc.functional.relative import swin_relative_index, swin_table_size, t5_relative_bucket
from tests.reference.bias_loop import swin_index_loop, t5_bucket, t5_log_value

#: How close to an integer the float64 value ln(d/e)/ln(D/e)·(n − e) must be for float rounding to
#: decide its truncation: posenc rounds like T5 (float32), the loop in float64, and only there they may differ.
TIE = 1e-4


def assert_matches_the_loop(relative, bidirectional, num_buckets, max_distance):
    buckets = t5_relative_bucket(
        relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    ).tolist()
    for position, bucket in zip(relative.tolist(), buckets, strict=True):
        expected = t5_bucket(position, bidirectional, num_buckets, max_distance)
        if bucket == expected:
            continue
        value = t5_log_value(position, bidirectional, num_buckets, max_distance)
        assert value is not None and abs(value - round(value)) < TIE and abs(bucket - expected) == 1, (
            f"relative position {position}: bucket {bucket}, loop {expected}, value {value}"
        )


# --- T5 --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 16), (64, 1000), (10, 50)])
def test_t5_buckets_match_the_loop(bidirectional, num_buckets, max_distance):
    relative = torch.arange(-3000, 3001)
    assert_matches_the_loop(relative, bidirectional, num_buckets, max_distance)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_defaults_equal_the_loop_everywhere(bidirectional):
    relative = torch.arange(-5000, 5001)
    expected = [t5_bucket(p, bidirectional) for p in relative.tolist()]
    assert t5_relative_bucket(relative, bidirectional=bidirectional).tolist() == expected


@given(
    bidirectional=st.booleans(),
    num_buckets=st.integers(4, 160),
    extra_distance=st.integers(1, 3000),
    relative=st.lists(st.integers(-(2**22), 2**22), min_size=1, max_size=50),
)
def test_t5_buckets_match_the_loop_for_any_parameters(bidirectional, num_buckets, extra_distance, relative):
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    assert_matches_the_loop(torch.tensor(relative), bidirectional, num_buckets, exact + extra_distance)


def test_t5_known_values():
    relative = torch.tensor([0, -1, 1, -7, -8, -11, -16, -127, -128, -10_000, 7, 10_000])
    assert t5_relative_bucket(relative).tolist() == [0, 1, 17, 7, 8, 8, 10, 15, 15, 15, 23, 31]
    # causal: keys after the query share bucket 0; distances 0 … 15 exact, 16 opens the log buckets
    relative = torch.tensor([5, 0, -1, -15, -16, -127, -128, -10_000])
    assert t5_relative_bucket(relative, bidirectional=False).tolist() == [0, 0, 1, 15, 16, 31, 31, 31]


def test_t5_rounds_exact_ties_in_float32_like_t5():
    # 18 buckets, 128: e = 4, n − e = 5, ln(d/4)/ln(32)·5 = log2(d/4) is whole at d = 8, 16, 64; T5's
    # float32 reaches it (bucket 4 + 1 = 5 at d = 8), the float64 loop falls just short (bucket 4)
    relative = torch.tensor([-8, 8, -16, -64])
    assert t5_relative_bucket(relative, num_buckets=18, max_distance=128).tolist() == [5, 14, 6, 8]
    assert [t5_bucket(p, True, 18, 128) for p in relative.tolist()] == [4, 13, 5, 7]


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(("num_buckets", "max_distance"), [(32, 128), (8, 16), (64, 1000), (33, 77), (4, 3)])
def test_t5_buckets_grow_with_distance_and_saturate_beyond_max_distance(
    bidirectional, num_buckets, max_distance
):
    distance = torch.arange(0, 4 * max_distance + 100)
    per_side = num_buckets // 2 if bidirectional else num_buckets
    exact = per_side // 2
    halves = [-distance] + ([distance] if bidirectional else [])
    for offset, relative in enumerate(halves):
        buckets = t5_relative_bucket(
            relative, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
        )
        if offset:  # the upper half starts at d = 1; d = 0 is the lower half's bucket 0
            buckets, d = buckets[1:] - per_side, distance[1:]
        else:
            d = distance
        assert (buckets.diff() >= 0).all()  # monotone in |distance|
        assert (buckets.diff() <= 1).all()  # and no bucket skipped
        assert torch.equal(buckets[d < exact], d[d < exact])  # exact buckets
        assert (buckets[d >= max_distance] == per_side - 1).all()  # everything beyond: the last bucket
        assert buckets.max() == per_side - 1
    if not bidirectional:
        assert (
            t5_relative_bucket(
                distance, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance
            )
            == 0
        ).all()


@given(st.lists(st.integers(-(2**30), 2**30), min_size=1, max_size=40), st.integers(4, 100))
def test_t5_bidirectional_halves_mirror_each_other(relative, num_buckets):
    relative = torch.tensor(relative).abs() + 1  # keys after the query
    upper = t5_relative_bucket(relative, num_buckets=num_buckets, max_distance=500)
    lower = t5_relative_bucket(-relative, num_buckets=num_buckets, max_distance=500)
    assert torch.equal(upper, lower + num_buckets // 2)
    assert ((lower >= 0) & (upper < 2 * (num_buckets // 2))).all()


def test_t5_keeps_the_shape_and_accepts_any_integer_input():
    relative = torch.arange(-12, 12, dtype=torch.int32).view(2, 3, 4)
    buckets = t5_relative_bucket(relative)
    assert buckets.shape == (2, 3, 4)
    assert buckets.dtype == torch.int64
    assert torch.equal(buckets, t5_relative_bucket(relative.long()))
    assert t5_relative_bucket([-1, 0, 1]).tolist() == [1, 0, 17]
    assert t5_relative_bucket(-20).tolist() == 10


def test_t5_matrix_from_positions():
    q, k = torch.arange(6), torch.arange(9)
    buckets = t5_relative_bucket(k[None, :] - q[:, None])  # [i, j]
    assert buckets.shape == (6, 9)
    assert (buckets.diagonal() == 0).all()


# --- Swin ------------------------------------------------------------------------------------------


@given(st.integers(1, 9), st.integers(1, 9))
def test_swin_index_matches_the_loop(height, width):
    index = swin_relative_index((height, width))
    assert index.dtype == torch.int64
    assert index.shape == (height * width, height * width)
    assert index.tolist() == swin_index_loop(height, width)


@pytest.mark.parametrize("window", [1, 2, 7, (3, 5), (5, 3), (1, 4)])
def test_swin_index_uses_every_table_row_and_is_antisymmetric_about_the_centre(window):
    height, width = (window, window) if isinstance(window, int) else window
    index = swin_relative_index(window)
    size = swin_table_size(window)
    assert size == (2 * height - 1) * (2 * width - 1)
    assert torch.equal(index.unique(), torch.arange(size))  # each offset (dy, dx) is a row
    centre = (height - 1) * (2 * width - 1) + (width - 1)  # offset (0, 0)
    assert (index.diagonal() == centre).all()
    assert torch.equal(index + index.T, torch.full_like(index, 2 * centre))


def test_swin_square_window_int_equals_the_pair():
    assert torch.equal(swin_relative_index(7), swin_relative_index((7, 7)))
    assert swin_table_size(7) == swin_table_size((7, 7)) == 169
    assert swin_relative_index(1).tolist() == [[0]]


def test_swin_index_of_a_2x2_window():
    # tokens (0,0) (0,1) (1,0) (1,1); table rows (dy + 1)·3 + (dx + 1)
    assert swin_relative_index(2).tolist() == [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: t5_relative_bucket(torch.tensor([1.0, 2.0])),
            ValueError,
            "relative_position must be integers, got dtype torch.float32",
        ),
        (lambda: t5_relative_bucket([0.5]), ValueError, "relative_position must be integers"),
        (
            lambda: t5_relative_bucket(torch.arange(3), num_buckets=1, bidirectional=False),
            ValueError,
            "num_buckets must be at least 2",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(3), num_buckets=0),
            ValueError,
            "num_buckets must be positive, got 0",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(3), num_buckets=3),
            ValueError,
            "num_buckets must be at least 4 (bidirectional",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(3), num_buckets=32.0),
            TypeError,
            "num_buckets must be an integer",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(3), max_distance=8),
            ValueError,
            "max_distance must exceed the 8 exact buckets, got 8",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(3), bidirectional=False, max_distance=10),
            ValueError,
            "max_distance must exceed the 16 exact buckets, got 10",
        ),
        (
            lambda: t5_relative_bucket(torch.arange(3), max_distance=0),
            ValueError,
            "max_distance must be positive, got 0",
        ),
        (lambda: swin_relative_index(0), ValueError, "window must be positive, got 0"),
        (lambda: swin_relative_index((3, 0)), ValueError, "window width must be positive, got 0"),
        (lambda: swin_relative_index((-1, 3)), ValueError, "window height must be positive, got -1"),
        (
            lambda: swin_relative_index((1, 2, 3)),
            ValueError,
            "window must be an int or (height, width), got (1, 2, 3)",
        ),
        (lambda: swin_relative_index(2.5), TypeError, "window must be an integer, got 2.5"),
        (lambda: swin_table_size(-2), ValueError, "window must be positive, got -2"),
    ],
)
def test_bad_input_raises_naming_the_value(call, error, message):
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value)
