from __future__ import annotations

import re

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


def test_a_value_carried_for_an_inactive_parent_activates_nothing():
    """algo=c leaves flag inactive, so flag's child lam is inactive too, whatever value the recipe carries
    for flag (one run before a redesign gave flag its condition): validate agrees with canonical and the
    encoding (until stop 30 it asked for lam, and the trial dropped out of the search's evidence)."""
    from sro.optimizer.encoding import RecipeEncoder

    s = RecipeSpace([Param("algo", "categorical", choices=["a", "c"]),
                     Param("flag", "bool", condition={"algo": ["a"]}),
                     Param("lam", "float", 0, 1, condition={"flag": [True]})])
    v = {"algo": "c", "flag": True}
    s.validate(v)
    assert s.admits(v) and s.canonical(v) == {"algo": "c"}
    assert RecipeEncoder(s).encode(v).tolist() == RecipeEncoder(s).encode({"algo": "c"}).tolist()
    with pytest.raises(SpaceError, match="recipe lacks 'lam'"):
        s.validate({"algo": "a", "flag": True})  # active all the way down: lam is needed


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


def test_a_reason_is_written_as_a_person_reads_it():
    """space.yaml is the file a person reviews: the rules' `2.5e-4·√(1M/N)` came out as `2.5e-4\\xB7\\u221A(1M/N)`
    (a review, stop 57); it reads back the same."""
    space = RecipeSpace([Param("lr", "float", 1e-5, 1e-3, log=True,
                               rationale="2.5e-4·√(1M/N) for a 1M-parameter model")])
    text = space.to_yaml()
    assert "why: 2.5e-4·√(1M/N) for a 1M-parameter model" in text and "\\x" not in text and "\\u" not in text
    assert RecipeSpace.from_yaml(text).param("lr").rationale == space.param("lr").rationale


def test_bad_space_rejected():
    with pytest.raises(SpaceError, match="low <= high"):
        Param("x", "float", 2.0, 1.0)
    with pytest.raises(SpaceError, match="unknown parent"):
        RecipeSpace([Param("x", "float", 0, 1, condition={"nope": [1]})])
    # hand-edited shapes: one-line errors naming the parameter (they used to escape as TypeError or
    # AttributeError tracebacks, which the search does not catch)
    for text, needle in (("params: [lr]", "`params` must be a mapping"),
                         ("params: {lr: 0.1}", "parameter 'lr': must be a mapping"),
                         ("params: {g: {kind: int, low: 1, high: 4, when: 4}}", "`when` must map each parent")):
        with pytest.raises(SpaceError, match=needle):
            RecipeSpace.from_yaml(text)
    with pytest.raises(SpaceError, match="not valid YAML"):  # it used to escape as yaml.YAMLError
        RecipeSpace.from_yaml("params: {lr: [")


def test_a_single_when_value_is_a_one_value_list_not_a_substring():
    """`when: {algorithm: proas}` (a value, not a list) means that value: it used to be tested by
    substring, so algorithm 'as' made the child active."""
    space = RecipeSpace.from_yaml("params:\n  algorithm: {kind: categorical, choices: [as, proas]}\n"
                                  "  lam: {kind: float, low: 0, high: 1, when: {algorithm: proas}}\n")
    lam = space.param("lam")
    assert lam.condition == {"algorithm": ["proas"]}
    assert space.is_active(lam, {"algorithm": "proas"}) and not space.is_active(lam, {"algorithm": "as"})


def test_sobol_proposer_never_repeats_history():
    s = _space()
    prop = SobolProposer(s, seed=1)
    first = prop.propose([], 3)
    hist = [TrialRecord(i, "complete", r) for i, r in enumerate(first)]
    later = prop.propose(hist, 3)
    assert not ({r.key for r in first} & {r.key for r in later})


def test_a_child_listed_before_its_parent_is_decoded_after_it():
    """A hand-edited or LLM-written space may list a conditional parameter before its parent: the space
    orders parents first, so sampling and decoding see the parent (before, half the Sobol rows of this
    space were invalid and `beta` was never active)."""
    space = RecipeSpace([Param("beta", "float", 0.0, 1.0, condition={"algo": ["dpo"]}),
                         Param("algo", "categorical", choices=["sft", "dpo"])])
    assert [p.name for p in space.params] == ["algo", "beta"]
    rows = space.sobol(8, seed=0)
    assert all(space.admits(r) for r in rows) and any("beta" in r for r in rows)
    assert space.from_unit(space.to_unit({"algo": "dpo", "beta": 0.3})) == pytest.approx({"algo": "dpo", "beta": 0.3})
    # a value carried for an inactive child sits at the centre, as the GP's encoder holds it (a review, stop 53)
    assert space.to_unit({"algo": "sft", "beta": 0.9})[1] == 0.5
    with pytest.raises(SpaceError, match="the conditions form a cycle: a -> b -> a"):
        RecipeSpace([Param("a", "bool", condition={"b": [True]}), Param("b", "bool", condition={"a": [True]})])


def test_simplex_weights_must_be_finite_numbers_and_every_corner_decodes():
    space = RecipeSpace([Param("x", "float", 0.0, 1.0)], [Simplex("mix", ["mix.p", "mix.q"])])
    with pytest.raises(SpaceError, match="must be >= 0 and sum to 1"):
        space.validate({"x": 0.5, "mix.p": float("nan"), "mix.q": 1.0})  # NaN passed both comparisons before
    with pytest.raises(SpaceError, match="must be >= 0 and sum to 1"):
        space.validate({"x": 0.5, "mix.p": "0.5", "mix.q": 0.5})
    assert space.from_unit(np.ones(3)) == {"x": 1.0, "mix.p": 0.5, "mix.q": 0.5}  # was NaN weights


def test_canonical_values_give_the_same_key_and_drop_inactive_parameters():
    """What an LLM candidate looks like (every parameter set, numbers of any type) and what the
    study ran are the same recipe once canonical: same key, same values."""
    space = RecipeSpace([Param("algo", "categorical", choices=["sft", "dpo"]),
                         Param("beta", "float", 0.0, 1.0, condition={"algo": ["dpo"]}),
                         Param("steps", "int", 1, 9), Param("wd", "float", 0.0, 0.1), Param("pack", "bool")])
    ran = {"algo": "sft", "steps": 3, "wd": 0.0, "pack": True}
    llm = {"algo": "sft", "beta": 0.77, "steps": 3.0, "wd": 0, "pack": 1, "unknown": 5}
    assert space.canonical(llm) == ran
    assert type(space.canonical(llm)["steps"]) is int and type(space.canonical(llm)["wd"]) is float
    assert Recipe(space.canonical(llm)).key == Recipe(ran).key
    with pytest.raises(SpaceError, match=r"steps must be a whole number \(got 3.5\)"):
        space.canonical({**ran, "steps": 3.5})
    # a numeric categorical: 0 and 0.0 are one choice, given the space's own (the keys used to differ,
    # so an LLM's copy of a run recipe was not recognized)
    grid = RecipeSpace([Param("alpha", "categorical", choices=[0.0, 0.5]), Param("flag", "categorical",
                                                                                   choices=[True, 1])])
    assert Recipe(grid.canonical({"alpha": 0, "flag": 1})).key == Recipe({"alpha": 0.0, "flag": 1}).key
    assert type(grid.canonical({"alpha": 0, "flag": True})["flag"]) is bool  # True is not the choice 1


def test_a_value_of_the_wrong_kind_is_named_as_such_not_as_outside_the_range():
    """steps: 36.5 is inside [21, 50]; it was reported as outside it. A fractional value of an int
    parameter says it must be a whole number, a text for a number that it must be a number."""
    space = RecipeSpace([Param("steps", "int", 21, 50), Param("lr", "float", 1e-4, 1e-2)])
    with pytest.raises(SpaceError, match=r"^steps must be a whole number \(got 36.5\)$"):
        space.validate({"steps": 36.5, "lr": 1e-3})
    with pytest.raises(SpaceError, match=r"^lr must be a number \(got 'fast'\)$"):
        space.canonical({"steps": 30, "lr": "fast"})
    with pytest.raises(SpaceError, match=r"steps=60 is outside \[21, 50\]"):  # a whole number out of range
        space.validate({"steps": 60, "lr": 1e-3})
    assert space.canonical({"steps": 36.0, "lr": 1e-3}) == {"steps": 36, "lr": 1e-3}


def test_a_recipe_key_is_the_settings_that_train():
    """A redesign may move a searched parameter into `fixed` at the value an earlier trial ran: the
    same settings are the same recipe, so it is not proposed again."""
    assert Recipe({"a": 1, "b": "y"}, {"c": 2}).key == Recipe({"a": 1}, {"b": "y", "c": 2}).key
    assert Recipe({"a": 1, "b": "y"}).key != Recipe({"a": 1}, {"b": "z"}).key
    v2 = RecipeSpace([Param("a", "categorical", choices=["a", "b", "c"])], fixed={"b": "y"}, version=2)
    ran = [TrialRecord(i, "complete", Recipe({"a": a, "b": "y"})) for i, a in enumerate("abc")]
    assert SobolProposer(v2, seed=0).propose(ran, 3) == []  # every recipe of v2 has run (it proposed all 3 before)


def test_source_weights_of_a_domain_with_mixture_weight_zero_are_not_part_of_the_recipe():
    """mix.a = 0: domain a draws no prompt, so its source weights train nothing. A search trained one recipe five
    times over, differing only there (a review, stop 38); they are now one recipe. A weight above 0 still counts,
    and another domain's source weights, or a.b's under a domain named a.b, are untouched."""
    def r(mix_a, s0, s1, b0=0.5, **extra):
        return Recipe({"mix.a": mix_a, "mix.b": 1 - mix_a, "src.a.0": s0, "src.a.1": s1, "src.b.0": b0,
                       "src.b.1": 1 - b0, "lr": 1e-3, **extra})

    assert r(0.0, 0.2, 0.8).key == r(0.0, 0.7, 0.3).key == r(0.0, 1.0, 0.0).key
    assert r(0.04, 0.2, 0.8).key != r(0.04, 0.7, 0.3).key
    assert r(0.0, 0.2, 0.8, b0=0.1).key != r(0.0, 0.2, 0.8).key
    assert r(0.0, 0.2, 0.8, lr=2e-3).key != r(0.0, 0.2, 0.8).key
    assert "src.a.0" not in r(0.0, 0.2, 0.8).trained() and "src.b.0" in r(0.0, 0.2, 0.8).trained()
    dotted = Recipe({"mix.a": 0.0, "mix.a.b": 1.0, "src.a.b.0": 0.3, "src.a.b.1": 0.7})
    assert dotted.key != Recipe({"mix.a": 0.0, "mix.a.b": 1.0, "src.a.b.0": 0.6, "src.a.b.1": 0.4}).key


def test_yaml_bounds_written_without_a_dot_are_numbers():
    """PyYAML reads `1e-5` as text; the space takes the number it spells (before: a crash in sampling,
    or a wrong 'needs low <= high' error)."""
    space = RecipeSpace.from_yaml("params:\n  lr: {kind: float, low: 1e-5, high: 1e-3, log: true}\n"
                                  "  n: {kind: int, low: '2', high: 8.0}\n")
    assert (space.param("lr").low, space.param("lr").high) == (1e-5, 1e-3)
    assert (space.param("n").low, space.param("n").high) == (2, 8) and type(space.param("n").high) is int
    assert all(space.admits(r) for r in space.sobol(4, seed=0))
    with pytest.raises(SpaceError, match="low must be a number"):
        RecipeSpace.from_yaml("params:\n  lr: {kind: float, low: small, high: 1e-3}\n")
    with pytest.raises(SpaceError, match="needs whole bounds"):
        RecipeSpace.from_yaml("params:\n  n: {kind: int, low: 1.5, high: 8}\n")


@pytest.mark.parametrize("text, needle", [
    ("version: two\nparams: {lr: {kind: float, low: 0.1, high: 1}}\n", "`version` must be a whole number (got 'two')"),
    ("fixed: [algorithm]\nparams: {lr: {kind: float, low: 0.1, high: 1}}\n", "`fixed` must be a mapping"),
    ("params: {algorithm: {kind: categorical, choices: 'grpo, dapo'}}\n", "a non-empty `choices` list, e.g."),
    ("params: {lr: {kind: float, low: 0.1, high: 1}}\nsimplexes: {m: {members: mix.a}}\n",
     "simplex 'm': `members` must be a list of weight names"),
    ("params: {lr: {low: 0.1, high: 1}}\n", "parameter 'lr': needs a `kind`"),
    ("params: {lr: {kind: float, low: 0.1, high: 1, log: 'false'}}\n", "`log` must be true or false (got 'false')"),
    ("params: {lr: {kind: float, low: 0.1, high: .inf}}\n", "high must be a finite number"),
    ("", "the space searches nothing"),
    ("version: 2\nfixed: {algorithm: grpo}\n", "the space searches nothing"),
    # both searched and fixed: the searched value won without a word (a review, stop 58)
    ("fixed: {algorithm: grpo, lr: 1.0e-4}\nparams: {lr: {kind: float, low: 0.1, high: 1}, "
     "algorithm: {kind: categorical, choices: [grpo, pg]}}\n",
     "algorithm, lr are both searched and fixed (fixed: algorithm: 'grpo', lr: 0.0001); remove each from `params:` "
     "to hold it at that value, or from `fixed:` to search it"),
    ("fixed: {mix.a: 0.5}\nparams: {lr: {kind: float, low: 0.1, high: 1}}\nsimplexes: {m: {members: [mix.a, mix.b]}}\n",
     "mix.a is both searched and fixed"),
])
def test_a_malformed_space_yaml_is_named_not_a_traceback_or_a_wrong_space(text, needle):
    """Hand edits a review found (stop 37): tracebacks (`version: two`, `fixed: [algorithm]`), misleading errors
    (`choices: 'grpo, dapo'` as 'unknown algorithm g'), or a wrong space accepted silently (`log: 'false'` on,
    `high: .inf` sampling inf, a 0-byte file searching nothing)."""
    with pytest.raises(SpaceError, match=re.escape(needle)):
        RecipeSpace.from_yaml(text)


def test_a_choice_listed_twice_is_refused_with_its_name():
    """`choices: [grpo, grpo, dapo]` sampled grpo twice as often as dapo, and encoded it at its first place only
    (a review, stop 53): refused, naming the parameter and the repeat. 0 and 0.0 are one choice (`canonical`
    gives the space's own), True and 1 two (`choice_index` tells them apart)."""
    with pytest.raises(SpaceError, match=re.escape("parameter 'algorithm': choice 'grpo' is listed twice in "
                                                   "['grpo', 'grpo', 'dapo']; list each choice once")):
        RecipeSpace.from_yaml("params: {algorithm: {kind: categorical, choices: [grpo, grpo, dapo]}}\n")
    with pytest.raises(SpaceError, match=re.escape("parameter 'lr_alpha': choice 0.0 is listed twice")):
        Param("lr_alpha", "categorical", choices=[0, 0.5, 0.0])
    assert Param("flag", "categorical", choices=[True, 1]).choices == [True, 1]


# ---------- edges no test pinned (mutation testing, stop 38: each change below passed every test) ----------

def test_a_log_range_decodes_its_top_exactly_and_refuses_a_low_of_zero():
    """exp(log(1e-3)) is 0.0010000000000000002, above the range: the clamp keeps the edge a valid recipe."""
    p = Param("lr", "float", 1e-5, 1e-3, log=True)
    assert p.from_unit(1.0) == 1e-3 and p.from_unit(0.0) == 1e-5
    RecipeSpace([p]).validate({"lr": p.from_unit(1.0)})
    with pytest.raises(SpaceError, match="a log scale needs low > 0"):
        Param("x", "float", 0.0, 1.0, log=True)
    assert Param("x", "float", 1.0, 1.0).from_unit(0.7) == 1.0  # a range of one value is allowed


def test_simplex_weights_must_sum_to_one_within_1e_3():
    space = RecipeSpace([], simplexes=[Simplex("mix", ["mix.a", "mix.b"])])
    space.validate({"mix.a": 0.5, "mix.b": 0.5005})
    with pytest.raises(SpaceError):
        space.validate({"mix.a": 0.5, "mix.b": 0.505})


def test_recipe_keys_tell_floats_apart_at_six_significant_digits_and_values_win_over_fixed():
    assert Recipe({"lr": 0.123451}).key != Recipe({"lr": 0.123459}).key
    assert Recipe({"lr": 0.1234561}).key == Recipe({"lr": 0.1234562}).key
    r = Recipe({"lr": 1e-4}, {"lr": 1e-3})
    assert r.get("lr") == 1e-4 and r.trained()["lr"] == 1e-4 and r.key == Recipe({"lr": 1e-4}).key


def test_decoding_all_zero_simplex_columns_gives_equal_weights():
    """A local move can clip every weight of a simplex to 0: the decoded recipe has equal weights, not NaN."""
    from sro.optimizer.encoding import RecipeEncoder

    space = RecipeSpace([Param("lr", "float", 0.0, 1.0)], simplexes=[Simplex("mix", ["mix.a", "mix.b", "mix.c"])])
    enc = RecipeEncoder(space)
    x = enc.encode({"lr": 0.5, "mix.a": 0.2, "mix.b": 0.3, "mix.c": 0.5})
    block = next(b for b in enc.blocks if b.param is None)
    x[block.cols] = -0.5
    v = enc.decode(x)
    assert [v[m] for m in ("mix.a", "mix.b", "mix.c")] == [round(1 / 3, 6)] * 3
    space.validate(v)
