"""The report's tables: seed 004's table measured, then one section per family of tasks, for each
configuration of each preset.

- Seed 004's table: a measurement beside each claim and a mark (✓ agrees, ✗ disagrees, ~ the 95%
  interval over seeds spans the claim's band and another). Parameters are counted from the modules at
  L and 2L; length generalisation is r = bits per byte at 4L over bits per byte at L (the first task of
  the bits-per-byte family, all positions), graded by :data:`BANDS`; exact match at 2L of each
  exact-match task beside it; relative position by the shift test of :mod:`posenc.lab.properties`.
- Bits per byte per evaluation length (bits-per-byte tasks), exact match and answer-token accuracy
  per length with which encodings learn each task at L (exact-match tasks), and the mean reciprocal
  rank across them (:mod:`posenc.lab.report.ranking`); patch accuracy per grid side (grid tasks); a
  task of another family as its first metric per length.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from posenc.document import Block, Bullets, Heading, Paragraph, to_markdown
from posenc.encodings import available, describe
from posenc.lab.extension_report import extension_blocks
from posenc.lab.intervals import format_interval, interval
from posenc.lab.report.learning import learning_table
from posenc.lab.report.loading import Configuration, Recorded, Run, configurations, recorded
from posenc.lab.report.ranking import bootstrap_table, learned_at_l_note, mean_reciprocal_rank_table
from posenc.lab.run_settings import settings as run_settings
from posenc.lab.tasks import BITS_PER_BYTE, EXACT_MATCH, FAMILIES, GRID_ACCURACY, registered
from posenc.table import Table

#: Grades of r = bpb(4L) / bpb(L): (grade, largest r of the grade); above the last is "Poor".
BANDS = (("Excellent", 1.00), ("Good", 1.05), ("Moderate", 1.50))
GRADES = ("Excellent", "Good", "Moderate", "Poor")
AGREE, DISAGREE, SPANS = "✓", "✗", "~"
LEGEND = (
    "✓ agrees, ✗ disagrees, ~ the 95% interval spans the claimed grade and another. Grades of "
    "r = bpb(4L)/bpb(L): Excellent r ≤ 1.00, Good ≤ 1.05, Moderate ≤ 1.50, Poor above (or cannot run)."
)
#: The families whose tasks seed 004's table measures (one position axis, lengths beyond L).
SEED_TABLE_FAMILIES = (BITS_PER_BYTE, EXACT_MATCH)


def grade(ratio: float) -> str:
    """The length-generalisation grade of r = bpb(4L) / bpb(L)."""
    for name, limit in BANDS:
        if ratio <= limit:
            return name
    return "Poor"


def _ratio(runs: list[Run]) -> tuple[tuple[float, float, float] | None, bool]:
    """Interval of bpb(4L)/bpb(L) over seeds, and whether the model cannot run at 4L."""
    ratios = []
    for run in runs:
        at_l, at_4l = run.at_multiple(1), run.at_multiple(4)
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


def _parameter_cell(claim: str | None, run: Run | None) -> str:
    if run is None:
        return "—"
    metrics = run.metrics
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
        length = run.train_length
        positions, positions_2l = run.spec.sequence_length(length), run.spec.sequence_length(2 * length)
        agrees = at_l > 0 and at_l % run.model["d_model"] == 0 and at_2l * positions == at_l * positions_2l
    elif claim == "O(L)":
        agrees = at_2l > at_l
    else:  # "h slopes": h learned parameters
        agrees = at_l == run.model["n_heads"]
    return f"{measured} {AGREE if agrees else DISAGREE}"


def _relative_cell(claim: str | None, runs: list[Run]) -> str:
    verdicts = sorted({run.verdict for run in runs})
    if not verdicts:
        return "—"
    measured = "/".join(verdicts)
    if claim is None:
        return measured
    return f"{measured} {AGREE if verdicts == [claim.lower()] else DISAGREE}"


def proportion_cell(entries: list[dict | None], metric: str) -> str:
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


def seed_claims(name: str) -> tuple[str, str | None, str | None, str | None]:
    """(method, parameters, length generalisation, relative position) as seed 004 §7 claims them for
    the encoding registered as ``name`` (its own ``seed_row``); the name and no claims otherwise."""
    row = describe(name).seed_row if name in available() else None
    if row is None:
        return name, None, None, None
    return row.method, row.parameters, row.length_generalization, row.relative_position


def comparison_table(configuration: Configuration) -> Table:
    """The seed's table with the measurements beside each claim."""
    bits = configuration.tasks(BITS_PER_BYTE)
    lm = configuration.by_encoding(bits[0]) if bits else {}
    tasks = configuration.tasks(EXACT_MATCH)
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
    for name in configuration.encodings:
        label, parameters, length, relative = seed_claims(name)
        exact = [configuration.by_encoding(t).get(name, []) for t in tasks]
        runs = lm.get(name) or next((runs for runs in exact if runs), [])
        stats, cannot_run = _ratio(lm.get(name, []))
        body.append(
            [
                label if label == name else f"{label} ({name})",
                parameters or "—",
                _parameter_cell(parameters, runs[0] if runs else None),
                length or "—",
                _length_cell(length, stats, cannot_run) if name in lm else "—",
                *(proportion_cell([run.at_multiple(2) for run in runs], "exact_match") for runs in exact),
                relative or "—",
                _relative_cell(relative, runs),
            ]
        )
    return Table(columns, body, notes=[LEGEND])


def _named(title: str, task: str, several: bool) -> str:
    """``title``, after the task's name when the section shows several tasks."""
    return f"`{task}`: {title}" if several else title


def bits_per_byte_tables(configuration: Configuration) -> list[Table]:
    """Per bits-per-byte task: bits per byte per evaluation length, at positions < L and ≥ L, and
    seconds per step."""
    tasks = configuration.tasks(BITS_PER_BYTE)
    return [_bits_per_byte_table(configuration, task, len(tasks) > 1) for task in tasks]


def _bits_per_byte_table(configuration: Configuration, task: str, several: bool) -> Table:
    lm = configuration.by_encoding(task)
    lengths = sorted({n for runs in lm.values() for run in runs for n in run.lengths})
    length_l = next(iter(lm.values()))[0].train_length
    longest = lengths[-1]
    columns = [
        "Encoding",
        *(f"bpb at {n}" for n in lengths),
        f"< L at {longest}",
        f"≥ L at {longest}",
        "s/step",
    ]
    body = []
    for name in (name for name in configuration.encodings if name in lm):
        runs, cells = lm[name], [name]
        for n in lengths:
            entries = [run.at(n) for run in runs]
            if any(e is not None and e["status"] != "ok" for e in entries):
                cells.append("cannot run past L")
            else:
                cells.append(
                    format_interval(interval([e["bpb"] for e in entries if e]), 3) if any(entries) else "—"
                )
        last = [run.at(longest) for run in runs]
        ok = [e for e in last if e and e["status"] == "ok"]
        whole = ok and len(ok) == len(last)
        cells.append(format_interval(interval([e["bpb_before_L"] for e in ok])) if whole else "—")
        from_l = [e["bpb_from_L"] for e in ok if e["bpb_from_L"] is not None]
        cells.append(format_interval(interval(from_l)) if from_l and whole else "—")
        cells.append(f"{statistics.fmean(run.seconds_per_step for run in runs) * 1000:.1f} ms")
        body.append(cells)
    unit = registered(task).unit
    return Table(
        columns, body, title=_named(f"L = {length_l} {unit}; mean [95% CI] over seeds.", task, several)
    )


def _seconds(runs: list[Run]) -> str:
    return f"{statistics.fmean(run.seconds_per_step for run in runs) * 1000:.1f} ms" if runs else "—"


def exact_match_tables(configuration: Configuration) -> list[Table]:
    """Exact match and answer-token accuracy per exact-match task and evaluation length (every length
    evaluated)."""
    tasks = configuration.tasks(EXACT_MATCH)
    if not tasks:
        return []
    columns, train_lengths = [], {}  # (task, n, label) per column; (L, unit) per task
    for t in tasks:
        runs = [run for group in configuration.by_encoding(t).values() for run in group]
        length_l = runs[0].train_length
        train_lengths[t] = (length_l, registered(t).unit)
        for n in sorted({n for run in runs for n in run.lengths}):
            columns.append((t, n, f"{t} at {n}" + (f" ({n // length_l}L)" if n % length_l == 0 else "")))
    if len(set(train_lengths.values())) == 1:
        lengths = "L = {} {}".format(*train_lengths[tasks[0]])
    else:
        lengths = "L = " + ", ".join(f"{length} {unit} ({t})" for t, (length, unit) in train_lengths.items())
    tables = []
    for metric, title in (("exact_match", "Exact match"), ("token_accuracy", "Answer-token accuracy")):
        timed = metric == "exact_match"
        header = ["Encoding", *(label for _, _, label in columns)] + (["s/step"] if timed else [])
        body = []
        for name in configuration.encodings:
            cells = [name]
            for t, n, _ in columns:
                runs = configuration.by_encoding(t).get(name, [])
                cells.append(proportion_cell([run.at(n) for run in runs], metric))
            if timed:
                cells.append(_seconds([r for t in tasks for r in configuration.by_encoding(t).get(name, [])]))
            body.append(cells)
        notes = [learned_at_l_note(configuration, tasks)] if timed else []
        tables.append(
            Table(header, body, title=f"{title}, {lengths}; mean [95% CI] over seeds.", notes=notes)
        )
    return tables


def grid_tables(configuration: Configuration) -> list[Table]:
    """Per grid task, its accuracy per evaluated side: per scored patch (with seconds per step), and
    per whole grid."""
    tasks = configuration.tasks(GRID_ACCURACY)
    tables = []
    for task in tasks:
        by_encoding = configuration.by_encoding(task)
        runs = [run for group in by_encoding.values() for run in group]
        side_l = runs[0].train_length
        sides = sorted({n for run in runs for n in run.lengths})
        names = [name for name in configuration.encodings if name in by_encoding]
        for metric, title in (("token_accuracy", "Patch accuracy"), ("exact_match", "Whole grids right")):
            timed = metric == "token_accuracy"
            header = ["Encoding", *(f"{s}×{s}" + (" (trained)" if s == side_l else "") for s in sides)]
            body = []
            for name in names:
                entries = by_encoding[name]
                cells = [name, *(proportion_cell([r.at(s) for r in entries], metric) for s in sides)]
                body.append(cells + ([_seconds(entries)] if timed else []))
            title = f"{title}, trained on {side_l}×{side_l} grids; mean [95% CI] over seeds."
            header += ["s/step"] if timed else []
            tables.append(Table(header, body, title=_named(title, task, len(tasks) > 1)))
    return tables


def other_tables(configuration: Configuration) -> list[tuple[str, Table]]:
    """(task, table) per task of a family the report has no section for: its first metric per
    evaluation length, mean [95% CI] over seeds."""
    tables = []
    for task in (t for t in configuration.tasks() if registered(t).family not in FAMILIES):
        metric, by_encoding = registered(task).metrics[0], configuration.by_encoding(task)
        lengths = sorted({n for runs in by_encoding.values() for run in runs for n in run.lengths})
        body = []
        for name in (name for name in configuration.encodings if name in by_encoding):
            cells = [name]
            for n in lengths:
                entries = [run.at(n) for run in by_encoding[name]]
                if any(e is not None and e["status"] != "ok" for e in entries):
                    cells.append("cannot run past L")
                else:
                    values = [e[metric] for e in entries if e]
                    cells.append(format_interval(interval(values)) if values else "—")
            body.append(cells + [_seconds(by_encoding[name])])
        length_l = next(iter(by_encoding.values()))[0].train_length
        title = f"{metric}, L = {length_l} {registered(task).unit}; mean [95% CI] over seeds."
        tables.append((task, Table(["Encoding", *(f"at {n}" for n in lengths), "s/step"], body, title=title)))
    return tables


def configuration_blocks(configuration: Configuration) -> list[Block]:
    """The tables of one configuration's runs, under a heading naming what sets it apart."""
    blocks: list[Block] = [
        Heading(4, f"Configuration: {configuration.label}"),
        run_settings(configuration.runs),
    ]
    if any(run.family in SEED_TABLE_FAMILIES for run in configuration.runs):
        blocks += [Heading(5, "Seed 004's table, measured"), comparison_table(configuration)]
    bits = bits_per_byte_tables(configuration)
    if bits:
        blocks += [Heading(5, "Language modelling: bits per byte"), *bits]
    exact = exact_match_tables(configuration)
    if exact:
        blocks += [Heading(5, "Algorithmic tasks"), *exact]
    learning = learning_table(configuration)
    if learning:
        blocks.append(learning)
    ranked = mean_reciprocal_rank_table(configuration)
    if ranked:
        blocks += [Heading(5, "Mean reciprocal rank across the algorithmic tasks"), ranked]
        bootstrapped = bootstrap_table(configuration)
        if bootstrapped:
            blocks.append(bootstrapped)
    grid = grid_tables(configuration)
    if grid:
        blocks += [Heading(5, "Grid task: resolution generalisation"), *grid]
    for task, table in other_tables(configuration):
        blocks += [Heading(5, f"Task `{task}`"), table]
    return blocks


def _not_shown(runs: list[Run]) -> Bullets | None:
    """The encodings not run on some task (with why), and the tasks recorded that are not registered."""
    skipped = {(run.encoding, run.reason) for run in runs if run.status == "not applicable"}
    lines = [f"`{name}` not run: {reason}" for name, reason in sorted(skipped)]
    unknown = sorted({run.task for run in runs if run.done and run.spec is None})
    lines += [
        f"task `{task}` is not registered here (load the plugin that defines it); its runs are not shown"
        for task in unknown
    ]
    return Bullets(tuple(lines)) if lines else None


def preset_blocks(preset: str, runs: list[Run]) -> list[Block]:
    """The report of one preset's runs: one set of tables per configuration."""
    known = [run for run in runs if run.spec is not None]
    groups = configurations(known)
    blocks: list[Block] = [Heading(3, f"Preset `{preset}`")]
    if len(groups) > 1:
        blocks.append(
            Paragraph(
                f"{len(groups)} configurations of this preset are recorded; each has its own tables, and "
                "seeds are aggregated within a configuration only."
            )
        )
    not_shown = _not_shown(runs)
    if not_shown:
        blocks.append(not_shown)
    for configuration in groups:
        blocks += configuration_blocks(configuration)
    return blocks


TITLE = "Length generalisation, measured"


def comparison_blocks(source: str | Path | Recorded, preset: str | None = None) -> list[Block] | None:
    """The measured tables of a database (or of its runs already loaded), one section per preset and
    one set of tables per configuration in it (under no title: the caller gives one); None without
    records."""
    runs = recorded(source, preset)
    if not runs.has_done:
        return None
    blocks: list[Block] = []
    for name, preset_runs in runs.presets.items():
        if runs.is_extension(name):
            blocks += extension_blocks(name, preset_runs)
        elif any(run.done for run in preset_runs):
            blocks += preset_blocks(name, preset_runs)
    return blocks


def comparison_markdown(source: str | Path | Recorded, preset: str | None = None) -> str | None:
    """The measured tables as Markdown under the heading :data:`TITLE`; None without records."""
    blocks = comparison_blocks(source, preset)
    return None if blocks is None else to_markdown([Heading(2, TITLE), *blocks])
