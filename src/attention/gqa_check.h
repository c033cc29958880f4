// The GQA front end's check: a kvshare::Error prefixed with the op's name,
// its message formatted only on failure (validation runs on every call).
// Internal header, for the files that validate the op's inputs.
#pragma once

#include <string>

#include "common/str.h"
#include "kvshare/common/error.h"

namespace kvshare::detail {

[[noreturn]] inline void GqaFail(const std::string& msg) { throw Error("GroupQueryAttention: " + msg); }

}  // namespace kvshare::detail

#define KVS_CHECK(cond, ...)                                                      \
  do {                                                                            \
    if (!(cond)) ::kvshare::detail::GqaFail(::kvshare::detail::Str(__VA_ARGS__)); \
  } while (0)
