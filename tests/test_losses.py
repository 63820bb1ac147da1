"""Policy losses of trainers.losses on hand-computed tensors (ALGORITHMS.md §1, §3)."""

from __future__ import annotations

import math

import pytest
import torch

from trainers.core import AGGREGATIONS
from trainers.losses import POLICY_LOSSES, LossInputs, ProxKLSettings, future_kl


def _inputs(logp, behav=None, prox=None, adv=None, mask=None) -> LossInputs:
    logp = torch.as_tensor(logp, dtype=torch.float32)
    return LossInputs(logp, torch.as_tensor(behav if behav is not None else logp.detach()),
                      torch.as_tensor(prox if prox is not None else logp.detach()),
                      torch.as_tensor(adv, dtype=torch.float32), torch.as_tensor(mask if mask is not None else
                                                                                 torch.ones_like(logp)))


def test_pg_by_hand():
    x = _inputs([[math.log(0.5), math.log(0.25)]], adv=[[2.0, -1.0]])
    out = POLICY_LOSSES.get("pg")(x)
    assert torch.allclose(out, torch.tensor([[-2 * math.log(0.5), math.log(0.25)]]))


def test_cispo_weight_is_clipped_above_only_and_detached():
    logp = torch.log(torch.tensor([[1.5, 0.3]])).requires_grad_(True)
    x = LossInputs(logp, torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([[1.0, 1.0]]), torch.ones(1, 2))
    out = POLICY_LOSSES.get("cispo")(x, eps_low=0.2, eps_high=0.2)
    # weights min(1.5, 1.2) = 1.2 and 0.3 (no lower bound, as in MiniMax-M1), both detached: d out / d logp = −w·A
    assert torch.allclose(out, torch.tensor([[-1.2 * math.log(1.5), -0.3 * math.log(0.3)]]), atol=1e-6)
    out.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1.2, -0.3]]), atol=1e-6)
    from trainers.algorithms import catalog, config_for

    assert config_for("cispo", {}).aggregation == "token_mean"  # the paper normalizes over all tokens
    knobs = {k["name"] for a in catalog() if a["name"] == "cispo" for k in a["knobs"]}
    assert "eps_high" in knobs and "eps_low" not in knobs


def test_clip_and_cispo_take_their_ratio_against_the_behaviour_policy():
    """r = π_θ/μ, not π_θ/π_prox: with μ ≠ π_prox the staleness correction of GRPO, DAPO and CISPO is the ratio
    against μ (a review found no test telling the two apart: swapping them passed every test)."""
    logp = torch.log(torch.tensor([[0.5, 0.5]])).requires_grad_(True)
    behav = torch.log(torch.tensor([[0.25, 0.5]]))  # μ: r = 2 and 1
    prox = torch.log(torch.tensor([[0.5, 0.25]]))  # π_prox: the other way round
    x = LossInputs(logp, behav, prox, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2))
    clip = POLICY_LOSSES.get("clip")(x, eps_low=0.2, eps_high=0.2)
    assert torch.allclose(clip, torch.tensor([[-1.2, -1.0]]))  # −min(r·A, clip(r)·A): 2 clipped to 1.2, and 1
    cispo = POLICY_LOSSES.get("cispo")(x, eps_high=0.2)
    assert torch.allclose(cispo, torch.tensor([[-1.2 * math.log(0.5), -1.0 * math.log(0.5)]]))


def test_a_log_prob_overflow_at_a_masked_token_leaves_the_loss_finite():
    """The trainers fill the reference log-probs' masked positions (padding after EOS) with π_θ's own
    (`on_mask`): an exp overflow there used to make the loss and every gradient NaN (inf · 0)."""
    from trainers.core import k3_kl, on_mask

    mask = torch.tensor([[1.0, 0.0]])
    adv = torch.tensor([[-1.0, -1.0]])
    behav = torch.tensor([[-1.0, -95.0]])  # μ far below π_θ at the padding token: r = e^94 = inf
    ref = torch.tensor([[-1.0, 94.0]])
    for guard in (False, True):
        logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
        b, r = (on_mask(behav, mask, logp.detach()), on_mask(ref, mask, logp.detach())) if guard else (behav, ref)
        tok = POLICY_LOSSES.get("clip")(LossInputs(logp, b, b, adv, mask)) + 0.04 * k3_kl(logp, r)
        loss = AGGREGATIONS.get("token_mean")(tok, mask)
        loss.backward()
        finite = bool(torch.isfinite(loss)) and bool(torch.isfinite(logp.grad).all())
        assert finite == guard
    assert loss.item() == pytest.approx(1.0) and logp.grad.tolist() == [[1.0, 0.0]]  # −r·A at r = 1; k3 = 0


def test_proximal_kl_stats_by_hand():
    """ALGORITHMS.md §3's report: mean/max |δ|, ESS of w, masked fraction, mean F (masked tokens only)."""
    from trainers.losses import ProxKLSettings, proximal_kl_stats

    logp = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    prox = torch.log(torch.tensor([[0.25, 0.4, 0.9]]))  # δ = log 2, log 0.5, (masked)
    behav = torch.log(torch.tensor([[0.25, 0.1, 0.9]]))  # π_prox/μ = 1 and 4 (> C_mask 3: masked)
    x = LossInputs(logp, behav, prox, torch.ones(1, 3), torch.tensor([[1.0, 1.0, 0.0]]))
    s = proximal_kl_stats(x, ProxKLSettings(horizon=0, gamma=1.0, c_mask=3.0))
    ln2 = math.log(2)
    assert s["prox_delta_mean"] == pytest.approx(ln2) and s["prox_delta_max"] == pytest.approx(ln2)
    assert s["prox_masked_frac"] == pytest.approx(0.5)
    assert s["prox_ess"] == pytest.approx(1 ** 2 / (2 * 1))  # w = (1, 0): (Σw)² / (n·Σw²)
    assert s["prox_future_kl"] == pytest.approx((0.0 + (-ln2)) / 2)  # F = (log2 − log2, −log2)


def test_future_kl_by_hand():
    delta = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    # H=2, γ=0.5: F_t = m_t·δ_t + 0.5·m_{t+1}·δ_{t+1}
    assert torch.allclose(future_kl(delta, mask, 2, 0.5), torch.tensor([[2.0, 3.5, 3.0, 0.0]]))
    # H=0 (whole tail), γ=1: suffix sums of m·δ
    assert torch.allclose(future_kl(delta, mask, 0, 1.0), torch.tensor([[6.0, 5.0, 3.0, 0.0]]))


def test_proximal_kl_reduces_to_reinforce_when_policies_agree():
    """μ = π_prox = π_θ ⇒ δ = 0, w = 1, F = 0, ρ = 1: the loss and its gradient are REINFORCE's."""
    torch.manual_seed(0)
    logits = torch.randn(4, 3, 6, requires_grad=True)
    target = torch.randint(0, 6, (4, 3))
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv = (rewards - rewards.mean()).unsqueeze(-1).expand(4, 3)  # group baseline, one group of 4
    mask = torch.ones(4, 3)

    def logp_of(lg):
        return torch.log_softmax(lg, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)

    lp = logp_of(logits)
    x = LossInputs(lp, lp.detach(), lp.detach(), adv, mask)
    loss = AGGREGATIONS.get("token_mean")(POLICY_LOSSES.get("proximal_kl")(x, prox=ProxKLSettings()), mask)
    loss.backward()
    g_prox = logits.grad.clone()
    logits.grad = None
    lp = logp_of(logits)
    ref = AGGREGATIONS.get("token_mean")(-adv * lp, mask)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item())
    assert torch.allclose(g_prox, logits.grad, atol=1e-7)


def test_proximal_kl_staleness_weights_cap_and_mask():
    prox = torch.log(torch.tensor([[0.6, 0.5, 0.9]]))
    behav = torch.log(torch.tensor([[0.5, 0.1, 0.05]]))  # π_prox/μ = 1.2, 5 (> C_is), 18 (> C_mask)
    x = LossInputs(prox.clone(), behav, prox, torch.ones(1, 3), torch.ones(1, 3))
    s = ProxKLSettings(beta_p=0.0, c_is=2.0, c_mask=10.0)
    out = POLICY_LOSSES.get("proximal_kl")(x, prox=s)
    assert torch.allclose(out, torch.tensor([[-1.2 * math.log(0.6), -2.0 * math.log(0.5), 0.0]]), atol=1e-5)


def test_proximal_kl_future_credit_shifts_the_advantage():
    prox = torch.zeros(1, 3)
    logp = torch.tensor([[0.5, 0.0, 0.0]])  # δ = [0.5, 0, 0]; ρ_0 = min(e^0.5, C_prox)
    x = LossInputs(logp, prox, prox, torch.ones(1, 3), torch.ones(1, 3))
    s = ProxKLSettings(beta_p=1.0, horizon=2, bound=0.4, c_prox=10.0)
    out = POLICY_LOSSES.get("proximal_kl")(x, prox=s)
    # Ã_0 = 1 − clip(0.5, −0.4, 0.4) = 0.6; tokens 1, 2 have F = 0 and logp = 0
    assert out[0, 0].item() == pytest.approx(-math.exp(0.5) * 0.6 * 0.5)
    assert out[0, 1:].abs().sum().item() == 0.0


def test_proximal_kl_clips_a_negative_future_kl_and_masks_at_c_mask_inclusive():
    """A test audit's mutations (stop 33): dropping the clip's lower bound −B, and masking at staleness ≥ C_mask
    instead of > C_mask, passed every test (the clip was tested on a positive F only)."""
    from trainers.losses import proximal_kl_loss

    z = torch.zeros(1, 3)
    x = LossInputs(logp=torch.tensor([[-0.5, 0.0, 0.0]]), behav_logp=z, prox_logp=z, adv=torch.ones(1, 3),
                   mask=torch.ones(1, 3))
    s = ProxKLSettings(beta_p=1.0, horizon=2, bound=0.4, c_prox=10.0)
    # δ = (−0.5, 0, 0); F_0 = −0.5 clipped to −0.4, so Ã_0 = 1.4; ρ_0 = e^−0.5; w = 1; out_0 = −ρ·Ã·log π = 0.7·e^−0.5
    assert proximal_kl_loss(x, s)[0, 0].item() == pytest.approx(0.7 * math.exp(-0.5), rel=1e-6)
    # a staleness ratio π_prox/μ of exactly C_mask = 3 keeps its weight min(3, C_is = 2) = 2
    x = LossInputs(logp=torch.log(torch.tensor([[0.75]])), behav_logp=torch.log(torch.tensor([[0.25]])),
                   prox_logp=torch.log(torch.tensor([[0.75]])), adv=torch.ones(1, 1), mask=torch.ones(1, 1))
    s = ProxKLSettings(beta_p=0.0, c_is=2.0, c_mask=3.0)
    assert torch.exp(x.prox_logp - x.behav_logp).item() == 3.0
    assert proximal_kl_loss(x, s).item() == pytest.approx(-2.0 * math.log(0.75), rel=1e-6)


def test_overlong_penalty_by_hand():
    """DAPO's soft overlong punishment (ALGORITHMS.md §1, "a soft length penalty"): max_len 8, buffer 4: no
    penalty up to 4 tokens, then (4 − L)/4 down to −1 at 8 tokens, and −1 for a truncated completion."""
    from trainers.core import overlong_penalty

    got = overlong_penalty(torch.tensor([3, 4, 5, 6, 8, 8]), torch.tensor([False] * 5 + [True]), 8, 4)
    assert got.tolist() == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]



def test_proximal_kl_caps_rho_and_its_settings_hold_their_documented_defaults():
    """One token whose probability rose from 0.25 (π_prox = μ) to 0.5: δ = log 2, exp(δ) = 2 capped at C_prox = 1,
    so with β_p = 0 the loss is −1·1·1·log 0.5 = log 2 (without the cap, 2·log 2). The defaults ALGORITHMS.md and
    docs/trainers.md state are pinned, and a decay of 1 (π_prox frozen at the start) is refused (mutation
    testing, stop 38: each passed every test)."""
    import math

    from trainers.losses import LossInputs, ProxKLSettings, proximal_kl_loss, proximal_kl_stats

    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    old = torch.tensor([[math.log(0.25)]])
    x = LossInputs(logp, old, old, torch.ones(1, 1), torch.ones(1, 1))
    loss = proximal_kl_loss(x, prox=ProxKLSettings(beta_p=0.0))
    assert loss.item() == pytest.approx(math.log(2))
    d = ProxKLSettings()
    assert (d.beta_p, d.horizon, d.gamma, d.bound, d.c_is, d.c_mask, d.c_prox, d.mode, d.ewma_decay) == \
        (2.0, 4, 1.0, 2.0, 2.0, 3.0, 1.0, "ewma", 0.5)
    with pytest.raises(ValueError, match=r"ewma_decay must be in \[0, 1\)"):
        ProxKLSettings(ewma_decay=1.0)
    # the report reads the mask's tokens only, and an all-masked batch has no effective sample
    two = LossInputs(torch.tensor([[0.1, 5.0]]), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2),
                     torch.tensor([[1.0, 0.0]]))
    assert proximal_kl_stats(two)["prox_delta_max"] == pytest.approx(0.1)
    none = LossInputs(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2))
    assert proximal_kl_stats(none)["prox_ess"] == 0.0


def test_the_staleness_weight_and_the_distillation_teacher_carry_no_gradient():
    """Only log π_θ is trained: Proximal KL's staleness weight (π_prox/μ) and top-k reverse KL's teacher are
    targets. Every caller passed them without a gradient; a new one leaked it into the weight or the teacher
    (a review, stop 53)."""
    from trainers.distill import DIVERGENCES

    logp = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    prox = torch.tensor([[-0.6, -0.9]], requires_grad=True)
    behav = torch.tensor([[-0.7, -1.2]], requires_grad=True)
    loss = POLICY_LOSSES.get("proximal_kl")(LossInputs(logp, behav, prox, torch.ones(1, 2), torch.ones(1, 2)))
    loss.sum().backward()
    assert logp.grad is not None and logp.grad.abs().sum() > 0 and prox.grad is None and behav.grad is None
    student = torch.log_softmax(torch.tensor([[[1.0, 0.5, -1.0]]]), -1).requires_grad_()
    teacher = torch.log_softmax(torch.tensor([[[0.2, 0.4, 0.1]]]), -1).requires_grad_()
    for name in ("sampled_rkl", "topk_rkl"):
        DIVERGENCES.get(name)(student, teacher, torch.tensor([[0]]), top_k=2).sum().backward()
        assert teacher.grad is None and student.grad.abs().sum() > 0, name
