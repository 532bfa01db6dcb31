"""`rlvr eval`: a model on data files (or the configured task's held-out set): greedy accuracy, and
with --samples pass@k, maj@k and avg@k, per source and overall. JSON on stdout (or --out), a table
and a progress bar on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlvr.cli._common import add_config_arguments, add_device_argument, config_from_args
from rlvr.configlib import ConfigError


def add_sampling_arguments(parser) -> None:
    """The evaluation set and sampling, shared with `rlvr compare`."""
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="FILE",
        help="a JSONL/Parquet data file, or 'humaneval' (repeatable); default: the task's held-out set",
    )
    parser.add_argument(
        "--samples", type=int, default=0, metavar="N", help="sampled completions per problem (0 = greedy only)"
    )
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the --samples")
    parser.add_argument("--k", type=int, nargs="+", default=[1, 5, 10], help="k of pass@k, maj@k, avg@k (k <= N)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="problems per engine call (default: eval.batch_size when a config or override sets it, else 64)",
    )
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N problems")
    add_device_argument(parser)


def add_arguments(parser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a Hugging Face model directory or a run directory (its model/)")
    parser.add_argument(
        "--pairs",
        metavar="FILE",
        help="MODEL is a reward model: its pair accuracy on these preference pairs (JSONL: prompt, chosen, rejected)",
    )
    add_sampling_arguments(parser)
    parser.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")
    add_config_arguments(parser)


def model_dir(path: str) -> str:
    """A run directory stands for its exported model; a packaged model name ('smollm2') for its
    dequantized directory (rlvr.models.gguf)."""
    from rlvr.models.gguf import PACKAGED, dequantize_gguf, packaged_gguf

    if path in PACKAGED and not Path(path).exists():
        return str(dequantize_gguf(packaged_gguf(path)))
    return str(Path(path) / "model") if (Path(path) / "summary.json").exists() else path


def problems_for(cfg, args) -> list:
    from rlvr.assembly import run_task
    from rlvr.tasks.files import as_chat, load_problems
    from rlvr.tasks.humaneval import humaneval_problems

    if args.batch_size is None:  # eval.batch_size has its effect here too; 64 (sampled runs are G times larger)
        args.batch_size = cfg.eval.batch_size if "eval.batch_size" in cfg.sources else 64
    if args.samples < 0 or args.batch_size < 1:
        raise ConfigError("--samples must be >= 0 and --batch-size >= 1")
    if not args.data:
        problems = run_task(cfg).held_out()[: cfg.eval.n]
    else:
        problems = []
        for name in args.data:
            if name == "humaneval":
                problems += humaneval_problems(chat=cfg.data.chat)
            elif not Path(name).exists():
                raise ConfigError(f"--data: {name!r} is neither 'humaneval' nor an existing data file")
            else:
                loaded = load_problems([name], cfg.data.on_bad_record)
                problems += as_chat(loaded, cfg.data.system_prompt) if cfg.data.chat else loaded
    return problems[: args.limit] if args.limit else problems


def inference_model(cfg, path: str):
    """(model, tokenizer) to run outside training, as training ran it: fp32 weights on train.device
    (`--device`), the engines computing in model.dtype (bf16 autocast, never bf16 weights)."""
    from rlvr.models import load_model
    from rlvr.train.parallel import train_device

    device = train_device(cfg.train.device)  # cuda without CUDA: a one-line config error, before loading
    model, tokenizer = load_model(path, "float32")  # a missing directory: a one-line config error
    return model.to(device).eval(), tokenizer


def default_length(cfg, model, key: str = "rollout.max_new_tokens") -> tuple[int, str]:
    """Tokens to generate when nothing says otherwise: `key` when a config or override sets it, else
    the model's generation_config.json max_new_tokens (an rlvr export writes the run's recommended
    length there), else `key`'s default."""
    configured = _dotted(cfg, key)
    if key in cfg.sources:
        return configured, key
    exported = getattr(getattr(model, "generation_config", None), "max_new_tokens", None)
    if exported:
        return int(exported), "the model's generation_config.json max_new_tokens"
    return configured, f"{key} (default)"


def _dotted(cfg, key: str):
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def evaluate_model(cfg, path: str, problems, args, reward, label: str = ""):
    """Outcomes of one model on `problems` (rlvr.evaluate.score_problems), with a progress bar."""
    from rich.progress import Progress

    from rlvr.algos.truncation import Truncation
    from rlvr.evaluate import score_problems
    from rlvr.assembly import episode_spec, rollout_engine

    path = model_dir(path)
    model, tokenizer = inference_model(cfg, path)
    max_new_tokens, why = default_length(cfg, model)
    print(
        f"eval {label or path}: {next(model.parameters()).device}, compute {cfg.model.dtype}, "
        f"max_new_tokens {max_new_tokens} ({why})",
        file=sys.stderr,
    )
    engine = rollout_engine(
        cfg,
        model,
        tokenizer,
        name=cfg.eval.engine,
        model_dir=path,  # eval.engine, else rollout.engine
        episodes=episode_spec(cfg),
    )
    with Progress(transient=True, console=_stderr()) as bar:
        task = bar.add_task(f"eval {label or path}", total=len(problems))
        return score_problems(
            engine,
            problems,
            reward,
            max_new_tokens=max_new_tokens,
            samples=args.samples,
            temperature=args.temperature,
            truncation=Truncation(cfg.rollout.top_k, cfg.rollout.top_p, cfg.rollout.min_p),
            batch_size=args.batch_size,
            progress=lambda n: bar.advance(task, n),
        )


def _stderr():
    from rich.console import Console

    return Console(stderr=True)


def run(args) -> int:
    cfg = config_from_args(args)
    if args.pairs:
        return _pair_accuracy(args, cfg)
    import torch

    from rlvr.assembly import rule_reward
    from rlvr.evaluate import summarize

    torch.manual_seed(cfg.seed)
    problems = problems_for(cfg, args)
    with rule_reward(cfg) as reward:
        outcomes = evaluate_model(cfg, args.model, problems, args, reward)
    report = {
        "model": model_dir(args.model),
        "samples": args.samples,
        "temperature": args.temperature,
        "by_source": summarize(outcomes, args.k),
        "problems": [problem_row(o) for o in outcomes],
    }
    print_table(report["by_source"])
    write_report(report, args.out)
    return 0


def _pair_accuracy(args, cfg) -> int:
    """A reward model's pair accuracy: the share of pairs whose chosen completion it scores higher."""
    from rlvr.inference.reward_models import load_reward_model
    from rlvr.train.parallel import train_device
    from rlvr.train.rm import load_pairs, pair_accuracy

    model, tokenizer = load_reward_model(model_dir(args.model), str(train_device(cfg.train.device)))
    report = {
        "model": model_dir(args.model),
        "pairs": args.pairs,
        **pair_accuracy(model, tokenizer, load_pairs(args.pairs), batch_size=args.batch_size or 16),
    }
    print(
        f"pair accuracy {report['pair_accuracy']:.1%} (n={report['n']}, mean margin {report['margin_mean']:+.3f})",
        file=sys.stderr,
    )
    write_report(report, args.out)
    return 0


def problem_row(o) -> dict:
    """One problem's outcomes in the report; its episodes' returns where the environment reports them."""
    row = {"id": o.id, "source": o.source, "greedy": o.greedy, "passed": o.passed}
    if o.greedy_return is not None:
        row["greedy_return"], row["returns"] = o.greedy_return, o.returns
    return row


def write_report(report: dict, out: str | None) -> None:
    """The JSON report to `out`, or to stdout (the tables go to stderr, so stdout stays parseable)."""
    text = json.dumps(report, indent=1) + "\n"
    if out:
        Path(out).write_text(text)
    else:
        sys.stdout.write(text)


def print_table(by_source: dict) -> None:
    from rich.table import Table

    returns = [k for k in ("greedy_return_mean", "return_mean") if any(k in entry for entry in by_source.values())]
    keys = sorted(
        {k for entry in by_source.values() for k in entry if "@" in k},
        key=lambda k: (k.split("@")[0], int(k.split("@")[1])),
    )
    table = Table(title="rlvr eval")
    for column in ("source", "n", "greedy", *keys, *(k.removesuffix("_mean").replace("_", " ") for k in returns)):
        table.add_column(column, justify="right")
    for name, entry in by_source.items():
        table.add_row(
            name,
            str(entry["n"]),
            f"{entry['greedy_accuracy']:.1%}",
            *(f"{entry[k]:.1%}" if k in entry else "-" for k in keys),
            *(f"{entry[k]:.3g}" if k in entry else "-" for k in returns),
        )
    _stderr().print(table)
