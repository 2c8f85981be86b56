"""``posenc bench rope``: RoPE on q and k against the usual recipes and a copy of the same bytes;
``--device cuda`` times the Triton kernel against its GPU peers."""

from __future__ import annotations

import argparse

from posenc._paths import writable_file
from posenc.cli.bench.options import add_device, add_json, add_rounds, on_gpu, require_cuda
from posenc.cli.output import console, print_table, write_json
from posenc.table import Column, Table

ROUNDS = {"cpu": 41, "cuda": 30}


def configure(subparsers) -> None:
    """Add the ``bench rope`` parser."""
    parser = subparsers.add_parser(
        "rope", help="RoPE on q and k: posenc against the usual recipes and a copy"
    )
    add_rounds(parser, "41; 30 with --device cuda")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="leave out the torch.compile candidates (they compile first)",
    )
    parser.add_argument(
        "--no-training",
        action="store_true",
        help="leave out the forward + backward timings (CPU)",
    )
    parser.add_argument(
        "--shape",
        type=int,
        nargs=4,
        action="append",
        metavar=("B", "H", "S", "D"),
        help="(b, h, s, d) of q and k, repeatable (CPU; default 1 16 2048 128 and 4 32 1024 64)",
    )
    parser.add_argument(
        "--dtype", action="append", choices=("float32", "bfloat16"), help="repeatable (CPU; default both)"
    )
    parser.add_argument(
        "--layout", action="append", choices=("half", "interleaved"), help="repeatable (CPU; default both)"
    )
    parser.add_argument(
        "--cache", action="append", choices=("cold", "warm"), help="repeatable (CPU; default both)"
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time by this thread's CPU time, not the wall clock (CPU, one thread: OMP_NUM_THREADS=1); "
        "for a machine shared with other jobs",
    )
    add_device(parser, "the Triton kernel against HF's recipe, torch.compile and liger-kernel")
    add_json(parser)


def run(args: argparse.Namespace) -> int:
    """Time on the chosen device, write ``--json``, print the tables (the file first: a closed stdout
    ends the command with 141 but keeps what was measured)."""
    import torch  # here, not at import: `posenc` starts without torch (its start-up is interruptible)

    from posenc.bench import rope

    json_path = None if args.json is None else writable_file(args.json, "--json")
    rounds = ROUNDS[args.device] if args.rounds is None else args.rounds
    if args.cpu_time and (args.device == "cuda" or torch.get_num_threads() != 1):
        raise ValueError(
            "--cpu-time times the CPU bench on one thread (OMP_NUM_THREADS=1); got "
            + ("--device cuda" if args.device == "cuda" else f"{torch.get_num_threads()} threads")
        )
    if args.device == "cuda":
        require_cuda()
        result = on_gpu(lambda: rope.run_cuda(rounds=rounds, compile=not args.no_compile))
        write_json(result, json_path)
        _print_cuda(result)
    else:
        chosen = {"shapes": args.shape, "dtypes": args.dtype, "layouts": args.layout, "caches": args.cache}
        chosen["cpu_time"] = True if args.cpu_time else None
        result = rope.run(
            rounds=rounds,
            compile=not args.no_compile,
            training=not args.no_training,
            **{name: value for name, value in chosen.items() if value is not None},
        )
        write_json(result, json_path)
        _print_cpu(result)
    return 0


# --- CPU ------------------------------------------------------------------------------------------


def _time(t: dict) -> str:
    return f"{t['median_ms']:.2f} ({t['min_ms']:.2f}–{t['max_ms']:.2f})"


def cpu_table(entries: list[dict], training: dict | None = None) -> Table:
    """One (shape, dtype, layout): each candidate's median (range) and × clone, per cache state; with
    ``training``, forward + backward median (range), × floor and × eager, in three more columns."""
    shape, dtype, layout = entries[0]["shape"], entries[0]["dtype"], entries[0]["layout"]
    columns = [Column("candidate")]
    for entry in entries:
        columns += [Column(f"{entry['cache']} cache: median (range) ms", "right"), Column("× clone", "right")]
    width = 1 + 2 * len(entries)  # cells of a row before the training columns
    rows: dict[str, list[str]] = {}
    for entry in entries:
        for t in entry["timings"]:
            rows.setdefault(t["name"], [t["name"]]).extend([_time(t), f"{t['vs_clone']:.2f}"])
    for name, why in entries[0]["not_timed"].items():
        rows[name] = [name, f"n/a: {why}", *[""] * (width - 2)]
    if training is not None:
        columns += [
            Column(f"training ({training['cache']}): median (range) ms", "right"),
            Column("× floor", "right"),
            Column("× eager", "right"),
        ]
        for t in training["timings"]:
            row = rows.setdefault(t["name"], [t["name"], *[""] * (width - 1)])
            row.extend([_time(t), f"{t['vs_floor']:.2f}", f"{t['vs_eager']:.2f}"])
        for row in rows.values():
            row.extend([""] * (len(columns) - len(row)))
    return Table(
        columns, rows.values(), title=f"(b, h, s, d) = {'×'.join(map(str, shape))}, {dtype}, {layout}"
    )


def _print_cpu(result: dict) -> None:
    terminal = console()
    terminal.print(
        f"RoPE on q and k, {result['threads']} threads, median of {result['rounds']} alternating rounds "
        f"({result.get('clock', 'wall clock')}), malloc: {result['malloc']}",
        markup=False,
    )
    groups: dict[tuple, list[dict]] = {}
    for case in result["cases"]:
        groups.setdefault(_key(case), []).append(case)
    training = {_key(entry): entry for entry in result.get("training", [])}
    for key, entries in groups.items():
        print_table(cpu_table(entries, training.get(key)), out=terminal)
    for cache, meaning in result["caches"].items():
        terminal.print(f"{cache} cache: {meaning}", markup=False)
    for name, meaning in result.get("training_candidates", {}).items():
        terminal.print(f"training, {name}: {meaning}", markup=False)
    terminal.print(f"C kernel: {result['native_kernel']}", markup=False)


def _key(entry: dict) -> tuple:
    return tuple(entry["shape"]), entry["dtype"], entry["layout"]


# --- GPU ------------------------------------------------------------------------------------------


def cuda_table(case: dict) -> Table:
    """One GPU case: time, bandwidth (also as a fraction of the copy's), peak extra memory, error."""
    b, s, h_q, h_kv, d = case["shape"]
    headers = ("median ms", "range ms", "GB/s", "of copy BW", "peak extra MiB", "max |err|")
    rows = []
    for t in case["timings"]:
        error = t["max_abs_error_vs_float64"]
        rows.append(
            [
                t["name"],
                f"{t['median_ms']:.3f}",
                f"{t['min_ms']:.3f}–{t['max_ms']:.3f}",
                f"{t['gb_per_s']:.0f}",
                f"{t['of_copy_bandwidth']:.2f}",
                "n/a" if t["peak_extra_mib"] is None else f"{t['peak_extra_mib']:.0f}",
                "" if error is None else f"{error:.1e}",
            ]
        )
    rows += [[name, f"n/a: {why}", *[""] * 5] for name, why in case["not_timed"].items()]
    return Table(
        [Column("candidate"), *(Column(header, "right") for header in headers)],
        rows,
        title=f"b={b} s={s} h_q={h_q} h_kv={h_kv} d={d}, {case['dtype']}, {case['layout']}, "
        f"{case['direction']} ({case['bytes_moved'] / 1e9:.3f} GB moved)",
    )


def _print_cuda(result: dict) -> None:
    terminal = console()
    terminal.print(
        f"RoPE on q and k on {result['device']}, torch {result['torch']}, triton {result['triton']}, "
        f"liger-kernel {result['liger_kernel']}; median of {result['rounds']} alternating rounds, CUDA events, "
        f"L2 flushed ({result['l2_flush_bytes'] >> 20} MiB written) before every call",
        markup=False,
    )
    for case in result["cases"]:
        print_table(cuda_table(case), out=terminal)
        kernel = case["kernel"]
        terminal.print(
            f"posenc Triton: {kernel['of_copy_bandwidth']:.2f} of copy bandwidth; the fastest peer, "
            f"{kernel['fastest_peer']}, takes {kernel['vs_fastest_peer']:.2f}× its time",
            markup=False,
        )
