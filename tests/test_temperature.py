"""The sampling temperature picked before RL (rollout.auto_temperature, rlvr.train.temperature)."""

from __future__ import annotations

import pytest
import yaml
from ops_tiny import events, metric_rows

from rlvr.cli import main
from rlvr.config import AutoTemperatureConfig
from rlvr.train.temperature import search, temperatures


def test_the_search_takes_the_first_temperature_that_reaches_the_target_else_the_best():
    signal = {0.6: 0.25, 0.7: 0.4, 0.8: 0.65, 0.9: 0.9, 1.0: 0.5}
    seen = []

    def measure(t: float) -> tuple[float, float]:
        seen.append(t)
        return signal[t], 0.5

    auto = AutoTemperatureConfig(target=0.6, step=0.1, max=1.0)
    t, probes = search(0.6, auto, measure)
    assert t == 0.8 and seen == [0.6, 0.7, 0.8] and [p.signal for p in probes] == [0.25, 0.4, 0.65]
    seen.clear()
    t, probes = search(0.6, AutoTemperatureConfig(target=0.95, step=0.1, max=1.0), measure)
    assert t == 0.9 and seen == [0.6, 0.7, 0.8, 0.9, 1.0]  # none reaches it: the most signal
    flat = search(0.6, AutoTemperatureConfig(target=0.95, step=0.1, max=1.0), lambda t: (0.0, 0.0))[0]
    assert flat == 0.6  # nothing to gain: the configured temperature stays
    assert temperatures(1.0, 0.1, 1.5) == [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]
    assert temperatures(1.6, 0.1, 1.5) == [1.6]


def test_a_sharp_cold_start_samples_hotter_and_a_run_whose_temperature_stays_is_unchanged(tiny_overrides, tmp_path):
    """From a cold start at T=0.05 the groups agree: the run measures higher temperatures and trains at
    the first that reaches the target (config.yaml, the event and the update all say it). Where the
    configured temperature reaches the target at once, the measurement leaves the run's random streams
    alone: its metrics equal those of a run that never measured."""
    run = next(o.split("=", 1)[1] for o in tiny_overrides if o.startswith("run.dir="))
    base = [
        *tiny_overrides,
        "train.steps=2",
        "ckpt.every=0",
        "log.report=false",
        "rollout.auto_temperature.when=cold_start",
    ]
    assert (
        main(
            [
                "train",
                *base,
                "rollout.temperature=0.05",
                "rollout.auto_temperature.target=0.5",
                "rollout.auto_temperature.step=0.5",
            ]
        )
        == 0
    )
    (picked,) = events(run, "temperature_picked")
    probes = picked["probes"]
    assert probes[0]["temperature"] == 0.05 and probes[0]["signal"] < 0.5, probes
    assert picked["temperature"] > 0.05 and picked["temperature"] == probes[-1]["temperature"]
    assert yaml.safe_load(open(f"{run}/config.yaml"))["rollout"]["temperature"] == picked["temperature"]

    def run_rows(*extra: str) -> list[dict]:
        assert main(["train", *base, *extra]) == 0
        return metric_rows(run)

    stays = run_rows("rollout.auto_temperature.target=0.01")
    (kept,) = events(run, "temperature_picked")
    assert kept["temperature"] == 1.0 and len(kept["probes"]) == 1
    assert stays == run_rows("rollout.auto_temperature.when=never") and not events(run, "temperature_picked")


def test_only_a_cold_start_is_measured_by_default(tmp_path):
    """`when: cold_start` (the default): a run from the base model (sft.steps=0) samples at the temperature
    set, and measures nothing."""
    from rlvr.config import load_config
    from rlvr.console import RunConsole
    from rlvr.models.tiny import save_tiny
    from rlvr.assembly import auto_temperature

    save_tiny(tmp_path / "base", hidden=32, layers=1, heads=2)
    cfg = load_config(None, ["sft.steps=0"])
    assert cfg.rollout.auto_temperature.when == "cold_start"
    same, picked = auto_temperature(cfg, RunConsole(False), lambda: tmp_path / "base")
    assert same is cfg and picked is None
    with pytest.raises(Exception, match="rollout.auto_temperature.target: must be in"):
        load_config(None, ["rollout.auto_temperature.target=0"])
