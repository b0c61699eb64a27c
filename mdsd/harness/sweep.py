"""Running a sweep's tasks: in order in this process, or as tasks on a Ray cluster.

An experiment that loops over prompts, positions, trees, verifiers or temperatures states each
iteration as a *task*: a plain description (dicts, lists, numbers, strings) that carries everything
its result depends on, its seed included, and a module-level function ``fn(task, **shared)`` that
computes it. :func:`run_tasks` runs every task and returns the results in task order, whatever order
they finished in. A task's result is a JSON value and goes through JSON on its way back (floats
round-trip exactly), so a run in this process, a run on Ray and a resumed run return equal results
and the experiment writes the same files.

Each task runs with torch on ``num_cpus`` threads (Ray also sets ``OMP_NUM_THREADS`` so in its
workers), so reductions split the same way wherever it runs. A task that raises (or whose Ray worker
dies) is run again, up to ``retries`` more times; one that still fails is reported in a
:class:`SweepError` raised after every other task has finished. With ``checkpoint``, each result is
appended to a JSON-lines file as it arrives and a rerun with the same file runs only the tasks not in
it, so nothing finished is lost to a failure, an interruption or a lost cluster.

Ray is an optional extra (``pip install -e ".[ray]"``), imported only when ``ray`` is given:

- ``ray="local"`` (an experiment's ``--ray`` alone) starts a new Ray instance on this machine's cores,
  stopped again when the sweep ends;
- ``ray=ADDRESS`` (``--ray ADDRESS``) joins a running cluster: ``auto`` for the one this machine is a
  node of, ``HOST:6379`` for its head, ``ray://HOST:10001`` through Ray Client (needs ``ray[client]``);
- if Ray is already initialised in this process (``ray.init(...)`` called before), that connection is
  used and left open.

A cluster, for example two machines::

    ray start --head --port 6379                 # on the head node
    ray start --address HEAD:6379                # on every other node
    python experiments/theorems.py --ray auto    # on a node (or --ray HEAD:6379 from elsewhere)
    ray stop                                     # on every node, when done

Every node needs the same mdsd checkout installed (``pip install -e ".[ray]"``) and, for experiments that
load models, the models in its cache (``mdsd models fetch``). Data a task shares with every other
(``shared``) is put into Ray's object store once, not sent with each task. Recent Ray clusters use token
authentication: with an explicit address, set ``RAY_AUTH_MODE=token`` and give the head's token
(``~/.ray/auth_token`` on the head) as ``RAY_AUTH_TOKEN`` or in the same file.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

__all__ = ["run_tasks", "finished_tasks", "SweepError", "TaskFailure", "per_process"]

INSTALL = 'Ray is an optional extra of mdsd: pip install -e ".[ray]" (or pip install "ray>=2.9")'


@dataclass(frozen=True)
class TaskFailure:
    """A task that failed every attempt: its position, description, attempts and last error."""

    index: int
    task: object
    attempts: int
    error: str  # "ValueError: ..." of the last attempt
    traceback: str  # the last attempt's traceback (on Ray: as the worker printed it)


class SweepError(RuntimeError):
    """Some tasks failed after all their retries; ``results`` holds every other task's (None for these)."""

    def __init__(self, failures: list[TaskFailure], results: list, checkpoint: Path | None) -> None:
        self.failures, self.results, self.checkpoint = failures, results, checkpoint
        lines = [
            f"{len(failures)} of {len(results)} tasks failed after {failures[0].attempts} attempt(s) each:"
        ]
        lines += [f"  task {f.index} {f.task!r}: {f.error}" for f in failures[:10]]
        if len(failures) > 10:
            lines.append(f"  ... and {len(failures) - 10} more (see .failures)")
        finished = len(results) - len(failures)
        if checkpoint is not None:
            lines.append(
                f"The {finished} finished results are in {checkpoint}: "
                "a rerun with the same checkpoint runs only the failed tasks."
            )
        lines.append("Last traceback:\n" + failures[-1].traceback)
        super().__init__("\n".join(lines))


def run_tasks(
    fn: Callable,
    tasks: Iterable,
    *,
    shared: dict | None = None,
    ray: str | None = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    retries: int = 2,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = True,
    desc: str | None = None,
) -> list:
    """Run ``fn(task, **shared)`` for every task; return the results in task order.

    Parameters
    ----------
    fn : a module-level function ``fn(task, **shared)`` returning a JSON value (dict, list, str, int,
        float, bool, None; numpy arrays must be turned into lists).
    tasks : plain descriptions, one per call; with ``checkpoint`` they must be JSON values too.
    shared : keyword arguments passed to every call (data common to all tasks); on Ray, put into the
        object store once.
    ray : None to run the tasks one after the other in this process; ``"local"`` (a new Ray instance
        on this machine) or a cluster address (``"auto"``, ``"HOST:PORT"``) to run them as Ray tasks
        (see the module docstring).
    num_cpus, num_gpus : what one task needs; torch runs on ``max(1, int(num_cpus))`` threads in it.
        On Ray, a task with ``num_gpus=1`` sees one GPU (``cuda`` is the one it was given).
    retries : how many times a failed task is run again before it is reported.
    checkpoint : a JSON-lines file; finished results are appended as they arrive, and results already
        in it (for the same tasks) are not computed again.
    progress : show a progress bar of finished tasks.
    desc : the progress bar's label.

    Raises
    ------
    SweepError
        after every task has run, if some failed ``retries + 1`` times.
    ImportError
        if ``ray`` is given and Ray is not installed.

    Examples
    --------
    >>> run_tasks(pow, [2, 3, 4], shared={"exp": 2}, progress=False)
    [4, 9, 16]
    """
    tasks = list(tasks)
    shared = dict(shared or {})
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    if not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an int >= 0, got {retries!r}")
    if not num_cpus > 0 or not num_gpus >= 0:
        raise ValueError(f"num_cpus must be > 0 and num_gpus >= 0, got {num_cpus!r} and {num_gpus!r}")
    if ray is not None and not (isinstance(ray, str) and ray):
        raise ValueError(f"ray must be None, 'local' or a cluster address, got {ray!r}")
    threads = max(1, int(num_cpus))
    results: list = [None] * len(tasks)
    todo = list(range(len(tasks)))
    log = None
    if checkpoint is not None:
        checkpoint = Path(checkpoint)
        keys = [_task_key(i, task) for i, task in enumerate(tasks)]
        done = _read_checkpoint(checkpoint, keys)
        for i, result in done.items():
            results[i] = result
        todo = [i for i in todo if i not in done]
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), desc=desc, unit="task", disable=not progress)

    def finish(i: int, text: str) -> None:  # a task's JSON result arrived
        nonlocal log
        results[i] = json.loads(text)
        if checkpoint is not None:
            if log is None:  # opened at the first result: a run that computed nothing leaves no file
                checkpoint.parent.mkdir(parents=True, exist_ok=True)
                log = checkpoint.open("a")
            log.write(f'{{"index": {i}, "task": {keys[i]}, "result": {text}}}\n')
            log.flush()
            os.fsync(log.fileno())
        bar.update()

    try:
        if ray is None:
            failures = _run_here(fn, tasks, todo, shared, threads, retries, finish)
        else:
            failures = _run_on_ray(fn, tasks, todo, shared, threads, retries, finish, ray, num_cpus, num_gpus)
    finally:
        bar.close()
        if log is not None:
            log.close()
    if failures:
        raise SweepError(failures, results, checkpoint)
    return results


def _call(fn: Callable, task: object, threads: int, /, **shared) -> str:
    """One attempt at one task, with torch on ``threads`` threads; the result as JSON text."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = fn(task, **shared)
    finally:
        torch.set_num_threads(previous)
    try:
        return json.dumps(result)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"a sweep task must return JSON values (dict, list, str, int, float, bool, None): {err}"
        ) from None


def _failure(i: int, task: object, attempts: int, err: BaseException, text: str) -> TaskFailure:
    cause = getattr(err, "cause", None) or err  # a Ray task error carries the task's own exception
    return TaskFailure(i, task, attempts, f"{type(cause).__name__}: {cause}".splitlines()[0], text)


def _run_here(fn, tasks, todo, shared, threads, retries, finish) -> list[TaskFailure]:
    failures = []
    for i in todo:
        for attempt in range(1, retries + 2):
            try:
                text = _call(fn, tasks[i], threads, **shared)
            except Exception as err:
                if attempt == retries + 1:
                    failures.append(_failure(i, tasks[i], attempt, err, traceback.format_exc()))
                continue
            finish(i, text)
            break
    return failures


def _import_ray():
    try:
        import ray
    except ImportError as err:
        raise ImportError(INSTALL) from err
    return ray


def _run_on_ray(fn, tasks, todo, shared, threads, retries, finish, address, num_cpus, num_gpus):
    ray = _import_ray()
    started = not ray.is_initialized()
    if started:
        ray.init(address=address)  # "local": a new instance on this machine
    try:
        have = ray.cluster_resources()
        if num_cpus > have.get("CPU", 0) or num_gpus > have.get("GPU", 0):
            raise ValueError(
                f"each task needs {num_cpus} CPU and {num_gpus} GPU, but the Ray cluster has "
                f"{have.get('CPU', 0)} CPU and {have.get('GPU', 0)} GPU in all"
            )
        remote = ray.remote(_call).options(num_cpus=num_cpus, num_gpus=num_gpus, max_retries=0)
        fn_ref = ray.put(fn)
        shared_refs = {name: ray.put(value) for name, value in shared.items()}
        pending = {}  # ObjectRef -> (task index, attempt)

        def submit(i: int, attempt: int) -> None:
            pending[remote.remote(fn_ref, tasks[i], threads, **shared_refs)] = (i, attempt)

        for i in todo:
            submit(i, 1)
        failures = []
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            i, attempt = pending.pop(ref)
            try:
                text = ray.get(ref)
            except Exception as err:  # the task raised, or its worker or node was lost
                if attempt <= retries:
                    submit(i, attempt + 1)
                else:
                    failures.append(_failure(i, tasks[i], attempt, err, str(err)))
                continue
            finish(i, text)
        return sorted(failures, key=lambda f: f.index)
    finally:
        if started:
            ray.shutdown()


_KEPT: dict = {}  # per_process's one value: {key: value}


def per_process(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)``, computed once in this process and kept for the next task that asks.

    For what a task needs but should not rebuild each time, such as models: in this process the first
    task loads them, and on Ray each worker process loads them once. Only the last value is kept (a
    call with other arguments replaces it). ``fn`` must be importable (``module.name``) and the
    arguments hashable.

    >>> per_process(sum, (1, 2)) is per_process(sum, (1, 2))
    True
    """
    key = (fn.__module__, fn.__qualname__, args, tuple(sorted(kwargs.items())))
    if key not in _KEPT:
        _KEPT.clear()
        _KEPT[key] = fn(*args, **kwargs)
    return _KEPT[key]


def finished_tasks(checkpoint: str | os.PathLike, tasks: list) -> dict[int, object]:
    """{task index: result} of the ``tasks`` a checkpoint of :func:`run_tasks` holds (nothing is run): what
    an interrupted sweep has finished so far, e.g. to write its partial results."""
    return _read_checkpoint(Path(checkpoint), [_task_key(i, task) for i, task in enumerate(tasks)])


def _task_key(i: int, task: object) -> str:
    try:
        return json.dumps(task, sort_keys=True)
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"with a checkpoint, tasks must be JSON values; task {i} is {task!r}: {err}"
        ) from None


def _read_checkpoint(path: Path, keys: list[str]) -> dict[int, object]:
    """Results already in ``path`` for these tasks; a last line cut off mid-write is dropped."""
    if not path.exists():
        return {}
    text = path.read_text()
    complete = text[: text.rfind("\n") + 1]
    if len(complete) < len(text):  # a run stopped while writing this line
        path.write_text(complete)
    done = {}
    for number, line in enumerate(complete.splitlines(), start=1):
        try:
            entry = json.loads(line)
            i, task, result = entry["index"], entry["task"], entry["result"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"checkpoint {path}, line {number} is not a task result: {err}") from None
        stored = json.dumps(task, sort_keys=True)
        if not (isinstance(i, int) and 0 <= i < len(keys)) or stored != keys[i]:
            current = keys[i] if isinstance(i, int) and 0 <= i < len(keys) else "no such task"
            raise ValueError(
                f"checkpoint {path} was written by another sweep: its line {number} holds task {i} = "
                f"{stored}, this sweep's is {current}; delete the file or use another one"
            )
        done[i] = result
    return done
