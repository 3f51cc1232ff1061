#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// One 64x64 tile of out[b] = a[b] x b[b] per workgroup: workgroup (x, y, z)
// = (column tile, row tile, batch). 16x16 invocations, each accumulating a
// 4x4 block of the tile in registers (rows ly + 16 i, columns lx + 16 j, so
// neighbouring invocations touch neighbouring addresses). The operands pass
// through shared memory 16 values of K at a time: two barriers per 64x64x16
// products, which keeps barrier-heavy implementations (lavapipe runs a
// workgroup's invocations as coroutines on one CPU thread) from spending
// their time switching. Parameter block: [0] M, [1] N, [2] K, [3] batch,
// [4..6] a's batch/m/k strides, [7..9] b's batch/k/n strides.
layout(local_size_x = 16, local_size_y = 16) in;

#define TILE 64
#define BK 16

// ta[k][m], one value of padding per row so that the transposing stores
// (16 values of k of one row of a per half-subgroup) do not all fall in
// one bank.
shared float ta[BK][TILE + 1];
shared float tb[BK][TILE];  // tb[k][n]

void main() {
  Params p = Params(pc.params);
  F32 a = F32(pc.a), b = F32(pc.b), o = F32(pc.dst);
  const int M = p.v[0], N = p.v[1], K = p.v[2];
  const int as_m = p.v[5], as_k = p.v[6], bs_k = p.v[8], bs_n = p.v[9];
  const int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
  const int t = ly * 16 + lx;
  const int row0 = int(gl_WorkGroupID.y) * TILE, col0 = int(gl_WorkGroupID.x) * TILE;
  const int batch = int(gl_WorkGroupID.z);
  const int abase = batch * p.v[4], bbase = batch * p.v[7];
  float acc[4][4];
  [[unroll]] for (int i = 0; i < 4; ++i) {
    [[unroll]] for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;
  }
  for (int k0 = 0; k0 < K; k0 += BK) {
    // 1024 values of each operand's tile, four per invocation.
    [[unroll]] for (int e = 0; e < 4; ++e) {
      const int idx = t + 256 * e;
      // a: m = idx / BK, k = idx % BK (k fastest: rows of a are contiguous
      // when a is row-major).
      const int am = idx / BK, ak = idx % BK;
      const int gm = row0 + am, gk = k0 + ak;
      ta[ak][am] = (gm < M && gk < K) ? a.v[abase + gm * as_m + gk * as_k] : 0.0;
      // b: k = idx / TILE, n = idx % TILE (n fastest).
      const int bk = idx / TILE, bn = idx % TILE;
      const int gk2 = k0 + bk, gn = col0 + bn;
      tb[bk][bn] = (gk2 < K && gn < N) ? b.v[bbase + gk2 * bs_k + gn * bs_n] : 0.0;
    }
    barrier();
    [[unroll]] for (int k = 0; k < BK; ++k) {
      float av[4], bv[4];
      [[unroll]] for (int i = 0; i < 4; ++i) av[i] = ta[k][ly + 16 * i];
      [[unroll]] for (int j = 0; j < 4; ++j) bv[j] = tb[k][lx + 16 * j];
      [[unroll]] for (int i = 0; i < 4; ++i) {
        [[unroll]] for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
      }
    }
    barrier();
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
