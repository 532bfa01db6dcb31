"""The run configuration: one dataclass per section, composed in `Config`.

    cfg = load_config("configs/code.yaml", ["train.lr=1e-6"])   # files stacked, a profile, overrides

Each section lives in a module of its own here (rlvr.config.rollout, .reward, .env, ...) and
imports nothing of the modules it configures: every module takes its own section, typed. Every key
is validated on load (rlvr.configlib), with the settings that span two sections; what only an
environment's class can answer is checked when a run starts (rlvr.envs.settings.check_env). Keys
that scripts rely on keep their names: seed, run.dir, model.name, task.name, train.steps, train.lr,
rollout.batch_size, rollout.group_size, rollout.temperature, rollout.max_new_tokens,
algo.loss_type, algo.beta, eval.n, ckpt.every, ckpt.resume, deploy.backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rlvr import configfiles, configlib
from rlvr.config.algo import AlgoConfig, DistillConfig
from rlvr.config.data import DataConfig, SFTConfig, TaskConfig
from rlvr.config.deploy import DEPLOY_MODULES, DeployConfig, PoolConfig
from rlvr.config.env import EnvConfig
from rlvr.config.model import LoraConfig, ModelConfig
from rlvr.config.ops import ROLLBACK_RULES, AlertsConfig, RollbackConfig
from rlvr.config.reward import RewardConfig
from rlvr.config.rollout import AutoTemperatureConfig, RolloutConfig, SpeculativeConfig, VLLMConfig
from rlvr.config.run import CkptConfig, DebugConfig, EvalConfig, LogConfig, RunConfig
from rlvr.config.serve import ServeConfig
from rlvr.config.train import TrainConfig
from rlvr.configlib import ConfigError, require
from rlvr.urls import cache_dir, is_url

__all__ = [
    "DEPLOY_MODULES",
    "ROLLBACK_RULES",
    "AlertsConfig",
    "AlgoConfig",
    "AutoTemperatureConfig",
    "CkptConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "DebugConfig",
    "DeployConfig",
    "DistillConfig",
    "EnvConfig",
    "EvalConfig",
    "LogConfig",
    "LoraConfig",
    "ModelConfig",
    "PoolConfig",
    "RewardConfig",
    "RollbackConfig",
    "RolloutConfig",
    "RunConfig",
    "SFTConfig",
    "ServeConfig",
    "SpeculativeConfig",
    "TaskConfig",
    "TrainConfig",
    "VLLMConfig",
    "load_config",
    "located",
]


@dataclass
class Config:
    seed: int = 0
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    data: DataConfig = field(default_factory=DataConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    ckpt: CkptConfig = field(default_factory=CkptConfig)
    deploy: DeployConfig = field(default_factory=DeployConfig)
    log: LogConfig = field(default_factory=LogConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    rollback: RollbackConfig = field(default_factory=RollbackConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    secrets: list[str] = field(default_factory=list)
    """Dotted keys whose values are secrets, beside those named like one (configfiles.SECRET_NAME_RE) and those set
    from ${secret:VAR}: written as <secret> in config.yaml, checkpoints, sinks and the report."""
    sources: dict[str, str] = field(default_factory=dict)
    """Which file, profile or override set each key (filled by the loader; informational)."""

    def __post_init__(self) -> None:
        for key in self.secrets:
            require(
                configfiles.lookup(configlib.to_dict(self), key) is not configfiles.MISSING,
                "secrets",
                f"{key!r} is not a config key",
            )
        # settings that span two sections
        require(
            not (self.model.lora.enabled and "vllm" in (self.rollout.engine, self.eval.engine)),
            "rollout.engine",
            "vllm loads full weights; with model.lora.enabled use rollout.engine=hf or loop",
        )
        require(
            not self.rollout.vllm.sleep_level or (self.rollout.engine == "vllm" and self.deploy.backend == "embedded"),
            "rollout.vllm.sleep_level",
            "puts the trainer's own vLLM engine to sleep during the update: it needs "
            "rollout.engine=vllm and deploy.backend=embedded (a Ray rollout pool has GPUs of its own)",
        )
        require(
            self.rollout.sync_every == 1 or self.rollout.engine == "vllm" or self.deploy.backend == "ray",
            "rollout.sync_every",
            f"rollout.engine={self.rollout.engine} samples with the trainer's own weights, "
            "so they are never stale; sync_every > 1 needs rollout.engine=vllm or deploy.backend=ray (where "
            "every rollout worker has its own copy)",
        )
        if self.deploy.backend == "ray":
            self._check_pool_devices()
        require(
            not self.debug.kill_during_upload_at_step or is_url(self.run.dir),
            "debug.kill_during_upload_at_step",
            "kills the run while it uploads a checkpoint to run.dir's URL: run.dir is a local path here",
        )
        require(
            not self.deploy.kill_inference_at_step
            or self.algo.beta > 0
            or self.reward.models
            or self.reward.judges
            or self.algo.distill.teacher,
            "deploy.kill_inference_at_step",
            "there is no inference pool to kill a "
            "worker of: it runs only with algo.beta > 0, learned rewards or a distillation teacher",
        )
        if self.deploy.partial_rollouts:
            self._check_partial_rollouts()
        trainers = self.deploy.pools["trainer"].replicas
        if self.deploy.backend == "ray" and self.train.strategy == "fsdp":
            require(
                self.train.world_size in (0, trainers),
                "train.world_size",
                f"{self.train.world_size} ranks, but the Ray trainer pool has {trainers} "
                "(deploy.pools.trainer.replicas): set them equal, or leave train.world_size=0",
            )
        elif self.deploy.backend == "ray":
            require(
                trainers == 1,
                "deploy.pools.trainer.replicas",
                f"{trainers} trainers form one process group only under train.strategy=fsdp",
            )
        if self.train.strategy == "fsdp":
            require(
                self.deploy.backend == "ray" or self.rollout.engine != "vllm",
                "rollout.engine",
                "embedded train.strategy=fsdp samples with each rank's own copy of the weights: use "
                "rollout.engine=hf or loop (or deploy.backend=ray, where vLLM runs in the rollout pool)",
            )
            require(
                (self.eval.engine or self.rollout.engine) != "vllm",
                "eval.engine",
                "under train.strategy=fsdp rank 0 evaluates with its own copy of the weights: set eval.engine=hf or loop",
            )
            require(
                not self.ckpt.async_write,
                "ckpt.async_write",
                "background checkpoint writes are not built for train.strategy=fsdp yet (ranks write their shards in step)",
            )
            require(
                not self.model.lora.enabled,
                "model.lora.enabled",
                "LoRA under train.strategy=fsdp is not built yet: train the adapter with train.strategy=single",
            )
        require(
            not (self.train.micro_batch_tokens and self.train.micro_batch_size),
            "train.micro_batch_tokens",
            "a token budget and a sequence count both size the micro-batches: set train.micro_batch_size=0 "
            "to pack by tokens, or train.micro_batch_tokens=0",
        )
        require(self.train.micro_batch_tokens >= 0, "train.micro_batch_tokens", "must be >= 0 (0 = off)")
        require(
            self.algo.overlong_buffer <= self.rollout.max_new_tokens,
            "algo.overlong_buffer",
            f"the penalty ramp ({self.algo.overlong_buffer} tokens) must fit in rollout.max_new_tokens "
            f"({self.rollout.max_new_tokens})",
        )

    def _check_partial_rollouts(self) -> None:
        """deploy.partial_rollouts: where new weights can reach a rollout between its decode steps."""
        key = "deploy.partial_rollouts"
        require(
            self.deploy.backend == "ray" and self.deploy.async_,
            key,
            "new weights arrive during a rollout "
            "only when batches are sampled ahead: set deploy.backend=ray and deploy.async=true",
        )
        require(
            self.rollout.engine in ("loop", "hf"),
            key,
            f"rollout.engine={self.rollout.engine} cannot stop "
            "between decode steps for new weights yet: use rollout.engine=loop or hf",
        )
        require(
            self.rollout.speculative.method == "none",
            key,
            "speculative decoding does not stop for new weights yet: set rollout.speculative.method=none",
        )
        require(
            self.env.name != "agent",
            key,
            "an agent program's model calls do not stop for new weights yet: use env.name=tools or an environment",
        )

    def _check_pool_devices(self) -> None:
        """Every GPU a Ray pool reserves is used by its actors (rlvr.deploy.ray.devices.pool_device):
        a pool whose work cannot run on one reserves none."""
        pools = self.deploy.pools
        require(
            pools["reward"].gpus == 0,
            "deploy.pools.reward.gpus",
            "the reward pool runs rule rewards, the code sandbox and tool calls on CPUs; it would leave its "
            "GPUs idle: set it to 0",
        )
        require(
            not (pools["trainer"].gpus > 0 and self.train.device == "cpu"),
            "deploy.pools.trainer.gpus",
            "reserves GPUs but train.device=cpu keeps the trainer off them: set train.device=auto (or cuda), or 0 GPUs",
        )
        require(
            not (pools["trainer"].gpus == 0 and self.train.device == "cuda"),
            "train.device",
            "cuda, but the Ray trainer pool reserves no GPU (deploy.pools.trainer.gpus=0): Ray shows its actors "
            "none; give the pool GPUs, or train.device=auto",
        )
        require(
            not (
                pools["rollout"].gpus > 0
                and self.rollout.speculative.method != "none"
                and self.rollout.engine != "vllm"
            ),
            "rollout.speculative.method",
            "the loop engine's speculative decoding runs on the CPU only; a rollout "
            "pool with GPUs samples on them: use rollout.engine=vllm (vLLM's methods on the GPU), "
            "rollout.speculative.method=none, or deploy.pools.rollout.gpus=0",
        )

    @property
    def run_dir(self) -> Path:
        """Where the run writes: run.dir, runs/<name>, or for a URL its local cache (rlvr.storage)."""
        if is_url(self.run.dir):
            return cache_dir(self.run.dir, ".cache/runs")
        return Path(self.run.dir or Path("runs") / self.run.name)

    def to_dict(self) -> dict:
        """Plain data, secrets written as <secret>: what run files, checkpoints and sinks get."""
        return configfiles.redacted(configlib.to_dict(self), self.secrets)


EXCLUSIVE = (("env.agent", "env.agent_command"),)
"""Keys of which a config sets one: a later layer that sets one replaces the other (rlvr.configfiles)."""


def load_config(
    path: str | Path | Sequence[str | Path] | None = None,
    overrides: list[str] | None = None,
    *,
    profile: str | None = None,
) -> Config:
    """Config files stacked in order (later wins), the profile, then the overrides (rlvr.configfiles);
    `sources` records where each key was set, `secrets` gains the keys set from ${secret:VAR}."""
    paths = [] if path is None else [path] if isinstance(path, (str, Path)) else list(path)
    layers = configfiles.read_layers(paths, overrides or [], profile=profile, exclusive=EXCLUSIVE)
    data = {k: v for k, v in layers.data.items() if k != "sources"}
    listed = data.get("secrets", [])
    if not isinstance(listed, list):
        raise ConfigError(f"secrets: expected a list of dotted keys, got {listed!r}")
    data["secrets"] = list(dict.fromkeys([*listed, *layers.secrets]))
    data["sources"] = {k: v for k, v in layers.origins.items() if k != "sources" and not k.startswith("sources.")}
    try:
        return configlib.from_dict(Config, data)
    except ConfigError as exc:
        raise located(exc, data["sources"]) from None


def located(exc: ConfigError, sources: dict[str, str]) -> ConfigError:
    """exc ("key: what is wrong") naming the file that set the key, where a file did."""
    origin = sources.get(str(exc).split(":", 1)[0])
    if origin is None or origin == "override":
        return exc
    return ConfigError(f"{exc} (set in {origin})")
