"""A run's settings checked against its environment's class, before anything runs.

    check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)   # a ConfigError naming the key (and its file)

(rlvr.config validates each key on load; what only the environment's class can answer, its
components, its settings keys, whether it is an agent program, is checked here, by the commands
and by train() as they start.)
"""

from __future__ import annotations

from rlvr.config import located
from rlvr.config.algo import AlgoConfig
from rlvr.config.data import TaskConfig
from rlvr.config.env import EnvConfig
from rlvr.config.reward import BUILTIN_COMPONENTS, RewardConfig
from rlvr.configlib import ConfigError, require
from rlvr.envs import GAMES, AgentProgram, env_class, env_components
from rlvr.envs.verifiers_hub import TASK, is_verifiers


def check_env(
    env: EnvConfig, task: TaskConfig, algo: AlgoConfig, reward: RewardConfig, sources: dict[str, str] | None = None
) -> None:
    """A run's `env` section against its task, algorithm and reward: the environment exists, the task
    is its episode, the algorithm settings work on turns, and reward.weights names only components
    someone computes. A ConfigError naming the key otherwise, and the file that set it (`sources`: the
    config's, as load_config's own errors name it)."""
    try:
        _check(env, task, algo, reward)
    except ConfigError as exc:
        raise located(exc, sources or {}) from None


def _check(env: EnvConfig, task: TaskConfig, algo: AlgoConfig, reward: RewardConfig) -> None:
    try:
        cls = env_class(env.name)
    except ValueError as exc:
        raise ConfigError(f"env.name: {exc}") from None
    for game in GAMES:
        require(
            task.name != game or env.name == game,
            "env.name",
            f"task {game} is an episode of the {game} environment: set env.name={game} (configs/{game}.yaml)",
        )
    if "tool_arithmetic" in task.name.split("+"):
        with_calculator = env.name == "tools" and "calculator" in env.tools
        require(
            (with_calculator or env.name == "agent") and env.tool_format == "compact",
            "env.name",
            "task tool_arithmetic is an episode with a calculator: set env.name=tools "
            "env.tools=[calculator] env.tool_format=compact (configs/tool_arithmetic.yaml has them), or an "
            "agent with env.tool_format=compact (configs/agent_tool_arithmetic.yaml)",
        )
    hub = is_verifiers(env.name)
    require(
        hub == (task.name == TASK),
        "task.name",
        "a verifiers environment's problems are its own dataset: set task.name=verifiers with env.name=verifiers:<id>"
        if hub
        else "task.name=verifiers trains on the dataset of a verifiers environment: set env.name=verifiers:<id>",
    )
    program = issubclass(cls, AgentProgram)
    require(
        not program or (env.credit == "trajectory" and env.history == 0),
        "env.credit",
        "an agent program's episodes train with env.credit=trajectory and env.history=0 (the program decides "
        "what each request sees)",
    )
    by_turn = env.credit == "turn" or env.history > 0 or program
    require(
        not (by_turn and algo.kl_in_reward),
        "algo.kl_in_reward",
        "folds each trajectory's KL into its reward; with env.history or env.credit=turn the update scores "
        "turns on their own: put the KL in the loss (algo.kl_in_reward=false)",
    )
    require(
        not (by_turn and algo.noise_std > 0),
        "algo.noise_std",
        "reward noise with env.history or env.credit=turn (turns trained on their own) is not built yet: "
        "set algo.noise_std=0",
    )
    require(
        not (env.credit == "turn" and reward.normalize == "group"),
        "env.credit",
        "per-turn credit needs the raw step rewards; reward.normalize=group standardises the totals: use one",
    )
    if cls.settings_keys is not None:
        extra = sorted(set(env.settings) - cls.settings_keys)
        require(
            not extra,
            "env.settings",
            f"{env.name} reads no setting {extra} (it reads {sorted(cls.settings_keys) or 'none'})",
        )
    own = set(env_components(env))
    unknown = sorted(set(reward.weights) - BUILTIN_COMPONENTS - own)
    require(
        not unknown,
        "reward.weights",
        f"unknown component(s) {unknown}: the components are "
        f"{', '.join(sorted(BUILTIN_COMPONENTS | own))} (env.name={env.name})",
    )
