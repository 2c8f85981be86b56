"""The ``posenc`` command: list the encodings, verify their claims, draw them, report, run the lab, bench."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64}
#: Agreement with the closed form that `verify` requires, per table dtype.
TOLERANCES = {"float32": 1e-5, "float64": 1e-12}


def _distances(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"distances must be comma-separated integers, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"distances must name at least one distance, got {text!r}")
    return values


def _lengths(text: str) -> tuple[int, ...]:
    if text.strip().lower() in ("", "none"):
        return ()
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"lengths must be comma-separated integers or 'none', got {text!r}"
        ) from None
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"lengths must be positive, got {text!r}")
    return values


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="posenc", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    listing = commands.add_parser("list", help="registered encodings, their kind and parameter count")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")

    verify = commands.add_parser(
        "verify",
        help="check that sinusoidal code dot products depend only on distance (seed 002)",
        description="Reproduce seed 002: for each distance d, PE[i]·PE[i+d] for every start i, "
        "against the closed form Σ_k cos(d·ω_k). Exits 1 when the deviation exceeds the tolerance.",
    )
    verify.add_argument("--d-model", type=int, default=8, help="code width (default 8)")
    verify.add_argument("--seq-len", type=int, default=15, help="number of positions (default 15)")
    verify.add_argument(
        "--distances",
        type=_distances,
        default=None,
        help="comma-separated distances (default: odd 1 … seq_len−1)",
    )
    verify.add_argument("--base", type=float, default=10000.0, help="wavelength base (default 10000)")
    verify.add_argument(
        "--dtype", choices=sorted(DTYPES), default="float64", help="table dtype (default float64)"
    )
    verify.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="largest accepted deviation (default 1e-12 for float64, 1e-5 for float32)",
    )
    verify.add_argument(
        "--pairs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="print every pair's value, as seed 002 does (default on)",
    )
    verify.add_argument("--json", action="store_true", help="print JSON instead of text")
    verify.add_argument("--out", type=Path, default=None, help="write the flat-line plot to this PNG")
    verify.add_argument(
        "--all",
        action="store_true",
        help="measure every property of every registered encoding and print the encoding × property table",
    )
    verify.add_argument(
        "--length",
        type=int,
        default=256,
        help="--all: positions each property is measured over (default 256)",
    )

    plot = commands.add_parser("plot", help="draw the figures of one encoding, or of all, as PNG files")
    plot.add_argument("name", help="an encoding name, 'comparison' (across encodings) or 'all'")
    plot.add_argument("--out", type=Path, default=Path("figures"), help="folder (default ./figures)")
    plot.add_argument("--format", choices=["png", "svg", "pdf"], default="png", help="file format")

    report = commands.add_parser(
        "report", help="every figure, the verification table and the lab table as index.html + report.md"
    )
    report.add_argument("--out", type=Path, default=Path("report"), help="folder (default ./report)")
    report.add_argument(
        "--lab-db",
        type=Path,
        default=Path("lab/records.sqlite"),
        help="lab records to include when present (default lab/records.sqlite)",
    )
    report.add_argument("--no-progress", action="store_true", help="no progress bar")

    lab = commands.add_parser("lab", help="the length-generalisation lab: train, evaluate, report")
    _configure_lab(lab)

    bench = commands.add_parser("bench", help="time posenc against its baselines in one process")
    bench.add_argument("name", choices=["sinusoidal", "rope", "attention"], help="what to benchmark")
    bench.add_argument("--length", type=int, default=4096, help="positions (sinusoidal; default 4096)")
    bench.add_argument("--d-model", type=int, default=512, help="code width (sinusoidal; default 512)")
    bench.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="alternating rounds (default 15 for sinusoidal, 41 for rope, 9 for attention; "
        "with --device cuda 30 for rope, 10 for attention)",
    )
    bench.add_argument(
        "--no-compile",
        action="store_true",
        help="rope: leave out the torch.compile candidates (they compile first); "
        "attention: run flex_attention uncompiled",
    )
    bench.add_argument(
        "--seq-lens",
        type=_lengths,
        default=None,
        help="attention: comma-separated sequence lengths (default 1024,2048,4096; "
        "with --device cuda 1024,2048,…,32768)",
    )
    bench.add_argument(
        "--sweep",
        type=_lengths,
        default=None,
        help="attention: lengths tried for the 16 GiB sweep, or 'none' (default 4096,8192,…,65536)",
    )
    bench.add_argument(
        "--no-memory",
        action="store_true",
        help="attention: skip the per-candidate memory measurement (a subprocess each)",
    )
    bench.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="rope and attention: where to run (default cpu); cuda runs the GPU benchmarks "
        "(Triton RoPE kernel, flex_attention biases) and needs a CUDA GPU",
    )
    bench.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    return parser


def _configure_lab(parser: argparse.ArgumentParser) -> None:
    try:
        from posenc.lab.cli import configure
    except ImportError:  # the lab is optional while it is built; the command says so
        parser.set_defaults(lab_missing=True)
        return
    configure(parser)


def _lab(args: argparse.Namespace) -> int:
    if getattr(args, "lab_missing", False):
        raise ValueError("the lab is not available in this installation")
    from posenc.lab.cli import main as lab_main

    return lab_main(args)


def _list(args: argparse.Namespace) -> int:
    from posenc.encodings import ENCODINGS, available

    rows = []
    for name in available():
        cls = ENCODINGS[name]
        summary = (cls.__doc__ or "").strip().splitlines()[0]
        rows.append({"name": name, "kind": cls.kind, "parameters": cls.parameter_formula, "summary": summary})
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="posenc encodings   (L = max_len, d = d_model, h = n_heads)")
    for column in ("name", "kind", "parameters", "summary"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(escape(str(value)) for value in row.values()))
    Console().print(table)
    return 0


def verify_sinusoidal(
    d_model: int, seq_len: int, distances: list[int] | None, base: float, dtype: str
) -> dict:
    """The seed 002 experiment as a dict of plain numbers (what ``verify --json`` prints)."""
    from posenc.analysis import closed_form_dot, dot_by_distance, translation_invariance
    from posenc.functional import sinusoidal_table

    if distances is None:
        distances = list(range(1, seq_len, 2))
        if not distances:
            raise ValueError(f"seq_len must be at least 2 to have a distance, got {seq_len}")
    table = sinusoidal_table(seq_len, d_model, base=base, dtype=DTYPES[dtype])  # [T, d]
    dots = dot_by_distance(table, distances)
    expected = {d: float(closed_form_dot(d, d_model, base)) for d in dots}
    summaries = translation_invariance(dots, expected)
    return {
        "d_model": d_model,
        "seq_len": seq_len,
        "base": base,
        "dtype": dtype,
        "distances": [
            {**summary.as_dict(), "values": dots[summary.distance].tolist()} for summary in summaries
        ],
        "max_deviation": max(s.max_deviation for s in summaries),
    }


def _verify(args: argparse.Namespace) -> int:
    if args.all:
        return _verify_all(args)
    result = verify_sinusoidal(args.d_model, args.seq_len, args.distances, args.base, args.dtype)
    tolerance = TOLERANCES[args.dtype] if args.tolerance is None else args.tolerance
    result["tolerance"] = tolerance
    result["holds"] = result["max_deviation"] <= tolerance
    if args.out is not None:
        _write_flat_lines(result, args.out)
    if args.json:
        print(json.dumps(result))
    else:
        _print_verify(result, pairs=args.pairs, out=args.out)
    return 0 if result["holds"] else 1


def _write_flat_lines(result: dict, out: Path) -> None:
    from posenc.plots import flat_lines

    dots = {row["distance"]: torch.tensor(row["values"], dtype=torch.float64) for row in result["distances"]}
    expected = {row["distance"]: row["expected"] for row in result["distances"]}
    title = (
        f"PE[i]·PE[i+d] per distance (d_model={result['d_model']}, seq_len={result['seq_len']}, "
        f"{result['dtype']})"
    )
    figure = flat_lines(dots, expected, title=title)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=120)


def _print_verify(result: dict, *, pairs: bool, out: Path | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    lines = []
    for row in result["distances"]:
        d = row["distance"]
        lines.append(f"\nDistance {d} ({row['pairs']} pairs):")
        if pairs:
            lines.extend(f"  ({i}, {i + d}) -> {value:.4f}" for i, value in enumerate(row["values"]))
        lines.append(
            f"  closed form Σ_k cos({d}·ω_k) = {row['expected']:.12f}   "
            f"max deviation {row['max_deviation']:.3e}"
        )
    sys.stdout.write("\n".join(lines) + "\n\n")

    console = Console()
    table = Table(
        title=escape(
            f"PE[i]·PE[i+d] = Σ_k cos(d·ω_k)?   d_model={result['d_model']}, "
            f"seq_len={result['seq_len']}, base={result['base']:g}, {result['dtype']}"
        )
    )
    for column in ("distance", "pairs", "closed form", "spread over i", "max deviation"):
        table.add_column(column, justify="right")
    for row in result["distances"]:
        table.add_row(
            str(row["distance"]),
            str(row["pairs"]),
            f"{row['expected']:.10f}",
            f"{row['spread']:.3e}",
            f"{row['max_deviation']:.3e}",
        )
    console.print(table)
    verdict = "[green]holds[/green]" if result["holds"] else "[red]fails[/red]"
    console.print(
        f"{verdict}: max deviation {result['max_deviation']:.3e} "
        f"(tolerance {result['tolerance']:.0e}, {result['dtype']})"
    )
    if out is not None:
        console.print(f"flat-line plot written to {out}")


def _verify_all(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from posenc.analysis import PROPERTY_NAMES, properties, specimen
    from posenc.encodings import ENCODINGS, available
    from posenc.report import PROPERTY_TITLES, format_cell

    table = {name: properties(specimen(name), length=args.length) for name in available()}
    if args.json:
        result = {name: {p: prop.as_dict() for p, prop in props.items()} for name, props in table.items()}
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    view = Table(title=f"Every claim on every encoding (positions 0 … {args.length - 1})")
    view.add_column("property")
    for name in table:
        view.add_column(f"{name}\n({ENCODINGS[name].kind})", justify="right")
    colours = {"holds": "green", "fails": "red"}

    def cell(prop) -> str:
        text, colour = escape(format_cell(prop)), colours.get(prop.verdict)
        return f"[{colour}]{text}[/{colour}]" if colour else text

    for prop_name in PROPERTY_NAMES:
        view.add_row(
            escape(PROPERTY_TITLES[prop_name]), *(cell(props[prop_name]) for props in table.values())
        )
    view.add_row("relative position", *(props["relative"].category or "" for props in table.values()))
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(view)
    console.print(
        "holds / fails: the measured number against the threshold of posenc.analysis.properties; "
        "— : the claim does not concern that encoding. `posenc verify --all --json` gives every reason."
    )
    return 0


def _plot(args: argparse.Namespace) -> int:
    from posenc.plots import gallery

    names = gallery.names() if args.name == "all" else [args.name]
    for name in names:
        if name not in gallery.names():
            raise ValueError(f"unknown figure set {name!r}; valid: all, {', '.join(gallery.names())}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        for spec in gallery.figures(name):
            path = args.out / f"{spec.name}.{args.format}"
            spec.build().savefig(path, dpi=110)
            print(path)
    return 0


def _report(args: argparse.Namespace) -> int:
    from posenc.report import build_report

    summary = build_report(args.out, lab_db=args.lab_db, progress=not args.no_progress)
    lab = "with the lab table" if summary["lab"] else f"no lab records at {args.lab_db}"
    print(
        f"report written to {summary['out']}/index.html and report.md ({summary['figures']} figures; {lab})"
    )
    return 0


def _bench(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        return _bench_cuda(args)
    if args.name == "rope":
        return _bench_rope(args)
    if args.name == "attention":
        return _bench_attention(args)
    from rich.console import Console
    from rich.table import Table

    from posenc.bench import sinusoidal

    args.rounds = 15 if args.rounds is None else args.rounds
    result = sinusoidal.run(args.length, args.d_model, args.rounds)
    console = Console()
    table = Table(
        title=f"sinusoidal table {args.length}×{args.d_model}, float32 output, "
        f"{result['threads']} threads, median of {args.rounds} alternating rounds"
    )
    for column in ("candidate", "median ms", "range ms", "× float32 recipe", "× clone"):
        table.add_column(column, justify="right")
    for t in result["timings"]:
        table.add_row(
            t["name"],
            f"{t['median_ms']:.2f}",
            f"{t['min_ms']:.2f}–{t['max_ms']:.2f}",
            f"{t['vs_float32_recipe']:.2f}",
            f"{t['vs_clone']:.1f}",
        )
    console.print(table)
    errors = Table(title=f"max |value − exact| at 64 sampled positions ≤ 2^21, d_model={args.d_model}")
    errors.add_column("recipe")
    errors.add_column("max abs error", justify="right")
    for name, error in result["max_abs_error_at_positions_up_to_2^21"].items():
        errors.add_row(name, f"{error:.2e}")
    console.print(errors)
    _write_json(result, args.json)
    return 0


def _write_json(result: dict, path: Path | None) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2))


def _bench_rope(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from posenc.bench import rope

    rounds = 41 if args.rounds is None else args.rounds
    result = rope.run(rounds=rounds, compile=not args.no_compile)
    console = Console()
    console.print(
        f"RoPE on q and k, {result['threads']} threads, median of {rounds} alternating rounds, "
        f"malloc: {escape(result['malloc'])}"
    )
    groups: dict[tuple, list[dict]] = {}
    for case in result["cases"]:
        groups.setdefault((tuple(case["shape"]), case["dtype"], case["layout"]), []).append(case)
    for (shape, dtype, layout), entries in groups.items():
        table = Table(title=f"(b, h, s, d) = {'×'.join(map(str, shape))}, {dtype}, {layout}")
        table.add_column("candidate")
        for entry in entries:
            table.add_column(f"{entry['cache']} cache: median (range) ms", justify="right")
            table.add_column("× clone", justify="right")
        rows: dict[str, list[str]] = {}
        for entry in entries:
            for t in entry["timings"]:
                rows.setdefault(t["name"], []).extend(
                    [f"{t['median_ms']:.2f} ({t['min_ms']:.2f}–{t['max_ms']:.2f})", f"{t['vs_clone']:.2f}"]
                )
        for name, cells in rows.items():
            table.add_row(escape(name), *cells)
        for name, why in entries[0]["not_timed"].items():
            table.add_row(escape(name), escape(f"n/a: {why}"), *[""] * (2 * len(entries) - 1))
        console.print(table)
    for cache, meaning in result["caches"].items():
        console.print(escape(f"{cache} cache: {meaning}"))
    console.print(escape(f"C kernel: {result['native_kernel']}"))
    for key, goal in result["goal"].items():
        verdict = "[green]met[/green]" if goal["met"] else "[red]not met[/red]"
        console.print(
            f"goal ≤ {result['goal_vs_clone']}× clone, {escape(key)}: {verdict} "
            f"({goal['out_of_place']:.2f}×; in place {goal['in_place']:.2f}×)"
        )
    _write_json(result, args.json)
    return 0


def _bench_cuda(args: argparse.Namespace) -> int:
    """``--device cuda``: the GPU benchmarks; exit status 2 with a message where they cannot run."""
    from posenc.bench import rope

    problem = None
    if args.name == "sinusoidal":
        problem = "--device cuda applies to rope and attention, not sinusoidal"
    elif args.name == "attention" and (args.sweep is not None or args.no_memory):
        problem = "--sweep and --no-memory apply to --device cpu (on cuda, memory is always measured)"
    elif not torch.cuda.is_available():
        problem = rope.CUDA_MISSING.format(torch.__version__)
    if problem is None:
        try:
            return _bench_rope_cuda(args) if args.name == "rope" else _bench_attention_cuda(args)
        except RuntimeError as error:  # triton missing, or a CUDA failure
            problem = str(error)
    print(f"posenc bench: error: {problem}", file=sys.stderr)
    return 2


def _bench_rope_cuda(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from posenc.bench import rope

    rounds = 30 if args.rounds is None else args.rounds
    result = rope.run_cuda(rounds=rounds, compile=not args.no_compile)
    console = Console()
    console.print(
        f"RoPE on q and k on {escape(result['device'])}, torch {result['torch']}, triton {result['triton']}, "
        f"liger-kernel {result['liger_kernel']}; median of {rounds} alternating rounds, CUDA events, "
        f"L2 flushed ({result['l2_flush_bytes'] >> 20} MiB written) before every call"
    )
    for case in result["cases"]:
        b, s, h_q, h_kv, d = case["shape"]
        table = Table(
            title=f"b={b} s={s} h_q={h_q} h_kv={h_kv} d={d}, {case['dtype']}, {case['layout']}, "
            f"{case['direction']} ({case['bytes_moved'] / 1e9:.3f} GB moved)"
        )
        for column in (
            "candidate",
            "median ms",
            "range ms",
            "GB/s",
            "of copy BW",
            "peak extra MiB",
            "max |err|",
        ):
            table.add_column(column, justify="left" if column == "candidate" else "right")
        for t in case["timings"]:
            error = t["max_abs_error_vs_float64"]
            table.add_row(
                escape(t["name"]),
                f"{t['median_ms']:.3f}",
                f"{t['min_ms']:.3f}–{t['max_ms']:.3f}",
                f"{t['gb_per_s']:.0f}",
                f"{t['of_copy_bandwidth']:.2f}",
                "n/a" if t["peak_extra_mib"] is None else f"{t['peak_extra_mib']:.0f}",
                "" if error is None else f"{error:.1e}",
            )
        for name, why in case["not_timed"].items():
            table.add_row(escape(name), escape(f"n/a: {why}"), *[""] * 5)
        console.print(table)
        goal = case["goal"]
        verdict = "[green]met[/green]" if goal["met"] else "[red]not met[/red]"
        console.print(
            f"goal ≥ {result['goal_of_copy_bandwidth']} of copy bandwidth and no slower than any peer: "
            f"{verdict} ({goal['of_copy_bandwidth']:.2f} of copy; {goal['vs_fastest_peer']:.2f}× "
            f"{escape(goal['fastest_peer'])})"
        )
    _write_json(result, args.json)
    return 0


def _bench_attention_cuda(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from posenc.bench import attention

    rounds = 10 if args.rounds is None else args.rounds
    result = attention.run_cuda(
        seq_lens=attention.CUDA_SEQ_LENS if args.seq_lens is None else args.seq_lens,
        rounds=rounds,
        compile=not args.no_compile,
    )
    console = Console()
    config = result["config"]
    console.print(
        f"causal attention on {escape(result['device'])}, b={config['batch']}, h={config['heads']}, "
        f"d_head={config['d_head']}, {config['dtype']}, no_grad, torch {result['torch']}, "
        f"median of {rounds} alternating rounds, CUDA events"
    )
    check = result["check"]
    console.print(
        f"checked against float64 at s={check['seq_len']} (tolerance {check['tolerance']:g}): "
        + ", ".join(
            f"{escape(name)} {error:.1e}" for name, error in check["max_abs_error_vs_float64"].items()
        )
    )
    for case in result["cases"]:
        table = Table(title=f"s = {case['seq_len']}")
        for column in ("candidate", "median ms", "range ms", "of unbiased flex", "of SDPA", "peak extra MiB"):
            table.add_column(column, justify="left" if column == "candidate" else "right")
        for t in case["timings"]:
            table.add_row(
                escape(t["name"]),
                f"{t['median_ms']:.3f}",
                f"{t['min_ms']:.3f}–{t['max_ms']:.3f}",
                "" if t["of_unbiased_flex"] is None else f"{t['of_unbiased_flex']:.2f}",
                "" if t["of_sdpa"] is None else f"{t['of_sdpa']:.2f}",
                "n/a" if t["peak_extra_mib"] is None else f"{t['peak_extra_mib']:.0f}",
            )
        for name, why in case["not_run"].items():
            table.add_row(escape(name), escape(why), "", "", "", "")
        console.print(table)
    for name, seq_len in result["out_of_memory_at"].items():
        if seq_len is not None:
            console.print(escape(f"{name}: out of memory at s={seq_len}"))
    for seq_len, goal in result["goal"].items():
        verdict = "[green]met[/green]" if goal["met"] else "[red]not met[/red]"
        console.print(
            f"goal biased flex ≥ {result['goal_of_unbiased_flex']} of unbiased flex throughput, s={seq_len}: "
            f"{verdict} (ALiBi {goal['alibi']:.2f}, T5 {goal['t5']:.2f})"
        )
    _write_json(result, args.json)
    return 0


def _bench_attention(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from posenc.bench import attention

    rounds = 9 if args.rounds is None else args.rounds
    result = attention.run(
        seq_lens=attention.SEQ_LENS if args.seq_lens is None else args.seq_lens,
        rounds=rounds,
        compile=not args.no_compile,
        memory=not args.no_memory,
        sweep_sizes=attention.SWEEP if args.sweep is None else args.sweep,
    )
    console = Console()
    config = result["config"]
    console.print(
        f"causal attention, b={config['batch']}, h={config['heads']}, d_head={config['d_head']}, float32, "
        f"no_grad, {result['threads']} threads, median of {rounds} alternating rounds, "
        f"malloc: {escape(result['malloc'])}"
    )
    for case in result["cases"]:
        table = Table(title=f"s = {case['seq_len']}")
        for column in (
            "candidate",
            "median ms",
            "range ms",
            "× SDPA",
            "max |err| vs float64",
            "peak extra MiB",
        ):
            table.add_column(column, justify="left" if column == "candidate" else "right")
        for t in case["timings"]:
            peak = t["peak_extra_mib"]
            table.add_row(
                escape(t["name"]),
                f"{t['median_ms']:.2f}",
                f"{t['min_ms']:.2f}–{t['max_ms']:.2f}",
                f"{t['vs_sdpa']:.2f}",
                f"{t['max_abs_error_vs_float64']:.2e}",
                "n/a" if peak is None else f"{peak:.1f}",
            )
        for name, why in case["not_timed"].items():
            table.add_row(escape(name), escape(f"n/a: {why}"), "", "", "", "")
        console.print(table)
        console.print(escape(f"ALiBi windows per head at s={case['seq_len']}: {case['windows']}"))
    study = Table(title="ALiBi folded into q·k as an extra channel: max |err| vs float64 (not timed)")
    columns = (
        [key for key in result["extra_channel_precision"][0] if key != "seq_len"]
        if result["extra_channel_precision"]
        else []
    )
    study.add_column("s", justify="right")
    for column in columns:
        study.add_column(escape(column), justify="right")
    for row in result["extra_channel_precision"]:
        study.add_row(str(row["seq_len"]), *(f"{row[c]:.2e}" for c in columns))
    console.print(study)
    if result["sweep"]["results"]:
        sweep = Table(title=f"longest s completed within {result['sweep']['limit_bytes'] / 2**30:g} GiB")
        for column in ("candidate", "longest s", "peak extra MiB there", "seconds there", "stopped by"):
            sweep.add_column(column)
        for name, outcome in result["sweep"]["results"].items():
            last = next((r for r in reversed(outcome["runs"]) if r["ok"]), None)
            sweep.add_row(
                escape(name),
                "none" if outcome["longest_completed"] is None else str(outcome["longest_completed"]),
                "" if last is None else f"{last['peak_extra_mib']:.0f}",
                "" if last is None else f"{last['seconds']:.1f}",
                escape(outcome["stopped_by"] or "nothing (largest size tried)"),
            )
        console.print(sweep)
    for seq_len, goal in result["goal"].items():
        verdict = "[green]met[/green]" if goal["met"] else "[red]not met[/red]"
        console.print(
            f"goal ALiBi ≤ {result['goal_vs_sdpa']}× unbiased SDPA, s={seq_len}: {verdict} "
            f"({goal['alibi_fast']:.2f}×; no window {goal['alibi_fast_no_window']:.2f}×)"
        )
    _write_json(result, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {
        "list": _list,
        "verify": _verify,
        "plot": _plot,
        "report": _report,
        "lab": _lab,
        "bench": _bench,
    }
    try:
        return handlers[args.command](args)
    except (ValueError, TypeError) as error:
        print(f"posenc {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
