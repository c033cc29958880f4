// The host side of a batched forward (Model::ForwardBatch), shared by the CPU
// decoder (decoder.cc) and the GPU models (src/cuda_model/): the entries'
// checks, the steps they run in (every entry's next chunk, in lock-step), where
// each step row's logits go, and the rollback when a step fails. Internal to
// src/model and the layers above it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvshare/model/model.h"
#include "model/decoder.h"

namespace kvshare::detail {

class BatchSteps {
 public:
  // Checks every entry (CheckBatchEntry, CheckEmbeddings; a row at most once)
  // and records each one's length before the call. bidirectional: the state
  // has a layer where an image's tokens see each other (ChunkLength). Throws
  // kvshare::Error, changing nothing.
  BatchSteps(const ModelState& st, const ModelConfig& config, std::span<const BatchEntry> entries, int max_step,
             bool bidirectional);

  // Rows of the call's output: sum of num_logits.
  std::int64_t total_logits() const { return total_logits_; }

  // Fills `step` with the next chunk of every entry that has tokens left
  // (AddStepInputs; step_spans[row]: the row's bidirectional spans, sized
  // max_batch) and the output row of each step row's first kept token
  // (dest(); rows in step.rows order). False when no entry has tokens left.
  bool Next(Step& step, std::vector<std::vector<std::int64_t>>& step_spans);
  std::span<const std::int64_t> dest() const { return dest_; }
  // Whether each step row's kept rows follow the row before's in the output
  // (a decode step, a one-entry prefill): the LM head may write there directly.
  bool contiguous() const { return contiguous_; }

  // Puts every entry's row back at its length before the call (Rewind, or
  // Reset where a window ring no longer holds that length).
  void Restore(ModelState& st) const;

 private:
  std::span<const BatchEntry> entries_;
  int max_step_;
  bool bidi_;
  int n_embd_;
  std::vector<std::int64_t> start_, first_logit_, out_at_, pos_;  // per entry
  std::int64_t total_logits_ = 0;
  std::vector<std::int64_t> dest_;  // per step row
  bool contiguous_ = true;
};

}  // namespace kvshare::detail
