"""Property-based fuzzing of the math verifier (tests/math_fuzz.py), a bounded number of
examples per property; `bench/bench_math_fuzz.py` runs the long profile."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from math_fuzz import PROPERTIES
from rlvr.config.reward import MathConfig
from rlvr.rewards.math_verifier import MathVerifier

EXAMPLES = 60


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(MathConfig())
    yield v
    v.close()


@pytest.mark.parametrize("name", sorted(PROPERTIES))
def test_property(verifier, name):
    check, strategy = PROPERTIES[name]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(strategy)
    def holds(case):
        message = check(verifier, case)
        assert message is None, message

    holds()
