"""verifiers 0.4 (v1) environments trained by rlvr from an interpreter of their own (env.python): a
Taskset whose tasks call a Toolset's tool (tests/vf1_calc, scaffolded with verifiers' `vf-init
--add-tool`), its episodes run by verifiers' own `null` harness (its chat program, a uv script, with
the toolset as an MCP server) against rlvr's endpoint, its rewards and metrics as components.

`make verifiers-v1` builds that interpreter (.venv-verifiers); `make test` does it first."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import chatty_tiny, tool_chat_tokenizer
from test_agents_endpoint import check_token_exact

from rlvr.agents import agent_spec
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.configlib import ConfigError
from rlvr.envs import AgentProgram, verifiers_hub
from rlvr.envs.faults import FaultLedger
from rlvr.rollout import HFEngine, LoopEngine, SamplingParams
from rlvr.rollout.episodes import EpisodeSpec, run_episodes
from rlvr.rollout.tool_prompt import CALL_WORDS

PYTHON = Path(__file__).resolve().parents[1] / ".venv-verifiers" / "bin" / "python"
V1 = [
    "env.name=verifiers:vf1-calc",
    "task.name=verifiers",
    f"env.python={PYTHON}",
    "env.settings.harness=null",  # verifiers' `null` harness (its default, bash, runs the model's commands)
    "env.tool_format=compact",  # the tiny tokenizer has no braces: calls as <tool_call>name(argument)</tool_call>
    "env.settings.agent.max_turns=3",  # the seat's own bound (verifiers' AgentConfig)
]


@pytest.fixture(scope="module", autouse=True)
def _interpreter():
    assert PYTHON.exists(), f"{PYTHON} is missing: run `make verifiers-v1` (make test does)"


@pytest.fixture(scope="module")
def tokenizer():
    return tool_chat_tokenizer()


def setup(host, *overrides: str):
    cfg = load_config(None, [*V1, *overrides])
    spec = EpisodeSpec(
        AgentProgram, host=host, agent=agent_spec(cfg.env), episode_timeout_s=120.0, faults=FaultLedger(0)
    )
    problems, held_out = verifiers_hub.problems(cfg.env)
    assert held_out is None
    return spec, problems


class Adder:
    """A policy that knows the task: it calls the toolset's `add` on the prompt's numbers, then says
    the number the tool answered."""

    version = 0
    max_context = 1 << 16

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def sample(self, contexts, params, group_size):
        out = []
        for context in contexts:
            seen = self.tokenizer.decode(context)
            a, b = re.findall(r"(\d+)\+(\d+)=\?", seen)[-1]
            tool = seen.rpartition("tool\n")[2] if "tool\n" in seen else None
            said = re.findall(r"\d+", tool or "")
            text = f"It is {said[0]}." if said else f"<tool_call>calc_add({a}+{b})</tool_call>"
            ids = self.tokenizer(text, add_special_tokens=False).input_ids + [self.tokenizer.eos_token_id]
            out += [(ids, [-0.5] * len(ids), "stop")] * group_size
        return out


@pytest.fixture(scope="module")
def scripted(host, tokenizer):
    spec, problems = setup(host)
    return spec, problems[:2], run_episodes(Adder(tokenizer), problems[:2], SamplingParams(group_size=1), spec)


def test_the_harness_calls_the_toolset_and_the_taskset_scores_the_episode(scripted, tokenizer):
    """The chat program offers the toolset's tool, runs the policy's call on the MCP server and sends
    the result back; the task's @vf.reward and @vf.metric are the components, their weighted sum `agent`."""
    spec, problems, out = scripted
    assert spec.agent.components == {"exact", "calls"} and spec.agent.scores
    for c, p in zip(out, problems):
        assert "env_error" not in c.env_info, c.env_info
        assert c.env_components == {"exact": 1.0, "calls": 2.0, "agent": 1.0}
        said = [t for t in c.turns if t.role == "env"]
        assert len(said) == 1 and p.answer in said[0].text  # the tool's own answer
        assert c.text == f"It is {p.answer}."
        assert all(t.context is None for t in c.turns)  # one segment: the second request extended the first
        assert CALL_WORDS["compact"] in tokenizer.decode(c.prompt_ids)  # the tools described as calls are read


@pytest.fixture(scope="module")
def caller(tokenizer, scripted):
    """A tiny model taught to call the tool after the harness's own system message (the tools described)."""
    system = tokenizer.decode(scripted[2][0].prompt_ids).split("<|bos|>system\n")[1].split("<|eos|>")[0]
    turn = "<tool_call>calc_add(1+{})</tool_call>"
    return chatty_tiny(tok=tokenizer, max_positions=1024, steps=90, turn=turn, system=system)[0]


@pytest.mark.parametrize("engine_cls", [LoopEngine, HFEngine])
def test_v1_episodes_are_token_exact(host, tokenizer, caller, engine_cls):
    """A tiny model taught to call the tool: every sampled token's log-prob, recomputed by the trainer,
    matches the sampler's within 1e-4, over each episode's turns, and no reply came back otherwise
    than written."""
    spec, problems = setup(host)
    params = SamplingParams(group_size=2, temperature=1.0, max_new_tokens=48)
    out = engine_cls(caller, tokenizer, episodes=spec).generate(problems[:1], params)
    assert all("env_error" not in c.env_info for c in out), [c.env_info for c in out]
    assert any(c.env_components["calls"] >= 2 for c in out)  # it called the tool and asked again
    assert all(c.env_components["calls"] <= 3 for c in out)  # env.settings.agent.max_turns
    assert not any(t.info.get("drift") for c in out for t in c.turns)
    check_token_exact(caller, tokenizer, out, tol=1e-4)  # hf's kernels at ~500 positions: within 2e-5


def test_a_v1_environment_trains_with_its_rewards_and_metrics_per_name(tmp_path):
    tiny = ["model.tiny_hidden=32", "model.tiny_layers=2", "model.tiny_heads=2", "rollout.max_new_tokens=8"]
    small = ["rollout.batch_size=1", "rollout.group_size=2", "algo.filter_zero_std=false", "eval.n=1", "env.workers=1"]
    small += ["sft.steps=20", "train.steps=1"]  # (its cold start's skill is not what this test is about)
    quiet = ["eval.every=0", "ckpt.every=0", "run.progress=false", "log.tensorboard=false", "log.report=false"]
    assert main(["train", *V1, *tiny, *small, *quiet, f"run.dir={tmp_path}"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    (r,) = [r for r in rows if "rollout/env_error_frac" in r]
    assert r["rollout/env_error_frac"] == 0.0 and r["rollout/tokens"] > 0
    assert r["reward/calls/mean"] >= 1.0  # every episode asked the policy
    assert r["reward/correct/mean"] == pytest.approx(r["reward/exact/mean"])  # exact's weight is 1


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("env.settings.agent.runtime.type=docker", "runtime.type='docker'"),
        ("env.settings.harness=no-such-harness", "no-such-harness"),
        ("env.settings.colour=red", "env.settings.colour"),
        ("env.settings.harness=bash", "'bash' harness runs model-written code"),
        ("env.name=verifiers:vf1-duel", "2 agents (solver, judge)"),  # a judge's calls would be trained
    ],
)
def test_what_rlvr_cannot_run_is_a_config_error_naming_it(override, said):
    with pytest.raises(ConfigError, match=re.escape(said)):
        verifiers_hub.components(load_config(None, [*V1, override]).env)
