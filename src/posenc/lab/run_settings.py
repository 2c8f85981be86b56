"""The settings of one configuration's runs as the lab report shows them: collapsed under a summary.

One line per task (training length, evaluated lengths, model, budget, seeds), one per encoding with the
arguments it was built with (``n_heads=4, symmetric=False``, per task only where they differ), then
the corpus and the versions that ran them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posenc.document import Bullets, Details
from posenc.lab.tasks import task_names

if TYPE_CHECKING:
    from posenc.lab.report.loading import Run

SUMMARY = "Run settings: model, budget, seeds and each encoding's arguments"


def plural(count: int, noun: str) -> str:
    """``1 layer``, ``4 layers``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def arguments(kwargs: dict) -> str:
    """``n_heads=4, symmetric=False`` (by name), or ``no arguments``."""
    return ", ".join(f"{key}={value}" for key, value in sorted(kwargs.items())) or "no arguments"


def _task_line(task: str, done: list[Run]) -> str:
    run = next(run for run in done if run.task == task)
    config, model, train = run.config, run.config["model"], run.config["train"]
    seeds = sorted({run.seed for run in done if run.task == task})
    return (
        f"`{task}`: L={config['train_length']}, evaluated at {', '.join(map(str, config['eval_lengths']))}; "
        f"d_model={model['d_model']}, {plural(model['n_layers'], 'layer')}, {plural(model['n_heads'], 'head')}; "
        f"{train['steps']} steps of batch {train['batch_size']}, peak lr {train['lr']} after "
        f"{train['warmup']} warm-up steps; seeds {seeds}"
    )


def _encoding_line(name: str, by_task: dict[str, dict]) -> str:
    """``alibi``'s arguments, once when every task built it alike, else per group of tasks."""
    groups: dict[str, list[str]] = {}
    for task, kwargs in by_task.items():
        groups.setdefault(arguments(kwargs), []).append(task)
    if len(groups) == 1:
        return f"`{name}`: {next(iter(groups))}"
    per_group = (f"{shown} on {', '.join(f'`{t}`' for t in tasks)}" for shown, tasks in groups.items())
    return f"`{name}`: " + "; ".join(per_group)


def settings(runs: list[Run]) -> Details:
    """The settings of ``runs`` (one configuration's), collapsed under :data:`SUMMARY`."""
    done = [run for run in runs if run.done]
    recorded = {run.task for run in done}
    order = task_names()  # the registered tasks in their order, then any other by name
    tasks = [task for task in order if task in recorded] + sorted(recorded - set(order))
    lines = [_task_line(task, done) for task in tasks]
    encodings: dict[str, dict[str, dict]] = {}
    for task in tasks:
        for run in done:
            if run.task == task:
                encodings.setdefault(run.encoding, {})[task] = run.config["encoding_kwargs"]
    lines += [_encoding_line(name, by_task) for name, by_task in sorted(encodings.items())]
    corpus = next((run.corpus for run in done if run.corpus), None)
    if corpus:
        lines.append(
            f"corpus: {corpus['files']:,} stdlib files, {corpus['bytes']:,} bytes, sha256 {corpus['sha256'][:16]}…, "
            f"validation {corpus['validation_files']:,} files / {corpus['validation_bytes']:,} bytes"
        )
    versions = next((run.versions for run in done), None)
    if versions:
        lines.append(
            f"python {versions['python']}, torch {versions['torch']}, posenc {versions['posenc']}, {versions['device']}"
        )
    return Details(SUMMARY, (Bullets(tuple(lines)),))
