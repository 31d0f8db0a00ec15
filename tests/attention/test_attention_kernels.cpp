// Every SIMD kernel table against the scalar table, kernel by kernel, on raw arrays: packed-code
// dots and accumulation at every width 1-8, odd group sizes (partial last chunk), groups at odd
// offsets in tight records (no bytes after the codes, so the end-of-record path is taken), every
// row count 1-8; dense fp16/f32 kernels at odd head dims; the online-softmax step with masks and
// soft-cap; the norm loads (fp16 and float) at odd counts and strides; the norm scaling of scores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "turbokv/half.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;

namespace {

using turbokv::attn::CodeGroup;
using turbokv::attn::kBlockTokens;
using turbokv::attn::KernelTable;

std::vector<const KernelTable*> simd_tables() {
  std::vector<const KernelTable*> t;
  if (turbokv::attn::avx2_kernel_table() != nullptr) t.push_back(turbokv::attn::avx2_kernel_table());
  if (turbokv::attn::avx_vnni_kernel_table() != nullptr) t.push_back(turbokv::attn::avx_vnni_kernel_table());
  if (turbokv::attn::vnni_kernel_table() != nullptr) t.push_back(turbokv::attn::vnni_kernel_table());
  return t;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at " << i;
  }
}

TEST(AttentionKernels, PackedGroupsMatchScalar) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(9);
  for (int bits = 1; bits <= 8; ++bits) {
    const auto table = random_normal(1u << bits, rng);
    for (int dims : {5, 13, 40, 64, 67, 80, 100, 128}) {
      for (size_t offset : {size_t{0}, size_t{3}}) {
        CodeGroup g;
        g.bits = bits;
        g.dims = dims;
        g.offset = offset;
        g.table = table.data();
        // Tight record: the group's packed bytes end the record.
        const size_t code_size = offset + (static_cast<size_t>(dims) * bits + 7) / 8;
        turbokv::attn::finish_code_group(g, code_size);
        for (size_t n : {size_t{1}, size_t{7}, size_t{13}, size_t{kBlockTokens}}) {
          std::vector<uint8_t> records(n * code_size);
          for (auto& b : records) b = static_cast<uint8_t>(rng());
          for (int rows = 1; rows <= 8; ++rows) {
            const size_t stride = g.padded_dims() + 3;
            auto q = random_normal(rows * stride, rng);
            for (int r = 0; r < rows; ++r) {
              for (size_t j = dims; j < stride; ++j) q[r * stride + j] = 0.0f;  // padding
            }
            std::vector<float> want(rows * kBlockTokens, 1.0f), w = random_normal(rows * kBlockTokens, rng);
            std::vector<float> acc_want(rows * stride, 0.5f);
            scalar.group_dots(q.data(), stride, rows, records.data(), code_size, n, g, want.data(), kBlockTokens, true);
            scalar.group_accumulate(w.data(), kBlockTokens, rows, records.data(), code_size, n, g, acc_want.data(), stride);
            for (const KernelTable* k : tables) {
              // A table may keep 4-bit groups in its own chunk order: permute the query rows in
              // and the accumulators back out, as the attention source does.
              const uint8_t* order = bits == 4 ? k->chunk_order4 : nullptr;
              const auto position = [&](int j) { return order != nullptr ? j / 8 * 8 + order[j % 8] : j; };
              std::vector<float> qk(q.size(), 0.0f);
              for (int r = 0; r < rows; ++r) {
                for (int j = 0; j < g.padded_dims(); ++j) {
                  if (position(j) < dims) qk[r * stride + j] = q[r * stride + position(j)];
                }
              }
              std::vector<float> got(rows * kBlockTokens, 1.0f), acc_k(rows * stride, 0.5f), acc(rows * stride, 0.5f);
              k->group_dots(qk.data(), stride, rows, records.data(), code_size, n, g, got.data(), kBlockTokens, true);
              k->group_accumulate(w.data(), kBlockTokens, rows, records.data(), code_size, n, g, acc_k.data(), stride);
              for (int r = 0; r < rows; ++r) {
                for (int j = 0; j < g.padded_dims(); ++j) {
                  if (position(j) < dims) acc[r * stride + position(j)] = acc_k[r * stride + j];
                }
              }
              const std::string what = std::string(k->name) + " bits " + std::to_string(bits) + " dims " +
                                       std::to_string(dims) + " rows " + std::to_string(rows) + " n " + std::to_string(n);
              for (int r = 0; r < rows; ++r) {
                for (size_t t = 0; t < n; ++t) {
                  ASSERT_NEAR(got[r * kBlockTokens + t], want[r * kBlockTokens + t], 1e-4 * (1 + std::fabs(want[r * kBlockTokens + t]))) << what;
                }
                for (int j = 0; j < dims; ++j) {
                  ASSERT_NEAR(acc[r * stride + j], acc_want[r * stride + j], 1e-4 * (1 + std::fabs(acc_want[r * stride + j]))) << what;
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(AttentionKernels, DenseMatchScalar) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(10);
  for (int dim : {3, 8, 13, 64, 100}) {
    for (size_t n : {size_t{1}, size_t{5}, size_t{kBlockTokens}}) {
      const auto kf = random_normal(n * dim, rng);
      std::vector<uint16_t> kh(kf.size());
      for (size_t i = 0; i < kf.size(); ++i) kh[i] = turbokv::float_to_half(kf[i]);
      for (int rows = 1; rows <= 8; ++rows) {
        const auto q = random_normal(rows * dim, rng);
        const auto w = random_normal(rows * kBlockTokens, rng);
        std::vector<float> s16(rows * kBlockTokens), s32(rows * kBlockTokens);
        std::vector<float> a16(rows * dim, 0.25f), a32(rows * dim, 0.25f);
        scalar.dots_f16(q.data(), dim, rows, kh.data(), n, dim, s16.data(), kBlockTokens);
        scalar.dots_f32(q.data(), dim, rows, kf.data(), n, dim, s32.data(), kBlockTokens);
        scalar.accumulate_f16(w.data(), kBlockTokens, rows, kh.data(), n, dim, a16.data(), dim);
        scalar.accumulate_f32(w.data(), kBlockTokens, rows, kf.data(), n, dim, a32.data(), dim);
        for (const KernelTable* k : tables) {
          std::vector<float> g16(rows * kBlockTokens), g32(rows * kBlockTokens);
          std::vector<float> b16(rows * dim, 0.25f), b32(rows * dim, 0.25f);
          k->dots_f16(q.data(), dim, rows, kh.data(), n, dim, g16.data(), kBlockTokens);
          k->dots_f32(q.data(), dim, rows, kf.data(), n, dim, g32.data(), kBlockTokens);
          k->accumulate_f16(w.data(), kBlockTokens, rows, kh.data(), n, dim, b16.data(), dim);
          k->accumulate_f32(w.data(), kBlockTokens, rows, kf.data(), n, dim, b32.data(), dim);
          const std::string what = std::string(k->name) + " dim " + std::to_string(dim) + " rows " + std::to_string(rows);
          for (int r = 0; r < rows; ++r) {
            for (size_t t = 0; t < n; ++t) {
              ASSERT_NEAR(g16[r * kBlockTokens + t], s16[r * kBlockTokens + t], 1e-4 * (1 + std::fabs(s16[r * kBlockTokens + t]))) << what;
              ASSERT_NEAR(g32[r * kBlockTokens + t], s32[r * kBlockTokens + t], 1e-4 * (1 + std::fabs(s32[r * kBlockTokens + t]))) << what;
            }
          }
          expect_close(b16, a16, 1e-4, what + " accumulate f16");
          expect_close(b32, a32, 1e-4, what + " accumulate f32");
        }
      }
    }
  }
}

// The prefill kernels (tiles of up to kPrefillRows rows): the scalar table's fused multiply-add
// chains are the reference; a table with blocked kernels (its prefill_* differ from its dots_*)
// must give exactly their bits at the head dims the blocked kernels take, and every table must
// stay within rounding of them elsewhere. Row counts cover the register blocks (12 score rows,
// 6 accumulator rows) and their tails; token counts the 16- and 32-token slab tails; strides are
// wider than the rows, and accumulators start nonzero.
TEST(AttentionKernels, PrefillKernelsMatchScalar) {
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::vector<const KernelTable*> tables = simd_tables();
  std::mt19937 rng(12);
  for (int dim : {16, 48, 64, 80, 128, 256, 13, 100, 272}) {
    const size_t qs = dim + 5, as = dim + 3;
    for (size_t n : {size_t{1}, size_t{7}, size_t{16}, size_t{17}, size_t{33}, size_t{kBlockTokens}}) {
      const auto kf = random_normal(n * dim, rng);
      std::vector<uint16_t> kh(kf.size());
      for (size_t i = 0; i < kf.size(); ++i) kh[i] = turbokv::float_to_half(kf[i]);
      for (int rows : {1, 5, 6, 7, 12, 13, 25, turbokv::attn::kPrefillRows}) {
        const auto q = random_normal(rows * qs, rng);
        const auto w = random_normal(rows * kBlockTokens, rng);
        const auto acc0 = random_normal(rows * as, rng);
        std::vector<float> s16(rows * kBlockTokens, 7.0f), s32(rows * kBlockTokens, 7.0f);
        std::vector<float> a16 = acc0, a32 = acc0;
        scalar.prefill_dots_f16(q.data(), qs, rows, kh.data(), n, dim, s16.data(), kBlockTokens);
        scalar.prefill_dots_f32(q.data(), qs, rows, kf.data(), n, dim, s32.data(), kBlockTokens);
        scalar.prefill_accumulate_f16(w.data(), kBlockTokens, rows, kh.data(), n, dim, a16.data(), as);
        scalar.prefill_accumulate_f32(w.data(), kBlockTokens, rows, kf.data(), n, dim, a32.data(), as);
        // The reference itself computes the products: against the plain scalar kernels.
        std::vector<float> plain(rows * kBlockTokens, 7.0f), plain_acc = acc0;
        scalar.dots_f32(q.data(), qs, rows, kf.data(), n, dim, plain.data(), kBlockTokens);
        scalar.accumulate_f32(w.data(), kBlockTokens, rows, kf.data(), n, dim, plain_acc.data(), as);
        const std::string shape = " dim " + std::to_string(dim) + " n " + std::to_string(n) + " rows " + std::to_string(rows);
        expect_close(s32, plain, 1e-5, "scalar prefill dots" + shape);
        expect_close(a32, plain_acc, 1e-5, "scalar prefill accumulate" + shape);
        for (const KernelTable* k : tables) {
          std::vector<float> g16(rows * kBlockTokens, 7.0f), g32(rows * kBlockTokens, 7.0f);
          std::vector<float> b16 = acc0, b32 = acc0;
          k->prefill_dots_f16(q.data(), qs, rows, kh.data(), n, dim, g16.data(), kBlockTokens);
          k->prefill_dots_f32(q.data(), qs, rows, kf.data(), n, dim, g32.data(), kBlockTokens);
          k->prefill_accumulate_f16(w.data(), kBlockTokens, rows, kh.data(), n, dim, b16.data(), as);
          k->prefill_accumulate_f32(w.data(), kBlockTokens, rows, kf.data(), n, dim, b32.data(), as);
          const std::string what = std::string(k->name) + shape;
          const bool blocked = k->prefill_dots_f16 != k->dots_f16 && dim % 16 == 0 && dim <= 256;
          // Scores past n are not the kernels' to write.
          for (int r = 0; r < rows; ++r) {
            for (size_t t = n; t < static_cast<size_t>(kBlockTokens); ++t) {
              ASSERT_EQ(g16[r * kBlockTokens + t], 7.0f) << what << " wrote past n";
              ASSERT_EQ(g32[r * kBlockTokens + t], 7.0f) << what << " wrote past n";
            }
          }
          if (blocked) {
            ASSERT_EQ(0, std::memcmp(g16.data(), s16.data(), g16.size() * sizeof(float))) << what << " dots f16";
            ASSERT_EQ(0, std::memcmp(g32.data(), s32.data(), g32.size() * sizeof(float))) << what << " dots f32";
            ASSERT_EQ(0, std::memcmp(b16.data(), a16.data(), b16.size() * sizeof(float))) << what << " accumulate f16";
            ASSERT_EQ(0, std::memcmp(b32.data(), a32.data(), b32.size() * sizeof(float))) << what << " accumulate f32";
          } else {
            expect_close(g16, s16, 1e-4, what + " dots f16");
            expect_close(g32, s32, 1e-4, what + " dots f32");
            expect_close(b16, a16, 1e-4, what + " accumulate f16");
            expect_close(b32, a32, 1e-4, what + " accumulate f32");
          }
        }
      }
    }
  }
}

// group_decode: every width 1-8, odd group sizes, groups at odd offsets in tight records; each
// table's layout is coordinate order except chunk_order4 for 4-bit groups.
TEST(AttentionKernels, GroupDecodeMatchesScalar) {
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(13);
  for (int bits = 1; bits <= 8; ++bits) {
    const auto table = random_normal(1u << bits, rng);
    for (int dims : {5, 13, 32, 64, 67, 128}) {
      for (size_t offset : {size_t{0}, size_t{3}}) {
        CodeGroup g;
        g.bits = bits;
        g.dims = dims;
        g.offset = offset;
        g.table = table.data();
        const size_t code_size = offset + (static_cast<size_t>(dims) * bits + 7) / 8;
        turbokv::attn::finish_code_group(g, code_size);
        const size_t n = 37, ld = g.padded_dims() + 8;
        std::vector<uint8_t> records(n * code_size);
        for (auto& b : records) b = static_cast<uint8_t>(rng());
        std::vector<float> want(n * ld, 9.0f);
        scalar.group_decode(records.data(), code_size, n, g, want.data(), ld);
        for (size_t t = 0; t < n; ++t) {
          for (int j = dims; j < g.padded_dims(); ++j) ASSERT_EQ(want[t * ld + j], 0.0f);
        }
        std::vector<const KernelTable*> all = simd_tables();
        for (const KernelTable* k : all) {
          std::vector<float> got(n * ld, 9.0f);
          k->group_decode(records.data(), code_size, n, g, got.data(), ld);
          const uint8_t* order = bits == 4 ? k->chunk_order4 : nullptr;
          for (size_t t = 0; t < n; ++t) {
            for (int p = 0; p < g.padded_dims(); ++p) {
              const int j = order != nullptr ? p / 8 * 8 + order[p % 8] : p;
              ASSERT_TRUE(std::isfinite(got[t * ld + p])) << k->name << " bits " << bits << " dims " << dims;
              if (j < dims) {
                ASSERT_EQ(got[t * ld + p], want[t * ld + j]) << k->name << " bits " << bits << " dims " << dims << " t " << t;
              }
            }
            for (size_t p = g.padded_dims(); p < ld; ++p) ASSERT_EQ(got[t * ld + p], 9.0f) << k->name << " wrote past the group";
          }
        }
      }
    }
  }
}

TEST(AttentionKernels, SoftmaxUpdateMatchesScalar) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(11);
  const int rows = 5;
  const size_t width = 19;
  for (float softcap : {0.0f, 5.0f}) {
    for (size_t n : {size_t{1}, size_t{9}, size_t{kBlockTokens}}) {
      auto scores = random_normal(rows * kBlockTokens, rng);
      for (auto& s : scores) s *= 8.0f;
      const size_t visible[rows] = {n, 0, n / 2, 1, n + 3};
      // A sliding window's start: none, inside the visible part, all of it, past it.
      const size_t hidden[rows] = {n / 3, 0, n / 2, 0, n > 9 ? size_t{9} : size_t{0}};
      for (const size_t* hide : {static_cast<const size_t*>(nullptr), hidden}) {
        std::vector<float> m0 = {-INFINITY, 0.5f, 2.0f, -1.0f, 30.0f}, l0 = {0, 1, 2, 3, 4};
        const auto acc0 = random_normal(rows * width, rng);
        std::vector<float> s_want = scores, m_want = m0, l_want = l0, acc_want = acc0;
        scalar.softmax_update(s_want.data(), kBlockTokens, rows, n, visible, hide, 0.7f, softcap, m_want.data(),
                              l_want.data(), acc_want.data(), width, width);
        if (hide != nullptr) {
          // The scalar kernel itself: hidden tokens get weight 0 and do not move the max.
          for (int r = 0; r < rows; ++r) {
            for (size_t t = 0; t < std::min(hide[r], n); ++t) EXPECT_EQ(s_want[r * kBlockTokens + t], 0.0f) << r;
          }
          // Row 0 starts from m = -inf: its new max is that of its seen tokens alone.
          float seen_max = -INFINITY;
          for (size_t t = hide[0]; t < n; ++t) {
            const float x = scores[t] * 0.7f;
            seen_max = std::max(seen_max, softcap > 0 ? softcap * std::tanh(x / softcap) : x);
          }
          EXPECT_NEAR(m_want[0], seen_max, 1e-5 * (1 + std::fabs(seen_max)));
          EXPECT_EQ(m_want[2], m0[2]) << "a row whose window starts past its visible tokens is left alone";
          EXPECT_EQ(l_want[2], l0[2]);
        }
        for (const KernelTable* k : tables) {
          std::vector<float> s = scores, m = m0, l = l0, acc = acc0;
          k->softmax_update(s.data(), kBlockTokens, rows, n, visible, hide, 0.7f, softcap, m.data(), l.data(),
                            acc.data(), width, width);
          const std::string what = std::string(k->name) + " softcap " + std::to_string(softcap) + " n " +
                                   std::to_string(n) + (hide ? " windowed" : "");
          for (int r = 0; r < rows; ++r) {
            EXPECT_NEAR(m[r], m_want[r], 1e-5 * (1 + std::fabs(m_want[r]))) << what;
            EXPECT_NEAR(l[r], l_want[r], 1e-5 * (1 + l_want[r])) << what;
            for (size_t t = 0; t < n; ++t) {
              EXPECT_NEAR(s[r * kBlockTokens + t], s_want[r * kBlockTokens + t], 1e-6) << what << " row " << r;
            }
          }
          expect_close(acc, acc_want, 1e-6, what + " acc");
        }
      }
    }
  }
}

}  // namespace

TEST(AttentionKernels, LoadNormsMatchScalar) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(11);
  for (const bool fp32 : {false, true}) {
    for (size_t stride : {size_t{4}, size_t{35}, size_t{66}}) {
      for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{kBlockTokens}}) {
        // Records at `stride` bytes, the norm at byte 1 (unaligned), everything else noise; the
        // fp16 norms include a subnormal and zero besides ordinary magnitudes.
        std::vector<uint8_t> records(n * stride + 8);
        for (auto& b : records) b = static_cast<uint8_t>(rng());
        const auto values = random_normal(n, rng);
        for (size_t t = 0; t < n; ++t) {
          uint8_t* p = records.data() + t * stride + 1;
          if (fp32) {
            std::memcpy(p, &values[t], sizeof(float));
          } else {
            const uint16_t h = t == 3 ? uint16_t{0x0001} : t == 5 ? uint16_t{0}
                                                                  : turbokv::float_to_half(std::fabs(values[t]) * 40.0f);
            std::memcpy(p, &h, sizeof h);
          }
        }
        std::vector<float> want(n), got(n);
        scalar.load_norms(records.data() + 1, stride, n, fp32, want.data());
        for (const KernelTable* k : tables) {
          std::fill(got.begin(), got.end(), -1.0f);
          k->load_norms(records.data() + 1, stride, n, fp32, got.data());
          for (size_t t = 0; t < n; ++t) {
            ASSERT_EQ(got[t], want[t]) << k->name << (fp32 ? " fp32" : " fp16") << " stride " << stride << " n " << n << " t " << t;
          }
        }
      }
    }
  }
}

// The norm scaling every table applies to compressed keys' dot products: the same fused
// operation, so the same bits, at odd counts and row strides (the tail past the last 8 included),
// with rows of prefill-tile height.
TEST(AttentionKernels, ScaleScoresMatchScalar) {
  const auto tables = simd_tables();
  if (tables.empty()) GTEST_SKIP() << "no SIMD kernel table on this CPU";
  const KernelTable& scalar = turbokv::attn::scalar_kernel_table();
  std::mt19937 rng(13);
  for (size_t n : {size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{kBlockTokens}}) {
    for (int rows : {1, 4, 5, turbokv::attn::kPrefillRows}) {
      const size_t ld = kBlockTokens + 3;
      const auto scores = random_normal(rows * ld, rng, 30.0f);
      auto norm = random_normal(n, rng, 4.0f);
      for (float& x : norm) x = std::fabs(x);
      const auto shift = random_normal(static_cast<size_t>(rows), rng);
      std::vector<float> want = scores;
      scalar.scale_scores(want.data(), ld, rows, n, norm.data(), shift.data());
      for (int r = 0; r < rows; ++r) {
        for (size_t t = 0; t < ld; ++t) {
          const float expected = t < n ? std::fma(scores[r * ld + t], norm[t], shift[r]) : scores[r * ld + t];
          ASSERT_TRUE(turbokv::test::same_bits(want[r * ld + t], expected)) << "scalar row " << r << " t " << t;
        }
      }
      for (const KernelTable* k : tables) {
        std::vector<float> got = scores;
        k->scale_scores(got.data(), ld, rows, n, norm.data(), shift.data());
        ASSERT_TRUE(turbokv::test::same_bits(got, want)) << k->name << " n " << n << " rows " << rows;
      }
    }
  }
}
