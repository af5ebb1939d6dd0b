"""A small inference engine over TinyDecoder that offloads KV through kvtier's Python module.

The engine has the two halves of a real one, and each calls its side of kvtier every step:

* the scheduler (EngineScheduler) admits requests, allocates their KV blocks from a block pool,
  asks kvtier.Scheduler how much of each prompt the host cache holds
  (get_num_new_matched_tokens), tells it what it allocated (update_state_after_alloc), builds
  the step's metadata (build_step_metadata), and applies every rank's verdicts
  (update_from_worker_output): a finished load says how many tokens the request now has, and a
  failed one makes it recompute from there (F4); a fail-stop raises kvtier.FailStop (F7);
* the worker (EngineWorker, one per rank) holds the paged KV cache as torch tensors registered
  with kvtier.Worker and runs start_load, the forward pass, queue_stores and take_output.

Requests are whole-prompt prefilled in one step, then decoded one token per step, batched.
With ``kvtier_config=None`` the engine runs the same steps without kvtier: the reference its
outputs are compared with, bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

import kvtier

from .model import ForwardInput, ModelConfig, TinyDecoder


def kvtier_config_for(
    model: ModelConfig,
    block_size: int,
    base: Optional[kvtier.Config] = None,
    overrides: Sequence[str] = (),
) -> kvtier.Config:
    """`base` (default: kvtier's defaults with a 16 MiB host cache) with the layout section the
    model's KV cache has, then `overrides`."""
    base = base if base is not None else kvtier.Config().with_overrides(["cache.host_bytes=16MiB"])
    return base.with_overrides(
        [
            "layout.device_layout=per_layer",
            f"layout.layers={model.layers}",
            f"layout.kv_heads={model.kv_heads}",
            f"layout.head_dim={model.head_dim}",
            "layout.dtype_bytes=4",
            f"layout.block_size={block_size}",
            *overrides,
        ]
    )


@dataclasses.dataclass
class Request:
    id: str
    prompt: List[int]
    max_tokens: int
    arrival: float
    tokens: List[int] = dataclasses.field(default_factory=list)  # prompt, then generated
    generated: List[int] = dataclasses.field(default_factory=list)
    logits: List[torch.Tensor] = dataclasses.field(default_factory=list)  # per generated token
    blocks: List[int] = dataclasses.field(default_factory=list)
    num_computed: int = 0
    state: str = "waiting"  # waiting | loading | running | finished
    first_token_at: Optional[float] = None
    loaded_tokens: int = 0

    @property
    def ttft(self) -> Optional[float]:
        return None if self.first_token_at is None else self.first_token_at - self.arrival


@dataclasses.dataclass
class EngineStats:
    steps: int = 0
    computed_tokens: int = 0  # tokens the forward passes computed
    loaded_tokens: int = 0  # tokens whose KV came from kvtier
    failed_loads: int = 0
    deferred_lookups: int = 0  # ask_later answers
    connector_calls: int = 0
    connector_seconds: float = 0.0  # time inside kvtier's Python calls


class EngineWorker:
    """One rank: the paged KV cache (one torch tensor per layer), the model, kvtier.Worker."""

    def __init__(self, model: TinyDecoder, num_blocks: int, block_size: int,
                 config: Optional[kvtier.Config], rank: int = 0, world_size: int = 1):
        self.model = model
        shape = model.kv_cache_shape(num_blocks, block_size)
        self.connector = None
        if config is not None and config.cache_mode == "server":
            # kvtierd copies through shared memory the worker allocates: the KV caches are
            # tensors over it.
            self.connector = kvtier.Worker(config, None, rank=rank, world_size=world_size,
                                           num_blocks=num_blocks)
            self.kv_caches = [torch.frombuffer(m, dtype=torch.float32).view(shape)
                              for m in self.connector.kv_caches]
            return
        self.kv_caches = [torch.zeros(shape, dtype=torch.float32)
                          for _ in range(model.config.layers)]
        if config is not None:
            self.connector = kvtier.Worker(config, self.kv_caches, rank=rank,
                                           world_size=world_size)

    def execute(self, metadata, batch: Sequence[ForwardInput], timed: Callable):
        """One step: start_load, the forward pass, queue_stores, take_output."""
        if self.connector is not None:
            timed(self.connector.start_load, metadata)
        logits = self.model.forward(batch, self.kv_caches) if batch else None
        outputs = []
        if self.connector is not None:
            timed(self.connector.queue_stores, metadata)
            outputs.append(timed(self.connector.take_output))
        return logits, outputs

    def drain(self):
        if self.connector is not None:
            self.connector.drain()

    def close(self):
        if self.connector is not None:
            self.connector.close()


class Engine:
    """The engine: its scheduler loop and one in-process worker (rank 0)."""

    def __init__(
        self,
        model: Optional[TinyDecoder] = None,
        *,
        num_blocks: int = 512,
        block_size: int = 4,
        kvtier_config: Optional[kvtier.Config] = None,
        model_name: str = "torch-tiny",
        world_size: int = 1,
        run_dir: Optional[str] = None,
    ):
        """`world_size` > 1: one rank process each (tp.py), gloo for the all-reduce; `run_dir`
        (a fresh directory) holds their rendezvous file."""
        self.model = model if model is not None else TinyDecoder()
        self.block_size = block_size
        self.config = kvtier_config
        if kvtier_config is not None and not kvtier_config.connector_enabled:
            self.config = None
        if self.config is not None:
            # kvtier's layout is what one rank holds: its share of the KV heads.
            self.config = self.config.with_overrides(
                [f"layout.kv_heads={self.model.config.kv_heads // world_size}"])
        self.connector = (
            kvtier.Scheduler(self.config, model=model_name, world_size=world_size)
            if self.config is not None
            else None
        )
        if world_size == 1:
            self.worker = EngineWorker(self.model, num_blocks, block_size, self.config)
        else:
            from .tp import ProcessWorkers

            self.worker = ProcessWorkers(self.model.config, num_blocks, block_size, self.config,
                                         world_size, run_dir)
        self.free_blocks = list(range(num_blocks))
        self.requests: Dict[str, Request] = {}
        self.waiting: List[Request] = []
        self.held: Dict[str, List[int]] = {}  # finished requests' blocks kvtier still reads
        self.stats = EngineStats()
        self._step = 0

    # -- the engine's API -------------------------------------------------------------------

    def add_request(self, request_id: str, prompt: Sequence[int], max_tokens: int) -> None:
        r = Request(request_id, list(prompt), max_tokens, time.perf_counter())
        r.tokens = list(prompt)
        self.requests[request_id] = r
        self.waiting.append(r)

    def has_work(self) -> bool:
        if any(r.state != "finished" for r in self.requests.values()) or self.held:
            return True
        return self.connector is not None and self.connector.counters()["jobs_in_flight"] > 0

    def run(self, max_steps: int = 100000) -> Dict[str, Request]:
        """Steps until every request finished and every transfer ended."""
        for _ in range(max_steps):
            if not self.has_work():
                return self.requests
            self.step()
        raise RuntimeError(f"engine: not done after {max_steps} steps")

    def close(self) -> None:
        self.worker.close()

    # -- one step ---------------------------------------------------------------------------

    def _timed(self, fn, *args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.stats.connector_calls += 1
            self.stats.connector_seconds += time.perf_counter() - t

    def _blocks_for(self, tokens: int) -> int:
        return (tokens + self.block_size - 1) // self.block_size

    def _admit(self) -> None:
        for r in list(self.waiting):
            need = self._blocks_for(len(r.prompt) + r.max_tokens)
            if need > len(self.free_blocks):
                break  # first come, first served
            matched = 0
            if self.connector is not None:
                m = self._timed(self.connector.get_num_new_matched_tokens, r.id, r.tokens, 0)
                if m.ask_later:
                    self.stats.deferred_lookups += 1
                    continue
                matched = m.tokens
            r.blocks = [self.free_blocks.pop() for _ in range(need)]
            if self.connector is not None:
                self._timed(self.connector.update_state_after_alloc, r.id, r.blocks, matched)
            r.state = "loading" if matched else "running"
            r.loaded_tokens = matched
            self.waiting.remove(r)

    def step(self) -> None:
        self._step += 1
        self.stats.steps += 1
        self._admit()
        running = [r for r in self.requests.values() if r.state == "running"]
        batch = [ForwardInput(r.tokens, r.num_computed, len(r.tokens), r.blocks) for r in running]
        metadata = None
        if self.connector is not None:
            metadata = self._timed(
                self.connector.build_step_metadata,
                self._step,
                [
                    kvtier.ScheduledRequest(r.id, r.tokens, len(r.prompt), [], len(r.tokens))
                    for r in running
                ],
            )
        logits, outputs = self.worker.execute(metadata, batch, self._timed)
        now = time.perf_counter()
        for r, lg in zip(running, logits if logits is not None else []):
            self.stats.computed_tokens += len(r.tokens) - r.num_computed
            r.num_computed = len(r.tokens)
            token = int(torch.argmax(lg))
            r.tokens.append(token)
            r.generated.append(token)
            r.logits.append(lg.clone())
            if r.first_token_at is None:
                r.first_token_at = now
            if len(r.generated) == r.max_tokens:
                self._finish(r)
        if self.connector is not None:
            outcome = self._timed(self.connector.update_from_worker_output, outputs)
            for done in outcome.loads:
                r = self.requests[done.request]
                # F4: a failed load's request recomputes from the first block it lacks.
                r.num_computed = done.num_computed
                self.stats.loaded_tokens += done.num_computed
                if done.outcome != "completed":
                    self.stats.failed_loads += 1
                r.state = "running"
            for rid in outcome.released:
                self.free_blocks.extend(self.held.pop(rid, []))
            if not batch:
                # Nothing to compute: let the transfers the requests wait for end.
                self._timed(self.worker.drain)

    def _finish(self, r: Request) -> None:
        r.state = "finished"
        if self.connector is not None and self._timed(self.connector.request_finished, r.id):
            self.held[r.id] = r.blocks  # a store still reads them
        else:
            self.free_blocks.extend(r.blocks)
        r.blocks = []
