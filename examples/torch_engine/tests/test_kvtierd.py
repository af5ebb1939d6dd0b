"""The engine with kvtierd (cache.mode server): a real `kvtier server` process holds the cache;
the shared prefix is loaded from it, and once it is killed the engine degrades to recompute.
The outputs stay bit-identical to the engine without kvtier throughout."""

import os
import subprocess
import time

import pytest

from test_engine import BLOCK, MODEL, assert_bit_identical, config, prompts, run
from torch_engine import Engine

KVTIER = os.environ.get("KVTIERD_CLI", "")


def wait_for(condition, timeout_s):
    """Bounded wait for a condition the contract bounds (a dead server is seen within two
    heartbeats)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.mark.skipif(not os.access(KVTIER, os.X_OK), reason="KVTIERD_CLI (the kvtier CLI) not set")
def test_kvtierd_serves_the_prefix_and_a_killed_server_degrades_to_recompute(tmp_path):
    want, _ = run(None)
    cfg = config("cache.mode=server", f"server.endpoint=ipc://{tmp_path}/kvtierd.sock",
                 "server.heartbeat_interval_s=0.2", "server.connect_timeout_s=10")
    yaml = tmp_path / "kvtier.yaml"
    yaml.write_text(cfg.to_yaml())
    log = open(tmp_path / "kvtierd.log", "w")
    server = subprocess.Popen([KVTIER, "--config", str(yaml), "server"], stdout=log, stderr=log)
    engine = None
    try:
        engine = Engine(MODEL, num_blocks=256, block_size=BLOCK, kvtier_config=cfg)
        assert engine.connector.degraded is None
        waves = prompts()
        for wave in waves[:2]:
            for rid, prompt in wave.items():
                engine.add_request(rid, prompt, 3)
            engine.run()  # returns with no transfer in flight: killing now fails none (F7)
        c = engine.connector.counters()
        assert c["stores_completed"] >= 1 and c["loads_completed"] == 2
        assert c["loaded_tokens"] == 48 + 32

        server.kill()
        server.wait()
        assert wait_for(lambda: engine.connector.degraded is not None, 5), "not seen degraded"
        for rid, prompt in waves[2].items():
            engine.add_request(rid, prompt, 3)
        engine.run()
        got = {rid: (r.generated, r.logits) for rid, r in engine.requests.items()}
        assert_bit_identical(got, want)
        after = engine.connector.counters()
        assert after["loads_completed"] == 2 and after["jobs_unprovable"] == 0
        assert not engine.connector.fail_stopped
    finally:
        if engine is not None:
            engine.close()
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
