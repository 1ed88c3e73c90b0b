"""Token buckets of mixture-of-experts grouped GEMMs (issue 26 item 2).

A grouped GEMM multiplies, for each expert ``e``, the ``m_e`` tokens routed to it by that
expert's weight: ``C_e[m_e, n] = A_e[m_e, k] @ W_e[n, k]^T``. The exact token counts change with
every batch, so tunehub tunes and answers per *bucket* of their distribution:

- ``tokens``: the total ``sum(m_e)`` rounded up to a power of two;
- ``skew``: ``max(m_e) / mean(m_e)`` (mean = total / experts), rounded up to one of
  :data:`SKEWS` (1, 2, 4, 8; anything above 8 is bucket 8).

:func:`bucket_of` maps a real token list to its bucket; a lookup with that bucket is answered
exactly when tuned, else by the nearest-shape rule across buckets, as for every other op.

The benchmark input of a bucket is :func:`token_counts` (deterministic, no random draw): expert 0
takes ``cap = min(tokens, ceil(skew * tokens / experts))`` tokens, the rest are spread as evenly
as integers allow over experts 1..E-1 (the first ones take the remainder), so the total is exactly
``tokens`` and its skew is ``cap / (tokens / experts)``: the bucket's exactly when
``skew * tokens`` is a multiple of ``experts`` (any power-of-two bucket with
``tokens >= experts * skew`` and power-of-two experts), else rounded up by ``ceil``. With fewer
tokens than experts (decode) the skew is at least ``experts / tokens`` whatever the bucket, and
experts get zero tokens, as in real routing.

The kernel ABI (``tuner.abi``) passes the counts of a call after the five dims.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tuner.errors import InvalidRequestError

__all__ = ["SKEWS", "MAX_EXPERTS", "skew_bucket", "tokens_bucket", "bucket_of", "token_counts"]

#: the skew buckets a problem may name
SKEWS: tuple[int, ...] = (1, 2, 4, 8)
#: most experts of one grouped GEMM (the kernels hold per-expert offsets in kernel parameters)
MAX_EXPERTS = 256


def tokens_bucket(total: int) -> int:
    """``total`` rounded up to a power of two (1 -> 1, 5 -> 8, 8 -> 8)."""
    if total < 1:
        raise InvalidRequestError("tokens", f"must be >= 1, got {total}")
    return 1 << (total - 1).bit_length()


def skew_bucket(skew: float) -> int:
    """The smallest of :data:`SKEWS` at or above ``skew`` (8 for anything above 8)."""
    for bucket in SKEWS:
        if skew <= bucket * (1 + 1e-9):
            return bucket
    return SKEWS[-1]


def bucket_of(counts: Sequence[int]) -> tuple[int, int]:
    """(tokens, skew) bucket of a batch's tokens per expert; ``len(counts)`` is the expert count."""
    if not counts:
        raise InvalidRequestError("experts", "needs at least one expert")
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts):
        raise InvalidRequestError("tokens", "tokens per expert must be integers >= 0")
    total = sum(counts)
    if total < 1:
        raise InvalidRequestError("tokens", "the batch routes no token")
    return tokens_bucket(total), skew_bucket(max(counts) * len(counts) / total)


def token_counts(experts: int, tokens: int, skew: int) -> list[int]:
    """The deterministic tokens per expert of a bucket (module docstring); sums to ``tokens``."""
    cap = min(tokens, max(1, math.ceil(skew * tokens / experts)))
    if experts == 1:
        return [tokens]
    rest = tokens - cap
    base, extra = divmod(rest, experts - 1)
    return [cap] + [base + (1 if e < extra else 0) for e in range(experts - 1)]
