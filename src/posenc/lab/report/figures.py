"""The report's figures, each of the configuration with the most runs it draws (seeds are averaged
within a configuration only): bits per byte against position (bits-per-byte tasks), exact match against
length and the accuracy at each answer position (exact-match tasks), patch accuracy against grid side
(grid tasks), and a context-extension study's curves."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from posenc.lab.extension_report import FINE_TUNED, ZERO_SHOT, extension_figure
from posenc.lab.intervals import binned_curve, interval
from posenc.lab.report.loading import Configuration, Recorded, recorded
from posenc.lab.tasks import BITS_PER_BYTE, EXACT_MATCH, GRID_ACCURACY, registered


def _curves(configuration: Configuration, task: str, bins: int) -> tuple[dict, int]:
    lm = configuration.by_encoding(task)
    curves, length_l = {}, 0
    for name in (name for name in configuration.encodings if name in lm):
        runs = lm[name]
        length_l = runs[0].train_length
        lengths = sorted((n for n in runs[0].lengths if runs[0].at(n)["status"] == "ok"), reverse=True)
        if not lengths:
            continue
        per_seed = [run.at(lengths[0])["curve"] for run in runs if run.at(lengths[0]) is not None]
        curves[name] = binned_curve(per_seed, lengths[0], bins)
    return curves, length_l


def bits_per_position_figure(
    source: str | Path | Recorded, preset: str | None = None, *, bins: int = 64
) -> Figure | None:
    """Bits per byte against position (longest length each encoding runs at) of the first bits-per-byte
    task, or None without such runs; of the configuration with the most of them."""
    from posenc.plots.lab import bits_per_position

    chosen = recorded(source, preset).busiest(lambda c: len(c.of_family(BITS_PER_BYTE)))
    if chosen is None:
        return None
    curves, length_l = _curves(chosen, chosen.tasks(BITS_PER_BYTE)[0], bins)
    seeds = len({run.seed for run in chosen.of_family(BITS_PER_BYTE)})
    return bits_per_position(
        curves,
        train_length=length_l,
        title=f"Bits per byte against position, preset {chosen.preset} ({chosen.label}): "
        f"mean and 95% interval over {seeds} seed(s)",
    )


def _accuracy_panels(configuration: Configuration, tasks: list[str], metric: str) -> dict:
    """``{task: (L, {encoding: (lengths, mean, low, high)})}`` of ``metric`` over seeds, per task run."""
    panels = {}
    for task in tasks:
        by_encoding = configuration.by_encoding(task)
        lines = {}
        for name in (name for name in configuration.encodings if name in by_encoding):
            runs = by_encoding[name]
            points = []
            for n in sorted({n for run in runs for n in run.lengths}):
                entries = [run.at(n) for run in runs]
                if all(e is not None and e["status"] == "ok" for e in entries):
                    points.append((n, *interval([e[metric] for e in entries])))
            if points:
                lengths, mean, low, high = zip(*points, strict=True)
                lines[name] = (lengths, mean, [max(0.0, v) for v in low], [min(1.0, v) for v in high])
        panels[task] = (next(iter(by_encoding.values()))[0].train_length, lines)
    return panels


def _position_panels(configuration: Configuration) -> dict:
    """``{task: (L, {encoding: (answer positions from 1, mean, low, high)})}`` of the accuracy at each
    answer position of examples of length L, per exact-match task, over the seeds that recorded it
    (runs before it was recorded have none)."""
    panels = {}
    for task in configuration.tasks(EXACT_MATCH):
        lines, length_l, by_encoding = {}, None, configuration.by_encoding(task)
        for name in (name for name in configuration.encodings if name in by_encoding):
            runs = by_encoding[name]
            length_l = runs[0].train_length
            entries = [run.at(length_l) or {} for run in runs]
            accuracies = [entry["position_accuracy"] for entry in entries if "position_accuracy" in entry]
            if not accuracies:
                continue
            points = [interval(list(at)) for at in zip(*accuracies, strict=True)]
            mean, low, high = zip(*points, strict=True)
            positions = list(range(1, len(points) + 1))
            lines[name] = (positions, mean, [max(0.0, v) for v in low], [min(1.0, v) for v in high])
        if lines:
            panels[task] = (length_l, lines)
    return panels


def answer_position_figure(source: str | Path | Recorded, preset: str | None = None) -> Figure | None:
    """Accuracy at each answer position at L per exact-match task, of the configuration with the most
    runs that recorded it; None when no run did."""
    from posenc.plots.lab import accuracy_per_answer_position

    def drawn(configuration: Configuration) -> int:
        return sum(len(lines) for _, lines in _position_panels(configuration).values())

    chosen = recorded(source, preset).busiest(drawn)
    if chosen is None:
        return None
    return accuracy_per_answer_position(
        _position_panels(chosen),
        title=f"Accuracy at each answer position at L, preset {chosen.preset} ({chosen.label}): "
        "mean and 95% interval over the seeds that recorded it",
    )


#: The accuracy figures: stem, family, metric, y label, x label (its unit added), title.
ACCURACY_FIGURES = (
    (
        "exact-match",
        EXACT_MATCH,
        "exact_match",
        "exact match",
        "length",
        "Exact match against length per task",
    ),
    (
        "grid-accuracy",
        GRID_ACCURACY,
        "token_accuracy",
        "patch accuracy",
        "grid side",
        "Patch accuracy against grid side",
    ),
)
#: The unit of a grid side on the figure's axis.
_AXIS_UNITS = {"patches a side": "patches"}


def accuracy_figures(
    source: str | Path | Recorded, preset: str | None = None
) -> list[tuple[str, str, Figure]]:
    """Exact match against length per exact-match task, and patch accuracy against grid side per grid
    task, each of the configuration with the most such runs (stem, description, figure)."""
    from posenc.plots.lab import accuracy_against_length

    runs = recorded(source, preset)
    figures = []
    for stem, family, metric, ylabel, xlabel, title in ACCURACY_FIGURES:
        chosen = runs.busiest(lambda c, family=family: len(c.of_family(family)))
        if chosen is None:
            continue
        tasks = chosen.tasks(family)
        units = {_AXIS_UNITS.get(registered(task).unit, registered(task).unit) for task in tasks}
        seeds = len({run.seed for run in chosen.of_family(family)})
        figure = accuracy_against_length(
            _accuracy_panels(chosen, tasks, metric),
            ylabel=ylabel,
            xlabel=f"{xlabel} ({units.pop()})" if len(units) == 1 else xlabel,
            title=f"{title}, preset {chosen.preset} ({chosen.label}): mean and 95% interval over "
            f"{seeds} seed(s)",
        )
        figures.append((stem, title[0].lower() + title[1:], figure))
    return figures


def lab_figures(source: str | Path | Recorded, preset: str | None = None) -> list[tuple[str, str, Figure]]:
    """The lab's figures as (stem, description, figure): bits per byte against position, accuracy against
    length per task, and for a context-extension study its curves zero-shot and fine-tuned."""
    runs = recorded(source, preset)
    figures = []
    figure = bits_per_position_figure(runs)
    if figure is not None:
        figures.append(("bits-per-position", "bits per byte against position", figure))
    figures += accuracy_figures(runs)
    figure = answer_position_figure(runs)
    if figure is not None:
        figures.append(("answer-positions", "accuracy at each answer position at L per task", figure))
    for name, preset_runs in runs.presets.items():
        if runs.is_extension(name):
            for mode in (ZERO_SHOT, FINE_TUNED):
                figure = extension_figure(preset_runs, mode)
                if figure is not None:
                    alt = f"bits per byte against position, RoPE extended, {mode}"
                    figures.append((f"extension-{mode}", alt, figure))
    return figures
