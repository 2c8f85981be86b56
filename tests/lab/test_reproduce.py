"""Reproducibility: the machine each run records, the bootstrap of the ranking over seeds, and
``posenc lab compare``, which judges a re-run by the interval of its difference from the records."""

from __future__ import annotations

import math

import pytest
import torch

from posenc.lab.distributed import Context
from posenc.lab.report.loading import Configuration, Run
from posenc.lab.report.ranking import bootstrap_ranking, bootstrap_table
from posenc.lab.reproduce import allowed_outside, compare, compare_lines, difference_interval
from posenc.lab.sweep import machine, versions
from tests.lab.helpers import exit_code

L = 4


def _run(
    encoding: str, seed: int, exact: dict[int, float], *, task: str = "copy", preset: str = "cpu"
) -> Run:
    """A finished exact-match run with ``exact[n]`` exact match at each length n."""
    evaluation = {
        str(n): {"status": "ok", "exact_match": value, "token_accuracy": value, "examples": 512}
        for n, value in exact.items()
    }
    config = {
        "task": task,
        "encoding": encoding,
        "seed": seed,
        "train_length": L,
        "model": {"d_model": 16},
        "train": {"steps": 10},
        "encoding_kwargs": {},
    }
    metrics = {
        "eval": evaluation,
        "positional_parameters": 0,
        "positional_parameters_at_2L": 0,
        "fixed_constants": 0,
        "relative_position": {"verdict": "none"},
    }
    return Run(
        f"{task}-{encoding}-{seed}",
        preset,
        task,
        encoding,
        seed,
        "done",
        None,
        config,
        metrics,
        {"seconds_per_step": 0.01},
        {},
        None,
        "2026-01-01T00:00:00",
    )


def test_every_run_records_the_processor_torch_build_and_threads():
    recorded = versions(Context(0, 1, 0, "spread", torch.device("cpu")))
    for key in ("cpu", "cpu_capability", "torch_git", "torch_libraries", "threads", "cores"):
        assert key in recorded, key
    assert recorded["cpu"] and isinstance(recorded["torch_libraries"], list)
    assert machine()["cores"] >= 1


def test_the_difference_interval_is_welchs():
    # a = 1, 2, 3 and b = 4, 5, 6: difference 3, variance 1/3 + 1/3, Welch df = 4, t(0.975, 4) = 2.776445
    low, high = difference_interval([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    half = 2.7764451051977987 * math.sqrt(2 / 3)
    assert low == pytest.approx(3 - half, rel=1e-9) and high == pytest.approx(3 + half, rel=1e-9)
    assert difference_interval([0.5, 0.5], [0.5, 0.5]) == (0.0, 0.0)  # constants: a point
    assert difference_interval([0.5, 0.5], [0.6, 0.6]) == pytest.approx((0.1, 0.1))


def _pair(shift: float, jitter: float, shifted_2l: bool = False) -> tuple[list[Run], list[Run]]:
    base = {0: 0.90, 1: 0.80, 2: 0.95}
    reference = [_run("rope", s, {L: v, 2 * L: v / 2}) for s, v in base.items()]
    rerun = [
        _run("rope", s, {L: v + shift + jitter * (-1) ** s, 2 * L: v / 2 + shift * shifted_2l})
        for s, v in base.items()
    ]
    return reference, rerun


def test_a_bit_identical_rerun_agrees():
    reference, rerun = _pair(0.0, 0.0)
    cells = compare(reference, rerun)
    assert len(cells) == 4 and all(cell.identical and cell.consistent for cell in cells)
    lines, consistent = compare_lines(cells)
    assert consistent and "4 bit-identical" in lines[0]


def test_other_digits_within_the_seeds_spread_agree_and_a_shift_beyond_it_does_not():
    cells = compare(*_pair(0.0, 0.01))
    assert all(cell.consistent for cell in cells) and not all(cell.identical for cell in cells)
    cells = compare(*_pair(-0.5, 0.0))
    outside = [cell.key for cell in cells if not cell.consistent]
    assert outside == ["copy rope at 4: exact_match", "copy rope at 4: token_accuracy"]
    lines, consistent = compare_lines(cells)  # 2 of 4 outside: as many as chance allows for 4
    assert consistent and any("outside: copy rope at 4: exact_match" in line for line in lines)
    lines, consistent = compare_lines(compare(*_pair(-0.4, 0.0, shifted_2l=True)))  # all 4 outside
    assert not consistent and lines[1] == "NOT consistent with the records"


def test_the_cells_allowed_outside_are_the_binomials_99th_percentile():
    # Binomial(4, 0.05): P(≤ 1) = 0.98598, P(≤ 2) = 0.99952; Binomial(100, 0.05): P(≤ 10) = 0.98853,
    # P(≤ 11) = 0.99573
    assert allowed_outside(4) == 2 and allowed_outside(100) == 11
    assert allowed_outside(1) == 1 and allowed_outside(0) == 0


def test_runs_of_other_configurations_or_seeds_are_not_compared():
    reference, _ = _pair(0.0, 0.0)
    other = [_run("rope", s, {L: 0.0}, preset="gpu") for s in range(3)]
    assert compare(reference, other) == []
    assert compare_lines([]) == (
        ["no configuration and seed is in both databases: nothing to compare"],
        False,
    )


def test_the_compare_command_exits_1_outside_the_interval(tmp_path):
    from posenc.lab.records import Records

    def write(path, runs):
        with Records(path) as records:
            for run in runs:
                records.write(
                    config_hash=run.config_hash,
                    preset=run.preset,
                    config=run.config,
                    status="done",
                    metrics=run.metrics,
                    timings=run.timings,
                    versions={"python": "3", "torch": "2", "posenc": "0", "device": "cpu"},
                    corpus=None,
                )

    reference, rerun = _pair(-0.4, 0.0, shifted_2l=True)
    write(tmp_path / "reference.sqlite", reference)
    write(tmp_path / "same.sqlite", reference)
    write(tmp_path / "rerun.sqlite", rerun)
    same = (
        "compare",
        "--db",
        str(tmp_path / "same.sqlite"),
        "--reference",
        str(tmp_path / "reference.sqlite"),
    )
    assert exit_code(*same) == 0
    shifted = (
        "compare",
        "--db",
        str(tmp_path / "rerun.sqlite"),
        "--reference",
        str(tmp_path / "reference.sqlite"),
    )
    assert exit_code(*shifted) == 1
    assert exit_code("compare", "--db", str(tmp_path / "missing.sqlite"), "--reference", str(tmp_path)) == 2


def _configuration(scores: dict[str, list[float]]) -> Configuration:
    """Runs of copy per encoding: seed s scores ``scores[encoding][s]`` at 2L (and 1.0 at L)."""
    runs = [
        _run(name, seed, {L: 1.0, 2 * L: value})
        for name, values in scores.items()
        for seed, value in enumerate(values)
    ]
    return Configuration("cpu", (), runs)


def test_an_order_every_seed_agrees_on_has_probability_one():
    ranking = bootstrap_ranking(_configuration({"nope": [0.9, 0.8, 0.85], "rope": [0.1, 0.0, 0.2]}))
    assert ranking["nope"].rank_probability == {1: 1.0} and ranking["rope"].rank_probability == {2: 1.0}
    assert (ranking["nope"].mrr, ranking["nope"].low, ranking["nope"].high) == (1.0, 1.0, 1.0)


def test_an_order_the_seeds_disagree_on_is_split_and_its_interval_holds_the_measurement():
    ranking = bootstrap_ranking(_configuration({"nope": [0.9, 0.0, 0.1], "t5": [0.2, 0.5, 0.3]}))
    for name in ("nope", "t5"):
        r = ranking[name]
        assert 0.05 < r.rank_probability[1] < 0.95
        assert sum(r.rank_probability.values()) == pytest.approx(1.0)
        assert r.low <= r.mrr <= r.high
    table = bootstrap_table(_configuration({"nope": [0.9, 0.0, 0.1], "t5": [0.2, 0.5, 0.3]}))
    headers = [column.header for column in table.columns]
    assert headers[:3] == ["Encoding", "MRR [95% bootstrap interval]", "P(place 1)"]


def test_the_bootstrap_is_the_same_each_time():
    configuration = _configuration({"nope": [0.9, 0.0, 0.1], "t5": [0.2, 0.5, 0.3], "rope": [0.2, 0.1, 0.0]})
    assert bootstrap_ranking(configuration) == bootstrap_ranking(configuration)


def test_a_cell_with_one_seed_in_common_and_other_digits_is_not_judged():
    # one seed has no spread: its interval is the difference itself, so a float32 rounding of 1e-6
    # read as "outside"; it is counted apart and the re-run still agrees
    reference = [_run("rope", 0, {L: 0.9})]
    rerun = [_run("rope", 0, {L: 0.9 + 1e-6})]
    cells = compare(reference, rerun)
    assert cells and not any(cell.judged for cell in cells)
    lines, consistent = compare_lines(cells)
    assert consistent and "0 outside it" in lines[0]
    assert f"{len(cells)} with other digits on one seed in common, not judged" in lines[0]
    same = compare(reference, reference)
    assert all(cell.judged for cell in same) and "not judged" not in compare_lines(same)[0][0]
