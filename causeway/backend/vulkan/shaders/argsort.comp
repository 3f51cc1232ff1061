#version 460
// ir::OpKind::kArgSort (kernels.h, kArgSort): each invocation places one
// element: its rank in its line (how many elements go before it: smaller
// ones, or equal ones of lower index; descending reverses the order; NaN is
// greater than every number) is where its index goes. pc.x: the line's
// length (dim), pc.y: inner (the stride between a line's elements);
// op bit 0: descending, bit 1: i32 (else f32).
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// a strictly before b in ascending order.
bool Less(float a, float b) {
  if (isnan(a)) return false;
  if (isnan(b)) return true;
  return a < b;
}


void main() {
  const int dim = int(pc.x), inner = int(pc.y);
  const bool descending = (pc.op & 1u) != 0u, ints = (pc.op & 2u) != 0u;
  F32 af = F32(pc.a);
  I32 ai = I32(pc.a), o = I32(pc.dst);
  CW_FOR_EACH(i) {
    const int r = int(i) % inner, k = (int(i) / inner) % dim, outer = int(i) / (inner * dim);
    const int base = outer * dim * inner + r;
    int rank = 0;
    if (ints) {
      const int v = ai.v[base + k * inner];
      for (int j = 0; j < dim; ++j) {
        const int u = ai.v[base + j * inner];
        const bool before = descending ? u > v : u < v;
        rank += (before || (u == v && j < k)) ? 1 : 0;
      }
    } else {
      const float v = af.v[base + k * inner];
      const bool vnan = isnan(v);
      for (int j = 0; j < dim; ++j) {
        const float u = af.v[base + j * inner];
        const bool equal = (isnan(u) && vnan) || u == v;
        const bool before = descending ? Less(v, u) : Less(u, v);
        rank += (before || (equal && j < k)) ? 1 : 0;
      }
    }
    o.v[base + rank * inner] = k;
  }
}
