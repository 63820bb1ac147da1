"""`Recipe` itself: the key a study's trials are matched by, which must not change between versions, the
mixture it gives the trainer, and its dict form (stop 50's mutation sweep of sro/recipe.py found these unpinned)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from sro.recipe import Recipe


def test_the_key_is_the_first_12_hex_digits_of_the_sorted_settings_sha256() -> None:
    """Studies on disk store keys: a resumed search or a start recipe finds its trial by this key, so the
    recipe below keeps this key in every version (a changed hash length or serialization orphans them)."""
    r = Recipe({"lr": 1e-4, "algorithm": "grpo", "mix.b": 0.75, "mix.a": 0.25}, {"max_new_tokens": 8})
    blob = '{"algorithm": "grpo", "lr": 0.0001, "max_new_tokens": 8, "mix.a": 0.25, "mix.b": 0.75}'
    assert json.loads(blob) == {**r.fixed, **r.values}
    assert r.key == hashlib.sha256(blob.encode()).hexdigest()[:12] == "cddfe4893cf9"
    assert Recipe({"lr": 1.0000001e-4, "algorithm": "grpo", "mix.a": 0.25, "mix.b": 0.75},
                  {"max_new_tokens": 8}).key == r.key  # 6 significant digits


def test_a_recipe_is_frozen_and_hashed_by_its_key() -> None:
    r = Recipe({"lr": 1e-4})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.values = {"lr": 1e-3}  # type: ignore[misc]
    assert hash(r) == hash(r.key) == hash(Recipe({"lr": 1.00000001e-4}))  # the same key: the same hash


def test_mixture_normalizes_the_recipes_domain_weights_with_1_where_it_sets_none() -> None:
    assert Recipe({"mix.a": 1.0, "mix.b": 3.0}).mixture(["a", "b"]) == pytest.approx({"a": 0.25, "b": 0.75})
    # an unset domain weighs 1 before normalizing: (2, 1, 1) / 4; a fixed weight counts like a searched one
    assert Recipe({"mix.a": 2.0}, {"mix.c": 1.0}).mixture(["a", "b", "c"]) == pytest.approx(
        {"a": 0.5, "b": 0.25, "c": 0.25})
    assert Recipe({}).mixture(["a", "b"]) == pytest.approx({"a": 0.5, "b": 0.5})
    assert Recipe({"mix.a": 0.0, "mix.b": 0.0}).mixture(["a", "b"]) == {"a": 0.0, "b": 0.0}  # no division by 0


def test_a_recipe_round_trips_through_its_dict_and_reads_missing_or_null_parts_as_empty() -> None:
    r = Recipe({"lr": 1e-4}, {"max_new_tokens": 8})
    assert Recipe.from_dict(r.to_dict()) == r
    assert Recipe.from_dict({"values": None, "fixed": None}) == Recipe({}) == Recipe.from_dict({})
    assert Recipe.from_dict({"values": {"lr": 1e-4}}).fixed == {}
