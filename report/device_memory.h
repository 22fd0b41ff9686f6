// The third metric: what the GPU shows as used (nvidia-smi, torch.cuda.mem_get_info's total − free), beside the
// allocator's two (allocated, reserved). The difference is memory no allocator counts:
//  - the CUDA context with its loaded kernels (the GPU catalog's context reserve, or --reserve);
//  - NCCL's communication buffers, per communicator, once several GPUs talk (data, tensor parallelism).
// fit and check take both off a GPU's memory once, here: a GPU's device budget is its memory less
// outside_allocator(...).total().
#pragma once

#include <cstdint>
#include <string>

namespace memplan {


// NCCL's buffers on one GPU, for the ring algorithm over the P2P transport (one node, NVLink or PCIe), as
// NCCL 2.2x allocates them when the ring is first used (NCCL_RUNTIME_CONNECT=1, the default where cuMem is
// supported: src/init.cc). Per channel, a rank receives from its ring predecessor and sends to its successor:
//  - the receive side holds the LL and LL128 buffers, and SIMPLE's unless P2P read puts it on the sender
//    (src/transport/p2p.cc p2pRecvSetup / p2pSendSetup); either way a rank holds the three once per channel;
//  - each side is one allocation rounded up to CUDA_IPC_MIN, 2 MiB (src/include/comm.h; ALIGN_SIZE in both).
// Tree, NVLS, CollNet and send/recv (pipeline, expert all-to-all) connect their own buffers when used: not counted.
struct NcclBuffers {
  int communicators = 0;        // data-parallel group (--gpus > 1), tensor-parallel group (--tp > 1), and
                                // --ep's experts' FSDP group (over --gpus / N > 1)
  int channels = 0;             // --nccl-channels
  uint64_t bytes_per_channel = 0;
  uint64_t bytes = 0;           // communicators × channels × bytes_per_channel
};

// NCCL's default buffer sizes (src/init.cc computeBuffSizes, with src/include/device.h's constants):
// LL = NCCL_LL_LINES_PER_THREAD (8) × NCCL_LL_MAX_NTHREADS (512) × NCCL_STEPS (8) × sizeof(ncclLLFifoLine) (16);
// LL128 = NCCL_LL128_ELEMS_PER_THREAD (120) × NCCL_LL128_MAX_NTHREADS (640) × NCCL_STEPS × sizeof(uint64_t);
// SIMPLE = 1 << 22 (NCCL_BUFFSIZE).
inline constexpr uint64_t kNcclLlBytes = 8ull * 512 * 8 * 16;        // 524,288
inline constexpr uint64_t kNcclLl128Bytes = 120ull * 640 * 8 * 8;    // 4,915,200
inline constexpr uint64_t kNcclSimpleBytes = 1ull << 22;             // 4,194,304
inline constexpr uint64_t kCudaIpcMin = 2ull << 20;                  // src/include/comm.h CUDA_IPC_MIN
// ncclSendMem and ncclRecvMem, each a union padded to MEM_ALIGN (src/include/comm.h).
inline constexpr uint64_t kNcclConnHeaderBytes = 4096;
// Per ring channel: the receive allocation (its header and the three buffers, rounded up: 10 MiB) and the send
// allocation (its header, rounded up: 2 MiB); with P2P read SIMPLE moves from the first to the second (6 + 6 MiB). NCCL's own allocation log on 8 × H100 shows exactly these two
// sizes, 10485760 and 2097152 B, per channel and peer (NVIDIA/nccl#1685).
uint64_t nccl_bytes_per_ring_channel();

// NCCL's channel count is chosen by its topology search (src/graph/search.cc): 32 coll channels is what 8 × H100
// over NVSwitch logs (NVIDIA/nccl#1685: "32 channels ... per pair of GPUs"); PCIe machines and fewer GPUs use
// fewer (2 to 16, NCCL_DEBUG=INFO prints "N coll channels"). The default is the large end: a fit that counts
// too much NCCL memory is one rung under, never an out-of-memory at the answer.
inline constexpr int kDefaultNcclChannels = 32;

struct OutsideAllocator {
  uint64_t context_bytes = 0;   // the CUDA context and kernels (catalog context_reserve_mib, or --reserve)
  std::string context_source;   // "catalog" or "--reserve"
  NcclBuffers nccl;
  uint64_t total() const;
};

// `communicators` × `channels` ring channels' buffers.
NcclBuffers nccl_ring_buffers(int communicators, int channels);

}  // namespace memplan
