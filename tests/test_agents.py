"""Multi-turn episodes: token-exact trajectories on every engine, environments, tools, the loss mask,
per-turn sequences, and what a run of the tool task logs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import CHATML, chatter_spec, chatty_tiny

from rlvr.records import Problem
from rlvr.rollout import HFEngine, LoopEngine, SamplingParams
from rlvr.rollout.episodes import Renderer
from rlvr.scoring import completion_logprobs

PROBLEMS = [Problem(id=str(i), prompt=f"{i}+{i + 2}=") for i in range(4)]
CHAT_PROBLEMS = [Problem(id=f"c{i}", prompt=[{"role": "user", "content": f"{i}+1="}]) for i in range(4)]
PARAMS = SamplingParams(group_size=4, temperature=1.0, max_new_tokens=12)


@pytest.fixture(scope="module")
def chatty():
    return chatty_tiny()


def check_token_exact(model, tok, completions, tol: float, renderer=None, message=None, truncation=None) -> None:
    """The trainer's log-probs equal the sampler's on every sampled token (over each token's kept set
    with `truncation`: sampling replay); the mask is 1 on exactly the sampled tokens; what the
    environment appended is its message rendered once."""
    renderer = renderer or Renderer(tok)
    assert any(sum(t.role == "assistant" for t in c.turns) >= 2 for c in completions), "no multi-turn episode"
    ref = completion_logprobs(model, completions, tok.pad_token_id, PARAMS.temperature, truncation=truncation)
    worst = 0.0
    for i, c in enumerate(completions):
        mask = torch.tensor(c.mask, dtype=torch.bool)
        assert len(c.mask) == len(c.token_ids) == len(c.logprobs)
        assert sum(c.mask) == sum(t.end - t.start for t in c.turns if t.role == "assistant")
        worst = max(worst, float((ref[i, : len(c.token_ids)][mask] - torch.tensor(c.logprobs)[mask]).abs().max()))
        for t in c.turns:
            span = c.token_ids[t.start : t.end]
            if t.role == "env":
                said = message or {"role": "user", "content": "ok\n"}
                assert span == renderer.continuation([said]) and not any(c.mask[t.start : t.end])
            else:
                assert all(c.mask[t.start : t.end]) and tok.decode(span, skip_special_tokens=True) == t.text
        ends = [t for t in c.turns if t.role == "assistant"][:-1]
        assert all(c.token_ids[t.end - 1] == tok.eos_token_id for t in ends)  # only a turn that stopped is answered
    assert worst < tol, worst


@pytest.mark.parametrize("top_k", [0, 5], ids=["untruncated", "top_k"])
@pytest.mark.parametrize("engine_cls", [LoopEngine, HFEngine])
def test_trajectories_are_token_exact(chatty, engine_cls, top_k):
    model, tok = chatty
    engine = engine_cls(model, tok, episodes=chatter_spec())
    torch.manual_seed(0)
    params = dataclasses.replace(PARAMS, top_k=top_k)
    out = engine.generate(PROBLEMS, params)
    assert len(out) == 16 and [c.group_id for c in out] == [i for i in range(4) for _ in range(4)]
    check_token_exact(model, tok, out, 1e-5, truncation=params.truncation if top_k else None)
    if top_k:  # every sampled token carries its kept set, every appended one none
        assert all(bool(k) == bool(m) for c in out for k, m in zip(c.kept, c.mask))
    assert {c.finish_reason for c in out} <= {"max_turns", "length"}
    # each answered turn records the reward its step earned (what per-turn credit reads)
    assert all(t.info.get("components") == {"turn": 1.0} for c in out for t in c.turns[:-1] if t.role == "assistant")
    # every turn that ended with eos was answered, and its step's reward summed; a truncated one was not
    assert all(
        c.env_components.get("turn", 0.0) == sum(t.role == "assistant" for t in c.turns) - (c.finish_reason == "length")
        for c in out
    )


def test_chat_template_turns_are_rendered_incrementally(chatty):
    model, base_tok = chatty  # a copy with a chat template: the fixture's tokenizer stays as it is
    chat_tok = base_tok.__class__(tokenizer_object=base_tok.backend_tokenizer, **base_tok.special_tokens_map)
    chat_tok.chat_template = CHATML
    renderer = Renderer(chat_tok)
    # what follows an assistant turn: the newline after its eos, then the tool turn and the next prompt
    appended = renderer.continuation([{"role": "tool", "content": "ok"}])
    assert chat_tok.decode(appended) == "\n<|bos|>tool\nok<|eos|>\n<|bos|>assistant\n"
    tool = {"role": "tool", "content": "ok"}
    engine = LoopEngine(model, chat_tok, episodes=chatter_spec(message=tool))
    torch.manual_seed(1)
    out = engine.generate(CHAT_PROBLEMS, PARAMS)
    check_token_exact(model, chat_tok, out, 1e-5, renderer, tool)
    # the whole trajectory decodes to the conversation the template would render around the sampled text
    c = next(c for c in out if len(c.turns) >= 3)
    assert chat_tok.decode(c.prompt_ids + c.token_ids[: c.turns[2].start]).startswith("<|bos|>user\n")


def test_windowed_history_trains_each_turn_in_its_own_context(chatty):
    from rlvr.train.trajectories import training_view

    model, tok = chatty
    engine = LoopEngine(model, tok, episodes=chatter_spec(history=1))
    torch.manual_seed(2)
    out = engine.generate(PROBLEMS, PARAMS)
    mine = [[t for t in c.turns if t.role == "assistant"] for c in out]
    assert any(len(m) == 3 for m in mine)  # the third turn sees the prompt and the second exchange only
    assert all(m[2].context_start == m[1].start > 0 and m[1].context_start == 0 for m in mine if len(m) == 3)
    n = len(out)
    view = training_view(
        out,
        torch.ones(n),
        torch.ones(n),
        torch.arange(n, dtype=torch.float32),
        credit="trajectory",
        weights={},
        group_size=4,
        scale="group",
        eps=1e-6,
    )
    assert view is not None and len(view.sequences) == sum(sum(t.role == "assistant" for t in c.turns) for c in out)
    # each turn's sequence is what the policy saw: its log-probs, scored by the trainer, are the sampler's
    ref = completion_logprobs(model, view.sequences, tok.pad_token_id, PARAMS.temperature)
    worst = max(
        float((ref[i, : len(s.token_ids)] - torch.tensor(s.logprobs)).abs().max()) for i, s in enumerate(view.sequences)
    )
    assert worst < 1e-5


def test_per_turn_credit_gives_each_turn_the_return_from_it_on():
    from rlvr.records import Completion, Turn
    from rlvr.train.trajectories import training_view

    def traj(step_rewards: list[float]) -> Completion:
        turns, tokens = [], []
        for k, r in enumerate(step_rewards):
            turns.append(Turn("assistant", len(tokens), len(tokens) + 2, "x", info={"components": {"hit": r}}))
            tokens += [5, 1]
            if k < len(step_rewards) - 1:
                turns.append(Turn("env", len(tokens), len(tokens) + 1, "o"))
                tokens += [7]
        return Completion(
            "p",
            0,
            0,
            "x",
            [3],
            tokens,
            [0.0] * len(tokens),
            "env_done",
            loss_mask=[
                1 if any(t.role == "assistant" and t.start <= j < t.end for t in turns) else 0
                for j in range(len(tokens))
            ],
            turns=turns,
        )

    from rlvr.algos import group_advantages

    a, b = traj([1.0, 0.0, 1.0]), traj([0.0, 0.0, 0.0])
    shaped = torch.tensor([2.0, 0.0])  # totals: step rewards x weight 1
    adv = group_advantages(shaped, 2, eps=0.0)  # (r - mean) / std, std = sqrt(2) (Bessel-corrected)
    view = training_view(
        [a, b], adv, torch.ones(2), shaped, credit="turn", weights={"hit": 1.0}, group_size=2, scale="group", eps=0.0
    )
    assert view.owner == [0, 0, 0, 1, 1, 1]
    # A_k = A - (reward before turn k) / std: the return from turn k on, against the same baseline
    expected = [2**-0.5, 0.0, 0.0, -(2**-0.5), -(2**-0.5), -(2**-0.5)]
    assert view.advantages.tolist() == pytest.approx(expected, abs=1e-6)
    assert [len(s.prompt_ids) for s in view.sequences[:3]] == [1, 4, 7]  # the whole history before each turn


def test_frozenlake_environment_and_its_teacher():
    import random

    from rlvr.envs import env_class
    from rlvr.tasks.games import FrozenLakeTask, lake_teacher, shortest_path

    task = FrozenLakeTask(eval_size=5)
    held = task.held_out()
    train = [next(task.train_stream(0)) for _ in range(3)]
    assert len({p.prompt for p in held}) == 5 and not {p.prompt for p in held} & {p.prompt for p in train}
    p = held[0]
    env = env_class("frozenlake")(max_turns=12)
    assert env.reset(p, p.metadata["seed"]) == p.prompt and p.prompt.startswith("x")
    bad = env.step("jump")
    assert bad.components["invalid_action"] == -1.0 and not bad.done  # answered, the agent stays (LEFT at a wall)
    for move in shortest_path(env.desc):
        result = env.step(move)
    assert result.done and result.info["success"] and result.components["env"] == 1.0
    assert result.components["shaping"] > 0  # closer to the goal
    # the teacher's misconception walks right then down: on some maps into a hole
    demos = [lake_teacher(q, 1.0, random.Random(0)) for q in held]
    assert all(d[0] == ("R", True) for d in demos)


def test_breakout_from_ram_reports_its_two_components():
    from rlvr.envs import env_class
    from rlvr.tasks.games import breakout_start, breakout_teacher

    p = Problem(id="b", prompt=breakout_start(), source="breakout", verifier="env", metadata={"seed": 3})
    env = env_class("breakout")(max_turns=48)
    assert env.reset(p, 3) == p.prompt and p.prompt.startswith("b")
    total = {"brick": 0.0, "paddle": 0.0}
    for _ in range(48):
        r = env.step("N")
        for k in total:
            total[k] += r.components[k]
        if r.done:
            break
    env.close()
    assert r.done and 0 < total["paddle"] < 1  # a paddle that never moves loses the ball
    demo = breakout_teacher(p, 0.0, __import__("random").Random(0), turns=48)
    assert sum(1 for _, sampled in demo if sampled) == 48  # the tracking teacher keeps the ball in play


def test_rlvr_eval_and_compare_run_episodes(tmp_path, capsys):
    """An environment task through the CLI: success rate as greedy accuracy, pass@k over episodes."""
    import json

    from rlvr.cli import main
    from rlvr.models.tiny import save_tiny

    model = save_tiny(tmp_path / "tiny", hidden=32, layers=2, heads=2)
    out = tmp_path / "eval.json"
    args = ["--config", "configs/frozenlake.yaml", "--limit", "4", "--samples", "2", "--k", "1", "2"]
    assert main(["eval", str(model), *args, "--out", str(out), "eval.n=4"]) == 0
    fl = json.loads(out.read_text())["by_source"]["frozenlake"]
    assert fl["n"] == 4 and {"greedy_accuracy", "pass@1", "pass@2"} <= set(fl)
    assert (
        main(["compare", str(model), str(model), "--config", "configs/frozenlake.yaml", "--limit", "4", "eval.n=4"])
        == 0
    )
    assert "no significant difference" in capsys.readouterr().out


def test_held_out_evaluation_of_an_environment_reports_its_mean_return(tmp_path):
    """Training's greedy evaluation on real FrozenLake episodes, moves scripted: the shortest path on
    some maps, into the first hole on others, and a first turn cut at its token budget (no step: it
    earned 0). Success rate and mean return (1 at the goal) agree; logged as eval/return_mean, and
    reported by `rlvr eval` for the greedy and the sampled episodes."""
    from rlvr.config import load_config
    from rlvr.assembly import rule_reward
    from rlvr.evaluate import eval_metrics, evaluate, score_problems, summarize
    from rlvr.models import load_model
    from rlvr.models.tiny import save_tiny
    from rlvr.assembly import episode_spec
    from rlvr.rollout.episodes import run_episodes
    from rlvr.tasks.games import FrozenLakeTask, shortest_path

    cfg = load_config("configs/frozenlake.yaml")
    spec = episode_spec(cfg)
    _, tok = load_model(save_tiny(tmp_path / "tiny", hidden=32, layers=2, heads=2))
    problems = FrozenLakeTask(eval_size=6).held_out()

    def path(p):
        env = spec.make_env(p)
        env.reset(p, p.metadata["seed"])
        return shortest_path(env.desc)

    plans = {p.id: path(p) if k % 2 == 0 else "R" * 8 for k, p in enumerate(problems)}  # 3 paths
    plans[problems[-1].id] = ""  # cut before its first step

    class Scripted:  # the engine protocol on run_episodes, a plan per map instead of a model
        version, tokenizer = 0, tok

        def sample(self, contexts, params, group_size):
            (ctx,) = contexts
            if not self.plan:
                return [(tok("RR", add_special_tokens=False).input_ids, [0.0, 0.0], "length")]
            move, self.plan = self.plan[0], self.plan[1:]
            return [(tok(move, add_special_tokens=False).input_ids + [tok.eos_token_id], [0.0, 0.0], "stop")]

        def generate(self, problems, params, *, group_offset=0):
            (p,) = problems
            self.plan = plans[p.id]
            return run_episodes(self, problems, params, spec, group_offset=group_offset)

    with rule_reward(cfg) as reward:
        result = evaluate(Scripted(), problems, reward, max_new_tokens=2, batch_size=1)
    assert result["n"] == 6 and result["accuracy"] == pytest.approx(3 / 6)  # along the top row never reaches G
    assert result["return_mean"] == result["accuracy"]
    assert eval_metrics(result)["eval/return_mean"] == result["return_mean"]
    with rule_reward(cfg) as reward:  # the sampled episode replays its map's plan as the greedy one does
        outcomes = score_problems(Scripted(), problems, reward, max_new_tokens=2, samples=1, batch_size=1)
    assert [o.greedy_return for o in outcomes] == [o.returns[0] for o in outcomes] == [1.0, 0, 1.0, 0, 1.0, 0]
    report = summarize(outcomes, [1])["frozenlake"]
    assert report["greedy_return_mean"] == report["return_mean"] == report["greedy_accuracy"] == 3 / 6
