"""Search budgets: parse `90m`, `2h`, `12trials`, `8gpu-h`, `5Mtok`, and account for what trials spend.

A budget is the total for a study, not for one invocation: a resumed search continues until the
study as a whole has spent it. Several limits can be combined with commas (`2h,20trials`); the
search stops at the first one reached.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

_UNITS = {
    "s": ("wall_s", 1.0),
    "sec": ("wall_s", 1.0),
    "m": ("wall_s", 60.0),
    "min": ("wall_s", 60.0),
    "h": ("wall_s", 3600.0),
    "trial": ("trials", 1.0),
    "trials": ("trials", 1.0),
    "gpu-h": ("gpu_h", 1.0),
    "gpuh": ("gpu_h", 1.0),
    "tok": ("tokens", 1.0),
    "ktok": ("tokens", 1e3),
    "mtok": ("tokens", 1e6),
    "gtok": ("tokens", 1e9),
}
_UNITS |= {alias: _UNITS[unit] for unit, aliases in {  # the spellings people type (`2hours` was refused)
    "s": ("secs", "second", "seconds"), "m": ("mins", "minute", "minutes"), "h": ("hr", "hrs", "hour", "hours"),
    "gpu-h": ("gpu-hour", "gpu-hours", "gpuhour", "gpuhours", "gpu-hr", "gpu-hrs")}.items() for alias in aliases}
_TERM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z-]+)\s*$")
_WALL_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def _compound_wall(term: str) -> str:
    """`1h30m` (wall-time parts one after another, as people write a duration) as the seconds it is, `5400s`;
    any other term as it is."""
    parts = list(_WALL_PART.finditer(term.strip()))
    if len(parts) < 2 or "".join(p.group(0) for p in parts) != term.strip() or any(
            _UNITS.get(p.group(2).lower(), ("",))[0] != "wall_s" for p in parts):
        return term
    return f"{sum(float(p.group(1)) * _UNITS[p.group(2).lower()][1] for p in parts):g}s"


HELP = "use e.g. 90s, 10m, 2h, 6trials, 8gpu-h or 5Mtok (combine with commas: 2h,20trials)"


class BudgetError(ValueError):
    """A budget string that cannot be parsed."""


COSTS = {"wall_s": ("{:.0f}s", "wall time"), "gpu_h": ("{:.2f}", "GPU-hours"), "tokens": ("{:.0f}", "training tokens")}
"""The resources a budget can limit besides the trial count: field → (number format, name)."""


@dataclass(frozen=True)
class Spent:
    """What a study has used so far: the finished trials (and the set-up), and apart from them what
    the trials still in training have used until now."""

    wall_s: float = 0.0
    trials: int = 0
    gpu_h: float = 0.0
    tokens: float = 0.0
    running: int = 0
    """Trials in training now (other workers' on a shared storage, or this worker's own during its
    trial): a trial budget counts them as spent, so N workers do not overshoot it."""
    running_wall_s: float = 0.0
    """Seconds since the running trials were claimed."""
    running_gpu_h: float = 0.0
    """GPU-hours of the running trials so far (as they last recorded it)."""
    running_tokens: float = 0.0
    """Training tokens of the running trials so far (as they last recorded it)."""

    def total(self, cost: str) -> float:
        """`cost` (a key of COSTS) used by the finished and the running trials together."""
        return float(getattr(self, cost)) + float(getattr(self, f"running_{cost}"))

    def finished_only(self) -> Spent:
        return replace(self, running=0, running_wall_s=0.0, running_gpu_h=0.0, running_tokens=0.0)


@dataclass(frozen=True)
class Budget:
    """Limits on a study; `None` means that resource is unlimited."""

    wall_s: float | None = None
    trials: int | None = None
    gpu_h: float | None = None
    tokens: float | None = None
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> Budget:
        limits: dict[str, float] = {}
        given: dict[str, str] = {}  # field → the term that set it
        terms = [t for t in str(text).split(",") if t.strip()]
        if not terms:
            raise BudgetError(f"empty budget; {HELP}")
        for term in terms:
            said, term = term, _compound_wall(term)
            m = _TERM.match(term)
            unit = m.group(2).lower() if m else ""
            if m and m.group(2) in ("M", "K", "G", "k"):  # `5M` read as 5 minutes, beside `5Mtok` in the help (stop 37)
                raise BudgetError(f"budget {term.strip()!r} is ambiguous: write {m.group(1)}m for minutes, or "
                                  f"{m.group(1)}{m.group(2).upper()}tok for training tokens")
            if not m and re.fullmatch(r"\s*-\s*\d.*", term):  # was "cannot parse" (a review, stop 38)
                raise BudgetError(f"budget {term.strip()!r} must be positive; {HELP}")
            if (bare := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*", term)) is not None:
                n = bare.group(1)
                if float(n) <= 0:
                    raise BudgetError(f"budget {n!r} must be positive; {HELP}")
                raise BudgetError(f"budget {n!r} needs a unit: {n}m for minutes, {n}trials, {n}gpu-h or {n}Mtok")
            if not m or unit not in _UNITS:
                raise BudgetError(f"cannot parse budget {term.strip()!r}; {HELP}")
            field, scale = _UNITS[unit]
            value = float(m.group(1)) * scale
            # hundreds of digits read as inf: `int(inf)` was an OverflowError traceback, and with `h` an endless
            # wall-time limit was taken (a review, stop 53)
            if not math.isfinite(value):
                digits = m.group(1)  # some 300 or more: shortened in the one line
                raise BudgetError(f"budget {digits[:6] + '...' + digits[-3:] + m.group(2)!r} (a {len(digits)}-digit "
                                  f"number) is too large to be a limit; write a finite one, e.g. 20{m.group(2)}")
            if value <= 0:
                raise BudgetError(f"budget {term.strip()!r} must be positive; {HELP}")
            if field == "trials" and value != int(value):
                raise BudgetError(f"budget {term.strip()!r}: trials are counted whole; write e.g. "
                                  f"{max(1, int(value))}trials")
            if field in limits:
                what = COSTS[field][1] if field in COSTS else "trials"
                raise BudgetError(f"budget {text!r} limits the {what} twice ({given[field]!r} and "
                                  f"{term.strip()!r}); keep one, e.g. {given[field]!r}")
            limits[field], given[field] = value, said.strip()
        if "trials" in limits:
            limits["trials"] = int(limits["trials"])
        return cls(**limits, text=str(text))  # type: ignore[arg-type]

    def exhausted(self, spent: Spent) -> str | None:
        """The reason the budget is used up, or None if there is room for another trial."""
        if self.trials is not None and spent.trials + spent.running >= self.trials:
            running = f" and {spent.running} running in other workers" if spent.running else ""
            return f"{spent.trials}/{self.trials} trials done{running}"
        return self.over_cost(spent)

    def over_cost(self, spent: Spent) -> str | None:
        """Which wall-time, GPU-hour or token limit the finished and running trials have reached
        together (None if none): the reason a trial in training stops when other workers share it."""
        for cost, (fmt, name) in COSTS.items():
            limit = getattr(self, cost)
            if limit is not None and spent.total(cost) >= limit:
                run = getattr(spent, f"running_{cost}")
                running = f" ({fmt.format(run)} of it by {spent.running} trial(s) still training)" if run else ""
                return f"{fmt.format(spent.total(cost))} of {fmt.format(limit)} {name} spent{running}"
        return None

    def remaining_wall_s(self, spent: Spent) -> float | None:
        return None if self.wall_s is None else max(0.0, self.wall_s - spent.total("wall_s"))

    def fraction_used(self, spent: Spent) -> float:
        """The largest fraction of any limit already spent (for the progress bar); running trials
        count, as they do in `exhausted`."""
        pairs = [
            (spent.trials + spent.running, self.trials),
            *((spent.total(c), getattr(self, c)) for c in COSTS),
        ]
        return max([min(1.0, s / lim) for s, lim in pairs if lim], default=0.0)

    def __str__(self) -> str:
        return self.text
