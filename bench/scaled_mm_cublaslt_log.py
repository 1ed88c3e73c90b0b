"""What ``torch._scaled_mm`` asks cuBLASLt for: runs it once per shape (e4m3 inputs, per-tensor
scales of 1, bf16 out) under cuBLASLt's API log and prints each heuristic query's workspace limit
and the algorithm each matmul ran, for comparing with a tunehub winner's attributes.

    python3 bench/scaled_mm_cublaslt_log.py --out $OUT/torch-scaled-mm-cublaslt-log.txt \
        32,4608,3584 8,4608,3584
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

#: the log lines kept: heuristic queries (their preference) and matmul calls (their algorithm)
KEPT = re.compile(r"\[(cublasLtMatmulAlgoGetHeuristic|cublasLtMatmul)\]")
#: the timestamp, library and pid prefix of each log line
PREFIX = re.compile(r"^\[[^]]*\]\[cublasLt\]\[\d+\]")


def shape(text: str) -> tuple[int, int, int]:
    try:
        m, n, k = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not m,n,k") from None
    if min(m, n, k) < 1 or k % 16:
        raise argparse.ArgumentTypeError(f"{text!r}: m, n, k must be positive, k % 16 == 0")
    return m, n, k


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", type=shape, help="m,n,k")
    parser.add_argument("--out", type=Path, required=True, help="the filtered log")
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="lt-log-"))
    # cuBLASLt reads these when it loads: before torch is imported
    os.environ["CUBLASLT_LOG_LEVEL"] = "5"
    os.environ["CUBLASLT_LOG_FILE"] = str(log_dir / "lt-%i.log")
    import torch

    one = torch.tensor(1.0, device="cuda")
    lines = [f"# torch {torch.__version__} on {torch.cuda.get_device_name()}"]
    for m, n, k in args.shapes:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        lines.append(f"# shape m={m} n={n} k={k}")
    for log in sorted(log_dir.glob("lt-*.log")):
        kept = [line for line in log.read_text().splitlines() if KEPT.search(line)]
        lines += [PREFIX.sub("", line) for line in kept]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} lines to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
