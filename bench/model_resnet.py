"""ResNet-50 (torchvision, random weights, f16, channels_last) with its convolutions through
cuDNN (torch eager) or through tunehub's conv2d op; the rest of the network (batch norm, ReLU,
pooling, the classifier) is torch's in both arms. Called by ``bench/model_bench.py resnet``.

Each batch size's arms are captured in CUDA graphs and timed in interleaved rounds, as the
decoder's decode steps are; images/s is batch / forward time.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from bench.model_bench import Runtime, replay_timer
from bench.vendor_common import interleaved_medians

log = logging.getLogger("model_bench.resnet")


class TunehubConv2d(torch.nn.Module):
    """Stands in for a groups=1 ``nn.Conv2d`` of square stride/padding/dilation."""

    def __init__(self, conv: torch.nn.Conv2d, lib: Any) -> None:
        super().__init__()
        self.conv, self.lib = conv, lib

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        y = self.lib.conv2d(x, c.weight, c.stride[0], c.padding[0], c.dilation[0])
        return y if c.bias is None else y + c.bias.view(1, -1, 1, 1)


def resnet50_convs(batch: int, image: int = 224) -> list[dict[str, int]]:
    """The distinct convolutions of torchvision's ResNet-50 (v1.5: the stride on the 3x3) at
    ``batch`` as tunehub conv2d problems, in network order (listed without torchvision, for
    precompiling on a machine that has none)."""
    convs: list[dict[str, int]] = []

    def add(h: int, c: int, k: int, r: int, stride: int = 1) -> None:
        conv = {"n": batch, "h": h, "w": h, "c": c, "k": k, "r": r, "s": r}
        conv.update({"stride": stride, "pad": r // 2, "dilation": 1})
        if conv not in convs:
            convs.append(conv)

    add(image, 3, 64, 7, 2)
    size, channels = image // 4, 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            s = stride if block == 0 else 1
            add(size, channels, width, 1)
            add(size, width, width, 3, s)
            if block == 0:
                add(size, channels, width * 4, 1, s)  # the downsample path
                size //= s
            add(size, width, width * 4, 1)
            channels = width * 4
    return convs


def _swap_convs(module: torch.nn.Module, lib: Any) -> int:
    swapped = 0
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Conv2d) and child.groups == 1:
            setattr(module, name, TunehubConv2d(child, lib))
            swapped += 1
        else:
            swapped += _swap_convs(child, lib)
    return swapped


def _models() -> tuple[torch.nn.Module, torch.nn.Module, int]:
    import copy

    import torchvision

    torch.manual_seed(0)
    eager = torchvision.models.resnet50(weights=None).eval().half().cuda()
    eager = eager.to(memory_format=torch.channels_last)
    from service.integrations import torch as tunehub_torch

    tuned = copy.deepcopy(eager)
    swapped = _swap_convs(tuned, tunehub_torch)
    return eager, tuned, swapped


def cmd_resnet(args: argparse.Namespace, *, record: bool) -> int:
    from service.integrations import torch as tunehub_torch

    torch.backends.cudnn.benchmark = False  # cuDNN's heuristic default, as a user gets it
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    eager, tuned, swapped = _models()
    batches = [int(b) for b in args.batches.split(",") if b]
    if record:
        with torch.no_grad(), tunehub_torch.record(args.shapes):
            for batch in batches:
                x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
                tuned(x.to(memory_format=torch.channels_last))
        torch.cuda.synchronize()
        print(f"recorded ResNet-50 shapes to {args.shapes}")
        return 0
    started = time.monotonic()
    rows = []
    with torch.no_grad():
        for batch in batches:
            x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
            x = x.to(memory_format=torch.channels_last)
            reference = eager(x).float()
            got = tuned(x).float()
            error = float((got - reference).norm() / reference.norm())
            row: dict[str, Any] = {"batch": batch, "rel_error_vs_cudnn": error, "arms": {}}
            runtime = Runtime("cuda")
            replays = {
                "cudnn": runtime.capture(functools.partial(eager, x)),
                "tunehub": runtime.capture(functools.partial(tuned, x)),
            }
            medians = interleaved_medians(
                {name: replay_timer(runtime, r, args.replays) for name, r in replays.items()},
                row,
                rounds=args.rounds,
            )
            for name, us in medians.items():
                row["arms"][name] = {"step_us": round(us, 1), "images_per_s": batch * 1e6 / us}
            if "cudnn" in medians and "tunehub" in medians:
                row["tunehub_vs_cudnn"] = medians["cudnn"] / medians["tunehub"]
            rows.append(row)
            log.info("resnet50 batch %d: %s", batch, row)
    report = {
        "model": "ResNet-50 (torchvision, random weights)",
        "dtype": "f16",
        "memory_format": "channels_last",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "convs_through_tunehub": swapped,
        "rows": rows,
        "tunehub": tunehub_torch.stats().to_dict(),
        "seconds": round(time.monotonic() - started, 1),
    }
    path = out / f"resnet-{args.label}.json"
    path.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {path}")
    return 0


__all__ = ["cmd_resnet", "TunehubConv2d", "resnet50_convs"]
