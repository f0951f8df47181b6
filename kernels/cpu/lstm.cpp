// CPU LSTM cell (kernels/lstm.h): one step's gates, state and their gradients. Rows of the
// low-precision tensors are widened into C buffers (F16C for f16) and rounded once on store.
#include <cmath>
#include <vector>

#include "kernels/lstm.h"

namespace mg::kernels::cpu {

namespace {

// n values of t starting at element `start`, as C: t's own memory when it holds C, else `buffer`.
template <class C>
const C* read(const Tensor& t, std::int64_t start, std::int64_t n, std::vector<C>& buffer) {
  const char* at = static_cast<const char*>(t.data_ptr()) + static_cast<std::size_t>(start) * dtype_size(t.dtype());
  if (t.dtype() == dtype_of<C>()) return reinterpret_cast<const C*>(at);
  buffer.resize(static_cast<std::size_t>(n));
  convert(at, t.dtype(), buffer.data(), dtype_of<C>(), n);
  return buffer.data();
}

template <class C>
void write(const C* values, std::int64_t n, Tensor& t, std::int64_t start) {
  char* at = static_cast<char*>(t.data_ptr()) + static_cast<std::size_t>(start) * dtype_size(t.dtype());
  convert(values, dtype_of<C>(), at, t.dtype(), n);
}

template <class C>
C sigmoid(C x) { return C(1) / (C(1) + std::exp(-x)); }

template <class C>
void cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
          Tensor& c_out, Tensor& hc, Tensor& h_x) {
  const std::int64_t B = c_prev.size(0), H = c_prev.size(1);
  std::vector<C> gx_buffer, rec_buffer, bias_buffer, hc_row(static_cast<std::size_t>(2 * H)),
      stored(static_cast<std::size_t>(2 * H));
  const C* b = read(bias, 0, 4 * H, bias_buffer);
  C* a = acts.data<C>();
  C* c_new = c_out.data<C>();
  const C* cp = c_prev.data<C>();
  for (std::int64_t r = 0; r < B; ++r) {
    const C* gx = read(gates_x, r * 4 * H, 4 * H, gx_buffer);
    const C* rec = read(recurrent, r * 4 * H, 4 * H, rec_buffer);
    C* act = a + r * 4 * H;
    for (std::int64_t j = 0; j < 4 * H; ++j) {
      const C z = gx[j] + rec[j] + b[j];
      act[j] = j >= 2 * H && j < 3 * H ? std::tanh(z) : sigmoid(z);
    }
    for (std::int64_t j = 0; j < H; ++j) {
      const C c = act[H + j] * cp[r * H + j] + act[j] * act[2 * H + j];
      hc_row[static_cast<std::size_t>(j)] = act[3 * H + j] * std::tanh(c);
      hc_row[static_cast<std::size_t>(H + j)] = c;
    }
    write(hc_row.data(), 2 * H, hc, r * 2 * H);
    write(hc_row.data(), H, h_x, r * H);
    // The state the next step reads is c as stored: rounded to f16 in a pure f16 model.
    const C* c_stored = read(hc, r * 2 * H, 2 * H, stored) + H;
    for (std::int64_t j = 0; j < H; ++j) c_new[r * H + j] = c_stored[j];
  }
}

template <class C>
void cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                   const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  const std::int64_t B = c.size(0), H = c.size(1);
  std::vector<C> dhc_buffer, dgates_row(static_cast<std::size_t>(4 * H));
  const C* a = acts.data<C>();
  const C* cp = c_prev.data<C>();
  const C* cc = c.data<C>();
  const C* dh_rec = dh_recurrent.data<C>();
  C* dcc = dc_carry.data<C>();
  C* db = dbias_sum.data<C>();
  for (std::int64_t r = 0; r < B; ++r) {
    const C* d_out = read(dhc, r * 2 * H, 2 * H, dhc_buffer);
    const C* act = a + r * 4 * H;
    C* dg = dgates_row.data();
    for (std::int64_t j = 0; j < H; ++j) {
      const std::int64_t k = r * H + j;
      const C i = act[j], f = act[H + j], g = act[2 * H + j], o = act[3 * H + j];
      const C tc = std::tanh(cc[k]);
      const C dh = dh_rec[k] + d_out[j];
      const C dc = dcc[k] + d_out[H + j] + dh * o * (C(1) - tc * tc);
      dg[j] = dc * g * i * (C(1) - i);
      dg[H + j] = dc * cp[k] * f * (C(1) - f);
      dg[2 * H + j] = dc * i * (C(1) - g * g);
      dg[3 * H + j] = dh * tc * o * (C(1) - o);
      dcc[k] = dc * f;
    }
    for (std::int64_t j = 0; j < 4 * H; ++j) db[j] += dg[j];
    write(dg, 4 * H, dgates, r * 4 * H);
  }
}

}  // namespace

void lstm_cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
               Tensor& c_out, Tensor& hc, Tensor& h_x) {
  if (acts.dtype() == DType::F64) cell<double>(gates_x, recurrent, bias, c_prev, acts, c_out, hc, h_x);
  else cell<float>(gates_x, recurrent, bias, c_prev, acts, c_out, hc, h_x);
}

void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                        const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  if (acts.dtype() == DType::F64) cell_backward<double>(acts, c_prev, c, dhc, dh_recurrent, dc_carry, dgates, dbias_sum);
  else cell_backward<float>(acts, c_prev, c, dhc, dh_recurrent, dc_carry, dgates, dbias_sum);
}

}  // namespace mg::kernels::cpu
