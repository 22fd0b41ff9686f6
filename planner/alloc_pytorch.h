// PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), default configuration: one
// device, one stream, no max_split_size, no roundup_power2_divisions, no expandable segments.
// Each constant names its source below; docs/cost-models.md says how the simulation is used.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "planner/alloc_replay.h"

namespace memplan {

namespace pytorch {
// All in c10/cuda/CUDACachingAllocator.cpp (namespace constants at the top of the file).
inline constexpr uint64_t kMinBlockSize = 512;          // all sizes are rounded to at least 512 bytes
inline constexpr uint64_t kSmallSize = 1048576;         // largest "small" allocation is 1 MiB
inline constexpr uint64_t kSmallBuffer = 2097152;       // "small" allocations are packed in 2 MiB blocks
inline constexpr uint64_t kLargeBuffer = 20971520;      // "large" allocations may be packed in 20 MiB blocks
inline constexpr uint64_t kMinLargeAlloc = 10485760;    // allocations between 1 and 10 MiB may use kLargeBuffer
inline constexpr uint64_t kRoundLarge = 2097152;        // round up large allocations to 2 MiB

uint64_t round_size(uint64_t bytes);           // below 512 -> 512, else up to a multiple of 512
uint64_t allocation_size(uint64_t rounded);    // get_allocation_size: the segment cudaMalloc'd on a miss
bool is_small(uint64_t rounded);               // rounded <= kSmallSize: the small pool
}  // namespace pytorch

struct PytorchAllocatorOptions {
  // Device memory the allocator may reserve; 0 = unlimited. When a cudaMalloc would exceed it, the
  // allocator frees its cached whole segments and retries (release_cached_blocks), then reports OOM.
  uint64_t device_capacity_bytes = 0;
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: pages mapped into one range per pool
  // (planner/alloc_pytorch_expandable.h) instead of cudaMalloc'd segments.
  bool expandable_segments = false;
};

// The simulator those options describe.
std::unique_ptr<AllocatorModel> make_pytorch_allocator(PytorchAllocatorOptions options);

class CudaCachingAllocatorSim final : public AllocatorModel {
 public:
  explicit CudaCachingAllocatorSim(PytorchAllocatorOptions options = {}) : options_(options) {}

  int64_t allocate(uint64_t bytes) override;
  void release(int64_t handle) override;
  uint64_t allocated_bytes() const override { return allocated_; }
  uint64_t reserved_bytes() const override { return reserved_; }
  uint64_t peak_allocated_bytes() const override { return peak_allocated_; }
  uint64_t peak_reserved_bytes() const override { return peak_reserved_; }
  int64_t num_device_allocations() const override { return num_segments_created_; }
  int64_t num_allocs() const override { return num_allocs_; }
  // cudaMalloc calls that would have passed the capacity and made the allocator free its cache and retry
  // (memory_stats()["num_alloc_retries"]).
  int64_t num_alloc_retries() const override { return num_alloc_retries_; }

  // The size of the block behind a handle (what memory_allocated counts for it), and its address in the
  // simulated device space (segments are laid out in creation order), for tests and debug views.
  uint64_t block_size(int64_t handle) const { return blocks_[handle].size; }
  uint64_t block_address(int64_t handle) const { return blocks_[handle].address; }
  int64_t num_segments() const;  // segments currently reserved
  // The cache's state up to where it lies in the address space: per reserved segment, in address order, its pool
  // and its blocks in address order, each size and whether allocated. Every choice the allocator makes depends on
  // sizes and on the order of addresses only, so two states with equal layouts serve the same requests alike.
  std::vector<uint64_t> layout() const;

 private:
  struct Block {
    uint64_t size = 0;
    uint64_t address = 0;
    int32_t segment = 0;
    bool small = false;
    bool allocated = false;
    bool dead = false;     // merged away or released with its segment
    int64_t prev = -1;     // neighbours inside the same segment, by address
    int64_t next = -1;
  };
  // Free blocks of a pool, ordered as BlockComparatorSize: by size, then address (one stream).
  using Pool = std::set<std::tuple<uint64_t, uint64_t, int64_t>>;

  Pool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }
  void insert_free(int64_t b) { pool_of(blocks_[b].small).insert({blocks_[b].size, blocks_[b].address, b}); }
  void erase_free(int64_t b) { pool_of(blocks_[b].small).erase({blocks_[b].size, blocks_[b].address, b}); }
  int64_t new_segment(uint64_t size, bool small);  // -1 if the capacity forbids it
  void release_cached_segments();                  // release_cached_blocks: free every unsplit cached block
  void merge(int64_t into, int64_t from);          // from is the next neighbour of into

  PytorchAllocatorOptions options_;
  std::vector<Block> blocks_;
  Pool small_pool_, large_pool_;
  uint64_t next_address_ = 0;
  int32_t next_segment_ = 0;
  uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  int64_t num_segments_created_ = 0, num_allocs_ = 0, num_alloc_retries_ = 0;
};

AllocatorReplay simulate_pytorch(const Program& program, PytorchAllocatorOptions options = {});

// The program on a device of a given capacity: whether every request is served, and the replay.
struct PytorchAtCapacity {
  bool fits = false;
  int64_t alloc_retries = 0;  // cache flushes on the way (each a device synchronisation in PyTorch)
  AllocatorReplay replay;
};
PytorchAtCapacity simulate_pytorch_at_capacity(const Program& program, const ReplayOrder& order, uint64_t capacity_bytes,
                                              bool expandable_segments = false);

// The smallest device capacity on which the simulated allocator serves every request of the program,
// freeing its cache and retrying whenever a cudaMalloc would pass the capacity: what the step needs of the
// card, between max_memory_allocated and the unconstrained max_memory_reserved (`unconstrained`, the replay
// without a capacity, where the search starts). Every segment is a multiple of kRoundLarge
// (get_allocation_size), so whether a capacity suffices depends only on how many kRoundLarge units it holds;
// the answer is that many units, found by bisection: a capacity that runs with one unit less that does not.
// Sufficing is not monotone in general: gemma-2-9b's bf16 training step at 512 tokens runs at the answer B, not
// at B - 1 unit, again at B - 2 to B - 6 units, not at B - 7 (the best-fit choices differ once the cache is
// freed at another point), so the answer can be a few units above the least capacity; it is exact on the zoo
// programs tests/planner/alloc_pytorch_test.cc sweeps unit by unit, and check runs the step on its budget too.
// With expandable segments, pages are 2 and 20 MiB, so the same 2 MiB units hold.
uint64_t pytorch_min_capacity(const Program& program, const ReplayOrder& order, const AllocatorReplay& unconstrained,
                              bool expandable_segments = false);

}  // namespace memplan
