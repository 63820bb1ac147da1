"""Non-dominated sorting for the report and the terminal table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sro.ledger import TrialRecord


def pareto_mask(points: np.ndarray, maximize: list[bool]) -> np.ndarray:
    """(n, k) objective values → (n,) bool, True where no other point is at least as good on every
    objective and strictly better on one."""
    pts = np.asarray(points, dtype=float)
    if pts.size == 0:
        return np.zeros(0, dtype=bool)
    signed = pts * np.where(maximize, 1.0, -1.0)  # now larger is better everywhere
    ge = (signed[None, :, :] >= signed[:, None, :]).all(-1)  # ge[i, j]: j at least as good as i
    gt = (signed[None, :, :] > signed[:, None, :]).any(-1)
    dominated = (ge & gt).any(axis=1)
    return ~dominated


def front_numbers(records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]]) -> set[int]:
    """Numbers of the complete trials on the Pareto front of `objectives` ((key, "max"|"min") pairs);
    a trial without a value for every objective (recorded before the objectives changed) is left out."""
    done = [r for r in records if r.state == "complete" and all(r.value(k) == r.value(k) for k, _ in objectives)]
    if not done:
        return set()
    pts = np.array([[r.value(k) for k, _ in objectives] for r in done], dtype=float)
    return {r.number for r, on in zip(done, pareto_mask(pts, [d == "max" for _, d in objectives])) if on}
