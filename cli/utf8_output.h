// Everything the CLI prints goes through one filter: bytes outside well-formed UTF-8 (a tensor name from the
// model, echoed in a table, a warning or an error) are written as \xNN (onnx_import/utf8.h), so memplan's
// standard output and standard error are always valid UTF-8, whichever command or format printed them.
#pragma once

#include <iostream>
#include <streambuf>
#include <string>

#include "onnx_import/utf8.h"

namespace memplan::cli {

// A streambuf in front of another: valid sequences pass unchanged; a sequence split across writes waits for
// its remaining bytes; what is left incomplete when the filter closes is escaped.
class Utf8EscapingBuf : public std::streambuf {
 public:
  explicit Utf8EscapingBuf(std::streambuf* out) : out_(out) {}
  ~Utf8EscapingBuf() override { close(); }

  // Escapes an incomplete sequence still waiting and flushes.
  void close() {
    for (const char c : pending_) emit(escaped_byte(static_cast<unsigned char>(c)));
    pending_.clear();
    out_->pubsync();
  }

 protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
    const char c = traits_type::to_char_type(ch);
    put(&c, 1);
    return ch;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    put(s, static_cast<size_t>(n));
    return n;
  }
  int sync() override { return out_->pubsync(); }

 private:
  void emit(std::string_view s) { out_->sputn(s.data(), static_cast<std::streamsize>(s.size())); }

  void put(const char* s, size_t n) {
    pending_.append(s, n);
    size_t i = 0, run = 0;  // pending_[run, i) is well-formed and not yet written
    while (i < pending_.size()) {
      const int len = utf8_sequence_length(std::string_view(pending_).substr(i));
      if (len > 0) {
        i += len;
        continue;
      }
      if (len < 0) break;  // wait for the rest of the sequence
      emit(std::string_view(pending_).substr(run, i - run));
      emit(escaped_byte(static_cast<unsigned char>(pending_[i])));
      run = ++i;
    }
    emit(std::string_view(pending_).substr(run, i - run));
    pending_.erase(0, i);
  }

  std::streambuf* out_;
  std::string pending_;
};

// Puts the filter in front of std::cout and std::cerr for its lifetime.
class Utf8Output {
 public:
  Utf8Output() : out_(std::cout.rdbuf()), err_(std::cerr.rdbuf()) {
    old_out_ = std::cout.rdbuf(&out_);
    old_err_ = std::cerr.rdbuf(&err_);
  }
  ~Utf8Output() {
    std::cout.flush();
    out_.close();
    err_.close();
    std::cout.rdbuf(old_out_);
    std::cerr.rdbuf(old_err_);
  }
  Utf8Output(const Utf8Output&) = delete;
  Utf8Output& operator=(const Utf8Output&) = delete;

 private:
  Utf8EscapingBuf out_, err_;
  std::streambuf* old_out_ = nullptr;
  std::streambuf* old_err_ = nullptr;
};

}  // namespace memplan::cli
