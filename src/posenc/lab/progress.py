"""Progress of a sweep: rich bars (overall and per run, with ETA) on a terminal, one line per run elsewhere."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

#: Seconds between refreshes of the overall count (read from the records).
POLL_SECONDS = 2.0


class SweepProgress:
    """Overall runs recorded (polled from the database, so ranks sharing it all count) and the current run.

    Args:
        total: runs in the sweep.
        done: returns how many of them are recorded.
        enabled: rich bars; None means only when the output is a terminal.
        show: False for ranks that should not draw bars (their one-line messages still print).
        log: where the one-line-per-run messages go when bars are off (None: sys.stdout when made).
    """

    def __init__(
        self,
        total: int,
        done: Callable[[], int],
        *,
        enabled: bool | None = None,
        show: bool = True,
        log: TextIO | None = None,
    ) -> None:
        log = sys.stdout if log is None else log  # the stdout of now, not of import time
        self.total, self.done, self.show, self.log = total, done, show, log
        console = Console(file=log)
        self.enabled = show and (console.is_terminal if enabled is None else enabled)
        self._progress = None
        self._polled = 0.0
        self._run_started = 0.0
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
            )
            self._overall = self._progress.add_task("all runs", total=total, completed=done())
            self._run = self._progress.add_task("", total=1, visible=False)

    def __enter__(self) -> SweepProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.update(self._overall, completed=self.done())
            self._progress.stop()

    def start_run(self, label: str, steps: int) -> None:
        self._run_started = time.perf_counter()
        if self._progress is not None:
            self._progress.reset(self._run, total=steps, description=label, visible=True)

    def advance(self, step: int) -> None:
        if self._progress is None:
            return
        self._progress.update(self._run, completed=step)
        now = time.perf_counter()
        if now - self._polled > POLL_SECONDS:
            self._polled = now
            self._progress.update(self._overall, completed=self.done())

    def finish_run(self, label: str, summary: str) -> None:
        seconds = time.perf_counter() - self._run_started
        if self._progress is not None:
            self._progress.update(self._overall, completed=self.done())
            self._progress.console.print(f"{label}: {summary} ({seconds:.0f} s)")
        else:
            print(
                f"[{self.done()}/{self.total}] {label}: {summary} ({seconds:.0f} s)",
                file=self.log,
                flush=True,
            )
