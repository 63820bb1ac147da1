"""Progress of long work (pre-training, a trial's steps, the search's budget) on a terminal and in a log.

On a terminal it is a rich progress display, redrawn in place. Where the output is a file (`nohup`, a batch
job's log, CI) rich draws nothing until the display stops, so a search logged to a file was silent for the
minutes of a pre-training or a trial (a review, stop 57). There, each task prints a plain line instead: at its
first update, then at most every `every` seconds, and when it completes. A status message ("scoring the base
model ...", a spinner on a terminal) is a line there too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from numbers import Integral
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

EVERY_S = 30.0
"""Seconds between two lines of one task in a log."""


class LineProgress(Progress):
    """A `Progress` that draws nothing and prints one line per task now and then (see the module docstring)."""

    def __init__(self, console: Console, every: float = EVERY_S) -> None:
        super().__init__(console=console, disable=True)
        self.every = every
        self._said: dict[TaskID, float] = {}

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        task = self._tasks[task_id]
        now = time.monotonic()
        done = task.total is not None and task.completed >= task.total
        last = self._said.get(task_id)
        if last is not None and now - last < self.every and not done:
            return
        if done and last == float("inf"):  # its last line is out
            return
        self._said[task_id] = float("inf") if done else now
        if isinstance(task.total, Integral):  # steps, as a count: a 1-step trial read "100%" (stop 57); a share as %
            at = f"{task.completed:.0f}/{task.total:.0f}"
        else:
            at = f"{task.completed / (task.total or 1):.0%}"
        info = task.fields.get("info", "")
        self.console.print(escape(f"{task.description}: {at}" + (f", {info}" if info else "")
                                  + f" ({task.elapsed or 0:.0f}s)"), highlight=False)


def progress_for(console: Console) -> Progress:
    """The progress of `console`: redrawn in place on a terminal, plain lines in a log."""
    if not console.is_terminal:
        return LineProgress(console)
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), console=console)


def status_for(console: Console) -> Callable[[str], AbstractContextManager]:
    """`console.status` on a terminal (a spinner while the block runs); in a log, the message printed once."""
    if console.is_terminal:
        return console.status

    def say(message: str) -> AbstractContextManager:
        console.print(message, highlight=False)
        return nullcontext()

    return say
