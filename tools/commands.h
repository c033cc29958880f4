// Subcommands of the `kvshare` CLI. Each registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace kvshare::cli {

// `kvshare bench`: prefill and decode tok/s of a GGUF model per thread count.
void RegisterBench(CLI::App& app);
// `kvshare bench-image`: preprocessing and encoding time of one image per thread count.
void RegisterBenchImage(CLI::App& app);
// `kvshare demo`: GroupQueryAttention on random data, timed.
void RegisterDemo(CLI::App& app);
// `kvshare generate`: text generation with a GGUF model.
void RegisterGenerate(CLI::App& app);
// `kvshare info [--model PATH]`: GGUF metadata, tensor summary, chat template.
void RegisterInfo(CLI::App& app);
// `kvshare perplexity`: perplexity of a model over a text file.
void RegisterPerplexity(CLI::App& app);
// `kvshare serve`: the OpenAI-compatible HTTP server (built with the server layer).
void RegisterServe(CLI::App& app);

}  // namespace kvshare::cli
