#!/usr/bin/python3
"""The PyTorch engine's TTFT with kvtier on and off, and the Python binding's cost per call.

Prints JSON Lines:
  {"bench": "torch_engine_ttft", ...}  multi-turn conversations run by examples/torch_engine
      twice in one process, kvtier off then on: TTFT p50 of each and `ratio` = off / on (above 1:
      kvtier made the first token come sooner), and whether the outputs were bit-identical.
  {"bench": "python_binding", "call": NAME, "us_per_call": ...}  per connector call of a step
      with `--requests` running requests, through the Python module, with token lists and with
      uint32 token arrays; then `kvtier bench scheduler`'s row for the same number of requests
      (the C++ scheduler side's own cost per step: build_us, aggregate_us, lookup_us).

Run from the repository root after scripts/build:
  PYTHONPATH=build/python:examples /usr/bin/python3 bench/torch_engine_bench.py
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

import kvtier
from torch_engine import Engine, TinyDecoder, kvtier_config_for


def conversations(n, turns, system, user, answer, seed):
    g = torch.Generator().manual_seed(seed)
    rand = lambda k: torch.randint(0, 256, (k,), generator=g).tolist()  # noqa: E731
    shared = rand(system)
    return [[rand(user) for _ in range(turns)] for _ in range(n)], shared, answer


def run_turns(engine, convs, shared, answer):
    """Turn by turn, every conversation's next message arrives once the last turn finished:
    its prompt is the whole conversation so far. Returns TTFTs (s) and outputs."""
    history = [list(shared) for _ in convs]
    ttft, outputs = [], {}
    for t in range(len(convs[0])):
        for i, msgs in enumerate(convs):
            history[i] += msgs[t]
            engine.add_request(f"c{i}t{t}", history[i], answer)
        engine.run()
        for i in range(len(convs)):
            r = engine.requests[f"c{i}t{t}"]
            ttft.append(r.ttft)
            outputs[r.id] = (list(r.generated), r.logits)
            history[i] += r.generated
    return ttft, outputs


def ttft_rows(args):
    model = TinyDecoder()
    convs, shared, answer = conversations(args.conversations, args.turns, args.system,
                                          args.user, args.answer, args.seed)
    results = {}
    for name, cfg in (
        ("off", None),
        ("on", kvtier_config_for(model.config, 4, overrides=[
            "layout.blocks_per_chunk=4", "connector.store_decode=true"])),
    ):
        engine = Engine(model, num_blocks=4096, block_size=4, kvtier_config=cfg)
        try:
            ttft, outputs = run_turns(engine, convs, shared, answer)
            results[name] = (ttft, outputs, engine.stats)
        finally:
            engine.close()
    off, on = results["off"], results["on"]
    identical = off[1].keys() == on[1].keys() and all(
        off[1][k][0] == on[1][k][0] and all(torch.equal(a, b) for a, b in zip(off[1][k][1],
                                                                             on[1][k][1]))
        for k in off[1])
    p50_off, p50_on = statistics.median(off[0]) * 1e3, statistics.median(on[0]) * 1e3
    return {
        "bench": "torch_engine_ttft",
        "conversations": args.conversations,
        "turns": args.turns,
        "system_tokens": args.system,
        "ttft_p50_off_ms": round(p50_off, 3),
        "ttft_p50_on_ms": round(p50_on, 3),
        "ratio": round(p50_off / p50_on, 3) if p50_on > 0 else 0,
        "computed_tokens_off": off[2].computed_tokens,
        "computed_tokens_on": on[2].computed_tokens,
        "loaded_tokens_on": on[2].loaded_tokens,
        "connector_calls_on": on[2].connector_calls,
        "connector_ms_on": round(on[2].connector_seconds * 1e3, 3),
        "identical": identical,
    }


def binding_rows(args, token_arrays):
    """A decode-like step: `requests` running requests of `tokens` tokens, no transfer due.
    `token_arrays`: each request's tokens as a uint32 numpy array (taken without a Python
    loop) rather than a list."""
    block = 16
    cfg = kvtier.Config().with_overrides([
        "layout.layers=2", "layout.kv_heads=1", "layout.head_dim=8", "layout.dtype_bytes=4",
        f"layout.block_size={block}", "layout.blocks_per_chunk=4", "cache.host_bytes=16MiB"])
    blocks_per = (args.tokens + block) // block + 1
    num_blocks = blocks_per * args.requests
    kv = [torch.zeros(cfg.layout.kv_cache_shape(num_blocks)) for _ in range(2)]
    sched = kvtier.Scheduler(cfg, model="bench")
    worker = kvtier.Worker(cfg, kv)
    g = torch.Generator().manual_seed(1)
    reqs = []
    for i in range(args.requests):
        tokens = torch.randint(0, 1000, (args.tokens,), generator=g).tolist()
        rid = f"r{i}"
        sched.get_num_new_matched_tokens(rid, tokens, 0)
        sched.update_state_after_alloc(rid, list(range(i * blocks_per, (i + 1) * blocks_per)), 0)
        reqs.append((rid, tokens))
    times = {k: [] for k in ("get_num_new_matched_tokens", "build_step_metadata", "start_load",
                             "queue_stores", "take_output", "update_from_worker_output")}

    def timed(name, fn, *a):
        t = time.perf_counter()
        r = fn(*a)
        times[name].append(time.perf_counter() - t)
        return r

    arrays = {}
    if token_arrays:
        for rid, tokens in reqs:
            arrays[rid] = np.zeros(args.tokens + args.steps + 8, dtype=np.uint32)
            arrays[rid][: len(tokens)] = tokens
    step = 0
    for rep in range(args.steps + 5):
        step += 1
        scheduled = []
        for rid, tokens in reqs:
            tokens.append(step % 1000)
            if token_arrays:
                arrays[rid][len(tokens) - 1] = step % 1000
                known = arrays[rid][: len(tokens)]
            else:
                known = tokens
            scheduled.append(kvtier.ScheduledRequest(rid, known, args.tokens, [], len(tokens)))
        timed("get_num_new_matched_tokens", sched.get_num_new_matched_tokens, "probe",
              reqs[0][1][: args.tokens], 0)
        meta = timed("build_step_metadata", sched.build_step_metadata, step, scheduled)
        timed("start_load", worker.start_load, meta)
        timed("queue_stores", worker.queue_stores, meta)
        out = timed("take_output", worker.take_output)
        timed("update_from_worker_output", sched.update_from_worker_output, [out])
        if rep == 4:  # warm-up: the prompts' stores ran
            worker.drain()
            for k in times:
                times[k].clear()
    worker.drain()
    worker.close()
    rows = []
    for name, ts in times.items():
        rows.append({"bench": "python_binding", "call": name, "requests": args.requests,
                     "tokens": args.tokens, "token_arrays": token_arrays, "steps": len(ts),
                     "us_per_call": round(statistics.median(ts) * 1e6, 2)})
    if not token_arrays:
        return rows
    t = time.perf_counter()
    for _ in range(10000):
        sched.fail_stopped  # noqa: B018  the cheapest call: the binding's floor
    rows.append({"bench": "python_binding", "call": "fail_stopped (floor)",
                 "us_per_call": round((time.perf_counter() - t) / 10000 * 1e6, 3)})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--conversations", type=int, default=4)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--system", type=int, default=96, help="shared system-prompt tokens")
    p.add_argument("--user", type=int, default=16, help="tokens per user message")
    p.add_argument("--answer", type=int, default=4, help="tokens per answer")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--requests", type=int, default=64, help="binding bench: running requests")
    p.add_argument("--tokens", type=int, default=512, help="binding bench: prompt tokens")
    p.add_argument("--steps", type=int, default=200, help="binding bench: timed steps")
    p.add_argument("--skip-ttft", action="store_true")
    p.add_argument("--kvtier", default="build/apps/kvtier/kvtier",
                   help="the kvtier CLI, for `kvtier bench scheduler` beside the binding's rows")
    args = p.parse_args()
    torch.set_num_threads(1)
    if not args.skip_ttft:
        print(json.dumps(ttft_rows(args)), flush=True)
    for token_arrays in (False, True):
        for row in binding_rows(args, token_arrays):
            print(json.dumps(row), flush=True)
    if args.kvtier and os.access(args.kvtier, os.X_OK):
        # The C++ scheduler side's own cost per step, for the same number of requests.
        out = subprocess.run([args.kvtier, "bench", "scheduler", "--json", "--requests",
                              str(args.requests), "--steps", str(args.steps), "--world-size", "1"],
                             capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
