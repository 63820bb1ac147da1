"""Rollout backends: one interface; the vLLM path's assembly of token ids into `Rollouts` is checked
on CPU against transformers `generate`, and vLLM itself runs only where it and a GPU exist."""

from __future__ import annotations

import os

import importlib.util

import pytest
import torch

from trainers.backends import ROLLOUT_BACKENDS, BackendUnavailable, rollouts_from_ids
from trainers.grpo import GRPOConfig
from trainers.prompts import format_prompt
from trainers.tiny import TinySpec, build_model, build_tokenizer

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    spec = TinySpec(hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, vocab_size=270)
    tok = build_tokenizer([f"add {a} {b}\nAnswer: {a + b}" for a in range(5) for b in range(5)] * 4, spec.vocab_size)
    return build_model(len(tok), spec, tok), tok


def test_rollouts_from_ids_matches_hf_generate(tiny):
    model, tok = tiny
    prompts = [format_prompt("add 1 2", tok), format_prompt("add 3 4 and more words", tok)]
    torch.manual_seed(3)
    hf = ROLLOUT_BACKENDS.get("hf")(model, tok).generate(prompts, 3, 1.0, 4)
    # what a token-level sampler (vLLM) returns: prompt ids, and completions cut after <eos>
    prompt_ids = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
    comps = []
    for row, m in zip(hf.completion_ids, hf.completion_mask):
        comps.append(row[: int(m.sum())].tolist())
    rebuilt = rollouts_from_ids(prompt_ids, comps, tok, 3)
    C = rebuilt.completion_ids.shape[1]
    assert rebuilt.prompt_len == hf.prompt_len
    assert torch.equal(rebuilt.completion_mask, hf.completion_mask[:, :C])
    assert torch.equal(rebuilt.truncated, hf.truncated)
    assert torch.equal(rebuilt.attention_mask, hf.attention_mask[:, : hf.prompt_len + C])
    on = rebuilt.attention_mask.bool()
    assert torch.equal(rebuilt.input_ids[on], hf.input_ids[:, : hf.prompt_len + C][on])
    assert rebuilt.texts == hf.texts


def test_unknown_backend_is_a_config_error():
    with pytest.raises(ValueError, match="rollout_backend must be one of"):
        GRPOConfig(rollout_backend="sglang")


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_vllm_backend_says_how_to_install_it(tiny):
    model, tok = tiny
    with pytest.raises(BackendUnavailable, match=r"pip install 'sro\[vllm\]'"):
        ROLLOUT_BACKENDS.get("vllm")(model, tok)


@pytest.mark.gpu
@pytest.mark.skipif(not (HAS_VLLM and torch.cuda.is_available()), reason="needs vLLM and a CUDA GPU")
def test_vllm_backend_samples_and_syncs(tiny):
    model, tok = tiny
    model = model.cuda().to(torch.bfloat16)
    be = ROLLOUT_BACKENDS.get("vllm")(model, tok)
    ro = be.generate([format_prompt("add 1 2", tok)], 4, 1.0, 4)
    assert ro.input_ids.shape[0] == 4 and ro.completion_mask.sum() > 0
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    be.sync(model)  # a zeroed policy is uniform: completions still come back, shaped the same
    assert be.generate([format_prompt("add 1 2", tok)], 2, 1.0, 4).input_ids.shape[0] == 2


def test_the_vllm_engine_starts_with_a_single_process_launch_environment(tiny, monkeypatch, tmp_path):
    """vLLM's external_launcher executor reads torchrun's RANK, LOCAL_RANK and env://'s MASTER_ADDR / PORT:
    a plain `sro search` set none of them, and `vllm.LLM` failed with KeyError: 'RANK' (a review, stop 38; the
    GPU test above never runs without a GPU). A fake vllm records the environment the engine starts in; a
    launcher's own values are kept."""
    import sys
    import types

    import trainers.backends as backends

    seen = {}

    class LLM:
        def __init__(self, **kw):
            seen.update({k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                         "MASTER_PORT", "VLLM_ENABLE_V1_MULTIPROCESSING")})
            seen["kw"] = kw

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    monkeypatch.setattr(backends, "unavailable", lambda name: None)
    monkeypatch.setattr(backends, "ENGINES", {})
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                             "MASTER_PORT", "VLLM_ENABLE_V1_MULTIPROCESSING")}
    monkeypatch.setattr(os, "environ", {**env, "MASTER_PORT": "29555"})  # a copy (as a launcher would have set
    # the port), so that what the backend sets leaves with the test
    model, tok = tiny
    ROLLOUT_BACKENDS.get("vllm")(model, tok)
    assert seen["kw"]["distributed_executor_backend"] == "external_launcher"
    assert {k: seen[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                 "VLLM_ENABLE_V1_MULTIPROCESSING")} == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    del os.environ["MASTER_PORT"]
    assert int(backends.launcher_env()["MASTER_PORT"]) > 0  # a free port where none was set


def test_every_end_of_sequence_token_ends_a_completion(tiny):
    """A chat model's generation config lists more than one end of sequence (Qwen2.5-Instruct:
    `<|im_end|>` and `<|endoftext|>`): each ends a completion, in `generate` and in the vLLM path's
    assembly. With the tokenizer's alone, a completion ending at the other ran on to `max_new_tokens`
    and was trained as truncated."""
    from trainers.rollout import eos_ids, generate

    model, tok = tiny
    other = tok.convert_tokens_to_ids("7")
    model.generation_config.eos_token_id = [tok.eos_token_id, other]
    assert eos_ids(model, tok) == [tok.eos_token_id, other]
    ro = rollouts_from_ids([[5, 6]], [[9, other, 9], [9, 9, 9]], tok, 2, eos_ids=eos_ids(model, tok))
    assert ro.completion_mask.tolist() == [[1, 1, 0], [1, 1, 1]] and ro.truncated.tolist() == [False, True]
    asked: dict = {}

    def stops_at_seven(input_ids, eos_token_id=None, **kw):  # what HF returns when it stops at "7"
        asked["eos"] = eos_token_id
        tail = torch.tensor([[9, other, tok.pad_token_id]]).repeat(input_ids.shape[0], 1)
        return torch.cat([input_ids, tail], dim=1)

    real, model.generate = model.generate, stops_at_seven
    try:
        ro = generate(model, tok, [format_prompt("add 1 2", tok)], 1, max_new_tokens=5, greedy=True)
    finally:
        model.generate = real
        model.generation_config.eos_token_id = tok.eos_token_id
    assert asked["eos"] == [tok.eos_token_id, other]
    assert ro.completion_mask.tolist() == [[1, 1, 0]] and ro.truncated.tolist() == [False]


def test_generate_samples_the_distribution_the_trainer_scores_whatever_the_models_generation_config(tiny):
    """A shipped generation config's penalties and filters (Qwen2.5-Instruct's has a repetition penalty)
    would reshape what `generate` samples from; the trainers score softmax(logits / T), so each sampled
    token's log-prob must be that (until stop 25 a 1.1 penalty made them differ by 0.11 on average)."""
    from copy import deepcopy

    from trainers.rollout import completion_logprobs, generate

    model, tok = tiny
    saved = deepcopy(model.generation_config)
    gc = model.generation_config
    gc.repetition_penalty, gc.no_repeat_ngram_size, gc.typical_p, gc.min_p, gc.min_new_tokens = 1.3, 1, 0.5, 0.3, 3
    real, scores = model.generate, []

    def keep_scores(**kw):  # the processed logits generate sampled each token from
        out = real(**kw, output_scores=True, return_dict_in_generate=True)
        scores.extend(out.scores)
        return out.sequences

    model.generate = keep_scores
    try:
        torch.manual_seed(0)
        ro = generate(model, tok, [format_prompt("add 1 2", tok), format_prompt("add 3 4", tok)], 4,
                      temperature=0.7, max_new_tokens=6)
    finally:
        model.generate, model.generation_config = real, saved
    sampled = torch.stack([torch.log_softmax(s.float(), -1) for s in scores], 1)  # (N, C, V)
    sampled = sampled.gather(-1, ro.completion_ids.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        scored, _ = completion_logprobs(model, ro.input_ids, ro.attention_mask, ro.prompt_len, temperature=0.7)
    on = ro.completion_mask.bool()
    assert torch.allclose(sampled[on], scored[on], atol=1e-4), (sampled[on] - scored[on]).abs().max()


def test_every_trial_of_a_process_shares_one_vllm_engine(tiny, monkeypatch):
    """vLLM frees no memory when an in-process engine is deleted (vllm-project/vllm#21073): a backend built per
    trial started one more engine each time, and the second or third trial ran out of memory (a review, stop 53).
    A fake vllm counts the engines; the second trial's backend loads its own weights into the first's."""
    import sys
    import types

    import trainers.backends as backends

    started, loaded = [], []

    class LLM:
        def __init__(self, **kw):
            started.append(kw)
            runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=lambda w: loaded.append(dict(w))))
            self.llm_engine = types.SimpleNamespace(
                model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner)))

        def reset_prefix_cache(self):
            pass

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=LLM))
    monkeypatch.setattr(backends, "unavailable", lambda name: None)
    monkeypatch.setattr(backends, "ENGINES", {})
    monkeypatch.setattr(backends, "launcher_env", lambda: {})
    import copy

    model, tok = copy.deepcopy(tiny[0]), tiny[1]  # its weights change below
    first = ROLLOUT_BACKENDS.get("vllm")(model, tok)
    assert len(started) == 1 and loaded == []  # started from the saved policy itself
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # the next trial's policy
    second = ROLLOUT_BACKENDS.get("vllm")(model, tok)
    assert len(started) == 1 and second.llm is first.llm and len(loaded) == 1
    name, p = next(iter(model.named_parameters()))
    assert torch.equal(loaded[0][name], p.data)
    ROLLOUT_BACKENDS.get("vllm")(model, tok, gpu_memory_utilization=0.5)  # another share: an engine of its own
    assert len(started) == 2
