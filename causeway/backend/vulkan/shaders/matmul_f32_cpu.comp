#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// kMatmulF32's contract and dispatch (a 64x64 tile of the result per
// workgroup, each invocation a 4x4 block of it: rows ly + 16 i, columns
// lx + 16 j) for devices that are CPUs: operands read straight from memory,
// no shared memory and no barriers (kernels.h, ChooseVariant). Rows and
// columns past the edge read the last one and are not stored.
layout(local_size_x = 16, local_size_y = 16) in;

#define TILE 64

void main() {
  Params p = Params(pc.params);
  F32 a = F32(pc.a), b = F32(pc.b), o = F32(pc.dst);
  const int M = p.v[0], N = p.v[1], K = p.v[2];
  const int as_m = p.v[5], as_k = p.v[6], bs_k = p.v[8], bs_n = p.v[9];
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int row0 = int(gl_WorkGroupID.y) * TILE, col0 = int(gl_WorkGroupID.x) * TILE;
  const int batch = int(gl_WorkGroupID.z);
  const int abase = batch * p.v[4], bbase = batch * p.v[7];
  float acc[4][4];
  int ar[4], bc[4];
  [[unroll]] for (int i = 0; i < 4; ++i) {
    const int r = row0 + ly + 16 * i, c = col0 + lx + 16 * i;
    ar[i] = abase + min(r, M - 1) * as_m;
    bc[i] = bbase + min(c, N - 1) * bs_n;
    [[unroll]] for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;
  }
  for (int k = 0; k < K; ++k) {
    float av[4], bv[4];
    [[unroll]] for (int i = 0; i < 4; ++i) av[i] = a.v[ar[i] + k * as_k];
    [[unroll]] for (int j = 0; j < 4; ++j) bv[j] = b.v[bc[j] + k * bs_k];
    [[unroll]] for (int i = 0; i < 4; ++i) {
      [[unroll]] for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
  }
  [[unroll]] for (int i = 0; i < 4; ++i) {
    const int r = row0 + ly + 16 * i;
    if (r >= M) continue;
    [[unroll]] for (int j = 0; j < 4; ++j) {
      const int c = col0 + lx + 16 * j;
      if (c < N) o.v[(batch * M + r) * N + c] = acc[i][j];
    }
  }
}
