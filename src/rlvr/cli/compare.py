"""`rlvr compare A B`: is B better than A? Both on the same problems with the same sampling; paired
per-problem results, the accuracy difference with a 95% paired-bootstrap interval, an exact McNemar
p-value on the discordant pairs, and one verdict line. A and B: model or run directories."""

from __future__ import annotations

import sys

from rlvr.cli._common import add_config_arguments, config_from_args
from rlvr.cli.eval import add_sampling_arguments, evaluate_model, model_dir, problems_for, write_report
from rlvr.stats import paired_bootstrap, paired_report, pass_at_k


def add_arguments(parser) -> None:
    parser.add_argument("a", metavar="A", help="the baseline: a model directory or a run directory")
    parser.add_argument("b", metavar="B", help="the candidate")
    add_sampling_arguments(parser)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the verdict")
    parser.add_argument("--bootstrap", type=int, default=10000, help="bootstrap resamples")
    parser.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")
    add_config_arguments(parser)


def run(args) -> int:
    cfg = config_from_args(args)
    import torch

    from rlvr.assembly import rule_reward

    problems = problems_for(cfg, args)
    runs = {}
    with rule_reward(cfg) as reward:
        for label, path in (("A", args.a), ("B", args.b)):
            torch.manual_seed(cfg.seed)  # the same sampling randomness for both
            runs[label] = evaluate_model(cfg, path, problems, args, reward, label=label)
    a, b = runs["A"], runs["B"]
    seed = cfg.seed
    report = {
        "a": model_dir(args.a),
        "b": model_dir(args.b),
        "n": len(problems),
        "samples": args.samples,
        "greedy": paired_report(
            [float(o.greedy) for o in a],
            [float(o.greedy) for o in b],
            alpha=args.alpha,
            iterations=args.bootstrap,
            seed=seed,
        ),
    }
    for k in (k for k in args.k if 1 <= k <= args.samples):
        per_a = [pass_at_k(args.samples, sum(o.passed), k) for o in a]
        per_b = [pass_at_k(args.samples, sum(o.passed), k) for o in b]
        diff, lo, hi = paired_bootstrap(per_a, per_b, iterations=args.bootstrap, seed=seed, confidence=1 - args.alpha)
        report[f"pass@{k}"] = {"a": sum(per_a) / len(per_a), "b": sum(per_b) / len(per_b), "diff": diff, "ci": [lo, hi]}
    report["problems"] = [{"id": x.id, "a": x.greedy, "b": y.greedy} for x, y in zip(a, b)]
    g = report["greedy"]
    print(
        f"A {g['a']:.1%}  B {g['b']:.1%}  B - A {g['diff']:+.1%} "
        f"[{g['ci'][0]:+.1%}, {g['ci'][1]:+.1%}]  McNemar p = {g['mcnemar_p']:.3g} "
        f"({g['only_a']} only A, {g['only_b']} only B of {len(problems)})\n{g['verdict']}",
        file=sys.stderr,
    )
    write_report(report, args.out)
    return 0
