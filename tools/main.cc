// The kvshare command-line tool.
#include <iostream>

#include "commands.h"
#include "kvshare/common/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kvshare: Gemma 3, 3n and 4 GGUF models (generate, serve, bench, perplexity, info) and the "
      "GroupQueryAttention op alone (demo)"};
  app.require_subcommand(1);
  kvshare::cli::RegisterBench(app);
  kvshare::cli::RegisterBenchImage(app);
  kvshare::cli::RegisterDemo(app);
  kvshare::cli::RegisterGenerate(app);
  kvshare::cli::RegisterInfo(app);
  kvshare::cli::RegisterPerplexity(app);
#ifdef KVSHARE_HAVE_SERVER
  kvshare::cli::RegisterServe(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kvshare::Error& e) {
    std::cerr << "kvshare: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
