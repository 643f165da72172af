// The decode matvec launchers of ops.h: which kernel a product takes. Affine 4/8-bit weights
// with groups of 64 take the integer tensor-core kernel on sm_80+ (ops_matvec_i8.cu); other
// affine shapes the register-tiled SIMT kernels, and everything else (f32, bf16, shapes neither
// takes) the generic SIMT kernels (ops_matvec_simt.cu).
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/matvec_kernels.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tuning.h"

namespace rw::cuda {
namespace {

bool SameShape(const DevMat& a, const DevMat& b) {
  return a.type == b.type && a.bits == b.bits && a.group == b.group && a.rows == b.rows &&
         a.cols == b.cols;
}

bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// The register-tiled kernels' shape for w, none under REDWING_CUDA_MATVEC=generic.
FastShape FastShapeFor(const DevMat& w, const float* x) {
  return CurrentTuning().matvec == MatVecVariant::kGeneric ? FastShape{} : FastFor(w, x);
}

cudaError_t Dispatch(FastShape f, const MatVecArgs& a, cudaStream_t s);

// A batch (or slots sharing input rows) that the integer kernel did not take, as one-row
// launches: the same kernels and the same arithmetic per row, only more launches.
cudaError_t DispatchSplit(FastShape f, const MatVecArgs& a, cudaStream_t s) {
  if (a.batch > 1) {
    for (int b = 0; b < a.batch; ++b) {
      MatVecArgs r = a;
      r.batch = 1;
      r.x = a.x + b * a.cols;
      if (a.gateup) r.h = a.h + b * a.rows;
      for (unsigned i = 0; i < 3; ++i)
        if (a.y[i] != nullptr) r.y[i] = a.y[i] + b * a.w[i].rows;
      if (const cudaError_t e = Dispatch(f, r, s); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  // gateup with blobs, x_per slots per input row: x_per slots at a time.
  for (unsigned j0 = 0; j0 < a.slots; j0 += static_cast<unsigned>(a.x_per)) {
    MatVecArgs r = a;
    r.x_per = 1;
    r.slots = std::min<unsigned>(static_cast<unsigned>(a.x_per), a.slots - j0);
    r.x = a.x + (j0 / static_cast<unsigned>(a.x_per)) * a.x_stride;
    r.x_stride = 0;
    r.h = a.h + j0 * a.rows;
    if (a.idx != nullptr)
      r.idx = a.idx + j0;
    else
      r.blobs = a.blobs + j0;
    if (const cudaError_t e = Dispatch(f, r, s); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

// The integer tensor-core kernel where it takes the launch (not under REDWING_CUDA_MATVEC=simt
// or generic), else the register-tiled SIMT kernels (f.ku != 0), else the generic ones.
cudaError_t Dispatch(FastShape f, const MatVecArgs& a, cudaStream_t s) {
  const bool multi = a.batch > 1 || a.x_per > 1;
  if (multi && f.ku != 0 && CurrentTuning().matvec == MatVecVariant::kInt8) {
    if (const cudaError_t e = LaunchAffineMatVecI8(a, s); e != cudaErrorNotSupported) {
      CountPath(Path::kMatVecInt8);
      return e;
    }
  }
  if (multi) return DispatchSplit(f, a, s);
  if (f.ku == 0) {
    CountPath(Path::kMatVecGeneric);
    return LaunchMatVecGeneric(a, s);
  }
  if (CurrentTuning().matvec == MatVecVariant::kInt8) {
    if (const cudaError_t e = LaunchAffineMatVecI8(a, s); e != cudaErrorNotSupported) {
      CountPath(Path::kMatVecInt8);
      return e;
    }
  }
  CountPath(Path::kMatVecTiled);
  return LaunchMatVecTiled(f, a, s);
}

}  // namespace

cudaError_t LaunchMatVec(const DevMat& w, const float* x, float* y, cudaStream_t s) {
  if (w.rows <= 0 || w.cols <= 0) return cudaSuccess;
  if (cudaError_t e = CheckMat(w); e != cudaSuccess) return e;
  if (w.type == DevMat::kAffine && !Aligned16(x)) return cudaErrorMisalignedAddress;
  MatVecArgs a;
  a.w[0] = w;
  a.y[0] = y;
  a.rows = w.rows;
  a.cols = w.cols;
  a.x = x;
  return Dispatch(FastShapeFor(w, x), a, s);
}

cudaError_t LaunchMatVecRows(const DevMat& w, const float* x, int64_t m, float* y, cudaStream_t s) {
  if (w.rows <= 0 || w.cols <= 0 || m <= 0) return cudaSuccess;
  if (m > 65535) return cudaErrorInvalidValue;
  if (cudaError_t e = CheckMat(w); e != cudaSuccess) return e;
  if (w.type == DevMat::kAffine && (!Aligned16(x) || w.cols % 4 != 0))
    return cudaErrorMisalignedAddress;
  MatVecArgs a;
  a.w[0] = w;
  a.y[0] = y;
  a.rows = w.rows;
  a.cols = w.cols;
  a.x = x;
  a.batch = static_cast<int>(m);
  return Dispatch(FastShapeFor(w, x), a, s);
}

cudaError_t LaunchMatVecMultiRows(const DevMat* w, float* const* y, int n, const float* x,
                                  int64_t m, cudaStream_t s) {
  if (m <= 0) return cudaSuccess;
  if (n < 1 || n > 3 || m > 65535) return cudaErrorInvalidValue;
  MatVecArgs a;
  for (int i = 0; i < n; ++i) {
    if (cudaError_t e = CheckMat(w[i]); e != cudaSuccess) return e;
    if (w[i].type == DevMat::kAffine && (!Aligned16(x) || w[i].cols % 4 != 0))
      return cudaErrorMisalignedAddress;
    a.w[i] = w[i];
    a.y[i] = y[i];
    a.rows = w[i].rows > a.rows ? w[i].rows : a.rows;
    a.cols = w[i].cols > a.cols ? w[i].cols : a.cols;
  }
  if (a.rows <= 0) return cudaSuccess;
  for (int i = 1; i < n; ++i)  // one input row feeds every matrix
    if (w[i].cols != w[0].cols) return cudaErrorInvalidValue;
  a.slots = static_cast<unsigned>(n);
  a.x = x;
  a.batch = static_cast<int>(m);
  FastShape f = FastShapeFor(w[0], x);
  for (int i = 1; i < n && f.ku != 0; ++i) {
    const FastShape fi = FastShapeFor(w[i], x);
    if (fi.bits != f.bits || fi.ku != f.ku) f = FastShape{};
  }
  return Dispatch(f, a, s);
}

cudaError_t LaunchGateUpGegluRows(const DevMat& gate, const DevMat& up, const float* x, int64_t m,
                                  float* h, cudaStream_t s) {
  if (gate.rows <= 0 || m <= 0) return cudaSuccess;
  if (m > 65535) return cudaErrorInvalidValue;
  if (CheckMat(gate) != cudaSuccess || CheckMat(up) != cudaSuccess || gate.rows != up.rows)
    return cudaErrorInvalidValue;
  if (gate.type == DevMat::kAffine && (!Aligned16(x) || gate.cols % 4 != 0))
    return cudaErrorMisalignedAddress;
  MatVecArgs a;
  a.gateup = true;
  a.w[0] = gate;
  a.w[1] = up;
  a.rows = gate.rows;
  a.cols = gate.cols;
  a.x = x;
  a.h = h;
  a.batch = static_cast<int>(m);
  const FastShape f = SameShape(gate, up) ? FastShapeFor(gate, x) : FastShape{};
  return Dispatch(f, a, s);
}

cudaError_t LaunchMatVecMulti(const DevMat* w, float* const* y, int n, const float* x,
                              cudaStream_t s) {
  if (n < 1 || n > 3) return cudaErrorInvalidValue;
  MatVecArgs a;
  for (int i = 0; i < n; ++i) {
    if (cudaError_t e = CheckMat(w[i]); e != cudaSuccess) return e;
    if (w[i].type == DevMat::kAffine && !Aligned16(x)) return cudaErrorMisalignedAddress;
    a.w[i] = w[i];
    a.y[i] = y[i];
    a.rows = w[i].rows > a.rows ? w[i].rows : a.rows;
    a.cols = w[i].cols > a.cols ? w[i].cols : a.cols;
  }
  if (a.rows <= 0) return cudaSuccess;
  a.slots = static_cast<unsigned>(n);
  a.x = x;
  // The fast kernels when every matrix takes the same one (q/k/v share their shape's width).
  FastShape f = FastShapeFor(w[0], x);
  for (int i = 1; i < n && f.ku != 0; ++i) {
    const FastShape fi = FastShapeFor(w[i], x);
    if (fi.bits != f.bits || fi.ku != f.ku || w[i].cols != w[0].cols) f = FastShape{};
  }
  return Dispatch(f, a, s);
}

cudaError_t LaunchGateUpGeglu(const DevMat& gate, const DevMat& up, const float* x, float* h,
                              cudaStream_t s) {
  if (gate.rows <= 0) return cudaSuccess;
  if (CheckMat(gate) != cudaSuccess || CheckMat(up) != cudaSuccess || gate.rows != up.rows)
    return cudaErrorInvalidValue;
  if (gate.type == DevMat::kAffine && !Aligned16(x)) return cudaErrorMisalignedAddress;
  MatVecArgs a;
  a.gateup = true;
  a.w[0] = gate;
  a.w[1] = up;
  a.rows = gate.rows;
  a.cols = gate.cols;
  a.x = x;
  a.h = h;
  const FastShape f = SameShape(gate, up) ? FastShapeFor(gate, x) : FastShape{};
  return Dispatch(f, a, s);
}

cudaError_t LaunchExpertGateUp(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                               int n, const float* x, int64_t x_stride, float* h, cudaStream_t s,
                               int x_per) {
  if (n <= 0) return cudaSuccess;
  if (CheckMat(e.gate) != cudaSuccess || CheckMat(e.up) != cudaSuccess)
    return cudaErrorInvalidValue;
  if (e.gate.type == DevMat::kAffine && (!Aligned16(x) || x_stride % 4 != 0))
    return cudaErrorMisalignedAddress;
  MatVecArgs a;
  a.gateup = true;
  a.w[0] = e.gate;
  a.w[1] = e.up;
  a.rows = e.gate.rows;
  a.cols = e.gate.cols;
  a.slots = static_cast<unsigned>(n);
  a.blobs = blobs;
  a.idx = idx;
  a.x = x;
  a.x_stride = x_stride;
  a.h = h;
  a.x_per = x_per < 1 ? 1 : x_per;
  const FastShape f = SameShape(e.gate, e.up) ? FastShapeFor(e.gate, x) : FastShape{};
  return Dispatch(f, a, s);
}

cudaError_t LaunchExpertDown(const ExpertMats& e, const uint8_t* const* blobs, const int* idx,
                             int n, const float* h, float* y, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (CheckMat(e.down) != cudaSuccess) return cudaErrorInvalidValue;
  if (e.down.type == DevMat::kAffine && (!Aligned16(h) || e.down.cols % 4 != 0))
    return cudaErrorMisalignedAddress;
  MatVecArgs a;
  a.w[0] = e.down;
  a.y[0] = y;
  a.rows = e.down.rows;
  a.cols = e.down.cols;
  a.slots = static_cast<unsigned>(n);
  a.blobs = blobs;
  a.idx = idx;
  a.x = h;
  return Dispatch(FastShapeFor(e.down, h), a, s);
}

}  // namespace rw::cuda
