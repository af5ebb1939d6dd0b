"""The PyTorch engine with kvtier on gives the outputs of the same engine with kvtier off, bit
for bit, while it loads shared prefixes instead of computing them; under injected load and
store faults too; and a fail-stop surfaces as kvtier.FailStop."""

import pytest
import torch

import kvtier
from torch_engine import Engine, ForwardInput, TinyDecoder, kvtier_config_for

MODEL = TinyDecoder()
BLOCK = 4
PREFIX = 48  # three 16-token chunks (4 blocks of 4 per chunk)


def prompts():
    g = torch.Generator().manual_seed(7)
    prefix = torch.randint(0, 256, (PREFIX,), generator=g).tolist()
    tail = lambda n: torch.randint(0, 256, (n,), generator=g).tolist()  # noqa: E731
    # Waves of requests: each wave arrives once the one before finished.
    return [
        {"a": prefix + tail(5)},
        {"b": prefix + tail(7), "c": prefix[:32] + tail(3)},
        {"d": prefix + tail(9), "e": tail(20)},
    ]


def config(*overrides):
    return kvtier_config_for(MODEL.config, BLOCK, overrides=["layout.blocks_per_chunk=4",
                                                             *overrides])


def run(kvtier_config, max_tokens=3):
    engine = Engine(MODEL, num_blocks=256, block_size=BLOCK, kvtier_config=kvtier_config)
    try:
        for wave in prompts():
            for rid, prompt in wave.items():
                engine.add_request(rid, prompt, max_tokens)
            engine.run()
        out = {rid: (r.generated, r.logits) for rid, r in engine.requests.items()}
        return out, engine
    finally:
        engine.close()


def assert_bit_identical(got, want):
    assert got.keys() == want.keys()
    for rid in want:
        assert got[rid][0] == want[rid][0], rid
        assert len(got[rid][1]) == len(want[rid][1])
        for a, b in zip(got[rid][1], want[rid][1]):
            assert torch.equal(a, b), rid


@pytest.fixture(scope="module")
def reference():
    out, engine = run(None)
    return out, engine.stats


def test_model_is_batch_invariant():
    """The property the comparisons rest on: a token's logits do not depend on the batch,
    nor on whether earlier KV was computed in the same step."""
    a, b = prompts()[1]["b"], prompts()[1]["c"]
    shape = MODEL.kv_cache_shape(64, BLOCK)
    kv = [torch.zeros(shape) for _ in range(MODEL.config.layers)]
    alone = MODEL.forward([ForwardInput(a, 0, len(a), range(0, 20))], kv)
    kv2 = [torch.zeros(shape) for _ in range(MODEL.config.layers)]
    MODEL.forward([ForwardInput(a, 0, 17, range(0, 20))], kv2)
    split = MODEL.forward([ForwardInput(b, 0, len(b), range(30, 40)),
                           ForwardInput(a, 17, len(a), range(0, 20))], kv2)
    assert torch.equal(split[1], alone[0])


def test_shared_prefix_is_loaded_not_recomputed_and_outputs_are_bit_identical(reference):
    want, off = reference
    got, engine = run(config())
    assert_bit_identical(got, want)
    c = engine.connector.counters()
    # b, d: 48 tokens each; c: 32 (two chunks of its 35-token prompt).
    assert c["loads_completed"] == 3 and c["loaded_tokens"] == 48 + 48 + 32
    assert engine.stats.loaded_tokens == 128
    assert engine.stats.computed_tokens == off.computed_tokens - 128
    assert c["loads_failed"] == c["stores_failed"] == 0 and c["jobs_in_flight"] == 0
    engine.connector.audit()


def test_F4_failed_loads_are_recomputed_and_outputs_stay_bit_identical(reference):
    want, off = reference
    # Load copies fail at submit (part-way) or with an error latched on their stream.
    got, engine = run(config("faults.direction=load", "faults.submit_failure_rate=0.5",
                             "faults.latched_error_rate=0.5", "faults.seed=3"))
    assert_bit_identical(got, want)
    c = engine.connector.counters()
    assert c["loads_failed"] >= 2 and engine.stats.failed_loads == c["loads_failed"]
    assert c["loads_failed"] + c["loads_completed"] == 3
    # What was not loaded was computed.
    assert engine.stats.computed_tokens == off.computed_tokens - engine.stats.loaded_tokens
    assert engine.stats.loaded_tokens < 128
    faults = engine.worker.connector.fault_counts()
    assert faults["submit_failures"] + faults["latched_errors"] >= 2


def test_F3_failed_stores_are_never_served_and_outputs_stay_bit_identical(reference):
    want, _ = reference
    # Store copies fail (submit failures part-way, latched errors); loads do not.
    got, engine = run(config("faults.direction=store", "faults.submit_failure_rate=0.4",
                             "faults.latched_error_rate=0.3", "faults.seed=5"))
    assert_bit_identical(got, want)
    c = engine.connector.counters()
    assert c["stores_failed"] > 0 and c["stores_completed"] > 0
    assert c["loads_failed"] == 0
    cache = engine.connector.cache_counters()
    assert cache["stores_failed"] > 0 and cache["stores_succeeded"] > 0


def test_F3_stores_whose_copies_all_fail_are_never_served(reference):
    want, off = reference
    # Every store copy fails at submit: no slot ever holds what a store was to write.
    got, engine = run(config("faults.direction=store", "faults.submit_failure_rate=1"))
    assert_bit_identical(got, want)
    c = engine.connector.counters()
    assert c["stores_failed"] >= 3 and c["stores_completed"] == 0
    assert c["loads_completed"] == 0 and engine.stats.loaded_tokens == 0
    assert engine.connector.cache_counters()["hits"] == 0
    assert engine.stats.computed_tokens == off.computed_tokens


def test_F7_a_fail_stop_surfaces_as_kvtier_FailStop():
    # No copy can record its end marker: its copies cannot be proven to have stopped.
    with pytest.raises(kvtier.FailStop) as e:
        run(config("faults.record_failure_rate=1"))
    assert "unprovable" in e.value.reason and "store job" in e.value.reason
    assert not isinstance(e.value, kvtier.Error)


def test_the_engine_without_kvtier_never_builds_a_connector():
    engine = Engine(MODEL, kvtier_config=config("connector.enabled=false"))
    assert engine.connector is None and engine.worker.connector is None
    engine.close()
