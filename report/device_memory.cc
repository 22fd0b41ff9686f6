#include "report/device_memory.h"

#include "onnx_import/checked.h"

namespace memplan {

uint64_t nccl_bytes_per_ring_channel() {
  const uint64_t recv = round_up(kNcclConnHeaderBytes + kNcclLlBytes + kNcclLl128Bytes + kNcclSimpleBytes, kCudaIpcMin);
  const uint64_t send = round_up(kNcclConnHeaderBytes, kCudaIpcMin);
  return recv + send;
}

uint64_t OutsideAllocator::total() const { return checked_add(context_bytes, nccl.bytes); }

NcclBuffers nccl_ring_buffers(int communicators, int channels) {
  NcclBuffers n;
  n.communicators = communicators;
  n.channels = channels;
  n.bytes_per_channel = nccl_bytes_per_ring_channel();
  n.bytes = checked_mul(checked_mul(static_cast<uint64_t>(communicators), static_cast<uint64_t>(channels)),
                        n.bytes_per_channel);
  return n;
}

}  // namespace memplan
