"""How often a re-tune keeps its winner: the rate of same-winner-or-statistical-tie (issue 22).

    .venv/bin/python bench/retune_stability.py                         # CPU, 20 shapes, here
    python3 bench/retune_stability.py --backend cuda --out $OUT        # the H200 GEMM suite
    python3 bench/retune_stability.py --backend cuda --suite families --out $OUT  # issue 26

Method. Every shape is tuned twice with the engine on one backend: pass 1 over all shapes,
then pass 2 over all shapes (minutes apart, the compile cache warm), each pass a fresh
``tune()`` with the same budget and seed. Pass 2 names pass 1's winner as the incumbent
(``TuneRequest.incumbents``), as the service does when it re-tunes a stored answer: the
incumbent is timed whole and in the confirmation rounds beside the new winner. A shape is
**stable** when

- pass 2's winner is pass 1's (*same*), or
- the two answers cannot be told apart (*statistical tie*): pass 1's winner is in pass 2's
  tie set, or pass 2's winner is in pass 1's (tuner.winner: the contenders whose 95% interval
  of their time over the fastest's, round by round in the interleaved confirmation rounds,
  reaches down to 1 + 2%).

The rate is stable / shapes, with a Wilson 95% interval. The service's own rule is reported
too: whether the store would replace pass 1's winner with pass 2's
(``tuner.winner.replaces_incumbent`` on the two in pass 2's rounds). For comparison, the old
instrument's rate on the same runs: same winner, or pass 1's winner's median in pass 2 within
the fixed 2% band of pass 2's best median. ``--no-incumbent`` tunes pass 2 without naming
the incumbent (the engine alone, as bench/vs_vendor_gemm.py does).

Shapes: ``cpu`` 20 shapes (8 row sums, 6 softmaxes, 6 f32 GEMMs: 20 re-tunes);
``cuda`` the GEMM suite of bench/vs_vendor_gemm.py (Qwen2.5-7B and Mistral-7B prefill and
decode, two odd sizes; f16 rcr), or with ``--suite families`` the shapes of issue 26's
families that bench/regress.py checks (``bench.regress_shapes.family_shapes``: fused GEMM and
conv2d epilogues, FP8 scaled_gemm, grouped_gemm in bf16 and e4m3), each at most its regress
budget (so that ``python bench/regress.py --list --only epilogue= scaled_gemm grouped_gemm``
precompiles every candidate but the vendor's). Writes
``retune-stability-<backend>[-families].json`` and ``.md`` to ``--out``. A benchmark, not a
test: it takes minutes (CPU: about 20 s a shape at the defaults on 2 cores); `--deadline-s`
bounds both passes (pass 1 gets half).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner import winner as winner_rule  # noqa: E402
from tuner.engine import tune  # noqa: E402
from tuner.problems import (  # noqa: E402
    GemmProblem,
    Problem,
    ReduceProblem,
    SoftmaxProblem,
    problem_from_dict,
)
from tuner.registry import load_backend_class  # noqa: E402
from tuner.types import Budget, EngineConfig, ProblemResult, TuneRequest  # noqa: E402

__all__ = ["main", "cpu_shapes", "cuda_shapes", "stability", "timings", "SUITES"]

#: the CUDA suites (``--suite``)
SUITES = ("gemm", "families")

#: (op, dtype, layout, problem)
Shape = tuple[str, str, str, Problem]


def cpu_shapes() -> list[Shape]:
    reduce = [(4096, 4096), (1024, 1024), (2048, 512), (8192, 256), (512, 8192), (256, 16384)]
    reduce += [(4096, 128), (16384, 64)]
    softmax = [(1024, 1024), (2048, 512), (512, 4096), (4096, 256), (256, 8192), (1024, 2048)]
    gemm = [(256, 256, 256), (512, 512, 512), (128, 1024, 512), (64, 2048, 1024)]
    gemm += [(384, 384, 384), (1024, 256, 128)]
    return [
        *(("reduce", "f32", "row", ReduceProblem(m, k, "sum")) for m, k in reduce),
        *(("softmax", "f32", "row", SoftmaxProblem(m, k)) for m, k in softmax),
        *(("gemm", "f32", "rcr", GemmProblem(m, n, k)) for m, n, k in gemm),
    ]


def cuda_shapes(suite: str = "gemm") -> list[Shape]:
    """``gemm``: bench/vs_vendor_gemm.py's suite; ``families``: regress's shapes of issue 26."""
    if suite == "families":
        from bench.regress_shapes import family_shapes

        return [
            (s.op, s.dtype, s.layout, problem_from_dict(s.op, dict(s.problem), s.dtype))
            for s in family_shapes()
        ]
    from bench.vs_vendor_gemm import DTYPE, LAYOUT, model_shapes

    return [("gemm", DTYPE, LAYOUT, GemmProblem(s["m"], s["n"], s["k"])) for s in model_shapes()]


def variant_caps(suite: str) -> dict[str, int]:
    """Each shape's most variants, by ``_key`` (``families``: regress's budgets; else none)."""
    if suite != "families":
        return {}
    from bench.regress_shapes import family_shapes

    return {
        _key(shape): s.max_variants
        for s, shape in zip(family_shapes(), cuda_shapes(suite), strict=True)
    }


def report_stem(backend: str, suite: str) -> str:
    """The file name (no suffix) of a run's report: the GEMM suite keeps its old name."""
    return f"retune-stability-{backend}" + ("" if suite == "gemm" else f"-{suite}")


def _names(result: ProblemResult) -> tuple[str | None, list[str]]:
    return (result.winner.variant_name if result.winner else None), list(result.tie_set)


def _rounds(result: ProblemResult) -> dict[str, list[float]]:
    return {r.variant_name: winner_rule.rounds_of(r.provenance) for r in result.results}


def _medians(result: ProblemResult) -> dict[str, float]:
    return {r.variant_name: r.timing.median_us for r in result.results if r.ok and r.timing}


def timings(result: ProblemResult) -> list[dict[str, Any]]:
    """What a pass measured of each candidate, for the record (why a shape flipped): the
    outcome, the median, the first-pass median and the rounds of a contender, the share of
    a core and the suspect flag, the samples."""
    return [
        {
            "variant": r.variant_name,
            "outcome": r.outcome.value,
            "median_us": r.timing.median_us if r.timing else None,
            "reps": r.timing.reps if r.timing else None,
            "first_pass_us": r.provenance.get(winner_rule.FIRST_PASS_KEY),
            "rounds_us": winner_rule.rounds_of(r.provenance),
            "cpu_share": winner_rule.cpu_share_of(r.provenance),
            "suspect": r.suspect,
        }
        for r in result.results
    ]


def stability(first: ProblemResult, second: ProblemResult) -> dict[str, Any]:
    """One shape's verdict (module doc) from its two passes."""
    w1, tie1 = _names(first)
    w2, tie2 = _names(second)
    same = w1 is not None and w1 == w2
    tie = not same and w1 is not None and w2 is not None and (w1 in tie2 or w2 in tie1)
    medians, rounds = _medians(second), _rounds(second)
    replaced = None
    if w1 is not None and w2 is not None and not same:
        replaced = winner_rule.replaces_incumbent(
            medians.get(w1),
            medians.get(w2, math.inf),
            incumbent_rounds=rounds.get(w1, []),
            candidate_rounds=rounds.get(w2, []),
        )
    best = min(medians.values(), default=None)
    fixed_band = same or (
        best is not None and w1 in medians and winner_rule.tied_with(best, medians[w1])
    )
    return {
        "winner_1": w1,
        "tie_set_1": tie1,
        "winner_2": w2,
        "tie_set_2": tie2,
        "same": same,
        "statistical_tie": tie,
        "stable": same or tie,
        "store_replaces": replaced,
        "fixed_band_stable": bool(fixed_band),
        "winner_1_us_in_2": medians.get(w1) if w1 else None,
        "best_us_in_2": best,
        "complete": first.complete and second.complete,
        "timings_1": timings(first),
        "timings_2": timings(second),
    }


def wilson(hits: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate."""
    if total == 0:
        return 0.0, 1.0
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def _key(shape: Shape) -> str:
    op, dtype, layout, problem = shape
    return f"{op} {dtype} {layout} {problem.key()}"


def run(args: argparse.Namespace) -> dict[str, Any]:
    shapes = (cpu_shapes() if args.backend == "cpu" else cuda_shapes(args.suite))[: args.shapes]
    config = EngineConfig(
        cache_dir=args.cache_dir,
        bench_seconds=args.bench_seconds,
        compile_timeout_s=240.0,
    )
    backend = load_backend_class(args.backend)(config)
    started = time.monotonic()
    # pass 1 may use half the time: pass 2 re-tunes the shapes pass 1 finished
    deadlines = (started + args.deadline_s / 2, started + args.deadline_s)
    caps = variant_caps(args.suite if args.backend == "cuda" else "gemm")
    passes: list[dict[str, ProblemResult]] = [{}, {}]
    try:
        device = backend.device()
        print(f"device {device.key()}", flush=True)
        for number in (0, 1):
            for shape in shapes:
                first = passes[0].get(_key(shape))
                if number == 1 and first is None:
                    continue
                if time.monotonic() > deadlines[number]:
                    print(f"pass {number + 1}: deadline reached", flush=True)
                    break
                op, dtype, layout, problem = shape
                incumbents: tuple[str, ...] = ()
                if number == 1 and first and first.winner and not args.no_incumbent:
                    incumbents = (first.winner.variant_name,)
                most = min(args.max_variants, caps.get(_key(shape), args.max_variants))
                budget = Budget(max_variants=most, max_seconds=args.shape_seconds)
                request = TuneRequest(
                    op, dtype, layout, problem, args.backend, budget=budget,
                    seed=args.seed, incumbents=incumbents,
                )  # fmt: skip
                started = time.monotonic()
                result = tune(request, backend, config)
                passes[number][_key(shape)] = result
                win, tie_set = _names(result)
                print(
                    f"pass {number + 1} {_key(shape)}: {win} (tie set {tie_set}) "
                    f"in {time.monotonic() - started:.1f}s",
                    flush=True,
                )
    finally:
        backend.close()
    rows = []
    for key, first in passes[0].items():
        second = passes[1].get(key)
        if second is not None:
            rows.append({"shape": key, **stability(first, second)})
    stable = sum(r["stable"] for r in rows)
    low, high = wilson(stable, len(rows))
    return {
        "meta": {
            "backend": args.backend,
            "suite": args.suite,
            "device": device.key(),
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "python3 " + " ".join(sys.argv),
            "max_variants": args.max_variants,
            "shape_seconds": args.shape_seconds,
            "bench_seconds": args.bench_seconds,
            "confirm_rounds": config.confirm_rounds,
            "incumbent_named": not args.no_incumbent,
        },
        "rate": stable / len(rows) if rows else None,
        "rate_interval": [low, high],
        "fixed_band_rate": sum(r["fixed_band_stable"] for r in rows) / len(rows) if rows else None,
        "rows": rows,
    }


def render(report: dict[str, Any]) -> str:
    meta, rows = report["meta"], report["rows"]
    stable = sum(r["stable"] for r in rows)
    low, high = report["rate_interval"]
    lines = [
        f"# Re-tune stability: {meta['backend']}"
        + (f", {meta['suite']}" if meta.get("suite", "gemm") != "gemm" else "")
        + f" ({meta['device']}, {meta['date']})",
        "",
        f"`{meta['command']}`",
        "",
        f"Same winner or statistical tie on re-tune: **{stable}/{len(rows)}** "
        f"({100 * (report['rate'] or 0):.0f}%, Wilson 95% interval {100 * low:.0f}-"
        f"{100 * high:.0f}%); the fixed 2% band over medians on the same runs: "
        f"{100 * (report['fixed_band_rate'] or 0):.0f}%. Target: at least 95%.",
        "",
        "Method (bench/retune_stability.py): every shape tuned twice, pass 2 after pass 1 over "
        f"all shapes, {meta['max_variants']} variants a shape, {meta['confirm_rounds']} "
        "interleaved confirmation rounds"
        + (
            " (each in a runner process of its own, its inputs in new pages)"
            if meta["backend"] == "cpu"
            else ""
        )
        + ", pass 2 "
        + ("naming pass 1's winner as the incumbent" if meta["incumbent_named"] else "alone")
        + ". Stable: the same winner, or one of the two winners in the other pass's tie set "
        "(tuner.winner: 95% interval of the round-by-round time ratio to the fastest reaching "
        "1.02). 'store' is whether the service's rule would replace pass 1's stored winner.",
        "",
        "| shape | pass 1 | pass 2 | tie set 2 | verdict | store | complete |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        verdict = "same" if r["same"] else ("tie" if r["statistical_tie"] else "**flip**")
        store = {None: "-", True: "replaces", False: "keeps"}[r["store_replaces"]]
        lines.append(
            f"| {r['shape']} | {r['winner_1']} | {r['winner_2']} | "
            f"{', '.join(r['tie_set_2'])} | {verdict} | {store} | "
            f"{'yes' if r['complete'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--suite", choices=SUITES, default="gemm", help="cuda: which shapes (module doc)"
    )
    parser.add_argument("--shapes", type=int, default=20, help="the first N shapes of the suite")
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument("--shape-seconds", type=float, default=None, help="time budget a shape")
    parser.add_argument("--bench-seconds", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-incumbent", action="store_true")
    parser.add_argument(
        "--deadline-s", type=float, default=3600.0, help="both passes; pass 1 gets half"
    )
    parser.add_argument("--cache-dir", default=".cache/tunehub-retune")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    args = parser.parse_args()
    if args.backend == "cpu" and args.suite != "gemm":
        parser.error("--suite: the cpu backend has its own shapes")
    report = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / report_stem(args.backend, args.suite)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
    stem.with_suffix(".md").write_text(render(report))
    print(render(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
