"""Runs the PyTorch engine on a few requests that share a prefix, with kvtier and without, and
prints what each computed and loaded (JSON), e.g.:

  PYTHONPATH=build/python:examples /usr/bin/python3 -m torch_engine --world-size 2
"""

import argparse
import json
import tempfile

import torch

import kvtier

from . import Engine, TinyDecoder, kvtier_config_for


def main():
    p = argparse.ArgumentParser(prog="torch_engine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--prefix", type=int, default=64, help="shared prompt tokens")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--world-size", type=int, default=1, help="tensor-parallel rank processes")
    p.add_argument("--config", help="a kvtier YAML file (the layout is the model's)")
    p.add_argument("--set", action="append", default=[], help="section.field=value")
    args = p.parse_args()

    model = TinyDecoder()
    base = kvtier.Config.load(args.config, args.set) if args.config or args.set else None
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(0, 256, (args.prefix,), generator=g).tolist()
    prompts = [prefix + torch.randint(0, 256, (8,), generator=g).tolist()
               for _ in range(args.requests)]
    results = {}
    for name, cfg in (("off", None), ("on", kvtier_config_for(model.config, 4, base))):
        with tempfile.TemporaryDirectory() as run_dir:
            engine = Engine(model, kvtier_config=cfg, world_size=args.world_size,
                            run_dir=run_dir)
            try:
                for i, prompt in enumerate(prompts):  # one after another: each can reuse
                    engine.add_request(f"r{i}", prompt, args.max_tokens)
                    engine.run()
                results[name] = {
                    "tokens": {rid: r.generated for rid, r in engine.requests.items()},
                    "ttft_ms": {rid: round(r.ttft * 1e3, 3) for rid, r in engine.requests.items()},
                    "computed_tokens": engine.stats.computed_tokens,
                    "loaded_tokens": engine.stats.loaded_tokens,
                }
                if engine.connector is not None:
                    results[name]["counters"] = engine.connector.counters()
            finally:
                engine.close()
    results["identical"] = results["off"]["tokens"] == results["on"]["tokens"]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
