// Arena packing: usage records in, offsets and arena size out. Each algorithm is a pure function in its
// own file (as TFLite's delegates/gpu/common/memory_management/*_assignment.h); they differ only in the
// order in which records are placed, and share one placement rule (packing_place.h).
//
// Determinism contract: the same records and alignment always give the same offsets. Every sort key is
// total (it ends with the record index) and no unordered container is iterated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/program.h"

namespace memplan {

// One buffer to place: its size and inclusive live range on the schedule's clock
// (TFLite's TensorUsageRecord{tensor_size, first_task, last_task}).
struct UsageRecord {
  uint64_t bytes = 0;
  int32_t first = 0;
  int32_t last = 0;
};

// Offsets (one per record, each a multiple of the alignment) and the arena that holds them all
// (TFLite's OffsetsAssignment{offsets, total_size}).
struct PackingResult {
  std::vector<uint64_t> offsets;
  uint64_t arena_bytes = 0;
};

// cudaMalloc returns pointers aligned to at least 256 bytes (CUDA C Programming Guide, "Device Memory
// Accesses": "any address of a variable residing in global memory or returned by one of the memory
// allocation routines from the driver or runtime API is always aligned to at least 256 bytes").
// An ideal runtime may use 1 (exact bytes) or 64.
inline constexpr uint64_t kDefaultAlignment = 256;

// Each record occupies its bytes rounded up to the alignment; offsets are multiples of it, and the
// arena is the end of the highest placed record. Zero-byte records get offset 0 and take no space.
// An alignment of 0 or a size that overflows when rounded throws (InputError / ShapeOverflow).
PackingResult pack_greedy_by_size(const std::vector<UsageRecord>& records, uint64_t alignment = kDefaultAlignment);
PackingResult pack_best_fit_spatial(const std::vector<UsageRecord>& records, uint64_t alignment = kDefaultAlignment);
PackingResult pack_best_fit_temporal(const std::vector<UsageRecord>& records, uint64_t alignment = kDefaultAlignment);
PackingResult pack_greedy_by_breadth(const std::vector<UsageRecord>& records, uint64_t alignment = kDefaultAlignment);

// In this fixed order choose_best breaks ties: the first algorithm with the smallest arena wins.
enum class PackingAlgorithm : uint8_t { GreedyBySize, BestFitSpatial, BestFitTemporal, GreedyByBreadth };
inline constexpr int kNumPackingAlgorithms = 4;
const char* packing_algorithm_name(PackingAlgorithm a);  // "greedy_by_size", "best_fit_spatial", ...

PackingResult pack(PackingAlgorithm algorithm, const std::vector<UsageRecord>& records,
                   uint64_t alignment = kDefaultAlignment);

// Every algorithm's result, indexed by PackingAlgorithm (sharing one overlap index).
std::vector<PackingResult> pack_all(const std::vector<UsageRecord>& records, uint64_t alignment = kDefaultAlignment);

// Runs the algorithms in order and keeps the smallest arena (as XLA's ChooseBestHeapAlgorithm). It stops at the
// first arena equal to aligned_lower_bound(): no later algorithm can be smaller, and a tie keeps the earlier one,
// so the answer is the one running all four gives. On a large program the four run at once on threads; the
// answer, arena_by_algorithm included, is the sequential run's.
struct BestPacking {
  PackingAlgorithm algorithm = PackingAlgorithm::GreedyBySize;
  PackingResult result;
  std::vector<uint64_t> arena_by_algorithm;  // indexed by PackingAlgorithm: those run, up to the early stop
};
BestPacking choose_best(const std::vector<UsageRecord>& records, uint64_t alignment = kDefaultAlignment);

// The records of a program's non-resident buffers, in buffer-id order; buffer_ids[i] is the buffer
// of record i (resident buffers have no record).
struct ProgramRecords {
  std::vector<UsageRecord> records;
  std::vector<int32_t> buffer_ids;
};
ProgramRecords usage_records(const Program& program, const std::vector<LiveRange>& ranges);

// Max over steps of the live aligned bytes of the records: no packing with this alignment can beat it.
uint64_t aligned_lower_bound(const std::vector<UsageRecord>& records, uint64_t alignment = kDefaultAlignment);

}  // namespace memplan
