"""The asynchronous rollout worker in its own OS process (`async_rl.worker = "process"`).

`ProcessWorker` offers what `rl.async_loop.run_async` uses of the thread worker
(`start`, `get(step)`, `pending_through(step)`, `join`) and follows the same
schedule, so a run gives the same groups and updates as with the thread (tested):
step t is sampled by version v(t) = max(v0, t − k) with key fold_in(rng, t).

Placement: the child is started with multiprocessing's "spawn" context (a fresh
interpreter: a process that has initialised jax is never forked) and builds its
own policy, tokenizer, task, prompt iterator, sampler and scheduler from the run's
config (`rl.parts.build_rollout_parts`, as the learner's `build_parts` does). It
shares neither the learner's Python interpreter (the GIL: its decode loop,
verification and batching are host Python) nor its XLA thread pool. With
`async_rl.worker_cpus` = "1" (say) the child is started pinned to those CPUs
(the starting thread's affinity is set around `Process.start` and inherited, so
the child's XLA thread pool is sized to them from the start); the learner's own
CPUs are the process's: pin it at launch (`taskset -c 0`), which also sizes its XLA
thread pool (no config field: a process that has started jax keeps its pool's size).

Weights: a thread of the learner (the pusher) takes each published version from
`async_loop.Versions`, copies its parameters to host numpy arrays and sends them
pickled over a pipe (the learner's main thread never waits for it); a reader
thread in the child keeps the versions it still needs, and the child puts them
on its own devices before sampling. `Produced.push_seconds`
(`async/weight_push_seconds`) is the push's work: the learner's host copy and
pickling, the pipe transfer with the child's unpickling, and its device_put.
The child sends each step's `Produced` back on a second pipe (from a sender
thread, so sampling never waits for the learner to read).

The scheduler's state and the prompt iterator's position (the in-flight rule of
`rl.async_loop`): they live in the child, which sends them with each `Produced`
(as they are after that step); the learner's copies (`parts.selector.state`,
`parts.prompts`) are set to those of the newest step received. A checkpoint at s
is saved after `pending_through(s + k − 1)` has received every in-flight step
and before version s is out, so nothing newer exists and the saved state is the
child's after the last in-flight step, as with the thread worker. A resumed run
sends the restored state to the child, which skips the preloaded steps.

Shutdown: `join` (the learner's `finally`: normal end, an exception, SIGTERM's
checkpoint) stops the child, then kills it if it has not exited within
`STOP_GRACE_S`; the child dies with the learner (PR_SET_PDEATHSIG: with the
thread that started it, so start it from one that outlives the run), ignores SIGINT
and SIGTERM (the learner saves its in-flight groups first), and a child that
exits while the learner waits (killed, or an exception, whose traceback it sends)
makes the learner raise instead of hanging. Not supported with a process worker
(refused by `validate`): partial rollouts and `async_rl.rollout_device`.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable

import jax
import numpy as np
from flax import nnx

from rlvr_jax.rl.async_loop import Closed, Produced, version_of
from rlvr_jax.rl.build import build_mesh
from rlvr_jax.rl.parts import build_rollout_parts, rollout_stage

log = logging.getLogger(__name__)

STOP_GRACE_S = 2.0  # a stopped child that has not exited by then is killed


def parse_cpus(text: str) -> set[int]:
    """The CPU set of `async_rl.worker_cpus` ("1", "0,2"); empty for "" (inherit)."""
    cpus = {int(x) for x in text.split(",")} if text else set()
    if cpus - set(range(os.cpu_count() or 1)):
        raise ValueError(
            f"config.async_rl.worker_cpus = {text!r}: this machine has CPUs "
            f"0..{(os.cpu_count() or 1) - 1}"
        )
    return cpus


class ProcessWorker:
    """The select and rollout stages of steps [first, last) in a child process.

    Args (as `async_loop.RolloutWorker`'s):
      trainer: the `rl.trainer.Trainer` (its config, rng, prompts and selector).
      k: the staleness bound; first_version: the version the run (re)started at.
      first, last: the steps to produce; versions: where the learner publishes.
      preloaded: saved groups of in-flight steps (a resume), not sampled again.
    """

    def __init__(self, trainer, k: int, first_version: int, first: int, last: int, versions,
                 preloaded: dict[int, Produced] | None = None):  # fmt: skip
        p = trainer.parts
        self.parts, self.versions = p, versions
        self._done: dict[int, Produced] = dict(preloaded or {})
        self.produced_through = max(self._done, default=first - 1)
        self._cpus = parse_cpus(p.config.async_rl.worker_cpus)
        restored = None
        if first:  # a resume: the child starts from the restored position and state
            restored = (p.prompts.get_state(), jax.device_get(p.selector.state))
        self._steps = [s for s in range(first, last) if s not in self._done]
        plan = dict(config=p.config, rng=np.asarray(trainer.state.rng), k=k,
                    first_version=first_version, steps=self._steps, restored=restored)  # fmt: skip
        ctx = mp.get_context("spawn")
        self._recv, self._send = ctx.Pipe(duplex=False)  # versions to the child
        self._results, self._child_out = ctx.Pipe(duplex=False)  # its messages back
        self.process = ctx.Process(target=_child_main, args=(plan, self._recv, self._child_out),
                                   name="rlvr-rollout-process", daemon=True)  # fmt: skip
        self._push_error: BaseException | None = None
        self._pusher = threading.Thread(
            target=self._push_versions, args=(k, first_version), daemon=True
        )

    def start(self) -> None:
        """Starts the child (pinned to `async_rl.worker_cpus`) and the weight pusher."""
        own = os.sched_getaffinity(0)
        try:
            if self._cpus:  # inherited by the child at its start (this thread's affinity)
                os.sched_setaffinity(0, self._cpus)
            self.process.start()
        finally:
            if self._cpus:
                os.sched_setaffinity(0, own)
        self._recv.close()  # the child's ends: its exit is then the pipe's end here
        self._child_out.close()
        self._pusher.start()

    def _push_versions(self, k: int, first_version: int) -> None:
        """Sends each version the child needs, in order, as it is published."""
        try:
            for v in sorted({version_of(s, k, first_version) for s in self._steps}):
                params = self.versions.wait(v)
                t0 = time.perf_counter()
                leaves = [np.asarray(x) for x in jax.device_get(jax.tree.leaves(params))]
                payload = pickle.dumps(leaves, pickle.HIGHEST_PROTOCOL)
                self._send.send_bytes(pickle.dumps((v, time.perf_counter() - t0)))
                self._send.send_bytes(payload)
        except Closed:
            pass
        except BaseException as e:  # noqa: BLE001 - e.g. a broken pipe: the child died
            self._push_error = e

    # ---------------------------------------------------------------- receiving
    def _receive(self, ready: Callable[[], bool]) -> None:
        """Takes the child's messages until `ready()`; raises if the child has exited."""
        while not ready():
            try:
                message = pickle.loads(self._results.recv_bytes())
            except EOFError:  # the child exited (killed, or crashed without a word)
                self.process.join(STOP_GRACE_S)
                raise RuntimeError(
                    f"the rollout worker process (pid {self.process.pid}) exited with code "
                    f"{self.process.exitcode} before producing step {self.produced_through + 1}"
                    + (f" (weight push: {self._push_error!r})" if self._push_error else "")
                ) from None
            self._handle(message)

    def _handle(self, message) -> None:
        if message[0] == "error":
            raise RuntimeError(
                f"the rollout worker process (pid {self.process.pid}) failed:\n{message[1]}"
            )
        _, produced, prompt_state, selector_state = message
        self._done[produced.step] = produced
        self.produced_through = produced.step
        self.parts.prompts.set_state(prompt_state)  # the child's, after this step
        self.parts.selector.state = selector_state

    def get(self, step: int) -> Produced:
        """Step `step`'s groups (blocks until produced), removed from the worker."""
        self._receive(lambda: step in self._done)
        return self._done.pop(step)

    def pending_through(self, step: int) -> list[Produced]:
        """The produced groups of every step up to `step` not yet handed out (blocks)."""
        self._receive(lambda: self.produced_through >= step)
        return [self._done[s] for s in sorted(self._done) if s <= step]

    def join(self, timeout: float | None = None) -> None:
        """Stops the child (killed if it has not exited after `STOP_GRACE_S`) and the pusher."""
        self.versions.close()  # the pusher's wait ends
        if self._pusher.ident is not None:
            self._pusher.join(timeout=timeout)
        self._send.close()  # the child's reader sees the end: it stops at its next wait
        if self.process.pid is not None:
            self.process.join(STOP_GRACE_S)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout)
        self._results.close()


class _Outbox:
    """The child's messages to the learner, sent by a thread (sampling never waits on it)."""

    def __init__(self, conn):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._send, args=(conn,), daemon=True)
        self._thread.start()

    def _send(self, conn) -> None:
        while (message := self._queue.get()) is not None:
            conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))

    def put(self, message) -> None:
        self._queue.put(message)

    def close(self) -> None:
        """Sends what is queued, then returns."""
        self._queue.put(None)
        self._thread.join()


# ---------------------------------------------------------------------- the child
class _Inbox:
    """The versions received in the child (a reader thread fills it from the pipe)."""

    def __init__(self, conn):
        self._cond = threading.Condition()
        self._params: dict[int, tuple[float, list]] = {}  # version -> (push seconds, leaves)
        self._closed = False
        threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn) -> None:
        try:
            while True:
                v, seconds = pickle.loads(conn.recv_bytes())  # the learner's copy + pickle
                conn.poll(None)  # the parameters follow at once: time their transfer
                t0 = time.perf_counter()
                leaves = pickle.loads(conn.recv_bytes())
                seconds += time.perf_counter() - t0
                with self._cond:
                    self._params[v] = (seconds, leaves)
                    self._cond.notify_all()
        except (EOFError, OSError):  # the learner closed the pipe (or exited)
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def wait(self, version: int) -> tuple[float, list]:
        """(seconds its push took so far, parameter leaves) of `version`; older versions
        are dropped."""
        with self._cond:
            while version not in self._params and not self._closed:
                self._cond.wait()
            if version not in self._params:
                raise Closed()
            for v in [v for v in self._params if v < version]:
                del self._params[v]
            return self._params[version]


def _die_with_parent() -> None:
    """SIGKILL when the learner exits, however it exits (Linux prctl; elsewhere the pipe's
    end stops the child at its next wait)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if mp.parent_process() is not None and not mp.parent_process().is_alive():
        os._exit(1)  # the learner exited before prctl took effect


def _child_main(plan: dict, conn, out_conn) -> None:
    """The child: builds the rollout parts, then samples its steps on received versions."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner stops it (join)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the learner saves its groups first
    results = _Outbox(out_conn)
    try:
        _produce_all(plan, conn, results)
    except Closed:
        pass
    except BaseException:  # noqa: BLE001 - sent to the learner, which raises it
        results.put(("error", traceback.format_exc()))
    results.close()


def _produce_all(plan: dict, conn, results) -> None:
    inbox = _Inbox(conn)  # reading from the start: the learner's push never waits for it
    c = plan["config"]
    r = build_rollout_parts(c, build_mesh(c), processes=1)
    if plan["restored"] is not None:
        prompt_state, r.selector.state = plan["restored"]
        r.prompts.set_state(prompt_state)
    param_state = nnx.state(r.model, nnx.Param)
    leaves, treedef = jax.tree.flatten(param_state)
    shardings = [x.sharding for x in leaves]
    log.info("rollout worker process %d on CPUs %s", os.getpid(), sorted(os.sched_getaffinity(0)))
    for step in plan["steps"]:
        version = version_of(step, plan["k"], plan["first_version"])
        t0 = time.perf_counter()
        sent, received = inbox.wait(version)
        t1 = time.perf_counter()
        if [x.shape for x in received] != [x.shape for x in leaves]:
            raise ValueError("the learner's parameters do not match the worker's model")
        params = jax.block_until_ready(jax.device_put(received, shardings))
        push = sent + time.perf_counter() - t1  # host copy, pickle, pipe, device_put
        nnx.update(r.model, jax.tree.unflatten(treedef, params))
        key = jax.random.fold_in(plan["rng"], step)  # as the synchronous step's key
        groups, stats, fields = r.selector.step(
            key, rollout=lambda request, key: rollout_stage(r, request, key)
        )
        t2 = time.perf_counter()
        produced = Produced(step, version, groups, stats, fields, t2 - t1, t1 - t0, push)
        results.put(("produced", produced, r.prompts.get_state(), jax.device_get(r.selector.state)))
