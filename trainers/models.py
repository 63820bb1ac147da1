"""Loading a policy: an HF model id, a local folder, or the embedded `tiny` model (built elsewhere,
then loaded through the very same `AutoModelForCausalLM` / `AutoTokenizer` calls)."""

from __future__ import annotations

import difflib
import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch and transformers are imported where a model is loaded, not here: checking a project's base_model
# (`missing_local_folder`) and the CLI's error types must not cost their seconds of start-up


class ModelLoadError(RuntimeError):
    """A base model that cannot be loaded; the message says which and why."""


def pick_device(device: str = "auto") -> torch.device:
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("runtime.device is 'cuda' but no CUDA device is visible; use 'auto' or 'cpu'")
    return torch.device(device)


def pick_dtype(device: torch.device, training: bool = True) -> torch.dtype:
    """fp32 for a policy that will be trained, wherever it runs: AdamW and the EMA copies update the
    weights in place, and in bf16 an update below half a bf16 step is rounded away (at lr 1.6e-6,
    the low end of the designer's range for a 1.5B model, 20 steps moved 1.9% of a bf16 layer's
    weights, and all of an fp32 one's; until stop 24 CUDA loaded it in bf16). A model that is only
    scored is loaded in bf16 on CUDA; on the CPU everything is fp32 (CPU bf16 matmuls are slow and
    imprecise for tiny models)."""
    import torch

    return torch.bfloat16 if device.type == "cuda" and not training else torch.float32


def looks_like_path(name_or_path: str) -> bool:
    """A local path rather than an HF model id (`org/name`): starts with /, ./, ../ or ~."""
    return str(name_or_path).startswith(("/", "./", "../", "~"))


def missing_local_folder(name_or_path: str) -> bool:
    """A local path (`looks_like_path`) that does not exist."""
    return looks_like_path(name_or_path) and not Path(name_or_path).expanduser().exists()


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
"""Files of which a saved tokenizer (`save_pretrained`) writes at least one, whatever its kind (its vocabulary:
`tokenizer_config.json` alone loaded as a tokenizer of 2 tokens that encoded every prompt to nothing)."""


def not_a_model_folder(path: str | os.PathLike[str]) -> str | None:
    """What a local `base_model` path lacks to be a saved model (a folder with `config.json` and tokenizer
    files), or None. Loading such a folder failed inside transformers with a message cut mid-sentence
    ("Couldn't instantiate the backend tokenizer from one of: ") that named neither the key nor a fix."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return "is a file, not a model folder"
    lacks = [what for what, ok in (("config.json", (folder / "config.json").is_file()),
                                   ("tokenizer files", any((folder / f).is_file() for f in TOKENIZER_FILES)))
             if not ok]
    return f"has no {'/'.join(lacks)}" if lacks else None


def _quiet_hub() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # SRO draws its own progress; per-load bars would flood the log


@functools.lru_cache(maxsize=None)
def hub_offline(model_id: str) -> bool:
    """For an HF model id: True when it must load from the local HF cache only (the hub cannot be reached
    here, or HF_HUB_OFFLINE is set), False when the hub answers for it. Raises `ModelLoadError` with the fix
    when the hub has no such model, or cannot be reached and the cache lacks it: transformers took ~50 s of
    retries to say it could not connect (a walkthrough, stop 34), and then retried again for the model."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    from huggingface_hub.errors import HFValidationError

    try:
        cached = isinstance(huggingface_hub.try_to_load_from_cache(model_id, "config.json"), str)
    except HFValidationError:  # `checkpoints/qwen/final` (a folder without ./ that does not exist): a traceback
        raise ModelLoadError(f"{model_id}: no such folder (a relative path is read from the project's folder) and "
                             "not an HF model id (org/name); give a folder that exists, or the model's id") from None
    # `models/my-sft` (no ./) that is no folder is read as a hub id: say so, or the hub's answer misleads (a walkthrough)
    folder = (f"; no folder {model_id} was found either (a local folder is ./{model_id}, read from the project's "
              "folder)")
    if difflib.get_close_matches(model_id, ["tiny"], n=1, cutoff=0.75):  # `tinyy` (a review, stop 57)
        folder += "; or did you mean 'tiny', the embedded model?"
    if constants.is_offline_mode():
        if cached:
            return True
        raise ModelLoadError(f"{model_id}: not in the local HF cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE "
                             f"is set; download it where the hub is reachable (`hf download {model_id}`) into "
                             f"that cache, or give a local model folder{folder}")
    try:
        huggingface_hub.model_info(model_id, timeout=10)
    except GatedRepoError:
        raise ModelLoadError(f"{model_id}: a gated model on the hub; accept its terms on its hub page and log in "
                             "here (`hf auth login`, or set HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise ModelLoadError(f"{model_id}: no such model on the hub (or a private one: log in with `hf auth "
                             f"login`); check the id (org/name), or give a local folder as ./path{folder}") from None
    except HfHubHTTPError:
        return False  # the hub answers, with another error: transformers says what it is
    except Exception as e:  # noqa: BLE001 -- the network's own errors (DNS, refused, timeout) have no common base
        if cached:
            return True
        raise ModelLoadError(f"{model_id}: the hub cannot be reached from here ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else 'no answer'}) and the model is not in the "
                             f"local HF cache ({constants.HF_HUB_CACHE}); download it where the hub is reachable "
                             f"(`hf download {model_id}`) and copy that cache here, or save it with "
                             f"save_pretrained() and give its folder as ./path{folder}") from None
    return False


def _hub_kwargs(src: str) -> dict[str, bool]:
    """`local_files_only` for from_pretrained: an HF id whose hub is out of reach loads from the cache."""
    return {} if looks_like_path(src) or Path(src).is_dir() else {"local_files_only": hub_offline(src)}


def load_tokenizer(name_or_path: str | os.PathLike[str]):
    from transformers import AutoTokenizer

    _quiet_hub()
    try:
        tok = AutoTokenizer.from_pretrained(str(name_or_path), **_hub_kwargs(str(name_or_path)))
    except ModelLoadError:
        raise
    except Exception as e:  # OSError, ValueError, a tokenizer file cut short (a JSON or a protobuf error)
        raise ModelLoadError(f"cannot load tokenizer {name_or_path!s}: {type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}") from None
    # an empty vocabulary (config only, a partial download) encoded every prompt to nothing, and scoring died
    # on an IndexError; no eos left generation without a pad token (a review, stop 37)
    if len(tok) < 3 or not tok("What is 3 + 4?", add_special_tokens=False)["input_ids"]:
        raise ModelLoadError(f"{name_or_path!s}: its tokenizer has {len(tok)} tokens and encodes text to nothing "
                             "(its vocabulary file is missing: tokenizer.json, vocab.json, ...); save the tokenizer "
                             "there with save_pretrained(), or download the model again")
    if tok.eos_token is None:
        raise ModelLoadError(f"{name_or_path!s}: its tokenizer has no eos_token (where a completion ends); set "
                             "eos_token (and pad_token) in its tokenizer_config.json")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # generation appends on the right
    return tok


def model_fingerprint(name_or_path: str | os.PathLike[str]) -> str:
    """What a cache keyed on a base model must also key on: for a local folder, its `config.json` and the
    name, size and modification time of each weight file, so a model retrained in place is measured again
    (the pass-rate table and the catalog were keyed on the path alone until stop 30); for a hub id, the id."""
    import hashlib

    folder = Path(str(name_or_path)).expanduser()
    if not folder.is_dir():
        return str(name_or_path)
    h = hashlib.sha256(str(folder.resolve()).encode())
    # config, generation config (its eos ids end completions) and the tokenizer's files (a chat template added
    # changes every prompt; the fingerprint stayed the same until stop 37)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                 "special_tokens_map.json", "chat_template.jinja", "tokenizer.model", "vocab.json", "vocab.txt",
                 "merges.txt"):
        if (folder / name).is_file():
            h.update(name.encode() + (folder / name).read_bytes())
    for f in sorted(folder.iterdir()):
        if f.suffix in (".safetensors", ".bin", ".pt", ".gguf") or f.name.endswith(".index.json"):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def no_dropout(model: torch.nn.Module) -> None:
    """Every dropout of `model` off: its `nn.Dropout` modules, and the rates attention layers read from their
    own attributes in train mode (Qwen2's and Llama's `attention_dropout` is a float, not a module: until
    stop 30 a base model with a non-zero one trained with π_θ ≠ μ on fresh rollouts), in its config too."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        for name in ("attention_dropout", "dropout"):
            if isinstance(getattr(m, name, None), float):
                setattr(m, name, 0.0)
    config = getattr(model, "config", None)
    for name, v in (vars(config).items() if config is not None else ()):
        if "dropout" in name and isinstance(v, float):
            setattr(config, name, 0.0)


def load_policy(name_or_path: str | os.PathLike[str], device: str = "auto", training: bool = True):
    """(model, tokenizer) in eval mode on the chosen device; `training`: its weights will be updated
    (fp32, a model only scored is bf16 on CUDA, `pick_dtype`; and no dropout, as RL trainers do)."""
    from transformers import AutoModelForCausalLM

    _quiet_hub()
    dev = pick_device(device)
    src = str(name_or_path)
    if missing_local_folder(src):
        raise ModelLoadError(f"{src}: no such folder; give a local model folder that exists, or an HF model id")
    if looks_like_path(src) and (lacks := not_a_model_folder(src)) is not None:
        raise ModelLoadError(f"{src} {lacks}; save the model (and its tokenizer) there with save_pretrained(), "
                             "or give an HF model id")
    src = str(Path(src).expanduser()) if looks_like_path(src) else src
    tok = load_tokenizer(src)
    try:
        model = AutoModelForCausalLM.from_pretrained(src, dtype=pick_dtype(dev, training), **_hub_kwargs(src))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"cannot load model {src}: {str(e).splitlines()[0]}") from None
    except Exception as e:  # a weight file cut short: safetensors' own error, a traceback (a review, stop 37)
        raise ModelLoadError(f"cannot load model {src}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                             " (a weight file incomplete? an interrupted download or copy: fetch it again)") from None
    rows = model.get_input_embeddings().num_embeddings
    if len(tok) > rows:  # token ids past the embedding: an IndexError mid-run
        raise ModelLoadError(f"{src}: its tokenizer has {len(tok)} tokens but the model embeds {rows}; save the "
                             "model and the tokenizer it was trained with together")
    model.to(dev).eval()
    if training:  # trained in train mode, sampled (μ) in eval mode: with dropout on, π/μ ≠ 1 before any update
        no_dropout(model)
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def save_model(model, tokenizer, folder: Path, recipe_text: str | None = None) -> Path:
    """Save a trained policy and its tokenizer (`save_pretrained`) as `folder`, a model folder that `base_model:`
    and `from_pretrained` load, with the recipe that trained it as `sro-recipe.yaml` beside them. Written to a
    temporary folder beside it and renamed into place, so a kill or a full disk never leaves half a model under
    the name; an existing `folder` is replaced only once the new one is whole."""
    import shutil

    from transformers.utils import logging as hf_logging

    from evaluators.files import readable_as_new_files, unique_tag, write_whole

    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f"{folder.name}.tmp{unique_tag()}")
    old = folder.with_name(f"{folder.name}.old{unique_tag()}")
    try:
        hf_logging.disable_progress_bar()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if recipe_text is not None:
            write_whole(tmp / "sro-recipe.yaml", recipe_text)
        readable_as_new_files(tmp)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not folder.exists():
            old.rename(folder)  # the earlier model back where it was
        raise
    shutil.rmtree(old, ignore_errors=True)
    return folder
