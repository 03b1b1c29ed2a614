// Input validation shared by the quantizers (see common.h).
#include "quant/common.h"

#include <cmath>

namespace kiln::quant {

core::Status check_matrix(std::span<const float> x, int64_t rows, int64_t cols, const char* what, bool require_finite) {
    using core::StatusCode;
    if (rows < 0 || cols < 0) return core::error(StatusCode::kInvalidArgument) << what << ": negative shape";
    if (rows != 0 && cols > int64_t(x.size()) / rows) {  // also keeps rows * cols from overflowing
        return core::error(StatusCode::kInvalidArgument)
               << what << ": " << x.size() << " values for [" << rows << ", " << cols << "]";
    }
    if (int64_t(x.size()) != rows * cols) {
        return core::error(StatusCode::kInvalidArgument)
               << what << ": " << x.size() << " values for [" << rows << ", " << cols << "]";
    }
    if (require_finite) {
        for (size_t i = 0; i < x.size(); ++i) {
            if (!std::isfinite(x[i])) {
                return core::error(StatusCode::kInvalidArgument)
                       << what << ": non-finite value " << x[i] << " at row " << int64_t(i) / cols << ", column "
                       << int64_t(i) % cols;
            }
        }
    }
    return core::Status::ok();
}

}  // namespace kiln::quant
