"""Behaviour the Recipe-Space Designer promises that a mutation sweep of `sro/designer` (stop 43) found
unchecked: trial sizing from a wall-clock budget, ranges kept inside the declared knob ranges, no simplex for
a single domain with a single source, self-distillation only with held-out benchmarks everywhere, the
redesign's narrowing and widening (MARGIN and WIDEN of the old range, in log space for log parameters, up to
that knob's declared bound), `fits`, `due` and the stall window at their boundaries, and the catalog's
lookups, problem-space probe, device choice and cache check. Expected values are computed by hand from the
rules in docs/designer.md and the modules' docstrings."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sro.config import ProjectConfig, load_project
from sro.designer.catalog import build_catalog
from sro.designer.redesign import Evidence, redesign_rules
from sro.designer.rules import design_rules
from sro.space import Param, RecipeSpace

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quickstart():
    """The quickstart project and its catalog without a base model (no pass rates, no throughput)."""
    project = load_project(ROOT / "search_spaces" / "quickstart.yaml")
    return project, build_catalog(project)


def _bounds(space: RecipeSpace, name: str) -> tuple[float, float]:
    p = space.param(name)
    return p.low, p.high


def test_a_wall_budget_sizes_trials_at_an_eighth_of_it_at_the_measured_throughput(quickstart):
    """A wall budget of 8000 s at a measured 10 samples/s: a trial gets 1000 s (1/8 of the budget), 10000
    samples. No pass rate: G in [4, 8]. The critical batch 10000 / 30 = 333 samples holds 83 prompts of 4,
    capped at 64: P in [16, 64]. Steps at the batch's geometric middle b = √(16·64)·√(4·8) = 181:
    s = 10000 / 181 = 55.2, so [⌊0.6 s⌋, ⌊1.4 s⌋ + 1] = [33, 78]."""
    project, catalog = quickstart
    budget, hardware = dict(catalog.budget), dict(catalog.hardware)
    try:
        catalog.budget["wall_s"], catalog.hardware["train_samples_per_s"] = 8000.0, 10.0
        space = design_rules(catalog, project)
    finally:
        catalog.budget, catalog.hardware = budget, hardware
    assert _bounds(space, "group_size") == (4, 8)
    assert _bounds(space, "prompts_per_step") == (16, 64)
    assert _bounds(space, "steps") == (33, 78)
    assert "1/8 of the budget" in space.param("steps").rationale


def test_every_searched_range_stays_inside_the_declared_knob_range(quickstart):
    """A budget that affords far more samples than a trial can use (10⁷: 10000 s per trial at 1000 samples/s)
    asks for ~33000 to ~77000 steps; the declared `steps` range ends at 10000, so the range is clamped there
    (pinned at 10000), and no searched range of the space leaves its knob's declared range."""
    project, catalog = quickstart
    budget, hardware = dict(catalog.budget), dict(catalog.hardware)
    try:
        catalog.budget["wall_s"], catalog.hardware["train_samples_per_s"] = 80_000.0, 1000.0
        space = design_rules(catalog, project)
    finally:
        catalog.budget, catalog.hardware = budget, hardware
    assert _bounds(space, "steps") == (10_000, 10_000)
    declared = {k["name"]: k for a in catalog.algorithms for k in a["knobs"]}
    for p in space.params:
        k = declared.get(p.name)
        if p.kind in ("int", "float") and k is not None and k.get("low") is not None:
            assert k["low"] <= p.low <= p.high <= k["high"], (p.name, p.low, p.high, k["low"], k["high"])


def test_one_domain_with_one_source_has_no_simplex():
    """A simplex of one weight is no choice: one domain with one source gets no mixture simplex and no
    source simplex (docs/designer.md: the agent project has none)."""
    data = {"name": "one", "domains": {"a": {"sources": [{"reasoning_gym": "basic_arithmetic"}],
                                             "benchmarks": [{"name": "b", "reasoning_gym": "basic_arithmetic"}]}},
            "budget": "8trials"}
    project = ProjectConfig.model_validate(data)
    space = design_rules(build_catalog(project), project)
    assert space.simplexes == []
    assert not any(k.startswith(("mix.", "src.")) for k in space.fixed)


def test_a_redesign_narrows_to_the_pareto_range_plus_a_quarter_of_the_old_range():
    """Narrowing: the Pareto recipes' range widened by MARGIN = 25% of the old range on each side. steps
    [10, 60] with Pareto values 30 and 40: 30 − 12.5, 40 + 12.5 → [17, 53] (outward to whole numbers). lr
    [1e-5, 1e-3] on a log scale with a Pareto lr of 1e-4: a quarter of ln 100 each side, i.e. ×/÷ 100^¼,
    → [3.162e-5, 3.162e-4] (a linear margin would reach below 0 and be cut at the old floor)."""
    space = RecipeSpace([Param("steps", "int", 10, 60, rationale="s"),
                         Param("lr", "float", 1e-5, 1e-3, log=True, rationale="lr")], fixed={"algorithm": "grpo"})
    ev = Evidence(10, [{"values": {"steps": s, "lr": 1e-4}, "scores": {}} for s in (30, 40)],
                  {"steps": 0.5, "lr": 0.5})
    new = redesign_rules(space, ev)
    assert _bounds(new, "steps") == (17, 53)
    lo, hi = _bounds(new, "lr")
    assert lo == pytest.approx(1e-4 / 100 ** 0.25) and hi == pytest.approx(1e-4 * 100 ** 0.25)
    assert math.log(hi / 1e-4) == pytest.approx(math.log(1e-4 / lo))
    assert "narrowed around the Pareto recipes" in new.param("steps").rationale


def test_the_hypervolume_has_not_stalled_before_a_window_of_trials_has_passed():
    """`redesign_on_stall: K`: stalled means the last K complete trials added no hypervolume to what came
    before them. With exactly K trials, and K of them complete, nothing came before: not stalled (and no
    index past the start of the history), whatever their scores."""
    from sro.designer.redesign import hypervolume_stalled
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe

    objectives = [("a/b", "max"), ("cost", "min")]
    same = [TrialRecord(i, "complete", Recipe({"lr": i}), {"a/b": 0.5}, {"wall_s": 10.0}) for i in range(3)]
    assert not hypervolume_stalled(same, objectives, 3)
    assert hypervolume_stalled(same, objectives, 2)  # the last two added nothing to the first


def test_a_redesign_on_stall_is_due_once_k_trials_have_passed_since_the_last_design():
    """`redesign_on_stall: 3`, the last design at 3 finished trials, 3 more since (all dominated by trial 2,
    so the hypervolume did not grow): due now, at exactly K trials, not one trial later."""
    from sro.designer.redesign import due
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe

    def rec(i: int, score: float, cost: float) -> TrialRecord:
        return TrialRecord(i, "complete", Recipe({"lr": i}), {"a/b": score}, {"wall_s": cost})

    data = {"name": "st", "domains": {"a": {"sources": [{"reasoning_gym": "basic_arithmetic"}],
                                            "benchmarks": [{"name": "b", "reasoning_gym": "basic_arithmetic"}]}},
            "designer": {"redesign_on_stall": 3}}
    project = ProjectConfig.model_validate(data)
    records = [rec(0, 0.1, 10), rec(1, 0.2, 10), rec(2, 0.3, 10), rec(3, 0.05, 20), rec(4, 0.1, 30), rec(5, 0.2, 11)]
    assert due(project, records, 3) == "the hypervolume has not grown for 3 trials"
    assert due(project, records[:5], 3) is None  # two trials since the design: not yet


def test_a_redesign_widens_an_edge_up_to_that_knobs_own_declared_bound(quickstart):
    """Widening at an edge goes by WIDEN = half the old range, never past the bound declared for *that*
    knob: group_size [4, 14] with the Pareto value 14 (declared up to 16): 14 + 5 = 19, cut at 16; the low
    side narrowed to 14 − 2.5 → 11. steps [10, 60] with the Pareto value 60 (declared up to 10000): → 85,
    and 60 − 12.5 → 47."""
    _, catalog = quickstart
    space = RecipeSpace([Param("group_size", "int", 4, 14, rationale="g"), Param("steps", "int", 10, 60, rationale="s")],
                        fixed={"algorithm": "grpo"})
    ev = Evidence(10, [{"values": {"group_size": 14, "steps": 60}, "scores": {}}], {"group_size": 0.5, "steps": 0.5})
    new = redesign_rules(space, ev, catalog)
    assert _bounds(new, "group_size") == (11, 16)
    assert _bounds(new, "steps") == (47, 85)
    assert "widened above" in new.param("steps").rationale


def test_a_recipe_fits_only_where_every_fixed_setting_it_ran_with_agrees():
    """`fits`: a trial that ran with a setting the space fixes otherwise is no point of the space, even when
    its other fixed settings agree (here `pack: true` against the space's `pack: false`, beside the same
    algorithm); a setting the trial did not record is no disagreement."""
    from sro.designer.redesign import fits
    from sro.recipe import Recipe

    space = RecipeSpace([Param("steps", "int", 1, 3, rationale="s")], fixed={"algorithm": "grpo", "pack": False})
    assert fits(space, Recipe({"steps": 2}, {"algorithm": "grpo", "pack": False}))
    assert fits(space, Recipe({"steps": 2}, {"algorithm": "grpo"}))
    assert not fits(space, Recipe({"steps": 2}, {"algorithm": "grpo", "pack": True}))
    assert not fits(space, Recipe({"steps": 2}, {"algorithm": "dapo", "pack": True}))


def test_self_distillation_needs_held_out_benchmarks_in_every_domain(quickstart):
    """Rule 5: `distill.weight` only when *every* domain has held-out benchmarks (and the budget has ≥ 12
    trials): one domain without any leaves it out."""
    project, catalog = quickstart
    trials, benches = catalog.budget["trials"], catalog.domains["multiplication"]["benchmarks"]
    try:
        catalog.budget["trials"] = 12
        assert catalog.has_heldout and "distill.weight" in [p.name for p in design_rules(catalog, project).params]
        catalog.domains["multiplication"]["benchmarks"] = []
        assert not catalog.has_heldout
        assert "distill.weight" not in [p.name for p in design_rules(catalog, project).params]
    finally:
        catalog.budget["trials"], catalog.domains["multiplication"]["benchmarks"] = trials, benches


def test_the_catalog_looks_up_each_algorithm_by_its_name(quickstart):
    _, catalog = quickstart
    for a in catalog.algorithms:
        assert catalog.algorithm(a["name"]) is a
    with pytest.raises(KeyError):
        catalog.algorithm("no_such_algorithm")


def test_the_catalog_estimates_each_single_turn_sources_problem_space(quickstart):
    """Without a base model the catalog still probes every generator: one-digit addition/subtraction of two
    terms is a small problem space (a few hundred question texts), so 1000 draws hold fewer than 900
    distinct ones, and the rules offer `proc.dedup` (docs/designer.md: the quickstart's space has dedup)."""
    project, catalog = quickstart
    first = catalog.domains["arithmetic"]["sources"][0]
    assert first["distinct_questions_in_first"]["items"] == 1000
    assert 0 < first["distinct_questions_in_first"]["distinct"] < 900
    assert all("question_chars" in s for s in catalog.sources())
    assert design_rules(catalog, project).param("proc.dedup").kind == "bool"


def test_a_cpu_project_on_a_gpu_machine_is_designed_for_the_cpu(monkeypatch):
    """`runtime.device: cpu` trains on the CPU even where a GPU is present; `auto` takes the GPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    p = load_project(ROOT / "search_spaces" / "quickstart.yaml")
    for device, want in (("cpu", ("cpu", 0)), ("auto", ("cuda", 1))):
        proj = p.model_copy(update={"runtime": p.runtime.model_copy(update={"device": device})})
        hw = build_catalog(proj).hardware
        assert (hw["device"], hw["gpus"]) == want, device


def test_a_cache_file_that_is_json_but_not_the_measurements_is_a_miss(tmp_path):
    """`_read_cache`: only a JSON object with a `sources` object is trusted; any other JSON (a list, an object
    without `sources`, `sources` of another type) is a miss, measured again, never an AttributeError."""
    from sro.designer.catalog import _read_cache

    path = tmp_path / "catalog.json"
    for text in ("[1, 2]", '{"train_samples_per_s": 3.0}', '{"sources": []}'):
        path.write_text(text)
        assert _read_cache(path) is None, text
    path.write_text('{"sources": {}, "train_samples_per_s": 3.0}')
    assert _read_cache(path) == {"sources": {}, "train_samples_per_s": 3.0}



# --- sro/designer/llm.py (stop 47's sweep) ---------------------------------------------------------

class _Completions:
    """`client.chat.completions.create` answering from `script`: an exception is raised, anything else
    is wrapped as a chat completion whose message content it is."""

    def __init__(self, script: list) -> None:
        self.script, self.calls = list(script), 0

    def create(self, **kw):
        from types import SimpleNamespace

        self.calls += 1
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        message = SimpleNamespace(role="assistant", content=step)
        return SimpleNamespace(choices=[SimpleNamespace(index=0, finish_reason="stop", message=message)])


class _Client:
    def __init__(self, script: list) -> None:
        from types import SimpleNamespace

        self.completions = _Completions(script)
        self.chat = SimpleNamespace(completions=self.completions)

    def close(self) -> None:
        pass


def _busy(status: int, retry_after: str | None):
    """The openai client's error for an HTTP `status` answer with that Retry-After header."""
    import httpx
    import openai

    headers = {"retry-after": retry_after} if retry_after is not None else {}
    response = httpx.Response(status, headers=headers, request=httpx.Request("POST", "http://x/v1/chat/completions"))
    cls = openai.RateLimitError if status == 429 else openai.InternalServerError
    return cls("busy", response=response, body=None)


def _llm_designed(project: ProjectConfig) -> ProjectConfig:
    return project.model_copy(update={"designer": project.designer.model_copy(update={
        "kind": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "fake", "timeout_s": 5.0})})


def test_a_busy_endpoint_is_asked_again_after_its_retry_after_capped_at_30_s(monkeypatch):
    """`_create`: a 429 naming Retry-After 3600 s waits 30 s (the cap), a 500 naming none waits 2^attempt s
    (2 s at the second attempt), a Retry-After that is an HTTP date (not seconds) waits 2^attempt too; the
    third attempt's answer is returned. Sleeps are recorded, not slept."""
    import sro.designer.llm as llm

    waits: list[float] = []
    monkeypatch.setattr(llm.time, "sleep", waits.append)
    client = _Client([_busy(429, "3600"), _busy(500, None), "answer"])
    assert llm._create(client, "fake", [], {}, 5.0).choices[0].message.content == "answer"
    assert waits == [30.0, 2.0] and client.completions.calls == 3
    waits.clear()
    client = _Client([_busy(429, "Wed, 21 Oct 2026 07:28:00 GMT"), _busy(429, "1.5"), "answer"])
    llm._create(client, "fake", [], {}, 5.0)
    assert waits == [1.0, 1.5]
    waits.clear()
    with pytest.raises(Exception, match="busy"):  # the last attempt's error is the caller's
        llm._create(_Client([_busy(500, "0")] * 3), "fake", [], {}, 5.0)
    assert waits == [0.0, 0.0]


def test_a_retry_after_outside_0_to_30_s_is_kept_to_that_range(monkeypatch):
    """`_create`: a negative Retry-After was `time.sleep(-1)`, a ValueError reported as "a body that is not
    JSON", and nothing was asked again (a review, stop 53). It waits 0 s; -inf 0 s, inf the 30 s cap, nan (no
    number of seconds) 2^attempt s. Sleeps are recorded, not slept."""
    import sro.designer.llm as llm

    waits: list[float] = []
    monkeypatch.setattr(llm.time, "sleep", waits.append)
    client = _Client([_busy(429, "-1"), _busy(503, "-inf"), "answer"])
    assert llm._create(client, "fake", [], {}, 5.0).choices[0].message.content == "answer"
    assert waits == [0.0, 0.0] and client.completions.calls == 3
    waits.clear()
    llm._create(_Client([_busy(429, "inf"), _busy(429, "nan"), "answer"]), "fake", [], {}, 5.0)
    assert waits == [30.0, 2.0]


def test_a_wait_longer_than_a_thread_can_wait_is_no_overflow():
    """`_within`: `Thread.join` takes at most `threading.TIMEOUT_MAX` s; a designer.timeout_s of 1e10 s was an
    OverflowError out of the request (a review, stop 53)."""
    from sro.designer.llm import _within

    assert _within(_Client([]), 1e10, lambda: "answer") == "answer"


def test_an_answer_whose_content_is_not_text_is_refused_and_text_parts_are_read():
    """`_ask`: content given as text parts (`[{"type": "text", "text": ...}]`, as some OpenAI-compatible servers
    answer) is their joined text; content of another type (a JSON object, a number) or empty is a
    DesignerFailed that says so, never handed on to the JSON reader."""
    from sro.designer.llm import DesignerFailed, _ask

    project = _llm_designed(load_project(ROOT / "search_spaces" / "quickstart.yaml"))
    parts = [{"type": "text", "text": '{"params": '}, {"type": "text", "text": "[]}"}]
    assert _ask(_Client([parts]), project, []) == '{"params": []}'
    for content, needle in (({"params": []}, "content of type dict, not text"), (7, "content of type int"),
                            ([{"type": "image_url"}], "content of type list"), ("", "no content"),
                            (None, "no content")):
        with pytest.raises(DesignerFailed, match=needle):
            _ask(_Client([content]), project, [])


def test_a_fixed_value_of_a_categorical_knob_must_be_one_of_its_choices():
    """`review` refuses a fixed value a categorical knob does not declare (`scale_rewards: tokenwise`; the
    choices are group, batch, none) with the declared choices in the message, and keeps a declared one."""
    from sro.designer.llm import SpaceAnswer, review

    project = load_project(ROOT / "search_spaces" / "quickstart.yaml")
    catalog = build_catalog(project)
    base = {"params": [{"name": "lr", "kind": "float", "low": 1e-5, "high": 1e-3, "log": True, "why": "x"}]}
    with pytest.raises(ValueError, match=r"fixed scale_rewards: 'tokenwise' is not a declared categorical value "
                                         r"\(\('group', 'batch', 'none'\)\)"):
        review(SpaceAnswer.model_validate({**base, "fixed": {"scale_rewards": "tokenwise"}}), catalog, project)
    space, _ = review(SpaceAnswer.model_validate({**base, "fixed": {"scale_rewards": "batch"}}), catalog, project)
    assert space.fixed["scale_rewards"] == "batch"
