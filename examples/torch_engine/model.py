"""A small decoder-only transformer in PyTorch (CPU, float32) with a paged KV cache.

Deterministic by construction: the weights come from a seeded generator, and every result for
a token depends only on that token's inputs, never on what else is in the batch or how many
tokens the step computes. The linear layers are row-by-row matrix products (checked by
tests/test_model.py); every other reduction (RMS norm, attention scores, softmax denominator,
attention-weighted sum) is a sequential ``torch.cumsum`` read at the last valid element, so a
query's attention covers exactly its own keys, in order, however many masked keys follow them.
This is what makes "KV loaded from kvtier" and "KV recomputed" give bit-identical outputs.

KV cache: one tensor per layer, ``[num_blocks, 2, block_size, kv_heads, head_dim]`` (kvtier's
per-layer device layout); a request's block table maps its token positions to blocks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import torch


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab: int = 256
    hidden: int = 64
    layers: int = 2
    q_heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    mlp: int = 128
    max_positions: int = 4096
    seed: int = 1


@dataclasses.dataclass
class ForwardInput:
    """One request's share of a step: tokens[start:] are computed at positions start..,
    with keys [0, start) already in its blocks."""

    tokens: Sequence[int]  # every token of the request known so far
    start: int  # first position this step computes
    end: int  # one past the last position this step computes
    block_table: Sequence[int]


def _seq_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The sum over `dim`, added strictly in order (cumsum), so the result for an element does
    not depend on the sizes of the other dimensions."""
    return torch.cumsum(x, dim=dim).select(dim, -1)


class TinyDecoder:
    """The model, or (with world_size > 1) one tensor-parallel rank's share of it: its KV heads,
    its query heads and its rows of the attention output projection; the attention output is
    summed across ranks by `all_reduce` (torch.distributed's, for instance). The MLP is
    replicated. Every rank draws the same full weights from the seed and keeps its slice."""

    def __init__(self, config: ModelConfig = ModelConfig(), rank: int = 0, world_size: int = 1,
                 all_reduce=None):
        self.config = c = config
        assert c.q_heads % c.kv_heads == 0 and c.kv_heads % world_size == 0
        assert world_size == 1 or all_reduce is not None
        self.rank, self.world_size, self.all_reduce = rank, world_size, all_reduce
        self.kv_heads = c.kv_heads // world_size  # this rank's
        self.q_heads = c.q_heads // world_size
        g = torch.Generator().manual_seed(c.seed)

        def w(*shape, scale):
            return torch.randn(*shape, generator=g, dtype=torch.float32) * scale

        h, d = c.hidden, c.head_dim
        self.embed = w(c.vocab, h, scale=1.0)
        self.pos = w(c.max_positions, h, scale=0.1)
        self.layers = []
        for _ in range(c.layers):
            self.layers.append(
                {
                    "wq": w(h, c.q_heads * d, scale=1 / math.sqrt(h)),
                    "wk": w(h, c.kv_heads * d, scale=1 / math.sqrt(h)),
                    "wv": w(h, c.kv_heads * d, scale=1 / math.sqrt(h)),
                    "wo": w(c.q_heads * d, h, scale=1 / math.sqrt(c.q_heads * d)),
                    "w1": w(h, c.mlp, scale=1 / math.sqrt(h)),
                    "w2": w(c.mlp, h, scale=1 / math.sqrt(c.mlp)),
                }
            )
        self.unembed = w(h, c.vocab, scale=1 / math.sqrt(h))
        if world_size > 1:
            q0, k0 = rank * self.q_heads * d, rank * self.kv_heads * d
            for layer in self.layers:
                layer["wq"] = layer["wq"][:, q0 : q0 + self.q_heads * d].contiguous()
                layer["wk"] = layer["wk"][:, k0 : k0 + self.kv_heads * d].contiguous()
                layer["wv"] = layer["wv"][:, k0 : k0 + self.kv_heads * d].contiguous()
                layer["wo"] = layer["wo"][q0 : q0 + self.q_heads * d, :].contiguous()

    def kv_cache_shape(self, num_blocks: int, block_size: int) -> tuple:
        return (num_blocks, 2, block_size, self.kv_heads, self.config.head_dim)

    @staticmethod
    def _norm(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(_seq_sum(x * x, -1).unsqueeze(-1) / x.shape[-1] + 1e-5)

    @torch.no_grad()
    def forward(self, batch: Sequence[ForwardInput], kv_caches: Sequence[torch.Tensor]) -> torch.Tensor:
        """Computes every batch entry's tokens [start, end), writing their K and V into
        `kv_caches` (one tensor per layer) through each entry's block table. Returns the logits
        of each entry's last computed token, [len(batch), vocab]."""
        c = self.config
        block_size = kv_caches[0].shape[2]
        ids, positions, blocks, offsets = [], [], [], []
        for e in batch:
            table = torch.as_tensor(list(e.block_table), dtype=torch.long)
            pos = torch.arange(e.start, e.end, dtype=torch.long)
            ids.append(torch.as_tensor(list(e.tokens[e.start : e.end]), dtype=torch.long))
            positions.append(pos)
            blocks.append(table[pos // block_size])
            offsets.append(pos % block_size)
        ids, positions = torch.cat(ids), torch.cat(positions)
        blocks, offsets = torch.cat(blocks), torch.cat(offsets)
        x = self.embed[ids] + self.pos[positions]
        for layer, kv in zip(self.layers, kv_caches):
            hn = self._norm(x)
            q = (hn @ layer["wq"]).view(-1, self.q_heads, c.head_dim)
            k = (hn @ layer["wk"]).view(-1, self.kv_heads, c.head_dim)
            v = (hn @ layer["wv"]).view(-1, self.kv_heads, c.head_dim)
            kv[blocks, 0, offsets] = k
            kv[blocks, 1, offsets] = v
            outs, row = [], 0
            for e in batch:
                n = e.end - e.start
                outs.append(self._attend(q[row : row + n], kv, e, block_size))
                row += n
            attn = torch.cat(outs) @ layer["wo"]
            if self.world_size > 1:
                self.all_reduce(attn)  # in place: the sum over every rank's heads
            x = x + attn
            x = x + torch.relu(self._norm(x) @ layer["w1"]) @ layer["w2"]
        last = torch.cumsum(torch.tensor([e.end - e.start for e in batch]), 0) - 1
        return self._norm(x[last]) @ self.unembed

    def _attend(self, q: torch.Tensor, kv: torch.Tensor, e: ForwardInput, block_size: int):
        c = self.config
        length = e.end  # keys [0, end): the request's context once this step wrote its KV
        nblocks = (length + block_size - 1) // block_size
        table = torch.as_tensor(list(e.block_table[:nblocks]), dtype=torch.long)
        keys = kv[table, 0].reshape(-1, self.kv_heads, c.head_dim)[:length]
        values = kv[table, 1].reshape(-1, self.kv_heads, c.head_dim)[:length]
        group = self.q_heads // self.kv_heads
        keys = keys.repeat_interleave(group, dim=1)  # [L, Hq, D]
        values = values.repeat_interleave(group, dim=1)
        # scores[t, j, h] = q[t, h] . k[j, h]
        scores = _seq_sum(q[:, None, :, :] * keys[None, :, :, :], -1) / math.sqrt(c.head_dim)
        qpos = torch.arange(e.start, e.end)[:, None]
        future = torch.arange(length)[None, :] > qpos  # [t, L]
        scores = scores.masked_fill(future[:, :, None], float("-inf"))
        weights = torch.exp(scores - scores.max(dim=1, keepdim=True).values)  # masked: 0
        denom = _seq_sum(weights, 1)  # [t, Hq]
        out = _seq_sum(weights[:, :, :, None] * values[None, :, :, :], 1)  # [t, Hq, D]
        return (out / denom[:, :, None]).reshape(q.shape[0], -1)
