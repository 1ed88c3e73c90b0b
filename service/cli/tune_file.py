"""``tunehub tune --from-file FILE``: tune the shapes a model recorded.

A line of FILE is a ConfigQuery-like record, as ``service.integrations.torch.record`` (or
``TUNEHUB_RECORD``) writes it: ``{"op": "gemm", "dtype": "f16", "layout": "rcr", "problem":
{"m": 1, "n": 4096, "k": 4096}, "device": "cuda:NVIDIA H200:sm_90:132"}``. ``layout`` may be
left out (the op's first); ``device`` is a full device key (its backend, name and arch become
the job's device selector), a part of a device name, or absent (``--backend`` then says
where). Every line is checked before anything is sent; a bad one is named (``FILE:N: field:
why``) and nothing is submitted (exit 2).

Then: duplicate lines are dropped; one batch query (``POST /v1/configs/query``) finds the shapes
already tuned on their device (exact answers only: a nearest-shape answer is not this shape
tuned); the rest go out as one job per (op, dtype, layout, device), split at the per-job
problem limit; progress is drawn per job; then it waits (``--artifact-wait``) for the workers
to share the winners' artifacts, so that the model's next run loads them; the summary says
how many shapes were tuned now, were already tuned, and failed (each failure named), and how
many winners have no artifact yet. Exit 0 when none failed, 1 otherwise.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console

from service.cli.common import UserError, check_choice, json_lines, stderr
from service.cli.output import watch_jobs
from service.client import TunehubClient
from service.schemas.configs import MAX_QUERIES, ConfigQuery, ConfigQueryBatch
from service.schemas.jobs import MAX_PROBLEMS_PER_JOB, JobCreate, JobOut
from tuner.errors import TunerError
from tuner.problems import LAYOUTS, op_dtypes, problem_from_dict
from tuner.registry import BACKENDS

__all__ = ["RecordedShape", "read_shapes", "tune_from_file", "DEFAULT_ARTIFACT_WAIT_S"]

#: how long ``--from-file`` waits, once the jobs are done, for the winners' artifacts
DEFAULT_ARTIFACT_WAIT_S = 120.0


@dataclass(frozen=True)
class RecordedShape:
    """One checked line: canonical problem, the layout filled in, the job's device selector."""

    line: int
    op: str
    dtype: str
    layout: str
    problem: tuple[tuple[str, Any], ...]
    #: the job's ``device`` selector: {"backend", "name"?, "arch"?}
    selector: tuple[tuple[str, str], ...]
    #: what a lookup names: a full device key or part of a name (None: any of the backend's)
    device: str | None

    @property
    def backend(self) -> str:
        return dict(self.selector)["backend"]

    def dims_text(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.problem)

    def query(self) -> ConfigQuery:
        return ConfigQuery.model_validate(
            {
                "op": self.op,
                "dtype": self.dtype,
                "layout": self.layout,
                "problem": dict(self.problem),
                "device": self.device,
                "backend": self.backend,
            }
        )

    def group(self) -> tuple[Any, ...]:
        return (self.op, self.dtype, self.layout, self.selector)

    def key(self) -> tuple[Any, ...]:
        return (*self.group(), self.problem)


def _selector(device: str | None, backend: str, where: str) -> dict[str, str]:
    if device is None:
        return {"backend": backend}
    if ":" not in device:
        return {"backend": backend, "name": device}
    parts = device.split(":")
    if len(parts) < 4 or not parts[-1].isdigit() or parts[0] not in BACKENDS:
        raise UserError(
            f"{where}: device: {device!r} is neither a device key (backend:name:arch:sm_count,"
            f" backend one of {', '.join(BACKENDS)}) nor part of a device name"
        )
    name = ":".join(parts[1:-2])
    return {"backend": parts[0], "name": name, "arch": parts[-2]}


def _shape(number: int, fields: Any, source: str, backend: str) -> RecordedShape:
    where = f"{source}:{number}"
    if not isinstance(fields, dict):
        raise UserError(f"{where}: must be a JSON object")
    try:
        query = ConfigQuery.model_validate(fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or "line"
        raise UserError(f"{where}: {field}: {error['msg']}") from None
    layout = query.layout or LAYOUTS[query.op][0]
    if layout not in LAYOUTS[query.op]:
        raise UserError(
            f"{where}: layout: {layout!r} is not one of {', '.join(LAYOUTS[query.op])} for "
            f"{query.op}"
        )
    if query.dtype not in op_dtypes(query.op):
        raise UserError(
            f"{where}: dtype: {query.dtype!r} is not one of {', '.join(op_dtypes(query.op))} "
            f"for {query.op}"
        )
    try:
        problem = problem_from_dict(query.op, query.problem, query.dtype).dims()
    except TunerError as exc:
        raise UserError(f"{where}: problem: {exc}") from None
    selector = _selector(query.device, query.backend or backend, where)
    return RecordedShape(
        line=number,
        op=query.op,
        dtype=query.dtype,
        layout=layout,
        problem=tuple(problem.items()),
        selector=tuple(selector.items()),
        device=query.device,
    )


def read_shapes(text: str, source: str, backend: str = "cpu") -> list[RecordedShape]:
    """Every non-blank line as a shape, in file order; UserError naming the first bad line."""
    lines = json_lines(text, source)
    shapes = [_shape(number, fields, source, backend) for number, fields in lines]
    if not shapes:
        raise UserError(f"{source}: no shapes (an empty file)")
    return shapes


def _already_tuned(client: TunehubClient, shapes: Sequence[RecordedShape]) -> set[tuple[Any, ...]]:
    tuned = set()
    for start in range(0, len(shapes), MAX_QUERIES):
        chunk = shapes[start : start + MAX_QUERIES]
        batch = ConfigQueryBatch(queries=[s.query() for s in chunk])
        for shape, result in zip(chunk, client.query_configs(batch).results, strict=True):
            if result.result is not None and result.result.exact:
                tuned.add(shape.key())
    return tuned


def _jobs(shapes: Sequence[RecordedShape], options: dict[str, Any]) -> list[JobCreate]:
    groups: dict[tuple[Any, ...], list[RecordedShape]] = {}
    for shape in shapes:
        groups.setdefault(shape.group(), []).append(shape)
    jobs = []
    for (op, dtype, layout, selector), members in groups.items():
        for start in range(0, len(members), MAX_PROBLEMS_PER_JOB):
            chunk = members[start : start + MAX_PROBLEMS_PER_JOB]
            body = {
                "op": op,
                "dtype": dtype,
                "layout": layout,
                "problems": [dict(s.problem) for s in chunk],
                "device": dict(selector),
                **options,
            }
            jobs.append(JobCreate.model_validate(body))
    return jobs


def _selector_text(device: dict[str, Any]) -> str:
    return " ".join(str(v) for v in device.values())


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _problem_text(problem: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in problem.items())


def tune_from_file(
    client: TunehubClient,
    path: Path,
    *,
    backend: str = "cpu",
    strategy: str = "exhaustive",
    max_variants: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    objective: str = "time",
    dry_run: bool = False,
    artifact_wait_s: float = DEFAULT_ARTIFACT_WAIT_S,
    console: Console,
) -> int:
    """Check, de-duplicate, submit and watch; returns the exit status (0, or 1: some failed)."""
    check_choice("backend", backend, list(BACKENDS))
    source = "stdin" if str(path) == "-" else str(path)
    try:
        text = sys.stdin.read() if source == "stdin" else path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {source}: {exc}") from None
    lines = read_shapes(text, source, backend)
    unique = list({s.key(): s for s in reversed(lines)}.values())[::-1]
    options = {
        "strategy": strategy,
        "budget": {"max_variants": max_variants, "max_seconds": max_seconds},
        "seed": seed,
        "objective": objective,
    }
    try:
        _jobs(unique, options)  # the options are checked before anything is asked
    except ValidationError as exc:
        error = exc.errors()[0]
        raise UserError(f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}") from None
    tuned = _already_tuned(client, unique)
    todo = [s for s in unique if s.key() not in tuned]
    jobs = _jobs(todo, options)
    dropped = len(lines) - len(unique)
    console.print(
        f"{Path(source).name}: {_count(len(unique), 'shape')}"
        + (f" ({_count(dropped, 'duplicate line')} dropped)" if dropped else ""),
        markup=False,
    )
    console.print(
        f"already tuned: {len(tuned)}; to tune: {len(todo)} in {_count(len(jobs), 'job')}"
    )
    if dry_run or not jobs:
        for job in jobs:
            what = f"{job.op} {job.dtype} {job.layout}, {_count(len(job.problems), 'shape')}"
            console.print(f"would submit {what}", markup=False)
            console.print(f"  on {_selector_text(job.device.model_dump(exclude_none=True))}",
                          markup=False)  # fmt: skip
        console.print(f"summary: tuned now 0, already tuned {len(tuned)}, failed 0")
        return 0
    submitted = []
    for job in jobs:
        out = client.submit_job(job)
        submitted.append(out.id)
        what = f"{job.op} {job.dtype} {job.layout}, {_count(len(job.problems), 'shape')}"
        console.print(f"submitted job {out.id}: {what}", markup=False)
        console.print(f"  on {_selector_text(out.device)}", markup=False)
    try:
        finished = watch_jobs(client, submitted, console)
        shared = _wait_for_artifacts(client, todo, artifact_wait_s, console)
    except KeyboardInterrupt:
        stderr.print("stopped watching; the jobs go on (tunehub jobs lists them)")
        raise typer.Exit(130) from None
    return _summary(finished, len(tuned), shared, console)


def _wait_for_artifacts(
    client: TunehubClient,
    shapes: Sequence[RecordedShape],
    wait_s: float,
    console: Console,
    poll_s: float = 0.5,
) -> tuple[int, int]:
    """(answers naming an artifact, answers) among ``shapes``: workers upload a winner's
    artifact just after its task ends, so the next run of the model can load it; wait up to
    ``wait_s`` for all of them."""
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        shared = total = 0
        for start in range(0, len(shapes), MAX_QUERIES):
            batch = ConfigQueryBatch(
                queries=[s.query() for s in shapes[start : start + MAX_QUERIES]]
            )
            for result in client.query_configs(batch).results:
                if result.result is not None and result.result.exact:
                    total += 1
                    shared += result.result.artifact is not None
        if shared == total or time.monotonic() >= deadline:
            return shared, total
        if not said:
            console.print(
                f"waiting for the workers to share the winners' artifacts ({shared}/{total})"
            )
            said = True
        time.sleep(poll_s)


def _summary(
    jobs: Sequence[JobOut], already: int, shared: tuple[int, int], console: Console
) -> int:
    done, failed = 0, []
    for job in jobs:
        for problem in job.problems:
            if problem.confirm_of is not None:
                continue  # a re-measuring task, not a shape of the file
            if problem.winner is not None:
                done += 1
            else:
                why = problem.error or job.error or f"job {job.status}, no verified candidate"
                failed.append(
                    f"{job.op} {job.dtype} {job.layout} {_problem_text(problem.problem)}: {why}"
                )
    console.print(f"summary: tuned now {done}, already tuned {already}, failed {len(failed)}")
    for line in failed:
        console.print(f"  failed: {line}", markup=False)
    with_artifact, winners = shared
    if with_artifact < winners:
        console.print(
            f"  artifacts: {with_artifact} of {winners} winners so far; a model loads the "
            "others once their workers share them (or builds them: TUNEHUB_TORCH_LOAD=auto)"
        )
    return 1 if failed else 0
