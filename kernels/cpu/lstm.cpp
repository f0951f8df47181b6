// CPU LSTM cell (kernels/lstm.h): one step's gates, state and their gradients. Rows of the
// low-precision tensors are widened into C buffers (F16C for f16) and rounded once on store; the
// nonlinearities and their derivatives are the shared functors of kernels/functors.h.
#include <vector>

#include "kernels/cpu/compute_type.h"
#include "kernels/functors.h"
#include "kernels/lstm.h"

namespace mg::kernels::cpu {

namespace {

template <class C>
void cell(const Tensor& gates_x, const Tensor& recurrent, const Tensor& bias, const Tensor& c_prev, Tensor& acts,
          Tensor& c_out, Tensor& hc, Tensor& h_x) {
  const std::int64_t B = c_prev.size(0), H = c_prev.size(1);
  std::vector<C> gx_buffer(static_cast<std::size_t>(4 * H)), rec_buffer(gx_buffer.size()), bias_buffer(gx_buffer.size()),
      hc_row(static_cast<std::size_t>(2 * H)), stored(hc_row.size());
  const C* b = values_at(bias, 0, 4 * H, bias_buffer.data());
  C* a = acts.data<C>();
  C* c_new = c_out.data<C>();
  const C* cp = c_prev.data<C>();
  for (std::int64_t r = 0; r < B; ++r) {
    const C* gx = values_at(gates_x, r * 4 * H, 4 * H, gx_buffer.data());
    const C* rec = values_at(recurrent, r * 4 * H, 4 * H, rec_buffer.data());
    C* act = a + r * 4 * H;
    for (std::int64_t j = 0; j < 4 * H; ++j) {
      const C z = gx[j] + rec[j] + b[j];
      act[j] = j >= 2 * H && j < 3 * H ? functors::Tanh{}(z) : functors::Sigmoid{}(z);
    }
    for (std::int64_t j = 0; j < H; ++j) {
      const C c = act[H + j] * cp[r * H + j] + act[j] * act[2 * H + j];
      hc_row[static_cast<std::size_t>(j)] = act[3 * H + j] * functors::Tanh{}(c);
      hc_row[static_cast<std::size_t>(H + j)] = c;
    }
    convert(hc_row.data(), dtype_of<C>(), bytes_at(hc, r * 2 * H), hc.dtype(), 2 * H);
    convert(hc_row.data(), dtype_of<C>(), bytes_at(h_x, r * H), h_x.dtype(), H);
    // The state the next step reads is c as stored: rounded to f16 in a pure f16 model.
    const C* c_stored = values_at(hc, r * 2 * H, 2 * H, stored.data()) + H;
    for (std::int64_t j = 0; j < H; ++j) c_new[r * H + j] = c_stored[j];
  }
}

template <class C>
void cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& c, const Tensor& dhc,
                   const Tensor& dh_recurrent, Tensor& dc_carry, Tensor& dgates, Tensor& dbias_sum) {
  const std::int64_t B = c.size(0), H = c.size(1);
  std::vector<C> dhc_buffer(static_cast<std::size_t>(2 * H)), dgates_row(static_cast<std::size_t>(4 * H));
  const C* a = acts.data<C>();
  const C* cp = c_prev.data<C>();
  const C* cc = c.data<C>();
  const C* dh_rec = dh_recurrent.data<C>();
  C* dcc = dc_carry.data<C>();
  C* db = dbias_sum.data<C>();
  for (std::int64_t r = 0; r < B; ++r) {
    const C* d_out = values_at(dhc, r * 2 * H, 2 * H, dhc_buffer.data());
    const C* act = a + r * 4 * H;
    C* dg = dgates_row.data();
    for (std::int64_t j = 0; j < H; ++j) {
      const std::int64_t k = r * H + j;
      const C i = act[j], f = act[H + j], g = act[2 * H + j], o = act[3 * H + j];
      const C tc = functors::Tanh{}(cc[k]);
      const C dh = dh_rec[k] + d_out[j];
      const C dc = dcc[k] + d_out[H + j] + functors::TanhGrad{}(dh * o, tc);
      dg[j] = functors::SigmoidGrad{}(dc * g, i);
      dg[H + j] = functors::SigmoidGrad{}(dc * cp[k], f);
      dg[2 * H + j] = functors::TanhGrad{}(dc * i, g);
      dg[3 * H + j] = functors::SigmoidGrad{}(dh * tc, o);
      dcc[k] = dc * f;
    }
    for (std::int64_t j = 0; j < 4 * H; ++j) db[j] += dg[j];
    convert(dg, dtype_of<C>(), bytes_at(dgates, r * 4 * H), dgates.dtype(), 4 * H);
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
