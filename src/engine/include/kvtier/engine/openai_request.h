// Parsing and validation of the OpenAI-style request bodies of the frontend:
// POST /v1/completions and POST /v1/chat/completions.
//
// Accepted fields (others are ignored, as OpenAI clients send many):
//   model        string, optional; when present it must name the served model (404 otherwise)
//   prompt       string (completions), the whole prompt; byte-level tokens
//   messages     non-empty array of {"role": string, "content"} (chat), rendered by
//                chat_prompt(); content is a string, an array of text parts ({"type": "text",
//                "text": string}, joined) or null
//   max_tokens   integer in [1, model.max_context], default engine.max_tokens (cut to what fits);
//                the prompt plus max_tokens must fit in model.max_context and in the device
//                memory of one engine core (RequestLimits::max_request_tokens), or the request
//                could never run. max_completion_tokens is the same field (both given: equal)
//   stream       bool, default false
//   stream_options  {"include_usage": bool}: a last chunk carrying usage (OpenAI's)
//   temperature  number, optional, ignored: decoding is greedy
// Fields asking for what this engine does not do are refused unless they ask for the default:
// n and best_of other than 1, echo, logprobs and top_logprobs, a non-empty stop.
// Every rejection names the offending field in RequestError::param.
#pragma once

#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier {

struct CompletionRequest {
  bool chat = false;
  std::string prompt;  // chat: after the template
  uint32_t max_tokens = 0;
  bool stream = false;
  bool include_usage = false;  // stream: a last chunk with usage and no choices
};

struct ChatMessage {
  std::string role;
  std::string content;  // the text parts joined
};

struct RequestLimits {
  std::string model_name;
  uint32_t default_max_tokens = 64;
  uint32_t max_context = 16384;
  // Most prompt + max_tokens whose KV fits the device (max_request_tokens(EngineShape)).
  uint64_t max_request_tokens = UINT64_MAX;
};

// An error answer in OpenAI's shape: {"error": {"message", "type", "param", "code"}}.
struct RequestError {
  int http_status = 400;
  std::string message;
  std::string param;  // the field, empty if none
  std::string type = "invalid_request_error";
  std::string code;  // empty: null
  nlohmann::json body() const;
};

std::expected<CompletionRequest, RequestError> parse_completion_request(
    std::string_view body, bool chat, const RequestLimits& limits);

// The chat template: each message as "<|role|>\n" + content + "\n", then "<|assistant|>\n" to
// open the answer. E.g. [{"role":"user","content":"hi"}] → "<|user|>\nhi\n<|assistant|>\n".
std::string chat_prompt(const std::vector<ChatMessage>& messages);

}  // namespace kvtier
