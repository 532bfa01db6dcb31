from rlvr.kernels import start_as_rlvr

start_as_rlvr()  # before torch loads, as the `rlvr` command does: runs in this process and in its subprocesses agree

import pytest  # noqa: E402  (after the pin above: torch must not load first)
from ops_tiny import OPS_TINY  # noqa: E402

# A tiny, fast run that still learns something (varied rewards, so updates move the weights).
TINY = OPS_TINY + ["train.steps=3", "eval.n=24", "ckpt.every=2"]


@pytest.fixture(scope="session")
def sft_cache(tmp_path_factory):
    """One SFT cache for the whole session, so each tiny run does SFT at most once per config."""
    return tmp_path_factory.mktemp("sft-cache")


@pytest.fixture
def tiny_overrides(tmp_path, sft_cache):
    return TINY + [f"run.dir={tmp_path / 'run'}", f"sft.cache_dir={sft_cache}"]


@pytest.fixture(scope="module")
def host():
    """One environment worker process for a module's agent episodes."""
    from rlvr.envs.host import ProcessHost

    host = ProcessHost(1)
    yield host
    host.shutdown()
