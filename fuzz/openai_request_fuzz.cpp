// libFuzzer target for the frontend's request parser: the body of POST /v1/completions or
// /v1/chat/completions (the first input byte picks which) into the engine's request. Every body
// must parse or give an OpenAI error (never crash, hang, leak or trip a sanitizer). A parsed
// request must keep what the body said (the prompt, or the chat template of its messages;
// max_tokens and stream when given), fit the limits, and parse again from its own JSON form into
// the same request. An error's body must serialize, and an error about an integer max_tokens
// quotes the number sent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kvtier/engine/openai_request.h"

namespace {

using kvtier::CompletionRequest;

bool same(const CompletionRequest& a, const CompletionRequest& b) {
  return a.chat == b.chat && a.prompt == b.prompt && a.max_tokens == b.max_tokens &&
         a.stream == b.stream && a.include_usage == b.include_usage;
}

// The chat template (docs/engine.md) of messages the parser accepted: each content a string, an
// array of text parts (joined) or null.
std::string rendered(const nlohmann::json& messages) {
  std::string prompt;
  for (const nlohmann::json& m : messages) {
    std::string text;
    const nlohmann::json& content = m["content"];
    if (content.is_string()) text = content.get<std::string>();
    if (content.is_array()) {
      for (const nlohmann::json& part : content) text += part["text"].get<std::string>();
    }
    prompt += "<|" + m["role"].get<std::string>() + "|>\n" + text + "\n";
  }
  return prompt + "<|assistant|>\n";
}

void check_error(const kvtier::RequestError& error) {
  if ((error.http_status != 400 && error.http_status != 404) || error.message.empty()) {
    std::abort();
  }
  try {
    static_cast<void>(error.body().dump());
  } catch (const nlohmann::json::exception&) {
    std::abort();  // the frontend could not answer
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Small limits, so that inputs reach every bound.
  const kvtier::RequestLimits limits{
      .model_name = "m", .default_max_tokens = 16, .max_context = 96, .max_request_tokens = 80};
  auto request = kvtier::parse_completion_request(body, chat, limits);
  if (!request) {
    check_error(request.error());
    // A rejected integer max_tokens is quoted as sent.
    const nlohmann::json json = nlohmann::json::parse(body, nullptr, false);
    if (request.error().param == "max_tokens" && json.is_object() && json.contains("max_tokens") &&
        json["max_tokens"].is_number_integer() &&
        request.error().message.find(json["max_tokens"].dump()) == std::string::npos) {
      std::abort();
    }
    return 0;
  }
  if (request->chat != chat || request->prompt.empty() || request->max_tokens == 0 ||
      request->prompt.size() + request->max_tokens > limits.max_request_tokens) {
    std::abort();
  }
  // What the body said is what the engine gets.
  const nlohmann::json json = nlohmann::json::parse(body);
  const std::string prompt = chat ? rendered(json["messages"]) : json["prompt"].get<std::string>();
  if (request->prompt != prompt) std::abort();
  if (json.contains("max_tokens") && !json["max_tokens"].is_null() &&
      json["max_tokens"] != request->max_tokens) {
    std::abort();
  }
  if (json.contains("stream") && !json["stream"].is_null() && json["stream"] != request->stream) {
    std::abort();
  }
  // The request as a completion body parses back to itself.
  const nlohmann::json again_body = {
      {"prompt", request->prompt},
      {"max_tokens", request->max_tokens},
      {"stream", request->stream},
      {"stream_options", {{"include_usage", request->include_usage}}}};
  auto again = kvtier::parse_completion_request(again_body.dump(), false, limits);
  if (!again) std::abort();
  again->chat = chat;
  if (!same(*again, *request)) std::abort();
  return 0;
}
