"""Mean reciprocal rank as Kazemnejad et al. (2023) compute it, against hand-computed examples, and the
algorithmic tables of the report: exact match with 95% intervals over seeds, MRR beside the paper's."""

from __future__ import annotations

import math
import statistics

import pytest

from posenc.lab import exact_match
from posenc.lab.presets import PRESETS, run_config
from posenc.lab.records import Records
from posenc.lab.report import PUBLISHED_MRR, comparison_markdown, mean_reciprocal_rank, ranking, ranks
from tests.lab.helpers import record_algorithmic_run

SMOKE = PRESETS["smoke"]
L = SMOKE.tasks["sort"].train_length

#: Two (task, length) pairs, one tie in each, and an encoding scored at the second only.
SCORES = {
    ("sort", 2 * L): {"a": 0.9, "b": 0.5, "c": 0.5},
    ("sort", 4 * L): {"a": 0.1, "b": 0.8, "c": 0.1, "d": 0.0},
}
#: By hand: ranks (1, 2, 2) then (2, 1, 2, 4).
HAND_MRR = {"a": (1 + 1 / 2) / 2, "b": (1 / 2 + 1) / 2, "c": (1 / 2 + 1 / 2) / 2, "d": 1 / 4}


def _agrees_with_hand() -> bool:
    measured = ranking.mean_reciprocal_rank(SCORES)
    return measured.keys() == HAND_MRR.keys() and all(
        math.isclose(measured[name], value) for name, value in HAND_MRR.items()
    )


def test_ranks_put_the_best_first_and_ties_share_the_best_rank():
    assert ranks({"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1}) == {"a": 1, "b": 2, "c": 2, "d": 4}
    assert ranks({"a": 0.0, "b": 0.0, "c": 0.0}) == {"a": 1, "b": 1, "c": 1}
    assert ranks({"a": 0.2}) == {"a": 1}


def test_mean_reciprocal_rank_matches_the_hand_computed_one():
    assert _agrees_with_hand()
    assert mean_reciprocal_rank({("parity", 6): {"a": 1.0, "b": 0.0}}) == {"a": 1.0, "b": 0.5}


def _worst_first(scores: dict[str, float]) -> dict[str, int]:
    return {name: 1 + sum(other < score for other in scores.values()) for name, score in scores.items()}


def _ties_take_the_worst_rank(scores: dict[str, float]) -> dict[str, int]:  # 1, 3, 3, 4
    return {name: sum(other >= score for other in scores.values()) for name, score in scores.items()}


def _dense(scores: dict[str, float]) -> dict[str, int]:  # 1, 2, 2, 3
    return {name: 1 + sum(other > score for other in set(scores.values())) for name, score in scores.items()}


@pytest.mark.parametrize("planted", [_worst_first, _ties_take_the_worst_rank, _dense])
def test_a_planted_wrong_rank_order_is_caught(monkeypatch, planted):
    monkeypatch.setattr(ranking, "ranks", planted)
    assert not _agrees_with_hand()


def test_published_figures_are_the_papers_five_encodings_in_its_order():
    assert list(PUBLISHED_MRR) == ["nope", "t5", "alibi", "rope", "sinusoidal"]
    assert sorted(PUBLISHED_MRR.values(), reverse=True) == list(PUBLISHED_MRR.values())


# --- the report's tables --------------------------------------------------------------------------

#: Mean exact match recorded at (task, length beyond L) per encoding; None: cannot run there.
RECORDED = {
    ("sort", 2 * L): {"nope": 0.9, "rope": 0.5, "alibi": 0.5, "shaw": 0.2},
    ("sort", 4 * L): {"nope": 0.4, "rope": 0.4, "alibi": 0.0, "shaw": 0.1},
    ("parity", 2 * L): {"nope": 0.1, "rope": 0.8, "alibi": 0.3, "shaw": 0.8, "learned": None},
    ("parity", 4 * L): {"nope": 0.6, "rope": 0.2, "alibi": 0.2, "shaw": 0.0, "learned": None},
}
#: By hand from RECORDED (learned scores 0 where it cannot run), among all five encodings run ...
HAND_ALL = {
    "nope": (1 + 1 + 1 / 4 + 1) / 4,
    "rope": (1 / 2 + 1 + 1 + 1 / 2) / 4,
    "shaw": (1 / 4 + 1 / 3 + 1 + 1 / 4) / 4,
    "alibi": (1 / 2 + 1 / 4 + 1 / 3 + 1 / 2) / 4,
    "learned": (1 / 5 + 1 / 4) / 2,
}
#: ... and among the paper's encodings only (nope, rope, alibi here).
HAND_FIVE = {
    "nope": (1 + 1 + 1 / 3 + 1) / 4,
    "rope": (1 / 2 + 1 + 1 + 1 / 2) / 4,
    "alibi": (1 / 2 + 1 / 3 + 1 / 2 + 1 / 2) / 4,
}
#: ... and over sort alone, the one task most of its encodings learn at L (parity: only nope and alibi).
HAND_LEARNED = {
    "nope": (1 + 1) / 2,
    "rope": (1 / 2 + 1) / 2,
    "alibi": (1 / 2 + 1 / 4) / 2,
    "shaw": (1 / 4 + 1 / 3) / 2,
}
#: Exact match at L where it is not 1.0: parity is learned at L by nope and alibi only.
AT_L = {("parity", "learned"): 0.5, ("parity", "rope"): 0.5, ("parity", "shaw"): 0.7}
#: Exact match of nope on sort at 2L per seed (mean 0.9); every other value is the same for each seed.
NOPE_SORT_2L = (0.8, 0.9, 1.0)


def _table(markdown: str, first_header: str) -> tuple[list[str], dict[str, list[str]]]:
    """(header, rows by first cell) of the first Markdown table whose header starts with it."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    split = lambda line: [c.strip().replace("\\", "") for c in line.strip("| ").split(" | ")]  # noqa: E731
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        cells = split(line)
        rows[cells[0]] = cells[1:]
    return split(lines[start]), rows


@pytest.fixture
def markdown(tmp_path):
    path = tmp_path / "r.sqlite"
    with Records(path) as records:
        for task in ("sort", "parity"):
            for encoding in RECORDED[task, 2 * L]:
                for seed in range(len(NOPE_SORT_2L)):
                    exact = {
                        L: AT_L.get((task, encoding), 1.0),
                        **{n: RECORDED[task, n][encoding] for n in (2 * L, 4 * L)},
                    }
                    if (task, encoding) == ("sort", "nope"):
                        exact[2 * L] = NOPE_SORT_2L[seed]
                    config = run_config(SMOKE, task, encoding, seed)
                    record_algorithmic_run(records, "smoke", config, exact)
    return comparison_markdown(path)


def test_exact_match_is_shown_per_length_with_its_interval_over_seeds(markdown):
    header, rows = _table(markdown, "Encoding")
    column = header.index(f"sort at {2 * L} (2L)") - 1
    mean = statistics.fmean(NOPE_SORT_2L)
    half = 4.303 * statistics.stdev(NOPE_SORT_2L) / math.sqrt(3)  # t(0.975, 2 degrees of freedom)
    assert rows["nope"][column] == f"{mean:.2f} [{mean - half:.2f}, {min(1.0, mean + half):.2f}]"
    assert rows["rope"][column] == "0.50"  # the same at every seed: no interval
    assert rows["learned"][header.index(f"parity at {2 * L} (2L)") - 1] == "cannot run"
    assert rows["learned"][header.index(f"parity at {L} (1L)") - 1] == "0.50"


def test_mean_reciprocal_rank_table_matches_the_hand_computed_ranks(markdown):
    header, rows = _table(markdown, "Encoding | MRR (all encodings)")
    assert header == [
        "Encoding",
        "MRR (all encodings)",
        "MRR (tasks most learn at L)",
        "MRR (among the paper's five)",
        "MRR (Kazemnejad et al., 2023)",
    ]
    assert list(rows) == sorted(HAND_ALL, key=HAND_ALL.get, reverse=True)
    for name, (measured, on_learned, among_five, published) in rows.items():
        assert measured == f"{HAND_ALL[name]:.2f}", name
        assert on_learned == (f"{HAND_LEARNED[name]:.2f}" if name in HAND_LEARNED else "—"), name
        assert among_five == (f"{HAND_FIVE[name]:.2f}" if name in HAND_FIVE else "—"), name
        assert published == (f"{PUBLISHED_MRR[name]:.2f}" if name in PUBLISHED_MRR else "—"), name
    assert "Over 4 (task, length) pairs beyond L of sort, parity." in markdown
    assert "Tasks most encodings learn at L (mean exact match ≥ 0.9): sort. On the other" in markdown


def test_an_encoding_without_a_run_of_a_task_is_named_under_the_ranks(markdown):
    assert (
        "Not recorded (ranked among the others there; its MRR is over the pairs it has): sort: learned."
        in (markdown)
    )


def test_no_task_learned_by_most_leaves_that_column_empty(monkeypatch, markdown, tmp_path):
    monkeypatch.setattr(exact_match, "LEARNED_AT_L", 1.01)  # what the exact-match tasks call learned
    header, rows = _table(comparison_markdown(tmp_path / "r.sqlite"), "Encoding | MRR (all encodings)")
    assert {cells[1] for cells in rows.values()} == {"—"}


def test_the_tasks_learned_at_l_are_named_under_the_exact_match_table(markdown):
    # every encoding scores 1.0 at L on sort (learned has no run of it); on parity only nope and alibi
    note = next(line for line in markdown.splitlines() if line.startswith("Learned at L"))
    assert note == (
        "Learned at L (mean exact match ≥ 0.9): sort: 4 of 4 (rope, alibi, nope, shaw); "
        "parity: 2 of 5 (alibi, nope)."
    )
