#include "report/sizes.h"

#include <gtest/gtest.h>

#include "onnx_import/errors.h"

namespace memplan {
namespace {

TEST(ParseSize, BinaryAndDecimalUnitsAreDistinct) {
  EXPECT_EQ(parse_size("24GiB"), 24ull * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_size("24GB"), 24'000'000'000ull);
  EXPECT_EQ(parse_size("80G"), 80ull << 30);  // a bare G is binary, as free -g and docker --memory read it
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("512mib"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5 GiB"), 1610612736ull);
  EXPECT_EQ(parse_size("1048576"), 1048576ull);
  EXPECT_EQ(parse_size("100B"), 100ull);
  EXPECT_EQ(parse_size("2TB"), 2'000'000'000'000ull);
}

TEST(ParseSize, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "GiB", "12 parsecs", "-1GiB", "1..2G", "99999999999999999999999TiB"})
    EXPECT_THROW(parse_size(bad, "--budget"), InputError) << bad;
  try {
    parse_size("lots", "--memory");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--memory 'lots'"), std::string::npos) << e.what();
  }
}

TEST(FormatBytes, BinaryUnitsThreeDigits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(46'792'704), "44.6 MiB");  // 46,792,704 / 2^20 = 44.625
  EXPECT_EQ(format_bytes(80ull << 30), "80.0 GiB");
  EXPECT_EQ(format_bytes(300ull << 30), "300 GiB");
  EXPECT_EQ(format_count(1'320'702'443), "1,320,702,443");
  EXPECT_EQ(format_count(999), "999");
}

}  // namespace
}  // namespace memplan
