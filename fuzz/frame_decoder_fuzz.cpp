// libFuzzer target for kvtierd's frame decoder: any input must decode to a request or an error
// (never crash, hang, leak or trip a sanitizer), the error must name a protocol error code, and
// a decoded request must survive an encode/decode round trip; the same for the input read as a
// batch frame (each element) and as a reply frame (one reply or a batch of them). The LOOKUP
// frame readers (lookup_frames.h), where they accept the input, read exactly what the decoder
// reads.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kvtier/server/protocol.h"
#include "lookup_frames.h"

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
  // As a batch: every element decodes to a request or an error naming its code, and a decoded
  // one survives a round trip; a frame that is no batch is one error and no element.
  size_t elements = 0;
  const kvtier::Status batch =
      decode_batch(frame, DecodeLimits{.max_frame_bytes = 64 * 1024}, [&](BatchItem item) {
        ++elements;
        if (!item.request) {
          if (split_decode_error(item.request.error()).first.empty()) std::abort();
          return;
        }
        auto again = decode_request(as_bytes(encode_request(*item.request)), DecodeLimits{});
        if (!again || again->id != item.request->id || again->op != item.request->op) std::abort();
      });
  if (!batch && elements != 0) std::abort();
  if (batch && (elements == 0 || elements > kMaxBatchRequests)) std::abort();
  LookupFrame lookups;
  if (read_lookup_frame(frame, DecodeLimits{.max_frame_bytes = 64 * 1024}, lookups)) {
    std::vector<Request> decoded;
    const auto take = [&](const kvtier::Result<Request>& r) {
      if (!r || r->op != Op::kLookup || r->hook != TestHook::kNone) std::abort();
      decoded.push_back(*r);
    };
    if (lookups.batch) {
      if (!decode_batch(frame, DecodeLimits{.max_frame_bytes = 64 * 1024},
                        [&](BatchItem item) { take(item.request); })) {
        std::abort();
      }
    } else {
      take(request);
    }
    if (decoded.size() != lookups.items.size()) std::abort();
    for (size_t i = 0; i < decoded.size(); ++i) {
      const LookupItem& item = lookups.items[i];
      const auto keys = lookups.keys_of(item);
      if (decoded[i].id != item.id || decoded[i].lock_ms != item.lock_ms ||
          !std::ranges::equal(decoded[i].keys, keys)) {
        std::abort();
      }
    }
  }
  std::vector<LookupReplyItem> lookup_replies;
  if (read_lookup_replies(frame, lookup_replies)) {
    auto replies = decode_replies(frame);
    if (!replies || replies->size() != lookup_replies.size()) std::abort();
    for (size_t i = 0; i < replies->size(); ++i) {
      const Reply& a = (*replies)[i];
      const Reply b = lookup_replies[i].to_reply();
      if (a.id != b.id || !a.ok || !a.event.empty() || !(a.fields == b.fields)) std::abort();
    }
  }
  if (auto replies = decode_replies(frame)) {
    std::string body;
    for (const Reply& r : *replies) append_reply(body, r);
    auto again = decode_replies(as_bytes(encode_batch(replies->size(), body)));
    if (!again || again->size() != replies->size()) std::abort();
  }
  return 0;
}
