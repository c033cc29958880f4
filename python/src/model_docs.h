// The docstrings of kvshare.Model's methods (python/src/model.cc).
#pragma once

namespace kvshare::python {

inline constexpr const char* kModelDoc = R"(A decoder LLM loaded from a GGUF file (Gemma 3, 3n or 4), run on the CPU.

Model(path, *, mmproj=None, max_context=4096, max_step=256, num_threads=0,
      kv_dtype="float32", kv_shared_layers=None, attention_precision="f32",
      weight_precision="f32")

path: GGUF file; mmproj: the model's vision encoder, an mmproj GGUF as
llama.cpp's converter writes it (Gemma 3, 3n, 4), for generate(images=...);
max_context: positions the KV cache holds (prompt + generated);
max_step: most tokens per internal forward step (a larger image's soft tokens,
which see each other, grow it for a new sequence);
num_threads: 0 = all cores; kv_dtype: KV cache storage ("float32", "float16",
"bfloat16", or "q8_0": 32 int8 values per fp16 scale, 1.0625 bytes per value, as
llama.cpp's -ctk q8_0 -ctv q8_0); kv_shared_layers: trailing layers that reuse an earlier layer's K/V
(None = the file's own setting; overriding it on a model trained without sharing
changes its outputs); attention_precision: "f32", or "bf16" (attention's
score and value products rounded to bf16 with f32 sums on Intel AMX tiles;
not over a q8_0 cache); weight_precision: "f32", or "bf16" (the products with
F32 / F16 / BF16 weight matrices in bf16 on AMX tiles, f32 sums; quantized
matrices keep int8); both bounds in kvshare/attention/gqa.h and
kvshare/model/model.h, both need AMX-BF16. Raises kvshare.Error for a missing or invalid file or a bad
option (kv_shared_layers out of range names the valid range), and for an mmproj
kvshare does not run or that belongs to another model (its width or markers).
One generation at a time per Model.)";

inline constexpr const char* kGenerateDoc = R"(Generates text; returns an iterator of str pieces (streamed as decoded).

prompt: str or a list of token ids (used as is). chat picks how a str prompt is
wrapped, as the kvshare CLI does: None = as the file says (its
tokenizer.chat_template in the Gemma 3 or Gemma 4 format; plain completion, the
prompt as is after <bos>, when the file has none, and with a UserWarning when
its template is one kvshare does not know); False = plain completion; True = the
file's chat template (kvshare.Error when it has none kvshare knows); "gemma",
"gemma4" or "none" = that format. Sampling: temperature (0 = greedy),
top_k (0 = off), top_p (1 = off), min_p (0 = off), repetition_penalty (1 = off),
presence_penalty and frequency_penalty (OpenAI's, in [-2, 2], over the tokens this
call generated; 0 = off), seed.
reset=True starts a new sequence; reset=False appends to the cached one (no second
<bos>). Generation stops at <eos>, at the chat format's end of turn (<end_of_turn>,
<turn|>) or after max_new_tokens.
Speculative decoding: draft = "ngram" (prompt lookup: drafts the tokens that
followed the longest recent n-gram earlier in the text), a kvshare.Model with
this model's vocabulary (a draft model, its own KV cache), or a
kvshare.Assistant (Gemma 4's assistant, which reads this model's KV cache); up to draft_max
tokens are drafted per step (fewer while the acceptance rate is low, unless
draft_adaptive=False) and verified in one forward pass. Greedy output is
bitwise the same as without; sampling keeps the model's distribution. .stats
then counts verify_steps, drafted_tokens and accepted_tokens.
Images (a Model loaded with mmproj=...): images = a list of file paths (str or
os.PathLike; JPEG, PNG, GIF, BMP, WebP), file bytes, or uint8 numpy arrays
(H, W, 3 or 4; or (H, W) grey), put in order before the prompt text in the
user message (a str prompt), as kvshare generate --image does. They are
decoded, preprocessed and encoded at the call (GIL released). max_soft_tokens:
Gemma 4's budget per image (70, 140, 280, 560, 1120); pan_and_scan: Gemma 3's
crops of long images; image_max_pixels: the largest image (width x height,
default 8192 x 8192), checked on a file's header before decoding and on an
array's shape, as kvshare generate --image-max-pixels. kvshare.Error at the
call for images without an mmproj, a bad file or array (naming images[i]), an
image over image_max_pixels, or token ids as the prompt.
Audio (an mmproj with an audio encoder): audio = a list of clips, each a file
path (WAV, FLAC, MP3, OGG), file bytes, a (float32 1-D numpy array, sample
rate) pair or {"array": ..., "sampling_rate": ...}; put after the images,
before the text; at most 600 s each (encoded in 30 s chunks). kvshare.Error at
the call, naming audio[i], for audio without an audio encoder, a bad file,
format or array, a clip too long or a sample rate of 0.
Raises kvshare.Error at the call for bad sampling options, and from the first
next() for errors of the run itself (e.g. a prompt that does not fit max_context).
The iterator's close() (or dropping it) stops the generation;
its .stats (a dict) is set once it has finished. The GIL is released while tokens
are computed.)";

inline constexpr const char* kPreprocessDoc = R"(The pixel tensors of an image as the model's HF processor makes them.

image: a path, file bytes or a uint8 numpy array (as generate's images).
Returns a list of float32 (3, H, W) arrays: one, or with Gemma 3's
pan_and_scan the image then its crops. kvshare.Error without an mmproj.)";

inline constexpr const char* kEncodeImageDoc = R"(An image's soft tokens: float32 (tokens, n_embd).

image: a path, file bytes or a uint8 numpy array (as generate's images),
preprocessed (max_soft_tokens, pan_and_scan) and encoded; the rows of every
pixel tensor in order, what generate splices into the prompt (before the
language model's sqrt(n_embd) scale). kvshare.Error without an mmproj.)";

inline constexpr const char* kEncodePixelsDoc = R"(The soft tokens of one pixel tensor: float32 (tokens, n_embd).

pixels: float32 (3, H, W), as preprocess_image returns them or as HF's
processor hands them to the model (Gemma 3 / 3n: image_size square; Gemma 4:
sides multiples of 48). kvshare.Error for another dtype, shape or geometry.)";

}  // namespace kvshare::python
