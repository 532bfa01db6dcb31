"""Agent harnesses not written here, unmodified, trained through rlvr's endpoint: each recipe's
episodes run (the harness's own prompts, tool calls and loop), its model-written commands run in
rlvr's sandbox, and its trajectories are token-exact on the loop and hf engines."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import chatty_tiny, tool_chat_tokenizer
from test_agents_endpoint import check_token_exact

from rlvr.agents import AgentSpec, FileFunction
from rlvr.envs import AgentProgram
from rlvr.envs.faults import FaultLedger
from rlvr.records import Problem
from rlvr.rollout import HFEngine, LoopEngine, SamplingParams
from rlvr.rollout.episodes import EpisodeSpec, run_episodes

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def tokenizer():
    return tool_chat_tokenizer()


def episodes(host, fn, tool_format: str = "hermes") -> EpisodeSpec:
    agent = AgentSpec(fn, concurrency=8, tool_format=tool_format)
    return EpisodeSpec(AgentProgram, host=host, agent=agent, episode_timeout_s=120.0, faults=FaultLedger(0))


class Scripted:
    """A policy that knows the harness: it computes with the shell, then submits what the shell said."""

    version = 0
    max_context = 1 << 16

    def __init__(self, tokenizer, turns) -> None:
        self.tokenizer, self.turns = tokenizer, turns

    def sample(self, contexts, params, group_size):
        out = []
        for context in contexts:
            seen = self.tokenizer.decode(context)
            text = next(say for when, say in self.turns if when in seen)
            ids = self.tokenizer(text, add_special_tokens=False).input_ids + [self.tokenizer.eos_token_id]
            out += [(ids, [-0.5] * len(ids), "stop")] * group_size
        return out


MINI = FileFunction(str(EXAMPLES / "mini_swe_agent.py"), "solve")


def test_mini_swe_agent_runs_its_commands_in_the_sandbox_and_submits(host, tokenizer):
    """mini-swe-agent's DefaultAgent with its mini.yaml: the policy's bash call runs in rlvr's sandbox,
    the agent shows it the output with its own template, and what it submits is the episode's answer."""
    policy = Scripted(
        tokenizer,
        [
            ("3345", "<tool_call>bash(echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\necho 3345)</tool_call>"),
            ("", "I add them.<tool_call>bash(expr 1000 + 2345)</tool_call>"),
        ],
    )
    problems = [Problem(id="0", prompt="What is 1000 + 2345?", answer="3345")]
    params = SamplingParams(group_size=1, greedy=True, max_new_tokens=64)
    out = run_episodes(policy, problems, params, episodes(host, MINI, "compact"))
    (c,) = out
    assert "env_error" not in c.env_info, c.env_info
    assert c.text == "3345"
    said = [t for t in c.turns if t.role == "env"]
    assert len(said) == 1 and "3345" in said[0].text and "returncode" in said[0].text  # mini.yaml's observation
    assert all(t.context is None for t in c.turns)  # one segment: each request extended the last


@pytest.fixture(scope="module")
def caller(tokenizer):
    return chatty_tiny(tok=tokenizer, max_positions=8192, turn="<tool_call>bash(echo {})</tool_call>")[0]


@pytest.mark.parametrize("engine_cls", [LoopEngine, HFEngine])
def test_mini_swe_agent_trajectories_are_token_exact(host, tokenizer, caller, engine_cls):
    """A tiny model with room for mini.yaml's prompt (~3,300 tokens here; taught to call `bash` on
    short prompts, it mostly does not at this length): the harness answers a reply that is not a tool
    call with its format-error message and drops it from its history (a rewrite: each such turn is a
    segment, trained in the context it was sampled in), until its step limit; every sampled token's
    log-prob recomputed by the trainer matches the sampler's, and no reply came back otherwise than
    written (the scripted test above shows the continued case)."""
    model = caller
    problems = [Problem(id=str(i), prompt=f"What is {i} + 1?", answer=str(i + 1)) for i in range(2)]
    params = SamplingParams(group_size=2, temperature=1.0, max_new_tokens=32)
    out = engine_cls(model, tokenizer, episodes=episodes(host, MINI, "compact")).generate(problems, params)
    assert all("env_error" not in c.env_info for c in out), [c.env_info for c in out]
    assert all(sum(t.role == "assistant" for t in c.turns) >= 3 for c in out)
    assert len(out[0].prompt_ids) > 3000
    assert not any(t.info.get("drift") for c in out for t in c.turns)
    check_token_exact(model, tokenizer, out)
