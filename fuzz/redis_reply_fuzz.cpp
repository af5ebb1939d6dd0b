// libFuzzer target for the Redis tier's RESP2 code (src/tier/redis/redis_reply.h): the reply
// parser reads whatever a Redis server, or anything listening on its port, sends. No bytes may
// crash, hang, leak or trip a sanitizer, and the parser must agree with itself:
// - A reply parsed whole (kDone, `used` bytes) parses the same from exactly those bytes, and every
//   shorter prefix of them asks for more (kNeedMore): a reply split across reads is never taken
//   for a different one, nor for a bad one.
// - A parsed reply, written back as RESP, parses to the same reply.
// - parse_bulk_header agrees with parse_reply on a bulk string's length.
// - A command from the input's arguments (append_resp_command, its size resp_owned_bytes), with
//   a tail when the first byte says so, followed by that tail and its "\r\n", reads back as an
//   array of those arguments, the tail ending the last one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "redis/redis_reply.h"

namespace {

using kvtier::tier_internal::ParseStatus;
using kvtier::tier_internal::RedisCommand;
using kvtier::tier_internal::RedisReply;
using Type = RedisReply::Type;

void require(bool condition) {
  if (!condition) std::abort();
}

bool same(const RedisReply& a, const RedisReply& b) {
  if (a.type != b.type || a.text != b.text || a.integer != b.integer ||
      a.elements.size() != b.elements.size()) {
    return false;
  }
  for (size_t i = 0; i < a.elements.size(); ++i) {
    if (!same(a.elements[i], b.elements[i])) return false;
  }
  return true;
}

// RESP2 as a server writes it. A nil is written as a nil bulk string (a nil array parses to the
// same reply).
void write(const RedisReply& reply, std::string& out) {
  switch (reply.type) {
    case Type::kStatus:
      out += '+' + reply.text + "\r\n";
      return;
    case Type::kError:
      out += '-' + reply.text + "\r\n";
      return;
    case Type::kInteger:
      out += ':' + std::to_string(reply.integer) + "\r\n";
      return;
    case Type::kString:
      out += '$' + std::to_string(reply.text.size()) + "\r\n" + reply.text + "\r\n";
      return;
    case Type::kNil:
      out += "$-1\r\n";
      return;
    case Type::kArray:
      out += '*' + std::to_string(reply.elements.size()) + "\r\n";
      for (const RedisReply& element : reply.elements) write(element, out);
      return;
  }
}

void check_reply(std::string_view in) {
  RedisReply reply;
  size_t used = 0;
  if (parse_reply(in, reply, used) != ParseStatus::kDone) return;
  require(used > 0 && used <= in.size());
  require(!reply.in_buffers);
  const std::string_view whole = in.substr(0, used);

  RedisReply again;
  size_t used_again = 0;
  require(parse_reply(whole, again, used_again) == ParseStatus::kDone);
  require(used_again == used && same(reply, again));
  // Every prefix of a short reply; of a long one, the first 64 and 64 spread over the rest (each
  // parse is linear: all of them would make an input of 4 KiB cost 16 M steps).
  const size_t step = used <= 128 ? 1 : used / 64;
  for (size_t cut = 0; cut < used; cut += cut < 64 ? 1 : step) {
    RedisReply part;
    size_t part_used = 0;
    require(parse_reply(whole.substr(0, cut), part, part_used) == ParseStatus::kNeedMore);
  }

  std::string written;
  write(reply, written);
  RedisReply reread;
  size_t reread_used = 0;
  require(parse_reply(written, reread, reread_used) == ParseStatus::kDone);
  require(reread_used == written.size() && same(reply, reread));

  if (in.front() == '$') {
    long long length = 0;
    size_t header_used = 0;
    require(kvtier::tier_internal::parse_bulk_header(in, length, header_used) ==
            ParseStatus::kDone);
    require(length == (reply.type == Type::kNil ? -1 : static_cast<long long>(reply.text.size())));
    require(header_used <= used);
  }
}

// Input: byte 0 says whether the last argument's last bytes are sent as a tail; then arguments
// separated by NUL bytes (the last piece is the tail when there is one).
void check_command(std::string_view in) {
  if (in.empty()) return;
  const bool with_tail = (in.front() & 1) != 0;
  std::vector<std::string_view> pieces;
  std::string_view rest = in.substr(1);
  for (;;) {
    const size_t nul = rest.find('\0');
    pieces.push_back(rest.substr(0, nul));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  RedisCommand command;
  if (with_tail && pieces.size() >= 2) {
    command.tail[0] = pieces.back().substr(0, pieces.back().size() / 2);
    command.tail[1] = pieces.back().substr(pieces.back().size() / 2);
    pieces.pop_back();
  }
  command.args = pieces;
  const size_t tail = kvtier::tier_internal::tail_bytes(command);

  std::string out = "junk before";
  const size_t start = kvtier::tier_internal::append_resp_command(command, out);
  require(start == 11 && out.size() - start == kvtier::tier_internal::resp_owned_bytes(command));
  std::string sent = out.substr(start);
  if (tail > 0) {
    sent += command.tail[0];
    sent += command.tail[1];
    sent += "\r\n";
  }
  RedisReply array;
  size_t used = 0;
  require(parse_reply(sent, array, used) == ParseStatus::kDone);
  require(used == sent.size() && array.type == Type::kArray);
  require(array.elements.size() == command.args.size());
  for (size_t i = 0; i < command.args.size(); ++i) {
    std::string expected(command.args[i]);
    if (i + 1 == command.args.size()) {
      expected += command.tail[0];
      expected += command.tail[1];
    }
    require(array.elements[i].type == Type::kString && array.elements[i].text == expected);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  check_reply(in);
  check_command(in);
  return 0;
}
