// CPU LSTM cell (kernels/lstm.h): one step's gates, state and their gradients. Rows of the
// low-precision tensors are widened into C buffers (F16C for f16) and rounded once on store; the
// nonlinearities are the vectorised twins of the shared functors (kernels/cpu/vector_math.h) for
// f32 and the functors themselves for f64. Rows of the batch are chunks for the thread pool.
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/pointwise.h"
#include "kernels/lstm.h"

namespace mg::kernels::cpu {

namespace {

constexpr std::int64_t kLstmGrain = 16 * 1024;  // elements of the [B, 4H] gates per chunk of the thread pool

// Rows of the batch per chunk of the thread pool: a function of the shape alone (parallel.h).
Chunks row_chunks(std::int64_t B, std::int64_t H) {
  return chunks_of(B, std::max<std::int64_t>(1, kLstmGrain / (4 * H)));
}

template <class C>
void cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
          Tensor& c_out, Tensor& hc, Tensor& h_x) {
  const std::int64_t B = c_prev.size(0), H = c_prev.size(1);
  std::vector<C> bias_buffer(static_cast<std::size_t>(4 * H));
  const C* b = values_at(bias, 0, 4 * H, bias_buffer.data());
  C* a = acts.data<C>();
  C* c_new = c_out.data<C>();
  const C* cp = c_prev.data<C>();
  // Rows are independent: the pool takes chunks of them.
  for_each_chunk(row_chunks(B, H), [&](std::int64_t, std::int64_t row_begin, std::int64_t row_end) {
    std::vector<C> gx_buffer(static_cast<std::size_t>(4 * H)), rec_buffer(gx_buffer.size()),
        hc_row(static_cast<std::size_t>(2 * H)), tanh_c(static_cast<std::size_t>(H)), stored(hc_row.size());
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      const C* gx = values_at(gates_x, r * 4 * H, 4 * H, gx_buffer.data());
      const C* rec = values_at(recurrent, r * 4 * H, 4 * H, rec_buffer.data());
      C* act = a + r * 4 * H;  // gates i, f, g, o: sigmoid, sigmoid, tanh, sigmoid
      for (std::int64_t j = 0; j < 4 * H; ++j) act[j] = gx[j] + rec[j] + b[j];
      vector_math::sigmoid(act, act, 2 * H);
      vector_math::tanh(act + 2 * H, act + 2 * H, H);
      vector_math::sigmoid(act + 3 * H, act + 3 * H, H);
      C* c_row = hc_row.data() + H;
      for (std::int64_t j = 0; j < H; ++j) c_row[j] = act[H + j] * cp[r * H + j] + act[j] * act[2 * H + j];
      vector_math::tanh(c_row, tanh_c.data(), H);
      for (std::int64_t j = 0; j < H; ++j)
        hc_row[static_cast<std::size_t>(j)] = act[3 * H + j] * tanh_c[static_cast<std::size_t>(j)];
      convert(hc_row.data(), dtype_of<C>(), bytes_at(hc, r * 2 * H), hc.dtype(), 2 * H);
      convert(hc_row.data(), dtype_of<C>(), bytes_at(h_x, r * H), h_x.dtype(), H);
      // The state the next step reads is c as stored: rounded to f16 in a pure f16 model.
      const C* c_stored = values_at(hc, r * 2 * H, 2 * H, stored.data()) + H;
      for (std::int64_t j = 0; j < H; ++j) c_new[r * H + j] = c_stored[j];
    }
  });
}

template <class C>
void cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                   const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  const std::int64_t B = c.size(0), H = c.size(1);
  const C* a = acts.data<C>();
  const C* cp = c_prev.data<C>();
  const C* cc = c.data<C>();
  const C* dh_rec = dh_recurrent.data<C>();
  C* dcc = dc_carry.data<C>();
  C* db = dbias_sum.data<C>();
  // Rows are independent but for the bias gradient, a sum over rows: each chunk of rows sums its
  // own, and the chunks' sums are added to db in chunk order (the chunks are cut by B alone).
  const Chunks chunks = row_chunks(B, H);
  std::vector<C> partial_db(static_cast<std::size_t>(chunks.count * 4 * H), C(0));
  for_each_chunk(chunks, [&](std::int64_t chunk, std::int64_t row_begin, std::int64_t row_end) {
    std::vector<C> dhc_buffer(static_cast<std::size_t>(2 * H)), dgates_row(static_cast<std::size_t>(4 * H)),
        tanh_c(static_cast<std::size_t>(H));
    C* chunk_db = partial_db.data() + chunk * 4 * H;
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      const C* d_out = values_at(dhc, r * 2 * H, 2 * H, dhc_buffer.data());
      const C* act = a + r * 4 * H;
      C* dg = dgates_row.data();
      vector_math::tanh(cc + r * H, tanh_c.data(), H);
      for (std::int64_t j = 0; j < H; ++j) {
        const std::int64_t k = r * H + j;
        const C i = act[j], f = act[H + j], g = act[2 * H + j], o = act[3 * H + j];
        const C tc = tanh_c[static_cast<std::size_t>(j)];
        const C dh = dh_rec[k] + d_out[j];
        const C dc = dcc[k] + d_out[H + j] + functors::Tanh{}.grad(dh * o, tc);
        dg[j] = functors::Sigmoid{}.grad(dc * g, i);
        dg[H + j] = functors::Sigmoid{}.grad(dc * cp[k], f);
        dg[2 * H + j] = functors::Tanh{}.grad(dc * i, g);
        dg[3 * H + j] = functors::Sigmoid{}.grad(dh * tc, o);
        dcc[k] = dc * f;
      }
      for (std::int64_t j = 0; j < 4 * H; ++j) chunk_db[j] += dg[j];
      convert(dg, dtype_of<C>(), bytes_at(dgates, r * 4 * H), dgates.dtype(), 4 * H);
    }
  });
  for (std::int64_t chunk = 0; chunk < chunks.count; ++chunk)
    for (std::int64_t j = 0; j < 4 * H; ++j) db[j] += partial_db[static_cast<std::size_t>(chunk * 4 * H + j)];
}

}  // namespace

void lstm_cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
               Tensor& c_out, Tensor& hc, Tensor& h_x) {
  if (acts.dtype() == DType::F64)
    cell<double>(gates_x, recurrent, bias, c_prev, acts, c_out, hc, h_x);
  else
    cell<float>(gates_x, recurrent, bias, c_prev, acts, c_out, hc, h_x);
}

void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                        const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  if (acts.dtype() == DType::F64)
    cell_backward<double>(acts, c_prev, c, dhc, dh_recurrent, dc_carry, dgates, dbias_sum);
  else
    cell_backward<float>(acts, c_prev, c, dhc, dh_recurrent, dc_carry, dgates, dbias_sum);
}

}  // namespace mg::kernels::cpu
