// CUDA devices and device memory for kiln: how many GPUs this process can use (0 when there is no
// driver or no device: not an error, the CPU path runs), what each one is, and DeviceBuffer, an
// owning device allocation whose errors are Status values. Host code only, usable from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace kiln::kernels::cuda {

// Devices the CUDA runtime reports; 0 when it reports none or the driver is missing or too old.
int device_count();

struct DeviceInfo {
    int index = 0;
    std::string name;                        // "NVIDIA H200"
    int sm_major = 0, sm_minor = 0;          // compute capability (9, 0 for Hopper)
    int num_sms = 0;                         // streaming multiprocessors
    size_t total_bytes = 0, free_bytes = 0;  // device memory, free at the time of the call
    double memory_clock_khz = 0;             // peak memory clock, with bus_width_bits: the spec bandwidth
    int bus_width_bits = 0;
};
// kUnsupported for an index outside [0, device_count()).
core::Result<DeviceInfo> device_info(int index);

// Owning device memory (cudaMalloc / cudaFree on the device current at allocation). Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    // kOutOfMemory when the device cannot hold `bytes`, kUnsupported without a device.
    static core::Result<DeviceBuffer> allocate(size_t bytes);

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    template <class T>
    T* as() const {
        return static_cast<T*>(data_);
    }

    // Synchronous copies of `bytes` (<= this buffer's size, else kInvalidArgument) at byte offset 0.
    core::Status copy_from_host(const void* src, size_t bytes);
    core::Status copy_to_host(void* dst, size_t bytes) const;

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost): the host side of asynchronous copies. Move-only.
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    ~PinnedBuffer();
    PinnedBuffer(PinnedBuffer&& other) noexcept;
    PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    // kOutOfMemory when it cannot be had, kUnsupported without a device.
    static core::Result<PinnedBuffer> allocate(size_t bytes);
    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

// An owning CUDA stream that does not synchronize with the legacy default stream. Move-only.
class Stream {
public:
    Stream() = default;
    ~Stream();
    Stream(Stream&& other) noexcept;
    Stream& operator=(Stream&& other) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    static core::Result<Stream> create();
    cudaStream_t get() const { return stream_; }
    // Waits for everything queued on the stream; its errors (a faulting kernel) come back here.
    core::Status synchronize() const;

private:
    cudaStream_t stream_ = nullptr;
};

}  // namespace kiln::kernels::cuda
