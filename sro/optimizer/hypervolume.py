"""Hypervolume of a search, with BoTorch's own utilities (`botorch.utils.multi_objective`).

Everything here works in the *maximization frame*: minimized objectives (cost) are negated first, so
"larger is better" on every column.

The hypervolume history of a study (`hypervolume_history`) is the dominated hypervolume of the complete
trials among the first k, for every k. Its reference point is inferred from the data, once per history
(`reference_point` over all complete trials): 10% of each objective's observed range below the worst
value seen, so every trial adds volume and the curve rises whenever the front moves. A later trial that
is worse than everything before it moves the reference point, so the history is recomputed as a whole
(it is cheap: a few ms per step for tens of trials) and stored whole. Where the project states a
reference point (`reference_point:` in its YAML: the worst acceptable value of some objectives), those
values are used instead (`study_reference_point`).

The acquisition infers its reference point from the *Pareto front* instead (`front_reference_point`,
botorch's `infer_reference_point`: the front's nadir, 10% of the front's range below it), except for
the cost, which keeps the worst-value rule (`study_reference_point(front=True)`). The worst observed
values are a poor guide to where a score's improvement matters: on a concave front a few extreme
trials (one objective at its best, the other far off) stretch that point so far out that the volume
behind the front's ends dwarfs the middle, and the search kept extending the ends. For the cost the
front's nadir is the wrong guess the other way: it is the price of the dearest Pareto recipe, so a
dearer recipe would count for nothing and the search would never learn that training longer pays.
Measured in docs/optimizer.md (bench/optimizer.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from botorch.utils.multi_objective.box_decompositions.dominated import DominatedPartitioning
from botorch.utils.multi_objective.hypervolume import infer_reference_point
from botorch.utils.multi_objective.pareto import is_non_dominated

from sro.ledger import TrialRecord


def reference_point(Y: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """(n, m) observed outcomes, maximization frame → (m,) point a margin below the worst value.

    `margin` is a fraction of each objective's observed range (of its magnitude, or 1, when the range
    is zero), so every observed point dominates the reference point and adds hypervolume.
    """
    lo, hi = Y.min(dim=0).values, Y.max(dim=0).values
    span = torch.where(hi > lo, hi - lo, lo.abs().clamp_min(1.0))
    return lo - margin * span


def front_reference_point(Y: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """(n, m) observed outcomes, maximization frame → (m,) point `margin` × the Pareto front's range
    below the front's nadir (botorch's `infer_reference_point`); every Pareto point dominates it.

    Where two or more Pareto points tie on an objective (a benchmark every one of them scores 1.0 on), the front
    has no range there, and botorch's point sat 1e-8 below the tie: a candidate a little worse on it added no
    hypervolume however much better it was on the others (a review, stop 52). That objective gets
    `reference_point`'s value instead, a margin below its worst observed value. So does a single Pareto point's
    objective where it scores 0, on which botorch's margin (a tenth of its magnitude) is 1e-8 again; elsewhere a
    single point keeps botorch's margin. Trials that tie on every objective are several Pareto points here (until
    stop 53 they were deduplicated to one, and their ties got botorch's point: a review)."""
    front = Y[is_non_dominated(Y, deduplicate=False)]
    ref = infer_reference_point(front, scale=margin)
    flat = front.max(dim=0).values == front.min(dim=0).values
    degenerate = flat if len(front) > 1 else flat & (front.min(dim=0).values - ref < 1e-6)
    return torch.where(degenerate, reference_point(Y, margin), ref)


def study_reference_point(Y: torch.Tensor, objectives: Sequence[tuple[str, str]],
                          given: Mapping[str, float] | None = None, front: bool = False) -> torch.Tensor:
    """(m,) reference point in the maximization frame: the user's worst acceptable value of an
    objective where `given` names it (natural units and direction, e.g. {"cost": 3600}), else inferred
    from the data: below the worst values (`reference_point`), or, where `front` (the acquisition's),
    below the Pareto front's nadir (`front_reference_point`) for every objective but "cost".
    Y: (n, m) observed outcomes, maximization frame."""
    if not len(Y):
        ref = torch.zeros(len(objectives), dtype=torch.float64)
    elif front:
        ref = front_reference_point(Y)
        for j, (key, _) in enumerate(objectives):
            if key == "cost":  # the dearest Pareto recipe is no limit on what a better one may cost
                ref[j] = reference_point(Y)[j]
    else:
        ref = reference_point(Y)
    for j, (key, d) in enumerate(objectives):
        if given and key in given:
            ref[j] = float(given[key]) * (1.0 if d == "max" else -1.0)
    return ref


def hypervolume(Y: torch.Tensor, ref: torch.Tensor) -> float:
    """Volume dominated by the rows of Y (n, m) (maximization frame) and bounded below by ref (m,).

    Rows that do not strictly dominate ref add nothing and are dropped first.
    """
    Y = torch.as_tensor(Y, dtype=torch.float64)
    ref = torch.as_tensor(ref, dtype=torch.float64)
    Y = Y[(Y > ref).all(dim=-1)]
    if len(Y) == 0:
        return 0.0
    if Y.shape[-1] == 1:  # one objective: the length above ref (BoTorch's partitioning needs two)
        return float(Y.max() - ref[0])
    Y = Y[is_non_dominated(Y)]
    return float(DominatedPartitioning(ref_point=ref, Y=Y).compute_hypervolume())


def hypervolume_curve(Y: torch.Tensor, ref: torch.Tensor) -> list[float]:
    """Hypervolume of the first k rows of Y (n, m), for k = 1 … n."""
    return [hypervolume(Y[: k + 1], ref) for k in range(len(Y))]


def outcomes(records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]]) -> tuple[list[int], torch.Tensor]:
    """Trial numbers and (n, m) maximization-frame outcomes of the complete trials with every
    objective finite, in trial order."""
    nums, rows = [], []
    for r in sorted(records, key=lambda r: r.number):
        if r.state != "complete":
            continue
        y = [r.value(k) * (1.0 if d == "max" else -1.0) for k, d in objectives]
        if all(v == v and abs(v) != float("inf") for v in y):
            nums.append(r.number)
            rows.append(y)
    return nums, torch.tensor(rows, dtype=torch.float64).reshape(len(rows), len(objectives))


def hypervolume_history(records: Sequence[TrialRecord], objectives: Sequence[tuple[str, str]],
                        ref_point: Mapping[str, float] | None = None) -> dict:
    """The study's hypervolume after each complete trial: {"trials": [number, …], "hypervolume": […],
    "ref_point": […] (maximization frame), "objectives": [[key, direction], …], "stated": the project's
    reference point it was computed with}. Empty lists when no trial is complete. `ref_point`: the project's
    reference point (`study_reference_point`)."""
    stated = {k: float(v) for k, v in (ref_point or {}).items()}
    nums, Y = outcomes(records, objectives)
    if not nums:
        return {"trials": [], "hypervolume": [], "ref_point": [], "objectives": [list(o) for o in objectives],
                "stated": stated}
    ref = study_reference_point(Y, objectives, ref_point)
    return {"trials": nums, "hypervolume": [round(v, 10) for v in hypervolume_curve(Y, ref)],
            "ref_point": ref.tolist(), "objectives": [list(o) for o in objectives], "stated": stated}
