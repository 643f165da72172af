// A resizable float buffer, zero-filled like std::vector<float>, whose pages cost memory only
// once written: large buffers come from calloc, which maps fresh zero pages instead of writing
// zeros. The forward pass sizes its scratch for a whole prefill chunk; with this, a session
// that only decodes touches the first row of each buffer, not all 512.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace rw {

class ZeroedFloats {
 public:
  ZeroedFloats() = default;
  explicit ZeroedFloats(size_t n) { resize(n); }
  ~ZeroedFloats() { std::free(p_); }
  ZeroedFloats(ZeroedFloats&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  ZeroedFloats& operator=(ZeroedFloats&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ZeroedFloats(const ZeroedFloats&) = delete;
  ZeroedFloats& operator=(const ZeroedFloats&) = delete;

  // Grows to n floats, keeping the contents; new elements are zero. A smaller n does nothing.
  void resize(size_t n) {
    if (n <= n_) return;
    auto* q = static_cast<float*>(std::calloc(n, sizeof(float)));
    if (q == nullptr) throw std::bad_alloc();
    if (n_ > 0) std::memcpy(q, p_, n_ * sizeof(float));
    std::free(p_);
    p_ = q;
    n_ = n;
  }

  float* data() { return p_; }
  const float* data() const { return p_; }
  size_t size() const { return n_; }
  float* begin() { return p_; }
  float* end() { return p_ + n_; }
  float& operator[](size_t i) { return p_[i]; }
  const float& operator[](size_t i) const { return p_[i]; }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace rw
