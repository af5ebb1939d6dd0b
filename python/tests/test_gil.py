"""Calls that wait release the GIL: another Python thread runs while kvtier waits."""

import threading
import time

import kvtier
from conftest import small_config


def test_the_gil_is_released_while_the_scheduler_side_waits_for_kvtierd(tmp_path):
    # No kvtierd listens there: building the scheduler side waits server.connect_timeout_s.
    config = small_config("cache.mode=server", f"server.endpoint=ipc://{tmp_path}/kvtierd.sock",
                          "server.connect_timeout_s=1")
    stamps, stop = [], threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.monotonic())

    thread = threading.Thread(target=spin)
    thread.start()
    t0 = time.monotonic()
    scheduler = kvtier.Scheduler(config, model="gil")
    t1 = time.monotonic()
    stop.set()
    thread.join()
    assert t1 - t0 >= 0.9
    # With the GIL held for the whole wait, the other thread could not run in its middle.
    assert any(t0 + 0.3 < s < t1 - 0.3 for s in stamps)
    # Without kvtierd the cache is degraded: lookups miss, the engine computes (H7).
    assert scheduler.degraded
    assert scheduler.get_num_new_matched_tokens("r", list(range(40)), 0) == (0, False)
    assert scheduler.cache_counters() is None
