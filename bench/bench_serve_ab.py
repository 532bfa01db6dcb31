"""Online A/B through `rlvr serve A --model-b B`: the held-out problems asked by users of both arms.

    .venv/bin/python bench/bench_serve_ab.py .cache/sft/sft-314ba09a49b8 runs/loop --n 200

Starts the server on 127.0.0.1 (split 0.5), finds one user id per arm, sends each of the first N
held-out problems of the default task from both users (greedy, with the gold answer in
`metadata.answer`), then prints the server's `GET /ab` report: per-arm verified accuracy and the
paired bootstrap / McNemar comparison, the same test as `rlvr compare A B`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench_serve import start_server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--out", default="bench/serve_ab_results.json")
    args = parser.parse_args()
    import httpx

    from rlvr.assembly import run_task
    from rlvr.config import load_config

    problems = run_task(load_config()).held_out()[: args.n]
    proc, url = start_server(args.a, ["--model-b", args.b, "--split", "0.5"])
    try:
        with httpx.Client(base_url=url, timeout=120) as client:

            def ask(user: str, prompt: str, answer: str | None = None) -> str:
                r = client.post(
                    "/v1/chat/completions",
                    headers={"x-rlvr-user": user},
                    json={
                        "model": "bench",
                        "messages": [{"role": "user", "content": prompt}],
                        "temperature": 0,
                        "max_tokens": 64,
                        "metadata": {"answer": answer} if answer else None,
                    },
                )
                r.raise_for_status()
                return r.headers["x-rlvr-arm"]

            users: dict[str, str] = {}
            for i in range(64):
                users.setdefault(ask(f"user{i}", "1+1="), f"user{i}")
                if len(users) == 2:
                    break
            start = time.perf_counter()
            for p in problems:
                for user in users.values():
                    ask(user, p.prompt, p.answer)
            wall = time.perf_counter() - start
            time.sleep(1)  # the last verifications
            report = client.get("/ab").json()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    report |= {"a_model": args.a, "b_model": args.b, "problems": len(problems), "wall_s": round(wall, 1)}
    print(json.dumps(report, indent=1))
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
