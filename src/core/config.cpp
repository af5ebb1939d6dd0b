#include "kvtier/core/config.h"

#include <unistd.h>  // environ
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "config_fields.h"

namespace kvtier {
namespace {

using config_internal::config_fields;
using config_internal::Field;
using config_internal::find_field;
using config_internal::has_section;

std::unexpected<Error> invalid(std::string message) {
  return make_error(ErrorCode::kInvalidArgument, std::move(message));
}

// Names what is known where `key` ("section" or "section.field") was not found, so that a
// typo is one look away.
std::unexpected<Error> unknown(std::string_view key, const std::string& source) {
  const std::string section(key.substr(0, key.find('.')));
  const bool in_known_section = key.find('.') != std::string_view::npos && has_section(section);
  std::vector<std::string> known;
  for (const Field& field : config_fields()) {
    std::string name = in_known_section ? field.name : field.section;
    if (in_known_section && field.section != section) continue;
    if (std::ranges::find(known, name) == known.end()) known.push_back(std::move(name));
  }
  std::string message =
      (key.find('.') == std::string_view::npos ? "unknown section '" : "unknown field '") +
      std::string(key) + "' (" + source + "); known: ";
  for (size_t i = 0; i < known.size(); ++i) message += (i ? ", " : "") + known[i];
  return invalid(std::move(message));
}

// Every error of a field's value reads "<section.field>: <problem> (<source>)".
Status set_field(Config& config, const Field& field, std::string_view text,
                 const std::string& source) {
  if (Status ok = field.set(config, text); !ok) {
    return invalid(field.key() + ": " + ok.error().message + " (" + source + ")");
  }
  return {};
}

std::string at(const std::string& origin, const YAML::Mark& mark) {
  return mark.is_null() ? origin : origin + ":" + std::to_string(mark.line + 1);
}

std::string_view kind(const YAML::Node& node) {
  if (node.IsNull()) return "nothing";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a sequence";
  return "a scalar";
}

// Where each document of a YAML stream starts; the parser's events are otherwise ignored.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;

  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

Status apply_yaml(std::string_view text, const std::string& origin, Config& config) {
  // Counts the documents first, with a parser that must move on at each one: yaml-cpp 0.7's
  // LoadAll() never ends (and allocates until memory runs out) on a document it cannot read past,
  // such as one that starts with ',' (yaml-cpp issue 1040; found by fuzz/config_fuzz.cpp).
  DocumentStarts documents;
  YAML::Node root;
  try {
    std::istringstream stream{std::string(text)};
    YAML::Parser parser(stream);
    while (parser.HandleNextDocument(documents)) {
      const size_t n = documents.marks.size();
      if (n >= 2 && documents.marks[n - 1].pos == documents.marks[n - 2].pos) {
        return invalid("invalid YAML: unexpected content (" + at(origin, documents.marks[n - 1]) +
                       ")");
      }
    }
    if (documents.marks.size() == 1) root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return invalid("invalid YAML: " + e.msg + " (" + at(origin, e.mark) + ")");
  }
  if (documents.marks.size() > 1) {
    return invalid("expected one YAML document, got " + std::to_string(documents.marks.size()) +
                   " (" + at(origin, documents.marks[1]) + ")");
  }
  if (root.IsNull()) return {};  // nothing to override
  if (!root.IsMap()) {
    return invalid("expected a mapping of sections, got " + std::string(kind(root)) + " (" +
                   at(origin, root.Mark()) + ")");
  }
  std::set<std::string> seen;  // yaml-cpp keeps duplicate keys; a second value would be lost
  for (const auto& section : root) {
    const std::string name = section.first.IsScalar() ? section.first.Scalar() : "";
    const std::string where = at(origin, section.first.Mark());
    if (!has_section(name)) return unknown(name, where);
    if (!seen.insert(name).second) {
      return invalid("section '" + name + "' appears twice (" + where + ")");
    }
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap()) {
      return invalid(name + ": expected a mapping of fields, got " +
                     std::string(kind(section.second)) + " (" + where + ")");
    }
    for (const auto& entry : section.second) {
      const std::string key = name + "." + (entry.first.IsScalar() ? entry.first.Scalar() : "");
      const Field* field = find_field(key);
      if (field == nullptr) return unknown(key, at(origin, entry.first.Mark()));
      if (!seen.insert(key).second) {
        return invalid(key + ": set twice (" + at(origin, entry.first.Mark()) + ")");
      }
      if (!entry.second.IsScalar()) {
        return invalid(key + ": expected a value, got " + std::string(kind(entry.second)) + " (" +
                       at(origin, entry.first.Mark()) + ")");
      }
      if (Status ok =
              set_field(config, *field, entry.second.Scalar(), at(origin, entry.second.Mark()));
          !ok) {
        return ok;
      }
    }
  }
  return {};
}

Status apply_env(const std::map<std::string, std::string>& env, Config& config) {
  for (const auto& [var, value] : env) {
    if (!var.starts_with("KVTIER_")) continue;
    const auto field = std::ranges::find(config_fields(), var, &Field::env_var);
    if (field == config_fields().end()) {
      return invalid("unknown environment variable " + var +
                     ": no config field has that name, and KVTIER_* names are reserved for config "
                     "fields");
    }
    if (Status ok = set_field(config, *field, value, "environment variable " + var); !ok) return ok;
  }
  return {};
}

Status apply_overrides(const std::vector<std::string>& overrides, Config& config) {
  for (const std::string& override : overrides) {
    const size_t eq = override.find('=');
    if (eq == std::string::npos) {
      return invalid("--set '" + override + "': expected section.field=value");
    }
    const std::string key = override.substr(0, eq);
    const Field* field = find_field(key);
    if (field == nullptr) return unknown(key, "--set");
    if (Status ok = set_field(config, *field, override.substr(eq + 1), "--set"); !ok) return ok;
  }
  return {};
}

Result<std::string> read_file(const std::filesystem::path& path) {
  const std::string prefix = "cannot read config file '" + path.string() + "': ";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return invalid(prefix + "it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid(prefix + std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) return invalid(prefix + "read error");
  return text;
}

// Plain when YAML reads it back as the same string; double-quoted otherwise.
std::string yaml_scalar(const std::string& text) {
  const bool plain = !text.empty() && text != "null" && text != "Null" && text != "NULL" &&
                     std::ranges::all_of(text, [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' ||
                              c == '-' || c == '+';
                     });
  if (plain) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned char>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// `text` as comment lines of at most `width` characters after "# ".
std::string comment(std::string_view text, std::string_view indent, size_t width) {
  std::string out;
  std::string line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += std::string(indent) + "# " + line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + std::string(word);
    start = end + 1;
  }
  return out + std::string(indent) + "# " + line + "\n";
}

}  // namespace

Status Config::validate() const {
  for (const Field& field : config_fields()) {
    if (Status ok = field.check(*this); !ok) {
      return invalid(field.key() + ": " + ok.error().message);
    }
  }
  if (tiers.probe_max_s < tiers.probe_initial_s) {
    return invalid("tiers.probe_max_s: must be at least tiers.probe_initial_s (" +
                   std::to_string(tiers.probe_initial_s) + "), got " +
                   std::to_string(tiers.probe_max_s));
  }
  if (server.client_timeout_s < 3 * server.heartbeat_interval_s) {
    return invalid("server.client_timeout_s (" + std::to_string(server.client_timeout_s) +
                   ") must be at least 3 x server.heartbeat_interval_s (" +
                   std::to_string(server.heartbeat_interval_s) +
                   "), or live idle clients would be reaped");
  }
  if (engine.stall_timeout_s < 2 * engine.heartbeat_interval_s) {
    return invalid("engine.stall_timeout_s (" + std::to_string(engine.stall_timeout_s) +
                   ") must be at least 2 x engine.heartbeat_interval_s (" +
                   std::to_string(engine.heartbeat_interval_s) +
                   "), or loops that heartbeat on time would be reported stalled (H6)");
  }
  if (!server.curve_server_key.empty() && server.curve_server_key.size() != 40) {
    return invalid("server.curve_server_key: must be a Z85 public key of 40 characters, got " +
                   std::to_string(server.curve_server_key.size()));
  }
  if (!server.curve_server_key.empty() && server.curve_key_file.empty()) {
    return invalid(
        "server.curve_key_file: required with server.curve_server_key (the client's "
        "own key pair; kvtier keygen)");
  }
  if (!server.tenants_file.empty() && server.curve_key_file.empty()) {
    return invalid(
        "server.curve_key_file: required with server.tenants_file (kvtierd's key "
        "pair; kvtier keygen)");
  }
  for (const auto& [key, endpoint] :
       {std::pair{"events.endpoint", &events.endpoint},
        std::pair{"events.replay_endpoint", &events.replay_endpoint}}) {
    if (!endpoint->empty() && !endpoint->starts_with("tcp://") &&
        !endpoint->starts_with("ipc://")) {
      return invalid(std::string(key) + ": must be empty, tcp://host:port or ipc://path, got '" +
                     *endpoint + "'");
    }
  }
  if (events.endpoint.empty() && !events.replay_endpoint.empty()) {
    return invalid("events.replay_endpoint: needs events.endpoint (replay is of published events)");
  }
  return kv_layout().validate();
}

KvLayout Config::kv_layout() const {
  return KvLayout{.device_layout = layout.device_layout,
                  .groups = {KvGroup{.layers = layout.layers,
                                     .kv_heads = layout.kv_heads,
                                     .head_dim = layout.head_dim,
                                     .dtype_bytes = layout.dtype_bytes,
                                     .block_size = layout.block_size,
                                     .blocks_per_chunk = layout.blocks_per_chunk}}};
}

std::map<std::string, std::string> kvtier_environment() {
  std::map<std::string, std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view var(*entry);
    const size_t eq = var.find('=');
    if (var.starts_with("KVTIER_") && eq != std::string_view::npos) {
      env.emplace(var.substr(0, eq), var.substr(eq + 1));
    }
  }
  return env;
}

Result<Config> load_config(const ConfigSources& sources) {
  Config config;
  if (sources.yaml_path) {
    Result<std::string> text = read_file(*sources.yaml_path);
    if (!text) return std::unexpected(text.error());
    if (Status ok = apply_yaml(*text, sources.yaml_path->string(), config); !ok) {
      return std::unexpected(ok.error());
    }
  }
  if (Status ok = apply_env(sources.env, config); !ok) return std::unexpected(ok.error());
  if (Status ok = apply_overrides(sources.overrides, config); !ok) {
    return std::unexpected(ok.error());
  }
  if (Status ok = config.validate(); !ok) return std::unexpected(ok.error());
  return config;
}

Result<Config> parse_config_yaml(std::string_view text) {
  Config config;
  if (Status ok = apply_yaml(text, "<yaml>", config); !ok) return std::unexpected(ok.error());
  if (Status ok = config.validate(); !ok) return std::unexpected(ok.error());
  return config;
}

Result<Config> with_overrides(Config config, const std::vector<std::string>& overrides) {
  if (Status ok = apply_overrides(overrides, config); !ok) return std::unexpected(ok.error());
  if (Status ok = config.validate(); !ok) return std::unexpected(ok.error());
  return config;
}

Result<std::string> config_value(const Config& config, std::string_view key) {
  const Field* field = find_field(key);
  if (field == nullptr) return unknown(key, "config_value");
  return field->get(config);
}

std::string to_yaml(const Config& config) {
  std::string out = comment(
      "kvtier configuration. Every field is optional; docs/config.md lists them with the "
      "environment variables and --set overrides that take precedence over this file.",
      "", 98);
  std::string section;
  for (const Field& field : config_fields()) {
    if (field.section != section) {
      section = field.section;
      out += "\n" + section + ":\n";
    } else {
      out += "\n";
    }
    out += comment(field.doc, "  ", 96) + comment("Accepts: " + field.values, "  ", 96);
    out += "  " + field.name + ": " + yaml_scalar(field.get(config)) + "\n";
  }
  return out;
}

std::vector<ConfigFieldInfo> describe() {
  const Config defaults;
  std::vector<ConfigFieldInfo> infos;
  for (const Field& field : config_fields()) {
    infos.push_back({.key = field.key(),
                     .env_var = field.env_var(),
                     .values = field.values,
                     .default_value = field.get(defaults),
                     .doc = field.doc});
  }
  return infos;
}

}  // namespace kvtier
