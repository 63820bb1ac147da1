"""The two clocks of a trial (ALGORITHMS.md §6).

The progress clock: reward per sample, and a batch that may be scheduled (start small, switch to a
larger batch at a set fraction of the trial) with the learning rate scaled as `lr₀·(N/N₀)^α`.

The failure clock: `FailureClock` watches every step for NaN, an exploding gradient norm or |δ|,
entropy collapse, and reward falling from its peak, and names the first that fires. A trainer stops
when it fires and reports the samples it used; the search records the trial as collapsed.

`run_steps` is the training loop under both clocks, shared by the single-turn and the multi-turn trainer.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class CollapseSettings:
    """When the failure clock fires. Conservative defaults: a trial must be clearly broken."""

    reward_drop: float = 0.5
    """Fire when the smoothed reward stays below (1 − reward_drop)·peak for `patience` steps."""
    min_peak: float = 0.2
    """Reward falling from a peak below this is noise, not collapse."""
    min_entropy: float = 1e-3
    """Fire when the mean token entropy (nats) stays below this for `patience` steps while the
    reward is below its peak (a policy that is certain and getting worse)."""
    peak_margin: float = 0.1
    """For the entropy test, "below its peak" means by more than this share of the peak (and at least
    0.05): a converged policy (certain, and at its best) dips by a sample now and then. Until stop 24
    any dip counted, so a run that had solved its task (smoothed reward 0.99 after a peak of 1.0) was
    stopped as collapsed."""
    max_grad_norm: float = 1e4
    """Fire on a pre-clip gradient norm above this."""
    max_stale_kl: float = 5.0
    """Fire when mean |log π_prox − log μ| exceeds this (the off-policy gap has exploded)."""
    max_delta: float = 5.0
    """Fire when Proximal KL's mean |δ| = |log π_θ − log π_prox| exceeds this (§6: "exploding |δ|"; the
    policy ran away from its proximal anchor). Until stop 25 δ was neither logged nor watched."""
    patience: int = 3
    smoothing: float = 0.5
    """Weight of the newest reward in the exponential moving average."""


class FailureClock:
    """Feed it each step's metrics; `observe` returns a reason string the step the trial collapses."""

    def __init__(self, settings: CollapseSettings | None = None) -> None:
        self.s = settings or CollapseSettings()
        self.ema: float | None = None
        self.peak = -math.inf
        self.low_reward = 0
        self.low_entropy = 0

    def observe(self, m: dict[str, float]) -> str | None:
        s = self.s
        for k in ("loss", "grad_norm", "reward"):
            if k in m and not math.isfinite(m[k]):
                return f"{k} is {m[k]}"
        if m.get("grad_norm", 0.0) > s.max_grad_norm:
            return f"gradient norm exploded ({m['grad_norm']:.3g} > {s.max_grad_norm:g})"
        if m.get("stale_kl", 0.0) > s.max_stale_kl:
            return f"|log π_prox − log μ| exploded ({m['stale_kl']:.3g} > {s.max_stale_kl:g})"
        if m.get("prox_delta_mean", 0.0) > s.max_delta:
            return f"|δ| = |log π_θ − log π_prox| exploded ({m['prox_delta_mean']:.3g} > {s.max_delta:g})"
        r = float(m["reward"])
        self.ema = r if self.ema is None else s.smoothing * r + (1 - s.smoothing) * self.ema
        self.peak = max(self.peak, self.ema)
        below_peak = self.ema < self.peak - max(0.05, s.peak_margin * abs(self.peak))
        fell = self.peak >= s.min_peak and self.ema < (1 - s.reward_drop) * self.peak
        self.low_reward = self.low_reward + 1 if fell else 0
        if self.low_reward >= s.patience:
            return f"reward fell from its peak {self.peak:.3f} to {self.ema:.3f} (smoothed)"
        ent = m.get("entropy")
        self.low_entropy = self.low_entropy + 1 if ent is not None and ent < s.min_entropy and below_peak else 0
        if self.low_entropy >= s.patience:
            return f"entropy collapsed ({ent:.2g} nats/token) while the reward is below its peak"
        return None


@dataclass
class BatchSchedule:
    """Prompts per step as a function of the step, and the learning rate that goes with the batch."""

    prompts_per_step: int
    group_size: int
    steps: int
    switch_at: float = 1.0
    """Fraction of the steps after which the batch grows (1.0: never)."""
    multiplier: int = 1
    """The larger batch is this many times the starting one."""
    lr_alpha: float = 0.0
    """α of lr = lr₀·(N/N₀)^α: 0 keeps lr, 0.5 is the square-root rule, 1 the linear rule."""
    ref_batch: int | None = None
    """N₀, in sequences; default: the starting batch P·G (so lr₀ is the lr of the first phase)."""

    def prompts(self, step: int) -> int:
        """Prompts for 1-based `step`. The first phase has at least one step: with `switch_at · steps` below 1
        (steps 4, switch_at 0.2) the schedule used to start at the larger batch and its scaled lr, where §6
        starts below the critical batch."""
        first = max(1, math.floor(self.switch_at * self.steps))
        switched = self.multiplier > 1 and self.switch_at < 1.0 and step > first
        return self.prompts_per_step * (self.multiplier if switched else 1)

    def lr(self, lr0: float, step: int) -> float:
        n = self.prompts(step) * self.group_size
        n0 = self.ref_batch or self.prompts_per_step * self.group_size
        return lr0 * (n / n0) ** self.lr_alpha


def non_finite_error(e: BaseException) -> bool:
    """Whether an error of a training step is about non-finite values (torch's sampler: "probability tensor
    contains either `inf`, `nan` or element < 0"): a collapse, not a crash. Whole words only; until stop 25
    any message containing "inf" or "nan" (info, inference, nanoseconds) was taken for a collapse."""
    return re.search(r"\b(nan|inf|infinity|non-finite)\b", str(e), re.IGNORECASE) is not None


def run_steps(trainer: Any, cfg: Any, on_step: Callable[[int, dict[str, float]], bool | None] | None = None
              ) -> list[dict[str, float]]:
    """Run `cfg.steps` steps of `trainer` (a `GRPOConfig`'s; `trainer.step()` returns a step's metrics, with
    its `reward`, and `trainer` has a `FailureClock` as `clock`, `collapse` and `samples`) and return their
    metrics. `on_step(step, metrics)` returning True stops early; so does the failure clock, unless
    `cfg.stop_on_collapse` is off (then `trainer.collapse` says why), and the time limit `cfg.max_seconds`.
    Each step's metrics get the progress clock's `reward_gain_per_ksample`. Until stop 53 the multi-turn
    trainer had no failure clock: an agent recipe's `collapse.*` settings were accepted and never read (a
    review)."""
    history: list[dict[str, float]] = []
    t0 = time.monotonic()
    first_reward: float | None = None
    for s in range(1, cfg.steps + 1):
        try:
            m = trainer.step()
        except RuntimeError as e:  # e.g. sampling from a policy whose weights went non-finite
            if not non_finite_error(e):
                raise
            trainer.collapse = f"the step failed on non-finite values: {e}"
            history.append({"step": s, "collapsed": 1.0, "samples": trainer.samples})
            if on_step is not None:
                on_step(s, history[-1])
            break
        m["step"] = s
        m["wall_s"] = time.monotonic() - t0
        if first_reward is None:
            first_reward = m["reward"]
        reason = trainer.clock.observe(m)
        # the progress clock: smoothed reward gained per thousand samples paid for
        ema = trainer.clock.ema if trainer.clock.ema is not None else m["reward"]
        m["reward_gain_per_ksample"] = (ema - first_reward) / max(1e-9, trainer.samples / 1000)
        if reason and trainer.collapse is None:
            trainer.collapse = reason
            m["collapsed"] = 1.0
        history.append(m)
        if on_step is not None and on_step(s, m):
            break
        if trainer.collapse and cfg.stop_on_collapse:
            break
        if cfg.max_seconds is not None and m["wall_s"] >= cfg.max_seconds:
            break
    return history
