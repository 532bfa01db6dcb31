"""Two Ray nodes on this machine that share no path: the pools spread across them, the FSDP trainer
ranks on different nodes, the run directory at an s3:// URL (moto's server, its own process on
127.0.0.1). Node b's processes run in mount namespaces of their own where everything of the
driver's (the test's temporary files, the cold start, the trainers' local run caches) is covered
by an empty tmpfs, and each node ships into a cache of its own: what reaches node b is what rlvr
ships (the object store) or commits at the URL."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("s3fs")
pytest.importorskip("moto")

from ray.cluster_utils import Cluster  # noqa: E402
from s3_server import s3_server  # noqa: E402
from test_ray import TINY  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.assembly.on_ray import train_on_ray  # noqa: E402
from rlvr.models import load_model  # noqa: E402
from rlvr.storage import RunStore  # noqa: E402
from rlvr.assembly import run_sft  # noqa: E402


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    driver = tmp_path_factory.getbasetemp()  # every file the test (the driver) has
    runs = Path(".cache/runs").resolve()  # the trainers' local run caches (actors start in the driver's directory)
    runs.mkdir(parents=True, exist_ok=True)
    own = {n: Path(tempfile.mkdtemp(prefix=f"rlvr-node-{n}-")) for n in "ab"}  # where each node materializes
    hide = Path(__file__).with_name("hide_paths.sh")
    with s3_server() as s3:
        cluster = Cluster()
        cluster.add_node(num_cpus=4, env_vars={"RLVR_SHIP_CACHE": str(own["a"])})
        cluster.add_node(
            num_cpus=4,
            env_vars={"RLVR_SHIP_CACHE": str(own["b"]), "RLVR_HIDDEN": ":".join(map(str, (driver, runs, own["a"])))},
        )
        ray.init(
            address=cluster.address,
            include_dashboard=False,
            logging_level="WARNING",
            log_to_driver=False,
            runtime_env={
                "py_executable": f"unshare --mount --propagation private sh {hide} {sys.executable}",
                "env_vars": s3,
            },
        )
        try:
            yield driver
        finally:
            ray.shutdown()
            cluster.shutdown()
            for d in own.values():
                shutil.rmtree(d, ignore_errors=True)


def url_rows(url: str, name: str) -> list[dict]:
    store = RunStore(url, Path("unused"))
    return [json.loads(line) for line in store.fs.cat(store._remote(name)).decode().splitlines()]


@pytest.mark.slow
def test_fsdp_ranks_on_two_nodes_killed_and_resumed_from_the_url_match_one_node(two_nodes, tmp_path):
    @ray.remote(num_cpus=0)
    def look(paths: list[str]) -> tuple[str, list[list[str]]]:
        return ray.get_runtime_context().get_node_id(), [sorted(p.name for p in Path(d).iterdir()) for d in paths]

    views = dict(
        ray.get(
            [
                look.options(
                    scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                        n["NodeID"], soft=False
                    )
                ).remote([str(two_nodes)])
                for n in ray.nodes()
            ]
        )
    )
    assert sorted(len(v[0]) == 0 for v in views.values()) == [False, True]  # node b sees nothing of the driver's

    sft_dir = tmp_path / "sft"
    common = [
        *TINY,
        f"sft.cache_dir={sft_dir}",
        "deploy.backend=ray",
        "algo.beta=0.04",
        "train.strategy=fsdp",
        "deploy.pools.trainer.replicas=2",
        "deploy.pools.rollout.replicas=2",
        "deploy.pools.rollout.strategy=STRICT_SPREAD",
        *(f"deploy.pools.{m}.cpus=1" for m in ("rollout", "reward", "inference", "trainer")),
    ]
    run_sft(load_config(None, common))
    # the trainer's ranks on one node, never interrupted; then on two nodes, rank 0 killed (SIGKILL) at step 2
    one = train_on_ray(
        load_config(None, [*common, "run.dir=s3://runs/one-node", "deploy.pools.trainer.strategy=STRICT_PACK"])
    )
    two = train_on_ray(
        load_config(
            None,
            [
                *common,
                "run.dir=s3://runs/two-nodes",
                "deploy.pools.trainer.strategy=STRICT_SPREAD",
                "deploy.kill_trainer_at_step=2",
            ],
        )
    )
    assert one["status"] == two["status"] == "completed" and one["steps"] == two["steps"] == 3

    events = url_rows("s3://runs/two-nodes", "events.jsonl")
    placed = [e for e in events if e["kind"] == "placement"]
    trainers = {(e["attempt"], e["replica"]): e["node"] for e in placed if e["module"] == "trainer"}
    assert len(trainers) == 4 and all(trainers[a, 0] != trainers[a, 1] for a in (0, 1))  # ranks on two nodes
    assert len({e["node"] for e in placed if e["module"] == "rollout"}) == 2  # a rollout worker on each node
    assert [e["attempt"] for e in events if e["kind"] == "trainer_restarted"] == [1]
    assert [e["step"] for e in events if e["kind"] == "resume"] == [1]  # from what the URL committed
    placed = [e for e in url_rows("s3://runs/one-node", "events.jsonl") if e["kind"] == "placement"]
    assert len({e["node"] for e in placed if e["module"] == "trainer"}) == 1

    def strip(r):
        return {k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "sync/seconds"))}

    steps = {
        u: [strip(r) for r in url_rows(f"s3://runs/{u}", "metrics.jsonl") if "reward/mean" in r]
        for u in ("one-node", "two-nodes")
    }
    assert [r["step"] for r in steps["two-nodes"]] == [1, 2, 3]
    assert steps["two-nodes"] == steps["one-node"]  # the same figures, bit for bit
    for u in ("one-node", "two-nodes"):
        store = RunStore(f"s3://runs/{u}", Path("unused"))
        assert store.committed()[0][-1] == "step_000003"
        assert store.fs.exists(store._remote("ranks", "rank_1", "metrics.jsonl"))  # rank 1's log, from its node
    weights = [load_model(f"s3://runs/{u}/model")[0].state_dict() for u in ("one-node", "two-nodes")]
    assert all(weights[0][k].equal(weights[1][k]) for k in weights[0])
