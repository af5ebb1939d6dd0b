// The tiny model's weights, drawn from ModelConfig::seed with splitmix64. Every tensor has its
// own stream (seeded by seed, layer and tensor name), so a tensor's values do not depend on
// which others exist. Every rank holds all weights (they are small) and uses its slices.
//
// Matrices are row-major [in][out]: y[j] = sum_i x[i] * W[i][j], summed for i = 0, 1, … .
#pragma once

#include <vector>

#include "kvtier/engine/model_config.h"

namespace kvtier::model_internal {

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> wq;         // [hidden][q_heads * head_dim]
  std::vector<float> wk;         // [hidden][kv_heads * head_dim]
  std::vector<float> wv;         // [hidden][kv_heads * head_dim]
  std::vector<float> wo;         // [q_heads * head_dim][hidden]
  std::vector<float> mlp_norm;   // [hidden]
  std::vector<float> w_up;       // [hidden][mlp_dim]
  std::vector<float> w_down;     // [mlp_dim][hidden]
};

struct ModelWeights {
  std::vector<float> embedding;  // [kVocabSize][hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [hidden][kVocabSize]
};

// `config` must be valid.
ModelWeights generate_weights(const ModelConfig& config);

}  // namespace kvtier::model_internal
