#include <iostream>

#include "commands.h"

namespace kvtier::cli {

Action add_config_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("config", "Print the effective configuration as YAML");
  auto describe_fields = std::make_shared<bool>(false);
  cmd->add_flag("--describe", *describe_fields,
                "List every field with its environment variable, default and meaning");
  return [cmd, describe_fields](const Config& config) -> int {
    if (!cmd->parsed()) return -1;
    if (!*describe_fields) {
      std::cout << to_yaml(config);
      return 0;
    }
    for (const ConfigFieldInfo& f : describe()) {
      std::cout << f.key << " (" << f.env_var << ", default " << f.default_value
                << "): " << f.doc << "\n";
    }
    return 0;
  };
}

}  // namespace kvtier::cli
