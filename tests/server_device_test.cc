// The server over a model on the GPU, without one (docs/serving.md "On the
// GPU"): ServerOptions::placement moves the tiny Gemma 4 fixture into a CPU
// model whose states report a device cache (model_device_like.h). Text
// completions, n > 1 choices (no row copies), prompt lookup and
// /v1/embeddings (--pooling mean) are served; image parts are taken as on the
// CPU (without --mmproj: the 400 naming the flag, not the device); the start-up
// log says where the model runs and that speculation there is not bitwise.
#include <gtest/gtest.h>

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common_source_path.h"
#include "model_device_like.h"
#include "server.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

std::string Fixture() { return testing::SourcePath("tests/fixtures/gemma4/e2b.f32.gguf"); }

TEST(ServerDevice, ServesTextAndRefusesWhatTheDeviceCannotNamingIt) {
  std::mutex mu;
  std::vector<std::string> log;
  ServerOptions o;
  o.port = 0;
  o.model_path = Fixture();
  o.placement = {.device = Device::kCuda, .move = [](std::unique_ptr<Model> m) -> std::unique_ptr<Model> {
                   return std::make_unique<testing::DeviceLikeModel>(std::move(m));
                 }};
  o.scheduler.slots = 3;
  o.scheduler.max_context = 128;
  o.speculation.method = "ngram";
  o.pooling = Pooling::kMean;
  o.log = [&](std::string_view l) {
    std::lock_guard<std::mutex> lock(mu);
    log.emplace_back(l);
  };
  Server srv(o);
  const int port = srv.Bind();
  srv.StartHttp();
  srv.Load();
  httplib::Client cli("127.0.0.1", port);
  auto post = [&](const std::string& path, const json& body) {
    auto r = cli.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    return r ? std::make_pair(r->status, json::parse(r->body, nullptr, false)) : std::make_pair(0, json());
  };

  auto [status, body] = post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 4}, {"n", 2}, {"temperature", 0}});
  EXPECT_EQ(status, 200) << body.dump();
  EXPECT_EQ(body["choices"].size(), 2u) << body.dump();
  EXPECT_EQ(body["choices"][0]["text"], body["choices"][1]["text"]) << "greedy choices prefilled apart agree";

  // Embeddings are served on the GPU too (SupportOn(kCuda).embeddings):
  // no refusal naming the device.
  std::tie(status, body) = post("/v1/embeddings", {{"input", "Hi"}, {"encoding_format", "float"}});
  EXPECT_EQ(status, 200) << body.dump();
  ASSERT_EQ(body["data"].size(), 1u) << body.dump();
  double norm2 = 0.0;
  for (const json& x : body["data"][0]["embedding"]) norm2 += x.get<double>() * x.get<double>();
  EXPECT_FALSE(body["data"][0]["embedding"].empty()) << body.dump();
  EXPECT_NEAR(norm2, 1.0, 1e-4) << "an L2-normalized embedding";

  const json image = {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,Zm9v"}}}};
  std::tie(status, body) =
      post("/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "What is this?"}}, image}}}}}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(body["error"]["code"], "images_unsupported") << body.dump();
  EXPECT_NE(body["error"]["message"].get<std::string>().find("start the server with --mmproj PATH"), std::string::npos)
      << body.dump();
  EXPECT_EQ(body["error"]["message"].get<std::string>().find("device cuda"), std::string::npos) << body.dump();

  srv.BeginDrain();
  EXPECT_TRUE(srv.WaitIdle(std::chrono::seconds(5)));
  srv.Stop();
  std::lock_guard<std::mutex> lock(mu);
  auto logged = [&](const std::string& part) {
    for (const std::string& l : log) {
      if (l.find(part) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(logged("model on device cuda"));
  EXPECT_TRUE(logged("speculative decoding: ngram drafter")) << "prompt lookup runs on the device";
  EXPECT_TRUE(logged("up to the device's rounding, not bitwise"));
}

}  // namespace
}  // namespace kvshare::server
