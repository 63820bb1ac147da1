"""Edges of the data path no test pinned: a mutation review of `trainers/processing.py`, `trainers/mixture.py`
and `evaluators/benchmark.py` found each change below passing every other test."""

from __future__ import annotations

import pytest

from evaluators.benchmark import Benchmark
from evaluators.sources import Item, SourceSpec, Task, normalize
from trainers.mixture import Mixture
from trainers.processing import LIMITS, OPERATORS, estimate_pass_rates, item_filter, pass_rate_table, processing_values


class ListTask(Task):
    """Items from a list, repeating; the answer is the question's last word. A completion earns the
    fraction of the answer's characters it starts with (partial credit), 1.0 for the whole answer."""

    def __init__(self, questions: list[str], name: str = "t") -> None:
        self.spec = SourceSpec("jsonl", name)
        self.qs = questions

    def item(self, idx: int) -> Item:
        q = self.qs[idx % len(self.qs)]
        return Item(q, q.split()[-1], self.spec.key)

    def score(self, item: Item, completion: str) -> float:
        c, a = completion.strip(), item.answer
        n = next((i for i, (x, y) in enumerate(zip(c, a)) if x != y), min(len(c), len(a)))
        return n / len(a)


def _keeps(keep, rates_or_questions):
    return [keep(Item(q, "", "s")) for q in rates_or_questions]


# ---------- processing: the bands ----------

def test_a_band_whose_two_ends_are_equal_keeps_exactly_that_value():
    """`proc.min_len: 3, proc.max_len: 3` is a valid band (both edges are kept), not an inverted one."""
    keep = item_filter({"proc.min_len": 3, "proc.max_len": 3})
    assert _keeps(keep, ("ab", "abc", "abcd")) == [False, True, False]
    rates = {"q 1": 0.25, "q 2": 0.5, "q 3": 0.75}
    band = item_filter({"proc.difficulty_low": 0.5, "proc.difficulty_high": 0.5}, lambda: rates)
    assert _keeps(band, rates) == [False, True, False]


def test_one_end_of_a_band_given_leaves_the_other_end_open():
    """An end a recipe leaves out is the widest one: a pass rate of 0 for a band with only a high edge, no
    upper length for one with only `proc.min_len`, and `proc.min_len: 0` (the knob's own low bound) is accepted."""
    rates = {"q 1": 0.0, "q 2": 0.5, "q 3": 0.75}
    assert processing_values({"proc.difficulty_high": 0.5}) == {"proc.difficulty_high": 0.5}
    high_only = item_filter({"proc.difficulty_high": 0.5}, lambda: rates)
    assert _keeps(high_only, rates) == [True, True, False]
    min_only = item_filter({"proc.min_len": 3})
    assert _keeps(min_only, ("ab", "abc", "a question of forty or so characters, long")) == [False, True, True]
    assert processing_values({"proc.min_len": 0}) == {"proc.min_len": 0}
    assert item_filter({"proc.min_len": 0, "proc.max_len": 1})(Item("a", "", "s"))


def test_an_item_is_kept_only_when_every_operator_the_recipe_switches_on_keeps_it():
    rates = {"short": 0.5, "a long question": 0.5, "low": 0.0}
    keep = item_filter({"proc.max_len": 5, "proc.difficulty_low": 0.25}, lambda: rates)
    assert _keeps(keep, rates) == [True, False, False]  # the second fails the length, the third the band


def test_the_operators_search_ranges_are_values_a_trial_accepts():
    """A knob's range is where a search samples: a range that is empty, or reaches values `LIMITS` refuses,
    makes the search propose recipes that cannot run (or only one value)."""
    for name in ("difficulty", "length"):
        for knob in OPERATORS.get(name).knobs:
            low, high = LIMITS[knob.name]
            assert knob.low is not None and knob.high is not None and knob.low < knob.high, knob
            assert knob.low >= low and (high is None or knob.high <= high), knob
            assert processing_values({knob.name: knob.low}) and processing_values({knob.name: knob.high})


# ---------- processing: the pass-rate table ----------

class _Model:
    training = True

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode


def _fake_sampler(monkeypatch, calls):
    """A sampler that solves "q 1" always, "q 2" in the first of each item's samples, "q 3" never."""
    import trainers.rollout

    class Out:
        def __init__(self, texts):
            self.texts = texts

    def generate(model, tok, prompts, group_size=1, **kw):
        calls.append({"group_size": group_size, **kw})
        texts = []
        for p in prompts:
            ans = p.split()[-1]
            texts += [ans if p == "q 1" or (p == "q 2" and j == 0) else "x" for j in range(group_size)]
        return Out(texts)

    monkeypatch.setattr(trainers.rollout, "generate", generate)
    monkeypatch.setattr("trainers.prompts.format_prompt", lambda q, tok: q)


def test_pass_rates_are_estimated_from_several_sampled_completions_by_default(monkeypatch, tmp_path):
    """What a search reads (`pass_rate_table` with its defaults, as `SearchContext.pass_rates` calls it): k > 1
    samples per item at a temperature above 0; one sample, or greedy ones (all alike), give rates of 0 or 1 only,
    and no difficulty band between them keeps anything."""
    import trainers.models

    calls: list[dict] = []
    _fake_sampler(monkeypatch, calls)
    model = _Model()
    monkeypatch.setattr(trainers.models, "load_policy", lambda path, device, **kw: (model, None))
    monkeypatch.setattr(trainers.models, "model_fingerprint", lambda path: "fp")
    monkeypatch.setattr("trainers.processing.model_fingerprint", lambda path: "fp")
    task = ListTask(["q 1", "q 2", "q 3"])
    rates = pass_rate_table("base", [task], tmp_path)
    k = calls[0]["group_size"]
    assert k > 1 and calls[0]["temperature"] > 0
    assert rates == {normalize("q 1"): 1.0, normalize("q 2"): 1 / k, normalize("q 3"): 0.0}
    assert model.training  # left as it was found
    calls.clear()
    direct = estimate_pass_rates(_Model(), None, [task])  # the estimate's own defaults
    assert calls[0]["group_size"] > 1 and calls[0]["temperature"] > 0
    assert direct[normalize("q 2")] == 1 / calls[0]["group_size"]
    # measured on a GPU (the model in bf16) is another table than on this CPU (a review, stop 53)
    import torch

    assert len(list(tmp_path.glob("passrate-*.json"))) == 1
    monkeypatch.setattr(trainers.models, "pick_device", lambda device="auto": torch.device("cuda"))
    pass_rate_table("base", [task], tmp_path)
    assert len(list(tmp_path.glob("passrate-*.json"))) == 2


# ---------- mixture ----------

def test_a_mixture_refuses_a_domain_without_sources_beside_others_that_have_some():
    t = ListTask(["q 1"])
    for tasks in ({"d": [t], "e": []}, {"d": []}, {}):
        with pytest.raises(ValueError, match="every domain of a mixture needs at least one source"):
            Mixture(tasks)


def test_a_negative_source_weight_is_refused_even_when_the_sum_is_positive():
    a, b = ListTask(["q 1"], "a"), ListTask(["q 2"], "b")
    with pytest.raises(ValueError, match="source weights for 'd' must be 2 finite values >= 0"):
        Mixture({"d": [a, b]}, source_weights={"d": [1.0, -0.5]})


# ---------- benchmark ----------

def test_grade_refuses_a_wrong_number_of_completions_and_averages_partial_rewards():
    task = ListTask(["q 1234", "q 12"])
    bench = Benchmark("b", task, [task.item(0), task.item(1)])
    with pytest.raises(ValueError, match="got 1 completions"):
        bench.grade(["1234"])
    with pytest.raises(ValueError, match="got 3 completions"):
        bench.grade(["1234", "12", "x"])
    res = bench.grade(["12", "12"])  # half of the first answer, all of the second
    assert res.score == 0.5 and res.mean_reward == pytest.approx(0.75) and res.n == 2
    # cut off: the share of items graded wrong whose completion was cut (a right answer cut cost nothing)
    assert bench.grade(["12", "12"], [True, False]).cut_off == 0.5
    assert bench.grade(["12", "12"], [False, True]).cut_off == 0.0
    # the report's examples: (question, expected, got) of the first items, side by side
    assert res.examples and res.examples[:2] == [("q 1234", "1234", "12"), ("q 12", "12", "12")]
