"""A long-lived agent on env.agent_protocol=lines, HTTP by hand, many episodes at once in threads; what
each does is its problem's metadata "do": 'ok' (two turns), 'error' (answers with an error), 'exit'
(the whole process exits with code 4). It writes its pid to the file metadata "pids" names, and
prints lines that are not answers beside its answers."""

import json
import os
import sys
import threading
import urllib.request

LOCK = threading.Lock()


def say(message) -> None:
    with LOCK:
        print(message if isinstance(message, str) else json.dumps(message), flush=True)


def ask(base_url, model, messages):
    body = json.dumps({"model": model, "messages": messages, "max_tokens": 12}).encode()
    req = urllib.request.Request(base_url + "/chat/completions", body, {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


def episode(line: str) -> None:
    request = json.loads(line)
    problem, episode_id = request["problem"], request["episode"]
    with open(problem["metadata"]["pids"], "a") as f:
        f.write(f"{os.getpid()}\n")
    do = problem["metadata"]["do"]
    if do == "exit":
        os._exit(4)
    if do == "error":
        say({"episode": episode_id, "error": "boom"})
        return
    messages = [{"role": "user", "content": problem["prompt"]}]
    for _ in range(2):
        text = ask(request["base_url"], request["model"], messages)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "ok\n"}]
    say("a log line")
    say([1, 2])
    say({"episode": "not one of mine", "result": "1"})
    say({"episode": episode_id, "result": text})


assert os.environ["RLVR_PROTOCOL"] == "lines"
for line in sys.stdin:
    threading.Thread(target=episode, args=(line,)).start()
