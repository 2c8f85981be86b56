"""``posenc bench attention``: one attention layer per registered encoding on each backend (plugins
included) and the declared extra rows, against unbiased SDPA, with memory and a 16 GiB sweep on CPU;
``--device cuda`` times flex_attention's biases on the GPU."""

from __future__ import annotations

import argparse

from posenc._paths import writable_file
from posenc.cli import options
from posenc.cli.bench.options import add_device, add_json, add_rounds, on_gpu, require_cuda
from posenc.cli.output import console, print_table, write_json
from posenc.table import Column, Table

ROUNDS = {"cpu": 9, "cuda": 10}


def configure(subparsers) -> None:
    """Add the ``bench attention`` parser."""
    parser = subparsers.add_parser(
        "attention",
        help="one causal attention layer per registered encoding on each backend, and the declared "
        "naive and materialised forms, against unbiased SDPA",
    )
    parser.add_argument(
        "--seq-lens",
        type=options.some_lengths,
        default=None,
        help="comma-separated sequence lengths (default 1024,2048,4096; with --device cuda 1024,2048,…,32768)",
    )
    add_rounds(parser, "9; 10 with --device cuda")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="cuda: run flex_attention uncompiled (on cpu it never compiles)",
    )
    parser.add_argument(
        "--sweep",
        type=options.lengths,
        default=None,
        help="cpu: lengths tried for the 16 GiB sweep, or 'none' (default 4096,8192,…,65536)",
    )
    parser.add_argument(
        "--no-memory",
        action="store_true",
        help="cpu: skip the per-candidate memory measurement (a subprocess each)",
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="REGEX",
        help="cpu: only the rows whose name this regular expression finds, case-insensitive (unbiased SDPA always runs)",
    )
    add_device(parser, "compiled flex_attention with the biases as score_mod")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    """Time on the chosen device, write ``--json``, print the tables (the file first: a closed stdout
    ends the command with 141 but keeps what was measured)."""
    from posenc.bench import attention, attention_cuda

    if args.device == "cuda" and (args.sweep is not None or args.no_memory or args.only is not None):
        raise ValueError(
            "--sweep, --no-memory and --only apply to --device cpu (on cuda, memory is always measured)"
        )
    if args.device == "cpu" and args.no_compile:
        raise ValueError("--no-compile applies to --device cuda (on cpu, flex runs posenc's reference path)")
    if args.only is not None:
        attention.selected(args.only)  # a bad expression is refused before anything runs
    json_path = None if args.json is None else writable_file(args.json, "--json")
    rounds = ROUNDS[args.device] if args.rounds is None else args.rounds
    if args.device == "cuda":
        require_cuda()
        seq_lens = attention_cuda.CUDA_SEQ_LENS if args.seq_lens is None else args.seq_lens
        result = on_gpu(
            lambda: attention_cuda.run_cuda(seq_lens=seq_lens, rounds=rounds, compile=not args.no_compile)
        )
        write_json(result, json_path)
        _print_cuda(result)
    else:
        result = attention.run(
            seq_lens=attention.SEQ_LENS if args.seq_lens is None else args.seq_lens,
            rounds=rounds,
            memory=not args.no_memory,
            sweep_sizes=attention.SWEEP if args.sweep is None else args.sweep,
            only=args.only,
        )
        write_json(result, json_path)
        _print_cpu(result)
    return 0


# --- CPU ------------------------------------------------------------------------------------------


def cpu_table(case: dict) -> Table:
    """One length: each row's inference and training time, × unbiased SDPA, error against float64, memory."""
    headers = (
        "inference ms",
        "× SDPA",
        "fwd+bwd ms",
        "× SDPA ",
        "max |err| vs float64",
        "peak extra MiB",
    )
    rows = [
        [
            t["name"],
            f"{t['inference']['median_ms']:.2f}",
            f"{t['inference']['vs_sdpa']:.2f}",
            f"{t['training']['median_ms']:.2f}",
            f"{t['training']['vs_sdpa']:.2f}",
            f"{t['max_abs_error_vs_float64']:.2e}",
            "n/a" if t["peak_extra_mib"] is None else f"{t['peak_extra_mib']:.1f}",
        ]
        for t in case["timings"]
    ]
    rows += [[name, f"n/a: {why}", "", "", "", "", ""] for name, why in case["not_timed"].items()]
    return Table(
        [Column("row"), *(Column(header, "right") for header in headers)],
        rows,
        title=f"s = {case['seq_len']} (medians)",
    )


def extra_channel_table(precision: list[dict]) -> Table:
    """ALiBi folded into q·k as an extra channel: max |err| per length and variant (not timed), and
    ALiBi's windows per head."""
    variants = [key for key in precision[0] if key not in ("seq_len", "windows")] if precision else []
    return Table(
        [
            Column("s", "right"),
            *(Column(variant, "right") for variant in variants),
            Column("ALiBi windows per head"),
        ],
        [
            [str(row["seq_len"]), *(f"{row[v]:.2e}" for v in variants), str(row["windows"])]
            for row in precision
        ],
        title="ALiBi folded into q·k as an extra channel: max |err| vs float64 (not timed)",
    )


def sweep_table(sweep: dict) -> Table:
    """The longest length each candidate completed within the memory limit, and what stopped it."""
    rows = []
    for name, outcome in sweep["results"].items():
        last = next((r for r in reversed(outcome["runs"]) if r["ok"]), None)
        rows.append(
            [
                name,
                "none" if outcome["longest_completed"] is None else str(outcome["longest_completed"]),
                "" if last is None else f"{last['peak_extra_mib']:.0f}",
                "" if last is None else f"{last['seconds']:.1f}",
                outcome["stopped_by"] or "nothing (largest size tried)",
            ]
        )
    return Table(
        ["row", "longest s", "peak extra MiB there", "seconds there", "stopped by"],
        rows,
        title=f"longest s completed within {sweep['limit_bytes'] / 2**30:g} GiB",
    )


def _print_cpu(result: dict) -> None:
    terminal = console()
    config = result["config"]
    terminal.print(
        f"causal attention layer, b={config['batch']}, h={config['heads']}, d_head={config['d_head']}, float32, "
        f"inference (no_grad) and forward + backward, {result['threads']} threads, "
        f"median of {result['rounds']} alternating rounds, "
        f"malloc: {result['malloc']}",
        markup=False,
    )
    for case in result["cases"]:
        print_table(cpu_table(case), out=terminal)
    print_table(extra_channel_table(result["extra_channel_precision"]), out=terminal)
    if result["sweep"]["results"]:
        print_table(sweep_table(result["sweep"]), out=terminal)


# --- GPU ------------------------------------------------------------------------------------------


def cuda_table(case: dict) -> Table:
    """One length on the GPU: time, throughput as a fraction of unbiased flex and of SDPA, memory."""
    headers = ("median ms", "range ms", "of unbiased flex", "of SDPA", "peak extra MiB")
    rows = [
        [
            t["name"],
            f"{t['median_ms']:.3f}",
            f"{t['min_ms']:.3f}–{t['max_ms']:.3f}",
            "" if t["of_unbiased_flex"] is None else f"{t['of_unbiased_flex']:.2f}",
            "" if t["of_sdpa"] is None else f"{t['of_sdpa']:.2f}",
            "n/a" if t["peak_extra_mib"] is None else f"{t['peak_extra_mib']:.0f}",
        ]
        for t in case["timings"]
    ]
    rows += [[name, why, "", "", "", ""] for name, why in case["not_run"].items()]
    return Table(
        [Column("candidate"), *(Column(header, "right") for header in headers)],
        rows,
        title=f"s = {case['seq_len']}",
    )


def _print_cuda(result: dict) -> None:
    terminal = console()
    config, check = result["config"], result["check"]
    terminal.print(
        f"causal attention on {result['device']}, b={config['batch']}, h={config['heads']}, "
        f"d_head={config['d_head']}, {config['dtype']}, no_grad, torch {result['torch']}, "
        f"median of {result['rounds']} alternating rounds, CUDA events",
        markup=False,
    )
    errors = ", ".join(f"{name} {error:.1e}" for name, error in check["max_abs_error_vs_float64"].items())
    terminal.print(
        f"checked against float64 at s={check['seq_len']} (tolerance {check['tolerance']:g}): {errors}",
        markup=False,
    )
    for case in result["cases"]:
        print_table(cuda_table(case), out=terminal)
    for name, seq_len in result["out_of_memory_at"].items():
        if seq_len is not None:
            terminal.print(f"{name}: out of memory at s={seq_len}", markup=False)
