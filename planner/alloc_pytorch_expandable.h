// PyTorch's CUDA caching allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
// (c10/cuda/CUDACachingAllocator.cpp, ExpandableSegment and the *_expandable_* paths), one device, one stream.
//
// Instead of one cudaMalloc per segment, each pool reserves one virtual range and maps physical pages into it
// on demand: pages of kSmallBuffer (2 MiB) in the small pool, kLargeBuffer (20 MiB) in the large pool
// (find_expandable_block: `segment_size = pool->is_small ? kSmallBuffer : kLargeBuffer`). What this changes:
//  - on a miss (no cached block fits, get_free_block), the request goes to the lowest-addressed run of
//    unallocated address space (a free mapped block followed by unmapped space, or unmapped space) that is
//    large enough, and only the pages it lacks are mapped (try_allocate_expandable_block, map_block);
//  - blocks of either pool split whenever the rest is at least 512 B (should_split);
//  - mapped and unmapped blocks never merge (try_merge_blocks requires dst->mapped == src->mapped);
//  - when the capacity is reached, release_cached_blocks unmaps every whole page inside every free block
//    (unmap_block), also inside a range that still holds live blocks: what a fixed segment cannot give back.
// reserved counts mapped bytes; allocated counts blocks, as in the fixed-segment simulator.
#pragma once

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "planner/alloc_replay.h"

namespace memplan {

class ExpandableSegmentsSim final : public AllocatorModel {
 public:
  explicit ExpandableSegmentsSim(uint64_t device_capacity_bytes = 0) : capacity_(device_capacity_bytes) {}

  int64_t allocate(uint64_t bytes) override;
  void release(int64_t handle) override;
  uint64_t allocated_bytes() const override { return allocated_; }
  uint64_t reserved_bytes() const override { return reserved_; }
  uint64_t peak_allocated_bytes() const override { return peak_allocated_; }
  uint64_t peak_reserved_bytes() const override { return peak_reserved_; }
  int64_t num_device_allocations() const override { return num_maps_; }  // page mappings (cuMemMap calls)
  int64_t num_allocs() const override { return num_allocs_; }
  int64_t num_alloc_retries() const override { return num_alloc_retries_; }

  uint64_t block_size(int64_t handle) const { return blocks_[handle].size; }
  uint64_t block_address(int64_t handle) const { return blocks_[handle].address; }

 private:
  struct Block {
    uint64_t address = 0, size = 0;
    bool small = false, mapped = false, allocated = false, dead = false;
    int64_t prev = -1, next = -1;
  };
  struct Pool {
    std::set<std::tuple<uint64_t, uint64_t, int64_t>> free;  // mapped free blocks by (size, address)
    std::set<std::pair<uint64_t, int64_t>> unmapped;        // unmapped blocks by address
  };

  Pool& pool_of(bool small) { return small ? small_ : large_; }
  void index(int64_t b);    // into its pool's free or unmapped set (not while allocated)
  void unindex(int64_t b);
  int64_t split(int64_t b, uint64_t first_size);  // b keeps [0, first_size); returns the rest
  int64_t merge_free(int64_t b);                  // with free neighbours of the same mapping; returns the result
  int64_t find_expandable(bool small, uint64_t size);
  int64_t map(int64_t unmapped, uint64_t size);  // maps the pages covering its first `size` bytes; -1 past capacity
  int64_t try_allocate_expandable(bool small, uint64_t size);
  void release_cached();                      // unmap every whole page inside every free block

  uint64_t capacity_;
  std::vector<Block> blocks_;
  Pool small_, large_;
  bool started_[2] = {false, false};
  uint64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  int64_t num_maps_ = 0, num_allocs_ = 0, num_alloc_retries_ = 0;
};

}  // namespace memplan
