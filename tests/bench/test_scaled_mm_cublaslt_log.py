"""bench/scaled_mm_cublaslt_log.py without a GPU: its shape argument and the log filter."""

from __future__ import annotations

import argparse

import pytest

from bench.scaled_mm_cublaslt_log import KEPT, PREFIX, shape


def test_shape_parses_and_refuses() -> None:
    assert shape("32,4608,3584") == (32, 4608, 3584)
    for bad in ("32,4608", "a,b,c", "0,16,16", "8,16,20"):
        with pytest.raises(argparse.ArgumentTypeError):
            shape(bad)


def test_filter_keeps_queries_and_matmuls_without_prefix() -> None:
    query = ("[2026-12-07 01:12:48][cublasLt][486][Api][cublasLtMatmulAlgoGetHeuristic] "
             "preference=[maxWavesCount=0.0 maxWorkspaceSizeinBytes=1048576]")  # fmt: skip
    setter = "[2026-12-07 01:12:48][cublasLt][486][Api][cublasLtMatmulDescSetAttribute] attr=X"
    assert KEPT.search(query) and not KEPT.search(setter)
    assert PREFIX.sub("", query).startswith("[Api][cublasLtMatmulAlgoGetHeuristic]")
