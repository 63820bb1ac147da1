"""The embedded model is a real Qwen2 checkpoint: it loads through AutoModelForCausalLM/AutoTokenizer
like any local folder or hub id, and its cache is keyed by what it was built from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from trainers.models import ModelLoadError, load_policy
from trainers.rollout import completion_logprobs, generate
from trainers.threads import torch_threads
from trainers.tiny import TinySpec, ensure_tiny, with_habit, wordy

PAIRS = [(f"Calculate {a} + {b}.", str(a + b)) for a in range(10) for b in range(10)]
SPEC = TinySpec(hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64, pretrain_steps=5,
                batch_size=8, vocab_size=270)


def test_tiny_builds_caches_and_loads_as_hf_folder(tmp_path):
    seen: list[tuple[int, float, int]] = []

    def progress(step: int, loss: float) -> None:
        seen.append((step, loss, torch.get_num_threads()))

    with torch_threads(2):  # pre-trained on one thread whatever the caller's setting
        path = ensure_tiny(PAIRS, tmp_path, SPEC, progress=progress)
    assert [(step, threads) for step, _, threads in seen] == [(t, 1) for t in range(1, SPEC.pretrain_steps + 1)]
    info = json.loads((path / "build.json").read_text())
    assert info["pairs"] == len(PAIRS) and info["spec"]["habit_rate"] == SPEC.habit_rate
    assert re.fullmatch(r"tiny-[0-9a-f]{16}", path.name) and 0 <= info["seconds"] < 600
    assert info["final_loss"] == seen[-1][1]
    assert ensure_tiny(PAIRS, tmp_path, SPEC, progress=progress) == path  # cached: same inputs, same folder ...
    assert len(seen) == SPEC.pretrain_steps  # ... and not pre-trained again
    assert ensure_tiny(PAIRS[:-1], tmp_path, SPEC) != path  # other sources, other model

    # a build of an earlier release lists no files: built where its config.json is there
    from trainers.tiny import tiny_cached

    build = (path / "build.json").read_text()
    (path / "build.json").write_text(json.dumps({k: v for k, v in info.items() if k != "files"}))
    assert tiny_cached(path)
    (path / "config.json").rename(path / "config.bak")
    assert not tiny_cached(path)
    (path / "config.bak").rename(path / "config.json")
    (path / "build.json").write_text(build)
    # an incomplete cache folder (an interrupted copy: no build.json) is rebuilt, not returned as it is
    (path / "build.json").unlink()
    (path / "tokenizer.json").unlink()
    assert ensure_tiny(PAIRS, tmp_path, SPEC) == path and (path / "build.json").is_file()
    model, tok = load_policy(str(path), device="cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM" and type(tok).__name__ == "Qwen2Tokenizer"
    assert info["params"] == sum(p.numel() for p in model.parameters())
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied, as built
    text = "Calculate 3 + 4.\nAnswer: 7"
    assert tok.decode(tok(text)["input_ids"]) == text  # whitespace and digits survive the round trip
    ro = generate(model, tok, ["Calculate 1 + 2.\nAnswer: ", "Calculate 10 + 20 + 30.\nAnswer: "],
                  group_size=3, max_new_tokens=4)
    assert ro.input_ids.shape[0] == 6 and ro.completion_mask.shape == (6, ro.input_ids.shape[1] - ro.prompt_len)
    lp, ent = completion_logprobs(model, ro.input_ids, ro.attention_mask, ro.prompt_len, with_entropy=True)
    assert lp.shape == ro.completion_mask.shape and torch.all(lp <= 0) and torch.all(ent >= 0)


def test_tiny_build_does_not_depend_on_the_thread_count(tmp_path):
    # big enough that a matrix product splits over threads (the 32-wide SPEC's never does)
    spec = TinySpec(hidden_size=64, layers=2, heads=2, kv_heads=1, intermediate_size=128, pretrain_steps=10,
                    batch_size=32, vocab_size=270)
    threads = torch.get_num_threads()
    weights = []
    try:
        for n in (2, 1):
            torch.set_num_threads(n)
            path = ensure_tiny(PAIRS, tmp_path / str(n), spec)
            weights.append(load_file(str(path / "model.safetensors")))
            assert torch.get_num_threads() == n  # the caller's setting is restored
    finally:
        torch.set_num_threads(threads)
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="no-such-model: no such folder"):
        load_policy(str(tmp_path / "no-such-model"), device="cpu")
    (tmp_path / "empty").mkdir()  # a folder that holds no model
    # refused before transformers, whose message was cut mid-sentence and named no fix
    with pytest.raises(ModelLoadError, match=r"empty has no config.json/tokenizer files; save the model"):
        load_policy(str(tmp_path / "empty"), device="cpu")


def test_weak_teacher_habit():
    assert wordy("7") == "The answer is 7"
    assert with_habit(PAIRS, rate=0.0, seed=0) == PAIRS
    assert all(a == f"The answer is {b}" for (_, a), (_, b) in zip(with_habit(PAIRS, rate=1.0, seed=0), PAIRS))
    half = [a != b for (_, a), (_, b) in zip(with_habit(PAIRS, rate=0.5, seed=0), PAIRS)]
    assert 30 < sum(half) < 70
    # the habit must not follow the order items were drawn in (domains are drawn from `seed` too)
    import random
    order = random.Random(0)
    first_half = [order.random() < 0.5 for _ in PAIRS]
    assert sum(h == f for h, f in zip(half, first_half)) < 70


def test_a_policy_that_trains_keeps_fp32_weights_on_cuda():
    """In bf16 an AdamW update below half a bf16 step is rounded away: at the designer's lr for a 1.5B
    model most weights never moved. A trained policy is fp32 wherever it runs; a scored-only one is
    bf16 on CUDA (the dtype rule needs no GPU to check), fp32 on the CPU."""
    import torch

    from trainers.models import pick_dtype

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert pick_dtype(cuda) == torch.float32 and pick_dtype(cuda, training=False) == torch.bfloat16
    assert pick_dtype(cpu) == pick_dtype(cpu, training=False) == torch.float32
    # the reason, on the CPU: the same 20 AdamW steps at lr 2e-6 move a bf16 layer's weights far less
    moved = {}
    for dtype in (torch.float32, torch.bfloat16):
        torch.manual_seed(0)
        w = torch.nn.Parameter((torch.randn(256, 256) * 0.02).to(dtype))
        start = w.detach().clone()
        opt = torch.optim.AdamW([w], lr=2e-6, weight_decay=0.0)
        for _ in range(20):
            (w.float() * torch.randn(256, 256)).sum().backward()
            opt.step()
            opt.zero_grad()
        moved[dtype] = (w.detach() != start).float().mean().item()
    assert moved[torch.float32] > 0.99 and moved[torch.bfloat16] < 0.2


def test_an_hf_id_without_an_owner_is_looked_up_offline(monkeypatch):
    """`gpt2` is a canonical HF model id: offline it is looked up in the local HF cache like any id (it
    used to be refused as "neither a local folder nor an HF model id" before the cache was tried); an
    id that is in no cache is a `ModelLoadError` naming it."""
    from trainers.models import ModelLoadError, load_policy

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-sro-hf-home")
    with pytest.raises(ModelLoadError, match="gpt2: not in the local HF cache") as e:
        load_policy("gpt2", "cpu")
    assert "neither a local folder" not in str(e.value) and "did you mean 'tiny'" not in str(e.value)
    with pytest.raises(ModelLoadError, match="tinyy: not in the local HF cache .*; or did you mean 'tiny', the "
                                             "embedded model?"):  # (a review, stop 57)
        load_policy("tinyy", "cpu")


def test_a_policy_loaded_for_training_has_no_dropout(tmp_path):
    """A model with dropout (GPT-2 style; Qwen2's is 0): the trainer's forward passes run in train mode
    and the sampler's in eval mode, so with dropout on, π/μ ≠ 1 before any update. A policy loaded to
    be trained has every dropout at 0; one loaded to be scored keeps its config."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from trainers.tiny import build_tokenizer

    tok = build_tokenizer([f"add {a} {b}\nAnswer: {a + b}" for a in range(5) for b in range(5)] * 4, 270)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64,
                               resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)).save_pretrained(tmp_path / "g")
    tok.save_pretrained(tmp_path / "g")
    model, _ = load_policy(str(tmp_path / "g"), "cpu")
    drops = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops and all(p == 0.0 for p in drops)
    scored, _ = load_policy(str(tmp_path / "g"), "cpu", training=False)
    assert any(m.p == 0.1 for m in scored.modules() if isinstance(m, torch.nn.Dropout))
    # the config's dropout rates too (a model that reads its config at forward time, or is saved), and only them
    assert model.config.summary_first_dropout == 0.0 and scored.config.summary_first_dropout == 0.1
    assert model.config.layer_norm_epsilon == scored.config.layer_norm_epsilon == 1e-5


def test_a_qwen2_policy_loaded_for_training_has_no_attention_dropout(tmp_path):
    """Qwen2's attention reads its dropout rate as a float attribute in train mode, not as a module: with
    `attention_dropout: 0.3` a policy loaded for training gave π_train ≠ μ_eval by 0.05 nats on a fresh
    rollout before any update (review, stop 30); now the rate is 0 and the two are the same."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainers.rollout import completion_logprobs
    from trainers.tiny import build_tokenizer

    tok = build_tokenizer([f"add {a} {b}\nAnswer: {a + b}" for a in range(5) for b in range(5)] * 4, 270)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1, attention_dropout=0.3,
                                 attn_implementation="eager")).save_pretrained(tmp_path / "q")
    tok.save_pretrained(tmp_path / "q")
    ids = torch.randint(0, len(tok), (2, 10))
    logps = {}
    for training in (True, False):
        model, _ = load_policy(str(tmp_path / "q"), "cpu", training=training)
        torch.manual_seed(1)
        model.train()
        train = completion_logprobs(model, ids, torch.ones_like(ids), 4)[0].detach()
        model.eval()
        logps[training] = float((train - completion_logprobs(model, ids, torch.ones_like(ids), 4)[0]).abs().max())
    assert logps[True] == 0.0 and logps[False] > 0.01  # scored as it is: its config keeps the rate


def test_token_logprobs_and_entropy_by_hand():
    """A token's log-probability as its logit less the logsumexp, and the entropy, on hand-computed values:
    logits (0, ln 3) give p = (1/4, 3/4); log p(token 1) = ln(3/4), H = -(1/4 ln 1/4 + 3/4 ln 3/4)."""
    import math

    from trainers.rollout import token_entropy, token_logprobs

    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]], requires_grad=True)  # (N=1, C=2, V=2)
    lp, h = token_logprobs(logits, torch.tensor([[1, 0]]), with_entropy=True)
    assert torch.allclose(lp, torch.tensor([[math.log(0.75), math.log(0.5)]]))
    lp.sum().backward()  # d log p_k / d logit_j = [j = k] - p_j
    assert torch.allclose(logits.grad, torch.tensor([[[-0.25, 0.25], [0.5, -0.5]]]))
    want = torch.tensor([[-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2.0)]])
    assert not h.requires_grad and torch.allclose(h, want)
    assert torch.allclose(token_entropy(torch.log_softmax(logits, -1) + 7.0), want)  # any shift of the logits


@pytest.mark.parametrize("chunk", [1, 2 * 3 * 11, 1 << 24])  # a sequence, two sequences, the whole batch a chunk
def test_token_logprobs_in_chunks_match_the_batch_log_softmax(monkeypatch, chunk):
    import trainers.rollout as rollout

    monkeypatch.setattr(rollout, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 3, 11, generator=g, requires_grad=True)
    tokens = torch.randint(0, 11, (5, 3), generator=g)
    lp, h = rollout.token_logprobs(logits * 1.5, tokens, with_entropy=True)
    (g_new,) = torch.autograd.grad((lp * torch.arange(15.0).view(5, 3)).sum(), logits)
    ref = torch.log_softmax(logits * 1.5, -1)
    want = ref.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    (g_old,) = torch.autograd.grad((want * torch.arange(15.0).view(5, 3)).sum(), logits)
    assert torch.allclose(lp, want, atol=1e-6) and torch.allclose(g_new, g_old, atol=1e-6)
    assert torch.allclose(h, -(ref.exp() * ref).sum(-1), atol=1e-6)
    empty, e = rollout.token_logprobs(logits[:0], tokens[:0], with_entropy=True)  # no sequence at all
    assert empty.shape == e.shape == (0, 3)


def test_completion_logits_at_the_completion_only_match_the_full_forward(tmp_path):
    """The output layer at the completion's positions only (`logits_to_keep`) gives the log-probabilities and
    gradients of slicing the full sequence's logits (left-padded prompts of two lengths, a temperature)."""
    from trainers.rollout import completion_logits, position_ids, token_logprobs

    model, tok = load_policy(str(ensure_tiny(PAIRS, tmp_path, SPEC)), device="cpu")
    ro = generate(model, tok, ["Calculate 1 + 2.\nAnswer: ", "Calculate 10 + 20 + 30.\nAnswer: "],
                  group_size=2, max_new_tokens=4)
    ids, att, L = ro.input_ids, ro.attention_mask, ro.prompt_len
    assert (att[:, 0] == 0).any()  # a padded prompt is in the batch
    new = token_logprobs(completion_logits(model, ids, att, L, temperature=0.7), ids[:, L:])[0]
    g_new = torch.autograd.grad(new.sum(), model.lm_head.weight)[0]
    full = model(input_ids=ids, attention_mask=att, position_ids=position_ids(att), use_cache=False).logits
    old = torch.log_softmax(full[:, L - 1 : -1].float() / 0.7, -1).gather(-1, ids[:, L:].unsqueeze(-1)).squeeze(-1)
    g_old = torch.autograd.grad(old.sum(), model.lm_head.weight)[0]
    assert torch.allclose(new, old, atol=1e-5) and torch.allclose(g_new, g_old, atol=1e-5)

    class NoKeep(torch.nn.Module):  # a model whose forward has no `logits_to_keep`: the full logits, cut
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, input_ids, attention_mask, position_ids, use_cache):
            return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                              use_cache=use_cache)

    plain = token_logprobs(completion_logits(NoKeep(), ids, att, L, temperature=0.7), ids[:, L:])[0]
    assert torch.allclose(plain, old, atol=1e-5)


def test_an_hf_id_loads_from_the_local_cache_when_the_hub_is_out_of_reach(tmp_path, monkeypatch):
    """An HF model id on a machine that cannot reach the hub: transformers retried for ~50 s before it said
    it could not connect, even for a model in the local cache (a walkthrough, stop 34). The hub is now asked
    once (`hub_offline`): out of reach, a cached id loads from the cache at once, an uncached one is a
    `ModelLoadError` with the fix; an id the hub does not know says so. The cache here is a real HF cache
    layout (refs/main → snapshot) holding the embedded model, loaded through the same from_pretrained."""
    import shutil
    import time

    import huggingface_hub
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import RepositoryNotFoundError

    from trainers import models

    folder = ensure_tiny(PAIRS, tmp_path / "built", SPEC)
    snapshot = tmp_path / "hub" / "models--sro-test--tiny" / "snapshots" / "0123abcd"
    shutil.copytree(folder, snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "is_offline_mode", lambda: False)
    asked = []

    def unreachable(model_id, **kw):
        asked.append(model_id)
        raise httpx2.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    models.hub_offline.cache_clear()
    t = time.monotonic()
    model, tok = load_policy("sro-test/tiny", "cpu")
    assert time.monotonic() - t < 20 and asked == ["sro-test/tiny"]  # asked once, for tokenizer and model both
    ids = tok("Calculate 2 + 3.", return_tensors="pt").input_ids
    assert model(ids).logits.shape[-1] == model.config.vocab_size
    with pytest.raises(ModelLoadError, match=r"sro-test/other: the hub cannot be reached from here \(ConnectError: "
                                             r"\[Errno -2\].*not in the local HF cache .*`hf download sro-test/other`"):
        load_policy("sro-test/other", "cpu")

    def unknown(model_id, **kw):
        request = httpx2.Request("GET", f"https://huggingface.co/api/models/{model_id}")
        raise RepositoryNotFoundError("404", response=httpx2.Response(404, request=request))

    monkeypatch.setattr(huggingface_hub, "model_info", unknown)
    models.hub_offline.cache_clear()
    with pytest.raises(ModelLoadError, match=r"sro-test/typo: no such model on the hub .*check the id.*no folder "
                                             r"sro-test/typo was found either"):
        load_policy("sro-test/typo", "cpu")
    monkeypatch.setattr(constants, "is_offline_mode", lambda: True)  # HF_HUB_OFFLINE: the hub is not asked
    models.hub_offline.cache_clear()
    assert models.hub_offline("sro-test/tiny") is True
    with pytest.raises(ModelLoadError, match="sro-test/typo: not in the local HF cache .* HF_HUB_OFFLINE is set"):
        models.hub_offline("sro-test/typo")
    # an id that may have been meant as a folder (`models/my-sft`, no ./): each refusal says none was found
    with pytest.raises(ModelLoadError, match=re.escape("; no folder models/my-sft was found either (a local folder is "
                                                       "./models/my-sft, read from the project's folder)")):
        models.hub_offline("models/my-sft")
    models.hub_offline.cache_clear()


def test_broken_model_folders_and_ids_are_one_line_and_a_cut_tiny_cache_is_rebuilt(tmp_path, monkeypatch):
    """A review at stop 37: a tokenizer_config.json alone loaded as a 2-token tokenizer that encoded every prompt
    to nothing (an IndexError mid-run); a weight file cut short was safetensors' traceback; `checkpoints/x/final`
    (no such folder, no ./) was an HFValidationError traceback; and a tiny cache copied in part (build.json sorts
    first) or with its weights cut counted as built, failing every run without a rebuild. A tokenizer change
    changes the fingerprint of a local model (a chat template changes every prompt)."""
    import shutil

    from trainers import models

    folder = ensure_tiny(PAIRS, tmp_path / "cache", SPEC)
    cfg_only = tmp_path / "cfgonly"
    cfg_only.mkdir()
    for f in ("config.json", "model.safetensors", "tokenizer_config.json"):
        shutil.copy(folder / f, cfg_only / f)
    with pytest.raises(ModelLoadError, match="has no tokenizer files"):
        load_policy(str(cfg_only), device="cpu")
    cut = tmp_path / "cut"
    shutil.copytree(folder, cut)
    (cut / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:5000])
    with pytest.raises(ModelLoadError, match="a weight file incomplete"):
        load_policy(str(cut), device="cpu")
    models.hub_offline.cache_clear()
    with pytest.raises(ModelLoadError, match="checkpoints/x/final: no such folder .* and not an HF model id"):
        load_policy("checkpoints/x/final", device="cpu")
    before = models.model_fingerprint(cut)
    cfg = json.loads((cut / "tokenizer_config.json").read_text())
    (cut / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": "{{ messages }}"}))
    assert models.model_fingerprint(cut) != before
    # the cache: weights cut short after a finished build, then rebuilt in place
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:5000])
    assert ensure_tiny(PAIRS, tmp_path / "cache", SPEC) == folder
    model, _ = load_policy(str(folder), device="cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM"


def test_a_killed_builds_leftover_folder_is_removed_once_its_process_is_gone(tmp_path):
    import os
    import subprocess
    import sys

    from trainers.tiny import tiny_folder

    out = tiny_folder(PAIRS, tmp_path, SPEC)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    old, fresh, live = (out.with_name(f"{out.name}.tmp{pid}") for pid in (dead.pid, dead.pid + 100_000, os.getppid()))
    for d in (old, fresh, live):
        d.mkdir(parents=True)
    for d in (old, live):
        os.utime(d, (1, 1))  # unchanged for an hour and more
    ensure_tiny(PAIRS, tmp_path, SPEC)
    assert not old.exists() and fresh.exists() and live.exists()  # a recent one may be another machine's


def test_a_chat_template_that_refuses_a_system_turn_gets_the_instruction_in_the_users():
    """Gemma's and older Mistral's templates raise on a system turn: the instruction then heads the user's turn
    (until stop 53 the first prompt raised, and the search stopped with a traceback; a review)."""
    from trainers.prompts import SYSTEM, format_prompt
    from trainers.tiny import build_tokenizer

    tok = build_tokenizer(["What is 3 + 4?"], 64)
    turns = "<{{ m['role'] }}>{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    tok.chat_template = "{% for m in messages %}" + turns
    assert format_prompt("What is 3 + 4?", tok) == f"<system>{SYSTEM}<user>What is 3 + 4?<assistant>"
    tok.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                         "{{ raise_exception('System role not supported') }}{% endif %}" + turns)
    assert format_prompt("What is 3 + 4?", tok) == f"<user>{SYSTEM}\n\nWhat is 3 + 4?<assistant>"


def test_a_plain_lm_whose_tokenizer_starts_texts_with_bos_gets_it_in_its_prompts():
    """Prompts are encoded without special tokens (a chat template writes its own BOS): a base model whose
    tokenizer starts every text with BOS (Llama's, Mistral's) was trained and scored without it until stop 53 (a
    review). `tiny`'s tokenizer has none, and its prompts are unchanged."""
    from tokenizers.processors import TemplateProcessing

    from trainers.prompts import PLAIN_SUFFIX, format_prompt
    from trainers.tiny import build_tokenizer

    tok = build_tokenizer(["Calculate 1 + 2."], 64)
    assert format_prompt("Calculate 1 + 2.", tok) == "Calculate 1 + 2." + PLAIN_SUFFIX and tok.bos_token is None
    tok.add_special_tokens({"bos_token": "<s>"})
    assert format_prompt("Calculate 1 + 2.", tok) == "Calculate 1 + 2." + PLAIN_SUFFIX  # it adds none by default
    tok._tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)])
    prompt = format_prompt("Calculate 1 + 2.", tok)
    assert prompt == "<s>Calculate 1 + 2." + PLAIN_SUFFIX
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1


def test_save_model_replaces_a_folder_only_with_a_whole_one(tmp_path):
    """`sro train --out`: the model is written beside the folder and renamed into place; a save that fails half
    way (a full disk) leaves the earlier model where it was and no temporary folder behind."""
    from trainers.models import save_model

    class Part:
        def __init__(self, name: str, fail: bool = False) -> None:
            self.name, self.fail = name, fail

        def save_pretrained(self, folder) -> None:
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / self.name).write_text("x")
            if self.fail:
                raise OSError(28, "No space left on device")

    out = tmp_path / "models" / "m"
    assert save_model(Part("config.json"), Part("tokenizer.json"), out, "recipe: {}\n") == out
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "sro-recipe.yaml", "tokenizer.json"]
    (out / "config.json").write_text("first")
    with pytest.raises(OSError, match="No space left"):
        save_model(Part("config.json"), Part("tokenizer.json", fail=True), out)
    assert (out / "config.json").read_text() == "first" and [p.name for p in out.parent.iterdir()] == ["m"]
    save_model(Part("config.json"), Part("vocab.json"), out)  # a whole one replaces it
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "vocab.json"]


def test_a_saved_model_is_readable_as_any_new_file(tmp_path):
    """safetensors 0.8 writes its weights 0600: a model `sro train --out` kept (and `runs/.cache`'s tiny model)
    was unreadable to a team sharing the filesystem (a review, stop 57). Its files get a new file's mode."""
    import os
    import stat

    from trainers.models import save_model

    class Weights:
        def save_pretrained(self, folder) -> None:
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / "model.safetensors").write_text("w")
            os.chmod(Path(folder) / "model.safetensors", 0o600)  # as safetensors leaves it

    class Tok:
        def save_pretrained(self, folder) -> None:
            (Path(folder) / "tokenizer.json").write_text("{}")

    (tmp_path / "new").touch()
    expected = stat.S_IMODE((tmp_path / "new").stat().st_mode)
    out = save_model(Weights(), Tok(), tmp_path / "m", "recipe: {}\n")
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in out.iterdir()}
    assert modes == {"model.safetensors": expected, "tokenizer.json": expected, "sro-recipe.yaml": expected}, modes


# ------------------------------------------------------------------------------------------------------------
# load_policy's checks of the tokenizer against the model (trainers/models.py:141-149, 218-221, 27-28;
# a coverage review, stop 54)
# ------------------------------------------------------------------------------------------------------------

def test_a_tokenizer_past_the_embedding_or_without_eos_is_refused_and_a_missing_pad_is_the_eos(tmp_path):
    """A tokenizer with more tokens than the model embeds gave an IndexError mid-run (the check never ran in a
    test); one without an eos cannot end a completion; one without a pad token pads with its eos."""
    import shutil

    from transformers import AutoTokenizer

    from trainers.models import ModelLoadError, load_policy
    from trainers.tiny import ensure_tiny

    from test_models import PAIRS, SPEC

    folder = ensure_tiny(PAIRS, tmp_path / "cache", SPEC)
    model, tok = load_policy(str(folder), device="cpu")
    rows = model.get_input_embeddings().num_embeddings

    big = tmp_path / "big"
    shutil.copytree(folder, big)
    t = AutoTokenizer.from_pretrained(str(folder))
    t.add_tokens([f"<extra{i}>" for i in range(rows - len(t) + 1)])
    t.save_pretrained(str(big))
    with pytest.raises(ModelLoadError, match=rf"its tokenizer has {rows + 1} tokens but the model embeds {rows}"):
        load_policy(str(big), device="cpu")

    nopad = tmp_path / "nopad"
    shutil.copytree(folder, nopad)
    t = AutoTokenizer.from_pretrained(str(folder))
    t.pad_token = None
    t.save_pretrained(str(nopad))
    model, tok = load_policy(str(nopad), device="cpu")
    assert tok.pad_token == tok.eos_token and model.generation_config.pad_token_id == tok.eos_token_id
    assert tok.padding_side == "left"

    noeos = tmp_path / "noeos"
    shutil.copytree(folder, noeos)
    t = AutoTokenizer.from_pretrained(str(folder))
    t.pad_token = None
    t.eos_token = None
    t.save_pretrained(str(noeos))
    with pytest.raises(ModelLoadError, match="its tokenizer has no eos_token"):
        load_policy(str(noeos), device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where there is no CUDA device")
def test_runtime_device_cuda_without_a_cuda_device_is_a_clear_error():
    from trainers.models import ModelLoadError, pick_device

    with pytest.raises(ModelLoadError, match="runtime.device is 'cuda' but no CUDA device is visible"):
        pick_device("cuda")
    assert pick_device("auto").type == "cpu" and pick_device("cpu").type == "cpu"


# ------------------------------------------------------------------------------------------------------------
# a tokenizer file cut short is one line (trainers/models.py:134-138) (a coverage review, stop 54)
# ------------------------------------------------------------------------------------------------------------

def test_a_tokenizer_file_cut_short_is_one_line_naming_the_folder(tmp_path):
    import shutil

    from trainers.models import ModelLoadError, load_policy
    from trainers.tiny import ensure_tiny

    from test_models import PAIRS, SPEC

    folder = ensure_tiny(PAIRS, tmp_path / "cache", SPEC)
    cut = tmp_path / "cut"
    shutil.copytree(folder, cut)
    (cut / "tokenizer.json").write_text((folder / "tokenizer.json").read_text()[:200])
    with pytest.raises(ModelLoadError, match=rf"^cannot load tokenizer {re.escape(str(cut))}: \w+: ") as e:
        load_policy(str(cut), device="cpu")
    assert "\n" not in str(e.value)
