// libFuzzer target for the messages between the processes of `kvtier serve`: any frame must
// decode to a message body or an error (never crash, hang, leak or trip a sanitizer), and a body
// must encode to a frame that decodes to the same body. The step metadata ("meta" of a step
// message), the worker output ("output" of a done message) and its injected-fault totals
// ("faults") in a body, wherever the input puts them, must decode or throw
// nlohmann::json::exception (the bad-message path of their callers), and a decoded value must keep
// every value the message carried and encode and decode again unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "kvtier/engine/step_messages.h"
#include "kvtier/engine/wire.h"

namespace {

using nlohmann::json;

// Each field of `decoded` (the re-encoded value) that `sent` has holds the value sent.
bool kept(const json& sent, const json& decoded) {
  if (decoded.is_object()) {
    if (!sent.is_object()) return false;
    for (const auto& [name, value] : decoded.items()) {
      if (sent.contains(name) && !kept(sent[name], value)) return false;
    }
    return true;
  }
  if (decoded.is_array()) {
    if (!sent.is_array() || sent.size() != decoded.size()) return false;
    for (size_t i = 0; i < decoded.size(); ++i) {
      if (!kept(sent[i], decoded[i])) return false;
    }
    return true;
  }
  return sent == decoded;
}

// decode(j) either throws a json exception or gives a value that keeps j's values and
// round-trips.
template <class Decode>
void check_typed(const json& j, Decode decode) {
  json encoded;
  try {
    encoded = kvtier::to_json(decode(j));
  } catch (const json::exception&) {
    return;
  }
  if (!kept(j, encoded)) std::abort();
  try {
    if (kvtier::to_json(decode(encoded)) != encoded) std::abort();
  } catch (const json::exception&) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto body = kvtier::decode_message(std::span(data, size));
  if (!body) {
    if (body.error().message.empty()) std::abort();
    return 0;
  }
  // Re-encoding is stable: the bytes of a decoded body decode to bytes that encode the same.
  const std::vector<uint8_t> frame = kvtier::encode_message(*body);
  auto again = kvtier::decode_message(frame);
  if (!again || kvtier::encode_message(*again) != frame) std::abort();

  for (const auto& [name, value] : body->items()) {
    check_typed(value, kvtier::step_metadata_from_json);
    check_typed(value, kvtier::worker_output_from_json);
    check_typed(value, kvtier::injected_fault_counts_from_json);
  }
  check_typed(*body, kvtier::step_metadata_from_json);
  check_typed(*body, kvtier::worker_output_from_json);
  check_typed(*body, kvtier::injected_fault_counts_from_json);
  return 0;
}
