"""Edges of `trainers/rollout.py` and `trainers/multiturn.py` that a mutation sweep (stop 48) found unpinned: each
change named in a test's docstring passed every test that runs the changed line (the whole suite, traced per test)."""

from __future__ import annotations

import pytest
import torch

from trainers.multiturn import MultiTurnConfig
from trainers.rollout import position_ids, token_logprobs


def test_positions_skip_left_padding_and_start_at_zero():
    """Hand-computed: a row padded by two starts at position 0 on its first real token, as the unpadded row does
    (`clamp(min=1)` started both at 1 and gave the first two tokens of the full row the same position)."""
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


@pytest.mark.parametrize("shape", [(0, 3, 5), (2, 0, 5)])
def test_no_rows_or_no_completion_tokens_give_empty_log_probs_in_the_graph(shape):
    """No sequences, or sequences with no completion token: empty (N, C) log-probs and entropies, and a backward
    pass through them works. No test gave either: under `and` each took the chunked path, where concatenating no
    chunks raises."""
    logits = torch.zeros(shape, requires_grad=True)
    lp, ent = token_logprobs(logits, torch.zeros(shape[:2], dtype=torch.long), with_entropy=True)
    assert lp.shape == ent.shape == shape[:2]
    lp.sum().backward()
    assert logits.grad is not None and logits.grad.shape == shape


def test_a_readout_buffer_of_one_is_accepted_and_zero_refused():
    """The bound is >= 1 (`>` refused a buffer of one, the smallest that works)."""
    assert MultiTurnConfig(readout_buffer=1).readout_buffer == 1
    with pytest.raises(ValueError, match=r"readout_buffer must be >= 1 \(got 0\)"):
        MultiTurnConfig(readout_buffer=0)


def _episode(success: bool, reason: str = "won", confidences=()):
    from evaluators.envs import EpisodeResult
    from trainers.multiturn import Episode, Step

    steps = [Step("p", [1], "go", "s", True, confidence=c) for c in confidences]
    return Episode("g", steps, EpisodeResult(success, float(success), len(steps), 0, reason))


def test_a_group_with_two_episodes_left_after_a_crash_keeps_their_advantages():
    """Groups of 3: in the first one episode crashed and the two left are compared with each other (won 1, lost 0:
    opposite advantages); in the second two crashed, and the one left gets 0 like the crashed ones (a threshold of 3
    zeroed the first group too)."""
    from trainers.grpo import GRPOConfig
    from trainers.multiturn import group_advantages

    crash = "env error: OSError: gone"
    eps = [_episode(True), _episode(False, "lost"), _episode(False, crash),
           _episode(True), _episode(False, crash), _episode(False, crash)]
    assert [e.result.crashed for e in eps] == [False, False, True, False, True, True]
    adv = group_advantages(eps, torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0]),
                           MultiTurnConfig(base=GRPOConfig(group_size=3)))
    assert adv[0] > 0 and adv[1] == pytest.approx(-adv[0]) and adv[2:] == [0.0, 0.0, 0.0, 0.0]


def test_a_step_without_a_stated_confidence_reads_one_half():
    """Calibration records take a step's stated confidence, and 0.5 where it stated none (`is` for `is not`
    swapped them)."""
    from trainers.multiturn import confidence_records

    recs = confidence_records([_episode(True, confidences=(0.9, None)), _episode(False, "lost", confidences=(0.2,))])
    assert [(r.episode, r.step, r.confidence, r.success) for r in recs] == [
        (0, 0, 0.9, True), (0, 1, 0.5, True), (1, 0, 0.2, False)]
