"""tunehub's tuned kernels as PyTorch ops, with torch's own op wherever there is no answer.

    import service.integrations.torch as tunehub_torch

    tunehub_torch.configure(server="http://tunehub:8765")   # or TUNEHUB_SERVER
    tunehub_torch.patch(model)                     # nn.Linear/Conv2d/RMSNorm/Softmax -> tunehub
    with torch.inference_mode():
        model(x)
    print(tunehub_torch.stats().format())          # where each shape's kernel came from

Ops (also ``torch.ops.tunehub.<name>``, custom ops with fake kernels: ``torch.compile(
fullgraph=True)`` traces them and CUDA graph capture records their launches):

- ``linear(x, weight, bias=None)``: gemm ``rcr`` (m = product of x's leading dims);
- ``linear(x, weight, bias, activation="relu" | "gelu" | "silu" | "gated_silu")``: the bias
  and the activation fused into the gemm's epilogue (``torch.ops.tunehub.linear_bias_relu``
  etc.); gated_silu: ``silu(gate) * up`` of a weight holding the gate rows, then the up rows
  (vLLM's merged ``gate_up_proj``), output n/2 columns;
- ``matmul(a, b)``: 2-D gemm ``rrr``;
- ``scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, scaling="per_tensor")``:
  FP8 e4m3 ``(scale_a * a) @ (scale_b * b).T`` for b [n, k] (the weight as nn.Linear stores
  it), the ``scaled_gemm`` problem, CUDA only; fallback ``torch._scaled_mm(a, b.t(), ...)``;
- ``grouped_mm(a, weight, offs)``: mixture-of-experts grouped GEMM (``torch._grouped_mm``'s
  meaning, weight [E, n, k]), keyed by the token bucket, CUDA only; it copies ``offs`` to the
  host (a sync), so under CUDA graph capture it runs ``torch._grouped_mm`` instead;
- ``scaled_grouped_mm(a, weight, scale_a, scale_b, offs, out_dtype=torch.bfloat16)``: its FP8
  (e4m3) twin with rowwise scales (``torch._scaled_grouped_mm``'s operands, weight [E, n, k]
  as for grouped_mm), the e4m3 ``grouped_gemm`` bucket, bf16 out tuned, CUDA only;
- ``softmax(x, dim=-1)``, ``sum(x, dim=-1, keepdim=False)``: over the last dim;
- ``rms_norm(x, weight, eps=1e-6)``: y = w * x * rsqrt(mean(x^2) + eps), f32 statistics;
- ``conv2d(x, weight, stride=1, padding=0, dilation=1, *, bias=None, groups=1)``: x and
  weight in channels_last memory (NHWC input, KRSC filter), output channels_last.

The first call of a shape asks the client's on-disk answer cache, then the service, for the
best config on this device; loads the winner once per process by the load policy
(``artifact``: download, check its sha256, load; ``source``: compile the variant's source
here; ``auto``: the artifact, else the source); and asks the variant's ``tunehub_can_run``.
Later calls of that shape cost a dict lookup and the ctypes call, on torch's current stream.
Where that fails (no server, not tuned, the nearest tuned shape too far, refused dims, no
library, service down with nothing cached) or the call is one tunehub has no kernel for (a
dim other than the last, float64, groups, autograd), torch's op runs: said once per shape
(a warning), counted per call in :func:`stats`.

Configuration: :func:`configure`, else ``TUNEHUB_SERVER``, ``TUNEHUB_TOKEN``,
``TUNEHUB_CLIENT_CACHE`` (answers, artifacts, builds), ``TUNEHUB_TORCH_LOAD``
(artifact|source|auto), ``TUNEHUB_TORCH_MAX_DISTANCE``; ``TUNEHUB_RECORD=path`` records the
untuned shapes of the whole process (:func:`record` for a block). docs/torch.md has the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torch import nn

from service.integrations._torch_config import LOAD_POLICIES, ArtifactClient, TorchConfig
from service.integrations._torch_functional import (
    ACTIVATIONS,
    SCALINGS,
    conv2d,
    grouped_mm,
    linear,
    matmul,
    rms_norm,
    rms_norm_reference,
    scaled_grouped_mm,
    scaled_mm,
    softmax,
    sum,
)
from service.integrations._torch_patch import PATCHABLE as PATCHABLE
from service.integrations._torch_patch import TunehubConv2d as TunehubConv2d
from service.integrations._torch_patch import TunehubLinear as TunehubLinear
from service.integrations._torch_patch import TunehubSoftmax as TunehubSoftmax
from service.integrations._torch_patch import patch, unpatch
from service.integrations._torch_record import ShapeRecorder
from service.integrations._torch_runtime import RUNTIME as RUNTIME
from service.integrations._torch_runtime import SCALING_CODES as SCALING_CODES
from service.integrations._torch_stats import (
    FALLBACK_REASONS,
    Fallback,
    OpCounts,
    ShapeStat,
    TorchStats,
)

if hasattr(nn, "RMSNorm"):  # torch >= 2.4
    from service.integrations._torch_patch import TunehubRMSNorm as TunehubRMSNorm

__all__ = [
    "configure",
    "record",
    "stats",
    "reset",
    "patch",
    "unpatch",
    "linear",
    "ACTIVATIONS",
    "matmul",
    "scaled_mm",
    "SCALINGS",
    "grouped_mm",
    "scaled_grouped_mm",
    "softmax",
    "sum",
    "rms_norm",
    "conv2d",
    "rms_norm_reference",
    "LOAD_POLICIES",
    "FALLBACK_REASONS",
    "TorchConfig",
    "TorchStats",
    "OpCounts",
    "ShapeStat",
    "Fallback",
    "ShapeRecorder",
]


def configure(
    server: str | None = None,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    load: str | None = None,
    max_distance: float | None = None,
    revalidate: bool | None = None,
    build_timeout_s: float | None = None,
    client: ArtifactClient | None = None,
) -> TorchConfig:
    """Where the ops find answers and how they load winners; arguments left out keep their
    value (first read from the environment). ``load``: artifact, source or auto;
    ``max_distance``: the farthest nearest-shape answer used (log2 distance, default
    ``MAX_NEAREST_DISTANCE``); ``revalidate``: ask the service even when the on-disk cache
    answers; ``client``: a ready ``TunehubClient`` (with its ``cache_dir``). Shapes resolved
    before are resolved again on their next call."""
    return RUNTIME.configure(
        client,
        server=server,
        token=token,
        cache_dir=Path(cache_dir).expanduser() if cache_dir is not None else None,
        load=load,
        max_distance=max_distance,
        revalidate=revalidate,
        build_timeout_s=build_timeout_s,
    )


@contextmanager
def record(path: str | os.PathLike[str]) -> Iterator[ShapeRecorder]:
    """Write every shape the ops saw untuned (not tuned, too far, refused, no server, service
    down) to ``path``, one JSON line each, de-duplicated against the file: the shapes seen
    before the block too, and each new one as it is seen. ``tunehub tune --from-file path``
    tunes them."""
    recorder = ShapeRecorder(path)
    RUNTIME.start_recording(recorder)
    try:
        yield recorder
    finally:
        RUNTIME.stop_recording(recorder)


def stats() -> TorchStats:
    """Per op, calls on tunehub kernels and on torch (by reason); per shape, where its kernel
    came from: "artifact", "source build", "on-disk cache" or "fallback: <why>"
    (``.format()`` prints it)."""
    return RUNTIME.stats()


def reset(configuration: bool = False) -> None:
    """Forget the resolved shapes and the counts: the next call of each shape asks again
    (e.g. after ``tunehub tune --from-file``). Loaded libraries stay loaded. With
    ``configuration``, forget what :func:`configure` set too (the environment is read again)."""
    RUNTIME.reset(configuration)
