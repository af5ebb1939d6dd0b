#include "kvtier/engine/tiny_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention.h"
#include "model_math.h"
#include "model_weights.h"
#include "paged_kv.h"

namespace kvtier {

using model_internal::HeadKv;
using model_internal::PagedKv;

// Named, not anonymous: ForwardPass::State (declared in the header) holds these.
namespace forward_internal {

// What one rank owns: contiguous ranges of KV heads (with their query heads) and MLP units.
struct RankSlice {
  uint32_t kv_begin, kv_count;
  uint32_t q_begin, q_count;
  uint32_t mlp_begin, mlp_count;
};

RankSlice slice_of(const ModelConfig& c, uint32_t rank, uint32_t world_size) {
  const uint32_t kv = c.kv_heads / world_size;
  const uint32_t q = kv * (c.q_heads / c.kv_heads);
  const uint32_t mlp = c.mlp_dim / world_size;
  return {rank * kv, kv, rank * q, q, rank * mlp, mlp};
}

// cos / sin of every rotary angle of each row's position: [rows][head_dim / 2].
void rope_tables(std::span<const uint32_t> positions, uint32_t head_dim, std::vector<float>& cos,
                 std::vector<float>& sin) {
  const uint32_t half = head_dim / 2;
  cos.resize(positions.size() * half);
  sin.resize(positions.size() * half);
  for (size_t i = 0; i < positions.size(); ++i) {
    for (uint32_t j = 0; j < half; ++j) {
      const double angle =
          static_cast<double>(positions[i]) * std::pow(10000.0, -2.0 * j / head_dim);
      cos[i * half + j] = static_cast<float>(std::cos(angle));
      sin[i * half + j] = static_cast<float>(std::sin(angle));
    }
  }
}

// One sequence of a batch: rows [row, row + n) of the activations, positions [start, start + n).
struct Segment {
  uint32_t row = 0;
  uint32_t n = 0;
  uint32_t start = 0;
  std::vector<PagedKv> groups;  // indexed by KV-cache group
};

// Scratch of one forward call.
struct Activations {
  std::vector<float> x, xn, q, k, v, attn, act, delta, cos, sin, scores, head_out;
  HeadKv head_kv;
};

}  // namespace forward_internal

using forward_internal::Activations;
using forward_internal::RankSlice;
using forward_internal::rope_tables;
using forward_internal::Segment;
using forward_internal::slice_of;

TinyModel::TinyModel(const ModelConfig& config, uint32_t rank, uint32_t world_size)
    : config_(config), rank_(rank), world_size_(world_size) {
  if (auto ok = config.validate_for(world_size); !ok) {
    throw std::invalid_argument(ok.error().message);
  }
  if (rank >= world_size) {
    throw std::invalid_argument("rank " + std::to_string(rank) + " >= world_size " +
                                std::to_string(world_size));
  }
  weights_ = std::make_unique<const model_internal::ModelWeights>(
      model_internal::generate_weights(config));
}

TinyModel::~TinyModel() = default;
TinyModel::TinyModel(TinyModel&&) noexcept = default;

std::vector<float> TinyModel::forward(const ForwardInput& input, const KvLayout& layout,
                                      const KvCacheAddresses& cache, Collective& collective) const {
  return std::move(forward_batch(std::span(&input, 1), layout, cache, collective)[0]);
}

struct ForwardPass::State {
  const TinyModel* model = nullptr;
  const KvLayout* layout = nullptr;
  Collective* collective = nullptr;
  RankSlice s{};
  std::vector<Segment> segments;
  std::vector<uint32_t> positions;
  Activations a;
  uint32_t next_layer = 0;
};

ForwardPass::ForwardPass(std::unique_ptr<State> state) : state_(std::move(state)) {}
ForwardPass::ForwardPass(ForwardPass&&) noexcept = default;
ForwardPass& ForwardPass::operator=(ForwardPass&&) noexcept = default;
ForwardPass::~ForwardPass() = default;

uint32_t ForwardPass::layers() const {
  return state_->model->config().layers;
}
uint32_t ForwardPass::group_of(uint32_t layer) const {
  return state_->model->config().group_of_layer(layer);
}
uint32_t ForwardPass::index_in_group(uint32_t layer) const {
  return state_->model->config().index_in_group(layer);
}

std::vector<std::vector<float>> TinyModel::forward_batch(std::span<const ForwardInput> inputs,
                                                         const KvLayout& layout,
                                                         const KvCacheAddresses& cache,
                                                         Collective& collective) const {
  ForwardPass pass = begin(inputs, layout, cache, collective);
  for (uint32_t l = 0; l < config_.layers; ++l) pass.run_layer(l);
  return pass.logits();
}

ForwardPass TinyModel::begin(std::span<const ForwardInput> inputs, const KvLayout& layout,
                             const KvCacheAddresses& cache, Collective& collective) const {
  if (inputs.empty()) throw std::invalid_argument("TinyModel::forward_batch: no sequences");
  for (const ForwardInput& input : inputs) check(input, layout, cache, collective);
  const ModelConfig& c = config_;
  const model_internal::ModelWeights& w = *weights_;
  auto state = std::make_unique<ForwardPass::State>();
  state->model = this;
  state->layout = &layout;
  state->collective = &collective;
  state->s = slice_of(c, rank_, world_size_);
  const RankSlice& s = state->s;
  const size_t hidden = c.hidden, hd = c.head_dim;
  const size_t q_local = size_t{s.q_count} * hd, kv_local = size_t{s.kv_count} * hd;
  std::vector<Segment>& segments = state->segments;
  std::vector<uint32_t>& positions = state->positions;
  Activations& a = state->a;
  for (const ForwardInput& input : inputs) {
    Segment& seg = segments.emplace_back();
    seg.row = static_cast<uint32_t>(positions.size());
    seg.n = static_cast<uint32_t>(input.tokens.size());
    seg.start = input.start;
    for (uint32_t g = 0; g < c.num_kv_groups(); ++g) {
      seg.groups.emplace_back(layout.device_layout, layout.groups[g], cache.groups[g],
                              input.block_tables[g]);
    }
    for (uint32_t i = 0; i < seg.n; ++i) {
      positions.push_back(input.start + i);
      const float* row = w.embedding.data() + size_t{input.tokens[i]} * hidden;
      a.x.insert(a.x.end(), row, row + hidden);
    }
  }
  const size_t rows = positions.size();
  rope_tables(positions, c.head_dim, a.cos, a.sin);
  a.xn.resize(rows * hidden);
  a.q.resize(rows * q_local);
  a.k.resize(rows * kv_local);
  a.v.resize(rows * kv_local);
  a.delta.resize(rows * hidden);
  a.head_out.resize(hd);
  return ForwardPass(std::move(state));
}

void ForwardPass::run_layer(uint32_t l) {
  State& st = *state_;
  if (l != st.next_layer) {
    throw std::logic_error("ForwardPass::run_layer: layer " + std::to_string(l) + ", expected " +
                           std::to_string(st.next_layer));
  }
  ++st.next_layer;
  const ModelConfig& c = st.model->config();
  const model_internal::ModelWeights& w = *st.model->weights_;
  const RankSlice& s = st.s;
  Activations& a = st.a;
  Collective& collective = *st.collective;
  const size_t rows = st.positions.size();
  const size_t hidden = c.hidden, hd = c.head_dim;
  const size_t q_dim = size_t{c.q_heads} * hd, kv_dim = size_t{c.kv_heads} * hd;
  const size_t q_local = size_t{s.q_count} * hd, kv_local = size_t{s.kv_count} * hd;
  const uint32_t q_per_kv = c.q_heads / c.kv_heads;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::vector<Segment>& segments = st.segments;
  {
    const model_internal::LayerWeights& lw = w.layers[l];
    const uint32_t group = c.group_of_layer(l);
    const uint32_t layer_in_group = c.index_in_group(l);
    const uint32_t window = c.window_of_group(group);

    // Attention: this rank's heads. Every row's K/V is written before any row attends.
    model_internal::rms_norm(a.x.data(), rows, hidden, lw.attn_norm.data(), a.xn.data());
    model_internal::matmul(a.xn.data(), rows, hidden, hidden, lw.wq.data(), q_dim, s.q_begin * hd,
                           q_local, a.q.data(), q_local);
    model_internal::matmul(a.xn.data(), rows, hidden, hidden, lw.wk.data(), kv_dim, s.kv_begin * hd,
                           kv_local, a.k.data(), kv_local);
    model_internal::matmul(a.xn.data(), rows, hidden, hidden, lw.wv.data(), kv_dim, s.kv_begin * hd,
                           kv_local, a.v.data(), kv_local);
    for (const Segment& seg : segments) {
      const PagedKv& kv_cache = seg.groups[group];
      for (uint32_t i = 0; i < seg.n; ++i) {
        const size_t r = seg.row + i;
        const float* cos = a.cos.data() + r * hd / 2;
        const float* sin = a.sin.data() + r * hd / 2;
        float* qr = a.q.data() + r * q_local;
        model_internal::apply_rope(qr, s.q_count, hd, cos, sin);
        for (size_t j = 0; j < q_local; ++j) qr[j] *= q_scale;
        model_internal::apply_rope(a.k.data() + r * kv_local, s.kv_count, hd, cos, sin);
        for (uint32_t h = 0; h < s.kv_count; ++h) {
          const float* k = a.k.data() + r * kv_local + h * hd;
          const float* v = a.v.data() + r * kv_local + h * hd;
          std::copy(k, k + hd, kv_cache.head(layer_in_group, 0, seg.start + i, h));
          std::copy(v, v + hd, kv_cache.head(layer_in_group, 1, seg.start + i, h));
        }
      }
    }
    a.attn.assign(rows * q_dim, 0.0f);
    for (const Segment& seg : segments) {
      for (uint32_t h = 0; h < s.kv_count; ++h) {
        a.head_kv.gather(seg.groups[group], layer_in_group, h, c.head_dim,
                         model_internal::window_start(seg.start, window), seg.start + seg.n);
        for (uint32_t j = 0; j < q_per_kv; ++j) {
          const uint32_t local_q = h * q_per_kv + j;
          for (uint32_t i = 0; i < seg.n; ++i) {
            const size_t r = seg.row + i;
            model_internal::attend(a.q.data() + r * q_local + local_q * hd, seg.start + i, window,
                                   a.head_kv, a.scores, a.head_out.data());
            float* dst = a.attn.data() + r * q_dim + (s.q_begin + local_q) * hd;
            for (size_t d = 0; d < hd; ++d) dst[d] = a.head_out[d] + 0.0f;  // never -0.0
          }
        }
      }
    }
    collective.all_reduce_sum(a.attn);  // gathers every head's output
    model_internal::matmul(a.attn.data(), rows, q_dim, q_dim, lw.wo.data(), hidden, 0, hidden,
                           a.delta.data(), hidden);
    for (size_t j = 0; j < a.x.size(); ++j) a.x[j] += a.delta[j];

    // MLP: this rank's units.
    model_internal::rms_norm(a.x.data(), rows, hidden, lw.mlp_norm.data(), a.xn.data());
    a.act.assign(rows * c.mlp_dim, 0.0f);
    model_internal::matmul(a.xn.data(), rows, hidden, hidden, lw.w_up.data(), c.mlp_dim,
                           s.mlp_begin, s.mlp_count, a.act.data() + s.mlp_begin, c.mlp_dim);
    for (size_t r = 0; r < rows; ++r) {
      float* u = a.act.data() + r * c.mlp_dim + s.mlp_begin;
      for (uint32_t j = 0; j < s.mlp_count; ++j) {
        u[j] = u[j] / (1.0f + std::exp(-u[j])) + 0.0f;  // SiLU; never -0.0
      }
    }
    collective.all_reduce_sum(a.act);  // gathers every unit's activation
    model_internal::matmul(a.act.data(), rows, c.mlp_dim, c.mlp_dim, lw.w_down.data(), hidden, 0,
                           hidden, a.delta.data(), hidden);
    for (size_t j = 0; j < a.x.size(); ++j) a.x[j] += a.delta[j];
  }
}

std::vector<std::vector<float>> ForwardPass::logits() {
  State& st = *state_;
  const ModelConfig& c = st.model->config();
  if (st.next_layer != c.layers) {
    throw std::logic_error("ForwardPass::logits: " + std::to_string(c.layers - st.next_layer) +
                           " layers not run");
  }
  const model_internal::ModelWeights& w = *st.model->weights_;
  const size_t hidden = c.hidden;
  Activations& a = st.a;
  std::vector<std::vector<float>> logits;
  std::vector<float> last(hidden);
  for (const Segment& seg : st.segments) {
    model_internal::rms_norm(a.x.data() + (seg.row + seg.n - 1) * hidden, 1, hidden,
                             w.final_norm.data(), last.data());
    std::vector<float>& out = logits.emplace_back(kVocabSize);
    model_internal::matmul(last.data(), 1, hidden, hidden, w.lm_head.data(), kVocabSize, 0,
                           kVocabSize, out.data(), kVocabSize);
  }
  return logits;
}

}  // namespace kvtier
