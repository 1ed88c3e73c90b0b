"""The comparison rule and the baseline file of bench/regress.py (no GPU, no torch).

A shape's **ratio** is tunehub's figure over its reference's, both timed in the same
interleaved rounds: GB/s over the device copy's GB/s for rows (reduce, softmax), the
reference's time over tunehub's for the others: GEMM (cuBLAS through torch.matmul), conv2d
(cuDNN's default engine config), and the call a user makes instead for issue 26's families (a
fused GEMM or conv2d: the unfused pair; scaled_gemm: torch._scaled_mm; grouped_gemm:
torch._grouped_mm or torch._scaled_grouped_mm). Each round gives one ratio; the shape's
ratio is their median and its **noise** is half their spread (max - min) over that median. The
ratio, not the figure, is compared: clocks and the power cap move a figure by several percent
between runs, and the reference moves with it. The figure (GB/s, TFLOP/s) is recorded and
shown beside it.

**Rule** (``verdict``): with the recorded ratio R and noise N, this run's ratio r and noise n,

    tolerance = max(2 x max(n, N), 3%);   the shape fails ("drop") when r < R x (1 - tolerance)

A shape without a recorded ratio is "new" and never fails; a recorded shape that this run
could not measure (no verified winner, a failed timing) is "lost" and fails; one the run did
not reach (deadline, ``--only``/``--quick``) is "skipped" and fails only where a run meant to
cover the whole list ran out of time (the caller decides). ``--update`` rewrites the records
of every measured shape from the run (date, device, commit with each) and keeps the others.

**Per device**: the ratio to the copy or the vendor depends on the GPU (an H100's reduce rows
reach 1.03x its copy where an H200's reach 1.05x), so a run is compared only with the records
of its own device (``torch.cuda.get_device_name``); a device without records has every shape
"new" until ``--update`` records it beside the others.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MIN_TOLERANCE",
    "NOISE_FACTOR",
    "FAILING",
    "Verdict",
    "format_table",
    "load_baseline",
    "ratio_and_noise",
    "records_for",
    "save_baseline",
    "updated_baseline",
    "verdict",
    "verdicts",
]

#: the smallest tolerance of the rule (a drop below this is never reported)
MIN_TOLERANCE = 0.03
#: the tolerance is this many times the larger noise (this run's or the record's)
NOISE_FACTOR = 2.0
#: statuses that make the run fail
FAILING = ("drop", "lost")
#: the baseline file's format version (1: one device's records under "shapes"; 2: per device
#: under "devices"; a file of format 1 is read as its records' devices)
FORMAT = 2


def ratio_and_noise(round_ratios: list[float]) -> tuple[float, float]:
    """The median of the per-round ratios and half their spread over it (0 for one round)."""
    values = [r for r in round_ratios if r > 0]
    if not values:
        raise ValueError("no positive ratio")
    median = statistics.median(values)
    return median, (max(values) - min(values)) / 2.0 / median


@dataclass(frozen=True)
class Verdict:
    """One shape's outcome: ``ok``, ``drop``, ``new``, ``lost`` or ``skipped``."""

    status: str
    #: the relative tolerance the rule applied (None where nothing was compared)
    tolerance: float | None = None
    #: the lowest ratio that still passes
    floor: float | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILING


def verdict(result: dict[str, Any] | None, record: dict[str, Any] | None) -> Verdict:
    """The rule of the module doc for one shape (``result`` as bench/regress.py writes it:
    ``ratio``, ``noise``; None or no ratio where the run did not measure it)."""
    recorded = record.get("ratio") if record else None
    if result is None or result.get("skipped"):
        return Verdict("skipped")
    ratio = result.get("ratio")
    if ratio is None:
        return Verdict("lost" if recorded is not None else "new")
    if recorded is None or record is None:
        return Verdict("new")
    noise = max(float(result.get("noise") or 0.0), float(record.get("noise") or 0.0))
    tolerance = max(NOISE_FACTOR * noise, MIN_TOLERANCE)
    floor = float(recorded) * (1.0 - tolerance)
    return Verdict("drop" if ratio < floor else "ok", tolerance, floor)


def verdicts(
    results: dict[str, dict[str, Any]], records: dict[str, dict[str, Any]]
) -> dict[str, Verdict]:
    """Every shape of the run, by key, against ``records`` (one device's, ``records_for``; a
    record of a shape no longer in the list is kept, not judged)."""
    return {key: verdict(result, records.get(key)) for key, result in results.items()}


def records_for(baseline: dict[str, Any], device: str | None) -> dict[str, dict[str, Any]]:
    """The records of one device (empty where it has none)."""
    return dict(baseline.get("devices", {}).get(device or "", {}))


def _empty() -> dict[str, Any]:
    return {"format": FORMAT, "rule": _rule_line(), "devices": {}}


def load_baseline(path: Path) -> dict[str, Any]:
    """The baseline file (format 2; a format-1 file is read per its records' devices), or an
    empty one where it does not exist yet."""
    if not path.exists():
        return _empty()
    data = json.loads(path.read_text())
    if data.get("format") == 1 and isinstance(data.get("shapes"), dict):
        devices: dict[str, dict[str, Any]] = {}
        for key, record in data["shapes"].items():
            devices.setdefault(str(record.get("device") or ""), {})[key] = record
        return {**_empty(), "devices": devices}
    devices = data.get("devices")
    if (
        data.get("format") != FORMAT
        or not isinstance(devices, dict)
        or not all(isinstance(records, dict) for records in devices.values())
    ):
        raise ValueError(f"{path}: not a regress baseline of format 1 or {FORMAT}")
    return data


def save_baseline(path: Path, data: dict[str, Any]) -> None:
    """Written sorted and indented, so that a change reads as a small diff."""
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def _rule_line() -> str:
    return (
        f"fail when ratio < recorded x (1 - max({NOISE_FACTOR:g} x max(noise, recorded noise), "
        f"{MIN_TOLERANCE:.0%})); see bench/regress_rule.py"
    )


#: the fields of a result that a record keeps
_RECORDED = ("op", "problem", "unit", "reference", "figure", "ratio", "noise", "winner")


def updated_baseline(
    baseline: dict[str, Any], results: dict[str, dict[str, Any]], meta: dict[str, Any]
) -> dict[str, Any]:
    """``baseline`` with every measured shape of ``results`` recorded anew under the run's
    device (``meta``: date, device, commit of the run); the shapes the run did not measure and
    the other devices keep their records."""
    device = str(meta.get("device") or "")
    shapes = records_for(baseline, device)
    for key, result in results.items():
        if result.get("ratio") is None:
            continue
        record = {name: result.get(name) for name in _RECORDED}
        record.update(
            date=meta.get("date"),
            device=meta.get("device"),
            commit=meta.get("commit"),
            source=meta.get("source", "bench/regress.py --update"),
        )
        shapes[key] = record
    devices = {**baseline.get("devices", {}), device: shapes}
    return {**_empty(), "devices": {name: devices[name] for name in sorted(devices)}}


#: the table's columns: op, shape, figure, ratio, recorded ratio, noise (then the verdict)
_WIDTHS = (12, 27, 13, 5, 5, 5)


def _short(key: str) -> tuple[str, str]:
    """(op, shape) cells that fit the table: gemm m x n x k; conv2d n, h x w, c > k, r x s and
    /stride (when not 1); rows m x k; a fused epilogue as +silu, +relu, +bias; scaled_gemm's
    scaling and output dtype; grouped_gemm's experts, n x k, tokens and skew (E8 4096x14336
    t16 s2); another op's dims as the key lists them. A dtype the key names leads the cell."""
    op, _, rest = key.partition(" ")
    first, _, tail = rest.partition(" ")  # "e4m3 experts=8,..." or "m=16,..." (f16)
    dtype, dims = (first, tail) if "=" not in first else ("", rest)
    values = dict(part.split("=", 1) for part in dims.split(",") if "=" in part)
    # bias + activation as +activation (every fused activation comes with a bias)
    fused = f" +{values['epilogue'].removeprefix('bias_')}" if "epilogue" in values else ""
    if op == "conv2d":
        stride = f"/{values['stride']}" if values["stride"] != "1" else ""
        shape = (
            f"n{values['n']} {values['h']}x{values['w']} {values['c']}>{values['k']} "
            f"{values['r']}x{values['s']}{stride}{fused}"
        )
    elif op in ("gemm", "scaled_gemm"):
        shape = f"{values['m']}x{values['n']}x{values['k']}{fused}"
        if op == "scaled_gemm":
            shape += f" {values['scaling'].removeprefix('per_')}>{values['out_dtype']}"
            dtype = ""  # always e4m3
    elif op == "grouped_gemm":
        shape = (
            f"E{values['experts']} {values['n']}x{values['k']} t{values['tokens']} "
            f"s{values['skew']}"
        )
    elif op in ("softmax", "reduce"):
        shape = f"{values['m']}x{values['k']}"
    else:
        shape = dims
    return op, f"{dtype} {shape}" if dtype else shape


def _noise_cell(noise: float | None, width: int) -> str:
    if noise is None:
        return f"{'-':>{width}}"
    return f"{'>100%' if noise >= 1.0 else format(noise, '.1%'):>{width}}"


def format_table(
    results: dict[str, dict[str, Any]],
    records: dict[str, dict[str, Any]],
    found: dict[str, Verdict],
) -> str:
    """One line per shape, at most 80 columns: figure, ratio to the reference, the ratio
    recorded on this device, this run's noise, the verdict."""
    op_w, shape_w, figure_w, ratio_w, rec_w, noise_w = _WIDTHS
    head = (
        f"{'op':<{op_w}} {'shape':<{shape_w}} {'figure':>{figure_w}} {'ratio':>{ratio_w}} "
        f"{'rec':>{rec_w}} {'noise':>{noise_w}}"
    )
    lines = [head.rstrip(), "-" * 79]
    for key, found_verdict in found.items():
        result = results.get(key) or {}
        record = records.get(key) or {}
        op, shape = _short(key)
        figure = result.get("figure")
        unit = result.get("unit") or record.get("unit") or ""
        noise = result.get("noise")
        cells = [
            f"{op[:op_w]:<{op_w}}",
            f"{shape[:shape_w]:<{shape_w}}",
            f"{figure:>{figure_w - 8}.0f} {unit:<7}" if figure else f"{'-':>{figure_w}}",
            f"{result['ratio']:>{ratio_w}.3f}" if result.get("ratio") else f"{'-':>{ratio_w}}",
            f"{record['ratio']:>{rec_w}.3f}" if record.get("ratio") else f"{'-':>{rec_w}}",
            _noise_cell(noise, noise_w),
            found_verdict.status.upper() if found_verdict.failed else found_verdict.status,
        ]
        lines.append(" ".join(cells))
    failed = [key for key, v in found.items() if v.failed]
    skipped = [key for key, v in found.items() if v.status == "skipped"]
    lines += [
        "-" * 79,
        f"{len(failed)} failing, {len(skipped)} skipped of {len(found)} shapes; ratio: GB/s over "
        "the copy's (rows),",
        "else the reference's time over tunehub's: cublas (gemm), cudnn_default (conv2d),",
        "unfused (+relu, +silu: bias and activation fused; torch's op, then its bias add",
        "and activation), torch_scaled_mm, grouped_mm (bf16), scaled_grouped_mm (e4m3);",
        "rule: bench/regress_rule.py",
    ]
    return "\n".join(lines)
