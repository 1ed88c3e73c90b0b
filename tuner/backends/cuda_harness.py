"""The per-device harness process of the CUDA backend (torch lives here, never in the worker).

    python -m tuner.backends.cuda_harness --probe   # one JSON line describing GPU 0, then exit
    python -m tuner.backends.cuda_harness --serve   # JSON requests on stdin, answers on stdout

The backend starts one ``--serve`` process per device with CUDA_VISIBLE_DEVICES set. Requests:

    (first, unasked)                              -> {"ready": true, "device": {...}}
    {"cmd": "run", "artifact", "op", "dtype", "layout", "problem": {...}, "seed",
     "warmup_s", "bench_s", "min_samples", "max_samples", "abort_us", "fixed_output"?}
        -> {"outcome": "ok" | "runtime_error" | "wrong_result" | "aborted_slow",
            "samples_us", "log", "max_abs_error", "error_bound_share", "provenance",
            "suspect_reasons", "fatal"}
    {"cmd": "copy", "bytes"}                      -> {"gb_per_s", "samples_us"}
    {"cmd": "discover", "artifact", "op", "problem", "requested", "buffer_bytes"}
        -> {"algos": [{attribute: value, ...}, ...]} (a discovery build's tunehub_discover)
    {"cmd": "torch_baseline", "op", "dtype", "layout", "problem", ...} -> {"samples_us", ...}

A run rotates the output sets with the input sets; ``fixed_output: true`` (the benches' control,
never a tuning run) has every launch write output set 0 instead, as a caller that reuses one
buffer does (it stays in L2 across launches).

stdout carries answers only (one JSON line each); logs go to stderr. A CUDA fault inside a
kernel poisons the context: the harness answers with ``fatal: true`` and exits, and the
backend starts a fresh one.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
from typing import IO, Any

__all__ = ["main", "probe"]

log = logging.getLogger(__name__)

_REASONS = {
    1: "bad dims",
    2: "misaligned",
    3: "unsupported shape",
    4: "too large",
    5: "launch failed",
    6: "workspace too small",
}


def _driver_version() -> str:
    """The driver's version (580.159.04) from NVML, else the CUDA version it supports."""
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML here: fall back to the driver API
        pass
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        pass
    return ""


def probe() -> dict[str, Any]:
    """Name, arch, SMs, memory, L2, driver and runtime of the first visible GPU."""
    try:
        import torch
    except ImportError as exc:
        return {"error": f"torch is not importable in {sys.executable}: {exc}"}
    if not torch.cuda.is_available():
        return {"error": "no CUDA GPU is visible (torch.cuda.is_available() is False)"}
    props = torch.cuda.get_device_properties(0)
    from tuner.nvml import read_device

    nvml = read_device(pci_bus_id=_pci_bus_id(props))
    return {
        "name": props.name,
        "arch": f"sm_{props.major}{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": int(props.total_memory),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "driver": _driver_version(),
        "runtime": f"cuda {torch.version.cuda}",
        "pci_bus_id": _pci_bus_id(props),
        "uuid": _uuid(props),
        "torch": torch.__version__,
        "nvml": nvml,
    }


def _uuid(props: Any) -> str | None:
    """The card's UUID as the driver reports it (``GPU-...``), or None where torch lacks it."""
    value = getattr(props, "uuid", None)
    if value is None:
        return None
    text = str(value)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def _pci_bus_id(props: Any) -> str | None:
    bus = getattr(props, "pci_bus_id", None)
    if bus is None:
        return None
    domain = getattr(props, "pci_domain_id", 0)
    device = getattr(props, "pci_device_id", 0)
    return f"{domain:08x}:{bus:02x}:{device:02x}.0"


class Harness:
    """Keeps the loaded libraries and the current problem's workload between requests."""

    def __init__(self, info: dict[str, Any]) -> None:
        import torch

        from tuner.backends import cuda_workload

        self.torch = torch
        self.wl = cuda_workload
        self.info = info
        torch.zeros(1, device="cuda")  # make the context now, not inside the first timing
        self.libraries: dict[str, ctypes.CDLL] = {}
        self.workload: Any = None

    def library(self, path: str) -> ctypes.CDLL:
        lib = self.libraries.get(path)
        if lib is None:
            lib = ctypes.CDLL(path)
            lib.tunehub_can_run.restype = ctypes.c_int
            lib.tunehub_can_run.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
            lib.tunehub_workspace_bytes.restype = ctypes.c_size_t
            lib.tunehub_workspace_bytes.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
            lib.tunehub_run.restype = ctypes.c_int
            lib.tunehub_run.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_int64),
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_void_p,
            ]
            lib.tunehub_describe.restype = ctypes.c_char_p
            self.libraries[path] = lib
        return lib

    def discover(self, req: dict[str, Any]) -> dict[str, Any]:
        """Run a discovery build's ``tunehub_discover`` for one problem (vendor heuristics)."""
        from tuner.problems import problem_from_dict

        lib = self.library(req["artifact"])
        fn = lib.tunehub_discover
        fn.restype = ctypes.c_int
        fn.argtypes = [
            ctypes.POINTER(ctypes.c_int64),
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        problem = problem_from_dict(req["op"], dict(req["problem"]))
        values = [int(v) for v in problem.int_dims().values()]
        dims = (ctypes.c_int64 * len(values))(*values)
        size = int(req.get("buffer_bytes", 1 << 20))
        buf = ctypes.create_string_buffer(size)
        count = fn(dims, len(values), int(req.get("requested", 32)), buf, size)
        if count < 0:
            return {"outcome": "runtime_error", "fatal": False, "log": f"discovery status {count}"}
        return {"algos": json.loads(buf.value.decode())}

    def workload_for(self, req: dict[str, Any]) -> Any:
        from tuner.problems import problem_from_dict

        problem = problem_from_dict(req["op"], dict(req["problem"]))
        key = f"{req['op']}|{req['dtype']}|{req['layout']}|{problem.key()}|{req.get('seed', 0)}"
        if self.workload is None or self.workload.key != key:
            self.workload = None  # free the previous problem's memory first
            self.torch.cuda.empty_cache()
            self.workload = self.wl.build_workload(
                problem,
                req["dtype"],
                req["layout"],
                int(req.get("seed", 0)),
                int(self.info.get("l2_bytes") or 0) or (60 << 20),
            )
        return self.workload

    def nvml(self) -> dict[str, Any]:
        from tuner.nvml import read_device

        return read_device(pci_bus_id=self.info.get("pci_bus_id"))

    def energy_mj(self) -> int | None:
        from tuner.nvml import total_energy_mj

        return total_energy_mj(pci_bus_id=self.info.get("pci_bus_id"))

    def run(self, req: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        lib = self.library(req["artifact"])
        work = self.workload_for(req)
        dims = (ctypes.c_int64 * len(work.dims))(*work.dims)
        n_dims = len(work.dims)
        answer: dict[str, Any] = {"describe": lib.tunehub_describe().decode(errors="replace")}
        reason = lib.tunehub_can_run(dims, n_dims)
        if reason != 0:
            return {
                **answer,
                "outcome": "runtime_error",
                "fatal": False,
                "log": f"tunehub_can_run refused: code {reason} "
                f"({_REASONS.get(reason, 'unknown')})",
            }
        ws_bytes = int(lib.tunehub_workspace_bytes(dims, n_dims))
        workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device="cuda")
        fixed_output = bool(req.get("fixed_output", False))
        out_ptrs = (
            [work.outputs[0].data_ptr()] * len(work.outputs)
            if fixed_output
            else [t.data_ptr() for t in work.outputs]
        )

        def launch(i: int, stream: int) -> None:
            rc = lib.tunehub_run(
                work.pointer_arrays[i],
                out_ptrs[i],
                dims,
                n_dims,
                workspace.data_ptr(),
                ws_bytes,
                stream,
            )
            if rc != 0:
                raise _VariantRefused(rc)

        for out in work.outputs:
            out.view(torch.uint8).fill_(0xFF)  # poison: NaN in every storage dtype
        try:
            launch(0, torch.cuda.current_stream().cuda_stream)
        except _VariantRefused as exc:
            return {
                **answer,
                "outcome": "runtime_error",
                "fatal": False,
                "log": f"tunehub_run returned {exc.code} ({_REASONS.get(exc.code, '?')})",
            }
        torch.cuda.synchronize()  # a fault raises here and is handled as fatal by the caller
        verdict = self.wl.verify_output(work, req["dtype"])
        answer.update(
            max_abs_error=verdict.max_abs_error,
            error_bound_share=verdict.bound_share,
            input_sets=len(work.inputs),
        )
        if not verdict.ok:
            return {**answer, "outcome": "wrong_result", "fatal": False, "log": verdict.message}
        before = self.nvml()
        timing = self.wl.time_launches(
            launch,
            len(work.inputs),
            warmup_s=float(req.get("warmup_s", 0.05)),
            bench_s=float(req.get("bench_s", 0.2)),
            min_samples=max(10, int(req.get("min_samples", 10))),
            max_samples=int(req.get("max_samples", 10_000)),
            abort_us=req.get("abort_us"),
            energy_mj=self.energy_mj,
        )
        after = self.nvml()
        from tuner.nvml import suspect_reasons

        return {
            **answer,
            "outcome": "aborted_slow" if timing.aborted else "ok",
            "fatal": False,
            "samples_us": timing.samples_us,
            "energy_j": timing.energy_j,
            "log": "",
            "suspect_reasons": suspect_reasons(before, after, {os.getpid()}),
            "provenance": {
                "nvml_before": before,
                "nvml_after": after,
                "batch": timing.batch,
                "cuda_graph": timing.graph,
                "input_sets": len(work.inputs),
                "input_set_bytes": work.set_bytes,
                "fixed_output": fixed_output,
                "pid": os.getpid(),
            },
        }

    def copy(self, req: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        n = int(req.get("bytes", 1 << 30)) // 2
        src = torch.rand(n, device="cuda", dtype=torch.float32).to(torch.float16)
        dst = torch.empty_like(src)
        timing = self.wl.time_launches(
            lambda i, s: dst.copy_(src),
            1,
            warmup_s=0.2,
            bench_s=0.3,
            min_samples=10,
            max_samples=1000,
            abort_us=None,
            use_graph=False,
        )
        median = sorted(timing.samples_us)[len(timing.samples_us) // 2]
        return {"samples_us": timing.samples_us, "gb_per_s": 4.0 * n / median / 1e3}

    def torch_baseline(self, req: dict[str, Any]) -> dict[str, Any]:
        from tuner.abi import RMS_NORM_EPS

        torch = self.torch
        work = self.workload_for(req)
        kind = req["problem"].get("kind", "sum")
        ops = {
            "sum": lambda x, y: torch.sum(x, dim=1, out=y),
            "max": lambda x, y: torch.amax(x, dim=1, out=y),
            "mean": lambda x, y: torch.mean(x, dim=1, out=y),
        }

        def launch(i: int, stream: int) -> None:
            x, y = work.inputs[i][0], work.outputs[i]
            if req["op"] == "softmax":
                torch.softmax(x, dim=1)
            elif req["op"] == "rms_norm":  # torch's fused op; eps as the variants are timed
                torch.nn.functional.rms_norm(x, x.shape[-1:], work.inputs[i][1], RMS_NORM_EPS)
            else:
                ops[kind](x, y)

        timing = self.wl.time_launches(
            launch,
            len(work.inputs),
            warmup_s=0.1,
            bench_s=0.2,
            min_samples=10,
            max_samples=1000,
            abort_us=None,
        )
        return {"samples_us": timing.samples_us, "batch": timing.batch, "cuda_graph": timing.graph}


class _VariantRefused(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _answer(stream: IO[str], payload: dict[str, Any]) -> None:
    stream.write(json.dumps(payload) + "\n")
    stream.flush()


def serve(answers: IO[str]) -> int:
    info = probe()
    if "error" in info:
        _answer(answers, {"ready": False, "log": info["error"]})
        return 2
    harness = Harness(info)
    _answer(answers, {"ready": True, "device": harness.info})
    handlers = {
        "run": harness.run,
        "copy": harness.copy,
        "discover": harness.discover,
        "torch_baseline": harness.torch_baseline,
        "ping": lambda req: {"ok": True, "device": harness.info},
    }
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        handler = handlers.get(req.get("cmd", ""))
        if handler is None:
            _answer(
                answers,
                {
                    "outcome": "runtime_error",
                    "fatal": False,
                    "log": f"unknown command {req.get('cmd')!r}",
                },
            )
            continue
        try:
            _answer(answers, handler(req))
        except Exception as exc:  # a CUDA fault (or a harness bug): report it and start afresh
            log.exception("harness request failed")
            _answer(
                answers,
                {
                    "outcome": "runtime_error",
                    "fatal": True,
                    "log": f"{type(exc).__name__}: {exc}"[-4000:],
                },
            )
            return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="harness %(levelname)s %(message)s"
    )
    answers = sys.stdout
    sys.stdout = sys.stderr  # stray prints from libraries must not corrupt the answer stream
    if "--probe" in args:
        info = probe()
        _answer(answers, info)
        return 1 if "error" in info else 0
    if "--serve" in args:
        return serve(answers)
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main())
