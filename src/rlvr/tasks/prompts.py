"""Prompt length limit, checked up front with the run's tokenizer (chat template included).

`data.on_long_prompt`: 'error' stops and names the records; 'skip' leaves
them out; 'truncate' cuts the start of the prompt's last message (the
question usually comes at its end) until the rendered prompt fits. Skips
and cuts are logged one by one and counted: a prompt is never cut silently.
"""

from __future__ import annotations

import dataclasses
import logging

from rlvr.records import Problem
from rlvr.tasks.files import DataError, EventFn

log = logging.getLogger("rlvr.data")


def rendered_lengths(tokenizer, problems: list[Problem]) -> list[int]:
    """Token count of each prompt exactly as rollout feeds it (rlvr.rollout.engine.render_prompt)."""
    texts = [
        p.prompt
        if isinstance(p.prompt, str)
        else tokenizer.apply_chat_template(p.prompt, add_generation_prompt=True, tokenize=False)
        for p in problems
    ]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False).input_ids]


def truncate_prompt(tokenizer, problem: Problem, limit: int) -> Problem | None:
    """The problem with the start of its last message cut so the rendered prompt fits; None if
    even an empty last message is too long (the template and the other messages alone exceed it)."""
    for _ in range(8):  # re-rendering can shift token boundaries by a few; converge in a few rounds
        n = rendered_lengths(tokenizer, [problem])[0]
        if n <= limit:
            return problem
        text = problem.prompt if isinstance(problem.prompt, str) else problem.prompt[-1]["content"]
        ids = tokenizer(text, add_special_tokens=False).input_ids
        if len(ids) <= n - limit:
            return None
        cut = tokenizer.decode(ids[n - limit :], skip_special_tokens=False)
        if isinstance(problem.prompt, str):
            problem = dataclasses.replace(problem, prompt=cut)
        else:
            last = {**problem.prompt[-1], "content": cut}
            problem = dataclasses.replace(problem, prompt=[*problem.prompt[:-1], last])
    return problem if rendered_lengths(tokenizer, [problem])[0] <= limit else None


def limit_prompts(
    task, tokenizer, limit: int, policy: str, on_event: EventFn | None = None, context: int | None = None
) -> None:
    """Apply the prompt-length policy to every problem of a FileTask, in place. `context`: the model's
    positions; a prompt must leave one to answer in, whatever data.max_prompt_tokens allows."""
    what = f"data.max_prompt_tokens={limit}"
    if context is not None and context - 1 < limit:
        limit, what = context - 1, f"the model's context ({context} positions, one left to answer in)"
    problems = task.all_problems()
    if tokenizer.chat_template is None and any(not isinstance(p.prompt, str) for p in problems):
        raise DataError(
            "the model's tokenizer has no chat template, and the prompts are chat messages; "
            "use a chat (instruct) model, or data.chat=false with plain-text `prompt` records"
        )
    lengths = rendered_lengths(tokenizer, problems)
    long = [(p, n) for p, n in zip(problems, lengths) if n > limit]
    if not long:
        return
    where = [f"{p.metadata.get('where', p.id)}: prompt is {n} tokens" for p, n in long]
    if policy == "error":
        more = f"\n  ... and {len(long) - 5} more" if len(long) > 5 else ""
        raise DataError(
            f"{len(long)} prompt(s) longer than {what} (chat template included):\n  "
            + "\n  ".join(where[:5])
            + more
            + f"\nraise {'data.max_prompt_tokens' if what.startswith('data.') else 'the model context'}, "
            + "or set data.on_long_prompt=skip or truncate"
        )
    changes: dict[str, Problem | None] = {}
    for (p, n), msg in zip(long, where):
        new = None if policy == "skip" else truncate_prompt(tokenizer, p, limit)
        if policy == "truncate" and new is None:
            raise DataError(f"{msg}; even with its last message emptied it exceeds {what}")
        changes[p.id] = new
        kind = "prompt_skipped" if new is None else "prompt_truncated"
        log.warning("%s %s (limit %d)", kind.replace("_", " "), msg, limit)
        if on_event:
            on_event(kind, where=p.metadata.get("where", p.id), tokens=n, limit=limit)
    log.warning(
        "%d of %d prompt(s) over %s were %s",
        len(long),
        len(problems),
        what,
        "skipped" if policy == "skip" else "truncated",
    )
    task.replace(changes)
