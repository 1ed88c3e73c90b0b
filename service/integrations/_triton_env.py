"""What the Triton drop-in reads about the kernel, the device and the toolchain, and how it
times a config: Triton's ``do_bench`` on a GPU, a wall clock under the CPU interpreter.

Only reads: nothing here changes clocks, power limits or modes.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from service.schemas.common import DeviceReport
from service.schemas.worker import ToolchainReport

__all__ = [
    "Timer",
    "kernel_hash",
    "kernel_name",
    "config_params",
    "config_name",
    "configs_fingerprint",
    "key_value",
    "device_of",
    "toolchain_of",
    "nvml_reading",
    "triton_do_bench",
    "cpu_wall_clock_bench",
]

log = logging.getLogger(__name__)

#: times a zero-argument callable; returns (median, p20, p80) in milliseconds
Timer = Callable[[Callable[[], Any]], tuple[float, float, float]]


def _python_function(fn: Any) -> Any:
    while hasattr(fn, "fn"):
        fn = fn.fn
    return fn


def kernel_hash(fn: Any) -> str:
    """Triton's own hash of a ``@triton.jit`` kernel (source and the jit functions it calls)
    when it has one; the sha256 of the Python source otherwise (e.g. under the interpreter)."""
    cache_key = getattr(fn, "cache_key", None)
    if isinstance(cache_key, str) and len(cache_key) >= 16:
        try:
            int(cache_key, 16)
            return cache_key[:64].lower()
        except ValueError:
            pass
    source = getattr(fn, "src", None)
    if not isinstance(source, str):
        source = inspect.getsource(_python_function(fn))
    return hashlib.sha256(source.encode()).hexdigest()


def kernel_name(fn: Any) -> str:
    return str(getattr(_python_function(fn), "__name__", "kernel"))[:200]


def config_params(config: Any) -> dict[str, Any]:
    """A Triton config as JSON: its meta-parameters and launch options."""
    params: dict[str, Any] = {"kwargs": {k: _json_scalar(v) for k, v in config.kwargs.items()}}
    for option in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(config, option, None)
        if value is not None:
            params[option] = value
    return params


def config_name(config: Any) -> str:
    params = config_params(config)
    parts = [f"{k}={v}" for k, v in sorted(params["kwargs"].items())]
    parts += [f"{k}={v}" for k, v in params.items() if k != "kwargs"]
    return ",".join(parts)[:300] or "default"


def configs_fingerprint(configs: Iterable[Any]) -> str:
    """Changes when the list of candidate configs changes (then the key is tuned again)."""
    names = sorted(config_name(c) for c in configs)
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def _json_scalar(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def key_value(value: Any) -> Any:
    """A key argument as the service stores it: scalars as they are, anything else as text."""
    return _json_scalar(value)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_of(args: Iterable[Any]) -> DeviceReport:
    """The device of the first tensor argument: a CUDA GPU, or the CPU (interpreter mode)."""
    for arg in args:
        device = getattr(arg, "device", None)
        if device is None or not hasattr(arg, "data_ptr"):
            continue
        if getattr(device, "type", "") == "cuda":
            import torch

            index = device.index if device.index is not None else torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            return DeviceReport(
                backend="cuda",
                name=props.name,
                arch=f"sm_{props.major}{props.minor}",
                sm_count=props.multi_processor_count,
                runtime=str(torch.version.cuda or ""),
                memory_bytes=int(props.total_memory),
            )
        break
    return DeviceReport(
        backend="cpu",
        name=_cpu_name(),
        arch=platform.machine() or "cpu",
        sm_count=os.cpu_count() or 1,
    )


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def toolchain_of(fn: Any) -> ToolchainReport:
    """Triton's version (and "interpreter" when TRITON_INTERPRET is on) is the compiler; the
    kernel's hash is the template version; torch and CUDA versions are libraries."""
    try:
        import triton

        version = f"triton {triton.__version__}"
    except ImportError:
        version = "triton (absent)"
    if _interpreted():
        version += " interpreter"
    libraries: dict[str, str] = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        libraries["torch"] = str(getattr(torch, "__version__", ""))
        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        if cuda:
            libraries["cuda"] = str(cuda)
    return ToolchainReport(compiler=version, template_version=kernel_hash(fn), libraries=libraries)


def nvml_reading(device: DeviceReport) -> dict[str, Any]:
    """Clocks, temperature, power and throttle reasons of GPU 0 when NVML is there (the
    engine's richer reader lives in tuner/, which client-side code must not import)."""
    if device.backend != "cuda":
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "throttle_mask": int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        }
    except Exception as exc:  # no NVML, no driver: provenance is best effort
        log.debug("NVML unavailable: %s", exc)
        return {}


def triton_do_bench(warmup_ms: int = 25, rep_ms: int = 100) -> Timer:
    """Triton's ``do_bench`` (CUDA events, L2 flushed between runs): median, p20, p80."""

    def timer(call: Callable[[], Any]) -> tuple[float, float, float]:
        from triton.testing import do_bench

        median, p20, p80 = do_bench(call, warmup=warmup_ms, rep=rep_ms, quantiles=(0.5, 0.2, 0.8))
        return float(median), float(p20), float(p80)

    return timer


def cpu_wall_clock_bench(reps: int = 5) -> Timer:
    """For the CPU interpreter, where CUDA events do not exist: one warm-up call, then
    ``reps`` calls timed with ``time.perf_counter``."""

    def timer(call: Callable[[], Any]) -> tuple[float, float, float]:
        call()
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            call()
            samples.append((time.perf_counter() - start) * 1e3)
        samples.sort()
        quantiles = statistics.quantiles(samples, n=10, method="inclusive")
        return statistics.median(samples), quantiles[1], quantiles[7]

    return timer


def host() -> str:
    return socket.gethostname()
