// The files decision commands read and write (baselines, plans, timelines, exported graphs), for every front end: the CLI's
// flags and the Python module's keywords name the same files and get the same messages.
#pragma once

#include <string>

namespace memplan {

// Refuses `path` as an output when it is the model itself (`flag` names the option in the message): memplan
// never overwrites what it reads. Throws InputError.
void refuse_model_as_output(const std::string& path, const std::string& model_path, const std::string& flag);

// The whole file; throws InputError "{flag} '{path}': cannot open" when it cannot be read.
std::string read_text_file(const std::string& path, const std::string& flag);

// Writes `text` to `path`, replacing it, with bytes outside well-formed UTF-8 escaped (onnx_import/utf8.h);
// throws InputError "cannot write {what}'{path}'" when that fails.
void write_text_file(const std::string& path, const std::string& text, const std::string& what = "");

// Writes `bytes` to `path` as they are (an ONNX file), replacing it; throws InputError as write_text_file does.
void write_binary_file(const std::string& path, const std::string& bytes, const std::string& what = "");

}  // namespace memplan
