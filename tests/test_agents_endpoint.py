"""Agents written as programs with the real OpenAI and Anthropic SDKs (tests/sdk_agents.py), trained
through rlvr's rollout endpoint: trajectories token-exact on the loop and hf engines (the trainer's
log-probs equal the sampler's on every sampled token; the mask covers exactly those), segments for
rewritten histories, the agent's answer or reward, and an agent that hangs contained."""

from __future__ import annotations

import pytest
import sdk_agents
import torch
from helpers import CHATML, chatty_tiny

from rlvr.agents import AgentSpec
from rlvr.envs import AgentProgram
from rlvr.envs.faults import FaultLedger
from rlvr.envs.host import ProcessHost
from rlvr.records import Problem
from rlvr.rollout import HFEngine, LoopEngine, SamplingParams
from rlvr.rollout.episodes import EpisodeSpec
from rlvr.scoring import completion_logprobs
from rlvr.train.metrics import agent_metrics
from rlvr.train.trajectories import training_view

PARAMS = SamplingParams(group_size=2, temperature=1.0, max_new_tokens=12)
PROBLEMS = [Problem(id=str(i), prompt=f"{i}+1=") for i in range(3)]


@pytest.fixture(scope="module")
def chatty():
    model, tok = chatty_tiny()
    chat_tok = tok.__class__(tokenizer_object=tok.backend_tokenizer, **tok.special_tokens_map)
    chat_tok.chat_template = CHATML
    return model, tok, chat_tok


def episodes(host, fn, timeout_s: float = 60.0) -> EpisodeSpec:
    return EpisodeSpec(
        AgentProgram, host=host, agent=AgentSpec(fn, concurrency=8), episode_timeout_s=timeout_s, faults=FaultLedger(0)
    )


def check_token_exact(model, tok, out, tol: float = 1e-5) -> list:
    """Every sequence the update would see (whole trajectories, or turn by turn for rewritten histories)
    scores, in the trainer, exactly as the sampler did on its sampled tokens."""
    n = len(out)
    view = training_view(
        out,
        torch.ones(n),
        torch.ones(n),
        torch.zeros(n),
        credit="trajectory",
        weights={},
        group_size=2,
        scale="group",
        eps=1e-6,
    )
    seqs = view.sequences if view is not None else out
    ref = completion_logprobs(model, seqs, tok.pad_token_id, PARAMS.temperature)
    worst = 0.0
    for i, s in enumerate(seqs):
        mask = torch.tensor(s.mask, dtype=torch.bool)
        assert len(s.mask) == len(s.token_ids) == len(s.logprobs) and mask.any()
        worst = max(worst, float((ref[i, : len(s.token_ids)][mask] - torch.tensor(s.logprobs)[mask]).abs().max()))
    assert worst < tol, worst
    for c in out:
        assert sum(c.mask) == sum(t.end - t.start for t in c.turns if t.role == "assistant")
    return seqs


@pytest.mark.parametrize("engine_cls", [LoopEngine, HFEngine])
@pytest.mark.parametrize("agent", ["chat", "claude", "responses"])
def test_sdk_agents_trajectories_are_token_exact(chatty, host, engine_cls, agent):
    model, _, chat_tok = chatty
    engine = engine_cls(model, chat_tok, episodes=episodes(host, getattr(sdk_agents, agent)))
    torch.manual_seed(0)
    out = engine.generate(PROBLEMS, PARAMS)
    assert [c.group_id for c in out] == [0, 0, 1, 1, 2, 2] and all("env_error" not in c.env_info for c in out)
    check_token_exact(model, chat_tok, out)
    eos = chat_tok.eos_token_id
    for c in out:  # three sampled turns, one segment unless a turn was cut at its budget (no eos to continue)
        mine = [t for t in c.turns if t.role == "assistant"]
        assert len(mine) == 3 and mine[0].context is None
        assert all((t.context is None) == (c.token_ids[prev.end - 1] == eos) for prev, t in zip(mine, mine[1:]))
        assert c.text == mine[-1].text  # the agent's answer: its last reply
    if agent != "claude":  # the tools were described (this template takes none: a system message)
        assert "note" in chat_tok.decode(out[0].prompt_ids)


@pytest.mark.parametrize("agent", ["streamed", "responses_streamed", "completions"])
def test_streamed_and_text_completions_are_token_exact(chatty, host, agent):
    model, tok, chat_tok = chatty
    use = tok if agent == "completions" else chat_tok
    engine = LoopEngine(model, use, episodes=episodes(host, getattr(sdk_agents, agent)))
    torch.manual_seed(1)
    out = engine.generate(PROBLEMS, PARAMS)
    assert all("env_error" not in c.env_info for c in out)
    check_token_exact(model, use, out)
    assert all(sum(t.role == "assistant" for t in c.turns) == (3 if agent == "completions" else 2) for c in out)


def test_an_openai_agents_sdk_agent_is_token_exact(chatty, host):
    """An agent written with the OpenAI Agents SDK runs its own loop through the endpoint's Responses
    route; what it sampled is what the trainer recomputes."""
    model, _, chat_tok = chatty
    engine = LoopEngine(model, chat_tok, episodes=episodes(host, sdk_agents.agents_sdk))
    torch.manual_seed(3)
    out = engine.generate(PROBLEMS, PARAMS)
    assert all("env_error" not in c.env_info for c in out), [c.env_info for c in out]
    check_token_exact(model, chat_tok, out)
    assert all(any(t.role == "assistant" for t in c.turns) for c in out)
    assert "note" in chat_tok.decode(out[0].prompt_ids)  # its tool was offered


def test_a_rewritten_history_starts_a_segment_trained_in_its_own_context(chatty, host):
    model, _, chat_tok = chatty
    engine = LoopEngine(model, chat_tok, episodes=episodes(host, sdk_agents.rewrites))
    torch.manual_seed(2)
    out = engine.generate(PROBLEMS, PARAMS)
    for c in out:
        mine = [t for t in c.turns if t.role == "assistant"]
        assert len(mine) == 3 and mine[0].context is None and mine[1].context is not None
        assert mine[1].context == c.prompt_ids  # asked again from the same start
        assert chat_tok.decode(mine[2].context).endswith("0<|eos|>\n<|bos|>user\nok\n<|eos|>\n<|bos|>assistant\n")
        assert [bool(t.info.get("drift")) for t in mine] == [False, False, True]  # a reply sent back edited
    seqs = check_token_exact(model, chat_tok, out)
    assert len(seqs) == 3 * len(out)
    assert agent_metrics(out)["rollout/reply_drift_mean"] == 1.0


def test_rewards_async_agents_a_refused_request_and_a_hanging_agent(chatty, host):
    model, _, chat_tok = chatty
    out = LoopEngine(model, chat_tok, episodes=episodes(host, sdk_agents.reward_only)).generate(PROBLEMS, PARAMS)
    assert all(c.env_components == {"agent": float(len(c.turns[0].text))} for c in out)
    out = LoopEngine(model, chat_tok, episodes=episodes(host, sdk_agents.asynchronous)).generate(PROBLEMS, PARAMS)
    assert all(c.env_components == {"agent": 1.0} and c.text == c.turns[0].text for c in out)
    out = LoopEngine(model, chat_tok, episodes=episodes(host, sdk_agents.overlong)).generate(PROBLEMS[:1], PARAMS)
    assert "its requests were refused: the conversation" in out[0].env_info["error"], out[0].env_info
    import psutil

    def worker_pids() -> set[int]:
        return {p.pid for p in psutil.Process().children(recursive=True) if "rlvr.harness" in " ".join(p.cmdline())}

    before, own = worker_pids(), ProcessHost(1)
    spec = episodes(own, sdk_agents.hangs, timeout_s=1.0)
    spec.agent.concurrency = 1  # the second episode starts after the first overran: on a fresh worker
    out = LoopEngine(model, chat_tok, episodes=spec).generate(PROBLEMS[:1], PARAMS)
    assert [c.env_info["env_error"] for c in out] == ["timeout", "timeout"]
    assert "did not return within 1 s" in out[0].env_info["error"] and out[0].mask == [0]
    assert worker_pids() - before == set()  # both hung workers killed at the rollout's end


def test_an_agent_in_any_language_is_a_command(chatty, host):
    import sys

    from rlvr.agents.command import Command

    model, _, chat_tok = chatty
    command = Command.parse(f"{sys.executable} {__file__.rsplit('/', 1)[0]}/agent_urllib.py")
    out = LoopEngine(model, chat_tok, episodes=episodes(host, command)).generate(PROBLEMS, PARAMS)
    assert all("env_error" not in c.env_info for c in out)
    check_token_exact(model, chat_tok, out)
    assert all(c.text == [t for t in c.turns if t.role == "assistant"][-1].text for c in out)
    failing = Command.parse(f"{sys.executable} -c 'import sys; sys.exit(3)'")
    out = LoopEngine(model, chat_tok, episodes=episodes(host, failing)).generate(PROBLEMS[:1], PARAMS)
    assert out[0].env_info["env_error"] == "raised" and "exited with code 3" in out[0].env_info["error"]


def test_a_long_lived_command_runs_many_episodes_and_its_failures_cost_only_theirs(chatty, host, tmp_path):
    """env.agent_protocol=lines: one process per worker runs every episode sent to it (the Node example
    token-exact); an episode it fails, lines that are not answers, and a process that exits cost only
    the episodes it had, and the next episode starts it again."""
    import sys

    from rlvr.agents.command import Command

    model, _, chat_tok = chatty
    node = Command.parse("node examples/node_agent.js", "lines")
    out = LoopEngine(model, chat_tok, episodes=episodes(host, node)).generate(PROBLEMS, PARAMS)
    assert all("env_error" not in c.env_info for c in out), [c.env_info for c in out]
    check_token_exact(model, chat_tok, out)

    pids = tmp_path / "pids"
    agent = Command.parse(f"{sys.executable} {__file__.rsplit('/', 1)[0]}/agent_lines.py", "lines")

    def problems(*dos):
        return [
            Problem(id=str(i), prompt=f"{i}+1=", metadata={"do": do, "pids": str(pids)}) for i, do in enumerate(dos)
        ]

    def run(*dos):
        return LoopEngine(model, chat_tok, episodes=episodes(host, agent)).generate(problems(*dos), PARAMS)

    out = run("ok", "error", "ok")
    assert [c.env_info.get("env_error") for c in out] == [None, None, "raised", "raised", None, None]
    assert "failed the episode: boom" in out[2].env_info["error"]
    assert all(c.text == [t for t in c.turns if t.role == "assistant"][-1].text for c in out if c.problem_id != "1")
    first = set(pids.read_text().split())
    assert len(first) == 1  # one process ran all six episodes
    out = run("exit")
    assert [c.env_info["env_error"] for c in out] == ["raised", "raised"]
    assert "exited with code 4 before it answered" in out[0].env_info["error"]
    out = run("ok")
    assert all("env_error" not in c.env_info for c in out)
    assert set(pids.read_text().split()) - first  # started again after it exited


@pytest.mark.parametrize("config", ["agent_tool_arithmetic", "agents_sdk_tool_arithmetic"])
def test_the_shipped_example_agents_train_on_the_tool_task(sft_cache, tmp_path, config):
    """configs/agent_tool_arithmetic.yaml (examples/openai_agent.py, the OpenAI SDK alone) and
    configs/agents_sdk_tool_arithmetic.yaml (the same agent with the OpenAI Agents SDK, over Responses)
    for two tiny steps: every episode reaches the policy through the endpoint, none fails. Their
    learning figures: bench/bench_envs.py --tasks <config> (docs/benchmarks.md)."""
    import json

    from rlvr.cli import main

    assert (
        main(
            [
                "train",
                "--config",
                f"configs/{config}.yaml",
                "model.tiny_hidden=32",
                "model.tiny_layers=2",
                "model.tiny_heads=2",
                "sft.steps=20",
                "sft.batch_size=8",
                "sft.examples=40",
                "rollout.batch_size=2",
                "rollout.group_size=2",
                "train.steps=2",
                "eval.n=4",
                "eval.every=0",
                "ckpt.every=0",
                "run.progress=false",
                "log.tensorboard=false",
                "log.report=false",
                f"run.dir={tmp_path / 'run'}",
                f"sft.cache_dir={sft_cache}",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/env_error_frac" in r]
    assert len(steps) == 2 and all(r["rollout/env_error_frac"] == 0.0 and r["rollout/tokens"] > 0 for r in steps)


def test_a_call_to_a_tool_the_request_did_not_offer_is_counted_and_warned_once(caplog):
    """The policy learnt a tool the agent names otherwise: the call goes back as text (the agent sees
    it), the turn counts it (rollout/unoffered_calls_mean), and the run is warned once."""
    from test_serve_tools import byte_tokenizer

    from rlvr.agents import session as session_module
    from rlvr.agents.session import Session
    from rlvr.rollout.episodes import Renderer
    from rlvr.train.metrics import agent_metrics

    tok = byte_tokenizer()
    session_module._warned.clear()
    call = '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>'
    session = Session(Problem(id="p", prompt="1+1=", answer="2"), Renderer(tok))
    with caplog.at_level("WARNING", logger="rlvr.agents"):
        for _ in range(2):
            session.chat_context([{"role": "user", "content": "1+1="}], sdk_agents.TOOLS)
            ids = tok(call, add_special_tokens=False).input_ids
            content, calls, _ = session.record((ids, [0.0] * len(ids), "stop"), sdk_agents.TOOLS)
            assert (content, calls) == (call, [])
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "'search'" in caplog.records[0].getMessage() and "offered: note" in caplog.records[0].getMessage()
    completion = session.completion(0, 0, 0, content, "env_done")
    assert [t.info.get("unoffered_calls") for t in completion.turns if t.role == "assistant"] == [["search"]] * 2
    assert agent_metrics([completion])["rollout/unoffered_calls_mean"] == 2
