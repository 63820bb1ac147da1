"""Edges no test pinned in trainers/proas.py, trainers/losses.py and evaluators/calibration.py (a mutation
review: each change named in a test's docstring passed every other test). Hand-computed from ALGORITHMS.md
§2 (ProAS), §3 (Proximal KL) and §5 (calibration)."""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
import torch

from evaluators.calibration import ConfidenceRecord, auroc, confidence_question, ece, selective
from trainers.losses import POLICY_LOSSES, LossInputs, ProxKLSettings, future_kl, proximal_kl_stats
from trainers.proas import ProASConfig, ReferenceGraph, deviations, step_advantages

# ---------- ProAS (§2) ----------


def test_a_zero_advantage_episode_gets_zero_credit_at_every_step():
    """A_i = 0 (a group whose rewards are all equal): every step's Â is 0, whatever the validities
    (mutants: `[0.0] / T`, a TypeError, and `[1.0] * T`)."""
    assert step_advantages([0.0], [[1.0, 0.0, 0.3]], ProASConfig()) == [[0.0, 0.0, 0.0]]
    assert step_advantages([0.0, -1.0], [[0.0], [1.0]], ProASConfig(lam=1.0)) == [[0.0], [-1.0]]


def test_rescaling_moves_the_credit_onto_a_valid_share_of_at_most_one():
    """Rescale whenever Σg > 0, also when Σg ≤ 1 (mutant: `sum(g) > 1`). Hard gate, one valid step of 3:
    g = (0, 1, 0) → g·T/Σg = (0, 3, 0); soft gate g = (0.2, 0.3), Σg = 0.5 → (0.8, 1.2)."""
    assert step_advantages([0.5], [[0.0, 1.0, 0.0]], ProASConfig(rescale=True, gate="hard")) == [[0.0, 1.5, 0.0]]
    (adv,) = step_advantages([1.0], [[0.2, 0.3]], ProASConfig(rescale=True, gate="soft"))
    assert adv == pytest.approx([0.8, 1.2])


def test_rho_one_is_allowed_and_shares_the_moved_penalty_equally():
    """ρ ∈ (0, 1] (mutant: `rho < 1.0` refused ρ = 1). K = 2, λ = 1, T = 4, deviations at t = 0, 2:
    q = (½, 0, ½, 0), Â = A·T·q = (−2, 0, −2, 0)."""
    cfg = ProASConfig(rho=1.0, lam=1.0, k_dev=2)
    assert step_advantages([-1.0], [[0.0, 1.0, 0.0, 1.0]], cfg) == [[-2.0, 0.0, -2.0, 0.0]]


def test_config_refuses_zero_priors_and_zero_counts():
    """Priors a, b > 0 (mutant: ≥ 0) and K, W, n_min ≥ 1 (mutant: ≥ 0)."""
    for name in ("prior_a", "prior_b"):
        with pytest.raises(ValueError, match=f"{name} must be > 0"):
            ProASConfig(**{name: 0.0})
    for name in ("k_dev", "window", "n_min"):
        with pytest.raises(ValueError, match=f"{name} must be >= 1"):
            ProASConfig(**{name: 0})


def test_corruption_flips_a_valid_edge_to_invalid_and_the_default_seed_is_zero():
    """v → 1 − v on a corrupted edge: a walkthrough edge (v = 1) reads 0, v_off = 0.25 reads 0.75 (mutants:
    `1 + v`, and `1` whatever v; the test before flipped v = 0 only). corrupt = 1 corrupts every edge. The
    graph's default seed is 0 (mutant: 1), which picks the corrupted share."""
    g = ReferenceGraph(ProASConfig(graph_source="rules", corrupt=1.0, v_off=0.25))
    g.observe_state("A", ["go east", "look"], ["go east"])
    assert g.validity(("A", "go east")) == 0.0
    assert g.validity(("A", "look")) == pytest.approx(0.75)
    assert g.validity(("A", "dance")) == 1.0
    cfg = ProASConfig(graph_source="rules", corrupt=0.5)
    edges = [(f"s{i}", "look") for i in range(64)]
    default, zero, one = ReferenceGraph(cfg), ReferenceGraph(cfg, seed=0), ReferenceGraph(cfg, seed=1)
    assert [default.corrupted(e) for e in edges] == [zero.corrupted(e) for e in edges]
    assert [zero.corrupted(e) for e in edges] != [one.corrupted(e) for e in edges]


def test_graph_stats_count_walkthrough_edges_and_a_disagreement():
    """Source `both`: the walkthrough edge (A, go east) (v = 1, admissible), a distilled edge (A, look) with
    n⁺ = 0, n⁻ = 2 ≥ n_min: v = (0 + 1)/(2 + 2) = 0.25 < θ_v though admissible (disagrees), and (A, dance),
    inadmissible, v = 0 (agrees): 3 edges, agreement 2/3 (mutants: walkthrough edges left out for rules/both,
    counters started at 1, agree·judged, and v ≤ θ_v as the verdict)."""
    g = ReferenceGraph(ProASConfig(graph_source="both", n_min=2))
    g.observe_state("A", ["go east", "look"], ["go east"])
    g.add_iteration([([("A", "look"), ("A", "dance")], False), ([("A", "look")], False)])
    assert g.validity(("A", "look")) == pytest.approx(0.25)
    s = g.stats()
    assert s["graph_edges"] == 3.0 and s["graph_states"] == 1.0
    assert s["graph_rule_agreement"] == pytest.approx(2 / 3)
    d = ReferenceGraph(ProASConfig(graph_source="distilled"))  # the walkthrough is the rules' only
    d.observe_state("A", ["go east"], ["go east"])
    assert d.stats()["graph_edges"] == 0.0


def test_deviations_count_the_steps_below_theta_v():
    """Mutant: `v > θ_v`, which gave the same count on (0.5, 0.4, 0.6)."""
    assert deviations([0.0, 0.2, 1.0], 0.5) == 2


# ---------- policy losses and Proximal KL (§1, §3) ----------


def test_cispo_scales_by_the_advantage_and_defaults_to_eps_high_point_two():
    """−sg(min(r, 1+ε_high))·Â·log π_θ with Â ≠ 1 (mutant: `/ x.adv`; the tests before used Â = 1). r = 2 is
    capped at 1.2 with the default ε_high = 0.2 (mutant: 1.2)."""
    logp = torch.log(torch.tensor([[0.5, 0.5]])).requires_grad_(True)
    behav = torch.log(torch.tensor([[0.25, 0.25]]))
    x = LossInputs(logp, behav, behav, torch.tensor([[2.0, -0.5]]), torch.ones(1, 2))
    out = POLICY_LOSSES.get("cispo")(x)
    ln = math.log(0.5)
    assert torch.allclose(out, torch.tensor([[-1.2 * 2.0 * ln, -1.2 * -0.5 * ln]]), atol=1e-6)
    out.sum().backward()
    assert torch.allclose(logp.grad, torch.tensor([[-2.4, 0.6]]), atol=1e-6)


def test_clip_defaults_to_eps_point_two_on_both_sides():
    """−min(r·A, clip(r, 0.8, 1.2)·A): r = 2, A = 1 → −1.2; r = 0.5, A = −1 → −min(−0.5, −0.8) = 0.8
    (mutants: ε_high or ε_low 1.2 as the function's default)."""
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    behav = torch.log(torch.tensor([[0.25, 0.5]]))
    x = LossInputs(logp, behav, behav, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2))
    assert torch.allclose(POLICY_LOSSES.get("clip")(x), torch.tensor([[-1.2, 0.8]]), atol=1e-6)


def test_future_kl_with_horizon_one_is_the_token_itself():
    """H = 1: F_t = m_t·δ_t (mutant: `horizon <= 1` read H = 1 as the whole tail)."""
    delta = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    assert torch.allclose(future_kl(delta, mask, 1, 1.0), torch.tensor([[1.0, 0.0, 3.0]]))


def test_proximal_kl_stats_of_an_all_masked_batch_are_zero_not_nan():
    """No trainable token: n is clamped to 1, so the means are 0/1 = 0 (mutant: clamp at 0 gave NaN), and the
    max |δ| is 0 (mutant: 1)."""
    x = LossInputs(torch.tensor([[0.3, -0.2]]), torch.zeros(1, 2), torch.tensor([[0.0, 5.0]]), torch.ones(1, 2),
                   torch.zeros(1, 2))
    s = proximal_kl_stats(x)
    assert s == {"prox_delta_mean": 0.0, "prox_delta_max": 0.0, "prox_ess": 0.0, "prox_masked_frac": 0.0,
                 "prox_future_kl": 0.0}


def test_proximal_kl_ess_with_unequal_weights_and_the_masked_fraction_by_hand():
    """π_prox/μ = (1, 0.5): w = (1, 0.5), ESS = (Σw)²/(n·Σw²) = 2.25/(2·1.25) = 0.9 (mutants: n/Σw² and a cube,
    equal to the square at Σw = 1 as in the test before). Ratios (1, 1, 4) with C_mask = 3: masked fraction
    1/3 (mutant: ratio < C_mask gave 2/3); a ratio of exactly C_mask is not masked (mutant: ≥)."""
    prox = torch.log(torch.tensor([[0.5, 0.25]]))
    behav = torch.log(torch.tensor([[0.5, 0.5]]))
    x = LossInputs(prox.clone(), behav, prox, torch.ones(1, 2), torch.ones(1, 2))
    assert proximal_kl_stats(x, ProxKLSettings(c_is=2.0))["prox_ess"] == pytest.approx(0.9, rel=1e-5)
    prox = torch.log(torch.tensor([[0.5, 0.5, 0.8]]))
    behav = torch.log(torch.tensor([[0.5, 0.5, 0.2]]))
    x = LossInputs(prox.clone(), behav, prox, torch.ones(1, 3), torch.ones(1, 3))
    assert proximal_kl_stats(x, ProxKLSettings(c_mask=3.0))["prox_masked_frac"] == pytest.approx(1 / 3)
    prox, behav = torch.log(torch.tensor([[0.75]])), torch.log(torch.tensor([[0.25]]))
    assert torch.exp(prox - behav).item() == 3.0
    x = LossInputs(prox.clone(), behav, prox, torch.ones(1, 1), torch.ones(1, 1))
    assert proximal_kl_stats(x, ProxKLSettings(c_mask=3.0))["prox_masked_frac"] == 0.0


def test_ewma_decay_zero_is_allowed():
    """decay ∈ [0, 1): 0 makes π_prox the latest weights (mutant: `0 < decay` refused it)."""
    assert ProxKLSettings(mode="ewma", ewma_decay=0.0).ewma_decay == 0.0


# ---------- calibration (§5) ----------


def test_confidence_question_reads_as_before_by_default_and_notes_an_unlisted_command():
    """Defaults listed=True, earlier_unlisted=0 add no note (mutants: False, 1); listed=False notes it
    (mutant: the `not` deleted)."""
    assert confidence_question("o", "a") == "o\ndo: a\nsuccess 0-9?"
    assert confidence_question("o", "a", listed=False) == "o\ndo: a (not a listed choice)\nsuccess 0-9?"
    assert confidence_question("o", "a", 1, 5, listed=False, earlier_unlisted=2) == \
        "o\ndo: a (step 1 of 5; not a listed choice; 2 earlier not listed)\nsuccess 0-9?"


def test_ece_uses_ten_equal_width_bins():
    """0.1 and 0.9 fall in bins 1 and 9: ECE = ½·0.1 + ½·0.1 = 0.1 (mutant: p/bins put both in bin 0, ECE 0).
    0.0 (y = 1) and 0.095 (y = 0) share bin 0 of 10: |0.5 − 0.0475| = 0.4525 (mutant: 11 bins split them,
    ½·1 + ½·0.095 = 0.5475)."""
    assert ece([0.1, 0.9], [0, 1]) == pytest.approx(0.1)
    assert ece([0.0, 0.095], [1, 0]) == pytest.approx(0.4525)


def test_success_among_executed_episodes_is_a_share():
    """Two executed episodes, one won: 1/2 (mutant: sum·count gave 2; the test before had one executed)."""
    recs = [ConfidenceRecord(0, 0, 0.9, True), ConfidenceRecord(1, 0, 0.8, False), ConfidenceRecord(2, 0, 0.1, True)]
    sel = selective(recs, 0.5)
    assert sel["success_executed"] == 0.5 and sel["coverage"] == pytest.approx(2 / 3)


def test_auroc_is_nan_for_an_infinite_score_and_for_one_class_without_a_warning():
    """Every score must be finite (mutant: `.any()`, which ranked inf as the top score: 1.0); a class absent
    returns NaN before dividing (mutant: `and` for `or` got NaN from 0/0, with a RuntimeWarning)."""
    assert math.isnan(auroc([float("inf"), 0.2], [True, False]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(auroc([0.1, 0.2], [True, True]))
        assert math.isnan(auroc([0.1, 0.2], [False, False]))


def test_a_confidence_record_is_frozen():
    """Records are values (mutant: frozen=False)."""
    r = ConfidenceRecord(0, 0, 0.5, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.confidence = 0.9  # type: ignore[misc]
    assert hash(r) == hash(ConfidenceRecord(0, 0, 0.5, True))
