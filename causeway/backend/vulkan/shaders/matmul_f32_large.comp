#version 460
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
// kMatmulF32's contract (kernels.h) with a 128x128 tile of the result per
// workgroup, for GPUs and products with many tiles (kernels.h,
// ChooseVariant): workgroup (x, y, z) = (column tile, row tile, batch).
// 256 invocations, each accumulating an 8x8 block in registers: rows
// 4 ty + i and 64 + 4 ty + i, columns 4 tx + j and 64 + 4 tx + j (i, j in
// 0..3), so each step of K reads four vec4s of shared memory for 64
// fused multiply-adds, and the invocations of a subgroup read
// neighbouring vec4s (ty is shared by 16 of them: a broadcast).
//
// K advances 8 at a time through two shared buffers: while the products
// of one step run, the invocation holds the next step's operands in
// registers (loaded before the products, stored after them), so one
// barrier per step and the loads' latency is hidden behind the
// arithmetic. Each operand is loaded along its contiguous dimension
// whichever that is (a row-major or transposed operand), so a subgroup's
// loads are coalesced either way.
layout(local_size_x = 256) in;

#define TILE 128
#define BK 8
// vec4s per row of a shared buffer: 32, and one of padding so that the
// transposing stores of a row-major a do not all land in one bank.
#define ROW (TILE / 4 + 1)

shared vec4 sa[2][BK][ROW];  // sa[buf][k][m / 4][m % 4]
shared vec4 sb[2][BK][ROW];  // sb[buf][k][n / 4][n % 4]

void main() {
  Params p = Params(pc.params);
  F32 a = F32(pc.a), b = F32(pc.b), o = F32(pc.dst);
  const int M = p.v[0], N = p.v[1], K = p.v[2];
  const int as_m = p.v[5], as_k = p.v[6], bs_k = p.v[8], bs_n = p.v[9];
  const int t = int(gl_LocalInvocationIndex);
  const int tx = t & 15, ty = t >> 4;
  const int row0 = int(gl_WorkGroupID.y) * TILE, col0 = int(gl_WorkGroupID.x) * TILE;
  const int batch = int(gl_WorkGroupID.z);
  const int abase = batch * p.v[4], bbase = batch * p.v[7];

  // This invocation's share of each step's operands: 4 of a's 128x8 and 4
  // of b's 8x128, consecutive along the operand's contiguous dimension.
  // a: row am, columns ak .. ak + 3 of the step (k contiguous), or rows
  // am, k = ak .. ak + 3 with m contiguous across invocations.
  const bool a_rows = as_k == 1;
  const int am = a_rows ? t >> 1 : t & 127;
  const int ak = a_rows ? (t & 1) * 4 : (t >> 7) * 4;
  // b: row bk, columns bn .. bn + 3 (n contiguous), or column bn,
  // k = bk .. bk + 3 (k contiguous: a transposed b).
  const bool b_rows = bs_n == 1 || bs_k != 1;
  const int bk = b_rows ? t >> 5 : (t & 1) * 4;
  const int bn = b_rows ? (t & 31) * 4 : t >> 1;
  const int dk = b_rows ? 0 : 1, dn = b_rows ? 1 : 0;

  const int gm = row0 + am;
  float va[4], vb[4];
  vec4 acc[8][2];
  [[unroll]] for (int i = 0; i < 8; ++i) {
    acc[i][0] = vec4(0.0);
    acc[i][1] = vec4(0.0);
  }

  const int steps = (K + BK - 1) / BK;
  int cur = 0;
  for (int s = -1; s < steps; ++s) {
    const int next = s + 1;
    // The next step's operands into registers.
    if (next < steps) {
      const int k0 = next * BK;
      [[unroll]] for (int e = 0; e < 4; ++e) {
        const int gk = k0 + ak + e;
        va[e] = (gm < M && gk < K) ? a.v[abase + gm * as_m + gk * as_k] : 0.0;
        const int gk2 = k0 + bk + e * dk, gn = col0 + bn + e * dn;
        vb[e] = (gk2 < K && gn < N) ? b.v[bbase + gk2 * bs_k + gn * bs_n] : 0.0;
      }
    }
    // This step's products (none before the first step's operands are in).
    if (s >= 0) {
      [[unroll]] for (int k = 0; k < BK; ++k) {
        const vec4 a0 = sa[cur][k][ty], a1 = sa[cur][k][ty + 16];
        const vec4 b0 = sb[cur][k][tx], b1 = sb[cur][k][tx + 16];
        [[unroll]] for (int i = 0; i < 4; ++i) {
          acc[i][0] += a0[i] * b0;
          acc[i][1] += a0[i] * b1;
          acc[i + 4][0] += a1[i] * b0;
          acc[i + 4][1] += a1[i] * b1;
        }
      }
    }
    // The next step's operands into the other buffer, which every
    // invocation finished reading before the last barrier.
    if (next < steps) {
      const int nb = s >= 0 ? cur ^ 1 : cur;
      // Scattered along k, the stores of a subgroup fall in distinct banks
      // (ROW's padding); b's rows are whole vec4s.
      [[unroll]] for (int e = 0; e < 4; ++e) sa[nb][ak + e][am >> 2][am & 3] = va[e];
      if (b_rows) {
        sb[nb][bk][bn >> 2] = vec4(vb[0], vb[1], vb[2], vb[3]);
      } else {
        [[unroll]] for (int e = 0; e < 4; ++e) sb[nb][bk + e][bn >> 2][bn & 3] = vb[e];
      }
    }
    barrier();
    if (s >= 0) cur ^= 1;
  }

  [[unroll]] for (int i = 0; i < 8; ++i) {
    const int r = row0 + (i < 4 ? 4 * ty + i : 64 + 4 * ty + i - 4);
    if (r >= M) continue;
    [[unroll]] for (int h = 0; h < 2; ++h) {
      const int c = col0 + 64 * h + 4 * tx;
      const int at = (batch * M + r) * N + c;
      [[unroll]] for (int j = 0; j < 4; ++j) {
        if (c + j < N) o.v[at + j] = acc[i][h][j];
      }
    }
  }
}
