import pytest

# A tiny, fast configuration shared by the end-to-end tests (seconds, not minutes).
TINY = [
    "model.tiny_hidden=32", "model.tiny_layers=2", "model.tiny_heads=2",
    "task.max_digits=2", "sft.steps=30", "sft.batch_size=32", "sft.examples=2000",
    "rollout.batch_size=4", "rollout.group_size=4", "rollout.max_new_tokens=24",
    "train.steps=3", "eval.n=24", "eval.every=0", "ckpt.every=2", "run.progress=false",
    "log.tensorboard=false",
]


@pytest.fixture(scope="session")
def sft_cache(tmp_path_factory):
    """One SFT cache for the whole session, so each tiny run does SFT at most once per config."""
    return tmp_path_factory.mktemp("sft-cache")


@pytest.fixture
def tiny_overrides(tmp_path, sft_cache):
    return TINY + [f"run.dir={tmp_path / 'run'}", f"sft.cache_dir={sft_cache}"]
