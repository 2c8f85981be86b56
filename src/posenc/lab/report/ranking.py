"""Which encodings learn each exact-match task at L (as the task says: ``Task.learned``), and the mean
reciprocal rank of the encodings across those tasks and the lengths beyond L, computed as Kazemnejad
et al. (2023) compute theirs and shown beside their published figures (:data:`PUBLISHED_MRR`), with its
bootstrap over seeds (:func:`bootstrap_ranking`): an interval and the probability of each place."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from posenc.lab.exact_match import LEARNED_AT_L
from posenc.lab.report.loading import Configuration
from posenc.lab.tasks import EXACT_MATCH, registered
from posenc.table import Table

#: Mean reciprocal rank of exact match published by Kazemnejad et al. (2023), "The Impact of Positional
#: Encoding on Length Generalization in Transformers" (NeurIPS 2023, arXiv:2305.19466): their main
#: comparison of decoder-only models over all their tasks and the lengths beyond training. Keyed by
#: this package's names; their "absolute position embedding" (APE) is the sinusoidal one.
PUBLISHED_MRR = {"nope": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}


def learned_at_l(configuration: Configuration, task: str) -> tuple[list[str], int]:
    """The encodings that learn ``task`` at L (its own ``learned`` over the seeds' entries at L), and
    how many encodings have runs of it."""
    by_encoding = configuration.by_encoding(task)
    learned = []
    for name in (n for n in configuration.encodings if n in by_encoding):
        entries = [run.at(run.train_length) for run in by_encoding[name]]
        if all(e and e["status"] == "ok" for e in entries) and registered(task).learned(entries):
            learned.append(name)
    return learned, len(by_encoding)


def learned_at_l_note(configuration: Configuration, tasks: list[str]) -> str:
    """Which encodings learn each task at L: a task that few learn says little about position beyond L."""
    parts = []
    for task in tasks:
        learned, run = learned_at_l(configuration, task)
        parts.append(f"{task}: {len(learned)} of {run} ({', '.join(learned) or 'none'})")
    return f"Learned at L (mean exact match ≥ {LEARNED_AT_L}): " + "; ".join(parts) + "."


def learned_by_most(configuration: Configuration, tasks: list[str]) -> list[str]:
    """The tasks that more than half of their encodings learn at L: where the columns beyond L rank
    how position is used, not whether the task was learned at all."""
    counts = {task: learned_at_l(configuration, task) for task in tasks}
    return [task for task, (learned, run) in counts.items() if 2 * len(learned) > run]


def ranks(scores: dict[str, float]) -> dict[str, int]:
    """Each name's rank by score, highest first (rank 1); equal scores share the best of their ranks,
    so scores 0.9, 0.5, 0.5, 0.1 rank 1, 2, 2, 4."""
    return {name: 1 + sum(other > score for other in scores.values()) for name, score in scores.items()}


def mean_reciprocal_rank(scores: dict[tuple[str, int], dict[str, float]]) -> dict[str, float]:
    """Each encoding's mean over (task, length) of 1 / its rank there, as Kazemnejad et al. (2023) rank.

    Args:
        scores: ``{(task, n): {encoding: mean exact match}}``, the encodings ranked at each (task, n)
            among those scored there; an encoding's mean is over the pairs it is scored at.

    Returns:
        ``{encoding: mean reciprocal rank}``, each in (0, 1].
    """
    reciprocal: dict[str, list[float]] = defaultdict(list)
    for by_encoding in scores.values():
        for name, rank in ranks(by_encoding).items():
            reciprocal[name].append(1 / rank)
    return {name: statistics.fmean(values) for name, values in reciprocal.items()}


def exact_match_beyond_l(configuration: Configuration) -> dict[tuple[str, int], dict[str, float]]:
    """Mean exact match over seeds per exact-match task, evaluation length n > L and encoding:
    ``{(task, n): {encoding: score}}``. A model that cannot run at n answers nothing there: 0."""
    scores: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for task in configuration.tasks(EXACT_MATCH):
        for name, runs in configuration.by_encoding(task).items():
            length_l = runs[0].train_length
            for n in sorted({n for run in runs for n in run.lengths}):
                entries = [run.at(n) for run in runs]
                if n <= length_l or not all(entries):
                    continue
                ok = all(entry["status"] == "ok" for entry in entries)
                scores[task, n][name] = statistics.fmean(e["exact_match"] for e in entries) if ok else 0.0
    return dict(scores)


def mean_reciprocal_rank_table(configuration: Configuration) -> Table | None:
    """The encodings' mean reciprocal rank across the exact-match tasks and lengths beyond L, ranked
    among all the encodings run, over only the tasks most of them learn at L, and among the five
    Kazemnejad et al. compare (whose published MRR is shown beside it); None without an exact-match
    task evaluated beyond L."""
    scores = exact_match_beyond_l(configuration)
    if not scores:
        return None
    order = configuration.tasks(EXACT_MATCH)
    tasks = sorted({task for task, _ in scores}, key=order.index)
    learned = learned_by_most(configuration, tasks)
    measured = mean_reciprocal_rank(scores)
    on_learned = mean_reciprocal_rank({pair: by for pair, by in scores.items() if pair[0] in learned})
    among_five = mean_reciprocal_rank(
        {pair: {name: s for name, s in by.items() if name in PUBLISHED_MRR} for pair, by in scores.items()}
    )
    encodings = {name: index for index, name in enumerate(configuration.encodings)}
    body = [
        [
            name,
            f"{measured[name]:.2f}",
            f"{on_learned[name]:.2f}" if name in on_learned else "—",
            f"{among_five[name]:.2f}" if name in among_five else "—",
            f"{PUBLISHED_MRR[name]:.2f}" if name in PUBLISHED_MRR else "—",
        ]
        for name in sorted(measured, key=lambda name: (-measured[name], encodings[name]))
    ]
    notes = [
        "At each task and length beyond L the encodings are ranked by mean exact match over seeds "
        "(best rank 1; equal scores share the best rank; one that cannot run scores 0); MRR is the "
        "mean of 1 / rank. Ranked among only the five encodings Kazemnejad et al. compare (NoPE, T5, "
        "ALiBi, RoPE and the sinusoidal APE), it is on the scale of their published MRR, which comes "
        "from their own tasks, model and lengths.",
        f"Tasks most encodings learn at L (mean exact match ≥ {LEARNED_AT_L}): "
        f"{', '.join(learned) or 'none'}. On the other tasks the ranks beyond L order failures to learn "
        "the task, not uses of position.",
    ]
    missing = _missing_runs(configuration, tasks)
    if missing:
        notes.append(
            "Not recorded (ranked among the others there; its MRR is over the pairs it has): "
            + "; ".join(f"{task}: {', '.join(names)}" for task, names in missing.items())
            + "."
        )
    return Table(
        [
            "Encoding",
            "MRR (all encodings)",
            "MRR (tasks most learn at L)",
            "MRR (among the paper's five)",
            "MRR (Kazemnejad et al., 2023)",
        ],
        body,
        title=f"Over {len(scores)} (task, length) pairs beyond L of {', '.join(tasks)}.",
        notes=notes,
    )


def _missing_runs(configuration: Configuration, tasks: list[str]) -> dict[str, list[str]]:
    """Per task, the encodings recorded on some other of ``tasks`` but not on it."""
    by_task = {task: configuration.by_encoding(task) for task in tasks}
    names = [name for name in configuration.encodings if any(name in runs for runs in by_task.values())]
    missing = {task: [name for name in names if name not in runs] for task, runs in by_task.items()}
    return {task: absent for task, absent in missing.items() if absent}


#: Bootstrap replicates of the ranking and the seed of their generator (the report is the same each time).
REPLICATES, BOOTSTRAP_SEED = 2000, 0


@dataclass(frozen=True)
class RankInterval:
    """An encoding's mean reciprocal rank over seeds, as the bootstrap sees it."""

    mrr: float  # over the recorded seeds
    low: float  # 2.5th percentile of the bootstrap's MRR
    high: float  # 97.5th percentile
    rank_probability: dict[int, float]  # place by MRR (1 = best; ties share the best) -> share of replicates


def _scored(configuration: Configuration) -> dict[tuple[str, str], tuple[list[int], np.ndarray]]:
    """{(task, encoding): (lengths beyond L, exact match [seeds, lengths])}; a length a run cannot reach
    scores 0 (as the ranking scores it)."""
    scored = {}
    for task in configuration.tasks(EXACT_MATCH):
        for name, runs in configuration.by_encoding(task).items():
            length_l = runs[0].train_length
            lengths = sorted({n for run in runs for n in run.lengths if n > length_l})
            lengths = [n for n in lengths if all(run.at(n) for run in runs)]
            if not lengths:
                continue
            values = [
                [run.at(n)["exact_match"] if run.at(n)["status"] == "ok" else 0.0 for n in lengths]
                for run in runs
            ]
            scored[task, name] = (lengths, np.array(values, dtype=np.float64))  # [seeds, lengths]
    return scored


def _mrr(scored: dict, draws: dict[tuple[str, str], np.ndarray] | None) -> dict[str, float]:
    """Mean reciprocal rank from each (task, encoding)'s runs ``draws`` (indices; None: every run once)."""
    scores: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for (task, name), (lengths, values) in scored.items():
        chosen = values if draws is None else values[draws[task, name]]
        for n, mean in zip(lengths, chosen.mean(axis=0), strict=True):
            scores[task, n][name] = float(mean)
    return mean_reciprocal_rank(dict(scores))


def bootstrap_ranking(
    configuration: Configuration, replicates: int = REPLICATES, seed: int = BOOTSTRAP_SEED
) -> dict[str, RankInterval]:
    """Each encoding's MRR across the exact-match tasks and lengths beyond L with its 95% bootstrap
    interval over seeds, and the probability of each place by MRR; {} without such scores."""
    scored = _scored(configuration)
    if not scored:
        return {}
    generator = np.random.default_rng(seed)
    samples: dict[str, list[float]] = defaultdict(list)
    places: dict[str, Counter] = defaultdict(Counter)
    for _ in range(replicates):
        draws = {key: generator.integers(0, len(values), len(values)) for key, (_, values) in scored.items()}
        mrr = _mrr(scored, draws)
        for name, place in ranks(mrr).items():
            samples[name].append(mrr[name])
            places[name][place] += 1
    measured = _mrr(scored, None)
    return {
        name: RankInterval(
            measured[name],
            float(np.percentile(samples[name], 2.5)),
            float(np.percentile(samples[name], 97.5)),
            {place: count / replicates for place, count in sorted(places[name].items())},
        )
        for name in sorted(measured, key=lambda name: -measured[name])
    }


def bootstrap_table(configuration: Configuration) -> Table | None:
    """MRR with its bootstrap interval and the probability of each place, per encoding; None without
    exact-match scores beyond L."""
    ranking = bootstrap_ranking(configuration)
    if not ranking:
        return None
    count = len(ranking)
    body = [
        [
            name,
            f"{r.mrr:.2f} [{r.low:.2f}, {r.high:.2f}]",
            *(f"{r.rank_probability.get(place, 0.0):.2f}" for place in range(1, count + 1)),
        ]
        for name, r in ranking.items()
    ]
    return Table(
        ["Encoding", "MRR [95% bootstrap interval]", *(f"P(place {place})" for place in range(1, count + 1))],
        body,
        title="Mean reciprocal rank over seeds: bootstrap.",
        notes=[
            f"{REPLICATES} replicates, each drawing for every (task, encoding) as many of its seeds as it "
            "has, with replacement, then ranking as above; P(place k): the share of replicates in which the "
            "encoding's MRR is the k-th best (equal MRRs share the best place). An order of two encodings "
            "is measured only where their intervals and places separate."
        ],
    )
