// StepCost: what a batched step costs on this machine, learned from the steps the engine loop
// runs, and the prompt rows that fit in a target step time.
//
// Two kinds of step, each with its own line in the step's rows:
//     a step that carries prompt rows:  seconds = base + row * (D + P)
//     a decode-only step:               seconds = decode_base + decode_row * D
// (D decode rows, P prompt rows). Why two: the server multiplies a step's rows by the weights
// with matmul_rowwise (batch-invariant), which reads the weights once per small tile of rows,
// so a step's cost jumps when a prompt chunk joins its decode rows. Measured on the 1B-shaped
// Q8_0 model, 2 cores: 1 decode row 66 ms, 2 rows 80 ms; 1 decode + 16 prompt rows 334 ms,
// 2 + 32 432 ms, 128 prompt rows 1.29 s. One plane through all steps (the former fit) cannot
// follow that jump: it under-planned the steps with prompt rows, which then ran up to 2-4x the
// target and made streams stall. A decode row in a step with prompt rows costs what a prompt
// row does (the same products; its vocabulary projection is small beside them).
//
// Each line is fitted by recursive least squares with forgetting (each step weighs 0.95 of the
// one after it, so the fit follows the contexts as they grow and the machine as its load
// changes). Before a step with prompt rows was seen nothing is known of their cost, and
// prompt_rows_within() answers 0 (the scheduler then gives one chunk).
//
// Not thread-safe: the engine loop owns it.
#pragma once

#include <array>
#include <cstddef>

namespace turbokv::server {

// seconds = a + b * x, fitted by recursive least squares with forgetting.
class LineFit {
 public:
  void observe(double x, double seconds);
  double predict(double x) const { return theta_[0] + theta_[1] * x; }
  double intercept() const { return theta_[0]; }
  double slope() const { return theta_[1]; }
  size_t observations() const { return observations_; }

 private:
  std::array<double, 2> theta_{};
  std::array<std::array<double, 2>, 2> cov_{};  // inverse information (set on the first observe)
  size_t observations_ = 0;
};

class StepCost {
 public:
  // One step's rows and its measured wall time.
  void observe(size_t decode_rows, size_t prompt_rows, double seconds);

  // Predicted seconds of a step with these rows (0 before a step of its kind was observed).
  double predict(size_t decode_rows, size_t prompt_rows) const;
  // What the decode rows alone take (the decode-only line; before a decode-only step was seen,
  // their rows' share of a step with prompt rows, without its fixed cost).
  double decode_seconds(size_t decode_rows) const;
  // The most prompt rows a step with `decode_rows` decode rows can carry within `target_seconds`
  // (0 when even a step with no prompt row would take that long, or before a prompt row was
  // measured).
  size_t prompt_rows_within(double target_seconds, size_t decode_rows) const;

  // The fit of steps with prompt rows: its fixed cost and the cost of each row.
  double base_seconds() const { return mixed_.intercept(); }
  double prompt_row_seconds() const { return mixed_.slope(); }
  // The decode-only line's cost of a row.
  double decode_row_seconds() const { return decode_.slope(); }
  size_t observations() const { return mixed_.observations() + decode_.observations(); }

 private:
  LineFit mixed_;   // steps with prompt rows, x = all their rows
  LineFit decode_;  // decode-only steps, x = decode rows
};

}  // namespace turbokv::server
