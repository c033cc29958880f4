// The image_url part reader (server/request_images.h): base64 against known
// encodings (RFC 4648's test vectors), and each malformed URL a 400 naming
// the field.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.h"
#include "kvshare/runtime/device_support.h"
#include "request_images.h"

namespace kvshare::server {
namespace {

std::string Str(const std::vector<std::uint8_t>& v) { return std::string(v.begin(), v.end()); }

TEST(RequestImages, Base64DecodesRfc4648Vectors) {
  const std::pair<const char*, const char*> cases[] = {{"", ""},
                                                       {"Zg==", "f"},
                                                       {"Zm8=", "fo"},
                                                       {"Zm9v", "foo"},
                                                       {"Zm9vYg==", "foob"},
                                                       {"Zm9vYmE=", "fooba"},
                                                       {"Zm9vYmFy", "foobar"},
                                                       {"Zm9vYg", "foob"},
                                                       {"Zm9v\nYmFy", "foobar"}};
  for (const auto& [in, out] : cases) {
    const auto got = DecodeBase64(in);
    ASSERT_TRUE(got.has_value()) << in;
    EXPECT_EQ(Str(*got), out) << in;
  }
  EXPECT_EQ(Str(*DecodeBase64("-_8=")), Str(*DecodeBase64("+/8=")));  // URL-safe alphabet
  for (const char* bad : {"Zm9v!", "Z", "Zm9vY", "Zg==Zg==", "Zg===", "Z==="}) {
    EXPECT_FALSE(DecodeBase64(bad).has_value()) << bad;
  }
}

TEST(RequestImages, ImageUrlPartsAreDataUrlsOnly) {
  const std::string name = "messages[0].content[1]";
  auto read = [&](const nlohmann::json& part, bool allow = false) {
    return ReadImageUrlPart(part, name, {.allow_image_urls = allow});
  };
  EXPECT_EQ(Str(read({{"image_url", {{"url", "data:image/png;base64,Zm9v"}}}}).bytes), "foo");
  EXPECT_EQ(Str(read({{"image_url", "DATA:image/jpeg;BASE64,Zm9v"}}).bytes), "foo");
  EXPECT_EQ(read({{"image_url", {{"url", "data:image/png;base64,Zm9v"}}}}).param, name + ".image_url.url");
  auto error = [&](const nlohmann::json& part, const std::string& words, bool allow = false) {
    try {
      read(part, allow);
      ADD_FAILURE() << "accepted " << part.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  error(nlohmann::json::object(), "Missing required parameter: '" + name + ".image_url'");
  error({{"image_url", nlohmann::json::object()}}, name + ".image_url.url");
  error({{"image_url", {{"url", 5}}}}, "string");
  error({{"image_url", {{"url", "https://example.com/a.png"}}}}, "does not fetch");
  error({{"image_url", {{"url", "http://example.com/a.png"}}}}, "not built", true);
  error({{"image_url", {{"url", "data:image/png,rawbytes"}}}}, "base64 data: URL");
  error({{"image_url", {{"url", "data:image/png;base64,Zm9v!"}}}}, "malformed");
}

// A model on a device without media inputs (runtime/device_support.h):
// image and audio parts are a 400 naming the device and the part, before
// anything is decoded (the bytes here are no image).
TEST(RequestImages, MediaOnADeviceWithoutThemIsA400NamingIt) {
  ModelContext ctx;
  ctx.media_unavailable = DeviceRefusal(Device::kCuda, "images and audio", "send text only");
  CompletionRequest req;
  req.chat = true;
  req.images = {{.bytes = {1, 2, 3}, .param = "messages[0].content[1].image_url.url"}};
  RequestOptions r;
  auto refusal = [&]() -> std::pair<int, std::string> {
    try {
      AttachMedia(req, ctx, {0}, {}, r);
    } catch (const ApiError& e) {
      return {e.status(), e.ToJson().dump()};
    }
    return {0, "accepted"};
  };
  auto [status, what] = refusal();
  EXPECT_EQ(status, 400);
  EXPECT_NE(what.find("Invalid 'messages[0].content[1].image_url.url': images and audio runs on the CPU only so far, "
                      "and this model runs on device cuda; send text only."),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("images_unsupported"), std::string::npos) << what;
  req.images.clear();
  req.audio = {{.bytes = {1, 2, 3}, .format = "wav", .param = "messages[0].content[0].input_audio"}};
  std::tie(status, what) = refusal();
  EXPECT_EQ(status, 400);
  EXPECT_NE(what.find("audio_unsupported"), std::string::npos) << what;
  EXPECT_TRUE(r.embeddings.empty());
}

}  // namespace
}  // namespace kvshare::server
