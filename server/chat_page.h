// GET /: a self-contained chat page (chat_page.html, no CDN, no build step)
// that streams replies from /v1/chat/completions (or /v1/completions when the
// model has no chat template), shows tokens per second and can stop a reply.
// The HTML is embedded at build time (CMake writes it into a C++ string).
#pragma once

#include <string_view>

namespace kvshare::server {

std::string_view ChatPageHtml();

}  // namespace kvshare::server
