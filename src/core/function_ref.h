// FunctionRef<R(Args...)>: a non-owning reference to a callable (an object pointer and a call
// trampoline), for parameters that are only called during the call that receives them. Unlike
// std::function it never allocates (libstdc++ heap-allocates any lambda capturing more than 16
// bytes), which keeps the decode loop's ThreadPool jobs allocation-free. The referenced callable must
// outlive every call through the FunctionRef: pass lambdas directly as arguments, never store one.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace kiln::core {

template <class Sig>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
public:
    template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
        FunctionRef(F&& f)
    noexcept  // NOLINT(google-explicit-constructor): converts like std::function
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))), call_([](void* obj, Args... args) -> R {
              return (*static_cast<std::add_pointer_t<std::remove_reference_t<F>>>(obj))(std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return call_(obj_, std::forward<Args>(args)...); }

private:
    void* obj_;
    R (*call_)(void*, Args...);
};

}  // namespace kiln::core
