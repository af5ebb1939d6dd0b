// kvtierd's HTTP port (/health, /metrics: MetricsHttp) started and stopped at once, as a kvtierd
// that gets SIGTERM right after it started does.
#include "metrics_http.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

// cpp-httplib's own stop() does nothing until its listen loop has begun: a stop right after
// start() must still end the thread, or kvtierd never exits.
TEST(MetricsHttp, AStopRightAfterStartEndsIt) {
  const Server server(ServerOptions{});
  for (int i = 0; i < 50; ++i) {
    MetricsHttp http(server);
    ASSERT_TRUE(http.start("127.0.0.1", 0));
    http.stop();  // hangs here when the stop is lost
  }
}

}  // namespace
}  // namespace kvtier::server
