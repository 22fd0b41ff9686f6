// Text memplan prints or raises is valid UTF-8. ONNX names are proto2 strings, which protobuf does not check for
// UTF-8, so a name may hold any bytes: each byte that does not belong to a well-formed UTF-8 sequence (RFC 3629,
// section 4: no overlong forms, no surrogates, nothing above U+10FFFF) is written as the four characters \xNN.
// Used where messages are built (Error's constructor, onnx_import/errors.h) and where the CLI prints (cli/main.cc).
#pragma once

#include <string>
#include <string_view>

namespace memplan {

// The length of the well-formed UTF-8 sequence `s` starts with (1 to 4); 0 when s[0] starts none; -1 when
// `s` is a well-formed sequence cut short (more bytes may complete it). `s` must not be empty.
inline int utf8_sequence_length(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  int n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte; later bytes are always 80..BF
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) lo = 0xA0;  // overlong
    if (lead == 0xED) hi = 0x9F;  // U+D800..U+DFFF, surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) lo = 0x90;  // overlong
    if (lead == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  for (int i = 1; i < n; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return -1;
    const unsigned char c = byte(i);
    if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return 0;
  }
  return n;
}

// "\xNN" for one byte.
inline std::string escaped_byte(unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  return {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
}

// `text` with every byte outside a well-formed UTF-8 sequence written as \xNN; valid text is returned unchanged.
inline std::string escape_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const int n = utf8_sequence_length(text.substr(i));
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {  // 0, or -1 at the end of the text: a sequence nothing completes
      out += escaped_byte(static_cast<unsigned char>(text[i]));
      ++i;
    }
  }
  return out;
}

}  // namespace memplan
