// Reductions (kernels.h, kReduce*): included by reduce_*.comp after
// `#define CW_T`, `CW_BUF`, and the identities CW_MAX_ID / CW_MIN_ID.
// Parameter block: [0] kept rank, [1] reduced rank, [2] reduced count,
// [4+k] kept dims, [12+k] kept strides, [20+k] reduced dims,
// [28+k] reduced strides. x = result elements, y = the reduced items one
// invocation takes (a chunk): item i reduces chunk i / x of result element
// i % x, so n = x * chunks and the result holds [chunks, x] partials.
// Chunks bound the work of one invocation (lavapipe stops a shader
// invocation's loops after 65535 iterations in all).
layout(local_size_x = CW_LOCAL) in;

void main() {
  Params p = Params(pc.params);
  CW_BUF a = CW_BUF(pc.a), o = CW_BUF(pc.dst);
  const int kept = p.v[0], red = p.v[1], count = p.v[2];
  CW_FOR_EACH(i) {
    const int q = int(i / pc.x);
    int rest = int(i % pc.x), base = 0;
    for (int k = kept - 1; k >= 0; --k) {
      const int dim = p.v[4 + k];
      base += (rest % dim) * p.v[12 + k];
      rest /= dim;
    }
    CW_T acc = pc.op == 0 ? CW_T(0) : pc.op == 1 ? CW_MAX_ID : CW_MIN_ID;
    const int end = min(count, (q + 1) * int(pc.y));
    for (int r = q * int(pc.y); r < end; ++r) {
      int rr = r, off = base;
      for (int k = red - 1; k >= 0; --k) {
        const int dim = p.v[20 + k];
        off += (rr % dim) * p.v[28 + k];
        rr /= dim;
      }
      const CW_T x = a.v[off];
      acc = pc.op == 0 ? acc + x : pc.op == 1 ? max(acc, x) : min(acc, x);
    }
    o.v[i] = acc;
  }
}
