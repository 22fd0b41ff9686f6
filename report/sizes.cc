#include "report/sizes.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

struct Unit {
  std::string_view suffix;  // compared case-insensitively, except that "b" alone means bytes
  double factor;
};

// Longest suffixes first so that "GiB" is not read as "G" + "iB".
constexpr Unit kUnits[] = {
    {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
    {"kb", 1e3},     {"mb", 1e6},        {"gb", 1e9},           {"tb", 1e12},
    {"k", 1024.0},   {"m", 1048576.0},   {"g", 1073741824.0},   {"t", 1099511627776.0},
    {"b", 1.0},      {"", 1.0},
};

std::string lower_ascii(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

}  // namespace

uint64_t parse_size(std::string_view text, std::string_view what) {
  const std::string bad = std::string(what) + " '" + std::string(text) +
                          "' is not a size: write e.g. 24GiB (binary), 24GB (decimal), 80G (= GiB) or 512MiB";
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) throw InputError(bad);
  const std::string number(text.substr(0, i));
  std::string_view rest = text.substr(i);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  const std::string suffix = lower_ascii(rest);
  for (const Unit& u : kUnits) {
    if (suffix != u.suffix) continue;
    char* end = nullptr;
    const double value = std::strtod(number.c_str(), &end);
    if (end != number.c_str() + number.size() || !std::isfinite(value)) throw InputError(bad);
    const double bytes = std::round(value * u.factor);
    if (bytes >= 18446744073709551615.0) throw InputError(std::string(what) + " '" + std::string(text) + "' is too large");
    return static_cast<uint64_t>(bytes);
  }
  throw InputError(bad);
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 6) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f %s" : v >= 10 ? "%.1f %s" : "%.2f %s", v, kNames[unit]);
  return buf;
}

std::string format_count(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace memplan
