#include "validate/cuda_device.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "validate/pattern.h"

namespace memplan::validate {
namespace {

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    throw DeviceError(what + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

constexpr int kThreads = 256;
constexpr uint64_t kMaxBlocks = 8192;  // grid-stride loops cover the rest

int blocks_for(uint64_t units) {
  const uint64_t blocks = (units + kThreads - 1) / kThreads;
  return static_cast<int>(blocks == 0 ? 1 : (blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

// `base` points at pattern position 0 (ptr - position); it is 4-byte aligned by the Device contract.
// Whole words by the grid; the at most 3 + 3 unaligned edge bytes by thread 0.
__global__ void fill_kernel(uint8_t* base, uint64_t begin, uint64_t end, uint32_t id) {
  const uint64_t first_word = (begin + 3) / 4, last_word = end / 4;  // words [first_word, last_word)
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  auto* words = reinterpret_cast<uint32_t*>(base);
  for (uint64_t w = first_word + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; w < last_word;
       w += stride)
    words[w] = pattern_word(id, w);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const uint64_t head_end = first_word * 4 < end ? first_word * 4 : end;
    for (uint64_t p = begin; p < head_end; ++p) base[p] = pattern_byte(id, p);
    const uint64_t tail_begin = last_word * 4 > head_end ? last_word * 4 : head_end;
    for (uint64_t p = tail_begin; p < end; ++p) base[p] = pattern_byte(id, p);
  }
}

struct VerifyResult {
  unsigned long long first_bad;  // smallest bad position, or ~0
  unsigned long long bad_bytes;
};

__device__ void note_bad_byte(VerifyResult* result, uint64_t p) {
  atomicMin(&result->first_bad, static_cast<unsigned long long>(p));
  atomicAdd(&result->bad_bytes, 1ull);
}

__global__ void verify_kernel(const uint8_t* base, uint64_t begin, uint64_t end, uint32_t id, VerifyResult* result) {
  const uint64_t first_word = (begin + 3) / 4, last_word = end / 4;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const auto* words = reinterpret_cast<const uint32_t*>(base);
  for (uint64_t w = first_word + blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; w < last_word;
       w += stride) {
    const uint32_t found = words[w], expected = pattern_word(id, w);
    if (found == expected) continue;
    for (uint64_t k = 0; k < 4; ++k)
      if (((found ^ expected) >> (8 * k)) & 0xffu) note_bad_byte(result, w * 4 + k);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const uint64_t head_end = first_word * 4 < end ? first_word * 4 : end;
    for (uint64_t p = begin; p < head_end; ++p)
      if (base[p] != pattern_byte(id, p)) note_bad_byte(result, p);
    const uint64_t tail_begin = last_word * 4 > head_end ? last_word * 4 : head_end;
    for (uint64_t p = tail_begin; p < end; ++p)
      if (base[p] != pattern_byte(id, p)) note_bad_byte(result, p);
  }
}

class CudaDevice final : public Device {
 public:
  CudaDevice() {
    check(cudaSetDevice(0), "cudaSetDevice(0)");
    check(cudaFree(nullptr), "creating the CUDA context");  // the context is outside every measurement
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaMalloc(&result_, sizeof(VerifyResult)), "cudaMalloc of the verify result");
    // Load both kernels now, so lazy module loading does not allocate in the middle of a measurement.
    check(cudaFuncGetAttributes(&fill_attr_, fill_kernel), "loading fill_kernel");
    check(cudaFuncGetAttributes(&verify_attr_, verify_kernel), "loading verify_kernel");
  }

  ~CudaDevice() override {
    if (pool_ != nullptr) cudaMemPoolDestroy(pool_);
    cudaFree(result_);
    cudaStreamDestroy(stream_);
  }

  std::string kind() const override { return "cuda"; }

  std::vector<std::pair<std::string, std::string>> describe() const override {
    cudaDeviceProp prop{};
    int driver = 0, runtime = 0;
    cudaGetDeviceProperties(&prop, 0);
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    return {{"name", prop.name},
            {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
            {"total_bytes", std::to_string(prop.totalGlobalMem)},
            {"driver_cuda_version", version(driver)},
            {"runtime_cuda_version", version(runtime)}};
  }

  bool supports(Mode) const override { return true; }

  uint64_t used_bytes() override {
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    return static_cast<uint64_t>(total_bytes - free_bytes);
  }

  void begin_mode(Mode mode) override {
    if (mode != Mode::kPool) return;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    check(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
    // Keep freed memory in the pool (never trimmed at synchronization), as a framework's pool would.
    uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold), "setting the release threshold");
    uint64_t zero = 0;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero), "resetting UsedMemHigh");
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero), "resetting ReservedMemHigh");
  }

  AllocatorHighWater end_mode(Mode mode) override {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    if (mode != Mode::kPool) return {};
    AllocatorHighWater high;
    uint64_t used = 0, reserved = 0;
    check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &used), "reading UsedMemHigh");
    check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &reserved), "reading ReservedMemHigh");
    high.used_high = used;
    high.reserved_high = reserved;
    check(cudaMemPoolDestroy(pool_), "cudaMemPoolDestroy");
    pool_ = nullptr;
    return high;
  }

  void* allocate(uint64_t bytes, Mode mode, const std::string& what) override {
    void* ptr = nullptr;
    if (mode == Mode::kPool) {
      check(cudaMallocFromPoolAsync(&ptr, bytes, pool_, stream_),
            "cudaMallocFromPoolAsync of " + std::to_string(bytes) + " bytes for " + what);
    } else {
      check(cudaMalloc(&ptr, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes for " + what);
    }
    return ptr;
  }

  void release(void* ptr, Mode mode) override {
    if (mode == Mode::kPool) {
      check(cudaFreeAsync(ptr, stream_), "cudaFreeAsync");
    } else {
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");  // kernels may still use it
      check(cudaFree(ptr), "cudaFree");
    }
  }

  void fill(void* ptr, uint64_t position, uint64_t bytes, uint32_t id) override {
    uint8_t* base = static_cast<uint8_t*>(ptr) - position;
    fill_kernel<<<blocks_for(bytes / 4 + 1), kThreads, 0, stream_>>>(base, position, position + bytes, id);
    check(cudaGetLastError(), "launching fill_kernel");
  }

  std::optional<Mismatch> verify(const void* ptr, uint64_t position, uint64_t bytes, uint32_t id) override {
    const VerifyResult init{~0ull, 0ull};
    check(cudaMemcpyAsync(result_, &init, sizeof init, cudaMemcpyHostToDevice, stream_), "resetting the verify result");
    const uint8_t* base = static_cast<const uint8_t*>(ptr) - position;
    verify_kernel<<<blocks_for(bytes / 4 + 1), kThreads, 0, stream_>>>(base, position, position + bytes, id, result_);
    check(cudaGetLastError(), "launching verify_kernel");
    VerifyResult host{};
    check(cudaMemcpyAsync(&host, result_, sizeof host, cudaMemcpyDeviceToHost, stream_), "reading the verify result");
    check(cudaStreamSynchronize(stream_), "verify_kernel");
    if (host.bad_bytes == 0) return std::nullopt;
    Mismatch m;
    m.position = host.first_bad;
    m.mismatched_bytes = host.bad_bytes;
    const uint64_t end = position + bytes;
    m.found.resize(end - m.position < kFoundBytes ? end - m.position : kFoundBytes);
    check(cudaMemcpy(m.found.data(), base + m.position, m.found.size(), cudaMemcpyDeviceToHost),
          "reading the damaged bytes");
    return m;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  VerifyResult* result_ = nullptr;
  cudaFuncAttributes fill_attr_{}, verify_attr_{};
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear it, so it is not reported by a later call
    return 0;
  }
  return count;
}

std::unique_ptr<Device> make_cuda_device() {
  if (cuda_device_count() == 0) throw DeviceError("no CUDA device is available (cudaGetDeviceCount found none)");
  return std::make_unique<CudaDevice>();
}

}  // namespace memplan::validate
