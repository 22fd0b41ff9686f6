// ONNX Runtime's BFC arena (onnxruntime/core/framework/bfc_arena.{h,cc}), default configuration:
// kNextPowerOfTwo extension, one stream, no memory limit unless given.
// Each constant names its source below; docs/cost-models.md says how the simulation is used.
#pragma once

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "planner/alloc_replay.h"

namespace memplan {

namespace ort {
// bfc_arena.h: kMinAllocationBits = 8, kMinAllocationSize = 1 << kMinAllocationBits.
inline constexpr uint64_t kMinAllocationSize = 256;
// bfc_arena.h: DEFAULT_INITIAL_CHUNK_SIZE_BYTES = 1 * 1024 * 1024 (the first region).
inline constexpr uint64_t kDefaultInitialChunkBytes = 1048576;
// bfc_arena.h: DEFAULT_MAX_DEAD_BYTES_PER_CHUNK = 128 * 1024 * 1024 (split when the waste would exceed it).
inline constexpr uint64_t kDefaultMaxDeadBytesPerChunk = 134217728;

uint64_t rounded_bytes(uint64_t bytes);  // RoundedBytes: up to a multiple of 256
}  // namespace ort

enum class ArenaExtendStrategy : uint8_t { kNextPowerOfTwo, kSameAsRequested };

struct BfcOptions {
  ArenaExtendStrategy extend_strategy = ArenaExtendStrategy::kNextPowerOfTwo;
  uint64_t initial_chunk_bytes = ort::kDefaultInitialChunkBytes;
  uint64_t max_dead_bytes_per_chunk = ort::kDefaultMaxDeadBytesPerChunk;
  uint64_t memory_limit_bytes = 0;  // gpu_mem_limit; 0 = unlimited (ORT's default is SIZE_MAX)
};

class BfcArenaSim final : public AllocatorModel {
 public:
  explicit BfcArenaSim(BfcOptions options = {});

  int64_t allocate(uint64_t bytes) override;
  void release(int64_t handle) override;
  uint64_t allocated_bytes() const override { return in_use_; }         // stats: InUse
  uint64_t reserved_bytes() const override { return total_allocated_; }  // stats: TotalAllocated
  uint64_t peak_allocated_bytes() const override { return max_in_use_; } // stats: MaxInUse
  uint64_t peak_reserved_bytes() const override { return total_allocated_; }  // no Shrink: only grows
  int64_t num_device_allocations() const override { return num_extensions_; }  // NumArenaExtensions
  int64_t num_allocs() const override { return num_allocs_; }

  uint64_t chunk_size(int64_t handle) const { return chunks_[handle].size; }
  uint64_t chunk_address(int64_t handle) const { return chunks_[handle].address; }
  std::vector<uint64_t> region_sizes() const { return regions_; }

 private:
  struct Chunk {
    uint64_t size = 0;
    uint64_t address = 0;
    bool in_use = false;
    bool dead = false;
    int64_t prev = -1;
    int64_t next = -1;
  };
  bool extend(uint64_t rounded);  // Extend: adds a region, false when the limit forbids it
  void insert_free(int64_t c) { free_.insert({chunks_[c].size, chunks_[c].address, c}); }
  void erase_free(int64_t c) { free_.erase({chunks_[c].size, chunks_[c].address, c}); }
  void merge(int64_t into, int64_t from);

  BfcOptions options_;
  std::vector<Chunk> chunks_;
  // Free chunks by (size, address). ORT keeps 21 bins, each a set ordered by (size, address), and
  // FindChunkPtr scans bins upward from the request's bin taking the first chunk >= the request: bins
  // cover ascending size ranges, so that is the globally smallest fitting chunk, lowest address on a
  // tie — exactly lower_bound on this single set.
  std::set<std::tuple<uint64_t, uint64_t, int64_t>> free_;
  std::vector<uint64_t> regions_;
  uint64_t curr_region_allocation_bytes_;
  uint64_t next_address_ = 0;
  uint64_t in_use_ = 0, max_in_use_ = 0, total_allocated_ = 0;
  int64_t num_extensions_ = 0, num_allocs_ = 0;
};

AllocatorReplay simulate_ort_bfc(const Program& program, BfcOptions options = {});

// ORT's memory pattern (session option enable_mem_pattern, on by default): after the first run, a run
// with the same shapes asks the arena for one block of the recorded pattern's peak instead of one per
// tensor. Models that steady state: the resident buffers (initializers) one by one in buffer order, then
// one block of `pattern_bytes` (pass the static plan's arena). The series have no per-step entries.
AllocatorReplay simulate_ort_memory_pattern(const Program& program, uint64_t pattern_bytes, BfcOptions options = {});

}  // namespace memplan
