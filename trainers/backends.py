"""Rollout backends behind one interface: `generate(prompts, group_size, temperature, max_new_tokens)`
returns `Rollouts`, and `sync(model)` hands the trainer's current weights to the sampler.

- `hf`: transformers `generate` on the policy itself (CPU and GPU; sync is a no-op).
- `vllm`: a vLLM engine in the same process (GPU only, optional extra `sro[vllm]`); weights are
  pushed into it after every update, and its token ids are assembled into the same `Rollouts`
  layout the losses read (`rollouts_from_ids`, tested on CPU against `hf`). One engine per process and
  model shape serves every trial (`ENGINES`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import tempfile
from collections.abc import Sequence

import torch

from evaluators.registry import Registry
from trainers.rollout import Rollouts, eos_ids, generate

ROLLOUT_BACKENDS: Registry = Registry("rollout backend")


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (missing package or no GPU); the message says how to fix it."""


def unavailable(name: str) -> str | None:
    """Why rollout backend `name` cannot run on this machine, with the fix; None when it can. A project
    that chooses it is refused when it loads (`sro.config`): the backend is built inside each trial, so
    without this every trial of a search failed the same way until the budget ran out. Looks for the
    package without importing it (vLLM takes seconds to import)."""
    if name != "vllm":
        return None
    if importlib.util.find_spec("vllm") is None:
        return ("rollout backend 'vllm' needs the optional extra: pip install 'sro[vllm]' (GPU only); "
                "or use rollout_backend: hf")
    if not torch.cuda.is_available():
        return "rollout backend 'vllm' needs a CUDA GPU; use rollout_backend: hf on CPU"
    return None


@ROLLOUT_BACKENDS.register("hf")
class HFBackend:
    """transformers `generate` with the KV cache, on the training model itself."""

    def __init__(self, model, tokenizer, **_: object) -> None:
        self.model, self.tok = model, tokenizer

    def generate(self, prompts: list[str], group_size: int, temperature: float, max_new_tokens: int) -> Rollouts:
        return generate(self.model, self.tok, prompts, group_size, temperature, max_new_tokens)

    def sync(self, model) -> None:
        """Nothing to do: the sampler is the trained model."""


def rollouts_from_ids(prompt_ids: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], tokenizer,
                      group_size: int, device: torch.device | str = "cpu",
                      eos_ids: Sequence[int] | None = None) -> Rollouts:
    """Assemble `Rollouts` from token ids: `prompt_ids` per prompt, `completions` prompt-major
    (group_size per prompt, each ending at an end-of-sequence token, `eos_ids` (default the
    tokenizer's), or truncated). Prompts are left-padded, completions right-padded; the completion mask
    covers tokens up to and including the first end of sequence."""
    pad = tokenizer.pad_token_id
    ends = set(eos_ids or [tokenizer.eos_token_id])
    L = max(len(p) for p in prompt_ids)
    C = max(1, max(len(c) for c in completions))
    ids, att, cmask, trunc = [], [], [], []
    for i, comp in enumerate(completions):
        p = list(prompt_ids[i // group_size])
        comp = list(comp)
        cut = next((j + 1 for j, tok in enumerate(comp) if tok in ends), len(comp))
        ids.append([pad] * (L - len(p)) + p + comp + [pad] * (C - len(comp)))
        att.append([0] * (L - len(p)) + [1] * len(p) + [1] * cut + [0] * (C - cut))
        cmask.append([1] * cut + [0] * (C - cut))
        trunc.append(not any(tok in ends for tok in comp))
    t = lambda x, dt=torch.long: torch.tensor(x, dtype=dt, device=device)  # noqa: E731
    input_ids, completion_mask = t(ids), t(cmask)
    texts = tokenizer.batch_decode(input_ids[:, L:].masked_fill(completion_mask == 0, pad), skip_special_tokens=True)
    return Rollouts(input_ids, t(att), completion_mask, t(trunc, torch.bool), L, texts)


def launcher_env() -> dict[str, str]:
    """The torchrun variables vLLM's `external_launcher` executor reads (RANK, LOCAL_RANK, WORLD_SIZE and
    env://'s MASTER_ADDR / MASTER_PORT) and its in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0), set
    for a single process where a launcher did not set them; a launcher's own values are kept. Without them
    a plain `sro search` failed in `vllm.LLM` with KeyError: 'RANK' (a review, stop 38). Returns what it set."""
    wanted = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
              "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:  # a free port for env://'s rendezvous
            s.bind(("127.0.0.1", 0))
            wanted["MASTER_PORT"] = str(s.getsockname()[1])
    added = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(added)
    return added


ENGINES: dict[str, tuple[object, tempfile.TemporaryDirectory]] = {}
"""The vLLM engines of this process (with the folder each started from), by model shape and memory share: a
trial's backend takes the engine of an earlier trial and loads its own weights into it. vLLM frees no memory
when an in-process engine is deleted (vllm-project/vllm#21073), so until stop 53 every trial started one more
and the second or third ran out of memory, recorded as the recipe's own failure (a review). The engine's
sampling stream goes on from trial to trial."""


@ROLLOUT_BACKENDS.register("vllm")
class VLLMBackend:
    """A colocated vLLM engine (GPU only). The policy is saved once to start the engine (or the process's engine
    for this model shape is taken, `ENGINES`, and the policy's weights loaded into it); after that its weights
    are loaded into the engine in place on every `sync`."""

    def __init__(self, model, tokenizer, gpu_memory_utilization: float = 0.3, seed: int = 0, **_: object) -> None:
        if (why := unavailable("vllm")) is not None:
            raise BackendUnavailable(why)
        try:
            import vllm
        except ImportError as e:  # installed, but broken
            raise BackendUnavailable(f"rollout backend 'vllm' cannot be imported ({e}); reinstall it: "
                                     "pip install 'sro[vllm]', or use rollout_backend: hf") from None
        self.tok = tokenizer
        self.eos = eos_ids(model, tokenizer)
        self._vllm = vllm
        shape = json.dumps({"model": model.config.to_dict(), "vocab": len(tokenizer),
                            "gpu_memory_utilization": gpu_memory_utilization}, sort_keys=True, default=str)
        if shape in ENGINES:  # an earlier trial's: this trial's weights into it
            self.llm, self._dir = ENGINES[shape]
            self.sync(model)
            return
        self._dir = tempfile.TemporaryDirectory(prefix="sro-vllm-")
        model.save_pretrained(self._dir.name)
        tokenizer.save_pretrained(self._dir.name)
        launcher_env()  # one engine in this process: external_launcher reads torchrun's variables
        self.llm = vllm.LLM(model=self._dir.name, dtype="bfloat16", gpu_memory_utilization=gpu_memory_utilization,
                            seed=seed, distributed_executor_backend="external_launcher", enforce_eager=True)
        ENGINES[shape] = (self.llm, self._dir)

    def generate(self, prompts: list[str], group_size: int, temperature: float, max_new_tokens: int) -> Rollouts:
        params = self._vllm.SamplingParams(n=group_size, temperature=temperature, top_p=1.0, top_k=-1, min_p=0.0,
                                           repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
                                           max_tokens=max_new_tokens, stop_token_ids=self.eos)  # softmax(logits/T)
        prompt_ids = [self.tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        outs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params, use_tqdm=False)
        completions = [list(c.token_ids) for o in outs for c in o.outputs]
        return rollouts_from_ids(prompt_ids, completions, self.tok, group_size, device="cuda", eos_ids=self.eos)

    def sync(self, model) -> None:
        engine_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        engine_model.load_weights((name, p.data) for name, p in model.named_parameters())
        self.llm.reset_prefix_cache()
