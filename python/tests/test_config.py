import pickle

import pytest

import kvtier


def test_defaults_and_layout():
    c = kvtier.Config()
    assert c.cache_mode == "local"
    assert c.connector_enabled
    assert c.get("cache.mode") == "local"
    l = c.with_overrides(["layout.block_size=8", "layout.blocks_per_chunk=4"]).layout
    assert (l.block_size, l.blocks_per_chunk, l.chunk_tokens) == (8, 4, 32)
    assert l.kv_cache_shape(10) == (10, 2, 8, l.kv_heads, l.head_dim)
    cross = c.with_overrides(["layout.device_layout=cross_layer"]).layout
    assert cross.device_layout == "cross_layer"
    assert cross.kv_cache_shape(3) == (3, cross.layers, 2, cross.block_size, cross.kv_heads,
                                       cross.head_dim)


def test_from_yaml_with_overrides_in_order():
    c = kvtier.Config.from_yaml("cache:\n  mode: server\nlayout:\n  layers: 3\n",
                                ["layout.layers=5", "layout.layers=6"])
    assert c.cache_mode == "server"
    assert c.layout.layers == 6


def test_load_reads_a_file_then_overrides(tmp_path):
    p = tmp_path / "kvtier.yaml"
    p.write_text("layout:\n  head_dim: 32\n")
    assert kvtier.Config.load(str(p)).layout.head_dim == 32
    assert kvtier.Config.load(str(p), ["layout.head_dim=16"]).layout.head_dim == 16


def test_errors_are_kvtier_errors_with_their_code():
    with pytest.raises(kvtier.Error) as e:
        kvtier.Config.from_yaml("layout:\n  layers: 0\n")
    assert e.value.code == "invalid_argument"
    assert "layout.layers" in e.value.message and "<yaml>:2" in e.value.message
    with pytest.raises(kvtier.Error) as e:
        kvtier.Config().with_overrides(["cache.nope=1"])
    assert e.value.code == "invalid_argument" and "cache.nope" in str(e.value)
    with pytest.raises(kvtier.Error) as e:
        kvtier.Config.load("/nonexistent/kvtier.yaml")
    assert e.value.code == "invalid_argument"
    # A FailStop is not an Error: `except kvtier.Error` never swallows it.
    assert not issubclass(kvtier.FailStop, kvtier.Error)


def test_config_round_trips_through_yaml_and_pickle():
    c = kvtier.Config().with_overrides(["cache.eviction=arc", "layout.layers=7"])
    assert kvtier.Config.from_yaml(c.to_yaml()) == c
    assert pickle.loads(pickle.dumps(c)) == c
    e = pickle.loads(pickle.dumps(kvtier.Error("not_found", "x")))
    assert (e.code, e.message) == ("not_found", "x")


def test_describe_lists_every_field():
    fields = {f["key"]: f for f in kvtier.Config.describe()}
    assert fields["cache.mode"]["default"] == "local"
    assert fields["cache.mode"]["env_var"] == "KVTIER_CACHE_MODE"
    assert len(fields) > 40
