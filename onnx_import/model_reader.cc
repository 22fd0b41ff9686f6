#include "onnx_import/model_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>

#include "onnx_import/errors.h"
#include "onnx_import/graph.h"

namespace memplan {
namespace {

// Protobuf wire types (protobuf's encoding documentation); groups (3, 4) are not used by ONNX.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// The ONNX messages the walk enters: those that can (transitively) hold tensors. Every other field is
// copied whole; protobuf validates it when the small buffer is parsed.
enum class Msg { Model, TrainingInfo, Function, Graph, Node, Attribute, SparseTensor, Tensor };

// Field numbers from onnx-ml.proto (ONNX 1.12).
std::optional<Msg> child_message(Msg parent, uint32_t field) {
  switch (parent) {
    case Msg::Model:
      if (field == 7) return Msg::Graph;          // graph
      if (field == 20) return Msg::TrainingInfo;  // training_info
      if (field == 25) return Msg::Function;      // functions
      break;
    case Msg::TrainingInfo:
      if (field == 1 || field == 2) return Msg::Graph;  // initialization, algorithm
      break;
    case Msg::Function:
      if (field == 7) return Msg::Node;  // node
      break;
    case Msg::Graph:
      if (field == 1) return Msg::Node;           // node
      if (field == 5) return Msg::Tensor;         // initializer
      if (field == 15) return Msg::SparseTensor;  // sparse_initializer
      break;
    case Msg::Node:
      if (field == 5) return Msg::Attribute;  // attribute
      break;
    case Msg::Attribute:
      if (field == 5 || field == 10) return Msg::Tensor;         // t, tensors
      if (field == 6 || field == 11) return Msg::Graph;          // g, graphs
      if (field == 22 || field == 23) return Msg::SparseTensor;  // sparse_tensor, sparse_tensors
      break;
    case Msg::SparseTensor:
      if (field == 1 || field == 2) return Msg::Tensor;  // values, indices
      break;
    case Msg::Tensor:
      break;
  }
  return std::nullopt;
}

// TensorProto fields (onnx-ml.proto).
constexpr uint32_t kTensorDims = 1, kTensorDataType = 2, kTensorName = 8, kTensorDataLocation = 14;
constexpr uint32_t kDataLocationExternal = 1;

bool is_payload_field(uint32_t field) {
  // float_data, int32_data, string_data, int64_data, raw_data, double_data, uint64_data
  return field == 4 || field == 5 || field == 6 || field == 7 || field == 9 || field == 10 || field == 11;
}

bool is_integer_or_bool(DType t) {
  switch (t) {
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64:
    case DType::UInt8: case DType::UInt16: case DType::UInt32: case DType::UInt64:
    case DType::Bool: case DType::Int4: case DType::UInt4:
      return true;
    default:
      return false;
  }
}

struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t start = 0;      // offset of the tag
  uint64_t value = 0;      // offset of the first byte after the tag
  uint64_t end = 0;        // one past the value
  uint64_t varint = 0;     // the value of a varint field
  uint64_t body = 0;       // offset of a length-delimited field's bytes
  uint64_t body_size = 0;
};

void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// The bytes of a model: either in memory, or a file read through a small window with pread. A read-only
// mapping would be simpler, but the kernel maps whole page-cache folios around each touched page, so a
// mapping's resident size grows with the weights it is meant to skip; pread touches only what it copies.
class ByteSource {
 public:
  ByteSource(const uint8_t* data, uint64_t size) : size_(size), window_start_(0), window_(data), window_size_(size) {}
  ByteSource(int fd, uint64_t size, const std::string& name) : fd_(fd), size_(size), name_(name), buffer_(kWindow) {}

  uint64_t size() const { return size_; }

  uint8_t at(uint64_t offset) {
    if (offset - window_start_ >= window_size_) refill(offset);
    return window_[offset - window_start_];
  }

  // Appends bytes [offset, offset + n) to out.
  void copy(uint64_t offset, uint64_t n, std::string& out) {
    while (n > 0) {
      if (offset - window_start_ >= window_size_) refill(offset);
      const uint64_t chunk = std::min(n, window_size_ - (offset - window_start_));
      out.append(reinterpret_cast<const char*>(window_ + (offset - window_start_)), static_cast<size_t>(chunk));
      offset += chunk;
      n -= chunk;
    }
  }

 private:
  static constexpr uint64_t kWindow = 64 * 1024;

  void refill(uint64_t offset) {
    if (fd_ < 0 || offset >= size_) throw InternalError("memplan read past the end of the model bytes");
    const uint64_t want = std::min<uint64_t>(kWindow, size_ - offset);
    uint64_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd_, buffer_.data() + got, want - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw InputError("cannot read model '" + name_ + "': " + (r < 0 ? std::strerror(errno) : "file shrank while read"));
      got += static_cast<uint64_t>(r);
    }
    window_ = buffer_.data();
    window_start_ = offset;
    window_size_ = want;
  }

  int fd_ = -1;
  uint64_t size_ = 0;
  std::string name_;
  std::vector<uint8_t> buffer_;
  uint64_t window_start_ = 0;
  const uint8_t* window_ = nullptr;
  uint64_t window_size_ = 0;
};

// Walks a protobuf message, copying all of it except the payloads of large tensors.
class WireWalker {
 public:
  WireWalker(const std::string& name, ByteSource& src) : name_(name), src_(src) {}

  void walk(Msg kind, uint64_t p, uint64_t end, int depth, std::string& out) {
    if (depth > kMaxMessageDepth)
      throw InputError(name_ + ": protobuf messages nest deeper than " + std::to_string(kMaxMessageDepth) +
                       " levels (subgraphs within subgraphs); memplan refuses such files");
    if (kind == Msg::Tensor) return walk_tensor(p, end, out);
    Field f;
    while (next_field(p, end, f)) {
      const std::optional<Msg> child = f.wire == kLengthDelimited ? child_message(kind, f.number) : std::nullopt;
      if (!child) {
        src_.copy(f.start, f.end - f.start, out);
        continue;
      }
      // The child is written in place after a one-byte length; a longer length varint (bodies of 128
      // bytes or more) is made room for afterwards, so no body is built apart and copied.
      append_varint(out, (static_cast<uint64_t>(f.number) << 3) | kLengthDelimited);
      const size_t length_at = out.size();
      out.push_back('\0');
      walk(*child, f.body, f.body + f.body_size, depth + 1, out);
      std::string length;
      append_varint(length, out.size() - length_at - 1);
      out[length_at] = length[0];
      out.insert(length_at + 1, length, 1);
    }
  }

  uint64_t dropped_bytes() const { return dropped_; }

 private:
  // A TensorProto: fields may come in any order, so a first pass learns dtype and payload size, and a
  // second copies it, without its payload when that is too large to be a shape constant.
  void walk_tensor(uint64_t begin, uint64_t end, std::string& out) {
    int64_t data_type = 0;
    std::string tensor_name;
    std::vector<int64_t> dims;
    uint64_t payload = 0;
    Field f;
    for (uint64_t p = begin; next_field(p, end, f);) {
      if (f.number == kTensorDataType && f.wire == kVarint) data_type = static_cast<int64_t>(f.varint);
      if (f.number == kTensorName && f.wire == kLengthDelimited) {
        tensor_name.clear();
        src_.copy(f.body, f.body_size, tensor_name);
      }
      if (f.number == kTensorDims) read_int64s(f, dims);
      if (is_payload_field(f.number)) payload += payload_bytes(f);
    }
    const std::string what = tensor_name.empty() ? "a tensor with no name" : "tensor '" + tensor_name + "'";
    const std::optional<DType> dtype =
        data_type > 0 && data_type <= INT32_MAX ? dtype_from_onnx(static_cast<int32_t>(data_type)) : std::nullopt;
    if (!dtype)
      throw InputError(name_ + ": " + what + " has unknown data type " + std::to_string(data_type) +
                       " (ONNX TensorProto.DataType codes 1..22 are known)");
    for (int64_t d : dims)
      if (d < 0) throw InputError(name_ + ": " + what + " has a negative dimension (" + std::to_string(d) + ")");

    const uint64_t keep_limit = is_integer_or_bool(*dtype) ? kKeptIntegerPayloadBytes : kKeptOtherPayloadBytes;
    if (payload <= keep_limit) {
      src_.copy(begin, end - begin, out);
      return;
    }
    for (uint64_t p = begin; next_field(p, end, f);)
      if (!is_payload_field(f.number) && f.number != kTensorDataLocation) src_.copy(f.start, f.end - f.start, out);
    append_varint(out, (kTensorDataLocation << 3) | kVarint);
    append_varint(out, kDataLocationExternal);
    dropped_ += payload;
  }

  // The data bytes of a payload field (without its tag and length), as kKept*PayloadBytes count them.
  static uint64_t payload_bytes(const Field& f) {
    return f.wire == kLengthDelimited ? f.body_size : f.end - f.value;
  }

  // dims is `repeated int64`: packed (one length-delimited field) or one varint field per entry.
  void read_int64s(const Field& f, std::vector<int64_t>& out) {
    if (f.wire == kVarint) {
      out.push_back(static_cast<int64_t>(f.varint));
    } else if (f.wire == kLengthDelimited) {
      uint64_t p = f.body;
      const uint64_t end = f.body + f.body_size;
      while (p < end) out.push_back(static_cast<int64_t>(read_varint(p, end)));
    }
  }

  // Reads the field at p (advancing p past it); false at the end of the message.
  bool next_field(uint64_t& p, uint64_t end, Field& f) {
    if (p >= end) return false;
    f.start = p;
    const uint64_t tag = read_varint(p, end);
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    f.value = p;
    if (f.number == 0 || (tag >> 3) > 0x1fffffff) corrupt(f.start, "invalid field number");
    switch (f.wire) {
      case kVarint:
        f.varint = read_varint(p, end);
        break;
      case kFixed64:
        skip(p, end, 8);
        break;
      case kFixed32:
        skip(p, end, 4);
        break;
      case kLengthDelimited:
        f.body_size = read_varint(p, end);
        f.body = p;
        skip(p, end, f.body_size);
        break;
      default:
        corrupt(f.start, "unsupported wire type " + std::to_string(f.wire));
    }
    f.end = p;
    return true;
  }

  uint64_t read_varint(uint64_t& p, uint64_t end) {
    const uint64_t start = p;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) corrupt(start, "truncated varint");
      const uint8_t b = src_.at(p++);
      if (shift == 63 && b > 1) corrupt(start, "varint longer than 64 bits");
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    corrupt(start, "varint longer than 10 bytes");
  }

  void skip(uint64_t& p, uint64_t end, uint64_t n) {
    if (n > end - p) corrupt(p, "field runs past the end of its message");
    p += n;
  }

  [[noreturn]] void corrupt(uint64_t at, const std::string& why) {
    throw InputError(name_ + " is not a valid ONNX file: truncated or corrupt protobuf at byte " +
                     std::to_string(at) + " (" + why + ")");
  }

  const std::string& name_;
  ByteSource& src_;
  uint64_t dropped_ = 0;
};

// A file opened read-only, closed on destruction.
class InputFile {
 public:
  explicit InputFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw InputError("cannot open model '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw InputError("cannot read model '" + path + "': " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) throw InputError("model '" + path + "' is a directory, not an ONNX file");
    if (!S_ISREG(st.st_mode)) throw InputError("model '" + path + "' is not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

constexpr uint64_t kReserveBound = 256 * 1024 * 1024;

ReadModel read_model(const std::string& name, ByteSource& src) {
  if (src.size() == 0) throw InputError("model '" + name + "' is empty (0 bytes), not an ONNX file");
  WireWalker walker(name, src);
  // The copy is at most about the file's size. Reserving that (up to a bound) spares the copies and freshly
  // touched pages of every regrowth; capacity never written costs address space, not memory.
  std::string small;
  small.reserve(static_cast<size_t>(std::min<uint64_t>(src.size(), kReserveBound)));
  walker.walk(Msg::Model, 0, src.size(), 1, small);
  if (small.size() > static_cast<size_t>(INT_MAX))
    throw InputError(name + ": the model's structure without its weights exceeds protobuf's 2 GiB limit");

  ReadModel result;
  result.file_bytes = src.size();
  result.dropped_payload_bytes = walker.dropped_bytes();
  if (!result.proto.ParseFromString(small))
    throw InputError(name + " is not a valid ONNX file: its protobuf does not parse as an ONNX ModelProto");
  if (!result.proto.has_graph())
    throw InputError(name + " is not an ONNX model: it has no graph (is it another kind of protobuf file?)");
  const int64_t ir = result.proto.ir_version();
  if (ir > kNewestKnownIrVersion)
    result.warnings.push_back(name + " has IR version " + std::to_string(ir) + ", newer than the " +
                              std::to_string(kNewestKnownIrVersion) +
                              " that memplan's ONNX 1.12 knows; fields added since are ignored");
  return result;
}

}  // namespace

ReadModel::ReadModel()
    : arena(std::make_unique<google::protobuf::Arena>()),
      proto(*google::protobuf::Arena::CreateMessage<onnx::ModelProto>(arena.get())) {}

ReadModel read_model_bytes(const std::string& name, const uint8_t* data, uint64_t size) {
  ByteSource src(data, size);
  return read_model(name, src);
}

ReadModel read_model_file(const std::string& path) {
  const InputFile file(path);
  ByteSource src(file.fd(), file.size(), path);
  return read_model(path, src);
}

}  // namespace memplan
