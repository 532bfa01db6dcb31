"""Evaluation statistics: pass@k, majority voting, and paired tests for A/B comparisons.

    pass_at_k(n, c, k)             unbiased estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)
    majority_correct(answers, ok)  the most frequent extracted answer (first seen wins ties) is correct
    mcnemar_exact(b, c)            two-sided exact McNemar p-value from the discordant counts
    paired_bootstrap(a, b, ...)    mean(b - a) and its percentile interval over resampled problems
    sign_flip_p(a, b, ...)         two-sided paired permutation test of mean(b - a) (any real outcomes:
                                   episode returns), exact for up to 16 non-zero differences

Free of torch: `rlvr sweep`'s own process compares its trials with it and imports no torch.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence

__all__ = ["majority_correct", "mcnemar_exact", "paired_bootstrap", "pass_at_k", "sign_flip_p", "verdict"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is
    correct. Computed as a product, stable for large n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """maj@k for one problem: the answer given most often among the samples (None: no answer,
    no vote; ties go to the answer seen first) is a correct one. No answer at all: incorrect."""
    votes = Counter(a for a in answers if a is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(a for a in answers if a is not None and votes[a] == top)
    return any(ok for a, ok in zip(answers, correct) if a == winner)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar test: b = pairs only A got right, c = pairs only B got right.
    Under H0 each discordant pair favours either with probability 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, iterations: int = 10000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(mean(b - a), low, high): the percentile interval of the mean paired difference over
    `iterations` resamples of the problems with replacement."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired samples need the same, non-zero length, got {len(a)} and {len(b)}")
    diffs = [y - x for x, y in zip(a, b)]
    n = len(diffs)
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(iterations))
    lo = means[int(math.floor((1 - confidence) / 2 * iterations))]
    hi = means[min(iterations - 1, int(math.ceil((1 + confidence) / 2 * iterations)) - 1)]
    return sum(diffs) / n, lo, hi


def sign_flip_p(a: Sequence[float], b: Sequence[float], *, iterations: int = 100000, seed: int = 0) -> float:
    """Two-sided p-value of the paired sign-flip test: under H0 each pair's difference b - a is as
    likely with either sign, so |sum of differences| is compared with its value under every (up to 16
    non-zero differences) or `iterations` random (Monte Carlo, counting the observed one) sign flips."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired samples need the same, non-zero length, got {len(a)} and {len(b)}")
    diffs = [y - x for x, y in zip(a, b) if y != x]
    observed = abs(sum(diffs)) - 1e-9 * (1 + sum(abs(d) for d in diffs))  # ties with the observed count
    if len(diffs) <= 16:
        hits = sum(
            abs(sum(d if mask >> i & 1 else -d for i, d in enumerate(diffs))) >= observed
            for mask in range(2 ** len(diffs))
        )
        return hits / 2 ** len(diffs)
    rng = random.Random(seed)
    hits = sum(abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed for _ in range(iterations))
    return (hits + 1) / (iterations + 1)


def verdict(p_value: float, diff: float, alpha: float = 0.05) -> str:
    """One line: which is better at level alpha (McNemar), or neither."""
    if p_value >= alpha or diff == 0:
        return f"no significant difference (p = {p_value:.3g} >= {alpha:g})"
    return f"{'B' if diff > 0 else 'A'} is better (p = {p_value:.3g} < {alpha:g})"


def paired_report(a: list[float], b: list[float], *, alpha: float, iterations: int, seed: int) -> dict:
    """Accuracies, their difference with its bootstrap interval, McNemar on 0/1 outcomes, the verdict."""
    diff, lo, hi = paired_bootstrap(a, b, iterations=iterations, seed=seed, confidence=1 - alpha)
    only_a = sum(x >= 1 and y < 1 for x, y in zip(a, b))
    only_b = sum(x < 1 and y >= 1 for x, y in zip(a, b))
    p = mcnemar_exact(only_a, only_b)
    return {
        "a": sum(a) / len(a),
        "b": sum(b) / len(b),
        "diff": diff,
        "ci": [lo, hi],
        "only_a": only_a,
        "only_b": only_b,
        "mcnemar_p": p,
        "verdict": verdict(p, diff, alpha),
    }
