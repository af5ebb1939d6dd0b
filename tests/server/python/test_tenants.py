"""kvtierd's access control and tenants from Python (docs/operations.md, docs/protocol.md
"Security and tenants"): a kvtierd with a tenants file requires CURVE (pyzmq's curve options);
a client whose key no tenant lists is never served; a tenant never hits another tenant's chunks;
a sharing group shares; pins are bounded and expire.

Run: PROTOCOL_TEST_KVTIER=build/apps/kvtier/kvtier /usr/bin/python3 -m pytest -q tests/server/python
"""

import os
import stat
import subprocess
import time
import uuid

import pytest
import zmq

from test_protocol import (SETTINGS, Client, Memory, binary, blocks, expect_error,
                           key, wait_until_answering)


class CurveClient(Client):
    """A Client whose DEALER is a CURVE client with `keys` (public, secret), or none."""

    def __init__(self, server, keys):
        self.context = zmq.Context.instance()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.ROUTING_ID, b"py-" + os.urandom(8))
        self.socket.setsockopt(zmq.IMMEDIATE, 1)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDTIMEO, 200)
        if keys is not None:
            self.socket.curve_serverkey = server.public_key
            self.socket.curve_publickey, self.socket.curve_secretkey = keys
        self.socket.connect(server.endpoint)


class CurveServer:
    """kvtierd with CURVE: its key pair from `kvtier keygen`, tenants alice and carol (sharing
    group "prompts"), bob, and dave (2 pins)."""

    def __init__(self, directory):
        self.endpoint = f"ipc:///tmp/kvtier-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        key_file = os.path.join(directory, "server.key")
        printed = subprocess.run([binary(), "keygen", key_file], check=True, capture_output=True,
                                 text=True).stdout.strip()
        assert len(printed) == 40, printed
        assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
        self.public_key = printed.encode()
        self.keys = {name: zmq.curve_keypair() for name in ("alice", "bob", "carol", "dave")}
        entry = lambda name, extra="": (f"  {name}: {{keys: [\"{self.keys[name][0].decode()}\"]"
                                        f"{extra}}}\n")
        tenants_file = os.path.join(directory, "tenants.yaml")
        with open(tenants_file, "w") as f:
            f.write("tenants:\n" + entry("alice") + entry("bob") + entry("carol") +
                    entry("dave", ", max_pins: 2") + "sharing_groups:\n  prompts: [alice, carol]\n")
        args = [binary(), "--set", f"server.endpoint={self.endpoint}",
                "--set", f"server.tenants_file={tenants_file}",
                "--set", f"server.curve_key_file={key_file}"]
        for s in SETTINGS:
            args += ["--set", s]
        self.process = subprocess.Popen(args + ["server"])
        probe = self.client("alice")
        wait_until_answering(self.process, probe)
        probe.close()

    def client(self, name):
        return CurveClient(self, self.keys[name] if name else None)

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def curve_server(tmp_path_factory):
    s = CurveServer(str(tmp_path_factory.mktemp("keys")))
    yield s
    s.stop()


def registered(server, name):
    c, memory = server.client(name), Memory()
    assert c.register(memory)["ok"]
    return c, memory


def test_a_client_whose_key_no_tenant_lists_is_refused(curve_server):
    stranger = CurveClient(curve_server, zmq.curve_keypair())
    plain = curve_server.client(None)
    for c in (stranger, plain):
        with pytest.raises(TimeoutError):
            c.call({"op": "PING"}, timeout_ms=500)
        c.close()
    alice = curve_server.client("alice")
    assert alice.call({"op": "STATS"})["auth_refused"] >= 1
    alice.close()


def test_a_tenant_never_hits_or_loads_another_tenants_chunks(curve_server):
    (alice, a_mem), (bob, b_mem) = registered(curve_server, "alice"), registered(curve_server, "bob")
    for b in range(4):
        a_mem.fill(b, 70 + b)
    assert alice.call({"op": "STORE", "keys": [key(7)], "blocks": blocks(0, 1)})["ok"]
    assert alice.call({"op": "LOOKUP", "keys": [key(7)]})["hits"] == 1
    assert bob.call({"op": "LOOKUP", "keys": [key(7)]})["hits"] == 0
    expect_error(bob.call({"op": "RETRIEVE", "keys": [key(7)], "blocks": blocks(8, 1)}),
                 "not_found")
    for c, m in ((alice, a_mem), (bob, b_mem)):
        assert c.call({"op": "UNREGISTER"})["ok"]
        c.close()
        m.close()


def test_a_sharing_group_shares_its_chunks(curve_server):
    (alice, a_mem), (carol, c_mem) = (registered(curve_server, "alice"),
                                      registered(curve_server, "carol"))
    for b in range(4):
        a_mem.fill(b, 90 + b)
    assert alice.call({"op": "STORE", "keys": [key(9)], "blocks": blocks(0, 1)})["ok"]
    assert carol.call({"op": "LOOKUP", "keys": [key(9)]})["hits"] == 1
    assert carol.call({"op": "RETRIEVE", "keys": [key(9)], "blocks": blocks(8, 1)})["ok"]
    for b in range(4):
        assert c_mem.block(8 + b) == a_mem.block(b)
    for c, m in ((alice, a_mem), (carol, c_mem)):
        assert c.call({"op": "UNREGISTER"})["ok"]
        c.close()
        m.close()


def test_pins_are_bounded_per_tenant_and_expire(curve_server):
    dave, memory = registered(curve_server, "dave")
    keys = [key(30 + i) for i in range(3)]
    for k in keys:
        assert dave.call({"op": "STORE", "keys": [k], "blocks": blocks(0, 1)})["ok"]
    expect_error(dave.call({"op": "PIN", "keys": keys, "ttl_ms": 60000}), "quota_exceeded")
    assert dave.call({"op": "PIN", "keys": keys[:1], "ttl_ms": 300})["pinned"] == 1
    assert dave.call({"op": "STATS"})["tenant_pinned_keys"] == 1
    # Polled with a deadline, never a fixed sleep: the server releases it on its next turn.
    deadline = time.monotonic() + 10
    while dave.call({"op": "STATS"})["tenant_pinned_keys"] != 0:
        assert time.monotonic() < deadline, "the pin never expired"
        time.sleep(0.02)
    assert dave.call({"op": "STATS"})["pins"] == 0
    assert dave.call({"op": "UNREGISTER"})["ok"]
    dave.close()
    memory.close()
