"""Tensor parallelism over processes: one worker process per rank, each with its share of the
model (its KV heads), its own paged KV cache in torch tensors and its own kvtier.Worker; the
ranks sum their attention outputs with torch.distributed (gloo). The engine's scheduler, in
the parent process, sends each step's kvtier.StepMetadata and batch to every rank over a pipe
and gets every rank's kvtier.WorkerOutput back (rank 0 also sends the logits)."""

from __future__ import annotations

import multiprocessing
import os
import traceback
from typing import List, Optional, Sequence

import torch

from .model import ForwardInput, ModelConfig, TinyDecoder


def _rank_main(rank, world_size, init_file, model_config, num_blocks, block_size, config_yaml,
               conn):
    import torch.distributed as dist

    import kvtier

    from .engine import EngineWorker

    torch.set_num_threads(1)
    worker = None
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                world_size=world_size)
        model = TinyDecoder(model_config, rank, world_size, all_reduce=dist.all_reduce)
        config = kvtier.Config.from_yaml(config_yaml) if config_yaml is not None else None
        worker = EngineWorker(model, num_blocks, block_size, config, rank, world_size)
        conn.send(("ready", None))
        while True:
            op, arg = conn.recv()
            if op == "step":
                metadata, batch = arg
                logits, outputs = worker.execute(metadata, batch, lambda fn, *a: fn(*a))
                conn.send(("ok", (logits if rank == 0 else None, outputs[0] if outputs else None)))
            elif op == "drain":
                worker.drain()
                conn.send(("ok", None))
            elif op == "close":
                worker.close()
                worker = None
                conn.send(("ok", None))
                conn.close()
                os._exit(0)  # the KV caches are closed; skip torch's slow teardown
    except BaseException as e:  # noqa: BLE001  reported to the parent, which raises it
        conn.send(("error", (e, traceback.format_exc())))
    finally:
        if worker is not None:
            worker.close()


class ProcessWorkers:
    """EngineWorker's interface over `world_size` rank processes."""

    def __init__(self, model_config: ModelConfig, num_blocks: int, block_size: int,
                 config, world_size: int, run_dir: str):
        # A fork server that imported torch once forks every rank: no rank re-imports it, and
        # none is forked from a process whose threads (torch's, kvtier's) are running.
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", "kvtier",
                                    "torch_engine.engine"])
        init_file = os.path.join(run_dir, "gloo-init")
        yaml = config.to_yaml() if config is not None else None
        self.conns, self.procs = [], []
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_rank_main, args=(rank, world_size, init_file, model_config,
                                                     num_blocks, block_size, yaml, child),
                            daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)
        self._gather()  # every rank is ready
        self.verdicts: List[dict] = [{} for _ in range(world_size)]  # per rank: job -> outcome

    def _gather(self):
        replies = []
        for rank, conn in enumerate(self.conns):
            try:
                status, value = conn.recv()
            except EOFError:
                raise RuntimeError(f"rank {rank}'s process exited") from None
            if status == "error":
                error, text = value
                raise RuntimeError(f"rank {rank} failed:\n{text}") from error
            replies.append(value)
        return replies

    def execute(self, metadata, batch: Sequence[ForwardInput], timed):
        for conn in self.conns:
            conn.send(("step", (metadata, list(batch))))
        replies = self._gather()
        outputs = [out for _, out in replies]
        for rank, out in enumerate(outputs):
            if out is not None:
                for v in out.finished:
                    self.verdicts[rank][v.job] = v.outcome
        return replies[0][0], (outputs if metadata is not None else [])

    def drain(self):
        for conn in self.conns:
            conn.send(("drain", None))
        self._gather()

    def close(self):
        for conn, p in zip(self.conns, self.procs):
            if p.is_alive():
                try:
                    conn.send(("close", None))
                    conn.recv()
                except (EOFError, OSError):
                    pass
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
