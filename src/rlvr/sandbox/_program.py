"""The untrusted side of an `assert` test: a fresh interpreter that holds the model's program and answers calls.

Run as `python -I -S -B -c <this file's text>` by the trusted checker (`_checker.py`) after it has
dropped to the sandbox uid, under the run's limits and syscall filter. A new interpreter, not a
fork: nothing of the checker's memory (the nonce, the check code, its expected values) exists in
this process. Descriptor 3 brings requests (a 4-byte length, then marshal data: from the trusted
side, so marshal is safe here), descriptor 4 takes replies (one JSON line each, which the checker
decodes with the json module, never with marshal):

    -> {"source", "entry_point", "file", "sys_path"}  <- {"ready": true} | {"load": msg} | {"syntax_error": msg}
    -> (args, kwargs)                                 <- {"value": ...} | {"error": name, "message": msg}

Values are plain data in a tagged JSON (`encode`: tuples, sets and non-string keys survive).
Only built-in modules are imported (start-up time is per execution). Nothing here is a security
boundary: the program may rewrite all of it and only hurts its own score.
"""

import _json
import builtins
import marshal
import os
import sys


def encode(x, depth=0):
    """JSON text of plain built-in data only (no subclasses, no custom __eq__), with tags for what
    JSON lacks: {"tuple": [...]}, {"set": [...]}, {"frozenset": [...]}, {"dict": [[k, v], ...]}.
    Its scalar cases repeat `_child.dumps`: this file runs alone (-c) where _child cannot be imported."""
    t = type(x)
    if depth > 100:
        raise TypeError("value nested too deeply")
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        return int.__repr__(x)
    if t is float:
        return (
            float.__repr__(x)
            if x == x and x not in (float("inf"), float("-inf"))
            else ("NaN" if x != x else ("Infinity" if x > 0 else "-Infinity"))
        )
    if t is str:
        return _json.encode_basestring_ascii(x)
    if t is list:
        return "[" + ",".join(encode(v, depth + 1) for v in x) + "]"
    if t in (tuple, set, frozenset):
        return '{"' + t.__name__ + '":[' + ",".join(encode(v, depth + 1) for v in x) + "]}"
    if t is dict:
        return (
            '{"dict":['
            + ",".join("[" + encode(k, depth + 1) + "," + encode(v, depth + 1) + "]" for k, v in x.items())
            + "]}"
        )
    raise TypeError(
        f"a value of type {t.__name__} is not plain data (int, float, str, bool, None, list, tuple, dict, set)"
    )


def decode(x, depth=0):
    if depth > 100:
        raise ValueError("value nested too deeply")
    if x is None or type(x) in (bool, int, float, str):
        return x
    if type(x) is list:
        return [decode(v, depth + 1) for v in x]
    if type(x) is dict and len(x) == 1:
        ((tag, items),) = x.items()
        if type(items) is list:
            if tag == "tuple":
                return tuple(decode(v, depth + 1) for v in items)
            if tag in ("set", "frozenset"):
                return (set if tag == "set" else frozenset)(decode(v, depth + 1) for v in items)
            if tag == "dict" and all(type(kv) is list and len(kv) == 2 for kv in items):
                return {decode(k, depth + 1): decode(v, depth + 1) for k, v in items}
    raise ValueError("not a tagged plain value")


def _describe():
    import traceback

    return "".join(traceback.format_exception_only(*sys.exc_info()[:2])).strip()[-500:]


def _read(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def receive():
    size = _read(3, 4)
    body = size and _read(3, int.from_bytes(size, "big"))
    return None if body is None else marshal.loads(body)


def reply(text):
    data = (text + "\n").encode()
    while data:
        data = data[os.write(4, data) :]


def main():
    init = receive()
    sys.path[:] = init["sys_path"]
    sys.argv = ["solution.py"]
    builtins.exit = builtins.quit = sys.exit  # normally added by `site`
    module = type(sys)("__main__")
    module.__file__ = init["file"]
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    try:
        code = compile(init["source"], init["file"], "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        message = _describe()
        os.write(2, (message + "\n").encode())
        reply('{"syntax_error":' + encode(message) + "}")
        return
    try:
        exec(code, module.__dict__)
    except SystemExit:
        reply('{"load":"SystemExit while loading the solution"}')
        return
    except BaseException:
        message = _describe()
        os.write(2, (message + "\n").encode())
        reply('{"load":' + encode(message) + "}")
        return
    fn = module.__dict__.get(init["entry_point"])
    if not callable(fn):
        reply('{"load":' + encode(f"entry point {init['entry_point']!r} is not defined") + "}")
        return
    del init, code
    reply('{"ready":true}')
    while (call := receive()) is not None:
        args, kwargs = call
        try:
            out = '{"value":' + encode(fn(*args, **kwargs)) + "}"
        except BaseException as exc:  # SystemExit included: the call failed, the program answers on
            out = '{"error":' + encode(type(exc).__name__) + ',"message":' + encode(str(exc)[:300]) + "}"
        reply(out)


if __name__ == "__main__":
    main()
