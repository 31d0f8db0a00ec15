// StepCost: what a batched step costs on this machine, learned from the steps the engine loop
// runs, and the prompt rows that fit in a target step time.
//
// A step of D decode rows and P prompt rows takes about
//     seconds = base + D * decode_row + P * prompt_row
// (base: reading every weight matrix once, whatever the rows; a row: its share of the matrix
// products plus its attention over its own cache, which grows with the context). The three
// coefficients are fitted by recursive least squares with forgetting (each step weighs 0.95 of
// the one after it, so the fit follows the contexts as they grow and the machine as its load
// changes). Before the fit has seen a step with prompt rows it knows nothing of their cost, and
// prompt_rows_within() answers 0 (the scheduler then gives one chunk).
//
// Not thread-safe: the engine loop owns it.
#pragma once

#include <array>
#include <cstddef>

namespace turbokv::server {

class StepCost {
 public:
  // One step's rows and its measured wall time.
  void observe(size_t decode_rows, size_t prompt_rows, double seconds);

  // Predicted seconds of a step with these rows (0 before any observation).
  double predict(size_t decode_rows, size_t prompt_rows) const;
  // What prompt_rows_within() plans for the decode rows alone: a decode row at no less than a
  // prompt row, a fixed cost of at least 0.
  double decode_seconds(size_t decode_rows) const;
  // The most prompt rows a step with `decode_rows` decode rows can carry within `target_seconds`
  // (0 when even the decode rows alone take that long, or before a prompt row was measured).
  size_t prompt_rows_within(double target_seconds, size_t decode_rows) const;

  double base_seconds() const { return theta_[0]; }
  double decode_row_seconds() const { return theta_[1]; }
  double prompt_row_seconds() const { return theta_[2]; }
  size_t observations() const { return observations_; }

 private:
  static constexpr double kForget = 0.95;
  std::array<double, 3> theta_{};                     // base, decode_row, prompt_row (seconds)
  std::array<std::array<double, 3>, 3> cov_{};        // inverse information (set on first observe)
  size_t observations_ = 0;
  bool saw_prompt_rows_ = false;
};

}  // namespace turbokv::server
