// A CPU model dressed as the GPU model looks to the layers above the Model
// interface (tests of runtime/device_support.h and the server on the GPU
// without one): its states report a device cache (ModelState::device()
// kCuda), copy no rows and keep no hidden states; the arithmetic is the CPU
// model's, so results are bitwise the CPU run's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvshare/model/model.h"

namespace kvshare::testing {

class DeviceLikeState final : public ModelState {
 public:
  explicit DeviceLikeState(std::unique_ptr<ModelState> inner) : inner_(std::move(inner)) {}
  int max_batch() const override { return inner_->max_batch(); }
  std::int64_t length(int row) const override { return inner_->length(row); }
  int max_context() const override { return inner_->max_context(); }
  std::size_t kv_bytes() const override { return inner_->kv_bytes(); }
  const KvCache& kv_cache() const override { return inner_->kv_cache(); }
  Device device() const override { return Device::kCuda; }
  void Reset(int row) override { inner_->Reset(row); }
  void Rewind(int row, std::int64_t length) override { inner_->Rewind(row, length); }
  // CopyRow and hidden(): the base class's (false, empty), as the GPU model's.
  ModelState& inner() { return *inner_; }

 private:
  std::unique_ptr<ModelState> inner_;
};

class DeviceLikeModel final : public Model {
 public:
  // Borrows `cpu`, which must outlive this model.
  explicit DeviceLikeModel(const Model& cpu) : cpu_(cpu) {}
  // Owns it (a ModelPlacement's move).
  explicit DeviceLikeModel(std::unique_ptr<Model> cpu) : owned_(std::move(cpu)), cpu_(*owned_) {}
  const ModelConfig& config() const override { return cpu_.config(); }
  const GgufFile& gguf() const override { return cpu_.gguf(); }
  const std::vector<std::string>& warnings() const override { return cpu_.warnings(); }
  std::unique_ptr<ModelState> NewState(const ModelStateOptions& o) const override {
    return std::make_unique<DeviceLikeState>(cpu_.NewState(o));
  }
  std::span<const float> Forward(ModelState& state, std::span<const std::int32_t> tokens, ThreadPool* pool,
                                 const ForwardOptions& options) const override {
    return cpu_.Forward(Inner(state), tokens, pool, options);
  }
  std::span<const float> ForwardBatch(ModelState& state, std::span<const BatchEntry> entries,
                                      ThreadPool* pool) const override {
    return cpu_.ForwardBatch(Inner(state), entries, pool);
  }
  void EmbedTokens(std::span<const std::int32_t> tokens, float* out) const override { cpu_.EmbedTokens(tokens, out); }
  // The GPU model embeds too (SupportOn's embeddings).
  std::vector<float> Embed(std::span<const std::vector<std::int32_t>> inputs, const EmbedOptions& options,
                           ThreadPool* pool) const override {
    return cpu_.Embed(inputs, options, pool);
  }

 private:
  static ModelState& Inner(ModelState& s) { return dynamic_cast<DeviceLikeState&>(s).inner(); }
  std::unique_ptr<Model> owned_;
  const Model& cpu_;
};

}  // namespace kvshare::testing
