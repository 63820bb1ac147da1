"""The Recipe-Space Designer: rule-based spaces for single- vs multi-turn projects, the LLM designer
through the real `openai` client against a local OpenAI-compatible server, `sro design` + editing the
space, and redesign from evidence."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sro.config import ProjectConfig, load_project
from sro.designer.catalog import build_catalog
from sro.designer.design import design_space
from sro.designer.llm import DesignerFailed, design_llm, unfenced
from sro.designer.redesign import fits, gather_evidence, maybe_redesign, redesign_rules
from sro.designer.rules import trainer_keys, design_rules
from sro.ledger import Ledger
from sro.proposers import SobolProposer
from sro.recipe import Recipe
from sro.space import Param, RecipeSpace, Simplex
from trainers.algorithms import config_for
from trainers.processing import item_filter

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-0123456789-secret"


def _math_project() -> ProjectConfig:
    return load_project(ROOT / "search_spaces" / "quickstart.yaml")


def _agent_project() -> ProjectConfig:
    """A multi-turn agent project shaped as DESIGN.md shows (a textworld source and benchmark)."""
    data = {"name": "agent", "domains": {"agent": {
        "description": "collect the coin in a text game",
        "sources": [{"textworld": "coin_collector", "config": {"level": 3}}],
        "benchmarks": [{"name": "coin_heldout", "textworld": "coin_collector", "config": {"level": 3, "games": 20},
                        "size": 20, "metric": "success"}]}},
        "budget": "8trials"}
    # validated like any project: no skip (one that caught every config error here used to turn three
    # tests into skips when the config grew a check, stop 23)
    return ProjectConfig.model_validate(data)


def _every_recipe_trains(space: RecipeSpace, n: int = 64) -> None:
    for values in space.sobol(n, seed=3):
        r = Recipe(values, dict(space.fixed))
        cfg = config_for(str(r.get("algorithm", "grpo")), {**r.fixed, **r.values})  # raises on an unknown field
        if r.get("algorithm") == "proas":
            from trainers.multiturn import multi_turn_config

            multi_turn_config("proas", cfg, {**r.fixed, **r.values})
        item_filter({**r.fixed, **r.values}, lambda: {})  # the processing operators accept the values


# --- rules -------------------------------------------------------------------------------------------

def test_rules_design_differs_for_math_and_agent_and_every_param_has_a_reason():
    math_p, agent_p = _math_project(), _agent_project()
    math_c, agent_c = build_catalog(math_p), build_catalog(agent_p)
    assert agent_c.multi_turn_domains == ["agent"] and not math_c.multi_turn_domains
    math_s, agent_s = design_rules(math_c, math_p), design_rules(agent_c, agent_p)
    for s in (math_s, agent_s):
        assert s.params and all(p.rationale.strip() for p in s.params)
        assert all(x.rationale.strip() for x in s.simplexes)
        _every_recipe_trains(s)
    assert math_s.to_dict() != agent_s.to_dict()
    # the batch switch and α only where the batch grows (until stop 26 searched at a multiplier of 1 too)
    for s in (math_s, agent_s):
        # every multiplier above 1 the knob declares (a redesign may widen the range to 3 or 4)
        assert all(s.param(n).condition == {"batch_multiplier": [2, 3, 4]} for n in ("batch_switch_at", "lr_alpha"))
        recipes = s.sobol(16, seed=0)
        assert {r["batch_multiplier"] for r in recipes} == {1, 2}
        assert all(("batch_switch_at" in r) == ("lr_alpha" in r) == (r["batch_multiplier"] == 2) for r in recipes)
        # the text a search publishes reads back as the same text (a condition shared by two parameters was
        # written as a YAML alias, so every single-worker search "adopted the space of another worker")
        assert s.to_yaml() == RecipeSpace.from_yaml(s.to_yaml()).to_yaml() and "&id" not in s.to_yaml()

    meta = {a["name"]: set(a["applies_to"]) for a in math_c.algorithms}

    def algos(space: RecipeSpace) -> set[str]:
        return set(space.param("algorithm").choices) if "algorithm" in [p.name for p in space.params] \
            else {space.fixed["algorithm"]}

    # credit shaping only for multi-turn domains; single-turn-only algorithms never for the agent
    assert all(meta[a] != {"multi_turn"} for a in algos(math_s))
    assert all("multi_turn" in meta[a] for a in algos(agent_s))
    assert "dapo" in algos(math_s) and "dapo" not in algos(agent_s)
    shaping = [n for n, m in meta.items() if m == {"multi_turn"}]
    grpo_knobs = {k["name"] for k in math_c.algorithm("grpo")["knobs"]}
    for n in shaping:  # e.g. proas: its own knobs are dimensions of the agent space only, under its condition
        assert n in algos(agent_s)
        own = {k["name"] for k in agent_c.algorithm(n)["knobs"]} - grpo_knobs
        trainable = {k for k in own if k in trainer_keys()}
        conditional = {p.name for p in agent_s.params if p.condition and n in p.condition.get("algorithm", [])}
        assert trainable <= conditional and not own & {p.name for p in math_s.params}
    assert not {"eps_low", "eps_high"} & {p.name for p in agent_s.params}  # fresh rollouts: no clip search
    # mixture: a simplex across the quickstart's two domains, and one across arithmetic's two sources
    assert {s.name for s in math_s.simplexes} == {"mixture", "sources.arithmetic"}
    # fresh rollouts: clipping and reuse are not searched (r ≡ 1), and no off-policy algorithm
    names = {p.name for p in math_s.params}
    assert not names & {"eps", "eps_low", "eps_high", "num_iterations", "staleness"}
    assert all("off_policy" not in meta[a] for a in algos(math_s))


def test_rules_scale_lr_to_model_size_and_add_off_policy_dims_for_big_models():
    p = _math_project()
    c = build_catalog(p)
    c.model["params"] = 600_000
    small = design_rules(c, p)
    c.model["params"] = 1_500_000_000
    big = design_rules(c, p)
    assert big.param("lr").high < small.param("lr").high / 20
    meta = {a["name"]: set(a["applies_to"]) for a in c.algorithms}
    assert any("off_policy" in meta[a] for a in big.param("algorithm").choices)
    assert {"num_iterations", "staleness"} <= {q.name for q in big.params}
    eps = [q for q in big.params if q.name == "eps_high"]
    assert eps and eps[0].high <= 0.2  # clipping never widened past the default
    _every_recipe_trains(big)


# --- the LLM designer against a local OpenAI-compatible server -----------------------------------

class FakeLLM:
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1 answering from a script."""

    def __init__(self) -> None:
        self.script: list[str | float] = []
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                step = outer.script.pop(0) if outer.script else "{}"
                trickle = 0.0
                if isinstance(step, float):  # a slow endpoint
                    time.sleep(step)
                    step = "{}"
                elif isinstance(step, tuple) and step[0] == "trickle":  # an answer sent a few bytes at a time
                    trickle, step = step[1], "{}"
                kind, status = "application/json", 200
                finish = "stop"
                if isinstance(step, tuple) and isinstance(step[0], int):  # (status, error message)
                    status, step = step[0], json.dumps({"error": {"message": step[1], "type": "x"}}).encode()
                elif isinstance(step, tuple):  # (content, finish_reason)
                    step, finish = step
                if isinstance(step, bytes):  # the whole reply as it is (not a chat completion)
                    out, kind = step, "text/html" if step.startswith(b"<") else kind
                else:
                    out = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                                      "choices": [{"index": 0, "finish_reason": finish,
                                                   "message": {"role": "assistant", "content": step}}],
                                      "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    if status != 200:
                        self.send_header("Retry-After", "0")  # the retry at once: the test needs no wait
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    if trickle:
                        for i in range(20):
                            self.wfile.write(out[i * len(out) // 20:(i + 1) * len(out) // 20])
                            self.wfile.flush()
                            time.sleep(trickle / 20)
                    else:
                        self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def llm(monkeypatch):
    fake = FakeLLM()
    monkeypatch.setenv("SRO_TEST_KEY", KEY)
    yield fake
    fake.server.shutdown()


def _llm_project(url: str, timeout: float = 10.0) -> ProjectConfig:
    p = _math_project()
    return p.model_copy(update={"designer": p.designer.model_copy(update={
        "kind": "llm", "base_url": url, "model": "fake", "api_key_env": "SRO_TEST_KEY", "timeout_s": timeout})})


GOOD = {"params": [
    {"name": "algorithm", "kind": "categorical", "choices": ["grpo", "dapo"], "why": "single-turn math"},
    {"name": "lr", "kind": "float", "low": 1e-5, "high": 0.5, "log": True, "why": "too wide on purpose"},
    {"name": "group_size", "kind": "int", "low": 4, "high": 8, "why": "sparse rewards"},
    {"name": "made_up_knob", "kind": "float", "low": 0, "high": 1, "why": "not in the catalog"}],
    "simplexes": [{"name": "mixture", "members": ["mix.arithmetic", "mix.multiplication"], "why": "domains"}],
    "fixed": {"steps": 3}}


def _no_key_under(path: Path) -> None:
    for f in path.rglob("*"):
        if f.is_file():
            assert KEY not in f.read_text(errors="ignore"), f"the API key leaked into {f}"


def test_llm_valid_answer_becomes_a_space_clamped_to_the_catalog(llm, tmp_path):
    llm.script = [json.dumps(GOOD)]
    project = _llm_project(llm.url)
    space, path = design_space(project, tmp_path / "runs" / "quickstart")
    assert space.designer == "llm" and path.name == "space.yaml"
    assert space.param("algorithm").choices == ["grpo", "dapo"]
    assert space.param("lr").high == pytest.approx(1e-2)  # clamped to the declared range
    assert "made_up_knob" not in [p.name for p in space.params]
    audit = json.loads((tmp_path / "runs" / "quickstart" / "designer" / "answer.json").read_text())
    notes = " ".join(audit["rounds"][0]["notes"])
    assert "clamped lr" in notes and "dropped 'made_up_knob'" in notes
    assert (tmp_path / "runs" / "quickstart" / "designer" / "prompt.json").is_file()
    assert llm.requests[0]["auth"] == f"Bearer {KEY}"  # the key went to the endpoint ...
    _no_key_under(tmp_path / "runs")  # ... and nowhere on disk
    _every_recipe_trains(space)


def test_the_catalog_declares_the_sft_stage_where_the_trainer_runs_it(llm, tmp_path):
    """The SFT stage's knobs are in a single-turn project's catalog, so the LLM designer may search them (its
    review dropped `sft.steps` as undeclared until stop 30, though every trial reads it), and clamped to their
    declared range; a multi-turn project's trainer runs no SFT stage and no item filter, so there `sft.*` and
    `proc.*` are keys no part of a trial reads."""
    from sro.executor import recipe_keys

    answer = {**GOOD, "params": [*GOOD["params"], {"name": "sft.steps", "kind": "int", "low": 0, "high": 900,
                                                    "why": "warm start the format"}]}
    llm.script = [json.dumps(answer)]
    space = design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")
    assert space.param("sft.steps").high == 200  # the stage's declared range
    assert {"sft.steps", "proc.dedup"} <= recipe_keys(_math_project())
    agent = load_project(ROOT / "search_spaces" / "agent.yaml", trains=False)
    assert not {"sft.steps", "proc.dedup"} & recipe_keys(agent) and not build_catalog(agent).stages


def test_the_review_settles_conditions_and_refuses_a_key_both_searched_and_fixed():
    """A review's cases (stop 30): the child of a parameter dropped for its condition is dropped too (it kept
    naming its dropped parent, and the whole answer was refused for it); a condition on values its parent
    cannot take is never active, so that parameter is dropped; a key both searched and fixed is refused
    (the searched value won silently)."""
    from sro.designer.llm import SpaceAnswer, review

    project = _math_project()
    catalog = build_catalog(project)
    lr = {"name": "lr", "kind": "float", "low": 1e-5, "high": 1e-3, "log": True, "why": "x"}
    mix = {"name": "mixture", "members": ["mix.arithmetic", "mix.multiplication"], "why": "x"}

    def check(params, fixed=None):
        return review(SpaceAnswer.model_validate({"params": params, "simplexes": [mix], "fixed": fixed or {}}),
                      catalog, project)

    space, notes = check([lr, {"name": "batch_multiplier", "kind": "int", "low": 1, "high": 4, "why": "x",
                               "when": {"algorithm": ["proximal_kl"]}},
                          {"name": "batch_switch_at", "kind": "float", "low": 0.2, "high": 0.8, "why": "x",
                           "when": {"batch_multiplier": [2, 3, 4]}}], {"algorithm": "grpo"})
    assert [p.name for p in space.params] == ["lr"]
    assert notes[-1] == "dropped 'batch_switch_at': its parent 'batch_multiplier' was dropped"
    space, notes = check([{"name": "algorithm", "kind": "categorical", "choices": ["grpo", "dapo"], "why": "x"}, lr,
                          {"name": "eps_high", "kind": "float", "low": 0.2, "high": 0.3, "why": "x",
                           "when": {"algorithm": ["cispo", "dapo"]}}])
    assert space.param("eps_high").condition == {"algorithm": ["dapo"]}  # cispo cannot be chosen here
    with pytest.raises(ValueError, match="lr: both searched .params. and fixed; keep one of the two"):
        check([lr], {"lr": 5e-5})
    # an algorithm's knob only where the space's algorithms read it
    space, notes = check([lr, {"name": "prox.beta_p", "kind": "float", "low": 0.5, "high": 2, "why": "x"}],
                         {"algorithm": "dr_grpo", "scale_rewards": "batch"})
    assert [p.name for p in space.params] == ["lr"] and "scale_rewards" not in space.fixed
    assert "dropped 'prox.beta_p': none of the space's algorithms (dr_grpo) reads it" in notes
    assert "dropped fixed 'scale_rewards': dr_grpo pins it at 'none'" in notes
    space, _ = check([{"name": "algorithm", "kind": "categorical", "choices": ["grpo", "proximal_kl"], "why": "x"}, lr,
                      {"name": "prox.beta_p", "kind": "float", "low": 0.5, "high": 2, "why": "x"}])
    assert space.param("prox.beta_p").condition == {"algorithm": ["proximal_kl"]}


def test_llm_malformed_json_is_repaired_once(llm, tmp_path):
    llm.script = ["{not json", json.dumps(GOOD)]
    space = design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")
    assert space.designer == "llm" and len(llm.requests) == 2
    repair = llm.requests[1]["body"]["messages"][-1]["content"]
    assert "not valid JSON" in repair  # the validation error went back to the model


def test_llm_malformed_twice_falls_back_to_rules_with_a_warning(llm, tmp_path):
    llm.script = ["{not json", "still not json"]
    warnings: list[str] = []
    space, _ = design_space(_llm_project(llm.url), tmp_path / "run", log=warnings.append)
    assert space.designer == "rules"
    assert len(warnings) == 1 and "LLM designer failed" in warnings[0] and "after one repair round" in warnings[0]
    _no_key_under(tmp_path)


@pytest.mark.parametrize("bad, needle", [
    ({**GOOD, "params": [{"name": "algorithm", "kind": "categorical", "choices": ["grpo", "ppo_magic"],
                          "why": "x"}]}, "unknown algorithm"),
    ({**GOOD, "simplexes": [{"name": "mixture", "members": ["mix.arithmetic", "mix.poetry"], "why": "x"}]},
     "unknown source"),
])
def test_llm_unknown_algorithm_or_source_is_rejected(llm, tmp_path, bad, needle):
    llm.script = [json.dumps(bad), json.dumps(bad)]
    with pytest.raises(DesignerFailed, match=needle):
        design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")
    assert needle in llm.requests[1]["body"]["messages"][-1]["content"]  # rejected with the reason, then repaired


@pytest.mark.parametrize("reply", [b"<html><body>Open WebUI</body></html>", b'{"choices": [{"message": null}]}',
                                   b'[1, 2]'])
def test_an_answer_that_is_no_chat_completion_fails_clearly(llm, tmp_path, reply):
    """A 200 whose body is not a chat completion (a web UI's page on the wrong path, a null message, a list)
    escaped as an AttributeError and stopped `sro design` and a mid-search redesign; it is a DesignerFailed,
    so both fall back to the rules (review, stop 30)."""
    llm.script = [reply]
    with pytest.raises(DesignerFailed, match="not a chat completion|cannot read"):
        design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")


def test_llm_busy_or_erring_endpoint_is_asked_again(llm, tmp_path):
    """A 429 or a 500 fell back to the rules at once (a review, stop 37): asked up to three times."""
    llm.script = [(429, "rate limited"), (500, "overloaded"), json.dumps(GOOD)]
    space = design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")
    assert space.designer == "llm" and len(llm.requests) == 3
    llm.script = [(500, "down")] * 3
    with pytest.raises(DesignerFailed, match="HTTP 500"):
        design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "e")


def test_credentials_in_the_endpoint_url_are_masked_in_messages_and_files(llm, tmp_path):
    url = llm.url.replace("http://", "http://alice:hunter2@") + "?api-key=s3cret"
    llm.script = [(500, "down")] * 3
    with pytest.raises(DesignerFailed) as e:
        design_llm(build_catalog(_math_project()), _llm_project(url), tmp_path / "d")
    assert "alice:***@" in str(e.value) and "api-key=***" in str(e.value)
    for text in [str(e.value)] + [f.read_text() for f in (tmp_path / "d").rglob("*") if f.is_file()]:
        assert "hunter2" not in text and "s3cret" not in text


def test_llm_server_without_json_mode_is_asked_without_it(llm, tmp_path):
    llm.script = [(400, "response_format json_object is not supported by this model"), json.dumps(GOOD)]
    space = design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")
    assert space.designer == "llm"
    assert "response_format" in llm.requests[0]["body"] and "response_format" not in llm.requests[1]["body"]
    assert "temperature" not in llm.requests[1]["body"]


def test_an_answer_in_prose_or_after_thinking_is_read():
    body = json.dumps(GOOD)
    for reply in (f"Here is the space:\n```json\n{body}\n```\nGood luck.", f"<think>lr matters\nmost</think>\n{body}",
                  f"The space: {body} -- done", f"```\n{body}\n```", body):
        assert json.loads(unfenced(reply)) == GOOD, reply


def test_a_json_answer_followed_by_an_unrelated_code_fence_is_read_as_the_json():
    """`{...}` followed by a ```bash fence with the next command was read as the command, a wasted repair round
    (a review, stop 53): the JSON the text starts with is the answer, and a fence that holds no JSON is passed
    over for one that does or for the braces in the prose."""
    body = json.dumps(GOOD)
    for reply in (f"{body}\n\nThen run:\n```bash\nsro search q.yaml\n```",
                  f"Run:\n```bash\nsro search q.yaml\n```\nwith this space:\n```json\n{body}\n```",
                  f"The space: {body}\nThen:\n```bash\nsro search q.yaml\n```"):
        assert json.loads(unfenced(reply)) == GOOD, reply
    assert unfenced("{not json\n```bash\nls\n```").startswith("{not json")  # its own JSON error goes back
    assert unfenced("```python\nprint(1)\n```") == "print(1)"


def test_an_answer_cut_off_at_the_token_limit_says_so(llm, tmp_path):
    llm.script = [(json.dumps(GOOD)[:40], "length")]
    with pytest.raises(DesignerFailed, match="cut off at the server's token limit after 40 characters"):
        design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")


def test_an_answer_that_searches_nothing_is_not_a_space(llm, tmp_path):
    """Every parameter under a name of its own (`lrr`) dropped: an empty space was written as the llm's design
    and searched at the trainer's defaults (a review, stop 37). It is rejected, with the names, then repaired."""
    own = json.dumps({"params": [{"name": "lrr", "kind": "float", "low": 0, "high": 1, "why": "x"}]})
    llm.script = [own, own]
    with pytest.raises(DesignerFailed, match="searches nothing SRO can train .*dropped 'lrr'"):
        design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")
    assert "searches nothing" in llm.requests[1]["body"]["messages"][-1]["content"]


def test_an_answer_whose_every_parameter_the_review_drops_searches_nothing(llm, tmp_path):
    """The empty-space check ran before the review dropped a knob no algorithm of the space reads: an answer
    searching only `prox.beta_p` beside the default grpo was written as an empty space.yaml, which `sro search`
    then refused (a review, stop 53). It is rejected with the drop, then repaired."""
    only = json.dumps({"params": [{"name": "prox.beta_p", "kind": "float", "low": 0, "high": 1, "why": "x"}]})
    llm.script = [only, only]
    with pytest.raises(DesignerFailed, match="searches nothing SRO can train .*dropped 'prox.beta_p': none of the "
                                             r"space's algorithms \(grpo\) reads it"):
        design_llm(build_catalog(_math_project()), _llm_project(llm.url), tmp_path / "d")
    assert "searches nothing" in llm.requests[1]["body"]["messages"][-1]["content"]
    assert not (tmp_path / "d" / "space.yaml").exists()


def test_a_condition_that_lists_lists_is_a_refused_answer_then_the_rules(llm, tmp_path):
    """`"when": {"algorithm": [["dapo"]]}` was a TypeError (unhashable type: 'list') out of `sro design` and out
    of a running search's redesign, which catches only `DesignerFailed` (a review, stop 53): it is refused with
    the parameter named, repaired once, then the rules design (and redesign) it."""
    from sro.designer.redesign import Evidence, redesign

    bad = json.dumps({"params": [
        {"name": "algorithm", "kind": "categorical", "choices": ["grpo", "dapo"], "why": "x"},
        {"name": "eps_high", "kind": "float", "low": 0.1, "high": 0.2, "when": {"algorithm": [["dapo"]]}, "why": "x"}]})
    llm.script = [bad, bad]
    warnings: list[str] = []
    space, _ = design_space(_llm_project(llm.url), tmp_path / "run", log=warnings.append)
    assert space.designer == "rules" and len(llm.requests) == 2
    repair = llm.requests[1]["body"]["messages"][-1]["content"]
    assert "parameter 'eps_high': `when` lists [['dapo']] for 'algorithm'" in repair, repair
    assert len(warnings) == 1 and "after one repair round" in warnings[0]
    llm.script = [bad, bad]
    new = redesign(space, Evidence(4, [], {}), build_catalog(_math_project()), _llm_project(llm.url),
                   tmp_path / "run", warn=warnings.append)
    assert new.designer == "rules" and new.version == space.version + 1 and "redesigning with the rules" in warnings[-1]


def test_an_llm_designer_without_endpoint_or_key_is_refused_before_any_work(micro_project, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sro.cli import app
    from sro.config import ConfigError, load_project

    with pytest.raises(ConfigError, match="designer: kind: llm needs base_url and model"):
        load_project(micro_project("nourl", "designer: {kind: llm}\n"))
    monkeypatch.delenv("SRO_NO_SUCH_KEY", raising=False)
    path = micro_project("nokey", "designer: {kind: llm, base_url: 'http://127.0.0.1:9/v1', model: m, "
                                  "api_key_env: SRO_NO_SUCH_KEY}\n")
    for verb in ("design", "search"):
        res = CliRunner().invoke(app, [verb, str(path), "--runs", str(tmp_path / "runs")], env={"COLUMNS": "300"})
        flat = " ".join(res.output.split())
        assert res.exit_code == 2 and "the environment variable SRO_NO_SUCH_KEY is not set" in flat, res.output
        assert not (tmp_path / "runs" / "nokey").exists()


def test_llm_slow_endpoint_times_out_with_a_clear_message(llm, tmp_path):
    llm.script = [3.0]
    catalog = build_catalog(_math_project())  # (outside the clock: 1.6 s on a loaded machine)
    t0 = time.monotonic()
    with pytest.raises(DesignerFailed, match=r"did not answer within 0.5s"):
        design_llm(catalog, _llm_project(llm.url, timeout=0.5), tmp_path / "d")
    assert time.monotonic() - t0 < 3.0


def test_llm_timeout_bounds_the_whole_answer_not_each_read(llm, tmp_path):
    """An endpoint sending its answer in 20 pieces over 4 s, each within the 0.5 s timeout: the client's own
    timeout is per read, so design waited the 4 s (stop 37's note); designer.timeout_s is the whole wait."""
    llm.script = [("trickle", 4.0)]
    catalog = build_catalog(_math_project())  # (outside the clock: 1.6 s on a loaded machine)
    t0 = time.monotonic()
    with pytest.raises(DesignerFailed, match=r"did not answer within 0.5s"):
        design_llm(catalog, _llm_project(llm.url, timeout=0.5), tmp_path / "d")
    assert time.monotonic() - t0 < 2.0


def test_llm_missing_key_or_dead_endpoint_fail_clearly(monkeypatch, tmp_path):
    monkeypatch.delenv("SRO_NO_SUCH_KEY", raising=False)
    p = _llm_project("http://127.0.0.1:9/v1", timeout=2)
    with pytest.raises(DesignerFailed, match="cannot reach"):
        monkeypatch.setenv("SRO_TEST_KEY", KEY)
        design_llm(build_catalog(p), p, tmp_path / "d")
    p = p.model_copy(update={"designer": p.designer.model_copy(update={"api_key_env": "SRO_NO_SUCH_KEY"})})
    with pytest.raises(DesignerFailed, match="SRO_NO_SUCH_KEY"):
        design_llm(build_catalog(p), p, tmp_path / "d")


# --- redesign from evidence ----------------------------------------------------------------------

def _space() -> RecipeSpace:
    return RecipeSpace([Param("lr", "float", 1e-5, 1e-3, log=True, rationale="lr"),
                        Param("steps", "int", 10, 50, rationale="steps"),
                        Param("temperature", "float", 0.5, 1.5, rationale="t")],
                       fixed={"algorithm": "grpo"}, designer="rules")


def test_redesign_drops_unimportant_dims_narrows_important_ones_and_keeps_fitting_trials(tmp_path):
    data = {"name": "rd", "domains": {"a": {"sources": [{"reasoning_gym": "basic_arithmetic"}],
                                            "benchmarks": [{"name": "b", "reasoning_gym": "basic_arithmetic"}]}},
            "objectives": [{"a/b": "max"}], "designer": {"redesign_every": 12}}
    project = ProjectConfig.model_validate(data)
    space = _space()
    ledger = Ledger(project, tmp_path / "rd")
    for values in space.sobol(12, seed=1):  # the score depends on lr only, peaking near 3e-4
        score = 1.0 - abs(math.log10(values["lr"]) - math.log10(3e-4))
        trial = ledger.start(Recipe(values, dict(space.fixed)), space)
        ledger.finish(trial, {"a/b": score}, {"wall_s": 1.0}, [])
    records = ledger.records()
    ev = gather_evidence(ledger, records, project.objective_directions())
    assert ev.importances and max(ev.importances, key=ev.importances.get) == "lr"
    new = redesign_rules(space, ev)
    assert new.version == 2 and "lr" in [p.name for p in new.params]
    dropped = {"steps", "temperature"} - {p.name for p in new.params}
    assert dropped and all(k in new.fixed for k in dropped)
    assert "v2:" in new.param("lr").rationale
    kept = [r for r in records if fits(new, r.recipe)]
    assert kept and len(kept) <= len(records)
    best = max(records, key=lambda r: r.scores["a/b"])
    assert fits(new, best.recipe)  # the Pareto recipe stays in the evidence
    old, lr = space.param("lr"), new.param("lr")
    assert lr.low > old.low or lr.high < old.high  # narrowed around the Pareto lr
    outside = (lr.high + old.high) / 2 if lr.high < old.high else (lr.low + old.low) / 2
    assert not fits(new, Recipe({**best.recipe.values, "lr": outside}, dict(space.fixed)))

    # the search loop's hook: due after 12 trials, writes space.v2.yaml
    logs: list[str] = []
    out = maybe_redesign(project, ledger, space, None, tmp_path / "rd", log=logs.append)
    assert out is not None and (tmp_path / "rd" / "space.v2.yaml").is_file()
    assert "version 2" in logs[0] and "stay in the optimizer's evidence, 1 of the 1 Pareto recipe(s)" in logs[0]
    assert len(logs) == 1  # the rules' version holds its Pareto recipes: no warning
    assert maybe_redesign(project, ledger, out, None, tmp_path / "rd", log=logs.append) is None  # not due again


def _four_scored_trials(tmp_path: Path) -> tuple[ProjectConfig, RecipeSpace, Ledger]:
    """A project due a redesign after 4 trials, and a study of 4 complete trials of `_space()` scored by lr."""
    data = {"name": "rd", "domains": {"a": {"sources": [{"reasoning_gym": "basic_arithmetic"}],
                                            "benchmarks": [{"name": "b", "reasoning_gym": "basic_arithmetic"}]}},
            "objectives": [{"a/b": "max"}], "designer": {"redesign_every": 4}}
    project = ProjectConfig.model_validate(data)
    space = _space()
    ledger = Ledger(project, tmp_path / "rd")
    for values in space.sobol(4, seed=1):
        ledger.finish(ledger.start(Recipe(values, dict(space.fixed)), space), {"a/b": values["lr"] * 100},
                      {"wall_s": 1.0}, [])
    return project, space, ledger


def test_a_redesign_that_holds_no_pareto_recipe_says_so(tmp_path, monkeypatch):
    """An LLM's version may move every range away from the Pareto recipes (the rules' never does): the search
    then says that the optimizer starts its evidence over, and where the version before is (a review, stop 53:
    the log said only how many trials fit)."""
    import sro.designer.redesign as rd

    project, space, ledger = _four_scored_trials(tmp_path)
    away = RecipeSpace([Param("lr", "float", 2e-3, 1e-2, log=True, rationale="lr"), *space.params[1:]],
                       fixed=dict(space.fixed), designer="llm", version=2)
    monkeypatch.setattr(rd, "redesign", lambda *args, **kw: away)
    logs: list[str] = []
    assert rd.maybe_redesign(project, ledger, space, None, tmp_path / "rd", log=logs.append) is not None
    assert logs[0].endswith("0 earlier trial(s) fit it and stay in the optimizer's evidence, 0 of the 1 Pareto recipe(s)")
    assert "holds none of the Pareto recipes" in logs[1] and "space.v1.yaml is the version before" in logs[1]


def test_a_log_scale_redesign_keeps_a_pareto_recipe_on_an_edge_and_low_below_high():
    """A review's cases (stop 30). On a log scale the bounds came back as exp(log(v)), which is not always v:
    a Pareto lr on the edge fell outside the narrowed range by one rounding step (915 of 2000 random spaces),
    and an int bound moved by one. Lowering the lr ceiling under a floor that an earlier version's Pareto lr
    lies below wrote low > high, a space no resume could read."""
    import random

    from sro.designer.redesign import Evidence

    rng = random.Random(0)
    for _ in range(300):
        lo = 10 ** rng.uniform(-7, -4)
        hi = lo * 10 ** rng.uniform(0.3, 2)
        edge = rng.choice([lo, hi])
        new = redesign_rules(RecipeSpace([Param("lr", "float", lo, hi, log=True)], fixed={"algorithm": "grpo"}),
                             Evidence(10, [{"values": {"lr": edge}, "scores": {}}], {"lr": 0.9}))
        assert new.param("lr").contains(edge), (lo, hi, edge)
    for top in (True, False):  # an int on a log scale with the Pareto value at a bound keeps that bound
        p = Param("steps", "int", 5, 10_000, log=True)
        v = 10_000 if top else 5
        q = redesign_rules(RecipeSpace([p]), Evidence(10, [{"values": {"steps": v}, "scores": {}}], {"steps": 0.9})).param("steps")
        assert (q.high == 10_000) if top else (q.low == 5), (q.low, q.high)
    old = RecipeSpace([Param("lr", "float", 1e-5, 1e-4, log=True)], fixed={"algorithm": "grpo"}, version=2)
    new = redesign_rules(old, Evidence(6, [{"values": {"lr": 5e-6}, "scores": {}}], {},
                                       failures=[{"values": {"lr": 2e-4}, "message": "collapsed"}]))
    assert new.param("lr").low <= new.param("lr").high
    RecipeSpace.from_yaml(new.to_yaml())


def test_a_new_design_takes_a_version_past_every_kept_one(tmp_path):
    """With space.yaml removed to design afresh, `sro design` took version 1 again and overwrote space.v1.yaml,
    the space the first trials ran in (review, stop 30): the next version is past every kept one."""
    from sro.designer.design import last_version, write_space

    assert last_version(tmp_path / "none") == 0
    for v in (1, 2):
        write_space(tmp_path, RecipeSpace([Param("lr", "float", 1e-5, 1e-3, log=True)], version=v))
    (tmp_path / "space.yaml").unlink()
    (tmp_path / "space.vx.yaml").write_text("not a version")
    assert last_version(tmp_path) == 2 and last_version(tmp_path, RecipeSpace([], version=5)) == 5


def test_a_redesign_the_search_check_refuses_is_dropped(tmp_path):
    """A redesigned version that the search's check of fixed settings refuses (an LLM fixing group_size: 4.5) is
    logged and dropped: nothing written, the search goes on in the space it had, and it is not retried at
    every trial (until stop 30 it was adopted and every later trial failed)."""
    from sro.search import _check_fixed

    project, space, ledger = _four_scored_trials(tmp_path)

    def check(new: RecipeSpace) -> None:  # the search's own check, on the new version with a bad fixed value
        _check_fixed(RecipeSpace(new.params, new.simplexes, {**new.fixed, "group_size": 4.5}, version=new.version),
                     project, tmp_path / "rd", redesigned=True)

    logs: list[str] = []
    assert maybe_redesign(project, ledger, space, None, tmp_path / "rd", log=logs.append, check=check) is None
    assert not (tmp_path / "rd" / "space.v2.yaml").exists()
    assert logs == ["the redesigned space (version 2) was refused and is not used: the redesigned space (v2): "
                    "fixed.group_size=4.5 must be a whole number; the search goes on in version 1"]
    assert maybe_redesign(project, ledger, space, None, tmp_path / "rd", log=logs.append, check=check) is None
    assert len(logs) == 1  # not due again until more trials


# --- `sro design`, then editing the space ------------------------------------------------------

@pytest.mark.slow
def test_sro_design_then_edit_then_search_uses_it(micro_project, tmp_path):
    """`sro design` writes a reviewable space; an edited bound changes what the search proposes; with
    no space.yaml at all, the search designs one (rules) and says so."""
    from rich.console import Console

    from sro.executor import SearchContext
    from sro.search import load_space

    project = micro_project("des")
    runs = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "sro.cli", "design", str(project), "--runs", str(runs)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    path = runs / "des" / "space.yaml"
    assert "wrote" in r.stdout and path.is_file() and (runs / "des" / "space.v1.yaml").is_file()
    doc = yaml.safe_load(path.read_text())
    assert doc["designer"] == "rules" and doc["params"]
    assert all(p["why"].strip() for p in doc["params"].values())  # rationale beside every parameter
    assert path.read_text().startswith("# SRO recipe space")

    # a person narrows the learning rate: the search reads the edit, says so, and proposes inside it
    space = RecipeSpace.from_yaml(path.read_text())
    before = [rec.values["lr"] for rec in SobolProposer(space, seed=0).propose([], 4)]
    doc["params"]["lr"].update(low=1e-3, high=2e-3)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    console = Console(record=True)
    edited = load_space(load_project(project), runs / "des", console)
    assert "using the search space in" in console.export_text()
    after = [rec.values["lr"] for rec in SobolProposer(edited, seed=0).propose([], 4)]
    assert all(1e-3 <= x <= 2e-3 for x in after) and not all(1e-3 <= x <= 2e-3 for x in before)

    # no space.yaml: the search designs one with the project's designer (cached measurements reused)
    auto = load_project(micro_project("auto"))
    ctx = SearchContext.prepare(auto, runs / ".cache", log=lambda s: None)
    console = Console(record=True)
    designed = load_space(auto, runs / "auto", console, ctx)
    assert designed.designer == "rules" and (runs / "auto" / "space.yaml").is_file()
    assert "designed the search space with the rules designer" in console.export_text()
    _every_recipe_trains(designed)


def test_redesign_is_due_when_the_hypervolume_stalls():
    from sro.designer.redesign import due, hypervolume_stalled
    from sro.ledger import TrialRecord

    objectives = [("a/b", "max"), ("cost", "min")]

    def rec(i: int, score: float, cost: float) -> TrialRecord:
        return TrialRecord(i, "complete", Recipe({"lr": i}), {"a/b": score}, {"wall_s": cost})

    rising = [rec(0, 0.1, 10), rec(1, 0.2, 10), rec(2, 0.3, 10)]
    flat = rising + [rec(3, 0.05, 20), rec(4, 0.1, 30), rec(5, 0.2, 11)]  # all dominated by trial 2
    assert not hypervolume_stalled(rising, objectives, 2)
    assert hypervolume_stalled(flat, objectives, 3)
    assert not hypervolume_stalled(flat + [rec(6, 0.9, 5)], objectives, 3)
    data = {"name": "st", "domains": {"a": {"sources": [{"reasoning_gym": "basic_arithmetic"}],
                                            "benchmarks": [{"name": "b", "reasoning_gym": "basic_arithmetic"}]}},
            "designer": {"redesign_on_stall": 3}}
    project = ProjectConfig.model_validate(data)
    assert due(project, flat, 0) == "the hypervolume has not grown for 3 trials"
    assert due(project, flat, 4) is None  # fewer than 3 trials since the last design
    # a stated reference point no trial beats: the stall says why it cannot end
    strict = ProjectConfig.model_validate({**data, "reference_point": {"cost": 5}})
    assert due(strict, flat, 0) == ("the hypervolume has not grown for 3 trials (it is 0: no complete trial is "
                                    "better than the project's reference_point on every objective)")
    loose = ProjectConfig.model_validate({**data, "reference_point": {"cost": 100}})
    assert due(loose, flat, 0) == "the hypervolume has not grown for 3 trials"


# --- LLM-proposed candidates for the optimizer ---------------------------------------------------

def test_llm_candidates_reach_the_botorch_pool_validated_and_new(llm, tmp_path):
    from sro.designer.candidates import llm_candidates
    from sro.ledger import TrialRecord
    from sro.optimizer.botorch_proposer import BoTorchProposer
    from sro.search import make_proposer

    project = _llm_project(llm.url)
    space = _space()
    ran = {"lr": 1e-4, "steps": 20, "temperature": 1.0}
    history = [TrialRecord(0, "complete", Recipe(ran, dict(space.fixed)), {"arithmetic/add": 0.5},
                           {"wall_s": 10.0})]
    good = {"lr": 3e-4, "steps": 30, "temperature": 0.8}
    llm.script = [json.dumps({"recipes": [good, {"lr": 5.0, "steps": 30, "temperature": 0.8}, ran]}), "not json"]
    prop = BoTorchProposer(space, seed=0, objectives=[("arithmetic/add", "max"), ("cost", "min")],
                           extra=llm_candidates(project, space, tmp_path / "designer"))
    with pytest.warns(UserWarning, match="extra candidate 1 skipped"):
        got = prop._extra(history, {r.recipe.key for r in history})
    assert got == [good]  # out of range dropped, already-run dropped
    assert "Trials so far" in llm.requests[0]["body"]["messages"][1]["content"]
    with pytest.warns(UserWarning, match="extra candidate source failed"):
        assert prop._extra(history, set()) == []  # a bad answer never stops the search
    # a fenced answer is read as the designer's own answers are (it was refused), and a proposer built anew
    # (after a redesign or a resume) numbers its audit files after the ones there (it wrote over candidates-1)
    llm.script = ["```json\n" + json.dumps({"recipes": [good]}) + "\n```"]
    again = llm_candidates(project, space, tmp_path / "designer")
    assert again(history) == [good]
    assert sorted(f.name for f in (tmp_path / "designer").glob("candidates-*-answer.json")) == [
        f"candidates-{i}-answer.json" for i in (1, 2, 3)]
    assert "not json" in (tmp_path / "designer" / "candidates-2-answer.json").read_text()
    _no_key_under(tmp_path)
    assert make_proposer("botorch", space, project, tmp_path).extra is not None
    assert make_proposer("botorch", space, _math_project(), tmp_path).extra is None


def _graded_agent_project() -> ProjectConfig:
    """The agent project with a second benchmark that grades the stated confidence (ECE)."""
    data = _agent_project().model_dump()
    data["domains"]["agent"]["benchmarks"].append({**data["domains"]["agent"]["benchmarks"][0],
                                                   "name": "coin_ece", "metric": "ece"})
    data["objectives"] = []
    return ProjectConfig.model_validate(data)


def test_rules_design_states_the_confidence_when_a_benchmark_grades_it():
    plain, graded = _agent_project(), _graded_agent_project()
    assert "mt.confidence" not in design_rules(build_catalog(plain), plain).fixed
    space = design_rules(build_catalog(graded), graded)
    assert space.fixed["mt.confidence"] is True
    _every_recipe_trains(space, 8)
    from trainers.multiturn import multi_turn_config

    r = Recipe(space.sobol(1, seed=0)[0], dict(space.fixed))
    assert multi_turn_config(str(r.get("algorithm", "grpo")), config_for(str(r.get("algorithm", "grpo")),
                                                                         {**r.fixed, **r.values}),
                             {**r.fixed, **r.values}).confidence


def test_llm_design_states_the_confidence_when_a_benchmark_grades_it(llm, tmp_path):
    """Set in the LLM answer's review, so a redesign by the LLM (design_llm with space=) keeps it too."""
    llm.script = [json.dumps({"params": [{"name": "lr", "kind": "float", "low": 1e-5, "high": 1e-3, "log": True,
                                          "why": "x"}], "simplexes": [], "fixed": {}})]
    graded = _graded_agent_project()
    graded = graded.model_copy(update={"designer": _llm_project(llm.url).designer})
    space = design_llm(build_catalog(graded), graded, tmp_path / "d")
    assert space.designer == "llm" and space.fixed["mt.confidence"] is True


def test_llm_answers_outside_the_catalogs_declarations_are_refused_or_mended():
    """What `review` checks beyond names: an unhashable algorithm (it used to crash with a TypeError
    instead of going back to the model), a numeric knob of the wrong kind, a fixed value or a grid
    point outside the declared range, a simplex that is not a whole group; and a condition on a
    parent the space fixes is decided at once (it used to be dropped, so the knob was searched under
    every algorithm)."""
    from sro.designer.llm import SpaceAnswer, review

    catalog, project = build_catalog(_math_project()), _math_project()
    base = {"params": [{"name": "lr", "kind": "float", "low": 1e-5, "high": 1e-3, "log": True, "why": "x"}],
            "simplexes": [{"name": "mixture", "members": ["mix.arithmetic", "mix.multiplication"], "why": "x"}]}

    def check(**change):
        return review(SpaceAnswer.model_validate({**base, **change}), catalog, project)

    for change, needle in (
            ({"fixed": {"algorithm": ["grpo"]}}, "fixed algorithm names unknown algorithm(s) [['grpo']]"),
            ({"params": [{"name": "algorithm", "kind": "categorical", "choices": [{"name": "grpo"}], "why": "x"}]},
             "unknown algorithm"),
            ({"params": [{"name": "group_size", "kind": "float", "low": 2, "high": 8, "why": "x"}]},
             "'group_size' is declared int, not float"),
            ({"fixed": {"lr": 5.0}}, "fixed lr: 5.0 is not a declared float value"),
            ({"fixed": {"group_size": 7.3}}, "fixed group_size: 7.3 is not a declared int value"),
            ({"params": [{"name": "lr", "kind": "categorical", "choices": [0.5, 3.0], "why": "x"}]},
             "no choice of [0.5, 3.0] is a float inside the declared"),
            ({"simplexes": [{"name": "m", "members": ["mix.arithmetic", "src.arithmetic.0"], "why": "x"}]},
             "a simplex is every domain's")):
        with pytest.raises(ValueError, match=re.escape(needle)):
            check(**change)
    space, notes = check(params=[{"name": "lr", "kind": "categorical", "choices": [1e-4, 3.0], "why": "grid"}])
    assert space.param("lr").choices == [1e-4] and any("dropped choices outside" in n for n in notes)
    beta_p = {"name": "prox.beta_p", "kind": "float", "low": 0.5, "high": 2.0, "why": "x",
              "when": {"algorithm": ["proximal_kl"]}}
    space, notes = check(params=[base["params"][0], beta_p], fixed={"algorithm": "grpo"})
    assert [p.name for p in space.params] == ["lr"] and any("fixes at 'grpo'" in n for n in notes)
    space, _ = check(params=[base["params"][0], beta_p], fixed={"algorithm": "proximal_kl"})
    assert space.param("prox.beta_p").condition is None  # always active under the fixed algorithm


def test_the_review_searches_the_batch_switch_only_where_the_batch_grows():
    """An LLM's space searched `batch_switch_at` and `lr_alpha` with the multiplier fixed at 1 (or left at its
    default 1): two dimensions that moved nothing. Now they are dropped there, with a note; beside a searched
    multiplier they get a condition on its values from 2 up (intersected with the answer's own), and a multiplier
    range that never reaches 2 drops them."""
    from sro.designer.llm import SpaceAnswer, review

    catalog, project = build_catalog(_math_project()), _math_project()
    lr = {"name": "lr", "kind": "float", "low": 1e-5, "high": 1e-3, "log": True, "why": "x"}
    switch = {"name": "batch_switch_at", "kind": "float", "low": 0.5, "high": 0.9, "why": "x"}
    alpha = {"name": "lr_alpha", "kind": "categorical", "choices": [0.0, 0.5], "why": "x"}

    def check(params, fixed=None):
        space, notes = review(SpaceAnswer.model_validate({"params": params, "fixed": fixed or {}}), catalog, project)
        return {p.name: p.condition for p in space.params}, notes

    names, notes = check([lr, switch, alpha])
    assert names == {"lr": None}, names
    assert ("dropped 'batch_switch_at': the batch grows only at a batch_multiplier of 2 or more, and the space "
            "leaves it at its default batch_multiplier 1") in notes, notes
    names, notes = check([lr, switch], fixed={"batch_multiplier": 1})
    assert names == {"lr": None} and any("the space fixes batch_multiplier 1" in n for n in notes), notes
    names, _ = check([lr, switch], fixed={"batch_multiplier": 3})
    assert names == {"lr": None, "batch_switch_at": None}
    mult = {"name": "batch_multiplier", "kind": "int", "low": 1, "high": 3, "why": "x"}
    names, _ = check([lr, mult, switch, {**alpha, "when": {"batch_multiplier": [1, 3]}}])
    assert names["batch_switch_at"] == {"batch_multiplier": [2, 3]} and names["lr_alpha"] == {"batch_multiplier": [3]}
    names, notes = check([lr, {**mult, "high": 1}, switch])
    assert "batch_switch_at" not in names and any(n.startswith("dropped 'batch_switch_at'") for n in notes), notes


def test_the_review_keeps_knobs_to_their_readers_regime_and_ranges():
    """A review's cases (stop 33), each of which the review let through: an answer's own condition on the
    algorithm named only algorithms that ignore the knob (`prox.beta_p when algorithm in [grpo]`); with no
    algorithm in the answer, a knob's condition on proximal_kl was removed and the knob searched under grpo; a
    multi-turn algorithm (proas) was accepted in a single-turn project, where it trains as grpo; a condition on
    an int parent's values outside its range left a dimension never active; a half-given range was replaced by
    the whole declared one; `algorithm` of kind bool and a fixed bool knob given 1 were refused with messages
    naming nothing; and an agent project's review kept `proc.*`, which the search then refused."""
    from sro.designer.llm import SpaceAnswer, review

    catalog, project = build_catalog(_math_project()), _math_project()
    lr = {"name": "lr", "kind": "float", "low": 1e-5, "high": 1e-3, "log": True, "why": "x"}
    mix = {"name": "mixture", "members": ["mix.arithmetic", "mix.multiplication"], "why": "x"}

    def check(params, fixed=None, cat=catalog, proj=project, simplexes=(mix,)):
        return review(SpaceAnswer.model_validate({"params": params, "simplexes": list(simplexes),
                                                  "fixed": fixed or {}}), cat, proj)

    algo = {"name": "algorithm", "kind": "categorical", "choices": ["grpo", "proximal_kl"], "why": "x"}
    beta_p = {"name": "prox.beta_p", "kind": "float", "low": 0.5, "high": 2.0, "why": "x"}
    space, notes = check([algo, lr, {**beta_p, "when": {"algorithm": ["grpo"]}}])
    assert "prox.beta_p" not in [p.name for p in space.params] and any("none of which reads it" in n for n in notes)
    space, _ = check([algo, lr, {**beta_p, "when": {"algorithm": ["grpo", "proximal_kl"]}}])
    assert space.param("prox.beta_p").condition == {"algorithm": ["proximal_kl"]}
    space, notes = check([lr, {**beta_p, "when": {"algorithm": ["proximal_kl"]}}])  # no algorithm: grpo
    assert [p.name for p in space.params] == ["lr"] and space.fixed["algorithm"] == "grpo"
    assert any("fixes at 'grpo'" in n for n in notes), notes
    with pytest.raises(ValueError, match=r"proas train\(s\) multi-turn projects only, and this one is single-turn"):
        check([{**algo, "choices": ["grpo", "proas"]}, lr])
    with pytest.raises(ValueError, match="must be kind categorical"):
        check([{"name": "algorithm", "kind": "bool", "why": "x"}, lr])
    with pytest.raises(ValueError, match="fixed dynamic_sampling: 1 must be true or false"):
        check([lr], {"dynamic_sampling": 1})
    space, notes = check([lr, {"name": "batch_multiplier", "kind": "int", "low": 1, "high": 2, "why": "x"},
                          {"name": "batch_switch_at", "kind": "float", "low": 0.2, "high": 0.8, "why": "x",
                           "when": {"batch_multiplier": [3, 4]}}])
    assert "batch_switch_at" not in [p.name for p in space.params]
    assert any("outside batch_multiplier's whole numbers [1, 2]" in n for n in notes), notes
    space, _ = check([lr, {"name": "batch_multiplier", "kind": "int", "low": 1, "high": 4, "why": "x"},
                      {"name": "batch_switch_at", "kind": "float", "low": 0.2, "high": 0.8, "why": "x",
                       "when": {"batch_multiplier": [2.0, 4, 9]}}])
    assert space.param("batch_switch_at").condition == {"batch_multiplier": [2, 4]}
    space, notes = check([{**lr, "high": None}])
    assert (space.param("lr").low, space.param("lr").high) == (1e-5, 1e-2) and any("no high given" in n for n in notes)
    agent = load_project(ROOT / "search_spaces" / "agent.yaml", trains=False)
    agent_catalog = build_catalog(agent)
    assert agent_catalog.operators == []
    space, notes = review(SpaceAnswer.model_validate({"params": [lr, {"name": "proc.dedup", "kind": "bool",
                                                                      "why": "x"}]}), agent_catalog, agent)
    assert [p.name for p in space.params] == ["lr"] and any("dropped 'proc.dedup'" in n for n in notes)


def test_an_llm_redesign_keeps_what_its_answer_leaves_out_and_a_non_json_reply_falls_back(llm, tmp_path):
    """An LLM redesign's answer that drops a dimension (the prompt asks it to drop those that do not matter)
    sent it to the trainer's default: lr 1e-3 where the space searched 1e-6 to 5e-6, and a person's fixed
    setting was lost too. It is now kept at the best Pareto recipe's value, or at its fixed setting. And a 200
    reply whose body is not JSON was a traceback (a JSONDecodeError), not a fall-back to the rules."""
    from sro.designer.redesign import Evidence, redesign

    project = _llm_project(llm.url)
    catalog = build_catalog(project)
    space = RecipeSpace([Param("lr", "float", 1e-6, 5e-6, log=True, rationale="x"),
                         Param("group_size", "int", 4, 8, rationale="x")],
                        [Simplex("mixture", ["mix.arithmetic", "mix.multiplication"], "x")],
                        {"algorithm": "grpo", "steps": 7}, version=2, designer="llm")
    best = {"lr": 2.06e-6, "group_size": 6, "mix.arithmetic": 0.7, "mix.multiplication": 0.3}
    ev = Evidence(10, [{"values": best, "scores": {}}], {"lr": 0.9, "group_size": 0.1})
    llm.script = [json.dumps({"params": [{"name": "group_size", "kind": "int", "low": 4, "high": 8, "why": "x"}]})]
    new = redesign(space, ev, catalog, project, tmp_path, warn=lambda m: None)
    assert new.designer == "llm" and new.version == 3 and [p.name for p in new.params] == ["group_size"]
    assert new.fixed["lr"] == 2.06e-6 and new.fixed["steps"] == 7
    assert (new.fixed["mix.arithmetic"], new.fixed["mix.multiplication"]) == (0.7, 0.3)
    _every_recipe_trains(new)
    warned: list[str] = []
    llm.script = [b"", b'{"id": "c", "choices']  # an empty body, then one cut short
    for _ in range(2):
        again = redesign(space, ev, catalog, project, tmp_path, warn=warned.append)
        assert again.designer == "llm" and again.version == 3 and again.param("lr").high <= 5e-6  # the rules'
    assert len(warned) == 2 and all("a body that is not JSON" in w for w in warned), warned


def test_rules_redesign_keeps_every_pareto_recipe_and_reads_the_first_objectives_direction(tmp_path):
    """The new range always holds the Pareto recipes and low <= high: with a Pareto recipe of an earlier
    version above the current range, or a person's edit past the declared bound, the redesign used to
    write a space with low > high that could not be read back. The value a dropped dimension is fixed at
    is the best recipe's on the project's first objective, in its direction (it used to maximize the
    first score key, e.g. the worst ECE). Collapsed trials count as failures for the lr ceiling."""
    from sro.designer.redesign import Evidence

    catalog = build_catalog(_math_project())

    def lr_after(low: float, high: float, pareto_lrs: list[float]) -> tuple[float, float]:
        space = RecipeSpace([Param("lr", "float", low, high, log=True, rationale="lr")], fixed={"algorithm": "grpo"})
        ev = Evidence(10, [{"values": {"lr": v}, "scores": {}} for v in pareto_lrs], {"lr": 1.0})
        new = redesign_rules(space, ev, catalog)
        RecipeSpace.from_yaml(new.to_yaml())  # reads back
        return new.param("lr").low, new.param("lr").high

    lo, hi = lr_after(1e-5, 1e-4, [5e-4])  # from an earlier version's wider range
    assert lo <= 5e-4 <= hi
    lo, hi = lr_after(1e-3, 5e-2, [4.9e-2])  # an edit past the declared 1e-2
    assert lo <= 4.9e-2 <= hi
    lo, hi = lr_after(1e-5, 1e-3, [1e-5 * 1.01])  # the lower edge: widened, within the declared 1e-7
    assert 1e-7 <= lo < 1e-5 and hi < 1e-3

    data = {"name": "dir", "domains": {"a": {"sources": [{"textworld": "coin_collector"}], "benchmarks": [
        {"name": "ece", "textworld": "coin_collector", "size": 8, "metric": "ece"},
        {"name": "win", "textworld": "coin_collector", "size": 8}]}}}
    project = ProjectConfig.model_validate(data)
    space = RecipeSpace([Param("lr", "float", 1e-5, 1e-3, log=True, rationale="lr"),
                         Param("temperature", "float", 0.5, 1.5, rationale="t")], fixed={"algorithm": "grpo"})
    ledger = Ledger(project, tmp_path / "dir")
    trials = [({"lr": 1e-4, "temperature": 1.4}, {"a/ece": 0.40, "a/win": 0.9}, "complete"),
              ({"lr": 2e-4, "temperature": 0.6}, {"a/ece": 0.05, "a/win": 0.5}, "complete"),
              ({"lr": 9e-4, "temperature": 1.0}, {}, "collapsed")]
    for values, scores, state in trials:
        t = ledger.start(Recipe(values, dict(space.fixed)), space)
        if state == "complete":
            ledger.finish(t, scores, {"wall_s": 1.0}, [])
        else:
            ledger.end_early(t, "collapsed", {}, {"wall_s": 1.0}, [], "reward collapsed")
    ev = gather_evidence(ledger, ledger.records(), project.objective_directions())
    assert ev.pareto[0]["values"]["temperature"] == 0.6  # ECE 0.05 is the best on `a/ece: min`
    assert [f["values"]["lr"] for f in ev.failures] == [9e-4]
    ev.importances = {"lr": 0.98, "temperature": 0.02}
    new = redesign_rules(space, ev, catalog)
    assert new.fixed["temperature"] == 0.6 and new.param("lr").high == 2e-4  # ceiling under the collapse


def test_max_len_range_reaches_every_sources_longest_question():
    """`proc.max_len` spans from the shortest cut that keeps a tenth of every source to no cut at all:
    its top used to be the longest question of the sources whose lengths vary only, so with a source
    of uniformly long questions beside a varied short one the range collapsed to one value that cut
    the long source (here: [200, 200], dropping every question of B over 200 characters)."""
    from types import SimpleNamespace

    from sro.designer.rules import _Builder, _processing

    def source(p10: int, p90: int, longest: int) -> dict:
        return {"multi_turn": False, "question_chars": {"p10": p10, "p90": p90, "max": longest}}

    def max_len(*sources: dict) -> tuple[float, float] | None:
        b = _Builder(SimpleNamespace(sources=lambda: list(sources)))
        _processing(b, b.catalog)
        p = next((p for p in b.params if p.name == "proc.max_len"), None)
        return None if p is None else (p.low, p.high)

    assert max_len(source(10, 60, 80), source(200, 250, 260)) == (200, 260)
    assert max_len(source(10, 60, 80)) == (10, 80)
    assert max_len(source(100, 120, 130)) is None  # no source varies: nothing to cut


def test_a_dimension_added_since_a_trial_ran_reads_the_trainers_default_for_it():
    """A redesign that adds `eps_low` (an LLM's, which the prompt invites): the earlier trials ran at the trainer's
    default 0.2 and stay in the evidence where the new range holds it, stating it among their values; until stop
    53 they lacked the key and fitted no such space (a review: 1 of 4 trials kept). A fixed setting a trial did not
    set is its default too: fixed elsewhere, the trial is no point of the space."""
    from sro.designer.redesign import in_space
    from sro.ledger import TrialRecord

    lr = Param("lr", "float", 1e-4, 1e-2, log=True, rationale="lr")
    recs = [TrialRecord(i, "complete", Recipe({"lr": x}, {"algorithm": a}), {"a/b": 0.5}, {"wall_s": 1.0})
            for i, (x, a) in enumerate(((1e-3, "grpo"), (2e-3, "dapo"), (3e-3, "proas")))]
    wide = RecipeSpace([lr, Param("eps_high", "float", 0.1, 0.3, rationale="clip")], fixed={})
    kept = in_space(wide, recs)
    assert [r.recipe.values["eps_high"] for r in kept] == [0.2, 0.28, 0.2]  # dapo's own default
    assert [r.recipe.values["lr"] for r in kept] == [1e-3, 2e-3, 3e-3]
    assert not in_space(RecipeSpace([lr, Param("eps_high", "float", 0.25, 0.3, rationale="c")]), recs[:1])
    shaped = RecipeSpace([lr, Param("proas.lam", "float", 0.0, 1.0, rationale="l"),
                          Param("mt.history", "int", 0, 2, rationale="h")], fixed={"algorithm": "proas"})
    (r,) = in_space(shaped, recs)
    assert r.number == 2 and r.recipe.values == {"lr": 3e-3, "proas.lam": 0.5, "mt.history": 0}
    # a setting nothing defaults (a mixture weight) still leaves the trial out, as before
    assert not in_space(RecipeSpace([lr, Param("mix.a", "float", 0.0, 1.0, rationale="m")]), recs)
    assert fits(RecipeSpace([lr], fixed={"temperature": 1.0}), recs[0].recipe)
    assert not fits(RecipeSpace([lr], fixed={"temperature": 0.7}), recs[0].recipe)


def test_a_setting_an_earlier_version_fixed_and_this_one_searches_keeps_its_trials(tmp_path):
    """v1 fixes `pack: false`; v2 searches it. The v1 trials are points of v2 (`fits` reads the settings
    they ran with) and reach the optimizer with `pack` among their values and their keys unchanged, so
    it never proposes one of them again; before, they did not fit, and in this all-discrete space the
    proposer offered a recipe the study had run, whose claim was withdrawn as another worker's rival."""
    from sro.designer.redesign import in_space
    from sro.ledger import TrialRecord
    from sro.optimizer import BoTorchProposer

    v1 = RecipeSpace([Param("steps", "int", 1, 3, rationale="s")], fixed={"algorithm": "grpo", "pack": False})
    v2 = RecipeSpace([Param("steps", "int", 1, 3, rationale="s"), Param("pack", "bool", rationale="p")],
                     fixed={"algorithm": "grpo"}, version=2)
    recs = [TrialRecord(i, "complete", Recipe({"steps": s}, dict(v1.fixed)), {"a/b": s / 3}, {"wall_s": 1.0})
            for i, s in enumerate((1, 2, 3))]
    assert all(fits(v2, r.recipe) for r in recs)
    kept = in_space(v2, recs)
    assert [r.recipe.values for r in kept] == [{"steps": s, "pack": False} for s in (1, 2, 3)]
    assert [r.recipe.key for r in kept] == [r.recipe.key for r in recs]
    ran = {r.recipe.key for r in recs}
    p = BoTorchProposer(v2, seed=0, objectives=[("a/b", "max")], n_init=2)
    got = p.propose(kept, 3)
    assert len(got) == 3 and not ({r.key for r in got} & ran)  # only the three pack: true recipes are new
    assert all(r.values["pack"] is True for r in got)


def test_sro_design_over_a_malformed_space_file_is_a_one_line_error(micro_project, tmp_path):
    """`sro design` reads the run folder's space.yaml (for its version) the way the search does: a file
    that is not YAML is a one-line error naming it, exit 2 (it was a traceback)."""
    from typer.testing import CliRunner

    from sro.cli import app

    (tmp_path / "runs" / "bad").mkdir(parents=True)
    (tmp_path / "runs" / "bad" / "space.yaml").write_text("params: {lr: [")
    r = CliRunner().invoke(app, ["design", str(micro_project("bad")), "--runs", str(tmp_path / "runs")])
    assert r.exit_code == 2 and "space.yaml: not valid YAML" in r.output and "Traceback" not in r.output


def test_a_truncated_catalog_cache_is_measured_again_not_a_traceback(tmp_path, monkeypatch):
    """A catalog cache cut short (a kill mid-write, or a second worker reading while the first writes)
    is a cache miss: the facts are measured again and the file rewritten whole. It was a JSONDecodeError
    traceback on every later `sro design` and every new search of the project."""
    from types import SimpleNamespace

    import trainers.models
    from sro.designer.catalog import _measure

    project = _math_project()
    calls: list[str] = []

    def load_policy(path, device, **kw):
        calls.append(path)
        return None, None

    monkeypatch.setattr(trainers.models, "load_policy", load_policy)
    ctx = SimpleNamespace(project=project, base_path="base", tasks={}, pass_rates=lambda: {})
    first = _measure(ctx, tmp_path / "cache")
    (path,) = (tmp_path / "cache").glob("catalog-*.json")
    assert _measure(ctx, tmp_path / "cache") == first and len(calls) == 1  # a whole file is a hit
    path.write_text(path.read_text()[:10])
    assert _measure(ctx, tmp_path / "cache") == first and len(calls) == 2  # measured again
    assert json.loads(path.read_text()) == first and not list(path.parent.glob("*.tmp*"))


def test_redesigning_over_a_hand_edited_space_keeps_the_edit_and_says_so(tmp_path):
    """A rerun of `sro design` replaced a hand-edited space.yaml without a word, and the edit was in no
    space.v<N>.yaml. Now the edited file is kept aside (space.edited-<time>.yaml) and one line says
    where; a space.yaml equal to a versioned copy is replaced quietly, and no temporary file is left."""
    project, run_dir = _math_project(), tmp_path / "runs" / "quickstart"
    logs: list[str] = []
    design_space(project, run_dir, log=logs.append)
    design_space(project, run_dir, log=logs.append, version=2)  # not edited: nothing to keep
    assert not logs and not list(run_dir.glob("space.edited-*"))
    path = run_dir / "space.yaml"
    edited = path.read_text().replace("group_size:", "group_size: # narrowed by hand\n ", 1)
    assert edited != path.read_text()
    path.write_text(edited)
    _, out = design_space(project, run_dir, log=logs.append, version=3)
    (kept,) = run_dir.glob("space.edited-*.yaml")
    assert kept.read_text() == edited and out.read_text() == (run_dir / "space.v3.yaml").read_text()
    assert len(logs) == 1 and kept.name in logs[0] and "space.yaml" in logs[0]
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(
        ["space.yaml", "space.v1.yaml", "space.v2.yaml", "space.v3.yaml", kept.name])


def test_a_hand_edit_in_another_encoding_is_kept_byte_for_byte_and_a_search_names_it(tmp_path):
    """An edit saved as Latin-1 is kept aside as it is (it was a `UnicodeDecodeError` in `sro design`), and the
    search reading such a space.yaml names the file and the line instead of a traceback."""
    import sro.search as search_mod
    from sro.space import SpaceError

    project, run_dir = _math_project(), tmp_path / "runs" / "quickstart"
    design_space(project, run_dir, log=lambda _: None)
    path = run_dir / "space.yaml"
    edited = path.read_bytes() + "# réglé à la main\n".encode("latin-1")
    path.write_bytes(edited)
    lines = edited.count(b"\n")
    with pytest.raises(SpaceError, match=rf"space\.yaml: not UTF-8 text \(byte 0xe9 on line {lines}\)"):
        search_mod._written_space(run_dir)
    logs: list[str] = []
    design_space(project, run_dir, log=logs.append, version=2)
    (kept,) = run_dir.glob("space.edited-*.yaml")
    assert kept.read_bytes() == edited and len(logs) == 1


@pytest.fixture
def design_without_the_base_model(monkeypatch):
    """`sro design` in this process with the catalog built without the base model (nothing prepared): fast."""
    import sro.designer.design
    import sro.executor

    real = sro.designer.design.design_space
    monkeypatch.setattr(sro.executor.SearchContext, "prepare", classmethod(lambda cls, *a, **kw: None))
    monkeypatch.setattr(sro.designer.design, "design_space", lambda proj, run_dir, b, ctx, log, version, unless=None:
                        real(proj, run_dir, b, None, log, version, unless))


@pytest.mark.usefixtures("design_without_the_base_model")
def test_sro_designs_next_step_hint_repeats_runs_and_budget(micro_project, tmp_path, monkeypatch):
    """The hint after `sro design --runs DIR --budget B` dropped both flags: the copied command searched
    ./runs, ignored the reviewed space and designed another one there."""
    from typer.testing import CliRunner

    from sro.cli import app

    project, runs = micro_project("hint"), tmp_path / "my runs"
    monkeypatch.chdir(tmp_path)  # the second call writes ./runs
    r = CliRunner().invoke(app, ["design", str(project), "--runs", str(runs), "--budget", "3trials"])
    assert r.exit_code == 0, r.output
    hint = r.output.split("then run `")[1].split("`")[0]
    assert hint == f"sro search {project} --budget 3trials --runs '{runs}'"
    said = " ".join(r.output.split())  # a condition as a person writes it, not a Python dict (a review, stop 57)
    assert "batch_multiplier in {2, 3," in said and "{'" not in said, said  # (the table folds the cell)
    r = CliRunner().invoke(app, ["design", str(project), "--runs", "runs"])  # the default: nothing to repeat
    assert r.output.split("then run `")[1].split("`")[0] == f"sro search {project}"


@pytest.mark.usefixtures("design_without_the_base_model")
def test_sro_design_run_again_to_the_same_space_writes_no_new_version(micro_project, tmp_path):
    """`sro design` run twice wrote v2 and v3, each the same space as v1 but for `version:` (a review, stop 57);
    an edited space.yaml, designed again, still gets the next version (the edit kept aside)."""
    from typer.testing import CliRunner

    from sro.cli import app

    project, runs = micro_project("again"), tmp_path / "runs"
    args = ["design", str(project), "--runs", str(runs)]
    assert CliRunner().invoke(app, args).exit_code == 0
    first = (runs / "again" / "space.yaml").read_bytes()
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "(v1), which is kept; nothing written" in " ".join(r.output.split()), r.output
    assert (runs / "again" / "space.yaml").read_bytes() == first
    assert sorted(f.name for f in (runs / "again").glob("space.v*.yaml")) == ["space.v1.yaml"]
    edited = first.replace(b"why: a group of 4+", b"why: edited, a group of 4+")
    assert edited != first
    (runs / "again" / "space.yaml").write_bytes(edited)
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0 and "wrote " in r.output and (runs / "again" / "space.v2.yaml").is_file(), r.output


@pytest.mark.usefixtures("design_without_the_base_model")
def test_sro_design_warns_of_a_start_recipe_its_space_refuses(micro_project, tmp_path):
    """`sro design` wrote the space and said to run the search, which then refused the project's start recipe
    (a review, stop 57). It still writes the space, and warns which start recipe the search will refuse."""
    from typer.testing import CliRunner

    from sro.cli import app

    project = micro_project("warn", extra="start_recipes:\n  - {lr: 0.5, steps: 2}\n")
    r = CliRunner().invoke(app, ["design", str(project), "--runs", str(tmp_path / "runs")])
    assert r.exit_code == 0 and (tmp_path / "runs" / "warn" / "space.yaml").is_file(), r.output
    said = " ".join(r.stderr.split())
    assert f"warning: {project}: start_recipes[0]:" in said and "`sro search` refuses it until the space or the " \
        "start recipe is mended" in said, said


def test_a_redesign_keeps_a_pinned_range_around_its_pareto_recipes_and_narrows_nothing_on_flat_scores():
    """Two redesign cases a review found (stop 37): a pinned int range [8, 8] dropped an earlier version's
    Pareto value 5 (the docs say the new range holds every Pareto recipe); and with every score equal (nothing
    learned yet) the front was the cheapest trial alone, and the ranges were narrowed around it."""
    from sro.designer.redesign import Evidence

    pinned = RecipeSpace([Param("steps", "int", 8, 8), Param("lr", "float", 1e-5, 1e-3, log=True)],
                         fixed={"algorithm": "grpo"})
    ev = Evidence(10, [{"values": {"steps": v, "lr": 1e-4}, "scores": {}} for v in (5, 8)],
                  {"steps": 0.5, "lr": 0.5})
    q = redesign_rules(pinned, ev).param("steps")
    assert (q.low, q.high) == (5, 8)
    wide = RecipeSpace([Param("steps", "int", 10, 60), Param("lr", "float", 1e-6, 1e-3, log=True)],
                       fixed={"algorithm": "grpo"})
    flat = Evidence(16, [{"values": {"steps": 12, "lr": 5e-4}, "scores": {"a/b": 0.0}}], {"steps": 0.5, "lr": 0.5},
                    scores_differ=False)
    new = redesign_rules(wide, flat)
    assert (new.param("steps").low, new.param("steps").high) == (10, 60)
    assert new.param("lr").low == 1e-6
    narrowed = redesign_rules(wide, Evidence(16, flat.pareto, flat.importances))  # scores that differ: narrowed
    assert narrowed.param("steps").high < 60


def test_a_cuda_project_designed_without_a_gpu_is_sized_for_the_gpu(monkeypatch):
    """`sro design` trains nothing, so a GPU project's space is designed on a laptop (docs/trainers.md): its
    catalog said device cpu, and the rules sized its trials for this CPU, about 10x smaller (a review, stop 37)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    p = _math_project()
    gpu = p.model_copy(update={"runtime": p.runtime.model_copy(update={"device": "cuda"})})
    cat = build_catalog(gpu)
    assert cat.hardware["device"] == "cuda" and cat.hardware["train_samples_per_s"] is None
    assert any("this machine has no GPU" in n for n in cat.notes)
    assert build_catalog(p).hardware["device"] == "cpu"
    steps = {c: design_rules(cat_, proj).param("steps").high
             for c, cat_, proj in (("cuda", cat, gpu), ("cpu", build_catalog(p), p))}
    assert steps["cuda"] > steps["cpu"], steps
