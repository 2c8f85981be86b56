"""The lab's report: the measured comparison table beside seed 004's claims, and the per-position plot.

Seed 004 (§7) claims, per encoding, a parameter count, a grade of length generalisation and whether
relative position is explicit. The report puts a measurement beside each claim and a mark:
✓ agrees, ✗ disagrees, ~ the 95% interval over seeds spans the claim's band and another.

- Parameters: learned parameters counted from the modules at L and 2L. "0" agrees with 0 at both;
  "L × d" with a count equal to positions × d_model that doubles at 2L; "O(L)" with a count that
  grows from L to 2L; "h slopes" with h learned parameters.
- Length generalisation: r = bits per byte at 4L over bits per byte at L (language modelling,
  non-overlapping windows, all positions), mean and 95% t-interval over seeds, graded by
  :data:`BANDS`; a model that cannot run past L grades "Poor". The mark compares the grades the
  interval touches with the claimed grade. Exact match at 2L for the algorithmic tasks is shown
  beside it (the seed claims nothing separate for them).
- Relative position: the shift test of :mod:`posenc.lab.properties` (explicit | implicit | no).

The algorithmic tasks also get exact match per evaluation length (mean and 95% interval over seeds)
and the mean reciprocal rank of the encodings across tasks and lengths beyond L, computed as
Kazemnejad et al. (2023) compute theirs and shown beside their published figures
(:data:`PUBLISHED_MRR`).

Runs are aggregated over seeds only when everything else in their config is the same: a preset's
runs are split into configurations (:func:`configurations`), each with its own tables under a
heading that names the settings setting it apart from the preset's defaults (``steps=2500``).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

from matplotlib.figure import Figure

from posenc.document import Block, Bullets, Heading, Image, Paragraph, to_markdown
from posenc.encodings import available, encoding_class
from posenc.lab import algorithmic
from posenc.lab.extension_report import (
    FINE_TUNED,
    ZERO_SHOT,
    extension_blocks,
    extension_figure,
    is_extension_preset,
)
from posenc.lab.intervals import binned_curve, format_interval, interval
from posenc.lab.presets import OVERRIDE_PLACES, PRESETS, Overrides, run_config
from posenc.lab.records import Records
from posenc.lab.run_settings import settings as run_settings
from posenc.lab.tasks import make_task_shape
from posenc.table import Table

#: Grades of r = bpb(4L) / bpb(L): (grade, largest r of the grade); above the last is "Poor".
BANDS = (("Excellent", 1.00), ("Good", 1.05), ("Moderate", 1.50))
GRADES = ("Excellent", "Good", "Moderate", "Poor")
AGREE, DISAGREE, SPANS = "✓", "✗", "~"
#: Mean reciprocal rank of exact match published by Kazemnejad et al. (2023), "The Impact of Positional
#: Encoding on Length Generalization in Transformers" (NeurIPS 2023, arXiv:2305.19466): their main
#: comparison of decoder-only models over all their tasks and the lengths beyond training. Keyed by
#: this package's names; their "absolute position embedding" (APE) is the sinusoidal one.
PUBLISHED_MRR = {"nope": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}


def grade(ratio: float) -> str:
    """The length-generalisation grade of r = bpb(4L) / bpb(L)."""
    for name, limit in BANDS:
        if ratio <= limit:
            return name
    return "Poor"


def load(db_path: str | Path, preset: str | None = None) -> dict[str, list[dict]]:
    """Recorded runs grouped by preset: ``{preset: [row, …]}`` (empty when there are none)."""
    path = Path(db_path)
    if not path.is_file():
        return {}
    try:
        with Records(path, readonly=True) as records:
            rows = records.report_rows()  # a damaged record: one message naming it, not a KeyError
    except ValueError as error:
        if "holds no lab records" in str(error):
            return {}
        raise
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if preset is None or row["preset"] == preset:
            grouped[row["preset"]].append(row)
    return dict(grouped)


#: Settings ``posenc lab run`` can change from a preset's: (name shown, place in the flattened config).
OVERRIDES = tuple(OVERRIDE_PLACES.items())
_ABSENT = "absent"


def _flatten(config: dict, prefix: str = "") -> dict[str, object]:
    """``{"train": {"steps": 12}}`` -> ``{"train.steps": 12}``."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _show(value: object) -> str:
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def _planned(row: dict) -> dict | None:
    """The flattened config this version plans for the row's preset, task, encoding and seed given the
    row's own overridable settings; None when it cannot (a preset, task or encoding it does not know)."""
    config = row["config"]
    try:
        planned = run_config(
            PRESETS[row["preset"]],
            row["task"],
            row["encoding"],
            row["seed"],
            corpus_sha256=config.get("corpus_sha256"),
            overrides=Overrides.of_config(config),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return _flatten(json.loads(planned.canonical_json()))


def _preset_values(row: dict) -> dict[str, object]:
    """The overridable settings as the preset sets them for the row's task (eval lengths at the row's L):
    read from the run the preset plans at that L, so that every override has its value."""
    config = row["config"]
    planned = run_config(
        PRESETS[row["preset"]],
        row["task"],
        row["encoding"],
        row["seed"],
        corpus_sha256=config.get("corpus_sha256"),
        overrides=Overrides(train_length=config["train_length"]),
    )
    flat = _flatten(json.loads(planned.canonical_json()))
    return {name: flat.get(place) for name, place in OVERRIDES}


def differences(row: dict) -> tuple[tuple[str, str], ...]:
    """What sets a finished run apart from its preset's defaults, its seed aside: ``((setting, value), …)``.

    The settings given to ``posenc lab run`` (``steps``, ``train_length``, …) that differ from the
    preset's, then every other entry of the recorded config that this version would plan otherwise
    (an older config version, a preset changed since), by its dotted place in the config. Two runs of
    the same preset, task, encoding and corpus have the same differences exactly when their configs
    are equal but for the seed.
    """
    flat = _flatten(row["config"])
    planned = _planned(row)
    if planned is None:  # nothing to compare with: the whole config (but the seed) is the difference
        rest = json.dumps({k: v for k, v in flat.items() if k != "seed"}, sort_keys=True)
        return (
            ("config", f"{hashlib.sha256(rest.encode()).hexdigest()[:12]} (not planned by this version)"),
        )
    preset = _preset_values(row)
    items = [(name, _show(flat.get(place))) for name, place in OVERRIDES if flat.get(place) != preset[name]]
    for place in sorted((flat.keys() | planned.keys()) - {"seed"}):
        if flat.get(place, _ABSENT) != planned.get(place, _ABSENT):
            items.append((place, _show(flat.get(place, _ABSENT))))
    return tuple(items)


def configurations(rows: list[dict]) -> list[tuple[tuple[tuple[str, str], ...], list[dict]]]:
    """A preset's finished runs grouped by configuration, in the order first recorded.

    A configuration is everything in a run's config but the seed (and the task and encoding, which
    are the tables' rows and columns), named by its :func:`differences`; language-modelling runs on a
    corpus other than the one most of them used also name it. Only runs of one configuration are
    aggregated over seeds.
    """
    done = [row for row in rows if row["status"] == "done"]
    corpora = Counter(
        row["config"].get("corpus_sha256") for row in done if row["config"].get("corpus_sha256")
    )
    usual = corpora.most_common(1)[0][0] if corpora else None
    groups: dict[tuple, list[dict]] = {}
    for row in done:
        key = differences(row)
        corpus = row["config"].get("corpus_sha256")
        if corpus and corpus != usual:
            key += (("corpus", f"{corpus[:16]}…"),)
        groups.setdefault(key, []).append(row)
    return list(groups.items())


def configuration_label(settings: tuple[tuple[str, str], ...]) -> str:
    """``steps=2500, train_length=8``, or ``preset defaults``."""
    return ", ".join(f"{name}={value}" for name, value in settings) if settings else "preset defaults"


def _eval_at(row: dict, multiple: int) -> dict | None:
    length = row["config"]["train_length"] * multiple
    return row["metrics"]["eval"].get(str(length))


def _by(rows: list[dict], task: str) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        if row["status"] == "done" and row["task"] == task:
            grouped[row["encoding"]].append(row)
    return grouped


def _ratio(runs: list[dict]) -> tuple[tuple[float, float, float] | None, bool]:
    """Interval of bpb(4L)/bpb(L) over seeds, and whether the model cannot run at 4L."""
    ratios = []
    for row in runs:
        at_l, at_4l = _eval_at(row, 1), _eval_at(row, 4)
        if at_4l is not None and at_4l["status"] != "ok":
            return None, True
        if at_l is not None and at_4l is not None:
            ratios.append(at_4l["bpb"] / at_l["bpb"])
    return (interval(ratios) if ratios else None), False


def _length_cell(claim: str | None, stats, cannot_run: bool) -> str:
    if cannot_run:
        measured, touched = "cannot run past L", {"Poor"}
    elif stats is None:
        return "—"
    else:
        low, high = GRADES.index(grade(stats[1])), GRADES.index(grade(stats[2]))
        touched = set(GRADES[low : high + 1])
        measured = f"{format_interval(stats)} {grade(stats[0])}"
    if claim is None:
        return measured
    mark = AGREE if touched == {claim} else (DISAGREE if claim not in touched else SPANS)
    return f"{measured} {mark}"


def _parameter_cell(claim: str | None, run: dict | None) -> str:
    if run is None:
        return "—"
    metrics, model = run["metrics"], run["config"]["model"]
    at_l, at_2l, fixed = (
        metrics["positional_parameters"],
        metrics["positional_parameters_at_2L"],
        metrics["fixed_constants"],
    )
    measured = f"{at_l:,} learned (2L: {at_2l:,})" + (f" + {fixed} fixed" if fixed else "")
    if claim is None:
        return measured
    if claim == "0":
        agrees = at_l == 0 and at_2l == 0
    elif claim == "L × d":  # a row of d per position: the count grows as the positions of the task's example
        task, length = run["config"]["task"], run["config"]["train_length"]
        positions, positions_2l = make_task_shape(task, length), make_task_shape(task, 2 * length)
        agrees = at_l > 0 and at_l % model["d_model"] == 0 and at_2l * positions == at_l * positions_2l
    elif claim == "O(L)":
        agrees = at_2l > at_l
    else:  # "h slopes": h learned parameters
        agrees = at_l == model["n_heads"]
    return f"{measured} {AGREE if agrees else DISAGREE}"


def _relative_cell(claim: str | None, runs: list[dict]) -> str:
    verdicts = sorted({row["metrics"]["relative_position"]["verdict"] for row in runs})
    if not verdicts:
        return "—"
    measured = "/".join(verdicts)
    if claim is None:
        return measured
    return f"{measured} {AGREE if verdicts == [claim.lower()] else DISAGREE}"


def _proportion_cell(entries: list[dict | None], metric: str) -> str:
    """A proportion over seeds: mean and 95% interval clipped to [0, 1] ("—" when none measured it)."""
    values = []
    for entry in entries:
        if entry is None:
            continue
        if entry["status"] != "ok":
            return "cannot run"
        values.append(entry[metric])
    if not values:
        return "—"
    mean, low, high = interval(values)
    return format_interval((mean, max(0.0, low), min(1.0, high)), 2)


def _exact_cell(runs: list[dict], multiple: int = 2, metric: str = "exact_match") -> str:
    """A proportion over seeds at ``multiple``·L."""
    return _proportion_cell([_eval_at(row, multiple) for row in runs], metric)


def seed_claims(name: str) -> tuple[str, str | None, str | None, str | None]:
    """(method, parameters, length generalisation, relative position) as seed 004 §7 claims them for
    the encoding registered as ``name`` (its own ``seed_row``); the name and no claims otherwise."""
    row = encoding_class(name).seed_row if name in available() else None
    if row is None:
        return name, None, None, None
    return row.method, row.parameters, row.length_generalization, row.relative_position


def _encodings(rows: list[dict]) -> list[str]:
    """The encodings with finished runs: in the seed table's order, then the others by name."""
    names = {row["encoding"] for row in rows if row["status"] == "done"}

    def order(name: str) -> tuple[int, str]:
        row = encoding_class(name).seed_row if name in available() else None
        return (row.order if row else 1 << 30, name)

    return sorted(names, key=order)


def comparison_table(rows: list[dict]) -> Table:
    """The seed's table with the measurements beside each claim."""
    lm = _by(rows, "lm")
    tasks = [t for t in algorithmic.ALGORITHMIC_TASKS if _by(rows, t)]
    columns = [
        "Method",
        "Parameters (seed)",
        "Parameters (counted)",
        "Length gen. (seed)",
        "bpb 4L / bpb L (95% CI), grade",
        *(f"{t} EM at 2L" for t in tasks),
        "Relative position (seed)",
        "Relative position (shift test)",
    ]
    body = []
    for name in _encodings(rows):
        label, parameters, length, relative = seed_claims(name)
        runs = lm.get(name) or next((_by(rows, t)[name] for t in tasks if _by(rows, t).get(name)), [])
        stats, cannot_run = _ratio(lm.get(name, []))
        body.append(
            [
                label if label == name else f"{label} ({name})",
                parameters or "—",
                _parameter_cell(parameters, runs[0] if runs else None),
                length or "—",
                _length_cell(length, stats, cannot_run) if name in lm else "—",
                *(_exact_cell(_by(rows, t).get(name, [])) for t in tasks),
                relative or "—",
                _relative_cell(relative, runs),
            ]
        )
    return Table(columns, body, notes=[LEGEND])


def lm_table(rows: list[dict]) -> Table | None:
    """Bits per byte per evaluation length, at positions < L and ≥ L, and seconds per step."""
    lm = _by(rows, "lm")
    if not lm:
        return None
    lengths = sorted({int(k) for runs in lm.values() for row in runs for k in row["metrics"]["eval"]})
    length_l = next(iter(lm.values()))[0]["config"]["train_length"]
    longest = lengths[-1]
    columns = [
        "Encoding",
        *(f"bpb at {n}" for n in lengths),
        f"< L at {longest}",
        f"≥ L at {longest}",
        "s/step",
    ]
    body = []
    for name in _encodings(rows):
        if name not in lm:
            continue
        runs, cells = lm[name], [name]
        for n in lengths:
            entries = [row["metrics"]["eval"].get(str(n)) for row in runs]
            if any(e is not None and e["status"] != "ok" for e in entries):
                cells.append("cannot run past L")
            else:
                cells.append(
                    format_interval(interval([e["bpb"] for e in entries if e]), 3) if any(entries) else "—"
                )
        last = [row["metrics"]["eval"].get(str(longest)) for row in runs]
        ok = [e for e in last if e and e["status"] == "ok"]
        cells.append(
            format_interval(interval([e["bpb_before_L"] for e in ok])) if ok and len(ok) == len(last) else "—"
        )
        from_l = [e["bpb_from_L"] for e in ok if e["bpb_from_L"] is not None]
        cells.append(format_interval(interval(from_l)) if from_l and len(ok) == len(last) else "—")
        cells.append(f"{statistics.fmean(r['timings']['seconds_per_step'] for r in runs) * 1000:.1f} ms")
        body.append(cells)
    return Table(columns, body, title=f"L = {length_l} bytes; mean [95% CI] over seeds.")


def algorithmic_tables(rows: list[dict]) -> list[Table]:
    """Exact match and answer-token accuracy per task and evaluation length (every length evaluated)."""
    tasks = [t for t in algorithmic.ALGORITHMIC_TASKS if _by(rows, t)]
    if not tasks:
        return []
    columns, train_lengths = [], {}  # (task, n, label) per column; L per task
    for t in tasks:
        runs = [row for group in _by(rows, t).values() for row in group]
        length_l = train_lengths[t] = runs[0]["config"]["train_length"]
        for n in sorted({int(k) for row in runs for k in row["metrics"]["eval"]}):
            columns.append((t, n, f"{t} at {n}" + (f" ({n // length_l}L)" if n % length_l == 0 else "")))
    if len(set(train_lengths.values())) == 1:
        lengths = f"L = {train_lengths[tasks[0]]} symbols"
    else:
        lengths = "L = " + ", ".join(f"{length} symbols ({t})" for t, length in train_lengths.items())
    tables = []
    for metric, title in (("exact_match", "Exact match"), ("token_accuracy", "Answer-token accuracy")):
        header = ["Encoding", *(label for _, _, label in columns)] + (
            ["s/step"] if metric == "exact_match" else []
        )
        body = []
        for name in _encodings(rows):
            cells = [name]
            for t, n, _ in columns:
                runs = _by(rows, t).get(name, [])
                cells.append(_proportion_cell([row["metrics"]["eval"].get(str(n)) for row in runs], metric))
            if metric == "exact_match":
                seconds = [
                    r["timings"]["seconds_per_step"] for t in tasks for r in _by(rows, t).get(name, [])
                ]
                cells.append(f"{statistics.fmean(seconds) * 1000:.1f} ms" if seconds else "—")
            body.append(cells)
        notes = [learned_at_l_note(rows, tasks)] if metric == "exact_match" else []
        tables.append(
            Table(header, body, title=f"{title}, {lengths}; mean [95% CI] over seeds.", notes=notes)
        )
    return tables


#: Exact match at L from which a task counts as learned by an encoding.
LEARNED_AT_L = 0.9


def learned_at_l(rows: list[dict], task: str) -> tuple[list[str], int]:
    """The encodings that learn ``task`` at L (mean exact match ≥ :data:`LEARNED_AT_L` over seeds), and
    how many encodings have runs of it."""
    by_encoding = _by(rows, task)
    learned = []
    for name in (n for n in _encodings(rows) if n in by_encoding):
        runs = by_encoding[name]
        entries = [row["metrics"]["eval"].get(str(row["config"]["train_length"])) for row in runs]
        ok = all(e and e["status"] == "ok" for e in entries)
        if ok and statistics.fmean(e["exact_match"] for e in entries) >= LEARNED_AT_L:
            learned.append(name)
    return learned, len(by_encoding)


def learned_at_l_note(rows: list[dict], tasks: list[str]) -> str:
    """Which encodings learn each task at L: a task that few learn says little about position beyond L."""
    parts = []
    for task in tasks:
        learned, run = learned_at_l(rows, task)
        parts.append(f"{task}: {len(learned)} of {run} ({', '.join(learned) or 'none'})")
    return f"Learned at L (mean exact match ≥ {LEARNED_AT_L}): " + "; ".join(parts) + "."


def learned_by_most(rows: list[dict], tasks: list[str]) -> list[str]:
    """The tasks that more than half of their encodings learn at L: where the columns beyond L rank
    how position is used, not whether the task was learned at all."""
    counts = {task: learned_at_l(rows, task) for task in tasks}
    return [task for task, (learned, run) in counts.items() if 2 * len(learned) > run]


def grid_tables(rows: list[dict]) -> list[Table]:
    """The grid task's accuracy per evaluated side: per scored patch (with seconds per step), and per
    whole grid."""
    by_encoding = _by(rows, "grid")
    if not by_encoding:
        return []
    runs = [row for group in by_encoding.values() for row in group]
    side_l = runs[0]["config"]["train_length"]
    sides = sorted({int(k) for row in runs for k in row["metrics"]["eval"]})
    names = [name for name in _encodings(rows) if name in by_encoding]
    tables = []
    for metric, title in (("token_accuracy", "Patch accuracy"), ("exact_match", "Whole grids right")):
        timed = metric == "token_accuracy"
        header = ["Encoding", *(f"{s}×{s}" + (" (trained)" if s == side_l else "") for s in sides)]
        body = []
        for name in names:
            entries = by_encoding[name]
            cells = [
                name,
                *(
                    _proportion_cell([r["metrics"]["eval"].get(str(s)) for r in entries], metric)
                    for s in sides
                ),
            ]
            if timed:
                cells.append(
                    f"{statistics.fmean(r['timings']['seconds_per_step'] for r in entries) * 1000:.1f} ms"
                )
            body.append(cells)
        title = f"{title}, trained on {side_l}×{side_l} grids; mean [95% CI] over seeds."
        tables.append(Table(header + (["s/step"] if timed else []), body, title=title))
    return tables


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


def exact_match_beyond_l(rows: list[dict]) -> dict[tuple[str, int], dict[str, float]]:
    """Mean exact match over seeds per algorithmic task, evaluation length n > L and encoding:
    ``{(task, n): {encoding: score}}``. A model that cannot run at n answers nothing there: 0."""
    scores: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for task in algorithmic.ALGORITHMIC_TASKS:
        for name, runs in _by(rows, task).items():
            length_l = runs[0]["config"]["train_length"]
            for n in sorted({int(k) for row in runs for k in row["metrics"]["eval"]}):
                entries = [row["metrics"]["eval"].get(str(n)) for row in runs]
                if n <= length_l or not all(entries):
                    continue
                ok = all(entry["status"] == "ok" for entry in entries)
                scores[task, n][name] = statistics.fmean(e["exact_match"] for e in entries) if ok else 0.0
    return dict(scores)


def mean_reciprocal_rank_table(rows: list[dict]) -> Table | None:
    """The encodings' mean reciprocal rank across the algorithmic tasks and lengths beyond L, ranked
    among all the encodings run, over only the tasks most of them learn at L, and among the five
    Kazemnejad et al. compare (whose published MRR is shown beside it); None without an algorithmic
    task evaluated beyond L."""
    scores = exact_match_beyond_l(rows)
    if not scores:
        return None
    tasks = sorted({task for task, _ in scores}, key=algorithmic.ALGORITHMIC_TASKS.index)
    learned = learned_by_most(rows, tasks)
    measured = mean_reciprocal_rank(scores)
    on_learned = mean_reciprocal_rank({pair: by for pair, by in scores.items() if pair[0] in learned})
    among_five = mean_reciprocal_rank(
        {pair: {name: s for name, s in by.items() if name in PUBLISHED_MRR} for pair, by in scores.items()}
    )
    order = {name: index for index, name in enumerate(_encodings(rows))}
    body = [
        [
            name,
            f"{measured[name]:.2f}",
            f"{on_learned[name]:.2f}" if name in on_learned else "—",
            f"{among_five[name]:.2f}" if name in among_five else "—",
            f"{PUBLISHED_MRR[name]:.2f}" if name in PUBLISHED_MRR else "—",
        ]
        for name in sorted(measured, key=lambda name: (-measured[name], order[name]))
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
    missing = _missing_runs(rows, tasks)
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


def _missing_runs(rows: list[dict], tasks: list[str]) -> dict[str, list[str]]:
    """Per task, the encodings recorded on some other of ``tasks`` but not on it."""
    by_task = {task: _by(rows, task) for task in tasks}
    names = [name for name in _encodings(rows) if any(name in runs for runs in by_task.values())]
    missing = {task: [name for name in names if name not in runs] for task, runs in by_task.items()}
    return {task: absent for task, absent in missing.items() if absent}


def _not_run(rows: list[dict]) -> Bullets | None:
    skipped = {(row["encoding"], row["reason"]) for row in rows if row["status"] == "not applicable"}
    return (
        Bullets(tuple(f"`{name}` not run: {reason}" for name, reason in sorted(skipped))) if skipped else None
    )


LEGEND = (
    "✓ agrees, ✗ disagrees, ~ the 95% interval spans the claimed grade and another. Grades of "
    "r = bpb(4L)/bpb(L): Excellent r ≤ 1.00, Good ≤ 1.05, Moderate ≤ 1.50, Poor above (or cannot run)."
)


def configuration_blocks(settings: tuple[tuple[str, str], ...], rows: list[dict]) -> list[Block]:
    """The tables of one configuration's runs, under a heading naming what sets it apart."""
    blocks: list[Block] = [
        Heading(4, f"Configuration: {configuration_label(settings)}"),
        run_settings(rows),
    ]
    if any(row["task"] != "grid" for row in rows):
        blocks += [Heading(5, "Seed 004's table, measured"), comparison_table(rows)]
    lm = lm_table(rows)
    if lm:
        blocks += [Heading(5, "Language modelling: bits per byte"), lm]
    exact = algorithmic_tables(rows)
    if exact:
        blocks += [Heading(5, "Algorithmic tasks"), *exact]
    ranked = mean_reciprocal_rank_table(rows)
    if ranked:
        blocks += [Heading(5, "Mean reciprocal rank across the algorithmic tasks"), ranked]
    grid = grid_tables(rows)
    if grid:
        blocks += [Heading(5, "Grid task: resolution generalisation"), *grid]
    return blocks


def preset_blocks(preset: str, rows: list[dict]) -> list[Block]:
    """The report of one preset's runs: one set of tables per configuration."""
    groups = configurations(rows)
    blocks: list[Block] = [Heading(3, f"Preset `{preset}`")]
    if len(groups) > 1:
        blocks.append(
            Paragraph(
                f"{len(groups)} configurations of this preset are recorded; each has its own tables, and "
                "seeds are aggregated within a configuration only."
            )
        )
    not_run = _not_run(rows)
    if not_run:
        blocks.append(not_run)
    for settings, runs in groups:
        blocks += configuration_blocks(settings, runs)
    return blocks


TITLE = "Length generalisation, measured"


def comparison_blocks(db_path: str | Path, preset: str | None = None) -> list[Block] | None:
    """The measured tables, one section per preset and one set of tables per configuration in it (under
    no title: the caller gives one); None without records."""
    grouped = load(db_path, preset)
    if not any(row["status"] == "done" for rows in grouped.values() for row in rows):
        return None
    blocks: list[Block] = []
    for name, rows in grouped.items():
        if is_extension_preset(rows):
            blocks += extension_blocks(name, rows)
        elif any(r["status"] == "done" for r in rows):
            blocks += preset_blocks(name, rows)
    return blocks


def comparison_markdown(db_path: str | Path, preset: str | None = None) -> str | None:
    """The measured tables as Markdown under the heading :data:`TITLE`; None without records."""
    blocks = comparison_blocks(db_path, preset)
    return None if blocks is None else to_markdown([Heading(2, TITLE), *blocks])


def _curves(rows: list[dict], bins: int) -> tuple[dict, int]:
    lm = _by(rows, "lm")
    curves, length_l = {}, 0
    for name in _encodings(rows):
        runs = lm.get(name)
        if not runs:
            continue
        length_l = runs[0]["config"]["train_length"]
        lengths = sorted(
            (int(k) for k, e in runs[0]["metrics"]["eval"].items() if e["status"] == "ok"), reverse=True
        )
        if not lengths:
            continue
        key = str(lengths[0])
        per_seed = [row["metrics"]["eval"][key]["curve"] for row in runs if key in row["metrics"]["eval"]]
        curves[name] = binned_curve(per_seed, lengths[0], bins)
    return curves, length_l


def bits_per_position_figure(
    db_path: str | Path, preset: str | None = None, *, bins: int = 64
) -> Figure | None:
    """Bits per byte against position (longest length each encoding runs at), or None without lm runs.

    One configuration is drawn (seeds are averaged within a configuration only): with several
    recorded, the one with the most language-modelling runs, first recorded among equals.
    """
    from posenc.plots.lab import bits_per_position

    candidates = [
        (sum(len(runs) for runs in _by(rows, "lm").values()), name, settings, rows)
        for name, preset_rows in load(db_path, preset).items()
        if not is_extension_preset(preset_rows)
        for settings, rows in configurations(preset_rows)
    ]
    candidates = [candidate for candidate in candidates if candidate[0]]
    if not candidates:
        return None
    _, chosen, settings, rows = max(candidates, key=lambda candidate: candidate[0])
    curves, length_l = _curves(rows, bins)
    seeds = len({row["seed"] for row in rows if row["task"] == "lm"})
    return bits_per_position(
        curves,
        train_length=length_l,
        title=f"Bits per byte against position, preset {chosen} ({configuration_label(settings)}): "
        f"mean and 95% interval over {seeds} seed(s)",
    )


def _accuracy_panels(rows: list[dict], tasks: list[str], metric: str) -> dict:
    """``{task: (L, {encoding: (lengths, mean, low, high)})}`` of ``metric`` over seeds, per task run."""
    panels = {}
    for task in tasks:
        by_encoding = _by(rows, task)
        if not by_encoding:
            continue
        lines = {}
        for name in _encodings(rows):
            runs = by_encoding.get(name)
            if not runs:
                continue
            points = []
            for n in sorted({int(k) for row in runs for k in row["metrics"]["eval"]}):
                entries = [row["metrics"]["eval"].get(str(n)) for row in runs]
                if all(e is not None and e["status"] == "ok" for e in entries):
                    points.append((n, *interval([e[metric] for e in entries])))
            if points:
                lengths, mean, low, high = zip(*points, strict=True)
                lines[name] = (lengths, mean, [max(0.0, v) for v in low], [min(1.0, v) for v in high])
        panels[task] = (next(iter(by_encoding.values()))[0]["config"]["train_length"], lines)
    return panels


def _position_panels(rows: list[dict], tasks: list[str]) -> dict:
    """``{task: (L, {encoding: (answer positions from 1, mean, low, high)})}`` of the accuracy at each
    answer position of examples of length L, over the seeds that recorded it (runs before it was
    recorded have none)."""
    panels = {}
    for task in tasks:
        lines, length_l, by_encoding = {}, None, _by(rows, task)
        for name in _encodings(rows):
            runs = by_encoding.get(name)
            if not runs:
                continue
            length_l = runs[0]["config"]["train_length"]
            entries = [row["metrics"]["eval"].get(str(length_l)) or {} for row in runs]
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


def answer_position_figure(db_path: str | Path, preset: str | None = None) -> Figure | None:
    """Accuracy at each answer position at L per algorithmic task, of the configuration with the most
    runs that recorded it; None when no run did."""
    from posenc.plots.lab import accuracy_per_answer_position

    tasks = list(algorithmic.ALGORITHMIC_TASKS)
    candidates = []
    for name, preset_rows in load(db_path, preset).items():
        if is_extension_preset(preset_rows):
            continue
        for settings, rows in configurations(preset_rows):
            panels = _position_panels(rows, tasks)
            counted = sum(len(lines) for _, lines in panels.values())
            if counted:
                candidates.append((counted, name, settings, panels))
    if not candidates:
        return None
    _, chosen, settings, panels = max(candidates, key=lambda candidate: candidate[0])
    return accuracy_per_answer_position(
        panels,
        title=f"Accuracy at each answer position at L, preset {chosen} ({configuration_label(settings)}): "
        "mean and 95% interval over the seeds that recorded it",
    )


def accuracy_figures(db_path: str | Path, preset: str | None = None) -> list[tuple[str, str, Figure]]:
    """Exact match against length per algorithmic task, and patch accuracy against grid side, of each
    preset's configuration with the most such runs (stem, description, figure)."""
    from posenc.plots.lab import accuracy_against_length

    figures = []
    kinds = (  # stem, tasks, metric, y label, x label, title
        (
            "exact-match",
            list(algorithmic.ALGORITHMIC_TASKS),
            "exact_match",
            "exact match",
            "length (symbols)",
            "Exact match against length per task",
        ),
        (
            "grid-accuracy",
            ["grid"],
            "token_accuracy",
            "patch accuracy",
            "grid side (patches)",
            "Patch accuracy against grid side",
        ),
    )
    groups = [
        (name, settings, rows)
        for name, preset_rows in load(db_path, preset).items()
        if not is_extension_preset(preset_rows)
        for settings, rows in configurations(preset_rows)
    ]
    for stem, tasks, metric, ylabel, xlabel, title in kinds:
        counted = [
            (sum(row["task"] in tasks for row in rows), name, settings, rows)
            for name, settings, rows in groups
        ]
        counted = [candidate for candidate in counted if candidate[0]]
        if not counted:
            continue
        _, chosen, settings, rows = max(counted, key=lambda candidate: candidate[0])
        seeds = len({row["seed"] for row in rows if row["task"] in tasks})
        figure = accuracy_against_length(
            _accuracy_panels(rows, tasks, metric),
            ylabel=ylabel,
            xlabel=xlabel,
            title=f"{title}, preset {chosen} ({configuration_label(settings)}): mean and 95% interval over "
            f"{seeds} seed(s)",
        )
        figures.append((stem, title[0].lower() + title[1:], figure))
    return figures


def lab_figures(db_path: str | Path, preset: str | None = None) -> list[tuple[str, str, Figure]]:
    """The lab's figures as (stem, description, figure): bits per byte against position, accuracy against
    length per task, and for a context-extension study its curves zero-shot and fine-tuned."""
    figures = []
    figure = bits_per_position_figure(db_path, preset)
    if figure is not None:
        figures.append(("bits-per-position", "bits per byte against position", figure))
    figures += accuracy_figures(db_path, preset)
    figure = answer_position_figure(db_path, preset)
    if figure is not None:
        figures.append(("answer-positions", "accuracy at each answer position at L per task", figure))
    for rows in load(db_path, preset).values():
        if is_extension_preset(rows):
            for mode in (ZERO_SHOT, FINE_TUNED):
                figure = extension_figure(rows, mode)
                if figure is not None:
                    alt = f"bits per byte against position, RoPE extended, {mode}"
                    figures.append((f"extension-{mode}", alt, figure))
    return figures


def write_report(db_path: str | Path, out: str | Path | None, preset: str | None = None) -> str | None:
    """The Markdown report; with ``out``, also ``out/lab.md`` and ``out/lab_bits_per_position.png``."""
    blocks = comparison_blocks(db_path, preset)
    if blocks is None:
        return None
    blocks = [Heading(2, TITLE), *blocks]
    if out is None:
        return to_markdown(blocks)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stem, alt, figure in lab_figures(db_path, preset):
        name = f"lab_{stem.replace('-', '_')}.png"
        figure.savefig(out / name, dpi=120)
        blocks.append(Image(name, alt))
    markdown = to_markdown(blocks)
    (out / "lab.md").write_text(markdown)
    return markdown


def print_markdown(markdown: str) -> None:
    """The report on stdout: rendered by rich on a terminal (tables drawn, no Markdown escapes shown),
    as Markdown text anywhere else (a file, a pipe), for a Markdown viewer."""
    if not sys.stdout.isatty():
        print(markdown)
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(markdown))
