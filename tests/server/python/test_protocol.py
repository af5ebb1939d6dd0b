"""kvtierd's wire protocol driven from Python, following docs/protocol.md only.

A real kvtierd process (the `kvtier` binary named by $PROTOCOL_TEST_KVTIER) on a private ipc://
endpoint; clients are pyzmq DEALER sockets speaking MessagePack, with their KV memory in a
sealed memfd as the document requires. Three parts: the documented round trips (bytes
checked), every documented error code, and hostile requests, each followed by a check that a
second, well-behaved client is still served; at the end nothing leaked.

Run: PROTOCOL_TEST_KVTIER=build/apps/kvtier/kvtier /usr/bin/python3 -m pytest -q tests/server/python
"""

import fcntl
import itertools
import json
import mmap
import os
import re
import struct
import subprocess
import sys
import time
import uuid

import msgpack
import pytest
import zmq

# The server's layout (--set layout.*) and the memory every client registers: per_layer
# tensors [num_blocks, 2, block_size, kv_heads, head_dim] of 2-byte elements.
LAYOUT = {"layers": 3, "kv_heads": 2, "head_dim": 8, "dtype_bytes": 2, "block_size": 4,
          "blocks_per_chunk": 4}
LAYER_BLOCK = 2 * 4 * 2 * 8 * 2          # bytes of one block of one layer
NUM_BLOCKS = 32
TENSOR = NUM_BLOCKS * LAYER_BLOCK
MEMORY_BYTES = TENSOR * LAYOUT["layers"]
SETTINGS = [f"layout.{k}={v}" for k, v in LAYOUT.items()] + [
    "server.heartbeat_interval_s=0.25", "server.client_timeout_s=5",
    "cache.host_bytes=196608",          # 64 slots of 3 KiB
    "server.max_frame_bytes=4096", "server.max_locks=8", "server.max_pins=3",
    "transfer.transfer_deadline_s=1",
]
TIMEOUT_MS = 5000


def binary():
    path = os.environ.get("PROTOCOL_TEST_KVTIER")
    if not path:
        pytest.skip("PROTOCOL_TEST_KVTIER is not set")
    return path


def serve_binary():
    """The kvtier binary with `serve`: $PROTOCOL_TEST_KVTIER_SERVE (ctest sets it; kvtierd has no
    engine), else $PROTOCOL_TEST_KVTIER. A build of the library layers alone, as the sanitizer
    stages of .ci/run make, has no such binary, and the tests that need one skip."""
    path = os.environ.get("PROTOCOL_TEST_KVTIER_SERVE") or binary()
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built (a build of the library layers has kvtierd only)")
    return path


def wait_until_answering(process, probe, why=lambda: ""):
    """Waits until kvtierd (`process`) answers `probe`'s PING, for up to 15 s; `why` adds to the
    message when it exits first."""
    deadline = time.monotonic() + 15
    while True:
        try:
            if probe.call({"op": "PING"}, timeout_ms=200)["ok"]:
                return
        except TimeoutError:
            pass
        assert process.poll() is None, "kvtierd exited at startup" + why()
        assert time.monotonic() < deadline, "kvtierd never answered PING"


class Server:
    def __init__(self, extra=()):
        self.endpoint = f"ipc:///tmp/kvtier-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        args = [binary(), "--set", f"server.endpoint={self.endpoint}"]
        for s in list(SETTINGS) + list(extra):
            args += ["--set", s]
        # stderr is inherited: pytest shows it with a failure (a sanitizer's report included).
        self.process = subprocess.Popen(args + ["server", "--test-hooks"])
        probe = Client(self)
        try:
            wait_until_answering(self.process, probe)
        except BaseException:
            self.stop()  # a server that never answered is not left running
            raise
        finally:
            probe.close()

    def alive(self):
        return self.process.poll() is None

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


class Memory:
    """A client's KV memory: a memfd sealed against shrinking (docs/protocol.md)."""

    def __init__(self, seal=True):
        self.fd = os.memfd_create("kvtier-pytest", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, MEMORY_BYTES)
        if seal:
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.map = mmap.mmap(self.fd, MEMORY_BYTES)

    def describe(self):
        return {"pid": os.getpid(), "fd": self.fd, "bytes": MEMORY_BYTES,
                "groups": [{"offsets": [l * TENSOR for l in range(LAYOUT["layers"])],
                            "num_blocks": NUM_BLOCKS}]}

    def block(self, b):
        return b"".join(self.map[l * TENSOR + b * LAYER_BLOCK:l * TENSOR + (b + 1) * LAYER_BLOCK]
                        for l in range(LAYOUT["layers"]))

    def fill(self, b, seed):
        for l in range(LAYOUT["layers"]):
            start = l * TENSOR + b * LAYER_BLOCK
            self.map[start:start + LAYER_BLOCK] = bytes((seed * 131 + l * 17 + i) & 0xFF
                                                        for i in range(LAYER_BLOCK))

    def close(self):
        self.map.close()
        os.close(self.fd)


_ids = itertools.count(1)


class Client:
    def __init__(self, server):
        self.context = zmq.Context.instance()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.ROUTING_ID, b"py-" + os.urandom(8))
        self.socket.setsockopt(zmq.IMMEDIATE, 1)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDTIMEO, 200)   # IMMEDIATE: no server yet blocks a send
        self.socket.connect(server.endpoint)

    def send_raw(self, frames):
        try:
            self.socket.send_multipart(frames)
        except zmq.Again:
            raise TimeoutError("not connected") from None

    def receive(self, timeout_ms=TIMEOUT_MS):
        """The next reply, decoded strictly: one frame, valid MessagePack, valid UTF-8."""
        if not self.socket.poll(timeout_ms):
            raise TimeoutError("no reply")
        frames = self.socket.recv_multipart()
        assert len(frames) == 1
        reply = msgpack.unpackb(frames[0], raw=False)   # raises on invalid UTF-8
        assert isinstance(reply, dict) and reply["v"] == 1
        if not reply["ok"]:
            assert isinstance(reply["code"], str)
            assert len(reply["msg"].encode()) <= 256
        return reply

    def no_more_replies(self):
        return not self.socket.poll(50)

    def call(self, request, timeout_ms=TIMEOUT_MS):
        request = {"v": 1, "id": next(_ids), **request}
        self.send_raw([msgpack.packb(request, use_bin_type=True)])
        reply = self.receive(timeout_ms)
        while reply.get("event"):               # the shutdown event (id 0) is not a reply
            reply = self.receive(timeout_ms)
        assert reply["id"] == request["id"]
        return reply

    def register(self, memory, layout=None):
        return self.call({"op": "REGISTER", "rank": 0,
                          "layout": layout or {"device_layout": "per_layer", "groups": [LAYOUT]},
                          "memory": memory.describe()})

    def close(self):
        self.socket.close()


def key(n):
    return struct.pack("<QQ", n, 0x5059)


def blocks(first_block, chunks):
    return [[first_block + c * 4 + b for b in range(4)] for c in range(chunks)]


def expect_error(reply, code):
    assert reply["ok"] is False, reply
    assert reply["code"] == code, reply
    return reply


_second_keys = itertools.count(100000)


def assert_second_client_served(server):
    """A well-behaved client: REGISTER, STORE, RETRIEVE with bytes checked, UNREGISTER."""
    assert server.alive(), "kvtierd died"
    memory, client = Memory(), Client(server)
    try:
        assert client.register(memory)["ok"]
        k = next(_second_keys)
        for b in range(4):
            memory.fill(b, k)
        assert client.call({"op": "STORE", "keys": [key(k)], "group": 0,
                            "blocks": blocks(0, 1)})["ok"]
        assert client.call({"op": "RETRIEVE", "keys": [key(k)], "group": 0,
                            "blocks": blocks(8, 1)})["ok"]
        for b in range(4):
            assert memory.block(8 + b) == memory.block(b)
        assert client.call({"op": "UNREGISTER"})["ok"]
    finally:
        client.close()
        memory.close()


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    # Nothing leaked by any test of the module.
    try:
        c = Client(s)
        stats = c.call({"op": "STATS"})
        assert stats["locks"] == 0
        assert stats["slots_pending"] == 0
        assert stats["cache_audit_ok"] == 1
        assert stats["transfers_in_flight"] == 0
        c.close()
    finally:
        s.stop()


@pytest.fixture
def registered(server):
    memory, client = Memory(), Client(server)
    assert client.register(memory)["ok"]
    yield client, memory
    client.call({"op": "UNREGISTER"})
    client.close()
    memory.close()


# ---------------------------------------------------------------------------- round trips

def test_ping_and_register_report_the_boot_id(server):
    c, memory = Client(server), Memory()
    pong = c.call({"op": "PING"})
    assert pong["ok"] and pong["boot_id"] != 0
    reg = c.register(memory)
    assert reg["ok"] and reg["boot_id"] == pong["boot_id"]
    assert reg["slot_bytes"] == 3072
    assert reg["max_batch"] == 1024 and reg["max_frame_bytes"] == 4096
    assert c.call({"op": "UNREGISTER"})["ok"]
    c.close()
    memory.close()


def test_store_lookup_retrieve_release_round_trip(registered):
    c, memory = registered
    keys = [key(1), key(2)]
    for b in range(8):
        memory.fill(b, 10 + b)
    stored = c.call({"op": "STORE", "keys": keys, "group": 0, "blocks": blocks(0, 2)})
    assert stored["ok"] and stored["chunks"] == 2 and stored["bytes"] == 2 * 3072
    assert stored["already_present"] == 0
    again = c.call({"op": "STORE", "keys": keys, "blocks": blocks(0, 2)})   # group defaults to 0
    assert again["ok"] and again["chunks"] == 0 and again["already_present"] == 2
    found = c.call({"op": "LOOKUP", "keys": keys + [key(3)], "lock_ms": 5000})
    assert found["ok"] and found["hits"] == 2 and found["pending"] == 0 and found["lock"] != 0
    assert c.call({"op": "STATS"})["client_locked_keys"] == 2
    loaded = c.call({"op": "RETRIEVE", "keys": keys, "group": 0, "blocks": blocks(16, 2),
                     "lock": found["lock"]})
    assert loaded["ok"] and loaded["chunks"] == 2 and loaded["bytes"] == 2 * 3072
    for b in range(8):
        assert memory.block(16 + b) == memory.block(b)
    assert c.call({"op": "STATS"})["client_locked_keys"] == 0   # the RETRIEVE released it
    lock = c.call({"op": "LOOKUP", "keys": keys, "lock_ms": 5000})["lock"]
    assert c.call({"op": "RELEASE", "lock": lock})["ok"]


def test_pin_unpin_round_trip_and_pin_quota(registered):
    """PIN keeps stored keys cached until UNPIN or its TTL; the tenant's pins are bounded
    (server.max_pins = 3 here) and shown in STATS."""
    c, _ = registered
    keys = [key(500 + i) for i in range(4)]
    for k in keys:
        assert c.call({"op": "STORE", "keys": [k], "blocks": blocks(0, 1)})["ok"]
    pinned = c.call({"op": "PIN", "keys": keys[:2] + keys[:1], "ttl_ms": 60000})
    assert pinned["ok"] and pinned["pinned"] == 2 and pinned["tenant_pinned_keys"] == 2
    stats = c.call({"op": "STATS"})
    assert stats["pins"] == 2 and stats["tenant_pinned_keys"] == 2 and stats["slots_pinned"] >= 2
    expect_error(c.call({"op": "PIN", "keys": keys[2:], "ttl_ms": 60000}), "quota_exceeded")
    expect_error(c.call({"op": "PIN", "keys": [key(599)], "ttl_ms": 60000}), "not_found")
    unpinned = c.call({"op": "UNPIN", "keys": keys})
    assert unpinned["ok"] and unpinned["unpinned"] == 2 and unpinned["tenant_pinned_keys"] == 0
    assert c.call({"op": "STATS"})["pins"] == 0


def documented_stats_fields():
    """The fields docs/protocol.md says STATS always sends (its "`STATS` always sends" paragraph
    up to "Lower tiers:"), less the per-op family `op_<OP>`, plus the two tier fields that a
    server without tiers sends as 0."""
    doc = open(os.path.join(os.path.dirname(__file__), "../../../docs/protocol.md")).read()
    start = doc.index("`STATS` always sends these fields")
    paragraph = doc[start:doc.index("Lower tiers:", start)]
    return set(re.findall(r"`([a-z_]+)`", paragraph)) - {"STATS"} | {"tiers", "tiers_degraded"}


def test_stats_has_exactly_the_documented_fields(registered):
    c, _ = registered
    stats = c.call({"op": "STATS"})
    documented = documented_stats_fields()
    assert len(documented) > 30, sorted(documented)
    missing = documented - set(stats)
    assert not missing, f"documented but not sent: {sorted(missing)}"
    envelope = {"v", "id", "ok"}  # every reply carries them
    undocumented = {k for k in stats if k not in documented | envelope
                    and not k.startswith("op_") and not k.startswith("tenant.")}
    assert not undocumented, f"sent but not in docs/protocol.md: {sorted(undocumented)}"
    # Per tenant (every client is in "default"): the documented counters, and the error
    # replies by code once one was sent.
    doc = open(os.path.join(os.path.dirname(__file__), "../../../docs/protocol.md")).read()
    start = doc.index("Per tenant (every client")
    counters = set(re.findall(r"`(?:tenant\.<name>)?\.([a-z_]+)`",
                              doc[start:doc.index("rejected.<code>", start)]))
    assert len(counters) == 7, counters
    sent = {k[len("tenant.default."):] for k in stats if k.startswith("tenant.")}
    assert {k for k in sent if not k.startswith("rejected.")} == counters
    assert all(re.fullmatch(r"rejected\.[a-z_]+", k) for k in sent - counters), sent
    for field in documented:
        assert isinstance(stats[field], int) and stats[field] >= 0, field
    assert stats["tiers"] == 0 and stats["tiers_degraded"] == 0


def test_batch_of_requests_in_one_frame(registered):
    """docs/protocol.md, Batches: each element handled as if sent alone, in order; the replies
    given at once come back as one array, the others each in its own frame."""
    c, memory = registered
    for b in range(8):
        memory.fill(b, 40 + b)
    keys = [key(41), key(42)]
    batch = [{"v": 1, "id": 9001, "op": "STORE", "keys": keys, "blocks": blocks(0, 2)},
             {"v": 1, "id": 9002, "op": "LOOKUP", "keys": keys},      # after the STORE: queued
             {"v": 1, "id": 9003, "op": "PING"}]
    c.send_raw([msgpack.packb(batch, use_bin_type=True)])
    got = {}
    while len(got) < 3:
        if not c.socket.poll(TIMEOUT_MS):
            raise TimeoutError(f"replies missing: have {sorted(got)}")
        frame = msgpack.unpackb(c.socket.recv(), raw=False)
        for reply in frame if isinstance(frame, list) else [frame]:
            assert reply["id"] not in got, "two replies to one request"
            got[reply["id"]] = reply
    assert got[9001]["ok"] and got[9001]["chunks"] == 2
    # The LOOKUP took effect after the STORE: its keys are pending or ready, never missing.
    assert got[9002]["ok"] and (got[9002]["hits"] == 2 or got[9002]["pending"] == 1)
    assert got[9003]["ok"] and got[9003]["boot_id"] != 0
    assert c.no_more_replies()
    # Two LOOKUPs answered at once: one frame, an array of both replies in order.
    c.send_raw([msgpack.packb([{"v": 1, "id": 9004, "op": "LOOKUP", "keys": keys},
                               {"v": 1, "id": 9005, "op": "LOOKUP", "keys": keys[1:],
                                "lock_ms": 1000}], use_bin_type=True)])
    assert c.socket.poll(TIMEOUT_MS)
    frame = msgpack.unpackb(c.socket.recv(), raw=False)
    assert [r["id"] for r in frame] == [9004, 9005]
    assert frame[0]["hits"] == 2 and frame[1]["hits"] == 1 and frame[1]["lock"] != 0
    assert c.call({"op": "RELEASE", "lock": frame[1]["lock"]})["ok"]


# ---------------------------------------------------------------------------- error codes

def test_malformed_too_large_version_and_unknown_op(server):
    c = Client(server)
    c.send_raw([b"\xc1garbage"])
    expect_error(c.receive(), "malformed")
    c.send_raw([msgpack.packb({"v": 1, "id": 1, "op": "PING"}), b"x"])   # two frames
    assert expect_error(c.receive(), "malformed")["id"] == 0
    c.send_raw([b"\x00" * 5000])
    expect_error(c.receive(), "too_large")
    expect_error(c.call({"v": 2, "op": "PING"}), "unsupported_version")
    expect_error(c.call({"op": "FROB"}), "unknown_op")
    c.send_raw([msgpack.packb({"v": 1, "id": 9, "op": "PING"}) + b"\x00"])  # trailing bytes
    expect_error(c.receive(), "malformed")
    assert c.no_more_replies()
    c.close()
    assert_second_client_served(server)


def test_session_codes(server, registered):
    c, memory = registered
    # The same REGISTER again (its first reply lost past the client's deadline) is answered as
    # the first was; another registration on the same session is refused.
    again = c.register(memory)
    assert again["ok"] and again["max_batch"] > 1 and again["max_frame_bytes"] > 0, again
    other_layout = {"device_layout": "per_layer", "groups": [dict(LAYOUT, layers=1)]}
    expect_error(c.register(memory, other_layout), "already_registered")
    other = Client(server)
    expect_error(other.call({"op": "LOOKUP", "keys": [key(1)]}), "not_registered")
    expect_error(other.call({"op": "UNREGISTER"}), "not_registered")
    expect_error(other.call({"op": "RELEASE", "lock": 77}), "not_found")
    other.close()


def test_invalid_argument_not_found_and_limits(registered):
    c, _ = registered
    expect_error(c.call({"op": "STORE", "keys": [key(5)], "blocks": [[0, 1, 2]]}),
                 "invalid_argument")                                  # wrong block count
    expect_error(c.call({"op": "STORE", "keys": [key(5)], "blocks": [[0, 1, 2, NUM_BLOCKS]]}),
                 "invalid_argument")                                  # block out of range
    expect_error(c.call({"op": "STORE", "keys": [key(5)], "group": 1, "blocks": blocks(0, 1)}),
                 "invalid_argument")                                  # no such group
    expect_error(c.call({"op": "RETRIEVE", "keys": [key(999)], "blocks": blocks(0, 1)}),
                 "not_found")
    expect_error(c.call({"op": "RELEASE", "lock": 12345}), "not_found")
    expect_error(c.call({"op": "PING", "hook": "nope"}), "invalid_argument")
    keys = [key(200 + i) for i in range(3)]
    for i, k in enumerate(keys):
        assert c.call({"op": "STORE", "keys": [k], "blocks": blocks(0, 1)})["ok"]
    held = [c.call({"op": "LOOKUP", "keys": keys, "lock_ms": 5000})["lock"] for _ in range(2)]
    expect_error(c.call({"op": "LOOKUP", "keys": keys, "lock_ms": 5000}),
                 "limit_exceeded")                                    # server.max_locks = 8
    for lock in held:
        assert c.call({"op": "RELEASE", "lock": lock})["ok"]


def test_unsealed_memory_is_refused(server):
    c, memory = Client(server), Memory(seal=False)
    expect_error(c.register(memory), "unsealed_memory")
    expect_error(c.call({"op": "STORE", "keys": [key(1)], "blocks": blocks(0, 1)}),
                 "not_registered")
    c.close()
    memory.close()
    assert_second_client_served(server)


# A client registers memory of its own user's processes only: kvtierd opens it with its own
# privileges, which here (root, serving the users of server.ipc_group) reach further.
REGISTER_AS_NOBODY = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import test_protocol as t

class Endpoint:
    endpoint = sys.argv[2]

client, own = t.Client(Endpoint()), t.Memory()
print(json.dumps({"theirs": client.call({"op": "REGISTER", "rank": 0,
                                         "layout": {"device_layout": "per_layer",
                                                    "groups": [t.LAYOUT]},
                                         "memory": json.loads(sys.argv[3])}),
                  "own": client.register(own)}))
"""


def test_memory_of_another_users_process_is_permission_denied():
    if os.geteuid() != 0:
        pytest.skip("needs root, to run a client as another user")
    server, memory = Server(extra=["server.ipc_group=nogroup"]), Memory()
    try:
        child = subprocess.run(
            [sys.executable, "-c", REGISTER_AS_NOBODY, os.path.dirname(__file__),
             server.endpoint, json.dumps(memory.describe())],
            user="nobody", group="nogroup", extra_groups=[], capture_output=True, text=True,
            timeout=60, check=False)
        assert child.returncode == 0, child.stderr
        replies = json.loads(child.stdout)
        reply = expect_error(replies["theirs"], "permission_denied")
        assert "does not run as your user" in reply["msg"]
        assert replies["own"]["ok"], replies["own"]
        assert server.alive()
    finally:
        memory.close()
        server.stop()


def test_memory_that_is_not_a_memfd_is_refused_before_it_is_opened(server, tmp_path):
    # Opening a file can wait on whatever serves it (a FUSE filesystem that never answers); the
    # server reads the descriptor's link and opens nothing but a memfd.
    path = tmp_path / "kv"
    path.write_bytes(bytes(MEMORY_BYTES))
    fd = os.open(path, os.O_RDWR)
    c = Client(server)
    try:
        memory = {"pid": os.getpid(), "fd": fd, "bytes": MEMORY_BYTES,
                  "groups": [{"offsets": [l * TENSOR for l in range(LAYOUT["layers"])],
                              "num_blocks": NUM_BLOCKS}]}
        reply = expect_error(c.call({"op": "REGISTER", "rank": 0,
                                     "layout": {"device_layout": "per_layer", "groups": [LAYOUT]},
                                     "memory": memory}), "invalid_argument")
        assert "not a memfd" in reply["msg"] and str(path) in reply["msg"]
    finally:
        c.close()
        os.close(fd)
    assert_second_client_served(server)


def test_a_huge_page_memfd_is_refused(server):
    # In a hugetlbfs memfd a client can punch a hole and use up the huge pages that would refill
    # it: the server's next copy there would be SIGBUS.
    size = 2 << 20
    try:
        fd = os.memfd_create("kvtier-pytest-huge", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
                             | os.MFD_HUGETLB)
        os.ftruncate(fd, size)
    except OSError as e:
        pytest.skip(f"no huge-page memfd here: {e}")
    c = Client(server)
    try:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        memory = {"pid": os.getpid(), "fd": fd, "bytes": size,
                  "groups": [{"offsets": [l * TENSOR for l in range(LAYOUT["layers"])],
                              "num_blocks": NUM_BLOCKS}]}
        reply = expect_error(c.call({"op": "REGISTER", "rank": 0,
                                     "layout": {"device_layout": "per_layer", "groups": [LAYOUT]},
                                     "memory": memory}), "invalid_argument")
        assert "MFD_HUGETLB" in reply["msg"]
    finally:
        c.close()
        os.close(fd)
    assert_second_client_served(server)


def test_internal_and_transfer_failed(registered, server):
    c, _ = registered
    expect_error(c.call({"op": "STATS", "hook": "throw"}), "internal")
    expect_error(c.call({"op": "STORE", "keys": [key(300)], "blocks": blocks(0, 1),
                         "hook": "fail_copies"}), "transfer_failed")
    found = c.call({"op": "LOOKUP", "keys": [key(300)]})
    assert found["ok"] and found["hits"] == 0                       # never published
    assert_second_client_served(server)


def test_unprovable_and_busy():
    s = Server()
    try:
        c, memory = Client(s), Memory()
        assert c.register(memory)["ok"]
        c.send_raw([msgpack.packb({"v": 1, "id": 501, "op": "STORE", "keys": [key(400)],
                                     "blocks": blocks(0, 1), "hook": "fail_partway"})])
        expect_error(c.call({"op": "UNREGISTER"}), "busy")           # a transfer in flight
        reply = c.receive(timeout_ms=10000)                           # at the 1 s deadline
        assert reply["id"] == 501
        expect_error(reply, "unprovable")
        other = Client(s)                     # the socket loop still answers everyone
        assert other.call({"op": "PING"})["ok"]
        assert other.call({"op": "STATS"})["slots_quarantined"] == 1
        other.close()
    finally:
        s.stop()


def test_resource_exhausted_and_shutting_down():
    s = Server(["cache.host_bytes=12288"])                         # 4 slots
    try:
        c, memory = Client(s), Memory()
        assert c.register(memory)["ok"]
        keys = [key(600 + i) for i in range(4)]
        assert c.call({"op": "STORE", "keys": keys, "blocks": blocks(0, 4)})["ok"]
        lock = c.call({"op": "LOOKUP", "keys": keys, "lock_ms": 5000})["lock"]
        expect_error(c.call({"op": "STORE", "keys": [key(700)], "blocks": blocks(16, 1)}),
                     "resource_exhausted")                          # every slot read-locked
        assert c.call({"op": "RELEASE", "lock": lock})["ok"]
        assert c.call({"op": "SHUTDOWN"})["ok"]
        # Until the drain ends the process, new work is refused (or the process is gone).
        try:
            reply = c.call({"op": "LOOKUP", "keys": keys}, timeout_ms=500)
            expect_error(reply, "shutting_down")
        except TimeoutError:
            pass
        assert s.process.wait(timeout=10) == 0
    finally:
        s.stop()


# ---------------------------------------------------------------------------- hostile

def test_truncated_memory_never_crashes_the_server(server):
    # POSIX shared memory can be shrunk under the server: it is refused at REGISTER.
    name = f"/kvtier-pytest-{os.getpid()}"
    fd = os.open(f"/dev/shm{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, MEMORY_BYTES)
        c = Client(server)
        memory = {"shm_name": name, "bytes": MEMORY_BYTES,
                  "groups": [{"offsets": [l * TENSOR for l in range(3)],
                              "num_blocks": NUM_BLOCKS}]}
        expect_error(c.call({"op": "REGISTER", "layout": {"device_layout": "per_layer",
                                                          "groups": [LAYOUT]},
                             "memory": memory}), "unsealed_memory")
        os.ftruncate(fd, 0)
        for op in ("STORE", "RETRIEVE"):
            expect_error(c.call({"op": op, "keys": [key(1)], "blocks": blocks(0, 1)}),
                         "not_registered")
        c.close()
    finally:
        os.close(fd)
        os.unlink(f"/dev/shm{name}")
    # Sealed memory cannot shrink at all.
    sealed = Memory()
    with pytest.raises(PermissionError):
        os.ftruncate(sealed.fd, 0)
    sealed.close()
    assert_second_client_served(server)


HOSTILE = [  # name, request fields, code (None: any error), whether the id must be echoed
    ("layout overflowing 64 bits",
     {"op": "REGISTER", "layout": {"device_layout": "per_layer", "groups": [
         dict(LAYOUT, kv_heads=1 << 16, head_dim=1 << 16, dtype_bytes=1 << 16,
              block_size=1 << 16)]}, "memory": {"pid": os.getpid(), "fd": 0, "bytes": 1,
                                                "groups": [{"offsets": [0, 0, 0],
                                                            "num_blocks": 1}]}},
     "invalid_argument", True),
    ("zero layer count", {"op": "REGISTER", "layout": {"device_layout": "per_layer",
                                                       "groups": [dict(LAYOUT, layers=0)]},
                          "memory": {"pid": 1, "fd": 0, "bytes": 1, "groups": []}},
     "invalid_argument", True),
    ("negative lock_ms", {"op": "LOOKUP", "keys": [b"\x00" * 16], "lock_ms": -1}, "malformed",
     True),
    ("negative ttl_ms", {"op": "PIN", "keys": [b"\x00" * 16], "ttl_ms": -1}, "malformed", True),
    ("zero ttl_ms", {"op": "PIN", "keys": [b"\x00" * 16], "ttl_ms": 0}, "invalid_argument",
     True),
    ("ttl_ms past max_pin_ttl_s", {"op": "PIN", "keys": [b"\x00" * 16], "ttl_ms": (1 << 64) - 1},
     "invalid_argument", True),
    ("PIN without ttl_ms", {"op": "PIN", "keys": [b"\x00" * 16]}, "malformed", True),
    ("huge rank", {"op": "REGISTER", "rank": 1 << 40}, "malformed", True),
    ("negative id", {"op": "PING", "id": -5}, "malformed", False),
    ("key of 15 bytes", {"op": "LOOKUP", "keys": [b"\x00" * 15]}, "malformed", True),
    ("keys and blocks differ", {"op": "STORE", "keys": [b"\x00" * 16], "blocks": []},
     "malformed", True),
    ("blocks not integers", {"op": "STORE", "keys": [b"\x00" * 16], "blocks": [["a"] * 4]},
     "malformed", True),
    ("frame over max_frame_bytes", {"op": "LOOKUP", "keys": [b"\x00" * 16] * 300}, "too_large",
     False),
    ("deep nesting", {"op": "LOOKUP", "keys": [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]},
     "malformed", False),
    ("memory naming another process's descriptor", {"op": "REGISTER", "layout": {
        "device_layout": "per_layer", "groups": [LAYOUT]},
        "memory": {"pid": 1, "fd": 0, "bytes": MEMORY_BYTES,
                   "groups": [{"offsets": [0, TENSOR, 2 * TENSOR], "num_blocks": NUM_BLOCKS}]}},
     None, True),
    ("memory naming a missing descriptor", {"op": "REGISTER", "layout": {
        "device_layout": "per_layer", "groups": [LAYOUT]},
        "memory": {"pid": os.getpid(), "fd": 1 << 30, "bytes": MEMORY_BYTES,
                   "groups": [{"offsets": [0, TENSOR, 2 * TENSOR], "num_blocks": NUM_BLOCKS}]}},
     "not_found", True),
]


@pytest.mark.parametrize("name,request_fields,code,echo", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_request_gets_one_decodable_reply(server, name, request_fields, code, echo):
    c = Client(server)
    c.send_raw([msgpack.packb({"v": 1, "id": 4242, **request_fields}, use_bin_type=True)])
    reply = c.receive()
    assert reply["ok"] is False
    if code:
        assert reply["code"] == code, reply
    if echo:
        assert reply["id"] == 4242, reply
    assert c.no_more_replies()
    c.close()
    assert_second_client_served(server)


def test_hostile_batches(server):
    c = Client(server)
    c.send_raw([msgpack.packb([])])                                   # an empty batch
    assert expect_error(c.receive(), "malformed")["id"] == 0
    c.send_raw([msgpack.packb([None] * 1025)])                        # over max_batch
    assert expect_error(c.receive(), "malformed")["id"] == 0
    c.send_raw([msgpack.packb([{"v": 1, "id": 5, "op": "PING"}] * 400)])   # over 4096 bytes
    expect_error(c.receive(), "too_large")
    # Bad elements get their own error, with their id where it could be read.
    c.send_raw([msgpack.packb([{"v": 1, "id": 6, "op": "FROB"}, "x", [[[]]],
                               {"v": 2, "id": 7, "op": "PING"},
                               {"v": 1, "id": 8, "op": "PING"}], use_bin_type=True)])
    assert c.socket.poll(TIMEOUT_MS)
    frame = msgpack.unpackb(c.socket.recv(), raw=False)
    assert [(r["id"], r.get("code")) for r in frame] == [
        (6, "unknown_op"), (0, "malformed"), (0, "malformed"), (7, "unsupported_version"),
        (8, None)]
    assert c.no_more_replies()
    c.close()
    assert_second_client_served(server)


def test_trailing_bytes_are_malformed_and_the_id_is_echoed(server):
    c = Client(server)
    frame = msgpack.packb({"v": 1, "id": 4243, "op": "PING"}, use_bin_type=True) + b"\xc0"
    c.send_raw([frame])
    reply = c.receive()
    assert reply["ok"] is False and reply["code"] == "malformed", reply
    assert reply["id"] == 4243, reply
    assert_second_client_served(server)


def test_invalid_utf8_is_never_echoed(server):
    c = Client(server)
    # A str (not bin) holding bytes that are not UTF-8: a cut "é", then bytes never valid.
    for field in ("op", "hook"):
        request = {"v": 1, "id": 77, "op": "PING", field: b"\xc3(\xff\xfe\xed\xa0\x80"}
        c.send_raw([msgpack.packb(request, use_bin_type=False)])
        reply = c.receive()                     # raw=False: raises on invalid UTF-8
        assert reply["ok"] is False and reply["id"] == 77, reply
        assert c.no_more_replies()
    c.close()
    assert_second_client_served(server)


def test_out_of_order_requests(server):
    c = Client(server)
    expect_error(c.call({"op": "RETRIEVE", "keys": [key(1)], "blocks": blocks(0, 1)}),
                 "not_registered")
    expect_error(c.call({"op": "RELEASE", "lock": 0}), "not_found")
    memory = Memory()
    assert c.register(memory)["ok"]
    assert c.call({"op": "UNREGISTER"})["ok"]
    expect_error(c.call({"op": "UNREGISTER"}), "not_registered")
    c.close()
    memory.close()
    assert_second_client_served(server)


def test_a_field_named_twice_is_malformed(server):
    # Python's dicts cannot repeat a key: the maps are packed entry by entry.
    def packed_map(entries):
        packer = msgpack.Packer(use_bin_type=True)
        return packer.pack_map_header(len(entries)) + b"".join(
            packer.pack(k) + packer.pack(v) for k, v in entries)

    c = Client(server)
    c.send_raw([packed_map([("v", 1), ("id", 4301), ("op", "PING"), ("op", "STATS")])])
    reply = expect_error(c.receive(), "malformed")
    assert "'op' twice" in reply["msg"], reply
    # A repeated list field inside a nested map: its lists would add up past their bounds.
    memory = Memory()
    group = packed_map([("num_blocks", NUM_BLOCKS), ("offsets", [0, TENSOR]),
                        ("offsets", [2 * TENSOR])])
    described = memory.describe()
    packer = msgpack.Packer(use_bin_type=True)
    memory_map = (packer.pack_map_header(4) + packer.pack("pid") + packer.pack(described["pid"]) +
                  packer.pack("fd") + packer.pack(described["fd"]) + packer.pack("bytes") +
                  packer.pack(MEMORY_BYTES) + packer.pack("groups") + packer.pack_array_header(1) +
                  group)
    frame = (packer.pack_map_header(6) + packer.pack("v") + packer.pack(1) + packer.pack("id") +
             packer.pack(4302) + packer.pack("op") + packer.pack("REGISTER") +
             packer.pack("rank") + packer.pack(0) + packer.pack("layout") +
             packer.pack({"device_layout": "per_layer", "groups": [LAYOUT]}) +
             packer.pack("memory") + memory_map)
    c.send_raw([frame])
    reply = expect_error(c.receive(), "malformed")
    assert reply["id"] == 4302 and "'offsets' twice" in reply["msg"], reply
    assert c.no_more_replies()
    c.close()
    memory.close()
    assert_second_client_served(server)


def test_a_transfer_of_too_many_copies_is_refused_before_any_is_made():
    # A layout of 1,536 two-byte tensors with one block a chunk fills a 3 KiB slot with 1,536
    # copies: 2,731 chunks are more copies than one transfer may ask for (4,194,304), 2,730 not.
    s = Server(["server.max_frame_bytes=1048576"])
    try:
        c, memory = Client(s), Memory()
        tensors = 1536
        layout = {"layers": tensors, "kv_heads": 1, "head_dim": 1, "dtype_bytes": 1,
                  "block_size": 1, "blocks_per_chunk": 1}
        described = dict(memory.describe(), groups=[
            {"offsets": [2 * t for t in range(tensors)], "num_blocks": 1}])
        assert c.call({"op": "REGISTER", "rank": 0,
                       "layout": {"device_layout": "per_layer", "groups": [layout]},
                       "memory": described})["ok"]
        over = c.call({"op": "RETRIEVE", "keys": [key(1)] * 2731, "blocks": [[0]] * 2731})
        expect_error(over, "invalid_argument")
        assert "4194304" in over["msg"], over
        # Within the bound the same request is decided on its keys (never stored: not found).
        expect_error(c.call({"op": "RETRIEVE", "keys": [key(1)] * 2730, "blocks": [[0]] * 2730}),
                     "not_found")
        assert c.call({"op": "UNREGISTER"})["ok"]
        c.close()
        memory.close()
    finally:
        s.stop()


def test_a_max_frame_bytes_past_what_the_transport_carries_still_serves():
    # The transport's own bound is 16 x max_frame_bytes, capped at 2 GiB: a setting of 2^60
    # bytes must not wrap that bound to 0 (every frame dropped with its connection).
    s = Server(["server.max_frame_bytes=1048576TiB"])
    try:
        c = Client(s)
        assert c.call({"op": "PING"})["ok"]
        c.close()
    finally:
        s.stop()
