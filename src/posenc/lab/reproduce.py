"""What a re-run of the lab reproduces: intervals over seeds for the ranking, and a comparison of a
re-run with the records by interval, not by digit.

Same code, same seed, same machine (processor, torch build, threads): bit-identical records (the
tests check it for resumed, distributed and repeated runs). Another processor or torch build runs
other CPU kernels (another vector width, another summation order), so its digits differ from the
first step on, and a re-run is another draw of the same experiment: it agrees with the records when
the two are within their intervals over seeds (:func:`compare`), but for as many cells as 95%
intervals miss by chance (:func:`allowed_outside`). Every run records the processor,
torch's build and the threads it ran with (:func:`posenc.lab.sweep.machine`).

An order of encodings is only a claim where its bootstrap over seeds says so
(:func:`~posenc.lab.report.ranking.bootstrap_ranking`): each replicate draws, for every (task, encoding), as many of its seeds as
it has, with replacement (the same draw at every length: one seed's run is scored at all of them),
ranks the encodings by mean exact match at every (task, length) beyond L, and takes the mean
reciprocal rank and each encoding's place by it.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from posenc.lab.intervals import t_quantile
from posenc.lab.report.loading import Run
from posenc.lab.report.ranking import bootstrap_ranking, bootstrap_table
from posenc.lab.tasks import registered

# --- comparing a re-run with the records -------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One metric of one (task, encoding, configuration, length) in both the records and a re-run."""

    key: str  # "copy rope at 25: exact_match"
    reference: list[float]  # the records' values, one per seed
    rerun: list[float]  # the re-run's, one per seed
    low: float  # 95% interval of (re-run mean − records mean), Welch
    high: float

    @property
    def identical(self) -> bool:
        return self.reference == self.rerun

    @property
    def consistent(self) -> bool:
        """The interval of the difference holds 0 (equal constants: the same value)."""
        return self.low <= 0.0 <= self.high

    @property
    def judged(self) -> bool:
        """Whether the cell can be judged by an interval: identical, or two or more seeds in common (one
        seed gives no spread over seeds: its interval would be the difference itself, a point that any
        float32 rounding misses)."""
        return self.identical or len(self.reference) > 1


def difference_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """95% Welch interval of mean(b) − mean(a) (a point where both samples are constant or single)."""
    difference = statistics.fmean(b) - statistics.fmean(a)
    variance = sum(statistics.variance(x) / len(x) for x in (a, b) if len(x) > 1)
    if variance == 0.0:
        return difference, difference
    terms = [(statistics.variance(x) / len(x)) ** 2 / (len(x) - 1) for x in (a, b) if len(x) > 1]
    df = max(1, math.floor(variance**2 / sum(terms)))  # Welch–Satterthwaite, rounded down (wider)
    half = t_quantile(0.975, df) * math.sqrt(variance)
    return difference - half, difference + half


def _group(run: Run) -> tuple:
    """What a run is compared as: its preset, task, encoding and config but the seed."""
    config = {key: value for key, value in run.config.items() if key != "seed"}
    return run.preset, run.task, run.encoding, repr(sorted(config.items()))


def _numbers(entry: dict, metrics: tuple[str, ...]) -> dict[str, float]:
    return {
        metric: float(entry[metric])
        for metric in metrics
        if isinstance(entry.get(metric), int | float) and not isinstance(entry.get(metric), bool)
    }


def compare(reference: list[Run], rerun: list[Run]) -> list[Cell]:
    """Every numeric metric (the task's declared ones) at every length of the configurations both hold,
    over the seeds both hold: the records' values, the re-run's and the interval of their difference."""
    by_group: dict[tuple, dict[str, dict[int, Run]]] = defaultdict(lambda: {"reference": {}, "rerun": {}})
    for side, runs in (("reference", reference), ("rerun", rerun)):
        for run in runs:
            if run.done:
                by_group[_group(run)][side][run.seed] = run
    cells = []
    for (_, task, encoding, _), sides in by_group.items():
        seeds = sorted(sides["reference"].keys() & sides["rerun"].keys())
        if not seeds:
            continue
        spec = registered(task)
        metrics = spec.metrics if spec is not None else ("exact_match", "bpb")
        first = sides["reference"][seeds[0]]
        for n in first.lengths:
            values: dict[str, tuple[list[float], list[float]]] = {}
            for seed in seeds:
                old, new = sides["reference"][seed].at(n), sides["rerun"][seed].at(n)
                if not old or not new or old["status"] != "ok" or new["status"] != "ok":
                    continue
                old_numbers, new_numbers = _numbers(old, metrics), _numbers(new, metrics)
                for metric in old_numbers.keys() & new_numbers.keys():
                    pair = values.setdefault(metric, ([], []))
                    pair[0].append(old_numbers[metric])
                    pair[1].append(new_numbers[metric])
            for metric, (old_values, new_values) in sorted(values.items()):
                low, high = difference_interval(old_values, new_values)
                cells.append(Cell(f"{task} {encoding} at {n}: {metric}", old_values, new_values, low, high))
    return cells


def allowed_outside(cells: int, level: float = 0.05, confidence: float = 0.99) -> int:
    """How many of ``cells`` 95% intervals may miss 0 by chance in a faithful re-run: the ``confidence``
    quantile of Binomial(cells, ``level``) (each interval misses with probability ``level``), in exact
    integer arithmetic on the binomial terms."""
    total, k = 0.0, 0
    while k <= cells:
        total += math.comb(cells, k) * level**k * (1 - level) ** (cells - k)
        if total >= confidence:
            return k
        k += 1
    return cells


def compare_lines(cells: list[Cell]) -> tuple[list[str], bool]:
    """The lines ``posenc lab compare`` prints, and whether the re-run agrees: no more cells outside
    their interval than chance allows (:func:`allowed_outside`); each one outside is named."""
    if not cells:
        return ["no configuration and seed is in both databases: nothing to compare"], False
    identical = sum(cell.identical for cell in cells)
    unjudged = sum(not cell.judged for cell in cells)
    judged = len(cells) - unjudged
    outside = [cell for cell in cells if cell.judged and not cell.consistent]
    allowed = allowed_outside(judged)
    one_seed = (
        f"; {unjudged} with other digits on one seed in common, not judged (no spread over seeds)"
        if unjudged
        else ""
    )
    lines = [
        f"{len(cells)} metrics compared over the seeds both databases hold: {identical} bit-identical, "
        f"{judged - identical - len(outside)} with other digits inside the 95% interval of the difference "
        f"over seeds, {len(outside)} outside it ({allowed} may be outside by chance: the 99th percentile "
        f"of Binomial({judged}, 0.05)){one_seed}",
        "consistent with the records" if len(outside) <= allowed else "NOT consistent with the records",
    ]
    for cell in outside:
        lines.append(
            f"  outside: {cell.key}: records {statistics.fmean(cell.reference):.4g}, re-run "
            f"{statistics.fmean(cell.rerun):.4g}, difference interval [{cell.low:.4g}, {cell.high:.4g}]"
        )
    return lines, len(outside) <= allowed


__all__ = [
    "Cell",
    "allowed_outside",
    "bootstrap_ranking",
    "bootstrap_table",
    "compare",
    "compare_lines",
    "difference_interval",
]
