#include "server/scheduling/step_cost.hpp"

#include <algorithm>
#include <cmath>

namespace turbokv::server {

namespace {
// Prior variance of each coefficient: large, so the first steps set the fit (the least-norm one
// while a single kind of step has been seen: it charges the rows rather than the base, which
// errs towards smaller prompt budgets).
constexpr double kPriorVariance = 1e4;
// Forgetting inflates the variance of directions no step excites (a server that only decodes
// says nothing new about prompt rows); the cap keeps one odd step from moving the fit by much.
constexpr double kMaxTrace = 3e4;
}  // namespace

void StepCost::observe(size_t decode_rows, size_t prompt_rows, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || decode_rows + prompt_rows == 0) return;
  if (observations_ == 0) {
    for (size_t i = 0; i < 3; ++i) cov_[i][i] = kPriorVariance;
  }
  const std::array<double, 3> x = {1.0, static_cast<double>(decode_rows), static_cast<double>(prompt_rows)};
  std::array<double, 3> cx{};  // cov * x
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = 0; j < 3; ++j) cx[i] += cov_[i][j] * x[j];
  }
  double denom = kForget;
  for (size_t i = 0; i < 3; ++i) denom += x[i] * cx[i];
  const double error = seconds - (theta_[0] * x[0] + theta_[1] * x[1] + theta_[2] * x[2]);
  for (size_t i = 0; i < 3; ++i) theta_[i] += cx[i] / denom * error;
  double trace = 0;
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = 0; j < 3; ++j) cov_[i][j] = (cov_[i][j] - cx[i] * cx[j] / denom) / kForget;
    trace += cov_[i][i];
  }
  if (trace > kMaxTrace) {
    for (auto& row : cov_) {
      for (double& v : row) v *= kMaxTrace / trace;
    }
  }
  ++observations_;
  saw_prompt_rows_ = saw_prompt_rows_ || prompt_rows > 0;
}

double StepCost::predict(size_t decode_rows, size_t prompt_rows) const {
  const double t = theta_[0] + theta_[1] * static_cast<double>(decode_rows) + theta_[2] * static_cast<double>(prompt_rows);
  return std::max(0.0, t);
}

double StepCost::decode_seconds(size_t decode_rows) const {
  // A decode row does all a prompt row does (and projects onto the vocabulary): it costs no
  // less, whatever a fit that has seen few decode rows says; nor is the fixed cost negative.
  return std::max(0.0, theta_[0]) + static_cast<double>(decode_rows) * std::max(theta_[1], theta_[2]);
}

size_t StepCost::prompt_rows_within(double target_seconds, size_t decode_rows) const {
  if (!saw_prompt_rows_ || theta_[2] <= 0) return 0;
  const double left = target_seconds - decode_seconds(decode_rows);
  if (left <= 0) return 0;
  const double rows = std::floor(left / theta_[2]);
  return rows >= 1e9 ? static_cast<size_t>(1e9) : static_cast<size_t>(rows);
}

}  // namespace turbokv::server
