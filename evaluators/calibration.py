"""Step confidence graded against the episode outcome (ALGORITHMS.md §5): AUROC (Mann–Whitney),
expected calibration error (10 equal-width bins), Brier score — pooled over all steps, per step
index and at the first step — and selective execution at a threshold τ.

A record is (episode, step index, stated confidence c_t ∈ [0, 1], episode outcome y ∈ {0, 1}); the
label is always the episode's outcome, never the step's own correctness.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata


@dataclass(frozen=True)
class ConfidenceRecord:
    episode: int
    step: int
    confidence: float
    success: bool


def confidence_question(obs: str, action: str, step: int | None = None, limit: int | None = None,
                        listed: bool = True, earlier_unlisted: int = 0) -> str:
    """The prompt after an action: the agent rates, 0-9, how likely the episode is to succeed.

    With `step` and `limit` the prompt says which step of the step limit this action is: under a step
    limit the chance of success depends on the steps left, which the compact observation does not show.
    `listed` False notes that the command is not one of the observation's choices, and
    `earlier_unlisted` how many of the episode's earlier commands were not: what the environment's
    interface answers when it resolves a command, and what the agent, which sees no history, cannot
    recall. A listed command with no earlier unlisted one reads as before.
    """
    notes = [f"step {step} of {limit}"] if step is not None and limit is not None else []
    if not listed:
        notes.append("not a listed choice")
    if earlier_unlisted:
        notes.append(f"{earlier_unlisted} earlier not listed")
    when = f" ({'; '.join(notes)})" if notes else ""
    return f"{obs}\ndo: {action}{when}\nsuccess 0-9?"


def parse_confidence(text: str) -> float | None:
    """A stated digit d ↦ (d + 0.5)/10, the centre of its calibration bin; None unless the answer's
    first line is one digit 0-9 (until stop 25 the first digit anywhere: "0.9" read as 0, "10" as 1)."""
    lines = text.strip().splitlines()
    m = re.fullmatch(r"\s*(\d)\s*\.?\s*", lines[0]) if lines else None
    return (int(m.group(1)) + 0.5) / 10 if m else None


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """P(score of a random positive > score of a random negative), ties counting ½ (Mann–Whitney U
    from average ranks). NaN when a class is absent."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0 or not np.isfinite(s).all():
        return float("nan")
    ranks = rankdata(s)  # average ranks handle ties
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def ece(probs: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float:
    """Σ_b (n_b/N)·|mean(y in b) − mean(c in b)| over equal-width bins of [0, 1] (1.0 in the last bin); NaN
    without records or with a confidence that is not a number."""
    p = np.asarray(probs, dtype=float)
    y = np.asarray(labels, dtype=float)
    if p.size == 0 or not np.isfinite(p).all():  # a NaN fell in no bin yet counted in N (a review, stop 37)
        return float("nan")
    p = np.clip(p, 0.0, 1.0)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            total += m.sum() / p.size * abs(y[m].mean() - p[m].mean())
    return float(total)


def brier(probs: Sequence[float], labels: Sequence[bool]) -> float:
    p = np.asarray(probs, dtype=float)
    y = np.asarray(labels, dtype=float)
    return float(((p - y) ** 2).mean()) if p.size else float("nan")


def _block(recs: Sequence[ConfidenceRecord]) -> dict[str, float]:
    c = [r.confidence for r in recs]
    y = [r.success for r in recs]
    return {"auroc": auroc(c, y), "ece": ece(c, y), "brier": brier(c, y), "n": float(len(recs))}


def selective(records: Sequence[ConfidenceRecord], tau: float,
              outcomes: Mapping[int, bool] | None = None) -> dict[str, float]:
    """Act only while c_t ≥ τ: an episode whose confidence ever drops below τ is handed off.

    Returns coverage (share of episodes executed to the end), success among executed episodes and
    the overall success rate beside it. `outcomes` (episode → success) names every episode played: one
    with no step record (the environment failed at reset) is not executed and counts in both shares
    (without it, only the episodes with records count: one won episode beside one that crashed at reset
    read `success_all` 1.0). NaN where there are no episodes.
    """
    eps: dict[int, list[ConfidenceRecord]] = {}
    for r in records:
        eps.setdefault(r.episode, []).append(r)
    won = {i: rs[0].success for i, rs in eps.items()} | dict(outcomes or {})
    executed = [i for i, rs in eps.items() if all(r.confidence >= tau for r in rs)]
    n, nan = len(won), float("nan")
    succ_exec = sum(won[i] for i in executed) / len(executed) if executed else nan
    return {"tau": tau, "coverage": len(executed) / n if n else nan, "success_executed": succ_exec,
            "success_all": sum(won.values()) / n if n else nan}


def calibration_report(records: Sequence[ConfidenceRecord], tau: float = 0.5,
                       max_step_index: int | None = None,
                       outcomes: Mapping[int, bool] | None = None) -> dict[str, object]:
    """Pooled, first-step and per-step AUROC/ECE/Brier (every step index the episodes reached, or
    those below `max_step_index`), and selective execution at τ (over the episodes `outcomes` names,
    see `selective`)."""
    per_step = {}
    for t in sorted({r.step for r in records}):
        if max_step_index is None or t < max_step_index:
            per_step[t] = _block([r for r in records if r.step == t])
    return {"pooled": _block(records), "first_step": _block([r for r in records if r.step == 0]),
            "per_step": per_step, "selective": selective(records, tau, outcomes)}
