// StepCost: the running fit of a step's time from its decode and prompt rows, and the prompt
// rows that fit in a target step time (server/scheduling/step_cost.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "server/scheduling/step_cost.hpp"

namespace turbokv::server {
namespace {

// The steps a server runs: decode-only steps, prompt-only steps, and mixes.
struct Step {
  size_t decode, prompt;
};
Step step_of(std::mt19937& rng) {
  switch (rng() % 3) {
    case 0: return {1 + rng() % 8, 0};
    case 1: return {0, 16 * (1 + rng() % 8)};
    default: return {1 + rng() % 8, 8 * (1 + rng() % 6)};
  }
}

TEST(StepCost, LearnsTheCostOfARowOfEachKind) {
  StepCost cost;
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 0.002);  // 2 ms of jitter
  for (int i = 0; i < 300; ++i) {
    const Step s = step_of(rng);
    cost.observe(s.decode, s.prompt, 0.050 + 0.012 * s.decode + 0.008 * s.prompt + noise(rng));
  }
  EXPECT_NEAR(cost.base_seconds(), 0.050, 0.004);
  EXPECT_NEAR(cost.decode_row_seconds(), 0.012, 0.001);
  EXPECT_NEAR(cost.prompt_row_seconds(), 0.008, 0.0003);
  EXPECT_NEAR(cost.predict(4, 32), 0.050 + 0.048 + 0.256, 0.01);
  // 250 ms with 4 decode rows (98 ms) leaves 152 ms: 19 prompt rows of 8 ms.
  const size_t rows = cost.prompt_rows_within(0.250, 4);
  EXPECT_GE(rows, 18u);
  EXPECT_LE(rows, 20u);
  EXPECT_EQ(cost.prompt_rows_within(0.090, 4), 0u) << "the decode rows alone take longer";
}

TEST(StepCost, FollowsTheMachineWhenItsSpeedChanges) {
  StepCost cost;
  std::mt19937 rng(11);
  for (int i = 0; i < 200; ++i) {
    const Step s = step_of(rng);
    cost.observe(s.decode, s.prompt, 0.050 + 0.012 * s.decode + 0.008 * s.prompt);
  }
  // Another job takes half the cores: every step now costs twice as much.
  for (int i = 0; i < 100; ++i) {
    const Step s = step_of(rng);
    cost.observe(s.decode, s.prompt, 2 * (0.050 + 0.012 * s.decode + 0.008 * s.prompt));
  }
  EXPECT_NEAR(cost.prompt_row_seconds(), 0.016, 0.0008);
  EXPECT_NEAR(cost.predict(4, 0), 2 * 0.098, 0.01);
}

TEST(StepCost, KnowsNothingOfPromptRowsBeforeItSawOne) {
  StepCost cost;
  EXPECT_EQ(cost.prompt_rows_within(1.0, 4), 0u);
  for (int i = 0; i < 50; ++i) cost.observe(4, 0, 0.1);
  EXPECT_EQ(cost.prompt_rows_within(1.0, 4), 0u) << "decode-only steps say nothing about a prompt row";
  EXPECT_NEAR(cost.predict(4, 0), 0.1, 1e-3);
}

TEST(StepCost, WithOneKindOfStepItPredictsThatStepAndBudgetsNearIt) {
  // Only one shape of step seen (4 decode rows and a chunk of 32): the split between the fixed
  // cost and the rows is unknown; the fit charges mostly the rows (the least-norm split), which
  // here gives a budget below the true one, and never below what it saw fit.
  StepCost cost;
  for (int i = 0; i < 50; ++i) cost.observe(4, 32, 0.050 + 0.048 + 0.256);
  EXPECT_NEAR(cost.predict(4, 32), 0.354, 1e-3);
  EXPECT_LE(cost.prompt_rows_within(0.5, 4), static_cast<size_t>((0.5 - 0.098) / 0.008));
  EXPECT_GE(cost.prompt_rows_within(0.5, 4), 32u) << "but no less than what it saw fit";
}

TEST(StepCost, PlansADecodeRowAtNoLessThanAPromptRow) {
  // Prompt-only steps so far (a server whose first request is still in its prompt): the fit
  // knows nothing of decode rows; the budget still charges each one a prompt row's cost.
  StepCost cost;
  for (int i = 0; i < 20; ++i) cost.observe(0, 128, 0.050 + 128 * 0.008);
  const size_t alone = cost.prompt_rows_within(0.250, 0);
  EXPECT_LE(cost.prompt_rows_within(0.250, 8), alone - 8);
  EXPECT_LE(cost.prompt_rows_within(0.250, 8) * 0.008 + 8 * 0.008, 0.250);
}

TEST(StepCost, IgnoresStepsItCannotLearnFrom) {
  StepCost cost;
  cost.observe(4, 16, std::nan(""));
  cost.observe(4, 16, -1.0);
  cost.observe(0, 0, 0.5);
  EXPECT_EQ(cost.observations(), 0u);
  EXPECT_EQ(cost.predict(4, 16), 0.0);
}

}  // namespace
}  // namespace turbokv::server
