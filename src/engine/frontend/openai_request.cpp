#include "kvtier/engine/openai_request.h"

#include <algorithm>

namespace kvtier {
namespace {

std::unexpected<RequestError> invalid(std::string param, std::string message) {
  return std::unexpected(RequestError{400, std::move(message), std::move(param)});
}

// Validates `messages` (chat): a non-empty array of {role: string, content: string}.
std::expected<void, RequestError> check_messages(const nlohmann::json& request) {
  if (!request.contains("messages")) return invalid("messages", "'messages' is required");
  const nlohmann::json& messages = request["messages"];
  if (!messages.is_array() || messages.empty()) {
    return invalid("messages", "'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const nlohmann::json& m = messages[i];
    if (!m.is_object()) return invalid(at, "'" + at + "' must be an object");
    if (!m.contains("role") || !m["role"].is_string() ||
        m["role"].get_ref<const std::string&>().empty()) {
      return invalid(at + ".role", "'" + at + ".role' must be a non-empty string");
    }
    if (!m.contains("content") || !m["content"].is_string()) {
      return invalid(at + ".content", "'" + at + ".content' must be a string");
    }
  }
  return {};
}

}  // namespace

nlohmann::json RequestError::body() const {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}}}};
}

std::string chat_prompt(const nlohmann::json& messages) {
  std::string prompt;
  for (const nlohmann::json& m : messages) {
    prompt += "<|" + m["role"].get<std::string>() + "|>\n" + m["content"].get<std::string>() + "\n";
  }
  return prompt + "<|assistant|>\n";
}

std::expected<CompletionRequest, RequestError> parse_completion_request(
    std::string_view body, bool chat, const RequestLimits& limits) {
  const nlohmann::json request = nlohmann::json::parse(body, nullptr, false);
  if (request.is_discarded()) return invalid("", "the request body is not valid JSON");
  if (!request.is_object()) return invalid("", "the request body must be a JSON object");
  CompletionRequest parsed;
  parsed.chat = chat;
  if (request.contains("model")) {
    if (!request["model"].is_string()) return invalid("model", "'model' must be a string");
    if (request["model"] != limits.model_name) {
      RequestError error{404,
                         "the model '" + request["model"].get<std::string>() +
                             "' does not exist; this server serves '" + limits.model_name + "'",
                         "model"};
      error.code = "model_not_found";
      return std::unexpected(error);
    }
  }
  if (chat) {
    if (auto ok = check_messages(request); !ok) return std::unexpected(ok.error());
    parsed.prompt = chat_prompt(request["messages"]);
  } else {
    if (!request.contains("prompt")) return invalid("prompt", "'prompt' is required");
    if (!request["prompt"].is_string()) return invalid("prompt", "'prompt' must be a string");
    parsed.prompt = request["prompt"].get<std::string>();
  }
  const char* prompt_field = chat ? "messages" : "prompt";
  if (parsed.prompt.empty())
    return invalid(prompt_field, std::string("'") + prompt_field + "' is empty");
  // Without max_tokens: the default, cut to what fits after the prompt.
  const uint64_t room = std::min<uint64_t>(limits.max_context, limits.max_request_tokens);
  parsed.max_tokens = limits.default_max_tokens;
  if (parsed.prompt.size() < room) {
    parsed.max_tokens =
        static_cast<uint32_t>(std::min<uint64_t>(parsed.max_tokens, room - parsed.prompt.size()));
  }
  if (request.contains("max_tokens") && !request["max_tokens"].is_null()) {
    const nlohmann::json& max_tokens = request["max_tokens"];
    if (!max_tokens.is_number_integer()) {
      return invalid("max_tokens", "'max_tokens' must be an integer");
    }
    // An integer past INT64_MAX is unsigned in JSON: too large, whatever int64 it would wrap to.
    const bool huge = max_tokens.is_number_unsigned() && max_tokens.get<uint64_t>() > INT64_MAX;
    const int64_t value = huge ? INT64_MAX : max_tokens.get<int64_t>();
    if (value < 1 || value > limits.max_context) {
      return invalid("max_tokens", "'max_tokens' must be in [1, " +
                                       std::to_string(limits.max_context) + "], got " +
                                       max_tokens.dump());
    }
    parsed.max_tokens = static_cast<uint32_t>(value);
  }
  if (request.contains("stream") && !request["stream"].is_null()) {
    if (!request["stream"].is_boolean()) return invalid("stream", "'stream' must be a boolean");
    parsed.stream = request["stream"].get<bool>();
  }
  if (request.contains("temperature") && !request["temperature"].is_null() &&
      !request["temperature"].is_number()) {
    return invalid("temperature", "'temperature' must be a number");
  }
  // Byte-level vocabulary: one token per prompt byte.
  const uint64_t prompt_tokens = parsed.prompt.size();
  if (prompt_tokens >= limits.max_context) {
    return invalid(prompt_field, std::string("the prompt has ") + std::to_string(prompt_tokens) +
                                     " tokens; model.max_context is " +
                                     std::to_string(limits.max_context));
  }
  if (prompt_tokens + parsed.max_tokens > limits.max_context) {
    return invalid("max_tokens",
                   "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus 'max_tokens' (" +
                       std::to_string(parsed.max_tokens) + ") exceeds model.max_context " +
                       std::to_string(limits.max_context));
  }
  if (prompt_tokens + parsed.max_tokens > limits.max_request_tokens) {
    return invalid(prompt_tokens >= limits.max_request_tokens ? prompt_field : "max_tokens",
                   "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus 'max_tokens' (" +
                       std::to_string(parsed.max_tokens) + ") exceeds " +
                       std::to_string(limits.max_request_tokens) +
                       " tokens, the most one request's KV can span in the engine's device "
                       "memory (engine.device_blocks)");
  }
  return parsed;
}

}  // namespace kvtier
