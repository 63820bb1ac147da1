"""Processing operators: difficulty band, dedup, length band; the Mixture applies them, and a trial
really draws through them."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from evaluators.sources import Item, SourceSpec, Task, normalize
from trainers import processing
from trainers.mixture import Mixture
from trainers.algorithms import Knob, RecipeValueError
from trainers.processing import OPERATORS, estimate_pass_rates, item_filter, needs_pass_rates, processing_values


class ListTask(Task):
    """Items from a list, repeating; the answer is the question's number."""

    def __init__(self, questions: list[str], name: str = "t") -> None:
        self.spec = SourceSpec("jsonl", name)
        self.qs = questions

    def item(self, idx: int) -> Item:
        q = self.qs[idx % len(self.qs)]
        return Item(q, q.split()[-1], self.spec.key)

    def score(self, item: Item, completion: str) -> float:
        return float(completion.strip() == item.answer)


def test_registry_lists_the_three_operators():
    assert set(OPERATORS.names()) >= {"difficulty", "dedup", "length"}
    d = OPERATORS.get("difficulty").as_dict()
    assert d["needs_pass_rates"] and d["knobs"][0]["low"] == 0.0  # a bound of 0 is kept in the catalog


def test_difficulty_band_keeps_known_items_inside_it():
    rates = {"q 1": 0.0, "q 2": 0.25, "q 3": 0.75, "q 4": 1.0}
    keep = item_filter({"proc.difficulty_low": 0.2, "proc.difficulty_high": 0.8}, lambda: rates)
    got = [q for q in ("q 1", "q 2", "q 3", "q 4", "q 5") if keep(Item(q, "", "s"))]
    assert got == ["q 2", "q 3"]  # q 5 was never estimated: dropped, never let through unknown
    assert needs_pass_rates({"proc.difficulty_high": 0.9}) and not needs_pass_rates({"proc.dedup": True})
    with pytest.raises(ValueError, match="swap"):
        item_filter({"proc.difficulty_low": 0.9, "proc.difficulty_high": 0.1}, lambda: rates)


@pytest.mark.parametrize("values, needle", [
    ({"proc.min_len": 3.7}, "proc.min_len=3.7 must be a whole number"),
    ({"proc.max_len": "long"}, "proc.max_len='long' must be a number"),
    ({"proc.difficulty_low": float("nan")}, "proc.difficulty_low=nan must be a number"),
    ({"proc.dedup": "yes"}, "proc.dedup='yes' must be true or false"),
    ({"proc.max_len": 0}, "proc.max_len=0 must be >= 1"),
    ({"proc.difficulty_low": 1.5}, "proc.difficulty_low=1.5 must be in [0, 1]"),
    ({"proc.max_len": float("inf")}, "proc.max_len=inf must be a finite number"),
    ({"proc.min_len": 9, "proc.max_len": 3}, "proc.min_len=9 is above proc.max_len=3; swap them"),
])
def test_a_bad_processing_value_is_named_by_its_key(values, needle):
    """`proc.min_len: 3.7` used to be cut to 3 by int() and `proc.dedup: 'yes'` silently left dedup off;
    each is now refused by its recipe key, before any item is drawn."""
    with pytest.raises(RecipeValueError) as e:
        item_filter(values, dict)
    assert str(e.value) == f"recipe value {needle}" and set(e.value.keys) <= set(values)


def test_whole_and_zero_one_processing_values_are_read_as_their_kind():
    """36.0 is the whole number 36, and 1 (as a space or a YAML file may give it) switches dedup on; a value
    beyond a knob's search range is a value a trial takes (proc.max_len 200000: no cut)."""
    assert processing_values({"proc.max_len": 36.0, "proc.dedup": 1, "lr": 1e-4}) == {
        "proc.max_len": 36, "proc.dedup": True, "lr": 1e-4}
    assert processing_values({"proc.max_len": 200_000}) == {"proc.max_len": 200_000}
    task = ListTask([f"q {i}" for i in range(4)])
    first = [it.question for _, it in Mixture({"d": [task]}, keep=item_filter({"proc.dedup": 1})).sample(4)]
    assert sorted(first) == ["q 0", "q 1", "q 2", "q 3"]  # each once: dedup is on


def test_a_registered_operators_categorical_and_unbounded_knobs_are_checked_by_kind(monkeypatch):
    """An operator a plugin registers may declare a categorical knob, or a number without bounds: its values
    are checked against its choices, and a number is only checked to be one."""
    from trainers.processing import Operator

    monkeypatch.setattr(OPERATORS, "_items", dict(OPERATORS._items))  # the registration is undone after
    OPERATORS.add("lang", Operator("lang", "keep questions in a language", (
        Knob("proc.lang", "categorical", choices=("en", "de")), Knob("proc.max_words", "int")),
        lambda values, rates: None))
    assert processing_values({"proc.lang": "de", "proc.max_words": 7.0}) == {"proc.lang": "de", "proc.max_words": 7}
    with pytest.raises(RecipeValueError, match=r"proc.lang='fr' must be one of \['en', 'de'\]"):
        processing_values({"proc.lang": "fr"})
    with pytest.raises(RecipeValueError, match="proc.max_words=2.5 must be a whole number"):
        processing_values({"proc.max_words": 2.5})


def test_pass_rates_are_not_computed_unless_a_recipe_asks():
    def boom():
        raise AssertionError("the pass-rate table was built for a recipe without a difficulty band")

    assert item_filter({"lr": 1e-4}, boom) is None
    assert item_filter({"proc.max_len": 5}, boom)(Item("abc", "", "s"))


def test_dedup_draws_each_question_once_per_pass(monkeypatch):
    monkeypatch.setattr(processing, "DEDUP_PATIENCE", 5)
    task = ListTask([f"q {i}" for i in range(4)])
    mix = Mixture({"d": [task]}, keep=item_filter({"proc.dedup": True}))
    first = [it.question for _, it in mix.sample(4)]
    assert sorted(first) == ["q 0", "q 1", "q 2", "q 3"]  # once each ...
    again = [it.question for _, it in mix.sample(4)]
    assert len(set(again)) >= 3  # ... then a new pass starts instead of stalling
    plain = Mixture({"d": [task]})
    assert [it.question for _, it in plain.sample(4)] == first
    # a pass is per source: a tiny source that runs out (and restarts) leaves the other's pass alone
    # (a generator's stream repeats questions, as the big one's does here: each one twice in a row)
    big, tiny = ListTask([f"b {i // 2}" for i in range(80)], "big"), ListTask(["t 0", "t 1"], "tiny")
    mix = Mixture({"d": [big], "e": [tiny]}, keep=item_filter({"proc.dedup": True}), seed=0)
    drawn = [it.question for _, it in mix.sample(60)]
    from_big = [q for q in drawn if q.startswith("b ")]
    assert 20 <= len(from_big) <= 40 and len(set(from_big)) == len(from_big)


def test_length_band_and_source_weights_in_the_mixture():
    short = ListTask(["a 1", "b 2"], "short")
    long = ListTask(["a much longer question 3", "c 3"], "long")
    mix = Mixture({"d": [short, long]}, keep=item_filter({"proc.max_len": 5}), seed=1)
    assert {it.question for _, it in mix.sample(50)} == {"a 1", "b 2", "c 3"}
    assert mix.filtered > 0
    weighted = Mixture({"d": [short, long]}, source_weights={"d": [0.9, 0.1]}, seed=0)
    counts = Counter(t.spec.target for t, _ in weighted.sample(400))
    assert 320 <= counts["short"] <= 395  # ~90% from the first source
    with pytest.raises(ValueError, match="source weights"):
        Mixture({"d": [short, long]}, source_weights={"d": [1.0]})


def test_estimate_pass_rates_counts_verified_samples(monkeypatch):
    """k samples per item, each graded by the task's verifier: a fake sampler solves "q 1" 3 of 4 times."""
    import trainers.rollout

    class Out:
        def __init__(self, texts):
            self.texts = texts

    def fake_generate(model, tok, prompts, group_size=1, **kw):
        texts = []
        for p in prompts:
            ans = p.split()[-1]
            texts += [ans if p.endswith("1") and j < 3 else "x" for j in range(group_size)]
        return Out(texts)

    class Model:
        training = False

        def eval(self):
            pass

        def train(self, mode=True):
            pass

    monkeypatch.setattr(trainers.rollout, "generate", fake_generate)
    monkeypatch.setattr("trainers.prompts.format_prompt", lambda q, tok: q)
    rates = estimate_pass_rates(Model(), None, [ListTask(["q 1", "q 2"])], n_items=6, k=4)
    assert rates == {normalize("q 1"): 0.75, normalize("q 2"): 0.0}


@pytest.mark.slow
def test_a_trial_draws_through_the_recipe_filters(micro_project, tmp_path, monkeypatch):
    """run_trial builds its Mixture with the recipe's proc.* filters and src.* weights."""
    import sro.executor as ex
    from sro.config import load_project
    from sro.recipe import Recipe

    ctx = ex.SearchContext.prepare(load_project(micro_project("proc")), tmp_path / "cache", log=lambda s: None)
    drawn: list[Item] = []

    class Spy(Mixture):
        def sample(self, n):
            out = super().sample(n)
            drawn.extend(it for _, it in out)
            return out

    monkeypatch.setattr(ex, "Mixture", Spy)
    values = {"lr": 1e-4, "steps": 2, "group_size": 2, "prompts_per_step": 4, "proc.dedup": True,
              "proc.difficulty_low": 0.0, "proc.difficulty_high": 0.5}
    ex.run_trial(Recipe(values, {"algorithm": "grpo", "max_new_tokens": 4}), ctx)
    rates = ctx.pass_rates()  # the cached table the trial read
    assert len(drawn) == 8
    qs = [normalize(it.question) for it in drawn]
    assert all(q in rates and rates[q] <= 0.5 for q in qs)  # only estimated items inside the band
    assert len(set(qs)) == len(qs)  # dedup: no question twice in one pass
    assert any(r > 0.5 for r in rates.values()) or len(rates) > len(qs)  # the band had something to drop


def test_an_edited_jsonl_file_gets_a_new_pass_rate_table(tmp_path):
    """The pass-rate cache is keyed on a JSONL source's rows, not only its path: after an edit the
    table is measured again (a stale one left the new questions out of every difficulty band)."""
    import json

    from evaluators.sources import make_task
    from trainers.processing import table_id

    p = tmp_path / "qa.jsonl"
    p.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    before = table_id("model", [make_task(SourceSpec("jsonl", str(p)), seed=0)], 256, 4)
    assert table_id("model", [make_task(SourceSpec("jsonl", str(p)), seed=0)], 256, 4) == before
    p.write_text(json.dumps({"question": "2+2", "answer": "4"}) + "\n")
    assert table_id("model", [make_task(SourceSpec("jsonl", str(p)), seed=0)], 256, 4) != before
    # a local model folder retrained in place is measured again (its path alone was the key until stop 30)
    import os

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"v1")
    tasks = [make_task(SourceSpec("jsonl", str(p)), seed=0)]
    first = table_id(str(model), tasks, 256, 4)
    assert table_id(str(model), tasks, 256, 4) == first
    (model / "model.safetensors").write_bytes(b"v2, longer")
    os.utime(model / "model.safetensors", ns=(1, 1))
    assert table_id(str(model), tasks, 256, 4) != first


def test_a_truncated_pass_rate_table_is_measured_again(tmp_path, monkeypatch):
    """A pass-rate table cut short was a JSONDecodeError on every later search (a review, stop 28): now a miss."""
    import trainers.models
    import trainers.processing as proc
    from evaluators.sources import make_task

    calls: list[str] = []

    def load_policy(path, device, **kw):
        calls.append(path)
        return None, None

    monkeypatch.setattr(trainers.models, "load_policy", load_policy)
    monkeypatch.setattr(proc, "estimate_pass_rates", lambda *a, **k: {"1+1": 0.5})
    tasks = [make_task(SourceSpec("reasoning_gym", "basic_arithmetic"), seed=0)]
    assert proc.pass_rate_table("base", tasks, tmp_path) == {"1+1": 0.5} and len(calls) == 1
    (path,) = tmp_path.glob("passrate-*.json")
    assert proc.pass_rate_table("base", tasks, tmp_path) == {"1+1": 0.5} and len(calls) == 1  # a hit
    path.write_text(path.read_text()[:5])
    assert proc.pass_rate_table("base", tasks, tmp_path) == {"1+1": 0.5} and len(calls) == 2


def test_a_difficulty_band_draws_from_the_rated_items_round_and_round():
    """The pass-rate table rates the first RATED_ITEMS of each stream; a recipe with a band reads those,
    repeated (`Mixture(period=...)`), where it ran past them into unrated items it dropped, and a large
    generator failed the trial after 256 prompts (review, stop 30)."""
    from evaluators.sources import Item, SourceSpec, Task
    from trainers.mixture import Mixture
    from trainers.processing import RATED_ITEMS

    class Endless(Task):  # a generator with more questions than anyone rates
        spec = SourceSpec("reasoning_gym", "endless")

        def item(self, idx: int) -> Item:
            return Item(f"q{idx}", "a", "endless")

    rated = {f"q{i}" for i in range(RATED_ITEMS)}
    keep = lambda it: it.question in rated  # noqa: E731  (what the band's table knows)
    with pytest.warns(RuntimeWarning, match="yields no item"), pytest.raises(RuntimeError, match="no source yields"):
        Mixture({"d": [Endless()]}, seed=0, keep=keep).sample(RATED_ITEMS + 1)
    drawn = [it.question for _, it in Mixture({"d": [Endless()]}, seed=0, keep=keep, period=RATED_ITEMS).sample(600)]
    assert set(drawn) == rated and drawn[:RATED_ITEMS] == [f"q{i}" for i in range(RATED_ITEMS)]


def test_an_inverted_band_is_refused_with_the_recipe_values_before_any_trial():
    """`proc.difficulty_low: 0.9, proc.difficulty_high: 0.1` passed `check_recipe` and failed the trial when its
    mixture was built, after the base model was scored (a review, stop 37); an end left out takes its default."""
    for values, needle in (({"proc.difficulty_low": 0.9, "proc.difficulty_high": 0.1},
                            "proc.difficulty_low=0.9 is above proc.difficulty_high=0.1; swap them"),
                           ({"proc.min_len": 50, "proc.max_len": 10}, "proc.min_len=50 is above proc.max_len=10"),
                           ({"proc.max_len": 0}, "proc.max_len=0 must be >= 1")):
        with pytest.raises(RecipeValueError, match=re.escape(needle)):
            processing_values(values)
    assert processing_values({"proc.difficulty_low": 0.5}) == {"proc.difficulty_low": 0.5}


def test_dedup_beside_a_narrow_band_starts_new_passes_in_time():
    """2 of 256 rated items in the band, with dedup: a new pass waited for 200 repeats (25,600 draws) and the
    mixture gave up at 10,000, failing a trial the band alone trained (a review, stop 37)."""
    task = ListTask([f"q {i}" for i in range(256)])
    band = {"q 3", "q 200"}
    dedup = item_filter({"proc.dedup": True})
    mix = Mixture({"d": [task]}, keep=lambda it: it.question in band and dedup(it), period=256)
    drawn = [it.question for _, it in mix.sample(6)]
    assert Counter(drawn) == {"q 3": 3, "q 200": 3}


# ---------- edges no test pinned (mutation testing, stop 38: each change below passed every test) ----------

def test_the_difficulty_band_includes_both_edges_and_defaults_to_the_whole_range():
    """Pass rates are i/k (0, 0.25, 0.5, ...): they land on a band's edges all the time, so both edges are kept;
    a recipe that sets only the low edge keeps the items every sample solves (rate 1.0)."""
    rates = {"q 1": 0.25, "q 2": 0.5, "q 3": 0.75, "q 4": 1.0}
    keep = item_filter({"proc.difficulty_low": 0.25, "proc.difficulty_high": 0.5}, lambda: rates)
    assert [keep(Item(q, "", "s")) for q in rates] == [True, True, False, False]
    low_only = item_filter({"proc.difficulty_low": 0.5}, lambda: rates)
    assert [low_only(Item(q, "", "s")) for q in rates] == [False, True, True, True]


def test_the_length_band_counts_the_stripped_question_and_includes_both_edges():
    keep = item_filter({"proc.min_len": 3, "proc.max_len": 4})
    assert [keep(Item(q, "", "s")) for q in ("ab", "abc", "  abcd  ", "abcde")] == [False, True, True, False]


def test_dedup_starts_a_new_pass_after_twice_the_distinct_questions_at_least_dedup_min():
    """One question: its new pass begins at the 20th repeat in a row (DEDUP_MIN), the 21st draw. Fifteen:
    at the 30th repeat (twice the distinct count)."""
    one = item_filter({"proc.dedup": True})
    kept = [i for i in range(1, 42) if one(Item("q", "", "s"))]
    assert kept == [1, 21, 41]
    fifteen = item_filter({"proc.dedup": True})
    draws = [f"q{i % 15}" for i in range(15 + 31)]  # 15 new, 30 repeats, then one of the new pass
    kept = [i for i, q in enumerate(draws, 1) if fifteen(Item(q, "", "s"))]
    assert kept == list(range(1, 16)) + [15 + 30, 15 + 31]


def test_the_mixture_reads_the_first_period_items_round_and_round_and_counts_what_it_skips():
    task = ListTask([f"q {i}" for i in range(10)])
    banded = Mixture({"d": [task]}, period=3)
    assert [it.question for _, it in banded.sample(6)] == ["q 0", "q 1", "q 2", "q 0", "q 1", "q 2"]
    clean = Mixture({"d": [task]}, exclude_questions={normalize("q 0")})
    assert clean.sample(1)[0][1].question == "q 1" and clean.skipped == 1


def test_mixture_weights_that_sum_to_zero_are_refused_when_the_mixture_is_made():
    a, b = ListTask(["q 1"], "a"), ListTask(["q 2"], "b")
    with pytest.raises(ValueError, match="mixture weights must be finite, >= 0, with a positive sum"):
        Mixture({"d": [a], "e": [b]}, weights={"d": 0.0, "e": 0.0})
    with pytest.raises(ValueError, match="source weights for 'd' must be 2 finite values >= 0 with a positive sum"):
        Mixture({"d": [a, b]}, source_weights={"d": [0.0, 0.0]})


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_mixture_weights_are_refused_when_the_mixture_is_made(bad):
    """A NaN weight passed `v < 0` and the sum check (NaN compares false), and an infinite one made every
    other weight 0 after the division; both then failed (or drew one domain only) in `random.choices`."""
    a, b = ListTask(["q 1"], "a"), ListTask(["q 2"], "b")
    with pytest.raises(ValueError, match="mixture weights must be finite"):
        Mixture({"d": [a], "e": [b]}, weights={"d": bad, "e": 1.0})
    with pytest.raises(ValueError, match="source weights for 'd' must be 2 finite values"):
        Mixture({"d": [a, b]}, source_weights={"d": [bad, 1.0]})


def test_a_source_the_filters_empty_is_dropped_and_its_share_drawn_from_the_others():
    """A source whose every item a recipe's filters drop failed the whole trial after 10,000 draws, however
    many other sources its domain had (stop 38's note): it is dropped with a warning, its draws go to its
    domain's other sources, a domain left without any to the other domains, and `exhausted` says when."""
    short, ok, other = ListTask(["q 1"], "short"), ListTask(["q 22", "q 23"], "ok"), ListTask(["q 33"], "other")
    keep = lambda it: it.question != "q 1"  # noqa: E731  (the filter empties `short`)
    mix = Mixture({"d": [short, ok]}, seed=0, keep=keep)
    with pytest.warns(RuntimeWarning, match=r"source jsonl:short\S* \(d\) yields no item .* from prompt 0 on"):
        drawn = mix.sample(40)
    assert {t.spec.key for t, _ in drawn} == {ok.spec.key} and len(drawn) == 40
    assert mix.exhausted == {"d.0": 0} and mix.filtered == 10_000
    weighted = Mixture({"d": [short, ok]}, seed=0, keep=keep, source_weights={"d": [3.0, 1.0]})
    two = Mixture({"d": [short], "e": [other]}, seed=1, keep=keep)
    for m in (weighted, two):  # a weighted source, and a domain left with no source at all
        with pytest.warns(RuntimeWarning):
            got = m.sample(30)
        assert len(got) == 30 and m.exhausted == {"d.0": 0}, m.exhausted
    assert {t.spec.key for t, _ in two.sample(5)} == {other.spec.key}
    stuck = Mixture({"d": [short, ok]}, seed=0, keep=keep, source_weights={"d": [1.0, 0.0]})
    with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match=r"no source yields .* \(exhausted: d.0 \(jsonl:short"):
        stuck.sample(1)  # `ok` has weight 0: nothing is left to draw from
    late = Mixture({"d": [ListTask(["q 5"], "late"), ok]}, seed=0,
                   keep=lambda it: it.question != "q 5" or late.drawn < 3)
    with pytest.warns(RuntimeWarning, match="from prompt"):
        late.sample(20)
    assert list(late.exhausted) == ["d.0"] and list(late.exhausted.values())[0] >= 3
    # by its place: the same source in two domains is two streams (of their own seeds: here their own items);
    # emptying one drops it alone (a review, stop 53: by its spec key both were, and b, still yielding, failed)
    in_a, in_b = ListTask(["x 1", "x 2"], "s"), ListTask(["y 1", "y 2"], "s")
    assert in_a.spec.key == in_b.spec.key
    twice = Mixture({"a": [in_a, other], "b": [in_b]}, seed=0, keep=lambda it: not it.question.startswith("x"))
    with pytest.warns(RuntimeWarning, match=r"source jsonl:s\S* \(a\) yields no item"):
        got = twice.sample(40)
    assert list(twice.exhausted) == ["a.0"] and {it.question for _, it in got} == {"q 33", "y 1", "y 2"}
