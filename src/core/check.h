// KILN_CHECK(cond) << msg: aborts with file:line when an internal invariant breaks. Always on,
// release builds included. Never use it for anything a user's input can cause (use Status).
#pragma once

#include <sstream>

namespace kiln::core {

class CheckFailure {
public:
    CheckFailure(const char* file, int line, const char* cond);
    [[noreturn]] ~CheckFailure();
    template <typename T>
    CheckFailure& operator<<(const T& v) {
        os_ << v;
        return *this;
    }

private:
    std::ostringstream os_;
};

}  // namespace kiln::core

#define KILN_CHECK(cond) \
    if (__builtin_expect(!!(cond), 1)) {} else ::kiln::core::CheckFailure(__FILE__, __LINE__, #cond)
