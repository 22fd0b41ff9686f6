#include "planner/alloc_pytorch_expandable.h"

#include <algorithm>

#include "onnx_import/checked.h"
#include "onnx_import/errors.h"
#include "planner/alloc_pytorch.h"

namespace memplan {
namespace {

// Each pool's virtual range: the real one is as large as the device (ExpandableSegment's max_handles_), so it
// never runs out before the physical memory does; here it is simply larger than any device.
// Pages are mapped from the start of the range, so it starts on a page: the large pool's at a multiple of
// 20 MiB past the small pool's range.
constexpr uint64_t kVirtualRange = uint64_t{1} << 48;
uint64_t pool_base(bool small) { return small ? 0 : pytorch::kLargeBuffer * (uint64_t{1} << 26); }
uint64_t page_size(bool small) { return small ? pytorch::kSmallBuffer : pytorch::kLargeBuffer; }

}  // namespace

void ExpandableSegmentsSim::index(int64_t b) {
  const Block& k = blocks_[b];
  if (k.mapped) pool_of(k.small).free.insert({k.size, k.address, b});
  else pool_of(k.small).unmapped.insert({k.address, b});
}

void ExpandableSegmentsSim::unindex(int64_t b) {
  const Block& k = blocks_[b];
  if (k.mapped) pool_of(k.small).free.erase({k.size, k.address, b});
  else pool_of(k.small).unmapped.erase({k.address, b});
}

int64_t ExpandableSegmentsSim::split(int64_t b, uint64_t first_size) {
  Block rest = blocks_[b];
  rest.address += first_size;
  rest.size -= first_size;
  rest.allocated = false;
  rest.prev = b;
  blocks_.push_back(rest);
  const int64_t r = static_cast<int64_t>(blocks_.size()) - 1;
  if (blocks_[r].next != -1) blocks_[blocks_[r].next].prev = r;
  blocks_[b].next = r;
  blocks_[b].size = first_size;
  return r;
}

int64_t ExpandableSegmentsSim::merge_free(int64_t b) {
  // try_merge_blocks: only with an unallocated neighbour that is mapped as b is.
  auto joinable = [&](int64_t n) { return n != -1 && !blocks_[n].allocated && blocks_[n].mapped == blocks_[b].mapped; };
  if (const int64_t n = blocks_[b].next; joinable(n)) {
    unindex(n);
    blocks_[b].size += blocks_[n].size;
    blocks_[b].next = blocks_[n].next;
    if (blocks_[n].next != -1) blocks_[blocks_[n].next].prev = b;
    blocks_[n].dead = true;
  }
  if (const int64_t p = blocks_[b].prev; joinable(p)) {
    unindex(p);
    blocks_[p].size += blocks_[b].size;
    blocks_[p].next = blocks_[b].next;
    if (blocks_[b].next != -1) blocks_[blocks_[b].next].prev = p;
    blocks_[b].dead = true;
    return p;
  }
  return b;
}

int64_t ExpandableSegmentsSim::find_expandable(bool small, uint64_t size) {
  // The lowest-addressed unmapped block, started from the free mapped block before it, followed by enough
  // unallocated address space. The pool's range ends in unmapped space larger than any request.
  for (const auto& [address, u] : pool_of(small).unmapped) {
    int64_t c = u;
    if (const int64_t p = blocks_[u].prev; p != -1 && !blocks_[p].allocated) c = p;
    uint64_t bytes = 0;
    for (int64_t x = c; x != -1 && !blocks_[x].allocated && bytes < size; x = blocks_[x].next)
      bytes = checked_add(bytes, blocks_[x].size, "simulated address space");
    if (bytes >= size) return c;
  }
  throw InternalError("the expandable-segments simulator ran out of virtual address space");
}

int64_t ExpandableSegmentsSim::map(int64_t u, uint64_t size) {
  // ExpandableSegment::map maps whole pages: unmapped blocks start on a page, so the pages cover
  // round_up(size, page) bytes, within the block.
  const uint64_t pages = std::min(round_up(size, page_size(blocks_[u].small)), blocks_[u].size);
  if (capacity_ != 0 && reserved_ + pages > capacity_) return -1;
  unindex(u);
  if (blocks_[u].size > pages) index(split(u, pages));
  blocks_[u].mapped = true;
  reserved_ += pages;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++num_maps_;
  const int64_t merged = merge_free(u);
  index(merged);
  return merged;
}

int64_t ExpandableSegmentsSim::try_allocate_expandable(bool small, uint64_t size) {
  int64_t c = find_expandable(small, size);
  if (!blocks_[c].mapped && (c = map(c, std::min(blocks_[c].size, size))) < 0) return -1;
  // c is free and mapped, followed by unmapped space: map from there (merging into c) until c holds the request.
  while (blocks_[c].size < size) {
    const int64_t n = blocks_[c].next;
    if ((c = map(n, std::min(size - blocks_[c].size, blocks_[n].size))) < 0) return -1;
  }
  unindex(c);
  return c;
}

void ExpandableSegmentsSim::release_cached() {
  std::vector<int64_t> candidates;
  for (const Pool* p : {&small_, &large_})
    for (const auto& key : p->free) candidates.push_back(std::get<2>(key));
  for (int64_t b : candidates) {
    const uint64_t page = page_size(blocks_[b].small);
    const uint64_t begin = round_up(blocks_[b].address, page);
    const uint64_t end = (blocks_[b].address + blocks_[b].size) / page * page;
    if (end <= begin) continue;
    unindex(b);
    if (begin > blocks_[b].address) {
      const int64_t rest = split(b, begin - blocks_[b].address);
      index(b);
      b = rest;
    }
    if (blocks_[b].address + blocks_[b].size > end) index(split(b, end - begin));
    blocks_[b].mapped = false;
    reserved_ -= end - begin;
    index(merge_free(b));
  }
}

int64_t ExpandableSegmentsSim::allocate(uint64_t bytes) {
  if (bytes == 0) throw InternalError("the caching allocator simulator was asked for 0 bytes");
  const uint64_t size = pytorch::round_size(bytes);
  const bool small = pytorch::is_small(size);
  if (!started_[small]) {
    blocks_.push_back(Block{pool_base(small), kVirtualRange, small, false, false, false, -1, -1});
    index(static_cast<int64_t>(blocks_.size()) - 1);
    started_[small] = true;
  }
  Pool& pool = pool_of(small);
  int64_t b = -1;
  if (auto it = pool.free.lower_bound({size, 0, -1}); it != pool.free.end()) {  // get_free_block: best fit
    b = std::get<2>(*it);
    pool.free.erase(it);
  } else {
    b = try_allocate_expandable(small, size);
    if (b < 0 && capacity_ != 0) {  // malloc(): release_cached_blocks, then alloc_block again
      ++num_alloc_retries_;
      release_cached();
      b = try_allocate_expandable(small, size);
    }
    if (b < 0) return -1;
  }
  // should_split: with expandable segments, either pool splits when the rest is >= kMinBlockSize.
  if (blocks_[b].size - size >= pytorch::kMinBlockSize) index(split(b, size));
  blocks_[b].allocated = true;
  allocated_ += blocks_[b].size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  ++num_allocs_;
  return b;
}

void ExpandableSegmentsSim::release(int64_t handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= blocks_.size() || !blocks_[handle].allocated || blocks_[handle].dead)
    throw InternalError("the caching allocator simulator was asked to free an unknown block");
  blocks_[handle].allocated = false;
  allocated_ -= blocks_[handle].size;
  index(merge_free(handle));
}

}  // namespace memplan
