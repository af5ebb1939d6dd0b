#include <iostream>

#include "commands.h"

namespace kvtier::cli {

Action add_config_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("config", "Print the effective configuration as YAML");
  auto describe_fields = std::make_shared<bool>(false);
  cmd->add_flag("--describe", *describe_fields,
                "List every field with its environment variable, default and meaning");
  auto markdown = std::make_shared<bool>(false);
  cmd->add_flag("--markdown", *markdown, "Print the field tables of docs/config.md");
  return [cmd, describe_fields, markdown](const Config& config) -> int {
    if (!cmd->parsed()) return -1;
    if (*markdown) {
      std::string section;
      for (const ConfigFieldInfo& f : describe()) {
        const std::string s = f.key.substr(0, f.key.find('.'));
        if (s != section) {
          section = s;
          std::cout << "\n### `" << section << "`\n\n| field | default | accepts | meaning |\n"
                    << "|---|---|---|---|\n";
        }
        std::string values = f.values;
        for (size_t at = values.find('|'); at != std::string::npos; at = values.find('|', at + 2)) {
          values.replace(at, 1, "\\|");
        }
        std::cout << "| `" << f.key << "`<br>`" << f.env_var << "` | `"
                  << (f.default_value.empty() ? "\"\"" : f.default_value) << "` | " << values
                  << " | " << f.doc << " |\n";
      }
      return 0;
    }
    if (!*describe_fields) {
      std::cout << to_yaml(config);
      return 0;
    }
    for (const ConfigFieldInfo& f : describe()) {
      std::cout << f.key << " (" << f.env_var << ", default " << f.default_value << "): " << f.doc
                << "\n";
    }
    return 0;
  };
}

}  // namespace kvtier::cli
