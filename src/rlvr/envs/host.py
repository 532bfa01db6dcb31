"""Where environments live: in worker processes that can be killed, or in threads of the trainer.

    host = ProcessHost(workers=2)            # or ThreadHost() for rlvr's own environments
    handle, future = host.open(factory, problem, seed, limits)
    future = host.step(handle, text, limits) # futures of rlvr.envs.checks outcomes (plain data)
    host.abandon(handle)                     # it overran: its worker is killed at the rollout's end
    host.recycle()                           # end of a rollout: kill what overran or died, start replacements

A ProcessHost spreads episodes over `workers` processes (rlvr.harness.Worker), each hosting many
environments, their calls in threads. An episode that overruns a time bound is abandoned: no new
episode goes to its worker, which is killed (with whatever the environment started) once the
rollout's other episodes are over, so a hung environment costs its own episode and never the run.
A worker that dies (os._exit, a crash) fails only the episodes it hosted. The factory travels once
per worker (cloudpickle: a class of a test or a notebook too).

A ThreadHost runs the same checked calls in daemon threads of this process: for rlvr's own
environments, whose user code (tools) is contained at the tool call; an overrun there is
abandoned, never waited for, and never keeps the process alive.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable

from rlvr.envs import Environment
from rlvr.envs.checks import Limits, close_env, env_name, fault, open_env, step_env
from rlvr.harness import CallFailed, Worker

_keys = itertools.count()
LOAD_TIMEOUT_S = 120.0
"""A fresh worker's import of the environment's module (not counted against env.reset_timeout_s)."""


@dataclass
class Handle:
    """One episode's environment, wherever it lives."""

    key: int
    worker: Worker | None = None
    info: dict[str, Any] = field(default_factory=dict)
    """What open_env said: class, tools (schemas), multi_turn."""
    built: bool = False
    """Its environment was constructed (so it is closed at the end)."""
    abandoned: bool = False
    """A call of it overran: never called again (its worker is killed; in a thread, it is dropped)."""

    @property
    def name(self) -> str:
        return self.info.get("class", "environment")


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _resolved(future: Future, method: str) -> Future:
    """A worker's future with its CallFailed turned into a fault outcome (the calls never raise)."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(f.result())
        except CallFailed as exc:  # the worker died, was killed, or the call could not travel
            out.set_result(fault(method, exc.kind, exc.type_name, exc.message))

    future.add_done_callback(done)
    return out


# --- in a worker process -----------------------------------------------------------------------

_HOSTED: dict[int, Environment] = {}
_FACTORIES: dict[int, Callable] = {}


def _install(factory_id: int, factory: Callable) -> None:
    _FACTORIES[factory_id] = factory  # unpickling it imported its module


def _open_there(key: int, factory_id: int, problem, seed: int, limits: Limits) -> dict:
    return open_env(_HOSTED, key, _FACTORIES[factory_id], problem, seed, limits)


def _step_there(key: int, text: str, limits: Limits) -> dict:
    return step_env(_HOSTED, key, text, limits)


def _close_there(key: int) -> dict:
    return close_env(_HOSTED, key)


class ProcessHost:
    def __init__(self, workers: int = 2) -> None:
        self.size = workers
        self._workers: list[Worker] = []
        self._sent: dict[int, dict[int, Future]] = {}  # id(worker) -> its factories' installs (by factory id)
        self._tainted: set[int] = set()
        self._unloadable: dict[int, dict] = {}  # factory id -> the fault its load ended with
        self._factories: dict[int, tuple[int, Callable]] = {}  # id(factory) -> (factory id, factory: kept alive)
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def _worker(self) -> Worker:
        """A healthy worker for a new episode (one that overran or died stays listed until recycle kills it)."""
        with self._lock:
            healthy = [w for w in self._workers if not w.dead and id(w) not in self._tainted]
            while len(healthy) < self.size:
                healthy.append(Worker("env"))
                self._workers.append(healthy[-1])
            return healthy[next(self._turn) % len(healthy)]

    def open(self, factory: Callable, problem, seed: int, limits: Limits) -> tuple[Handle, Future]:
        worker = self._worker()
        handle = Handle(next(_keys), worker, {"class": env_name(factory)})
        factory_id = self._factories.setdefault(id(factory), (len(self._factories), factory))[0]
        if factory_id in self._unloadable:  # it failed to load once: it fails the same way, at once
            return handle, _done(self._unloadable[factory_id])
        try:  # installed in the worker before its first episode there: the import is not the reset's time
            self._install(worker, factory_id, factory).result(LOAD_TIMEOUT_S)
        except (CallFailed, FutureTimeout) as exc:
            self._tainted.add(id(worker))
            self._unloadable[factory_id] = fault(
                "__init__",
                getattr(exc, "kind", "timeout"),
                getattr(exc, "type_name", ""),
                f"the environment could not be loaded in a worker process: {exc or 'no answer'}",
            )
            return handle, _done(self._unloadable[factory_id])
        return handle, _resolved(worker.submit(_open_there, handle.key, factory_id, problem, seed, limits), "__init__")

    def _install(self, worker: Worker, factory_id: int, factory: Callable) -> Future:
        """The factory's install in the worker (its module imported there), submitted once."""
        sent = self._sent.setdefault(id(worker), {})
        if factory_id not in sent:
            sent[factory_id] = worker.submit(_install, factory_id, factory)
        return sent[factory_id]

    def run(self, name: str, fn: Callable, *args: Any) -> tuple[Handle, Future]:
        """fn(*args) in a worker (an agent program, called `name` in errors): the future's value, or CallFailed."""
        worker = self._worker()
        return Handle(next(_keys), worker, {"class": name}), worker.submit(fn, *args)

    def step(self, handle: Handle, text: str, limits: Limits) -> Future:
        return _resolved(handle.worker.submit(_step_there, handle.key, text, limits), "step")

    def close(self, handle: Handle) -> Future | None:
        if handle.worker is None or handle.worker.dead:
            return None  # gone with its worker
        return _resolved(handle.worker.submit(_close_there, handle.key), "close")

    def abandon(self, handle: Handle) -> None:
        handle.abandoned = True
        if handle.worker is not None:
            self._tainted.add(id(handle.worker))

    def recycle(self) -> None:
        """Kill the workers an episode overran on (and forget the dead ones), and start their replacements
        now, the environments' modules imported in them while the trainer updates: a rollout with a hung
        episode costs the next one nothing."""
        with self._lock:
            doomed = [w for w in self._workers if w.dead or id(w) in self._tainted]
            self._workers = [w for w in self._workers if w not in doomed]
        for worker in doomed:
            worker.kill()
            self._sent.pop(id(worker), None)
        self._tainted.clear()
        if doomed and self._factories:
            with self._lock:
                fresh = [Worker("env") for _ in range(self.size - len(self._workers))]
                self._workers += fresh
            for worker in fresh:
                for factory_id, factory in self._factories.values():
                    if factory_id not in self._unloadable:
                        self._install(worker, factory_id, factory)

    def shutdown(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.kill()


class ThreadHost:
    """inline: each call made at once, in the caller's thread (single_turn's trivial calls)."""

    def __init__(self, inline: bool = False) -> None:
        self._envs: dict[int, Environment] = {}
        self._abandoned: set[int] = set()
        self.inline = inline

    def _call(self, fn: Callable, *args: Any) -> Future:
        future: Future = Future()

        def run() -> None:
            future.set_result(fn(self._envs, *args))  # the checked calls never raise

        if self.inline:
            run()
        else:
            threading.Thread(target=run, name="rlvr-env", daemon=True).start()
        return future

    def open(self, factory: Callable, problem, seed: int, limits: Limits) -> tuple[Handle, Future]:
        handle = Handle(next(_keys), info={"class": env_name(factory)})
        return handle, self._call(open_env, handle.key, factory, problem, seed, limits)

    def step(self, handle: Handle, text: str, limits: Limits) -> Future:
        return self._call(step_env, handle.key, text, limits)

    def close(self, handle: Handle) -> Future | None:
        return self._call(close_env, handle.key)

    def abandon(self, handle: Handle) -> None:
        handle.abandoned = True  # its thread runs on, unheard (rlvr's own code ends its own)
        self._abandoned.add(handle.key)

    def recycle(self) -> None:
        """Forget the environments that overran (one whose open answered late included)."""
        for key in self._abandoned:
            self._envs.pop(key, None)
        self._abandoned.clear()

    def shutdown(self) -> None:
        self._envs.clear()


EnvHost = ProcessHost | ThreadHost
