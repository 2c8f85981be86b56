"""The context-extension study's report: bits per byte at each target length, per scaling, zero-shot
and fine-tuned, beside encodings trained from scratch at L; and the per-position curves.

Every cell is the mean and 95% interval over seeds (:func:`posenc.lab.intervals.interval`). Runs are
told apart by their recorded config: a run with ``init_from`` starts from a base's weights (0 steps:
zero-shot; otherwise fine-tuned at ``finetune_length``), its scaling in ``encoding_kwargs``; a run
without is trained from scratch at L.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING

from matplotlib.figure import Figure

from posenc.document import Block, Bullets, Heading, Paragraph
from posenc.lab.intervals import binned_curve, format_interval, interval
from posenc.table import Table

if TYPE_CHECKING:
    from posenc.lab.report.loading import Run

ZERO_SHOT, FINE_TUNED = "zero-shot", "fine-tuned"


def is_extension_preset(rows: list[Run]) -> bool:
    """Whether a preset's rows are an extension study (some run starts from another's weights)."""
    return any(row.done and row.config.get("init_from") for row in rows)


def _mode(row: Run) -> str:
    return FINE_TUNED if row.config["train"]["steps"] else ZERO_SHOT


def _scaling(row: Run) -> str:
    """The run's scaling, or its position remap (Self-Extend, ReRoPE, PoSE, continuous)."""
    remap = row.config.get("position_remap")
    if remap:
        return remap["name"]
    return row.config["encoding_kwargs"].get("scaling") or "unscaled"


def _groups(rows: list[Run]) -> tuple[dict, dict, int]:
    """({(scaling, mode, target): [run]}, {encoding: [run]} trained from scratch, L)."""
    extended, scratch, length = defaultdict(list), defaultdict(list), 0
    for row in rows:
        if not row.done:
            continue
        config = row.config
        length = config["train_length"]
        if config.get("init_from"):
            extended[_scaling(row), _mode(row), max(config["eval_lengths"])].append(row)
        else:
            scratch[config["encoding"]].append(row)
    return extended, scratch, length


def _cell(runs: list[Run], length: int, key: str = "bpb") -> str:
    values = [
        entry[key]
        for row in runs
        if (entry := row.metrics["eval"].get(str(length)))
        and entry["status"] == "ok"
        and entry[key] is not None
    ]
    return format_interval(interval(values)) if values else "—"


def target_table(rows: list[Run], target: int) -> Table:
    """Bits per byte at ``target`` (all positions and positions ≥ L) and at L, per scaling and mode,
    then the encodings trained from scratch."""
    extended, scratch, length = _groups(rows)
    scalings = list(dict.fromkeys(scaling for scaling, _, t in extended if t == target))
    table_rows = []
    for scaling in scalings:
        zero, tuned = (
            extended.get((scaling, ZERO_SHOT, target), []),
            extended.get((scaling, FINE_TUNED, target), []),
        )
        table_rows.append(
            (
                f"RoPE, {scaling}",
                _cell(zero, target),
                _cell(zero, target, "bpb_from_L"),
                _cell(zero, length),
                _cell(tuned, target),
                _cell(tuned, target, "bpb_from_L"),
                _cell(tuned, length),
            )
        )
    base = next((row.config["encoding"] for runs in extended.values() for row in runs), None)
    for encoding, runs in scratch.items():
        if encoding == base:
            continue
        table_rows.append(
            (
                f"{encoding} from scratch at L",
                _cell(runs, target),
                _cell(runs, target, "bpb_from_L"),
                _cell(runs, length),
                "—",
                "—",
                "—",
            )
        )
    seeds = len({row.seed for row in rows if row.done})
    return Table(
        [
            "Model",
            f"{ZERO_SHOT}: bpb at {target}",
            f"{ZERO_SHOT}: ≥ L",
            f"{ZERO_SHOT}: bpb at L",
            f"{FINE_TUNED}: bpb at {target}",
            f"{FINE_TUNED}: ≥ L",
            f"{FINE_TUNED}: bpb at L",
        ],
        table_rows,
        title=f"Extended to {target} = {target // length}L (L = {length} bytes); mean [95% CI] over {seeds} seed(s)",
        notes=(
            f"bpb at {target}: all positions of windows of {target} bytes; ≥ L: positions L … {target - 1} of "
            "them; bpb at L: windows of L (what the scaling costs at the training length).",
        ),
    )


def _settings(rows: list[Run]) -> Bullets:
    tuned = [
        row.config
        for row in rows
        if row.done and row.config.get("init_from") and row.config["train"]["steps"]
    ]
    base = next(
        (row.config for row in rows if row.done and not row.config.get("init_from")),
        None,
    )
    items = []
    if base is not None:
        model, train = base["model"], base["train"]
        items.append(
            f"pre-training: lm at L={base['train_length']}, d_model={model['d_model']}, {model['n_layers']} layers, "
            f"{model['n_heads']} heads; {train['steps']} steps of batch {train['batch_size']}, lr {train['lr']}"
        )
    if tuned:
        train = tuned[0]["train"]
        batches = {config["finetune_length"]: config["train"]["batch_size"] for config in tuned}
        per_target = ", ".join(f"batch {batches[length]} at {length}" for length in sorted(batches))
        items.append(
            f"fine-tune: {train['steps']} steps at the target length ({per_target}), peak lr {train['lr']}, "
            f"{train['warmup']} warm-up steps, the same for every scaling"
        )
    return Bullets(tuple(items))


#: Config entries that are not the study's setup: the seed, and what sets a run apart within one study
#: (its encoding, the scaling in its arguments and the attention backends that follow from them).
_NOT_SETUP = ("seed", "encoding", "encoding_kwargs", "train_backend", "eval_backend")


def studies(rows: list[Run]) -> list[list[Run]]:
    """The finished runs grouped by study, in the order first recorded: a run starting from a base's
    weights (``init_from``) belongs to its base's study, and runs trained from scratch share one when
    their configs agree but for the seed and the encoding. Only runs of one study are averaged (two
    budgets or training lengths in one database give two studies, never one mean)."""
    done = [row for row in rows if row.done]
    by_hash = {row.config_hash: row for row in done}
    groups: dict[str, list[Run]] = {}
    for row in done:
        root = by_hash.get(row.config.get("init_from"), row)
        setup = {key: value for key, value in root.config.items() if key not in _NOT_SETUP}
        groups.setdefault(json.dumps(setup, sort_keys=True), []).append(row)
    return list(groups.values())


def extension_blocks(preset: str, rows: list[Run]) -> list[Block]:
    """The study's section: settings, then one table per target length; one such section per study
    where the records hold more than one (:func:`studies`)."""
    found = studies(rows)
    blocks: list[Block] = []
    for index, study in enumerate(found, start=1):
        extended, _, _ = _groups(study)
        targets = sorted({target for _, _, target in extended})
        which = f" (study {index} of {len(found)})" if len(found) > 1 else ""
        blocks += [
            Heading(3, f"Preset `{preset}`: context extension{which}"),
            Paragraph(
                "A RoPE model trained at L, extended to each target length by each scaling (factor = target / L), "
                "evaluated as it is (zero-shot) and after a short fine-tune at the target length; the other "
                "encodings trained from scratch at L and evaluated at the same lengths."
            ),
            _settings(study),
        ]
        blocks += [target_table(study, target) for target in targets]
    return blocks


def extension_curves(rows: list[Run], mode: str, bins: int = 48) -> tuple[dict, int, int]:
    """({label: (positions, mean, low, high)}, L, target) at the longest target, for ``mode``."""
    extended, scratch, length = _groups(rows)
    if not extended:
        return {}, length, 0
    target = max(t for _, _, t in extended)
    runs_by_label = {f"RoPE, {s}": runs for (s, m, t), runs in extended.items() if m == mode and t == target}
    if mode == ZERO_SHOT:
        base = next(row.config["encoding"] for runs in extended.values() for row in runs)
        runs_by_label |= {f"{e} (from scratch)": runs for e, runs in scratch.items() if e != base}
    curves = {}
    for label, runs in runs_by_label.items():
        key = str(target)
        per_seed = [
            row.metrics["eval"][key]["curve"]
            for row in runs
            if row.metrics["eval"].get(key, {}).get("status") == "ok"
        ]
        if per_seed:
            curves[label] = binned_curve(per_seed, target, bins)
    return curves, length, target


def extension_figure(rows: list[Run], mode: str) -> Figure | None:
    """Bits per byte against position at the longest target, one line per scaling (and, zero-shot, per
    encoding from scratch), of the study with the most runs; None without such runs."""
    from posenc.plots.lab import bits_per_position

    found = studies(rows)
    curves, length, target = extension_curves(max(found, key=len) if found else [], mode)
    if not curves:
        return None
    return bits_per_position(
        curves,
        train_length=length,
        title=f"RoPE trained at L={length}, extended to {target}: {mode} (mean and 95% interval over seeds)",
    )
