"""``tunehub tune <op>`` and ``tunehub best <op>``: one command per op, dims as options."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from service.cli.common import (
    OBJECTIVES,
    BackendOpt,
    DeviceOpt,
    DimOpt,
    DTypeOpt,
    MaxDistanceOpt,
    MaxSecondsOpt,
    MaxVariantsOpt,
    ObjectiveOpt,
    SeedOpt,
    ServerOpt,
    StrategyOpt,
    TokenOpt,
    UserError,
    answer_cache_dir,
    check_choice,
    make_client,
    stderr,
    stdout,
    too_far,
)
from service.cli.output import best_answer_lines, candidates_table, watch_job, winner_line
from service.cli.tune_file import DEFAULT_ARTIFACT_WAIT_S, tune_from_file
from service.client import ApiError, TunehubClient
from service.schemas.configs import MAX_NEAREST_DISTANCE, ConfigQuery
from service.schemas.jobs import JobCreate
from tuner.abi import RMS_NORM_EPS
from tuner.errors import TunerError
from tuner.problems import LAYOUTS, OP_DTYPES, op_dtypes, problem_from_dict
from tuner.registry import BACKENDS, STRATEGIES, has_space

__all__ = ["tune_app", "best_app", "run_tune"]

tune_app = typer.Typer(
    help="Submit a tuning job and watch it: one shape (tunehub tune <op> ...), or the shapes "
    "a model recorded (tunehub tune --from-file FILE).",
    no_args_is_help=True,
)
best_app = typer.Typer(help="Ask for the best tuned config of a shape.", no_args_is_help=True)


def _problem_dims(op: str, dims: dict[str, Any], dtype: str) -> dict[str, Any]:
    """Validate dims (against the dtype too) locally so that a typo fails before anything is
    submitted."""
    try:
        return problem_from_dict(op, dims, dtype).dims()
    except TunerError as exc:
        raise UserError(f"invalid {op} problem: {exc}") from None


def _check_dtype(op: str, dtype: str) -> None:
    """The op's dtypes (tuner.problems.OP_DTYPES: scaled_gemm takes e4m3 alone, grouped_gemm
    bf16, f16 or e4m3, the others f16, bf16 and f32)."""
    check_choice("dtype", dtype, op_dtypes(op))


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
    objective: str = "time",
    console: Console = stdout,
) -> int:
    """Submit one problem, draw progress until the job ends, print candidates and winner.

    Returns the exit status: 0 when a winner was found, 1 otherwise."""
    _check_dtype(op, dtype)
    check_choice("strategy", strategy, list(STRATEGIES))
    check_choice("objective", objective, list(OBJECTIVES))
    check_choice("backend", backend, list(BACKENDS))
    if layout is not None:
        check_choice(f"layout of {op}", layout, LAYOUTS[op])
    problem = _problem_dims(op, dims, dtype)
    if not has_space(op, backend):
        raise UserError(f"op {op} has no variants on the {backend} backend (--backend)")
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
            "objective": objective,
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
    op: str, dims: dict[str, Any], *, server: str | None, token: str | None, **search: Any
) -> None:
    """``search``: the dtype, layout and search options, named as ``run_tune`` takes them."""
    with make_client(server, token) as client:
        code = run_tune(client, op=op, dims=dims, **search)
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
    _check_dtype(op, dtype)
    if layout is not None:
        check_choice(f"layout of {op}", layout, LAYOUTS[op])
    problem = _problem_dims(op, dims, dtype)
    # through the answer cache: revalidated (304) when unchanged, answered while unreachable
    with make_client(server, token, answer_cache_dir()) as client:
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
            cached = client.best(query)
        except ApiError as exc:
            if exc.status != 404:
                raise
            stdout.print(f"not tuned yet: {exc.detail}", markup=False)
            raise typer.Exit(1) from None
    answer = cached.value
    if cached.stale:
        when = cached.confirmed_at.strftime("%Y-%m-%d %H:%M UTC")
        stderr.print(
            f"tunehub: the service is unreachable; this answer is from the cache ({when})",
            markup=False,
        )
    if (refusal := too_far(answer, max_distance)) is not None:
        stdout.print(refusal, markup=False)
        raise typer.Exit(1)
    for line in best_answer_lines(answer):
        stdout.print(line)


@tune_app.callback(invoke_without_command=True)
def _tune_group(
    ctx: typer.Context,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file",
            help="JSON lines of recorded shapes ('-': stdin), as service.integrations.torch."
            "record writes them: tune those not tuned yet, one job per op/dtype/layout/device.",
        ),
    ] = None,
    backend: Annotated[
        str, typer.Option("--backend", help="Backend of lines that name no device.")
    ] = "cpu",
    strategy: StrategyOpt = "exhaustive",
    max_variants: MaxVariantsOpt = None,
    max_seconds: MaxSecondsOpt = None,
    seed: SeedOpt = 0,
    objective: ObjectiveOpt = "time",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be submitted; submit nothing.")
    ] = False,
    artifact_wait: Annotated[
        float,
        typer.Option(
            "--artifact-wait",
            min=0.0,
            help="Seconds to wait, once tuned, for the workers to share the winners' artifacts.",
        ),
    ] = DEFAULT_ARTIFACT_WAIT_S,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    if ctx.invoked_subcommand is not None:
        if from_file is not None:
            raise UserError("--from-file takes no op: tunehub tune --from-file FILE")
        given = (backend, strategy, max_variants, max_seconds, seed, objective, dry_run,
                 artifact_wait)  # fmt: skip
        if given != ("cpu", "exhaustive", None, None, 0, "time", False, DEFAULT_ARTIFACT_WAIT_S):
            raise UserError(
                f"options before the op apply to --from-file only: put them after "
                f"'{ctx.invoked_subcommand}'"
            )
        return
    if from_file is None:
        stderr.print(ctx.get_help(), markup=False)
        raise typer.Exit(2)
    check_choice("strategy", strategy, list(STRATEGIES))
    check_choice("objective", objective, list(OBJECTIVES))
    with make_client(server, token) as client:
        code = tune_from_file(
            client,
            from_file,
            backend=backend,
            strategy=strategy,
            max_variants=max_variants,
            max_seconds=max_seconds,
            seed=seed,
            objective=objective,
            dry_run=dry_run,
            artifact_wait_s=artifact_wait,
            console=stdout,
        )
    raise typer.Exit(code)


# -- one tune and one best command per op ----------------------------------------------------

_REQUIRED = inspect.Parameter.empty
_KindOpt = Annotated[str, typer.Option(help="sum, max or mean.")]
_LayoutOpt = Annotated[str, typer.Option(help="rcr, rrr, crr or ccr.")]
_EpilogueOpt = Annotated[
    str,
    typer.Option(
        help="Fused after the product: none, bias, bias_relu, bias_gelu, bias_silu, or (gemm "
        "only) gated_silu, which halves n: silu(gate half + bias) * (up half + bias)."
    ),
]
_OutDTypeOpt = Annotated[str, typer.Option(help="bf16 or f16 (the output; inputs are e4m3).")]
_ScalingOpt = Annotated[
    str, typer.Option(help="per_tensor, or block (A per 1x128 along k, B per 128x128).")
]

_TokensOpt = Annotated[
    int, typer.Option(help="Total tokens routed (top-k counted), rounded up to a power of two.")
]
_SkewOpt = Annotated[int, typer.Option(help="Max tokens of an expert / mean: 1, 2, 4 or 8.")]


def _dims(*names: str) -> tuple[tuple[str, Any, Any], ...]:
    """Required dim options, in this order."""
    return tuple((name, DimOpt, _REQUIRED) for name in names)


#: each op's own options, in the order --help lists them: (name, annotation, default); all
#: are dims of the problem except ``layout``
_OP_OPTIONS: dict[str, tuple[tuple[str, Any, Any], ...]] = {
    "reduce": (*_dims("m", "k"), ("kind", _KindOpt, "sum")),
    "softmax": _dims("m", "k"),
    "rms_norm": _dims("m", "k"),
    "gemm": (
        *_dims("m", "n", "k"),
        ("layout", _LayoutOpt, "rcr"),
        ("epilogue", _EpilogueOpt, "none"),
    ),
    "conv2d": (
        *_dims("n", "h", "w", "c", "k", "r", "s"),
        ("stride", DimOpt, 1),
        ("pad", DimOpt, 0),
        ("dilation", DimOpt, 1),
        ("epilogue", _EpilogueOpt, "none"),
    ),
    "scaled_gemm": (
        *_dims("m", "n", "k"),
        ("out_dtype", _OutDTypeOpt, "bf16"),
        ("scaling", _ScalingOpt, "per_tensor"),
    ),
    "grouped_gemm": (
        *_dims("experts", "n", "k"),
        ("tokens", _TokensOpt, _REQUIRED),
        ("skew", _SkewOpt, 1),
    ),
}
#: the layout of an op without a --layout option (None: the op has no layouts)
_FIXED_LAYOUT = {
    "reduce": None,
    "softmax": None,
    "rms_norm": None,
    "conv2d": "nhwc",
    "scaled_gemm": "rcr",
    "grouped_gemm": "rcr",
}

_TUNE_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("dtype", DTypeOpt, "f32"),
    ("strategy", StrategyOpt, "exhaustive"),
    ("max_variants", MaxVariantsOpt, None),
    ("max_seconds", MaxSecondsOpt, None),
    ("backend", BackendOpt, "cpu"),
    ("seed", SeedOpt, 0),
    ("objective", ObjectiveOpt, "time"),
    ("server", ServerOpt, None),
    ("token", TokenOpt, None),
)
_BEST_OPTIONS: tuple[tuple[str, Any, Any], ...] = (
    ("dtype", DTypeOpt, "f32"),
    ("device", DeviceOpt, None),
    ("max_distance", MaxDistanceOpt, MAX_NEAREST_DISTANCE),
    ("server", ServerOpt, None),
    ("token", TokenOpt, None),
)

_TUNE_HELP = {
    "reduce": "Row reduction: y(m) = sum, max or mean of x(m, 0..k).",
    "softmax": "Row softmax over k of an m x k matrix.",
    "rms_norm": (
        "RMSNorm over k of an m x k matrix with a weight of k: "
        f"y = w * x / sqrt(mean(x^2) + eps), timed at eps {RMS_NORM_EPS:g} (eps does not "
        "change the speed)."
    ),
    "gemm": "GEMM: C (m x n) = A (m x k) @ B (k x n).",
    "conv2d": "Forward convolution, NHWC input, KRSC filter.",
    "scaled_gemm": (
        "FP8 GEMM: D (m x n, out-dtype) = (sa A) (m x k, e4m3) @ (sb B)^T, B (n x k, e4m3) "
        "weights; f32 accumulate; --dtype e4m3."
    ),
    "grouped_gemm": (
        "Mixture-of-experts grouped GEMM: per expert C_e = A_e @ W_e^T (W: experts x n x k), "
        "tuned per bucket of the tokens per expert (tokens, skew; tuner/moe.py); --dtype e4m3: "
        "FP8 with rowwise scales (one per token, one per expert output column), bf16 out."
    ),
}
_BEST_HELP = {
    "reduce": "Best config of a row reduction.",
    "softmax": "Best config of a row softmax.",
    "rms_norm": "Best config of an RMSNorm over rows.",
    "gemm": "Best config of a GEMM.",
    "conv2d": "Best config of a forward convolution.",
    "scaled_gemm": "Best config of an FP8 GEMM with scales (--dtype e4m3).",
    "grouped_gemm": "Best config of a grouped GEMM for a token bucket (tokens, skew).",
}


def _add_op_command(
    app: typer.Typer,
    op: str,
    help_text: str,
    shared: tuple[tuple[str, Any, Any], ...],
    run: Callable[..., None],
) -> None:
    """Register ``op`` on ``app``: its own options, then ``shared``; ``run(op, dims, layout=...,
    **shared values)``. Typer reads the options from the signature, so one builder serves
    every op (the four ops differ only in their dims)."""
    own = _OP_OPTIONS[op]
    if op in OP_DTYPES:  # an op of its own dtypes (scaled_gemm: e4m3) defaults to its first
        shared = tuple(
            (name, kind, OP_DTYPES[op][0] if name == "dtype" else default)
            for name, kind, default in shared
        )

    def command(**values: Any) -> None:
        dims = {name: values.pop(name) for name, _, _ in own}
        layout = dims.pop("layout") if "layout" in dims else _FIXED_LAYOUT[op]
        run(op, dims, layout=layout, **values)

    command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=d)
            for name, kind, d in (*own, *shared)
        ]
    )
    command.__doc__ = help_text
    command.__name__ = f"{op}_command"
    app.command(op)(command)


for _op in _OP_OPTIONS:
    _add_op_command(tune_app, _op, _TUNE_HELP[_op], _TUNE_OPTIONS, _tune_command)
    _add_op_command(best_app, _op, _BEST_HELP[_op], _BEST_OPTIONS, _best_command)
