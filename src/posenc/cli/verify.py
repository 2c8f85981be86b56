"""``posenc verify``: seed 002's claim that sinusoidal dot products depend only on distance (:data:`SEED_002`
says what seed 002 is), or every property of the named encodings (``verify rope alibi``) or of all (``--all``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posenc._extras import require
from posenc._paths import writable_file
from posenc.cli import options
from posenc.cli.output import console, print_table
from posenc.table import Column, Table

DTYPES = ("float32", "float64")
#: Agreement with the closed form that `verify` requires, per table dtype, relative to ‖PE‖² (d_model/2):
#: the dot products grow with d_model, and so does their rounding (at d_model 16384, PE·PE ≈ 8192,
#: whose float64 ulp is already 1.8e-12).
TOLERANCES = {"float32": 1e-5, "float64": 1e-12}
#: Formats ``--out`` can be written in, by suffix; a name without a suffix gets ``.png``.
PLOT_FORMATS = ("png", "svg", "pdf")
#: The options of the sinusoidal check (argument name -> default) and of the properties table: each is
#: refused where the other is run, rather than ignored.
CHECK_DEFAULTS = {
    "d_model": 8,
    "seq_len": 15,
    "distances": None,
    "base": 10000.0,
    "dtype": "float64",
    "tolerance": None,
    "pairs": True,
    "out": None,
}
TABLE_DEFAULTS = {"length": 256}
SEED_002 = (
    'seed 002 (the blog post "Dot Products & Translation Invariance in Sinusoidal Positional Encodings", '
    "one of the reference documents posenc started from; not a random seed)"
)


def configure(subparsers) -> None:
    """Add the ``verify`` parser."""
    parser = subparsers.add_parser(
        "verify",
        help="check that sinusoidal code dot products depend only on distance (seed 002), or every "
        "property of the named encodings (or --all)",
        description=f"Without NAME, reproduce the numerical check of {SEED_002}: for each distance d, "
        "PE[i]·PE[i+d] for every start i, against the closed form Σ_k cos(d·ω_k). Exits 1 when the "
        "deviation, relative to ‖PE‖² (d_model/2), exceeds the tolerance, 2 on a bad option. With NAME … "
        "or --all, measure every property of those encodings and print the encoding × property table.",
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="registered encodings whose properties to measure (`posenc list` names them)",
    )
    parser.add_argument("--d-model", type=options.width, default=None, help="code width (default 8)")
    parser.add_argument(
        "--seq-len", type=options.seq_len, default=None, help="number of positions, at most 2^27 (default 15)"
    )
    parser.add_argument(
        "--distances",
        type=options.distances,
        default=None,
        help="comma-separated distances (default: odd 1 … seq_len−1)",
    )
    parser.add_argument("--base", type=float, default=None, help="wavelength base (default 10000)")
    parser.add_argument("--dtype", choices=DTYPES, default=None, help="table dtype (default float64)")
    parser.add_argument(
        "--tolerance",
        type=options.tolerance,
        default=None,
        help="largest accepted deviation relative to ‖PE‖² = d_model/2, ≥ 0 "
        "(default 1e-12 for float64, 1e-5 for float32)",
    )
    parser.add_argument(
        "--pairs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="print every pair's value, as seed 002 does (default on)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument(
        "--out",
        type=options.file_name,
        default=None,
        help="write the flat-line plot to this file (.png, .svg or .pdf; .png is added to a name without one)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="measure every property of every registered encoding and print the encoding × property table",
    )
    parser.add_argument(
        "--length",
        type=options.position_count,
        default=None,
        help="NAME … or --all: positions each property is measured over, at most 2^27 (default 256)",
    )


def _given(args: argparse.Namespace, defaults: dict) -> list[str]:
    """The options among ``defaults`` given on the command line, as ``--option``."""
    return ["--" + name.replace("_", "-") for name in defaults if getattr(args, name) is not None]


def _check_mode(args: argparse.Namespace) -> None:
    """Refuse what the chosen run would ignore; fill in the defaults of the options it reads.

    Raises:
        ValueError: names with ``--all``, an unknown name (listing the valid ones), or an option of the
            other run.
    """
    from posenc.encodings import available

    table = bool(args.names) or args.all
    if args.names and args.all:
        raise ValueError(
            f"give encoding names or --all, not both: got {' '.join(map(repr, args.names))} and --all"
        )
    for name in args.names:
        if name not in available():
            raise ValueError(f"unknown encoding {name!r}; valid: {', '.join(available())}")
    if table:
        which = "--all" if args.all else " ".join(args.names)
        if args.out is not None:  # the properties table draws no plot: --out would be ignored
            raise ValueError(
                f"--out {str(args.out)!r} is the flat-line plot of the sinusoidal check, and {which} draws "
                "no plot; leave out --out"
            )
        if given := _given(args, CHECK_DEFAULTS):
            raise ValueError(
                f"{', '.join(given)} set the sinusoidal check, which {which} does not run; leave "
                f"{'it' if len(given) == 1 else 'them'} out"
            )
    elif given := _given(args, TABLE_DEFAULTS):
        raise ValueError(
            f"{', '.join(given)} sets the properties table of NAME … or --all; the sinusoidal check "
            "takes --seq-len"
        )
    for name, default in (TABLE_DEFAULTS if table else CHECK_DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, default)


def plot_path(out: Path) -> Path:
    """The file ``--out`` names: as given with a known suffix, with ``.png`` added when it has none."""
    if out.is_dir():
        raise ValueError(
            f"--out {str(out)!r} is a folder; give a file name such as {str(out / 'flat.png')!r}"
        )
    if not out.suffix:
        return out.with_name(out.name + ".png")
    if out.suffix[1:].lower() not in PLOT_FORMATS:
        raise ValueError(
            f"--out {str(out)!r} has suffix {out.suffix!r}; use one of {', '.join('.' + f for f in PLOT_FORMATS)}"
        )
    return out


def verify_sinusoidal(
    d_model: int, seq_len: int, distances: list[int] | None, base: float, dtype: str
) -> dict:
    """Seed 002's numerical check as a dict of plain numbers (what ``verify --json`` prints).

    ``max_deviation`` is absolute; ``scale`` is the mean ‖PE‖² of the table (d_model/2) and
    ``relative_deviation`` = max_deviation / scale, what the tolerance judges (as
    ``posenc.analysis.properties`` does): the dot products, and their rounding, grow with d_model.
    """
    import torch

    from posenc.analysis import closed_form_dot, dot_by_distance, translation_invariance
    from posenc.functional import sinusoidal_table

    if distances is None:
        distances = list(range(1, seq_len, 2))
        if not distances:
            raise ValueError(f"seq_len must be at least 2 to have a distance, got {seq_len}")
    table = sinusoidal_table(seq_len, d_model, base=base, dtype=getattr(torch, dtype))  # [T, d]
    dots = dot_by_distance(table, distances)
    expected = {d: float(closed_form_dot(d, d_model, base)) for d in dots}
    summaries = translation_invariance(dots, expected)
    scale = float((table.to(torch.float64) ** 2).sum(dim=-1).mean())  # ‖PE‖², d_model/2
    max_deviation = max(s.max_deviation for s in summaries)
    return {
        "d_model": d_model,
        "seq_len": seq_len,
        "base": base,
        "dtype": dtype,
        "distances": [
            {**summary.as_dict(), "values": dots[summary.distance].tolist()} for summary in summaries
        ],
        "max_deviation": max_deviation,
        "scale": scale,
        "relative_deviation": max_deviation / scale,
    }


def run(args: argparse.Namespace) -> int:
    """0 when the claim holds within the tolerance, 1 when it does not (NAME … or ``--all``: 1 only when
    a claim could not be measured)."""
    _check_mode(args)
    if args.names or args.all:
        return _run_table(args)
    if args.out is not None:
        require("matplotlib", "plots", "the flat-line plot (--out)")
    out = None if args.out is None else writable_file(plot_path(args.out), "--out")
    result = verify_sinusoidal(args.d_model, args.seq_len, args.distances, args.base, args.dtype)
    tolerance = TOLERANCES[args.dtype] if args.tolerance is None else args.tolerance
    result["tolerance"] = tolerance
    result["holds"] = bool(result["relative_deviation"] <= tolerance)  # False for a NaN
    if out is not None:
        _write_flat_lines(result, out)
    if args.json:
        print(json.dumps(result))
        if out is not None:  # on stderr, so that stdout stays one JSON document
            print(f"flat-line plot written to {out}", file=sys.stderr)
    else:
        _print_result(result, pairs=args.pairs, out=out)
    return 0 if result["holds"] else 1


def _write_flat_lines(result: dict, out: Path) -> None:
    import torch

    from posenc.plots import flat_lines

    dots = {row["distance"]: torch.tensor(row["values"], dtype=torch.float64) for row in result["distances"]}
    expected = {row["distance"]: row["expected"] for row in result["distances"]}
    title = (
        f"PE[i]·PE[i+d] per distance (d_model={result['d_model']}, seq_len={result['seq_len']}, "
        f"{result['dtype']})"
    )
    figure = flat_lines(dots, expected, title=title)
    figure.savefig(out, dpi=120, format=out.suffix[1:].lower())


def _pair_lines(result: dict, pairs: bool) -> list[str]:
    """Seed 002's printout: each distance, optionally every pair's value, the closed form."""
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
    return lines


def summary_table(result: dict) -> Table:
    """Distance, pairs, closed form, spread over i and max deviation, one row per distance."""
    return Table(
        [
            Column(name, "right")
            for name in ("distance", "pairs", "closed form", "spread over i", "max deviation")
        ],
        [
            [
                str(row["distance"]),
                str(row["pairs"]),
                f"{row['expected']:.10f}",
                f"{row['spread']:.3e}",
                f"{row['max_deviation']:.3e}",
            ]
            for row in result["distances"]
        ],
        title=f"PE[i]·PE[i+d] = Σ_k cos(d·ω_k)?   d_model={result['d_model']}, "
        f"seq_len={result['seq_len']}, base={result['base']:g}, {result['dtype']}",
    )


def _print_result(result: dict, *, pairs: bool, out: Path | None) -> None:
    sys.stdout.write("\n".join(_pair_lines(result, pairs)) + "\n\n")
    terminal = console()
    print_table(summary_table(result), out=terminal)
    verdict = "[green]holds[/green]" if result["holds"] else "[red]fails[/red]"
    terminal.print(
        f"{verdict}: max deviation {result['max_deviation']:.3e} = "
        f"{result['relative_deviation']:.3e}·‖PE‖² (tolerance {result['tolerance']:.0e}, {result['dtype']})"
    )
    if out is not None:
        print(f"flat-line plot written to {out}")  # one line, never wrapped: scripts read the path


def properties_table(table: dict, length: int, *, every: bool = True) -> Table:
    """Encoding × property: the report's table (``posenc.report.properties_table``), one row per
    encoding, so that more encodings make it longer, not wider; titled by the encodings unless
    ``every`` registered one is in it."""
    from posenc.report import properties_table as by_encoding

    view = by_encoding(table)
    which = "every encoding" if every else ", ".join(table)
    return Table(
        view.columns,
        view.rows,
        title=f"Every claim on {which} (positions 0 … {length - 1})",
        notes=[
            "holds / fails: the measured number against the threshold of posenc.analysis.properties; "
            "— : the claim does not concern that encoding. `posenc verify --all --json` gives every reason."
        ],
    )


def _verdict_colour(text: str) -> str | None:
    return {"holds": "green", "fails": "red"}.get(text.split(" ", 1)[0])


def _run_table(args: argparse.Namespace) -> int:
    from posenc.analysis import properties_by_name

    names = list(dict.fromkeys(args.names)) or None  # in the order given, each once; None: every one
    table = properties_by_name(names, length=args.length)  # an encoding that raises gets error cells
    if args.json:
        result = {name: {p: prop.as_dict() for p, prop in props.items()} for name, props in table.items()}
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        view = properties_table(table, args.length, every=names is None)
        print_table(view, cell_style=_verdict_colour, out=console(wide=True))
    errors = [f"{name} {claim}" for name, props in table.items() for claim, p in props.items() if p.error]
    if errors:  # a claim that could not be measured is a failure, not a verdict
        print(
            f"posenc verify: {len(errors)} claim(s) could not be measured: {', '.join(errors)}",
            file=sys.stderr,
        )
        return 1
    return 0
