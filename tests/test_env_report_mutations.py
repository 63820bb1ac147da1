"""Behaviour the mutation sweep of `trainers/backends.py`, `evaluators/textworld_env.py` and `sro/report.py`
found unchecked: which rollout backend runs where, what the vLLM path samples from and assembles (a fake
vLLM, on CPU), the TextWorld environment's steps and rendering, and the report's table and notes."""

from __future__ import annotations

import html
import importlib
import importlib.util
import os
import re
import sys
import types

import pytest
import torch

import trainers.backends as backends
from trainers.backends import BackendUnavailable, VLLMBackend, rollouts_from_ids, unavailable


# ---- trainers/backends.py ---------------------------------------------------------------------------------


def test_only_the_vllm_backend_can_be_unavailable_and_it_says_why(monkeypatch):
    """`unavailable` names what keeps a backend from running: `hf` runs everywhere; `vllm` needs its package,
    then a CUDA GPU; with both it runs."""
    assert unavailable("hf") is None
    found = {"vllm": None}
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: found["vllm"] if name == "vllm" else real_find(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "pip install 'sro[vllm]'" in unavailable("vllm")
    found["vllm"] = object()  # the package is there
    assert unavailable("vllm") == "rollout backend 'vllm' needs a CUDA GPU; use rollout_backend: hf on CPU"
    assert unavailable("hf") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert unavailable("vllm") is None and unavailable("hf") is None


def test_the_vllm_backend_refuses_with_unavailables_reason_before_importing_vllm(tiny_add, monkeypatch):
    """Where vLLM cannot run (here: installed, no GPU) the backend raises `BackendUnavailable` with
    `unavailable`'s reason, and never starts an engine."""
    from trainers.tiny import build_model

    spec, tok = tiny_add
    started = []
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=lambda **kw: started.append(kw)))
    monkeypatch.setattr(backends, "unavailable", lambda name: "rollout backend 'vllm' needs a CUDA GPU")
    with pytest.raises(BackendUnavailable, match="needs a CUDA GPU"):
        VLLMBackend(build_model(len(tok), spec, tok), tok)
    assert started == []


def test_launcher_env_picks_a_free_unprivileged_port(monkeypatch):
    """Where no launcher set MASTER_PORT, `launcher_env` takes one the OS hands out as free (an ephemeral
    port, never a privileged one below 1024), and sets it."""
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "VLLM_ENABLE_V1_MULTIPROCESSING")
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in keys})  # a copy
    added = backends.launcher_env()
    assert set(added) == set(keys) and os.environ["MASTER_PORT"] == added["MASTER_PORT"]
    assert 1024 <= int(added["MASTER_PORT"]) < 65536


class _BosTokenizer:
    """A tokenizer that, like Llama's, puts a BOS token first when asked for special tokens."""

    def __init__(self, tok, bos: int) -> None:
        self.tok, self.bos = tok, bos

    def __call__(self, text, add_special_tokens=True, **kw):
        out = self.tok(text, add_special_tokens=False, **kw)
        if add_special_tokens:
            out["input_ids"] = [self.bos, *out["input_ids"]]
        return out

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_the_vllm_path_samples_softmax_over_t_and_assembles_prompt_major_rollouts(tiny_add, monkeypatch):
    """The trainers score softmax(logits / T): vLLM's sampling must apply no filter nor penalty (top_p 1,
    top_k off, min_p 0, no repetition / presence / frequency penalty), draw `group_size` completions per
    prompt, stop at every end of sequence and read the prompt's ids as the `hf` path does (no special
    tokens added). The completions come back prompt-major into `rollouts_from_ids`."""
    _, tok = tiny_add
    recorded: dict = {}

    class SamplingParams:
        def __init__(self, **kw):
            recorded.update(kw)

    class _Out:
        def __init__(self, outs):
            self.outputs = [types.SimpleNamespace(token_ids=o) for o in outs]

    asked: list = []

    class LLM:
        def generate(self, prompts, params, use_tqdm=False):
            asked.extend(p["prompt_token_ids"] for p in prompts)
            return [_Out([[9, 0], [8, 8, 8]]), _Out([[0], [7, 0]])]  # 0 is the tiny tokenizer's <eos>

    assembled = {}

    def on_cpu(prompt_ids, completions, tokenizer, group_size, device="cpu", eos_ids=None):
        assembled.update(completions=completions, group_size=group_size, device=device, eos=eos_ids)
        return rollouts_from_ids(prompt_ids, completions, tokenizer, group_size, eos_ids=eos_ids)

    monkeypatch.setattr(backends, "rollouts_from_ids", on_cpu)
    be = object.__new__(VLLMBackend)
    be.tok, be.eos, be.llm = _BosTokenizer(tok, bos=5), [tok.eos_token_id], LLM()
    be._vllm = types.SimpleNamespace(SamplingParams=SamplingParams)
    prompts = ["add 1 2", "add 3 4"]
    ro = be.generate(prompts, 2, 0.7, 3)
    assert recorded["n"] == 2 and recorded["temperature"] == 0.7 and recorded["max_tokens"] == 3
    assert recorded["stop_token_ids"] == [tok.eos_token_id]
    assert recorded["top_p"] == 1.0 and recorded["top_k"] in (0, -1) and recorded["min_p"] == 0.0
    assert (recorded["repetition_penalty"], recorded["presence_penalty"], recorded["frequency_penalty"]) == (
        1.0, 0.0, 0.0)
    assert asked == [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert assembled["completions"] == [[9, 0], [8, 8, 8], [0], [7, 0]] and assembled["group_size"] == 2
    assert assembled["device"] == "cuda" and assembled["eos"] == [tok.eos_token_id]
    assert ro.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert ro.truncated.tolist() == [False, True, False, False]


# ---- evaluators/textworld_env.py ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def coin_game():
    from evaluators.textworld_env import ensure_game, game_settings

    return ensure_game("coin_collector", game_settings("coin_collector", {"level": 2}), 1_000_000_007)


def test_full_mode_without_facts_reads_room_objects_and_inventory_off_the_text():
    """Where the game gives no facts, full mode reads the state off its text: the room from its `-= Room =-`
    header, the carried objects from the inventory, and as visible objects the whole names after `take` /
    `examine` in the choices, less what is carried."""
    from evaluators.envs import EnvSettings
    from evaluators.textworld_env import TextWorldEnv

    env = TextWorldEnv("games/g1.z8", EnvSettings(obs_mode="full"))
    gs = types.SimpleNamespace(
        admissible_commands=["take red apple", "examine box", "examine coin", "go north"], facts=None,
        description="-= Dusty Kitchen =-\nYou are in a kitchen.", inventory="You are carrying:\n  a coin.",
        feedback="  You see a box.  ", won=False, lost=False, score=None, max_score=None, policy_commands=None)
    obs, info = env._render(gs, True)
    assert info.state_key == "g1:dusty kitchen|see:box,red apple|hold:a coin"
    assert obs == "You see a box.\n\nAdmissible commands: examine box, examine coin, go north, take red apple"
    assert (info.score, info.max_score, info.walkthrough, info.full_text) == (0.0, 1.0, [], "You see a box.")


def test_close_shuts_the_game_and_a_step_after_it_asks_for_reset(coin_game):
    """`close()` before any reset is harmless, shuts a started game (a step then asks for `reset()`), and can be
    called twice; a reset after it starts the game again."""
    from evaluators.envs import EnvSettings
    from evaluators.textworld_env import TextWorldEnv

    env = TextWorldEnv(coin_game, EnvSettings(max_steps=4))
    env.close()
    _, info = env.reset()
    env.close()
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        env.step(info["step"].walkthrough[0])
    env.close()
    _, again = env.reset()
    assert again["step"].state_key == info["step"].state_key
    env.close()


def test_a_reset_state_reads_valid_even_after_an_invalid_command(coin_game):
    """`StepInfo.valid` is True after reset (docs: "True after reset"), also when the episode before it ended
    on an inadmissible command."""
    from evaluators.envs import EnvSettings
    from evaluators.textworld_env import TextWorldEnv

    env = TextWorldEnv(coin_game, EnvSettings(max_steps=4))
    assert env.reset()[1]["step"].valid
    assert not env.step("dance wildly")[4]["step"].valid
    assert env.reset()[1]["step"].valid
    env.close()


def test_a_treasure_hunters_goal_names_the_room_the_walkthrough_wins_in():
    """docs/agent.md: the compact line states a treasure hunter's target *and room* ("goal: hold pear in
    playroom"): the object the walkthrough takes last, and the room the player stands in when it wins."""
    from evaluators.envs import EnvSettings
    from evaluators.textworld_env import TextWorldEnv, ensure_game, game_settings

    th = ensure_game("treasure_hunter", game_settings("treasure_hunter", {"level": 1}), 1_000_000_007)
    env = TextWorldEnv(th, EnvSettings(max_steps=12))
    obs, info = env.reset()
    walk = info["step"].walkthrough
    goal = obs.split("\n")[0].split(" | goal: ")[1]
    for cmd in walk:
        obs, _, _, _, info = env.step(cmd)
    env.close()
    room = obs.split(" | ")[0].removeprefix("room: ")
    assert info["step"].won and goal == f"hold {walk[-1][5:].split(' from ')[0]} in {room}", (goal, walk, room)


# ---- sro/report.py --------------------------------------------------------------------------------------------


def _report_page(tmp_path, monkeypatch, records, base, objectives, overlap=None, **data_extra):
    """The report written over `records` (its study read through a stub of `_load`), unescaped."""
    import sro.report as report
    from sro.budget import Spent

    data = {"name": "mut", "objectives": [{k: d} for k, d in objectives], **data_extra}
    info = {"base_scores": base, "spent": Spent(), "overlap": overlap or {}, "hypervolume": {},
            "lower": [k for k, d in objectives if d == "min" and k != "cost"]}
    monkeypatch.setattr(report, "_load", lambda run_dir: (data, records, info))
    return html.unescape(report.write_report(tmp_path).read_text())


def _cells(page: str) -> list[list[str]]:
    return [[c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr class=[^>]*>(.*?)</tr>", page, flags=re.S)]


def test_the_report_colours_rows_as_sro_show_reads_them(tmp_path, monkeypatch):
    """Green was the front in the report and "beats the base model" in `sro show`; an interrupted trial was red
    like a failed one (a review, stop 57). Now: the front blue, interrupted grey, failed red; no green."""
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe

    recs = [TrialRecord(0, "complete", Recipe({"lr": 0.001}), scores={"a/x": 0.5}, cost={"wall_s": 5.0}),
            TrialRecord(1, "interrupted", Recipe({"lr": 0.002})),
            TrialRecord(2, "failed", Recipe({"lr": 0.003}), message="out of memory")]
    page = _report_page(tmp_path, monkeypatch, recs, {"a/x": 0.1}, [("a/x", "max"), ("cost", "min")])
    classes = re.findall(r'<tr class="([^"]*)">\s*<td[^>]*>(\d+)</td>', page)
    assert dict((n, c) for c, n in classes) == {"0": "front", "1": "interrupted", "2": "failed"}, classes
    css = page.split("<style>")[1].split("</style>")[0]
    assert "tr.front{background:#e6eefb}" in css and "tr.interrupted{color:#888}" in css and "green rows" not in page


def test_the_report_names_each_source_weight_with_its_source(tmp_path, monkeypatch):
    """A source weight was `src.arithmetic.1` in the table and the importance figure, with nothing saying which
    generator it weighs (a review, stop 57)."""
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe
    from sro.report import importance_figure, source_labels
    from sro.importance import Importances

    project = {"domains": {"arithmetic": {"sources": [{"reasoning_gym": "basic_arithmetic"},
                                                      {"reasoning_gym": "chain_sum", "config": {"min_terms": 2}}]},
                           "facts": {"sources": [{"jsonl": "facts.jsonl"}]}}}
    assert source_labels(project) == {"src.arithmetic.0": "src.arithmetic.0 (reasoning_gym: basic_arithmetic)",
                                      "src.arithmetic.1": "src.arithmetic.1 (reasoning_gym: chain_sum)",
                                      "src.facts.0": "src.facts.0 (jsonl: facts.jsonl)"}
    recs = [TrialRecord(i, "complete", Recipe({"src.arithmetic.0": w, "src.arithmetic.1": 1 - w, "lr": 0.001}),
                        scores={"a/x": w}, cost={"wall_s": 5.0}) for i, w in enumerate((0.25, 0.75))]
    page = _report_page(tmp_path, monkeypatch, recs, {"a/x": 0.1}, [("a/x", "max"), ("cost", "min")],
                        domains=project["domains"])
    header = re.findall(r"<th>(.*?)</th>", page)
    assert "src.arithmetic.1 (reasoning_gym: chain_sum)" in header and "lr" in header, header
    fig = importance_figure(Importances({"a/x": {"src.arithmetic.1": 0.9, "lr": 0.1}}, 6),
                            source_labels(project))
    assert list(fig.data[0].y) == ["lr", "src.arithmetic.1 (reasoning_gym: chain_sum)"]


def test_the_report_table_shows_numbers_to_four_significant_digits(tmp_path, monkeypatch):
    """The trial table's floats are shown to 4 significant digits (scores, cost, the base model's scores, a
    float setting), integers as they are; the base model's row has a cell under every column, and the page
    counts the complete trials among all."""
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe

    recs = [TrialRecord(0, "complete", Recipe({"lr": 0.00123456, "steps": 3}), scores={"a/x": 1 / 3},
                        cost={"wall_s": 12.3456, "samples": 40.0}),
            TrialRecord(1, "failed", Recipe({"lr": 0.002, "steps": 2}), message="out of memory\nTraceback ..."),
            TrialRecord(2, "complete", Recipe({"lr": 0.003, "steps": 2}), scores={"a/x": 0.0}, cost={"wall_s": 5.0})]
    page = _report_page(tmp_path, monkeypatch, recs, {"a/x": 0.123456}, [("a/x", "max"), ("cost", "min")])
    assert "2 complete / 3 trials" in " ".join(page.split())
    base, row, failed, cheap = _cells(page)
    assert failed == ["1", "failed: out of memory", "", "", "0", "0", "0.002", "2"]
    assert cheap == ["2", "complete", "", "0", "5", "0", "0.003", "2"]
    assert base == ["base", "", "", "0.1235", "", "", "", ""]  # a cell under every column
    assert row == ["0", "complete", "✔", "0.3333", "12.35", "40", "0.001235", "3"]


def test_the_learning_curves_draw_one_line_per_trial_that_has_a_curve():
    """A line per trial with a training curve (samples against mean reward, a missing value as its index and
    NaN); a trial without one (failed before training) draws nothing."""
    import math

    from sro.ledger import TrialRecord
    from sro.recipe import Recipe
    from sro.report import curve_figure

    recs = [TrialRecord(0, "failed", Recipe({})),
            TrialRecord(1, "complete", Recipe({}), curve=[{"samples": 8, "reward": 0.25}, {"reward": 0.5}, {}])]
    (line,) = curve_figure(recs).data
    assert line.name == "trial 1" and list(line.x) == [8, 1, 2]
    assert list(line.y[:2]) == [0.25, 0.5] and math.isnan(line.y[2])


def test_the_front_staircase_runs_along_increasing_x():
    """The front's line joins its trials in the order of the x axis (the staircase's corners are those the
    front attains only then): three maximized trials trading x against y come out left to right."""
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe
    from sro.report import front_figure

    objs = [("a/x", "max"), ("a/y", "max")]
    recs = [TrialRecord(n, "complete", Recipe({}), {"a/x": x, "a/y": y}, {"wall_s": 1.0})
            for n, (x, y) in enumerate([(0.5, 0.5), (0.9, 0.1), (0.1, 0.9)])]
    line = next(t for t in front_figure(recs, objs, {}).data if t.name == "Pareto front")
    assert list(zip(line.x, line.y)) == [(0.1, 0.9), (0.5, 0.5), (0.9, 0.1)] and line.line.shape == "vh"


def test_the_overlap_note_names_only_the_benchmarks_whose_questions_occur_in_training(tmp_path, monkeypatch):
    """The base model's section notes the benchmarks some of whose questions also occur in training; one with
    none is not named (nor is the note there when no benchmark overlaps)."""
    from sro.ledger import TrialRecord
    from sro.recipe import Recipe

    recs = [TrialRecord(0, "complete", Recipe({}), scores={"a/x": 0.5, "a/y": 0.5}, cost={"wall_s": 1.0})]
    objs = [("a/x", "max"), ("a/y", "max")]
    page = _report_page(tmp_path, monkeypatch, recs, {}, objs, overlap={"a/x": 0.0, "a/y": 0.25})
    assert '<p class="note">a/y: 25% of questions also occur in training (other seeds)</p>' in page
    assert "a/x: 0%" not in page
    page = _report_page(tmp_path, monkeypatch, recs, {}, objs, overlap={"a/x": 0.0})
    assert "occur in training" not in page


def test_the_report_reads_a_current_stored_hypervolume_history_without_recomputing_it(tmp_path, monkeypatch):
    """`_load` takes the study's stored hypervolume history where it covers every complete trial at the
    project's objectives and reference point, and computes it again only otherwise (which loads torch)."""
    import yaml
    from micro import MICRO

    from sro.config import load_project
    from sro.ledger import Ledger
    from sro.recipe import Recipe
    from sro.report import _load
    from sro.space import RecipeSpace

    hvmod = importlib.import_module("sro.optimizer.hypervolume")  # the package's name `hypervolume` is a function
    (tmp_path / "hv.yaml").write_text(MICRO.format(name="hv"))
    project = load_project(tmp_path / "hv.yaml")
    run_dir = tmp_path / "runs" / "hv"
    ledger = Ledger(project, run_dir)
    (run_dir / "project.yaml").write_text(yaml.safe_dump(project.portable_dump(), sort_keys=False))
    space = RecipeSpace.from_yaml("version: 1\ndesigner: test\nfixed: {algorithm: grpo}\nparams:\n"
                                  "  lr: {kind: float, low: 0.001, high: 0.003, log: true, why: small}\n")
    trial = ledger.start(Recipe(space.sobol(1, seed=0)[0], dict(space.fixed)), space)
    ledger.finish(trial, {"arithmetic/add": 0.5}, {"wall_s": 3.0}, [])
    stored = hvmod.hypervolume_history(ledger.records(), project.objective_directions(), project.reference_point)
    ledger.put("hypervolume", {**stored, "hypervolume": [123.0]})  # a marker: what the study holds
    calls = []
    real = hvmod.hypervolume_history
    monkeypatch.setattr(hvmod, "hypervolume_history", lambda *a, **kw: calls.append(a) or real(*a, **kw))
    assert _load(run_dir)[2]["hypervolume"]["hypervolume"] == [123.0] and calls == []
    trial = ledger.start(Recipe(space.sobol(2, seed=0)[1], dict(space.fixed)), space)
    ledger.finish(trial, {"arithmetic/add": 0.75}, {"wall_s": 2.0}, [])  # the stored history is a trial short
    assert _load(run_dir)[2]["hypervolume"]["trials"] == [0, 1] and len(calls) == 1
