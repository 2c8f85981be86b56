"""``posenc lab``: run the length-generalisation sweep and report its comparison table.

``configure(parser)`` adds the subcommands to a ``posenc lab`` parser and ``main(args)`` runs the
chosen one; ``python -m posenc.lab`` (and ``torchrun … -m posenc.lab``) uses both.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path

from posenc._exits import failure, stdout_closed
from posenc._extras import require
from posenc._paths import writable_folder
from posenc.lab.records import DEFAULT_DB


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _at_least_one(text: str) -> int:
    """An integer ≥ 1 (steps, lengths, intervals, threads): 0 or less would record untrained runs or
    divide by zero."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _at_least_zero(text: str) -> int:
    """An integer ≥ 0 (warm-up steps)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def _positive(text: str) -> float:
    """A positive finite number (a learning rate)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _ints(text: str) -> list[int]:
    values = [_integer(part.strip()) for part in text.split(",") if part.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def _lengths(text: str) -> list[int]:
    values = _ints(text)
    for value in values:
        if value < 1:
            raise argparse.ArgumentTypeError(f"lengths must be at least 1, got {value}")
    return values


def _names(text: str) -> str:
    """Comma-separated names, at least one (``--task``, ``--encodings``), returned as given: an empty
    value (``--encodings "$UNSET"``) would otherwise read as the preset's default or as no run at all."""
    if not any(part.strip() for part in text.split(",")):
        raise argparse.ArgumentTypeError(f"expected at least one name, got {text!r}")
    return text


def _seeds(text: str) -> list[int]:
    from posenc.lab.presets import check_seeds

    try:
        return check_seeds(_ints(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the lab's subcommands (``run``, ``report``, ``presets``, ``compare``) to ``parser``."""
    commands = parser.add_subparsers(dest="lab_command", required=True, metavar="LAB_COMMAND")
    _configure_run(commands)
    _configure_report(commands)
    commands.add_parser("presets", help="the presets and what they run")
    _configure_compare(commands)
    parser.set_defaults(handler=main)


def _configure_run(commands) -> None:
    from posenc.lab.distributed import MODES
    from posenc.lab.presets import PRESETS

    run = commands.add_parser(
        "run",
        help="train and evaluate every (task, encoding, seed) of a preset; finished runs are skipped",
        description="Train and evaluate every (task, encoding, seed) of a preset and record them. "
        "Runs already recorded are skipped; a run with a checkpoint resumes from it. Under "
        "`torchrun --nproc_per_node=N -m posenc.lab run …` the runs are spread over the ranks "
        "(--parallel spread) or each run is trained with DistributedDataParallel (--parallel ddp).",
    )
    run.add_argument("--preset", default="smoke", help=f"one of {', '.join(PRESETS)} (default smoke)")
    run.add_argument(
        "--task",
        "--tasks",
        dest="tasks",
        type=_names,
        default=None,
        help="comma-separated tasks (default all)",
    )
    run.add_argument(
        "--encodings",
        type=_names,
        default=None,
        help="comma-separated encodings (default the preset's for each task: every registered one unless the preset names them)",
    )
    run.add_argument(
        "--seeds", type=_seeds, default=None, help="comma-separated seeds (default the preset's)"
    )
    run.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"sqlite records (default {DEFAULT_DB})")
    run.add_argument(
        "--workdir",
        "--checkpoint-dir",
        dest="workdir",
        type=Path,
        default=None,
        help="checkpoint directory (default: 'checkpoints' next to the database)",
    )
    run.add_argument("--steps", type=_at_least_one, default=None, help="override the preset's training steps")
    run.add_argument("--lr", type=_positive, default=None, help="override the preset's peak learning rate")
    run.add_argument(
        "--warmup", type=_at_least_zero, default=None, help="override the preset's linear warm-up steps"
    )
    run.add_argument(
        "--train-length", type=_at_least_one, default=None, help="override the training length L"
    )
    run.add_argument(
        "--eval-lengths", type=_lengths, default=None, help="comma-separated evaluation lengths (each ≥ L)"
    )
    run.add_argument(
        "--sliding-stride",
        type=_at_least_one,
        default=None,
        help="lm: also evaluate sliding windows with this stride",
    )
    run.add_argument(
        "--checkpoint-every", type=_at_least_one, default=None, help="override steps between checkpoints"
    )
    run.add_argument(
        "--random-positions",
        type=_at_least_one,
        default=None,
        metavar="R",
        help="randomized positions (Ruoss et al., 2023): train and evaluate each sequence at sorted positions drawn from 0 … R − 1 for its own length",
    )
    run.add_argument(
        "--embedding-scale",
        type=_embedding_scale,
        default=None,
        metavar="S",
        help="multiply token embeddings by S (a positive number, or 'sqrt' for √d_model as in Vaswani et al.)",
    )
    run.add_argument(
        "--coordinate-augmentation",
        type=_coordinate_augmentation,
        default=None,
        metavar="PARTS",
        help="DINOv3's augmentation of a grid's coordinates in training, e.g. rescale=2 or "
        "shift=0.1,jitter=1.1,rescale=2: shift uniform in [-S, S] per axis, jitter and rescale "
        "log-uniform in [1/J, J] per axis and [1/R, R] for all, one draw per step from the run's seed",
    )
    run.add_argument("--parallel", choices=MODES, default="spread", help="under torchrun: spread runs or ddp")
    run.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    run.add_argument(
        "--threads",
        type=_at_least_one,
        default=None,
        help="torch threads per process (default the preset's: 1 for smoke, cores/ranks otherwise)",
    )
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="rich bars (default on a terminal)",
    )


def _configure_report(commands) -> None:
    report = commands.add_parser("report", help="the measured comparison table next to seed 004's claims")
    report.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"sqlite records (default {DEFAULT_DB})")
    report.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for lab.md and lab_bits_per_position.png (default: 'report' next to the database)",
    )
    report.add_argument(
        "--preset", default=None, help="only this preset's runs (default every preset recorded)"
    )


def _configure_compare(commands) -> None:
    compare = commands.add_parser(
        "compare",
        help="a re-run against the records, by the 95%% interval of the difference over seeds (exit 1 outside)",
    )
    compare.add_argument("--db", type=Path, required=True, help="the re-run's sqlite records")
    compare.add_argument("--reference", type=Path, required=True, help="the records it re-runs")
    compare.add_argument("--preset", default=None, help="only this preset's runs (default every preset)")


def _embedding_scale(text: str) -> float | str:
    """'sqrt' (√d_model of each task's model) or a positive finite number."""
    if text == "sqrt":
        return text
    try:
        return _positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a positive number or 'sqrt', got {text!r}") from None


#: The parts of DINOv3's coordinate augmentation, in the order a run's config records them.
AUGMENTATION_PARTS = ("shift", "jitter", "rescale")


def _coordinate_augmentation(text: str) -> tuple[float | None, float | None, float | None]:
    """``shift=S,jitter=J,rescale=R`` (any of them) -> (shift, jitter, rescale), None for a part not given."""
    values = dict.fromkeys(AUGMENTATION_PARTS)
    for item in text.split(","):
        name, equals, number = item.partition("=")
        if name.strip() not in values or not equals:
            raise argparse.ArgumentTypeError(
                f"must be parts name=number with names {', '.join(AUGMENTATION_PARTS)}, got {item!r}"
            )
        try:
            values[name.strip()] = float(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name.strip()} must be a number, got {number!r}") from None
    return tuple(values[part] for part in AUGMENTATION_PARTS)


def _threads(requested: int | None, preset: int | None = None) -> int:
    """Torch threads per process: ``requested`` (--threads), else the preset's, else cores / processes."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"threads must be positive, got {requested}")
        return requested
    if preset is not None:
        return preset
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    return max(1, (os.cpu_count() or 1) // max(1, local))


def _run(args: argparse.Namespace) -> int:
    import torch

    from posenc.lab import distributed
    from posenc.lab.presets import Overrides
    from posenc.lab.records import Records
    from posenc.lab.sweep import plan, run_sweep

    sweep = plan(
        args.preset,
        tasks=args.tasks,
        encodings=args.encodings,
        seeds=args.seeds,
        overrides=Overrides(
            steps=args.steps,
            lr=args.lr,
            warmup=args.warmup,
            train_length=args.train_length,
            eval_lengths=None if args.eval_lengths is None else tuple(args.eval_lengths),
            sliding_stride=args.sliding_stride,
            checkpoint_every=args.checkpoint_every,
            random_positions=args.random_positions,
            embedding_scale=args.embedding_scale,
            coordinate_augmentation=args.coordinate_augmentation,
        ),
    )
    torch.set_num_threads(_threads(args.threads, sweep.preset.threads))
    if args.workdir is not None:  # before the database is made: a refused run leaves no database behind
        writable_folder(args.workdir, "--workdir")
    Records(args.db).close()  # an unwritable or incompatible database stops here, before training
    workdir = args.workdir
    if workdir is None:  # after the database, whose refusal says more when its folder is the problem
        workdir = writable_folder(args.db.parent / "checkpoints", "the default --workdir")
    context = distributed.start(args.parallel, args.device)
    if context.is_main:
        for notice in sweep.notices:  # named encodings skipped on some tasks: said before training
            print(f"posenc lab run: {notice}", file=sys.stderr, flush=True)
    try:
        counts = run_sweep(sweep, db=args.db, workdir=workdir, context=context, progress=args.progress)
    finally:
        distributed.stop(context)
    elsewhere = counts["claimed_elsewhere"]
    if context.is_main:
        print(
            f"lab run --preset {args.preset}: {counts['run']} run(s) trained, "
            f"{counts['already_recorded']} already recorded, "
            + (f"{elsewhere} skipped (being trained by another process), " if elsewhere else "")
            + f"{counts['planned']} planned; records in {args.db}"
        )
    return 0


def _report(args: argparse.Namespace) -> int:
    """The database, the preset and --out are checked before anything is drawn. A database that is
    missing or holds no records is refused like any bad value (2): 1 is ``posenc verify``'s failing
    claim, and an empty table is not one."""
    from posenc.lab.presets import check_preset
    from posenc.lab.records import Records
    from posenc.lab.report import print_markdown, write_report

    with Records(args.db, readonly=True) as records:  # missing, a folder, not a lab database: refused
        rows = records.report_rows()  # every row decoded and checked: a damaged one is refused here
    if args.preset is not None and args.preset not in {row["preset"] for row in rows}:
        check_preset(args.preset)  # an unknown name is refused with the valid ones listed
    finished = [row for row in rows if row["status"] == "done" and args.preset in (None, row["preset"])]
    if not finished:
        of = "" if args.preset is None else f" of preset {args.preset!r}"
        raise ValueError(f"no lab records{of} in {args.db}")
    if args.out is not None:
        out = writable_folder(args.out, "--out")
    else:
        out = writable_folder(args.db.parent / "report", "the default --out")
    markdown = write_report(args.db, out, preset=args.preset)
    if markdown is None:  # the records changed since they were counted
        raise ValueError(f"no lab records in {args.db}")
    print_markdown(markdown)  # rendered on a terminal, the Markdown itself into a file or pipe
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)  # the figures the report links
    print(f"written: {', '.join(str(out / name) for name in ['lab.md', *images])}", file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace) -> int:
    """Every metric of the configurations and seeds both databases hold: 0 when each re-run mean is
    within the 95% interval of the difference over seeds, 1 when one is not (each named), 2 on bad input."""
    from posenc.lab.report.loading import load
    from posenc.lab.reproduce import compare, compare_lines

    runs = {}
    for option, path in (("--reference", args.reference), ("--db", args.db)):
        if not path.is_file():
            raise ValueError(f"{option} {str(path)!r} is not a lab database")
        runs[option] = [run for preset in load(path, args.preset).presets.values() for run in preset]
    lines, consistent = compare_lines(compare(runs["--reference"], runs["--db"]))
    print("\n".join(lines))
    return 0 if consistent else 1


def _presets(args: argparse.Namespace) -> int:
    """Each preset, and per task its setup and the encodings that task runs by default (those the preset
    names, else every registered one that applies to it); a task run only when named says so."""
    import posenc
    from posenc.lab.presets import PRESETS, not_applicable

    runs = {}  # task -> the encodings a preset without its own list runs on it
    for preset in PRESETS.values():
        print(f"{preset.name}: {preset.description}")
        study = preset.extension
        if study is None:
            print(f"  seeds {list(preset.seeds)}")
        else:
            print(
                f"  seeds {list(preset.seeds)}; {study.base} extended by {', '.join(study.scalings)} to "
                f"{', '.join(f'{f}L' for f in study.factors)}; position remaps {', '.join(study.remaps) or 'none'}; "
                f"from scratch {', '.join(study.from_scratch)}"
            )
        for task, setup in preset.tasks.items():
            model, train = setup.model, setup.train
            encodings = setup.encodings
            if encodings is None:
                if task not in runs:
                    runs[task] = [e for e in posenc.available() if e not in not_applicable(task)]
                encodings = runs[task]
            named = "" if task in preset.sweep_tasks else " (run when named with --task)"
            print(
                f"  {task}{named}: L={setup.train_length}, eval at {list(setup.eval_lengths(setup.train_length))}, "
                f"d_model={model.d_model}, layers={model.n_layers}, heads={model.n_heads}, "
                f"steps={train.steps}, batch={train.batch_size}, lr={train.lr}, warm-up={train.warmup}"
                + ("" if study is not None else f"; encodings {', '.join(encodings)}")
            )
    return 0


def _interrupted(args: argparse.Namespace) -> str:
    if args.lab_command == "run":
        return (
            f"posenc lab run: interrupted; finished runs are recorded in {args.db}; re-run the same "
            "command to resume (a run in progress continues from its last checkpoint)"
        )
    return f"posenc lab {args.lab_command}: interrupted"


#: Lab command -> the modules it needs beyond torch: run's progress display; report's figures and its
#: rendering on a terminal.
NEEDS = {"run": ("rich",), "report": ("matplotlib", "rich")}


def main(args: argparse.Namespace) -> int:
    """Run the chosen lab subcommand; 0 on success, 2 on bad input (the message names it) and on sizes
    that do not fit in memory, 130 when interrupted (Ctrl-C: one line on stderr, no traceback), 141
    when stdout's reader has gone (as :func:`posenc.cli.main`, for ``python -m posenc.lab``)."""
    handlers = {"run": _run, "report": _report, "presets": _presets, "compare": _compare}
    where = f"posenc lab {args.lab_command}"
    try:
        for module in NEEDS.get(args.lab_command, ()):
            require(module, "lab", "the lab")
        code = handlers[args.lab_command](args)
        sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
        return code
    except KeyboardInterrupt:
        print(_interrupted(args), file=sys.stderr)
        return 130
    except BrokenPipeError:
        return stdout_closed()
    except Exception as error:  # bad input and full memory in one line, a plugin's bug with its traceback
        return failure(where, error)
