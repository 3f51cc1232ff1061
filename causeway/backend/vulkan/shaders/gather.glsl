// Gather (kernels.h, kGather*): included after `#define CW_BUF`. Parameter
// block: [0] outer, [1] dim, [2] inner, [3] J (indices).
layout(local_size_x = CW_LOCAL) in;

void main() {
  Params p = Params(pc.params);
  CW_BUF a = CW_BUF(pc.a), o = CW_BUF(pc.dst);
  I32 idx = I32(pc.b);
  const int dim = p.v[1], inner = p.v[2], J = p.v[3];
  CW_FOR_EACH(i) {
    const int r = int(i) % inner, j = (int(i) / inner) % J, outer = int(i) / (inner * J);
    const int t = clamp(idx.v[j], 0, dim - 1);
    o.v[i] = a.v[(outer * dim + t) * inner + r];
  }
}
