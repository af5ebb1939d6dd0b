#include "redis_reply.h"

#include <charconv>

namespace kvtier::tier_internal {
namespace {

size_t decimal_digits(size_t n) {
  size_t digits = 1;
  while (n >= 10) {
    n /= 10;
    ++digits;
  }
  return digits;
}

void append_decimal(std::string& out, size_t n) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
  out.append(digits, end);
}

// The line at the front of `in`, without its "\r\n"; kNeedMore until the "\r\n" is there.
ParseStatus take_line(std::string_view in, std::string_view& line, size_t& used) {
  const size_t end = in.find("\r\n");
  if (end == std::string_view::npos) {
    // A line longer than this is not one Redis sends (errors are short, numbers shorter).
    return in.size() > (size_t{64} << 10) ? ParseStatus::kBad : ParseStatus::kNeedMore;
  }
  line = in.substr(0, end);
  used = end + 2;
  return ParseStatus::kDone;
}

bool to_integer(std::string_view text, long long& value) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

// "<len>" of "$<len>": -1 (nil) up to kMaxBulkBytes.
bool bulk_length(std::string_view text, long long& length) {
  return to_integer(text, length) && length >= -1 &&
         length <= static_cast<long long>(kMaxBulkBytes);
}

ParseStatus bad(RedisReply& reply, std::string what) {
  reply = RedisReply{.type = RedisReply::Type::kError, .text = std::move(what)};
  return ParseStatus::kBad;
}

}  // namespace

size_t tail_bytes(const RedisCommand& command) {
  return command.tail[0].size() + command.tail[1].size();
}

size_t resp_owned_bytes(const RedisCommand& command) {
  const size_t tail = tail_bytes(command);
  size_t bytes = 1 + decimal_digits(command.args.size()) + 2;
  for (size_t i = 0; i < command.args.size(); ++i) {
    const bool last = i + 1 == command.args.size();
    const size_t length = command.args[i].size() + (last ? tail : 0);
    bytes += 1 + decimal_digits(length) + 2 + command.args[i].size();
    if (!last || tail == 0) bytes += 2;
  }
  return bytes;
}

size_t append_resp_command(const RedisCommand& command, std::string& out) {
  const size_t tail = tail_bytes(command);
  const size_t start = out.size();
  out += '*';
  append_decimal(out, command.args.size());
  out += "\r\n";
  for (size_t i = 0; i < command.args.size(); ++i) {
    const bool last = i + 1 == command.args.size();
    out += '$';
    append_decimal(out, command.args[i].size() + (last ? tail : 0));
    out += "\r\n";
    out += command.args[i];
    // After a tail, the connection sends its "\r\n".
    if (!last || tail == 0) out += "\r\n";
  }
  return start;
}

ParseStatus parse_bulk_header(std::string_view in, long long& length, size_t& used) {
  std::string_view line;
  if (in.empty()) return ParseStatus::kNeedMore;
  if (in.front() != '$') return ParseStatus::kBad;
  const ParseStatus status = take_line(in, line, used);
  if (status != ParseStatus::kDone) return status;
  return bulk_length(line.substr(1), length) ? ParseStatus::kDone : ParseStatus::kBad;
}

ParseStatus parse_reply(std::string_view in, RedisReply& reply, size_t& used, int depth) {
  using Type = RedisReply::Type;
  if (in.empty()) return ParseStatus::kNeedMore;
  if (depth > kMaxReplyDepth) return bad(reply, "reply nested too deep");
  std::string_view line;
  ParseStatus status = take_line(in, line, used);
  if (status == ParseStatus::kBad) return bad(reply, "reply line too long");
  if (status == ParseStatus::kNeedMore) return status;
  if (line.empty()) return bad(reply, "empty reply line");
  const char kind = line.front();
  const std::string_view rest = line.substr(1);
  switch (kind) {
    case '+':
    case '-':
      reply =
          RedisReply{.type = kind == '+' ? Type::kStatus : Type::kError, .text = std::string(rest)};
      return ParseStatus::kDone;
    case ':':
      reply = RedisReply{.type = Type::kInteger};
      return to_integer(rest, reply.integer) ? ParseStatus::kDone : bad(reply, "bad integer");
    case '$': {
      long long length = 0;
      if (!bulk_length(rest, length)) return bad(reply, "bad bulk length");
      if (length == -1) {
        reply = RedisReply{.type = Type::kNil};
        return ParseStatus::kDone;
      }
      const auto n = static_cast<size_t>(length);
      if (in.size() - used < n + 2) return ParseStatus::kNeedMore;
      if (in.substr(used + n, 2) != "\r\n") return bad(reply, "bulk string not ended by CRLF");
      reply = RedisReply{.type = Type::kString, .text = std::string(in.substr(used, n))};
      used += n + 2;
      return ParseStatus::kDone;
    }
    case '*': {
      long long count = 0;
      if (!to_integer(rest, count) || count < -1 || count > (1 << 20)) {
        return bad(reply, "bad array length");
      }
      if (count == -1) {
        reply = RedisReply{.type = Type::kNil};
        return ParseStatus::kDone;
      }
      RedisReply array{.type = Type::kArray};
      // Elements as they parse: a count alone allocates nothing.
      for (long long e = 0; e < count; ++e) {
        RedisReply element;
        size_t element_used = 0;
        status = parse_reply(in.substr(used), element, element_used, depth + 1);
        if (status == ParseStatus::kBad) {
          reply = std::move(element);
          return status;
        }
        if (status == ParseStatus::kNeedMore) return status;
        used += element_used;
        array.elements.push_back(std::move(element));
      }
      reply = std::move(array);
      return ParseStatus::kDone;
    }
    default:
      return bad(reply, std::string("unknown reply type '") + kind + "'");
  }
}

}  // namespace kvtier::tier_internal
