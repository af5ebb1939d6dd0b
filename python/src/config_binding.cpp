// kvtier.Config (load_config, parse_config_yaml, overrides) and kvtier.Layout (the layout
// section as the KV caches' shape).
#include <pybind11/operators.h>

#include <optional>
#include <string>
#include <vector>

#include "binding.h"

namespace kvtier::python {
namespace {

// One tensor's shape: [num_blocks, 2, block_size, kv_heads, head_dim] per layer, or
// [num_blocks, layers, 2, block_size, kv_heads, head_dim] for the cross-layer layout.
py::tuple kv_cache_shape(const KvLayout& layout, uint32_t num_blocks) {
  const KvGroup& g = layout.groups.at(0);
  if (layout.device_layout == DeviceLayout::kPerLayer) {
    return py::make_tuple(num_blocks, 2, g.block_size, g.kv_heads, g.head_dim);
  }
  return py::make_tuple(num_blocks, g.layers, 2, g.block_size, g.kv_heads, g.head_dim);
}

}  // namespace

void bind_config(py::module_& m) {
  py::class_<KvLayout>(m, "Layout",
                       "The shape of the KV cache one rank holds (the config's layout "
                       "section). Read-only.")
      .def_property_readonly(
          "device_layout",
          [](const KvLayout& l) { return std::string(to_string(l.device_layout)); },
          "\"per_layer\": one tensor per layer; \"cross_layer\": one tensor for all layers.")
      .def_property_readonly("layers", [](const KvLayout& l) { return l.groups.at(0).layers; })
      .def_property_readonly("kv_heads", [](const KvLayout& l) { return l.groups.at(0).kv_heads; })
      .def_property_readonly("head_dim", [](const KvLayout& l) { return l.groups.at(0).head_dim; })
      .def_property_readonly("dtype_bytes",
                             [](const KvLayout& l) { return l.groups.at(0).dtype_bytes; })
      .def_property_readonly("block_size",
                             [](const KvLayout& l) { return l.groups.at(0).block_size; })
      .def_property_readonly("blocks_per_chunk",
                             [](const KvLayout& l) { return l.groups.at(0).blocks_per_chunk; })
      .def_property_readonly(
          "chunk_tokens", [](const KvLayout& l) { return l.groups.at(0).chunk_tokens(); },
          "Tokens per offload chunk: the granularity of hits, loads and stores.")
      .def_property_readonly("chunk_bytes",
                             [](const KvLayout& l) { return l.groups.at(0).chunk_bytes(); })
      .def_property_readonly("block_bytes",
                             [](const KvLayout& l) { return l.groups.at(0).block_bytes(); })
      .def_property_readonly("groups", [](const KvLayout& l) { return l.groups.size(); })
      .def("kv_cache_shape", &kv_cache_shape, py::arg("num_blocks"),
           "The shape each KV-cache tensor must have: [num_blocks, 2, block_size, kv_heads, "
           "head_dim] per layer (per_layer), or [num_blocks, layers, 2, block_size, kv_heads, "
           "head_dim] (cross_layer).")
      .def("__repr__", [](const KvLayout& l) {
        const KvGroup& g = l.groups.at(0);
        return "kvtier.Layout(" + std::string(to_string(l.device_layout)) +
               ", layers=" + std::to_string(g.layers) + ", kv_heads=" + std::to_string(g.kv_heads) +
               ", head_dim=" + std::to_string(g.head_dim) +
               ", dtype_bytes=" + std::to_string(g.dtype_bytes) +
               ", block_size=" + std::to_string(g.block_size) +
               ", blocks_per_chunk=" + std::to_string(g.blocks_per_chunk) + ")";
      });

  py::class_<Config>(m, "Config",
                     "kvtier's configuration (docs/config.md): every field validated. Build "
                     "one with from_yaml() or load(); Config() is the defaults. Immutable: "
                     "with_overrides() returns a new one.")
      .def(py::init<>(), "The default configuration.")
      .def_static(
          "from_yaml",
          [](const std::string& text, const std::vector<std::string>& overrides) {
            Config c = value_or_raise(parse_config_yaml(text));
            return value_or_raise(with_overrides(std::move(c), overrides));
          },
          py::arg("text"), py::arg("overrides") = std::vector<std::string>{},
          "Defaults overlaid with one YAML document, then \"section.field=value\" overrides "
          "in order. Raises kvtier.Error(invalid_argument) naming the field and where it was "
          "set.")
      .def_static(
          "load",
          [](std::optional<std::string> path, const std::vector<std::string>& overrides,
             bool environment) {
            ConfigSources sources{.overrides = overrides};
            if (path) sources.yaml_path = *path;
            if (environment) sources.env = kvtier_environment();
            return value_or_raise(load_config(sources));
          },
          py::arg("path") = py::none(), py::arg("overrides") = std::vector<std::string>{},
          py::arg("environment") = false,
          "Defaults, then the YAML file at `path`, then (with environment=True) this "
          "process's KVTIER_* variables, then the overrides: the precedence of the kvtier "
          "CLI. Raises kvtier.Error.")
      .def(
          "with_overrides",
          [](const Config& c, const std::vector<std::string>& overrides) {
            return value_or_raise(with_overrides(c, overrides));
          },
          py::arg("overrides"), "A copy with \"section.field=value\" overrides applied in order.")
      .def(
          "get",
          [](const Config& c, const std::string& key) {
            return value_or_raise(config_value(c, key));
          },
          py::arg("key"), "One field's value as text, e.g. get(\"cache.mode\") -> \"local\".")
      .def("to_yaml", &to_yaml,
           "Every field as a YAML document that from_yaml() reads back as this config.")
      .def_property_readonly("layout", &Config::kv_layout, "The layout section as a Layout.")
      .def_property_readonly(
          "cache_mode", [](const Config& c) { return std::string(to_string(c.cache.mode)); },
          "\"local\" (an in-process host pool) or \"server\" (kvtierd).")
      .def_property_readonly(
          "connector_enabled", [](const Config& c) { return c.connector.enabled; },
          "Whether the connector offloads at all (connector.enabled).")
      .def_static(
          "describe",
          [] {
            py::list out;
            for (const ConfigFieldInfo& f : describe()) {
              py::dict d;
              d["key"] = f.key;
              d["env_var"] = f.env_var;
              d["values"] = f.values;
              d["default"] = f.default_value;
              d["doc"] = f.doc;
              out.append(d);
            }
            return out;
          },
          "Every field: key, env_var, values, default, doc (as docs/config.md lists them).")
      .def(py::self == py::self)
      .def("__repr__",
           [](const Config& c) {
             return "kvtier.Config(cache.mode=" + std::string(to_string(c.cache.mode)) +
                    ", connector.enabled=" + (c.connector.enabled ? "true" : "false") + ")";
           })
      .def(py::pickle(
          [](const Config& c) { return to_yaml(c); },
          [](const std::string& yaml) { return value_or_raise(parse_config_yaml(yaml)); }));
}

}  // namespace kvtier::python
