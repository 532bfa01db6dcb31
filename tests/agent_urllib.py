"""An agent with no SDK at all (it could be any language): HTTP by hand, the problem from stdin."""

import json
import os
import sys
import urllib.request


def ask(messages):
    body = json.dumps({"model": os.environ["RLVR_MODEL"], "messages": messages, "max_tokens": 12}).encode()
    req = urllib.request.Request(
        os.environ["RLVR_BASE_URL"] + "/chat/completions", body, {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


problem = json.load(sys.stdin)
messages = [{"role": "user", "content": problem["prompt"]}]
for _ in range(2):
    text = ask(messages)
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "ok\n"}]
print("some log line")
print(text)
