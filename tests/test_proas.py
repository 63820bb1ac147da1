"""ProAS credit shaping (ALGORITHMS.md §2) on hand-built trajectories."""

from __future__ import annotations

import pytest
import torch

from trainers.core import ADVANTAGES
from trainers.proas import ProASConfig, ReferenceGraph, deviations, step_advantages


def test_inadmissible_step_in_successful_episode_gets_zero_credit():
    g = ReferenceGraph(ProASConfig(graph_source="rules"))
    g.observe_state("A", ["go east", "look"], ["go east"])
    g.observe_state("B", ["take coin", "go west"], ["take coin"])
    # won: "dance" (inadmissible in A), then go east, then take coin
    v = [g.validity(("A", "dance")), g.validity(("A", "go east")), g.validity(("B", "take coin"))]
    assert v == [0.0, 1.0, 1.0]
    for gate in ("hard", "soft"):
        (adv,) = step_advantages([0.8], [v], ProASConfig(gate=gate))
        assert adv == [0.0, 0.8, 0.8]  # zero, never negative
    # with rescaling the episode keeps its total credit 3·0.8, moved onto the two valid steps
    (adv,) = step_advantages([0.8], [v], ProASConfig(rescale=True))
    assert adv == pytest.approx([0.0, 1.2, 1.2])
    assert sum(adv) == pytest.approx(3 * 0.8)


def test_a_state_key_two_states_share_cannot_make_an_accepted_step_invalid():
    """The rules read whether the environment accepted the step's command when it was taken: a key that a
    door-open and a door-shut state share kept only the admissible commands seen last, and an accepted
    step (a walkthrough step in a won episode among them) read v = 0, zero credit (review, stop 30)."""
    from trainers.multiturn import Step, step_validities

    g = ReferenceGraph(ProASConfig(graph_source="rules"))
    g.observe_state("pantry", ["open door"], ["open door"])  # door shut
    g.observe_state("pantry", ["close door", "go south"])  # the same key, door open: seen last
    assert g.validity(("pantry", "open door")) == 0.0  # the last recorded set alone says invalid
    assert g.validity(("pantry", "open door"), admissible=True) == 1.0  # accepted then: the walkthrough's
    assert g.validity(("pantry", "go south"), admissible=False) == 0.0  # refused then, whatever was recorded
    assert g.validity(("cellar", "dance"), admissible=False) == 0.0  # a state never recorded too

    class E:  # an episode's steps, as the trainer records them
        steps = [Step("p", [], "open door", "pantry", True), Step("p", [], "go south", "pantry", True),
                 Step("p", [], "dance", "pantry", False)]

    assert step_validities([E()], g) == [[1.0, g.cfg.v_unk, 0.0]]


def test_soft_gate_scales_by_validity():
    (adv,) = step_advantages([2.0], [[0.25, 0.75, 1.0]], ProASConfig(gate="soft"))
    assert adv == [0.5, 1.5, 2.0]
    (adv,) = step_advantages([2.0], [[0.25, 0.75, 1.0]], ProASConfig(gate="hard", theta_v=0.5))
    assert adv == [0.0, 2.0, 2.0]


def test_failed_episode_penalty_moves_to_first_deviations_total_unchanged():
    cfg = ProASConfig(lam=0.5, k_dev=2, rho=0.5, theta_v=0.5)
    v = [1.0, 0.0, 1.0, 0.2, 0.0]  # deviations at t=1, 3, 4; the first K=2 share the moved penalty
    (adv,) = step_advantages([-1.0], [v], cfg)
    # q_1 = 1/1.5, q_3 = 0.5/1.5; Â_t = −((1−λ) + λ·T·q_t) with T = 5
    expect = [-0.5, -(0.5 + 0.5 * 5 * (2 / 3)), -0.5, -(0.5 + 0.5 * 5 * (1 / 3)), -0.5]
    assert adv == pytest.approx(expect)
    assert sum(adv) == pytest.approx(-1.0 * 5)  # the episode's total penalty A·T is unchanged
    assert adv[1] < adv[3] < adv[0]  # the earliest wrong turn carries the most
    # λ = 1, K = 1: the whole penalty lands on the first deviation
    (adv,) = step_advantages([-1.0], [v], ProASConfig(lam=1.0, k_dev=1))
    assert adv == pytest.approx([0, -5, 0, 0, 0])


def test_failed_episode_without_deviation_keeps_grpo_credit():
    (adv,) = step_advantages([-0.7], [[1.0, 1.0, 0.9]], ProASConfig(lam=0.9))
    assert adv == pytest.approx([-0.7] * 3)


def test_lambda_zero_and_valid_graph_is_exactly_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])  # two games, G = 3
    A = ADVANTAGES.get("group")(rewards, 3).tolist()
    lengths = [3, 5, 1, 4, 2, 6]
    for gate in ("hard", "soft"):
        cfg = ProASConfig(lam=0.0, gate=gate)
        out = step_advantages(A, [[1.0] * T for T in lengths], cfg)
        assert out == [[a] * T for a, T in zip(A, lengths)]  # bit-for-bit the GRPO broadcast


def test_distilled_validity_over_a_window():
    cfg = ProASConfig(graph_source="distilled", n_min=3, window=2, prior_a=1, prior_b=1, v_unk=0.9)
    g = ReferenceGraph(cfg)
    e = ("A", "go west")
    g.add_iteration([([e], False), ([e], False)])
    assert g.validity(e) == 0.9  # 2 < n_min: unknown
    g.add_iteration([([e], True), ([e], False)])
    assert g.validity(e) == pytest.approx((1 + 1) / (4 + 2))  # n⁺=1, n⁻=3
    g.add_iteration([([e], True)])  # the first iteration leaves the window (W = 2): n⁺=2, n⁻=1
    assert g.validity(e) == pytest.approx((2 + 1) / (3 + 2))


def test_rules_override_distilled_and_corruption_flips_a_share():
    g = ReferenceGraph(ProASConfig(graph_source="both", n_min=1))
    g.observe_state("A", ["go east"])
    g.add_iteration([([("A", "jump")], True)] * 5)
    assert g.validity(("A", "jump")) == 0.0  # the environment's rules win
    cg = ReferenceGraph(ProASConfig(graph_source="rules", corrupt=0.2), seed=1)
    states = [f"s{i}" for i in range(500)]
    for s in states:
        cg.observe_state(s, ["ok"])
    flipped = sum(cg.validity((s, "bad")) == 1.0 for s in states) / len(states)
    assert 0.15 < flipped < 0.25
    assert cg.stats()["graph_states"] == 500


def test_off_reference_command_is_a_deviation_until_distilled():
    """v_off: at a state whose walkthrough is known, another admissible command (going back, look) has
    validity v_off, the reference command 1, an inadmissible one 0; the distilled estimate replaces
    v_off once the edge has n_min occurrences; a state without a walkthrough stays at v_unk; and the
    failed episode's penalty then lands on the first wrong turn."""
    cfg = ProASConfig(graph_source="both", v_off=0.2, n_min=2, theta_v=0.5)
    g = ReferenceGraph(cfg)
    g.observe_state("hall", ["go east", "go west", "look"], walkthrough=["go east", "take coin"])
    g.observe_state("den", ["go north", "look"])  # no walkthrough known here
    assert g.validity(("hall", "go east")) == 1.0
    assert g.validity(("hall", "go west")) == 0.2 and g.validity(("hall", "look")) == 0.2
    assert g.validity(("hall", "dance")) == 0.0
    assert g.validity(("den", "look")) == cfg.v_unk
    g.add_iteration([([("hall", "look")], True), ([("hall", "look")], True)])  # n⁺ = 2 = n_min
    assert g.validity(("hall", "look")) == pytest.approx((2 + 1) / (2 + 2))
    assert ReferenceGraph(ProASConfig()).cfg.v_off == 1.0  # neutral by default: as before the knob
    # a failed 3-step episode: right, wrong turn (go west), right; K = 1, λ = 1: all of A·T on step 2
    vs = [g.validity(e) for e in [("hall", "go east"), ("hall", "go west"), ("hall", "go east")]]
    assert step_advantages([-1.0], [vs], ProASConfig(lam=1.0, k_dev=1))[0] == [0.0, -3.0, 0.0]
    with pytest.raises(ValueError, match="v_off must be in"):
        ProASConfig(v_off=1.5)


def test_config_rejects_bad_knobs():
    with pytest.raises(ValueError, match="gate must be soft or hard"):
        ProASConfig(gate="medium")
    with pytest.raises(ValueError, match="lam must be in"):
        ProASConfig(lam=1.5)


def test_boundaries_and_counts_by_hand():
    """A test audit's mutations (stop 33) that passed every test: the hard gate and the deviation test at exactly
    v = θ_v (a distilled estimate is 0.5 whenever n⁺ = n⁻ with a = b), an episode's repeated edge counted once per
    occurrence instead of once per episode, an unrecorded state read as inadmissible by the rules, the priors a
    and b swapped, and the rule agreement at v = θ_v."""
    assert step_advantages([1.0], [[0.5]], ProASConfig(gate="hard", theta_v=0.5)) == [[1.0]]  # v ≥ θ_v kept
    # v = θ_v is no deviation: the penalty moves onto the first step only (v = 0.4), λ = 1, T = 2
    assert step_advantages([-1.0], [[1.0, 0.5]], ProASConfig(lam=1.0, k_dev=1, theta_v=0.5)) == [[-1.0, -1.0]]
    assert step_advantages([-1.0], [[0.4, 0.5]], ProASConfig(lam=1.0, k_dev=1, theta_v=0.5)) == [[-2.0, 0.0]]
    e = ("A", "look")
    g = ReferenceGraph(ProASConfig(graph_source="distilled", n_min=1))
    g.add_iteration([([e, e, e], False), ([e], True)])  # counted per episode, as trajectories
    assert g.counts(e) == (1, 1) and g.validity(e) == pytest.approx(0.5)
    assert ReferenceGraph(ProASConfig(graph_source="rules")).validity(("never seen", "look")) == 1.0  # v_unk
    g = ReferenceGraph(ProASConfig(graph_source="distilled", n_min=1, prior_a=2.0, prior_b=1.0))
    g.add_iteration([([e], True)])
    assert g.validity(e) == pytest.approx((1 + 2) / (1 + 2 + 1))
    g = ReferenceGraph(ProASConfig(graph_source="both", n_min=2))
    g.observe_state("A", ["look"])
    g.add_iteration([([e], True), ([e], False)])  # v = 0.5 = θ_v: valid, as the rules say
    assert g.validity(e) == pytest.approx(0.5) and g.stats()["graph_rule_agreement"] == 1.0


# ---------- edges no test pinned (mutation testing, stop 38: each change below passed every test) ----------

def test_rescaling_a_winning_episode_with_no_valid_step_gives_zero_credit_not_a_crash():
    """Hard gate, every step invalid: nothing to move the credit to (dividing by the valid steps' sum was 0/0)."""
    assert step_advantages([1.0], [[0.0, 0.0]], ProASConfig(rescale=True, gate="hard")) == [[0.0, 0.0]]


def test_the_distilled_window_forgets_an_iteration_after_w_more():
    """W = 2: a success two iterations back leaves the counts; the validity is then (0 + a) / (2 + a + b)."""
    g = ReferenceGraph(ProASConfig(graph_source="distilled", window=2, n_min=1))
    e = ("s", "go east")
    for success in (True, False, False):
        g.add_iteration([([e], success)])
    assert g.counts(e) == (0, 2)
    c = g.cfg
    assert g.validity(e) == pytest.approx(c.prior_a / (2 + c.prior_a + c.prior_b))


def test_proas_defaults_and_knob_bounds_are_pinned():
    c = ProASConfig()
    assert (c.theta_v, c.lam) == (0.5, 0.5)
    with pytest.raises(ValueError):
        ProASConfig(rho=0.0)
    assert deviations([0.5, 0.4, 0.6], 0.5) == 1  # below θ_v is a deviation, θ_v itself is not


# ------------------------------------------------------------------------------------------------------------
# step_advantages refuses mismatched inputs (trainers/proas.py:176-177) (a coverage review, stop 54)
# ------------------------------------------------------------------------------------------------------------

def test_step_advantages_refuses_a_validity_list_per_episode_that_does_not_match():
    """zip() would silently drop the episodes without validities (their steps then trained with no credit
    at all, or misaligned with their prompts in the multi-turn trainer)."""
    from trainers.proas import ProASConfig, step_advantages

    with pytest.raises(ValueError, match=r"^got 3 advantages for 2 episodes$"):
        step_advantages([1.0, -1.0, 0.5], [[1.0], [0.0, 1.0]], ProASConfig())
