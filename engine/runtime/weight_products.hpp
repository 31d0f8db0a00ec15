// How a step's weight matrices multiply its rows: the one choice in which Forward's and
// BatchForward's products differ, shared by the decoder and its expert step (moe.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/tensor/tensor_types.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

//  - row_by_row: matmul_rowwise, each row bit for bit what matvec gives it alone, whatever
//    the other rows are (batch invariance, the server's continuous batching);
//  - chunk: matvec for one row, matmul for more (a chunk multiplied in float: faster prefill,
//    other bits in the last places; a one-token step is matvec's, so row_by_row's).
enum class WeightProducts { row_by_row, chunk };

// out[rows][w.rows] = in[rows][w.cols] w^T, the way `products` says.
inline void multiply_rows(WeightProducts products, const WeightMatrix& w, const float* in, size_t rows, float* out,
                          turbokv::ThreadPool& pool) {
  if (products == WeightProducts::row_by_row) {
    matmul_rowwise(w, in, static_cast<int64_t>(rows), out, pool);
  } else if (rows == 1) {
    matvec(w, in, out, pool);
  } else {
    matmul(w, in, static_cast<int64_t>(rows), out, pool);
  }
}

}  // namespace turbokv::engine
