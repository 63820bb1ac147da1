"""Tests from a mutation review of `sro/space.py`, `sro/optimizer/encoding.py`,
`sro/optimizer/hypervolume.py` and `sro/recipe.py`: each pins behaviour, on hand-made spaces and
hand-computed values, that a simple mutant of those files changed while the other tests still passed."""

from __future__ import annotations

import numpy as np
import pytest

from sro.space import Param, RecipeSpace, Simplex, SpaceError


def _cat_space() -> RecipeSpace:
    return RecipeSpace([Param("lr", "float", 1e-4, 1e-2, log=True),
                        Param("lam", "float", 0.0, 1.0),
                        Param("algo", "categorical", choices=["a", "b", "c"]),
                        Param("bits", "categorical", choices=["4", "8", "16"]),
                        Param("mask", "bool")])


def test_a_categorical_choice_encodes_at_the_centre_of_its_cell_and_decodes_back():
    p = Param("algo", "categorical", choices=["a", "b", "c"])
    assert [p.to_unit(c) for c in ("a", "b", "c")] == pytest.approx([1 / 6, 1 / 2, 5 / 6])
    assert [p.from_unit(p.to_unit(c)) for c in ("a", "b", "c")] == ["a", "b", "c"]
    assert [p.from_unit(u) for u in (0.0, 0.33, 0.34, 0.66, 0.67, 1.0)] == ["a", "a", "b", "b", "c", "c"]


def test_each_integer_gets_an_equal_share_of_the_cube_and_encodes_at_its_centre():
    p = Param("G", "int", 2, 4)  # the cube [0, 1] spans 1.5 … 4.5: a third per integer
    assert [p.to_unit(g) for g in (2, 3, 4)] == pytest.approx([1 / 6, 1 / 2, 5 / 6])
    assert [p.from_unit(u) for u in (0.0, 0.3, 0.36, 0.64, 0.7, 1.0)] == [2, 2, 3, 3, 4, 4]
    counts = np.bincount([p.from_unit(u) for u in (np.arange(300) + 0.5) / 300], minlength=5)
    assert counts[2:].tolist() == [100, 100, 100]


def test_two_simplexes_encode_and_decode_each_in_its_own_columns():
    s = RecipeSpace([Param("lam", "float", 0.0, 1.0)],
                    [Simplex("mix", ["mix.a", "mix.b"]), Simplex("src", ["src.a.0", "src.a.1", "src.a.2"])])
    v = {"lam": 0.25, "mix.a": 0.3, "mix.b": 0.7, "src.a.0": 0.1, "src.a.1": 0.2, "src.a.2": 0.7}
    u = s.to_unit(v)
    assert u.tolist() == pytest.approx([0.25] + [float(np.exp(-w)) for w in (0.3, 0.7, 0.1, 0.2, 0.7)])
    back = s.from_unit(u)
    assert back == pytest.approx(v, abs=1e-6)


def test_canonical_reads_text_numbers_bool_integers_and_keeps_floats_and_numeral_choices():
    s = _cat_space()
    base = {"lr": 1e-3, "lam": 0.25, "algo": "b", "bits": "8", "mask": True}
    assert s.canonical(base) == base
    out = s.canonical({**base, "lr": "2e-3"})
    assert out["lr"] == 2e-3 and isinstance(out["lr"], float)
    assert s.canonical({**base, "bits": "16"})["bits"] == "16"  # a numeral choice is text, not read as 16.0
    assert s.canonical({**base, "mask": 1})["mask"] is True
    assert s.canonical({**base, "mask": 0})["mask"] is False


def test_a_simplex_whose_members_are_not_all_names_is_refused():
    with pytest.raises(SpaceError, match="members"):
        RecipeSpace.from_dict({"simplexes": {"mix": {"members": ["mix.a", 3]}}})


def _enc_space() -> RecipeSpace:
    return RecipeSpace([Param("lam", "float", 0.0, 1.0),
                        Param("algo", "categorical", choices=["a", "b", "c"]),
                        Param("k", "categorical", choices=[1, True])],
                       [Simplex("mix", ["mix.a", "mix.b"])])


def test_the_encoder_tells_true_from_one_and_an_empty_batch_has_no_rows():
    from sro.optimizer.encoding import RecipeEncoder

    enc = RecipeEncoder(_enc_space())  # columns: lam | a b c | 1 True | mix.a mix.b
    v = {"lam": 0.25, "algo": "b", "mix.a": 0.4, "mix.b": 0.6}
    assert enc.encode({**v, "k": 1}).tolist() == [0.25, 0, 1, 0, 1, 0, 0.4, 0.6]
    assert enc.encode({**v, "k": True}).tolist() == [0.25, 0, 1, 0, 0, 1, 0.4, 0.6]
    assert enc.decode(enc.encode({**v, "k": True}))["k"] is True
    assert tuple(enc.encode_many([]).shape) == (0, enc.dim)


def test_decoding_simplex_columns_off_the_simplex_renormalizes_them():
    from sro.optimizer.encoding import RecipeEncoder

    enc = RecipeEncoder(_enc_space())
    x = np.array([0.5, 1, 0, 0, 1, 0, 0.1, 0.3])
    out = enc.decode(x)
    assert out["mix.a"] == pytest.approx(0.25) and out["mix.b"] == pytest.approx(0.75)
    x[6:] = [1.5, 0.5]
    out = enc.decode(x)
    assert out["mix.a"] == pytest.approx(0.75) and out["mix.b"] == pytest.approx(0.25)


def test_perturb_moves_numbers_by_about_sigma_and_redraws_one_hot_blocks_one_hot():
    import torch

    from sro.optimizer.encoding import RecipeEncoder

    enc = RecipeEncoder(_enc_space())
    gen = torch.Generator().manual_seed(1)
    X = torch.tensor([[0.5, 0, 1, 0, 1, 0, 0.4, 0.6]] * 200, dtype=torch.float64)
    Y = enc.perturb(X, 0.01, 1.0, gen)
    assert ((Y >= 0) & (Y <= 1)).all()
    step = (Y[:, [0, 6, 7]] - X[:, [0, 6, 7]]).abs()
    assert 0 < float(step.mean()) < 0.02 and float(step.max()) < 0.06  # |N(0, 0.01)|: mean 0.008
    for cols in (slice(1, 4), slice(4, 6)):  # each block: exactly one 1, and every choice drawn
        assert (Y[:, cols].sum(1) == 1).all() and set(Y[:, cols].flatten().tolist()) == {0.0, 1.0}
        assert (Y[:, cols].sum(0) > 0).all()
    kept = enc.perturb(X, torch.tensor([0.0, 0.1] * 100, dtype=torch.float64), 0.0, gen)
    assert torch.equal(kept[0::2], X[0::2]) and torch.equal(kept[:, 1:6], X[:, 1:6])
    assert torch.equal(enc.perturb(X, 0.0, 0.0, gen), X)


def test_crossover_takes_blocks_whole_and_blends_the_mixture_on_one_line():
    import torch

    from sro.optimizer.encoding import RecipeEncoder

    enc = RecipeEncoder(_enc_space())
    gen = torch.Generator().manual_seed(2)
    A = torch.tensor([[0.2, 1, 0, 0, 1, 0, 0.9, 0.1]] * 100, dtype=torch.float64)
    B = torch.tensor([[0.8, 0, 0, 1, 0, 1, 0.3, 0.7]] * 100, dtype=torch.float64)
    C = enc.crossover(A, B, gen)
    for cols in (slice(0, 1), slice(1, 4), slice(4, 6)):
        whole = (C[:, cols] == A[:, cols]).all(1) | (C[:, cols] == B[:, cols]).all(1)
        assert whole.all()
        assert 0.3 < float((C[:, cols] == A[:, cols]).all(1).double().mean()) < 0.7  # about half from each
    mix = C[:, 6:]
    assert torch.allclose(mix.sum(1), torch.ones(100, dtype=torch.float64))
    t = (mix[:, 0] - 0.3) / (0.9 - 0.3)  # C = t·A + (1 − t)·B, one t per row, in [0, 1]
    assert ((t >= 0) & (t <= 1)).all() and torch.allclose(mix[:, 1], 0.7 + t * (0.1 - 0.7))
    assert float(t.std()) > 0.1


def test_outcomes_keep_only_trials_with_every_objective_finite_and_their_hypervolume_by_hand():
    from sro.ledger import TrialRecord
    from sro.optimizer.hypervolume import hypervolume, hypervolume_history, outcomes
    from sro.recipe import Recipe

    r = Recipe({"lam": 0.5})
    recs = [TrialRecord(0, "complete", r, {"s": 1.0}, {"wall_s": 30.0}),
            TrialRecord(1, "complete", r, {"s": float("nan")}, {"wall_s": 10.0}),
            TrialRecord(2, "complete", r, {"s": 3.0}, {"wall_s": float("inf")}),
            TrialRecord(3, "complete", r, {}, {"wall_s": 10.0}),
            TrialRecord(4, "failed", r, {"s": 9.0}, {"wall_s": 1.0}),
            TrialRecord(5, "complete", r, {"s": 2.0}, {"wall_s": 20.0})]
    objectives = [("s", "max"), ("cost", "min")]
    nums, Y = outcomes(recs, objectives)
    assert nums == [0, 5] and Y.tolist() == [[1.0, -30.0], [2.0, -20.0]]
    # (2, -20) dominates (1, -30); the stated reference (0 score, 40 s) → the box 2 × 20
    assert hypervolume(Y, torch_tensor([0.0, -40.0])) == pytest.approx(40.0)
    assert hypervolume(torch_tensor([[1.0, 2.0], [2.0, 1.0]]), torch_tensor([0.0, 0.0])) == pytest.approx(3.0)
    h = hypervolume_history(recs, objectives, {"s": 0.0, "cost": 40.0})
    assert h["trials"] == [0, 5] and h["hypervolume"] == pytest.approx([10.0, 40.0])
    assert h["ref_point"] == [0.0, -40.0]


def torch_tensor(rows):
    import torch

    return torch.tensor(rows, dtype=torch.float64)


def test_a_recipe_mixture_is_normalized_and_a_recipe_survives_its_dict():
    from sro.recipe import Recipe

    r = Recipe({"mix.a": 1.0, "mix.b": 3.0, "lr": 1e-3}, {"algorithm": "grpo"})
    assert r.mixture(["a", "b"]) == pytest.approx({"a": 0.25, "b": 0.75})
    assert Recipe({"lr": 1e-3}).mixture(["a", "b"]) == pytest.approx({"a": 0.5, "b": 0.5})
    assert Recipe({"mix.a": 0.0, "mix.b": 0.0}).mixture(["a", "b"]) == {"a": 0.0, "b": 0.0}
    back = Recipe.from_dict(r.to_dict())
    assert back == r and back.key == r.key and back.get("algorithm") == "grpo"


@pytest.mark.parametrize("bounds", [{"low": True, "high": 2}, {"low": 0, "high": True}])
def test_a_bool_bound_is_refused(bounds):
    """`low: true` is no number: refused, where until stop 42 it was kept as a bool (an int range [0, 1])."""
    with pytest.raises(SpaceError, match="must be a number"):
        Param("x", "int", **bounds)


def test_to_unit_tells_true_from_one_among_a_categoricals_choices():
    """Choices [1, True]: True sits in the second cell and decodes back to True (list.index read it as 1)."""
    p = Param("k", "categorical", choices=[1, True])
    assert p.to_unit(True) == pytest.approx(0.75) and p.from_unit(p.to_unit(True)) is True
    assert p.to_unit(1) == pytest.approx(0.25) and p.from_unit(p.to_unit(1)) == 1
