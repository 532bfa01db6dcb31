"""On-policy distillation: the student samples, a teacher scores the sampled tokens.

Each sampled token y_t of the student's own completion gets the advantage

    A_t = A + coef * (log p_teacher(y_t | y_<t) - log p_student(y_t | y_<t))

where A is the completion's group advantage from the verifier (0 when distilling alone) and the
student's log-prob is the behaviour policy's (the one that sampled). The second term is the
negative per-token reverse KL, KL(student || teacher) estimated on the student's samples (k1):
the clipped policy gradient with it minimises the reverse KL, mode-seeking, on exactly the states
the student visits (Agarwal et al. 2024, "On-Policy Distillation of Language Models", GKD with
lambda = 1; Thinking Machines, "On-Policy Distillation", 2025: per-token reverse KL as the
advantage, no discounting). The teacher must share the student's tokenizer.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["distill_advantages", "reverse_kl"]


def distill_advantages(
    advantages: Tensor, student_logp: Tensor, teacher_logp: Tensor, mask: Tensor, *, coef: float, rewards: bool = True
) -> Tensor:
    """(S, T) per-token advantages from sequence advantages (S,), the behaviour log-probs (S, T) of the
    sampled tokens, the teacher's (S, T) and the token mask (S, T) (0 where no token was sampled:
    padding, or tokens the environment appended). fp32, no gradient."""
    if student_logp.shape != teacher_logp.shape or student_logp.shape != mask.shape:
        raise ValueError(
            f"student {tuple(student_logp.shape)}, teacher {tuple(teacher_logp.shape)} and mask "
            f"{tuple(mask.shape)} log-probs must have one shape (S, T)"
        )
    gap = (teacher_logp.detach().float() - student_logp.detach().float()) * (mask != 0)  # (S, T)
    base = advantages.detach().float()[:, None] if rewards else torch.zeros_like(gap[:, :1])  # (S, 1)
    return (base + coef * gap) * (mask != 0)  # (S, T)


def reverse_kl(student_logp: Tensor, teacher_logp: Tensor, mask: Tensor) -> float:
    """Token mean of log p_student - log p_teacher over the sampled tokens (k1 estimate of KL(student || teacher))."""
    m = (mask != 0).float()  # (S, T)
    return float(((student_logp.float() - teacher_logp.float()) * m).sum() / m.sum().clamp(min=1))
