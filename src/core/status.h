// Status and Result<T>: errors a user can cause (bad file, unsupported model, bad request) travel
// as values, never as exceptions or aborts. Broken invariants use KILN_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace kiln::core {

enum class StatusCode { kOk = 0, kInvalidArgument, kNotFound, kUnsupported, kCorrupt, kIo, kOutOfMemory, kInternal };

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return {}; }
    bool is_ok() const { return code_ == StatusCode::kOk; }
    explicit operator bool() const { return is_ok(); }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    std::string to_string() const;

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

// Builds a message with <<: `return error(StatusCode::kCorrupt) << path << ": bad magic";`
class StatusBuilder {
public:
    explicit StatusBuilder(StatusCode code) : code_(code) {}
    template <typename T>
    StatusBuilder& operator<<(const T& v) {
        os_ << v;
        return *this;
    }
    operator Status() const { return Status(code_, os_.str()); }

private:
    StatusCode code_;
    std::ostringstream os_;
};

inline StatusBuilder error(StatusCode code) { return StatusBuilder(code); }

template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::move(value)) {}
    Result(Status status) : v_(std::move(status)) {}
    Result(const StatusBuilder& b) : v_(Status(b)) {}

    bool is_ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return is_ok(); }
    const Status& status() const {
        static const Status kOk;
        return is_ok() ? kOk : std::get<Status>(v_);
    }
    T& value() & { return std::get<T>(v_); }
    const T& value() const& { return std::get<T>(v_); }
    T&& value() && { return std::get<T>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

private:
    std::variant<T, Status> v_;
};

}  // namespace kiln::core

// Propagate a failed Status / Result to the caller.
#define KILN_RETURN_IF_ERROR(expr)                        \
    do {                                                  \
        ::kiln::core::Status kiln_st_ = (expr);           \
        if (!kiln_st_.is_ok()) return kiln_st_;           \
    } while (0)

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)
// KILN_ASSIGN_OR_RETURN(auto x, make_x()): binds the value or returns the error.
#define KILN_ASSIGN_OR_RETURN(decl, expr) KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_r_, __LINE__), decl, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
    auto tmp = (expr);                               \
    if (!tmp.is_ok()) return tmp.status();           \
    decl = std::move(tmp).value()
