// The fully shaped tensor graph: what the importer produces and every later stage reads.
// Dense integer ids (tensor and node indices); names are kept for reports only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memplan {

// Element types, named as numpy does. Values are ours, not ONNX's; see dtype_from_onnx().
enum class DType : uint8_t {
  Undefined, Float32, Float16, BFloat16, Float64, Int8, Int16, Int32, Int64,
  UInt8, UInt16, UInt32, UInt64, Bool, String, Complex64, Complex128,
  Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Int4, UInt4,
};

// Maps ONNX TensorProto::DataType (onnx.proto, values 0..22) to DType; nullopt for unknown codes.
std::optional<DType> dtype_from_onnx(int32_t onnx_code);
int32_t dtype_to_onnx(DType t);
std::string_view dtype_name(DType t);               // "float32", "bfloat16", ...
std::optional<DType> dtype_from_name(std::string_view name);
int dtype_bits(DType t);                            // 32, 16, 4, ...; 0 for Undefined and String
bool dtype_is_float(DType t);                       // float16/bfloat16/float32/float64/float8*
// The bytes `elements` values of type `t` take: bits / 8 each, 4-bit types packed two per byte and rounded up
// (onnx.proto, INT4/UINT4); nullopt past 64 bits.
std::optional<uint64_t> dtype_bytes(DType t, uint64_t elements);
// int8..int64, uint8..uint64 and bool: the types whose contents shape computations read as integers.
// int4/uint4 are not included: they are packed two per byte and memplan never reads their contents.
bool dtype_is_integer(DType t);

// "ai.onnx" and "" name the same default domain (onnx.proto, OperatorSetIdProto); memplan writes it as "".
std::string_view normalize_domain(std::string_view domain);

enum class TensorKind : uint8_t {
  Input,       // graph input that is not an initializer
  Weight,      // initializer of a floating type: trainable parameter
  Constant,    // output of a Constant node, or a non-float initializer (buffer)
  Activation,  // produced by a node, not a graph output
  Output,      // graph output
};
std::string_view kind_name(TensorKind k);

// An attribute value, as much as the cost models need (subgraphs are analysed by the importer).
struct Attribute {
  enum class Type : uint8_t { Int, Float, String, Ints, Floats, Strings, Tensor, Graph, Other } type = Type::Other;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
};

// What a value holds (onnx.proto TypeProto): a tensor, a sequence of tensors, or an optional (a tensor, a
// sequence, or nothing).
enum class ValueType : uint8_t { Tensor, Sequence, Optional };

struct Tensor {
  std::string name;
  DType dtype = DType::Undefined;
  std::vector<int64_t> shape;      // concrete after import; every entry >= 0
  TensorKind kind = TensorKind::Activation;
  int32_t producer = -1;           // node index; -1 for graph inputs and initializers
  std::vector<int32_t> consumers;  // node indices, in schedule order, one entry per use
  bool trainable = false;          // Weight tensors: a trainable parameter (false for BatchNorm statistics)
  // Known integer contents of small shape-like tensors (Shape outputs, shape constants); empty when unknown.
  std::optional<std::vector<int64_t>> int_value;
  // Known contents of small floating-point constants (a dropout ratio, an epsilon); empty when unknown.
  std::optional<std::vector<double>> real_value;
  // Sequence and optional values: `shape` is empty and `element_shapes` lists the shape of every tensor the
  // value holds (a sequence's elements in order; an optional's tensor or sequence elements, none when empty).
  // Their memory is the sum of those tensors': elements() and bytes() sum over them.
  ValueType value_type = ValueType::Tensor;
  std::vector<std::vector<int64_t>> element_shapes;

  uint64_t elements() const;       // product of shape (a sequence's: the sum); throws ShapeOverflow past 2^63
  uint64_t bytes() const;          // elements * element size (int4 packed), overflow-checked
};

struct Node {
  std::string name;                // unique: the model's name, or "<op_type>_<index>" when it has none
  std::string op_type;
  std::string domain;              // "" for the default ONNX domain
  int opset = 0;                   // the opset version of its domain that the model imports
  std::vector<int32_t> inputs;     // tensor ids; -1 for an omitted optional input
  std::vector<int32_t> outputs;    // tensor ids; -1 for an omitted optional output
  std::map<std::string, Attribute> attributes;

  int64_t int_attribute(const std::string& name, int64_t fallback) const;  // `fallback` when the node lacks it
};

struct Graph {
  std::string model_path;
  std::string producer;            // producer_name + " " + producer_version
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  std::vector<Tensor> tensors;
  std::vector<Node> nodes;                // in a valid topological order (the model's order when it is one)
  std::vector<int32_t> inputs;            // graph inputs that are not initializers
  std::vector<int32_t> outputs;
  std::vector<int32_t> initializers;
  std::map<std::string, int64_t> bound_dims;  // symbolic dimension name -> value used
  std::vector<std::string> bound_values;      // graph inputs whose contents --value gives (sorted)
  std::vector<std::string> warnings;
  // Initializers the file records as a tied parameter's transposed copy (metadata kTiedCopyMetadataKey, written by
  // memplan's config graphs: the tie a config states, which constant folding hides): (copy, parameter) ids. The
  // cost models hold such a copy in its parameter's buffer, as PyTorch holds one tied parameter.
  std::vector<std::pair<int32_t, int32_t>> recorded_tied_copies;
  // The hidden size the file records (metadata kHiddenSizeMetadataKey, written by memplan's config graphs: the
  // config's hidden_size, which HF Trainer's DeepSpeed "auto" keys read); 0 when none.
  int64_t recorded_hidden_size = 0;

  std::optional<int32_t> find_tensor(std::string_view name) const;
};

// The ModelProto metadata_props key of a recorded tie; its value is "COPY=PARAMETER" (initializer names).
inline constexpr const char* kTiedCopyMetadataKey = "memplan.tied_copy";
// The ModelProto metadata_props key of the config's hidden_size; its value a positive decimal integer.
inline constexpr const char* kHiddenSizeMetadataKey = "memplan.hidden_size";

}  // namespace memplan
