#include "report/files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "onnx_import/errors.h"
#include "onnx_import/utf8.h"

namespace memplan {

void refuse_model_as_output(const std::string& path, const std::string& model_path, const std::string& flag) {
  std::error_code ec;
  if (std::filesystem::equivalent(path, model_path, ec))
    throw InputError(flag + " " + path + " is the model itself: memplan never overwrites what it reads");
}

std::string read_text_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(flag + " '" + path + "': cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << escape_invalid_utf8(text)) || !out.flush()) throw InputError("cannot write " + what + "'" + path + "'");
}

void write_binary_file(const std::string& path, const std::string& bytes, const std::string& what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !out.flush())
    throw InputError("cannot write " + what + "'" + path + "'");
}

}  // namespace memplan
