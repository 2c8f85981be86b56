"""`posenc bench lab`: one training step of a lab preset's model per encoding, against NoPE's.

Each row is the model a lab run builds (:func:`posenc.lab.train.build_model`, from the preset's
:func:`posenc.lab.presets.run_config` for seed 0: the same sizes and initialisation) and the step
:func:`posenc.lab.train.train` takes: forward on one batch of the task (the same batch for every row),
cross-entropy over the scored positions, backward, gradient clipping, AdamW. The default is the cpu
preset's language model (d_model 64, 2 layers, 4 heads, 32 windows of 64 bytes), so the ratios are
those that set the lab's wall time: a preset of several encodings waits for its slowest. Steps are timed
in alternating rounds in one process (:func:`posenc.bench.harness.time_alternating`), each as a ratio to
NoPE's step; an encoding the lab does not train on the task is listed with the lab's reason.

Run as a file (``python src/posenc/bench/lab_step.py``) it reads only the lab's public pieces, so the same
file times an older checkout put first on ``PYTHONPATH``.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence

import torch
import torch.nn.functional as F

BASELINE = "nope"


def _step(encoding: str, preset: str, task_name: str, batch, *, with_model: bool = False):
    """One optimiser step of ``encoding``'s lab model on ``batch``, as :func:`posenc.lab.train.train` takes
    it; with ``with_model``, (the step, the model)."""
    from posenc.lab.presets import PRESETS, run_config
    from posenc.lab.tasks import make_task
    from posenc.lab.train import _optimiser, build_model

    task = make_task(task_name)
    config = run_config(PRESETS[preset], task_name, encoding, 0)
    model = build_model(config, task)
    model.train()
    optimiser = _optimiser(model, config)
    positions = task.positions(model.encoding, batch.inputs.shape[-1])  # None: 0 … s − 1
    if getattr(batch, "positions", None) is not None:  # the task's own per-example positions (a batch of an
        positions = batch.positions  # older checkout carries none)
    total = batch.mask.sum()

    def step() -> None:
        logits = model(batch.inputs, positions)  # [b, s, vocab]
        wide = torch.promote_types(logits.dtype, torch.float32)  # half types up, float64 kept, as train does
        nll = F.cross_entropy(logits.flatten(0, 1).to(wide), batch.targets.flatten(), reduction="none")
        ((nll * batch.mask.flatten()).sum() / total).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.train.grad_clip)
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)

    return (step, model) if with_model else step


def run(
    encodings: Sequence[str] | None = None, *, preset: str = "cpu", task: str = "lm", rounds: int = 15
) -> dict:
    """Median, min and max ms of each encoding's step and its ratio to NoPE's; the encodings the lab does
    not train on ``task`` with the lab's reason."""
    from posenc.bench.harness import time_alternating
    from posenc.encodings import available
    from posenc.lab.presets import check_encodings, check_preset, run_config, skip_reason, task_setup
    from posenc.lab.tasks import make_task

    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    task_setup(check_preset(preset), task)  # an unknown preset or task: refused with the valid ones
    names = list(available()) if encodings is None else check_encodings(list(encodings))
    skipped = {name: reason for name in names if (reason := skip_reason(name, task)) is not None}
    timed = [BASELINE] + [name for name in names if name not in skipped and name != BASELINE]
    config = run_config(check_preset(preset), task, BASELINE, 0)  # the batch every row trains on
    batch = make_task(task).train_batch(
        config.train.batch_size, config.batch_length, torch.Generator().manual_seed(0)
    )
    steps = {name: _step(name, preset, task, batch) for name in timed}
    timings = time_alternating(steps, rounds=rounds)  # glibc's allocator as the lab runs with it
    base = timings[BASELINE].median_ms
    return {
        "rows": [
            {
                "encoding": name,
                "median_ms": timing.median_ms,
                "min_ms": timing.min_ms,
                "max_ms": timing.max_ms,
                "ratio": timing.median_ms / base,
            }
            for name, timing in timings.items()
        ],
        "skipped": skipped,
        "preset": preset,
        "task": task,
        "batch": list(batch.inputs.shape),
        "rounds": rounds,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }


def _main() -> None:
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encodings", default=None, help="comma-separated (default every registered one)")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--task", default="lm")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    names = None if args.encodings is None else args.encodings.split(",")
    print(json.dumps(run(names, preset=args.preset, task=args.task, rounds=args.rounds), indent=1))


if __name__ == "__main__":
    _main()
