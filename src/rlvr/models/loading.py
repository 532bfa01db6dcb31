"""Loading and saving models: a directory, a hub id (local cache first), or a packaged / GGUF model."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from rlvr.models.gguf import PACKAGED, ModelNotFound, dequantize_gguf, packaged_gguf
from rlvr.urls import URL_CACHE, fetch_dir, is_url

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_model(mcfg) -> str:
    """What `from_pretrained` loads for a non-tiny `model` section: a directory or a hub id.

    'smollm2' and GGUF files are dequantized once into `model.cache_dir` (see rlvr.models.gguf).
    """
    name = mcfg.name
    if is_url(name):  # an exported model at s3://, gs://, ...: downloaded once
        return _fetched(name, mcfg.cache_dir)
    if _is_path(name) and not Path(name).exists():
        raise ModelNotFound(
            f"model.name: {name!r}: no such directory or file. Give a Hugging Face model "
            f"directory, a .gguf file, a hub id, or a packaged model ({', '.join(PACKAGED)})"
        )
    if name in PACKAGED:
        return str(dequantize_gguf(packaged_gguf(name), cache_dir=mcfg.cache_dir))
    if mcfg.gguf_file or name.endswith(".gguf"):
        return str(dequantize_gguf(name, mcfg.gguf_file, cache_dir=mcfg.cache_dir))
    return name


def _fetched(url: str, cache: str) -> str:
    try:
        return str(fetch_dir(url, cache))
    except FileNotFoundError as exc:
        raise ModelNotFound(
            f"model {exc}; give the URL of a Hugging Face model directory (an export: <run.dir>/model)"
        ) from None


def _is_path(name: str) -> bool:
    """Whether `name` can only mean a local path: absolute, relative ('./', '../', '~'), or with more
    than one '/' (a hub id is 'name' or 'namespace/name')."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1


def local_path(path: str) -> str:
    """A directory as is; a hub id as its snapshot directory in the local cache when it is there
    (so loading never touches the network), else the hub id itself."""
    if Path(path).is_dir():
        return path
    if is_url(path):
        return _fetched(path, URL_CACHE)
    if _is_path(path):
        raise ModelNotFound(
            f"model {path!r}: no such directory. Give a Hugging Face model directory "
            f"(e.g. runs/<name>/model), a hub id, or a packaged model ({', '.join(PACKAGED)})"
        )
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(path, local_files_only=True)
    except Exception:  # not cached (or not a valid repo id): the hub is the only place left
        return path


def hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached (offline mode, or one request without retries
    failed within 5 s), or None when it answers. Asked once per process, before a hub download, so
    an offline machine gets its clear error at once instead of after the hub client's retries."""
    global _HUB
    if _HUB is None:
        from huggingface_hub import constants

        if constants.HF_HUB_OFFLINE:
            _HUB = "HF_HUB_OFFLINE is set"
        else:
            import httpx

            try:
                httpx.head(constants.ENDPOINT, timeout=5.0)
                _HUB = ""
            except httpx.HTTPError as exc:
                _HUB = f"{constants.ENDPOINT}: {type(exc).__name__}: {exc}"
    return _HUB or None


_HUB: str | None = None


def _pretrained(cls, path: str, **kwargs):
    """Load from a directory, or from a hub id: the local cache first (works offline), then the hub."""
    from huggingface_hub.errors import HFValidationError

    where = local_path(path)
    if where == path and not Path(path).is_dir() and (why := hub_unreachable()):
        raise ModelNotFound(
            f"model {path!r}: not a local directory, not in the Hugging Face cache, and the hub cannot be reached "
            f"({why}). Give a model directory, download it once while online, or use a packaged model "
            f"({', '.join(PACKAGED)})"
        )
    try:
        return cls.from_pretrained(where, **kwargs)
    except (OSError, HFValidationError) as exc:
        if isinstance(exc, ModelNotFound):
            raise
        raise ModelNotFound(
            f"model {path!r}: not a local directory, not in the Hugging Face cache, and the hub could not "
            f"be reached ({type(exc).__name__}). Give a model directory, download it once while online, "
            f"or use a packaged model ({', '.join(PACKAGED)})"
        ) from None


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    tokenizer = _pretrained(AutoTokenizer, str(path))
    if tokenizer.pad_token is None:
        # Decoder-only checkpoints often ship without a pad token; eos is the usual fallback. Padding
        # is always masked out (left for generation, right for training), so sharing the id is safe.
        if tokenizer.eos_token is None:
            raise ValueError(f"{path}: the tokenizer has neither a pad nor an eos token; add one to its config")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    path: str | Path, dtype: str = "float32", *, gradient_checkpointing: bool = False
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    tokenizer = load_tokenizer(path)
    model = _pretrained(AutoModelForCausalLM, str(path), dtype=DTYPES[dtype])
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    if gradient_checkpointing:
        # non-reentrant: works when only some parameters (a LoRA adapter) need gradients
        if hasattr(model, "activation_checkpointing_enable"):  # the newer name
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer


def ensure_trainable(model) -> None:
    """Refuse a model whose weights cannot be trained (a quantized GGUF load), saying what to do."""
    quantizer = getattr(model, "hf_quantizer", None)
    if getattr(model, "is_quantized", False) and not (quantizer is not None and quantizer.is_trainable):
        raise ValueError(
            "this model was loaded quantized (e.g. straight from a GGUF file) and cannot be trained; "
            "give the .gguf as model.name (or model.gguf_file) so rlvr dequantizes it to safetensors once"
        )


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
