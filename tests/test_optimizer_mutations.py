"""Tests of BoTorchProposer's bookkeeping that a mutation review found untested: what reaches the acquisition
as pending points and baseline, which trials are modelled, and which candidates survive the pool and screen."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sro.ledger import TrialRecord
from sro.optimizer import BoTorchProposer
from sro.proposers import SobolProposer
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace

OBJ = [("f", "max"), ("g", "max")]


def _space() -> RecipeSpace:
    return RecipeSpace([Param("x", "float", 0.0, 1.0), Param("y", "float", 0.0, 1.0)])


def _scores(v: dict[str, Any]) -> dict[str, float]:
    return {"f": -(v["x"] - 0.3) ** 2 - v["y"] ** 2, "g": -(v["x"] - 0.7) ** 2 - v["y"] ** 2, "h": v["x"] * v["y"]}


def _complete(space: RecipeSpace, n: int, seed: int = 1) -> list[TrialRecord]:
    return [TrialRecord(i, "complete", Recipe(v), _scores(v), {}) for i, v in enumerate(space.sobol(n, seed=seed))]


def _fast(space: RecipeSpace, **kw: Any) -> BoTorchProposer:
    return BoTorchProposer(space, seed=0, **{"objectives": OBJ, "pool_size": 200, "screen": 32, "refine": 0,
                                             "fit_iters": 15, **kw})


def _spy_acquisition(p: BoTorchProposer) -> list[dict[str, Any]]:
    """Record every `_acquisition` call's pending points and ended points, and each later
    `set_X_pending` on the acquisition it built (the multi-objective batch's later picks)."""
    calls: list[dict[str, Any]] = []
    acq = p._acquisition

    def spy(model, X, Y, X_pending, max_pending=0, X_ended=None, warp=None):
        call = {"pending": X_pending, "ended": X_ended, "set": []}
        calls.append(call)
        acqf = acq(model, X, Y, X_pending, max_pending, X_ended, warp)
        orig = acqf.set_X_pending

        def set_X_pending(X_pending=None):
            call["set"].append(None if X_pending is None else X_pending.clone())
            return orig(X_pending)

        acqf.set_X_pending = set_X_pending
        return acqf

    p._acquisition = spy
    return calls


def _contains_row(M: torch.Tensor | None, row: torch.Tensor) -> bool:
    return M is not None and bool(torch.isclose(M, row).all(-1).any())


def test_running_trials_stay_pending_for_every_pick_of_a_batch() -> None:
    """Another worker's running trial is a pending point of the 2nd and 3rd picks too, not only the first."""
    space = _space()
    recs = _complete(space, 8)
    run = Recipe({"x": 0.5, "y": 0.1})
    hist = [*recs, TrialRecord(8, "running", run)]
    x_run = _fast(space).encoder.encode(run.values)
    # two objectives: the later picks' pending points go through set_X_pending
    p = _fast(space)
    calls = _spy_acquisition(p)
    assert len(p.propose(hist, 3)) == 3
    assert len(calls) == 1 and _contains_row(calls[0]["pending"], x_run)
    assert len(calls[0]["set"]) == 2
    for pend in calls[0]["set"]:
        assert _contains_row(pend, x_run), pend
    assert [len(pend) for pend in calls[0]["set"]] == [2, 3]  # the running trial and the earlier picks
    # one objective: a fresh acquisition per pick, each with the running trial pending
    q = _fast(space, objectives=[("f", "max")])
    calls = _spy_acquisition(q)
    assert len(q.propose(hist, 3)) == 3
    assert len(calls) == 3
    for call in calls:
        assert _contains_row(call["pending"], x_run), call["pending"]
    assert [len(c["pending"]) for c in calls] == [1, 2, 3]


def test_encode_latest_keeps_the_latest_max_running_records() -> None:
    """Of more running trials than `max_running`, the latest ones are pending, not the earliest."""
    space = _space()
    p = _fast(space, max_running=2)
    vals = [{"x": 0.1, "y": 0.1}, {"x": 0.2, "y": 0.2}, {"x": 0.3, "y": 0.3}, {"x": 0.4, "y": 0.4}]
    running = [TrialRecord(10 + i, "running", Recipe(v)) for i, v in enumerate(vals)]
    running.insert(2, TrialRecord(20, "running", Recipe({"_trial": 20})))  # no recipe yet: skipped
    got = p._encode_latest(running, 2)
    assert torch.allclose(got, p.encoder.encode_many(vals[2:]))
    assert p._encode_latest(running[:1], 2).shape == (1, 2) and p._encode_latest([], 2) is None
    assert p._encode_latest(running, 0) is None  # none pending (values[-0:] is all)
    # through a proposal: the acquisition's pending points are the two latest running trials
    calls = _spy_acquisition(p)
    p.propose([*_complete(space, 8), *running], 1)
    assert torch.allclose(calls[0]["pending"], p.encoder.encode_many(vals[2:]))


def test_huge_and_infinite_outcomes_are_not_modelled() -> None:
    """A complete trial with an objective beyond ±1e150 (a penalty) or infinite is left out of the GP's data."""
    space = _space()
    recs = _complete(space, 6)
    recs[1] = TrialRecord(1, "complete", recs[1].recipe, {"f": 1e155, "g": 0.0}, {})
    recs[3] = TrialRecord(3, "complete", recs[3].recipe, {"f": 0.0, "g": -float("inf")}, {})
    recs[4] = TrialRecord(4, "complete", recs[4].recipe, {"f": -1e151, "g": 0.0}, {})
    p = _fast(space)
    done, Y = p._targets(recs, OBJ)
    assert [r.number for r in done] == [0, 2, 5] and Y.shape == (3, 2)
    assert bool(Y.abs().max() <= 1e150)
    edge = TrialRecord(6, "complete", recs[0].recipe, {"f": 1e150, "g": -1e150}, {})
    assert [r.number for r in p._targets([edge], OBJ)[0]] == [6]  # exactly ±1e150 still counts


def test_extra_candidates_survive_a_screen_smaller_than_their_number() -> None:
    """All extra candidates pass the pre-screen even when there are more of them than `screen` keeps."""
    space = _space()
    recs = _complete(space, 8)
    extras = [{"x": 0.05 + 0.1 * i, "y": 0.9} for i in range(8)]
    p = _fast(space, screen=4, extra=lambda hist: extras)
    X = p.encoder.encode_many([r.recipe.values for r in recs])
    _, Y = p._targets(recs, OBJ)
    model = p._fit(X, Y)
    X_pool = torch.cat([p.encoder.encode_many(extras), p.encoder.encode_many(space.sobol(40, seed=7))])
    keep = p._prescreen(model, X_pool, keep_first=8)
    assert set(range(8)) <= set(keep.tolist()) and len(keep) == 8
    # through a proposal: every extra reaches the acquisition's candidates
    seen: list[list[dict[str, Any]]] = []
    select = p._select
    p._select = lambda model, X, Y, X_pool, cands, *rest: seen.append(list(cands)) or select(model, X, Y, X_pool,
                                                                                             cands, *rest)
    p.propose(recs, 1)
    keys = {Recipe(c).key for c in seen[0]}
    assert {Recipe(space.canonical(e)).key for e in extras} <= keys


def test_extra_candidates_are_not_repeated_by_the_pool() -> None:
    """The pool leaves out the extra source's recipes (already candidates): no recipe is a candidate twice."""
    space = RecipeSpace([Param("c", "categorical", choices=list("abcdef")), Param("flag", "bool")])
    values = [{"c": c, "flag": f} for c in "abcdef" for f in (False, True)]  # 12 recipes; the pool finds all
    recs = [TrialRecord(i, "complete", Recipe(v), {"s": float(i % 5)}) for i, v in enumerate(values[:6])]
    extra = values[8]
    p = BoTorchProposer(space, seed=0, objectives=[("s", "max")], pool_size=200, refine=0, fit_iters=15,
                        extra=lambda hist: [extra])
    seen: list[tuple[list[dict[str, Any]], set[str]]] = []
    select = p._select
    p._select = lambda model, X, Y, X_pool, cands, known, *rest: seen.append((list(cands), set(known))) or select(
        model, X, Y, X_pool, cands, known, *rest)
    out = p.propose(recs, 6)
    cands, known = seen[0]
    keys = [Recipe(c).key for c in cands]
    assert len(keys) == len(set(keys)) == 6 and Recipe(extra).key in keys
    assert Recipe(extra).key in known  # so a refined point equal to it is not a new candidate either
    assert len({r.key for r in out}) == 6 and not {r.key for r in out} & {r.recipe.key for r in recs}


def test_default_objectives_come_from_complete_trials_only() -> None:
    """Without stated objectives, only complete trials' score keys are objectives (a pruned trial's partial or
    extra scores are not)."""
    space = _space()
    recs = [TrialRecord(r.number, r.state, r.recipe, {"f": r.scores["f"]}) for r in _complete(space, 6)]
    pruned = TrialRecord(6, "pruned", Recipe({"x": 0.5, "y": 0.5}), {"f": 0.1, "early/g": 0.3})
    failed = TrialRecord(7, "failed", Recipe({"x": 0.6, "y": 0.5}), {"h": 0.3})
    running = TrialRecord(8, "running", Recipe({"x": 0.7, "y": 0.5}), {"i": 0.3})
    hist = [*recs, pruned, failed, running]
    assert BoTorchProposer._default_objectives(hist) == [("f", "max")]
    p = BoTorchProposer(space, seed=0, pool_size=200, screen=32, refine=0, fit_iters=15)
    fits: list[int] = []
    fit = p._fit
    p._fit = lambda X, Y: fits.append(Y.shape[1]) or fit(X, Y)
    assert len(p.propose(hist, 1)) == 1
    assert fits == [1]  # the GP is used, on the one objective of the complete trials


def test_running_trials_are_pending_not_ended() -> None:
    """A running trial is a pending point only; the acquisition's ended points are the finished unmodelled ones."""
    space = _space()
    recs = _complete(space, 8)
    running = TrialRecord(8, "running", Recipe({"x": 0.5, "y": 0.1}))
    failed = TrialRecord(9, "failed", Recipe({"x": 0.9, "y": 0.9}))
    p = _fast(space)
    calls = _spy_acquisition(p)
    p.propose([*recs, running], 1)
    assert calls[0]["ended"] is None
    q = _fast(space)
    calls = _spy_acquisition(q)
    q.propose([*recs, running, failed], 1)
    assert torch.allclose(calls[0]["ended"], q.encoder.encode_many([failed.recipe.values]))
    assert torch.allclose(calls[0]["pending"], q.encoder.encode_many([running.recipe.values]))


def test_the_model_is_used_from_exactly_n_init_complete_trials() -> None:
    """With n_init complete trials the GP proposes; with one fewer the Sobol sequence continues."""
    space = _space()
    for n_init, objectives in ((4, OBJ), (5, OBJ), (None, OBJ), (None, [("f", "max")]), (None, [*OBJ, ("h", "min")])):
        need = n_init or max(4, 2 * len(objectives))  # None: 4 for one or two objectives, 2 × m beyond
        for n_done, model_used in ((need - 1, False), (need, True)):
            recs = _complete(space, n_done)
            p = _fast(space, n_init=n_init, objectives=objectives)
            fits: list[int] = []
            fit = p._fit
            p._fit = lambda X, Y, fit=fit, fits=fits: fits.append(len(X)) or fit(X, Y)
            out = p.propose(recs, 1)
            assert fits == ([n_done] if model_used else []), (n_init, n_done)
            if not model_used:
                assert [r.key for r in out] == [r.key for r in SobolProposer(space, seed=0).propose(recs, 1)]


def test_max_running_and_max_ended_cap_their_own_trials() -> None:
    """`max_running` caps the pending points and `max_ended` the ended trials in the baseline, each alone: no
    pending points still leaves the ended trials in the baseline (until stop 42 `max_running` capped both)."""
    space = _space()
    vals = [{"x": 0.1, "y": 0.9}, {"x": 0.2, "y": 0.8}, {"x": 0.3, "y": 0.7}]
    ended = [TrialRecord(10 + i, "pruned", Recipe(v)) for i, v in enumerate(vals)]
    running = TrialRecord(20, "running", Recipe({"x": 0.9, "y": 0.1}))
    for kw, n_pending, ended_rows in [({"max_running": 0}, 0, vals), ({"max_ended": 2}, 1, vals[1:]),
                                      ({"max_ended": 0}, 1, None)]:
        p = _fast(space, **kw)
        calls = _spy_acquisition(p)
        p.propose([*_complete(space, 8), *ended, running], 1)
        pending, got = calls[0]["pending"], calls[0]["ended"]
        assert (0 if pending is None else len(pending)) == n_pending, kw
        if ended_rows is None:
            assert got is None, kw
        else:
            assert torch.allclose(got, p.encoder.encode_many(ended_rows)), kw


@pytest.mark.parametrize("kw", [{"max_running": -1}, {"max_ended": -2}])
def test_negative_caps_are_refused(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(kw))):
        _fast(_space(), **kw)
