"""A run assembled from its config: the one place that reads the whole `Config`, beside the CLI.

    parts     every part built from it (task, episodes, rewards, engines, reference, teacher, guard,
              sinks, storage, the base model and the cold start's cache key)
    start     where a run starts: the cold start (run_sft), the starting point, the picked temperature
    embedded  the embedded driver: `train(cfg)` opens the run (`open_run`) and runs rlvr.train.grpo's loop

The modules below take their own section of the config (rlvr.rollout a RolloutConfig, rlvr.rewards
a RewardConfig, rlvr.train.grpo's Run the sections its steps read) or plain values; the Ray backend
(rlvr.deploy.ray) runs `train` in its trainer actor and builds its workers' parts here.
"""

from rlvr.assembly.parts import (
    base_model_path,
    cold_start_dir,
    cold_start_url,
    component_weights,
    episode_spec,
    isolation,
    metric_sinks,
    policy,
    reference_model,
    rollout_engine,
    rule_reward,
    run_guard,
    run_store,
    run_task,
    task_versions,
    teacher_model,
)
from rlvr.assembly.start import auto_temperature, run_sft, starting_point
from rlvr.assembly.embedded import banner, open_run, train

__all__ = [
    "auto_temperature",
    "banner",
    "base_model_path",
    "cold_start_dir",
    "cold_start_url",
    "component_weights",
    "episode_spec",
    "isolation",
    "metric_sinks",
    "open_run",
    "policy",
    "reference_model",
    "rollout_engine",
    "rule_reward",
    "run_guard",
    "run_sft",
    "run_store",
    "run_task",
    "starting_point",
    "task_versions",
    "teacher_model",
    "train",
]
