// Byte sizes as people write and read them. Binary (KiB, MiB, GiB, TiB = 1024^k) and decimal
// (kB, MB, GB, TB = 1000^k) are kept apart; a bare K/M/G/T (as in `free -g` or docker --memory) is binary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memplan {

// Parses "24GiB", "24GB", "80G", "512MiB", "1.5 GiB", "1048576" (plain bytes). Throws InputError naming `what`.
uint64_t parse_size(std::string_view text, std::string_view what = "size");

// "1.23 GiB": binary units, three significant digits; exact bytes below 1 KiB.
std::string format_bytes(uint64_t bytes);

// "1,320,702,443": exact bytes with thousands separators.
std::string format_count(uint64_t n);

}  // namespace memplan
