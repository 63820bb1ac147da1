"""Non-dominated sorting for the report and the terminal table."""

from __future__ import annotations

import numpy as np


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
