#version 460
#include "common.glsl"
#include "elementwise.glsl"
layout(local_size_x = CW_LOCAL) in;

// A run of f32 element-wise ops in one pass (kernels.h, kFusedF32): each
// invocation computes its elements op by op in registers, reading the
// run's inputs and writing only the values read after it. Operands are
// named through the argument table (a fused dispatch is always recorded
// with one). The parameter block, int32:
//   [0] K ops, [1] I inputs, [2] S stores, then
//   I inputs of 4: slot, byte offset (low, high 32 bits), row length (0:
//     dense; L: read at i % L),
//   K ops of 4: 0 unary or 1 binary, op code, operand 0, operand 1 (an
//     operand below K is op's value, K + j is input j),
//   S stores of 4: the op whose value, slot, byte offset (low, high).
#define CW_MAX_OPS 32
#define CW_MAX_INPUTS 8
#define CW_MAX_STORES 8

uint64_t Slot(int slot, int lo, int hi) {
  return Table(cw_push.table).v[slot] + (uint64_t(uint(hi)) << 32 | uint64_t(uint(lo)));
}

void main() {
  Params p = Params(pc.params);
  const int k = p.v[0], ni = p.v[1], ns = p.v[2];
  uint64_t in_at[CW_MAX_INPUTS];
  uint rows[CW_MAX_INPUTS];
  for (int j = 0; j < ni; ++j) {
    const int e = 3 + 4 * j;
    in_at[j] = Slot(p.v[e], p.v[e + 1], p.v[e + 2]);
    rows[j] = uint(p.v[e + 3]);
  }
  const int ops = 3 + 4 * ni;
  const int stores = ops + 4 * k;
  float value[CW_MAX_OPS];
  float in_v[CW_MAX_INPUTS];
  CW_FOR_EACH(i) {
    for (int j = 0; j < ni; ++j) in_v[j] = F32(in_at[j]).v[rows[j] == 0 ? i : i % rows[j]];
    for (int t = 0; t < k; ++t) {
      const int e = ops + 4 * t;
      const int s0 = p.v[e + 2], s1 = p.v[e + 3];
      const float x = s0 < k ? value[s0] : in_v[s0 - k];
      if (p.v[e] == 0) {
        value[t] = UnaryF32(uint(p.v[e + 1]), x);
      } else {
        const float y = s1 < k ? value[s1] : in_v[s1 - k];
        value[t] = BinaryF32(uint(p.v[e + 1]), x, y);
      }
    }
    // After every read of this element: a store may share its buffer with
    // an input (the planner reuses buffers), read above at the same index.
    for (int s = 0; s < ns; ++s) {
      const int e = stores + 4 * s;
      F32(Slot(p.v[e + 1], p.v[e + 2], p.v[e + 3])).v[i] = value[p.v[e]];
    }
  }
}
