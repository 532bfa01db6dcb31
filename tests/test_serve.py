"""`rlvr serve` through the real openai and anthropic SDKs, on 127.0.0.1 only, with tiny models."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi")
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from rlvr.cli.serve import open_server  # noqa: E402
from rlvr.serve.app import listen  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.configlib import ConfigError  # noqa: E402
from rlvr.serve.app import build_app  # noqa: E402

KEY = "test-key-1"
TEMPLATE = "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}a:"


class Running:
    """uvicorn serving `server` in a thread, on a port of 127.0.0.1 the OS picked."""

    def __init__(self, server) -> None:
        import uvicorn

        self.server = server
        sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.uv = uvicorn.Server(uvicorn.Config(build_app(server), log_level="warning"))
        self.thread = threading.Thread(target=self.uv.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.uv.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    def openai(self, key: str = KEY):
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    def anthropic(self, key: str = KEY):
        return anthropic.Anthropic(base_url=self.url, api_key=key, max_retries=0)

    def metrics(self) -> dict[tuple, float]:
        text = httpx.get(f"{self.url}/metrics").text
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }

    def stop(self) -> None:
        self.uv.should_exit = True
        self.thread.join(timeout=30)
        self.server.close()
        self.server.reward.close()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The tiny base model and its cold start (1-digit sums), and the overrides that made them."""
    from conftest import TINY

    from rlvr.assembly import base_model_path
    from rlvr.assembly import run_sft

    # hidden 64: vLLM's CPU attention needs a head size of at least 32
    overrides = TINY + ["model.tiny_hidden=64", f"sft.cache_dir={tmp_path_factory.mktemp('serve-sft')}"]
    cfg = load_config(None, overrides)
    return str(base_model_path(cfg)), str(run_sft(cfg)), overrides


def serve_cfg(overrides, *extra):
    return load_config(None, [*overrides, f"serve.api_keys=[{KEY}]", "serve.model_name=tiny", *extra])


@pytest.fixture(scope="module")
def live(models):
    _, sft, overrides = models
    running = Running(open_server(serve_cfg(overrides, f"serve.chat_template={TEMPLATE_FILE(sft)}"), sft))
    yield running
    running.stop()


def TEMPLATE_FILE(model_dir) -> str:  # noqa: N802
    from pathlib import Path

    path = Path(model_dir).parent / "chat_template.jinja"
    path.write_text(TEMPLATE)
    return str(path)


def greedy(model_dir: str, text: str, max_new_tokens: int) -> tuple[str, int]:
    """What the model itself says to `text` (transformers, greedy): the text and the tokens generated."""
    import torch

    from rlvr.models import load_model

    model, tok = load_model(model_dir)
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    new = out[0, ids.shape[1] :].tolist()
    return tok.decode(new, skip_special_tokens=True), len(new)


# --- both APIs, plain and streaming -------------------------------------------------------------


def test_openai_chat_and_completions_answer_what_the_model_says(live, models):
    sft = models[1]
    want, n = greedy(sft, "u:3+4=\na:", 40)
    client = live.openai()
    r = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "3+4="}], max_tokens=40, temperature=0
    )
    assert r.object == "chat.completion" and r.model == "tiny"
    assert r.choices[0].message.content == want and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == ("length" if n == 40 and "<|eos|>" not in want else "stop")
    assert r.usage.prompt_tokens == len("u:3+4=\na:") and r.usage.completion_tokens == n
    assert r.usage.total_tokens == r.usage.prompt_tokens + n

    plain, _ = greedy(sft, "5+2=", 40)
    c = client.completions.create(model="tiny", prompt="5+2=", max_tokens=40, temperature=0)
    assert c.object == "text_completion" and c.choices[0].text == plain
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_openai_stream_ends_with_usage_and_done(live, models):
    want, n = greedy(models[1], "u:3+4=\na:", 40)
    chunks = list(
        live.openai().chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "3+4="}],
            max_tokens=40,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # deltas, not one block
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == n
    raw = httpx.post(
        f"{live.url}/v1/completions",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": "tiny", "prompt": "1+1=", "max_tokens": 8, "stream": True},
    ).text
    assert raw.rstrip().endswith("data: [DONE]") and all(e.startswith("data: ") for e in raw.strip().split("\n\n"))


def test_anthropic_messages_plain_and_streaming(live, models):
    want, n = greedy(models[1], "s:be brief\nu:3+4=\na:", 40)
    client = live.anthropic()
    m = client.messages.create(
        model="tiny",
        max_tokens=40,
        system="be brief",
        messages=[{"role": "user", "content": "3+4="}],
        extra_body={"temperature": 0},
    )
    assert m.type == "message" and m.role == "assistant" and m.content[0].text == want
    assert m.stop_reason in ("end_turn", "max_tokens") and m.usage.output_tokens == n
    assert m.usage.input_tokens == len("s:be brief\nu:3+4=\na:")
    with client.messages.stream(
        model="tiny",
        max_tokens=40,
        system="be brief",
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "3+4="}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == want and final.stop_reason == m.stop_reason and final.usage.output_tokens == n
    raw = httpx.post(
        f"{live.url}/v1/messages",
        headers={"x-api-key": KEY},
        json={"model": "tiny", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "1+1="}]},
    ).text
    names = re.findall(r"^event: (\w+)$", raw, re.M)
    assert names[:2] == ["message_start", "content_block_start"] and set(names[2:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]


def test_stop_sequences_cut_the_text_in_both_apis_and_never_leak_into_a_stream(live, models):
    want, _ = greedy(models[1], "u:3+4=\na:", 40)
    assert "</think>" in want, want  # the cold start writes the format
    stop = "</think>"
    cut = want[: want.index(stop)]
    oa = live.openai()
    r = oa.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "3+4="}], max_tokens=40, temperature=0, stop=[stop, "zzz"]
    )
    assert r.choices[0].message.content == cut and r.choices[0].finish_reason == "stop"
    deltas = [
        c.choices[0].delta.content or ""
        for c in oa.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "3+4="}],
            max_tokens=40,
            temperature=0,
            stop=stop,
            stream=True,
        )
        if c.choices
    ]
    assert "".join(deltas) == cut and not any("<" in d and "/" in d for d in deltas)
    m = live.anthropic().messages.create(
        model="tiny",
        max_tokens=40,
        messages=[{"role": "user", "content": "3+4="}],
        stop_sequences=[stop],
        extra_body={"temperature": 0},
    )
    assert m.content[0].text == cut and m.stop_reason == "stop_sequence" and m.stop_sequence == stop


# --- what a client gets wrong -------------------------------------------------------------------


def test_a_judge_component_against_rlvr_serve_times_out_and_parse_failures_are_invalid(live, models):
    """reward.judges through the real server: every completion is one request; an answer without a
    score in range, or no answer in time, makes the sample invalid (not 0) and is counted."""
    from rlvr.inference.judge import Judge, JudgeError
    from rlvr.inference.reward_models import LearnedReward
    from rlvr.records import Problem
    from rlvr.rewards import build_reward

    def judge(*extra):
        cfg = load_config(
            None,
            [
                f"reward.judges.j.base_url={live.url}/v1",
                "reward.judges.j.model=tiny",
                f"reward.judges.j.api_key={KEY}",
                "reward.judges.j.max_tokens=16",
                *extra,
            ],
        )
        return Judge("j", cfg.reward.judges["j"])

    probs = [Problem(id=str(i), prompt=f"{i}+{i}=", answer=str(2 * i)) for i in range(4)]
    texts = [f"<think>{i}+{i}={2 * i}</think><answer>{2 * i}</answer>" for i in range(4)]
    # the rubric asks for "Score: N", which the tiny model never writes: each answer a parse failure
    with LearnedReward(build_reward(), {"j": judge()}) as reward:
        results = reward.score(probs, texts)
        metrics = reward.metrics()
    assert all(not r.valid and "no score in the judge's answer" in r.error for r in results)
    assert all(isinstance(r.info["j_reply"], str) for r in results)  # what the served model said
    assert (metrics["judge/j/calls"], metrics["judge/j/parse_failures"], metrics["reward/j/failed"]) == (4, 4, 4), (
        metrics
    )
    # any number it writes as the score: each answer parsed exactly as the pattern reads it
    numbers = judge(r"reward.judges.j.score_pattern=(\d+)", "reward.judges.j.max_score=1e12")
    out = numbers.score(probs, texts)
    for i, v in enumerate(out):
        found = [int(x) for x in re.findall(r"(\d+)", numbers.replies[i])]
        if found and found[-1] <= 1e12:
            assert v == pytest.approx(found[-1] / 1e12)
        else:  # none, or out of range
            assert isinstance(v, JudgeError) and v.kind == "parse_failures", (v, numbers.replies[i])
    again = numbers.score(probs, texts)  # a verdict is cached per (prompt, completion); a failure is asked again
    failed = sum(isinstance(v, JudgeError) for v in out)
    assert numbers.metrics()["judge/j/calls"] == 4 + failed
    assert all(a == b for a, b in zip(out, again) if not isinstance(a, JudgeError))
    slow = judge("reward.judges.j.timeout_s=0.001")
    assert all(isinstance(v, JudgeError) and v.kind == "timeouts" for v in slow.score(probs, texts))
    slow.close()
    numbers.close()


def test_a_judge_parses_its_score_caches_and_bounds_concurrency(tmp_path):
    """The success path against an OpenAI-compatible endpoint this test opened on 127.0.0.1, which
    grades by the completion's length and records how many requests were in flight at once."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from rlvr.inference.judge import Judge
    from rlvr.records import Problem

    state = {"in_flight": 0, "peak": 0, "seen": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            with lock:
                state["in_flight"] += 1
                state["peak"] = max(state["peak"], state["in_flight"])
                state["seen"] += 1
            time.sleep(0.05)
            text = body["messages"][0]["content"]
            answer = "no idea" if "???" in text else f"Fine.\nScore: {min(10, text.count('!'))}"
            payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
            with lock:
                state["in_flight"] -= 1
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = load_config(
            None,
            [
                f"reward.judges.j.base_url=http://127.0.0.1:{srv.server_address[1]}/v1",
                "reward.judges.j.model=m",
                "reward.judges.j.concurrency=2",
            ],
        ).reward.judges["j"]
        judge = Judge("j", cfg)
        probs = [Problem(id=str(i), prompt="Say it", answer="x") for i in range(7)]
        texts = ["!" * i for i in range(6)] + ["???"]
        out = judge.score(probs, texts)
        assert out[:6] == [pytest.approx(i / 10) for i in range(6)] and out[6].kind == "parse_failures"
        assert state["peak"] == 2 and state["seen"] == 7  # bounded concurrency, one request each
        judge.score(probs, texts)
        assert state["seen"] == 8  # six cached verdicts; the unparsed one is asked again
        judge.close()
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_missing_or_wrong_key_is_401_in_each_apis_shape(live):
    with pytest.raises(openai.AuthenticationError) as e:
        live.openai("wrong").chat.completions.create(model="tiny", messages=[{"role": "user", "content": "1"}])
    assert e.value.status_code == 401 and e.value.body["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError) as a:
        live.anthropic("wrong").messages.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "1"}])
    assert a.value.body == {"type": "error", "error": {"type": "authentication_error", "message": "invalid API key"}}
    bare = httpx.post(f"{live.url}/v1/chat/completions", json={"model": "tiny", "messages": []})
    assert bare.status_code == 401 and "no API key" in bare.json()["error"]["message"]
    assert httpx.get(f"{live.url}/healthz").json()["status"] == "ok"  # health needs no key


BAD = [  # (path, body, status, a word the message must hold)
    ("/v1/chat/completions", {"model": "tiny"}, 400, "messages"),
    ("/v1/chat/completions", {"model": "tiny", "messages": "hi"}, 400, "messages"),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "1"}], "temperature": "hot"},
        400,
        "temperature",
    ),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "tool", "content": "1"}]}, 400, "tool_call_id"),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "robot", "content": "1"}]}, 400, "role"),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "1"}], "tools": [{"type": "retrieval"}]},
        400,
        "tools",
    ),
    ("/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "1"}], "n": 3}, 400, "n"),
    ("/v1/chat/completions", {"model": "gpt-9", "messages": [{"role": "user", "content": "1"}]}, 404, "gpt-9"),
    (
        "/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "1"}], "max_tokens": 10**6},
        400,
        "context",
    ),
    ("/v1/completions", {"model": "tiny", "prompt": ["a", "b"]}, 400, "prompt"),
    ("/v1/completions", b"{not json", 400, "JSON"),
    ("/v1/messages", {"model": "tiny", "max_tokens": 4}, 400, "messages"),
    (
        "/v1/messages",
        {"model": "tiny", "max_tokens": 0, "messages": [{"role": "user", "content": "1"}]},
        400,
        "max_tokens",
    ),
    (
        "/v1/messages",
        {
            "model": "tiny",
            "max_tokens": 4,
            "messages": [{"role": "user", "content": "1"}],
            "thinking": {"type": "enabled"},
        },
        400,
        "thinking",
    ),
    ("/v1/messages", {"model": "nope", "max_tokens": 4, "messages": [{"role": "user", "content": "1"}]}, 404, "nope"),
    ("/v1/nothing-here", {}, 404, "no route"),
]


@pytest.mark.parametrize("path, body, status, word", BAD, ids=[f"{p}-{i}" for i, (p, *_) in enumerate(BAD)])
def test_bad_requests_get_the_right_4xx_in_the_apis_shape(live, path, body, status, word):
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    r = httpx.post(
        f"{live.url}{path}", headers=headers, content=body if isinstance(body, bytes) else json.dumps(body).encode()
    )
    assert r.status_code == status, r.text
    assert "Traceback" not in r.text
    if path.startswith("/v1/messages"):
        assert r.json()["type"] == "error" and word in r.json()["error"]["message"]
    else:
        assert word in r.json()["error"]["message"] and "type" in r.json()["error"]
    ok = live.openai().completions.create(model="tiny", prompt="1+1=", max_tokens=2)  # still serving
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_sdk_exception_classes_for_bad_requests(live):
    with pytest.raises(openai.NotFoundError):
        live.openai().chat.completions.create(model="nope", messages=[{"role": "user", "content": "1"}])
    with pytest.raises(openai.BadRequestError):
        live.openai().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "1"}], max_tokens=10**6
        )
    with pytest.raises(anthropic.BadRequestError):
        live.anthropic().messages.create(model="tiny", max_tokens=4, messages=[])


def test_an_open_address_without_a_key_is_refused_at_start(models):
    with pytest.raises(ConfigError, match="serve.host=0.0.0.0.*API key"):
        open_server(load_config(None, [*models[2], "serve.host=0.0.0.0"]), models[1])


# --- capacity and metrics -----------------------------------------------------------------------


class Gated:
    """A backend whose generations wait for a gate before the model runs (to hold the queue full)."""

    def __init__(self, inner) -> None:
        self.inner, self.gate = inner, threading.Event()
        self.context_len, self.eos_ids = inner.context_len, inner.eos_ids

    async def stream(self, prompt_ids, params):
        import asyncio

        while not self.gate.is_set():
            await asyncio.sleep(0.01)
        async for ids in self.inner.stream(prompt_ids, params):
            yield ids

    def close(self) -> None:
        self.inner.close()


def test_a_burst_beyond_the_queue_gets_429_and_metrics_count_it(models):
    _, sft, overrides = models
    server = open_server(
        serve_cfg(overrides, "serve.max_concurrency=1", "serve.max_queue=1", "serve.chat_template=plain"), sft
    )
    server.arms[0].backend = gated = Gated(server.arms[0].backend)
    live = Running(server)
    try:
        client = live.openai()

        def ask(i):
            try:
                return client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": f"{i}+1="}], max_tokens=6
                )
            except openai.RateLimitError as exc:
                return exc

        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(ask, i) for i in range(6)]
            deadline = time.time() + 30
            while sum(f.done() for f in futures) < 4:  # 1 generating + 1 waiting; 4 turned away
                assert time.time() < deadline
                time.sleep(0.02)
            assert httpx.get(f"{live.url}/healthz").json()["queued"] == 1
            gated.gate.set()
            results = [f.result() for f in futures]
        limited = [r for r in results if isinstance(r, openai.RateLimitError)]
        done = [r for r in results if not isinstance(r, Exception)]
        assert len(limited) == 4 and len(done) == 2
        assert limited[0].body["type"] == "rate_limit_error" and limited[0].response.headers["retry-after"] == "1"
        m = live.metrics()
        route = ("route", "/v1/chat/completions")
        assert m[("rlvr_serve_errors_total", (("model", "tiny"), route, ("status", "429")))] == 4
        assert m[("rlvr_serve_requests_total", (("model", "tiny"), route, ("status", "200")))] == 2
        assert m[("rlvr_serve_completion_tokens_total", (("model", "tiny"),))] == sum(
            r.usage.completion_tokens for r in done
        )
        assert m[("rlvr_serve_prompt_tokens_total", (("model", "tiny"),))] == sum(r.usage.prompt_tokens for r in done)
        assert m[("rlvr_serve_request_seconds_count", (("model", "tiny"), route))] == 6
        assert m[("rlvr_serve_in_flight", ())] == 0 and m[("rlvr_serve_queued", ())] == 0
    finally:
        live.stop()


# --- online A/B ---------------------------------------------------------------------------------


def test_ab_arms_are_sticky_and_the_report_matches_the_verified_responses(models):
    from rlvr.records import Problem
    from rlvr.rewards import build_reward
    from rlvr.rewards.extract import extract
    from rlvr.stats import paired_report

    base, sft, overrides = models
    live = Running(open_server(serve_cfg(overrides, "serve.chat_template=plain"), base, sft, 0.5))
    try:
        client = live.openai()

        def ask(user, prompt, answer=None):
            raw = client.chat.completions.with_raw_response.create(
                model="tiny",
                messages=[{"role": "user", "content": prompt}],
                max_tokens=24,
                temperature=0,
                user=user,
                metadata={"answer": answer} if answer is not None else None,
            )
            return raw.headers["x-rlvr-arm"], raw.parse().choices[0].message.content

        arms = {u: ask(u, "1+1=")[0] for u in (f"user{i}" for i in range(12))}
        assert {ask(u, "2+2=")[0] for u in arms if arms[u] == "a"} == {"a"}  # sticky
        assert set(arms.values()) == {"a", "b"}
        ua, ub = next(u for u in arms if arms[u] == "a"), next(u for u in arms if arms[u] == "b")
        # gold = what B (the cold start) answers: B right where it writes an answer, A seldom
        prompts = [f"{i}+{j}=" for i in range(1, 9) for j in (1, 3)]
        golds = {}
        for p in prompts:
            found = extract(ask(ub, p)[1], ["answer_tag"]).answers
            golds[p] = found[-1] if found else str(eval(p[:-1]))
        texts = {(arm, p): ask(user, p, golds[p])[1] for arm, user in (("a", ua), ("b", ub)) for p in prompts}
        with build_reward(load_config(None, overrides).reward) as reward:
            problems = [Problem(id=p, prompt=p, answer=golds[p]) for p in prompts]
            mine = {
                arm: [
                    float(r.components["correct"] >= 1)
                    for r in reward.score(problems, [texts[arm, p] for p in prompts])
                ]
                for arm in ("a", "b")
            }
        deadline = time.time() + 30
        while (rep := httpx.get(f"{live.url}/ab", headers={"x-api-key": KEY}).json())["arms"]["b"]["verified"] < 16:
            assert time.time() < deadline
            time.sleep(0.05)
        assert rep["arms"]["a"]["verified"] == 16 and rep["arms"]["a"]["accuracy"] == pytest.approx(sum(mine["a"]) / 16)
        assert rep["arms"]["b"]["accuracy"] == pytest.approx(sum(mine["b"]) / 16) and sum(mine["b"]) > sum(mine["a"])
        assert rep["arms"]["a"]["users"] + rep["arms"]["b"]["users"] == 12
        sent = 12 + sum(arms[u] == "a" for u in arms) + 2 * 16 + 16  # the probes, the stickiness round, golds
        assert rep["arms"]["a"]["requests"] + rep["arms"]["b"]["requests"] == sent
        want = paired_report(mine["a"], mine["b"], alpha=0.05, iterations=10000, seed=0)
        assert rep["paired"]["n"] == 16
        for key in ("a", "b", "diff", "ci", "only_a", "only_b", "mcnemar_p", "verdict"):
            assert rep["paired"][key] == pytest.approx(want[key]), key
        # an arm by its own name skips the assignment
        assert [m.id for m in client.models.list()] == ["tiny", "tiny:a", "tiny:b"]
    finally:
        live.stop()


# --- the command ---------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_rlvr_serve_command_answers_like_transformers(models, engine):
    psutil = None
    if engine == "vllm":
        pytest.importorskip("vllm")
        import psutil  # a vLLM dependency
    _, sft, overrides = models
    want, _ = greedy(sft, "3+4=", 24)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlvr.cli",
            "serve",
            sft,
            "--port",
            "0",
            *overrides,
            f"serve.engine={engine}",
            "serve.chat_template=plain",
            "serve.model_name=tiny",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url, lines = None, []
        deadline = time.time() + 240
        while url is None and time.time() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "".join(lines)
            lines.append(line)
            if m := re.search(r"(http://127\.0\.0\.1:\d+)/v1", line):
                url = m.group(1)
        assert url, "".join(lines)
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0)
        r = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "3+4="}], max_tokens=24, temperature=0
        )
        assert r.choices[0].message.content == want
        streamed = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "3+4="}], max_tokens=24, temperature=0, stream=True
            )
        )
        assert streamed == want
        children = psutil.Process(proc.pid).children(recursive=True) if psutil else []  # vLLM's engine core
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    if psutil:
        assert children, "vLLM runs its engine core in a process of its own"
        _, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, f"rlvr serve left {[p.name() for p in alive]} running after SIGTERM"


def test_the_default_max_tokens_a_configured_value_then_the_run_then_the_export(tmp_path):
    from types import SimpleNamespace

    from rlvr.cli.serve import default_max_tokens

    exported = SimpleNamespace(max_new_tokens=37)  # an rlvr export's generation_config.json
    cfg = load_config(None, [])
    assert default_max_tokens(cfg, str(tmp_path), exported)[0] == 37
    assert default_max_tokens(cfg, str(tmp_path), None) == (cfg.serve.max_tokens, "serve.max_tokens (default)")
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "rollout/len_p90": 20.0}) + "\n")
    assert default_max_tokens(cfg, str(tmp_path), exported)[0] == 24  # the run directory's own 1.2 x P90
    assert default_max_tokens(load_config(None, ["serve.max_tokens=9"]), str(tmp_path), exported)[0] == 9
