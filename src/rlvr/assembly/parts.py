"""Parts of a run built from its config, above the modules that define them (rlvr.assembly).

    model, tok = policy(cfg, path, device)           # the policy at `path`, and its tokenizer
    task = run_task(cfg, tokenizer=tok)              # where its problems come from
    spec = episode_spec(cfg)                         # what its rollouts run: environments, agents, their bounds
    reward = rule_reward(cfg)                        # the rules, with the environment's components
    engine = rollout_engine(cfg, model, tokenizer)   # rollout.engine (or `name`) on the policy
    ref = reference_model(cfg, model, tokenizer)     # the frozen start for the KL term
    base = base_model_path(cfg)                      # the weights a run starts from (the tiny model built here)
    cold = cold_start_dir(cfg)                       # where its cold start is cached, keyed by what shapes it

Each part is built here and nowhere else; the modules below take their own section of the config
(rlvr.rollout a RolloutConfig, rlvr.rewards a RewardConfig, rlvr.envs an EnvConfig) or plain values.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rlvr.agents import agent_spec
from rlvr.configlib import to_dict
from rlvr.envs import AgentProgram, Environment, env_class, env_components
from rlvr.envs.checks import Limits
from rlvr.envs.faults import FaultLedger
from rlvr.envs.host import ProcessHost, ThreadHost
from rlvr.inference.reference import ReferenceModel, load_teacher
from rlvr.models import load_policy, reference_policy, resolve_model
from rlvr.models.tiny import TINY_POSITIONS, save_tiny
from rlvr.ops.guard import RunGuard
from rlvr.ops.sinks import build_sinks
from rlvr.records import Problem
from rlvr.storage import RunStore
from rlvr.rewards import Reward, build_reward
from rlvr.rollout import RolloutEngine, build_engine
from rlvr.rollout.episodes import SINGLE_TURN, EpisodeSpec
from rlvr.tasks import (
    GAMES,
    build_task,
    builtin_names,
    code,
    data_paths,
    games,
    needs_code_chars,
    needs_tool_tags,
    tool_arithmetic,
)
from rlvr.tasks.files import data_files
from rlvr.tools import hosted, resolve_tools
from rlvr.train.update import replay_rule
from rlvr.urls import URL_CACHE, cache_dir, is_url


def run_task(cfg, *, tokenizer=None, on_event=None, context=None):
    """The run's task (sections task and data; env for the problems an environment grades), holding
    out eval.n problems. tokenizer, on_event, context: rlvr.tasks.build_task's."""
    return build_task(
        cfg.task,
        cfg.data,
        cfg.env,
        seed=cfg.seed,
        eval_n=cfg.eval.n,
        eval_n_set="eval.n" in cfg.sources,
        tokenizer=tokenizer,
        on_event=on_event,
        context=context,
    )


def run_guard(cfg, log, ui) -> RunGuard:
    """Alert rules, rollback and fault injection over the run's metric stream (sections alerts, rollback)."""
    return RunGuard(
        cfg.alerts,
        cfg.rollback,
        log,
        ui,
        run_name=cfg.run.name,
        ckpt_dir=cfg.run_dir / "checkpoints",
        seed=cfg.seed,
        base_lr=cfg.train.lr,
        inject_nan_at_step=cfg.debug.inject_nan_at_step,
    )


def metric_sinks(cfg, *, resume_step: int | None, ui) -> list:
    """The metric sinks section log asks for (TensorBoard, W&B, MLflow, Prometheus), in the run directory."""
    return build_sinks(cfg.log, cfg.run_dir, cfg.to_dict(), resume_step=resume_step, ui=ui)


def run_store(cfg, rank: int = 0) -> RunStore | None:
    """The run directory at a URL (run.dir), mirrored from its local cache, for trainer rank `rank`
    (checkpoint retention as section ckpt keeps it); None when run.dir is a local path."""
    if not is_url(cfg.run.dir):
        return None
    c = cfg.ckpt
    return RunStore(
        cfg.run.dir,
        cfg.run_dir,
        retention={"keep": c.keep, "keep_best": c.keep_best, "best_mode": c.best_mode},
        kill_at_step=cfg.debug.kill_during_upload_at_step,
        rank=rank,
    )


def policy(cfg, path, device=None):
    """The policy at `path` and its tokenizer on `device` (section model: dtype, checkpointing, LoRA)."""
    return load_policy(cfg.model, path, device=device)


def rule_reward(cfg) -> Reward:
    """The run's rule-based reward (section reward), with the components its environment reports."""
    return build_reward(cfg.reward, env_components(cfg.env))


def component_weights(cfg) -> dict[str, float]:
    """Every reward component's weight: the environment's defaults, overridden by reward.weights."""
    return {**env_components(cfg.env), **cfg.reward.weights}


def rollout_engine(
    cfg, model, tokenizer, *, name: str | None = None, model_dir=None, episodes: EpisodeSpec = SINGLE_TURN
) -> RolloutEngine:
    """The engine `name` (default rollout.engine) on `model`, sampling with the run's seed and compute
    dtype; vllm loads `model_dir`. episodes: what its rollouts run (episode_spec)."""
    return build_engine(
        cfg.rollout,
        model,
        tokenizer,
        name=name,
        model_dir=model_dir,
        seed=cfg.seed,
        dtype=cfg.model.dtype,
        episodes=episodes,
    )


def teacher_model(cfg, tokenizer, device=None, path: str | None = None) -> ReferenceModel:
    """The distillation teacher (algo.distill.teacher) scoring at the sampling temperature in the run's
    compute dtype, on `device`; path: its directory (default: where the name resolves)."""
    return load_teacher(cfg.algo.distill.teacher, cfg.model, cfg.rollout.temperature, tokenizer, device, path)


def reference_model(cfg, model, tokenizer) -> ReferenceModel:
    """A frozen copy of `model` (the start of RL) scoring at the sampling temperature, for the KL term
    (over each token's kept set with sampling replay, as the policy is)."""
    return ReferenceModel(
        reference_policy(model),
        tokenizer.pad_token_id,
        cfg.rollout.temperature,
        cfg.model.dtype,
        replay_rule(cfg.rollout),
    )


def episode_spec(cfg, tool_host=None) -> EpisodeSpec:
    """A run's episodes, from its `Config` (sections env, and reward.code for the python tool).
    tool_host(call, timeout_s) -> ToolResult: where the tool calls run (rlvr.tools.hosted); None: here."""
    e = cfg.env
    cls = env_class(e.name)
    if e.name == "single_turn":
        return SINGLE_TURN
    bounds = dict(
        step_wait_s=e.step_wait_s,
        reset_timeout_s=e.reset_timeout_s,
        step_timeout_s=e.step_timeout_s,
        episode_timeout_s=e.episode_timeout_s,
        limits=Limits(e.max_message_chars),
        faults=FaultLedger(e.fail_fast),
    )
    if issubclass(cls, AgentProgram):  # env.name=agent, verifiers:<id>
        return EpisodeSpec(cls, host=ProcessHost(e.workers), agent=agent_spec(e), **bounds)
    tools = {}
    if e.tools:
        tools = resolve_tools(e.tools, cfg.reward.code)
        if tool_host is not None:
            tools = hosted(tools, tool_host)
    settings = dict(e.settings)

    max_turns = e.max_turns or cls.max_turns

    def make_env(problem: Problem) -> Environment:
        return cls(
            settings, tools=tools, tool_format=e.tool_format, tool_timeout_s=e.tool_timeout_s, max_turns=max_turns
        )

    make_env.env_name = cls.__name__  # type: ignore[attr-defined]  # names it when its constructor fails

    return EpisodeSpec(
        make_env,
        max_turns=max_turns,
        max_tokens=e.max_tokens,
        history=e.history,
        tool_format=e.tool_format,
        host=ProcessHost(e.workers) if isolation(e.isolation, cls) == "process" else ThreadHost(),
        **bounds,
    )


def isolation(setting: str, cls: type) -> str:
    """'auto': worker processes for an environment of your own, threads for rlvr's (whose user code,
    the tools, runs contained at each call)."""
    if setting != "auto":
        return setting
    return "thread" if cls.__module__.startswith("rlvr.") and not cls.hosts_user_code else "process"


# -- where a run starts: its base model, and the cache key of its cold start


def base_model_path(cfg) -> Path:
    """The starting weights (section model): the tiny model (built locally once, in sft.cache_dir) or a
    user's model (a directory, hub id, GGUF dequantized once, or a packaged model)."""
    if cfg.model.name != "tiny":
        return Path(resolve_model(cfg.model))
    m = cfg.model
    code, tools = needs_code_chars(cfg.task.name), needs_tool_tags(cfg.task.name)
    shape = {"hidden": m.tiny_hidden, "layers": m.tiny_layers, "heads": m.tiny_heads, "seed": cfg.seed}
    # the arithmetic model keeps its key
    key = _digest(
        shape
        | ({"code_chars": True} if code else {})
        | ({"tool_tags": True} if tools else {})
        | ({"positions": m.tiny_positions} if m.tiny_positions != TINY_POSITIONS else {})
    )
    path = _cached(cfg, f"tiny-{key}")  # built where it is used, never uploaded: the same weights everywhere
    if not (path / "config.json").exists():
        save_tiny(path, m.tiny_hidden, m.tiny_layers, m.tiny_heads, cfg.seed, code, tools, m.tiny_positions)
    return path


def cold_start_dir(cfg) -> Path:
    """Where the run's cold-start checkpoint is cached (sft.cache_dir; for a URL, its local copy)."""
    return _cached(cfg, _sft_name(cfg))


def cold_start_url(cfg) -> str | None:
    """The cold start's place at sft.cache_dir's URL; None when sft.cache_dir is a local path."""
    return _remote(cfg, _sft_name(cfg)) if is_url(cfg.sft.cache_dir) else None


def _sft_name(cfg) -> str:
    """The cold start's name in sft.cache_dir: a digest of every setting and data byte that shapes it."""
    model = to_dict(cfg.model)
    if model["tiny_positions"] == TINY_POSITIONS:  # the key from before the setting: cold starts stay cached
        del model["tiny_positions"]
    settings = {
        "model": model,
        "task": to_dict(cfg.task),
        "seed": cfg.seed,
        **({"history": cfg.env.history} if cfg.env.history else {}),
        "sft": {k: v for k, v in to_dict(cfg.sft).items() if k != "cache_dir"},
    }
    versions = task_versions(cfg)  # generators that changed since they shipped; arithmetic keys stay
    if "code" in versions:
        settings["code_task"] = versions.pop("code")
    if versions:
        settings["task_versions"] = versions
    paths = data_paths(cfg.task, cfg.data)
    if paths:  # the demonstrations are the files' solutions: every byte of them, and how they are read
        settings["data"] = {k: v for k, v in to_dict(cfg.data).items() if k != "files"}
        settings["data_bytes"] = [_file_digest(f) for p in paths for f in data_files(Path(p))]
    return f"sft-{_digest(settings)}"


def _cached(cfg, name: str) -> Path:
    """A directory of sft.cache_dir: there, or for a URL its local copy (rlvr.urls.fetch_dir's)."""
    root = cfg.sft.cache_dir
    return cache_dir(_remote(cfg, name), URL_CACHE) if is_url(root) else Path(root) / name


def _remote(cfg, name: str) -> str:
    return f"{cfg.sft.cache_dir.rstrip('/')}/{name}"


def _file_digest(path: Path) -> str:
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def task_versions(cfg) -> dict[str, int]:
    """The VERSION of each built-in task of the run that has one (its demonstrations or prompts changed)."""
    modules = {"code": code, "tool_arithmetic": tool_arithmetic, **dict.fromkeys(GAMES, games)}
    return {n: modules[n].VERSION for n in builtin_names(cfg.task.name) or [] if n in modules}


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:12]
