"""When each run first learns its task at L: the exact match at L evaluated during training
(``TrainConfig.curve_every``, recorded as ``curve_at_L``), read as the first step at which it reaches
:data:`~posenc.lab.exact_match.LEARNED_AT_L`."""

from __future__ import annotations

from posenc.lab.exact_match import CURVE_EXAMPLES, LEARNED_AT_L
from posenc.lab.report.loading import Configuration, Run
from posenc.table import Table


def first_learned(run: Run, threshold: float = LEARNED_AT_L) -> int | None:
    """The first step whose exact match at L reaches ``threshold``; None when none does."""
    return next((int(step) for step, value in run.metrics.get("curve_at_L", []) if value >= threshold), None)


def learning_table(configuration: Configuration) -> Table | None:
    """Per task and encoding with a curve: the model, and per seed the first step that learns the task at
    L (or "not in N steps"); None when no run recorded a curve."""
    body = []
    for task in configuration.tasks():
        for name, runs in configuration.by_encoding(task).items():
            curved = [run for run in runs if run.metrics.get("curve_at_L")]
            if not curved:
                continue
            model, steps = curved[0].model, curved[0].config["train"]["steps"]
            firsts = [first_learned(run) for run in sorted(curved, key=lambda run: run.seed)]
            cells = ", ".join(str(first) if first is not None else f"not in {steps}" for first in firsts)
            finals = ", ".join(
                f"{run.metrics['curve_at_L'][-1][1]:.2f}" for run in sorted(curved, key=lambda r: r.seed)
            )
            body.append(
                [
                    task,
                    name,
                    f"d_model {model['d_model']}, {model['n_layers']} layer{'s' * (model['n_layers'] > 1)}, "
                    f"{model['n_heads']} heads",
                    cells,
                    finals,
                ]
            )
    if not body:
        return None
    first = configuration.runs[0].config
    every, examples = first["train"].get("curve_every"), min(CURVE_EXAMPLES, first["eval_size"])
    return Table(
        [
            "Task",
            "Encoding",
            "Model",
            f"first step with exact match at L ≥ {LEARNED_AT_L} (per seed)",
            "at the end",
        ],
        body,
        title=f"When each run learns its task at L: exact match at L every {every} steps ({examples} test examples).",
    )
