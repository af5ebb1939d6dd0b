// Parsing and validation of OpenAI-style requests, the chat template, the response shapes.
#include <gtest/gtest.h>

#include "kvtier/engine/openai_request.h"
#include "kvtier/engine/openai_response.h"

namespace kvtier {
namespace {

const RequestLimits kLimits{"kvtier-tiny", 16, 64};

RequestError rejected(const nlohmann::json& body, bool chat = false) {
  auto parsed = parse_completion_request(body.dump(), chat, kLimits);
  EXPECT_FALSE(parsed.has_value()) << body.dump();
  return parsed ? RequestError{} : parsed.error();
}

TEST(FrontendRequest, CompletionWithDefaults) {
  auto parsed = parse_completion_request(R"({"prompt":"hello"})", false, kLimits);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->prompt, "hello");
  EXPECT_EQ(parsed->max_tokens, 16u);
  EXPECT_FALSE(parsed->stream);
  EXPECT_FALSE(parsed->chat);
}

TEST(FrontendRequest, CompletionWithEveryField) {
  auto parsed = parse_completion_request(
      R"({"model":"kvtier-tiny","prompt":"hi","max_tokens":5,"stream":true,"temperature":0.7,"top_p":1})",
      false, kLimits);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->max_tokens, 5u);
  EXPECT_TRUE(parsed->stream);
}

TEST(FrontendRequest, DefaultMaxTokensIsCutToTheContext) {
  auto parsed = parse_completion_request(nlohmann::json{{"prompt", std::string(60, 'x')}}.dump(),
                                         false, kLimits);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->max_tokens, 4u);
}

TEST(FrontendRequest, BadInputNamesTheField) {
  EXPECT_EQ(parse_completion_request("{not json", false, kLimits).error().message,
            "the request body is not valid JSON");
  EXPECT_EQ(parse_completion_request("[1]", false, kLimits).error().http_status, 400);
  EXPECT_EQ(rejected({{"max_tokens", 3}}).param, "prompt");
  EXPECT_EQ(rejected({{"prompt", 3}}).param, "prompt");
  EXPECT_EQ(rejected({{"prompt", {"a", "b"}}}).param, "prompt");
  EXPECT_EQ(rejected({{"prompt", ""}}).param, "prompt");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"max_tokens", "5"}}).param, "max_tokens");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"max_tokens", 1.5}}).param, "max_tokens");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"max_tokens", 0}}).param, "max_tokens");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"max_tokens", -3}}).param, "max_tokens");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"max_tokens", 65}}).param, "max_tokens");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"stream", "yes"}}).param, "stream");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"temperature", "hot"}}).param, "temperature");
  EXPECT_EQ(rejected({{"prompt", "a"}, {"model", 1}}).param, "model");
}

TEST(FrontendRequest, MaxTokensOutOfRangeIsQuotedAsSent) {
  // Past INT64_MAX a JSON integer is unsigned: the answer names it, not its wrapped int64 value.
  const RequestError huge =
      rejected({{"prompt", "a"}, {"max_tokens", uint64_t{18446744073709551615u}}});
  EXPECT_EQ(huge.param, "max_tokens");
  EXPECT_NE(huge.message.find("got 18446744073709551615"), std::string::npos) << huge.message;
  EXPECT_NE(rejected({{"prompt", "a"}, {"max_tokens", -3}}).message.find("got -3"),
            std::string::npos);
}

TEST(FrontendRequest, PromptLongerThanTheContextIsRejected) {
  const RequestError too_long = rejected({{"prompt", std::string(64, 'x')}});
  EXPECT_EQ(too_long.param, "prompt");
  EXPECT_NE(too_long.message.find("model.max_context"), std::string::npos);
  const RequestError no_room = rejected({{"prompt", std::string(60, 'x')}, {"max_tokens", 5}});
  EXPECT_EQ(no_room.param, "max_tokens");
}

TEST(FrontendRequest, UnknownModelIs404) {
  const RequestError error = rejected({{"prompt", "a"}, {"model", "gpt-4"}});
  EXPECT_EQ(error.http_status, 404);
  EXPECT_EQ(error.code, "model_not_found");
  EXPECT_EQ(error.body()["error"]["param"], "model");
}

TEST(FrontendRequest, ErrorBodyHasOpenAIShape) {
  const RequestError error{400, "'prompt' is required", "prompt"};
  EXPECT_EQ(error.body(), nlohmann::json::parse(R"({"error":{"message":"'prompt' is required",
      "type":"invalid_request_error","param":"prompt","code":null}})"));
}

TEST(FrontendRequest, ChatTemplate) {
  const nlohmann::json messages = nlohmann::json::parse(
      R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])");
  auto parsed =
      parse_completion_request(nlohmann::json{{"messages", messages}}.dump(), true, kLimits);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_TRUE(parsed->chat);
  EXPECT_EQ(parsed->prompt, "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n");
}

// The shape vLLM's and OpenAI's chat clients send: content as an array of text parts, an
// assistant turn with null content, and max_completion_tokens.
TEST(FrontendRequest, ChatContentAsTextPartsAndMaxCompletionTokens) {
  const nlohmann::json body = nlohmann::json::parse(R"({"messages":[
      {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]},
      {"role":"assistant","content":null},
      {"role":"user","content":"again"}], "max_completion_tokens": 5})");
  auto parsed = parse_completion_request(body.dump(), true, kLimits);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->prompt, "<|user|>\nhello\n<|assistant|>\n\n<|user|>\nagain\n<|assistant|>\n");
  EXPECT_EQ(parsed->max_tokens, 5u);
  nlohmann::json image = body;
  image["messages"][0]["content"][1] = {{"type", "image_url"}, {"image_url", {{"url", "x"}}}};
  EXPECT_EQ(rejected(image, true).param, "messages[0].content[1]");
  nlohmann::json both = body;
  both["max_tokens"] = 6;
  EXPECT_EQ(rejected(both, true).param, "max_completion_tokens");
  both["max_tokens"] = 5;
  EXPECT_TRUE(parse_completion_request(both.dump(), true, kLimits));
  nlohmann::json bad = body;
  bad["max_completion_tokens"] = 0;
  EXPECT_EQ(rejected(bad, true).param, "max_completion_tokens");
}

// A field asking for what the engine does not do is refused, never silently ignored; the
// default value of each is accepted.
TEST(FrontendRequest, FieldsAskingForWhatTheEngineDoesNotDoAreRefused) {
  for (const auto& [field, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"n", 2},
           {"best_of", 3},
           {"echo", true},
           {"logprobs", 2},
           {"logprobs", true},
           {"top_logprobs", 1},
           {"stop", "\n"},
           {"stop", nlohmann::json::array({"x"})}}) {
    SCOPED_TRACE(field + " = " + value.dump());
    EXPECT_EQ(rejected({{"prompt", "a"}, {field, value}}).param, field);
  }
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"n", 1},
                                                           {"best_of", 1},
                                                           {"echo", false},
                                                           {"logprobs", nullptr},
                                                           {"logprobs", 0},
                                                           {"top_logprobs", 0},
                                                           {"stop", nullptr},
                                                           {"stop", nlohmann::json::array()}}) {
    SCOPED_TRACE(field + " = " + value.dump());
    EXPECT_TRUE(parse_completion_request(nlohmann::json{{"prompt", "a"}, {field, value}}.dump(),
                                         false, kLimits));
  }
}

TEST(FrontendRequest, ChatBadMessagesNameTheField) {
  EXPECT_EQ(rejected({{"prompt", "a"}}, true).param, "messages");
  EXPECT_EQ(rejected({{"messages", nlohmann::json::array()}}, true).param, "messages");
  EXPECT_EQ(rejected({{"messages", {1}}}, true).param, "messages[0]");
  EXPECT_EQ(rejected({{"messages", {{{"content", "x"}}}}}, true).param, "messages[0].role");
  EXPECT_EQ(rejected({{"messages", {{{"role", "user"}, {"content", 5}}}}}, true).param,
            "messages[0].content");
}

TEST(FrontendResponse, CompletionShapes) {
  const ResponseShape shape(false, "cmpl-r1", "kvtier-tiny", 1700000000);
  const CompletionUsage usage{10, 4, 6};
  const nlohmann::json full = shape.full("abcd", "length", usage);
  EXPECT_EQ(full["object"], "text_completion");
  EXPECT_EQ(full["choices"][0]["text"], "abcd");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(full["usage"]["total_tokens"], 14);
  EXPECT_EQ(full["usage"]["prompt_tokens_details"]["cached_tokens"], 6);
  EXPECT_EQ(shape.chunk("ab")["choices"][0]["text"], "ab");
  EXPECT_TRUE(shape.chunk("ab")["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(shape.final_chunk("length")["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(shape.final_chunk("length").contains("usage"));
  EXPECT_EQ(shape.usage_chunk(usage)["choices"], nlohmann::json::array());
  EXPECT_EQ(shape.usage_chunk(usage)["usage"]["total_tokens"], 14);
}

TEST(FrontendResponse, ChatShapes) {
  const ResponseShape shape(true, "chatcmpl-r1", "kvtier-tiny", 1700000000);
  const nlohmann::json full = shape.full("abcd", "length", {});
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"],
            nlohmann::json({{"role", "assistant"}, {"content", "abcd"}}));
  EXPECT_EQ(shape.role_chunk()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(shape.chunk("ab")["object"], "chat.completion.chunk");
  EXPECT_EQ(shape.chunk("ab")["choices"][0]["delta"]["content"], "ab");
  EXPECT_EQ(shape.final_chunk("stop")["choices"][0]["delta"], nlohmann::json::object());
  EXPECT_EQ(shape.usage_chunk({})["object"], "chat.completion.chunk");
}

TEST(FrontendResponse, SseEventFraming) {
  EXPECT_EQ(sse_event({{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_event({{"a", "x\ny"}}, "error"), "event: error\ndata: {\"a\":\"x\\ny\"}\n\n");
}

}  // namespace
}  // namespace kvtier
