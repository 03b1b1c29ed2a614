// device.h: device discovery and DeviceBuffer.
#include <utility>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device.h"

namespace kiln::kernels::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // no driver / no device: clear the error, run on the CPU
        return 0;
    }
    return n;
}

core::Result<DeviceInfo> device_info(int index) {
    const int n = device_count();
    if (index < 0 || index >= n)
        return core::error(core::StatusCode::kUnsupported) << "CUDA device " << index << " does not exist (" << n
                                                           << " device" << (n == 1 ? "" : "s") << " visible)";
    cudaDeviceProp p{};
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, index));
    DeviceInfo d;
    d.index = index;
    d.name = p.name;
    d.sm_major = p.major;
    d.sm_minor = p.minor;
    d.num_sms = p.multiProcessorCount;
    d.total_bytes = p.totalGlobalMem;
    int clock_khz = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, index));
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&d.bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, index));
    d.memory_clock_khz = clock_khz;
    int current = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
    size_t free_bytes = 0, total = 0;
    const cudaError_t e = cudaMemGetInfo(&free_bytes, &total);
    KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(current));
    KILN_CUDA_RETURN_IF_ERROR(e);
    d.free_bytes = free_bytes;
    return d;
}

DeviceBuffer::~DeviceBuffer() {
    if (data_) (void)cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (data_) (void)cudaFree(data_);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

core::Result<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
    if (device_count() == 0) return core::error(core::StatusCode::kUnsupported) << "no CUDA device";
    DeviceBuffer b;
    if (bytes == 0) return std::move(b);
    const cudaError_t e = cudaMalloc(&b.data_, bytes);
    if (e != cudaSuccess) {
        b.data_ = nullptr;
        (void)cudaGetLastError();
        return core::error(core::StatusCode::kOutOfMemory)
               << "CUDA: cudaMalloc of " << bytes << " bytes failed: " << cudaGetErrorString(e);
    }
    b.bytes_ = bytes;
    return std::move(b);
}

core::Status DeviceBuffer::copy_from_host(const void* src, size_t bytes) {
    if (bytes > bytes_)
        return core::error(core::StatusCode::kInvalidArgument)
               << "copy of " << bytes << " bytes into a " << bytes_ << "-byte device buffer";
    if (bytes == 0) return core::Status::ok();
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(data_, src, bytes, cudaMemcpyHostToDevice));
    return core::Status::ok();
}

core::Status DeviceBuffer::copy_to_host(void* dst, size_t bytes) const {
    if (bytes > bytes_)
        return core::error(core::StatusCode::kInvalidArgument)
               << "copy of " << bytes << " bytes from a " << bytes_ << "-byte device buffer";
    if (bytes == 0) return core::Status::ok();
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, data_, bytes, cudaMemcpyDeviceToHost));
    return core::Status::ok();
}

PinnedBuffer::~PinnedBuffer() {
    if (data_) (void)cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
        if (data_) (void)cudaFreeHost(data_);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

core::Result<PinnedBuffer> PinnedBuffer::allocate(size_t bytes) {
    if (device_count() == 0) return core::error(core::StatusCode::kUnsupported) << "no CUDA device";
    PinnedBuffer b;
    if (bytes == 0) return std::move(b);
    const cudaError_t e = cudaMallocHost(&b.data_, bytes);
    if (e != cudaSuccess) {
        b.data_ = nullptr;
        (void)cudaGetLastError();
        return core::error(core::StatusCode::kOutOfMemory)
               << "CUDA: cudaMallocHost of " << bytes << " bytes failed: " << cudaGetErrorString(e);
    }
    b.bytes_ = bytes;
    return std::move(b);
}

Stream::~Stream() {
    if (stream_) (void)cudaStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
    if (this != &other) {
        if (stream_) (void)cudaStreamDestroy(stream_);
        stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
}

core::Result<Stream> Stream::create() {
    if (device_count() == 0) return core::error(core::StatusCode::kUnsupported) << "no CUDA device";
    Stream s;
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
    return std::move(s);
}

core::Status Stream::synchronize() const {
    return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace kiln::kernels::cuda
