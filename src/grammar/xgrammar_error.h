// XgrammarMessage: an xgrammar exception's message without its "[HH:MM:SS] file.cc:LINE: " prefix
// and trailing newline, for the Status that replaces it at the library's boundary.
#pragma once
#include <exception>
#include <regex>
#include <string>

namespace chorus {

inline std::string XgrammarMessage(const std::exception& e) {
  static const std::regex prefix(R"(^\[[0-9:]+\] [^ ]+:[0-9]+: )");
  std::string m = std::regex_replace(e.what(), prefix, "", std::regex_constants::format_first_only);
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace chorus
