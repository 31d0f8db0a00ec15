#include "turbokv/rotation.hpp"

#include <Eigen/Dense>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "core/check.hpp"
#include "core/codec_reference.hpp"
#include "core/hash.hpp"
#include "kernels/codec_kernels.hpp"
#include "turbokv/prng.hpp"

namespace turbokv {
namespace {

constexpr int kMaxHaarDim = 4096;
constexpr int kMaxHadamardBlock = 1024;
constexpr int kMaxHadamardDim = 1 << 20;
// Purpose tags so the two kinds (and Q_m inside Hadamard) draw independent streams.
constexpr uint64_t kHaarTag = 0x4861617200000001ULL;
constexpr uint64_t kHadamardSignTag = 0x4861646100000002ULL;
constexpr uint64_t kHadamardBlockTag = 0x4861646100000003ULL;

std::atomic<bool> g_force_scalar{false};

// Haar m x m (or d x d) in double: QR of a seeded Gaussian, columns sign-corrected.
Eigen::MatrixXd haar_matrix(int dim, uint64_t stream_seed) {
  SplitMix64 rng(stream_seed);
  Eigen::MatrixXd gaussian(dim, dim);
  for (int i = 0; i < dim; ++i) {
    for (int j = 0; j < dim; ++j) gaussian(i, j) = rng.normal();
  }
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(gaussian);
  Eigen::MatrixXd q = qr.householderQ();
  const auto& packed = qr.matrixQR();
  for (int j = 0; j < dim; ++j) {
    if (packed(j, j) < 0) q.col(j) = -q.col(j);
  }
  return q;
}

std::vector<float> to_row_major_float(const Eigen::MatrixXd& m) {
  std::vector<float> out(static_cast<size_t>(m.rows()) * m.cols());
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    for (Eigen::Index j = 0; j < m.cols(); ++j) out[i * m.cols() + j] = static_cast<float>(m(i, j));
  }
  return out;
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// out[n][d] = in[n][d] * M^T (transpose_m false) or in * M (true), M row-major d x d.
void apply_dense(const std::vector<float>& matrix, int dim, bool transpose_m, const float* in,
                 float* out, size_t n) {
  if (n == 0) return;
  const Eigen::Map<const RowMatrix> m(matrix.data(), dim, dim);
  const Eigen::Map<const RowMatrix> x(in, static_cast<Eigen::Index>(n), dim);
  RowMatrix y = transpose_m ? RowMatrix(x * m) : RowMatrix(x * m.transpose());
  std::memcpy(out, y.data(), n * static_cast<size_t>(dim) * sizeof(float));
}

}  // namespace

const char* rotation_kind_name(RotationKind kind) {
  return kind == RotationKind::haar ? "haar" : "hadamard";
}

RotationKind parse_rotation_kind(std::string_view name) {
  if (name == "haar") return RotationKind::haar;
  if (name == "hadamard") return RotationKind::hadamard;
  detail::fail("unknown rotation '{}': expected 'haar' or 'hadamard'", name);
}

void set_force_scalar_kernels(bool scalar) { g_force_scalar.store(scalar); }
bool force_scalar_kernels() { return g_force_scalar.load(); }

std::vector<float> Rotation::matrix() const {
  const int d = dim();
  std::vector<float> basis(static_cast<size_t>(d) * d, 0.0f);
  for (int j = 0; j < d; ++j) basis[static_cast<size_t>(j) * d + j] = 1.0f;
  forward(basis.data(), basis.data(), d);  // row j now holds R e_j, column j of R
  std::vector<float> r(basis.size());
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) r[static_cast<size_t>(i) * d + j] = basis[static_cast<size_t>(j) * d + i];
  }
  return r;
}

HaarRotation::HaarRotation(int dim, uint64_t seed) : dim_(dim), seed_(seed) {
  TURBOKV_CHECK(dim >= 2 && dim <= kMaxHaarDim, "HaarRotation: dim must be in [2, {}], got {}",
                kMaxHaarDim, dim);
  matrix_ = to_row_major_float(haar_matrix(dim, derive_seed(seed, kHaarTag)));
  detail::Hasher hasher;
  hasher.add(static_cast<int>(RotationKind::haar));
  hasher.add(dim_);
  hasher.add_bytes(matrix_.data(), matrix_.size() * sizeof(float));
  checksum_ = hasher.finish();
}

void HaarRotation::forward(const float* in, float* out, size_t n) const {
  apply_dense(matrix_, dim_, false, in, out, n);
}

void HaarRotation::inverse(const float* in, float* out, size_t n) const {
  apply_dense(matrix_, dim_, true, in, out, n);
}

HadamardRotation::HadamardRotation(int dim, uint64_t seed) : dim_(dim), seed_(seed) {
  TURBOKV_CHECK(dim >= 2 && dim <= kMaxHadamardDim, "HadamardRotation: dim must be in [2, {}], got {}",
                kMaxHadamardDim, dim);
  log2_blocks_ = 0;
  block_ = dim;
  while (block_ % 2 == 0) {
    block_ /= 2;
    ++log2_blocks_;
  }
  TURBOKV_CHECK(block_ <= kMaxHadamardBlock,
                "HadamardRotation: dim {} has odd part {} > {} (use the haar rotation)", dim, block_,
                kMaxHadamardBlock);
  SplitMix64 rng(derive_seed(seed, kHadamardSignTag));
  signs_.resize(dim);
  for (auto& s : signs_) s = rng.sign();
  if (block_ > 1) block_rotation_ = to_row_major_float(haar_matrix(block_, derive_seed(seed, kHadamardBlockTag)));
  scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(size_t{1} << log2_blocks_)));
  detail::Hasher hasher;
  hasher.add(static_cast<int>(RotationKind::hadamard));
  hasher.add(dim_);
  hasher.add(scale_);
  hasher.add_bytes(signs_.data(), signs_.size() * sizeof(float));
  hasher.add_bytes(block_rotation_.data(), block_rotation_.size() * sizeof(float));
  checksum_ = hasher.finish();
}

namespace {

// y[b] = sum_j Q[b][j] x[j] (or Q^T) inside each block of m, accumulated in float, j ascending.
void apply_block_rotation(const std::vector<float>& q, int m, bool transpose, float* x, size_t blocks) {
  float tmp[kMaxHadamardBlock];
  for (size_t blk = 0; blk < blocks; ++blk) {
    float* v = x + blk * m;
    for (int i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int j = 0; j < m; ++j) acc += (transpose ? q[j * m + i] : q[i * m + j]) * v[j];
      tmp[i] = acc;
    }
    std::memcpy(v, tmp, m * sizeof(float));
  }
}

void fwht_batch(float* x, size_t n, int log2_blocks, int block, float scale) {
  if (force_scalar_kernels()) {
    reference::fwht_blocks_batch(x, n, log2_blocks, block, scale);
  } else {
    kernels::fwht_blocks_batch(x, n, log2_blocks, block, scale);
  }
}

}  // namespace

void HadamardRotation::forward(const float* in, float* out, size_t n) const {
  const size_t d = static_cast<size_t>(dim_);
  const size_t blocks = size_t{1} << log2_blocks_;
  for (size_t v = 0; v < n; ++v) {
    const float* x = in + v * d;
    float* y = out + v * d;
    for (size_t i = 0; i < d; ++i) y[i] = x[i] * signs_[i];
    if (block_ > 1) apply_block_rotation(block_rotation_, block_, false, y, blocks);
  }
  fwht_batch(out, n, log2_blocks_, block_, scale_);
}

void HadamardRotation::inverse(const float* in, float* out, size_t n) const {
  const size_t d = static_cast<size_t>(dim_);
  const size_t blocks = size_t{1} << log2_blocks_;
  if (out != in && n > 0) std::memcpy(out, in, n * d * sizeof(float));
  fwht_batch(out, n, log2_blocks_, block_, scale_);
  for (size_t v = 0; v < n; ++v) {
    float* y = out + v * d;
    if (block_ > 1) apply_block_rotation(block_rotation_, block_, true, y, blocks);
    for (size_t i = 0; i < d; ++i) y[i] *= signs_[i];
  }
}

std::shared_ptr<const Rotation> make_rotation(RotationKind kind, int dim, uint64_t seed) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, uint64_t>, std::weak_ptr<const Rotation>> cache;
  const auto key = std::make_tuple(static_cast<int>(kind), dim, seed);
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) {
      if (auto existing = it->second.lock()) return existing;
    }
  }
  // Build outside the lock (a 4096-d Haar QR takes seconds); first insert wins.
  std::shared_ptr<const Rotation> made;
  if (kind == RotationKind::haar) {
    made = std::make_shared<const HaarRotation>(dim, seed);
  } else {
    TURBOKV_CHECK(kind == RotationKind::hadamard, "make_rotation: unknown rotation kind {}",
                  static_cast<int>(kind));
    made = std::make_shared<const HadamardRotation>(dim, seed);
  }
  std::lock_guard lock(mutex);
  auto& slot = cache[key];
  if (auto existing = slot.lock()) return existing;
  slot = made;
  return made;
}

}  // namespace turbokv
