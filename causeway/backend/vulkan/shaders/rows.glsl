// The body of the row kernels (kernels.h, kRowsF32), shared by two ways of
// spreading a row over invocations. The including shader defines
//   ROWS_FOR_EACH(row)   the loop over the rows this invocation works on,
//   COL_FIRST, COL_STRIDE the columns of a row it visits,
//   float Combine(float v, bool is_max)
//                        the sum (or maximum) of `v` over the invocations
//                        that share the row, returned to each of them.
// op: 0 softmax(a); 1 softmax_grad(y = a, g = b); 2 normalize(a, eps = b[0]);
// 3 normalize_grad(x = a, eps = b[0], g = c); the cpu kind's formulas
// (kernels_fused.cc).
void main() {
  F32 a = F32(pc.a), b = F32(pc.b), c = F32(pc.c), o = F32(pc.dst);
  const int cols = int(pc.x);
  const float inv_n = 1.0 / float(cols);
  ROWS_FOR_EACH(row) {
    const int base = int(row) * cols;
    if (pc.op == 0) {
      float m = uintBitsToFloat(0xff800000u);
      for (int j = COL_FIRST; j < cols; j += COL_STRIDE) m = max(m, a.v[base + j]);
      m = Combine(m, true);
      float s = 0.0;
      for (int j = COL_FIRST; j < cols; j += COL_STRIDE) {
        const float e = exp(a.v[base + j] - m);
        o.v[base + j] = e;
        s += e;
      }
      const float inv = 1.0 / Combine(s, false);
      for (int j = COL_FIRST; j < cols; j += COL_STRIDE) o.v[base + j] *= inv;
    } else if (pc.op == 1) {
      float s = 0.0;
      for (int j = COL_FIRST; j < cols; j += COL_STRIDE) s += b.v[base + j] * a.v[base + j];
      s = Combine(s, false);
      for (int j = COL_FIRST; j < cols; j += COL_STRIDE) {
        o.v[base + j] = a.v[base + j] * (b.v[base + j] - s);
      }
    } else {
      const float eps = b.v[0];
      float sum = 0.0;
      for (int j = COL_FIRST; j < cols; j += COL_STRIDE) sum += a.v[base + j];
      const float mean = Combine(sum, false) * inv_n;
      float var = 0.0;
      for (int j = COL_FIRST; j < cols; j += COL_STRIDE) {
        const float d = a.v[base + j] - mean;
        var += d * d;
      }
      const float inv_sigma = 1.0 / sqrt(Combine(var, false) * inv_n + eps);
      if (pc.op == 2) {
        for (int j = COL_FIRST; j < cols; j += COL_STRIDE) {
          o.v[base + j] = (a.v[base + j] - mean) * inv_sigma;
        }
      } else {
        // dx = (g - mean(g) - x_hat mean(g x_hat)) / sigma
        float sg = 0.0, sgx = 0.0;
        for (int j = COL_FIRST; j < cols; j += COL_STRIDE) {
          const float g = c.v[base + j];
          sg += g;
          sgx += g * (a.v[base + j] - mean) * inv_sigma;
        }
        const float mean_g = Combine(sg, false) * inv_n;
        const float mean_gx = Combine(sgx, false) * inv_n;
        for (int j = COL_FIRST; j < cols; j += COL_STRIDE) {
          const float xh = (a.v[base + j] - mean) * inv_sigma;
          o.v[base + j] = inv_sigma * (c.v[base + j] - mean_g - xh * mean_gx);
        }
      }
    }
  }
}
