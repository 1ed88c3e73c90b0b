"""Which cuBLASLt algorithms beyond the heuristic's list a GEMM tuning job tries, in what order.

Discovery answers with the heuristic's algorithms (``"source": "heuristic"``) and, after them,
every configuration it built from ``cublasLtMatmulAlgoGetIds`` and the algorithms' capabilities
that ``cublasLtMatmulAlgoCheck`` accepted (``"source": "enumerated"``): variations of each
heuristic pick (split-K 1/2/4/8 with a reduction scheme, CTA swizzle flipped, other custom
options) and the tile x stages x cluster shape grid of every algorithm id. Those are hundreds;
:func:`rank_extras` keeps ``EXTRA_ALGOS`` of them so tuning cost stays bounded:

- kinship to the heuristic's picks (:func:`kinship`): a *variation* shares a pick's kernel body
  (algorithm, tile, stages, inner and cluster shape) and changes only its knobs; other
  candidates share a pick's algorithm and tile, or its algorithm, or nothing;
- the fill of the last wave (:func:`wave_fill`, from cuBLASLt's ``wavesCount``): 2.0 waves
  keep every SM busy to the end, 1.1 waves leave most of them idle for the second;
- round-robin over the picks (and over algorithm ids), so one pick's knobs do not take every
  place.

The places are shared out (``SHARES``) between three streams: variations, other configs of the
picks' algorithms (closest kin first), and other algorithms; a stream with too few candidates
leaves its places to the others. The streams interleave in the ratio of what each gives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "EXTRA_ALGOS",
    "SHARES",
    "SOURCE_HEURISTIC",
    "SOURCE_ENUMERATED",
    "BODY",
    "kinship",
    "wave_fill",
    "rank_extras",
]

#: most enumerated algorithms a tuning job gets beside the heuristic's (after deduplication)
EXTRA_ALGOS = 24
#: of those, places for variations of a heuristic pick's knobs, for other configs of the picks'
#: algorithms (other tiles, stages, cluster shapes), and for other algorithms
SHARES = (14, 6, 4)
#: ``source`` of a discovery item: from cublasLtMatmulAlgoGetHeuristic ...
SOURCE_HEURISTIC = "heuristic"
#: ... or built from cublasLtMatmulAlgoGetIds / the capabilities and checked
SOURCE_ENUMERATED = "enumerated"
#: the attributes that make the kernel itself; the others (split-K, reduction scheme, swizzle,
#: custom option) are knobs of the same kernel
BODY = ("algo", "tile", "stages", "inner_shape", "cluster_shape")

#: kinship tiers (lower is closer to the heuristic's picks)
_VARIATION, _SAME_TILE, _SAME_ALGO, _STRANGER = range(4)
#: the tiers of each stream that ``SHARES`` shares out
_STREAM_TIERS = ((_VARIATION,), (_SAME_TILE, _SAME_ALGO), (_STRANGER,))

Item = Mapping[str, Any]


def wave_fill(waves: Any) -> float:
    """How full cuBLASLt's last wave is, 0..1: ``waves / ceil(waves)`` (0 when unknown)."""
    if isinstance(waves, bool) or not isinstance(waves, int | float):
        return 0.0
    if not math.isfinite(waves) or waves <= 0:
        return 0.0
    return float(waves) / math.ceil(waves)


def kinship(item: Item, heuristic: Sequence[Item]) -> tuple[int, int]:
    """(tier, group) of an enumerated ``item``: tier 0 a variation of heuristic pick ``group``,
    1 the same algorithm and tile as pick ``group``, 2 the same algorithm, 3 none of the picks'
    algorithms (``group`` is then the algorithm id)."""
    tests = (
        (_VARIATION, BODY),
        (_SAME_TILE, ("algo", "tile")),
        (_SAME_ALGO, ("algo",)),
    )
    for tier, keys in tests:
        for index, pick in enumerate(heuristic):
            if all(item.get(k) == pick.get(k) for k in keys):
                return tier, index
    algo = item.get("algo")
    return _STRANGER, algo if isinstance(algo, int) else -1


def _stream(candidates: list[tuple[int, Item]], heuristic: Sequence[Item]) -> list[Item]:
    """``candidates`` (position, item) by tier, then round-robin over groups, best fill first."""
    keyed: dict[tuple[int, int], list[tuple[float, int, Item]]] = {}
    for position, item in candidates:
        keyed.setdefault(kinship(item, heuristic), []).append(
            (-wave_fill(item.get("waves")), position, item)
        )
    ranked: list[tuple[int, int, int, float, int, Item]] = []
    for (tier, group), members in keyed.items():
        for round_no, (fill, position, item) in enumerate(sorted(members, key=lambda m: m[:2])):
            ranked.append((tier, round_no, group, fill, position, item))
    ranked.sort(key=lambda r: r[:5])
    return [r[5] for r in ranked]


def _takes(lengths: Sequence[int], shares: Sequence[int], cap: int) -> list[int]:
    """How many of each stream: its share (in order, while the cap lasts), then the places a
    short stream leaves go to the others in order."""
    takes: list[int] = []
    for length, share in zip(lengths, shares, strict=True):
        takes.append(max(0, min(length, share, cap - sum(takes))))
    for i, length in enumerate(lengths):
        takes[i] += max(0, min(length - takes[i], cap - sum(takes)))
    return takes


def rank_extras(
    heuristic: Sequence[Item],
    extras: Sequence[Item],
    cap: int = EXTRA_ALGOS,
    shares: Sequence[int] = SHARES,
) -> list[Item]:
    """At most ``cap`` of ``extras`` (already distinct, none of them a heuristic pick) in the
    order a capped search should try them (see the module doc). ``shares``: places for the
    variations, the picks' algorithms' other configs and the other algorithms."""
    if cap <= 0 or not extras:
        return []
    split: list[list[tuple[int, Item]]] = [[] for _ in _STREAM_TIERS]
    for position, item in enumerate(extras):
        tier, _ = kinship(item, heuristic)
        stream = next(i for i, tiers in enumerate(_STREAM_TIERS) if tier in tiers)
        split[stream].append((position, item))
    streams = [_stream(candidates, heuristic) for candidates in split]
    takes = _takes([len(s) for s in streams], shares, cap)
    # interleaved in the ratio of what each stream gives: its j-th at j / its count
    order = [
        (j / take, index, item)
        for index, (stream, take) in enumerate(zip(streams, takes, strict=True))
        for j, item in enumerate(stream[:take])
    ]
    order.sort(key=lambda o: o[:2])
    return [item for _, _, item in order]
