"""``posenc report``: every figure, the verification table and the lab table as index.html + report.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc._extras import require
from posenc._paths import writable_folder
from posenc.cli.options import encoding_names


def configure(subparsers) -> None:
    """Add the ``report`` parser."""
    parser = subparsers.add_parser(
        "report", help="every figure, the verification table and the lab table as index.html + report.md"
    )
    parser.add_argument("--out", type=Path, default=Path("report"), help="folder (default ./report)")
    parser.add_argument(
        "--lab-db",
        type=Path,
        default=Path("lab/records.sqlite"),
        help="lab records to include when present (default lab/records.sqlite)",
    )
    parser.add_argument(
        "--encodings",
        type=encoding_names,
        default=None,
        help="comma-separated encodings to report on (default every registered one, with the figures "
        "across them)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Write the report (after checking ``--out`` and ``--lab-db``) and say where."""
    for module in ("matplotlib", "rich"):  # its figures, its progress bar
        require(module, "report", "the report")
    writable_folder(args.out, "--out")
    _check_lab_db(args.lab_db)
    from posenc.report import build_report

    summary = build_report(
        args.out, lab_db=args.lab_db, progress=not args.no_progress, encodings=args.encodings
    )
    lab = "with the lab table" if summary["lab"] else f"no lab records at {args.lab_db}"
    print(
        f"report written to {summary['out']}/index.html and report.md ({summary['figures']} figures; {lab})"
    )
    return 0


def _check_lab_db(path: Path) -> None:
    """Refuse, before any figure is drawn, a ``--lab-db`` that is a folder, a file that is not a lab
    database, or one with a damaged record (every row is decoded and checked here, as ``posenc lab
    report`` does); a missing or empty one is fine (the report says it holds no lab records)."""
    if path.is_dir():
        raise ValueError(f"--lab-db {str(path)!r} is a folder, not a lab records file")
    if not path.exists():
        return
    from posenc.lab.records import EmptyDatabase, Records

    try:
        with Records(path, readonly=True, option="--lab-db") as records:
            records.report_rows()
    except EmptyDatabase:
        pass
