"""The GRPO pieces on hand-computed tensors (ALGORITHMS.md §1)."""

from __future__ import annotations

import math

import pytest
import torch

from trainers.core import ADVANTAGES, AGGREGATIONS, clipped_surrogate, k3_kl


def test_group_advantage_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])  # two groups of G=4
    a = ADVANTAGES.get("group")(r, 4)
    std = math.sqrt(1 / 3)  # unbiased std of {1,0,0,1}: mean .5, sum sq dev 1, /3
    expect = [0.5 / (std + 1e-4), -0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.5 / (std + 1e-4), 0, 0, 0, 0]
    assert torch.allclose(a, torch.tensor(expect), atol=1e-5)


def test_dr_grpo_advantage_is_only_centred():
    r = torch.tensor([3.0, 1.0, 2.0, 2.0])
    assert torch.allclose(ADVANTAGES.get("none")(r, 2), torch.tensor([1.0, -1.0, 0.0, 0.0]))


def test_batch_scaled_advantage_uses_batch_std():
    r = torch.tensor([3.0, 1.0, 2.0, 2.0])
    std = r.std(unbiased=True)  # mean 2, sq devs 1,1,0,0 → var 2/3
    assert std == pytest.approx(math.sqrt(2 / 3))
    assert torch.allclose(ADVANTAGES.get("batch")(r, 2), torch.tensor([1.0, -1.0, 0.0, 0.0]) / (std + 1e-4))


def test_advantage_shape_checked():
    with pytest.raises(ValueError, match="G=4"):
        ADVANTAGES.get("group")(torch.ones(6), 4)


def test_clipped_surrogate_by_hand():
    # ratios 1.5 (A>0: clipped to 1.2), 0.5 (A>0: unclipped min → 0.5), 1.5 (A<0: min picks −1.5·|A|)
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.5]]))
    adv = torch.tensor([[2.0, 2.0, -2.0]])
    loss = clipped_surrogate(logp, old, adv, eps_low=0.2, eps_high=0.2)
    assert torch.allclose(loss, torch.tensor([[-2.4, -1.0, 3.0]]), atol=1e-6)


def test_clip_higher_is_asymmetric():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.25, 0.7]]))
    adv = torch.tensor([[1.0, -1.0]])
    loss = clipped_surrogate(logp, old, adv, eps_low=0.2, eps_high=0.28)
    # 1.25 < 1.28: not clipped; 0.7 < 0.8 with A<0: −min(−0.7, −0.8) = 0.8
    assert torch.allclose(loss, torch.tensor([[-1.25, 0.8]]), atol=1e-6)


def test_k3_by_hand():
    logp = torch.tensor([math.log(0.5)])
    ref = torch.tensor([math.log(0.25)])
    q = math.log(0.25) - math.log(0.5)
    assert k3_kl(logp, ref).item() == pytest.approx(math.exp(q) - q - 1)
    assert k3_kl(ref, ref).item() == 0.0


def test_aggregations_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert AGGREGATIONS.get("seq_mean")(loss, mask).item() == pytest.approx((2.0 + 4.0) / 2)
    assert AGGREGATIONS.get("token_mean")(loss, mask).item() == pytest.approx(10.0 / 4)
    assert AGGREGATIONS.get("fixed_len")(loss, mask).item() == pytest.approx(10.0 / 6)
    # Dr.GRPO's normalizer is the generation limit, not the batch's padded width (its longest sample)
    assert AGGREGATIONS.get("fixed_len")(loss, mask, max_len=8).item() == pytest.approx(10.0 / (2 * 8))
    wider = torch.cat([loss, torch.zeros(2, 5)], -1), torch.cat([mask, torch.zeros(2, 5)], -1)
    assert AGGREGATIONS.get("fixed_len")(*wider, max_len=8).item() == pytest.approx(10.0 / (2 * 8))
    assert AGGREGATIONS.get("token_mean")(loss, mask, max_len=8).item() == pytest.approx(10.0 / 4)  # others ignore it
    # a sequence without a trainable token (truncated, under mask_truncated) has no token mean: left out
    empty = torch.cat([loss, torch.tensor([[5.0, 5.0, 5.0]])]), torch.cat([mask, torch.zeros(1, 3)])
    assert AGGREGATIONS.get("seq_mean")(*empty).item() == pytest.approx((2.0 + 4.0) / 2)


def test_one_pass_clip_equals_policy_gradient():
    """With one pass and one minibatch r ≡ 1: the clipped loss's gradient is −A·∇logπ."""
    torch.manual_seed(0)
    logits = torch.randn(4, 3, 5, requires_grad=True)
    target = torch.randint(0, 5, (4, 3))
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5]).unsqueeze(-1).expand(4, 3)
    mask = torch.ones(4, 3)

    def logp_of(lg):
        return torch.log_softmax(lg, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)

    lp = logp_of(logits)
    AGGREGATIONS.get("token_mean")(clipped_surrogate(lp, lp.detach(), adv), mask).backward()
    g_clip = logits.grad.clone()
    logits.grad = None
    lp = logp_of(logits)
    AGGREGATIONS.get("token_mean")(-adv * lp, mask).backward()
    assert torch.allclose(g_clip, logits.grad, atol=1e-7)


def test_registry_refuses_duplicates_and_lists_names():
    with pytest.raises(ValueError, match="already registered"):
        ADVANTAGES.add("group", lambda r, g: r)
    with pytest.raises(KeyError, match="known: batch, group, none"):
        ADVANTAGES.get("grup")


def test_log_probs_are_those_of_the_sampling_temperature():
    """At rollout temperature T the sampler draws from softmax(logits / T); the trainers' log-probs are
    of that distribution (hand-computed on a fixed logit table), and T = 1 is the plain softmax."""
    from trainers.rollout import completion_logprobs

    table = torch.tensor([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0], [0.0, 0.0, 3.0]])

    class Fixed(torch.nn.Module):  # next-token logits depend only on the current token
        def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
            return type("Out", (), {"logits": table[input_ids]})()

    ids = torch.tensor([[0, 1, 2]])  # prompt [0], completion [1, 2]
    att = torch.ones_like(ids)
    for T in (1.0, 0.5, 2.0):
        got, _ = completion_logprobs(Fixed(), ids, att, prompt_len=1, temperature=T)
        want = [torch.log_softmax(table[0] / T, -1)[1], torch.log_softmax(table[1] / T, -1)[2]]
        assert got[0].tolist() == pytest.approx([float(w) for w in want], abs=1e-6)
    at_half = completion_logprobs(Fixed(), ids, att, prompt_len=1, temperature=0.5)[0][0, 0]
    assert float(at_half) == pytest.approx(2 * 0.0 - math.log(math.exp(4.0) + math.exp(0.0) + math.exp(-2.0)), abs=1e-6)


def test_dr_grpo_and_batch_advantages_centre_on_each_groups_own_mean():
    """A test audit's mutation (stop 33): with rewards whose group means equal the batch mean (3,1 | 2,2), centring
    on the batch mean passed every test. Here the groups' means (0.5 and 3) differ from the batch's (1.75)."""
    r = torch.tensor([1.0, 0.0, 3.0, 3.0])
    assert torch.allclose(ADVANTAGES.get("none")(r, 2), torch.tensor([0.5, -0.5, 0.0, 0.0]))
    std = r.std()  # the batch's std (1.5): scale only, the centre stays each group's
    assert torch.allclose(ADVANTAGES.get("batch")(r, 2), torch.tensor([0.5, -0.5, 0.0, 0.0]) / (std + 1e-4))


def test_a_group_of_one_has_zero_advantage_not_nan():
    """The std of one sample is undefined (NaN): a group of one has no baseline to beat (mutation testing, stop 38)."""
    from trainers.core import group_advantage

    assert group_advantage(torch.tensor([1.0, 2.0]), 1).tolist() == [0.0, 0.0]
