"""`rlvr sweep KEY=V1,V2,... [KEY=...]`: a grid of runs on Ray Tune, compared at the end.

    rlvr sweep algo.beta=0.001,0.003,0.01,0.03 train.steps=100            # the KL coefficient, log-spaced
    rlvr sweep train.lr=1e-5,3e-5,1e-4 algo.beta=0,0.01 --samples 3 --parallel 2 --out runs/lr-sweep

Arguments with commas are swept (a value in brackets or braces is one value); the others are
fixed overrides of every trial. Each trial is a normal run directory under --out; sweep.json and
sweep.html compare them (rlvr.sweep). --out may be a URL (s3://...): the trials' run directories
are there, and the two reports are uploaded beside them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr.cli._common import add_config_files
from rlvr.configlib import ConfigError


def add_arguments(parser) -> None:
    parser.add_argument("args", nargs="+", metavar="KEY=V1,V2,...", help="swept keys and fixed overrides")
    parser.add_argument("--samples", type=int, default=0, metavar="N", help="N random combinations instead of the grid")
    parser.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="trials at once (default 1: an embedded run takes the machine)",
    )
    parser.add_argument(
        "--out", metavar="DIR", default="runs/sweep", help="where the trials' run directories go (a directory or a URL)"
    )
    add_config_files(parser)


def run(args) -> int:
    from rlvr.config import load_config
    from rlvr.envs.settings import check_env
    from rlvr.sweep import axes, compare, run_trials, trials, write_report
    from rlvr.urls import cache_dir, filesystem, is_url

    swept, fixed = axes(args.args)
    grid = trials(swept, args.samples)
    if args.parallel < 1:
        raise ConfigError("--parallel must be >= 1")
    for overrides in grid:  # every trial's config is checked before any trial starts
        cfg = load_config(args.config, [*fixed, *overrides], profile=args.profile)
        check_env(cfg.env, cfg.task, cfg.algo, cfg.reward, cfg.sources)
    print(
        f"rlvr sweep: {len(grid)} trial(s) over {', '.join(swept)}; {args.parallel} at a time; in {args.out}",
        file=sys.stderr,
    )
    local = cache_dir(args.out, ".cache/sweeps") if is_url(args.out) else Path(args.out)
    results = run_trials(args.config, fixed, grid, args.out, local, parallel=args.parallel, profile=args.profile)
    comparison = compare(results)
    (local / "sweep.json").write_text(json.dumps(comparison, indent=1) + "\n")
    page = write_report(comparison, local)
    if is_url(args.out):
        fs, path = filesystem(args.out)
        for name in ("sweep.json", "sweep.html"):
            fs.put_file(str(local / name), f"{path.rstrip('/')}/{name}")
    for t in comparison["trials"]:
        vs = t.get("vs_best")
        after = "" if t["eval_after"] is None else f"{t['eval_after']:.1%}"
        versus = f"  vs best {vs['diff']:+.1%} (p = {vs['mcnemar_p']:.3g})" if vs else ""
        print(f"{t['trial']}: {t['error'] or t['status']} {after}{versus}", file=sys.stderr)
    where = f"{args.out.rstrip('/')}/" if is_url(args.out) else f"{local}/"
    print(f"best: {comparison['best']}; wrote {where}sweep.json and {where}{page.name}", file=sys.stderr)
    return 0 if comparison["best"] else 1
