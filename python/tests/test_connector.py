"""The connector end to end through the Python module: real torch tensors, real copies on the
host device, the scheduler side's verdicts."""

import pickle

import numpy as np
import pytest
import torch

import kvtier
from conftest import NUM_BLOCKS, Rig, small_config

PROMPT = list(range(1, 18))  # 17 tokens: two 8-token chunks and one token to compute


def compute_and_store(rig, request_id, blocks, prompt=PROMPT, seed=0):
    """Request `request_id` computes its prompt into `blocks` (random KV) and is stored."""
    assert rig.scheduler.get_num_new_matched_tokens(request_id, prompt, 0) == (0, False)
    rig.scheduler.update_state_after_alloc(request_id, blocks, 0)
    g = torch.Generator().manual_seed(seed)

    def forward():
        for t in rig.kv:
            t[blocks] = torch.randn(t[blocks].shape, generator=g)

    req = kvtier.ScheduledRequest(request_id, prompt, len(prompt), [], len(prompt))
    meta, _ = rig.step([req], write=forward)
    assert len(meta.stores) == 1 and len(meta.stores[0].chunks) == 2
    # True while its store is in flight: always with whole-request transfers (the store goes
    # at the next step); layer-wise the store went at queue_stores and may be done already.
    rig.scheduler.request_finished(request_id)
    rig.settle()


def test_a_stored_prefix_loads_into_the_registered_tensors(rig):
    compute_and_store(rig, "a", [0, 1, 2, 3, 4])
    assert rig.scheduler.counters()["stores_completed"] == 1
    m = rig.scheduler.get_num_new_matched_tokens("b", PROMPT, 0)
    assert m == kvtier.Match(tokens=16, ask_later=False)
    rig.scheduler.update_state_after_alloc("b", [8, 9, 10, 11, 12], m.tokens)
    loads = []
    for _ in range(10):
        meta, outcome = rig.step()
        loads += outcome.loads
        if loads:
            break
        rig.worker.drain()
    assert loads == [kvtier.LoadFinished("b", 16, "completed")]
    for t in rig.kv:  # the bytes are in the very tensors the engine holds
        assert torch.equal(t[8:12], t[0:4])
        assert not torch.equal(t[0:4], torch.zeros_like(t[0:4]))
        assert torch.equal(t[12], torch.zeros_like(t[12]))
    assert rig.scheduler.request_finished("b") is False
    c = rig.scheduler.counters()
    assert (c["loads_completed"], c["loaded_tokens"], c["jobs_in_flight"]) == (1, 16, 0)
    assert rig.scheduler.cache_counters()["slots_ready"] == 2
    # Layer-wise (the default granularity): one transfer per job and layer.
    assert rig.worker.stats()["completed"] == 2 * rig.config.layout.layers
    rig.scheduler.audit()
    rig.worker.audit()


def load_stored_prefix(r):
    """Request "a" stores PROMPT's chunks; "b" matches them: the step metadata with b's load."""
    compute_and_store(r, "a", [0, 1, 2, 3, 4])
    m = r.scheduler.get_num_new_matched_tokens("b", PROMPT, 0)
    r.scheduler.update_state_after_alloc("b", [8, 9, 10, 11, 12], m.tokens)
    meta = r.scheduler.build_step_metadata(10, [])
    assert len(meta.loads) == 1
    return meta


def test_F10_layerwise_a_layer_has_landed_when_wait_for_layer_load_returns():
    # Every load copy starts late: a forward pass that read a layer before its wait would see
    # zeros where the loaded KV goes.
    r = Rig(small_config("connector.transfer_granularity=layer", "faults.delay_rate=1",
                         "faults.direction=load"))
    try:
        meta = load_stored_prefix(r)
        r.worker.start_load(meta)
        for layer, t in enumerate(r.kv):  # the forward pass, layer by layer
            r.worker.wait_for_layer_load(layer)
            assert torch.equal(t[8:12], t[0:4]), f"layer {layer} read before its load landed"
            r.worker.save_layer(layer)
        r.worker.queue_stores(meta)
        loads = []
        for _ in range(10):
            r.worker.drain()
            loads += r.scheduler.update_from_worker_output([r.worker.take_output()]).loads
            if loads:
                break
        assert loads == [kvtier.LoadFinished("b", 16, "completed")]
        assert r.worker.fault_counts()["delays"] >= r.config.layout.layers
        with pytest.raises(kvtier.Error) as e:
            r.worker.wait_for_layer_load(r.config.layout.layers)
        assert e.value.code == "invalid_argument"
    finally:
        r.worker.close()


def test_F8_a_forward_pass_fence_behind_a_hung_copy_raises_FailStop_within_the_deadline():
    # Every load copy hangs: the layer's fence never passes. The wait ends at the transfer
    # deadline with FailStop (F7), for this call and every later one, instead of never.
    r = Rig(small_config("connector.transfer_granularity=layer", "faults.hang_rate=1",
                         "faults.direction=load", "transfer.transfer_deadline_s=0.3"))
    try:
        r.worker.start_load(load_stored_prefix(r))
        with pytest.raises(kvtier.FailStop) as e:
            r.worker.wait_for_layer_load(0)
        assert "transfer deadline" in e.value.reason
        with pytest.raises(kvtier.FailStop):
            r.worker.start_load(r.scheduler.build_step_metadata(11, []))
        assert r.worker.take_output().fail_stop, "the hung load is unprovable (F8)"
    finally:
        r.worker.close()


def test_step_metadata_crosses_a_process_boundary_as_bytes(rig):
    rig.scheduler.get_num_new_matched_tokens("a", PROMPT, 0)
    rig.scheduler.update_state_after_alloc("a", [0, 1, 2, 3, 4], 0)
    meta = rig.scheduler.build_step_metadata(
        1, [kvtier.ScheduledRequest("a", PROMPT, 17, [], 17)])
    copy = pickle.loads(pickle.dumps(meta))
    assert copy.to_bytes() == meta.to_bytes()
    assert (copy.step, len(copy.stores), copy.flush) == (1, 1, [])
    job = copy.stores[0]
    assert job.request == "a"
    assert [c.blocks for c in job.chunks] == [[0, 1], [2, 3]]
    # The worker runs the copy it got; the scheduler gets the verdict.
    rig.worker.start_load(copy)
    rig.worker.queue_stores(copy)
    rig.worker.drain()
    out = pickle.loads(pickle.dumps(rig.worker.take_output()))
    assert out.finished == [kvtier.JobVerdict(job.job, "completed", "")]
    rig.scheduler.update_from_worker_output([out])
    assert rig.scheduler.counters()["stores_completed"] == 1
    with pytest.raises(kvtier.Error) as e:
        kvtier.StepMetadata.from_bytes(meta.to_bytes()[:-1])
    assert e.value.code == "invalid_argument"


def test_F4_a_failed_load_reports_its_blocks_and_resumes_from_the_first_invalid_one():
    # Loads (host to device) fail at submit; stores do not.
    r = Rig(small_config("faults.submit_failure_rate=1", "faults.direction=load"))
    try:
        compute_and_store(r, "a", [0, 1, 2, 3, 4])
        m = r.scheduler.get_num_new_matched_tokens("b", PROMPT, 0)
        assert m.tokens == 16
        r.scheduler.update_state_after_alloc("b", [8, 9, 10, 11, 12], m.tokens)
        meta = r.scheduler.build_step_metadata(10, [])
        r.worker.start_load(meta)
        r.worker.queue_stores(meta)
        r.worker.drain()
        out = r.worker.take_output()
        assert [v.outcome for v in out.finished] == ["failed"]
        assert out.invalid_blocks == [[8, 9, 10, 11]] and not out.fail_stop
        outcome = r.scheduler.update_from_worker_output([out])
        assert outcome.loads == [kvtier.LoadFinished("b", 0, "failed")]
        assert r.scheduler.counters()["loads_failed"] == 1
        # Layer-wise (the default granularity), each layer's part failed at its submit.
        assert r.worker.fault_counts()["submit_failures"] == r.config.layout.layers
    finally:
        r.worker.close()


def test_F7_an_unprovable_store_raises_FailStop_at_every_later_update():
    # The end marker of every copy cannot be recorded: nothing proves the copies stopped.
    r = Rig(small_config("faults.record_failure_rate=1"))
    try:
        r.scheduler.get_num_new_matched_tokens("a", PROMPT, 0)
        r.scheduler.update_state_after_alloc("a", [0, 1, 2, 3, 4], 0)
        with pytest.raises(kvtier.FailStop) as e:
            # Layer-wise, the store goes (and fails) in its own step; whole requests, a step later.
            r.step([kvtier.ScheduledRequest("a", PROMPT, 17, [], 17)])
            for _ in range(5):
                r.worker.drain()
                r.step()
        assert e.value.reason and r.scheduler.fail_stopped and r.worker.fail_stopped
        assert e.value.reason == r.scheduler.fail_stop_reason
        with pytest.raises(kvtier.FailStop):
            r.step()
        assert r.scheduler.counters()["jobs_unprovable"] == 1
    finally:
        r.worker.close()


def test_bad_calls_are_errors_not_crashes(rig):
    with pytest.raises(kvtier.Error) as e:
        rig.scheduler.update_state_after_alloc("x", [[0], [1]], 0)  # two groups
    assert e.value.code == "invalid_argument"
    for not_a_list in (5, {1}):  # TypeError from Python before, not kvtier.Error
        with pytest.raises(kvtier.Error) as e:
            rig.scheduler.update_state_after_alloc("x", not_a_list, 0)
        assert e.value.code == "invalid_argument"
    with pytest.raises(kvtier.Error):
        rig.scheduler.get_num_new_matched_tokens("x", [1, -2, 3], 0)
    with pytest.raises(kvtier.Error):
        rig.scheduler.build_step_metadata(1, [("not", "a", "request")])
    with pytest.raises(kvtier.Error):
        rig.scheduler.update_from_worker_output([{"rank": 0}])
    bad = kvtier.WorkerOutput(0, [kvtier.JobVerdict(1, "maybe", "")], [[]], False, "")
    with pytest.raises(kvtier.Error):
        rig.scheduler.update_from_worker_output([bad])
    with pytest.raises(kvtier.Error) as e:
        kvtier.Scheduler(small_config("connector.enabled=false"), model="m")
    assert e.value.code == "failed_precondition"


def test_a_call_with_a_bad_rank_changes_nothing(rig):
    # Outputs of a good rank and a bad one: the error comes before any verdict is applied, so
    # the same good output given again finishes the load (none is acknowledged and then lost).
    compute_and_store(rig, "a", [0, 1, 2, 3, 4])
    m = rig.scheduler.get_num_new_matched_tokens("b", PROMPT, 0)
    rig.scheduler.update_state_after_alloc("b", [8, 9, 10, 11, 12], m.tokens)
    rig.n += 1
    rig.worker.start_load(rig.scheduler.build_step_metadata(rig.n, []))
    rig.worker.drain()
    out = rig.worker.take_output()
    assert out.finished, "the load's verdicts"
    with pytest.raises(kvtier.Error) as e:
        rig.scheduler.update_from_worker_output(
            [out, kvtier.WorkerOutput(1, [], [[]], False, "")])
    assert e.value.code == "invalid_argument" and "rank 1" in e.value.message
    assert rig.scheduler.update_from_worker_output([out]).loads == [
        kvtier.LoadFinished("b", 16, "completed")]
    rig.scheduler.audit()


@pytest.mark.parametrize("granularity", ["layer", "request"])
def test_F2_a_job_out_of_range_of_the_tensors_raises_fails_and_leaves_nothing_queued(granularity):
    # The scheduler side does not know how many blocks the worker's tensors hold: blocks past
    # them reach the worker in its metadata. The call that gets them raises, and the job fails
    # (F1: the scheduler side's job ends); nothing of it stays queued to raise again.
    r = Rig(small_config(f"connector.transfer_granularity={granularity}"))
    try:
        r.scheduler.get_num_new_matched_tokens("bad", PROMPT, 0)
        r.scheduler.update_state_after_alloc("bad", [NUM_BLOCKS + b for b in range(5)], 0)
        r.n += 1
        meta = r.scheduler.build_step_metadata(
            r.n, [kvtier.ScheduledRequest("bad", PROMPT, len(PROMPT), [], len(PROMPT))])
        assert len(meta.stores) == 1
        with pytest.raises(kvtier.Error) as e:
            r.worker.start_load(meta)
            r.worker.queue_stores(meta)
        assert e.value.code == "invalid_argument" and "out of range" in e.value.message
        out = r.worker.take_output()
        assert [v.outcome for v in out.finished] == ["failed"]
        r.scheduler.update_from_worker_output([out])
        r.scheduler.request_finished("bad")
        assert r.scheduler.counters()["jobs_in_flight"] == 0
        # The same prompt is stored and loaded back as if the bad step never came.
        compute_and_store(r, "a", [0, 1, 2, 3, 4])
        assert r.scheduler.counters()["stores_completed"] == 1
        m = r.scheduler.get_num_new_matched_tokens("b", PROMPT, 0)
        assert m.tokens == 16
        r.scheduler.update_state_after_alloc("b", [8, 9, 10, 11, 12], m.tokens)
        r.settle()
        assert r.scheduler.counters()["loads_completed"] == 1
        assert r.worker.stats()["failed"] == 0
        r.worker.audit()
        r.scheduler.audit()
    finally:
        r.worker.close()


def test_token_tensors_and_arrays_are_accepted(rig):
    compute_and_store(rig, "a", [0, 1, 2, 3, 4])
    for tokens in (torch.tensor(PROMPT), np.array(PROMPT, dtype=np.uint32),
                   np.array(PROMPT, dtype=np.int32), np.array(PROMPT, dtype=np.int64)):
        assert rig.scheduler.get_num_new_matched_tokens("b", tokens, 0) == (16, False)
    with pytest.raises(kvtier.Error):
        rig.scheduler.get_num_new_matched_tokens("b", np.array([1, -1], dtype=np.int32), 0)
