"""Shared fixtures: a small layout (2 layers, 1 KV head, head_dim 8, float32, 4-token blocks,
2-block chunks) and a one-rank Scheduler + Worker over real torch tensors."""

import pytest
import torch

import kvtier

LAYOUT = [
    "layout.layers=2",
    "layout.kv_heads=1",
    "layout.head_dim=8",
    "layout.dtype_bytes=4",
    "layout.block_size=4",
    "layout.blocks_per_chunk=2",
    "cache.host_bytes=1MiB",
]
NUM_BLOCKS = 32


def small_config(*overrides):
    return kvtier.Config().with_overrides(LAYOUT + list(overrides))


def kv_tensors(config, num_blocks=NUM_BLOCKS):
    shape = config.layout.kv_cache_shape(num_blocks)
    return [torch.zeros(shape, dtype=torch.float32) for _ in range(config.layout.layers)]


class Rig:
    """One scheduler side and one worker side, stepped the way an engine steps them."""

    def __init__(self, config, model="pytest", kv=None):
        self.config = config
        self.scheduler = kvtier.Scheduler(config, model=model)
        self.kv = kv if kv is not None else kv_tensors(config)
        self.worker = kvtier.Worker(config, self.kv)
        self.n = 0

    def step(self, requests=(), write=None):
        self.n += 1
        meta = self.scheduler.build_step_metadata(self.n, list(requests))
        self.worker.start_load(meta)
        if write is not None:
            write()  # the "forward pass"
        self.worker.queue_stores(meta)
        out = self.worker.take_output()
        return meta, self.scheduler.update_from_worker_output([out])

    def settle(self, limit=20):
        for _ in range(limit):
            if self.scheduler.counters()["jobs_in_flight"] == 0:
                return
            self.worker.drain()
            self.step()
        raise AssertionError("jobs still in flight")


@pytest.fixture
def rig():
    r = Rig(small_config())
    yield r
    r.worker.close()
