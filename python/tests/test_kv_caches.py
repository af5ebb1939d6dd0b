"""Registering KV caches: zero-copy, checked against the layout, kept alive while registered."""

import gc
import weakref

import numpy as np
import pytest
import torch

import kvtier
from conftest import NUM_BLOCKS, Rig, kv_tensors, small_config


def expect_error(code, fn, *args, **kwargs):
    with pytest.raises(kvtier.Error) as e:
        fn(*args, **kwargs)
    assert e.value.code == code, e.value
    return e.value


def test_tensors_are_checked_against_the_layout():
    c = small_config()
    shape = c.layout.kv_cache_shape(NUM_BLOCKS)
    good = kv_tensors(c)
    e = expect_error("invalid_argument", kvtier.Worker, c, good[:1])
    assert "2" in e.message  # two layers
    e = expect_error("invalid_argument", kvtier.Worker, c,
                     [good[0], torch.zeros(NUM_BLOCKS, 2, 4, 1, 9)])
    assert "kv_caches[1]" in e.message and "shape" in e.message
    e = expect_error("invalid_argument", kvtier.Worker, c,
                     [good[0], torch.zeros(shape, dtype=torch.float64)])
    assert "dtype_bytes" in e.message
    strided = torch.zeros(shape[:-1] + (16,))[..., ::2]
    assert strided.shape == shape
    e = expect_error("invalid_argument", kvtier.Worker, c, [good[0], strided])
    assert "contiguous" in e.message
    expect_error("invalid_argument", kvtier.Worker, c, [good[0], [0.0] * 10])
    expect_error("invalid_argument", kvtier.Worker, c, [good[0], bytes(good[1].numel() * 4)])
    # The same memory twice is not two layers.
    expect_error("invalid_argument", kvtier.Worker, c, [good[0], good[0]])
    # Still usable after the failures: nothing was left registered.
    with kvtier.Worker(c, good) as w:
        assert w.num_blocks == NUM_BLOCKS and w.kv_caches[0] is good[0]


def test_a_registered_tensor_lives_until_close():
    c = small_config()
    kv = kv_tensors(c)
    ref = weakref.ref(kv[1])
    w = kvtier.Worker(c, kv)
    del kv
    gc.collect()
    assert ref() is not None  # the worker keeps it
    w.close()
    gc.collect()
    assert ref() is None
    expect_error("failed_precondition", w.take_output)
    w.close()  # twice is fine


def test_a_tensor_whose_memory_moved_is_refused(rig):
    meta = rig.scheduler.build_step_metadata(1, [])
    rig.worker.start_load(meta)
    rig.kv[1].set_(torch.zeros(rig.kv[1].shape))  # points the tensor at other memory
    e = expect_error("failed_precondition", rig.worker.start_load, meta)
    assert "kv_caches[1]" in e.message and "moved" in e.message
    expect_error("failed_precondition", rig.worker.queue_stores, meta)  # and stays refused
    # drain() submits the stores queued for the next step: they would read memory the tensor no
    # longer holds (and publish it as cache).
    expect_error("failed_precondition", rig.worker.drain)


def test_numpy_arrays_and_raw_buffers_register_zero_copy():
    c = small_config()
    shape = c.layout.kv_cache_shape(NUM_BLOCKS)
    arrays = [np.zeros(shape, dtype=np.float32) for _ in range(2)]
    with kvtier.Worker(c, arrays) as w:
        assert w.kv_caches[0] is arrays[0]
        with pytest.raises(ValueError):
            arrays[0].resize(10)  # the worker references it
        meta = kvtier.Scheduler(c, model="m").build_step_metadata(1, [])
        w.start_load(meta)
        arrays[1].resize(10, refcheck=False)  # forced: numpy reallocates
        e = expect_error("failed_precondition", w.start_load, meta)
        assert "kv_caches[1]" in e.message and "moved" in e.message
    raw = [bytearray(int(np.prod(shape)) * 4) for _ in range(2)]
    with kvtier.Worker(c, raw, num_blocks=NUM_BLOCKS) as w:
        assert w.num_blocks == NUM_BLOCKS
    expect_error("invalid_argument", kvtier.Worker, c, [bytes(len(raw[0]))] * 2,
                 num_blocks=NUM_BLOCKS)  # read-only


class ArrayInterface:
    def __init__(self, array):
        self.array = array
        self.__array_interface__ = array.__array_interface__


class ClosesItsWorker:
    """An array interface whose reading closes the Worker set on it: Python code that runs while
    the Worker checks that its registered memory did not move."""

    def __init__(self, array):
        self.array = array
        self.worker = None

    @property
    def __array_interface__(self):
        if self.worker is not None:
            worker, self.worker = self.worker, None
            worker.close()
        return self.array.__array_interface__


def test_a_worker_closed_while_it_checks_its_memory_refuses_the_call():
    c = small_config()
    shape = c.layout.kv_cache_shape(NUM_BLOCKS)
    objs = [ClosesItsWorker(np.zeros(shape, dtype=np.float32)) for _ in range(2)]
    w = kvtier.Worker(c, objs)
    objs[0].worker = w
    expect_error("failed_precondition", w.save_layer, 0)
    assert w.closed
    expect_error("failed_precondition", w.save_layer, 0)


def test_array_interface_objects_register():
    c = small_config()
    shape = c.layout.kv_cache_shape(NUM_BLOCKS)
    objs = [ArrayInterface(np.zeros(shape, dtype=np.float32)) for _ in range(2)]
    with kvtier.Worker(c, objs) as w:
        assert w.kv_caches[1] is objs[1]
    ro = np.zeros(shape, dtype=np.float32)
    ro.flags.writeable = False
    expect_error("invalid_argument", kvtier.Worker, c, [objs[0], ArrayInterface(ro)])


def test_a_prefix_stored_from_numpy_loads_into_numpy():
    c = small_config()
    shape = c.layout.kv_cache_shape(NUM_BLOCKS)
    r = Rig(c, kv=[np.zeros(shape, dtype=np.float32) for _ in range(2)])
    try:
        prompt = list(range(100, 117))
        r.scheduler.get_num_new_matched_tokens("a", prompt, 0)
        r.scheduler.update_state_after_alloc("a", [0, 1, 2, 3, 4], 0)

        def forward():
            for i, a in enumerate(r.kv):
                a[0:5] = np.arange(a[0:5].size, dtype=np.float32).reshape(a[0:5].shape) + i

        r.step([kvtier.ScheduledRequest("a", prompt, 17, [], 17)], write=forward)
        r.scheduler.request_finished("a")
        r.settle()
        m = r.scheduler.get_num_new_matched_tokens("b", prompt, 0)
        r.scheduler.update_state_after_alloc("b", [20, 21, 22, 23, 24], m.tokens)
        r.step()
        r.worker.drain()
        r.step()
        for a in r.kv:
            assert np.array_equal(a[20:24], a[0:4])
    finally:
        r.worker.close()


def test_a_server_mode_worker_allocates_its_kv_caches_itself():
    c = small_config("cache.mode=server")
    e = expect_error("invalid_argument", kvtier.Worker, c, kv_tensors(c))
    assert "kv_caches=None" in e.message
    expect_error("invalid_argument", kvtier.Worker, c, None)  # and needs num_blocks


def test_kvtierd_kv_memory_stays_mapped_while_a_tensor_uses_it(tmp_path):
    # No kvtierd: the worker side starts degraded, but its shared KV memory is there.
    c = small_config("cache.mode=server", f"server.endpoint=ipc://{tmp_path}/none.sock",
                     "server.connect_timeout_s=0.2")
    w = kvtier.Worker(c, None, num_blocks=NUM_BLOCKS)
    shape = c.layout.kv_cache_shape(NUM_BLOCKS)
    kv = [torch.frombuffer(m, dtype=torch.float32).view(shape) for m in w.kv_caches]
    assert len(w.kv_caches) == 2 and len(w.kv_caches[0]) == kv[0].numel() * 4
    w.close()
    del w
    gc.collect()
    kv[1].fill_(3.0)  # still mapped: the tensor keeps the memory alive
    assert float(kv[1].sum()) == 3.0 * kv[1].numel()


def test_a_worker_dropped_without_close_waits_for_its_copies():
    r = Rig(small_config())
    prompt = list(range(1, 18))
    r.scheduler.get_num_new_matched_tokens("a", prompt, 0)
    r.scheduler.update_state_after_alloc("a", [0, 1, 2, 3, 4], 0)
    r.step([kvtier.ScheduledRequest("a", prompt, 17, [], 17)])
    r.worker.start_load(r.scheduler.build_step_metadata(2, []))  # the store is sent
    ref = weakref.ref(r.kv[0])
    del r
    gc.collect()  # the worker's destructor drained the device before it let go
    assert ref() is None
