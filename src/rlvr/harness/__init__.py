"""The boundary around user code: environments, tools and agent programs run where they can be
abandoned or killed, and what they send back is checked before rlvr reads it.

    worker = Worker("env")                         # a fresh interpreter in a session of its own
    future = worker.submit(fn, *args)              # fn(*args) runs there in a thread of its own
    future.result(timeout)                         # fn's value (plain data), or CallFailed
    worker.kill()                                  # SIGKILL to its whole process group

`fn` and its arguments travel with cloudpickle (closures and classes defined in a test or a
notebook too); the value must be plain data (None, bool, int, float, str, bytes, list, tuple,
dict): it is read back by an unpickler that loads no class, so nothing a worker sends can run
code in the trainer. `text(...)` makes any string safe to tokenise and bounded.
"""

from rlvr.harness.text import clip, safe_text
from rlvr.harness.worker import CallFailed, Worker

__all__ = ["CallFailed", "Worker", "clip", "safe_text"]
