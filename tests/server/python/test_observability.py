"""kvtierd as an operator sees it: /metrics and /health on server.metrics_port, `kvtier admin`,
and log lines (docs/operations.md), each against a real kvtierd process and real traffic.

Run: PROTOCOL_TEST_KVTIER=build/apps/kvtier/kvtier /usr/bin/python3 -m pytest -q tests/server/python
"""

import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import msgpack
import pytest

from test_protocol import (SETTINGS, Client, Memory, binary, blocks, expect_error, key,
                           serve_binary, wait_until_answering)

CHUNK_BYTES = 3072  # one chunk of the suite's layout (test_protocol.LAYOUT)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Kvtierd:
    """A kvtierd with its metrics port, its stderr kept in a file (the log lines)."""

    def __init__(self, extra=(), args=()):
        self.endpoint = f"ipc:///tmp/kvtier-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        self.port = free_port()
        self.log = tempfile.TemporaryFile(mode="w+")
        command = [binary(), "--set", f"server.endpoint={self.endpoint}",
                   "--set", f"server.metrics_port={self.port}"]
        for s in list(SETTINGS) + list(extra):
            command += ["--set", s]
        self.process = subprocess.Popen(command + list(args) + ["server", "--test-hooks"],
                                        stderr=self.log)
        probe = Client(self)
        try:
            wait_until_answering(self.process, probe, lambda: ":\n" + self.lines())
        finally:
            probe.close()

    def get(self, path):
        """(HTTP status, body) of GET path on the metrics port."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self):
        status, body = self.get("/metrics")
        assert status == 200
        return parse_metrics(body)

    def health(self):
        status, body = self.get("/health")
        return status, json.loads(body)

    def lines(self):
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if not self.log.closed:
            self.final_lines = self.lines().splitlines()
            self.log.close()


def parse_metrics(text):
    """{(name, ((label, value), ...)): value}, checking the text format on the way."""
    samples = {}
    typed = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge", "untyped"), line
            typed.add(name)
            continue
        if line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)', line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.groups()
        assert name in typed, f"{name} has no # TYPE line"
        pairs = tuple(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', labels or ""))
        samples[(name, pairs)] = float(value)
    return samples


def tenant(samples, name, tenant_name="default", **labels):
    pairs = (("tenant", tenant_name),) + tuple(labels.items())
    return samples.get((name, pairs), 0)


def poll(condition, what, timeout=10):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def kvtierd():
    s = Kvtierd()
    yield s
    s.stop()


def test_metrics_count_each_tenants_traffic_and_rejections_by_code(kvtierd):
    before = kvtierd.metrics()
    assert before[("kvtier_server_healthy", ())] == 1
    assert ("kvtier_tenant_hit_chunks_total", (("tenant", "default"),)) in before

    c, memory = Client(kvtierd), Memory()
    stranger = Client(kvtierd)
    try:
        assert c.register(memory)["ok"]
        assert c.call({"op": "STORE", "keys": [key(1), key(2)], "blocks": blocks(0, 2)})["ok"]
        found = c.call({"op": "LOOKUP", "keys": [key(1), key(2), key(3)]})
        assert found["hits"] == 2
        assert c.call({"op": "RETRIEVE", "keys": [key(1), key(2)], "blocks": blocks(8, 2)})["ok"]
        # Rejected, each with its documented code.
        expect_error(stranger.call({"op": "LOOKUP", "keys": [key(1)]}), "not_registered")
        expect_error(c.call({"op": "RETRIEVE", "keys": [key(9)], "blocks": blocks(0, 1)}),
                     "not_found")
        expect_error(c.call({"op": "RETRIEVE", "keys": [key(1)], "blocks": [[99, 0, 1, 2]]}),
                     "invalid_argument")
        stranger.send_raw([b"\xc1"])                                # not MessagePack
        expect_error(stranger.receive(), "malformed")
        # Evictions: 80 more chunks into a pool of 64 slots.
        for n in range(5):
            keys = [key(1000 + 16 * n + i) for i in range(16)]
            assert c.call({"op": "STORE", "keys": keys, "blocks": [[0, 1, 2, 3]] * 16})["ok"]

        after = kvtierd.metrics()

        def delta(name, **labels):
            return tenant(after, name, **labels) - tenant(before, name, **labels)

        assert delta("kvtier_tenant_lookups_total") == 1
        assert delta("kvtier_tenant_hit_chunks_total") == 2
        assert delta("kvtier_tenant_missed_chunks_total") == 1
        assert delta("kvtier_tenant_stored_bytes_total") == (2 + 80) * CHUNK_BYTES
        assert delta("kvtier_tenant_retrieved_bytes_total") == 2 * CHUNK_BYTES
        assert delta("kvtier_tenant_evicted_chunks_total") == 2 + 80 - 64
        for code in ("not_registered", "not_found", "invalid_argument", "malformed"):
            assert delta("kvtier_tenant_rejected_requests_total", code=code) == 1, code
        assert after[("kvtier_cache_evictions_total", ())] == 2 + 80 - 64
        assert after[("kvtier_server_clients", ())] >= 2

        # STATS carries the same per-tenant counters.
        stats = c.call({"op": "STATS"})
        assert stats["tenant.default.hit_chunks"] == 2
        assert stats["tenant.default.rejected.not_found"] == 1
    finally:
        c.close()
        stranger.close()
        memory.close()


def test_F7_metrics_count_quarantined_slots_of_an_unprovable_transfer(kvtierd):
    c, memory = Client(kvtierd), Memory()
    try:
        assert c.register(memory)["ok"]
        expect_error(c.call({"op": "STORE", "keys": [key(50), key(51)], "blocks": blocks(0, 2),
                             "hook": "fail_partway"}, timeout_ms=10000), "unprovable")
        m = kvtierd.metrics()
        assert tenant(m, "kvtier_tenant_quarantined_slots_total") == 2
        assert tenant(m, "kvtier_tenant_rejected_requests_total", code="unprovable") == 1
    finally:
        c.close()
        memory.close()


def test_H7_health_names_a_down_tier_and_is_503_while_draining():
    dead = free_port()                                            # nothing listens there
    s = Kvtierd(["tiers.redis_url=redis://127.0.0.1:%d" % dead, "tiers.redis_timeout_s=0.2",
                 "transfer.transfer_deadline_s=5"])
    c, memory = Client(s), Memory()
    try:
        assert s.health() == (200, {"status": "ok"})
        assert c.register(memory)["ok"]
        # Its write-behind meets the dead Redis: the tier goes DOWN, requests are still served.
        assert c.call({"op": "STORE", "keys": [key(7)], "blocks": blocks(0, 1)})["ok"]
        poll(lambda: s.health() == (200, {"status": "degraded", "degraded": ["redis"]}),
             "/health never named the DOWN redis tier")
        assert s.metrics()[("kvtier_tier_down", (("tier", "redis"),))] == 1
        assert c.call({"op": "LOOKUP", "keys": [key(7)]})["hits"] == 1

        # A transfer held in flight keeps the drain going after SHUTDOWN: meanwhile 503.
        c.send_raw([msgpack.packb({"v": 1, "id": 900, "op": "STORE", "keys": [key(8)],
                                   "blocks": blocks(4, 1), "hook": "hang_copies"})])
        other = Client(s)
        poll(lambda: other.call({"op": "STATS"})["transfers_in_flight"] == 1,
             "the held STORE never started")
        assert other.call({"op": "SHUTDOWN"})["ok"]
        other.close()
        status, body = s.health()
        assert (status, body["status"]) == (503, "shutting_down")
        assert s.metrics()[("kvtier_server_healthy", ())] == 0
    finally:
        c.close()
        memory.close()
        s.stop()


def test_metrics_port_in_use_is_a_clear_startup_error():
    with socket.socket() as taken:
        # Taken by a server that lets others share the port (SO_REUSEPORT, as cpp-httplib's
        # defaults do): kvtierd must still refuse it, not listen beside it.
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        endpoint = f"ipc:///tmp/kvtier-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock"
        done = subprocess.run([binary(), "--set", f"server.endpoint={endpoint}",
                               "--set", f"server.metrics_port={port}", "server"],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert f"cannot bind the metrics port 127.0.0.1:{port}" in done.stderr, done.stderr


# ---------------------------------------------------------------------------- admin

def test_admin_prints_a_summary_once(kvtierd):
    c, memory = Client(kvtierd), Memory()
    try:
        assert c.register(memory)["ok"]
        assert c.call({"op": "STORE", "keys": [key(1)], "blocks": blocks(0, 1)})["ok"]
        assert c.call({"op": "LOOKUP", "keys": [key(1), key(2)]})["hits"] == 1
        done = subprocess.run([binary(), "admin", "--once", "--endpoint", kvtierd.endpoint],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert f"kvtierd {kvtierd.endpoint}" in done.stdout
        rows = [line.split() for line in done.stdout.splitlines()]
        header = next(r for r in rows if r and r[0] == "tenant")
        row = dict(zip(header, next(r for r in rows if r and r[0] == "default")))
        assert (row["lookups"], row["hit"], row["missed"], row["hit%"]) == ("1", "1", "1", "50.0%")
    finally:
        c.close()
        memory.close()


def test_admin_says_so_when_nothing_answers():
    endpoint = f"ipc:///tmp/kvtier-pytest-nobody-{uuid.uuid4().hex[:8]}.sock"
    started = time.monotonic()
    done = subprocess.run([binary(), "admin", "--once", "--endpoint", endpoint,
                           "--timeout", "0.5"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert f"no reply from kvtierd at {endpoint} within 0.5 s" in done.stderr, done.stderr
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------------------- logs

TEXT_LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) "
                       r"(trace|debug|info|warning|error|critical) kvtierd\[(\d+)\] (.*)")


def unprovable_store(s):
    """A client's mistake (logged at debug), then a transfer that ends Unprovable (an error
    naming its client and request)."""
    c, memory = Client(s), Memory()
    try:
        expect_error(c.call({"op": "LOOKUP", "keys": [key(60)]}), "not_registered")
        assert c.register(memory)["ok"]
        c.send_raw([msgpack.packb({"v": 1, "id": 4242, "op": "STORE", "keys": [key(60)],
                                   "blocks": blocks(0, 1), "hook": "fail_partway"})])
        expect_error(c.receive(timeout_ms=10000), "unprovable")
    finally:
        c.close()
        memory.close()


def test_text_log_lines_carry_time_level_role_and_pid():
    s = Kvtierd()
    try:
        unprovable_store(s)
        pid = s.process.pid
    finally:
        s.stop()
    lines = [l for l in s.final_lines if l]
    assert len(lines) >= 3                                  # started, registered, the error
    for line in lines:
        m = TEXT_LINE.fullmatch(line)
        assert m, f"not a log line: {line!r}"
        assert int(m.group(3)) == pid
    assert not any(" debug " in l for l in lines)           # log.level info by default
    errors = [l for l in lines if " error kvtierd[" in l]
    assert any("unprovable" in l and "tenant=default" in l and "request=4242" in l
               and "client=" in l for l in errors), errors


def test_json_log_lines_parse_and_name_the_request_of_an_error():
    s = Kvtierd(args=["--log-format", "json", "--log-level", "debug"])
    try:
        unprovable_store(s)
        pid = s.process.pid
    finally:
        s.stop()
    records = [json.loads(l) for l in s.final_lines if l]   # every line is one JSON object
    assert records
    for r in records:
        assert r["role"] == "kvtierd" and r["pid"] == pid
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", r["time"])
        assert r["level"] in ("debug", "info", "warning", "error")
    error = next(r for r in records if r["level"] == "error" and r.get("code") == "unprovable")
    assert error["tenant"] == "default" and error["request"] == "4242" and error["client"]
    mistake = next(r for r in records if r["level"] == "debug")   # --log-level debug
    assert mistake["code"] == "not_registered" and mistake["tenant"] == "default"


def children_of(pid):
    """{pid: command line} of every process below pid."""
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == parent and int(entry) not in found:
                found[int(entry)] = cmdline
                frontier.append(int(entry))
    return found


def test_every_process_of_kvtier_serve_logs_json_lines_with_its_role_and_pid():
    log = tempfile.TemporaryFile(mode="w+")
    serve = subprocess.Popen(
        [serve_binary(), "--log-format", "json", "serve", "--port", "0", "--world-size", "2",
         "--set", "engine.heartbeat_interval_s=0.05", "--set", "layout.block_size=16",
         "--set", "layout.blocks_per_chunk=4"],
        stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = serve.stdout.readline()                       # "kvtier: serving … on http://…"
        m = re.search(r"on http://([^:\s]+):(\d+)", line)
        assert m, line
        url = f"http://{m.group(1)}:{m.group(2)}/health"

        def health():
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        poll(lambda: health() == 200, "kvtier serve never became healthy", timeout=60)
        processes = children_of(serve.pid)
        worker = next(p for p, cmd in processes.items() if " worker 0/1 " in cmd + " ")
        os.kill(worker, 9)               # the engine core and the frontend log its death
        poll(lambda: health() == 503, "the worker's death never showed in /health", timeout=30)
        serve.terminate()
        serve.wait(timeout=30)
        log.seek(0)
        records = [json.loads(l) for l in log.read().splitlines() if l]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        log.close()
    roles = {}
    for r in records:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", r["time"])
        assert r["level"] in ("debug", "info", "warning", "error")
        roles.setdefault(r["role"], set()).add(r["pid"])
    core = next(p for p, cmd in processes.items() if " engine-core 0 " in cmd + " ")
    assert roles.get("frontend") == {serve.pid}, roles      # `kvtier serve` execs the frontend
    assert roles.get("engine-core-0") == {core}, roles
    assert set(roles) <= {"serve", "frontend", "engine-core-0", "worker-0/0", "worker-0/1"}, roles
