// HttpEndpoint: how the engine's HTTP servers bind (src/engine/frontend/http_endpoint.cpp).
#include "kvtier/engine/http_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <optional>
#include <thread>

namespace kvtier {
namespace {

// A port in use is an error, as an operator expects: cpp-httplib's default socket options set
// SO_REUSEPORT, with which a second server on the port would be bound beside the first and
// take half its connections.
TEST(HttpEndpoint, APortInUseCannotBeBoundAgain) {
  httplib::Server first_http;
  HttpEndpoint first(first_http, 4);
  const Result<int> port = first.bind("127.0.0.1", 0, "test");
  ASSERT_TRUE(port) << port.error().message;
  httplib::Server second_http;
  HttpEndpoint second(second_http, 4);
  const Result<int> again = second.bind("127.0.0.1", *port, "--port");
  ASSERT_FALSE(again) << "bound port " << *port << " a second time";
  EXPECT_EQ(again.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(again.error().message.find("--port"), std::string::npos) << again.error().message;
}

// At most max_requests slots at once; one more is refused (and counted) until a slot is given
// back.
TEST(HttpEndpoint, H1_AdmitsAtMostItsRequestsInFlight) {
  httplib::Server http;
  HttpEndpoint endpoint(http, 2);
  std::optional<HttpEndpoint::RequestSlot> first = endpoint.admit();
  std::optional<HttpEndpoint::RequestSlot> second = endpoint.admit();
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(endpoint.admit());
  EXPECT_EQ(endpoint.refused(), 1u);
  HttpEndpoint::RequestSlot moved = std::move(*first);
  first.reset();
  EXPECT_FALSE(endpoint.admit()) << "a moved slot still holds its place";
  { HttpEndpoint::RequestSlot gone = std::move(moved); }
  EXPECT_TRUE(endpoint.admit()) << "a slot given back makes room";
  EXPECT_EQ(endpoint.refused(), 2u);
}

// A stop that comes before the server listens (a SIGTERM right after start) still ends it: run()
// then returns at once instead of serving for good.
TEST(HttpEndpoint, AStopBeforeRunEndsIt) {
  httplib::Server http;
  HttpEndpoint endpoint(http, 4);
  ASSERT_TRUE(endpoint.bind("127.0.0.1", 0, "test"));
  endpoint.stop();
  auto served = std::async(std::launch::async, [&] { endpoint.run(); });
  const bool returned = served.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!returned) http.stop();  // it listens: end it, so that the test can end
  EXPECT_TRUE(returned) << "run() after stop() kept serving";
}

// And a stop while run() is on its way to listening, or listening, ends it too.
TEST(HttpEndpoint, AStopRightAfterRunStartsEndsIt) {
  for (int i = 0; i < 50; ++i) {
    httplib::Server http;
    HttpEndpoint endpoint(http, 4);
    ASSERT_TRUE(endpoint.bind("127.0.0.1", 0, "test"));
    auto served = std::async(std::launch::async, [&] { endpoint.run(); });
    endpoint.stop();
    const bool returned = served.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    if (!returned) http.stop();
    ASSERT_TRUE(returned) << "try " << i << ": the stop was lost";
  }
}

}  // namespace
}  // namespace kvtier
