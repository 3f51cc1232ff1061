// Scatter-add (kernels.h, kScatterAdd*): included after `#define CW_T` and
// `CW_BUF`. One invocation per result element sums, in index order, the
// updates that land on it: deterministic, and no atomics. x = result
// elements, y = indices per chunk: item i sums chunk i / x of the indices
// for result element i % x, starting from a's element when a is given (one
// chunk) and from zero otherwise (partials, summed by a reduction after).
layout(local_size_x = CW_LOCAL) in;

void main() {
  Params p = Params(pc.params);
  CW_BUF a = CW_BUF(pc.a), u = CW_BUF(pc.c), o = CW_BUF(pc.dst);
  I32 idx = I32(pc.b);
  const int dim = p.v[1], inner = p.v[2], J = p.v[3];
  CW_FOR_EACH(i) {
    const int e = int(i % pc.x), q = int(i / pc.x);
    const int r = e % inner, t = (e / inner) % dim, outer = e / (inner * dim);
    CW_T acc = pc.a != 0 ? a.v[e] : CW_T(0);
    const int end = min(J, (q + 1) * int(pc.y));
    for (int j = q * int(pc.y); j < end; ++j) {
      if (idx.v[j] == t) acc += u.v[(outer * J + j) * inner + r];
    }
    o.v[i] = acc;
  }
}
