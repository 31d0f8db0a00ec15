#include "server/scheduling/step_cost.hpp"

#include <algorithm>
#include <cmath>

namespace turbokv::server {

namespace {
constexpr double kForget = 0.95;
// Prior variance of each coefficient: large, so the first steps set the fit (the least-norm one
// while a single size of step has been seen: it charges the rows rather than the fixed cost,
// which errs towards smaller prompt budgets).
constexpr double kPriorVariance = 1e4;
// Forgetting inflates the variance of directions no step excites (a run of steps of one size
// says nothing new about the split between fixed cost and rows); the cap keeps one odd step
// from moving the fit by much.
constexpr double kMaxTrace = 2e4;
}  // namespace

void LineFit::observe(double x, double seconds) {
  if (observations_ == 0) cov_ = {{{kPriorVariance, 0}, {0, kPriorVariance}}};
  const std::array<double, 2> v = {1.0, x};
  const std::array<double, 2> cv = {cov_[0][0] * v[0] + cov_[0][1] * v[1], cov_[1][0] * v[0] + cov_[1][1] * v[1]};
  const double denom = kForget + v[0] * cv[0] + v[1] * cv[1];
  const double error = seconds - predict(x);
  for (size_t i = 0; i < 2; ++i) theta_[i] += cv[i] / denom * error;
  for (size_t i = 0; i < 2; ++i) {
    for (size_t j = 0; j < 2; ++j) cov_[i][j] = (cov_[i][j] - cv[i] * cv[j] / denom) / kForget;
  }
  const double trace = cov_[0][0] + cov_[1][1];
  if (trace > kMaxTrace) {
    for (auto& row : cov_) {
      for (double& c : row) c *= kMaxTrace / trace;
    }
  }
  ++observations_;
}

void StepCost::observe(size_t decode_rows, size_t prompt_rows, double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || decode_rows + prompt_rows == 0) return;
  if (prompt_rows > 0) {
    mixed_.observe(static_cast<double>(decode_rows + prompt_rows), seconds);
  } else {
    decode_.observe(static_cast<double>(decode_rows), seconds);
  }
}

double StepCost::predict(size_t decode_rows, size_t prompt_rows) const {
  if (prompt_rows == 0 && decode_.observations() > 0) return std::max(0.0, decode_.predict(static_cast<double>(decode_rows)));
  if (mixed_.observations() == 0) return 0.0;
  return std::max(0.0, mixed_.predict(static_cast<double>(decode_rows + prompt_rows)));
}

double StepCost::decode_seconds(size_t decode_rows) const {
  const double rows = static_cast<double>(decode_rows);
  if (decode_.observations() > 0) return std::max(0.0, decode_.predict(rows));
  // No decode-only step yet (streams have always had prompt chunks beside them): the rows'
  // share of a step with prompt rows, without that step's fixed cost, which is the prompt
  // chunk's (counting it made the scheduler's "twice the decode rows' time" target twice a
  // prompt step, and let two chunks in beside two streams; StepCost.AReplayedRun...).
  return std::max(0.0, mixed_.slope()) * rows;
}

size_t StepCost::prompt_rows_within(double target_seconds, size_t decode_rows) const {
  if (mixed_.observations() == 0 || mixed_.slope() <= 0) return 0;
  const double rows = std::floor((target_seconds - std::max(0.0, mixed_.intercept())) / mixed_.slope());
  if (!(rows > static_cast<double>(decode_rows))) return 0;
  const double prompt = rows - static_cast<double>(decode_rows);
  return prompt >= 1e9 ? static_cast<size_t>(1e9) : static_cast<size_t>(prompt);
}

}  // namespace turbokv::server
