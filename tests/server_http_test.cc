// The server in-process (server/server.h) on the tiny Gemma 4 fixture, over
// loopback with cpp-httplib's client: /health and the completion endpoints
// answer 503 "Loading model" until Load(), 200 after, 503 "shutting down"
// once draining; the chat page is served and self-contained (no CDN).
#include <gtest/gtest.h>

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "common_source_path.h"
#include "server.h"

namespace kvshare::server {
namespace {

using nlohmann::json;

std::string Fixture() { return testing::SourcePath("tests/fixtures/gemma4/e2b.f32.gguf"); }

TEST(ServerHttp, HealthFollowsLoadingReadyDraining) {
  ServerOptions o;
  o.port = 0;
  o.model_path = Fixture();
  o.scheduler.slots = 2;
  o.scheduler.max_context = 128;
  Server srv(o);
  const int port = srv.Bind();
  srv.StartHttp();
  httplib::Client cli("127.0.0.1", port);
  const std::string completion = R"({"model":"e2b.f32","prompt":"Hi","max_tokens":3,"temperature":0})";

  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  const json loading = json::parse(health->body);
  EXPECT_EQ(loading["error"]["message"], "Loading model");
  EXPECT_EQ(loading["error"]["type"], "unavailable_error");
  EXPECT_EQ(loading["error"]["code"], "model_loading");
  auto early = cli.Post("/v1/completions", completion, "application/json");
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  // The page does not need the model.
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("/v1/chat/completions"), std::string::npos);
  EXPECT_EQ(page->body.find("http://"), std::string::npos) << "the page loads nothing from elsewhere";
  EXPECT_EQ(page->body.find("https://"), std::string::npos) << "the page loads nothing from elsewhere";

  srv.Load();
  health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body), json({{"status", "ok"}}));
  auto done = cli.Post("/v1/completions", completion, "application/json");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, 200);
  EXPECT_EQ(json::parse(done->body)["usage"]["completion_tokens"], 3);

  srv.BeginDrain();
  health = cli.Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(json::parse(health->body)["error"]["code"], "shutting_down");
  auto refused = cli.Post("/v1/completions", completion, "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_TRUE(srv.WaitIdle(std::chrono::seconds(1)));
  srv.Stop();
}

TEST(ServerHttp, BindErrorNamesTheAddress) {
  ServerOptions o;
  o.host = "203.0.113.7";  // TEST-NET-3: not an address of this machine
  o.port = 8080;
  o.model_path = Fixture();
  Server srv(o);
  try {
    srv.Bind();
    ADD_FAILURE() << "bound to a foreign address";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 203.0.113.7:8080"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvshare::server
