// Strided copy (kernels.h, kCopy*): included by copy_*.comp after
// `#define CW_BUF` (the element buffer type). Parameter block:
// [0] rank, [1] src_base, [2] dst_base, [3] mode, [4+k] dims,
// [12+k] src strides, [20+k] dst strides, [28+k] pad low, [36+k] source dims.
layout(local_size_x = CW_LOCAL) in;

void main() {
  Params p = Params(pc.params);
  CW_BUF src = CW_BUF(pc.a), fill = CW_BUF(pc.b), dst = CW_BUF(pc.dst);
  const int rank = p.v[0];
  const bool pad = p.v[3] == 1;
  CW_FOR_EACH(i) {
    int rest = int(i);
    int s = p.v[1], d = p.v[2];
    bool inside = true;
    // Row-major coordinates, innermost first.
    for (int k = rank - 1; k >= 0; --k) {
      const int dim = p.v[4 + k];
      const int c = rest % dim;
      rest /= dim;
      d += c * p.v[20 + k];
      if (pad) {
        const int sc = c - p.v[28 + k];
        inside = inside && sc >= 0 && sc < p.v[36 + k];
        s += sc * p.v[12 + k];
      } else {
        s += c * p.v[12 + k];
      }
    }
    dst.v[d] = inside ? src.v[s] : fill.v[0];
  }
}
