// HttpEndpoint: how the engine's HTTP servers bind (src/engine/frontend/http_endpoint.cpp).
#include "kvtier/engine/http_endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
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

// What a raw client reads after sending `request` to 127.0.0.1:port, until the server closes
// the connection or 5 s pass without a byte.
std::string exchange_raw(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval timeout{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string answer;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, n);
  }
  ::close(fd);
  return answer;
}

// A body cpp-httplib would read without bound (chunked, or a POST's without a length, read
// until the connection ends) is refused 411 before it is read; a body with a length is served.
TEST(HttpEndpoint, ABodyWithoutALengthIsRefusedBeforeItIsRead) {
  httplib::Server http;
  HttpEndpoint endpoint(http, 4);
  std::atomic<int> handled{0};
  http.Post("/echo", [&](const httplib::Request& req, httplib::Response& res) {
    ++handled;
    res.set_content(req.body, "text/plain");
  });
  const Result<int> port = endpoint.bind("127.0.0.1", 0, "test");
  ASSERT_TRUE(port) << port.error().message;
  std::thread serving([&] { endpoint.run(); });
  // Bodies that never end: an unterminated chunk, and bytes with no length.
  for (const std::string request :
       {"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nhello"}) {
    SCOPED_TRACE(request);
    const std::string answer = exchange_raw(*port, request);
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 411")) << answer;
    EXPECT_NE(answer.find("Content-Length"), std::string::npos) << answer;
  }
  EXPECT_EQ(handled.load(), 0);
  const std::string served = exchange_raw(
      *port,
      "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_TRUE(served.starts_with("HTTP/1.1 200")) << served;
  EXPECT_TRUE(served.ends_with("hello")) << served;
  endpoint.stop();
  serving.join();
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
