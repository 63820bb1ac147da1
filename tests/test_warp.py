"""`OutcomeWarp` on hand-computed values, and how `BoTorchProposer(outcome_warp=True)` uses it: the GP on warped
outcomes, the reference point from the raw ones mapped through the warp; no warp with one objective or by default."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from botorch.utils.multi_objective.pareto import is_non_dominated

from sro.ledger import TrialRecord
from sro.optimizer import BoTorchProposer
from sro.optimizer.hypervolume import study_reference_point
from sro.optimizer.warp import OutcomeWarp
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace


def test_warp_on_hand_computed_outcomes() -> None:
    # column 0: mean 2, population std sqrt(8/3), z = ∓sqrt(3/2), 0; column 1 constant: scale 1, z = 0
    Y = torch.tensor([[0.0, 5.0], [2.0, 5.0], [4.0, 5.0]], dtype=torch.float64)
    w = OutcomeWarp.fit(Y)
    assert w.mean.tolist() == pytest.approx([2.0, 5.0])
    assert w.scale.tolist() == pytest.approx([math.sqrt(8 / 3), 1.0])
    b = math.log(1 + math.sqrt(1.5))
    assert w(Y).flatten().tolist() == pytest.approx([-b, 0.0, 0.0, 0.0, b, 0.0])
    # a value outside the data: z = (10 - 2) / sqrt(8/3) = sqrt(24); (7 - 5) / 1 = 2
    assert w(torch.tensor([10.0, 7.0], dtype=torch.float64)).tolist() == pytest.approx(
        [math.log(1 + math.sqrt(24)), math.log(3)])


def test_warp_inverts_keeps_order_and_dominance() -> None:
    g = torch.Generator().manual_seed(0)
    Y = torch.randn(40, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 100.0, 0.01], dtype=torch.float64)
    Y[0, 1] = -1e4  # a long tail
    w = OutcomeWarp.fit(Y)
    W = w(Y)
    assert torch.allclose(w.inverse(W), Y, rtol=1e-9, atol=1e-12)
    for j in range(3):
        assert torch.equal(Y[:, j].argsort(), W[:, j].argsort())
    assert torch.equal(is_non_dominated(Y), is_non_dominated(W))
    z = (Y[0, 1] - Y[:, 1].mean()) / Y[:, 1].std(correction=0)
    assert z < -6 and W[0, 1] == pytest.approx(-math.log1p(-z.item())) and W.abs().max() < 2.1  # the tail shortened


def test_warp_rejects_empty_outcomes() -> None:
    with pytest.raises(ValueError, match=r"\(N, m\) with N >= 1"):
        OutcomeWarp.fit(torch.zeros(0, 2, dtype=torch.float64))


FAST: dict[str, Any] = {"pool_size": 200, "screen": 32, "refine": 0, "fit_iters": 15}  # a small proposal


def _study() -> tuple[RecipeSpace, list[TrialRecord]]:
    space = RecipeSpace([Param("x", "float", 0.0, 1.0), Param("y", "float", 0.0, 1.0)])
    # f has a long bad tail (y near 1), as DTLZ2's corners do
    recs = [TrialRecord(i, "complete", Recipe(v), {"f": -50 * v["y"] ** 4 - (v["x"] - 0.3) ** 2,
                                                   "g": (v["x"] - 0.7) ** 2 + v["y"] ** 2}, {})
            for i, v in enumerate(space.sobol(10, seed=3))]
    return space, recs


def _spy_fit(p: BoTorchProposer) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    fit = p._fit

    def spy(X: torch.Tensor, Y: torch.Tensor) -> Any:
        seen.append(Y.clone())
        return fit(X, Y)

    p._fit = spy
    return seen


def _spy_ref_points(p: BoTorchProposer) -> list[torch.Tensor]:
    refs: list[torch.Tensor] = []
    acq = p._acquisition

    def spy(*args: Any, **kw: Any) -> Any:
        acqf = acq(*args, **kw)
        refs.append(acqf.ref_point.clone())
        return acqf

    p._acquisition = spy
    return refs


@pytest.mark.parametrize("stated", [None, {"f": -5.0, "g": 0.6}])
def test_proposer_fits_warped_outcomes_and_warps_the_raw_reference_point(stated: dict[str, float] | None) -> None:
    """The GP's targets are the warp of the raw outcomes; the acquisition's reference point is the warp of the
    one inferred from (or stated in) the raw outcomes, not one inferred from the warped outcomes."""
    objectives = [("f", "max"), ("g", "min")]
    space, recs = _study()
    p = BoTorchProposer(space, seed=0, objectives=objectives, ref_point=stated, outcome_warp=True, **FAST)
    fits, refs = _spy_fit(p), _spy_ref_points(p)
    assert len(p.propose(recs, 1)) == 1
    raw = torch.tensor([[r.scores["f"], -r.scores["g"]] for r in recs], dtype=torch.float64)
    w = OutcomeWarp.fit(raw)
    assert len(fits) == 1 and torch.allclose(fits[0], w(raw))
    ref_raw = study_reference_point(raw, objectives, stated, front=True)
    assert torch.allclose(refs[0], w(ref_raw))
    if stated is None:  # inferred from the warped outcomes it would be elsewhere
        assert not torch.allclose(refs[0], study_reference_point(w(raw), objectives, None, front=True))
    else:
        assert torch.allclose(w.inverse(refs[0]), torch.tensor([-5.0, -0.6], dtype=torch.float64))


def test_hyperparameters_fitted_on_warped_outcomes_do_not_warm_start_a_proposer_without_the_warp() -> None:
    space, recs = _study()
    kw: dict[str, Any] = {"objectives": [("f", "max"), ("g", "min")], **FAST}
    warped = BoTorchProposer(space, seed=0, outcome_warp=True, **kw)
    plain = BoTorchProposer(space, seed=0, **kw)
    warped.propose(recs, 1)
    plain.propose(recs, 1)
    assert BoTorchProposer(space, **kw, outcome_warp=True).load_warm_state(warped.warm_state())
    assert not BoTorchProposer(space, **kw).load_warm_state(warped.warm_state())
    assert not BoTorchProposer(space, **kw, outcome_warp=True).load_warm_state(plain.warm_state())
    assert "outcome_warp" not in plain.warm_state()["fingerprint"]  # the states saved before the warp still load


@pytest.mark.parametrize("objectives, warp", [([("f", "max")], True), ([("f", "max"), ("g", "min")], False)])
def test_no_warp_with_one_objective_or_by_default(objectives: list[tuple[str, str]], warp: bool) -> None:
    space, recs = _study()
    p = BoTorchProposer(space, seed=0, objectives=objectives, **FAST,
                        **({"outcome_warp": True} if warp else {}))  # two objectives: the default, no warp
    fits, refs = _spy_fit(p), _spy_ref_points(p) if len(objectives) > 1 else []
    assert len(p.propose(recs, 1)) == 1
    raw = torch.tensor([[r.scores[k] * (1 if d == "max" else -1) for k, d in objectives] for r in recs],
                       dtype=torch.float64)
    assert torch.equal(fits[0], raw)
    if refs:
        assert torch.allclose(refs[0], study_reference_point(raw, objectives, None, front=True))
