"""Start recipes: the project's own recipes, checked against the search space and run first."""

from __future__ import annotations

import pytest
import yaml

from sro.config import ConfigError, load_project
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace, Simplex, SpaceError
from sro.start_recipes import StartRecipeError, next_start, start_recipe, start_recipes

SPACE = RecipeSpace(
    [Param("algorithm", "categorical", choices=["grpo", "proas"]),
     Param("lr", "float", 1e-6, 1e-3, log=True),
     Param("steps", "int", 10, 200),
     Param("proas.lambda", "float", 0.0, 1.0, condition={"algorithm": ["proas"]})],
    [Simplex("mix", ["mix.a", "mix.b"])], fixed={"max_new_tokens": 8})
GOOD = {"algorithm": "proas", "lr": 1e-4, "steps": 50.0, "proas.lambda": 0.5, "mix.a": 0.25, "mix.b": 0.75}


def test_a_start_recipe_becomes_the_canonical_recipe_of_the_space():
    (r,) = start_recipes([GOOD], SPACE, "space v1")
    assert r.values == {**GOOD, "steps": 50} and isinstance(r.values["steps"], int)  # an int's 50.0 is 50
    assert r.fixed == {"max_new_tokens": 8}
    # the same recipe written differently (a fixed setting repeated at its value) has the same key
    assert start_recipe({**GOOD, "steps": 50, "max_new_tokens": 8}, SPACE, "x", "space v1").key == r.key
    # `lr: 1e-4` in YAML is the text '1e-4' (PyYAML wants a dot): read as the number (a review, stop 37)
    assert start_recipe({**GOOD, "lr": "1e-4", "steps": "50"}, SPACE, "x", "space v1").key == r.key


@pytest.mark.parametrize("change, needle", [
    (lambda v: v.pop("lr"), "start_recipes[0]: recipe lacks 'lr' in space v1"),
    # every missing one at once (a recipe written by hand was refused one name per run), a missing
    # parent's children not among them
    (lambda v: [v.pop(k) for k in ("lr", "steps", "algorithm", "proas.lambda")],
     "start_recipes[0]: recipe lacks 'algorithm', 'lr', 'steps' in space v1"),
    (lambda v: v.update(lr=0.1), "lr=0.1 is outside [1e-06, 0.001] in space v1; widen params.lr there to take it, "
                                 "or change the start recipe's lr"),
    (lambda v: v.update(lrr=1e-4), "'lrr' is not a parameter of space v1; did you mean 'lr'?"),
    (lambda v: v.update(max_new_tokens=16), "max_new_tokens is fixed at 8 in space v1, not 16"),
    (lambda v: v.update(algorithm="grpo"), "proas.lambda inactive given the recipe's other settings"),
    (lambda v: v.update({"mix.a": 0.5}), "mix: weights {'mix.a': 0.5, 'mix.b': 0.75} must be >= 0 and sum to 1"),
    # a missing weight is named with the rest (it was named on the next run, as "weights ... must sum to 1")
    (lambda v: v.pop("mix.b"), "start_recipes[0]: recipe lacks 'mix.b' in space v1"),
    (lambda v: [v.pop(k) for k in ("lr", "mix.a", "mix.b")], "recipe lacks 'lr', 'mix.a', 'mix.b' in space v1"),
])
def test_a_start_recipe_outside_the_space_is_refused_saying_what_and_how(change, needle):
    values = dict(GOOD)
    change(values)
    with pytest.raises(StartRecipeError) as e:
        start_recipes([values], SPACE, "space v1")
    assert needle in str(e.value) and isinstance(e.value, SpaceError)  # the CLI's one-line user error


def test_a_fractional_whole_number_setting_of_a_start_recipe_says_so():
    """The start recipe `steps: 36.5` was refused as "steps=36.5 is outside [10, 200]"."""
    with pytest.raises(StartRecipeError) as e:
        start_recipes([{**GOOD, "steps": 36.5}], SPACE, "space v1")
    assert "start_recipes[0]: steps must be a whole number (got 36.5)" in str(e.value)
    assert "outside" not in str(e.value)


def test_next_start_skips_the_recipes_the_study_has_tried():
    a, b = start_recipes([GOOD, {**GOOD, "lr": 2e-4}], SPACE, "space v1")
    assert next_start([a, b], set()) == a
    assert next_start([a, b], {a.key}) == b
    assert next_start([a, b], {a.key, b.key}) is None
    assert next_start([], set()) is None


def _exported(path, values):
    """A recipe file as `sro export` writes it."""
    path.write_text(yaml.safe_dump({"project": {"name": "other"}, "recipe": Recipe(values, {"x": 1}).to_dict(),
                                    "scores": {"d/b": 0.5}, "trial": 3}))


def test_the_project_reads_recipe_files_into_their_values(micro_project, tmp_path):
    (tmp_path / "recipes").mkdir()
    _exported(tmp_path / "recipes" / "ours.yaml", {"lr": 0.002, "steps": 2})
    path = micro_project(extra="start_recipes:\n  - recipes/ours.yaml\n  - {lr: 0.001, steps: 3}\n")
    p = load_project(path)
    assert p.start_recipes == [{"values": {"lr": 0.002, "steps": 2}, "fixed": {"x": 1}}, {"lr": 0.001, "steps": 3}]
    assert p.portable_dump()["start_recipes"] == p.start_recipes  # what the study and `sro export` keep


@pytest.mark.parametrize("entry, needle", [
    ("missing.yaml", "start_recipes[0]: missing.yaml: no such file; write one with `sro export"),
    ("plain.yaml", "start_recipes[0]: plain.yaml: not a recipe file (it needs `project:` and `recipe:`)"),
    ("{lr: [1, 2]}", "start_recipes[0].lr: [1, 2] is not a setting"),
    ("{values: {lr: [0.1]}, fixed: {beta: [0]}}", "start_recipes[0].values.lr: [0.1] is not a setting"),
    ("{values: {lr: 0.1}, fixed: 3}", "`fixed:` is a mapping (got 3)"),
    ("{values: {lr: 0.1}, scores: {a: 1}}", "take no other key and `fixed:` is a mapping (got ['scores'])"),
    ("listfixed.yaml", "start_recipes[0]: listfixed.yaml: recipe: must be a mapping with `values:` (and `fixed:`), "
                       "each a mapping"),  # a list under fixed: was a TypeError traceback (review, stop 30)
    # `fixd:` was ignored and every fixed setting fell back to the defaults (a review, stop 38)
    ("typo.yaml", "start_recipes[0]: typo.yaml: recipe: unknown key 'fixd' (did you mean 'fixed'?); a recipe takes "
                  "only `values:` and `fixed:`"),
    ("folder", "start_recipes[0]: folder: is a folder, not a recipe file"),
    ("broken.yaml", "start_recipes[0]: broken.yaml: malformed YAML at line 2, column 1"),
])
def test_a_bad_start_recipe_entry_is_a_config_error(micro_project, tmp_path, entry, needle):
    (tmp_path / "plain.yaml").write_text("name: not-a-recipe\n")
    (tmp_path / "listfixed.yaml").write_text("project: {name: x}\nrecipe: {values: {lr: 0.0001}, fixed: [1, 2]}\n")
    (tmp_path / "typo.yaml").write_text("project: {name: x}\nrecipe: {values: {lr: 0.0001}, fixd: {beta: 0.1}}\n")
    (tmp_path / "folder").mkdir(exist_ok=True)
    (tmp_path / "broken.yaml").write_text("project: {name: x\n")
    path = micro_project(extra=f"start_recipes:\n  - {entry}\n")
    with pytest.raises(ConfigError) as e:
        load_project(path)
    assert str(e.value).startswith(str(path)) and needle in str(e.value)


def test_an_exported_recipe_takes_the_settings_its_space_fixed_where_this_space_searches_them():
    # exported from a space that fixed the algorithm (the default space fixes grpo) and ProAS's lambda
    exported = {"values": {k: v for k, v in GOOD.items() if k not in ("algorithm", "proas.lambda")},
                "fixed": {"algorithm": "grpo", "proas.lambda": 0.3, "max_new_tokens": 16, "beta": 0.0}}
    (r,) = start_recipes([exported], SPACE, "space v1")
    # algorithm comes from the file; proas.lambda is inactive for grpo; this space fixes max_new_tokens
    # at its own value; beta is no setting of this space's trials
    assert r.values == {**exported["values"], "algorithm": "grpo", "steps": 50}
    assert r.fixed == {"max_new_tokens": 8}
    notes: list[str] = []
    assert start_recipes([exported], SPACE, "space v1", note=notes.append) == [r]
    assert notes == ["start_recipes[0]: the recipe file fixed max_new_tokens=16; space v1 fixes max_new_tokens=8, "
                     "which it trains with; the recipe file fixed beta=0.0, which space v1 neither fixes nor searches "
                     "(its trials take SRO's defaults there; fix them in the space to keep them)"]
    notes.clear()
    start_recipes([{**exported, "fixed": {"algorithm": "grpo", "max_new_tokens": 8}}], SPACE, "v1", note=notes.append)
    assert notes == []  # nothing the file fixed is trained otherwise
    proas = start_recipe({**exported, "fixed": {**exported["fixed"], "algorithm": "proas"}}, SPACE, "x", "v1")
    assert proas.values["algorithm"] == "proas" and proas.values["proas.lambda"] == 0.3
    # the file's values win over its fixed settings; a flat mapping borrows nothing
    assert start_recipe({"values": {**exported["values"], "algorithm": "proas", "proas.lambda": 0.9},
                         "fixed": exported["fixed"]}, SPACE, "x", "v1").values["proas.lambda"] == 0.9
    with pytest.raises(StartRecipeError, match="lacks 'algorithm'"):
        start_recipe(exported["values"], SPACE, "x", "v1")
    # the old space's fixed settings this space does not search are not read, whatever they hold
    assert start_recipe({**exported, "fixed": {**exported["fixed"], "lr_ref_batch": None, "stages": [{"a": 1}]}},
                        SPACE, "x", "v1") == r
    # a fixed setting this space's range excludes: refused, naming where it came from
    # (the file's other fixed settings, which this space does not search, are not named there)
    with pytest.raises(StartRecipeError, match=r"lr=0\.1 is outside .* in v1 \(the recipe file's fixed lr, which "
                                               r"this space searches\); widen params\.lr there"):
        start_recipe({"values": {k: v for k, v in GOOD.items() if k != "lr"}, "fixed": {"lr": 0.1, "beta": 0.0}},
                     SPACE, "x", "v1")
    # a value of the file's own outside the range, beside a borrowed setting: the borrowed one is not blamed (its
    # aside named `algorithm` for a `steps` out of range; a review, stop 58)
    with pytest.raises(StartRecipeError) as e:
        start_recipe({"values": {k: (0.1 if k == "lr" else v) for k, v in GOOD.items() if k != "algorithm"},
                      "fixed": {"algorithm": "proas"}}, SPACE, "x", "v1")
    assert "recipe file's fixed" not in str(e.value) and "widen params.lr there" in str(e.value)
    # either half of the note alone is still said (stop 50's mutation sweep: `differ and unset` survived)
    for fixed, said in (({"algorithm": "grpo", "max_new_tokens": 16}, "fixed max_new_tokens=16; v1 fixes"),
                        ({"algorithm": "grpo", "beta": 0.0}, "fixed beta=0.0, which v1 neither fixes nor searches")):
        notes.clear()
        start_recipe({**exported, "fixed": fixed}, SPACE, "x", "v1", note=notes.append)
        assert len(notes) == 1 and said in notes[0] and notes[0].count("the recipe file fixed") == 1, notes


def test_a_recipe_file_of_another_space_starts_a_study_in_this_one(micro_project, tmp_path):
    _exported(tmp_path / "ours.yaml", {k: v for k, v in GOOD.items() if k != "algorithm"})
    text = (tmp_path / "ours.yaml").read_text().replace("x: 1", "algorithm: proas")
    (tmp_path / "ours.yaml").write_text(text)
    p = load_project(micro_project(extra="start_recipes:\n  - ours.yaml\n"))
    (r,) = start_recipes(p.start_recipes, SPACE, "space v1")
    assert r.values == {**GOOD, "steps": 50}


def test_a_recipe_file_reads_a_yaml_1_1_exponent_as_the_number_it_spells(tmp_path):
    """`lr: 1e-4` by hand in a recipe file is the text '1e-4' to PyYAML: `sro train` refused it while space.yaml and
    start recipes read it (a review, stop 38). A quoted '31' stays text (the trainer refuses it, saying so)."""
    from sro.config import read_recipe_file

    f = tmp_path / "r.yaml"
    f.write_text("project: {name: x}\nrecipe:\n  values: {lr: 1e-4, steps: '31', eps: 2E+1}\n  fixed: {beta: 5e-3}\n")
    doc = read_recipe_file(f, "r.yaml")
    assert doc["recipe"]["values"] == {"lr": 1e-4, "steps": "31", "eps": 20.0} and doc["recipe"]["fixed"] == {"beta": 5e-3}
    from trainers.algorithms import RecipeValueError, config_for

    with pytest.raises(RecipeValueError, match=r"steps='31' must be a number \(it is text: quoted in the YAML\? write 31 "):
        config_for("grpo", {"steps": "31"})
    p = tmp_path / "p.yaml"
    p.write_text("name: x\ndomains: {}\n")
    with pytest.raises(ConfigError, match="it is a project file, which `sro search` runs"):
        read_recipe_file(p, "p.yaml")
