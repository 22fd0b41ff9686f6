// NameIndex (onnx_import/name_index.h): the importer's name -> id table behaves as the std::unordered_map it
// replaced, through growth.
#include "onnx_import/name_index.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace memplan {
namespace {

TEST(NameIndex, EmplaceFindAndIndexAsAnUnorderedMap) {
  NameIndex index;  // 16 slots: grows past 8 names
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) names.push_back("/layers." + std::to_string(i) + "/mlp/MatMul_output_0");
  for (int i = 0; i < 1000; ++i) {
    const auto [value, inserted] = index.emplace(names[i], i);
    EXPECT_TRUE(inserted);
    EXPECT_EQ(*value, i);
  }
  EXPECT_EQ(index.size(), 1000u);
  // A name already there keeps its value (std::unordered_map::emplace).
  const auto [kept, inserted] = index.emplace(names[7], 99);
  EXPECT_FALSE(inserted);
  EXPECT_EQ(*kept, 7);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(*index.find(names[i]), i);
  EXPECT_EQ(index.find("/layers.1000/mlp/MatMul_output_0"), nullptr);
  EXPECT_FALSE(index.contains(""));
  // operator[]: a new name counts from 0; the empty name is a name like any other.
  NameIndex counts(4);
  ++counts["x"], ++counts["x"], ++counts[""];
  EXPECT_EQ(*counts.find("x"), 2);
  EXPECT_EQ(*counts.find(""), 1);
  EXPECT_EQ(counts.size(), 2u);
}

}  // namespace
}  // namespace memplan
