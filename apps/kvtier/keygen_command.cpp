#include <iostream>

#include "commands.h"
#include "kvtier/server/curve_keys.h"

namespace kvtier::cli {

Action add_keygen_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "keygen",
      "Write a new CURVE key pair for kvtierd or one of its clients (docs/operations.md)");
  auto path = std::make_shared<std::string>();
  cmd->add_option("file", *path,
                  "Key pair file to create (mode 0600; never overwritten). Its public key is "
                  "printed: a client's goes into kvtierd's tenants file, the server's into its "
                  "clients' server.curve_server_key")
      ->required();
  return [cmd, path](const Config&) -> int {
    if (!cmd->parsed()) return -1;
    auto keys = server::generate_curve_key_pair();
    if (!keys) {
      std::cerr << "kvtier keygen: " << keys.error().message << "\n";
      return 1;
    }
    if (Status st = server::write_curve_key_pair(*path, *keys); !st) {
      std::cerr << "kvtier keygen: " << st.error().message << "\n";
      return 1;
    }
    std::cout << keys->public_key << "\n";
    return 0;
  };
}

}  // namespace kvtier::cli
