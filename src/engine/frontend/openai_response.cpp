#include "kvtier/engine/openai_response.h"

namespace kvtier {

nlohmann::json CompletionUsage::to_json() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

ResponseShape::ResponseShape(bool chat, std::string id, std::string model, int64_t created)
    : chat_(chat), id_(std::move(id)), model_(std::move(model)), created_(created) {}

nlohmann::json ResponseShape::envelope(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

nlohmann::json ResponseShape::choice(const std::string& text, const nlohmann::json& finish_reason,
                                     bool streaming) const {
  nlohmann::json c = {{"index", 0}, {"finish_reason", finish_reason}};
  if (!chat_) {
    c["text"] = text;
    c["logprobs"] = nullptr;
  } else if (streaming) {
    c["delta"] = text.empty() ? nlohmann::json::object() : nlohmann::json{{"content", text}};
  } else {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  }
  return c;
}

nlohmann::json ResponseShape::full(const std::string& text, const std::string& finish_reason,
                                   const CompletionUsage& usage) const {
  nlohmann::json r = envelope(chat_ ? "chat.completion" : "text_completion");
  r["choices"] = nlohmann::json::array({choice(text, finish_reason, false)});
  r["usage"] = usage.to_json();
  return r;
}

nlohmann::json ResponseShape::role_chunk() const {
  nlohmann::json r = envelope("chat.completion.chunk");
  r["choices"] = nlohmann::json::array(
      {{{"index", 0}, {"delta", {{"role", "assistant"}}}, {"finish_reason", nullptr}}});
  return r;
}

nlohmann::json ResponseShape::chunk(const std::string& text) const {
  nlohmann::json r = envelope(chat_ ? "chat.completion.chunk" : "text_completion");
  r["choices"] = nlohmann::json::array({choice(text, nullptr, true)});
  return r;
}

nlohmann::json ResponseShape::final_chunk(const std::string& finish_reason) const {
  nlohmann::json r = envelope(chat_ ? "chat.completion.chunk" : "text_completion");
  r["choices"] = nlohmann::json::array({choice("", finish_reason, true)});
  return r;
}

nlohmann::json ResponseShape::usage_chunk(const CompletionUsage& usage) const {
  nlohmann::json r = envelope(chat_ ? "chat.completion.chunk" : "text_completion");
  r["choices"] = nlohmann::json::array();
  r["usage"] = usage.to_json();
  return r;
}

std::string sse_event(const nlohmann::json& data, const std::string& event) {
  std::string out;
  if (!event.empty()) out += "event: " + event + "\n";
  // dump() escapes control characters, so the JSON is one line.
  out += "data: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
  return out;
}

}  // namespace kvtier
