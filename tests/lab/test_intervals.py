"""The 95% interval's Student t quantile, against closed forms and published tables (float64)."""

from __future__ import annotations

import math
import statistics

import pytest

from posenc.lab.intervals import interval, t_quantile


def _closed_form(df: int, p: float) -> float:
    """Student t quantiles with a closed form: 1 (Cauchy), 2 and 4 degrees of freedom."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    alpha = 4 * p * (1 - p)
    if df == 2:
        return (2 * p - 1) * math.sqrt(2 / alpha)
    theta = math.acos(math.sqrt(alpha))
    return 2 * math.sqrt(math.cos(theta / 3) / math.sqrt(alpha) - 1)


@pytest.mark.parametrize("df", [1, 2, 4])
@pytest.mark.parametrize("p", [0.75, 0.9, 0.975, 0.995])
def test_quantile_equals_the_closed_forms(df, p):
    assert t_quantile(p, df) == pytest.approx(_closed_form(df, p), rel=1e-12)


#: Two-sided 95% quantiles from the published t table (four decimals), at degrees of freedom
#: between and beyond the ones a short table lists.
PUBLISHED = {3: 3.1824, 5: 2.5706, 11: 2.2010, 13: 2.1604, 16: 2.1199, 25: 2.0595, 40: 2.0211, 120: 1.9799}


@pytest.mark.parametrize("df", sorted(PUBLISHED))
def test_quantile_equals_the_published_table(df):
    assert t_quantile(0.975, df) == pytest.approx(PUBLISHED[df], abs=5e-5)


def test_quantile_tends_to_the_normal_one():
    assert t_quantile(0.975, 10**6) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), rel=1e-5)


@pytest.mark.parametrize("seeds", [2, 3, 12, 14, 17, 41])
def test_interval_half_width_is_the_t_quantile_times_the_standard_error(seeds):
    values = [0.1 * k + 0.01 * k * k for k in range(seeds)]
    mean, low, high = interval(values)
    standard_error = statistics.stdev(values) / math.sqrt(seeds)
    assert (high - low) / 2 == pytest.approx(t_quantile(0.975, seeds - 1) * standard_error, rel=1e-12)
    assert (high - low) / 2 / standard_error == pytest.approx(
        PUBLISHED.get(seeds - 1, t_quantile(0.975, seeds - 1)), abs=5e-5
    )


@pytest.mark.parametrize(("probability", "df"), [(0.4, 3), (1.0, 3), (0.975, 0)])
def test_bad_arguments_are_named(probability, df):
    with pytest.raises(ValueError, match=str(probability) if df else "got 0"):
        t_quantile(probability, df)
