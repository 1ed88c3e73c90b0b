"""A decoder-only transformer with public 7B-class dims, random weights, and pluggable ops.

    dims = MISTRAL_7B                        # or QWEN25_7B, or replace(MISTRAL_7B, layers=2)
    model = Decoder(dims, ops=TorchOps(), dtype=torch.float16, device="cuda")
    cache = model.new_cache(batch=8, length=1024)
    probs = model.decode_step(tokens, position, cache)   # one token per sequence
    hidden = model.prefill(tokens)                        # no cache: the prompt's forward

Not a test and not part of the service: bench/model_bench.py times it in several arms (torch
eager, TunableOp, torch.compile, tunehub's ops). Every arm runs the same model with the same
weights; only ``ops`` (linear, rms_norm, softmax) changes. Attention is torch SDPA in every arm.
The norms and the MLP activation are written as users write them (Hugging Face's f32-upcast
RMSNorm, SiLU times up), so the torch arms pay what users pay.

The projections are fused as serving stacks fuse them (q, k and v in one [6144, 4096] weight
for Mistral-7B; gate and up in one [28672, 4096]): those are the GEMM shapes of the issue.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

__all__ = [
    "DecoderDims",
    "MISTRAL_7B",
    "QWEN25_7B",
    "TINY",
    "Ops",
    "TorchOps",
    "Decoder",
    "KVCache",
]


@dataclass(frozen=True)
class DecoderDims:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    eps: float
    rope_theta: float

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def qkv_out(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    def gemm_shapes(self) -> dict[str, tuple[int, int]]:
        """(n, k) of every projection: the weights a decode step streams."""
        return {
            "qkv": (self.qkv_out, self.hidden),
            "o": (self.hidden, self.hidden),
            "gate_up": (2 * self.intermediate, self.hidden),
            "down": (self.hidden, self.intermediate),
            "lm_head": (self.vocab, self.hidden),
        }

    def weight_bytes(self, element_size: int) -> int:
        per_layer = sum(n * k for name, (n, k) in self.gemm_shapes().items() if name != "lm_head")
        n, k = self.gemm_shapes()["lm_head"]
        norms = (2 * self.layers + 1) * self.hidden
        return element_size * (self.layers * per_layer + n * k + norms)


#: mistralai/Mistral-7B-v0.1 config.json
MISTRAL_7B = DecoderDims(
    name="Mistral-7B-v0.1",
    hidden=4096,
    intermediate=14336,
    layers=32,
    heads=32,
    kv_heads=8,
    vocab=32000,
    eps=1e-5,
    rope_theta=10000.0,
)
#: Qwen/Qwen2.5-7B config.json (its q/k/v biases are left out: they do not change the GEMMs)
QWEN25_7B = DecoderDims(
    name="Qwen2.5-7B",
    hidden=3584,
    intermediate=18944,
    layers=28,
    heads=28,
    kv_heads=4,
    vocab=152064,
    eps=1e-6,
    rope_theta=1000000.0,
)


#: a toy of the same structure, for smoke runs of the bench's flow on a CPU
TINY = DecoderDims(
    name="tiny",
    hidden=256,
    intermediate=512,
    layers=2,
    heads=4,
    kv_heads=2,
    vocab=1000,
    eps=1e-5,
    rope_theta=10000.0,
)


class Ops(Protocol):
    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor: ...

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor: ...

    def softmax(self, x: torch.Tensor) -> torch.Tensor: ...


class TorchOps:
    """What a user writes: F.linear (cuBLAS), Hugging Face's RMSNorm, torch.softmax."""

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.linear(x, weight)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        dtype = x.dtype
        hidden = x.to(torch.float32)
        variance = hidden.pow(2).mean(-1, keepdim=True)
        hidden = hidden * torch.rsqrt(variance + eps)
        return weight * hidden.to(dtype)

    def softmax(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


@dataclass
class KVCache:
    keys: list[torch.Tensor]  # per layer [batch, kv_heads, length, head_dim]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[2])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Decoder:
    def __init__(
        self,
        dims: DecoderDims,
        ops: Ops,
        *,
        dtype: torch.dtype = torch.float16,
        device: str = "cuda",
        max_positions: int = 4096,
        seed: int = 0,
    ) -> None:
        self.dims, self.ops, self.dtype, self.device = dims, ops, dtype, device
        gen = torch.Generator(device=device).manual_seed(seed)

        def weight(*shape: int) -> torch.Tensor:
            # scaled so activations stay O(1) through every layer (random, never zeros)
            scale = 1.0 / math.sqrt(shape[-1])
            return (torch.randn(shape, generator=gen, device=device, dtype=dtype)) * scale

        def norm_weight() -> torch.Tensor:
            return 1.0 + 0.1 * torch.randn(dims.hidden, generator=gen, device=device, dtype=dtype)

        shapes = dims.gemm_shapes()
        self.embed = torch.randn(dims.vocab, dims.hidden, generator=gen, device=device, dtype=dtype)
        self.layers: list[dict[str, torch.Tensor]] = []
        for _ in range(dims.layers):
            self.layers.append(
                {
                    "ln1": norm_weight(),
                    "qkv": weight(*shapes["qkv"]),
                    "o": weight(*shapes["o"]),
                    "ln2": norm_weight(),
                    "gate_up": weight(*shapes["gate_up"]),
                    "down": weight(*shapes["down"]),
                }
            )
        self.final_norm = norm_weight()
        self.lm_head = weight(*shapes["lm_head"])
        inv_freq = 1.0 / (
            dims.rope_theta
            ** (
                torch.arange(0, dims.head_dim, 2, device=device, dtype=torch.float32)
                / dims.head_dim
            )
        )
        angles = torch.outer(
            torch.arange(max_positions, device=device, dtype=torch.float32), inv_freq
        )
        angles = torch.cat((angles, angles), dim=-1)
        self.cos = angles.cos().to(dtype)
        self.sin = angles.sin().to(dtype)
        #: the per-layer functions decode_step and prefill call (torch.compile replaces them)
        self.layer_fn = self.decode_layer
        self.prefill_layer_fn = self.prefill_layer
        self.profile_scopes = False

    def new_cache(self, batch: int, length: int) -> KVCache:
        d = self.dims
        shape = (batch, d.kv_heads, length, d.head_dim)
        gen = torch.Generator(device=self.device).manual_seed(1)

        def filled() -> torch.Tensor:
            return torch.randn(shape, generator=gen, device=self.device, dtype=self.dtype)

        return KVCache([filled() for _ in range(d.layers)], [filled() for _ in range(d.layers)])

    # -- pieces ----------------------------------------------------------------------------

    def _attention_inputs(
        self, x: torch.Tensor, layer: dict[str, torch.Tensor], positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        d = self.dims
        batch, tokens, _ = x.shape
        with self.scope("linear"):
            qkv = self.ops.linear(x, layer["qkv"])
        q, k, v = qkv.split(
            [d.heads * d.head_dim, d.kv_heads * d.head_dim, d.kv_heads * d.head_dim], -1
        )
        q = q.view(batch, tokens, d.heads, d.head_dim).transpose(1, 2)
        k = k.view(batch, tokens, d.kv_heads, d.head_dim).transpose(1, 2)
        v = v.view(batch, tokens, d.kv_heads, d.head_dim).transpose(1, 2)
        cos = self.cos[positions].unsqueeze(0).unsqueeze(0)  # [1, 1, tokens, head_dim]
        sin = self.sin[positions].unsqueeze(0).unsqueeze(0)
        with self.scope("rotary"):
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
        return q, k, v

    def _mlp(self, x: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        with self.scope("linear"):
            gate_up = self.ops.linear(x, layer["gate_up"])
        with self.scope("silu_mul"):
            gate, up = gate_up.chunk(2, dim=-1)
            act = F.silu(gate) * up
        with self.scope("linear"):
            return self.ops.linear(act, layer["down"])

    def _out(self, attn: torch.Tensor, layer: dict[str, torch.Tensor]) -> torch.Tensor:
        batch, _, tokens, _ = attn.shape
        merged = attn.transpose(1, 2).reshape(batch, tokens, self.dims.hidden)
        with self.scope("linear"):
            return self.ops.linear(merged, layer["o"])

    # -- steps -----------------------------------------------------------------------------

    def scope(self, name: str) -> Any:
        """A profiler range around one op class (only while ``profile_scopes`` is set)."""
        if not self.profile_scopes:
            return contextlib.nullcontext()
        return torch.profiler.record_function(name)

    def decode_layer(
        self,
        x: torch.Tensor,
        layer: dict[str, torch.Tensor],
        position: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """One layer of a decode step (the unit torch.compile compiles once for all layers)."""
        d = self.dims
        with self.scope("rms_norm"):
            h = self.ops.rms_norm(x, layer["ln1"], d.eps)
        q, k, v = self._attention_inputs(h, layer, position)
        with self.scope("attention"):
            keys.index_copy_(2, position, k)
            values.index_copy_(2, position, v)
            attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        x = x + self._out(attn, layer)
        with self.scope("rms_norm"):
            h = self.ops.rms_norm(x, layer["ln2"], d.eps)
        return x + self._mlp(h, layer)

    def decode_step(self, tokens: torch.Tensor, position: torch.Tensor, cache: KVCache) -> Any:
        """One new token per sequence at ``position`` (a 1-element int64 device tensor, so a
        captured graph replays for any position); returns the next-token probabilities."""
        x = self.embed[tokens]  # [batch, 1, hidden]
        valid = torch.arange(cache.length, device=self.device) <= position  # [length]
        mask = valid.view(1, 1, 1, cache.length)
        for index, layer in enumerate(self.layers):
            x = self.layer_fn(x, layer, position, cache.keys[index], cache.values[index], mask)
        return self._head(x)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        with self.scope("rms_norm"):
            h = self.ops.rms_norm(x, self.final_norm, self.dims.eps)
        with self.scope("linear"):
            logits = self.ops.linear(h, self.lm_head)
        with self.scope("softmax"):
            return self.ops.softmax(logits)

    def prefill_layer(
        self, x: torch.Tensor, layer: dict[str, torch.Tensor], positions: torch.Tensor
    ) -> torch.Tensor:
        d = self.dims
        with self.scope("rms_norm"):
            h = self.ops.rms_norm(x, layer["ln1"], d.eps)
        q, k, v = self._attention_inputs(h, layer, positions)
        with self.scope("attention"):
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self._out(attn, layer)
        with self.scope("rms_norm"):
            h = self.ops.rms_norm(x, layer["ln2"], d.eps)
        return x + self._mlp(h, layer)

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """The prompt's forward (causal attention, no cache); returns the last position's
        next-token probabilities."""
        x = self.embed[tokens]
        positions = torch.arange(tokens.shape[1], device=self.device)
        for layer in self.layers:
            x = self.prefill_layer_fn(x, layer, positions)
        return self._head(x[:, -1:])
