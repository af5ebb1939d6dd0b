// The Redis tier's RESP: commands as it writes them, replies as it parses them (what a server,
// or something that answers like one, sends must never crash or confuse the reader).
#include "redis/redis_reply.h"

#include <gtest/gtest.h>

namespace kvtier::tier_internal {
namespace {

using Type = RedisReply::Type;

TEST(RedisReply, CommandsAreRespArraysOfBulkStringsWithTheTailOutside) {
  const RedisCommand get{.args = {"GET", "k1"}};
  std::string out;
  out.reserve(resp_owned_bytes(get));
  EXPECT_EQ(append_resp_command(get, out), 0u);
  EXPECT_EQ(out, "*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n");
  EXPECT_EQ(out.size(), resp_owned_bytes(get));
  // The tail (a header and a chunk) counts in the last argument's length; it and its "\r\n"
  // are sent apart.
  const std::string chunk(1234, 'x');
  const RedisCommand set{.args = {"SET", "key", "A"}, .tail = {"HDR", chunk}};
  EXPECT_EQ(tail_bytes(set), 1237u);
  const size_t at = append_resp_command(set, out);
  EXPECT_EQ(out.substr(at), "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$1238\r\nA");
  EXPECT_EQ(out.size() - at, resp_owned_bytes(set));
}

TEST(RedisReply, ParsesEveryKindAndNeedsMoreForEveryPrefix) {
  const std::string whole =
      "*3\r\n*3\r\n:0\r\n:5460\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n$-1\r\n+OK\r\n";
  for (size_t n = 0; n < whole.size(); ++n) {
    RedisReply r;
    size_t used = 0;
    EXPECT_EQ(parse_reply(std::string_view(whole).substr(0, n), r, used), ParseStatus::kNeedMore)
        << n;
  }
  RedisReply r;
  size_t used = 0;
  ASSERT_EQ(parse_reply(whole + "-ERR next", r, used), ParseStatus::kDone);
  EXPECT_EQ(used, whole.size());
  ASSERT_EQ(r.type, Type::kArray);
  ASSERT_EQ(r.elements.size(), 3u);
  EXPECT_EQ(r.elements[0].elements[1].integer, 5460);
  EXPECT_EQ(r.elements[0].elements[2].elements[0].text, "127.0.0.1");
  EXPECT_EQ(r.elements[1].type, Type::kNil);
  EXPECT_TRUE(r.elements[2].is_status("OK"));

  ASSERT_EQ(parse_reply("-MOVED 3999 127.0.0.1:6381\r\n", r, used), ParseStatus::kDone);
  EXPECT_TRUE(r.is_error());
  EXPECT_EQ(r.text, "MOVED 3999 127.0.0.1:6381");
  ASSERT_EQ(parse_reply("$5\r\na\r\nbc\r\n", r, used), ParseStatus::kDone);  // binary-safe
  EXPECT_EQ(r.text, "a\r\nbc");
  ASSERT_EQ(parse_reply(":-3\r\n", r, used), ParseStatus::kDone);
  EXPECT_EQ(r.integer, -3);

  long long length = 0;
  EXPECT_EQ(parse_bulk_header("$40", length, used), ParseStatus::kNeedMore);
  ASSERT_EQ(parse_bulk_header("$40\r\nxx", length, used), ParseStatus::kDone);
  EXPECT_EQ(length, 40);
  EXPECT_EQ(used, 5u);
}

TEST(RedisReply, BadRepliesAreErrorsNotCrashes) {
  std::string nested;
  for (int i = 0; i < 20; ++i) nested += "*1\r\n";
  nested += ":1\r\n";
  const std::vector<std::string> bad = {"?what\r\n",
                                        "\r\n",
                                        ":12x\r\n",
                                        ":\r\n",
                                        "$-2\r\n",
                                        "$99999999999\r\n",
                                        "$3\r\nabcXY",
                                        "*-5\r\n",
                                        "*2\r\n:1\r\n%\r\n",
                                        std::string(70000, 'a'),
                                        nested};
  for (const std::string& b : bad) {
    RedisReply r;
    size_t used = 0;
    EXPECT_EQ(parse_reply(b, r, used), ParseStatus::kBad) << b.substr(0, 40);
    EXPECT_FALSE(r.text.empty()) << b.substr(0, 40);  // says why
  }
  long long length = 0;
  size_t used = 0;
  EXPECT_EQ(parse_bulk_header("$x\r\n", length, used), ParseStatus::kBad);
  EXPECT_EQ(parse_bulk_header("+OK\r\n", length, used), ParseStatus::kBad);
}

}  // namespace
}  // namespace kvtier::tier_internal
