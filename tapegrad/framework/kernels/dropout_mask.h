#pragma once
// Internal (not installed): dropout's keep-mask as bytes, drawn from a generator exactly as dropout() always
// drew it, and the passes that apply it.
#include <cstdint>

#include <tapegrad/framework/generator.h>

namespace tapegrad::kernels {

/// The dropout draw: element i of a stream is dropped when its 32-bit half of 64-bit draw i / 2 (the low half
/// for even i) is below p * 2^32. next() continues the stream where the previous call stopped, so a tensor
/// walked in pieces gets the mask one walk over the whole would.
/// Note: the engine's draws are scalar (std::mt19937_64), so they are taken into a buffer first; turning them
/// into keep bytes is then one vector pass (dispatched), instead of a double conversion and compare per element.
class DropoutStream {
 public:
  DropoutStream(Generator& generator, double p);
  /// Hands the stream's position back to the generator (see below).
  ~DropoutStream();
  DropoutStream(const DropoutStream&) = delete;
  DropoutStream& operator=(const DropoutStream&) = delete;
  /// keep[j] = 1 for the next n elements that are kept, 0 for those dropped.
  void next(unsigned char* keep, std::int64_t n);

 private:
  /// Draws `count` numbers of the engine's sequence into out.
  void draw(std::uint64_t* out, std::int64_t count);
  std::mt19937_64& engine_;
  // Note: for long masks the engine's state is copied out (through its standard text form) and its sequence
  // continued by a vectorised Mersenne twister (the same numbers: checked against std::mt19937_64 once per
  // process, else not used); the destructor writes the state back, so the generator ends where the scalar draws
  // would have left it. Nothing else may draw from the generator while a stream lives.
  std::uint64_t state_[312] = {};
  std::size_t position_ = 0;
  bool bulk_ = false;
  std::uint64_t threshold_;  // a half is dropped when below this (ceil(p * 2^32), at most 2^32)
  std::uint64_t pending_ = 0;
  bool has_pending_ = false;  // the high half of pending_ is the stream's next element
};

/// out[j] = x[j] * (keep[j] ? kept : 0), the product dropout has always computed (NaN * 0 stays NaN).
void apply_keep(std::int64_t n, const float* x, const unsigned char* keep, float kept, float* out);
void apply_keep(std::int64_t n, const double* x, const unsigned char* keep, double kept, double* out);

/// ReLU then dropout in one pass: out[j] = relu(x[j]) * (keep[j] ? kept : 0), and flags[j] = keep[j] | 2 where
/// x[j] > 0 or is NaN (where ReLU passes its gradient), so that the backward needs neither x nor the output.
void relu_keep(std::int64_t n, const float* x, const unsigned char* keep, float kept, float* out, unsigned char* flags);
void relu_keep(std::int64_t n, const double* x, const unsigned char* keep, double kept, double* out,
               unsigned char* flags);
/// Its backward: dx[j] = flags[j] & 2 ? g[j] * (flags[j] & 1 ? kept : 0) : 0 (ReLU's gradient after dropout's).
void relu_keep_backward(std::int64_t n, const float* g, const unsigned char* flags, float kept, float* dx);
void relu_keep_backward(std::int64_t n, const double* g, const unsigned char* flags, double kept, double* dx);

/// Residual plus dropout in one pass: out[j] = x[j] + y[j] * (keep[j] ? kept : 0).
void add_keep(std::int64_t n, const float* x, const float* y, const unsigned char* keep, float kept, float* out);
void add_keep(std::int64_t n, const double* x, const double* y, const unsigned char* keep, double kept, double* out);

}  // namespace tapegrad::kernels
