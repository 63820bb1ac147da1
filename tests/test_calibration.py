"""Calibration metrics of step confidence (ALGORITHMS.md §5) on hand-made pairs."""

from __future__ import annotations

import math

import pytest

from evaluators.calibration import ConfidenceRecord, auroc, brier, calibration_report, confidence_question, ece, selective


def test_auroc_by_hand():
    assert auroc([0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]) == 1.0
    assert auroc([0.1, 0.2, 0.8, 0.9], [1, 1, 0, 0]) == 0.0
    # pairs (pos, neg): (0.8,0.3) win, (0.8,0.9) loss, (0.4,0.3) win, (0.4,0.9) loss → 2/4
    assert auroc([0.8, 0.4, 0.3, 0.9], [1, 1, 0, 0]) == 0.5
    # a tie counts one half: pos 0.5 vs neg 0.5 → ½, pos 0.7 vs neg 0.5 → 1 → 1.5/2
    assert auroc([0.5, 0.7, 0.5], [1, 1, 0]) == 0.75
    assert math.isnan(auroc([0.1, 0.2], [1, 1]))


def test_ece_by_hand():
    # bin [0.2,0.3): confs .2,.2 labels 0,1 → |0.5−0.2|=.3, weight 2/4; bin [0.9,1]: confs 1.0,.9 labels 1,1 → .05
    got = ece([0.2, 0.2, 1.0, 0.9], [0, 1, 1, 1])
    assert got == pytest.approx(0.5 * 0.3 + 0.5 * 0.05)
    assert ece([0.0, 1.0], [0, 1]) == 0.0
    # a confidence that is not a number fell in no bin yet counted in N: 0.25 instead of NaN (stop 37)
    assert math.isnan(ece([float("nan"), 0.5], [1, 1])) and math.isnan(auroc([float("nan"), 0.5], [1, 0]))


def test_brier_by_hand():
    assert brier([0.2, 0.9], [0, 1]) == pytest.approx((0.04 + 0.01) / 2)


def test_report_and_selective_execution():
    recs = [ConfidenceRecord(0, 0, 0.9, True), ConfidenceRecord(0, 1, 0.8, True),
            ConfidenceRecord(1, 0, 0.6, False), ConfidenceRecord(1, 1, 0.3, False),
            ConfidenceRecord(2, 0, 0.2, False)]
    rep = calibration_report(recs, tau=0.5)
    assert rep["first_step"]["auroc"] == 1.0 and rep["first_step"]["n"] == 3
    assert rep["pooled"]["n"] == 5
    assert rep["per_step"][1]["auroc"] == 1.0
    late = [ConfidenceRecord(e, 11, c, y) for e, c, y in ((3, 0.9, True), (4, 0.1, False))]  # a 12-step episode
    assert calibration_report(recs + late)["per_step"][11]["n"] == 2  # every step reached (was cut at 8)
    assert 11 not in calibration_report(recs + late, max_step_index=8)["per_step"]
    sel = selective(recs, 0.5)  # episode 1 drops below τ at step 1, episode 2 at step 0: handed off
    assert sel["coverage"] == pytest.approx(1 / 3)
    assert sel["success_executed"] == 1.0 and sel["success_all"] == pytest.approx(1 / 3)
    # an episode the environment failed at reset has no step record: not executed, and a failure of all
    # (review, stop 30: without the outcomes a won episode beside one crashed at reset read success_all 1.0)
    sel = selective(recs[:2], 0.5, outcomes={0: True, 1: False})
    assert sel["coverage"] == 0.5 and sel["success_executed"] == 1.0 and sel["success_all"] == 0.5
    assert calibration_report(recs, outcomes={0: True, 1: False, 2: False, 3: False})["selective"]["coverage"] == 0.25
    empty = selective([], 0.5)
    assert math.isnan(empty["coverage"]) and math.isnan(empty["success_all"])  # no episodes: not 0.0


def test_a_stated_confidence_is_one_digit_on_the_first_line():
    """Until stop 25 the first digit anywhere counted: "0.9" read as 0.05 and "10" as 0.15."""
    from evaluators.calibration import parse_confidence

    assert [parse_confidence(t) for t in ("7", " 3 \nmore", "9.", "0")] == [0.75, 0.35, 0.95, 0.05]
    assert [parse_confidence(t) for t in ("0.9", "10", "95%", "-3", "confidence: 8/10", "nine", "", "go 2")] == [None] * 8


def test_a_confidence_of_one_and_a_threshold_met_exactly():
    """A test audit's mutations (stop 33): a confidence of exactly 1.0 left out of every ECE bin, and selective
    execution at c > τ instead of c ≥ τ, passed every test."""
    assert ece([1.0], [0]) == pytest.approx(1.0)
    assert ece([1.0, 0.95], [0, 1]) == pytest.approx(0.475)  # one bin (0.9, 1]: |0.975 − 0.5|
    assert selective([ConfidenceRecord(0, 0, 0.5, True)], 0.5)["coverage"] == 1.0


def test_per_step_blocks_stop_below_max_step_index_and_nan_confidences_give_nan_auroc():
    """(mutation testing, stop 38: `t <= max_step_index`, and no NaN guard in auroc, passed every test)"""
    import math

    recs = [ConfidenceRecord(e, t, 0.5 + 0.1 * t, e % 2 == 0) for e in range(4) for t in range(3)]
    assert sorted(calibration_report(recs, max_step_index=2)["per_step"]) == [0, 1]
    assert math.isnan(auroc([float("nan"), 0.2], [True, False]))
    assert "of None" not in confidence_question("o", "a", step=3) and "step 3 of 5" in confidence_question("o", "a", 3, 5)
