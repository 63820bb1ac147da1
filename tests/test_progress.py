"""Progress in a log: a search whose output is a file printed nothing for the minutes of a pre-training or a
trial (rich draws a live display only on a terminal; a review, stop 57)."""

from __future__ import annotations

import io

from rich.console import Console

import sro.progress as progress_mod
from sro.progress import LineProgress, progress_for, status_for


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_a_task_in_a_log_says_where_it_is_now_and_then_and_when_done(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_mod, "time", clock)
    out = io.StringIO()
    p = progress_for(Console(file=out, width=200))
    assert isinstance(p, LineProgress)
    with p:
        t = p.add_task("pre-training tiny", total=800, info="")
        for step in range(1, 801):  # 1/8 s a step: 100 s in all
            clock.now += 0.125
            p.update(t, completed=step, info=f"loss {1 / step:.3f}")
        bar = p.add_task("search", total=1.0, info="6trials")
        p.update(bar, completed=0.5, info="3 trials")
        one = p.add_task("trial 3", total=1, info="")  # a one-step trial: a count too, not "100%"
        p.update(one, completed=1, info="reward 0.5")
    lines = out.getvalue().splitlines()
    # the first step, then every 30 s (steps 241, 481, 721), then the last; a fraction as a percentage
    assert [line.split(",")[0] for line in lines] == [f"pre-training tiny: {s}/800" for s in (1, 241, 481, 721, 800)] + [
        "search: 50%", "trial 3: 1/1"], lines
    assert lines[4].startswith("pre-training tiny: 800/800, loss 0.001 (") and lines[5].startswith("search: 50%, 3 trials (")
    p.update(t, completed=800)  # done already: said once
    assert len(out.getvalue().splitlines()) == 7


def test_a_log_gets_the_status_line_a_terminal_shows_as_a_spinner():
    out = io.StringIO()
    with status_for(Console(file=out, width=200))("scoring the base model on the held-out benchmarks ..."):
        pass
    assert out.getvalue() == "scoring the base model on the held-out benchmarks ...\n"
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert status_for(terminal) == terminal.status and not isinstance(progress_for(terminal), LineProgress)
