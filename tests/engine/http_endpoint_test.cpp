// HttpEndpoint: how the engine's HTTP servers bind (src/engine/frontend/http_endpoint.cpp).
#include "kvtier/engine/http_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>

namespace kvtier {
namespace {

// A port in use is an error, as an operator expects: cpp-httplib's default socket options set
// SO_REUSEPORT, with which a second server on the port would be bound beside the first and
// take half its connections.
TEST(HttpEndpoint, APortInUseCannotBeBoundAgain) {
  httplib::Server first_http;
  HttpEndpoint first(first_http);
  const Result<int> port = first.bind("127.0.0.1", 0, "test");
  ASSERT_TRUE(port) << port.error().message;
  httplib::Server second_http;
  HttpEndpoint second(second_http);
  const Result<int> again = second.bind("127.0.0.1", *port, "--port");
  ASSERT_FALSE(again) << "bound port " << *port << " a second time";
  EXPECT_EQ(again.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(again.error().message.find("--port"), std::string::npos) << again.error().message;
}

}  // namespace
}  // namespace kvtier
