"""The trainer layer's extra pieces on hand-computed values and tiny runs: the two clocks (§6),
dynamic sampling (§1), EWMA weights (§3), self-distillation (§4) and the SFT stage."""

from __future__ import annotations

import math
import random
import time

import pytest
import torch

from evaluators.sources import Item, SourceSpec
from trainers.algorithms import config_for
from trainers.clocks import BatchSchedule, CollapseSettings, FailureClock
from trainers.distill import CONTEXTS, DIVERGENCES, DistillSettings, grad_cosine, teacher_log_dist
from trainers.grpo import GRPOTrainer
from trainers.prompts import format_prompt
from trainers.rollout import Rollouts, completion_log_dist, completion_logprobs, generate
from trainers.sft import SFTConfig, cosine_decay, learning_rate, sft, supervised_batch, verified_pairs
from trainers.tiny import build_model
from trainers.weights import ema_update


# ---------- the failure clock and the batch schedule ----------

def _m(reward, entropy=1.0, grad_norm=1.0, loss=0.0, stale_kl=0.0):
    return {"reward": reward, "entropy": entropy, "grad_norm": grad_norm, "loss": loss, "stale_kl": stale_kl}


def test_failure_clock_fires_on_nan_and_explosions_at_once():
    assert "loss is nan" in FailureClock().observe(_m(0.5, loss=float("nan")))
    assert "gradient norm exploded" in FailureClock().observe(_m(0.5, grad_norm=1e6))
    assert "π_prox" in FailureClock().observe(_m(0.5, stale_kl=50.0))


def test_failure_clock_reward_falling_from_peak_needs_patience():
    clock = FailureClock(CollapseSettings(reward_drop=0.5, patience=3, smoothing=1.0))
    fired = [clock.observe(_m(r)) for r in (0.2, 0.8, 0.8, 0.3, 0.3, 0.3)]
    # 0.3 < 0.5·0.8 for three steps in a row: fires on the third
    assert fired[:5] == [None] * 5 and "fell from its peak 0.800 to 0.300" in fired[5]
    # a dip that recovers does not fire
    clock = FailureClock(CollapseSettings(reward_drop=0.5, patience=3, smoothing=1.0))
    assert all(clock.observe(_m(r)) is None for r in (0.8, 0.3, 0.3, 0.8, 0.3, 0.3, 0.9))
    # a peak below min_peak is noise
    clock = FailureClock(CollapseSettings(min_peak=0.2, patience=1, smoothing=1.0))
    assert all(clock.observe(_m(r)) is None for r in (0.1, 0.0, 0.0))


def test_failure_clock_entropy_collapse_only_while_below_peak():
    s = CollapseSettings(min_entropy=0.01, patience=2, smoothing=1.0)
    clock = FailureClock(s)
    # certain and at its best: fine
    assert all(clock.observe(_m(r, entropy=0.001)) is None for r in (0.5, 0.9, 0.9, 0.9))
    clock = FailureClock(s)
    fired = [clock.observe(_m(r, entropy=0.001)) for r in (0.9, 0.7, 0.7)]
    assert fired[1] is None and "entropy collapsed" in fired[2]
    # converged: certain and solving nearly everything; a one-sample dip is not "below its peak"
    clock = FailureClock(CollapseSettings(min_entropy=1e-3, patience=3, smoothing=0.5))
    rewards = (0.5, 0.75, 0.9, *[1.0] * 7, 15 / 16, 1.0, 15 / 16, 1.0, 1.0)
    assert all(clock.observe(_m(r, entropy=5e-4)) is None for r in rewards)


def test_failure_clock_defaults_fire_above_their_limits_not_at_them():
    """Stop 50's mutation sweep of trainers/clocks.py: the limits and their edges, at the default settings."""
    for key, limit in (("grad_norm", 1e4), ("stale_kl", 5.0), ("prox_delta_mean", 5.0)):
        assert FailureClock().observe({"reward": 0.5, key: limit}) is None, key
        assert FailureClock().observe({"reward": 0.5, key: limit * (1 + 1e-5)}) is not None, key
    # reward: smoothing 0.5, drop 0.5, patience 3. EMA 0.8, then 0.4 (= half the peak: not below), 0.2, 0.1, 0.05
    clock = FailureClock()
    fired = [clock.observe({"reward": r}) for r in (0.8, 0.0, 0.0, 0.0, 0.0)]
    assert fired[:4] == [None] * 4 and "fell from its peak 0.800 to 0.050" in fired[4]
    # a peak of exactly min_peak (0.2) counts
    clock = FailureClock(CollapseSettings(patience=1, smoothing=1.0))
    assert clock.observe({"reward": 0.2}) is None and clock.observe({"reward": 0.05}) is not None
    # entropy: below 1e-3 while more than max(0.05, 0.1 · peak) below the peak; 0.9 after a peak of 1 is not
    s = CollapseSettings(patience=1, smoothing=1.0, reward_drop=0.9)
    clock = FailureClock(s)
    assert [clock.observe(_m(r, entropy=5e-4)) for r in (1.0, 0.9)] == [None, None]
    clock = FailureClock(s)
    assert clock.observe(_m(1.0, entropy=5e-4)) is None and "entropy collapsed" in clock.observe(_m(0.89, entropy=5e-4))
    clock = FailureClock(s)
    assert [clock.observe(_m(r, entropy=0.5)) for r in (1.0, 0.5, 0.5)] == [None] * 3  # uncertain: no collapse


def test_batch_schedule_and_lr_scaling():
    sch = BatchSchedule(prompts_per_step=4, group_size=8, steps=10, switch_at=0.5, multiplier=4, lr_alpha=0.5)
    assert [sch.prompts(s) for s in range(1, 11)] == [4] * 5 + [16] * 5
    assert sch.lr(1e-4, 1) == pytest.approx(1e-4) and sch.lr(1e-4, 6) == pytest.approx(2e-4)  # √4
    lin = BatchSchedule(4, 8, 10, 0.5, 4, lr_alpha=1.0, ref_batch=16)
    assert lin.lr(1e-4, 1) == pytest.approx(2e-4) and lin.lr(1e-4, 10) == pytest.approx(8e-4)
    assert BatchSchedule(4, 8, 10).prompts(10) == 4  # no schedule
    assert BatchSchedule(4, 8, 10, ref_batch=16).lr(1e-4, 1) == 1e-4  # α = 0 by default: N₀ alone scales nothing
    short = BatchSchedule(4, 8, 4, 0.2, 4, lr_alpha=1.0)  # 0.2 · 4 steps < 1: still one step below the switch
    assert [short.prompts(s) for s in range(1, 5)] == [4, 16, 16, 16] and short.lr(1e-4, 1) == pytest.approx(1e-4)


# ---------- distillation pieces ----------

def test_sampled_rkl_gradient_is_the_reverse_kl_score_function():
    logits = torch.tensor([[[1.0, 0.0, -1.0]]], requires_grad=True)
    s = torch.log_softmax(logits, -1)
    t = torch.log_softmax(torch.tensor([[[0.0, 0.0, 0.0]]]), -1)
    tok = torch.tensor([[0]])
    DIVERGENCES.get("sampled_rkl")(s, t, tok).sum().backward()
    # d/dlogits of (s_y − t_y)·log s_y with the coefficient detached = (s_y − t_y)·(onehot − p)
    p = torch.softmax(torch.tensor([1.0, 0.0, -1.0]), -1)
    coef = math.log(p[0]) - math.log(1 / 3)
    assert torch.allclose(logits.grad[0, 0], coef * (torch.tensor([1.0, 0, 0]) - p), atol=1e-6)


def test_topk_rkl_by_hand_and_zero_when_teacher_agrees():
    s = torch.log(torch.tensor([[[0.5, 0.3, 0.2]]]))
    t = torch.log(torch.tensor([[[0.25, 0.25, 0.5]]]))
    tok = torch.tensor([[0]])
    got = DIVERGENCES.get("topk_rkl")(s, t, tok, top_k=2)
    # top-2 of the student: {0, 1}; renormalized s = (5/8, 3/8), t = (1/2, 1/2)
    want = 5 / 8 * math.log((5 / 8) / 0.5) + 3 / 8 * math.log((3 / 8) / 0.5)
    assert got.item() == pytest.approx(want, abs=1e-6)
    assert DIVERGENCES.get("topk_rkl")(s, s, tok, top_k=3).abs().item() < 1e-7


def test_the_divergences_are_per_position_on_batches_of_several_sequences():
    """(N, C, V) = (2, 3, 4): each position's value is that position's divergence alone, read on its own sampled
    token (sampled_rkl: (s_y − t_y)·s_y; topk_rkl: the top-2 reverse KL), shape (N, C)."""
    g = torch.Generator().manual_seed(0)
    s = torch.log_softmax(torch.randn(2, 3, 4, generator=g), -1)
    t = torch.log_softmax(torch.randn(2, 3, 4, generator=g), -1)
    tok = torch.tensor([[0, 3, 1], [2, 2, 0]])
    got = DIVERGENCES.get("sampled_rkl")(s, t, tok)
    assert got.shape == (2, 3)
    for n in range(2):
        for c in range(3):
            y = int(tok[n, c])
            assert float(got[n, c]) == pytest.approx(float((s[n, c, y] - t[n, c, y]) * s[n, c, y]), abs=1e-6)
    got = DIVERGENCES.get("topk_rkl")(s, t, tok, top_k=2)
    assert got.shape == (2, 3)
    for n in range(2):
        for c in range(3):
            top = s[n, c].topk(2).indices
            ps, pt = torch.softmax(s[n, c, top], -1), torch.softmax(t[n, c, top], -1)
            assert float(got[n, c]) == pytest.approx(float((ps * (ps / pt).log()).sum()), abs=1e-6)


def test_distill_settings_refuse_values_outside_their_ranges_and_accept_their_ends():
    for ok in (dict(weight=0.0), dict(weight=1.0), dict(top_k=1), dict(ema_decay=0.0), dict(ema_decay=0.99)):
        DistillSettings(**ok)
    for name, value in (("weight", 1.01), ("top_k", 0), ("ema_decay", 1.0), ("ema_decay", -0.1)):
        with pytest.raises(ValueError, match=rf"^DistillSettings: .*{name}"):
            DistillSettings(**{name: value})
    with pytest.raises(ValueError, match="weight must be in .*; context must be one of"):
        DistillSettings(weight=-1.0, context="nope")  # every problem named at once


def test_the_teacher_reads_each_row_as_if_alone_when_prefixes_differ_in_length(tiny_add):
    """Prefixes of different lengths (a sibling context shows a demo to some rows, "" to others) are padded
    on the left: each row's teacher log-probs equal those of the row run by itself, unpadded."""
    _, tok = tiny_add
    model = _model(tiny_add, seed=1)
    prompts = [format_prompt("add 1 2", tok), format_prompt("add 3 4", tok)]
    ro = generate(model, tok, prompts, 1, max_new_tokens=3)
    prefixes = [format_prompt("add 0 0", tok) + "0\n" + format_prompt("add 1 1", tok) + "2\n", ""]
    got = teacher_log_dist(model, tok, ro, prefixes, prompts, temperature=0.7)
    for i in range(2):
        head = tok(prefixes[i] + prompts[i], add_special_tokens=False)["input_ids"]
        ids = torch.tensor([head + ro.completion_ids[i].tolist()])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(head) - 1:-1] / 0.7
        keep = ro.completion_mask[i].bool()
        assert torch.allclose(got[i][keep], torch.log_softmax(logits.float(), -1)[keep], atol=1e-5)


def test_sibling_context_uses_a_successful_sibling_only():
    texts = ["7", "8", "1", "2"]
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    prefixes, use = CONTEXTS.get("sibling")(["q1", "q1", "q2", "q2"], ["7", "7", "3", "3"], texts, rewards, 2, None)
    # row 1's sibling (row 0) succeeded; row 0's sibling did not; group 2 has no success
    assert use.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert prefixes[1] == format_prompt("q1", None) + "7\n"
    prefixes, use = CONTEXTS.get("answer")(["q"], ["42"], ["x"], torch.zeros(1), 1, None)
    assert use.tolist() == [1.0] and prefixes[0].endswith("42\n")


def test_grad_cosine_and_ema_update():
    assert grad_cosine([torch.tensor([1.0, 0.0]), None], [torch.tensor([1.0, 1.0]), None]) == pytest.approx(
        1 / math.sqrt(2))
    # a parameter on one side only counts in that side's norm: dot 3·1 + 1·2 = 5, norms² 9 + 1 + 4 and 1 + 4 + 1
    a = [torch.tensor([3.0, 1.0]), torch.tensor([2.0]), None]
    b = [torch.tensor([1.0, 2.0]), None, torch.tensor([1.0])]
    assert grad_cosine(a, b) == pytest.approx(5 / math.sqrt(14 * 6))
    a, b = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    want = 0.25 * a.weight.detach() + 0.75 * b.weight.detach()
    ema_update(a, b, decay=0.25)
    assert torch.allclose(a.weight, want)


# ---------- tiny runs ----------

class _Digit:
    """Questions 'add a b' with a one-digit answer; the verifier wants exactly the digit."""

    spec = SourceSpec("jsonl", "digits")

    def score(self, item: Item, text: str) -> float:
        return float(text.strip() == item.answer)


class _Mix:
    def __init__(self, constant_every: int = 0):
        self.i = 0

    def sample(self, n):
        out = []
        for _ in range(n):
            a, b = self.i % 5, (self.i * 3) % 5
            self.i += 1
            out.append((_Digit(), Item(f"add {a} {b}", str(a + b), "digits")))
        return out


class _Parity(_Digit):
    """Reward varies within a group from the first step: odd-length completions score 1."""

    def score(self, item, text):
        return float(len(text) % 2)


class _ParityMix(_Mix):
    def sample(self, n):
        return [(_Parity(), it) for _, it in super().sample(n)]


class _Right(_Digit):
    """Every completion is right: every group's advantage is 0."""

    def score(self, item, text):
        return 1.0


class _RightMix(_Mix):
    def sample(self, n):
        return [(_Right(), it) for _, it in super().sample(n)]


def _model(tiny_add, seed=0):
    torch.manual_seed(seed)
    spec, tok = tiny_add
    return build_model(len(tok), spec, tok)


def test_rollouts_cat_is_padding_invariant(tiny_add):
    _, tok = tiny_add
    model = _model(tiny_add)
    torch.manual_seed(1)
    a = generate(model, tok, [format_prompt("add 1 2", tok)], 2, max_new_tokens=3)
    b = generate(model, tok, [format_prompt("add 1 2 and then some more", tok)], 2, max_new_tokens=5)
    both = Rollouts.cat([a, b], tok.pad_token_id)
    lp_both = completion_logprobs(model, both.input_ids, both.attention_mask, both.prompt_len)[0]
    for part, rows in ((a, slice(0, 2)), (b, slice(2, 4))):
        lp = completion_logprobs(model, part.input_ids, part.attention_mask, part.prompt_len)[0]
        C = lp.shape[1]
        m = part.completion_mask.bool()
        assert torch.allclose(lp_both[rows, :C][m], lp[m], atol=1e-5)
        assert both.completion_mask[rows, C:].sum() == 0
    assert both.texts == a.texts + b.texts


def test_dynamic_sampling_keeps_only_groups_with_signal(tiny_add):
    _, tok = tiny_add
    cfg = config_for("dapo", {"lr": 1e-3, "steps": 2, "group_size": 4, "prompts_per_step": 3,
                              "max_new_tokens": 2, "max_sample_rounds": 4}, mask_truncated=False)

    class Half(_Digit):  # reward varies within a group only for even items
        def score(self, item, text):
            return float(len(text) % 2) if int(item.answer) % 2 == 0 else 1.0

    class HalfMix(_Mix):
        def sample(self, n):
            return [(Half(), it) for _, it in super().sample(n)]

    tr = GRPOTrainer(_model(tiny_add), tok, cfg, HalfMix())
    m = tr.step()
    assert m["sample_rounds"] >= 1 and 0 < m["kept_groups"] <= 1
    assert tr.samples >= m["batch"]  # every generated completion is paid for
    r = tr._rollout()
    g = r.rewards.view(-1, 4)
    assert ((g.max(1).values - g.min(1).values) > 0).all()  # every kept group carries signal


def test_dynamic_sampling_reports_the_reward_of_everything_generated(tiny_add):
    """The logged reward was the kept groups' mean, always strictly between 0 and 1 (0.625 for a policy whose
    completions scored 0.893): the failure clock, the progress clock and the report read it (a review, stop
    37). It is the mean over every completion generated; `reward_kept` is the trained groups'."""
    _, tok = tiny_add
    cfg = config_for("dapo", {"lr": 1e-3, "steps": 1, "group_size": 4, "prompts_per_step": 4,
                              "max_new_tokens": 2, "max_sample_rounds": 2}, mask_truncated=False)
    scored: list[float] = []

    class Easy(_Digit):  # odd items always right (their groups dropped), even ones by the text's parity
        def score(self, item, text):
            r = float(len(text) % 2) if int(item.answer) % 2 == 0 else 1.0
            scored.append(r)
            return r

    class EasyMix(_Mix):
        def sample(self, n):
            return [(Easy(), it) for _, it in super().sample(n)]

    m = GRPOTrainer(_model(tiny_add), tok, cfg, EasyMix()).step()
    assert m["reward"] == pytest.approx(sum(scored) / len(scored))
    assert m["reward_kept"] != pytest.approx(m["reward"]) or m["kept_groups"] == 1.0


def test_the_overlong_penalty_shapes_the_advantage_not_the_logged_reward(tiny_add, monkeypatch):
    """Every completion is right (reward 1): without the penalty every advantage is 0 and nothing moves; with
    `overlong_buffer` the penalty (`overlong_penalty`, by hand in test_losses.py; here a fixed spread, since an
    untrained model truncates every completion) is added to the rewards the advantages are taken from, so there
    is a gradient, while the logged reward stays the task's 1.0. A multi-turn recipe refuses the setting."""
    import trainers.grpo as grpo
    from trainers.multiturn import multi_turn_config

    calls = []

    def spread(lengths, truncated, max_len, buffer):
        calls.append((max_len, buffer))
        return -torch.arange(len(lengths), dtype=torch.float32) % 4 / 4

    monkeypatch.setattr(grpo, "overlong_penalty", spread)
    _, tok = tiny_add
    norms = {}
    for buffer in (0, 3):
        cfg = config_for("grpo", {"lr": 1e-3, "steps": 1, "group_size": 4, "prompts_per_step": 2, "max_new_tokens": 3,
                                  "overlong_buffer": buffer})
        torch.manual_seed(0)
        m = GRPOTrainer(_model(tiny_add), tok, cfg, _RightMix()).step()
        assert m["reward"] == 1.0
        norms[buffer] = m["grad_norm"]
    assert norms[0] == 0.0 and norms[3] > 0 and calls == [(3, 3)]
    with pytest.raises(ValueError, match="overlong_buffer"):
        multi_turn_config("grpo", config_for("grpo", {"overlong_buffer": 2}), {"overlong_buffer": 2})


def test_dynamic_sampling_without_any_signal_skips_the_update(tiny_add):
    """When no group of `max_sample_rounds` rounds has a reward spread, nothing trains: the weights stay put
    (until stop 30 the zero-advantage batch was stepped on, and AdamW's momentum from the step before moved
    them), the step says so, and the next step with signal trains again."""
    _, tok = tiny_add
    cfg = config_for("dapo", {"lr": 1e-3, "steps": 3, "group_size": 4, "prompts_per_step": 3,
                              "max_new_tokens": 2, "max_sample_rounds": 2, "warmup_steps": 1}, mask_truncated=False)
    flat = {"on": False}

    class Switch(_Digit):  # a reward spread within groups, or none at all
        def score(self, item, text):
            return 1.0 if flat["on"] else float(len(text) % 2)

    class SwitchMix(_Mix):
        def sample(self, n):
            return [(Switch(), it) for _, it in super().sample(n)]

    tr = GRPOTrainer(_model(tiny_add), tok, cfg, SwitchMix())
    first = tr.step()
    assert first["kept_groups"] > 0 and first["skipped"] == 0.0 and first["grad_norm"] > 0
    flat["on"] = True
    before = [p.detach().clone() for p in tr.model.parameters()]
    m = tr.step()
    assert m["kept_groups"] == 0.0 and m["skipped"] == 1.0 and m["sample_rounds"] == 2
    assert all(torch.equal(p.detach(), q) for p, q in zip(tr.model.parameters(), before))
    assert "loss" not in m and "entropy" not in m and tr.clock.observe(m) is None  # no collapse read into it
    flat["on"] = False
    assert tr.step()["skipped"] == 0.0


def test_ewma_proximal_policy_lags_the_trained_policy(tiny_add):
    _, tok = tiny_add
    cfg = config_for("proximal_kl", {"lr": 3e-3, "steps": 3, "group_size": 4, "prompts_per_step": 4,
                                     "max_new_tokens": 3, "num_iterations": 2, "prox.mode": "ewma",
                                     "prox.ewma_decay": 0.5})
    tr = GRPOTrainer(_model(tiny_add), tok, cfg, _ParityMix())
    start = [p.detach().clone() for p in tr.model.parameters()]
    history = tr.train()
    assert tr.prox_model is not None and len(history) == 3
    moved = sum(float((p.detach() - q).abs().sum()) for p, q in zip(tr.model.parameters(), start))
    diff = sum(float((p.detach() - q).abs().sum()) for p, q in zip(tr.model.parameters(), tr.prox_model.parameters()))
    assert moved > 0 and 0 < diff < moved  # an average of past weights: behind the live ones


def test_self_distillation_pulls_the_student_to_its_teacher(tiny_add):
    """w_d = 1, a frozen teacher shown the answer (made sharper than the student by scaling its final
    norm): the exact KL(student‖teacher) on a fixed batch falls as the trainer distills on fresh
    samples of the same prompts, and the gradient cosine is logged."""
    _, tok = tiny_add
    items = [it for _, it in _Mix().sample(8)]

    class Fixed:
        def sample(self, n):
            return [(_Digit(), it) for it in items]

    cfg = config_for("grpo", {"lr": 1e-2, "steps": 12, "group_size": 2, "prompts_per_step": 8,
                              "max_new_tokens": 3, "warmup_steps": 1, "distill.weight": 1.0,
                              "distill.teacher": "frozen", "distill.divergence": "topk_rkl",
                              "distill.top_k": len(tok)})
    tr = GRPOTrainer(_model(tiny_add, seed=3), tok, cfg, Fixed())
    with torch.no_grad():
        tr.teacher.model.norm.weight.mul_(4.0)
    prompts = [format_prompt(it.question, tok) for it in items]
    ro = generate(tr.model, tok, prompts, 2, max_new_tokens=3)
    rows = [it for it in items for _ in range(2)]
    prefixes, _ = CONTEXTS.get("answer")([it.question for it in rows], [it.answer for it in rows], ro.texts,
                                         torch.zeros(16), 2, tok)
    teacher = teacher_log_dist(tr.teacher, tok, ro, prefixes, [p for p in prompts for _ in range(2)])
    m = ro.completion_mask.float()

    def exact_kl() -> float:
        with torch.no_grad():
            s = completion_log_dist(tr.model, ro.input_ids, ro.attention_mask, ro.prompt_len)
        return float(((s.exp() * (s - teacher)).sum(-1) * m).sum() / m.sum())

    before = exact_kl()
    history = tr.train()
    assert exact_kl() < 0.5 * before
    assert all(-1.0 <= h["grad_cos"] <= 1.0 for h in history) and all("distill_kl" in h for h in history)


def test_a_minibatch_with_nothing_to_distill_trains_on_the_policy_gradient_alone(tiny_add):
    """Sibling context, no sibling succeeded (rewards 0 and 0.5): nothing to distill, and the update was
    (1 − w_d)·g_pol, the policy gradient shrunk by w_d (a review, stop 37). It is the policy gradient itself,
    as without distillation; the distillation figures are left out of that step."""
    _, tok = tiny_add

    class Half(_Digit):
        def score(self, item, text):
            return 0.5 * (len(text) % 2)

    class HalfMix(_Mix):
        def sample(self, n):
            return [(Half(), it) for _, it in super().sample(n)]

    after = []
    for extra in ({}, {"distill.weight": 0.5, "distill.context": "sibling", "distill.teacher": "frozen"}):
        cfg = config_for("grpo", {"lr": 0.5, "steps": 1, "group_size": 4, "prompts_per_step": 4, "max_new_tokens": 3,
                                  "warmup_steps": 1, "optimizer": "sgd", "grad_clip": 1e9, **extra})
        torch.manual_seed(7)
        tr = GRPOTrainer(_model(tiny_add, seed=5), tok, cfg, HalfMix())
        m = tr.step()
        assert m["grad_norm"] > 0 and "grad_cos" not in m
        after.append([p.detach().clone() for p in tr.model.parameters()])
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(*after))


def test_collapse_stops_training_and_says_why(tiny_add):
    _, tok = tiny_add
    cfg = config_for("grpo", {"lr": 1e-3, "steps": 10, "group_size": 4, "prompts_per_step": 2, "max_new_tokens": 2})
    tr = GRPOTrainer(_model(tiny_add), tok, cfg, _Mix())

    def poison(step, m):
        if step == 2:
            with torch.no_grad():
                next(tr.model.parameters()).fill_(float("nan"))

    history = tr.train(poison)
    assert len(history) == 3 and history[-1]["collapsed"] == 1.0
    assert tr.collapse and "non-finite" in tr.collapse
    # a non-finite gradient is not applied: the weights stay finite and the clock names it
    tr = GRPOTrainer(_model(tiny_add), tok, cfg, _ParityMix())
    tr.cfg.steps = 4
    hook = next(tr.model.parameters()).register_hook(lambda g: g * float("nan"))
    history = tr.train()
    hook.remove()
    assert tr.collapse == "grad_norm is nan" and len(history) == 1
    assert all(torch.isfinite(p).all() for p in tr.model.parameters())


def test_sft_stage_trains_on_verified_answers_only(tiny_add):
    _, tok = tiny_add

    class Picky(_Digit):  # rejects the reference answer of odd sums: those must not be trained on
        def score(self, item, text):
            return float(text.strip() == item.answer and int(item.answer) % 2 == 0)

    class PickyMix(_Mix):
        def sample(self, n):
            return [(Picky(), it) for _, it in super().sample(n)]

    pairs, rejected = verified_pairs(PickyMix(), 50)
    drawn = [it for _, it in _Mix().sample(50)]  # the same 50 items, in the same order
    assert pairs == [(it.question, it.answer) for it in drawn if int(it.answer) % 2 == 0]
    assert rejected == 50 - len(pairs) > 0
    model = _model(tiny_add)
    out = sft(model, tok, _Mix(), SFTConfig(steps=60, lr=3e-3, batch_size=16))
    assert out["sft_samples"] == 960 and out["sft_loss"] < 0.4 * out["sft_loss_first"]
    with pytest.raises(ValueError, match="steps >= 0"):
        SFTConfig(steps=-1)


def test_sft_config_refuses_each_bad_setting_and_accepts_the_ends():
    SFTConfig(steps=0, batch_size=1, lr=1e-12)  # the smallest valid values
    for bad in ({"steps": -1}, {"batch_size": 0}, {"lr": 0.0}, {"lr": -1e-4}, {"lr": math.nan}, {"lr": math.inf}):
        with pytest.raises(ValueError, match="SFTConfig"):
            SFTConfig(**bad)


def test_sft_learning_rate_warms_up_over_three_steps_then_follows_the_cosine():
    cfg = SFTConfig(steps=6, lr=1.0)
    by_hand = [1 / 3, 2 / 3 * 0.5 * (1 + math.cos(math.pi / 6)), 0.75, 0.5, 0.25, 0.5 * (1 + math.cos(5 * math.pi / 6))]
    assert [learning_rate(cfg, t) for t in range(6)] == pytest.approx(by_hand, abs=1e-12)
    assert learning_rate(SFTConfig(steps=6, lr=3e-4), 2) == pytest.approx(3e-4 * 0.75)
    # the tiny model's pre-training decays the same way, without the warm-up
    assert [cosine_decay(2.0, t, 4) for t in range(5)] == pytest.approx([2.0, 1 + 0.5 ** 0.5, 1.0, 1 - 0.5 ** 0.5, 0.0])


def test_sft_cycles_its_shuffled_pairs_and_counts_what_it_trained(tiny_add, monkeypatch):
    """Verified pairs shuffled once by the seed, then taken B at a time in order, wrapping around; the
    returned counts are those of the batches it trained on, and on_step sees every step."""
    import trainers.sft as sft_module

    _, tok = tiny_add

    class Unique(_Digit):
        def score(self, item, text):
            return float(int(item.question.split()[1]) % 2 == 0)  # every other item is rejected

    class UniqueMix:
        def __init__(self):
            self.i = 0

        def sample(self, n):
            out = [(Unique(), Item(f"item {self.i + k}", str((self.i + k) % 10), "digits")) for k in range(n)]
            self.i += n
            return out

    seen, steps = [], []
    real = sft_module.supervised_batch
    monkeypatch.setattr(sft_module, "supervised_batch", lambda t, chunk: seen.append(list(chunk)) or real(t, chunk))
    cfg = SFTConfig(steps=3, lr=1e-3, batch_size=4, seed=7)
    out = sft(_model(tiny_add), tok, UniqueMix(), cfg, on_step=lambda step, loss: steps.append(step))
    order = [(f"item {i}", str(i % 10)) for i in range(0, 12, 2)]  # the 6 accepted of 12 drawn
    random.Random(7).shuffle(order)
    assert seen == [[order[(s * 4 + i) % 6] for i in range(4)] for s in range(3)]
    assert steps == [1, 2, 3]
    assert out["sft_steps"] == 3 and out["sft_samples"] == 12 and out["sft_rejected"] == 6 and "sft_cut" not in out
    assert out["sft_tokens"] == sum(int(supervised_batch(tok, chunk)[1].sum()) for chunk in seen)


def test_sft_stops_after_the_step_that_reaches_its_deadline(tiny_add):
    _, tok = tiny_add
    out = sft(_model(tiny_add), tok, _Mix(), SFTConfig(steps=5, batch_size=2), deadline=time.monotonic() - 1.0)
    assert out["sft_steps"] == 1 and out["sft_samples"] == 2 and out["sft_cut"] == 1.0
    model = _model(tiny_add)
    before = [p.detach().clone() for p in model.parameters()]
    assert sft(model, tok, _Mix(), SFTConfig(steps=0)) == {"sft_steps": 0.0, "sft_samples": 0.0, "sft_tokens": 0.0}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # no stage: nothing trained


def test_held_out_answers_cut_off_at_the_completion_length_are_counted_and_noted(tiny_add):
    """An untrained model rarely ends its answer: at 2 new tokens nearly every held-out completion is
    cut off and wrong, which the result counts (`cut_off`) and the trial's notes say, naming the fix."""
    from evaluators.benchmark import Benchmark
    from sro.executor import HeldOutNotes
    from trainers.evaluate import complete, evaluate

    bench = Benchmark.build("b", SourceSpec("reasoning_gym", "basic_arithmetic",
                                            {"min_terms": 2, "max_terms": 2, "max_digits": 1, "operators": ["+"]}),
                            12, project_seed=0, domain="a")
    model = _model(tiny_add)
    flags: list[bool] = []
    texts = complete(model, tiny_add[1], [it.question for it in bench.items], 2, 5, flags)  # two batches
    assert len(flags) == 12 and sum(flags) >= 10
    res = evaluate(model, tiny_add[1], bench, 2, 5)
    wrong = [bench.task.score(it, t) < 1.0 for it, t in zip(bench.items, texts)]
    assert res.cut_off == sum(w and f for w, f in zip(wrong, flags)) / 12 >= 10 / 12
    notes = HeldOutNotes(["agent/coin game 1: env error: OSError: x"], {"a/b": res.cut_off, "a/c": 0.05})
    assert notes.metrics(multi_turn=False) == {"cut_off/a/b": round(res.cut_off, 4), "cut_off/a/c": 0.05}
    assert notes.metrics(multi_turn=True)["heldout_env_errors"] == 1.0
    lines = notes.lines(2)
    assert lines[0] == "held-out episode scored as a failure: agent/coin game 1: env error: OSError: x"
    assert len(lines) == 2 and lines[1].startswith(f"a/b: {res.cut_off:.0%} of the held-out answers were cut off at "
                                                   "max_new_tokens=2") and "raise runtime.max_new_tokens" in lines[1]


# ---------- the trainer's wiring of each term (a review, stop 38: each could be broken with every test passing) ----------

class _Spy:
    """A registry (POLICY_LOSSES, AGGREGATIONS) whose entries record the arguments they are called with."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def __contains__(self, name):
        return name in self.real

    def names(self):
        return self.real.names()

    def get(self, name):
        f = self.real.get(name)

        def wrapped(*args, **kw):
            self.calls.append((args, kw))
            return f(*args, **kw)

        return wrapped


def _end_every_other_row_early(tr: GRPOTrainer) -> list[Rollouts]:
    """An untrained tiny model never says <eos>: its batches are edited as if every other completion had
    ended after its first token (padding after it, not truncated). Returns the batches trained on."""
    real, seen = tr._next_batch, []

    def edited():
        b = real()
        ro = b.ro
        ended = torch.arange(ro.completion_mask.shape[0]) % 2 == 1
        ro.completion_mask[ended, 1:] = 0
        ro.truncated = ro.truncated & ~ended.to(ro.truncated.device)
        seen.append(ro)
        return b

    tr._next_batch = edited
    return seen


def test_the_kl_term_pulls_the_policy_back_to_its_reference(tiny_add):
    """β·k3 with every advantage 0: the only gradient is the KL's, and the exact KL(π‖π_ref) on a fixed batch
    falls. (A KL term computed on detached log-probs trains nothing; every test passed with it.)"""
    _, tok = tiny_add
    cfg = config_for("grpo", {"lr": 0.1, "steps": 6, "group_size": 4, "prompts_per_step": 4, "max_new_tokens": 3,
                              "beta": 1.0, "warmup_steps": 1, "optimizer": "sgd", "grad_clip": 1e9})
    tr = GRPOTrainer(_model(tiny_add), tok, cfg, _RightMix())
    torch.manual_seed(1)
    with torch.no_grad():  # the policy away from its reference (the start)
        for p in tr.model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    prompts = [format_prompt(it.question, tok) for _, it in _Mix().sample(8)]
    ro = generate(tr.model, tok, prompts, 2, max_new_tokens=3)
    m = ro.completion_mask.float()

    def exact_kl() -> float:
        with torch.no_grad():
            s = completion_log_dist(tr.model, ro.input_ids, ro.attention_mask, ro.prompt_len)
            r = completion_log_dist(tr.ref, ro.input_ids, ro.attention_mask, ro.prompt_len)
        return float(((s.exp() * (s - r)).sum(-1) * m).sum() / m.sum())

    before = exact_kl()
    history = tr.train()
    assert before > 0.01 and all(h["kl"] > 0 for h in history)
    assert exact_kl() < 0.8 * before


def test_the_trainer_hands_the_loss_mu_and_pi_prox_in_their_places(tiny_add, monkeypatch):
    """Staleness 1: the second step trains on rollouts of the weights before the first update. In its first
    minibatch π_prox (the policy as the update begins) equals π_θ and μ does not; at padding both are π_θ's
    own values. (μ and π_prox swapped, or μ left unmasked, passed every test before.)"""
    import trainers.grpo as grpo

    spy = _Spy(grpo.POLICY_LOSSES)
    monkeypatch.setattr(grpo, "POLICY_LOSSES", spy)
    _, tok = tiny_add
    cfg = config_for("grpo", {"lr": 0.05, "steps": 2, "group_size": 4, "prompts_per_step": 4, "max_new_tokens": 3,
                              "staleness": 1, "minibatches": 2, "warmup_steps": 1})
    torch.manual_seed(0)
    tr = GRPOTrainer(_model(tiny_add), tok, cfg, _ParityMix())
    _end_every_other_row_early(tr)
    tr.step()
    first = len(spy.calls)
    assert first == 2  # one call per minibatch
    tr.step()
    x = spy.calls[first][0][0]
    on, off = x.mask.bool(), ~x.mask.bool()
    own = x.logp.detach()
    assert torch.allclose(x.prox_logp[on], own[on], atol=1e-5)
    assert (x.behav_logp[on] - own[on]).abs().max() > 1e-3
    assert off.any() and torch.equal(x.behav_logp[off], own[off]) and torch.equal(x.prox_logp[off], own[off])


def test_the_trainer_masks_truncated_rows_and_divides_by_the_generation_limit(tiny_add, monkeypatch):
    """The aggregation gets the generation limit as its length (fixed_len's constant normalizer) and, under
    `mask_truncated`, a mask that is 0 on every row the limit cut off. (Neither wiring was tested.)"""
    import trainers.grpo as grpo

    spy = _Spy(grpo.AGGREGATIONS)
    monkeypatch.setattr(grpo, "AGGREGATIONS", spy)
    _, tok = tiny_add
    for mask_truncated in (False, True):
        spy.calls.clear()
        cfg = config_for("dr_grpo", {"lr": 1e-3, "steps": 1, "group_size": 4, "prompts_per_step": 4,
                                     "max_new_tokens": 3}, mask_truncated=mask_truncated)
        torch.manual_seed(0)
        tr = GRPOTrainer(_model(tiny_add), tok, cfg, _ParityMix())
        seen = _end_every_other_row_early(tr)
        tr.step()
        assert spy.calls and all(kw["max_len"] == 3 for _, kw in spy.calls)
        got = torch.cat([args[1] for args, _ in spy.calls]).sum(-1)  # the minibatches' rows, shuffled
        ro = seen[0]
        cut, lengths = ro.truncated.bool(), ro.completion_mask.float().sum(-1)
        assert cut.any() and (~cut).any(), "the test needs truncated and ended rows"
        want = torch.where(cut, torch.zeros_like(lengths), lengths) if mask_truncated else lengths
        assert torch.equal(got.sort().values, want.sort().values)


def test_no_trainable_token_leaves_the_weights_where_they_are(tiny_add):
    """Every completion cut off at the limit under `mask_truncated`: nothing to train on. AdamW's weight decay
    (and the momentum of earlier steps) moved the weights anyway (a review, stop 38)."""
    _, tok = tiny_add
    cfg = config_for("grpo", {"lr": 1e-2, "steps": 1, "group_size": 4, "prompts_per_step": 2, "max_new_tokens": 1,
                              "weight_decay": 0.1, "warmup_steps": 1}, mask_truncated=True)
    torch.manual_seed(0)
    tr = GRPOTrainer(_model(tiny_add), tok, cfg, _ParityMix())
    before = [p.detach().clone() for p in tr.model.parameters()]
    tr.step()
    assert all(torch.equal(p.detach(), q) for p, q in zip(tr.model.parameters(), before))


def test_half_distillation_mixes_the_two_updates_half_and_half(tiny_add):
    """w_d = 0.5 with plain SGD from one start on one batch: the update is the mean of the policy-gradient
    update (w_d = 0) and the distillation update (w_d = 1). (Mixing without the (1 − w_d) weight passed every
    test before: the only mixing test used w_d = 1.)"""
    _, tok = tiny_add
    moved = {}
    for w, mix in ((0.0, _ParityMix), (0.5, _ParityMix), (1.0, _ParityMix), (1.0, _RightMix)):
        extra = {"distill.weight": w, "distill.teacher": "frozen", "distill.context": "answer"} if w else {}
        cfg = config_for("grpo", {"lr": 0.1, "steps": 1, "group_size": 4, "prompts_per_step": 4, "max_new_tokens": 3,
                                  "warmup_steps": 1, "optimizer": "sgd", "grad_clip": 1e9, **extra})
        model = _model(tiny_add, seed=5)
        start = [p.detach().clone() for p in model.parameters()]
        torch.manual_seed(7)
        tr = GRPOTrainer(model, tok, cfg, mix())
        tr.step()
        moved[w, mix] = [p.detach() - q for p, q in zip(tr.model.parameters(), start)]
    pol, half, dis = moved[0.0, _ParityMix], moved[0.5, _ParityMix], moved[1.0, _ParityMix]
    assert any(float(d.abs().max()) > 1e-6 for d in pol) and any(float(d.abs().max()) > 1e-6 for d in dis)
    # w_d = 1 is the distillation alone: the same update where every advantage is 0 (same rollouts, same teacher)
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(dis, moved[1.0, _RightMix]))
    assert all(torch.allclose(h, 0.5 * (a + b), atol=1e-6) for h, a, b in zip(half, pol, dis))


def test_sft_labels_are_the_answer_and_its_eos_only(tiny_add):
    """supervised_batch by hand: -100 under the prompt and the padding, the answer's ids, then <eos>."""
    from trainers.sft import supervised_batch

    _, tok = tiny_add
    pairs = [("add 1 2", "3"), ("add 4 4", "8 8")]
    ids, mask, lab = supervised_batch(tok, pairs)
    for row, (q, a) in enumerate(pairs):
        p = tok(format_prompt(q, tok), add_special_tokens=False)["input_ids"]
        c = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        n = len(p) + len(c)
        assert lab[row, :len(p)].tolist() == [-100] * len(p) and lab[row, len(p):n].tolist() == c
        assert ids[row, :n].tolist() == p + c and mask[row].tolist() == [1] * n + [0] * (ids.shape[1] - n)
        assert lab[row, n:].tolist() == [-100] * (ids.shape[1] - n)
    assert mask[0].sum() < mask[1].sum()  # the first row is padded
