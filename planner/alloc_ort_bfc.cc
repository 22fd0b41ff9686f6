#include "planner/alloc_ort_bfc.h"

#include <algorithm>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"

namespace memplan {

uint64_t ort::rounded_bytes(uint64_t bytes) { return round_up(bytes, kMinAllocationSize); }

BfcArenaSim::BfcArenaSim(BfcOptions options) : options_(options) {
  // Constructor: curr_region_allocation_bytes_ = RoundedBytes(min(total_memory, initial_chunk_size_bytes)).
  uint64_t first = options_.initial_chunk_bytes;
  if (options_.memory_limit_bytes != 0) first = std::min(first, options_.memory_limit_bytes);
  curr_region_allocation_bytes_ = ort::rounded_bytes(first);
}

bool BfcArenaSim::extend(uint64_t rounded) {
  uint64_t available = UINT64_MAX;
  if (options_.memory_limit_bytes != 0) {
    if (total_allocated_ > options_.memory_limit_bytes) return false;
    available = (options_.memory_limit_bytes - total_allocated_) / ort::kMinAllocationSize * ort::kMinAllocationSize;
  }
  if (rounded > available) return false;

  uint64_t bytes;
  if (options_.extend_strategy == ArenaExtendStrategy::kNextPowerOfTwo) {
    // Double the region size until it holds the request; when it already did, double it for next time.
    bool increased = false;
    while (rounded > curr_region_allocation_bytes_) {
      curr_region_allocation_bytes_ = checked_mul(curr_region_allocation_bytes_, 2, "arena region size");
      increased = true;
    }
    bytes = std::min(curr_region_allocation_bytes_, available);
    if (!increased) curr_region_allocation_bytes_ = checked_mul(curr_region_allocation_bytes_, 2, "arena region size");
  } else {
    bytes = rounded;  // kSameAsRequested
  }
  // (ORT backs off by 0.9x when the device allocation itself fails; a device with free memory below
  // the limit is not modelled, so that path never runs here.)
  Chunk c;
  c.size = bytes;
  c.address = next_address_;
  next_address_ = checked_add(next_address_, bytes, "simulated address space");
  chunks_.push_back(c);
  insert_free(static_cast<int64_t>(chunks_.size()) - 1);
  regions_.push_back(bytes);
  total_allocated_ += bytes;
  ++num_extensions_;
  return true;
}

int64_t BfcArenaSim::allocate(uint64_t bytes) {
  if (bytes == 0) throw InternalError("the BFC arena simulator was asked for 0 bytes");
  const uint64_t rounded = ort::rounded_bytes(bytes);
  auto it = free_.lower_bound({rounded, 0, -1});
  if (it == free_.end()) {
    if (!extend(rounded)) return -1;
    it = free_.lower_bound({rounded, 0, -1});
    if (it == free_.end()) throw InternalError("the BFC arena simulator found no chunk after extending");
  }
  const int64_t h = std::get<2>(*it);
  free_.erase(it);
  // SplitFreeChunkFromBin: split when the chunk is at least twice the request, or when the unused rest
  // would reach max_dead_bytes_per_chunk.
  if (chunks_[h].size >= 2 * rounded || chunks_[h].size - rounded >= options_.max_dead_bytes_per_chunk) {
    Chunk rest;
    rest.size = chunks_[h].size - rounded;
    rest.address = chunks_[h].address + rounded;
    rest.prev = h;
    rest.next = chunks_[h].next;
    chunks_.push_back(rest);
    const int64_t r = static_cast<int64_t>(chunks_.size()) - 1;
    if (rest.next != -1) chunks_[rest.next].prev = r;
    chunks_[h].next = r;
    chunks_[h].size = rounded;
    insert_free(r);
  }
  chunks_[h].in_use = true;
  in_use_ += chunks_[h].size;  // bytes_in_use counts the whole chunk handed out
  max_in_use_ = std::max(max_in_use_, in_use_);
  ++num_allocs_;
  return h;
}

void BfcArenaSim::merge(int64_t into, int64_t from) {
  chunks_[into].size += chunks_[from].size;
  chunks_[into].next = chunks_[from].next;
  if (chunks_[from].next != -1) chunks_[chunks_[from].next].prev = into;
  chunks_[from].dead = true;
}

void BfcArenaSim::release(int64_t h) {
  if (h < 0 || static_cast<size_t>(h) >= chunks_.size() || !chunks_[h].in_use || chunks_[h].dead)
    throw InternalError("the BFC arena simulator was asked to free an unknown chunk");
  chunks_[h].in_use = false;
  in_use_ -= chunks_[h].size;
  // FreeAndMaybeCoalesce -> Coalesce: merge with the next chunk, then the previous one, when free.
  int64_t c = h;
  if (const int64_t n = chunks_[c].next; n != -1 && !chunks_[n].in_use) {
    erase_free(n);
    merge(c, n);
  }
  if (const int64_t p = chunks_[c].prev; p != -1 && !chunks_[p].in_use) {
    erase_free(p);
    merge(p, c);
    c = p;
  }
  insert_free(c);
}

AllocatorReplay simulate_ort_bfc(const Program& program, BfcOptions options) {
  BfcArenaSim arena(options);
  return replay_program(program, arena);
}

AllocatorReplay simulate_ort_memory_pattern(const Program& program, uint64_t pattern_bytes, BfcOptions options) {
  BfcArenaSim arena(options);
  AllocatorReplay out;
  auto request = [&](uint64_t bytes, const std::string& name) {
    if (bytes == 0) return true;
    if (arena.allocate(bytes) < 0) {
      out.out_of_memory = true;
      out.oom_buffer = name;
      return false;
    }
    return true;
  };
  bool ok = true;
  for (const Buffer& b : program.buffers)
    if (ok && b.resident) ok = request(b.bytes, b.name);
  out.before_first_step_allocated = arena.allocated_bytes();
  if (ok) request(pattern_bytes, "memory pattern block");
  out.peak_allocated_bytes = arena.peak_allocated_bytes();
  out.peak_reserved_bytes = arena.peak_reserved_bytes();
  out.num_device_allocations = arena.num_device_allocations();
  out.num_allocs = arena.num_allocs();
  return out;
}

}  // namespace memplan
