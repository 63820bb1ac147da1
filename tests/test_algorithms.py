"""Algorithms are data: a registry of named combinations whose knobs the designer can read, and
each one trains (a few steps, on CPU) through the same trainer."""

from __future__ import annotations

import re

import pytest
import torch

from evaluators.sources import Item, SourceSpec
from trainers.algorithms import ALGORITHMS, catalog, config_for
from trainers.grpo import GRPOTrainer
from trainers.tiny import TinySpec, build_model, build_tokenizer


def test_catalog_is_plain_data_with_ranges():
    cat = {a["name"]: a for a in catalog()}
    assert {"grpo", "dr_grpo", "dapo", "pg", "cispo", "proximal_kl"} <= set(cat)
    assert "off_policy" in cat["proximal_kl"]["applies_to"] and "off_policy" not in cat["grpo"]["applies_to"]
    lr = next(k for k in cat["grpo"]["knobs"] if k["name"] == "lr")
    assert lr["kind"] == "float" and lr["log"] is True and lr["low"] < lr["high"]
    assert any(k["name"] == "prox.horizon" for k in cat["proximal_kl"]["knobs"])


def test_config_for_pins_identity_and_validates():
    dapo = config_for("dapo", {"lr": 1e-4, "eps": 0.2, "mix.a": 0.5})
    assert dapo.aggregation == "token_mean" and dapo.mask_truncated and dapo.eps_high == 0.28 and dapo.eps_low == 0.2
    prox = config_for("proximal_kl", {"prox.horizon": 3, "staleness": 2})
    assert prox.policy_loss == "proximal_kl" and prox.prox.horizon == 3 and prox.staleness == 2
    # ALGORITHMS.md §3: L = Σ m·ℓ / Σ m, the token mean, whatever the recipe says (not a knob of it)
    assert prox.aggregation == "token_mean"
    assert config_for("proximal_kl", {"aggregation": "seq_mean"}).aggregation == "token_mean"
    # a knob the algorithm declares is the recipe's to set; its fixed value is only the default
    grpo = config_for("grpo", {"scale_rewards": "none", "aggregation": "token_mean"})
    assert (grpo.scale_rewards, grpo.aggregation) == ("none", "token_mean")
    assert (config_for("grpo", {}).scale_rewards, config_for("grpo", {}).aggregation) == ("group", "seq_mean")
    assert config_for("dapo", {"eps_high": 0.35, "eps_low": 0.1}).eps_high == 0.35
    # ...while an undeclared field stays pinned: Dr.GRPO's constant normalizer is its identity
    assert config_for("dr_grpo", {"aggregation": "seq_mean"}).aggregation == "fixed_len"
    with pytest.raises(KeyError, match="known: cispo, dapo"):
        config_for("ppo2", {})
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        config_for("grpo", {"group_size": 1})
    with pytest.raises(ValueError, match=r"unknown ProxKLSettings fields \['prox.horizn'\]"):
        config_for("proximal_kl", {"prox.horizn": 3})
    assert dapo.dynamic_sampling
    sd = config_for("grpo", {"distill.weight": 0.3, "distill.teacher": "ema", "sft.steps": 10})
    assert sd.distill.weight == 0.3 and sd.distill.teacher == "ema"
    with pytest.raises(ValueError, match="teacher must be one of"):
        config_for("grpo", {"distill.teacher": "oracle"})
    with pytest.raises(ValueError, match="mode must be snapshot or ewma"):
        config_for("proximal_kl", {"prox.mode": "average"})
    with pytest.raises(ValueError, match=r"recipe value lr='fast' must be a number"):
        config_for("grpo", {"lr": "fast"})
    with pytest.raises(ValueError, match=r"recipe value optimizer=3 must be a name"):
        config_for("grpo", {"optimizer": 3})



def test_a_fractional_value_of_a_whole_number_setting_is_named_before_training():
    """steps: 36.5 used to pass (it is a number) and crash the trainer's range() after the base model was
    scored; every int field, nested settings, the SFT stage and ProAS's included, now wants a whole
    number, and 36.0 is 36. The error names the recipe key, so `sro train` can say where it is."""
    from trainers.algorithms import RecipeValueError, sft_config_for
    from trainers.multiturn import multi_turn_config

    for algo, values, key in (("grpo", {"steps": 36.5}, "steps"), ("grpo", {"group_size": 4.5}, "group_size"),
                              ("grpo", {"lr_ref_batch": 3.5}, "lr_ref_batch"),
                              ("proximal_kl", {"prox.horizon": 2.5}, "prox.horizon"),
                              ("grpo", {"distill.top_k": 1.5}, "distill.top_k")):
        with pytest.raises(RecipeValueError, match=rf"recipe value {re.escape(key)}=\d+\.5 must be a whole number") as e:
            config_for(algo, values)
        assert e.value.keys == (key,)
    with pytest.raises(ValueError, match=r"recipe value sft.steps=2.5 must be a whole number"):
        sft_config_for({"sft.steps": 2.5})
    with pytest.raises(ValueError, match=r"recipe value proas.n_min=2.5 must be a whole number"):
        multi_turn_config("proas", config_for("proas", {}), {"proas.n_min": 2.5})
    assert config_for("grpo", {"dynamic_sampling": 1}).dynamic_sampling is True  # as a space's bool reads 1
    cfg = config_for("proximal_kl", {"steps": 36.0, "prox.horizon": 3.0})
    assert cfg.steps == 36 and type(cfg.steps) is int and type(cfg.prox.horizon) is int
    assert type(sft_config_for({"sft.steps": 2.0}).steps) is int


def test_a_nan_or_infinite_setting_is_named_before_training():
    """beta: .nan and temperature: .inf were accepted (NaN compares false with every bound, so the
    config's own range checks let it through) and would have trained on NaN losses; every number field,
    nested settings included, now wants a finite number, named by its recipe key."""
    from trainers.algorithms import RecipeValueError
    from trainers.multiturn import multi_turn_config

    for algo, values, key, want in (("grpo", {"beta": float("nan")}, "beta", "must be a number"),
                                    ("grpo", {"eps_high": float("nan")}, "eps_high", "must be a number"),
                                    ("grpo", {"temperature": float("inf")}, "temperature", "must be a finite number"),
                                    ("proximal_kl", {"prox.beta_p": float("-inf")}, "prox.beta_p", "must be a finite number")):
        with pytest.raises(RecipeValueError, match=rf"recipe value {re.escape(key)}=-?(nan|inf) {want}") as e:
            config_for(algo, values)
        assert e.value.keys == (key,)
    with pytest.raises(RecipeValueError, match=r"recipe value proas.lam=nan must be a number"):
        multi_turn_config("proas", config_for("proas", {}), {"proas.lam": float("nan")})
    # the trainer config's own checks and the algorithm name also name the recipe key they refuse
    for algo, values, keys, located in (
            ("ppo", {}, ("algorithm",), "R.algorithm: unknown algorithm 'ppo'"),
            ("grpo", {"lr": -1.0}, ("lr",), "R.lr must be a positive number (got -1.0)"),
            ("grpo", {"steps": 0}, ("steps",), "R.steps must be >= 1 (got 0)"),
            ("grpo", {"lr": "fast"}, ("lr",), "R.lr='fast' must be a number"),
            ("grpo", {"eps": "x"}, ("eps",), "R.eps='x' must be a number"),
            ("grpo", {"lr": "1e-4"}, ("lr",), "R.lr='1e-4' must be a number (it is text: quoted in the YAML? write 1e-4 without quotes)"),
            ("grpo", {"distill.teacher": "oracle"}, ("distill.teacher",), "R.distill.teacher must be one of"),
            ("grpo", {"dynamic_sampling": "yes"}, ("dynamic_sampling",), "R.dynamic_sampling='yes' must be true or false"),
            # one value per message, with what was given (they were merged: "beta, eps_low, eps_high must be >= 0
            # and temperature > 0" for temperature -1; a review, stop 38)
            ("grpo", {"temperature": -1.0}, ("temperature",), "R.temperature must be > 0 (got -1.0)"),
            ("grpo", {"beta": -0.5}, ("beta",), "R.beta must be >= 0 (got -0.5)"),
            ("grpo", {"batch_multiplier": 0}, ("batch_multiplier",), "R.batch_multiplier must be >= 1 (got 0)"),
            ("grpo", {"group_size": 0}, ("group_size",), "R.group_size must be >= 1 (got 0)")):
        with pytest.raises(RecipeValueError) as e:
            config_for(algo, values)
        assert e.value.keys == keys and e.value.located({k: f"R.{k}" for k in keys}).startswith(located)
    # `eps` sets both clip bounds: a bad one is said once (until stop 48 "R.eps must be >= 0 (got -1.0); eps must be
    # >= 0 (got -1.0)"); a bound given beside it keeps its own message
    with pytest.raises(RecipeValueError) as e:
        config_for("grpo", {"eps": -1.0})
    assert e.value.keys == ("eps",) and e.value.located({"eps": "R.eps"}) == "R.eps must be >= 0 (got -1.0)"
    with pytest.raises(RecipeValueError) as e:
        config_for("grpo", {"eps": -1.0, "eps_high": -0.5})
    assert e.value.located({"eps": "R.eps", "eps_high": "R.eps_high"}) == (
        "R.eps must be >= 0 (got -1.0); R.eps_high must be >= 0 (got -0.5)")


class _Echo:
    """A task whose reward varies within every group (odd-length completions score 1), so every
    algorithm gets a gradient from an untrained model."""

    spec = SourceSpec("jsonl", "echo")

    def score(self, item: Item, text: str) -> float:
        return float(len(text) % 2)


class _Mix:
    def sample(self, n):
        return [(_Echo(), Item(f"say a {i}", "a", "echo")) for i in range(n)]


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_algorithm_trains_under_staleness_and_reuse(name):
    torch.manual_seed(0)
    spec = TinySpec(hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, vocab_size=270)
    tok = build_tokenizer([f"say a {i}\nAnswer: a" for i in range(50)] + ["b c d"], spec.vocab_size)
    model = build_model(len(tok), spec, tok)
    # an untrained model never stops within 3 tokens, so overlong masking (DAPO) would mask everything
    cfg = config_for(name, {"lr": 1e-3, "steps": 4, "group_size": 4, "prompts_per_step": 4,
                            "num_iterations": 2, "staleness": 1, "max_new_tokens": 3}, mask_truncated=False)
    history = GRPOTrainer(model, tok, cfg, _Mix()).train()
    assert len(history) == 4
    for m in history:
        assert all(torch.isfinite(torch.tensor(v)) for v in m.values())
    # stale batches were generated by an older policy: π_prox and μ differ once updates have happened
    assert history[-1]["stale_kl"] > 0


def _tiny_policy():
    torch.manual_seed(0)
    spec = TinySpec(hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, vocab_size=270)
    tok = build_tokenizer([f"say a {i}\nAnswer: a" for i in range(50)] + ["b c d"], spec.vocab_size)
    return build_model(len(tok), spec, tok), tok


def test_minibatches_give_exactly_that_many_optimizer_steps():
    """N = 20 sequences in 8 minibatches: 8 optimizer steps (`chunk` would give 7 parts of 3)."""
    model, tok = _tiny_policy()
    cfg = config_for("grpo", {"lr": 1e-3, "steps": 1, "group_size": 4, "prompts_per_step": 5, "minibatches": 8,
                              "max_new_tokens": 3})
    trainer = GRPOTrainer(model, tok, cfg, _Mix())
    calls = []
    step = trainer.opt.step
    trainer.opt.step = lambda *a, **k: (calls.append(1), step(*a, **k))[1]
    trainer.train()
    assert len(calls) == 8


@pytest.mark.parametrize("mode,lagging", [("ewma", True), ("snapshot", False)])
def test_proximal_kl_staleness_weight_on_fresh_rollouts(mode, lagging):
    """On fresh rollouts (no staleness, one pass) μ is the current policy. In ewma mode π_prox is the
    lagging average of the weights, so after the first update log π_prox − log μ is not 0 and the
    staleness weight w = min(exp(·), C_is) is not 1 (it was taken as 1 before: μ read as π_prox);
    with the snapshot π_prox is the current policy and w is exactly 1."""
    model, tok = _tiny_policy()
    cfg = config_for("proximal_kl", {"lr": 1e-2, "steps": 3, "group_size": 4, "prompts_per_step": 4,
                                     "max_new_tokens": 3, "prox.mode": mode, "prox.ewma_decay": 0.9})
    history = GRPOTrainer(model, tok, cfg, _Mix()).train()
    assert history[0]["stale_kl"] == 0.0  # nothing has moved yet
    assert (history[-1]["stale_kl"] > 1e-4) == lagging, history[-1]["stale_kl"]


@pytest.mark.parametrize("message,collapse", [
    ("probability tensor contains either `inf`, `nan` or element < 0", True),
    ("Function 'LogSoftmaxBackward0' returned nan values in its 0th output.", True),
    ("CUDA error: an illegal memory access was encountered; for more info see the log", False),
    ("inference tensors cannot be saved for backward", False),
])
def test_only_a_step_error_about_non_finite_values_is_a_collapse(message, collapse):
    """The sampler's error on non-finite probabilities ends the trial as collapsed; any other error of a
    step is the trial's failure (until stop 25 "info" and "inference" read as "inf")."""
    model, tok = _tiny_policy()
    trainer = GRPOTrainer(model, tok, config_for("grpo", {"steps": 2, "max_new_tokens": 3}), _Mix())

    def step():
        raise RuntimeError(message)

    trainer.step = step
    if collapse:
        assert trainer.train()[-1]["collapsed"] == 1.0 and message in trainer.collapse
    else:
        with pytest.raises(RuntimeError, match="info|inference"):
            trainer.train()


class _Alternating(_Echo):
    """Rewards 1, 0, 1, 0, ... in the order completions are scored: always a signal in its group."""

    calls = 0

    def score(self, item: Item, text: str) -> float:
        _Alternating.calls += 1
        return float(_Alternating.calls % 2)


class _Flat(_Echo):
    def score(self, item: Item, text: str) -> float:
        return 0.0


class _OneMixed:
    """Only the first question's reward varies within its group: dynamic sampling keeps one group."""

    def sample(self, n):
        return [(_Alternating() if i == 0 else _Flat(), Item(f"say a {i}", "a", "echo")) for i in range(n)]


def test_dynamic_sampling_keeping_fewer_rows_than_minibatches_still_trains():
    """DAPO with 4 prompts × 4 and 8 minibatches when one group has a signal: 4 rows kept, so 4 optimizer
    steps of one row each (until stop 25 the empty minibatches crashed the step)."""
    model, tok = _tiny_policy()
    cfg = config_for("dapo", {"lr": 1e-3, "steps": 1, "group_size": 4, "prompts_per_step": 4, "minibatches": 8,
                              "max_new_tokens": 6, "max_sample_rounds": 1}, mask_truncated=False)
    trainer = GRPOTrainer(model, tok, cfg, _OneMixed())
    calls = []
    step = trainer.opt.step
    trainer.opt.step = lambda *a, **k: (calls.append(1), step(*a, **k))[1]
    torch.manual_seed(1)
    (m,) = trainer.train()
    assert m["batch"] == 4 and m["kept_groups"] == 0.25 and len(calls) == 4, (m["batch"], len(calls))


def test_proximal_kl_reports_its_delta_and_the_failure_clock_watches_it():
    """§3's figures are logged every step (until stop 25 none was), and §6's clock fires on an exploding
    mean |δ|."""
    from trainers.clocks import CollapseSettings, FailureClock

    model, tok = _tiny_policy()
    cfg = config_for("proximal_kl", {"lr": 1e-2, "steps": 2, "group_size": 4, "prompts_per_step": 4,
                                     "max_new_tokens": 3, "num_iterations": 2, "staleness": 1})
    history = GRPOTrainer(model, tok, cfg, _Mix()).train()
    for m in history:
        assert {"prox_delta_mean", "prox_delta_max", "prox_ess", "prox_masked_frac", "prox_future_kl"} <= set(m)
        assert 0.0 <= m["prox_delta_mean"] <= m["prox_delta_max"] and 0.0 <= m["prox_ess"] <= 1.0
    assert history[-1]["prox_delta_max"] > 0  # the second pass over a batch sees π_θ moved from π_prox
    assert "prox_delta_mean" not in GRPOTrainer(model, tok, config_for("grpo", {"steps": 1, "max_new_tokens": 3}),
                                                _Mix()).train()[0]
    clock = FailureClock(CollapseSettings(max_delta=1.0))
    assert clock.observe({"reward": 0.5, "prox_delta_mean": 0.5}) is None
    assert "|δ|" in clock.observe({"reward": 0.5, "prox_delta_mean": 2.0})


def test_clip_fraction_counts_what_each_loss_clips():
    """CISPO clips its weight from above only, so its `clip_frac` counts only r > 1 + eps_high (until stop 25
    the metric counted r < 1 − eps_low too, about twice what the loss clipped)."""
    from trainers.grpo import clipped_tokens

    ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5])
    assert clipped_tokens(ratio, config_for("grpo", {"eps": 0.2})).tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert clipped_tokens(ratio, config_for("cispo", {"eps_high": 0.2})).tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]
    for plain in ("pg", "proximal_kl"):  # they clip no ratio: the metric said they did (a review, stop 37)
        assert clipped_tokens(ratio, config_for(plain, {})).tolist() == [0.0] * 5


# ------------------------------------------------------------------------------------------------------------
# GRPOConfig's range checks, said by the recipe key (trainers/grpo.py:115-146) (a coverage review, stop 54)
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values,key,located", [
    ({"staleness": -1}, "staleness", "R.staleness must be >= 0 (got -1)"),
    ({"overlong_buffer": 9, "max_new_tokens": 8}, "overlong_buffer",
     "R.overlong_buffer must be in [0, R.max_new_tokens=8] (got 9)"),
    ({"batch_switch_at": 0.0}, "batch_switch_at", "R.batch_switch_at must be in (0, 1] (got 0.0)"),
    ({"lr_alpha": -0.5}, "lr_alpha", "R.lr_alpha must be >= 0 (got -0.5)"),
    ({"max_sample_rounds": 0}, "max_sample_rounds", "R.max_sample_rounds must be >= 1 (got 0)"),
    ({"minibatches": 17, "prompts_per_step": 2, "group_size": 8}, "minibatches",
     "R.minibatches cannot exceed R.prompts_per_step × R.group_size (2 × 8; got 17)"),
    ({"optimizer": "lion"}, "optimizer", "R.optimizer must be one of"),
])
def test_a_trainer_setting_out_of_range_is_refused_by_its_recipe_key(values, key, located):
    """Without these checks each value trained silently as another recipe: staleness -1 as 0 (the queue loop never
    runs), an overlong buffer past the limit penalized every completion, lr_alpha < 0 shrank lr as the batch grew,
    minibatches past the batch ran fewer steps than asked. No test gave any of them (grpo.py:116-146 never ran)."""
    from trainers.algorithms import RecipeValueError, config_for

    with pytest.raises(RecipeValueError) as e:
        config_for("grpo", values)
    assert key in e.value.keys
    assert e.value.located({k: f"R.{k}" for k in e.value.keys}).startswith(located)
    config_for("grpo", {**values, key: {"staleness": 0, "overlong_buffer": 8, "batch_switch_at": 1.0,
                                         "lr_alpha": 0.0, "max_sample_rounds": 1, "minibatches": 16,
                                         "optimizer": "sgd"}[key]})  # the edge of the range is taken
