"""Group-aware vector stepping: G task groups x N copies of each task.

GiGPO and GRPO compare trajectories *of the same task*, so the N copies of a group
must get the same task (the same reset seed) while groups differ.  ``make_grouped``
builds a gymnasium ``VectorEnv`` with that layout.  Env ``e`` belongs to group
``e // N``; its ``info`` carries ``group_id`` and ``traj_id`` (= ``e``).  ``group_offset=k``
makes this env the slice of a larger one that starts at group ``k`` (one process of a
data-parallel run): group ids, trajectory ids and task seeds are the larger env's.

Backends run the same chunk protocol: ``sync`` holds every env in this process;
``async`` runs ``num_workers`` processes and ``ray`` runs ``num_workers`` Ray actors
(possibly on other machines), each holding a *chunk* of envs (one process per env,
as gymnasium's ``AsyncVectorEnv`` does, wastes a core per env on text envs that step
in microseconds).  Observations are strings, so nothing
goes through shared memory.

A worker (process or actor) that dies is restarted: the episodes it held end as
truncated with ``info["worker_failed"] = True`` and the others go on (see
``GroupedVectorEnv``).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import signal
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from gigpo_gym.core.env import derive_seed

BACKENDS = ("sync", "async", "ray")
#: How a script that starts async workers at import time must be written.
MAIN_GUARD_HINT = ('a script that makes async grouped envs at import time needs `if __name__ == "__main__":` '
                   "(workers start with forkserver or spawn, which import the main module)")  # fmt: skip


class WorkerDied(Exception):
    """The process or Ray actor holding a chunk is gone (an env's own error is a RuntimeError)."""

def _build_env(env_id: str, env_kwargs: dict[str, Any], wrappers: Sequence[Callable[[gym.Env], gym.Env]]) -> gym.Env:
    if env_id.startswith("gigpo_gym/"):  # gymnasium imports the suite first, which registers it in a fresh worker
        env_id = f"gigpo_gym:{env_id}"
    env = gym.make(env_id, **env_kwargs)
    for wrap in wrappers:
        env = wrap(env)
    return env


class _Chunk:
    """Envs held by one executor; the unit both backends run."""

    def __init__(self, factory: Callable[[], gym.Env], indices: Sequence[int]):
        self.envs = {i: factory() for i in indices}

    def ready(self) -> int:
        """The pid holding the envs, answered once they are built (workers and actors build them remotely)."""
        return os.getpid()

    def reset(self, items: list[tuple[int, int, dict]]) -> list[tuple]:
        return [(i, *self.envs[i].reset(seed=seed, options=options)) for i, seed, options in items]

    def step(self, items: list[tuple[int, Any]]) -> list[tuple]:
        return [(i, *self.envs[i].step(action)) for i, action in items]

    def call(self, name: str, args: tuple, kwargs: dict) -> list[tuple[int, Any]]:
        out = []
        for i, env in self.envs.items():
            attr = env.get_wrapper_attr(name)
            out.append((i, attr(*args, **kwargs) if callable(attr) else attr))
        return out

    def close(self) -> None:
        for env in self.envs.values():
            env.close()


class _LocalChunk(_Chunk):
    """A chunk in this process, behind the same send/receive interface as a worker."""

    def send(self, command: str, *payload: Any) -> None:
        self._result = getattr(self, command)(*payload)

    def receive(self) -> Any:
        result, self._result = self._result, None
        return result


def _worker(conn, factory, indices) -> None:
    """Serve one chunk over a pipe until told to close."""
    try:
        chunk = _Chunk(factory, indices)
        conn.send(("ok", os.getpid()))
    except BaseException:  # report construction errors to the parent, then quit
        conn.send(("error", traceback.format_exc()))
        conn.close()
        return
    try:
        while True:
            command, payload = conn.recv()
            if command == "close":
                chunk.close()
                conn.send(("ok", None))
                break
            try:
                conn.send(("ok", getattr(chunk, command)(*payload)))
            except BaseException:
                conn.send(("error", traceback.format_exc()))
    except (EOFError, KeyboardInterrupt):
        chunk.close()
    finally:
        conn.close()


class _WorkerChunk:
    """A chunk in a worker process, with the ``_Chunk`` interface."""

    what = "worker process"

    def __init__(self, ctx, factory, indices: Sequence[int], timeout: float | None):
        self.timeout = timeout
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, factory, list(indices)), daemon=True)
        self.process.start()
        child.close()
        self.pid = self.process.pid

    def send(self, command: str, *payload: Any) -> None:
        try:
            self.conn.send((command, payload))
        except OSError as e:  # BrokenPipeError, ConnectionResetError: the worker is gone
            raise WorkerDied(self._death()) from e

    def receive(self) -> Any:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while not self.conn.poll(1.0):  # a dead worker's pipe polls ready (EOF); is_alive covers the rest
            if not self.process.is_alive():
                break
            if deadline is not None and time.monotonic() > deadline:
                self.process.kill()
                raise WorkerDied(f"did not answer within worker_timeout={self.timeout} s and was killed")
        try:
            status, value = self.conn.recv()
        except (EOFError, OSError) as e:
            raise WorkerDied(self._death()) from e
        if status == "error":
            raise RuntimeError(f"error in worker process {self.pid}:\n{value}")
        return value

    def _death(self) -> str:
        self.process.join(timeout=5)
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"died (exit code {code})"

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError, EOFError):
                self.conn.send(("close", ()))
                if self.conn.poll(5):
                    self.conn.recv()
            self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()


class _RayChunk:
    """A chunk held by a Ray actor (one actor per chunk, never one per env)."""

    what = "Ray actor"

    def __init__(self, factory, indices: Sequence[int], actor_options: dict[str, Any], timeout: float | None):
        import ray

        self._ray, self.timeout, self.pid = ray, timeout, None
        self.actor = ray.remote(_Chunk).options(**actor_options).remote(factory, list(indices))
        self._pending = self.actor.ready.remote()

    def send(self, command: str, *payload: Any) -> None:
        self._pending = getattr(self.actor, command).remote(*payload)

    def receive(self) -> Any:
        errors = self._ray.exceptions
        try:
            return self._ray.get(self._pending, timeout=self.timeout)
        except errors.GetTimeoutError as e:
            self._ray.kill(self.actor)
            raise WorkerDied(f"did not answer within worker_timeout={self.timeout} s and was killed") from e
        except errors.RayActorError as e:
            raise WorkerDied(f"died ({str(e).strip().splitlines()[0]})") from e
        except errors.RayError as e:
            raise RuntimeError(f"error in Ray actor:\n{e}") from e

    def close(self) -> None:
        try:
            self._ray.get(self.actor.close.remote(), timeout=10)
        except Exception:  # the actor may already be gone; killing it below is what matters
            pass
        self._ray.kill(self.actor)


def _ray_options(num_actors: int, actor_options: dict[str, Any] | None) -> dict[str, Any]:
    try:
        import ray
    except ImportError as e:
        from gigpo_gym.core.extras import missing_extra_error

        raise missing_extra_error("ray", 'backend="ray"') from e
    if not ray.is_initialized():  # connects to $RAY_ADDRESS when set, else starts a local Ray
        ray.init(include_dashboard=False, log_to_driver=False)
    if actor_options is None:  # share the cluster's CPUs so that every actor can be placed
        cpus = ray.available_resources().get("CPU", 1.0)
        actor_options = {"num_cpus": min(1.0, cpus / num_actors)}
    return actor_options


class GroupedVectorEnv(VectorEnv):
    """``num_groups * group_size`` envs; the copies of a group share each task.

    ``reset(seed=s)`` resets env ``e`` with seed ``derive_seed(s, e // group_size)``
    (without a seed, round ``k`` uses ``derive_seed(base_seed, k)`` as ``s``);
    ``options={"env_options": [...]}`` adds each env's own reset options (a task id, say)
    to the shared ones, and ``"reset_mask"`` resets only some envs, as in gymnasium.  With
    ``autoreset=False`` (the rollout mode) an env whose episode ended is frozen: later
    steps ignore its action and return its final observation, reward 0, the same
    done flags and its final info, so a policy only needs to act for active envs.
    With ``autoreset=True`` gymnasium's next-step autoreset applies, and the k-th
    episode of every copy of group g uses the same task seed
    ``derive_seed(s, g, k)``, so groups stay groups.

    Worker failures (``async`` and ``ray``): a worker process or actor that dies (or,
    with ``worker_timeout``, takes longer than that to answer) is replaced by a new one
    that rebuilds its envs and resets them to their current tasks.  Its running
    episodes end there: truncated, reward 0, their last observation, and
    ``info["worker_failed"] = True``; a ``RuntimeWarning`` names the pid and the env
    indices.  The other episodes go on.  Past ``max_worker_restarts`` restarts the env
    closes and raises ``RuntimeError`` naming the cause.  An exception raised by an env
    itself is not a failure of its worker: it reaches the caller as a ``RuntimeError``.
    """

    def __init__(
        self,
        factory: Callable[[], gym.Env],
        num_groups: int,
        group_size: int,
        *,
        backend: str = "sync",
        seed: int = 0,
        num_workers: int | None = None,
        autoreset: bool = False,
        context: str | None = None,
        ray_actor_options: dict[str, Any] | None = None,
        max_worker_restarts: int = 3,
        worker_timeout: float | None = None,
        group_offset: int = 0,
    ):
        for name, value in (("num_groups", num_groups), ("group_size", group_size)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not isinstance(group_offset, (int, np.integer)) or group_offset < 0:
            raise ValueError(f"group_offset must be an int >= 0, got {group_offset!r}")
        if not isinstance(max_worker_restarts, (int, np.integer)) or max_worker_restarts < 0:
            raise ValueError(f"max_worker_restarts must be an int >= 0, got {max_worker_restarts!r}")
        if worker_timeout is not None and not worker_timeout > 0:
            raise ValueError(f"worker_timeout must be None or > 0 seconds, got {worker_timeout!r}")
        self.num_groups, self.group_size = int(num_groups), int(group_size)
        self.num_envs = self.num_groups * self.group_size
        self.backend, self.base_seed, self.autoreset = backend, int(seed), bool(autoreset)
        self.max_worker_restarts, self.worker_restarts = int(max_worker_restarts), 0
        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP if autoreset else AutoresetMode.DISABLED}

        self.group_offset = int(group_offset)
        self.group_ids = np.arange(self.num_envs) // self.group_size + self.group_offset
        self._round = 0
        self._round_seed = self.base_seed
        self._episodes = np.zeros(self.num_envs, dtype=np.int64)
        self._done = np.ones(self.num_envs, dtype=bool)
        self._last: list[tuple | None] = [None] * self.num_envs
        #: (seed, options) of each env's last reset: a restarted worker resets its envs with them.
        self._reset_args: list[tuple[int, dict] | None] = [None] * self.num_envs

        if backend == "sync":
            self._ranges = [range(self.num_envs)]
            self._chunks = [_LocalChunk(factory, self._ranges[0])]
        else:
            workers = num_workers or min(self.num_envs, os.cpu_count() or 1)
            if not 1 <= workers <= self.num_envs:
                raise ValueError(f"num_workers must be in [1, num_envs={self.num_envs}], got {workers}")
            bounds = np.linspace(0, self.num_envs, workers + 1).astype(int)
            self._ranges = [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
            if backend == "ray":
                options = _ray_options(workers, ray_actor_options)
                self._new_chunk = lambda r: _RayChunk(factory, r, options, worker_timeout)
            else:
                ctx = mp.get_context(context or ("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"))
                self._new_chunk = lambda r: _WorkerChunk(ctx, factory, r, worker_timeout)
            self._chunks = [self._new_chunk(r) for r in self._ranges]
            try:
                for chunk in self._chunks:
                    self._await_ready(chunk)
            except RuntimeError:
                self.close_extras()
                raise
        self._owner = np.repeat(np.arange(len(self._ranges)), [len(r) for r in self._ranges])

        spaces = self._broadcast("call", "observation_space", (), {})
        self.single_observation_space = spaces[0]
        self.single_action_space = self._broadcast("call", "action_space", (), {})[0]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    # -- chunk plumbing -----------------------------------------------------------
    def _await_ready(self, chunk) -> None:
        """Wait until ``chunk`` has built its envs and learn the pid holding them."""
        try:
            chunk.pid = chunk.receive()
        except WorkerDied as e:
            hint = f"; {MAIN_GUARD_HINT}" if self.backend == "async" else ""
            raise RuntimeError(f"{chunk.what} {chunk.pid} {e} before its envs were built{hint}") from None

    def _run(self, command: str, items: list[tuple]) -> tuple[dict[int, tuple], dict[int, str]]:
        """Send each env's item to the chunk holding it.

        Returns the results keyed by env index and the causes of death of the chunks whose
        worker died.  Every live chunk is read before an env's error is raised, so that no
        reply is left behind in a pipe.
        """
        per_chunk: dict[int, list] = {}
        for item in items:
            per_chunk.setdefault(int(self._owner[item[0]]), []).append(item)
        replies = self._exchange({k: (command, chunk_items) for k, chunk_items in per_chunk.items()})
        results, failed = {}, {}
        for k, reply in replies.items():
            if isinstance(reply, WorkerDied):
                failed[k] = str(reply)
            else:
                results.update((r[0], r[1:]) for r in reply)
        return results, failed

    def _exchange(self, commands: dict[int, tuple]) -> dict[int, Any]:
        """Send ``commands[k]`` to chunk k, then read every reply (a WorkerDied for a dead worker)."""
        replies: dict[int, Any] = {}
        for k, (command, *payload) in commands.items():
            try:
                self._chunks[k].send(command, *payload)
            except WorkerDied as e:
                replies[k] = e
        error = None
        for k in commands:
            if k in replies:
                continue
            try:
                replies[k] = self._chunks[k].receive()
            except WorkerDied as e:
                replies[k] = e
            except RuntimeError as e:
                error = error or e
        if error is not None:
            raise error
        return replies

    def _broadcast(self, command: str, *payload: Any) -> list[Any]:
        """Run ``command`` on every chunk; a chunk whose worker died is restarted and asked again."""
        out: dict[int, Any] = {}
        for k, reply in self._exchange({k: (command, *payload) for k in range(len(self._chunks))}).items():
            while isinstance(reply, WorkerDied):
                self._recover(k, str(reply))
                reply = self._exchange({k: (command, *payload)})[k]
            out.update(reply)
        return [out[i] for i in range(self.num_envs)]

    def _recover(self, k: int, cause: str, fresh: set[int] = frozenset(), resetting: set[int] = frozenset()) -> None:
        """Replace chunk k's dead worker and settle its envs.

        Envs in ``resetting`` get the restarted worker's reset as their reset.  The other
        running episodes of the chunk end truncated with ``worker_failed``; the reward of
        this step is kept for those in ``fresh`` (their step result arrived), else 0.
        """
        resets = self._restart(k, cause)
        for i in self._ranges[k]:
            if i in resetting:
                obs, info = resets[i]
                self._last[i] = (obs, 0.0, False, False, self._tag(info, i))
                self._done[i] = False
            elif not self._done[i] and self._last[i] is not None:
                obs, reward, _, _, info = self._last[i]
                self._last[i] = (obs, reward if i in fresh else 0.0, False, True, {**info, "worker_failed": True})
                self._done[i] = True

    def _restart(self, k: int, cause: str) -> dict[int, tuple]:
        """Start a new worker for chunk k and reset its envs to their current tasks; their (obs, info)."""
        while True:
            old, indices = self._chunks[k], list(self._ranges[k])
            where = f"{old.what} {old.pid} (envs {indices[0]}..{indices[-1]})"
            old.close()
            if self.worker_restarts >= self.max_worker_restarts:
                self.close()
                raise RuntimeError(f"{where} {cause}; giving up after {self.worker_restarts} worker restarts "
                                   f"(max_worker_restarts={self.max_worker_restarts})")  # fmt: skip
            self.worker_restarts += 1
            warnings.warn(f"{where} {cause}; restarting it ({self.worker_restarts} of max_worker_restarts="
                          f"{self.max_worker_restarts}); its running episodes end as truncated with "
                          "info['worker_failed'] = True", RuntimeWarning, stacklevel=4)  # fmt: skip
            self._chunks[k] = chunk = self._new_chunk(self._ranges[k])
            items = [(i, *self._reset_args[i]) for i in indices if self._reset_args[i] is not None]
            try:
                self._await_ready(chunk)
                chunk.send("reset", items)
                return {r[0]: r[1:] for r in chunk.receive()}
            except WorkerDied as e:
                cause = str(e)

    # -- VectorEnv API --------------------------------------------------------------
    def task_seed(self, env_index: int, episode: int = 0) -> int:
        """The reset seed of ``env_index``'s ``episode``-th episode of this round."""
        group = int(self.group_ids[env_index])
        if episode == 0:
            return derive_seed(self._round_seed, group)
        return derive_seed(self._round_seed, group, episode)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        options = dict(options or {})
        mask = np.asarray(options.pop("reset_mask", np.ones(self.num_envs, dtype=bool)), dtype=bool)
        if mask.shape != (self.num_envs,):
            raise ValueError(f"reset_mask must have shape ({self.num_envs},), got {mask.shape}")
        own = options.pop("env_options", None)
        if own is not None and len(own) != self.num_envs:
            raise ValueError(f"env_options must hold one mapping per env ({self.num_envs}), got {len(own)}")
        if seed is not None:
            self._round_seed = int(seed)
        elif self._round > 0:
            self._round_seed = derive_seed(self.base_seed, self._round)
        self._round += 1
        indices = [int(i) for i in np.flatnonzero(mask)]
        self._episodes[indices] = 0
        self._reset_all([(i, self.task_seed(i), options if own is None else {**options, **own[i]}) for i in indices],
                        fresh=set())
        return self._gather(self._last, reset=True)

    def step(self, actions: Sequence[Any]):
        if len(actions) != self.num_envs:
            raise ValueError(f"expected {self.num_envs} actions (one per env), got {len(actions)}")
        if any(last is None for last in self._last):
            raise RuntimeError("call reset() before step()")
        finished = np.flatnonzero(self._done)
        results, failed = self._run("step", [(int(i), actions[i]) for i in np.flatnonzero(~self._done)])
        for i, (obs, reward, terminated, truncated, info) in results.items():
            self._last[i] = (obs, float(reward), bool(terminated), bool(truncated), self._tag(info, i))
            self._done[i] = terminated or truncated
        for k, cause in failed.items():
            self._recover(k, cause)
        if self.autoreset and finished.size:  # next-step autoreset: this step's action is ignored
            self._episodes[finished] += 1
            items = [(int(i), self.task_seed(int(i), int(self._episodes[i])), {}) for i in finished]
            self._reset_all(items, fresh=set(results))
        else:
            for i in finished:  # frozen: same obs and info, no reward, same done flags
                obs, _, terminated, truncated, info = self._last[i]
                self._last[i] = (obs, 0.0, terminated, truncated, info)
        return self._gather(self._last, reset=False)

    def _reset_all(self, items: list[tuple[int, int, dict]], fresh: set[int]) -> None:
        """Reset the envs of ``items`` (index, seed, options); a dead worker's are reset by its replacement."""
        for i, seed, options in items:
            self._reset_args[i] = (seed, options)
        results, failed = self._run("reset", items)
        for i, (obs, info) in results.items():
            self._last[i] = (obs, 0.0, False, False, self._tag(info, i))
            self._done[i] = False
        for k, cause in failed.items():
            self._recover(k, cause, fresh=fresh, resetting={i for i, _, _ in items if self._owner[i] == k})

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` (or read the attribute) on every env, through its wrappers."""
        return tuple(self._broadcast("call", name, args, kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def close_extras(self, **kwargs: Any) -> None:
        for chunk in self._chunks:
            chunk.close()

    # -- helpers --------------------------------------------------------------------
    def _tag(self, info: dict[str, Any], i: int) -> dict[str, Any]:
        info["group_id"] = int(self.group_ids[i])
        info["traj_id"] = i + self.group_offset * self.group_size
        return info

    def _gather(self, rows: list[tuple], reset: bool):
        observations = tuple(row[0] for row in rows)
        infos: dict[str, Any] = {}
        for i, row in enumerate(rows):
            infos = self._add_info(infos, row[4], i)
        if reset:
            return observations, infos
        rewards = np.array([row[1] for row in rows], dtype=np.float64)
        terminated = np.array([row[2] for row in rows], dtype=bool)
        truncated = np.array([row[3] for row in rows], dtype=bool)
        return observations, rewards, terminated, truncated, infos

    @property
    def active(self) -> np.ndarray:
        """Which envs are mid-episode (a rollout generates actions only for these)."""
        return ~self._done


def make_grouped(
    env_id: str,
    num_groups: int,
    group_size: int,
    *,
    backend: str = "sync",
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    num_workers: int | None = None,
    autoreset: bool = False,
    context: str | None = None,
    ray_actor_options: dict[str, Any] | None = None,
    max_worker_restarts: int = 3,
    worker_timeout: float | None = None,
    group_offset: int = 0,
) -> GroupedVectorEnv:
    """A ``VectorEnv`` of ``num_groups`` task groups with ``group_size`` copies each.

    ``wrappers`` are applied to every env (in the worker, for ``async``), innermost
    first; they must be picklable for ``async``/``ray`` (classes and
    ``functools.partial`` are).  ``num_workers`` (processes or Ray actors, each
    holding a chunk of envs) defaults to the number of CPU cores.  ``ray`` connects to
    the cluster in ``$RAY_ADDRESS`` or starts a local one; ``ray_actor_options`` go to
    ``actor.options()`` (default: the free CPUs shared between the actors).
    A dead worker is restarted up to ``max_worker_restarts`` times (its running
    episodes end truncated with ``info["worker_failed"]``); ``worker_timeout``
    (seconds, default none) counts a worker that takes longer to answer as dead.
    ``group_offset=k``: these are groups ``k .. k + num_groups - 1`` of a larger grouped
    env (same group ids, trajectory ids and task seeds), as one process of a
    data-parallel run plays them.

    >>> import gigpo_gym
    >>> envs = gigpo_gym.make_grouped("gigpo_gym/SearchQA-v0", num_groups=2, group_size=3, seed=7)
    >>> obs, info = envs.reset()
    >>> obs[0] == obs[1] == obs[2], obs[0] == obs[3]
    (True, False)
    >>> list(info["group_id"]), list(info["traj_id"])
    ([0, 0, 0, 1, 1, 1], [0, 1, 2, 3, 4, 5])
    >>> envs.close()
    """

    factory = functools.partial(_build_env, env_id, dict(env_kwargs or {}), tuple(wrappers))
    env = GroupedVectorEnv(
        factory,
        num_groups,
        group_size,
        backend=backend,
        seed=seed,
        num_workers=num_workers,
        autoreset=autoreset,
        context=context,
        ray_actor_options=ray_actor_options,
        max_worker_restarts=max_worker_restarts,
        worker_timeout=worker_timeout,
        group_offset=group_offset,
    )
    env.spec = None
    return env
