"""The go-live acceptance list of `rlvr check`, run against the configured setup: the same
model loading, rollout engine, update settings and optimizer as `rlvr train`.

Each line runs on its own (one that crashes fails with the error as its
detail) and reports a measured figure:

    sampling     fixed prompts answer, none empty or cut at max_new_tokens; tokens/s
    reference    reference log-probs finite and equal to the policy's at step 0
    rewards      the same responses scored twice give the same rewards
    train step   one update runs and changes the weights
    checkpoint   save + restore gives identical weights and optimizer state; manifest verifies
    memory       resident memory does not grow over a few training steps
    alerts       a test alert reaches every sink (console, events.jsonl, webhook if configured)
"""

from __future__ import annotations

import copy
import json
import math
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from rlvr.runlog import RunLog, read_jsonl

CHECK_PROMPTS = 8  # fixed held-out prompts used by every line
MEMORY_STEPS = 4
MEMORY_SLACK_MB = 64.0  # growth allowed between the first and the last measured step


@dataclass
class CheckLine:
    name: str
    ok: bool
    figure: str
    detail: str = ""


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() / 2**20
    except OSError:  # not Linux: peak RSS is the best there is
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Setup:
    """Model, tokenizer, engine, reward, fixed prompts and one sampled batch, shared by the lines."""

    def __init__(self, cfg, ui):
        from rlvr.assembly import policy, rule_reward, run_task, starting_point

        self.cfg, self.ui = cfg, ui
        torch.manual_seed(cfg.seed)
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        self.start_path = starting_point(cfg, ui)
        self.model, self.tokenizer = policy(cfg, self.start_path)
        self.reward = rule_reward(cfg)
        self.task = run_task(cfg)
        self.prompts = self.task.held_out()[:CHECK_PROMPTS]
        self.completions = None

    def engine(self, model=None):
        """The run's rollout engine (rollout.engine) on `model` (default: the loaded policy)."""
        from rlvr.assembly import episode_spec, rollout_engine

        return rollout_engine(
            self.cfg, self.model if model is None else model, self.tokenizer, episodes=episode_spec(self.cfg)
        )

    def params(self, greedy: bool = False):
        from rlvr.rollout import sampling_params

        return sampling_params(self.cfg.rollout, greedy=greedy)

    def batch(self):
        if self.completions is None:
            self.completions = self.engine().generate(self.prompts, self.params())
        return self.completions

    def optimizer(self, model):
        from rlvr.train.update import build_optimizer

        return build_optimizer(self.cfg.train, model)

    def update(self, model, optimizer, completions) -> dict[str, float]:
        """One policy update on `completions`; where every group ties, a +1/-1 pattern stands in for
        the advantages so the line checks the update path, not the reward signal."""
        from rlvr.algos import group_advantages
        from rlvr.train.update import policy_update, update_settings

        g = self.cfg.rollout.group_size
        problems = [self.prompts[i // g] for i in range(len(completions))]
        from rlvr.rewards import env_kwargs
        from rlvr.train.trajectories import training_view

        results = self.reward.score(problems, [c.text for c in completions], **env_kwargs(completions))
        rewards = torch.tensor([r.total for r in results], dtype=torch.float32)  # (N,)
        adv = group_advantages(rewards, g)  # (N,)
        if not bool(adv.abs().sum() > 0):
            adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(completions))])  # (N,)
        mask = torch.ones(len(completions))
        view = training_view(
            completions,
            adv,
            mask,
            rewards,
            credit=self.cfg.env.credit,
            weights=self.reward.weights,
            group_size=g,
            scale=self.cfg.algo.scale,
            eps=self.cfg.algo.eps,
        )
        if view is not None:  # turns trained in the context they were sampled in
            completions, adv, mask = view.sequences, view.advantages, view.loss_mask
        c = self.cfg
        return policy_update(
            model,
            optimizer,
            completions,
            adv,
            mask,
            None,
            self.tokenizer.pad_token_id,
            update_settings(c.algo, c.train, c.rollout, c.model.dtype),
            generator=torch.Generator().manual_seed(self.cfg.seed),
        )


def check_sampling(s: _Setup) -> CheckLine:
    greedy = s.engine().generate(s.prompts, s.params(greedy=True))
    t0 = time.perf_counter()
    sampled = s.batch()
    dt = time.perf_counter() - t0
    tokens = sum(len(c.token_ids) for c in sampled)
    empty = sum(not c.text.strip() for c in greedy + sampled)
    cut = sum(c.finish_reason == "length" for c in greedy + sampled)
    n = len(greedy) + len(sampled)
    ok = empty == 0 and cut == 0
    return CheckLine(
        "sampling",
        ok,
        f"{tokens / dt:.0f} tok/s; {empty} empty, {cut} cut of {n}",
        ""
        if ok
        else f"responses cut at rollout.max_new_tokens={s.cfg.rollout.max_new_tokens} or empty: "
        "raise max_new_tokens or train the cold start longer",
    )


def check_reference(s: _Setup) -> CheckLine:
    from rlvr.assembly import reference_model

    completions = s.batch()
    ref = reference_model(s.cfg, s.model, s.tokenizer)
    logp = ref.logprobs(completions)  # (N, T)
    diffs, finite = [], True
    for i, c in enumerate(completions):
        row = logp[i, : len(c.token_ids)]
        finite &= bool(torch.isfinite(row).all())
        diffs += (row - torch.tensor(c.logprobs)).abs().tolist()
    worst = max(diffs, default=0.0)
    tol = 1e-3 if s.cfg.model.dtype == "float32" else 5e-2
    ok = finite and worst <= tol
    return CheckLine(
        "reference",
        ok,
        f"max |ref - policy| = {worst:.2e} over {len(diffs)} tokens (tol {tol:g})",
        "" if finite else "non-finite reference log-probs",
    )


def check_rewards(s: _Setup) -> CheckLine:
    completions = s.batch()
    g = s.cfg.rollout.group_size
    problems = [s.prompts[i // g] for i in range(len(completions))]
    texts = [c.text for c in completions]
    from rlvr.rewards import env_kwargs

    first = s.reward.score(problems, texts, **env_kwargs(completions))
    second = s.reward.score(problems, texts, **env_kwargs(completions))
    differ = sum((a.total, a.components, a.valid) != (b.total, b.components, b.valid) for a, b in zip(first, second))
    invalid = sum(not r.valid for r in first)
    return CheckLine(
        "rewards",
        differ == 0,
        f"{differ} of {len(texts)} differ when scored twice; {invalid} invalid",
        "" if differ == 0 else "a reward depends on something besides the response: time, order, randomness",
    )


def check_train_step(s: _Setup) -> CheckLine:
    model = copy.deepcopy(s.model)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    stats = s.update(model, s.optimizer(model), s.batch())
    delta = math.sqrt(sum(float((v - before[k]).float().pow(2).sum()) for k, v in model.state_dict().items()))
    norm = math.sqrt(sum(float(v.float().pow(2).sum()) for v in before.values()))
    ok = delta > 0 and math.isfinite(delta) and not stats.get("actor/skipped_updates")
    return CheckLine(
        "train step",
        ok,
        f"|dW|/|W| = {delta / max(norm, 1e-12):.2e}; loss {stats.get('actor/loss', float('nan')):.4f}",
        "" if ok else "the update did not change the weights (or was skipped as non-finite)",
    )


def check_checkpoint(s: _Setup) -> CheckLine:
    from rlvr.checkpoint import Checkpointer, latest_valid, load_weights, state_digest, verify

    model = copy.deepcopy(s.model)
    opt = s.optimizer(model)
    s.update(model, opt, s.batch())
    with tempfile.TemporaryDirectory(prefix="rlvr-check-") as tmp:
        ckpt = Checkpointer(Path(tmp), config_hash="check", keep=1)
        t0 = time.perf_counter()
        ckpt.save(1, model, s.tokenizer, {"optimizer": opt.state_dict()})
        dt = time.perf_counter() - t0
        found = latest_valid(Path(tmp))
        problem = verify(found.path) if found else "no checkpoint found after saving"
        restored = copy.deepcopy(s.model)
        load_weights(restored, found.model_dir)
        opt2 = s.optimizer(restored)
        opt2.load_state_dict(found.trainer_state()["optimizer"])
        same_w = state_digest(restored.state_dict()) == state_digest(model.state_dict())
        same_o = _same_optimizer(opt.state_dict(), opt2.state_dict())
    ok = problem is None and same_w and same_o
    return CheckLine(
        "checkpoint",
        ok,
        f"saved and verified in {dt:.2f} s; weights {'identical' if same_w else 'DIFFER'}, "
        f"optimizer {'identical' if same_o else 'DIFFERS'}",
        problem or "",
    )


def _same_optimizer(a: dict, b: dict) -> bool:
    if a["param_groups"] != b["param_groups"] or a["state"].keys() != b["state"].keys():
        return False
    return all(
        torch.equal(torch.as_tensor(a["state"][k][n]), torch.as_tensor(b["state"][k][n]))
        for k in a["state"]
        for n in a["state"][k]
    )


def check_memory(s: _Setup) -> CheckLine:
    model = copy.deepcopy(s.model)
    engine = s.engine(model)
    opt = s.optimizer(model)
    rss = []
    for _ in range(MEMORY_STEPS):
        completions = engine.generate(s.prompts[:4], s.params())
        s.update(model, opt, completions)
        rss.append(_rss_mb())
    growth = rss[-1] - rss[1]  # the first step allocates optimizer state and caches
    gpu = ""
    if torch.cuda.is_available():
        gpu = f"; GPU peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB"
    ok = growth <= MEMORY_SLACK_MB
    return CheckLine(
        "memory",
        ok,
        f"RSS {rss[1]:.0f} -> {rss[-1]:.0f} MiB over {MEMORY_STEPS - 1} steps (+{growth:.0f}){gpu}",
        "" if ok else f"grew more than {MEMORY_SLACK_MB:.0f} MiB: something holds on to step data",
    )


def check_alerts(s: _Setup) -> CheckLine:
    from rlvr.ops.alerts import Alert
    from rlvr.ops.notify import Notifier, Webhook

    a = s.cfg.alerts
    with tempfile.TemporaryDirectory(prefix="rlvr-check-") as tmp:
        log = RunLog(Path(tmp), {})
        webhook = Webhook(a.webhook_url, timeout_s=a.webhook_timeout_s) if a.webhook_url else None
        alert = Alert("check", 0, "rlvr check: test alert, please ignore", "warning")
        Notifier(log, s.ui, None).send(alert)  # console + events.jsonl
        log.close()
        in_events = any(e.get("rule") == "check" for e in read_jsonl(Path(tmp) / "events.jsonl"))
    sinks = ["console", "events.jsonl" + ("" if in_events else " (MISSING)")]
    ok, detail = in_events, ""
    if webhook is not None:
        t0 = time.perf_counter()
        delivered, status = webhook.post_now({"source": "rlvr", "kind": "alert", **alert.record()})
        sinks.append(f"webhook {status} in {time.perf_counter() - t0:.2f} s")
        ok = ok and delivered
        detail = "" if delivered else f"webhook (alerts.webhook_url): {status}"
        webhook.close(wait_s=0.1)
    else:
        sinks.append("no webhook configured")
    return CheckLine("alerts", ok, "; ".join(sinks), detail)


CHECKS: list[Callable[[_Setup], CheckLine]] = [
    check_sampling,
    check_reference,
    check_rewards,
    check_train_step,
    check_checkpoint,
    check_memory,
    check_alerts,
]


def run_checks(cfg, ui) -> list[CheckLine]:
    setup = _Setup(cfg, ui)
    lines = []
    try:
        for check in CHECKS:
            name = check.__name__.removeprefix("check_").replace("_", " ")
            try:
                line = check(setup)
            except Exception as exc:  # noqa: BLE001 - a crashing line is a failing line, with its reason
                line = CheckLine(name, False, "error", f"{type(exc).__name__}: {exc}")
            lines.append(line)
    finally:
        setup.reward.close()
    return lines


def as_json(lines: list[CheckLine]) -> str:
    return json.dumps([line.__dict__ for line in lines], indent=1)
