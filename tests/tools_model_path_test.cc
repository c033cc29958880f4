// Where the CLI looks for the default model (tools/model_path.h): the same
// directory from any working directory, chosen from the environment.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "kvshare/common/error.h"
#include "model_path.h"

namespace kvshare::cli {
namespace {

// Sets (or, with nullopt, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ModelPath, DefaultDirectoryFollowsTheEnvironment) {
  ScopedEnv home("HOME", "/home/u");
  {
    ScopedEnv dir("KVSHARE_MODEL_DIR", "/srv/models");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(DefaultModelDir(), "/srv/models");
    EXPECT_EQ(DefaultModelPath(), "/srv/models/gemma-3-270m-q4_k_m.gguf");
  }
  ScopedEnv dir("KVSHARE_MODEL_DIR", std::nullopt);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(DefaultModelDir(), "/xdg/kvshare");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "relative/cache");  // the XDG spec says to ignore it
    EXPECT_EQ(DefaultModelDir(), "/home/u/.cache/kvshare");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
  EXPECT_EQ(DefaultModelDir(), "/home/u/.cache/kvshare");
  ScopedEnv no_home("HOME", std::nullopt);
  EXPECT_THROW(DefaultModelDir(), Error);
}

TEST(ModelPath, GivenPathMustExist) {
  try {
    ResolveModel("/nonexistent/model.gguf");
    FAIL() << "accepted a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/model.gguf' does not exist"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvshare::cli
