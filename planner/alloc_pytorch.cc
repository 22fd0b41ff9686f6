#include "planner/alloc_pytorch.h"

#include <algorithm>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "planner/alloc_pytorch_expandable.h"

namespace memplan {

namespace pytorch {

// round_size: below kMinBlockSize -> kMinBlockSize, else a multiple of it (roundup_power2_divisions off).
uint64_t round_size(uint64_t bytes) { return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize); }

// get_allocation_size: <= 1 MiB -> 2 MiB segment; < 10 MiB -> 20 MiB; else rounded up to 2 MiB.
uint64_t allocation_size(uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

// get_pool: size <= kSmallSize uses the small pool.
bool is_small(uint64_t rounded) { return rounded <= kSmallSize; }

}  // namespace pytorch

int64_t CudaCachingAllocatorSim::new_segment(uint64_t size, bool small) {
  if (options_.device_capacity_bytes != 0 && reserved_ + size > options_.device_capacity_bytes) {
    // malloc(): alloc_block fails, release_available_cached_blocks does nothing without max_split_size, then
    // release_cached_blocks() frees every unsplit cached block and alloc_block retries.
    ++num_alloc_retries_;
    release_cached_segments();
    if (reserved_ + size > options_.device_capacity_bytes) return -1;
  }
  Block seg;
  seg.size = size;
  seg.address = next_address_;
  seg.segment = next_segment_++;
  seg.small = small;
  next_address_ = checked_add(next_address_, size, "simulated address space");
  blocks_.push_back(seg);
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++num_segments_created_;
  return static_cast<int64_t>(blocks_.size()) - 1;
}

void CudaCachingAllocatorSim::release_cached_segments() {
  // A cached block with no neighbour is a whole free segment: cudaFree it.
  for (Pool* pool : {&small_pool_, &large_pool_})
    for (auto it = pool->begin(); it != pool->end();) {
      Block& b = blocks_[std::get<2>(*it)];
      if (b.prev == -1 && b.next == -1) {
        reserved_ -= b.size;
        b.dead = true;
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
}

int64_t CudaCachingAllocatorSim::allocate(uint64_t bytes) {
  if (bytes == 0) throw InternalError("the caching allocator simulator was asked for 0 bytes");
  const uint64_t size = pytorch::round_size(bytes);
  const bool small = pytorch::is_small(size);
  Pool& pool = pool_of(small);

  // get_free_block: the smallest cached block of the pool that fits, lowest address on a tie.
  int64_t b;
  if (auto it = pool.lower_bound({size, 0, -1}); it != pool.end()) {
    b = std::get<2>(*it);
    pool.erase(it);
  } else {
    b = new_segment(pytorch::allocation_size(size), small);
    if (b < 0) return -1;
  }

  // should_split: small pool when the remainder is >= kMinBlockSize; large pool only when the remainder
  // is > kSmallSize (max_split_size unlimited by default). An unsplit block is handed out whole.
  const uint64_t remaining = blocks_[b].size - size;
  if (small ? remaining >= pytorch::kMinBlockSize : remaining > pytorch::kSmallSize) {
    Block rest = blocks_[b];
    rest.size = remaining;
    rest.address = blocks_[b].address + size;
    rest.prev = b;
    rest.next = blocks_[b].next;
    blocks_.push_back(rest);
    const int64_t r = static_cast<int64_t>(blocks_.size()) - 1;
    if (rest.next != -1) blocks_[rest.next].prev = r;
    blocks_[b].next = r;
    blocks_[b].size = size;
    insert_free(r);
  }
  blocks_[b].allocated = true;
  allocated_ += blocks_[b].size;  // memory_allocated counts the block, not the request
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  ++num_allocs_;
  return b;
}

void CudaCachingAllocatorSim::merge(int64_t into, int64_t from) {
  Block& a = blocks_[into];
  Block& c = blocks_[from];
  a.size += c.size;
  a.next = c.next;
  if (c.next != -1) blocks_[c.next].prev = into;
  c.dead = true;
}

void CudaCachingAllocatorSim::release(int64_t handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= blocks_.size() || !blocks_[handle].allocated ||
      blocks_[handle].dead)
    throw InternalError("the caching allocator simulator was asked to free an unknown block");
  Block& blk = blocks_[handle];
  blk.allocated = false;
  allocated_ -= blk.size;
  // free_block -> try_merge_blocks with both neighbours of the same segment when they are free.
  int64_t b = handle;
  if (const int64_t n = blocks_[b].next; n != -1 && !blocks_[n].allocated) {
    erase_free(n);
    merge(b, n);
  }
  if (const int64_t pr = blocks_[b].prev; pr != -1 && !blocks_[pr].allocated) {
    erase_free(pr);
    merge(pr, b);
    b = pr;
  }
  insert_free(b);
}

int64_t CudaCachingAllocatorSim::num_segments() const {
  int64_t n = 0;
  for (const Block& b : blocks_)
    if (!b.dead && b.prev == -1) ++n;
  return n;
}

std::vector<uint64_t> CudaCachingAllocatorSim::layout() const {
  std::vector<std::pair<uint64_t, int64_t>> firsts;  // (address, block) of each segment's first block
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (!blocks_[b].dead && blocks_[b].prev == -1) firsts.emplace_back(blocks_[b].address, static_cast<int64_t>(b));
  std::sort(firsts.begin(), firsts.end());
  std::vector<uint64_t> out;
  for (const auto& [address, first] : firsts) {
    out.push_back(blocks_[first].small ? 1 : 2);  // a segment starts: its pool
    for (int64_t b = first; b != -1; b = blocks_[b].next) {
      out.push_back(blocks_[b].size);
      out.push_back(blocks_[b].allocated ? 1 : 0);
    }
  }
  return out;
}

std::unique_ptr<AllocatorModel> make_pytorch_allocator(PytorchAllocatorOptions options) {
  if (options.expandable_segments) return std::make_unique<ExpandableSegmentsSim>(options.device_capacity_bytes);
  return std::make_unique<CudaCachingAllocatorSim>(options);
}

AllocatorReplay simulate_pytorch(const Program& program, PytorchAllocatorOptions options) {
  return replay_program(program, *make_pytorch_allocator(options));
}

PytorchAtCapacity simulate_pytorch_at_capacity(const Program& program, const ReplayOrder& order, uint64_t capacity_bytes,
                                              bool expandable_segments) {
  if (capacity_bytes == 0) capacity_bytes = 1;  // 0 means unlimited to the simulator; here it means no memory
  const auto allocator = make_pytorch_allocator({capacity_bytes, expandable_segments});
  PytorchAtCapacity out;
  out.replay = replay_program(program, order, *allocator);
  out.fits = !out.replay.out_of_memory;
  out.alloc_retries = allocator->num_alloc_retries();
  return out;
}

uint64_t pytorch_min_capacity(const Program& program, const ReplayOrder& order, const AllocatorReplay& unconstrained,
                              bool expandable_segments) {
  constexpr uint64_t unit = pytorch::kRoundLarge;
  if (unconstrained.peak_reserved_bytes == 0) return 0;
  auto fits = [&](uint64_t units) {
    return units > 0 && simulate_pytorch_at_capacity(program, order, units * unit, expandable_segments).fits;
  };
  // hi suffices (the unconstrained run never passes its own peak); lo does not.
  uint64_t hi = unconstrained.peak_reserved_bytes / unit, lo = 0;
  // The answer is almost always just above the allocated peak: start the bracket there.
  if (const uint64_t guess = unconstrained.peak_allocated_bytes / unit; guess > 0 && guess < hi) {
    if (fits(guess)) hi = guess;
    else lo = guess;
  }
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi * unit;
}
}  // namespace memplan
