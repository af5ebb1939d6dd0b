"""kvtierd's KV events (docs/events.md) read as a router reads them: plain zmq and msgpack,
checked against what kvtierd holds (LOOKUP), through stores, evictions and a late subscriber's
replay.

Run: PROTOCOL_TEST_KVTIER=build/apps/kvtier/kvtier /usr/bin/python3 -m pytest -q tests/server/python
"""

import os
import time
import uuid

import msgpack
import pytest
import zmq

from test_protocol import Client, Memory, Server, blocks, key

END = b"\xff" * 8
CHUNK_TOKENS = 16  # layout.block_size 4 x blocks_per_chunk 4 (test_protocol.LAYOUT)
SLOTS = 64         # cache.host_bytes of test_protocol.SETTINGS


def ipc(name):
    return f"ipc:///tmp/kvtier-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}-{name}"


class Mirror:
    """The set of (medium, hash) the events say is stored, and the next sequence number."""

    def __init__(self):
        self.stored = set()
        self.next_seq = 0
        self.kinds = set()

    def apply(self, seq, payload):
        batch = msgpack.unpackb(payload, raw=False)
        assert isinstance(batch, list) and len(batch) == 3
        ts, events, rank = batch
        assert isinstance(ts, float) and abs(ts - time.time()) < 60
        assert rank is None   # kvtierd is no engine core
        for event in events:
            tag = event[0]
            self.kinds.add(tag)
            if tag == "BlockStored":
                _, hashes, parent, token_ids, block_size, lora_id, medium = event
                assert parent is None and token_ids == [] and lora_id is None
                assert block_size == CHUNK_TOKENS and medium == "host"
                self.stored |= {(medium, h) for h in hashes}
            elif tag == "BlockRemoved":
                _, hashes, medium = event
                self.stored -= {(medium, h) for h in hashes}
            else:
                assert event == ["AllBlocksCleared"]
                self.stored.clear()
        self.next_seq = seq + 1

    def receive(self, sub, replays, timeout_ms=200):
        """Applies what the SUB socket has, asking the replay socket for what it missed (a gap,
        or batches sent before it connected), as a router does. True when something arrived."""
        got = False
        while sub.poll(timeout_ms if not got else 0):
            topic, seq, payload = sub.recv_multipart()
            assert topic == b"" and len(seq) == 8
            seq = int.from_bytes(seq, "big")
            if seq > self.next_seq:
                for s, p in replay(replays, self.next_seq):
                    if s >= self.next_seq:
                        self.apply(s, p)
            if seq == self.next_seq:
                self.apply(seq, payload)
            got = True
        return got


def replay(endpoint, start):
    """(seq, payload) of every batch the replay socket answers for `start`, then the end."""
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    while True:
        assert dealer.poll(5000), "no answer from the replay socket"
        empty, seq, payload = dealer.recv_multipart()
        assert empty == b""
        if seq == END:
            assert payload == b""
            break
        out.append((int.from_bytes(seq, "big"), payload))
    dealer.close()
    return out


@pytest.fixture(scope="module")
def publishing():
    events, replays = ipc("events"), ipc("replay")
    server = Server(extra=[f"events.endpoint={events}", f"events.replay_endpoint={replays}",
                           "events.buffer_batches=4"])
    yield server, events, replays
    server.stop()


def held_keys(client, universe):
    return {("host", key(k)) for k in universe
            if client.call({"op": "LOOKUP", "keys": [key(k)]})["hits"] == 1}


def test_events_match_what_kvtierd_holds(publishing):
    server, events, replays = publishing
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(events)
    memory, client = Memory(), Client(server)
    try:
        assert client.register(memory)["ok"]
        mirror = Mirror()
        # The SUB socket connects in the background: store chunks until an event arrives.
        handshake = iter(range(10000, 10100))
        while not mirror.receive(sub, replays, timeout_ms=100):
            k = next(handshake)
            assert client.call({"op": "STORE", "keys": [key(k)], "blocks": blocks(0, 1)})["ok"]
        universe = [*range(10000, next(handshake)), *range(3 * SLOTS)]
        for first in range(0, 3 * SLOTS, 8):
            ks = [key(k) for k in range(first, first + 8)]
            assert client.call({"op": "STORE", "keys": ks, "blocks": blocks(0, len(ks))})["ok"]
            mirror.receive(sub, replays, timeout_ms=20)
        while mirror.receive(sub, replays, timeout_ms=300):
            pass
        held = held_keys(client, universe)
        assert len(held) == SLOTS          # the cache is full: stores evicted
        assert "BlockRemoved" in mirror.kinds
        assert mirror.stored == held

        # A late router: the replay socket answers from sequence 0 with a snapshot (only the
        # last 4 batches are kept), which rebuilds the same set.
        late = Mirror()
        answer = replay(replays, 0)
        assert len(answer) == 1
        seq, payload = answer[0]
        assert seq == mirror.next_seq - 1
        assert msgpack.unpackb(payload, raw=False)[1][0] == ["AllBlocksCleared"]
        late.apply(seq, payload)
        assert late.stored == held
        # Asking from a kept batch gets the batches themselves, in order.
        kept = replay(replays, mirror.next_seq - 2)
        assert [s for s, _ in kept] == [mirror.next_seq - 2, mirror.next_seq - 1]
        assert replay(replays, mirror.next_seq) == []
    finally:
        client.call({"op": "UNREGISTER"})
        client.close()
        memory.close()
        sub.close()


def test_a_malformed_replay_request_gets_a_reason_and_kvtierd_lives_on(publishing):
    server, _, replays = publishing
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(replays)
    dealer.send_multipart([b"", b"short"])
    assert dealer.poll(5000)
    empty, seq, reason = dealer.recv_multipart()
    assert seq == END and b"bad replay request" in reason
    dealer.close()
    assert server.alive()


def test_a_bad_events_endpoint_is_a_clear_error():
    import subprocess
    from test_protocol import binary
    result = subprocess.run([binary(), "--set", "events.endpoint=udp://nowhere", "server"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "events.endpoint" in result.stderr


def test_an_engine_core_announces_its_device_blocks_with_their_tokens():
    """`kvtier serve` (one engine core, kvtier off): a completion's prompt blocks are announced
    on medium device, chained, with the prompt's bytes as token ids (one token per byte)."""
    import json
    import re
    import subprocess
    import urllib.error
    import urllib.request
    from test_protocol import serve_binary
    events = ipc("serve-events")
    serve = subprocess.Popen([serve_binary(), "--set", "engine.port=0", "--set", f"events.endpoint={events}",
                              "--set", "connector.enabled=false", "serve"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(events)
    try:
        port = None
        while port is None:
            line = serve.stdout.readline()
            assert line, "kvtier serve exited before serving"
            m = re.search(r"serving \S+ on http://[^:]+:(\d+)", line)
            port = m and int(m.group(1))

        deadline = time.monotonic() + 60
        while True:   # the engine core says hello after the frontend listens
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except urllib.error.HTTPError:
                pass
            assert time.monotonic() < deadline, "kvtier serve never turned healthy"
            time.sleep(0.05)   # polling pace

        def complete(prompt):
            body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as r:
                assert r.status == 200

        def device_events(timeout_ms):
            out = []
            while sub.poll(timeout_ms):
                _, seq, payload = sub.recv_multipart()
                ts, batch, rank = msgpack.unpackb(payload, raw=False)
                assert rank == 0   # engine core 0
                out += [e for e in batch if e[0] == "BlockStored" and e[6] == "device"]
                timeout_ms = 100
            return out

        # The SUB socket connects in the background: new prompts until an event arrives.
        for attempt in range(100):
            complete(f"warm-up {attempt} " + "w" * 40)
            if device_events(200):
                break
        else:
            pytest.fail("no device event from kvtier serve")
        prompt = "The quick brown fox jumps over the lazy dog, again and again and again!"
        complete(prompt)
        stored = device_events(1000)
        assert stored, "the completion's blocks were not announced"
        hashes, tokens, parent = [], [], "unset"
        for _, block_hashes, block_parent, token_ids, block_size, lora_id, _ in stored:
            assert block_size == 16 and lora_id is None
            assert len(token_ids) == 16 * len(block_hashes)
            if parent == "unset":
                parent = block_parent
            else:
                assert block_parent == hashes[-1]   # each event continues the chain
            hashes += block_hashes
            tokens += token_ids
        assert parent is None                       # the chain starts at the prompt's start
        full = len(prompt.encode()) // 16
        assert tokens[:16 * full] == list(prompt.encode()[:16 * full])
        assert len(set(hashes)) == len(hashes)
    finally:
        sub.close()
        serve.terminate()
        serve.wait(timeout=30)
