#include "kvshare/gguf/model_info.h"

#include <cstdio>
#include <map>
#include <string>

namespace kvshare {

namespace {

std::string ValueToString(const GgufValue& v) {
  char buf[64];
  switch (v.type) {
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64: return std::to_string(v.i);
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64: return std::to_string(v.u);
    case GgufType::kFloat32:
    case GgufType::kFloat64: std::snprintf(buf, sizeof buf, "%g", v.f); return buf;
    case GgufType::kBool: return v.u ? "true" : "false";
    case GgufType::kString: {
      std::string s(v.str.data(), v.str.size() < 60 ? v.str.size() : 60);
      if (v.str.size() > 60) s += "...";
      return "\"" + s + "\"";
    }
    case GgufType::kArray: {
      std::string s = "[";
      s.append(std::to_string(v.count)).append(" x ").append(GgufTypeName(v.elem_type)).append("]");
      return s;
    }
  }
  return "?";
}

std::string Mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  return buf;
}

}  // namespace

void PrintModelInfo(const GgufFile& file, std::ostream& os) {
  const GgufValue* arch_v = file.Find("general.architecture");
  const std::string arch = arch_v && arch_v->type == GgufType::kString ? std::string(arch_v->str) : "";
  os << "file: " << file.name() << " (" << Mb(static_cast<double>(file.file_size())) << ", GGUF v" << file.version()
     << ", alignment " << file.alignment() << ")\n";
  os << "architecture: " << (arch.empty() ? "<absent>" : arch) << "\n";
  for (const char* k : {"general.name", "general.file_type", "general.quantization_version"}) {
    if (const GgufValue* v = file.Find(k)) os << "  " << k << ": " << ValueToString(*v) << "\n";
  }
  if (!arch.empty()) {
    os << "hyperparameters:\n";
    const std::string prefix = arch + ".";
    for (const std::string& k : file.keys()) {
      if (k.compare(0, prefix.size(), prefix) == 0)
        os << "  " << k.substr(prefix.size()) << ": " << ValueToString(*file.Find(k)) << "\n";
    }
  }
  bool tok_header = false;
  for (const std::string& k : file.keys()) {
    if (k.compare(0, 10, "tokenizer.") != 0) continue;
    if (!tok_header) os << "tokenizer:\n";
    tok_header = true;
    os << "  " << k.substr(10) << ": " << ValueToString(*file.Find(k)) << "\n";
  }
  struct Agg {
    int count = 0;
    std::int64_t elems = 0;
    std::size_t bytes = 0;
  };
  std::map<std::string, Agg> by_type;
  Agg total;
  for (const GgufTensor& t : file.tensors()) {
    Agg& a = by_type[GgmlTypeName(t.type)];
    ++a.count;
    a.elems += t.NumElements();
    a.bytes += t.nbytes;
    ++total.count;
    total.elems += t.NumElements();
    total.bytes += t.nbytes;
  }
  os << "tensors: " << total.count << " (" << total.elems << " elements, " << Mb(static_cast<double>(total.bytes))
     << ")\n";
  for (const auto& [name, a] : by_type) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-6s %5d tensors %14lld elements %12s  %.3f bits/weight\n", name.c_str(),
                  a.count, static_cast<long long>(a.elems), Mb(static_cast<double>(a.bytes)).c_str(),
                  a.elems ? 8.0 * static_cast<double>(a.bytes) / static_cast<double>(a.elems) : 0.0);
    os << line;
  }
}

}  // namespace kvshare
