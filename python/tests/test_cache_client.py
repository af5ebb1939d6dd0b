"""kvtier.CacheClient against a real kvtierd (`kvtier server`, the CLI named by $KVTIERD_CLI) on a
private ipc:// endpoint: the data path through the clients' own shared memory, read locks, the
tiers' status with a real redis-server, errors as kvtier.Error codes, H7 (a dead server makes the
client degraded) and F7 (an unprovable transfer raises kvtier.FailStop)."""

import os
import signal
import socket
import subprocess
import threading
import time

import pytest
import torch

import kvtier
from conftest import small_config

KVTIER = os.environ.get("KVTIERD_CLI", "")
pytestmark = pytest.mark.skipif(not os.access(KVTIER, os.X_OK),
                                reason="KVTIERD_CLI (the kvtier CLI) not set")
NUM_BLOCKS = 16
MODEL = "pytest-client"


def wait_for(condition, timeout_s):
    """Bounded wait for a condition the contract bounds (e.g. a dead server is seen within two
    heartbeats)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Kvtierd:
    """A `kvtier server` process with `config` (its server.endpoint under tmp_path)."""

    def __init__(self, config, tmp_path):
        self.config = config
        path = tmp_path / "kvtierd.yaml"
        path.write_text(config.to_yaml())
        self.log = open(tmp_path / "kvtierd.log", "w")
        self.process = subprocess.Popen([KVTIER, "--config", str(path), "server"],
                                        stdout=self.log, stderr=self.log)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a test may have stopped it
            self.process.kill()
        self.process.wait(timeout=10)
        self.log.close()


def server_config(tmp_path, *overrides):
    return small_config(f"server.endpoint=ipc://{tmp_path}/kvtierd.sock",
                        "server.heartbeat_interval_s=0.2", "server.connect_timeout_s=10",
                        *overrides)


@pytest.fixture
def kvtierd(tmp_path):
    server = Kvtierd(server_config(tmp_path), tmp_path)
    yield server
    server.stop()


def client_of(server, **kwargs):
    client = kvtier.CacheClient(server.config, num_blocks=NUM_BLOCKS, **kwargs)
    assert client.health()["state"] == "ok", client.health()
    return client


def tensors(client):
    """The client's KV memory as the engine sees it: one float32 tensor per layer."""
    shape = client.layout.kv_cache_shape(client.num_blocks)
    return [torch.frombuffer(m, dtype=torch.float32).view(shape) for m in client.kv_caches[0]]


def keys_of(config, n_chunks, start=0):
    chunk = config.layout.chunk_tokens
    tokens = list(range(start, start + n_chunks * chunk + 1))
    keys = kvtier.chunk_keys(config.layout, tokens, model=MODEL)
    assert len(keys) == n_chunks
    return keys


def test_stored_chunks_are_found_and_retrieved_byte_for_byte_into_another_client(kvtierd):
    config = kvtierd.config
    per_chunk = config.layout.blocks_per_chunk
    keys = keys_of(config, 2)
    with client_of(kvtierd) as a, client_of(kvtierd, rank=1) as b:
        kv_a = tensors(a)
        for layer, t in enumerate(kv_a):
            t.copy_(torch.randn(t.shape, generator=torch.Generator().manual_seed(layer)))
        assert a.lookup(keys) == kvtier.LookupReply(0, False, 0)
        done = a.store(7, keys, [[0, 1], [2, 3]])
        assert done == kvtier.JobVerdict(7, "completed", "")
        assert a.lookup(keys).hits == 2

        kv_b = tensors(b)
        assert all(not t.any() for t in kv_b)
        got = b.retrieve(8, keys, [[10, 11], [12, 13]])
        assert got == kvtier.JobVerdict(8, "completed", "")
        for ta, tb in zip(kv_a, kv_b):
            assert torch.equal(tb[10:10 + 2 * per_chunk], ta[0:2 * per_chunk])
            assert not tb[:10].any() and not tb[14:].any()

        stats = b.stats()
        assert stats["stores_completed"] == 1 and stats["retrieves_completed"] == 1
        assert stats["clients"] == 2 and stats["cache_audit_ok"] == 1
        assert b.tiers() == {} and stats["tiers"] == 0


def test_lookup_many_answers_each_lookup_as_lookup_does(kvtierd):
    keys = keys_of(kvtierd.config, 3)
    missing = "f" * 32
    with client_of(kvtierd) as c:
        assert c.store(1, keys, [[0, 1], [2, 3], [4, 5]]).outcome == "completed"
        lookups = [keys[: i % 4] + ([missing] if i % 2 else []) for i in range(2000)]
        replies = c.lookup_many(lookups)
        assert len(replies) == len(lookups)
        for i, (lookup, reply) in enumerate(zip(lookups, replies)):
            assert reply == kvtier.LookupReply(i % 4, False, 0), i
            if i < 8:
                assert c.lookup(lookup) == reply
        assert c.lookup_many([]) == []
        locked = c.lookup_many([keys[:2], keys[2:]], lock_for_s=5)
        assert [r.hits for r in locked] == [2, 1] and all(r.lock != 0 for r in locked)
        assert c.stats()["client_locked_keys"] == 3
        for r in locked:
            c.release(r.lock)
        with pytest.raises(kvtier.Error) as e:
            c.lookup_many([keys, "not a list of keys"])
        assert e.value.code == "invalid_argument"
        with pytest.raises(kvtier.Error):
            c.lookup_many("abc")


def test_a_lookup_lock_pins_the_hits_until_released_or_retrieved(kvtierd):
    keys = keys_of(kvtierd.config, 2)
    with client_of(kvtierd) as c:
        assert c.store(1, keys, [[0, 1], [2, 3]]).outcome == "completed"
        reply = c.lookup(keys, lock_for_s=5)
        assert reply.hits == 2 and reply.lock != 0
        assert c.stats()["client_locked_keys"] == 2
        c.release(reply.lock)
        assert c.stats()["client_locked_keys"] == 0
        with pytest.raises(kvtier.Error) as e:
            c.release(reply.lock)
        assert e.value.code == "not_found"

        reply = c.lookup(keys[:1], lock_for_s=5)
        assert c.retrieve(2, keys[:1], [[4, 5]], lock=reply.lock).outcome == "completed"
        assert c.stats()["client_locked_keys"] == 0  # RETRIEVE released the named lock


def test_a_retrieve_of_a_missing_chunk_is_a_failed_verdict_and_bad_arguments_are_errors(kvtierd):
    keys = keys_of(kvtierd.config, 1)
    with client_of(kvtierd) as c:
        failed = c.retrieve(3, keys, [[0, 1]])
        assert failed.outcome == "failed" and "not_found" in failed.error
        assert not c.fail_stopped
        for bad_keys, blocks in [(["xyz"], [[0, 1]]), ("0" * 32, [[0, 1]]), ([b"\0" * 16], [[0]]),
                                 (keys, [[0, 1], [2, 3]]), (keys, [[-1, 0]]), (keys, "0 1")]:
            with pytest.raises(kvtier.Error) as e:
                c.store(4, bad_keys, blocks)
            assert e.value.code == "invalid_argument", (bad_keys, blocks)
        # Block ids past the memory: the server refuses them, nothing is copied.
        out_of_range = c.store(5, keys, [[NUM_BLOCKS, NUM_BLOCKS + 1]])
        assert out_of_range.outcome == "failed" and "invalid_argument" in out_of_range.error
        with pytest.raises(kvtier.Error) as e:
            c.lookup(keys, lock_for_s=-1)
        assert e.value.code == "invalid_argument"
        assert c.stats()["cache_audit_ok"] == 1
    assert c.closed and c.kv_caches == []
    with pytest.raises(kvtier.Error) as e:
        c.lookup(keys)
    assert e.value.code == "failed_precondition"


def test_kv_memory_outlives_close_while_a_tensor_uses_it(kvtierd):
    c = client_of(kvtierd)
    kv = tensors(c)
    kv[0][3].fill_(2.5)
    c.close()
    del c
    assert float(kv[0][3].sum()) == 2.5 * kv[0][3].numel()  # still mapped


def store_through_the_connector(scheduler, worker, request_id, tokens):
    """Request `request_id` computes `tokens` into blocks 0-4 and its chunks are stored through
    the connector (Scheduler + Worker), step by step until the store completed."""
    blocks = list(range(5))
    assert scheduler.get_num_new_matched_tokens(request_id, tokens, 0).tokens == 0
    scheduler.update_state_after_alloc(request_id, blocks, 0)
    request = kvtier.ScheduledRequest(request_id, tokens, len(tokens), blocks, len(tokens))
    for step in range(1, 50):
        meta = scheduler.build_step_metadata(step, [request] if step == 1 else [])
        worker.start_load(meta)
        worker.queue_stores(meta)
        scheduler.update_from_worker_output([worker.take_output()])
        if scheduler.counters()["stores_completed"] >= 1:
            break
        worker.drain()
    assert scheduler.counters()["stores_completed"] >= 1


def test_chunk_keys_are_the_connectors_own(kvtierd):
    """Chunks an engine stored through the connector (Scheduler + Worker, cache.mode server) are
    found by a CacheClient under chunk_keys(..., rank=0)."""
    config = kvtierd.config.with_overrides(["cache.mode=server"])
    chunk = config.layout.chunk_tokens
    tokens = list(range(100, 100 + 2 * chunk + 1))
    scheduler = kvtier.Scheduler(config, model=MODEL)
    worker = kvtier.Worker(config, None, num_blocks=NUM_BLOCKS)
    try:
        store_through_the_connector(scheduler, worker, "r", tokens)
        with client_of(kvtierd) as c:
            mine = kvtier.chunk_keys(config.layout, tokens, model=MODEL, rank=0)
            assert c.lookup(mine).hits == 2
            assert c.lookup(kvtier.chunk_keys(config.layout, tokens, model=MODEL)).hits == 0
            other = kvtier.chunk_keys(config.layout, tokens, model="another model", rank=0)
            assert c.lookup(other).hits == 0
    finally:
        worker.close()


def test_a_server_mode_worker_closes_once_kvtierds_copies_ended(kvtierd):
    """close() waits until every transfer in flight has its verdict: kvtierd writes a load into
    the worker's KV memory, which outlives the Worker (its tensors keep it), and the engine may
    reuse those blocks once close() returned."""
    config = kvtierd.config.with_overrides(
        ["cache.mode=server", "connector.load_in_step=false", "transfer.transfer_deadline_s=20"])
    chunk = config.layout.chunk_tokens
    tokens = list(range(300, 300 + 2 * chunk + 1))
    scheduler = kvtier.Scheduler(config, model=MODEL)
    worker = kvtier.Worker(config, None, num_blocks=NUM_BLOCKS)
    shape = config.layout.kv_cache_shape(NUM_BLOCKS)
    kv = [torch.frombuffer(m, dtype=torch.float32).view(shape) for m in worker.kv_caches]
    resumed = None
    try:
        for t in kv:
            t[:5].copy_(torch.randn(t[:5].shape, generator=torch.Generator().manual_seed(5)))
        store_through_the_connector(scheduler, worker, "a", tokens)
        scheduler.request_finished("a")
        matched = scheduler.get_num_new_matched_tokens("b", tokens, 0).tokens
        assert matched == 2 * chunk
        scheduler.update_state_after_alloc("b", list(range(10, 15)), matched)
        kvtierd.process.send_signal(signal.SIGSTOP)  # kvtierd is slow to answer the RETRIEVE
        resumed = threading.Timer(0.3, kvtierd.process.send_signal, [signal.SIGCONT])
        resumed.start()
        worker.start_load(scheduler.build_step_metadata(60, []))
    finally:
        worker.close()
        if resumed:
            resumed.join()
    for t in kv:
        assert torch.equal(t[10:14], t[0:4]), "close() returned before kvtierd's copy ended"


def test_chunk_keys_chain_the_tokens():
    layout = small_config().layout
    chunk = layout.chunk_tokens
    tokens = list(range(3 * chunk - 1))
    keys = kvtier.chunk_keys(layout, tokens, model=MODEL)
    assert len(keys) == 2 and all(len(k) == 32 and int(k, 16) >= 0 for k in keys)
    assert kvtier.chunk_keys(layout, tokens[:chunk], model=MODEL) == keys[:1]
    changed = [tokens[0] + 1] + tokens[1:]
    assert all(a != b for a, b in zip(kvtier.chunk_keys(layout, changed, model=MODEL), keys))
    assert kvtier.chunk_keys(layout, tokens, model=MODEL, cache_salt="t") != keys
    assert kvtier.chunk_keys(layout, tokens, model=MODEL, rank=1) != keys
    with pytest.raises(kvtier.Error):
        kvtier.chunk_keys(layout, tokens, model=MODEL, group=1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_H7_the_tiers_status_names_a_dead_redis_tier_degraded_and_requests_are_still_served(
        tmp_path):
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = None
    try:
        with socket.socket() as probe:
            assert wait_for(lambda: probe.connect_ex(("127.0.0.1", port)) == 0, 10)
        server = Kvtierd(server_config(tmp_path, f"tiers.redis_url=redis://127.0.0.1:{port}",
                                       f"tiers.disk_path={tmp_path}/disk", "tiers.disk_bytes=4MiB",
                                       "tiers.redis_timeout_s=0.2", "tiers.probe_initial_s=0.05",
                                       "tiers.probe_max_s=0.2"), tmp_path)
        with client_of(server) as c:
            before = keys_of(server.config, 2)
            assert c.store(1, before, [[0, 1], [2, 3]]).outcome == "completed"
            assert wait_for(lambda: c.stats()["tier.redis.chunks_written"] >= 2, 10)
            tiers = c.tiers()
            assert set(tiers) == {"disk", "redis"}
            assert tiers["redis"]["state"] == "up" and tiers["disk"]["state"] == "up"
            assert tiers["redis"]["chunks_written"] >= 2 and "hits" in tiers["disk"]
            assert c.health()["degraded_tiers"] == []

            redis.kill()
            redis.wait()
            during = keys_of(server.config, 2, start=1000)
            assert c.store(2, during, [[4, 5], [6, 7]]).outcome == "completed"
            assert wait_for(lambda: c.tiers()["redis"]["state"] == "down", 10)
            assert c.tiers()["disk"]["state"] == "up"
            assert c.stats()["tiers_degraded"] == 1
            assert wait_for(lambda: c.health()["degraded_tiers"] == ["redis"], 5)
            assert c.health()["state"] == "ok"  # kvtierd itself is fine
            assert c.ping()["tier.redis.down"] == 1
            # Served meanwhile: host hits, and a retrieve.
            assert c.lookup(before).hits == 2
            assert c.retrieve(3, during, [[8, 9], [10, 11]]).outcome == "completed"
    finally:
        if redis.poll() is None:
            redis.kill()
            redis.wait()
        if server is not None:
            server.stop()


def test_H7_a_dead_kvtierd_makes_the_client_degraded_lookups_unavailable_stores_failed(kvtierd):
    keys = keys_of(kvtierd.config, 1)
    with client_of(kvtierd) as c:
        kvtierd.process.kill()
        kvtierd.process.wait()
        assert wait_for(lambda: c.health()["state"] == "degraded", 5), c.health()
        assert c.health()["reason"]
        with pytest.raises(kvtier.Error) as e:
            c.lookup(keys)
        assert e.value.code == "unavailable"
        failed = c.store(1, keys, [[0, 1]])
        assert failed.outcome == "failed" and "skipped" in failed.error  # never sent
        assert not c.fail_stopped
        assert not c.wait_until_ok(0.3)


def test_F7_an_unprovable_store_raises_FailStop_and_so_does_every_later_transfer(tmp_path):
    # A hung kvtierd (SIGSTOP) never answers: the store's deadline (0.3 + 0.1 s) passes long
    # before the heartbeat (a PING unanswered for 2 s) could see the server hung, so the store
    # was sent and its copies cannot be proven to have stopped.
    config = server_config(tmp_path, "server.heartbeat_interval_s=2", "server.client_timeout_s=30",
                           "transfer.transfer_deadline_s=0.3", "transfer.completion_margin_s=0.1")
    server = Kvtierd(config, tmp_path)
    try:
        keys = keys_of(config, 1)
        c = client_of(server)
        server.process.send_signal(signal.SIGSTOP)
        with pytest.raises(kvtier.FailStop) as e:
            c.store(9, keys, [[0, 1]])
        assert "job 9 is unprovable" in e.value.reason
        assert not isinstance(e.value, kvtier.Error)
        assert c.fail_stopped and c.health()["fail_stopped"]
        server.process.send_signal(signal.SIGCONT)
        assert c.stats()["clients"] == 1  # answering again; diagnostics still work
        with pytest.raises(kvtier.FailStop):
            c.retrieve(10, keys, [[2, 3]])  # not sent: kvtierd may still write the memory
        with pytest.raises(kvtier.FailStop):
            c.store(11, keys, [[2, 3]])
        c.close()
    finally:
        server.stop()


def test_the_gil_is_released_while_a_lookup_waits_for_a_hung_kvtierd(tmp_path):
    # The lookup's deadline (1 s) passes before the heartbeat (2 s) could see the server hung.
    config = server_config(tmp_path, "server.heartbeat_interval_s=2", "server.client_timeout_s=30",
                           "server.request_timeout_s=1")
    server = Kvtierd(config, tmp_path)
    try:
        c = client_of(server)
        server.process.send_signal(signal.SIGSTOP)
        stamps, stop = [], threading.Event()

        def spin():
            while not stop.is_set():
                stamps.append(time.monotonic())

        thread = threading.Thread(target=spin)
        thread.start()
        t0 = time.monotonic()
        with pytest.raises(kvtier.Error) as e:
            c.lookup(keys_of(config, 1))
        t1 = time.monotonic()
        stop.set()
        thread.join()
        assert e.value.code == "deadline_exceeded"
        assert t1 - t0 >= 0.9
        assert any(t0 + 0.3 < s < t1 - 0.3 for s in stamps)
        server.process.send_signal(signal.SIGCONT)
        c.close()
    finally:
        server.stop()
