"""``tunehub tune <op>`` and ``tunehub best <op>``: one command per op, dims as options."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.console import Console

from service.cli.common import (
    BackendOpt,
    DeviceOpt,
    DimOpt,
    DTypeOpt,
    MaxDistanceOpt,
    MaxSecondsOpt,
    MaxVariantsOpt,
    SeedOpt,
    ServerOpt,
    StrategyOpt,
    TokenOpt,
    UserError,
    check_choice,
    make_client,
    stderr,
    stdout,
)
from service.cli.output import best_answer_lines, candidates_table, watch_job, winner_line
from service.client import ApiError, TunehubClient
from service.schemas.configs import MAX_NEAREST_DISTANCE, ConfigQuery
from service.schemas.jobs import JobCreate
from tuner.errors import TunerError
from tuner.problems import DTYPES, LAYOUTS, problem_from_dict
from tuner.registry import BACKENDS, STRATEGIES

__all__ = ["tune_app", "best_app", "run_tune"]

tune_app = typer.Typer(help="Submit a tuning job and watch it.", no_args_is_help=True)
best_app = typer.Typer(help="Ask for the best tuned config of a shape.", no_args_is_help=True)


def _problem_dims(op: str, dims: dict[str, Any]) -> dict[str, Any]:
    """Validate dims locally so that a typo fails before anything is submitted."""
    try:
        return problem_from_dict(op, dims).dims()
    except TunerError as exc:
        raise UserError(f"invalid {op} problem: {exc}") from None


def run_tune(
    client: TunehubClient,
    *,
    op: str,
    dims: dict[str, Any],
    dtype: str,
    layout: str | None = None,
    backend: str = "cpu",
    strategy: str = "exhaustive",
    max_variants: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    console: Console = stdout,
) -> int:
    """Submit one problem, draw progress until the job ends, print candidates and winner.

    Returns the exit status: 0 when a winner was found, 1 otherwise."""
    check_choice("dtype", dtype, DTYPES)
    check_choice("strategy", strategy, list(STRATEGIES))
    check_choice("backend", backend, list(BACKENDS))
    if layout is not None:
        check_choice(f"layout of {op}", layout, LAYOUTS[op])
    problem = _problem_dims(op, dims)
    request = JobCreate.model_validate(
        {
            "op": op,
            "dtype": dtype,
            "layout": layout,
            "problems": [problem],
            "device": {"backend": backend},
            "strategy": strategy,
            "budget": {"max_variants": max_variants, "max_seconds": max_seconds},
            "seed": seed,
        }
    )
    job_id = client.submit_job(request).id
    console.print(
        f"submitted job [bold]{job_id}[/bold]: {op} {dtype} "
        + ",".join(f"{k}={v}" for k, v in problem.items())
        + f" on {backend}"
    )
    try:
        job = watch_job(client, job_id, console)
    except KeyboardInterrupt:
        stderr.print(f"stopped watching; job {job_id} goes on (tunehub jobs cancel {job_id})")
        raise typer.Exit(130) from None
    measurements = client.measurements(job_id=job_id)
    winners = {p.winner.variant_name for p in job.problems if p.winner}
    if measurements:
        console.print(candidates_table(measurements, winners, console.width))
    for problem_status in job.problems:
        console.print(winner_line(problem_status))
        if kept := problem_status.kept_incumbent:  # what `best` answers from now on
            console.print(
                f"  stored best config kept: {kept.variant_name} (this winner is not faster "
                "than it beyond the tie band with confidence)",
                markup=False,
            )
    if job.status != "done" or not winners:
        console.print(
            f"job {job_id} {job.status}" + (f": {job.error}" if job.error else ""), markup=False
        )
        return 1
    return 0


def _tune_command(
    op: str,
    dims: dict[str, Any],
    *,
    dtype: str,
    layout: str | None,
    backend: str,
    strategy: str,
    max_variants: int | None,
    max_seconds: float | None,
    seed: int,
    server: str | None,
    token: str | None,
) -> None:
    with make_client(server, token) as client:
        code = run_tune(
            client,
            op=op,
            dims=dims,
            dtype=dtype,
            layout=layout,
            backend=backend,
            strategy=strategy,
            max_variants=max_variants,
            max_seconds=max_seconds,
            seed=seed,
        )
    raise typer.Exit(code)


def _best_command(
    op: str,
    dims: dict[str, Any],
    *,
    dtype: str,
    layout: str | None,
    device: str | None,
    max_distance: float,
    server: str | None,
    token: str | None,
) -> None:
    check_choice("dtype", dtype, DTYPES)
    if layout is not None:
        check_choice(f"layout of {op}", layout, LAYOUTS[op])
    problem = _problem_dims(op, dims)
    with make_client(server, token) as client:
        try:
            # a bare backend name selects every device of that backend
            backend = device if device in BACKENDS else None
            query = ConfigQuery.model_validate(
                {
                    "op": op,
                    "dtype": dtype,
                    "layout": layout,
                    "problem": problem,
                    "device": None if backend else device,
                    "backend": backend,
                }
            )
            answer = client.best_config(query)
        except ApiError as exc:
            if exc.status != 404:
                raise
            stdout.print(f"not tuned yet: {exc.detail}", markup=False)
            raise typer.Exit(1) from None
    if not answer.exact and answer.distance > max_distance:
        tuned = ",".join(f"{k}={v}" for k, v in answer.tuned_problem.items())
        stdout.print(
            f"not tuned yet: the nearest tuned shape ({tuned}) is at log2 distance "
            f"{answer.distance:.2f}, farther than {max_distance:g}; tune this shape, or pass "
            f"--max-distance {math.ceil(answer.distance * 100) / 100:g} to accept it",
            markup=False,
        )
        raise typer.Exit(1)
    for line in best_answer_lines(answer):
        stdout.print(line)


# -- tune -----------------------------------------------------------------------------------


@tune_app.command("reduce")
def tune_reduce(
    m: DimOpt,
    k: DimOpt,
    kind: Annotated[str, typer.Option(help="sum, max or mean.")] = "sum",
    dtype: DTypeOpt = "f32",
    strategy: StrategyOpt = "exhaustive",
    max_variants: MaxVariantsOpt = None,
    max_seconds: MaxSecondsOpt = None,
    backend: BackendOpt = "cpu",
    seed: SeedOpt = 0,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Row reduction: y(m) = sum, max or mean of x(m, 0..k)."""
    _tune_command(
        "reduce",
        {"m": m, "k": k, "kind": kind},
        dtype=dtype,
        layout=None,
        backend=backend,
        strategy=strategy,
        max_variants=max_variants,
        max_seconds=max_seconds,
        seed=seed,
        server=server,
        token=token,
    )


@tune_app.command("softmax")
def tune_softmax(
    m: DimOpt,
    k: DimOpt,
    dtype: DTypeOpt = "f32",
    strategy: StrategyOpt = "exhaustive",
    max_variants: MaxVariantsOpt = None,
    max_seconds: MaxSecondsOpt = None,
    backend: BackendOpt = "cpu",
    seed: SeedOpt = 0,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Row softmax over k of an m x k matrix."""
    _tune_command(
        "softmax",
        {"m": m, "k": k},
        dtype=dtype,
        layout=None,
        backend=backend,
        strategy=strategy,
        max_variants=max_variants,
        max_seconds=max_seconds,
        seed=seed,
        server=server,
        token=token,
    )


@tune_app.command("gemm")
def tune_gemm(
    m: DimOpt,
    n: DimOpt,
    k: DimOpt,
    layout: Annotated[str, typer.Option(help="rcr, rrr, crr or ccr.")] = "rcr",
    dtype: DTypeOpt = "f32",
    strategy: StrategyOpt = "exhaustive",
    max_variants: MaxVariantsOpt = None,
    max_seconds: MaxSecondsOpt = None,
    backend: BackendOpt = "cpu",
    seed: SeedOpt = 0,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GEMM: C (m x n) = A (m x k) @ B (k x n)."""
    _tune_command(
        "gemm",
        {"m": m, "n": n, "k": k},
        dtype=dtype,
        layout=layout,
        backend=backend,
        strategy=strategy,
        max_variants=max_variants,
        max_seconds=max_seconds,
        seed=seed,
        server=server,
        token=token,
    )


@tune_app.command("conv2d")
def tune_conv2d(
    n: DimOpt,
    h: DimOpt,
    w: DimOpt,
    c: DimOpt,
    k: DimOpt,
    r: DimOpt,
    s: DimOpt,
    stride: DimOpt = 1,
    pad: DimOpt = 0,
    dilation: DimOpt = 1,
    dtype: DTypeOpt = "f32",
    strategy: StrategyOpt = "exhaustive",
    max_variants: MaxVariantsOpt = None,
    max_seconds: MaxSecondsOpt = None,
    backend: BackendOpt = "cpu",
    seed: SeedOpt = 0,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Forward convolution, NHWC input, KRSC filter."""
    dims = {
        "n": n,
        "h": h,
        "w": w,
        "c": c,
        "k": k,
        "r": r,
        "s": s,
        "stride": stride,
        "pad": pad,
        "dilation": dilation,
    }
    _tune_command(
        "conv2d",
        dims,
        dtype=dtype,
        layout="nhwc",
        backend=backend,
        strategy=strategy,
        max_variants=max_variants,
        max_seconds=max_seconds,
        seed=seed,
        server=server,
        token=token,
    )


# -- best -----------------------------------------------------------------------------------


@best_app.command("reduce")
def best_reduce(
    m: DimOpt,
    k: DimOpt,
    kind: Annotated[str, typer.Option(help="sum, max or mean.")] = "sum",
    dtype: DTypeOpt = "f32",
    device: DeviceOpt = None,
    max_distance: MaxDistanceOpt = MAX_NEAREST_DISTANCE,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Best config of a row reduction."""
    _best_command(
        "reduce",
        {"m": m, "k": k, "kind": kind},
        dtype=dtype,
        layout=None,
        device=device,
        max_distance=max_distance,
        server=server,
        token=token,
    )


@best_app.command("softmax")
def best_softmax(
    m: DimOpt,
    k: DimOpt,
    dtype: DTypeOpt = "f32",
    device: DeviceOpt = None,
    max_distance: MaxDistanceOpt = MAX_NEAREST_DISTANCE,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Best config of a row softmax."""
    _best_command(
        "softmax",
        {"m": m, "k": k},
        dtype=dtype,
        layout=None,
        device=device,
        max_distance=max_distance,
        server=server,
        token=token,
    )


@best_app.command("gemm")
def best_gemm(
    m: DimOpt,
    n: DimOpt,
    k: DimOpt,
    layout: Annotated[str, typer.Option(help="rcr, rrr, crr or ccr.")] = "rcr",
    dtype: DTypeOpt = "f32",
    device: DeviceOpt = None,
    max_distance: MaxDistanceOpt = MAX_NEAREST_DISTANCE,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Best config of a GEMM."""
    _best_command(
        "gemm",
        {"m": m, "n": n, "k": k},
        dtype=dtype,
        layout=layout,
        device=device,
        max_distance=max_distance,
        server=server,
        token=token,
    )


@best_app.command("conv2d")
def best_conv2d(
    n: DimOpt,
    h: DimOpt,
    w: DimOpt,
    c: DimOpt,
    k: DimOpt,
    r: DimOpt,
    s: DimOpt,
    stride: DimOpt = 1,
    pad: DimOpt = 0,
    dilation: DimOpt = 1,
    dtype: DTypeOpt = "f32",
    device: DeviceOpt = None,
    max_distance: MaxDistanceOpt = MAX_NEAREST_DISTANCE,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Best config of a forward convolution."""
    dims = {
        "n": n,
        "h": h,
        "w": w,
        "c": c,
        "k": k,
        "r": r,
        "s": s,
        "stride": stride,
        "pad": pad,
        "dilation": dilation,
    }
    _best_command(
        "conv2d",
        dims,
        dtype=dtype,
        layout="nhwc",
        device=device,
        max_distance=max_distance,
        server=server,
        token=token,
    )
