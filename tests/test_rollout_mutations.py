"""Edges of `trainers/rollout.py` and `trainers/multiturn.py` that a mutation sweep (stop 48) found unpinned: each
change named in a test's docstring passed every test that runs the changed line (the whole suite, traced per test).
The sweep's two tests on played episodes are in tests/test_multiturn.py, beside its episode helper."""

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

