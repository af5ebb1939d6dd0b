// Byte-level vocabulary of the tiny model: token id == byte value (0..255).
//
// Any byte string is a prompt. Generation is restricted to printable ASCII (0x20..0x7E) and
// '\n', so every generated token sequence detokenizes to valid UTF-8 on its own, whatever
// bytes the prompt held.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/core/chunk_key.h"

namespace kvtier {

std::vector<TokenId> tokenize(std::string_view text);
// Throws std::invalid_argument for a token id >= 256.
std::string detokenize(std::span<const TokenId> tokens);

// Whether the model may generate `token` (the logit mask).
bool is_generatable(TokenId token);

// Greedy decoding: the generatable token with the largest logit; ties go to the lowest id.
// `logits` holds one value per vocabulary entry (kVocabSize, else std::invalid_argument).
TokenId greedy_token(std::span<const float> logits);

}  // namespace kvtier
