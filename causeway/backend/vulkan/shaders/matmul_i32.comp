#version 460
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

// One invocation per result element; parameter block as matmul_f32's.
void main() {
  Params p = Params(pc.params);
  I32 a = I32(pc.a), b = I32(pc.b), o = I32(pc.dst);
  const int M = p.v[0], N = p.v[1], K = p.v[2];
  CW_FOR_EACH(i) {
    const int col = int(i) % N, row = (int(i) / N) % M, batch = int(i) / (N * M);
    int acc = 0;
    for (int k = 0; k < K; ++k) {
      acc += a.v[batch * p.v[4] + row * p.v[5] + k * p.v[6]] *
             b.v[batch * p.v[7] + k * p.v[8] + col * p.v[9]];
    }
    o.v[i] = acc;
  }
}
