"""A sweep: every (task, encoding, seed) of a preset, planned, checked, then run and recorded.

Everything that can be wrong with the request is found before any training: unknown names, numbers
out of range and evaluation lengths shorter than training or longer than the corpus supplies while
planning (before the database is even created), then an unwritable or incompatible database.
Runs already in the records are skipped; a run with a checkpoint in the work directory resumes
from it; a finished run's checkpoint is deleted once its record is committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch

import posenc
from posenc.lab.distributed import Context
from posenc.lab.evaluate import evaluate
from posenc.lab.presets import (
    NO_OVERRIDES,
    Overrides,
    Preset,
    RunConfig,
    check_encodings,
    check_preset,
    check_seeds,
    not_applicable,
    run_config,
    skip_reason,
    task_setup,
)
from posenc.lab.progress import SweepProgress
from posenc.lab.properties import (
    count_fixed,
    count_parameters,
    distinct_encodings,
    model_relative_position,
    parameters_at,
)
from posenc.lab.records import RECORDED, Records
from posenc.lab.tasks import check_task, make_task, make_task_shape, task_names
from posenc.lab.train import load_checkpoint, save_checkpoint, set_backend, train


@dataclass
class Plan:
    """The runs of a sweep, with what is skipped and why."""

    preset: Preset  # the preset
    runs: list[RunConfig]  # runs to train (this rank's share is chosen later)
    not_applicable: dict[tuple[str, str], str] = field(default_factory=dict)  # (task, encoding) -> reason
    corpus: dict | None = None  # the corpus fingerprint, when a task that reads one is in the sweep
    bases: dict[str, RunConfig] = field(default_factory=dict)  # config hash -> a run others start from
    notices: list[str] = field(default_factory=list)  # named (task, encoding) pairs skipped, and why


def _names(value: str | list[str] | None, default: list[str], option: str) -> list[str]:
    """The names in ``value`` (comma-separated, or a list), or ``default`` when it is None.

    A value that names nothing ('' or ',', as ``--encodings "$UNSET"`` gives) is refused: read as
    the default it would train every encoding, read as nothing it would plan no run and succeed.
    So is a name given twice (``rope,rope``).
    """
    if value is None:
        return list(default)
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else list(value)
    names = [name for name in names if name]
    kind = option.removeprefix("--").removesuffix("s")
    if not names:
        raise ValueError(f"{option} must name at least one {kind}, got {value!r}")
    repeated = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if repeated is not None:  # planned twice, trained once: the count would not be what was asked for
        raise ValueError(f"{option} names {kind} {repeated!r} twice")
    return names


def plan(
    preset: str,
    *,
    tasks: str | list[str] | None = None,
    encodings: str | list[str] | None = None,
    seeds: list[int] | None = None,
    overrides: Overrides = NO_OVERRIDES,
) -> Plan:
    """The sweep's run configs; every bad name, number or length raises a ValueError here, before training."""
    chosen = check_preset(preset)
    if chosen.extension is not None:
        return _extension_plan(chosen, tasks, encodings, seeds, overrides)
    task_names = [check_task(t) for t in _names(tasks, list(chosen.sweep_tasks), "--task")]
    for task in task_names:
        task_setup(chosen, task)
    chosen_encodings = None if encodings is None else check_encodings(_names(encodings, [], "--encodings"))
    notices = [] if chosen_encodings is None else _named_not_applicable(chosen_encodings, task_names)
    seeds = check_seeds(list(chosen.seeds if seeds is None else seeds))
    fingerprints = {task: make_task(task).fingerprint() for task in task_names}  # a corpus is read here
    setups = chosen.tasks
    runs = []
    skipped = {}
    for task in task_names:
        reasons = not_applicable(task)
        corpus_sha256 = None if fingerprints[task] is None else fingerprints[task]["sha256"]
        for encoding in chosen_encodings or setups[task].encodings or posenc.available():
            if encoding in reasons:
                skipped[task, encoding] = reasons[encoding]
                continue
            for seed in seeds:
                runs.append(
                    run_config(chosen, task, encoding, seed, corpus_sha256=corpus_sha256, overrides=overrides)
                )
    for config in runs:
        make_task(config.task).check(config)  # lengths the data cannot supply: refused before training
    corpus = next((fingerprint for fingerprint in fingerprints.values() if fingerprint), None)
    return Plan(chosen, runs, skipped, corpus, notices=notices)


def _named_not_applicable(encodings: list[str], tasks: list[str]) -> list[str]:
    """Check that each named encoding applies to the sweep's tasks, as the encoding declares it.

    One that applies to none of them is refused (a ValueError naming it, the task and why): a typo or a
    mismatch would otherwise plan nothing and succeed. One that applies to some of several tasks gives
    a line saying on which it is skipped and why, for the command to print before training.
    """
    notices = []
    for encoding in encodings:
        reasons = {task: skip_reason(encoding, task) for task in tasks}
        missing = [task for task, reason in reasons.items() if reason is not None]
        if not missing:
            continue
        why = "; ".join(dict.fromkeys(reasons[task] for task in missing))  # each reason once
        names = ", ".join(missing)
        if len(missing) == len(tasks):
            raise ValueError(
                f"encoding {encoding!r} does not apply to task{'s' * (len(tasks) > 1)} {names}: {why}"
            )
        notices.append(
            f"skipping encoding {encoding!r} on task{'s' * (len(missing) > 1)} {names}, where it does "
            f"not apply: {why}"
        )
    return notices


#: The overrides the context-extension study takes: it plans its runs' models and windows itself.
_EXTENSION_OVERRIDES = ("steps", "train_length", "checkpoint_every")


def _extension_plan(preset: Preset, tasks, encodings, seeds, overrides: Overrides) -> Plan:
    """The context-extension study's plan (:mod:`posenc.lab.extension`): its lengths are its own."""
    from posenc.lab.extension import plan_runs

    # refused rather than dropped without a word, which would train the study without them
    given = [name for name in overrides.given() if name not in (*_EXTENSION_OVERRIDES, "eval_lengths")]
    if given:
        options = ", ".join(f"--{name.replace('_', '-')}" for name in given)
        raise ValueError(f"the {preset.name} preset does not take {options}: it sets its runs itself")
    study = preset.extension.task
    if _names(tasks, [study], "--task") != [study]:
        raise ValueError(f"the {preset.name} preset studies task {study} only; --task must be {study}")
    if overrides.eval_lengths is not None:
        raise ValueError(f"the {preset.name} preset sets its own evaluation lengths (its factors × L)")
    if encodings is not None:
        encodings = check_encodings(_names(encodings, [], "--encodings"))
        _named_not_applicable(encodings, [study])
    seeds = check_seeds(list(preset.seeds if seeds is None else seeds))
    task = make_task(study)
    corpus = task.fingerprint()
    sha256 = None if corpus is None else corpus["sha256"]
    runs, bases = plan_runs(preset, seeds, sha256, encodings=encodings, overrides=overrides)
    for config in runs:
        task.check(config)
    return Plan(preset, runs, {}, corpus, bases)


def versions(context: Context) -> dict:
    """Software and machine the run was measured on: what decides whether a re-run can be bit-identical
    (:mod:`posenc.lab.reproduce`): the processor, torch's build and the threads."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "posenc": posenc.__version__,
        "device": str(context.device),
        "threads": torch.get_num_threads(),
        "world_size": context.world_size,
        "mode": context.mode,
        "platform": platform.platform(),
        **machine(),
    }


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``'s, else ``platform.processor()``; "unknown")."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    """The processor and torch build a run's CPU kernels depend on: the CPU model, the instruction set
    torch dispatches to (AVX2, AVX512 …), torch's git revision, the versions of its parallel libraries
    (``torch.__config__.parallel_info()``), the cores and the thread settings."""
    info = [line.strip() for line in torch.__config__.parallel_info().splitlines()]
    libraries = [line for line in info if any(name in line for name in _LIBRARIES)]
    return {
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "torch_libraries": libraries,
        "interop_threads": torch.get_num_interop_threads(),
        "thread_environment": {name: os.environ.get(name) for name in _THREAD_VARIABLES},
    }


#: The parallel libraries named in ``torch.__config__.parallel_info()`` (their versions recorded).
_LIBRARIES = ("OpenMP", "Math Kernel Library", "MKL-DNN", "oneDNN", "OpenBLAS", "TBB")
#: Environment variables that set the threads of torch's libraries.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _properties(config: RunConfig, model) -> dict:
    """Parameters counted from the trained encoding (and at 2L by its formula, the instance's other
    settings kept), and the relative-position shift test; over every distinct encoding of the layers
    (a stack's), summed or the layer furthest from relative (:mod:`posenc.lab.properties`)."""
    encodings = distinct_encodings(model)
    length = make_task_shape(config.task, 2 * config.train_length)
    limits = [encoding.position_space.limit for encoding in encodings if encoding.position_space.limit is not None]
    return {
        "positional_parameters": sum(count_parameters(encoding) for encoding in encodings),
        "positional_parameters_at_2L": sum(
            parameters_at(encoding, length, config.model.d_model) for encoding in encodings
        ),
        "fixed_constants": sum(count_fixed(encoding) for encoding in encodings),
        "model_parameters": sum(p.numel() for p in model.parameters()),
        "relative_position": model_relative_position(encodings, min(limits) if limits else None),
    }


def weights_path(workdir: Path, config_hash: str) -> Path:
    """Where a finished run's weights are kept for the runs that start from them."""
    return workdir / f"{config_hash}.weights.pt"


def _keep_weights(path: Path, config: RunConfig, model) -> dict:
    state = {"config_hash": config.config_hash, "model": model.state_dict()}
    save_checkpoint(path, state)
    return state


def base_weights(base: RunConfig, context: Context, workdir: Path, progress: SweepProgress) -> dict:
    """The trained weights of ``base``: kept in the work directory when it ran, or, when they are gone
    (or another rank is still training it), trained again here: the same steps on the same batches
    give the same weights, resuming from its checkpoint where one exists."""
    path = weights_path(workdir, base.config_hash)
    state = load_checkpoint(path, base.config_hash)
    if state is None:
        progress.start_run(f"{base.label} (weights for the runs that start from it)", base.train.steps)
        outcome = train(
            base, make_task(base.task), context, workdir / f"{base.config_hash}.pt", progress.advance
        )
        state = {"config_hash": base.config_hash, "model": outcome.model.state_dict()}
        if context.records:
            save_checkpoint(path, state)
    return state["model"]


def execute(
    config: RunConfig,
    preset: str,
    records: Records,
    context: Context,
    workdir: Path,
    progress: SweepProgress,
    *,
    initial: dict | None = None,
    keep_weights: bool = False,
) -> dict | None:
    """Train, evaluate and record one run; its metrics, or None on DDP ranks other than 0.

    ``initial``: the weights a run with ``init_from`` starts from; ``keep_weights``: keep the trained
    weights in the work directory (a run others start from).
    """
    task = make_task(config.task)
    checkpoint = workdir / f"{config.config_hash}.pt"
    progress.start_run(config.label, config.train.steps)
    started = time.perf_counter()
    outcome = train(config, task, context, checkpoint, on_step=progress.advance, initial=initial)
    if keep_weights and context.records:
        _keep_weights(weights_path(workdir, config.config_hash), config, outcome.model)
    metrics = None
    if context.records:
        evaluation_started = time.perf_counter()
        set_backend(outcome.model, config.eval_backend)
        evaluation = evaluate(outcome.model, task, config)
        set_backend(outcome.model, config.train_backend)
        evaluation_seconds = time.perf_counter() - evaluation_started
        metrics = {"eval": evaluation, "train_loss": outcome.losses, **_properties(config, outcome.model)}
        if config.train.curve_every:
            metrics["curve_at_L"] = outcome.curve
        timings = {
            "seconds_per_step": outcome.seconds_per_step,
            "train_seconds": outcome.train_seconds,
            "steps": outcome.steps,
            "eval_seconds": evaluation_seconds,
            "session_seconds": time.perf_counter() - started,
            "resumed_from": outcome.resumed_from,
            "train_backend": config.train_backend,
        }
        records.write(
            config_hash=config.config_hash,
            preset=preset,
            config=config.to_dict(),
            status="done",
            metrics=metrics,
            timings=timings,
            versions=versions(context),
            corpus=task.fingerprint(),
        )
        checkpoint.unlink(missing_ok=True)
        progress.finish_run(config.label, summary(config, metrics, timings))
    context.barrier()
    return metrics


def summary(config: RunConfig, metrics: dict, timings: dict) -> str:
    """One line on a finished run."""
    task = make_task(config.task)
    parts = []
    for length, entry in metrics["eval"].items():
        parts.append(f"{length}: {task.summary(entry) if entry['status'] == 'ok' else 'cannot run'}")
    return ", ".join(parts) + f"; {timings['seconds_per_step'] * 1000:.1f} ms/step"


def record_not_applicable(plan_: Plan, records: Records, tasks: list[str]) -> None:
    """One row per (task, encoding) the lab does not train, with the reason."""
    for (task, encoding), reason in plan_.not_applicable.items():
        if task in tasks:
            config = {"task": task, "encoding": encoding, "seed": -1, "preset": plan_.preset.name}
            config_hash = _hash(config)
            records.write(
                config_hash=config_hash,
                preset=plan_.preset.name,
                config=config,
                status="not applicable",
                metrics={},
                timings={},
                versions={"posenc": posenc.__version__},
                corpus=None,
                reason=reason,
            )


def _hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


#: Answers of :func:`claim` shared between DDP ranks, by code.
_CLAIM_CODES = {None: 0, RECORDED: 1}


def claim(records: Records, config_hash: str, context: Context) -> str | None:
    """Claim a run before training it (:meth:`Records.claim`): None when this process may train it, else
    why not. Under DDP rank 0 claims and every rank follows its answer, so all train the run or none."""
    why = records.claim(config_hash) if context.records else None
    if not context.ddp:
        return why
    code = torch.tensor([_CLAIM_CODES.get(why, 2) if context.is_main else 0], device=context.device)
    code = int(context.all_reduce_sum(code).item())
    if context.is_main:
        return why
    return {0: None, 1: RECORDED}.get(code, "being trained by another process")


def run_sweep(
    plan_: Plan,
    *,
    db: Path,
    workdir: Path,
    context: Context,
    progress: bool | None = None,
    log: TextIO | None = None,
) -> dict:
    """Run the plan's unfinished runs (this rank's share); returns counts of done, skipped and run.
    Each run is claimed in the records first: one another live process is training is skipped.
    ``log``: where a line per finished run goes without progress bars (None: sys.stdout when called)."""
    records = Records(db)  # refuses an unwritable or incompatible database before any training
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        tasks = sorted({config.task for config in plan_.runs}, key=task_names().index)
        if context.is_main:
            record_not_applicable(plan_, records, tasks)
        hashes = [config.config_hash for config in plan_.runs]
        mine = context.runs(plan_.runs)
        pending = [config for config in mine if not records.finished(config.config_hash)]
        counts = {
            "planned": len(plan_.runs),
            "already_recorded": len(mine) - len(pending),
            "run": 0,
            "claimed_elsewhere": 0,
        }
        with SweepProgress(
            total=len(hashes),
            done=lambda: records.count(hashes),
            enabled=progress,
            show=context.is_main,
            log=log,
        ) as bar:
            for config in pending:
                why = claim(records, config.config_hash, context)
                if why == RECORDED:  # recorded meanwhile by another process
                    counts["already_recorded"] += 1
                    continue
                if why is not None:
                    counts["claimed_elsewhere"] += 1
                    if context.records:  # to stderr of the moment, which a live progress display redirects
                        print(f"{config.label}: skipped, {why}", file=sys.stderr, flush=True)
                    continue
                try:
                    initial = None
                    if config.init_from is not None:
                        initial = base_weights(plan_.bases[config.init_from], context, workdir, bar)
                    execute(
                        config,
                        plan_.preset.name,
                        records,
                        context,
                        workdir,
                        bar,
                        initial=initial,
                        keep_weights=config.config_hash in plan_.bases,
                    )
                finally:  # stopped before its record (an interrupt, an error): let another process take it
                    if context.records:
                        records.release(config.config_hash)
                counts["run"] += 1
        return counts
    finally:
        records.close()
