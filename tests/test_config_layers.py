"""Layered configuration (rlvr.configfiles): stacked files, includes, profiles, ${env:} values and
the origin of every key; secrets kept out of every run file and sink."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from ops_tiny import OPS_TINY, sft_cache
from tracking_files import offline_tracking

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.configfiles import REDACTED
from rlvr.configlib import ConfigError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_two_files_a_profile_an_env_variable_and_overrides_stack_with_their_origins(tmp_path, monkeypatch):
    common = write(tmp_path / "common.yaml", "seed: 3\ntrain:\n  lr: 1.0e-3\n  steps: 7\n")
    base = write(
        tmp_path / "base.yaml",
        "include: [common.yaml]\ntrain:\n  lr: 2.0e-3\nrollout:\n  group_size: 4\n"
        "profiles:\n  prod:\n    rollout:\n      group_size: 16\n",
    )
    mine = write(
        tmp_path / "mine.yaml", "train:\n  steps: ${env:RLVR_TEST_STEPS}\nrun:\n  name: ${env:RLVR_TEST_NAME,dev}\n"
    )
    monkeypatch.setenv("RLVR_TEST_STEPS", "42")
    monkeypatch.delenv("RLVR_PROFILE", raising=False)
    cfg = load_config([base, mine], ["eval.n=9"])
    assert (cfg.seed, cfg.train.lr, cfg.train.steps, cfg.rollout.group_size, cfg.run.name, cfg.eval.n) == (
        3,
        2e-3,
        42,
        4,
        "dev",
        9,
    )
    assert cfg.sources == {
        "seed": str(common),
        "train.lr": str(base),
        "train.steps": str(mine),
        "rollout.group_size": str(base),
        "run.name": str(mine),
        "eval.n": "override",
    }
    prod = load_config([base, mine], ["eval.n=9"], profile="prod")
    assert prod.rollout.group_size == 16 and prod.sources["rollout.group_size"] == f"profile prod ({base})"
    # the profile from the environment, from a file beside the first config
    write(tmp_path / "profiles" / "test.yaml", "train:\n  lr: 5.0e-4\n")
    monkeypatch.setenv("RLVR_PROFILE", "test")
    t = load_config([base])
    assert t.train.lr == 5e-4 and t.sources["train.lr"] == f"profile test ({tmp_path / 'profiles' / 'test.yaml'})"
    # the origins are written into the run's config.yaml with the values
    assert t.to_dict()["sources"]["train.lr"].startswith("profile test")


@pytest.mark.parametrize(
    "files, args, message",
    [
        (
            {"a.yaml": "train:\n  steps: ${env:RLVR_TEST_UNSET}\n"},
            {},
            "train.steps: environment variable RLVR_TEST_UNSET is not set",
        ),
        ({"a.yaml": "seed: 1\n"}, {"profile": "nope"}, "profile 'nope'"),
        ({"a.yaml": "include: [b.yaml]\n", "b.yaml": "include: [a.yaml]\n"}, {}, "includes itself"),
        ({"a.yaml": f"alerts:\n  webhook_url: '{REDACTED}'\n"}, {}, "alerts.webhook_url: the file has <secret> here"),
        ({"a.yaml": "secrets: [alerts.nothing]\n"}, {}, "secrets: 'alerts.nothing' is not a config key"),
        ({"a.yaml": "train:\n  steps: oops\n"}, {}, "train.steps: expected an integer, got 'oops' (set in "),
    ],
)
def test_layering_mistakes_are_config_errors_naming_the_key(tmp_path, monkeypatch, files, args, message):
    monkeypatch.delenv("RLVR_TEST_UNSET", raising=False)
    monkeypatch.delenv("RLVR_PROFILE", raising=False)
    for name, text in files.items():
        write(tmp_path / name, text)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config([tmp_path / "a.yaml"], **args)


def test_keys_of_which_one_is_set_replace_each_other_across_layers(tmp_path):
    """env.agent in a file, env.agent_command on the command line (or the other way): the later wins;
    both in one layer stay a config error."""
    agent = write(tmp_path / "agent.yaml", "env:\n  name: agent\n  agent: sdk_agents:chat\n")
    cfg = load_config(agent, ["env.agent_command=node agent.js"])
    assert (cfg.env.agent, cfg.env.agent_command, cfg.sources["env.agent_command"]) == ("", "node agent.js", "override")
    command = write(tmp_path / "command.yaml", "env:\n  name: agent\n  agent_command: node agent.js\n")
    assert (load_config([agent, command]).env.agent, load_config(command, ["env.agent=m:f"]).env.agent) == ("", "m:f")
    with pytest.raises(ConfigError, match="exactly one"):
        load_config(None, ["env.name=agent", "env.agent=m:f", "env.agent_command=node agent.js"])


def test_a_secret_never_reaches_a_run_file_or_a_sink(tmp_path, tmp_path_factory, monkeypatch):
    """A webhook URL from ${secret:VAR} and a key named like a secret: the run uses them, and no file of
    its directory (config, checkpoints, logs, report) nor any W&B/MLflow call holds them."""
    secret, api_key = "hook-3f9c2a7e51d8", "sk-live-8c1d0b6f2e"
    listener = socket.socket()  # the webhook points here, a port this test holds (nothing is posted without an alert)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    monkeypatch.setenv("RLVR_TEST_HOOK", f"http://127.0.0.1:{listener.getsockname()[1]}/{secret}")
    offline_tracking(monkeypatch)  # the real W&B and MLflow write their payloads to disk
    cfg_file = write(tmp_path / "ops.yaml", "alerts:\n  webhook_url: ${secret:RLVR_TEST_HOOK}\n")
    run_dir = tmp_path / "run"
    try:
        assert (
            main(
                [
                    "train",
                    "--config",
                    str(cfg_file),
                    *OPS_TINY,
                    "train.steps=2",
                    "ckpt.every=1",
                    f"run.dir={run_dir}",
                    f"sft.cache_dir={sft_cache(tmp_path_factory)}",
                    "log.wandb_project=p",
                    f"log.mlflow_tracking_uri=file:{tmp_path / 'mlruns'}",
                    f"serve.api_keys=[{api_key}]",
                ]
            )
            == 0
        )
    finally:
        listener.close()
    files = [p for p in [*run_dir.rglob("*"), *(tmp_path / "mlruns").rglob("*")] if p.is_file()]
    assert any(p.name == "config.yaml" for p in files) and any(
        "checkpoint" in str(p) or "step_" in str(p) for p in files
    )
    assert any(p.suffix == ".wandb" for p in files) and any(p.parent.name == "params" for p in files)
    for path in files:
        data = path.read_bytes()
        assert secret.encode() not in data and api_key.encode() not in data, path
    assert REDACTED in (run_dir / "config.yaml").read_text()
    cfg = load_config([cfg_file])
    assert secret in cfg.alerts.webhook_url and cfg.secrets == ["alerts.webhook_url"]  # the run itself has it
