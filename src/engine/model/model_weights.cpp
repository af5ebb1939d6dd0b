#include "model_weights.h"

#include <cmath>
#include <cstdint>
#include <string_view>

namespace kvtier::model_internal {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t tensor_seed(uint64_t seed, uint32_t layer, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  uint64_t state = seed ^ h ^ (uint64_t{layer} << 32);
  return splitmix64(state);
}

// Uniform in [-bound, bound): 24 random bits, exact in float.
std::vector<float> uniform(size_t count, float bound, uint64_t seed) {
  std::vector<float> out(count);
  uint64_t state = seed;
  for (float& v : out) {
    const float u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);
    v = bound * (2.0f * u - 1.0f);
  }
  return out;
}

// Variance 1 / fan_in: keeps activations O(1) through each projection.
float fan_in_bound(uint32_t fan_in) {
  return std::sqrt(3.0f / static_cast<float>(fan_in));
}

}  // namespace

ModelWeights generate_weights(const ModelConfig& c) {
  const uint64_t s = c.seed;
  const size_t q_dim = size_t{c.q_heads} * c.head_dim;
  const size_t kv_dim = size_t{c.kv_heads} * c.head_dim;
  ModelWeights w;
  w.embedding = uniform(size_t{kVocabSize} * c.hidden, 1.0f, tensor_seed(s, 0, "embedding"));
  for (uint32_t l = 0; l < c.layers; ++l) {
    LayerWeights& lw = w.layers.emplace_back();
    lw.attn_norm.assign(c.hidden, 1.0f);
    lw.mlp_norm.assign(c.hidden, 1.0f);
    lw.wq = uniform(c.hidden * q_dim, fan_in_bound(c.hidden), tensor_seed(s, l, "wq"));
    lw.wk = uniform(c.hidden * kv_dim, fan_in_bound(c.hidden), tensor_seed(s, l, "wk"));
    lw.wv = uniform(c.hidden * kv_dim, fan_in_bound(c.hidden), tensor_seed(s, l, "wv"));
    lw.wo = uniform(q_dim * c.hidden, fan_in_bound(q_dim), tensor_seed(s, l, "wo"));
    lw.w_up =
        uniform(size_t{c.hidden} * c.mlp_dim, fan_in_bound(c.hidden), tensor_seed(s, l, "w_up"));
    lw.w_down =
        uniform(size_t{c.mlp_dim} * c.hidden, fan_in_bound(c.mlp_dim), tensor_seed(s, l, "w_down"));
  }
  w.final_norm.assign(c.hidden, 1.0f);
  // Logits with a spread of a few units, so greedy choices depend on the context.
  w.lm_head = uniform(size_t{c.hidden} * kVocabSize, 4.0f * fan_in_bound(c.hidden),
                      tensor_seed(s, 0, "lm_head"));
  return w;
}

}  // namespace kvtier::model_internal
