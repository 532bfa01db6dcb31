"""On-policy distillation (algo.distill): per-token reverse-KL advantages toward a teacher on the
student's own samples."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.algos import distill_advantages, reverse_kl
from rlvr.cli import main
from rlvr.models.tiny import save_tiny


def test_distill_advantages_by_hand():
    adv = torch.tensor([1.0, -0.5])  # (S,)
    student = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.1, -3.0]])  # (S, T)
    teacher = torch.tensor([[-0.5, -3.0, -9.0], [-0.5, -1.1, -1.0]])  # (S, T)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])  # padding, and a token the environment appended
    out = distill_advantages(adv, student, teacher, mask, coef=2.0)
    assert out.tolist() == [[1.0 + 2 * 0.5, 1.0 - 2 * 1.0, 0.0], [-0.5 + 0.0, 0.0, -0.5 + 2 * 2.0]]
    alone = distill_advantages(adv, student, teacher, mask, coef=1.0, rewards=False)
    assert alone.tolist() == [[0.5, -1.0, 0.0], [0.0, 0.0, 2.0]]
    assert reverse_kl(student, teacher, mask) == pytest.approx((-0.5 + 1.0 + 0.0 - 2.0) / 4)
    with pytest.raises(ValueError, match="one shape"):
        distill_advantages(adv, student, teacher[:, :2], mask, coef=1.0)


def test_a_student_moves_toward_its_teacher_and_bad_teachers_are_config_errors(tiny_overrides, tmp_path, capsys):
    """Distilling alone from a teacher of the same tokenizer (a tiny model of other weights): the
    reverse KL of the student's samples to it falls; a teacher that does not load, of another
    tokenizer is refused before the first step with the key named."""
    save_tiny(tmp_path / "teacher", hidden=32, layers=2, heads=2, seed=7)
    overrides = [
        *tiny_overrides,
        "train.steps=12",
        "train.lr=2e-3",
        f"algo.distill.teacher={tmp_path / 'teacher'}",
        "algo.distill.rewards=false",
        "alerts.reward_collapse_frac=0",
    ]  # a random teacher: reward falls
    assert main(["train", *overrides]) == 0
    run = next(o.split("=", 1)[1] for o in tiny_overrides if o.startswith("run.dir="))
    rows = [json.loads(line) for line in open(f"{run}/metrics.jsonl")]
    kl = [r["distill/reverse_kl"] for r in rows if "distill/reverse_kl" in r]
    assert len(kl) == 12 and all("time/teacher_s" in r for r in rows if "distill/reverse_kl" in r)
    assert sum(kl[-3:]) / 3 < 0.7 * sum(kl[:3]) / 3, kl

    save_tiny(tmp_path / "other", hidden=32, layers=1, heads=2, code_chars=True)
    for teacher, message in [
        (tmp_path / "other", "has another tokenizer than the policy"),
        (tmp_path / "missing", "does not load"),
    ]:
        capsys.readouterr()
        assert main(["train", *tiny_overrides, f"algo.distill.teacher={teacher}"]) == 2
        err = capsys.readouterr().err
        assert "algo.distill.teacher" in err and message in err, err
    from rlvr.config import load_config
    from rlvr.configlib import ConfigError

    with pytest.raises(ConfigError, match="algo.distill.coef: must be > 0"):
        load_config(None, ["algo.distill.coef=0"])


def test_the_plan_counts_the_teacher():
    """`rlvr plan`: the teacher's weights in the inference pool, and its log-prob pass in the step's FLOPs."""
    from rlvr.config import load_config
    from rlvr.cli.plan import run_plan
    from rlvr.plan import GB, Cluster, shape_for_params

    shape, teacher = shape_for_params(0.5e9), 1.7e9
    alone = run_plan(load_config(None, []), shape, Cluster(), prompt_len=24)
    taught = run_plan(
        load_config(None, ["algo.distill.teacher=t"]), shape, Cluster(), prompt_len=24, teacher_params=int(teacher)
    )
    assert taught["pools"]["inference"]["terms_gb"]["teacher_weights"] == pytest.approx(4 * teacher / GB, rel=1e-6)
    assert "teacher_weights" not in alone["pools"]["inference"]["terms_gb"]
    extra = taught["flops_per_step"]["logprob_passes"] - alone["flops_per_step"]["logprob_passes"]
    assert extra == pytest.approx(2 * teacher * taught["tokens_per_step"], rel=1e-6)
