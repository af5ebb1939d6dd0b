// The OpenAI-shaped JSON answers of the frontend: whole responses and server-sent-event chunks
// of /v1/completions ("text_completion") and /v1/chat/completions ("chat.completion",
// "chat.completion.chunk"). Pure functions of their inputs.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kvtier {

struct CompletionUsage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  nlohmann::json to_json() const;
};

class ResponseShape {
 public:
  // id: e.g. "cmpl-r7" / "chatcmpl-r7"; created: Unix seconds.
  ResponseShape(bool chat, std::string id, std::string model, int64_t created);

  // The non-streaming answer.
  nlohmann::json full(const std::string& text, const std::string& finish_reason,
                      const CompletionUsage& usage) const;
  // Chat streams open with a chunk whose delta is {"role":"assistant"}.
  nlohmann::json role_chunk() const;
  // A chunk of new text; the last one carries finish_reason, with empty text.
  nlohmann::json chunk(const std::string& text) const;
  nlohmann::json final_chunk(const std::string& finish_reason) const;
  // After the last, when the request set stream_options.include_usage (as OpenAI's): the usage,
  // with no choices.
  nlohmann::json usage_chunk(const CompletionUsage& usage) const;

 private:
  nlohmann::json envelope(const char* object) const;
  nlohmann::json choice(const std::string& text, const nlohmann::json& finish_reason,
                        bool streaming) const;

  bool chat_;
  std::string id_;
  std::string model_;
  int64_t created_;
};

// One server-sent event: "data: <json>\n\n", or with an event name "event: <name>\ndata: …".
std::string sse_event(const nlohmann::json& data, const std::string& event = "");
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace kvtier
