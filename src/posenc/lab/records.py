"""The lab's records: one sqlite database (standard library ``sqlite3``) holding every run.

Each run is one row keyed by its config hash: config, encoding, seed, metrics, timings, versions and
corpus fingerprint, written in a single transaction, so a run is either recorded whole or not at
all and can never be recorded twice. A ``meta`` table holds the schema version; a database of
another version, one that is not a lab database, or one that lacks a table or column of this
version is refused with a message, never modified.
Writability is checked when the database is opened, before any training starts.

A ``claims`` table (added to a writable database of this version when missing) names the process
training each run, so that two sweeps sharing a database never train one run twice; a claim whose
process has ended (a crash, SIGKILL) is stale and taken over.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

#: Layout of the tables below; a database with another version is refused.
SCHEMA_VERSION = 1
DEFAULT_DB = Path("lab") / "records.sqlite"
STATUSES = ("done", "not applicable")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    config_hash TEXT PRIMARY KEY,   -- sha256 of the canonical JSON config
    preset TEXT NOT NULL,           -- preset the run was planned under
    task TEXT NOT NULL,
    encoding TEXT NOT NULL,
    seed INTEGER NOT NULL,
    status TEXT NOT NULL,           -- 'done' or 'not applicable'
    reason TEXT,                    -- why, when not applicable
    config TEXT NOT NULL,           -- JSON
    metrics TEXT NOT NULL,          -- JSON: evaluation per length, losses, parameters, relative position
    timings TEXT NOT NULL,          -- JSON: seconds per step, training and evaluation seconds
    versions TEXT NOT NULL,         -- JSON: python, torch, posenc, device
    corpus TEXT,                    -- JSON fingerprint of the task's corpus (NULL for a task without one)
    recorded_at TEXT NOT NULL       -- UTC, ISO 8601
);
"""
#: Runs being trained, one row per run, inserted in a transaction before its training starts and
#: deleted with its record (or when its process gives it up); not part of the schema version.
_CLAIMS = """
CREATE TABLE IF NOT EXISTS claims (
    config_hash TEXT PRIMARY KEY,   -- the run being trained
    pid INTEGER NOT NULL,           -- the process training it
    host TEXT NOT NULL,             -- the machine that process runs on
    started TEXT NOT NULL,          -- that process's start time (Linux's /proc/PID/stat), '' elsewhere
    claimed_at TEXT NOT NULL        -- UTC, ISO 8601
)
"""
#: What :meth:`Records.claim` answers for a run that is already recorded.
RECORDED = "already recorded"
_COLUMNS = ("config", "metrics", "timings", "versions", "corpus")
#: Columns of each table, in order (runs are written by position).
_TABLES = {
    "meta": ("key", "value"),
    "runs": (
        "config_hash",
        "preset",
        "task",
        "encoding",
        "seed",
        "status",
        "reason",
        "config",
        "metrics",
        "timings",
        "versions",
        "corpus",
        "recorded_at",
    ),
}

#: What the lab's report reads of a finished run, column -> {key: the JSON type of its value}: a
#: record without one would stop the report half-way (a KeyError after figures were drawn).
_REPORTED = {
    "config": {
        "task": str,
        "encoding": str,
        "train_length": int,
        "model": dict,
        "train": dict,
        "encoding_kwargs": dict,
    },
    "metrics": {
        "eval": dict,
        "positional_parameters": int,
        "positional_parameters_at_2L": int,
        "fixed_constants": int,
        "relative_position": dict,
    },
    "timings": {"seconds_per_step": float},
    "versions": {"python": str, "torch": str, "posenc": str, "device": str},
}
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "a JSON object"}


class EmptyDatabase(ValueError):
    """A database opened read-only that has no tables at all (an empty file is an empty sqlite database)."""


class Records:
    """A lab database, opened (and created when missing) for reading and writing.

    Args:
        path: the sqlite file; its directory is created when missing.
        readonly: open an existing database without creating or writing anything.
        option: the command-line option that named ``path``, which a refusal tells the user to change.

    Raises:
        ValueError: the path cannot be written (or, read-only, does not exist or is a folder); the file
            is not an sqlite database, not a lab database, or has another schema version.
    """

    def __init__(self, path: str | os.PathLike, *, readonly: bool = False, option: str = "--db") -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.option = option
        if readonly:
            if self.path.is_dir():
                raise ValueError(f"database {str(self.path)!r} is a folder, not a lab database")
            if not self.path.is_file():
                raise ValueError(f"database {str(self.path)!r} does not exist")
            self._connection = sqlite3.connect(
                f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60
            )
        else:
            self._connection = self._open_writable()
        try:
            self._check_schema()
            if not readonly:
                self._connection.execute(_CLAIMS)
        except Exception:
            self._connection.close()
            raise

    def _refuse(self, why: str) -> ValueError:
        return ValueError(
            f"database {str(self.path)!r} {why}; it was left unchanged (choose another {self.option})"
        )

    def _open_writable(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"database path {str(self.path)!r} is not writable: {error}") from None
        if self.path.is_dir():
            raise ValueError(f"database path {str(self.path)!r} is a directory")
        if not os.access(self.path.parent, os.W_OK) or (
            self.path.exists() and not os.access(self.path, os.W_OK)
        ):
            raise ValueError(f"database path {str(self.path)!r} is not writable")
        try:
            connection = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            connection.execute("BEGIN IMMEDIATE")  # takes the write lock: fails now on a read-only file
            connection.execute("ROLLBACK")
        except sqlite3.DatabaseError as error:
            raise self._refuse(f"cannot be opened for writing ({error})") from None
        return connection

    def _check_schema(self) -> None:
        try:
            tables = {
                row[0]
                for row in self._connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.DatabaseError as error:
            raise self._refuse(f"is not an sqlite database ({error})") from None
        if not tables:
            if self.readonly:
                raise EmptyDatabase(f"database {str(self.path)!r} holds no lab records")
            with self._transaction():
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        self._connection.execute(statement)
                self._connection.execute(
                    "INSERT OR IGNORE INTO meta VALUES ('schema_version', ?), ('created_by', 'posenc lab')",
                    (str(SCHEMA_VERSION),),
                )
            return
        if "meta" not in tables:
            raise self._refuse("is not a posenc lab database (no meta table)")
        row = self._connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = None if row is None else row[0]
        if version != str(SCHEMA_VERSION):
            raise self._refuse(
                f"has schema version {version}, and this posenc reads version {SCHEMA_VERSION} only",
            )
        self._check_tables(tables)

    def _check_tables(self, tables: set[str]) -> None:
        """Refuse a database whose tables are not those of this schema (before any write fails on them)."""
        for table, columns in _TABLES.items():
            if table not in tables:
                raise self._refuse(f"has no {table} table (a lab database holds {' and '.join(_TABLES)})")
            found = tuple(row[1] for row in self._connection.execute(f"PRAGMA table_info({table})"))
            if found != columns:
                raise self._refuse(
                    f"has a {table} table with columns {', '.join(found)}, not {', '.join(columns)}",
                )

    def _transaction(self):
        connection = self._connection

        class _Transaction:
            def __enter__(self):
                connection.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind, value, traceback):
                connection.execute("COMMIT" if kind is None else "ROLLBACK")
                return False

        return _Transaction()

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def finished(self, config_hash: str) -> bool:
        """Whether the run with this hash is recorded."""
        query = "SELECT 1 FROM runs WHERE config_hash = ?"
        return self._connection.execute(query, (config_hash,)).fetchone() is not None

    def count(self, config_hashes: list[str]) -> int:
        """How many of these runs are recorded."""
        recorded = {row[0] for row in self._connection.execute("SELECT config_hash FROM runs")}
        return len(recorded.intersection(config_hashes))

    def write(
        self,
        *,
        config_hash: str,
        preset: str,
        config: dict,
        status: str,
        metrics: dict,
        timings: dict,
        versions: dict,
        corpus: dict | None,
        reason: str | None = None,
    ) -> bool:
        """Record one run in one transaction; False (and nothing written) when it is already recorded."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
        values = (
            config_hash,
            preset,
            config["task"],
            config["encoding"],
            int(config["seed"]),
            status,
            reason,
            json.dumps(config, sort_keys=True),
            json.dumps(metrics, sort_keys=True),
            json.dumps(timings, sort_keys=True),
            json.dumps(versions, sort_keys=True),
            None if corpus is None else json.dumps(corpus, sort_keys=True),
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        with self._transaction():
            cursor = self._connection.execute(
                "INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values
            )
            self._connection.execute("DELETE FROM claims WHERE config_hash = ?", (config_hash,))
        return cursor.rowcount == 1

    def claim(self, config_hash: str) -> str | None:
        """Claim the run with this hash for this process before training it: None when this process now
        holds it; otherwise why not, :data:`RECORDED` or who is training it ("pid 4242 on host … since …").

        Checked and claimed in one transaction, so of two processes one wins. A claim held by a process
        that has ended on this host (a crash) is stale and taken over; one held on another host is kept.
        """
        me = (os.getpid(), socket.gethostname(), _started(os.getpid()))
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        with self._transaction():
            if self.finished(config_hash):
                return RECORDED
            holder = self._connection.execute(
                "SELECT pid, host, started, claimed_at FROM claims WHERE config_hash = ?", (config_hash,)
            ).fetchone()
            if holder is not None and tuple(holder[:3]) != me and _alive(*holder[:3]):
                return f"being trained by pid {holder[0]} on {holder[1]} since {holder[3]}"
            self._connection.execute(
                "INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?)", (config_hash, *me, now)
            )
        return None

    def release(self, config_hash: str) -> None:
        """Give up this process's claim on the run (it stopped before recording it), if it holds one."""
        with self._transaction():
            self._connection.execute(
                "DELETE FROM claims WHERE config_hash = ? AND pid = ? AND host = ?",
                (config_hash, os.getpid(), socket.gethostname()),
            )

    def rows(self, *, status: str | None = None) -> list[dict]:
        """Every recorded run (optionally only those with ``status``), JSON columns decoded."""
        query = (
            "SELECT * FROM runs" + (" WHERE status = ?" if status else "") + " ORDER BY recorded_at, rowid"
        )
        cursor = self._connection.execute(query, (status,) if status else ())
        names = [column[0] for column in cursor.description]
        result = []
        for values in cursor.fetchall():
            row = dict(zip(names, values, strict=True))
            for column in _COLUMNS:
                row[column] = None if row[column] is None else self._decode(row, column)
            result.append(row)
        return result

    def report_rows(self) -> list[dict]:
        """Every recorded run as :meth:`rows` gives it, each finished one checked to hold what the lab's
        report reads: a damaged record (valid JSON, but ``{}``) is refused here, naming the run, before
        anything is drawn, rather than as a KeyError half-way through the report."""
        rows = self.rows()
        for row in rows:
            damage = _damage(row)
            if damage is not None:
                raise ValueError(
                    f"database {str(self.path)!r}: run {row['config_hash']} ({row['task']}, {row['encoding']}, "
                    f"seed {row['seed']}) {damage}; delete that row or choose another database"
                )
        return rows

    def _decode(self, row: dict, column: str) -> object:
        try:
            return json.loads(row[column])
        except json.JSONDecodeError as error:
            raise ValueError(
                f"database {str(self.path)!r}: run {row['config_hash']} ({row['task']}, {row['encoding']}, "
                f"seed {row['seed']}) has a {column} column that is not valid JSON ({error}); delete that "
                "row or choose another database"
            ) from None


def _started(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot, Linux), which tells it from a later
    process given the same pid; '' where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]  # field 22; the name before ")" may hold spaces


def _alive(pid: int, host: str, started: str) -> bool:
    """Whether the process that made a claim still runs: always assumed on another host, where it cannot
    be seen; on this one, whether ``pid`` exists and (where known) started when the claimant did."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    return not started or _started(pid) in ("", started)


def _damage(row: dict) -> str | None:
    """What a decoded row lacks of what the report reads (``"has metrics without 'eval'"``), or None."""
    for column in ("config", "metrics", "timings", "versions"):
        if not isinstance(row[column], dict):
            return f"has a {column} column that is not a JSON object"
    if row["status"] != "done":
        return None
    for column, entries in _REPORTED.items():
        for key, kind in entries.items():
            if key not in row[column]:
                return f"has {column} without {key!r}"
            if not _is(row[column][key], kind):
                return f"has {column} whose {key!r} is not {_TYPE_NAMES[kind]}, got {row[column][key]!r}"
    if not isinstance(row["metrics"]["relative_position"].get("verdict"), str):
        return "has metrics whose relative_position has no verdict"
    from posenc.lab.tasks import registered

    task = registered(row["task"])  # what an entry that measured something (status "ok") holds
    return _eval_damage(row["metrics"]["eval"], () if task is None else task.metrics)


def _eval_damage(evaluation: dict, measured: tuple[str, ...]) -> str | None:
    """What an evaluation ``{length: entry}`` lacks: lengths that are integers, entries with a status,
    and the measurements of those whose status is "ok"."""
    for length, entry in evaluation.items():
        if not length.isdigit():
            return f"has metrics whose eval length {length!r} is not an integer"
        if not isinstance(entry, dict) or not isinstance(entry.get("status"), str):
            return f"has metrics whose eval entry at length {length} has no status"
        missing = [key for key in measured if entry["status"] == "ok" and key not in entry]
        if missing:
            return f"has metrics whose eval entry at length {length} lacks {', '.join(map(repr, missing))}"
    return None


def _is(value: object, kind: type) -> bool:
    """Whether a decoded JSON value is of ``kind`` (a float may be written as an integer; a bool is no
    number)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float) if kind is float else isinstance(value, kind)
