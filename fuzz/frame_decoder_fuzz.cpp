// libFuzzer target for kvtierd's frame decoder: any input must decode to a request or an error
// (never crash, hang, leak or trip a sanitizer), the error must name a protocol error code, and
// a decoded request must survive an encode/decode round trip.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "kvtier/server/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::server;
  const std::span<const std::byte> frame(reinterpret_cast<const std::byte*>(data), size);
  uint64_t id = 0;
  auto request = decode_request(frame, DecodeLimits{.max_frame_bytes = 64 * 1024}, &id);
  if (!request) {
    const auto [code, message] = split_decode_error(request.error());
    if (code.empty() || message.size() > kMaxErrorMessage) std::abort();
  } else {
    auto again = decode_request(as_bytes(encode_request(*request)), DecodeLimits{});
    if (!again || again->id != request->id || again->op != request->op) std::abort();
    const bool keyed =
        request->op == Op::kLookup || request->op == Op::kStore || request->op == Op::kRetrieve;
    if (keyed && again->keys != request->keys) std::abort();
  }
  static_cast<void>(decode_reply(frame));
  return 0;
}
