#include "kvtier/engine/openai_request.h"

#include <algorithm>
#include <vector>

namespace kvtier {
namespace {

std::unexpected<RequestError> invalid(std::string param, std::string message) {
  return std::unexpected(RequestError{400, std::move(message), std::move(param)});
}

// A message's content as text: a string, or an array of text parts ({"type": "text", "text":
// string}, joined), or null (an assistant message with nothing said).
std::expected<std::string, RequestError> message_text(const nlohmann::json& content,
                                                      const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return std::string();
  if (!content.is_array()) {
    return invalid(at, "'" + at + "' must be a string or an array of text parts");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part_at = at + "[" + std::to_string(i) + "]";
    const nlohmann::json& part = content[i];
    if (!part.is_object() || part.value("type", nlohmann::json()) != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      return invalid(part_at, "'" + part_at +
                                  "' must be a text part {\"type\": \"text\", \"text\": "
                                  "string}: this model reads text only");
    }
    text += part["text"].get_ref<const std::string&>();
  }
  return text;
}

// The chat prompt of `messages`: a non-empty array of {role: string, content}.
std::expected<std::string, RequestError> chat_prompt_of(const nlohmann::json& request) {
  if (!request.contains("messages")) return invalid("messages", "'messages' is required");
  const nlohmann::json& messages = request["messages"];
  if (!messages.is_array() || messages.empty()) {
    return invalid("messages", "'messages' must be a non-empty array");
  }
  std::vector<ChatMessage> rendered;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const nlohmann::json& m = messages[i];
    if (!m.is_object()) return invalid(at, "'" + at + "' must be an object");
    if (!m.contains("role") || !m["role"].is_string() ||
        m["role"].get_ref<const std::string&>().empty()) {
      return invalid(at + ".role", "'" + at + ".role' must be a non-empty string");
    }
    if (!m.contains("content")) return invalid(at + ".content", "'" + at + ".content' is required");
    auto text = message_text(m["content"], at + ".content");
    if (!text) return std::unexpected(text.error());
    rendered.push_back({m["role"].get<std::string>(), std::move(*text)});
  }
  return chat_prompt(rendered);
}

// A field this engine does not implement is refused unless it asks for the default, so that a
// client never gets an answer other than the one it asked for (one choice, no stop sequences,
// no log probabilities, the prompt not echoed).
std::expected<void, RequestError> check_unsupported(const nlohmann::json& request) {
  const auto is = [&](const char* field, auto accepts) {
    return !request.contains(field) || request[field].is_null() || accepts(request[field]);
  };
  const auto one = [](const nlohmann::json& v) { return v.is_number_integer() && v == 1; };
  const auto none = [](const nlohmann::json& v) {
    return (v.is_boolean() && !v.get<bool>()) || (v.is_number_integer() && v == 0);
  };
  const auto empty = [](const nlohmann::json& v) { return v.is_array() && v.empty(); };
  if (!is("n", one)) return invalid("n", "'n' must be 1: this server returns one choice");
  if (!is("best_of", one)) return invalid("best_of", "'best_of' must be 1");
  if (!is("echo", none)) return invalid("echo", "'echo' is not supported");
  if (!is("logprobs", none)) return invalid("logprobs", "'logprobs' is not supported");
  if (!is("top_logprobs", none)) return invalid("top_logprobs", "'top_logprobs' is not supported");
  if (!is("stop", empty)) {
    return invalid("stop", "'stop' is not supported: the tiny model decodes to max_tokens");
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

std::string chat_prompt(const std::vector<ChatMessage>& messages) {
  std::string prompt;
  for (const ChatMessage& m : messages) prompt += "<|" + m.role + "|>\n" + m.content + "\n";
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
    auto prompt = chat_prompt_of(request);
    if (!prompt) return std::unexpected(prompt.error());
    parsed.prompt = std::move(*prompt);
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
  if (auto ok = check_unsupported(request); !ok) return std::unexpected(ok.error());
  // max_completion_tokens: the newer name (chat), the same limit.
  const auto given = [&](const char* field) {
    return request.contains(field) && !request[field].is_null();
  };
  if (given("max_tokens") && given("max_completion_tokens") &&
      request["max_tokens"] != request["max_completion_tokens"]) {
    return invalid("max_completion_tokens",
                   "'max_tokens' and 'max_completion_tokens' differ: give one of them");
  }
  const char* max_field = given("max_tokens") ? "max_tokens" : "max_completion_tokens";
  if (given(max_field)) {
    const nlohmann::json& max_tokens = request[max_field];
    if (!max_tokens.is_number_integer()) {
      return invalid(max_field, std::string("'") + max_field + "' must be an integer");
    }
    // An integer past INT64_MAX is unsigned in JSON: too large, whatever int64 it would wrap to.
    const bool huge = max_tokens.is_number_unsigned() && max_tokens.get<uint64_t>() > INT64_MAX;
    const int64_t value = huge ? INT64_MAX : max_tokens.get<int64_t>();
    if (value < 1 || value > limits.max_context) {
      return invalid(max_field, std::string("'") + max_field + "' must be in [1, " +
                                    std::to_string(limits.max_context) + "], got " +
                                    max_tokens.dump());
    }
    parsed.max_tokens = static_cast<uint32_t>(value);
  }
  if (request.contains("stream") && !request["stream"].is_null()) {
    if (!request["stream"].is_boolean()) return invalid("stream", "'stream' must be a boolean");
    parsed.stream = request["stream"].get<bool>();
  }
  if (given("stream_options")) {
    const nlohmann::json& options = request["stream_options"];
    if (!options.is_object()) {
      return invalid("stream_options", "'stream_options' must be an object");
    }
    if (options.contains("include_usage") && !options["include_usage"].is_null()) {
      if (!options["include_usage"].is_boolean()) {
        return invalid("stream_options.include_usage",
                       "'stream_options.include_usage' must be a boolean");
      }
      parsed.include_usage = options["include_usage"].get<bool>();
    }
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
