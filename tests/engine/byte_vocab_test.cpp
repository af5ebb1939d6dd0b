#include "kvtier/engine/byte_vocab.h"

#include <gtest/gtest.h>

#include "kvtier/engine/model_config.h"

namespace kvtier {
namespace {

TEST(ByteVocab, TokensAreBytesAndRoundTrip) {
  const std::string text = "héllo\n\xe2\x82\xac";  // multi-byte UTF-8
  const std::vector<TokenId> tokens = tokenize(text);
  ASSERT_EQ(tokens.size(), text.size());
  EXPECT_EQ(tokens[1], 0xC3u);
  EXPECT_EQ(detokenize(tokens), text);
  const TokenId bad[] = {65, kVocabSize};
  EXPECT_THROW(detokenize(bad), std::invalid_argument);
}

TEST(ByteVocab, OnlyPrintableAsciiAndNewlineAreGeneratable) {
  int count = 0;
  for (TokenId t = 0; t < kVocabSize; ++t) count += is_generatable(t);
  EXPECT_EQ(count, 95 + 1);
  EXPECT_TRUE(is_generatable('\n'));
  EXPECT_TRUE(is_generatable('~'));
  EXPECT_FALSE(is_generatable('\t'));
  EXPECT_FALSE(is_generatable(0x7F));
  EXPECT_FALSE(is_generatable(0xC3));
}

TEST(ByteVocab, GreedySkipsMaskedTokensAndBreaksTiesLow) {
  std::vector<float> logits(kVocabSize, 0.0f);
  logits[0xC3] = 100.0f;  // masked: never chosen
  logits['b'] = 5.0f;
  logits['a'] = 5.0f;
  EXPECT_EQ(greedy_token(logits), TokenId{'a'});
  logits['z'] = 6.0f;
  EXPECT_EQ(greedy_token(logits), TokenId{'z'});
  std::fill(logits.begin(), logits.end(), -1.0f);
  EXPECT_EQ(greedy_token(logits), TokenId{'\n'});  // all equal: lowest generatable id
  EXPECT_THROW(greedy_token(std::span(logits).first(10)), std::invalid_argument);
}

}  // namespace
}  // namespace kvtier
