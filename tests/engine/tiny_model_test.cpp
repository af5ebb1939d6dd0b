// Determinism of the tiny model: chunked prefill, continuing from KV copied in through the
// transfer layer's descriptors, and tensor parallelism all give the same bits as one-shot
// prefill on one rank.
#include "kvtier/engine/tiny_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "engine/model_rig.h"
#include "kvtier/engine/in_process_collective.h"
#include "kvtier/transfer/copy_descriptors.h"

namespace kvtier {
namespace {

using testing::BlockTables;
using testing::CacheMemory;
using testing::generate;
using testing::run_chunked;
using testing::sequence_kv;

constexpr uint32_t kNumBlocks = 67;  // prime: every stride < 67 gives distinct blocks
constexpr uint32_t kTableBlocks = 24;
constexpr uint32_t kNoBlock = 0xFFFFFFFFu;

struct Variant {
  DeviceLayout layout;
  bool hybrid;
};

std::string name_of(const Variant& v) {
  return std::string(v.layout == DeviceLayout::kPerLayer ? "PerLayer" : "CrossLayer") +
         (v.hybrid ? "Hybrid" : "Full");
}
std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  return name_of(info.param);
}
void PrintTo(const Variant& v, std::ostream* os) {
  *os << name_of(v);
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<TokenId> prompt(size_t length) {
  const std::string text =
      "The quick brown fox jumps over the lazy dog. Ünïcödé bytes: \xe2\x82\xac\xf0\x9f\x99\x82 ";
  std::string s;
  while (s.size() < length) s += text;
  return tokenize(std::string_view(s).substr(0, length));
}

class TinyModelTest : public ::testing::TestWithParam<Variant> {
 protected:
  ModelConfig config(uint32_t kv_heads = 2, uint32_t q_heads = 4) const {
    ModelConfig c;
    c.layers = 4;
    c.q_heads = q_heads;
    c.kv_heads = kv_heads;
    c.head_dim = 8;
    c.hidden = 32;
    c.mlp_dim = 64;
    c.max_context = 512;
    c.sliding_window = GetParam().hybrid ? 12 : 0;
    c.seed = 7;
    return c;
  }
  // Group 0: 16-token blocks, 2 per chunk; group 1 (hybrid): 8-token blocks, 4 per chunk.
  KvLayout layout(const ModelConfig& c, uint32_t world_size = 1) const {
    const GroupBlocking blocking[] = {{16, 2}, {8, 4}};
    return model_kv_layout(c, GetParam().layout, std::span(blocking).first(c.num_kv_groups()),
                           world_size);
  }
  BlockTables tables(const ModelConfig& c, uint32_t first, uint32_t stride) const {
    return BlockTables::strided(c.num_kv_groups(), kTableBlocks, first, stride, kNumBlocks);
  }
  // Blocks of each group that hold positions [0, end).
  static uint32_t blocks_for(const KvLayout& l, uint32_t group, uint32_t end) {
    return (end + l.groups[group].block_size - 1) / l.groups[group].block_size;
  }
};

TEST_P(TinyModelTest, ChunkedPrefillIsBitIdenticalToOneShot) {
  const ModelConfig c = config();
  const TinyModel model(c, 0, 1);
  SingleRankCollective one;
  const std::vector<TokenId> tokens = prompt(150);
  CacheMemory whole(layout(c), kNumBlocks), chunked(layout(c), kNumBlocks);
  const BlockTables whole_tables = tables(c, 0, 1), chunked_tables = tables(c, 5, 3);

  const auto whole_logits = run_chunked(model, whole, whole_tables, tokens, 0, {150}, one);
  const auto chunked_logits =
      run_chunked(model, chunked, chunked_tables, tokens, 0, {1, 7, 33, 16, 5}, one);
  EXPECT_TRUE(bits_equal(whole_logits, chunked_logits));
  for (uint32_t g = 0; g < c.num_kv_groups(); ++g) {
    const uint32_t blocks = blocks_for(whole.layout(), g, 150);
    EXPECT_EQ(sequence_kv(whole, g, whole_tables, blocks),
              sequence_kv(chunked, g, chunked_tables, blocks))
        << "group " << g;
  }

  std::vector<TokenId> whole_seq = tokens, chunked_seq = tokens;
  const auto a = generate(model, whole, whole_tables, whole_seq, whole_logits, 10, one);
  const auto b = generate(model, chunked, chunked_tables, chunked_seq, chunked_logits, 10, one);
  EXPECT_EQ(a, b);
  for (uint32_t g = 0; g < c.num_kv_groups(); ++g) {
    const uint32_t blocks = blocks_for(whole.layout(), g, 159);
    EXPECT_EQ(sequence_kv(whole, g, whole_tables, blocks),
              sequence_kv(chunked, g, chunked_tables, blocks));
  }
}

// Stores the history's chunks from one cache to host slots and loads them into other blocks
// of another cache with the transfer layer's descriptors (executed by memcpy), then continues
// there. A sliding-window group loads only the chunk that holds the window; its earlier table
// entries point nowhere and must never be read.
TEST_P(TinyModelTest, ContinuingFromLoadedKvEqualsRecompute) {
  const ModelConfig c = config();
  const TinyModel model(c, 0, 1);
  SingleRankCollective one;
  const KvLayout kv_layout = layout(c);
  const uint32_t history = 128;  // 4 chunks of 32 tokens in each group
  const std::vector<TokenId> tokens = prompt(160);
  CacheMemory source(kv_layout, kNumBlocks), loaded(kv_layout, kNumBlocks),
      recomputed(kv_layout, kNumBlocks);
  const BlockTables source_tables = tables(c, 3, 1), recomputed_tables = tables(c, 0, 1);
  BlockTables loaded_tables = tables(c, 40, 5);
  run_chunked(model, source, source_tables, std::span(tokens).first(history), 0, {50}, one);

  std::vector<std::byte> host(8 * kv_layout.max_chunk_bytes());
  const HostSlots slots{reinterpret_cast<DeviceAddress>(host.data()), kv_layout.max_chunk_bytes(),
                        8};
  std::vector<ChunkTransfer> stores, loads;
  for (uint32_t g = 0; g < c.num_kv_groups(); ++g) {
    const uint32_t per_chunk = kv_layout.groups[g].blocks_per_chunk;
    const uint32_t first_chunk = g == 1 ? 3 : 0;  // sliding: only the chunk with the window
    for (uint32_t chunk = first_chunk; chunk < 4; ++chunk) {
      const auto at = [&](const BlockTables& t) {
        return std::vector<uint32_t>(t.groups[g].begin() + chunk * per_chunk,
                                     t.groups[g].begin() + (chunk + 1) * per_chunk);
      };
      stores.push_back({.group = g, .blocks = at(source_tables), .slot = g * 4 + chunk});
      loads.push_back({.group = g, .blocks = at(loaded_tables), .slot = g * 4 + chunk});
    }
    if (g == 1) std::fill_n(loaded_tables.groups[1].begin(), 3 * per_chunk, kNoBlock);
  }
  for (auto [caches, direction, chunks] :
       {std::tuple{&source.addresses(), Direction::kStore, &stores},
        std::tuple{&loaded.addresses(), Direction::kLoad, &loads}}) {
    for (const CopyDescriptor& d :
         build_copy_descriptors(kv_layout, *caches, slots, direction, *chunks, true)) {
      std::memcpy(reinterpret_cast<void*>(d.dst), reinterpret_cast<const void*>(d.src), d.bytes);
    }
  }

  const auto loaded_logits = run_chunked(model, loaded, loaded_tables, tokens, history, {32}, one);
  const auto recomputed_logits =
      run_chunked(model, recomputed, recomputed_tables, tokens, 0, {160}, one);
  EXPECT_TRUE(bits_equal(loaded_logits, recomputed_logits));
  std::vector<TokenId> loaded_seq = tokens, recomputed_seq = tokens;
  EXPECT_EQ(
      generate(model, loaded, loaded_tables, loaded_seq, loaded_logits, 8, one),
      generate(model, recomputed, recomputed_tables, recomputed_seq, recomputed_logits, 8, one));
  const uint32_t blocks = blocks_for(kv_layout, 0, 167);
  EXPECT_EQ(sequence_kv(loaded, 0, loaded_tables, blocks),
            sequence_kv(recomputed, 0, recomputed_tables, blocks));
}

TEST_P(TinyModelTest, BatchedForwardEqualsSeparateForwards) {
  const ModelConfig c = config();
  const TinyModel model(c, 0, 1);
  SingleRankCollective one;
  const std::vector<TokenId> a_tokens = prompt(41);
  const std::vector<TokenId> b_tokens = tokenize("A different prompt, long enough to chunk it.");
  ASSERT_EQ(b_tokens.size(), 44u);
  CacheMemory batched(layout(c), kNumBlocks), separate(layout(c), kNumBlocks);
  const BlockTables a_tables = tables(c, 0, 1), b_tables = tables(c, 30, 1);
  // Step 1: prefill a[0, 40) and b[0, 25); step 2: decode a[40], prefill b[25, 44).
  const std::pair<uint32_t, uint32_t> a_steps[] = {{0, 40}, {40, 1}};
  const std::pair<uint32_t, uint32_t> b_steps[] = {{0, 25}, {25, 19}};
  for (int step = 0; step < 2; ++step) {
    const auto input = [](const std::vector<TokenId>& tokens, std::pair<uint32_t, uint32_t> range,
                          const BlockTables& t) {
      return ForwardInput{.start = range.first,
                          .tokens = std::span(tokens).subspan(range.first, range.second),
                          .block_tables = t.spans()};
    };
    const ForwardInput both[] = {input(a_tokens, a_steps[step], a_tables),
                                 input(b_tokens, b_steps[step], b_tables)};
    const auto together = model.forward_batch(both, batched.layout(), batched.addresses(), one);
    ASSERT_EQ(together.size(), 2u);
    for (int seq = 0; seq < 2; ++seq) {
      const auto alone = model.forward(both[seq], separate.layout(), separate.addresses(), one);
      EXPECT_TRUE(bits_equal(together[seq], alone)) << "step " << step << " sequence " << seq;
    }
  }
  for (uint32_t g = 0; g < c.num_kv_groups(); ++g) {
    for (const BlockTables* t : {&a_tables, &b_tables}) {
      const uint32_t blocks = blocks_for(batched.layout(), g, 44);
      EXPECT_EQ(sequence_kv(batched, g, *t, blocks), sequence_kv(separate, g, *t, blocks));
    }
  }
  EXPECT_THROW(model.forward_batch({}, batched.layout(), batched.addresses(), one),
               std::invalid_argument);
}

// Every world_size the config allows gives the same logits bits and tokens.
TEST_P(TinyModelTest, TensorParallelRanksGiveTheSameOutputForEveryWorldSize) {
  const ModelConfig c = config(/*kv_heads=*/4, /*q_heads=*/8);
  const std::vector<TokenId> tokens = prompt(70);
  std::vector<std::vector<float>> logits_by_world;
  std::vector<std::vector<TokenId>> output_by_world;
  for (uint32_t world : {1u, 2u, 4u}) {
    InProcessCollectiveGroup group(world);
    std::vector<std::vector<float>> logits(world);
    std::vector<std::vector<TokenId>> output(world);
    std::vector<std::jthread> ranks;
    for (uint32_t r = 0; r < world; ++r) {
      ranks.emplace_back([&, r] {
        const TinyModel model(c, r, world);
        CacheMemory cache(layout(c, world), kNumBlocks);
        const BlockTables t = tables(c, r, 1);
        std::vector<TokenId> seq = tokens;
        logits[r] = run_chunked(model, cache, t, tokens, 0, {32}, group.rank(r));
        output[r] = generate(model, cache, t, seq, logits[r], 12, group.rank(r));
      });
    }
    ranks.clear();  // join
    for (uint32_t r = 1; r < world; ++r) {
      EXPECT_TRUE(bits_equal(logits[0], logits[r])) << "world " << world << " rank " << r;
      EXPECT_EQ(output[0], output[r]);
    }
    logits_by_world.push_back(logits[0]);
    output_by_world.push_back(output[0]);
  }
  for (size_t i = 1; i < logits_by_world.size(); ++i) {
    EXPECT_TRUE(bits_equal(logits_by_world[0], logits_by_world[i])) << "world index " << i;
    EXPECT_EQ(output_by_world[0], output_by_world[i]);
  }
}

TEST_P(TinyModelTest, GeneratedTextIsPrintableAsciiAndDependsOnThePrompt) {
  const ModelConfig c = config();
  const TinyModel model(c, 0, 1);
  SingleRankCollective one;
  std::vector<std::string> texts;
  for (const char* p : {"\xf0\x9f\x99\x82 caf\xc3\xa9 \xff\xfe", "Hello, world"}) {
    CacheMemory cache(layout(c), kNumBlocks);
    const BlockTables t = tables(c, 0, 1);
    std::vector<TokenId> seq = tokenize(p);
    const auto logits = run_chunked(model, cache, t, seq, 0, {64}, one);
    const std::string text = detokenize(generate(model, cache, t, seq, logits, 48, one));
    for (unsigned char ch : text) {
      EXPECT_TRUE(ch == '\n' || (ch >= 0x20 && ch < 0x7F)) << int(ch);  // ASCII => valid UTF-8
    }
    texts.push_back(text);
  }
  EXPECT_NE(texts[0], texts[1]);
}

TEST_P(TinyModelTest, BadForwardArgumentsThrow) {
  const ModelConfig c = config();
  const TinyModel model(c, 0, 1);
  SingleRankCollective one;
  CacheMemory cache(layout(c), kNumBlocks);
  const std::vector<TokenId> tokens = prompt(40);
  const BlockTables t = tables(c, 0, 1);
  const auto run = [&](uint32_t start, std::span<const TokenId> toks, const BlockTables& bt,
                       const KvLayout& l, Collective& coll) {
    model.forward({.start = start, .tokens = toks, .block_tables = bt.spans()}, l,
                  cache.addresses(), coll);
  };
  EXPECT_THROW(run(0, {}, t, cache.layout(), one), std::invalid_argument);
  EXPECT_THROW(run(500, tokens, t, cache.layout(), one), std::invalid_argument);  // > context
  const TokenId out_of_vocab[] = {kVocabSize};
  EXPECT_THROW(run(0, out_of_vocab, t, cache.layout(), one), std::invalid_argument);
  ModelConfig other = config(/*kv_heads=*/4, /*q_heads=*/8);
  EXPECT_THROW(run(0, tokens, t, layout(other), one), std::invalid_argument);
  BlockTables short_tables = t;
  short_tables.groups[0].resize(2);  // 32 positions of 40
  EXPECT_THROW(run(0, tokens, short_tables, cache.layout(), one), std::invalid_argument);
  BlockTables outside = t;
  outside.groups[0][1] = kNumBlocks;
  EXPECT_THROW(run(0, tokens, outside, cache.layout(), one), std::out_of_range);
  InProcessCollectiveGroup two(2);
  EXPECT_THROW(run(0, tokens, t, cache.layout(), two.rank(0)), std::invalid_argument);
  EXPECT_THROW(TinyModel(c, 1, 1), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TinyModelTest,
                         ::testing::Values(Variant{DeviceLayout::kPerLayer, false},
                                           Variant{DeviceLayout::kCrossLayer, false},
                                           Variant{DeviceLayout::kPerLayer, true},
                                           Variant{DeviceLayout::kCrossLayer, true}),
                         variant_name);

}  // namespace
}  // namespace kvtier
