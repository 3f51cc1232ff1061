#version 460
// The data movement of the convolutions (kernels.h, kConvF32): op 0 im2col,
// op 1 col2im; and pooling (ir::OpKind::kPool): op 2 sums, op 3 the max of
// each window of x [N*C, S] into y [N*C, P], the padding the identity.
// col is [N*C, taps, P]: for each input plane, each kernel tap
// and each output position, the input element the position reads through
// the tap (0 in the padding). Parameter block: [1] C, [2..4] S (input
// spatial dims), [5..7] K (kernel), [8..10] P (output), [11..13] strides,
// [14..16] dilations, [17..19] low padding; ranks below 3 have unit dims
// in front.
#include "common.glsl"
layout(local_size_x = CW_LOCAL) in;

void main() {
  Params p = Params(pc.params);
  F32 a = F32(pc.a), o = F32(pc.dst);
  const ivec3 S = ivec3(p.v[2], p.v[3], p.v[4]);
  const ivec3 K = ivec3(p.v[5], p.v[6], p.v[7]);
  const ivec3 P = ivec3(p.v[8], p.v[9], p.v[10]);
  const ivec3 st = ivec3(p.v[11], p.v[12], p.v[13]);
  const ivec3 dl = ivec3(p.v[14], p.v[15], p.v[16]);
  const ivec3 pad = ivec3(p.v[17], p.v[18], p.v[19]);
  const int taps = K.x * K.y * K.z, plane = S.x * S.y * S.z, outs = P.x * P.y * P.z;
  CW_FOR_EACH(i) {
    if (pc.op == 0) {
      // i over col: a = x [N*C, S], o = col.
      const int q = int(i) % outs, t = (int(i) / outs) % taps, nc = int(i) / (outs * taps);
      const ivec3 pos = ivec3(q / (P.y * P.z), (q / P.z) % P.y, q % P.z);
      const ivec3 k = ivec3(t / (K.y * K.z), (t / K.z) % K.y, t % K.z);
      const ivec3 at = pos * st + k * dl - pad;
      float v = 0.0;
      if (all(greaterThanEqual(at, ivec3(0))) && all(lessThan(at, S))) {
        v = a.v[nc * plane + (at.x * S.y + at.y) * S.z + at.z];
      }
      o.v[i] = v;
    } else if (pc.op >= 2) {
      // i over y: a = x [N*C, S], o = y [N*C, P].
      const int q = int(i) % outs, nc = int(i) / outs;
      const ivec3 pos = ivec3(q / (P.y * P.z), (q / P.z) % P.y, q % P.z);
      float v = pc.op == 3 ? uintBitsToFloat(0xff800000u) : 0.0;
      for (int t = 0; t < taps; ++t) {
        const ivec3 k = ivec3(t / (K.y * K.z), (t / K.z) % K.y, t % K.z);
        const ivec3 at = pos * st + k * dl - pad;
        if (any(lessThan(at, ivec3(0))) || any(greaterThanEqual(at, S))) continue;
        const float e = a.v[nc * plane + (at.x * S.y + at.y) * S.z + at.z];
        v = pc.op == 3 ? max(v, e) : v + e;
      }
      o.v[i] = v;
    } else {
      // i over x: a = col, o = x [N*C, S]; each element sums the taps and
      // positions that read it, taps in order.
      const int s = int(i) % plane, nc = int(i) / plane;
      const ivec3 at = ivec3(s / (S.y * S.z), (s / S.z) % S.y, s % S.z);
      float sum = 0.0;
      for (int t = 0; t < taps; ++t) {
        const ivec3 k = ivec3(t / (K.y * K.z), (t / K.z) % K.y, t % K.z);
        const ivec3 q = at + pad - k * dl;
        if (any(lessThan(q, ivec3(0))) || any(notEqual(q % st, ivec3(0)))) continue;
        const ivec3 pos = q / st;
        if (any(greaterThanEqual(pos, P))) continue;
        sum += a.v[(nc * taps + t) * outs + (pos.x * P.y + pos.y) * P.z + pos.z];
      }
      o.v[i] = sum;
    }
  }
}
