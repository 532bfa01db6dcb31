import copy
import dataclasses
import threading

import pytest
import torch

from rlvr.rollout.controls import NewWeights
from rlvr.rollout.episodes import SINGLE_TURN
from rlvr.rollout.hf import HFEngine
from rlvr.rollout.loop import LoopEngine
from rlvr.scoring import completion_logprobs
from rlvr.models.tiny import build_tiny_model, build_tokenizer
from rlvr.records import Problem
from helpers import sample

from rlvr.rollout import SamplingParams


def _model():
    tok = build_tokenizer()
    return build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=0), tok


def test_groups_token_ids_and_behaviour_logprobs():
    model, tok = _model()
    problems = [Problem(id="a", prompt="1+2="), Problem(id="b", prompt="345+67=")]  # prompts of different lengths
    torch.manual_seed(0)
    out = sample(model, tok, problems, SamplingParams(group_size=3, max_new_tokens=10), group_offset=10)
    assert [(c.problem_id, c.group_id, c.index) for c in out] == [
        ("a", 10, 0),
        ("a", 10, 1),
        ("a", 10, 2),
        ("b", 11, 0),
        ("b", 11, 1),
        ("b", 11, 2),
    ]
    for c in out:
        assert len(c.logprobs) == len(c.token_ids) >= 1
        assert c.finish_reason == ("stop" if c.token_ids[-1] == tok.eos_token_id else "length")
        if c.finish_reason == "length":
            assert len(c.token_ids) == 10
    # the trainer re-scores completions right-padded; left-padded sampling must agree with it
    recomputed = completion_logprobs(model, out, tok.pad_token_id, temperature=1.0)
    for i, c in enumerate(out):
        assert torch.allclose(recomputed[i, : len(c.token_ids)], torch.tensor(c.logprobs), atol=1e-4)


def test_temperature_scales_behaviour_logprobs():
    model, tok = _model()
    problems = [Problem(id="a", prompt="12+3=")]
    torch.manual_seed(1)
    out = sample(model, tok, problems, SamplingParams(group_size=2, max_new_tokens=6, temperature=1.5))
    recomputed = completion_logprobs(model, out, tok.pad_token_id, temperature=1.5)
    for i, c in enumerate(out):
        assert torch.allclose(recomputed[i, : len(c.token_ids)], torch.tensor(c.logprobs), atol=1e-4)


def test_greedy_is_deterministic():
    model, tok = _model()
    problems = [Problem(id="a", prompt="12+3=")]
    a = sample(model, tok, problems, SamplingParams(greedy=True, max_new_tokens=8))
    b = sample(model, tok, problems, SamplingParams(greedy=True, max_new_tokens=8))
    assert len(a) == 1 and a[0].token_ids == b[0].token_ids


class ArrivesAt(threading.Event):
    """Set as of its n-th look: weights that arrive while the engine runs its first decode step (the
    episodes look once before the turn, the engine once per step)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.looks, self.n = 0, n

    def is_set(self) -> bool:
        self.looks += 1
        if self.looks == self.n:
            self.set()
        return super().is_set()


@pytest.mark.parametrize("engine_cls", [LoopEngine, HFEngine])
def test_rows_stopped_for_new_weights_go_on_with_them_each_token_with_its_version(engine_cls):
    """Partial rollouts: new weights arrive during the first decode step; every unfinished row stops
    after one token, takes them and is sampled on. Each token keeps the version, and the behaviour
    log-prob, of the weights that sampled it."""
    model, tok = _model()
    old, new = copy.deepcopy(model), build_tiny_model(tok, hidden=32, layers=2, heads=2, seed=1)
    arrived, taken = ArrivesAt(2), []

    def take():
        engine.load_weights(new.state_dict().items(), engine.version + 1)
        taken.append(engine.version)
        arrived.clear()

    spec = dataclasses.replace(SINGLE_TURN, new_weights=NewWeights(arrived, take))
    engine = engine_cls(model, tok, episodes=spec)
    torch.manual_seed(0)
    out = engine.generate(
        [Problem(id="a", prompt="12+3="), Problem(id="b", prompt="45+6=")],
        SamplingParams(group_size=4, max_new_tokens=8),
    )
    assert taken == [1]
    partial = [c for c in out if c.token_versions is not None]
    assert len(partial) >= 6  # rows that did not end on their first token
    for c in out:
        versions = c.token_versions or [c.policy_version] * len(c.token_ids)
        assert c.policy_version == 0 and versions[0] == 0 and set(versions[1:]) <= {1}
        assert len(c.token_ids) <= 8 and c.finish_reason == (
            "stop" if c.token_ids[-1] == tok.eos_token_id else "length"
        )
    by_old = completion_logprobs(old, out, tok.pad_token_id, temperature=1.0)
    by_new = completion_logprobs(new, out, tok.pad_token_id, temperature=1.0)
    for i, c in enumerate(out):
        for t, v in enumerate(c.token_versions or []):
            assert c.logprobs[t] == pytest.approx(float((by_old if v == 0 else by_new)[i, t]), abs=1e-4)
