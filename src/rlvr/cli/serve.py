"""`rlvr serve MODEL`: the model behind OpenAI-style (/v1/chat/completions, /v1/completions, /v1/models)
and Anthropic-style (/v1/messages) routes, with /healthz, Prometheus /metrics and the A/B report /ab.

    rlvr serve runs/default                          # transformers on CPU, 127.0.0.1:8000
    rlvr serve runs/a --model-b runs/b --split 0.5   # online A/B of two checkpoints
    rlvr serve MODEL serve.engine=vllm serve.host=0.0.0.0 serve.api_keys=[KEY]
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from rlvr.cli._common import add_config_arguments, add_device_argument, config_from_args
from rlvr.configlib import ConfigError
from rlvr.runlog import read_jsonl


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a Hugging Face model directory or a run directory (its model/)")
    parser.add_argument("--model-b", metavar="B", help="a second model for online A/B testing (arm B)")
    parser.add_argument("--split", type=float, default=None, metavar="P", help="share of users sent to B (default 0.5)")
    parser.add_argument("--host", help="bind address (= serve.host)")
    parser.add_argument("--port", type=int, help="TCP port (= serve.port; 0 = any free port)")
    parser.add_argument(
        "--record",
        metavar="DIR",
        help="keep every response with its tokens in DIR/served.jsonl and "
        "take POST /v1/feedback into DIR/feedback.jsonl (`rlvr data recording DIR` makes training "
        "data of them); DIR may be a URL (s3://...): written locally, uploaded after each write",
    )
    add_device_argument(parser)
    add_config_arguments(parser)


def api_keys(scfg) -> list[str]:
    env = os.environ.get(scfg.api_keys_env, "")
    return [k for k in [*scfg.api_keys, *env.split(",")] if k.strip()]


def chat_template(scfg, tokenizer) -> str | None:
    """serve.chat_template as a Jinja text, or None for the plain rendering."""
    choice = scfg.chat_template
    if choice == "auto":
        return getattr(tokenizer, "chat_template", None)
    if choice == "plain":
        return None
    if not Path(choice).is_file():
        raise ConfigError(f"serve.chat_template: {choice!r} is not 'auto', 'plain' or a template file")
    return Path(choice).read_text()


def default_max_tokens(cfg, path: str, generation_config=None) -> tuple[int, str]:
    """max_tokens of a request that names none: serve.max_tokens when a config or override sets it,
    else a run directory's recommended inference length (rlvr.ops.report), else the model's
    generation_config.json max_new_tokens (an rlvr export writes the recommended length there),
    else serve.max_tokens' default."""
    from rlvr.ops.report import recommended_length

    if "serve.max_tokens" in cfg.sources:
        return cfg.serve.max_tokens, "serve.max_tokens"
    metrics = Path(path) / "metrics.jsonl"
    rec = recommended_length(read_jsonl(metrics), None) if metrics.exists() else None
    if rec:
        return rec["tokens"], f"the run's recommended length (1.2 x P90 {rec['p90']:.0f})"
    exported = getattr(generation_config, "max_new_tokens", None)
    if exported:
        return int(exported), "the model's generation_config.json max_new_tokens"
    return cfg.serve.max_tokens, "serve.max_tokens (default)"


def build_arm(cfg, path: str, key: str, name: str):
    from rlvr.cli.eval import inference_model, model_dir
    from rlvr.models import load_tokenizer
    from rlvr.serve.app import Arm
    from rlvr.serve.backends import HFBackend, VLLMBackend

    scfg, weights = cfg.serve, model_dir(path)
    if scfg.engine == "vllm":
        v = cfg.rollout.vllm
        if not Path(weights).is_dir():
            raise ConfigError(f"serve.engine=vllm loads a model directory; {weights!r} is not one")
        tokenizer = load_tokenizer(weights)
        backend = VLLMBackend(
            weights,
            tokenizer,
            dtype=cfg.model.dtype if v.dtype == "auto" else v.dtype,
            seed=cfg.seed,
            max_model_len=v.max_model_len,
            gpu_memory_utilization=v.gpu_memory_utilization,
        )
        generation_config, where = _generation_config(weights), "vLLM's device"
    else:
        model, tokenizer = inference_model(cfg, weights)
        backend = HFBackend(model, tokenizer, max_batch=scfg.max_concurrency, dtype=cfg.model.dtype)
        generation_config, where = model.generation_config, str(next(model.parameters()).device)
    template = chat_template(scfg, tokenizer)
    max_tokens, why = default_max_tokens(cfg, path, generation_config)
    print(
        f"rlvr serve: {name} = {weights} ({scfg.engine} on {where}, compute {cfg.model.dtype}; chat: "
        f"{'its chat template' if template else 'plain, the contents one per line'}; "
        f"default max_tokens {max_tokens}: {why})",
        file=sys.stderr,
    )
    return Arm(key, name, tokenizer, backend, template, max_tokens)


def _generation_config(weights: str):
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(weights)
    except OSError:  # no generation_config.json
        return None


def open_server(cfg, model: str, model_b: str | None = None, split: float | None = None):
    """The Server of `rlvr serve` (rlvr.serve.app): its arms loaded, keys and bind address checked."""
    from rlvr.cli.eval import model_dir
    from rlvr.rewards import build_reward
    from rlvr.serve.app import Server, is_loopback

    scfg = cfg.serve
    if split is not None and not model_b:
        raise ConfigError("--split needs --model-b (the second arm)")
    split = 0.5 if split is None else split
    if not 0 <= split <= 1:
        raise ConfigError(f"--split: a share of users in [0, 1], got {split}")
    keys = api_keys(scfg)
    if not keys and not is_loopback(scfg.host):
        raise ConfigError(
            f"serve.host={scfg.host} is reachable from other machines and no API key is set: set "
            f"serve.api_keys=[KEY] or ${scfg.api_keys_env}=KEY, or bind serve.host=127.0.0.1"
        )
    name = scfg.model_name or Path(model_dir(model)).name
    if Path(model_dir(model)) != Path(model):  # a run directory, or a packaged model: the name given
        name = scfg.model_name or Path(model).resolve().name
    arms = [build_arm(cfg, model, "a", name)]
    if model_b:
        arms.append(build_arm(cfg, model_b, "b", f"{name}:b"))
    return Server(arms, scfg, reward=build_reward(cfg.reward), split=split if model_b else 0.0, api_keys=keys)


def run(args) -> int:
    if args.host is not None:
        args.overrides = [*args.overrides, f"serve.host={args.host}"]
    if args.port is not None:
        args.overrides = [*args.overrides, f"serve.port={args.port}"]
    cfg = config_from_args(args)
    import uvicorn

    from rlvr.serve.app import KEEP_ALIVE_S, build_app, listen

    sock = listen(cfg.serve.host, cfg.serve.port)  # before loading: a taken port fails in a second
    server = open_server(cfg, args.model, args.model_b, args.split)
    if args.record:
        from rlvr.serve.record import Recorder

        server.recorder = Recorder(args.record)
    closed: list[bool] = []

    def close() -> None:
        if not closed:
            closed.append(True)
            if server.recorder is not None:
                server.recorder.close()  # uploaded first: a recording at a URL is what must not be lost
            server.close()
            if server.reward is not None:
                server.reward.close()

    class Uvicorn(uvicorn.Server):
        """uvicorn re-raises the SIGTERM or SIGINT it stopped on once it has shut down, which ends the
        process there: close the engines first (vLLM's engine-core process would outlive us)."""

        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                try:
                    yield
                finally:
                    close()

    try:
        host, port = sock.getsockname()[:2]
        arms = ", ".join(a.name for a in server.arms)
        print(
            f"rlvr serve: http://{host}:{port}/v1  models: {', '.join(server.by_name)}  (arms: {arms}; "
            f"{'API key required' if server.api_keys else 'no API key'}; /healthz /metrics /ab)",
            file=sys.stderr,
        )
        config = uvicorn.Config(build_app(server), log_level="warning", timeout_keep_alive=KEEP_ALIVE_S)
        Uvicorn(config).run(sockets=[sock])
    finally:
        close()
    return 0
