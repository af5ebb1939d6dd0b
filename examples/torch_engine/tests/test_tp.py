"""Two tensor-parallel ranks in two processes (gloo all-reduce), each with its own KV heads,
torch tensors and kvtier.Worker: they agree on every verdict, the shared prefix is loaded, and
the outputs are bit-identical to the same two-rank engine with kvtier off."""

import torch

from test_engine import BLOCK, MODEL, assert_bit_identical, config, prompts
from torch_engine import Engine


def run_tp(tmp_path, name, kvtier_config):
    run_dir = tmp_path / name
    run_dir.mkdir()
    engine = Engine(MODEL, num_blocks=256, block_size=BLOCK, kvtier_config=kvtier_config,
                    world_size=2, run_dir=str(run_dir))
    try:
        for wave in prompts():
            for rid, prompt in wave.items():
                engine.add_request(rid, prompt, 3)
            engine.run()
        return {rid: (r.generated, r.logits) for rid, r in engine.requests.items()}, engine
    finally:
        engine.close()


def test_two_ranks_in_two_processes_agree_on_every_verdict_and_match_kvtier_off(tmp_path):
    want, _ = run_tp(tmp_path, "off", None)
    got, engine = run_tp(tmp_path, "on", config())
    assert_bit_identical(got, want)
    c = engine.connector.counters()
    assert c["loads_completed"] == 3 and c["loaded_tokens"] == 128
    rank0, rank1 = engine.worker.verdicts
    assert rank0 and rank0 == rank1  # every job, the same verdict on both ranks
    assert set(rank0.values()) == {"completed"}
    # Two ranks compute what one rank computes (the heads split, the sums all-reduced): the
    # tokens match the one-rank engine's.
    one = Engine(MODEL, num_blocks=256, block_size=BLOCK)
    try:
        for wave in prompts():
            for rid, prompt in wave.items():
                one.add_request(rid, prompt, 3)
            one.run()
        assert {rid: r.generated for rid, r in one.requests.items()} == {
            rid: g for rid, (g, _) in got.items()}
    finally:
        one.close()
    assert all(isinstance(l, torch.Tensor) for _, ls in got.values() for l in ls)


def test_F9_a_load_failed_on_one_rank_is_failed_for_both_and_recomputed(tmp_path):
    """Each rank draws its own faults (the seed differs per rank): where one rank's load failed
    and the other's completed, the job is failed (F9: a failure is sticky across ranks), its
    tokens are recomputed on both ranks (F4), and the outputs stay bit-identical."""
    want, _ = run_tp(tmp_path, "off", None)
    got, engine = run_tp(tmp_path, "faulty", config("faults.direction=load",
                                                    "faults.submit_failure_rate=0.5",
                                                    "faults.seed=5"))
    assert_bit_identical(got, want)
    rank0, rank1 = engine.worker.verdicts
    assert rank0.keys() == rank1.keys()
    split = [job for job in rank0 if {rank0[job], rank1[job]} == {"completed", "failed"}]
    assert split, f"no job failed on one rank only: {rank0} {rank1}"
    c = engine.connector.counters()
    failed = [job for job in rank0 if "failed" in (rank0[job], rank1[job])]
    assert c["loads_failed"] == len(failed) and c["loads_completed"] == 3 - len(failed)
