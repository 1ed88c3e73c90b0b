"""The page of bench/vs_vendor_conv.py from its raw JSON (pure Python: no torch, no GPU).

    python3 bench/vs_vendor_conv.py --report bench/results/h200-conv-vendor.json \
        --out docs/benchmarks

A row's ``times_us`` holds what the GPU run timed (labels below). Where a run also timed the
output-buffer controls, the page gets a second table that separates the two causes of a torch
lead: its output buffer (torch's caching allocator hands every launch of the captured graph the
same buffer, which stays in L2, where tunehub's harness rotates the outputs with the inputs) or a
faster kernel (then the engine config it runs is past the tuning budget, or outside the list
discovery returns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.vendor_common import geomean
from tuner.winner import TIE_BAND

__all__ = [
    "TIE_BAND",
    "CONTROL_LABELS",
    "output_cause",
    "miss_reason",
    "write_report",
]

#: the output-buffer controls of a row's ``times_us`` (a run before 2026-12-04 08:00 has none)
CONTROL_LABELS = {
    "tunehub_fixed_out": "tunehub's winner, every launch writing output set 0",
    "cudnn_default_fixed_out": "the cuDNN default, every launch writing output set 0",
    "torch_out_rotated": "torch.ops.aten.cudnn_convolution.out into the harness's output of "
    "each input set (the buffers tunehub writes)",
    "torch_out_fixed": "the same op into output set 0 (control: equals `torch` when the op "
    "runs what torch.nn.functional.conv2d runs)",
}


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num and den else None


def _tried(row: dict[str, Any], library: str = "cudnn") -> int:
    return sum(1 for c in row.get("candidates", []) if c.get("library") == library)


def output_cause(times: dict[str, float], band: float = TIE_BAND) -> str | None:
    """Which cause a torch lead has on one row, from its times; None without the controls.

    ``torch`` (F.conv2d, one buffer) against ``tunehub`` (rotated) is the page's ratio. On the
    same buffers: ``torch_out_rotated`` against ``tunehub`` and ``torch`` against
    ``tunehub_fixed_out``. A lead that vanishes on the same buffers is the buffer's; one that
    stays on both is the kernel's."""
    own, tor = times.get("tunehub"), times.get("torch")
    rotated = _ratio(times.get("torch_out_rotated"), own)
    fixed = _ratio(tor, times.get("tunehub_fixed_out"))
    if rotated is None and fixed is None:
        return None
    lead = _ratio(tor, own)
    low = 1.0 - band
    same = ", ".join(
        f"{name} {value:.2f}x"
        for name, value in (("rotated", rotated), ("fixed", fixed))
        if value is not None
    )
    if lead is not None and lead >= low:
        return f"no torch lead ({lead:.2f}x); on the same buffers: {same}"
    if all(v >= low for v in (rotated, fixed) if v is not None):
        return f"the output buffer: on the same buffers the winner ties or wins ({same})"
    if all(v < low for v in (rotated, fixed) if v is not None):
        return f"a faster kernel: torch leads on the same buffers too ({same})"
    return f"partly the output buffer: on the same buffers {same}"


def miss_reason(row: dict[str, Any]) -> str:
    """Why tunehub's answer trails a baseline on a row, from what the run recorded (no more)."""
    t = row.get("times_us", {})
    own, d0, tor = t.get("tunehub"), t.get("cudnn_default"), t.get("torch")
    tried = _tried(row)
    if tor and own and tor < own * (1 - TIE_BAND):
        default = (
            "the cuDNN default"
            if row.get("winner") == row.get("vendor_default")
            else ("the winner")
        )
        cause = output_cause(t)
        if cause is not None:
            whole = " (the whole list)" if tried >= (row.get("discovered") or 0) else ""
            lt = _tried(row, "cublaslt")
            lt_tried = (
                f", {lt} of {row.get('discovered_cublaslt')} cuBLASLt algorithms" if lt else ""
            )
            return (
                f"torch's call is faster than {default}; {tried} of {row.get('discovered')} "
                f"cuDNN configs timed{whole}{lt_tried}; cause: {cause}"
            )
        return (
            f"torch's call is faster than {default} and every other candidate timed "
            f"({tried} of {row.get('discovered')} cuDNN configs); cause not measured here: an "
            "engine config past the budget, or torch's output buffer reused by every launch "
            "of the captured graph where tunehub's harness rotates outputs"
        )
    if own and d0 and own > d0:
        return "the winner re-timed slower than the default it beat while tuning (timing spread)"
    return "timing spread between the tuning run and the re-timing"


def _best_cutlass_us(row: dict[str, Any]) -> float | None:
    times = [
        c["median_us"]
        for c in row.get("candidates", [])
        if c.get("library") == "cutlass" and c.get("outcome") == "ok" and c.get("median_us")
    ]
    return min(times) if times else None


def _us(value: float | None) -> str:
    return f"{value:.1f}" if value else "-"


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value else "-"


def _controls_table(rows: list[dict[str, Any]]) -> list[str]:
    """The output-buffer table (rows that timed a control only); [] when none did."""
    timed = [r for r in rows if any(k in r.get("times_us", {}) for k in CONTROL_LABELS)]
    if not timed:
        return []
    lines = [
        "## Output buffer or kernel: torch's lead on the same buffers",
        "",
        "Rotated: output set i with input set i (tunehub's harness, as in the table above). "
        "Fixed: every launch writes one buffer (what torch's allocator gives "
        "torch.nn.functional.conv2d inside the captured graph). "
        + " ".join(f"`{k}`: {v}." for k, v in CONTROL_LABELS.items())
        + " Same-buffer ratios are torch's time over the winner's (above 1: tunehub faster): "
        "`torch_out_rotated` / `tunehub` and `torch` / `tunehub_fixed_out`. `cuDNN tried`: "
        "engine configs timed while tuning, of those discovered.",
        "",
        "| model | layer | n | tunehub rot us | tunehub fixed us | cuDNN default rot us | "
        "cuDNN default fixed us | torch out= rot us | torch out= fixed us | torch us | "
        "same buffers rot | same buffers fixed | cuDNN tried | cause |",
        "|" + "---|" * 14,
    ]
    for r in timed:
        t = r["times_us"]
        cells = [
            r["model"],
            r["layer"],
            str(r["n"]),
            _us(t.get("tunehub")),
            _us(t.get("tunehub_fixed_out")),
            _us(t.get("cudnn_default")),
            _us(t.get("cudnn_default_fixed_out")),
            _us(t.get("torch_out_rotated")),
            _us(t.get("torch_out_fixed")),
            _us(t.get("torch")),
            _x(_ratio(t.get("torch_out_rotated"), t.get("tunehub"))),
            _x(_ratio(t.get("torch"), t.get("tunehub_fixed_out"))),
            f"{_tried(r)}/{r.get('discovered', '-')}",
            output_cause(t) or "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    same_r = [
        x
        for r in timed
        if (x := _ratio(r["times_us"].get("torch_out_rotated"), r["times_us"].get("tunehub")))
    ]
    same_f = [
        x
        for r in timed
        if (x := _ratio(r["times_us"].get("torch"), r["times_us"].get("tunehub_fixed_out")))
    ]
    lines += [
        "",
        f"- Geomean vs torch on the same buffers, rotated: **{geomean(same_r):.3f}x** over "
        f"{len(same_r)} shapes (min {min(same_r, default=float('nan')):.2f}x); fixed: "
        f"**{geomean(same_f):.3f}x** over {len(same_f)} shapes "
        f"(min {min(same_f, default=float('nan')):.2f}x).",
        "",
    ]
    return lines


def write_report(out: Path, payload: dict[str, Any], stem: str = "h200-conv-vendor") -> None:
    """The markdown page from the raw JSON (the GPU run writes both; --report redoes the page)."""
    rows, meta = payload["rows"], payload["meta"]
    via = meta.get("via", "through bench/h200_conv_run.sh on the lent H200")
    rounds = int(meta.get("compare_rounds", 1))
    lines = [
        f"# conv2d on CNN layers: tunehub vs cuDNN on {meta.get('device')}",
        "",
        f"Date: {meta.get('date')}. Command: `{meta['command']}` "
        f"({via}). torch {meta.get('torch')}, cuDNN {meta.get('cudnn')} (torch's "
        f"{meta.get('torch_cudnn')}).",
        "",
        "f16, x NHWC, w KRSC, y NPQK. Every time is a median over batches of back-to-back "
        "launches in a CUDA graph, input sets rotated over >= 2x L2, CUDA events; tunehub's "
        "winner, the cuDNN default (heuristic mode A's first engine config rebuilt from its "
        "engine index and knobs: the candidate every tuning job tries first) and "
        "torch.nn.functional.conv2d on channels_last views of the same tensors (cuDNN, "
        "benchmark mode off; `torch` times the call alone, its output is allocated by torch's "
        "caching allocator) are timed in one process on the same inputs, "
        + (
            f"interleaved: {rounds} rounds per shape, each timing every label once in an order "
            "rotated by one label a round, a label's time the median of its round medians. "
            if rounds > 1
            else "one window per label, one label after another. "
        )
        + "Ratios are times of the baseline over tunehub's (above 1: tunehub faster). "
        "`torch bench`: torch again with cudnn.benchmark on (its own engine search; not in the "
        "ratios; '-' where a run did not time it).",
        "",
        "| model | layer | n | h | c | k | rxs/stride | winner | library | tunehub us | "
        "cuDNN default us | torch us | torch bench us | vs cuDNN default | vs torch | "
        "best CUTLASS us | configs | tune s |",
        "|" + "---|" * 18,
    ]
    cutlass_share: list[float] = []
    vs_default: list[float] = []
    vs_torch: list[float] = []
    misses: list[str] = []
    for r in rows:
        t = r.get("times_us", {})
        own, d0, tor = t.get("tunehub"), t.get("cudnn_default"), t.get("torch")
        a = _ratio(d0, own)
        b = _ratio(tor, own)
        if a:
            vs_default.append(a)
        if own and (cut := _best_cutlass_us(r)) and r.get("winner_us"):
            cutlass_share.append(r["winner_us"] / cut)
        if b:
            vs_torch.append(b)
        label = f"{r['model']} {r['layer']} n={r['n']}"
        low = [x for x in (a, b) if x is not None and x < 1 - TIE_BAND]
        if low:
            misses.append(f"{label}: {min(low):.2f}x ({miss_reason(r)})")
        if own is None:
            why = r.get("compare_error") or (r.get("compare_errors") or {}).get("tunehub")
            misses.append(f"{label}: not timed ({why or 'no verified winner'})")
        lib = (r.get("winner_params") or {}).get("library", "-")
        cells = [
            r["model"],
            r["layer"],
            str(r["n"]),
            str(r["h"]),
            str(r["c"]),
            str(r["k"]),
            f"{r['r']}x{r['s']}/{r['stride']}",
            f"`{r.get('winner')}`",
            str(lib),
            _us(own),
            _us(d0),
            _us(tor),
            _us(t.get("torch_benchmark")),
            _x(a),
            _x(b),
            _us(_best_cutlass_us(r)),
            str(r.get("discovered", "-")),
            f"{r.get('seconds', 0):.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        f"- Geomean vs the cuDNN default over {len(vs_default)} shapes: "
        f"**{geomean(vs_default):.3f}x** (min {min(vs_default, default=float('nan')):.2f}x).",
        f"- Geomean vs torch (cuDNN) over {len(vs_torch)} shapes: **{geomean(vs_torch):.3f}x** "
        f"(min {min(vs_torch, default=float('nan')):.2f}x).",
        f"- Targets (issue 9): no shape below 0.98x, >= 1.10x geomean. Shapes below 0.98x of "
        f"either baseline: {sum(1 for m in misses if 'not timed' not in m)}.",
        f"- CUTLASS 2.x head (3 kernels a shape, by the SM-fill order): its best reaches "
        f"{geomean(cutlass_share):.2f} of the winner's speed (geomean over {len(cutlass_share)} "
        "shapes, tuning times).",
        f"- Tuning wall time: {meta.get('tune_wall_seconds', 0):.0f} s for {len(rows)} shapes.",
        "",
    ]
    lines += _controls_table(rows)
    if misses:
        lines += ["Misses:", "", *[f"- {m}" for m in misses], ""]
    if meta.get("notes"):
        lines += ["Notes:", "", *[f"- {n}" for n in meta["notes"]], ""]
    (out / f"{stem}.md").write_text("\n".join(lines))
