from __future__ import annotations

import numpy as np
import pytest

from sro.proposers import SobolProposer
from sro.ledger import TrialRecord
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace, Simplex, SpaceError


def _space() -> RecipeSpace:
    return RecipeSpace(
        params=[
            Param("lr", "float", 1e-4, 1e-2, log=True, rationale="log"),
            Param("G", "int", 2, 16),
            Param("algorithm", "categorical", choices=["grpo", "proas"]),
            Param("lam", "float", 0.0, 1.0, condition={"algorithm": ["proas"]}),
            Param("mask", "bool"),
        ],
        simplexes=[Simplex("mixture", ["mix.a", "mix.b", "mix.c"])],
        fixed={"max_new_tokens": 8},
    )


def test_unit_round_trip():
    s = _space()
    v = {"lr": 1e-3, "G": 7, "algorithm": "proas", "lam": 0.25, "mask": True,
         "mix.a": 0.2, "mix.b": 0.3, "mix.c": 0.5}
    back = s.from_unit(s.to_unit(v))
    assert back["lr"] == pytest.approx(1e-3) and back["G"] == 7 and back["algorithm"] == "proas"
    assert back["lam"] == pytest.approx(0.25) and back["mask"] is True
    assert [back[k] for k in ("mix.a", "mix.b", "mix.c")] == pytest.approx([0.2, 0.3, 0.5], abs=1e-5)


def test_log_scale_midpoint_is_geometric():
    assert _space().param("lr").from_unit(0.5) == pytest.approx(1e-3)


def test_inactive_conditional_left_out():
    s = _space()
    u = np.full(s.dim, 0.1)  # algorithm → grpo
    v = s.from_unit(u)
    assert v["algorithm"] == "grpo" and "lam" not in v
    s.validate(v)


def test_sobol_points_are_valid_distinct_and_resumable():
    s = _space()
    pts = s.sobol(16, seed=3)
    for v in pts:
        s.validate(v)
        assert sum(v[m] for m in ("mix.a", "mix.b", "mix.c")) == pytest.approx(1.0, abs=1e-5)
    assert len({Recipe(v).key for v in pts}) == 16
    assert s.sobol(4, seed=3, skip=8) == pts[8:12]
    ints = {v["G"] for v in pts}
    assert min(ints) >= 2 and max(ints) <= 16 and len(ints) > 5


def test_validate_names_the_bad_value():
    s = _space()
    v = s.sobol(1, seed=0)[0]
    v["lr"] = 1.0
    with pytest.raises(SpaceError, match=r"lr=1.0 is outside \[0.0001, 0.01\]"):
        s.validate(v)


def test_yaml_round_trip_keeps_rationale_and_edits():
    s = _space()
    text = s.to_yaml()
    assert "why: log" in text
    edited = RecipeSpace.from_yaml(text.replace("high: 16", "high: 4"))
    assert edited.param("G").high == 4
    assert edited.param("lam").condition == {"algorithm": ["proas"]}
    assert all(v["G"] <= 4 for v in edited.sobol(32, seed=0))


def test_bad_space_rejected():
    with pytest.raises(SpaceError, match="low <= high"):
        Param("x", "float", 2.0, 1.0)
    with pytest.raises(SpaceError, match="unknown parent"):
        RecipeSpace([Param("x", "float", 0, 1, condition={"nope": [1]})])


def test_sobol_proposer_never_repeats_history():
    s = _space()
    prop = SobolProposer(s, seed=1)
    first = prop.propose([], 3)
    hist = [TrialRecord(i, "complete", r) for i, r in enumerate(first)]
    later = prop.propose(hist, 3)
    assert not ({r.key for r in first} & {r.key for r in later})
