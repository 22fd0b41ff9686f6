#include "validate/cpu_device.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "validate/pattern.h"

namespace memplan::validate {
namespace {

// Visits [position, position + bytes) as unaligned head bytes, whole 4-byte words, unaligned tail bytes.
template <typename ByteFn, typename WordFn>
void for_each_unit(uint64_t position, uint64_t bytes, ByteFn on_byte, WordFn on_word) {
  const uint64_t end = position + bytes;
  uint64_t p = position;
  while (p < end && p % 4 != 0) on_byte(p++);
  for (; p + 4 <= end; p += 4) on_word(p);
  while (p < end) on_byte(p++);
}

class CpuDevice final : public Device {
 public:
  std::string kind() const override { return "cpu"; }

  std::vector<std::pair<std::string, std::string>> describe() const override {
    return {{"allocator", "malloc"}, {"measure", "sum of malloc_usable_size of live allocations"}};
  }

  bool supports(Mode mode) const override { return mode != Mode::kPool; }

  // The bytes malloc actually granted to the replay's live allocations (each request rounded up to the
  // allocator's chunk granularity). Counted per allocation rather than read process-wide (mallinfo2), which
  // would also see the harness's own small allocations and chunks parked in glibc's per-thread cache.
  uint64_t used_bytes() override { return used_; }

  void begin_mode(Mode) override {}
  AllocatorHighWater end_mode(Mode) override { return {}; }

  void* allocate(uint64_t bytes, Mode, const std::string& what) override {
    void* ptr = std::malloc(bytes);
    if (ptr == nullptr) throw DeviceError("malloc of " + std::to_string(bytes) + " bytes for " + what + " failed");
    used_ += malloc_usable_size(ptr);
    return ptr;
  }

  void release(void* ptr, Mode) override {
    used_ -= malloc_usable_size(ptr);
    std::free(ptr);
  }

  void fill(void* ptr, uint64_t position, uint64_t bytes, uint32_t id) override {
    auto* base = static_cast<uint8_t*>(ptr) - position;  // pattern coordinates; never dereferenced below ptr
    for_each_unit(
        position, bytes, [&](uint64_t p) { base[p] = pattern_byte(id, p); },
        [&](uint64_t p) {
          const uint32_t word = pattern_word(id, p / 4);
          std::memcpy(base + p, &word, 4);
        });
  }

  std::optional<Mismatch> verify(const void* ptr, uint64_t position, uint64_t bytes, uint32_t id) override {
    const auto* base = static_cast<const uint8_t*>(ptr) - position;
    Mismatch m;
    bool any = false;
    auto note = [&](uint64_t p) {
      if (!any) m.position = p;
      any = true;
      ++m.mismatched_bytes;
    };
    for_each_unit(
        position, bytes, [&](uint64_t p) { if (base[p] != pattern_byte(id, p)) note(p); },
        [&](uint64_t p) {
          uint32_t word;
          std::memcpy(&word, base + p, 4);
          if (word == pattern_word(id, p / 4)) return;
          for (uint64_t k = 0; k < 4; ++k)
            if (base[p + k] != pattern_byte(id, p + k)) note(p + k);
        });
    if (!any) return std::nullopt;
    const uint64_t n = std::min<uint64_t>(kFoundBytes, position + bytes - m.position);
    m.found.assign(base + m.position, base + m.position + n);
    return m;
  }

 private:
  uint64_t used_ = 0;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

}  // namespace memplan::validate
