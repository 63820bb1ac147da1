"""GRPOTrainer behaviours a mutation review found untested (trainers/grpo.py): the sampling temperature of μ and
π_θ, the lr schedule, when μ is recorded, stop_on_collapse, the overlong penalty's arguments, the EMA teacher,
prox_delta_max, the clip fraction's direction and the accuracy threshold. Tiny models, one or two steps each."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import trainers.grpo as grpo
from evaluators.sources import Item, SourceSpec
from trainers.distill import DistillSettings
from trainers.grpo import GRPOConfig, GRPOTrainer
from trainers.losses import ProxKLSettings
from trainers.rollout import completion_logprobs
from trainers.tiny import build_model


class _Parity:
    """Odd-length completions score 1: a reward spread within groups of an untrained model."""

    spec = SourceSpec("jsonl", "parity")

    def score(self, item: Item, text: str) -> float:
        return float(len(text) % 2)


class _Cycle(_Parity):
    """Rewards 1.0, 0.5, 0.0, 0.999, ... in the order completions are scored."""

    values = (1.0, 0.5, 0.0, 0.999)

    def __init__(self) -> None:
        self.calls = 0

    def score(self, item: Item, text: str) -> float:
        self.calls += 1
        return self.values[(self.calls - 1) % len(self.values)]


class _Mix:
    def __init__(self, task=None) -> None:
        self.task = task or _Parity()

    def sample(self, n):
        return [(self.task, Item(f"add {i % 5} {i % 3}", str(i % 5 + i % 3), "parity")) for i in range(n)]


def _trainer(tiny_add, mix=None, seed=0, **cfg) -> GRPOTrainer:
    spec, tok = tiny_add
    torch.manual_seed(seed)
    model = build_model(len(tok), spec, tok)
    base = dict(lr=1e-3, steps=1, group_size=4, prompts_per_step=2, max_new_tokens=3, warmup_steps=1, seed=seed)
    return GRPOTrainer(model, tok, GRPOConfig(**{**base, **cfg}), mix or _Mix())


def test_behaviour_and_policy_logprobs_use_the_sampling_temperature(tiny_add, monkeypatch):
    """μ, π_prox and π_θ are log-probs of softmax(logits / T), the distribution the rollouts were sampled from."""
    T = 0.5
    seen = []
    sig = inspect.signature(completion_logprobs)

    def recording(*a, **k):
        seen.append(sig.bind(*a, **k).arguments.get("temperature", 1.0))
        return completion_logprobs(*a, **k)

    tr = _trainer(tiny_add, temperature=T, num_iterations=2, lr=1e-9)
    b = tr._rollout()
    assert b.behav is not None
    ro = b.ro
    with torch.no_grad():
        at_t = completion_logprobs(tr.model, ro.input_ids, ro.attention_mask, ro.prompt_len, temperature=T)[0]
        at_1 = completion_logprobs(tr.model, ro.input_ids, ro.attention_mask, ro.prompt_len)[0]
    m = ro.completion_mask.bool()
    assert float((at_t - at_1)[m].abs().max()) > 1e-3  # T visibly changes the log-probs of this model
    assert torch.allclose(b.behav[m], at_t[m], atol=1e-5)
    monkeypatch.setattr(grpo, "completion_logprobs", recording)
    out = tr.step()
    assert seen and all(t == T for t in seen), seen  # μ (recorded), π_prox and π_θ: all at T
    # fresh rollouts and a negligible lr: π_prox = μ and π_θ/μ = 1, so nothing is stale or clipped
    assert out["stale_kl"] < 1e-5 and out["clip_frac"] == 0.0, out


def test_lr_follows_the_batch_schedule_and_warmup(tiny_add):
    """The lr of each step is lr₀·(N/N₀)^α times the warm-up factor, and it is what the optimizer steps with."""
    tr = _trainer(tiny_add, lr=1e-3, steps=4, group_size=2, prompts_per_step=1, max_new_tokens=2, warmup_steps=2,
                  batch_switch_at=0.5, batch_multiplier=4, lr_alpha=0.5)
    lrs, batches, groups = [], [], []
    for _ in range(4):
        m = tr.step()
        lrs.append(m["lr"])
        batches.append(m["batch"])
        groups.append([g["lr"] for g in tr.opt.param_groups])
    # steps 1-2 at N = 2 (warm-up 1/2, 2/2); steps 3-4 at N = 8: √4 = 2 times lr₀
    assert lrs == pytest.approx([0.5e-3, 1e-3, 2e-3, 2e-3]) and batches == [2, 2, 8, 8]
    assert all(g == pytest.approx([lr]) for g, lr in zip(groups, lrs))


@pytest.mark.parametrize("extra,needed", [({}, False), ({"minibatches": 2}, True), ({"num_iterations": 2}, True),
                                          ({"staleness": 1}, True)])
def test_behaviour_logprobs_are_recorded_whenever_the_policy_moves_before_a_minibatch(tiny_add, extra, needed):
    """μ is kept under staleness, reuse and several minibatches per batch (the second minibatch's π_θ has moved)."""
    tr = _trainer(tiny_add, **extra)
    assert tr._needs_behaviour_logp() is needed
    assert (tr._rollout().behav is not None) is needed


def test_minibatches_train_against_the_recorded_behaviour_policy(tiny_add):
    """With 4 minibatches and a large lr the later minibatches' π_θ/μ moves off 1 (μ the rollout's policy), so
    their ratio is clipped somewhere; with μ taken as the current policy it would never be."""
    tr = _trainer(tiny_add, lr=0.05, prompts_per_step=4, minibatches=4, max_new_tokens=4, grad_clip=1e9)
    m = tr.step()
    assert m["clip_frac"] > 0 and m["stale_kl"] == 0.0, m


def _stub_steps(tr: GRPOTrainer, bad_from: int):
    """Replace the trainer's step with one whose loss turns NaN from step `bad_from`: the failure clock fires."""
    count = {"n": 0}

    def step():
        count["n"] += 1
        return {"reward": 0.5, "loss": float("nan") if count["n"] >= bad_from else 0.1}

    tr.step = step


@pytest.mark.parametrize("stop", [True, False])
def test_stop_on_collapse_decides_whether_a_collapsed_trial_goes_on(tiny_add, stop):
    """The failure clock fires at step 2: training stops there under stop_on_collapse, else runs all its steps."""
    tr = _trainer(tiny_add, steps=5, stop_on_collapse=stop)
    _stub_steps(tr, bad_from=2)
    history = tr.train()
    assert tr.collapse == "loss is nan"
    assert len(history) == (2 if stop else 5)
    assert [h.get("collapsed", 0.0) for h in history][:2] == [0.0, 1.0]


def test_overlong_penalty_gets_the_limit_then_the_buffer(tiny_add, monkeypatch):
    """The penalty is overlong_penalty(lengths, truncated, max_new_tokens, overlong_buffer), and shapes the
    advantages: with buffer 2 of max_new_tokens 4 the shaped rewards are the task's plus the penalty."""
    from trainers.core import overlong_penalty

    calls = []

    def recording(lengths, truncated, max_len, buffer):
        out = overlong_penalty(lengths, truncated, max_len, buffer)
        calls.append((lengths.clone(), truncated.clone(), max_len, buffer, out))
        return out

    monkeypatch.setattr(grpo, "overlong_penalty", recording)
    tr = _trainer(tiny_add, max_new_tokens=4, overlong_buffer=2)
    tr.step()
    ((lengths, truncated, max_len, buffer, pen),) = calls
    assert (max_len, buffer) == (4, 2)
    assert lengths.dtype != torch.bool and truncated.dtype == torch.bool
    want = torch.where(truncated, -1.0, ((2 - lengths.float()) / 2).clamp(-1.0, 0.0))
    assert torch.allclose(pen, want)


@pytest.mark.parametrize("decay", [0.75, 0.2])
def test_ema_teacher_moves_by_one_minus_decay_towards_the_student(tiny_add, decay):
    """After one optimizer step the EMA teacher is decay·θ₀ + (1 − decay)·θ₁, and the student is θ₁ (untouched)."""
    d = DistillSettings(weight=1.0, context="answer", teacher="ema", ema_decay=decay)
    tr = _trainer(tiny_add, lr=1e-2, distill=d)
    start = [p.detach().clone() for p in tr.model.parameters()]
    assert all(torch.equal(t, s) for t, s in zip(tr.teacher.parameters(), start))
    tr.step()
    now = [p.detach().clone() for p in tr.model.parameters()]
    moved = sum(float((a - b).abs().sum()) for a, b in zip(now, start))
    assert moved > 1e-3
    for t, s0, s1 in zip(tr.teacher.parameters(), start, now):
        assert torch.allclose(t, decay * s0 + (1 - decay) * s1, atol=1e-6)


def test_prox_delta_max_is_the_largest_over_the_minibatches(tiny_add, monkeypatch):
    """prox_delta_max is the max of the minibatches' max |δ| (not their sum, nor their mean)."""
    from trainers.losses import proximal_kl_stats

    seen = []

    def recording(x, prox=None):
        out = proximal_kl_stats(x, prox)
        seen.append(out)
        return out

    monkeypatch.setattr(grpo, "proximal_kl_stats", recording)
    tr = _trainer(tiny_add, lr=1e-2, policy_loss="proximal_kl", prox=ProxKLSettings(mode="snapshot"), minibatches=2,
                  num_iterations=2, prompts_per_step=4)
    m = tr.step()
    maxes = [s["prox_delta_max"] for s in seen]
    assert len(maxes) == 4 and sum(v > 0 for v in maxes) >= 2, maxes
    assert m["prox_delta_max"] == pytest.approx(max(maxes))
    assert m["prox_delta_mean"] == pytest.approx(sum(s["prox_delta_mean"] for s in seen) / 4)


@pytest.mark.parametrize("shift,eps_low,eps_high,want", [
    (math.log(2.0), 0.9, 0.2, 1.0),  # π_θ/μ = 2 > 1.2: clipped above (μ/π_θ = 0.5 is inside [0.1, 1.2])
    (-math.log(2.0), 0.2, 5.0, 1.0),  # π_θ/μ = 0.5 < 0.8: clipped below (μ/π_θ = 2 is inside [0.8, 6])
    (math.log(1.1), 0.2, 0.2, 0.0),  # 1.1: inside
])
def test_clip_frac_counts_the_ratio_pi_over_mu(tiny_add, shift, eps_low, eps_high, want):
    """clip_frac is the share of tokens where r = π_θ/μ lies outside [1 − eps_low, 1 + eps_high]: here μ is the
    rollout policy scaled by exp(−shift), and a negligible lr keeps π_θ where it was, so r = exp(shift)."""
    tr = _trainer(tiny_add, lr=1e-9, num_iterations=2, eps_low=eps_low, eps_high=eps_high)
    rollout = tr._rollout

    def shifted():
        b = rollout()
        b.behav = b.behav - shift
        return b

    tr._rollout = shifted
    assert tr.step()["clip_frac"] == pytest.approx(want)


def test_accuracy_counts_rewards_of_one_only(tiny_add):
    """A completion counts as correct in `accuracy` at reward ≥ 1 (0.999 and 0.5 are not); `reward` is the mean."""
    tr = _trainer(tiny_add, mix=_Mix(_Cycle()), prompts_per_step=2, group_size=4)
    m = tr.step()
    assert m["accuracy"] == pytest.approx(0.25) and m["reward"] == pytest.approx((1.0 + 0.5 + 0.0 + 0.999) / 4)
